//! `juxta bench relay`: what a relay costs, and how it behaves overloaded.
//!
//! Why: an edge behind a NAT or firewall reaches other peers only through
//! a relay, so the relay's extra hop (and the HTTP transport's polling)
//! is paid on every message; and JXSE's relays collapsed under overload.
//! This scenario measures, in one run, two edges connected **directly**
//! (the baseline), through **one TCP relay**, through **one HTTP relay**
//! (both edges speak only HTTP to it) and through **two relays** (A leases
//! R1, B leases R2, R1 is connected to R2) and **firewalled** (one peer is
//! rendezvous and relay; A and B do not listen, are its rendezvous edges and
//! lease it as relay by default, and find each other's pipes by discovery
//! by name and bind them without naming the holder, as a user would), over
//! unicast pipes and JXTA sockets:
//!
//! - RTT: message/ack ping-pong (warm-up, then `pairs` pairs; median);
//! - bandwidth: messages (or socket writes) of `size` streamed for a fixed
//!   time; MB/s delivered at the receiver;
//! - transfer (paths `direct`, `tcp-relay` and `firewalled`, socket layer):
//!   [`RelayOptions::transfer`] bytes (default 100 MB) over one JXTA
//!   socket, checked by SHA-256 at the receiver; row layer
//!   `socket-transfer`, run `transfer`.
//!
//! The edges run in this process; each relay runs as its own process
//! (`juxta relay-serve`, see [`serve`]; for two relays R1 is started with
//! `--peer <R2>` and connects to R2 before it reports READY), so the
//! relay's forwarding does not share the edges' threads. All on loopback.
//! Tests without a `juxta` binary run the relays in this process instead
//! ([`RelayOptions::relays_in_process`]). Rows carry the ratio against
//! `direct` of the same layer and size.
//!
//! The **overload** run starts the relay as its own process (`juxta
//! relay-serve`, see [`serve`]) so its RSS can be sampled from `/proc`
//! every 250 ms. Sender edges offer 1 KB messages, open loop, to a sink
//! edge behind the relay at `overload_factor` times the rate the sink
//! reads (so the relay can forward at most a tenth of what it is offered);
//! meanwhile another pair of edges of the same relay ping-pongs through it.
//! Every offered message is accounted for: delivered, held back at the
//! sender (its bounded send queue was full because the relay pushed back),
//! refused by the relay (typed refusal counted at the sender), or not
//! delivered for another reason; `loss_pct` counts all but the delivered.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use juxta::proto::advertisement::{PipeAdvertisement, PipeType};
use juxta::proto::id::PeerId;
use juxta::proto::message::{Element, Message};
use juxta::relay::RelayConfig;
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Peer, PeerConfig};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use crate::layers::Layer;
use crate::util::{percentile, random_pipe_id};
use crate::BenchError;

/// Layers this scenario measures.
pub const LAYERS: [Layer; 5] = [
    Layer::UnicastPipe,
    Layer::SecurePipe,
    Layer::BidiPipe,
    Layer::Propagate,
    Layer::Socket,
];

/// Layers measured by default (`juxta bench relay` and the suite; the
/// others on request with `--layers`).
pub const DEFAULT_LAYERS: [Layer; 2] = [Layer::UnicastPipe, Layer::Socket];

/// How long the overload run waits, after the senders stop, for what
/// they sent to reach the sink.
const DRAIN: Duration = Duration::from_secs(5);

/// How long one set-up step or one reply may take.
const WAIT: Duration = Duration::from_secs(30);

/// A path between the two edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RelayPath {
    /// A connects to B (the baseline).
    Direct,
    /// A and B lease one relay over TCP.
    TcpRelay,
    /// A and B lease one relay over JXTA's HTTP transport.
    HttpRelay,
    /// A leases R1, B leases R2, R1 is connected to R2.
    TwoRelays,
    /// One rendezvous that is also a relay; A and B do not listen, lease
    /// it by default, and discover and bind each other's pipes through it.
    Firewalled,
}

impl RelayPath {
    /// Every path, baseline first.
    pub const ALL: [RelayPath; 5] = [
        RelayPath::Direct,
        RelayPath::TcpRelay,
        RelayPath::HttpRelay,
        RelayPath::TwoRelays,
        RelayPath::Firewalled,
    ];

    /// The name used in rows and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            RelayPath::Direct => "direct",
            RelayPath::TcpRelay => "tcp-relay",
            RelayPath::HttpRelay => "http-relay",
            RelayPath::TwoRelays => "two-relays",
            RelayPath::Firewalled => "firewalled",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<RelayPath, BenchError> {
        RelayPath::ALL
            .iter()
            .copied()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                BenchError::BadOption(format!(
                    "unknown relay path {s:?} (known: direct, tcp-relay, http-relay, two-relays, firewalled)"
                ))
            })
    }

    /// Parses a comma-separated list (`direct` is always measured: it is
    /// the baseline).
    pub fn parse_list(s: &str) -> Result<Vec<RelayPath>, BenchError> {
        let mut v = vec![RelayPath::Direct];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let p = RelayPath::parse(part)?;
            if !v.contains(&p) {
                v.push(p);
            }
        }
        Ok(v)
    }
}

/// Options of the overload run.
#[derive(Debug, Clone, Serialize)]
pub struct OverloadOptions {
    /// How long the senders offer.
    pub duration: Duration,
    /// Messages per second the sink edge reads (what the relay can
    /// forward to it).
    pub sink_msgs_per_s: u32,
    /// Offered rate over the sink's rate.
    pub overload_factor: u32,
    /// Sender edges.
    pub senders: usize,
    /// Payload bytes per message.
    pub size: usize,
    /// Run the relay in this process instead of its own (tests, where no
    /// `juxta` binary is at hand): its RSS is then this whole process's.
    pub in_process: bool,
}

/// Options of the overload curve: the offered rate swept against the
/// relay's measured forwarding rate (the thesis' offered vs received plot).
#[derive(Debug, Clone, Serialize)]
pub struct CurveOptions {
    /// Offered rates as multiples of the forwarding rate measured first
    /// (senders sending back to back for [`CurveOptions::calibrate`]).
    pub factors: Vec<f64>,
    /// Explicit offered rates (messages/s): replace `factors` when not
    /// empty (the forwarding rate is still measured and reported).
    pub rates: Vec<f64>,
    /// How long each point offers.
    pub point: Duration,
    /// How long the forwarding rate is measured.
    pub calibrate: Duration,
    /// Sender edges.
    pub senders: usize,
    /// Payload bytes per message.
    pub size: usize,
    /// Run the relay in this process instead of its own (tests).
    pub in_process: bool,
}

impl Default for CurveOptions {
    fn default() -> CurveOptions {
        CurveOptions {
            factors: vec![0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 20.0],
            rates: Vec::new(),
            point: Duration::from_secs(10),
            calibrate: Duration::from_secs(3),
            senders: 2,
            size: 1024,
            in_process: false,
        }
    }
}

impl Default for OverloadOptions {
    fn default() -> OverloadOptions {
        OverloadOptions {
            duration: Duration::from_secs(60),
            sink_msgs_per_s: 2_000,
            overload_factor: 10,
            senders: 2,
            size: 1024,
            in_process: false,
        }
    }
}

/// Options of [`run`].
#[derive(Debug, Clone, Serialize)]
pub struct RelayOptions {
    /// Paths (`direct` is always measured first).
    pub paths: Vec<RelayPath>,
    /// Layers: unicast-pipe, socket.
    pub layers: Vec<Layer>,
    /// Payload sizes in bytes.
    pub sizes: Vec<usize>,
    /// Warm-up pairs per layer and size.
    pub warmup: usize,
    /// Timed ping-pong pairs per layer and size.
    pub pairs: usize,
    /// Streaming time per layer and size.
    pub stream: Duration,
    /// Bytes of the one-socket transfer on the `direct`, `tcp-relay` and
    /// `firewalled` paths (socket layer; 0: none). Default 100 MB.
    pub transfer: u64,
    /// The overload run (`None`: skipped).
    pub overload: Option<OverloadOptions>,
    /// The overload curve (`None`: skipped).
    pub curve: Option<CurveOptions>,
    /// Network profile: the relays run in the responder namespace, the
    /// edges (this process) in the client namespace, so every relayed
    /// message crosses the emulated link twice (the `direct` baseline
    /// stays on the client side: two edges of one site, their relay
    /// across the link).
    pub net: crate::net::Net,
    /// The `juxta` binary re-run as the relays (paths and overload).
    pub exe: PathBuf,
    /// RSA key size of the peers.
    pub key_bits: usize,
    /// Run the relays of the measured paths in this process instead of
    /// as `juxta relay-serve` processes (tests, where no `juxta` binary
    /// is at hand); the overload run has its own
    /// [`OverloadOptions::in_process`].
    pub relays_in_process: bool,
}

impl Default for RelayOptions {
    fn default() -> RelayOptions {
        RelayOptions {
            paths: RelayPath::ALL.to_vec(),
            layers: DEFAULT_LAYERS.to_vec(),
            sizes: vec![1, 1024, 65536],
            warmup: 200,
            pairs: 200,
            stream: Duration::from_millis(1000),
            transfer: 100_000_000,
            overload: Some(OverloadOptions::default()),
            curve: None,
            net: crate::net::Net::loopback(),
            exe: crate::rendezvous::default_exe(),
            key_bits: 1024,
            relays_in_process: false,
        }
    }
}

/// One result row (RTT/bandwidth rows and overload rows).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RelayRow {
    /// Always `relay`.
    pub scenario: &'static str,
    /// `direct`, `tcp-relay`, `http-relay`, `two-relays` or `firewalled`.
    pub path: &'static str,
    /// Layer name.
    pub layer: &'static str,
    /// Payload bytes.
    pub size: usize,
    /// `pingpong` (RTT and bandwidth), `transfer`, `overload` or
    /// `overload-curve`.
    pub run: &'static str,
    /// Median ping-pong RTT (µs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_us_median: Option<f64>,
    /// 99th percentile RTT (µs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_us_p99: Option<f64>,
    /// Streamed bytes delivered per second, 10^6 bytes/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_mb_s: Option<f64>,
    /// Median RTT over the direct median of the same layer and size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_ratio_vs_direct: Option<f64>,
    /// Bandwidth over the direct bandwidth of the same layer and size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_ratio_vs_direct: Option<f64>,
    /// Timed pairs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<usize>,
    /// Overload: messages/s the senders offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_msgs_per_s: Option<f64>,
    /// Overload: messages/s delivered to the sink.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_msgs_per_s: Option<f64>,
    /// Overload: offered messages not delivered, % (held back + refused +
    /// other).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_pct: Option<f64>,
    /// Overload: messages offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered: Option<u64>,
    /// Overload: messages delivered to the sink.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered: Option<u64>,
    /// Overload: messages held back at a sender because its bounded send
    /// queue was full (the relay was pushing back): never sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_back: Option<u64>,
    /// Overload: typed refusals the relay sent the senders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_by_relay: Option<u64>,
    /// Overload: sends that failed at the sender (connection errors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_errors: Option<u64>,
    /// Overload: sent, not refused, not delivered when counting stopped (5 s
    /// after the senders stopped: still in flight, or lost).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unaccounted: Option<u64>,
    /// Overload: the relay process's largest RSS, MB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay_rss_mb_max: Option<f64>,
    /// Overload: the relay's RSS every 250 ms, MB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay_rss_mb_samples: Option<Vec<f64>>,
    /// Overload: median RTT of another edge pair of the same relay during
    /// the overload (µs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_edge_rtt_us_median: Option<f64>,
    /// Overload: the other pair's ping-pongs answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_edge_answered: Option<u64>,
    /// Overload: the other pair's ping-pongs not answered within 2 s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_edge_timeouts: Option<u64>,
    /// Overload curve: the offered rate over the measured forwarding rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_factor: Option<f64>,
    /// Overload curve: messages/s the relay forwarded with the senders
    /// sending back to back (measured before the points).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forwarding_msgs_per_s: Option<f64>,
    /// Overload: measured seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
}

fn fail(reason: impl Into<String>) -> BenchError {
    BenchError::Responder {
        layer: "relay".into(),
        reason: reason.into(),
    }
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        what: what.to_string(),
        source,
    }
}

fn pipe_adv(name: &str) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(random_pipe_id(), PipeType::Unicast);
    a.name = Some(name.to_string());
    a
}

async fn start_peer(
    homes: &Path,
    name: &str,
    key_bits: usize,
    cfg: impl FnOnce(PeerConfig) -> PeerConfig,
) -> Result<Peer, BenchError> {
    let c = PeerConfig::new(homes.join(name)).key_bits(key_bits);
    Ok(Peer::start(cfg(c)).await?)
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

async fn leased(p: &Peer, what: &str) -> Result<PeerId, BenchError> {
    p.relay()
        .ok_or_else(|| fail(format!("{what}: no relay service")))?
        .wait_leased(WAIT)
        .await
        .ok_or_else(|| fail(format!("{what}: no relay lease within {WAIT:?}")))
}

/// A relay of a measured path: a peer of this process or a child process.
enum Relay {
    InProcess(Peer),
    Process(Box<RelayProcess>),
}

/// Where a started relay listens.
struct RelayAddrs {
    tcp: SocketAddr,
    http: Option<SocketAddr>,
}

/// Starts a relay (in this process or as `juxta relay-serve`), with an
/// HTTP listener when `http`, connected to `peer` when given, also a
/// rendezvous when `rendezvous`.
async fn start_relay(
    opts: &RelayOptions,
    homes: &Path,
    name: &str,
    http: bool,
    peer: Option<SocketAddr>,
    rendezvous: bool,
) -> Result<(Relay, RelayAddrs), BenchError> {
    if opts.relays_in_process {
        let r = start_peer(homes, name, opts.key_bits, |c| {
            let mut c = c.listen(loopback()).relay(RelayConfig::server());
            if rendezvous {
                c = c.rendezvous(juxta::rendezvous::RendezvousConfig::rendezvous());
            }
            if http {
                c.http_listen(loopback())
            } else {
                c
            }
        })
        .await?;
        if let Some(p) = peer {
            r.connect(p).await?;
        }
        let addrs = RelayAddrs {
            tcp: r
                .local_addr()
                .ok_or_else(|| fail(format!("{name} has no address")))?,
            http: r.http_local_addr(),
        };
        return Ok((Relay::InProcess(r), addrs));
    }
    let r = RelayProcess::start_in(
        &opts.exe,
        opts.key_bits,
        http,
        peer,
        rendezvous,
        &opts.net,
        None,
    )
    .await?;
    let addrs = RelayAddrs {
        tcp: r.addr,
        http: r.http_addr,
    };
    Ok((Relay::Process(Box::new(r)), addrs))
}

/// The peers of one path: A (client side), B (server side) and the relays.
struct Topo {
    a: Peer,
    b: Peer,
    /// Kept alive while the path is measured.
    relays: Vec<Relay>,
    /// The edges find each other's pipes by discovery by name (through
    /// their rendezvous) and bind without naming the holder.
    discover: bool,
}

impl Topo {
    /// Stops the edges, then the relays (relay processes are killed and
    /// reaped).
    async fn close(self) {
        drop(self.a);
        drop(self.b);
        for r in self.relays {
            match r {
                Relay::InProcess(p) => drop(p),
                Relay::Process(mut p) => p.kill().await,
            }
        }
    }
}

async fn topology(path: RelayPath, homes: &Path, opts: &RelayOptions) -> Result<Topo, BenchError> {
    let p = path.name();
    // Secure pipes need 2048-bit keys on the edges (the relays only
    // forward).
    let key_bits = opts
        .layers
        .iter()
        .map(|l| l.key_bits(opts.key_bits))
        .max()
        .unwrap_or(opts.key_bits);
    match path {
        RelayPath::Direct => {
            let b =
                start_peer(homes, &format!("{p}-b"), key_bits, |c| c.listen(loopback())).await?;
            let a = start_peer(homes, &format!("{p}-a"), key_bits, |c| c).await?;
            let addr = b.local_addr().ok_or_else(|| fail("B has no address"))?;
            a.connect(addr).await?;
            Ok(Topo {
                a,
                b,
                relays: vec![],
                discover: false,
            })
        }
        RelayPath::TcpRelay => {
            let (r, addrs) =
                start_relay(opts, homes, &format!("{p}-r"), false, None, false).await?;
            let seeds = vec![addrs.tcp];
            let a = start_peer(homes, &format!("{p}-a"), key_bits, |c| {
                c.relay(RelayConfig::client(seeds.clone()))
            })
            .await?;
            let b = start_peer(homes, &format!("{p}-b"), key_bits, |c| {
                c.relay(RelayConfig::client(seeds.clone()))
            })
            .await?;
            leased(&a, "A").await?;
            leased(&b, "B").await?;
            Ok(Topo {
                a,
                b,
                relays: vec![r],
                discover: false,
            })
        }
        RelayPath::HttpRelay => {
            let (r, addrs) = start_relay(opts, homes, &format!("{p}-r"), true, None, false).await?;
            let seeds = vec![addrs
                .http
                .ok_or_else(|| fail("relay has no HTTP address"))?];
            let a = start_peer(homes, &format!("{p}-a"), key_bits, |c| {
                c.relay(RelayConfig::client_http(seeds.clone()))
            })
            .await?;
            let b = start_peer(homes, &format!("{p}-b"), key_bits, |c| {
                c.relay(RelayConfig::client_http(seeds.clone()))
            })
            .await?;
            leased(&a, "A").await?;
            leased(&b, "B").await?;
            Ok(Topo {
                a,
                b,
                relays: vec![r],
                discover: false,
            })
        }
        RelayPath::TwoRelays => {
            // R1 connects to R2 at start (before it is ready).
            let (r2, a2) = start_relay(opts, homes, &format!("{p}-r2"), false, None, false).await?;
            let (r1, a1) =
                start_relay(opts, homes, &format!("{p}-r1"), false, Some(a2.tcp), false).await?;
            let a = start_peer(homes, &format!("{p}-a"), key_bits, |c| {
                c.relay(RelayConfig::client(vec![a1.tcp]))
            })
            .await?;
            let b = start_peer(homes, &format!("{p}-b"), key_bits, |c| {
                c.relay(RelayConfig::client(vec![a2.tcp]))
            })
            .await?;
            leased(&a, "A").await?;
            leased(&b, "B").await?;
            Ok(Topo {
                a,
                b,
                relays: vec![r1, r2],
                discover: false,
            })
        }
        RelayPath::Firewalled => {
            let (r, addrs) = start_relay(opts, homes, &format!("{p}-r"), false, None, true).await?;
            // Nothing about relays configured: edges with no listen
            // address lease their rendezvous seed as relay by default.
            let seeds = vec![addrs.tcp];
            let edge = |c: PeerConfig| {
                c.rendezvous(juxta::rendezvous::RendezvousConfig::edge(seeds.clone()))
            };
            let a = start_peer(homes, &format!("{p}-a"), key_bits, edge).await?;
            let b = start_peer(homes, &format!("{p}-b"), key_bits, edge).await?;
            for (e, what) in [(&a, "A"), (&b, "B")] {
                leased(e, what).await?;
                e.rendezvous()
                    .ok_or_else(|| fail(format!("{what}: no rendezvous service")))?
                    .wait_leased(WAIT)
                    .await
                    .ok_or_else(|| fail(format!("{what}: no rendezvous lease within {WAIT:?}")))?;
            }
            Ok(Topo {
                a,
                b,
                relays: vec![r],
                discover: true,
            })
        }
    }
}

/// `holder` publishes `adv` (SRDI to its rendezvous); `asker` finds it by
/// name through its rendezvous (asked again until found, within [`WAIT`]:
/// the SRDI push is asynchronous).
async fn discovered(
    holder: &Peer,
    asker: &Peer,
    adv: &PipeAdvertisement,
) -> Result<PipeAdvertisement, BenchError> {
    use juxta::proto::advertisement::{AdvKind, Advertisement};
    holder
        .discovery()
        .publish(&Advertisement::Pipe(adv.clone()))
        .await
        .map_err(|e| fail(format!("publish: {e}")))?;
    let name = adv.name.clone().unwrap_or_default();
    let deadline = Instant::now() + WAIT;
    loop {
        let found = asker
            .discovery()
            .get_remote(
                AdvKind::Adv,
                Some("Name"),
                Some(&name),
                1,
                None,
                Duration::from_secs(2),
            )
            .await
            .map_err(|e| fail(format!("discovery of {name}: {e}")))?;
        for f in found {
            if let Advertisement::Pipe(p) = f {
                if p.id == adv.id {
                    return Ok(p);
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(fail(format!("{name} not discovered within {WAIT:?}")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the receiving side of a stream has seen.
#[derive(Default)]
struct Received {
    msgs: AtomicU64,
    bytes: AtomicU64,
    /// Nanoseconds after `epoch` of the last arrival.
    last_ns: AtomicU64,
}

impl Received {
    fn add(&self, epoch: Instant, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.msgs.fetch_add(1, Ordering::Relaxed);
        self.last_ns
            .fetch_max(epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Waits until `done()` or no progress of `progress()` for `idle`.
async fn settle(mut done: impl FnMut() -> bool, progress: impl Fn() -> u64, idle: Duration) {
    let mut last = progress();
    let mut since = Instant::now();
    while !done() {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = progress();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= idle {
            break;
        }
    }
}

/// Figures of one layer and size on one path.
struct Figures {
    rtts: Vec<f64>,
    mb_s: f64,
}

/// A's sending end of a pipe layer.
enum PipeTx {
    Out(juxta::pipe::OutputPipe),
    Bidi(Box<juxta::pipe::bidi::BidiPipe>),
}

impl PipeTx {
    async fn send(&self, m: Message) -> Result<(), BenchError> {
        match self {
            PipeTx::Out(o) => {
                o.send(m).await?;
            }
            PipeTx::Bidi(b) => {
                b.send(m).await?;
            }
        }
        Ok(())
    }

    /// The next ack (on the ack pipe, or on the bidi pipe itself).
    async fn ack(&mut self, acks: &mut Option<juxta::pipe::InputPipe>) -> Option<()> {
        match (self, acks) {
            (_, Some(i)) => i.recv().await.map(|_| ()),
            (PipeTx::Bidi(b), None) => b.recv().await.map(|_| ()),
            (PipeTx::Out(_), None) => None,
        }
    }
}

/// Pipes A -> B (ping and stream) with the acks B -> A: unicast and
/// secure pipes (the ack on a second pipe of the same type), bidi pipes
/// (the ack on the same pipe) and propagate pipes (sent to B through the
/// relay; the ack on a unicast pipe).
async fn measure_pipes(
    t: &Topo,
    layer: Layer,
    sizes: &[usize],
    opts: &RelayOptions,
    label: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Figures>, BenchError> {
    let ty = match layer {
        Layer::SecurePipe => PipeType::UnicastSecure,
        Layer::Propagate => PipeType::Propagate,
        _ => PipeType::Unicast,
    };
    let ack_ty = if layer == Layer::SecurePipe {
        PipeType::UnicastSecure
    } else {
        PipeType::Unicast
    };
    // Names per layer: discovery by name must find this layer's pipe.
    let (mut adv_b, mut adv_a) = (
        pipe_adv(&format!("relay-bench-b-{}", layer.name())),
        pipe_adv(&format!("relay-bench-a-{}", layer.name())),
    );
    adv_b.pipe_type = ty;
    adv_a.pipe_type = ack_ty;
    let epoch = Instant::now();
    let recv = Arc::new(Received::default());
    let r2 = recv.clone();
    let (mut tx, mut acks, echo) = if layer == Layer::BidiPipe {
        let mut listener = t.b.pipes().bind_bidi(&adv_b)?;
        let found_b = if t.discover {
            discovered(&t.b, &t.a, &adv_b).await?
        } else {
            adv_b.clone()
        };
        let accept = tokio::spawn(async move { listener.accept().await });
        let a_side =
            t.a.pipes()
                .connect_bidi(&found_b, t.b.peer_id(), WAIT)
                .await?;
        let mut b_side = tokio::time::timeout(WAIT, accept)
            .await
            .map_err(|_| fail(format!("{label}: bidi pipe not accepted within {WAIT:?}")))?
            .map_err(|e| fail(format!("{label}: bidi accept: {e}")))??;
        let echo = tokio::spawn(async move {
            while let Some(m) = b_side.recv().await {
                let d = m.message.get("", "d").map(|e| e.data.len()).unwrap_or(0);
                if m.message.get("", "p").is_some() {
                    let ack = Message::new().with(Element::bytes("", "k", &b"k"[..]));
                    if b_side.send(ack).await.is_err() {
                        break;
                    }
                } else {
                    r2.add(epoch, d as u64);
                }
            }
        });
        (PipeTx::Bidi(Box::new(a_side)), None, echo)
    } else {
        let mut in_b = t.b.pipes().create_input_pipe(&adv_b)?;
        let in_a = t.a.pipes().create_input_pipe(&adv_a)?;
        let (out_ab, out_ba) = if t.discover {
            let found_b = discovered(&t.b, &t.a, &adv_b).await?;
            let found_a = discovered(&t.a, &t.b, &adv_a).await?;
            let to_b: Vec<PeerId> = if layer == Layer::Propagate {
                vec![t.b.peer_id()]
            } else {
                Vec::new()
            };
            (
                t.a.pipes()
                    .create_output_pipe(&found_b, &to_b, WAIT)
                    .await?,
                t.b.pipes().create_output_pipe(&found_a, &[], WAIT).await?,
            )
        } else {
            (
                t.a.pipes()
                    .create_output_pipe(&adv_b, &[t.b.peer_id()], WAIT)
                    .await?,
                t.b.pipes()
                    .create_output_pipe(&adv_a, &[t.a.peer_id()], WAIT)
                    .await?,
            )
        };
        let echo = tokio::spawn(async move {
            while let Some(m) = in_b.recv().await {
                let d = m.message.get("", "d").map(|e| e.data.len()).unwrap_or(0);
                if m.message.get("", "p").is_some() {
                    let ack = Message::new().with(Element::bytes("", "k", &b"k"[..]));
                    if out_ba.send(ack).await.is_err() {
                        break;
                    }
                } else {
                    r2.add(epoch, d as u64);
                }
            }
        });
        (PipeTx::Out(out_ab), Some(in_a), echo)
    };
    let mut out = Vec::new();
    for &size in sizes {
        let payload = bytes::Bytes::from(vec![7u8; size]);
        let ping = || {
            Message::new()
                .with(Element::bytes("", "p", &b"p"[..]))
                .with(Element::bytes("", "d", payload.clone()))
        };
        progress(&format!("{label} size {size}: ping-pong"));
        let mut rtts = Vec::with_capacity(opts.pairs);
        for i in 0..opts.warmup + opts.pairs {
            let t0 = Instant::now();
            tx.send(ping()).await?;
            tokio::time::timeout(WAIT, tx.ack(&mut acks))
                .await
                .map_err(|_| fail(format!("{label}: no ack within {WAIT:?}")))?
                .ok_or_else(|| fail(format!("{label}: ack pipe closed")))?;
            if i >= opts.warmup {
                rtts.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        progress(&format!("{label} size {size}: streaming"));
        let (m0, b0) = (
            recv.msgs.load(Ordering::Relaxed),
            recv.bytes.load(Ordering::Relaxed),
        );
        let start = epoch.elapsed().as_nanos() as u64;
        let t0 = Instant::now();
        let mut sent = 0u64;
        while t0.elapsed() < opts.stream {
            tx.send(Message::new().with(Element::bytes("", "d", payload.clone())))
                .await?;
            sent += 1;
        }
        settle(
            || recv.msgs.load(Ordering::Relaxed) - m0 >= sent,
            || recv.msgs.load(Ordering::Relaxed),
            Duration::from_secs(3),
        )
        .await;
        let bytes = recv.bytes.load(Ordering::Relaxed) - b0;
        let secs = (recv.last_ns.load(Ordering::Relaxed).saturating_sub(start)) as f64 / 1e9;
        let mb_s = if secs > 0.0 {
            bytes as f64 / secs / 1e6
        } else {
            0.0
        };
        rtts.sort_by(f64::total_cmp);
        out.push(Figures { rtts, mb_s });
    }
    echo.abort();
    Ok(out)
}

/// JXTA sockets A -> B: one for framed pings (1-byte acks), one per size
/// for the stream.
async fn measure_socket(
    t: &Topo,
    sizes: &[usize],
    opts: &RelayOptions,
    label: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Figures>, BenchError> {
    let sad = pipe_adv("relay-bench-socket");
    let mut server = JxtaServerSocket::bind(&t.b, &sad, SocketConfig::default())?;
    let sad = if t.discover {
        discovered(&t.b, &t.a, &sad).await?
    } else {
        sad
    };
    let epoch = Instant::now();
    let recv = Arc::new(Received::default());
    let r2 = recv.clone();
    let acceptor = tokio::spawn(async move {
        let mut handlers = Vec::new();
        while let Ok(mut s) = server.accept().await {
            let recv = r2.clone();
            handlers.push(tokio::spawn(async move {
                let mut mode = [0u8; 1];
                if s.read_exact(&mut mode).await.is_err() {
                    return;
                }
                if mode[0] == b'R' {
                    let mut buf = Vec::new();
                    loop {
                        let mut len = [0u8; 4];
                        if s.read_exact(&mut len).await.is_err() {
                            return;
                        }
                        buf.resize(u32::from_be_bytes(len) as usize, 0);
                        if s.read_exact(&mut buf).await.is_err()
                            || s.write_all(b"k").await.is_err()
                            || s.flush().await.is_err()
                        {
                            return;
                        }
                    }
                } else {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        recv.add(epoch, n as u64);
                    }
                    let _ = s.shutdown().await;
                }
            }));
        }
        for h in handlers {
            h.abort();
        }
    });
    let pipes = t.a.pipes();
    let connect = || JxtaSocket::connect(&pipes, &sad, t.b.peer_id(), SocketConfig::default());
    let mut rtt_sock = connect().await?;
    rtt_sock.write_all(b"R").await.map_err(io("socket write"))?;
    let mut out = Vec::new();
    for &size in sizes {
        let mut framed = (size as u32).to_be_bytes().to_vec();
        framed.resize(4 + size, 7u8);
        progress(&format!("{label} size {size}: ping-pong"));
        let mut rtts = Vec::with_capacity(opts.pairs);
        let mut k = [0u8; 1];
        for i in 0..opts.warmup + opts.pairs {
            let t0 = Instant::now();
            rtt_sock
                .write_all(&framed)
                .await
                .map_err(io("socket write"))?;
            rtt_sock.flush().await.map_err(io("socket flush"))?;
            tokio::time::timeout(WAIT, rtt_sock.read_exact(&mut k))
                .await
                .map_err(|_| fail(format!("{label}: no socket ack within {WAIT:?}")))?
                .map_err(io("socket read"))?;
            if i >= opts.warmup {
                rtts.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        progress(&format!("{label} size {size}: streaming"));
        let mut s = connect().await?;
        s.write_all(b"T").await.map_err(io("socket write"))?;
        s.flush().await.map_err(io("socket flush"))?;
        let chunk = vec![9u8; size.max(1)];
        let b0 = recv.bytes.load(Ordering::Relaxed);
        let start = epoch.elapsed().as_nanos() as u64;
        let t0 = Instant::now();
        let mut sent = 0u64;
        while t0.elapsed() < opts.stream {
            s.write_all(&chunk).await.map_err(io("socket write"))?;
            sent += chunk.len() as u64;
        }
        s.flush().await.map_err(io("socket flush"))?;
        settle(
            || recv.bytes.load(Ordering::Relaxed) - b0 >= sent,
            || recv.bytes.load(Ordering::Relaxed),
            Duration::from_secs(5),
        )
        .await;
        let bytes = recv.bytes.load(Ordering::Relaxed) - b0;
        let secs = (recv.last_ns.load(Ordering::Relaxed).saturating_sub(start)) as f64 / 1e9;
        let mb_s = if secs > 0.0 {
            bytes as f64 / secs / 1e6
        } else {
            0.0
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), s.shutdown()).await;
        rtts.sort_by(f64::total_cmp);
        out.push(Figures { rtts, mb_s });
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), rtt_sock.shutdown()).await;
    acceptor.abort();
    Ok(out)
}

/// One JXTA socket A -> B carrying `total` bytes (written in 1 MiB
/// chunks, checked by SHA-256 at B); MB/s (10^6 bytes/s) from the first
/// write to the last byte read.
async fn measure_transfer(t: &Topo, total: u64) -> Result<f64, BenchError> {
    use sha2::{Digest, Sha256};
    let sad = pipe_adv("relay-bench-transfer");
    let mut server = JxtaServerSocket::bind(&t.b, &sad, SocketConfig::default())?;
    let sad = if t.discover {
        discovered(&t.b, &t.a, &sad).await?
    } else {
        sad
    };
    let receiver = tokio::spawn(async move {
        let mut s = server.accept().await?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0u64;
        loop {
            let n = s.read(&mut buf).await.map_err(io("socket read"))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            got += n as u64;
        }
        Ok::<_, BenchError>((got, h.finalize(), Instant::now()))
    });
    let mut c =
        JxtaSocket::connect(&t.a.pipes(), &sad, t.b.peer_id(), SocketConfig::default()).await?;
    // Byte i of the stream is i mod 251: every chunk is a slice of one
    // pattern buffer (no per-byte work on the sender).
    const CHUNK: usize = 1 << 20;
    let pattern: Vec<u8> = (0..CHUNK + 251).map(|i| (i % 251) as u8).collect();
    let mut h = Sha256::new();
    let t0 = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        let n = (total - sent).min(CHUNK as u64) as usize;
        let off = (sent % 251) as usize;
        let chunk = &pattern[off..off + n];
        h.update(chunk);
        c.write_all(chunk).await.map_err(io("socket write"))?;
        sent += n as u64;
    }
    c.shutdown().await.map_err(io("socket shutdown"))?;
    let (got, digest, end) = tokio::time::timeout(Duration::from_secs(600), receiver)
        .await
        .map_err(|_| fail("transfer: not received within 600 s"))?
        .map_err(|e| fail(format!("transfer receiver: {e}")))??;
    if got != total || digest != h.finalize() {
        return Err(fail(format!(
            "transfer: {got} of {total} bytes received, or a different SHA-256"
        )));
    }
    let secs = end.duration_since(t0).as_secs_f64();
    Ok(if secs > 0.0 {
        total as f64 / secs / 1e6
    } else {
        0.0
    })
}

/// Runs every path, layer and size, then the overload run and the
/// overload curve; `progress` gets one line per step. Under a network
/// profile ([`RelayOptions::net`]) this must run on a current-thread
/// runtime (the edges' sockets are made in the client namespace).
pub async fn run(
    opts: &RelayOptions,
    progress: impl FnMut(&str),
) -> Result<Vec<RelayRow>, BenchError> {
    opts.validate()?;
    crate::net::scoped(&opts.net, run_here(opts, progress)).await
}

impl RelayOptions {
    /// Refuses what cannot be honoured (checked before anything starts).
    pub fn validate(&self) -> Result<(), BenchError> {
        if !self.net.is_local()
            && (self.relays_in_process
                || self.overload.as_ref().is_some_and(|o| o.in_process)
                || self.curve.as_ref().is_some_and(|c| c.in_process))
        {
            return Err(BenchError::NetUnsupported {
                profile: self.net.profile.name().into(),
                scenario: "relay".into(),
                reason: "relays in this process cannot sit across the link (they need the juxta binary as relay-serve)".into(),
            });
        }
        if let Some(c) = &self.curve {
            let bad = |x: &f64| !(x.is_finite() && *x > 0.0);
            if c.factors.iter().any(bad) || c.rates.iter().any(bad) {
                return Err(BenchError::BadOption(
                    "relay curve: --curve-factors and --rates must be positive numbers".into(),
                ));
            }
            if c.factors.is_empty() && c.rates.is_empty() {
                return Err(BenchError::BadOption(
                    "relay curve: give --curve-factors or --rates".into(),
                ));
            }
            if c.rates.iter().any(|r| *r > 1e6) || c.factors.iter().any(|f| *f > 1000.0) {
                return Err(BenchError::BadOption(
                    "relay curve: at most 1,000,000 messages/s and 1,000x".into(),
                ));
            }
        }
        Ok(())
    }
}

async fn run_here(
    opts: &RelayOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<RelayRow>, BenchError> {
    for l in &opts.layers {
        if !LAYERS.contains(l) {
            return Err(BenchError::Unsupported {
                layer: l.name().into(),
                scenario: "relay".into(),
                allowed: "unicast-pipe, secure-pipe, bidi-pipe, propagate, socket".into(),
            });
        }
    }
    if opts.sizes.iter().any(|&s| s > 16 << 20) {
        return Err(BenchError::BadOption(
            "relay sizes are at most 16 MiB".into(),
        ));
    }
    let homes = tempfile::tempdir().map_err(io("creating peer homes"))?;
    let mut paths = vec![RelayPath::Direct];
    paths.extend(opts.paths.iter().filter(|p| **p != RelayPath::Direct));
    let mut rows: Vec<RelayRow> = Vec::new();
    for path in paths {
        progress(&format!("relay {}: starting peers", path.name()));
        let dir = homes.path().join(path.name());
        let t = topology(path, &dir, opts).await?;
        for &layer in &opts.layers {
            let label = format!("relay {} {}", path.name(), layer.name());
            let figs = if layer == Layer::Socket {
                measure_socket(&t, &opts.sizes, opts, &label, &mut progress).await?
            } else {
                measure_pipes(&t, layer, &opts.sizes, opts, &label, &mut progress).await?
            };
            if layer == Layer::Socket
                && opts.transfer > 0
                && matches!(
                    path,
                    RelayPath::Direct | RelayPath::TcpRelay | RelayPath::Firewalled
                )
            {
                progress(&format!("{label}: {} bytes transfer", opts.transfer));
                let mb_s = measure_transfer(&t, opts.transfer).await?;
                progress(&format!("{label}: transfer {mb_s:.1} MB/s"));
                rows.push(RelayRow {
                    scenario: "relay",
                    path: path.name(),
                    layer: "socket-transfer",
                    size: opts.transfer as usize,
                    run: "transfer",
                    bandwidth_mb_s: Some(mb_s),
                    samples: Some(1),
                    ..RelayRow::default()
                });
            }
            for (&size, f) in opts.sizes.iter().zip(figs) {
                let med = percentile(&f.rtts, 0.5);
                progress(&format!(
                    "{label} size {size}: RTT {med:.0} us, {:.3} MB/s",
                    f.mb_s
                ));
                rows.push(RelayRow {
                    scenario: "relay",
                    path: path.name(),
                    layer: layer.name(),
                    size,
                    run: "pingpong",
                    rtt_us_median: Some(med),
                    rtt_us_p99: Some(percentile(&f.rtts, 0.99)),
                    bandwidth_mb_s: Some(f.mb_s),
                    samples: Some(f.rtts.len()),
                    ..RelayRow::default()
                });
            }
        }
        t.close().await;
    }
    add_ratios(&mut rows);
    if let Some(o) = &opts.overload {
        rows.push(overload(opts, o, homes.path(), &mut progress).await?);
    }
    if let Some(c) = &opts.curve {
        rows.extend(curve(opts, c, homes.path(), &mut progress).await?);
    }
    Ok(rows)
}

/// Fills the ratios against the direct row of the same layer and size.
fn add_ratios(rows: &mut [RelayRow]) {
    let direct: Vec<(&'static str, usize, Option<f64>, Option<f64>)> = rows
        .iter()
        .filter(|r| r.path == "direct")
        .map(|r| (r.layer, r.size, r.rtt_us_median, r.bandwidth_mb_s))
        .collect();
    for r in rows.iter_mut() {
        let Some(&(_, _, drtt, dbw)) = direct
            .iter()
            .find(|(l, s, _, _)| *l == r.layer && *s == r.size)
        else {
            continue;
        };
        let ratio = |x: Option<f64>, base: Option<f64>| match (x, base) {
            (Some(x), Some(b)) if b > 0.0 => Some(x / b),
            _ => None,
        };
        r.rtt_ratio_vs_direct = ratio(r.rtt_us_median, drtt);
        r.bandwidth_ratio_vs_direct = ratio(r.bandwidth_mb_s, dbw);
    }
}

/// Runs a relay until the process is killed; `ready` gets its TCP
/// address, peer ID and HTTP address (when `http_listen` is set). With
/// `peer` (another relay's TCP address) it first connects to that relay,
/// as R1 of the two-relays path does to R2.
pub async fn serve(
    listen: SocketAddr,
    http_listen: Option<SocketAddr>,
    peer_addr: Option<SocketAddr>,
    home: PathBuf,
    key_bits: usize,
    ready: impl FnOnce(SocketAddr, PeerId, Option<SocketAddr>),
) -> Result<(), BenchError> {
    serve_with(listen, http_listen, peer_addr, home, key_bits, false, ready).await
}

/// [`serve`], also running the rendezvous service when `rendezvous`
/// (the `firewalled` path's rendezvous and relay).
pub async fn serve_with(
    listen: SocketAddr,
    http_listen: Option<SocketAddr>,
    peer_addr: Option<SocketAddr>,
    home: PathBuf,
    key_bits: usize,
    rendezvous: bool,
    ready: impl FnOnce(SocketAddr, PeerId, Option<SocketAddr>),
) -> Result<(), BenchError> {
    let mut cfg = PeerConfig::new(home)
        .listen(listen)
        .relay(RelayConfig::server());
    if rendezvous {
        cfg = cfg.rendezvous(juxta::rendezvous::RendezvousConfig::rendezvous());
    }
    if let Some(h) = http_listen {
        cfg = cfg.http_listen(h);
    }
    let peer = Peer::start(cfg.key_bits(key_bits)).await?;
    if let Some(p) = peer_addr {
        peer.connect(p).await?;
    }
    ready(
        peer.local_addr().unwrap_or(listen),
        peer.peer_id(),
        peer.http_local_addr(),
    );
    std::future::pending::<()>().await;
    Ok(())
}

/// A relay child process (`juxta relay-serve`, killed when dropped).
pub struct RelayProcess {
    child: Child,
    /// Its TCP address.
    pub addr: SocketAddr,
    /// Its peer ID.
    pub peer: PeerId,
    /// Its HTTP address (when started with one).
    pub http_addr: Option<SocketAddr>,
    /// Its process ID.
    pub pid: u32,
    /// The write end of its stdin (never written; closing it ends the
    /// relay).
    _stdin: Option<tokio::process::ChildStdin>,
    _home: tempfile::TempDir,
}

impl RelayProcess {
    /// Starts `<exe> relay-serve ...` (TCP only) and waits for its READY
    /// line.
    pub async fn spawn(exe: &Path, key_bits: usize) -> Result<RelayProcess, BenchError> {
        RelayProcess::start(exe, key_bits, false, None).await
    }

    /// Starts `<exe> relay-serve ...`, also listening for HTTP when
    /// `http`, connected to the relay at `peer` when given, and waits for
    /// its READY line.
    pub async fn start(
        exe: &Path,
        key_bits: usize,
        http: bool,
        peer: Option<SocketAddr>,
    ) -> Result<RelayProcess, BenchError> {
        RelayProcess::start_with(exe, key_bits, http, peer, false).await
    }

    /// [`RelayProcess::start`], also running the rendezvous service when
    /// `rendezvous` (`relay-serve --rendezvous`).
    pub async fn start_with(
        exe: &Path,
        key_bits: usize,
        http: bool,
        peer: Option<SocketAddr>,
        rendezvous: bool,
    ) -> Result<RelayProcess, BenchError> {
        RelayProcess::start_in(
            exe,
            key_bits,
            http,
            peer,
            rendezvous,
            &crate::net::Net::loopback(),
            None,
        )
        .await
    }

    /// [`RelayProcess::start_with`] in the responder namespace of `net`,
    /// listening on its responder address (`relay-serve --netns`), pinned
    /// to CPU `core` when given (`relay-serve --core`: the `relayed-pipe`
    /// lane of `juxta bench pingpong` places its relay as it places its
    /// responders).
    pub async fn start_in(
        exe: &Path,
        key_bits: usize,
        http: bool,
        peer: Option<SocketAddr>,
        rendezvous: bool,
        net: &crate::net::Net,
        core: Option<usize>,
    ) -> Result<RelayProcess, BenchError> {
        let home = tempfile::tempdir().map_err(io("creating a relay home"))?;
        let bind = SocketAddr::new(net.responder_ip, 0).to_string();
        let mut cmd = Command::new(exe);
        cmd.arg("relay-serve")
            .arg("--listen")
            .arg(&bind)
            .arg("--home")
            .arg(home.path())
            .arg("--key-bits")
            .arg(key_bits.to_string());
        if let Some(ns) = &net.responder_ns {
            cmd.arg("--netns").arg(ns);
        }
        if http {
            cmd.arg("--http-listen").arg(&bind);
        }
        if let Some(p) = peer {
            cmd.arg("--peer").arg(p.to_string());
        }
        if rendezvous {
            cmd.arg("--rendezvous");
        }
        if let Some(c) = core {
            cmd.arg("--core").arg(c.to_string());
        }
        // The relay ends with this process however it ends: it exits when
        // its stdin, whose write end is kept in `RelayProcess`, closes.
        let mut child = cmd
            .arg("--exit-with-parent")
            .stdout(Stdio::piped())
            .stdin(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BenchError::Io {
                what: format!("starting relay {}", exe.display()),
                source,
            })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| fail("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .map_err(|_| fail("relay-serve: no READY line within 60 s"))?
            .map_err(io("reading relay output"))?
            .ok_or_else(|| fail("relay-serve exited before READY"))?;
        let mut it = line.split_whitespace();
        let (Some("READY"), Some(a), Some(p)) = (it.next(), it.next(), it.next()) else {
            return Err(fail(format!("relay-serve: unexpected line {line:?}")));
        };
        let addr = a
            .parse()
            .map_err(|_| fail(format!("relay-serve: bad address {a:?}")))?;
        let peer = p
            .parse()
            .map_err(|_| fail(format!("relay-serve: bad peer ID {p:?}")))?;
        let http_addr = match it.next() {
            Some(h) => Some(
                h.parse()
                    .map_err(|_| fail(format!("relay-serve: bad HTTP address {h:?}")))?,
            ),
            None => None,
        };
        if http && http_addr.is_none() {
            return Err(fail(format!("relay-serve: no HTTP address in {line:?}")));
        }
        let pid = child.id().ok_or_else(|| fail("relay-serve: no PID"))?;
        Ok(RelayProcess {
            child,
            addr,
            peer,
            http_addr,
            pid,
            _stdin: stdin,
            _home: home,
        })
    }

    /// RSS in MB, from `/proc`.
    pub fn rss_mb(&self) -> Option<f64> {
        rss_mb(self.pid)
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// A TCP-only relay process in the options' network, unpinned (the
/// overload run and its curve).
async fn plain_relay_process(opts: &RelayOptions) -> Result<RelayProcess, BenchError> {
    RelayProcess::start_in(
        &opts.exe,
        opts.key_bits,
        false,
        None,
        false,
        &opts.net,
        None,
    )
    .await
}

/// The RSS of process `pid` in MB, from `/proc/<pid>/status`.
pub fn rss_mb(pid: u32) -> Option<f64> {
    Some(crate::util::proc_usage(pid)?.rss_mb)
}

/// The overload run against a relay process.
async fn overload(
    opts: &RelayOptions,
    o: &OverloadOptions,
    homes: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<RelayRow, BenchError> {
    let homes = homes.join("overload");
    if o.in_process {
        progress("relay overload: starting the relay (in this process)");
        let r = start_peer(&homes, "relay", opts.key_bits, |c| {
            c.listen(loopback()).relay(RelayConfig::server())
        })
        .await?;
        let addr = r.local_addr().ok_or_else(|| fail("relay has no address"))?;
        return overload_with(addr, std::process::id(), opts, o, &homes, progress).await;
    }
    progress("relay overload: starting the relay process");
    let mut relay = plain_relay_process(opts).await?;
    let result = overload_with(relay.addr, relay.pid, opts, o, &homes, progress).await;
    relay.kill().await;
    result
}

async fn overload_with(
    relay_addr: SocketAddr,
    pid: u32,
    opts: &RelayOptions,
    o: &OverloadOptions,
    homes: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<RelayRow, BenchError> {
    let seeds = vec![relay_addr];
    let kb = opts.key_bits;
    let edge = |name: String| {
        let seeds = seeds.clone();
        async move { start_peer(homes, &name, kb, |c| c.relay(RelayConfig::client(seeds))).await }
    };
    let sink = edge("sink".into()).await?;
    let mut senders = Vec::new();
    for i in 0..o.senders.max(1) {
        senders.push(edge(format!("sender{i}")).await?);
    }
    let (o1, o2) = (edge("other1".into()).await?, edge("other2".into()).await?);
    for p in std::iter::once(&sink).chain(&senders).chain([&o1, &o2]) {
        leased(p, "overload edge").await?;
    }
    progress("relay overload: edges leased, binding pipes");
    // The sink reads at `sink_msgs_per_s`.
    let sink_adv = pipe_adv("relay-overload-sink");
    let mut sink_in = sink.pipes().create_input_pipe(&sink_adv)?;
    let mut outs = Vec::new();
    for s in &senders {
        outs.push(
            s.pipes()
                .create_output_pipe(&sink_adv, &[sink.peer_id()], WAIT)
                .await?,
        );
    }
    // The other pair: o1 pings o2, o2 acks.
    let (adv2, adv1) = (pipe_adv("relay-other-2"), pipe_adv("relay-other-1"));
    let mut in2 = o2.pipes().create_input_pipe(&adv2)?;
    let mut in1 = o1.pipes().create_input_pipe(&adv1)?;
    let out12 = o1
        .pipes()
        .create_output_pipe(&adv2, &[o2.peer_id()], WAIT)
        .await?;
    let out21 = o2
        .pipes()
        .create_output_pipe(&adv1, &[o1.peer_id()], WAIT)
        .await?;

    let refused0: u64 = senders.iter().map(|s| s.stats().relay_refused).sum();
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(AtomicU64::new(0));
    let start = Instant::now();

    // Sink: paced reader.
    let sink_rate = o.sink_msgs_per_s.max(1) as f64;
    let d2 = delivered.clone();
    let sink_task = tokio::spawn(async move {
        let t0 = Instant::now();
        while let Some(_m) = sink_in.recv().await {
            let n = d2.fetch_add(1, Ordering::Relaxed) + 1;
            let due = t0 + Duration::from_secs_f64(n as f64 / sink_rate);
            tokio::time::sleep_until(due.into()).await;
        }
    });
    // Other pair's echo.
    let echo = tokio::spawn(async move {
        while let Some(m) = in2.recv().await {
            if out21.send(m.message).await.is_err() {
                break;
            }
        }
    });
    // Generators (open loop) feeding bounded send queues.
    let offered_rate = sink_rate * o.overload_factor.max(1) as f64;
    let per_sender = offered_rate / outs.len() as f64;
    let payload = bytes::Bytes::from(vec![5u8; o.size]);
    let Paced {
        offered,
        held_back,
        send_errors,
        tasks,
    } = spawn_paced(
        outs.into_iter().map(Arc::new),
        per_sender,
        move || Message::new().with(Element::bytes("", "d", payload.clone())),
        &stop,
    );
    // RSS sampler.
    let stop2 = stop.clone();
    let sampler = tokio::spawn(async move {
        let mut v = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        while !stop2.load(Ordering::Relaxed) {
            tick.tick().await;
            if let Some(mb) = rss_mb(pid) {
                v.push((mb * 100.0).round() / 100.0);
            }
        }
        v
    });
    // The other pair's ping-pongs, while the overload runs.
    let mut other_rtts = Vec::new();
    let mut other_timeouts = 0u64;
    let mut last_report = Instant::now();
    while start.elapsed() < o.duration {
        let t0 = Instant::now();
        let ping = Message::new().with(Element::bytes("", "p", &b"p"[..]));
        let ok = out12.send(ping).await.is_ok()
            && matches!(
                tokio::time::timeout(Duration::from_secs(2), in1.recv()).await,
                Ok(Some(_))
            );
        if ok {
            other_rtts.push(t0.elapsed().as_secs_f64() * 1e6);
        } else {
            other_timeouts += 1;
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            progress(&format!(
                "relay overload: {:.0} s, offered {}, delivered {}, relay RSS {:.1} MB",
                start.elapsed().as_secs_f64(),
                offered.load(Ordering::Relaxed),
                delivered.load(Ordering::Relaxed),
                rss_mb(pid).unwrap_or(0.0)
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let measured = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    // Let what was sent arrive (the sink keeps reading at its rate), for
    // at most DRAIN; what is still in flight then counts as not delivered.
    let delivered_in_time = delivered.load(Ordering::Relaxed);
    let drain_until = Instant::now() + DRAIN;
    settle(
        || Instant::now() >= drain_until,
        || delivered.load(Ordering::Relaxed),
        Duration::from_secs(1),
    )
    .await;
    for t in tasks {
        t.abort();
    }
    let samples = sampler.await.unwrap_or_default();
    sink_task.abort();
    echo.abort();
    let offered = offered.load(Ordering::Relaxed);
    let delivered = delivered.load(Ordering::Relaxed).min(offered);
    let held_back = held_back.load(Ordering::Relaxed);
    let refused: u64 = senders.iter().map(|s| s.stats().relay_refused).sum::<u64>() - refused0;
    let send_errors = send_errors.load(Ordering::Relaxed);
    let unaccounted = offered
        .saturating_sub(delivered)
        .saturating_sub(held_back)
        .saturating_sub(refused)
        .saturating_sub(send_errors);
    other_rtts.sort_by(f64::total_cmp);
    let row = RelayRow {
        scenario: "relay",
        path: RelayPath::TcpRelay.name(),
        layer: Layer::UnicastPipe.name(),
        size: o.size,
        run: "overload",
        offered_msgs_per_s: Some(offered as f64 / measured),
        delivered_msgs_per_s: Some(delivered_in_time as f64 / measured),
        loss_pct: Some(if offered == 0 {
            0.0
        } else {
            (offered - delivered) as f64 * 100.0 / offered as f64
        }),
        offered: Some(offered),
        delivered: Some(delivered),
        held_back: Some(held_back),
        refused_by_relay: Some(refused),
        send_errors: Some(send_errors),
        unaccounted: Some(unaccounted),
        relay_rss_mb_max: Some(samples.iter().copied().fold(0.0, f64::max)),
        relay_rss_mb_samples: Some(samples),
        other_edge_rtt_us_median: Some(percentile(&other_rtts, 0.5)),
        other_edge_answered: Some(other_rtts.len() as u64),
        other_edge_timeouts: Some(other_timeouts),
        duration_s: Some(measured),
        ..RelayRow::default()
    };
    progress(&format!(
        "relay overload: offered {:.0}/s delivered {:.0}/s loss {:.1}% (held back {held_back}, refused {refused}, other {unaccounted}); relay RSS max {:.1} MB; other edges RTT {:.0} us ({} timeouts)",
        row.offered_msgs_per_s.unwrap_or(0.0),
        row.delivered_msgs_per_s.unwrap_or(0.0),
        row.loss_pct.unwrap_or(0.0),
        row.relay_rss_mb_max.unwrap_or(0.0),
        row.other_edge_rtt_us_median.unwrap_or(0.0),
        other_timeouts,
    ));
    Ok(row)
}

/// The overload curve against a relay process (or one in this process
/// for tests): sender edges offer 1 KB messages through the relay to a
/// sink edge that reads as fast as it can. First the forwarding rate is
/// measured (the senders send back to back for
/// [`CurveOptions::calibrate`]), then each point offers a set rate, open
/// loop, for [`CurveOptions::point`]: one row per point with the rate
/// received at the sink, the loss (offered not delivered within the
/// point and a drain of at most [`DRAIN`]) and the relay's largest RSS
/// during the point.
async fn curve(
    opts: &RelayOptions,
    c: &CurveOptions,
    homes: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<RelayRow>, BenchError> {
    let homes = homes.join("curve");
    if c.in_process {
        progress("relay curve: starting the relay (in this process)");
        let r = start_peer(&homes, "relay", opts.key_bits, |c| {
            c.listen(loopback()).relay(RelayConfig::server())
        })
        .await?;
        let addr = r.local_addr().ok_or_else(|| fail("relay has no address"))?;
        return curve_with(addr, std::process::id(), opts, c, &homes, progress).await;
    }
    progress("relay curve: starting the relay process");
    let mut relay = plain_relay_process(opts).await?;
    let result = curve_with(relay.addr, relay.pid, opts, c, &homes, progress).await;
    relay.kill().await;
    result
}

/// Samples the RSS of `pid` every 250 ms until `stop`; the largest.
/// Open-loop senders at a set rate (the relay overload scenarios): one
/// generator per output pipe offers `per_sender` messages a second into a
/// bounded queue (a message the queue cannot take is held back and
/// counted), one task per pipe sends what the queue holds.
struct Paced {
    offered: Arc<AtomicU64>,
    held_back: Arc<AtomicU64>,
    send_errors: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn spawn_paced(
    outs: impl IntoIterator<Item = Arc<juxta::pipe::OutputPipe>>,
    per_sender: f64,
    msg: impl Fn() -> Message + Clone + Send + Sync + 'static,
    stop: &Arc<AtomicBool>,
) -> Paced {
    let offered = Arc::new(AtomicU64::new(0));
    let held_back = Arc::new(AtomicU64::new(0));
    let send_errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for out in outs {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(256);
        let errs = send_errors.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if out.send(m).await.is_err() {
                    errs.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
        let (stop, offered, held_back, msg) = (
            stop.clone(),
            offered.clone(),
            held_back.clone(),
            msg.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let mut n = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let due = (t0.elapsed().as_secs_f64() * per_sender) as u64;
                while n < due {
                    n += 1;
                    offered.fetch_add(1, Ordering::Relaxed);
                    if tx.try_send(msg()).is_err() {
                        held_back.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    Paced {
        offered,
        held_back,
        send_errors,
        tasks,
    }
}

fn rss_sampler(pid: u32, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<f64> {
    tokio::spawn(async move {
        let mut max = rss_mb(pid).unwrap_or(0.0);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            if let Some(mb) = rss_mb(pid) {
                max = max.max(mb);
            }
        }
        (max * 100.0).round() / 100.0
    })
}

async fn curve_with(
    relay_addr: SocketAddr,
    pid: u32,
    opts: &RelayOptions,
    c: &CurveOptions,
    homes: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<RelayRow>, BenchError> {
    let seeds = vec![relay_addr];
    let kb = opts.key_bits;
    let edge = |name: String| {
        let seeds = seeds.clone();
        async move { start_peer(homes, &name, kb, |c| c.relay(RelayConfig::client(seeds))).await }
    };
    let sink = edge("sink".into()).await?;
    let mut senders = Vec::new();
    for i in 0..c.senders.max(1) {
        senders.push(edge(format!("sender{i}")).await?);
    }
    for p in std::iter::once(&sink).chain(&senders) {
        leased(p, "curve edge").await?;
    }
    progress("relay curve: edges leased, binding pipes");
    let sink_adv = pipe_adv("relay-curve-sink");
    let mut sink_in = sink.pipes().create_input_pipe(&sink_adv)?;
    let mut outs = Vec::new();
    for s in &senders {
        outs.push(Arc::new(
            s.pipes()
                .create_output_pipe(&sink_adv, &[sink.peer_id()], WAIT)
                .await?,
        ));
    }
    let delivered = Arc::new(AtomicU64::new(0));
    let d2 = delivered.clone();
    let sink_task = tokio::spawn(async move {
        while sink_in.recv().await.is_some() {
            d2.fetch_add(1, Ordering::Relaxed);
        }
    });
    let payload = bytes::Bytes::from(vec![5u8; c.size]);
    let msg = move || Message::new().with(Element::bytes("", "d", payload.clone()));
    // Waits until nothing more arrives for 500 ms (at most DRAIN).
    let quiet = |delivered: Arc<AtomicU64>| async move {
        let until = Instant::now() + DRAIN;
        settle(
            || Instant::now() >= until,
            || delivered.load(Ordering::Relaxed),
            Duration::from_millis(500),
        )
        .await;
    };

    // The forwarding rate: every sender back to back.
    progress(&format!(
        "relay curve: measuring the forwarding rate ({:.0} s, {} senders back to back)",
        c.calibrate.as_secs_f64(),
        outs.len()
    ));
    let d0 = delivered.load(Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for out in &outs {
        let (out, stop, msg) = (out.clone(), stop.clone(), msg.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if out.send(msg()).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }));
    }
    let t0 = Instant::now();
    tokio::time::sleep(c.calibrate).await;
    let forwarding = (delivered.load(Ordering::Relaxed) - d0) as f64 / t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    quiet(delivered.clone()).await;
    progress(&format!(
        "relay curve: the relay forwards {forwarding:.0} messages/s"
    ));
    if forwarding <= 0.0 && c.rates.is_empty() {
        sink_task.abort();
        return Err(fail("relay curve: nothing was forwarded while calibrating"));
    }
    let points: Vec<(Option<f64>, f64)> = if c.rates.is_empty() {
        c.factors
            .iter()
            .map(|&f| (Some(f), f * forwarding))
            .collect()
    } else {
        c.rates
            .iter()
            .map(|&r| ((forwarding > 0.0).then(|| r / forwarding), r))
            .collect()
    };
    let mut rows = Vec::new();
    for (factor, rate) in points {
        progress(&format!(
            "relay curve: offering {rate:.0} messages/s for {:.0} s",
            c.point.as_secs_f64()
        ));
        let refused0: u64 = senders.iter().map(|s| s.stats().relay_refused).sum();
        let stop = Arc::new(AtomicBool::new(false));
        let per_sender = rate / outs.len() as f64;
        let Paced {
            offered,
            held_back,
            send_errors,
            tasks,
        } = spawn_paced(outs.iter().cloned(), per_sender, msg.clone(), &stop);
        let sampler = rss_sampler(pid, stop.clone());
        let d0 = delivered.load(Ordering::Relaxed);
        let start = Instant::now();
        tokio::time::sleep(c.point).await;
        let measured = start.elapsed().as_secs_f64();
        let in_time = delivered.load(Ordering::Relaxed) - d0;
        stop.store(true, Ordering::Relaxed);
        quiet(delivered.clone()).await;
        for t in tasks {
            t.abort();
        }
        let rss = sampler.await.unwrap_or(0.0);
        let offered = offered.load(Ordering::Relaxed);
        let got = (delivered.load(Ordering::Relaxed) - d0).min(offered);
        let held_back = held_back.load(Ordering::Relaxed);
        let refused = senders
            .iter()
            .map(|s| s.stats().relay_refused)
            .sum::<u64>()
            .saturating_sub(refused0);
        let send_errors = send_errors.load(Ordering::Relaxed);
        let row = RelayRow {
            scenario: "relay",
            path: RelayPath::TcpRelay.name(),
            layer: Layer::UnicastPipe.name(),
            size: c.size,
            run: "overload-curve",
            offered_msgs_per_s: Some(offered as f64 / measured),
            delivered_msgs_per_s: Some(in_time as f64 / measured),
            loss_pct: Some(if offered == 0 {
                0.0
            } else {
                (offered - got) as f64 * 100.0 / offered as f64
            }),
            offered: Some(offered),
            delivered: Some(got),
            held_back: Some(held_back),
            refused_by_relay: Some(refused),
            send_errors: Some(send_errors),
            unaccounted: Some(
                offered
                    .saturating_sub(got)
                    .saturating_sub(held_back)
                    .saturating_sub(refused)
                    .saturating_sub(send_errors),
            ),
            relay_rss_mb_max: Some(rss),
            offered_factor: factor.map(|f| (f * 100.0).round() / 100.0),
            forwarding_msgs_per_s: Some(forwarding),
            duration_s: Some(measured),
            ..RelayRow::default()
        };
        progress(&format!(
            "relay curve: offered {:.0}/s received {:.0}/s loss {:.1}% relay RSS max {rss:.1} MB",
            row.offered_msgs_per_s.unwrap_or(0.0),
            row.delivered_msgs_per_s.unwrap_or(0.0),
            row.loss_pct.unwrap_or(0.0),
        ));
        rows.push(row);
    }
    sink_task.abort();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_with_direct_first() {
        assert_eq!(
            RelayPath::parse_list("two-relays, tcp-relay,direct").unwrap(),
            vec![RelayPath::Direct, RelayPath::TwoRelays, RelayPath::TcpRelay]
        );
        let e = RelayPath::parse_list("bogus").unwrap_err().to_string();
        assert!(e.contains("http-relay"), "{e}");
    }

    #[test]
    fn ratios_are_against_direct_of_the_same_layer_and_size() {
        let row = |path, rtt, bw| RelayRow {
            scenario: "relay",
            path,
            layer: "socket",
            size: 1,
            run: "pingpong",
            rtt_us_median: Some(rtt),
            bandwidth_mb_s: Some(bw),
            ..RelayRow::default()
        };
        let mut rows = vec![row("direct", 10.0, 100.0), row("tcp-relay", 25.0, 50.0)];
        add_ratios(&mut rows);
        assert_eq!(rows[0].rtt_ratio_vs_direct, Some(1.0));
        assert_eq!(rows[1].rtt_ratio_vs_direct, Some(2.5));
        assert_eq!(rows[1].bandwidth_ratio_vs_direct, Some(0.5));
        let j = serde_json::to_value(&rows[1]).unwrap();
        assert_eq!(j["path"], "tcp-relay");
        assert!(j.get("loss_pct").is_none());
    }
}
