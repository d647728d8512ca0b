//! Juxta's compact framing, used once two Juxta peers have agreed on it.
//!
//! The JXTA framing spends ~1 KB per message on a header block, two address
//! elements with full peer IDs, repeated element names and a per-message
//! RSA signature. Between two Juxta peers the connection already knows both
//! ends (they authenticated once, see [`super::handshake`]), so a frame is:
//!
//! ```text
//! frame   := varint bodyLen  body
//! body    := define*  0x03 varint channel  varint count  { varint name  varint len  data }*
//! define  := 0x01 varint id  str service  u8 hasParam  [str param]     ; a channel
//!          | 0x02 varint id  str namespace  str name  str mime         ; an element name
//! str     := varint len  utf8
//! ```
//! Channels (service/param) and element names are interned per connection
//! and direction on first use; id 0 means "literal follows" once a table is
//! full. A 1-byte payload costs 7 bytes on the wire.
//!
//! When both ends agreed on it in the handshake ("values",
//! [`super::handshake`]), the values of the elements that repeat unchanged
//! from message to message on a routed path (the origin's router
//! fingerprint, about 850 bytes, and the compact router header, about 300:
//! [`INTERNED_VALUES`]) are interned too, so a relayed 1-byte message does
//! not carry a kilobyte of the same bytes on every hop:
//!
//! ```text
//! define  |= 0x04 varint id  varint len  data       ; a value (id <= count + 1:
//!                                                   ;  a new one, or a replacement)
//! element := varint name  varint (len << 1) data   ; a value written out
//!          | varint name  varint (id << 1 | 1)     ; an interned value
//! ```
//! The value table holds at most [`MAX_VALUES`] values of at most
//! [`MAX_VALUE_LEN`] bytes, [`MAX_VALUE_BYTES`] in all, per direction; the
//! sender replaces its entries in turn once it is full, and the receiver
//! keeps its own copy of each (a value never pins the frame it came in).
//! A reference is accepted only on an element [`INTERNED_VALUES`] names,
//! at most [`VALUES_PER_MESSAGE`] per message, so a frame of a few bytes
//! never stands for more than that many values.
//!
//! The decoder allocates in proportion to what it has read: an interned
//! name is copied once, when it is defined, and every element that refers
//! to it shares that copy ([`ByteString`], a reference count); literal
//! names are slices of the frame; a message holds at most
//! [`MAX_DECODE_ELEMENTS`] elements; each intern table holds at most
//! [`MAX_TABLE`] entries and [`MAX_TABLE_BYTES`] bytes of strings; and a
//! partial frame reserves buffer space in step with what has arrived, not
//! with the length it announces.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use bytestring::ByteString;

use crate::endpoint::ServiceAddress;
use crate::message::codec::{EncodedMessage, MAX_DECODE_ELEMENTS, MAX_NAME_LEN};
use crate::message::{Element, Message};

/// Most entries per intern table (channels, names), per direction.
pub const MAX_TABLE: usize = 1024;
/// Most bytes of strings per intern table (channels: service and param;
/// names: namespace, name and MIME type), per direction. The encoder stops
/// interning (and sends literals) before it would pass this; the decoder
/// refuses a definition that passes it.
pub const MAX_TABLE_BYTES: usize = 256 * 1024;

/// The bounds of one intern table (channels or names), per direction. A
/// connection's tables use [`TableLimits::CONNECTION`]; a stream of
/// messages inside another channel (a secure pipe's TLS session) may agree
/// on smaller ones, so that many of them fit in bounded memory. Both ends
/// must use the same limits: the encoder stops interning before it would
/// pass them, and the decoder refuses a definition that passes them.
///
/// ```
/// use juxta_proto::endpoint::ServiceAddress;
/// use juxta_proto::message::{codec::EncodedMessage, Element, Message};
/// use juxta_proto::wire::compact::{CompactDecoder, CompactEncoder, TableLimits};
/// let small = TableLimits { entries: 2, bytes: 64 };
/// let mut enc = CompactEncoder::new().with_limits(small);
/// let mut dec = CompactDecoder::new().with_limits(small);
/// let to = ServiceAddress::new("S", None);
/// // Three names: the third does not fit the table and is written out.
/// let m = Message::new()
///     .with(Element::bytes("", "a", &b"1"[..]))
///     .with(Element::bytes("", "b", &b"2"[..]))
///     .with(Element::bytes("", "c", &b"3"[..]));
/// let mut out = EncodedMessage::default();
/// enc.encode(&to, &m, &mut out);
/// let (_, got) = dec.decode_frame(out.to_bytes(), 1 << 20).unwrap();
/// assert_eq!(got, m);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLimits {
    /// Most entries per table.
    pub entries: usize,
    /// Most bytes of strings per table.
    pub bytes: usize,
}

impl TableLimits {
    /// A connection's tables: [`MAX_TABLE`] entries, [`MAX_TABLE_BYTES`].
    pub const CONNECTION: TableLimits = TableLimits {
        entries: MAX_TABLE,
        bytes: MAX_TABLE_BYTES,
    };
}

impl Default for TableLimits {
    fn default() -> TableLimits {
        TableLimits::CONNECTION
    }
}
/// While a frame is incomplete, buffer space is reserved for at most this
/// much more than twice what has arrived (never for the announced length
/// at once).
const RESERVE_STEP: usize = 64 * 1024;
/// Payloads up to this size are copied next to their header.
const COALESCE_LIMIT: usize = 512;
const TAG_CHANNEL: u8 = 0x01;
const TAG_NAME: u8 = 0x02;
const TAG_MESSAGE: u8 = 0x03;
const TAG_VALUE: u8 = 0x04;
const TAG_STREAM: u8 = 0x05;

/// Most bytes of a stream frame's header ([`stream_frame_header`],
/// [`stream_frame_header_for`]): the body length and the stream number,
/// up to 10 bytes each (a padded header), and the tag.
pub const STREAM_HEADER_MAX: usize = 21;

/// Writes the shortest header of a stream frame carrying `len` bytes of
/// stream `stream`'s data into `out`; returns its length. The data
/// follows the header on the wire as it is (no copy into a frame):
///
/// ```text
/// frame := varint bodyLen  0x05  varint stream  data      ; bodyLen covers tag, stream, data
/// ```
///
/// A stream frame touches no intern table. It is sent only to a peer that
/// asked for it (a Juxta socket in stream mode announced `stream` as the
/// number its data should carry, [`crate::socket::stream::ELEM_FRAMES`]);
/// [`CompactDecoder::decode_next`] reads it, [`CompactDecoder::decode`]
/// refuses it. A sender writing the data from its own buffer uses
/// [`stream_frame_header_for`].
///
/// ```
/// use bytes::BytesMut;
/// use juxta_proto::wire::compact::{stream_frame_header, CompactDecoder, CompactFrame, STREAM_HEADER_MAX};
/// let mut h = [0u8; STREAM_HEADER_MAX];
/// let n = stream_frame_header(7, 5, &mut h);
/// let mut rx = BytesMut::from(&h[..n]);
/// rx.extend_from_slice(b"hello");
/// match CompactDecoder::new().decode_next(&mut rx, 1 << 20).unwrap() {
///     Some(CompactFrame::Stream { stream, data, wire_len }) => {
///         assert_eq!((stream, &data[..], wire_len), (7, &b"hello"[..], n + 5));
///     }
///     _ => unreachable!(),
/// }
/// ```
pub fn stream_frame_header(stream: u32, len: usize, out: &mut [u8; STREAM_HEADER_MAX]) -> usize {
    put_stream_header(stream, len, None, out)
}

/// The header of a stream frame carrying `data` ([`stream_frame_header`]),
/// for a sender that writes `data` from where it lies right after the
/// header (one `writev`). From [`LARGE_STREAM_FRAME`] bytes on, the header
/// is padded (the stream number, then the length, written as longer
/// varints, which read as the same values) so that its length is
/// congruent to `data`'s address modulo 16: the kernel's copy of the
/// frame into its socket buffers, which starts a frame at a 16-byte
/// boundary when the connection was idle (request and response), then
/// copies between mutually aligned addresses. Measured on this project's
/// AMD EPYC host with the peers on two cores, a socket's 1 MiB round trip
/// went from 0.49-0.67x `tcp`'s bandwidth (5-byte header) to 0.87-1.02x
/// (aligned); docs/benchmarks.md, "A large stream frame's header".
///
/// ```
/// use juxta_proto::wire::compact::{stream_frame_header_for, LARGE_STREAM_FRAME, STREAM_HEADER_MAX};
/// let data = vec![7u8; LARGE_STREAM_FRAME + 1];
/// let mut h = [0u8; STREAM_HEADER_MAX];
/// let n = stream_frame_header_for(3, &data[1..], &mut h);
/// assert_eq!(n % 16, (data[1..].as_ptr() as usize) % 16);
/// assert_eq!(stream_frame_header_for(3, &data[..1], &mut h), 3);
/// ```
pub fn stream_frame_header_for(
    stream: u32,
    data: &[u8],
    out: &mut [u8; STREAM_HEADER_MAX],
) -> usize {
    let align = (data.len() >= LARGE_STREAM_FRAME).then_some(data.as_ptr() as usize % 16);
    put_stream_header(stream, data.len(), align, out)
}

/// Data of this many bytes or more goes in a stream frame whose header
/// [`stream_frame_header_for`] aligns to the data's address.
pub const LARGE_STREAM_FRAME: usize = 64 * 1024;
/// Longest varint written (what [`get_varint`] reads).
const MAX_VARINT: usize = 10;

/// Writes a stream frame's header; with `align`, padded to a length
/// congruent to it modulo 16 where the two varints can take the padding
/// (else the shortest).
fn put_stream_header(
    stream: u32,
    len: usize,
    align: Option<usize>,
    out: &mut [u8; STREAM_HEADER_MAX],
) -> usize {
    let least = varint_len(u64::from(stream));
    let body_for = |id_w: usize| (len as u64).saturating_add(1 + id_w as u64);
    let mut id_w = least;
    let mut len_w = varint_len(body_for(least));
    if let Some(align) = align {
        let shortest = len_w + 1 + least;
        let target = shortest + (align + 16 - shortest % 16) % 16;
        // The stream number takes the padding first, the length the rest.
        let split = (least..=MAX_VARINT).rev().find_map(|id| {
            let rest = target.checked_sub(1 + id)?;
            (rest >= varint_len(body_for(id)) && rest <= MAX_VARINT).then_some((id, rest))
        });
        if let Some((id, l)) = split {
            (id_w, len_w) = (id, l);
        }
    }
    let mut at = put_varint_padded(out, 0, body_for(id_w), len_w);
    out[at] = TAG_STREAM;
    at += 1;
    put_varint_padded(out, at, u64::from(stream), id_w)
}

/// Writes `v` as a varint of exactly `width` bytes (at least its minimal
/// length) at `out[at..]`: the groups past the value are zero groups with
/// the continuation bit, which a decoder reads as the same value.
fn put_varint_padded(out: &mut [u8], mut at: usize, mut v: u64, width: usize) -> usize {
    for _ in 1..width {
        out[at] = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
        at += 1;
    }
    put_varint_into(out, at, v)
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Writes `v` as a varint at `out[at..]`; returns the index after it.
fn put_varint_into(out: &mut [u8], mut at: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        out[at] = (v as u8) | 0x80;
        v >>= 7;
        at += 1;
    }
    out[at] = v as u8;
    at + 1
}

/// One frame read by [`CompactDecoder::decode_next`].
#[derive(Debug, Clone, PartialEq)]
pub enum CompactFrame {
    /// A message to a service address.
    Message {
        /// Its service address (shared with the channel table).
        to: Arc<ServiceAddress>,
        /// The message.
        message: Message,
        /// Bytes the frame took on the wire.
        wire_len: usize,
    },
    /// Data of a stream ([`stream_frame_header`]).
    Stream {
        /// The number the receiver gave the stream.
        stream: u32,
        /// The data (a slice of the receive buffer, not a copy).
        data: Bytes,
        /// Bytes the frame took on the wire.
        wire_len: usize,
    },
}
/// Most values per value table, per direction.
pub const MAX_VALUES: usize = 64;
/// Longest value interned; longer ones are written out.
pub const MAX_VALUE_LEN: usize = 4 * 1024;
/// Shortest value interned: a reference must save more than it costs.
pub const MIN_VALUE_LEN: usize = 32;
/// Most bytes of values per value table, per direction.
pub const MAX_VALUE_BYTES: usize = 128 * 1024;
/// The elements (namespace, name) whose values are interned when the
/// connection agreed on it: they repeat byte for byte on every message of
/// a routed stream.
pub const INTERNED_VALUES: [(&str, &str); 2] =
    [("jxta", "EndpointRouterMsg-fingerprint"), ("juxta", "ERM")];
/// Most values one message refers to (the encoder writes further ones
/// out; the decoder refuses a message with more references).
pub const VALUES_PER_MESSAGE: usize = 8;
/// Longest string in a definition.
const MAX_STR: usize = 32 * 1024;

/// Errors from compact frames.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    /// A varint runs past 10 bytes or the frame.
    #[error("malformed varint")]
    BadVarint,
    /// The frame is larger than allowed.
    #[error("compact frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// announced
        len: u64,
        /// limit
        max: u64,
    },
    /// The frame ended early.
    #[error("compact frame truncated")]
    Truncated,
    /// Unknown item tag.
    #[error("unknown compact item tag {0:#x}")]
    BadTag(u8),
    /// An id that was never defined, or a definition out of sequence.
    #[error("undefined or out-of-order compact id {0}")]
    BadId(u64),
    /// A string is not UTF-8 or too long.
    #[error("bad string in compact frame")]
    BadString,
    /// Bytes after the message.
    #[error("trailing bytes after compact message")]
    Trailing,
    /// A message with no element.
    #[error("compact message without elements")]
    Empty,
    /// More elements than [`MAX_DECODE_ELEMENTS`].
    #[error("compact message has more than {max} elements")]
    TooManyElements {
        /// the cap
        max: usize,
    },
    /// A definition would take an intern table past its byte limit
    /// ([`TableLimits`]; [`MAX_TABLE_BYTES`] on a connection).
    #[error("compact intern table over {max} bytes")]
    TableTooLarge {
        /// the cap
        max: usize,
    },
    /// A value definition or reference that breaks the value table's
    /// rules: on a connection that did not agree on values, an id that was
    /// never defined or skips ahead, a value over [`MAX_VALUE_LEN`], or a
    /// table over [`MAX_VALUE_BYTES`].
    #[error("bad compact value: {0}")]
    BadValue(&'static str),
    /// A name longer than [`MAX_NAME_LEN`] given to the encoder.
    #[error("element name, namespace or MIME type longer than {max} bytes")]
    NameTooLong {
        /// the cap
        max: usize,
    },
}

/// Appends a LEB128 varint.
pub fn put_varint(buf: &mut BytesMut, v: u64) {
    let mut b = [0u8; 10];
    let n = put_varint_into(&mut b, 0, v);
    buf.put_slice(&b[..n]);
}

/// Reads a LEB128 varint from the start of `buf`: `Ok(None)` if incomplete,
/// otherwise the value and its length.
pub fn get_varint(buf: &[u8]) -> Result<Option<(u64, usize)>, CompactError> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        if i == 9 && b > 1 {
            return Err(CompactError::BadVarint);
        }
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((v, i + 1)));
        }
    }
    if buf.len() >= 10 {
        Err(CompactError::BadVarint)
    } else {
        Ok(None)
    }
}

fn put_str(buf: &mut BytesMut, s: &str) {
    put_varint(buf, s.len() as u64);
    buf.put_slice(s.as_bytes());
}

type NameKey = (ByteString, ByteString, Option<ByteString>);

fn channel_cost(to: &ServiceAddress) -> usize {
    to.service.len() + to.param.as_ref().map_or(0, String::len)
}

fn name_cost(e: &Element) -> usize {
    e.namespace.len() + e.name.len() + e.mime.as_ref().map_or(0, |m| m.len())
}

/// Sending side of a compact connection direction.
#[derive(Debug, Default)]
pub struct CompactEncoder {
    channels: HashMap<ServiceAddress, u64>,
    channel_bytes: usize,
    /// Keyed by `len(namespace):namespace len(name):name mime`, built in
    /// `scratch` so a lookup allocates nothing once a name is interned.
    names: HashMap<String, u64>,
    name_bytes: usize,
    scratch: String,
    /// The last channel used and its ID: a stream of messages to one
    /// service (the usual case) skips hashing its address.
    last_channel: Option<(ServiceAddress, u64)>,
    /// The last names used and their IDs (at most [`RECENT_NAMES`]),
    /// compared directly: a stream of messages of the same shape skips
    /// building and hashing their keys. IDs never change once given.
    recent_names: Vec<(ByteString, ByteString, Option<ByteString>, u64)>,
    /// The buffer small frames are built in: each frame is split off it,
    /// and once written and dropped its memory is taken back by the next
    /// frame (no allocation per small message).
    frames: BytesMut,
    /// The value table, when the connection agreed on values.
    values: Option<ValueTable>,
    limits: TableLimits,
}

/// The sender's value table: its own copy of each value, found by content.
#[derive(Debug, Default)]
struct ValueTable {
    /// Value `id` is `slots[id - 1]`.
    slots: Vec<Bytes>,
    bytes: usize,
    /// Content to id, for values not among the recent ones.
    index: HashMap<Bytes, u64, crate::id::IdHashState>,
    /// The ids used last (0: none), compared by length and content before
    /// the index is hashed: a stream repeats the same one or two values.
    recent: [u64; 4],
    next_recent: usize,
    /// The next slot replaced once the table is full.
    victim: usize,
}

impl ValueTable {
    /// The id of `data`, and whether this message must define it; `None`
    /// if the table cannot take it now (it is then written out). `busy`
    /// holds the ids this message already refers to: they are not replaced.
    fn id_of(&mut self, data: &Bytes, busy: &[u64]) -> Option<(u64, bool)> {
        for &id in &self.recent {
            if id == 0 {
                continue;
            }
            let slot = &self.slots[id as usize - 1];
            if slot.len() == data.len() && (slot.as_ptr() == data.as_ptr() || slot == data) {
                return Some((id, false));
            }
        }
        if let Some(&id) = self.index.get(data) {
            self.remember(id);
            return Some((id, false));
        }
        let copy = Bytes::copy_from_slice(data);
        let id = if self.slots.len() < MAX_VALUES && self.bytes + data.len() <= MAX_VALUE_BYTES {
            self.slots.push(copy.clone());
            self.slots.len() as u64
        } else {
            // Full: replace the next slot in turn that this message does
            // not use and whose room is enough.
            let n = self.slots.len();
            let victim = (0..n).map(|k| (self.victim + k) % n).find(|&i| {
                !busy.contains(&(i as u64 + 1))
                    && self.bytes - self.slots[i].len() + data.len() <= MAX_VALUE_BYTES
            })?;
            self.victim = (victim + 1) % n;
            let old = std::mem::replace(&mut self.slots[victim], copy.clone());
            self.bytes -= old.len();
            self.index.remove(&old);
            victim as u64 + 1
        };
        self.bytes += data.len();
        self.index.insert(copy, id);
        self.remember(id);
        Some((id, true))
    }

    fn remember(&mut self, id: u64) {
        if !self.recent.contains(&id) {
            self.recent[self.next_recent] = id;
            self.next_recent = (self.next_recent + 1) % self.recent.len();
        }
    }
}

/// Whether `e`'s value is one [`INTERNED_VALUES`] names, of a length worth
/// interning.
fn internable(e: &Element) -> bool {
    (MIN_VALUE_LEN..=MAX_VALUE_LEN).contains(&e.data.len()) && is_interned(&e.namespace, &e.name)
}

/// Whether [`INTERNED_VALUES`] names this element.
fn is_interned(namespace: &str, name: &str) -> bool {
    INTERNED_VALUES
        .iter()
        .any(|(ns, n)| name == *n && namespace == *ns)
}

/// Whether two names are the same: the same shared string (a static name,
/// or one copy handed around) without comparing bytes, else by content.
fn same_name(a: &ByteString, b: &ByteString) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

/// [`same_name`] for an optional MIME type.
fn same_mime(a: &Option<ByteString>, b: &Option<ByteString>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same_name(a, b),
        _ => false,
    }
}

/// Most bytes [`CompactEncoder`] keeps for building small frames.
const FRAME_BUFFER: usize = 16 * 1024;

/// Names remembered by [`CompactEncoder`] beside its table.
const RECENT_NAMES: usize = 8;

impl CompactEncoder {
    /// A fresh encoder (empty tables).
    pub fn new() -> CompactEncoder {
        CompactEncoder::default()
    }

    /// A fresh encoder that interns [`INTERNED_VALUES`], for a connection
    /// whose handshake agreed on values (the remote decodes with
    /// [`CompactDecoder::with_values`]).
    ///
    /// ```
    /// use juxta_proto::endpoint::ServiceAddress;
    /// use juxta_proto::message::{codec::EncodedMessage, Element, Message};
    /// use juxta_proto::wire::compact::{CompactDecoder, CompactEncoder};
    /// let (mut enc, mut dec) = (CompactEncoder::with_values(), CompactDecoder::with_values());
    /// let to = ServiceAddress::new("S", None);
    /// let fp = Element::bytes("jxta", "EndpointRouterMsg-fingerprint", vec![7u8; 850]);
    /// let m = Message::new().with(fp).with(Element::bytes("", "x", &b"1"[..]));
    /// let mut sizes = Vec::new();
    /// for _ in 0..2 {
    ///     let mut out = EncodedMessage::default();
    ///     enc.encode(&to, &m, &mut out);
    ///     sizes.push(out.len);
    ///     let mut rx = bytes::BytesMut::from(&out.to_bytes()[..]);
    ///     let (_, got, _) = dec.decode(&mut rx, 1 << 20).unwrap().unwrap();
    ///     assert_eq!(got, m);
    /// }
    /// // The second message refers to the value the first defined.
    /// assert!(sizes[0] > 850 && sizes[1] < 16, "{sizes:?}");
    /// ```
    pub fn with_values() -> CompactEncoder {
        CompactEncoder {
            values: Some(ValueTable::default()),
            ..CompactEncoder::default()
        }
    }

    /// This encoder with intern tables bounded by `limits` (the remote
    /// decodes with [`CompactDecoder::with_limits`] and the same limits).
    pub fn with_limits(mut self, limits: TableLimits) -> CompactEncoder {
        self.limits = limits;
        self
    }

    /// Whether a [`CompactDecoder`] accepts `msg`: at least one and at most
    /// [`MAX_DECODE_ELEMENTS`] elements, names of at most [`MAX_NAME_LEN`]
    /// bytes. [`CompactEncoder::try_encode`] checks this first.
    pub fn check(msg: &Message) -> Result<(), CompactError> {
        if msg.elements.is_empty() {
            return Err(CompactError::Empty);
        }
        if msg.elements.len() > MAX_DECODE_ELEMENTS {
            return Err(CompactError::TooManyElements {
                max: MAX_DECODE_ELEMENTS,
            });
        }
        let too_long = |s: &str| s.len() > MAX_NAME_LEN;
        if msg.elements.iter().any(|e| {
            too_long(&e.namespace) || too_long(&e.name) || e.mime.as_deref().is_some_and(too_long)
        }) {
            return Err(CompactError::NameTooLong { max: MAX_NAME_LEN });
        }
        Ok(())
    }

    /// [`CompactEncoder::encode`] after [`CompactEncoder::check`]: a message
    /// the remote decoder would refuse is an error here instead.
    ///
    /// ```
    /// use juxta_proto::endpoint::ServiceAddress;
    /// use juxta_proto::message::{codec::EncodedMessage, Element, Message};
    /// use juxta_proto::wire::compact::{CompactEncoder, CompactError};
    /// let mut enc = CompactEncoder::new();
    /// let to = ServiceAddress::new("S", None);
    /// let mut out = EncodedMessage::default();
    /// assert_eq!(enc.try_encode(&to, &Message::new(), &mut out), Err(CompactError::Empty));
    /// let m = Message::new().with(Element::bytes("", "x", &b"1"[..]));
    /// enc.try_encode(&to, &m, &mut out).unwrap();
    /// assert!(out.len > 0);
    /// ```
    pub fn try_encode(
        &mut self,
        to: &ServiceAddress,
        msg: &Message,
        out: &mut EncodedMessage,
    ) -> Result<(), CompactError> {
        CompactEncoder::check(msg)?;
        self.encode(to, msg, out);
        Ok(())
    }

    /// Encodes one message for `to` into `out` (a length prefix, then the
    /// body; large payloads stay the caller's buffers). The message should
    /// pass [`CompactEncoder::check`], or the remote decoder refuses it.
    pub fn encode(&mut self, to: &ServiceAddress, msg: &Message, out: &mut EncodedMessage) {
        // The values this message refers to instead of writing them out
        // (element index, value id, defined by this frame).
        let mut refs = [(usize::MAX, 0u64, false); VALUES_PER_MESSAGE];
        let mut nrefs = 0;
        if let Some(table) = &mut self.values {
            let mut busy = [0u64; VALUES_PER_MESSAGE];
            for (i, e) in msg.elements.iter().enumerate() {
                if nrefs == VALUES_PER_MESSAGE {
                    break;
                }
                if internable(e) {
                    if let Some((id, define)) = table.id_of(&e.data, &busy[..nrefs]) {
                        busy[nrefs] = id;
                        refs[nrefs] = (i, id, define);
                        nrefs += 1;
                    }
                }
            }
        }
        let refs = &refs[..nrefs];
        let value_ref = |i: usize| refs.iter().find(|r| r.0 == i).map(|r| r.1);
        // Written next to the headers: small payloads and the values this
        // frame defines; referenced values take a varint.
        let inline =
            |i: usize, e: &Element| value_ref(i).is_none() && e.data.len() > COALESCE_LIMIT;
        // The headers (and the payloads copied next to them) are built in
        // one buffer with room for the frame's length prefix in front, the
        // prefix written in place once the length is known. A frame whose
        // payloads are all copied (the small-message case) is that one
        // buffer; larger payloads go out as the caller's own buffers
        // between pieces of it.
        let whole = !msg.elements.iter().enumerate().any(|(i, e)| inline(i, e));
        let room = PREFIX_ROOM;
        let need = room
            + 16
            + msg
                .elements
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    8 + if inline(i, e) || value_ref(i).is_some() {
                        0
                    } else {
                        e.data.len()
                    }
                })
                .sum::<usize>()
            + refs
                .iter()
                .filter(|r| r.2)
                .map(|r| 12 + msg.elements[r.0].data.len())
                .sum::<usize>();
        // Headers of a few KB are built in the kept buffer (its memory
        // comes back once the previous frames are written and dropped);
        // more in a buffer of their own.
        let pooled = need <= FRAME_BUFFER / 4;
        let mut body = if pooled {
            let mut b = std::mem::take(&mut self.frames);
            if b.capacity() < need {
                // Reclaims the whole buffer when every frame split off it
                // is gone, else starts a new one.
                b.reserve(FRAME_BUFFER);
            }
            b
        } else {
            BytesMut::with_capacity(need)
        };
        body.put_bytes(0, room);
        // Definitions first.
        let channel = match &self.last_channel {
            Some((c, id)) if c == to => *id,
            _ => {
                let id = self.channel_id(to, &mut body);
                if id != 0 {
                    self.last_channel = Some((to.clone(), id));
                }
                id
            }
        };
        // The name IDs: on the stack for a message of a few elements.
        let mut few = [0u64; RECENT_NAMES];
        let mut many = Vec::new();
        let name_ids: &mut [u64] = if msg.elements.len() <= RECENT_NAMES {
            &mut few[..msg.elements.len()]
        } else {
            many.resize(msg.elements.len(), 0);
            &mut many
        };
        for (e, slot) in msg.elements.iter().zip(name_ids.iter_mut()) {
            let recent = self
                .recent_names
                .iter()
                .find(|(ns, n, m, _)| {
                    same_name(n, &e.name) && same_name(ns, &e.namespace) && same_mime(m, &e.mime)
                })
                .map(|r| r.3);
            *slot = match recent {
                Some(id) => id,
                None => {
                    let id = self.name_id(e, &mut body);
                    if id != 0 {
                        if self.recent_names.len() >= RECENT_NAMES {
                            self.recent_names.remove(0);
                        }
                        self.recent_names.push((
                            e.namespace.clone(),
                            e.name.clone(),
                            e.mime.clone(),
                            id,
                        ));
                    }
                    id
                }
            };
        }
        for &(i, id, define) in refs {
            if define {
                let data = &msg.elements[i].data;
                body.put_u8(TAG_VALUE);
                put_varint(&mut body, id);
                put_varint(&mut body, data.len() as u64);
                body.put_slice(data);
            }
        }
        let values = self.values.is_some();
        // An element's length, or its value's id.
        let put_len = |body: &mut BytesMut, i: usize, len: usize| match value_ref(i) {
            Some(id) => {
                put_varint(body, (id << 1) | 1);
                true
            }
            None if values => {
                put_varint(body, (len as u64) << 1);
                false
            }
            None => {
                put_varint(body, len as u64);
                false
            }
        };
        body.put_u8(TAG_MESSAGE);
        put_varint(&mut body, channel);
        if channel == 0 {
            put_channel(&mut body, to);
        }
        put_varint(&mut body, msg.elements.len() as u64);
        if whole {
            for (i, (e, &id)) in msg.elements.iter().zip(name_ids.iter()).enumerate() {
                put_varint(&mut body, id);
                if id == 0 {
                    put_name(&mut body, e);
                }
                if !put_len(&mut body, i, e.data.len()) {
                    body.put_slice(&e.data);
                }
            }
            // The length prefix, right-aligned in the room left for it.
            let mut len = [0u8; PREFIX_ROOM];
            let n = put_varint_into(&mut len, 0, (body.len() - PREFIX_ROOM) as u64);
            body[PREFIX_ROOM - n..PREFIX_ROOM].copy_from_slice(&len[..n]);
            let mut frame = body.split();
            if pooled {
                self.frames = body;
            }
            frame.advance(PREFIX_ROOM - n);
            out.push(frame.freeze());
            return;
        }
        // Large payloads: the pieces of headers and the payloads in order,
        // the first piece (with the room for the prefix) held back until
        // the total is known; its place in `out` is kept meanwhile.
        let slot = out.chunks.len();
        out.chunks.push(Bytes::new());
        let mut first: Option<BytesMut> = None;
        let mut rest = 0usize;
        for (i, (e, &id)) in msg.elements.iter().zip(name_ids.iter()).enumerate() {
            put_varint(&mut body, id);
            if id == 0 {
                put_name(&mut body, e);
            }
            if put_len(&mut body, i, e.data.len()) {
                continue;
            }
            if e.data.len() <= COALESCE_LIMIT {
                body.put_slice(&e.data);
            } else {
                let piece = body.split();
                match first {
                    None => first = Some(piece),
                    Some(_) => {
                        rest += piece.len();
                        out.push(piece.freeze());
                    }
                }
                rest += e.data.len();
                out.push(e.data.clone());
            }
        }
        let tail = body.split();
        rest += tail.len();
        out.push(tail.freeze());
        if pooled {
            self.frames = body;
        }
        let mut first = first.expect("a frame that is not whole has a large payload");
        let total = first.len() - PREFIX_ROOM + rest;
        let mut len = [0u8; PREFIX_ROOM];
        let n = put_varint_into(&mut len, 0, total as u64);
        first[PREFIX_ROOM - n..PREFIX_ROOM].copy_from_slice(&len[..n]);
        first.advance(PREFIX_ROOM - n);
        out.len += first.len();
        out.chunks[slot] = first.freeze();
    }
}

/// Room for a varint length prefix (a `u64` takes at most 10 bytes).
const PREFIX_ROOM: usize = 10;

impl CompactEncoder {
    /// The ID of channel `to`, defined in `body` if new; 0 when the table
    /// is full (the address then goes inline).
    fn channel_id(&mut self, to: &ServiceAddress, body: &mut BytesMut) -> u64 {
        match self.channels.get(to) {
            Some(&id) => id,
            None if self.channels.len() < self.limits.entries
                && self.channel_bytes + channel_cost(to) <= self.limits.bytes =>
            {
                let id = self.channels.len() as u64 + 1;
                self.channel_bytes += channel_cost(to);
                self.channels.insert(to.clone(), id);
                body.put_u8(TAG_CHANNEL);
                put_varint(body, id);
                put_channel(body, to);
                id
            }
            None => 0,
        }
    }

    /// The ID of `e`'s name, defined in `body` if new; 0 when the table is
    /// full (the name then goes inline).
    fn name_id(&mut self, e: &Element, body: &mut BytesMut) -> u64 {
        // Length-prefixed parts: names may contain any character,
        // NUL included, and two different names must never share a
        // key (("", "\0", none) and ("", "", "\0") once did).
        self.scratch.clear();
        let _ = write!(self.scratch, "{}:", e.namespace.len());
        self.scratch.push_str(&e.namespace);
        let _ = write!(self.scratch, "{}:", e.name.len());
        self.scratch.push_str(&e.name);
        self.scratch.push_str(e.mime.as_deref().unwrap_or(""));
        match self.names.get(self.scratch.as_str()) {
            Some(&id) => id,
            None if self.names.len() < self.limits.entries
                && self.name_bytes + name_cost(e) <= self.limits.bytes =>
            {
                let id = self.names.len() as u64 + 1;
                self.name_bytes += name_cost(e);
                body.put_u8(TAG_NAME);
                put_varint(body, id);
                put_name(body, e);
                self.names.insert(self.scratch.clone(), id);
                id
            }
            None => 0,
        }
    }
}

fn put_channel(body: &mut BytesMut, to: &ServiceAddress) {
    put_str(body, &to.service);
    match &to.param {
        Some(p) => {
            body.put_u8(1);
            put_str(body, p);
        }
        None => body.put_u8(0),
    }
}

fn put_name(body: &mut BytesMut, e: &Element) {
    put_str(body, &e.namespace);
    put_str(body, &e.name);
    put_str(body, e.mime.as_deref().unwrap_or(""));
}

/// Receiving side of a compact connection direction.
#[derive(Debug, Default)]
pub struct CompactDecoder {
    /// Shared with the frames decoded for them: a frame to a known
    /// channel costs a reference count, not a copy of the address.
    channels: Vec<Arc<ServiceAddress>>,
    channel_bytes: usize,
    names: Vec<NameKey>,
    name_bytes: usize,
    /// The value table (its own copies), when the connection agreed on
    /// values.
    values: Option<Vec<Bytes>>,
    value_bytes: usize,
    limits: TableLimits,
}

struct Cursor {
    body: Bytes,
}

impl Cursor {
    fn varint(&mut self) -> Result<u64, CompactError> {
        match get_varint(&self.body)? {
            Some((v, n)) => {
                self.body.advance(n);
                Ok(v)
            }
            None => Err(CompactError::Truncated),
        }
    }
    fn u8(&mut self) -> Result<u8, CompactError> {
        if self.body.is_empty() {
            return Err(CompactError::Truncated);
        }
        Ok(self.body.get_u8())
    }
    fn bytes(&mut self, n: u64) -> Result<Bytes, CompactError> {
        if n > self.body.len() as u64 {
            return Err(CompactError::Truncated);
        }
        Ok(self.body.split_to(n as usize))
    }
    /// A string of at most `max` bytes, as a slice of the frame.
    fn str(&mut self, max: usize) -> Result<ByteString, CompactError> {
        let n = self.varint()?;
        if n > max as u64 {
            return Err(CompactError::BadString);
        }
        let b = self.bytes(n)?;
        ByteString::try_from(b).map_err(|_| CompactError::BadString)
    }
    fn channel(&mut self) -> Result<ServiceAddress, CompactError> {
        let service = String::from(self.str(MAX_STR)?);
        let param = match self.u8()? {
            0 => None,
            1 => Some(String::from(self.str(MAX_STR)?)),
            t => return Err(CompactError::BadTag(t)),
        };
        Ok(ServiceAddress { service, param })
    }
    /// A name whose strings are slices of the frame.
    fn name(&mut self) -> Result<NameKey, CompactError> {
        let ns = self.str(MAX_NAME_LEN)?;
        let name = self.str(MAX_NAME_LEN)?;
        let mime = self.str(MAX_NAME_LEN)?;
        Ok((ns, name, (!mime.is_empty()).then_some(mime)))
    }
}

/// A copy that does not keep the frame it was sliced from alive.
fn own(s: &ByteString) -> ByteString {
    ByteString::from(&**s)
}

impl CompactDecoder {
    /// A fresh decoder.
    pub fn new() -> CompactDecoder {
        CompactDecoder::default()
    }

    /// A fresh decoder for a connection whose handshake agreed on values
    /// (the remote encodes with [`CompactEncoder::with_values`]).
    pub fn with_values() -> CompactDecoder {
        CompactDecoder {
            values: Some(Vec::new()),
            ..CompactDecoder::default()
        }
    }

    /// This decoder with intern tables bounded by `limits` (the remote
    /// encodes with [`CompactEncoder::with_limits`] and the same limits).
    pub fn with_limits(mut self, limits: TableLimits) -> CompactDecoder {
        self.limits = limits;
        self
    }

    /// Whether this decoder reads interned values.
    pub fn has_values(&self) -> bool {
        self.values.is_some()
    }

    /// Reads a value definition (after its tag).
    fn define_value(&mut self, c: &mut Cursor) -> Result<(), CompactError> {
        let table = self
            .values
            .as_mut()
            .ok_or(CompactError::BadTag(TAG_VALUE))?;
        let id = c.varint()?;
        if id == 0 || id > table.len() as u64 + 1 || id > MAX_VALUES as u64 {
            return Err(CompactError::BadValue("id out of sequence"));
        }
        let len = c.varint()?;
        if len > MAX_VALUE_LEN as u64 {
            return Err(CompactError::BadValue("value too long"));
        }
        let data = c.bytes(len)?;
        let i = id as usize - 1;
        let old = table.get(i).map_or(0, Bytes::len);
        let bytes = self.value_bytes - old + data.len();
        if bytes > MAX_VALUE_BYTES {
            return Err(CompactError::BadValue("table too large"));
        }
        self.value_bytes = bytes;
        // Copied: the table outlives this frame's buffer.
        let copy = Bytes::copy_from_slice(&data);
        if i == table.len() {
            table.push(copy);
        } else {
            table[i] = copy;
        }
        Ok(())
    }

    /// Decodes one frame from the front of `rx`, if it is complete. On
    /// `Ok(None)`, `rx` is untouched and more bytes are needed; the second
    /// value is how many bytes the whole frame needs (to size reads).
    pub fn decode(
        &mut self,
        rx: &mut BytesMut,
        max: u64,
    ) -> Result<Option<(Arc<ServiceAddress>, Message, usize)>, CompactError> {
        match self.decode_next(rx, max)? {
            None => Ok(None),
            Some(CompactFrame::Message {
                to,
                message,
                wire_len,
            }) => Ok(Some((to, message, wire_len))),
            Some(CompactFrame::Stream { .. }) => Err(CompactError::BadTag(TAG_STREAM)),
        }
    }

    /// Like [`CompactDecoder::decode`], and also reads stream frames
    /// ([`stream_frame_header`]): a connection's reader, which hands a
    /// stream's data to the socket that asked for it.
    pub fn decode_next(
        &mut self,
        rx: &mut BytesMut,
        max: u64,
    ) -> Result<Option<CompactFrame>, CompactError> {
        let Some((len, n)) = get_varint(rx)? else {
            return Ok(None);
        };
        if len > max {
            return Err(CompactError::TooLarge { len, max });
        }
        let total = n + len as usize;
        if rx.len() < total {
            // Grow in step with what has arrived (at most doubling it, plus
            // one step), so a length alone never allocates `max` bytes.
            let want = total.min(rx.len().saturating_mul(2).saturating_add(RESERVE_STEP));
            if rx.capacity() < want {
                rx.reserve(want - rx.len());
            }
            return Ok(None);
        }
        rx.advance(n);
        let body = rx.split_to(len as usize).freeze();
        if body.first() == Some(&TAG_STREAM) {
            let mut c = Cursor { body };
            c.body.advance(1);
            let stream = c.varint()?;
            let stream = u32::try_from(stream).map_err(|_| CompactError::BadId(stream))?;
            if c.body.is_empty() {
                return Err(CompactError::Empty);
            }
            return Ok(Some(CompactFrame::Stream {
                stream,
                data: c.body,
                wire_len: total,
            }));
        }
        let (to, message) = self.decode_body(body)?;
        Ok(Some(CompactFrame::Message {
            to,
            message,
            wire_len: total,
        }))
    }

    /// Decodes `frame`, which must hold exactly one whole frame (its
    /// length prefix included), as a message inside another framed channel
    /// arrives: slices of `frame` become the message's payloads, nothing is
    /// copied into a buffer of the decoder's. An incomplete frame is
    /// [`CompactError::Truncated`], bytes after it [`CompactError::Trailing`].
    ///
    /// ```
    /// use juxta_proto::endpoint::ServiceAddress;
    /// use juxta_proto::message::{codec::EncodedMessage, Element, Message};
    /// use juxta_proto::wire::compact::{CompactDecoder, CompactEncoder, CompactError};
    /// let (mut enc, mut dec) = (CompactEncoder::new(), CompactDecoder::new());
    /// let m = Message::new().with(Element::bytes("", "x", &b"1"[..]));
    /// let mut out = EncodedMessage::default();
    /// enc.encode(&ServiceAddress::new("S", None), &m, &mut out);
    /// let frame = out.to_bytes();
    /// let short = frame.slice(..frame.len() - 1);
    /// assert_eq!(dec.decode_frame(short, 1 << 20).unwrap_err(), CompactError::Truncated);
    /// let (to, got) = dec.decode_frame(frame, 1 << 20).unwrap();
    /// assert_eq!((to.service.as_str(), got), ("S", m));
    /// ```
    pub fn decode_frame(
        &mut self,
        mut frame: Bytes,
        max: u64,
    ) -> Result<(Arc<ServiceAddress>, Message), CompactError> {
        let (len, n) = get_varint(&frame)?.ok_or(CompactError::Truncated)?;
        if len > max {
            return Err(CompactError::TooLarge { len, max });
        }
        frame.advance(n);
        match (frame.len() as u64).cmp(&len) {
            std::cmp::Ordering::Less => Err(CompactError::Truncated),
            std::cmp::Ordering::Greater => Err(CompactError::Trailing),
            std::cmp::Ordering::Equal => self.decode_body(frame),
        }
    }

    /// Decodes one frame's body (after its length prefix).
    fn decode_body(&mut self, body: Bytes) -> Result<(Arc<ServiceAddress>, Message), CompactError> {
        let mut c = Cursor { body };
        loop {
            match c.u8()? {
                TAG_CHANNEL => {
                    let id = c.varint()?;
                    if id != self.channels.len() as u64 + 1
                        || self.channels.len() >= self.limits.entries
                    {
                        return Err(CompactError::BadId(id));
                    }
                    let ch = c.channel()?;
                    self.channel_bytes += channel_cost(&ch);
                    if self.channel_bytes > self.limits.bytes {
                        return Err(CompactError::TableTooLarge {
                            max: self.limits.bytes,
                        });
                    }
                    self.channels.push(Arc::new(ch));
                }
                TAG_NAME => {
                    let id = c.varint()?;
                    if id != self.names.len() as u64 + 1 || self.names.len() >= self.limits.entries
                    {
                        return Err(CompactError::BadId(id));
                    }
                    let (ns, name, mime) = c.name()?;
                    self.name_bytes += ns.len() + name.len() + mime.as_ref().map_or(0, |m| m.len());
                    if self.name_bytes > self.limits.bytes {
                        return Err(CompactError::TableTooLarge {
                            max: self.limits.bytes,
                        });
                    }
                    // Copied: a table entry lives as long as the connection
                    // and must not pin this frame's buffer.
                    self.names
                        .push((own(&ns), own(&name), mime.as_ref().map(own)));
                }
                TAG_VALUE => self.define_value(&mut c)?,
                TAG_MESSAGE => break,
                t => return Err(CompactError::BadTag(t)),
            }
        }
        let ch = c.varint()?;
        let to = if ch == 0 {
            Arc::new(c.channel()?)
        } else {
            self.channels
                .get(ch as usize - 1)
                .cloned()
                .ok_or(CompactError::BadId(ch))?
        };
        let count = c.varint()?;
        if count == 0 {
            return Err(CompactError::Empty);
        }
        if count > MAX_DECODE_ELEMENTS as u64 {
            return Err(CompactError::TooManyElements {
                max: MAX_DECODE_ELEMENTS,
            });
        }
        // Each element takes at least 2 bytes: bounds the allocation.
        let mut elements = Vec::with_capacity((count as usize).min(c.body.len() / 2 + 1));
        let mut refs = 0;
        for _ in 0..count {
            let id = c.varint()?;
            let (namespace, name, mime) = if id == 0 {
                c.name()?
            } else {
                self.names
                    .get(id as usize - 1)
                    .cloned()
                    .ok_or(CompactError::BadId(id))?
            };
            let len = c.varint()?;
            let data = match &self.values {
                None => c.bytes(len)?,
                Some(_) if len & 1 == 0 => c.bytes(len >> 1)?,
                Some(table) => {
                    // Only where the encoder puts them: on the elements
                    // it interns, at most a few per message (a reference
                    // of two bytes stands for up to MAX_VALUE_LEN).
                    refs += 1;
                    if refs > VALUES_PER_MESSAGE {
                        return Err(CompactError::BadValue("too many references"));
                    }
                    if !is_interned(&namespace, &name) {
                        return Err(CompactError::BadValue(
                            "reference on an element not interned",
                        ));
                    }
                    table
                        .get(((len >> 1) as usize).wrapping_sub(1))
                        .cloned()
                        .ok_or(CompactError::BadValue("undefined id"))?
                }
            };
            elements.push(Element {
                namespace,
                name,
                mime,
                data,
                signature: None,
            });
        }
        if !c.body.is_empty() {
            return Err(CompactError::Trailing);
        }
        Ok((to, Message { elements }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(enc: &mut CompactEncoder, to: &ServiceAddress, m: &Message) -> BytesMut {
        let mut out = EncodedMessage::default();
        enc.encode(to, m, &mut out);
        BytesMut::from(&out.to_bytes()[..])
    }

    #[test]
    fn one_byte_payload_costs_seven_bytes_after_first() {
        let mut enc = CompactEncoder::new();
        let mut dec = CompactDecoder::new();
        let to = ServiceAddress::new("BenchEP", Some("data"));
        let m = Message::new().with(Element::bytes("bench", "data", &b"a"[..]));
        let mut first = frame(&mut enc, &to, &m);
        let (t, got, _) = dec.decode(&mut first, 1 << 20).unwrap().unwrap();
        assert_eq!((&*t, got), (&to, m.clone()));
        assert!(first.is_empty());
        let mut second = frame(&mut enc, &to, &m);
        assert_eq!(second.len(), 7);
        let (_, got, n) = dec.decode(&mut second, 1 << 20).unwrap().unwrap();
        assert_eq!((got, n), (m, 7));
    }

    /// Small tables on both ends: names past the limits go out literally
    /// and decode the same; a decoder with small limits refuses the
    /// definitions of an encoder that does not keep to them.
    #[test]
    fn table_limits_bound_both_ends() {
        let small = TableLimits {
            entries: 3,
            bytes: 40,
        };
        let mut enc = CompactEncoder::new().with_limits(small);
        let mut dec = CompactDecoder::new().with_limits(small);
        let to = ServiceAddress::new("S", Some("p"));
        for round in 0..3 {
            let mut m = Message::new();
            for i in 0..8 {
                m.push(Element::bytes(
                    "ns",
                    &format!("name-{round}-{i}"),
                    vec![i as u8],
                ));
            }
            let mut out = EncodedMessage::default();
            enc.encode(&to, &m, &mut out);
            let (t, got) = dec.decode_frame(out.to_bytes(), 1 << 20).unwrap();
            assert_eq!((&*t, got), (&to, m));
            assert!(dec.names.len() + dec.channels.len() <= 6);
            assert!(dec.name_bytes <= small.bytes && enc.name_bytes <= small.bytes);
        }
        // An encoder with the connection's limits defines more than the
        // small decoder takes.
        let mut big = CompactEncoder::new();
        let mut dec = CompactDecoder::new().with_limits(small);
        let mut m = Message::new();
        for i in 0..8 {
            m.push(Element::bytes("", &format!("n{i}"), vec![1]));
        }
        let mut out = EncodedMessage::default();
        big.encode(&to, &m, &mut out);
        assert_eq!(
            dec.decode_frame(out.to_bytes(), 1 << 20).unwrap_err(),
            CompactError::BadId(4)
        );
    }

    /// `decode_frame` takes exactly one whole frame.
    #[test]
    fn decode_frame_wants_exactly_one_frame() {
        let mut enc = CompactEncoder::new();
        let mut dec = CompactDecoder::new();
        let to = ServiceAddress::new("S", None);
        let m = Message::new().with(Element::bytes("", "x", &b"abc"[..]));
        let mut out = EncodedMessage::default();
        enc.encode(&to, &m, &mut out);
        let frame = out.to_bytes();
        let mut two = BytesMut::from(&frame[..]);
        two.extend_from_slice(&frame);
        assert_eq!(
            dec.decode_frame(two.freeze(), 1 << 20).unwrap_err(),
            CompactError::Trailing
        );
        assert_eq!(
            dec.decode_frame(Bytes::new(), 1 << 20).unwrap_err(),
            CompactError::Truncated
        );
        assert!(matches!(
            dec.decode_frame(frame.clone(), 2),
            Err(CompactError::TooLarge { .. })
        ));
    }

    /// Found by the `compact` fuzz target: names containing NUL made two
    /// different element names share one intern key, so the second was
    /// sent as the first.
    #[test]
    fn names_with_nul_keep_distinct_intern_entries() {
        let mut enc = CompactEncoder::new();
        let mut dec = CompactDecoder::new();
        let to = ServiceAddress::new("s", None);
        let mut a = Element::bytes("", "\0", &b"1"[..]);
        a.mime = None;
        let mut b = Element::bytes("", "", &b"2"[..]);
        b.mime = Some("\0".into());
        let mut c = Element::bytes("\0", "", &b"3"[..]);
        c.mime = None;
        let m = Message::new().with(a).with(b).with(c);
        for _ in 0..2 {
            let mut f = frame(&mut enc, &to, &m);
            let (_, got, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
            assert_eq!(got, m);
        }
    }

    /// The encoder's memory of recent channels and names (beside its
    /// tables) must give the frames the tables alone give: more names
    /// than it remembers, two channels in turn, and names that differ
    /// only by MIME type.
    #[test]
    fn recent_names_and_channels_encode_like_the_tables() {
        let mut enc = CompactEncoder::new();
        let mut dec = CompactDecoder::new();
        let chans = [
            ServiceAddress::new("S", Some("a")),
            ServiceAddress::new("S", Some("b")),
        ];
        let msg = |i: usize| {
            let mut typed = Element::bytes("ns", &format!("n{}", i % 12), &b"t"[..]);
            typed.mime = Some("text/plain".into());
            Message::new()
                .with(Element::bytes("ns", &format!("n{}", i % 12), &b"x"[..]))
                .with(Element::bytes(
                    "ns",
                    &format!("n{}", (i + 5) % 12),
                    &b"y"[..],
                ))
                .with(typed)
        };
        let mut steady = Vec::new();
        for round in 0..3 {
            for i in 0..24 {
                let to = &chans[i % 2];
                let m = msg(i);
                let mut f = frame(&mut enc, to, &m);
                let wire = f.clone();
                let (t, got, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
                assert_eq!((&*t, &got), (to, &m));
                match round {
                    0 => {}
                    1 => steady.push(wire),
                    // Everything interned: the same frame every time.
                    _ => assert_eq!(wire, steady[i]),
                }
            }
        }
    }

    /// Small frames are built with their length prefix in place: the
    /// bytes must be the varint length then the body, across the prefix's
    /// 1/2/3-byte boundaries and above the old two-chunk threshold.
    #[test]
    fn in_place_prefix_gives_the_same_bytes() {
        fn varint(mut v: u64, out: &mut Vec<u8>) {
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
        let to = ServiceAddress::new("S", Some("p"));
        for (count, size) in [
            (1, 1),
            (1, 120),
            (1, 130),
            (2, 512),
            (8, 512),
            (3, 300),
            (40, 512),
        ] {
            let mut enc = CompactEncoder::new();
            let mut dec = CompactDecoder::new();
            let mut m = Message::new();
            for i in 0..count {
                m = m.with(Element::bytes("ns", &format!("e{i}"), vec![i as u8; size]));
            }
            let mut first = frame(&mut enc, &to, &m);
            assert_eq!(dec.decode(&mut first, 1 << 20).unwrap().unwrap().1, m);
            let wire = frame(&mut enc, &to, &m);
            let mut body = vec![TAG_MESSAGE, 1];
            varint(count as u64, &mut body);
            for i in 0..count {
                varint(i as u64 + 1, &mut body);
                varint(size as u64, &mut body);
                body.resize(body.len() + size, i as u8);
            }
            let mut want = Vec::new();
            varint(body.len() as u64, &mut want);
            want.extend_from_slice(&body);
            assert_eq!(&wire[..], &want[..], "{count} x {size} B");
            let mut rx = wire.clone();
            assert_eq!(dec.decode(&mut rx, 1 << 20).unwrap().unwrap().1, m);
        }
    }

    #[test]
    fn large_payload_is_not_copied_and_partial_frames_wait() {
        let mut enc = CompactEncoder::new();
        let mut dec = CompactDecoder::new();
        let to = ServiceAddress::new("S", None);
        let big = Bytes::from(vec![9u8; 100_000]);
        let m = Message::new().with(Element::bytes("", "x", big.clone()));
        let mut out = EncodedMessage::default();
        enc.encode(&to, &m, &mut out);
        assert!(out.chunks.iter().any(|c| c.as_ptr() == big.as_ptr()));
        let wire = out.to_bytes();
        let mut rx = BytesMut::new();
        for (i, b) in wire.iter().enumerate() {
            rx.put_u8(*b);
            let r = dec.decode(&mut rx, 1 << 20).unwrap();
            if i + 1 < wire.len() {
                assert!(r.is_none());
            } else {
                assert_eq!(r.unwrap().1, m);
            }
        }
    }

    #[test]
    fn frames_mixing_large_and_small_payloads_round_trip_in_one_stream() {
        let mut enc = CompactEncoder::new();
        let mut dec = CompactDecoder::new();
        let to = ServiceAddress::new("S", Some("p"));
        let big = |n: usize, b: u8| Bytes::from(vec![b; n]);
        let shapes: Vec<Vec<Bytes>> = vec![
            vec![big(COALESCE_LIMIT + 1, 1)],
            vec![big(3, 2), big(900, 3), big(10, 4)],
            vec![big(900, 5), big(70_000, 6)],
            vec![big(1, 7), big(2, 8)],
            vec![
                big(600, 9),
                big(0, 10),
                big(5_000, 11),
                big(COALESCE_LIMIT, 12),
            ],
        ];
        let mut wire = BytesMut::new();
        let mut sent = Vec::new();
        for round in 0..3 {
            for (k, shape) in shapes.iter().enumerate() {
                let mut m = Message::new();
                for (i, d) in shape.iter().enumerate() {
                    m.push(Element::bytes(
                        "ns",
                        &format!("e{i}-{}", (k + round) % 3),
                        d.clone(),
                    ));
                }
                let mut out = EncodedMessage::default();
                enc.encode(&to, &m, &mut out);
                assert_eq!(out.len, out.chunks.iter().map(Bytes::len).sum::<usize>());
                assert!(out.chunks.iter().all(|c| !c.is_empty()));
                // Large payloads are the caller's buffers, not copies.
                for d in shape.iter().filter(|d| d.len() > COALESCE_LIMIT) {
                    assert!(out.chunks.iter().any(|c| c.as_ptr() == d.as_ptr()));
                }
                wire.extend_from_slice(&out.to_bytes());
                sent.push(m);
            }
        }
        for m in sent {
            let (t, got, _) = dec.decode(&mut wire, 1 << 20).unwrap().unwrap();
            assert_eq!((&*t, got), (&to, m));
        }
        assert!(wire.is_empty());
    }

    #[test]
    fn full_tables_fall_back_to_literals() {
        let mut enc = CompactEncoder::new();
        let mut dec = CompactDecoder::new();
        for i in 0..MAX_TABLE + 5 {
            let to = ServiceAddress::new("S", Some(&i.to_string()));
            let m = Message::new().with(Element::bytes("", &format!("n{i}"), &b"z"[..]));
            let mut f = frame(&mut enc, &to, &m);
            let (t, got, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
            assert_eq!((&*t, got), (&to, m));
        }
    }

    #[test]
    fn bad_frames_are_typed_errors() {
        let mut dec = CompactDecoder::new();
        let mut huge = BytesMut::new();
        put_varint(&mut huge, 1 << 62);
        assert!(matches!(
            dec.decode(&mut huge, 1 << 20),
            Err(CompactError::TooLarge { .. })
        ));
        let mut undefined = BytesMut::from(&[4u8, TAG_MESSAGE, 7, 1, 1][..]);
        assert_eq!(
            dec.decode(&mut undefined, 100).unwrap_err(),
            CompactError::BadId(7)
        );
        let mut badtag = BytesMut::from(&[1u8, 0x77][..]);
        assert_eq!(
            dec.decode(&mut badtag, 100).unwrap_err(),
            CompactError::BadTag(0x77)
        );
        let mut varint = BytesMut::from(&[0xffu8; 12][..]);
        assert_eq!(
            dec.decode(&mut varint, 100).unwrap_err(),
            CompactError::BadVarint
        );
    }

    #[test]
    fn table_budget_is_kept_by_both_sides() {
        let mut enc = CompactEncoder::new();
        let mut dec = CompactDecoder::new();
        let to = ServiceAddress::new("S", None);
        let big = "x".repeat(MAX_NAME_LEN);
        // 40 names of about 12 KiB: past 256 KiB the encoder sends literals.
        for i in 0..40 {
            let name = format!("{i}{}", &big[..4000]);
            let m = Message::new().with(Element::typed(&big, &name, &big, &b"z"[..]));
            let mut f = frame(&mut enc, &to, &m);
            let (_, got, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
            assert_eq!(got, m);
        }
        assert!(enc.names.len() < 40);
        assert!(enc.name_bytes <= MAX_TABLE_BYTES && dec.name_bytes <= MAX_TABLE_BYTES);
        assert_eq!(enc.names.len(), dec.names.len());

        // A peer that defines past the budget is refused.
        let mut body = BytesMut::new();
        for id in 1..=22u64 {
            body.put_u8(TAG_NAME);
            put_varint(&mut body, id);
            for _ in 0..3 {
                put_str(&mut body, &big);
            }
        }
        let mut rx = BytesMut::new();
        put_varint(&mut rx, body.len() as u64);
        rx.extend_from_slice(&body);
        assert_eq!(
            CompactDecoder::new().decode(&mut rx, 1 << 20).unwrap_err(),
            CompactError::TableTooLarge {
                max: MAX_TABLE_BYTES
            }
        );
    }

    #[test]
    fn element_and_name_caps() {
        let mut m = Message::new();
        for _ in 0..=MAX_DECODE_ELEMENTS {
            m.push(Element::bytes("", "e", &b""[..]));
        }
        let to = ServiceAddress::new("S", None);
        let mut out = EncodedMessage::default();
        let mut enc = CompactEncoder::new();
        assert_eq!(
            enc.try_encode(&to, &m, &mut out),
            Err(CompactError::TooManyElements {
                max: MAX_DECODE_ELEMENTS
            })
        );
        // Written anyway, the decoder refuses it.
        enc.encode(&to, &m, &mut out);
        let mut rx = BytesMut::from(&out.to_bytes()[..]);
        assert_eq!(
            CompactDecoder::new().decode(&mut rx, 1 << 20).unwrap_err(),
            CompactError::TooManyElements {
                max: MAX_DECODE_ELEMENTS
            }
        );
        let long = Message::new().with(Element::bytes("", &"n".repeat(MAX_NAME_LEN + 1), &b""[..]));
        assert_eq!(
            CompactEncoder::check(&long),
            Err(CompactError::NameTooLong { max: MAX_NAME_LEN })
        );
    }

    #[test]
    fn partial_frame_reserves_in_step() {
        let mut dec = CompactDecoder::new();
        let mut rx = BytesMut::new();
        put_varint(&mut rx, 1 << 30);
        rx.put_u8(TAG_MESSAGE);
        assert_eq!(dec.decode(&mut rx, 1 << 31).unwrap(), None);
        assert!(rx.capacity() <= 2 * RESERVE_STEP, "{}", rx.capacity());
    }

    /// A routed message as a relay passes it on: its header and the
    /// origin's fingerprint (values that repeat), and a payload.
    fn routed(header: &[u8], fp: &[u8], payload: &[u8]) -> Message {
        Message::new()
            .with(Element::bytes("juxta", "ERM", header.to_vec()))
            .with(Element::bytes(
                "jxta",
                "EndpointRouterMsg-fingerprint",
                fp.to_vec(),
            ))
            .with(Element::bytes("bench", "data", payload.to_vec()))
    }

    #[test]
    fn repeated_values_are_defined_once_then_referred_to() {
        let mut enc = CompactEncoder::with_values();
        let mut dec = CompactDecoder::with_values();
        let to = ServiceAddress::new("EndpointRouter", Some("x"));
        let m = routed(&[1; 306], &[2; 850], b"a");
        let mut first = frame(&mut enc, &to, &m);
        assert!(first.len() > 306 + 850, "{}", first.len());
        let (_, got, _) = dec.decode(&mut first, 1 << 20).unwrap().unwrap();
        assert_eq!(got, m);
        // Later messages: the same values by reference, whichever buffers
        // hold them (a relay's are fresh per message).
        for payload in [&b"b"[..], &[9; 600][..]] {
            let again = routed(&[1; 306], &[2; 850], payload);
            let mut f = frame(&mut enc, &to, &again);
            assert!(f.len() <= 16 + payload.len(), "{}", f.len());
            let (_, got, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
            assert_eq!(got, again);
        }
        // Each decoded value is the decoder's one copy: no frame pinned.
        let mut f = frame(&mut enc, &to, &m);
        let (_, a, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
        let mut f = frame(&mut enc, &to, &m);
        let (_, b, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
        assert_eq!(a.elements[1].data.as_ptr(), b.elements[1].data.as_ptr());
        // Elements no rule names, and values too short or too long, are
        // written out as before.
        let other = Message::new()
            .with(Element::bytes("jxta", "other", vec![3u8; 850]))
            .with(Element::bytes("juxta", "ERM", vec![4u8; MIN_VALUE_LEN - 1]))
            .with(Element::bytes("juxta", "ERM", vec![5u8; MAX_VALUE_LEN + 1]));
        for _ in 0..2 {
            let mut f = frame(&mut enc, &to, &other);
            assert!(f.len() > 850 + MAX_VALUE_LEN, "{}", f.len());
            let (_, got, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
            assert_eq!(got, other);
        }
    }

    #[test]
    fn a_full_value_table_replaces_in_turn_and_decodes_the_same() {
        let mut enc = CompactEncoder::with_values();
        let mut dec = CompactDecoder::with_values();
        let to = ServiceAddress::new("S", None);
        // More origins than the table holds, in turn and at random, with
        // values large enough that the byte budget binds before the count.
        let mut x = 7u64;
        let mut wire = BytesMut::new();
        let mut sent = Vec::new();
        for i in 0..3 * MAX_VALUES {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = if i % 2 == 0 {
                i % (MAX_VALUES + 9)
            } else {
                (x >> 33) as usize % 200
            };
            let len = 850 + (k % 5) * 700;
            let m = routed(&[k as u8; 306], &vec![(k % 251) as u8; len], &[i as u8]);
            let mut out = EncodedMessage::default();
            enc.encode(&to, &m, &mut out);
            wire.extend_from_slice(&out.to_bytes());
            sent.push(m);
        }
        for m in sent {
            let (_, got, _) = dec.decode(&mut wire, 1 << 20).unwrap().unwrap();
            assert_eq!(got, m);
        }
        assert!(wire.is_empty());
        let table = dec.values.as_ref().unwrap();
        assert!(table.len() <= MAX_VALUES);
        assert!(dec.value_bytes <= MAX_VALUE_BYTES);
        assert_eq!(dec.value_bytes, table.iter().map(Bytes::len).sum::<usize>());
    }

    /// A message whose known value sits in the slot the next definition
    /// would replace: the definition takes another slot, or the reference
    /// would read the new value.
    #[test]
    fn a_message_never_replaces_a_value_it_refers_to() {
        let mut enc = CompactEncoder::with_values();
        let mut dec = CompactDecoder::with_values();
        let to = ServiceAddress::new("S", None);
        let value = |k: usize| vec![k as u8; 100];
        for k in 0..MAX_VALUES {
            let m = Message::new().with(Element::bytes("juxta", "ERM", value(k)));
            let mut f = frame(&mut enc, &to, &m);
            dec.decode(&mut f, 1 << 20).unwrap().unwrap();
        }
        // Slot 1 (value 0) is next to go; this message refers to it and
        // defines a new value.
        let m = Message::new()
            .with(Element::bytes("juxta", "ERM", value(0)))
            .with(Element::bytes("juxta", "ERM", value(200)));
        for _ in 0..2 {
            let mut f = frame(&mut enc, &to, &m);
            let (_, got, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
            assert_eq!(got, m);
        }
        // A message with more values than the table has slots: the rest
        // are written out.
        let many: Message = (0..MAX_VALUES + 3).fold(Message::new(), |m, k| {
            m.with(Element::bytes("juxta", "ERM", value(k + 1)))
        });
        let mut f = frame(&mut enc, &to, &many);
        let (_, got, _) = dec.decode(&mut f, 1 << 20).unwrap().unwrap();
        assert_eq!(got, many);
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let frame_of = |items: &[u8]| {
            let mut rx = BytesMut::new();
            put_varint(&mut rx, items.len() as u64);
            rx.extend_from_slice(items);
            rx
        };
        // body: [defines] 0x03 channel 0 "S" no-param, 1 element, literal
        // name "jxta" "EndpointRouterMsg-fingerprint" "" (an interned
        // element), then the length-or-reference varint.
        let fp_name = |ns: &str, name: &str| {
            let mut b = vec![0, ns.len() as u8];
            b.extend_from_slice(ns.as_bytes());
            b.push(name.len() as u8);
            b.extend_from_slice(name.as_bytes());
            b.push(0);
            b
        };
        let msg = |tail: &[u8]| {
            let mut b = vec![TAG_MESSAGE, 0, 1, b'S', 0, 1];
            b.extend(fp_name("jxta", "EndpointRouterMsg-fingerprint"));
            b.extend_from_slice(tail);
            b
        };
        let define = |id: u8, len: usize| {
            let mut b = vec![TAG_VALUE, id];
            let mut l = BytesMut::new();
            put_varint(&mut l, len as u64);
            b.extend_from_slice(&l);
            b.extend(std::iter::repeat_n(7u8, len));
            b
        };
        let decode =
            |dec: &mut CompactDecoder, items: Vec<u8>| dec.decode(&mut frame_of(&items), 1 << 20);
        // A value where none was agreed on.
        let mut plain = CompactDecoder::new();
        assert_eq!(
            decode(&mut plain, [define(1, 40), msg(&[3])].concat()).unwrap_err(),
            CompactError::BadTag(TAG_VALUE)
        );
        let mut dec = CompactDecoder::with_values();
        // Ids 0 and 2 before 1.
        for id in [0, 2] {
            assert_eq!(
                decode(&mut dec, [define(id, 40), msg(&[0])].concat()).unwrap_err(),
                CompactError::BadValue("id out of sequence")
            );
        }
        assert_eq!(
            decode(&mut dec, [define(1, MAX_VALUE_LEN + 1), msg(&[0])].concat()).unwrap_err(),
            CompactError::BadValue("value too long")
        );
        // A reference to a value never defined (id 1: 1 << 1 | 1 = 3).
        assert_eq!(
            decode(&mut dec, msg(&[3])).unwrap_err(),
            CompactError::BadValue("undefined id")
        );
        // A defined value reads back; a written-out value is len << 1.
        let (_, m, _) = decode(&mut dec, [define(1, 40), msg(&[3])].concat())
            .unwrap()
            .unwrap();
        assert_eq!(m.elements[0].data, vec![7u8; 40]);
        let (_, m, _) = decode(&mut dec, msg(&[4, 1, 2])).unwrap().unwrap();
        assert_eq!(m.elements[0].data, vec![1u8, 2]);
        // A reference on an element that is not interned.
        let mut other = vec![TAG_MESSAGE, 0, 1, b'S', 0, 1];
        other.extend(fp_name("jxta", "other"));
        other.push(3);
        assert_eq!(
            decode(&mut dec, other).unwrap_err(),
            CompactError::BadValue("reference on an element not interned")
        );
        // More references than a message may carry: a 2-byte reference
        // each, standing for 40 bytes.
        let many = |n: u8| {
            let mut b = vec![TAG_MESSAGE, 0, 1, b'S', 0, n];
            for _ in 0..n {
                // A literal name each time (id 0), then value 1.
                b.extend(fp_name("jxta", "EndpointRouterMsg-fingerprint"));
                b.push(3);
            }
            b
        };
        let (_, m, _) = decode(&mut dec, many(VALUES_PER_MESSAGE as u8))
            .unwrap()
            .unwrap();
        assert_eq!(m.elements.len(), VALUES_PER_MESSAGE);
        assert_eq!(
            decode(&mut dec, many(VALUES_PER_MESSAGE as u8 + 1)).unwrap_err(),
            CompactError::BadValue("too many references")
        );
        // The byte budget: full-length values past it.
        let mut dec = CompactDecoder::with_values();
        let fit = MAX_VALUE_BYTES / MAX_VALUE_LEN;
        for id in 1..=fit {
            decode(
                &mut dec,
                [define(id as u8, MAX_VALUE_LEN), msg(&[3])].concat(),
            )
            .unwrap()
            .unwrap();
        }
        assert_eq!(
            decode(
                &mut dec,
                [define(fit as u8 + 1, MAX_VALUE_LEN), msg(&[3])].concat()
            )
            .unwrap_err(),
            CompactError::BadValue("table too large")
        );
        // A replacement within the budget is fine.
        decode(&mut dec, [define(1, 10), msg(&[3])].concat())
            .unwrap()
            .unwrap();
        // And the count: ids past MAX_VALUES.
        let mut dec = CompactDecoder::with_values();
        for id in 1..=MAX_VALUES {
            let mut items = vec![TAG_VALUE];
            let mut v = BytesMut::new();
            put_varint(&mut v, id as u64);
            items.extend_from_slice(&v);
            items.push(0);
            items.extend(msg(&[0]));
            decode(&mut dec, items).unwrap().unwrap();
        }
        let mut items = vec![TAG_VALUE];
        let mut v = BytesMut::new();
        put_varint(&mut v, MAX_VALUES as u64 + 1);
        items.extend_from_slice(&v);
        items.push(0);
        items.extend(msg(&[0]));
        assert_eq!(
            decode(&mut dec, items).unwrap_err(),
            CompactError::BadValue("id out of sequence")
        );
    }

    fn stream_frame(stream: u32, data: &[u8]) -> Vec<u8> {
        let mut h = [0u8; STREAM_HEADER_MAX];
        let n = stream_frame_header_for(stream, data, &mut h);
        let mut f = h[..n].to_vec();
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn large_stream_frame_headers_align_to_their_data_small_ones_are_shortest() {
        let mut h = [0u8; STREAM_HEADER_MAX];
        // A 1-byte write: length, tag, number, nothing more.
        assert_eq!(stream_frame_header(0, 1, &mut h), 3);
        let small = [1u8; 100];
        assert_eq!(stream_frame_header_for(0, &small[1..], &mut h), 3);
        for stream in [0, 1, 127, 128, 16_384, 1 << 28, u32::MAX] {
            for len in [
                LARGE_STREAM_FRAME,
                1 << 20,
                (1 << 21) - 3,
                (1 << 21) - 12,
                4 << 20,
                1 << 30,
                usize::MAX / 2,
                usize::MAX,
            ] {
                let shortest = put_stream_header(stream, len, None, &mut h);
                for align in 0..16 {
                    let n = put_stream_header(stream, len, Some(align), &mut h);
                    assert!(n <= STREAM_HEADER_MAX, "{stream} {len}: {n}");
                    assert!(n >= shortest && n < shortest + 16, "{stream} {len}: {n}");
                    if n != shortest {
                        assert_eq!(n % 16, align, "{stream} {len} {align}");
                    } else {
                        // Aligned already, or only where the two varints
                        // cannot take the padding.
                        let target = shortest + (align + 16 - shortest % 16) % 16;
                        assert!(
                            target == shortest || target > STREAM_HEADER_MAX,
                            "{stream} {len} {align}"
                        );
                    }
                    // The header reads back as the stream and the length.
                    let (body, a) = get_varint(&h[..n]).unwrap().unwrap();
                    assert_eq!(h[a], TAG_STREAM);
                    let (id, b) = get_varint(&h[a + 1..n]).unwrap().unwrap();
                    assert_eq!((id, a + 1 + b), (u64::from(stream), n));
                    assert_eq!(body, (len as u64).saturating_add((n - a) as u64));
                }
            }
        }
        // The common case, a 1 MiB write to a low-numbered stream, always
        // aligns.
        let big = vec![0u8; (1 << 20) + 16];
        for off in 0..16 {
            let n = stream_frame_header_for(3, &big[off..off + (1 << 20)], &mut h);
            assert_eq!(n % 16, (big[off..].as_ptr() as usize) % 16);
        }
    }

    #[test]
    fn stream_frames_carry_any_number_and_length_between_messages() {
        let (mut enc, mut dec) = (CompactEncoder::new(), CompactDecoder::new());
        let to = ServiceAddress::new("S", Some("p"));
        let m = Message::new().with(Element::bytes("ns", "x", &b"msg"[..]));
        let mut wire = BytesMut::new();
        let mut want = Vec::new();
        for (i, stream) in [0, 1, 127, 128, 16_383, 16_384, u32::MAX]
            .into_iter()
            .enumerate()
        {
            for len in [1, 127, 128, 300, 70_000] {
                let data: Vec<u8> = (0..len).map(|k| (k * 7 + i) as u8).collect();
                let f = stream_frame(stream, &data);
                assert!(f.len() - data.len() <= STREAM_HEADER_MAX);
                wire.extend_from_slice(&f);
                want.push(Some((stream, data, f.len())));
                // A message between stream frames keeps its tables.
                wire.extend_from_slice(&frame(&mut enc, &to, &m));
                want.push(None);
            }
        }
        for w in want {
            match (dec.decode_next(&mut wire, 1 << 20).unwrap().unwrap(), w) {
                (
                    CompactFrame::Stream {
                        stream,
                        data,
                        wire_len,
                    },
                    Some((s, d, l)),
                ) => {
                    assert_eq!((stream, &data[..], wire_len), (s, &d[..], l));
                }
                (
                    CompactFrame::Message {
                        to: got_to,
                        message,
                        ..
                    },
                    None,
                ) => {
                    assert_eq!((&*got_to, message), (&to, m.clone()));
                }
                (got, w) => panic!("got {got:?}, wanted {w:?}"),
            }
        }
        assert!(wire.is_empty());
    }

    #[test]
    fn stream_frames_are_refused_where_only_messages_are_read() {
        let f = stream_frame(3, b"data");
        let mut rx = BytesMut::from(&f[..]);
        assert_eq!(
            CompactDecoder::new().decode(&mut rx, 1 << 20).unwrap_err(),
            CompactError::BadTag(TAG_STREAM)
        );
        // A secure pipe's inner messages, say.
        assert_eq!(
            CompactDecoder::new()
                .decode_frame(Bytes::from(f), 1 << 20)
                .unwrap_err(),
            CompactError::BadTag(TAG_STREAM)
        );
    }

    #[test]
    fn bad_stream_frames_are_typed_errors() {
        let decode = |body: &[u8]| {
            let mut rx = BytesMut::new();
            put_varint(&mut rx, body.len() as u64);
            rx.extend_from_slice(body);
            CompactDecoder::new().decode_next(&mut rx, 1 << 20)
        };
        // A number past u32.
        let mut body = BytesMut::new();
        body.put_u8(TAG_STREAM);
        put_varint(&mut body, u64::from(u32::MAX) + 1);
        body.put_u8(1);
        assert_eq!(
            decode(&body).unwrap_err(),
            CompactError::BadId(u64::from(u32::MAX) + 1)
        );
        // No data.
        assert_eq!(decode(&[TAG_STREAM, 5]).unwrap_err(), CompactError::Empty);
        // The number cut off by the frame's end.
        assert_eq!(
            decode(&[TAG_STREAM, 0x80]).unwrap_err(),
            CompactError::Truncated
        );
        // Too large for the limit: refused before anything is reserved.
        let f = stream_frame(1, &vec![0; 5000]);
        let mut rx = BytesMut::from(&f[..4]);
        assert!(matches!(
            CompactDecoder::new().decode_next(&mut rx, 4096),
            Err(CompactError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_partial_stream_frame_waits_and_reserves_in_step() {
        let data = vec![9u8; 3 << 20];
        let f = stream_frame(42, &data);
        let mut dec = CompactDecoder::new();
        let mut rx = BytesMut::new();
        for chunk in f.chunks(100_000) {
            assert!(dec.decode_next(&mut rx, 8 << 20).unwrap().is_none());
            rx.extend_from_slice(chunk);
        }
        match dec.decode_next(&mut rx, 8 << 20).unwrap().unwrap() {
            CompactFrame::Stream {
                stream, data: got, ..
            } => {
                assert_eq!(stream, 42);
                assert!(got == data);
            }
            other => panic!("{other:?}"),
        }
        // A header alone announcing a gigabyte reserves one step.
        let mut h = [0u8; STREAM_HEADER_MAX];
        let n = stream_frame_header(1, 1 << 30, &mut h);
        let mut rx = BytesMut::from(&h[..n]);
        assert_eq!(dec.decode_next(&mut rx, 1 << 31).unwrap(), None);
        assert!(rx.capacity() <= 2 * RESERVE_STEP, "{}", rx.capacity());
    }

    proptest::proptest! {
        #[test]
        fn decoder_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            for mut dec in [CompactDecoder::new(), CompactDecoder::with_values()] {
                let mut rx = BytesMut::from(&data[..]);
                while let Ok(Some(_)) = dec.decode(&mut rx, 1 << 16) {}
                let mut rx = BytesMut::from(&data[..]);
                while let Ok(Some(_)) = dec.decode_next(&mut rx, 1 << 16) {}
            }
        }

        /// Stream frames of any number and length, cut anywhere on the
        /// way, decode to what was sent.
        #[test]
        fn stream_frames_round_trip_cut_anywhere(
            frames in proptest::collection::vec((proptest::num::u32::ANY, 1usize..3000), 1..20),
            cut in 1usize..5000,
        ) {
            let mut wire = Vec::new();
            for (i, &(stream, len)) in frames.iter().enumerate() {
                wire.extend_from_slice(&stream_frame(stream, &vec![i as u8; len]));
            }
            let mut dec = CompactDecoder::new();
            let mut rx = BytesMut::new();
            let mut got = Vec::new();
            for chunk in wire.chunks(cut) {
                rx.extend_from_slice(chunk);
                while let Some(f) = dec.decode_next(&mut rx, 1 << 20).unwrap() {
                    got.push(f);
                }
            }
            proptest::prop_assert_eq!(got.len(), frames.len());
            for (i, (f, &(s, len))) in got.into_iter().zip(&frames).enumerate() {
                match f {
                    CompactFrame::Stream { stream, data, .. } => {
                        proptest::prop_assert_eq!(stream, s);
                        proptest::prop_assert!(data.len() == len && data.iter().all(|&b| b == i as u8));
                    }
                    other => proptest::prop_assert!(false, "{:?}", other),
                }
            }
        }

        /// Any sequence of routed messages over a few origins decodes to
        /// what was sent, with and without values.
        #[test]
        fn values_round_trip(picks in proptest::collection::vec((0usize..80, 0usize..3, 0usize..700), 1..60)) {
            for values in [false, true] {
                let (mut enc, mut dec) = if values {
                    (CompactEncoder::with_values(), CompactDecoder::with_values())
                } else {
                    (CompactEncoder::new(), CompactDecoder::new())
                };
                let to = ServiceAddress::new("S", None);
                let mut wire = BytesMut::new();
                let mut sent = Vec::new();
                for &(k, shape, n) in &picks {
                    let fp = vec![k as u8; 40 + k * 50];
                    let m = match shape {
                        0 => routed(&[k as u8; 306], &fp, &vec![1; n]),
                        1 => routed(&vec![k as u8; n], &fp, b"x"),
                        _ => Message::new().with(Element::bytes("jxta", "EndpointRouterMsg-fingerprint", fp.clone())).with(Element::bytes("jxta", "EndpointRouterMsg-fingerprint", vec![3; n])),
                    };
                    let mut out = EncodedMessage::default();
                    enc.encode(&to, &m, &mut out);
                    proptest::prop_assert_eq!(out.len, out.chunks.iter().map(Bytes::len).sum::<usize>());
                    wire.extend_from_slice(&out.to_bytes());
                    sent.push(m);
                }
                for m in sent {
                    let (_, got, _) = dec.decode(&mut wire, 1 << 20).unwrap().unwrap();
                    proptest::prop_assert_eq!(got, m);
                }
                proptest::prop_assert!(wire.is_empty());
            }
        }
    }
}
