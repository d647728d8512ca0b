//! JXTA sockets: a reliable, ordered byte stream between two peers over
//! pipes, wire-compatible with JXSE's `JxtaSocket`/`JxtaServerSocket`.
//!
//! Set-up follows JXSE: the client opens an ephemeral input pipe, resolves
//! the server's pipe, and sends a `JXTASOC` request naming its pipe; the
//! server answers from an ephemeral pipe of its own; data then flows pipe to
//! pipe in `jxtarel` blocks, acknowledged cumulatively with selective acks,
//! driven by the sans-IO [`juxta_proto::socket::reliable`] engine. The
//! window grows with the acks (it is not fixed at JXSE's 20 x 64 KB), so a
//! socket keeps up with the link without tuning.
//!
//! Between two Juxta peers on a direct compact connection (TCP, both ends
//! Juxta, compact framing agreed) the set-up also negotiates *stream mode*
//! (an element JXSE ignores, see [`juxta_proto::socket::stream`]): the
//! connection is already reliable and ordered, so data goes as plain
//! compact messages with credit-based flow control, a FIN and a reset, and
//! no `jxtarel` sequence numbers, acks or timers. [`JxtaSocket::mode`] says
//! which mode a socket runs. Through Juxta relays (a route whose first hop
//! is a compact connection, e.g. two edges that only dial out) stream mode
//! runs too, end to end: credit from the receiver to the sender through
//! the relays, and every data message carrying its byte offset, so a
//! message a relay refused (its per-edge queue full past its push-back)
//! resets the stream (`InvalidData`) rather than leaving a hole. JXSE
//! peers, JXTA-framed connections (a JXSE first hop) and HTTP paths keep
//! `jxtarel`.
//!
//! Errors in stream mode: a reset by the peer or the connection closing
//! fail reads and writes with [`io::ErrorKind::ConnectionReset`]; a peer
//! breaking the protocol (sending past its credit, data after its FIN)
//! resets the stream and fails them with [`io::ErrorKind::InvalidData`];
//! writes after `shutdown`, or after the peer dropped its socket, fail with
//! [`io::ErrorKind::BrokenPipe`].
//!
//! Secure sockets ([`SocketConfig::secure`], or a `JxtaUnicastSecure`
//! server pipe) run TLS 1.3 over the socket's byte stream, with the peer-ID
//! authentication of secure pipes: [`JxtaSocket::is_secure`], and see
//! `socket::secure` for the set-up and the errors (a bad record fails
//! that socket only, with [`io::ErrorKind::InvalidData`]).
//!
//! [`JxtaSocket`] implements tokio's `AsyncRead` and `AsyncWrite`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use juxta::{Peer, PeerConfig};
//! use juxta::proto::advertisement::{PipeAdvertisement, PipeType};
//! use juxta::proto::id::PipeId;
//! use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! let a = Peer::start(PeerConfig::new("/tmp/sa").listen("127.0.0.1:0".parse()?)).await?;
//! let b = Peer::start(PeerConfig::new("/tmp/sb")).await?;
//! let adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
//! let mut server = JxtaServerSocket::bind(&a, &adv, SocketConfig::default())?;
//! b.connect(a.local_addr().unwrap()).await?;
//! let client = tokio::spawn({
//!     let adv = adv.clone();
//!     let (peer, a_id) = (b.pipes(), a.peer_id());
//!     async move {
//!         let mut s = JxtaSocket::connect(&peer, &adv, a_id, SocketConfig::default()).await?;
//!         s.write_all(b"hello").await?;
//!         s.shutdown().await?;
//!         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//!     }
//! });
//! let mut s = server.accept().await?;
//! let mut got = Vec::new();
//! s.read_to_end(&mut got).await?;
//! assert_eq!(got, b"hello");
//! # client.await.unwrap().unwrap();
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use juxta_proto::socket::reliable::{self, Incoming, ReliableConfig, ReliableStream, Segment};
use juxta_proto::socket::setup::{
    classify, CloseSignal, ConnectRequest, ConnectResponse, SetupKind, SetupMessage,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::endpoint::Messenger;
use crate::peer::Inner;
use crate::pipe::{InputPipe, PipeError, PipeService, PIPE_SERVICE};
use crate::Peer;

mod secure;
pub(crate) mod stream;
mod unreliable;

pub use secure::{MAX_WRITE as SECURE_MAX_WRITE, PIPELINED_WRITE as SECURE_PIPELINED_WRITE};

pub use juxta_proto::socket::stream::StreamStats;

/// Socket settings. The defaults need no tuning: the window adapts to the
/// link.
#[derive(Debug, Clone)]
pub struct SocketConfig {
    /// How long `connect` may take, pipe resolution included (JXSE: 15 s).
    pub connect_timeout: Duration,
    /// A socket whose peer stops answering fails its reads and writes after
    /// this long.
    pub dead_peer_timeout: Duration,
    /// How long `shutdown` waits for the peer to acknowledge the close.
    pub close_timeout: Duration,
    /// Engine settings (block size, window bounds, timers). The block size
    /// and window are set per peer at connect time unless changed here.
    pub reliable: Option<ReliableConfig>,
    /// Offer (client) or accept (server) stream mode when the path to the
    /// peer is a compact connection, direct or to the first Juxta relay of
    /// a route (default `true`); `false` keeps `jxtarel` everywhere.
    pub stream: bool,
    /// Stream mode: bytes the peer may send ahead of this side's reads
    /// (the receive buffer's bound). Default
    /// [`juxta_proto::socket::stream::DEFAULT_WINDOW`] (16 MiB); clamped to
    /// 16 KiB..=256 MiB (16 KB was JXSE's default socket buffer, the
    /// smallest point of `juxta bench buffers`).
    pub stream_window: u64,
    /// Run TLS 1.3 over the socket (see [`JxtaSocket::is_secure`]): the
    /// client asks for it, the server requires it. Default `false`; a pipe
    /// advertisement of type `JxtaUnicastSecure` asks for it too, and a
    /// server accepts a client's request for it either way.
    pub secure: bool,
}

/// Which protocol a connected socket runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketMode {
    /// JXSE's `jxtarel` (blocks, acks, retransmission): towards JXSE peers
    /// and over JXTA-framed (JXSE relays included) or HTTP paths.
    Reliable,
    /// Juxta's stream mode over a compact connection, direct or through
    /// Juxta relays.
    Stream,
    /// JXSE's unreliable mode (`stream=false`): data elements with no
    /// acknowledgement or retransmission; accepted from JXSE clients that
    /// ask for it.
    Unreliable,
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            connect_timeout: Duration::from_secs(15),
            dead_peer_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(15),
            reliable: None,
            stream: true,
            stream_window: juxta_proto::socket::stream::DEFAULT_WINDOW,
            secure: false,
        }
    }
}

/// Errors opening or accepting sockets.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Pipe set-up failed (listener, send).
    #[error(transparent)]
    Pipe(#[from] PipeError),
    /// The binding step of [`JxtaSocket::connect`] failed: the peer did
    /// not answer for the server pipe within the connect timeout
    /// ([`PipeError::ResolveTimeout`]), or said it does not hold it
    /// ([`PipeError::NotFound`]).
    #[error("binding the server pipe: {0}")]
    Bind(PipeError),
    /// The route step of [`JxtaSocket::connect`] failed: no connection to
    /// `peer`, no known route, and no usable route answer from the peers
    /// asked (see [`crate::PeerError::NoRoute`]).
    #[error("no route to {peer} (tried: {})", crate::relay::describe(tried))]
    NoRoute {
        /// The peer.
        peer: PeerId,
        /// What was tried.
        tried: Vec<crate::relay::RouteAttempt>,
    },
    /// The server did not answer the connection request in time.
    #[error("no answer to the connection request within {0:?}")]
    ConnectTimeout(Duration),
    /// The server answered from a different peer (second) than the one
    /// asked (first).
    #[error("answer came from {}, expected {}", .0.1, .0.0)]
    WrongPeer(Box<(PeerId, PeerId)>),
    /// The server's answer could not be used.
    #[error("unusable connection answer: {0}")]
    BadAnswer(#[from] juxta_proto::socket::setup::SetupError),
    /// The server asked for JXSE's DESede encryption, which is unsupported.
    #[error("the server requires JXSE socket encryption (unsupported)")]
    EncryptionUnsupported,
    /// The server socket is closed.
    #[error("server socket closed")]
    Closed,
    /// A secure socket's TLS session failed: handshake refused, peer ID
    /// mismatch (the server's certificate is not the expected peer's, or
    /// the client's is not the connection's peer), bad record.
    #[error("secure socket: {0}")]
    Tls(#[from] crate::pipe::tls::TlsError),
    /// The secure socket's TLS handshake did not complete in time.
    #[error("TLS handshake not complete within {0:?}")]
    HandshakeTimeout(Duration),
    /// A secure socket was asked of a server that did not agree to TLS
    /// (a JXSE peer, or an old Juxta peer).
    #[error("the server did not agree to a secure socket")]
    SecureRefused,
    /// The server requires a secure socket; the client did not ask for one.
    #[error("the server requires a secure socket")]
    SecureRequired,
    /// Reading or writing the socket failed during the TLS handshake.
    #[error("socket IO during the TLS handshake: {0}")]
    Io(#[from] io::Error),
}

/// A JXTA server socket (`JxtaServerSocket`): accepts socket connections
/// on a pipe. Requests queue in the pipe's bounded buffer.
pub struct JxtaServerSocket {
    inner: Arc<Inner>,
    adv: PipeAdvertisement,
    input: InputPipe,
    cfg: SocketConfig,
    /// Only secure sockets are accepted.
    require_secure: bool,
    /// Secure sockets whose TLS handshake is under way.
    handshakes: tokio::task::JoinSet<Result<JxtaSocket, SocketError>>,
}

/// Most TLS handshakes a server socket runs at once; requests beyond are
/// refused (logged) until one finishes.
pub const MAX_PENDING_HANDSHAKES: usize = 64;

/// What `accept` woke up for.
enum Next {
    Request(
        Option<
            Box<(
                juxta_proto::socket::setup::ConnectRequest,
                Messenger,
                Message,
            )>,
        >,
    ),
    Handshake(Result<Result<JxtaSocket, SocketError>, tokio::task::JoinError>),
}

impl JxtaServerSocket {
    /// Binds a server socket to the unicast pipe `adv` on `peer`. With a
    /// `JxtaUnicastSecure` advertisement, or [`SocketConfig::secure`], it
    /// accepts secure sockets only (TLS 1.3, see [`JxtaSocket::is_secure`]);
    /// otherwise it accepts both kinds, as each client asks.
    pub fn bind(
        peer: &Peer,
        adv: &PipeAdvertisement,
        cfg: SocketConfig,
    ) -> Result<JxtaServerSocket, SocketError> {
        let require_secure = cfg.secure || adv.pipe_type == PipeType::UnicastSecure;
        // Requests travel in the clear either way: TLS runs inside the
        // socket, not on the server pipe.
        let input = peer.pipes().create_input_pipe(&unicast(adv))?;
        Ok(JxtaServerSocket {
            inner: peer.inner.clone(),
            adv: adv.clone(),
            input,
            cfg,
            require_secure,
            handshakes: tokio::task::JoinSet::new(),
        })
    }

    /// The server pipe's advertisement.
    pub fn advertisement(&self) -> &PipeAdvertisement {
        &self.adv
    }

    /// Waits for the next connection request and answers it. Requests
    /// that cannot be parsed or answered are logged and skipped. Secure
    /// sockets are returned once their TLS handshake completes; handshakes
    /// run concurrently (at most [`MAX_PENDING_HANDSHAKES`]), each bounded
    /// by [`SocketConfig::connect_timeout`], and failed ones are logged and
    /// skipped.
    pub async fn accept(&mut self) -> Result<JxtaSocket, SocketError> {
        loop {
            let next = tokio::select! {
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    Next::Handshake(done)
                }
                r = crate::pipe::next_setup_request(&self.inner, &mut self.input, SetupKind::Socket) => {
                    Next::Request(r.map(Box::new))
                }
            };
            let (req, messenger, raw) = match next {
                Next::Handshake(Ok(Ok(s))) => return Ok(s),
                Next::Handshake(Ok(Err(e))) => {
                    tracing::info!(error = %e, "secure socket handshake failed");
                    continue;
                }
                Next::Handshake(Err(e)) => {
                    tracing::info!(error = %e, "secure socket handshake task failed");
                    continue;
                }
                Next::Request(r) => *r.ok_or(SocketError::Closed)?,
            };
            let client = req.rem_peer.peer_id;
            let secure = secure::asks_secure(&raw);
            if self.require_secure && !secure {
                tracing::info!(%client, "plain socket request refused: this server socket is secure");
                continue;
            }
            if secure && self.handshakes.len() >= MAX_PENDING_HANDSHAKES {
                tracing::info!(%client, "secure socket request refused: too many handshakes under way");
                continue;
            }
            let local = crate::pipe::ephemeral_adv(&self.adv, "");
            let input = InputPipe::open(&self.inner, None, &local)?;
            if !req.reliable {
                // JXSE's unreliable mode (`stream=false`): data elements,
                // no blocks or acks. Not with TLS (a secure socket is a
                // stream).
                if secure {
                    tracing::info!(%client, "unreliable secure socket request refused");
                    continue;
                }
                let resp = ConnectResponse {
                    kind: SetupKind::Socket,
                    rem_pipe: local.clone(),
                    rem_peer: crate::pipe::local_peer_adv(&self.inner),
                    reliable: Some(false),
                    encrypt: Some(false),
                };
                let remote_pipe = req.req_pipe.id.to_string();
                let socket = JxtaSocket {
                    remote: client,
                    imp: Imp::Unreliable(Box::new(unreliable::UnreliableSocket::start(
                        &self.inner,
                        messenger.clone(),
                        remote_pipe.clone(),
                        input,
                    ))),
                };
                if let Err(e) = messenger
                    .send(PIPE_SERVICE, Some(&remote_pipe), resp.to_message())
                    .await
                {
                    tracing::info!(%client, error = %e, "socket answer not sent");
                    continue;
                }
                return Ok(socket);
            }
            let resp = ConnectResponse {
                kind: SetupKind::Socket,
                rem_pipe: local.clone(),
                rem_peer: crate::pipe::local_peer_adv(&self.inner),
                reliable: Some(true),
                encrypt: Some(false),
            };
            let remote_pipe = req.req_pipe.id.to_string();
            // Stream mode only if the client offered it and our own path
            // back to it is a compact connection, direct or to the first
            // relay of a route; relayed when either path is routed.
            let stream_window = juxta_proto::socket::stream::offered_window(&raw).filter(|_| {
                self.cfg.stream && messenger.first_hop_compact() && messenger.remote() == client
            });
            let relayed = stream_window.is_some()
                && (messenger.is_routed() || juxta_proto::socket::stream::is_relayed(&raw));
            let mut answer = resp.to_message();
            if stream_window.is_some() {
                answer.push(juxta_proto::socket::stream::offer_element(
                    self.cfg.stream_window,
                ));
            }
            if relayed {
                answer.push(juxta_proto::socket::stream::relayed_element());
            }
            if secure {
                answer.push(secure::secure_element());
            }
            // Ready to receive before the client hears of our pipe (and of
            // the number our stream frames carry).
            let socket = JxtaSocket::start(
                &self.inner,
                messenger.clone(),
                remote_pipe.clone(),
                &local,
                input,
                &self.cfg,
                stream_window.map(|w| (w, relayed, stream::Frames::Offer)),
            );
            if let Some(n) = socket.stream_frames() {
                answer.push(juxta_proto::socket::stream::frames_element(n));
            }
            if let Err(e) = messenger
                .send(PIPE_SERVICE, Some(&remote_pipe), answer)
                .await
            {
                tracing::info!(%client, error = %e, "socket answer not sent");
                continue;
            }
            if secure {
                let inner = self.inner.clone();
                let timeout = self.cfg.connect_timeout;
                self.handshakes
                    .spawn(async move { secure::handshake(&inner, socket, None, timeout).await });
                continue;
            }
            return Ok(socket);
        }
    }
}

struct State {
    engine: ReliableStream,
    /// The peer's clock, the engine's time.
    clock: juxta_proto::time::Clock,
    read_waker: Option<Waker>,
    write_waker: Option<Waker>,
    close_waker: Option<Waker>,
    /// The application asked to close; the driver closes once all is acked.
    closing: bool,
    /// Our close went out (everything we wrote was acknowledged first):
    /// our direction is finished, `shutdown` returns; reads go on until
    /// the peer closes too.
    close_sent: bool,
    /// Our close was acknowledged (or the stream is finished otherwise).
    closed: bool,
    /// The peer closed its side: reads end once the buffer is drained.
    /// Our closeACK waits until our application closes too (shutdown or
    /// drop), so it can still write after reading the peer's end (a
    /// half-close, as a secure socket's close_notify needs).
    remote_closed: bool,
    error: Option<io::ErrorKind>,
    error_text: String,
    /// The keepalive marker went out with our first message.
    marked: bool,
}

/// Messages that could not be written at once, in order; the driver
/// writes them. While it does, every sender queues behind it so the
/// stream stays in order on the wire.
#[derive(Default)]
struct SendQueue {
    deferred: VecDeque<Message>,
    driver_draining: bool,
}

struct Shared {
    state: Mutex<State>,
    wake_driver: Notify,
    messenger: Messenger,
    remote_pipe: String,
    /// The link frames messages as JXTA does (towards a possibly-JXSE
    /// peer; each message CBJX-signed when CBJX is on), not compactly.
    jxta_framed: bool,
    sendq: Mutex<SendQueue>,
    /// The driver sleeps without watching the timers (the socket has been
    /// idle a while): a write must wake it.
    driver_parked: AtomicBool,
}

impl Shared {
    /// Wakes the driver if it is parked (data is about to be in flight).
    fn unpark_driver(&self) {
        if self.driver_parked.swap(false, Ordering::AcqRel) {
            self.wake_driver.notify_one();
        }
    }

    /// Takes up to `max` transmits from the engine as messages.
    fn take_messages(&self, max: usize) -> Vec<Message> {
        let mut st = self.state.lock().expect("socket lock");
        let now = st.clock.now();
        let mut out: Vec<Message> = Vec::new();
        let mut pending_ack: Option<Message> = None;
        while out.len() < max {
            let Some(t) = st.engine.poll_transmit(now) else {
                break;
            };
            match t {
                Segment::Block { seq, data, retry } => {
                    // An ack and the block after it share one message
                    // (JXSE's JxtaSocket reads both from one message): one
                    // signature instead of two on a signed link.
                    let mut m = pending_ack.take().unwrap_or_default();
                    m.push(reliable::block_element(seq, data));
                    if retry {
                        m.push(reliable::retry_element());
                    }
                    if !st.marked {
                        m.push(reliable::keepalive_element());
                        st.marked = true;
                    }
                    out.push(m);
                }
                Segment::Ack {
                    cumulative, sacks, ..
                } => {
                    if let Some(a) = pending_ack.take() {
                        out.push(a);
                    }
                    st.marked = true;
                    // Every ack carries the keepalive marker: it tells a
                    // Juxta peer that we send keepalives, so it may declare
                    // us dead after a silence (JXSE ignores the element).
                    pending_ack = Some(
                        Message::new()
                            .with(reliable::ack_element(cumulative, &sacks))
                            .with(reliable::keepalive_element()),
                    );
                }
            }
        }
        if let Some(a) = pending_ack {
            out.push(a);
        }
        if let Some(e) = st.engine.error() {
            let why = e.to_string();
            fail(&mut st, io::ErrorKind::TimedOut, why);
        }
        // An ack the engine holds back for a block of ours to carry is
        // due on its timer: a parked driver must be watching it.
        let owed = st.engine.ack_owed();
        drop(st);
        if owed {
            self.unpark_driver();
        }
        out
    }

    /// Sends what the engine has ready from the calling (synchronous)
    /// context, without waiting: the application's task in `poll_write`,
    /// or the connection's reader. Whatever cannot be written now is left
    /// to the driver, and so is a large signed block ([`STREAMED_BLOCK`])
    /// and what follows it.
    fn pump_now(&self) {
        let mut q = self.sendq.lock().expect("send queue lock");
        if q.driver_draining || !q.deferred.is_empty() {
            drop(q);
            self.wake_driver.notify_one();
            return;
        }
        loop {
            let msgs = self.take_messages(16);
            if msgs.is_empty() {
                return;
            }
            let mut it = msgs.into_iter();
            while let Some(m) = it.next() {
                if self.jxta_framed && m.elements.iter().any(|e| e.data.len() >= STREAMED_BLOCK) {
                    q.deferred.push_back(m);
                    q.deferred.extend(it);
                    drop(q);
                    self.wake_driver.notify_one();
                    return;
                }
                match self
                    .messenger
                    .try_send(PIPE_SERVICE, Some(&self.remote_pipe), m)
                {
                    Ok(Ok(_)) => {}
                    Ok(Err(m)) => {
                        q.deferred.push_back(m);
                        q.deferred.extend(it);
                        drop(q);
                        self.wake_driver.notify_one();
                        return;
                    }
                    Err(e) => {
                        let mut st = self.state.lock().expect("socket lock");
                        fail(&mut st, io::ErrorKind::ConnectionReset, e.to_string());
                        return;
                    }
                }
            }
        }
    }

    /// The driver's way to send: deferred messages first, then the engine's,
    /// waiting for the connection as needed.
    async fn pump_async(&self) {
        loop {
            let next = {
                let mut q = self.sendq.lock().expect("send queue lock");
                q.driver_draining = true;
                q.deferred.pop_front()
            };
            let batch = match next {
                Some(m) => vec![m],
                None => self.take_messages(64),
            };
            if batch.is_empty() {
                let mut q = self.sendq.lock().expect("send queue lock");
                if q.deferred.is_empty() {
                    q.driver_draining = false;
                    return;
                }
                continue;
            }
            for m in batch {
                if let Err(e) = self
                    .messenger
                    .send(PIPE_SERVICE, Some(&self.remote_pipe), m)
                    .await
                {
                    let mut st = self.state.lock().expect("socket lock");
                    fail(&mut st, io::ErrorKind::ConnectionReset, e.to_string());
                    let mut q = self.sendq.lock().expect("send queue lock");
                    q.deferred.clear();
                    q.driver_draining = false;
                    return;
                }
            }
        }
    }

    /// Handles one message of the socket's pipe.
    fn on_message(&self, message: &Message) {
        {
            let mut st = self.state.lock().expect("socket lock");
            let now = st.clock.now();
            match classify(message) {
                Some(SetupMessage::Close(CloseSignal::Close)) => {
                    // The driver answers with a closeACK (also when we are
                    // closing too: both sides then finish on the other's
                    // close and ack, whichever comes first).
                    st.remote_closed = true;
                    wake_all(&mut st);
                    drop(st);
                    self.wake_driver.notify_one();
                    return;
                }
                Some(SetupMessage::Close(CloseSignal::CloseAck)) => {
                    st.closed = true;
                    st.remote_closed = true;
                    wake_all(&mut st);
                    drop(st);
                    self.wake_driver.notify_one();
                    return;
                }
                Some(_) => return,
                None => {}
            }
            match reliable::parse(message) {
                Ok(items) => {
                    for it in items {
                        match it {
                            Incoming::Block { seq, data, retry } => {
                                st.engine.handle_block(now, seq, data, retry)
                            }
                            Incoming::Ack { cumulative, sacks } => {
                                st.engine.handle_ack(now, cumulative, &sacks)
                            }
                        }
                    }
                    if reliable::is_keepalive(message) {
                        st.engine.handle_keepalive(now);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "bad socket message ignored");
                    return;
                }
            }
            if st.engine.readable() > 0 {
                if let Some(w) = st.read_waker.take() {
                    w.wake();
                }
            }
            if st.engine.writable() > 0 {
                if let Some(w) = st.write_waker.take() {
                    w.wake();
                }
            }
            if st.closing && st.engine.all_acked() {
                drop(st);
                self.wake_driver.notify_one();
            }
        }
        // Acks open the window: send what it now allows, from here.
        self.pump_now();
    }
}

struct Sink(Arc<Shared>);

impl crate::pipe::DirectSink for Sink {
    fn deliver(&self, d: juxta_proto::endpoint::Delivery) {
        self.0.on_message(&d.message);
    }
}

/// A connected JXTA socket: a reliable byte stream implementing
/// `AsyncRead` and `AsyncWrite`. `shutdown` performs JXTA's close
/// handshake; dropping the socket closes it in the background.
pub struct JxtaSocket {
    imp: Imp,
    remote: PeerId,
}

enum Imp {
    Reliable(RelHandle),
    Stream(stream::StreamSocket),
    Secure(Box<secure::SecureSocket>),
    /// JXSE's `stream=false` mode (accepted from JXSE clients).
    Unreliable(Box<unreliable::UnreliableSocket>),
}

/// `adv` as a plain unicast pipe (a secure socket's set-up is in the clear).
fn unicast(adv: &PipeAdvertisement) -> PipeAdvertisement {
    let mut a = adv.clone();
    if a.pipe_type == PipeType::UnicastSecure {
        a.pipe_type = PipeType::Unicast;
    }
    a
}

/// The application's handle on a `jxtarel` socket: dropping it closes the
/// socket in the background.
struct RelHandle(Arc<Shared>);

impl Drop for RelHandle {
    fn drop(&mut self) {
        let mut st = self.0.state.lock().expect("socket lock");
        if !st.closed {
            st.engine.flush();
            st.closing = true;
        }
        drop(st);
        // The driver sends what is left and finishes the close handshake
        // (bounded by the close timeout) on its own.
        self.0.wake_driver.notify_one();
    }
}

impl JxtaSocket {
    /// Connects to the server socket on pipe `adv` held by `peer`, as
    /// JXSE's `new JxtaSocket(group, peer, adv, ...)`: over a connection to
    /// `peer`, or through a route (its relay) found by asking the
    /// connected peers.
    ///
    /// Timeouts: route discovery and the pipe binding start together. A
    /// peer with no connection, no known route and no usable route answer
    /// within [`crate::PeerConfig::route_query_timeout`] (default 900 ms; at
    /// once with no connected peer to ask) fails with
    /// [`SocketError::NoRoute`]; a binding with no answer within
    /// `cfg.connect_timeout` fails with [`SocketError::Bind`]; the
    /// server's answer to the connection request must come within
    /// `cfg.connect_timeout` of the call ([`SocketError::ConnectTimeout`]).
    ///
    /// ```no_run
    /// # async fn demo(peer: juxta::Peer, adv: juxta_proto::advertisement::PipeAdvertisement, who: juxta_proto::id::PeerId) {
    /// use juxta::socket::{JxtaSocket, SocketConfig, SocketError};
    /// match JxtaSocket::connect(&peer.pipes(), &adv, who, SocketConfig::default()).await {
    ///     Ok(s) => println!("connected to {}", s.remote()),
    ///     Err(SocketError::NoRoute { tried, .. }) => println!("unreachable: {tried:?}"),
    ///     Err(SocketError::Bind(e)) => println!("nobody holds the pipe: {e}"),
    ///     Err(e) => println!("{e}"),
    /// }
    /// # }
    /// ```
    pub async fn connect(
        pipes: &PipeService,
        adv: &PipeAdvertisement,
        peer: PeerId,
        cfg: SocketConfig,
    ) -> Result<JxtaSocket, SocketError> {
        let inner = pipes.inner.clone();
        let deadline = tokio::time::Instant::now() + cfg.connect_timeout;
        let secure = cfg.secure || adv.pipe_type == PipeType::UnicastSecure;
        let adv = &unicast(adv);
        let local = crate::pipe::ephemeral_adv(adv, ".remote");
        let mut input = InputPipe::open(&inner, None, &local)?;
        // Route discovery and binding run in parallel: the binding query
        // goes out as soon as a route to `peer` is known (the rendezvous
        // answers for an edge behind a relay), and a peer nobody can reach
        // is reported as such (the route step) rather than as a binding
        // that timed out.
        let route = crate::relay::route::find_route(&inner, &peer, cfg.connect_timeout);
        let named = [peer];
        let bind = pipes.resolve(adv, &named, cfg.connect_timeout);
        let (route, bound) = tokio::join!(route, bind);
        let messenger = route.map_err(|e| SocketError::NoRoute {
            peer: e.peer,
            tried: e.tried,
        })?;
        let bound = match bound {
            Ok(b) => b,
            Err(PipeError::NoRoute { peer, tried }) => {
                return Err(SocketError::NoRoute { peer, tried })
            }
            Err(e) => return Err(SocketError::Bind(e)),
        };
        if bound != peer {
            return Err(SocketError::WrongPeer(Box::new((peer, bound))));
        }
        let req = ConnectRequest {
            kind: SetupKind::Socket,
            req_pipe: local.clone(),
            rem_peer: crate::pipe::local_peer_adv(&inner),
            reliable: true,
            connection_properties: None,
        };
        let server_pipe = adv.id.to_string();
        // Offer stream mode when the path is a compact connection, direct
        // or to the first relay of a route (relayed: data with offsets).
        let offer = cfg.stream && messenger.first_hop_compact();
        let mut msg = req.to_message();
        if offer {
            msg.push(juxta_proto::socket::stream::offer_element(
                cfg.stream_window,
            ));
            if messenger.is_routed() {
                msg.push(juxta_proto::socket::stream::relayed_element());
            }
        }
        if secure {
            msg.push(secure::secure_element());
        }
        messenger
            .send(PIPE_SERVICE, Some(&server_pipe), msg)
            .await
            .map_err(PipeError::from)?;
        let (resp, stream_window, agreed) = loop {
            let m = tokio::time::timeout_at(deadline, input.recv())
                .await
                .map_err(|_| SocketError::ConnectTimeout(cfg.connect_timeout))?
                .ok_or(SocketError::Closed)?;
            match classify(&m.message) {
                Some(SetupMessage::Response) => {
                    let w = juxta_proto::socket::stream::offered_window(&m.message)
                        .filter(|_| offer && messenger.first_hop_compact())
                        .map(|w| {
                            let relayed = messenger.is_routed()
                                || juxta_proto::socket::stream::is_relayed(&m.message);
                            // A server that numbered its socket takes
                            // stream frames (and so understands ours).
                            let frames = match juxta_proto::socket::stream::frames_of(&m.message) {
                                Some(n) => stream::Frames::Peer(n),
                                None => stream::Frames::Off,
                            };
                            (w, relayed, frames)
                        });
                    break (
                        ConnectResponse::from_message(&m.message)?,
                        w,
                        secure::asks_secure(&m.message),
                    );
                }
                _ => continue,
            }
        };
        if resp.rem_peer.peer_id != bound {
            return Err(SocketError::WrongPeer(Box::new((
                bound,
                resp.rem_peer.peer_id,
            ))));
        }
        if resp.encrypt == Some(true) {
            return Err(SocketError::EncryptionUnsupported);
        }
        if secure && !agreed {
            return Err(SocketError::SecureRefused);
        }
        let plain = JxtaSocket::start(
            &inner,
            messenger,
            resp.rem_pipe.id.to_string(),
            &local,
            input,
            &cfg,
            stream_window,
        );
        if !secure {
            return Ok(plain);
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        secure::handshake(&inner, plain, Some(bound), left).await
    }

    /// Whether the socket runs TLS 1.3 (see [`SocketConfig::secure`]):
    /// its bytes are encrypted and authenticated, and [`remote`](Self::remote)
    /// was proven by the peer's certificate (the client expected that peer
    /// ID; the server checked that the client's certificate derives the
    /// peer at the other end of the connection).
    pub fn is_secure(&self) -> bool {
        matches!(self.imp, Imp::Secure(_))
    }

    /// The plain socket under a secure one, or this one.
    fn plain(&self) -> Option<&JxtaSocket> {
        match &self.imp {
            Imp::Secure(s) => s.plain(),
            _ => Some(self),
        }
    }

    /// Like `poll_read`, without copying where the mode allows (stream
    /// mode hands over its received chunks); `None` at the end.
    fn poll_read_bytes(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<io::Result<Option<bytes::Bytes>>> {
        match &mut self.imp {
            Imp::Stream(s) => s.poll_read_bytes(cx, max),
            _ => {
                let mut v = vec![0u8; max.min(256 * 1024)];
                let mut rb = ReadBuf::new(&mut v);
                std::task::ready!(Pin::new(&mut *self).poll_read(cx, &mut rb))?;
                let n = rb.filled().len();
                if n == 0 {
                    return Poll::Ready(Ok(None));
                }
                v.truncate(n);
                Poll::Ready(Ok(Some(bytes::Bytes::from(v))))
            }
        }
    }

    /// Reads the next received bytes (at most `max`, and at least one
    /// unless `max` is 0) as a [`bytes::Bytes`] without copying them where
    /// the mode allows: in stream mode this is the buffer the connection
    /// read the data into, handed over as it is (the other modes copy).
    /// `Ok(None)` at the end of the stream. For bulk receivers that pass
    /// the data on (to a file, a hash, another task) instead of into a
    /// buffer of their own.
    ///
    /// ```no_run
    /// # async fn demo(mut s: juxta::socket::JxtaSocket) -> std::io::Result<()> {
    /// let mut total = 0;
    /// while let Some(chunk) = s.read_chunk(1 << 20).await? {
    ///     total += chunk.len();
    /// }
    /// # let _ = total; Ok(()) }
    /// ```
    pub async fn read_chunk(&mut self, max: usize) -> io::Result<Option<bytes::Bytes>> {
        if max == 0 {
            return Ok(Some(bytes::Bytes::new()));
        }
        std::future::poll_fn(|cx| self.poll_read_bytes(cx, max)).await
    }

    /// The peer at the other end.
    pub fn remote(&self) -> PeerId {
        self.remote
    }

    /// Which protocol the socket runs: [`SocketMode::Stream`] between two
    /// Juxta peers on a compact connection (direct, or to the first Juxta
    /// relay of the route), else
    /// [`SocketMode::Reliable`] (`jxtarel`).
    pub fn mode(&self) -> SocketMode {
        match &self.imp {
            Imp::Reliable(_) => SocketMode::Reliable,
            Imp::Stream(_) => SocketMode::Stream,
            Imp::Unreliable(_) => SocketMode::Unreliable,
            Imp::Secure(s) => s.plain().map_or(SocketMode::Stream, |p| p.mode()),
        }
    }

    /// `jxtarel` engine counters (blocks, retransmissions, RTT estimate);
    /// all zero in stream mode.
    pub fn stats(&self) -> reliable::ReliableStats {
        let Some(this) = self.plain() else {
            return reliable::ReliableStats::default();
        };
        match &this.imp {
            Imp::Reliable(h) => {
                h.0.state
                    .lock()
                    .expect("socket lock")
                    .engine
                    .stats()
                    .clone()
            }
            _ => reliable::ReliableStats::default(),
        }
    }

    /// Stream-mode counters (credit grants, refusals, protocol violations
    /// by the peer); `None` in `jxtarel` mode.
    pub fn stream_stats(&self) -> Option<StreamStats> {
        match &self.plain()?.imp {
            Imp::Stream(s) => Some(s.stats()),
            _ => None,
        }
    }

    /// The number this socket's stream frames carry here, when it takes
    /// them (stream mode, direct).
    fn stream_frames(&self) -> Option<u32> {
        match &self.imp {
            Imp::Stream(s) => s.frames(),
            _ => None,
        }
    }

    /// Stream mode: whether this socket's data goes out in compact stream
    /// frames (both ends are Juxta peers that agreed on them on a direct
    /// connection); `false` for data messages or in `jxtarel` mode.
    pub fn sends_stream_frames(&self) -> bool {
        match &self.plain().map(|p| &p.imp) {
            Some(Imp::Stream(s)) => s.sends_frames(),
            _ => false,
        }
    }

    /// Stream mode: messages for this socket refused because they did not
    /// come straight from its peer; `None` in `jxtarel` mode.
    pub fn stream_foreign(&self) -> Option<u64> {
        match &self.plain()?.imp {
            Imp::Stream(s) => Some(s.foreign()),
            _ => None,
        }
    }

    /// Aborts a stream-mode socket: reads and writes fail here and at the
    /// peer with [`io::ErrorKind::ConnectionReset`]. A `jxtarel` socket
    /// has no abort (JXSE has none): this closes it like a drop.
    pub fn abort(self) {
        match self.imp {
            Imp::Stream(mut s) => s.abort(),
            Imp::Secure(mut s) => s.abort(),
            Imp::Reliable(_) | Imp::Unreliable(_) => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        inner: &Arc<Inner>,
        messenger: Messenger,
        remote_pipe: String,
        local: &PipeAdvertisement,
        input: InputPipe,
        cfg: &SocketConfig,
        stream_window: Option<(u64, bool, stream::Frames)>,
    ) -> JxtaSocket {
        let remote = messenger.remote();
        if let Some((peer_window, relayed, frames)) = stream_window {
            let s = stream::StreamSocket::start(
                inner,
                messenger,
                remote_pipe,
                local,
                input,
                cfg.stream_window,
                peer_window,
                relayed,
                frames,
            );
            return JxtaSocket {
                imp: Imp::Stream(s),
                remote,
            };
        }
        JxtaSocket::start_reliable(inner, messenger, remote_pipe, local, input, cfg)
    }

    fn start_reliable(
        inner: &Arc<Inner>,
        messenger: Messenger,
        remote_pipe: String,
        local: &PipeAdvertisement,
        mut input: InputPipe,
        cfg: &SocketConfig,
    ) -> JxtaSocket {
        let compact = messenger.is_compact();
        let rcfg = cfg.reliable.clone().unwrap_or_else(|| {
            let mut r = if compact {
                ReliableConfig::default()
            } else {
                // Possibly a JXSE peer: stay within its window and queue.
                let mut r = ReliableConfig::jxse_peer();
                if inner.cfg.connection.cbjx && !messenger.is_routed() {
                    r.block_size =
                        data_piece(inner.cfg.connection.max_message, 64 * 1024, SIGNED_BLOCK);
                    // No more in flight than JxtaSocket's 20 blocks of
                    // 256 KiB.
                    r.max_window = u32::try_from(SIGNED_IN_FLIGHT / r.block_size)
                        .unwrap_or(u32::MAX)
                        .clamp(4, r.max_window);
                }
                r
            };
            r.dead_peer_timeout = cfg.dead_peer_timeout;
            // The driver wakes for the engine's deadlines and an ack rides
            // on the block after it: one message (one CBJX signature on a
            // signed link) instead of two per round trip.
            r.ack_with_next_block = true;
            r
        });
        let remote = messenger.remote();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                engine: ReliableStream::new(rcfg, inner.clock.now()),
                clock: inner.clock,
                read_waker: None,
                write_waker: None,
                close_waker: None,
                closing: false,
                close_sent: false,
                closed: false,
                remote_closed: false,
                error: None,
                error_text: String::new(),
                marked: false,
            }),
            wake_driver: Notify::new(),
            messenger,
            remote_pipe,
            jxta_framed: !compact,
            sendq: Mutex::new(SendQueue::default()),
            driver_parked: AtomicBool::new(false),
        });
        // From now on the connection's reader hands this pipe's messages
        // straight to the engine; take over any that queued before.
        let urn = local.id.to_string();
        inner
            .receivers
            .add_sink(urn.clone(), Arc::new(Sink(shared.clone())));
        while let Some(m) = input.try_recv() {
            shared.on_message(&m.message);
        }
        inner.tasks.spawn(drive(
            Arc::downgrade(inner),
            shared.clone(),
            urn,
            input,
            cfg.close_timeout,
        ));
        JxtaSocket {
            imp: Imp::Reliable(RelHandle(shared)),
            remote,
        }
    }
}

fn fail(st: &mut State, kind: io::ErrorKind, why: String) {
    if st.error.is_none() {
        st.error = Some(kind);
        st.error_text = why;
    }
    wake_all(st);
}

fn wake_all(st: &mut State) {
    for w in [
        st.read_waker.take(),
        st.write_waker.take(),
        st.close_waker.take(),
    ]
    .into_iter()
    .flatten()
    {
        w.wake();
    }
}

/// How often the driver looks at the engine's timers while data is in
/// flight (the engine's own deadlines are honoured exactly otherwise).
const TICK: Duration = Duration::from_millis(20);
/// The driver parks after this long without data in flight.
const PARK_AFTER: Duration = Duration::from_secs(1);

/// The jxtarel block size on a direct JXTA-framed connection with CBJX
/// on: every message there costs an RSA signature and its check (about
/// 90 µs and 6 µs at 1,024 bits on the development host, the time loopback
/// TCP takes to carry several hundred KiB), and the receiver signs an ack
/// for each, so a socket sends blocks of 1 MiB instead of JxtaSocket's 64
/// KiB (less where `max_message` is small, see [`data_piece`]): a
/// sixteenth of the signatures per byte. A block that large is hashed
/// piece by piece as it is written (the driver sends it, see
/// [`Shared::pump_now`]) and as it is read, so the signature's hash
/// overlaps the transfer as smaller blocks would. JXSE 2.7's receiver
/// takes blocks of any size (its `ReliableInputStream` queues each block
/// element whole, and its TCP transport has no message size limit; see
/// docs/benchmarks.md).
const SIGNED_BLOCK: usize = 1024 * 1024;

/// Most bytes of signed blocks in flight ([`SIGNED_BLOCK`]): the window
/// in blocks is cut to hold no more (at least 4 blocks), what JxtaSocket's
/// 20 blocks of 256 KiB hold.
const SIGNED_IN_FLIGHT: usize = 5 * 1024 * 1024;

/// A block message at least this large goes to the driver, which writes
/// it hashing piece by piece (`Messenger::send`), where a CBJX signature
/// is due (JXTA framing): the application's task would hash it whole
/// before writing its first byte.
const STREAMED_BLOCK: usize = 2 * crate::transport::tcp::STREAM_PIECE;

/// The largest data piece a socket sends in one message: `most`, less
/// where this peer's `max_message` (which bounds what it sends, less 64
/// KiB of room for the message's other elements) is smaller; never below
/// `least`.
pub(super) fn data_piece(max_message: u64, least: usize, most: usize) -> usize {
    usize::try_from(max_message)
        .unwrap_or(usize::MAX)
        .saturating_sub(64 * 1024)
        .clamp(least, most)
}

/// The socket's driver task: sends what could not be sent at once, runs
/// the engine's timers (retransmission, keepalive, dead peer), and performs
/// the close handshake. Data normally bypasses it.
async fn drive(
    inner: std::sync::Weak<Inner>,
    shared: Arc<Shared>,
    urn: String,
    _input: InputPipe,
    close_timeout: Duration,
) {
    let conn = shared.messenger.connection().clone();
    let mut close_sent: Option<tokio::time::Instant> = None;
    let mut close_deadline: Option<tokio::time::Instant> = None;
    let mut last_busy = tokio::time::Instant::now();
    let mut close_ack_sent = false;
    let mut last_received = 0u64;
    loop {
        shared.pump_async().await;
        let (mut send_close, send_close_ack, done, next_timer, busy) = {
            let mut st = shared.state.lock().expect("socket lock");
            if let Some(e) = st.engine.error() {
                let why = e.to_string();
                fail(&mut st, io::ErrorKind::TimedOut, why);
            }
            let all_acked = st.engine.all_acked();
            let send_close = st.closing && !st.closed && all_acked && close_sent.is_none();
            // The peer's close ends its direction only: ours ends when our
            // application closes (shutdown or drop) and all is acknowledged.
            let send_close_ack =
                st.remote_closed && st.closing && all_acked && !st.closed && !close_ack_sent;
            if st.engine.writable() > 0 {
                if let Some(w) = st.write_waker.take() {
                    w.wake();
                }
            }
            if st.engine.readable() > 0 || st.remote_closed {
                if let Some(w) = st.read_waker.take() {
                    w.wake();
                }
            }
            let done = st.error.is_some() || st.closed;
            (
                send_close,
                send_close_ack,
                done,
                st.engine.poll_timeout().map(|t| st.clock.instant(t)),
                !all_acked,
            )
        };
        if send_close_ack {
            // Our closeACK ends the socket; no separate close is needed.
            send_close = false;
        }
        for (due, sig) in [
            (send_close_ack, CloseSignal::CloseAck),
            (send_close, CloseSignal::Close),
        ] {
            if !due {
                continue;
            }
            let _ = shared
                .messenger
                .send(
                    PIPE_SERVICE,
                    Some(&shared.remote_pipe),
                    sig.to_message(SetupKind::Socket),
                )
                .await;
            if sig == CloseSignal::Close {
                let now = tokio::time::Instant::now();
                close_sent = Some(now);
                close_deadline = Some(now + close_timeout);
                let mut st = shared.state.lock().expect("socket lock");
                st.close_sent = true;
                if let Some(w) = st.close_waker.take() {
                    w.wake();
                }
            } else {
                close_ack_sent = true;
            }
        }
        if close_ack_sent {
            let mut st = shared.state.lock().expect("socket lock");
            // We acknowledged the peer's close. If we are not closing, both
            // directions are done; if we are, the peer's close acknowledges
            // ours (it has nothing more to send).
            if !st.closed {
                st.closed = true;
                wake_all(&mut st);
            }
        }
        if done {
            if let Some(inner) = inner.upgrade() {
                inner.receivers.remove_sink(&urn);
            }
            return;
        }
        let now = tokio::time::Instant::now();
        let timer = next_timer.map(tokio::time::Instant::from_std);
        // Keep ticking for a while after the last activity, so a busy
        // socket's writes need not wake the driver; park after that.
        if busy {
            last_busy = now;
        }
        let active = now.duration_since(last_busy) < PARK_AFTER;
        let tick = active.then_some(now + TICK);
        shared.driver_parked.store(!active, Ordering::Release);
        if !active && !shared.state.lock().expect("socket lock").engine.all_acked() {
            // Raced with a write: stay awake.
            shared.driver_parked.store(false, Ordering::Release);
            continue;
        }
        let resend_close = close_sent.map(|t| t + Duration::from_secs(5));
        let wake_at = [timer, tick, resend_close, close_deadline]
            .into_iter()
            .flatten()
            .min();
        let sleep = async {
            match wake_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.wake_driver.notified() => {}
            _ = conn.closed() => {
                let mut st = shared.state.lock().expect("socket lock");
                if !st.closed {
                    fail(&mut st, io::ErrorKind::ConnectionReset, "connection to the peer closed".into());
                }
                drop(st);
                if let Some(inner) = inner.upgrade() {
                    inner.receivers.remove_sink(&urn);
                }
                return;
            }
            _ = sleep => {
                let now = tokio::time::Instant::now();
                let mut st = shared.state.lock().expect("socket lock");
                let engine_now = st.clock.now();
                st.engine.handle_timeout(engine_now);
                let received = st.engine.stats().blocks_received;
                if received != last_received || st.engine.readable() > 0 {
                    // The peer is still sending, or the application has
                    // not read what came: the close is not overdue.
                    last_received = received;
                    if close_deadline.is_some() {
                        close_deadline = Some(now + close_timeout);
                    }
                } else if close_deadline.is_some_and(|d| now >= d) {
                    if st.engine.all_acked() {
                        // Everything we sent was acknowledged; JXSE skips
                        // the closeACK when its own queue is not empty, so
                        // a missing closeACK is not a failure.
                        tracing::debug!("no closeACK; all data acknowledged, socket closed");
                        st.closed = true;
                        wake_all(&mut st);
                    } else {
                        fail(&mut st, io::ErrorKind::TimedOut, "close not acknowledged".into());
                    }
                } else if close_sent.is_some_and(|t| now >= t + Duration::from_secs(5)) {
                    close_sent = None; // re-send the close
                }
            }
        }
    }
}

fn err(st: &State) -> io::Error {
    io::Error::new(
        st.error.unwrap_or(io::ErrorKind::Other),
        st.error_text.clone(),
    )
}

impl Shared {
    fn poll_read(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut st = self.state.lock().expect("socket lock");
        let n = st.engine.read(buf.initialize_unfilled());
        if n > 0 {
            buf.advance(n);
            drop(st);
            // Consuming a block makes an ack due: send it from here.
            self.pump_now();
            return Poll::Ready(Ok(()));
        }
        if st.error.is_some() {
            return Poll::Ready(Err(err(&st)));
        }
        if st.remote_closed || st.closed {
            return Poll::Ready(Ok(()));
        }
        st.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_write(self: &Arc<Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut st = self.state.lock().expect("socket lock");
        if st.error.is_some() {
            return Poll::Ready(Err(err(&st)));
        }
        if st.closing || st.closed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "socket is closed for writing",
            )));
        }
        let idle = st.engine.all_acked();
        let n = st.engine.write(data);
        if n == 0 && !data.is_empty() {
            st.write_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        drop(st);
        self.pump_now();
        if idle {
            // Data in flight: the driver must watch the timers.
            self.unpark_driver();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: &Arc<Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.state.lock().expect("socket lock");
        if st.error.is_some() {
            return Poll::Ready(Err(err(&st)));
        }
        let idle = st.engine.all_acked();
        st.engine.flush();
        drop(st);
        self.pump_now();
        if idle {
            self.unpark_driver();
        }
        Poll::Ready(Ok(()))
    }

    /// Ends our direction: returns once everything written was
    /// acknowledged and our close went out (not when the peer closes: it
    /// may still be sending, and reads go on until it does).
    fn poll_shutdown(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.state.lock().expect("socket lock");
        if st.closed || st.close_sent {
            return Poll::Ready(Ok(()));
        }
        if st.error.is_some() {
            return Poll::Ready(Err(err(&st)));
        }
        if !st.closing {
            st.engine.flush();
            st.closing = true;
        }
        st.close_waker = Some(cx.waker().clone());
        drop(st);
        self.wake_driver.notify_one();
        Poll::Pending
    }
}

impl AsyncRead for JxtaSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().imp {
            Imp::Reliable(h) => h.0.poll_read(cx, buf),
            Imp::Stream(s) => s.poll_read(cx, buf),
            Imp::Secure(s) => s.poll_read(cx, buf),
            Imp::Unreliable(s) => s.poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for JxtaSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().imp {
            Imp::Reliable(h) => h.0.poll_write(cx, data),
            Imp::Stream(s) => s.poll_write(cx, data),
            Imp::Secure(s) => s.poll_write(cx, data),
            Imp::Unreliable(s) => s.poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().imp {
            Imp::Reliable(h) => h.0.poll_flush(cx),
            Imp::Stream(s) => s.poll_flush(cx),
            Imp::Secure(s) => s.poll_flush(cx),
            Imp::Unreliable(s) => s.poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().imp {
            Imp::Reliable(h) => h.0.poll_shutdown(cx),
            Imp::Stream(s) => s.poll_shutdown(cx),
            Imp::Secure(s) => s.poll_shutdown(cx),
            Imp::Unreliable(s) => s.poll_shutdown(cx),
        }
    }
}

/// Peers for the socket modules' tests.
#[cfg(test)]
pub(crate) mod test_peers {
    use std::time::Duration;

    use crate::{Peer, PeerConfig};

    /// A peer with a `key_bits` RSA key (TLS needs 2048), listening on
    /// loopback or not.
    pub(crate) async fn peer(
        dir: &tempfile::TempDir,
        name: &str,
        listen: bool,
        key_bits: usize,
    ) -> Peer {
        let mut c = PeerConfig::new(dir.path().join(name));
        if listen {
            c = c.listen("127.0.0.1:0".parse().unwrap());
        }
        c.key_bits = key_bits;
        Peer::start(c).await.unwrap()
    }

    /// A listening peer A and a peer B connected to it on compact framing.
    pub(crate) async fn pair(dir: &tempfile::TempDir, key_bits: usize) -> (Peer, Peer) {
        let (a, b) = tokio::join!(
            peer(dir, "a", true, key_bits),
            peer(dir, "b", false, key_bits)
        );
        let m = b.connect(a.local_addr().unwrap()).await.unwrap();
        assert!(m.wait_compact(Duration::from_secs(60)).await);
        (a, b)
    }
}
