//! # juxta-proto: the sans-IO JXTA protocol core
//!
//! Everything here is a plain data transformation or state machine: bytes
//! and events in, bytes and actions out, time passed in as an argument. There
//! are no sockets, no clock reads, no threads and no tasks, so the same code
//! runs under the tokio runtime (`juxta` crate), in unit tests, in fuzzers
//! and in a deterministic simulator.
//!
//! The modules mirror the JXTA stack:
//! - [`id`]: JXTA IDs (`urn:jxta:cbid-…`).
//! - [`identity`]: a peer's RSA key and self-signed certificate, and the
//!   `cbid` peer ID JXSE derives from it.
//! - [`message`]: the binary message format v0 and the CBJX signature trailer.
//! - [`wire`]: what travels on a TCP connection: the welcome line, JXTA
//!   frames, Juxta's compact framing and the per-connection state machine.
//! - [`endpoint`]: endpoint addresses, service-name mangling and the part of
//!   the endpoint router (ERM) needed to talk to JXSE.
//! - [`relay`]: the relay service's control messages, lease table, bounded
//!   queues and quotas, and the edge's lease client.
//! - [`resolver`]: the resolver envelope and [`resolver::node`], the
//!   resolver's rules (scoping, handlers, admission, answer routing).
//! - [`node`]: the resolver and rendezvous service of one peer composed
//!   into one machine (what the simulator runs).
//!
//! Every machine follows one contract: inputs are `handle_*(…, now)`
//! calls and commands; outputs are [`transmit::Transmit`]s from
//! `poll_transmit`, the layer's own event enum from `poll_event`, and the
//! next deadline from `poll_timeout`, fed back with `handle_timeout(now)`;
//! time is [`time::Millis`] on one clock per peer.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod advertisement;
pub mod discovery;
pub mod endpoint;
pub mod group;
pub mod id;
pub mod identity;
pub mod lan;
pub mod message;
pub mod node;
pub mod pipe;
pub mod relay;
pub mod rendezvous;
pub mod resolver;
pub mod sim;
pub mod socket;
pub mod srdi;
pub mod time;
pub mod transmit;
pub mod wire;
