//! The rendezvous protocol's wire messages, element for element as JXSE
//! 2.7 writes them (digest §7.3).
//!
//! - [`LeaseMessage`]: the edge ↔ rendezvous lease protocol (`Connect`,
//!   `RdvAdvReply` + `ConnectedPeer` + `ConnectedLease`, `Disconnect`), sent
//!   to service [`RDV_SERVICE`] with the group's unique value as param.
//! - [`PropagateHeader`]: `jxta:RendezVousPropagateMessage`, the header that
//!   carries TTL, message ID and visited path on every propagated message
//!   (service [`PROPAGATE_SERVICE`]).
//! - [`PeerViewMessage`]: rendezvous ↔ rendezvous probes and responses of
//!   the peer view (service [`PEERVIEW_SERVICE`]).
//! - [`WalkHeader`]: `jxta:LimitedRangeRdvMessage`, the limited-range
//!   walker's header (service `LR-Greeter<group ID>`).
//! - [`BusyNotice`]: Juxta's own "rendezvous busy" answer; JXSE has no such
//!   message (see its documentation for what a JXSE peer sees).
//!
//! Advertisements inside these messages (`jxta:PA`, `jxta:RdvAdvertisement`,
//! `jxta:RA`) are carried as their XML bytes; only the peer ID is read out.
//! Hook: once `advertisement::rdv` lands, [`PeerViewMessage::rdv_peer`] can
//! be read through the typed `RdvAdvertisement` instead of
//! [`rdv_adv_peer_id`].

use bytes::Bytes;

use crate::advertisement::{
    parse_xml, truncate, AdvDoc, AdvError, PeerAdvertisement, PrettyDoc, XmlError,
};
use crate::endpoint::ServiceAddress;
use crate::id::{IdError, PeerGroupId, PeerId};
use crate::message::{Element, Message, MIME_XML_UTF8, NS_JXTA};

/// The rendezvous service's endpoint name: its module class ID URN. Lease
/// messages go to `(RDV_SERVICE, <group unique>)`.
pub const RDV_SERVICE: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000605";
/// Lease request element: the requester's `jxta:PA`.
pub const ELEM_CONNECT: &str = "Connect";
/// Lease cancel element: the sender's `jxta:PA`.
pub const ELEM_DISCONNECT: &str = "Disconnect";
/// Lease grant element: the rendezvous peer ID (text).
pub const ELEM_CONNECTED_PEER: &str = "ConnectedPeer";
/// Lease grant element: lease duration in ms (decimal text).
pub const ELEM_CONNECTED_LEASE: &str = "ConnectedLease";
/// Lease grant element: the rendezvous' `jxta:PA`.
pub const ELEM_RDV_ADV_REPLY: &str = "RdvAdvReply";
/// Juxta's addition to a refusal (`ConnectedLease` 0): why. JXSE ignores it.
pub const ELEM_REFUSE_REASON: &str = "Juxta.RefuseReason";

/// The propagation service name; the param is the group unique value.
pub const PROPAGATE_SERVICE: &str = "JxtaPropagate";
/// Root of the propagation header document.
pub const PROPAGATE_ROOT: &str = "jxta:RendezVousPropagateMessage";
/// Prefix of the propagation header element name (`+ group unique`).
pub const PROPAGATE_ELEMENT_PREFIX: &str = "RendezVousPropagate";
/// JXSE's cap on a propagation TTL (`DEFAULT_MAX_TTL`).
pub const MAX_TTL: i32 = 200;
/// Most `Path` entries accepted in a propagation header.
pub const MAX_PATH: usize = 256;
/// Longest `MessageId`, service name or param accepted.
pub const MAX_FIELD_LEN: usize = 1024;

/// The peer view service name; the param is the group unique value.
pub const PEERVIEW_SERVICE: &str = "PeerView";
/// Probe element: a `jxta:RdvAdvertisement`.
pub const ELEM_PV_PROBE: &str = "PeerView.PeerAdv";
/// Response element: a `jxta:RdvAdvertisement`.
pub const ELEM_PV_RESPONSE: &str = "PeerView.PeerAdv.Response";
/// Flag: the advertisement carried is not the sender's own.
pub const ELEM_PV_CACHED: &str = "PeerView.Cached";
/// The sender's route advertisement (`jxta:RA`), with cached adverts.
pub const ELEM_PV_SRC_ROUTE: &str = "PeerView.SrcRouteAdv";
/// Flag: the sender is an edge peer.
pub const ELEM_PV_EDGE: &str = "PeerView.EdgePeer";
/// Flag: the advertised peer has failed.
pub const ELEM_PV_FAILURE: &str = "PeerView.Failure";

/// The walker's service name prefix (`+ group ID URN`).
pub const WALK_SERVICE_PREFIX: &str = "LR-Greeter";
/// The walker header element name.
pub const WALK_ELEMENT: &str = "LimitedRangeRdvMessage";
/// Root of the walker header document.
pub const WALK_ROOT: &str = "jxta:LimitedRangeRdvMessage";
/// Element naming the real destination service of a walked message.
pub const ELEM_WALK_SVC_NAME: &str = "RdvWalkSvcName";
/// Element naming the real destination param of a walked message.
pub const ELEM_WALK_SVC_PARAM: &str = "RdvWalkSvcParam";

/// Juxta's busy answer element (namespace `jxta`).
pub const ELEM_BUSY: &str = "Juxta.Busy";

/// Errors from a rendezvous message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RdvMessageError {
    /// The message carries none of the elements of this protocol.
    #[error("not a rendezvous message of this kind")]
    NotThisProtocol,
    /// A lease request or disconnect names another peer than the one that
    /// sent it: a peer acts only for itself.
    #[error("lease message for {claimed} sent by {sender}")]
    NotSender {
        /// The peer the message's advertisement names.
        claimed: Box<PeerId>,
        /// The peer that sent it.
        sender: Box<PeerId>,
    },
    /// A required element is missing.
    #[error("message without the {0} element")]
    MissingElement(&'static str),
    /// A document's XML is too large or malformed.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// An element is not UTF-8.
    #[error("element {0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A number does not parse or is out of range.
    #[error("bad {field} value {value:?}")]
    BadNumber {
        /// The field.
        field: &'static str,
        /// Its text (truncated).
        value: String,
    },
    /// A peer ID is malformed.
    #[error("bad peer ID in {field}: {source}")]
    BadPeerId {
        /// The field.
        field: &'static str,
        /// Why.
        source: IdError,
    },
    /// An embedded advertisement does not parse.
    #[error("bad advertisement in {field}: {source}")]
    BadAdvertisement {
        /// The element.
        field: &'static str,
        /// Why.
        source: AdvError,
    },
    /// A document lacks a required child.
    #[error("document without <{0}>")]
    MissingChild(&'static str),
    /// A field is longer than [`MAX_FIELD_LEN`] or a list longer than its bound.
    #[error("{0} exceeds its size bound")]
    TooLong(&'static str),
}

fn elem_str<'m>(msg: &'m Message, name: &'static str) -> Result<Option<&'m str>, RdvMessageError> {
    match msg.get(NS_JXTA, name) {
        None => Ok(None),
        Some(e) => e.as_str().map(Some).ok_or(RdvMessageError::NotUtf8(name)),
    }
}

fn parse_peer(text: &str, field: &'static str) -> Result<PeerId, RdvMessageError> {
    text.trim()
        .parse()
        .map_err(|source| RdvMessageError::BadPeerId { field, source })
}

fn pa_peer(xml: &str, field: &'static str) -> Result<PeerId, RdvMessageError> {
    PeerAdvertisement::parse(xml)
        .map(|pa| pa.peer_id)
        .map_err(|source| RdvMessageError::BadAdvertisement { field, source })
}

fn num<T: std::str::FromStr>(text: &str, field: &'static str) -> Result<T, RdvMessageError> {
    text.trim().parse().map_err(|_| RdvMessageError::BadNumber {
        field,
        value: truncate(text),
    })
}

fn bounded(s: &str, field: &'static str) -> Result<String, RdvMessageError> {
    if s.len() > MAX_FIELD_LEN {
        return Err(RdvMessageError::TooLong(field));
    }
    Ok(s.to_string())
}

/// The lease service address of a group: `(RDV_SERVICE, <group unique>)`.
pub fn lease_address(group: &PeerGroupId) -> ServiceAddress {
    ServiceAddress::new(RDV_SERVICE, Some(&group.unique_value()))
}

/// The propagation service address of a group.
pub fn propagate_address(group: &PeerGroupId) -> ServiceAddress {
    ServiceAddress::new(PROPAGATE_SERVICE, Some(&group.unique_value()))
}

/// The peer view service address of a group.
pub fn peerview_address(group: &PeerGroupId) -> ServiceAddress {
    ServiceAddress::new(PEERVIEW_SERVICE, Some(&group.unique_value()))
}

/// The walker (greeter) service address of a group:
/// `("LR-Greeter" + group ID URN, RDV_SERVICE + group unique)`.
///
/// ```
/// use juxta_proto::id::PeerGroupId;
/// let a = juxta_proto::rendezvous::messages::walk_address(&PeerGroupId::NET);
/// assert_eq!(a.service, "LR-Greeterurn:jxta:jxta-NetGroup");
/// assert_eq!(a.param.as_deref(), Some("urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000605jxta-NetGroup"));
/// ```
pub fn walk_address(group: &PeerGroupId) -> ServiceAddress {
    ServiceAddress::new(
        &format!("{WALK_SERVICE_PREFIX}{group}"),
        Some(&format!("{RDV_SERVICE}{}", group.unique_value())),
    )
}

/// The propagation header element name for a group, e.g.
/// `RendezVousPropagatejxta-NetGroup`.
pub fn propagate_element_name(group_unique: &str) -> String {
    format!("{PROPAGATE_ELEMENT_PREFIX}{group_unique}")
}

// ---------------------------------------------------------------------------
// Leases.
// ---------------------------------------------------------------------------

/// One message of the lease protocol.
///
/// ```
/// use juxta_proto::rendezvous::messages::LeaseMessage;
/// use juxta_proto::advertisement::PeerAdvertisement;
/// use juxta_proto::id::{PeerGroupId, PeerId};
/// let peer: PeerId = "urn:jxta:cbid-59616261646162614A78746150325033000000000000000000000000000000AB03".parse().unwrap();
/// let pa = PeerAdvertisement::new(peer, PeerGroupId::NET, "edge").to_xml();
/// let m = LeaseMessage::Request { peer, peer_adv: pa.into() }.to_message();
/// assert_eq!(m.elements[0].name, "Connect");
/// assert_eq!(LeaseMessage::from_message(&m).unwrap(), LeaseMessage::Request { peer, peer_adv: m.elements[0].data.clone() });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseMessage {
    /// An edge asks for (or renews) a lease: element `Connect` = its `jxta:PA`.
    Request {
        /// The requester (from the PA's `PID`).
        peer: PeerId,
        /// The requester's `jxta:PA` XML.
        peer_adv: Bytes,
    },
    /// A rendezvous grants a lease, or refuses/cancels it with `lease_ms ≤ 0`.
    Granted {
        /// The rendezvous (`ConnectedPeer`).
        rdv: PeerId,
        /// The rendezvous' `jxta:PA` XML (`RdvAdvReply`).
        rdv_adv: Bytes,
        /// The lease in ms (`ConnectedLease`); ≤ 0 means refused.
        lease_ms: i64,
        /// Juxta only: why a lease was refused.
        refuse_reason: Option<String>,
    },
    /// Either side ends the lease: element `Disconnect` = the sender's `jxta:PA`.
    Disconnect {
        /// The sender (from the PA's `PID`).
        peer: PeerId,
        /// The sender's `jxta:PA` XML.
        peer_adv: Bytes,
    },
}

impl LeaseMessage {
    /// The message as JXSE builds it.
    pub fn to_message(&self) -> Message {
        let xml = |name: &str, b: &Bytes| Element::typed(NS_JXTA, name, MIME_XML_UTF8, b.clone());
        match self {
            LeaseMessage::Request { peer_adv, .. } => {
                Message::new().with(xml(ELEM_CONNECT, peer_adv))
            }
            LeaseMessage::Disconnect { peer_adv, .. } => {
                Message::new().with(xml(ELEM_DISCONNECT, peer_adv))
            }
            LeaseMessage::Granted {
                rdv,
                rdv_adv,
                lease_ms,
                refuse_reason,
            } => {
                let mut m = Message::new()
                    .with(xml(ELEM_RDV_ADV_REPLY, rdv_adv))
                    .with(Element::text(
                        NS_JXTA,
                        ELEM_CONNECTED_PEER,
                        &rdv.to_string(),
                    ))
                    .with(Element::text(
                        NS_JXTA,
                        ELEM_CONNECTED_LEASE,
                        &lease_ms.to_string(),
                    ));
                if let Some(r) = refuse_reason {
                    m.push(Element::text(NS_JXTA, ELEM_REFUSE_REASON, r));
                }
                m
            }
        }
    }

    /// Reads a lease message. JXSE's precedence: a grant if `RdvAdvReply` or
    /// `ConnectedPeer` is present, then `Connect`, then `Disconnect`.
    pub fn from_message(msg: &Message) -> Result<LeaseMessage, RdvMessageError> {
        LeaseMessage::from_message_known(msg, |_| None)
    }

    /// As [`LeaseMessage::from_message`], but `known` may give the `PID` an
    /// earlier parse of exactly these `jxta:PA` bytes gave (a rendezvous
    /// sees the same advertisement in every lease renewal); the XML is then
    /// not parsed again. Same result whenever `known` only answers for bytes
    /// it saw parse.
    pub fn from_message_known(
        msg: &Message,
        known: impl Fn(&[u8]) -> Option<PeerId>,
    ) -> Result<LeaseMessage, RdvMessageError> {
        let has = |n| msg.get(NS_JXTA, n).is_some();
        if has(ELEM_RDV_ADV_REPLY) || has(ELEM_CONNECTED_PEER) {
            let adv_el = msg
                .get(NS_JXTA, ELEM_RDV_ADV_REPLY)
                .ok_or(RdvMessageError::MissingElement(ELEM_RDV_ADV_REPLY))?;
            let lease = elem_str(msg, ELEM_CONNECTED_LEASE)?
                .ok_or(RdvMessageError::MissingElement(ELEM_CONNECTED_LEASE))?;
            let lease_ms = num(lease, ELEM_CONNECTED_LEASE)?;
            let rdv = elem_str(msg, ELEM_CONNECTED_PEER)?
                .ok_or(RdvMessageError::MissingElement(ELEM_CONNECTED_PEER))?;
            let rdv = parse_peer(rdv, ELEM_CONNECTED_PEER)?;
            let refuse_reason = elem_str(msg, ELEM_REFUSE_REASON)?.map(truncate);
            return Ok(LeaseMessage::Granted {
                rdv,
                rdv_adv: adv_el.data.clone(),
                lease_ms,
                refuse_reason,
            });
        }
        for (name, connect) in [(ELEM_CONNECT, true), (ELEM_DISCONNECT, false)] {
            if let Some(e) = msg.get(NS_JXTA, name) {
                let peer = match known(&e.data) {
                    Some(p) => p,
                    None => {
                        let text = e.as_str().ok_or(RdvMessageError::NotUtf8(name))?;
                        pa_peer(text, name)?
                    }
                };
                let peer_adv = e.data.clone();
                return Ok(if connect {
                    LeaseMessage::Request { peer, peer_adv }
                } else {
                    LeaseMessage::Disconnect { peer, peer_adv }
                });
            }
        }
        Err(RdvMessageError::NotThisProtocol)
    }
}

// ---------------------------------------------------------------------------
// Propagation header.
// ---------------------------------------------------------------------------

/// The propagation header `jxta:RendezVousPropagateMessage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropagateHeader {
    /// `MessageId`: a `java.util.UUID` string (duplicate detection key).
    pub msg_id: String,
    /// `DestSName`: the listener the payload is for.
    pub dest_service: String,
    /// `DestSParam`: its param, if any.
    pub dest_param: Option<String>,
    /// `TTL`: hops left (≥ 1 when written).
    pub ttl: i32,
    /// `Path`: every peer visited, as peer ID URNs, in order.
    pub path: Vec<String>,
}

impl PropagateHeader {
    /// The document in JXSE's advertisement style (`xml:space="preserve"`).
    pub fn to_xml(&self) -> String {
        let mut d = AdvDoc::new(PROPAGATE_ROOT);
        d.field("MessageId", &self.msg_id);
        d.field("DestSName", &self.dest_service);
        if let Some(p) = &self.dest_param {
            d.field("DestSParam", p);
        }
        d.field("TTL", &self.ttl.to_string());
        for p in &self.path {
            d.field("Path", p);
        }
        d.finish()
    }

    /// Parses a header; `MessageId`, `DestSName` and `TTL` are required,
    /// unknown children are ignored.
    pub fn parse(xml: &str) -> Result<PropagateHeader, RdvMessageError> {
        let root = parse_xml(xml)?.expect_root(PROPAGATE_ROOT)?;
        let mut msg_id = None;
        let mut dest_service = None;
        let mut dest_param = None;
        let mut ttl = None;
        let mut path = Vec::new();
        for c in &root.children {
            let v = c.value();
            match c.name.as_str() {
                "MessageId" => msg_id = Some(bounded(v, "MessageId")?),
                "DestSName" => dest_service = Some(bounded(v, "DestSName")?),
                "DestSParam" => dest_param = Some(bounded(v, "DestSParam")?),
                "TTL" => ttl = Some(num(v, "TTL")?),
                "Path" => {
                    if path.len() >= MAX_PATH {
                        return Err(RdvMessageError::TooLong("Path"));
                    }
                    let p = bounded(v, "Path")?;
                    if !path.contains(&p) {
                        path.push(p);
                    }
                }
                _ => {}
            }
        }
        Ok(PropagateHeader {
            msg_id: msg_id.ok_or(RdvMessageError::MissingChild("MessageId"))?,
            dest_service: dest_service.ok_or(RdvMessageError::MissingChild("DestSName"))?,
            dest_param,
            ttl: ttl.ok_or(RdvMessageError::MissingChild("TTL"))?,
            path,
        })
    }

    /// Whether a peer is on the path.
    pub fn visited(&self, peer: &PeerId) -> bool {
        let s = peer.to_string();
        self.path.contains(&s)
    }

    /// The header element for a group (`jxta:RendezVousPropagate<group>`).
    pub fn to_element(&self, group_unique: &str) -> Element {
        Element::xml(
            NS_JXTA,
            &propagate_element_name(group_unique),
            self.to_xml(),
        )
    }

    /// Finds and parses the header of a message.
    pub fn from_message(
        msg: &Message,
        group_unique: &str,
    ) -> Result<PropagateHeader, RdvMessageError> {
        let name = propagate_element_name(group_unique);
        let e = msg
            .get(NS_JXTA, &name)
            .ok_or(RdvMessageError::MissingElement(PROPAGATE_ELEMENT_PREFIX))?;
        PropagateHeader::parse(
            e.as_str()
                .ok_or(RdvMessageError::NotUtf8(PROPAGATE_ELEMENT_PREFIX))?,
        )
    }

    /// Replaces (or adds) the header element of a message.
    pub fn write_into(&self, msg: &mut Message, group_unique: &str) {
        let e = self.to_element(group_unique);
        msg.remove_all(NS_JXTA, &e.name);
        msg.push(e);
    }
}

/// A `java.util.UUID` string (version 4 layout) from 128 random bits, as
/// JXSE's `createMsgId` produces.
pub fn uuid_string(bits: u128) -> String {
    let mut b = bits.to_be_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

// ---------------------------------------------------------------------------
// Peer view.
// ---------------------------------------------------------------------------

/// Reads `RdvPeerId` out of a `jxta:RdvAdvertisement` (the only field the
/// peer view needs; the full type lives in `advertisement::rdv`).
pub fn rdv_adv_peer_id(xml: &str) -> Result<PeerId, RdvMessageError> {
    let root = parse_xml(xml)?;
    let v = root
        .child_value("RdvPeerId")
        .ok_or(RdvMessageError::MissingChild("RdvPeerId"))?;
    parse_peer(v, "RdvPeerId")
}

/// A minimal `jxta:RdvAdvertisement` (`RdvGroupId`, `RdvPeerId`,
/// `RdvServiceName`, `Name`) for tests and simulators; a real peer sends the
/// one built by `advertisement::rdv`, with its `RdvRoute`.
pub fn minimal_rdv_adv(peer: &PeerId, group: &PeerGroupId, name: &str) -> String {
    let mut d = AdvDoc::new("jxta:RdvAdvertisement");
    d.field("RdvGroupId", &group.to_string());
    d.field("RdvPeerId", &peer.to_string());
    d.field(
        "RdvServiceName",
        &format!("{RDV_SERVICE}{}", group.unique_value()),
    );
    d.field("Name", name);
    d.finish()
}

/// Probe or response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerViewKind {
    /// `PeerView.PeerAdv`: "here I am / are you alive?".
    Probe,
    /// `PeerView.PeerAdv.Response`.
    Response,
}

/// One peer view message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerViewMessage {
    /// Probe or response.
    pub kind: PeerViewKind,
    /// The advertised rendezvous (`RdvPeerId` of the advertisement).
    pub rdv_peer: PeerId,
    /// The `jxta:RdvAdvertisement` XML.
    pub rdv_adv: Bytes,
    /// `PeerView.Cached`: the advertisement is not the sender's own.
    pub cached: bool,
    /// `PeerView.Failure`: the advertised peer has failed.
    pub failure: bool,
    /// `PeerView.EdgePeer`: the sender is an edge.
    pub edge: bool,
    /// `PeerView.SrcRouteAdv`: the sender's `jxta:RA`, if sent.
    pub src_route: Option<Bytes>,
}

impl PeerViewMessage {
    /// The message, elements in JXSE's order (`Failure`, the advert,
    /// `Cached`, `SrcRouteAdv`; `EdgePeer` last).
    pub fn to_message(&self) -> Message {
        let mut m = Message::new();
        let flag = |n: &str| Element::text(NS_JXTA, n, "true");
        if self.failure {
            m.push(flag(ELEM_PV_FAILURE));
        }
        let name = match self.kind {
            PeerViewKind::Probe => ELEM_PV_PROBE,
            PeerViewKind::Response => ELEM_PV_RESPONSE,
        };
        m.push(Element::typed(
            NS_JXTA,
            name,
            MIME_XML_UTF8,
            self.rdv_adv.clone(),
        ));
        if self.cached {
            m.push(flag(ELEM_PV_CACHED));
        }
        if let Some(ra) = &self.src_route {
            m.push(Element::typed(
                NS_JXTA,
                ELEM_PV_SRC_ROUTE,
                MIME_XML_UTF8,
                ra.clone(),
            ));
        }
        if self.edge {
            m.push(flag(ELEM_PV_EDGE));
        }
        m
    }

    /// Reads a peer view message: a probe if `PeerView.PeerAdv` is present,
    /// else a response. Flags count by presence, as in JXSE.
    pub fn from_message(msg: &Message) -> Result<PeerViewMessage, RdvMessageError> {
        PeerViewMessage::from_message_known(msg, |_| None)
    }

    /// As [`PeerViewMessage::from_message`], but `known` may name the
    /// rendezvous of an advertisement already read: given the advertisement's
    /// bytes, it returns the `RdvPeerId` an earlier parse of exactly these
    /// bytes gave, and the XML is not parsed again (a peer view sees the same
    /// advertisement from each member every probe round). The result is the
    /// same as `from_message`'s whenever `known` only answers for bytes it
    /// saw parse.
    pub fn from_message_known(
        msg: &Message,
        known: impl FnOnce(&[u8]) -> Option<PeerId>,
    ) -> Result<PeerViewMessage, RdvMessageError> {
        let (kind, e) = match (
            msg.get(NS_JXTA, ELEM_PV_PROBE),
            msg.get(NS_JXTA, ELEM_PV_RESPONSE),
        ) {
            (Some(e), _) => (PeerViewKind::Probe, e),
            (None, Some(e)) => (PeerViewKind::Response, e),
            (None, None) => return Err(RdvMessageError::NotThisProtocol),
        };
        let rdv_peer = match known(&e.data) {
            Some(p) => p,
            None => {
                let text = e.as_str().ok_or(RdvMessageError::NotUtf8(ELEM_PV_PROBE))?;
                rdv_adv_peer_id(text)?
            }
        };
        let has = |n| msg.get(NS_JXTA, n).is_some();
        Ok(PeerViewMessage {
            kind,
            rdv_peer,
            rdv_adv: e.data.clone(),
            cached: has(ELEM_PV_CACHED),
            failure: has(ELEM_PV_FAILURE),
            edge: has(ELEM_PV_EDGE),
            src_route: msg.get(NS_JXTA, ELEM_PV_SRC_ROUTE).map(|e| e.data.clone()),
        })
    }
}

// ---------------------------------------------------------------------------
// Limited-range walker header.
// ---------------------------------------------------------------------------

/// Direction of a walk (`Dir`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WalkDirection {
    /// 1: towards higher peer IDs.
    Up,
    /// 2: towards lower peer IDs.
    Down,
    /// 3: both (a new walk).
    Both,
}

impl WalkDirection {
    /// The protocol code.
    pub fn code(self) -> i32 {
        match self {
            WalkDirection::Up => 1,
            WalkDirection::Down => 2,
            WalkDirection::Both => 3,
        }
    }

    /// From the protocol code.
    pub fn from_code(c: i32) -> Option<WalkDirection> {
        match c {
            1 => Some(WalkDirection::Up),
            2 => Some(WalkDirection::Down),
            3 => Some(WalkDirection::Both),
            _ => None,
        }
    }
}

/// The walker header `jxta:LimitedRangeRdvMessage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkHeader {
    /// `TTL`: hops left, ≥ 1.
    pub ttl: i32,
    /// `Dir`.
    pub direction: WalkDirection,
    /// `SrcPeerID`: the walk's originator.
    pub src_peer: PeerId,
    /// `SrcSvcName`: where replies go.
    pub src_service: String,
    /// `SrcSvcParams`, if any.
    pub src_param: Option<String>,
}

impl WalkHeader {
    /// The document in JXSE's pretty style.
    pub fn to_xml(&self) -> String {
        let mut d = PrettyDoc::new(WALK_ROOT);
        d.field("TTL", &self.ttl.to_string())
            .field("Dir", &self.direction.code().to_string())
            .field("SrcPeerID", &self.src_peer.to_string())
            .field("SrcSvcName", &self.src_service);
        if let Some(p) = &self.src_param {
            d.field("SrcSvcParams", p);
        }
        d.finish()
    }

    /// Parses a walker header; JXSE requires TTL ≥ 1, a direction, a source
    /// peer and a source service. Empty values count as absent.
    pub fn parse(xml: &str) -> Result<WalkHeader, RdvMessageError> {
        let root = parse_xml(xml)?.expect_root(WALK_ROOT)?;
        let get = |n: &'static str| root.child_value(n).filter(|v| !v.is_empty());
        let ttl: i32 = num(
            get("TTL").ok_or(RdvMessageError::MissingChild("TTL"))?,
            "TTL",
        )?;
        if ttl < 1 {
            return Err(RdvMessageError::BadNumber {
                field: "TTL",
                value: ttl.to_string(),
            });
        }
        let dir: i32 = num(
            get("Dir").ok_or(RdvMessageError::MissingChild("Dir"))?,
            "Dir",
        )?;
        let direction = WalkDirection::from_code(dir).ok_or(RdvMessageError::BadNumber {
            field: "Dir",
            value: dir.to_string(),
        })?;
        let src_peer = parse_peer(
            get("SrcPeerID").ok_or(RdvMessageError::MissingChild("SrcPeerID"))?,
            "SrcPeerID",
        )?;
        let src_service = bounded(
            get("SrcSvcName").ok_or(RdvMessageError::MissingChild("SrcSvcName"))?,
            "SrcSvcName",
        )?;
        let src_param = get("SrcSvcParams")
            .map(|p| bounded(p, "SrcSvcParams"))
            .transpose()?;
        Ok(WalkHeader {
            ttl,
            direction,
            src_peer,
            src_service,
            src_param,
        })
    }

    /// The header element (`jxta:LimitedRangeRdvMessage`).
    pub fn to_element(&self) -> Element {
        Element::xml(NS_JXTA, WALK_ELEMENT, self.to_xml())
    }

    /// Finds and parses the header of a message.
    pub fn from_message(msg: &Message) -> Result<WalkHeader, RdvMessageError> {
        let e = msg
            .get(NS_JXTA, WALK_ELEMENT)
            .ok_or(RdvMessageError::MissingElement(WALK_ELEMENT))?;
        WalkHeader::parse(e.as_str().ok_or(RdvMessageError::NotUtf8(WALK_ELEMENT))?)
    }

    /// Replaces (or adds) the header element of a message.
    pub fn write_into(&self, msg: &mut Message) {
        msg.remove_all(NS_JXTA, WALK_ELEMENT);
        msg.push(self.to_element());
    }
}

/// Marks a message for a walk as JXSE's `walk()` does: the real target
/// listener travels in `RdvWalkSvcName` / `RdvWalkSvcParam` (text).
pub fn set_walk_target(msg: &mut Message, dest: &ServiceAddress) {
    msg.remove_all(NS_JXTA, ELEM_WALK_SVC_NAME);
    msg.remove_all(NS_JXTA, ELEM_WALK_SVC_PARAM);
    msg.push(Element::text(NS_JXTA, ELEM_WALK_SVC_NAME, &dest.service));
    if let Some(p) = &dest.param {
        msg.push(Element::text(NS_JXTA, ELEM_WALK_SVC_PARAM, p));
    }
}

/// Reads the real target of a walked message.
pub fn walk_target(msg: &Message) -> Result<ServiceAddress, RdvMessageError> {
    let s = elem_str(msg, ELEM_WALK_SVC_NAME)?
        .ok_or(RdvMessageError::MissingElement(ELEM_WALK_SVC_NAME))?;
    let p = elem_str(msg, ELEM_WALK_SVC_PARAM)?;
    Ok(ServiceAddress {
        service: bounded(s, ELEM_WALK_SVC_NAME)?,
        param: p.map(|p| bounded(p, ELEM_WALK_SVC_PARAM)).transpose()?,
    })
}

// ---------------------------------------------------------------------------
// Busy.
// ---------------------------------------------------------------------------

/// Juxta's explicit backpressure answer: "I did not process your query
/// `query_id`; retry after `retry_after_ms`".
///
/// It is sent to the querier's resolver response queue
/// (`<resolver MCID>/<group>IRes`) as the single text element `jxta:Juxta.Busy`
/// whose value is `<query id> <retry after ms>`. A JXSE peer's resolver looks
/// only for its `jxta:<group>IRes` element, finds none and drops the message
/// (logged at FINE); to a JXSE querier a busy rendezvous therefore looks like
/// a query that got no answer, and JXSE's own query timeout applies. Juxta
/// queriers read it and retry after the given delay, so nothing is lost
/// silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyNotice {
    /// The resolver query ID not processed.
    pub query_id: i32,
    /// When to retry, in ms from receipt.
    pub retry_after_ms: u64,
}

impl BusyNotice {
    /// The element.
    pub fn to_element(&self) -> Element {
        Element::text(
            NS_JXTA,
            ELEM_BUSY,
            &format!("{} {}", self.query_id, self.retry_after_ms),
        )
    }

    /// Reads the busy element of a message, if there is one.
    pub fn from_message(msg: &Message) -> Result<Option<BusyNotice>, RdvMessageError> {
        let Some(t) = elem_str(msg, ELEM_BUSY)? else {
            return Ok(None);
        };
        let (q, r) = t.trim().split_once(' ').ok_or(RdvMessageError::BadNumber {
            field: ELEM_BUSY,
            value: truncate(t),
        })?;
        Ok(Some(BusyNotice {
            query_id: num(q, ELEM_BUSY)?,
            retry_after_ms: num(r, ELEM_BUSY)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::namespace_order::JavaHashOrder;
    use crate::message::{decode_v0, encode_v0, MIME_TEXT_UTF8};

    const P1: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";
    const P2: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033000000000000000000000000000000AB03";

    fn p(s: &str) -> PeerId {
        s.parse().unwrap()
    }

    fn pa(peer: &str) -> Bytes {
        PeerAdvertisement::new(p(peer), PeerGroupId::NET, "x")
            .to_xml()
            .into()
    }

    fn wire_round_trip(m: &Message) -> Message {
        let enc = encode_v0(m, JavaHashOrder::Java8).unwrap();
        decode_v0(enc.to_bytes()).unwrap().message
    }

    #[test]
    fn lease_messages_layout_and_round_trip() {
        let req = LeaseMessage::Request {
            peer: p(P1),
            peer_adv: pa(P1),
        };
        let m = req.to_message();
        assert_eq!(m.elements.len(), 1);
        assert_eq!(
            (&*m.elements[0].namespace, m.elements[0].mime()),
            ("jxta", MIME_XML_UTF8)
        );
        assert_eq!(
            LeaseMessage::from_message(&wire_round_trip(&m)).unwrap(),
            req
        );

        let grant = LeaseMessage::Granted {
            rdv: p(P2),
            rdv_adv: pa(P2),
            lease_ms: 1_200_000,
            refuse_reason: None,
        };
        let m = grant.to_message();
        let names: Vec<_> = m.elements.iter().map(|e| &*e.name).collect();
        assert_eq!(names, ["RdvAdvReply", "ConnectedPeer", "ConnectedLease"]);
        assert_eq!(m.elements[1].mime(), MIME_TEXT_UTF8);
        assert_eq!(&m.elements[2].data[..], b"1200000");
        assert_eq!(&m.elements[1].data[..], P2.as_bytes());
        assert_eq!(
            LeaseMessage::from_message(&wire_round_trip(&m)).unwrap(),
            grant
        );

        let refuse = LeaseMessage::Granted {
            rdv: p(P2),
            rdv_adv: pa(P2),
            lease_ms: 0,
            refuse_reason: Some("full".into()),
        };
        assert_eq!(
            LeaseMessage::from_message(&refuse.to_message()).unwrap(),
            refuse
        );

        let d = LeaseMessage::Disconnect {
            peer: p(P1),
            peer_adv: pa(P1),
        };
        assert_eq!(d.to_message().elements[0].name, "Disconnect");
        assert_eq!(LeaseMessage::from_message(&d.to_message()).unwrap(), d);
    }

    #[test]
    fn bad_lease_messages() {
        assert_eq!(
            LeaseMessage::from_message(&Message::new()),
            Err(RdvMessageError::NotThisProtocol)
        );
        let m = Message::new().with(Element::xml(NS_JXTA, ELEM_CONNECT, "<jxta:PA>".into()));
        assert!(matches!(
            LeaseMessage::from_message(&m),
            Err(RdvMessageError::BadAdvertisement { .. })
        ));
        let m = Message::new().with(Element::bytes(NS_JXTA, ELEM_CONNECT, &[0xff, 0xfe][..]));
        assert_eq!(
            LeaseMessage::from_message(&m),
            Err(RdvMessageError::NotUtf8(ELEM_CONNECT))
        );
        let good = LeaseMessage::Granted {
            rdv: p(P2),
            rdv_adv: pa(P2),
            lease_ms: 5,
            refuse_reason: None,
        }
        .to_message();
        let mut m = good.clone();
        m.remove_all(NS_JXTA, ELEM_CONNECTED_LEASE);
        assert_eq!(
            LeaseMessage::from_message(&m),
            Err(RdvMessageError::MissingElement(ELEM_CONNECTED_LEASE))
        );
        let mut m = good.clone();
        m.remove_all(NS_JXTA, ELEM_CONNECTED_LEASE);
        m.push(Element::text(NS_JXTA, ELEM_CONNECTED_LEASE, "12x"));
        assert!(matches!(
            LeaseMessage::from_message(&m),
            Err(RdvMessageError::BadNumber { .. })
        ));
        let mut m = good.clone();
        m.remove_all(NS_JXTA, ELEM_CONNECTED_PEER);
        m.push(Element::text(NS_JXTA, ELEM_CONNECTED_PEER, "urn:jxta:nope"));
        assert!(matches!(
            LeaseMessage::from_message(&m),
            Err(RdvMessageError::BadPeerId { .. })
        ));
        let mut m = good;
        m.remove_all(NS_JXTA, ELEM_RDV_ADV_REPLY);
        assert_eq!(
            LeaseMessage::from_message(&m),
            Err(RdvMessageError::MissingElement(ELEM_RDV_ADV_REPLY))
        );
    }

    fn header() -> PropagateHeader {
        PropagateHeader {
            msg_id: uuid_string(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            dest_service: "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000205".into(),
            dest_param: Some("jxta-NetGroupSrdi".into()),
            ttl: 3,
            path: vec![P1.into(), P2.into()],
        }
    }

    #[test]
    fn propagate_header_byte_exact() {
        let h = header();
        assert_eq!(h.msg_id, "01234567-89ab-4def-8123-456789abcdef");
        let xml = h.to_xml();
        assert_eq!(
            xml,
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:RendezVousPropagateMessage>\n<jxta:RendezVousPropagateMessage xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<MessageId>01234567-89ab-4def-8123-456789abcdef</MessageId><DestSName>urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000205</DestSName><DestSParam>jxta-NetGroupSrdi</DestSParam><TTL>3</TTL><Path>{P1}</Path><Path>{P2}</Path></jxta:RendezVousPropagateMessage>\n"
            )
        );
        assert_eq!(PropagateHeader::parse(&xml).unwrap(), h);
        let e = h.to_element("jxta-NetGroup");
        assert_eq!(e.name, "RendezVousPropagatejxta-NetGroup");
        let mut m = Message::new().with(e);
        assert_eq!(
            PropagateHeader::from_message(&m, "jxta-NetGroup").unwrap(),
            h
        );
        assert!(h.visited(&p(P1)));
        let mut h2 = h.clone();
        h2.ttl = 2;
        h2.write_into(&mut m, "jxta-NetGroup");
        assert_eq!(m.elements.len(), 1);
        assert_eq!(
            PropagateHeader::from_message(&m, "jxta-NetGroup")
                .unwrap()
                .ttl,
            2
        );
    }

    #[test]
    fn bad_propagate_headers() {
        let base = |b: &str| {
            format!("<jxta:RendezVousPropagateMessage>{b}</jxta:RendezVousPropagateMessage>")
        };
        assert_eq!(
            PropagateHeader::parse(&base("<DestSName>s</DestSName><TTL>1</TTL>")),
            Err(RdvMessageError::MissingChild("MessageId"))
        );
        assert_eq!(
            PropagateHeader::parse(&base("<MessageId>m</MessageId><TTL>1</TTL>")),
            Err(RdvMessageError::MissingChild("DestSName"))
        );
        assert_eq!(
            PropagateHeader::parse(&base("<MessageId>m</MessageId><DestSName>s</DestSName>")),
            Err(RdvMessageError::MissingChild("TTL"))
        );
        assert!(matches!(
            PropagateHeader::parse(&base(
                "<MessageId>m</MessageId><DestSName>s</DestSName><TTL>x</TTL>"
            )),
            Err(RdvMessageError::BadNumber { field: "TTL", .. })
        ));
        let many: String = (0..=MAX_PATH)
            .map(|i| format!("<Path>{i}</Path>"))
            .collect();
        assert_eq!(
            PropagateHeader::parse(&base(&format!(
                "<MessageId>m</MessageId><DestSName>s</DestSName><TTL>1</TTL>{many}"
            ))),
            Err(RdvMessageError::TooLong("Path"))
        );
        assert!(matches!(
            PropagateHeader::parse("<x/>"),
            Err(RdvMessageError::Xml(_))
        ));
        assert!(matches!(
            PropagateHeader::parse("<<<"),
            Err(RdvMessageError::Xml(_))
        ));
        assert_eq!(
            PropagateHeader::from_message(&Message::new(), "g"),
            Err(RdvMessageError::MissingElement(PROPAGATE_ELEMENT_PREFIX))
        );
    }

    #[test]
    fn peerview_messages() {
        let adv = minimal_rdv_adv(&p(P1), &PeerGroupId::NET, "rdv1");
        assert_eq!(rdv_adv_peer_id(&adv).unwrap(), p(P1));
        let pv = PeerViewMessage {
            kind: PeerViewKind::Response,
            rdv_peer: p(P1),
            rdv_adv: adv.clone().into(),
            cached: true,
            failure: true,
            edge: false,
            src_route: Some(Bytes::from_static(b"<jxta:RA/>")),
        };
        let m = pv.to_message();
        let names: Vec<_> = m.elements.iter().map(|e| &*e.name).collect();
        assert_eq!(
            names,
            [
                "PeerView.Failure",
                "PeerView.PeerAdv.Response",
                "PeerView.Cached",
                "PeerView.SrcRouteAdv"
            ]
        );
        assert_eq!(&m.elements[0].data[..], b"true");
        assert_eq!(
            PeerViewMessage::from_message(&wire_round_trip(&m)).unwrap(),
            pv
        );
        let probe = PeerViewMessage {
            kind: PeerViewKind::Probe,
            cached: false,
            failure: false,
            src_route: None,
            edge: true,
            ..pv
        };
        assert_eq!(
            PeerViewMessage::from_message(&probe.to_message()).unwrap(),
            probe
        );
        assert_eq!(
            PeerViewMessage::from_message(&Message::new()),
            Err(RdvMessageError::NotThisProtocol)
        );
        let bad = Message::new().with(Element::xml(
            NS_JXTA,
            ELEM_PV_PROBE,
            "<jxta:RdvAdvertisement/>".into(),
        ));
        assert_eq!(
            PeerViewMessage::from_message(&bad),
            Err(RdvMessageError::MissingChild("RdvPeerId"))
        );
    }

    #[test]
    fn walk_header_byte_exact() {
        let h = WalkHeader {
            ttl: 4,
            direction: WalkDirection::Both,
            src_peer: p(P1),
            src_service: RDV_SERVICE.into(),
            src_param: Some("jxta-NetGroup".into()),
        };
        let xml = h.to_xml();
        assert_eq!(
            xml,
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:LimitedRangeRdvMessage>\n<jxta:LimitedRangeRdvMessage xmlns:jxta=\"http://jxta.org\">\n\t\n\t<TTL>\n\t\t4\n\t</TTL>\n\t<Dir>\n\t\t3\n\t</Dir>\n\t<SrcPeerID>\n\t\t{P1}\n\t</SrcPeerID>\n\t<SrcSvcName>\n\t\t{RDV_SERVICE}\n\t</SrcSvcName>\n\t<SrcSvcParams>\n\t\tjxta-NetGroup\n\t</SrcSvcParams>\n</jxta:LimitedRangeRdvMessage>\n")
        );
        assert_eq!(WalkHeader::parse(&xml).unwrap(), h);
        let mut m = Message::new();
        h.write_into(&mut m);
        h.write_into(&mut m);
        assert_eq!(m.elements.len(), 1);
        assert_eq!(WalkHeader::from_message(&m).unwrap(), h);
        for (from, to, err) in [
            ("<TTL>\n\t\t4", "<TTL>\n\t\t0", "TTL"),
            ("<Dir>\n\t\t3", "<Dir>\n\t\t7", "Dir"),
        ] {
            assert!(matches!(
                WalkHeader::parse(&xml.replace(from, to)),
                Err(RdvMessageError::BadNumber { field, .. }) if field == err
            ));
        }
        assert_eq!(
            WalkHeader::parse(&xml.replace(P1, "")),
            Err(RdvMessageError::MissingChild("SrcPeerID"))
        );
        let dest = ServiceAddress::new("svc", Some("par"));
        set_walk_target(&mut m, &dest);
        set_walk_target(&mut m, &dest);
        assert_eq!(m.elements.len(), 3);
        assert_eq!(walk_target(&m).unwrap(), dest);
        assert_eq!(
            walk_target(&Message::new()),
            Err(RdvMessageError::MissingElement(ELEM_WALK_SVC_NAME))
        );
    }

    #[test]
    fn busy_notice() {
        let b = BusyNotice {
            query_id: -7,
            retry_after_ms: 250,
        };
        let m = Message::new().with(b.to_element());
        assert_eq!(&m.elements[0].data[..], b"-7 250");
        assert_eq!(BusyNotice::from_message(&m).unwrap(), Some(b));
        assert_eq!(BusyNotice::from_message(&Message::new()).unwrap(), None);
        let bad = Message::new().with(Element::text(NS_JXTA, ELEM_BUSY, "x"));
        assert!(BusyNotice::from_message(&bad).is_err());
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(text in "(<[a-zA-Z:.]{0,12}( [a-z]+=\"[^\"]{0,8}\")?/?>|</[a-zA-Z:.]{0,12}>|[^<]{0,12}){0,24}", raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = PropagateHeader::parse(&text);
            let _ = WalkHeader::parse(&text);
            let _ = rdv_adv_peer_id(&text);
            for name in [ELEM_CONNECT, ELEM_DISCONNECT, ELEM_RDV_ADV_REPLY, ELEM_CONNECTED_PEER, ELEM_CONNECTED_LEASE, ELEM_PV_PROBE, ELEM_PV_RESPONSE, ELEM_BUSY] {
                for data in [Bytes::from(text.clone()), Bytes::from(raw.clone())] {
                    let m = Message::new().with(Element::typed(NS_JXTA, name, MIME_XML_UTF8, data));
                    let _ = LeaseMessage::from_message(&m);
                    let _ = PeerViewMessage::from_message(&m);
                    let _ = BusyNotice::from_message(&m);
                }
            }
        }

        #[test]
        fn propagate_round_trip(ttl in 1i32..=200, param in proptest::option::of("[ -~]{1,30}"), n in 0usize..5) {
            let h = PropagateHeader {
                msg_id: uuid_string(ttl as u128 * 7919),
                dest_service: "svc".into(),
                dest_param: param.map(|p| p.trim().to_string()).filter(|p| !p.is_empty()),
                ttl,
                path: (0..n).map(|i| format!("urn:jxta:cbid-{i:02}03")).collect(),
            };
            proptest::prop_assert_eq!(PropagateHeader::parse(&h.to_xml()).unwrap(), h);
        }
    }
}
