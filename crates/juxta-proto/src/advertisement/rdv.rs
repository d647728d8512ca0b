//! The rendezvous advertisement `jxta:RdvAdvertisement` (digest §8.2): a
//! rendezvous peer announces itself for a group's peer view.

use super::route::{RouteAdvertisement, ROUTE_ROOT};
use super::tree::XmlElement;
use super::{opt_text, parse_xml, req_id, AdvError, XmlNode};
use crate::id::{PeerGroupId, PeerId};

/// Root element of a rendezvous advertisement.
pub const RDV_ROOT: &str = "jxta:RdvAdvertisement";

/// A rendezvous advertisement.
///
/// ```
/// use juxta_proto::advertisement::RdvAdvertisement;
/// use juxta_proto::id::PeerGroupId;
/// let pid = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03".parse().unwrap();
/// let adv = RdvAdvertisement::new(PeerGroupId::NET, pid, "JxtaPropagate").with_name("rdv-1");
/// assert_eq!(RdvAdvertisement::parse(&adv.to_xml()).unwrap(), adv);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RdvAdvertisement {
    /// The group served (`RdvGroupId`).
    pub group_id: PeerGroupId,
    /// The rendezvous peer (`RdvPeerId`).
    pub peer_id: PeerId,
    /// The rendezvous service name (`RdvServiceName`).
    pub service_name: String,
    /// The peer's name (`Name`), if any.
    pub name: Option<String>,
    /// How to reach the peer (`RdvRoute`), if given.
    pub route: Option<RouteAdvertisement>,
}

impl RdvAdvertisement {
    /// An advertisement without name or route.
    pub fn new(
        group_id: PeerGroupId,
        peer_id: PeerId,
        service_name: impl Into<String>,
    ) -> RdvAdvertisement {
        RdvAdvertisement {
            group_id,
            peer_id,
            service_name: service_name.into(),
            name: None,
            route: None,
        }
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> RdvAdvertisement {
        self.name = Some(name.into());
        self
    }

    /// Sets the route.
    pub fn with_route(mut self, route: RouteAdvertisement) -> RdvAdvertisement {
        self.route = Some(route);
        self
    }

    /// The document tree as JXSE's `RdvAdv.getDocument` builds it.
    pub fn to_element(&self) -> XmlElement {
        let mut root = XmlElement::adv_root(RDV_ROOT);
        root.push_text("RdvGroupId", &self.group_id.to_string());
        root.push_text("RdvPeerId", &self.peer_id.to_string());
        root.push_text("RdvServiceName", &self.service_name);
        if let Some(n) = &self.name {
            root.push_text("Name", n);
        }
        if let Some(r) = &self.route {
            let mut e = XmlElement::new("RdvRoute");
            e.push(r.to_element().into_copied());
            root.push(e);
        }
        root
    }

    /// The document exactly as JXSE writes it.
    pub fn to_xml(&self) -> String {
        self.to_element().to_document()
    }

    pub(crate) fn from_node(n: &XmlNode) -> Result<RdvAdvertisement, AdvError> {
        let service_name = opt_text(n, "RdvServiceName")?
            .filter(|s| !s.is_empty())
            .ok_or(AdvError::Missing("RdvServiceName"))?;
        let route = match n.child("RdvRoute").and_then(|r| r.child(ROUTE_ROOT)) {
            Some(ra) => Some(RouteAdvertisement::from_node(ra)?),
            None => None,
        };
        Ok(RdvAdvertisement {
            group_id: req_id(n, "RdvGroupId")?,
            peer_id: req_id(n, "RdvPeerId")?,
            service_name,
            name: opt_text(n, "Name")?,
            route,
        })
    }

    /// Parses a rendezvous advertisement.
    pub fn parse(xml: &str) -> Result<RdvAdvertisement, AdvError> {
        RdvAdvertisement::from_node(&parse_xml(xml)?.expect_root(RDV_ROOT)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PID: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    #[test]
    fn layout_and_round_trip() {
        let pid: PeerId = PID.parse().unwrap();
        let adv = RdvAdvertisement::new(PeerGroupId::NET, pid, "svc")
            .with_name("r")
            .with_route(RouteAdvertisement::direct(pid, ["tcp://a:1".to_string()]));
        let xml = adv.to_xml();
        assert_eq!(
            xml,
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:RdvAdvertisement>\n<jxta:RdvAdvertisement xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<RdvGroupId>urn:jxta:jxta-NetGroup</RdvGroupId><RdvPeerId>{PID}</RdvPeerId><RdvServiceName>svc</RdvServiceName><Name>r</Name><RdvRoute><jxta:RA xmlns:jxta=\"http://jxta.org\" xml:space=\"preserve\"><DstPID>{PID}</DstPID><Dst><jxta:APA xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\"><EA>tcp://a:1</EA></jxta:APA></Dst></jxta:RA></RdvRoute></jxta:RdvAdvertisement>\n")
        );
        assert_eq!(RdvAdvertisement::parse(&xml).unwrap(), adv);
        assert_eq!(
            RdvAdvertisement::parse(
                "<jxta:RdvAdvertisement><RdvServiceName>s</RdvServiceName></jxta:RdvAdvertisement>"
            ),
            Err(AdvError::Missing("RdvGroupId"))
        );
    }
}
