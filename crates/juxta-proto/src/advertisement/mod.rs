//! Advertisements: the XML documents JXTA peers publish about themselves
//! and their resources, byte-compatible with JXSE 2.7 (digest §8).
//!
//! - [`PipeAdvertisement`] (`jxta:PipeAdvertisement`, §6.1) and
//!   [`PeerAdvertisement`] (`jxta:PA`: a minimal `PID`/`GID`/`Name`/`Desc`
//!   document that JXSE accepts; JXSE's `Svc` entries are ignored);
//! - [`PeerGroupAdvertisement`] (`jxta:PGA`), the module class, spec and
//!   impl advertisements ([`module`]), [`RouteAdvertisement`] and
//!   [`AccessPointAdvertisement`] (`jxta:RA`/`jxta:APA`, §5.4) and
//!   [`RdvAdvertisement`];
//! - [`Advertisement`]: any of them, parsed by root element, with the
//!   discovery type, cache key and indexed fields;
//! - [`signed`]: JXSE's advertisement signatures (§8.3);
//! - [`tree`]: the element tree both JXSE output styles are written from.
//!
//! This module also holds the small bounded XML reader and the two JXSE
//! writer styles that the resolver, pipe-binding and socket set-up modules
//! share (crate-private).

pub mod any;
mod flat;
pub mod group;
pub mod module;
pub mod peer;
pub mod pipe;
pub mod rdv;
pub mod route;
pub(crate) mod shallow;
pub mod signed;
pub mod tree;

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use crate::id::IdError;

pub use any::{AdvKind, Advertisement};
pub use group::{PeerGroupAdvertisement, ServiceParam};
pub use module::{ModuleClassAdvertisement, ModuleImplAdvertisement, ModuleSpecAdvertisement};
pub use peer::PeerAdvertisement;
pub use pipe::PipeAdvertisement;
pub use rdv::RdvAdvertisement;
pub use route::{AccessPointAdvertisement, RouteAdvertisement};
pub use signed::{AdvSignature, SignatureError};
pub use tree::XmlElement;

/// Largest XML document any parser in this crate accepts (64 KiB).
pub const MAX_XML_LEN: usize = 64 * 1024;
/// Deepest element nesting accepted.
pub const MAX_XML_DEPTH: usize = 32;
/// Most elements accepted in one document.
pub const MAX_XML_ELEMENTS: usize = 4096;
/// Most attributes accepted on one element.
pub const MAX_XML_ATTRIBUTES: usize = 16;
/// The namespace declaration JXSE puts on every root element.
pub(crate) const JXTA_XMLNS: &str = "xmlns:jxta=\"http://jxta.org\"";
/// The XML declaration JXSE writes first.
pub(crate) const XML_DECL: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
/// Longest foreign string quoted back in an error.
const MAX_ERR_QUOTE: usize = 64;

/// Errors from reading an XML document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    /// The document is larger than [`MAX_XML_LEN`].
    #[error("XML document of {0} bytes exceeds the limit of {MAX_XML_LEN} bytes")]
    TooLarge(usize),
    /// The document is not well-formed.
    #[error("malformed XML: {0}")]
    Malformed(String),
    /// Elements are nested deeper than [`MAX_XML_DEPTH`].
    #[error("XML nested deeper than {MAX_XML_DEPTH} levels")]
    TooDeep,
    /// More than [`MAX_XML_ELEMENTS`] elements.
    #[error("XML document with more than {MAX_XML_ELEMENTS} elements")]
    TooManyElements,
    /// There is no root element.
    #[error("XML document without a root element")]
    NoRoot,
    /// An element carries more than [`MAX_XML_ATTRIBUTES`] attributes.
    #[error("XML element with more than {MAX_XML_ATTRIBUTES} attributes")]
    TooManyAttributes,
    /// The root element is not the expected one.
    #[error("expected root element <{expected}>, found <{found}>")]
    WrongRoot {
        /// The root the parser wanted.
        expected: &'static str,
        /// The root found (truncated).
        found: String,
    },
}

/// A pipe type string that is none of the three JXTA pipe types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown pipe type {0:?}")]
pub struct UnknownPipeType(pub String);

/// Errors from parsing an advertisement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdvError {
    /// The XML is too large, malformed or has the wrong root.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// A required child element is missing.
    #[error("advertisement without <{0}>")]
    Missing(&'static str),
    /// An ID field does not hold an ID of the right type.
    #[error("bad ID in <{field}>: {source}")]
    BadId {
        /// The element holding the ID.
        field: &'static str,
        /// Why it did not parse.
        source: IdError,
    },
    /// The pipe `Type` is unknown.
    #[error(transparent)]
    PipeType(#[from] UnknownPipeType),
    /// A field holds a value outside what JXSE accepts (a number that
    /// does not parse, a value too long, ...).
    #[error("bad <{field}> value {value:?}")]
    BadValue {
        /// The element (or attribute) holding the value.
        field: &'static str,
        /// The value (truncated).
        value: String,
    },
    /// More repeated children than this crate accepts.
    #[error("more than {max} <{field}> entries")]
    TooMany {
        /// The repeated element.
        field: &'static str,
        /// The limit.
        max: usize,
    },
    /// The root element names no advertisement type this crate knows.
    #[error("unknown advertisement type <{0}>")]
    UnknownType(String),
    /// The document carries a JXSE signature (digest §8.3) that does not
    /// verify, or is signed by another peer than the one it describes.
    #[error(transparent)]
    Signature(#[from] SignatureError),
}

/// The type of a pipe (`Type` in a pipe advertisement, digest §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PipeType {
    /// `JxtaUnicast`: unreliable point-to-point.
    Unicast,
    /// `JxtaUnicastSecure`: point-to-point over the TLS transport.
    UnicastSecure,
    /// `JxtaPropagate`: one-to-many.
    Propagate,
}

impl PipeType {
    /// The name JXSE writes (`JxtaUnicast`, `JxtaUnicastSecure`, `JxtaPropagate`).
    pub fn as_str(self) -> &'static str {
        match self {
            PipeType::Unicast => "JxtaUnicast",
            PipeType::UnicastSecure => "JxtaUnicastSecure",
            PipeType::Propagate => "JxtaPropagate",
        }
    }
}

impl fmt::Display for PipeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PipeType {
    type Err = UnknownPipeType;
    /// Parses a pipe type name; surrounding whitespace is ignored.
    ///
    /// ```
    /// use juxta_proto::advertisement::PipeType;
    /// assert_eq!(" JxtaPropagate\n".parse::<PipeType>().unwrap(), PipeType::Propagate);
    /// assert!("JxtaMulticast".parse::<PipeType>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<PipeType, UnknownPipeType> {
        match s.trim() {
            "JxtaUnicast" => Ok(PipeType::Unicast),
            "JxtaUnicastSecure" => Ok(PipeType::UnicastSecure),
            "JxtaPropagate" => Ok(PipeType::Propagate),
            other => Err(UnknownPipeType(truncate(other))),
        }
    }
}

/// Cuts a foreign string for quoting in an error.
pub(crate) fn truncate(s: &str) -> String {
    s.chars().take(MAX_ERR_QUOTE).collect()
}

// ---------------------------------------------------------------------------
// A small bounded XML tree reader.
// ---------------------------------------------------------------------------

/// One element of a parsed document: qualified name, its own text (the
/// concatenated, unescaped text and CDATA directly inside it) and children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct XmlNode {
    pub(crate) name: String,
    /// Attributes, unescaped, in document order.
    pub(crate) attrs: Vec<(String, String)>,
    pub(crate) text: String,
    pub(crate) children: Vec<XmlNode>,
}

impl XmlNode {
    /// The first child with that qualified name.
    pub(crate) fn child(&self, name: &str) -> Option<&XmlNode> {
        self.children.iter().find(|c| c.name == name)
    }

    /// All children with that qualified name.
    pub(crate) fn children_named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = &'a XmlNode> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The element's text, trimmed as JXSE's `getTextValue()` does.
    pub(crate) fn value(&self) -> &str {
        self.text.trim()
    }

    /// The trimmed text of the first child with that name.
    pub(crate) fn child_value(&self, name: &str) -> Option<&str> {
        self.child(name).map(XmlNode::value)
    }

    /// The value of an attribute.
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Checks the root element's name.
    pub(crate) fn expect_root(self, expected: &'static str) -> Result<XmlNode, XmlError> {
        if self.name == expected {
            Ok(self)
        } else {
            Err(XmlError::WrongRoot {
                expected,
                found: truncate(&self.name),
            })
        }
    }
}

fn malformed(e: impl fmt::Display) -> XmlError {
    XmlError::Malformed(truncate(&e.to_string()))
}

/// Parses a whole document into a tree, within the size, depth and element
/// limits. Declarations, DOCTYPE, comments and processing instructions are
/// skipped; attributes are not kept.
pub(crate) fn parse_xml(xml: &str) -> Result<XmlNode, XmlError> {
    parse_xml_limited(xml, MAX_XML_LEN)
}

/// [`parse_xml`] with another document size limit (discovery responses
/// carry up to 50 advertisements and may exceed [`MAX_XML_LEN`]).
pub(crate) fn parse_xml_limited(xml: &str, max_len: usize) -> Result<XmlNode, XmlError> {
    if xml.len() > max_len {
        return Err(XmlError::TooLarge(xml.len()));
    }
    let mut reader = Reader::from_str(xml);
    let mut stack: Vec<XmlNode> = Vec::new();
    let mut root: Option<XmlNode> = None;
    let mut elements = 0usize;
    loop {
        let ev = reader.read_event().map_err(malformed)?;
        let (start, empty) = opened(&ev);
        if let Some(s) = start {
            if root.is_some() {
                return Err(XmlError::Malformed("more than one root element".into()));
            }
            elements += 1;
            if elements > MAX_XML_ELEMENTS {
                return Err(XmlError::TooManyElements);
            }
            if stack.len() >= MAX_XML_DEPTH {
                return Err(XmlError::TooDeep);
            }
            let name = shallow::as_str(xml, s.name().as_ref())?.to_string();
            if !is_xml_name(&name) {
                return Err(XmlError::Malformed(truncate(&format!(
                    "bad element name {name:?}"
                ))));
            }
            let mut attrs = Vec::new();
            for a in attributes_of(s) {
                let a = a.map_err(malformed)?;
                if attrs.len() >= MAX_XML_ATTRIBUTES {
                    return Err(XmlError::TooManyAttributes);
                }
                let key = std::str::from_utf8(a.key.as_ref())
                    .map_err(malformed)?
                    .to_string();
                if !is_xml_name(&key) {
                    return Err(XmlError::Malformed(truncate(&format!(
                        "bad attribute name {key:?}"
                    ))));
                }
                let value = a.unescape_value().map_err(malformed)?.into_owned();
                attrs.push((key, value));
            }
            let node = XmlNode {
                name,
                attrs,
                ..XmlNode::default()
            };
            if empty {
                close(&mut stack, &mut root, node);
            } else {
                stack.push(node);
            }
            continue;
        }
        match ev {
            Event::End(_) => {
                let node = stack
                    .pop()
                    .ok_or_else(|| XmlError::Malformed("unbalanced end tag".into()))?;
                close(&mut stack, &mut root, node);
            }
            Event::Text(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&shallow::text_of(xml, &t)?.0);
                }
            }
            Event::CData(c) => {
                if let Some(top) = stack.last_mut() {
                    top.text
                        .push_str(std::str::from_utf8(&c).map_err(malformed)?);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !stack.is_empty() {
        return Err(XmlError::Malformed("unclosed element".into()));
    }
    root.ok_or(XmlError::NoRoot)
}

/// The attributes of an element. Most elements of a protocol document
/// have none: with nothing after the name, the iterator is not run.
pub(crate) fn attributes_of<'e>(
    s: &'e BytesStart<'_>,
) -> std::iter::Take<quick_xml::events::attributes::Attributes<'e>> {
    let at_most = if s.attributes_raw().is_empty() {
        0
    } else {
        usize::MAX
    };
    s.attributes().take(at_most)
}

/// The element an event opens, if any, and whether it is empty (closed
/// at once).
pub(crate) fn opened<'e, 'a>(ev: &'e Event<'a>) -> (Option<&'e BytesStart<'a>>, bool) {
    match ev {
        Event::Start(s) => (Some(s), false),
        Event::Empty(s) => (Some(s), true),
        _ => (None, false),
    }
}

/// Whether `s` is an XML name as far as this crate's printer needs: ASCII
/// letters, `_` or `:` first, then also digits, `-` and `.`; any other
/// character must be non-ASCII and neither whitespace nor a control
/// character. The reader lets through names such as `a"b`, `a/b` or the
/// empty name, which would print as a different (or broken) document.
fn is_xml_name(s: &str) -> bool {
    // The names of protocol documents are ASCII: checked byte by byte
    // (the same rule as below, restricted to ASCII).
    if s.is_ascii() {
        let ok = |b: u8, first: bool| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | b':' => true,
            b'0'..=b'9' | b'-' | b'.' => !first,
            _ => false,
        };
        let mut bytes = s.bytes();
        return bytes.next().is_some_and(|b| ok(b, true)) && bytes.all(|b| ok(b, false));
    }
    let ok = |c: char, first: bool| match c {
        'a'..='z' | 'A'..='Z' | '_' | ':' => true,
        '0'..='9' | '-' | '.' => !first,
        c => !c.is_ascii() && !c.is_whitespace() && !c.is_control(),
    };
    let mut chars = s.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

fn close(stack: &mut [XmlNode], root: &mut Option<XmlNode>, node: XmlNode) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(node),
        None => *root = Some(node),
    }
}

// ---------------------------------------------------------------------------
// Field helpers shared by the advertisement parsers.
// ---------------------------------------------------------------------------

/// Longest single text field (name, description, address, ...) accepted.
pub const MAX_FIELD_LEN: usize = 4096;

/// Parses a required ID child.
pub(crate) fn req_id<T: FromStr<Err = IdError>>(
    n: &XmlNode,
    field: &'static str,
) -> Result<T, AdvError> {
    opt_id(n, field)?.ok_or(AdvError::Missing(field))
}

/// Parses an optional ID child (absent or empty reads as `None`).
pub(crate) fn opt_id<T: FromStr<Err = IdError>>(
    n: &XmlNode,
    field: &'static str,
) -> Result<Option<T>, AdvError> {
    match n.child_value(field) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|source| AdvError::BadId { field, source }),
    }
}

/// An optional text child, bounded by [`MAX_FIELD_LEN`].
pub(crate) fn opt_text(n: &XmlNode, field: &'static str) -> Result<Option<String>, AdvError> {
    match n.child_value(field) {
        None => Ok(None),
        Some(v) if v.len() > MAX_FIELD_LEN => Err(AdvError::BadValue {
            field,
            value: truncate(v),
        }),
        Some(v) => Ok(Some(v.to_string())),
    }
}

// ---------------------------------------------------------------------------
// JXSE's two XML writer styles.
// ---------------------------------------------------------------------------

/// Escapes element text as JXSE's `LiteXMLElement` does (`&` and `<` only),
/// plus the `>` of a `]]>` sequence, which XML forbids in text.
pub(crate) fn escape_text(s: &str) -> Cow<'_, str> {
    // Runs between the three bytes that may need escaping are copied
    // whole (every protocol document is printed through here).
    let b = s.as_bytes();
    let mut out: Option<String> = None;
    let mut from = 0;
    for i in memchr::memchr3_iter(b'&', b'<', b'>', b) {
        let with = match b[i] {
            b'&' => "&amp;",
            b'<' => "&lt;",
            _ if i >= 2 && &b[i - 2..i] == b"]]" => "&gt;",
            _ => continue,
        };
        let o = out.get_or_insert_with(|| String::with_capacity(s.len() + 16));
        // `i` and `from` sit next to ASCII bytes: char boundaries.
        o.push_str(&s[from..i]);
        o.push_str(with);
        from = i + 1;
    }
    match out {
        None => Cow::Borrowed(s),
        Some(mut o) => {
            o.push_str(&s[from..]);
            Cow::Owned(o)
        }
    }
}

/// A document in JXSE's "pretty" style: the one used for protocol messages
/// whose root has no `xml:space="preserve"` (resolver queries, pipe
/// resolver messages, wire headers). Every text child is written as
/// `\t<Name>\n\t\tvalue\n\t</Name>\n`.
pub(crate) struct PrettyDoc {
    buf: String,
    root: &'static str,
}

impl PrettyDoc {
    /// Starts a document with that root element.
    pub(crate) fn new(root: &'static str) -> PrettyDoc {
        // A resolver query with its issuer's route is about 1 KB: one
        // allocation, not three.
        let mut buf = String::with_capacity(1024);
        buf.push_str(XML_DECL);
        buf.push_str("<!DOCTYPE ");
        buf.push_str(root);
        buf.push_str(">\n<");
        buf.push_str(root);
        buf.push(' ');
        buf.push_str(JXTA_XMLNS);
        buf.push_str(">\n\t\n");
        PrettyDoc { buf, root }
    }

    /// Appends a text child. Like JXSE's pretty printer, the value is
    /// written trimmed.
    pub(crate) fn field(&mut self, name: &str, value: &str) -> &mut PrettyDoc {
        let value = value.trim();
        self.buf.push('\t');
        self.buf.push('<');
        self.buf.push_str(name);
        self.buf.push_str(">\n\t\t");
        self.buf.push_str(&escape_text(value));
        self.buf.push_str("\n\t</");
        self.buf.push_str(name);
        self.buf.push_str(">\n");
        self
    }

    /// Appends a child whose content is already-written XML.
    pub(crate) fn raw(&mut self, name: &str, content: &str) -> &mut PrettyDoc {
        self.buf.push('\t');
        self.buf.push('<');
        self.buf.push_str(name);
        self.buf.push('>');
        self.buf.push_str(content);
        self.buf.push_str("</");
        self.buf.push_str(name);
        self.buf.push_str(">\n");
        self
    }

    /// Closes the root; JXSE ends a document with a newline.
    pub(crate) fn finish(mut self) -> String {
        self.buf.push_str("</");
        self.buf.push_str(self.root);
        self.buf.push_str(">\n");
        self.buf
    }
}

/// A document in JXSE's advertisement style: the root carries
/// `xml:space="preserve"`, so children are written without indentation
/// after a lone `\n\t\n`.
pub(crate) struct AdvDoc {
    buf: String,
    root: &'static str,
}

impl AdvDoc {
    /// Starts an advertisement with that root element.
    pub(crate) fn new(root: &'static str) -> AdvDoc {
        let mut buf = String::with_capacity(320);
        buf.push_str(XML_DECL);
        buf.push_str("<!DOCTYPE ");
        buf.push_str(root);
        buf.push_str(">\n<");
        buf.push_str(root);
        buf.push_str(" xml:space=\"preserve\" ");
        buf.push_str(JXTA_XMLNS);
        buf.push_str(">\n\t\n");
        AdvDoc { buf, root }
    }

    /// Appends a text child.
    pub(crate) fn field(&mut self, name: &str, value: &str) -> &mut AdvDoc {
        self.buf.push('<');
        self.buf.push_str(name);
        self.buf.push('>');
        self.buf.push_str(&escape_text(value));
        self.buf.push_str("</");
        self.buf.push_str(name);
        self.buf.push('>');
        self
    }

    /// Appends already-written XML (a subtree such as `Svc`).
    pub(crate) fn raw(&mut self, xml: &str) -> &mut AdvDoc {
        self.buf.push_str(xml);
        self
    }

    /// Closes the root, with JXSE's final newline.
    pub(crate) fn finish(mut self) -> String {
        self.buf.push_str("</");
        self.buf.push_str(self.root);
        self.buf.push_str(">\n");
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_and_attribute_names_must_print_back() {
        // Found by the `advertisement` and `discovery` fuzz targets: the
        // reader accepted these names, the printer made another document.
        for bad in [
            "<a\"b/>",
            "<a/b/>",
            "<r><\t/></r>",
            "<r x\"y=\"1\"/>",
            "<1a/>",
        ] {
            assert!(
                matches!(parse_xml(bad), Err(XmlError::Malformed(_))),
                "{bad}"
            );
        }
        for good in ["<jxta:PA/>", "<a-b.c_d x:y=\"1\"/>", "<\u{e9}t\u{e9}/>"] {
            assert!(parse_xml(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn pipe_type_names() {
        for t in [
            PipeType::Unicast,
            PipeType::UnicastSecure,
            PipeType::Propagate,
        ] {
            assert_eq!(t.as_str().parse::<PipeType>().unwrap(), t);
            assert_eq!(t.to_string(), t.as_str());
        }
        let e = "x".repeat(1000).parse::<PipeType>().unwrap_err();
        assert_eq!(e.0.len(), MAX_ERR_QUOTE);
    }

    #[test]
    fn tree_reader_basics() {
        let doc = "<?xml version=\"1.0\"?>\n<!DOCTYPE r>\n<!-- c --><r a=\"1\">\n\t<A>\n\t\tx &amp;lt; y\n\t</A><B/><A><![CDATA[<z>]]></A><C><D>deep</D>t</C></r>\n";
        let r = parse_xml(doc).unwrap().expect_root("r").unwrap();
        assert_eq!(r.child_value("A"), Some("x &lt; y"));
        assert_eq!(r.children_named("A").nth(1).unwrap().value(), "<z>");
        assert_eq!(r.child_value("B"), Some(""));
        assert_eq!(r.child_value("C"), Some("t"));
        assert_eq!(r.child("C").unwrap().child_value("D"), Some("deep"));
        assert_eq!(r.child("Q"), None);
    }

    #[test]
    fn tree_reader_rejects_bad_input() {
        assert!(matches!(parse_xml(""), Err(XmlError::NoRoot)));
        assert!(matches!(
            parse_xml("<a><b></a>"),
            Err(XmlError::Malformed(_))
        ));
        assert!(matches!(parse_xml("<a>"), Err(XmlError::Malformed(_))));
        assert!(matches!(parse_xml("<a/><b/>"), Err(XmlError::Malformed(_))));
        assert!(matches!(
            parse_xml("<a>&bogus;</a>"),
            Err(XmlError::Malformed(_))
        ));
        let big = format!("<a>{}</a>", " ".repeat(MAX_XML_LEN));
        assert!(matches!(parse_xml(&big), Err(XmlError::TooLarge(_))));
        let deep = "<a>".repeat(MAX_XML_DEPTH + 1);
        assert!(matches!(parse_xml(&deep), Err(XmlError::TooDeep)));
        let many = format!("<a>{}</a>", "<b/>".repeat(MAX_XML_ELEMENTS));
        assert!(matches!(parse_xml(&many), Err(XmlError::TooManyElements)));
        assert!(matches!(
            parse_xml("<a/>").unwrap().expect_root("b"),
            Err(XmlError::WrongRoot { expected: "b", .. })
        ));
    }

    #[test]
    fn escaping_matches_jxse() {
        assert_eq!(escape_text("a>b\"c'"), "a>b\"c'");
        assert_eq!(escape_text("<a & b>"), "&lt;a &amp; b>");
        assert_eq!(escape_text("x]]>y"), "x]]&gt;y");
        let doc = format!("<r>{}</r>", escape_text("<&]]>>"));
        assert_eq!(parse_xml(&doc).unwrap().value(), "<&]]>>");
    }

    #[test]
    fn writer_styles() {
        let mut p = PrettyDoc::new("jxta:X");
        p.field("A", "1");
        assert_eq!(
            p.finish(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:X>\n<jxta:X xmlns:jxta=\"http://jxta.org\">\n\t\n\t<A>\n\t\t1\n\t</A>\n</jxta:X>\n"
        );
        let mut a = AdvDoc::new("jxta:Y");
        a.field("B", "2");
        assert_eq!(
            a.finish(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:Y>\n<jxta:Y xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<B>2</B></jxta:Y>\n"
        );
    }

    /// The rule of `is_xml_name` on characters, as it was before its ASCII
    /// fast path.
    fn by_chars(s: &str) -> bool {
        let ok = |c: char, first: bool| match c {
            'a'..='z' | 'A'..='Z' | '_' | ':' => true,
            '0'..='9' | '-' | '.' => !first,
            c => !c.is_ascii() && !c.is_whitespace() && !c.is_control(),
        };
        let mut chars = s.chars();
        chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
    }

    proptest::proptest! {
        #[test]
        fn the_ascii_name_check_is_the_character_rule(s in "[a-zA-Z0-9_:.\\- \"/<>=&é\u{85}\u{2028}]{0,6}") {
            proptest::prop_assert_eq!(is_xml_name(&s), by_chars(&s), "{:?}", s);
        }
    }

    #[test]
    fn names_by_the_ascii_path_and_the_character_path() {
        for (name, ok) in [
            ("jxta:RA", true),
            ("_a-1.b", true),
            ("1a", false),
            ("-a", false),
            ("", false),
            ("a b", false),
            ("a\"b", false),
            ("é", true),
            ("aé1", true),
            ("a\u{2028}", false),
        ] {
            assert_eq!(is_xml_name(name), ok, "{name:?}");
            assert_eq!(by_chars(name), ok, "{name:?}");
        }
    }
}
