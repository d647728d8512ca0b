//! One peer's rendezvous service, assembled: [`RendezvousNode`].
//!
//! [`EdgeClient`], [`RendezvousServer`] and [`SrdiNode`] are the parts;
//! this machine wires them the way a peer runs them, so the tokio runtime
//! (`juxta::rendezvous`) and the simulator ([`crate::sim`]) run
//! the same protocol code. It decides everything that is protocol:
//! - edge: which seed to lease (via [`EdgeClient`]), re-dial pacing
//!   ([`REDIAL_MS`]), SRDI publication and republication to every new
//!   rendezvous (chunked by [`MAX_ENTRIES_PER_MESSAGE`]), lookups with
//!   re-send after [`QUERY_RETRY_MS`] and after a busy answer's delay
//!   (capped by [`MAX_BUSY_RETRY_MS`], saturating);
//! - rendezvous: leases (via [`RendezvousServer`]), the SRDI index and
//!   query forwarding (via [`SrdiNode`]), lookup answers, the bounded table
//!   of lookups forwarded to another rendezvous ([`MAX_RELAYED_LOOKUPS`],
//!   [`RELAY_TTL_MS`]), re-placement of entries when the peer view changes,
//!   and the fan-out of queries for publishers it has no link to.
//!
//! The owner (a runtime or a simulator) only moves bytes and reports what
//! it sees, in the quinn-proto style:
//! - inputs: [`handle_message`](RendezvousNode::handle_message) (the RVP,
//!   propagate, walker, peer-view and SRDI listeners),
//!   [`handle_query`](RendezvousNode::handle_query) /
//!   [`handle_response`](RendezvousNode::handle_response) /
//!   [`handle_busy`](RendezvousNode::handle_busy) (what the resolver hands
//!   over), [`handle_dialed`](RendezvousNode::handle_dialed) and
//!   [`handle_link_down`](RendezvousNode::handle_link_down) (links),
//!   [`handle_undeliverable`](RendezvousNode::handle_undeliverable) (a
//!   transmit with no route), [`handle_timeout`](RendezvousNode::handle_timeout);
//!   commands [`publish`](RendezvousNode::publish),
//!   [`lookup`](RendezvousNode::lookup), [`query`](RendezvousNode::query),
//!   [`shutdown`](RendezvousNode::shutdown);
//! - outputs: [`poll_transmit`](RendezvousNode::poll_transmit),
//!   [`poll_event`](RendezvousNode::poll_event) (dials, local deliveries,
//!   lease and client changes, answers),
//!   [`poll_timeout`](RendezvousNode::poll_timeout).
//!
//! Time is [`Millis`]: a `u64` of milliseconds on the owner's clock (any
//! epoch; the runtime counts from the service's start, the simulator runs
//! virtual time), as everywhere in `juxta_proto::rendezvous`.
//!
//! ```
//! use juxta_proto::id::{IdFormat, IdType, JxtaId, PeerId};
//! use juxta_proto::rendezvous::node::{NodeEvent, RendezvousConfig, RendezvousNode};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let me: PeerId = JxtaId::from_parts(IdFormat::Cbid, [0x59; 16], [7; 16], IdType::Peer).try_into()?;
//! let seed: std::net::SocketAddr = "127.0.0.1:9701".parse()?;
//! let cfg = RendezvousConfig::edge(vec![seed]);
//! let mut node = RendezvousNode::new(cfg, me, "jxta-NetGroup", bytes::Bytes::new(), "edge", 1);
//! // The node asks its owner to dial the seed first.
//! assert_eq!(node.poll_event(), Some(NodeEvent::Dial(seed)));
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;

use bytes::Bytes;

use super::edge::{EdgeClient, EdgeConfig, EdgeEvent, LossReason};
use super::messages::{
    minimal_rdv_adv, BusyNotice, PropagateHeader, WalkHeader, PROPAGATE_SERVICE,
};
use super::server::{RendezvousServer, ServerConfig, ServerEvent};
use super::{IdGen, Millis, Transmit};
use crate::advertisement::{PipeType, MAX_XML_LEN};
use crate::discovery::DISCOVERY_HANDLER;
use crate::endpoint::ServiceAddress;
use crate::id::{PeerGroupId, PeerId};
use crate::message::Message;
use crate::pipe::binding::PIPE_RESOLVER_HANDLER;
use crate::resolver::{
    query_queue, response_queue, srdi_queue, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use crate::srdi::flow::AdmissionConfig;
use crate::srdi::node::{Arrival, SrdiEvent, SrdiNode, SrdiNodeConfig};
use crate::srdi::placement::global_view;
use crate::srdi::search::{QueryPlan, SearchModel};
use crate::srdi::{
    ResolverSrdi, SrdiEntry, SrdiMessage, MAX_ENTRIES_PER_MESSAGE, MAX_KEY_LEN, SCOPE_REPLICATE,
};

/// The resolver handler name of rendezvous lookups (Juxta's own handler:
/// the answer lists the publishers instead of forwarding the query).
pub const LOOKUP_HANDLER: &str = "juxta-rdv-lookup";
/// Most SRDI entries one edge keeps published.
pub const MAX_PUBLISHED: usize = 10_000;
/// Most lookups one edge has outstanding.
pub const MAX_PENDING_LOOKUPS: usize = 65_536;
/// Most lookups a rendezvous has forwarded to another rendezvous and not
/// yet seen answered (the oldest is dropped for a new one: its edge
/// re-asks).
pub const MAX_RELAYED_LOOKUPS: usize = 65_536;
/// How long a forwarded lookup's relay entry is kept.
pub const RELAY_TTL_MS: u64 = 10_000;
/// Most peers one lookup answer lists (and most read from one).
pub const MAX_ANSWER_PEERS: usize = crate::srdi::node::MAX_FORWARD;
/// How long a lookup waits for an answer before it is sent again.
pub const QUERY_RETRY_MS: u64 = 1_000;
/// How often a lookup waiting for a lease checks again.
pub const LEASE_WAIT_MS: u64 = 50;
/// The longest wait a `Juxta.Busy` answer can impose before a lookup is
/// asked again: a peer's `retry_after_ms` is capped at this.
pub const MAX_BUSY_RETRY_MS: u64 = 60_000;
/// Least time between two dials of a seed whose link is gone.
pub const REDIAL_MS: u64 = 500;
/// Most seed (edge) or peer (rendezvous) addresses kept, configured and
/// learned together.
pub const MAX_LINK_ADDRS: usize = 64;
/// Most transmits and most events queued for the owner (it drains both
/// after every input; past this they are dropped and counted).
pub const MAX_QUEUED: usize = 65_536;

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
    /// with (dialled, probed, re-dialled when their link is gone).
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

    /// No rendezvous service in the group: an edge without seeds, which
    /// never dials, leases or publishes. A [`crate::node::Node`] built on
    /// it serves a group's resolver traffic where this peer runs no
    /// rendezvous service (its owners' queries and responses come out as
    /// events; Juxta's lookups and busy notices find nothing to act on).
    ///
    /// ```
    /// use juxta_proto::rendezvous::node::{RendezvousConfig, RendezvousRole};
    /// let c = RendezvousConfig::none();
    /// assert_eq!(c.role, RendezvousRole::Edge { seeds: vec![] });
    /// ```
    pub fn none() -> RendezvousConfig {
        RendezvousConfig::edge(Vec::new())
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
    /// The peers whose forwarded queries were admitted by them under the
    /// querier's own budget: a rendezvous' peer-view members, an edge's
    /// leased rendezvous. A query one of them forwards is charged to the
    /// querier it names, not to the forwarder (whose budget would
    /// otherwise cap everything it forwards at one peer's rate).
    pub forwarders: Vec<PeerId>,
}

/// The ID of an edge's outstanding query (a resolver query ID, never 0).
pub type QueryId = i32;

/// What the owner must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// Open a link to this address, then report the peer it reached (or
    /// the failure) with [`RendezvousNode::handle_dialed`].
    Dial(SocketAddr),
    /// A propagated or walked message for a local listener other than the
    /// SRDI index (the resolver, a propagate pipe, ...).
    Deliver {
        /// The neighbour it came from.
        from: PeerId,
        /// The listener.
        dest: ServiceAddress,
        /// The message (headers still attached).
        message: Message,
    },
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
    /// Edge: the answer to query `id` (for a lookup, the publishers, see
    /// [`lookup_peers`]).
    Answered {
        /// The query.
        id: QueryId,
        /// The response text.
        response: String,
    },
    /// Edge: query `id` got no answer before its deadline.
    TimedOut {
        /// The query.
        id: QueryId,
    },
}

/// Errors of the node's commands and inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// Publishing and lookups are done by edges.
    #[error("this peer is not an edge")]
    NotEdge,
    /// A bound is reached ([`MAX_PUBLISHED`] or [`MAX_PENDING_LOOKUPS`]).
    #[error("too many {0}")]
    TooMany(&'static str),
    /// A key or value is empty, too long or contains a tab or newline.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// A rendezvous acts only on messages from peers that proved their ID.
    #[error("sender has not proven its ID")]
    Unproven,
}

/// Counters of the node itself (the parts keep their own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Transmits or events dropped because the owner did not drain.
    pub dropped: u64,
    /// Rendezvous: relay entries dropped for a newer forwarded lookup.
    pub relay_evicted: u64,
    /// Rendezvous: relay entries expired unanswered.
    pub relay_expired: u64,
    /// Rendezvous: messages refused from unproven senders.
    pub unproven: u64,
}

/// An SRDI key: (primary key, attribute, value).
pub type SrdiKey = (String, String, String);

/// Checks one part of an SRDI key.
fn check(s: &str, what: &'static str) -> Result<(), NodeError> {
    if s.is_empty() || s.len() > MAX_KEY_LEN || s.contains(['\t', '\n']) {
        return Err(NodeError::Invalid(what));
    }
    Ok(())
}

/// Checks and builds an SRDI key.
pub fn srdi_key(pk: &str, attr: &str, value: &str) -> Result<SrdiKey, NodeError> {
    check(pk, "primary key")?;
    check(attr, "attribute")?;
    check(value, "value")?;
    Ok((pk.to_string(), attr.to_string(), value.to_string()))
}

/// The publishers a lookup answer lists (at most [`MAX_ANSWER_PEERS`];
/// what does not parse is skipped).
pub fn lookup_peers(response: &str) -> Vec<PeerId> {
    response
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .take(MAX_ANSWER_PEERS)
        .collect()
}

/// When a lookup answered `Juxta.Busy` at `now` is asked again: after the
/// peer's `retry_after_ms` (any `u64` a peer sent), at least 1 ms and at
/// most [`MAX_BUSY_RETRY_MS`], saturating at the end of time.
pub fn busy_retry_at(now: Millis, retry_after_ms: u64) -> Millis {
    now.saturating_add(retry_after_ms.clamp(1, MAX_BUSY_RETRY_MS))
}

fn parse_key(q: &str) -> Option<(&str, &str, &str)> {
    let mut it = q.splitn(3, '\t');
    Some((it.next()?, it.next()?, it.next()?))
}

/// Links to seeds (edge) or peer rendezvous (rendezvous): dialled at the
/// start and re-dialled at most every [`REDIAL_MS`] while their link is
/// gone.
#[derive(Debug)]
struct Links {
    addrs: Vec<SocketAddr>,
    /// Peer IDs reached at each address (bounded by [`Links::max_known`],
    /// oldest dropped).
    known: Vec<(PeerId, SocketAddr)>,
    /// Peers whose link is up (a subset of `known`).
    up: Vec<PeerId>,
    connecting: BTreeSet<SocketAddr>,
    last_dial: BTreeMap<SocketAddr, Millis>,
}

impl Links {
    fn new(addrs: Vec<SocketAddr>) -> Links {
        Links {
            addrs,
            known: Vec::new(),
            up: Vec::new(),
            connecting: BTreeSet::new(),
            last_dial: BTreeMap::new(),
        }
    }

    fn max_known(&self) -> usize {
        self.addrs.len().saturating_mul(2).saturating_add(8)
    }

    /// A dial of `a` reached `p`.
    fn reached(&mut self, p: PeerId, a: SocketAddr) {
        self.known.retain(|(q, _)| *q != p);
        if self.known.len() >= self.max_known() {
            let old = self.known.remove(0).0;
            self.up.retain(|q| *q != old);
        }
        self.known.push((p, a));
        if !self.up.contains(&p) {
            self.up.push(p);
        }
    }

    fn down(&mut self, p: &PeerId) {
        self.up.retain(|q| q != p);
    }

    fn linked(&self, a: &SocketAddr) -> bool {
        self.known
            .iter()
            .any(|(p, b)| b == a && self.up.contains(p))
    }

    /// Addresses to dial now (marked as dialled).
    fn due(&mut self, now: Millis, initial: bool) -> Vec<SocketAddr> {
        let mut v = Vec::new();
        for &a in &self.addrs {
            if v.contains(&a) || self.connecting.contains(&a) || self.linked(&a) {
                continue;
            }
            if !initial
                && self
                    .last_dial
                    .get(&a)
                    .is_some_and(|&t| now.saturating_sub(t) < REDIAL_MS)
            {
                continue;
            }
            v.push(a);
        }
        for &a in &v {
            self.connecting.insert(a);
            if !initial {
                self.last_dial.insert(a, now);
            }
        }
        v
    }

    fn next_redial(&self) -> Option<Millis> {
        self.addrs
            .iter()
            .filter(|a| !self.connecting.contains(a) && !self.linked(a))
            .map(|a| {
                self.last_dial
                    .get(a)
                    .map_or(0, |t| t.saturating_add(REDIAL_MS))
            })
            .min()
    }
}

struct Pending {
    handler: String,
    text: String,
    next_send: Millis,
    deadline: Millis,
}

struct EdgeSide {
    cli: Option<EdgeClient>,
    pa: Bytes,
    cfg: EdgeConfig,
    first_seed: usize,
    links: Links,
    published: BTreeMap<SrdiKey, i64>,
    pending: BTreeMap<QueryId, Pending>,
    next_qid: QueryId,
    /// No pending query is due before this (a lower bound: answered
    /// queries leave it early), so inputs do not scan `pending`.
    next_due: Millis,
    busy: u64,
    answered: u64,
    /// IDs of the messages this edge propagates.
    ids: IdGen,
}

/// A lookup this rendezvous forwarded to another one.
struct Relayed {
    edge: PeerId,
    edge_qid: QueryId,
    at: Millis,
}

struct RdvSide {
    srv: RendezvousServer,
    srdi: SrdiNode,
    links: Links,
    /// Forwarded lookups: this rendezvous' query ID -> the edge's.
    relayed: BTreeMap<QueryId, Relayed>,
    /// Insertion order of `relayed` (for expiry and eviction); entries
    /// whose ID was answered or reused are skipped.
    relay_order: VecDeque<(Millis, QueryId)>,
    next_relay_id: QueryId,
    walked: u64,
    /// The peer view's generation when `view` was computed, and the global
    /// view (members and self in placement order) computed from them: the
    /// global view is only recomputed when the members changed (it formats
    /// and sorts every member's ID, which dominated SRDI handling with a
    /// large view; comparing the members on every message still cost 12 %
    /// of a 100,000-peer run).
    view_gen: Option<u64>,
    /// The peer view's generation the SRDI node last heard of.
    srdi_gen: u64,
    /// Shared so a query can hold it while the node changes (a copy of a
    /// 1,000-rendezvous view per query was a measurable cost).
    view: std::sync::Arc<Vec<PeerId>>,
}

/// The SRDI node's settings: re-placement after view changes settles
/// within half a probe interval and happens at least once per probe round.
fn srdi_cfg(cfg: &RendezvousConfig) -> SrdiNodeConfig {
    let probe = cfg.server.peer_view.probe_interval_ms.max(1);
    let mut s = cfg.srdi;
    s.settle_ms = s.settle_ms.min(probe / 2);
    s.max_defer_ms = s.max_defer_ms.min(probe).max(s.settle_ms);
    s
}

/// Brings `r.view` up to date with the peer view (cheap when unchanged).
fn refresh_view(r: &mut RdvSide) {
    let pv = r.srv.peer_view();
    if r.view_gen != Some(pv.generation()) {
        r.view_gen = Some(pv.generation());
        r.view = std::sync::Arc::new(global_view(r.srv.me(), pv.members()));
    }
}

enum Side {
    Edge(Box<EdgeSide>),
    Rdv(Box<RdvSide>),
}

/// One peer's rendezvous service as a sans-IO state machine (see the
/// module documentation).
pub struct RendezvousNode {
    me: PeerId,
    group: PeerGroupId,
    g: String,
    side: Side,
    out: VecDeque<Transmit>,
    events: VecDeque<NodeEvent>,
    stats: NodeStats,
}

impl std::fmt::Debug for RendezvousNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendezvousNode")
            .field("me", &self.me)
            .field("status", &self.status())
            .finish()
    }
}

impl RendezvousNode {
    /// A node for peer `me` in the group whose unique ID string is `g`,
    /// with its peer advertisement XML `peer_adv` (sent in lease requests
    /// and grants), its `name`, and `seed` for message IDs. Its first
    /// events are the [`NodeEvent::Dial`]s of its seeds or peers.
    pub fn new(
        cfg: RendezvousConfig,
        me: PeerId,
        g: &str,
        peer_adv: Bytes,
        name: &str,
        seed: u64,
    ) -> RendezvousNode {
        Self::build(cfg, me, PeerGroupId::NET, g, peer_adv, name, seed)
    }

    /// A node serving (or leasing) the rendezvous of `group`, a subgroup:
    /// its leases, propagation, peer view and SRDI index travel on that
    /// group's addresses and queues (`RDV_SERVICE`/`<group unique>`,
    /// `<group unique>Srdi`, ...), apart from the Net peer group's and
    /// every other group's, as JXSE runs one rendezvous service per group.
    ///
    /// ```
    /// use juxta_proto::id::{PeerGroupId, PeerId};
    /// use juxta_proto::rendezvous::node::{RendezvousConfig, RendezvousNode};
    /// let g = juxta_proto::group::new_subgroup_id(&PeerGroupId::NET, &mut rand::thread_rng());
    /// let me = PeerId::from_public_key_spki(b"a key");
    /// let n = RendezvousNode::new_in(RendezvousConfig::rendezvous(), me, g, "<x/>".into(), "r", 1);
    /// assert_eq!(n.group(), g);
    /// assert!(n.is_rendezvous());
    /// ```
    pub fn new_in(
        cfg: RendezvousConfig,
        me: PeerId,
        group: PeerGroupId,
        peer_adv: Bytes,
        name: &str,
        seed: u64,
    ) -> RendezvousNode {
        let g = group.unique_value();
        Self::build(cfg, me, group, &g, peer_adv, name, seed)
    }

    fn build(
        cfg: RendezvousConfig,
        me: PeerId,
        group: PeerGroupId,
        g: &str,
        peer_adv: Bytes,
        name: &str,
        seed: u64,
    ) -> RendezvousNode {
        let side = match &cfg.role {
            RendezvousRole::Rendezvous => {
                let radv = minimal_rdv_adv(&me, &group, name);
                Side::Rdv(Box::new(RdvSide {
                    srv: RendezvousServer::new(me, group, peer_adv, radv.into(), cfg.server, seed),
                    srdi: SrdiNode::new(me, g, DISCOVERY_HANDLER, srdi_cfg(&cfg)),
                    links: Links::new(cfg.peers.clone()),
                    relayed: BTreeMap::new(),
                    relay_order: VecDeque::new(),
                    next_relay_id: 1,
                    walked: 0,
                    view_gen: None,
                    srdi_gen: 0,
                    view: std::sync::Arc::new(Vec::new()),
                }))
            }
            RendezvousRole::Edge { seeds } => Side::Edge(Box::new(EdgeSide {
                cli: None,
                pa: peer_adv,
                cfg: cfg.edge,
                first_seed: cfg.first_seed,
                links: Links::new(seeds.clone()),
                published: BTreeMap::new(),
                pending: BTreeMap::new(),
                next_qid: 1,
                next_due: Millis::MAX,
                busy: 0,
                answered: 0,
                ids: IdGen::new(seed ^ 0x4544_4745_5052_4f50),
            })),
        };
        let mut n = RendezvousNode {
            me,
            group,
            g: g.to_string(),
            side,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: NodeStats::default(),
        };
        let dial = n.links_mut().due(0, true);
        for a in dial {
            n.event(NodeEvent::Dial(a));
        }
        n
    }

    /// This peer.
    pub fn me(&self) -> PeerId {
        self.me
    }

    /// The group this node serves.
    pub fn group(&self) -> PeerGroupId {
        self.group
    }

    /// Whether this node is a rendezvous.
    pub fn is_rendezvous(&self) -> bool {
        matches!(self.side, Side::Rdv(_))
    }

    /// The node's own counters.
    pub fn stats(&self) -> NodeStats {
        self.stats
    }

    /// Edge: the lease client (once a seed answered).
    pub fn edge(&self) -> Option<&EdgeClient> {
        match &self.side {
            Side::Edge(e) => e.cli.as_ref(),
            Side::Rdv(_) => None,
        }
    }

    /// Rendezvous: the lease and propagation server.
    pub fn server(&self) -> Option<&RendezvousServer> {
        match &self.side {
            Side::Rdv(r) => Some(&r.srv),
            Side::Edge(_) => None,
        }
    }

    /// Rendezvous: the SRDI index and search.
    pub fn srdi(&self) -> Option<&SrdiNode> {
        match &self.side {
            Side::Rdv(r) => Some(&r.srdi),
            Side::Edge(_) => None,
        }
    }

    /// Whether `peer` forwards queries it admitted under their querier's
    /// budget (a rendezvous' peer-view member, an edge's leased
    /// rendezvous; see [`RendezvousStatus::forwarders`]).
    pub fn is_forwarder(&self, peer: &PeerId) -> bool {
        match &self.side {
            Side::Rdv(r) => r.srv.peer_view().contains(peer),
            Side::Edge(e) => e.cli.as_ref().and_then(|c| c.rendezvous()) == Some(*peer),
        }
    }

    /// Whether a response for `handler` with ID `id` is awaited here (an
    /// edge's outstanding query, a rendezvous' relayed lookup):
    /// [`handle_response`](Self::handle_response) takes it.
    pub fn awaits(&self, id: QueryId, handler: &str) -> bool {
        match &self.side {
            Side::Rdv(r) => handler == LOOKUP_HANDLER && r.relayed.contains_key(&id),
            Side::Edge(e) => e.pending.get(&id).is_some_and(|p| p.handler == handler),
        }
    }

    /// Edge: the rendezvous leased to.
    pub fn leased_to(&self) -> Option<PeerId> {
        self.edge().and_then(|c| c.rendezvous())
    }

    /// Edge: queries outstanding.
    pub fn pending_queries(&self) -> usize {
        match &self.side {
            Side::Edge(e) => e.pending.len(),
            Side::Rdv(_) => 0,
        }
    }

    /// Rendezvous: forwarded lookups awaiting their answer.
    pub fn relayed_lookups(&self) -> usize {
        match &self.side {
            Side::Rdv(r) => r.relayed.len(),
            Side::Edge(_) => 0,
        }
    }

    /// Rendezvous: the leased edges, whose links the owner watches (report
    /// a closed one with [`handle_link_down`](Self::handle_link_down)).
    pub fn clients(&self) -> Vec<PeerId> {
        match &self.side {
            Side::Rdv(r) => r.srv.clients().collect(),
            Side::Edge(_) => Vec::new(),
        }
    }

    /// The seeds or peer rendezvous believed linked (and an edge's leased
    /// rendezvous), whose links the owner watches.
    pub fn linked(&self) -> Vec<PeerId> {
        let (links, rdv) = match &self.side {
            Side::Rdv(r) => (&r.links, None),
            Side::Edge(e) => (&e.links, e.cli.as_ref().and_then(|c| c.rendezvous())),
        };
        let mut v: Vec<PeerId> = links.up.clone();
        if let Some(r) = rdv {
            if !v.contains(&r) {
                v.push(r);
            }
        }
        v
    }

    /// A snapshot of the state.
    pub fn status(&self) -> RendezvousStatus {
        match &self.side {
            Side::Rdv(r) => {
                let s = r.srdi.stats();
                let v = r.srv.stats();
                RendezvousStatus {
                    is_rendezvous: true,
                    leased_to: None,
                    clients: r.srv.client_count(),
                    index_entries: r.srdi.index().len(),
                    view: r.srv.peer_view().len(),
                    walked: r.walked,
                    queries: s.queries,
                    busy: s.busy,
                    answered: 0,
                    refused: v.not_member + v.over_rate + r.srv.peer_view().stats().not_sender,
                    forwarders: r.srv.peer_view().members().collect(),
                }
            }
            Side::Edge(e) => RendezvousStatus {
                is_rendezvous: false,
                leased_to: e.cli.as_ref().and_then(|c| c.rendezvous()),
                forwarders: e
                    .cli
                    .as_ref()
                    .and_then(|c| c.rendezvous())
                    .into_iter()
                    .collect(),
                busy: e.busy,
                answered: e.answered,
                ..RendezvousStatus::default()
            },
        }
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<NodeEvent> {
        self.events.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next.
    pub fn poll_timeout(&self) -> Option<Millis> {
        let (a, b, links) = match &self.side {
            Side::Rdv(r) => (r.srv.poll_timeout(), r.srdi.poll_timeout(), &r.links),
            Side::Edge(e) => {
                let p = (!e.pending.is_empty()).then_some(e.next_due);
                (e.cli.as_ref().and_then(|c| c.poll_timeout()), p, &e.links)
            }
        };
        [a, b, links.next_redial()].into_iter().flatten().min()
    }

    /// Timers: lease renewals and expiry, SRDI expiry, lookup re-sends and
    /// deadlines, forwarded-lookup expiry, re-dials.
    pub fn handle_timeout(&mut self, now: Millis) {
        match &mut self.side {
            Side::Rdv(r) => {
                if r.srv.poll_timeout().is_some_and(|t| t <= now) {
                    r.srv.handle_timeout(now);
                }
                r.srdi.handle_timeout(now);
                Self::expire_relays(r, &mut self.stats, now);
            }
            Side::Edge(e) => {
                if let Some(c) = e.cli.as_mut() {
                    if c.poll_timeout().is_some_and(|t| t <= now) {
                        c.handle_timeout(now);
                    }
                }
            }
        }
        let dial = self.links_mut().due(now, false);
        for a in dial {
            self.event(NodeEvent::Dial(a));
        }
        self.pump(now);
    }

    /// The owner's dial of `addr` (after [`NodeEvent::Dial`]) reached
    /// `peer`, or failed (`None`).
    pub fn handle_dialed(&mut self, addr: SocketAddr, peer: Option<PeerId>, now: Millis) {
        let me = self.me;
        let group = self.group;
        match &mut self.side {
            Side::Rdv(r) => {
                r.links.connecting.remove(&addr);
                if let Some(p) = peer.filter(|p| *p != me) {
                    r.links.reached(p, addr);
                    // A new seed is probed at once rather than at the next
                    // probe round (the view forms in one round trip).
                    let pv = r.srv.peer_view_mut();
                    if pv.add_seed(p) && !pv.contains(&p) {
                        pv.probe_now(p);
                    }
                    if r.srv.poll_timeout().is_some_and(|t| t <= now) {
                        r.srv.handle_timeout(now);
                    }
                }
            }
            Side::Edge(e) => {
                e.links.connecting.remove(&addr);
                if let Some(p) = peer.filter(|p| *p != me) {
                    e.links.reached(p, addr);
                    if let Some(c) = e.cli.as_mut() {
                        c.add_seed(p);
                    }
                }
                // The client starts once every seed has answered or
                // failed, with the seeds in their configured order (so
                // `first_seed` spreads edges deterministically).
                if e.cli.is_none() && e.links.connecting.is_empty() && !e.links.known.is_empty() {
                    let mut order: Vec<(usize, PeerId)> = e
                        .links
                        .known
                        .iter()
                        .map(|(p, a)| {
                            let i = e.links.addrs.iter().position(|s| s == a);
                            (i.unwrap_or(usize::MAX), *p)
                        })
                        .collect();
                    order.sort_by_key(|x| x.0);
                    let c = EdgeClient::new(
                        me,
                        group,
                        e.pa.clone(),
                        order.into_iter().map(|(_, p)| p),
                        e.cfg,
                    );
                    let mut c = c.with_first_seed(e.first_seed);
                    c.handle_timeout(now);
                    e.cli = Some(c);
                }
            }
        }
        self.pump(now);
    }

    /// Adds an address learned at run time (LAN discovery, see
    /// [`crate::lan`]): an edge's seed, or a rendezvous' peer. Dialled at
    /// once and then like a configured one. At most [`MAX_LINK_ADDRS`]
    /// addresses are kept (the oldest one goes first); a known
    /// address is ignored.
    pub fn add_seed(&mut self, addr: SocketAddr, now: Millis) {
        let links = self.links_mut();
        if links.addrs.contains(&addr) {
            return;
        }
        if links.addrs.len() >= MAX_LINK_ADDRS {
            let old = links.addrs.remove(0);
            links.last_dial.remove(&old);
        }
        links.addrs.push(addr);
        let dial = links.due(now, false);
        for a in dial {
            self.event(NodeEvent::Dial(a));
        }
    }

    /// The link to `peer` is gone: a leased edge has left (its lease and
    /// entries go now, not when the lease would expire), an edge fails
    /// over from its rendezvous at once, and a seed or peer rendezvous is
    /// re-dialled.
    pub fn handle_link_down(&mut self, peer: &PeerId, now: Millis) {
        match &mut self.side {
            Side::Rdv(r) => {
                r.links.down(peer);
                if r.srv.is_client(peer) {
                    r.srv.handle_unreachable(peer);
                }
            }
            Side::Edge(e) => {
                e.links.down(peer);
                if let Some(c) = e.cli.as_mut() {
                    if c.rendezvous() == Some(*peer) {
                        c.handle_unreachable(peer, now);
                    }
                }
            }
        }
        self.pump(now);
    }

    /// The owner could not hand a message to `peer`'s link (it is
    /// closing): the peer is unreachable (a leased edge leaves, an edge
    /// fails over from its rendezvous).
    pub fn handle_unreachable(&mut self, peer: &PeerId, now: Millis) {
        match &mut self.side {
            Side::Rdv(r) => r.srv.handle_unreachable(peer),
            Side::Edge(e) => {
                if let Some(c) = e.cli.as_mut() {
                    c.handle_unreachable(peer, now);
                }
            }
        }
        self.pump(now);
    }

    /// The owner could not send `t` (no route to its peer). A query for a
    /// publisher this rendezvous has no link to (its entry came by
    /// replication) goes to the other rendezvous of the view, the one
    /// leasing the publisher forwards it (the hop count bounds the
    /// detour); anything else marks the peer unreachable.
    pub fn handle_undeliverable(&mut self, t: Transmit, now: Millis) {
        let qaddr = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(&self.g)));
        match &mut self.side {
            Side::Rdv(r) => {
                if t.dest == qaddr && !r.srv.peer_view().contains(&t.to) {
                    let view: Vec<PeerId> = r.srv.peer_view().members().collect();
                    for v in view {
                        let m = Transmit {
                            to: v,
                            dest: t.dest.clone(),
                            message: t.message.clone(),
                        };
                        Self::queue(&mut self.out, &mut self.stats, m);
                    }
                } else {
                    r.srv.handle_unreachable(&t.to);
                }
            }
            Side::Edge(e) => {
                if let Some(c) = e.cli.as_mut() {
                    c.handle_unreachable(&t.to, now);
                }
            }
        }
        self.pump(now);
    }

    /// A message on the RVP, propagate, walker, peer-view or SRDI listener
    /// (`dest`) from `from`, `proven` when `from` proved its ID. A
    /// rendezvous refuses unproven senders ([`NodeError::Unproven`]).
    pub fn handle_message(
        &mut self,
        from: PeerId,
        proven: bool,
        dest: &ServiceAddress,
        message: Message,
        now: Millis,
    ) -> Result<(), NodeError> {
        let srdi = ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(&self.g)));
        if *dest == srdi {
            if !proven && self.is_rendezvous() {
                self.stats.unproven += 1;
                return Err(NodeError::Unproven);
            }
            self.on_srdi(from, &message, now);
            self.pump(now);
            return Ok(());
        }
        let mut deliver = None;
        match &mut self.side {
            Side::Rdv(r) => {
                // Leases, disconnects, peer-view and propagation act on
                // the sender: only a peer that proved its ID may ask.
                if !proven {
                    self.stats.unproven += 1;
                    return Err(NodeError::Unproven);
                }
                // Refusals are counted by the server.
                let _ = r.srv.handle_message(from, dest, message, now);
            }
            Side::Edge(e) => {
                let Some(c) = e.cli.as_mut() else {
                    return Ok(());
                };
                if dest.service == PROPAGATE_SERVICE {
                    // Propagated by the rendezvous: delivered here, never
                    // forwarded (edges do not repropagate).
                    if let Ok(Some(d)) = c.accept_propagated(from, &message) {
                        deliver = Some((d, message));
                    }
                } else {
                    let _ = c.handle_message(from, &message, now);
                }
            }
        }
        if let Some((d, m)) = deliver {
            self.deliver(from, d, m, now);
        }
        self.pump(now);
        Ok(())
    }

    /// Rendezvous: a resolver query handed over by the resolver (a
    /// lookup, or a discovery or pipe query) with the message it came in;
    /// `from` is the proven sender, `key` the SRDI key it asks for (a
    /// lookup's is read from its text).
    pub fn handle_query(
        &mut self,
        from: Option<PeerId>,
        q: ResolverQuery,
        raw: Message,
        key: Option<SrdiKey>,
        now: Millis,
    ) {
        self.on_query(from, q, raw, key, now);
        self.pump(now);
    }

    /// A lookup answer (rendezvous: relayed to the edge that asked; edge:
    /// completes the query).
    pub fn handle_response(&mut self, r: ResolverResponse, now: Millis) {
        let ires = ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(&self.g)));
        let g = self.g.clone();
        match &mut self.side {
            Side::Rdv(rdv) => {
                if r.handler == LOOKUP_HANDLER {
                    if let Some(x) = rdv.relayed.remove(&r.query_id) {
                        let back = ResolverResponse {
                            query_id: x.edge_qid,
                            ..r
                        };
                        let t = Transmit {
                            to: x.edge,
                            dest: ires,
                            message: Message::new().with(back.to_element(&g)),
                        };
                        Self::queue(&mut self.out, &mut self.stats, t);
                    }
                }
            }
            Side::Edge(e) => {
                if e.pending
                    .get(&r.query_id)
                    .is_some_and(|p| p.handler == r.handler)
                {
                    e.pending.remove(&r.query_id);
                    e.answered += 1;
                    let ev = NodeEvent::Answered {
                        id: r.query_id,
                        response: r.response,
                    };
                    Self::push_event(&mut self.events, &mut self.stats, ev);
                }
            }
        }
        self.pump(now);
    }

    /// Edge: a `Juxta.Busy` answer: the query is asked again after the
    /// delay it names (capped, see [`busy_retry_at`]).
    pub fn handle_busy(&mut self, b: BusyNotice, now: Millis) {
        if let Side::Edge(e) = &mut self.side {
            e.busy += 1;
            if let Some(p) = e.pending.get_mut(&b.query_id) {
                p.next_send = busy_retry_at(now, b.retry_after_ms);
                e.next_due = e.next_due.min(p.next_send);
            }
        }
        self.pump(now);
    }

    /// Edge: publishes the SRDI entry `key` for `expiration_ms`, now to the
    /// current rendezvous and again to every rendezvous leased later.
    pub fn publish(
        &mut self,
        key: SrdiKey,
        expiration_ms: i64,
        now: Millis,
    ) -> Result<(), NodeError> {
        check(&key.0, "primary key")?;
        check(&key.1, "attribute")?;
        check(&key.2, "value")?;
        let me = self.me;
        let Side::Edge(e) = &mut self.side else {
            return Err(NodeError::NotEdge);
        };
        if !e.published.contains_key(&key) && e.published.len() >= MAX_PUBLISHED {
            return Err(NodeError::TooMany("published entries"));
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
            let t = srdi_transmit(&self.g, rdv, &m);
            Self::queue(&mut self.out, &mut self.stats, t);
        }
        e.published.insert(key, expiration_ms);
        self.pump(now);
        Ok(())
    }

    /// Edge: asks the leased rendezvous which peers published `key`; the
    /// answer comes as [`NodeEvent::Answered`] (read it with
    /// [`lookup_peers`]) or [`NodeEvent::TimedOut`] after `timeout_ms`.
    /// Re-sent after a busy answer's delay, after [`QUERY_RETRY_MS`]
    /// without answer, and after a fail-over.
    pub fn lookup(
        &mut self,
        key: &SrdiKey,
        timeout_ms: u64,
        now: Millis,
    ) -> Result<QueryId, NodeError> {
        check(&key.0, "primary key")?;
        check(&key.1, "attribute")?;
        check(&key.2, "value")?;
        let text = format!("{}\t{}\t{}", key.0, key.1, key.2);
        self.query(LOOKUP_HANDLER, text, timeout_ms, now)
    }

    /// Edge: sends the resolver query `text` for `handler` to the leased
    /// rendezvous, with the same re-sends as [`lookup`](Self::lookup); the
    /// first response for `handler` with its ID completes it.
    pub fn query(
        &mut self,
        handler: &str,
        text: String,
        timeout_ms: u64,
        now: Millis,
    ) -> Result<QueryId, NodeError> {
        let Side::Edge(e) = &mut self.side else {
            return Err(NodeError::NotEdge);
        };
        if e.pending.len() >= MAX_PENDING_LOOKUPS {
            return Err(NodeError::TooMany("pending lookups"));
        }
        let mut qid = e.next_qid;
        while e.pending.contains_key(&qid) {
            qid = qid.wrapping_add(1).max(1);
        }
        e.next_qid = qid.wrapping_add(1).max(1);
        let mut p = Pending {
            handler: handler.to_string(),
            text,
            next_send: now,
            deadline: now.saturating_add(timeout_ms),
        };
        // Sent at once (without scanning the other queries).
        if p.deadline > now {
            match e.cli.as_ref().and_then(|c| c.rendezvous()) {
                Some(r) => {
                    let t = query_transmit(&self.g, self.me, r, qid, &p);
                    Self::queue(&mut self.out, &mut self.stats, t);
                    p.next_send = now.saturating_add(QUERY_RETRY_MS);
                }
                None => p.next_send = now.saturating_add(LEASE_WAIT_MS),
            }
        }
        e.next_due = e.next_due.min(p.next_send.min(p.deadline));
        e.pending.insert(qid, p);
        self.pump(now);
        Ok(qid)
    }

    /// Propagates `message` group-wide to listener `dest` (JXSE's
    /// `RendezVousService.propagate`): a rendezvous sends it to every leased
    /// edge and peer view member; an edge hands it to its leased rendezvous,
    /// which delivers it there and fans it out (to its other edges and its
    /// peer view) under its per-sender propagation budget. `ttl` is clamped
    /// to 1..=`MAX_TTL`; duplicates and loops are dropped by every peer on
    /// the way (message ID, path). Returns the message ID, or `None` on an
    /// edge without a lease (nothing sent: the caller reaches its connected
    /// peers directly).
    pub fn propagate(
        &mut self,
        dest: &ServiceAddress,
        message: Message,
        ttl: i32,
        now: Millis,
    ) -> Option<String> {
        let id = match &mut self.side {
            Side::Rdv(r) => Some(r.srv.propagate(dest, message, ttl)),
            Side::Edge(e) => {
                let id = e.ids.msg_id();
                let c = e.cli.as_mut()?;
                c.propagate(dest, message, ttl, id.clone())?;
                Some(id)
            }
        };
        self.pump(now);
        id
    }

    /// Edge: forgets query `id` (its caller gave up).
    pub fn cancel(&mut self, id: QueryId) {
        if let Side::Edge(e) = &mut self.side {
            e.pending.remove(&id);
        }
    }

    /// Edge: ends the lease politely (`Disconnect` to the leased
    /// rendezvous, which releases the lease and this edge's SRDI entries
    /// at once) and stops leasing.
    pub fn shutdown(&mut self, now: Millis) -> Result<(), NodeError> {
        let Side::Edge(e) = &mut self.side else {
            return Err(NodeError::NotEdge);
        };
        if let Some(c) = e.cli.as_mut() {
            c.shutdown();
        }
        self.pump(now);
        Ok(())
    }

    // ---- internals ----

    fn links_mut(&mut self) -> &mut Links {
        match &mut self.side {
            Side::Rdv(r) => &mut r.links,
            Side::Edge(e) => &mut e.links,
        }
    }

    fn queue(out: &mut VecDeque<Transmit>, stats: &mut NodeStats, t: Transmit) {
        if out.len() >= MAX_QUEUED {
            stats.dropped += 1;
        } else {
            out.push_back(t);
        }
    }

    fn push_event(events: &mut VecDeque<NodeEvent>, stats: &mut NodeStats, e: NodeEvent) {
        if events.len() >= MAX_QUEUED {
            stats.dropped += 1;
        } else {
            events.push_back(e);
        }
    }

    fn event(&mut self, e: NodeEvent) {
        Self::push_event(&mut self.events, &mut self.stats, e);
    }

    fn expire_relays(r: &mut RdvSide, stats: &mut NodeStats, now: Millis) {
        while let Some(&(at, id)) = r.relay_order.front() {
            if now.saturating_sub(at) < RELAY_TTL_MS {
                break;
            }
            r.relay_order.pop_front();
            if r.relayed.get(&id).is_some_and(|x| x.at == at) {
                r.relayed.remove(&id);
                stats.relay_expired += 1;
            }
        }
    }

    /// Records a forwarded lookup; returns the query ID it goes out with.
    fn relay_insert(
        r: &mut RdvSide,
        stats: &mut NodeStats,
        edge: PeerId,
        edge_qid: QueryId,
        now: Millis,
    ) -> QueryId {
        Self::expire_relays(r, stats, now);
        while r.relayed.len() >= MAX_RELAYED_LOOKUPS {
            let Some((at, id)) = r.relay_order.pop_front() else {
                break;
            };
            if r.relayed.get(&id).is_some_and(|x| x.at == at) {
                r.relayed.remove(&id);
                stats.relay_evicted += 1;
            }
        }
        // Answered entries leave stale order records: compact when they
        // outnumber the live ones, so the order queue stays bounded.
        if r.relay_order.len() >= 2 * MAX_RELAYED_LOOKUPS {
            let relayed = &r.relayed;
            r.relay_order
                .retain(|(at, id)| relayed.get(id).is_some_and(|x| x.at == *at));
        }
        let mut id = r.next_relay_id;
        while r.relayed.contains_key(&id) {
            id = id.wrapping_add(1).max(1);
        }
        r.next_relay_id = id.wrapping_add(1).max(1);
        r.relayed.insert(
            id,
            Relayed {
                edge,
                edge_qid,
                at: now,
            },
        );
        r.relay_order.push_back((now, id));
        id
    }

    /// Delivers a propagated or walked message here: SRDI to the index,
    /// anything else to the owner.
    fn deliver(&mut self, from: PeerId, dest: ServiceAddress, message: Message, now: Millis) {
        if dest.service == RESOLVER_SERVICE && dest.param.as_deref() == Some(&srdi_queue(&self.g)) {
            self.on_srdi(from, &message, now);
            return;
        }
        self.event(NodeEvent::Deliver {
            from,
            dest,
            message,
        });
    }

    fn on_srdi(&mut self, sender: PeerId, message: &Message, now: Millis) {
        if let Side::Rdv(r) = &mut self.side {
            // Only leased edges (and, for replicas, peer view members) may
            // index entries here.
            if r.srv.is_client(&sender) || r.srv.peer_view().contains(&sender) {
                refresh_view(r);
                // Refusals are counted by the SRDI node.
                let _ = r.srdi.handle_srdi(&sender, message, &r.view, now);
            } else {
                // Replicas from a rendezvous this one's view does not hold
                // yet wait for it to join (bounded, counted).
                let _ = r.srdi.hold(&sender, message, now);
            }
        }
    }

    /// How a query reached this rendezvous: by a walk, flooded by another
    /// rendezvous, or directly.
    fn arrival(&self, from: Option<PeerId>, raw: &Message) -> Arrival {
        let Side::Rdv(r) = &self.side else {
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

    /// Runs the SRDI machine's actions: sends, walks and floods (over the
    /// peer view), except sends to itself and queries forwarded back to
    /// `not_to` (their querier; a busy answer to it does go).
    fn run_actions(&mut self, not_to: PeerId) -> usize {
        let me = self.me;
        let qaddr = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(&self.g)));
        let Side::Rdv(r) = &mut self.side else {
            return 0;
        };
        let mut n = 0;
        while let Some(t) = r.srdi.poll_transmit() {
            if t.to != me && !(t.to == not_to && t.dest == qaddr) {
                Self::queue(&mut self.out, &mut self.stats, t);
                n += 1;
            }
        }
        while let Some(e) = r.srdi.poll_event() {
            match e {
                SrdiEvent::Walk { dest, message, ttl } => n += r.srv.walk(&dest, message, ttl),
                SrdiEvent::Flood { dest, message, ttl } => {
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
        key: Option<SrdiKey>,
        now: Millis,
    ) {
        let g = self.g.clone();
        let arrival = self.arrival(from, &raw);
        let me = self.me;
        let Side::Rdv(r) = &mut self.side else {
            return;
        };
        refresh_view(r);
        let view = std::sync::Arc::clone(&r.view);
        if q.handler != LOOKUP_HANDLER {
            // A discovery or pipe binding query: forwarded to the
            // publishers the index names, else to the replica, else walked
            // (SRDI model), flooded or sent to the central server; whoever
            // holds the advertisement answers the querier directly, as
            // with JXSE.
            let key = key
                .as_ref()
                .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()));
            r.srdi.handle_query(&q, raw, key, arrival, &view, now);
            self.run_actions(q.src_peer);
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
        while let Some(t) = r.srdi.poll_transmit() {
            // A forward to a publisher: this rendezvous answers with it.
            if t.dest == qaddr && !view.contains(&t.to) {
                if hits.len() < MAX_ANSWER_PEERS {
                    hits.push(t.to)
                }
            } else if t.dest == qaddr {
                // A forward to another rendezvous (replica, server).
                if t.to != me && Some(t.to) != from_rdv {
                    to_rdv.push(t.to);
                }
            } else {
                Self::queue(&mut self.out, &mut self.stats, t);
            }
        }
        // A lookup has one answer: a walk's or flood's last hop could not
        // return it, so misses are answered here.
        while r.srdi.poll_event().is_some() {}
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
                let id = Self::relay_insert(r, &mut self.stats, q.src_peer, q.query_id, now);
                let mut q2 = q.clone();
                q2.query_id = id;
                // The hop count is the querier's number: saturating.
                q2.hop_count = q2.hop_count.saturating_add(1);
                let t = Transmit {
                    to: next,
                    dest: qaddr,
                    message: Message::new().with(q2.to_element(&g)),
                };
                Self::queue(&mut self.out, &mut self.stats, t);
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
        let t = Transmit {
            to: from_rdv.unwrap_or(q.src_peer),
            dest: ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(&g))),
            message: Message::new().with(resp.to_element(&g)),
        };
        Self::queue(&mut self.out, &mut self.stats, t);
    }

    /// Edge: sends every query that is due; times out the expired ones.
    fn send_queries(&mut self, now: Millis) {
        let me = self.me;
        let g = &self.g;
        let Side::Edge(e) = &mut self.side else {
            return;
        };
        if now < e.next_due || e.pending.is_empty() {
            return;
        }
        let rdv = e.cli.as_ref().and_then(|c| c.rendezvous());
        let mut expired = Vec::new();
        let mut next_due = Millis::MAX;
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
                    let t = query_transmit(g, me, r, qid, p);
                    Self::queue(&mut self.out, &mut self.stats, t);
                    p.next_send = now.saturating_add(QUERY_RETRY_MS);
                }
                None => p.next_send = now.saturating_add(LEASE_WAIT_MS),
            }
        }
        for id in expired {
            e.pending.remove(&id);
            Self::push_event(
                &mut self.events,
                &mut self.stats,
                NodeEvent::TimedOut { id },
            );
        }
        for p in e.pending.values() {
            next_due = next_due.min(p.next_send.min(p.deadline));
        }
        e.next_due = next_due;
    }

    /// Moves the parts' output and events here and acts on them.
    fn pump(&mut self, now: Millis) {
        let me = self.me;
        let g = self.g.clone();
        if matches!(self.side, Side::Rdv(_)) {
            self.run_actions(me);
            let mut delivers = Vec::new();
            let mut joined = Vec::new();
            if let Side::Rdv(r) = &mut self.side {
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
                        ServerEvent::ClientJoined(p) => NodeEvent::ClientJoined(p),
                        ServerEvent::ClientLeft(p, _) => {
                            r.srdi.remove_peer(&p);
                            NodeEvent::ClientLeft(p)
                        }
                        ServerEvent::Refused(p) => NodeEvent::Refused(p),
                        ServerEvent::RendezvousJoined(p) => {
                            r.srdi.view_changed(p, now);
                            joined.push(p);
                            NodeEvent::RendezvousJoined(p)
                        }
                        ServerEvent::RendezvousLeft(p) => {
                            r.srdi.view_changed(p, now);
                            r.srdi.remove_peer(&p);
                            NodeEvent::RendezvousLeft(p)
                        }
                    };
                    Self::push_event(&mut self.events, &mut self.stats, e);
                }
                let gen = r.srv.peer_view().generation();
                if gen != r.srdi_gen {
                    // Any change, reported above or not (the view's event
                    // queue is bounded), is placed over.
                    r.srdi_gen = gen;
                    r.srdi.view_stale(now);
                }
                // Replicas a new member sent before this rendezvous knew it.
                for p in joined {
                    if r.srv.peer_view().contains(&p) {
                        r.srdi.release_held(&p, now);
                    }
                }
                if r.srdi.rereplicate_due(now) {
                    // The placement changed and settled: re-place this
                    // rendezvous' own edges' entries that moved (coalesced:
                    // see `srdi::node`).
                    refresh_view(r);
                    let clients: Vec<PeerId> = r.srv.clients().collect();
                    r.srdi.rereplicate(clients, &r.view, now);
                }
            }
            for (from, dest, message) in delivers {
                self.deliver(from, dest, message, now);
            }
            // Delivering and re-placing may have queued more.
            self.run_actions(me);
            if let Side::Rdv(r) = &mut self.side {
                while let Some(t) = r.srv.poll_transmit() {
                    Self::queue(&mut self.out, &mut self.stats, t);
                }
            }
            return;
        }
        if let Side::Edge(e) = &mut self.side {
            if let Some(c) = e.cli.as_mut() {
                while let Some(ev) = c.poll_event() {
                    match ev {
                        EdgeEvent::Connected { rdv, .. } => {
                            let ev = NodeEvent::LeaseGained(rdv);
                            Self::push_event(&mut self.events, &mut self.stats, ev);
                            // Queries waiting for a rendezvous go now.
                            for p in e.pending.values_mut() {
                                p.next_send = 0;
                            }
                            e.next_due = 0;
                        }
                        EdgeEvent::Lost { rdv, reason } => {
                            let ev = NodeEvent::LeaseLost { rdv, reason };
                            Self::push_event(&mut self.events, &mut self.stats, ev);
                        }
                        EdgeEvent::RepublishSrdi { rdv } => {
                            for m in republish(me, &e.published) {
                                let t = srdi_transmit(&g, rdv, &m);
                                Self::queue(&mut self.out, &mut self.stats, t);
                            }
                        }
                    }
                }
                while let Some(t) = c.poll_transmit() {
                    Self::queue(&mut self.out, &mut self.stats, t);
                }
            }
        }
        self.send_queries(now);
    }
}

/// Query `qid` of `me` to rendezvous `to`.
fn query_transmit(g: &str, me: PeerId, to: PeerId, qid: QueryId, p: &Pending) -> Transmit {
    let q = ResolverQuery {
        handler: p.handler.clone(),
        query_id: qid,
        hop_count: 0,
        src_peer: me,
        query: p.text.clone(),
        src_route: None,
    };
    Transmit {
        to,
        dest: ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(g))),
        message: Message::new().with(q.to_element(g)),
    }
}

/// The SRDI messages that push every published entry of `me`: one per
/// primary key and at most [`MAX_ENTRIES_PER_MESSAGE`] entries, split
/// further until each envelope fits the receiver's document bound
/// ([`MAX_XML_LEN`]; a larger one is refused whole).
fn republish(me: PeerId, published: &BTreeMap<SrdiKey, i64>) -> Vec<SrdiMessage> {
    let mut by_pk: BTreeMap<&str, Vec<SrdiEntry>> = BTreeMap::new();
    for ((pk, at, v), exp) in published {
        by_pk.entry(pk).or_default().push(SrdiEntry {
            key: at.clone(),
            value: v.clone(),
            expiration: *exp,
        });
    }
    let mut out = Vec::new();
    for (pk, entries) in by_pk {
        for chunk in entries.chunks(MAX_ENTRIES_PER_MESSAGE) {
            let m = SrdiMessage {
                peer: me,
                primary_key: pk.to_string(),
                scope: SCOPE_REPLICATE,
                entries: chunk.to_vec(),
            };
            split_to_fit(m, &mut out);
        }
    }
    out
}

/// Pushes `m` to `out`, halved (recursively) while its envelope is larger
/// than [`MAX_XML_LEN`]. A single entry always fits ([`MAX_KEY_LEN`]).
fn split_to_fit(mut m: SrdiMessage, out: &mut Vec<SrdiMessage>) {
    let len = ResolverSrdi {
        handler: DISCOVERY_HANDLER.into(),
        payload: m.to_xml(),
    }
    .to_xml()
    .len();
    if len <= MAX_XML_LEN || m.entries.len() <= 1 {
        out.push(m);
        return;
    }
    let rest = m.entries.split_off(m.entries.len() / 2);
    let second = SrdiMessage {
        entries: rest,
        ..m.clone()
    };
    split_to_fit(m, out);
    split_to_fit(second, out);
}

/// An SRDI message to `to`, in the resolver envelope of the handler JXSE
/// files its entries under: its pipe resolver for pipe types, its
/// discovery service for the rest (a JXSE rendezvous only indexes SRDI for
/// handlers it runs).
pub fn srdi_transmit(g: &str, to: PeerId, m: &SrdiMessage) -> Transmit {
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
mod tests;
