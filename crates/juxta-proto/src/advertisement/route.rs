//! Route and access-point advertisements, `jxta:RA` and `jxta:APA`
//! (digest §5.4, §8.2): how to reach a peer, used by the endpoint router,
//! inside peer advertisements and in rendezvous advertisements.

use super::tree::XmlElement;
use super::{opt_id, parse_xml, AdvError, XmlNode, MAX_FIELD_LEN};
use crate::id::PeerId;

/// Root element of an access-point advertisement.
pub const APA_ROOT: &str = "jxta:APA";
/// Root element of a route advertisement.
pub const ROUTE_ROOT: &str = "jxta:RA";
/// Most endpoint addresses accepted in one access point.
pub const MAX_ENDPOINT_ADDRESSES: usize = 64;
/// Most hops accepted in one route.
pub const MAX_HOPS: usize = 64;

/// An access point: a peer (optional) and its endpoint addresses.
///
/// ```
/// use juxta_proto::advertisement::AccessPointAdvertisement;
/// let apa = AccessPointAdvertisement::new(None, ["tcp://127.0.0.1:9701".to_string()]);
/// assert_eq!(AccessPointAdvertisement::parse(&apa.to_xml()).unwrap(), apa);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct AccessPointAdvertisement {
    /// The peer (`PID`), if given.
    pub peer_id: Option<PeerId>,
    /// Endpoint addresses (`EA`), e.g. `tcp://127.0.0.1:9701`.
    pub addresses: Vec<String>,
}

impl AccessPointAdvertisement {
    /// An access point.
    pub fn new(
        peer_id: Option<PeerId>,
        addresses: impl IntoIterator<Item = String>,
    ) -> AccessPointAdvertisement {
        AccessPointAdvertisement {
            peer_id,
            addresses: addresses.into_iter().collect(),
        }
    }

    /// Fills a root element (standalone or nested) with the children.
    pub(crate) fn fill(&self, mut root: XmlElement) -> XmlElement {
        if let Some(p) = &self.peer_id {
            root.push_text("PID", &p.to_string());
        }
        for a in &self.addresses {
            root.push_text("EA", a);
        }
        root
    }

    /// The document tree as JXSE's `getDocument` builds it.
    pub fn to_element(&self) -> XmlElement {
        self.fill(XmlElement::adv_root(APA_ROOT))
    }

    /// The document exactly as JXSE writes it.
    pub fn to_xml(&self) -> String {
        self.to_element().to_document()
    }

    /// Reads the children of a `jxta:APA` element.
    pub(crate) fn from_node(n: &XmlNode) -> Result<AccessPointAdvertisement, AdvError> {
        let peer_id = opt_id(n, "PID")?;
        let mut addresses = Vec::new();
        for ea in n.children_named("EA") {
            if addresses.len() >= MAX_ENDPOINT_ADDRESSES {
                return Err(AdvError::TooMany {
                    field: "EA",
                    max: MAX_ENDPOINT_ADDRESSES,
                });
            }
            let v = ea.value();
            if v.len() > MAX_FIELD_LEN {
                return Err(AdvError::BadValue {
                    field: "EA",
                    value: super::truncate(v),
                });
            }
            if !v.is_empty() {
                addresses.push(v.to_string());
            }
        }
        Ok(AccessPointAdvertisement { peer_id, addresses })
    }

    /// Parses a standalone access-point advertisement.
    pub fn parse(xml: &str) -> Result<AccessPointAdvertisement, AdvError> {
        AccessPointAdvertisement::from_node(&parse_xml(xml)?.expect_root(APA_ROOT)?)
    }
}

/// A route: the destination peer, its access point and optional hops.
///
/// ```
/// use juxta_proto::advertisement::{AccessPointAdvertisement, RouteAdvertisement};
/// let pid = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03".parse().unwrap();
/// let ra = RouteAdvertisement::direct(pid, ["tcp://127.0.0.1:9702".to_string()]);
/// assert!(ra.to_xml().contains("<Dst><jxta:APA xmlns:jxta=\"http://jxta.org\" xml:space=\"preserve\"><EA>tcp://127.0.0.1:9702</EA>"));
/// assert_eq!(RouteAdvertisement::parse(&ra.to_xml()).unwrap(), ra);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct RouteAdvertisement {
    /// The destination peer (`DstPID`).
    pub dest_peer: Option<PeerId>,
    /// The destination's endpoint addresses (`Dst`, written without `PID`).
    pub dest: AccessPointAdvertisement,
    /// Relay hops (`Hops`), each with its `PID`.
    pub hops: Vec<AccessPointAdvertisement>,
}

impl RouteAdvertisement {
    /// A direct route to a peer: no hops.
    pub fn direct(
        dest_peer: PeerId,
        addresses: impl IntoIterator<Item = String>,
    ) -> RouteAdvertisement {
        RouteAdvertisement {
            dest_peer: Some(dest_peer),
            dest: AccessPointAdvertisement::new(None, addresses),
            hops: Vec::new(),
        }
    }

    /// Fills a root element (standalone or nested) with the children, as
    /// `RouteAdv.getDocument` does: the `Dst` access point loses its `PID`
    /// and hops without `PID` are left out.
    pub(crate) fn fill(&self, mut root: XmlElement) -> XmlElement {
        if let Some(p) = &self.dest_peer {
            root.push_text("DstPID", &p.to_string());
        }
        let dst_apa = AccessPointAdvertisement {
            peer_id: None,
            addresses: self.dest.addresses.clone(),
        };
        let mut dst = XmlElement::new("Dst");
        dst.push(dst_apa.to_element().into_copied());
        root.push(dst);
        if !self.hops.is_empty() {
            let mut hops = XmlElement::new("Hops");
            for h in self.hops.iter().filter(|h| h.peer_id.is_some()) {
                hops.push(h.to_element().into_copied());
            }
            root.push(hops);
        }
        root
    }

    /// The document tree as JXSE's `getDocument` builds it.
    pub fn to_element(&self) -> XmlElement {
        self.fill(XmlElement::adv_root(ROUTE_ROOT))
    }

    /// The document exactly as JXSE writes it.
    pub fn to_xml(&self) -> String {
        self.to_element().to_document()
    }

    /// Reads the children of a `jxta:RA` element. A missing `DstPID` is
    /// taken from the `Dst` access point's `PID`, as JXSE does.
    pub(crate) fn from_node(n: &XmlNode) -> Result<RouteAdvertisement, AdvError> {
        let mut dest_peer = opt_id(n, "DstPID")?;
        let dest = match n.child("Dst").and_then(|d| d.child(APA_ROOT)) {
            Some(apa) => AccessPointAdvertisement::from_node(apa)?,
            None => return Err(AdvError::Missing("Dst")),
        };
        if dest_peer.is_none() {
            dest_peer = dest.peer_id;
        }
        let mut hops = Vec::new();
        if let Some(h) = n.child("Hops") {
            for (i, apa) in h.children_named(APA_ROOT).enumerate() {
                if i >= MAX_HOPS {
                    return Err(AdvError::TooMany {
                        field: "Hops",
                        max: MAX_HOPS,
                    });
                }
                // A hop without `PID` names no peer to route through; it is
                // dropped here as `fill` (JXSE's `getDocument`) drops it on
                // the way out, so a route reads the same after a re-send.
                let hop = AccessPointAdvertisement::from_node(apa)?;
                if hop.peer_id.is_some() {
                    hops.push(hop);
                }
            }
        }
        Ok(RouteAdvertisement {
            dest_peer,
            dest: AccessPointAdvertisement {
                peer_id: None,
                addresses: dest.addresses,
            },
            hops,
        })
    }

    /// Parses a standalone route advertisement (signature children are
    /// not checked here; see [`super::Advertisement::parse`]).
    pub fn parse(xml: &str) -> Result<RouteAdvertisement, AdvError> {
        RouteAdvertisement::from_node(&parse_xml(xml)?.expect_root(ROUTE_ROOT)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PID: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    #[test]
    fn writes_the_nested_apa_as_jxse() {
        let ra = RouteAdvertisement::direct(
            PID.parse().unwrap(),
            [
                "tcp://127.0.0.1:9702".to_string(),
                format!("jxtatls://{}", &PID[9..]),
            ],
        );
        assert_eq!(
            ra.to_xml(),
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:RA>\n<jxta:RA xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<DstPID>{PID}</DstPID><Dst><jxta:APA xmlns:jxta=\"http://jxta.org\" xml:space=\"preserve\"><EA>tcp://127.0.0.1:9702</EA><EA>jxtatls://{}</EA></jxta:APA></Dst></jxta:RA>\n", &PID[9..])
        );
    }

    #[test]
    fn hops_and_missing_dstpid() {
        let hop = AccessPointAdvertisement::new(Some(PID.parse().unwrap()), ["tcp://h:1".into()]);
        let xml = format!("<jxta:RA><Dst><jxta:APA><PID>{PID}</PID><EA>tcp://a:1</EA></jxta:APA></Dst><Hops><jxta:APA><PID>{PID}</PID><EA>tcp://h:1</EA></jxta:APA></Hops></jxta:RA>");
        let ra = RouteAdvertisement::parse(&xml).unwrap();
        assert_eq!(ra.dest_peer.unwrap().to_string(), PID);
        assert_eq!(ra.dest.peer_id, None);
        assert_eq!(ra.hops, vec![hop]);
        assert_eq!(RouteAdvertisement::parse(&ra.to_xml()).unwrap(), ra);
        // A hop without PID is dropped on reading, as on writing (found by
        // the `resolver` fuzz target: it did not survive a re-send).
        let pidless = xml.replace(
            "</Hops>",
            "<jxta:APA><EA>tcp://nopid:1</EA></jxta:APA></Hops>",
        );
        let ra2 = RouteAdvertisement::parse(&pidless).unwrap();
        assert_eq!(ra2, ra);
        assert_eq!(RouteAdvertisement::parse(&ra2.to_xml()).unwrap(), ra2);
        assert_eq!(
            RouteAdvertisement::parse("<jxta:RA><DstPID/></jxta:RA>"),
            Err(AdvError::Missing("Dst"))
        );
        let many = format!(
            "<jxta:APA>{}</jxta:APA>",
            "<EA>tcp://x:1</EA>".repeat(MAX_ENDPOINT_ADDRESSES + 1)
        );
        assert!(matches!(
            AccessPointAdvertisement::parse(&many),
            Err(AdvError::TooMany { field: "EA", .. })
        ));
    }

    proptest! {
        #[test]
        fn round_trip(
            bytes in proptest::array::uniform16(any::<u8>()),
            eas in proptest::collection::vec("[a-z]{1,8}://[a-z0-9.:&<]{1,20}", 0..4),
            hops in 0usize..3,
        ) {
            let pid: PeerId = crate::id::JxtaId::from_parts(
                crate::id::IdFormat::Cbid,
                crate::id::WORLD_GROUP_UUID,
                bytes,
                crate::id::IdType::Peer,
            ).try_into().unwrap();
            let ra = RouteAdvertisement {
                dest_peer: Some(pid),
                dest: AccessPointAdvertisement::new(None, eas.clone()),
                hops: (0..hops).map(|_| AccessPointAdvertisement::new(Some(pid), eas.clone())).collect(),
            };
            prop_assert_eq!(RouteAdvertisement::parse(&ra.to_xml()).unwrap(), ra);
        }
    }
}
