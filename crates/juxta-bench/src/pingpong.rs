//! The ping-pong scenario: RTT and bandwidth per layer against plain TCP.
//!
//! Method (JuxTest's bidirectional bandwidth test): send a message, wait for
//! a 1-byte ack; warm up, then 5 timed runs of 100 consecutive pairs; report
//! the median and p99 RTT and `bandwidth = size / median RTT`. The client is
//! this process, the responder another process (`juxta bench-responder`);
//! layers are measured interleaved (tcp, layer, tcp, layer, ...) so drift
//! hits the baseline and the layer alike.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use juxta::{Listener, Messenger, Peer, PeerConfig};
use juxta_proto::message::{Element, Message};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

use crate::BenchError;

/// Service the responder listens on.
pub const BENCH_SERVICE: &str = "JuxtaBench";

/// A layer the ping-pong can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// Plain TCP: 4-byte length + payload, 1-byte ack. The bound.
    Tcp,
    /// Juxta endpoint messages, compact framing between Juxta peers.
    Endpoint,
    /// Juxta endpoint messages in JXTA framing with CBJX, as JXSE speaks.
    EndpointCompat,
}

impl Layer {
    /// Parses a layer name.
    pub fn parse(s: &str) -> Result<Layer, BenchError> {
        match s {
            "tcp" => Ok(Layer::Tcp),
            "endpoint" => Ok(Layer::Endpoint),
            "endpoint-compat" => Ok(Layer::EndpointCompat),
            _ => Err(BenchError::UnknownLayer(s.to_string())),
        }
    }
    /// The layer's name.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Tcp => "tcp",
            Layer::Endpoint => "endpoint",
            Layer::EndpointCompat => "endpoint-compat",
        }
    }
}

/// CPU placement of the two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pin {
    /// Both on CPU 0.
    Same,
    /// Client on CPU 0, responder on CPU 1.
    Split,
    /// No affinity.
    None,
}

impl Pin {
    /// Parses `same|split|none`.
    pub fn parse(s: &str) -> Result<Pin, BenchError> {
        match s {
            "same" => Ok(Pin::Same),
            "split" => Ok(Pin::Split),
            "none" => Ok(Pin::None),
            _ => Err(BenchError::BadOption(format!(
                "--pin {s:?} (expected same, split or none)"
            ))),
        }
    }
    fn client_core(self) -> Option<usize> {
        match self {
            Pin::None => None,
            _ => Some(0),
        }
    }
    fn responder_core(self) -> Option<usize> {
        match self {
            Pin::None => None,
            Pin::Same => Some(0),
            Pin::Split => Some(1),
        }
    }
}

/// Pins the calling thread (and threads it creates later) to `core`.
pub fn pin_current(core: Option<usize>) {
    if let Some(c) = core {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        if let Some(id) = ids.into_iter().find(|i| i.id == c) {
            core_affinity::set_for_current(id);
        }
    }
}

/// Options of a ping-pong run.
#[derive(Debug, Clone, Serialize)]
pub struct PingPongOptions {
    /// Layers besides `tcp` (always measured).
    pub layers: Vec<Layer>,
    /// Payload sizes in bytes.
    pub sizes: Vec<usize>,
    /// CPU placement.
    pub pin: Pin,
    /// Warm-up pairs (capped at 256 MiB of payload per layer and size).
    pub warmup: usize,
    /// Timed runs.
    pub runs: usize,
    /// Pairs per timed run.
    pub pairs: usize,
    /// RSA key size of the bench peers.
    pub key_bits: usize,
}

impl Default for PingPongOptions {
    fn default() -> Self {
        PingPongOptions {
            layers: vec![Layer::Endpoint, Layer::EndpointCompat],
            sizes: vec![1, 1024, 16384, 65536, 262_144, 1_048_576, 4_194_304],
            pin: Pin::Same,
            warmup: 1000,
            runs: 5,
            pairs: 100,
            key_bits: 1024,
        }
    }
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct PingPongRow {
    /// Always `pingpong`.
    pub scenario: &'static str,
    /// `tcp` for the baseline, `juxta` otherwise.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// Layer name.
    pub layer: &'static str,
    /// Payload bytes.
    pub size: usize,
    /// Median RTT (µs).
    pub rtt_us_median: f64,
    /// 99th percentile RTT (µs).
    pub rtt_us_p99: f64,
    /// size / median RTT, 10^6 bytes/s.
    pub bandwidth_mb_s: f64,
    /// Bytes one message of this payload occupies on the socket.
    pub wire_bytes: u64,
    /// Median RTT over the tcp median of the same size (1.0 for tcp).
    pub rtt_ratio_vs_tcp: f64,
    /// Bandwidth over the tcp bandwidth of the same size.
    pub bandwidth_ratio_vs_tcp: f64,
    /// Spread of the per-run medians, (max-min)/median.
    pub run_spread: f64,
    /// CPU placement.
    pub pin: Pin,
    /// Timed samples.
    pub samples: usize,
}

/// The client side of one layer.
enum Client {
    Tcp {
        stream: TcpStream,
    },
    Endpoint {
        messenger: Messenger,
        acks: Listener,
        _peer: Peer,
        _home: tempfile::TempDir,
    },
}

impl Client {
    async fn connect(
        layer: Layer,
        addr: SocketAddr,
        key_bits: usize,
    ) -> Result<Client, BenchError> {
        match layer {
            Layer::Tcp => {
                let stream = TcpStream::connect(addr)
                    .await
                    .map_err(|source| BenchError::Io {
                        what: format!("connecting to tcp responder {addr}"),
                        source,
                    })?;
                stream.set_nodelay(true).map_err(|source| BenchError::Io {
                    what: "set_nodelay".into(),
                    source,
                })?;
                Ok(Client::Tcp { stream })
            }
            Layer::Endpoint | Layer::EndpointCompat => {
                let home = tempfile::tempdir().map_err(|source| BenchError::Io {
                    what: "creating a temporary home".into(),
                    source,
                })?;
                let mut cfg = PeerConfig::new(home.path()).compact(layer == Layer::Endpoint);
                cfg.key_bits = key_bits;
                let peer = Peer::start(cfg).await?;
                let acks = peer.listen(BENCH_SERVICE, Some("ack"))?;
                let messenger = peer.connect(addr).await?;
                if layer == Layer::Endpoint
                    && !messenger.wait_compact(Duration::from_secs(10)).await
                {
                    return Err(BenchError::Responder {
                        layer: layer.name().into(),
                        reason: "compact framing was not agreed".into(),
                    });
                }
                Ok(Client::Endpoint {
                    messenger,
                    acks,
                    _peer: peer,
                    _home: home,
                })
            }
        }
    }

    /// One message/ack pair; returns the bytes the message took on the wire.
    async fn pair(&mut self, payload: &Bytes) -> Result<u64, BenchError> {
        match self {
            Client::Tcp { stream } => {
                let hdr = (payload.len() as u32).to_be_bytes();
                let total = 4 + payload.len();
                juxta::transport::tcp::write_all_vectored(stream, &[&hdr[..], &payload[..]])
                    .await
                    .map_err(|source| BenchError::Io {
                        what: "tcp write".into(),
                        source,
                    })?;
                let mut ack = [0u8; 1];
                stream
                    .read_exact(&mut ack)
                    .await
                    .map_err(|source| BenchError::Io {
                        what: "tcp ack".into(),
                        source,
                    })?;
                Ok(total as u64)
            }
            Client::Endpoint {
                messenger, acks, ..
            } => {
                let n = messenger
                    .send(
                        BENCH_SERVICE,
                        Some("ping"),
                        Message::new().with(Element::bytes("bench", "data", payload.clone())),
                    )
                    .await?;
                acks.recv().await.ok_or_else(|| BenchError::Responder {
                    layer: "endpoint".into(),
                    reason: "ack listener closed".into(),
                })?;
                Ok(n as u64)
            }
        }
    }
}

/// A responder child process.
struct Responder {
    child: Child,
    addr: SocketAddr,
}

async fn spawn_responder(
    exe: &std::path::Path,
    layer: Layer,
    opts: &PingPongOptions,
) -> Result<Responder, BenchError> {
    let mut cmd = Command::new(exe);
    cmd.arg("bench-responder")
        .arg("--layer")
        .arg(layer.name())
        .arg("--key-bits")
        .arg(opts.key_bits.to_string())
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(c) = opts.pin.responder_core() {
        cmd.arg("--core").arg(c.to_string());
    }
    let mut child = cmd.spawn().map_err(|source| BenchError::Io {
        what: format!("starting responder {}", exe.display()),
        source,
    })?;
    let stdout = child.stdout.take().ok_or_else(|| BenchError::Responder {
        layer: layer.name().into(),
        reason: "no stdout".into(),
    })?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .map_err(|_| BenchError::Responder {
            layer: layer.name().into(),
            reason: "no READY line within 30 s".into(),
        })?
        .map_err(|source| BenchError::Io {
            what: "reading responder output".into(),
            source,
        })?
        .ok_or_else(|| BenchError::Responder {
            layer: layer.name().into(),
            reason: "exited before READY".into(),
        })?;
    let addr = line
        .strip_prefix("READY ")
        .and_then(|a| a.trim().parse().ok())
        .ok_or_else(|| BenchError::Responder {
            layer: layer.name().into(),
            reason: format!("unexpected output {line:?}"),
        })?;
    Ok(Responder { child, addr })
}

/// Runs the responder side of `layer` until the parent closes its stdin or
/// kills it: prints `READY <addr>` once listening.
pub async fn run_responder(layer: Layer, key_bits: usize) -> Result<(), BenchError> {
    match layer {
        Layer::Tcp => {
            let l = TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|source| BenchError::Io {
                    what: "binding tcp responder".into(),
                    source,
                })?;
            println!("READY {}", l.local_addr().expect("bound"));
            loop {
                let (mut s, _) = l.accept().await.map_err(|source| BenchError::Io {
                    what: "accept".into(),
                    source,
                })?;
                let _ = s.set_nodelay(true);
                tokio::spawn(async move {
                    // Read like the layers do: into a buffer reserved for the
                    // whole message, in as few reads as the kernel allows.
                    let mut buf = bytes::BytesMut::with_capacity(1 << 16);
                    loop {
                        while buf.len() < 4 {
                            if matches!(s.read_buf(&mut buf).await, Ok(0) | Err(_)) {
                                return;
                            }
                        }
                        let n = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                        if buf.capacity() < 4 + n {
                            buf.reserve(4 + n - buf.len());
                        }
                        while buf.len() < 4 + n {
                            if matches!(s.read_buf(&mut buf).await, Ok(0) | Err(_)) {
                                return;
                            }
                        }
                        let _ = buf.split_to(4 + n);
                        if s.write_all(&[1]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
        Layer::Endpoint | Layer::EndpointCompat => {
            let home = tempfile::tempdir().map_err(|source| BenchError::Io {
                what: "creating a temporary home".into(),
                source,
            })?;
            let mut cfg = PeerConfig::new(home.path())
                .listen("127.0.0.1:0".parse().expect("literal"))
                .compact(layer == Layer::Endpoint);
            cfg.key_bits = key_bits;
            let peer = Peer::start(cfg).await?;
            let mut pings = peer.listen(BENCH_SERVICE, Some("ping"))?;
            println!("READY {}", peer.local_addr().expect("listening"));
            let ack = Bytes::from_static(b"\x01");
            let mut back: Option<Messenger> = None;
            while let Some(d) = pings.recv().await {
                let Some(from) = d.from else { continue };
                if back.as_ref().map(|m| m.remote()) != Some(from) {
                    back = Some(peer.messenger(&from)?);
                }
                if let Some(m) = &back {
                    m.send(
                        BENCH_SERVICE,
                        Some("ack"),
                        Message::new().with(Element::bytes("bench", "ack", ack.clone())),
                    )
                    .await?;
                }
            }
            Ok(())
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

struct Samples {
    all: Vec<f64>,
    run_medians: Vec<f64>,
    wire: u64,
}

async fn timed_run(
    client: &mut Client,
    payload: &Bytes,
    pairs: usize,
    s: &mut Samples,
) -> Result<(), BenchError> {
    let mut run = Vec::with_capacity(pairs);
    for _ in 0..pairs {
        let t = Instant::now();
        s.wire = client.pair(payload).await?;
        run.push(t.elapsed().as_secs_f64() * 1e6);
    }
    s.all.extend_from_slice(&run);
    run.sort_by(f64::total_cmp);
    s.run_medians.push(percentile(&run, 0.5));
    Ok(())
}

/// Runs the ping-pong: spawns one responder per layer (re-executing `exe`),
/// measures every size interleaved with the tcp baseline, and returns one
/// row per (layer, size). `progress` is called with a line per step.
pub async fn run(
    exe: &std::path::Path,
    opts: &PingPongOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<PingPongRow>, BenchError> {
    pin_current(opts.pin.client_core());
    let mut layers = vec![Layer::Tcp];
    for l in &opts.layers {
        if !layers.contains(l) {
            layers.push(*l);
        }
    }
    let mut responders = Vec::new();
    let mut clients = Vec::new();
    for &l in &layers {
        let r = spawn_responder(exe, l, opts).await?;
        clients.push(Client::connect(l, r.addr, opts.key_bits).await?);
        responders.push(r);
    }
    let mut rows = Vec::new();
    for &size in &opts.sizes {
        let payload = Bytes::from((0..size).map(|i| (i * 31 + 7) as u8).collect::<Vec<u8>>());
        let warmup = opts.warmup.min((256 << 20) / size.max(1)).max(10);
        for (i, c) in clients.iter_mut().enumerate() {
            progress(&format!(
                "size {size}: warm-up {} ({warmup} pairs)",
                layers[i].name()
            ));
            for _ in 0..warmup {
                c.pair(&payload).await?;
            }
        }
        let mut samples: Vec<Samples> = layers
            .iter()
            .map(|_| Samples {
                all: Vec::new(),
                run_medians: Vec::new(),
                wire: 0,
            })
            .collect();
        for run in 0..opts.runs {
            progress(&format!("size {size}: timed run {}/{}", run + 1, opts.runs));
            // Interleaved: tcp, layer, tcp, layer, ...
            if clients.len() == 1 {
                timed_run(&mut clients[0], &payload, opts.pairs, &mut samples[0]).await?;
            }
            for i in 1..clients.len() {
                let (tcp, rest) = clients.split_at_mut(1);
                timed_run(&mut tcp[0], &payload, opts.pairs, &mut samples[0]).await?;
                timed_run(&mut rest[i - 1], &payload, opts.pairs, &mut samples[i]).await?;
            }
        }
        let mut tcp_median = 0.0;
        let mut tcp_bw = 0.0;
        for (i, s) in samples.iter_mut().enumerate() {
            s.all.sort_by(f64::total_cmp);
            let median = percentile(&s.all, 0.5);
            let bw = size as f64 / median;
            if i == 0 {
                tcp_median = median;
                tcp_bw = bw;
            }
            let (lo, hi) = s
                .run_medians
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &m| (a.min(m), b.max(m)));
            rows.push(PingPongRow {
                scenario: "pingpong",
                implementation: if i == 0 { "tcp" } else { "juxta" },
                layer: layers[i].name(),
                size,
                rtt_us_median: median,
                rtt_us_p99: percentile(&s.all, 0.99),
                bandwidth_mb_s: bw,
                wire_bytes: s.wire,
                rtt_ratio_vs_tcp: median / tcp_median,
                bandwidth_ratio_vs_tcp: if tcp_bw > 0.0 { bw / tcp_bw } else { 0.0 },
                run_spread: if median > 0.0 {
                    (hi - lo) / median
                } else {
                    0.0
                },
                pin: opts.pin,
                samples: s.all.len(),
            });
        }
    }
    for mut r in responders {
        let _ = r.child.kill().await;
    }
    Ok(rows)
}
