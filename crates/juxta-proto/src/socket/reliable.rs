//! The reliable stream engine behind JxtaSocket's `stream=true` mode (and
//! reliable bidi pipes): JXSE's `jxtarel` protocol (digest §9.2), done
//! sans-IO so the runtime, the tests and the simulator share one
//! implementation.
//!
//! Pipes lose, duplicate and reorder messages; JXSE layers a sequenced,
//! acknowledged byte stream on top of them. On the wire:
//!
//! * a **block** is one element `jxtarel:<seq>` (decimal, first block `1`)
//!   of type [`MIME_BLOCK`] holding raw stream bytes; a retransmission also
//!   carries `jxtarel:retry` = `RETRY`;
//! * an **ack** is `jxtarel:ack` of type [`MIME_ACK`]: an int32 BE
//!   cumulative ack followed by at most [`MAX_SACKS`] int32 BE selective
//!   acks.
//!
//! [`ReliableStream`] keeps one outgoing and one incoming direction. It does
//! no I/O and reads no clock: the runtime feeds it [`Incoming`] items (from
//! [`parse`]) and timer expiries, and drains [`Segment`]s. Compared with
//! JXSE's fixed 20-block window and 500 ms–60 s timers it adapts to the link
//! (slow start/AIMD window up to [`ReliableConfig::max_window`], RFC 6298
//! RTO, SACK-driven fast retransmit) while staying wire-compatible.
//!
//! Semantics worth knowing:
//! * The cumulative ack is the highest block the **application consumed**
//!   (JXSE semantics, end-to-end flow control). Blocks received but not yet
//!   consumed are reported as SACKs, so the sender neither retransmits nor
//!   declares the peer dead while a slow reader holds them.
//! * The sender counts SACKed blocks against [`ReliableConfig::max_window`]
//!   until they are cumulatively acked: a reader that stops reading stops
//!   the writer, and [`ReliableStream::writable`] drops to 0.
//! * Keepalives are Juxta-only (`jxtarel:hb`, ignored by JXSE). Silence only
//!   kills a stream whose peer has been seen sending keepalives.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::message::{Element, Message};
use crate::time::{later, Millis};

/// Namespace of every reliability element.
pub const NS_RELIABLE: &str = "jxtarel";
/// MIME type of a data block element (JXSE `Defs.MIME_TYPE_BLOCK`).
pub const MIME_BLOCK: &str = "application/x-jxta-reliable-block";
/// MIME type of an ack element (JXSE `Defs.MIME_TYPE_ACK`).
pub const MIME_ACK: &str = "application/x-jxta-reliable-ack";
/// Name of the ack element.
pub const ACK_ELEMENT_NAME: &str = "ack";
/// Name of the element that marks a retransmission.
pub const RETRY_ELEMENT_NAME: &str = "retry";
/// Value of the retransmission marker.
pub const RETRY_ELEMENT_VALUE: &str = "RETRY";
/// Name of Juxta's keepalive marker element (JXSE ignores it).
pub const KEEPALIVE_ELEMENT_NAME: &str = "hb";
/// Most SACKs one ack carries, and most [`parse`] reads (JXSE `MAXQUEUESIZE`).
pub const MAX_SACKS: usize = 100;
/// Highest sequence number (JXSE's sequence numbers are Java `int`s).
pub const MAX_SEQ: u32 = i32::MAX as u32;
/// How long an in-order block may wait for the application before it is
/// acknowledged anyway, and how long the ack of one consumed block may
/// wait for a block of ours to carry it (see `ReliableStream::poll_transmit`).
pub const ARRIVAL_ACK_DELAY: Duration = Duration::from_millis(5);

/// Acknowledged full-block buffers kept for the next full blocks (see
/// `ReliableStream::recycle`).
const SPARE_BLOCKS: usize = 4;

/// The data element for block `seq` (`jxtarel:<seq>`, [`MIME_BLOCK`]).
/// The payload is not copied.
///
/// ```
/// use juxta_proto::socket::reliable::{block_element, MIME_BLOCK};
/// let e = block_element(7, bytes::Bytes::from_static(b"abc"));
/// assert_eq!((&*e.namespace, &*e.name, e.mime()), ("jxtarel", "7", MIME_BLOCK));
/// ```
pub fn block_element(seq: u32, data: Bytes) -> Element {
    Element::typed_static(NS_RELIABLE, &seq.to_string(), MIME_BLOCK, data)
}

/// The ack element: `cumulative` then the SACKs, all int32 big-endian.
/// At most [`MAX_SACKS`] SACKs are written; extra ones are left out.
///
/// ```
/// use juxta_proto::socket::reliable::ack_element;
/// assert_eq!(&ack_element(1, &[3]).data[..], &[0, 0, 0, 1, 0, 0, 0, 3]);
/// ```
pub fn ack_element(cumulative: u32, sacks: &[u32]) -> Element {
    let sacks = &sacks[..sacks.len().min(MAX_SACKS)];
    let mut v = Vec::with_capacity(4 * (1 + sacks.len()));
    v.extend_from_slice(&cumulative.to_be_bytes());
    for s in sacks {
        v.extend_from_slice(&s.to_be_bytes());
    }
    Element::typed_static(NS_RELIABLE, ACK_ELEMENT_NAME, MIME_ACK, v)
}

/// The retransmission marker `jxtarel:retry` = `RETRY` (a JXSE
/// `StringMessageElement`, hence `text/plain;charset=UTF-8`).
pub fn retry_element() -> Element {
    Element::text(NS_RELIABLE, RETRY_ELEMENT_NAME, RETRY_ELEMENT_VALUE)
}

/// Juxta's keepalive marker `jxtarel:hb` (empty, text/plain), sent with idle
/// acks. JXSE looks for blocks and acks by MIME type, so it ignores it.
pub fn keepalive_element() -> Element {
    Element::text(NS_RELIABLE, KEEPALIVE_ELEMENT_NAME, "")
}

/// What a received message carries for the reliability layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A data block.
    Block {
        /// Sequence number (1-based).
        seq: u32,
        /// The payload (a slice of the received buffer).
        data: Bytes,
        /// The message carried `jxtarel:retry`.
        retry: bool,
    },
    /// An acknowledgement.
    Ack {
        /// Highest block the peer's application consumed.
        cumulative: u32,
        /// Blocks above `cumulative` the peer holds (at most [`MAX_SACKS`]).
        sacks: Vec<u32>,
    },
}

/// Why a peer is considered dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadPeerCause {
    /// Data was outstanding and no ack acknowledged any of it for
    /// [`ReliableConfig::dead_peer_timeout`].
    NoAckProgress,
    /// The peer sends keepalives, and nothing at all arrived for
    /// [`ReliableConfig::dead_peer_timeout`].
    Silent,
}

impl std::fmt::Display for DeadPeerCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeadPeerCause::NoAckProgress => "no acknowledgement of outstanding data",
            DeadPeerCause::Silent => "nothing heard from a peer that sends keepalives",
        })
    }
}

/// Errors of the reliability layer: malformed elements, or a failed stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReliableError {
    /// The stream failed: the peer stopped answering.
    #[error("reliable stream peer is dead: {0}")]
    DeadPeer(DeadPeerCause),
    /// A block element's name is not a sequence number in `1..=2^31-1`.
    #[error("block element name {0:?} is not a sequence number")]
    BadBlockName(String),
    /// An ack element is shorter than its 4-byte cumulative ack.
    #[error("ack element of {0} bytes (at least 4 needed)")]
    ShortAck(usize),
    /// The stream used up all 2^31-1 sequence numbers.
    #[error("reliable stream sequence numbers exhausted")]
    SequenceExhausted,
}

fn parse_seq(name: &str) -> Result<u32, ReliableError> {
    let bad = || ReliableError::BadBlockName(name.chars().take(32).collect());
    if name.is_empty() || name.len() > 10 || !name.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match name.parse::<u64>() {
        Ok(v) if (1..=MAX_SEQ as u64).contains(&v) => Ok(v as u32),
        _ => Err(bad()),
    }
}

/// Extracts the reliability items of a message, in element order.
///
/// As JXSE does, blocks and acks are found **by MIME type** in the
/// `jxtarel` namespace, whatever else the message holds; `jxtarel:retry`
/// anywhere marks every block of the message as a retransmission. At most
/// [`MAX_SACKS`] SACKs are read from an ack; bytes after the last whole
/// int32 are ignored (as JXSE does). Keepalives: see [`is_keepalive`].
///
/// ```
/// use juxta_proto::message::Message;
/// use juxta_proto::socket::reliable::{ack_element, parse, Incoming};
/// let m = Message::new().with(ack_element(4, &[6, 7]));
/// assert_eq!(parse(&m).unwrap(), vec![Incoming::Ack { cumulative: 4, sacks: vec![6, 7] }]);
/// ```
pub fn parse(msg: &Message) -> Result<Vec<Incoming>, ReliableError> {
    let retry = msg
        .elements
        .iter()
        .any(|e| e.namespace == NS_RELIABLE && e.name == RETRY_ELEMENT_NAME);
    let mut out = Vec::new();
    for e in msg.elements.iter().filter(|e| e.namespace == NS_RELIABLE) {
        match e.mime() {
            MIME_BLOCK => out.push(Incoming::Block {
                seq: parse_seq(&e.name)?,
                data: e.data.clone(),
                retry,
            }),
            MIME_ACK => {
                let d = &e.data;
                if d.len() < 4 {
                    return Err(ReliableError::ShortAck(d.len()));
                }
                let int = |i: usize| u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
                let n = ((d.len() - 4) / 4).min(MAX_SACKS);
                out.push(Incoming::Ack {
                    cumulative: int(0),
                    sacks: (0..n).map(|k| int(4 + 4 * k)).collect(),
                });
            }
            _ => {}
        }
    }
    Ok(out)
}

/// True if the message carries Juxta's keepalive marker
/// ([`keepalive_element`]): feed it to [`ReliableStream::handle_keepalive`].
pub fn is_keepalive(msg: &Message) -> bool {
    msg.get(NS_RELIABLE, KEEPALIVE_ELEMENT_NAME).is_some()
}

/// Tuning of a [`ReliableStream`]. Durations may be huge (`Duration::MAX`
/// disables the corresponding timer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReliableConfig {
    /// Largest block written (JxtaSocket: min(MTU, 256 KB) = 64 KiB).
    pub block_size: usize,
    /// Congestion window at start, in blocks.
    pub initial_window: u32,
    /// Most blocks sent and not yet cumulatively acked (the peer's receive
    /// buffer must hold that many). 256 by default; use 20 for JXSE peers.
    pub max_window: u32,
    /// Most blocks held for the application; blocks further ahead are
    /// dropped (the sender retransmits them).
    pub recv_buffer_blocks: u32,
    /// Lower bound of the retransmission timeout.
    pub min_rto: Duration,
    /// Upper bound of the retransmission timeout (also with backoff).
    pub max_rto: Duration,
    /// Retransmission timeout before the first RTT sample.
    pub initial_rto: Duration,
    /// How long outstanding data may go unacknowledged (or a
    /// keepalive-sending peer stay silent) before the stream fails.
    pub dead_peer_timeout: Duration,
    /// Send an ack marked keepalive after this long without sending.
    pub keepalive: Duration,
    /// Bytes accepted from the application and not yet sent.
    pub max_send_buffer: usize,
    /// Hold the ack of one consumed block back for the next block sent
    /// (the runtime puts both in one message) or until
    /// [`ARRIVAL_ACK_DELAY`] after the block arrived; two or more
    /// consumed blocks are acked at once. For a runtime that sends the
    /// two together and wakes at [`ReliableStream::poll_timeout`]. Off by
    /// default: each consumption is acked at once.
    pub ack_with_next_block: bool,
}

impl Default for ReliableConfig {
    fn default() -> Self {
        ReliableConfig {
            block_size: 64 * 1024,
            initial_window: 4,
            max_window: 256,
            recv_buffer_blocks: 256,
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(10),
            initial_rto: Duration::from_secs(1),
            dead_peer_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(2),
            max_send_buffer: 4 * 1024 * 1024,
            ack_with_next_block: false,
        }
    }
}

impl ReliableConfig {
    /// Settings for a JXSE 2.7 peer: JxtaSocket's 20-block window, and a
    /// 60 s dead-peer timeout (JXSE acks only when its application reads,
    /// and hard-closes after 60 s without acks itself).
    pub fn jxse_peer() -> Self {
        ReliableConfig {
            block_size: 64 * 1024,
            max_window: 20,
            dead_peer_timeout: Duration::from_secs(60),
            ..ReliableConfig::default()
        }
    }

    fn sanitized(mut self) -> Self {
        self.block_size = self.block_size.max(1);
        self.max_window = self.max_window.max(1);
        self.initial_window = self.initial_window.clamp(1, self.max_window);
        self.recv_buffer_blocks = self.recv_buffer_blocks.max(1);
        self.max_rto = self.max_rto.max(self.min_rto);
        self
    }
}

/// Something to send: the runtime turns it into a message
/// ([`Segment::into_message`]) and adds its own addressing elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A data block.
    Block {
        /// Sequence number.
        seq: u32,
        /// Payload (the application's own buffer when it came whole).
        data: Bytes,
        /// A retransmission: add [`retry_element`].
        retry: bool,
    },
    /// An acknowledgement.
    Ack {
        /// Highest block the application consumed.
        cumulative: u32,
        /// Blocks held above `cumulative` (sorted, at most [`MAX_SACKS`]).
        sacks: Vec<u32>,
        /// Sent because the stream was idle: add [`keepalive_element`].
        keepalive: bool,
    },
}

impl Segment {
    /// The reliability elements of this transmit as a message.
    pub fn into_message(self) -> Message {
        match self {
            Segment::Block { seq, data, retry } => {
                let mut m = Message::new().with(block_element(seq, data));
                if retry {
                    m.push(retry_element());
                }
                m
            }
            Segment::Ack {
                cumulative,
                sacks,
                keepalive,
            } => {
                let mut m = Message::new().with(ack_element(cumulative, &sacks));
                if keepalive {
                    m.push(keepalive_element());
                }
                m
            }
        }
    }
}

/// Counters and estimates of a [`ReliableStream`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReliableStats {
    /// Blocks sent for the first time.
    pub blocks_sent: u64,
    /// Payload bytes sent for the first time.
    pub bytes_sent: u64,
    /// Retransmissions sent.
    pub blocks_retransmitted: u64,
    /// Blocks declared lost because later-sent blocks were acknowledged.
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Acks sent (keepalives included).
    pub acks_sent: u64,
    /// Acks sent as keepalives.
    pub keepalives_sent: u64,
    /// Acks received.
    pub acks_received: u64,
    /// Acks ignored because they acknowledge blocks never sent.
    pub invalid_acks: u64,
    /// New blocks accepted into the receive buffer.
    pub blocks_received: u64,
    /// Payload bytes of those blocks.
    pub bytes_received: u64,
    /// Blocks received again (already held or already consumed).
    pub duplicate_blocks: u64,
    /// Blocks dropped because they were beyond the receive buffer.
    pub blocks_dropped: u64,
    /// Smoothed round-trip time, once measured.
    pub srtt: Option<Duration>,
    /// Round-trip time variation.
    pub rttvar: Duration,
    /// Current retransmission timeout (with backoff).
    pub rto: Duration,
    /// Current congestion window, in blocks.
    pub cwnd: u32,
}

/// A block sent and not yet cumulatively acknowledged.
#[derive(Debug)]
struct Slot {
    data: Bytes,
    /// Time of the last transmission.
    sent_at: Millis,
    /// Number of the last transmission (monotonic over the stream).
    xmit: u64,
    retransmits: u32,
    /// SACKed: the peer holds it.
    delivered: bool,
    /// Declared lost, waiting to be retransmitted.
    lost: bool,
}

/// The block being filled by the application.
#[derive(Debug)]
enum Partial {
    Empty,
    /// One buffer handed over by `write_bytes`, kept as is.
    Shared(Bytes),
    Building(BytesMut),
}

impl Partial {
    fn len(&self) -> usize {
        match self {
            Partial::Empty => 0,
            Partial::Shared(b) => b.len(),
            Partial::Building(b) => b.len(),
        }
    }
}

/// One reliable byte stream: an outgoing and an incoming direction.
///
/// ```
/// use juxta_proto::socket::reliable::{ReliableConfig, ReliableStream, Segment};
/// let now = 0; // ms on the owner's clock
/// let (mut a, mut b) = (
///     ReliableStream::new(ReliableConfig::default(), now),
///     ReliableStream::new(ReliableConfig::default(), now),
/// );
/// a.write(b"hello");
/// a.flush();
/// let Some(Segment::Block { seq, data, retry }) = a.poll_transmit(now) else { panic!() };
/// b.handle_block(now, seq, data, retry);
/// let mut buf = [0u8; 16];
/// assert_eq!(b.read(&mut buf), 5);
/// let Some(Segment::Ack { cumulative, sacks, .. }) = b.poll_transmit(now) else { panic!() };
/// a.handle_ack(now, cumulative, &sacks);
/// assert!(a.all_acked());
/// ```
#[derive(Debug)]
pub struct ReliableStream {
    cfg: ReliableConfig,
    error: Option<ReliableError>,
    stats: ReliableStats,
    last_sent: Millis,
    last_heard: Millis,
    peer_keepalives: bool,

    // ---- outgoing ----
    current: Partial,
    pending: VecDeque<Bytes>,
    /// Bytes in `pending` and `current`.
    pending_bytes: usize,
    /// Sequence number of `flight[0]` (lowest not cumulatively acked).
    base: u32,
    next_seq: u32,
    flight: VecDeque<Slot>,
    /// Slots in flight that are not `delivered`.
    undelivered: u32,
    /// Buffers of full blocks the peer acknowledged, reused for the next
    /// full blocks (at most [`SPARE_BLOCKS`]): a block freshly allocated
    /// for each write lands in memory the allocator has just handed back
    /// to the kernel (256 KiB blocks: glibc trimmed and grew its heap
    /// around every 1 MiB write, and each block's pages faulted in again).
    spare: Vec<BytesMut>,
    /// Slots in flight that are `lost` (and not delivered).
    lost: u32,
    cwnd: u32,
    ssthresh: u32,
    ca_acc: u32,
    /// Loss recovery lasts until this seq is cumulatively acked.
    recovery_until: u32,
    srtt: Option<Duration>,
    rttvar: Duration,
    backoff: u32,
    rto_deadline: Option<Millis>,
    /// Since when undelivered data has seen no ack progress.
    stall_since: Option<Millis>,
    xmit_counter: u64,
    /// The three highest transmission numbers acknowledged, highest first.
    delivered_top: [u64; 3],

    // ---- incoming ----
    /// Highest block the application consumed entirely.
    consumed: u32,
    /// `held[i]` is block `consumed + 1 + i`.
    held: VecDeque<Option<Bytes>>,
    /// Bytes of `held[0]` already read.
    front_off: usize,
    /// Blocks at the front of `held` that are present.
    contig: u32,
    readable: usize,
    ack_dirty: bool,
    /// An in-order block arrived and is not consumed yet: it is acked
    /// (as a SACK) at this time unless the application consumes it first,
    /// whose ack then covers it. Saves one ack per block on the fast path.
    arrival_ack_at: Option<Millis>,
    /// Blocks the application consumed since our last ack. One is acked
    /// with the next block we send (the runtime puts both in one message),
    /// or at `arrival_ack_at`; two or more at once, so a sender streaming
    /// at us gets its window back without delay.
    consumed_unacked: u32,
    /// The last [`MAX_SACKS`] distinct blocks that arrived, oldest first:
    /// the SACKs, when more blocks are held than one ack can list. Every
    /// block is then reported by the acks of the next arrivals too, so a
    /// lost or late ack costs no retransmission.
    recent: VecDeque<u32>,
}

fn deadline(t: Millis, d: Duration) -> Option<Millis> {
    Some(later(t, d))
}

fn min_opt(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn diff(a: Duration, b: Duration) -> Duration {
    a.max(b) - a.min(b)
}

impl ReliableStream {
    /// A fresh stream; both directions start at sequence number 1.
    pub fn new(cfg: ReliableConfig, now: Millis) -> Self {
        let cfg = cfg.sanitized();
        let mut s = ReliableStream {
            error: None,
            stats: ReliableStats::default(),
            last_sent: now,
            last_heard: now,
            peer_keepalives: false,
            current: Partial::Empty,
            pending: VecDeque::new(),
            pending_bytes: 0,
            base: 1,
            next_seq: 1,
            flight: VecDeque::new(),
            undelivered: 0,
            spare: Vec::new(),
            lost: 0,
            cwnd: cfg.initial_window,
            ssthresh: cfg.max_window,
            ca_acc: 0,
            recovery_until: 0,
            srtt: None,
            rttvar: Duration::ZERO,
            backoff: 0,
            rto_deadline: None,
            stall_since: None,
            xmit_counter: 0,
            delivered_top: [0; 3],
            consumed: 0,
            held: VecDeque::new(),
            front_off: 0,
            contig: 0,
            readable: 0,
            ack_dirty: false,
            arrival_ack_at: None,
            consumed_unacked: 0,
            recent: VecDeque::with_capacity(MAX_SACKS),
            cfg,
        };
        s.sync_stats();
        s
    }

    /// The configuration in use (sanitized).
    pub fn config(&self) -> &ReliableConfig {
        &self.cfg
    }

    // ------------------------------------------------------------------
    // application side
    // ------------------------------------------------------------------

    /// Copies as much of `data` as the send buffer takes and returns how
    /// much; 0 means the buffer is full (wait for
    /// [`ReliableStream::writable`]) or, if [`ReliableStream::error`] is
    /// set, that the stream failed. Full blocks become sendable at once; the
    /// rest waits for more data or [`ReliableStream::flush`].
    pub fn write(&mut self, data: &[u8]) -> usize {
        if self.error.is_some() {
            return 0;
        }
        let n = data.len().min(self.writable());
        let mut rest = &data[..n];
        while !rest.is_empty() {
            let bs = self.cfg.block_size;
            let buf = self.building(rest.len());
            let take = (bs - buf.len()).min(rest.len());
            buf.extend_from_slice(&rest[..take]);
            let full = buf.len() == bs;
            rest = &rest[take..];
            if full {
                self.close_current();
            }
        }
        self.pending_bytes += n;
        n
    }

    /// Like [`ReliableStream::write`] for an owned buffer, without copying
    /// whole blocks: a `block_size` piece is sent as a slice of `data`.
    /// `Err(rest)` hands back the part the send buffer could not take (all
    /// of it after an error): push it back and retry when writable.
    pub fn write_bytes(&mut self, mut data: Bytes) -> Result<(), Bytes> {
        let n = data.len().min(self.writable());
        let rest = data.split_off(n);
        self.pending_bytes += n;
        let bs = self.cfg.block_size;
        if self.current.len() > 0 && !data.is_empty() {
            let take = (bs - self.current.len()).min(data.len());
            let head = data.split_to(take);
            let buf = self.building(take);
            buf.extend_from_slice(&head);
            if buf.len() == bs {
                self.close_current();
            }
        }
        while data.len() >= bs {
            self.pending.push_back(data.split_to(bs));
        }
        if !data.is_empty() {
            // `current` is empty here: either it was, or it was completed.
            self.current = Partial::Shared(data);
        }
        if rest.is_empty() {
            Ok(())
        } else {
            Err(rest)
        }
    }

    /// Makes a partial block sendable (a 5-byte write plus flush is a 5-byte
    /// block, as in JXSE).
    pub fn flush(&mut self) {
        self.close_current();
    }

    /// Bytes the send buffer accepts now (0 after an error).
    pub fn writable(&self) -> usize {
        if self.error.is_some() {
            return 0;
        }
        self.cfg.max_send_buffer.saturating_sub(self.pending_bytes)
    }

    /// Copies in-order bytes into `buf` and returns how many; 0 means
    /// nothing is buffered. After the stream failed, what was already
    /// received in order can still be read; once it is drained, 0 with
    /// [`ReliableStream::error`] set reports the failure.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(chunk) = self.take_front(buf.len() - n) else {
                break;
            };
            buf[n..n + chunk.len()].copy_from_slice(&chunk);
            n += chunk.len();
        }
        n
    }

    /// Up to `max` in-order bytes without copying (a slice of the received
    /// block); `None` when nothing is buffered. Errors as
    /// [`ReliableStream::read`].
    pub fn read_chunk(&mut self, max: usize) -> Option<Bytes> {
        self.take_front(max)
    }

    /// In-order bytes ready for [`ReliableStream::read`].
    pub fn readable(&self) -> usize {
        self.readable
    }

    /// True when everything written (and flushed) has been sent and the peer
    /// acknowledged it, cumulatively or selectively: the condition for
    /// starting or answering the close handshake (digest §9.4). Unflushed
    /// bytes count as not acknowledged, and a failed stream has not had
    /// everything acknowledged (its unacknowledged data is dropped, not
    /// delivered).
    pub fn all_acked(&self) -> bool {
        self.error.is_none() && self.pending_bytes == 0 && self.undelivered == 0
    }

    /// Blocks sent and not yet consumed by the peer's application.
    pub fn in_flight(&self) -> u32 {
        self.flight.len() as u32
    }

    // ------------------------------------------------------------------
    // network side
    // ------------------------------------------------------------------

    /// Feeds one item returned by [`parse`].
    pub fn handle_incoming(&mut self, now: Millis, item: Incoming) {
        match item {
            Incoming::Block { seq, data, retry } => self.handle_block(now, seq, data, retry),
            Incoming::Ack { cumulative, sacks } => self.handle_ack(now, cumulative, &sacks),
        }
    }

    /// Feeds a whole received message: its blocks, acks and keepalive
    /// marker. Nothing is applied if the message is malformed.
    pub fn handle_message(&mut self, now: Millis, msg: &Message) -> Result<(), ReliableError> {
        for item in parse(msg)? {
            self.handle_incoming(now, item);
        }
        if is_keepalive(msg) {
            self.handle_keepalive(now);
        }
        Ok(())
    }

    /// A data block arrived.
    pub fn handle_block(&mut self, now: Millis, seq: u32, data: Bytes, retry: bool) {
        let _ = retry; // informational: duplicates are detected by seq
        self.last_heard = now;
        if self.error.is_some() {
            return;
        }
        if seq <= self.consumed {
            // Old: our ack was probably lost. Re-ack at once.
            self.stats.duplicate_blocks += 1;
            self.ack_dirty = true;
            return;
        }
        let idx = (seq - self.consumed - 1) as usize;
        if idx >= self.cfg.recv_buffer_blocks as usize {
            self.stats.blocks_dropped += 1;
            return;
        }
        if idx == self.contig as usize && self.held.len() <= idx + 1 {
            // In order, no gap: the consumption ack will cover it.
            if self.arrival_ack_at.is_none() {
                self.arrival_ack_at = Some(later(now, ARRIVAL_ACK_DELAY));
            }
        } else {
            self.ack_dirty = true;
        }
        if let Some(i) = self.recent.iter().position(|&s| s == seq) {
            self.recent.remove(i);
        } else if self.recent.len() == MAX_SACKS {
            self.recent.pop_front();
        }
        self.recent.push_back(seq);
        if idx >= self.held.len() {
            self.held.resize(idx + 1, None);
        }
        if self.held[idx].is_some() {
            self.stats.duplicate_blocks += 1;
            return;
        }
        self.stats.blocks_received += 1;
        self.stats.bytes_received += data.len() as u64;
        self.held[idx] = Some(data);
        while let Some(Some(b)) = self.held.get(self.contig as usize) {
            self.readable += b.len();
            self.contig += 1;
        }
        self.drop_empty_front();
    }

    /// An ack arrived: `cumulative` is the highest block the peer consumed,
    /// `sacks` blocks it holds above that (at most [`MAX_SACKS`] are looked
    /// at).
    pub fn handle_ack(&mut self, now: Millis, cumulative: u32, sacks: &[u32]) {
        self.last_heard = now;
        self.stats.acks_received += 1;
        if self.error.is_some() {
            return;
        }
        if cumulative >= self.next_seq {
            self.stats.invalid_acks += 1;
            return;
        }
        let mut newly = 0u32;
        let mut sample: Option<Millis> = None;
        while self.base <= cumulative {
            let Some(slot) = self.flight.pop_front() else {
                break;
            };
            self.base += 1;
            if !slot.delivered {
                self.mark_delivered_counts(&slot, &mut newly, &mut sample);
            }
            if slot.lost {
                self.lost -= 1;
            }
            self.recycle(slot.data);
        }
        for &s in sacks.iter().take(MAX_SACKS) {
            if s < self.base || s >= self.next_seq {
                continue;
            }
            let i = (s - self.base) as usize;
            if self.flight[i].delivered {
                continue;
            }
            let slot = &mut self.flight[i];
            slot.delivered = true;
            let was_lost = std::mem::replace(&mut slot.lost, false);
            let (xmit, sent_at, clean) = (slot.xmit, slot.sent_at, slot.retransmits == 0);
            if was_lost {
                self.lost -= 1;
            }
            self.undelivered -= 1;
            newly += 1;
            self.note_delivered_xmit(xmit);
            if clean {
                sample = Some(sample.map_or(sent_at, |t| t.max(sent_at)));
            }
        }
        if let Some(sent_at) = sample {
            self.rtt_sample(Duration::from_millis(now.saturating_sub(sent_at)));
        }
        if newly > 0 {
            self.stall_since = (self.undelivered > 0).then_some(now);
            self.rto_deadline = if self.undelivered > 0 {
                deadline(now, self.current_rto())
            } else {
                None
            };
            if self.base > self.recovery_until {
                self.grow_window(newly);
            }
        }
        self.detect_losses();
        self.sync_stats();
    }

    /// The peer sent a keepalive: from now on, its silence for
    /// [`ReliableConfig::dead_peer_timeout`] fails the stream.
    pub fn handle_keepalive(&mut self, now: Millis) {
        self.last_heard = now;
        self.peer_keepalives = true;
    }

    /// True once the peer has been seen sending keepalives (a Juxta peer).
    pub fn peer_sends_keepalives(&self) -> bool {
        self.peer_keepalives
    }

    /// Whether a lost block may go again now (`pipe`: blocks in flight
    /// and not lost).
    fn may_retransmit(&self, pipe: u32) -> bool {
        self.lost > 0 && pipe < self.cwnd
    }

    /// Whether the window has room for a new block now.
    fn may_send_new(&self, pipe: u32) -> bool {
        pipe < self.cwnd && (self.flight.len() as u32) < self.cfg.max_window
    }

    /// Whether an ack is owed and waiting for its time (or for a block of
    /// ours to ride on): [`ReliableStream::poll_timeout`] has its deadline.
    pub fn ack_owed(&self) -> bool {
        self.ack_dirty || self.consumed_unacked > 0 || self.arrival_ack_at.is_some()
    }

    /// The next thing to send, if any: a pending ack first (one per call,
    /// covering everything received so far), then retransmissions, then new
    /// blocks as the window allows, then a keepalive when idle. With
    /// [`ReliableConfig::ack_with_next_block`], the ack of one block the
    /// application consumed goes just before the next block (so one
    /// message carries both) or [`ARRIVAL_ACK_DELAY`] after it arrived,
    /// whichever is first; once two are consumed it goes at once.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use juxta_proto::socket::reliable::{ReliableConfig, ReliableStream, Segment, ARRIVAL_ACK_DELAY};
    /// let cfg = ReliableConfig { ack_with_next_block: true, ..ReliableConfig::default() };
    /// let mut r = ReliableStream::new(cfg, 0);
    /// r.handle_block(0, 1, Bytes::from_static(b"ping"), false);
    /// let mut buf = [0u8; 4];
    /// assert_eq!(r.read(&mut buf), 4);
    /// // Nothing to carry the ack yet: it waits.
    /// assert_eq!(r.poll_transmit(0), None);
    /// // The reply: the ack first, then the block it rides on.
    /// r.write(b"pong");
    /// r.flush();
    /// assert!(matches!(r.poll_transmit(0), Some(Segment::Ack { cumulative: 1, .. })));
    /// assert!(matches!(r.poll_transmit(0), Some(Segment::Block { seq: 1, .. })));
    /// // Had nothing come to carry it, it would have gone at its delay.
    /// assert_eq!(r.poll_transmit(ARRIVAL_ACK_DELAY.as_millis() as u64), None);
    /// ```
    pub fn poll_transmit(&mut self, now: Millis) -> Option<Segment> {
        if self.error.is_some() {
            return None;
        }
        if self.ack_dirty
            || self.consumed_unacked >= 2
            || self.arrival_ack_at.is_some_and(|t| now >= t)
        {
            return Some(self.make_ack(now, false));
        }
        let pipe = self.undelivered - self.lost;
        if self.consumed_unacked > 0 {
            let block_next =
                self.may_retransmit(pipe) || (self.may_send_new(pipe) && !self.pending.is_empty());
            if block_next {
                // Rides on the block that follows.
                return Some(self.make_ack(now, false));
            }
            if self.arrival_ack_at.is_none() {
                self.arrival_ack_at = Some(later(now, ARRIVAL_ACK_DELAY));
            }
        }
        if self.may_retransmit(pipe) {
            if let Some(i) = self.flight.iter().position(|s| s.lost) {
                self.xmit_counter += 1;
                let slot = &mut self.flight[i];
                slot.lost = false;
                slot.retransmits += 1;
                slot.sent_at = now;
                slot.xmit = self.xmit_counter;
                let data = slot.data.clone();
                self.lost -= 1;
                self.stats.blocks_retransmitted += 1;
                self.on_block_sent(now);
                return Some(Segment::Block {
                    seq: self.base + i as u32,
                    data,
                    retry: true,
                });
            }
        }
        if self.may_send_new(pipe) {
            if let Some(data) = self.pending.pop_front() {
                if self.next_seq > MAX_SEQ {
                    self.pending.push_front(data);
                    self.fail(ReliableError::SequenceExhausted);
                    return None;
                }
                self.pending_bytes -= data.len();
                let seq = self.next_seq;
                self.next_seq += 1;
                self.xmit_counter += 1;
                self.flight.push_back(Slot {
                    data: data.clone(),
                    sent_at: now,
                    xmit: self.xmit_counter,
                    retransmits: 0,
                    delivered: false,
                    lost: false,
                });
                self.undelivered += 1;
                self.stats.blocks_sent += 1;
                self.stats.bytes_sent += data.len() as u64;
                self.on_block_sent(now);
                return Some(Segment::Block {
                    seq,
                    data,
                    retry: false,
                });
            }
        }
        if deadline(self.last_sent, self.cfg.keepalive).is_some_and(|t| now >= t) {
            return Some(self.make_ack(now, true));
        }
        None
    }

    /// When [`ReliableStream::handle_timeout`] (then
    /// [`ReliableStream::poll_transmit`]) must run next; `None` after an
    /// error.
    pub fn poll_timeout(&self) -> Option<Millis> {
        if self.error.is_some() {
            return None;
        }
        let mut t = deadline(self.last_sent, self.cfg.keepalive);
        t = min_opt(t, self.arrival_ack_at);
        if self.undelivered > 0 {
            t = min_opt(t, self.rto_deadline);
        }
        if let Some(since) = self.stall_since {
            t = min_opt(t, deadline(since, self.cfg.dead_peer_timeout));
        }
        if self.peer_keepalives {
            t = min_opt(t, deadline(self.last_heard, self.cfg.dead_peer_timeout));
        }
        t
    }

    /// Runs the timers due at `now`: dead-peer detection and retransmission
    /// timeouts. Keepalives come out of [`ReliableStream::poll_transmit`].
    pub fn handle_timeout(&mut self, now: Millis) {
        if self.error.is_some() {
            return;
        }
        let due = |t: Option<Millis>| t.is_some_and(|t| now >= t);
        if self.undelivered > 0
            && self
                .stall_since
                .is_some_and(|s| due(deadline(s, self.cfg.dead_peer_timeout)))
        {
            self.fail(ReliableError::DeadPeer(DeadPeerCause::NoAckProgress));
            return;
        }
        if self.peer_keepalives && due(deadline(self.last_heard, self.cfg.dead_peer_timeout)) {
            self.fail(ReliableError::DeadPeer(DeadPeerCause::Silent));
            return;
        }
        if self.undelivered > 0 && due(self.rto_deadline) {
            self.stats.timeouts += 1;
            self.backoff = (self.backoff + 1).min(30);
            self.reduce_window();
            // Everything not known to have arrived is presumed lost (RFC 6675
            // after an RTO); the window paces the retransmissions.
            for slot in self.flight.iter_mut() {
                if !slot.delivered && !slot.lost {
                    slot.lost = true;
                    self.lost += 1;
                }
            }
            self.rto_deadline = deadline(now, self.current_rto());
            self.sync_stats();
        }
    }

    /// The error that failed the stream, if any.
    pub fn error(&self) -> Option<&ReliableError> {
        self.error.as_ref()
    }

    /// Counters and estimates.
    pub fn stats(&self) -> &ReliableStats {
        &self.stats
    }

    // ------------------------------------------------------------------
    // internals
    // ------------------------------------------------------------------

    /// Keeps the buffer of an acknowledged full block for reuse when
    /// nothing else holds it any more.
    fn recycle(&mut self, data: Bytes) {
        if self.spare.len() >= SPARE_BLOCKS || data.len() != self.cfg.block_size {
            return;
        }
        if let Ok(mut m) = data.try_into_mut() {
            m.clear();
            self.spare.push(m);
        }
    }

    fn building(&mut self, hint: usize) -> &mut BytesMut {
        let cap = self.cfg.block_size.min(hint.max(4096));
        let cur = std::mem::replace(&mut self.current, Partial::Empty);
        self.current = Partial::Building(match cur {
            Partial::Empty if hint >= self.cfg.block_size => self
                .spare
                .pop()
                .unwrap_or_else(|| BytesMut::with_capacity(cap)),
            Partial::Empty => BytesMut::with_capacity(cap),
            Partial::Shared(b) => {
                let mut m = BytesMut::with_capacity((b.len() + hint).min(self.cfg.block_size));
                m.extend_from_slice(&b);
                m
            }
            Partial::Building(m) => m,
        });
        match &mut self.current {
            Partial::Building(m) => m,
            _ => unreachable!(),
        }
    }

    fn close_current(&mut self) {
        match std::mem::replace(&mut self.current, Partial::Empty) {
            Partial::Empty => {}
            Partial::Shared(b) => self.pending.push_back(b),
            Partial::Building(m) => {
                if !m.is_empty() {
                    self.pending.push_back(m.freeze())
                }
            }
        }
    }

    fn take_front(&mut self, max: usize) -> Option<Bytes> {
        if self.readable == 0 || max == 0 {
            return None;
        }
        let block = self.held.front()?.as_ref()?;
        let n = (block.len() - self.front_off).min(max);
        let chunk = block.slice(self.front_off..self.front_off + n);
        self.front_off += n;
        self.readable -= n;
        if self.front_off == block.len() {
            self.pop_front_block();
            self.drop_empty_front();
        }
        Some(chunk)
    }

    fn pop_front_block(&mut self) {
        self.held.pop_front();
        self.front_off = 0;
        self.contig -= 1;
        self.consumed += 1;
        if self.cfg.ack_with_next_block {
            self.consumed_unacked = self.consumed_unacked.saturating_add(1);
        } else {
            self.ack_dirty = true;
        }
    }

    /// Zero-length blocks (never sent by JXSE) are consumed on arrival.
    fn drop_empty_front(&mut self) {
        while matches!(self.held.front(), Some(Some(b)) if b.is_empty()) {
            self.pop_front_block();
        }
    }

    fn make_ack(&mut self, now: Millis, keepalive: bool) -> Segment {
        let consumed = self.consumed;
        let held = &self.held;
        let is_held = |s: u32| {
            s > consumed
                && held
                    .get((s - consumed - 1) as usize)
                    .is_some_and(|b| b.is_some())
        };
        let mut sacks: Vec<u32> = Vec::with_capacity(MAX_SACKS.min(held.len()));
        if held
            .iter()
            .filter(|b| b.is_some())
            .take(MAX_SACKS + 1)
            .count()
            <= MAX_SACKS
        {
            // Everything fits.
            sacks.extend(
                (0..held.len() as u32)
                    .map(|i| consumed + 1 + i)
                    .filter(|&s| is_held(s)),
            );
        } else {
            // The latest arrivals first, then the lowest held blocks.
            self.recent.retain(|&s| s > consumed);
            sacks.extend(self.recent.iter().copied().filter(|&s| is_held(s)));
            let recent_count = sacks.len();
            for s in (0..held.len() as u32).map(|i| consumed + 1 + i) {
                if sacks.len() >= MAX_SACKS {
                    break;
                }
                if is_held(s) && !sacks[..recent_count].contains(&s) {
                    sacks.push(s);
                }
            }
        }
        sacks.sort_unstable();
        self.ack_dirty = false;
        self.arrival_ack_at = None;
        self.consumed_unacked = 0;
        self.last_sent = now;
        self.stats.acks_sent += 1;
        if keepalive {
            self.stats.keepalives_sent += 1;
        }
        Segment::Ack {
            cumulative: consumed,
            sacks,
            keepalive,
        }
    }

    fn on_block_sent(&mut self, now: Millis) {
        self.last_sent = now;
        if self.rto_deadline.is_none() {
            self.rto_deadline = deadline(now, self.current_rto());
        }
        if self.stall_since.is_none() {
            self.stall_since = Some(now);
        }
    }

    fn mark_delivered_counts(&mut self, slot: &Slot, newly: &mut u32, sample: &mut Option<Millis>) {
        self.undelivered -= 1;
        *newly += 1;
        self.note_delivered_xmit(slot.xmit);
        if slot.retransmits == 0 {
            *sample = Some(sample.map_or(slot.sent_at, |t| t.max(slot.sent_at)));
        }
    }

    fn note_delivered_xmit(&mut self, x: u64) {
        let top = &mut self.delivered_top;
        if top.contains(&x) {
            return;
        }
        if x > top[0] {
            *top = [x, top[0], top[1]];
        } else if x > top[1] {
            *top = [top[0], x, top[1]];
        } else if x > top[2] {
            top[2] = x;
        }
    }

    /// A block is lost once three blocks transmitted after it have been
    /// acknowledged: the "3 SACKs above a gap" rule, also applied to
    /// retransmissions (each retransmission can be repeated once the same
    /// evidence accumulates against it).
    fn detect_losses(&mut self) {
        let third = self.delivered_top[2];
        if third == 0 || self.undelivered == self.lost {
            return;
        }
        let mut marked = 0;
        for slot in self.flight.iter_mut() {
            if !slot.delivered && !slot.lost && slot.xmit < third {
                slot.lost = true;
                marked += 1;
            }
        }
        if marked > 0 {
            self.lost += marked;
            self.stats.fast_retransmits += marked as u64;
            if self.base > self.recovery_until {
                self.reduce_window();
            }
        }
    }

    fn reduce_window(&mut self) {
        self.cwnd = (self.cwnd / 2).max(2).min(self.cfg.max_window);
        self.ssthresh = self.cwnd;
        self.ca_acc = 0;
        self.recovery_until = self.next_seq - 1;
    }

    fn grow_window(&mut self, newly: u32) {
        for _ in 0..newly {
            if self.cwnd >= self.cfg.max_window {
                break;
            }
            if self.cwnd < self.ssthresh {
                self.cwnd += 1;
            } else {
                self.ca_acc += 1;
                if self.ca_acc >= self.cwnd {
                    self.ca_acc = 0;
                    self.cwnd += 1;
                }
            }
        }
    }

    fn rtt_sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                self.rttvar = (self.rttvar * 3 + diff(srtt, r)) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
        self.backoff = 0;
    }

    fn base_rto(&self) -> Duration {
        match self.srtt {
            None => self.cfg.initial_rto,
            Some(srtt) => srtt.saturating_add(self.rttvar.saturating_mul(4)),
        }
        .clamp(self.cfg.min_rto, self.cfg.max_rto)
    }

    fn current_rto(&self) -> Duration {
        self.base_rto()
            .saturating_mul(1u32 << self.backoff.min(30))
            .min(self.cfg.max_rto)
    }

    fn fail(&mut self, e: ReliableError) {
        self.error = Some(e);
        self.pending.clear();
        self.current = Partial::Empty;
        self.pending_bytes = 0;
        self.flight.clear();
        self.undelivered = 0;
        self.lost = 0;
        self.rto_deadline = None;
        self.stall_since = None;
        self.ack_dirty = false;
    }

    fn sync_stats(&mut self) {
        self.stats.srtt = self.srtt;
        self.stats.rttvar = self.rttvar;
        self.stats.rto = self.current_rto();
        self.stats.cwnd = self.cwnd;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::namespace_order::JavaHashOrder;
    use crate::message::{decode_v0, encode_v0};
    use crate::wire::frame::parse_header;
    use proptest::prelude::*;

    const VECTOR_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jxse-2.7-stock/");

    /// The binary message inside a captured TCP frame.
    fn vector_body(name: &str) -> Bytes {
        let path = format!("{VECTOR_DIR}{name}");
        let frame = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("JXSE test vector {path} is missing ({e})"));
        let h = parse_header(&frame, 1 << 20).unwrap().unwrap();
        assert_eq!(frame.len() - h.header_len, h.content_length as usize);
        Bytes::copy_from_slice(&frame[h.header_len..])
    }

    fn vector_message(name: &str) -> Message {
        decode_v0(vector_body(name)).unwrap().message
    }

    fn cfg() -> ReliableConfig {
        ReliableConfig {
            block_size: 4,
            initial_window: 4,
            max_window: 16,
            recv_buffer_blocks: 8,
            max_send_buffer: 64,
            ..ReliableConfig::default()
        }
    }

    fn dur(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// `n` ms of the stream's clock.
    fn ms(n: u64) -> Millis {
        n
    }

    fn block(t: Option<Segment>) -> (u32, Bytes, bool) {
        match t {
            Some(Segment::Block { seq, data, retry }) => (seq, data, retry),
            other => panic!("expected a block, got {other:?}"),
        }
    }

    fn ack(t: Option<Segment>) -> (u32, Vec<u32>, bool) {
        match t {
            Some(Segment::Ack {
                cumulative,
                sacks,
                keepalive,
            }) => (cumulative, sacks, keepalive),
            other => panic!("expected an ack, got {other:?}"),
        }
    }

    // ---------------------------------------------------------- codec --

    #[test]
    fn parses_jxse_data_blocks() {
        for (name, seq, data) in [
            ("22_jxtasocket_data_seq1_4B.bin", 1, &[0u8, 0, 0, 1][..]),
            ("23_jxtasocket_data_1B.bin", 2, &[0x61][..]),
            ("25_jxtasocket_app_ack_1B.bin", 1, &[0x01][..]),
        ] {
            let m = vector_message(name);
            let items = parse(&m).unwrap();
            assert_eq!(
                items,
                vec![Incoming::Block {
                    seq,
                    data: Bytes::copy_from_slice(data),
                    retry: false
                }],
                "{name}"
            );
            // Our element is the one JXSE wrote.
            assert_eq!(
                m.elements[0],
                block_element(seq, Bytes::copy_from_slice(data))
            );
        }
    }

    #[test]
    fn parses_jxse_ack() {
        let m = vector_message("24_jxtasocket_reliability_ack.bin");
        assert_eq!(
            parse(&m).unwrap(),
            vec![Incoming::Ack {
                cumulative: 1,
                sacks: vec![]
            }]
        );
        assert_eq!(&m.elements[0].data[..], &[0, 0, 0, 1]);
        assert_eq!(m.elements[0], ack_element(1, &[]));
    }

    /// Encoding a message holding only our element gives JXSE's bytes: same
    /// header (bar the element count) and the same element bytes.
    #[test]
    fn encodes_like_jxse() {
        for (name, el) in [
            (
                "22_jxtasocket_data_seq1_4B.bin",
                block_element(1, Bytes::from_static(&[0, 0, 0, 1])),
            ),
            (
                "23_jxtasocket_data_1B.bin",
                block_element(2, Bytes::from_static(&[0x61])),
            ),
            ("24_jxtasocket_reliability_ack.bin", ack_element(1, &[])),
        ] {
            let body = vector_body(name);
            let ours = encode_v0(&Message::new().with(el), JavaHashOrder::Java8)
                .unwrap()
                .to_bytes();
            // "jxmg" 0, u16 1, str16 "jxtarel", u16 element count
            let hdr = 4 + 1 + 2 + 2 + NS_RELIABLE.len();
            assert_eq!(&ours[..hdr], &body[..hdr], "{name}");
            assert_eq!(&ours[hdr..hdr + 2], &[0, 1]);
            assert_eq!(&body[hdr..hdr + 2], &[0, 5]);
            assert_eq!(&ours[hdr + 2..], &body[hdr + 2..ours.len()], "{name}");
        }
    }

    #[test]
    fn retry_and_keepalive_markers() {
        let m = Segment::Block {
            seq: 9,
            data: Bytes::from_static(b"x"),
            retry: true,
        }
        .into_message();
        assert_eq!(m.elements[1].name, "retry");
        assert_eq!(m.elements[1].mime(), crate::message::MIME_TEXT_UTF8);
        assert_eq!(m.elements[1].as_str(), Some("RETRY"));
        assert_eq!(
            parse(&m).unwrap(),
            vec![Incoming::Block {
                seq: 9,
                data: Bytes::from_static(b"x"),
                retry: true
            }]
        );
        let m = Segment::Ack {
            cumulative: 3,
            sacks: vec![5],
            keepalive: true,
        }
        .into_message();
        assert_eq!(
            parse(&m).unwrap(),
            vec![Incoming::Ack {
                cumulative: 3,
                sacks: vec![5]
            }]
        );
        assert!(is_keepalive(&m));
        assert_eq!(m.elements[1].namespace, NS_RELIABLE);
        assert_eq!(m.elements[1].name, KEEPALIVE_ELEMENT_NAME);
        assert!(!is_keepalive(&Message::new().with(ack_element(3, &[]))));
        // handle_message applies all three.
        let t0: Millis = 1_000;
        let mut s = ReliableStream::new(cfg(), t0);
        s.handle_message(t0, &m).unwrap();
        assert!(s.peer_sends_keepalives());
        assert_eq!(s.stats().acks_received, 1);
    }

    #[test]
    fn parse_errors_are_typed() {
        for bad in [
            "",
            "0",
            "-1",
            "+1",
            "2147483648",
            "99999999999",
            "1a",
            "ack2",
        ] {
            let m = Message::new().with(Element::typed(NS_RELIABLE, bad, MIME_BLOCK, &b"x"[..]));
            assert!(
                matches!(parse(&m), Err(ReliableError::BadBlockName(_))),
                "{bad:?}"
            );
        }
        let m = Message::new().with(Element::typed(
            NS_RELIABLE,
            "ack",
            MIME_ACK,
            &[0u8, 0, 1][..],
        ));
        assert_eq!(parse(&m), Err(ReliableError::ShortAck(3)));
        // Found by MIME type, not name; other namespaces and types ignored.
        let m = Message::new()
            .with(Element::typed("other", "1", MIME_BLOCK, &b"x"[..]))
            .with(Element::bytes(NS_RELIABLE, "1", &b"x"[..]))
            .with(Element::typed(
                NS_RELIABLE,
                "whatever",
                MIME_ACK,
                &[0u8, 0, 0, 7, 0, 0, 0, 9, 1][..],
            ));
        assert_eq!(
            parse(&m).unwrap(),
            vec![Incoming::Ack {
                cumulative: 7,
                sacks: vec![9]
            }]
        );
    }

    #[test]
    fn parse_reads_at_most_100_sacks() {
        let mut v = vec![0u8, 0, 0, 1];
        for s in 2..1000u32 {
            v.extend_from_slice(&s.to_be_bytes());
        }
        let m = Message::new().with(Element::typed(NS_RELIABLE, "ack", MIME_ACK, v));
        let [Incoming::Ack { cumulative, sacks }] = &parse(&m).unwrap()[..] else {
            panic!()
        };
        assert_eq!(*cumulative, 1);
        assert_eq!(sacks.len(), MAX_SACKS);
        assert_eq!(sacks[99], 101);
        // ack_element writes at most 100 too.
        let all: Vec<u32> = (2..300).collect();
        assert_eq!(ack_element(1, &all).data.len(), 4 * 101);
    }

    proptest! {
        #[test]
        fn block_roundtrip(seq in 1..=MAX_SEQ, data in proptest::collection::vec(any::<u8>(), 0..300), retry: bool) {
            let m = Segment::Block { seq, data: Bytes::from(data.clone()), retry }.into_message();
            let wire = encode_v0(&m, JavaHashOrder::Java8).unwrap().to_bytes();
            let back = decode_v0(wire).unwrap().message;
            prop_assert_eq!(parse(&back).unwrap(), vec![Incoming::Block { seq, data: Bytes::from(data), retry }]);
        }

        #[test]
        fn ack_roundtrip(cum: u32, sacks in proptest::collection::vec(any::<u32>(), 0..150), keepalive: bool) {
            let m = Segment::Ack { cumulative: cum, sacks: sacks.clone(), keepalive }.into_message();
            let wire = encode_v0(&m, JavaHashOrder::Java8).unwrap().to_bytes();
            let back = decode_v0(wire).unwrap().message;
            let want = vec![Incoming::Ack { cumulative: cum, sacks: sacks[..sacks.len().min(MAX_SACKS)].to_vec() }];
            prop_assert_eq!(parse(&back).unwrap(), want);
            prop_assert_eq!(is_keepalive(&back), keepalive);
        }

        /// Arbitrary `jxtarel` elements never panic the parser, and whatever
        /// it returns is bounded.
        #[test]
        fn parse_arbitrary(els in proptest::collection::vec(
            (prop_oneof![Just("ack".to_string()), Just("1".to_string()), "[0-9+-]{0,12}", ".{0,4}"],
             prop_oneof![Just(MIME_ACK), Just(MIME_BLOCK), Just("text/plain")],
             proptest::collection::vec(any::<u8>(), 0..600)), 0..6)) {
            let mut m = Message::new();
            for (name, mime, data) in els {
                m.push(Element::typed(NS_RELIABLE, &name, mime, data));
            }
            if let Ok(items) = parse(&m) {
                for it in items {
                    match it {
                        Incoming::Ack { sacks, .. } => prop_assert!(sacks.len() <= MAX_SACKS),
                        Incoming::Block { seq, .. } => prop_assert!((1..=MAX_SEQ).contains(&seq)),
                    }
                }
            }
        }
    }

    // --------------------------------------------------------- engine --

    #[test]
    fn write_bytes_whole_block_is_zero_copy() {
        let now: Millis = 1_000;
        let mut s = ReliableStream::new(ReliableConfig::jxse_peer(), now);
        let data = Bytes::from(vec![7u8; 64 * 1024 * 2 + 10]);
        let ptr = data.as_ptr();
        assert_eq!(s.write_bytes(data), Ok(()));
        let (seq, b1, _) = block(s.poll_transmit(now));
        assert_eq!((seq, b1.len(), b1.as_ptr()), (1, 65536, ptr));
        let (_, b2, _) = block(s.poll_transmit(now));
        assert_eq!(b2.as_ptr(), ptr.wrapping_add(65536));
        // The 10-byte tail waits for a flush, then goes out uncopied too.
        assert_eq!(s.poll_transmit(now), None);
        s.flush();
        let (seq, b3, _) = block(s.poll_transmit(now));
        assert_eq!(
            (seq, b3.len(), b3.as_ptr()),
            (3, 10, ptr.wrapping_add(131072))
        );
    }

    #[test]
    fn write_bytes_completes_a_partial_block_then_stays_zero_copy() {
        let now: Millis = 1_000;
        let mut s = ReliableStream::new(cfg(), now);
        assert_eq!(s.write(b"ab"), 2);
        let data = Bytes::from_static(b"cdefghij");
        assert_eq!(s.write_bytes(data.clone()), Ok(()));
        s.flush();
        assert_eq!(&block(s.poll_transmit(now)).1[..], b"abcd");
        let (_, b, _) = block(s.poll_transmit(now));
        assert_eq!((&b[..], b.as_ptr()), (&b"efgh"[..], data[2..].as_ptr()));
        assert_eq!(&block(s.poll_transmit(now)).1[..], b"ij");
    }

    #[test]
    fn send_buffer_is_bounded() {
        let now: Millis = 1_000;
        let mut s = ReliableStream::new(cfg(), now);
        assert_eq!(s.writable(), 64);
        assert_eq!(s.write(&[1; 100]), 64);
        assert_eq!(s.writable(), 0);
        assert_eq!(s.write(&[1; 10]), 0);
        assert_eq!(
            s.write_bytes(Bytes::from_static(b"xyz")),
            Err(Bytes::from_static(b"xyz"))
        );
        // Sending frees buffer space: initial window of 4 blocks of 4 bytes.
        for _ in 0..4 {
            block(s.poll_transmit(now));
        }
        assert_eq!(s.poll_transmit(now), None);
        assert_eq!(s.writable(), 16);
        assert_eq!(s.in_flight(), 4);
    }

    #[test]
    fn acknowledged_full_blocks_are_reused() {
        let now: Millis = 1_000;
        let mut s = ReliableStream::new(cfg(), now);
        assert_eq!(s.write(b"abcdefgh"), 8);
        let mut sent = Vec::new();
        while let Some(Segment::Block { data, .. }) = s.poll_transmit(now) {
            sent.push(data.as_ptr());
        }
        assert_eq!(sent.len(), 2);
        // Before the ack the blocks are still held: a fresh buffer.
        assert_eq!(s.write(b"ijkl"), 4);
        let Some(Segment::Block { data, .. }) = s.poll_transmit(now) else {
            panic!("a block")
        };
        assert!(!sent.contains(&data.as_ptr()));
        sent.push(data.as_ptr());
        drop(data);
        assert!(s.spare.is_empty());
        s.handle_ack(now + 1, 3, &[]);
        assert_eq!(s.spare.len(), 3);
        // Acked: the next full block is written into one of their buffers,
        // a partial one is not.
        assert_eq!(s.write(b"mnopq"), 5);
        s.flush();
        let Some(Segment::Block { data, .. }) = s.poll_transmit(now + 1) else {
            panic!("a block")
        };
        assert_eq!(&data[..], b"mnop");
        assert!(sent.contains(&data.as_ptr()), "a fresh buffer after acks");
        assert_eq!(s.spare.len(), 2);
        let Some(Segment::Block { data: tail, .. }) = s.poll_transmit(now + 1) else {
            panic!("a block")
        };
        assert_eq!(&tail[..], b"q");
    }

    #[test]
    fn acks_are_coalesced_and_follow_consumption() {
        let now: Millis = 1_000;
        let mut r = ReliableStream::new(cfg(), now);
        for seq in 1..=5 {
            r.handle_block(now, seq, Bytes::from(vec![seq as u8; 4]), false);
        }
        // In-order arrivals wait briefly for the application to consume them...
        assert_eq!(r.poll_transmit(now), None);
        assert_eq!(r.poll_timeout(), Some(later(now, ARRIVAL_ACK_DELAY)));
        // ...then one ack covers all five: nothing consumed, all held.
        let after = later(now, ARRIVAL_ACK_DELAY);
        assert_eq!(ack(r.poll_transmit(after)), (0, vec![1, 2, 3, 4, 5], false));
        assert_eq!(r.poll_transmit(now), None);
        let mut buf = [0u8; 6];
        assert_eq!(r.read(&mut buf), 6);
        assert_eq!(buf, [1, 1, 1, 1, 2, 2]);
        assert_eq!(ack(r.poll_transmit(now)), (1, vec![2, 3, 4, 5], false));
        let c = r.read_chunk(100).unwrap();
        assert_eq!(&c[..], &[2, 2]);
        assert_eq!(r.readable(), 12);
        let mut all = Vec::new();
        while let Some(c) = r.read_chunk(3) {
            all.extend_from_slice(&c);
        }
        assert_eq!(all, [3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5]);
        assert_eq!(ack(r.poll_transmit(now)), (5, vec![], false));
        assert_eq!(r.poll_transmit(now), None);
    }

    #[test]
    fn a_consumed_blocks_ack_rides_on_the_next_block_or_waits_its_delay() {
        let now: Millis = 1_000;
        let with = ReliableConfig {
            ack_with_next_block: true,
            ..cfg()
        };
        let mut r = ReliableStream::new(with, now);
        // Ping-pong: the ack of the ping goes just before the pong.
        r.handle_block(now, 1, Bytes::from_static(b"ping"), false);
        let mut buf = [0u8; 4];
        assert_eq!(r.read(&mut buf), 4);
        assert_eq!(r.poll_transmit(now), None);
        assert!(r.ack_owed());
        assert_eq!(r.write(b"pong"), 4);
        assert_eq!(ack(r.poll_transmit(now)), (1, vec![], false));
        assert_eq!(block(r.poll_transmit(now)).0, 1);
        assert_eq!(r.poll_transmit(now), None);
        assert!(!r.ack_owed());
        // Two consumed blocks are acked at once (a sender streaming at us
        // gets its window back).
        for seq in [2, 3] {
            r.handle_block(now, seq, Bytes::from_static(b"data"), false);
        }
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf), 8);
        assert_eq!(ack(r.poll_transmit(now)), (3, vec![], false));
        // One consumed block with nothing to send: acked at its delay,
        // counted from when it was consumed if its arrival was acked.
        r.handle_block(now, 4, Bytes::from_static(b"more"), false);
        let t = later(now, ARRIVAL_ACK_DELAY);
        assert_eq!(ack(r.poll_transmit(t)), (3, vec![4], false));
        let mut buf = [0u8; 4];
        assert_eq!(r.read(&mut buf), 4);
        assert_eq!(r.poll_transmit(t), None);
        assert_eq!(r.poll_timeout(), Some(later(t, ARRIVAL_ACK_DELAY)));
        assert_eq!(r.poll_transmit(later(t, ARRIVAL_ACK_DELAY) - 1), None);
        assert_eq!(
            ack(r.poll_transmit(later(t, ARRIVAL_ACK_DELAY))),
            (4, vec![], false)
        );
        assert_eq!(r.stats().acks_sent, 4);
    }

    #[test]
    fn read_chunk_hands_out_the_received_buffer() {
        let now: Millis = 1_000;
        let mut r = ReliableStream::new(cfg(), now);
        let data = Bytes::from_static(b"wxyz");
        r.handle_block(now, 1, data.clone(), false);
        let c = r.read_chunk(1000).unwrap();
        assert_eq!(c.as_ptr(), data.as_ptr());
        assert_eq!(c.len(), 4);
    }

    #[test]
    fn out_of_order_blocks_are_sacked_and_delivered_in_order() {
        let now: Millis = 1_000;
        let mut r = ReliableStream::new(cfg(), now);
        r.handle_block(now, 3, Bytes::from_static(b"3333"), false);
        r.handle_block(now, 2, Bytes::from_static(b"2222"), false);
        assert_eq!(r.readable(), 0);
        assert_eq!(r.read_chunk(10), None);
        assert_eq!(ack(r.poll_transmit(now)), (0, vec![2, 3], false));
        r.handle_block(now, 1, Bytes::from_static(b"1111"), false);
        assert_eq!(r.readable(), 12);
        let mut buf = [0u8; 12];
        assert_eq!(r.read(&mut buf), 12);
        assert_eq!(&buf, b"111122223333");
        assert_eq!(ack(r.poll_transmit(now)), (3, vec![], false));
    }

    #[test]
    fn duplicates_are_acked_at_once_without_consumption() {
        let now: Millis = 1_000;
        let mut r = ReliableStream::new(cfg(), now);
        r.handle_block(now, 1, Bytes::from_static(b"aaaa"), false);
        let mut buf = [0u8; 4];
        r.read(&mut buf);
        assert_eq!(ack(r.poll_transmit(now)), (1, vec![], false));
        // Our ack was lost; the sender retransmits an already consumed block.
        r.handle_block(now, 1, Bytes::from_static(b"aaaa"), true);
        assert_eq!(ack(r.poll_transmit(now)), (1, vec![], false));
        // And a held-but-unconsumed one (its first arrival is acked after
        // the arrival delay, its duplicate at once).
        r.handle_block(now, 2, Bytes::from_static(b"bbbb"), false);
        assert_eq!(r.poll_transmit(now), None);
        let after = later(now, ARRIVAL_ACK_DELAY);
        assert_eq!(ack(r.poll_transmit(after)), (1, vec![2], false));
        r.handle_block(now, 2, Bytes::from_static(b"bbbb"), true);
        assert_eq!(ack(r.poll_transmit(now)), (1, vec![2], false));
        assert_eq!(r.stats().duplicate_blocks, 2);
        assert_eq!(r.stats().blocks_received, 2);
        assert_eq!(r.readable(), 4);
    }

    #[test]
    fn blocks_beyond_the_receive_buffer_are_dropped() {
        let now: Millis = 1_000;
        let mut r = ReliableStream::new(cfg(), now);
        r.handle_block(now, 9, Bytes::from_static(b"late"), false);
        assert_eq!(r.stats().blocks_dropped, 1);
        assert_eq!(r.poll_transmit(now), None);
        r.handle_block(now, 8, Bytes::from_static(b"okay"), false);
        assert_eq!(r.stats().blocks_dropped, 1);
        assert_eq!(ack(r.poll_transmit(now)), (0, vec![8], false));
    }

    #[test]
    fn sack_list_is_bounded_and_reports_new_arrivals_first() {
        let now: Millis = 1_000;
        let mut r = ReliableStream::new(
            ReliableConfig {
                recv_buffer_blocks: 300,
                ..cfg()
            },
            now,
        );
        for seq in 2..=200 {
            r.handle_block(now, seq, Bytes::from_static(b"x"), false);
        }
        let (cum, sacks, _) = ack(r.poll_transmit(now));
        assert_eq!((cum, sacks.len()), (0, MAX_SACKS));
        // A retransmission of a held block is reported even beyond the
        // lowest 100, so its sender stops retransmitting it.
        r.handle_block(now, 180, Bytes::from_static(b"x"), true);
        let (_, sacks, _) = ack(r.poll_transmit(now));
        assert_eq!(sacks.len(), MAX_SACKS);
        assert!(sacks.contains(&180));
        assert!(sacks.windows(2).all(|w| w[0] < w[1]));
    }

    fn sender(now: Millis) -> ReliableStream {
        let mut s = ReliableStream::new(
            ReliableConfig {
                initial_window: 8,
                ..cfg()
            },
            now,
        );
        s.write(&[0u8; 64]);
        s
    }

    #[test]
    fn fast_retransmit_after_three_sacks_once() {
        let t0: Millis = 1_000;
        let mut s = sender(t0);
        for want in 1..=8 {
            assert_eq!(block(s.poll_transmit(t0)).0, want);
        }
        assert_eq!(s.poll_transmit(t0), None);
        let t1 = t0 + ms(50);
        // Two SACKs above the gap: not yet.
        s.handle_ack(t1, 0, &[2, 3]);
        assert_eq!(s.stats().fast_retransmits, 0);
        s.handle_ack(t1, 0, &[2, 3, 4]);
        assert_eq!(s.stats().fast_retransmits, 1);
        // 8, +3 for the blocks SACKed, then halved.
        assert_eq!(s.stats().cwnd, 5);
        let (seq, _, retry) = block(s.poll_transmit(t1));
        assert_eq!((seq, retry), (1, true));
        // More SACKs for blocks sent before the retransmission: no repeat.
        s.handle_ack(t1, 0, &[2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(s.stats().blocks_retransmitted, 1);
        // Only new blocks (9..) go out now.
        let mut next = 9;
        while let Some(t) = s.poll_transmit(t1) {
            assert_eq!(block(Some(t)), (next, Bytes::from(vec![0u8; 4]), false));
            next += 1;
        }
        assert_eq!(next, 13);
        s.handle_ack(t1 + ms(50), 12, &[]);
        assert!(s.flight.is_empty());
        assert_eq!(s.undelivered, 0);
        assert_eq!(s.lost, 0);
    }

    #[test]
    fn rtt_estimate_and_karn() {
        let t0: Millis = 1_000;
        let mut s = sender(t0);
        block(s.poll_transmit(t0));
        s.handle_ack(t0 + ms(100), 1, &[]);
        assert_eq!(s.stats().srtt, Some(dur(100)));
        assert_eq!(s.stats().rttvar, dur(50));
        assert_eq!(s.stats().rto, dur(300));
        // A block acked only after a retransmission gives no sample.
        let t1 = t0 + ms(200);
        block(s.poll_transmit(t1));
        let rto_at = s.poll_timeout().unwrap();
        assert_eq!(rto_at, t1 + ms(300));
        s.handle_timeout(rto_at);
        assert_eq!(
            block(s.poll_transmit(rto_at)),
            (2, Bytes::from(vec![0u8; 4]), true)
        );
        s.handle_ack(rto_at + ms(5), 2, &[]);
        assert_eq!(s.stats().srtt, Some(dur(100)));
    }

    #[test]
    fn rto_backs_off_exponentially_and_halves_the_window() {
        let t0: Millis = 1_000;
        let mut s = sender(t0);
        for _ in 0..8 {
            block(s.poll_transmit(t0));
        }
        let mut t = t0;
        for (round, (gap, cwnd)) in [(1000, 4), (2000, 2), (4000, 2)].into_iter().enumerate() {
            let at = s.rto_deadline.unwrap();
            assert_eq!(at - t, ms(gap), "round {round}");
            // Keepalives may be due in between: they do not disturb the timer.
            while let Some(k) = s.poll_timeout().filter(|k| *k < at) {
                s.handle_timeout(k);
                assert!(matches!(
                    s.poll_transmit(k),
                    Some(Segment::Ack {
                        keepalive: true,
                        ..
                    })
                ));
            }
            s.handle_timeout(at);
            t = at;
            assert_eq!(s.stats().cwnd, cwnd);
            assert_eq!(s.stats().rto, dur(gap * 2));
            // Retransmissions are paced by the halved window.
            let mut n = 0;
            while let Some(Segment::Block { retry: true, .. }) = s.poll_transmit(t) {
                n += 1;
            }
            assert_eq!(n, cwnd);
        }
        assert_eq!(s.stats().timeouts, 3);
        assert_eq!(s.stats().blocks_retransmitted, 8);
    }

    #[test]
    fn window_grows_per_acked_block_up_to_max() {
        let t0: Millis = 1_000;
        let mut s = ReliableStream::new(
            ReliableConfig {
                block_size: 1,
                initial_window: 2,
                max_window: 10,
                max_send_buffer: 1000,
                ..ReliableConfig::default()
            },
            t0,
        );
        s.write(&[0u8; 1000]);
        let mut t = t0;
        let mut acked = 0;
        let mut windows = Vec::new();
        for _ in 0..8 {
            let mut sent = 0;
            while let Some(Segment::Block { seq, .. }) = s.poll_transmit(t) {
                acked = seq;
                sent += 1;
            }
            windows.push(sent);
            t += ms(10);
            s.handle_ack(t, acked, &[]);
        }
        assert_eq!(windows, [2, 4, 8, 10, 10, 10, 10, 10]);
    }

    #[test]
    fn keepalive_when_idle() {
        let t0: Millis = 1_000;
        let mut s = ReliableStream::new(cfg(), t0);
        assert_eq!(s.poll_transmit(t0), None);
        assert_eq!(s.poll_timeout(), Some(t0 + 2_000));
        assert_eq!(s.poll_transmit(t0 + ms(1999)), None);
        let t1 = t0 + 2_000;
        s.handle_timeout(t1);
        assert_eq!(ack(s.poll_transmit(t1)), (0, vec![], true));
        assert_eq!(s.poll_transmit(t1), None);
        assert_eq!(s.poll_timeout(), Some(t1 + 2_000));
        assert_eq!(s.stats().keepalives_sent, 1);
    }

    #[test]
    fn dead_peer_when_outstanding_data_is_never_acked() {
        let t0: Millis = 1_000;
        let mut s = sender(t0);
        block(s.poll_transmit(t0));
        let mut t;
        loop {
            let next = s.poll_timeout().unwrap();
            assert!(next <= t0 + 10_000);
            t = next;
            s.handle_timeout(t);
            while s.poll_transmit(t).is_some() {}
            if s.error().is_some() {
                break;
            }
        }
        assert_eq!(t, t0 + 10_000);
        assert_eq!(
            s.error(),
            Some(&ReliableError::DeadPeer(DeadPeerCause::NoAckProgress))
        );
        assert_eq!(s.write(b"x"), 0);
        assert_eq!(s.writable(), 0);
        assert!(s.write_bytes(Bytes::from_static(b"x")).is_err());
        assert_eq!(s.poll_transmit(t), None);
        // What was outstanding was never acknowledged: no close handshake
        // may start as if it had been.
        assert!(!s.all_acked());
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn ack_progress_postpones_dead_peer() {
        let t0: Millis = 1_000;
        let mut s = sender(t0);
        block(s.poll_transmit(t0));
        block(s.poll_transmit(t0));
        s.handle_ack(t0 + 9_000, 1, &[]);
        s.handle_timeout(t0 + 10_000);
        assert_eq!(s.error(), None);
        assert_eq!(s.poll_timeout().map(|t| t <= t0 + 19_000), Some(true));
        // A duplicate ack is no progress.
        s.handle_ack(t0 + 15_000, 1, &[]);
        s.handle_timeout(t0 + 19_000);
        assert!(s.error().is_some());
    }

    #[test]
    fn silence_kills_only_when_the_peer_sends_keepalives() {
        let t0: Millis = 1_000;
        let mut s = ReliableStream::new(cfg(), t0);
        let late = t0 + 60_000;
        s.handle_timeout(late);
        assert_eq!(s.error(), None);
        s.handle_keepalive(late);
        assert!(s.peer_sends_keepalives());
        s.handle_block(late + 5_000, 1, Bytes::from_static(b"abcd"), false);
        s.handle_timeout(late + 14_000);
        assert_eq!(s.error(), None);
        s.handle_timeout(late + 15_000);
        assert_eq!(
            s.error(),
            Some(&ReliableError::DeadPeer(DeadPeerCause::Silent))
        );
        // Data received before the failure is still readable, then the error.
        let mut buf = [0u8; 8];
        assert_eq!(s.read(&mut buf), 4);
        assert_eq!(s.read(&mut buf), 0);
        assert_eq!(s.read_chunk(4), None);
        assert!(s.error().is_some());
    }

    #[test]
    fn held_data_is_not_a_dead_peer() {
        // The receiver holds (SACKs) everything but its application does not
        // read: the sender stops at max_window and waits without failing.
        let t0: Millis = 1_000;
        let mut s = sender(t0);
        let mut sent = vec![];
        while let Some(Segment::Block { seq, .. }) = s.poll_transmit(t0) {
            sent.push(seq);
        }
        s.handle_ack(t0 + ms(10), 0, &sent);
        while let Some(Segment::Block { seq, .. }) = s.poll_transmit(t0 + ms(10)) {
            sent.push(seq);
        }
        s.handle_ack(t0 + ms(20), 0, &sent);
        assert_eq!(s.in_flight(), 16);
        assert!(s.all_acked() || s.writable() < 64);
        assert_eq!(s.poll_transmit(t0 + ms(20)), None);
        let t = t0 + 100_000;
        s.handle_timeout(t);
        assert_eq!(s.error(), None);
    }

    #[test]
    fn invalid_acks_are_ignored() {
        let t0: Millis = 1_000;
        let mut s = sender(t0);
        block(s.poll_transmit(t0));
        s.handle_ack(t0, 5, &[]);
        s.handle_ack(t0, 0, &[0, 7, u32::MAX]);
        assert_eq!(s.stats().invalid_acks, 1);
        assert_eq!(s.in_flight(), 1);
        assert!(!s.all_acked());
    }

    #[test]
    fn all_acked_tracks_unflushed_and_outstanding_data() {
        let t0: Millis = 1_000;
        let mut s = ReliableStream::new(cfg(), t0);
        assert!(s.all_acked());
        s.write(b"ab");
        assert!(!s.all_acked());
        s.flush();
        block(s.poll_transmit(t0));
        assert!(!s.all_acked());
        s.handle_ack(t0, 0, &[1]);
        assert!(s.all_acked());
        s.handle_ack(t0, 1, &[]);
        assert!(s.all_acked());
        assert_eq!(s.in_flight(), 0);
    }
}
