//! The pipe advertisement `jxta:PipeAdvertisement` (digest §6.1).

use super::{parse_xml, AdvDoc, AdvError, PipeType};
use crate::id::PipeId;

/// The root element of a pipe advertisement.
pub const PIPE_ADV_ROOT: &str = "jxta:PipeAdvertisement";

/// A pipe advertisement: `Id`, `Type`, optional `Name` and `Desc`.
///
/// ```
/// use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
/// let id = "urn:jxta:cbid-59616261646162614E504720503250331122334455667788112233445566778804"
///     .parse()
///     .unwrap();
/// let adv = PipeAdvertisement::new(id, PipeType::Unicast).with_name("chat");
/// assert_eq!(PipeAdvertisement::parse(&adv.to_xml()).unwrap(), adv);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PipeAdvertisement {
    /// The pipe ID (`Id`).
    pub id: PipeId,
    /// The pipe type (`Type`).
    pub pipe_type: PipeType,
    /// The name (`Name`), if any.
    pub name: Option<String>,
    /// The description (`Desc`), if any.
    pub desc: Option<String>,
}

impl PipeAdvertisement {
    /// An advertisement without name or description.
    pub fn new(id: PipeId, pipe_type: PipeType) -> PipeAdvertisement {
        PipeAdvertisement {
            id,
            pipe_type,
            name: None,
            desc: None,
        }
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> PipeAdvertisement {
        self.name = Some(name.into());
        self
    }

    /// Sets the description.
    pub fn with_desc(mut self, desc: impl Into<String>) -> PipeAdvertisement {
        self.desc = Some(desc.into());
        self
    }

    /// The document exactly as JXSE writes it (`getDocument(XMLUTF8)` sent
    /// as a message element): XML declaration, DOCTYPE, root with
    /// `xml:space="preserve"`, children unindented, final newline.
    pub fn to_xml(&self) -> String {
        let mut d = AdvDoc::new(PIPE_ADV_ROOT);
        d.field("Id", &self.id.to_string());
        d.field("Type", self.pipe_type.as_str());
        if let Some(n) = &self.name {
            d.field("Name", n);
        }
        if let Some(s) = &self.desc {
            d.field("Desc", s);
        }
        d.finish()
    }

    /// Parses a pipe advertisement, pretty-printed or not. Unknown children
    /// are ignored; `Id` and `Type` are required. Text values are trimmed.
    pub fn parse(xml: &str) -> Result<PipeAdvertisement, AdvError> {
        from_node(&parse_xml(xml)?.expect_root(PIPE_ADV_ROOT)?)
    }
}

/// Reads the children of a `jxta:PipeAdvertisement` element.
pub(crate) fn from_node(root: &super::XmlNode) -> Result<PipeAdvertisement, AdvError> {
    let id = root.child_value("Id").ok_or(AdvError::Missing("Id"))?;
    let id: PipeId = id.parse().map_err(|source| AdvError::BadId {
        field: "Id",
        source,
    })?;
    let pipe_type: PipeType = root
        .child_value("Type")
        .ok_or(AdvError::Missing("Type"))?
        .parse()?;
    Ok(PipeAdvertisement {
        id,
        pipe_type,
        name: root.child_value("Name").map(str::to_string),
        desc: root.child_value("Desc").map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::XmlError;
    use proptest::prelude::*;

    const ID: &str =
        "urn:jxta:cbid-59616261646162614E504720503250331BCCB518AD964EAEB85FC21D6192727604";
    /// The reqPipe element of the stock vector 20, as JXSE wrote it.
    const JXSE: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:PipeAdvertisement>\n<jxta:PipeAdvertisement xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<Id>urn:jxta:cbid-59616261646162614E504720503250331BCCB518AD964EAEB85FC21D6192727604</Id><Type>JxtaUnicast</Type><Name>bench-socket-server.remote</Name></jxta:PipeAdvertisement>\n";

    #[test]
    fn jxse_document_round_trips_byte_for_byte() {
        let adv = PipeAdvertisement::parse(JXSE).unwrap();
        assert_eq!(adv.id.to_string(), ID);
        assert_eq!(adv.pipe_type, PipeType::Unicast);
        assert_eq!(adv.name.as_deref(), Some("bench-socket-server.remote"));
        assert_eq!(adv.desc, None);
        assert_eq!(adv.to_xml(), JXSE);
    }

    #[test]
    fn lenient_parse() {
        let pretty = format!(
            "<jxta:PipeAdvertisement xmlns:jxta=\"http://jxta.org\">\n\t<Type>\n\t\tJxtaPropagate\n\t</Type>\n\t<Id>\n\t\t{ID}\n\t</Id>\n\t<Other><X/></Other>\n\t<Desc>d &amp; e</Desc>\n</jxta:PipeAdvertisement>"
        );
        let adv = PipeAdvertisement::parse(&pretty).unwrap();
        assert_eq!(adv.pipe_type, PipeType::Propagate);
        assert_eq!(adv.desc.as_deref(), Some("d & e"));
        assert_eq!(adv.name, None);
    }

    #[test]
    fn rejects_bad_adverts() {
        let no_id = "<jxta:PipeAdvertisement><Type>JxtaUnicast</Type></jxta:PipeAdvertisement>";
        assert_eq!(
            PipeAdvertisement::parse(no_id),
            Err(AdvError::Missing("Id"))
        );
        let no_type = format!("<jxta:PipeAdvertisement><Id>{ID}</Id></jxta:PipeAdvertisement>");
        assert_eq!(
            PipeAdvertisement::parse(&no_type),
            Err(AdvError::Missing("Type"))
        );
        let bad_type = format!(
            "<jxta:PipeAdvertisement><Id>{ID}</Id><Type>Nope</Type></jxta:PipeAdvertisement>"
        );
        assert!(matches!(
            PipeAdvertisement::parse(&bad_type),
            Err(AdvError::PipeType(_))
        ));
        let peer_id = "<jxta:PipeAdvertisement><Id>urn:jxta:cbid-59616261646162614A7874615032503303</Id><Type>JxtaUnicast</Type></jxta:PipeAdvertisement>";
        assert!(matches!(
            PipeAdvertisement::parse(peer_id),
            Err(AdvError::BadId { field: "Id", .. })
        ));
        assert!(matches!(
            PipeAdvertisement::parse("<jxta:PA/>"),
            Err(AdvError::Xml(XmlError::WrongRoot { .. }))
        ));
        assert!(matches!(
            PipeAdvertisement::parse(&" ".repeat(70_000)),
            Err(AdvError::Xml(XmlError::TooLarge(_)))
        ));
    }

    proptest! {
        #[test]
        fn round_trip(
            bytes in proptest::array::uniform16(any::<u8>()),
            ty in 0u8..3,
            name in proptest::option::of("[a-zA-Z0-9&<>'\" ._\\]-]{0,24}"),
            desc in proptest::option::of("[a-zA-Z0-9&<> ._\\]-]{0,24}"),
        ) {
            let id = crate::id::JxtaId::from_parts(
                crate::id::IdFormat::Cbid,
                crate::id::NET_GROUP_UUID,
                bytes,
                crate::id::IdType::Pipe,
            );
            let ty = [PipeType::Unicast, PipeType::UnicastSecure, PipeType::Propagate][ty as usize];
            let adv = PipeAdvertisement {
                id: id.try_into().unwrap(),
                pipe_type: ty,
                name: name.map(|n| n.trim().to_string()),
                desc: desc.map(|d| d.trim().to_string()),
            };
            prop_assert_eq!(PipeAdvertisement::parse(&adv.to_xml()).unwrap(), adv);
        }
    }
}
