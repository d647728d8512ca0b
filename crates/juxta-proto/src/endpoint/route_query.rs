//! Route queries and answers of the Endpoint Router Protocol (digest §5.4):
//! the `jxta:ERQ` / `jxta:ERR` documents carried by the resolver under the
//! handler name `EndpointRouter`, and the [`RouteResolver`] state machine
//! that tracks the queries in flight.
//!
//! A peer that cannot reach a destination asks the peers it is connected
//! to. A peer that knows a route answers with a route advertisement whose
//! hops start with itself; one that does not may ask its own neighbours
//! (one hop further, bounded by [`RouteResolverConfig::max_hop_count`]) and
//! answer when they do, which is how a chain of relays is discovered.
//! Everything is bounded: queries in flight, waiters per query, hops.

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::route_cache::check_route;
use super::signed_route::SignedRoute;
use crate::advertisement::tree::XmlElement;
use crate::advertisement::{parse_xml, AccessPointAdvertisement, AdvError, RouteAdvertisement};
use crate::id::PeerId;
use crate::time::Millis;

/// The resolver handler name of route queries.
pub const ROUTER_HANDLER: &str = "EndpointRouter";
/// Root of a route query.
pub const ROUTE_QUERY_ROOT: &str = "jxta:ERQ";
/// Root of a route answer.
pub const ROUTE_RESPONSE_ROOT: &str = "jxta:ERR";
/// The child of a route answer holding the destination's signed route.
pub const SIGNED_DEST: &str = "SignedDst";
/// Most `Bad` hops read from a query.
pub const MAX_BAD_HOPS: usize = 16;

/// Errors of route query documents and of the resolver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteQueryError {
    /// Malformed document or embedded advertisement.
    #[error(transparent)]
    Adv(#[from] AdvError),
    /// A required field is missing.
    #[error("route document without {0}")]
    Missing(&'static str),
    /// Too many queries in flight.
    #[error("{0} route queries in flight already")]
    TooManyPending(usize),
    /// Too many peers waiting for one query.
    #[error("too many waiters for one route query")]
    TooManyWaiters,
    /// The query has travelled too far already.
    #[error("route query hop count {0} exceeds the limit")]
    HopLimit(u32),
    /// An answer for no query in flight (late, for another destination,
    /// or from a peer the query did not go to).
    #[error("route answer for no query in flight")]
    Late,
}

/// A route query (`jxta:ERQ`): who is asked for, the asker's own route,
/// and hops the asker knows to be bad.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteQuery {
    /// The destination a route is wanted for (`Dst`).
    pub dest: PeerId,
    /// The asker's route (`Src`), if given.
    pub src_route: Option<RouteAdvertisement>,
    /// Peers not to route through (`Bad`).
    pub bad: Vec<PeerId>,
}

impl RouteQuery {
    /// A query for `dest`.
    pub fn new(dest: PeerId) -> RouteQuery {
        RouteQuery {
            dest,
            src_route: None,
            bad: Vec::new(),
        }
    }

    /// The document.
    ///
    /// ```
    /// use juxta_proto::endpoint::route_query::RouteQuery;
    /// use juxta_proto::id::PeerId;
    /// let q = RouteQuery::new(PeerId::from_public_key_spki(b"b"));
    /// assert_eq!(RouteQuery::parse(&q.to_xml()).unwrap(), q);
    /// ```
    pub fn to_xml(&self) -> String {
        let mut root = XmlElement::adv_root(ROUTE_QUERY_ROOT);
        root.push_text("Dst", &self.dest.to_string());
        if let Some(ra) = &self.src_route {
            let mut s = XmlElement::new("Src");
            s.push(ra.to_element().copied());
            root.push(s);
        }
        for b in &self.bad {
            root.push_text("Bad", &b.to_string());
        }
        root.to_document()
    }

    /// Parses a query document (bounded like every advertisement).
    pub fn parse(xml: &str) -> Result<RouteQuery, RouteQueryError> {
        let root = parse_xml(xml)
            .map_err(AdvError::from)?
            .expect_root(ROUTE_QUERY_ROOT)
            .map_err(AdvError::from)?;
        let dest: PeerId = root
            .child_value("Dst")
            .filter(|s| !s.is_empty())
            .ok_or(RouteQueryError::Missing("Dst"))?
            .parse()
            .map_err(|source| AdvError::BadId {
                field: "Dst",
                source,
            })?;
        let src_route = match root.child("Src").and_then(|s| s.child("jxta:RA")) {
            Some(n) => Some(RouteAdvertisement::from_node(n)?),
            None => None,
        };
        let mut bad = Vec::new();
        for b in root.children_named("Bad") {
            if bad.len() >= MAX_BAD_HOPS {
                return Err(AdvError::TooMany {
                    field: "Bad",
                    max: MAX_BAD_HOPS,
                }
                .into());
            }
            bad.push(b.value().parse().map_err(|source| AdvError::BadId {
                field: "Bad",
                source,
            })?);
        }
        Ok(RouteQuery {
            dest,
            src_route,
            bad,
        })
    }
}

/// A route answer (`jxta:ERR`): the route to the destination and the
/// answering peer's own route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteResponse {
    /// The route to the destination (`Dst`).
    pub dest_route: RouteAdvertisement,
    /// The answering peer's route (`Src`), if given.
    pub src_route: Option<RouteAdvertisement>,
    /// The destination's own route, signed by it (`SignedDst`, a Juxta
    /// extension JXSE ignores), if the answering peer holds one; verify it
    /// with [`RouteResponse::signed_dest`].
    pub signed_dest: Option<XmlElement>,
}

impl RouteResponse {
    /// The document.
    pub fn to_xml(&self) -> String {
        let mut root = XmlElement::adv_root(ROUTE_RESPONSE_ROOT);
        let mut d = XmlElement::new("Dst");
        d.push(self.dest_route.to_element().copied());
        root.push(d);
        if let Some(ra) = &self.src_route {
            let mut s = XmlElement::new("Src");
            s.push(ra.to_element().copied());
            root.push(s);
        }
        if let Some(e) = &self.signed_dest {
            let mut s = XmlElement::new(SIGNED_DEST);
            s.push(e.clone());
            root.push(s);
        }
        root.to_document()
    }

    /// The destination's signed route, verified at `now_ms`: `None` when
    /// the answer carries none.
    pub fn signed_dest(
        &self,
        now_ms: u64,
    ) -> Option<Result<SignedRoute, super::signed_route::SignedRouteError>> {
        self.signed_dest
            .as_ref()
            .map(|e| SignedRoute::from_element(e, now_ms))
    }

    /// Parses an answer document; its `Dst` route must name its peer.
    pub fn parse(xml: &str) -> Result<RouteResponse, RouteQueryError> {
        let root = parse_xml(xml)
            .map_err(AdvError::from)?
            .expect_root(ROUTE_RESPONSE_ROOT)
            .map_err(AdvError::from)?;
        let dest_route = RouteAdvertisement::from_node(
            root.child("Dst")
                .and_then(|d| d.child("jxta:RA"))
                .ok_or(RouteQueryError::Missing("Dst"))?,
        )?;
        if dest_route.dest_peer.is_none() {
            return Err(RouteQueryError::Missing("DstPID"));
        }
        let src_route = match root.child("Src").and_then(|s| s.child("jxta:RA")) {
            Some(n) => Some(RouteAdvertisement::from_node(n)?),
            None => None,
        };
        let signed_dest = root
            .child(SIGNED_DEST)
            .and_then(|s| s.child(crate::advertisement::route::ROUTE_ROOT))
            .map(XmlElement::from_node);
        Ok(RouteResponse {
            dest_route,
            src_route,
            signed_dest,
        })
    }
}

/// The route advertisement of a peer reached through `hops` (each with its
/// endpoint addresses), e.g. an edge behind its relay: the destination's
/// own addresses are `dest_addresses` (for a relayed edge,
/// `relay://<relay unique>`).
pub fn route_through(
    dest: PeerId,
    dest_addresses: Vec<String>,
    hops: &[(PeerId, Vec<String>)],
) -> RouteAdvertisement {
    RouteAdvertisement {
        dest_peer: Some(dest),
        dest: AccessPointAdvertisement::new(None, dest_addresses),
        hops: hops
            .iter()
            .map(|(p, eas)| AccessPointAdvertisement::new(Some(*p), eas.clone()))
            .collect(),
    }
}

/// The hops (first hop first) this peer should use to reach the
/// destination of `ra`, learned from `answering` (the peer whose answer it
/// is). `connected` says which peers this peer has a connection to. The
/// route must start at a connected peer; if it does not but the answering
/// peer is connected, the route goes through the answering peer first.
/// `None` if no loop-free route of at most
/// [`MAX_ROUTE_HOPS`](super::route_cache::MAX_ROUTE_HOPS) results.
pub fn route_from_answer(
    local: &PeerId,
    ra: &RouteAdvertisement,
    answering: &PeerId,
    connected: impl Fn(&PeerId) -> bool,
) -> Option<Vec<PeerId>> {
    let dest = ra.dest_peer?;
    let mut hops: Vec<PeerId> = ra.hops.iter().filter_map(|h| h.peer_id).collect();
    // A route that starts with ourselves: drop that hop.
    while hops.first() == Some(local) {
        hops.remove(0);
    }
    if hops.is_empty() {
        if dest != *answering && connected(answering) {
            hops.push(*answering);
        } else {
            return None;
        }
    }
    if !connected(&hops[0]) {
        if connected(answering) && !hops.contains(answering) && *answering != dest {
            hops.insert(0, *answering);
        } else {
            return None;
        }
    }
    check_route(local, &dest, &hops).ok()?;
    Some(hops)
}

/// Who waits for a route query's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiter {
    /// This peer (a send is waiting for a route).
    Local,
    /// Another peer asked us (query `query_id`); we asked further.
    Remote {
        /// The asking peer.
        peer: PeerId,
        /// Its query ID, to echo in our answer.
        query_id: i32,
    },
}

/// Bounds of the [`RouteResolver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteResolverConfig {
    /// Most queries in flight.
    pub max_pending: usize,
    /// Most waiters on one query.
    pub max_waiters: usize,
    /// How long a query waits for an answer.
    pub timeout_ms: u64,
    /// Queries with a resolver hop count (`HC`) above this are not asked
    /// further.
    pub max_hop_count: u32,
}

impl Default for RouteResolverConfig {
    fn default() -> Self {
        RouteResolverConfig {
            max_pending: 256,
            max_waiters: 16,
            timeout_ms: 5_000,
            max_hop_count: 3,
        }
    }
}

#[derive(Debug, Clone)]
struct Pending {
    dest: PeerId,
    waiters: Vec<Waiter>,
    expires_ms: u64,
    /// The peers the query went to (at most [`MAX_ASKED`]).
    asked: Vec<PeerId>,
    /// Those of them that answered they know no route.
    denied: Vec<PeerId>,
}

/// Most peers a query is recorded as sent to (a query goes to the
/// connected peers; beyond this many, negative answers are not tracked
/// and the query waits for its timeout as before).
pub const MAX_ASKED: usize = 64;

/// Resolver handler of Juxta's negative route answers: "I know no route
/// to this destination and asked nobody else", sent only to Juxta peers
/// (over compact connections; JXSE never receives one). Its body is a
/// [`RouteQuery`] naming the destination.
pub const NO_ROUTE_HANDLER: &str = "JuxtaNoRoute";

/// Why a query ended without a route ([`RouteEvent::Unanswered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAnswer {
    /// The driver found nobody to ask ([`RouteResolver::abandon`]).
    NobodyAsked,
    /// Every peer the query went to answered that it knows no route
    /// (these peers).
    Denied(Vec<PeerId>),
    /// Nobody answered within [`RouteResolverConfig::timeout_ms`].
    TimedOut,
}

/// What the [`RouteResolver`] asks its driver to do
/// ([`RouteResolver::poll_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteEvent {
    /// A new query: send it (resolver query ID `query_id`, hop count
    /// `hop_count`) to the peers to ask, then report them with
    /// [`RouteResolver::asked`], or call [`RouteResolver::abandon`] if
    /// there was nobody to ask.
    Ask {
        /// The resolver query ID.
        query_id: i32,
        /// The resolver hop count to send.
        hop_count: u32,
        /// The document.
        query: Box<RouteQuery>,
    },
    /// A route answer matched its query: tell its waiters.
    Answered(Answered),
    /// The query ended without a route: tell its waiters.
    Unanswered {
        /// The query's destination and waiters.
        answered: Answered,
        /// Why.
        why: NoAnswer,
    },
}

/// A query's destination and the waiters to tell how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The destination.
    pub dest: PeerId,
    /// Who waited for it.
    pub waiters: Vec<Waiter>,
}

/// Route queries in flight (see the module comment), as a sans-IO machine
/// of the crate's one contract: inputs are calls ([`request`], answers,
/// [`handle_timeout`]), outputs come from [`poll_event`], and
/// [`poll_timeout`] says when the next query times out.
///
/// [`request`]: RouteResolver::request
/// [`handle_timeout`]: RouteResolver::handle_timeout
/// [`poll_event`]: RouteResolver::poll_event
/// [`poll_timeout`]: RouteResolver::poll_timeout
///
/// ```
/// use juxta_proto::endpoint::route_query::*;
/// use juxta_proto::id::PeerId;
/// let (b, r1) = (PeerId::from_public_key_spki(b"b"), PeerId::from_public_key_spki(b"r1"));
/// let mut r = RouteResolver::new(RouteResolverConfig::default());
/// r.request(b, Waiter::Local, 0, 0).unwrap();
/// let Some(RouteEvent::Ask { query_id, .. }) = r.poll_event() else { panic!() };
/// r.asked(query_id, &[r1]);
/// // A second waiter joins the query in flight: nothing new to send.
/// let remote = Waiter::Remote { peer: r1, query_id: 7 };
/// r.request(b, remote, 0, 10).unwrap();
/// assert_eq!(r.poll_event(), None);
/// r.on_answer(query_id, &b).unwrap();
/// assert_eq!(
///     r.poll_event(),
///     Some(RouteEvent::Answered(Answered { dest: b, waiters: vec![Waiter::Local, remote] }))
/// );
/// assert_eq!(r.poll_timeout(), None);
/// ```
#[derive(Debug, Clone)]
pub struct RouteResolver {
    cfg: RouteResolverConfig,
    next_id: i32,
    pending: HashMap<i32, Pending>,
    by_dest: HashMap<PeerId, i32>,
    /// The queries in flight by expiry: [`RouteResolver::handle_timeout`]
    /// visits only those due.
    expiries: BTreeSet<(Millis, i32)>,
    events: VecDeque<RouteEvent>,
    dropped_events: u64,
}

impl RouteResolver {
    /// An idle resolver.
    pub fn new(cfg: RouteResolverConfig) -> RouteResolver {
        RouteResolver {
            cfg,
            next_id: 1,
            pending: HashMap::new(),
            by_dest: HashMap::new(),
            expiries: BTreeSet::new(),
            events: VecDeque::new(),
            dropped_events: 0,
        }
    }

    /// The bounds.
    pub fn config(&self) -> &RouteResolverConfig {
        &self.cfg
    }

    /// `waiter` wants a route to `dest`; `hop_count` is the incoming
    /// query's `HC` (0 for a local request). A new query comes out as
    /// [`RouteEvent::Ask`]; a waiter for a destination already asked
    /// for joins that query.
    pub fn request(
        &mut self,
        dest: PeerId,
        waiter: Waiter,
        hop_count: u32,
        now: Millis,
    ) -> Result<(), RouteQueryError> {
        self.handle_timeout(now);
        if hop_count >= self.cfg.max_hop_count {
            return Err(RouteQueryError::HopLimit(hop_count));
        }
        if let Some(p) = self
            .by_dest
            .get(&dest)
            .and_then(|id| self.pending.get_mut(id))
        {
            if !p.waiters.contains(&waiter) {
                if p.waiters.len() >= self.cfg.max_waiters {
                    return Err(RouteQueryError::TooManyWaiters);
                }
                p.waiters.push(waiter);
            }
            return Ok(());
        }
        if self.pending.len() >= self.cfg.max_pending {
            return Err(RouteQueryError::TooManyPending(self.pending.len()));
        }
        let query_id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        let expires = now.saturating_add(self.cfg.timeout_ms);
        self.pending.insert(
            query_id,
            Pending {
                dest,
                waiters: vec![waiter],
                expires_ms: expires,
                asked: Vec::new(),
                denied: Vec::new(),
            },
        );
        self.by_dest.insert(dest, query_id);
        self.expiries.insert((expires, query_id));
        self.push(RouteEvent::Ask {
            query_id,
            hop_count: match waiter {
                Waiter::Local => 0,
                Waiter::Remote { .. } => hop_count.saturating_add(1),
            },
            query: Box::new(RouteQuery::new(dest)),
        });
        Ok(())
    }

    /// An answer to query `query_id` naming a route to `dest`: the query
    /// ends ([`RouteEvent::Answered`]). [`RouteQueryError::Late`] if no
    /// such query is in flight (late, or for another destination).
    pub fn on_answer(&mut self, query_id: i32, dest: &PeerId) -> Result<(), RouteQueryError> {
        match self.pending.get(&query_id) {
            Some(p) if p.dest == *dest => {}
            _ => return Err(RouteQueryError::Late),
        }
        if let Some(answered) = self.end(query_id) {
            self.push(RouteEvent::Answered(answered));
        }
        Ok(())
    }

    /// Records that query `query_id` went to `peers` (negative answers
    /// are believed only from them). More than [`MAX_ASKED`] peers: none
    /// are recorded, the query waits for answers or its timeout.
    pub fn asked(&mut self, query_id: i32, peers: &[PeerId]) {
        if let Some(p) = self.pending.get_mut(&query_id) {
            for peer in peers {
                if p.asked.len() >= MAX_ASKED {
                    p.asked.clear();
                    return;
                }
                if !p.asked.contains(peer) {
                    p.asked.push(*peer);
                }
            }
        }
    }

    /// Ends query `query_id` at once: nobody could be asked
    /// ([`NoAnswer::NobodyAsked`]). Nothing if it is not in flight.
    pub fn abandon(&mut self, query_id: i32) {
        if let Some(answered) = self.end(query_id) {
            self.push(RouteEvent::Unanswered {
                answered,
                why: NoAnswer::NobodyAsked,
            });
        }
    }

    /// `from` answered query `query_id` that it knows no route to `dest`.
    /// When every peer the query went to said so, the query ends
    /// ([`NoAnswer::Denied`]). [`RouteQueryError::Late`] if no such query
    /// is in flight, it is for another destination, or it did not go to
    /// `from`.
    ///
    /// ```
    /// use juxta_proto::endpoint::route_query::*;
    /// use juxta_proto::id::PeerId;
    /// let (b, r1, r2) = (PeerId::from_public_key_spki(b"b"), PeerId::from_public_key_spki(b"r1"),
    ///     PeerId::from_public_key_spki(b"r2"));
    /// let mut r = RouteResolver::new(RouteResolverConfig::default());
    /// r.request(b, Waiter::Local, 0, 0).unwrap();
    /// let Some(RouteEvent::Ask { query_id, .. }) = r.poll_event() else { panic!() };
    /// r.asked(query_id, &[r1, r2]);
    /// r.on_no_route(query_id, &b, &r1).unwrap();
    /// assert_eq!(r.poll_event(), None);
    /// r.on_no_route(query_id, &b, &r2).unwrap();
    /// assert!(matches!(
    ///     r.poll_event(),
    ///     Some(RouteEvent::Unanswered { why: NoAnswer::Denied(_), .. })
    /// ));
    /// assert!(!r.is_pending(&b));
    /// ```
    pub fn on_no_route(
        &mut self,
        query_id: i32,
        dest: &PeerId,
        from: &PeerId,
    ) -> Result<(), RouteQueryError> {
        let Some(p) = self.pending.get_mut(&query_id) else {
            return Err(RouteQueryError::Late);
        };
        if p.dest != *dest || !p.asked.contains(from) {
            return Err(RouteQueryError::Late);
        }
        if !p.denied.contains(from) {
            p.denied.push(*from);
        }
        if p.denied.len() < p.asked.len() {
            return Ok(());
        }
        let denied = std::mem::take(&mut p.denied);
        if let Some(answered) = self.end(query_id) {
            self.push(RouteEvent::Unanswered {
                answered,
                why: NoAnswer::Denied(denied),
            });
        }
        Ok(())
    }

    /// Whether a query for `dest` is in flight.
    pub fn is_pending(&self, dest: &PeerId) -> bool {
        self.by_dest.contains_key(dest)
    }

    /// Ends the queries due at `now` ([`NoAnswer::TimedOut`]), earliest
    /// first.
    pub fn handle_timeout(&mut self, now: Millis) {
        while let Some(&(at, id)) = self.expiries.first() {
            if at > now {
                break;
            }
            if let Some(answered) = self.end(id) {
                self.push(RouteEvent::Unanswered {
                    answered,
                    why: NoAnswer::TimedOut,
                });
            } else {
                self.expiries.pop_first();
            }
        }
    }

    /// When the next query times out.
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.expiries.first().map(|(at, _)| *at)
    }

    /// The next thing to do, oldest first.
    pub fn poll_event(&mut self) -> Option<RouteEvent> {
        self.events.pop_front()
    }

    /// Queries in flight.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Events dropped because the driver left more than
    /// [`RouteResolver::max_events`] unpolled (oldest first).
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// Most events held for the driver: two per query in flight (its
    /// `Ask` and its end), which a driver that polls after every input
    /// never reaches.
    pub fn max_events(&self) -> usize {
        self.cfg.max_pending.saturating_mul(2).max(1)
    }

    fn push(&mut self, e: RouteEvent) {
        if self.events.len() >= self.max_events() {
            self.events.pop_front();
            self.dropped_events = self.dropped_events.saturating_add(1);
        }
        self.events.push_back(e);
    }

    /// Removes query `query_id` from every table: its waiters.
    fn end(&mut self, query_id: i32) -> Option<Answered> {
        let p = self.pending.remove(&query_id)?;
        self.by_dest.remove(&p.dest);
        self.expiries.remove(&(p.expires_ms, query_id));
        Some(Answered {
            dest: p.dest,
            waiters: p.waiters,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n])
    }

    #[test]
    fn documents_round_trip_and_bad_input() {
        let mut q = RouteQuery::new(p(2));
        q.src_route = Some(route_through(p(1), vec!["tcp://10.0.0.1:1".into()], &[]));
        q.bad.push(p(3));
        let xml = q.to_xml();
        assert!(xml.contains("<jxta:ERQ"), "{xml}");
        assert_eq!(RouteQuery::parse(&xml).unwrap(), q);
        let r = RouteResponse {
            dest_route: route_through(
                p(2),
                vec![format!("relay://{}", p(9).unique_value())],
                &[(p(9), vec!["tcp://10.0.0.9:9701".into()])],
            ),
            src_route: None,
            signed_dest: None,
        };
        assert_eq!(RouteResponse::parse(&r.to_xml()).unwrap(), r);
        assert!(matches!(
            RouteQuery::parse("<jxta:ERQ><Dst></Dst></jxta:ERQ>"),
            Err(RouteQueryError::Missing("Dst"))
        ));
        assert!(RouteQuery::parse("<jxta:ERQ><Dst>urn:jxta:nope</Dst></jxta:ERQ>").is_err());
        assert!(RouteQuery::parse("<jxta:ERR/>").is_err());
        assert!(RouteResponse::parse("<jxta:ERR><Dst/></jxta:ERR>").is_err());
        let many = format!(
            "<jxta:ERQ><Dst>{}</Dst>{}</jxta:ERQ>",
            p(1),
            format!("<Bad>{}</Bad>", p(2)).repeat(MAX_BAD_HOPS + 1)
        );
        assert!(RouteQuery::parse(&many).is_err());
        assert!(RouteQuery::parse(&"<".repeat(1 << 20)).is_err());
    }

    #[test]
    fn answers_become_routes_from_a_connected_first_hop() {
        let (me, r1, r2, b) = (p(0), p(1), p(2), p(3));
        let ra = route_through(b, vec![], &[(r2, vec![])]);
        // Connected to r2: route as given.
        assert_eq!(
            route_from_answer(&me, &ra, &r2, |x| *x == r2),
            Some(vec![r2])
        );
        // Only connected to r1, which answered: through r1 first.
        assert_eq!(
            route_from_answer(&me, &ra, &r1, |x| *x == r1),
            Some(vec![r1, r2])
        );
        // Nothing connected: no route.
        assert_eq!(route_from_answer(&me, &ra, &r1, |_| false), None);
        // A route through ourselves or the destination: refused (loop).
        let looped = route_through(b, vec![], &[(r1, vec![]), (b, vec![])]);
        assert_eq!(route_from_answer(&me, &looped, &r1, |_| true), None);
        // A route starting with ourselves loses that hop.
        let mine = route_through(b, vec![], &[(me, vec![]), (r1, vec![])]);
        assert_eq!(
            route_from_answer(&me, &mine, &r1, |x| *x == r1),
            Some(vec![r1])
        );
    }

    /// The `Ask` a request made: its query ID and hop count.
    fn asked_for(r: &mut RouteResolver, dest: PeerId) -> (i32, u32) {
        match r.poll_event() {
            Some(RouteEvent::Ask {
                query_id,
                hop_count,
                query,
            }) => {
                assert_eq!(query.dest, dest);
                (query_id, hop_count)
            }
            other => panic!("an Ask for {dest} expected, got {other:?}"),
        }
    }

    /// The event that ends a query without an answer.
    fn unanswered(dest: PeerId, waiters: Vec<Waiter>, why: NoAnswer) -> RouteEvent {
        RouteEvent::Unanswered {
            answered: Answered { dest, waiters },
            why,
        }
    }

    /// A resolver with these bounds: pending queries, waiters per query,
    /// timeout (ms) and hop count.
    fn resolver(
        max_pending: usize,
        max_waiters: usize,
        timeout_ms: u64,
        max_hop_count: u32,
    ) -> RouteResolver {
        RouteResolver::new(RouteResolverConfig {
            max_pending,
            max_waiters,
            timeout_ms,
            max_hop_count,
        })
    }

    #[test]
    fn resolver_bounds_dedup_and_timeouts() {
        let mut r = resolver(2, 2, 100, 2);
        r.request(p(1), Waiter::Local, 0, 0).unwrap();
        let (query_id, hop_count) = asked_for(&mut r, p(1));
        assert_eq!(hop_count, 0);
        assert_eq!(r.poll_timeout(), Some(100));
        let remote = Waiter::Remote {
            peer: p(7),
            query_id: 44,
        };
        r.request(p(1), remote, 0, 1).unwrap();
        assert_eq!(r.poll_event(), None, "joined: nothing new to send");
        let third = Waiter::Remote {
            peer: p(8),
            query_id: 45,
        };
        assert_eq!(
            r.request(p(1), third, 0, 1),
            Err(RouteQueryError::TooManyWaiters)
        );
        r.request(p(2), third, 1, 2).unwrap();
        let (_, hop_count) = asked_for(&mut r, p(2));
        assert_eq!(hop_count, 2, "forwarded one hop further");
        assert_eq!(
            r.request(p(3), Waiter::Local, 0, 3),
            Err(RouteQueryError::TooManyPending(2))
        );
        assert_eq!(
            r.request(p(4), third, 2, 3),
            Err(RouteQueryError::HopLimit(2))
        );
        assert_eq!(r.poll_event(), None, "refused requests send nothing");
        assert_eq!(
            r.on_answer(query_id, &p(9)),
            Err(RouteQueryError::Late),
            "wrong destination"
        );
        r.on_answer(query_id, &p(1)).unwrap();
        assert_eq!(
            r.poll_event(),
            Some(RouteEvent::Answered(Answered {
                dest: p(1),
                waiters: vec![Waiter::Local, remote]
            }))
        );
        assert_eq!(
            r.on_answer(query_id, &p(1)),
            Err(RouteQueryError::Late),
            "answered once"
        );
        // The answered query's expiry is gone with it: the next is p(2)'s.
        assert_eq!(r.poll_timeout(), Some(102));
        r.handle_timeout(101);
        assert_eq!(r.poll_event(), None, "not due yet");
        r.handle_timeout(1_000);
        assert_eq!(
            r.poll_event(),
            Some(unanswered(p(2), vec![third], NoAnswer::TimedOut))
        );
        assert_eq!(r.pending(), 0);
        assert_eq!(r.poll_timeout(), None);
        assert_eq!(r.dropped_events(), 0);
    }

    #[test]
    fn negative_answers_end_a_query_only_when_every_asked_peer_said_no() {
        let id = |s: &[u8]| PeerId::from_public_key_spki(s);
        let (b, r1, r2, stranger) = (id(b"b"), id(b"r1"), id(b"r2"), id(b"x"));
        let mut r = RouteResolver::new(RouteResolverConfig::default());
        r.request(b, Waiter::Local, 0, 0).unwrap();
        let (query_id, _) = asked_for(&mut r, b);
        let late = Err(RouteQueryError::Late);
        // Nothing recorded as asked: no answer can end it.
        assert_eq!(r.on_no_route(query_id, &b, &r1), late);
        r.asked(query_id, &[r1, r2]);
        // A stranger, another destination, an unknown query: ignored.
        assert_eq!(r.on_no_route(query_id, &b, &stranger), late);
        assert_eq!(r.on_no_route(query_id, &r2, &r1), late);
        assert_eq!(r.on_no_route(query_id + 1, &b, &r1), late);
        assert_eq!(r.on_no_route(query_id, &b, &r1), Ok(()));
        // The same peer twice does not count twice.
        assert_eq!(r.on_no_route(query_id, &b, &r1), Ok(()));
        assert!(r.is_pending(&b));
        assert_eq!(r.poll_event(), None);
        r.on_no_route(query_id, &b, &r2).unwrap();
        assert_eq!(
            r.poll_event(),
            Some(unanswered(
                b,
                vec![Waiter::Local],
                NoAnswer::Denied(vec![r1, r2])
            ))
        );
        assert!(!r.is_pending(&b));
        assert_eq!(r.poll_timeout(), None, "its expiry went with it");
        // Too many asked to track: negative answers are not believed.
        r.request(b, Waiter::Local, 0, 0).unwrap();
        let (query_id, _) = asked_for(&mut r, b);
        let many: Vec<PeerId> = (0..=MAX_ASKED as u32)
            .map(|i| id(&i.to_be_bytes()))
            .collect();
        r.asked(query_id, &many);
        assert_eq!(r.on_no_route(query_id, &b, &many[0]), late);
        r.abandon(query_id);
        assert!(matches!(
            r.poll_event(),
            Some(RouteEvent::Unanswered {
                why: NoAnswer::NobodyAsked,
                ..
            })
        ));
        assert!(!r.is_pending(&b));
        r.abandon(query_id);
        assert_eq!(r.poll_event(), None, "abandoned once");
    }

    /// Random requests, answers, denials, abandons and timeouts against a
    /// model that keeps every query with its waiters and scans for
    /// expiries: each query ends exactly once, with the waiters it had,
    /// in the way the model says, and the deadline is the earliest.
    #[test]
    fn every_query_ends_once_as_a_model_of_its_waiters_says() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(16);
        let mut r = resolver(8, 3, 50, 3);
        // query id -> (dest, waiters, expiry, asked)
        let mut model: HashMap<i32, (PeerId, Vec<Waiter>, Millis, Vec<PeerId>)> = HashMap::new();
        let mut now: Millis = 0;
        let mut ended = 0;
        for step in 0..20_000 {
            now += rng.gen_range(0..4);
            let dest = p(rng.gen_range(0..12));
            match rng.gen_range(0..10) {
                0..=3 => {
                    let waiter = if rng.gen_bool(0.3) {
                        Waiter::Local
                    } else {
                        Waiter::Remote {
                            peer: p(rng.gen_range(100..104)),
                            query_id: rng.gen_range(0..3),
                        }
                    };
                    // Expiries first, as the machine does.
                    let mut due: Vec<(Millis, i32)> = model
                        .iter()
                        .filter(|(_, q)| q.2 <= now)
                        .map(|(id, q)| (q.2, *id))
                        .collect();
                    due.sort();
                    let got = r.request(dest, waiter, 0, now);
                    for (_, id) in due {
                        let (d, w, _, _) = model.remove(&id).unwrap();
                        let e = r.poll_event();
                        assert_eq!(e, Some(unanswered(d, w, NoAnswer::TimedOut)), "step {step}");
                        ended += 1;
                    }
                    let full = model.len() >= 8;
                    let open = model.iter_mut().find(|(_, q)| q.0 == dest);
                    match open {
                        Some((_, q)) if q.1.contains(&waiter) => assert_eq!(got, Ok(())),
                        Some((_, q)) if q.1.len() >= 3 => {
                            assert_eq!(got, Err(RouteQueryError::TooManyWaiters))
                        }
                        Some((_, q)) => {
                            assert_eq!(got, Ok(()));
                            q.1.push(waiter);
                        }
                        None if full => {
                            assert_eq!(got, Err(RouteQueryError::TooManyPending(8)))
                        }
                        None => {
                            assert_eq!(got, Ok(()));
                            let (id, _) = asked_for(&mut r, dest);
                            let asked: Vec<PeerId> =
                                (0..rng.gen_range(0..3)).map(|i| p(200 + i)).collect();
                            r.asked(id, &asked);
                            model.insert(id, (dest, vec![waiter], now + 50, asked));
                        }
                    }
                    assert_eq!(r.poll_event(), None, "step {step}");
                }
                4 | 5 => {
                    let Some((&id, _)) = model.iter().find(|(_, q)| q.0 == dest) else {
                        continue;
                    };
                    if model[&id].2 <= now {
                        continue; // due: the timeout path takes it
                    }
                    r.on_answer(id, &dest).unwrap();
                    let (d, w, _, _) = model.remove(&id).unwrap();
                    let a = Answered {
                        dest: d,
                        waiters: w,
                    };
                    assert_eq!(r.poll_event(), Some(RouteEvent::Answered(a)));
                    assert_eq!(r.on_answer(id, &dest), Err(RouteQueryError::Late));
                    ended += 1;
                }
                6 | 7 => {
                    let Some((&id, q)) = model.iter().find(|(_, q)| q.0 == dest) else {
                        continue;
                    };
                    if q.2 <= now || q.3.is_empty() {
                        continue;
                    }
                    let asked = q.3.clone();
                    for (i, from) in asked.iter().enumerate() {
                        r.on_no_route(id, &dest, from).unwrap();
                        if i + 1 < asked.len() {
                            assert_eq!(r.poll_event(), None);
                        }
                    }
                    let (d, w, _, _) = model.remove(&id).unwrap();
                    assert_eq!(
                        r.poll_event(),
                        Some(unanswered(d, w, NoAnswer::Denied(asked)))
                    );
                    ended += 1;
                }
                8 => {
                    let Some((&id, q)) = model.iter().find(|(_, q)| q.0 == dest) else {
                        continue;
                    };
                    if q.2 <= now {
                        continue;
                    }
                    r.abandon(id);
                    let (d, w, _, _) = model.remove(&id).unwrap();
                    assert_eq!(
                        r.poll_event(),
                        Some(unanswered(d, w, NoAnswer::NobodyAsked))
                    );
                    ended += 1;
                }
                _ => {
                    let want = model.values().map(|q| q.2).min();
                    assert_eq!(r.poll_timeout(), want, "step {step}");
                    if let Some(t) = want {
                        r.handle_timeout(t);
                        let mut due: Vec<(Millis, i32)> = model
                            .iter()
                            .filter(|(_, q)| q.2 <= t)
                            .map(|(id, q)| (q.2, *id))
                            .collect();
                        due.sort();
                        for (_, id) in due {
                            let (d, w, _, _) = model.remove(&id).unwrap();
                            assert_eq!(r.poll_event(), Some(unanswered(d, w, NoAnswer::TimedOut)));
                            ended += 1;
                        }
                        now = now.max(t);
                    }
                }
            }
            assert_eq!(r.pending(), model.len(), "step {step}");
            assert_eq!(r.poll_event(), None, "step {step}");
        }
        assert!(ended > 2_000, "only {ended} queries ended");
        assert_eq!(r.dropped_events(), 0);
    }

    #[test]
    fn an_unpolled_event_queue_stays_bounded_and_counts_what_it_drops() {
        let cfg = RouteResolverConfig {
            max_pending: 2,
            ..RouteResolverConfig::default()
        };
        let mut r = RouteResolver::new(cfg);
        for i in 0..10 {
            r.request(p(i), Waiter::Local, 0, 0).unwrap();
            // Never polled: the Ask and the end of each query pile up.
            let _ = r.on_answer(i32::from(i) + 1, &p(i));
        }
        assert_eq!(r.pending(), 0);
        let mut n = 0;
        while r.poll_event().is_some() {
            n += 1;
        }
        assert_eq!(n, r.max_events());
        assert_eq!(r.dropped_events(), 20 - n as u64);
    }
}
