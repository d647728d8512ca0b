//! # juxta-bench: the JXTA Performance Model as a benchmark suite
//!
//! Every layer is timed by the same harness as a plain-TCP baseline in the
//! same run, and reported as a ratio against it (the studies' method:
//! message/ack ping-pong, warm-up, 5 timed runs of 100 pairs, median).
//! Peers run in separate processes: the `juxta` binary re-executes itself
//! as a responder (`juxta bench-responder`).

pub mod machine;
pub mod pingpong;

/// Errors from a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A layer name that does not exist.
    #[error("unknown layer {0:?} (known: tcp, endpoint, endpoint-compat)")]
    UnknownLayer(String),
    /// Bad option value.
    #[error("bad option: {0}")]
    BadOption(String),
    /// The responder process failed.
    #[error("responder for layer {layer} failed: {reason}")]
    Responder {
        /// the layer
        layer: String,
        /// what happened
        reason: String,
    },
    /// I/O error with context.
    #[error("{what}: {source}")]
    Io {
        /// what was done
        what: String,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// Peer error.
    #[error(transparent)]
    Peer(#[from] juxta::PeerError),
    /// Send error.
    #[error(transparent)]
    Send(#[from] juxta::SendError),
}
