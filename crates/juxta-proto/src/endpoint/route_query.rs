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

use std::collections::HashMap;

use super::route_cache::check_route;
use super::signed_route::SignedRoute;
use crate::advertisement::tree::XmlElement;
use crate::advertisement::{parse_xml, AccessPointAdvertisement, AdvError, RouteAdvertisement};
use crate::id::PeerId;

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

/// What a negative answer did ([`RouteResolver::on_no_route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRouteOutcome {
    /// No such query in flight, another destination, or a peer it was not
    /// sent to: ignored.
    Ignored,
    /// Recorded; other asked peers may still answer.
    Noted,
    /// Every asked peer said no: the query is over, its waiters get a
    /// negative answer; `denied` lists who said no.
    Exhausted {
        /// The query's destination and waiters.
        answered: Answered,
        /// The peers that answered no (all that were asked).
        denied: Vec<PeerId>,
    },
}

/// What [`RouteResolver::request`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// A new query: send it (resolver query ID `query_id`, hop count
    /// `hop_count`) to the peers to ask.
    Send {
        /// The resolver query ID.
        query_id: i32,
        /// The resolver hop count to send.
        hop_count: u32,
        /// The document.
        query: Box<RouteQuery>,
    },
    /// A query for that destination is in flight; the waiter was added.
    Joined,
}

/// An answer matched to its query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The destination.
    pub dest: PeerId,
    /// Who waited for it.
    pub waiters: Vec<Waiter>,
}

/// Route queries in flight (see the module comment).
///
/// ```
/// use juxta_proto::endpoint::route_query::*;
/// use juxta_proto::id::PeerId;
/// let b = PeerId::from_public_key_spki(b"b");
/// let mut r = RouteResolver::new(RouteResolverConfig::default());
/// let Requested::Send { query_id, .. } = r.request(b, Waiter::Local, 0, 0).unwrap() else { panic!() };
/// assert_eq!(r.request(b, Waiter::Local, 0, 10).unwrap(), Requested::Joined);
/// let a = r.on_answer(query_id, &b).unwrap();
/// assert_eq!(a.waiters, vec![Waiter::Local]);
/// ```
#[derive(Debug, Clone)]
pub struct RouteResolver {
    cfg: RouteResolverConfig,
    next_id: i32,
    pending: HashMap<i32, Pending>,
    by_dest: HashMap<PeerId, i32>,
}

impl RouteResolver {
    /// An idle resolver.
    pub fn new(cfg: RouteResolverConfig) -> RouteResolver {
        RouteResolver {
            cfg,
            next_id: 1,
            pending: HashMap::new(),
            by_dest: HashMap::new(),
        }
    }

    /// The bounds.
    pub fn config(&self) -> &RouteResolverConfig {
        &self.cfg
    }

    /// `waiter` wants a route to `dest`; `hop_count` is the incoming
    /// query's `HC` (0 for a local request).
    pub fn request(
        &mut self,
        dest: PeerId,
        waiter: Waiter,
        hop_count: u32,
        now_ms: u64,
    ) -> Result<Requested, RouteQueryError> {
        self.expire(now_ms);
        if hop_count >= self.cfg.max_hop_count {
            return Err(RouteQueryError::HopLimit(hop_count));
        }
        if let Some(id) = self.by_dest.get(&dest) {
            let p = self.pending.get_mut(id).expect("indexed query");
            if !p.waiters.contains(&waiter) {
                if p.waiters.len() >= self.cfg.max_waiters {
                    return Err(RouteQueryError::TooManyWaiters);
                }
                p.waiters.push(waiter);
            }
            return Ok(Requested::Joined);
        }
        if self.pending.len() >= self.cfg.max_pending {
            return Err(RouteQueryError::TooManyPending(self.pending.len()));
        }
        let query_id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        self.pending.insert(
            query_id,
            Pending {
                dest,
                waiters: vec![waiter],
                expires_ms: now_ms.saturating_add(self.cfg.timeout_ms),
                asked: Vec::new(),
                denied: Vec::new(),
            },
        );
        self.by_dest.insert(dest, query_id);
        Ok(Requested::Send {
            query_id,
            hop_count: match waiter {
                Waiter::Local => 0,
                Waiter::Remote { .. } => hop_count + 1,
            },
            query: Box::new(RouteQuery::new(dest)),
        })
    }

    /// An answer to query `query_id` naming a route to `dest`: `None` if
    /// no such query is in flight (late, or for another destination).
    pub fn on_answer(&mut self, query_id: i32, dest: &PeerId) -> Option<Answered> {
        match self.pending.get(&query_id) {
            Some(p) if p.dest == *dest => {}
            _ => return None,
        }
        let p = self.pending.remove(&query_id)?;
        self.by_dest.remove(&p.dest);
        Some(Answered {
            dest: p.dest,
            waiters: p.waiters,
        })
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

    /// Ends query `query_id` at once (nobody could be asked): its waiters.
    pub fn abandon(&mut self, query_id: i32) -> Option<Answered> {
        let p = self.pending.remove(&query_id)?;
        self.by_dest.remove(&p.dest);
        Some(Answered {
            dest: p.dest,
            waiters: p.waiters,
        })
    }

    /// `from` answered query `query_id` that it knows no route to `dest`.
    /// When every peer the query went to said so, the query ends.
    ///
    /// ```
    /// use juxta_proto::endpoint::route_query::*;
    /// use juxta_proto::id::PeerId;
    /// let (b, r1, r2) = (PeerId::from_public_key_spki(b"b"), PeerId::from_public_key_spki(b"r1"),
    ///     PeerId::from_public_key_spki(b"r2"));
    /// let mut r = RouteResolver::new(RouteResolverConfig::default());
    /// let Requested::Send { query_id, .. } = r.request(b, Waiter::Local, 0, 0).unwrap() else { panic!() };
    /// r.asked(query_id, &[r1, r2]);
    /// assert_eq!(r.on_no_route(query_id, &b, &r1), NoRouteOutcome::Noted);
    /// assert!(matches!(r.on_no_route(query_id, &b, &r2), NoRouteOutcome::Exhausted { .. }));
    /// assert!(!r.is_pending(&b));
    /// ```
    pub fn on_no_route(&mut self, query_id: i32, dest: &PeerId, from: &PeerId) -> NoRouteOutcome {
        let Some(p) = self.pending.get_mut(&query_id) else {
            return NoRouteOutcome::Ignored;
        };
        if p.dest != *dest || !p.asked.contains(from) {
            return NoRouteOutcome::Ignored;
        }
        if !p.denied.contains(from) {
            p.denied.push(*from);
        }
        if p.denied.len() < p.asked.len() {
            return NoRouteOutcome::Noted;
        }
        let denied = std::mem::take(&mut p.denied);
        match self.abandon(query_id) {
            Some(answered) => NoRouteOutcome::Exhausted { answered, denied },
            None => NoRouteOutcome::Ignored,
        }
    }

    /// Whether a query for `dest` is in flight.
    pub fn is_pending(&self, dest: &PeerId) -> bool {
        self.by_dest.contains_key(dest)
    }

    /// Drops the queries that timed out; returns them.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Answered> {
        let gone: Vec<i32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.expires_ms <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        gone.into_iter()
            .filter_map(|id| {
                let p = self.pending.remove(&id)?;
                self.by_dest.remove(&p.dest);
                Some(Answered {
                    dest: p.dest,
                    waiters: p.waiters,
                })
            })
            .collect()
    }

    /// Queries in flight.
    pub fn pending(&self) -> usize {
        self.pending.len()
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

    #[test]
    fn resolver_bounds_dedup_and_timeouts() {
        let cfg = RouteResolverConfig {
            max_pending: 2,
            max_waiters: 2,
            timeout_ms: 100,
            max_hop_count: 2,
        };
        let mut r = RouteResolver::new(cfg);
        let Requested::Send {
            query_id,
            hop_count,
            ..
        } = r.request(p(1), Waiter::Local, 0, 0).unwrap()
        else {
            panic!("new query expected")
        };
        assert_eq!(hop_count, 0);
        let remote = Waiter::Remote {
            peer: p(7),
            query_id: 44,
        };
        assert_eq!(r.request(p(1), remote, 0, 1).unwrap(), Requested::Joined);
        let third = Waiter::Remote {
            peer: p(8),
            query_id: 45,
        };
        assert_eq!(
            r.request(p(1), third, 0, 1),
            Err(RouteQueryError::TooManyWaiters)
        );
        let Requested::Send { hop_count, .. } = r.request(p(2), third, 1, 2).unwrap() else {
            panic!()
        };
        assert_eq!(hop_count, 2, "forwarded one hop further");
        assert_eq!(
            r.request(p(3), Waiter::Local, 0, 3),
            Err(RouteQueryError::TooManyPending(2))
        );
        assert_eq!(
            r.request(p(4), third, 2, 3),
            Err(RouteQueryError::HopLimit(2))
        );
        assert!(r.on_answer(query_id, &p(9)).is_none(), "wrong destination");
        let a = r.on_answer(query_id, &p(1)).unwrap();
        assert_eq!(a.waiters, vec![Waiter::Local, remote]);
        assert!(r.on_answer(query_id, &p(1)).is_none(), "answered once");
        let timed_out = r.expire(1_000);
        assert_eq!(timed_out.len(), 1);
        assert_eq!(timed_out[0].dest, p(2));
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn negative_answers_end_a_query_only_when_every_asked_peer_said_no() {
        let id = |s: &[u8]| PeerId::from_public_key_spki(s);
        let (b, r1, r2, stranger) = (id(b"b"), id(b"r1"), id(b"r2"), id(b"x"));
        let mut r = RouteResolver::new(RouteResolverConfig::default());
        let Requested::Send { query_id, .. } = r.request(b, Waiter::Local, 0, 0).unwrap() else {
            panic!("a new query")
        };
        // Nothing recorded as asked: no answer can end it.
        assert_eq!(r.on_no_route(query_id, &b, &r1), NoRouteOutcome::Ignored);
        r.asked(query_id, &[r1, r2]);
        // A stranger, another destination, an unknown query: ignored.
        assert_eq!(
            r.on_no_route(query_id, &b, &stranger),
            NoRouteOutcome::Ignored
        );
        assert_eq!(r.on_no_route(query_id, &r2, &r1), NoRouteOutcome::Ignored);
        assert_eq!(
            r.on_no_route(query_id + 1, &b, &r1),
            NoRouteOutcome::Ignored
        );
        assert_eq!(r.on_no_route(query_id, &b, &r1), NoRouteOutcome::Noted);
        // The same peer twice does not count twice.
        assert_eq!(r.on_no_route(query_id, &b, &r1), NoRouteOutcome::Noted);
        assert!(r.is_pending(&b));
        match r.on_no_route(query_id, &b, &r2) {
            NoRouteOutcome::Exhausted { answered, denied } => {
                assert_eq!(answered.dest, b);
                assert_eq!(answered.waiters, vec![Waiter::Local]);
                assert_eq!(denied, vec![r1, r2]);
            }
            other => panic!("{other:?}"),
        }
        assert!(!r.is_pending(&b));
        // Too many asked to track: negative answers are not believed.
        let Requested::Send { query_id, .. } = r.request(b, Waiter::Local, 0, 0).unwrap() else {
            panic!("a new query")
        };
        let many: Vec<PeerId> = (0..=MAX_ASKED as u32)
            .map(|i| id(&i.to_be_bytes()))
            .collect();
        r.asked(query_id, &many);
        assert_eq!(
            r.on_no_route(query_id, &b, &many[0]),
            NoRouteOutcome::Ignored
        );
        assert!(r.abandon(query_id).is_some());
        assert!(!r.is_pending(&b));
    }
}
