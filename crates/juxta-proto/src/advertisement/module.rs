//! Module advertisements (digest §8.2): the class (`jxta:MCA`: what a
//! service is), the specification (`jxta:MSA`: one protocol for it) and
//! the implementation (`jxta:MIA`: code that implements a spec). Peer
//! groups name their implementation through these IDs; JXSE publishes
//! them in every group and discovers them to instantiate subgroups.

use super::pipe::{PipeAdvertisement, PIPE_ADV_ROOT};
use super::tree::XmlElement;
use super::{opt_id, opt_text, parse_xml, req_id, AdvError, XmlNode, MAX_XML_ELEMENTS};
use crate::id::{ModuleClassId, ModuleSpecId};

/// Root element of a module class advertisement.
pub const MCA_ROOT: &str = "jxta:MCA";
/// Root element of a module spec advertisement.
pub const MSA_ROOT: &str = "jxta:MSA";
/// Root element of a module impl advertisement.
pub const MIA_ROOT: &str = "jxta:MIA";

/// Reads an opaque child subtree (`Parm`, `Comp`).
fn opaque(n: &XmlNode, field: &'static str) -> Result<Option<XmlElement>, AdvError> {
    let Some(c) = n.child(field) else {
        return Ok(None);
    };
    let e = XmlElement::from_node(c);
    if e.count() > MAX_XML_ELEMENTS {
        return Err(AdvError::TooMany {
            field,
            max: MAX_XML_ELEMENTS,
        });
    }
    Ok(Some(e))
}

/// A module class advertisement.
///
/// ```
/// use juxta_proto::advertisement::ModuleClassAdvertisement;
/// use juxta_proto::id::ModuleClassId;
/// let mca = ModuleClassAdvertisement::new(ModuleClassId::reference(0x03)).with_name("Discovery");
/// assert_eq!(ModuleClassAdvertisement::parse(&mca.to_xml()).unwrap(), mca);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModuleClassAdvertisement {
    /// The class ID (`MCID`).
    pub class_id: ModuleClassId,
    /// `Name`, if any.
    pub name: Option<String>,
    /// `Desc`, if any.
    pub desc: Option<String>,
}

impl ModuleClassAdvertisement {
    /// An advertisement without name or description.
    pub fn new(class_id: ModuleClassId) -> ModuleClassAdvertisement {
        ModuleClassAdvertisement {
            class_id,
            name: None,
            desc: None,
        }
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> ModuleClassAdvertisement {
        self.name = Some(name.into());
        self
    }

    /// Sets the description.
    pub fn with_desc(mut self, desc: impl Into<String>) -> ModuleClassAdvertisement {
        self.desc = Some(desc.into());
        self
    }

    /// The document tree (`ModuleClassAdv.getDocument`).
    pub fn to_element(&self) -> XmlElement {
        let mut root = XmlElement::adv_root(MCA_ROOT);
        root.push_text("MCID", &self.class_id.to_string());
        if let Some(n) = &self.name {
            root.push_text("Name", n);
        }
        if let Some(d) = &self.desc {
            root.push_text("Desc", d);
        }
        root
    }

    /// The document exactly as JXSE writes it.
    pub fn to_xml(&self) -> String {
        self.to_element().to_document()
    }

    pub(crate) fn from_node(n: &XmlNode) -> Result<ModuleClassAdvertisement, AdvError> {
        Ok(ModuleClassAdvertisement {
            class_id: req_id(n, "MCID")?,
            name: opt_text(n, "Name")?,
            desc: opt_text(n, "Desc")?,
        })
    }

    /// Parses a module class advertisement.
    pub fn parse(xml: &str) -> Result<ModuleClassAdvertisement, AdvError> {
        ModuleClassAdvertisement::from_node(&parse_xml(xml)?.expect_root(MCA_ROOT)?)
    }
}

/// A module spec advertisement.
///
/// `Crtr`, `SURI` and `Vers` are always written (JXSE writes `<Crtr/>`
/// when unset); empty values read back as `None`.
///
/// ```
/// use juxta_proto::advertisement::ModuleSpecAdvertisement;
/// use juxta_proto::group::ALL_PURPOSE_GROUP_SPEC;
/// let msa = ModuleSpecAdvertisement::new(ALL_PURPOSE_GROUP_SPEC.parse().unwrap())
///     .with_name("StdPeerGroup");
/// assert_eq!(ModuleSpecAdvertisement::parse(&msa.to_xml()).unwrap(), msa);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModuleSpecAdvertisement {
    /// The spec ID (`MSID`).
    pub spec_id: ModuleSpecId,
    /// `Name`, if any.
    pub name: Option<String>,
    /// `Desc`, if any.
    pub desc: Option<String>,
    /// `Crtr`, the creator.
    pub creator: Option<String>,
    /// `SURI`, the specification URI.
    pub spec_uri: Option<String>,
    /// `Vers`, the version.
    pub version: Option<String>,
    /// An embedded pipe advertisement, if any.
    pub pipe: Option<PipeAdvertisement>,
    /// `Proxy`: the spec of a proxy module, if any.
    pub proxy: Option<ModuleSpecId>,
    /// `Auth`: the spec of an authenticator module, if any.
    pub auth: Option<ModuleSpecId>,
    /// `Parm`: opaque parameters, if any.
    pub param: Option<XmlElement>,
}

impl ModuleSpecAdvertisement {
    /// An advertisement with only the spec ID.
    pub fn new(spec_id: ModuleSpecId) -> ModuleSpecAdvertisement {
        ModuleSpecAdvertisement {
            spec_id,
            name: None,
            desc: None,
            creator: None,
            spec_uri: None,
            version: None,
            pipe: None,
            proxy: None,
            auth: None,
            param: None,
        }
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> ModuleSpecAdvertisement {
        self.name = Some(name.into());
        self
    }

    /// The document tree (`ModuleSpecAdv.getDocument`).
    pub fn to_element(&self) -> XmlElement {
        let mut root = XmlElement::adv_root(MSA_ROOT);
        root.push_text("MSID", &self.spec_id.to_string());
        if let Some(n) = &self.name {
            root.push_text("Name", n);
        }
        if let Some(d) = &self.desc {
            root.push_text("Desc", d);
        }
        for (tag, v) in [
            ("Crtr", &self.creator),
            ("SURI", &self.spec_uri),
            ("Vers", &self.version),
        ] {
            root.push_text(tag, v.as_deref().unwrap_or(""));
        }
        if let Some(p) = &self.pipe {
            root.push(pipe_element(p).into_copied());
        }
        if let Some(p) = &self.proxy {
            root.push_text("Proxy", &p.to_string());
        }
        if let Some(a) = &self.auth {
            root.push_text("Auth", &a.to_string());
        }
        if let Some(p) = &self.param {
            root.push(p.clone().renamed("Parm"));
        }
        root
    }

    /// The document exactly as JXSE writes it.
    pub fn to_xml(&self) -> String {
        self.to_element().to_document()
    }

    pub(crate) fn from_node(n: &XmlNode) -> Result<ModuleSpecAdvertisement, AdvError> {
        let nonempty = |v: Option<String>| v.filter(|s| !s.is_empty());
        let pipe = match n.child(PIPE_ADV_ROOT) {
            Some(p) => Some(super::pipe::from_node(p)?),
            None => None,
        };
        Ok(ModuleSpecAdvertisement {
            spec_id: req_id(n, "MSID")?,
            name: opt_text(n, "Name")?,
            desc: opt_text(n, "Desc")?,
            creator: nonempty(opt_text(n, "Crtr")?),
            spec_uri: nonempty(opt_text(n, "SURI")?),
            version: nonempty(opt_text(n, "Vers")?),
            pipe,
            proxy: opt_id(n, "Proxy")?,
            auth: opt_id(n, "Auth")?,
            param: opaque(n, "Parm")?,
        })
    }

    /// Parses a module spec advertisement.
    pub fn parse(xml: &str) -> Result<ModuleSpecAdvertisement, AdvError> {
        ModuleSpecAdvertisement::from_node(&parse_xml(xml)?.expect_root(MSA_ROOT)?)
    }
}

/// The pipe advertisement as a tree (the same children as
/// [`PipeAdvertisement::to_xml`]).
pub(crate) fn pipe_element(p: &PipeAdvertisement) -> XmlElement {
    let mut e = XmlElement::adv_root(PIPE_ADV_ROOT);
    e.push_text("Id", &p.id.to_string());
    e.push_text("Type", p.pipe_type.as_str());
    if let Some(n) = &p.name {
        e.push_text("Name", n);
    }
    if let Some(d) = &p.desc {
        e.push_text("Desc", d);
    }
    e
}

/// A module implementation advertisement.
///
/// ```
/// use juxta_proto::advertisement::{ModuleImplAdvertisement, XmlElement};
/// use juxta_proto::group::ALL_PURPOSE_GROUP_SPEC;
/// let mut comp = XmlElement::new("Comp");
/// comp.push_text("Efmt", "JDK1.4.1").push_text("Bind", "V2.0 Ref Impl");
/// let mia = ModuleImplAdvertisement::new(
///     ALL_PURPOSE_GROUP_SPEC.parse().unwrap(),
///     comp,
///     "net.jxta.impl.peergroup.StdPeerGroup",
/// );
/// assert_eq!(ModuleImplAdvertisement::parse(&mia.to_xml()).unwrap(), mia);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModuleImplAdvertisement {
    /// The spec implemented (`MSID`).
    pub spec_id: ModuleSpecId,
    /// `Desc`, if any.
    pub desc: Option<String>,
    /// `Comp`: the compatibility statement (e.g. `Efmt`, `Bind`).
    pub compat: XmlElement,
    /// `Code`: what to load (for JXSE, a Java class name).
    pub code: String,
    /// `PURI`: the package URI, if any.
    pub package_uri: Option<String>,
    /// `Prov`: the provider, if any.
    pub provider: Option<String>,
    /// `Parm`: opaque parameters, if any.
    pub param: Option<XmlElement>,
}

impl ModuleImplAdvertisement {
    /// An advertisement with the required fields.
    pub fn new(
        spec_id: ModuleSpecId,
        compat: XmlElement,
        code: impl Into<String>,
    ) -> ModuleImplAdvertisement {
        ModuleImplAdvertisement {
            spec_id,
            desc: None,
            compat: compat.renamed("Comp"),
            code: code.into(),
            package_uri: None,
            provider: None,
            param: None,
        }
    }

    /// The document tree (`ModuleImplAdv.getDocument`).
    pub fn to_element(&self) -> XmlElement {
        let mut root = XmlElement::adv_root(MIA_ROOT);
        root.push_text("MSID", &self.spec_id.to_string());
        if let Some(d) = &self.desc {
            root.push_text("Desc", d);
        }
        root.push(self.compat.clone().renamed("Comp"));
        root.push_text("Code", &self.code);
        if let Some(u) = &self.package_uri {
            root.push_text("PURI", u);
        }
        if let Some(p) = &self.provider {
            root.push_text("Prov", p);
        }
        if let Some(p) = &self.param {
            root.push(p.clone().renamed("Parm"));
        }
        root
    }

    /// The document exactly as JXSE writes it.
    pub fn to_xml(&self) -> String {
        self.to_element().to_document()
    }

    pub(crate) fn from_node(n: &XmlNode) -> Result<ModuleImplAdvertisement, AdvError> {
        Ok(ModuleImplAdvertisement {
            spec_id: req_id(n, "MSID")?,
            desc: opt_text(n, "Desc")?,
            compat: opaque(n, "Comp")?.ok_or(AdvError::Missing("Comp"))?,
            code: opt_text(n, "Code")?
                .filter(|c| !c.is_empty())
                .ok_or(AdvError::Missing("Code"))?,
            package_uri: opt_text(n, "PURI")?,
            provider: opt_text(n, "Prov")?,
            param: opaque(n, "Parm")?,
        })
    }

    /// Parses a module impl advertisement.
    pub fn parse(xml: &str) -> Result<ModuleImplAdvertisement, AdvError> {
        ModuleImplAdvertisement::from_node(&parse_xml(xml)?.expect_root(MIA_ROOT)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::PipeType;

    const MSID: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000010306";

    #[test]
    fn msa_layout() {
        let pipe = PipeAdvertisement::new(
            "urn:jxta:cbid-59616261646162614E504720503250331BCCB518AD964EAEB85FC21D6192727604"
                .parse()
                .unwrap(),
            PipeType::Unicast,
        );
        let mut msa = ModuleSpecAdvertisement::new(MSID.parse().unwrap()).with_name("n");
        msa.version = Some("1.0".into());
        msa.pipe = Some(pipe.clone());
        let mut parm = XmlElement::new("Parm");
        parm.push_text("x", "y");
        msa.param = Some(parm);
        let xml = msa.to_xml();
        assert!(xml.contains(&format!("<MSID>{MSID}</MSID><Name>n</Name><Crtr/><SURI/><Vers>1.0</Vers><jxta:PipeAdvertisement xmlns:jxta=\"http://jxta.org\" xml:space=\"preserve\"><Id>")), "{xml}");
        assert!(xml.ends_with("</jxta:PipeAdvertisement><Parm><x>y</x></Parm></jxta:MSA>\n"));
        assert_eq!(ModuleSpecAdvertisement::parse(&xml).unwrap(), msa);
    }

    #[test]
    fn mia_requires_comp_and_code() {
        let base = format!(
            "<jxta:MIA><MSID>{MSID}</MSID><Comp><Efmt>J</Efmt></Comp><Code>c</Code></jxta:MIA>"
        );
        let mia = ModuleImplAdvertisement::parse(&base).unwrap();
        assert_eq!(mia.compat.child("Efmt").unwrap().text, "J");
        assert_eq!(ModuleImplAdvertisement::parse(&mia.to_xml()).unwrap(), mia);
        assert_eq!(
            ModuleImplAdvertisement::parse(&base.replace("<Code>c</Code>", "")),
            Err(AdvError::Missing("Code"))
        );
        assert_eq!(
            ModuleImplAdvertisement::parse(&base.replace("<Comp><Efmt>J</Efmt></Comp>", "")),
            Err(AdvError::Missing("Comp"))
        );
        assert!(matches!(
            ModuleClassAdvertisement::parse(&format!("<jxta:MCA><MCID>{MSID}</MCID></jxta:MCA>")),
            Err(AdvError::BadId { field: "MCID", .. })
        ));
    }
}
