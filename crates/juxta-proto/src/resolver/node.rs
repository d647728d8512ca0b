//! The resolver's decisions, sans-IO: [`ResolverNode`].
//!
//! Every resolver query and response a peer receives passes through here
//! before any service sees it, so the rules that protect the services are
//! in one place, tested without sockets, and the same in the runtime
//! (`juxta::resolver`) and the simulator ([`crate::sim`], through
//! [`crate::node::Node`]):
//! - **queues**: a message on `<group>ORes` is a query, on `<group>IRes` a
//!   response; any other resolver queue (e.g. SRDI's `<group>Srdi`) is
//!   not the resolver's ([`Refusal::Unroutable`]);
//! - **group scoping**: traffic for a group this peer has not joined is
//!   refused ([`Refusal::NotMember`]), as is a message addressed in one
//!   group (its mangled address) for another group's queue; the open
//!   groups ([`ResolverConfig::open`], the Net group) need no membership;
//! - **handlers**: a registry of handlers by name ([`Handler`]), matched
//!   exactly or by prefix (discovery's class URN, possibly followed by the
//!   group, as JXSE names its handlers), some only in joined subgroups;
//! - **admission control** on every query kind: each handler either
//!   shares the per-querier token bucket ([`Admission::Shared`]: rate,
//!   burst, a bounded table of queriers) or has its own flow control that
//!   answers with a busy notice ([`Admission::Own`], the rendezvous'
//!   lookups, admitted by its SRDI index). A query that one of the group's
//!   forwarders (a rendezvous of the peer view, an edge's rendezvous)
//!   handed on is charged to the querier it names, not to the forwarder;
//! - **answer routing** ([`ResolverNode::answer_path`]): an answer goes to
//!   the querier over a link to it, else over a new link to an address of
//!   the route its query carried (bounded: [`MAX_ANSWER_DIALS`] in flight,
//!   one per querier, [`ANSWER_DIAL_RATE`] per second), never through the
//!   peer that forwarded the query.
//!
//! The owner authenticates group traffic between the two steps (the
//! member seal is the group's key material): [`ResolverNode::accept`]
//! scopes a message, [`ResolverNode::handle_query`] /
//! [`ResolverNode::handle_response`] parse and route it. Outputs are
//! events ([`ResolverNode::poll_event`]); a refusal is returned as a typed
//! [`Refusal`] and counted in [`ResolverStats`].
//!
//! ```
//! use juxta_proto::message::Message;
//! use juxta_proto::id::{IdFormat, IdType, JxtaId, PeerId};
//! use juxta_proto::resolver::node::{Handler, ResolverConfig, ResolverEvent, ResolverNode};
//! use juxta_proto::resolver::{query_queue, ResolverQuery};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let querier: PeerId = JxtaId::from_parts(IdFormat::Cbid, [0x59; 16], [7; 16], IdType::Peer).try_into()?;
//! let mut r = ResolverNode::new(ResolverConfig::new("jxta-NetGroup"));
//! r.register(Handler::exact("pipes", "JxtaPipeResolver"))?;
//! let q = ResolverQuery {
//!     handler: "JxtaPipeResolver".into(),
//!     query_id: 1,
//!     hop_count: 0,
//!     src_peer: querier,
//!     query: "<q/>".into(),
//!     src_route: None,
//! };
//! let msg = Message::new().with(q.to_element("jxta-NetGroup"));
//! let scoped = r.accept(Some(&query_queue("jxta-NetGroup")), None)?;
//! r.handle_query(&scoped, Some(querier), false, msg, 0)?;
//! assert!(matches!(r.poll_event(), Some(ResolverEvent::Query { key: "pipes", .. })));
//! # Ok(()) }
//! ```

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::net::SocketAddr;

use super::{ResolverError, ResolverQuery, ResolverResponse};
use crate::id::{PeerId, PeerMap};
use crate::message::Message;
use crate::rendezvous::messages::BusyNotice;
use crate::time::Millis;

/// Most handlers one resolver registers.
pub const MAX_HANDLERS: usize = 64;
/// Most groups (besides the open ones) one resolver serves by default.
pub const MAX_GROUPS: usize = 1_024;
/// Most events queued for the owner (it drains them after every input;
/// past this they are dropped and counted).
pub const MAX_QUEUED: usize = 65_536;
/// Most answer dials in progress at once.
pub const MAX_ANSWER_DIALS: usize = 16;
/// New answer dials per second, sustained.
pub const ANSWER_DIAL_RATE: f64 = 8.0;
/// New answer dials allowed at once after a quiet period.
pub const ANSWER_DIAL_BURST: f64 = 16.0;
/// Most addresses of a querier's route tried to deliver one answer.
pub const MAX_ANSWER_ADDRS: usize = 4;

/// How a handler name is matched against a query's `HandlerName`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// The whole name.
    Exact,
    /// The name is a prefix (discovery: the class URN, possibly followed
    /// by the group).
    Prefix,
}

/// The admission control a handler's queries pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The per-querier token bucket shared by every handler of this kind
    /// (discovery, peer info, pipe binding, routes, ...).
    Shared,
    /// The handler's own flow control, which answers a refused query with
    /// a busy notice (the rendezvous' lookups, admitted by its SRDI index,
    /// see [`crate::srdi::flow`]).
    Own,
}

/// Where a handler is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Groups {
    /// In every group the peer serves.
    All,
    /// Only in joined groups, never in the open ones (e.g. a group's
    /// certificate revocation list).
    JoinedOnly,
}

/// A registered handler: the owner's key for it, its name, and its rules.
///
/// ```
/// use juxta_proto::resolver::node::{Admission, Handler, Match};
/// let h = Handler::prefix(1u8, "urn:jxta:cbid-").own_admission();
/// assert_eq!(h.matching, Match::Prefix);
/// assert_eq!(h.admission, Admission::Own);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler<K> {
    /// What the owner is told in events.
    pub key: K,
    /// The handler name (or prefix).
    pub name: String,
    /// How `name` is matched.
    pub matching: Match,
    /// The admission control of its queries.
    pub admission: Admission,
    /// Where it is served.
    pub groups: Groups,
    /// Whether unsolicited responses (query ID 0, e.g. a discovery remote
    /// publish) are charged to their sender's budget like a query.
    pub admit_unsolicited: bool,
    /// Whether it takes responses only (its queries are refused as for an
    /// unknown handler).
    pub responses_only: bool,
}

impl<K> Handler<K> {
    /// The same handler, told to its owner as `f(key)`.
    ///
    /// ```
    /// use juxta_proto::resolver::node::Handler;
    /// let h = Handler::exact(1u8, "JxtaPipeResolver").map_key(|k| k + 1);
    /// assert_eq!((h.key, h.name.as_str()), (2, "JxtaPipeResolver"));
    /// ```
    pub fn map_key<L>(self, f: impl FnOnce(K) -> L) -> Handler<L> {
        Handler {
            key: f(self.key),
            name: self.name,
            matching: self.matching,
            admission: self.admission,
            groups: self.groups,
            admit_unsolicited: self.admit_unsolicited,
            responses_only: self.responses_only,
        }
    }

    /// A handler matched by its whole name, sharing the query budget.
    pub fn exact(key: K, name: &str) -> Handler<K> {
        Handler {
            key,
            name: name.to_string(),
            matching: Match::Exact,
            admission: Admission::Shared,
            groups: Groups::All,
            admit_unsolicited: false,
            responses_only: false,
        }
    }

    /// A handler matched by a name prefix, sharing the query budget.
    pub fn prefix(key: K, name: &str) -> Handler<K> {
        Handler {
            matching: Match::Prefix,
            ..Handler::exact(key, name)
        }
    }

    /// Its queries pass its own flow control instead of the shared budget.
    pub fn own_admission(mut self) -> Handler<K> {
        self.admission = Admission::Own;
        self
    }

    /// Served only in joined groups.
    pub fn joined_only(mut self) -> Handler<K> {
        self.groups = Groups::JoinedOnly;
        self
    }

    /// Unsolicited responses are charged like queries.
    pub fn admit_unsolicited(mut self) -> Handler<K> {
        self.admit_unsolicited = true;
        self
    }

    /// It takes responses only.
    pub fn responses_only(mut self) -> Handler<K> {
        self.responses_only = true;
        self
    }

    fn matches(&self, name: &str) -> bool {
        match self.matching {
            Match::Exact => name == self.name,
            Match::Prefix => name.starts_with(&self.name),
        }
    }
}

/// Settings of the resolver.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolverConfig {
    /// The unique value of the peer's own (Net) group: its queues are
    /// open to all, and a message addressed in it is not addressed in a
    /// group.
    pub net: String,
    /// Other groups open to all (no membership needed).
    pub open: Vec<String>,
    /// Queries per second one querier may have answered, sustained
    /// ([`Admission::Shared`]).
    pub query_rate: f64,
    /// Queries one querier may send in a burst.
    pub query_burst: u32,
    /// Most queriers tracked by the token buckets (a new querier beyond
    /// them is refused until buckets refill).
    pub max_tracked_peers: usize,
    /// Most joined groups.
    pub max_groups: usize,
}

impl ResolverConfig {
    /// Defaults for a peer whose Net group has unique value `net`: 200
    /// queries/s per querier, burst 100, 4,096 queriers tracked.
    pub fn new(net: &str) -> ResolverConfig {
        ResolverConfig {
            net: net.to_string(),
            open: Vec::new(),
            query_rate: 200.0,
            query_burst: 100,
            max_tracked_peers: 4_096,
            max_groups: MAX_GROUPS,
        }
    }
}

/// Which way a resolver message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A query (`<group>ORes`).
    Query,
    /// A response or busy notice (`<group>IRes`).
    Response,
}

/// A message accepted by [`ResolverNode::accept`]: its group and
/// direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scoped {
    /// The group's unique value (the queue's).
    pub group: String,
    /// Query or response.
    pub direction: Direction,
    /// Whether the group is open to all (the Net group, or one of
    /// [`ResolverConfig::open`]); otherwise it is a joined group.
    pub open: bool,
}

impl Scoped {
    /// The queue the message arrived on.
    pub fn queue(&self) -> String {
        match self.direction {
            Direction::Query => super::query_queue(&self.group),
            Direction::Response => super::response_queue(&self.group),
        }
    }
}

/// Why a resolver message (or an answer) was refused. Each is counted in
/// [`ResolverStats`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a resolver query or response queue.
    #[error("not a resolver query or response queue: {0:?}")]
    Unroutable(Option<String>),
    /// For a group this peer has not joined (or addressed in another).
    #[error("resolver message for group {0} we are not in")]
    NotMember(String),
    /// The query or response document is malformed.
    #[error(transparent)]
    Malformed(#[from] ResolverError),
    /// No handler registered under that name (in that group).
    #[error("no resolver handler {0:?}")]
    NoHandler(String),
    /// The querier is over its budget, or the table of queriers is full.
    #[error("queries of {0} throttled")]
    Throttled(PeerId),
    /// An unsolicited response without a known sender.
    #[error("unsolicited response without a sender")]
    Anonymous,
    /// No link to the querier, and its query came from the querier itself
    /// (so no route of its own to dial either).
    #[error("no link to {0} for the answer")]
    NoRoute(PeerId),
    /// An answer dial to a querier refused by the dial bounds.
    #[error("answer dial to {0} throttled")]
    DialThrottled(PeerId),
}

/// Errors of the resolver's commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolverNodeError {
    /// [`MAX_HANDLERS`] handlers are registered.
    #[error("too many resolver handlers")]
    TooManyHandlers,
    /// A handler of that name (and match) is registered already.
    #[error("resolver handler {0:?} registered twice")]
    Duplicate(String),
    /// [`ResolverConfig::max_groups`] groups are joined.
    #[error("too many groups")]
    TooManyGroups,
}

/// Counters of the resolver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResolverStats {
    /// Queries routed to a handler.
    pub queries: u64,
    /// Responses routed to a handler (busy notices included).
    pub responses: u64,
    /// Messages on a queue that is not the resolver's.
    pub unroutable: u64,
    /// Messages for a group not joined.
    pub group_refused: u64,
    /// Documents that did not parse.
    pub malformed: u64,
    /// Messages for a handler not registered.
    pub no_handler: u64,
    /// Queries (and unsolicited responses) over their sender's budget.
    pub throttled: u64,
    /// Unsolicited responses without a sender.
    pub anonymous: u64,
    /// Answers with no way to the querier.
    pub no_route: u64,
    /// Answer dials refused by the dial bounds.
    pub dials_throttled: u64,
    /// Events dropped because the owner did not drain them.
    pub dropped: u64,
}

/// What the owner acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolverEvent<K> {
    /// An admitted query for the handler `key`.
    Query {
        /// The handler.
        key: K,
        /// The group (unique value).
        group: String,
        /// Whether the group is open (see [`Scoped::open`]).
        open: bool,
        /// The peer it came from (the link's, or the router's origin).
        from: Option<PeerId>,
        /// The query.
        query: Box<ResolverQuery>,
        /// The message it came in.
        message: Message,
    },
    /// A response for the handler `key`.
    Response {
        /// The handler.
        key: K,
        /// The group.
        group: String,
        /// Whether the group is open.
        open: bool,
        /// The peer it came from.
        from: Option<PeerId>,
        /// The response.
        response: ResolverResponse,
    },
    /// A busy notice (`Juxta.Busy`): a query was refused by a
    /// rendezvous' admission control and should be asked again later.
    Busy {
        /// The group.
        group: String,
        /// Whether the group is open.
        open: bool,
        /// The peer it came from.
        from: Option<PeerId>,
        /// The notice.
        notice: BusyNotice,
    },
}

/// How an answer reaches its querier ([`ResolverNode::answer_path`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerPath {
    /// Over the link to the querier.
    Direct(PeerId),
    /// Over a new link: dial these addresses of the querier's route in
    /// order (possibly none), else find a route to it. The dial counts as
    /// in progress until [`ResolverNode::dial_finished`].
    Dial {
        /// The querier.
        to: PeerId,
        /// The TCP addresses its query's route named.
        addrs: Vec<SocketAddr>,
    },
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Millis,
}

/// The bounds of answer dials: one at a time per querier,
/// [`MAX_ANSWER_DIALS`] at once, [`ANSWER_DIAL_RATE`] new ones per
/// second (burst [`ANSWER_DIAL_BURST`]).
#[derive(Debug, Clone)]
struct AnswerDials {
    in_flight: HashSet<PeerId>,
    tokens: f64,
    at: Option<Millis>,
}

impl AnswerDials {
    fn new() -> AnswerDials {
        AnswerDials {
            in_flight: HashSet::new(),
            tokens: ANSWER_DIAL_BURST,
            at: None,
        }
    }

    fn try_start(&mut self, to: PeerId, now: Millis) -> bool {
        if let Some(at) = self.at {
            let refill = now.saturating_sub(at) as f64 / 1000.0 * ANSWER_DIAL_RATE;
            self.tokens = (self.tokens + refill).min(ANSWER_DIAL_BURST);
        }
        self.at = Some(self.at.map_or(now, |a| a.max(now)));
        if self.in_flight.len() >= MAX_ANSWER_DIALS
            || self.tokens < 1.0
            || self.in_flight.contains(&to)
        {
            return false;
        }
        self.tokens -= 1.0;
        self.in_flight.insert(to);
        true
    }
}

/// The resolver of one peer: scoping, handler registry, admission and
/// answer routing (see the module documentation).
#[derive(Debug)]
pub struct ResolverNode<K> {
    cfg: ResolverConfig,
    handlers: Vec<Handler<K>>,
    joined: BTreeSet<String>,
    buckets: PeerMap<Bucket>,
    dials: AnswerDials,
    events: VecDeque<ResolverEvent<K>>,
    stats: ResolverStats,
}

impl<K: Clone> ResolverNode<K> {
    /// A resolver with no handler and no joined group.
    pub fn new(cfg: ResolverConfig) -> ResolverNode<K> {
        ResolverNode {
            cfg,
            handlers: Vec::new(),
            joined: BTreeSet::new(),
            buckets: PeerMap::default(),
            dials: AnswerDials::new(),
            events: VecDeque::new(),
            stats: ResolverStats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ResolverConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> ResolverStats {
        self.stats
    }

    /// Registers a handler. The first registered handler that matches a
    /// name gets its messages.
    pub fn register(&mut self, h: Handler<K>) -> Result<(), ResolverNodeError> {
        if self
            .handlers
            .iter()
            .any(|x| x.name == h.name && x.matching == h.matching)
        {
            return Err(ResolverNodeError::Duplicate(h.name));
        }
        if self.handlers.len() >= MAX_HANDLERS {
            return Err(ResolverNodeError::TooManyHandlers);
        }
        self.handlers.push(h);
        Ok(())
    }

    /// This peer joined the group `unique` (its traffic is served from now).
    pub fn join(&mut self, unique: &str) -> Result<(), ResolverNodeError> {
        if !self.joined.contains(unique) && self.joined.len() >= self.cfg.max_groups {
            return Err(ResolverNodeError::TooManyGroups);
        }
        self.joined.insert(unique.to_string());
        Ok(())
    }

    /// This peer left the group `unique`.
    pub fn leave(&mut self, unique: &str) {
        self.joined.remove(unique);
    }

    /// Whether traffic of group `unique` is served here.
    pub fn serves(&self, unique: &str) -> bool {
        self.is_open(unique) || self.joined.contains(unique)
    }

    fn is_open(&self, unique: &str) -> bool {
        unique == self.cfg.net || self.cfg.open.iter().any(|o| o == unique)
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ResolverEvent<K>> {
        self.events.pop_front()
    }

    fn push(&mut self, e: ResolverEvent<K>) {
        if self.events.len() >= MAX_QUEUED {
            self.stats.dropped = self.stats.dropped.saturating_add(1);
        } else {
            self.events.push_back(e);
        }
    }

    fn refuse<T>(&mut self, r: Refusal) -> Result<T, Refusal> {
        let s = &mut self.stats;
        let c = match &r {
            Refusal::Unroutable(_) => &mut s.unroutable,
            Refusal::NotMember(_) => &mut s.group_refused,
            Refusal::Malformed(_) => &mut s.malformed,
            Refusal::NoHandler(_) => &mut s.no_handler,
            Refusal::Throttled(_) => &mut s.throttled,
            Refusal::Anonymous => &mut s.anonymous,
            Refusal::NoRoute(_) => &mut s.no_route,
            Refusal::DialThrottled(_) => &mut s.dials_throttled,
        };
        *c = c.saturating_add(1);
        Err(r)
    }

    /// Step one: scopes a message that arrived on the resolver service
    /// with queue `param`, addressed (by its mangled address) in group
    /// `addressed` (`None`: not mangled). Refused: a queue that is not a
    /// resolver query or response queue, a group not joined, or a message
    /// addressed in one group for another group's queue.
    pub fn accept(
        &mut self,
        param: Option<&str>,
        addressed: Option<&str>,
    ) -> Result<Scoped, Refusal> {
        let Some((direction, g)) = classify(param) else {
            return self.refuse(Refusal::Unroutable(param.map(|p| truncate(p, 128))));
        };
        let addressed = addressed.filter(|a| *a != self.cfg.net);
        let ok = if g == self.cfg.net {
            addressed.is_none()
        } else if addressed.is_some_and(|a| a != g) {
            false
        } else {
            self.serves(g)
        };
        if !ok {
            return self.refuse(Refusal::NotMember(truncate(g, 128)));
        }
        Ok(Scoped {
            open: self.is_open(g),
            group: g.to_string(),
            direction,
        })
    }

    fn handler(&self, name: &str, open: bool) -> Option<&Handler<K>> {
        self.handlers
            .iter()
            .find(|h| h.matches(name))
            .filter(|h| !(open && h.groups == Groups::JoinedOnly))
    }

    /// Step two for a query: parses it, finds its handler, applies its
    /// admission control and hands it to the owner
    /// ([`ResolverEvent::Query`]). `from` is the peer it came from;
    /// `forwarder` whether that peer is one of the group's forwarders
    /// (whose forwarded queries are charged to the querier they name).
    pub fn handle_query(
        &mut self,
        s: &Scoped,
        from: Option<PeerId>,
        forwarder: bool,
        message: Message,
        now: Millis,
    ) -> Result<(), Refusal> {
        let q = match ResolverQuery::from_message(&message, &s.group) {
            Ok(q) => q,
            Err(e) => return self.refuse(e.into()),
        };
        let Some(h) = self
            .handler(&q.handler, s.open)
            .filter(|h| !h.responses_only)
        else {
            return self.refuse(Refusal::NoHandler(truncate(&q.handler, 128)));
        };
        let (key, admission) = (h.key.clone(), h.admission);
        if admission == Admission::Shared {
            // A query forwarded by a rendezvous of our peer view (or by
            // the rendezvous this edge leases) was admitted there under
            // its querier's budget: it is charged to the querier it
            // names. Charged to the forwarder, everything one rendezvous
            // forwards would share one peer's rate.
            let who = match from {
                Some(f) if forwarder && f != q.src_peer => q.src_peer,
                f => f.unwrap_or(q.src_peer),
            };
            if !self.allow(who, now) {
                return self.refuse(Refusal::Throttled(who));
            }
        }
        self.stats.queries = self.stats.queries.saturating_add(1);
        self.push(ResolverEvent::Query {
            key,
            group: s.group.clone(),
            open: s.open,
            from,
            query: Box::new(q),
            message,
        });
        Ok(())
    }

    /// Step two for a response: a busy notice
    /// ([`ResolverEvent::Busy`]) or a response for a registered handler
    /// ([`ResolverEvent::Response`]); an unsolicited one (query ID 0) for
    /// a handler that admits them is charged to its sender's budget.
    pub fn handle_response(
        &mut self,
        s: &Scoped,
        from: Option<PeerId>,
        message: &Message,
        now: Millis,
    ) -> Result<(), Refusal> {
        if let Ok(Some(notice)) = BusyNotice::from_message(message) {
            self.stats.responses = self.stats.responses.saturating_add(1);
            self.push(ResolverEvent::Busy {
                group: s.group.clone(),
                open: s.open,
                from,
                notice,
            });
            return Ok(());
        }
        let r = match ResolverResponse::from_message(message, &s.group) {
            Ok(r) => r,
            Err(e) => return self.refuse(e.into()),
        };
        let Some(h) = self.handler(&r.handler, s.open) else {
            return self.refuse(Refusal::NoHandler(truncate(&r.handler, 128)));
        };
        let (key, unsolicited) = (h.key.clone(), h.admit_unsolicited);
        if unsolicited && r.query_id == 0 {
            let Some(f) = from else {
                return self.refuse(Refusal::Anonymous);
            };
            if !self.allow(f, now) {
                return self.refuse(Refusal::Throttled(f));
            }
        }
        self.stats.responses = self.stats.responses.saturating_add(1);
        self.push(ResolverEvent::Response {
            key,
            group: s.group.clone(),
            open: s.open,
            from,
            response: r,
        });
        Ok(())
    }

    /// The shared per-querier token bucket: whether `peer` may have one
    /// more query answered at `now` (the table of queriers is bounded:
    /// buckets that have refilled are forgotten to make room, else a new
    /// querier is refused).
    pub fn allow(&mut self, peer: PeerId, now: Millis) -> bool {
        let rate = self.cfg.query_rate.max(0.0);
        let burst = f64::from(self.cfg.query_burst.max(1));
        let refill = |k: &Bucket| now.saturating_sub(k.at) as f64 / 1000.0 * rate;
        if !self.buckets.contains_key(&peer) && self.buckets.len() >= self.cfg.max_tracked_peers {
            self.buckets.retain(|_, k| k.tokens + refill(k) < burst);
            if self.buckets.len() >= self.cfg.max_tracked_peers {
                return false;
            }
        }
        let k = self.buckets.entry(peer).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        k.tokens = (k.tokens + refill(k)).min(burst);
        k.at = k.at.max(now);
        if k.tokens >= 1.0 {
            k.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Queriers tracked by the token buckets.
    pub fn tracked_peers(&self) -> usize {
        self.buckets.len()
    }

    /// How an answer to `q` goes back: over the link to its querier when
    /// `linked`; else over a new link to the addresses its query's route
    /// named (then [`ResolverNode::dial_finished`] when done), unless the
    /// dial bounds refuse it ([`Refusal::DialThrottled`]). Never through
    /// `via`, the peer the query came from, unless that is the querier
    /// (then, with no link to it, [`Refusal::NoRoute`]).
    pub fn answer_path(
        &mut self,
        q: &ResolverQuery,
        via: Option<PeerId>,
        linked: bool,
        now: Millis,
    ) -> Result<AnswerPath, Refusal> {
        let to = q.src_peer;
        if linked {
            return Ok(AnswerPath::Direct(to));
        }
        if via == Some(to) {
            return self.refuse(Refusal::NoRoute(to));
        }
        if !self.dials.try_start(to, now) {
            return self.refuse(Refusal::DialThrottled(to));
        }
        let addrs = q
            .src_route
            .iter()
            .filter(|r| r.dest_peer == Some(to))
            .flat_map(|r| r.dest.addresses.iter())
            .filter_map(|ea| ea.strip_prefix("tcp://")?.parse().ok())
            .filter(|a: &SocketAddr| !a.ip().is_unspecified() && a.port() != 0)
            .take(MAX_ANSWER_ADDRS)
            .collect();
        Ok(AnswerPath::Dial { to, addrs })
    }

    /// An answer dial to `to` ended (delivered or not).
    pub fn dial_finished(&mut self, to: &PeerId) {
        self.dials.in_flight.remove(to);
    }

    /// Answer dials in progress.
    pub fn dials_in_flight(&self) -> usize {
        self.dials.in_flight.len()
    }
}

/// The direction and group unique value of a resolver queue name.
pub fn classify(param: Option<&str>) -> Option<(Direction, &str)> {
    let p = param?;
    if let Some(g) = p.strip_suffix("ORes") {
        Some((Direction::Query, g))
    } else {
        p.strip_suffix("IRes").map(|g| (Direction::Response, g))
    }
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests;
