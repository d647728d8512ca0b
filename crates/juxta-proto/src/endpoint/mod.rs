//! The endpoint service: addresses, service names and the router header.
//!
//! JXTA delivers every message to a *service* and *param* at a peer. Peer
//! groups share the physical transports of the World group by "mangling"
//! their service names (`EndpointService:<group>` + `service/param`), and
//! JXSE reaches `jxta://` destinations through its EndpointRouter, which
//! wraps messages in an `EndpointRouterMsg` element (digest §4, §5).

pub mod address;
pub mod compact_router;
pub mod forward;
pub mod route_cache;
pub mod route_query;
pub mod route_trust;
pub mod router;
pub mod signed_route;

/// `jxta:EndpointSourceAddress`, set by the sending transport.
pub const ELEM_SOURCE_ADDRESS: &str = "EndpointSourceAddress";
/// `jxta:EndpointDestinationAddress`, set by the sending transport.
pub const ELEM_DEST_ADDRESS: &str = "EndpointDestinationAddress";
/// The prefix of a mangled group service name.
pub const MANGLE_PREFIX: &str = "EndpointService:";
/// The unique value of the Net peer group, used in mangled names.
pub const NET_GROUP_UNIQUE: &str = "jxta-NetGroup";
/// The endpoint router's service name.
pub const ROUTER_SERVICE: &str = "EndpointRouter";

/// A service and parameter a message is delivered to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceAddress {
    /// The service name.
    pub service: String,
    /// The parameter, if any.
    pub param: Option<String>,
}

impl ServiceAddress {
    /// A service address.
    pub fn new(service: &str, param: Option<&str>) -> ServiceAddress {
        ServiceAddress {
            service: service.to_string(),
            param: param.map(str::to_string),
        }
    }
}

/// Mangles a group-level service address onto the World-group transport:
/// `(S, P)` becomes `("EndpointService:<group>", "S/P")`.
///
/// ```
/// use juxta_proto::endpoint::{mangle, demangle, ServiceAddress};
/// let m = mangle("jxta-NetGroup", &ServiceAddress::new("PipeService", Some("urn:jxta:cbid-0004")));
/// assert_eq!(m.service, "EndpointService:jxta-NetGroup");
/// assert_eq!(m.param.as_deref(), Some("PipeService/urn:jxta:cbid-0004"));
/// assert_eq!(demangle(m).1, ServiceAddress::new("PipeService", Some("urn:jxta:cbid-0004")));
/// ```
pub fn mangle(group_unique: &str, addr: &ServiceAddress) -> ServiceAddress {
    let param = match &addr.param {
        Some(p) => format!("{}/{}", addr.service, p),
        None => addr.service.clone(),
    };
    ServiceAddress {
        service: format!("{MANGLE_PREFIX}{group_unique}"),
        param: Some(param),
    }
}

/// Undoes [`mangle`]: returns the group unique value (if the name was
/// mangled) and the real service address.
pub fn demangle(addr: ServiceAddress) -> (Option<String>, ServiceAddress) {
    match addr.service.strip_prefix(MANGLE_PREFIX) {
        Some(group) => {
            let group = group.to_string();
            let param = addr.param.unwrap_or_default();
            let real = match param.split_once('/') {
                Some((s, p)) => ServiceAddress::new(s, Some(p)),
                None => ServiceAddress::new(&param, None),
            };
            (Some(group), real)
        }
        None => (None, addr),
    }
}

use std::sync::Arc;

use crate::id::PeerId;
use crate::message::{Element, Message, NS_JXTA};
use crate::wire::connection::Proof;
use address::EndpointAddress;
use router::{RouterError, RouterHeader, ELEM_ERM, ELEM_ERM_FINGERPRINT};

/// Errors delivering a message that came through a router.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Malformed router header.
    #[error("router header: {0}")]
    Router(#[from] RouterError),
    /// A router message without its header.
    #[error("EndpointRouter message without EndpointRouterMsg element")]
    NoRouterHeader,
    /// The message is for another peer (forwarding is the relay's job).
    #[error("routed message for {0}, not for this peer")]
    NotForUs(String),
    /// The header claims we are the origin or the last hop (a loop).
    #[error("routing loop: message claims to come from this peer")]
    Loop,
    /// The destination has no service.
    #[error("routed message without a destination service")]
    NoService,
}

/// A message ready for a listener.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Group the message was addressed in (`jxta-NetGroup`), if mangled.
    /// Shared: a connection hands the same few addresses to every message
    /// it receives, so a delivery costs no string copies.
    pub group: Option<Arc<str>>,
    /// The listener's service address (shared, as `group`).
    pub to: Arc<ServiceAddress>,
    /// The originating peer, if known.
    pub from: Option<PeerId>,
    /// The message (address and router elements removed).
    pub message: Message,
    /// Whether it arrived through the endpoint router.
    pub routed: bool,
    /// How `from` is proven: the message came straight from `from` over a
    /// connection on which `from` proved its peer ID this way; otherwise
    /// [`Proof::Claimed`]. A message relayed on behalf of another peer is
    /// not proven: its origin is as its router header says. Services that
    /// act on the sender (leases, SRDI ownership, relay, binding answers)
    /// refuse deliveries that are not proven ([`Delivery::proven`]).
    pub proof: Proof,
    /// The group (its unique value) whose rendezvous vouched for this
    /// message: it came propagated by that group's rendezvous, whose
    /// member seal was verified (and which verified the origin's) before
    /// it was handed here. Set only by the local runtime, never from the
    /// wire; `None` for everything else.
    pub vouched_in: Option<String>,
}

impl Delivery {
    /// Whether `from` is proven (see [`Delivery::proof`]).
    pub fn proven(&self) -> bool {
        self.proof.is_proven()
    }
}

/// Resolves what a received message is for: demangles the service name and,
/// for router traffic addressed to `local`, strips the ERM and delivers to
/// the service in its `Dest`.
///
/// `proof`: how `from` (the link peer) proved its peer ID.
pub fn deliver(
    local: &PeerId,
    to: ServiceAddress,
    from: Option<PeerId>,
    proof: Proof,
    mut message: Message,
) -> Result<Delivery, EndpointError> {
    let proof = if from.is_some() {
        proof
    } else {
        Proof::Claimed
    };
    let (group, real) = demangle(to);
    if real.service != ROUTER_SERVICE {
        return Ok(Delivery {
            vouched_in: None,
            group: group.map(Arc::from),
            to: Arc::new(real),
            from,
            message,
            routed: false,
            proof,
        });
    }
    let erm = message
        .take(NS_JXTA, ELEM_ERM)
        .ok_or(EndpointError::NoRouterHeader)?;
    message.remove_all(NS_JXTA, ELEM_ERM_FINGERPRINT);
    let h = RouterHeader::parse(&erm.data)?;
    if h.src.peer_id().as_ref() == Some(local) || h.last.peer_id().as_ref() == Some(local) {
        return Err(EndpointError::Loop);
    }
    if h.dest.peer_id().as_ref() != Some(local) {
        return Err(EndpointError::NotForUs(h.dest.base()));
    }
    let service = h.dest.service.clone().ok_or(EndpointError::NoService)?;
    // A header naming a mangled group address (a group message sent
    // through a relay): the group is the one it names.
    let (inner_group, to) = demangle(ServiceAddress {
        service,
        param: h.dest.param.clone(),
    });
    Ok(Delivery {
        vouched_in: None,
        group: inner_group.or(group).map(Arc::from),
        to: Arc::new(to),
        from: h.src.peer_id().or(from),
        message,
        routed: true,
        proof: match h.src.peer_id() {
            Some(s) if Some(s) != from => Proof::Claimed,
            _ => proof,
        },
    })
}

/// Wraps `message` for delivery through the remote peer's EndpointRouter
/// (how JXSE itself reaches `jxta://` destinations): adds an ERM naming
/// `local` as origin and `remote/service/param` as destination, and returns
/// the mangled router service address to send it to.
pub fn wrap_routed(
    group_unique: &str,
    local: &PeerId,
    remote: &PeerId,
    to: &ServiceAddress,
    message: &mut Message,
) -> ServiceAddress {
    let h = RouterHeader::direct(
        EndpointAddress::peer(local, None, None),
        EndpointAddress::peer(remote, Some(&to.service), to.param.as_deref()),
    );
    message.push(Element::xml(NS_JXTA, ELEM_ERM, h.to_xml()));
    mangle(group_unique, &ServiceAddress::new(ROUTER_SERVICE, None))
}

/// [`wrap_routed`], with the origin's route advertisement embedded in the
/// ERM (`jxta:RA` after `Rvs`), as JXSE does on the first message to a new
/// destination: the receiver's router learns from it how to reach `local`
/// (a JXSE peer does not map the connection it opened to a rendezvous to
/// that rendezvous' peer ID, and answers through its router).
pub fn wrap_routed_with_route(
    group_unique: &str,
    local: &PeerId,
    remote: &PeerId,
    to: &ServiceAddress,
    route: &crate::advertisement::RouteAdvertisement,
    message: &mut Message,
) -> ServiceAddress {
    let h = RouterHeader::direct(
        EndpointAddress::peer(local, None, None),
        EndpointAddress::peer(remote, Some(&to.service), to.param.as_deref()),
    );
    let mut xml = h.to_xml();
    let ra = route.to_element().copied().to_compact();
    if let Some(at) = xml.rfind("</jxta:ERM>") {
        xml.insert_str(at, &ra);
    }
    message.push(Element::xml(NS_JXTA, ELEM_ERM, xml));
    mangle(group_unique, &ServiceAddress::new(ROUTER_SERVICE, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_with_route_embeds_the_ra() {
        let a: PeerId = "urn:jxta:cbid-59616261646162614A7874615032503301AB03"
            .parse()
            .unwrap();
        let b: PeerId = "urn:jxta:cbid-59616261646162614A7874615032503302AB03"
            .parse()
            .unwrap();
        let ra = crate::advertisement::RouteAdvertisement::direct(
            a,
            ["tcp://127.0.0.1:9701".to_string()],
        );
        let mut m = Message::new();
        let to = ServiceAddress::new("JuxtaTest", Some("sink"));
        wrap_routed_with_route(NET_GROUP_UNIQUE, &a, &b, &to, &ra, &mut m);
        let erm = m
            .get(NS_JXTA, ELEM_ERM)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        assert!(erm.contains("<Rvs/><jxta:RA"), "{erm}");
        assert!(erm.contains("<EA>tcp://127.0.0.1:9701</EA>"), "{erm}");
        // Our own parser still reads the header (the RA is skipped).
        let h = RouterHeader::parse(erm.as_bytes()).unwrap();
        assert_eq!(h.src, EndpointAddress::peer(&a, None, None));
    }

    #[test]
    fn routed_round_trip() {
        let a: PeerId = "urn:jxta:cbid-59616261646162614A7874615032503301AB03"
            .parse()
            .unwrap();
        let b: PeerId = "urn:jxta:cbid-59616261646162614A7874615032503302AB03"
            .parse()
            .unwrap();
        let mut m = Message::new().with(Element::bytes("x", "y", &b"1"[..]));
        let to = ServiceAddress::new("JuxtaTest", Some("sink"));
        let via = wrap_routed(NET_GROUP_UNIQUE, &a, &b, &to, &mut m);
        assert_eq!(via.param.as_deref(), Some(ROUTER_SERVICE));
        let d = deliver(&b, via.clone(), None, Proof::Claimed, m.clone()).unwrap();
        assert_eq!(*d.to, to);
        assert_eq!(d.from, Some(a));
        assert!(d.routed);
        assert_eq!(d.message.elements.len(), 1);
        assert!(matches!(
            deliver(&a, via.clone(), None, Proof::Claimed, m.clone()),
            Err(EndpointError::Loop)
        ));
        let mut no_erm = m.clone();
        no_erm.remove_all(NS_JXTA, ELEM_ERM);
        assert!(matches!(
            deliver(&b, via, None, Proof::Claimed, no_erm),
            Err(EndpointError::NoRouterHeader)
        ));
    }
}
