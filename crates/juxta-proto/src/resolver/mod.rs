//! The Peer Resolver Protocol (PRP): the query/response envelope that
//! carries the pipe binding, discovery and route protocols (digest §7.1).
//!
//! A query travels to the endpoint service [`RESOLVER_SERVICE`] with param
//! [`query_queue`] (`<group>ORes`), as one `jxta` element of that same name
//! holding a `jxta:ResolverQuery` document; responses use
//! [`response_queue`] (`<group>IRes`) and `jxta:ResolverResponse`. The
//! handler's own document travels as escaped text inside `Query` or
//! `Response`.
//!
//! Documents are written in JXSE's pretty-printed style (without the
//! optional `jxta:Cred` and `SrcPeerRoute`); parsing trims text values and
//! ignores `jxta:Cred`, `SrcPeerRoute` and unknown children.

pub mod node;

use crate::advertisement::route::ROUTE_ROOT;
use crate::advertisement::shallow::{parse_shallow, Kept};
use crate::advertisement::{
    parse_xml_limited, truncate, PrettyDoc, RouteAdvertisement, XmlError, XmlNode, MAX_XML_LEN,
};

/// Largest resolver response document accepted: a discovery response of
/// [`crate::discovery::MAX_RESPONSE_XML_LEN`] escaped inside the envelope
/// (`<` becomes `&lt;`: up to 4 bytes for 1) plus the envelope itself.
pub const MAX_RESPONSE_ENVELOPE_LEN: usize = 4 * crate::discovery::MAX_RESPONSE_XML_LEN + 4096;
use crate::id::{IdError, PeerId};
use crate::message::{Element, Message, NS_JXTA};

/// The resolver's endpoint service name: its module class ID URN.
pub const RESOLVER_SERVICE: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000205";
/// Root element of a resolver query.
pub const QUERY_ROOT: &str = "jxta:ResolverQuery";
/// Root element of a resolver response.
pub const RESPONSE_ROOT: &str = "jxta:ResolverResponse";

/// The queue (endpoint param and element name) for queries in a group,
/// e.g. `jxta-NetGroupORes`.
///
/// ```
/// assert_eq!(juxta_proto::resolver::query_queue("jxta-NetGroup"), "jxta-NetGroupORes");
/// ```
pub fn query_queue(group_unique: &str) -> String {
    format!("{group_unique}ORes")
}

/// The queue (endpoint param and element name) for responses in a group,
/// e.g. `jxta-NetGroupIRes`.
///
/// ```
/// assert_eq!(juxta_proto::resolver::response_queue("jxta-NetGroup"), "jxta-NetGroupIRes");
/// ```
pub fn response_queue(group_unique: &str) -> String {
    format!("{group_unique}IRes")
}

/// Resolver query IDs as JXSE's `getNextQueryID` gives them: positive,
/// wrapping to 1 before `i32::MAX`, skipping IDs still in use (0 is the
/// remote publish's ID).
///
/// ```
/// use juxta_proto::resolver::QueryIds;
/// let mut ids = QueryIds::new(i32::MAX - 1);
/// assert_eq!(ids.next(|_| false), i32::MAX - 1);
/// assert_eq!(ids.next(|id| id == 1), 2, "wraps to 1, which is in use");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryIds(i32);

impl QueryIds {
    /// IDs from `first` (values below 1 start at 1).
    pub fn new(first: i32) -> QueryIds {
        QueryIds(first.max(1))
    }

    /// The next ID for which `in_use` is false. The caller's table must
    /// leave IDs free (every table here is bounded far below `i32::MAX`).
    pub fn next(&mut self, in_use: impl Fn(i32) -> bool) -> i32 {
        loop {
            let id = self.0;
            self.0 = if id >= i32::MAX - 1 { 1 } else { id + 1 };
            if !in_use(id) {
                return id;
            }
        }
    }
}

/// The queue for SRDI messages in a group, e.g. `jxta-NetGroupSrdi`.
pub fn srdi_queue(group_unique: &str) -> String {
    format!("{group_unique}Srdi")
}

/// Errors from a resolver message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolverError {
    /// The document is too large, malformed or has the wrong root.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// The message has no element for the expected queue.
    #[error("message has no jxta:{0} element")]
    NoElement(String),
    /// The element is not UTF-8.
    #[error("resolver element is not valid UTF-8")]
    NotUtf8,
    /// A required child is missing.
    #[error("resolver document without <{0}>")]
    Missing(&'static str),
    /// A number field does not parse or is out of range.
    #[error("bad <{field}> value {value:?}")]
    BadNumber {
        /// The element.
        field: &'static str,
        /// Its text (truncated).
        value: String,
    },
    /// The source peer ID is malformed.
    #[error("bad source peer ID: {0}")]
    BadPeerId(#[from] IdError),
}

fn number<T: std::str::FromStr>(
    root: &XmlNode,
    field: &'static str,
) -> Result<Option<T>, ResolverError> {
    root.child_value(field)
        .map(|v| {
            v.parse().map_err(|_| ResolverError::BadNumber {
                field,
                value: truncate(v),
            })
        })
        .transpose()
}

/// [`number`] over a child [`parse_shallow`] kept.
fn number_of<T: std::str::FromStr>(
    kept: Option<&Kept<'_>>,
    field: &'static str,
) -> Result<Option<T>, ResolverError> {
    kept.map(|k| {
        let v = k.value();
        v.parse().map_err(|_| ResolverError::BadNumber {
            field,
            value: truncate(v),
        })
    })
    .transpose()
}

/// `doc` with the text of its root's first `HC` child, which must read
/// `was` in plain digits between optional white space and be that child's
/// only content, replaced by `now`. `None` otherwise.
fn with_hop_count(doc: &str, was: u32, now: u32) -> Option<String> {
    let mut reader = quick_xml::Reader::from_str(doc);
    let mut depth = 0usize;
    loop {
        match reader.read_event().ok()? {
            quick_xml::events::Event::Start(s) => {
                depth += 1;
                if depth == 2 && s.name().as_ref() == b"HC" {
                    break;
                }
            }
            quick_xml::events::Event::End(_) => depth = depth.checked_sub(1)?,
            quick_xml::events::Event::Eof => return None,
            _ => {}
        }
    }
    let from = usize::try_from(reader.buffer_position()).ok()?;
    let quick_xml::events::Event::Text(_) = reader.read_event().ok()? else {
        return None;
    };
    let to = usize::try_from(reader.buffer_position()).ok()?;
    let quick_xml::events::Event::End(_) = reader.read_event().ok()? else {
        return None;
    };
    let text = doc.get(from..to)?;
    let digits = text.trim();
    if digits != was.to_string() {
        return None;
    }
    // Trimmed white space is ASCII: `lead` is a char boundary.
    let lead = from + (text.len() - text.trim_start().len());
    let mut out = String::with_capacity(doc.len() + 10);
    out.push_str(&doc[..lead]);
    out.push_str(&now.to_string());
    out.push_str(&doc[lead + digits.len()..]);
    Some(out)
}

fn element_text<'m>(msg: &'m Message, queue: &str) -> Result<&'m str, ResolverError> {
    msg.get(NS_JXTA, queue)
        .ok_or_else(|| ResolverError::NoElement(queue.to_string()))?
        .as_str()
        .ok_or(ResolverError::NotUtf8)
}

/// A resolver query (`jxta:ResolverQuery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverQuery {
    /// The handler the query is for (`HandlerName`), e.g. `JxtaPipeResolver`.
    pub handler: String,
    /// The query ID chosen by the sender (`QueryID`); the response echoes it.
    pub query_id: i32,
    /// Hops so far (`HC`), 0 initially.
    pub hop_count: u32,
    /// The peer that issued the query (`SrcPeerID`); responses go there.
    pub src_peer: PeerId,
    /// The handler's document (`Query`), unescaped.
    pub query: String,
    /// The issuer's route (`SrcPeerRoute`), so an answering peer that has no
    /// connection to the issuer can reach it (JXSE adds it to every query it
    /// sends and keeps it when forwarding).
    pub src_route: Option<RouteAdvertisement>,
}

impl ResolverQuery {
    /// The document in JXSE's pretty-printed style.
    pub fn to_xml(&self) -> String {
        let mut d = PrettyDoc::new(QUERY_ROOT);
        d.field("HandlerName", &self.handler)
            .field("QueryID", &self.query_id.to_string())
            .field("HC", &self.hop_count.to_string())
            .field("SrcPeerID", &self.src_peer.to_string());
        if let Some(r) = &self.src_route {
            // As JXSE's pretty printer leaves a copied route: the RA's
            // attributes reversed, its children compact and copied again.
            let ra = r.to_element().into_copied();
            let mut inner = String::from(
                "\n\t\t\n\t\t<jxta:RA xmlns:jxta=\"http://jxta.org\" xml:space=\"preserve\">\n\t\t\t\n",
            );
            for c in &ra.children {
                c.write_compact(&mut inner);
            }
            inner.push_str("\t\t</jxta:RA>\n\t");
            d.raw("SrcPeerRoute", &inner);
        }
        d.field("Query", &self.query);
        d.finish()
    }

    /// Parses a query document. `HandlerName`, `QueryID`, `Query` and the
    /// source peer are required; the source is `SrcPeerID`, or else the
    /// `DstPID` of the `SrcPeerRoute` route advertisement. `HC` defaults to 0.
    pub fn parse(xml: &str) -> Result<ResolverQuery, ResolverError> {
        // One pass, no tree but the route's (see `advertisement::shallow`):
        // a rendezvous reads every query it is sent.
        let [handler, query_id, hop_count, src, route, query] = parse_shallow(
            xml,
            MAX_XML_LEN,
            QUERY_ROOT,
            [
                "HandlerName",
                "QueryID",
                "HC",
                "SrcPeerID",
                "SrcPeerRoute",
                "Query",
            ],
            [false, false, false, false, true, false],
        )?;
        let handler = handler
            .ok_or(ResolverError::Missing("HandlerName"))?
            .value()
            .to_string();
        let query_id =
            number_of(query_id.as_ref(), "QueryID")?.ok_or(ResolverError::Missing("QueryID"))?;
        let hop_count = number_of(hop_count.as_ref(), "HC")?.unwrap_or(0);
        let ra = route
            .as_ref()
            .and_then(|r| r.node.as_ref())
            .and_then(|r| r.child(ROUTE_ROOT));
        // A malformed route is ignored (the query stays answerable where
        // the issuer is reachable otherwise), as JXSE logs and goes on.
        let src_route = ra
            .and_then(|ra| RouteAdvertisement::from_node(ra).ok())
            .filter(|ra| ra.dest_peer.is_some());
        let src = src
            .as_ref()
            .map(|s| s.value())
            .filter(|s| !s.is_empty())
            .or_else(|| ra?.child_value("DstPID"))
            .ok_or(ResolverError::Missing("SrcPeerID"))?;
        let src_peer = src.parse()?;
        let query = query
            .ok_or(ResolverError::Missing("Query"))?
            .value()
            .to_string();
        Ok(ResolverQuery {
            handler,
            query_id,
            hop_count,
            src_peer,
            query,
            src_route,
        })
    }

    /// The query element to forward: `raw`'s (the message this query was
    /// read from, for `group_unique`) byte for byte with the hop count
    /// set to `hop_count`, so a rendezvous passing a query on does not
    /// print it again; printed from `self` when `raw` is not the document
    /// this query was read from or its `HC` is not plain digits.
    pub fn forwarded_element(&self, raw: &Message, group_unique: &str, hop_count: u32) -> Element {
        let queue = query_queue(group_unique);
        let rewritten = element_text(raw, &queue)
            .ok()
            .and_then(|doc| with_hop_count(doc, self.hop_count, hop_count));
        match rewritten {
            Some(doc) => Element::xml(NS_JXTA, &queue, doc),
            None => {
                let mut q = self.clone();
                q.hop_count = hop_count;
                q.to_element(group_unique)
            }
        }
    }

    /// The message element: namespace `jxta`, named after the group's query
    /// queue, typed `text/xml;charset=UTF-8`.
    pub fn to_element(&self, group_unique: &str) -> Element {
        Element::xml(NS_JXTA, &query_queue(group_unique), self.to_xml())
    }

    /// Finds and parses the query element of a message for that group.
    pub fn from_message(msg: &Message, group_unique: &str) -> Result<ResolverQuery, ResolverError> {
        ResolverQuery::parse(element_text(msg, &query_queue(group_unique))?)
    }

    /// A response to this query: same handler and query ID.
    pub fn response(&self, response: String) -> ResolverResponse {
        ResolverResponse {
            handler: self.handler.clone(),
            query_id: self.query_id,
            response,
        }
    }
}

/// A resolver response (`jxta:ResolverResponse`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverResponse {
    /// The handler (`HandlerName`), as in the query.
    pub handler: String,
    /// The query ID being answered (`QueryID`).
    pub query_id: i32,
    /// The handler's document (`Response`), unescaped.
    pub response: String,
}

impl ResolverResponse {
    /// The document in JXSE's pretty-printed style.
    pub fn to_xml(&self) -> String {
        let mut d = PrettyDoc::new(RESPONSE_ROOT);
        d.field("HandlerName", &self.handler)
            .field("QueryID", &self.query_id.to_string())
            .field("Response", &self.response);
        d.finish()
    }

    /// Parses a response document; `HandlerName`, `QueryID` and `Response`
    /// are required.
    ///
    /// A response may carry a discovery response of up to
    /// [`crate::discovery::MAX_RESPONSE_XML_LEN`] (escaped, so up to a few
    /// times that in the envelope): the envelope is bounded at
    /// [`MAX_RESPONSE_ENVELOPE_LEN`], larger than an advertisement.
    pub fn parse(xml: &str) -> Result<ResolverResponse, ResolverError> {
        let root = parse_xml_limited(xml, MAX_RESPONSE_ENVELOPE_LEN)?.expect_root(RESPONSE_ROOT)?;
        let handler = root
            .child_value("HandlerName")
            .ok_or(ResolverError::Missing("HandlerName"))?
            .to_string();
        let query_id = number(&root, "QueryID")?.ok_or(ResolverError::Missing("QueryID"))?;
        let response = root
            .child_value("Response")
            .ok_or(ResolverError::Missing("Response"))?
            .to_string();
        Ok(ResolverResponse {
            handler,
            query_id,
            response,
        })
    }

    /// The message element: namespace `jxta`, named after the group's
    /// response queue, typed `text/xml;charset=UTF-8`.
    pub fn to_element(&self, group_unique: &str) -> Element {
        Element::xml(NS_JXTA, &response_queue(group_unique), self.to_xml())
    }

    /// Finds and parses the response element of a message for that group.
    pub fn from_message(
        msg: &Message,
        group_unique: &str,
    ) -> Result<ResolverResponse, ResolverError> {
        ResolverResponse::parse(element_text(msg, &response_queue(group_unique))?)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn responses_larger_than_an_advertisement_are_accepted_up_to_the_envelope_bound() {
        let big = ResolverResponse {
            handler: "urn:jxta:h".into(),
            query_id: 7,
            response: "<x>".repeat(100_000),
        };
        let xml = big.to_xml();
        assert!(xml.len() > super::super::advertisement::MAX_XML_LEN);
        assert_eq!(ResolverResponse::parse(&xml).unwrap(), big);
        let too_big = format!("{}{}", xml, " ".repeat(MAX_RESPONSE_ENVELOPE_LEN));
        assert!(ResolverResponse::parse(&too_big).is_err());
    }

    use super::*;
    use crate::message::MIME_XML_UTF8;
    use proptest::prelude::*;

    const SRC: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    fn sample() -> ResolverQuery {
        ResolverQuery {
            handler: "JxtaPipeResolver".into(),
            query_id: 7,
            hop_count: 0,
            src_peer: SRC.parse().unwrap(),
            query: "<?xml version=\"1.0\"?>\n<jxta:PipeResolver>&amp;</jxta:PipeResolver>".into(),
            src_route: None,
        }
    }

    #[test]
    fn query_layout_and_round_trip() {
        let q = sample();
        let xml = q.to_xml();
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:ResolverQuery>\n<jxta:ResolverQuery xmlns:jxta=\"http://jxta.org\">\n\t\n\t<HandlerName>\n\t\tJxtaPipeResolver\n\t</HandlerName>\n\t<QueryID>\n\t\t7\n\t</QueryID>\n"));
        assert!(xml.contains("\t<Query>\n\t\t&lt;?xml version=\"1.0\"?>\n&lt;jxta:PipeResolver>&amp;amp;&lt;/jxta:PipeResolver>\n\t</Query>\n</jxta:ResolverQuery>\n"));
        assert_eq!(ResolverQuery::parse(&xml).unwrap(), q);
        let e = q.to_element("jxta-NetGroup");
        assert_eq!((&*e.namespace, &*e.name), ("jxta", "jxta-NetGroupORes"));
        assert_eq!(e.mime(), MIME_XML_UTF8);
        let m = Message::new().with(e);
        assert_eq!(ResolverQuery::from_message(&m, "jxta-NetGroup").unwrap(), q);
        assert_eq!(
            ResolverQuery::from_message(&m, "other"),
            Err(ResolverError::NoElement("otherORes".into()))
        );
    }

    #[test]
    fn src_from_route_and_ignored_parts() {
        let xml = format!(
            "<jxta:ResolverQuery><HandlerName>h</HandlerName><jxta:Cred type=\"jxta:PSECred\"><PeerID>x</PeerID></jxta:Cred><QueryID>-3</QueryID><SrcPeerRoute><jxta:RA><DstPID>{SRC}</DstPID></jxta:RA></SrcPeerRoute><Query>q</Query><Extra/></jxta:ResolverQuery>"
        );
        let q = ResolverQuery::parse(&xml).unwrap();
        assert_eq!(q.src_peer.to_string(), SRC);
        assert_eq!((q.query_id, q.hop_count, q.query.as_str()), (-3, 0, "q"));
    }

    #[test]
    fn bad_queries() {
        let base = |body: &str| format!("<jxta:ResolverQuery>{body}</jxta:ResolverQuery>");
        let ok = format!("<HandlerName>h</HandlerName><QueryID>1</QueryID><SrcPeerID>{SRC}</SrcPeerID><Query>q</Query>");
        assert!(ResolverQuery::parse(&base(&ok)).is_ok());
        for (cut, missing) in [
            ("<HandlerName>h</HandlerName>", "HandlerName"),
            ("<QueryID>1</QueryID>", "QueryID"),
            (&format!("<SrcPeerID>{SRC}</SrcPeerID>")[..], "SrcPeerID"),
            ("<Query>q</Query>", "Query"),
        ] {
            assert_eq!(
                ResolverQuery::parse(&base(&ok.replace(cut, ""))),
                Err(ResolverError::Missing(missing))
            );
        }
        assert!(matches!(
            ResolverQuery::parse(&base(&ok.replace("<QueryID>1<", "<QueryID>99999999999<"))),
            Err(ResolverError::BadNumber {
                field: "QueryID",
                ..
            })
        ));
        assert!(matches!(
            ResolverQuery::parse(&base(&format!("{ok}<HC>-1</HC>"))),
            Err(ResolverError::BadNumber { field: "HC", .. })
        ));
        assert!(matches!(
            ResolverQuery::parse(&base(&ok.replace(SRC, "urn:jxta:bogus"))),
            Err(ResolverError::BadPeerId(_))
        ));
        let m = Message::new().with(Element::typed(
            "jxta",
            "gORes",
            MIME_XML_UTF8,
            &[0xffu8, 0xfe][..],
        ));
        assert_eq!(
            ResolverQuery::from_message(&m, "g"),
            Err(ResolverError::NotUtf8)
        );
    }

    #[test]
    fn response_round_trip() {
        let r = sample().response("<a>x</a>".into());
        assert_eq!(r.query_id, 7);
        assert_eq!(ResolverResponse::parse(&r.to_xml()).unwrap(), r);
        let m = Message::new().with(r.to_element("g"));
        assert_eq!(m.elements[0].name, "gIRes");
        assert_eq!(ResolverResponse::from_message(&m, "g").unwrap(), r);
        assert_eq!(
            ResolverResponse::parse("<jxta:ResolverResponse><HandlerName>h</HandlerName><QueryID>1</QueryID></jxta:ResolverResponse>"),
            Err(ResolverError::Missing("Response"))
        );
    }

    /// The tree-built parse this crate used before the one-pass reader:
    /// the reference the reader is held to.
    fn parse_by_tree(xml: &str) -> Result<ResolverQuery, ResolverError> {
        let root = crate::advertisement::parse_xml(xml)?.expect_root(QUERY_ROOT)?;
        let number = |field: &'static str| -> Result<Option<i64>, ResolverError> {
            root.child_value(field)
                .map(|v| {
                    v.parse().map_err(|_| ResolverError::BadNumber {
                        field,
                        value: truncate(v),
                    })
                })
                .transpose()
        };
        let handler = root
            .child_value("HandlerName")
            .ok_or(ResolverError::Missing("HandlerName"))?
            .to_string();
        let query_id = number("QueryID")?.ok_or(ResolverError::Missing("QueryID"))?;
        let query_id = i32::try_from(query_id).map_err(|_| ResolverError::BadNumber {
            field: "QueryID",
            value: query_id.to_string(),
        })?;
        let hop_count = number("HC")?.unwrap_or(0);
        let hop_count = u32::try_from(hop_count).map_err(|_| ResolverError::BadNumber {
            field: "HC",
            value: hop_count.to_string(),
        })?;
        let src_route = root
            .child("SrcPeerRoute")
            .and_then(|r| r.child(ROUTE_ROOT))
            .and_then(|ra| RouteAdvertisement::from_node(ra).ok())
            .filter(|ra| ra.dest_peer.is_some());
        let src = root
            .child_value("SrcPeerID")
            .filter(|s| !s.is_empty())
            .or_else(|| {
                root.child("SrcPeerRoute")?
                    .child("jxta:RA")?
                    .child_value("DstPID")
            })
            .ok_or(ResolverError::Missing("SrcPeerID"))?;
        Ok(ResolverQuery {
            handler,
            query_id,
            hop_count,
            src_peer: src.parse()?,
            query: root
                .child_value("Query")
                .ok_or(ResolverError::Missing("Query"))?
                .to_string(),
            src_route,
        })
    }

    /// Whether the one-pass parse and the tree's agree on `xml` (errors
    /// compared by kind: their messages quote the same text).
    fn agrees(xml: &str) -> bool {
        match (ResolverQuery::parse(xml), parse_by_tree(xml)) {
            (Ok(a), Ok(b)) => a == b,
            (Err(a), Err(b)) => std::mem::discriminant(&a) == std::mem::discriminant(&b),
            _ => false,
        }
    }

    fn routed() -> ResolverQuery {
        let mut q = sample();
        q.hop_count = 3;
        q.src_route = Some(RouteAdvertisement::direct(
            SRC.parse().unwrap(),
            ["tcp://127.0.0.1:9701".to_string()],
        ));
        q
    }

    #[test]
    fn the_one_pass_parse_reads_as_the_tree() {
        let full = routed().to_xml();
        let docs = [
            full.clone(),
            sample().to_xml(),
            full.replace(SRC, ""),
            full.replace("<DstPID>", "<DstPID>x"),
            full.replace("\t\t3\n", "\t\t3<!-- c -->\n"),
            full.replace("<HC>", "<HC/><HC>"),
            full.replace("<QueryID>", "<QueryID>&#x31;"),
            full.replace("</Query>", "</Query><Query>two</Query>"),
            full.replace("<SrcPeerRoute>", "<SrcPeerRoute><x/>"),
            full.replace("&lt;", "&zz;"),
            full.replace("</jxta:ResolverQuery>", ""),
            full.replace("jxta:ResolverQuery", "jxta:Other"),
            format!("{full}<x/>"),
            full.replace("<HandlerName>", "<HandlerName><![CDATA[a<b]]>"),
        ];
        for d in &docs {
            assert!(agrees(d), "{d}");
        }
    }

    #[test]
    fn a_forwarded_query_changes_only_its_hop_count() {
        let q = routed();
        let e = q.to_element("g");
        let raw = Message::new().with(e.clone());
        let fwd = q.forwarded_element(&raw, "g", 4);
        let (before, after) = (e.as_str().unwrap(), fwd.as_str().unwrap());
        assert_eq!(before.replace("\t\t3\n", "\t\t4\n"), after);
        assert_eq!((&*fwd.namespace, &*fwd.name), ("jxta", "gORes"));
        let back = ResolverQuery::parse(after).unwrap();
        assert_eq!(
            back,
            ResolverQuery {
                hop_count: 4,
                ..q.clone()
            }
        );
        // Saturated counts and longer numbers print whole.
        let far = q.forwarded_element(&raw, "g", u32::MAX);
        assert_eq!(
            ResolverQuery::parse(far.as_str().unwrap())
                .unwrap()
                .hop_count,
            u32::MAX
        );
    }

    #[test]
    fn a_query_whose_hop_count_cannot_be_rewritten_is_printed_again() {
        let q = routed();
        let printed = ResolverQuery {
            hop_count: 4,
            ..q.clone()
        }
        .to_xml();
        let doc = q.to_xml();
        let with_doc = |d: String| Message::new().with(Element::xml(NS_JXTA, "gORes", d));
        for raw in [
            // Another group's element, or none.
            Message::new().with(q.to_element("other")),
            Message::new(),
            // Not plain digits, a comment inside, no HC at all, another count.
            with_doc(doc.replace("\t\t3\n", "\t\t&#x33;\n")),
            with_doc(doc.replace("\t\t3\n", "\t\t3<!-- c -->\n")),
            with_doc(doc.replace("<HC>\n\t\t3\n\t</HC>", "")),
            with_doc(doc.replace("\t\t3\n", "\t\t2\n")),
        ] {
            let fwd = q.forwarded_element(&raw, "g", 4);
            assert_eq!(fwd.as_str().unwrap(), printed);
        }
    }

    fn piece() -> impl Strategy<Value = String> {
        let src = format!("<SrcPeerID>{SRC}</SrcPeerID>");
        let route = format!("<SrcPeerRoute><jxta:RA><DstPID>{SRC}</DstPID><Dst><jxta:APA><EA>tcp://127.0.0.1:1</EA></jxta:APA></Dst></jxta:RA></SrcPeerRoute>");
        prop_oneof![
            Just("<HandlerName>h</HandlerName>".to_string()),
            Just("<QueryID>7</QueryID>".to_string()),
            Just("<QueryID>x</QueryID>".to_string()),
            Just("<HC> 2 </HC>".to_string()),
            Just("<HC/>".to_string()),
            Just(src),
            Just("<SrcPeerID></SrcPeerID>".to_string()),
            Just(route),
            Just("<SrcPeerRoute><jxta:RA/></SrcPeerRoute>".to_string()),
            Just("<Query>&lt;q></Query>".to_string()),
            Just("<Query><![CDATA[c]]>d</Query>".to_string()),
            Just("<x><Query>in</Query></x>".to_string()),
            Just("&amp;".to_string()),
            Just("<".to_string()),
            "[a-z \n]{0,3}",
        ]
    }

    proptest! {
        #[test]
        fn the_one_pass_parse_reads_any_document_as_the_tree(
            body in proptest::collection::vec(piece(), 0..12),
        ) {
            let xml = format!("<jxta:ResolverQuery>{}</jxta:ResolverQuery>", body.concat());
            prop_assert!(agrees(&xml), "{}", xml);
        }
    }

    proptest! {
        #[test]
        fn query_round_trip(
            handler in "[a-zA-Z0-9:._-]{1,40}",
            query_id in any::<i32>(),
            hop_count in any::<u32>(),
            query in "[ -~\n\t]{0,200}",
        ) {
            let q = ResolverQuery {
                handler,
                query_id,
                hop_count,
                src_peer: SRC.parse().unwrap(),
                query: query.trim().to_string(), src_route: None,
            };
            prop_assert_eq!(ResolverQuery::parse(&q.to_xml()).unwrap(), q);
        }
    }
}
