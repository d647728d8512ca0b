//! The `juxta` command: run a peer, run the benchmark suite.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

mod daemon;
mod launch;

use clap::{Parser, Subcommand};
use juxta_bench::composition::{self, CompositionOptions};
use juxta_bench::layers::{self, Host, Layer, ResponderSpec};
use juxta_bench::pingpong::{self, PingPongOptions};
use juxta_bench::senders::{self, SendersOptions};
use juxta_bench::stacks::Stack;
use juxta_bench::throughput::{self, Pattern, ThroughputOptions};
use juxta_bench::util::{parse_counts, parse_sizes, pin_current, Pin};

mod sim;
mod transfer;

#[derive(Parser)]
#[command(
    name = "juxta",
    version,
    about = "Juxta: the JXTA peer-to-peer platform, done right"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

// `Bench` carries the default run's options inline (clap flattens them).
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Run a peer until SIGINT/SIGTERM: settings from <home>/juxta.toml
    /// (or --config) and flags; roles edge, rendezvous, relay; a control
    /// socket for `juxta status` and the other operator commands; metrics
    /// with --metrics. It answers the benchmark ack service
    /// (JuxtaBench/ping -> JuxtaBench/ack). See docs/peer.md.
    Peer(daemon::PeerArgs),
    /// Simulate a rendezvous network in virtual time with the real
    /// protocol nodes (deterministic from --seed): latency, bandwidth and
    /// loss per link, churn, rendezvous kills, partitions, hostile peers,
    /// a lookup workload; rows as `juxta bench rendezvous` plus peers,
    /// virtual_s, wall_s, events and recovery. See docs/simulator.md.
    Sim(sim::SimArgs),
    /// Print the peer ID of a home's identity.
    Id {
        /// Home directory (default $JUXTA_HOME or ~/.juxta).
        #[arg(long)]
        home: Option<PathBuf>,
    },
    #[command(flatten)]
    Op(daemon::client::OpCmd),
    /// Run the benchmark suite. With no scenario: the default run, every
    /// scenario of the JXTA Performance Model in a short budget, written to
    /// results/<timestamp>/ (results.json, CSV files, report.html).
    Bench {
        #[command(subcommand)]
        scenario: Option<BenchCmd>,
        #[command(flatten)]
        suite: SuiteArgs,
    },
    /// Run a message-passing job: N processes of PROGRAM on this machine,
    /// each told its rank, the job size and the seed (rank 0's address)
    /// in JUXTA_MP_RANK, JUXTA_MP_SIZE, JUXTA_MP_SEED and JUXTA_MP_JOB
    /// (`juxta::mp::Communicator::from_env`). Output lines are prefixed
    /// `[rank]`. When a rank fails, the others are killed and the job
    /// exits non-zero (the failed rank's code when it has one).
    Run {
        /// Number of ranks (processes).
        #[arg(short = 'n', long = "np")]
        n: usize,
        /// CPU placement: none, or core (rank r on core r mod cores).
        #[arg(long, default_value = "none")]
        bind: String,
        /// Kill the job after this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
        /// The ranks' operation timeout in seconds (JUXTA_MP_TIMEOUT).
        #[arg(long)]
        op_timeout: Option<f64>,
        /// Run the ranks on the hosts this file lists (`ADDR [slots=N]
        /// [peer=ID]` per line: a `juxta peer` daemon's TCP address with
        /// `[launch]` allowing this launcher's peer ID), not on this
        /// machine. See docs/message-passing.md.
        #[arg(long)]
        hosts: Option<PathBuf>,
        /// With --hosts: the launcher's home (its identity, the peer ID
        /// the hosts allow). Default ~/.juxta/launch.
        #[arg(long, requires = "hosts")]
        home: Option<PathBuf>,
        /// With --hosts: seconds to wait for a host to connect and to
        /// answer a start.
        #[arg(long, default_value_t = 15.0, requires = "hosts")]
        connect_timeout: f64,
        /// The program and its arguments (after `--`).
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<std::ffi::OsString>,
    },
    /// Messages over a pipe found by name: `pipe listen NAME`, `pipe send NAME`.
    Pipe {
        #[command(subcommand)]
        cmd: transfer::pipe_cmd::PipeCmd,
    },
    /// Netcat over a JXTA socket found by name: `socket listen NAME`,
    /// `socket connect NAME`.
    Socket {
        #[command(subcommand)]
        cmd: transfer::socket_cmd::SocketCmd,
    },
    /// Serve a file or directory and print a ticket for `juxta receive`.
    Send(transfer::send::SendArgs),
    /// Fetch what a `juxta send` serves (resumable, SHA-256 verified).
    Receive(transfer::receive::ReceiveArgs),
    /// Internal: one rank of the message-passing benchmark.
    #[command(hide = true)]
    MpRank(juxta_bench::mp::RankArgs),
    /// Internal: a rendezvous peer as its own process (rendezvous and
    /// recovery benchmarks); prints `READY <addr> <peer id>`.
    #[command(hide = true)]
    RdvServe(RdvServeArgs),
    /// Internal: the plain-TCP forwarder the leases benchmark measures its
    /// query rates against; prints `READY <addr>`.
    #[command(hide = true)]
    QueryForward {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long, default_value_t = 1024)]
        max_connections: usize,
    },
    /// Internal: a relay peer as its own process (relay benchmark);
    /// prints `READY <addr> <peer id> [<http addr>]`.
    #[command(hide = true)]
    RelayServe(RelayServeArgs),
    /// Internal: a peer process of the soak and chaos benchmarks (a
    /// rendezvous, a relay or an edge, described by a JSON spec).
    #[command(hide = true)]
    SoakWorker {
        /// The worker's spec (JSON).
        spec: String,
    },
    /// Internal: the responder process of a benchmark.
    #[command(hide = true)]
    BenchResponder {
        #[arg(long)]
        layer: String,
        #[arg(long)]
        core: Option<usize>,
        #[arg(long, default_value_t = 1024)]
        key_bits: usize,
        /// Receiver peers to host (propagate).
        #[arg(long, default_value_t = 1)]
        receivers: usize,
        /// Socket layers: the stream window in bytes (default: the
        /// socket's own).
        #[arg(long)]
        socket_window: Option<u64>,
        /// Address to bind (network profiles).
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// Network namespace to enter first (network profiles).
        #[arg(long)]
        netns: Option<String>,
        /// Directory to make the peers' homes in (the harness owns it and
        /// removes it: this process is killed when it is stopped).
        #[arg(long)]
        homes: Option<PathBuf>,
        /// Exit when stdin reaches end of file (the parent holds the
        /// pipe's other end: the responder ends with it).
        #[arg(long)]
        exit_with_parent: bool,
        /// relayed-pipe: the relay to lease (default: one in this process).
        #[arg(long)]
        relay: Option<std::net::SocketAddr>,
    },
}

#[derive(clap::Args, Clone)]
struct SuiteArgs {
    /// Output directory of the default run (default results/<timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The complete sweeps (the studies' sizes and repetitions) instead of
    /// the short default budget.
    #[arg(long)]
    full: bool,
    /// Scenarios of the default run (default: all): pingpong, throughput,
    /// composition, senders, ops, rendezvous, recovery, relay.
    #[arg(long)]
    scenarios: Option<String>,
    /// Restrict the default run to these layers (default: each scenario's
    /// own list).
    #[arg(long)]
    layers: Option<String>,
    /// CPU placement of the two processes: same, split or none.
    #[arg(long, default_value = "same")]
    pin: String,
    /// RSA key size of the bench peers (JXSE uses 1024).
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Network profile: loopback, lan (100 Mb/s, 70 us), san (1 Gb/s,
    /// 45 us), wan (1 Gb/s, 11.2 ms), cable (4 Mb/s, 30 ms) or modem56k
    /// (56 kb/s, 150 ms); all but loopback need root.
    #[arg(long, default_value = "loopback")]
    net: String,
    /// Implementations beside the tcp bound and juxta (always measured):
    /// udp (datagram pingpong up to 64 KB), zmq (libzmq REQ/REP pingpong;
    /// needs a C compiler and libzmq3-dev), libp2p (rust-libp2p TCP +
    /// noise + yamux pingpong; built with cargo on first use), mpi (Open MPI over TCP and
    /// shared memory, pingpong; needs openmpi-bin libopenmpi-dev), jxse (the original JXSE 2.7 as
    /// two JVMs of interop/jxse, on the endpoint, unicast-pipe and socket
    /// layers of pingpong and throughput; needs Java 17 and Maven), or all.
    #[arg(long = "impl", default_value = "juxta")]
    implementations: String,
}

/// What `--impl` asks for besides tcp and Juxta (always measured).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Impls {
    /// The original JXSE 2.7 (two harness JVMs).
    jxse: bool,
    /// Plain UDP datagrams (pingpong, payloads up to 64 KB).
    udp: bool,
    /// libzmq REQ/REP (pingpong).
    zmq: bool,
    /// rust-libp2p TCP + noise + yamux (pingpong).
    libp2p: bool,
    /// Open MPI, TCP and shared memory (pingpong).
    mpi: bool,
}

/// Parses `--impl`.
fn parse_impls(s: &str) -> Result<Impls, CliError> {
    let mut i = Impls::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "juxta" | "tcp" => {}
            "jxse" => i.jxse = true,
            "udp" => i.udp = true,
            "zmq" => i.zmq = true,
            "libp2p" => i.libp2p = true,
            "mpi" => i.mpi = true,
            "all" => {
                i.jxse = true;
                i.udp = true;
                i.zmq = true;
                i.libp2p = true;
                i.mpi = true;
            }
            other => {
                return Err(CliError::Msg(format!(
                    "unknown implementation {other:?} for --impl (known: tcp, juxta, udp, zmq, libp2p, mpi, jxse, all)"
                )))
            }
        }
    }
    Ok(i)
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Message/ack ping-pong per layer against plain TCP.
    Pingpong(PingPongArgs),
    /// One-way messages/s and MB/s per layer and size, smooth and bursty,
    /// with loss counted by message id at the receiver.
    Throughput(ThroughputArgs),
    /// One 20 KB message as 1x20 KB, 5x4 KB, 10x2 KB, 20x1 KB elements:
    /// ping-pong RTT per layer against plain TCP with the same bytes.
    Composition(CompositionArgs),
    /// 1, 2, 4, 8 sender peers ping-ponging into one input pipe.
    Senders(SendersArgs),
    /// JuxTest's socket buffer sweep: the JXTA socket with its stream
    /// window bounded at 16 KB, 64 KB, 512 KB and automatic, ping-pong
    /// bandwidth and a one-way stream against plain TCP, on a network
    /// profile (san, wan: root).
    Buffers(BuffersArgs),
    /// Typical peer operations (start, groups, pipes, discovery), timed
    /// in-process on loopback, two peers ad hoc and two edges of a
    /// rendezvous: median and p99 per operation and configuration.
    Ops(OpsArgs),
    /// Lookups/s, response time and loss of rendezvous processes under an
    /// offered lookup rate from N edges.
    Rendezvous(RendezvousArgs),
    /// Time until every edge's lookups succeed again after its rendezvous
    /// process is killed.
    Recovery(RecoveryArgs),
    /// One rendezvous process holding N leased edges (issue #16): N
    /// lightweight lease clients (real connections, handshake, RVP leases
    /// and renewals, own identities) from many loopback addresses; reports
    /// the rendezvous' RSS per leased edge, CPU, renewals and lookups
    /// meanwhile.
    Leases(LeasesArgs),
    /// RTT and bandwidth between two edges directly, through one TCP
    /// relay, one HTTP relay and two relays (pipes and sockets), then an
    /// overload run against a relay process (offered vs delivered, loss,
    /// relay memory, and another edge pair's RTT meanwhile).
    Relay(RelayArgs),
    /// Opt-in, long: a mixed load (rendezvous, relay, edges pinging over
    /// pipes, streaming over sockets, looking up, joining and leaving), each
    /// peer its own process, sampled every second (RSS, descriptors,
    /// threads, tokio tasks); reports the growth per 10 minutes after the
    /// warm-up. Writes results.json, CSV files and report.html.
    Soak(SoakArgs),
    /// Opt-in: kills rendezvous (4 -> 1), a relay and edges by PID while
    /// sockets stream and lookups run, restarting them; checks that no
    /// socket byte is lost or reordered and reports the edges' re-lease
    /// times. Writes results.json, CSV files and report.html.
    Chaos(ChaosArgs),
    /// Message passing (de Souza et al.): ping-pong of 2 B..1 MB over
    /// TCP, the Juxta communicator and Open MPI (TCP and shared-memory
    /// BTLs), matrix multiplication sequential (Rust, C -O0/-O3) and on 2
    /// ranks (Juxta, Open MPI), and a 1 MB f64 allreduce over 4 ranks.
    /// Open MPI rows need `mpirun`/`mpicc` (skipped with a note otherwise).
    Mp(MpArgs),
    /// Compare two result sets (a results directory or a results.json
    /// each): prints B / A for every figure and writes an HTML page with
    /// the ratios plotted.
    Compare {
        /// The reference result set.
        a: PathBuf,
        /// The result set compared with it.
        b: PathBuf,
        /// Where to write the HTML page (default: compare.html beside B).
        #[arg(long)]
        html: Option<PathBuf>,
    },
}

#[derive(clap::Args, Clone)]
struct PingPongArgs {
    /// Layers (tcp is always measured): tcp, endpoint, endpoint-compat,
    /// endpoint-compat-nocbjx, unicast-pipe, pipe-compat, pipe-compat-nocbjx,
    /// secure-pipe, bidi-pipe, socket, socket-chunk, socket-compat,
    /// socket-compat-nocbjx, secure-socket, propagate, relayed-pipe (a
    /// unicast pipe through one relay-serve process; compare it with
    /// unicast-pipe in the same run).
    #[arg(long, default_value = "tcp,endpoint,endpoint-compat")]
    layers: String,
    /// Payload sizes in bytes (suffixes K and M allowed).
    #[arg(long, default_value = "1,1024,16384,65536,262144,1048576,4194304")]
    sizes: String,
    /// Receiver counts of the propagate layer (1 sender to n receivers).
    #[arg(long, default_value = "1,2,4,8")]
    receivers: String,
    /// CPU placement of the two processes: same, split or none.
    #[arg(long, default_value = "same")]
    pin: String,
    /// Warm-up pairs per layer and size (capped at 256 MiB of payload).
    #[arg(long, default_value_t = 1000)]
    warmup: usize,
    /// Timed runs.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Pairs per timed run.
    #[arg(long, default_value_t = 100)]
    pairs: usize,
    /// RSA key size of the bench peers (JXSE uses 1024).
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Implementations beside the tcp bound and juxta: udp (datagrams up
    /// to 64 KB), zmq (libzmq REQ/REP; needs a C compiler and
    /// libzmq3-dev), libp2p (rust-libp2p TCP + noise + yamux, one stream;
    /// built with cargo on first use), mpi (Open MPI, TCP and shared
    /// memory; needs openmpi-bin libopenmpi-dev), jxse (the original JXSE 2.7 on the endpoint,
    /// unicast-pipe and socket layers, as shipped and with CBJX off; needs
    /// Java 17 and Maven), all; loopback only.
    #[arg(long = "impl", default_value = "juxta")]
    implementations: String,
    /// Network profile: loopback, lan (100 Mb/s, 70 us), san (1 Gb/s,
    /// 45 us), wan (1 Gb/s, 11.2 ms), cable (4 Mb/s, 30 ms) or modem56k
    /// (56 kb/s, 150 ms); all but loopback need root.
    #[arg(long, default_value = "loopback")]
    net: String,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Running a scenario against `juxta peer --bench` on another host.
#[derive(clap::Args, Clone, Default)]
struct RemoteArgs {
    /// Run the responders (tcp baseline included) on another host: the
    /// bench listener of `juxta peer --bench` there, HOST:PORT. Its
    /// machine facts are recorded in the JSON beside this machine's.
    #[arg(long, value_name = "HOST:PORT")]
    remote: Option<String>,
    /// The token that `juxta peer --bench` printed at start.
    #[arg(long, requires = "remote")]
    token: Option<String>,
    /// Prove the peer ID of this home's identity instead of a token (the
    /// remote lists it in bench.allowed_peers).
    #[arg(long, value_name = "HOME", requires = "remote")]
    identity: Option<PathBuf>,
}

impl Default for PingPongArgs {
    fn default() -> Self {
        PingPongArgs {
            layers: "tcp,endpoint,endpoint-compat".into(),
            sizes: "1,1024,16384,65536,262144,1048576,4194304".into(),
            receivers: "1,2,4,8".into(),
            pin: "same".into(),
            warmup: 1000,
            runs: 5,
            pairs: 100,
            key_bits: 1024,
            implementations: "juxta".into(),
            net: "loopback".into(),
            json: None,
            remote: RemoteArgs::default(),
        }
    }
}

#[derive(clap::Args, Clone)]
struct MpArgs {
    /// Ping-pong sizes in bytes (default: the study's 16 sizes, 2 B..1 MB);
    /// empty for none.
    #[arg(long)]
    sizes: Option<String>,
    /// Warm-up round trips per size (capped at 256 MiB of payload).
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Timed runs per size.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Round trips per timed run.
    #[arg(long, default_value_t = 100)]
    pairs: usize,
    /// Matrix order of the matmul (0: no matmul).
    #[arg(long, default_value_t = 2400)]
    matmul_n: usize,
    /// Ranks of the parallel matmul.
    #[arg(long, default_value_t = 2)]
    matmul_ranks: usize,
    /// Skip the sequential C at -O0 (the slowest run).
    #[arg(long)]
    no_c_o0: bool,
    /// Allreduce f64 elements per rank (0: no allreduce).
    #[arg(long, default_value_t = 131_072)]
    allreduce_doubles: usize,
    /// Allreduce ranks.
    #[arg(long, default_value_t = 4)]
    allreduce_ranks: usize,
    /// CPU placement: core (2-rank runs on cores 0 and 1, sequential runs
    /// on core 0, for every implementation) or none.
    #[arg(long, default_value = "core")]
    bind: String,
    /// The study's pipe, socket and UDP routines through the common
    /// ping-pong harness (1-byte ack, rows `reply: ack`): any of
    /// unicast-pipe, socket, udp, endpoint, bidi-pipe, secure-pipe; empty
    /// for none.
    #[arg(long, default_value = "unicast-pipe,socket,udp")]
    layers: String,
    /// Also JXSE 2.7's pipes and sockets, reliable and unreliable, through
    /// the harness (jxse; needs Java 17 and Maven): layers unicast-pipe
    /// (unreliable), bidi-pipe-reliable, socket (reliable) and
    /// socket-unreliable.
    #[arg(long = "impl", default_value = "juxta")]
    implementations: String,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct ThroughputArgs {
    /// Layers: tcp, endpoint, endpoint-compat, unicast-pipe, secure-pipe,
    /// bidi-pipe, socket, secure-socket, propagate (1 sender to
    /// --receivers receivers).
    #[arg(
        long,
        default_value = "tcp,endpoint,unicast-pipe,secure-pipe,bidi-pipe,socket"
    )]
    layers: String,
    /// Payload sizes in bytes (suffixes K and M allowed).
    #[arg(long, default_value = "1,1K,64K,1M")]
    sizes: String,
    /// Sending patterns: smooth (back to back), bursty, paced (at each
    /// --rate; paced is added when --rate is given).
    #[arg(long, default_value = "smooth,bursty")]
    patterns: String,
    /// Paced: offered rates in messages per second, e.g. 100,1000,10000
    /// (each run lasts --duration-ms, or --count messages).
    #[arg(long)]
    rate: Option<String>,
    /// Propagate: receivers each message reaches (one responder process).
    #[arg(long, default_value_t = 1)]
    receivers: usize,
    /// Smooth: how long each (layer, size) sends, in ms.
    #[arg(long, default_value_t = 500)]
    duration_ms: u64,
    /// Smooth: send exactly this many messages instead of for a time.
    #[arg(long)]
    count: Option<u64>,
    /// Bursty: number of bursts.
    #[arg(long, default_value_t = 3)]
    bursts: usize,
    /// Bursty: messages per burst.
    #[arg(long, default_value_t = 50)]
    burst_len: usize,
    /// Bursty: idle time between bursts, in ms.
    #[arg(long, default_value_t = 500)]
    idle_ms: u64,
    /// Warm-up messages per layer and size (capped at 32 MiB of payload).
    #[arg(long, default_value_t = 2000)]
    warmup: u64,
    /// CPU placement of the two processes: same, split or none.
    #[arg(long, default_value = "same")]
    pin: String,
    /// RSA key size of the bench peers (secure pipes use at least 2048).
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Implementations beside the tcp bound: juxta, or juxta,jxse (adds
    /// the original JXSE 2.7 on the endpoint, unicast-pipe and socket
    /// layers; needs Java 17 and Maven; loopback only).
    #[arg(long = "impl", default_value = "juxta")]
    implementations: String,
    /// Network profile: loopback, lan (100 Mb/s, 70 us), san (1 Gb/s,
    /// 45 us), wan (1 Gb/s, 11.2 ms), cable (4 Mb/s, 30 ms) or modem56k
    /// (56 kb/s, 150 ms); all but loopback need root.
    #[arg(long, default_value = "loopback")]
    net: String,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(clap::Args, Clone)]
struct CompositionArgs {
    /// Layers (tcp is always measured): endpoint, endpoint-compat,
    /// unicast-pipe, pipe-compat, secure-pipe, bidi-pipe, propagate (to one
    /// receiver).
    #[arg(long, default_value = "tcp,endpoint,unicast-pipe")]
    layers: String,
    /// Compositions, elements x element size.
    #[arg(long, default_value = "1x20K,5x4K,10x2K,20x1K")]
    compositions: String,
    /// CPU placement of the two processes: same, split or none.
    #[arg(long, default_value = "same")]
    pin: String,
    /// Warm-up pairs per layer and composition.
    #[arg(long, default_value_t = 1000)]
    warmup: usize,
    /// Timed runs.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Pairs per timed run.
    #[arg(long, default_value_t = 100)]
    pairs: usize,
    /// RSA key size of the bench peers.
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct BuffersArgs {
    /// Socket stream windows: sizes (K/M suffixes) or `auto` (the
    /// default window).
    #[arg(long, default_value = "16K,64K,512K,auto")]
    windows: String,
    /// Payload sizes in bytes (suffixes K and M allowed).
    #[arg(long, default_value = "1K,64K,1M,4M")]
    sizes: String,
    /// Network profile: loopback, lan, san, wan, cable or modem56k; all
    /// but loopback need root.
    #[arg(long, default_value = "loopback")]
    net: String,
    /// CPU placement of the two processes: same, split or none.
    #[arg(long, default_value = "same")]
    pin: String,
    /// Warm-up pairs per lane and size.
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Timed runs.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Pairs per timed run.
    #[arg(long, default_value_t = 20)]
    pairs: usize,
    /// One-way stream per lane and size, in ms (0: ping-pong only).
    #[arg(long, default_value_t = 1000)]
    stream_ms: u64,
    /// RSA key size of the bench peers.
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct OpsArgs {
    /// Start-up time vs advertisement cache size (the thesis' Fig. 6.1):
    /// cache sizes, comma-separated (suffixes K and M allowed; up to
    /// 1,048,576). Measured after the operations.
    #[arg(long)]
    cache_sizes: Option<String>,
    /// Network profile (loopback, lan, san, wan, cable, modem56k; needs
    /// root): the publisher (ad-hoc) or the rendezvous and the publishing
    /// edge (rendezvous, firewalled, http-rendezvous) run in the responder namespace, the
    /// measured querier in the client's, so every remote operation crosses
    /// the emulated link. The subgroup configurations refuse a profile.
    #[arg(long, default_value = "loopback")]
    net: String,
    /// Repetitions of each operation.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// RSA key size of the peers.
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Configurations: ad-hoc (two peers connected directly), rendezvous
    /// (two edges of a rendezvous, discovery and binding through it),
    /// firewalled (as rendezvous, but the edges do not listen and reach
    /// each other through the rendezvous, which is also their relay),
    /// http-rendezvous (as firewalled, over JXTA's HTTP transport: the
    /// thesis' HTTP rendezvous),
    /// subgroup (two peers connected directly, operating inside a subgroup:
    /// password and certificate groups created and joined, discovery and
    /// pipe binding in the subgroup), subgroup-rendezvous (as rendezvous,
    /// inside a certificate subgroup whose own rendezvous is a member).
    #[arg(long, default_value = "ad-hoc,rendezvous")]
    configs: String,
    /// Also write the rows as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct SendersArgs {
    /// Layers: tcp, endpoint, unicast-pipe, secure-pipe, bidi-pipe, socket.
    #[arg(long, default_value = "tcp,unicast-pipe")]
    layers: String,
    /// Sender counts.
    #[arg(long, default_value = "1,2,4,8")]
    senders: String,
    /// Modes: pingpong (each sender waits for every ack), oneway (each
    /// sender streams back to back, the receiver counts: many-to-one
    /// throughput).
    #[arg(long, default_value = "pingpong")]
    modes: String,
    /// Payload sizes in bytes (suffixes K and M allowed).
    #[arg(long, default_value = "1")]
    sizes: String,
    /// Timed period per (mode, layer, senders, size), in ms.
    #[arg(long, default_value_t = 1000)]
    duration_ms: u64,
    /// Warm-up pairs (oneway: messages) per sender before each timed
    /// period.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// CPU placement of the two processes: same, split or none.
    #[arg(long, default_value = "same")]
    pin: String,
    /// RSA key size of the bench peers (secure pipes use at least 2048).
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct RdvServeArgs {
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    home: PathBuf,
    #[arg(long, default_value = "srdi")]
    model: String,
    #[arg(long, default_value_t = 100_000)]
    max_clients: usize,
    /// Admission: per-querier and total queries/s.
    #[arg(long, default_value_t = 1_000_000)]
    rate_limit: u32,
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Other rendezvous to form the peer view with (comma-separated).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<SocketAddr>,
    /// Peer ID of the central server (centralized model; default: itself).
    #[arg(long)]
    central: Option<String>,
    /// Bound of the SRDI index, (key, publisher) entries.
    #[arg(long, default_value_t = 1_000_000)]
    max_entries: usize,
    /// Network namespace to enter first (network profiles).
    #[arg(long)]
    netns: Option<String>,
    /// Run as the rendezvous of a certificate subgroup (not of the Net
    /// peer group): the directory holding the group advertisement and
    /// this peer's member credential (written by the bench).
    #[arg(long)]
    group_credential: Option<PathBuf>,
    /// Most connections held at once (the runtime's limit; raise it to
    /// hold thousands of edges, with `ulimit -n` to match).
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Most connections accepted from one remote IP address (default: as
    /// many as --max-clients, since the other benches' edges all connect
    /// from one address; the runtime's own default is 32).
    #[arg(long)]
    max_per_addr: Option<usize>,
    /// Most connections from one address still in their welcome (default:
    /// as many as --max-clients; the runtime's own default is 8).
    #[arg(long)]
    max_pending_per_addr: Option<usize>,
    /// The lease granted to edges, ms (default: JXSE's 20 minutes).
    #[arg(long)]
    lease_ms: Option<u64>,
}

#[derive(clap::Args, Clone)]
struct RendezvousArgs {
    /// Network profile: loopback, lan, san, wan, cable or modem56k (all
    /// but loopback need root): the rendezvous processes run across the
    /// emulated link from the edges.
    #[arg(long, default_value = "loopback")]
    net: String,
    /// Peer groups measured, each a run with the same parameters: net
    /// (the Net peer group's rendezvous) or subgroup (the rendezvous and
    /// edges are members of one certificate subgroup; the rendezvous run
    /// as that group's own rendezvous and the edges publish and query in
    /// the group); `net,subgroup` measures both.
    #[arg(long, default_value = "net")]
    group: String,
    /// Search models: centralized, flooding, srdi.
    #[arg(long, default_value = "centralized,flooding,srdi")]
    model: String,
    /// Edge counts.
    #[arg(long, default_value = "4,16,64")]
    edges: String,
    /// Rendezvous process counts.
    #[arg(long, default_value = "1,2")]
    rendezvous: String,
    /// Offered total lookup rates, per second.
    #[arg(long, default_value = "1000,5000,20000")]
    rate: String,
    /// Measured time per configuration.
    #[arg(long, default_value_t = 3000)]
    duration_ms: u64,
    /// Share of lookups for a published advertisement, % (the rest ask
    /// for names nobody published).
    #[arg(long, default_value_t = 50)]
    positive_pct: u8,
    /// Advertisements published across the edges; positive queries pick
    /// from them (the thesis: 1,024).
    #[arg(long, default_value_t = 1024)]
    query_space: usize,
    /// pdp: JXTA discovery queries through the resolver, as the thesis
    /// measured; lookup: Juxta's own SRDI lookup.
    #[arg(long, default_value = "pdp")]
    query_kind: String,
    /// pdp: responses (advertisements) wanted per query.
    #[arg(long, default_value_t = 1)]
    threshold: u32,
    /// pdp: advertisement type queried: peer, group or adv.
    #[arg(long, default_value = "adv")]
    adv_type: String,
    /// The rendezvous' index bound in advertisements (the thesis: 100 and
    /// 1,000); must hold the query space.
    #[arg(long, default_value_t = juxta_bench::rendezvous::DEFAULT_RDV_CACHE)]
    rdv_cache: usize,
    /// Query timeout (a query not answered by then is lost), ms.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    /// The thesis' sweep: centralized, flooding and srdi; 4, 8, 16, 32
    /// edges; 1, 2, 4 rendezvous; 2 to 64 queries/s; 10 s per rate, 5 s
    /// timeout (overrides those options; about an hour).
    #[arg(long)]
    full: bool,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct LeasesArgs {
    /// Lease clients to open.
    #[arg(long, default_value_t = 10_000)]
    edges: usize,
    /// Clients per loopback source address (127.2.x.y), at most 32: the
    /// rendezvous keeps the runtime's per-address limit.
    #[arg(long, default_value_t = 16)]
    per_addr: usize,
    /// Clients setting up (connect, handshake, first lease) at once.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// How long the leases are held once all are set up, ms.
    #[arg(long, default_value_t = 30_000)]
    hold_ms: u64,
    /// The clients' renewal interval, ms (the runtime edges' heartbeat).
    #[arg(long, default_value_t = 500)]
    heartbeat_ms: u64,
    /// How long a client waits for a grant before its lease counts as
    /// lost, ms (the runtime edges' default).
    #[arg(long, default_value_t = 750)]
    response_timeout_ms: u64,
    /// The lease the rendezvous grants, ms (`rdv-serve --lease-ms`;
    /// default: its own, 20 min).
    #[arg(long)]
    lease_ms: Option<u64>,
    /// RSA key size of the clients and the rendezvous (1024: the smallest
    /// accepted).
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Keep the clients' identities in this directory and reuse them next
    /// time (key generation is the slow part); never inside the repository.
    #[arg(long)]
    identities: Option<PathBuf>,
    /// Longest setup of one client once its turn came, ms.
    #[arg(long, default_value_t = 60_000)]
    setup_timeout_ms: u64,
    /// Interval of the probe edge's lookups while the leases are held, ms.
    #[arg(long, default_value_t = 100)]
    probe_interval_ms: u64,
    /// Once every client is leased, offer JXTA discovery queries from the
    /// clients at these total rates (queries/s, comma-separated), one after
    /// the other: each client publishes SRDI entries, the rendezvous
    /// forwards positive queries to their publisher (see docs/benchmarks.md)
    #[arg(long, value_delimiter = ',')]
    query_rate: Vec<u32>,
    /// How long each query rate is offered, ms.
    #[arg(long, default_value_t = 5_000)]
    query_ms: u64,
    /// Share of queries for a published name, %.
    #[arg(long, default_value_t = 50)]
    positive_pct: u32,
    /// SRDI entries each client publishes (with --query-rate).
    #[arg(long, default_value_t = 1)]
    names_per_edge: usize,
    /// A query not at its publisher after this long counts as lost, ms.
    #[arg(long, default_value_t = 2_000)]
    query_timeout_ms: u64,
    /// Skip the plain-TCP baseline: by default each query rate is offered
    /// again, right after, to a forwarder that only moves the same frames
    /// between as many connections (the floor of this machine).
    #[arg(long)]
    no_query_baseline: bool,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct RecoveryArgs {
    /// Network profile: loopback, lan, san, wan, cable or modem56k (all
    /// but loopback need root): the rendezvous processes run across the
    /// emulated link from the edges.
    #[arg(long, default_value = "loopback")]
    net: String,
    /// Edges (in this process; with --kill-every: edge processes).
    #[arg(long, default_value_t = 16)]
    edges: usize,
    /// Kills measured (without --kill-every: two rendezvous, one kill each).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// The thesis' procedure: every this many seconds kill the rendezvous
    /// the most edges lease, down to one; an orphan not leased again
    /// within the interval counts as never recovered.
    #[arg(long)]
    kill_every: Option<f64>,
    /// Rendezvous processes at the start (with --kill-every).
    #[arg(long, default_value_t = 4)]
    rendezvous: usize,
    /// Seeding (with --kill-every): ring (rendezvous name their neighbour,
    /// edges list the rendezvous in a rotated order) or star (everyone
    /// names rendezvous 0 first). See docs/benchmarks.md.
    #[arg(long, default_value = "ring")]
    topology: String,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct SoakArgs {
    /// Length of the run in minutes (fractions allowed).
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Length of the run in seconds (overrides --minutes).
    #[arg(long)]
    seconds: Option<f64>,
    /// Socket stream rate, bytes/s.
    #[arg(long, default_value_t = 1_000_000)]
    stream_rate: u64,
    /// How long each joining edge stays, seconds.
    #[arg(long, default_value_t = 10)]
    churn_secs: u64,
    /// RSA key size of the peers.
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Output directory (default results/soak-<unix time>).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct ChaosArgs {
    /// Rendezvous processes (each round kills all but one).
    #[arg(long, default_value_t = 4)]
    rendezvous: usize,
    /// Edges that only publish and look up (besides server and client).
    #[arg(long, default_value_t = 4)]
    lookup_edges: usize,
    /// Rounds of rendezvous kills (the killed ones restart after each).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Relay kills (each followed by a restart).
    #[arg(long, default_value_t = 1)]
    relay_kills: usize,
    /// Edge kills (each followed by a restart).
    #[arg(long, default_value_t = 2)]
    edge_kills: usize,
    /// RSA key size of the peers.
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Output directory (default results/chaos-<unix time>).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct RelayServeArgs {
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    home: PathBuf,
    /// Also listen for JXTA's HTTP transport here.
    #[arg(long)]
    http_listen: Option<SocketAddr>,
    /// Connect to this relay at start (R1 of the two-relays path).
    #[arg(long)]
    peer: Option<SocketAddr>,
    /// Also run as a rendezvous (the firewalled path).
    #[arg(long)]
    rendezvous: bool,
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Network namespace to enter first (network profiles).
    #[arg(long)]
    netns: Option<String>,
    /// Exit when stdin reaches end of file (the bench holds the pipe's
    /// other end: the relay ends with it).
    #[arg(long)]
    exit_with_parent: bool,
    /// Run on this CPU core only (the bench pins its relay as it pins its
    /// responders).
    #[arg(long)]
    core: Option<usize>,
}

#[derive(clap::Args, Clone)]
struct RelayArgs {
    /// Paths (direct, the baseline, is always measured): direct,
    /// tcp-relay, http-relay, two-relays, firewalled.
    #[arg(
        long,
        default_value = "direct,tcp-relay,http-relay,two-relays,firewalled"
    )]
    paths: String,
    /// Layers: unicast-pipe, secure-pipe, bidi-pipe, propagate, socket.
    #[arg(long, default_value = "unicast-pipe,socket")]
    layers: String,
    /// Payload sizes in bytes (suffixes K and M allowed).
    #[arg(long, default_value = "1,1024,65536")]
    sizes: String,
    /// The overload curve: offered rates as multiples of the relay's
    /// forwarding rate (measured first), comma-separated.
    #[arg(long, default_value = "0.5,1,2,4,8,12,20")]
    curve_factors: String,
    /// The overload curve at these offered rates (messages/s,
    /// comma-separated) instead of --curve-factors.
    #[arg(long)]
    rates: Option<String>,
    /// Seconds each point of the overload curve offers (0: no curve).
    #[arg(long, default_value_t = 10)]
    curve_point_secs: u64,
    /// Network profile: loopback, lan, san, wan, cable or modem56k (all
    /// but loopback need root): the relays run across the emulated link
    /// from the edges.
    #[arg(long, default_value = "loopback")]
    net: String,
    /// Timed ping-pong pairs per path, layer and size.
    #[arg(long, default_value_t = 200)]
    pairs: usize,
    /// Streaming time per path, layer and size (ms).
    #[arg(long, default_value_t = 1000)]
    stream_ms: u64,
    /// Bytes of one socket transfer on the direct, tcp-relay and
    /// firewalled paths, checked by SHA-256 (suffixes K and M allowed; 0:
    /// none).
    #[arg(long, default_value = "100000000")]
    transfer: String,
    /// Length of the overload run in seconds (0: no overload run).
    #[arg(long, default_value_t = 60)]
    overload_secs: u64,
    /// Messages/s the overloaded sink reads; senders offer 10x that.
    #[arg(long, default_value_t = 2000)]
    sink_rate: u32,
    /// RSA key size of the peers.
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Write the results here as JSON (`command`, `machine`, `results`).
    #[arg(long)]
    json: Option<PathBuf>,
    /// CPU placement: `same` runs the bench (both edges) and every relay
    /// process it starts on CPU 0, as `bench pingpong --pin same` does;
    /// `none` lets them float (on a VM a message that wakes a process on
    /// another, idle vCPU then waits for that vCPU).
    #[arg(long, default_value = "none")]
    pin: String,
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Bench(#[from] juxta_bench::BenchError),
    #[error(transparent)]
    Peer(#[from] juxta::PeerError),
    #[error(transparent)]
    Sim(#[from] sim::SimCliError),
    #[error("{0}")]
    Msg(String),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Peer(a) = cli.command {
        return daemon::run(a); // sets up its own logging (level, format)
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                match cli.command {
                    // The default run shows progress bars: only errors
                    // (responders killed at the end of a step reset their
                    // connections, which would log warnings).
                    Cmd::Bench { scenario: None, .. } => "error".into(),
                    // Workers are killed and their peers vanish on purpose.
                    Cmd::SoakWorker { .. } => "error".into(),
                    Cmd::Pipe { .. } | Cmd::Socket { .. } | Cmd::Send(_) | Cmd::Receive(_) => {
                        "error".into()
                    }
                    _ => "warn".into(),
                }
            }),
        )
        .with_writer(std::io::stderr)
        // No colour codes in files and pipes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match cli.command {
        Cmd::Peer(a) => return daemon::run(a),
        Cmd::Id { home } => return daemon::client::id(home),
        Cmd::Op(c) => return daemon::client::run(c),
        Cmd::Run {
            n,
            bind,
            timeout,
            op_timeout,
            hosts: Some(hosts),
            home,
            connect_timeout,
            command,
        } => {
            return run_remote_job(
                n,
                &bind,
                (timeout, op_timeout, connect_timeout),
                &hosts,
                home,
                command,
            )
        }
        Cmd::Run {
            n,
            bind,
            timeout,
            op_timeout,
            command,
            ..
        } => return run_job(n, &bind, timeout, op_timeout, command),
        Cmd::Pipe { cmd } => return transfer::run(transfer::pipe_cmd::main(cmd)),
        Cmd::Socket { cmd } => return transfer::run(transfer::socket_cmd::main(cmd)),
        Cmd::Send(a) => return transfer::run(transfer::send::main(a)),
        Cmd::Receive(a) => return transfer::run(transfer::receive::main(a)),
        Cmd::MpRank(a) => juxta_bench::mp::rank_main(&a).map_err(CliError::from),
        Cmd::Sim(a) => run_sim(a),
        Cmd::RdvServe(a) => run_rdv_serve_in_ns(a),
        Cmd::RelayServe(a) => run_relay_serve_in_ns(a),
        Cmd::QueryForward {
            listen,
            max_connections,
        } => multi_thread()
            .block_on(juxta_bench::query_forward::run_process(
                listen,
                max_connections,
            ))
            .map_err(CliError::from),
        Cmd::SoakWorker { spec } => return juxta_bench::worker::main_json(&spec),
        Cmd::BenchResponder {
            layer,
            core,
            key_bits,
            receivers,
            socket_window,
            bind,
            netns,
            homes,
            exit_with_parent,
            relay,
        } => {
            if exit_with_parent {
                exit_when_stdin_closes();
            }
            pin_current(core);
            let entered = match &netns {
                Some(ns) => juxta_bench::net::enter_for_good(ns)
                    .map_err(|e| CliError::from(juxta_bench::BenchError::from(e))),
                None => Ok(()),
            };
            match entered.and_then(|()| Ok(Layer::parse(&layer)?)) {
                Ok(layer) => {
                    let mut spec = ResponderSpec::new(layer, key_bits, receivers.max(1));
                    spec.bind = bind;
                    spec.netns = netns;
                    spec.socket_window = socket_window;
                    spec.homes = homes;
                    spec.relay = relay;
                    // On a task of its own, as the client's pairs run.
                    let serve = async move {
                        layers::run_responder(&spec, |ready| {
                            // Line-buffered: the parent reads it at once.
                            println!("{}", ready.to_line());
                        })
                        .await
                    };
                    current_thread()
                        .block_on(juxta_bench::util::on_task("the responder", serve))
                        .and_then(|r| r)
                        .map_err(CliError::from)
                }
                Err(e) => Err(e),
            }
        }
        Cmd::Bench { scenario, suite } => match scenario {
            Some(BenchCmd::Pingpong(a)) => run_pingpong(a),
            Some(BenchCmd::Throughput(a)) => run_throughput(a),
            Some(BenchCmd::Composition(a)) => run_composition(a),
            Some(BenchCmd::Senders(a)) => run_senders(a),
            Some(BenchCmd::Buffers(a)) => run_buffers(a),
            Some(BenchCmd::Ops(a)) => run_ops(a),
            Some(BenchCmd::Rendezvous(a)) => run_rendezvous(a),
            Some(BenchCmd::Recovery(a)) => run_recovery(a),
            Some(BenchCmd::Leases(a)) => run_leases(a),
            Some(BenchCmd::Relay(a)) => run_relay(a),
            Some(BenchCmd::Soak(a)) => run_soak(a),
            Some(BenchCmd::Chaos(a)) => run_chaos(a),
            Some(BenchCmd::Compare { a, b, html }) => run_compare(a, b, html),
            Some(BenchCmd::Mp(a)) => run_mp(a),
            None => match run_suite(suite) {
                Ok(code) => return code,
                Err(e) => Err(e),
            },
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("juxta: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `juxta run --hosts`: the job's ranks on other hosts, through their
/// daemons.
fn run_remote_job(
    n: usize,
    bind: &str,
    (timeout, op_timeout, connect_timeout): (Option<f64>, Option<f64>, f64),
    hosts: &std::path::Path,
    home: Option<PathBuf>,
    command: Vec<std::ffi::OsString>,
) -> ExitCode {
    use launch::client::{run, RemoteJob};
    let secs = |what: &str, t: f64| {
        if t.is_finite() && t > 0.0 {
            Ok(std::time::Duration::from_secs_f64(t))
        } else {
            Err(format!("{what} {t}: expected a positive number of seconds"))
        }
    };
    let job = (|| {
        if bind != "none" {
            return Err(format!(
                "--bind {bind}: placement on other hosts is theirs to choose (local jobs only)"
            ));
        }
        let home = match home {
            Some(h) => h,
            None => std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".juxta").join("launch"))
                .ok_or("no HOME: pass --home")?,
        };
        Ok::<_, String>(RemoteJob {
            hosts: launch::hostfile::read(hosts).map_err(|e| e.to_string())?,
            ranks: n,
            command,
            timeout: timeout.map(|t| secs("--timeout", t)).transpose()?,
            op_timeout: op_timeout.map(|t| secs("--op-timeout", t)).transpose()?,
            home,
            connect_timeout: secs("--connect-timeout", connect_timeout)?,
        })
    })();
    let job = match job {
        Ok(j) => j,
        Err(e) => {
            eprintln!("juxta run: {e}");
            return ExitCode::FAILURE;
        }
    };
    match multi_thread().block_on(run(&job)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("juxta run: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `juxta run`: launches the job and ends with its status.
fn run_job(
    n: usize,
    bind: &str,
    timeout: Option<f64>,
    op_timeout: Option<f64>,
    command: Vec<std::ffi::OsString>,
) -> ExitCode {
    use juxta::mp::launch::{launch, Bind, LaunchOptions};
    let secs = |what: &str, t: Option<f64>| match t {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 => Ok(Some(std::time::Duration::from_secs_f64(t))),
        Some(t) => Err(format!("{what} {t}: expected a positive number of seconds")),
    };
    let opts = (|| {
        Ok::<_, String>(LaunchOptions {
            ranks: n,
            command,
            bind: match bind {
                "none" => Bind::None,
                "core" => Bind::Core,
                other => return Err(format!("--bind {other:?} (expected none or core)")),
            },
            timeout: secs("--timeout", timeout)?,
            op_timeout: secs("--op-timeout", op_timeout)?,
            job: None,
        })
    })();
    let opts = match opts {
        Ok(o) => o,
        Err(e) => {
            eprintln!("juxta run: {e}");
            return ExitCode::FAILURE;
        }
    };
    match multi_thread().block_on(launch(&opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("juxta run: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run_mp(a: MpArgs) -> Result<(), CliError> {
    use juxta_bench::mp::{MpOptions, DE_SOUZA_SIZES};
    let opts = MpOptions {
        sizes: match &a.sizes {
            None => DE_SOUZA_SIZES.to_vec(),
            Some(s) if s.trim().is_empty() => Vec::new(),
            Some(s) => parse_sizes(s)?,
        },
        warmup: a.warmup,
        runs: a.runs.max(1),
        pairs: a.pairs.max(1),
        matmul_n: a.matmul_n,
        matmul_ranks: a.matmul_ranks.max(1),
        c_o0: !a.no_c_o0,
        allreduce_doubles: a.allreduce_doubles,
        allreduce_ranks: a.allreduce_ranks.max(1),
        bind: match a.bind.as_str() {
            "core" => true,
            "none" => false,
            other => {
                return Err(CliError::Msg(format!(
                    "--bind {other:?} (expected core or none)"
                )))
            }
        },
        layers: Vec::new(),
        jxse: false,
        exe: None,
    };
    if opts.matmul_n > 0 && !opts.matmul_n.is_multiple_of(opts.matmul_ranks) {
        return Err(CliError::Msg(format!(
            "--matmul-n {} is not a multiple of --matmul-ranks {}",
            opts.matmul_n, opts.matmul_ranks
        )));
    }
    let mut opts = opts;
    opts.layers = if a.layers.trim().is_empty() {
        Vec::new()
    } else {
        layers::parse_layers(&a.layers, "mp", &juxta_bench::mp::LAYERS)?
            .into_iter()
            .filter(|l| *l != Layer::Tcp)
            .collect()
    };
    let impls = parse_impls(&a.implementations)?;
    if impls
        != (Impls {
            jxse: impls.jxse,
            ..Impls::default()
        })
    {
        return Err(CliError::Msg(
            "bench mp: --impl takes juxta or jxse (Open MPI runs whenever it is installed)".into(),
        ));
    }
    opts.jxse = impls.jxse;
    if opts.jxse {
        juxta_bench::jxse::preflight().map_err(juxta_bench::BenchError::from)?;
    }
    if let Some(p) = &a.json {
        prepare_json(p)?;
    }
    let o = opts.clone();
    let host = host()?;
    let host = &host;
    let res = drive(|progress| async move { juxta_bench::mp::run(host, &o, progress).await })?;
    println!(
        "{:<6} {:<18} {:<5} {:>9} {:>12} {:>12} {:>9} {:>8}",
        "impl", "layer", "reply", "size", "rtt_med_us", "bw_MB_s", "rtt/mpi", "bw/mpi"
    );
    let ratio = |x: Option<f64>| x.map(|v| format!("{v:.2}")).unwrap_or_default();
    for r in &res.pingpong {
        println!(
            "{:<6} {:<18} {:<5} {:>9} {:>12.1} {:>12.1} {:>9} {:>8}",
            r.implementation,
            r.layer,
            r.reply,
            r.size,
            r.rtt_us_median,
            r.bandwidth_mb_s,
            ratio(r.rtt_ratio_vs_mpi_tcp),
            ratio(r.bandwidth_ratio_vs_mpi_tcp)
        );
    }
    for r in &res.matmul {
        println!(
            "matmul {:<9} ranks {} n {} {:>9.3} s speedup {:.2} checksum {:.6e}",
            r.implementation, r.ranks, r.n, r.seconds, r.speedup, r.checksum
        );
    }
    for r in &res.allreduce {
        println!(
            "allreduce {:<6} ranks {} {} B {:>10.1} us",
            r.implementation, r.ranks, r.bytes, r.us_median
        );
    }
    for n in &res.notes {
        println!("{n}");
    }
    if let Some(p) = &a.json {
        let mut opts_json = serde_json::to_value(&opts).expect("json");
        opts_json["notes"] = serde_json::to_value(&res.notes).expect("json");
        write_json(p, opts_json, serde_json::Value::Array(res.rows()))?;
    }
    Ok(())
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn default_out_dir() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from("results").join(secs.to_string())
}

fn host() -> Result<Host, CliError> {
    std::env::current_exe()
        .map(Host::Process)
        .map_err(|e| CliError::Msg(format!("cannot find the juxta executable: {e}")))
}

/// The responders' host of a scenario: another machine with `--remote`
/// (checked against the options it cannot go with), else this one.
fn scenario_host(r: &RemoteArgs, net: &str, implementations: &str) -> Result<Host, CliError> {
    let Some(target) = &r.remote else {
        return host();
    };
    if net != "loopback" {
        return Err(CliError::Msg(
            "--remote measures the real network to the other host: drop --net".into(),
        ));
    }
    let impls = parse_impls(implementations)?;
    if impls != Impls::default() {
        return Err(CliError::Msg(
            "--remote measures juxta and the tcp baseline only: the other stacks and JXSE run on this machine (drop --impl)".into(),
        ));
    }
    use std::net::ToSocketAddrs;
    let addr = target
        .to_socket_addrs()
        .map_err(|e| CliError::Msg(format!("--remote {target}: {e}")))?
        .next()
        .ok_or_else(|| CliError::Msg(format!("--remote {target}: no address")))?;
    let identity = match &r.identity {
        Some(home) => {
            let read = |name: &str| {
                std::fs::read_to_string(home.join(name)).map_err(|e| {
                    CliError::Msg(format!("--identity: {}: {e}", home.join(name).display()))
                })
            };
            let id = juxta_proto::identity::Identity::from_pem(
                &read("identity.key")?,
                &read("identity.crt")?,
            )
            .map_err(|e| CliError::Msg(format!("--identity {}: {e}", home.display())))?;
            Some(std::sync::Arc::new(id))
        }
        None => None,
    };
    if identity.is_none() && r.token.is_none() {
        return Err(CliError::Msg(
            "--remote needs --token (printed by `juxta peer --bench`) or --identity".into(),
        ));
    }
    Ok(Host::Remote(juxta_bench::remote::RemoteHost {
        addr,
        token: r.token.clone(),
        identity,
    }))
}

/// The remote host's address and machine facts, for the JSON (`None`
/// when the scenario runs on this machine).
fn remote_facts(host: &Host) -> Result<Option<serde_json::Value>, CliError> {
    let Some(r) = host.remote() else {
        return Ok(None);
    };
    let facts = current_thread()
        .block_on(r.machine())
        .map_err(juxta_bench::BenchError::from)?;
    Ok(Some(serde_json::json!({
        "addr": r.addr.to_string(),
        "machine": facts,
    })))
}

fn prepare_json(p: &std::path::Path) -> Result<(), CliError> {
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::Msg(format!(
                "cannot create output directory {}: {e}",
                dir.display()
            ))
        })?;
    }
    Ok(())
}

/// `juxta sim`: the row to --json (or stdout).
fn run_sim(a: sim::SimArgs) -> Result<(), CliError> {
    let (opts, row) = sim::run(&a)?;
    let rows = serde_json::Value::Array(vec![row]);
    match &a.json {
        Some(p) => write_json(p, opts, rows),
        None => {
            let text = serde_json::to_string_pretty(&rows).expect("json");
            println!("{text}");
            Ok(())
        }
    }
}

/// Writes `{"command", "machine", "options", "results"}`.
fn write_json(
    p: &std::path::Path,
    opts: serde_json::Value,
    rows: serde_json::Value,
) -> Result<(), CliError> {
    write_json_remote(p, opts, rows, None)
}

/// [`write_json`] with `"remote": {"addr", "machine"}` when the
/// responders ran on another host.
fn write_json_remote(
    p: &std::path::Path,
    opts: serde_json::Value,
    rows: serde_json::Value,
    remote: Option<serde_json::Value>,
) -> Result<(), CliError> {
    let mut doc = serde_json::json!({
        "command": redacted_command(),
        "machine": juxta_bench::machine::facts(),
        "options": opts,
        "results": rows,
    });
    if let Some(r) = remote {
        doc["remote"] = r;
    }
    std::fs::write(p, serde_json::to_string_pretty(&doc).expect("json"))
        .map_err(|e| CliError::Msg(format!("cannot write {}: {e}", p.display())))?;
    eprintln!("wrote {}", p.display());
    Ok(())
}

/// The command line, a `--token` value replaced by `<token>`.
fn redacted_command() -> String {
    let mut out = Vec::new();
    let mut hide = false;
    for a in std::env::args() {
        if hide {
            out.push("<token>".to_string());
            hide = false;
        } else if a == "--token" {
            hide = true;
            out.push(a);
        } else if a.starts_with("--token=") {
            out.push("--token=<token>".into());
        } else {
            out.push(a);
        }
    }
    out.join(" ")
}

/// Runs a scenario future on a current-thread runtime, logging progress
/// lines with the elapsed time on stderr.
fn drive<T, F>(f: impl FnOnce(Box<dyn FnMut(&str)>) -> F) -> Result<T, CliError>
where
    F: std::future::Future<Output = Result<T, juxta_bench::BenchError>>,
{
    let started = std::time::Instant::now();
    let progress: Box<dyn FnMut(&str)> =
        Box::new(move |line: &str| eprintln!("[{:>6.1}s] {line}", started.elapsed().as_secs_f64()));
    Ok(current_thread().block_on(f(progress))?)
}

fn run_suite(args: SuiteArgs) -> Result<ExitCode, CliError> {
    use juxta_bench::suite::{self, Scenario, SuiteOptions};
    let out = args.out.unwrap_or_else(default_out_dir);
    let mut opts = SuiteOptions::quick(out);
    opts.full = args.full;
    if let Some(s) = &args.scenarios {
        opts.scenarios = Scenario::parse_list(s)?;
    }
    if let Some(l) = &args.layers {
        opts.layers = Some(juxta_bench::util::parse_list(l, Layer::parse)?);
    }
    opts.pin = Pin::parse(&args.pin)?;
    opts.key_bits = args.key_bits;
    let impls = parse_impls(&args.implementations)?;
    opts.jxse = impls.jxse;
    opts.udp = impls.udp;
    opts.zmq = impls.zmq;
    opts.libp2p = impls.libp2p;
    opts.mpi = impls.mpi;
    opts.net =
        juxta_bench::net::Profile::parse(&args.net).map_err(juxta_bench::BenchError::from)?;
    if opts.jxse {
        // Before anything runs: say what to install.
        juxta_bench::jxse::preflight().map_err(juxta_bench::BenchError::from)?;
    }
    let host = host()?;
    pin_current(opts.pin.client_core());
    let mut progress = suite::auto_progress();
    let outcome = current_thread().block_on(suite::run(&host, &opts, progress.as_mut()))?;
    drop(progress);
    eprintln!(
        "{} rows in {:.0} s; wrote:",
        outcome.rows,
        outcome.elapsed.as_secs_f64()
    );
    for f in &outcome.files {
        eprintln!("  {}", f.display());
    }
    if outcome.errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "{} step(s) failed (recorded in results.json):",
            outcome.errors.len()
        );
        for e in &outcome.errors {
            eprintln!("  {}: {}", e.step, e.message);
        }
        Ok(ExitCode::FAILURE)
    }
}

/// The JXSE layers to run beside Juxta for `--impl` (None: Juxta only);
/// checks Java and the harness before anything runs.
fn jxse_side(
    implementations: &str,
    net: &str,
    layers: &[Layer],
) -> Result<Option<Vec<Layer>>, CliError> {
    if !parse_impls(implementations)?.jxse {
        return Ok(None);
    }
    if net != "loopback" {
        return Err(CliError::Msg(
            "--impl jxse runs on loopback only (the JXSE harness does not enter network namespaces); drop --net or --impl jxse".into(),
        ));
    }
    let layers: Vec<Layer> = juxta_bench::jxse::JXSE_LAYERS
        .iter()
        .copied()
        .filter(|l| layers.contains(l))
        .collect();
    if layers.is_empty() {
        return Err(CliError::Msg(
            "--impl jxse measures the endpoint, unicast-pipe and socket layers: add one of them to --layers".into(),
        ));
    }
    juxta_bench::jxse::preflight().map_err(juxta_bench::BenchError::from)?;
    Ok(Some(layers))
}

/// The topology of a `--net` profile (empty for loopback).
fn net_topology(name: &str) -> Result<juxta_bench::net::Topology, CliError> {
    let t = juxta_bench::net::Profile::parse(name)
        .and_then(juxta_bench::net::Topology::create)
        .map_err(juxta_bench::BenchError::from)?;
    if !t.namespaces().is_empty() {
        eprintln!(
            "network profile {}: namespaces {}",
            t.profile(),
            t.namespaces().join(", ")
        );
    }
    Ok(t)
}

fn run_compare(a: PathBuf, b: PathBuf, html: Option<PathBuf>) -> Result<(), CliError> {
    use juxta_bench::compare;
    let left = compare::load(&a).map_err(juxta_bench::BenchError::from)?;
    let right = compare::load(&b).map_err(juxta_bench::BenchError::from)?;
    let c = compare::compare(&left, &right);
    let mut out = std::io::stdout().lock();
    c.print_table(&mut out)
        .map_err(|e| CliError::Msg(format!("writing the table: {e}")))?;
    let html = html.unwrap_or_else(|| {
        if b.is_dir() {
            b.join("compare.html")
        } else {
            b.with_file_name("compare.html")
        }
    });
    compare::write_html(&c, &html).map_err(juxta_bench::BenchError::from)?;
    eprintln!("wrote {}", html.display());
    Ok(())
}

fn run_pingpong(args: PingPongArgs) -> Result<(), CliError> {
    let mut layers: Vec<Layer> = layers::parse_layers(&args.layers, "pingpong", &pingpong::LAYERS)?
        .into_iter()
        .filter(|l| *l != Layer::Tcp)
        .collect();
    let impls = parse_impls(&args.implementations)?;
    for (on, l) in [
        (impls.udp, Layer::Udp),
        (impls.zmq, Layer::ZmqReqRep),
        (impls.libp2p, Layer::Libp2p),
        (impls.libp2p, Layer::Libp2pQuic),
        (impls.mpi, Layer::MpiTcp),
        (impls.mpi, Layer::MpiSm),
    ] {
        if on && !layers.contains(&l) {
            layers.push(l);
        }
    }
    let opts = PingPongOptions {
        layers,
        sizes: parse_sizes(&args.sizes)?,
        receivers: parse_counts(&args.receivers, "receivers")?,
        pin: Pin::parse(&args.pin)?,
        warmup: args.warmup,
        runs: args.runs.max(1),
        pairs: args.pairs.max(1),
        key_bits: args.key_bits,
        net: Default::default(),
    };
    let json_path = args.json.clone();
    // Removed (namespaces and all) when this function returns.
    let topology = net_topology(&args.net)?;
    let opts = PingPongOptions {
        net: topology.net(),
        ..opts
    };
    if let Some(p) = &json_path {
        prepare_json(p)?;
    }
    let host = scenario_host(&args.remote, &args.net, &args.implementations)?;
    let remote = remote_facts(&host)?;
    let jxse = jxse_side(&args.implementations, &args.net, &opts.layers)?;
    let mut rows = drive(|progress| pingpong::run(&host, &opts, progress))?;
    if let Some(layers) = jxse {
        // JXSE as shipped (CBJX on), then with CBJX off: each beside its
        // own tcp lane, with Juxta's warm-up, runs and pairs.
        for cbjx in [true, false] {
            let j = juxta_bench::jxse::JxseOptions {
                layers: layers.clone(),
                sizes: opts.sizes.clone(),
                pin: opts.pin,
                warmup: opts.warmup,
                runs: opts.runs,
                pairs: opts.pairs,
                cbjx,
                ..Default::default()
            };
            let host = &host;
            let run = drive(|mut progress| async move {
                Ok(juxta_bench::jxse::run_pingpong(host, &j, &mut progress).await)
            })?;
            rows.extend(run.rows);
            if let Some(e) = run.error {
                eprintln!("juxta: the JXSE side stopped early: {e}");
                break;
            }
        }
    }
    println!(
        "{:<11} {:<22} {:>4} {:>9} {:>12} {:>11} {:>12} {:>10} {:>10} {:>9} {:>8}",
        "impl",
        "layer",
        "rcv",
        "size",
        "rtt_med_us",
        "rtt_p99_us",
        "bw_MB_s",
        "wire_B",
        "wire_rtt_B",
        "rtt/tcp",
        "bw/tcp"
    );
    for r in &rows {
        println!(
            "{:<11} {:<22} {:>4} {:>9} {:>12.1} {:>11.1} {:>12.1} {:>10} {:>10} {:>9.2} {:>8.2}",
            r.implementation,
            r.layer,
            r.receivers.map(|n| n.to_string()).unwrap_or_default(),
            r.size,
            r.rtt_us_median,
            r.rtt_us_p99,
            r.bandwidth_mb_s,
            r.wire_bytes,
            r.wire_bytes_rtt,
            r.rtt_ratio_vs_tcp,
            r.bandwidth_ratio_vs_tcp
        );
    }
    if let Some(p) = json_path {
        write_json_remote(
            &p,
            serde_json::to_value(&opts).expect("json"),
            serde_json::to_value(&rows).expect("json"),
            remote,
        )?;
    }
    Ok(())
}

/// The other stacks `--impl` asks the throughput scenario for (ZeroMQ,
/// rust-libp2p, Open MPI TCP and shared memory; `udp` has pingpong rows
/// only: one-way datagrams with no flow control measure the loss of an
/// overrun receiver, not a rate).
fn throughput_stacks(implementations: &str, net: &str) -> Result<Vec<Stack>, CliError> {
    let impls = parse_impls(implementations)?;
    let mut stacks = Vec::new();
    if impls.zmq {
        stacks.push(Stack::Zmq);
    }
    if impls.libp2p {
        stacks.extend([Stack::Libp2p, Stack::Libp2pQuic]);
    }
    if impls.mpi {
        stacks.extend([Stack::MpiTcp, Stack::MpiSm]);
    }
    if !stacks.is_empty() && net != "loopback" {
        return Err(CliError::Msg(
            "the other stacks (--impl zmq/libp2p/mpi) run on loopback only: drop --net".into(),
        ));
    }
    Ok(stacks)
}

fn run_throughput(args: ThroughputArgs) -> Result<(), CliError> {
    let layers = layers::checked_unique(
        &juxta_bench::util::parse_list(&args.layers, Layer::parse)?,
        "throughput",
        &throughput::LAYERS,
    )?;
    let mut patterns = juxta_bench::util::parse_list(&args.patterns, Pattern::parse)?;
    let rates = match &args.rate {
        Some(r) => juxta_bench::util::parse_list(r, |x| {
            x.trim().parse::<f64>().map_err(|_| {
                juxta_bench::BenchError::BadOption(format!(
                    "--rate {x:?}: not a number of messages per second"
                ))
            })
        })?,
        None => Vec::new(),
    };
    if !rates.is_empty() && !patterns.contains(&Pattern::Paced) {
        patterns.push(Pattern::Paced);
    }
    if layers.is_empty() || patterns.is_empty() {
        return Err(CliError::Msg("no layer or no pattern to measure".into()));
    }
    if args.receivers == 0 || args.receivers > 64 {
        return Err(CliError::Msg(format!(
            "--receivers {}: between 1 and 64",
            args.receivers
        )));
    }
    let opts = ThroughputOptions {
        rates,
        receivers: args.receivers,
        layers,
        sizes: parse_sizes(&args.sizes)?,
        patterns,
        duration_ms: args.duration_ms,
        count: args.count.filter(|&c| c > 0),
        bursts: args.bursts.max(1),
        burst_len: args.burst_len.max(1),
        idle_ms: args.idle_ms,
        warmup: args.warmup,
        pin: Pin::parse(&args.pin)?,
        key_bits: args.key_bits,
        net: Default::default(),
        stacks: throughput_stacks(&args.implementations, &args.net)?,
    };
    if let Some(p) = &args.json {
        prepare_json(p)?;
    }
    // Removed (namespaces and all) when this function returns.
    let topology = net_topology(&args.net)?;
    let opts = ThroughputOptions {
        net: topology.net(),
        ..opts
    };
    let host = scenario_host(&args.remote, &args.net, &args.implementations)?;
    let remote = remote_facts(&host)?;
    let jxse = jxse_side(&args.implementations, &args.net, &opts.layers)?;
    let mut rows = drive(|progress| throughput::run(&host, &opts, progress))?;
    if let Some(layers) = jxse {
        let j = juxta_bench::jxse::JxseOptions {
            layers,
            sizes: opts.sizes.clone(),
            pin: opts.pin,
            throughput_duration_ms: opts.duration_ms.max(500),
            ..Default::default()
        };
        let run = drive(|mut progress| async move {
            Ok(juxta_bench::jxse::run_throughput(&j, &mut progress).await)
        })?;
        rows.extend(run.rows);
        if let Some(e) = run.error {
            eprintln!("juxta: the JXSE side stopped early: {e}");
        }
    }
    println!(
        "{:<7} {:<16} {:>9} {:>8} {:>10} {:>12} {:>12} {:>8}",
        "impl", "layer", "size", "pattern", "offered", "msgs_per_s", "bw_MB_s", "loss_%"
    );
    for r in &rows {
        println!(
            "{:<7} {:<16} {:>9} {:>8} {:>10} {:>12.0} {:>12.1} {:>8.2}",
            r.implementation,
            r.layer,
            r.size,
            r.pattern.name(),
            r.offered_msgs_per_s
                .map_or_else(|| "-".to_string(), |o| format!("{o:.0}")),
            r.msgs_per_s,
            r.bandwidth_mb_s,
            r.loss_pct
        );
    }
    if let Some(p) = &args.json {
        write_json_remote(
            p,
            serde_json::to_value(&opts).expect("json"),
            serde_json::to_value(&rows).expect("json"),
            remote,
        )?;
    }
    Ok(())
}

fn run_composition(args: CompositionArgs) -> Result<(), CliError> {
    let layers: Vec<Layer> =
        layers::parse_layers(&args.layers, "composition", &composition::LAYERS)?
            .into_iter()
            .filter(|l| *l != Layer::Tcp)
            .collect();
    let opts = CompositionOptions {
        layers,
        compositions: composition::parse_compositions(&args.compositions)?,
        pin: Pin::parse(&args.pin)?,
        warmup: args.warmup,
        runs: args.runs.max(1),
        pairs: args.pairs.max(1),
        key_bits: args.key_bits,
        net: Default::default(),
    };
    if let Some(p) = &args.json {
        prepare_json(p)?;
    }
    let host = host()?;
    let rows = drive(|progress| composition::run(&host, &opts, progress))?;
    println!(
        "{:<16} {:>8} {:>12} {:>12} {:>8}",
        "layer", "elements", "element_B", "rtt_med_us", "rtt/tcp"
    );
    for r in &rows {
        let tcp = rows
            .iter()
            .find(|t| {
                t.layer == "tcp" && t.elements == r.elements && t.element_size == r.element_size
            })
            .map(|t| t.rtt_us_median)
            .unwrap_or(0.0);
        println!(
            "{:<16} {:>8} {:>12} {:>12.1} {:>8.2}",
            r.layer,
            r.elements,
            r.element_size,
            r.rtt_us_median,
            if tcp > 0.0 {
                r.rtt_us_median / tcp
            } else {
                0.0
            }
        );
    }
    if let Some(p) = &args.json {
        write_json(
            p,
            serde_json::to_value(&opts).expect("json"),
            serde_json::to_value(&rows).expect("json"),
        )?;
    }
    Ok(())
}

/// A table cell: the value with `p` decimals, `-` when not measured.
fn cell(v: Option<f64>, p: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.p$}"))
}

fn run_buffers(args: BuffersArgs) -> Result<(), CliError> {
    use juxta_bench::buffers::{self, BuffersOptions};
    let opts = BuffersOptions {
        windows: buffers::parse_windows(&args.windows)?,
        sizes: parse_sizes(&args.sizes)?,
        pin: Pin::parse(&args.pin)?,
        warmup: args.warmup,
        runs: args.runs.max(1),
        pairs: args.pairs.max(1),
        stream_ms: args.stream_ms,
        key_bits: args.key_bits,
        net: Default::default(),
    };
    if let Some(p) = &args.json {
        prepare_json(p)?;
    }
    // Removed (namespaces and all) when this function returns.
    let topology = net_topology(&args.net)?;
    let opts = BuffersOptions {
        net: topology.net(),
        ..opts
    };
    let host = host()?;
    let rows = drive(|progress| buffers::run(&host, &opts, progress))?;
    println!(
        "{:<7} {:<8} {:>9} {:>12} {:>10} {:>8} {:>11} {:>8}",
        "layer", "window", "size", "rtt_med_us", "pp_MB_s", "pp/tcp", "stream_MB_s", "st/tcp"
    );
    for r in &rows {
        println!(
            "{:<7} {:<8} {:>9} {:>12.1} {:>10.1} {:>8.2} {:>11} {:>8}",
            r.layer,
            r.window_label,
            r.size,
            r.rtt_us_median,
            r.bandwidth_mb_s,
            r.bandwidth_ratio_vs_tcp,
            cell(r.stream_mb_s, 1),
            cell(r.stream_ratio_vs_tcp, 2)
        );
    }
    if let Some(p) = &args.json {
        write_json(
            p,
            serde_json::to_value(&opts).expect("json"),
            serde_json::to_value(&rows).expect("json"),
        )?;
    }
    Ok(())
}

fn run_ops(args: OpsArgs) -> Result<(), CliError> {
    let configs = juxta_bench::util::parse_list(&args.configs, |c| {
        juxta_bench::ops::parse_config(c).map(str::to_string)
    })?;
    let profile =
        juxta_bench::net::Profile::parse(&args.net).map_err(juxta_bench::BenchError::from)?;
    // A configuration that cannot sit across the link is refused before
    // any namespace exists.
    if profile != juxta_bench::net::Profile::Loopback {
        if let Some(c) = configs
            .iter()
            .find(|c| !juxta_bench::ops::NET_CONFIGS.contains(&c.as_str()))
        {
            return Err(juxta_bench::BenchError::NetUnsupported {
                profile: profile.name().into(),
                scenario: format!("ops --configs {c}"),
                reason: format!(
                    "its group members all run on one side of the link (under a profile: --configs {})",
                    juxta_bench::ops::NET_CONFIGS.join(",")
                ),
            }
            .into());
        }
    }
    // Removed (namespaces and all) when this function returns.
    let topology = net_topology(&args.net)?;
    let opts = juxta_bench::ops::OpsOptions {
        runs: args.runs.max(1),
        key_bits: args.key_bits,
        configs,
        net: topology.net(),
        ..Default::default()
    };
    if let Some(p) = &args.json {
        prepare_json(p)?;
    }
    let cache = match &args.cache_sizes {
        Some(c) => {
            let c = juxta_bench::cache_scale::CacheScaleOptions {
                sizes: juxta_bench::util::parse_list(c, juxta_bench::util::parse_size)?
                    .into_iter()
                    .map(|n| n as u64)
                    .collect(),
                key_bits: args.key_bits,
                ..Default::default()
            };
            c.validate()?;
            Some(c)
        }
        None => None,
    };
    let report =
        drive(|progress| async move { juxta_bench::ops::run_report(&opts, progress).await })?;
    let cache_rows = match &cache {
        Some(c) => {
            drive(|progress| async move { juxta_bench::cache_scale::run(c, progress).await })?
        }
        None => Vec::new(),
    };
    for r in &cache_rows {
        println!(
            "cache {:>9} advertisements: start {:>8.2} ms median, first query {:.3} ms",
            r.cache_entries, r.start_ms_median, r.first_query_ms_median
        );
    }
    let rows = report.rows;
    println!(
        "{:<18} {:<10} {:>10} {:>10}",
        "operation", "config", "ms_median", "ms_p99"
    );
    for r in &rows {
        println!(
            "{:<18} {:<10} {:>10.3} {:>10.3}",
            r.operation, r.config, r.ms_median, r.ms_p99
        );
    }
    for f in &report.failures {
        eprintln!(
            "not measured: {} in {}: {}",
            f.operation, f.config, f.reason
        );
    }
    if let Some(p) = &args.json {
        let mut all: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| serde_json::to_value(r).unwrap_or_default())
            .collect();
        all.extend(
            cache_rows
                .iter()
                .map(|r| serde_json::to_value(r).unwrap_or_default()),
        );
        let doc = results_doc(serde_json::Value::Array(all));
        std::fs::write(p, serde_json::to_string_pretty(&doc).expect("json"))
            .map_err(|e| CliError::Msg(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}

fn run_senders(args: SendersArgs) -> Result<(), CliError> {
    let layers = layers::checked_unique(
        &juxta_bench::util::parse_list(&args.layers, Layer::parse)?,
        "senders",
        &senders::LAYERS,
    )?;
    let modes = juxta_bench::util::parse_list(&args.modes, senders::Mode::parse)?;
    if layers.is_empty() || modes.is_empty() {
        return Err(CliError::Msg("no layer or no mode to measure".into()));
    }
    let opts = SendersOptions {
        layers,
        modes,
        senders: parse_counts(&args.senders, "senders")?,
        sizes: parse_sizes(&args.sizes)?,
        duration_ms: args.duration_ms.max(1),
        warmup: args.warmup,
        pin: Pin::parse(&args.pin)?,
        key_bits: args.key_bits,
        net: Default::default(),
    };
    if let Some(p) = &args.json {
        prepare_json(p)?;
    }
    let host = host()?;
    let rows = drive(|progress| senders::run(&host, &opts, progress))?;
    println!(
        "{:<16} {:<8} {:>8} {:>9} {:>12} {:>10} {:>12} {:>8}",
        "layer", "mode", "senders", "size", "msgs_per_s", "bw_MB_s", "rtt_med_us", "loss_%"
    );
    for r in &rows {
        println!(
            "{:<16} {:<8} {:>8} {:>9} {:>12.0} {:>10.1} {:>12} {:>8}",
            r.layer,
            r.mode.name(),
            r.senders,
            r.size,
            r.msgs_per_s,
            r.bandwidth_mb_s,
            cell(r.rtt_us_median, 1),
            cell(r.loss_pct, 2)
        );
    }
    if let Some(p) = &args.json {
        write_json(
            p,
            serde_json::to_value(&opts).expect("json"),
            serde_json::to_value(&rows).expect("json"),
        )?;
    }
    Ok(())
}

fn run_rdv_serve_in_ns(a: RdvServeArgs) -> Result<(), CliError> {
    if let Some(ns) = &a.netns {
        // Before the runtime: its threads inherit the namespace.
        juxta_bench::net::enter_for_good(ns).map_err(juxta_bench::BenchError::from)?;
    }
    multi_thread().block_on(run_rdv_serve(a))
}

async fn run_rdv_serve(a: RdvServeArgs) -> Result<(), CliError> {
    let opts = juxta_bench::rendezvous::ServeOptions {
        listen: a.listen,
        home: a.home,
        model: a.model,
        max_clients: a.max_clients,
        rate_limit: a.rate_limit,
        key_bits: a.key_bits,
        peers: a.peers,
        max_entries: a.max_entries,
        group_credential: a.group_credential,
        max_connections: a.max_connections,
        max_per_addr: a.max_per_addr,
        max_pending_per_addr: a.max_pending_per_addr,
        lease_ms: a.lease_ms,
        central: match a.central {
            Some(c) => Some(
                c.parse()
                    .map_err(|e| CliError::Msg(format!("--central {c}: {e}")))?,
            ),
            None => None,
        },
    };
    juxta_bench::rendezvous::serve(opts, |addr, peer| println!("READY {addr} {peer}"))
        .await
        .map_err(CliError::from)
}

/// `{"command", "machine", "results"}`: every results file says what
/// produced it (the command, the commit and the machine).
fn results_doc(rows: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "command": redacted_command(),
        "machine": juxta_bench::machine::facts(),
        "results": rows,
    })
}

fn write_rows(json: Option<PathBuf>, rows: serde_json::Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(&results_doc(rows))
        .map_err(|e| CliError::Msg(format!("encoding results: {e}")))?;
    match json {
        Some(p) => std::fs::write(&p, text)
            .map_err(|e| CliError::Msg(format!("writing {}: {e}", p.display()))),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

fn run_rendezvous(a: RendezvousArgs) -> Result<(), CliError> {
    use juxta_bench::rendezvous::{AdvType, GroupScope, QueryKind, RendezvousOptions};
    let models: Vec<String> = a
        .model
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for m in &models {
        juxta_bench::rendezvous::parse_model(m)?;
    }
    let rates = parse_counts(&a.rate, "rate")?
        .into_iter()
        .map(|r| u32::try_from(r).unwrap_or(u32::MAX))
        .collect();
    let mut opts = RendezvousOptions {
        models,
        edges: parse_counts(&a.edges, "edges")?,
        rendezvous: parse_counts(&a.rendezvous, "rendezvous")?,
        rates,
        duration: std::time::Duration::from_millis(a.duration_ms.max(100)),
        positive_pct: a.positive_pct,
        query_space: a.query_space,
        query_kind: QueryKind::parse(&a.query_kind)?,
        threshold: a.threshold,
        adv_type: AdvType::parse(&a.adv_type)?,
        rdv_cache: a.rdv_cache,
        timeout: std::time::Duration::from_millis(a.timeout_ms),
        ..Default::default()
    };
    // Each group asked for is a run of its own (same parameters), in order.
    let groups: Vec<GroupScope> = a
        .group
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(GroupScope::parse)
        .collect::<Result<_, _>>()?;
    if groups.is_empty() {
        return Err(juxta_bench::BenchError::BadOption(
            "--group: none given (net, subgroup)".into(),
        )
        .into());
    }
    if a.full {
        let f = RendezvousOptions::full();
        opts.models = f.models;
        opts.edges = f.edges;
        opts.rendezvous = f.rendezvous;
        opts.rates = f.rates;
        opts.duration = f.duration;
        opts.timeout = f.timeout;
    }
    let mut runs: Vec<RendezvousOptions> = groups
        .iter()
        .map(|&group| RendezvousOptions {
            group,
            ..opts.clone()
        })
        .collect();
    // Refused before anything starts, naming the option.
    for o in &runs {
        o.validate()?;
    }
    let estimate: std::time::Duration = runs.iter().map(|o| o.estimate()).sum();
    eprintln!(
        "rendezvous: at most about {:.0} min",
        estimate.as_secs_f64() / 60.0
    );
    // Removed (namespaces and all) when this function returns.
    let topology = net_topology(&a.net)?;
    if !topology.namespaces().is_empty() {
        for o in &mut runs {
            o.net = topology.net();
        }
    }
    let rows = if topology.namespaces().is_empty() {
        multi_thread().block_on(async {
            let mut rows = Vec::new();
            for o in &runs {
                rows.extend(juxta_bench::rendezvous::run(o, |l| eprintln!("{l}")).await?);
            }
            Ok::<_, juxta_bench::BenchError>(rows)
        })?
    } else {
        // The edges' sockets are made in the client namespace: one thread.
        drive(|mut progress| async move {
            let mut rows = Vec::new();
            for o in &runs {
                rows.extend(juxta_bench::rendezvous::run(o, &mut progress).await?);
            }
            Ok(rows)
        })?
    };
    write_rows(a.json, serde_json::json!(rows))
}

fn run_leases(a: LeasesArgs) -> Result<(), CliError> {
    use std::time::Duration;
    let opts = juxta_bench::leases::LeasesOptions {
        edges: a.edges,
        per_addr: a.per_addr,
        in_flight: a.in_flight,
        hold: Duration::from_millis(a.hold_ms),
        heartbeat_ms: a.heartbeat_ms,
        response_timeout_ms: a.response_timeout_ms,
        lease_ms: a.lease_ms,
        key_bits: a.key_bits,
        identities: a.identities,
        setup_timeout: Duration::from_millis(a.setup_timeout_ms.max(1)),
        probe_interval: Duration::from_millis(a.probe_interval_ms),
        query_rates: a.query_rate,
        query_duration: Duration::from_millis(a.query_ms),
        positive_pct: a.positive_pct,
        names_per_edge: a.names_per_edge,
        query_timeout: Duration::from_millis(a.query_timeout_ms),
        query_baseline: !a.no_query_baseline,
        ..Default::default()
    };
    opts.validate()?;
    let row = multi_thread().block_on(juxta_bench::leases::run(&opts, |l| eprintln!("{l}")))?;
    write_rows(a.json, serde_json::json!([row]))
}

fn run_recovery(a: RecoveryArgs) -> Result<(), CliError> {
    let profile =
        juxta_bench::net::Profile::parse(&a.net).map_err(juxta_bench::BenchError::from)?;
    if let Some(s) = a.kill_every {
        if profile != juxta_bench::net::Profile::Loopback {
            return Err(juxta_bench::BenchError::NetUnsupported {
                profile: profile.name().into(),
                scenario: "recovery --kill-every".into(),
                reason: "its edges are worker processes that do not enter network namespaces (drop --kill-every to measure single kills across the link)".into(),
            }
            .into());
        }
        if !s.is_finite() || s <= 0.0 {
            return Err(CliError::Msg(format!(
                "--kill-every {s} (seconds, more than 0)"
            )));
        }
        let opts = juxta_bench::recovery::SuccessiveOptions {
            rendezvous: a.rendezvous,
            edges: a.edges,
            kill_every: std::time::Duration::from_secs_f64(s.min(3600.0)),
            topology: juxta_bench::recovery::Topology::parse(&a.topology)?,
            ..Default::default()
        };
        opts.validate()?;
        let out = multi_thread().block_on(juxta_bench::recovery::run_successive(&opts, |l| {
            eprintln!("{l}")
        }))?;
        return write_rows(a.json, serde_json::json!(out.rows()));
    }
    let opts = juxta_bench::recovery::RecoveryOptions {
        edges: a.edges,
        repeats: a.repeats,
        ..Default::default()
    };
    // Removed (namespaces and all) when this function returns.
    let topology = net_topology(&a.net)?;
    let rows = if topology.namespaces().is_empty() {
        multi_thread().block_on(juxta_bench::recovery::run(&opts, |l| eprintln!("{l}")))?
    } else {
        // The edges' sockets are made in the client namespace: one thread.
        let opts = juxta_bench::recovery::RecoveryOptions {
            net: topology.net(),
            ..opts
        };
        drive(|progress| async move { juxta_bench::recovery::run(&opts, progress).await })?
    };
    write_rows(
        a.json,
        serde_json::json!(juxta_bench::recovery::rows_with_summary(&rows)),
    )
}

/// Ends this process when its stdin reaches end of file: the parent holds
/// the pipe's write end (never writing to it), so this process ends with
/// the parent however the parent ends.
fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        // Nothing is ever written: read returns 0 (end of file) or fails
        // once the parent is gone.
        let mut buf = [0u8; 64];
        while let Ok(n) = std::io::Read::read(&mut std::io::stdin(), &mut buf) {
            if n == 0 {
                break;
            }
        }
        std::process::exit(0);
    });
}

fn run_relay_serve_in_ns(a: RelayServeArgs) -> Result<(), CliError> {
    if a.exit_with_parent {
        exit_when_stdin_closes();
    }
    pin_current(a.core);
    if let Some(ns) = &a.netns {
        // Before the runtime: its threads inherit the namespace.
        juxta_bench::net::enter_for_good(ns).map_err(juxta_bench::BenchError::from)?;
    }
    multi_thread().block_on(run_relay_serve(a))
}

async fn run_relay_serve(a: RelayServeArgs) -> Result<(), CliError> {
    juxta_bench::relay::serve_with(
        a.listen,
        a.http_listen,
        a.peer,
        a.home,
        a.key_bits,
        a.rendezvous,
        |addr, peer, http| match http {
            Some(h) => println!("READY {addr} {peer} {h}"),
            None => println!("READY {addr} {peer}"),
        },
    )
    .await
    .map_err(CliError::from)
}

/// A comma-separated list of positive numbers.
fn parse_f64s(s: &str, what: &str) -> Result<Vec<f64>, CliError> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(CliError::Msg(format!(
                "{what}: {p:?} is not a positive number"
            ))),
        })
        .collect()
}

fn run_relay(a: RelayArgs) -> Result<(), CliError> {
    use juxta_bench::relay::{CurveOptions, OverloadOptions, RelayOptions, RelayPath};
    let parsed = juxta_bench::util::parse_list(&a.layers, Layer::parse)?;
    let layers = layers::checked_unique(&parsed, "relay", &juxta_bench::relay::LAYERS)?;
    let opts = RelayOptions {
        paths: RelayPath::parse_list(&a.paths)?,
        layers,
        sizes: parse_sizes(&a.sizes)?,
        pairs: a.pairs.max(1),
        stream: std::time::Duration::from_millis(a.stream_ms.max(10)),
        transfer: juxta_bench::util::parse_size(&a.transfer)? as u64,
        overload: (a.overload_secs > 0).then(|| OverloadOptions {
            duration: std::time::Duration::from_secs(a.overload_secs),
            sink_msgs_per_s: a.sink_rate.max(1),
            ..OverloadOptions::default()
        }),
        curve: if a.curve_point_secs > 0 {
            Some(CurveOptions {
                factors: parse_f64s(&a.curve_factors, "--curve-factors")?,
                rates: match &a.rates {
                    Some(r) => parse_f64s(r, "--rates")?,
                    None => Vec::new(),
                },
                point: std::time::Duration::from_secs(a.curve_point_secs),
                ..CurveOptions::default()
            })
        } else {
            None
        },
        key_bits: a.key_bits,
        ..RelayOptions::default()
    };
    opts.validate()?;
    // Pinned before any runtime thread or relay process exists: both
    // inherit this process's CPU mask.
    match Pin::parse(&a.pin)? {
        Pin::Same => juxta_bench::util::pin_process(std::process::id(), Some(0)),
        Pin::None => {}
        Pin::Split => {
            return Err(juxta_bench::BenchError::BadOption(
                "--pin split (bench relay takes same or none)".into(),
            )
            .into())
        }
    }
    // Removed (namespaces and all) when this function returns.
    let topology = net_topology(&a.net)?;
    let rows = if topology.namespaces().is_empty() {
        multi_thread().block_on(juxta_bench::relay::run(&opts, |l| eprintln!("{l}")))?
    } else {
        // The edges' sockets are made in the client namespace: one thread.
        let opts = RelayOptions {
            net: topology.net(),
            ..opts
        };
        drive(|progress| async move { juxta_bench::relay::run(&opts, progress).await })?
    };
    write_rows(a.json, serde_json::json!(rows))
}

fn stamped_out_dir(prefix: &str) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from("results").join(format!("{prefix}-{secs}"))
}

fn print_files(files: &[PathBuf]) {
    eprintln!("wrote:");
    for f in files {
        eprintln!("  {}", f.display());
    }
}

fn run_soak(a: SoakArgs) -> Result<(), CliError> {
    let secs = a.seconds.unwrap_or(a.minutes * 60.0);
    if !(secs.is_finite() && secs > 0.0) {
        return Err(CliError::Msg(format!(
            "--minutes/--seconds must be positive (got {secs} s)"
        )));
    }
    let opts = juxta_bench::soak::SoakOptions {
        duration: std::time::Duration::from_secs_f64(secs),
        stream_rate_bytes_per_s: a.stream_rate.max(1),
        churn_lifetime: std::time::Duration::from_secs(a.churn_secs.max(1)),
        key_bits: a.key_bits,
        ..Default::default()
    };
    let out = a.out.unwrap_or_else(|| stamped_out_dir("soak"));
    let outcome = multi_thread().block_on(juxta_bench::soak::run(&opts, |l| eprintln!("{l}")))?;
    let options = serde_json::json!({
        "duration_s": secs,
        "sample_every_s": opts.sample_every.as_secs_f64(),
        "churn_lifetime_s": opts.churn_lifetime.as_secs_f64(),
        "stream_rate_bytes_per_s": opts.stream_rate_bytes_per_s,
        "segment_bytes": opts.segment_bytes,
        "ping_every_ms": opts.ping_every_ms,
        "lookup_every_ms": opts.lookup_every_ms,
        "key_bits": opts.key_bits,
    });
    let doc = juxta_bench::soak::document(options, outcome.rows());
    print_files(&juxta_bench::soak::write_outputs(&out, &doc)?);
    Ok(())
}

fn run_chaos(a: ChaosArgs) -> Result<(), CliError> {
    let opts = juxta_bench::chaos::ChaosOptions {
        rendezvous: a.rendezvous.max(1),
        lookup_edges: a.lookup_edges,
        rounds: a.rounds,
        relay_kills: a.relay_kills,
        edge_kills: a.edge_kills,
        key_bits: a.key_bits,
        ..Default::default()
    };
    let out = a.out.unwrap_or_else(|| stamped_out_dir("chaos"));
    let outcome = multi_thread().block_on(juxta_bench::chaos::run(&opts, |l| eprintln!("{l}")))?;
    let options = serde_json::json!({
        "rendezvous": opts.rendezvous,
        "lookup_edges": opts.lookup_edges,
        "rounds": opts.rounds,
        "relay_kills": opts.relay_kills,
        "edge_kills": opts.edge_kills,
        "settle_s": opts.settle.as_secs_f64(),
        "recovery_limit_s": opts.recovery_limit.as_secs_f64(),
        "stream_rate_bytes_per_s": opts.stream_rate_bytes_per_s,
        "segment_bytes": opts.segment_bytes,
        "ping_every_ms": opts.ping_every_ms,
        "lookup_every_ms": opts.lookup_every_ms,
        "key_bits": opts.key_bits,
    });
    let doc = juxta_bench::soak::document(options, outcome.rows());
    print_files(&juxta_bench::soak::write_outputs(&out, &doc)?);
    Ok(())
}
