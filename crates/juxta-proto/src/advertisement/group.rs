//! The peer group advertisement `jxta:PGA` (digest §8.2): a group's ID,
//! the module spec that implements it, its name and per-service
//! parameters (e.g. the password list of JXTA's password membership,
//! see [`crate::group`]).

use super::tree::XmlElement;
use super::{opt_text, parse_xml, req_id, AdvError, XmlNode, MAX_XML_ELEMENTS};
use crate::id::{ModuleClassId, ModuleSpecId, PeerGroupId};

/// Root element of a peer group advertisement.
pub const PGA_ROOT: &str = "jxta:PGA";
/// Most `Svc` entries accepted.
pub const MAX_SERVICES: usize = 64;

/// One `Svc` entry: a service class and its parameter subtree (written as
/// `Parm`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceParam {
    /// The service's module class (`MCID`).
    pub class_id: ModuleClassId,
    /// The parameters (`Parm`; its name is always written as `Parm`).
    pub param: XmlElement,
}

/// A peer group advertisement.
///
/// JXSE keeps the service parameters in a `Hashtable` and writes them in
/// its iteration order; Juxta keeps and writes them in the order given, so
/// a document with several `Svc` entries may be byte-different from
/// JXSE's (the content is the same).
///
/// ```
/// use juxta_proto::advertisement::PeerGroupAdvertisement;
/// use juxta_proto::group::{self, ALL_PURPOSE_GROUP_SPEC};
/// let gid = group::new_group_id(&mut rand::thread_rng());
/// let pga = PeerGroupAdvertisement::new(gid, ALL_PURPOSE_GROUP_SPEC.parse().unwrap(), "chat")
///     .with_desc("a chat group");
/// assert_eq!(PeerGroupAdvertisement::parse(&pga.to_xml()).unwrap(), pga);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerGroupAdvertisement {
    /// The group (`GID`).
    pub group_id: PeerGroupId,
    /// The group's implementation spec (`MSID`).
    pub spec_id: ModuleSpecId,
    /// `Name`, if any.
    pub name: Option<String>,
    /// `Desc`, if any.
    pub desc: Option<String>,
    /// `Svc` entries, in the order written.
    pub services: Vec<ServiceParam>,
}

impl PeerGroupAdvertisement {
    /// A named group advertisement without description or services.
    pub fn new(
        group_id: PeerGroupId,
        spec_id: ModuleSpecId,
        name: impl Into<String>,
    ) -> PeerGroupAdvertisement {
        PeerGroupAdvertisement {
            group_id,
            spec_id,
            name: Some(name.into()),
            desc: None,
            services: Vec::new(),
        }
    }

    /// Sets the description.
    pub fn with_desc(mut self, desc: impl Into<String>) -> PeerGroupAdvertisement {
        self.desc = Some(desc.into());
        self
    }

    /// The parameters of a service, if any.
    pub fn service_param(&self, class_id: &ModuleClassId) -> Option<&XmlElement> {
        self.services
            .iter()
            .find(|s| s.class_id == *class_id)
            .map(|s| &s.param)
    }

    /// Sets (replaces) the parameters of a service.
    pub fn set_service_param(&mut self, class_id: ModuleClassId, param: XmlElement) {
        let param = param.renamed("Parm");
        match self.services.iter_mut().find(|s| s.class_id == class_id) {
            Some(s) => s.param = param,
            None => self.services.push(ServiceParam { class_id, param }),
        }
    }

    /// The document tree (`PeerGroupAdv.getDocument`).
    pub fn to_element(&self) -> XmlElement {
        let mut root = XmlElement::adv_root(PGA_ROOT);
        root.push_text("GID", &self.group_id.to_string());
        root.push_text("MSID", &self.spec_id.to_string());
        if let Some(n) = &self.name {
            root.push_text("Name", n);
        }
        if let Some(d) = &self.desc {
            root.push_text("Desc", d);
        }
        for s in &self.services {
            let mut svc = XmlElement::new("Svc");
            svc.push_text("MCID", &s.class_id.to_string());
            svc.push(s.param.clone().renamed("Parm"));
            root.push(svc);
        }
        root
    }

    /// The document exactly as JXSE writes it (one `Svc` at most: see the
    /// type's note).
    pub fn to_xml(&self) -> String {
        self.to_element().to_document()
    }

    pub(crate) fn from_node(n: &XmlNode) -> Result<PeerGroupAdvertisement, AdvError> {
        let mut services = Vec::new();
        for svc in n.children_named("Svc") {
            // JXSE ignores a Svc without both MCID and Parm.
            let (Some(mcid), Some(parm)) = (svc.child("MCID"), svc.child("Parm")) else {
                continue;
            };
            if services.len() >= MAX_SERVICES {
                return Err(AdvError::TooMany {
                    field: "Svc",
                    max: MAX_SERVICES,
                });
            }
            let class_id = mcid.value().parse().map_err(|source| AdvError::BadId {
                field: "MCID",
                source,
            })?;
            let param = XmlElement::from_node(parm);
            if param.count() > MAX_XML_ELEMENTS {
                return Err(AdvError::TooMany {
                    field: "Parm",
                    max: MAX_XML_ELEMENTS,
                });
            }
            services.push(ServiceParam { class_id, param });
        }
        Ok(PeerGroupAdvertisement {
            group_id: req_id(n, "GID")?,
            spec_id: req_id(n, "MSID")?,
            name: opt_text(n, "Name")?,
            desc: opt_text(n, "Desc")?,
            services,
        })
    }

    /// Parses a peer group advertisement.
    pub fn parse(xml: &str) -> Result<PeerGroupAdvertisement, AdvError> {
        PeerGroupAdvertisement::from_node(&parse_xml(xml)?.expect_root(PGA_ROOT)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_services() {
        let mut pga = PeerGroupAdvertisement::new(
            PeerGroupId::NET,
            "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000010206"
                .parse()
                .unwrap(),
            "NetPeerGroup",
        )
        .with_desc("default Net Peer Group");
        let mut parm = XmlElement::new("whatever");
        parm.push_text("login", "a:B:");
        pga.set_service_param(ModuleClassId::reference(5), parm);
        let xml = pga.to_xml();
        assert_eq!(xml, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:PGA>\n<jxta:PGA xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<GID>urn:jxta:jxta-NetGroup</GID><MSID>urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000010206</MSID><Name>NetPeerGroup</Name><Desc>default Net Peer Group</Desc><Svc><MCID>urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000505</MCID><Parm><login>a:B:</login></Parm></Svc></jxta:PGA>\n");
        let back = PeerGroupAdvertisement::parse(&xml).unwrap();
        assert_eq!(back, pga);
        assert_eq!(
            back.service_param(&ModuleClassId::reference(5))
                .unwrap()
                .child("login")
                .unwrap()
                .text,
            "a:B:"
        );
        assert_eq!(
            PeerGroupAdvertisement::parse("<jxta:PGA><GID>urn:jxta:jxta-NetGroup</GID></jxta:PGA>"),
            Err(AdvError::Missing("MSID"))
        );
    }
}
