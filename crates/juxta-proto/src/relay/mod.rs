//! The relay service (digest §10): a relay peer leases service to edges
//! that cannot be reached directly; other peers reach such an edge through
//! a route whose hop is the relay.
//!
//! - This module: the control messages (namespace `relay`: `request`
//!   connect/disconnect, `response` connected/disconnected, `lease`,
//!   `peerid`, `relayAdv`) sent to the relay service
//!   (`uuid-DEADBEEFDEAFBABAFEEDBABE0000000F05`), plus Juxta's typed
//!   refusal (`response` = `refused`, `reason`).
//! - [`server`]: the relay's lease table, its bounded per-edge queues and
//!   per-sender quotas.
//! - [`client`]: the edge's lease state machine over its relay seeds.

pub mod client;
pub mod server;

use crate::id::PeerId;
use crate::message::{Element, Message};

/// The relay service name (the relay MCID's unique value).
pub const RELAY_SERVICE: &str = "uuid-DEADBEEFDEAFBABAFEEDBABE0000000F05";
/// Namespace of the control elements.
pub const NS_RELAY: &str = "relay";
/// The element of a lease request (`connect`) holding the edge's route
/// through the relay, signed by the edge (a Juxta extension: see
/// [`crate::endpoint::signed_route`]); the relay hands it out with its
/// route answers for the edge.
pub const SIGNED_ROUTE: &str = "signedRoute";
/// Largest control element value accepted.
pub const MAX_CONTROL_LEN: usize = 64 * 1024;

/// Why a relay refused a request or a message (sent back as `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refusal {
    /// The requesting connection has not proven its peer ID.
    #[error("unauthenticated")]
    Unauthenticated,
    /// The relay leases to no more clients.
    #[error("full")]
    Full,
    /// This peer is not a relay.
    #[error("not a relay")]
    NotRelay,
    /// The destination edge's queue is full.
    #[error("queue full")]
    QueueFull,
    /// The sender has used its quota at this relay.
    #[error("quota")]
    Quota,
    /// The destination holds no lease here.
    #[error("not leased")]
    NotLeased,
    /// The message is larger than the relay spools.
    #[error("too large")]
    TooLarge,
}

impl Refusal {
    /// The `reason` text.
    pub fn as_str(&self) -> &'static str {
        match self {
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::Full => "full",
            Refusal::NotRelay => "notRelay",
            Refusal::QueueFull => "queueFull",
            Refusal::Quota => "quota",
            Refusal::NotLeased => "notLeased",
            Refusal::TooLarge => "tooLarge",
        }
    }

    fn parse(s: &str) -> Option<Refusal> {
        Some(match s {
            "unauthenticated" => Refusal::Unauthenticated,
            "full" => Refusal::Full,
            "notRelay" => Refusal::NotRelay,
            "queueFull" => Refusal::QueueFull,
            "quota" => Refusal::Quota,
            "notLeased" => Refusal::NotLeased,
            "tooLarge" => Refusal::TooLarge,
            _ => return None,
        })
    }
}

/// Errors reading a control message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// Neither `request` nor `response`.
    #[error("relay message without request or response")]
    NoCommand,
    /// An unknown request or response.
    #[error("unknown relay command {0:?}")]
    UnknownCommand(String),
    /// A field is malformed or too long.
    #[error("bad relay field {0}")]
    BadField(&'static str),
}

/// A request from an edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayRequest {
    /// Lease a slot (wanted length in ms, if any).
    Connect {
        /// Wanted lease length.
        lease_ms: Option<u64>,
    },
    /// Give the lease back.
    Disconnect,
    /// Ask the relay's peer ID.
    Pid,
}

/// A relay's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayResponse {
    /// Leased for `lease_ms`; the relay's peer advertisement, if sent.
    Connected {
        /// Lease length granted.
        lease_ms: u64,
        /// The relay's peer ID.
        relay: Option<PeerId>,
        /// The relay's advertisement (`relayAdv`), as XML.
        relay_adv: Option<String>,
    },
    /// The lease ended.
    Disconnected,
    /// The relay's peer ID.
    Pid(PeerId),
    /// Refused (Juxta's extension).
    Refused(Refusal),
}

fn text<'a>(m: &'a Message, name: &'static str) -> Result<Option<&'a str>, RelayError> {
    match m.get(NS_RELAY, name) {
        None => Ok(None),
        Some(e) if e.data.len() > MAX_CONTROL_LEN => Err(RelayError::BadField(name)),
        Some(e) => e
            .as_str()
            .map(|s| Some(s.trim()))
            .ok_or(RelayError::BadField(name)),
    }
}

/// What a relay control message holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// A request.
    Request(RelayRequest),
    /// A response.
    Response(RelayResponse),
}

/// The signed route a lease request carries, as XML, if any (at most
/// [`MAX_CONTROL_LEN`] bytes).
pub fn signed_route_xml(m: &Message) -> Result<Option<&str>, RelayError> {
    text(m, SIGNED_ROUTE)
}

impl RelayRequest {
    /// The control message.
    ///
    /// ```
    /// use juxta_proto::relay::{Control, RelayRequest};
    /// let r = RelayRequest::Connect { lease_ms: Some(60_000) };
    /// assert_eq!(Control::parse(&r.to_message()).unwrap(), Control::Request(r));
    /// ```
    pub fn to_message(&self) -> Message {
        let mut m = Message::new();
        match self {
            RelayRequest::Connect { lease_ms } => {
                // JXSE's form: `connect,<lease>,keep,true` (keep the queue,
                // return the relay's advertisement).
                let lease = lease_ms.map(|l| l.to_string()).unwrap_or_default();
                m.push(Element::text(
                    NS_RELAY,
                    "request",
                    &format!("connect,{lease},keep,true"),
                ));
            }
            RelayRequest::Disconnect => {
                m.push(Element::text(NS_RELAY, "request", "disconnect"));
            }
            RelayRequest::Pid => {
                m.push(Element::text(NS_RELAY, "request", "pid"));
            }
        }
        m
    }
}

impl RelayResponse {
    /// The control message.
    pub fn to_message(&self) -> Message {
        let mut m = Message::new();
        match self {
            RelayResponse::Connected {
                lease_ms,
                relay,
                relay_adv,
            } => {
                m.push(Element::text(NS_RELAY, "response", "connected"));
                m.push(Element::text(NS_RELAY, "lease", &lease_ms.to_string()));
                if let Some(p) = relay {
                    m.push(Element::text(NS_RELAY, "peerid", &p.to_string()));
                }
                if let Some(a) = relay_adv {
                    m.push(Element::xml(NS_RELAY, "relayAdv", a.clone()));
                }
            }
            RelayResponse::Disconnected => {
                m.push(Element::text(NS_RELAY, "response", "disconnected"));
            }
            RelayResponse::Pid(p) => {
                m.push(Element::text(NS_RELAY, "response", "pid"));
                m.push(Element::text(NS_RELAY, "peerid", &p.to_string()));
            }
            RelayResponse::Refused(r) => {
                m.push(Element::text(NS_RELAY, "response", "refused"));
                m.push(Element::text(NS_RELAY, "reason", r.as_str()));
            }
        }
        m
    }
}

impl Control {
    /// Reads a control message.
    pub fn parse(m: &Message) -> Result<Control, RelayError> {
        let lease = || -> Result<Option<u64>, RelayError> {
            text(m, "lease")?
                .map(|s| s.parse::<u64>().map_err(|_| RelayError::BadField("lease")))
                .transpose()
        };
        let peer = || -> Result<Option<PeerId>, RelayError> {
            text(m, "peerid")?
                .map(|s| s.parse().map_err(|_| RelayError::BadField("peerid")))
                .transpose()
        };
        if let Some(r) = text(m, "request")? {
            // JXSE writes `connect,<lease>,flush|keep,true|other`.
            let mut parts = r.split(',');
            let verb = parts.next().unwrap_or_default();
            return Ok(Control::Request(match verb {
                "connect" => RelayRequest::Connect {
                    lease_ms: match parts.next().filter(|l| !l.is_empty()) {
                        Some(l) => Some(l.parse().map_err(|_| RelayError::BadField("lease"))?),
                        None => lease()?,
                    },
                },
                "disconnect" => RelayRequest::Disconnect,
                "pid" => RelayRequest::Pid,
                other => return Err(RelayError::UnknownCommand(other.chars().take(40).collect())),
            }));
        }
        if let Some(r) = text(m, "response")? {
            return Ok(Control::Response(match r {
                "connected" => RelayResponse::Connected {
                    lease_ms: lease()?.ok_or(RelayError::BadField("lease"))?,
                    relay: peer()?,
                    relay_adv: text(m, "relayAdv")?.map(str::to_string),
                },
                "disconnected" => RelayResponse::Disconnected,
                "pid" => RelayResponse::Pid(peer()?.ok_or(RelayError::BadField("peerid"))?),
                "refused" => RelayResponse::Refused(
                    text(m, "reason")?
                        .and_then(Refusal::parse)
                        .ok_or(RelayError::BadField("reason"))?,
                ),
                other => return Err(RelayError::UnknownCommand(other.chars().take(40).collect())),
            }));
        }
        Err(RelayError::NoCommand)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip_and_bad_input() {
        let p = PeerId::from_public_key_spki(b"r");
        for c in [
            Control::Request(RelayRequest::Connect { lease_ms: None }),
            Control::Request(RelayRequest::Disconnect),
            Control::Request(RelayRequest::Pid),
            Control::Response(RelayResponse::Connected {
                lease_ms: 5,
                relay: Some(p),
                relay_adv: Some("<jxta:PA/>".into()),
            }),
            Control::Response(RelayResponse::Disconnected),
            Control::Response(RelayResponse::Pid(p)),
            Control::Response(RelayResponse::Refused(Refusal::Unauthenticated)),
            Control::Response(RelayResponse::Refused(Refusal::QueueFull)),
        ] {
            let m = match &c {
                Control::Request(r) => r.to_message(),
                Control::Response(r) => r.to_message(),
            };
            assert_eq!(Control::parse(&m).unwrap(), c);
        }
        assert_eq!(Control::parse(&Message::new()), Err(RelayError::NoCommand));
        // JXSE's connect string.
        let jxse = Message::new().with(Element::text(
            NS_RELAY,
            "request",
            "connect,7200000,keep,true",
        ));
        assert_eq!(
            Control::parse(&jxse).unwrap(),
            Control::Request(RelayRequest::Connect {
                lease_ms: Some(7_200_000)
            })
        );
        let jxse = Message::new().with(Element::text(NS_RELAY, "request", "connect,,flush,other"));
        assert_eq!(
            Control::parse(&jxse).unwrap(),
            Control::Request(RelayRequest::Connect { lease_ms: None })
        );
        let bad = Message::new().with(Element::text(NS_RELAY, "request", "steal"));
        assert!(matches!(
            Control::parse(&bad),
            Err(RelayError::UnknownCommand(_))
        ));
        let bad = Message::new()
            .with(Element::text(NS_RELAY, "request", "connect"))
            .with(Element::text(NS_RELAY, "lease", "-1"));
        assert_eq!(Control::parse(&bad), Err(RelayError::BadField("lease")));
        let big = Message::new().with(Element::bytes(
            NS_RELAY,
            "request",
            vec![b'a'; MAX_CONTROL_LEN + 1],
        ));
        assert_eq!(Control::parse(&big), Err(RelayError::BadField("request")));
    }
}
