//! Routes signed by their destination.
//!
//! A route answer names the peers a message to some destination should go
//! through. Believing any answer lets any peer put itself on the path to
//! any other (and read or drop what goes there). A Juxta peer therefore
//! signs its own route advertisement (the relays it can be reached
//! through) with its key, as JXSE signs advertisements (`XMLSignatureInfo`
//! / `XMLSignature`, SHA1withRSA, the key embedded; see
//! [`crate::advertisement::signed`]), adding an `Expires` child (Unix ms)
//! so that an old signed route cannot be replayed for ever. The signed
//! route travels with route answers (`SignedDst` in `jxta:ERR`) and to the
//! relays the peer leases; a receiver takes a route through a relay only
//! when the destination's signature names that relay as the last hop
//! (see [`SignedRoute::allows_last_hop`]).
//!
//! ```
//! use juxta_proto::advertisement::RouteAdvertisement;
//! use juxta_proto::endpoint::signed_route::SignedRoute;
//! use juxta_proto::identity::Identity;
//! # let identity = Identity::generate(&mut rand::thread_rng(), 1024, "doc", 1_700_000_000).unwrap();
//! let route = RouteAdvertisement::direct(*identity.peer_id(), ["tcp://127.0.0.1:9701".to_string()]);
//! let signed = SignedRoute::sign(route, &identity, 1_000, 3_600_000).unwrap();
//! let xml = signed.to_element().to_document();
//! let back = SignedRoute::parse(&xml, 2_000).unwrap();
//! assert_eq!(back.route().dest_peer, Some(*identity.peer_id()));
//! ```

use crate::advertisement::signed::{sign, AdvSignature, SignatureError};
use crate::advertisement::tree::XmlElement;
use crate::advertisement::{parse_xml, AdvError, RouteAdvertisement};
use crate::id::PeerId;
use crate::identity::Identity;

/// The child holding the expiry time (Unix ms) inside a signed `jxta:RA`.
pub const EXPIRES: &str = "Expires";
/// Longest validity accepted in a signed route: a longer one is refused,
/// so a route stays replayable for at most this long.
pub const MAX_LIFETIME_MS: u64 = 24 * 60 * 60 * 1000;

/// Why a signed route was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignedRouteError {
    /// Not a route advertisement, or a malformed one.
    #[error(transparent)]
    Adv(#[from] AdvError),
    /// No signature children.
    #[error("route advertisement not signed")]
    Unsigned,
    /// The signature does not verify, or was made by another peer than the
    /// route's destination.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// No `DstPID`.
    #[error("signed route names no destination")]
    NoDestination,
    /// No (or an unreadable) `Expires` child.
    #[error("signed route without a valid expiry")]
    NoExpiry,
    /// Expired, or valid for longer than [`MAX_LIFETIME_MS`] from now.
    #[error("signed route expired or valid too long (expires {expires_ms}, now {now_ms})")]
    Expiry {
        /// The route's expiry.
        expires_ms: u64,
        /// The time it was checked at.
        now_ms: u64,
    },
}

/// A route advertisement signed by its destination (verified when parsed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRoute {
    route: RouteAdvertisement,
    expires_ms: u64,
    element: XmlElement,
}

impl SignedRoute {
    /// Signs `route` (whose destination must be `identity`'s peer) valid
    /// for `lifetime_ms` (at most [`MAX_LIFETIME_MS`]) from `now_ms`.
    pub fn sign(
        route: RouteAdvertisement,
        identity: &Identity,
        now_ms: u64,
        lifetime_ms: u64,
    ) -> Result<SignedRoute, SignedRouteError> {
        if route.dest_peer != Some(*identity.peer_id()) {
            return Err(SignedRouteError::NoDestination);
        }
        let expires_ms = now_ms.saturating_add(lifetime_ms.min(MAX_LIFETIME_MS));
        let mut element = route.to_element();
        element.push_text(EXPIRES, &expires_ms.to_string());
        let sig = sign(&element, identity, true, true)?;
        sig.append_to(&mut element);
        Ok(SignedRoute {
            route,
            expires_ms,
            element,
        })
    }

    /// Parses and verifies a signed `jxta:RA` document at time `now_ms`.
    pub fn parse(xml: &str, now_ms: u64) -> Result<SignedRoute, SignedRouteError> {
        let node = parse_xml(xml).map_err(AdvError::from)?;
        SignedRoute::from_element(&XmlElement::from_node(&node), now_ms)
    }

    /// Verifies a signed `jxta:RA` element (e.g. nested in a route
    /// answer) at time `now_ms`: signed by its destination, not expired,
    /// not valid for longer than [`MAX_LIFETIME_MS`].
    pub fn from_element(e: &XmlElement, now_ms: u64) -> Result<SignedRoute, SignedRouteError> {
        let route = RouteAdvertisement::parse(&e.to_document())?;
        let dest = route.dest_peer.ok_or(SignedRouteError::NoDestination)?;
        let sig = AdvSignature::from_root(e)?.ok_or(SignedRouteError::Unsigned)?;
        match sig.verify_owner(e, &dest) {
            Err(SignatureError::DigestMismatch) => sig.verify_owner(&e.copied(), &dest)?,
            other => other?,
        };
        let expires_ms: u64 = e
            .child(EXPIRES)
            .and_then(|c| c.text.trim().parse().ok())
            .ok_or(SignedRouteError::NoExpiry)?;
        if expires_ms <= now_ms || expires_ms - now_ms > MAX_LIFETIME_MS {
            return Err(SignedRouteError::Expiry { expires_ms, now_ms });
        }
        Ok(SignedRoute {
            route,
            expires_ms,
            element: e.clone(),
        })
    }

    /// The route (destination, its addresses, its relays).
    pub fn route(&self) -> &RouteAdvertisement {
        &self.route
    }

    /// The destination (the signer).
    pub fn dest(&self) -> PeerId {
        self.route
            .dest_peer
            .expect("a signed route always names its destination")
    }

    /// When the signature stops counting (Unix ms).
    pub fn expires_ms(&self) -> u64 {
        self.expires_ms
    }

    /// Whether the route is still valid at `now_ms`.
    pub fn is_valid_at(&self, now_ms: u64) -> bool {
        now_ms < self.expires_ms
    }

    /// Whether the destination names `hop` as a peer that delivers to it
    /// (one of its relays).
    pub fn allows_last_hop(&self, hop: &PeerId) -> bool {
        self.route.hops.iter().any(|h| h.peer_id == Some(*hop))
    }

    /// The signed element, as sent.
    pub fn to_element(&self) -> XmlElement {
        self.element.clone()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::advertisement::AccessPointAdvertisement;
    use rand::SeedableRng;
    use std::sync::OnceLock;

    /// Two identities (also the route-trust tests' edge and relay).
    pub(crate) fn ids() -> &'static (Identity, Identity) {
        static IDS: OnceLock<(Identity, Identity)> = OnceLock::new();
        IDS.get_or_init(|| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            (
                Identity::generate(&mut rng, 1024, "route", 1_700_000_000).unwrap(),
                Identity::generate(&mut rng, 1024, "route", 1_700_000_000).unwrap(),
            )
        })
    }

    /// `dest`'s route through `relay`, as an edge signs it.
    pub(crate) fn through(dest: PeerId, relay: PeerId) -> RouteAdvertisement {
        let mut ra =
            RouteAdvertisement::direct(dest, [format!("relay://{}", relay.unique_value())]);
        ra.hops.push(AccessPointAdvertisement::new(
            Some(relay),
            ["tcp://127.0.0.1:1".into()],
        ));
        ra
    }

    #[test]
    fn signs_and_verifies_and_names_its_relays() {
        let (me, relay) = ids();
        let s =
            SignedRoute::sign(through(*me.peer_id(), *relay.peer_id()), me, 1_000, 60_000).unwrap();
        assert_eq!(s.expires_ms(), 61_000);
        let back = SignedRoute::parse(&s.to_element().to_document(), 2_000).unwrap();
        assert_eq!(back.dest(), *me.peer_id());
        assert!(back.allows_last_hop(relay.peer_id()));
        assert!(!back.allows_last_hop(me.peer_id()));
        // Nested in another document (attributes reversed, as JXSE copies).
        let mut outer = XmlElement::adv_root("jxta:ERR");
        let mut d = XmlElement::new("SignedDst");
        d.push(s.to_element().copied());
        outer.push(d);
        let doc = outer.to_document();
        let node = parse_xml(&doc).unwrap();
        let outer = XmlElement::from_node(&node);
        let inner = outer.child("SignedDst").unwrap().child("jxta:RA").unwrap();
        SignedRoute::from_element(inner, 2_000).unwrap();
    }

    #[test]
    fn refuses_forgeries_other_signers_and_stale_routes() {
        let (me, attacker) = ids();
        let s = SignedRoute::sign(
            through(*me.peer_id(), *attacker.peer_id()),
            me,
            1_000,
            60_000,
        )
        .unwrap();
        // A hop rewritten after signing.
        let doc = s
            .to_element()
            .to_document()
            .replace(&attacker.peer_id().to_string(), &me.peer_id().to_string());
        assert!(matches!(
            SignedRoute::parse(&doc, 2_000),
            Err(SignedRouteError::Signature(_))
        ));
        // The attacker signs a route to `me` through itself: the
        // destination is not the signer.
        let mut e = through(*me.peer_id(), *attacker.peer_id()).to_element();
        e.push_text(EXPIRES, "61000");
        sign(&e, attacker, true, true).unwrap().append_to(&mut e);
        assert!(matches!(
            SignedRoute::from_element(&e, 2_000),
            Err(SignedRouteError::Signature(
                SignatureError::SignerMismatch { .. }
            ))
        ));
        // And cannot sign one for `me` with its own identity at all.
        assert_eq!(
            SignedRoute::sign(through(*me.peer_id(), *attacker.peer_id()), attacker, 0, 1),
            Err(SignedRouteError::NoDestination)
        );
        // Expired, or valid for too long from now.
        assert!(matches!(
            SignedRoute::parse(&s.to_element().to_document(), 61_000),
            Err(SignedRouteError::Expiry { .. })
        ));
        let far = SignedRoute::sign(through(*me.peer_id(), *attacker.peer_id()), me, 0, u64::MAX)
            .unwrap();
        assert_eq!(far.expires_ms(), MAX_LIFETIME_MS);
        // Unsigned, or with an unreadable expiry.
        let plain = through(*me.peer_id(), *attacker.peer_id()).to_element();
        assert_eq!(
            SignedRoute::from_element(&plain, 0),
            Err(SignedRouteError::Unsigned)
        );
        let mut bad = through(*me.peer_id(), *attacker.peer_id()).to_element();
        bad.push_text(EXPIRES, "soon");
        sign(&bad, me, true, true).unwrap().append_to(&mut bad);
        assert_eq!(
            SignedRoute::from_element(&bad, 0),
            Err(SignedRouteError::NoExpiry)
        );
    }
}
