//! SRDI, the Shared Resource Distributed Index (digest §7.4), sans-IO.
//!
//! Edges do not answer discovery queries group-wide by themselves: each edge
//! pushes index entries ("I hold an advertisement whose `Name` is `x`") to
//! its rendezvous, the rendezvous replicates every entry to the rendezvous
//! whose position in the sorted peer view matches the entry's hash, and a
//! query arriving at any rendezvous is forwarded to the peers the index
//! names, or to the replica, or walked along the peer view on a miss.
//!
//! - this module: the `jxta:GenSRDI` document ([`SrdiMessage`]), its
//!   `jxta:ResolverSRDI` envelope ([`ResolverSrdi`]) and the gzip element it
//!   travels in, exactly as JXSE 2.7 writes them;
//! - [`index`]: the bounded index (key → peers with expiry);
//! - [`placement`]: the replica peer for a key (JXSE's hash placement),
//!   replication bins, and the limited-range walker as a pure function;
//! - [`search`]: the search models for the benchmarks (centralized,
//!   flooding, SRDI) and what a rendezvous does with a query under each;
//! - [`node`]: all of the above as the SRDI state machine of one
//!   rendezvous (index, replicate, decide, answer busy);
//! - [`flow`]: per-querier admission (token buckets) with explicit busy
//!   answers, so a loaded rendezvous paces its queriers and never drops
//!   silently.

pub mod flow;
pub mod index;
pub mod node;
pub mod placement;
pub mod search;

use std::cell::RefCell;
use std::io::Read;

use bytes::Bytes;
use quick_xml::events::Event;
use quick_xml::Reader;

use crate::advertisement::{
    escape_text, parse_xml, truncate, PrettyDoc, XmlError, JXTA_XMLNS, MAX_XML_DEPTH, MAX_XML_LEN,
    XML_DECL,
};
use crate::id::{IdError, PeerId};
use crate::message::{Element, Message, MIME_XML_UTF8, NS_JXTA};
use crate::resolver::srdi_queue;

/// Root of the SRDI payload document.
pub const SRDI_ROOT: &str = "jxta:GenSRDI";
/// Root of the resolver SRDI envelope.
pub const RESOLVER_SRDI_ROOT: &str = "jxta:ResolverSRDI";
/// The MIME type of a gzipped SRDI element.
pub const MIME_GZIP: &str = "application/gzip";
/// Scope value asking a rendezvous to replicate the entries.
pub const SCOPE_REPLICATE: i32 = 1;
/// Most entries accepted in one SRDI message.
pub const MAX_ENTRIES_PER_MESSAGE: usize = 2048;
/// Longest key, primary key or value accepted.
pub const MAX_KEY_LEN: usize = 1024;
/// JXSE's primary keys for discovery entries, by discovery type.
pub const DISCOVERY_PKEYS: [&str; 3] = ["Peers", "Groups", "Adv"];

/// Errors from an SRDI message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SrdiError {
    /// An edge pushed entries in another peer's name (only peer-view
    /// members replicate entries of other peers).
    #[error("SRDI entries of {owner} pushed by {sender}")]
    NotOwner {
        /// The peer the entries name.
        owner: Box<crate::id::PeerId>,
        /// The peer that sent them.
        sender: Box<crate::id::PeerId>,
    },
    /// The XML is too large, malformed or has the wrong root.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// A required child is missing.
    #[error("SRDI document without <{0}>")]
    Missing(&'static str),
    /// A number does not parse.
    #[error("bad {field} value {value:?}")]
    BadNumber {
        /// The field.
        field: &'static str,
        /// Its text (truncated).
        value: String,
    },
    /// The publisher ID is malformed.
    #[error("bad PID: {0}")]
    BadPeerId(#[from] IdError),
    /// More than [`MAX_ENTRIES_PER_MESSAGE`] entries, or a key or value
    /// longer than [`MAX_KEY_LEN`].
    #[error("SRDI message exceeds its bounds ({0})")]
    TooLarge(&'static str),
    /// The message has no SRDI element for that group.
    #[error("message has no jxta:{0} element")]
    NoElement(String),
    /// The element is not valid gzip or not UTF-8.
    #[error("SRDI element does not decode: {0}")]
    BadEncoding(&'static str),
}

/// One index entry: `(SKey, value)` held by the publisher until
/// `expiration` ms from now.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SrdiEntry {
    /// The attribute (`SKey`), e.g. `Name`.
    pub key: String,
    /// The value (element text).
    pub value: String,
    /// Relative lifetime in ms (`Expiration`); JXSE writes -1 when unknown.
    pub expiration: i64,
}

/// The `jxta:GenSRDI` document.
///
/// ```
/// use juxta_proto::srdi::{SrdiEntry, SrdiMessage};
/// let peer = "urn:jxta:cbid-59616261646162614A78746150325033000000000000000000000000000000AB03".parse().unwrap();
/// let m = SrdiMessage {
///     peer,
///     primary_key: "Adv".into(),
///     scope: 1,
///     entries: vec![SrdiEntry { key: "Name".into(), value: "x".into(), expiration: 7_200_000 }],
/// };
/// assert!(m.to_xml().contains("\t<Entry SKey=\"Name\" Expiration=\"7200000\">\n\t\tx\n\t</Entry>\n"));
/// assert_eq!(SrdiMessage::parse(&m.to_xml()).unwrap(), m);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrdiMessage {
    /// `PID`: the peer holding the resources.
    pub peer: PeerId,
    /// `PKey`: primary key, e.g. `Adv` or a pipe type.
    pub primary_key: String,
    /// `ttl`: scope; [`SCOPE_REPLICATE`] asks for replication. Written only
    /// when > 0.
    pub scope: i32,
    /// The entries.
    pub entries: Vec<SrdiEntry>,
}

/// Writes an attribute as `LiteXMLElement.addAttribute` does (double quotes
/// unless the value holds one), escaping `&` and `<` so the result stays
/// well-formed (JXSE writes them raw).
fn push_attr(buf: &mut String, name: &str, value: &str) {
    let q = if value.contains('"') { '\'' } else { '"' };
    buf.push(' ');
    buf.push_str(name);
    buf.push('=');
    buf.push(q);
    for c in value.chars() {
        match c {
            '&' => buf.push_str("&amp;"),
            '<' => buf.push_str("&lt;"),
            '\'' if q == '\'' => buf.push_str("&apos;"),
            c => buf.push(c),
        }
    }
    buf.push(q);
}

fn pretty_child(buf: &mut String, name: &str, attrs: &[(&str, &str)], value: &str) {
    buf.push_str("\t<");
    buf.push_str(name);
    for (k, v) in attrs {
        push_attr(buf, k, v);
    }
    buf.push_str(">\n\t\t");
    buf.push_str(&escape_text(value.trim()));
    buf.push_str("\n\t</");
    buf.push_str(name);
    buf.push_str(">\n");
}

impl SrdiMessage {
    /// The document in JXSE's pretty style. JXSE adds `Expiration` before
    /// `SKey` and each attribute is inserted right after the tag name, so
    /// `SKey` comes first. (JXSE keeps entries in a `HashSet`, so the order
    /// of several entries in its output is arbitrary; ours is the vector's.)
    pub fn to_xml(&self) -> String {
        let mut buf = String::with_capacity(256 + self.entries.len() * 96);
        buf.push_str(XML_DECL);
        buf.push_str("<!DOCTYPE ");
        buf.push_str(SRDI_ROOT);
        buf.push_str(">\n<");
        buf.push_str(SRDI_ROOT);
        buf.push(' ');
        buf.push_str(JXTA_XMLNS);
        buf.push_str(">\n\t\n");
        pretty_child(&mut buf, "PID", &[], &self.peer.to_string());
        pretty_child(&mut buf, "PKey", &[], &self.primary_key);
        if self.scope > 0 {
            pretty_child(&mut buf, "ttl", &[], &self.scope.to_string());
        }
        for e in &self.entries {
            let exp = e.expiration.to_string();
            pretty_child(
                &mut buf,
                "Entry",
                &[("SKey", &e.key), ("Expiration", &exp)],
                &e.value,
            );
        }
        buf.push_str("</");
        buf.push_str(SRDI_ROOT);
        buf.push_str(">\n");
        buf
    }

    /// Parses a `jxta:GenSRDI` document. As in JXSE: `PID` is required (a
    /// message without a publisher is useless), a missing `PKey` reads as
    /// empty, a missing `SKey` as `NA`, a missing `Expiration` as -1;
    /// unknown children are ignored. Text is trimmed.
    pub fn parse(xml: &str) -> Result<SrdiMessage, SrdiError> {
        if xml.len() > MAX_XML_LEN {
            return Err(XmlError::TooLarge(xml.len()).into());
        }
        let mut r = Reader::from_str(xml);
        let mut depth = 0usize;
        let mut root_seen = false;
        // Current depth-1 child: name, attributes (SKey, Expiration), text.
        let mut cur: Option<(String, Option<String>, Option<String>, String)> = None;
        let mut peer = None;
        let mut pkey = None;
        let mut scope = 0i32;
        let mut entries = Vec::new();
        let mal = |e: &dyn std::fmt::Display| {
            SrdiError::Xml(XmlError::Malformed(truncate(&e.to_string())))
        };
        loop {
            let ev = r.read_event().map_err(|e| mal(&e))?;
            match ev {
                Event::Start(ref s) | Event::Empty(ref s) => {
                    let empty = matches!(ev, Event::Empty(_));
                    let name = std::str::from_utf8(s.name().as_ref())
                        .map_err(|e| mal(&e))?
                        .to_string();
                    if depth == 0 {
                        if root_seen {
                            return Err(
                                XmlError::Malformed("more than one root element".into()).into()
                            );
                        }
                        root_seen = true;
                        if name != SRDI_ROOT {
                            return Err(XmlError::WrongRoot {
                                expected: SRDI_ROOT,
                                found: truncate(&name),
                            }
                            .into());
                        }
                    } else if depth == 1 {
                        let mut skey = None;
                        let mut exp = None;
                        for a in s.attributes() {
                            let a = a.map_err(|e| mal(&e))?;
                            let v = a.unescape_value().map_err(|e| mal(&e))?.into_owned();
                            match a.key.as_ref() {
                                b"SKey" => skey = Some(v),
                                b"Expiration" => exp = Some(v),
                                _ => {}
                            }
                        }
                        cur = Some((name, skey, exp, String::new()));
                    }
                    if empty {
                        if depth == 1 {
                            Self::finish_child(
                                cur.take(),
                                &mut peer,
                                &mut pkey,
                                &mut scope,
                                &mut entries,
                            )?;
                        }
                    } else {
                        depth += 1;
                        if depth > MAX_XML_DEPTH {
                            return Err(XmlError::TooDeep.into());
                        }
                    }
                }
                Event::End(_) => {
                    if depth == 0 {
                        return Err(XmlError::Malformed("unbalanced end tag".into()).into());
                    }
                    depth -= 1;
                    if depth == 1 {
                        Self::finish_child(
                            cur.take(),
                            &mut peer,
                            &mut pkey,
                            &mut scope,
                            &mut entries,
                        )?;
                    }
                }
                Event::Text(t) if depth == 2 => {
                    if let Some(c) = cur.as_mut() {
                        c.3.push_str(&t.unescape().map_err(|e| mal(&e))?);
                    }
                }
                Event::CData(t) if depth == 2 => {
                    if let Some(c) = cur.as_mut() {
                        c.3.push_str(std::str::from_utf8(&t).map_err(|e| mal(&e))?);
                    }
                }
                Event::Eof => break,
                _ => {}
            }
        }
        if depth != 0 {
            return Err(XmlError::Malformed("unclosed element".into()).into());
        }
        if !root_seen {
            return Err(XmlError::NoRoot.into());
        }
        Ok(SrdiMessage {
            peer: peer.ok_or(SrdiError::Missing("PID"))?,
            primary_key: pkey.unwrap_or_default(),
            scope,
            entries,
        })
    }

    fn finish_child(
        cur: Option<(String, Option<String>, Option<String>, String)>,
        peer: &mut Option<PeerId>,
        pkey: &mut Option<String>,
        scope: &mut i32,
        entries: &mut Vec<SrdiEntry>,
    ) -> Result<(), SrdiError> {
        let Some((name, skey, exp, text)) = cur else {
            return Ok(());
        };
        let text = text.trim();
        let check = |s: &str, what| {
            if s.len() > MAX_KEY_LEN {
                Err(SrdiError::TooLarge(what))
            } else {
                Ok(s.to_string())
            }
        };
        match name.as_str() {
            "PID" => *peer = Some(text.parse()?),
            "PKey" => *pkey = Some(check(text, "PKey")?),
            "ttl" => {
                // A negative scope means what 0 means (no replication) and
                // is read as 0, so the message is written back the same.
                *scope = text
                    .parse::<i32>()
                    .map_err(|_| SrdiError::BadNumber {
                        field: "ttl",
                        value: truncate(text),
                    })?
                    .max(0)
            }
            "Entry" => {
                if entries.len() >= MAX_ENTRIES_PER_MESSAGE {
                    return Err(SrdiError::TooLarge("entries"));
                }
                let expiration = match exp {
                    None => -1,
                    Some(e) => e.trim().parse().map_err(|_| SrdiError::BadNumber {
                        field: "Expiration",
                        value: truncate(&e),
                    })?,
                };
                entries.push(SrdiEntry {
                    key: check(skey.as_deref().unwrap_or("NA"), "SKey")?,
                    value: check(text, "value")?,
                    expiration,
                });
            }
            _ => {}
        }
        Ok(())
    }
}

/// The resolver's SRDI envelope `jxta:ResolverSRDI`: which SRDI handler the
/// payload is for, and the `jxta:GenSRDI` document as escaped text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverSrdi {
    /// `HandlerName`: the SRDI handler, e.g. the discovery service's name.
    pub handler: String,
    /// `Payload`: the handler's document, unescaped.
    pub payload: String,
}

impl ResolverSrdi {
    /// The envelope in JXSE's pretty style (without the optional credential).
    pub fn to_xml(&self) -> String {
        let mut d = PrettyDoc::new(RESOLVER_SRDI_ROOT);
        d.field("HandlerName", &self.handler)
            .field("Payload", &self.payload);
        d.finish()
    }

    /// Parses an envelope; `HandlerName` and `Payload` are required,
    /// `jxta:Cred` and unknown children are ignored.
    pub fn parse(xml: &str) -> Result<ResolverSrdi, SrdiError> {
        let root = parse_xml(xml)?.expect_root(RESOLVER_SRDI_ROOT)?;
        Ok(ResolverSrdi {
            handler: root
                .child_value("HandlerName")
                .ok_or(SrdiError::Missing("HandlerName"))?
                .to_string(),
            payload: root
                .child_value("Payload")
                .ok_or(SrdiError::Missing("Payload"))?
                .to_string(),
        })
    }

    /// The message element JXSE sends: namespace `jxta`, named after the
    /// group's SRDI queue (`<group>Srdi`), gzip-compressed, typed
    /// `application/gzip`.
    pub fn to_element(&self, group_unique: &str) -> Element {
        let bytes = gzip(self.to_xml().as_bytes());
        Element::typed(
            NS_JXTA,
            &srdi_queue(group_unique),
            MIME_GZIP,
            Bytes::from(bytes),
        )
    }

    /// Finds and parses the SRDI element of a message for that group; both
    /// the gzip form and a plain `text/xml` element are accepted (as JXSE's
    /// `DemuxSrdi`). Decompression stops at [`MAX_XML_LEN`].
    pub fn from_message(msg: &Message, group_unique: &str) -> Result<ResolverSrdi, SrdiError> {
        let name = srdi_queue(group_unique);
        let e = msg
            .get(NS_JXTA, &name)
            .ok_or_else(|| SrdiError::NoElement(name.clone()))?;
        let base = e.mime().split(';').next().unwrap_or("").trim();
        if base.eq_ignore_ascii_case(MIME_GZIP) {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&e.data[..])
                .take(MAX_XML_LEN as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|_| SrdiError::BadEncoding("gzip"))?;
            if out.len() > MAX_XML_LEN {
                return Err(XmlError::TooLarge(out.len()).into());
            }
            let s = String::from_utf8(out).map_err(|_| SrdiError::BadEncoding("UTF-8"))?;
            ResolverSrdi::parse(&s)
        } else {
            let _ = MIME_XML_UTF8;
            ResolverSrdi::parse(e.as_str().ok_or(SrdiError::BadEncoding("UTF-8"))?)
        }
    }

    /// Parses the payload as a `jxta:GenSRDI` document.
    pub fn srdi_message(&self) -> Result<SrdiMessage, SrdiError> {
        SrdiMessage::parse(&self.payload)
    }
}

thread_local! {
    /// One deflate state per thread, reset for every message: a new one
    /// allocates and zeroes about 300 KB, which dominated the cost of
    /// every SRDI message (profiled with `juxta sim`).
    static DEFLATE: RefCell<flate2::Compress> =
        RefCell::new(flate2::Compress::new(flate2::Compression::default(), false));
}

/// `data` gzip-compressed: the header `flate2`'s `GzEncoder` writes (no
/// name, no time, unknown OS), raw deflate at the default level, CRC-32
/// and length.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    DEFLATE.with(|c| {
        let mut c = c.borrow_mut();
        c.reset();
        // Each round either consumes input or fills the spare capacity,
        // which is then doubled: bounded by the input's size.
        loop {
            let done = c.total_in() as usize;
            let input = data.get(done..).unwrap_or_default();
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(64));
            }
            match c.compress_vec(input, &mut out, flate2::FlushCompress::Finish) {
                Ok(flate2::Status::StreamEnd) | Err(_) => break,
                Ok(_) => {}
            }
        }
    });
    let mut crc = flate2::Crc::new();
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn gzip_is_what_gzencoder_writes_and_state_is_reused() {
        use std::io::Write;
        for text in ["", "a", &"<Entry>x</Entry>".repeat(5_000)] {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(text.as_bytes()).unwrap();
            let want = gz.finish().unwrap();
            // Twice: the reset state gives the same bytes.
            assert_eq!(super::gzip(text.as_bytes()), want);
            assert_eq!(super::gzip(text.as_bytes()), want);
        }
    }
    use super::*;

    const P1: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    fn sample() -> SrdiMessage {
        SrdiMessage {
            peer: P1.parse().unwrap(),
            primary_key: "JxtaUnicast".into(),
            scope: SCOPE_REPLICATE,
            entries: vec![
                SrdiEntry {
                    key: "Id".into(),
                    value: "urn:jxta:uuid-59616261646162614E50472050325033C0FFEE04".into(),
                    expiration: 7_200_000,
                },
                SrdiEntry {
                    key: "Name".into(),
                    value: "a & <b>".into(),
                    expiration: -1,
                },
            ],
        }
    }

    #[test]
    fn gen_srdi_byte_exact() {
        let m = sample();
        let xml = m.to_xml();
        assert_eq!(
            xml,
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:GenSRDI>\n<jxta:GenSRDI xmlns:jxta=\"http://jxta.org\">\n\t\n\t<PID>\n\t\t{P1}\n\t</PID>\n\t<PKey>\n\t\tJxtaUnicast\n\t</PKey>\n\t<ttl>\n\t\t1\n\t</ttl>\n\t<Entry SKey=\"Id\" Expiration=\"7200000\">\n\t\turn:jxta:uuid-59616261646162614E50472050325033C0FFEE04\n\t</Entry>\n\t<Entry SKey=\"Name\" Expiration=\"-1\">\n\t\ta &amp; &lt;b>\n\t</Entry>\n</jxta:GenSRDI>\n")
        );
        assert_eq!(SrdiMessage::parse(&xml).unwrap(), m);
        // Found by the `srdi` fuzz target: a negative ttl was kept, and
        // not written back (only > 0 is). It reads as 0.
        let neg = m
            .to_xml()
            .replace("<ttl>\n\t\t1\n\t</ttl>", "<ttl>-1</ttl>");
        assert!(neg.contains("<ttl>-1</ttl>"));
        assert_eq!(SrdiMessage::parse(&neg).unwrap().scope, 0);
        let mut no_scope = m.clone();
        no_scope.scope = 0;
        assert!(!no_scope.to_xml().contains("<ttl>"));
        assert_eq!(SrdiMessage::parse(&no_scope.to_xml()).unwrap(), no_scope);
        // Odd attribute values still round-trip.
        let mut odd = m;
        odd.entries[0].key = "k\"'&<".into();
        assert_eq!(SrdiMessage::parse(&odd.to_xml()).unwrap(), odd);
    }

    #[test]
    fn gen_srdi_defaults_and_errors() {
        let doc = format!(
            "<jxta:GenSRDI><PID>{P1}</PID><Entry>v</Entry><Other a='1'><x/></Other></jxta:GenSRDI>"
        );
        let m = SrdiMessage::parse(&doc).unwrap();
        assert_eq!(m.primary_key, "");
        assert_eq!(m.scope, 0);
        assert_eq!(
            m.entries,
            vec![SrdiEntry {
                key: "NA".into(),
                value: "v".into(),
                expiration: -1
            }]
        );
        assert_eq!(
            SrdiMessage::parse("<jxta:GenSRDI><PKey>a</PKey></jxta:GenSRDI>"),
            Err(SrdiError::Missing("PID"))
        );
        assert!(matches!(
            SrdiMessage::parse("<jxta:GenSRDI><PID>urn:jxta:zz</PID></jxta:GenSRDI>"),
            Err(SrdiError::BadPeerId(_))
        ));
        assert!(matches!(
            SrdiMessage::parse(&format!(
                "<jxta:GenSRDI><PID>{P1}</PID><ttl>x</ttl></jxta:GenSRDI>"
            )),
            Err(SrdiError::BadNumber { field: "ttl", .. })
        ));
        assert!(matches!(
            SrdiMessage::parse(&format!(
                "<jxta:GenSRDI><PID>{P1}</PID><Entry Expiration=\"soon\">v</Entry></jxta:GenSRDI>"
            )),
            Err(SrdiError::BadNumber {
                field: "Expiration",
                ..
            })
        ));
        assert!(matches!(
            SrdiMessage::parse("<jxta:Other/>"),
            Err(SrdiError::Xml(XmlError::WrongRoot { .. }))
        ));
        for bad in [
            "",
            "<jxta:GenSRDI>",
            "<jxta:GenSRDI></x>",
            "</a>",
            "<jxta:GenSRDI/><b/>",
            "<jxta:GenSRDI><Entry a=>x</Entry></jxta:GenSRDI>",
        ] {
            assert!(
                matches!(SrdiMessage::parse(bad), Err(SrdiError::Xml(_))),
                "{bad}"
            );
        }
        let deep = format!("<jxta:GenSRDI>{}", "<a>".repeat(MAX_XML_DEPTH + 1));
        assert_eq!(
            SrdiMessage::parse(&deep),
            Err(SrdiError::Xml(XmlError::TooDeep))
        );
        let many: String = (0..=MAX_ENTRIES_PER_MESSAGE)
            .map(|_| "<Entry>v</Entry>")
            .collect();
        assert_eq!(
            SrdiMessage::parse(&format!(
                "<jxta:GenSRDI><PID>{P1}</PID>{many}</jxta:GenSRDI>"
            )),
            Err(SrdiError::TooLarge("entries"))
        );
        let long = "v".repeat(MAX_KEY_LEN + 1);
        assert_eq!(
            SrdiMessage::parse(&format!(
                "<jxta:GenSRDI><PID>{P1}</PID><Entry>{long}</Entry></jxta:GenSRDI>"
            )),
            Err(SrdiError::TooLarge("value"))
        );
        let huge = format!("<jxta:GenSRDI>{}</jxta:GenSRDI>", " ".repeat(MAX_XML_LEN));
        assert!(matches!(
            SrdiMessage::parse(&huge),
            Err(SrdiError::Xml(XmlError::TooLarge(_)))
        ));
    }

    #[test]
    fn envelope_and_gzip_element() {
        let env = ResolverSrdi {
            handler: "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000305".into(),
            payload: sample().to_xml().trim().to_string(),
        };
        let xml = env.to_xml();
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:ResolverSRDI>\n<jxta:ResolverSRDI xmlns:jxta=\"http://jxta.org\">\n\t\n\t<HandlerName>\n\t\turn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000305\n\t</HandlerName>\n\t<Payload>\n\t\t&lt;?xml"));
        assert_eq!(ResolverSrdi::parse(&xml).unwrap(), env);
        assert_eq!(env.srdi_message().unwrap(), sample());

        let e = env.to_element("jxta-NetGroup");
        assert_eq!(
            (&*e.namespace, &*e.name, e.mime()),
            ("jxta", "jxta-NetGroupSrdi", MIME_GZIP)
        );
        assert_eq!(&e.data[..2], &[0x1f, 0x8b]);
        let m = Message::new().with(e);
        assert_eq!(
            ResolverSrdi::from_message(&m, "jxta-NetGroup").unwrap(),
            env
        );
        // Plain XML is accepted too.
        let m = Message::new().with(Element::xml(NS_JXTA, "gSrdi", xml));
        assert_eq!(ResolverSrdi::from_message(&m, "g").unwrap(), env);
        assert_eq!(
            ResolverSrdi::from_message(&m, "h"),
            Err(SrdiError::NoElement("hSrdi".into()))
        );
        let bad = Message::new().with(Element::typed(
            NS_JXTA,
            "gSrdi",
            MIME_GZIP,
            &b"not gzip"[..],
        ));
        assert_eq!(
            ResolverSrdi::from_message(&bad, "g"),
            Err(SrdiError::BadEncoding("gzip"))
        );
        // A gzip bomb stops at the size bound.
        let bomb = ResolverSrdi {
            handler: "h".into(),
            payload: "x".repeat(MAX_XML_LEN * 2),
        };
        let m = Message::new().with(bomb.to_element("g"));
        assert!(matches!(
            ResolverSrdi::from_message(&m, "g"),
            Err(SrdiError::Xml(XmlError::TooLarge(_)))
        ));
        assert_eq!(
            ResolverSrdi::parse(
                "<jxta:ResolverSRDI><HandlerName>h</HandlerName></jxta:ResolverSRDI>"
            ),
            Err(SrdiError::Missing("Payload"))
        );
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(text in "(<[a-zA-Z:.]{0,12}( [A-Za-z]+=[\"'][^\"'<]{0,8}[\"'])?/?>|</[a-zA-Z:.]{0,12}>|[^<]{0,12}){0,24}", raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = SrdiMessage::parse(&text);
            let _ = ResolverSrdi::parse(&text);
            for mime in [MIME_GZIP, MIME_XML_UTF8] {
                let m = Message::new().with(Element::typed(NS_JXTA, "gSrdi", mime, raw.clone()));
                let _ = ResolverSrdi::from_message(&m, "g");
            }
        }

        #[test]
        fn gen_srdi_round_trip(
            pkey in "[A-Za-z]{1,12}",
            scope in 0i32..3,
            entries in proptest::collection::vec(("[ -~]{1,16}", "[ -~]{1,24}", -1i64..10_000_000), 0..8),
        ) {
            let m = SrdiMessage {
                peer: P1.parse().unwrap(),
                primary_key: pkey,
                scope,
                entries: entries
                    .into_iter()
                    .map(|(k, v, e)| SrdiEntry { key: k, value: v.trim().to_string(), expiration: e })
                    .filter(|e| !e.value.is_empty())
                    .collect(),
            };
            proptest::prop_assert_eq!(SrdiMessage::parse(&m.to_xml()).unwrap(), m);
        }
    }
}
