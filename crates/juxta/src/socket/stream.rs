//! The runtime half of stream mode ([`juxta_proto::socket::stream`]): a
//! socket between two Juxta peers on a compact connection sends its bytes
//! as plain compact messages, with credit-based flow control instead of
//! `jxtarel` blocks, acks and timers. Through Juxta relays (a routed
//! messenger whose first hop is compact) the same, with each data message
//! preceded by its byte offset (checked by the receiver) and the
//! messages taken from the route (their origin as the relays vouch for
//! it); relayed data is copied once into the frame (no borrowed write).
//!
//! Data path: `poll_write` takes up to [`MAX_DATA_CHUNK`] bytes (1 MiB
//! relayed, or where `max_message` is small) as one message and writes
//! its frame to the connection at once (`writev`, no task switch)
//! straight from the caller's buffer; only what the kernel does not take
//! now is copied, and a task finishes it while the next write waits (one
//! message in flight). When the connection is busy with
//! another sender, the bytes are copied once and a task sends them. Small
//! writes (4 KiB or less) are copied into the frame. Received messages
//! reach the socket on the connection's reader task and are queued as the
//! `Bytes` the decoder produced; `poll_read` copies them into the caller's
//! buffer.
//!
//! Stream frames: on a direct stream, each end gives its socket a number
//! in this peer's [`FrameTable`] and tells the other (the server in its
//! set-up response, the client in a stream message once the response had
//! one). Data then goes as a compact stream frame (a 3-byte header and
//! the bytes: no message, no address, no element) that the connection's
//! reader hands to the socket by that number, checking that the
//! connection's (proven) peer is the socket's. A peer that never
//! announces a number (an older Juxta) gets data messages, and a frame
//! that cannot be written now goes as a data message too: the receiver
//! takes both, in the connection's order.
//!
//! Errors: a reset by the peer, or the connection closing, fail reads and
//! writes with [`io::ErrorKind::ConnectionReset`]; a peer protocol error
//! (sending past its credit, data after its FIN) resets the stream and
//! fails them with [`io::ErrorKind::InvalidData`]; writes after
//! `shutdown`, or after the peer closed its socket, fail with
//! [`io::ErrorKind::BrokenPipe`].

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use juxta_proto::socket::stream::{
    self as proto, ResetCode, StreamError, StreamState, StreamStats, MAX_DATA_CHUNK,
};
use tokio::io::ReadBuf;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::endpoint::Messenger;
use crate::peer::Inner;
use crate::pipe::{InputPipe, PIPE_SERVICE};

/// Stands for the caller's bytes in a frame written straight from them
/// (see `Messenger::try_send_borrowed`); never sent itself. Zeroed
/// memory that is never touched, so it is never actually mapped.
fn placeholder(n: usize) -> &'static [u8] {
    static P: std::sync::OnceLock<Box<[u8]>> = std::sync::OnceLock::new();
    &P.get_or_init(|| vec![0u8; MAX_DATA_CHUNK].into_boxed_slice())[..n]
}

struct State {
    s: StreamState,
    read_waker: Option<Waker>,
    write_waker: Option<Waker>,
    /// The connection failed (closed, or a send failed): kind and reason.
    conn_error: Option<(io::ErrorKind, String)>,
    /// Control the driver must send (a direct send found the connection
    /// busy). Credit limits are absolute: only the latest matters.
    pending_grant: Option<u64>,
    pending_reset: Option<ResetCode>,
    pending_stop: bool,
    pending_fin: Option<u64>,
    /// The application dropped the socket; waiting for in-flight data
    /// before the FIN.
    dropped: bool,
    fin_queued: bool,
    /// Stream messages refused because they did not come straight from the
    /// socket's peer.
    foreign: u64,
    /// The socket's number in this peer's [`FrameTable`], when it takes
    /// stream frames.
    frames: Option<u32>,
    /// Our frame number, still to be announced to the peer: the direct
    /// send at the start found the connection busy, so the next data (or
    /// FIN) message carries it, ahead of its data on the connection.
    pending_frames: Option<u32>,
}

impl State {
    fn wake_all(&mut self) {
        if let Some(w) = self.read_waker.take() {
            w.wake();
        }
        if let Some(w) = self.write_waker.take() {
            w.wake();
        }
    }

    fn fail_conn(&mut self, kind: io::ErrorKind, why: String) {
        if self.conn_error.is_none() {
            self.conn_error = Some((kind, why));
        }
        self.wake_all();
    }

    fn read_err(&self) -> Option<io::Error> {
        if let Some(e) = self.s.read_error() {
            return Some(io::Error::new(e.io_kind(), e));
        }
        if self.s.fin_received() {
            // The peer ended its direction before the connection went:
            // what it sent is read to the end, then end of stream (a
            // peer that half-closes and then closes its connection at
            // once loses nothing; its reader saw "connection closed"
            // instead of the last bytes and the end).
            return None;
        }
        self.conn_error
            .as_ref()
            .map(|(k, why)| io::Error::new(*k, why.clone()))
    }

    fn write_err(&self) -> Option<io::Error> {
        if let Some(e) = self.s.write_error() {
            return Some(io::Error::new(e.io_kind(), e));
        }
        self.conn_error
            .as_ref()
            .map(|(k, why)| io::Error::new(*k, why.clone()))
    }
}

pub(super) struct Shared {
    st: Mutex<State>,
    messenger: Messenger,
    remote_pipe: String,
    remote: PeerId,
    wake_driver: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().expect("stream socket lock")
    }

    /// Sends a control message now if the connection is free, else leaves
    /// it to the driver (`stash` records it in the state).
    fn send_control(&self, msg: Message, stash: impl FnOnce(&mut State)) {
        match self
            .messenger
            .try_send(PIPE_SERVICE, Some(&self.remote_pipe), msg)
        {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => {
                stash(&mut self.lock());
                self.wake_driver.notify_one();
            }
            Err(e) => self
                .lock()
                .fail_conn(io::ErrorKind::ConnectionReset, e.to_string()),
        }
    }

    fn send_grant(&self, limit: u64) {
        self.send_control(Message::new().with(proto::credit_element(limit)), |st| {
            st.pending_grant = Some(st.pending_grant.unwrap_or(0).max(limit))
        });
    }

    fn send_reset(&self, code: ResetCode) {
        self.send_control(Message::new().with(proto::reset_element(code)), |st| {
            st.pending_reset = Some(code)
        });
    }

    /// Handles one message for the socket's pipe (on the connection's
    /// reader task).
    fn on_message(&self, d: juxta_proto::endpoint::Delivery) {
        let mut st = self.lock();
        // Straight from the socket's peer; on a relayed stream through the
        // route (the origin as the relays vouched for it: each checks its
        // edges' claims), the offsets guarding against a refused message.
        if (d.routed && !st.s.has_offsets()) || d.from != Some(self.remote) {
            st.foreign += 1;
            tracing::debug!(from = ?d.from, "stream socket message not from the socket's peer ignored");
            return;
        }
        self.apply(st, proto::items(&d.message));
    }

    /// Handles the data of a stream frame from `from` (a connection's
    /// proven peer; on the connection's reader task).
    fn on_frame(&self, from: PeerId, data: Bytes) {
        let mut st = self.lock();
        if from != self.remote {
            st.foreign += 1;
            tracing::debug!(%from, "stream frame not from the socket's peer ignored");
            return;
        }
        self.apply(st, std::iter::once(Ok(proto::Item::Data(data))));
    }

    /// Applies received items to the stream, wakes the reader and writer
    /// as they can go on, and resets the stream when the peer broke the
    /// protocol.
    fn apply(
        &self,
        mut st: std::sync::MutexGuard<'_, State>,
        items: impl Iterator<Item = Result<proto::Item, StreamError>>,
    ) {
        let mut reset = None;
        for it in items {
            let r = it.and_then(|item| st.s.handle(item));
            match r {
                Ok(()) => {}
                Err(StreamError::AfterReset) => break,
                Err(e) => {
                    tracing::info!(peer = %self.remote, error = %e, "stream socket reset: peer broke the protocol");
                    if !st.s.is_reset() {
                        st.s.reset(ResetCode::Protocol);
                    }
                    reset = Some(ResetCode::Protocol);
                    break;
                }
            }
        }
        let wake_r = st.s.readable() > 0 || st.s.at_eof() || st.s.is_reset();
        let wake_w = st.s.writable() > 0 || st.s.write_error().is_some();
        if wake_r {
            if let Some(w) = st.read_waker.take() {
                w.wake();
            }
        }
        if wake_w {
            if let Some(w) = st.write_waker.take() {
                w.wake();
            }
        }
        drop(st);
        if let Some(code) = reset {
            self.send_reset(code);
        }
    }
}

/// The sockets that take their data in compact stream frames, by the
/// number this peer gave each (announced to the peer in
/// [`proto::ELEM_FRAMES`]); a frame counts only from the socket's peer
/// ([`Shared::on_frame`]). Bounded ([`FrameTable::MAX`]); when full, new
/// sockets take data messages.
#[derive(Default)]
pub(crate) struct FrameTable {
    next: AtomicU32,
    map: RwLock<HashMap<u32, Weak<Shared>, juxta_proto::id::IdHashState>>,
}

impl FrameTable {
    /// Most sockets numbered at once.
    pub(crate) const MAX: usize = 1 << 16;

    /// Numbers `sh`; `None` when the table is full.
    fn register(&self, sh: &Arc<Shared>) -> Option<u32> {
        let mut map = self.map.write().expect("frame table lock");
        if map.len() >= Self::MAX {
            return None;
        }
        // Fewer than MAX numbers are taken: a free one is found within
        // MAX + 1 tries.
        loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            if let std::collections::hash_map::Entry::Vacant(v) = map.entry(n) {
                v.insert(Arc::downgrade(sh));
                return Some(n);
            }
        }
    }

    fn remove(&self, n: u32) {
        self.map.write().expect("frame table lock").remove(&n);
    }

    /// Hands a stream frame's data from `from` to socket `n`; `false` if no
    /// live socket has that number.
    pub(crate) fn deliver(&self, from: PeerId, n: u32, data: Bytes) -> bool {
        let sh = {
            let map = self.map.read().expect("frame table lock");
            map.get(&n).and_then(Weak::upgrade)
        };
        match sh {
            Some(sh) => {
                sh.on_frame(from, data);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
impl FrameTable {
    fn contains(&self, n: u32) -> bool {
        self.map.read().expect("frame table lock").contains_key(&n)
    }
}

/// How a stream socket takes part in stream frames
/// ([`StreamSocket::start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Frames {
    /// Neither way (a relayed stream, or a server that did not offer).
    Off,
    /// The server: number the socket, to be announced in the set-up
    /// response ([`StreamSocket::frames`]).
    Offer,
    /// The client of a server that announced `n`: send our data in frames
    /// `n`, number the socket and announce its number.
    Peer(u32),
}

struct Sink(Arc<Shared>);

impl crate::pipe::DirectSink for Sink {
    fn deliver(&self, d: juxta_proto::endpoint::Delivery) {
        self.0.on_message(d);
    }
}

/// A stream-mode socket (the application's handle).
pub(super) struct StreamSocket {
    shared: Arc<Shared>,
    /// A send the connection could not take at once, finished by a task;
    /// the next write (or flush/shutdown) waits for it.
    inflight: Option<JoinHandle<()>>,
    /// Memory for the copies of unsent bytes, reused once they are out.
    scratch: BytesMut,
    /// Largest data element this socket sends directly: [`MAX_DATA_CHUNK`],
    /// less where this peer's `max_message` (which bounds what it sends)
    /// is smaller; never below [`proto::MAX_RELAYED_CHUNK`].
    chunk: usize,
}

impl StreamSocket {
    /// Starts a stream socket: registers it for the messages of `local`
    /// (taking over those already queued on `input`) and spawns its driver.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        inner: &Arc<Inner>,
        messenger: Messenger,
        remote_pipe: String,
        local: &juxta_proto::advertisement::PipeAdvertisement,
        mut input: InputPipe,
        local_window: u64,
        peer_window: u64,
        relayed: bool,
        frames: Frames,
    ) -> StreamSocket {
        let remote = messenger.remote();
        let s = StreamState::new(local_window, peer_window);
        let frames = if relayed { Frames::Off } else { frames };
        let shared = Arc::new(Shared {
            st: Mutex::new(State {
                s: if relayed { s.with_offsets() } else { s },
                read_waker: None,
                write_waker: None,
                conn_error: None,
                pending_grant: None,
                pending_reset: None,
                pending_stop: false,
                pending_fin: None,
                dropped: false,
                fin_queued: false,
                foreign: 0,
                frames: None,
                pending_frames: None,
            }),
            messenger,
            remote_pipe,
            remote,
            wake_driver: Notify::new(),
        });
        let urn = local.id.to_string();
        inner
            .receivers
            .add_sink(urn.clone(), Arc::new(Sink(shared.clone())));
        if frames != Frames::Off {
            let n = inner.receivers.frames().register(&shared);
            let mut st = shared.lock();
            st.frames = n;
            if let Frames::Peer(theirs) = frames {
                st.s.set_peer_frames(theirs);
            }
        }
        while let Some(m) = input.try_recv() {
            shared.on_message(juxta_proto::endpoint::Delivery {
                vouched_in: None,
                group: None,
                to: Arc::new(juxta_proto::endpoint::ServiceAddress::new(
                    PIPE_SERVICE,
                    Some(&urn),
                )),
                from: m.from,
                message: m.message,
                routed: false,
                // Streams run on compact connections, whose peer proved
                // its ID in the handshake.
                proof: juxta_proto::wire::connection::Proof::Handshake,
            });
        }
        let announce = shared
            .lock()
            .frames
            .filter(|_| matches!(frames, Frames::Peer(_)));
        if let Some(n) = announce {
            // Ahead of any data if the connection is free now; else with
            // the first data (or FIN) message. A socket that never writes
            // then gets data messages, not frames.
            shared.send_control(Message::new().with(proto::frames_element(n)), |st| {
                st.pending_frames = Some(n)
            });
        }
        inner
            .tasks
            .spawn(drive(Arc::downgrade(inner), shared.clone(), urn, input));
        StreamSocket {
            shared,
            inflight: None,
            scratch: BytesMut::new(),
            chunk: super::data_piece(
                inner.cfg.connection.max_message,
                proto::MAX_RELAYED_CHUNK,
                MAX_DATA_CHUNK,
            ),
        }
    }

    /// The socket's number for stream frames, when it takes them.
    pub(super) fn frames(&self) -> Option<u32> {
        self.shared.lock().frames
    }

    /// Whether this socket's data goes out in stream frames (the peer
    /// announced a number).
    pub(super) fn sends_frames(&self) -> bool {
        self.shared.lock().s.peer_frames().is_some()
    }

    /// Counters of the stream.
    pub(super) fn stats(&self) -> StreamStats {
        self.shared.lock().s.stats().clone()
    }

    /// Messages refused because they did not come from the socket's peer.
    pub(super) fn foreign(&self) -> u64 {
        self.shared.lock().foreign
    }

    /// Aborts the stream: both sides' reads and writes fail with
    /// `ConnectionReset`.
    pub(super) fn abort(&mut self) {
        let fresh = self.shared.lock().s.reset(ResetCode::Abort);
        if fresh {
            self.shared.send_reset(ResetCode::Abort);
        }
        self.shared.lock().wake_all();
    }

    /// Waits for the in-flight send, if any.
    fn poll_inflight(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(h) = &mut self.inflight {
            if Pin::new(h).poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.inflight = None;
        }
        Poll::Ready(())
    }

    /// Hands `msg` to the connection: now if it is free, else through a
    /// task that the next write waits for.
    fn send(&mut self, msg: Message) -> io::Result<()> {
        let sh = &self.shared;
        match sh
            .messenger
            .try_send(PIPE_SERVICE, Some(&sh.remote_pipe), msg)
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(msg)) => {
                let sh = sh.clone();
                self.inflight = Some(tokio::spawn(async move {
                    if let Err(e) = sh
                        .messenger
                        .send(PIPE_SERVICE, Some(&sh.remote_pipe), msg)
                        .await
                    {
                        sh.lock()
                            .fail_conn(io::ErrorKind::ConnectionReset, e.to_string());
                    }
                }));
                Ok(())
            }
            Err(e) => {
                let mut st = sh.lock();
                st.fail_conn(io::ErrorKind::ConnectionReset, e.to_string());
                Err(st.write_err().expect("failed above"))
            }
        }
    }

    pub(super) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let mut st = self.shared.lock();
        if st.s.readable() > 0 {
            // Chunk by chunk, each copied into the caller's buffer outside
            // the lock (the connection's reader task delivers meanwhile)
            // and without initializing the buffer first.
            let mut grant = None;
            while buf.remaining() > 0 {
                let Some(chunk) = st.s.read_bytes(buf.remaining()) else {
                    break;
                };
                grant = st.s.poll_grant().or(grant);
                drop(st);
                buf.put_slice(&chunk);
                drop(chunk);
                st = self.shared.lock();
            }
            drop(st);
            if let Some(g) = grant {
                self.shared.send_grant(g);
            }
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = st.read_err() {
            return Poll::Ready(Err(e));
        }
        if st.s.at_eof() {
            return Poll::Ready(Ok(()));
        }
        st.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Like [`poll_read`](Self::poll_read), without copying: the next
    /// buffered chunk (up to `max` bytes), `None` at the end of the stream.
    pub(super) fn poll_read_bytes(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<io::Result<Option<Bytes>>> {
        let mut st = self.shared.lock();
        if let Some(b) = st.s.read_bytes(max) {
            let grant = st.s.poll_grant();
            drop(st);
            if let Some(g) = grant {
                self.shared.send_grant(g);
            }
            return Poll::Ready(Ok(Some(b)));
        }
        if let Some(e) = st.read_err() {
            return Poll::Ready(Err(e));
        }
        if st.s.at_eof() {
            return Poll::Ready(Ok(None));
        }
        st.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    pub(super) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.poll_inflight(cx).is_pending() {
            return Poll::Pending;
        }
        let mut st = self.shared.lock();
        if let Some(e) = st.write_err() {
            return Poll::Ready(Err(e));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let relayed = st.s.has_offsets();
        let most = if relayed {
            proto::MAX_RELAYED_CHUNK
        } else {
            self.chunk
        };
        let n = data.len().min(st.s.writable()).min(most);
        if n == 0 {
            st.write_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let offset = st.s.sent();
        st.s.on_sent(n);
        let frames = st.s.peer_frames();
        let announce = st.pending_frames.take();
        drop(st);
        let sh = &self.shared;
        if announce.is_some() {
            // The message path below, with the announcement.
        } else if let Some(f) = frames {
            // A stream frame straight from the caller's buffer when the
            // connection is free.
            match sh
                .messenger
                .try_send_stream(f, &data[..n], &mut self.scratch)
            {
                Ok(Ok(drain)) => {
                    self.inflight = drain;
                    return Poll::Ready(Ok(n));
                }
                Ok(Err(())) => {}
                Err(e) => {
                    let mut st = sh.lock();
                    st.fail_conn(io::ErrorKind::ConnectionReset, e.to_string());
                    return Poll::Ready(Err(st.write_err().expect("failed above")));
                }
            }
        } else if n > crate::endpoint::BORROW_MIN && !relayed {
            // Straight from the caller's buffer when the connection is free.
            let ph = placeholder(n);
            let msg = Message::new().with(proto::data_element(Bytes::from_static(ph)));
            match sh.messenger.try_send_borrowed(
                PIPE_SERVICE,
                Some(&sh.remote_pipe),
                msg,
                ph,
                &data[..n],
                &mut self.scratch,
            ) {
                Ok(Ok(drain)) => {
                    // A partly written frame: the next write waits until
                    // its rest is out, then writes from its caller's
                    // buffer again.
                    self.inflight = drain;
                    return Poll::Ready(Ok(n));
                }
                Ok(Err(_)) => {}
                Err(e) => {
                    let mut st = sh.lock();
                    st.fail_conn(io::ErrorKind::ConnectionReset, e.to_string());
                    return Poll::Ready(Err(st.write_err().expect("failed above")));
                }
            }
        }
        let chunk = &data[..n];
        self.scratch.clear();
        if !self.scratch.try_reclaim(n) {
            self.scratch = BytesMut::with_capacity(n);
        }
        self.scratch.extend_from_slice(chunk);
        let mut msg = Message::new();
        if let Some(n) = announce {
            msg.push(proto::frames_element(n));
        }
        if relayed {
            msg.push(proto::offset_element(offset));
        }
        msg.push(proto::data_element(self.scratch.split().freeze()));
        self.send(msg)?;
        Poll::Ready(Ok(n))
    }

    pub(super) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.poll_inflight(cx).is_pending() {
            return Poll::Pending;
        }
        match self.shared.lock().conn_error.as_ref() {
            Some((k, why)) => Poll::Ready(Err(io::Error::new(*k, why.clone()))),
            None => Poll::Ready(Ok(())),
        }
    }

    pub(super) fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.poll_inflight(cx).is_pending() {
            return Poll::Pending;
        }
        let mut st = self.shared.lock();
        if let Some((k, why)) = st.conn_error.as_ref() {
            return Poll::Ready(Err(io::Error::new(*k, why.clone())));
        }
        if let Some(e) = st.s.read_error() {
            return Poll::Ready(Err(io::Error::new(e.io_kind(), e)));
        }
        let Some(total) = st.s.fin() else {
            // FIN handed over already (or nothing to end).
            return Poll::Ready(Ok(()));
        };
        st.fin_queued = true;
        let mut msg = Message::new();
        if let Some(n) = st.pending_frames.take() {
            msg.push(proto::frames_element(n));
        }
        drop(st);
        msg.push(proto::fin_element(total));
        self.send(msg)?;
        if self.poll_inflight(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for StreamSocket {
    fn drop(&mut self) {
        let sh = self.shared.clone();
        let finish = move || {
            let mut st = sh.lock();
            st.dropped = true;
            if !st.s.is_reset() {
                if let Some(total) = st.s.fin() {
                    st.pending_fin = Some(total);
                }
                if !st.s.fin_received() {
                    // The peer's further writes fail (BrokenPipe).
                    st.pending_stop = true;
                }
            }
            drop(st);
            sh.wake_driver.notify_one();
        };
        match (self.inflight.take(), tokio::runtime::Handle::try_current()) {
            // The FIN goes after the data still being sent.
            (Some(h), Ok(rt)) => {
                rt.spawn(async move {
                    let _ = h.await;
                    finish();
                });
            }
            _ => finish(),
        }
    }
}

/// The driver: sends the control messages that could not be sent at once
/// (and the FIN/STOP of a dropped socket), and fails the socket when the
/// connection closes. Data never goes through it.
async fn drive(inner: Weak<Inner>, shared: Arc<Shared>, urn: String, _input: InputPipe) {
    let conn = shared.messenger.connection().clone();
    loop {
        let (msg, done) = {
            let mut st = shared.lock();
            let mut m = Message::new();
            if let Some(g) = st.pending_grant.take() {
                m.push(proto::credit_element(g));
            }
            if let Some(c) = st.pending_reset.take() {
                m.push(proto::reset_element(c));
            }
            if let Some(total) = st.pending_fin.take() {
                m.push(proto::fin_element(total));
            }
            if std::mem::take(&mut st.pending_stop) {
                m.push(proto::stop_element());
            }
            (m, st.dropped)
        };
        if !msg.elements.is_empty() {
            if let Err(e) = shared
                .messenger
                .send(PIPE_SERVICE, Some(&shared.remote_pipe), msg)
                .await
            {
                shared
                    .lock()
                    .fail_conn(io::ErrorKind::ConnectionReset, e.to_string());
            }
            continue;
        }
        if done || shared.lock().conn_error.is_some() {
            break;
        }
        tokio::select! {
            _ = shared.wake_driver.notified() => {}
            _ = conn.closed() => {
                shared.lock().fail_conn(
                    io::ErrorKind::ConnectionReset,
                    "connection to the peer closed".into(),
                );
                break;
            }
        }
    }
    if let Some(inner) = inner.upgrade() {
        inner.receivers.remove_sink(&urn);
        if let Some(n) = shared.lock().frames {
            inner.receivers.frames().remove(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::socket::test_peers::{pair, peer};
    use crate::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
    use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
    use juxta_proto::id::PipeId;

    const WAIT: Duration = Duration::from_secs(60);

    /// What a connection's reader does with a stream frame from its
    /// (proven) peer: only the socket's own peer reaches the socket; a
    /// number nobody holds is refused; a socket's number ends with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_frame_counts_only_from_its_sockets_peer_and_numbers_end_with_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let ((a, b), c) = tokio::join!(pair(&dir, 1024), peer(&dir, "c", false, 1024));
        let ad = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
        let mut server = JxtaServerSocket::bind(&a, &ad, SocketConfig::default()).unwrap();
        let accept = tokio::spawn(async move { server.accept().await.unwrap() });
        let mut client = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), SocketConfig::default())
            .await
            .unwrap();
        let mut s = tokio::time::timeout(WAIT, accept).await.unwrap().unwrap();
        let n = s.stream_frames().expect("the server's socket takes frames");
        let table = a.inner.receivers.frames();

        // Another peer naming the socket's number: counted, not delivered.
        assert!(table.deliver(c.peer_id(), n, Bytes::from_static(b"evil")));
        assert_eq!(s.stream_foreign(), Some(1));
        // A number no socket holds.
        assert!(!table.deliver(b.peer_id(), n.wrapping_add(1000), Bytes::from_static(b"x")));

        // The socket's own peer, through its connection: only its bytes.
        client.write_all(b"ok").await.unwrap();
        let mut got = [0u8; 2];
        tokio::time::timeout(WAIT, s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"ok");
        assert_eq!(s.stream_stats().unwrap().violations, 0);

        // Closed: its number goes once its driver has sent the FIN.
        drop(s);
        tokio::time::timeout(WAIT, async {
            while table.contains(n) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the closed socket's number is freed");
        assert!(!table.deliver(b.peer_id(), n, Bytes::from_static(b"late")));
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, client.read_to_end(&mut rest))
            .await
            .unwrap()
            .unwrap();
        assert!(rest.is_empty());
    }

    /// Frames past the credit granted reset that socket only (as data
    /// messages do): its reads fail with `InvalidData`, the peer's with
    /// `ConnectionReset`, and another socket between the same peers goes on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_past_the_credit_reset_only_their_socket() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = pair(&dir, 1024).await;
        let cfg = SocketConfig {
            stream_window: proto::MIN_WINDOW,
            ..SocketConfig::default()
        };
        let mut pairs = Vec::new();
        for _ in 0..2 {
            let ad = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
            let mut server = JxtaServerSocket::bind(&a, &ad, cfg.clone()).unwrap();
            let accept = tokio::spawn(async move { server.accept().await.unwrap() });
            let client = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg.clone())
                .await
                .unwrap();
            let s = tokio::time::timeout(WAIT, accept).await.unwrap().unwrap();
            pairs.push((s, client));
        }
        let (mut other, mut other_client) = pairs.pop().unwrap();
        let (mut victim, mut victim_client) = pairs.pop().unwrap();
        let n = victim.stream_frames().unwrap();
        // What a connection's reader hands over from B: more than granted.
        let over = Bytes::from(vec![1u8; proto::MIN_WINDOW as usize + 1]);
        assert!(a.inner.receivers.frames().deliver(b.peer_id(), n, over));
        let mut buf = [0u8; 8];
        let e = victim.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(victim.stream_stats().unwrap().violations, 1);
        let e = tokio::time::timeout(WAIT, victim_client.read(&mut buf))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
        // The other socket carries on, both ways.
        other_client.write_all(b"still").await.unwrap();
        let mut got = [0u8; 5];
        tokio::time::timeout(WAIT, other.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"still");
        other.write_all(b"here").await.unwrap();
        let mut got = [0u8; 4];
        tokio::time::timeout(WAIT, other_client.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"here");
    }
}
