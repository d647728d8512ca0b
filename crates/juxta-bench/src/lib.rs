//! # juxta-bench: the JXTA Performance Model as a benchmark suite
//!
//! Every layer is timed by the same harness as a plain-TCP baseline in the
//! same run, and reported as a ratio against it (the studies' method:
//! message/ack ping-pong, warm-up, 5 timed runs of 100 pairs, median).
//! Peers run in separate processes: the `juxta` binary re-executes itself
//! as a responder (`juxta bench-responder`).
//!
//! Scenarios: [`pingpong`] (RTT and bandwidth per layer and size, including
//! propagate fan-out to 1..n receivers), [`throughput`] (one-way messages/s,
//! smooth and bursty, with loss counted by message id), [`composition`]
//! (one 20 KB message split into 1..20 elements) and [`senders`] (1..n
//! sender peers into one input pipe). Opt-in, long-running: [`soak`]
//! (resource growth under a mixed load) and [`chaos`] (kills and
//! restarts while sockets stream and queries run), with their peers as
//! [`worker`] processes.

pub mod buffers;
pub mod cache_scale;
pub mod chaos;
pub mod compare;
pub mod composition;
pub mod csv_out;
pub mod jxse;
pub mod layers;
pub mod lease_queries;
pub mod leases;
pub mod machine;
pub mod mp;
pub mod net;
pub mod ops;
pub mod pingpong;
pub mod query_forward;
pub mod recovery;
pub mod relay;
pub mod remote;
pub mod rendezvous;
pub mod report;
pub mod senders;
pub mod soak;
pub mod socket_bytes;
pub mod stacks;
pub mod subgroup;
pub mod suite;
pub mod throughput;
pub mod util;
pub mod worker;

/// Errors from a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A layer name that does not exist.
    #[error("unknown layer {0:?} (known: {known})", known = layers::Layer::known_names())]
    UnknownLayer(String),
    /// A task of the benchmark ended without its result (the runtime shut
    /// down under it), or what it drove was lost by an earlier failure.
    #[error("{what}: {reason}")]
    Task {
        /// what the task ran
        what: String,
        /// what happened
        reason: String,
    },
    /// A layer the scenario does not measure.
    #[error("layer {layer} is not measured by {scenario} (choose from: {allowed})")]
    Unsupported {
        /// the layer
        layer: String,
        /// the scenario
        scenario: String,
        /// the layers it supports
        allowed: String,
    },
    /// Bad option value.
    #[error("bad option: {0}")]
    BadOption(String),
    /// A scenario that cannot run under the network profile asked for.
    #[error(
        "--net {profile}: {scenario} cannot run under a network profile: {reason} (drop --net)"
    )]
    NetUnsupported {
        /// the profile (`--net`)
        profile: String,
        /// the scenario
        scenario: String,
        /// why
        reason: String,
    },
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
    /// Pipe error.
    #[error(transparent)]
    Pipe(#[from] juxta::pipe::PipeError),
    /// Socket set-up error.
    #[error(transparent)]
    Socket(#[from] juxta::socket::SocketError),
    /// Report error.
    #[error(transparent)]
    Report(#[from] report::ReportError),
    /// JXSE side-by-side error.
    #[error(transparent)]
    Jxse(#[from] jxse::JxseError),
    /// Network profile error.
    #[error(transparent)]
    Net(#[from] net::NetError),
    /// Operations scenario error.
    #[error(transparent)]
    Ops(#[from] ops::OpsError),
    /// Setting up a certificate subgroup's member failed.
    #[error(transparent)]
    Subgroup(#[from] subgroup::SubgroupError),
    /// Another stack (ZeroMQ, ...) failed.
    #[error(transparent)]
    Stack(#[from] stacks::StackError),
    /// Reading the kernel's byte counters failed.
    #[error(transparent)]
    SocketBytes(#[from] socket_bytes::SocketBytesError),
    /// The bench listener of another host (`--remote`) failed or refused.
    #[error(transparent)]
    Remote(Box<remote::RemoteError>),
}
