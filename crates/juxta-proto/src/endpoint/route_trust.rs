//! Which routes a peer believes and which it vouches for: the router's
//! trust rules, sans-IO (facts and time in, decisions out).
//!
//! Why it exists: a route says through whom traffic for a peer goes, so a
//! route believed from anybody lets any peer draw another's traffic
//! through itself. The rules here decide, from what the runtime reports
//! (who is connected, who is leased, what the route cache holds, which
//! relay or rendezvous this peer leases), which route this peer vouches
//! for in an answer ([`vouch`]), whether a route answer is believed
//! ([`believe_answer`]), whether a routed message teaches the route back
//! to its origin ([`learn_back`]), and which signed routes it keeps and
//! hands on ([`RouteTrust`]). The runtime (`juxta::relay::route`) asks
//! these and does the I/O; every rule is tested here without a socket.
//!
//! ```
//! use juxta_proto::endpoint::route_trust::{vouch, Reach};
//! use juxta_proto::id::PeerId;
//! let (me, edge) = (PeerId::from_public_key_spki(b"me"), PeerId::from_public_key_spki(b"e"));
//! // A relay vouches for an edge leased to it: through itself.
//! let ra = vouch(me, "tcp://127.0.0.1:9701", true, edge, Reach::Leased).unwrap();
//! assert_eq!(ra.hops[0].peer_id, Some(me));
//! // A peer that does not forward vouches for nobody else.
//! assert!(vouch(me, "tcp://127.0.0.1:9701", false, edge, Reach::Connected).is_none());
//! ```

use std::collections::HashMap;

use crate::advertisement::RouteAdvertisement;
use crate::endpoint::forward::{self, Inspected};
use crate::endpoint::route_query::{route_through, RouteResponse};
use crate::endpoint::signed_route::{SignedRoute, SignedRouteError};
use crate::id::PeerId;
use crate::identity::Identity;

/// Most signed routes of other peers kept ([`RouteTrust::keep_proof`]).
pub const MAX_PROOFS: usize = 4096;
/// How long this peer's own signed route is valid.
pub const OWN_ROUTE_LIFETIME_MS: u64 = 60 * 60 * 1000;
/// How long a route back, once looked at, is not looked at again for the
/// same link, origin and reverse hops ([`RouteTrust::look_again`]).
pub const LEARN_AGAIN_MS: u64 = 1_000;
/// Most destinations whose searches ended by negative answers are kept
/// for the local searches to read ([`RouteTrust::deny`]).
pub const MAX_DENIED: usize = 256;

/// How this peer reaches a destination other than itself, as the runtime
/// sees it now (the first that holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach<'a> {
    /// The destination holds a relay lease here.
    Leased,
    /// A connection to the destination is open.
    Connected,
    /// The route cache has these hops to it (after this peer).
    Cached(&'a [PeerId]),
    /// Nothing.
    Unknown,
}

/// The route this peer (`me`, reachable at `my_address`) vouches for to
/// `dest`, another peer, in a route answer: only a peer that forwards (a
/// relay) vouches for others, always through itself: to a leased edge
/// with the edge's `relay://` address, to a connected peer directly, to a
/// peer with a cached route along it. A peer's own route is its own
/// business (see [`RouteTrust::own_signed`]).
pub fn vouch(
    me: PeerId,
    my_address: &str,
    forwards: bool,
    dest: PeerId,
    reach: Reach<'_>,
) -> Option<RouteAdvertisement> {
    if !forwards || dest == me {
        return None;
    }
    let me_hop = (me, vec![my_address.to_string()]);
    match reach {
        Reach::Leased => Some(route_through(
            dest,
            vec![format!("relay://{}", me.unique_value())],
            &[me_hop],
        )),
        Reach::Connected => Some(route_through(dest, Vec::new(), &[me_hop])),
        Reach::Cached(hops) => {
            let mut all = vec![me_hop];
            all.extend(hops.iter().map(|h| (*h, Vec::new())));
            Some(route_through(dest, Vec::new(), &all))
        }
        Reach::Unknown => None,
    }
}

/// Why a route was not learned: nothing vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unvouched {
    /// A lease request's signed route is longer than a relay control
    /// element may be.
    #[error("lease route too long")]
    LeaseRouteTooLong,
    /// A lease request's signed route is not the edge's own, or does not
    /// name this relay as its last hop.
    #[error("lease route for another path")]
    LeaseRouteOtherPath,
    /// A lease request's signed route does not verify (or has expired).
    #[error("lease route signature")]
    LeaseRouteSignature,
    /// A route answer from a peer that does not carry this peer's traffic,
    /// without the destination's signature over its last hop.
    #[error("route answer")]
    Answer,
}

/// A route answer, as the runtime saw it.
#[derive(Debug, Clone, Copy)]
pub struct AnswerFacts<'a> {
    /// The hops the answer gives (after this peer), first one first.
    pub hops: &'a [PeerId],
    /// The peer that answered.
    pub answering: PeerId,
    /// Whether the answering peer is the relay or the rendezvous this peer
    /// leases (it carries this peer's traffic anyway).
    pub answering_carries_our_traffic: bool,
    /// The destination's own signed route from the answer, verified
    /// ([`answer_proof`]).
    pub signed: Option<&'a SignedRoute>,
    /// Whether the user accepts unsigned routes.
    pub accept_unsigned: bool,
}

/// Whether a route answer is believed: it comes from the relay or the
/// rendezvous this peer leases and the route starts there; or the
/// destination signed a route naming the last hop as its relay; or the
/// user accepts unsigned routes.
pub fn believe_answer(a: &AnswerFacts<'_>) -> Result<(), Unvouched> {
    let own_relay = a.hops.first() == Some(&a.answering) && a.answering_carries_our_traffic;
    let signed = a
        .signed
        .zip(a.hops.last())
        .is_some_and(|(s, last)| s.allows_last_hop(last));
    if own_relay || signed || a.accept_unsigned {
        Ok(())
    } else {
        Err(Unvouched::Answer)
    }
}

/// The destination's own signed route in an answer about `dest`, verified
/// at `now_unix_ms`: `None` when there is none, it does not verify
/// (`Err`), or it is another peer's.
pub fn answer_proof(
    rr: &RouteResponse,
    dest: &PeerId,
    now_unix_ms: u64,
) -> Result<Option<SignedRoute>, SignedRouteError> {
    match rr.signed_dest(now_unix_ms) {
        Some(Ok(s)) if s.dest() == *dest => Ok(Some(s)),
        Some(Ok(_)) | None => Ok(None),
        Some(Err(e)) => Err(e),
    }
}

/// A routed message's facts the route back depends on, as the runtime
/// sees them.
#[derive(Debug, Clone, Copy)]
pub struct BackFacts {
    /// A connection to the origin is open (it needs no route).
    pub origin_connected: bool,
    /// The link's peer is the relay or rendezvous this peer leases.
    pub link_carries_our_traffic: bool,
    /// Whether the user accepts unsigned routes.
    pub accept_unsigned: bool,
}

/// The route back to the origin of a verified routed message `m` that
/// came over `link`, if it is to be learned: not from the link's own peer
/// (the link is the route), not to an origin this peer is connected to,
/// and only through the relay or rendezvous this peer leases unless
/// unsigned routes are accepted. The router fingerprint that "verifies"
/// the origin is a bearer token anyone who saw it can replay, so a reverse
/// hop proves nothing about the path.
pub fn learn_back(
    local: &PeerId,
    link: &PeerId,
    m: &Inspected,
    facts: BackFacts,
) -> Option<Vec<PeerId>> {
    if m.src == *link || facts.origin_connected {
        return None;
    }
    if !facts.link_carries_our_traffic && !facts.accept_unsigned {
        return None;
    }
    forward::route_back(local, link, m)
}

/// A route back looked at: (link, origin, reverse hops, when).
type Looked = (PeerId, PeerId, Vec<PeerId>, u64);

/// The routes back looked at last, a few, oldest replaced first.
#[derive(Debug, Default)]
struct LookedAt {
    slots: [Option<Looked>; 8],
    next: usize,
}

/// The router's trust state: the signed routes it holds and hands on, its
/// own signed route, the routes back it looked at last, and the searches
/// that ended with every asked peer saying no. Every part is bounded.
#[derive(Debug, Default)]
pub struct RouteTrust {
    proofs: HashMap<PeerId, SignedRoute>,
    own: Option<SignedRoute>,
    looked_at: LookedAt,
    denied: HashMap<PeerId, Vec<PeerId>>,
}

impl RouteTrust {
    /// Empty.
    pub fn new() -> RouteTrust {
        RouteTrust::default()
    }

    /// Keeps another peer's signed route (already verified), within
    /// [`MAX_PROOFS`] (expired ones make room first); `false` when full.
    pub fn keep_proof(&mut self, s: SignedRoute, now_unix_ms: u64) -> bool {
        if !self.proofs.contains_key(&s.dest()) && self.proofs.len() >= MAX_PROOFS {
            self.proofs.retain(|_, v| v.is_valid_at(now_unix_ms));
            if self.proofs.len() >= MAX_PROOFS {
                return false;
            }
        }
        self.proofs.insert(s.dest(), s);
        true
    }

    /// The signed route of `dest` (another peer) held, if still valid.
    pub fn proof_for(&self, dest: &PeerId, now_unix_ms: u64) -> Option<&SignedRoute> {
        self.proofs.get(dest).filter(|s| s.is_valid_at(now_unix_ms))
    }

    /// How many signed routes of other peers are held.
    pub fn proofs(&self) -> usize {
        self.proofs.len()
    }

    /// This peer's own `route`, signed: the one held while the route is
    /// unchanged and valid for more than half of
    /// [`OWN_ROUTE_LIFETIME_MS`], else a new signature (one RSA
    /// signature).
    pub fn own_signed(
        &mut self,
        route: RouteAdvertisement,
        identity: &Identity,
        now_unix_ms: u64,
    ) -> Result<&SignedRoute, SignedRouteError> {
        let fresh = self.own.as_ref().is_some_and(|s| {
            *s.route() == route
                && s.expires_ms().saturating_sub(now_unix_ms) > OWN_ROUTE_LIFETIME_MS / 2
        });
        if !fresh {
            let s = SignedRoute::sign(route, identity, now_unix_ms, OWN_ROUTE_LIFETIME_MS)?;
            self.own = Some(s);
        }
        Ok(self.own.as_ref().expect("set above"))
    }

    /// A relay (`me`) granted `edge` a lease whose request carried
    /// `signed_xml` (the request's signed route, or why it could not be
    /// read): keeps it if it is the edge's own, names this relay as its
    /// last hop, and verifies at `now_unix_ms`. `Ok(false)`: the request
    /// carried none.
    pub fn lease_route<E>(
        &mut self,
        signed_xml: Result<Option<&str>, E>,
        edge: &PeerId,
        me: &PeerId,
        now_unix_ms: u64,
    ) -> Result<bool, Unvouched> {
        let xml = match signed_xml {
            Ok(Some(x)) => x,
            Ok(None) => return Ok(false),
            Err(_) => return Err(Unvouched::LeaseRouteTooLong),
        };
        match SignedRoute::parse(xml, now_unix_ms) {
            Ok(s) if s.dest() == *edge && s.allows_last_hop(me) => {
                Ok(self.keep_proof(s, now_unix_ms))
            }
            Ok(_) => Err(Unvouched::LeaseRouteOtherPath),
            Err(_) => Err(Unvouched::LeaseRouteSignature),
        }
    }

    /// Whether the route back from `origin` over `link` through `reverse`
    /// (a compact header's reverse hops) is worth looking at `now_ms`: not
    /// looked at within [`LEARN_AGAIN_MS`] (and remembered as looked at
    /// now if so). A stream of routed messages from one origin carries one
    /// route back, message after message; a route removed meanwhile comes
    /// back from the stream's next message after that. A clock that goes
    /// back never makes one stale.
    pub fn look_again(
        &mut self,
        link: &PeerId,
        origin: &PeerId,
        reverse: &[PeerId],
        now_ms: u64,
    ) -> bool {
        let l = &mut self.looked_at;
        let seen = l
            .slots
            .iter_mut()
            .flatten()
            .find(|(k, s, r, _)| s == origin && k == link && r.as_slice() == reverse);
        match seen {
            Some((_, _, _, at)) if now_ms.saturating_sub(*at) < LEARN_AGAIN_MS => false,
            Some((_, _, _, at)) => {
                *at = now_ms;
                true
            }
            None => {
                let i = l.next % l.slots.len();
                l.slots[i] = Some((*link, *origin, reverse.to_vec(), now_ms));
                l.next = (i + 1) % l.slots.len();
                true
            }
        }
    }

    /// A local search for `dest` ended with every asked peer (`peers`)
    /// saying no: kept for the search to read ([`RouteTrust::take_denied`]),
    /// within [`MAX_DENIED`] (all forgotten when full: each entry is read
    /// by the search it ends, so a full table holds only searches that
    /// gave up meanwhile).
    pub fn deny(&mut self, dest: PeerId, peers: Vec<PeerId>) {
        if self.denied.len() >= MAX_DENIED && !self.denied.contains_key(&dest) {
            self.denied.clear();
        }
        self.denied.insert(dest, peers);
    }

    /// The peers that said no to the search for `dest`, if it ended so.
    pub fn take_denied(&mut self, dest: &PeerId) -> Option<Vec<PeerId>> {
        self.denied.remove(dest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::compact_router::CompactRouterHeader;
    use crate::endpoint::forward::Header;
    use crate::endpoint::signed_route::tests::{ids, through};

    fn p(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n])
    }

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn only_a_forwarding_peer_vouches_and_always_through_itself() {
        let (me, d, h) = (p(1), p(2), p(3));
        let addr = "tcp://127.0.0.1:9701";
        for reach in [Reach::Leased, Reach::Connected, Reach::Cached(&[h])] {
            assert_eq!(vouch(me, addr, false, d, reach), None);
            let ra = vouch(me, addr, true, d, reach).unwrap();
            assert_eq!(ra.dest_peer, Some(d));
            assert_eq!(ra.hops[0].peer_id, Some(me));
            assert_eq!(ra.hops[0].addresses, vec![addr.to_string()]);
        }
        // Leased: the edge is reached at this relay's relay:// address.
        let leased = vouch(me, addr, true, d, Reach::Leased).unwrap();
        assert_eq!(
            leased.dest.addresses,
            vec![format!("relay://{}", me.unique_value())]
        );
        assert_eq!(leased.hops.len(), 1);
        // Connected: directly after this peer.
        let direct = vouch(me, addr, true, d, Reach::Connected).unwrap();
        assert!(direct.dest.addresses.is_empty());
        assert_eq!(direct.hops.len(), 1);
        // Cached: this peer, then the cached hops.
        let cached = vouch(me, addr, true, d, Reach::Cached(&[h, p(4)])).unwrap();
        let hops: Vec<_> = cached.hops.iter().map(|a| a.peer_id).collect();
        assert_eq!(hops, vec![Some(me), Some(h), Some(p(4))]);
        // Nothing known, or itself: no vouching.
        assert_eq!(vouch(me, addr, true, d, Reach::Unknown), None);
        assert_eq!(vouch(me, addr, true, me, Reach::Connected), None);
    }

    #[test]
    fn an_answer_is_believed_from_our_own_relay_or_with_the_destinations_signature() {
        let (edge, relay) = ids();
        let (d, r, stranger) = (*edge.peer_id(), *relay.peer_id(), p(9));
        let signed = SignedRoute::sign(through(d, r), edge, NOW, 60_000).unwrap();
        let facts = |hops: &'static [PeerId], answering, carries, signed, accept| AnswerFacts {
            hops,
            answering,
            answering_carries_our_traffic: carries,
            signed,
            accept_unsigned: accept,
        };
        let via_r: &'static [PeerId] = Box::leak(vec![r].into_boxed_slice());
        let via_s: &'static [PeerId] = Box::leak(vec![stranger].into_boxed_slice());
        let via_s_r: &'static [PeerId] = Box::leak(vec![stranger, r].into_boxed_slice());
        // Our relay, route starting at it.
        assert_eq!(believe_answer(&facts(via_r, r, true, None, false)), Ok(()));
        // Our relay, but a route starting elsewhere: not on its word.
        assert_eq!(
            believe_answer(&facts(via_s, r, true, None, false)),
            Err(Unvouched::Answer)
        );
        // A stranger's answer: only with the destination's signature over
        // the last hop.
        assert_eq!(
            believe_answer(&facts(via_s, stranger, false, None, false)),
            Err(Unvouched::Answer)
        );
        assert_eq!(
            believe_answer(&facts(via_s_r, stranger, false, Some(&signed), false)),
            Ok(())
        );
        assert_eq!(
            believe_answer(&facts(via_s, stranger, false, Some(&signed), false)),
            Err(Unvouched::Answer)
        );
        // The user's choice overrides.
        assert_eq!(
            believe_answer(&facts(via_s, stranger, false, None, true)),
            Ok(())
        );
        // No hops at all: nothing to believe but the user's choice.
        assert_eq!(
            believe_answer(&facts(&[], r, true, Some(&signed), false)),
            Err(Unvouched::Answer)
        );
    }

    #[test]
    fn an_answers_proof_counts_only_for_its_destination() {
        let (edge, relay) = ids();
        let (d, r) = (*edge.peer_id(), *relay.peer_id());
        let s = SignedRoute::sign(through(d, r), edge, NOW, 60_000).unwrap();
        let rr = |signed_dest| RouteResponse {
            dest_route: through(d, r),
            src_route: None,
            signed_dest,
        };
        assert_eq!(answer_proof(&rr(None), &d, NOW).unwrap(), None);
        let got = answer_proof(&rr(Some(s.to_element())), &d, NOW).unwrap();
        assert_eq!(got.map(|g| g.dest()), Some(d));
        // Another destination's signed route vouches for nothing here.
        assert_eq!(
            answer_proof(&rr(Some(s.to_element())), &r, NOW).unwrap(),
            None
        );
        // Expired: an error, not a proof.
        assert!(answer_proof(&rr(Some(s.to_element())), &d, NOW + 120_000).is_err());
    }

    #[test]
    fn a_relay_keeps_an_edges_lease_route_only_if_it_is_the_edges_own_through_it() {
        let (edge, relay) = ids();
        let (e, r) = (*edge.peer_id(), *relay.peer_id());
        let mut t = RouteTrust::new();
        let xml = SignedRoute::sign(through(e, r), edge, NOW, 60_000)
            .unwrap()
            .to_element()
            .to_document();
        assert_eq!(t.lease_route::<()>(Ok(None), &e, &r, NOW), Ok(false));
        assert_eq!(
            t.lease_route::<()>(Err(()), &e, &r, NOW),
            Err(Unvouched::LeaseRouteTooLong)
        );
        // Presented by another peer, or naming another relay.
        assert_eq!(
            t.lease_route::<()>(Ok(Some(&xml)), &p(7), &r, NOW),
            Err(Unvouched::LeaseRouteOtherPath)
        );
        assert_eq!(
            t.lease_route::<()>(Ok(Some(&xml)), &e, &p(7), NOW),
            Err(Unvouched::LeaseRouteOtherPath)
        );
        // Tampered or expired.
        let tampered = xml.replace("127.0.0.1:1", "127.0.0.1:2");
        assert_eq!(
            t.lease_route::<()>(Ok(Some(&tampered)), &e, &r, NOW),
            Err(Unvouched::LeaseRouteSignature)
        );
        assert_eq!(
            t.lease_route::<()>(Ok(Some(&xml)), &e, &r, NOW + 120_000),
            Err(Unvouched::LeaseRouteSignature)
        );
        assert_eq!(t.proofs(), 0);
        assert_eq!(t.lease_route::<()>(Ok(Some(&xml)), &e, &r, NOW), Ok(true));
        assert_eq!(t.proof_for(&e, NOW).map(SignedRoute::dest), Some(e));
        // Handed on only while valid.
        assert!(t.proof_for(&e, NOW + 120_000).is_none());
    }

    #[test]
    fn proofs_are_bounded_and_expired_ones_make_room() {
        let (edge, relay) = ids();
        let (e, r) = (*edge.peer_id(), *relay.peer_id());
        let mut t = RouteTrust::new();
        let s = SignedRoute::sign(through(e, r), edge, NOW, 60_000).unwrap();
        // Fill with the same proof under other keys (only the count
        // matters to the bound).
        for i in 0..MAX_PROOFS {
            let k = PeerId::from_public_key_spki(&(i as u32).to_be_bytes());
            t.proofs.insert(k, s.clone());
        }
        let other = SignedRoute::sign(through(*relay.peer_id(), e), relay, NOW, 60_000).unwrap();
        // Full of valid proofs: refused.
        assert!(!t.keep_proof(other.clone(), NOW));
        assert_eq!(t.proofs(), MAX_PROOFS);
        // Once they expired, they make room.
        assert!(t.keep_proof(
            SignedRoute::sign(through(*relay.peer_id(), e), relay, NOW + 120_000, 60_000).unwrap(),
            NOW + 120_000
        ));
        assert_eq!(t.proofs(), 1);
        // Replacing a held destination's proof never needs room.
        assert!(t.keep_proof(other, NOW));
        assert_eq!(t.proofs(), 1);
    }

    #[test]
    fn the_own_route_is_signed_again_only_when_it_changes_or_nears_expiry() {
        let (edge, relay) = ids();
        let (e, r) = (*edge.peer_id(), *relay.peer_id());
        let mut t = RouteTrust::new();
        let direct = RouteAdvertisement::direct(e, ["tcp://127.0.0.1:5".to_string()]);
        let first = t
            .own_signed(direct.clone(), edge, NOW)
            .unwrap()
            .expires_ms();
        assert_eq!(first, NOW + OWN_ROUTE_LIFETIME_MS);
        // Unchanged, more than half its life left: the same signature.
        let later = NOW + OWN_ROUTE_LIFETIME_MS / 2 - 1;
        assert_eq!(
            t.own_signed(direct.clone(), edge, later)
                .unwrap()
                .expires_ms(),
            first
        );
        // Past half its life: signed again.
        let late = NOW + OWN_ROUTE_LIFETIME_MS / 2;
        assert_eq!(
            t.own_signed(direct.clone(), edge, late)
                .unwrap()
                .expires_ms(),
            late + OWN_ROUTE_LIFETIME_MS
        );
        // Changed (now behind a relay): signed again, the new route.
        let s = t.own_signed(through(e, r), edge, late + 1).unwrap();
        assert_eq!(*s.route(), through(e, r));
        // Another peer's route is never signed as our own.
        assert!(t.own_signed(through(r, e), edge, late + 2).is_err());
    }

    fn routed(src: PeerId, dest: PeerId, reverse: Vec<PeerId>) -> Inspected {
        Inspected {
            header: Header::Compact(std::sync::Arc::new(CompactRouterHeader {
                src,
                dest,
                service: "svc".into(),
                param: None,
                last: reverse.last().copied().unwrap_or(src),
                forward: Vec::new(),
                reverse,
            })),
            src,
            dest,
        }
    }

    #[test]
    fn a_route_back_is_learned_only_through_the_peer_that_carries_our_traffic() {
        let (me, relay, origin) = (p(1), p(2), p(3));
        let m = routed(origin, me, vec![relay]);
        let facts = |connected, carries, accept| BackFacts {
            origin_connected: connected,
            link_carries_our_traffic: carries,
            accept_unsigned: accept,
        };
        assert_eq!(
            learn_back(&me, &relay, &m, facts(false, true, false)),
            Some(vec![relay])
        );
        // Any other link: only if the user accepts unsigned routes.
        assert_eq!(
            learn_back(&me, &relay, &m, facts(false, false, false)),
            None
        );
        assert_eq!(
            learn_back(&me, &relay, &m, facts(false, false, true)),
            Some(vec![relay])
        );
        // Connected to the origin, or the origin is the link: no route.
        assert_eq!(learn_back(&me, &relay, &m, facts(true, true, false)), None);
        let own = routed(relay, me, Vec::new());
        assert_eq!(
            learn_back(&me, &relay, &own, facts(false, true, true)),
            None
        );
        // A route back through ourselves is refused (a loop).
        let looped = routed(origin, me, vec![me, relay]);
        assert_eq!(
            learn_back(&me, &relay, &looped, facts(false, true, true)),
            None
        );
    }

    #[test]
    fn a_route_back_is_looked_at_again_only_after_a_while_or_when_it_changes() {
        let mut r = RouteTrust::new();
        let (link, a, b) = (p(1), p(2), p(3));
        assert!(r.look_again(&link, &a, &[link], 0));
        assert!(!r.look_again(&link, &a, &[link], 1));
        assert!(!r.look_again(&link, &a, &[link], LEARN_AGAIN_MS - 1));
        assert!(r.look_again(&link, &a, &[link], LEARN_AGAIN_MS));
        assert!(!r.look_again(&link, &a, &[link], LEARN_AGAIN_MS + 1));
        // Another origin, another link, other hops: each its own.
        assert!(r.look_again(&link, &b, &[link], 2));
        assert!(r.look_again(&b, &a, &[b], 2));
        assert!(r.look_again(&link, &a, &[link, b], 2));
        assert!(r.look_again(&link, &a, &[], 2));
        // A clock that goes back never makes one stale.
        assert!(!r.look_again(&link, &a, &[link], 0));
        // Bounded: past eight routes the oldest is forgotten, then new.
        for n in 10..20 {
            assert!(r.look_again(&link, &p(n), &[link], 3));
        }
        assert!(r.look_again(&link, &a, &[link], 4));
        assert_eq!(r.looked_at.slots.iter().flatten().count(), 8);
    }

    #[test]
    fn denied_searches_are_read_once_and_bounded() {
        let mut t = RouteTrust::new();
        t.deny(p(1), vec![p(2), p(3)]);
        assert_eq!(t.take_denied(&p(1)), Some(vec![p(2), p(3)]));
        assert_eq!(t.take_denied(&p(1)), None);
        for i in 0..MAX_DENIED {
            t.deny(
                PeerId::from_public_key_spki(&(i as u32).to_be_bytes()),
                vec![],
            );
        }
        assert_eq!(t.denied.len(), MAX_DENIED);
        // A new one past the bound: the old ones are dropped, it is kept.
        t.deny(p(1), vec![p(4)]);
        assert_eq!(t.denied.len(), 1);
        assert_eq!(t.take_denied(&p(1)), Some(vec![p(4)]));
        // Updating a held one never clears.
        t.deny(p(5), vec![]);
        t.deny(p(5), vec![p(6)]);
        assert_eq!(t.take_denied(&p(5)), Some(vec![p(6)]));
    }
}
