//! A small owned XML element tree with JXSE's two output styles.
//!
//! JXSE builds every document as a `LiteXMLDocument` tree and prints it
//! with `LiteXMLElement.printNice`; it also signs advertisements by hashing
//! that tree (digest §8.3). [`XmlElement`] mirrors that tree so one value
//! can be both written byte for byte as JXSE writes it and hashed as JXSE
//! hashes it. It also carries the opaque parts of advertisements that
//! Juxta does not interpret (service parameters, compatibility statements).
//!
//! Printing rules (from `printNice`): an element with neither text nor
//! children is written `<X/>`. Otherwise, in an indented context the start
//! tag, the trimmed text (possibly empty) and the end tag each sit on their
//! own line, indented with tabs; children of an element carrying
//! `xml:space="preserve"` are written without any whitespace; an element
//! carrying another `xml:space` value indents its children one level
//! deeper even inside an unindented context. Attributes are written in the
//! order stored here, which for JXSE is the reverse of the order in which
//! they were added.

use sha1::{Digest, Sha1};

use super::{escape_text, XmlNode, XML_DECL};

/// The `xmlns:jxta` attribute every advertisement root carries.
pub const ATTR_XMLNS: (&str, &str) = ("xmlns:jxta", "http://jxta.org");
/// The `xml:space="preserve"` attribute of unformatted documents.
pub const ATTR_PRESERVE: (&str, &str) = ("xml:space", "preserve");

/// One XML element: name, attributes (in output order), text and children.
///
/// ```
/// use juxta_proto::advertisement::XmlElement;
/// let mut parm = XmlElement::new("Parm");
/// parm.push(XmlElement::text("login", "alice:PWD:"));
/// assert_eq!(parm.to_compact(), "<Parm><login>alice:PWD:</login></Parm>");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct XmlElement {
    /// Qualified name, e.g. `jxta:RA` or `EA`.
    pub name: String,
    /// Attributes in the order they are written.
    pub attrs: Vec<(String, String)>,
    /// The element's own text, unescaped (for parsed elements: trimmed).
    pub text: String,
    /// Child elements in order.
    pub children: Vec<XmlElement>,
}

impl XmlElement {
    /// An element without attributes, text or children.
    pub fn new(name: impl Into<String>) -> XmlElement {
        XmlElement {
            name: name.into(),
            ..XmlElement::default()
        }
    }

    /// An element holding only text.
    pub fn text(name: impl Into<String>, text: impl Into<String>) -> XmlElement {
        XmlElement {
            name: name.into(),
            text: text.into(),
            ..XmlElement::default()
        }
    }

    /// An advertisement root as JXSE's `getDocument` makes it:
    /// `xml:space="preserve" xmlns:jxta="http://jxta.org"`.
    pub fn adv_root(name: impl Into<String>) -> XmlElement {
        XmlElement::new(name)
            .with_attr(ATTR_PRESERVE.0, ATTR_PRESERVE.1)
            .with_attr(ATTR_XMLNS.0, ATTR_XMLNS.1)
    }

    /// An advertisement root once copied into another document
    /// (`StructuredDocumentUtils.copyElements` reverses the attribute
    /// order): `xmlns:jxta="http://jxta.org" xml:space="preserve"`.
    pub fn nested_adv_root(name: impl Into<String>) -> XmlElement {
        XmlElement::new(name)
            .with_attr(ATTR_XMLNS.0, ATTR_XMLNS.1)
            .with_attr(ATTR_PRESERVE.0, ATTR_PRESERVE.1)
    }

    /// This subtree as JXSE's `StructuredDocumentUtils.copyElements`
    /// leaves it inside another document: every element's attributes in
    /// reverse order (each is re-added in front of the others).
    pub fn copied(&self) -> XmlElement {
        self.clone().into_copied()
    }

    /// [`XmlElement::copied`] of an element no longer needed as it was:
    /// the attributes reversed in place, nothing cloned.
    pub fn into_copied(mut self) -> XmlElement {
        self.reverse_attrs();
        self
    }

    fn reverse_attrs(&mut self) {
        self.attrs.reverse();
        for c in &mut self.children {
            c.reverse_attrs();
        }
    }

    /// Adds an attribute at the end.
    pub fn with_attr(mut self, k: impl Into<String>, v: impl Into<String>) -> XmlElement {
        self.attrs.push((k.into(), v.into()));
        self
    }

    /// Appends a child.
    pub fn push(&mut self, child: XmlElement) -> &mut XmlElement {
        self.children.push(child);
        self
    }

    /// Appends a text child.
    pub fn push_text(&mut self, name: &str, text: &str) -> &mut XmlElement {
        self.push(XmlElement::text(name, text))
    }

    /// The value of an attribute.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first child with that name.
    pub fn child(&self, name: &str) -> Option<&XmlElement> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The same element under another name (JXSE's `copyElements` with a
    /// new name, e.g. a service parameter written as `Parm`).
    pub fn renamed(mut self, name: impl Into<String>) -> XmlElement {
        self.name = name.into();
        self
    }

    /// Number of elements in this subtree (itself included).
    pub fn count(&self) -> usize {
        1 + self.children.iter().map(XmlElement::count).sum::<usize>()
    }

    /// Parses a document (or a lone element) into a tree, within the
    /// limits of this crate's XML reader; texts are trimmed.
    pub fn parse(xml: &str) -> Result<XmlElement, super::XmlError> {
        Ok(XmlElement::from_node(&super::parse_xml(xml)?))
    }

    /// Converts a parsed node (text trimmed as JXSE's `getTextValue`).
    pub(crate) fn from_node(node: &XmlNode) -> XmlElement {
        XmlElement {
            name: node.name.clone(),
            attrs: node.attrs.clone(),
            text: node.value().to_string(),
            children: node.children.iter().map(XmlElement::from_node).collect(),
        }
    }

    /// The element written without any whitespace (as inside an
    /// `xml:space="preserve"` parent).
    pub fn to_compact(&self) -> String {
        let mut out = String::new();
        self.print(&mut out, None);
        out
    }

    /// [`XmlElement::to_compact`] appended to `out`.
    pub(crate) fn write_compact(&self, out: &mut String) {
        self.print(out, None);
    }

    /// A whole document: XML declaration, DOCTYPE, then this element as
    /// the root at indent 0 (JXSE's `XMLDocument.toString()`), with the
    /// final newline.
    pub fn to_document(&self) -> String {
        let mut out = String::with_capacity(512);
        out.push_str(XML_DECL);
        out.push_str("<!DOCTYPE ");
        out.push_str(&self.name);
        out.push_str(">\n");
        self.print(&mut out, Some(0));
        out
    }

    /// `printNice`: `indent` is `None` for JXSE's `-1` (no whitespace).
    fn print(&self, out: &mut String, indent: Option<usize>) {
        let tabs = |out: &mut String, n: usize| {
            for _ in 0..n {
                out.push('\t');
            }
        };
        if let Some(i) = indent {
            tabs(out, i);
        }
        out.push('<');
        out.push_str(&self.name);
        for (k, v) in &self.attrs {
            out.push(' ');
            out.push_str(k);
            out.push('=');
            // JXSE picks the quote that the value does not contain and
            // escapes nothing; escape what XML requires anyway.
            let q = if v.contains('"') { '\'' } else { '"' };
            out.push(q);
            for c in v.chars() {
                match c {
                    '&' => out.push_str("&amp;"),
                    '<' => out.push_str("&lt;"),
                    '\'' if q == '\'' => out.push_str("&apos;"),
                    c => out.push(c),
                }
            }
            out.push(q);
        }
        let empty = self.text.is_empty() && self.children.is_empty();
        out.push_str(if empty { "/>" } else { ">" });
        if indent.is_some() {
            out.push('\n');
        }
        if empty {
            return;
        }
        match indent {
            Some(i) => {
                tabs(out, i + 1);
                out.push_str(&escape_text(self.text.trim()));
                out.push('\n');
            }
            None => out.push_str(&escape_text(&self.text)),
        }
        let child_indent = match self.attr("xml:space") {
            Some("preserve") => None,
            Some(_) => Some(indent.map_or(0, |i| i + 1)),
            None => indent.map(|i| i + 1),
        };
        for c in &self.children {
            c.print(out, child_indent);
        }
        if let Some(i) = indent {
            tabs(out, i);
        }
        out.push_str("</");
        out.push_str(&self.name);
        out.push('>');
        if indent.is_some() {
            out.push('\n');
        }
    }

    /// Feeds the tree to a SHA-1 digest as JXSE's
    /// `PSEUtils.xmlElementDigest` does: name, each attribute's name and
    /// value, the text, then every child not named in `ignore`
    /// (only at this level), recursively.
    pub(crate) fn digest_into(&self, h: &mut Sha1, ignore: &[&str]) {
        java_digest_str(h, &self.name);
        for (k, v) in &self.attrs {
            java_digest_str(h, k);
            java_digest_str(h, v);
        }
        java_digest_str(h, &self.text);
        for c in &self.children {
            if ignore.contains(&c.name.as_str()) {
                continue;
            }
            c.digest_into(h, &[]);
        }
    }

    /// SHA-1 of [`XmlElement::digest_into`].
    pub(crate) fn sha1(&self, ignore: &[&str]) -> [u8; 20] {
        let mut h = Sha1::new();
        self.digest_into(&mut h, ignore);
        h.finalize().into()
    }
}

/// `PSEUtils.writeStringToDigest`: UTF-8, except that each UTF-16
/// surrogate (so each half of a character outside the BMP) becomes `?`.
fn java_digest_str(h: &mut Sha1, s: &str) {
    if s.chars().all(|c| (c as u32) < 0x10000) {
        h.update(s.as_bytes());
        return;
    }
    let mut buf = [0u8; 4];
    for c in s.chars() {
        if (c as u32) >= 0x10000 {
            h.update(b"??");
        } else {
            h.update(c.encode_utf8(&mut buf).as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::parse_xml;

    #[test]
    fn prints_like_jxse() {
        let mut root = XmlElement::adv_root("jxta:X");
        root.push_text("A", "a<b");
        root.push(XmlElement::new("Fwd"));
        let mut n = XmlElement::nested_adv_root("jxta:APA");
        n.push_text("EA", "tcp://x");
        root.push(n);
        assert_eq!(
            root.to_document(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:X>\n<jxta:X xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<A>a&lt;b</A><Fwd/><jxta:APA xmlns:jxta=\"http://jxta.org\" xml:space=\"preserve\"><EA>tcp://x</EA></jxta:APA></jxta:X>\n"
        );
        let mut pretty = XmlElement::new("jxta:Q").with_attr("xmlns:jxta", "http://jxta.org");
        pretty.push_text("A", " 1 ");
        let mut w = XmlElement::new("W");
        w.push(root.children[2].clone());
        pretty.push(w);
        assert_eq!(
            pretty.to_document(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:Q>\n<jxta:Q xmlns:jxta=\"http://jxta.org\">\n\t\n\t<A>\n\t\t1\n\t</A>\n\t<W>\n\t\t\n\t\t<jxta:APA xmlns:jxta=\"http://jxta.org\" xml:space=\"preserve\">\n\t\t\t\n<EA>tcp://x</EA>\t\t</jxta:APA>\n\t</W>\n</jxta:Q>\n"
        );
    }

    #[test]
    fn parse_round_trip_keeps_attributes() {
        let xml = "<r a='x\"y' b=\"&amp;\"><c k=\"v\">t</c></r>";
        let e = XmlElement::from_node(&parse_xml(xml).unwrap());
        assert_eq!(e.attr("a"), Some("x\"y"));
        assert_eq!(e.attr("b"), Some("&"));
        let again = XmlElement::from_node(&parse_xml(&e.to_compact()).unwrap());
        assert_eq!(again, e);
    }

    #[test]
    fn java_digest_replaces_surrogates() {
        let mut a = Sha1::new();
        java_digest_str(&mut a, "x\u{1F600}é");
        let mut b = Sha1::new();
        b.update("x??é".as_bytes());
        assert_eq!(a.finalize(), b.finalize());
    }
}
