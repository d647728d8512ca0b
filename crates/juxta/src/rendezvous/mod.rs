//! The rendezvous service task: drives the sans-IO RVP and SRDI state
//! machines of `juxta_proto::rendezvous` and `juxta_proto::srdi` from tokio.
//!
//! Why it exists: the state machines decide *what* to send and *when*; this
//! task owns the clock (milliseconds since the task started), the timers
//! (`poll_timeout`), the listeners and the connections, exactly as the
//! simulator `juxta-proto/tests/rendezvous_sim.rs` wires them.
//!
//! A peer runs it when [`crate::PeerConfig::rendezvous`] is set, in one of
//! two roles:
//! - [`RendezvousRole::Edge`]: connects to its seed addresses, leases one
//!   rendezvous (renewal = heartbeat, fail-over to the next seed when the
//!   rendezvous stops answering or its connection closes), pushes its SRDI
//!   entries to every new rendezvous, and sends lookups to it (retrying
//!   after the delay a busy answer gives, and re-sending after fail-over);
//! - [`RendezvousRole::Rendezvous`]: grants bounded leases (refusing with a
//!   reason when full), indexes its edges' SRDI entries, and answers
//!   lookups from its index under per-querier admission control.
//!
//! Everything travels on JXSE's services: leases on the RVP service,
//! propagated and walked messages on `JxtaPropagate` and the walker greeter,
//! SRDI on the resolver's `<group>Srdi` queue (gzip `jxta:GenSRDI`, the
//! discovery handler's name), queries and answers on the resolver's
//! `ORes`/`IRes` queues. The resolver task hands this task the queries it
//! must see (discovery queries on a rendezvous, Juxta lookups) and their
//! answers. So a JXSE edge leases a Juxta rendezvous, and a JXSE edge's
//! discovery query reaches, through the rendezvous' SRDI index, the Juxta
//! edge that published the advertisement (`tests/interop_rendezvous.rs`).
//!
//! Scope today: a rendezvous answers from its own index (edges republish to
//! whichever rendezvous they lease, so fail-over restores lookups); the
//! rendezvous-to-rendezvous peer view, replication and walks are not wired
//! yet.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use juxta::rendezvous::RendezvousConfig;
//! use juxta::{Peer, PeerConfig};
//! let rdv = Peer::start(
//!     PeerConfig::new("/tmp/rdv")
//!         .listen("127.0.0.1:0".parse()?)
//!         .rendezvous(RendezvousConfig::rendezvous()),
//! )
//! .await?;
//! let seeds = vec![rdv.local_addr().unwrap()];
//! let edge = Peer::start(PeerConfig::new("/tmp/edge").rendezvous(RendezvousConfig::edge(seeds))).await?;
//! let h = edge.rendezvous().unwrap();
//! h.wait_leased(Duration::from_secs(10)).await;
//! h.srdi_publish("Adv", "Name", "printer", Duration::from_secs(3600)).await?;
//! let who = h.lookup("Adv", "Name", "printer", Duration::from_secs(5)).await?;
//! assert_eq!(who, vec![edge.peer_id()]);
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use juxta_proto::advertisement::PipeType;
use juxta_proto::discovery::DISCOVERY_HANDLER;
use juxta_proto::endpoint::{Delivery, ServiceAddress};
use juxta_proto::id::{PeerGroupId, PeerId};
use juxta_proto::message::Message;
use juxta_proto::pipe::binding::PIPE_RESOLVER_HANDLER;
use juxta_proto::rendezvous::edge::{EdgeClient, EdgeConfig, EdgeEvent, LossReason};
use juxta_proto::rendezvous::messages::{
    lease_address, minimal_rdv_adv, peerview_address, propagate_address, walk_address, BusyNotice,
    PropagateHeader, WalkHeader, PROPAGATE_SERVICE,
};
use juxta_proto::rendezvous::server::{RendezvousServer, ServerConfig, ServerEvent};
use juxta_proto::rendezvous::Transmit;
use juxta_proto::resolver::{
    query_queue, response_queue, srdi_queue, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use juxta_proto::srdi::flow::AdmissionConfig;
use juxta_proto::srdi::node::{Arrival, SrdiAction, SrdiNode, SrdiNodeConfig};
use juxta_proto::srdi::placement::global_view;
use juxta_proto::srdi::search::{QueryPlan, SearchModel};
use juxta_proto::srdi::{
    ResolverSrdi, SrdiEntry, SrdiMessage, MAX_ENTRIES_PER_MESSAGE, MAX_KEY_LEN, SCOPE_REPLICATE,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::peer::{Inner, PeerError};

/// The resolver handler name of rendezvous lookups (Juxta's own handler:
/// the answer lists the publishers instead of forwarding the query).
pub const LOOKUP_HANDLER: &str = "juxta-rdv-lookup";
/// Most SRDI entries one edge keeps published.
pub const MAX_PUBLISHED: usize = 10_000;
/// Most lookups one edge has outstanding.
pub const MAX_PENDING_LOOKUPS: usize = 65_536;
/// Most lookups a rendezvous has forwarded to another rendezvous and not
/// yet seen answered.
pub const MAX_RELAYED_LOOKUPS: usize = 65_536;
/// How long a forwarded lookup's relay entry is kept.
const RELAY_TTL_MS: u64 = 10_000;
/// Most peers one lookup answer lists.
pub const MAX_ANSWER_PEERS: usize = juxta_proto::srdi::node::MAX_FORWARD;
/// Events buffered per subscriber; a slower subscriber gets
/// `RecvError::Lagged` with the number it missed.
pub const EVENT_CAPACITY: usize = 1024;
/// How often the task checks connections and re-sends lookups.
const TICK_MS: u64 = 50;
/// How long a lookup waits for an answer before re-sending it.
const QUERY_RETRY_MS: u64 = 1_000;
/// The longest wait a `Juxta.Busy` answer can impose before a lookup is
/// asked again: a peer's `retry_after_ms` is capped at this.
pub const MAX_BUSY_RETRY_MS: u64 = 60_000;
/// Least time between two dials of a seed whose connection is gone.
const REDIAL_MS: u64 = 500;
/// Commands queued from handles before callers wait.
const CMD_QUEUE: usize = 4096;

/// Which side of RVP this peer plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RendezvousRole {
    /// An edge leasing one of these rendezvous (tried in order, then round
    /// robin).
    Edge {
        /// Rendezvous addresses.
        seeds: Vec<SocketAddr>,
    },
    /// A rendezvous serving edges.
    Rendezvous,
}

/// Settings of the rendezvous service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RendezvousConfig {
    /// The role.
    pub role: RendezvousRole,
    /// Edge timers (heartbeat, response timeout, backoff).
    pub edge: EdgeConfig,
    /// Rendezvous parameters (lease length, `max_clients`).
    pub server: ServerConfig,
    /// SRDI parameters of a rendezvous (search model, admission, index bounds).
    pub srdi: SrdiNodeConfig,
    /// Index of the first seed an edge tries (spreads edges over rendezvous).
    pub first_seed: usize,
    /// Rendezvous: the other rendezvous of the group to form a peer view
    /// with (dialled, probed, re-dialled when their connection is gone).
    pub peers: Vec<SocketAddr>,
}

impl RendezvousConfig {
    /// An edge with these seed rendezvous.
    pub fn edge(seeds: Vec<SocketAddr>) -> RendezvousConfig {
        RendezvousConfig {
            role: RendezvousRole::Edge { seeds },
            edge: EdgeConfig::default(),
            server: ServerConfig::default(),
            srdi: SrdiNodeConfig::default(),
            first_seed: 0,
            peers: Vec::new(),
        }
    }

    /// A rendezvous with default limits.
    pub fn rendezvous() -> RendezvousConfig {
        RendezvousConfig {
            role: RendezvousRole::Rendezvous,
            ..RendezvousConfig::edge(Vec::new())
        }
    }

    /// Sets the most edges a rendezvous leases to.
    pub fn max_clients(mut self, n: usize) -> RendezvousConfig {
        self.server.max_clients = n;
        self
    }

    /// Sets a rendezvous' admission control.
    pub fn admission(mut self, a: AdmissionConfig) -> RendezvousConfig {
        self.srdi.admission = a;
        self
    }

    /// Sets a rendezvous' search model.
    pub fn model(mut self, m: SearchModel) -> RendezvousConfig {
        self.srdi.model = m;
        self
    }

    /// Sets the first seed an edge tries.
    pub fn first_seed(mut self, i: usize) -> RendezvousConfig {
        self.first_seed = i;
        self
    }

    /// Rendezvous: the other rendezvous to form the peer view with. Their
    /// view drives SRDI placement and replication, forwarding to the
    /// replica, the walker and flooding.
    pub fn peers(mut self, peers: Vec<SocketAddr>) -> RendezvousConfig {
        self.peers = peers;
        self
    }
}

/// Something that happened to the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RendezvousEvent {
    /// Edge: a lease with this rendezvous started.
    LeaseGained(PeerId),
    /// Edge: the lease (or the request for one) ended.
    LeaseLost {
        /// The rendezvous.
        rdv: PeerId,
        /// Why (a refusal carries the rendezvous' reason).
        reason: LossReason,
    },
    /// Rendezvous: an edge leased.
    ClientJoined(PeerId),
    /// Rendezvous: an edge left or expired.
    ClientLeft(PeerId),
    /// Rendezvous: an edge was refused (table full).
    Refused(PeerId),
    /// Rendezvous: another rendezvous joined the peer view.
    RendezvousJoined(PeerId),
    /// Rendezvous: a rendezvous left the peer view (failed or silent).
    RendezvousLeft(PeerId),
}

/// A snapshot of the service's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RendezvousStatus {
    /// Whether this peer is a rendezvous.
    pub is_rendezvous: bool,
    /// Edge: the rendezvous leased to.
    pub leased_to: Option<PeerId>,
    /// Rendezvous: leased edges.
    pub clients: usize,
    /// Rendezvous: (key, peer) pairs in the SRDI index.
    pub index_entries: usize,
    /// Rendezvous: other rendezvous in the peer view.
    pub view: usize,
    /// Rendezvous: messages that arrived by a limited-range walk.
    pub walked: u64,
    /// Rendezvous: lookups admitted.
    pub queries: u64,
    /// Rendezvous: busy answers sent. Edge: busy answers received.
    pub busy: u64,
    /// Edge: lookups answered.
    pub answered: u64,
    /// Rendezvous: peer-view messages advertising another rendezvous than
    /// their sender, and propagated or walked messages from peers that are
    /// neither leased edges nor peer-view members or over their rate:
    /// refused.
    pub refused: u64,
}

/// Errors of the rendezvous service API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RendezvousError {
    /// Publishing and lookups are done by edges.
    #[error("this peer is not an edge")]
    NotEdge,
    /// The service task has ended (peer dropped).
    #[error("the rendezvous service has stopped")]
    Stopped,
    /// No answer before the lookup's timeout.
    #[error("lookup timed out")]
    Timeout,
    /// A bound is reached ([`MAX_PUBLISHED`] or [`MAX_PENDING_LOOKUPS`]).
    #[error("too many {0}")]
    TooMany(&'static str),
    /// A key or value is empty, too long or contains a tab.
    #[error("invalid {0}")]
    Invalid(&'static str),
}

enum Cmd {
    Publish {
        key: (String, String, String),
        expiration_ms: i64,
        reply: oneshot::Sender<Result<(), RendezvousError>>,
    },
    Lookup {
        key: (String, String, String),
        timeout_ms: u64,
        reply: oneshot::Sender<Result<Vec<PeerId>, RendezvousError>>,
    },
    /// A resolver query the resolver task hands over (a lookup, or a
    /// discovery query on a rendezvous), with the message it came in.
    Query {
        from: Option<PeerId>,
        q: Box<ResolverQuery>,
        raw: Message,
        key: Option<(String, String, String)>,
    },
    /// A lookup answer.
    Response(ResolverResponse),
    /// A busy answer.
    Busy(BusyNotice),
    /// Edge: end the lease politely and stop leasing.
    Shutdown {
        reply: oneshot::Sender<Result<(), RendezvousError>>,
    },
}

/// The application's handle on a peer's rendezvous service (cheap to clone).
#[derive(Clone)]
pub struct RendezvousHandle {
    cmd: mpsc::Sender<Cmd>,
    status: watch::Receiver<RendezvousStatus>,
    events: broadcast::Sender<RendezvousEvent>,
}

fn check(s: &str, what: &'static str) -> Result<(), RendezvousError> {
    if s.is_empty() || s.len() > MAX_KEY_LEN || s.contains(['\t', '\n']) {
        return Err(RendezvousError::Invalid(what));
    }
    Ok(())
}

fn key_of(pk: &str, attr: &str, value: &str) -> Result<(String, String, String), RendezvousError> {
    check(pk, "primary key")?;
    check(attr, "attribute")?;
    check(value, "value")?;
    Ok((pk.to_string(), attr.to_string(), value.to_string()))
}

impl RendezvousHandle {
    /// The current state.
    pub fn status(&self) -> RendezvousStatus {
        self.status.borrow().clone()
    }

    /// Edge: ends the lease politely (sends `Disconnect` to the leased
    /// rendezvous, which releases the lease and this edge's SRDI entries
    /// at once) and stops leasing; returns once the message is handed to
    /// the connection. For a graceful stop: the service leases no more
    /// afterwards. [`RendezvousError::NotEdge`] on a rendezvous.
    ///
    /// ```no_run
    /// # async fn demo(edge: juxta::Peer) {
    /// if let Some(h) = edge.rendezvous() {
    ///     let _ = h.shutdown().await;
    /// }
    /// drop(edge); // closes the sockets
    /// # }
    /// ```
    pub async fn shutdown(&self) -> Result<(), RendezvousError> {
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Cmd::Shutdown { reply })
            .await
            .map_err(|_| RendezvousError::Stopped)?;
        rx.await.map_err(|_| RendezvousError::Stopped)?
    }

    /// Subscribes to lease and client events (from now on).
    pub fn subscribe(&self) -> broadcast::Receiver<RendezvousEvent> {
        self.events.subscribe()
    }

    /// Edge: waits until leased (or `timeout`); returns the rendezvous.
    pub async fn wait_leased(&self, timeout: Duration) -> Option<PeerId> {
        let mut rx = self.status.clone();
        let r = tokio::time::timeout(timeout, rx.wait_for(|s| s.leased_to.is_some())).await;
        match r {
            Ok(Ok(s)) => s.leased_to,
            _ => self.status().leased_to,
        }
    }

    /// Edge: publishes the SRDI entry `(primary, attr, value)` for
    /// `expiration`, now to the current rendezvous and again to every
    /// rendezvous leased later.
    pub async fn srdi_publish(
        &self,
        primary: &str,
        attr: &str,
        value: &str,
        expiration: Duration,
    ) -> Result<(), RendezvousError> {
        let key = key_of(primary, attr, value)?;
        let (reply, rx) = oneshot::channel();
        let expiration_ms = i64::try_from(expiration.as_millis()).unwrap_or(i64::MAX);
        self.cmd
            .send(Cmd::Publish {
                key,
                expiration_ms,
                reply,
            })
            .await
            .map_err(|_| RendezvousError::Stopped)?;
        rx.await.map_err(|_| RendezvousError::Stopped)?
    }

    /// Edge: asks the leased rendezvous which peers published
    /// `(primary, attr, value)`. Re-sent after a busy answer's delay, after
    /// [`QUERY_RETRY_MS`] without answer, and after a fail-over; an empty
    /// list means the rendezvous knows no publisher.
    pub async fn lookup(
        &self,
        primary: &str,
        attr: &str,
        value: &str,
        timeout: Duration,
    ) -> Result<Vec<PeerId>, RendezvousError> {
        let key = key_of(primary, attr, value)?;
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Cmd::Lookup {
                key,
                timeout_ms: timeout.as_millis().min(u64::MAX as u128) as u64,
                reply,
            })
            .await
            .map_err(|_| RendezvousError::Stopped)?;
        rx.await.map_err(|_| RendezvousError::Stopped)?
    }
}

impl RendezvousHandle {
    /// Hands a resolver query to the task (resolver task only). `key` is
    /// the SRDI key it asks for, if any. Waits while the task's queue is
    /// full (back-pressure on the connection the query came on).
    pub(crate) async fn resolver_query(
        &self,
        from: Option<PeerId>,
        q: ResolverQuery,
        raw: Message,
        key: Option<(String, String, String)>,
    ) {
        let q = Box::new(q);
        let _ = self.cmd.send(Cmd::Query { from, q, raw, key }).await;
    }

    /// Hands a lookup answer to the task (resolver task only).
    pub(crate) async fn resolver_response(&self, r: ResolverResponse) {
        let _ = self.cmd.send(Cmd::Response(r)).await;
    }

    /// Hands a busy answer to the task (resolver task only).
    pub(crate) async fn busy(&self, b: BusyNotice) {
        let _ = self.cmd.send(Cmd::Busy(b)).await;
    }

    /// Edge: publishes SRDI entries for an advertisement just published
    /// locally (discovery), unless the bound is reached (logged).
    pub(crate) async fn publish_entries(
        &self,
        primary: &str,
        fields: &[(String, String)],
        expiration: Duration,
    ) {
        for (attr, value) in fields {
            if let Err(e) = self.srdi_publish(primary, attr, value, expiration).await {
                tracing::debug!(error = %e, attr, "SRDI entry not published");
            }
        }
    }

    /// Whether this peer is a rendezvous.
    pub(crate) fn is_rendezvous(&self) -> bool {
        self.status.borrow().is_rendezvous
    }
}

fn parse_key(q: &str) -> Option<(&str, &str, &str)> {
    let mut it = q.splitn(3, '\t');
    Some((it.next()?, it.next()?, it.next()?))
}

/// Starts the rendezvous task of a peer.
pub(crate) fn spawn(
    inner: &Arc<Inner>,
    cfg: RendezvousConfig,
) -> Result<(RendezvousHandle, JoinHandle<()>), PeerError> {
    let g = inner.group_unique().to_string();
    let group = PeerGroupId::NET;
    let lease = inner.add_listener(lease_address(&group))?;
    let prop = inner.add_listener(propagate_address(&group))?;
    let walk = inner.add_listener(walk_address(&group))?;
    let pv = inner.add_listener(peerview_address(&group))?;
    let s = inner.add_listener(ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(&g))))?;
    let (cmd_tx, cmd_rx) = mpsc::channel(CMD_QUEUE);
    let (status_tx, status_rx) = watch::channel(RendezvousStatus {
        is_rendezvous: cfg.role == RendezvousRole::Rendezvous,
        ..Default::default()
    });
    let (ev_tx, _) = broadcast::channel(EVENT_CAPACITY);
    let me = *inner.identity.peer_id();
    // With the route: a JXSE edge accepts a rendezvous' grant only if the
    // route in its advertisement matches a seed address.
    let pa: bytes::Bytes = crate::pipe::local_peer_adv(inner).to_xml().into();
    let role = match &cfg.role {
        RendezvousRole::Rendezvous => {
            let radv = minimal_rdv_adv(&me, &group, &inner.cfg.name);
            let seed = rand::random::<u64>();
            Role::Rdv(Box::new(RdvState {
                srv: RendezvousServer::new(me, group, pa, radv.into(), cfg.server, seed),
                srdi: SrdiNode::new(me, &g, DISCOVERY_HANDLER, cfg.srdi),
                peers: cfg.peers.clone(),
                known: HashMap::new(),
                connecting: HashSet::new(),
                last_dial: HashMap::new(),
                relayed: HashMap::new(),
                next_relay_id: 1,
                walked: 0,
            }))
        }
        RendezvousRole::Edge { seeds } => Role::Edge(Box::new(EdgeState {
            cli: None,
            pa,
            cfg: cfg.edge,
            first_seed: cfg.first_seed,
            seeds: seeds.clone(),
            known: HashMap::new(),
            connecting: HashSet::new(),
            last_dial: HashMap::new(),
            published: BTreeMap::new(),
            pending: HashMap::new(),
            next_qid: 1,
            busy: 0,
            answered: 0,
        })),
    };
    let (conn_tx, conn_rx) = mpsc::channel(64);
    let task = Task {
        inner: Arc::downgrade(inner),
        g,
        me,
        t0: Instant::now(),
        role,
        out: Vec::new(),
        status: status_tx,
        events: ev_tx.clone(),
        conn_tx,
    };
    let h = tokio::spawn(task.run(cmd_rx, conn_rx, [lease, prop, walk, pv, s]));
    Ok((
        RendezvousHandle {
            cmd: cmd_tx,
            status: status_rx,
            events: ev_tx,
        },
        h,
    ))
}

struct RdvState {
    srv: RendezvousServer,
    srdi: SrdiNode,
    /// The other rendezvous to form the peer view with.
    peers: Vec<SocketAddr>,
    /// Their peer IDs, once connected.
    known: HashMap<PeerId, SocketAddr>,
    connecting: HashSet<SocketAddr>,
    last_dial: HashMap<SocketAddr, u64>,
    /// Lookups this rendezvous forwarded to another one (the replica or
    /// the central server): its query ID -> (edge, the edge's query ID),
    /// so the answer is relayed to the edge. Bounded by
    /// [`MAX_RELAYED_LOOKUPS`] (oldest dropped, the edge re-asks).
    relayed: HashMap<i32, (PeerId, i32, u64)>,
    next_relay_id: i32,
    /// Messages that arrived by a walk.
    walked: u64,
}

struct Pending {
    text: String,
    next_send: u64,
    deadline: u64,
    reply: oneshot::Sender<Result<Vec<PeerId>, RendezvousError>>,
}

struct EdgeState {
    cli: Option<EdgeClient>,
    pa: bytes::Bytes,
    cfg: EdgeConfig,
    first_seed: usize,
    seeds: Vec<SocketAddr>,
    known: HashMap<PeerId, SocketAddr>,
    connecting: HashSet<SocketAddr>,
    /// When each seed was last dialled (re-dials at most every [`REDIAL_MS`]).
    last_dial: HashMap<SocketAddr, u64>,
    published: BTreeMap<(String, String, String), i64>,
    pending: HashMap<i32, Pending>,
    next_qid: i32,
    busy: u64,
    answered: u64,
}

enum Role {
    Rdv(Box<RdvState>),
    Edge(Box<EdgeState>),
}

struct Task {
    inner: std::sync::Weak<Inner>,
    g: String,
    me: PeerId,
    t0: Instant,
    role: Role,
    out: Vec<Transmit>,
    status: watch::Sender<RendezvousStatus>,
    events: broadcast::Sender<RendezvousEvent>,
    conn_tx: mpsc::Sender<(SocketAddr, Option<PeerId>)>,
}

/// When a lookup answered `Juxta.Busy` at `now` is asked again: after the
/// peer's `retry_after_ms` (any `u64` a peer sent), at least 1 ms and at
/// most [`MAX_BUSY_RETRY_MS`], saturating at the end of time.
fn busy_retry_at(now: u64, retry_after_ms: u64) -> u64 {
    now.saturating_add(retry_after_ms.clamp(1, MAX_BUSY_RETRY_MS))
}

impl Task {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    async fn run(
        mut self,
        mut cmds: mpsc::Receiver<Cmd>,
        mut conns: mpsc::Receiver<(SocketAddr, Option<PeerId>)>,
        listeners: [crate::Listener; 5],
    ) {
        let [mut lease, mut prop, mut walk, mut pv, mut s] = listeners;
        let dial = match &self.role {
            Role::Edge(e) => e.seeds.clone(),
            Role::Rdv(r) => r.peers.clone(),
        };
        for a in dial {
            self.connect(a);
        }
        loop {
            let now = self.now();
            let next = self.poll_timeout().unwrap_or(u64::MAX).min(now + TICK_MS);
            let at = self.t0 + Duration::from_millis(next);
            tokio::select! {
                c = cmds.recv() => match c {
                    Some(Cmd::Shutdown { reply }) => {
                        let r = self.shutdown_edge();
                        if !self.flush().await {
                            return;
                        }
                        let _ = reply.send(r);
                    }
                    Some(c) => self.on_cmd(c),
                    None => return,
                },
                d = lease.recv() => match d { Some(d) => self.on_lease(d), None => return },
                d = prop.recv() => match d { Some(d) => self.on_lease(d), None => return },
                d = walk.recv() => match d { Some(d) => self.on_lease(d), None => return },
                d = pv.recv() => match d { Some(d) => self.on_lease(d), None => return },
                d = s.recv() => match d { Some(d) => self.on_srdi(d.from.filter(|_| d.proven), &d.message), None => return },
                c = conns.recv() => if let Some((addr, p)) = c { self.on_connected(addr, p) },
                _ = tokio::time::sleep_until(at) => self.on_timer(),
            }
            self.drain();
            if !self.flush().await {
                return;
            }
            self.publish_status();
        }
    }

    fn poll_timeout(&self) -> Option<u64> {
        match &self.role {
            Role::Rdv(r) => match (r.srv.poll_timeout(), r.srdi.poll_timeout()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            Role::Edge(e) => {
                let p = e
                    .pending
                    .values()
                    .map(|p| p.next_send.min(p.deadline))
                    .min();
                match (e.cli.as_ref().and_then(|c| c.poll_timeout()), p) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
        }
    }

    /// Dials a seed in the background; the result comes back on `conn_tx`.
    fn connect(&mut self, addr: SocketAddr) {
        let connecting = match &mut self.role {
            Role::Edge(e) => &mut e.connecting,
            Role::Rdv(r) => &mut r.connecting,
        };
        if !connecting.insert(addr) {
            return;
        }
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let tx = self.conn_tx.clone();
        tokio::spawn(async move {
            let peer = crate::peer::connect_to(&inner, addr)
                .await
                .ok()
                .map(|m| m.remote());
            let _ = tx.send((addr, peer)).await;
        });
    }

    fn on_connected(&mut self, addr: SocketAddr, p: Option<PeerId>) {
        let now = self.now();
        if let Role::Rdv(r) = &mut self.role {
            r.connecting.remove(&addr);
            if let Some(p) = p {
                r.known.insert(p, addr);
                r.srv.peer_view_mut().add_seed(p);
                if r.srv.poll_timeout().is_some_and(|t| t <= now) {
                    r.srv.handle_timeout(now);
                }
            }
            return;
        }
        let Role::Edge(e) = &mut self.role else {
            return;
        };
        e.connecting.remove(&addr);
        if let Some(p) = p {
            e.known.insert(p, addr);
            if let Some(c) = e.cli.as_mut() {
                c.add_seed(p);
            }
        }
        // The client starts once every seed has answered or failed, with
        // the seeds in their configured order (so `first_seed` spreads
        // edges deterministically).
        if e.cli.is_none() && e.connecting.is_empty() && !e.known.is_empty() {
            let mut order: Vec<(usize, PeerId)> = e
                .known
                .iter()
                .map(|(p, a)| {
                    (
                        e.seeds.iter().position(|s| s == a).unwrap_or(usize::MAX),
                        *p,
                    )
                })
                .collect();
            order.sort_by_key(|x| x.0);
            let c = EdgeClient::new(
                self.me,
                PeerGroupId::NET,
                e.pa.clone(),
                order.into_iter().map(|(_, p)| p),
                e.cfg,
            );
            let mut c = c.with_first_seed(e.first_seed);
            c.handle_timeout(now);
            e.cli = Some(c);
        }
    }

    /// Edge: sends `Disconnect` to the leased rendezvous (queued in
    /// `out`) and stops leasing.
    fn shutdown_edge(&mut self) -> Result<(), RendezvousError> {
        let Role::Edge(e) = &mut self.role else {
            return Err(RendezvousError::NotEdge);
        };
        if let Some(c) = e.cli.as_mut() {
            c.shutdown();
            while let Some(t) = c.poll_transmit() {
                self.out.push(t);
            }
        }
        Ok(())
    }

    fn on_cmd(&mut self, c: Cmd) {
        let now = self.now();
        let g = self.g.clone();
        let me = self.me;
        let c = match c {
            Cmd::Query { from, q, raw, key } => return self.on_query(from, *q, raw, key),
            Cmd::Response(r) => return self.on_response(r),
            Cmd::Busy(b) => return self.on_busy(b),
            c => c,
        };
        let Role::Edge(e) = &mut self.role else {
            match c {
                Cmd::Publish { reply, .. } => {
                    let _ = reply.send(Err(RendezvousError::NotEdge));
                }
                Cmd::Lookup { reply, .. } => {
                    let _ = reply.send(Err(RendezvousError::NotEdge));
                }
                _ => {}
            }
            return;
        };
        match c {
            Cmd::Publish {
                key,
                expiration_ms,
                reply,
            } => {
                if !e.published.contains_key(&key) && e.published.len() >= MAX_PUBLISHED {
                    let _ = reply.send(Err(RendezvousError::TooMany("published entries")));
                    return;
                }
                if let Some(rdv) = e.cli.as_ref().and_then(|c| c.rendezvous()) {
                    let m = SrdiMessage {
                        peer: me,
                        primary_key: key.0.clone(),
                        scope: SCOPE_REPLICATE,
                        entries: vec![SrdiEntry {
                            key: key.1.clone(),
                            value: key.2.clone(),
                            expiration: expiration_ms,
                        }],
                    };
                    self.out.push(srdi_transmit(&g, rdv, &m));
                }
                e.published.insert(key, expiration_ms);
                let _ = reply.send(Ok(()));
            }
            Cmd::Lookup {
                key,
                timeout_ms,
                reply,
            } => {
                if e.pending.len() >= MAX_PENDING_LOOKUPS {
                    let _ = reply.send(Err(RendezvousError::TooMany("pending lookups")));
                    return;
                }
                let mut qid = e.next_qid;
                while e.pending.contains_key(&qid) {
                    qid = qid.wrapping_add(1).max(1);
                }
                e.next_qid = qid.wrapping_add(1).max(1);
                e.pending.insert(
                    qid,
                    Pending {
                        text: format!("{}\t{}\t{}", key.0, key.1, key.2),
                        next_send: now,
                        deadline: now.saturating_add(timeout_ms),
                        reply,
                    },
                );
                self.send_lookups(now);
            }
            Cmd::Query { .. } | Cmd::Response(_) | Cmd::Busy(_) | Cmd::Shutdown { .. } => {}
        }
    }

    /// Edge: sends every lookup that is due to the leased rendezvous.
    fn send_lookups(&mut self, now: u64) {
        let g = self.g.clone();
        let me = self.me;
        let Role::Edge(e) = &mut self.role else {
            return;
        };
        let rdv = e.cli.as_ref().and_then(|c| c.rendezvous());
        let mut expired = Vec::new();
        for (&qid, p) in e.pending.iter_mut() {
            if p.deadline <= now {
                expired.push(qid);
                continue;
            }
            if p.next_send > now {
                continue;
            }
            match rdv {
                Some(r) => {
                    let q = ResolverQuery {
                        handler: LOOKUP_HANDLER.into(),
                        query_id: qid,
                        hop_count: 0,
                        src_peer: me,
                        query: p.text.clone(),
                        src_route: None,
                    };
                    self.out.push(Transmit {
                        to: r,
                        dest: ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(&g))),
                        message: Message::new().with(q.to_element(&g)),
                    });
                    p.next_send = now + QUERY_RETRY_MS;
                }
                None => p.next_send = now + TICK_MS,
            }
        }
        for qid in expired {
            if let Some(p) = e.pending.remove(&qid) {
                let _ = p.reply.send(Err(RendezvousError::Timeout));
            }
        }
    }

    fn on_timer(&mut self) {
        let now = self.now();
        match &mut self.role {
            Role::Rdv(r) => {
                if r.srv.poll_timeout().is_some_and(|t| t <= now) {
                    r.srv.handle_timeout(now);
                }
                // An edge whose connection closed has left (it leases
                // again, here or elsewhere, when it reconnects): its lease
                // and SRDI entries go now, not when the lease would expire
                // (found by the soak: departed edges' leases and entries
                // piled up for 20 minutes).
                if let Some(inner) = self.inner.upgrade() {
                    let gone: Vec<PeerId> = r
                        .srv
                        .clients()
                        .filter(|p| inner.connection(p).is_none())
                        .collect();
                    for p in gone {
                        r.srv.handle_unreachable(&p);
                    }
                }
                r.srdi.handle_timeout(now);
                r.relayed
                    .retain(|_, (_, _, at)| now.saturating_sub(*at) < RELAY_TTL_MS);
                // Re-dial peer rendezvous whose connection is gone.
                let missing: Vec<SocketAddr> = match self.inner.upgrade() {
                    Some(inner) => r
                        .peers
                        .iter()
                        .filter(|a| {
                            r.last_dial
                                .get(*a)
                                .is_none_or(|&t| now.saturating_sub(t) >= REDIAL_MS)
                        })
                        .filter(|a| {
                            !r.known
                                .iter()
                                .any(|(p, b)| b == *a && inner.messenger(p).is_some())
                        })
                        .copied()
                        .collect(),
                    None => Vec::new(),
                };
                for &a in &missing {
                    r.last_dial.insert(a, now);
                }
                for a in missing {
                    self.connect(a);
                }
            }
            Role::Edge(e) => {
                // A closed connection to the leased rendezvous: fail over now.
                let inner = self.inner.upgrade();
                if let (Some(c), Some(inner)) = (e.cli.as_mut(), inner) {
                    if let Some(rdv) = c.rendezvous() {
                        if inner.messenger(&rdv).is_none() {
                            c.handle_unreachable(&rdv, now);
                        }
                    }
                    if c.poll_timeout().is_some_and(|t| t <= now) {
                        c.handle_timeout(now);
                    }
                }
                // Re-dial seeds whose connection is gone.
                let missing: Vec<SocketAddr> = match self.inner.upgrade() {
                    Some(inner) => e
                        .seeds
                        .iter()
                        .filter(|a| {
                            e.last_dial
                                .get(*a)
                                .is_none_or(|&t| now.saturating_sub(t) >= REDIAL_MS)
                        })
                        .filter(|a| {
                            !e.known
                                .iter()
                                .any(|(p, b)| b == *a && inner.messenger(p).is_some())
                        })
                        .copied()
                        .collect(),
                    None => Vec::new(),
                };
                for &a in &missing {
                    e.last_dial.insert(a, now);
                }
                for a in missing {
                    self.connect(a);
                }
                self.send_lookups(now);
            }
        }
    }

    fn on_lease(&mut self, d: Delivery) {
        let now = self.now();
        let Some(from) = d.from else { return };
        match &mut self.role {
            Role::Rdv(r) => {
                // Leases, disconnects, peer-view and propagation act on the
                // sender: only a peer that proved its ID may ask.
                if !d.proven {
                    if let Some(inner) = self.inner.upgrade() {
                        crate::peer::count_unproven(&inner, &from, "rendezvous");
                    }
                    return;
                }
                if let Err(e) = r.srv.handle_message(from, &d.to, d.message, now) {
                    tracing::debug!(%from, error = %e, "rendezvous message refused");
                }
            }
            Role::Edge(e) => {
                let Some(c) = e.cli.as_mut() else { return };
                if d.to.service == PROPAGATE_SERVICE {
                    // Propagated by the rendezvous: delivered here, never
                    // forwarded (edges do not repropagate).
                    if let Ok(Some(dest)) = c.accept_propagated(from, &d.message) {
                        self.deliver(from, dest, d.message);
                    }
                } else {
                    let _ = c.handle_message(from, &d.message, now);
                }
            }
        }
    }

    /// Delivers a propagated or walked message to its listener here: SRDI
    /// to the index, anything else to the peer's listener for it (the
    /// resolver, a propagate pipe, ...).
    fn deliver(&mut self, from: PeerId, dest: ServiceAddress, message: Message) {
        if dest.service == RESOLVER_SERVICE && dest.param.as_deref() == Some(&srdi_queue(&self.g)) {
            self.on_srdi(Some(from), &message);
            return;
        }
        tracing::debug!(%from, ?dest, "propagated message delivered here");
        if let Some(inner) = self.inner.upgrade() {
            inner.deliver_local(from, dest, message);
        }
    }

    /// `from`: the sender if proven (`None` otherwise: refused).
    fn on_srdi(&mut self, from: Option<PeerId>, message: &Message) {
        let now = self.now();
        if let Role::Rdv(r) = &mut self.role {
            let Some(sender) = from else {
                if let Some(inner) = self.inner.upgrade() {
                    inner
                        .stats
                        .unproven_refused
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                return;
            };
            // Only leased edges (and, for replicas, peer view members) may
            // index entries here.
            if r.srv.is_client(&sender) || r.srv.peer_view().contains(&sender) {
                let view = global_view(r.srv.me(), r.srv.peer_view().members());
                match r.srdi.handle_srdi(&sender, message, &view, now) {
                    Ok(o) => tracing::debug!(from = ?from, outcome = ?o, "SRDI entries indexed"),
                    Err(e) => tracing::debug!(error = %e, "SRDI message refused"),
                }
            }
        }
    }

    /// How a query handed over by the resolver reached this rendezvous: by
    /// a walk, flooded by another rendezvous, or directly (from its origin,
    /// an edge walking it to us, or a rendezvous forwarding it).
    fn arrival(&self, from: Option<PeerId>, raw: &Message) -> Arrival {
        let Role::Rdv(r) = &self.role else {
            return Arrival::Direct;
        };
        let from_rdv = from.is_some_and(|p| r.srv.peer_view().contains(&p));
        if WalkHeader::from_message(raw).is_ok() {
            Arrival::Walked
        } else if from_rdv && PropagateHeader::from_message(raw, &self.g).is_ok() {
            Arrival::Flooded
        } else {
            Arrival::Direct
        }
    }

    /// Runs the SRDI state machine's actions: sends, walks and floods (over
    /// the peer view), except sends back to `not_to`.
    fn run_actions(&mut self, not_to: PeerId) -> usize {
        let Role::Rdv(r) = &mut self.role else {
            return 0;
        };
        let mut n = 0;
        while let Some(a) = r.srdi.poll_action() {
            match a {
                SrdiAction::Send(t) => {
                    if t.to != self.me && t.to != not_to {
                        self.out.push(t);
                        n += 1;
                    }
                }
                SrdiAction::Walk { dest, message, ttl } => n += r.srv.walk(&dest, message, ttl),
                SrdiAction::Flood { dest, message, ttl } => {
                    r.srv.propagate(&dest, message, ttl);
                    n += 1;
                }
            }
        }
        n
    }

    fn on_query(
        &mut self,
        from: Option<PeerId>,
        q: ResolverQuery,
        raw: Message,
        key: Option<(String, String, String)>,
    ) {
        let now = self.now();
        let g = self.g.clone();
        let arrival = self.arrival(from, &raw);
        let me = self.me;
        let Role::Rdv(r) = &mut self.role else {
            return;
        };
        let view = global_view(r.srv.me(), r.srv.peer_view().members());
        if q.handler != LOOKUP_HANDLER {
            // A discovery or pipe binding query: forwarded to the
            // publishers the index names, else to the replica, else walked
            // (SRDI model), flooded or sent to the central server; whoever
            // holds the advertisement answers the querier directly, as with
            // JXSE.
            let key = key
                .as_ref()
                .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()));
            let plan = r.srdi.handle_query(&q, raw, key, arrival, &view, now);
            let forwarded = self.run_actions(q.src_peer);
            tracing::debug!(src = %q.src_peer, ?key, ?plan, ?arrival, forwarded, "query at the rendezvous");
            return;
        }
        // A Juxta lookup: this rendezvous answers with the publishers it
        // knows, or forwards to the one that should know (the replica, the
        // central server) and relays that one's answer back to the edge.
        let from_rdv = from.filter(|p| r.srv.peer_view().contains(p));
        let text = q.query.clone();
        let key = parse_key(&text);
        let plan = r.srdi.handle_query(&q, raw, key, arrival, &view, now);
        let mut hits = Vec::new();
        let mut to_rdv = Vec::new();
        let qaddr = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(&g)));
        while let Some(a) = r.srdi.poll_action() {
            match a {
                // A forward to a publisher: this rendezvous answers with it.
                SrdiAction::Send(t) if t.dest == qaddr && !view.contains(&t.to) => {
                    if hits.len() < MAX_ANSWER_PEERS {
                        hits.push(t.to)
                    }
                }
                // A forward to another rendezvous (replica, server).
                SrdiAction::Send(t) if t.dest == qaddr => {
                    if t.to != me && Some(t.to) != from_rdv {
                        to_rdv.push(t.to);
                    }
                }
                SrdiAction::Send(t) => self.out.push(t),
                // A lookup has one answer: a walk's or flood's last hop
                // could not return it, so misses are answered here.
                SrdiAction::Walk { .. } | SrdiAction::Flood { .. } => {}
            }
        }
        if plan == Some(QueryPlan::Flood) {
            if let Some((pk, at, v)) = key {
                hits = r
                    .srdi
                    .index()
                    .query(pk, Some(at), Some(v), now, MAX_ANSWER_PEERS);
            }
        }
        if plan.is_none() {
            return;
        }
        if hits.is_empty() && from_rdv.is_none() {
            if let Some(&next) = to_rdv.first() {
                if r.relayed.len() >= MAX_RELAYED_LOOKUPS {
                    if let Some(old) = r.relayed.iter().min_by_key(|(_, v)| v.2).map(|(k, _)| *k) {
                        r.relayed.remove(&old);
                    }
                }
                let mut id = r.next_relay_id;
                while r.relayed.contains_key(&id) {
                    id = id.wrapping_add(1).max(1);
                }
                r.next_relay_id = id.wrapping_add(1).max(1);
                r.relayed.insert(id, (q.src_peer, q.query_id, now));
                let mut q2 = q.clone();
                q2.query_id = id;
                // The hop count is the querier's number: saturating.
                q2.hop_count = q2.hop_count.saturating_add(1);
                self.out.push(Transmit {
                    to: next,
                    dest: qaddr,
                    message: Message::new().with(q2.to_element(&g)),
                });
                return;
            }
        }
        let body = hits
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        let resp = q.response(body);
        // A forwarded lookup is answered to the rendezvous that forwarded
        // it, which relays the answer to its edge.
        self.out.push(Transmit {
            to: from_rdv.unwrap_or(q.src_peer),
            dest: ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(&g))),
            message: Message::new().with(resp.to_element(&g)),
        });
    }

    fn on_busy(&mut self, b: BusyNotice) {
        let now = self.now();
        let Role::Edge(e) = &mut self.role else {
            return;
        };
        e.busy += 1;
        if let Some(p) = e.pending.get_mut(&b.query_id) {
            p.next_send = busy_retry_at(now, b.retry_after_ms);
        }
    }

    fn on_response(&mut self, r: ResolverResponse) {
        let g = self.g.clone();
        if let Role::Rdv(rdv) = &mut self.role {
            // The answer to a lookup this rendezvous forwarded: relay it.
            if r.handler == LOOKUP_HANDLER {
                if let Some((edge, qid, _)) = rdv.relayed.remove(&r.query_id) {
                    let back = ResolverResponse { query_id: qid, ..r };
                    self.out.push(Transmit {
                        to: edge,
                        dest: ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(&g))),
                        message: Message::new().with(back.to_element(&g)),
                    });
                }
            }
            return;
        }
        let Role::Edge(e) = &mut self.role else {
            return;
        };
        if r.handler != LOOKUP_HANDLER {
            return;
        }
        if let Some(p) = e.pending.remove(&r.query_id) {
            let peers: Vec<PeerId> = r
                .response
                .split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect();
            e.answered += 1;
            let _ = p.reply.send(Ok(peers));
        }
    }

    /// Moves the state machines' output and events to `out` and `events`.
    fn drain(&mut self) {
        let g = self.g.clone();
        let me = self.me;
        let mut delivers = Vec::new();
        match &mut self.role {
            Role::Rdv(_) => {
                let now = self.now();
                self.run_actions(me);
                let mut view_changed = false;
                if let Role::Rdv(r) = &mut self.role {
                    while let Some(ev) = r.srv.poll_event() {
                        let e = match ev {
                            ServerEvent::Deliver {
                                from,
                                dest,
                                message,
                                walk,
                            } => {
                                if walk.is_some() {
                                    r.walked += 1;
                                }
                                delivers.push((from, dest, message));
                                continue;
                            }
                            ServerEvent::ClientJoined(p) => RendezvousEvent::ClientJoined(p),
                            ServerEvent::ClientLeft(p, _) => {
                                r.srdi.remove_peer(&p);
                                RendezvousEvent::ClientLeft(p)
                            }
                            ServerEvent::Refused(p) => RendezvousEvent::Refused(p),
                            ServerEvent::RendezvousJoined(p) => {
                                view_changed = true;
                                RendezvousEvent::RendezvousJoined(p)
                            }
                            ServerEvent::RendezvousLeft(p) => {
                                view_changed = true;
                                r.srdi.remove_peer(&p);
                                RendezvousEvent::RendezvousLeft(p)
                            }
                        };
                        let _ = self.events.send(e);
                    }
                    if view_changed {
                        // The placement changed: re-place this rendezvous'
                        // own edges' entries over the new view.
                        let view = global_view(r.srv.me(), r.srv.peer_view().members());
                        let clients: Vec<PeerId> = r.srv.clients().collect();
                        r.srdi.rereplicate(clients, &view, now);
                    }
                }
                for (from, dest, message) in delivers.drain(..) {
                    self.deliver(from, dest, message);
                }
                // Delivering and re-placing may have queued more.
                self.run_actions(me);
                if let Role::Rdv(r) = &mut self.role {
                    while let Some(t) = r.srv.poll_transmit() {
                        self.out.push(t);
                    }
                }
            }
            Role::Edge(e) => {
                let Some(c) = e.cli.as_mut() else { return };
                while let Some(ev) = c.poll_event() {
                    match ev {
                        EdgeEvent::Connected { rdv, .. } => {
                            let _ = self.events.send(RendezvousEvent::LeaseGained(rdv));
                            // Lookups waiting for a rendezvous go now.
                            for p in e.pending.values_mut() {
                                p.next_send = 0;
                            }
                        }
                        EdgeEvent::Lost { rdv, reason } => {
                            let _ = self.events.send(RendezvousEvent::LeaseLost { rdv, reason });
                        }
                        EdgeEvent::RepublishSrdi { rdv } => {
                            let mut by_pk: BTreeMap<&str, Vec<SrdiEntry>> = BTreeMap::new();
                            for ((pk, at, v), exp) in &e.published {
                                by_pk.entry(pk).or_default().push(SrdiEntry {
                                    key: at.clone(),
                                    value: v.clone(),
                                    expiration: *exp,
                                });
                            }
                            for (pk, entries) in by_pk {
                                for chunk in entries.chunks(MAX_ENTRIES_PER_MESSAGE) {
                                    let m = SrdiMessage {
                                        peer: me,
                                        primary_key: pk.to_string(),
                                        scope: SCOPE_REPLICATE,
                                        entries: chunk.to_vec(),
                                    };
                                    self.out.push(srdi_transmit(&g, rdv, &m));
                                }
                            }
                        }
                    }
                }
                while let Some(t) = c.poll_transmit() {
                    self.out.push(t);
                }
            }
        }
        if matches!(self.role, Role::Edge(_)) {
            let now = self.now();
            self.send_lookups(now);
            if let Role::Edge(e) = &mut self.role {
                if let Some(c) = e.cli.as_mut() {
                    while let Some(t) = c.poll_transmit() {
                        self.out.push(t);
                    }
                }
            }
        }
    }

    /// Sends everything queued; false once the peer is gone.
    async fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let Some(inner) = self.inner.upgrade() else {
            return false;
        };
        let now = self.now();
        for t in std::mem::take(&mut self.out) {
            // Through the remote's router (an ERM header toward JXTA-framed
            // peers; a plain send over compact framing): a JXSE peer learns
            // the route back to us from the ERM, and reaches us no other
            // way (it never maps our peer ID to the connection it opened).
            let dest = t.dest;
            let m = inner.messenger(&t.to);
            if m.is_none() {
                // A query for a publisher this rendezvous is not connected
                // to (its entry came by replication): hand it to the other
                // rendezvous of the view; the one leasing the publisher
                // forwards it (the hop count bounds the detour).
                if let Role::Rdv(r) = &self.role {
                    let is_query = dest.service == RESOLVER_SERVICE
                        && dest.param.as_deref() == Some(&query_queue(&self.g));
                    if is_query && !r.srv.peer_view().contains(&t.to) {
                        let view: Vec<PeerId> = r.srv.peer_view().members().collect();
                        for v in view {
                            if let Some(vm) = inner.messenger(&v) {
                                let _ = vm.post_routed_announced(
                                    &dest.service,
                                    dest.param.as_deref(),
                                    t.message.clone(),
                                );
                            }
                        }
                        continue;
                    }
                }
            }
            let ok = match m {
                // Posted: written now or queued on the connection, never
                // awaited, so one peer that stops reading cannot hold up
                // the rendezvous task.
                Some(m) => m
                    .post_routed_announced(&dest.service, dest.param.as_deref(), t.message)
                    .is_ok(),
                None => false,
            };
            if !ok {
                match &mut self.role {
                    Role::Rdv(r) => r.srv.handle_unreachable(&t.to),
                    Role::Edge(e) => {
                        if let Some(c) = e.cli.as_mut() {
                            c.handle_unreachable(&t.to, now);
                        }
                    }
                }
            }
        }
        true
    }

    fn publish_status(&self) {
        let st = match &self.role {
            Role::Rdv(r) => {
                let s = r.srdi.stats();
                RendezvousStatus {
                    is_rendezvous: true,
                    leased_to: None,
                    clients: r.srv.client_count(),
                    index_entries: r.srdi.index().len(),
                    walked: r.walked,
                    view: r.srv.peer_view().len(),
                    queries: s.queries,
                    busy: s.busy,
                    answered: 0,
                    refused: {
                        let v = r.srv.stats();
                        v.not_member + v.over_rate + r.srv.peer_view().stats().not_sender
                    },
                }
            }
            Role::Edge(e) => RendezvousStatus {
                is_rendezvous: false,
                leased_to: e.cli.as_ref().and_then(|c| c.rendezvous()),
                clients: 0,
                index_entries: 0,
                walked: 0,
                view: 0,
                queries: 0,
                busy: e.busy,
                answered: e.answered,
                refused: 0,
            },
        };
        self.status.send_if_modified(|old| {
            if *old != st {
                *old = st;
                true
            } else {
                false
            }
        });
    }
}

fn srdi_transmit(g: &str, to: PeerId, m: &SrdiMessage) -> Transmit {
    // The handler JXSE files these entries under: its pipe resolver for
    // pipe types, its discovery service for the rest (a JXSE rendezvous
    // only indexes SRDI for handlers it runs).
    let handler = if m.primary_key.parse::<PipeType>().is_ok() {
        PIPE_RESOLVER_HANDLER
    } else {
        DISCOVERY_HANDLER
    };
    let env = ResolverSrdi {
        handler: handler.into(),
        payload: m.to_xml(),
    };
    Transmit {
        to,
        dest: ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(g))),
        message: Message::new().with(env.to_element(g)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_retry_is_capped_and_saturating() {
        // Whatever a peer sends, the retry comes within the cap.
        assert_eq!(busy_retry_at(5, u64::MAX), 5 + MAX_BUSY_RETRY_MS);
        assert_eq!(
            busy_retry_at(5, MAX_BUSY_RETRY_MS + 1),
            5 + MAX_BUSY_RETRY_MS
        );
        assert_eq!(busy_retry_at(5, 250), 255);
        // Zero still waits a little; the end of time saturates.
        assert_eq!(busy_retry_at(5, 0), 6);
        assert_eq!(busy_retry_at(u64::MAX - 1, u64::MAX), u64::MAX);
    }
}
