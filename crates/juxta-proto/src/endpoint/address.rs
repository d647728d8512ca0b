//! Endpoint addresses: `protocol://address[/service[/param]]`.
//!
//! Every JXTA message is addressed to a service (and optional parameter) at
//! a peer or a physical transport address (digest §4.1). `urn:jxta:X` and
//! `jxta://X` name the same peer.

use std::fmt;
use std::str::FromStr;

use crate::id::{JxtaId, PeerId};

/// Errors from parsing an endpoint address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// No `://` after the protocol.
    #[error("endpoint address without protocol: {0:?}")]
    NoProtocol(String),
    /// The protocol or address part is empty.
    #[error("endpoint address with an empty protocol or address: {0:?}")]
    Empty(String),
    /// A `jxta://` address that does not hold a peer ID.
    #[error("jxta:// address is not a peer: {0}")]
    NotAPeer(#[from] crate::id::IdError),
    /// Whitespace or a control character (an address is a URI: a document
    /// that trims its text would change it).
    #[error("endpoint address with whitespace or a control character: {0:?}")]
    BadChar(String),
}

/// An endpoint address.
///
/// ```
/// use juxta_proto::endpoint::address::EndpointAddress;
/// let a: EndpointAddress = "tcp://127.0.0.1:9701/EndpointService:jxta-NetGroup/EndpointRouter".parse().unwrap();
/// assert_eq!(a.service.as_deref(), Some("EndpointService:jxta-NetGroup"));
/// assert_eq!(a.param.as_deref(), Some("EndpointRouter"));
/// assert_eq!(a.to_string(), "tcp://127.0.0.1:9701/EndpointService:jxta-NetGroup/EndpointRouter");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EndpointAddress {
    /// `tcp`, `jxta`, `http`, `relay`, ...
    pub protocol: String,
    /// `127.0.0.1:9701`, `cbid-…`, ...
    pub address: String,
    /// The service name (may not contain `/`).
    pub service: Option<String>,
    /// The service parameter (may contain `/`).
    pub param: Option<String>,
}

impl EndpointAddress {
    /// `jxta://<peer unique>` with an optional service and param.
    pub fn peer(peer: &PeerId, service: Option<&str>, param: Option<&str>) -> EndpointAddress {
        EndpointAddress {
            protocol: "jxta".into(),
            address: peer.unique_value(),
            service: service.map(str::to_string),
            param: param.map(str::to_string),
        }
    }

    /// The same address with another service and param.
    pub fn with_service(&self, service: Option<&str>, param: Option<&str>) -> EndpointAddress {
        EndpointAddress {
            service: service.map(str::to_string),
            param: param.map(str::to_string),
            ..self.clone()
        }
    }

    /// The peer named by a `jxta://` address.
    pub fn peer_id(&self) -> Option<PeerId> {
        if !self.protocol.eq_ignore_ascii_case("jxta") {
            return None;
        }
        JxtaId::from_unique_value(&self.address)
            .ok()
            .and_then(|id| PeerId::try_from(id).ok())
    }

    /// `protocol://address` without service and param.
    pub fn base(&self) -> String {
        format!("{}://{}", self.protocol, self.address)
    }
}

impl FromStr for EndpointAddress {
    type Err = AddressError;
    fn from_str(s: &str) -> Result<EndpointAddress, AddressError> {
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(AddressError::BadChar(s.chars().take(80).collect()));
        }
        if let Some(rest) = s.get(..9).filter(|p| p.eq_ignore_ascii_case("urn:jxta:")) {
            let _ = rest;
            let id: JxtaId = s.parse()?;
            return Ok(EndpointAddress {
                protocol: "jxta".into(),
                address: id.unique_value(),
                service: None,
                param: None,
            });
        }
        let (protocol, rest) = s
            .split_once("://")
            .ok_or_else(|| AddressError::NoProtocol(s.chars().take(80).collect()))?;
        let (address, svc) = match rest.split_once('/') {
            Some((a, svc)) => (a, Some(svc)),
            None => (rest, None),
        };
        if protocol.is_empty() || address.is_empty() {
            return Err(AddressError::Empty(s.chars().take(80).collect()));
        }
        let (service, param) = match svc {
            None => (None, None),
            Some(svc) => match svc.split_once('/') {
                Some((s, p)) => (Some(s.to_string()), Some(p.to_string())),
                None => ((!svc.is_empty()).then(|| svc.to_string()), None),
            },
        };
        Ok(EndpointAddress {
            protocol: protocol.to_string(),
            address: address.to_string(),
            service,
            param,
        })
    }
}

impl fmt::Display for EndpointAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.protocol, self.address)?;
        if let Some(s) = &self.service {
            write!(f, "/{s}")?;
            if let Some(p) = &self.param {
                write!(f, "/{p}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        let a: EndpointAddress = "jxta://cbid-0003/PipeService/urn:jxta:cbid-0004"
            .parse()
            .unwrap();
        assert_eq!(a.service.as_deref(), Some("PipeService"));
        assert_eq!(a.param.as_deref(), Some("urn:jxta:cbid-0004"));
        assert!(a.peer_id().is_some());
        let u: EndpointAddress = "urn:jxta:cbid-0003".parse().unwrap();
        assert_eq!(u.to_string(), "jxta://cbid-0003");
        let t: EndpointAddress = "tcp://127.0.0.1:1".parse().unwrap();
        assert_eq!(t.service, None);
        // Whitespace would not survive a document that trims its text
        // (found by the `router` fuzz target in an ERM's `Dest`).
        for bad in [
            "jxta://a\n/",
            " tcp://h:1",
            "tcp://h:1/s/p ",
            "tcp://h\u{0}:1",
        ] {
            assert!(
                matches!(
                    bad.parse::<EndpointAddress>(),
                    Err(AddressError::BadChar(_))
                ),
                "{bad:?}"
            );
        }
        assert!(t.peer_id().is_none());
        assert!(matches!(
            "nothing".parse::<EndpointAddress>(),
            Err(AddressError::NoProtocol(_))
        ));
        assert!(matches!(
            "tcp:///x".parse::<EndpointAddress>(),
            Err(AddressError::Empty(_))
        ));
    }
}
