//! A deterministic discrete-event simulator of JXTA rendezvous networks
//! that runs the real protocol code: every peer is a sans-IO [`Node`]
//! (the resolver's rules, [`crate::resolver::node::ResolverNode`], composed
//! with the [`RendezvousNode`] the runtime (`juxta::rendezvous`) drives).
//!
//! The simulator only does what the runtime's driver and the operating
//! system do around a node: it moves messages between peers in virtual
//! time, answers dials, plays the application (a rendezvous hands the
//! application's queries to its SRDI index, an edge answers queries for
//! the items it holds, issues lookups), and injects faults. No protocol
//! decision is made here: the node's resolver scopes, parses and routes
//! every resolver message (lookups to the rendezvous part).
//!
//! What it models:
//! - virtual time in microseconds (the nodes see whole milliseconds), one
//!   event queue ordered by (time, sequence number): runs are deterministic
//!   and replayable from [`SimConfig::seed`];
//! - links: each directed pair of peers has a one-way latency, a bandwidth
//!   and a loss rate drawn once from [`LinkModel`]'s distributions (from a
//!   hash of the seed and the pair, so no per-link state is stored); a
//!   message takes `latency + size / bandwidth` and is lost with the link's
//!   probability;
//! - per-message processing cost at rendezvous and edges (a peer handles
//!   one message at a time; later ones queue), e.g. measured by
//!   `juxta bench` ([`Costs`]);
//! - partitions: a share of the peers is cut from the others for an
//!   interval ([`Partition`]);
//! - churn: edges crash silently and restart after a drawn downtime with a
//!   fresh node (same ID), re-leasing and re-publishing; rendezvous kills one
//!   after the other (the thesis' 4 -> 1 experiment) with the recovery time
//!   of every orphaned edge;
//! - a lookup workload (Poisson arrivals, a positive/negative mix) and a
//!   hostile fraction of edges sending malformed, oversized, replayed and
//!   forged messages ([`Workload`]).
//!
//! What it does not model: TCP (no congestion control, no head-of-line
//! blocking, no connection setup time: a dial is answered at once), message
//! encoding (messages are handed over as parsed structures; their size is
//! estimated from their elements), CPU contention between peers, clocks that
//! drift, and every service other than the rendezvous one (pipes, relays,
//! sockets).
//!
//! ```
//! use juxta_proto::sim::{Sim, SimConfig};
//! let mut sim = Sim::new(SimConfig { rendezvous: 2, edges: 10, ..SimConfig::default() }).unwrap();
//! sim.run_until(3_000);
//! assert!((0..10).all(|i| sim.edge(i).leased_to().is_some()));
//! ```

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::advertisement::PeerAdvertisement;
use crate::endpoint::ServiceAddress;
use crate::id::{IdFormat, IdType, JxtaId, PeerGroupId, PeerId};
use crate::message::{Element, Message};
use crate::node::{Event, InputError, Node};
use crate::rendezvous::edge::EdgeConfig;
use crate::rendezvous::messages::{lease_address, peerview_address, LeaseMessage};
use crate::rendezvous::node::{
    lookup_peers, NodeEvent, RendezvousConfig, RendezvousNode, LOOKUP_HANDLER,
};
use crate::rendezvous::server::{RendezvousServer, ServerConfig};
use crate::rendezvous::Transmit;
use crate::resolver::node::{Handler, Refusal, ResolverConfig};
use crate::resolver::{query_queue, response_queue, srdi_queue, ResolverQuery, RESOLVER_SERVICE};
use crate::srdi::flow::AdmissionConfig;
use crate::srdi::node::{SrdiNode, SrdiNodeConfig};
use crate::srdi::search::SearchModel;
use crate::srdi::{ResolverSrdi, SrdiEntry, SrdiMessage};

/// The group every simulated peer is in (its unique value string).
pub const GROUP: &str = "jxta-NetGroup";
/// The resolver handler of the application's queries (answered by the edge
/// that holds the item).
pub const APP_HANDLER: &str = "juxta-sim";
/// Primary key of the published entries.
pub const PKEY: &str = "Adv";
/// Attribute of the published entries.
pub const ATTR: &str = "Name";
/// Lifetime of the published entries.
pub const ENTRY_LIFE_MS: i64 = 3_600_000;
/// Most items one edge publishes.
pub const MAX_ITEMS_PER_EDGE: usize = 1_000;
/// Most peers a simulation holds.
pub const MAX_PEERS: usize = 10_000_000;

/// Errors of [`Sim::new`]: the parameter named is impossible.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A parameter is out of its range.
    #[error("invalid {param}: {why}")]
    Invalid {
        /// The parameter.
        param: &'static str,
        /// Why.
        why: String,
    },
}

fn invalid(param: &'static str, why: impl Into<String>) -> SimError {
    SimError::Invalid {
        param,
        why: why.into(),
    }
}

/// A distribution of a link parameter (in the parameter's unit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    /// Always this value.
    Const(f64),
    /// Uniform between `min` and `max`.
    Uniform {
        /// Least value.
        min: f64,
        /// Greatest value.
        max: f64,
    },
    /// `min` plus an exponential with mean `mean`.
    Exp {
        /// Offset.
        min: f64,
        /// Mean above the offset.
        mean: f64,
    },
}

impl Dist {
    /// The value at quantile `u` in `[0, 1)`.
    pub fn at(&self, u: f64) -> f64 {
        match *self {
            Dist::Const(v) => v,
            Dist::Uniform { min, max } => min + (max - min) * u,
            Dist::Exp { min, mean } => min - mean * (1.0 - u).max(f64::MIN_POSITIVE).ln(),
        }
    }

    /// Least value the distribution takes.
    pub fn min(&self) -> f64 {
        match *self {
            Dist::Const(v) => v,
            Dist::Uniform { min, max } => min.min(max),
            Dist::Exp { min, .. } => min,
        }
    }

    /// Largest value (infinite for [`Dist::Exp`] with a positive mean).
    pub fn max(&self) -> f64 {
        match *self {
            Dist::Const(v) => v,
            Dist::Uniform { min, max } => min.max(max),
            Dist::Exp { min, mean: 0.0 } => min,
            Dist::Exp { .. } => f64::INFINITY,
        }
    }

    /// Parses `5` (constant), `2..20` (uniform) or `exp:2:10` (2 plus an
    /// exponential of mean 10).
    pub fn parse(s: &str) -> Option<Dist> {
        let s = s.trim();
        let d = if let Some(rest) = s.strip_prefix("exp:") {
            let (a, b) = rest.split_once(':')?;
            Dist::Exp {
                min: a.parse().ok()?,
                mean: b.parse().ok()?,
            }
        } else if let Some((a, b)) = s.split_once("..") {
            let (min, max): (f64, f64) = (a.parse().ok()?, b.parse().ok()?);
            if max < min {
                return None;
            }
            Dist::Uniform { min, max }
        } else {
            Dist::Const(s.parse().ok()?)
        };
        (d.min().is_finite() && d.min() >= 0.0 && !d.max().is_nan() && d.max() >= d.min())
            .then_some(d)
    }
}

/// Per-link parameters, each drawn once per directed pair of peers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkModel {
    /// One-way latency, ms.
    pub latency_ms: Dist,
    /// Bandwidth, Mbit/s (0: unlimited).
    pub bandwidth_mbit: Dist,
    /// Loss, % of messages.
    pub loss_pct: Dist,
}

impl Default for LinkModel {
    fn default() -> LinkModel {
        LinkModel {
            latency_ms: Dist::Const(5.0),
            bandwidth_mbit: Dist::Const(0.0),
            loss_pct: Dist::Const(0.0),
        }
    }
}

/// Per-message processing cost, µs (0: free).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Costs {
    /// At a rendezvous.
    pub rdv_us: f64,
    /// At an edge.
    pub edge_us: f64,
}

/// A share of the peers cut from the others for an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Partition {
    /// Start, virtual ms.
    pub start_ms: u64,
    /// End, virtual ms.
    pub end_ms: u64,
    /// % of the peers (rendezvous and edges, drawn by a hash of the seed)
    /// on the cut-off side.
    pub pct: u8,
}

/// The load a run puts on the network (all off by default).
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Lookups per second per 100 edges (Poisson arrivals, from random
    /// live honest edges).
    pub query_rate_per_100: f64,
    /// % of lookups for a published value (the rest ask for values nobody
    /// has).
    pub positive_pct: u8,
    /// How long a lookup may take before it counts as lost.
    pub lookup_timeout_ms: u64,
    /// Lookups issued before this are not measured (leases and the peer
    /// view form first).
    pub warmup_ms: u64,
    /// % of the edges that crash per minute (silently; each restarts after
    /// `downtime_ms`).
    pub churn_pct_per_min: f64,
    /// Downtime of a crashed edge, ms.
    pub downtime_ms: Dist,
    /// % of the edges that are hostile: they send junk instead of lookups.
    pub hostile_pct: f64,
    /// Interval between two junk messages of one hostile edge, ms.
    pub hostile_interval_ms: u64,
    /// Rendezvous killed one after the other (at most all but one).
    pub rdv_kills: usize,
    /// When the first is killed, ms.
    pub kill_at_ms: u64,
    /// Interval between kills, ms.
    pub kill_interval_ms: u64,
    /// Partitions.
    pub partitions: Vec<Partition>,
}

impl Default for Workload {
    fn default() -> Workload {
        Workload {
            query_rate_per_100: 0.0,
            positive_pct: 50,
            lookup_timeout_ms: 2_000,
            warmup_ms: 10_000,
            churn_pct_per_min: 0.0,
            downtime_ms: Dist::Exp {
                min: 1_000.0,
                mean: 30_000.0,
            },
            hostile_pct: 0.0,
            hostile_interval_ms: 100,
            rdv_kills: 0,
            kill_at_ms: 30_000,
            kill_interval_ms: 30_000,
            partitions: Vec::new(),
        }
    }
}

/// A search model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// SRDI with replicas and the walker.
    Srdi,
    /// Every entry and query at rendezvous 0.
    Centralized,
    /// Queries flooded over the peer view.
    Flooding,
}

impl Model {
    /// The name (`srdi`, `centralized`, `flooding`).
    pub fn name(&self) -> &'static str {
        match self {
            Model::Srdi => "srdi",
            Model::Centralized => "centralized",
            Model::Flooding => "flooding",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Model> {
        match s {
            "srdi" => Some(Model::Srdi),
            "centralized" => Some(Model::Centralized),
            "flooding" => Some(Model::Flooding),
            _ => None,
        }
    }
}

/// A simulation's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Rendezvous peers.
    pub rendezvous: usize,
    /// Edge peers.
    pub edges: usize,
    /// Search model.
    pub model: Model,
    /// Seed of every random choice.
    pub seed: u64,
    /// Links.
    pub link: LinkModel,
    /// Processing costs.
    pub costs: Costs,
    /// Rendezvous admission control.
    pub admission: AdmissionConfig,
    /// Edge timers.
    pub edge: EdgeConfig,
    /// Rendezvous parameters.
    pub server: ServerConfig,
    /// Seeds each edge knows (0 or ≥ `rendezvous`: all, the first tried
    /// being `edge index % rendezvous`; else drawn at random).
    pub seeds_per_edge: usize,
    /// Other rendezvous each rendezvous is configured with (0 or more
    /// than there are: all; the rest is learned through the peer view).
    pub rdv_peers: usize,
    /// Items each edge publishes (`item-<edge>` and `item-<edge>-<k>`).
    pub items_per_edge: usize,
    /// Keep every answer and lease per edge (for tests; grows with time).
    pub record: bool,
    /// The load.
    pub workload: Workload,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            rendezvous: 3,
            edges: 50,
            model: Model::Srdi,
            seed: 1,
            link: LinkModel::default(),
            costs: Costs::default(),
            admission: AdmissionConfig::default(),
            edge: EdgeConfig::default(),
            server: ServerConfig::default(),
            seeds_per_edge: 0,
            rdv_peers: 0,
            items_per_edge: 1,
            record: true,
            workload: Workload::default(),
        }
    }
}

impl SimConfig {
    /// Checks that the parameters are possible.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.rendezvous == 0 {
            return Err(invalid("rendezvous", "at least one rendezvous is needed"));
        }
        let peers = self.rendezvous.saturating_add(self.edges);
        if peers > MAX_PEERS {
            return Err(invalid("peers", format!("at most {MAX_PEERS}")));
        }
        if self.items_per_edge == 0 || self.items_per_edge > MAX_ITEMS_PER_EDGE {
            return Err(invalid(
                "items_per_edge",
                format!("1 to {MAX_ITEMS_PER_EDGE}"),
            ));
        }
        for (name, d, hi) in [
            ("latency", self.link.latency_ms, 3_600_000.0),
            ("bandwidth", self.link.bandwidth_mbit, f64::INFINITY),
            ("loss", self.link.loss_pct, 100.0),
        ] {
            if !(d.min() >= 0.0 && d.max() <= hi) {
                return Err(invalid(name, format!("must lie in 0..={hi}")));
            }
        }
        for (name, c) in [
            ("rdv cost", self.costs.rdv_us),
            ("edge cost", self.costs.edge_us),
        ] {
            if !(c.is_finite() && c >= 0.0) {
                return Err(invalid(name, "must be a non-negative number of µs"));
            }
        }
        let w = &self.workload;
        if !(w.query_rate_per_100.is_finite() && w.query_rate_per_100 >= 0.0) {
            return Err(invalid("query rate", "must be ≥ 0"));
        }
        if w.positive_pct > 100 {
            return Err(invalid("positive %", "must be ≤ 100"));
        }
        if !(w.churn_pct_per_min.is_finite() && (0.0..=100.0).contains(&w.churn_pct_per_min)) {
            return Err(invalid("churn", "must lie in 0..=100 % per minute"));
        }
        if !(w.hostile_pct.is_finite() && (0.0..=100.0).contains(&w.hostile_pct)) {
            return Err(invalid("hostile", "must lie in 0..=100 %"));
        }
        if w.hostile_pct > 0.0 && w.hostile_interval_ms == 0 {
            return Err(invalid("hostile interval", "must be > 0 ms"));
        }
        if w.rdv_kills >= self.rendezvous && w.rdv_kills > 0 {
            return Err(invalid(
                "rdv kills",
                format!(
                    "{} kills of {} rendezvous would leave none",
                    w.rdv_kills, self.rendezvous
                ),
            ));
        }
        if w.rdv_kills > 1 && w.kill_interval_ms == 0 {
            return Err(invalid("kill interval", "must be > 0 ms"));
        }
        if w.lookup_timeout_ms == 0 {
            return Err(invalid("lookup timeout", "must be > 0 ms"));
        }
        if w.downtime_ms.min().is_nan() || w.downtime_ms.min() < 0.0 {
            return Err(invalid("downtime", "must be ≥ 0"));
        }
        for p in &w.partitions {
            if p.end_ms < p.start_ms || p.pct > 100 {
                return Err(invalid("partition", "needs start ≤ end and ≤ 100 %"));
            }
        }
        Ok(())
    }
}

/// The ID of simulated peer `n` of `kind` (1: rendezvous, 2: edge, 8 and 9:
/// forged by hostile peers).
pub fn sim_peer_id(kind: u8, n: u32) -> PeerId {
    let mut u = [0u8; 16];
    u[0] = kind;
    u[1..5].copy_from_slice(&n.to_be_bytes());
    JxtaId::from_parts(IdFormat::Cbid, [0x59; 16], u, IdType::Peer)
        .try_into()
        .expect("a cbid peer ID")
}

/// A peer advertisement of `p` (bytes of its XML).
pub fn sim_peer_adv(p: PeerId, name: &str) -> bytes::Bytes {
    PeerAdvertisement::new(p, PeerGroupId::NET, name)
        .to_xml()
        .into()
}

/// The (virtual) address of rendezvous `i`.
pub fn rdv_addr(i: usize) -> SocketAddr {
    let i = i as u32;
    SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 9701))
}

/// The resolver's query listener of [`GROUP`].
pub fn query_address() -> ServiceAddress {
    ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(GROUP)))
}

/// The resolver's response listener of [`GROUP`].
pub fn response_address() -> ServiceAddress {
    ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(GROUP)))
}

/// The SRDI listener of [`GROUP`].
pub fn srdi_address() -> ServiceAddress {
    ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(GROUP)))
}

/// An SRDI message for [`APP_HANDLER`] in its resolver envelope.
pub fn srdi_message(m: &SrdiMessage) -> Message {
    let env = ResolverSrdi {
        handler: APP_HANDLER.into(),
        payload: m.to_xml(),
    };
    Message::new().with(env.to_element(GROUP))
}

/// The item `k` of edge `i`.
pub fn item(i: usize, k: usize) -> String {
    if k == 0 {
        format!("item-{i}")
    } else {
        format!("item-{i}-{k}")
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rdv,
    Edge,
}

/// A workload lookup awaiting its answer.
struct Asked {
    at_us: u64,
    /// The publisher a positive lookup must name.
    owner: Option<PeerId>,
}

/// The handler the simulated application registers ([`APP_HANDLER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AppHandler;

/// A simulated peer's node: the resolver with the application's handler,
/// composed with the rendezvous part.
fn sim_node(rdv: RendezvousNode) -> Node<AppHandler> {
    // The application's queries at a rendezvous are SRDI queries, admitted
    // by the index's own flow control (as lookups).
    let mut n = Node::new(rdv, ResolverConfig::new(GROUP)).expect("one handler");
    n.register(Handler::exact(AppHandler, APP_HANDLER).own_admission())
        .expect("distinct handler names");
    n
}

struct Peer {
    node: Node<AppHandler>,
    kind: Kind,
    alive: bool,
    hostile: bool,
    inc: u32,
    timer_at: u64,
    busy_until: u64,
    busy_total: u64,
    /// Edge: when it lost its rendezvous to a kill (or restarted).
    orphaned_at: Option<(u64, bool)>,
    asked: HashMap<i32, Asked>,
    answers: BTreeMap<i32, (String, PeerId)>,
    leases: Vec<(u64, PeerId)>,
    next_local: i32,
}

enum Ev {
    Msg { from: u32, to: u32, t: Transmit },
    Timer(u32, u32),
    Query,
    Churn,
    Restart(u32),
    Kill,
    Hostile(u32),
}

/// Counters of refused and malformed input, summed over the peers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Resolver queries and responses that did not parse (refused by the
    /// resolver the simulator plays).
    pub resolver_malformed: u64,
    /// Rendezvous messages that did not parse.
    pub rdv_malformed: u64,
    /// Leases refused (table full).
    pub lease_refused: u64,
    /// Propagated/walked/peer-view messages from non-members or over rate,
    /// and peer-view messages naming another peer than their sender.
    pub not_member: u64,
    /// SRDI messages that did not parse.
    pub srdi_malformed: u64,
    /// SRDI entries refused by the index bounds.
    pub srdi_refused_entries: u64,
    /// Busy answers (admission control).
    pub busy: u64,
    /// Queriers not tracked because the admission table was full.
    pub admission_overflow: u64,
    /// Duplicate propagated messages.
    pub duplicates: u64,
}

impl Refusals {
    /// The sum of every counter.
    pub fn total(&self) -> u64 {
        self.resolver_malformed
            + self.rdv_malformed
            + self.lease_refused
            + self.not_member
            + self.srdi_malformed
            + self.srdi_refused_entries
            + self.busy
            + self.admission_overflow
            + self.duplicates
    }
}

/// The figures of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReport {
    /// Search model.
    pub model: &'static str,
    /// Peers (rendezvous and edges).
    pub peers: usize,
    /// Edges.
    pub edges: usize,
    /// Rendezvous.
    pub rendezvous: usize,
    /// Virtual time simulated, s.
    pub virtual_s: f64,
    /// Events processed.
    pub events: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Messages lost on links, to partitions, and to dead peers.
    pub lost_link: u64,
    /// See `lost_link`.
    pub lost_partition: u64,
    /// See `lost_link`.
    pub lost_dead: u64,
    /// Offered lookups/s.
    pub offered_qps: f64,
    /// % of lookups for published values.
    pub positive_pct: u8,
    /// Published values.
    pub query_space: usize,
    /// Measured lookups issued.
    pub issued: u64,
    /// Measured lookups answered.
    pub answered: u64,
    /// Measured lookups answered correctly (positive: the answer names the
    /// publisher; negative: it names nobody).
    pub correct: u64,
    /// Measured lookups timed out.
    pub timed_out: u64,
    /// Measured lookups whose querier crashed first (not counted).
    pub querier_crashed: u64,
    /// `correct / (answered + timed_out)`, % (all issuers are honest).
    pub honest_success_pct: f64,
    /// Answered lookups per virtual second (measured window).
    pub queries_per_s: f64,
    /// Response time percentiles and moments, ms.
    pub response_ms_p50: f64,
    /// See `response_ms_p50`.
    pub response_ms_p99: f64,
    /// See `response_ms_p50`.
    pub response_ms_mean: f64,
    /// See `response_ms_p50`.
    pub response_ms_stddev: f64,
    /// `timed_out / (answered + timed_out)`, %.
    pub loss_pct: f64,
    /// stddev / mean of the response times.
    pub cv: f64,
    /// Coefficient of variation of lookups completed per 100 ms.
    pub completion_cv: f64,
    /// Busy time of all rendezvous over the virtual time, % of one core
    /// (0 without processing costs).
    pub rdv_cpu_pct: f64,
    /// Rendezvous killed.
    pub rdv_kills: usize,
    /// Edges leased to a killed rendezvous.
    pub orphaned: usize,
    /// Of those, re-leased.
    pub recovered: usize,
    /// Of those, alive and without a lease at the end.
    pub never_recovered: usize,
    /// Recovery times (kill to the new lease), ms.
    pub recovery_ms_p50: f64,
    /// See `recovery_ms_p50`.
    pub recovery_ms_p99: f64,
    /// See `recovery_ms_p50`.
    pub recovery_ms_max: f64,
    /// Edge crashes.
    pub crashes: u64,
    /// Edge restarts.
    pub restarts: u64,
    /// Restart to lease, ms.
    pub rejoin_ms_p50: f64,
    /// See `rejoin_ms_p50`.
    pub rejoin_ms_p99: f64,
    /// Hostile edges.
    pub hostile_peers: usize,
    /// Junk messages they sent.
    pub hostile_sent: u64,
    /// What the peers refused.
    pub refusals: Refusals,
    /// Edges with a lease at the end (of the live ones).
    pub leased_edges: usize,
    /// Live edges at the end.
    pub live_edges: usize,
}

/// The event queue: (time, sequence number, slab slot), smallest first.
/// A 4-ary min-heap: half the depth of a binary heap, so fewer cache misses
/// per pop on the millions of pending events of a 100,000-peer run (the
/// standard `BinaryHeap`'s pop was 6-8 % of such a run). Sequence numbers
/// are unique, so the pop order is the same as any priority queue's.
#[derive(Default)]
struct EventQueue {
    v: Vec<(u64, u64, u32)>,
}

impl EventQueue {
    const D: usize = 4;

    fn key(e: &(u64, u64, u32)) -> (u64, u64) {
        (e.0, e.1)
    }

    fn peek(&self) -> Option<&(u64, u64, u32)> {
        self.v.first()
    }

    fn push(&mut self, e: (u64, u64, u32)) {
        let mut i = self.v.len();
        self.v.push(e);
        let k = Self::key(&e);
        while i > 0 {
            let parent = (i - 1) / Self::D;
            if Self::key(&self.v[parent]) <= k {
                break;
            }
            self.v[i] = self.v[parent];
            i = parent;
        }
        self.v[i] = e;
    }

    fn pop(&mut self) -> Option<(u64, u64, u32)> {
        let last = self.v.pop()?;
        if self.v.is_empty() {
            return Some(last);
        }
        let top = self.v[0];
        let n = self.v.len();
        let k = Self::key(&last);
        let mut i = 0;
        loop {
            let first = i * Self::D + 1;
            if first >= n {
                break;
            }
            let end = (first + Self::D).min(n);
            let mut c = first;
            for j in first + 1..end {
                if Self::key(&self.v[j]) < Self::key(&self.v[c]) {
                    c = j;
                }
            }
            if Self::key(&self.v[c]) >= k {
                break;
            }
            self.v[i] = self.v[c];
            i = c;
        }
        self.v[i] = last;
        Some(top)
    }
}

/// The simulator (see the module documentation).
pub struct Sim {
    cfg: SimConfig,
    now: u64,
    seq: u64,
    heap: EventQueue,
    slab: Vec<Option<Ev>>,
    free: Vec<u32>,
    peers: Vec<Peer>,
    ids: HashMap<PeerId, u32>,
    addrs: HashMap<SocketAddr, u32>,
    rng: StdRng,
    events: u64,
    delivered: u64,
    lost_link: u64,
    lost_partition: u64,
    lost_dead: u64,
    resolver_malformed: u64,
    // Workload figures.
    issued: u64,
    answered: u64,
    correct: u64,
    timed_out: u64,
    querier_crashed: u64,
    latencies_us: Vec<u64>,
    completions: Vec<u32>,
    kills: usize,
    orphaned: usize,
    recovery_us: Vec<u64>,
    rejoin_us: Vec<u64>,
    crashes: u64,
    restarts: u64,
    hostile_sent: u64,
    next_absent: u64,
    ores: ServiceAddress,
}

impl Sim {
    /// A network of `cfg.rendezvous` rendezvous and `cfg.edges` edges at
    /// virtual time 0 (the edges' items published, their seeds about to be
    /// dialled), with the workload scheduled.
    pub fn new(cfg: SimConfig) -> Result<Sim, SimError> {
        cfg.validate()?;
        let rn = cfg.rendezvous;
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let model = match cfg.model {
            Model::Srdi => SearchModel::Srdi,
            Model::Flooding => SearchModel::Flooding,
            Model::Centralized => SearchModel::Centralized {
                server: sim_peer_id(1, 0),
            },
        };
        let mut sim = Sim {
            now: 0,
            seq: 0,
            heap: EventQueue::default(),
            slab: Vec::new(),
            free: Vec::new(),
            peers: Vec::with_capacity(rn + cfg.edges),
            ids: HashMap::with_capacity(rn + cfg.edges),
            addrs: HashMap::with_capacity(rn),
            rng: StdRng::seed_from_u64(cfg.seed ^ 0x5349_4d55_4c41_5445),
            events: 0,
            delivered: 0,
            lost_link: 0,
            lost_partition: 0,
            lost_dead: 0,
            resolver_malformed: 0,
            issued: 0,
            answered: 0,
            correct: 0,
            timed_out: 0,
            querier_crashed: 0,
            latencies_us: Vec::new(),
            completions: Vec::new(),
            kills: 0,
            orphaned: 0,
            recovery_us: Vec::new(),
            rejoin_us: Vec::new(),
            crashes: 0,
            restarts: 0,
            hostile_sent: 0,
            next_absent: 0,
            ores: query_address(),
            cfg,
        };
        let all: Vec<SocketAddr> = (0..rn).map(rdv_addr).collect();
        for i in 0..rn {
            let me = sim_peer_id(1, i as u32);
            let peers: Vec<SocketAddr> = if sim.cfg.rdv_peers == 0 || sim.cfg.rdv_peers >= rn - 1 {
                all.iter().copied().filter(|a| *a != all[i]).collect()
            } else {
                // Drawn without repetition (a partial shuffle).
                let mut others: Vec<usize> = (0..rn).filter(|&j| j != i).collect();
                for k in 0..sim.cfg.rdv_peers {
                    let j = rng.gen_range(k..others.len());
                    others.swap(k, j);
                }
                others[..sim.cfg.rdv_peers]
                    .iter()
                    .map(|&j| all[j])
                    .collect()
            };
            let rc = RendezvousConfig {
                server: sim.cfg.server,
                srdi: SrdiNodeConfig {
                    model,
                    admission: sim.cfg.admission,
                    ..SrdiNodeConfig::default()
                },
                peers,
                ..RendezvousConfig::rendezvous()
            };
            let node = sim_node(RendezvousNode::new(
                rc,
                me,
                GROUP,
                sim_peer_adv(me, "rdv"),
                "rdv",
                i as u64,
            ));
            sim.addrs.insert(all[i], i as u32);
            sim.push_peer(me, node, Kind::Rdv);
        }
        let w = sim.cfg.workload.clone();
        let hostile_n = ((sim.cfg.edges as f64) * w.hostile_pct / 100.0).round() as usize;
        for j in 0..sim.cfg.edges {
            let me = sim_peer_id(2, j as u32);
            let (seeds, first) = sim.seeds_of(j, &mut rng);
            let node = sim.edge_node(j, me, seeds, first);
            let idx = sim.push_peer(me, node, Kind::Edge);
            // The hostile edges are spread evenly over the indices.
            let hostile = hostile_n > 0
                && (j * hostile_n) / sim.cfg.edges != ((j + 1) * hostile_n) / sim.cfg.edges;
            sim.peers[idx as usize].hostile = hostile;
        }
        for i in 0..sim.peers.len() as u32 {
            sim.drain(i);
        }
        if w.query_rate_per_100 > 0.0 && sim.cfg.edges > 0 {
            let at = w.warmup_ms * 1000;
            sim.schedule(at, Ev::Query);
        }
        if w.churn_pct_per_min > 0.0 && sim.cfg.edges > 0 {
            let gap = sim.churn_gap();
            sim.schedule(w.warmup_ms * 1000 + gap, Ev::Churn);
        }
        if w.rdv_kills > 0 {
            sim.schedule(w.kill_at_ms * 1000, Ev::Kill);
        }
        if hostile_n > 0 {
            for i in rn..sim.peers.len() {
                if sim.peers[i].hostile {
                    let off = sim.rng.gen_range(0..w.hostile_interval_ms * 1000);
                    sim.schedule(w.warmup_ms * 1000 + off, Ev::Hostile(i as u32));
                }
            }
        }
        Ok(sim)
    }

    fn seeds_of(&self, j: usize, rng: &mut StdRng) -> (Vec<SocketAddr>, usize) {
        let rn = self.cfg.rendezvous;
        let k = self.cfg.seeds_per_edge;
        if k == 0 || k >= rn {
            return ((0..rn).map(rdv_addr).collect(), j % rn);
        }
        let mut v: Vec<usize> = Vec::with_capacity(k);
        while v.len() < k {
            let r = rng.gen_range(0..rn);
            if !v.contains(&r) {
                v.push(r);
            }
        }
        (v.into_iter().map(rdv_addr).collect(), 0)
    }

    fn edge_node(
        &self,
        j: usize,
        me: PeerId,
        seeds: Vec<SocketAddr>,
        first: usize,
    ) -> Node<AppHandler> {
        let rc = RendezvousConfig {
            edge: self.cfg.edge,
            first_seed: first,
            ..RendezvousConfig::edge(seeds)
        };
        let mut node =
            RendezvousNode::new(rc, me, GROUP, sim_peer_adv(me, "edge"), "edge", j as u64);
        for k in 0..self.cfg.items_per_edge {
            let key = (PKEY.to_string(), ATTR.to_string(), item(j, k));
            // Checked keys: cannot fail.
            let _ = node.publish(key, ENTRY_LIFE_MS, self.now / 1000);
        }
        sim_node(node)
    }

    fn push_peer(&mut self, me: PeerId, node: Node<AppHandler>, kind: Kind) -> u32 {
        let idx = self.peers.len() as u32;
        self.ids.insert(me, idx);
        self.peers.push(Peer {
            node,
            kind,
            alive: true,
            hostile: false,
            inc: 0,
            timer_at: u64::MAX,
            busy_until: 0,
            busy_total: 0,
            orphaned_at: None,
            asked: HashMap::new(),
            answers: BTreeMap::new(),
            leases: Vec::new(),
            next_local: -1,
        });
        idx
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(ev);
                s
            }
            None => {
                self.slab.push(Some(ev));
                (self.slab.len() - 1) as u32
            }
        };
        self.seq += 1;
        self.heap.push((at, self.seq, slot));
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Virtual time, ms.
    pub fn now_ms(&self) -> u64 {
        self.now / 1000
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Messages delivered so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Rendezvous `i`'s node.
    pub fn rdv(&self, i: usize) -> &RendezvousNode {
        self.peers[i].node.rendezvous()
    }

    /// Edge `i`'s node.
    pub fn edge(&self, i: usize) -> &RendezvousNode {
        self.peers[self.cfg.rendezvous + i].node.rendezvous()
    }

    /// Rendezvous `i`'s ID.
    pub fn rdv_id(&self, i: usize) -> PeerId {
        self.rdv(i).me()
    }

    /// Edge `i`'s ID.
    pub fn edge_id(&self, i: usize) -> PeerId {
        self.edge(i).me()
    }

    /// Whether edge `i` is alive.
    pub fn edge_alive(&self, i: usize) -> bool {
        self.peers[self.cfg.rendezvous + i].alive
    }

    /// Rendezvous `i`'s lease server.
    pub fn srv(&self, i: usize) -> &RendezvousServer {
        self.rdv(i).server().expect("a rendezvous")
    }

    /// Rendezvous `i`'s SRDI node.
    pub fn srdi(&self, i: usize) -> &SrdiNode {
        self.rdv(i).srdi().expect("a rendezvous")
    }

    /// Edge `i`'s answered queries (with [`SimConfig::record`]): ID ->
    /// (value or [`LOOKUP_HANDLER`], publisher).
    pub fn answer(&self, i: usize, qid: i32) -> Option<&(String, PeerId)> {
        self.peers[self.cfg.rendezvous + i].answers.get(&qid)
    }

    /// When edge `i` leased which rendezvous (with [`SimConfig::record`]).
    pub fn leases(&self, i: usize) -> &[(u64, PeerId)] {
        &self.peers[self.cfg.rendezvous + i].leases
    }

    /// Puts `t` on the wire from edge `from` (as if it had sent it).
    pub fn inject(&mut self, from: usize, t: Transmit) {
        let f = (self.cfg.rendezvous + from) as u32;
        self.send(f, t);
    }

    /// Kills rendezvous `i` silently (its links stay open and mute).
    pub fn kill_rdv(&mut self, i: usize) {
        self.peers[i].alive = false;
        while self.peers[i].node.poll_transmit().is_some() {}
        while self.peers[i].node.poll_event().is_some() {}
    }

    /// Crashes edge `i` silently.
    pub fn crash_edge(&mut self, i: usize) {
        let p = &mut self.peers[self.cfg.rendezvous + i];
        p.alive = false;
        p.inc = p.inc.wrapping_add(1);
        p.timer_at = u64::MAX;
        p.orphaned_at = None;
        let measured = p.asked.len() as u64;
        p.asked.clear();
        self.querier_crashed += measured;
        self.crashes += 1;
    }

    /// Restarts edge `i` with a fresh node (same ID and seeds): it leases
    /// again and re-publishes its items.
    pub fn restart_edge(&mut self, i: usize) {
        let idx = self.cfg.rendezvous + i;
        let me = self.peers[idx].node.me();
        let mut rng = StdRng::seed_from_u64(splitmix(self.cfg.seed ^ (i as u64) << 20));
        let (seeds, first) = self.seeds_of(i, &mut rng);
        let node = self.edge_node(i, me, seeds, first);
        let now = self.now;
        let p = &mut self.peers[idx];
        p.node = node;
        p.alive = true;
        p.inc = p.inc.wrapping_add(1);
        p.timer_at = u64::MAX;
        p.orphaned_at = Some((now, true));
        self.restarts += 1;
        self.drain(idx as u32);
    }

    /// Edge `i` asks (with the application handler) for `value`, answered
    /// by the edge holding it; returns the query ID (negative when the edge
    /// holds it itself, as the discovery service answers from its cache).
    pub fn ask(&mut self, i: usize, value: String) -> i32 {
        let now = self.now_ms();
        let idx = self.cfg.rendezvous + i;
        let holds = (0..self.cfg.items_per_edge).any(|k| item(i, k) == value);
        let p = &mut self.peers[idx];
        if holds {
            let id = p.next_local;
            p.next_local -= 1;
            let me = p.node.me();
            p.answers.insert(id, (value, me));
            return id;
        }
        let id = p
            .node
            .rendezvous_mut()
            .query(APP_HANDLER, value, u64::MAX, now)
            .expect("an edge below its pending bound");
        self.drain(idx as u32);
        id
    }

    /// Edge `i` asks its rendezvous who published `value`; returns the
    /// query ID.
    pub fn lookup(&mut self, i: usize, value: &str) -> i32 {
        let now = self.now_ms();
        let idx = self.cfg.rendezvous + i;
        let key = (PKEY.to_string(), ATTR.to_string(), value.to_string());
        let id = self.peers[idx]
            .node
            .rendezvous_mut()
            .lookup(&key, u64::MAX, now)
            .expect("an edge below its pending bound");
        self.drain(idx as u32);
        id
    }

    fn link(&self, from: u32, to: u32) -> (f64, f64, f64) {
        let h = splitmix(self.cfg.seed ^ splitmix(((from as u64) << 32) | to as u64));
        let l = &self.cfg.link;
        (
            l.latency_ms.at(unit(h)),
            l.bandwidth_mbit.at(unit(splitmix(h ^ 1))),
            l.loss_pct.at(unit(splitmix(h ^ 2))),
        )
    }

    fn side(&self, i: u32, pct: u8) -> bool {
        splitmix(self.cfg.seed ^ 0x7061_7274 ^ u64::from(i)) % 100 < u64::from(pct)
    }

    fn cut(&self, a: u32, b: u32) -> bool {
        let ms = self.now / 1000;
        self.cfg.workload.partitions.iter().any(|p| {
            p.start_ms <= ms && ms < p.end_ms && self.side(a, p.pct) != self.side(b, p.pct)
        })
    }

    fn send(&mut self, from: u32, t: Transmit) {
        let Some(&to) = self.ids.get(&t.to) else {
            self.lost_dead += 1;
            return;
        };
        if self.cut(from, to) {
            self.lost_partition += 1;
            return;
        }
        let (lat_ms, mbit, loss) = self.link(from, to);
        if loss > 0.0 && self.rng.gen::<f64>() * 100.0 < loss {
            self.lost_link += 1;
            return;
        }
        let mut us = lat_ms * 1000.0;
        if mbit > 0.0 {
            let bytes = t.message.payload_len() + 32 * t.message.elements.len() + 64;
            us += bytes as f64 * 8.0 / mbit;
        }
        let at = self.now.saturating_add(us.round() as u64);
        self.schedule(at, Ev::Msg { from, to, t });
    }

    /// Moves node `i`'s events and transmits, then re-arms its timer.
    fn drain(&mut self, i: u32) {
        let iu = i as usize;
        loop {
            let mut busy = false;
            while let Some(ev) = self.peers[iu].node.poll_event() {
                busy = true;
                self.on_event(i, ev);
            }
            while let Some(t) = self.peers[iu].node.poll_transmit() {
                busy = true;
                if self.peers[iu].alive {
                    self.send(i, t);
                }
            }
            if !busy {
                break;
            }
        }
        self.rearm(i, false);
    }

    fn rearm(&mut self, i: u32, fired: bool) {
        let p = &self.peers[i as usize];
        if !p.alive {
            return;
        }
        let Some(t) = p.node.poll_timeout() else {
            self.peers[i as usize].timer_at = u64::MAX;
            return;
        };
        let now_ms = self.now / 1000;
        let at = if t > now_ms {
            t.saturating_mul(1000)
        } else if fired {
            // Fired at this millisecond already: the next one.
            (now_ms + 1) * 1000
        } else {
            self.now
        };
        if at != p.timer_at {
            let inc = p.inc;
            self.peers[i as usize].timer_at = at;
            self.schedule(at, Ev::Timer(i, inc));
        }
    }

    fn on_event(&mut self, i: u32, ev: Event<AppHandler>) {
        let ev = match ev {
            Event::Rendezvous(e) => e,
            Event::Query {
                from,
                query,
                message,
                ..
            } => return self.on_query(i, from, *query, message),
            // Answers to the application's queries complete them in the
            // rendezvous part ([`NodeEvent::Answered`]); nothing else
            // answers it.
            Event::Response { .. } => return,
            // Counted in the node's resolver stats.
            Event::Refused(_) => return,
        };
        let now = self.now;
        let iu = i as usize;
        match ev {
            NodeEvent::Dial(a) => {
                let to = self
                    .addrs
                    .get(&a)
                    .copied()
                    .filter(|&r| self.peers[r as usize].alive && !self.cut(i, r))
                    .map(|r| self.peers[r as usize].node.me());
                self.peers[iu].node.handle_dialed(a, to, now / 1000);
            }
            NodeEvent::LeaseGained(rdv) => {
                let p = &mut self.peers[iu];
                if self.cfg.record {
                    p.leases.push((now / 1000, rdv));
                }
                if let Some((t, restart)) = p.orphaned_at.take() {
                    let d = now.saturating_sub(t);
                    if restart {
                        self.rejoin_us.push(d);
                    } else {
                        self.recovery_us.push(d);
                    }
                }
            }
            NodeEvent::Answered { id, response } => self.on_answer(i, id, response),
            NodeEvent::TimedOut { id } => {
                let removed = self.peers[iu].asked.remove(&id).is_some();
                self.timed_out += u64::from(removed);
            }
            _ => {}
        }
    }

    fn on_answer(&mut self, i: u32, id: i32, response: String) {
        let iu = i as usize;
        if let Some(a) = self.peers[iu].asked.remove(&id) {
            let peers = lookup_peers(&response);
            let ok = match a.owner {
                Some(o) => peers.contains(&o),
                None => peers.is_empty(),
            };
            self.answered += 1;
            self.correct += u64::from(ok);
            self.latencies_us.push(self.now.saturating_sub(a.at_us));
            let b = (self.now / 100_000) as usize;
            if self.completions.len() <= b {
                self.completions.resize(b + 1, 0);
            }
            self.completions[b] += 1;
            return;
        }
        if !self.cfg.record {
            return;
        }
        let got = match response.split_once(' ') {
            // An application answer: "value publisher".
            Some((value, who)) if !value.starts_with("urn:") => {
                who.parse().ok().map(|p| (value.to_string(), p))
            }
            // A lookup answer: the publishers (none: not answered).
            _ => lookup_peers(&response)
                .first()
                .map(|p| (LOOKUP_HANDLER.to_string(), *p)),
        };
        if let Some(got) = got {
            self.peers[iu].answers.insert(id, got);
        }
    }

    /// A query for the application's handler, admitted by peer `i`'s
    /// resolver: a rendezvous hands it to its SRDI index (under the key it
    /// names), an edge answers it if it holds the item.
    fn on_query(&mut self, i: u32, from: PeerId, q: ResolverQuery, msg: Message) {
        let now = self.now / 1000;
        let iu = i as usize;
        match self.peers[iu].kind {
            Kind::Rdv => {
                let key = Some((PKEY.to_string(), ATTR.to_string(), q.query.clone()));
                self.peers[iu]
                    .node
                    .forward_query(Some(from), q, msg, key, now);
            }
            Kind::Edge => {
                let j = iu - self.cfg.rendezvous;
                let holds = (0..self.cfg.items_per_edge).any(|k| item(j, k) == q.query);
                if holds && self.peers[iu].alive {
                    let me = self.peers[iu].node.me();
                    self.peers[iu]
                        .node
                        .respond(&q, format!("{} {}", q.query, me));
                }
            }
        }
    }

    fn deliver(&mut self, from: u32, to: u32, tx: Transmit) {
        let now = self.now / 1000;
        let from_id = self.peers[from as usize].node.me();
        self.delivered += 1;
        let Transmit { dest, message, .. } = tx;
        // The simulator's links are authenticated; refusals are counted
        // by the node (malformed resolver documents here too).
        let r = self.peers[to as usize]
            .node
            .handle_message(from_id, true, &dest, message, now);
        if let Err(InputError::Resolver(Refusal::Malformed(_))) = r {
            self.resolver_malformed += 1;
        }
        self.drain(to);
    }

    /// Runs until virtual time `end_ms` (every event at or before it).
    pub fn run_until(&mut self, end_ms: u64) {
        let end = end_ms.saturating_mul(1000);
        while let Some(&(t, _, slot)) = self.heap.peek() {
            if t > end {
                break;
            }
            self.heap.pop();
            let ev = self.slab[slot as usize].take().expect("a scheduled event");
            self.free.push(slot);
            self.now = self.now.max(t);
            self.events += 1;
            self.handle(ev);
        }
        self.now = self.now.max(end);
    }

    fn cost(&self, i: u32) -> u64 {
        let c = match self.peers[i as usize].kind {
            Kind::Rdv => self.cfg.costs.rdv_us,
            Kind::Edge => self.cfg.costs.edge_us,
        };
        c.round() as u64
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Msg { from, to, t } => {
                let p = &self.peers[to as usize];
                if !p.alive {
                    self.lost_dead += 1;
                    return;
                }
                let cost = self.cost(to);
                if cost > 0 {
                    if p.busy_until > self.now {
                        // The peer is busy: the message waits its turn.
                        let at = p.busy_until;
                        self.schedule(at, Ev::Msg { from, to, t });
                        return;
                    }
                    let p = &mut self.peers[to as usize];
                    p.busy_until = self.now + cost;
                    p.busy_total += cost;
                }
                self.deliver(from, to, t);
            }
            Ev::Timer(i, inc) => {
                let p = &self.peers[i as usize];
                if !p.alive || p.inc != inc || p.timer_at != self.now {
                    return;
                }
                self.peers[i as usize].timer_at = u64::MAX;
                let now = self.now / 1000;
                self.peers[i as usize].node.handle_timeout(now);
                self.drain(i);
                self.rearm(i, true);
            }
            Ev::Query => self.on_query_arrival(),
            Ev::Churn => {
                let rn = self.cfg.rendezvous;
                let j = self.rng.gen_range(0..self.cfg.edges);
                if self.peers[rn + j].alive {
                    self.crash_edge(j);
                    let d = self.cfg.workload.downtime_ms;
                    let down = (d.at(self.rng.gen::<f64>()) * 1000.0).max(0.0) as u64;
                    self.schedule(self.now.saturating_add(down), Ev::Restart(j as u32));
                }
                let gap = self.churn_gap();
                self.schedule(self.now + gap, Ev::Churn);
            }
            Ev::Restart(j) => self.restart_edge(j as usize),
            Ev::Kill => {
                // The lowest-numbered live rendezvous.
                if let Some(v) = (0..self.cfg.rendezvous).find(|&r| self.peers[r].alive) {
                    let dead = self.peers[v].node.me();
                    self.kill_rdv(v);
                    self.kills += 1;
                    let now = self.now;
                    for p in self.peers[self.cfg.rendezvous..].iter_mut() {
                        if p.alive && p.node.rendezvous().leased_to() == Some(dead) {
                            p.orphaned_at = Some((now, false));
                            self.orphaned += 1;
                        }
                    }
                }
                if self.kills < self.cfg.workload.rdv_kills {
                    let at = self.now + self.cfg.workload.kill_interval_ms * 1000;
                    self.schedule(at, Ev::Kill);
                }
            }
            Ev::Hostile(i) => {
                if self.peers[i as usize].alive {
                    self.junk(i);
                }
                let at = self.now + self.cfg.workload.hostile_interval_ms * 1000;
                self.schedule(at, Ev::Hostile(i));
            }
        }
    }

    fn churn_gap(&mut self) -> u64 {
        let per_us =
            self.cfg.edges as f64 * self.cfg.workload.churn_pct_per_min / 100.0 / 60_000_000.0;
        let u: f64 = self.rng.gen();
        ((-(1.0 - u).ln() / per_us).min(1e15) as u64).max(1)
    }

    fn on_query_arrival(&mut self) {
        let w = &self.cfg.workload;
        let rate_per_us = w.query_rate_per_100 * self.cfg.edges as f64 / 100.0 / 1e6;
        let positive_pct = w.positive_pct;
        let timeout = w.lookup_timeout_ms;
        let u: f64 = self.rng.gen();
        let gap = ((-(1.0 - u).ln() / rate_per_us).min(1e15) as u64).max(1);
        self.schedule(self.now + gap, Ev::Query);
        let rn = self.cfg.rendezvous;
        let n = self.cfg.edges;
        // A live honest querier (a few tries).
        let Some(j) = (0..8)
            .map(|_| self.rng.gen_range(0..n))
            .find(|&j| self.peers[rn + j].alive && !self.peers[rn + j].hostile)
        else {
            return;
        };
        let positive = self.rng.gen_range(0..100u8) < positive_pct;
        let (value, owner) = if positive && n > 1 {
            let Some(o) = (0..8)
                .map(|_| self.rng.gen_range(0..n))
                .find(|&o| o != j && self.peers[rn + o].alive)
            else {
                return;
            };
            let k = self.rng.gen_range(0..self.cfg.items_per_edge);
            (item(o, k), Some(self.peers[rn + o].node.me()))
        } else {
            self.next_absent += 1;
            (format!("absent-{}", self.next_absent), None)
        };
        let key = (PKEY.to_string(), ATTR.to_string(), value);
        let now = self.now;
        let idx = rn + j;
        if let Ok(id) = self.peers[idx]
            .node
            .rendezvous_mut()
            .lookup(&key, timeout, now / 1000)
        {
            self.issued += 1;
            self.peers[idx]
                .asked
                .insert(id, Asked { at_us: now, owner });
        }
        self.drain(idx as u32);
    }

    /// One junk message from hostile peer `i`.
    fn junk(&mut self, i: u32) {
        let rn = self.cfg.rendezvous;
        let me = self.peers[i as usize].node.me();
        let to = match self.peers[i as usize].node.rendezvous().leased_to() {
            Some(r) if self.rng.gen_bool(0.5) => r,
            _ => self.peers[self.rng.gen_range(0..rn)].node.me(),
        };
        let n = self.hostile_sent;
        let kind = self.rng.gen_range(0..7u8);
        let garbage = |len: usize, seed: u64| -> Vec<u8> {
            (0..len as u64)
                .map(|k| (splitmix(seed ^ k) & 0xff) as u8)
                .collect()
        };
        let one = |dest: ServiceAddress, message: Message| Transmit { to, dest, message };
        let mut out = Vec::new();
        match kind {
            // Garbage where a resolver query is expected.
            0 => out.push(one(
                self.ores.clone(),
                Message::new().with(Element::bytes("jxta", "Resolver", garbage(200, n))),
            )),
            // Garbage on the lease service.
            1 => out.push(one(
                lease_address(&PeerGroupId::NET),
                Message::new().with(Element::bytes("jxta", "Connect", garbage(300, n))),
            )),
            // Garbage SRDI.
            2 => out.push(one(
                srdi_address(),
                Message::new().with(Element::bytes("jxta", "ResolverSrdi", garbage(500, n))),
            )),
            // An oversized SRDI push (more than a peer may index).
            3 => {
                let m = SrdiMessage {
                    peer: me,
                    primary_key: PKEY.into(),
                    scope: 0,
                    entries: (0..400)
                        .map(|k| SrdiEntry {
                            key: ATTR.into(),
                            value: format!("junk-{n}-{k}"),
                            expiration: ENTRY_LIFE_MS,
                        })
                        .collect(),
                };
                out.push(one(srdi_address(), srdi_message(&m)));
            }
            // One query replayed: more copies at once than a querier's
            // admission burst.
            4 => {
                let q = ResolverQuery {
                    handler: LOOKUP_HANDLER.into(),
                    query_id: 7,
                    hop_count: 0,
                    src_peer: me,
                    query: format!("{PKEY}\t{ATTR}\treplayed"),
                    src_route: None,
                };
                let m = Message::new().with(q.to_element(GROUP));
                let copies = (self.cfg.admission.per_querier_burst as usize).clamp(1, 1_000) + 10;
                for _ in 0..copies {
                    out.push(one(self.ores.clone(), m.clone()));
                }
            }
            // A lease request in a forged peer's name.
            5 => {
                let p = sim_peer_id(9, n as u32);
                let m = LeaseMessage::Request {
                    peer: p,
                    peer_adv: sim_peer_adv(p, "forged"),
                };
                out.push(one(lease_address(&PeerGroupId::NET), m.to_message()));
            }
            // Garbage on the peer view (an edge is no member).
            _ => out.push(one(
                peerview_address(&PeerGroupId::NET),
                Message::new().with(Element::bytes("jxta", "PeerView", garbage(300, n))),
            )),
        }
        self.hostile_sent += 1;
        for t in out {
            self.send(i, t);
        }
    }

    /// Counts what the rendezvous refused.
    pub fn refusals(&self) -> Refusals {
        let mut r = Refusals {
            resolver_malformed: self.resolver_malformed,
            ..Refusals::default()
        };
        for p in &self.peers[..self.cfg.rendezvous] {
            let (Some(srv), Some(srdi)) =
                (p.node.rendezvous().server(), p.node.rendezvous().srdi())
            else {
                continue;
            };
            let s = srv.stats();
            r.rdv_malformed += s.malformed;
            r.lease_refused += s.refused;
            r.not_member += s.not_member + s.over_rate + srv.peer_view().stats().not_sender;
            r.duplicates += s.duplicates;
            let d = srdi.stats();
            r.srdi_malformed += d.malformed;
            r.srdi_refused_entries += d.refused_entries;
            r.busy += d.busy;
            r.admission_overflow += srdi.admission().stats().overflow;
        }
        r
    }

    /// The figures so far.
    pub fn report(&self) -> SimReport {
        let w = &self.cfg.workload;
        let rn = self.cfg.rendezvous;
        let virtual_s = self.now as f64 / 1e6;
        let measured_s = (self.now as f64 / 1e6 - w.warmup_ms as f64 / 1e3).max(1e-9);
        let mut lat: Vec<f64> = self.latencies_us.iter().map(|&u| u as f64 / 1e3).collect();
        lat.sort_by(f64::total_cmp);
        let (mean, sd) = moments(&lat);
        let done = self.answered + self.timed_out;
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                a as f64 * 100.0 / b as f64
            }
        };
        let from = (w.warmup_ms / 100) as usize;
        let comp: Vec<f64> = self
            .completions
            .iter()
            .skip(from)
            .map(|&c| f64::from(c))
            .collect();
        let (cm, csd) = moments(&comp);
        let mut rec: Vec<f64> = self.recovery_us.iter().map(|&u| u as f64 / 1e3).collect();
        rec.sort_by(f64::total_cmp);
        let mut rej: Vec<f64> = self.rejoin_us.iter().map(|&u| u as f64 / 1e3).collect();
        rej.sort_by(f64::total_cmp);
        let edges = &self.peers[rn..];
        let never = edges
            .iter()
            .filter(|p| p.alive && matches!(p.orphaned_at, Some((_, false))))
            .count();
        let busy: u64 = self.peers[..rn].iter().map(|p| p.busy_total).sum();
        SimReport {
            model: self.cfg.model.name(),
            peers: self.peers.len(),
            edges: self.cfg.edges,
            rendezvous: rn,
            virtual_s,
            events: self.events,
            delivered: self.delivered,
            lost_link: self.lost_link,
            lost_partition: self.lost_partition,
            lost_dead: self.lost_dead,
            offered_qps: w.query_rate_per_100 * self.cfg.edges as f64 / 100.0,
            positive_pct: w.positive_pct,
            query_space: self.cfg.edges * self.cfg.items_per_edge,
            issued: self.issued,
            answered: self.answered,
            correct: self.correct,
            timed_out: self.timed_out,
            querier_crashed: self.querier_crashed,
            honest_success_pct: pct(self.correct, done),
            queries_per_s: self.answered as f64 / measured_s,
            response_ms_p50: quantile(&lat, 0.50),
            response_ms_p99: quantile(&lat, 0.99),
            response_ms_mean: mean,
            response_ms_stddev: sd,
            loss_pct: pct(self.timed_out, done),
            cv: if mean > 0.0 { sd / mean } else { 0.0 },
            completion_cv: if cm > 0.0 { csd / cm } else { 0.0 },
            rdv_cpu_pct: if virtual_s > 0.0 {
                busy as f64 / 1e6 / virtual_s * 100.0
            } else {
                0.0
            },
            rdv_kills: self.kills,
            orphaned: self.orphaned,
            recovered: self.recovery_us.len(),
            never_recovered: never,
            recovery_ms_p50: quantile(&rec, 0.50),
            recovery_ms_p99: quantile(&rec, 0.99),
            recovery_ms_max: rec.last().copied().unwrap_or(0.0),
            crashes: self.crashes,
            restarts: self.restarts,
            rejoin_ms_p50: quantile(&rej, 0.50),
            rejoin_ms_p99: quantile(&rej, 0.99),
            hostile_peers: edges.iter().filter(|p| p.hostile).count(),
            hostile_sent: self.hostile_sent,
            refusals: self.refusals(),
            leased_edges: edges
                .iter()
                .filter(|p| p.alive && p.node.rendezvous().leased_to().is_some())
                .count(),
            live_edges: edges.iter().filter(|p| p.alive).count(),
        }
    }
}

/// The `q` quantile of sorted `v` (nearest rank; 0 when empty).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let k = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[k]
}

fn moments(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_queue_pops_in_time_then_sequence_order() {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let mut q = EventQueue::default();
        let mut reference = BinaryHeap::new();
        let mut rng = StdRng::seed_from_u64(7);
        let mut seq = 0;
        let mut popped = 0;
        for round in 0..20_000u32 {
            // Pushes and pops interleaved, many equal times.
            for _ in 0..rng.gen_range(0..4) {
                seq += 1;
                let e = (rng.gen_range(0..500u64), seq, round);
                q.push(e);
                reference.push(Reverse(e));
            }
            for _ in 0..rng.gen_range(0..4) {
                assert_eq!(q.peek().copied(), reference.peek().map(|r| r.0));
                let got = q.pop();
                assert_eq!(got, reference.pop().map(|r| r.0));
                popped += usize::from(got.is_some());
            }
        }
        while let Some(r) = reference.pop() {
            assert_eq!(q.pop(), Some(r.0));
            popped += 1;
        }
        assert_eq!(q.pop(), None);
        assert!(popped > 20_000);
    }

    #[test]
    fn distributions_parse_and_stay_in_range() {
        assert_eq!(Dist::parse("5"), Some(Dist::Const(5.0)));
        assert_eq!(
            Dist::parse("2..20"),
            Some(Dist::Uniform {
                min: 2.0,
                max: 20.0
            })
        );
        assert_eq!(
            Dist::parse("exp:1:4"),
            Some(Dist::Exp {
                min: 1.0,
                mean: 4.0
            })
        );
        assert_eq!(Dist::parse("-1"), None);
        assert_eq!(Dist::parse("9..2"), None);
        assert_eq!(Dist::parse("x"), None);
        let u = Dist::Uniform { min: 2.0, max: 4.0 };
        for k in 0..100 {
            let v = u.at(k as f64 / 100.0);
            assert!((2.0..=4.0).contains(&v));
        }
        assert!(
            Dist::Exp {
                min: 1.0,
                mean: 3.0
            }
            .at(0.999_999)
                > 1.0
        );
    }

    #[test]
    fn impossible_parameters_are_refused_by_name() {
        let bad = |c: SimConfig| match Sim::new(c) {
            Err(SimError::Invalid { param, .. }) => param,
            Ok(_) => "accepted",
        };
        let d = SimConfig::default;
        assert_eq!(
            bad(SimConfig {
                rendezvous: 0,
                ..d()
            }),
            "rendezvous"
        );
        let mut c = d();
        c.workload.rdv_kills = 3;
        assert_eq!(bad(c), "rdv kills");
        let mut c = d();
        c.link.loss_pct = Dist::Const(150.0);
        assert_eq!(bad(c), "loss");
        let mut c = d();
        c.workload.positive_pct = 101;
        assert_eq!(bad(c), "positive %");
    }
}
