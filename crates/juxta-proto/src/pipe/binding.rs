//! The Pipe Binding Protocol (PBP): resolver handler `JxtaPipeResolver`
//! (digest §6.3, §6.4).
//!
//! - [`PipeResolverMsg`]: the `jxta:PipeResolver` query and answer
//!   documents, carried as the escaped `Query`/`Response` text of a
//!   resolver message ([`crate::resolver`]).
//! - [`answer_query`]: the responder, after JXSE's
//!   `PipeResolver.processQuery` for an edge peer.
//! - [`Binder`]: the sans-IO state machine that resolves output pipes: it
//!   hands out queries to send, matches answers by query ID and pipe ID,
//!   re-sends on a timer and gives up at a deadline. Time is passed in
//!   ([`Millis`]); every output, queries and outcomes, comes from
//!   [`Binder::poll_event`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use crate::advertisement::AdvError;
use crate::advertisement::{
    parse_xml, truncate, PeerAdvertisement, PipeType, PrettyDoc, UnknownPipeType, XmlError,
};
use crate::id::{IdError, PeerId, PipeId};
use crate::resolver::ResolverQuery;
use crate::time::{later, Millis};

/// The resolver handler name of the pipe binding protocol.
pub const PIPE_RESOLVER_HANDLER: &str = "JxtaPipeResolver";
/// Root element of a pipe resolver message.
pub const PIPE_RESOLVER_ROOT: &str = "jxta:PipeResolver";
/// Most distinct `Peer` entries accepted in one message (and candidate
/// peers in one bind).
pub const MAX_PEERS: usize = 256;
/// Default interval between re-sends of an unanswered binding query.
pub const DEFAULT_RETRY: Duration = Duration::from_millis(500);
/// Shortest re-send interval a [`Binder`] accepts (guards against spinning).
pub const MIN_RETRY: Duration = Duration::from_millis(10);

/// Errors from a pipe resolver document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// The document is too large, malformed or has the wrong root.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// A required child is missing.
    #[error("pipe resolver message without <{0}>")]
    Missing(&'static str),
    /// `MsgType` is neither `Query` nor `Answer`.
    #[error("unknown pipe resolver message type {0:?}")]
    BadMsgType(String),
    /// A pipe or peer ID is malformed.
    #[error("bad ID in <{field}>: {source}")]
    BadId {
        /// The element.
        field: &'static str,
        /// Why it did not parse.
        source: IdError,
    },
    /// The pipe type is unknown.
    #[error(transparent)]
    PipeType(#[from] UnknownPipeType),
    /// More than [`MAX_PEERS`] distinct peers.
    #[error("pipe resolver message lists more than {MAX_PEERS} peers")]
    TooManyPeers,
    /// An answer names no peer (JXSE rejects those).
    #[error("pipe resolver answer without a peer")]
    AnswerWithoutPeer,
}

/// A pipe binding query or answer (`jxta:PipeResolver`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipeResolverMsg {
    /// "Who hosts the input pipe `pipe_id`?"
    Query {
        /// The pipe being resolved.
        pipe_id: PipeId,
        /// Its type; a responder only matches an input pipe of the same type.
        pipe_type: PipeType,
        /// The peers asked; empty means everyone.
        peers: Vec<PeerId>,
    },
    /// The answer of one peer.
    Answer {
        /// The pipe, as in the query.
        pipe_id: PipeId,
        /// The type, as in the query.
        pipe_type: PipeType,
        /// The peer(s) the answer is about (at least one).
        peers: Vec<PeerId>,
        /// Whether those peers host the input pipe.
        found: bool,
        /// The hosting peer's `jxta:PA` document, unescaped, if sent.
        peer_adv: Option<String>,
    },
}

fn peer_id(text: &str, field: &'static str) -> Result<PeerId, BindingError> {
    text.parse()
        .map_err(|source| BindingError::BadId { field, source })
}

impl PipeResolverMsg {
    /// A query's pipe and type (`None` for an answer).
    pub fn queried_pipe(&self) -> Option<(PipeId, PipeType)> {
        match self {
            PipeResolverMsg::Query {
                pipe_id, pipe_type, ..
            } => Some((*pipe_id, *pipe_type)),
            PipeResolverMsg::Answer { .. } => None,
        }
    }

    /// The SRDI key under which a rendezvous finds a query's pipe
    /// (`<pipe type>`, `Id`, pipe ID): a rendezvous that does not hold the
    /// pipe forwards the query to the peer its index names.
    pub fn srdi_key(&self) -> Option<(String, String, String)> {
        self.queried_pipe()
            .map(|(id, ty)| (ty.as_str().to_string(), "Id".to_string(), id.to_string()))
    }

    /// Whether this is a query naming `me` among the peers asked.
    pub fn is_directed_to(&self, me: &PeerId) -> bool {
        matches!(self, PipeResolverMsg::Query { peers, .. } if peers.contains(me))
    }

    /// The pipe the message is about.
    pub fn pipe_id(&self) -> &PipeId {
        match self {
            PipeResolverMsg::Query { pipe_id, .. } | PipeResolverMsg::Answer { pipe_id, .. } => {
                pipe_id
            }
        }
    }

    /// The pipe type.
    pub fn pipe_type(&self) -> PipeType {
        match self {
            PipeResolverMsg::Query { pipe_type, .. }
            | PipeResolverMsg::Answer { pipe_type, .. } => *pipe_type,
        }
    }

    /// The `Peer` entries.
    pub fn peers(&self) -> &[PeerId] {
        match self {
            PipeResolverMsg::Query { peers, .. } | PipeResolverMsg::Answer { peers, .. } => peers,
        }
    }

    /// Attaches a peer advertisement document to an answer (no effect on
    /// a query). JXSE attaches its own PA to positive answers.
    pub fn with_peer_adv(mut self, xml: String) -> PipeResolverMsg {
        if let PipeResolverMsg::Answer { peer_adv, .. } = &mut self {
            *peer_adv = Some(xml);
        }
        self
    }

    /// Parses the `PeerAdv` of an answer, if there is one.
    pub fn peer_advertisement(&self) -> Option<Result<PeerAdvertisement, AdvError>> {
        match self {
            PipeResolverMsg::Answer {
                peer_adv: Some(xml),
                ..
            } => Some(PeerAdvertisement::parse(xml)),
            _ => None,
        }
    }

    /// The document in JXSE's pretty-printed style: `MsgType`, `PipeId`,
    /// `Type`, `Peer`*, and for answers `Found` and the optional `PeerAdv`.
    pub fn to_xml(&self) -> String {
        let mut d = PrettyDoc::new(PIPE_RESOLVER_ROOT);
        let kind = match self {
            PipeResolverMsg::Query { .. } => "Query",
            PipeResolverMsg::Answer { .. } => "Answer",
        };
        d.field("MsgType", kind)
            .field("PipeId", &self.pipe_id().to_string())
            .field("Type", self.pipe_type().as_str());
        for p in self.peers() {
            d.field("Peer", &p.to_string());
        }
        if let PipeResolverMsg::Answer {
            found, peer_adv, ..
        } = self
        {
            d.field("Found", if *found { "true" } else { "false" });
            if let Some(pa) = peer_adv {
                d.field("PeerAdv", pa);
            }
        }
        d.finish()
    }

    /// Parses a query or answer. `MsgType`, `PipeId` and `Type` are
    /// required, an answer needs at least one `Peer`; duplicate peers are
    /// dropped (JXSE keeps a set). `Found` reads as JXSE's
    /// `Boolean.valueOf` (only `true`, any case, is true).
    pub fn parse(xml: &str) -> Result<PipeResolverMsg, BindingError> {
        let root = parse_xml(xml)?.expect_root(PIPE_RESOLVER_ROOT)?;
        let is_query = match root
            .child_value("MsgType")
            .ok_or(BindingError::Missing("MsgType"))?
        {
            "Query" => true,
            "Answer" => false,
            other => return Err(BindingError::BadMsgType(truncate(other))),
        };
        let pipe_id: PipeId = root
            .child_value("PipeId")
            .ok_or(BindingError::Missing("PipeId"))?
            .parse()
            .map_err(|source| BindingError::BadId {
                field: "PipeId",
                source,
            })?;
        let pipe_type: PipeType = root
            .child_value("Type")
            .ok_or(BindingError::Missing("Type"))?
            .parse()?;
        let mut peers: Vec<PeerId> = Vec::new();
        for p in root.children_named("Peer") {
            let id = peer_id(p.value(), "Peer")?;
            if !peers.contains(&id) {
                if peers.len() >= MAX_PEERS {
                    return Err(BindingError::TooManyPeers);
                }
                peers.push(id);
            }
        }
        if is_query {
            return Ok(PipeResolverMsg::Query {
                pipe_id,
                pipe_type,
                peers,
            });
        }
        if peers.is_empty() {
            return Err(BindingError::AnswerWithoutPeer);
        }
        let found = root
            .child_value("Found")
            .is_some_and(|f| f.eq_ignore_ascii_case("true"));
        let peer_adv = root
            .child_value("PeerAdv")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        Ok(PipeResolverMsg::Answer {
            pipe_id,
            pipe_type,
            peers,
            found,
            peer_adv,
        })
    }
}

/// Answers a binding query the way JXSE's `PipeResolver.processQuery` does
/// on an edge peer. Returns `None` when no answer should be sent.
///
/// - Not a query, or a query whose `Peer` list names only other peers: no
///   answer.
/// - `has_local(pipe, type)` is true (an input pipe with that ID **and**
///   type is open here): `Found=true` naming `me`.
/// - Otherwise `Found=false` naming `me`, but only if the query's `Peer`
///   list names `me` or `directed_at_me` is set (the caller knows the
///   resolver query was addressed to this peer); an undirected query we
///   cannot satisfy is not answered.
///
/// The answer carries no `PeerAdv`; add one with
/// [`PipeResolverMsg::with_peer_adv`]. Send it, as a resolver response with
/// the query's `QueryID`, to the query's `SrcPeerID`.
pub fn answer_query(
    me: &PeerId,
    query: &PipeResolverMsg,
    directed_at_me: bool,
    has_local: impl Fn(&PipeId, PipeType) -> bool,
) -> Option<PipeResolverMsg> {
    let PipeResolverMsg::Query {
        pipe_id,
        pipe_type,
        peers,
    } = query
    else {
        return None;
    };
    let named = peers.contains(me);
    if !peers.is_empty() && !named {
        return None;
    }
    let found = has_local(pipe_id, *pipe_type);
    if !found && !named && !directed_at_me {
        return None;
    }
    Some(PipeResolverMsg::Answer {
        pipe_id: *pipe_id,
        pipe_type: *pipe_type,
        peers: vec![*me],
        found,
        peer_adv: None,
    })
}

// ---------------------------------------------------------------------------
// Output-pipe resolution.
// ---------------------------------------------------------------------------

/// Identifies one resolution in a [`Binder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BindId(u64);

impl BindId {
    /// The raw value (unique within one binder).
    pub fn get(self) -> u64 {
        self.0
    }
}

/// A binding query to send: wrap [`OutgoingQuery::msg`] in a resolver query
/// with [`OutgoingQuery::query_id`] (see [`OutgoingQuery::resolver_query`])
/// and send it to each of [`OutgoingQuery::peers`]. An empty peer list
/// means an undirected query (to the rendezvous or every neighbour).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingQuery {
    /// The resolution this query belongs to.
    pub bind: BindId,
    /// The resolver `QueryID` (the same for every re-send of one bind).
    pub query_id: i32,
    /// The `jxta:PipeResolver` query document.
    pub msg: PipeResolverMsg,
    /// The peers to send it to.
    pub peers: Vec<PeerId>,
}

impl OutgoingQuery {
    /// The resolver query to send, from `src_peer` (this peer), hop count 0.
    pub fn resolver_query(&self, src_peer: PeerId) -> ResolverQuery {
        ResolverQuery {
            handler: PIPE_RESOLVER_HANDLER.to_string(),
            query_id: self.query_id,
            hop_count: 0,
            src_peer,
            query: self.msg.to_xml(),
            src_route: None,
        }
    }
}

/// What a [`Binder`] asks its owner to do ([`Binder::poll_event`]): send a
/// query, or learn how a resolution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindEvent {
    /// Send this query (the first one of a resolution, and each re-send).
    Query(OutgoingQuery),
    /// A peer answered `Found=true`: send pipe messages to it.
    Bound {
        /// The resolution.
        bind: BindId,
        /// The peer hosting the input pipe.
        peer: PeerId,
    },
    /// Every candidate peer answered `Found=false`.
    NotFound {
        /// The resolution.
        bind: BindId,
    },
    /// No positive answer before the deadline.
    TimedOut {
        /// The resolution.
        bind: BindId,
    },
}

impl BindEvent {
    /// The resolution the event is about.
    pub fn bind(&self) -> BindId {
        match self {
            BindEvent::Query(q) => q.bind,
            BindEvent::Bound { bind, .. }
            | BindEvent::NotFound { bind }
            | BindEvent::TimedOut { bind } => *bind,
        }
    }
}

/// Errors from [`Binder::start`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinderError {
    /// The binder already tracks its maximum number of resolutions.
    #[error("too many pipe resolutions in progress (limit {0})")]
    Full(usize),
    /// More candidate peers than [`MAX_PEERS`].
    #[error("{0} candidate peers (limit {MAX_PEERS})")]
    TooManyCandidates(usize),
}

#[derive(Debug)]
struct Pending {
    query_id: i32,
    pipe_id: PipeId,
    pipe_type: PipeType,
    candidates: Vec<PeerId>,
    nacked: Vec<PeerId>,
    /// Whether a "found" answer from a peer not asked is taken (the query
    /// went through a rendezvous, which forwards it to the holder).
    accept_any: bool,
    deadline: Millis,
    next_retry: Millis,
}

impl Pending {
    fn remaining(&self) -> Vec<PeerId> {
        self.candidates
            .iter()
            .filter(|p| !self.nacked.contains(p))
            .copied()
            .collect()
    }
}

/// The sans-IO output-pipe resolver.
///
/// ```
/// use std::time::Duration;
/// use juxta_proto::advertisement::PipeType;
/// use juxta_proto::pipe::binding::{answer_query, BindEvent, Binder};
/// let pipe = "urn:jxta:cbid-59616261646162614E504720503250331122334455667788112233445566778804".parse().unwrap();
/// let host = "urn:jxta:cbid-59616261646162614A787461503250331122334455667788112233445566778803".parse().unwrap();
/// let mut b = Binder::new(1, 16);
/// let now = 0; // ms on the owner's clock
/// let bind = b.start(now, pipe, PipeType::Unicast, vec![host], Duration::from_secs(15)).unwrap();
/// let Some(BindEvent::Query(q)) = b.poll_event() else { unreachable!() };
/// // ... q.msg travels to `host`, which answers:
/// let answer = answer_query(&host, &q.msg, false, |_, _| true).unwrap();
/// b.handle_answer(now + 3, q.query_id, answer, host);
/// assert_eq!(b.poll_event(), Some(BindEvent::Bound { bind, peer: host }));
/// assert_eq!(b.poll_timeout(), None);
/// ```
#[derive(Debug)]
pub struct Binder {
    next_query_id: crate::resolver::QueryIds,
    next_bind: u64,
    max_binds: usize,
    retry: Duration,
    pending: BTreeMap<BindId, Pending>,
    by_query: HashMap<i32, BindId>,
    events: VecDeque<BindEvent>,
    dropped: u64,
}

impl Binder {
    /// A binder whose query IDs count up from `first_query_id` (values
    /// below 1 start at 1; the runtime seeds it randomly), tracking at most
    /// `max_binds` resolutions, re-sending every [`DEFAULT_RETRY`].
    pub fn new(first_query_id: i32, max_binds: usize) -> Binder {
        Binder {
            next_query_id: crate::resolver::QueryIds::new(first_query_id),
            next_bind: 0,
            max_binds,
            retry: DEFAULT_RETRY,
            pending: BTreeMap::new(),
            by_query: HashMap::new(),
            events: VecDeque::new(),
            dropped: 0,
        }
    }

    /// Most events held for the owner: a query and an outcome per
    /// resolution, and some slack (past it the oldest is dropped and
    /// counted in [`Binder::dropped`]; an owner that polls after every
    /// input never gets there).
    fn max_events(&self) -> usize {
        self.max_binds.saturating_mul(2).saturating_add(16)
    }

    fn push(&mut self, e: BindEvent) {
        if self.events.len() >= self.max_events() {
            self.events.pop_front();
            self.dropped = self.dropped.saturating_add(1);
        }
        self.events.push_back(e);
    }

    /// The next thing to do, oldest first: a query to send, or how a
    /// resolution ended.
    pub fn poll_event(&mut self) -> Option<BindEvent> {
        self.events.pop_front()
    }

    /// Events dropped because the owner did not poll them.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Sets the re-send interval (at least [`MIN_RETRY`]).
    pub fn with_retry(mut self, retry: Duration) -> Binder {
        self.retry = retry.max(MIN_RETRY);
        self
    }

    /// The re-send interval.
    pub fn retry(&self) -> Duration {
        self.retry
    }

    /// Resolutions in progress.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no resolution is in progress.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Like JXSE's `getNextQueryID`: positive, wraps to 1 before
    /// `i32::MAX`, and skips IDs still in use.
    fn alloc_query_id(&mut self) -> i32 {
        let by_query = &self.by_query;
        self.next_query_id.next(|id| by_query.contains_key(&id))
    }

    /// Starts resolving `pipe_id`: returns the bind; its first query to
    /// send is the next [`BindEvent::Query`]. With no candidates the query
    /// is undirected and the bind can only end bound or timed out.
    /// Duplicate candidates are dropped.
    pub fn start(
        &mut self,
        now: Millis,
        pipe_id: PipeId,
        pipe_type: PipeType,
        candidates: Vec<PeerId>,
        timeout: Duration,
    ) -> Result<BindId, BinderError> {
        if self.pending.len() >= self.max_binds {
            return Err(BinderError::Full(self.max_binds));
        }
        let mut unique: Vec<PeerId> = Vec::with_capacity(candidates.len().min(MAX_PEERS));
        for c in candidates {
            if !unique.contains(&c) {
                if unique.len() >= MAX_PEERS {
                    return Err(BinderError::TooManyCandidates(unique.len() + 1));
                }
                unique.push(c);
            }
        }
        let query_id = self.alloc_query_id();
        let bind = BindId(self.next_bind);
        self.next_bind += 1;
        let deadline = later(now, timeout);
        let query = OutgoingQuery {
            bind,
            query_id,
            msg: PipeResolverMsg::Query {
                pipe_id,
                pipe_type,
                peers: unique.clone(),
            },
            peers: unique.clone(),
        };
        self.pending.insert(
            bind,
            Pending {
                query_id,
                pipe_id,
                pipe_type,
                candidates: unique,
                nacked: Vec::new(),
                accept_any: false,
                deadline,
                next_retry: later(now, self.retry),
            },
        );
        self.by_query.insert(query_id, bind);
        self.push(BindEvent::Query(query));
        Ok(bind)
    }

    fn finish(&mut self, bind: BindId) -> Option<Pending> {
        let p = self.pending.remove(&bind)?;
        self.by_query.remove(&p.query_id);
        Some(p)
    }

    /// Feeds a binding answer that came back for resolver query `query_id`
    /// from peer `from`. Answers for unknown query IDs, for another pipe, or
    /// (for a directed bind) about peers that were not asked are ignored.
    /// `Found=true` binds to the first acceptable peer of the answer;
    /// `Found=false` rules out the answer's peers and `from`, and once every
    /// candidate has been ruled out the bind ends with
    /// [`BindEvent::NotFound`]. Answers are accepted until
    /// [`Binder::handle_timeout`] has reported the deadline. Returns
    /// whether the answer ended a resolution (its outcome is the next
    /// event).
    pub fn handle_answer(
        &mut self,
        now: Millis,
        query_id: i32,
        answer: PipeResolverMsg,
        from: PeerId,
    ) -> bool {
        let _ = now;
        match self.answer(query_id, answer, from) {
            Some(e) => {
                self.push(e);
                true
            }
            None => false,
        }
    }

    fn answer(
        &mut self,
        query_id: i32,
        answer: PipeResolverMsg,
        from: PeerId,
    ) -> Option<BindEvent> {
        let bind = *self.by_query.get(&query_id)?;
        let p = self.pending.get_mut(&bind)?;
        let PipeResolverMsg::Answer {
            pipe_id,
            peers,
            found,
            ..
        } = answer
        else {
            return None;
        };
        if pipe_id != p.pipe_id {
            return None;
        }
        let acceptable =
            |peer: &PeerId| p.candidates.is_empty() || p.accept_any || p.candidates.contains(peer);
        if found {
            // A peer answers `Found` only for itself: an answer naming
            // another holder than its sender is a forgery (it would send
            // our pipe traffic, or a secure pipe's TLS session, elsewhere).
            let peer = peers
                .iter()
                .copied()
                .find(|q| *q == from && acceptable(q))?;
            self.finish(bind);
            return Some(BindEvent::Bound { bind, peer });
        }
        if p.candidates.is_empty() {
            return None;
        }
        for q in peers.iter().chain(std::iter::once(&from)) {
            if p.candidates.contains(q) && !p.nacked.contains(q) {
                p.nacked.push(*q);
            }
        }
        if p.nacked.len() == p.candidates.len() {
            self.finish(bind);
            return Some(BindEvent::NotFound { bind });
        }
        None
    }

    /// When [`Binder::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.pending
            .values()
            .map(|p| p.next_retry.min(p.deadline))
            .min()
    }

    /// Re-sends due queries (to the candidates that have not answered
    /// `Found=false`) and ends binds whose deadline has passed, in bind
    /// order (as events).
    pub fn handle_timeout(&mut self, now: Millis) {
        let mut actions = Vec::new();
        let mut expired = Vec::new();
        for (bind, p) in self.pending.iter_mut() {
            if now >= p.deadline {
                expired.push(*bind);
                actions.push(BindEvent::TimedOut { bind: *bind });
            } else if now >= p.next_retry {
                p.next_retry = later(now, self.retry);
                let peers = p.remaining();
                actions.push(BindEvent::Query(OutgoingQuery {
                    bind: *bind,
                    query_id: p.query_id,
                    msg: PipeResolverMsg::Query {
                        pipe_id: p.pipe_id,
                        pipe_type: p.pipe_type,
                        peers: peers.clone(),
                    },
                    peers,
                }));
            }
        }
        for bind in expired {
            self.finish(bind);
        }
        for a in actions {
            self.push(a);
        }
    }

    /// Lets a resolution take a "found" answer from a peer it did not ask:
    /// one of the peers asked is a rendezvous, which forwards the query to
    /// the peer its SRDI index names, and that peer answers directly.
    /// "Not found" still counts only from the peers asked. Returns whether
    /// the resolution is in progress.
    pub fn accept_answers_from_any(&mut self, bind: BindId) -> bool {
        match self.pending.get_mut(&bind) {
            Some(p) => {
                p.accept_any = true;
                true
            }
            None => false,
        }
    }

    /// Abandons a resolution: its events not yet polled are withdrawn and
    /// later answers for it are ignored. Returns whether it was in
    /// progress.
    pub fn cancel(&mut self, bind: BindId) -> bool {
        self.events.retain(|e| e.bind() != bind);
        self.finish(bind).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Starts a unicast bind of `pipe()` and takes its first query.
    fn start(
        bd: &mut Binder,
        now: Millis,
        candidates: Vec<PeerId>,
        timeout: Duration,
    ) -> Result<(BindId, OutgoingQuery), BinderError> {
        let bind = bd.start(now, pipe(), PipeType::Unicast, candidates, timeout)?;
        match bd.poll_event() {
            Some(BindEvent::Query(q)) if q.bind == bind => Ok((bind, q)),
            other => panic!("no first query: {other:?}"),
        }
    }

    /// Feeds an answer and takes the outcome it caused, if any.
    fn answer(
        bd: &mut Binder,
        now: Millis,
        query_id: i32,
        msg: PipeResolverMsg,
        from: PeerId,
    ) -> Option<BindEvent> {
        let ended = bd.handle_answer(now, query_id, msg, from);
        let e = bd.poll_event();
        assert_eq!(ended, e.is_some());
        e
    }

    /// Runs the timers and takes what they caused.
    fn timeout(bd: &mut Binder, now: Millis) -> Vec<BindEvent> {
        bd.handle_timeout(now);
        std::iter::from_fn(|| bd.poll_event()).collect()
    }

    const PIPE: &str =
        "urn:jxta:cbid-59616261646162614E50472050325033FB13C4EF50E149519865DF4CF007791604";
    const A: &str =
        "urn:jxta:cbid-59616261646162614A7874615032503382ABB44155FA6D74CC260BD252D0829A03";
    const B: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    fn pipe() -> PipeId {
        PIPE.parse().unwrap()
    }
    fn a() -> PeerId {
        A.parse().unwrap()
    }
    fn b() -> PeerId {
        B.parse().unwrap()
    }

    /// The query of stock c2s #2 (unescaped `Query` text), as JXSE wrote it.
    const JXSE_QUERY: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:PipeResolver>\n<jxta:PipeResolver xmlns:jxta=\"http://jxta.org\">\n\t\n\t<MsgType>\n\t\tQuery\n\t</MsgType>\n\t<PipeId>\n\t\turn:jxta:cbid-59616261646162614E50472050325033FB13C4EF50E149519865DF4CF007791604\n\t</PipeId>\n\t<Type>\n\t\tJxtaUnicast\n\t</Type>\n\t<Peer>\n\t\turn:jxta:cbid-59616261646162614A7874615032503382ABB44155FA6D74CC260BD252D0829A03\n\t</Peer>\n</jxta:PipeResolver>";

    #[test]
    fn jxse_query_parses_and_reencodes() {
        let q = PipeResolverMsg::parse(JXSE_QUERY).unwrap();
        assert_eq!(
            q,
            PipeResolverMsg::Query {
                pipe_id: pipe(),
                pipe_type: PipeType::Unicast,
                peers: vec![a()]
            }
        );
        // JXSE trims the text it embeds, so our document minus its final
        // newline is exactly what JXSE embedded.
        assert_eq!(q.to_xml().trim_end(), JXSE_QUERY);
    }

    #[test]
    fn answer_round_trip_and_checks() {
        let ans = PipeResolverMsg::Answer {
            pipe_id: pipe(),
            pipe_type: PipeType::Propagate,
            peers: vec![a(), b()],
            found: true,
            peer_adv: None,
        }
        .with_peer_adv(format!(
            "<?xml version=\"1.0\"?>\n<jxta:PA><PID>{A}</PID><GID>urn:jxta:jxta-NetGroup</GID></jxta:PA>"
        ));
        let xml = ans.to_xml();
        assert!(xml.contains("\t<PeerAdv>\n\t\t&lt;?xml version=\"1.0\"?>\n&lt;jxta:PA>&lt;PID>"));
        let back = PipeResolverMsg::parse(&xml).unwrap();
        assert_eq!(back, ans);
        assert_eq!(back.peer_advertisement().unwrap().unwrap().peer_id, a());
        let doc = |body: &str| format!("<jxta:PipeResolver>{body}</jxta:PipeResolver>");
        let head = format!("<PipeId>{PIPE}</PipeId><Type>JxtaUnicast</Type>");
        assert_eq!(
            PipeResolverMsg::parse(&doc(&format!(
                "<MsgType>Answer</MsgType>{head}<Found>true</Found>"
            ))),
            Err(BindingError::AnswerWithoutPeer)
        );
        assert!(matches!(
            PipeResolverMsg::parse(&doc(&format!("<MsgType>Nak</MsgType>{head}"))),
            Err(BindingError::BadMsgType(_))
        ));
        assert_eq!(
            PipeResolverMsg::parse(&doc(&head)),
            Err(BindingError::Missing("MsgType"))
        );
        assert_eq!(
            PipeResolverMsg::parse(&doc("<MsgType>Query</MsgType><Type>JxtaUnicast</Type>")),
            Err(BindingError::Missing("PipeId"))
        );
        assert_eq!(
            PipeResolverMsg::parse(&doc(&format!(
                "<MsgType>Query</MsgType><PipeId>{PIPE}</PipeId>"
            ))),
            Err(BindingError::Missing("Type"))
        );
        assert!(matches!(
            PipeResolverMsg::parse(&doc(&format!(
                "<MsgType>Query</MsgType>{head}<Peer>{PIPE}</Peer>"
            ))),
            Err(BindingError::BadId { field: "Peer", .. })
        ));
        // Found is JXSE's Boolean.valueOf; duplicates collapse.
        let m = PipeResolverMsg::parse(&doc(&format!(
            "<MsgType>Answer</MsgType>{head}<Peer>{A}</Peer><Peer>{A}</Peer><Found>TRUE</Found>"
        )))
        .unwrap();
        assert!(
            matches!(m, PipeResolverMsg::Answer { found: true, ref peers, .. } if peers.len() == 1)
        );
        let many: String = (0..=MAX_PEERS)
            .map(|i| {
                format!("<Peer>urn:jxta:cbid-59616261646162614A78746150325033{i:032X}03</Peer>")
            })
            .collect();
        assert_eq!(
            PipeResolverMsg::parse(&doc(&format!("<MsgType>Query</MsgType>{head}{many}"))),
            Err(BindingError::TooManyPeers)
        );
    }

    #[test]
    fn responder_follows_jxse() {
        let q = |peers: Vec<PeerId>| PipeResolverMsg::Query {
            pipe_id: pipe(),
            pipe_type: PipeType::Unicast,
            peers,
        };
        let have = |id: &PipeId, ty: PipeType| *id == pipe() && ty == PipeType::Unicast;
        let none = |_: &PipeId, _: PipeType| false;
        let found = |m: Option<PipeResolverMsg>| match m {
            Some(PipeResolverMsg::Answer { found, peers, .. }) => {
                assert_eq!(peers, vec![a()]);
                Some(found)
            }
            Some(other) => panic!("not an answer: {other:?}"),
            None => None,
        };
        assert_eq!(
            found(answer_query(&a(), &q(vec![a()]), false, have)),
            Some(true)
        );
        assert_eq!(
            found(answer_query(&a(), &q(vec![]), false, have)),
            Some(true)
        );
        assert_eq!(
            found(answer_query(&a(), &q(vec![a()]), false, none)),
            Some(false)
        );
        assert_eq!(found(answer_query(&a(), &q(vec![]), false, none)), None);
        assert_eq!(
            found(answer_query(&a(), &q(vec![]), true, none)),
            Some(false)
        );
        assert_eq!(found(answer_query(&a(), &q(vec![b()]), true, have)), None);
        // Same ID, other type: not ours.
        let wrong_type = PipeResolverMsg::Query {
            pipe_id: pipe(),
            pipe_type: PipeType::Propagate,
            peers: vec![a()],
        };
        assert_eq!(
            found(answer_query(&a(), &wrong_type, false, have)),
            Some(false)
        );
        let ans = answer_query(&a(), &q(vec![a()]), false, have).unwrap();
        assert_eq!(answer_query(&a(), &ans, true, have), None);
    }

    #[test]
    fn binder_through_a_rendezvous_takes_the_holders_answer() {
        let t0: Millis = 1_000;
        let mut bd = Binder::new(7, 4);
        // Asked: a (the rendezvous). The holder b answers instead.
        let (bind, _q) = start(&mut bd, t0, vec![a()], Duration::from_secs(5)).unwrap();
        let undirected = PipeResolverMsg::Query {
            pipe_id: pipe(),
            pipe_type: PipeType::Unicast,
            peers: vec![],
        };
        let from_b = answer_query(&b(), &undirected, false, |_, _| true).unwrap();
        assert_eq!(
            answer(&mut bd, t0, 7, from_b.clone(), b()),
            None,
            "not asked"
        );
        assert!(bd.accept_answers_from_any(bind));
        assert_eq!(
            answer(&mut bd, t0, 7, from_b, b()),
            Some(BindEvent::Bound { bind, peer: b() })
        );
        assert!(!bd.accept_answers_from_any(bind), "finished");
    }

    #[test]
    fn binder_bound_and_stale_answers() {
        let t0: Millis = 1_000;
        let mut bd = Binder::new(41, 4);
        let (bind, q) = start(&mut bd, t0, vec![a(), a()], Duration::from_secs(5)).unwrap();
        assert_eq!(q.query_id, 41);
        assert_eq!(q.peers, vec![a()]);
        let rq = q.resolver_query(b());
        assert_eq!(rq.handler, PIPE_RESOLVER_HANDLER);
        assert_eq!(PipeResolverMsg::parse(&rq.query).unwrap(), q.msg);
        let good = answer_query(&a(), &q.msg, false, |_, _| true).unwrap();
        // Wrong query ID, a query instead of an answer, another pipe, a peer not asked.
        assert_eq!(answer(&mut bd, t0, 40, good.clone(), a()), None);
        assert_eq!(answer(&mut bd, t0, 41, q.msg.clone(), a()), None);
        let other_pipe = PipeResolverMsg::Answer {
            pipe_id:
                "urn:jxta:cbid-59616261646162614E504720503250331122334455667788112233445566778804"
                    .parse()
                    .unwrap(),
            pipe_type: PipeType::Unicast,
            peers: vec![a()],
            found: true,
            peer_adv: None,
        };
        assert_eq!(answer(&mut bd, t0, 41, other_pipe, a()), None);
        let from_b = answer_query(
            &b(),
            &PipeResolverMsg::Query {
                pipe_id: pipe(),
                pipe_type: PipeType::Unicast,
                peers: vec![],
            },
            false,
            |_, _| true,
        )
        .unwrap();
        assert_eq!(answer(&mut bd, t0, 41, from_b, b()), None);
        assert_eq!(
            answer(&mut bd, t0, 41, good.clone(), a()),
            Some(BindEvent::Bound { bind, peer: a() })
        );
        assert!(bd.is_empty());
        assert_eq!(answer(&mut bd, t0, 41, good, a()), None);
        assert_eq!(bd.poll_timeout(), None);
    }

    #[test]
    fn binder_not_found_retry_and_timeout() {
        let t0: Millis = 1_000;
        let retry = Duration::from_millis(100);
        let mut bd = Binder::new(0, 4).with_retry(retry);
        assert_eq!(bd.retry(), retry);
        let (b1, q1) = start(&mut bd, t0, vec![a(), b()], Duration::from_millis(350)).unwrap();
        assert_eq!(q1.query_id, 1);
        assert_eq!(bd.poll_timeout(), Some(later(t0, retry)));
        assert!(timeout(&mut bd, t0 + 50).is_empty());
        // A says no: the re-send only goes to B.
        let nak_a = answer_query(&a(), &q1.msg, false, |_, _| false).unwrap();
        assert_eq!(answer(&mut bd, t0, q1.query_id, nak_a, a()), None);
        let acts = timeout(&mut bd, later(t0, retry));
        assert_eq!(acts.len(), 1);
        match &acts[0] {
            BindEvent::Query(q) => {
                assert_eq!((q.bind, q.query_id, q.peers.clone()), (b1, 1, vec![b()]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(bd.poll_timeout(), Some(later(t0, 2 * retry)));
        let nak_b = answer_query(&b(), &q1.msg, false, |_, _| false).unwrap();
        assert_eq!(
            answer(&mut bd, t0, 1, nak_b, b()),
            Some(BindEvent::NotFound { bind: b1 })
        );

        // Undirected: NAKs never conclude; the deadline does.
        let (b2, q2) = start(&mut bd, t0, vec![], Duration::from_millis(250)).unwrap();
        assert_eq!(q2.query_id, 2);
        assert!(q2.peers.is_empty());
        let nak = answer_query(&a(), &q2.msg, true, |_, _| false).unwrap();
        assert_eq!(answer(&mut bd, t0, 2, nak, a()), None);
        let mut sends = 0;
        let (end, now) = loop {
            let now = bd.poll_timeout().unwrap();
            let acts = timeout(&mut bd, now);
            sends += acts
                .iter()
                .filter(|a| matches!(a, BindEvent::Query(_)))
                .count();
            if let Some(ev) = acts.iter().find(|a| !matches!(a, BindEvent::Query(_))) {
                break (ev.clone(), now);
            }
        };
        assert_eq!(end, BindEvent::TimedOut { bind: b2 });
        assert_eq!(end.bind(), b2);
        assert_eq!(now, t0 + 250);
        assert_eq!(sends, 2);
        assert!(bd.is_empty());
    }

    #[test]
    fn binder_bounds_cancel_and_ids() {
        let t0: Millis = 1_000;
        let mut bd = Binder::new(i32::MAX - 1, 2);
        let (x, qx) = start(&mut bd, t0, vec![a()], Duration::from_secs(1)).unwrap();
        let (_, qy) = start(&mut bd, t0, vec![a()], Duration::from_secs(1)).unwrap();
        assert_eq!((qx.query_id, qy.query_id), (i32::MAX - 1, 1));
        assert_eq!(
            start(&mut bd, t0, vec![a()], Duration::from_secs(1)),
            Err(BinderError::Full(2))
        );
        assert!(bd.cancel(x));
        assert!(!bd.cancel(x));
        assert_eq!(bd.len(), 1);
        let good = answer_query(&a(), &qx.msg, false, |_, _| true).unwrap();
        assert_eq!(answer(&mut bd, t0, qx.query_id, good, a()), None);
        let many: Vec<PeerId> = (0..=MAX_PEERS)
            .map(|i| {
                format!("urn:jxta:cbid-59616261646162614A78746150325033{i:032X}03")
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            start(&mut bd, t0, many, Duration::from_secs(1)),
            Err(BinderError::TooManyCandidates(MAX_PEERS + 1))
        );
        // IDs in use are skipped after wrapping.
        let mut bd = Binder::new(1, 8);
        let (_, q1) = start(&mut bd, t0, vec![], Duration::from_secs(1)).unwrap();
        bd.next_query_id = crate::resolver::QueryIds::new(1);
        let (_, q2) = start(&mut bd, t0, vec![], Duration::from_secs(1)).unwrap();
        assert_eq!((q1.query_id, q2.query_id), (1, 2));
    }

    #[test]
    fn binder_events_are_withdrawn_on_cancel_and_bounded() {
        let mut bd = Binder::new(1, 2);
        let x = bd
            .start(
                0,
                pipe(),
                PipeType::Unicast,
                vec![a()],
                Duration::from_secs(1),
            )
            .unwrap();
        let y = bd
            .start(
                0,
                pipe(),
                PipeType::Unicast,
                vec![b()],
                Duration::from_secs(1),
            )
            .unwrap();
        assert!(bd.cancel(x));
        // Only y's first query is left.
        assert!(matches!(bd.poll_event(), Some(BindEvent::Query(q)) if q.bind == y));
        assert_eq!(bd.poll_event(), None);
        // An owner that never polls: the queue stays bounded, the excess
        // counted.
        for k in 0..100 {
            bd.handle_timeout(k * 1_000);
        }
        assert!(bd.events.len() <= bd.max_events());
        assert!(bd.is_empty(), "timed out");
        let n = std::iter::from_fn(|| bd.poll_event()).count() as u64;
        assert!(n > 0 && n <= bd.max_events() as u64);
        assert_eq!(bd.dropped(), 0, "one timeout ends y: nothing overflowed");
    }

    #[test]
    fn binder_huge_durations_do_not_panic() {
        let t0: Millis = 1_000;
        let mut bd = Binder::new(1, 2).with_retry(Duration::MAX);
        let (_, q) = start(&mut bd, t0, vec![a()], Duration::MAX).unwrap();
        assert!(bd.poll_timeout().unwrap() > t0);
        assert!(timeout(&mut bd, t0 + 3_600_000).is_empty());
        assert_eq!(q.query_id, 1);
    }

    proptest! {
        #[test]
        fn msg_round_trip(
            query in any::<bool>(),
            found in any::<bool>(),
            n in 0usize..4,
            ty in 0u8..3,
            adv in proptest::option::of("[ -~]{1,60}"),
        ) {
            let peers: Vec<PeerId> = (0..n)
                .map(|i| format!("urn:jxta:cbid-59616261646162614A78746150325033{i:032X}03").parse().unwrap())
                .collect();
            let pipe_type = [PipeType::Unicast, PipeType::UnicastSecure, PipeType::Propagate][ty as usize];
            let m = if query || n == 0 {
                PipeResolverMsg::Query { pipe_id: pipe(), pipe_type, peers }
            } else {
                PipeResolverMsg::Answer {
                    pipe_id: pipe(),
                    pipe_type,
                    peers,
                    found,
                    peer_adv: adv.map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
                }
            };
            prop_assert_eq!(PipeResolverMsg::parse(&m.to_xml()).unwrap(), m);
        }
    }
}
