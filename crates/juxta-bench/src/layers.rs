//! The layers the scenarios drive: the responder that serves each of them
//! (a child process, `juxta bench-responder`, or a thread in tests), and
//! the client side of each.
//!
//! One responder serves every scenario of its layer. Message layers tell
//! the kinds of traffic apart by element name: a message with a `bench:tput`
//! element is one-way data (counted by the id in its payload, no reply), one
//! with `bench:ctl` is a control message (begin a run, sync, end a run), and
//! anything else is a ping, answered by a 1-byte `bench:ack`. Byte streams
//! (plain TCP, JXTA sockets in framed mode) use a 4-byte header whose two top
//! bits say the same (see [`Frame`]). A JXTA socket starts with a 4-byte
//! preamble: a ping size (every ping is exactly that many bytes, answered by
//! one byte) or [`SOCKET_FRAMED`] for the framed protocol.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use juxta::pipe::bidi::BidiPipe;
use juxta::pipe::{InputPipe, OutputPipe};
use juxta::relay::RelayConfig;
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Listener, Messenger, Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::{PeerId, PipeId};
use juxta_proto::message::{Element, Message};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::process::{Child, Command};

use crate::socket_bytes::ClientSockets;
use crate::util::{pattern, Report, SeqCounter};
use crate::BenchError;

/// Service the endpoint responder listens on (`ping`) and the client's acks
/// arrive at (`ack`).
pub const BENCH_SERVICE: &str = "JuxtaBench";
/// Namespace of the bench's elements.
pub const NS: &str = "bench";
const ELEM_DATA: &str = "data";
const ELEM_TPUT: &str = "tput";
const ELEM_CTL: &str = "ctl";
const ELEM_ACK: &str = "ack";
const ELEM_REP: &str = "rep";
/// How long set-up steps (connect, resolve, handshakes) may take.
const SETUP_WAIT: Duration = Duration::from_secs(30);
/// How long a control reply (sync, end-of-run report) may take.
const REPLY_WAIT: Duration = Duration::from_secs(120);

/// Stream header bit: one-way data, counted, not answered.
const HDR_COUNTED: u32 = 0x4000_0000;
/// Stream header bit: a control frame (kind in the low byte, 8-byte argument).
const HDR_CONTROL: u32 = 0x8000_0000;
const LEN_MASK: u32 = 0x3FFF_FFFF;
/// Socket preamble selecting the framed protocol.
pub const SOCKET_FRAMED: u32 = 0xFFFF_FFFF;

/// Largest UDP payload over IPv4 (65,535 - 20 - 8).
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// How long the udp lane waits for an answer before failing (a lost
/// datagram on loopback means something is wrong; never hang).
const UDP_WAIT: Duration = Duration::from_secs(5);

/// A layer a scenario can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// Plain TCP: 4-byte length + payload, 1-byte ack. The bound.
    Tcp,
    /// Juxta endpoint messages, compact framing between Juxta peers.
    Endpoint,
    /// Juxta endpoint messages in JXTA framing with CBJX, as JXSE speaks.
    EndpointCompat,
    /// A unicast pipe; the ack comes back on a second unicast pipe.
    UnicastPipe,
    /// A secure (TLS 1.3) pipe; the ack comes back on a second secure pipe.
    SecurePipe,
    /// A bidirectional pipe; the ack comes back on the same pipe.
    BidiPipe,
    /// A JXTA socket; the ack is one byte written back. Between Juxta
    /// peers on compact framing it runs stream mode.
    Socket,
    /// The `socket` lane with its responder reading each ping through
    /// [`JxtaSocket::read_chunk`] (the buffers the connection read the
    /// bytes into, handed over without a copy) instead of `read_exact`
    /// into a buffer of its own (`AsyncRead`, one copy more). The `tcp`
    /// lane's responder reads straight into its own buffer: each side
    /// makes one copy, out of the kernel.
    SocketChunk,
    /// A JXTA socket over JXTA framing with CBJX, as towards JXSE: the
    /// `jxtarel` engine.
    SocketCompat,
    /// A unicast pipe in JXTA framing with CBJX, as towards JXSE (the
    /// like-for-like peer of JXSE's unicast pipe).
    PipeCompat,
    /// `endpoint-compat` without CBJX signatures (beside JXSE with CBJX off).
    EndpointCompatNoCbjx,
    /// `pipe-compat` without CBJX signatures.
    PipeCompatNoCbjx,
    /// `socket-compat` without CBJX signatures.
    SocketCompatNoCbjx,
    /// Plain UDP datagrams (payloads up to [`MAX_UDP_PAYLOAD`]), a 1-byte
    /// datagram back: the unreliable socket de Souza measured. Its rows
    /// have `impl = "udp"`.
    Udp,
    /// ZeroMQ (libzmq) REQ/REP over TCP ([`crate::stacks`]); rows have
    /// `impl = "zmq"`.
    ZmqReqRep,
    /// rust-libp2p over TCP with noise and yamux, one stream kept open
    /// ([`crate::stacks`]); rows have `impl = "libp2p"`.
    Libp2p,
    /// rust-libp2p over QUIC (v1, TLS 1.3), one stream kept open; rows
    /// have `impl = "libp2p"`, `layer = "quic"`. Its two processes run in
    /// two network namespaces of their own joined by a veth, where the
    /// kernel counts its UDP bytes ([`crate::socket_bytes`]).
    Libp2pQuic,
    /// Open MPI over its TCP transport; rows `impl = "mpi"`, `layer = "tcp"`.
    MpiTcp,
    /// Open MPI over shared memory; rows `impl = "mpi"`, `layer = "sm"`.
    MpiSm,
    /// A secure JXTA socket: TLS 1.3 over a socket (stream mode between
    /// Juxta peers); the ack is one byte written back.
    SecureSocket,
    /// A propagate pipe to 1..n receivers, each acking on a unicast pipe.
    Propagate,
    /// A unicast pipe whose every message passes one relay (`juxta
    /// relay-serve` over TCP, its own process placed like the responder):
    /// the client and the responder each lease the relay, the responder
    /// does not listen, and neither connects to the other. Beside
    /// `unicast-pipe` in the same run it is the like-for-like measure of
    /// what a relay costs (issue #12): the same harness, the same two
    /// edge processes, the relay the only difference.
    RelayedPipe,
    /// JXSE only ([`crate::jxse`]): a JXTA socket in JXSE's unreliable
    /// mode (`stream = false`: each write one `JXTASOC:data` message, no
    /// jxtarel); the ack is one byte written back. A lost message fails
    /// the run (no ack within the harness's timeout), never hangs it.
    SocketUnreliable,
    /// JXSE only ([`crate::jxse`]): a bidirectional pipe with reliability
    /// on (jxtarel); the ack comes back on the same pipe.
    BidiPipeReliable,
}

impl Layer {
    /// Every layer, in report order.
    pub const ALL: [Layer; 22] = [
        Layer::Tcp,
        Layer::Endpoint,
        Layer::EndpointCompat,
        Layer::EndpointCompatNoCbjx,
        Layer::UnicastPipe,
        Layer::PipeCompat,
        Layer::PipeCompatNoCbjx,
        Layer::SecurePipe,
        Layer::BidiPipe,
        Layer::Socket,
        Layer::SocketChunk,
        Layer::SocketCompat,
        Layer::SocketCompatNoCbjx,
        Layer::SecureSocket,
        Layer::Propagate,
        Layer::RelayedPipe,
        Layer::Udp,
        Layer::ZmqReqRep,
        Layer::Libp2p,
        Layer::Libp2pQuic,
        Layer::MpiTcp,
        Layer::MpiSm,
    ];

    /// The layers only JXSE is measured on (through its harness,
    /// [`crate::jxse`]): its unreliable socket and its reliable bidi pipe,
    /// de Souza's other two JXTA routines. Not in [`Layer::ALL`].
    pub const JXSE_ONLY: [Layer; 2] = [Layer::SocketUnreliable, Layer::BidiPipeReliable];

    /// Every layer name [`Layer::parse`] takes, comma-separated.
    pub fn known_names() -> String {
        Layer::ALL
            .into_iter()
            .chain(Layer::JXSE_ONLY)
            .map(Layer::name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses a layer name (of [`Layer::ALL`] or [`Layer::JXSE_ONLY`]).
    pub fn parse(s: &str) -> Result<Layer, BenchError> {
        Layer::ALL
            .into_iter()
            .chain(Layer::JXSE_ONLY)
            .find(|l| l.name() == s)
            .ok_or_else(|| BenchError::UnknownLayer(s.to_string()))
    }

    /// The layer's name.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Tcp => "tcp",
            Layer::Endpoint => "endpoint",
            Layer::EndpointCompat => "endpoint-compat",
            Layer::UnicastPipe => "unicast-pipe",
            Layer::SecurePipe => "secure-pipe",
            Layer::BidiPipe => "bidi-pipe",
            Layer::Socket => "socket",
            Layer::SocketChunk => "socket-chunk",
            Layer::SocketCompat => "socket-compat",
            Layer::PipeCompat => "pipe-compat",
            Layer::EndpointCompatNoCbjx => "endpoint-compat-nocbjx",
            Layer::PipeCompatNoCbjx => "pipe-compat-nocbjx",
            Layer::SocketCompatNoCbjx => "socket-compat-nocbjx",
            Layer::SecureSocket => "secure-socket",
            Layer::Propagate => "propagate",
            Layer::RelayedPipe => "relayed-pipe",
            Layer::Udp => "udp",
            Layer::ZmqReqRep => "tcp-req-rep",
            Layer::Libp2p => "tcp-noise-yamux",
            Layer::Libp2pQuic => "quic",
            Layer::MpiTcp => "mpi-tcp",
            Layer::MpiSm => "mpi-sm",
            Layer::SocketUnreliable => "socket-unreliable",
            Layer::BidiPipeReliable => "bidi-pipe-reliable",
        }
    }

    /// The RSA key size the layer's peers use: secure pipes need 2048 bits
    /// (rustls refuses smaller keys), the rest keep the bench's setting.
    pub fn key_bits(self, base: usize) -> usize {
        match self {
            Layer::SecurePipe | Layer::SecureSocket => base.max(2048),
            _ => base,
        }
    }

    /// The socket settings of a socket layer (TLS for `secure-socket`).
    fn socket_config(self) -> SocketConfig {
        SocketConfig {
            secure: self == Layer::SecureSocket,
            ..SocketConfig::default()
        }
    }

    fn compact(self) -> bool {
        self.cbjx().is_none()
    }

    /// For layers in JXTA framing (as towards JXSE): whether messages
    /// carry CBJX signatures. `None` for compact layers and `tcp`.
    pub fn cbjx(self) -> Option<bool> {
        match self {
            Layer::EndpointCompat | Layer::PipeCompat | Layer::SocketCompat => Some(true),
            Layer::EndpointCompatNoCbjx | Layer::PipeCompatNoCbjx | Layer::SocketCompatNoCbjx => {
                Some(false)
            }
            _ => None,
        }
    }

    /// Whether the layer can carry a payload of `size` bytes.
    pub fn carries(self, size: usize) -> bool {
        self != Layer::Udp || size <= MAX_UDP_PAYLOAD
    }

    /// The `impl` of this layer's rows when Juxta is measured: `tcp` and
    /// `udp` are the sockets themselves.
    pub fn implementation(self) -> Option<&'static str> {
        match self {
            Layer::Tcp => Some("tcp"),
            Layer::Udp => Some("udp"),
            _ => self.stack().map(crate::stacks::Stack::name),
        }
    }

    /// The other stack this lane runs, if it is one ([`crate::stacks`]).
    pub fn stack(self) -> Option<crate::stacks::Stack> {
        match self {
            Layer::ZmqReqRep => Some(crate::stacks::Stack::Zmq),
            Layer::Libp2p => Some(crate::stacks::Stack::Libp2p),
            Layer::Libp2pQuic => Some(crate::stacks::Stack::Libp2pQuic),
            Layer::MpiTcp => Some(crate::stacks::Stack::MpiTcp),
            Layer::MpiSm => Some(crate::stacks::Stack::MpiSm),
            _ => None,
        }
    }

    /// Checks that `layer` is one of `allowed` for `scenario`.
    pub fn check(self, scenario: &str, allowed: &[Layer]) -> Result<Layer, BenchError> {
        if allowed.contains(&self) {
            Ok(self)
        } else {
            Err(BenchError::Unsupported {
                layer: self.name().into(),
                scenario: scenario.into(),
                allowed: allowed
                    .iter()
                    .map(|l| l.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    }
}

/// Parses a comma-separated layer list, always putting `tcp` first (the
/// baseline) and dropping duplicates.
pub fn parse_layers(s: &str, scenario: &str, allowed: &[Layer]) -> Result<Vec<Layer>, BenchError> {
    let mut out = vec![Layer::Tcp];
    out.extend(crate::util::parse_list(s, Layer::parse)?);
    checked_unique(&out, scenario, allowed)
}

/// `layers` in order without duplicates, each checked to be one `scenario`
/// measures.
pub fn checked_unique(
    layers: &[Layer],
    scenario: &str,
    allowed: &[Layer],
) -> Result<Vec<Layer>, BenchError> {
    let mut out: Vec<Layer> = Vec::with_capacity(layers.len());
    for &l in layers {
        let l = l.check(scenario, allowed)?;
        if !out.contains(&l) {
            out.push(l);
        }
    }
    Ok(out)
}

/// What a responder announces once it serves: `READY <addr>[,<addr>...]
/// [<pipe URN>...]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ready {
    /// Listening addresses (one per receiver peer).
    pub addrs: Vec<SocketAddr>,
    /// Pipe IDs: the pipe pinged (or bound), then the ack pipe if any.
    pub pipes: Vec<PipeId>,
    /// The responder's peer ID, when the client must reach it by ID
    /// rather than by address (`relayed-pipe`: `addrs` is then the
    /// relay's).
    pub peer: Option<PeerId>,
}

impl Ready {
    /// The announcement line.
    pub fn to_line(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(|a| a.to_string()).collect();
        let mut s = format!("READY {}", addrs.join(","));
        for p in &self.pipes {
            s.push(' ');
            s.push_str(&p.to_string());
        }
        if let Some(p) = &self.peer {
            s.push_str(" peer=");
            s.push_str(&p.to_string());
        }
        s
    }

    /// Parses [`Ready::to_line`].
    pub fn parse(line: &str) -> Option<Ready> {
        let mut it = line.trim().strip_prefix("READY ")?.split_whitespace();
        let addrs = it
            .next()?
            .split(',')
            .map(|a| a.parse().ok())
            .collect::<Option<Vec<SocketAddr>>>()?;
        let mut pipes = Vec::new();
        let mut peer = None;
        for tok in it {
            match tok.strip_prefix("peer=") {
                Some(p) => peer = Some(p.parse().ok()?),
                None => pipes.push(tok.parse().ok()?),
            }
        }
        (!addrs.is_empty()).then_some(Ready { addrs, pipes, peer })
    }

    fn pipe(&self, i: usize, layer: Layer) -> Result<PipeId, BenchError> {
        self.pipes
            .get(i)
            .copied()
            .ok_or_else(|| BenchError::Responder {
                layer: layer.name().into(),
                reason: format!("READY line names no pipe #{i}"),
            })
    }
}

/// What a responder serves.
#[derive(Debug, Clone)]
pub struct ResponderSpec {
    /// The layer.
    pub layer: Layer,
    /// RSA key size of its peers (before [`Layer::key_bits`]).
    pub key_bits: usize,
    /// Receiver peers (propagate only).
    pub receivers: usize,
    /// Socket layers: the stream window (`None`: the socket's default).
    pub socket_window: Option<u64>,
    /// Address it binds (127.0.0.1 unless a network profile says).
    pub bind: IpAddr,
    /// Network namespace it runs in (`None`: the caller's).
    pub netns: Option<String>,
    /// Directory the responder's peers make their homes in (`None`: the
    /// system's temporary directory). A process responder is given one its
    /// parent owns: the responder is killed when it is stopped, and its own
    /// temporary homes would outlive it.
    pub homes: Option<std::path::PathBuf>,
    /// `relayed-pipe`: the relay its peer leases (`None`: it starts one
    /// in its own process, as a thread responder does).
    pub relay: Option<SocketAddr>,
}

impl ResponderSpec {
    /// A responder for `layer` on 127.0.0.1 in this namespace.
    pub fn new(layer: Layer, key_bits: usize, receivers: usize) -> ResponderSpec {
        ResponderSpec {
            layer,
            key_bits,
            receivers,
            socket_window: None,
            bind: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            netns: None,
            homes: None,
            relay: None,
        }
    }

    /// With the socket layers' stream window bounded at `window` bytes.
    pub fn socket_window(mut self, window: Option<u64>) -> ResponderSpec {
        self.socket_window = window;
        self
    }

    /// Placed as `net` says (address and namespace of the responder side).
    pub fn on(mut self, net: &crate::net::Net) -> ResponderSpec {
        self.bind = net.responder_ip;
        self.netns = net.responder_ns.clone();
        self
    }
}

/// Where responders run.
#[derive(Debug, Clone)]
pub enum Host {
    /// A child process: `<exe> bench-responder ...` (the `juxta` binary).
    Process(PathBuf),
    /// A thread of this process with its own runtime (tests).
    Thread,
    /// The bench listener of `juxta peer --bench` on another host
    /// ([`crate::remote`]): it starts `juxta bench-responder` there, bound
    /// to the address this side reached it at.
    Remote(crate::remote::RemoteHost),
}

impl Host {
    /// The remote host, when responders run on another machine.
    pub fn remote(&self) -> Option<&crate::remote::RemoteHost> {
        match self {
            Host::Remote(r) => Some(r),
            _ => None,
        }
    }
}

/// A running responder; dropping it stops it.
pub struct Responder {
    /// What it announced.
    pub ready: Ready,
    child: Option<Child>,
    _stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// A remote responder's control connection (closing it stops it).
    control: Option<TcpStream>,
    /// The write end of an `--exit-with-parent` responder's stdin (held
    /// here: `Child::wait` would close it).
    _stdin: Option<tokio::process::ChildStdin>,
    /// A process responder's peer homes, removed when this is dropped
    /// (after the child: fields drop in order).
    _homes: Option<tempfile::TempDir>,
    /// The relay process of a `relayed-pipe` responder (killed when
    /// dropped, after the responder).
    _relay: Option<Box<crate::relay::RelayProcess>>,
}

impl Responder {
    /// Resolves when a process responder has exited (never for the
    /// others).
    pub async fn exited(&mut self) {
        match self.child.as_mut() {
            Some(c) => {
                let _ = c.wait().await;
            }
            None => std::future::pending().await,
        }
    }

    /// Stops the responder (kills the child process, or closes the
    /// control connection of a remote one, whose host then kills it).
    pub async fn stop(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
        if let Some(mut c) = self.control.take() {
            let _ = c.shutdown().await;
        }
    }
}

/// Starts a responder for `spec` on `host`, pinned to `core` (processes).
pub async fn spawn_responder(
    host: &Host,
    spec: &ResponderSpec,
    core: Option<usize>,
) -> Result<Responder, BenchError> {
    let layer = spec.layer.name();
    match host {
        Host::Process(exe) => {
            let homes = tempfile::Builder::new()
                .prefix("juxta-bench-responder-")
                .tempdir()
                .map_err(|source| BenchError::Io {
                    what: "creating the responder's home directory".into(),
                    source,
                })?;
            // A relayed lane's relay: its own process, placed as the
            // responder is.
            let relay = if spec.layer == Layer::RelayedPipe && spec.relay.is_none() {
                let net = crate::net::Net {
                    responder_ip: spec.bind,
                    responder_ns: spec.netns.clone(),
                    ..crate::net::Net::loopback()
                };
                Some(Box::new(
                    crate::relay::RelayProcess::start_in(
                        exe,
                        spec.key_bits,
                        false,
                        None,
                        false,
                        &net,
                        core,
                    )
                    .await?,
                ))
            } else {
                None
            };
            let mut cmd = Command::new(exe);
            cmd.arg("bench-responder");
            if let Some(a) = relay.as_ref().map(|r| r.addr).or(spec.relay) {
                cmd.arg("--relay").arg(a.to_string());
            }
            cmd.arg("--homes")
                .arg(homes.path())
                .arg("--layer")
                .arg(layer)
                .arg("--key-bits")
                .arg(spec.key_bits.to_string())
                .arg("--receivers")
                .arg(spec.receivers.to_string())
                .stdout(Stdio::piped())
                .kill_on_drop(true);
            // A process responder exits when its parent does, however the
            // parent ends (Ctrl-C, a signal, a crash: `kill_on_drop` only
            // runs when the parent unwinds). It watches a pipe on its
            // stdin whose write end is kept in the `Responder` (never
            // written) and closes when this process ends.
            cmd.arg("--exit-with-parent").stdin(Stdio::piped());
            if let Some(c) = core {
                cmd.arg("--core").arg(c.to_string());
            }
            if let Some(w) = spec.socket_window {
                cmd.arg("--socket-window").arg(w.to_string());
            }
            if spec.bind != IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) {
                cmd.arg("--bind").arg(spec.bind.to_string());
            }
            if let Some(ns) = &spec.netns {
                cmd.arg("--netns").arg(ns);
            }
            let mut child = cmd.spawn().map_err(|source| BenchError::Io {
                what: format!("starting responder {}", exe.display()),
                source,
            })?;
            let stdout = child.stdout.take().ok_or_else(|| BenchError::Responder {
                layer: layer.into(),
                reason: "no stdout".into(),
            })?;
            let mut lines = BufReader::new(stdout).lines();
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .map_err(|_| BenchError::Responder {
                    layer: layer.into(),
                    reason: "no READY line within 60 s".into(),
                })?
                .map_err(|source| BenchError::Io {
                    what: "reading responder output".into(),
                    source,
                })?
                .ok_or_else(|| BenchError::Responder {
                    layer: layer.into(),
                    reason: "exited before READY".into(),
                })?;
            let ready = Ready::parse(&line).ok_or_else(|| BenchError::Responder {
                layer: layer.into(),
                reason: format!("unexpected output {line:?}"),
            })?;
            let stdin = child.stdin.take();
            Ok(Responder {
                ready,
                child: Some(child),
                _stop: None,
                control: None,
                _stdin: stdin,
                _homes: Some(homes),
                _relay: relay,
            })
        }
        Host::Remote(remote) => {
            if spec.netns.is_some() {
                return Err(BenchError::BadOption(
                    "--remote runs responders on the other host: drop --net".into(),
                ));
            }
            if spec.socket_window.is_some() {
                return Err(BenchError::BadOption(
                    "--remote runs responders with their default socket window: drop the window"
                        .into(),
                ));
            }
            if spec.layer == Layer::RelayedPipe {
                return Err(BenchError::Unsupported {
                    layer: layer.into(),
                    scenario: "--remote".into(),
                    allowed: "every other layer of juxta (the relay would run on the other host)"
                        .into(),
                });
            }
            let r = remote.responder(spec).await?;
            Ok(Responder {
                ready: r.ready,
                child: None,
                _stop: None,
                control: Some(r.control),
                _stdin: None,
                _homes: None,
                _relay: None,
            })
        }
        Host::Thread => {
            let (ready_tx, mut ready_rx) =
                tokio::sync::mpsc::unbounded_channel::<Result<Ready, String>>();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let spec = spec.clone();
            std::thread::Builder::new()
                .name(format!("responder-{layer}"))
                .spawn(move || {
                    if let Some(ns) = &spec.netns {
                        if let Err(e) = crate::net::enter_for_good(ns) {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    }
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("tokio runtime");
                    rt.block_on(async move {
                        let tx = ready_tx.clone();
                        let serve = run_responder(&spec, move |r| {
                            let _ = tx.send(Ok(r.clone()));
                        });
                        tokio::select! {
                            r = serve => {
                                if let Err(e) = r {
                                    let _ = ready_tx.send(Err(e.to_string()));
                                }
                            }
                            _ = stop_rx => {}
                        }
                    });
                })
                .map_err(|source| BenchError::Io {
                    what: "starting a responder thread".into(),
                    source,
                })?;
            let got = tokio::time::timeout(Duration::from_secs(60), ready_rx.recv())
                .await
                .map_err(|_| BenchError::Responder {
                    layer: layer.into(),
                    reason: "not ready within 60 s".into(),
                })?;
            match got {
                Some(Ok(ready)) => Ok(Responder {
                    ready,
                    child: None,
                    _stop: Some(stop_tx),
                    control: None,
                    _stdin: None,
                    _homes: None,
                    _relay: None,
                }),
                Some(Err(reason)) => Err(BenchError::Responder {
                    layer: layer.into(),
                    reason,
                }),
                None => Err(BenchError::Responder {
                    layer: layer.into(),
                    reason: "ended before READY".into(),
                }),
            }
        }
    }
}

/// A peer with its temporary home (removed when dropped).
struct Hold {
    peer: Peer,
    _home: tempfile::TempDir,
}

async fn start_peer(
    key_bits: usize,
    layer: Layer,
    listen: Option<IpAddr>,
    homes: Option<&std::path::Path>,
) -> Result<Hold, BenchError> {
    start_peer_with(key_bits, layer, listen, homes, |c| c).await
}

/// [`start_peer`], its configuration finished by `more`.
async fn start_peer_with(
    key_bits: usize,
    layer: Layer,
    listen: Option<IpAddr>,
    homes: Option<&std::path::Path>,
    more: impl FnOnce(PeerConfig) -> PeerConfig,
) -> Result<Hold, BenchError> {
    let home = match homes {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .map_err(|source| BenchError::Io {
        what: "creating a temporary home".into(),
        source,
    })?;
    let mut cfg = PeerConfig::new(home.path())
        .compact(layer.compact())
        .cbjx(layer.cbjx().unwrap_or(true));
    if let Some(ip) = listen {
        cfg = cfg.listen(SocketAddr::new(ip, 0));
    }
    let peer = Peer::start(more(cfg).key_bits(key_bits)).await?;
    Ok(Hold { peer, _home: home })
}

/// A peer of the `relayed-pipe` lane: it leases the relay at `relay` and
/// does not listen (so nobody reaches it but through the relay).
async fn start_relayed_peer(
    key_bits: usize,
    relay: SocketAddr,
    homes: Option<&std::path::Path>,
) -> Result<Hold, BenchError> {
    let layer = Layer::RelayedPipe;
    let h = start_peer_with(key_bits, layer, None, homes, |c| {
        c.relay(RelayConfig::client(vec![relay]))
    })
    .await?;
    let leased = match h.peer.relay() {
        Some(r) => r.wait_leased(SETUP_WAIT).await,
        None => None,
    };
    if leased.is_none() {
        return Err(BenchError::Responder {
            layer: layer.name().into(),
            reason: format!("no lease from the relay at {relay} within {SETUP_WAIT:?}"),
        });
    }
    Ok(h)
}

fn adv(id: PipeId, ty: PipeType) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(id, ty);
    a.name = Some("juxta-bench".into());
    a
}

fn ack_message() -> Message {
    Message::new().with(Element::bytes(NS, ELEM_ACK, Bytes::from_static(b"\x01")))
}

/// A control message kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ctl {
    /// Start a run: the receiver resets its counters.
    Begin = 0,
    /// The receiver answers (1-byte ack) once everything before has arrived.
    Sync = 1,
    /// End a run: the receiver answers with its [`Report`].
    End = 2,
}

impl Ctl {
    fn from_u8(b: u8) -> Option<Ctl> {
        match b {
            0 => Some(Ctl::Begin),
            1 => Some(Ctl::Sync),
            2 => Some(Ctl::End),
            _ => None,
        }
    }
}

/// What the responder answers to a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Nothing (one-way data, begin).
    Nothing,
    /// A 1-byte ack (ping, sync).
    Ack,
    /// The end-of-run report.
    Report([u8; 24]),
}

impl Reply {
    fn message(&self) -> Option<Message> {
        match self {
            Reply::Nothing => None,
            Reply::Ack => Some(ack_message()),
            Reply::Report(r) => {
                Some(Message::new().with(Element::bytes(NS, ELEM_REP, Bytes::copy_from_slice(r))))
            }
        }
    }
}

fn control(sink: &mut SeqCounter, kind: Option<Ctl>) -> Reply {
    match kind {
        Some(Ctl::Begin) => {
            sink.reset();
            Reply::Nothing
        }
        Some(Ctl::Sync) => Reply::Ack,
        Some(Ctl::End) => Reply::Report(sink.report()),
        None => Reply::Nothing,
    }
}

/// The responder's handling of one message (see the module docs).
pub fn handle_message(sink: &mut SeqCounter, m: &Message) -> Reply {
    if let Some(e) = m.get(NS, ELEM_TPUT) {
        sink.observe(&e.data);
        return Reply::Nothing;
    }
    if let Some(e) = m.get(NS, ELEM_CTL) {
        return control(sink, e.data.first().and_then(|&b| Ctl::from_u8(b)));
    }
    Reply::Ack
}

fn ctl_message(kind: Ctl, arg: u64) -> Message {
    let mut b = Vec::with_capacity(9);
    b.push(kind as u8);
    b.extend_from_slice(&arg.to_be_bytes());
    Message::new().with(Element::bytes(NS, ELEM_CTL, b))
}

/// A stream frame, from its 4-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A ping of this many bytes: answer one byte.
    Ping(usize),
    /// One-way data of this many bytes: count it.
    Counted(usize),
    /// A control frame (8-byte argument follows).
    Control(Option<Ctl>),
}

impl Frame {
    /// Decodes a header.
    pub fn decode(h: u32) -> Frame {
        if h & HDR_CONTROL != 0 {
            Frame::Control(Ctl::from_u8((h & 0xff) as u8))
        } else if h & HDR_COUNTED != 0 {
            Frame::Counted((h & LEN_MASK) as usize)
        } else {
            Frame::Ping(h as usize)
        }
    }

    /// Encodes the header.
    pub fn header(self) -> [u8; 4] {
        let h = match self {
            Frame::Ping(n) => n as u32 & LEN_MASK,
            Frame::Counted(n) => HDR_COUNTED | (n as u32 & LEN_MASK),
            Frame::Control(k) => HDR_CONTROL | k.map(|k| k as u32).unwrap_or(0xff),
        };
        h.to_be_bytes()
    }

    /// Bytes following the header.
    pub fn body_len(self) -> usize {
        match self {
            Frame::Ping(n) | Frame::Counted(n) => n,
            Frame::Control(_) => 8,
        }
    }
}

fn control_frame(kind: Ctl, arg: u64) -> [u8; 12] {
    let mut f = [0u8; 12];
    f[..4].copy_from_slice(&Frame::Control(Some(kind)).header());
    f[4..].copy_from_slice(&arg.to_be_bytes());
    f
}

/// Reads until `buf` holds `n` bytes; false at end of stream.
async fn fill<S: AsyncRead + Unpin>(s: &mut S, buf: &mut BytesMut, n: usize) -> io::Result<bool> {
    if buf.capacity() < n {
        buf.reserve(n - buf.len());
    }
    while buf.len() < n {
        if s.read_buf(buf).await? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Serves the framed stream protocol on `s` until it ends.
async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> io::Result<()> {
    // Read like the layers do: into a buffer reserved for the whole
    // message, in as few reads as the kernel allows.
    let mut buf = BytesMut::with_capacity(1 << 16);
    let mut sink = SeqCounter::default();
    loop {
        if !fill(s, &mut buf, 4).await? {
            return Ok(());
        }
        let frame = Frame::decode(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]));
        let total = 4 + frame.body_len();
        if !fill(s, &mut buf, total).await? {
            return Ok(());
        }
        let body = buf.split_to(total).split_off(4);
        let reply = match frame {
            Frame::Ping(_) => Reply::Ack,
            Frame::Counted(_) => {
                sink.observe(&body);
                Reply::Nothing
            }
            Frame::Control(k) => control(&mut sink, k),
        };
        drop(body);
        if buf.is_empty() {
            // Room for another frame this large from the start of the
            // buffer, taken back while it holds nothing (so nothing is
            // moved). Without this the next frame was read into the tail
            // left after this one and its first part then copied to the
            // front when the tail ran out: a user-space copy of almost
            // every ping of 64 KiB, which the layers' readers never make.
            buf.reserve(total);
        }
        match reply {
            Reply::Nothing => continue,
            Reply::Ack => s.write_all(&[1]).await?,
            Reply::Report(r) => s.write_all(&r).await?,
        }
        s.flush().await?;
    }
}

/// Serves one JXTA socket: its preamble picks fixed-size pings or framing.
/// `chunked`: pings are read with [`JxtaSocket::read_chunk`] (no copy into
/// a buffer of the responder's), else with `read_exact`.
async fn serve_socket(mut s: JxtaSocket, chunked: bool) -> io::Result<()> {
    let mut pre = [0u8; 4];
    s.read_exact(&mut pre).await?;
    let v = u32::from_be_bytes(pre);
    if v == SOCKET_FRAMED {
        return serve_stream(&mut s).await;
    }
    let want = v as usize;
    let mut buf = if chunked { Vec::new() } else { vec![0u8; want] };
    loop {
        if chunked {
            // Exactly one ping: never more than what is still missing.
            let mut got = 0;
            while got < want {
                match s.read_chunk(want - got).await? {
                    Some(b) => got += b.len(),
                    None if got == 0 => return Ok(()),
                    None => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("stream ended {got} bytes into a {want}-byte ping"),
                        ))
                    }
                }
            }
        } else {
            match s.read_exact(&mut buf).await {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        s.write_all(&[1]).await?;
        s.flush().await?;
    }
}

/// One sender of a pipe responder: its reply pipe once bound, the replies
/// waiting for it, and its one-way counters.
struct PipeSender {
    out: Option<OutputPipe>,
    queued: Vec<Message>,
    sink: SeqCounter,
}

/// Serves pings/one-way data on a pipe, answering each sender on the ack
/// pipe it holds (one output pipe per sender peer).
///
/// Binding that pipe (resolution, and for secure pipes a TLS handshake)
/// runs on a task of its own while this loop keeps draining the input pipe:
/// the answers it waits for arrive on the same connection as the sender's
/// data, and a full input pipe stops that connection from being read, so
/// waiting here while a sender streams would deadlock. Replies wait in a
/// queue until the pipe is bound; from then on they are sent inline.
async fn serve_pipe(peer: &Peer, mut input: InputPipe, ack: PipeAdvertisement) {
    type Bound = (PeerId, Result<OutputPipe, String>);
    let (bound_tx, mut bound_rx) = tokio::sync::mpsc::unbounded_channel::<Bound>();
    let mut senders: HashMap<PeerId, PipeSender> = HashMap::new();
    loop {
        tokio::select! {
            m = input.recv() => {
                let Some(m) = m else { return };
                let Some(from) = m.from else { continue };
                let s = senders.entry(from).or_insert_with(|| {
                    let (pipes, ack, tx) = (peer.pipes(), ack.clone(), bound_tx.clone());
                    tokio::spawn(async move {
                        let r = pipes
                            .create_output_pipe(&ack, &[from], SETUP_WAIT)
                            .await
                            .map_err(|e| e.to_string());
                        let _ = tx.send((from, r));
                    });
                    PipeSender { out: None, queued: Vec::new(), sink: SeqCounter::default() }
                });
                let Some(r) = handle_message(&mut s.sink, &m.message).message() else {
                    continue;
                };
                match &s.out {
                    Some(out) => {
                        if let Err(e) = out.send(r).await {
                            tracing::warn!(%from, error = %e, "ack failed");
                            senders.remove(&from);
                        }
                    }
                    None => s.queued.push(r),
                }
            }
            Some((from, r)) = bound_rx.recv() => {
                let Some(s) = senders.get_mut(&from) else { continue };
                match r {
                    Ok(out) => {
                        for q in s.queued.drain(..) {
                            if let Err(e) = out.send(q).await {
                                tracing::warn!(%from, error = %e, "ack failed");
                                break;
                            }
                        }
                        s.out = Some(out);
                    }
                    Err(e) => {
                        tracing::warn!(%from, error = %e, "cannot bind the ack pipe");
                        // Forget the sender: its next message tries again.
                        senders.remove(&from);
                    }
                }
            }
        }
    }
}

/// Runs the responder side of `spec` until killed (or the future is
/// dropped); calls `on_ready` once it serves.
pub async fn run_responder(
    spec: &ResponderSpec,
    on_ready: impl FnOnce(&Ready),
) -> Result<(), BenchError> {
    let layer = spec.layer;
    let key_bits = layer.key_bits(spec.key_bits);
    match layer {
        Layer::ZmqReqRep | Layer::Libp2p | Layer::Libp2pQuic | Layer::MpiTcp | Layer::MpiSm => {
            Err(BenchError::Unsupported {
                layer: layer.name().into(),
                scenario: "bench-responder".into(),
                allowed: "the layers of juxta and the sockets (stacks run their own programs)"
                    .into(),
            })
        }
        Layer::SocketUnreliable | Layer::BidiPipeReliable => Err(BenchError::Unsupported {
            layer: layer.name().into(),
            scenario: "bench-responder".into(),
            allowed: "the layers of juxta (this one is measured on JXSE only)".into(),
        }),
        Layer::Udp => {
            let sock = UdpSocket::bind(SocketAddr::new(spec.bind, 0))
                .await
                .map_err(|source| BenchError::Io {
                    what: "binding udp responder".into(),
                    source,
                })?;
            on_ready(&Ready {
                addrs: vec![sock.local_addr().expect("bound")],
                pipes: vec![],
                peer: None,
            });
            let mut buf = vec![0u8; MAX_UDP_PAYLOAD + 1];
            loop {
                let (_, from) = sock
                    .recv_from(&mut buf)
                    .await
                    .map_err(io_err("udp receive"))?;
                sock.send_to(&[1u8], from)
                    .await
                    .map_err(io_err("udp ack"))?;
            }
        }
        Layer::Tcp => {
            let l = TcpListener::bind(SocketAddr::new(spec.bind, 0))
                .await
                .map_err(|source| BenchError::Io {
                    what: "binding tcp responder".into(),
                    source,
                })?;
            on_ready(&Ready {
                addrs: vec![l.local_addr().expect("bound")],
                pipes: vec![],
                peer: None,
            });
            loop {
                let (mut s, _) = l.accept().await.map_err(|source| BenchError::Io {
                    what: "accept".into(),
                    source,
                })?;
                let _ = s.set_nodelay(true);
                tokio::spawn(async move {
                    let _ = serve_stream(&mut s).await;
                });
            }
        }
        Layer::Endpoint | Layer::EndpointCompat | Layer::EndpointCompatNoCbjx => {
            let h = start_peer(key_bits, layer, Some(spec.bind), spec.homes.as_deref()).await?;
            let mut pings = h.peer.listen(BENCH_SERVICE, Some("ping"))?;
            on_ready(&Ready {
                addrs: vec![h.peer.local_addr().expect("listening")],
                pipes: vec![],
                peer: None,
            });
            let mut back: HashMap<PeerId, (Messenger, SeqCounter)> = HashMap::new();
            while let Some(d) = pings.recv().await {
                let Some(from) = d.from else { continue };
                let (m, sink) = match back.entry(from) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(v) => match h.peer.messenger(&from) {
                        Ok(m) => v.insert((m, SeqCounter::default())),
                        Err(e) => {
                            tracing::warn!(%from, error = %e, "no messenger back");
                            continue;
                        }
                    },
                };
                if let Some(r) = handle_message(sink, &d.message).message() {
                    if let Err(e) = m.send(BENCH_SERVICE, Some("ack"), r).await {
                        tracing::warn!(%from, error = %e, "ack failed");
                        back.remove(&from);
                    }
                }
            }
            Ok(())
        }
        Layer::UnicastPipe | Layer::SecurePipe | Layer::PipeCompat | Layer::PipeCompatNoCbjx => {
            let ty = if layer == Layer::SecurePipe {
                PipeType::UnicastSecure
            } else {
                PipeType::Unicast
            };
            let h = start_peer(key_bits, layer, Some(spec.bind), spec.homes.as_deref()).await?;
            let ping = adv(crate::util::random_pipe_id(), ty);
            let ack = adv(crate::util::random_pipe_id(), ty);
            let input = h.peer.pipes().create_input_pipe(&ping)?;
            on_ready(&Ready {
                addrs: vec![h.peer.local_addr().expect("listening")],
                pipes: vec![ping.id, ack.id],
                peer: None,
            });
            serve_pipe(&h.peer, input, ack).await;
            Ok(())
        }
        Layer::RelayedPipe => {
            // The relay the spec names, or one of this process (a thread
            // responder's, for tests).
            let (relay, _own) = match spec.relay {
                Some(a) => (a, None),
                None => {
                    let r = start_peer_with(
                        key_bits,
                        layer,
                        Some(spec.bind),
                        spec.homes.as_deref(),
                        |c| c.relay(RelayConfig::server()),
                    )
                    .await?;
                    (r.peer.local_addr().expect("listening"), Some(r))
                }
            };
            let h = start_relayed_peer(key_bits, relay, spec.homes.as_deref()).await?;
            let ping = adv(crate::util::random_pipe_id(), PipeType::Unicast);
            let ack = adv(crate::util::random_pipe_id(), PipeType::Unicast);
            let input = h.peer.pipes().create_input_pipe(&ping)?;
            on_ready(&Ready {
                addrs: vec![relay],
                pipes: vec![ping.id, ack.id],
                peer: Some(h.peer.peer_id()),
            });
            serve_pipe(&h.peer, input, ack).await;
            Ok(())
        }
        Layer::BidiPipe => {
            let h = start_peer(key_bits, layer, Some(spec.bind), spec.homes.as_deref()).await?;
            let a = adv(crate::util::random_pipe_id(), PipeType::Unicast);
            let mut l = h.peer.pipes().bind_bidi(&a)?;
            on_ready(&Ready {
                addrs: vec![h.peer.local_addr().expect("listening")],
                pipes: vec![a.id],
                peer: None,
            });
            loop {
                let mut p = l.accept().await?;
                tokio::spawn(async move {
                    let mut sink = SeqCounter::default();
                    while let Some(m) = p.recv().await {
                        if let Some(r) = handle_message(&mut sink, &m.message).message() {
                            if p.send(r).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        }
        Layer::Socket
        | Layer::SocketChunk
        | Layer::SocketCompat
        | Layer::SocketCompatNoCbjx
        | Layer::SecureSocket => {
            let chunked = layer == Layer::SocketChunk;
            let h = start_peer(key_bits, layer, Some(spec.bind), spec.homes.as_deref()).await?;
            let a = adv(crate::util::random_pipe_id(), PipeType::Unicast);
            let mut cfg = layer.socket_config();
            if let Some(w) = spec.socket_window {
                cfg.stream_window = w;
            }
            let mut server = JxtaServerSocket::bind(&h.peer, &a, cfg)?;
            on_ready(&Ready {
                addrs: vec![h.peer.local_addr().expect("listening")],
                pipes: vec![a.id],
                peer: None,
            });
            loop {
                let s = server.accept().await?;
                tokio::spawn(async move {
                    if let Err(e) = serve_socket(s, chunked).await {
                        tracing::debug!(error = %e, "bench socket ended");
                    }
                });
            }
        }
        Layer::Propagate => {
            let ping = adv(crate::util::random_pipe_id(), PipeType::Propagate);
            let ack = adv(crate::util::random_pipe_id(), PipeType::Unicast);
            let mut addrs = Vec::new();
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..spec.receivers.max(1) {
                let h = start_peer(key_bits, layer, Some(spec.bind), spec.homes.as_deref()).await?;
                let input = h.peer.pipes().create_input_pipe(&ping)?;
                addrs.push(h.peer.local_addr().expect("listening"));
                let ack = ack.clone();
                tasks.spawn(async move {
                    serve_pipe(&h.peer, input, ack).await;
                    drop(h);
                });
            }
            on_ready(&Ready {
                addrs,
                pipes: vec![ping.id, ack.id],
                peer: None,
            });
            while tasks.join_next().await.is_some() {}
            Ok(())
        }
    }
}

/// A ping: one or more elements (all named `bench:data…`), and the same
/// bytes in one piece for the byte-stream layers.
#[derive(Debug, Clone)]
pub struct Ping {
    parts: Vec<(String, Bytes)>,
    flat: Bytes,
}

impl Ping {
    /// One element of `size` bytes.
    pub fn single(size: usize) -> Ping {
        Ping::composed(1, size)
    }

    /// `elements` elements of `each` bytes (slices of one buffer).
    pub fn composed(elements: usize, each: usize) -> Ping {
        let elements = elements.max(1);
        let flat = Bytes::from(pattern(elements * each));
        let parts = (0..elements)
            .map(|i| {
                let name = if i == 0 {
                    ELEM_DATA.to_string()
                } else {
                    format!("{ELEM_DATA}{i}")
                };
                (name, flat.slice(i * each..(i + 1) * each))
            })
            .collect();
        Ping { parts, flat }
    }

    /// Payload bytes.
    pub fn len(&self) -> usize {
        self.flat.len()
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.flat.is_empty()
    }

    /// Elements in the message.
    pub fn elements(&self) -> usize {
        self.parts.len()
    }

    /// The message form.
    pub fn message(&self) -> Message {
        let mut m = Message::new();
        for (name, b) in &self.parts {
            m.push(Element::bytes(NS, name, b.clone()));
        }
        m
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SockMode {
    Fixed(usize),
    Framed,
}

enum Kind {
    Tcp {
        stream: TcpStream,
    },
    Udp {
        sock: UdpSocket,
        ack: [u8; 16],
    },
    Endpoint {
        messenger: Messenger,
        acks: Listener,
    },
    Pipe {
        out: OutputPipe,
        acks: InputPipe,
    },
    Bidi {
        pipe: BidiPipe,
    },
    Socket {
        sock: Option<JxtaSocket>,
        mode: Option<SockMode>,
        conn: Messenger,
        adv: PipeAdvertisement,
        /// The stream window of the sockets it opens (`None`: default).
        window: Option<u64>,
    },
    Propagate {
        out: OutputPipe,
        acks: InputPipe,
        receivers: usize,
    },
}

/// The client side of one layer (one peer with its own connection, or a
/// TCP connection).
pub struct Client {
    layer: Layer,
    kind: Kind,
    sockets: ClientSockets,
    // Dropped after `kind`: pipes and sockets go before their peer.
    _hold: Option<Hold>,
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> BenchError {
    move |source| BenchError::Io {
        what: what.into(),
        source,
    }
}

impl Client {
    /// Connects to the responder that announced `ready`. `receivers` is the
    /// number of receivers a propagate client sends to (the first ones).
    pub async fn connect(
        layer: Layer,
        ready: &Ready,
        key_bits: usize,
        receivers: usize,
    ) -> Result<Client, BenchError> {
        let key_bits = layer.key_bits(key_bits);
        let addr = ready.addrs[0];
        if layer == Layer::Udp {
            let local = SocketAddr::new(
                if addr.is_ipv4() {
                    IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
                } else {
                    IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
                },
                0,
            );
            let sock = UdpSocket::bind(local).await.map_err(io_err("udp bind"))?;
            sock.connect(addr).await.map_err(io_err("udp connect"))?;
            return Ok(Client {
                layer,
                kind: Kind::Udp { sock, ack: [0; 16] },
                // No stream counters for datagrams: see `Client::pair`.
                sockets: ClientSockets::default(),
                _hold: None,
            });
        }
        if layer == Layer::Tcp {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|source| BenchError::Io {
                    what: format!("connecting to tcp responder {addr}"),
                    source,
                })?;
            stream.set_nodelay(true).map_err(io_err("set_nodelay"))?;
            return Ok(Client {
                layer,
                kind: Kind::Tcp { stream },
                sockets: ClientSockets {
                    server_ports: vec![addr.port()],
                    ..ClientSockets::default()
                },
                _hold: None,
            });
        }
        let h = if layer == Layer::RelayedPipe {
            // `addr` is the relay's: the responder does not listen.
            start_relayed_peer(key_bits, addr, None).await?
        } else {
            start_peer(key_bits, layer, None, None).await?
        };
        let link = |m: Messenger| async move {
            if layer.compact() && !m.wait_compact(Duration::from_secs(10)).await {
                return Err(BenchError::Responder {
                    layer: layer.name().into(),
                    reason: "compact framing was not agreed".into(),
                });
            }
            Ok(m)
        };
        let kind = match layer {
            Layer::Tcp | Layer::Udp => unreachable!("handled above"),
            Layer::ZmqReqRep | Layer::Libp2p | Layer::Libp2pQuic | Layer::MpiTcp | Layer::MpiSm => {
                return Err(BenchError::Unsupported {
                    layer: layer.name().into(),
                    scenario: "a juxta client".into(),
                    allowed: "the layers of juxta and the sockets (stacks run their own programs)"
                        .into(),
                })
            }
            Layer::SocketUnreliable | Layer::BidiPipeReliable => {
                return Err(BenchError::Unsupported {
                    layer: layer.name().into(),
                    scenario: "a juxta client".into(),
                    allowed: "the layers of juxta (this one is measured on JXSE only)".into(),
                })
            }
            Layer::Endpoint | Layer::EndpointCompat | Layer::EndpointCompatNoCbjx => {
                let acks = h.peer.listen(BENCH_SERVICE, Some("ack"))?;
                let messenger = link(h.peer.connect(addr).await?).await?;
                Kind::Endpoint { messenger, acks }
            }
            Layer::UnicastPipe
            | Layer::SecurePipe
            | Layer::PipeCompat
            | Layer::PipeCompatNoCbjx
            | Layer::RelayedPipe => {
                let ty = if layer == Layer::SecurePipe {
                    PipeType::UnicastSecure
                } else {
                    PipeType::Unicast
                };
                // The relayed responder is reached by its ID through the
                // relay both lease (it does not listen); the others by a
                // connection to their address.
                let to = if layer == Layer::RelayedPipe {
                    ready.peer.ok_or_else(|| BenchError::Responder {
                        layer: layer.name().into(),
                        reason: "READY line names no peer ID".into(),
                    })?
                } else {
                    link(h.peer.connect(addr).await?).await?.remote()
                };
                let acks = h
                    .peer
                    .pipes()
                    .create_input_pipe(&adv(ready.pipe(1, layer)?, ty))?;
                let out = h
                    .peer
                    .pipes()
                    .create_output_pipe(&adv(ready.pipe(0, layer)?, ty), &[to], SETUP_WAIT)
                    .await?;
                if layer == Layer::UnicastPipe && !out.is_compact() {
                    return Err(BenchError::Responder {
                        layer: layer.name().into(),
                        reason: "the output pipe is not in compact framing".into(),
                    });
                }
                if layer.cbjx().is_some() && out.is_compact() {
                    return Err(BenchError::Responder {
                        layer: layer.name().into(),
                        reason: "the output pipe is in compact framing, not JXTA framing".into(),
                    });
                }
                Kind::Pipe { out, acks }
            }
            Layer::BidiPipe => {
                let m = link(h.peer.connect(addr).await?).await?;
                let pipe = h
                    .peer
                    .pipes()
                    .connect_bidi(
                        &adv(ready.pipe(0, layer)?, PipeType::Unicast),
                        m.remote(),
                        SETUP_WAIT,
                    )
                    .await?;
                Kind::Bidi { pipe }
            }
            Layer::Socket
            | Layer::SocketChunk
            | Layer::SocketCompat
            | Layer::SocketCompatNoCbjx
            | Layer::SecureSocket => {
                let conn = link(h.peer.connect(addr).await?).await?;
                Kind::Socket {
                    sock: None,
                    mode: None,
                    conn,
                    adv: adv(ready.pipe(0, layer)?, PipeType::Unicast),
                    window: None,
                }
            }
            Layer::Propagate => {
                if receivers == 0 || receivers > ready.addrs.len() {
                    return Err(BenchError::BadOption(format!(
                        "{receivers} receivers asked, the responder has {}",
                        ready.addrs.len()
                    )));
                }
                let mut targets = Vec::new();
                for a in &ready.addrs[..receivers] {
                    targets.push(link(h.peer.connect(*a).await?).await?.remote());
                }
                let acks = h
                    .peer
                    .pipes()
                    .create_input_pipe(&adv(ready.pipe(1, layer)?, PipeType::Unicast))?;
                let out = h
                    .peer
                    .pipes()
                    .create_output_pipe(
                        &adv(ready.pipe(0, layer)?, PipeType::Propagate),
                        &targets,
                        SETUP_WAIT,
                    )
                    .await?;
                Kind::Propagate {
                    out,
                    acks,
                    receivers,
                }
            }
        };
        let dialled = if layer == Layer::Propagate {
            &ready.addrs[..receivers]
        } else {
            &ready.addrs[..1]
        };
        Ok(Client {
            layer,
            kind,
            sockets: ClientSockets {
                server_ports: dialled.iter().map(|a| a.port()).collect(),
                ..ClientSockets::default()
            },
            _hold: Some(h),
        })
    }

    /// The layer.
    pub fn layer(&self) -> Layer {
        self.layer
    }

    fn closed(&self, what: &str) -> BenchError {
        BenchError::Responder {
            layer: self.layer.name().into(),
            reason: format!("{what} closed"),
        }
    }

    /// Opens a fresh socket in `mode` unless the current one is in it.
    async fn socket_mode(&mut self, want: SockMode) -> Result<(), BenchError> {
        let Some(h) = &self._hold else { return Ok(()) };
        let Kind::Socket {
            sock,
            mode,
            conn,
            adv,
            window,
        } = &mut self.kind
        else {
            return Ok(());
        };
        if *mode == Some(want) && sock.is_some() {
            return Ok(());
        }
        // The previous socket closes in the background.
        *sock = None;
        let mut cfg = self.layer.socket_config();
        if let Some(w) = *window {
            cfg.stream_window = w;
        }
        let mut s = JxtaSocket::connect(&h.peer.pipes(), adv, conn.remote(), cfg).await?;
        let pre = match want {
            SockMode::Fixed(n) => n as u32,
            SockMode::Framed => SOCKET_FRAMED,
        };
        s.write_all(&pre.to_be_bytes())
            .await
            .map_err(io_err("socket preamble"))?;
        s.flush().await.map_err(io_err("socket preamble"))?;
        *sock = Some(s);
        *mode = Some(want);
        Ok(())
    }

    /// Socket layers: open the next sockets with their stream window
    /// bounded at `window` bytes (`None`: the socket's default); the
    /// current socket, if any, is replaced on next use.
    pub fn set_socket_window(&mut self, w: Option<u64>) {
        if let Kind::Socket {
            window, sock, mode, ..
        } = &mut self.kind
        {
            *window = w;
            *sock = None;
            *mode = None;
        }
    }

    /// The client's side of this lane's connections, whose kernel
    /// counters give the bytes on the wire.
    pub fn sockets(&self) -> &ClientSockets {
        &self.sockets
    }

    /// One message/ack pair (propagate: the ack of every receiver). Bytes
    /// on the wire are counted by the kernel ([`Client::sockets`]).
    pub async fn pair(&mut self, ping: &Ping) -> Result<(), BenchError> {
        if matches!(self.kind, Kind::Socket { .. }) {
            self.socket_mode(SockMode::Fixed(ping.len())).await?;
        }
        match &mut self.kind {
            Kind::Udp { sock, ack } => {
                if ping.len() > MAX_UDP_PAYLOAD {
                    return Err(BenchError::BadOption(format!(
                        "udp carries at most {MAX_UDP_PAYLOAD} bytes, asked for {}",
                        ping.len()
                    )));
                }
                sock.send(&ping.flat).await.map_err(io_err("udp send"))?;
                match tokio::time::timeout(UDP_WAIT, sock.recv(ack)).await {
                    Ok(Ok(1)) => Ok(()),
                    Ok(Ok(n)) => Err(BenchError::Responder {
                        layer: "udp".into(),
                        reason: format!("a {n}-byte answer where 1 byte was expected"),
                    }),
                    Ok(Err(e)) => Err(io_err("udp receive")(e)),
                    Err(_) => Err(io_err("udp receive")(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no answer within {UDP_WAIT:?} (datagram lost)"),
                    ))),
                }
            }
            Kind::Tcp { stream } => {
                let hdr = Frame::Ping(ping.len()).header();
                juxta::transport::tcp::write_all_vectored(stream, &[&hdr[..], &ping.flat[..]])
                    .await
                    .map_err(io_err("tcp write"))?;
                let mut ack = [0u8; 1];
                stream
                    .read_exact(&mut ack)
                    .await
                    .map_err(io_err("tcp ack"))?;
                Ok(())
            }
            Kind::Endpoint { messenger, acks } => {
                messenger
                    .send(BENCH_SERVICE, Some("ping"), ping.message())
                    .await?;
                if acks.recv().await.is_none() {
                    return Err(self.closed("ack listener"));
                }
                Ok(())
            }
            Kind::Pipe { out, acks } => {
                out.send(ping.message()).await?;
                if acks.recv().await.is_none() {
                    return Err(self.closed("ack pipe"));
                }
                Ok(())
            }
            Kind::Bidi { pipe } => {
                pipe.send(ping.message()).await?;
                if pipe.recv().await.is_none() {
                    return Err(self.closed("bidi pipe"));
                }
                Ok(())
            }
            Kind::Socket { sock, .. } => {
                let s = sock.as_mut().expect("opened above");
                s.write_all(&ping.flat)
                    .await
                    .map_err(io_err("socket write"))?;
                s.flush().await.map_err(io_err("socket flush"))?;
                let mut ack = [0u8; 1];
                s.read_exact(&mut ack).await.map_err(io_err("socket ack"))?;
                Ok(())
            }
            Kind::Propagate {
                out,
                acks,
                receivers,
            } => {
                out.send(ping.message()).await?;
                for _ in 0..*receivers {
                    if acks.recv().await.is_none() {
                        return Err(self.closed("ack pipe"));
                    }
                }
                Ok(())
            }
        }
    }

    /// Sends one-way data (counted by the receiver, not answered).
    pub async fn send_counted(&mut self, payload: &Bytes) -> Result<(), BenchError> {
        if matches!(self.kind, Kind::Socket { .. }) {
            self.socket_mode(SockMode::Framed).await?;
        }
        let msg = || Message::new().with(Element::bytes(NS, ELEM_TPUT, payload.clone()));
        match &mut self.kind {
            Kind::Tcp { stream } => {
                let hdr = Frame::Counted(payload.len()).header();
                juxta::transport::tcp::write_all_vectored(stream, &[&hdr[..], &payload[..]])
                    .await
                    .map_err(io_err("tcp write"))?;
            }
            Kind::Endpoint { messenger, .. } => {
                messenger.send(BENCH_SERVICE, Some("ping"), msg()).await?;
            }
            Kind::Pipe { out, .. } => {
                out.send(msg()).await?;
            }
            Kind::Bidi { pipe } => {
                pipe.send(msg()).await?;
            }
            Kind::Socket { sock, .. } => {
                let s = sock.as_mut().expect("opened above");
                let hdr = Frame::Counted(payload.len()).header();
                s.write_all(&hdr).await.map_err(io_err("socket write"))?;
                s.write_all(payload).await.map_err(io_err("socket write"))?;
                s.flush().await.map_err(io_err("socket flush"))?;
            }
            Kind::Propagate { out, .. } => {
                out.send(msg()).await?;
            }
            Kind::Udp { .. } => {
                return Err(BenchError::Unsupported {
                    layer: self.layer.name().into(),
                    scenario: "one-way sends".into(),
                    allowed: "every other layer".into(),
                })
            }
        }
        Ok(())
    }

    /// How many receivers each message reaches (the propagate layer's
    /// receiver count, 1 for every other layer).
    pub fn fanout(&self) -> usize {
        match &self.kind {
            Kind::Propagate { receivers, .. } => *receivers,
            _ => 1,
        }
    }

    /// Sends a control message on the data channel (so it arrives after
    /// everything sent before) and waits for its answer: `Sync` returns
    /// `None` once acked, `End` the receiver's report.
    pub async fn control(&mut self, kind: Ctl, arg: u64) -> Result<Option<Report>, BenchError> {
        if matches!(self.kind, Kind::Socket { .. }) {
            self.socket_mode(SockMode::Framed).await?;
        }
        let layer = self.layer;
        let answer = async {
            match &mut self.kind {
                Kind::Tcp { stream } => {
                    stream
                        .write_all(&control_frame(kind, arg))
                        .await
                        .map_err(io_err("tcp write"))?;
                    read_stream_answer(stream, kind).await
                }
                Kind::Socket { sock, .. } => {
                    let s = sock.as_mut().expect("opened above");
                    s.write_all(&control_frame(kind, arg))
                        .await
                        .map_err(io_err("socket write"))?;
                    s.flush().await.map_err(io_err("socket flush"))?;
                    read_stream_answer(s, kind).await
                }
                Kind::Endpoint { messenger, acks } => {
                    messenger
                        .send(BENCH_SERVICE, Some("ping"), ctl_message(kind, arg))
                        .await?;
                    if kind == Ctl::Begin {
                        return Ok(None);
                    }
                    let m = acks.recv().await.map(|d| d.message);
                    message_answer(layer, kind, m)
                }
                Kind::Pipe { out, acks } => {
                    out.send(ctl_message(kind, arg)).await?;
                    if kind == Ctl::Begin {
                        return Ok(None);
                    }
                    let m = acks.recv().await.map(|d| d.message);
                    message_answer(layer, kind, m)
                }
                Kind::Bidi { pipe } => {
                    pipe.send(ctl_message(kind, arg)).await?;
                    if kind == Ctl::Begin {
                        return Ok(None);
                    }
                    let m = pipe.recv().await.map(|d| d.message);
                    message_answer(layer, kind, m)
                }
                Kind::Propagate {
                    out,
                    acks,
                    receivers,
                } => {
                    out.send(ctl_message(kind, arg)).await?;
                    if kind == Ctl::Begin {
                        return Ok(None);
                    }
                    // Every receiver answers on the ack pipe; an end-of-run
                    // report sums theirs (the caller divides by the fanout).
                    let mut total: Option<Report> = None;
                    for _ in 0..*receivers {
                        let m = acks.recv().await.map(|d| d.message);
                        if let Some(r) = message_answer(layer, kind, m)? {
                            let t = total.get_or_insert(Report::default());
                            t.received = t.received.saturating_add(r.received);
                            t.unique = t.unique.saturating_add(r.unique);
                            t.bytes = t.bytes.saturating_add(r.bytes);
                        }
                    }
                    Ok(total)
                }
                Kind::Udp { .. } => Err(BenchError::Unsupported {
                    layer: layer.name().into(),
                    scenario: "one-way sends".into(),
                    allowed: "every other layer".into(),
                }),
            }
        };
        tokio::time::timeout(REPLY_WAIT, answer)
            .await
            .map_err(|_| BenchError::Responder {
                layer: layer.name().into(),
                reason: format!("no answer to {kind:?} within {REPLY_WAIT:?}"),
            })?
    }
}

async fn read_stream_answer<S: AsyncRead + Unpin>(
    s: &mut S,
    kind: Ctl,
) -> Result<Option<Report>, BenchError> {
    match kind {
        Ctl::Begin => Ok(None),
        Ctl::Sync => {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.map_err(io_err("sync answer"))?;
            Ok(None)
        }
        Ctl::End => {
            let mut b = [0u8; 24];
            s.read_exact(&mut b).await.map_err(io_err("end report"))?;
            Ok(Report::parse(&b))
        }
    }
}

fn message_answer(
    layer: Layer,
    kind: Ctl,
    m: Option<Message>,
) -> Result<Option<Report>, BenchError> {
    let m = m.ok_or_else(|| BenchError::Responder {
        layer: layer.name().into(),
        reason: "reply channel closed".into(),
    })?;
    match kind {
        Ctl::Begin | Ctl::Sync => Ok(None),
        Ctl::End => m
            .get(NS, ELEM_REP)
            .and_then(|e| Report::parse(&e.data))
            .map(Some)
            .ok_or_else(|| BenchError::Responder {
                layer: layer.name().into(),
                reason: "end of run answered without a report".into(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_parse_and_name() {
        for l in Layer::ALL {
            assert_eq!(Layer::parse(l.name()).unwrap(), l);
        }
        assert!(Layer::parse("sctp").is_err());
        assert!(Layer::Udp.carries(65_507) && !Layer::Udp.carries(65_508));
        assert_eq!(Layer::Udp.implementation(), Some("udp"));
        assert_eq!(Layer::Socket.implementation(), None);
        assert_eq!(Layer::SecurePipe.key_bits(1024), 2048);
        assert_eq!(Layer::UnicastPipe.key_bits(1024), 1024);
        let v = parse_layers("unicast-pipe,tcp,unicast-pipe,socket", "x", &Layer::ALL).unwrap();
        assert_eq!(v, vec![Layer::Tcp, Layer::UnicastPipe, Layer::Socket]);
        assert!(parse_layers("propagate", "composition", &[Layer::Tcp, Layer::Endpoint]).is_err());
        assert_eq!(
            serde_json::to_string(&Layer::BidiPipe).unwrap(),
            "\"bidi-pipe\""
        );
    }

    #[test]
    fn ready_lines_round_trip() {
        let r = Ready {
            addrs: vec![
                "127.0.0.1:1".parse().unwrap(),
                "127.0.0.1:2".parse().unwrap(),
            ],
            pipes: vec![crate::util::random_pipe_id(), crate::util::random_pipe_id()],
            peer: None,
        };
        assert_eq!(Ready::parse(&r.to_line()).unwrap(), r);
        let me: PeerId = juxta_proto::id::JxtaId::from_parts(
            juxta_proto::id::IdFormat::Cbid,
            [0x59; 16],
            [7; 16],
            juxta_proto::id::IdType::Peer,
        )
        .try_into()
        .unwrap();
        let relayed = Ready {
            peer: Some(me),
            ..r.clone()
        };
        assert_eq!(Ready::parse(&relayed.to_line()).unwrap(), relayed);
        assert!(Ready::parse("READY 127.0.0.1:9 peer=nonsense").is_none());
        let plain = Ready::parse("READY 127.0.0.1:9\n").unwrap();
        assert_eq!(plain.addrs.len(), 1);
        assert!(plain.pipes.is_empty());
        assert!(Ready::parse("READY").is_none());
        assert!(Ready::parse("READY nonsense").is_none());
        assert!(Ready::parse("READY 127.0.0.1:9 urn:jxta:bad").is_none());
    }

    #[test]
    fn stream_frames_round_trip() {
        for f in [
            Frame::Ping(0),
            Frame::Ping(1),
            Frame::Ping(crate::util::MAX_SIZE),
            Frame::Counted(1),
            Frame::Counted(1 << 20),
            Frame::Control(Some(Ctl::Begin)),
            Frame::Control(Some(Ctl::Sync)),
            Frame::Control(Some(Ctl::End)),
        ] {
            assert_eq!(Frame::decode(u32::from_be_bytes(f.header())), f);
        }
        // The ping header is the plain length the tcp baseline always used.
        assert_eq!(Frame::Ping(1024).header(), 1024u32.to_be_bytes());
        assert_eq!(Frame::Control(None).body_len(), 8);
        let c = control_frame(Ctl::End, 7);
        assert_eq!(
            Frame::decode(u32::from_be_bytes(c[..4].try_into().unwrap())),
            Frame::Control(Some(Ctl::End))
        );
        assert_eq!(u64::from_be_bytes(c[4..].try_into().unwrap()), 7);
    }

    #[test]
    fn responder_handles_pings_data_and_control() {
        let mut sink = SeqCounter::default();
        let ping = Ping::composed(5, 4096);
        assert_eq!(ping.elements(), 5);
        assert_eq!(ping.len(), 20480);
        assert_eq!(handle_message(&mut sink, &ping.message()), Reply::Ack);
        let data = |id: u64| {
            let mut b = vec![0u8; 16];
            crate::util::put_id(&mut b, id);
            Message::new().with(Element::bytes(NS, ELEM_TPUT, b))
        };
        assert_eq!(handle_message(&mut sink, &data(0)), Reply::Nothing);
        assert_eq!(handle_message(&mut sink, &data(1)), Reply::Nothing);
        assert_eq!(
            handle_message(&mut sink, &ctl_message(Ctl::Sync, 0)),
            Reply::Ack
        );
        let Reply::Report(r) = handle_message(&mut sink, &ctl_message(Ctl::End, 2)) else {
            panic!("no report");
        };
        let r = Report::parse(&r).unwrap();
        assert_eq!((r.received, r.unique, r.bytes), (2, 2, 32));
        assert_eq!(
            handle_message(&mut sink, &ctl_message(Ctl::Begin, 0)),
            Reply::Nothing
        );
        assert_eq!(sink, SeqCounter::default());
        // The answers are what the client expects.
        let rep = Reply::Report(sink.report()).message();
        assert_eq!(
            message_answer(Layer::Endpoint, Ctl::End, rep).unwrap(),
            Some(Report {
                received: 0,
                unique: 0,
                bytes: 0
            })
        );
        assert!(message_answer(Layer::Endpoint, Ctl::End, Some(ack_message())).is_err());
        assert!(message_answer(Layer::Endpoint, Ctl::Sync, None).is_err());
    }
}
