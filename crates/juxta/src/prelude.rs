//! The names most programs need, in one import: `use juxta::prelude::*;`.
//!
//! Why it exists: a program that starts a peer, publishes and finds
//! advertisements, and moves data over pipes and sockets should not have
//! to learn the crate's module tree (or depend on `juxta-proto`) first.
//! Everything here is also reachable at its full path.
//!
//! ```
//! use juxta::prelude::*;
//!
//! // A pipe advertisement to publish and bind, with no RNG in sight.
//! let mut adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
//! adv.name = Some("chat".into());
//! let msg = Message::new().with(Element::text("", "text", "hello"));
//! assert_eq!(msg.get("", "text").unwrap().as_str(), Some("hello"));
//! ```

pub use crate::config::PeerConfig;
pub use crate::discovery::{DiscoveryError, DiscoveryService, Found, Search};
pub use crate::endpoint::{EndpointMessage, Listener, Messenger, SendError, Verified};
pub use crate::group::{CertCredential, Group, GroupError, GroupService};
pub use crate::peer::{CloseError, CloseReport, Peer, PeerError};
pub use crate::pipe::{InputPipe, OutputPipe, PipeError, PipeMessage, PipeService};
pub use crate::relay::RelayConfig;
pub use crate::rendezvous::RendezvousConfig;
pub use crate::socket::{JxtaServerSocket, JxtaSocket, SocketConfig, SocketError};
pub use juxta_proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
pub use juxta_proto::id::{PeerGroupId, PeerId, PipeId};
pub use juxta_proto::message::{Element, Message};
