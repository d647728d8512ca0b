//! The endpoint router and the relay service at run time: drives the
//! sans-IO state of `juxta_proto::endpoint::{forward, route_cache,
//! route_query}` and `juxta_proto::relay` from tokio.
//!
//! Why it exists: a peer that has no connection to another (NAT, firewall,
//! separate networks) reaches it through a relay. Every peer keeps a
//! bounded route cache, answers route queries (resolver handler
//! `EndpointRouter`) about itself, and sends to a peer it is not connected
//! to through a route (an ERM-wrapped message to the first hop,
//! [`crate::Messenger`] does this transparently). A peer configured with
//! [`RelayConfig::server`] also forwards routed messages, leases service to
//! edges, spools messages for each edge in a bounded queue and enforces
//! per-sender quotas; a peer configured with [`RelayConfig::client`] leases
//! a relay among its seeds and advertises the route `relay://<relay>`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use juxta::relay::RelayConfig;
//! use juxta::{Peer, PeerConfig};
//! use juxta_proto::message::{Element, Message};
//! let relay = Peer::start(
//!     PeerConfig::new("/tmp/relay").listen("0.0.0.0:9701".parse()?).relay(RelayConfig::server()),
//! ).await?;
//! let seeds = vec!["10.0.0.1:9701".parse()?];
//! let a = Peer::start(PeerConfig::new("/tmp/a").relay(RelayConfig::client(seeds.clone()))).await?;
//! let b = Peer::start(PeerConfig::new("/tmp/b").relay(RelayConfig::client(seeds))).await?;
//! a.relay().unwrap().wait_leased(Duration::from_secs(10)).await;
//! b.relay().unwrap().wait_leased(Duration::from_secs(10)).await;
//! let mut inbox = b.listen("chat", None)?;
//! // No connection between a and b: the route goes through the relay.
//! let to_b = a.route_to(&b.peer_id(), Duration::from_secs(5)).await?;
//! to_b.send("chat", None, Message::new().with(Element::text("", "t", "hi"))).await?;
//! assert_eq!(inbox.recv().await.unwrap().from, Some(a.peer_id()));
//! println!("{:?}", relay.relay().unwrap().counters());
//! # Ok(()) }
//! ```

pub(crate) mod route;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use juxta_proto::endpoint::forward::{FingerprintVerifier, DEFAULT_MAX_FORWARD_HOPS};
use juxta_proto::endpoint::route_cache::RouteCache;
use juxta_proto::endpoint::route_trust::RouteTrust;
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use juxta_proto::relay::client::{ClientConfig, ClientEvent, RelayClient};
use juxta_proto::relay::server::{RelayServer, ServerConfig, ServerCounters};
use juxta_proto::relay::{Control, Refusal, RelayRequest, RelayResponse, RELAY_SERVICE};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

use crate::peer::{Inner, PeerError};
use crate::transport::tcp::Connection;

/// The role a peer plays in the relay service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayRole {
    /// An edge that leases a relay among `seeds`.
    Client {
        /// Relay addresses, tried in order.
        seeds: Vec<SocketAddr>,
        /// Whether the seeds are HTTP listeners ([`crate::PeerConfig::http_listen`])
        /// reached over JXTA's HTTP transport (an edge that can only speak
        /// HTTP), instead of TCP.
        http: bool,
        /// Chosen by default for a peer that cannot be dialled
        /// ([`crate::PeerConfig::auto_relay`]): a seed answering that it
        /// is no relay is not asked again, and once every seed has said
        /// so the lease task ends.
        auto: bool,
    },
    /// A relay: forwards routed messages and leases service to edges.
    Server,
}

/// Settings of the relay service ([`crate::PeerConfig::relay`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// The role.
    pub role: RelayRole,
    /// Relay bounds: clients, lease, per-edge queue, per-sender quota.
    pub server: ServerConfig,
    /// Edge timers.
    pub client: ClientConfig,
    /// How long a relay stops reading a sender whose destination queue or
    /// quota is full before refusing the message (typed, counted).
    pub push_back: Duration,
}

impl RelayConfig {
    /// An edge leasing one of `seeds`.
    pub fn client(seeds: Vec<SocketAddr>) -> RelayConfig {
        RelayConfig {
            role: RelayRole::Client {
                seeds,
                http: false,
                auto: false,
            },
            server: ServerConfig::default(),
            client: ClientConfig::default(),
            push_back: Duration::from_secs(2),
        }
    }

    /// An edge that can only speak HTTP: it reaches the relay's HTTP
    /// listener (`seeds`, tried in order) over JXTA's HTTP transport and
    /// leases it over that session; everything for it is spooled on the
    /// relay and returned in its polls.
    pub fn client_http(seeds: Vec<SocketAddr>) -> RelayConfig {
        RelayConfig {
            role: RelayRole::Client {
                seeds,
                http: true,
                auto: false,
            },
            ..RelayConfig::client(Vec::new())
        }
    }

    /// The lease a peer that cannot be dialled takes by default at its
    /// rendezvous `seeds` ([`crate::PeerConfig::auto_relay`]): as
    /// [`RelayConfig::client`], except that seeds answering that they are
    /// no relay are given up on.
    pub fn auto(seeds: Vec<SocketAddr>) -> RelayConfig {
        RelayConfig {
            role: RelayRole::Client {
                seeds,
                http: false,
                auto: true,
            },
            ..RelayConfig::client(Vec::new())
        }
    }

    /// A relay with JXSE's default bounds (150 clients, 200 messages per
    /// edge, 1 h leases).
    pub fn server() -> RelayConfig {
        RelayConfig {
            role: RelayRole::Server,
            ..RelayConfig::client(Vec::new())
        }
    }

    /// Sets the per-edge queue bounds (messages, bytes).
    pub fn queue(mut self, messages: usize, bytes: usize) -> RelayConfig {
        self.server.queue_messages = messages.max(1);
        self.server.queue_bytes = bytes.max(1);
        self
    }

    /// Sets what one sender may have spooled at the relay at once
    /// (messages, bytes).
    pub fn sender_quota(mut self, messages: usize, bytes: usize) -> RelayConfig {
        self.server.sender_messages = messages.max(1);
        self.server.sender_bytes = bytes.max(1);
        self
    }

    /// Sets the largest message the relay spools for an edge.
    pub fn max_message(mut self, bytes: usize) -> RelayConfig {
        self.server.max_message = bytes;
        self
    }

    /// Sets the most edges leased at once.
    pub fn max_clients(mut self, n: usize) -> RelayConfig {
        self.server.max_clients = n;
        self
    }

    /// Sets the push-back time before a full queue refuses.
    pub fn push_back(mut self, d: Duration) -> RelayConfig {
        self.push_back = d;
        self
    }

    /// Sets the lease length (granted at most, or asked for).
    pub fn lease(mut self, d: Duration) -> RelayConfig {
        let ms = d.as_millis().clamp(1, u64::MAX as u128) as u64;
        self.server.lease_ms = ms;
        self.client.lease_ms = ms;
        self
    }
}

/// One way of reaching a peer that was tried and failed, as listed by
/// [`crate::PeerError::NoRoute`] (and the `NoRoute` variants of
/// [`crate::pipe::PipeError`] and [`crate::socket::SocketError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteAttempt {
    /// No live connection to the peer.
    NoConnection,
    /// No route to the peer in the route cache (routes are learned from
    /// the peer's signed route, from this peer's relay, or configured with
    /// [`crate::Peer::add_route`]).
    NoCachedRoute,
    /// This peer holds no relay lease (its relay's answers would be
    /// believed, and its relay would forward).
    NoRelayLease,
    /// A route query went to this peer (this peer's relay, rendezvous or
    /// another connected peer); no usable answer came in time.
    Asked(PeerId),
    /// Route answers came, but nothing vouched for them (neither the
    /// destination's signed route nor this peer's relay); counted in
    /// [`crate::Stats::routes_unverified`].
    AnswerNotVouched,
    /// No connected peer to ask for a route.
    NobodyToAsk,
    /// This peer (a Juxta peer asked) answered that it knows no route
    /// and had nobody else to ask: the search ended without waiting for
    /// [`crate::PeerConfig::route_query_timeout`].
    Denied(PeerId),
}

impl std::fmt::Display for RouteAttempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteAttempt::NoConnection => f.write_str("no connection"),
            RouteAttempt::NoCachedRoute => f.write_str("no cached route"),
            RouteAttempt::NoRelayLease => f.write_str("no relay lease"),
            RouteAttempt::Asked(p) => write!(f, "asked {p}: no usable answer"),
            RouteAttempt::AnswerNotVouched => f.write_str("answers not vouched for"),
            RouteAttempt::NobodyToAsk => f.write_str("nobody to ask"),
            RouteAttempt::Denied(p) => write!(f, "asked {p}: knows no route"),
        }
    }
}

/// `tried` as one line for error messages.
pub(crate) fn describe(tried: &[RouteAttempt]) -> String {
    let v: Vec<String> = tried.iter().map(ToString::to_string).collect();
    v.join("; ")
}

/// No route to `peer`: what the route search tried. Converted into the
/// `NoRoute` variant of the peer, pipe and socket errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no route to {peer} (tried: {})", describe(tried))]
pub struct NoRoute {
    /// The peer.
    pub peer: PeerId,
    /// What was tried, in order.
    pub tried: Vec<RouteAttempt>,
}

/// Counters of a relay (see [`ServerCounters`]) plus what the router did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayCounters {
    /// The lease table's and queues' counters.
    pub server: ServerCounters,
    /// Edges leased now.
    pub clients: usize,
    /// Routed messages forwarded to another peer (queued or direct).
    pub forwarded: u64,
}

/// The relay service of a peer: counters (relay role), the leased relay
/// (edge role).
#[derive(Clone)]
pub struct RelayHandle {
    inner: Arc<Inner>,
}

impl RelayHandle {
    /// The counters (all zero on an edge).
    pub fn counters(&self) -> RelayCounters {
        let r = &self.inner.router;
        let (server, clients) = match &r.server {
            Some(s) => {
                let st = s.state.lock().expect("relay lock");
                (st.counters(), st.clients())
            }
            None => (ServerCounters::default(), 0),
        };
        RelayCounters {
            server,
            clients,
            forwarded: self.inner.stats.routed_forwarded.load(Ordering::Relaxed),
        }
    }

    /// The relay this edge holds a lease at.
    pub fn relay(&self) -> Option<PeerId> {
        *self.inner.router.leased.borrow()
    }

    /// Waits until this edge holds a lease (or `timeout`); returns the relay.
    pub async fn wait_leased(&self, timeout: Duration) -> Option<PeerId> {
        let mut rx = self.inner.router.leased.subscribe();
        let got = tokio::time::timeout(timeout, async {
            rx.wait_for(|r| r.is_some()).await.ok().and_then(|r| *r)
        })
        .await;
        got.ok().flatten().or_else(|| self.relay())
    }

    /// This peer's route advertisement as it answers route queries: while
    /// it leases a relay, destination EA `relay://<relay unique>` and the
    /// relay as hop; otherwise its TCP address.
    pub fn route_advertisement(&self) -> juxta_proto::advertisement::RouteAdvertisement {
        route::own_route(&self.inner)
    }

    /// Messages queued at this relay for `edge`.
    pub fn queued_for(&self, edge: &PeerId) -> usize {
        self.inner
            .router
            .server
            .as_ref()
            .map_or(0, |s| s.state.lock().expect("relay lock").queue_len(edge))
    }
}

/// The relay server's run-time state.
pub(crate) struct ServerRuntime {
    pub(crate) state: Mutex<RelayServer<Message>>,
    /// Per-edge forwarding state.
    edges: Mutex<juxta_proto::id::PeerMap<Arc<EdgeSlot>>>,
    /// Woken when a queue has room again.
    pub(crate) space: Notify,
    pub(crate) push_back: Duration,
}

/// Router state every peer has.
pub(crate) struct Router {
    clock: juxta_proto::time::Clock,
    pub(crate) cache: Mutex<RouteCache>,
    pub(crate) verifier: Mutex<FingerprintVerifier>,
    fingerprint: OnceLock<Bytes>,
    /// The group-mangled wire address of the endpoint router (what every
    /// forwarded message is sent to), built once.
    wire_address: OnceLock<Arc<juxta_proto::endpoint::ServiceAddress>>,
    /// Notified whenever a route is learned.
    pub(crate) learned: Arc<Notify>,
    pub(crate) max_hops: usize,
    pub(crate) server: Option<Arc<ServerRuntime>>,
    /// The relay this edge leases (edge role).
    pub(crate) leased: watch::Sender<Option<PeerId>>,
    /// Responses for the edge's lease task.
    client_tx: Option<mpsc::Sender<(PeerId, RelayResponse)>>,
    client_rx: Mutex<Option<mpsc::Receiver<(PeerId, RelayResponse)>>>,
    /// Set when the peer closes: the lease task ends at its next step and
    /// sends nothing more (see `Router::stop_client`).
    client_stopped: AtomicBool,
    /// What the router's trust rules keep: the signed routes of other
    /// peers (edges leased here, destinations of routes learned from
    /// signed answers) handed on with route answers, this peer's own
    /// signed route, the routes back looked at last, and the local
    /// searches ended by negative answers; all bounded.
    pub(crate) trust: Mutex<RouteTrust>,
}

impl Router {
    pub(crate) fn new(
        local: PeerId,
        cfg: Option<&RelayConfig>,
        clock: juxta_proto::time::Clock,
    ) -> Router {
        let server = cfg.filter(|c| c.role == RelayRole::Server).map(|c| {
            Arc::new(ServerRuntime {
                state: Mutex::new(RelayServer::new(local, c.server)),
                edges: Mutex::new(Default::default()),
                space: Notify::new(),
                push_back: c.push_back,
            })
        });
        let (client_tx, client_rx) = match cfg.map(|c| &c.role) {
            Some(RelayRole::Client { .. }) => {
                let (tx, rx) = mpsc::channel(16);
                (Some(tx), Some(rx))
            }
            _ => (None, None),
        };
        Router {
            clock,
            cache: Mutex::new(RouteCache::new(local, 4096, 20 * 60 * 1000)),
            verifier: Mutex::new(FingerprintVerifier::new(1024)),
            fingerprint: OnceLock::new(),
            wire_address: OnceLock::new(),
            learned: Arc::new(Notify::new()),
            max_hops: DEFAULT_MAX_FORWARD_HOPS,
            server,
            leased: watch::channel(None).0,
            client_tx,
            client_rx: Mutex::new(client_rx),
            client_stopped: AtomicBool::new(false),
            trust: Mutex::new(RouteTrust::new()),
        }
    }

    /// Tells the edge's lease task to end before its next step (a closing
    /// peer gives its lease back and must not take a new one).
    pub(crate) fn stop_client(&self) {
        self.client_stopped.store(true, Ordering::Release);
    }

    fn client_stopped(&self) -> bool {
        self.client_stopped.load(Ordering::Acquire)
    }

    /// The peer's clock ([`juxta_proto::time`]).
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now()
    }

    /// The endpoint router's wire address in this peer's group (mangled
    /// once).
    pub(crate) fn wire_address(&self, inner: &Inner) -> Arc<juxta_proto::endpoint::ServiceAddress> {
        self.wire_address
            .get_or_init(|| {
                Arc::new(juxta_proto::endpoint::mangle(
                    inner.group_unique(),
                    &juxta_proto::endpoint::ServiceAddress::new(
                        juxta_proto::endpoint::ROUTER_SERVICE,
                        None,
                    ),
                ))
            })
            .clone()
    }

    /// This peer's router fingerprint element (signed once).
    pub(crate) fn fingerprint(&self, inner: &Inner) -> Bytes {
        self.fingerprint
            .get_or_init(|| juxta_proto::endpoint::forward::fingerprint_for(&inner.identity))
            .clone()
    }

    /// Whether this peer forwards routed messages (a relay).
    pub(crate) fn forwards(&self) -> bool {
        self.server.is_some()
    }
}

/// Starts the relay service tasks of a peer (the edge's lease task).
pub(crate) fn spawn(
    inner: &Arc<Inner>,
    cfg: RelayConfig,
) -> Result<(RelayHandle, Option<JoinHandle<()>>), PeerError> {
    let handle = RelayHandle {
        inner: inner.clone(),
    };
    let task = match cfg.role {
        RelayRole::Client { seeds, http, auto } => {
            let rx = inner
                .router
                .client_rx
                .lock()
                .expect("relay lock")
                .take()
                .expect("client channel");
            Some(tokio::spawn(client_task(
                Arc::downgrade(inner),
                seeds,
                http,
                auto,
                cfg.client,
                rx,
            )))
        }
        RelayRole::Server => None,
    };
    Ok((handle, task))
}

/// A relay control message received on `conn`.
pub(crate) async fn on_control(inner: &Arc<Inner>, conn: &Arc<Connection>, message: Message) {
    let control = match Control::parse(&message) {
        Ok(c) => c,
        Err(e) => {
            inner.stats.relay_refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(remote = %conn.remote, error = %e, "bad relay control message");
            return;
        }
    };
    match control {
        Control::Response(r) => {
            if let RelayResponse::Refused(reason) = r {
                inner.stats.relay_refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(relay = %conn.remote, %reason, "relay refused");
            }
            if let Some(tx) = &inner.router.client_tx {
                if tx.try_send((conn.remote, r)).is_err() {
                    inner.stats.relay_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("relay response queue full; response dropped");
                }
            }
        }
        Control::Request(req) => {
            // A lease is bound to the peer this connection proved to be
            // (compact handshake, HTTP session proof, or a fresh CBJX
            // signature by the ID's key): nobody else can take or re-point it.
            let proven = conn.proof().is_proven();
            let now = inner.router.now_ms();
            let mut resp = match &inner.router.server {
                None => RelayResponse::Refused(Refusal::NotRelay),
                Some(s) => {
                    let resp = s.state.lock().expect("relay lock").on_request(
                        conn.remote,
                        proven,
                        conn.id,
                        &req,
                        now,
                    );
                    if matches!(resp, RelayResponse::Connected { .. }) {
                        start_drain(inner, s, conn);
                        route::keep_lease_route(inner, conn, &message);
                    }
                    resp
                }
            };
            if let RelayResponse::Refused(reason) = resp {
                if reason == Refusal::Unauthenticated {
                    inner
                        .stats
                        .relay_unauthenticated
                        .fetch_add(1, Ordering::Relaxed);
                } else {
                    inner.stats.relay_refused.fetch_add(1, Ordering::Relaxed);
                }
                tracing::info!(remote = %conn.remote, %reason, "relay request refused");
            }
            // A JXSE relay client (a connection in JXTA framing) keeps a
            // lease only with the relay's own advertisement in the answer
            // (`RelayClient.handleResponse`: without `relayAdv` it gives
            // the relay up), and reads an answer only when addressed to
            // the relay service with the relay's unique value as parameter.
            let me = inner.identity.peer_id().unique_value();
            let jxta_framed = !conn.is_compact();
            if let RelayResponse::Connected { relay_adv, .. } = &mut resp {
                if jxta_framed {
                    *relay_adv = Some(own_relay_adv(inner));
                }
            }
            let param = jxta_framed.then_some(me.as_str());
            let m = crate::Messenger::new(conn.clone(), inner.clone());
            if let Err(e) = m.post(RELAY_SERVICE, param, resp.to_message()) {
                tracing::debug!(remote = %conn.remote, error = %e, "relay response not sent");
            }
        }
    }
}

/// This relay's `jxta:RdvAdvertisement` as JXSE's relay server makes it
/// (`RelayServer.createRdvAdvertisement`): its peer ID, the Net group, the
/// relay service as service name, and its route (its TCP address).
fn own_relay_adv(inner: &Inner) -> String {
    use juxta_proto::advertisement::{RdvAdvertisement, RouteAdvertisement};
    use juxta_proto::id::PeerGroupId;
    let me = *inner.identity.peer_id();
    RdvAdvertisement::new(PeerGroupId::NET, me, RELAY_SERVICE)
        .with_name(inner.cfg.name.clone())
        .with_route(RouteAdvertisement::direct(me, [inner.public_addr.clone()]))
        .to_xml()
}

/// One leased edge's forwarding state: its connection, the lock held by
/// whoever is sending its queue, and the wake-up of its drain task.
pub(crate) struct EdgeSlot {
    conn: Arc<Connection>,
    drain: tokio::sync::Mutex<()>,
    notify: Notify,
}

/// Starts (once per lease connection) the task forwarding an edge's queue
/// over its connection when nobody else is.
fn start_drain(inner: &Arc<Inner>, s: &Arc<ServerRuntime>, conn: &Arc<Connection>) {
    let edge = conn.remote;
    let slot = {
        let mut w = s.edges.lock().expect("relay lock");
        if w.get(&edge).is_some_and(|x| x.conn.id == conn.id) {
            return;
        }
        let slot = Arc::new(EdgeSlot {
            conn: conn.clone(),
            drain: tokio::sync::Mutex::new(()),
            notify: Notify::new(),
        });
        w.insert(edge, slot.clone());
        slot
    };
    let s = s.clone();
    let weak = Arc::downgrade(inner);
    inner.tasks.spawn(async move {
        loop {
            let Some(inner) = weak.upgrade() else { break };
            let alive = {
                let _g = slot.drain.lock().await;
                drain_queue(&inner, &s, &edge, &slot).await
            };
            if !alive {
                break;
            }
            drop(inner);
            let _ = tokio::time::timeout(Duration::from_millis(500), slot.notify.notified()).await;
        }
        let mut w = s.edges.lock().expect("relay lock");
        if w.get(&edge).is_some_and(|x| Arc::ptr_eq(x, &slot)) {
            w.remove(&edge);
        }
        drop(w);
        s.space.notify_waiters();
    });
}

/// Sends `edge`'s queued messages until the queue is empty (the caller
/// holds the slot's drain lock, so the order is kept). `false` once the
/// lease on this slot's connection is gone.
async fn drain_queue(
    inner: &Arc<Inner>,
    s: &ServerRuntime,
    edge: &PeerId,
    slot: &EdgeSlot,
) -> bool {
    let to = juxta_proto::endpoint::mangle(
        inner.group_unique(),
        &juxta_proto::endpoint::ServiceAddress::new(juxta_proto::endpoint::ROUTER_SERVICE, None),
    );
    loop {
        let now = inner.router.now_ms();
        let (item, leased) = {
            let mut st = s.state.lock().expect("relay lock");
            st.expire(now);
            let leased = st.lease_conn(edge, now) == Some(slot.conn.id);
            (if leased { st.pop(edge) } else { None }, leased)
        };
        if !leased || slot.conn.is_closed() {
            s.state
                .lock()
                .expect("relay lock")
                .connection_closed(edge, slot.conn.id);
            return false;
        }
        let Some(mut m) = item else { return true };
        s.space.notify_waiters();
        if !header_fits(inner, &slot.conn, &mut m) {
            continue;
        }
        let msgr = crate::Messenger::new(slot.conn.clone(), inner.clone());
        if let Err(e) = msgr.send_raw(&to, m).await {
            tracing::debug!(%edge, error = %e, "relay forward failed");
        }
    }
}

/// The connection `edge`'s messages are sent on (its lease connection).
pub(crate) fn edge_conn(s: &ServerRuntime, edge: &PeerId) -> Option<Arc<Connection>> {
    s.edges
        .lock()
        .expect("relay lock")
        .get(edge)
        .map(|x| x.conn.clone())
}

/// What [`pass_through`] did with a message.
pub(crate) enum Passed {
    /// Written (or, the part the socket did not take, handed to a task).
    Sent,
    /// Not sent: spool it.
    Back(Message),
    /// The edge's connection failed: the message is lost (the caller
    /// counts it).
    Failed,
}

/// Sends a routed message for the leased `edge` straight from the
/// caller's task (the sender's reader: no queue, no task switch) when
/// nothing is queued for the edge, nobody else is sending its queue and
/// its connection's writer is free; otherwise hands it back for the
/// bounded queue. `len` is its payload length, `to` the wire address.
pub(crate) fn pass_through(
    inner: &Arc<Inner>,
    s: &ServerRuntime,
    edge: &PeerId,
    len: usize,
    to: &juxta_proto::endpoint::ServiceAddress,
    msg: Message,
) -> Passed {
    let Some(slot) = s.edges.lock().expect("relay lock").get(edge).cloned() else {
        return Passed::Back(msg);
    };
    // Holding the drain lock: no older message of this edge is being sent.
    let Ok(_g) = slot.drain.try_lock() else {
        return Passed::Back(msg);
    };
    let now = inner.router.now_ms();
    let can = s.state.lock().expect("relay lock").can_pass(edge, len, now);
    if can != Some(slot.conn.id) {
        return Passed::Back(msg);
    }
    match crate::Messenger::new(slot.conn.clone(), inner.clone()).try_send_raw(to, msg) {
        Ok(Ok(_)) => {
            s.state.lock().expect("relay lock").count_passed(len);
            Passed::Sent
        }
        Ok(Err(back)) => Passed::Back(back),
        Err(e) => {
            tracing::debug!(%edge, error = %e, "relay forward failed");
            Passed::Failed
        }
    }
}

/// A spooled message's router header in the form `conn` may carry: the
/// compact one only over compact framing (the edge's lease connection may
/// have been replaced since the message was queued). `false` (logged and
/// counted in [`crate::Stats::route_malformed`]) if the message cannot be
/// sent: its compact header does not parse.
fn header_fits(inner: &Inner, conn: &Connection, m: &mut Message) -> bool {
    if conn.compact_tx.load(Ordering::Acquire) {
        return true;
    }
    match juxta_proto::endpoint::forward::compact_to_xml(m) {
        Ok(()) => true,
        Err(e) => {
            inner.stats.route_malformed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(edge = %conn.remote, error = %e, "spooled message not sent");
            false
        }
    }
}

/// After a message was queued for `edge`: sends the queue at once, on
/// this task, as far as the edge's connection takes it without waiting (no
/// task switch on the relay's data path, and a slow edge never blocks this
/// sender's reader); what is left goes to the edge's drain task.
pub(crate) fn after_enqueue(inner: &Arc<Inner>, s: &ServerRuntime, edge: &PeerId) {
    let Some(slot) = s.edges.lock().expect("relay lock").get(edge).cloned() else {
        return;
    };
    let emptied = match slot.drain.try_lock() {
        Ok(_g) => send_ready(inner, s, edge, &slot),
        Err(_) => false,
    };
    if !emptied {
        slot.notify.notify_one();
    }
}

/// Sends `edge`'s queued messages while its connection takes them without
/// waiting; `true` once the queue is empty. The caller holds the drain lock.
fn send_ready(inner: &Arc<Inner>, s: &ServerRuntime, edge: &PeerId, slot: &EdgeSlot) -> bool {
    let to = inner.router.wire_address(inner);
    let msgr = crate::Messenger::new(slot.conn.clone(), inner.clone());
    loop {
        let now = inner.router.now_ms();
        let popped = {
            let mut st = s.state.lock().expect("relay lock");
            if st.lease_conn(edge, now) != Some(slot.conn.id) {
                return false;
            }
            st.pop_entry(edge)
        };
        let Some(mut p) = popped else { return true };
        if !header_fits(inner, &slot.conn, &mut p.item) {
            s.space.notify_waiters();
            continue;
        }
        match msgr.try_send_raw(&to, p.item) {
            Ok(Ok(_)) => s.space.notify_waiters(),
            Ok(Err(item)) => {
                s.state.lock().expect("relay lock").unpop(
                    edge,
                    juxta_proto::relay::server::Popped {
                        sender: p.sender,
                        len: p.len,
                        item,
                    },
                );
                return false;
            }
            Err(e) => {
                s.space.notify_waiters();
                tracing::debug!(%edge, error = %e, "relay forward failed");
                return false;
            }
        }
    }
}

async fn client_task(
    weak: std::sync::Weak<Inner>,
    seeds: Vec<SocketAddr>,
    http: bool,
    auto: bool,
    cfg: ClientConfig,
    mut rx: mpsc::Receiver<(PeerId, RelayResponse)>,
) {
    let mut sm = RelayClient::new(seeds.len(), cfg);
    // Automatic lease: the seeds that said they are no relay.
    let mut not_relays: Vec<PeerId> = Vec::new();
    let Some(mut links) = weak.upgrade().map(|i| i.links.subscribe()) else {
        return;
    };
    loop {
        // Woken by a response, by a link going down, or at the machine's
        // next deadline (capped at an hour).
        let wait = {
            let Some(inner) = weak.upgrade() else { return };
            let now = inner.router.now_ms();
            let at = sm.poll_timeout().unwrap_or(u64::MAX);
            Duration::from_millis(at.saturating_sub(now).min(3_600_000))
        };
        let event = tokio::select! {
            _ = tokio::time::sleep(wait) => None,
            r = rx.recv() => match r { Some(r) => Some(r), None => return },
            l = links.recv() => match l {
                Ok(crate::peer::LinkEvent::Up(_)) => continue,
                Ok(crate::peer::LinkEvent::Down(_))
                | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
        };
        let Some(inner) = weak.upgrade() else { return };
        if inner.router.client_stopped() {
            return;
        }
        let now = inner.router.now_ms();
        if let (true, Some((from, RelayResponse::Refused(Refusal::NotRelay)))) = (auto, &event) {
            if !not_relays.contains(from) {
                not_relays.push(*from);
            }
            if not_relays.len() >= seeds.len() {
                tracing::info!("no rendezvous seed is a relay: automatic relay lease off");
                return;
            }
        }
        match event {
            Some((from, resp)) => sm.handle_response(from, &resp, now),
            None => {
                if let Some(relay) = sm.relay() {
                    if inner.connection(&relay).is_none() {
                        sm.handle_link_down(relay, now);
                    }
                }
                sm.handle_timeout(now);
            }
        }
        while let Some(ev) = sm.poll_event() {
            if inner.router.client_stopped() {
                return;
            }
            match ev {
                ClientEvent::Connect { seed } => {
                    let addr = seeds[seed];
                    let c = if http {
                        crate::transport::http::connect(&inner, addr, inner.cfg.http.clone())
                            .await
                            .map_err(PeerError::from)
                    } else {
                        crate::peer::connect_to(&inner, addr).await
                    };
                    match c {
                        Ok(m) => {
                            let now = inner.router.now_ms();
                            sm.handle_connected(seed, m.remote(), now);
                        }
                        Err(e) => {
                            tracing::debug!(%addr, error = %e, "relay seed unreachable");
                            let now = inner.router.now_ms();
                            sm.handle_connect_failed(seed, now);
                        }
                    }
                }
                ClientEvent::Send { relay, request } => {
                    send_request(&inner, relay, request).await;
                }
                ClientEvent::LeaseGained { relay } => {
                    tracing::info!(%relay, "relay lease gained");
                    inner.router.leased.send_replace(Some(relay));
                }
                ClientEvent::LeaseLost { relay } => {
                    tracing::info!(%relay, "relay lease lost");
                    inner.router.leased.send_replace(None);
                }
            }
        }
    }
}

/// Edge: gives the relay lease back (`Disconnect` to the leased relay, a
/// graceful stop); whether one was sent.
pub(crate) fn release_lease(inner: &Arc<Inner>) -> bool {
    let relay = *inner.router.leased.borrow();
    let Some(conn) = relay.and_then(|r| inner.connection(&r)) else {
        return false;
    };
    let m = crate::Messenger::new(conn, inner.clone());
    let sent = m
        .post(RELAY_SERVICE, None, RelayRequest::Disconnect.to_message())
        .is_ok();
    if sent {
        inner.router.leased.send_replace(None);
    }
    sent
}

async fn send_request(inner: &Arc<Inner>, relay: PeerId, request: RelayRequest) {
    let Some(conn) = inner.connection(&relay) else {
        return;
    };
    let mut msg = request.to_message();
    if matches!(request, RelayRequest::Connect { .. }) {
        // The route through this relay, signed: the relay hands it to
        // peers asking for a route to us, who believe it because we
        // signed it.
        if let Some(e) = route::signed_own(inner, route::route_via(inner, relay)) {
            msg.push(juxta_proto::message::Element::xml(
                juxta_proto::relay::NS_RELAY,
                juxta_proto::relay::SIGNED_ROUTE,
                e.to_document(),
            ));
        }
    }
    let m = crate::Messenger::new(conn, inner.clone());
    if let Err(e) = m.post(RELAY_SERVICE, None, msg) {
        tracing::debug!(%relay, error = %e, "relay request not sent");
    }
}

impl crate::Peer {
    /// The relay service, when [`crate::PeerConfig::relay`] is set.
    pub fn relay(&self) -> Option<RelayHandle> {
        self.inner.cfg.relay.as_ref().map(|_| RelayHandle {
            inner: self.inner.clone(),
        })
    }

    /// A messenger to `peer`: over the direct connection if there is one,
    /// else through a known route, else through a route found by asking
    /// the connected peers (route query).
    ///
    /// Timeouts: the search gives up after `timeout` or after
    /// [`crate::PeerConfig::route_query_timeout`] (default 900 ms) without a
    /// usable answer, whichever comes first, and at once when there is no
    /// connected peer to ask; it then fails with
    /// [`PeerError::NoRoute`] listing what was tried.
    ///
    /// ```no_run
    /// # async fn demo(peer: juxta::Peer, who: juxta_proto::id::PeerId) {
    /// use std::time::Duration;
    /// match peer.route_to(&who, Duration::from_secs(5)).await {
    ///     Ok(m) => println!("routed: {}", m.is_routed()),
    ///     Err(juxta::PeerError::NoRoute { tried, .. }) => println!("unreachable: {tried:?}"),
    ///     Err(e) => println!("{e}"),
    /// }
    /// # }
    /// ```
    pub async fn route_to(
        &self,
        peer: &PeerId,
        timeout: Duration,
    ) -> Result<crate::Messenger, PeerError> {
        Ok(route::find_route(&self.inner, peer, timeout).await?)
    }

    /// Caches `hops` (first hop first; the first must be connected) as the
    /// route to `peer` (a configured route).
    pub fn add_route(&self, peer: PeerId, hops: Vec<PeerId>) -> Result<(), PeerError> {
        let now = self.inner.router.now_ms();
        self.inner
            .router
            .cache
            .lock()
            .expect("route lock")
            .insert(peer, hops, now)
            .map_err(PeerError::Route)?;
        self.inner.router.learned.notify_waiters();
        Ok(())
    }
}
