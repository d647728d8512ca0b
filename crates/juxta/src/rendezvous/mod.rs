//! The rendezvous service task: a thin tokio driver of one group's sans-IO
//! [`Node`] (`juxta_proto::node`), the
//! [`RendezvousNode`](juxta_proto::rendezvous::node::RendezvousNode)
//! (which assembles the RVP and SRDI state machines) composed with the
//! group's resolver rules, made by [`crate::resolver::group_node`].
//!
//! Why it exists: the state machine decides *what* to send and *when*
//! (lease choice, lookup re-sends and busy back-off, the forwarded-lookup
//! table, SRDI republication, peer-view forwarding, and which resolver
//! queries and responses are admitted and who gets them); this task owns
//! the clock (milliseconds since the task started), the timer
//! (`poll_timeout`), the listeners, the dials and the connections, and
//! reports what it sees (messages, dial results, closed links). The
//! simulator (`juxta_proto::sim`, `juxta-proto/tests/rendezvous_sim.rs`)
//! and the socket-less tests drive the same `Node` on virtual time.
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
//! `ORes`/`IRes` queues. The resolver task hands this task the group's
//! resolver messages once scoped and authenticated (`crate::resolver`);
//! the node keeps Juxta's lookups, busy notices and the answers it awaits,
//! and the queries and responses it admitted for the other services go
//! back to the resolver task, which may hand a query to the node's SRDI
//! index (discovery or pipe queries on a rendezvous). So a JXSE edge
//! leases a Juxta rendezvous, and a JXSE edge's discovery query reaches,
//! through the rendezvous' SRDI index, the Juxta edge that published the
//! advertisement (`tests/interop_rendezvous.rs`).
//!
//! With [`RendezvousConfig::peers`], rendezvous form a peer view: SRDI
//! entries are replicated over it, lookups are forwarded to the replica
//! (and the answer relayed back), queries are walked or flooded.
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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use juxta_proto::discovery::DiscoveryQuery;
use juxta_proto::endpoint::{Delivery, ServiceAddress};
use juxta_proto::id::PeerGroupId;
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use juxta_proto::node::{Event, InputError, Node};
use juxta_proto::pipe::binding::PipeResolverMsg;
use juxta_proto::rendezvous::edge::LossReason;
use juxta_proto::rendezvous::messages::{
    lease_address, peerview_address, propagate_address, walk_address,
};
use juxta_proto::rendezvous::node::{lookup_peers, srdi_key, NodeError, NodeEvent, QueryId};
use juxta_proto::resolver::node::{Refusal, ResolverStats};
use juxta_proto::resolver::{srdi_queue, ResolverQuery, RESOLVER_SERVICE};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::peer::{Inner, PeerError};

pub use juxta_proto::rendezvous::node::{
    RendezvousConfig, RendezvousRole, RendezvousStatus, LOOKUP_HANDLER, MAX_ANSWER_PEERS,
    MAX_BUSY_RETRY_MS, MAX_PENDING_LOOKUPS, MAX_PUBLISHED, MAX_RELAYED_LOOKUPS, QUERY_RETRY_MS,
};

/// Events buffered per subscriber; a slower subscriber gets
/// `RecvError::Lagged` with the number it missed.
pub const EVENT_CAPACITY: usize = 1024;
/// Commands queued from handles before callers wait.
const CMD_QUEUE: usize = 4096;

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
    /// A resolver message of the group (scoped and authenticated by the
    /// resolver task) for the node.
    Resolver {
        from: PeerId,
        proven: bool,
        dest: Arc<ServiceAddress>,
        message: Message,
    },
    /// An admitted query the resolver task hands to the SRDI index (a
    /// discovery or pipe query on a rendezvous), with the message it came
    /// in.
    Query {
        from: Option<PeerId>,
        q: Box<ResolverQuery>,
        raw: Message,
        key: Option<(String, String, String)>,
    },
    /// Propagate a message group-wide (edge: through the leased
    /// rendezvous); the reply names the peers it covers.
    Propagate {
        dest: ServiceAddress,
        message: Message,
        ttl: i32,
        reply: oneshot::Sender<Option<Vec<PeerId>>>,
    },
    /// A rendezvous address learned at run time (LAN discovery).
    AddSeed(SocketAddr),
    /// Auto-rendezvous: become a rendezvous (with these peers) or an edge
    /// (leasing these seeds).
    SetRole {
        rendezvous: bool,
        seeds: Vec<SocketAddr>,
    },
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
    resolver: watch::Receiver<ResolverStats>,
    events: broadcast::Sender<RendezvousEvent>,
}

fn key_of(pk: &str, attr: &str, value: &str) -> Result<(String, String, String), RendezvousError> {
    srdi_key(pk, attr, value).map_err(RendezvousError::from)
}

impl From<NodeError> for RendezvousError {
    fn from(e: NodeError) -> RendezvousError {
        match e {
            NodeError::NotEdge => RendezvousError::NotEdge,
            NodeError::TooMany(w) => RendezvousError::TooMany(w),
            NodeError::Invalid(w) => RendezvousError::Invalid(w),
            // An input's error, never a command's.
            NodeError::Unproven => RendezvousError::Invalid("sender"),
        }
    }
}

impl RendezvousHandle {
    /// The current state.
    pub fn status(&self) -> RendezvousStatus {
        self.status.borrow().clone()
    }

    /// The counters of the group's resolver, which decides this group's
    /// resolver traffic on this peer (queries and responses admitted,
    /// refusals by kind; the same refusals are counted peer-wide in
    /// [`crate::Stats`]).
    ///
    /// ```no_run
    /// # fn demo(rdv: juxta::Peer) {
    /// if let Some(h) = rdv.rendezvous() {
    ///     let s = h.resolver_stats();
    ///     println!("{} queries admitted, {} throttled", s.queries, s.throttled);
    /// }
    /// # }
    /// ```
    pub fn resolver_stats(&self) -> ResolverStats {
        *self.resolver.borrow()
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

    /// Edge: the rendezvous leased now (`None` on a rendezvous, or while
    /// no lease is held).
    pub(crate) fn leased_to(&self) -> Option<PeerId> {
        self.status.borrow().leased_to
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
    /// Hands a resolver message of the group, scoped and authenticated,
    /// to the node (resolver task only). Waits while the task's queue is
    /// full (back-pressure on the connection it came on).
    pub(crate) async fn resolver_message(
        &self,
        from: PeerId,
        proven: bool,
        dest: Arc<ServiceAddress>,
        message: Message,
    ) {
        let _ = self
            .cmd
            .send(Cmd::Resolver {
                from,
                proven,
                dest,
                message,
            })
            .await;
    }

    /// Hands an admitted resolver query to the node's SRDI index (resolver
    /// task only). `key` is the SRDI key it asks for, if any. Waits while
    /// the task's queue is full.
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

    /// Propagates `message` group-wide to listener `dest` with `ttl`
    /// (JXSE's `RendezVousService.propagate`): an edge hands it to its
    /// leased rendezvous, which delivers it and sends it on to its other
    /// edges and its peer view (under its per-sender propagation rate); a
    /// rendezvous sends it to its edges and peer view. Returns the peers
    /// the propagation covers directly (the leased rendezvous; a
    /// rendezvous' edges and peer view), or `None` when nothing was sent
    /// (an edge without a lease, or the service stopped).
    pub(crate) async fn propagate(
        &self,
        dest: ServiceAddress,
        message: Message,
        ttl: i32,
    ) -> Option<Vec<PeerId>> {
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Cmd::Propagate {
                dest,
                message,
                ttl,
                reply,
            })
            .await
            .ok()?;
        rx.await.ok()?
    }

    /// Whether this peer is a rendezvous.
    pub(crate) fn is_rendezvous(&self) -> bool {
        self.status.borrow().is_rendezvous
    }

    /// A receiver of the state, woken on every change.
    pub(crate) fn watch_status(&self) -> watch::Receiver<RendezvousStatus> {
        self.status.clone()
    }

    /// Adds a rendezvous address at run time (an edge's seed, a
    /// rendezvous' peer), dialled at once; at most
    /// [`juxta_proto::rendezvous::node::MAX_LINK_ADDRS`] are kept. LAN
    /// discovery ([`crate::lan`]) adds the rendezvous it verifies.
    pub async fn add_seed(&self, addr: SocketAddr) -> Result<(), RendezvousError> {
        self.cmd
            .send(Cmd::AddSeed(addr))
            .await
            .map_err(|_| RendezvousError::Stopped)
    }

    /// Switches role (auto-rendezvous): the state machine is rebuilt in
    /// the new role; an edge's pending lookups end with
    /// [`RendezvousError::Stopped`], a rendezvous' leases and index are
    /// dropped (its edges fail over).
    pub(crate) async fn set_role(
        &self,
        rendezvous: bool,
        seeds: Vec<SocketAddr>,
    ) -> Result<(), RendezvousError> {
        self.cmd
            .send(Cmd::SetRole { rendezvous, seeds })
            .await
            .map_err(|_| RendezvousError::Stopped)
    }
}

/// Starts the rendezvous task of a peer (Net peer group).
pub(crate) fn spawn(
    inner: &Arc<Inner>,
    cfg: RendezvousConfig,
) -> Result<(RendezvousHandle, JoinHandle<()>), PeerError> {
    spawn_in(inner, cfg, None)
}

/// Starts the rendezvous task of a peer in a group (`None`: the Net peer
/// group): the same machine on the group's addresses; in a certificate
/// group, every message sealed by its sender and opened (or dropped and
/// counted in [`crate::Stats::group_unauthenticated`]) on arrival.
pub(crate) fn spawn_in(
    inner: &Arc<Inner>,
    cfg: RendezvousConfig,
    scope: Option<Arc<crate::group::GroupCtx>>,
) -> Result<(RendezvousHandle, JoinHandle<()>), PeerError> {
    let (g, group) = match &scope {
        None => (inner.group_unique().to_string(), PeerGroupId::NET),
        Some(c) => (c.unique.clone(), c.id),
    };
    let lease = inner.add_listener(lease_address(&group))?;
    let prop = inner.add_listener(propagate_address(&group))?;
    let walk = inner.add_listener(walk_address(&group))?;
    let pv = inner.add_listener(peerview_address(&group))?;
    let s = inner.add_listener(ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(&g))))?;
    // The Net group's resolver queues come here straight from the
    // connections (the resolver task does not listen on them when the
    // peer runs this service); a group's come through the resolver task,
    // which checks their member tags first.
    let [queries, responses] = match &scope {
        None => crate::resolver::net_queues(inner)?.map(Some),
        Some(_) => [None, None],
    };
    let (cmd_tx, cmd_rx) = mpsc::channel(CMD_QUEUE);
    let (status_tx, status_rx) = watch::channel(RendezvousStatus {
        is_rendezvous: cfg.role == RendezvousRole::Rendezvous,
        ..Default::default()
    });
    let (ev_tx, _) = broadcast::channel(EVENT_CAPACITY);
    let (resolver_tx, resolver_rx) = watch::channel(ResolverStats::default());
    let me = *inner.identity.peer_id();
    // With the route: a JXSE edge accepts a rendezvous' grant only if the
    // route in its advertisement matches a seed address.
    let pa: bytes::Bytes = crate::pipe::local_peer_adv(inner).to_xml().into();
    let node = crate::resolver::group_node(
        cfg.clone(),
        me,
        group,
        &g,
        pa.clone(),
        &inner.cfg.name,
        &inner.cfg.discovery,
    );
    let (conn_tx, conn_rx) = mpsc::channel(64);
    let links = inner.links.subscribe();
    let task = Task {
        cfg,
        group,
        scope,
        pa,
        name: inner.cfg.name.clone(),
        g: g.clone(),
        inner: Arc::downgrade(inner),
        srdi_addr: Arc::new(ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(&g)))),
        clock: inner.clock,
        node,
        lookups: HashMap::new(),
        status: status_tx,
        resolver: resolver_tx,
        events: ev_tx.clone(),
        conn_tx,
    };
    let h = tokio::spawn(task.run(
        cmd_rx,
        conn_rx,
        links,
        [lease, prop, walk, pv, s],
        [queries, responses],
    ));
    Ok((
        RendezvousHandle {
            cmd: cmd_tx,
            status: status_rx,
            resolver: resolver_rx,
            events: ev_tx,
        },
        h,
    ))
}

/// What [`Task::shortcut`] found for an admitted query.
enum Shortcut {
    /// Only to be forwarded, under this SRDI key.
    Forward(Option<(String, String, String)>),
    /// For the resolver task's services.
    HandBack,
    /// Unreadable (counted as the resolver task counts it).
    Malformed(Box<dyn std::error::Error + Send + Sync>),
}

/// Most resolver messages the task takes from one queue in one wake-up
/// before it sends what they produced and looks at its other inputs.
const RESOLVER_BATCH: usize = 32;

/// The driver: owns the clock, the timer, the listeners and the dials;
/// every decision is the state machine's.
struct Task {
    /// The configuration, for a role switch.
    cfg: RendezvousConfig,
    group: PeerGroupId,
    /// The group (`None`: the Net peer group).
    scope: Option<Arc<crate::group::GroupCtx>>,
    pa: bytes::Bytes,
    name: String,
    g: String,
    inner: std::sync::Weak<Inner>,
    srdi_addr: Arc<ServiceAddress>,
    clock: juxta_proto::time::Clock,
    /// The group's node (its rendezvous part replaced on a role switch).
    node: Node<crate::resolver::Service>,
    /// Callers of lookups the machine has outstanding (as many as it
    /// accepts: [`MAX_PENDING_LOOKUPS`]).
    lookups: HashMap<QueryId, oneshot::Sender<Result<Vec<PeerId>, RendezvousError>>>,
    status: watch::Sender<RendezvousStatus>,
    resolver: watch::Sender<ResolverStats>,
    events: broadcast::Sender<RendezvousEvent>,
    conn_tx: mpsc::Sender<(SocketAddr, Option<PeerId>)>,
}

impl Task {
    fn now(&self) -> u64 {
        self.clock.now()
    }

    async fn run(
        mut self,
        mut cmds: mpsc::Receiver<Cmd>,
        mut conns: mpsc::Receiver<(SocketAddr, Option<PeerId>)>,
        mut links: broadcast::Receiver<crate::peer::LinkEvent>,
        listeners: [crate::Listener; 5],
        net: [Option<crate::Listener>; 2],
    ) {
        let [mut lease, mut prop, mut walk, mut pv, mut s] = listeners;
        let [mut queries, mut responses] = net;
        loop {
            // The machine's first events (dials) are handled before the
            // first wait.
            self.drain();
            if !self.flush().await {
                return;
            }
            self.publish_status();
            // The machine's timer only (capped at an hour, to stay within
            // `Instant`'s range): closed links arrive as events.
            let now = self.now();
            let next = self
                .node
                .poll_timeout()
                .unwrap_or(u64::MAX)
                .min(now.saturating_add(3_600_000));
            let at: tokio::time::Instant = self.clock.instant(next).into();
            tokio::select! {
                c = cmds.recv() => match c {
                    Some(Cmd::Shutdown { reply }) => {
                        let now = self.now();
                        let r = self
                            .node
                            .rendezvous_mut()
                            .shutdown(now)
                            .map_err(RendezvousError::from);
                        self.drain();
                        if !self.flush().await {
                            return;
                        }
                        let _ = reply.send(r);
                    }
                    Some(c) => self.on_cmd(c),
                    None => return,
                },
                d = lease.recv_delivery() => match d { Some(d) => self.on_delivery(d, false), None => return },
                d = prop.recv_delivery() => match d { Some(d) => self.on_delivery(d, false), None => return },
                d = walk.recv_delivery() => match d { Some(d) => self.on_delivery(d, false), None => return },
                d = pv.recv_delivery() => match d { Some(d) => self.on_delivery(d, false), None => return },
                d = s.recv_delivery() => match d { Some(d) => self.on_delivery(d, true), None => return },
                d = crate::resolver::recv_opt(&mut queries) => match d {
                    Some(d) => self.on_resolver_batch(d, &mut queries),
                    None => return,
                },
                d = crate::resolver::recv_opt(&mut responses) => match d {
                    Some(d) => self.on_resolver_batch(d, &mut responses),
                    None => return,
                },
                c = conns.recv() => if let Some((addr, p)) = c {
                    let now = self.now();
                    self.node.handle_dialed(addr, p, now);
                },
                l = links.recv() => match l {
                    Ok(crate::peer::LinkEvent::Up(_)) => {}
                    // A link went down (or events were missed): whoever
                    // it carried, directly or as a route's first hop.
                    Ok(crate::peer::LinkEvent::Down(_)) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        let now = self.now();
                        self.check_links(now);
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tokio::time::sleep_until(at) => self.on_tick(),
            }
        }
    }

    /// Dials an address in the background; the result comes back on
    /// `conn_tx`.
    fn connect(&mut self, addr: SocketAddr) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let tx = self.conn_tx.clone();
        let tasks = inner.clone();
        tasks.tasks.spawn(async move {
            let m = if inner.cfg.rendezvous_http {
                crate::transport::http::connect(&inner, addr, inner.cfg.http.clone())
                    .await
                    .ok()
            } else {
                crate::peer::connect_to(&inner, addr).await.ok()
            };
            let peer = m.map(|m| m.remote());
            let _ = tx.send((addr, peer)).await;
        });
    }

    /// Runs the machine's timers, after reporting links gone meanwhile
    /// (a route that expired).
    fn on_tick(&mut self) {
        let now = self.now();
        self.check_links(now);
        self.node.handle_timeout(now);
    }

    /// Reports the links that are down: a leased edge whose connection
    /// closed has left; a seed or peer rendezvous with no messenger left
    /// (no connection, no route through a connected peer) is down.
    fn check_links(&mut self, now: u64) {
        if let Some(inner) = self.inner.upgrade() {
            // A leased edge whose connection closed has left; a seed or
            // peer rendezvous with no messenger left is down.
            let mut down: Vec<PeerId> = self
                .node
                .rendezvous()
                .clients()
                .into_iter()
                .filter(|p| inner.connection(p).is_none())
                .collect();
            down.extend(
                self.node
                    .rendezvous()
                    .linked()
                    .into_iter()
                    .filter(|p| inner.messenger(p).is_none()),
            );
            for p in down {
                self.node.handle_link_down(&p, now);
            }
        }
    }

    fn on_delivery(&mut self, mut d: Delivery, srdi: bool) {
        let now = self.now();
        let proven = d.proven();
        let dest = if srdi { self.srdi_addr.clone() } else { d.to };
        if let Some(c) = &self.scope {
            // A group's service: only what a member sealed (a non-member's
            // lease request, SRDI entries or lookup never reach the
            // machine).
            match c.open(&dest, std::mem::take(&mut d.message), d.from) {
                Ok(m) => d.message = m,
                Err(e) => {
                    if let Some(inner) = self.inner.upgrade() {
                        let n = inner
                            .stats
                            .group_unauthenticated
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                            + 1;
                        if n.is_power_of_two() {
                            tracing::info!(group = %c.id, from = ?d.from, error = %e, refused = n, "group rendezvous message without a valid member seal dropped");
                        }
                    }
                    return;
                }
            }
        }
        let Some(from) = d.from else {
            if srdi && self.node.rendezvous().is_rendezvous() {
                if let Some(inner) = self.inner.upgrade() {
                    inner
                        .stats
                        .unproven_refused
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            return;
        };
        let r = self
            .node
            .handle_message(from, proven, &dest, d.message, now);
        self.on_refused(&from, r);
    }

    /// A message on one of the Net group's resolver queues: into the
    /// group's node, whose resolver scopes it (a message addressed in
    /// another group is refused there), as the resolver task hands a
    /// subgroup's messages in ([`Cmd::Resolver`]).
    fn on_resolver(&mut self, inner: &Inner, d: Delivery) {
        let Some(from) = d.from else {
            crate::resolver::count(inner, &Refusal::Anonymous);
            return;
        };
        let now = self.now();
        let proven = d.proven();
        let r =
            self.node
                .handle_message_in(from, proven, d.group.as_deref(), &d.to, d.message, now);
        self.on_refused(&from, r);
    }

    /// [`Task::on_resolver`] for `d` and for what else already waits on
    /// its queue, up to [`RESOLVER_BATCH`] messages in one wake-up: their
    /// transmits are flushed together, and the timer and the other queues
    /// are looked at once per batch instead of once per message.
    fn on_resolver_batch(&mut self, d: Delivery, queue: &mut Option<crate::Listener>) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        self.on_resolver(&inner, d);
        if let Some(q) = queue.as_mut() {
            for _ in 1..RESOLVER_BATCH {
                let Some(d) = q.try_recv() else {
                    break;
                };
                self.on_resolver(&inner, d);
            }
        }
    }

    /// An admitted query that this rendezvous certainly cannot answer is
    /// forwarded along the group's SRDI index here, without the round trip
    /// through the resolver task, which would only forward it too
    /// ([`Task::shortcut`]). Every other event is handed back.
    fn forward_unanswerable(
        &mut self,
        event: Event<crate::resolver::Service>,
    ) -> Option<Event<crate::resolver::Service>> {
        let Event::Query {
            key, from, query, ..
        } = &event
        else {
            return Some(event);
        };
        if !self.node.rendezvous().is_rendezvous()
            || self.scope.as_ref().is_some_and(|c| c.is_closed())
        {
            return Some(event);
        }
        let inner = self.inner.upgrade()?;
        let srdi_key = match self.shortcut(&inner, *key, *from, query) {
            Shortcut::Forward(k) => k,
            Shortcut::HandBack => return Some(event),
            Shortcut::Malformed(why) => {
                // As the resolver task would count it.
                inner
                    .stats
                    .resolver_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(%why, "resolver message dropped");
                return None;
            }
        };
        let Event::Query {
            from,
            query,
            message,
            ..
        } = event
        else {
            return None;
        };
        let now = self.now();
        self.node
            .forward_query(Some(from), *query, message, srdi_key, now);
        None
    }

    /// What the resolver task would do with an admitted query on this
    /// rendezvous, when all it would do is forward it:
    /// - a discovery query the group's cache (the Net group's, or this
    ///   group's partition, each with its own filter) certainly holds
    ///   nothing for: a rendezvous sends no empty answers
    ///   ([`juxta_proto::discovery::answers`]);
    /// - a pipe binding query for a pipe with no input pipe here: a
    ///   rendezvous that does not hold the pipe stays silent (a "not
    ///   found" would end the querier's binding).
    fn shortcut(
        &self,
        inner: &Inner,
        key: crate::resolver::Service,
        from: PeerId,
        query: &ResolverQuery,
    ) -> Shortcut {
        match key {
            crate::resolver::Service::Discovery => {
                let Some(cache) = crate::resolver::cache_of(inner, self.scope.as_ref()) else {
                    return Shortcut::HandBack;
                };
                let dq = match DiscoveryQuery::parse(&query.query) {
                    Ok(dq) => dq,
                    Err(e) => return Shortcut::Malformed(Box::new(e)),
                };
                let asked_directly = from == query.src_peer;
                if crate::discovery::certainly_unanswered(&cache, &dq)
                    && !juxta_proto::discovery::answers(false, true, asked_directly)
                {
                    Shortcut::Forward(dq.srdi_key())
                } else {
                    Shortcut::HandBack
                }
            }
            crate::resolver::Service::PipeBinding => {
                let msg = match PipeResolverMsg::parse(&query.query) {
                    Ok(m) => m,
                    Err(e) => return Shortcut::Malformed(Box::new(e)),
                };
                match msg.queried_pipe() {
                    Some((id, ty)) if !inner.pipes.has_input(&id, ty, &self.g) => {
                        Shortcut::Forward(msg.srdi_key())
                    }
                    _ => Shortcut::HandBack,
                }
            }
            _ => Shortcut::HandBack,
        }
    }

    /// Counts an input the node refused.
    fn on_refused(&self, from: &PeerId, r: Result<(), InputError>) {
        let Err(e) = r else {
            return;
        };
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        match e {
            InputError::Resolver(r) => crate::resolver::count(&inner, &r),
            InputError::Rendezvous(NodeError::Unproven) => {
                crate::peer::count_unproven(&inner, from, "rendezvous")
            }
            InputError::Rendezvous(_) => {}
        }
    }

    fn on_cmd(&mut self, c: Cmd) {
        let now = self.now();
        match c {
            Cmd::Resolver {
                from,
                proven,
                dest,
                message,
            } => {
                let r = self.node.handle_message(from, proven, &dest, message, now);
                self.on_refused(&from, r);
            }
            Cmd::Query { from, q, raw, key } => self.node.forward_query(from, *q, raw, key, now),
            Cmd::Publish {
                key,
                expiration_ms,
                reply,
            } => {
                let r = self.node.rendezvous_mut().publish(key, expiration_ms, now);
                let _ = reply.send(r.map_err(RendezvousError::from));
            }
            Cmd::Lookup {
                key,
                timeout_ms,
                reply,
            } => match self.node.rendezvous_mut().lookup(&key, timeout_ms, now) {
                Ok(id) => {
                    self.lookups.insert(id, reply);
                }
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                }
            },
            Cmd::Propagate {
                dest,
                message,
                ttl,
                reply,
            } => {
                // An edge's propagation goes to its rendezvous; a
                // rendezvous' to its edges for sure (and its peer view).
                let rdv = self.node.rendezvous_mut();
                let covered = rdv.propagate(&dest, message, ttl, now).map(|_| {
                    let mut v = rdv.clients();
                    v.extend(rdv.leased_to());
                    v
                });
                let _ = reply.send(covered);
            }
            Cmd::AddSeed(a) => {
                self.node.rendezvous_mut().add_seed(a, now);
            }
            Cmd::SetRole { rendezvous, seeds } => {
                if rendezvous == self.node.rendezvous().is_rendezvous() {
                    for a in seeds {
                        self.node.rendezvous_mut().add_seed(a, now);
                    }
                    return;
                }
                let mut c = self.cfg.clone();
                if rendezvous {
                    c.role = RendezvousRole::Rendezvous;
                    c.peers = seeds;
                } else {
                    c.role = RendezvousRole::Edge { seeds };
                }
                for (_, tx) in self.lookups.drain() {
                    let _ = tx.send(Err(RendezvousError::Stopped));
                }
                let me = self.node.me();
                tracing::info!(rendezvous, "rendezvous role switched");
                // The new machine runs on the same clock, behind the same
                // resolver (its budgets carry over).
                *self.node.rendezvous_mut() = crate::resolver::rendezvous_part(
                    c,
                    me,
                    self.group,
                    &self.g,
                    self.pa.clone(),
                    &self.name,
                );
                self.node.handle_timeout(now);
            }
            // Handled in `run` (it flushes before replying).
            Cmd::Shutdown { reply } => {
                let r = self.node.rendezvous_mut().shutdown(now);
                let _ = reply.send(r.map_err(RendezvousError::from));
            }
        }
    }

    /// Carries out the machine's events.
    fn drain(&mut self) {
        while let Some(ev) = self.node.poll_event() {
            let ev = match ev {
                Event::Rendezvous(e) => e,
                Event::Refused(r) => {
                    if let Some(inner) = self.inner.upgrade() {
                        crate::resolver::count(&inner, &r);
                    }
                    continue;
                }
                // Admitted for a service of the resolver task.
                event @ (Event::Query { .. } | Event::Response { .. }) => {
                    if let Some(event) = self.forward_unanswerable(event) {
                        self.to_resolver(event);
                    }
                    continue;
                }
            };
            let e = match ev {
                NodeEvent::Dial(a) => {
                    self.connect(a);
                    continue;
                }
                NodeEvent::Deliver {
                    from,
                    dest,
                    message,
                } => {
                    tracing::debug!(%from, ?dest, "propagated message delivered here");
                    if let Some(inner) = self.inner.upgrade() {
                        // In a group, what its rendezvous propagated came
                        // under a member seal, opened and verified on
                        // arrival (`on_delivery`): the group's services
                        // take it as vouched for by that member (the
                        // origin's own tag was checked by the rendezvous
                        // and is not carried on).
                        let vouched = self.scope.as_ref().map(|c| c.unique.clone());
                        // A JXSE propagate pipe's message (wire-pipe
                        // service) goes to the input pipe its header names.
                        match crate::pipe::wire_pipe_destination(&inner, &dest, &message) {
                            Ok(Some(pipe)) => inner.deliver_local(from, pipe, message, vouched),
                            Ok(None) => inner.deliver_local(from, dest, message, vouched),
                            Err(_) => {}
                        }
                    }
                    continue;
                }
                NodeEvent::Answered { id, response } => {
                    if let Some(tx) = self.lookups.remove(&id) {
                        let _ = tx.send(Ok(lookup_peers(&response)));
                    }
                    continue;
                }
                NodeEvent::TimedOut { id } => {
                    if let Some(tx) = self.lookups.remove(&id) {
                        let _ = tx.send(Err(RendezvousError::Timeout));
                    }
                    continue;
                }
                NodeEvent::LeaseGained(p) => RendezvousEvent::LeaseGained(p),
                NodeEvent::LeaseLost { rdv, reason } => RendezvousEvent::LeaseLost { rdv, reason },
                NodeEvent::ClientJoined(p) => {
                    // A group's rendezvous hands a new edge the group's
                    // revocation list (a member joining after a
                    // revocation learns it here).
                    if let (Some(c), Some(inner)) = (&self.scope, self.inner.upgrade()) {
                        if let Some(l) = c.revocations() {
                            crate::group::send_revocations(&inner, c, &l, Some(p));
                        }
                    }
                    RendezvousEvent::ClientJoined(p)
                }
                NodeEvent::ClientLeft(p) => RendezvousEvent::ClientLeft(p),
                NodeEvent::Refused(p) => RendezvousEvent::Refused(p),
                NodeEvent::RendezvousJoined(p) => RendezvousEvent::RendezvousJoined(p),
                NodeEvent::RendezvousLeft(p) => RendezvousEvent::RendezvousLeft(p),
            };
            let _ = self.events.send(e);
        }
    }

    /// Sends everything queued; false once the peer is gone.
    async fn flush(&mut self) -> bool {
        let Some(inner) = self.inner.upgrade() else {
            return false;
        };
        // A transmit with no route goes back to the machine, which may
        // send it another way (a bounded number of rounds per call).
        for _ in 0..4 {
            let mut back = Vec::new();
            let mut unreachable = Vec::new();
            while let Some(t) = self.node.poll_transmit() {
                // Through the remote's router (an ERM header toward
                // JXTA-framed peers; a plain send over compact framing): a
                // JXSE peer learns the route back to us from the ERM, and
                // reaches us no other way. Posted: written now or queued
                // on the connection, never awaited, so one peer that stops
                // reading cannot hold up the task.
                match inner.messenger(&t.to) {
                    Some(m) => {
                        let to = t.to;
                        let dest = t.dest;
                        let sent = match &self.scope {
                            None => m.post_routed_announced(
                                &dest.service,
                                dest.param.as_deref(),
                                t.message,
                            ),
                            Some(c) => {
                                let msg = c.seal(&dest, t.message);
                                m.post_routed_in(
                                    &c.unique,
                                    &dest.service,
                                    dest.param.as_deref(),
                                    msg,
                                )
                            }
                        };
                        if sent.is_err() {
                            unreachable.push(to);
                        }
                    }
                    None => back.push(t),
                }
            }
            if back.is_empty() && unreachable.is_empty() {
                break;
            }
            let now = self.now();
            for p in unreachable {
                self.node.rendezvous_mut().handle_unreachable(&p, now);
            }
            for t in back {
                self.node.rendezvous_mut().handle_undeliverable(t, now);
            }
            self.drain();
        }
        true
    }

    /// Hands an admitted query or response to the resolver task, never
    /// waiting for it (it waits for this task): dropped and counted when
    /// its queue is full.
    fn to_resolver(&self, event: Event<crate::resolver::Service>) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let a = crate::resolver::Admitted {
            ctx: self.scope.clone(),
            group: self.g.clone(),
            event,
        };
        if inner.admitted.try_send(a).is_err() {
            let n = inner
                .stats
                .resolver_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            if n.is_power_of_two() {
                tracing::info!(group = %self.g, "resolver task behind: admitted query or response dropped");
            }
        }
    }

    fn publish_status(&self) {
        let st = self.node.rendezvous().status();
        self.status.send_if_modified(|old| {
            if *old != st {
                *old = st;
                true
            } else {
                false
            }
        });
        let rs = self.node.resolver().stats();
        self.resolver.send_if_modified(|old| {
            if *old != rs {
                *old = rs;
                true
            } else {
                false
            }
        });
    }
}
