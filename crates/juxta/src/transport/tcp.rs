//! The TCP transport: socket options, one vectored write per message, and
//! the per-connection reader task that drives the sans-IO
//! [`juxta_proto::wire::connection`] halves.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::BytesMut;
use juxta_proto::id::PeerId;
use juxta_proto::message::codec::EncodedMessage;
use juxta_proto::wire::connection::{
    ConnectionError, Inbound, InboundEvent, Outbound, Proof, Received, Role,
};
use juxta_proto::wire::proof::{Admit, Backlog, ProofGate};
use juxta_proto::wire::welcome::Welcome;
use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Mutex};

pub(crate) use crate::transport::limits::ConnSlot;

use crate::peer::Inner;

/// Most free space kept in the receive buffer before a read for small
/// frames (frames this large or larger get a buffer of their size).
const READ_RESERVE: usize = 64 * 1024;
/// Least free space reserved for small frames: a connection that only
/// receives small messages now and then (a leased edge's renewals) walks
/// through buffers this large, not [`READ_RESERVE`] (every page of which
/// its frames would touch, one by one: about 100 KB of RSS per idle
/// connection at a rendezvous holding 10,000 edges). A read that fills the
/// space doubles it, up to [`READ_RESERVE`]; small reads halve it again.
const READ_RESERVE_MIN: usize = 4 * 1024;
/// Most space reserved up front for the next frame, after frames this
/// large arrived (see `read_loop`): above a 4 MiB message and its header
/// (a stream socket's largest data message). A larger frame is read into
/// a buffer that grows, and a growth may copy what was read so far.
const READ_RESERVE_MAX: usize = 8 * 1024 * 1024;
/// Receive buffers kept for reuse once the frames read into them are
/// consumed (see `read_loop`): at most this many, at most
/// [`SPARE_BYTES`] together, and only while large frames keep coming.
///
/// An application that queues what it reads (`juxta receive` hands each
/// chunk to a disk writer and a hasher) holds a dozen buffers at a time:
/// with fewer spares than that, every frame landed in fresh memory (27,000
/// page faults per GB received, measured; see docs/benchmarks.md).
const SPARE_BUFFERS: usize = 16;
/// Most memory the spare receive buffers of one connection hold together.
const SPARE_BYTES: usize = 32 * 1024 * 1024;
/// Most slices handed to one `writev`.
const MAX_IOV: usize = 64;

/// Applies the socket options every connection gets: no Nagle delay,
/// keepalive, and (only if configured) fixed buffer sizes.
pub(crate) fn configure(stream: &TcpStream, buffer: Option<usize>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let sock = SockRef::from(stream);
    sock.set_tcp_keepalive(
        &TcpKeepalive::new()
            .with_time(Duration::from_secs(30))
            .with_interval(Duration::from_secs(10))
            .with_retries(3),
    )?;
    if let Some(b) = buffer {
        sock.set_send_buffer_size(b)?;
        sock.set_recv_buffer_size(b)?;
    }
    Ok(())
}

/// The `writev` slices for `chunks` from chunk `idx`, byte `off` on (at
/// most [`MAX_IOV`]).
fn io_slices<B: AsRef<[u8]>>(chunks: &[B], idx: usize, off: usize) -> Iov<'_> {
    let n = (chunks.len() - idx).min(MAX_IOV);
    let first = IoSlice::new(&chunks[idx].as_ref()[off..]);
    let rest = chunks[idx + 1..]
        .iter()
        .take(MAX_IOV - 1)
        .map(|c| IoSlice::new(c.as_ref()));
    let mut few = [IoSlice::new(&[]); FEW_IOV];
    if n <= FEW_IOV {
        few[0] = first;
        for (s, c) in few[1..].iter_mut().zip(rest) {
            *s = c;
        }
        return Iov {
            few,
            n,
            many: Vec::new(),
        };
    }
    let mut many = Vec::with_capacity(n);
    many.push(first);
    many.extend(rest);
    Iov { few, n: 0, many }
}

/// Slices on the stack for a frame of a few chunks (a small message is
/// one): no allocation per write.
const FEW_IOV: usize = 4;

/// The slices of one vectored write (see [`io_slices`]).
struct Iov<'a> {
    few: [IoSlice<'a>; FEW_IOV],
    n: usize,
    many: Vec<IoSlice<'a>>,
}

impl<'a> std::ops::Deref for Iov<'a> {
    type Target = [IoSlice<'a>];
    fn deref(&self) -> &[IoSlice<'a>] {
        if self.many.is_empty() {
            &self.few[..self.n]
        } else {
            &self.many
        }
    }
}

/// Moves the write position (`idx`, `off`) past `n` written bytes.
fn advance<B: AsRef<[u8]>>(chunks: &[B], idx: &mut usize, off: &mut usize, mut n: usize) {
    while n > 0 && *idx < chunks.len() {
        let avail = chunks[*idx].as_ref().len() - *off;
        if n >= avail {
            n -= avail;
            *idx += 1;
            *off = 0;
        } else {
            *off += n;
            n = 0;
        }
    }
}

/// Writes all chunks with as few `writev` calls as the kernel allows (one,
/// unless the socket buffer fills). Shared with the benchmark's TCP baseline
/// so both time the same write path.
pub async fn write_all_vectored<W, B>(w: &mut W, chunks: &[B]) -> io::Result<()>
where
    W: tokio::io::AsyncWrite + Unpin,
    B: AsRef<[u8]>,
{
    let mut idx = 0;
    let mut off = 0;
    while idx < chunks.len() {
        let n = {
            let iov = io_slices(chunks, idx, off);
            w.write_vectored(&iov).await?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        advance(chunks, &mut idx, &mut off, n);
    }
    Ok(())
}

/// Bytes of a streamed frame hashed before each write (see
/// [`WriterSide::write_streamed`]).
pub(crate) const STREAM_PIECE: usize = 256 * 1024;

fn signing_failed() -> io::Error {
    io::Error::other("CBJX signature failed")
}

async fn write_streamed_to(
    half: &OwnedWriteHalf,
    frame: juxta_proto::wire::connection::StreamedFrame,
    timeout: Duration,
) -> io::Result<()> {
    let mut trailer = frame.trailer;
    let mut batch: Vec<bytes::Bytes> = vec![frame.header];
    let mut batch_len = 0usize;
    for mut c in frame.body {
        while !c.is_empty() {
            let take = c.len().min(STREAM_PIECE - batch_len);
            let piece = c.split_to(take);
            trailer.update(&piece);
            batch.push(piece);
            batch_len += take;
            if batch_len == STREAM_PIECE {
                write_all_deadline(half, &batch, timeout).await?;
                batch.clear();
                batch_len = 0;
            }
        }
    }
    batch.push(trailer.finish().ok_or_else(signing_failed)?);
    write_all_deadline(half, &batch, timeout).await
}

/// Writes all chunks to a connection's socket like [`write_all_vectored`]
/// (one `writev` per message unless the socket buffer fills), failing with
/// [`io::ErrorKind::TimedOut`] once one wait for room in the socket buffer
/// lasts `timeout`: a remote that stops reading holds a writer at most that
/// long. No timer is armed unless the socket is full.
pub(crate) async fn write_all_deadline<B: AsRef<[u8]>>(
    half: &OwnedWriteHalf,
    chunks: &[B],
    timeout: Duration,
) -> io::Result<()> {
    let mut at = (0, 0);
    while let Some(blocked) = try_write_slices(half, chunks, at)? {
        match tokio::time::timeout(timeout, half.writable()).await {
            Ok(r) => r?,
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        }
        at = blocked;
    }
    Ok(())
}

/// Where a connection's frames go: the TCP socket, or (for an HTTP
/// session) the session's bounded queue. An enum, so the TCP hot path is
/// one predictable branch and no dynamic call.
pub(crate) enum Sink {
    /// The socket's write half.
    Tcp(OwnedWriteHalf),
    /// An HTTP session's outgoing queue.
    Http(crate::transport::http::HttpSink),
}

/// The sending side of a connection, behind one lock so that encoding
/// (which may intern names or switch framing) and writing stay in order.
pub(crate) struct WriterSide {
    pub(crate) half: Sink,
    pub(crate) out: Outbound,
    /// The unwritten end of a frame that [`WriterSide::try_write_now`]
    /// could not finish; written before anything else.
    pub(crate) backlog: Vec<bytes::Bytes>,
    /// How long a TCP write may make no progress
    /// ([`crate::PeerConfig::write_timeout`]).
    pub(crate) write_timeout: Duration,
    /// Set when a write timed out: the socket was shut down, every later
    /// write fails at once and the reader ends.
    pub(crate) stalled: bool,
}

impl WriterSide {
    /// A writer for `half` with no backlog.
    pub(crate) fn new(half: Sink, out: Outbound, write_timeout: Duration) -> WriterSide {
        WriterSide {
            half,
            out,
            backlog: Vec::new(),
            write_timeout,
            stalled: false,
        }
    }

    pub(crate) async fn write(&mut self, enc: &EncodedMessage) -> io::Result<()> {
        self.drain_backlog().await?;
        match &mut self.half {
            Sink::Tcp(half) => {
                let r = write_all_deadline(half, &enc.chunks, self.write_timeout).await;
                self.check_stall(r)
            }
            Sink::Http(q) => q.send(q.frame(enc)).await,
        }
    }

    /// Writes a frame whose CBJX trailer is computed as it is written
    /// ([`juxta_proto::wire::connection::Framed::Streamed`]): the message
    /// goes out in pieces of [`STREAM_PIECE`] bytes, each hashed just
    /// before its write, so the remote receives (and hashes) the first
    /// pieces while later ones are hashed here, and each piece is hashed
    /// while in cache. The RSA signature follows the last piece.
    pub(crate) async fn write_streamed(
        &mut self,
        frame: juxta_proto::wire::connection::StreamedFrame,
    ) -> io::Result<()> {
        self.drain_backlog().await?;
        let half = match &mut self.half {
            Sink::Tcp(half) => half,
            Sink::Http(_) => {
                let enc = frame.into_whole().ok_or_else(signing_failed)?;
                return self.write(&enc).await;
            }
        };
        let r = write_streamed_to(half, frame, self.write_timeout).await;
        self.check_stall(r)
    }

    pub(crate) async fn drain_backlog(&mut self) -> io::Result<()> {
        if !self.backlog.is_empty() {
            let rest = std::mem::take(&mut self.backlog);
            match &mut self.half {
                Sink::Tcp(half) => {
                    let r = write_all_deadline(half, &rest, self.write_timeout).await;
                    self.check_stall(r)?
                }
                Sink::Http(q) => q.send(rest).await?,
            }
        }
        Ok(())
    }

    /// After a TCP write: on a timeout, shuts the socket down both ways so
    /// the connection's reader ends (and counts it) and no one else waits
    /// on this socket.
    fn check_stall(&mut self, r: io::Result<()>) -> io::Result<()> {
        if let Err(e) = &r {
            if e.kind() == io::ErrorKind::TimedOut && !self.stalled {
                self.stalled = true;
                if let Sink::Tcp(half) = &self.half {
                    let _ = SockRef::from(half.as_ref()).shutdown(std::net::Shutdown::Both);
                }
            }
        }
        r
    }

    /// Shuts the sending side down (FIN on TCP; the queue closes for HTTP).
    pub(crate) async fn shutdown(&mut self) {
        match &mut self.half {
            Sink::Tcp(half) => {
                let _ = half.shutdown().await;
            }
            Sink::Http(q) => q.close(),
        }
    }

    /// Writes what the socket accepts without waiting; the rest of the
    /// frame goes to the backlog. Returns whether the frame was written
    /// whole. The backlog must be empty.
    pub(crate) fn try_write_now(&mut self, enc: &EncodedMessage) -> io::Result<bool> {
        debug_assert!(self.backlog.is_empty());
        let half = match &mut self.half {
            Sink::Tcp(half) => half,
            Sink::Http(q) => {
                return match q.try_send(q.frame(enc))? {
                    None => Ok(true),
                    Some(frame) => {
                        self.backlog = frame;
                        Ok(false)
                    }
                }
            }
        };
        let mut idx = 0;
        let mut off = 0;
        while idx < enc.chunks.len() {
            let r = {
                let iov = io_slices(&enc.chunks, idx, off);
                half.try_write_vectored(&iov)
            };
            let n = match r {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.backlog.push(enc.chunks[idx].slice(off..));
                    self.backlog.extend(enc.chunks[idx + 1..].iter().cloned());
                    return Ok(false);
                }
                Err(e) => return Err(e),
            };
            advance(&enc.chunks, &mut idx, &mut off, n);
        }
        Ok(true)
    }
}

impl WriterSide {
    /// [`WriterSide::try_write_now`] of a frame in which the chunk that is
    /// `placeholder` (compared by address and length) stands for
    /// `payload`: the bytes go to the socket straight from `payload`, and
    /// only what the socket does not take now is copied (to the backlog),
    /// into `scratch` (whose memory is reused once that copy is written).
    /// The backlog must be empty.
    pub(crate) fn try_write_now_borrowed(
        &mut self,
        enc: &EncodedMessage,
        placeholder: &[u8],
        payload: &[u8],
        scratch: &mut BytesMut,
    ) -> io::Result<bool> {
        debug_assert!(self.backlog.is_empty());
        let is_ph = |c: &bytes::Bytes| {
            c.len() == payload.len() && std::ptr::eq(c.as_ptr(), placeholder.as_ptr())
        };
        let half = match &mut self.half {
            Sink::Tcp(half) => half,
            Sink::Http(_) => {
                let mut owned = EncodedMessage::default();
                for c in &enc.chunks {
                    owned.push(if is_ph(c) {
                        bytes::Bytes::copy_from_slice(payload)
                    } else {
                        c.clone()
                    });
                }
                return self.try_write_now(&owned);
            }
        };
        let slices: Vec<&[u8]> = enc
            .chunks
            .iter()
            .map(|c| if is_ph(c) { payload } else { &c[..] })
            .collect();
        let Some((idx, off)) = try_write_slices(half, &slices, (0, 0))? else {
            return Ok(true);
        };
        for (i, c) in enc.chunks.iter().enumerate().skip(idx) {
            let from = if i == idx { off } else { 0 };
            self.backlog.push(if is_ph(c) {
                copy_rest(scratch, &payload[from..])
            } else {
                c.slice(from..)
            });
        }
        Ok(false)
    }

    /// Writes a compact stream frame, `header` then `payload`, straight
    /// from the caller's memory with one `writev` (TCP only: `Ok(None)`
    /// on an HTTP link, which sends messages instead). `Ok(Some(true))`:
    /// all written; `Ok(Some(false))`: the socket took part of it, and the
    /// rest is copied into the backlog (`payload`'s rest through
    /// `scratch`), to be drained before anything else is written.
    pub(crate) fn try_write_stream(
        &mut self,
        header: &[u8],
        payload: &[u8],
        scratch: &mut BytesMut,
    ) -> io::Result<Option<bool>> {
        debug_assert!(self.backlog.is_empty());
        let Sink::Tcp(half) = &mut self.half else {
            return Ok(None);
        };
        let Some((idx, off)) = try_write_slices(half, &[header, payload], (0, 0))? else {
            return Ok(Some(true));
        };
        let rest = if idx == 0 {
            self.backlog
                .push(bytes::Bytes::copy_from_slice(&header[off..]));
            payload
        } else {
            &payload[off..]
        };
        self.backlog.push(copy_rest(scratch, rest));
        Ok(Some(false))
    }
}

/// Writes `slices` from `(slice, offset)` `from` on to the socket with
/// `writev` until all are written (`None`) or it would block: then where
/// the unwritten bytes start.
fn try_write_slices<B: AsRef<[u8]>>(
    half: &OwnedWriteHalf,
    slices: &[B],
    (mut idx, mut off): (usize, usize),
) -> io::Result<Option<(usize, usize)>> {
    while idx < slices.len() {
        let r = {
            let iov = io_slices(slices, idx, off);
            half.try_write_vectored(&iov)
        };
        let n = match r {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Some((idx, off))),
            Err(e) => return Err(e),
        };
        advance(slices, &mut idx, &mut off, n);
    }
    Ok(None)
}

/// A copy of `rest` (the caller's bytes the socket did not take) in
/// `scratch`'s memory when it can be reused, for the backlog.
fn copy_rest(scratch: &mut BytesMut, rest: &[u8]) -> bytes::Bytes {
    scratch.clear();
    if !scratch.try_reclaim(rest.len()) {
        *scratch = BytesMut::with_capacity(rest.len());
    }
    scratch.extend_from_slice(rest);
    scratch.split().freeze()
}

/// A live connection to a remote peer.
pub struct Connection {
    pub(crate) id: u64,
    pub(crate) remote: PeerId,
    pub(crate) remote_welcome: Welcome,
    pub(crate) peer_addr: SocketAddr,
    pub(crate) writer: Mutex<WriterSide>,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) compact_rx: AtomicBool,
    pub(crate) compact_tx: AtomicBool,
    pub(crate) closed: AtomicBool,
    pub(crate) compact_ready: tokio::sync::Notify,
    /// Woken (all waiters) when the connection closes.
    pub(crate) closed_notify: tokio::sync::Notify,
    /// How far the remote proved its peer ID ([`Proof`] as a number).
    pub(crate) proof: AtomicU8,
    /// Service messages waiting for the socket (see
    /// [`crate::Messenger::post_raw`]).
    pub(crate) service: std::sync::Mutex<ServiceQueue>,
    /// The service addresses this connection sends to and receives for,
    /// in wire form ([`crate::transport::addresses`]).
    pub(crate) addresses: crate::transport::addresses::Addresses,
}

fn proof_to_u8(p: Proof) -> u8 {
    match p {
        Proof::Claimed => 0,
        Proof::Signature => 1,
        Proof::Handshake => 2,
    }
}

/// A connection's queue of service messages: filled while the socket is
/// busy, emptied by one drain task at a time.
#[derive(Default)]
pub(crate) struct ServiceQueue {
    pub(crate) items: std::collections::VecDeque<(
        Arc<juxta_proto::endpoint::ServiceAddress>,
        juxta_proto::message::Message,
    )>,
    /// A drain task runs (or a partial frame is being finished).
    pub(crate) draining: bool,
}

impl Connection {
    /// The remote peer's ID.
    pub fn remote(&self) -> PeerId {
        self.remote
    }
    /// Whether both directions use compact framing.
    pub fn is_compact(&self) -> bool {
        self.compact_rx.load(Ordering::Acquire) && self.compact_tx.load(Ordering::Acquire)
    }
    /// Bytes written to the socket so far.
    pub fn bytes_out(&self) -> u64 {
        self.bytes_out.load(Ordering::Relaxed)
    }
    /// Bytes read from the socket so far.
    pub fn bytes_in(&self) -> u64 {
        self.bytes_in.load(Ordering::Relaxed)
    }
    /// The remote's socket address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }
    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Starts the close handshake: writes what is queued (the backlog and
    /// the service queue, e.g. a lease's `Disconnect` posted just before),
    /// then shuts the sending side down (FIN on TCP; the session's queue
    /// closes on HTTP). The remote answers with its own FIN, which ends
    /// the connection's task. Returns whether that answer is worth waiting
    /// for (TCP).
    pub(crate) async fn begin_close(&self) -> bool {
        let mut w = self.writer.lock().await;
        let mut ok = w.drain_backlog().await.is_ok();
        while ok {
            let next = self
                .service
                .lock()
                .expect("service queue lock")
                .items
                .pop_front();
            let Some((to, msg)) = next else { break };
            if let Ok(enc) = w.out.encode(&to, msg) {
                ok = w.write(&enc).await.is_ok();
                if ok {
                    self.bytes_out.fetch_add(enc.len as u64, Ordering::Relaxed);
                }
            }
        }
        let tcp = matches!(w.half, Sink::Tcp(_));
        w.shutdown().await;
        tcp
    }

    /// Marks the connection closed and shuts its socket down both ways
    /// without waiting (its task is gone: a closed or dropped peer).
    pub(crate) fn abort_socket(&self) {
        self.closed.store(true, Ordering::Release);
        self.closed_notify.notify_waiters();
        if let Ok(w) = self.writer.try_lock() {
            if let Sink::Tcp(half) = &w.half {
                let _ = SockRef::from(half.as_ref()).shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Waits until the connection has closed.
    pub async fn closed(&self) {
        loop {
            let n = self.closed_notify.notified();
            if self.is_closed() {
                return;
            }
            n.await;
        }
    }
    /// The remote's welcome line.
    pub fn remote_welcome(&self) -> &Welcome {
        &self.remote_welcome
    }

    /// How far the remote proved the peer ID of [`Connection::remote`]:
    /// only proven connections are trusted for leases, SRDI ownership,
    /// relay forwarding and secure-pipe binding (docs/security.md).
    pub fn proof(&self) -> Proof {
        match self.proof.load(Ordering::Acquire) {
            0 => Proof::Claimed,
            1 => Proof::Signature,
            _ => Proof::Handshake,
        }
    }

    pub(crate) fn set_proof(&self, p: Proof) {
        self.proof.fetch_max(proof_to_u8(p), Ordering::AcqRel);
    }

    /// A snapshot of this connection for the public API.
    pub(crate) fn info(&self) -> crate::ConnectionInfo {
        crate::ConnectionInfo {
            id: self.id,
            peer: self.remote(),
            addr: self.peer_addr(),
            bytes_in: self.bytes_in(),
            bytes_out: self.bytes_out(),
            compact: self.is_compact(),
            proven: self.proof().is_proven(),
        }
    }
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum CloseReason {
    /// Protocol violation (logged with its type).
    #[error(transparent)]
    Protocol(#[from] ConnectionError),
    /// Socket error.
    #[error("io: {0}")]
    Io(#[from] io::Error),
    /// No welcome line in time.
    #[error("no welcome line within {0:?}")]
    WelcomeTimeout(Duration),
    /// A compact handshake the remote started did not complete in time.
    #[error("compact handshake not completed within {0:?}")]
    HandshakeTimeout(Duration),
    /// A frame's first bytes arrived but not the rest, in time (slowloris).
    #[error("incomplete frame for {0:?}")]
    FrameTimeout(Duration),
    /// An accepted connection sent nothing after the welcome, in time.
    #[error("no first message within {0:?} of the welcome")]
    FirstMessageTimeout(Duration),
    /// Nothing received for the idle timeout.
    #[error("nothing received for {0:?}")]
    IdleTimeout(Duration),
    /// A write made no progress in time (the remote stopped reading).
    #[error("a write made no progress for {0:?}")]
    WriteTimeout(Duration),
    /// The remote closed the socket.
    #[error("closed by remote")]
    Eof,
    /// The remote sent more than
    /// [`juxta_proto::wire::proof::MAX_HELD_MESSAGES`] messages or
    /// [`juxta_proto::wire::proof::MAX_HELD_BYTES`] bytes while its compact
    /// handshake was pending.
    #[error("too much traffic before the compact handshake completed")]
    HandshakeBacklog,
}

/// Runs a connection from its first byte to its end: sends our welcome,
/// waits (bounded) for the remote's, registers the connection, then reads
/// and dispatches until the socket closes or the remote misbehaves.
pub(crate) async fn run_connection(
    inner: Arc<Inner>,
    stream: TcpStream,
    role: Role,
    dest_addr: String,
    expected: Option<PeerId>,
    ready: Option<oneshot::Sender<Result<Arc<Connection>, String>>>,
    mut slot: ConnSlot,
) {
    let peer_addr = match stream.peer_addr() {
        Ok(a) => a,
        Err(e) => {
            if let Some(r) = ready {
                let _ = r.send(Err(e.to_string()));
            }
            return;
        }
    };
    let (mut read, write) = stream.into_split();
    let out = Outbound::new(inner.cfg.connection.clone(), role, inner.identity.clone());
    let welcome = out.welcome(&dest_addr, &inner.public_addr);
    let mut writer = WriterSide::new(Sink::Tcp(write), out, inner.cfg.write_timeout);
    let mut inbound = Inbound::new(inner.cfg.connection.clone())
        .with_local(inner.identity.peer_id())
        .with_local_address(&dest_addr)
        .expecting(expected);
    let mut rx = BytesMut::with_capacity(READ_RESERVE_MIN);

    // Phase 1: welcome lines (ours written, theirs read, our compact offer
    // written), all bounded in time together.
    let timeout = inner.cfg.welcome_timeout;
    let established = tokio::time::timeout(timeout, async {
        if let Sink::Tcp(half) = &writer.half {
            write_all_deadline(half, &[&welcome], writer.write_timeout).await?;
        }
        let w = read_welcome(&mut inbound, &mut rx, &mut read).await?;
        let offer = writer
            .out
            .on_remote_welcome(w.clone(), &mut rand::thread_rng())?;
        if let Some(offer) = offer {
            writer.write(&offer).await?;
        }
        Ok::<Welcome, CloseReason>(w)
    })
    .await
    .unwrap_or(Err(CloseReason::WelcomeTimeout(timeout)));
    let w = match established {
        Ok(w) => w,
        Err(e) => {
            // A reset or close before the welcome is what a peer that dies
            // (or a port scan) looks like: counted, and not a warning.
            // Anything else (a protocol violation, a timeout) is.
            if matches!(e, CloseReason::Io(_) | CloseReason::Eof) {
                tracing::debug!(%peer_addr, error = %e, "connection closed before it was established");
            } else {
                tracing::warn!(%peer_addr, error = %e, "connection closed before it was established");
            }
            if matches!(
                e,
                CloseReason::Protocol(ConnectionError::UnexpectedPeer { .. })
            ) {
                inner.stats.identity_refused.fetch_add(1, Ordering::Relaxed);
            }
            inner
                .stats
                .connections_failed
                .fetch_add(1, Ordering::Relaxed);
            count_close(&inner, &e);
            if let Some(r) = ready {
                let _ = r.send(Err(e.to_string()));
            }
            return;
        }
    };
    slot.established();
    let conn = Arc::new(Connection {
        id: inner.next_conn_id.fetch_add(1, Ordering::Relaxed),
        remote: w.peer_id,
        remote_welcome: w,
        peer_addr,
        writer: Mutex::new(writer),
        bytes_out: AtomicU64::new(0),
        bytes_in: AtomicU64::new(0),
        compact_rx: AtomicBool::new(false),
        compact_tx: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        closed_notify: tokio::sync::Notify::new(),
        compact_ready: tokio::sync::Notify::new(),
        proof: AtomicU8::new(0),
        service: Default::default(),
        addresses: Default::default(),
    });
    // A connection we dialled is registered at once (we chose the address,
    // and a welcome naming another peer than the one dialled was refused),
    // as a claimed identity that a proven connection replaces. One that
    // dialled us is registered only once its peer ID is proven: a fresh
    // CBJX-signed message naming us by a certificate deriving that ID, or
    // the compact handshake (see `Proof`).
    let mut registered = role == Role::Initiator;
    if registered {
        inner.register(&conn);
    }
    tracing::info!(remote = %conn.remote, %peer_addr, ?role, "connection established");
    if let Some(r) = ready {
        let _ = r.send(Ok(conn.clone()));
    }

    // Phase 2: read, decode, dispatch.
    let mut clock = ReadClock::new(&inner.cfg, role);
    let end = read_loop(
        &inner,
        &conn,
        &mut inbound,
        &mut rx,
        &mut read,
        &mut registered,
        &mut clock,
    )
    .await;
    conn.closed.store(true, Ordering::Release);
    conn.closed_notify.notify_waiters();
    conn.compact_ready.notify_waiters();
    inner.unregister(&conn);
    let end = {
        let mut w = conn.writer.lock().await;
        let end = if w.stalled {
            CloseReason::WriteTimeout(w.write_timeout)
        } else {
            end
        };
        w.shutdown().await;
        end
    };
    count_close(&inner, &end);
    match end {
        CloseReason::Eof => {
            tracing::info!(remote = %conn.remote, %peer_addr, "connection closed by remote")
        }
        e => {
            inner
                .stats
                .connections_failed
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(remote = %conn.remote, %peer_addr, error = %e, "connection closed")
        }
    }
    drop(slot);
}

/// Counts a connection this peer closed for a timeout in its [`Stats`]
/// counter.
///
/// [`Stats`]: crate::Stats
fn count_close(inner: &Inner, why: &CloseReason) {
    let s = &inner.stats;
    let c = match why {
        CloseReason::WelcomeTimeout(_) | CloseReason::HandshakeTimeout(_) => &s.handshake_timeouts,
        CloseReason::FrameTimeout(_) => &s.frame_timeouts,
        CloseReason::FirstMessageTimeout(_) => &s.first_message_timeouts,
        CloseReason::IdleTimeout(_) => &s.idle_timeouts,
        CloseReason::WriteTimeout(_) => &s.write_timeouts,
        _ => return,
    };
    c.fetch_add(1, Ordering::Relaxed);
}

/// The read deadlines of an established connection: a frame once begun
/// must arrive within `frame_timeout`; an accepted connection must send
/// its first frame within `first_message_timeout`; a compact handshake the
/// remote started must complete within `welcome_timeout`; optionally,
/// something must arrive every `idle_timeout`. Time spent not reading
/// (dispatching) does not count toward the frame rule, and no timer is
/// armed while none applies (the usual case between messages).
struct ReadClock {
    accepted: bool,
    since: Instant,
    frame_timeout: Duration,
    first_message_timeout: Duration,
    handshake_timeout: Duration,
    idle_timeout: Option<Duration>,
    /// Handshake steps received (messages are counted by the inbound half).
    handshakes: u64,
    /// Frames received when the incomplete frame now buffered was first
    /// seen, and when.
    partial: Option<(u64, Instant)>,
    /// When the remote started a compact handshake that is not complete.
    handshake_since: Option<Instant>,
}

impl ReadClock {
    fn new(cfg: &crate::PeerConfig, role: Role) -> ReadClock {
        ReadClock {
            accepted: role == Role::Acceptor,
            since: Instant::now(),
            frame_timeout: cfg.frame_timeout,
            first_message_timeout: cfg.first_message_timeout,
            handshake_timeout: cfg.welcome_timeout,
            idle_timeout: cfg.idle_timeout,
            handshakes: 0,
            partial: None,
            handshake_since: None,
        }
    }

    /// A handshake step was applied: `replied` if we answered it,
    /// `complete` once our inbound side switched to compact framing.
    fn on_handshake(&mut self, replied: bool, complete: bool) {
        self.handshakes += 1;
        if complete {
            self.handshake_since = None;
        } else if replied && self.accepted && self.handshake_since.is_none() {
            self.handshake_since = Some(Instant::now());
        }
    }

    /// The instant by which the next read must return, and why the
    /// connection closes if it does not; `None`: no limit.
    fn deadline(&mut self, messages: u64, buffered: bool) -> Option<(Instant, CloseReason)> {
        let frames = messages.saturating_add(self.handshakes);
        let mut best: Option<(Instant, CloseReason)> = None;
        let mut consider = |at: Instant, why: CloseReason| match &best {
            Some((b, _)) if *b <= at => {}
            _ => best = Some((at, why)),
        };
        if buffered {
            let start = match self.partial {
                Some((f, t)) if f == frames => t,
                _ => {
                    let t = Instant::now();
                    self.partial = Some((frames, t));
                    t
                }
            };
            consider(
                start + self.frame_timeout,
                CloseReason::FrameTimeout(self.frame_timeout),
            );
        } else {
            self.partial = None;
        }
        if self.accepted && frames == 0 {
            consider(
                self.since + self.first_message_timeout,
                CloseReason::FirstMessageTimeout(self.first_message_timeout),
            );
        }
        if let Some(t) = self.handshake_since {
            consider(
                t + self.handshake_timeout,
                CloseReason::HandshakeTimeout(self.handshake_timeout),
            );
        }
        if let Some(idle) = self.idle_timeout {
            consider(Instant::now() + idle, CloseReason::IdleTimeout(idle));
        }
        best
    }
}

async fn read_welcome(
    inbound: &mut Inbound,
    rx: &mut BytesMut,
    read: &mut OwnedReadHalf,
) -> Result<Welcome, CloseReason> {
    loop {
        if let Some(InboundEvent::Welcome(w)) = inbound.poll(rx)? {
            return Ok(w);
        }
        if read.read_buf(rx).await? == 0 {
            return Err(CloseReason::Eof);
        }
    }
}

/// Receive buffers kept for reuse by one connection's reader (see
/// [`SPARE_BUFFERS`]): each holds frames the application may still hold,
/// and is taken back once they are consumed.
#[derive(Default)]
struct Spares(Vec<BytesMut>);

impl Spares {
    /// A buffer with room for `want` bytes: the most recently kept one
    /// that is free again, else a fresh one. Most recent first, so the
    /// same few buffers come back while the application keeps up and the
    /// kernel copies into memory still in cache; taking the oldest free
    /// one cycled through every spare (more than the cache holds), and
    /// the copy into that cold memory measured up to 2-3x as long as into
    /// the one buffer a plain TCP reader reuses.
    fn take(&mut self, want: usize) -> BytesMut {
        match self.0.iter_mut().rposition(|b| b.try_reclaim(want)) {
            Some(i) => self.0.remove(i),
            None => BytesMut::with_capacity(want),
        }
    }

    /// Keeps `old`, dropping the oldest spares beyond [`SPARE_BUFFERS`]
    /// buffers or [`SPARE_BYTES`] of memory (the newest is always kept).
    fn keep(&mut self, old: BytesMut) {
        if self.0.len() >= SPARE_BUFFERS {
            self.0.remove(0);
        }
        self.0.push(old);
        while self.0.len() > 1 && self.0.iter().map(BytesMut::capacity).sum::<usize>() > SPARE_BYTES
        {
            self.0.remove(0);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Whether the rest of a partly read frame of `frame_len` bytes fits in
/// `rx`'s free space.
fn rest_fits(frame_len: Option<usize>, rx: &BytesMut) -> bool {
    frame_len.is_some_and(|total| total > rx.len() && total - rx.len() <= rx.capacity() - rx.len())
}

async fn read_loop(
    inner: &Arc<Inner>,
    conn: &Arc<Connection>,
    inbound: &mut Inbound,
    rx: &mut BytesMut,
    read: &mut OwnedReadHalf,
    registered: &mut bool,
    clock: &mut ReadClock,
) -> CloseReason {
    // When the claimed peer ID counts as proven, and what is held until
    // then (a Juxta initiator's first messages, before its confirm): the
    // proto's rules.
    let mut gate = ProofGate::new();
    // The size of the last frame: when the buffer is empty, this much (at
    // most READ_RESERVE_MAX) is reserved at once, so a stream of large
    // frames (a socket's data) is read in one allocation per frame instead
    // of growing (and copying) each in steps. Only a size the peer has
    // already sent in full is reserved ahead.
    let mut frame_hint = READ_RESERVE;
    // Buffers whose frames are still held by the application: once those
    // are consumed, the memory is taken back (warm, already mapped) rather
    // than allocated anew for every large frame.
    let mut spare = Spares::default();
    // Free space reserved for small frames (READ_RESERVE_MIN..=READ_RESERVE).
    let mut small_reserve = READ_RESERVE_MIN;
    loop {
        // JXTA framing: the next message may need an RSA verification
        // (CBJX); it waits for a crypto permit (see `Inner::crypto`).
        let gated = !rx.is_empty() && !conn.compact_rx.load(Ordering::Acquire);
        let permit = if gated {
            inner.crypto.acquire().await.ok()
        } else {
            None
        };
        let event = inbound.poll(rx);
        drop(permit);
        match event {
            Ok(Some(InboundEvent::Message(m))) => {
                let fresh = |tag: &[u8; 16]| inner.fresh_signature(conn, *tag);
                let (m, proved) = match gate.on_message(inbound, m, fresh) {
                    Ok(Admit::Deliver { message, proved }) => (message, proved),
                    Ok(Admit::Held) => continue,
                    Err(Backlog) => return CloseReason::HandshakeBacklog,
                };
                frame_hint = next_hint(m.wire_len, &mut spare, rx);
                if proved {
                    conn.set_proof(Proof::Signature);
                    tracing::debug!(remote = %conn.remote, "peer ID proven by signature");
                    // Re-registering lets a proven connection replace a
                    // claimed one for the same peer.
                    inner.register(conn);
                    *registered = true;
                }
                conn.bytes_in
                    .fetch_add(m.wire_len as u64, Ordering::Relaxed);
                inner.stats.count_in(m.wire_len);
                inner.dispatch(conn, m).await;
            }
            Ok(Some(InboundEvent::Handshake(h))) => {
                let mut w = conn.writer.lock().await;
                let outcome = match w.out.handle_handshake(h, &mut rand::thread_rng()) {
                    Ok(o) => o,
                    Err(e) => return e.into(),
                };
                let replied = outcome.reply.is_some();
                clock.on_handshake(replied, outcome.proven);
                // Held messages come out once the peer is proven; they are
                // delivered after the reply is written.
                let released = gate.on_handshake(inbound, &outcome);
                if let Some(reply) = outcome.reply {
                    if let Err(e) = w.write(&reply).await {
                        return e.into();
                    }
                }
                conn.compact_tx.store(w.out.is_compact(), Ordering::Release);
                drop(w);
                if outcome.proven {
                    if outcome.switch_inbound {
                        conn.compact_rx.store(true, Ordering::Release);
                    }
                    conn.set_proof(Proof::Handshake);
                    inner.register(conn);
                    *registered = true;
                    for m in released {
                        conn.bytes_in
                            .fetch_add(m.wire_len as u64, Ordering::Relaxed);
                        inner.stats.count_in(m.wire_len);
                        inner.dispatch(conn, m).await;
                    }
                }
                if conn.is_compact() {
                    tracing::debug!(remote = %conn.remote, "compact framing on");
                }
                if conn.is_compact() || outcome.proven {
                    // Waiters for compact framing learn it is settled.
                    conn.compact_ready.notify_waiters();
                }
            }
            Ok(Some(InboundEvent::Welcome(_))) => {}
            Ok(Some(InboundEvent::Stream {
                stream,
                data,
                wire_len,
            })) => {
                frame_hint = next_hint(wire_len, &mut spare, rx);
                conn.bytes_in.fetch_add(wire_len as u64, Ordering::Relaxed);
                inner.stats.count_in(wire_len);
                // Compact framing starts only after the handshake proved
                // the peer's ID; the stream must be one this peer opened
                // with that peer.
                let taken = conn.proof().is_proven()
                    && inner.receivers.frames().deliver(conn.remote, stream, data);
                if !taken {
                    let n = inner.stats.unknown_pipe.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        tracing::info!(remote = %conn.remote, stream, dropped = n, "stream frame for no stream of this peer dropped");
                    } else {
                        tracing::debug!(remote = %conn.remote, stream, "stream frame for no stream of this peer dropped");
                    }
                }
            }
            Ok(None) => {
                // Only after large frames: small ones keep reading into
                // the rest of the buffer (reserved below when it runs
                // low), not a fresh 64 KiB buffer per frame, which each
                // small frame got while the last one was still queued.
                if rx.is_empty()
                    && frame_hint > READ_RESERVE
                    && rx.capacity() < frame_hint
                    && !rx.try_reclaim(frame_hint)
                {
                    let fresh = spare.take(frame_hint);
                    spare.keep(std::mem::replace(rx, fresh));
                } else if rx.capacity() - rx.len() < small_reserve / 4
                    && !rest_fits(inbound.frame_len(rx), rx)
                {
                    // Low on space, and not merely at the tail of a frame
                    // whose space is already reserved: growing there would
                    // copy the whole frame read so far (a 4 MiB message was
                    // copied whenever a read ended in its last 16 KiB).
                    rx.reserve(small_reserve);
                }
                let room = rx.capacity() - rx.len();
                let r = match clock.deadline(inbound.received(), !rx.is_empty()) {
                    None => read.read_buf(rx).await,
                    Some((at, why)) => match tokio::time::timeout_at(at, read.read_buf(rx)).await {
                        Ok(r) => r,
                        Err(_) => return why,
                    },
                };
                match r {
                    Ok(0) => return CloseReason::Eof,
                    // Filled: more is coming than the space took.
                    Ok(n) if n >= room => small_reserve = (small_reserve * 2).min(READ_RESERVE),
                    Ok(n) if n.saturating_mul(8) < small_reserve => {
                        small_reserve = (small_reserve / 2).max(READ_RESERVE_MIN)
                    }
                    Ok(_) => {}
                    Err(e) => return e.into(),
                }
            }
            Err(e) => {
                if matches!(e, ConnectionError::CertificateChanged) {
                    inner.stats.identity_refused.fetch_add(1, Ordering::Relaxed);
                }
                return e.into();
            }
        }
    }
}

/// The buffer to reserve for the next frame after one of `wire_len`
/// bytes (see `frame_hint` in the reader); after small frames again, the
/// spare large buffers are let go.
fn next_hint(wire_len: usize, spare: &mut Spares, rx: &BytesMut) -> usize {
    let hint = wire_len.clamp(READ_RESERVE, READ_RESERVE_MAX);
    if hint == READ_RESERVE && !spare.is_empty() && rx.is_empty() {
        spare.clear();
    }
    hint
}

/// Dispatch target for a received message.
pub(crate) type Incoming = Received;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_of_a_frame_fits_only_when_its_space_is_reserved() {
        let mut rx = BytesMut::with_capacity(4096);
        rx.resize(4000, 0);
        // 96 bytes free.
        assert!(rest_fits(Some(4096), &rx));
        assert!(rest_fits(Some(4001), &rx));
        assert!(
            !rest_fits(Some(4097), &rx),
            "the frame is larger than the space"
        );
        assert!(
            !rest_fits(Some(4000), &rx),
            "the frame is complete: nothing to read into"
        );
        assert!(!rest_fits(None, &rx), "the header has not arrived");
    }

    /// A buffer of `n` bytes split off as a received frame would be.
    fn filled(n: usize) -> (BytesMut, bytes::Bytes) {
        let mut b = BytesMut::with_capacity(n);
        b.resize(n, 7);
        let frame = b.split().freeze();
        (b, frame)
    }

    #[test]
    fn spares_come_back_most_recent_first_once_their_frames_are_gone() {
        let mut s = Spares::default();
        let (a, fa) = filled(1 << 20);
        let (b, fb) = filled(1 << 20);
        let (c, fc) = filled(1 << 20);
        let (pa, pb) = (fa.as_ptr(), fb.as_ptr());
        s.keep(a);
        s.keep(b);
        s.keep(c);
        // Every frame still held: nothing to take back, a fresh buffer.
        let fresh = s.take(1 << 20);
        assert!(fresh.capacity() >= 1 << 20);
        assert_ne!(fresh.as_ptr(), pa);
        drop((fa, fb));
        // c is still held; of a and b, b was kept last.
        assert_eq!(s.take(1 << 20).as_ptr(), pb);
        assert_eq!(s.take(1 << 20).as_ptr(), pa);
        assert!(!s.is_empty(), "c is kept while its frame is held");
        drop(fc);
        s.clear();
        assert!(s.is_empty());
    }

    #[test]
    fn spares_stay_within_their_count_and_bytes() {
        let mut s = Spares::default();
        for _ in 0..SPARE_BUFFERS + 5 {
            s.keep(BytesMut::with_capacity(4096));
        }
        assert_eq!(s.0.len(), SPARE_BUFFERS);
        let mut s = Spares::default();
        let big = 8 << 20;
        for _ in 0..SPARE_BUFFERS {
            s.keep(BytesMut::with_capacity(big));
        }
        let total: usize = s.0.iter().map(BytesMut::capacity).sum();
        assert!(total <= SPARE_BYTES, "{total} bytes kept");
        assert_eq!(s.0.len(), SPARE_BYTES / big);
        // One buffer larger than the whole budget is still kept (the
        // newest always is), alone.
        s.keep(BytesMut::with_capacity(SPARE_BYTES + 1));
        assert_eq!(s.0.len(), 1);
    }
}
