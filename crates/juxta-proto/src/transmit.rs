//! The one output type for a message to send: [`Transmit`].
//!
//! Every machine of the core that sends a JXTA message to a peer's service
//! hands the runtime a `Transmit` from its `poll_transmit`: the peer, the
//! destination listener (service name and parameter, not yet mangled for
//! the group: the runtime scopes and seals it for the group it serves) and
//! the message. How it gets there (a connection, a relay, a route) is the
//! runtime's business. The reliable stream's blocks and acks are not
//! transmits of their own: they are [`crate::socket::reliable::Segment`]s,
//! elements the stream's owner puts into its pipe's messages.
//!
//! ```
//! use juxta_proto::endpoint::ServiceAddress;
//! use juxta_proto::id::{IdFormat, IdType, JxtaId, PeerId};
//! use juxta_proto::message::Message;
//! use juxta_proto::transmit::Transmit;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let to: PeerId = JxtaId::from_parts(IdFormat::Cbid, [0x59; 16], [7; 16], IdType::Peer).try_into()?;
//! let t = Transmit { to, dest: ServiceAddress::new("EndpointService", None), message: Message::new() };
//! assert_eq!(t.to, to);
//! # Ok(()) }
//! ```

use crate::endpoint::ServiceAddress;
use crate::id::PeerId;
use crate::message::Message;

/// A message to send: to which peer, which service and param (not yet
/// mangled for the group), and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The destination peer.
    pub to: PeerId,
    /// The destination listener.
    pub dest: ServiceAddress,
    /// The message.
    pub message: Message,
}
