//! A running peer: its identity, its TCP listener, its connections and the
//! endpoint listeners messages are dispatched to.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use juxta_proto::endpoint::{self, Delivery, ServiceAddress};
use juxta_proto::id::PeerId;
use juxta_proto::identity::{Identity, IdentityError};
use juxta_proto::wire::connection::{Proof, Role};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;

use crate::endpoint::{Listener, Messenger};
use crate::transport::limits::AddrRefusal;
use crate::transport::tcp::{self, Connection, Incoming};
use crate::PeerConfig;

/// Errors starting or using a peer.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// File or socket error, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// what failed
        what: String,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// The identity files are unreadable or inconsistent.
    #[error("identity in {path}: {source} (delete identity.key and identity.crt to create a new identity)")]
    Identity {
        /// home directory
        path: String,
        /// the error
        #[source]
        source: IdentityError,
    },
    /// Another peer (in this process or another) is running with the same
    /// home directory; a home serves one peer at a time.
    #[error("home directory {} is in use by another running peer{} (lock on {}/lock held)", path.display(), pid.map(|p| format!(", process {p}")).unwrap_or_default(), path.display())]
    HomeLocked {
        /// The home directory.
        path: PathBuf,
        /// The process holding the lock, as it recorded in the lock file
        /// (`None` if it recorded none).
        pid: Option<u32>,
    },
    /// An identity file is not a plain file (e.g. a symbolic link, which
    /// could make the peer read or overwrite another file), or the
    /// certificate exists without its key.
    #[error("identity file {}: {problem}", path.display())]
    IdentityFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it, and the fix.
        problem: IdentityFileProblem,
    },
    /// Connecting took longer than allowed.
    #[error("connecting to {0} timed out")]
    ConnectTimeout(SocketAddr),
    /// The connection failed before it was established.
    #[error("connection to {addr} failed: {reason}")]
    ConnectFailed {
        /// address dialled
        addr: SocketAddr,
        /// why
        reason: String,
    },
    /// All connection slots are in use.
    #[error("connection limit of {0} reached")]
    TooManyConnections(usize),
    /// A listener for that service address exists already.
    #[error("a listener for {0:?} exists already")]
    ListenerExists(ServiceAddress),
    /// No connection to that peer.
    #[error("not connected to {0}")]
    NotConnected(PeerId),
    /// The peer was closed ([`Peer::close`]) or dropped.
    #[error("the peer is closed")]
    Closed,
    /// An HTTP session could not be opened.
    #[error(transparent)]
    Http(#[from] crate::transport::http::HttpClientError),
    /// The advertisement cache could not be opened.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// A configured route is not usable (no hops, too long, loops).
    #[error("route: {0}")]
    Route(#[from] juxta_proto::endpoint::route_cache::RouteCacheError),
    /// No way to reach `peer`: no connection, no known route, and no
    /// usable route answer from the peers asked within
    /// [`PeerConfig::route_query_timeout`] (at once when there was nobody
    /// to ask). `tried` lists what was tried, in order.
    #[error("no route to {peer} (tried: {})", crate::relay::describe(tried))]
    NoRoute {
        /// The peer.
        peer: PeerId,
        /// What was tried.
        tried: Vec<crate::relay::RouteAttempt>,
    },
}

impl From<crate::relay::NoRoute> for PeerError {
    fn from(e: crate::relay::NoRoute) -> Self {
        PeerError::NoRoute {
            peer: e.peer,
            tried: e.tried,
        }
    }
}

/// What is wrong with an identity file ([`PeerError::IdentityFile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdentityFileProblem {
    /// The path is a symbolic link; it is never followed.
    #[error("is a symbolic link (refused: replace it with the file itself)")]
    Symlink,
    /// The path is a directory, device, FIFO or socket.
    #[error("is not a regular file")]
    NotRegularFile,
    /// The file is larger than any key or certificate PEM.
    #[error("is too large to be a PEM key or certificate")]
    TooLarge,
    /// `identity.crt` exists but `identity.key` does not: the key was lost
    /// and the certificate is useless.
    #[error("exists without identity.key (delete it to create a new identity)")]
    CertificateWithoutKey,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PeerError {
    let what = what.into();
    move |source| PeerError::Io { what, source }
}

crate::counters::counters! {
    /// A snapshot of the counters a peer keeps, taken by [`Peer::stats`].
    ///
    /// Each field is the count since the peer started. Take two
    /// snapshots and subtract to count over an interval.
    ///
    /// ```no_run
    /// # async fn demo(peer: juxta::Peer) {
    /// let before = peer.stats();
    /// // ... traffic ...
    /// let after = peer.stats();
    /// println!("{} messages in", after.messages_in - before.messages_in);
    /// # }
    /// ```
    pub struct Stats;
    /// The live counters behind [`Stats`], bumped where things happen.
    struct Counters;
    {
    /// Messages received for which no listener exists.
    unroutable,
    /// Messages that could not be delivered (bad router header, ...).
    undeliverable,
    /// Connections closed because of an error.
    connections_failed,
    /// Connections refused at the limit.
    connections_refused,
    /// Messages for a pipe with no input pipe here (dropped).
    unknown_pipe,
    /// Resolver messages that could not be parsed or answered.
    resolver_errors,
    /// Multicast datagrams dropped as malformed, unsigned or unverifiable.
    bad_datagrams,
    /// Discovery/peer-info queries and remote publishes dropped by the
    /// per-peer flow control.
    discovery_throttled,
    /// Advertisements received by discovery and not cached (malformed,
    /// oversized, wrongly signed, expired, refused by the cache).
    discovery_rejected,
    /// Discovery responses for no pending query (late), or beyond the
    /// bound of one query.
    discovery_late,
    /// Resolver messages for a group this peer has not joined (dropped).
    group_refused,
    /// Group messages dropped because they carried no valid member tag
    /// (certificate groups: a non-member or revoked member injecting, a
    /// forged or replayed tag).
    group_unauthenticated,
    /// Member certificates refused (at join: not signed by the group,
    /// expired, revoked, for another peer ID or group) and revocation
    /// lists refused (not signed by the group key).
    group_cert_refused,
    /// Routed messages this peer forwarded (relay).
    routed_forwarded,
    /// Routed messages refused by a loop rule or the hop limit.
    route_loops,
    /// Routed messages refused because their source was not proven
    /// (no or bad fingerprint on a relayed message).
    route_spoofed,
    /// Routed messages refused as malformed (router header missing,
    /// oversized, unparsable, not naming peers).
    route_malformed,
    /// Routed messages for another peer that this peer could not forward
    /// (no route, or not a relay).
    route_no_route,
    /// Relay requests refused because their connection had not proven its
    /// peer ID.
    relay_unauthenticated,
    /// Relay requests or relayed messages refused otherwise (full, queue
    /// full, quota, not leased, malformed control message); on an edge,
    /// refusals received from its relay.
    relay_refused,
    /// Connections closed because the peer that answered was not the peer
    /// dialled, or whose messages changed signing certificate.
    identity_refused,
    /// Signed messages that arrived again on another connection (replays;
    /// they prove no identity).
    replayed_signatures,
    /// Requests refused because they came from a peer that has not proven
    /// its ID (leases, SRDI, peer view, relay, binding answers, ...).
    unproven_refused,
    /// Dials another peer's message asked for (answering a query over the
    /// route it carried) not made: too many at once or too often
    /// (see `juxta_proto::resolver::node::MAX_ANSWER_DIALS`).
    dials_throttled,
    /// Routes not learned because nothing vouched for them: a route
    /// answer without a valid signed route of its destination naming the
    /// last hop (and not from this peer's own relay), a reverse hop from
    /// another link than this peer's relay, a relay lease carrying an
    /// invalid signed route (see [`crate::PeerConfig::accept_unsigned_routes`]).
    routes_unverified,
    /// Secure sessions refused because their peer already holds
    /// `MAX_SESSIONS_PER_PEER` (64) here.
    secure_sessions_refused,
    /// Connections closed because the welcome lines, or a compact handshake
    /// the remote started, did not complete within
    /// [`PeerConfig::welcome_timeout`].
    handshake_timeouts,
    /// Connections closed because a frame stayed incomplete for
    /// [`PeerConfig::frame_timeout`] (slowloris).
    frame_timeouts,
    /// Accepted connections closed because they sent nothing within
    /// [`PeerConfig::first_message_timeout`] of the welcome.
    first_message_timeouts,
    /// Connections closed by [`PeerConfig::idle_timeout`].
    idle_timeouts,
    /// Connections closed because a write made no progress for
    /// [`PeerConfig::write_timeout`] (the remote stopped reading).
    write_timeouts,
    /// Connections refused at accept: their address held
    /// [`PeerConfig::max_connections_per_addr`] connections.
    addr_refused,
    /// Connections refused at accept: their address held
    /// [`PeerConfig::max_pending_per_addr`] connections still exchanging
    /// welcome lines.
    addr_pending_refused,
    /// Service messages (resolver answers, discovery, rendezvous, relay and
    /// route traffic) refused because their connection's service queue
    /// ([`PeerConfig::service_queue`]) was full.
    service_refused,
    /// Bytes read from TCP connections (whole frames, as received).
    bytes_in,
    /// Bytes written to TCP connections (whole frames, as sent).
    bytes_out,
    /// Messages read from TCP connections.
    messages_in,
    /// Messages written to TCP connections.
    messages_out,
    }
}

/// One live connection, as listed by [`Peer::connections`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// This connection's number on this peer (unique while the peer runs):
    /// two messengers with the same `id` share one connection.
    pub id: u64,
    /// The remote peer.
    pub peer: PeerId,
    /// The remote's socket address.
    pub addr: SocketAddr,
    /// Bytes read on this connection.
    pub bytes_in: u64,
    /// Bytes written on this connection.
    pub bytes_out: u64,
    /// Whether both directions use compact framing.
    pub compact: bool,
    /// Whether the remote proved its peer ID (signature or handshake).
    pub proven: bool,
}

impl Counters {
    /// Counts one message of `len` bytes read.
    pub(crate) fn count_in(&self, len: usize) {
        self.bytes_in.fetch_add(len as u64, Ordering::Relaxed);
        self.messages_in.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one message of `len` bytes written.
    pub(crate) fn count_out(&self, len: usize) {
        self.bytes_out.fetch_add(len as u64, Ordering::Relaxed);
        self.messages_out.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) struct Inner {
    pub(crate) cfg: PeerConfig,
    pub(crate) identity: Arc<Identity>,
    pub(crate) public_addr: String,
    pub(crate) stats: Counters,
    pub(crate) next_conn_id: AtomicU64,
    pub(crate) slots: Arc<Semaphore>,
    /// Connections accepted per remote IP address.
    pub(crate) addr_limits: Arc<crate::transport::limits::AddrLimits>,
    connections: RwLock<juxta_proto::id::PeerMap<Arc<Connection>>>,
    by_addr: RwLock<HashMap<SocketAddr, PeerId>>,
    /// Dials in progress, one gate per address: a second dial to an
    /// address waits for the first and reuses its connection instead of
    /// opening a duplicate (services that start together, e.g. the
    /// rendezvous and relay clients, dial the same seed at once). An entry
    /// lives only while someone dials or waits, so the map is bounded by
    /// the callers.
    dialing: std::sync::Mutex<HashMap<SocketAddr, Arc<tokio::sync::Mutex<()>>>>,
    /// Who takes received messages: listeners, communicators' inboxes,
    /// pipe sinks, stream sockets by frame number.
    pub(crate) receivers: crate::endpoint::receivers::Receivers,
    pub(crate) pipes: crate::pipe::registry::PipeRegistry,
    pub(crate) secure: crate::pipe::secure::Sessions,
    pub(crate) self_ref: Weak<Inner>,
    /// The multicast transport, when configured.
    pub(crate) multicast: Option<Arc<crate::transport::multicast::Multicast>>,
    /// Discovery state: the advertisement cache, pending queries.
    pub(crate) discovery: crate::discovery::State,
    /// Peer groups joined.
    pub(crate) groups: crate::group::State,
    /// The rendezvous service, when configured (set once at start).
    pub(crate) rendezvous: std::sync::OnceLock<crate::rendezvous::RendezvousHandle>,
    /// Every long-lived task of the peer (connections, services, dials):
    /// ended by [`Peer::close`], aborted when the [`Peer`] is dropped (which
    /// closes the sockets: a peer dropped in-process disappears from the
    /// network as a stopped process does).
    pub(crate) tasks: crate::tasks::Tasks,
    /// Links (connections, HTTP sessions) coming up and going down, as
    /// they are registered and unregistered: services select on these
    /// instead of polling the connection table.
    pub(crate) links: tokio::sync::broadcast::Sender<LinkEvent>,
    /// Route cache, route queries, relay state.
    pub(crate) router: crate::relay::Router,
    /// Signed messages seen, so that a replayed one proves no identity.
    pub(crate) replay: std::sync::Mutex<juxta_proto::wire::replay::ReplayCache>,
    /// The RSA work remote peers can ask for (verifying the CBJX signature
    /// of each message they send in JXTA framing; signing the resolver's
    /// answers to them) takes a permit: at most all cores but one do it at
    /// once, so a flood of signed messages leaves a core for everything
    /// else (compact connections, local services) instead of holding the
    /// runtime's workers for a scheduling budget's worth of signatures.
    pub(crate) crypto: Semaphore,
    /// Joins, leaves and answer dial ends for the resolver task, whose
    /// machine (scoping, answer dials) is its own.
    pub(crate) notices: crate::resolver::Notices,
    /// Queries and responses a group's node (its rendezvous task) admitted
    /// for the services the resolver task runs.
    pub(crate) admitted: tokio::sync::mpsc::Sender<crate::resolver::Admitted>,
    /// Commands to the resolver task (pipe resolutions, remote searches):
    /// it owns their state.
    pub(crate) commands: crate::resolver::Commands,
    /// The peer's clock: every machine of the peer takes its time from
    /// here ([`juxta_proto::time`]).
    pub(crate) clock: juxta_proto::time::Clock,
    /// HTTP sessions being opened, by server address: a second dial of
    /// the same address waits for the first and reuses its session (a
    /// server keeps one session per peer, so two opened at once would
    /// close one another's).
    pub(crate) http_dials: crate::transport::http::DialLocks,
}

/// A link to a peer came up or went down ([`Inner::links`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkEvent {
    /// A connection (or HTTP session) to the peer is registered: the peer
    /// is reachable directly.
    Up(PeerId),
    /// The peer's registered connection closed: no direct link is left.
    Down(PeerId),
}

/// Link events buffered per subscriber; one that falls further behind
/// gets `Lagged` and must look at the connection table once.
pub(crate) const LINK_EVENTS: usize = 1024;

/// Permits of [`Inner::crypto`]: all cores but one, at least one.
fn crypto_permits() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .max(1)
}

impl Inner {
    /// Makes `conn` the connection used for its peer, unless a live one
    /// with at least as strong a proof is registered already (a closed one
    /// is replaced; a proven connection replaces one whose peer ID is only
    /// claimed, never the reverse).
    pub(crate) fn register(&self, conn: &Arc<Connection>) {
        let mut map = self.connections.write().expect("connections lock");
        match map.get(&conn.remote) {
            Some(existing)
                if !existing.is_closed()
                    && (existing.proof().is_proven() || !conn.proof().is_proven()) => {}
            _ => {
                map.insert(conn.remote, conn.clone());
                let _ = self.links.send(LinkEvent::Up(conn.remote));
            }
        }
    }

    /// Checks a signed message for replay: whether it may prove its
    /// connection's peer ID (new, or a retransmission on the same
    /// connection). A replay is counted.
    pub(crate) fn fresh_signature(&self, conn: &Connection, tag: [u8; 16]) -> bool {
        use juxta_proto::wire::replay::Seen;
        let seen = self
            .replay
            .lock()
            .expect("replay lock")
            .check(&conn.remote, tag, conn.id);
        if seen == Seen::OtherConnection {
            let n = self
                .stats
                .replayed_signatures
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            if n.is_power_of_two() {
                tracing::warn!(remote = %conn.remote, peer_addr = %conn.peer_addr, replays = n, "signed message replayed from another connection: it proves nothing");
            }
            return false;
        }
        true
    }

    /// Empties the connection table, shutting every socket left down (the
    /// tasks that would have are gone): a closed or dropped peer holds no
    /// socket open through a handle that outlives it.
    pub(crate) fn drop_connections(&self) {
        let conns: Vec<Arc<Connection>> = self
            .connections
            .write()
            .expect("connections lock")
            .drain()
            .map(|(_, c)| c)
            .collect();
        self.by_addr.write().expect("by_addr lock").clear();
        for c in conns {
            c.abort_socket();
        }
    }

    pub(crate) fn unregister(&self, conn: &Arc<Connection>) {
        let mut map = self.connections.write().expect("connections lock");
        if map.get(&conn.remote).map(|c| c.id) == Some(conn.id) {
            map.remove(&conn.remote);
            let _ = self.links.send(LinkEvent::Down(conn.remote));
        }
    }

    pub(crate) async fn dispatch(&self, conn: &Arc<Connection>, m: Incoming) {
        // A communicator's traffic (the bulk of a parallel job's messages)
        // goes straight into its queue, as its address is on the wire:
        // what `on_link_message` would deliver, without rewriting the
        // address or passing through a listener's channel.
        if let Some(inbox) = self.receivers.inbox(|i| i.wire_to == *m.to) {
            inbox
                .deliver(
                    Some(conn.remote),
                    conn.proof().is_proven(),
                    false,
                    m.message,
                )
                .await;
            return;
        }
        let to = conn.addresses.demangled(m.to);
        if !crate::relay::route::is_router_or_relay(&to.1) {
            // The usual case (a listener's or a pipe's message), handed
            // over without an await unless its queue is full.
            let d = crate::relay::route::link_delivery(conn, to, m.message);
            if let Some(wait) = self.try_hand_over(conn.remote, d) {
                self.hand_over_waiting(wait).await;
            }
            return;
        }
        let Some(me) = self.self_ref.upgrade() else {
            return;
        };
        // Router and relay traffic is checked (and maybe forwarded) first.
        if let Some(d) = crate::relay::route::on_link_message(&me, conn, to, m.message).await {
            self.hand_over(conn.remote, d).await;
        }
    }

    /// Delivers a message from `remote` (a connection's peer, or a
    /// multicast datagram's verified source) addressed to `to` (as on the
    /// wire) to its listener.
    pub(crate) async fn dispatch_from(
        &self,
        remote: PeerId,
        proof: Proof,
        to: ServiceAddress,
        message: juxta_proto::message::Message,
    ) {
        let d = match endpoint::deliver(self.identity.peer_id(), to, Some(remote), proof, message) {
            Ok(d) => d,
            Err(e) => {
                self.stats.undeliverable.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%remote, error = %e, "message dropped");
                return;
            }
        };
        self.hand_over(remote, d).await
    }

    /// Hands a delivery to its listener (or pipe sink).
    async fn hand_over(&self, remote: PeerId, d: Delivery) {
        if let Some(wait) = self.try_hand_over(remote, d) {
            self.hand_over_waiting(wait).await;
        }
    }

    /// Hands a delivery to its listener (or pipe sink) without waiting:
    /// the usual case, kept out of any future (a delivery moved through
    /// the states of an async hand-over was copied several times per
    /// message). What has to wait comes back.
    fn try_hand_over(&self, remote: PeerId, d: Delivery) -> Option<HandOver> {
        if d.to.service == crate::pipe::secure::TLS_SERVICE {
            // Secure pipe records are decrypted on the connection's
            // reader: one task switch less per message.
            return Some(HandOver::Records(d));
        }
        if d.to.service == crate::pipe::PIPE_SERVICE {
            // Sockets take their messages straight from the connection's
            // reader: no queue and no task switch on the data path.
            let sink = d.to.param.as_ref().and_then(|p| self.receivers.sink(p));
            if let Some(sink) = sink {
                sink.deliver(d);
                return None;
            }
        }
        if let Some(inbox) = self.receivers.inbox(|i| i.to == *d.to) {
            // A communicator's message that came another way (a route).
            return Some(HandOver::Inbox(inbox, d));
        }
        match self.receivers.listener(&d.to) {
            Some(tx) => match tx.try_send(d) {
                Ok(()) => None,
                // A full queue makes this connection stop reading:
                // back-pressure to the sender, nothing dropped.
                Err(mpsc::error::TrySendError::Full(d)) => Some(HandOver::Full(tx, d)),
                Err(mpsc::error::TrySendError::Closed(d)) => {
                    self.stats.unroutable.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(to = ?d.to, "listener gone; message dropped");
                    None
                }
            },
            None if d.to.service == crate::pipe::PIPE_SERVICE => {
                let n = self.stats.unknown_pipe.fetch_add(1, Ordering::Relaxed) + 1;
                // Logged at info for the 1st, 2nd, 4th, 8th, ... so a flood
                // cannot flood the log; the counter has the exact number.
                if n.is_power_of_two() {
                    tracing::info!(%remote, pipe = ?d.to.param, dropped = n, "message for an unknown pipe dropped");
                } else {
                    tracing::debug!(%remote, pipe = ?d.to.param, "message for an unknown pipe dropped");
                }
                None
            }
            None => {
                self.stats.unroutable.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%remote, to = ?d.to, "no listener; message dropped");
                None
            }
        }
    }

    /// The rest of a hand-over that has to wait (see
    /// [`Inner::try_hand_over`]).
    async fn hand_over_waiting(&self, wait: HandOver) {
        match wait {
            HandOver::Records(d) => crate::pipe::secure::on_records_direct(self, d).await,
            HandOver::Inbox(inbox, d) => {
                inbox.deliver(d.from, d.proven(), d.routed, d.message).await
            }
            HandOver::Full(tx, d) => {
                if let Err(e) = tx.send(d).await {
                    self.stats.unroutable.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(to = ?e.0.to, "listener gone; message dropped");
                }
            }
        }
    }

    /// Delivers a message that arrived propagated or walked (its header
    /// named `to`) to the listener here, without waiting: a full listener
    /// queue refuses it (counted in [`Stats::unroutable`] and logged), so the
    /// rendezvous task that calls this never blocks on a slow service.
    /// `vouched_in`: the group whose rendezvous propagated it under a
    /// verified member seal ([`Delivery::vouched_in`]).
    pub(crate) fn deliver_local(
        &self,
        from: PeerId,
        to: ServiceAddress,
        message: juxta_proto::message::Message,
        vouched_in: Option<String>,
    ) {
        if let Some(inbox) = self.receivers.inbox(|i| i.to == to) {
            if !inbox.try_deliver(Some(from), message) {
                self.stats.unroutable.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let to = Arc::new(to);
        let tx = self.receivers.listener(&to);
        let d = Delivery {
            group: None,
            to: to.clone(),
            from: Some(from),
            message,
            routed: false,
            // Propagated or walked: the origin is as the header says.
            proof: Proof::Claimed,
            vouched_in,
        };
        let ok = tx.is_some_and(|tx| tx.try_send(d).is_ok());
        if !ok {
            self.stats.unroutable.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%from, ?to, "propagated message not delivered (no listener or queue full)");
        }
    }

    /// Registers a communicator's inbox (its address must be free).
    pub(crate) fn add_mp_inbox(&self, inbox: Arc<crate::mp::Inbox>) -> Result<(), PeerError> {
        let to = inbox.to.clone();
        self.receivers
            .add_inbox(inbox)
            .map_err(|_| PeerError::ListenerExists(to))
    }

    /// Unregisters a communicator's inbox.
    pub(crate) fn remove_mp_inbox(&self, inbox: &Arc<crate::mp::Inbox>) {
        self.receivers.remove_inbox(inbox);
    }

    /// Registers a listener for `to` (not mangled).
    pub(crate) fn add_listener(&self, to: ServiceAddress) -> Result<Listener, PeerError> {
        match self.receivers.add_listener(&to, self.cfg.listener_queue) {
            Ok(rx) => Ok(Listener::new(to, rx, self.self_ref.clone())),
            Err(_) => Err(PeerError::ListenerExists(to)),
        }
    }

    /// The live connection to `peer`, if there is one.
    pub(crate) fn connection(&self, peer: &PeerId) -> Option<Arc<Connection>> {
        self.connections
            .read()
            .expect("connections lock")
            .get(peer)
            .filter(|c| !c.is_closed())
            .cloned()
    }

    /// A messenger to `peer`: over the live connection to it, else through
    /// a cached route whose first hop is connected (the endpoint router).
    pub(crate) fn messenger(&self, peer: &PeerId) -> Option<Messenger> {
        let me = self.self_ref.upgrade()?;
        if let Some(c) = self.connection(peer) {
            return Some(Messenger::new(c, me));
        }
        let now = self.router.now_ms();
        let hops = self
            .router
            .cache
            .lock()
            .expect("route lock")
            .lookup(peer, now)?
            .to_vec();
        let first = self.connection(&hops[0])?;
        Some(Messenger::routed(first, me, *peer, hops[1..].to_vec()))
    }

    /// Peers with a live connection.
    pub(crate) fn connected_peers(&self) -> Vec<PeerId> {
        self.connections
            .read()
            .expect("connections lock")
            .iter()
            .filter(|(_, c)| !c.is_closed())
            .map(|(p, _)| *p)
            .collect()
    }

    /// The group this peer's traffic is addressed in (`jxta-NetGroup`).
    pub(crate) fn group_unique(&self) -> &str {
        &self.cfg.connection.group_unique
    }

    pub(crate) fn remove_listener(&self, to: &ServiceAddress) {
        self.receivers.remove_listener(to);
    }
}

/// A JXTA peer.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use juxta::{Peer, PeerConfig};
/// use juxta_proto::message::{Element, Message};
/// let a = Peer::start(PeerConfig::new("/tmp/a").listen("127.0.0.1:0".parse()?)).await?;
/// let b = Peer::start(PeerConfig::new("/tmp/b")).await?;
/// let mut inbox = a.listen("chat", None)?;
/// let to_a = b.connect(a.local_addr().unwrap()).await?;
/// to_a.send("chat", None, Message::new().with(Element::text("", "text", "hi"))).await?;
/// let got = inbox.recv().await.unwrap();
/// assert_eq!(got.message.get("", "text").unwrap().as_str(), Some("hi"));
/// # Ok(()) }
/// ```
pub struct Peer {
    pub(crate) inner: Arc<Inner>,
    local_addr: Option<SocketAddr>,
    /// The TCP and HTTP accept loops: stopped first on close.
    accept_tasks: Vec<tokio::task::AbortHandle>,
    /// The relay lease task (an edge's): stopped before its lease is given
    /// back, so that it does not lease again.
    relay_task: Option<tokio::task::AbortHandle>,
    rendezvous: Option<crate::rendezvous::RendezvousHandle>,
    http: Option<Arc<crate::transport::http::HttpServer>>,
    pub(crate) lan: Option<crate::lan::LanHandle>,
    /// Set by the first [`Peer::close`].
    closing: std::sync::atomic::AtomicBool,
    /// The lock on the home directory: released at the end of
    /// [`Peer::close`], else when the peer is dropped (the last field, so
    /// after everything else a `Peer` owns).
    home_lock: std::sync::Mutex<Option<HomeLock>>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        for t in &self.accept_tasks {
            t.abort();
        }
        self.inner.tasks.abort_all();
        self.inner.drop_connections();
    }
}

/// Aborts a peer's tasks when dropped armed (a failed start).
struct AbortOnDrop(Option<Arc<Inner>>);

impl AbortOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            inner.tasks.abort_all();
        }
    }
}

/// How long [`Peer::close`] may take: the leases, the close handshakes
/// and the tasks' ends are awaited this long at most.
pub const CLOSE_BOUND: Duration = Duration::from_secs(2);

/// What [`Peer::close`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CloseReport {
    /// Edge: the rendezvous lease was ended with a `Disconnect` (the
    /// rendezvous releases it and this edge's SRDI entries at once).
    pub rendezvous_released: bool,
    /// Edge: the relay lease was given back with a `Disconnect`.
    pub relay_released: bool,
    /// Connections closed with the close handshake: TCP connections whose
    /// remote answered this peer's FIN with its own, HTTP sessions ended.
    pub connections_closed: usize,
    /// TCP connections whose remote had not answered by the bound (cut).
    pub connections_cut: usize,
    /// Tasks that had ended on their own (connections after their close
    /// handshake, finished dials).
    pub tasks_finished: usize,
    /// Service tasks (accept loops, the resolver, rendezvous, relay, ...)
    /// cancelled at an await point, and ended.
    pub tasks_cancelled: usize,
    /// Tasks still running at the bound: aborted (they end at their next
    /// await point) and counted here; `close` then returns
    /// [`CloseError::TasksAborted`].
    pub tasks_aborted: usize,
    /// How long the close took.
    pub elapsed: Duration,
}

/// Why [`Peer::close`] did not close cleanly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseError {
    /// The peer was closed before (by another call).
    #[error("the peer is already closed")]
    AlreadyClosed,
    /// Some tasks did not end within the bound and were aborted; the
    /// peer is closed all the same (its listeners stopped, its home
    /// unlocked).
    #[error("{} task(s) did not end within {bound:?} and were aborted", report.tasks_aborted)]
    TasksAborted {
        /// The bound.
        bound: Duration,
        /// What was done.
        report: CloseReport,
    },
}

impl Peer {
    /// Shuts the peer down gracefully, within [`CLOSE_BOUND`]:
    /// 1. stops accepting connections (TCP and HTTP listeners);
    /// 2. an edge gives its leases back: the rendezvous lease (its
    ///    `Disconnect`, see [`crate::rendezvous::RendezvousHandle::shutdown`])
    ///    and the relay lease;
    /// 3. closes every connection with the close handshake (what is queued
    ///    is written, then FIN; the remote answers with its FIN), waiting
    ///    for the remotes up to half the bound;
    /// 4. ends every task the peer spawned and awaits them up to the bound
    ///    (a task still running then is aborted and counted);
    /// 5. releases the home directory's lock.
    ///
    /// Afterwards the handles that outlive the peer (messengers, listeners,
    /// pipes) fail or end; nothing of the peer runs any more. Dropping a
    /// `Peer` without closing it aborts its tasks at once (no leases given
    /// back, no close handshake).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use juxta::{Peer, PeerConfig};
    /// let peer = Peer::start(PeerConfig::new("/tmp/p").listen("127.0.0.1:0".parse()?)).await?;
    /// // ... use the peer ...
    /// let report = peer.close().await?;
    /// println!("closed in {:?}: {} connection(s)", report.elapsed, report.connections_closed);
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) -> Result<CloseReport, CloseError> {
        self.close_within(CLOSE_BOUND).await
    }

    /// [`Peer::close`] with another bound than [`CLOSE_BOUND`].
    pub async fn close_within(&self, bound: Duration) -> Result<CloseReport, CloseError> {
        use std::sync::atomic::Ordering as O;
        if self.closing.swap(true, O::AcqRel) {
            return Err(CloseError::AlreadyClosed);
        }
        let t0 = tokio::time::Instant::now();
        let deadline = t0 + bound;
        let links_deadline = t0 + bound / 2;
        let mut report = CloseReport::default();
        // 1. Nobody new comes in.
        for t in &self.accept_tasks {
            t.abort();
        }
        // 2. Leases: the relay's first (its task stopped so that it does
        // not lease again), then the rendezvous'.
        if let Some(t) = &self.relay_task {
            // An abort takes effect only when the task next waits, and the
            // lease task can run several steps (a reconnect, a new lease)
            // without waiting when events are ready: it is told to stop,
            // and the release below waits until it has.
            self.inner.router.stop_client();
            t.abort();
            while !t.is_finished() && tokio::time::Instant::now() < links_deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        report.relay_released = crate::relay::release_lease(&self.inner);
        if let Some(h) = self
            .rendezvous
            .as_ref()
            .filter(|h| !h.status().is_rendezvous)
        {
            let leased = h.status().leased_to.is_some();
            let r = tokio::time::timeout_at(links_deadline, h.shutdown()).await;
            report.rendezvous_released = leased && matches!(r, Ok(Ok(())));
        }
        // 3. Close handshakes, all at once.
        let conns: Vec<Arc<Connection>> = self
            .inner
            .connections
            .read()
            .expect("connections lock")
            .values()
            .cloned()
            .collect();
        let mut closing = tokio::task::JoinSet::new();
        for c in conns {
            closing.spawn(async move {
                if c.begin_close().await {
                    c.closed().await;
                }
            });
        }
        while !closing.is_empty() {
            match tokio::time::timeout_at(links_deadline, closing.join_next()).await {
                Ok(Some(_)) => report.connections_closed += 1,
                Ok(None) => break,
                Err(_) => {
                    report.connections_cut = closing.len();
                    closing.abort_all();
                    break;
                }
            }
        }
        // 4. Every task.
        let stopped = self.inner.tasks.stop(deadline).await;
        report.tasks_finished = stopped.finished;
        report.tasks_cancelled = stopped.cancelled;
        report.tasks_aborted = stopped.stuck;
        self.inner.drop_connections();
        // 5. The home is free.
        drop(self.home_lock.lock().expect("home lock").take());
        report.elapsed = t0.elapsed();
        tracing::info!(
            peer = %self.peer_id(),
            elapsed_ms = report.elapsed.as_secs_f64() * 1e3,
            connections_closed = report.connections_closed,
            connections_cut = report.connections_cut,
            tasks_aborted = report.tasks_aborted,
            "peer closed"
        );
        if report.tasks_aborted > 0 {
            return Err(CloseError::TasksAborted { bound, report });
        }
        Ok(report)
    }
}

/// An exclusive advisory lock (`flock`) on `<home>/lock`, held while a
/// [`Peer`] runs so that two peers never share a home (its identity files
/// and cache); the holder writes its process ID in the file, for the
/// error a second peer gets. Released when dropped (or when the process
/// exits).
#[derive(Debug)]
pub(crate) struct HomeLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl HomeLock {
    /// Creates `home` if needed and locks it, or fails with
    /// [`PeerError::HomeLocked`] if another peer holds the lock.
    pub(crate) fn acquire(home: &Path) -> Result<HomeLock, PeerError> {
        use nix::fcntl::{Flock, FlockArg};
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(home).map_err(io_err(format!("creating {}", home.display())))?;
        let path = home.join("lock");
        let file = open_nofollow(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600),
            &path,
        )?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => {
                use std::io::Write;
                // Best effort: the lock holds without the note.
                let mut f: &std::fs::File = &lock;
                let _ = f
                    .set_len(0)
                    .and_then(|()| write!(f, "{}", std::process::id()));
                Ok(HomeLock { _lock: lock })
            }
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                use std::io::Read;
                let mut text = String::new();
                let pid = (&mut file)
                    .take(32)
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok());
                Err(PeerError::HomeLocked {
                    path: home.to_path_buf(),
                    pid,
                })
            }
            Err((_, e)) => Err(PeerError::Io {
                what: format!("locking {}", path.display()),
                source: e.into(),
            }),
        }
    }
}

/// Opens `path` without following a symbolic link in its last component
/// (`O_NOFOLLOW`) and without blocking on a FIFO (`O_NONBLOCK`), and checks
/// that it is a regular file.
fn open_nofollow(opts: &mut std::fs::OpenOptions, path: &Path) -> Result<std::fs::File, PeerError> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = opts.custom_flags(flags.bits()).open(path).map_err(|e| {
        if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) {
            PeerError::IdentityFile {
                path: path.to_path_buf(),
                problem: IdentityFileProblem::Symlink,
            }
        } else {
            PeerError::Io {
                what: format!("opening {}", path.display()),
                source: e,
            }
        }
    })?;
    let meta = file
        .metadata()
        .map_err(io_err(format!("reading {}", path.display())))?;
    if !meta.is_file() {
        return Err(PeerError::IdentityFile {
            path: path.to_path_buf(),
            problem: IdentityFileProblem::NotRegularFile,
        });
    }
    Ok(file)
}

/// Reads an identity file (at most [`MAX_PEM_LEN`](juxta_proto::identity::MAX_PEM_LEN)
/// bytes, never through a symbolic link); `None` if it does not exist.
fn read_identity_file(path: &Path) -> Result<Option<String>, PeerError> {
    use std::io::Read;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(PeerError::Io {
                what: format!("reading {}", path.display()),
                source: e,
            })
        }
        Ok(_) => {}
    }
    let file = open_nofollow(std::fs::OpenOptions::new().read(true), path)?;
    let limit = juxta_proto::identity::MAX_PEM_LEN as u64;
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(io_err(format!("reading {}", path.display())))?;
    if text.len() as u64 > limit {
        return Err(PeerError::IdentityFile {
            path: path.to_path_buf(),
            problem: IdentityFileProblem::TooLarge,
        });
    }
    Ok(Some(text))
}

/// Creates a new identity file: `O_CREAT | O_EXCL | O_NOFOLLOW`, so an
/// existing file or symbolic link is never written through or replaced.
fn write_new_file(path: &Path, text: &str, private: bool) -> Result<(), PeerError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    if private {
        opts.mode(0o600);
    }
    let mut f = open_nofollow(&mut opts, path)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err(format!("writing {}", path.display())))
}

/// Loads the identity in `cfg.home` (`identity.key`, `identity.crt`), or
/// creates one on first start. Files are never followed through symbolic
/// links nor overwritten; a lost certificate is issued again from the key.
/// The caller holds the home's [`HomeLock`].
fn load_or_create_identity(cfg: &PeerConfig) -> Result<Identity, PeerError> {
    let home = &cfg.home;
    let key_path = home.join("identity.key");
    let crt_path = home.join("identity.crt");
    let id_err = |source| PeerError::Identity {
        path: home.display().to_string(),
        source,
    };
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs()
    };
    match (
        read_identity_file(&key_path)?,
        read_identity_file(&crt_path)?,
    ) {
        (Some(key), Some(crt)) => Identity::from_pem(&key, &crt).map_err(id_err),
        (Some(key), None) => {
            let id = Identity::from_key_pem(&mut rand::thread_rng(), &key, &cfg.name, now())
                .map_err(id_err)?;
            let (_, crt) = id.to_pem().map_err(id_err)?;
            write_new_file(&crt_path, &crt, false)?;
            tracing::warn!(
                peer = %id.peer_id(),
                home = %home.display(),
                "identity.crt was missing: issued a new certificate for the existing key"
            );
            Ok(id)
        }
        (None, Some(_)) => Err(PeerError::IdentityFile {
            path: crt_path,
            problem: IdentityFileProblem::CertificateWithoutKey,
        }),
        (None, None) => {
            let id = Identity::generate(&mut rand::thread_rng(), cfg.key_bits, &cfg.name, now())
                .map_err(id_err)?;
            let (key, crt) = id.to_pem().map_err(id_err)?;
            write_new_file(&key_path, &key, true)?;
            write_new_file(&crt_path, &crt, false)?;
            tracing::info!(peer = %id.peer_id(), home = %home.display(), "created a new identity");
            Ok(id)
        }
    }
}

impl Peer {
    /// Starts a peer: loads (or creates) its identity in the home directory
    /// and, if configured, listens for TCP connections.
    ///
    /// The home directory is locked for as long as the peer lives: a second
    /// peer started on the same home, in this process or another, fails
    /// with [`PeerError::HomeLocked`] until this one is dropped.
    ///
    /// A peer with no listen address and rendezvous seeds also leases a
    /// relay there unless configured otherwise
    /// ([`PeerConfig::auto_relay`]); [`Peer::relay`] is then set.
    pub async fn start(mut cfg: PeerConfig) -> Result<Peer, PeerError> {
        cfg = cfg.with_lan_defaults();
        // A peer nobody can dial leases its rendezvous seed as relay
        // unless told otherwise (`PeerConfig::auto_relay`).
        cfg.relay = cfg.effective_relay();
        let home_lock = HomeLock::acquire(&cfg.home)?;
        let identity = Arc::new(load_or_create_identity(&cfg)?);
        let multicast = crate::transport::multicast::Multicast::open(&cfg, &identity)?;
        let cache = crate::cache::CacheHandle::spawn(
            crate::cache::AdvCache::open_with(
                cfg.cache_path(),
                crate::cache::CacheConfig::default(),
                crate::cache::OnCorrupt::MoveAside,
            )?,
            1024,
        )?;
        let discovery = crate::discovery::State::new(cache.clone(), cfg.discovery);
        let (admitted, admitted_rx) = tokio::sync::mpsc::channel(crate::resolver::ADMITTED_QUEUE);
        let (commands, commands_rx) =
            crate::resolver::Commands::channel(crate::resolver::COMMAND_QUEUE);
        let (notices, notices_rx) =
            crate::resolver::Notices::channel(crate::resolver::NOTICE_QUEUE);
        let clock = juxta_proto::time::Clock::new();
        let listener = match cfg.listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(io_err(format!("listening on {addr}")))?,
            ),
            None => None,
        };
        let local_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        let public_addr = match local_addr {
            Some(a) => format!("tcp://{a}"),
            None => "tcp://127.0.0.1:0".to_string(),
        };
        let local_peer = *identity.peer_id();
        let cfg_relay = cfg.relay.clone();
        let inner = Arc::new_cyclic(|w| Inner {
            slots: Arc::new(Semaphore::new(cfg.max_connections)),
            addr_limits: crate::transport::limits::AddrLimits::new(
                cfg.max_connections_per_addr,
                cfg.max_pending_per_addr,
            ),
            cfg,
            identity,
            public_addr,
            stats: Counters::default(),
            next_conn_id: AtomicU64::new(1),
            connections: RwLock::new(Default::default()),
            by_addr: RwLock::new(HashMap::new()),
            dialing: std::sync::Mutex::new(HashMap::new()),
            receivers: Default::default(),
            pipes: crate::pipe::registry::PipeRegistry::new(),
            secure: Default::default(),
            self_ref: w.clone(),
            multicast,
            discovery,
            groups: Default::default(),
            rendezvous: std::sync::OnceLock::new(),
            tasks: Default::default(),
            links: tokio::sync::broadcast::channel(LINK_EVENTS).0,
            router: crate::relay::Router::new(local_peer, cfg_relay.as_ref(), clock),
            crypto: Semaphore::new(crypto_permits()),
            notices,
            admitted,
            commands,
            clock,
            http_dials: Default::default(),
            replay: std::sync::Mutex::new(juxta_proto::wire::replay::ReplayCache::new(
                juxta_proto::wire::replay::DEFAULT_REPLAY_CAPACITY,
            )),
        });
        // A start that fails half-way ends what it started.
        let guard = AbortOnDrop(Some(inner.clone()));
        let mut accept_tasks = Vec::new();
        if let Some(l) = listener {
            let t = tokio::spawn(accept_loop(inner.clone(), l));
            accept_tasks.push(t.abort_handle());
            inner.tasks.adopt(t);
        }
        let tasks = &inner.tasks;
        tasks.adopt(crate::resolver::spawn(
            &inner,
            admitted_rx,
            commands_rx,
            notices_rx,
        )?);
        tasks.adopt(crate::pipe::secure::spawn(&inner)?);
        if let Some(t) = crate::transport::multicast::spawn(&inner) {
            tasks.adopt(t);
        }
        crate::discovery::publish_own(&inner).await?;
        let purge =
            cache.purge_periodically(Duration::from_secs(60), 1000, crate::cache::unix_now_ms);
        tasks.spawn(async move {
            if let Err(e) = purge.await {
                tracing::warn!(error = %e, "advertisement cache purge stopped");
            }
        });
        let http = match inner.cfg.http_listen {
            Some(addr) => {
                let (server, tasks) =
                    crate::transport::http::listen(&inner, addr, inner.cfg.http.clone())
                        .await
                        .map_err(io_err(format!("listening for HTTP on {addr}")))?;
                // The first task accepts.
                accept_tasks.extend(tasks.first().map(|t| t.abort_handle()));
                for t in tasks {
                    inner.tasks.adopt(t);
                }
                Some(server)
            }
            None => None,
        };
        let rendezvous = match inner.cfg.rendezvous.clone() {
            Some(rc) => {
                let (h, t) = crate::rendezvous::spawn(&inner, rc)?;
                tasks.adopt(t);
                let _ = inner.rendezvous.set(h.clone());
                Some(h)
            }
            None => None,
        };
        let mut relay_task = None;
        if let Some(rc) = inner.cfg.relay.clone() {
            let (_h, t) = crate::relay::spawn(&inner, rc)?;
            relay_task = t.as_ref().map(|t| t.abort_handle());
            if let Some(t) = t {
                tasks.adopt(t);
            }
        }
        let lan = match (inner.cfg.lan, &rendezvous) {
            (Some(lc), Some(rdv)) => {
                let (h, t) = crate::lan::spawn(&inner, lc, rdv.clone(), local_addr);
                if let Some(t) = t {
                    tasks.adopt(t);
                }
                h
            }
            _ => None,
        };
        tracing::info!(peer = %inner.identity.peer_id(), listen = ?local_addr, "peer started");
        guard.disarm();
        Ok(Peer {
            inner,
            local_addr,
            accept_tasks,
            relay_task,
            rendezvous,
            http,
            lan,
            closing: Default::default(),
            home_lock: std::sync::Mutex::new(Some(home_lock)),
        })
    }

    /// This peer's ID.
    pub fn peer_id(&self) -> PeerId {
        *self.inner.identity.peer_id()
    }

    /// This peer's identity.
    pub fn identity(&self) -> &Arc<Identity> {
        &self.inner.identity
    }

    /// The address the peer listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// A snapshot of this peer's counters ([`Stats`]).
    pub fn stats(&self) -> Stats {
        self.inner.stats.snapshot()
    }

    /// Number of open connections.
    pub fn connection_count(&self) -> usize {
        self.inner
            .connections
            .read()
            .expect("connections lock")
            .len()
    }

    /// A snapshot of the live connections (peer, address, traffic).
    ///
    /// ```no_run
    /// # async fn demo(peer: juxta::Peer) {
    /// for c in peer.connections() {
    ///     println!("{} at {}: {} B in, {} B out", c.peer, c.addr, c.bytes_in, c.bytes_out);
    /// }
    /// # }
    /// ```
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        self.inner
            .connections
            .read()
            .expect("connections lock")
            .values()
            .filter(|c| !c.is_closed())
            .map(|c| c.info())
            .collect()
    }

    /// Registers a listener for `service`/`param` in the Net peer group.
    /// Messages whose param has no listener of its own go to the listener
    /// registered with `param = None`.
    pub fn listen(&self, service: &str, param: Option<&str>) -> Result<Listener, PeerError> {
        self.inner.add_listener(ServiceAddress::new(service, param))
    }

    /// A messenger over an existing connection to `peer`, or else through
    /// a known route (see [`Peer::route_to`] to find one).
    pub fn messenger(&self, peer: &PeerId) -> Result<Messenger, PeerError> {
        let c = self
            .inner
            .connections
            .read()
            .expect("connections lock")
            .get(peer)
            .cloned();
        match c {
            Some(c) => Ok(Messenger::new(c, self.inner.clone())),
            None => self
                .inner
                .messenger(peer)
                .ok_or(PeerError::NotConnected(*peer)),
        }
    }

    /// Whether this peer has a live direct connection to `peer`.
    pub fn is_connected_to(&self, peer: &PeerId) -> bool {
        self.inner.connection(peer).is_some()
    }

    /// Connects to the peer at `addr` (reusing a live connection to it) and
    /// returns a messenger once both welcome lines are exchanged.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Messenger, PeerError> {
        connect_to(&self.inner, addr).await
    }

    /// Opens an HTTP session with the peer listening for HTTP at `addr`
    /// (JXTA's HTTP transport, for edges that can only speak HTTP) and
    /// returns a messenger to it. The session is a connection like a TCP
    /// one: [`Peer::messenger`], pipes, sockets and the resolver use it.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use juxta::{Peer, PeerConfig};
    /// let relay = Peer::start(PeerConfig::new("/tmp/r").http_listen("127.0.0.1:0".parse()?)).await?;
    /// let edge = Peer::start(PeerConfig::new("/tmp/e")).await?;
    /// let to_relay = edge.connect_http(relay.http_local_addr().unwrap()).await?;
    /// assert_eq!(to_relay.remote(), relay.peer_id());
    /// # Ok(()) }
    /// ```
    pub async fn connect_http(&self, addr: SocketAddr) -> Result<Messenger, PeerError> {
        Ok(crate::transport::http::connect(&self.inner, addr, self.inner.cfg.http.clone()).await?)
    }

    /// The address the HTTP listener is bound to, if there is one.
    pub fn http_local_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }

    /// The HTTP listener (sessions, counters), if there is one.
    pub fn http_server(&self) -> Option<&Arc<crate::transport::http::HttpServer>> {
        self.http.as_ref()
    }

    /// The rendezvous service, when [`PeerConfig::rendezvous`] is set.
    pub fn rendezvous(&self) -> Option<&crate::rendezvous::RendezvousHandle> {
        self.rendezvous.as_ref()
    }
}

/// Counts (and logs, once per power of two) a request refused because its
/// sender has not proven its peer ID.
pub(crate) fn count_unproven(inner: &Inner, from: &PeerId, service: &'static str) {
    let n = inner.stats.unproven_refused.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::info!(%from, service, refused = n, "request from a peer that has not proven its ID refused");
    }
}

/// [`Peer::connect`] for service tasks.
pub(crate) async fn connect_to(
    inner: &Arc<Inner>,
    addr: SocketAddr,
) -> Result<Messenger, PeerError> {
    connect_to_peer(inner, addr, None).await
}

/// Connects to `addr`; with `expected`, the remote must be that peer (a
/// welcome naming another closes the connection, counted in
/// [`Stats::identity_refused`]): a dial triggered by a route or an address
/// another peer sent must reach the peer it named.
pub(crate) async fn connect_to_peer(
    inner: &Arc<Inner>,
    addr: SocketAddr,
    expected: Option<PeerId>,
) -> Result<Messenger, PeerError> {
    if inner.tasks.is_stopped() {
        return Err(PeerError::Closed);
    }
    // A live connection is reused without queueing behind the gate.
    if let Some(m) = known_live(inner, addr, expected) {
        return Ok(m);
    }
    let gate = DialGate::enter(inner, addr);
    let _one_at_a_time = gate.gate.lock().await;
    dial(inner, addr, expected).await
}

/// A live connection to `addr` (to `expected`, when given), if one is
/// known.
fn known_live(inner: &Arc<Inner>, addr: SocketAddr, expected: Option<PeerId>) -> Option<Messenger> {
    let known = inner
        .by_addr
        .read()
        .expect("by_addr lock")
        .get(&addr)
        .copied()
        .filter(|p| !matches!(expected, Some(e) if e != *p))?;
    inner
        .messenger(&known)
        .filter(|m| !m.connection().is_closed())
}

/// A place in the queue of dials to one address (see `Inner::dialing`);
/// dropping it (the dial done, or its caller gone) removes the address'
/// entry when nobody else holds one.
struct DialGate<'a> {
    inner: &'a Inner,
    addr: SocketAddr,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> DialGate<'a> {
    fn enter(inner: &'a Inner, addr: SocketAddr) -> Self {
        let gate = inner
            .dialing
            .lock()
            .expect("dialing lock")
            .entry(addr)
            .or_default()
            .clone();
        DialGate { inner, addr, gate }
    }
}

impl Drop for DialGate<'_> {
    fn drop(&mut self) {
        let mut d = self.inner.dialing.lock().expect("dialing lock");
        // Clones are made under this lock only: two strong references (the
        // map's and ours) mean nobody else is dialing or waiting.
        if Arc::strong_count(&self.gate) == 2 {
            d.remove(&self.addr);
        }
    }
}

/// [`connect_to_peer`]'s dial, run with the address' gate held: reuses a
/// live connection to `addr` if one is known (the gate's previous holder
/// may have just made it).
async fn dial(
    inner: &Arc<Inner>,
    addr: SocketAddr,
    expected: Option<PeerId>,
) -> Result<Messenger, PeerError> {
    if let Some(m) = known_live(inner, addr, expected) {
        return Ok(m);
    }
    let permit = inner
        .slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| PeerError::TooManyConnections(inner.cfg.max_connections))?;
    let timeout = inner.cfg.connect_timeout;
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| PeerError::ConnectTimeout(addr))?
        .map_err(io_err(format!("connecting to {addr}")))?;
    tcp::configure(&stream, inner.cfg.socket_buffer).map_err(io_err("setting socket options"))?;
    let (tx, rx) = oneshot::channel();
    track_connection(
        inner,
        tokio::spawn(tcp::run_connection(
            inner.clone(),
            stream,
            Role::Initiator,
            format!("tcp://{addr}"),
            expected,
            Some(tx),
            permit.into(),
        )),
    );
    let conn = tokio::time::timeout(timeout, rx)
        .await
        .map_err(|_| PeerError::ConnectTimeout(addr))?
        .map_err(|_| PeerError::ConnectFailed {
            addr,
            reason: "connection task ended".into(),
        })?
        .map_err(|reason| PeerError::ConnectFailed { addr, reason })?;
    inner
        .by_addr
        .write()
        .expect("by_addr lock")
        .insert(addr, conn.remote);
    Ok(Messenger::new(conn, inner.clone()))
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Per-address limits first, so one address cannot use up the
        // global slots; refusals are logged for the 1st, 2nd, 4th, 8th, ...
        // of each kind (the counters have the exact numbers).
        let addr_slot = match inner.addr_limits.admit(addr.ip()) {
            Ok(s) => s,
            Err(why) => {
                let counter = match why {
                    AddrRefusal::Connections(_) => &inner.stats.addr_refused,
                    AddrRefusal::Pending(_) => &inner.stats.addr_pending_refused,
                };
                let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(%addr, reason = %why, refused = n, "connection refused: per-address limit");
                }
                continue;
            }
        };
        let Ok(permit) = inner.slots.clone().try_acquire_owned() else {
            let n = inner
                .stats
                .connections_refused
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            if n.is_power_of_two() {
                tracing::warn!(%addr, limit = inner.cfg.max_connections, refused = n, "connection refused: limit reached");
            }
            continue;
        };
        if let Err(e) = tcp::configure(&stream, inner.cfg.socket_buffer) {
            tracing::warn!(%addr, error = %e, "socket options failed");
            continue;
        }
        tracing::debug!(%addr, "accepted connection");
        track_connection(
            &inner,
            tokio::spawn(tcp::run_connection(
                inner.clone(),
                stream,
                Role::Acceptor,
                format!("tcp://{addr}"),
                None,
                None,
                tcp::ConnSlot::new(permit, Some(addr_slot)),
            )),
        );
    }
}

/// Remembers a connection task so that closing or dropping the peer ends
/// it.
fn track_connection(inner: &Inner, t: JoinHandle<()>) {
    inner.tasks.adopt(t);
}

/// A hand-over that has to wait (see [`Inner::try_hand_over`]).
enum HandOver {
    /// Secure pipe records, decrypted on the connection's reader.
    Records(Delivery),
    /// A communicator's message, into its inbox.
    Inbox(Arc<crate::mp::Inbox>, Delivery),
    /// A listener whose queue is full: waits for room.
    Full(mpsc::Sender<Delivery>, Delivery),
}

/// Puts `v` on a bounded queue: without an await when it has room (the
/// usual case), else waiting for room (back-pressure, nothing dropped).
/// `Err(v)` when the receiver is gone.
pub(crate) async fn hand_to<T>(tx: &mpsc::Sender<T>, v: T) -> Result<(), T> {
    match tx.try_send(v) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Full(v)) => tx.send(v).await.map_err(|e| e.0),
        Err(mpsc::error::TrySendError::Closed(v)) => Err(v),
    }
}
