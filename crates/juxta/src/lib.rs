//! # juxta: the Juxta peer runtime
//!
//! A thin tokio shell around the sans-IO protocol core in `juxta-proto`:
//! it owns the sockets, tasks and timers, and offers the public API — a
//! [`Peer`] with an identity kept in its home directory, discovery of
//! advertisements, pipes, JXTA sockets, rendezvous and relays — wire
//! compatible with JXSE 2.7, with a compact framing between Juxta peers.
//!
//! Start with `use juxta::prelude::*;` ([`prelude`]) and the user guide
//! (`docs/guide.md` in the repository, whose programs are built as a
//! user's own crate in `examples/guide`).
//!
//! Two peers, one pipe:
//!
//! ```
//! use std::time::Duration;
//! use juxta::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = std::env::temp_dir().join(format!("juxta-doc-{}", std::process::id()));
//! // A peer's identity (its peer ID and keys) lives in its home directory.
//! let a = Peer::start(PeerConfig::new(tmp.join("a")).listen("127.0.0.1:0".parse()?)).await?;
//! let b = Peer::start(PeerConfig::new(tmp.join("b"))).await?;
//! b.connect(a.local_addr().expect("a listens")).await?;
//!
//! let adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
//! let mut input = a.pipes().create_input_pipe(&adv)?;
//! let out = b.pipes().create_output_pipe(&adv, &[a.peer_id()], Duration::from_secs(5)).await?;
//! out.send(Message::new().with(Element::text("", "greeting", "hello"))).await?;
//!
//! let got = input.recv().await.expect("pipe open");
//! assert_eq!(got.message.get("", "greeting").and_then(|e| e.as_str()), Some("hello"));
//! assert_eq!(got.from, Some(b.peer_id()));
//! # drop((a, b)); let _ = std::fs::remove_dir_all(&tmp);
//! # Ok(()) }
//! ```
//!
//! Layout, mirroring the JXTA stack: [`transport`] (TCP, HTTP), [`endpoint`]
//! (listeners, messengers), [`peer`] (start-up, identity, connections),
//! [`discovery`], [`pipe`], [`socket`], [`rendezvous`], [`relay`],
//! [`group`], and [`mp`] (message passing for parallel programs).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod config;
mod counters;
pub mod discovery;
pub mod endpoint;
pub mod group;
pub mod lan;
pub mod mp;
pub mod peer;
pub mod pipe;
pub mod prelude;
pub mod relay;
pub mod rendezvous;
mod resolver;
pub mod socket;
mod tasks;
pub mod transport;

pub use config::PeerConfig;
pub use endpoint::{EndpointMessage, Listener, Messenger, SendError, Verified};
pub use juxta_proto as proto;
pub use peer::{CloseError, CloseReport, ConnectionInfo, Peer, PeerError, Stats, CLOSE_BOUND};
