//! The peer advertisement `jxta:PA` (digest §8.2, §8.3).
//!
//! Juxta writes `PID`, `GID`, `Name`, optional `Desc`, and optionally the
//! endpoint service parameter holding the peer's route (`Svc` with the
//! endpoint class ID and a `jxta:RA`): JXSE needs that route to accept a
//! rendezvous that grants it a lease (`URISeedingManager.isSeedPeer` reads
//! the route's addresses and compares them with its seeds). The parser
//! reads JXSE's full advertisement, signed or not, and keeps those fields:
//! other `Svc` parameters (root certificate) and the
//! `XMLSignatureInfo`/`XMLSignature` children are skipped.

use super::route::{RouteAdvertisement, ROUTE_ROOT};
use super::{parse_xml, AdvDoc, AdvError, XmlElement};
use crate::id::{PeerGroupId, PeerId};

/// The root element of a peer advertisement.
pub const PEER_ADV_ROOT: &str = "jxta:PA";
/// The endpoint service's module class ID: its `Svc` parameter in a peer
/// advertisement holds the peer's route.
pub const ENDPOINT_CLASS_ID: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000805";

/// A minimal peer advertisement.
///
/// ```
/// use juxta_proto::advertisement::PeerAdvertisement;
/// use juxta_proto::id::PeerGroupId;
/// let pid = "urn:jxta:cbid-59616261646162614A787461503250331122334455667788112233445566778803"
///     .parse()
///     .unwrap();
/// let pa = PeerAdvertisement::new(pid, PeerGroupId::NET, "alice");
/// assert_eq!(PeerAdvertisement::parse(&pa.to_xml()).unwrap(), pa);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerAdvertisement {
    /// The peer ID (`PID`).
    pub peer_id: PeerId,
    /// The peer group the advertisement is for (`GID`).
    pub group_id: PeerGroupId,
    /// The peer name (`Name`; empty when absent).
    pub name: String,
    /// The description (`Desc`), if any.
    pub desc: Option<String>,
    /// The peer's route (the endpoint service's `Svc` parameter), if any.
    pub route: Option<RouteAdvertisement>,
}

impl PeerAdvertisement {
    /// An advertisement without description.
    pub fn new(
        peer_id: PeerId,
        group_id: PeerGroupId,
        name: impl Into<String>,
    ) -> PeerAdvertisement {
        PeerAdvertisement {
            peer_id,
            group_id,
            name: name.into(),
            desc: None,
            route: None,
        }
    }

    /// Sets the route (written as the endpoint service parameter).
    pub fn with_route(mut self, route: RouteAdvertisement) -> PeerAdvertisement {
        self.route = Some(route);
        self
    }

    /// Sets the description.
    pub fn with_desc(mut self, desc: impl Into<String>) -> PeerAdvertisement {
        self.desc = Some(desc.into());
        self
    }

    /// The document in JXSE's advertisement style (as JXSE sends its own PA
    /// in `remPeer`, without the `Svc` entries).
    pub fn to_xml(&self) -> String {
        let mut d = AdvDoc::new(PEER_ADV_ROOT);
        d.field("PID", &self.peer_id.to_string());
        d.field("GID", &self.group_id.to_string());
        d.field("Name", &self.name);
        if let Some(s) = &self.desc {
            d.field("Desc", s);
        }
        if let Some(r) = &self.route {
            d.raw(&route_service(r).to_compact());
        }
        d.finish()
    }

    /// Parses a peer advertisement. `PID` and `GID` are required; a missing
    /// `Name` reads as empty; `Svc`, signature and unknown children are
    /// ignored. Text values are trimmed.
    pub fn parse(xml: &str) -> Result<PeerAdvertisement, AdvError> {
        from_node(&parse_xml(xml)?.expect_root(PEER_ADV_ROOT)?)
    }
}

/// The endpoint service entry carrying a peer's route: `Svc` with the
/// endpoint `MCID` and the route advertisement as its `Parm`.
pub(crate) fn route_service(route: &RouteAdvertisement) -> XmlElement {
    let mut svc = XmlElement::new("Svc");
    svc.push_text("MCID", ENDPOINT_CLASS_ID);
    let mut parm = XmlElement::new("Parm");
    parm.push(route.to_element());
    svc.push(parm);
    svc
}

/// Reads the children of a `jxta:PA` element.
pub(crate) fn from_node(root: &super::XmlNode) -> Result<PeerAdvertisement, AdvError> {
    let peer_id: PeerId = root
        .child_value("PID")
        .ok_or(AdvError::Missing("PID"))?
        .parse()
        .map_err(|source| AdvError::BadId {
            field: "PID",
            source,
        })?;
    let group_id: PeerGroupId = root
        .child_value("GID")
        .ok_or(AdvError::Missing("GID"))?
        .parse()
        .map_err(|source| AdvError::BadId {
            field: "GID",
            source,
        })?;
    // The route, as JXSE's `EndpointUtils.extractRouteAdv`: the first RA
    // of the endpoint service's parameter, for this peer. A malformed one
    // is ignored (the advertisement stays usable without it).
    let route = root
        .children_named("Svc")
        .find(|s| s.child_value("MCID") == Some(ENDPOINT_CLASS_ID))
        .and_then(|s| s.child("Parm")?.child(ROUTE_ROOT))
        .and_then(|ra| RouteAdvertisement::from_node(ra).ok())
        .map(|mut r| {
            r.dest_peer = Some(peer_id);
            r
        });
    Ok(PeerAdvertisement {
        peer_id,
        group_id,
        name: root.child_value("Name").unwrap_or_default().to_string(),
        desc: root.child_value("Desc").map(str::to_string),
        route,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::XmlError;
    use proptest::prelude::*;

    const PID: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    /// A JXSE PA with `Svc` entries and the 2.7 signature children appended.
    fn signed_jxse_pa() -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:PA>\n<jxta:PA xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<PID>{PID}</PID><GID>urn:jxta:jxta-NetGroup</GID><Name>sender</Name><Desc>Created by NetworkManager</Desc><Svc><MCID>urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000805</MCID><Parm><jxta:RA xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\"><DstPID>{PID}</DstPID><Dst><jxta:APA><EA>tcp://127.0.0.1:9702</EA></jxta:APA></Dst></jxta:RA></Parm></Svc><Svc><MCID>urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000105</MCID><Parm><RootCert type=\"jxta:cert\">MIIC\nCDCC</RootCert><Name>not-this-one</Name></Parm></Svc><XMLSignatureInfo><digest>AAAA</digest><encodedkey>BBBB</encodedkey><peerid>{PID}</peerid><keyalgorithm>RSA</keyalgorithm><signaturealgorithm>SHA1withRSA</signaturealgorithm></XMLSignatureInfo><XMLSignature><digest>CCCC</digest><signature>DDDD</signature></XMLSignature></jxta:PA>\n"
        )
    }

    #[test]
    fn parses_full_signed_pa() {
        let pa = PeerAdvertisement::parse(&signed_jxse_pa()).unwrap();
        assert_eq!(pa.peer_id.to_string(), PID);
        assert_eq!(pa.group_id, PeerGroupId::NET);
        assert_eq!(pa.name, "sender");
        assert_eq!(pa.desc.as_deref(), Some("Created by NetworkManager"));
        let r = pa.route.as_ref().unwrap();
        assert_eq!(r.dest_peer, Some(pa.peer_id));
        assert_eq!(r.dest.addresses, vec!["tcp://127.0.0.1:9702".to_string()]);
        // Written back, the route survives.
        assert_eq!(PeerAdvertisement::parse(&pa.to_xml()).unwrap(), pa);
    }

    #[test]
    fn writes_jxse_style() {
        let pa =
            PeerAdvertisement::new(PID.parse().unwrap(), PeerGroupId::NET, "a<b").with_desc("d");
        assert_eq!(
            pa.to_xml(),
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:PA>\n<jxta:PA xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<PID>{PID}</PID><GID>urn:jxta:jxta-NetGroup</GID><Name>a&lt;b</Name><Desc>d</Desc></jxta:PA>\n")
        );
    }

    #[test]
    fn rejects_bad_pas() {
        assert_eq!(
            PeerAdvertisement::parse("<jxta:PA><GID>urn:jxta:jxta-NetGroup</GID></jxta:PA>"),
            Err(AdvError::Missing("PID"))
        );
        assert_eq!(
            PeerAdvertisement::parse(&format!("<jxta:PA><PID>{PID}</PID></jxta:PA>")),
            Err(AdvError::Missing("GID"))
        );
        assert!(matches!(
            PeerAdvertisement::parse(&format!(
                "<jxta:PA><PID>{PID}</PID><GID>{PID}</GID></jxta:PA>"
            )),
            Err(AdvError::BadId { field: "GID", .. })
        ));
        assert!(matches!(
            PeerAdvertisement::parse("<jxta:PipeAdvertisement/>"),
            Err(AdvError::Xml(XmlError::WrongRoot { .. }))
        ));
        let no_name = PeerAdvertisement::parse(&format!(
            "<jxta:PA><PID>{PID}</PID><GID>urn:jxta:jxta-NetGroup</GID></jxta:PA>"
        ))
        .unwrap();
        assert_eq!(no_name.name, "");
    }

    proptest! {
        #[test]
        fn round_trip(
            bytes in proptest::array::uniform16(any::<u8>()),
            name in "[a-zA-Z0-9&<>'\" ._-]{0,24}",
            desc in proptest::option::of("[a-zA-Z0-9&< ._-]{0,24}"),
        ) {
            let id = crate::id::JxtaId::from_parts(
                crate::id::IdFormat::Cbid,
                crate::id::WORLD_GROUP_UUID,
                bytes,
                crate::id::IdType::Peer,
            );
            let pa = PeerAdvertisement {
                peer_id: id.try_into().unwrap(),
                group_id: PeerGroupId::NET,
                name: name.trim().to_string(),
                desc: desc.map(|d| d.trim().to_string()),
                route: None,
            };
            prop_assert_eq!(PeerAdvertisement::parse(&pa.to_xml()).unwrap(), pa);
        }
    }
}
