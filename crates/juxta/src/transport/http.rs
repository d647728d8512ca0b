//! The HTTP transport (JXSE's `servlethttp`, digest §10): for edges that
//! can only speak HTTP. A peer that listens for HTTP ([`crate::PeerConfig::http_listen`])
//! serves sessions; an HTTP-only edge opens one with [`crate::Peer::connect_http`].
//!
//! A session is an ordinary [`Connection`] whose write side is a bounded
//! queue ([`HttpSink`]) instead of a socket, so messengers, pipes, sockets,
//! the resolver and the router work over it unchanged:
//! * server side, the queue is emptied into the bodies of the client's long
//!   poll GETs; messages POSTed by the client are verified (CBJX, signer =
//!   session peer) and dispatched like messages read from a TCP socket;
//! * client side, the queue is emptied by POSTs, and a poll task GETs the
//!   server's messages and dispatches them.
//!
//! A session exists only after the client proved its peer ID: the ping
//! answer carries a fresh nonce, the client POSTs it back in a CBJX-signed
//! hello message, and gets a random session token that every later poll
//! and post must carry. Sessions that stop polling expire and their queue
//! is freed. These rules (challenges, which request reaches which session,
//! unproven sessions, expiry) are the proto's sans-IO table
//! ([`juxta_proto::wire::http_session::Sessions`]); this module does the
//! I/O around it. Everything is bounded: heads, bodies, queues (messages and
//! bytes: a full queue makes the sender wait), sessions, clients, nonces.
//!
//! JXSE 2.7 can give no such proof. Two options, off by default, let the
//! two talk anyway: [`HttpConfig::allow_unproven_jxse_clients`] serves a
//! JXSE client in an *unproven* session (tokenless POSTs of CBJX-signed
//! messages, tokenless polls), and [`HttpConfig::allow_unchallenged_servers`]
//! lets this client use a JXSE servlet; both sessions are
//! [`Proof::Claimed`](juxta_proto::wire::connection::Proof::Claimed)
//! (docs/security.md).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use juxta_proto::endpoint::ServiceAddress;
use juxta_proto::id::PeerId;
use juxta_proto::message::cbjx::CbjxVerifier;
use juxta_proto::message::codec::EncodedMessage;
use juxta_proto::wire::connection::{ConnectionConfig, Outbound, Received, Role};
use juxta_proto::wire::http::{
    self as wire, HttpError, HttpMessage, Method, Request, Response, CONTENT_TYPE_JXTA_MSG,
    CONTENT_TYPE_TEXT, HELLO_SERVICE, NONCE_HEADER, SESSION_HEADER,
};
use juxta_proto::wire::http_session::{SessionRefusal, SessionRules, SessionState, Sessions};
use juxta_proto::wire::welcome::Welcome;
use rand::RngCore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::endpoint::Messenger;
use crate::peer::Inner;
use crate::transport::tcp::{write_all_vectored, Connection, Sink, WriterSide};

/// Bounds and timeouts of the HTTP transport (both roles).
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Messages queued per session before senders wait.
    pub queue_messages: usize,
    /// Bytes queued per session before senders wait (a larger single
    /// message takes the whole budget).
    pub queue_bytes: usize,
    /// Server: a session with no poll in progress for this long expires.
    pub session_idle: Duration,
    /// Client: the response timeout it asks for in its polls (the server
    /// caps it at 2 minutes, as JXSE does).
    pub poll_timeout: Duration,
    /// Server: most simultaneous HTTP client connections (further ones are
    /// closed at once and counted).
    pub max_clients: usize,
    /// Most bytes of messages put in one poll response or POST body (one
    /// larger message still travels, alone).
    pub max_batch: usize,
    /// How long connecting, or reading a request or response (head and
    /// body, outside a long poll), may take. JXSE: 15 s.
    pub request_timeout: Duration,
    /// Server: most outstanding session challenges (nonces); the oldest is
    /// dropped (and counted) beyond it.
    pub max_nonces: usize,
    /// Server: admit HTTP clients that cannot give the session proof: JXSE
    /// 2.7's `HttpClientMessenger` POSTs CBJX-signed messages to `/` and
    /// polls `/<its peer>` with no hello and no token. Such a client gets an
    /// *unproven* session (its connection is [`Proof::Claimed`]): what it
    /// may and may not do is in docs/security.md ("HTTP clients and
    /// servers without the session proof"). Off by default: with it off
    /// every HTTP session has proven its peer ID with a fresh challenge.
    ///
    /// [`Proof::Claimed`]: juxta_proto::wire::connection::Proof::Claimed
    pub allow_unproven_jxse_clients: bool,
    /// Server: most unproven sessions at once (further ones are refused and
    /// counted in [`HttpStats::refused_busy`]).
    pub max_unproven_sessions: usize,
    /// Client: talk to a server whose ping offers no session challenge (a
    /// JXSE 2.7 servlet): no hello, no token, the connection stays
    /// [`Proof::Claimed`] (the server's ID comes from its ping answer; its
    /// messages are still CBJX-verified as signed by that ID). Off by
    /// default: [`HttpClientError::NoChallenge`].
    ///
    /// [`Proof::Claimed`]: juxta_proto::wire::connection::Proof::Claimed
    pub allow_unchallenged_servers: bool,
}

impl HttpConfig {
    /// Sets [`HttpConfig::allow_unproven_jxse_clients`].
    ///
    /// ```
    /// let h = juxta::transport::http::HttpConfig::default().allow_unproven_jxse_clients(true);
    /// assert!(h.allow_unproven_jxse_clients);
    /// ```
    pub fn allow_unproven_jxse_clients(mut self, on: bool) -> HttpConfig {
        self.allow_unproven_jxse_clients = on;
        self
    }

    /// Sets [`HttpConfig::allow_unchallenged_servers`].
    ///
    /// ```
    /// let h = juxta::transport::http::HttpConfig::default().allow_unchallenged_servers(true);
    /// assert!(h.allow_unchallenged_servers);
    /// ```
    pub fn allow_unchallenged_servers(mut self, on: bool) -> HttpConfig {
        self.allow_unchallenged_servers = on;
        self
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            queue_messages: 256,
            queue_bytes: 8 * 1024 * 1024,
            session_idle: Duration::from_secs(60),
            poll_timeout: Duration::from_secs(30),
            max_clients: 256,
            max_batch: 1024 * 1024,
            request_timeout: Duration::from_secs(15),
            max_nonces: 1024,
            allow_unproven_jxse_clients: false,
            max_unproven_sessions: 64,
            allow_unchallenged_servers: false,
        }
    }
}

/// How long a challenge stays valid, ms.
const NONCE_TTL_MS: u64 = 60_000;
/// Longest ping answer accepted (a peer ID unique value).
const MAX_PING_BODY: u64 = 256;

crate::counters::counters! {
    /// Counters of an HTTP listener.
    pub struct HttpStats;
    /// The live counters behind [`HttpStats`].
    struct HttpCounters;
    {
        /// Requests parsed.
        requests,
        /// Sessions opened (hello verified).
        sessions_opened,
        /// Sessions expired because the client stopped polling.
        sessions_expired,
        /// Requests refused as malformed (bad head, bad message, bad poll).
        bad_request,
        /// Requests refused because the announced body is too large.
        too_large,
        /// Requests refused for want of proof: no or bad CBJX signature, a
        /// signer other than the path's peer, a stale nonce.
        unauthenticated,
        /// Requests for no session, or with a wrong session token.
        unknown_session,
        /// Clients or sessions refused at a limit (and nonces dropped at the
        /// limit).
        refused_busy,
        /// Messages taken from a session queue whose poll response could not
        /// be written (the client went away mid-response).
        lost_in_response,
        /// Unproven sessions opened ([`HttpConfig::allow_unproven_jxse_clients`]).
        unproven_sessions_opened,
        /// Messages received from unproven sessions.
        unproven_messages,
        /// Tokenless POSTs refused because a proven session holds the signer's
        /// peer ID (an unproven client never displaces a proven one).
        unproven_refused_proven,
    }
}

/// Why the server refused a request (logged, counted in [`HttpStats`],
/// answered with [`HttpRefusal::status`]).
#[derive(Debug, thiserror::Error)]
pub enum HttpRefusal {
    /// The request is not one of the transport's (bad head, bad message).
    #[error("malformed request: {0}")]
    Malformed(HttpError),
    /// The client did not prove its peer ID.
    #[error("unauthenticated: {0}")]
    Unauthenticated(HttpError),
    /// The hello's nonce was not issued by this server, or has expired.
    #[error("unknown or expired session challenge")]
    BadNonce,
    /// The path names a peer other than the message's signer.
    #[error("path names {path} but the message is signed by {signer}")]
    WrongPeer {
        /// the path's peer
        path: Box<PeerId>,
        /// the signer
        signer: Box<PeerId>,
    },
    /// No session for that peer, or a wrong token.
    #[error("no session for this request")]
    UnknownSession,
    /// The session limit is reached.
    #[error("session limit reached")]
    TooManySessions,
    /// A client without the session proof claims a peer ID that a proven
    /// session holds.
    #[error("{0} holds a proven session; an unproven client cannot take its place")]
    ProvenSessionExists(Box<PeerId>),
}

impl HttpRefusal {
    /// The status code answered.
    pub fn status(&self) -> u16 {
        match self {
            HttpRefusal::Malformed(HttpError::TooLarge { .. }) => 413,
            HttpRefusal::Malformed(HttpError::HeadTooLarge | HttpError::TooManyHeaders) => 431,
            HttpRefusal::Malformed(HttpError::TransferEncoding) => 411,
            HttpRefusal::Malformed(HttpError::UnsupportedMethod(_)) => 405,
            HttpRefusal::Malformed(_) => 400,
            HttpRefusal::Unauthenticated(_)
            | HttpRefusal::BadNonce
            | HttpRefusal::WrongPeer { .. }
            | HttpRefusal::ProvenSessionExists(_) => 403,
            HttpRefusal::UnknownSession => 404,
            HttpRefusal::TooManySessions => 503,
        }
    }

    fn count(&self, s: &HttpCounters) {
        let c = match self {
            HttpRefusal::Malformed(HttpError::TooLarge { .. }) => &s.too_large,
            HttpRefusal::Malformed(_) => &s.bad_request,
            HttpRefusal::Unauthenticated(_)
            | HttpRefusal::BadNonce
            | HttpRefusal::WrongPeer { .. } => &s.unauthenticated,
            HttpRefusal::UnknownSession => &s.unknown_session,
            HttpRefusal::TooManySessions => &s.refused_busy,
            HttpRefusal::ProvenSessionExists(_) => &s.unproven_refused_proven,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn from_message_error(e: HttpError) -> HttpRefusal {
        match e {
            HttpError::Cbjx(_)
            | HttpError::MissingTrailer
            | HttpError::SpoofedSource { .. }
            | HttpError::IdNotFromCert(_) => HttpRefusal::Unauthenticated(e),
            e => HttpRefusal::Malformed(e),
        }
    }
}

/// Errors of an HTTP client session ([`crate::Peer::connect_http`]).
#[derive(Debug, thiserror::Error)]
pub enum HttpClientError {
    /// Socket error.
    #[error("io: {0}")]
    Io(#[from] io::Error),
    /// Connecting or a response took longer than allowed.
    #[error("HTTP request to {0} timed out")]
    Timeout(SocketAddr),
    /// The server's response is malformed.
    #[error("bad HTTP response: {0}")]
    Response(#[from] HttpError),
    /// The server answered with an error status.
    #[error("HTTP status {0}")]
    Status(u16),
    /// The ping answer carries no session challenge (not a Juxta server,
    /// e.g. a JXSE servlet) and [`HttpConfig::allow_unchallenged_servers`]
    /// is off.
    #[error("the server offers no session challenge")]
    NoChallenge,
    /// The ping answer is not a peer ID.
    #[error("the ping answer is not a peer ID")]
    BadPing,
    /// The hello was accepted without a session token.
    #[error("the server returned no session token")]
    NoSession,
    /// The hello could not be framed.
    #[error("cannot frame the hello: {0}")]
    Frame(#[from] juxta_proto::wire::connection::ConnectionError),
    /// All connection slots are in use.
    #[error("connection limit of {0} reached")]
    TooManyConnections(usize),
}

/// One queued message: its chunks (without the TCP frame header) and the
/// share of the byte budget it holds until it is written.
pub(crate) struct HttpFrame {
    chunks: Vec<Bytes>,
    len: usize,
    _budget: Option<OwnedSemaphorePermit>,
}

/// The write side of an HTTP session's [`Connection`]: a queue bounded in
/// messages and bytes.
pub(crate) struct HttpSink {
    tx: Option<mpsc::Sender<HttpFrame>>,
    budget: Arc<Semaphore>,
    budget_max: usize,
}

fn closed_err() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "HTTP session closed")
}

impl HttpSink {
    fn new(cfg: &HttpConfig) -> (HttpSink, mpsc::Receiver<HttpFrame>) {
        let (tx, rx) = mpsc::channel(cfg.queue_messages.max(1));
        let budget_max = cfg.queue_bytes.clamp(1, Semaphore::MAX_PERMITS);
        (
            HttpSink {
                tx: Some(tx),
                budget: Arc::new(Semaphore::new(budget_max)),
                budget_max,
            },
            rx,
        )
    }

    /// The chunks of `enc` that go into an HTTP body: the JXTA message and
    /// its trailer, without the TCP frame header (`Outbound` always puts
    /// the header first, alone, in JXTA framing; HTTP sinks never switch
    /// to compact framing).
    pub(crate) fn frame(&self, enc: &EncodedMessage) -> Vec<Bytes> {
        debug_assert!(enc.chunks.first().is_some_and(|h| {
            juxta_proto::wire::frame::parse_header(h, u64::MAX)
                .ok()
                .flatten()
                .is_some_and(|f| {
                    f.header_len == h.len() && f.content_length as usize == enc.len - h.len()
                })
        }));
        enc.chunks.iter().skip(1).cloned().collect()
    }

    fn cost(&self, chunks: &[Bytes]) -> (usize, u32) {
        let len: usize = chunks.iter().map(Bytes::len).sum();
        (len, len.clamp(1, self.budget_max) as u32)
    }

    /// Queues a message, waiting while the queue is full.
    pub(crate) async fn send(&self, chunks: Vec<Bytes>) -> io::Result<()> {
        let tx = self.tx.as_ref().ok_or_else(closed_err)?;
        let (len, cost) = self.cost(&chunks);
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(cost)
            .await
            .map_err(|_| closed_err())?;
        tx.send(HttpFrame {
            chunks,
            len,
            _budget: Some(permit),
        })
        .await
        .map_err(|_| closed_err())
    }

    /// Queues a message if there is room now; hands it back otherwise.
    pub(crate) fn try_send(&self, chunks: Vec<Bytes>) -> io::Result<Option<Vec<Bytes>>> {
        let tx = self.tx.as_ref().ok_or_else(closed_err)?;
        let (len, cost) = self.cost(&chunks);
        let Ok(permit) = self.budget.clone().try_acquire_many_owned(cost) else {
            return Ok(Some(chunks));
        };
        match tx.try_send(HttpFrame {
            chunks,
            len,
            _budget: Some(permit),
        }) {
            Ok(()) => Ok(None),
            Err(mpsc::error::TrySendError::Full(f)) => Ok(Some(f.chunks)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(closed_err()),
        }
    }

    /// Stops accepting messages.
    pub(crate) fn close(&mut self) {
        self.tx = None;
        self.budget.close();
    }
}

/// The receiving end of a session queue, with a message taken out but not
/// yet sent because the batch was full.
struct Queue {
    rx: mpsc::Receiver<HttpFrame>,
    pending: Option<HttpFrame>,
}

impl Queue {
    /// Waits (up to `wait`) for a first message, then takes what is queued
    /// up to `max_batch` bytes.
    async fn batch(&mut self, wait: Option<Duration>, max_batch: usize) -> Vec<HttpFrame> {
        let first = match self.pending.take() {
            Some(f) => Some(f),
            None => match wait {
                None => self.rx.try_recv().ok(),
                Some(w) => tokio::time::timeout(w, self.rx.recv()).await.ok().flatten(),
            },
        };
        let Some(first) = first else {
            return Vec::new();
        };
        let mut total = first.len;
        let mut out = vec![first];
        while let Ok(f) = self.rx.try_recv() {
            if total + f.len > max_batch {
                self.pending = Some(f);
                break;
            }
            total += f.len;
            out.push(f);
        }
        out
    }
}

fn http_connection_config(inner: &Inner) -> ConnectionConfig {
    let mut c = inner.cfg.connection.clone();
    c.compact = false;
    c.cbjx = true;
    c
}

/// Builds the [`Connection`] of a session: JXTA framing, CBJX on, the
/// remote's welcome synthesised from what the HTTP exchange established.
fn session_connection(
    inner: &Arc<Inner>,
    role: Role,
    remote: PeerId,
    remote_public: String,
    peer_addr: SocketAddr,
    sink: HttpSink,
    proven: bool,
) -> Result<Arc<Connection>, juxta_proto::wire::connection::ConnectionError> {
    let mut out = Outbound::new(http_connection_config(inner), role, inner.identity.clone());
    let w = Welcome::new(inner.public_addr.clone(), remote_public, remote);
    out.on_remote_welcome(w.clone(), &mut rand::thread_rng())?;
    Ok(Arc::new(Connection {
        id: inner.next_conn_id.fetch_add(1, Ordering::Relaxed),
        remote,
        remote_welcome: w,
        peer_addr,
        writer: tokio::sync::Mutex::new(WriterSide::new(
            Sink::Http(sink),
            out,
            inner.cfg.write_timeout,
        )),
        bytes_out: AtomicU64::new(0),
        bytes_in: AtomicU64::new(0),
        compact_rx: AtomicBool::new(false),
        compact_tx: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        compact_ready: tokio::sync::Notify::new(),
        closed_notify: tokio::sync::Notify::new(),
        // The session proof (nonce, CBJX-signed hello by a certificate
        // deriving the ID, session token) is a fresh challenge-response
        // (2: Proof::Handshake); without it (a JXSE client or servlet) the
        // ID is only claimed (0: Proof::Claimed).
        proof: std::sync::atomic::AtomicU8::new(if proven { 2 } else { 0 }),
        service: Default::default(),
        addresses: Default::default(),
    }))
}

/// Marks a session's connection closed and forgets it.
fn close_connection(inner: &Inner, conn: &Arc<Connection>) {
    if !conn.closed.swap(true, Ordering::AcqRel) {
        conn.closed_notify.notify_waiters();
        conn.compact_ready.notify_waiters();
        inner.unregister(conn);
        if let Ok(mut w) = conn.writer.try_lock() {
            if let Sink::Http(s) = &mut w.half {
                s.close();
            }
        }
    }
}

fn received(m: HttpMessage) -> Received {
    Received {
        to: std::sync::Arc::new(m.to),
        source: m.source,
        message: m.message,
        wire_len: m.wire_len,
        signed: None,
    }
}

/// The decoded message, if its signature proves its signer's peer ID
/// (the ID is the `cbid` of the signing key).
fn proven(m: HttpMessage) -> Result<HttpMessage, HttpError> {
    match m.signer {
        Some(p) if !m.cert_matches_id => Err(HttpError::IdNotFromCert(Box::new(p))),
        Some(_) => Ok(m),
        None => Err(HttpError::MissingTrailer),
    }
}

/// Decodes every message of a body (back to back, each with its trailer,
/// each proving its signer).
fn decode_all(
    body: &Bytes,
    verifier: &mut CbjxVerifier,
    expect: Option<&PeerId>,
) -> Result<Vec<HttpMessage>, HttpError> {
    let mut out = Vec::new();
    let mut rest = body.clone();
    while !rest.is_empty() {
        let m = proven(wire::decode_message(&rest, verifier, true, expect)?)?;
        rest = rest.slice(m.wire_len..);
        out.push(m);
    }
    Ok(out)
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------- server

/// A session the server holds: its connection and queue. Which request
/// reaches it, and when it expires, is the proto's table's decision
/// ([`Sessions`]).
struct Session {
    conn: Arc<Connection>,
    queue: tokio::sync::Mutex<Queue>,
    verifier: std::sync::Mutex<CbjxVerifier>,
    /// The peer's clock when it was last used.
    last_seen: AtomicU64,
    clock: juxta_proto::time::Clock,
    polling: AtomicUsize,
    _slot: OwnedSemaphorePermit,
}

impl Session {
    fn touch(&self) {
        self.last_seen.store(self.clock.now(), Ordering::Release);
    }
}

impl SessionState for Session {
    fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    fn is_polling(&self) -> bool {
        self.polling.load(Ordering::Acquire) > 0
    }

    fn last_seen(&self) -> u64 {
        self.last_seen.load(Ordering::Acquire)
    }
}

impl From<SessionRefusal> for HttpRefusal {
    fn from(r: SessionRefusal) -> HttpRefusal {
        match r {
            SessionRefusal::UnknownSession => HttpRefusal::UnknownSession,
            SessionRefusal::ProvenSessionExists(p) => HttpRefusal::ProvenSessionExists(p),
            SessionRefusal::TooManySessions => HttpRefusal::TooManySessions,
        }
    }
}

/// Marks a poll in progress on a session until dropped; the session's
/// idle time counts from the end of its last poll.
struct Polling<'a>(&'a Session);

impl<'a> Polling<'a> {
    fn start(s: &'a Session) -> Polling<'a> {
        s.polling.fetch_add(1, Ordering::AcqRel);
        s.touch();
        Polling(s)
    }
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.polling.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A peer's HTTP listener: its sessions, challenges and counters.
pub struct HttpServer {
    inner: Arc<Inner>,
    cfg: HttpConfig,
    local: SocketAddr,
    /// Sessions and challenges, and the rules for them.
    table: std::sync::Mutex<Sessions<Arc<Session>>>,
    /// The peer's clock.
    clock: juxta_proto::time::Clock,
    clients: Arc<Semaphore>,
    stats: HttpCounters,
    /// Woken when a session opens (a tokenless poll may be waiting for its
    /// unproven session).
    opened: tokio::sync::Notify,
}

/// A response to write.
struct Reply {
    status: u16,
    content_type: Option<&'static str>,
    headers: Vec<(&'static str, String)>,
    body: Vec<Bytes>,
    /// Messages in the body (for the count of lost ones on failure).
    messages: usize,
}

impl Reply {
    fn empty(status: u16) -> Reply {
        Reply {
            status,
            content_type: None,
            headers: Vec::new(),
            body: Vec::new(),
            messages: 0,
        }
    }
}

impl HttpServer {
    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A snapshot of this listener's counters.
    pub fn stats(&self) -> HttpStats {
        self.stats.snapshot()
    }

    /// Number of live sessions.
    pub fn session_count(&self) -> usize {
        self.table().len()
    }

    /// Polls of `peer`'s session being served now.
    pub fn polls_in_progress(&self, peer: &PeerId) -> usize {
        self.table()
            .get(peer)
            .map_or(0, |s| s.polling.load(Ordering::Acquire))
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Sessions<Arc<Session>>> {
        self.table.lock().expect("sessions lock")
    }

    fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Messages queued for `peer`'s session (0 without a session, and
    /// while a poll is taking from the queue).
    pub fn queued(&self, peer: &PeerId) -> usize {
        let s = self.table().get(peer).cloned();
        s.and_then(|s| {
            s.queue
                .try_lock()
                .ok()
                .map(|q| q.rx.len() + usize::from(q.pending.is_some()))
        })
        .unwrap_or(0)
    }

    fn new_nonce(&self) -> String {
        let n = random_hex(16);
        let now = self.now();
        if self.table().issue_nonce(n.clone(), now) {
            self.stats.refused_busy.fetch_add(1, Ordering::Relaxed);
        }
        n
    }

    fn take_nonce(&self, n: &str) -> bool {
        let now = self.now();
        self.table().take_nonce(n, now)
    }

    fn session(&self, peer: &PeerId, token: Option<&str>) -> Result<Arc<Session>, HttpRefusal> {
        Ok(self.table().session(peer, token)?.clone())
    }

    /// A tokenless poll for a peer without a session: JXSE's poller starts
    /// before its first POST (which opens the unproven session), and stops
    /// for good after two failed polls, so the poll waits (up to `wait`)
    /// for the session instead of being refused. `None`: none opened.
    async fn await_unproven(&self, peer: &PeerId, wait: Duration) -> Option<Arc<Session>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let opened = self.opened.notified();
            if let Ok(s) = self.session(peer, None) {
                return Some(s);
            }
            if tokio::time::timeout_at(deadline, opened).await.is_err() {
                return None;
            }
        }
    }

    async fn handle(
        &self,
        req: &Request,
        body: Bytes,
        from: SocketAddr,
    ) -> Result<Reply, HttpRefusal> {
        let path_peer = req.requestor().map_err(HttpRefusal::Malformed)?;
        match req.method {
            Method::Get if path_peer.is_none() => {
                // Ping: our unique value, and (Juxta) a session challenge.
                let mut r = Reply::empty(200);
                r.content_type = Some(CONTENT_TYPE_TEXT);
                r.headers.push((NONCE_HEADER, self.new_nonce()));
                r.body
                    .push(Bytes::from(self.inner.identity.peer_id().unique_value()));
                Ok(r)
            }
            Method::Get => {
                let peer = path_peer.expect("checked above");
                let poll = req
                    .poll()
                    .ok_or(HttpRefusal::Malformed(HttpError::BadRequestLine))?;
                let s = match self.session(&peer, req.session.as_deref()) {
                    Ok(s) => s,
                    Err(HttpRefusal::UnknownSession)
                        if req.session.is_none() && self.cfg.allow_unproven_jxse_clients =>
                    {
                        let wait = Duration::from_millis(poll.response_timeout_ms.max(0) as u64)
                            .min(self.cfg.session_idle);
                        match self.await_unproven(&peer, wait).await {
                            Some(s) => s,
                            None => return Ok(Reply::empty(204)),
                        }
                    }
                    Err(e) => return Err(e),
                };
                self.poll(&s, poll.response_timeout_ms).await
            }
            Method::Post => self.post(req, body, path_peer, from).await,
        }
    }

    async fn poll(&self, s: &Arc<Session>, timeout_ms: i64) -> Result<Reply, HttpRefusal> {
        // Counted while in progress, also when the poll is abandoned
        // (dropped) because its client went away.
        let _polling = Polling::start(s);
        let wait = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        let work = async {
            let mut q = s.queue.lock().await;
            q.batch(wait, self.cfg.max_batch).await
        };
        let frames = tokio::select! {
            f = work => f,
            _ = s.conn.closed() => Vec::new(),
        };
        if frames.is_empty() {
            return Ok(Reply::empty(204));
        }
        let mut r = Reply::empty(200);
        r.content_type = Some(CONTENT_TYPE_JXTA_MSG);
        r.messages = frames.len();
        for f in frames {
            r.body.extend(f.chunks);
        }
        Ok(r)
    }

    async fn post(
        &self,
        req: &Request,
        body: Bytes,
        path_peer: Option<PeerId>,
        from: SocketAddr,
    ) -> Result<Reply, HttpRefusal> {
        if body.is_empty() {
            return Err(HttpRefusal::Malformed(HttpError::Message(
                juxta_proto::message::codec::MessageError::Empty,
            )));
        }
        if let Some(token) = req.session.as_deref() {
            let peer = path_peer.ok_or(HttpRefusal::UnknownSession)?;
            let s = self.session(&peer, Some(token))?;
            let msgs = {
                let mut v = s.verifier.lock().expect("verifier lock");
                decode_all(&body, &mut v, Some(&peer)).map_err(HttpRefusal::from_message_error)?
            };
            s.touch();
            for m in msgs {
                s.conn
                    .bytes_in
                    .fetch_add(m.wire_len as u64, Ordering::Relaxed);
                self.inner.dispatch(&s.conn, received(m)).await;
            }
            return Ok(Reply::empty(200));
        }
        if path_peer.is_none() && self.cfg.allow_unproven_jxse_clients {
            // JXSE's client POSTs to `/` with no token: unproven.
            return self.post_unproven(body, from).await;
        }
        // No session: only a hello may open one.
        let mut verifier = CbjxVerifier::new();
        let m = wire::decode_message(&body, &mut verifier, true, None)
            .and_then(proven)
            .map_err(HttpRefusal::from_message_error)?;
        let signer = m
            .signer
            .ok_or(HttpRefusal::Unauthenticated(HttpError::MissingTrailer))?;
        if let Some(p) = path_peer {
            if p != signer {
                return Err(HttpRefusal::WrongPeer {
                    path: Box::new(p),
                    signer: Box::new(signer),
                });
            }
        }
        if m.to.service != HELLO_SERVICE {
            return Err(HttpRefusal::UnknownSession);
        }
        let nonce = wire::hello_nonce(&m.message).ok_or(HttpRefusal::BadNonce)?;
        if !self.take_nonce(nonce) {
            return Err(HttpRefusal::BadNonce);
        }
        let token = self.open_session(signer, verifier, from, true)?;
        let mut r = Reply::empty(200);
        r.headers.push((SESSION_HEADER, token));
        Ok(r)
    }

    /// A POST from a client without the session proof (JXSE's): every
    /// message must carry a CBJX trailer whose signer's ID is derived from
    /// its certificate (what JXSE always sends), all by one signer. The
    /// messages go into that signer's unproven session, opened if needed;
    /// a proven session for that ID is never displaced.
    async fn post_unproven(&self, body: Bytes, from: SocketAddr) -> Result<Reply, HttpRefusal> {
        let mut verifier = CbjxVerifier::new();
        let msgs =
            decode_all(&body, &mut verifier, None).map_err(HttpRefusal::from_message_error)?;
        let Some(signer) = msgs.first().and_then(|m| m.signer) else {
            return Err(HttpRefusal::Malformed(HttpError::Message(
                juxta_proto::message::codec::MessageError::Empty,
            )));
        };
        if let Some(other) = msgs.iter().find_map(|m| m.signer.filter(|p| *p != signer)) {
            return Err(HttpRefusal::WrongPeer {
                path: Box::new(signer),
                signer: Box::new(other),
            });
        }
        let existing = self.table().for_unproven(&signer)?.cloned();
        let s = match existing {
            Some(s) => s,
            None => {
                self.open_session(signer, verifier, from, false)?;
                self.session(&signer, None)?
            }
        };
        s.touch();
        self.stats
            .unproven_messages
            .fetch_add(msgs.len() as u64, Ordering::Relaxed);
        for m in msgs {
            s.conn
                .bytes_in
                .fetch_add(m.wire_len as u64, Ordering::Relaxed);
            self.inner.dispatch(&s.conn, received(m)).await;
        }
        Ok(Reply::empty(200))
    }

    fn open_session(
        &self,
        peer: PeerId,
        verifier: CbjxVerifier,
        from: SocketAddr,
        proven: bool,
    ) -> Result<String, HttpRefusal> {
        let slot = self
            .inner
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| HttpRefusal::TooManySessions)?;
        let (sink, rx) = HttpSink::new(&self.cfg);
        let conn = session_connection(
            &self.inner,
            Role::Acceptor,
            peer,
            peer.endpoint_address(),
            from,
            sink,
            proven,
        )
        .map_err(|_| HttpRefusal::TooManySessions)?;
        // An unproven session is reached without a token: it gets none.
        let token = if proven {
            random_hex(24)
        } else {
            String::new()
        };
        let s = Arc::new(Session {
            conn: conn.clone(),
            queue: tokio::sync::Mutex::new(Queue { rx, pending: None }),
            verifier: std::sync::Mutex::new(verifier),
            last_seen: AtomicU64::new(self.now()),
            clock: self.clock,
            polling: AtomicUsize::new(0),
            _slot: slot,
        });
        let inserted = self.table().insert(peer, token.clone(), proven, s);
        match inserted {
            Ok(Some(old)) => close_connection(&self.inner, &old.conn),
            Ok(None) => {}
            Err(e) => {
                // A proven session appeared meanwhile: it stays.
                close_connection(&self.inner, &conn);
                return Err(e.into());
            }
        }
        // `register` keeps a proven connection (TCP or HTTP) for this ID
        // over an unproven one.
        self.inner.register(&conn);
        if proven {
            self.stats.sessions_opened.fetch_add(1, Ordering::Relaxed);
            tracing::info!(remote = %peer, %from, "HTTP session opened");
        } else {
            self.stats
                .unproven_sessions_opened
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(remote = %peer, %from, "unproven HTTP session opened (JXSE client)");
        }
        self.opened.notify_waiters();
        Ok(token)
    }

    /// Expires the sessions that stopped polling.
    fn expire(&self) {
        let now = self.now();
        let gone = self.table().expire(now);
        for (p, s, expired) in gone {
            if expired {
                self.stats.sessions_expired.fetch_add(1, Ordering::Relaxed);
                tracing::info!(remote = %p, "HTTP session expired");
            }
            close_connection(&self.inner, &s.conn);
        }
    }
}

/// Binds the HTTP listener; the returned tasks accept and expire.
pub(crate) async fn listen(
    inner: &Arc<Inner>,
    addr: SocketAddr,
    cfg: HttpConfig,
) -> io::Result<(Arc<HttpServer>, Vec<tokio::task::JoinHandle<()>>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let rules = SessionRules {
        max_nonces: cfg.max_nonces,
        nonce_ttl: NONCE_TTL_MS,
        allow_unproven: cfg.allow_unproven_jxse_clients,
        max_unproven: cfg.max_unproven_sessions,
        idle: u64::try_from(cfg.session_idle.as_millis()).unwrap_or(u64::MAX),
    };
    let server = Arc::new(HttpServer {
        inner: inner.clone(),
        clients: Arc::new(Semaphore::new(cfg.max_clients.max(1))),
        cfg,
        local,
        table: std::sync::Mutex::new(Sessions::new(rules)),
        clock: inner.clock,
        stats: HttpCounters::default(),
        opened: tokio::sync::Notify::new(),
    });
    let accept = tokio::spawn(accept_loop(server.clone(), listener));
    let s = server.clone();
    let reaper = tokio::spawn(async move {
        let every = (s.cfg.session_idle / 4).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            s.expire();
        }
    });
    tracing::info!(%local, "HTTP transport listening");
    Ok((server, vec![accept, reaper]))
}

async fn accept_loop(server: Arc<HttpServer>, listener: TcpListener) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = server.clients.clone().try_acquire_owned() else {
            server.stats.refused_busy.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%addr, "HTTP client refused: limit reached");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let s = server.clone();
        server
            .inner
            .tasks
            .spawn(serve_client(s, stream, addr, permit));
    }
}

/// Reads more bytes into `buf`; `Ok(false)` at end of stream.
async fn fill(rd: &mut OwnedReadHalf, buf: &mut BytesMut) -> io::Result<bool> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(16 * 1024);
    }
    Ok(rd.read_buf(buf).await? > 0)
}

/// Buffer space for a body grows by at most this much more than twice
/// what has arrived.
const BODY_RESERVE_STEP: usize = 64 * 1024;

/// Reads exactly `len` body bytes (the head has been consumed); fails
/// when no byte arrives for `stall` (JXSE's read timeout works the same
/// way, so large bodies on slow links are fine while they progress).
/// Buffer space grows with what arrives (at most doubling), never to the
/// announced `len` at once: a `content-length` alone costs little memory.
async fn read_body(
    rd: &mut OwnedReadHalf,
    buf: &mut BytesMut,
    len: usize,
    stall: Duration,
) -> io::Result<Bytes> {
    while buf.len() < len {
        let want = len.min(
            buf.len()
                .saturating_mul(2)
                .saturating_add(BODY_RESERVE_STEP),
        );
        if buf.capacity() < want {
            buf.reserve(want - buf.len());
        }
        match tokio::time::timeout(stall, fill(rd, buf)).await {
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
            Ok(r) => {
                if !r? {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
        }
    }
    Ok(buf.split_to(len).freeze())
}

async fn write_reply(
    wr: &mut OwnedWriteHalf,
    r: &Reply,
    keep_alive: bool,
    stall: Duration,
) -> io::Result<()> {
    let len: usize = r.body.iter().map(Bytes::len).sum();
    let mut headers: Vec<(&str, &str)> = r.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    if !keep_alive {
        headers.push(("Connection", "close"));
    }
    let head = wire::response_head(r.status, r.content_type, len as u64, &headers);
    let mut chunks = Vec::with_capacity(r.body.len() + 1);
    chunks.push(head);
    chunks.extend(r.body.iter().cloned());
    tokio::time::timeout(write_time(stall, len), write_all_vectored(wr, &chunks))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// Time allowed to write `len` bytes: `stall` per started MiB, so a peer
/// that stops reading cannot hold a task forever, while a slow one that
/// reads at least 1 MiB per `stall` is served.
fn write_time(stall: Duration, len: usize) -> Duration {
    stall * (1 + (len >> 20) as u32)
}

async fn serve_client(
    server: Arc<HttpServer>,
    stream: TcpStream,
    addr: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let max_body = server.inner.cfg.connection.max_message;
    let idle = server.cfg.session_idle.max(server.cfg.request_timeout);
    loop {
        // The head, bounded in size (by the parser) and time.
        let head = async {
            loop {
                match wire::parse_request(&buf, max_body) {
                    Ok(Some(r)) => return Ok(Some(r)),
                    Ok(None) => {}
                    Err(e) => return Err(Some(e)),
                }
                match fill(&mut rd, &mut buf).await {
                    Ok(true) => {}
                    _ => return Ok(None),
                }
            }
        };
        let req = match tokio::time::timeout(idle, head).await {
            Err(_) | Ok(Ok(None)) => return,
            Ok(Ok(Some(r))) => r,
            Ok(Err(e)) => {
                let e = e.expect("parse error");
                refuse(&server, &mut wr, addr, HttpRefusal::Malformed(e)).await;
                return;
            }
        };
        server.stats.requests.fetch_add(1, Ordering::Relaxed);
        let _ = buf.split_to(req.head_len);
        let stall = server.cfg.request_timeout;
        let body = match read_body(&mut rd, &mut buf, req.content_length as usize, stall).await {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(%addr, error = %e, "HTTP request body not received");
                return;
            }
        };
        // A client that goes away while its request is handled (typically
        // during a long poll) ends it: nothing is taken from its queue for
        // a response nobody reads.
        let handled = tokio::select! {
            r = server.handle(&req, body, addr) => r,
            _ = client_gone(&mut rd, &mut buf) => return,
        };
        match handled {
            Ok(r) => {
                if let Err(e) = write_reply(&mut wr, &r, req.keep_alive, stall).await {
                    if r.messages > 0 {
                        server
                            .stats
                            .lost_in_response
                            .fetch_add(r.messages as u64, Ordering::Relaxed);
                    }
                    tracing::debug!(%addr, error = %e, "HTTP response failed");
                    return;
                }
            }
            Err(refusal) => {
                refuse(&server, &mut wr, addr, refusal).await;
                return;
            }
        }
        if !req.keep_alive {
            return;
        }
    }
}

/// Completes when the client closes its end (or the socket fails). Bytes
/// it sends meanwhile (a pipelined request) are kept in `buf`, and the
/// watch stops.
async fn client_gone(rd: &mut OwnedReadHalf, buf: &mut BytesMut) {
    if let Ok(true) = fill(rd, buf).await {
        std::future::pending::<()>().await
    }
}

async fn refuse(server: &HttpServer, wr: &mut OwnedWriteHalf, addr: SocketAddr, e: HttpRefusal) {
    e.count(&server.stats);
    tracing::info!(%addr, error = %e, "HTTP request refused");
    let mut r = Reply::empty(e.status());
    r.content_type = Some(CONTENT_TYPE_TEXT);
    r.body.push(Bytes::from(e.to_string()));
    let _ = write_reply(wr, &r, false, server.cfg.request_timeout).await;
    let _ = wr.shutdown().await;
}

// ---------------------------------------------------------------- client

/// One keep-alive HTTP connection of a client, reopened when the server
/// closes it.
struct ClientConn {
    addr: SocketAddr,
    timeout: Duration,
    io: Option<(OwnedReadHalf, OwnedWriteHalf)>,
    buf: BytesMut,
    /// The server is a JXSE servlet: a message in a response body may be
    /// followed by its CBJX trailer beyond the `content-length` (JXSE sets
    /// it from `WireFormatMessage.getByteLength()`, which leaves the
    /// trailer out, then writes the trailer anyway).
    jxse_trailer: bool,
}

impl ClientConn {
    fn new(addr: SocketAddr, timeout: Duration) -> ClientConn {
        ClientConn {
            addr,
            timeout,
            io: None,
            buf: BytesMut::with_capacity(16 * 1024),
            jxse_trailer: false,
        }
    }

    /// Sends one request and reads its response, waiting at most `wait`
    /// for the response head (a long poll waits longer than a post).
    async fn request(
        &mut self,
        head: Bytes,
        body: &[Bytes],
        wait: Duration,
        max_body: u64,
    ) -> Result<(Response, Bytes), HttpClientError> {
        let addr = self.addr;
        if self.io.is_none() {
            let s = tokio::time::timeout(self.timeout, TcpStream::connect(addr))
                .await
                .map_err(|_| HttpClientError::Timeout(addr))??;
            s.set_nodelay(true)?;
            self.buf.clear();
            self.io = Some(s.into_split());
        }
        let r = self.exchange(head, body, wait, max_body).await;
        match &r {
            Ok((resp, b)) if resp.keep_alive && b.len() as u64 == resp.content_length => {}
            // A body longer than announced (a JXSE servlet's trailer):
            // Jetty closes the connection after it, without saying so.
            _ => self.io = None,
        }
        r
    }

    async fn exchange(
        &mut self,
        head: Bytes,
        body: &[Bytes],
        wait: Duration,
        max_body: u64,
    ) -> Result<(Response, Bytes), HttpClientError> {
        let addr = self.addr;
        let (rd, wr) = self.io.as_mut().expect("connected");
        let mut chunks = Vec::with_capacity(body.len() + 1);
        chunks.push(head);
        chunks.extend(body.iter().cloned());
        let len = chunks.iter().map(Bytes::len).sum();
        tokio::time::timeout(
            write_time(self.timeout, len),
            write_all_vectored(wr, &chunks),
        )
        .await
        .map_err(|_| HttpClientError::Timeout(addr))??;
        let buf = &mut self.buf;
        let resp = tokio::time::timeout(wait, async {
            loop {
                if let Some(r) = wire::parse_response(buf, max_body)? {
                    return Ok::<_, HttpClientError>(r);
                }
                if !fill(rd, buf).await? {
                    return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
                }
            }
        })
        .await
        .map_err(|_| HttpClientError::Timeout(addr))??;
        let _ = buf.split_to(resp.head_len);
        let to_client_err = |e: io::Error| match e.kind() {
            io::ErrorKind::TimedOut => HttpClientError::Timeout(addr),
            _ => e.into(),
        };
        let mut body = read_body(rd, buf, resp.content_length as usize, self.timeout)
            .await
            .map_err(to_client_err)?;
        if self.jxse_trailer && resp.status == 200 && !body.is_empty() {
            body = with_jxse_trailer(rd, buf, body, self.timeout, max_body)
                .await
                .map_err(to_client_err)?;
        }
        Ok((resp, body))
    }
}

/// A JXSE servlet's poll response body: one message whose `content-length`
/// leaves out its CBJX trailer. When the body ends exactly where the
/// message's elements end, the trailer (three length-prefixed fields, each
/// within its bound, the whole within `max_body`) is read from the stream
/// behind it and appended. A body that already holds more (a trailer, or
/// a well-behaved server) is returned as it is.
async fn with_jxse_trailer(
    rd: &mut OwnedReadHalf,
    buf: &mut BytesMut,
    body: Bytes,
    stall: Duration,
    max_body: u64,
) -> io::Result<Bytes> {
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
    let decoded = juxta_proto::message::codec::decode_v0(body.clone())
        .map_err(|e| bad(format!("JXSE poll response: {e}")))?;
    if decoded.elements_end != body.len() {
        return Ok(body);
    }
    use juxta_proto::message::cbjx::{
        MAX_TRAILER_CERT_LEN, MAX_TRAILER_SIG_LEN, MAX_TRAILER_SRC_LEN,
    };
    // Each field's length is read (and checked against its bound) before
    // its bytes are awaited, so at most the bounded trailer is buffered.
    let mut pos = 0usize;
    for max in [
        MAX_TRAILER_CERT_LEN,
        MAX_TRAILER_SRC_LEN,
        MAX_TRAILER_SIG_LEN,
    ] {
        fill_to(rd, buf, pos + 4, stall).await?;
        let len = u32::from_be_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]]) as usize;
        if len > max {
            return Err(bad(format!(
                "JXSE poll response: CBJX trailer field of {len} bytes (at most {max})"
            )));
        }
        pos += 4 + len;
        fill_to(rd, buf, pos, stall).await?;
    }
    if (body.len() as u64).saturating_add(pos as u64) > max_body {
        return Err(bad("JXSE poll response larger than allowed".into()));
    }
    let mut whole = BytesMut::with_capacity(body.len() + pos);
    whole.extend_from_slice(&body);
    whole.extend_from_slice(&buf.split_to(pos));
    Ok(whole.freeze())
}

/// Reads until `buf` holds `n` bytes; fails when nothing arrives for
/// `stall` or the stream ends.
async fn fill_to(
    rd: &mut OwnedReadHalf,
    buf: &mut BytesMut,
    n: usize,
    stall: Duration,
) -> io::Result<()> {
    while buf.len() < n {
        match tokio::time::timeout(stall, fill(rd, buf)).await {
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
            Ok(r) => {
                if !r? {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
        }
    }
    Ok(())
}

/// Opens an HTTP session with the peer at `addr`: ping (server ID and
/// challenge), signed hello (session token), then a poll task and a post
/// task around a [`Connection`] registered like a TCP one.
/// Per-address locks of the HTTP sessions being opened
/// ([`crate::peer::Inner::http_dials`]); an entry lives while a dial of its
/// address is under way, so the map holds at most one per dial in flight.
#[derive(Default)]
pub(crate) struct DialLocks(std::sync::Mutex<HashMap<SocketAddr, Arc<tokio::sync::Mutex<()>>>>);

impl DialLocks {
    fn lock_of(&self, addr: SocketAddr) -> Arc<tokio::sync::Mutex<()>> {
        self.0
            .lock()
            .expect("http dial locks")
            .entry(addr)
            .or_default()
            .clone()
    }

    /// Drops the entry of `addr` once no dial holds or waits for it.
    fn release(&self, addr: SocketAddr, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut m = self.0.lock().expect("http dial locks");
        // The map's reference and `lock`: nobody else holds it.
        if Arc::strong_count(&lock) == 2 {
            m.remove(&addr);
        }
    }
}

/// Opens an HTTP session with the server at `addr`, or returns the live
/// session or connection to it: dials of one address are serialized (the
/// later ones find the first's session).
pub(crate) async fn connect(
    inner: &Arc<Inner>,
    addr: SocketAddr,
    cfg: HttpConfig,
) -> Result<Messenger, HttpClientError> {
    let lock = inner.http_dials.lock_of(addr);
    let r = {
        let _held = lock.lock().await;
        connect_serialized(inner, addr, cfg).await
    };
    inner.http_dials.release(addr, lock);
    r
}

async fn connect_serialized(
    inner: &Arc<Inner>,
    addr: SocketAddr,
    cfg: HttpConfig,
) -> Result<Messenger, HttpClientError> {
    let slot = inner
        .slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| HttpClientError::TooManyConnections(inner.cfg.max_connections))?;
    let host = addr.to_string();
    let me = inner.identity.peer_id().unique_value();
    let mut posts = ClientConn::new(addr, cfg.request_timeout);

    // Ping: the server's peer ID and a challenge.
    let ping = wire::request_head(Method::Get, "/", &host, None, 0, &[]);
    let (resp, body) = posts
        .request(ping, &[], cfg.request_timeout, MAX_PING_BODY)
        .await?;
    if resp.status != 200 {
        return Err(HttpClientError::Status(resp.status));
    }
    if resp.nonce.is_none() && !cfg.allow_unchallenged_servers {
        return Err(HttpClientError::NoChallenge);
    }
    let server: PeerId = std::str::from_utf8(&body)
        .ok()
        .and_then(|s| format!("urn:jxta:{}", s.trim()).parse().ok())
        .ok_or(HttpClientError::BadPing)?;

    // A live session (or TCP connection) to that peer is reused.
    if let Some(m) = inner.messenger(&server) {
        return Ok(m);
    }
    let Some(nonce) = resp.nonce else {
        return connect_unchallenged(inner, addr, cfg, server, posts, slot);
    };

    // The connection, then the hello signed through its own encoder.
    let (sink, rx) = HttpSink::new(&cfg);
    let conn = session_connection(
        inner,
        Role::Initiator,
        server,
        format!("http://{addr}"),
        addr,
        sink,
        true,
    )?;
    let hello = {
        let mut w = conn.writer.lock().await;
        let enc = w.out.encode(
            &ServiceAddress::new(HELLO_SERVICE, None),
            wire::hello_message(&nonce),
        )?;
        match &w.half {
            Sink::Http(s) => s.frame(&enc),
            Sink::Tcp(_) => unreachable!("HTTP session connection"),
        }
    };
    let len: usize = hello.iter().map(Bytes::len).sum();
    let head = wire::request_head(
        Method::Post,
        &format!("/{me}"),
        &host,
        Some(CONTENT_TYPE_JXTA_MSG),
        len as u64,
        &[],
    );
    let (resp, _) = posts.request(head, &hello, cfg.request_timeout, 0).await?;
    if resp.status != 200 {
        return Err(HttpClientError::Status(resp.status));
    }
    let token = Some(resp.session.ok_or(HttpClientError::NoSession)?);
    inner.register(&conn);
    tracing::info!(remote = %server, %addr, "HTTP session established");

    let max_body = inner.cfg.connection.max_message;
    inner.tasks.spawn(post_task(
        inner.clone(),
        conn.clone(),
        posts,
        rx,
        token.clone(),
        me.clone(),
        cfg.max_batch,
    ));
    inner.tasks.spawn(poll_task(
        inner.clone(),
        conn.clone(),
        ClientConn::new(addr, cfg.request_timeout),
        token,
        me,
        cfg.poll_timeout,
        max_body,
        slot,
    ));
    Ok(Messenger::new(conn, inner.clone()))
}

/// The session with a server that offers no challenge (a JXSE servlet,
/// [`HttpConfig::allow_unchallenged_servers`]): no hello and no token; the
/// connection is [`Proof::Claimed`](juxta_proto::wire::connection::Proof::Claimed).
fn connect_unchallenged(
    inner: &Arc<Inner>,
    addr: SocketAddr,
    cfg: HttpConfig,
    server: PeerId,
    posts: ClientConn,
    slot: OwnedSemaphorePermit,
) -> Result<Messenger, HttpClientError> {
    let me = inner.identity.peer_id().unique_value();
    let (sink, rx) = HttpSink::new(&cfg);
    let conn = session_connection(
        inner,
        Role::Initiator,
        server,
        format!("http://{addr}"),
        addr,
        sink,
        false,
    )?;
    inner.register(&conn);
    tracing::info!(remote = %server, %addr, "HTTP session with a server without challenge (JXSE servlet): peer ID unproven");
    let max_body = inner.cfg.connection.max_message;
    inner.tasks.spawn(post_task(
        inner.clone(),
        conn.clone(),
        posts,
        rx,
        None,
        me.clone(),
        // 0: one message per POST; JXSE's servlet reads one message from
        // a request body and ignores the rest.
        0,
    ));
    let mut polls = ClientConn::new(addr, cfg.request_timeout);
    polls.jxse_trailer = true;
    inner.tasks.spawn(poll_task(
        inner.clone(),
        conn.clone(),
        polls,
        None,
        me,
        cfg.poll_timeout,
        max_body,
        slot,
    ));
    Ok(Messenger::new(conn, inner.clone()))
}

async fn post_task(
    inner: Arc<Inner>,
    conn: Arc<Connection>,
    mut http: ClientConn,
    rx: mpsc::Receiver<HttpFrame>,
    token: Option<String>,
    me: String,
    max_batch: usize,
) {
    let mut q = Queue { rx, pending: None };
    let host = http.addr.to_string();
    let path = format!("/{me}");
    // The server answers a post once its listeners took the messages: a
    // slow listener (back-pressure) delays it, up to JXSE's 2 minutes.
    let wait = Duration::from_millis(wire::MAX_RESPONSE_TIMEOUT_MS as u64).max(http.timeout);
    loop {
        let frames = tokio::select! {
            f = q.batch(Some(Duration::from_secs(3600)), max_batch) => f,
            _ = conn.closed() => return,
        };
        if frames.is_empty() {
            if q.rx.is_closed() && q.rx.is_empty() {
                break;
            }
            continue;
        }
        let len: usize = frames.iter().map(|f| f.len).sum();
        let body: Vec<Bytes> = frames
            .iter()
            .flat_map(|f| f.chunks.iter().cloned())
            .collect();
        let session: Vec<(&str, &str)> =
            token.iter().map(|t| (SESSION_HEADER, t.as_str())).collect();
        let head = wire::request_head(
            Method::Post,
            &path,
            &host,
            Some(CONTENT_TYPE_JXTA_MSG),
            len as u64,
            &session,
        );
        match http.request(head, &body, wait, 4096).await {
            Ok((r, _)) if r.status == 200 => {}
            Ok((r, _)) => {
                tracing::warn!(remote = %conn.remote, status = r.status, "HTTP post refused; session closed");
                break;
            }
            Err(e) => {
                tracing::warn!(remote = %conn.remote, error = %e, "HTTP post failed; session closed");
                break;
            }
        }
        drop(frames);
    }
    close_connection(&inner, &conn);
}

#[allow(clippy::too_many_arguments)]
async fn poll_task(
    inner: Arc<Inner>,
    conn: Arc<Connection>,
    mut http: ClientConn,
    token: Option<String>,
    me: String,
    poll_timeout: Duration,
    max_body: u64,
    _slot: OwnedSemaphorePermit,
) {
    let host = http.addr.to_string();
    let ms = poll_timeout
        .as_millis()
        .clamp(1, wire::MAX_RESPONSE_TIMEOUT_MS as u128) as i64;
    let query = wire::PollQuery {
        response_timeout_ms: ms,
        // -1: one content-length body per poll (what a JXSE servlet then
        // sends too, instead of a chunked stream).
        extra_timeout_ms: -1,
        dest: Some(format!("http://{host}")),
    };
    let target = format!("/{me}?{}", query.to_query());
    // The server's answer may come a little after its own timeout.
    let wait = Duration::from_millis(ms as u64) + http.timeout;
    let server = conn.remote;
    let mut verifier = CbjxVerifier::new();
    loop {
        let session: Vec<(&str, &str)> =
            token.iter().map(|t| (SESSION_HEADER, t.as_str())).collect();
        let head = wire::request_head(Method::Get, &target, &host, None, 0, &session);
        let r = tokio::select! {
            r = http.request(head, &[], wait, max_body) => r,
            _ = conn.closed() => break,
        };
        let body = match r {
            Ok((r, _)) if r.status == 204 => continue,
            Ok((r, body)) if r.status == 200 => body,
            Ok((r, _)) => {
                tracing::warn!(remote = %server, status = r.status, "HTTP poll refused; session closed");
                break;
            }
            Err(e) => {
                tracing::warn!(remote = %server, error = %e, "HTTP poll failed; session closed");
                break;
            }
        };
        match decode_all(&body, &mut verifier, Some(&server)) {
            Ok(msgs) => {
                for m in msgs {
                    conn.bytes_in
                        .fetch_add(m.wire_len as u64, Ordering::Relaxed);
                    inner.dispatch(&conn, received(m)).await;
                }
            }
            Err(e) => {
                inner
                    .stats
                    .connections_failed
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(remote = %server, error = %e, "bad HTTP poll response; session closed");
                break;
            }
        }
    }
    close_connection(&inner, &conn);
}
