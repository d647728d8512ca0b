//! Juxta's native stream mode for JXTA sockets between two Juxta peers on a
//! direct compact connection (sans-IO part).
//!
//! A compact connection is TCP between two Juxta peers: reliable and
//! ordered already, so the socket needs no `jxtarel` sequence numbers,
//! acknowledgements or retransmission timers. What it still needs is flow
//! control (a reader that stops reading must stop the writer, not the whole
//! connection it shares with other pipes and sockets), a half-close and an
//! abort. That is this module:
//!
//! * **Negotiation.** The client adds [`offer_element`] (namespace
//!   [`NS_STREAM`], which JXSE ignores) to its `JXTASOC` request when its
//!   path to the server is a direct compact connection; the server answers
//!   with the same element only if the request offered it and its own path
//!   back is one too. The value is the sender's receive window. Without the
//!   element on both sides the socket runs `jxtarel` as before.
//! * **Data** ([`ELEM_DATA`]): payload bytes, in order, nothing else.
//! * **Credit** ([`ELEM_CREDIT`]): the receiver's limit, an absolute byte
//!   offset (8 bytes big-endian) the sender may send up to. It starts at the
//!   receive window announced in the set-up and moves on as the application
//!   reads. Being absolute, a later grant supersedes an earlier one, and a
//!   grant past what any honest receiver could give (more than
//!   [`MAX_WINDOW`] beyond what was sent) is capped, never overflows.
//! * **FIN** ([`ELEM_FIN`]): no more data from the sender (carries the
//!   total sent, checked by the receiver). Reads end after the data.
//! * **STOP** ([`ELEM_STOP`]): the receiver closed the socket and reads no
//!   more; the sender's writes fail with [`std::io::ErrorKind::BrokenPipe`].
//! * **RESET** ([`ELEM_RESET`]): abort both ways with a [`ResetCode`];
//!   reads and writes fail with [`std::io::ErrorKind::ConnectionReset`].
//! * **Relayed** ([`ELEM_RELAYED`] in the set-up, [`ELEM_OFFSET`] before
//!   each data element): when either end's path is routed through relays
//!   (Juxta relays on compact connections), the bytes still travel in
//!   order over TCP hop by hop, but a relay may refuse a message (its
//!   per-edge queue or the sender's quota full for longer than its
//!   push-back, the lease gone). So each data element is preceded by the
//!   byte offset it starts at, and the receiver
//!   ([`StreamState::with_offsets`]) checks it: a missing offset or a gap
//!   resets the stream ([`StreamError::Gap`], `InvalidData`) instead of
//!   handing the application bytes with a hole. Credit flows end to end
//!   exactly as on a direct connection.
//!
//! A peer that sends more than it was granted, data after its FIN, or a
//! malformed element gets the stream reset (only this stream: the
//! connection and its other users carry on); what arrives after a reset or
//! FIN is refused and counted in [`StreamStats`]. The receive buffer never
//! holds more than the window granted.
//!
//! ```
//! use bytes::Bytes;
//! use juxta_proto::socket::stream::{StreamState, Item};
//! let mut a = StreamState::new(1 << 20, 1 << 20);
//! let mut b = StreamState::new(1 << 20, 1 << 20);
//! assert_eq!(a.writable(), 1 << 20);
//! a.on_sent(5);
//! b.handle(Item::Data(Bytes::from_static(b"hello"))).unwrap();
//! let mut buf = [0u8; 16];
//! assert_eq!(b.read(&mut buf), 5);
//! assert_eq!(&buf[..5], b"hello");
//! ```

use std::collections::VecDeque;

use bytes::{Buf, Bytes};

use crate::message::{Element, Message};

/// The namespace of stream-mode elements (JXSE ignores it).
pub const NS_STREAM: &str = "juxta";
/// Set-up element (request and response): stream mode offered/accepted;
/// the value is the sender's receive window in bytes (decimal text).
pub const ELEM_OFFER: &str = "sockStream";
/// Set-up element (request and response, beside [`ELEM_OFFER`]): the
/// path is relayed, data elements carry their offsets ([`ELEM_OFFSET`]).
pub const ELEM_RELAYED: &str = "sockStreamRelayed";
/// Stream frames: the number (decimal text, a `u32`) the sender gave the
/// stream and wants its data to carry in compact stream frames
/// ([`crate::wire::compact::stream_frame_header`]) instead of data
/// elements. In the server's set-up response, and in the client's first
/// stream message once the response had it; a peer that never sends it
/// gets data elements. Direct streams only (relayed data needs offsets).
pub const ELEM_FRAMES: &str = "sockFrames";
/// Byte offset (8 bytes big-endian) of the data element that follows.
pub const ELEM_OFFSET: &str = "so";
/// Data element.
pub const ELEM_DATA: &str = "sd";
/// Credit element: absolute byte limit, 8 bytes big-endian.
pub const ELEM_CREDIT: &str = "sc";
/// FIN element: total bytes sent, 8 bytes big-endian.
pub const ELEM_FIN: &str = "sf";
/// STOP element: the receiver closed (empty).
pub const ELEM_STOP: &str = "ss";
/// RESET element: one byte, a [`ResetCode`].
pub const ELEM_RESET: &str = "sr";

/// Default receive window (bytes granted ahead of the application's reads).
pub const DEFAULT_WINDOW: u64 = 16 * 1024 * 1024;
/// Smallest window accepted in a set-up offer (smaller offers are raised).
pub const MIN_WINDOW: u64 = 16 * 1024;
/// Largest window: offers are clamped to it, and no grant may reach
/// further than this beyond the bytes sent.
pub const MAX_WINDOW: u64 = 256 * 1024 * 1024;
/// Largest data element a sender puts in one message: a large write goes
/// out as few messages as this allows (each message is a frame to read,
/// dispatch and hand over; a 4 MiB write took 1.3-2x a TCP write in 1 MiB
/// messages, about 0.85x in one). A sender whose `max_message` is smaller
/// sends less; receivers take any size their credit and `max_message`
/// allow.
pub const MAX_DATA_CHUNK: usize = 4 * 1024 * 1024;
/// Largest data element on a relayed stream (each relay holds whole
/// messages in its queues).
pub const MAX_RELAYED_CHUNK: usize = 1024 * 1024;

/// Why a stream was reset (the byte of [`ELEM_RESET`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetCode {
    /// The application aborted (or dropped the socket with unread data).
    Abort,
    /// The peer broke the protocol (credit exceeded, data after FIN,
    /// malformed element).
    Protocol,
    /// Any other code (from a newer peer).
    Other(u8),
}

impl ResetCode {
    /// The wire byte.
    pub fn to_u8(self) -> u8 {
        match self {
            ResetCode::Abort => 0,
            ResetCode::Protocol => 1,
            ResetCode::Other(c) => c,
        }
    }

    /// From the wire byte.
    pub fn from_u8(b: u8) -> ResetCode {
        match b {
            0 => ResetCode::Abort,
            1 => ResetCode::Protocol,
            c => ResetCode::Other(c),
        }
    }
}

/// Errors of a stream. [`StreamError::io_kind`] gives the documented
/// [`std::io::ErrorKind`] a socket surfaces for each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The peer sent past the credit it was given.
    #[error("peer sent {got} bytes, past its credit limit of {limit}")]
    CreditExceeded {
        /// The limit granted.
        limit: u64,
        /// The byte offset the data reached.
        got: u64,
    },
    /// Data (or a second, different FIN) after the peer's FIN.
    #[error("data after the peer's FIN")]
    DataAfterFin,
    /// The FIN's total differs from the bytes received.
    #[error("FIN says {said} bytes were sent, {got} arrived")]
    FinMismatch {
        /// The total in the FIN.
        said: u64,
        /// Bytes received.
        got: u64,
    },
    /// A stream element of the wrong size.
    #[error("malformed stream element {0}")]
    Malformed(&'static str),
    /// The stream was reset by the peer.
    #[error("stream reset by the peer ({0:?})")]
    ResetByPeer(ResetCode),
    /// The stream was reset here (a protocol error by the peer, or an abort).
    #[error("stream reset locally ({0:?})")]
    ResetLocally(ResetCode),
    /// Anything after a reset.
    #[error("stream element after a reset")]
    AfterReset,
    /// Relayed stream: data whose offset is not the next byte expected
    /// (a relay refused a message in between), or has no offset.
    #[error("relayed stream data at offset {got:?}, expected {expected}")]
    Gap {
        /// The next byte offset expected.
        expected: u64,
        /// The offset the data said (`None`: it had none).
        got: Option<u64>,
    },
    /// The peer closed its reading side: writes are refused.
    #[error("the peer closed the socket and reads no more")]
    Stopped,
    /// Our side already sent FIN: writes are refused.
    #[error("socket is closed for writing")]
    WriteClosed,
}

impl StreamError {
    /// The `io::ErrorKind` a socket reports: [`std::io::ErrorKind::InvalidData`]
    /// for the peer's protocol errors (the stream is then reset),
    /// [`std::io::ErrorKind::ConnectionReset`] for resets,
    /// [`std::io::ErrorKind::BrokenPipe`] for writes after a STOP or our FIN.
    pub fn io_kind(&self) -> std::io::ErrorKind {
        use std::io::ErrorKind as K;
        match self {
            StreamError::CreditExceeded { .. }
            | StreamError::DataAfterFin
            | StreamError::FinMismatch { .. }
            | StreamError::Gap { .. }
            | StreamError::Malformed(_) => K::InvalidData,
            StreamError::ResetByPeer(_)
            | StreamError::ResetLocally(_)
            | StreamError::AfterReset => K::ConnectionReset,
            StreamError::Stopped | StreamError::WriteClosed => K::BrokenPipe,
        }
    }

    /// Whether the stream must be reset (and a RESET sent to the peer).
    pub fn is_protocol(&self) -> bool {
        self.io_kind() == std::io::ErrorKind::InvalidData
    }
}

/// One item of a stream message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// Payload.
    Data(Bytes),
    /// New absolute credit limit.
    Credit(u64),
    /// End of data, with the total sent.
    Fin(u64),
    /// The receiver closed.
    Stop,
    /// Abort.
    Reset(ResetCode),
    /// Relayed streams: the byte offset of the next data item.
    Offset(u64),
    /// The peer takes this stream's data in stream frames numbered so
    /// ([`ELEM_FRAMES`]).
    Frames(u32),
}

/// Counters of a stream (refusals are what a misbehaving peer causes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Data messages received.
    pub data_in: u64,
    /// Credit grants received.
    pub credits_in: u64,
    /// Grants capped because they reached past [`MAX_WINDOW`] beyond the
    /// bytes sent.
    pub capped_grants: u64,
    /// Items refused because they came after the peer's FIN.
    pub refused_after_fin: u64,
    /// Items refused because they came after a reset.
    pub refused_after_reset: u64,
    /// Protocol violations by the peer (each resets the stream).
    pub violations: u64,
}

/// The stream state of one socket: credit both ways, the receive buffer,
/// FIN/STOP/RESET.
#[derive(Debug)]
pub struct StreamState {
    window: u64,
    // Sending.
    sent: u64,
    send_limit: u64,
    fin_sent: bool,
    stopped: bool,
    // Receiving.
    received: u64,
    recv_limit: u64,
    consumed: u64,
    buf: VecDeque<Bytes>,
    buffered: usize,
    fin_received: bool,
    reset: Option<StreamError>,
    stats: StreamStats,
    /// Relayed: every data item must follow an offset item.
    offsets: bool,
    /// The offset announced for the next data item.
    next_offset: Option<u64>,
    /// The number the peer wants our data's stream frames to carry.
    peer_frames: Option<u32>,
}

/// Clamps a window offered in a set-up to [`MIN_WINDOW`]..=[`MAX_WINDOW`].
pub fn clamp_window(w: u64) -> u64 {
    w.clamp(MIN_WINDOW, MAX_WINDOW)
}

impl StreamState {
    /// A stream whose receive window is `local_window` and whose peer
    /// announced `peer_window` (both clamped, see [`clamp_window`]).
    pub fn new(local_window: u64, peer_window: u64) -> StreamState {
        let window = clamp_window(local_window);
        StreamState {
            window,
            sent: 0,
            send_limit: clamp_window(peer_window),
            fin_sent: false,
            stopped: false,
            received: 0,
            recv_limit: window,
            consumed: 0,
            buf: VecDeque::new(),
            buffered: 0,
            fin_received: false,
            reset: None,
            offsets: false,
            next_offset: None,
            peer_frames: None,
            stats: StreamStats::default(),
        }
    }

    /// A relayed stream: every data item received must be preceded by an
    /// [`Item::Offset`] naming the next byte expected (else
    /// [`StreamError::Gap`]); the sender sends [`offset_element`] before
    /// each data element.
    pub fn with_offsets(mut self) -> StreamState {
        self.offsets = true;
        self
    }

    /// Whether this is a relayed stream (see [`StreamState::with_offsets`]).
    pub fn has_offsets(&self) -> bool {
        self.offsets
    }

    /// Records that the peer takes our data in stream frames numbered
    /// `n` (its set-up response said so). Ignored on a relayed stream.
    pub fn set_peer_frames(&mut self, n: u32) {
        if !self.offsets {
            self.peer_frames = Some(n);
        }
    }

    /// The number our data's stream frames carry, when the peer asked
    /// for them ([`ELEM_FRAMES`]); `None`: send data elements.
    pub fn peer_frames(&self) -> Option<u32> {
        self.peer_frames
    }

    /// Counters.
    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    /// Why writes fail now, if they do.
    pub fn write_error(&self) -> Option<StreamError> {
        if let Some(e) = &self.reset {
            return Some(e.clone());
        }
        if self.fin_sent {
            return Some(StreamError::WriteClosed);
        }
        if self.stopped {
            return Some(StreamError::Stopped);
        }
        None
    }

    /// Why reads fail now (a reset), if they do.
    pub fn read_error(&self) -> Option<StreamError> {
        self.reset.clone()
    }

    /// Bytes that may be sent now (credit left), 0 once writes fail.
    pub fn writable(&self) -> usize {
        if self.write_error().is_some() {
            return 0;
        }
        usize::try_from(self.send_limit.saturating_sub(self.sent)).unwrap_or(usize::MAX)
    }

    /// Records `n` bytes handed to the connection (at most
    /// [`StreamState::writable`]).
    pub fn on_sent(&mut self, n: usize) {
        self.sent = self.sent.saturating_add(n as u64);
    }

    /// Bytes sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Marks our FIN as sent; returns the total to put in it, or `None` if
    /// it was sent already (or the stream is reset).
    pub fn fin(&mut self) -> Option<u64> {
        if self.fin_sent || self.reset.is_some() {
            return None;
        }
        self.fin_sent = true;
        Some(self.sent)
    }

    /// Whether our FIN went out.
    pub fn fin_sent(&self) -> bool {
        self.fin_sent
    }

    /// Whether the peer's FIN arrived.
    pub fn fin_received(&self) -> bool {
        self.fin_received
    }

    /// Whether the stream is reset.
    pub fn is_reset(&self) -> bool {
        self.reset.is_some()
    }

    /// Resets the stream here (`code` goes to the peer in a RESET); returns
    /// `false` if it was reset already.
    pub fn reset(&mut self, code: ResetCode) -> bool {
        if self.reset.is_some() {
            return false;
        }
        self.reset = Some(StreamError::ResetLocally(code));
        self.buf.clear();
        self.buffered = 0;
        true
    }

    /// Handles one received item. An error that
    /// [`StreamError::is_protocol`] has reset the stream already: send a
    /// RESET with [`ResetCode::Protocol`]. Other errors are refusals
    /// (counted), the stream is unchanged.
    pub fn handle(&mut self, item: Item) -> Result<(), StreamError> {
        if self.reset.is_some() {
            self.stats.refused_after_reset += 1;
            return Err(StreamError::AfterReset);
        }
        match item {
            Item::Data(d) => {
                if self.fin_received {
                    self.stats.refused_after_fin += 1;
                    return self.violation(StreamError::DataAfterFin);
                }
                let announced = self.next_offset.take();
                if self.offsets && announced != Some(self.received) {
                    return self.violation(StreamError::Gap {
                        expected: self.received,
                        got: announced,
                    });
                }
                let got = self.received.saturating_add(d.len() as u64);
                if got > self.recv_limit {
                    return self.violation(StreamError::CreditExceeded {
                        limit: self.recv_limit,
                        got,
                    });
                }
                self.stats.data_in += 1;
                self.received = got;
                if !d.is_empty() {
                    self.buffered += d.len();
                    self.buf.push_back(d);
                }
                Ok(())
            }
            Item::Credit(limit) => {
                self.stats.credits_in += 1;
                let cap = self.sent.saturating_add(MAX_WINDOW);
                let limit = if limit > cap {
                    self.stats.capped_grants += 1;
                    cap
                } else {
                    limit
                };
                self.send_limit = self.send_limit.max(limit);
                Ok(())
            }
            Item::Fin(total) => {
                if self.fin_received {
                    self.stats.refused_after_fin += 1;
                    return self.violation(StreamError::DataAfterFin);
                }
                if total != self.received {
                    return self.violation(StreamError::FinMismatch {
                        said: total,
                        got: self.received,
                    });
                }
                self.fin_received = true;
                Ok(())
            }
            Item::Stop => {
                self.stopped = true;
                Ok(())
            }
            Item::Offset(o) => {
                // Checked by the data item it announces.
                self.next_offset = Some(o);
                Ok(())
            }
            Item::Frames(n) => {
                self.set_peer_frames(n);
                Ok(())
            }
            Item::Reset(code) => {
                self.reset = Some(StreamError::ResetByPeer(code));
                self.buf.clear();
                self.buffered = 0;
                Ok(())
            }
        }
    }

    fn violation(&mut self, e: StreamError) -> Result<(), StreamError> {
        self.stats.violations += 1;
        self.reset = Some(e.clone());
        self.buf.clear();
        self.buffered = 0;
        Err(e)
    }

    /// Bytes buffered for the application.
    pub fn readable(&self) -> usize {
        self.buffered
    }

    /// Whether reads are at the end: the peer's FIN arrived and the buffer
    /// is empty.
    pub fn at_eof(&self) -> bool {
        self.fin_received && self.buffered == 0
    }

    /// Copies buffered bytes into `out`; returns how many.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(front) = self.buf.front_mut() else {
                break;
            };
            let k = front.len().min(out.len() - n);
            out[n..n + k].copy_from_slice(&front[..k]);
            front.advance(k);
            n += k;
            if front.is_empty() {
                self.buf.pop_front();
            }
        }
        self.buffered -= n;
        self.consumed = self.consumed.saturating_add(n as u64);
        n
    }

    /// Takes up to `max` buffered bytes without copying (the next chunk, or
    /// part of it).
    pub fn read_bytes(&mut self, max: usize) -> Option<Bytes> {
        let front = self.buf.front_mut()?;
        let b = if front.len() <= max {
            self.buf.pop_front()?
        } else {
            front.split_to(max)
        };
        self.buffered -= b.len();
        self.consumed = self.consumed.saturating_add(b.len() as u64);
        Some(b)
    }

    /// A new credit limit to grant, once the application has read a
    /// quarter of the window since the last grant (nothing after our
    /// STOP-worthy end: the peer's FIN or a reset).
    pub fn poll_grant(&mut self) -> Option<u64> {
        if self.fin_received || self.reset.is_some() {
            return None;
        }
        let want = self.consumed.saturating_add(self.window);
        if want.saturating_sub(self.recv_limit) >= self.window / 4 {
            self.recv_limit = want;
            Some(want)
        } else {
            None
        }
    }
}

/// The set-up element offering (request) or accepting (response) stream
/// mode with our receive `window`.
pub fn offer_element(window: u64) -> Element {
    Element::text(NS_STREAM, ELEM_OFFER, &window.to_string())
}

/// The window of a stream-mode offer in a set-up message, if there is one
/// (clamped; an unparsable value counts as no offer).
pub fn offered_window(msg: &Message) -> Option<u64> {
    let v = msg
        .get(NS_STREAM, ELEM_OFFER)?
        .as_str()?
        .trim()
        .parse()
        .ok()?;
    Some(clamp_window(v))
}

/// The element announcing that this end takes the stream's data in
/// stream frames numbered `n` ([`ELEM_FRAMES`]).
pub fn frames_element(n: u32) -> Element {
    Element::text(NS_STREAM, ELEM_FRAMES, &n.to_string())
}

/// The stream-frame number a set-up message announces, if any (an
/// unparsable value counts as none).
pub fn frames_of(msg: &Message) -> Option<u32> {
    msg.get(NS_STREAM, ELEM_FRAMES)?
        .as_str()?
        .trim()
        .parse()
        .ok()
}

/// A data element (no copy of `data`).
pub fn data_element(data: Bytes) -> Element {
    Element::bytes_static(NS_STREAM, ELEM_DATA, data)
}

/// An offset element: the data element that follows starts at byte
/// `offset` of the stream (relayed streams).
pub fn offset_element(offset: u64) -> Element {
    Element::bytes_static(NS_STREAM, ELEM_OFFSET, offset.to_be_bytes().to_vec())
}

/// The set-up element saying the stream is relayed (data carries offsets).
pub fn relayed_element() -> Element {
    Element::bytes_static(NS_STREAM, ELEM_RELAYED, Bytes::new())
}

/// Whether a set-up message says the stream is relayed.
pub fn is_relayed(msg: &Message) -> bool {
    msg.get(NS_STREAM, ELEM_RELAYED).is_some()
}

/// A credit element granting up to byte `limit`.
pub fn credit_element(limit: u64) -> Element {
    Element::bytes_static(NS_STREAM, ELEM_CREDIT, limit.to_be_bytes().to_vec())
}

/// A FIN element after `total` bytes.
pub fn fin_element(total: u64) -> Element {
    Element::bytes_static(NS_STREAM, ELEM_FIN, total.to_be_bytes().to_vec())
}

/// A STOP element.
pub fn stop_element() -> Element {
    Element::bytes_static(NS_STREAM, ELEM_STOP, Bytes::new())
}

/// A RESET element.
pub fn reset_element(code: ResetCode) -> Element {
    Element::bytes_static(NS_STREAM, ELEM_RESET, vec![code.to_u8()])
}

fn u64_of(e: &Element, what: &'static str) -> Result<u64, StreamError> {
    let b: [u8; 8] = e
        .data
        .as_ref()
        .try_into()
        .map_err(|_| StreamError::Malformed(what))?;
    Ok(u64::from_be_bytes(b))
}

/// The stream items of a message, in order (elements of other namespaces
/// are skipped; an unknown stream element is [`StreamError::Malformed`]).
pub fn items(msg: &Message) -> impl Iterator<Item = Result<Item, StreamError>> + '_ {
    msg.elements
        .iter()
        .filter(|e| &*e.namespace == NS_STREAM)
        .map(|e| match &*e.name {
            ELEM_DATA => Ok(Item::Data(e.data.clone())),
            ELEM_CREDIT => u64_of(e, ELEM_CREDIT).map(Item::Credit),
            ELEM_FIN => u64_of(e, ELEM_FIN).map(Item::Fin),
            ELEM_OFFSET => u64_of(e, ELEM_OFFSET).map(Item::Offset),
            ELEM_FRAMES => e
                .as_str()
                .and_then(|t| t.trim().parse().ok())
                .map(Item::Frames)
                .ok_or(StreamError::Malformed(ELEM_FRAMES)),
            ELEM_STOP => Ok(Item::Stop),
            ELEM_RESET => match e.data.first() {
                Some(&c) if e.data.len() == 1 => Ok(Item::Reset(ResetCode::from_u8(c))),
                _ => Err(StreamError::Malformed(ELEM_RESET)),
            },
            _ => Err(StreamError::Malformed("unknown")),
        })
}

/// Whether a message carries any stream element.
pub fn is_stream_message(msg: &Message) -> bool {
    msg.elements.iter().any(|e| &*e.namespace == NS_STREAM)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Item {
        Item::Data(Bytes::from(vec![7u8; n]))
    }

    #[test]
    fn credit_is_consumed_and_granted_as_the_reader_reads() {
        let mut w = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        let mut r = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        assert_eq!(w.writable(), MIN_WINDOW as usize);
        w.on_sent(MIN_WINDOW as usize);
        assert_eq!(w.writable(), 0);
        r.handle(data(MIN_WINDOW as usize)).unwrap();
        assert_eq!(r.readable(), MIN_WINDOW as usize);
        assert_eq!(r.poll_grant(), None, "nothing read yet");
        let mut buf = vec![0u8; 1000];
        assert_eq!(r.read(&mut buf), 1000);
        assert_eq!(r.poll_grant(), None, "less than a quarter read");
        let mut big = vec![0u8; MIN_WINDOW as usize];
        r.read(&mut big);
        let g = r.poll_grant().expect("grant after reading a quarter");
        assert_eq!(g, 2 * MIN_WINDOW);
        assert_eq!(r.poll_grant(), None, "granted once");
        w.handle(Item::Credit(g)).unwrap();
        assert_eq!(w.writable(), MIN_WINDOW as usize);
        // An older (smaller) grant does not take credit back.
        w.handle(Item::Credit(10)).unwrap();
        assert_eq!(w.writable(), MIN_WINDOW as usize);
    }

    #[test]
    fn absurd_credit_is_capped_without_overflow() {
        let mut w = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        w.on_sent(100);
        w.handle(Item::Credit(u64::MAX)).unwrap();
        assert_eq!(w.writable() as u64, MAX_WINDOW);
        assert_eq!(w.stats().capped_grants, 1);
        w.on_sent(usize::MAX);
        assert_eq!(w.sent(), 100u64.saturating_add(usize::MAX as u64));
        assert_eq!(w.writable(), 0);
        w.handle(Item::Credit(u64::MAX)).unwrap();
        assert_eq!(w.writable(), 0, "saturated: no overflow");
    }

    #[test]
    fn sending_past_credit_resets_with_a_typed_error_and_frees_the_buffer() {
        let mut r = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        r.handle(data(1000)).unwrap();
        let e = r.handle(data(MIN_WINDOW as usize)).unwrap_err();
        assert_eq!(
            e,
            StreamError::CreditExceeded {
                limit: MIN_WINDOW,
                got: MIN_WINDOW + 1000
            }
        );
        assert!(e.is_protocol());
        assert_eq!(e.io_kind(), std::io::ErrorKind::InvalidData);
        assert!(r.is_reset());
        assert_eq!(r.readable(), 0, "buffer dropped");
        assert_eq!(r.stats().violations, 1);
        // Everything after is refused and counted.
        assert_eq!(r.handle(data(1)), Err(StreamError::AfterReset));
        assert_eq!(r.handle(Item::Credit(5)), Err(StreamError::AfterReset));
        assert_eq!(r.stats().refused_after_reset, 2);
        assert_eq!(r.writable(), 0);
    }

    #[test]
    fn fin_ends_reads_after_the_data_and_data_after_fin_is_refused() {
        let mut r = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        r.handle(data(3)).unwrap();
        assert_eq!(
            r.handle(Item::Fin(5)),
            Err(StreamError::FinMismatch { said: 5, got: 3 })
        );
        let mut r = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        r.handle(data(3)).unwrap();
        r.handle(Item::Fin(3)).unwrap();
        assert!(!r.at_eof(), "data first");
        let mut b = [0u8; 8];
        assert_eq!(r.read(&mut b), 3);
        assert!(r.at_eof());
        assert_eq!(r.poll_grant(), None);
        let e = r.handle(data(1)).unwrap_err();
        assert_eq!(e, StreamError::DataAfterFin);
        assert_eq!(r.stats().refused_after_fin, 1);
        assert!(r.is_reset());
    }

    #[test]
    fn writes_end_with_our_fin_a_stop_or_a_reset() {
        let mut w = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        w.on_sent(7);
        assert_eq!(w.fin(), Some(7));
        assert_eq!(w.fin(), None);
        assert_eq!(w.write_error(), Some(StreamError::WriteClosed));
        assert_eq!(w.writable(), 0);

        let mut w = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        w.handle(Item::Stop).unwrap();
        assert_eq!(
            w.write_error().unwrap().io_kind(),
            std::io::ErrorKind::BrokenPipe
        );

        let mut w = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        w.handle(data(4)).unwrap();
        w.handle(Item::Reset(ResetCode::Abort)).unwrap();
        assert_eq!(
            w.read_error().unwrap().io_kind(),
            std::io::ErrorKind::ConnectionReset
        );
        assert_eq!(w.readable(), 0);
        assert_eq!(w.fin(), None);
        assert!(!w.reset(ResetCode::Abort));
    }

    #[test]
    fn messages_round_trip_and_bad_elements_are_typed() {
        let m = Message::new()
            .with(data_element(Bytes::from_static(b"abc")))
            .with(credit_element(1 << 40))
            .with(fin_element(3))
            .with(stop_element())
            .with(reset_element(ResetCode::Protocol))
            .with(Element::text("other", "x", "ignored"));
        assert!(is_stream_message(&m));
        let got: Vec<_> = items(&m).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                Item::Data(Bytes::from_static(b"abc")),
                Item::Credit(1 << 40),
                Item::Fin(3),
                Item::Stop,
                Item::Reset(ResetCode::Protocol),
            ]
        );
        let bad = Message::new()
            .with(Element::bytes(NS_STREAM, ELEM_CREDIT, &b"123"[..]))
            .with(Element::bytes(NS_STREAM, ELEM_RESET, &b""[..]))
            .with(Element::bytes(NS_STREAM, "zz", &b""[..]));
        let errs: Vec<_> = items(&bad).collect();
        assert_eq!(errs[0], Err(StreamError::Malformed(ELEM_CREDIT)));
        assert_eq!(errs[1], Err(StreamError::Malformed(ELEM_RESET)));
        assert_eq!(errs[2], Err(StreamError::Malformed("unknown")));
        assert!(!is_stream_message(
            &Message::new().with(Element::text("jxtarel", "x", ""))
        ));
    }

    #[test]
    fn frame_numbers_are_announced_and_kept_off_relayed_streams() {
        let m = Message::new().with(frames_element(u32::MAX));
        assert_eq!(frames_of(&m), Some(u32::MAX));
        assert_eq!(
            items(&m).collect::<Vec<_>>(),
            vec![Ok(Item::Frames(u32::MAX))]
        );
        for bad in ["", "-1", "4294967296", "many"] {
            let m = Message::new().with(Element::text(NS_STREAM, ELEM_FRAMES, bad));
            assert_eq!(frames_of(&m), None, "{bad:?}");
            assert_eq!(
                items(&m).collect::<Vec<_>>(),
                vec![Err(StreamError::Malformed(ELEM_FRAMES))]
            );
        }
        let mut direct = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        assert_eq!(direct.peer_frames(), None);
        direct.handle(Item::Frames(7)).unwrap();
        assert_eq!(direct.peer_frames(), Some(7));
        // Relayed data needs its offsets: never frames.
        let mut relayed = StreamState::new(MIN_WINDOW, MIN_WINDOW).with_offsets();
        relayed.handle(Item::Frames(7)).unwrap();
        relayed.set_peer_frames(8);
        assert_eq!(relayed.peer_frames(), None);
    }

    #[test]
    fn offers_are_parsed_and_clamped() {
        let m = Message::new().with(offer_element(1 << 20));
        assert_eq!(offered_window(&m), Some(1 << 20));
        let m = Message::new().with(offer_element(u64::MAX));
        assert_eq!(offered_window(&m), Some(MAX_WINDOW));
        let m = Message::new().with(offer_element(1));
        assert_eq!(offered_window(&m), Some(MIN_WINDOW));
        let m = Message::new().with(Element::text(NS_STREAM, ELEM_OFFER, "lots"));
        assert_eq!(offered_window(&m), None);
        assert_eq!(offered_window(&Message::new()), None);
    }

    #[test]
    fn read_bytes_hands_out_chunks_without_copy() {
        let mut r = StreamState::new(MIN_WINDOW, MIN_WINDOW);
        let d = Bytes::from(vec![1u8; 100]);
        let ptr = d.as_ptr();
        r.handle(Item::Data(d)).unwrap();
        let a = r.read_bytes(40).unwrap();
        assert_eq!(a.as_ptr(), ptr);
        assert_eq!(a.len(), 40);
        let b = r.read_bytes(1000).unwrap();
        assert_eq!(b.len(), 60);
        assert_eq!(r.readable(), 0);
        assert!(r.read_bytes(1).is_none());
    }

    #[test]
    fn relayed_stream_checks_every_offset() {
        let mut r = StreamState::new(1 << 20, 1 << 20).with_offsets();
        assert!(r.has_offsets());
        let m = Message::new()
            .with(offset_element(0))
            .with(data_element(Bytes::from_static(b"abc")))
            .with(offset_element(3))
            .with(data_element(Bytes::from_static(b"de")));
        for it in items(&m) {
            r.handle(it.unwrap()).unwrap();
        }
        assert_eq!(r.readable(), 5);
        // A message refused by a relay in between: the next one's offset
        // is past the bytes received.
        r.handle(Item::Offset(9)).unwrap();
        let e = r.handle(Item::Data(Bytes::from_static(b"zz")));
        assert_eq!(
            e,
            Err(StreamError::Gap {
                expected: 5,
                got: Some(9)
            })
        );
        assert!(e.unwrap_err().is_protocol());
        assert!(r.is_reset());
        assert_eq!(r.readable(), 0, "nothing with a hole is handed over");
        // Data without an offset on a relayed stream: refused too.
        let mut r = StreamState::new(1 << 20, 1 << 20).with_offsets();
        assert_eq!(
            r.handle(Item::Data(Bytes::from_static(b"x"))),
            Err(StreamError::Gap {
                expected: 0,
                got: None
            })
        );
        // A replayed offset (a duplicate) is a gap as well.
        let mut r = StreamState::new(1 << 20, 1 << 20).with_offsets();
        r.handle(Item::Offset(0)).unwrap();
        r.handle(Item::Data(Bytes::from_static(b"ab"))).unwrap();
        r.handle(Item::Offset(0)).unwrap();
        assert!(r.handle(Item::Data(Bytes::from_static(b"ab"))).is_err());
        // A direct stream ignores offsets it did not ask for.
        let mut d = StreamState::new(1 << 20, 1 << 20);
        d.handle(Item::Offset(77)).unwrap();
        d.handle(Item::Data(Bytes::from_static(b"ok"))).unwrap();
        assert_eq!(d.readable(), 2);
        assert!(is_relayed(&Message::new().with(relayed_element())));
        assert!(!is_relayed(&Message::new()));
    }
}
