//! The `EndpointRouterMsg` (ERM) header of the Endpoint Router Protocol.
//!
//! JXSE sends everything addressed to `jxta://<peer>` through its router,
//! which wraps the message in an ERM element naming the origin, the final
//! destination (with the real service and param) and the last hop (digest
//! §5.2). This module builds and parses that element; multi-hop routing
//! state lives with the relay work.

use quick_xml::events::Event;
use quick_xml::Reader;

use super::address::{AddressError, EndpointAddress};

/// The ERM element's name (namespace `jxta`).
pub const ELEM_ERM: &str = "EndpointRouterMsg";
/// The ERM fingerprint element's name (namespace `jxta`).
pub const ELEM_ERM_FINGERPRINT: &str = "EndpointRouterMsg-fingerprint";
/// Largest ERM document we parse.
pub const MAX_ERM_LEN: usize = 64 * 1024;
/// Most hops we keep from a forward or reverse list.
pub const MAX_HOPS: usize = 32;

/// Errors from an ERM element.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// The document is larger than [`MAX_ERM_LEN`].
    #[error("router header of {0} bytes is too large")]
    TooLarge(usize),
    /// The XML is malformed.
    #[error("malformed router header XML: {0}")]
    Xml(String),
    /// A required field is missing.
    #[error("router header without {0}")]
    Missing(&'static str),
    /// An address field is malformed.
    #[error("bad address in router header: {0}")]
    Address(#[from] AddressError),
    /// Too many hops listed.
    #[error("router header lists more than {MAX_HOPS} hops")]
    TooManyHops,
}

/// A hop in the forward or reverse route (`jxta:APA`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hop {
    /// The hop's peer ID, if given.
    pub pid: Option<String>,
    /// Its endpoint addresses.
    pub addresses: Vec<String>,
}

/// A parsed ERM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterHeader {
    /// The origin (`jxta://<peer>`).
    pub src: EndpointAddress,
    /// The final destination, with the real service and param.
    pub dest: EndpointAddress,
    /// The last hop.
    pub last: EndpointAddress,
    /// Forward hops still to go.
    pub forward: Vec<Hop>,
    /// Reverse hops back to the origin.
    pub reverse: Vec<Hop>,
}

fn esc(s: &str) -> String {
    quick_xml::escape::escape(s).into_owned()
}

impl RouterHeader {
    /// A direct (single-hop) header from `src` to `dest`.
    pub fn direct(src: EndpointAddress, dest: EndpointAddress) -> RouterHeader {
        RouterHeader {
            last: src.clone(),
            src,
            dest,
            forward: Vec::new(),
            reverse: Vec::new(),
        }
    }

    /// The XML document as JXSE writes it.
    pub fn to_xml(&self) -> String {
        let hops = |name: &str, hops: &[Hop]| {
            if hops.is_empty() {
                return format!("<{name}/>");
            }
            let mut s = format!("<{name}>");
            for h in hops {
                s.push_str("<jxta:APA>");
                if let Some(p) = &h.pid {
                    s.push_str(&format!("<PID>{}</PID>", esc(p)));
                }
                for a in &h.addresses {
                    s.push_str(&format!("<EA>{}</EA>", esc(a)));
                }
                s.push_str("</jxta:APA>");
            }
            s.push_str(&format!("</{name}>"));
            s
        };
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:ERM>\n<jxta:ERM xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<Src>{}</Src><Dest>{}</Dest><Last>{}</Last>{}{}</jxta:ERM>",
            esc(&self.src.to_string()),
            esc(&self.dest.to_string()),
            esc(&self.last.to_string()),
            hops("Fwd", &self.forward),
            hops("Rvs", &self.reverse),
        )
    }

    /// Parses the ERM document; the route advertisement, if any, is skipped.
    pub fn parse(xml: &[u8]) -> Result<RouterHeader, RouterError> {
        if xml.len() > MAX_ERM_LEN {
            return Err(RouterError::TooLarge(xml.len()));
        }
        let mut reader = Reader::from_reader(xml);
        reader.config_mut().trim_text(true);
        let mut path: Vec<Vec<u8>> = Vec::new();
        let (mut src, mut dest, mut last) = (None, None, None);
        let mut forward = Vec::new();
        let mut reverse = Vec::new();
        let mut buf = Vec::new();
        loop {
            let ev = reader
                .read_event_into(&mut buf)
                .map_err(|e| RouterError::Xml(e.to_string()))?;
            match ev {
                Event::Start(e) => {
                    let name = e.name().as_ref().to_vec();
                    if name == b"jxta:APA" && path.len() == 2 {
                        let list = match path[1].as_slice() {
                            b"Fwd" => Some(&mut forward),
                            b"Rvs" => Some(&mut reverse),
                            _ => None,
                        };
                        if let Some(list) = list {
                            if list.len() >= MAX_HOPS {
                                return Err(RouterError::TooManyHops);
                            }
                            list.push(Hop::default());
                        }
                    }
                    path.push(name);
                    if path.len() > 16 {
                        return Err(RouterError::Xml("nesting too deep".into()));
                    }
                }
                Event::End(_) => {
                    path.pop();
                }
                Event::Text(t) => {
                    let text = t
                        .unescape()
                        .map_err(|e| RouterError::Xml(e.to_string()))?
                        .trim()
                        .to_string();
                    if text.is_empty() {
                        // Only characters `trim` drops (e.g. U+000B, which
                        // the reader's XML-whitespace trimming keeps): as
                        // an empty element, so that nothing is read that
                        // would be written back as nothing (found by the
                        // `router` fuzz target: an empty `EA`).
                    } else if path.len() == 2 {
                        match path[1].as_slice() {
                            b"Src" => src = Some(text),
                            b"Dest" => dest = Some(text),
                            b"Last" => last = Some(text),
                            _ => {}
                        }
                    } else if path.len() == 4 && path[2] == b"jxta:APA" {
                        let list = match path[1].as_slice() {
                            b"Fwd" => forward.last_mut(),
                            b"Rvs" => reverse.last_mut(),
                            _ => None,
                        };
                        if let Some(hop) = list {
                            match path[3].as_slice() {
                                b"PID" => hop.pid = Some(text),
                                b"EA" if hop.addresses.len() < MAX_HOPS => hop.addresses.push(text),
                                _ => {}
                            }
                        }
                    }
                }
                Event::Eof => break,
                _ => {}
            }
            buf.clear();
        }
        let src: EndpointAddress = src.ok_or(RouterError::Missing("Src"))?.parse()?;
        let dest: EndpointAddress = dest.ok_or(RouterError::Missing("Dest"))?.parse()?;
        let last = match last {
            Some(l) => l.parse()?,
            None => src.clone(),
        };
        Ok(RouterHeader {
            src,
            dest,
            last,
            forward,
            reverse,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_erm_parses_and_round_trips() {
        let p = format!(
            "{}/tests/data/jxse-2.7-stock/41_endpoint_routed_message_1B.bin",
            env!("CARGO_MANIFEST_DIR")
        );
        let d = std::fs::read(&p).unwrap_or_else(|e| panic!("vector {p} missing: {e}"));
        let i = d.windows(5).position(|w| w == b"<?xml").unwrap();
        let j = d.windows(11).position(|w| w == b"</jxta:ERM>").unwrap() + 11;
        let h = RouterHeader::parse(&d[i..j]).unwrap();
        assert_eq!(h.dest.service.as_deref(), Some("BenchEP"));
        assert_eq!(h.dest.param.as_deref(), Some("data"));
        assert!(h.src.peer_id().is_some());
        assert_eq!(h.last, h.src);
        assert!(h.forward.is_empty() && h.reverse.is_empty());
        assert_eq!(h.to_xml().as_bytes(), &d[i..j]);
    }

    #[test]
    fn hops_round_trip_and_bad_input() {
        let mut h = RouterHeader::direct(
            "jxta://cbid-0103".parse().unwrap(),
            "jxta://cbid-0203/Svc/a/b".parse().unwrap(),
        );
        h.reverse.push(Hop {
            pid: Some("urn:jxta:cbid-0303".into()),
            addresses: vec!["tcp://127.0.0.1:1".into()],
        });
        assert_eq!(RouterHeader::parse(h.to_xml().as_bytes()).unwrap(), h);
        // Text that `trim` empties reads as no text: no empty EA or PID.
        let odd = h.to_xml().replace(
            "</jxta:APA>",
            "<EA>\u{b}\u{c}</EA><PID>&#11;</PID></jxta:APA>",
        );
        let back = RouterHeader::parse(odd.as_bytes()).unwrap();
        assert_eq!(back, h);
        assert!(matches!(
            RouterHeader::parse(b"<jxta:ERM><Dest>jxta://x</Dest></jxta:ERM>"),
            Err(RouterError::Missing("Src"))
        ));
        assert!(RouterHeader::parse(b"<jxta:ERM><Src>jxta://x</Src><<<").is_err());
        assert!(matches!(
            RouterHeader::parse(&vec![b' '; MAX_ERM_LEN + 1]),
            Err(RouterError::TooLarge(_))
        ));
    }
}
