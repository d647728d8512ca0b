//! The propagate-pipe header `jxta:JxtaWireHeader` and duplicate
//! suppression (digest §6.5).
//!
//! JXSE tags each message sent on a `JxtaPropagate` pipe with a
//! `JxtaWire` document (`SrcPeer`?, `PipeId`, `MsgId`, `TTL`) and hands it
//! to the rendezvous service (service [`WIRE_PIPE_SERVICE`], param the
//! group unique value). A receiver drops messages whose `MsgId` it has seen
//! recently: [`DuplicateFilter`] keeps the last 250 by default.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use crate::advertisement::{parse_xml, truncate, PrettyDoc, XmlError};
use crate::id::{IdError, PeerId, PipeId};
use crate::message::{Element, Message, NS_JXTA};

/// The element name (namespace `jxta`, type `text/xml;charset=UTF-8`).
pub const ELEM_WIRE_HEADER: &str = "JxtaWireHeader";
/// The root element of the header document (no `jxta:` prefix).
pub const WIRE_HEADER_ROOT: &str = "JxtaWire";
/// The rendezvous propagation service propagate pipes use.
pub const WIRE_PIPE_SERVICE: &str = "jxta.service.wirepipe";
/// How many message IDs a receiver remembers by default.
pub const DEFAULT_DUPLICATE_WINDOW: usize = 250;
/// Keys longer than this are remembered by their SHA-256 digest.
const MAX_RAW_KEY: usize = 64;

/// Errors from a wire header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireHeaderError {
    /// The document is too large, malformed or has the wrong root.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// The message has no `jxta:JxtaWireHeader` element.
    #[error("message has no jxta:JxtaWireHeader element")]
    NoElement,
    /// The element is not UTF-8.
    #[error("wire header is not valid UTF-8")]
    NotUtf8,
    /// A required child is missing.
    #[error("wire header without <{0}>")]
    Missing(&'static str),
    /// An ID is malformed.
    #[error("bad ID in <{field}>: {source}")]
    BadId {
        /// The element.
        field: &'static str,
        /// Why it did not parse.
        source: IdError,
    },
    /// `TTL` is not an integer of at least 1 (JXSE rejects those).
    #[error("bad TTL {0:?}")]
    BadTtl(String),
}

/// The `JxtaWire` header of a propagate-pipe message.
///
/// ```
/// use juxta_proto::pipe::wire_header::JxtaWireHeader;
/// let pipe = "urn:jxta:cbid-59616261646162614E504720503250331122334455667788112233445566778804".parse().unwrap();
/// let h = JxtaWireHeader::new(pipe, "msg-1".into(), 3);
/// assert_eq!(JxtaWireHeader::parse(&h.to_xml()).unwrap(), h);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JxtaWireHeader {
    /// The sending peer (`SrcPeer`), if given.
    pub src_peer: Option<PeerId>,
    /// The propagate pipe (`PipeId`).
    pub pipe_id: PipeId,
    /// A unique message ID (`MsgId`), the duplicate-suppression key.
    pub msg_id: String,
    /// Remaining hops (`TTL`); JXSE requires at least 1.
    pub ttl: u32,
}

impl JxtaWireHeader {
    /// A header without source peer.
    pub fn new(pipe_id: PipeId, msg_id: String, ttl: u32) -> JxtaWireHeader {
        JxtaWireHeader {
            src_peer: None,
            pipe_id,
            msg_id,
            ttl,
        }
    }

    /// The document as JXSE's `WireHeader.getDocument` writes it (pretty
    /// style, root `JxtaWire` with the `jxta` namespace declaration). A
    /// `ttl` of 0 is written as 1, the least JXSE accepts.
    pub fn to_xml(&self) -> String {
        let mut d = PrettyDoc::new(WIRE_HEADER_ROOT);
        if let Some(src) = &self.src_peer {
            d.field("SrcPeer", &src.to_string());
        }
        d.field("PipeId", &self.pipe_id.to_string())
            .field("MsgId", &self.msg_id)
            .field("TTL", &self.ttl.clamp(1, i32::MAX as u32).to_string());
        d.finish()
    }

    /// Parses a header: `PipeId`, `MsgId` and `TTL` (1..=2^31-1) are
    /// required, `SrcPeer` is optional, anything else (such as JXSE's
    /// obsolete `VisitedPeer`) is ignored.
    pub fn parse(xml: &str) -> Result<JxtaWireHeader, WireHeaderError> {
        let root = parse_xml(xml)?.expect_root(WIRE_HEADER_ROOT)?;
        let src_peer = root
            .child_value("SrcPeer")
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse().map_err(|source| WireHeaderError::BadId {
                    field: "SrcPeer",
                    source,
                })
            })
            .transpose()?;
        let pipe_id = root
            .child_value("PipeId")
            .ok_or(WireHeaderError::Missing("PipeId"))?
            .parse()
            .map_err(|source| WireHeaderError::BadId {
                field: "PipeId",
                source,
            })?;
        let msg_id = root
            .child_value("MsgId")
            .ok_or(WireHeaderError::Missing("MsgId"))?
            .to_string();
        let ttl = root
            .child_value("TTL")
            .ok_or(WireHeaderError::Missing("TTL"))?;
        let ttl = ttl
            .parse::<i32>()
            .ok()
            .filter(|t| *t >= 1)
            .ok_or_else(|| WireHeaderError::BadTtl(truncate(ttl)))? as u32;
        Ok(JxtaWireHeader {
            src_peer,
            pipe_id,
            msg_id,
            ttl,
        })
    }

    /// The `jxta:JxtaWireHeader` element (`text/xml;charset=UTF-8`).
    pub fn to_element(&self) -> Element {
        Element::xml(NS_JXTA, ELEM_WIRE_HEADER, self.to_xml())
    }

    /// Finds and parses the header element of a message.
    pub fn from_message(msg: &Message) -> Result<JxtaWireHeader, WireHeaderError> {
        let e = msg
            .get(NS_JXTA, ELEM_WIRE_HEADER)
            .ok_or(WireHeaderError::NoElement)?;
        JxtaWireHeader::parse(e.as_str().ok_or(WireHeaderError::NotUtf8)?)
    }
}

/// Remembers the last `capacity` keys (message IDs) seen, to drop
/// duplicates of propagated messages. Each call is O(1); keys longer than
/// 64 bytes are stored as their SHA-256 digest, so memory stays bounded.
///
/// ```
/// use juxta_proto::pipe::wire_header::DuplicateFilter;
/// let mut f = DuplicateFilter::new(2);
/// assert!(f.first_time(b"a"));
/// assert!(!f.first_time(b"a"));
/// assert!(f.first_time(b"b") && f.first_time(b"c"));
/// assert!(f.first_time(b"a")); // forgotten: only the last 2 are kept
/// ```
#[derive(Debug, Clone)]
pub struct DuplicateFilter {
    capacity: usize,
    seen: HashSet<Arc<[u8]>>,
    order: VecDeque<Arc<[u8]>>,
}

impl Default for DuplicateFilter {
    /// A filter of [`DEFAULT_DUPLICATE_WINDOW`] keys.
    fn default() -> DuplicateFilter {
        DuplicateFilter::new(DEFAULT_DUPLICATE_WINDOW)
    }
}

impl DuplicateFilter {
    /// A filter remembering the last `capacity` keys (0 remembers nothing).
    pub fn new(capacity: usize) -> DuplicateFilter {
        DuplicateFilter {
            capacity,
            // Grown as keys come: most filters (an edge's) see few keys,
            // and a restarted simulated edge paid for the full window.
            seen: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// How many keys it remembers at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many keys it remembers now.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether it remembers no key.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.seen.clear();
        self.order.clear();
    }

    /// True the first time a key is seen (within the window), false for a
    /// duplicate. A new key is remembered, evicting the oldest when full.
    pub fn first_time(&mut self, key: &[u8]) -> bool {
        if self.capacity == 0 {
            return true;
        }
        // Tag byte 0: the key itself; tag byte 1: its SHA-256 digest.
        let mut buf = [0u8; 1 + MAX_RAW_KEY];
        let stored: &[u8] = if key.len() <= MAX_RAW_KEY {
            buf[1..=key.len()].copy_from_slice(key);
            &buf[..=key.len()]
        } else {
            use sha2::{Digest, Sha256};
            buf[0] = 1;
            buf[1..33].copy_from_slice(&Sha256::digest(key));
            &buf[..33]
        };
        if self.seen.contains(stored) {
            return false;
        }
        let k: Arc<[u8]> = Arc::from(stored);
        if self.order.len() >= self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.seen.insert(k.clone());
        self.order.push_back(k);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MIME_XML_UTF8;
    use proptest::prelude::*;

    const PIPE: &str =
        "urn:jxta:cbid-59616261646162614E50472050325033FB13C4EF50E149519865DF4CF007791604";
    const SRC: &str =
        "urn:jxta:cbid-59616261646162614A7874615032503382ABB44155FA6D74CC260BD252D0829A03";

    #[test]
    fn layout_and_element() {
        let h = JxtaWireHeader {
            src_peer: Some(SRC.parse().unwrap()),
            pipe_id: PIPE.parse().unwrap(),
            msg_id: "m<1>".into(),
            ttl: 200,
        };
        assert_eq!(
            h.to_xml(),
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE JxtaWire>\n<JxtaWire xmlns:jxta=\"http://jxta.org\">\n\t\n\t<SrcPeer>\n\t\t{SRC}\n\t</SrcPeer>\n\t<PipeId>\n\t\t{PIPE}\n\t</PipeId>\n\t<MsgId>\n\t\tm&lt;1>\n\t</MsgId>\n\t<TTL>\n\t\t200\n\t</TTL>\n</JxtaWire>\n")
        );
        let e = h.to_element();
        assert_eq!(
            (&*e.namespace, &*e.name, e.mime()),
            ("jxta", ELEM_WIRE_HEADER, MIME_XML_UTF8)
        );
        let m = Message::new().with(e);
        assert_eq!(JxtaWireHeader::from_message(&m).unwrap(), h);
        assert_eq!(
            JxtaWireHeader::from_message(&Message::new()),
            Err(WireHeaderError::NoElement)
        );
    }

    #[test]
    fn parse_rules() {
        let doc = |body: &str| format!("<JxtaWire>{body}</JxtaWire>");
        let ok = format!(
            "<PipeId>{PIPE}</PipeId><MsgId>x</MsgId><TTL>1</TTL><VisitedPeer>y</VisitedPeer>"
        );
        let h = JxtaWireHeader::parse(&doc(&ok)).unwrap();
        assert_eq!((h.src_peer, h.ttl, h.msg_id.as_str()), (None, 1, "x"));
        assert!(matches!(
            JxtaWireHeader::parse(&doc(&ok.replace("<TTL>1<", "<TTL>0<"))),
            Err(WireHeaderError::BadTtl(_))
        ));
        assert!(matches!(
            JxtaWireHeader::parse(&doc(&ok.replace("<TTL>1<", "<TTL>x<"))),
            Err(WireHeaderError::BadTtl(_))
        ));
        assert_eq!(
            JxtaWireHeader::parse(&doc(&ok.replace("<MsgId>x</MsgId>", ""))),
            Err(WireHeaderError::Missing("MsgId"))
        );
        assert_eq!(
            JxtaWireHeader::parse(&doc(&ok.replace("<TTL>1</TTL>", ""))),
            Err(WireHeaderError::Missing("TTL"))
        );
        assert!(matches!(
            JxtaWireHeader::parse(&doc(&ok.replace(PIPE, SRC))),
            Err(WireHeaderError::BadId {
                field: "PipeId",
                ..
            })
        ));
        assert!(matches!(
            JxtaWireHeader::parse(&doc(&format!("<SrcPeer>{PIPE}</SrcPeer>{ok}"))),
            Err(WireHeaderError::BadId {
                field: "SrcPeer",
                ..
            })
        ));
        assert!(matches!(
            JxtaWireHeader::parse("<jxta:JxtaWire/>"),
            Err(WireHeaderError::Xml(XmlError::WrongRoot { .. }))
        ));
        // TTL 0 is written as JXSE's minimum.
        let zero = JxtaWireHeader::new(PIPE.parse().unwrap(), "z".into(), 0);
        assert_eq!(JxtaWireHeader::parse(&zero.to_xml()).unwrap().ttl, 1);
    }

    #[test]
    fn filter_window() {
        let mut f = DuplicateFilter::default();
        assert_eq!(f.capacity(), DEFAULT_DUPLICATE_WINDOW);
        for i in 0..300u32 {
            assert!(f.first_time(&i.to_be_bytes()));
        }
        assert_eq!(f.len(), DEFAULT_DUPLICATE_WINDOW);
        assert!(f.first_time(&0u32.to_be_bytes()), "evicted");
        assert!(!f.first_time(&299u32.to_be_bytes()));
        // Long keys: digested, still exact for practical purposes.
        let long_a = vec![b'a'; 1000];
        let mut long_b = long_a.clone();
        long_b[999] = b'b';
        assert!(f.first_time(&long_a));
        assert!(!f.first_time(&long_a));
        assert!(f.first_time(&long_b));
        // The empty key and a 64-byte key are ordinary keys.
        assert!(f.first_time(b""));
        assert!(!f.first_time(b""));
        assert!(f.first_time(&[7u8; 64]));
        assert!(!f.first_time(&[7u8; 64]));
        f.clear();
        assert!(f.is_empty());
        let mut z = DuplicateFilter::new(0);
        assert!(z.first_time(b"a") && z.first_time(b"a"));
    }

    proptest! {
        #[test]
        fn header_round_trip(
            with_src in any::<bool>(),
            msg_id in "[ -~]{0,40}",
            ttl in 1u32..=i32::MAX as u32,
        ) {
            let h = JxtaWireHeader {
                src_peer: with_src.then(|| SRC.parse().unwrap()),
                pipe_id: PIPE.parse().unwrap(),
                msg_id: msg_id.trim().to_string(),
                ttl,
            };
            prop_assert_eq!(JxtaWireHeader::parse(&h.to_xml()).unwrap(), h);
        }

        #[test]
        fn filter_matches_model(keys in proptest::collection::vec(0u8..20, 0..200), cap in 1usize..10) {
            let mut f = DuplicateFilter::new(cap);
            let mut model: VecDeque<u8> = VecDeque::new();
            for k in keys {
                let expect = !model.contains(&k);
                prop_assert_eq!(f.first_time(&[k]), expect);
                if expect {
                    if model.len() == cap {
                        model.pop_front();
                    }
                    model.push_back(k);
                }
                prop_assert_eq!(f.len(), model.len());
            }
        }
    }
}
