//! Pipes: pipe types, the Pipe Binding Protocol messages and the
//! propagate-pipe wire header (digest §6).
//!
//! - [`binding`]: the `JxtaPipeResolver` query/answer documents, the
//!   responder logic and the sans-IO [`binding::Binder`] that resolves an
//!   output pipe to the peer hosting its input pipe.
//! - [`wire_header`]: the `jxta:JxtaWireHeader` of propagate pipes and a
//!   bounded duplicate filter.
//!
//! A unicast pipe message is addressed to
//! `jxta://<peer>/PipeService/<pipe ID URN>` and carries only the
//! application's elements (digest §6.2).

pub mod binding;
pub mod wire_header;

pub use crate::advertisement::PipeType;

/// The endpoint service name input pipes listen on (param: the pipe ID URN).
pub const PIPE_SERVICE: &str = "PipeService";
