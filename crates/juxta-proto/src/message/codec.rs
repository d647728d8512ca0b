//! The binary message format, version 0 (`application/x-jxta-msg`).
//!
//! ```text
//! message := "jxmg" u8 0  u16 nsCount str16 ns[nsCount]  u16 elemCount element[elemCount]
//! element := "jxel" u8 nsId u8 flags str16 name [str16 mime if flags&1]
//!            u32 dataLen data [element signature if flags&4]
//! ```
//! Encoding is canonical in JXSE's sense (digest §2.5), so JXSE can verify a
//! CBJX signature over its own re-encoding of what we send. Decoding slices
//! payloads out of the received buffer without copying them.
//!
//! Decoding allocates in proportion to what it has read, never to what a
//! length or count field claims: namespaces, names and MIME types are
//! [`ByteString`] slices of the input (an element referring to a 32 KiB
//! namespace costs a reference count), a message holds at most
//! [`MAX_DECODE_ELEMENTS`] elements (also when its element count is 0,
//! "read to the end") and strings are at most [`MAX_NAME_LEN`] bytes. The
//! decoded [`Message`] then takes less than 10 bytes of heap per input byte,
//! plus a constant (see `tests/alloc_bound.rs`).

use bytes::{BufMut, Bytes, BytesMut};
use bytestring::ByteString;

use super::namespace_order::JavaHashOrder;
use super::{Element, Message, MIME_OCTET_STREAM, NS_JXTA};

const MSG_MAGIC: &[u8; 4] = b"jxmg";
const ELEM_MAGIC: &[u8; 4] = b"jxel";
const FLAG_TYPE: u8 = 0x01;
const FLAG_ENCODING: u8 = 0x02;
const FLAG_SIGNATURE: u8 = 0x04;
/// Custom namespaces JXSE accepts in one message.
pub const MAX_NAMESPACES: usize = 253;
/// Longest string (name, MIME type) the format can carry (a Java short).
pub const MAX_STR16: usize = i16::MAX as usize;
/// Most elements the format can carry in one message (a Java short).
pub const MAX_ELEMENTS: usize = i16::MAX as usize;
/// Most top-level elements in a message Juxta decodes or encodes; beyond
/// it decoding fails with [`MessageError::TooManyElements`]. JXTA messages
/// carry a handful of elements; the cap bounds the element list of a hostile
/// message to well under 1 MiB.
pub const MAX_DECODE_ELEMENTS: usize = 4096;
/// Longest namespace, element name or MIME type Juxta decodes or encodes
/// (the format allows [`MAX_STR16`]; JXSE's names are a few dozen bytes).
pub const MAX_NAME_LEN: usize = 4096;
/// Payloads up to this size are copied into the header buffer so a small
/// message goes out as one contiguous chunk; larger ones are passed by
/// reference (zero copy).
const COALESCE_LIMIT: usize = 512;
/// Nesting depth for signature elements.
const MAX_SIGNATURE_DEPTH: usize = 2;

/// Errors from encoding or decoding a binary message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The buffer ended inside the message.
    #[error("message truncated at byte {0}")]
    Truncated(usize),
    /// The message does not start with `jxmg`.
    #[error("not a JXTA binary message (bad magic)")]
    BadMagic,
    /// An element does not start with `jxel`.
    #[error("bad element magic at byte {0}")]
    BadElementMagic(usize),
    /// A version other than 0.
    #[error("unsupported message version {0} (only version 0 is spoken)")]
    UnsupportedVersion(u8),
    /// Too many namespaces in the table.
    #[error("{0} namespaces (at most 253)")]
    TooManyNamespaces(usize),
    /// An element refers to a namespace the table does not hold.
    #[error("element refers to unknown namespace id {0}")]
    UnknownNamespace(u8),
    /// A string is not valid UTF-8.
    #[error("invalid UTF-8 in {0}")]
    InvalidUtf8(&'static str),
    /// A length field is negative or larger than the format allows.
    #[error("invalid length {len} for {what}")]
    BadLength {
        /// which field
        what: &'static str,
        /// the value read or requested
        len: u64,
    },
    /// The message has no element (JXSE cannot read such a message).
    #[error("a message must have at least one element")]
    Empty,
    /// Signature elements nested too deep.
    #[error("signature elements nested too deep")]
    SignatureTooDeep,
    /// The unused "encoding" flag is set.
    #[error("element uses the undefined encoding flag")]
    EncodingFlag,
    /// More elements than [`MAX_DECODE_ELEMENTS`].
    #[error("message has more than {max} elements")]
    TooManyElements {
        /// the cap
        max: usize,
    },
}

/// An encoded message: chunks to write in order (one vectored write), and
/// their total length.
#[derive(Debug, Clone, Default)]
pub struct EncodedMessage {
    /// The bytes, in order; large payloads are the application's own buffers.
    pub chunks: Vec<Bytes>,
    /// Sum of the chunk lengths.
    pub len: usize,
}

impl EncodedMessage {
    /// Appends a chunk.
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.chunks.push(b);
        }
    }

    /// The whole encoding as one contiguous buffer (copies; for tests and
    /// small control messages).
    pub fn to_bytes(&self) -> Bytes {
        if self.chunks.len() == 1 {
            return self.chunks[0].clone();
        }
        let mut b = BytesMut::with_capacity(self.len);
        for c in &self.chunks {
            b.extend_from_slice(c);
        }
        b.freeze()
    }
}

fn check_str(what: &'static str, s: &str) -> Result<(), MessageError> {
    if s.len() > MAX_NAME_LEN {
        return Err(MessageError::BadLength {
            what,
            len: s.len() as u64,
        });
    }
    Ok(())
}

fn put_str16(buf: &mut BytesMut, s: &str) {
    buf.put_u16(s.len() as u16);
    buf.put_slice(s.as_bytes());
}

/// Encodes a message in JXSE's canonical version-0 form.
///
/// ```
/// use juxta_proto::message::{decode_v0, encode_v0, Element, Message};
/// use juxta_proto::message::namespace_order::JavaHashOrder;
/// let m = Message::new().with(Element::text("app", "greeting", "hello"));
/// let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap();
/// let back = decode_v0(enc.to_bytes()).unwrap();
/// assert_eq!(back.message, m);
/// ```
pub fn encode_v0(msg: &Message, order: JavaHashOrder) -> Result<EncodedMessage, MessageError> {
    if msg.elements.is_empty() {
        return Err(MessageError::Empty);
    }
    if msg.elements.len() > MAX_DECODE_ELEMENTS {
        return Err(MessageError::TooManyElements {
            max: MAX_DECODE_ELEMENTS,
        });
    }
    // Namespace table: custom namespaces in first-use order, then HashMap order.
    let mut first_use: Vec<&str> = Vec::new();
    for e in &msg.elements {
        let ns = &*e.namespace;
        if !ns.is_empty() && ns != NS_JXTA && !first_use.contains(&ns) {
            first_use.push(ns);
        }
    }
    if first_use.len() > MAX_NAMESPACES {
        return Err(MessageError::TooManyNamespaces(first_use.len()));
    }
    let table = if first_use.len() > 1 {
        order.order(&first_use)
    } else {
        first_use
    };
    let ns_id = |ns: &str| -> u8 {
        match ns {
            "" => 0,
            NS_JXTA => 1,
            _ => 2 + table.iter().position(|t| *t == ns).unwrap_or(0) as u8,
        }
    };

    let meta_len: usize = 9
        + table.iter().map(|t| 2 + t.len()).sum::<usize>()
        + msg
            .elements
            .iter()
            .map(|e| {
                let sig = e.signature.as_ref().map_or(0, |s| {
                    16 + s.name.len() + s.mime.as_ref().map_or(0, |m| m.len()) + s.data.len()
                });
                16 + e.name.len()
                    + e.mime.as_ref().map_or(0, |m| m.len())
                    + if e.data.len() <= COALESCE_LIMIT {
                        e.data.len()
                    } else {
                        0
                    }
                    + sig
            })
            .sum::<usize>();
    let mut buf = BytesMut::with_capacity(meta_len);
    let mut out = EncodedMessage::default();
    buf.put_slice(MSG_MAGIC);
    buf.put_u8(0);
    buf.put_u16(table.len() as u16);
    for t in &table {
        check_str("namespace", t)?;
        put_str16(&mut buf, t);
    }
    buf.put_u16(msg.elements.len() as u16);
    for e in &msg.elements {
        encode_element(e, ns_id(&e.namespace), &mut buf, &mut out, 0)?;
    }
    out.push(buf.freeze());
    Ok(out)
}

fn encode_element(
    e: &Element,
    ns: u8,
    buf: &mut BytesMut,
    out: &mut EncodedMessage,
    depth: usize,
) -> Result<(), MessageError> {
    if depth > MAX_SIGNATURE_DEPTH {
        return Err(MessageError::SignatureTooDeep);
    }
    check_str("element name", &e.name)?;
    let mime = e.mime.as_deref().filter(|m| *m != MIME_OCTET_STREAM);
    if let Some(m) = mime {
        check_str("mime type", m)?;
    }
    if e.data.len() > i32::MAX as usize {
        return Err(MessageError::BadLength {
            what: "element data",
            len: e.data.len() as u64,
        });
    }
    let mut flags = 0;
    if mime.is_some() {
        flags |= FLAG_TYPE;
    }
    if e.signature.is_some() {
        flags |= FLAG_SIGNATURE;
    }
    buf.put_slice(ELEM_MAGIC);
    buf.put_u8(ns);
    buf.put_u8(flags);
    put_str16(buf, &e.name);
    if let Some(m) = mime {
        put_str16(buf, m);
    }
    buf.put_u32(e.data.len() as u32);
    if e.data.len() <= COALESCE_LIMIT {
        buf.put_slice(&e.data);
    } else {
        out.push(buf.split().freeze());
        out.push(e.data.clone());
    }
    if let Some(sig) = &e.signature {
        encode_element(sig, ns, buf, out, depth + 1)?;
    }
    Ok(())
}

/// A decoded message and where its elements end in the input (a CBJX
/// trailer, if any, starts there).
#[derive(Debug, Clone)]
pub struct DecodedMessage {
    /// The message.
    pub message: Message,
    /// Offset just past the last element.
    pub elements_end: usize,
}

struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    fn need(&self, n: usize) -> Result<(), MessageError> {
        if self.buf.len() - self.pos < n {
            Err(MessageError::Truncated(self.buf.len()))
        } else {
            Ok(())
        }
    }
    fn u8(&mut self) -> Result<u8, MessageError> {
        self.need(1)?;
        self.pos += 1;
        Ok(self.buf[self.pos - 1])
    }
    fn u16(&mut self) -> Result<u16, MessageError> {
        self.need(2)?;
        let v = u16::from_be_bytes([self.buf[self.pos], self.buf[self.pos + 1]]);
        self.pos += 2;
        Ok(v)
    }
    fn u32(&mut self) -> Result<u32, MessageError> {
        self.need(4)?;
        let b = &self.buf[self.pos..self.pos + 4];
        self.pos += 4;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn bytes(&mut self, n: usize) -> Result<Bytes, MessageError> {
        self.need(n)?;
        let b = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }
    /// A string as a slice of the input (no copy).
    fn str16(&mut self, what: &'static str) -> Result<ByteString, MessageError> {
        let n = self.u16()? as usize;
        if n > MAX_NAME_LEN {
            return Err(MessageError::BadLength {
                what,
                len: n as u64,
            });
        }
        if n == 0 {
            return Ok(ByteString::new());
        }
        let b = self.bytes(n)?;
        ByteString::try_from(b).map_err(|_| MessageError::InvalidUtf8(what))
    }
    fn peek_is(&self, magic: &[u8; 4]) -> bool {
        self.buf.len() - self.pos >= 4 && &self.buf[self.pos..self.pos + 4] == magic
    }
}

/// Decodes a version-0 message from the start of `buf`. Bytes after the
/// last element (a CBJX trailer) are left alone: see
/// [`DecodedMessage::elements_end`]. Payloads are slices of `buf`.
pub fn decode_v0(buf: Bytes) -> Result<DecodedMessage, MessageError> {
    let mut r = Reader { buf, pos: 0 };
    r.need(5)?;
    if !r.peek_is(MSG_MAGIC) {
        return Err(MessageError::BadMagic);
    }
    r.pos = 4;
    let version = r.u8()?;
    if version != 0 {
        return Err(MessageError::UnsupportedVersion(version));
    }
    let ns_count = r.u16()? as usize;
    if ns_count > MAX_NAMESPACES {
        return Err(MessageError::TooManyNamespaces(ns_count));
    }
    // Bounded by MAX_NAMESPACES; the strings are slices of the input.
    let mut namespaces = Vec::with_capacity(2 + ns_count);
    namespaces.push(ByteString::new());
    namespaces.push(ByteString::from_static(NS_JXTA));
    for _ in 0..ns_count {
        namespaces.push(r.str16("namespace")?);
    }
    let count = r.u16()? as usize;
    if count > MAX_ELEMENTS {
        return Err(MessageError::BadLength {
            what: "element count",
            len: count as u64,
        });
    }
    if count > MAX_DECODE_ELEMENTS {
        return Err(MessageError::TooManyElements {
            max: MAX_DECODE_ELEMENTS,
        });
    }
    // Count 0 means "read elements to the end" (JXSE), still within the cap.
    let read_to_end = count == 0;
    let want = if read_to_end {
        MAX_DECODE_ELEMENTS
    } else {
        count
    };
    // Each element takes at least 12 bytes (`jxel`, ids, empty name, data
    // length), which bounds the allocation by what is there to read (and the
    // cap bounds it absolutely); exact, so the list never grows by doubling.
    let mut elements = Vec::with_capacity(want.min((r.buf.len() - r.pos) / 12));
    while (read_to_end && r.peek_is(ELEM_MAGIC)) || (!read_to_end && elements.len() < count) {
        if elements.len() == MAX_DECODE_ELEMENTS {
            return Err(MessageError::TooManyElements {
                max: MAX_DECODE_ELEMENTS,
            });
        }
        elements.push(decode_element(&mut r, &namespaces, 0)?);
    }
    if elements.is_empty() {
        return Err(MessageError::Empty);
    }
    Ok(DecodedMessage {
        message: Message { elements },
        elements_end: r.pos,
    })
}

fn decode_element(
    r: &mut Reader,
    namespaces: &[ByteString],
    depth: usize,
) -> Result<Element, MessageError> {
    if depth > MAX_SIGNATURE_DEPTH {
        return Err(MessageError::SignatureTooDeep);
    }
    r.need(4)?;
    if !r.peek_is(ELEM_MAGIC) {
        return Err(MessageError::BadElementMagic(r.pos));
    }
    r.pos += 4;
    let ns = r.u8()?;
    let namespace = namespaces
        .get(ns as usize)
        .ok_or(MessageError::UnknownNamespace(ns))?
        .clone();
    let flags = r.u8()?;
    if flags & FLAG_ENCODING != 0 {
        return Err(MessageError::EncodingFlag);
    }
    let name = r.str16("element name")?;
    let mime = if flags & FLAG_TYPE != 0 {
        Some(r.str16("mime type")?).filter(|m| *m != MIME_OCTET_STREAM)
    } else {
        None
    };
    let len = r.u32()?;
    if len > i32::MAX as u32 {
        return Err(MessageError::BadLength {
            what: "element data",
            len: len as u64,
        });
    }
    let data = r.bytes(len as usize)?;
    let signature = if flags & FLAG_SIGNATURE != 0 {
        Some(Box::new(decode_element(r, namespaces, depth + 1)?))
    } else {
        None
    };
    Ok(Element {
        namespace,
        name,
        mime,
        data,
        signature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Message {
        Message::new()
            .with(Element::bytes("bench", "data", &b"a"[..]))
            .with(Element::text(
                "jxta",
                "EndpointSourceAddress",
                "jxta://cbid-0003",
            ))
            .with(Element::bytes("", "big", vec![7u8; 5000]))
    }

    #[test]
    fn round_trip_and_zero_copy() {
        let m = sample();
        let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap();
        // The 5000-byte payload is passed through by reference.
        assert!(enc
            .chunks
            .iter()
            .any(|c| c.as_ptr() == m.elements[2].data.as_ptr()));
        let wire = enc.to_bytes();
        assert_eq!(wire.len(), enc.len);
        let dec = decode_v0(wire.clone()).unwrap();
        assert_eq!(dec.message, m);
        assert_eq!(dec.elements_end, wire.len());
        // Decoded payloads point into the wire buffer.
        let big = &dec.message.elements[2].data;
        let start = big.as_ptr() as usize - wire.as_ptr() as usize;
        assert!(start < wire.len());
    }

    #[test]
    fn known_bytes_for_one_element() {
        let m = Message::new().with(Element::text("", "hello", "world"));
        let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap().to_bytes();
        let mut expect = b"jxmg\x00\x00\x00\x00\x01".to_vec();
        expect.extend_from_slice(
            b"jxel\x00\x01\x00\x05hello\x00\x18text/plain;charset=UTF-8\x00\x00\x00\x05world",
        );
        assert_eq!(&enc[..], &expect[..]);
    }

    #[test]
    fn octet_stream_type_is_never_written() {
        let m = Message::new().with(Element::typed("", "x", MIME_OCTET_STREAM, &b"1"[..]));
        let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap().to_bytes();
        assert_eq!(enc[14], 0, "flags must not carry HAS_TYPE");
    }

    #[test]
    fn namespace_table_in_java_hashmap_order() {
        let m = Message::new()
            .with(Element::bytes("ab", "x", &b"1"[..]))
            .with(Element::bytes("zz", "y", &b"2"[..]));
        let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap().to_bytes();
        assert_eq!(&enc[7..15], b"\x00\x02zz\x00\x02ab");
        let dec = decode_v0(enc).unwrap();
        assert_eq!(dec.message, m);
    }

    #[test]
    fn trailer_is_left_alone() {
        let mut wire = encode_v0(&sample(), JavaHashOrder::Java8)
            .unwrap()
            .to_bytes()
            .to_vec();
        let end = wire.len();
        wire.extend_from_slice(b"\x00\x00\x00\x03abc");
        let dec = decode_v0(Bytes::from(wire)).unwrap();
        assert_eq!(dec.elements_end, end);
    }

    #[test]
    fn read_to_end_when_count_is_zero() {
        let mut wire = encode_v0(&sample(), JavaHashOrder::Java8)
            .unwrap()
            .to_bytes()
            .to_vec();
        // jxmg 0, one namespace "bench" (2+5 bytes), then the element count.
        wire[14] = 0;
        wire[15] = 0;
        let dec = decode_v0(Bytes::from(wire)).unwrap();
        assert_eq!(dec.message, sample());
    }

    #[test]
    fn typed_errors_for_bad_input() {
        assert_eq!(
            decode_v0(Bytes::from_static(b"jxm")).unwrap_err(),
            MessageError::Truncated(3)
        );
        assert_eq!(
            decode_v0(Bytes::from_static(b"nope!")).unwrap_err(),
            MessageError::BadMagic
        );
        assert_eq!(
            decode_v0(Bytes::from_static(b"jxmg\x01\x00\x00\x00\x01")).unwrap_err(),
            MessageError::UnsupportedVersion(1)
        );
        // Unknown namespace id 5.
        let bad_ns = b"jxmg\x00\x00\x00\x00\x01jxel\x05\x00\x00\x01a\x00\x00\x00\x00";
        assert_eq!(
            decode_v0(Bytes::from_static(bad_ns)).unwrap_err(),
            MessageError::UnknownNamespace(5)
        );
        // Invalid UTF-8 name.
        let bad_utf8 = b"jxmg\x00\x00\x00\x00\x01jxel\x00\x00\x00\x02\xff\xfe\x00\x00\x00\x00";
        assert_eq!(
            decode_v0(Bytes::from_static(bad_utf8)).unwrap_err(),
            MessageError::InvalidUtf8("element name")
        );
        // Data length larger than what follows.
        let huge = b"jxmg\x00\x00\x00\x00\x01jxel\x00\x00\x00\x01a\x7f\xff\xff\xff";
        assert!(matches!(
            decode_v0(Bytes::from_static(huge)).unwrap_err(),
            MessageError::Truncated(_)
        ));
        // Claims 32767 elements: over the cap, refused before reading them.
        let many = b"jxmg\x00\x00\x00\x7f\xffjxel\x00\x00\x00\x01a\x00\x00\x00\x00";
        assert_eq!(
            decode_v0(Bytes::from_static(many)).unwrap_err(),
            MessageError::TooManyElements {
                max: MAX_DECODE_ELEMENTS
            }
        );
        // Claims 4096 elements but holds one: truncated, no huge allocation.
        let many = b"jxmg\x00\x00\x00\x10\x00jxel\x00\x00\x00\x01a\x00\x00\x00\x00";
        assert!(matches!(
            decode_v0(Bytes::from_static(many)).unwrap_err(),
            MessageError::Truncated(_)
        ));
        // Count 0 ("read to the end") stops at the cap too.
        let mut to_end = b"jxmg\x00\x00\x00\x00\x00".to_vec();
        for _ in 0..=MAX_DECODE_ELEMENTS {
            to_end.extend_from_slice(b"jxel\x00\x00\x00\x00\x00\x00\x00\x00");
        }
        assert_eq!(
            decode_v0(Bytes::from(to_end.clone())).unwrap_err(),
            MessageError::TooManyElements {
                max: MAX_DECODE_ELEMENTS
            }
        );
        to_end.truncate(to_end.len() - 12);
        assert_eq!(
            decode_v0(Bytes::from(to_end))
                .unwrap()
                .message
                .elements
                .len(),
            MAX_DECODE_ELEMENTS
        );
        // Names over 4 KiB are refused, in both directions.
        let mut long = b"jxmg\x00\x00\x00\x00\x01jxel\x00\x00\x10\x01".to_vec();
        long.extend_from_slice(&[b'a'; 4097]);
        long.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(
            decode_v0(Bytes::from(long)).unwrap_err(),
            MessageError::BadLength {
                what: "element name",
                len: 4097
            }
        );
        let long_name = "n".repeat(MAX_NAME_LEN + 1);
        let m = Message::new().with(Element::bytes("", &long_name, &b"1"[..]));
        assert!(matches!(
            encode_v0(&m, JavaHashOrder::Java8).unwrap_err(),
            MessageError::BadLength { .. }
        ));
        assert_eq!(
            encode_v0(&Message::new(), JavaHashOrder::Java8).unwrap_err(),
            MessageError::Empty
        );
    }

    proptest! {
        #[test]
        fn decoder_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_v0(Bytes::from(data));
        }

        #[test]
        fn decoder_survives_mutations(pos in 0usize..200, val in any::<u8>()) {
            let mut wire = encode_v0(&sample(), JavaHashOrder::Java8).unwrap().to_bytes().to_vec();
            let p = pos % wire.len();
            wire[p] = val;
            let _ = decode_v0(Bytes::from(wire));
        }

        #[test]
        fn round_trips(elems in proptest::collection::vec(
            ("[a-z]{0,3}", "[a-zA-Z0-9]{0,12}", proptest::option::of("[a-z]{1,8}/[a-z]{1,8}"),
             proptest::collection::vec(any::<u8>(), 0..700)), 1..8)) {
            let mut m = Message::new();
            for (ns, name, mime, data) in elems {
                m.push(Element { namespace: ns.into(), name: name.into(), mime: mime.map(Into::into), data: Bytes::from(data), signature: None });
            }
            let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap();
            let dec = decode_v0(enc.to_bytes()).unwrap();
            prop_assert_eq!(dec.message, m);
        }
    }
}
