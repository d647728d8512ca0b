//! The Peer Discovery Protocol (PDP, digest §7.2): the query and response
//! documents that ride inside resolver messages (handler = the discovery
//! class URN), written exactly as JXSE 2.7 writes them, plus the lifetime
//! and expiration rules (§8.4).
//!
//! - [`DiscoveryQuery`] (`jxta:DiscoveryQuery`, unformatted): `Type`,
//!   `Threshold`, optional `PeerAdv` (the querier's peer advertisement as
//!   escaped text), optional `Attr`/`Value` (exact or `*` wildcard match
//!   on an indexed field, see [`Advertisement::index_fields`]).
//! - [`DiscoveryResponse`] (`jxta:DiscoveryResponse`, pretty-printed):
//!   `Count`, `Type`, optional `PeerAdv`/`Attr`/`Value` and up to
//!   [`MAX_RESPONSES`] `Response` elements, each an advertisement as
//!   escaped text with its remaining lifetime in an `Expiration`
//!   attribute (ms). A remote publish is a response with query ID 0.
//!
//! The Peer Information Protocol documents are in [`peerinfo`].

pub mod peerinfo;
pub mod search;

use crate::advertisement::shallow::{parse_shallow, Kept};
use crate::advertisement::tree::XmlElement;
use crate::advertisement::{
    parse_xml_limited, truncate, AdvError, AdvKind, Advertisement, PeerAdvertisement, XmlError,
    XmlNode, MAX_XML_LEN,
};
use crate::id::PeerId;
use crate::resolver::{ResolverQuery, ResolverResponse};

/// The discovery resolver handler: the discovery module class URN.
pub const DISCOVERY_HANDLER: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000305";
/// Root of a discovery query.
pub const QUERY_ROOT: &str = "jxta:DiscoveryQuery";
/// Root of a discovery response.
pub const RESPONSE_ROOT: &str = "jxta:DiscoveryResponse";
/// Most responses JXSE sends for one query, and most Juxta accepts.
pub const MAX_RESPONSES: usize = 50;
/// Largest discovery response document accepted (50 advertisements with
/// certificates do not fit in the generic 64 KiB limit).
pub const MAX_RESPONSE_XML_LEN: usize = 1024 * 1024;
/// Longest `Attr` accepted.
pub const MAX_ATTR_LEN: usize = 256;
/// Longest `Value` accepted.
pub const MAX_VALUE_LEN: usize = 1024;
/// JXSE's `DiscoveryService.DEFAULT_LIFETIME`: one year, in ms.
pub const DEFAULT_LIFETIME_MS: u64 = 1000 * 60 * 60 * 24 * 365;
/// JXSE's `DiscoveryService.DEFAULT_EXPIRATION`: two hours, in ms.
pub const DEFAULT_EXPIRATION_MS: u64 = 1000 * 60 * 60 * 2;
/// JXSE's default query threshold (`DiscoveryQueryMsg`).
pub const DEFAULT_THRESHOLD: u32 = 10;

/// How long an advertisement lives (digest §8.4): `lifetime_ms` is how
/// long the publisher keeps it locally, `expiration_ms` the time-to-live
/// given to others (the `Expiration` of a [`DiscoveryEntry`]). A cached
/// remote advertisement lives for the expiration it was received with.
///
/// ```
/// use juxta_proto::discovery::{Lifetimes, DEFAULT_EXPIRATION_MS};
/// let own = Lifetimes::default();
/// assert_eq!(own.lifetime_ms, 365 * 24 * 3600 * 1000);
/// assert_eq!(Lifetimes::remote(DEFAULT_EXPIRATION_MS).lifetime_ms, DEFAULT_EXPIRATION_MS);
/// // Own advertisements are passed on with the full 2 h expiration...
/// assert_eq!(own.expiration_at(1_000, 5_000), DEFAULT_EXPIRATION_MS);
/// // ...a cached remote one with what is left of its lifetime.
/// assert_eq!(Lifetimes::remote(10_000).expiration_at(1_000, 5_000), 6_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lifetimes {
    /// Local lifetime, ms.
    pub lifetime_ms: u64,
    /// Expiration given to other peers, ms.
    pub expiration_ms: u64,
}

impl Default for Lifetimes {
    /// JXSE's defaults for a peer's own advertisements: 1 year, 2 hours.
    fn default() -> Lifetimes {
        Lifetimes {
            lifetime_ms: DEFAULT_LIFETIME_MS,
            expiration_ms: DEFAULT_EXPIRATION_MS,
        }
    }
}

impl Lifetimes {
    /// An advertisement received from another peer with that expiration:
    /// kept that long, and passed on with at most what is left.
    pub fn remote(expiration_ms: u64) -> Lifetimes {
        Lifetimes {
            lifetime_ms: expiration_ms,
            expiration_ms,
        }
    }

    /// The `Expiration` to send at `now_ms` for an advertisement stored at
    /// `stored_ms`: the expiration, but never more than the lifetime left
    /// (JXSE's cache does the same); 0 once the lifetime is over.
    pub fn expiration_at(&self, stored_ms: u64, now_ms: u64) -> u64 {
        let age = now_ms.saturating_sub(stored_ms);
        let left = self.lifetime_ms.saturating_sub(age);
        self.expiration_ms.min(left)
    }

    /// Whether the advertisement is past its local lifetime at `now_ms`.
    pub fn is_expired(&self, stored_ms: u64, now_ms: u64) -> bool {
        now_ms.saturating_sub(stored_ms) >= self.lifetime_ms
    }
}

/// Errors from discovery documents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The document is too large, malformed or has the wrong root.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// A required child is missing.
    #[error("discovery document without <{0}>")]
    Missing(&'static str),
    /// A value does not parse, is out of range or too long.
    #[error("bad <{field}> value {value:?}")]
    BadValue {
        /// The element or attribute.
        field: &'static str,
        /// The value (truncated).
        value: String,
    },
    /// A non-peer query with threshold 0 (JXSE rejects it).
    #[error("threshold 0 is only allowed for peer queries")]
    ZeroThreshold,
    /// A `Value` without `Attr`.
    #[error("value given without attribute")]
    ValueWithoutAttr,
    /// More than [`MAX_RESPONSES`] responses.
    #[error("more than {MAX_RESPONSES} responses")]
    TooManyResponses,
    /// An embedded advertisement is bad.
    #[error(transparent)]
    Adv(#[from] AdvError),
}

fn bad(field: &'static str, v: &str) -> DiscoveryError {
    DiscoveryError::BadValue {
        field,
        value: truncate(v),
    }
}

fn kind_of(root: &XmlNode) -> Result<AdvKind, DiscoveryError> {
    let t = root
        .child_value("Type")
        .ok_or(DiscoveryError::Missing("Type"))?;
    t.parse::<i32>()
        .ok()
        .and_then(AdvKind::from_code)
        .ok_or_else(|| bad("Type", t))
}

fn bounded(
    root: &XmlNode,
    field: &'static str,
    max: usize,
) -> Result<Option<String>, DiscoveryError> {
    match root.child_value(field) {
        None | Some("") => Ok(None),
        Some(v) if v.len() > max => Err(bad(field, v)),
        Some(v) => Ok(Some(v.to_string())),
    }
}

/// A query's `Threshold`: JXSE's default when absent, else a number
/// from 0 to `i32::MAX`.
fn threshold_of(t: Option<&str>) -> Result<u32, DiscoveryError> {
    match t {
        None => Ok(DEFAULT_THRESHOLD),
        Some(t) => t
            .parse::<i32>()
            .ok()
            .and_then(|t| u32::try_from(t).ok())
            .ok_or_else(|| bad("Threshold", t)),
    }
}

/// [`bounded`] over a child [`parse_shallow`] kept.
fn bounded_kept(
    kept: Option<&Kept<'_>>,
    field: &'static str,
    max: usize,
) -> Result<Option<String>, DiscoveryError> {
    match kept.map(Kept::value) {
        None | Some("") => Ok(None),
        Some(v) if v.len() > max => Err(bad(field, v)),
        Some(v) => Ok(Some(v.to_string())),
    }
}

fn check_len(field: &'static str, v: &Option<String>, max: usize) -> Result<(), DiscoveryError> {
    match v {
        Some(s) if s.len() > max => Err(bad(field, s)),
        _ => Ok(()),
    }
}

/// The peer advertisement as carried in `PeerAdv` (JXSE's
/// `PeerAdvertisement.toString()`), without its final newline (documents
/// carried as text are kept trimmed, as they read back).
pub fn peer_adv_text(pa: &PeerAdvertisement) -> String {
    trimmed(Advertisement::Peer(pa.clone()).to_jxse_string())
}

fn trimmed(mut s: String) -> String {
    let end = s.trim_end().len();
    s.truncate(end);
    s
}

/// A discovery query.
///
/// ```
/// use juxta_proto::advertisement::AdvKind;
/// use juxta_proto::discovery::DiscoveryQuery;
/// let q = DiscoveryQuery::new(AdvKind::Adv, 5).matching("Name", "chat*");
/// let xml = q.to_xml();
/// assert!(xml.contains("<Type>2</Type><Threshold>5</Threshold><Attr>Name</Attr><Value>chat*</Value>"));
/// assert_eq!(DiscoveryQuery::parse(&xml).unwrap(), q);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DiscoveryQuery {
    /// What is searched (`Type`).
    pub kind: AdvKind,
    /// Most answers wanted (`Threshold`); 0 only for peer queries (then
    /// the answer is the responder's own peer advertisement).
    pub threshold: u32,
    /// The querier's peer advertisement document (`PeerAdv`), if sent.
    pub peer_adv: Option<String>,
    /// The indexed field to match (`Attr`), if any.
    pub attr: Option<String>,
    /// The value to match (`Value`; `*` wildcards), if any.
    pub value: Option<String>,
}

/// Whether a peer answers a discovery query: when it holds something
/// (`holds`; JXSE answers only then, `DiscoveryServiceImpl.processQuery`).
/// A peer that is not a rendezvous also answers "nothing" to a querier
/// that asked it directly (`asked_directly`: the query came from its
/// issuer), so that a direct search can tell "nothing there" from "nobody
/// answered"; never to a query another peer forwarded (a rendezvous
/// flooding it to its edges): an empty answer there would reach the
/// querier first and end its search before the holder's answer. A
/// rendezvous hands the query to its SRDI index instead, which forwards it
/// to the publishers; they answer the querier themselves.
///
/// ```
/// use juxta_proto::discovery::answers;
/// assert!(answers(true, true, false));
/// assert!(answers(false, false, true));
/// assert!(!answers(false, false, false));
/// assert!(!answers(false, true, true));
/// ```
pub fn answers(holds: bool, on_rendezvous: bool, asked_directly: bool) -> bool {
    holds || (!on_rendezvous && asked_directly)
}

impl DiscoveryQuery {
    /// The SRDI key a rendezvous looks the query up under (primary key,
    /// attribute, value; trimmed), when it names an attribute and a value.
    ///
    /// ```
    /// use juxta_proto::advertisement::AdvKind;
    /// use juxta_proto::discovery::DiscoveryQuery;
    /// let mut q = DiscoveryQuery::new(AdvKind::Peer, 10);
    /// assert_eq!(q.srdi_key(), None);
    /// q.attr = Some(" Name ".into());
    /// q.value = Some("alice".into());
    /// assert_eq!(q.srdi_key(), Some(("Peers".into(), "Name".into(), "alice".into())));
    /// ```
    pub fn srdi_key(&self) -> Option<(String, String, String)> {
        match (&self.attr, &self.value) {
            (Some(a), Some(v)) if !a.trim().is_empty() => Some((
                self.kind.srdi_primary_key().to_string(),
                a.trim().to_string(),
                v.trim().to_string(),
            )),
            _ => None,
        }
    }

    /// A query for any advertisement of that kind.
    pub fn new(kind: AdvKind, threshold: u32) -> DiscoveryQuery {
        DiscoveryQuery {
            kind,
            threshold,
            peer_adv: None,
            attr: None,
            value: None,
        }
    }

    /// Restricts the query to `attr` = `value`.
    pub fn matching(mut self, attr: &str, value: &str) -> DiscoveryQuery {
        self.attr = Some(attr.to_string());
        self.value = Some(value.to_string());
        self
    }

    /// Attaches the querier's peer advertisement.
    pub fn with_peer_adv(mut self, pa: &PeerAdvertisement) -> DiscoveryQuery {
        self.peer_adv = Some(peer_adv_text(pa));
        self
    }

    /// Checks the rules JXSE applies when reading a query, and the length
    /// bounds.
    pub fn validate(&self) -> Result<(), DiscoveryError> {
        if self.threshold > i32::MAX as u32 {
            return Err(bad("Threshold", &self.threshold.to_string()));
        }
        if self.kind != AdvKind::Peer && self.threshold == 0 {
            return Err(DiscoveryError::ZeroThreshold);
        }
        let attr_set = self.attr.as_deref().is_some_and(|a| !a.trim().is_empty());
        if !attr_set && self.value.as_deref().is_some_and(|v| !v.trim().is_empty()) {
            return Err(DiscoveryError::ValueWithoutAttr);
        }
        check_len("Attr", &self.attr, MAX_ATTR_LEN)?;
        check_len("Value", &self.value, MAX_VALUE_LEN)
    }

    /// The document as JXSE writes it (`xml:space="preserve"`, so
    /// unindented). `Attr` and `Value` are trimmed; an empty one is left
    /// out, and `Value` is only written with `Attr`.
    pub fn to_xml(&self) -> String {
        let mut root = XmlElement::adv_root(QUERY_ROOT);
        root.push_text("Type", &self.kind.code().to_string());
        root.push_text("Threshold", &self.threshold.to_string());
        if let Some(pa) = &self.peer_adv {
            // Written verbatim (unindented), with the final newline that
            // JXSE's toString() leaves.
            root.push_text("PeerAdv", &format!("{}\n", pa.trim_end()));
        }
        if let Some(a) = self
            .attr
            .as_deref()
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            root.push_text("Attr", a);
            if let Some(v) = self
                .value
                .as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
            {
                root.push_text("Value", v);
            }
        }
        root.to_document()
    }

    /// Parses and validates a query. A missing `Threshold` reads as
    /// JXSE's default ([`DEFAULT_THRESHOLD`]).
    pub fn parse(xml: &str) -> Result<DiscoveryQuery, DiscoveryError> {
        // One pass, no tree (see `advertisement::shallow`): a rendezvous
        // reads every query it is sent.
        let [ty, threshold, peer_adv, attr, value] = parse_shallow(
            xml,
            MAX_XML_LEN,
            QUERY_ROOT,
            ["Type", "Threshold", "PeerAdv", "Attr", "Value"],
            [false; 5],
        )?;
        let t = ty.as_ref().ok_or(DiscoveryError::Missing("Type"))?.value();
        let kind = t
            .parse::<i32>()
            .ok()
            .and_then(AdvKind::from_code)
            .ok_or_else(|| bad("Type", t))?;
        let threshold = threshold_of(threshold.as_ref().map(Kept::value))?;
        let q = DiscoveryQuery {
            kind,
            threshold,
            peer_adv: peer_adv
                .as_ref()
                .map(Kept::value)
                .filter(|p| !p.is_empty())
                .map(str::to_string),
            attr: bounded_kept(attr.as_ref(), "Attr", MAX_ATTR_LEN)?,
            value: bounded_kept(value.as_ref(), "Value", MAX_VALUE_LEN)?,
        };
        q.validate()?;
        Ok(q)
    }

    /// The querier's peer advertisement, parsed (signature checked).
    pub fn peer_advertisement(&self) -> Option<Result<PeerAdvertisement, DiscoveryError>> {
        self.peer_adv.as_deref().map(parse_peer_adv)
    }

    /// How many answers a responder sends: `min(threshold, 50)`.
    pub fn answer_limit(&self) -> usize {
        (self.threshold as usize).min(MAX_RESPONSES)
    }

    /// Wraps the query in a resolver query for the discovery handler.
    pub fn to_resolver_query(&self, query_id: i32, src_peer: PeerId) -> ResolverQuery {
        ResolverQuery {
            handler: DISCOVERY_HANDLER.to_string(),
            query_id,
            hop_count: 0,
            src_peer,
            query: self.to_xml(),
            src_route: None,
        }
    }

    /// Parses the discovery query inside a resolver query.
    pub fn from_resolver_query(q: &ResolverQuery) -> Result<DiscoveryQuery, DiscoveryError> {
        DiscoveryQuery::parse(&q.query)
    }

    /// A response to this query (same type, attribute and value).
    pub fn response(
        &self,
        responses: Vec<DiscoveryEntry>,
    ) -> Result<DiscoveryResponse, DiscoveryError> {
        if responses.len() > MAX_RESPONSES {
            return Err(DiscoveryError::TooManyResponses);
        }
        Ok(DiscoveryResponse {
            kind: self.kind,
            peer_adv: None,
            attr: self.attr.clone(),
            value: self.value.clone(),
            responses,
        })
    }
}

fn parse_peer_adv(xml: &str) -> Result<PeerAdvertisement, DiscoveryError> {
    match Advertisement::parse(xml)? {
        Advertisement::Peer(pa) => Ok(pa),
        other => Err(AdvError::UnknownType(other.adv_type().to_string()).into()),
    }
}

/// One advertisement in a response, with the time others may keep it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DiscoveryEntry {
    /// The advertisement document (unescaped text, trimmed).
    pub adv: String,
    /// `Expiration`, ms.
    pub expiration_ms: u64,
}

impl DiscoveryEntry {
    /// An entry for an advertisement as a remote publish carries it
    /// (JXSE's `toString()`, pretty-printed).
    pub fn new(adv: &Advertisement, expiration_ms: u64) -> DiscoveryEntry {
        DiscoveryEntry {
            adv: trimmed(adv.to_jxse_string()),
            expiration_ms,
        }
    }

    /// An entry for a stored document, as JXSE answers a query: the
    /// cached `getSignedDocument()` bytes (see
    /// [`Advertisement::to_xml`]/[`Advertisement::to_signed_xml`]) with
    /// what is left of its expiration ([`Lifetimes::expiration_at`];
    /// JXSE sends nothing for 0).
    pub fn document(xml: &str, expiration_ms: u64) -> DiscoveryEntry {
        DiscoveryEntry {
            adv: xml.trim().to_string(),
            expiration_ms,
        }
    }

    /// Parses (and checks the signature of) the advertisement. A bad one
    /// must not be cached.
    pub fn advertisement(&self) -> Result<Advertisement, AdvError> {
        Advertisement::parse(&self.adv)
    }
}

/// A discovery response (or remote publish).
///
/// ```
/// use juxta_proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
/// use juxta_proto::discovery::{DiscoveryEntry, DiscoveryResponse, DEFAULT_EXPIRATION_MS};
/// let id = "urn:jxta:cbid-59616261646162614E504720503250331122334455667788112233445566778804".parse().unwrap();
/// let adv = Advertisement::Pipe(PipeAdvertisement::new(id, PipeType::Unicast));
/// let r = DiscoveryResponse::remote_publish(&adv, DEFAULT_EXPIRATION_MS);
/// let back = DiscoveryResponse::parse(&r.to_xml()).unwrap();
/// assert_eq!(back, r);
/// assert_eq!(back.responses[0].advertisement().unwrap(), adv);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DiscoveryResponse {
    /// The type answered (`Type`).
    pub kind: AdvKind,
    /// The responder's peer advertisement document (`PeerAdv`), if sent.
    pub peer_adv: Option<String>,
    /// The query's `Attr`, if any.
    pub attr: Option<String>,
    /// The query's `Value`, if any.
    pub value: Option<String>,
    /// The advertisements (`Response`), at most [`MAX_RESPONSES`].
    pub responses: Vec<DiscoveryEntry>,
}

impl DiscoveryResponse {
    /// A remote publish of one advertisement (send it in a resolver
    /// response with query ID 0: [`DiscoveryResponse::to_resolver_response`]).
    pub fn remote_publish(adv: &Advertisement, expiration_ms: u64) -> DiscoveryResponse {
        DiscoveryResponse {
            kind: adv.kind(),
            peer_adv: None,
            attr: None,
            value: None,
            responses: vec![DiscoveryEntry::new(adv, expiration_ms)],
        }
    }

    /// The document as JXSE writes it (pretty-printed, no `xml:space`).
    pub fn to_xml(&self) -> String {
        let mut root = XmlElement::new(RESPONSE_ROOT).with_attr("xmlns:jxta", "http://jxta.org");
        root.push_text("Count", &self.responses.len().to_string());
        root.push_text("Type", &self.kind.code().to_string());
        if let Some(pa) = &self.peer_adv {
            root.push_text("PeerAdv", pa);
        }
        if let Some(a) = self.attr.as_deref().filter(|a| !a.is_empty()) {
            root.push_text("Attr", a);
            if let Some(v) = self.value.as_deref().filter(|v| !v.is_empty()) {
                root.push_text("Value", v);
            }
        }
        for r in &self.responses {
            root.push(
                XmlElement::text("Response", r.adv.as_str())
                    .with_attr("Expiration", r.expiration_ms.to_string()),
            );
        }
        root.to_document()
    }

    /// Parses a response. `Count` is not trusted (JXSE ignores it too); a
    /// `Response` without `Expiration` gets [`DEFAULT_EXPIRATION_MS`], as
    /// in JXSE. Advertisements are not parsed here: see
    /// [`DiscoveryEntry::advertisement`].
    pub fn parse(xml: &str) -> Result<DiscoveryResponse, DiscoveryError> {
        let root = parse_xml_limited(xml, MAX_RESPONSE_XML_LEN)?.expect_root(RESPONSE_ROOT)?;
        let kind = kind_of(&root)?;
        let mut responses = Vec::new();
        for r in root.children_named("Response") {
            if responses.len() >= MAX_RESPONSES {
                return Err(DiscoveryError::TooManyResponses);
            }
            let expiration_ms = match r.attr("Expiration") {
                None => DEFAULT_EXPIRATION_MS,
                Some(e) => e.trim().parse::<u64>().map_err(|_| bad("Expiration", e))?,
            };
            responses.push(DiscoveryEntry {
                adv: r.value().to_string(),
                expiration_ms,
            });
        }
        Ok(DiscoveryResponse {
            kind,
            peer_adv: root
                .child_value("PeerAdv")
                .filter(|p| !p.is_empty())
                .map(str::to_string),
            attr: bounded(&root, "Attr", MAX_ATTR_LEN)?,
            value: bounded(&root, "Value", MAX_VALUE_LEN)?,
            responses,
        })
    }

    /// The responder's peer advertisement, parsed (signature checked).
    pub fn peer_advertisement(&self) -> Option<Result<PeerAdvertisement, DiscoveryError>> {
        self.peer_adv.as_deref().map(parse_peer_adv)
    }

    /// Wraps the response for the discovery handler (query ID 0 for a
    /// remote publish).
    pub fn to_resolver_response(&self, query_id: i32) -> ResolverResponse {
        ResolverResponse {
            handler: DISCOVERY_HANDLER.to_string(),
            query_id,
            response: self.to_xml(),
        }
    }

    /// Parses the discovery response inside a resolver response.
    pub fn from_resolver_response(
        r: &ResolverResponse,
    ) -> Result<DiscoveryResponse, DiscoveryError> {
        DiscoveryResponse::parse(&r.response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::{PipeAdvertisement, PipeType};
    use crate::id::PeerGroupId;
    use proptest::prelude::*;

    const PID: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    /// The tree-built parse this crate used before the one-pass reader.
    fn query_by_tree(xml: &str) -> Result<DiscoveryQuery, DiscoveryError> {
        let root = crate::advertisement::parse_xml(xml)?.expect_root(QUERY_ROOT)?;
        let kind = kind_of(&root)?;
        let threshold = threshold_of(root.child_value("Threshold"))?;
        let q = DiscoveryQuery {
            kind,
            threshold,
            peer_adv: root
                .child_value("PeerAdv")
                .filter(|p| !p.is_empty())
                .map(str::to_string),
            attr: bounded(&root, "Attr", MAX_ATTR_LEN)?,
            value: bounded(&root, "Value", MAX_VALUE_LEN)?,
        };
        q.validate()?;
        Ok(q)
    }

    fn query_piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("<Type>2</Type>".to_string()),
            Just("<Type>0</Type>".to_string()),
            Just("<Type>9</Type>".to_string()),
            Just("<Threshold>3</Threshold>".to_string()),
            Just("<Threshold>-1</Threshold>".to_string()),
            Just("<Threshold/>".to_string()),
            Just("<Attr>Name</Attr>".to_string()),
            Just("<Value>a*&amp;</Value>".to_string()),
            Just("<Value><![CDATA[v]]></Value>".to_string()),
            Just("<PeerAdv>&lt;x/></PeerAdv>".to_string()),
            Just("<x><Attr>in</Attr></x>".to_string()),
            Just("&bad;".to_string()),
            "[a-z \n]{0,3}",
        ]
    }

    proptest! {
        #[test]
        fn the_one_pass_query_parse_reads_as_the_tree(
            body in proptest::collection::vec(query_piece(), 0..10),
        ) {
            let xml = format!("<jxta:DiscoveryQuery>{}</jxta:DiscoveryQuery>", body.concat());
            let (a, b) = (DiscoveryQuery::parse(&xml), query_by_tree(&xml));
            prop_assert_eq!(format!("{:?}", a), format!("{:?}", b), "{}", xml);
        }
    }

    fn pa() -> PeerAdvertisement {
        PeerAdvertisement::new(PID.parse().unwrap(), PeerGroupId::NET, "alice")
    }

    #[test]
    fn query_layout_matches_jxse() {
        let q = DiscoveryQuery::new(AdvKind::Peer, 1)
            .with_peer_adv(&pa())
            .matching(" Name ", "al*");
        let xml = q.to_xml();
        assert_eq!(
            xml,
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:DiscoveryQuery>\n<jxta:DiscoveryQuery xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<Type>0</Type><Threshold>1</Threshold><PeerAdv>&lt;?xml version=\"1.0\" encoding=\"UTF-8\"?>\n&lt;!DOCTYPE jxta:PA>\n&lt;jxta:PA xml:space=\"default\" xmlns:jxta=\"http://jxta.org\">\n\t\n\t&lt;PID>\n\t\t{PID}\n\t&lt;/PID>\n\t&lt;GID>\n\t\turn:jxta:jxta-NetGroup\n\t&lt;/GID>\n\t&lt;Name>\n\t\talice\n\t&lt;/Name>\n&lt;/jxta:PA>\n</PeerAdv><Attr>Name</Attr><Value>al*</Value></jxta:DiscoveryQuery>\n")
        );
        let back = DiscoveryQuery::parse(&xml).unwrap();
        assert_eq!(back.attr.as_deref(), Some("Name"));
        assert_eq!(back.peer_advertisement().unwrap().unwrap(), pa());
        let rq = back.to_resolver_query(3, PID.parse().unwrap());
        assert_eq!(rq.handler, DISCOVERY_HANDLER);
        let again =
            DiscoveryQuery::from_resolver_query(&ResolverQuery::parse(&rq.to_xml()).unwrap())
                .unwrap();
        assert_eq!(again, back);
    }

    #[test]
    fn query_rules() {
        let base = |body: &str| format!("<jxta:DiscoveryQuery>{body}</jxta:DiscoveryQuery>");
        assert_eq!(
            DiscoveryQuery::parse(&base("<Threshold>1</Threshold>")),
            Err(DiscoveryError::Missing("Type"))
        );
        assert!(matches!(
            DiscoveryQuery::parse(&base("<Type>3</Type>")),
            Err(DiscoveryError::BadValue { field: "Type", .. })
        ));
        assert!(matches!(
            DiscoveryQuery::parse(&base("<Type>2</Type><Threshold>-1</Threshold>")),
            Err(DiscoveryError::BadValue {
                field: "Threshold",
                ..
            })
        ));
        assert_eq!(
            DiscoveryQuery::parse(&base("<Type>1</Type><Threshold>0</Threshold>")),
            Err(DiscoveryError::ZeroThreshold)
        );
        assert_eq!(
            DiscoveryQuery::parse(&base(
                "<Type>0</Type><Threshold>0</Threshold><Value>x</Value>"
            )),
            Err(DiscoveryError::ValueWithoutAttr)
        );
        let q = DiscoveryQuery::parse(&base("<Type>2</Type>")).unwrap();
        assert_eq!(q.threshold, DEFAULT_THRESHOLD);
        let long = base(&format!(
            "<Type>2</Type><Attr>{}</Attr>",
            "a".repeat(MAX_ATTR_LEN + 1)
        ));
        assert!(matches!(
            DiscoveryQuery::parse(&long),
            Err(DiscoveryError::BadValue { field: "Attr", .. })
        ));
        assert_eq!(
            DiscoveryQuery::new(AdvKind::Adv, 500).answer_limit(),
            MAX_RESPONSES
        );
    }

    #[test]
    fn response_layout_and_limits() {
        let id = "urn:jxta:cbid-59616261646162614E504720503250331122334455667788112233445566778804";
        let adv = Advertisement::Pipe(PipeAdvertisement::new(
            id.parse().unwrap(),
            PipeType::Unicast,
        ));
        let q = DiscoveryQuery::new(AdvKind::Adv, 10).matching("Name", "x");
        let mut r = q
            .response(vec![DiscoveryEntry::new(&adv, 7200000)])
            .unwrap();
        r.peer_adv = Some(peer_adv_text(&pa()));
        let xml = r.to_xml();
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:DiscoveryResponse>\n<jxta:DiscoveryResponse xmlns:jxta=\"http://jxta.org\">\n\t\n\t<Count>\n\t\t1\n\t</Count>\n\t<Type>\n\t\t2\n\t</Type>\n\t<PeerAdv>\n\t\t&lt;?xml version=\"1.0\" encoding=\"UTF-8\"?>\n&lt;!DOCTYPE jxta:PA>\n"), "{xml}");
        assert!(xml.contains(&format!("\t<Attr>\n\t\tName\n\t</Attr>\n\t<Value>\n\t\tx\n\t</Value>\n\t<Response Expiration=\"7200000\">\n\t\t&lt;?xml version=\"1.0\" encoding=\"UTF-8\"?>\n&lt;!DOCTYPE jxta:PipeAdvertisement>\n&lt;jxta:PipeAdvertisement xml:space=\"default\" xmlns:jxta=\"http://jxta.org\">\n\t\n\t&lt;Id>\n\t\t{id}\n\t&lt;/Id>\n")), "{xml}");
        assert!(xml
            .ends_with("&lt;/jxta:PipeAdvertisement>\n\t</Response>\n</jxta:DiscoveryResponse>\n"));
        let back = DiscoveryResponse::parse(&xml).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.responses[0].advertisement().unwrap(), adv);
        assert_eq!(back.peer_advertisement().unwrap().unwrap(), pa());
        // Old-style response without Expiration; bad expiration; too many.
        let old =
            "<jxta:DiscoveryResponse><Type>2</Type><Response>x</Response></jxta:DiscoveryResponse>";
        assert_eq!(
            DiscoveryResponse::parse(old).unwrap().responses[0].expiration_ms,
            DEFAULT_EXPIRATION_MS
        );
        assert!(matches!(
            DiscoveryResponse::parse(&old.replace("<Response>", "<Response Expiration=\"-5\">")),
            Err(DiscoveryError::BadValue {
                field: "Expiration",
                ..
            })
        ));
        let many = format!(
            "<jxta:DiscoveryResponse><Type>2</Type>{}</jxta:DiscoveryResponse>",
            "<Response>x</Response>".repeat(MAX_RESPONSES + 1)
        );
        assert_eq!(
            DiscoveryResponse::parse(&many),
            Err(DiscoveryError::TooManyResponses)
        );
        assert_eq!(
            q.response(vec![DiscoveryEntry::new(&adv, 1); MAX_RESPONSES + 1]),
            Err(DiscoveryError::TooManyResponses)
        );
        // A bad advertisement inside is reported when read, not cached.
        assert!(DiscoveryResponse::parse(old).unwrap().responses[0]
            .advertisement()
            .is_err());
        let rr = DiscoveryResponse::remote_publish(&adv, 5).to_resolver_response(0);
        assert_eq!((rr.query_id, rr.handler.as_str()), (0, DISCOVERY_HANDLER));
        assert_eq!(
            DiscoveryResponse::from_resolver_response(&rr)
                .unwrap()
                .responses[0]
                .expiration_ms,
            5
        );
    }

    #[test]
    fn lifetimes() {
        let l = Lifetimes::default();
        assert_eq!(l.expiration_ms, 2 * 3600 * 1000);
        assert!(!l.is_expired(0, DEFAULT_LIFETIME_MS - 1));
        assert!(l.is_expired(0, DEFAULT_LIFETIME_MS));
        let r = Lifetimes::remote(10_000);
        assert_eq!(r.expiration_at(0, 4_000), 6_000);
        assert_eq!(r.expiration_at(0, 40_000), 0);
        assert_eq!(r.expiration_at(10, 0), 10_000);
    }

    proptest! {
        #[test]
        fn query_round_trip(
            kind in 0i32..3,
            threshold in 1u32..1000,
            attr in proptest::option::of("[A-Za-z]{1,10}"),
            value in "[a-z0-9*&<> ]{1,20}",
        ) {
            let value = value.trim().to_string();
            let q = DiscoveryQuery {
                kind: AdvKind::from_code(kind).unwrap(),
                threshold,
                peer_adv: None,
                value: attr.as_ref().filter(|_| !value.is_empty()).map(|_| value.clone()),
                attr,
            };
            prop_assert_eq!(DiscoveryQuery::parse(&q.to_xml()).unwrap(), q);
        }

        #[test]
        fn parsers_never_panic(s in "[<>/a-zA-Z:=\" ]{0,200}") {
            let _ = DiscoveryQuery::parse(&s);
            let _ = DiscoveryResponse::parse(&s);
        }
    }
}
