//! The default run: every scenario of the JXTA Performance Model in one
//! command (`juxta bench` with no arguments).
//!
//! Why it exists: the studies' value was their tables and figures; ours
//! must come from one reproducible command. The suite plans the run as a
//! list of small *steps* (one layer of one scenario each, every step with
//! its own plain-TCP lane interleaved, so the baseline is rerun between
//! layers and its spread is the run's noise), runs them in order with a
//! progress display, rewrites `results.json` after every step (a failure or
//! an interrupt loses at most the step in flight), and at the end writes the
//! CSV files and `report.html`.
//!
//! A step that fails is recorded in `errors` with what to do, and the run
//! goes on with the next step.
//!
//! ```no_run
//! # async fn demo() -> Result<(), juxta_bench::BenchError> {
//! use juxta_bench::layers::Host;
//! use juxta_bench::suite::{self, LogProgress, SuiteOptions};
//! let opts = SuiteOptions::quick("results/demo".into());
//! let host = Host::Process(std::env::current_exe().unwrap());
//! let outcome = suite::run(&host, &opts, &mut LogProgress::new()).await?;
//! println!("{} rows, {} errors", outcome.rows, outcome.errors.len());
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::buffers::BuffersOptions;
use crate::composition::{self, CompositionOptions};
use crate::jxse::{self, JxseOptions, JXSE_LAYERS};
use crate::layers::{Host, Layer};
use crate::net::{Net, Profile, Topology};
use crate::ops::{self, OpsOptions};
use crate::pingpong::{self, PingPongOptions, PingPongRow};
use crate::recovery::{self, RecoveryOptions, SuccessiveOptions};
use crate::relay::{self, CurveOptions, OverloadOptions, RelayOptions};
use crate::rendezvous::{self, RendezvousOptions};
use crate::senders::{self, Mode as SendMode, SendersOptions};
use crate::throughput::{self, Pattern, ThroughputOptions};
use crate::util::Pin;
use crate::BenchError;

/// A scenario of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Message/ack ping-pong per layer and size (and propagate fan-out).
    Pingpong,
    /// One-way messages/s, smooth and bursty, with loss.
    Throughput,
    /// One 20 KB message split into 1..20 elements.
    Composition,
    /// 1..n senders into one input pipe.
    Senders,
    /// JuxTest's socket buffer sweep: the socket's stream window bounded
    /// at 16 KB .. automatic, against tcp ([`crate::buffers`]).
    Buffers,
    /// The typical peer operations (start, groups, discovery, pipes).
    Ops,
    /// Rendezvous query load: response time and loss against rate and
    /// group size.
    Rendezvous,
    /// Time for every edge to answer again after its rendezvous is killed.
    Recovery,
    /// RTT and bandwidth directly vs through relays, and a relay overload.
    Relay,
    /// de Souza's message passing: the ranks' ping-pong (tcp, the
    /// communicator, Open MPI when installed), the matrix multiplication
    /// and an allreduce ([`crate::mp`]).
    Mp,
}

/// Scenarios of the model that are not built yet, with where they will
/// come from.
pub const NOT_YET: [(&str, &str); 0] = [];

impl Scenario {
    /// Every scenario that exists, in run order.
    pub const ALL: [Scenario; 10] = [
        Scenario::Pingpong,
        Scenario::Throughput,
        Scenario::Composition,
        Scenario::Senders,
        Scenario::Buffers,
        Scenario::Ops,
        Scenario::Rendezvous,
        Scenario::Recovery,
        Scenario::Relay,
        Scenario::Mp,
    ];

    /// The scenario's name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Pingpong => "pingpong",
            Scenario::Throughput => "throughput",
            Scenario::Composition => "composition",
            Scenario::Senders => "senders",
            Scenario::Buffers => "buffers",
            Scenario::Ops => "ops",
            Scenario::Rendezvous => "rendezvous",
            Scenario::Recovery => "recovery",
            Scenario::Relay => "relay",
            Scenario::Mp => "mp",
        }
    }

    /// Parses a name; unknown names and scenarios not built yet get an
    /// error that says which names exist.
    pub fn parse(s: &str) -> Result<Scenario, BenchError> {
        if let Some(sc) = Scenario::ALL.iter().find(|sc| sc.name() == s) {
            return Ok(*sc);
        }
        let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
        match NOT_YET.iter().find(|(n, _)| *n == s) {
            Some((n, why)) => Err(BenchError::BadOption(format!(
                "scenario {n:?} is not implemented yet ({why}); available: {}",
                known.join(", ")
            ))),
            None => Err(BenchError::BadOption(format!(
                "unknown scenario {s:?} (available: {})",
                known.join(", ")
            ))),
        }
    }

    /// Parses a comma-separated list, without duplicates, in run order.
    pub fn parse_list(s: &str) -> Result<Vec<Scenario>, BenchError> {
        let mut asked = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            asked.push(Scenario::parse(part)?);
        }
        if asked.is_empty() {
            return Err(BenchError::BadOption("--scenarios is empty".into()));
        }
        Ok(Scenario::ALL
            .iter()
            .copied()
            .filter(|s| asked.contains(s))
            .collect())
    }
}

/// What the default run measures.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteOptions {
    /// Scenarios, in run order.
    pub scenarios: Vec<Scenario>,
    /// The complete sweeps (the studies' sizes and repetitions) instead of
    /// the short default budget.
    pub full: bool,
    /// Restrict every scenario to these layers (`None`: each scenario's
    /// own list).
    pub layers: Option<Vec<Layer>>,
    /// CPU placement of the client and responder processes.
    pub pin: Pin,
    /// RSA key size of the bench peers.
    pub key_bits: usize,
    /// Also run the original JXSE 2.7 (two harness JVMs) on the endpoint,
    /// unicast pipe and socket layers of pingpong and throughput.
    pub jxse: bool,
    /// Also run plain UDP datagrams in the pingpong (payloads up to 64 KB),
    /// as de Souza measured.
    pub udp: bool,
    /// Also run ZeroMQ (libzmq REQ/REP) in the pingpong.
    pub zmq: bool,
    /// Also run rust-libp2p (TCP + noise + yamux) in the pingpong.
    pub libp2p: bool,
    /// Also run Open MPI (TCP and shared memory) in the pingpong.
    pub mpi: bool,
    /// Network profile: loopback, or namespaces joined by a rate-limited,
    /// delayed link (`lan`, `san`, `wan`; needs root).
    pub net: Profile,
    /// Output directory.
    pub out: PathBuf,
}

impl SuiteOptions {
    /// The default run: every scenario, short budget, into `out`.
    pub fn quick(out: PathBuf) -> SuiteOptions {
        SuiteOptions {
            scenarios: Scenario::ALL.to_vec(),
            full: false,
            layers: None,
            pin: Pin::Same,
            key_bits: 1024,
            jxse: false,
            udp: false,
            zmq: false,
            libp2p: false,
            mpi: false,
            net: Profile::Loopback,
            out,
        }
    }
}

/// One unit of work: one scenario over one or a few layers.
#[derive(Debug, Clone)]
pub enum Step {
    /// Ping-pong of one layer (tcp interleaved).
    Pingpong(PingPongOptions),
    /// Throughput of one layer.
    Throughput(ThroughputOptions),
    /// Composition of the given layers (tcp interleaved).
    Composition(CompositionOptions),
    /// Senders of one layer.
    Senders(SendersOptions),
    /// The socket buffer sweep.
    Buffers(BuffersOptions),
    /// The typical peer operations.
    Ops(OpsOptions),
    /// Rendezvous load.
    Rendezvous(RendezvousOptions),
    /// Rendezvous failure recovery.
    Recovery(RecoveryOptions),
    /// Recovery as the thesis ran it: successive kills down to one
    /// rendezvous (`--full`, loopback only: every peer is a process).
    RecoverySuccessive(SuccessiveOptions),
    /// Relay paths and the relay overload.
    Relay(RelayOptions),
    /// Message passing (ranks, matmul, allreduce).
    Mp(crate::mp::MpOptions),
    /// Ping-pong of JXSE 2.7 (read against the tcp rows gathered so far).
    JxsePingpong(JxseOptions),
    /// Throughput of JXSE 2.7.
    JxseThroughput(JxseOptions),
}

impl Step {
    /// The scenario of the step.
    pub fn scenario(&self) -> Scenario {
        match self {
            Step::Pingpong(_) => Scenario::Pingpong,
            Step::Throughput(_) => Scenario::Throughput,
            Step::Composition(_) => Scenario::Composition,
            Step::Senders(_) => Scenario::Senders,
            Step::Buffers(_) => Scenario::Buffers,
            Step::Ops(_) => Scenario::Ops,
            Step::Rendezvous(_) => Scenario::Rendezvous,
            Step::Recovery(_) | Step::RecoverySuccessive(_) => Scenario::Recovery,
            Step::Relay(_) => Scenario::Relay,
            Step::Mp(_) => Scenario::Mp,
            Step::JxsePingpong(_) => Scenario::Pingpong,
            Step::JxseThroughput(_) => Scenario::Throughput,
        }
    }

    /// A short label: `pingpong unicast-pipe`.
    pub fn label(&self) -> String {
        let layers = |ls: &[Layer]| ls.iter().map(|l| l.name()).collect::<Vec<_>>().join(",");
        let what = match self {
            Step::Pingpong(o) => layers(&o.layers),
            Step::Throughput(o) => layers(&o.layers),
            Step::Composition(o) => layers(&o.layers),
            Step::Senders(o) => layers(&o.layers),
            Step::Buffers(o) => format!(
                "socket windows {}",
                o.windows
                    .iter()
                    .map(|w| crate::buffers::window_label(*w))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Step::Ops(_) => "ad hoc and through a rendezvous".into(),
            Step::Rendezvous(o) => format!(
                "models {} x edges {:?} x rendezvous {:?} x rates {:?}",
                o.models.join(","),
                o.edges,
                o.rendezvous,
                o.rates
            ),
            Step::Recovery(o) => format!("{} edges, {} kills", o.edges, o.repeats),
            Step::RecoverySuccessive(o) => format!(
                "as the thesis: {} rendezvous killed down to one every {} s, {} edges, {}",
                o.rendezvous,
                o.kill_every.as_secs_f64(),
                o.edges,
                o.topology.name()
            ),
            Step::Relay(o) => format!(
                "{} x {} x sizes {:?}, overload {} s",
                o.paths
                    .iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(","),
                layers(&o.layers),
                o.sizes,
                o.overload.as_ref().map_or(0, |x| x.duration.as_secs())
            ),
            Step::JxsePingpong(o) | Step::JxseThroughput(o) => {
                format!("JXSE 2.7 {}", layers(&o.layers))
            }
            Step::Mp(o) => format!(
                "ping-pong {} sizes, matmul n={}, allreduce {} ranks",
                o.sizes.len(),
                o.matmul_n,
                o.allreduce_ranks
            ),
        };
        format!("{} {what}", self.scenario().name())
    }
}

/// The layers a scenario measures by default, tcp excluded (it is always
/// measured).
fn default_layers(s: Scenario) -> Vec<Layer> {
    match s {
        Scenario::Pingpong => vec![
            Layer::Endpoint,
            Layer::EndpointCompat,
            Layer::UnicastPipe,
            Layer::SecurePipe,
            Layer::BidiPipe,
            Layer::Socket,
            Layer::SocketChunk,
            Layer::Propagate,
            // What one relay adds to a pipe (its own process, as the
            // responder is).
            Layer::RelayedPipe,
        ],
        Scenario::Throughput => vec![
            Layer::Endpoint,
            Layer::EndpointCompat,
            Layer::UnicastPipe,
            Layer::SecurePipe,
            Layer::BidiPipe,
            Layer::Socket,
        ],
        Scenario::Composition => vec![Layer::Endpoint, Layer::UnicastPipe],
        Scenario::Senders => vec![Layer::UnicastPipe],
        // Secure, bidi and propagate pipes through relays under --full.
        Scenario::Relay => relay::DEFAULT_LAYERS.to_vec(),
        Scenario::Ops
        | Scenario::Rendezvous
        | Scenario::Recovery
        | Scenario::Mp
        | Scenario::Buffers => vec![],
    }
}

fn allowed(s: Scenario) -> &'static [Layer] {
    match s {
        Scenario::Pingpong => &pingpong::LAYERS,
        Scenario::Throughput => &throughput::LAYERS,
        Scenario::Composition => &composition::LAYERS,
        Scenario::Senders => &senders::LAYERS,
        // The socket, always (its window is the parameter).
        Scenario::Buffers => &[],
        Scenario::Relay => &relay::LAYERS,
        Scenario::Ops | Scenario::Rendezvous | Scenario::Recovery => &[],
        // The pipe, socket and UDP rows of the study come from the
        // pingpong scenario in a suite run.
        Scenario::Mp => &[],
    }
}

/// `--full` ping-pong: sizes up to this take the thesis' 10,000 samples.
const FULL_SAMPLES_UP_TO: usize = 1 << 20;

/// `--full` throughput: offered rates of the paced sweep (messages/s).
const FULL_RATES: [f64; 5] = [10.0, 100.0, 1_000.0, 10_000.0, 100_000.0];

/// Plans the steps of a run.
// The option structs grow fields (network profiles, implementations): the
// `..Default::default()` keeps the plan valid when they do.
#[allow(clippy::needless_update)]
pub fn plan(opts: &SuiteOptions) -> Vec<Step> {
    let mut steps = Vec::new();
    for &sc in &opts.scenarios {
        let layers: Vec<Layer> = match &opts.layers {
            Some(ls) => ls
                .iter()
                .copied()
                .filter(|l| *l != Layer::Tcp && allowed(sc).contains(l))
                .collect(),
            None => default_layers(sc),
        };
        match sc {
            Scenario::Pingpong => {
                let sizes: Vec<usize> = if opts.full {
                    // Powers of 4 from 1 B to 4 MiB, and the thesis' 10 MB
                    // (10 MiB here).
                    (0..12)
                        .map(|i| 1usize << (2 * i))
                        .chain([10 << 20])
                        .collect()
                } else {
                    vec![1, 1024, 16384, 65536, 262_144, 1 << 20, 4 << 20]
                };
                let mut layers = layers;
                for (on, l) in [
                    (opts.udp, Layer::Udp),
                    (opts.zmq, Layer::ZmqReqRep),
                    (opts.libp2p, Layer::Libp2p),
                    (opts.libp2p, Layer::Libp2pQuic),
                    (opts.mpi, Layer::MpiTcp),
                    (opts.mpi, Layer::MpiSm),
                ] {
                    if on && !layers.contains(&l) {
                        layers.push(l);
                    }
                }
                if opts.jxse {
                    // Juxta in JXTA framing beside JXSE, with and without
                    // CBJX: the like-for-like rows.
                    for l in [
                        Layer::EndpointCompat,
                        Layer::PipeCompat,
                        Layer::SocketCompat,
                        Layer::EndpointCompatNoCbjx,
                        Layer::PipeCompatNoCbjx,
                        Layer::SocketCompatNoCbjx,
                    ] {
                        if !layers.contains(&l) {
                            layers.push(l);
                        }
                    }
                    if let Some(j) = jxse_options(opts, &layers) {
                        // JXSE first: its JVMs start while nothing else
                        // runs. As shipped (CBJX on), then with CBJX off,
                        // each beside its own tcp lane.
                        steps.push(Step::JxsePingpong(JxseOptions {
                            cbjx: false,
                            ..j.clone()
                        }));
                        steps.push(Step::JxsePingpong(j));
                    }
                }
                for l in layers {
                    let sizes: Vec<usize> = if l == Layer::Propagate {
                        vec![1, 65536]
                    } else {
                        sizes.iter().copied().filter(|s| l.carries(*s)).collect()
                    };
                    let step = |sizes: Vec<usize>, runs: usize, pairs: usize| {
                        Step::Pingpong(PingPongOptions {
                            layers: vec![l],
                            sizes,
                            receivers: if opts.full {
                                vec![1, 2, 4, 8, 16]
                            } else {
                                vec![1, 2, 4, 8]
                            },
                            pin: opts.pin,
                            warmup: if opts.full { 1000 } else { 500 },
                            runs,
                            pairs,
                            key_bits: opts.key_bits,
                            ..PingPongOptions::default()
                        })
                    };
                    if opts.full {
                        // The thesis' sample count: 10,000 timed pairs
                        // after 1,000 warm-up, up to 1 MiB; above, 500
                        // (a 10,000-pair run of 10 MiB messages would move
                        // 200 GB).
                        let (small, large): (Vec<usize>, Vec<usize>) =
                            sizes.into_iter().partition(|&s| s <= FULL_SAMPLES_UP_TO);
                        if !small.is_empty() {
                            steps.push(step(small, 10, 1000));
                        }
                        if !large.is_empty() {
                            steps.push(step(large, 5, 100));
                        }
                    } else {
                        steps.push(step(sizes, 5, 100));
                    }
                }
            }
            Scenario::Throughput => {
                let mut layers = layers;
                if opts.full && opts.layers.is_none() {
                    // Propagate throughput (one sender, one receiver).
                    layers.push(Layer::Propagate);
                }
                let base = ThroughputOptions {
                    sizes: if opts.full {
                        vec![
                            1,
                            64,
                            1024,
                            16384,
                            65536,
                            262_144,
                            1 << 20,
                            4 << 20,
                            10 << 20,
                        ]
                    } else {
                        vec![1, 1024, 65536, 1 << 20]
                    },
                    patterns: vec![Pattern::Smooth, Pattern::Bursty],
                    duration_ms: if opts.full { 2000 } else { 400 },
                    count: None,
                    bursts: 3,
                    burst_len: 50,
                    idle_ms: if opts.full { 500 } else { 200 },
                    warmup: if opts.full { 2000 } else { 1000 },
                    pin: opts.pin,
                    key_bits: opts.key_bits,
                    ..ThroughputOptions::default()
                };
                // tcp first: the bound the other layers are read against.
                for &l in std::iter::once(&Layer::Tcp).chain(&layers) {
                    steps.push(Step::Throughput(ThroughputOptions {
                        layers: vec![l],
                        ..base.clone()
                    }));
                }
                if opts.full {
                    // The thesis' send-rate sweep: 1 KB messages at set
                    // offered rates.
                    for &l in std::iter::once(&Layer::Tcp).chain(&layers) {
                        steps.push(Step::Throughput(ThroughputOptions {
                            layers: vec![l],
                            sizes: vec![1024],
                            patterns: vec![Pattern::Paced],
                            rates: FULL_RATES.to_vec(),
                            ..base.clone()
                        }));
                    }
                }
                // The other stacks asked for (smooth rows of their own).
                let mut stacks = Vec::new();
                if opts.zmq {
                    stacks.push(crate::stacks::Stack::Zmq);
                }
                if opts.libp2p {
                    stacks.extend([
                        crate::stacks::Stack::Libp2p,
                        crate::stacks::Stack::Libp2pQuic,
                    ]);
                }
                if opts.mpi {
                    stacks.extend([crate::stacks::Stack::MpiTcp, crate::stacks::Stack::MpiSm]);
                }
                if !stacks.is_empty() {
                    steps.push(Step::Throughput(ThroughputOptions {
                        layers: Vec::new(),
                        patterns: vec![Pattern::Smooth],
                        stacks,
                        ..base.clone()
                    }));
                }
                if opts.jxse {
                    if let Some(j) = jxse_options(opts, &layers) {
                        steps.push(Step::JxseThroughput(j));
                    }
                }
            }
            Scenario::Composition => {
                let layers = if opts.full && opts.layers.is_none() {
                    // Every message layer.
                    composition::LAYERS
                        .iter()
                        .copied()
                        .filter(|l| *l != Layer::Tcp)
                        .collect()
                } else {
                    layers
                };
                if !layers.is_empty() {
                    steps.push(Step::Composition(CompositionOptions {
                        layers,
                        compositions: vec![(1, 20480), (5, 4096), (10, 2048), (20, 1024)],
                        pin: opts.pin,
                        warmup: if opts.full { 1000 } else { 500 },
                        runs: 5,
                        pairs: 100,
                        key_bits: opts.key_bits,
                        ..CompositionOptions::default()
                    }));
                }
            }
            Scenario::Buffers => steps.push(Step::Buffers(if opts.full {
                BuffersOptions {
                    pin: opts.pin,
                    key_bits: opts.key_bits,
                    ..BuffersOptions::default()
                }
            } else {
                // Short: two sizes, a few pairs, 300 ms streams (~15 s).
                BuffersOptions {
                    sizes: vec![65536, 1 << 20],
                    warmup: 20,
                    runs: 3,
                    pairs: 10,
                    stream_ms: 300,
                    pin: opts.pin,
                    key_bits: opts.key_bits,
                    ..BuffersOptions::default()
                }
            })),
            Scenario::Ops => steps.push(Step::Ops(OpsOptions {
                runs: if opts.full { 100 } else { 20 },
                // The thesis' HTTP rendezvous too under --full.
                configs: if opts.full {
                    vec![
                        "ad-hoc".into(),
                        "rendezvous".into(),
                        "http-rendezvous".into(),
                    ]
                } else {
                    OpsOptions::default().configs
                },
                // Start-up vs cache size (Fig. 6.1): to 1,000,000 under
                // --full (minutes to fill), to 10,000 by default.
                cache_sizes: if opts.full {
                    crate::cache_scale::CacheScaleOptions::full().sizes
                } else {
                    crate::cache_scale::CacheScaleOptions::default().sizes
                },
                key_bits: opts.key_bits,
                ..OpsOptions::default()
            })),
            Scenario::Rendezvous => {
                // The thesis' sweep under --full (discovery queries).
                let base = if opts.full {
                    RendezvousOptions::full()
                } else {
                    RendezvousOptions::default()
                };
                steps.push(Step::Rendezvous(RendezvousOptions {
                    key_bits: opts.key_bits,
                    ..base
                }));
            }
            Scenario::Relay => {
                let layers = if opts.full && opts.layers.is_none() {
                    relay::LAYERS.to_vec()
                } else {
                    layers
                };
                if !layers.is_empty() {
                    steps.push(Step::Relay(RelayOptions {
                        layers,
                        sizes: if opts.full {
                            vec![1, 1024, 16384, 65536, 262_144, 1 << 20]
                        } else {
                            vec![1, 65536]
                        },
                        warmup: if opts.full { 200 } else { 50 },
                        pairs: if opts.full { 500 } else { 100 },
                        stream: Duration::from_millis(if opts.full { 2000 } else { 300 }),
                        overload: Some(OverloadOptions {
                            duration: Duration::from_secs(if opts.full { 60 } else { 5 }),
                            ..OverloadOptions::default()
                        }),
                        // The offered vs received curve: three short
                        // points by default, the sweep under --full.
                        curve: Some(if opts.full {
                            CurveOptions::default()
                        } else {
                            CurveOptions {
                                factors: vec![0.5, 2.0, 8.0],
                                point: Duration::from_secs(2),
                                calibrate: Duration::from_secs(2),
                                ..CurveOptions::default()
                            }
                        }),
                        key_bits: opts.key_bits,
                        ..RelayOptions::default()
                    }));
                }
            }
            Scenario::Mp => steps.push(Step::Mp(if opts.full {
                crate::mp::MpOptions {
                    matmul_n: 3000,
                    jxse: opts.jxse,
                    ..crate::mp::MpOptions::default()
                }
            } else {
                // A short budget: a size of each of the study's classes
                // (small, medium, large), a matmul of about a second and
                // the allreduce; Juxta's layers are in pingpong already.
                crate::mp::MpOptions {
                    sizes: vec![2, 200, 100_000, 600_000, 1_000_000],
                    warmup: 50,
                    runs: 3,
                    pairs: 50,
                    matmul_n: 1200,
                    c_o0: false,
                    layers: Vec::new(),
                    ..crate::mp::MpOptions::default()
                }
            })),
            Scenario::Recovery => {
                steps.push(Step::Recovery(RecoveryOptions {
                    edges: if opts.full { 64 } else { 16 },
                    repeats: if opts.full { 10 } else { 3 },
                    key_bits: opts.key_bits,
                    ..RecoveryOptions::default()
                }));
                // The thesis' procedure (16 edges, 4 rendezvous, one killed
                // per interval down to one, both seeding topologies), with
                // 10 s intervals where the thesis waited 10 minutes. Its
                // edges are processes of their own, which the network
                // profiles do not place: loopback runs only (the report
                // says how to run it otherwise).
                if opts.full && opts.net == Profile::Loopback {
                    for topology in [recovery::Topology::Ring, recovery::Topology::Star] {
                        steps.push(Step::RecoverySuccessive(SuccessiveOptions {
                            topology,
                            key_bits: opts.key_bits,
                            ..SuccessiveOptions::default()
                        }));
                    }
                }
            }
            Scenario::Senders => {
                let mut layers = layers;
                if opts.full && opts.layers.is_none() {
                    layers.push(Layer::Socket);
                }
                for l in std::iter::once(Layer::Tcp).chain(layers) {
                    steps.push(Step::Senders(SendersOptions {
                        layers: vec![l],
                        senders: vec![1, 2, 4, 8],
                        // --full: the thesis' many-to-one throughput too.
                        modes: if opts.full {
                            vec![SendMode::Pingpong, SendMode::Oneway]
                        } else {
                            vec![SendMode::Pingpong]
                        },
                        sizes: if opts.full { vec![1, 65536] } else { vec![1] },
                        duration_ms: if opts.full { 2000 } else { 500 },
                        warmup: if opts.full { 200 } else { 100 },
                        pin: opts.pin,
                        key_bits: opts.key_bits,
                        ..SendersOptions::default()
                    }));
                }
            }
        }
    }
    if opts.net != Profile::Loopback {
        steps.iter_mut().for_each(|s| shrink_for_link(s, opts.net));
    }
    steps
}

/// Over an emulated link a 1 MB ping-pong takes 90 ms (lan) instead of
/// 0.2 ms: fewer pairs and no 4 MB messages keep the run within budget;
/// throughput runs longer, so TCP leaves slow start.
fn shrink_for_link(step: &mut Step, profile: Profile) {
    // cable and modem56k carry at most a few Mb/s.
    let slow = profile.rate_bps().is_some_and(|r| r < 10_000_000);
    match step {
        Step::Pingpong(o) => {
            o.sizes.retain(|&s| s <= 1 << 20);
            o.warmup = o.warmup.min(10);
            o.pairs = o.pairs.min(10);
        }
        Step::Throughput(o) => {
            o.sizes.retain(|&s| s <= 1 << 20);
            o.duration_ms = o.duration_ms.max(1000);
            o.warmup = o.warmup.min(100);
            // 3 bursts of 50 x 1 MB take 12 s at 100 Mb/s.
            o.bursts = o.bursts.min(2);
            o.burst_len = o.burst_len.min(10);
        }
        Step::Composition(o) => {
            o.warmup = o.warmup.min(10);
            o.pairs = o.pairs.min(10);
        }
        Step::Senders(o) => o.warmup = o.warmup.min(20),
        Step::Buffers(o) => {
            // A 16 KB window over a WAN moves ~1.4 MB/s: 1 MiB pings take
            // most of a second there.
            o.sizes.retain(|&s| s <= 1 << 20);
            o.warmup = o.warmup.min(5);
            o.runs = o.runs.min(2);
            o.pairs = o.pairs.min(5);
        }
        Step::Relay(o) => {
            // A 1 MiB ping over modem56k takes minutes.
            o.sizes.retain(|&s| s <= 65536);
            o.warmup = o.warmup.min(10);
            o.pairs = o.pairs.min(20);
            o.transfer = o.transfer.min(10_000_000);
            if slow {
                o.sizes.retain(|&s| s <= 1024);
                o.transfer = 0;
                o.stream = o.stream.min(Duration::from_millis(300));
            }
        }
        Step::Rendezvous(o) => {
            // Every query crosses the link: fewer rates, shorter.
            if slow {
                o.rates.retain(|&r| r <= 16);
                o.edges.retain(|&e| e <= 4);
            }
        }
        Step::Ops(o) => {
            // Every remote operation crosses the link: fewer repetitions
            // (a slow link's start-up and discovery take seconds each).
            o.runs = o.runs.min(if slow { 5 } else { 20 });
        }
        // Mp and JXSE run on loopback whatever the profile (their peers
        // are processes of their own).
        Step::Recovery(_)
        | Step::RecoverySuccessive(_)
        | Step::Mp(_)
        | Step::JxsePingpong(_)
        | Step::JxseThroughput(_) => {}
    }
}

/// The JXSE side of a scenario: the layers JXSE can run among `layers`.
fn jxse_options(opts: &SuiteOptions, layers: &[Layer]) -> Option<JxseOptions> {
    let layers: Vec<Layer> = JXSE_LAYERS
        .iter()
        .copied()
        .filter(|l| layers.contains(l))
        .collect();
    if layers.is_empty() {
        return None;
    }
    // The same warm-up as the Juxta pingpong steps (see `plan`).
    let mut j = JxseOptions {
        layers,
        pin: opts.pin,
        warmup: if opts.full { 1000 } else { 500 },
        ..JxseOptions::default()
    };
    if opts.full {
        j.sizes = vec![1, 1024, 16384, 65536, 262_144, 1 << 20];
        j.throughput_duration_ms = 3000;
    }
    Some(j)
}

/// The step, run across `net`.
fn with_net(step: Step, net: &Net) -> Step {
    match step {
        Step::Pingpong(o) => Step::Pingpong(PingPongOptions {
            net: net.clone(),
            ..o
        }),
        Step::Throughput(o) => Step::Throughput(ThroughputOptions {
            net: net.clone(),
            ..o
        }),
        Step::Composition(o) => Step::Composition(CompositionOptions {
            net: net.clone(),
            ..o
        }),
        Step::Senders(o) => Step::Senders(SendersOptions {
            net: net.clone(),
            ..o
        }),
        Step::Buffers(o) => Step::Buffers(BuffersOptions {
            net: net.clone(),
            ..o
        }),
        Step::Relay(o) => Step::Relay(RelayOptions {
            net: net.clone(),
            ..o
        }),
        Step::Rendezvous(o) => Step::Rendezvous(RendezvousOptions {
            net: net.clone(),
            ..o
        }),
        Step::Recovery(o) => Step::Recovery(RecoveryOptions {
            net: net.clone(),
            ..o
        }),
        // Its far-side peers run on a thread in the responder namespace.
        Step::Ops(o) => Step::Ops(OpsOptions {
            net: net.clone(),
            ..o
        }),
        other => other,
    }
}

/// A step that failed.
#[derive(Debug, Clone, Serialize)]
pub struct StepError {
    /// The scenario.
    pub scenario: &'static str,
    /// The step's label.
    pub step: String,
    /// What happened and what to do.
    pub message: String,
}

/// What a run produced.
#[derive(Debug)]
pub struct SuiteOutcome {
    /// The results document (as written to `results.json`).
    pub doc: Value,
    /// Number of result rows.
    pub rows: usize,
    /// Steps that failed.
    pub errors: Vec<StepError>,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

/// Receives the progress of a run.
pub trait SuiteProgress {
    /// A step starts (`index` counts from 0).
    fn step_started(&mut self, index: usize, total: usize, label: &str);
    /// A line of detail within the current step.
    fn detail(&mut self, line: &str);
    /// The step ended.
    fn step_finished(&mut self, index: usize, error: Option<&str>);
    /// The run ended.
    fn finished(&mut self) {}
}

/// Progress as plain log lines on stderr (when stderr is not a terminal).
pub struct LogProgress {
    started: Instant,
    total: usize,
}

impl LogProgress {
    /// A new logger.
    pub fn new() -> LogProgress {
        LogProgress {
            started: Instant::now(),
            total: 0,
        }
    }
}

impl Default for LogProgress {
    fn default() -> Self {
        LogProgress::new()
    }
}

impl SuiteProgress for LogProgress {
    fn step_started(&mut self, index: usize, total: usize, label: &str) {
        self.total = total;
        eprintln!(
            "[{:>6.1}s] step {}/{total}: {label}",
            self.started.elapsed().as_secs_f64(),
            index + 1
        );
    }
    fn detail(&mut self, line: &str) {
        eprintln!("[{:>6.1}s]   {line}", self.started.elapsed().as_secs_f64());
    }
    fn step_finished(&mut self, index: usize, error: Option<&str>) {
        if let Some(e) = error {
            eprintln!(
                "[{:>6.1}s] step {}/{} FAILED: {e}",
                self.started.elapsed().as_secs_f64(),
                index + 1,
                self.total
            );
        }
    }
}

/// Progress bars on a terminal: one bar for the steps of the run, one
/// spinner line for the current step's detail.
pub struct BarProgress {
    _multi: indicatif::MultiProgress,
    steps: indicatif::ProgressBar,
    detail: indicatif::ProgressBar,
}

impl BarProgress {
    /// Bars on stderr.
    pub fn new() -> BarProgress {
        let multi = indicatif::MultiProgress::new();
        let steps = multi.add(indicatif::ProgressBar::new(0));
        steps.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise:.dim} [{bar:30.cyan/blue}] {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        let detail = multi.add(indicatif::ProgressBar::new_spinner());
        detail.set_style(
            indicatif::ProgressStyle::with_template("  {spinner} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        detail.enable_steady_tick(Duration::from_millis(120));
        BarProgress {
            _multi: multi,
            steps,
            detail,
        }
    }
}

impl Default for BarProgress {
    fn default() -> Self {
        BarProgress::new()
    }
}

impl SuiteProgress for BarProgress {
    fn step_started(&mut self, index: usize, total: usize, label: &str) {
        self.steps.set_length(total as u64);
        self.steps.set_position(index as u64);
        self.steps.set_message(label.to_string());
    }
    fn detail(&mut self, line: &str) {
        self.detail.set_message(line.to_string());
    }
    fn step_finished(&mut self, index: usize, error: Option<&str>) {
        self.steps.set_position(index as u64 + 1);
        if let Some(e) = error {
            self.steps
                .println(format!("step {} failed: {e}", index + 1));
        }
    }
    fn finished(&mut self) {
        self.detail.finish_and_clear();
        self.steps.finish();
        // The bars leave the cursor at the end of their line.
        eprintln!();
    }
}

/// Bars when stderr is a terminal, log lines otherwise.
pub fn auto_progress() -> Box<dyn SuiteProgress> {
    if std::io::stderr().is_terminal() {
        Box::new(BarProgress::new())
    } else {
        Box::new(LogProgress::new())
    }
}

/// Checks that `dir` can be created and written, before anything runs.
pub fn check_out_dir(dir: &Path) -> Result<(), BenchError> {
    let advice = "choose a writable directory with --out DIR";
    std::fs::create_dir_all(dir).map_err(|e| {
        BenchError::BadOption(format!(
            "cannot create the output directory {}: {e}; {advice}",
            dir.display()
        ))
    })?;
    let probe = dir.join(".juxta-write-test");
    std::fs::write(&probe, b"ok").map_err(|e| {
        BenchError::BadOption(format!(
            "cannot write in the output directory {}: {e}; {advice}",
            dir.display()
        ))
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Everything gathered so far.
#[derive(Default)]
struct Gathered {
    pingpong_tcp: BTreeMap<usize, Vec<PingPongRow>>,
    rows: Vec<Value>,
    errors: Vec<StepError>,
}

impl Gathered {
    /// The tcp pingpong rows: per size the rerun with the median RTT; and
    /// the noise: how the reruns spread.
    fn tcp_and_noise(&self) -> (Vec<Value>, Value) {
        let mut rows = Vec::new();
        let mut per_size = Vec::new();
        let mut worst: f64 = 0.0;
        for (size, reruns) in &self.pingpong_tcp {
            let mut sorted: Vec<&PingPongRow> = reruns.iter().collect();
            sorted.sort_by(|a, b| a.rtt_us_median.total_cmp(&b.rtt_us_median));
            let mid = sorted[sorted.len() / 2];
            rows.push(serde_json::to_value(mid).unwrap_or(Value::Null));
            let lo = sorted[0].rtt_us_median;
            let hi = sorted[sorted.len() - 1].rtt_us_median;
            let spread = if mid.rtt_us_median > 0.0 {
                (hi - lo) / mid.rtt_us_median
            } else {
                0.0
            };
            let within: f64 = reruns.iter().map(|r| r.run_spread).fold(0.0, f64::max);
            worst = worst.max(spread).max(within);
            per_size.push(json!({
                "size": size,
                "reruns": reruns.len(),
                "rtt_us_medians": reruns.iter().map(|r| r.rtt_us_median).collect::<Vec<_>>(),
                "spread_between_reruns": spread,
                "spread_within_rerun_max": within,
            }));
        }
        let one_byte = self
            .pingpong_tcp
            .get(&1)
            .map(|r| r.iter().map(|r| r.rtt_us_median).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut spreads: Vec<f64> = per_size
            .iter()
            .filter_map(|p| p["spread_between_reruns"].as_f64())
            .collect();
        spreads.sort_by(f64::total_cmp);
        let typical = spreads.get(spreads.len() / 2).copied().unwrap_or(0.0);
        let noise = json!({
            "what": "the plain-TCP ping-pong is rerun beside every layer; spread = (max - min) / median of its per-rerun medians, per size; `spread` is the median over sizes, `spread_worst` the worst size or run",
            "baseline_rtt_us_1b": one_byte,
            "spread": typical,
            "spread_worst": worst,
            "per_size": per_size,
        });
        (rows, noise)
    }

    /// Per size, the tcp rerun with the median RTT.
    fn all_rows(&self) -> (Vec<Value>, Value) {
        let (mut tcp, noise) = self.tcp_and_noise();
        tcp.extend(self.rows.iter().cloned());
        (tcp, noise)
    }
}

fn to_values<T: Serialize>(rows: &[T]) -> Vec<Value> {
    rows.iter()
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect()
}

/// What to do after a failed step, by error kind.
fn advice(e: &BenchError) -> String {
    match e {
        BenchError::Responder { .. } => format!(
            "{e} (the peer process failed: rerun with RUST_LOG=debug to see its log, or leave this layer out with --layers)"
        ),
        BenchError::Io { .. } => format!("{e} (check the machine's limits: open files, free ports)"),
        _ => e.to_string(),
    }
}

async fn run_step(
    host: &Host,
    step: &Step,
    g: &mut Gathered,
    progress: &mut dyn SuiteProgress,
) -> Result<(), BenchError> {
    let mut detail = |line: &str| progress.detail(line);
    match step {
        Step::Pingpong(o) => {
            let rows = pingpong::run(host, o, &mut detail).await?;
            for r in rows {
                // The tcp baseline, by its impl: Open MPI's TCP rows have
                // layer "tcp" too and are rows of their own.
                if r.implementation == "tcp" {
                    g.pingpong_tcp.entry(r.size).or_default().push(r);
                } else {
                    g.rows.push(serde_json::to_value(&r).unwrap_or(Value::Null));
                }
            }
        }
        Step::Throughput(o) => {
            let rows = throughput::run(host, o, &mut detail).await?;
            g.rows.extend(to_values(&rows));
        }
        Step::Composition(o) => {
            let rows = composition::run(host, o, &mut detail).await?;
            g.rows.extend(to_values(&rows));
        }
        Step::Senders(o) => {
            let rows = senders::run(host, o, &mut detail).await?;
            g.rows.extend(to_values(&rows));
        }
        Step::Buffers(o) => {
            let rows = crate::buffers::run(host, o, &mut detail).await?;
            g.rows.extend(to_values(&rows));
        }
        Step::Ops(o) => {
            let rows = ops::run(o, &mut detail).await?;
            g.rows.extend(to_values(&rows));
            if !o.cache_sizes.is_empty() {
                let c = crate::cache_scale::CacheScaleOptions {
                    sizes: o.cache_sizes.clone(),
                    key_bits: o.key_bits,
                    ..Default::default()
                };
                g.rows
                    .extend(to_values(&crate::cache_scale::run(&c, &mut detail).await?));
            }
        }
        Step::Rendezvous(o) => {
            let o = RendezvousOptions {
                exe: exe_of(host, &o.exe),
                ..o.clone()
            };
            g.rows
                .extend(to_values(&rendezvous::run(&o, &mut detail).await?));
        }
        Step::Recovery(o) => {
            let o = RecoveryOptions {
                exe: exe_of(host, &o.exe),
                ..o.clone()
            };
            g.rows.extend(recovery::rows_with_summary(
                &recovery::run(&o, &mut detail).await?,
            ));
        }
        Step::RecoverySuccessive(o) => {
            let o = SuccessiveOptions {
                exe: exe_of(host, &o.exe),
                ..o.clone()
            };
            o.validate()?;
            g.rows
                .extend(recovery::run_successive(&o, &mut detail).await?.rows());
        }
        Step::Relay(o) => {
            let o = RelayOptions {
                exe: exe_of(host, &o.exe),
                ..o.clone()
            };
            g.rows
                .extend(to_values(&relay::run(&o, &mut detail).await?));
        }
        Step::Mp(o) => {
            let o = crate::mp::MpOptions {
                exe: match host {
                    Host::Process(exe) => Some(exe.clone()),
                    Host::Thread | Host::Remote(_) => o.exe.clone(),
                },
                ..o.clone()
            };
            let res = crate::mp::run(host, &o, &mut detail).await?;
            for n in &res.notes {
                detail(n);
            }
            g.rows.extend(res.rows());
        }
        Step::JxsePingpong(o) => {
            // Its own tcp lane, interleaved with the JXSE lanes: those
            // rows join the tcp reruns of the other pingpong steps.
            let run = jxse::run_pingpong(host, o, &mut detail).await;
            for r in run.rows.iter().cloned() {
                if r.implementation == "tcp" {
                    g.pingpong_tcp.entry(r.size).or_default().push(r);
                } else {
                    g.rows.push(serde_json::to_value(&r).unwrap_or(Value::Null));
                }
            }
            run.into_result()?;
        }
        Step::JxseThroughput(o) => {
            let run = jxse::run_throughput(o, &mut detail).await;
            g.rows.extend(to_values(&run.rows));
            run.into_result()?;
        }
    }
    Ok(())
}

/// The `juxta` binary a scenario re-runs for its rendezvous processes: the
/// host's, else the scenario's own default.
fn exe_of(host: &Host, default: &std::path::Path) -> PathBuf {
    match host {
        Host::Process(exe) => exe.clone(),
        Host::Thread | Host::Remote(_) => default.to_path_buf(),
    }
}

/// The machine facts with the tool versions of this run.
fn machine(jxse: bool) -> Value {
    let mut m = serde_json::to_value(crate::machine::facts()).unwrap_or_else(|_| json!({}));
    if let Some(obj) = m.as_object_mut() {
        if let Some(v) = crate::machine::tool_version("rustc", &["--version"]) {
            obj.insert("rustc".into(), Value::String(v));
        }
        if jxse {
            if let Some(v) = crate::machine::tool_version("java", &["-version"]) {
                obj.insert("java".into(), Value::String(v));
            }
        }
    }
    m
}

fn document(
    opts: &SuiteOptions,
    g: &Gathered,
    started_unix: u64,
    started: Instant,
    machine: &Value,
) -> (Value, usize) {
    let (rows, noise) = g.all_rows();
    let n = rows.len();
    let doc = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": machine,
        "net": opts.net.name(),
        "started_unix": started_unix,
        "duration_s": started.elapsed().as_secs_f64(),
        "noise": noise,
        "options": opts,
        "errors": g.errors,
        "results": rows,
    });
    (doc, n)
}

fn write_json(path: &Path, doc: &Value) -> Result<(), BenchError> {
    let text = serde_json::to_string_pretty(doc).unwrap_or_else(|_| "{}".into());
    // Write then rename: a reader (or a crash) never sees half a file.
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| BenchError::Io {
            what: format!("writing {}", path.display()),
            source: e,
        })
}

/// Runs every planned step, writing `results.json` after each, then the
/// CSV files and `report.html`. Fails only if nothing can be written; a
/// failing step is recorded in the outcome's `errors`.
pub async fn run(
    host: &Host,
    opts: &SuiteOptions,
    progress: &mut dyn SuiteProgress,
) -> Result<SuiteOutcome, BenchError> {
    run_plan(host, opts, plan(opts), progress).await
}

/// Runs the given steps (a plan of [`plan`], or a smaller one of a test)
/// the way [`run`] does.
pub async fn run_plan(
    host: &Host,
    opts: &SuiteOptions,
    steps: Vec<Step>,
    progress: &mut dyn SuiteProgress,
) -> Result<SuiteOutcome, BenchError> {
    check_out_dir(&opts.out)?;
    if opts.jxse && opts.net != Profile::Loopback {
        return Err(BenchError::BadOption(
            "JXSE runs on loopback only (its harness does not enter network namespaces): drop --net or --impl jxse".into(),
        ));
    }
    // Removed (namespaces and all) when the run returns.
    let topology = Topology::create(opts.net)?;
    let net = topology.net();
    let steps: Vec<Step> = steps.into_iter().map(|s| with_net(s, &net)).collect();
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let machine = machine(opts.jxse);
    let json_path = opts.out.join("results.json");
    let mut g = Gathered::default();
    for (i, step) in steps.iter().enumerate() {
        let label = step.label();
        progress.step_started(i, steps.len(), &label);
        let result = run_step(host, step, &mut g, progress).await;
        let interrupted = matches!(
            result,
            Err(BenchError::Net(crate::net::NetError::Interrupted))
        );
        let err = result.err().map(|e| advice(&e));
        progress.step_finished(i, err.as_deref());
        if let Some(message) = err {
            g.errors.push(StepError {
                scenario: step.scenario().name(),
                step: label,
                message,
            });
        }
        let (doc, _) = document(opts, &g, started_unix, started, &machine);
        write_json(&json_path, &doc)?;
        if interrupted {
            // Ctrl-C: keep what was gathered, run nothing more.
            break;
        }
    }
    let (doc, rows) = document(opts, &g, started_unix, started, &machine);
    write_json(&json_path, &doc)?;
    let mut files = vec![json_path];
    finish_files(&doc, &opts.out, &mut files, &mut g.errors);
    progress.finished();
    Ok(SuiteOutcome {
        doc,
        rows,
        errors: g.errors,
        files,
        elapsed: started.elapsed(),
    })
}

/// Writes the CSV files and the report of `doc` into `dir`; a failure is
/// recorded, not fatal (results.json is already written).
pub fn finish_files(
    doc: &Value,
    dir: &Path,
    files: &mut Vec<PathBuf>,
    errors: &mut Vec<StepError>,
) {
    match crate::csv_out::write_csvs(doc, dir) {
        Ok(mut f) => files.append(&mut f),
        Err(e) => errors.push(StepError {
            scenario: "report",
            step: "csv".into(),
            message: e.to_string(),
        }),
    }
    let html = dir.join("report.html");
    match crate::report::write_report(doc, &html) {
        Ok(_) => files.push(html),
        Err(e) => errors.push(StepError {
            scenario: "report",
            step: "report.html".into(),
            message: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_parse_and_unknown_ones_say_what_exists() {
        assert_eq!(Scenario::parse("pingpong").unwrap(), Scenario::Pingpong);
        let e = Scenario::parse("bogus").unwrap_err().to_string();
        assert!(
            e.contains("unknown scenario") && e.contains("pingpong"),
            "{e}"
        );
        assert_eq!(Scenario::parse("recovery").unwrap(), Scenario::Recovery);
        assert_eq!(Scenario::parse("relay").unwrap(), Scenario::Relay);
        assert!(Scenario::parse_list(" ,").is_err());
        assert_eq!(
            Scenario::parse_list("senders,pingpong,senders").unwrap(),
            vec![Scenario::Pingpong, Scenario::Senders]
        );
    }

    #[test]
    fn the_default_plan_covers_every_scenario_and_layer() {
        let steps = plan(&SuiteOptions::quick("x".into()));
        for sc in Scenario::ALL {
            assert!(steps.iter().any(|s| s.scenario() == sc), "{sc:?}");
        }
        for l in default_layers(Scenario::Pingpong) {
            assert!(steps
                .iter()
                .any(|s| matches!(s, Step::Pingpong(o) if o.layers == vec![l])));
        }
        // tcp throughput comes first: the bound.
        let first_tp = steps
            .iter()
            .find_map(|s| match s {
                Step::Throughput(o) => Some(o.layers.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(first_tp, vec![Layer::Tcp]);
    }

    #[test]
    fn the_full_plan_has_the_thesis_messaging_parameters() {
        let mut o = SuiteOptions::quick("x".into());
        o.full = true;
        let steps = plan(&o);
        // 10 MB messages and the thesis' 10,000 samples up to 1 MiB.
        assert!(steps.iter().any(|s| matches!(s,
            Step::Pingpong(p) if p.sizes.contains(&(10 << 20)) && p.runs * p.pairs == 500)));
        assert!(steps.iter().any(|s| matches!(s,
            Step::Pingpong(p) if p.sizes.contains(&1) && p.runs * p.pairs == 10_000
                && p.warmup == 1000)));
        // Set send rates, propagate throughput, 10 MB throughput.
        assert!(steps.iter().any(|s| matches!(s,
            Step::Throughput(t) if t.patterns == vec![Pattern::Paced] && t.rates.len() >= 3)));
        assert!(steps.iter().any(|s| matches!(s,
            Step::Throughput(t) if t.layers == vec![Layer::Propagate])));
        assert!(steps.iter().any(|s| matches!(s,
            Step::Throughput(t) if t.sizes.contains(&(10 << 20)))));
        // Composition on every message layer.
        assert!(steps.iter().any(|s| matches!(s,
            Step::Composition(c) if c.layers.len() == composition::LAYERS.len() - 1)));
        // Many-to-one one way, pipes and sockets.
        assert!(steps.iter().any(|s| matches!(s,
            Step::Senders(x) if x.modes.contains(&SendMode::Oneway)
                && x.layers == vec![Layer::Socket])));
        // Recovery as the thesis ran it, both topologies, on loopback;
        // a profile run leaves it out (its edges are processes of their own).
        let thesis = |steps: &[Step]| {
            steps
                .iter()
                .filter_map(|s| match s {
                    Step::RecoverySuccessive(r) => Some((r.topology, r.rendezvous, r.edges)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            thesis(&steps),
            vec![
                (recovery::Topology::Ring, 4, 16),
                (recovery::Topology::Star, 4, 16)
            ]
        );
        let mut wan = o.clone();
        wan.net = Profile::Wan;
        assert!(thesis(&plan(&wan)).is_empty());
        // The default run has none of it.
        let quick = plan(&SuiteOptions::quick("x".into()));
        assert!(thesis(&quick).is_empty());
        assert!(quick.iter().all(|s| !matches!(s,
            Step::Throughput(t) if t.patterns.contains(&Pattern::Paced))));
        assert!(quick.iter().all(|s| !matches!(s,
            Step::Senders(x) if x.modes.contains(&SendMode::Oneway))));
    }

    #[test]
    fn a_layer_filter_keeps_only_layers_a_scenario_measures() {
        let mut o = SuiteOptions::quick("x".into());
        o.layers = Some(vec![Layer::SocketCompat]);
        let steps = plan(&o);
        assert!(steps
            .iter()
            .all(|s| !matches!(s, Step::Throughput(o) if o.layers.contains(&Layer::SocketCompat))));
        assert!(steps
            .iter()
            .any(|s| matches!(s, Step::Pingpong(o) if o.layers == vec![Layer::SocketCompat])));
    }

    #[test]
    fn an_unwritable_out_dir_is_refused_before_running() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let e = check_out_dir(&file.join("sub")).unwrap_err().to_string();
        assert!(e.contains("--out"), "{e}");
        check_out_dir(&dir.path().join("new/deeper")).unwrap();
    }

    #[test]
    fn relay_layers_and_curve_short_by_default_complete_under_full() {
        let relay = |full: bool| {
            let mut o = SuiteOptions::quick("x".into());
            o.full = full;
            plan(&o)
                .into_iter()
                .find_map(|s| match s {
                    Step::Relay(r) => Some(r),
                    _ => None,
                })
                .expect("a relay step")
        };
        let short = relay(false);
        assert_eq!(short.layers, relay::DEFAULT_LAYERS.to_vec());
        assert_eq!(short.curve.as_ref().map(|c| c.factors.len()), Some(3));
        let full = relay(true);
        assert_eq!(full.layers, relay::LAYERS.to_vec());
        assert_eq!(
            full.curve.as_ref().map(|c| c.factors.clone()),
            Some(CurveOptions::default().factors)
        );
    }

    #[test]
    fn a_profile_reaches_relay_rendezvous_recovery_and_ops() {
        let net = Net {
            profile: Profile::Wan,
            client_ns: Some("a".into()),
            responder_ns: Some("b".into()),
            responder_ip: "10.77.0.2".parse().unwrap(),
        };
        let steps: Vec<Step> = plan(&SuiteOptions::quick("x".into()))
            .into_iter()
            .map(|s| with_net(s, &net))
            .collect();
        let mut seen = 0;
        for s in &steps {
            let n = match s {
                Step::Relay(o) => &o.net,
                Step::Rendezvous(o) => &o.net,
                Step::Recovery(o) => &o.net,
                Step::Ops(o) => &o.net,
                _ => continue,
            };
            assert_eq!(n, &net, "{}", s.label());
            seen += 1;
        }
        assert_eq!(seen, 4);
    }
}
