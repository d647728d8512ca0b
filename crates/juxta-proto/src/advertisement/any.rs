//! Any advertisement: parse by root element, the discovery type, the
//! cache key and the fields JXSE indexes for discovery (its
//! `getIndexFields()`), so that the discovery cache can store and search
//! every advertisement type the same way.
//!
//! [`Advertisement::parse`] is also the gate for untrusted input: a
//! malformed, oversized or wrongly signed document is a typed
//! [`AdvError`] and must not be cached.

use sha1::{Digest, Sha1};

use super::group::{PeerGroupAdvertisement, PGA_ROOT};
use super::module::{
    pipe_element, ModuleClassAdvertisement, ModuleImplAdvertisement, ModuleSpecAdvertisement,
    MCA_ROOT, MIA_ROOT, MSA_ROOT,
};
use super::peer::{PeerAdvertisement, PEER_ADV_ROOT};
use super::pipe::{PipeAdvertisement, PIPE_ADV_ROOT};
use super::rdv::{RdvAdvertisement, RDV_ROOT};
use super::route::{AccessPointAdvertisement, RouteAdvertisement, APA_ROOT, ROUTE_ROOT};
use super::signed::{self, AdvSignature, SignatureError};
use super::tree::XmlElement;
use super::{parse_xml, truncate, AdvError, XmlNode};
use crate::id::PeerId;
use crate::identity::Identity;

/// The three discovery namespaces (`DiscoveryService.PEER/GROUP/ADV`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AdvKind {
    /// Peer advertisements (type 0).
    Peer,
    /// Peer group advertisements (type 1).
    Group,
    /// Every other advertisement (type 2).
    Adv,
}

impl AdvKind {
    /// The SRDI primary key and cache directory JXSE files this kind
    /// under (`DiscoveryServiceImpl.dirname`): `Peers`, `Groups`, `Adv`.
    ///
    /// ```
    /// use juxta_proto::advertisement::AdvKind;
    /// assert_eq!(AdvKind::Adv.srdi_primary_key(), "Adv");
    /// ```
    pub fn srdi_primary_key(self) -> &'static str {
        match self {
            AdvKind::Peer => "Peers",
            AdvKind::Group => "Groups",
            AdvKind::Adv => "Adv",
        }
    }

    /// The number JXSE writes in discovery messages.
    pub fn code(self) -> i32 {
        match self {
            AdvKind::Peer => 0,
            AdvKind::Group => 1,
            AdvKind::Adv => 2,
        }
    }

    /// The kind for a discovery type number.
    pub fn from_code(code: i32) -> Option<AdvKind> {
        match code {
            0 => Some(AdvKind::Peer),
            1 => Some(AdvKind::Group),
            2 => Some(AdvKind::Adv),
            _ => None,
        }
    }
}

/// Any advertisement this crate models.
///
/// ```
/// use juxta_proto::advertisement::{Advertisement, AdvKind, PipeAdvertisement, PipeType};
/// let id = "urn:jxta:cbid-59616261646162614E504720503250331122334455667788112233445566778804"
///     .parse()
///     .unwrap();
/// let xml = PipeAdvertisement::new(id, PipeType::Unicast).with_name("chat").to_xml();
/// let adv = Advertisement::parse(&xml).unwrap();
/// assert_eq!(adv.adv_type(), "jxta:PipeAdvertisement");
/// assert_eq!(adv.kind(), AdvKind::Adv);
/// assert_eq!(adv.index_fields()[0], ("Name", "chat".to_string()));
/// assert_eq!(adv.to_xml(), xml);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Advertisement {
    /// `jxta:PA`
    Peer(PeerAdvertisement),
    /// `jxta:PGA`
    Group(PeerGroupAdvertisement),
    /// `jxta:PipeAdvertisement`
    Pipe(PipeAdvertisement),
    /// `jxta:MCA`
    ModuleClass(ModuleClassAdvertisement),
    /// `jxta:MSA`
    ModuleSpec(ModuleSpecAdvertisement),
    /// `jxta:MIA`
    ModuleImpl(ModuleImplAdvertisement),
    /// `jxta:RA`
    Route(RouteAdvertisement),
    /// `jxta:APA`
    AccessPoint(AccessPointAdvertisement),
    /// `jxta:RdvAdvertisement`
    Rdv(RdvAdvertisement),
}

fn peer_element(pa: &PeerAdvertisement) -> XmlElement {
    let mut e = XmlElement::adv_root(PEER_ADV_ROOT);
    e.push_text("PID", &pa.peer_id.to_string());
    e.push_text("GID", &pa.group_id.to_string());
    e.push_text("Name", &pa.name);
    if let Some(d) = &pa.desc {
        e.push_text("Desc", d);
    }
    // The route too, as `to_xml` writes it: without it a PA sent in JXSE's
    // `toString` form (discovery) or signed lost the peer's route.
    if let Some(r) = &pa.route {
        e.push(super::peer::route_service(r));
    }
    e
}

fn hash_key(doc: &str) -> String {
    hex::encode_upper(Sha1::digest(doc.as_bytes()))
}

impl Advertisement {
    /// Parses any advertisement by its root element (or, as JXSE's
    /// factory does, by a `type` attribute naming a known type). When
    /// the document carries JXSE signature children they must verify and
    /// the signer must be the peer the advertisement is about.
    pub fn parse(xml: &str) -> Result<Advertisement, AdvError> {
        Advertisement::parse_signed(xml).map(|(a, _)| a)
    }

    /// [`Advertisement::parse`], also returning the verified signer when
    /// the document is signed.
    pub fn parse_signed(xml: &str) -> Result<(Advertisement, Option<PeerId>), AdvError> {
        let node = parse_xml(xml)?;
        let adv = Advertisement::from_node(&node)?;
        let signer = adv.check_signature(&XmlElement::from_node(&node))?;
        Ok((adv, signer))
    }

    /// Verifies the signature children of a received document tree, if
    /// any. The tree is tried as received (a standalone document, whose
    /// attributes are in the signer's order) and then with every
    /// attribute list reversed (a document that JXSE copied once into
    /// another, e.g. the route inside a router message).
    pub fn check_signature(&self, received: &XmlElement) -> Result<Option<PeerId>, AdvError> {
        let Some(sig) = AdvSignature::from_root(received)? else {
            return Ok(None);
        };
        let signer = match sig.verify(received) {
            Err(SignatureError::DigestMismatch) => sig.verify(&received.copied())?,
            other => other?,
        };
        if let Some(owner) = self.owner() {
            if owner != signer {
                return Err(SignatureError::SignerMismatch {
                    expected: Box::new(owner),
                    found: Box::new(signer),
                }
                .into());
            }
        }
        Ok(Some(signer))
    }

    /// Reads an advertisement element (root of a document or nested).
    pub(crate) fn from_node(node: &XmlNode) -> Result<Advertisement, AdvError> {
        let ty = match node.attr("type") {
            Some(t) if ROOTS.contains(&t) => t,
            _ => node.name.as_str(),
        };
        Ok(match ty {
            PEER_ADV_ROOT => Advertisement::Peer(super::peer::from_node(node)?),
            PGA_ROOT => Advertisement::Group(PeerGroupAdvertisement::from_node(node)?),
            PIPE_ADV_ROOT => Advertisement::Pipe(super::pipe::from_node(node)?),
            MCA_ROOT => Advertisement::ModuleClass(ModuleClassAdvertisement::from_node(node)?),
            MSA_ROOT => Advertisement::ModuleSpec(ModuleSpecAdvertisement::from_node(node)?),
            MIA_ROOT => Advertisement::ModuleImpl(ModuleImplAdvertisement::from_node(node)?),
            ROUTE_ROOT => Advertisement::Route(RouteAdvertisement::from_node(node)?),
            APA_ROOT => Advertisement::AccessPoint(AccessPointAdvertisement::from_node(node)?),
            RDV_ROOT => Advertisement::Rdv(RdvAdvertisement::from_node(node)?),
            other => return Err(AdvError::UnknownType(truncate(other))),
        })
    }

    /// The advertisement type: its root element name (JXSE's
    /// `getAdvType()`), e.g. `jxta:PA`.
    pub fn adv_type(&self) -> &'static str {
        match self {
            Advertisement::Peer(_) => PEER_ADV_ROOT,
            Advertisement::Group(_) => PGA_ROOT,
            Advertisement::Pipe(_) => PIPE_ADV_ROOT,
            Advertisement::ModuleClass(_) => MCA_ROOT,
            Advertisement::ModuleSpec(_) => MSA_ROOT,
            Advertisement::ModuleImpl(_) => MIA_ROOT,
            Advertisement::Route(_) => ROUTE_ROOT,
            Advertisement::AccessPoint(_) => APA_ROOT,
            Advertisement::Rdv(_) => RDV_ROOT,
        }
    }

    /// The discovery namespace it is published in.
    pub fn kind(&self) -> AdvKind {
        match self {
            Advertisement::Peer(_) => AdvKind::Peer,
            Advertisement::Group(_) => AdvKind::Group,
            _ => AdvKind::Adv,
        }
    }

    /// The peer the advertisement describes, whose key must have signed
    /// it if it is signed (peer, route, access point and rendezvous
    /// advertisements).
    pub fn owner(&self) -> Option<PeerId> {
        match self {
            Advertisement::Peer(p) => Some(p.peer_id),
            Advertisement::Route(r) => r.dest_peer,
            Advertisement::AccessPoint(a) => a.peer_id,
            Advertisement::Rdv(r) => Some(r.peer_id),
            _ => None,
        }
    }

    /// The unique cache key (JXSE's `getID().getUniqueValue()`): the
    /// unique value of the advertisement's ID (the peer ID for a peer
    /// advertisement); for types without an ID (module impl, route,
    /// access point, rendezvous) the upper-case hex SHA-1 of the
    /// document, as JXSE hashes the document of ID-less advertisements.
    pub fn id(&self) -> String {
        match self {
            Advertisement::Peer(p) => p.peer_id.unique_value(),
            Advertisement::Group(g) => g.group_id.unique_value(),
            Advertisement::Pipe(p) => p.id.unique_value(),
            Advertisement::ModuleClass(m) => m.class_id.unique_value(),
            Advertisement::ModuleSpec(m) => m.spec_id.unique_value(),
            _ => hash_key(&self.to_xml()),
        }
    }

    /// The `(attribute, value)` pairs JXSE indexes for discovery, in its
    /// `getIndexFields()` order; absent or empty fields are left out.
    pub fn index_fields(&self) -> Vec<(&'static str, String)> {
        let mut v: Vec<(&'static str, Option<String>)> = Vec::with_capacity(4);
        match self {
            Advertisement::Peer(p) => {
                v.push(("Name", Some(p.name.clone())));
                v.push(("PID", Some(p.peer_id.to_string())));
            }
            Advertisement::Group(g) => {
                v.push(("Name", g.name.clone()));
                v.push(("GID", Some(g.group_id.to_string())));
                v.push(("Desc", g.desc.clone()));
                v.push(("MSID", Some(g.spec_id.to_string())));
            }
            Advertisement::Pipe(p) => {
                v.push(("Name", p.name.clone()));
                v.push(("Id", Some(p.id.to_string())));
            }
            Advertisement::ModuleClass(m) => {
                v.push(("Name", m.name.clone()));
                v.push(("MCID", Some(m.class_id.to_string())));
            }
            Advertisement::ModuleSpec(m) => {
                v.push(("Name", m.name.clone()));
                v.push(("MSID", Some(m.spec_id.to_string())));
            }
            Advertisement::ModuleImpl(m) => v.push(("MSID", Some(m.spec_id.to_string()))),
            Advertisement::Route(r) => v.push(("DstPID", r.dest_peer.map(|p| p.to_string()))),
            Advertisement::AccessPoint(a) => v.push(("PID", a.peer_id.map(|p| p.to_string()))),
            Advertisement::Rdv(r) => {
                v.push(("RdvPeerId", Some(r.peer_id.to_string())));
                v.push(("RdvServiceName", Some(r.service_name.clone())));
                v.push(("RdvGroupId", Some(r.group_id.to_string())));
            }
        }
        v.into_iter()
            .filter_map(|(k, val)| val.filter(|s| !s.is_empty()).map(|s| (k, s)))
            .collect()
    }

    /// The document tree, as JXSE's `getDocument` builds it.
    pub fn to_element(&self) -> XmlElement {
        match self {
            Advertisement::Peer(p) => peer_element(p),
            Advertisement::Group(g) => g.to_element(),
            Advertisement::Pipe(p) => pipe_element(p),
            Advertisement::ModuleClass(m) => m.to_element(),
            Advertisement::ModuleSpec(m) => m.to_element(),
            Advertisement::ModuleImpl(m) => m.to_element(),
            Advertisement::Route(r) => r.to_element(),
            Advertisement::AccessPoint(a) => a.to_element(),
            Advertisement::Rdv(r) => r.to_element(),
        }
    }

    /// The unsigned document as JXSE writes it (`getDocument(XMLUTF8)`).
    pub fn to_xml(&self) -> String {
        match self {
            Advertisement::Peer(p) => p.to_xml(),
            Advertisement::Pipe(p) => p.to_xml(),
            _ => self.to_element().to_document(),
        }
    }

    /// The document as JXSE's `Advertisement.toString()` writes it (the
    /// form carried in discovery messages): the root's `xml:space` becomes
    /// `default`, so the children are pretty-printed.
    pub fn to_jxse_string(&self) -> String {
        let mut e = self.to_element();
        for (k, v) in &mut e.attrs {
            if k == "xml:space" {
                *v = "default".to_string();
            }
        }
        e.to_document()
    }

    /// The signed document (`sign(cred, true, true)` then
    /// `getSignedDocument()`): key and peer ID included.
    pub fn to_signed_xml(&self, identity: &Identity) -> Result<String, AdvError> {
        let mut e = self.to_element();
        let sig = signed::sign(&e, identity, true, true)?;
        sig.append_to(&mut e);
        Ok(e.to_document())
    }
}

/// Every root element [`Advertisement::parse`] understands.
pub const ROOTS: [&str; 9] = [
    PEER_ADV_ROOT,
    PGA_ROOT,
    PIPE_ADV_ROOT,
    MCA_ROOT,
    MSA_ROOT,
    MIA_ROOT,
    ROUTE_ROOT,
    APA_ROOT,
    RDV_ROOT,
];
