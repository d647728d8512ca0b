//! The Peer Information Protocol (PIP, digest §7.5): ask a peer for its
//! uptime and an optional application-defined status subtree. Both
//! documents ride in resolver messages for handler [`PEERINFO_HANDLER`]
//! and are pretty-printed, as JXSE writes them.

use super::DiscoveryError;
use crate::advertisement::tree::XmlElement;
use crate::advertisement::{parse_xml, req_id, truncate, XmlNode, MAX_XML_ELEMENTS};
use crate::id::PeerId;
use crate::resolver::{ResolverQuery, ResolverResponse};

/// The peer-info resolver handler: the peerinfo module class URN.
pub const PEERINFO_HANDLER: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000705";
/// Root of a query.
pub const QUERY_ROOT: &str = "jxta:PeerInfoQueryMessage";
/// Root of a response.
pub const RESPONSE_ROOT: &str = "jxta:PeerInfoResponseMessage";

fn pretty_root(name: &str) -> XmlElement {
    XmlElement::new(name).with_attr("xmlns:jxta", "http://jxta.org")
}

fn ids(root: &XmlNode) -> Result<(PeerId, PeerId), DiscoveryError> {
    Ok((req_id(root, "sourcePid")?, req_id(root, "targetPid")?))
}

/// The first element inside a `request`/`response` wrapper.
fn wrapped(root: &XmlNode, field: &'static str) -> Result<Option<XmlElement>, DiscoveryError> {
    let Some(inner) = root.child(field).and_then(|w| w.children.first()) else {
        return Ok(None);
    };
    let e = XmlElement::from_node(inner);
    if e.count() > MAX_XML_ELEMENTS {
        return Err(DiscoveryError::BadValue {
            field,
            value: truncate(&e.name),
        });
    }
    Ok(Some(e))
}

fn wrap(root: &mut XmlElement, field: &str, inner: &Option<XmlElement>) {
    if let Some(r) = inner {
        let mut w = XmlElement::new(field);
        w.push(r.clone());
        root.push(w);
    }
}

/// A peer-info query.
///
/// ```
/// use juxta_proto::discovery::peerinfo::PeerInfoQuery;
/// let a = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03".parse().unwrap();
/// let q = PeerInfoQuery { source: a, target: a, request: None };
/// assert_eq!(PeerInfoQuery::parse(&q.to_xml()).unwrap(), q);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerInfoQuery {
    /// The asking peer (`sourcePid`).
    pub source: PeerId,
    /// The peer asked (`targetPid`).
    pub target: PeerId,
    /// An application request subtree (inside `request`), if any.
    pub request: Option<XmlElement>,
}

impl PeerInfoQuery {
    /// The document as JXSE writes it.
    pub fn to_xml(&self) -> String {
        let mut root = pretty_root(QUERY_ROOT);
        root.push_text("sourcePid", &self.source.to_string());
        root.push_text("targetPid", &self.target.to_string());
        wrap(&mut root, "request", &self.request);
        root.to_document()
    }

    /// Parses a query.
    pub fn parse(xml: &str) -> Result<PeerInfoQuery, DiscoveryError> {
        let root = parse_xml(xml)?.expect_root(QUERY_ROOT)?;
        let (source, target) = ids(&root)?;
        Ok(PeerInfoQuery {
            source,
            target,
            request: wrapped(&root, "request")?,
        })
    }

    /// Wraps the query in a resolver query.
    pub fn to_resolver_query(&self, query_id: i32) -> ResolverQuery {
        ResolverQuery {
            handler: PEERINFO_HANDLER.to_string(),
            query_id,
            hop_count: 0,
            src_peer: self.source,
            query: self.to_xml(),
            src_route: None,
        }
    }

    /// The answer: `uptime_ms` since the target started, `now_ms` its
    /// clock (both passed in: this crate reads no clock).
    pub fn answer(
        &self,
        uptime_ms: u64,
        now_ms: u64,
        response: Option<XmlElement>,
    ) -> PeerInfoResponse {
        PeerInfoResponse {
            source: self.target,
            target: self.source,
            response,
            uptime_ms,
            timestamp_ms: now_ms,
        }
    }
}

/// A peer-info response.
///
/// ```
/// use juxta_proto::discovery::peerinfo::PeerInfoResponse;
/// let a = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03".parse().unwrap();
/// let r = PeerInfoResponse { source: a, target: a, response: None, uptime_ms: 5, timestamp_ms: 1_700_000_000_000 };
/// assert!(r.to_xml().contains("\t<uptime>\n\t\t5\n\t</uptime>\n"));
/// assert_eq!(PeerInfoResponse::parse(&r.to_xml()).unwrap(), r);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerInfoResponse {
    /// The answering peer (`sourcePid`).
    pub source: PeerId,
    /// The peer that asked (`targetPid`).
    pub target: PeerId,
    /// An application response subtree (inside `response`), if any.
    pub response: Option<XmlElement>,
    /// `uptime`, ms.
    pub uptime_ms: u64,
    /// `timestamp`: the answering peer's clock, ms since the epoch.
    pub timestamp_ms: u64,
}

impl PeerInfoResponse {
    /// The document as JXSE writes it.
    pub fn to_xml(&self) -> String {
        let mut root = pretty_root(RESPONSE_ROOT);
        root.push_text("sourcePid", &self.source.to_string());
        root.push_text("targetPid", &self.target.to_string());
        wrap(&mut root, "response", &self.response);
        root.push_text("uptime", &self.uptime_ms.to_string());
        root.push_text("timestamp", &self.timestamp_ms.to_string());
        root.to_document()
    }

    /// Parses a response; `uptime` and `timestamp` default to 0.
    pub fn parse(xml: &str) -> Result<PeerInfoResponse, DiscoveryError> {
        let root = parse_xml(xml)?.expect_root(RESPONSE_ROOT)?;
        let (source, target) = ids(&root)?;
        let num = |field: &'static str| -> Result<u64, DiscoveryError> {
            match root.child_value(field) {
                None => Ok(0),
                Some(v) => v.parse().map_err(|_| DiscoveryError::BadValue {
                    field,
                    value: truncate(v),
                }),
            }
        };
        Ok(PeerInfoResponse {
            source,
            target,
            response: wrapped(&root, "response")?,
            uptime_ms: num("uptime")?,
            timestamp_ms: num("timestamp")?,
        })
    }

    /// Wraps the response in a resolver response to a query.
    pub fn to_resolver_response(&self, query_id: i32) -> ResolverResponse {
        ResolverResponse {
            handler: PEERINFO_HANDLER.to_string(),
            query_id,
            response: self.to_xml(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::AdvError;

    const PID: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    #[test]
    fn layout_and_round_trip() {
        let p: PeerId = PID.parse().unwrap();
        let mut req = XmlElement::new("status");
        req.push_text("want", "load");
        let q = PeerInfoQuery {
            source: p,
            target: p,
            request: Some(req.clone()),
        };
        assert_eq!(
            q.to_xml(),
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:PeerInfoQueryMessage>\n<jxta:PeerInfoQueryMessage xmlns:jxta=\"http://jxta.org\">\n\t\n\t<sourcePid>\n\t\t{PID}\n\t</sourcePid>\n\t<targetPid>\n\t\t{PID}\n\t</targetPid>\n\t<request>\n\t\t\n\t\t<status>\n\t\t\t\n\t\t\t<want>\n\t\t\t\tload\n\t\t\t</want>\n\t\t</status>\n\t</request>\n</jxta:PeerInfoQueryMessage>\n")
        );
        assert_eq!(PeerInfoQuery::parse(&q.to_xml()).unwrap(), q);
        let r = q.answer(1234, 99, Some(req));
        let back = PeerInfoResponse::parse(&r.to_xml()).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.to_resolver_response(4).handler, PEERINFO_HANDLER);
        assert_eq!(q.to_resolver_query(4).handler, PEERINFO_HANDLER);
    }

    #[test]
    fn bad_input() {
        assert_eq!(
            PeerInfoQuery::parse("<jxta:PeerInfoQueryMessage/>"),
            Err(DiscoveryError::Adv(AdvError::Missing("sourcePid")))
        );
        let bad = format!("<jxta:PeerInfoResponseMessage><sourcePid>{PID}</sourcePid><targetPid>{PID}</targetPid><uptime>-1</uptime></jxta:PeerInfoResponseMessage>");
        assert!(matches!(
            PeerInfoResponse::parse(&bad),
            Err(DiscoveryError::BadValue {
                field: "uptime",
                ..
            })
        ));
    }
}
