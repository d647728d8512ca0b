//! # juxta: the Juxta peer runtime
//!
//! A thin tokio shell around the sans-IO protocol core in `juxta-proto`:
//! it owns the sockets, tasks and timers, and offers the public API — a
//! [`Peer`] with an identity kept in its home directory, [`Listener`]s for
//! services and [`Messenger`]s to connected peers.
//!
//! Layout, mirroring the JXTA stack: [`transport`] (TCP), [`endpoint`]
//! (listeners, messengers), [`peer`] (start-up, identity, connections).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod config;
pub mod discovery;
pub mod endpoint;
pub mod group;
pub mod mp;
pub mod peer;
pub mod pipe;
pub mod relay;
pub mod rendezvous;
mod resolver;
pub mod socket;
pub mod transport;

pub use config::PeerConfig;
pub use endpoint::{Listener, Messenger, SendError};
pub use juxta_proto as proto;
pub use peer::{ConnectionInfo, Peer, PeerError, Stats};
