//! Worker processes of the long-running scenarios ([`crate::soak`] and
//! [`crate::chaos`]): a rendezvous, a relay or an edge with a mix of
//! activities, each as its own process (`juxta soak-worker <spec JSON>`),
//! so that its memory, descriptors and threads can be read from `/proc` and
//! so that it can be killed by PID.
//!
//! A worker prints one line per event on its stdout, which the
//! coordinator ([`Worker`]) parses:
//!
//! - `READY <addr|-> <peer id>` once its peer runs;
//! - `STATS k=v ...` every second: cumulative counters and the number of
//!   tokio tasks alive in its runtime;
//! - `LEASE <unix ms> <rendezvous>` / `UNLEASE <unix ms> <rendezvous>`
//!   when an edge gains or loses its rendezvous lease, `RLEASE <unix ms>
//!   <relay|->` when its relay lease changes (a lease counts while the
//!   connection to the relay is up);
//! - `QFAIL <unix ms>` for a lookup that was not answered with a publisher;
//! - `SOCKW <tag> <bytes> ok|err` when a streaming socket ends on the
//!   writing side (`ok`: written, flushed and closed without error), and
//!   `SOCKR <tag> <bytes> <bad bytes> eof|err` on the reading side (bytes
//!   are a known pattern, so the reader counts every byte out of place);
//! - `EDUP <unix ms>` when the pipe echo sees a sequence number it has
//!   already seen from the same sender (a duplicate or a reordering);
//! - `DONE` after a `STOP` line on its stdin (or stdin closing): the
//!   activities finished their current step and the final `STATS` line
//!   was printed.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use juxta::pipe::OutputPipe;
use juxta::proto::advertisement::{PipeAdvertisement, PipeType};
use juxta::proto::id::{PeerId, PipeId};
use juxta::proto::message::{Element, Message};
use juxta::relay::RelayConfig;
use juxta::rendezvous::{RendezvousConfig, RendezvousEvent};
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Peer, PeerConfig};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;

use crate::BenchError;

/// The subcommand a worker executable runs (`<exe> soak-worker <json>`).
pub const SUBCOMMAND: &str = "soak-worker";
/// How long one lookup may take before it counts as failed.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a ping waits for its ack.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// Most events of one kind a coordinator keeps per worker (beyond: counted only).
pub const MAX_EVENTS: usize = 100_000;
/// Most senders the pipe echo keeps a reply pipe and a sequence for.
const MAX_ECHO_SENDERS: usize = 64;
/// How long a set-up step of a worker may take.
const WAIT: Duration = Duration::from_secs(15);

/// What a worker process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerRole {
    /// A rendezvous (`peers`: the other rendezvous of its peer view).
    Rendezvous,
    /// A relay (`peers`: another relay to connect to).
    Relay,
    /// An edge with the activities its spec lists.
    #[default]
    Edge,
}

/// Pings over unicast pipes: one message with a sequence number, then wait
/// for its ack on our own pipe.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PingSpec {
    /// The echo's pipe.
    pub pipe: String,
    /// Our ack pipe.
    pub ack_pipe: String,
    /// The echo's peer ID.
    pub peer: String,
    /// Connect to this address first (direct; `None`: through a relay).
    pub addr: Option<SocketAddr>,
    /// Pause between pings.
    pub every_ms: u64,
}

/// A socket stream of the known byte pattern, in segments (one connection
/// each).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamSpec {
    /// The server socket's pipe.
    pub pipe: String,
    /// The server's peer ID.
    pub peer: String,
    /// Connect to this address first.
    pub addr: Option<SocketAddr>,
    /// Bytes per connection.
    pub segment_bytes: u64,
    /// Paced to this many bytes per second.
    pub rate_bytes_per_s: u64,
}

/// Everything a worker process does (passed as JSON on its command line).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct WorkerSpec {
    /// Rendezvous, relay or edge.
    pub role: WorkerRole,
    /// Name in reports.
    pub name: String,
    /// Home directory (identity: the same home gives the same peer ID).
    pub home: PathBuf,
    /// TCP address to listen on (`None`: none for edges, any loopback
    /// port for rendezvous and relays).
    pub listen: Option<SocketAddr>,
    /// RSA key size.
    pub key_bits: usize,
    /// Rendezvous: the other rendezvous; relay: a relay to connect to.
    pub peers: Vec<SocketAddr>,
    /// Edge: rendezvous seeds (tried in order).
    pub rdvs: Vec<SocketAddr>,
    /// Edge: relay seeds.
    pub relays: Vec<SocketAddr>,
    /// Edge: SRDI value to publish (`Adv`/`Name`/value).
    pub publish: Option<String>,
    /// Edge: SRDI value to look up, again and again.
    pub lookup: Option<String>,
    /// Pause between lookups.
    pub lookup_every_ms: u64,
    /// Edge: answer pings on this unicast pipe.
    pub echo_pipe: Option<String>,
    /// Edge: ping an echo.
    pub ping: Option<PingSpec>,
    /// Edge: accept streaming sockets on this pipe.
    pub stream_server: Option<String>,
    /// Edge: stream to a server socket.
    pub stream: Option<StreamSpec>,
    /// Stop by itself after this long (edges joining and leaving).
    pub lifetime_ms: Option<u64>,
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

fn bad(reason: impl Into<String>) -> BenchError {
    BenchError::Responder {
        layer: "worker".into(),
        reason: reason.into(),
    }
}

fn pipe_adv(id: &str) -> Result<PipeAdvertisement, BenchError> {
    let id: PipeId = id
        .parse()
        .map_err(|_| BenchError::BadOption(format!("bad pipe ID {id:?}")))?;
    Ok(PipeAdvertisement::new(id, PipeType::Unicast))
}

fn peer_id(s: &str) -> Result<PeerId, BenchError> {
    s.parse()
        .map_err(|_| BenchError::BadOption(format!("bad peer ID {s:?}")))
}

/// The stream's byte at offset `k`.
pub fn pattern_byte(k: u64) -> u8 {
    (k % 251) as u8
}

/// Counters of a worker, printed on every `STATS` line.
#[derive(Default)]
struct Counters {
    lookups_ok: AtomicU64,
    lookups_failed: AtomicU64,
    pings_sent: AtomicU64,
    pings_acked: AtomicU64,
    ping_timeouts: AtomicU64,
    ping_send_errors: AtomicU64,
    late_acks: AtomicU64,
    echoed: AtomicU64,
    echo_dups: AtomicU64,
    echo_errors: AtomicU64,
    stream_bytes_out: AtomicU64,
    stream_bytes_in: AtomicU64,
    segments_ok: AtomicU64,
    segments_failed: AtomicU64,
    connect_errors: AtomicU64,
    /// Rendezvous: leased edges, SRDI index entries, lookups admitted.
    rdv_clients: AtomicU64,
    rdv_index: AtomicU64,
    rdv_queries: AtomicU64,
}

impl Counters {
    fn line(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let ops = g(&self.lookups_ok)
            + g(&self.pings_acked)
            + g(&self.echoed)
            + g(&self.segments_ok)
            + g(&self.rdv_queries);
        let errors = g(&self.lookups_failed)
            + g(&self.ping_timeouts)
            + g(&self.ping_send_errors)
            + g(&self.echo_errors)
            + g(&self.segments_failed)
            + g(&self.connect_errors);
        let tasks = tokio::runtime::Handle::try_current()
            .map(|h| h.metrics().num_alive_tasks())
            .unwrap_or(0);
        format!(
            "STATS tasks={tasks} ops={ops} errors={errors} lookups_ok={} lookups_failed={} pings_sent={} pings_acked={} ping_timeouts={} ping_send_errors={} late_acks={} echoed={} echo_dups={} echo_errors={} stream_bytes_out={} stream_bytes_in={} segments_ok={} segments_failed={} connect_errors={} rdv_clients={} rdv_index={} rdv_queries={}",
            g(&self.lookups_ok),
            g(&self.lookups_failed),
            g(&self.pings_sent),
            g(&self.pings_acked),
            g(&self.ping_timeouts),
            g(&self.ping_send_errors),
            g(&self.late_acks),
            g(&self.echoed),
            g(&self.echo_dups),
            g(&self.echo_errors),
            g(&self.stream_bytes_out),
            g(&self.stream_bytes_in),
            g(&self.segments_ok),
            g(&self.segments_failed),
            g(&self.connect_errors),
            g(&self.rdv_clients),
            g(&self.rdv_index),
            g(&self.rdv_queries),
        )
    }
}

fn inc(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// The whole worker process: parses the spec, runs [`run`] on a
/// multi-threaded runtime and exits (without waiting for tasks still
/// running). Used by `juxta soak-worker` and by the `juxta-bench-worker`
/// test binary.
pub fn main_json(json: &str) -> std::process::ExitCode {
    let spec: WorkerSpec = match serde_json::from_str(json) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("soak-worker: bad spec: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("soak-worker: no runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = match rt.block_on(run(spec)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("soak-worker: {e}");
            1
        }
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// Runs a worker until `STOP` on stdin, stdin closing or its lifetime
/// ending; prints `DONE` last. The caller exits the process afterwards.
pub async fn run(spec: WorkerSpec) -> Result<(), BenchError> {
    let counters = Arc::new(Counters::default());
    let (stop_tx, stop) = watch::channel(false);
    // STOP on stdin (or stdin closing: the coordinator is gone).
    let tx = stop_tx.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::stdin().lock().lines() {
            match l {
                Ok(l) if l.trim() != "STOP" => continue,
                _ => break,
            }
        }
        let _ = tx.send(true);
    });
    if let Some(ms) = spec.lifetime_ms {
        let tx = stop_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let _ = tx.send(true);
        });
    }
    let c = counters.clone();
    let mut stop_stats = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => println!("{}", c.line()),
                _ = stop_stats.wait_for(|s| *s) => break,
            }
        }
    });
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    match spec.role {
        WorkerRole::Rendezvous => {
            let opts = crate::rendezvous::ServeOptions {
                listen: spec.listen.unwrap_or(loopback),
                home: spec.home.clone(),
                model: "srdi".into(),
                max_clients: 100_000,
                rate_limit: 1_000_000,
                key_bits: spec.key_bits,
                peers: spec.peers.clone(),
                central: None,
                max_entries: juxta::proto::srdi::index::DEFAULT_MAX_ENTRIES,
                group_credential: None,
                max_connections: juxta::PeerConfig::new(&spec.home).max_connections,
                max_per_addr: None,
                max_pending_per_addr: None,
                lease_ms: None,
            };
            let listen = opts.listen;
            let peer = crate::rendezvous::start(opts).await?;
            println!(
                "READY {} {}",
                peer.local_addr().unwrap_or(listen),
                peer.peer_id()
            );
            if let Some(h) = peer.rendezvous() {
                let (h, c) = (h.clone(), counters.clone());
                tokio::spawn(async move {
                    loop {
                        let st = h.status();
                        c.rdv_clients.store(st.clients as u64, Ordering::Relaxed);
                        c.rdv_index
                            .store(st.index_entries as u64, Ordering::Relaxed);
                        c.rdv_queries.store(st.queries, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                });
            }
            let mut s = stop.clone();
            let _ = s.wait_for(|s| *s).await;
            drop(peer);
        }
        WorkerRole::Relay => {
            let mut s = stop.clone();
            tokio::select! {
                r = crate::relay::serve(
                    spec.listen.unwrap_or(loopback),
                    None,
                    spec.peers.first().copied(),
                    spec.home.clone(),
                    spec.key_bits,
                    |a, p, _| println!("READY {a} {p}"),
                ) => r?,
                _ = s.wait_for(|s| *s) => {}
            }
        }
        WorkerRole::Edge => edge(&spec, counters.clone(), stop).await?,
    }
    println!("{}", counters.line());
    println!("DONE");
    Ok(())
}

async fn edge(
    spec: &WorkerSpec,
    counters: Arc<Counters>,
    stop: watch::Receiver<bool>,
) -> Result<(), BenchError> {
    let mut cfg = PeerConfig::new(&spec.home).key_bits(spec.key_bits);
    if let Some(l) = spec.listen {
        cfg = cfg.listen(l);
    }
    if !spec.rdvs.is_empty() {
        cfg = cfg.rendezvous(RendezvousConfig::edge(spec.rdvs.clone()));
    }
    if !spec.relays.is_empty() {
        cfg = cfg.relay(RelayConfig::client(spec.relays.clone()));
    }
    let peer = Arc::new(Peer::start(cfg).await?);
    // Bind what others connect to before saying READY.
    let echo_in = match &spec.echo_pipe {
        Some(p) => Some(peer.pipes().create_input_pipe(&pipe_adv(p)?)?),
        None => None,
    };
    let server = match &spec.stream_server {
        Some(p) => Some(JxtaServerSocket::bind(
            &peer,
            &pipe_adv(p)?,
            SocketConfig::default(),
        )?),
        None => None,
    };
    let ack_in = match &spec.ping {
        Some(p) => Some(peer.pipes().create_input_pipe(&pipe_adv(&p.ack_pipe)?)?),
        None => None,
    };
    match peer.local_addr() {
        Some(a) => println!("READY {a} {}", peer.peer_id()),
        None => println!("READY - {}", peer.peer_id()),
    }
    let mut tasks = Vec::new();
    if let Some(h) = peer.rendezvous().cloned() {
        // Lease events (subscribe first, then report the current lease).
        let mut ev = h.subscribe();
        if let Some(r) = h.status().leased_to {
            println!("LEASE {:.3} {r}", now_ms());
        }
        let mut s = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    e = ev.recv() => match e {
                        Ok(RendezvousEvent::LeaseGained(r)) => println!("LEASE {:.3} {r}", now_ms()),
                        Ok(RendezvousEvent::LeaseLost { rdv, .. }) => println!("UNLEASE {:.3} {rdv}", now_ms()),
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(_) => break,
                    },
                    _ = s.wait_for(|s| *s) => break,
                }
            }
        });
        if let Some(v) = spec.publish.clone() {
            let h = h.clone();
            tokio::spawn(async move {
                h.wait_leased(Duration::from_secs(3600)).await;
                if let Err(e) = h
                    .srdi_publish("Adv", "Name", &v, Duration::from_secs(24 * 3600))
                    .await
                {
                    eprintln!("publish {v}: {e}");
                }
            });
        }
        if let Some(v) = spec.lookup.clone() {
            let (c, mut s) = (counters.clone(), stop.clone());
            let every = Duration::from_millis(spec.lookup_every_ms.max(1));
            tasks.push(tokio::spawn(async move {
                h.wait_leased(WAIT).await;
                while !*s.borrow() {
                    match h.lookup("Adv", "Name", &v, LOOKUP_TIMEOUT).await {
                        Ok(found) if !found.is_empty() => inc(&c.lookups_ok),
                        _ => {
                            inc(&c.lookups_failed);
                            println!("QFAIL {:.3}", now_ms());
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = s.wait_for(|s| *s) => {}
                    }
                }
            }));
        }
    }
    if let Some(relay) = peer.relay() {
        let (mut s, p) = (stop.clone(), peer.clone());
        tokio::spawn(async move {
            let mut last: Option<PeerId> = None;
            let mut first = true;
            loop {
                // Leased and connected (a lease with a dead relay is none).
                let now = relay.relay().filter(|r| p.is_connected_to(r));
                if now != last || first {
                    match now {
                        Some(r) => println!("RLEASE {:.3} {r}", now_ms()),
                        None if !first => println!("RLEASE {:.3} -", now_ms()),
                        None => {}
                    }
                    last = now;
                    first = false;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                    _ = s.wait_for(|s| *s) => break,
                }
            }
        });
    }
    if let Some(input) = echo_in {
        tasks.push(tokio::spawn(echo(
            peer.clone(),
            input,
            counters.clone(),
            stop.clone(),
        )));
    }
    if let Some(server) = server {
        tasks.push(tokio::spawn(stream_server(
            server,
            counters.clone(),
            stop.clone(),
        )));
    }
    if let (Some(ps), Some(ack_in)) = (spec.ping.clone(), ack_in) {
        let (p, c, s) = (peer.clone(), counters.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            if let Err(e) = pinger(&p, ps, ack_in, &c, s).await {
                eprintln!("pinger: {e}");
            }
        }));
    }
    if let Some(st) = spec.stream.clone() {
        let (p, c, s) = (peer.clone(), counters.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            if let Err(e) = stream_client(&p, st, &c, s).await {
                eprintln!("stream: {e}");
            }
        }));
    }
    let mut s = stop.clone();
    let _ = s.wait_for(|s| *s).await;
    // Let the activities finish their step (a segment's close may take a
    // few seconds), then stop.
    let deadline = Instant::now() + Duration::from_secs(20);
    for t in tasks {
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, t).await.is_err() {
            break;
        }
    }
    Ok(())
}

fn seq_of(m: &Message) -> Option<u64> {
    let e = m.get("", "s")?;
    let b: [u8; 8] = e.data.as_ref().try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

async fn echo(
    peer: Arc<Peer>,
    mut input: juxta::pipe::InputPipe,
    c: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    // Per sender (peer, its run nonce): the reply pipe and the highest
    // sequence number seen.
    let mut outs: HashMap<(PeerId, String), OutputPipe> = HashMap::new();
    let mut seen: HashMap<(PeerId, u64), u64> = HashMap::new();
    loop {
        let m = tokio::select! {
            m = input.recv() => match m { Some(m) => m, None => break },
            _ = stop.wait_for(|s| *s) => break,
        };
        let Some(seq) = seq_of(&m.message) else {
            continue;
        };
        let from = m.from.or_else(|| {
            m.message
                .get("", "f")
                .and_then(|e| std::str::from_utf8(&e.data).ok()?.parse().ok())
        });
        let nonce = m
            .message
            .get("", "n")
            .and_then(|e| <[u8; 8]>::try_from(e.data.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0);
        let ack = m
            .message
            .get("", "a")
            .and_then(|e| std::str::from_utf8(&e.data).ok().map(str::to_string));
        let (Some(from), Some(ack)) = (from, ack) else {
            continue;
        };
        if seen.len() >= MAX_ECHO_SENDERS && !seen.contains_key(&(from, nonce)) {
            seen.clear();
        }
        let max = seen.entry((from, nonce)).or_insert(0);
        if seq <= *max {
            inc(&c.echo_dups);
            println!("EDUP {:.3}", now_ms());
        } else {
            *max = seq;
        }
        let key = (from, ack.clone());
        if !outs.contains_key(&key) {
            if outs.len() >= MAX_ECHO_SENDERS {
                outs.clear();
            }
            let Ok(adv) = pipe_adv(&ack) else { continue };
            match peer.pipes().create_output_pipe(&adv, &[from], WAIT).await {
                Ok(o) => {
                    outs.insert(key.clone(), o);
                }
                Err(_) => {
                    inc(&c.echo_errors);
                    continue;
                }
            }
        }
        let reply = Message::new().with(Element::bytes("", "s", seq.to_be_bytes().to_vec()));
        let ok = match outs.get(&key) {
            Some(o) => o.send(reply).await.is_ok(),
            None => false,
        };
        if ok {
            inc(&c.echoed);
        } else {
            inc(&c.echo_errors);
            outs.remove(&key);
        }
    }
}

async fn reconnect(peer: &Peer, to: PeerId, addr: Option<SocketAddr>) -> Result<(), BenchError> {
    if let Some(a) = addr {
        if !peer.is_connected_to(&to) {
            peer.connect(a).await?;
        }
    }
    Ok(())
}

async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
}

async fn pinger(
    peer: &Peer,
    p: PingSpec,
    mut acks: juxta::pipe::InputPipe,
    c: &Counters,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BenchError> {
    let to = peer_id(&p.peer)?;
    let adv = pipe_adv(&p.pipe)?;
    let nonce = crate::util::random_u64();
    let me = peer.peer_id().to_string();
    let every = Duration::from_millis(p.every_ms);
    let mut out: Option<OutputPipe> = None;
    let mut seq = 0u64;
    let mut misses = 0u32;
    while !*stop.borrow() {
        if out.is_none() || misses >= 3 {
            misses = 0;
            out = None;
            let r = async {
                reconnect(peer, to, p.addr).await?;
                Ok::<_, BenchError>(peer.pipes().create_output_pipe(&adv, &[to], WAIT).await?)
            }
            .await;
            match r {
                Ok(o) => out = Some(o),
                Err(_) => {
                    inc(&c.connect_errors);
                    pause(&mut stop, Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        let Some(o) = &out else { continue };
        seq += 1;
        let m = Message::new()
            .with(Element::bytes("", "s", seq.to_be_bytes().to_vec()))
            .with(Element::bytes("", "n", nonce.to_be_bytes().to_vec()))
            .with(Element::bytes("", "f", me.clone().into_bytes()))
            .with(Element::bytes("", "a", p.ack_pipe.clone().into_bytes()));
        inc(&c.pings_sent);
        if o.send(m).await.is_err() {
            inc(&c.ping_send_errors);
            out = None;
            pause(&mut stop, Duration::from_millis(100)).await;
            continue;
        }
        let deadline = tokio::time::Instant::now() + ACK_TIMEOUT;
        let acked = loop {
            match tokio::time::timeout_at(deadline, acks.recv()).await {
                Ok(Some(a)) => match seq_of(&a.message) {
                    Some(s) if s == seq => break true,
                    Some(_) => inc(&c.late_acks),
                    None => {}
                },
                Ok(None) | Err(_) => break false,
            }
        };
        if acked {
            misses = 0;
            inc(&c.pings_acked);
        } else {
            misses += 1;
            inc(&c.ping_timeouts);
        }
        pause(&mut stop, every).await;
    }
    Ok(())
}

async fn stream_server(
    mut server: JxtaServerSocket,
    c: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let s = tokio::select! {
            s = server.accept() => s,
            _ = stop.wait_for(|s| *s) => break,
        };
        let Ok(mut s) = s else {
            continue;
        };
        let c = c.clone();
        tokio::spawn(async move {
            let mut tag = [0u8; 8];
            if s.read_exact(&mut tag).await.is_err() {
                return;
            }
            let tag = u64::from_be_bytes(tag);
            let mut buf = vec![0u8; 1 << 16];
            let (mut got, mut bad) = (0u64, 0u64);
            let end = loop {
                match s.read(&mut buf).await {
                    Ok(0) => break "eof",
                    Ok(n) => {
                        for (i, b) in buf[..n].iter().enumerate() {
                            if *b != pattern_byte(got + i as u64) {
                                bad += 1;
                            }
                        }
                        got += n as u64;
                        c.stream_bytes_in.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(_) => break "err",
                }
            };
            println!("SOCKR {tag:016x} {got} {bad} {end}");
            let _ = tokio::time::timeout(Duration::from_secs(5), s.shutdown()).await;
        });
    }
}

async fn stream_client(
    peer: &Peer,
    st: StreamSpec,
    c: &Counters,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BenchError> {
    let to = peer_id(&st.peer)?;
    let adv = pipe_adv(&st.pipe)?;
    const CHUNK: usize = 16 * 1024;
    let pat: Vec<u8> = (0..(CHUNK as u64 + 251)).map(pattern_byte).collect();
    let rate = st.rate_bytes_per_s.max(1) as f64;
    while !*stop.borrow() {
        let conn = async {
            reconnect(peer, to, st.addr).await?;
            Ok::<_, BenchError>(
                JxtaSocket::connect(&peer.pipes(), &adv, to, SocketConfig::default()).await?,
            )
        }
        .await;
        let mut s = match conn {
            Ok(s) => s,
            Err(_) => {
                inc(&c.connect_errors);
                pause(&mut stop, Duration::from_millis(200)).await;
                continue;
            }
        };
        let tag = crate::util::random_u64();
        let t0 = Instant::now();
        let mut off = 0u64;
        let mut ok = s.write_all(&tag.to_be_bytes()).await.is_ok();
        while ok && off < st.segment_bytes && !*stop.borrow() {
            let n = (st.segment_bytes - off).min(CHUNK as u64) as usize;
            let start = (off % 251) as usize;
            if s.write_all(&pat[start..start + n]).await.is_err() {
                ok = false;
                break;
            }
            off += n as u64;
            c.stream_bytes_out.fetch_add(n as u64, Ordering::Relaxed);
            let due = t0 + Duration::from_secs_f64(off as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
        ok = ok
            && s.flush().await.is_ok()
            && matches!(
                tokio::time::timeout(Duration::from_secs(20), s.shutdown()).await,
                Ok(Ok(()))
            );
        println!("SOCKW {tag:016x} {off} {}", if ok { "ok" } else { "err" });
        if ok {
            inc(&c.segments_ok);
        } else {
            inc(&c.segments_failed);
            pause(&mut stop, Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------
// The coordinator's side.

/// What a coordinator has read from one worker.
#[derive(Debug, Default, Clone)]
pub struct WorkerLog {
    /// The latest `STATS` counters.
    pub stats: BTreeMap<String, f64>,
    /// Rendezvous lease events: (unix ms, rendezvous peer, gained).
    pub leases: Vec<(f64, String, bool)>,
    /// Relay lease changes: (unix ms, relay peer or `None`).
    pub relay_leases: Vec<(f64, Option<String>)>,
    /// Failed lookups (unix ms).
    pub query_failures: Vec<f64>,
    /// Writing ends of sockets: (tag, bytes, ok).
    pub written: Vec<(String, u64, bool)>,
    /// Reading ends of sockets: (tag, bytes, bytes out of place, ended by EOF).
    pub read: Vec<(String, u64, u64, bool)>,
    /// Duplicates seen by the pipe echo (unix ms).
    pub dups: Vec<f64>,
    /// Events beyond [`MAX_EVENTS`] that were only counted.
    pub dropped_events: u64,
    /// `DONE` was printed.
    pub done: bool,
    /// The output ended (the process exited or was killed).
    pub ended: bool,
}

fn push<T>(v: &mut Vec<T>, x: T, dropped: &mut u64) {
    if v.len() < MAX_EVENTS {
        v.push(x);
    } else {
        *dropped += 1;
    }
}

impl WorkerLog {
    /// Parses one line of a worker's output.
    pub fn parse(&mut self, line: &str) {
        let mut it = line.split_whitespace();
        let kind = it.next().unwrap_or("");
        let f = |s: Option<&str>| s.and_then(|s| s.parse::<f64>().ok());
        let d = &mut self.dropped_events;
        match kind {
            "STATS" => {
                for kv in it {
                    if let Some((k, v)) = kv.split_once('=') {
                        if let Ok(v) = v.parse::<f64>() {
                            self.stats.insert(k.to_string(), v);
                        }
                    }
                }
            }
            "LEASE" | "UNLEASE" => {
                if let (Some(t), Some(p)) = (f(it.next()), it.next()) {
                    push(&mut self.leases, (t, p.to_string(), kind == "LEASE"), d);
                }
            }
            "RLEASE" => {
                if let (Some(t), Some(p)) = (f(it.next()), it.next()) {
                    let p = (p != "-").then(|| p.to_string());
                    push(&mut self.relay_leases, (t, p), d);
                }
            }
            "QFAIL" => {
                if let Some(t) = f(it.next()) {
                    push(&mut self.query_failures, t, d);
                }
            }
            "EDUP" => {
                if let Some(t) = f(it.next()) {
                    push(&mut self.dups, t, d);
                }
            }
            "SOCKW" => {
                if let (Some(tag), Some(n), Some(ok)) = (it.next(), f(it.next()), it.next()) {
                    push(
                        &mut self.written,
                        (tag.to_string(), n as u64, ok == "ok"),
                        d,
                    );
                }
            }
            "SOCKR" => {
                if let (Some(tag), Some(n), Some(b), Some(end)) =
                    (it.next(), f(it.next()), f(it.next()), it.next())
                {
                    push(
                        &mut self.read,
                        (tag.to_string(), n as u64, b as u64, end == "eof"),
                        d,
                    );
                }
            }
            "DONE" => self.done = true,
            _ => {}
        }
    }

    /// A counter of the latest `STATS` line (0 when absent).
    pub fn stat(&self, k: &str) -> f64 {
        self.stats.get(k).copied().unwrap_or(0.0)
    }

    /// The rendezvous this edge holds a lease with, per its events.
    pub fn current_lease(&self) -> Option<&str> {
        match self.leases.last() {
            Some((_, p, true)) => Some(p),
            _ => None,
        }
    }
}

/// A worker child process (killed when dropped).
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Name in reports.
    pub name: String,
    /// Role.
    pub role: WorkerRole,
    /// Its address (`None` for an edge that does not listen).
    pub addr: Option<SocketAddr>,
    /// Its peer ID.
    pub peer: String,
    /// Its process ID.
    pub pid: u32,
    /// What it printed.
    pub log: Arc<Mutex<WorkerLog>>,
    /// The spec it was started with (to restart it).
    pub spec: WorkerSpec,
}

impl Worker {
    /// Starts `<exe> soak-worker <spec>` and waits for its `READY` line.
    pub async fn spawn(exe: &Path, spec: WorkerSpec) -> Result<Worker, BenchError> {
        let json = serde_json::to_string(&spec).map_err(|e| bad(format!("spec: {e}")))?;
        let mut child = Command::new(exe)
            .arg(SUBCOMMAND)
            .arg(&json)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BenchError::Io {
                what: format!("starting worker {} ({})", spec.name, exe.display()),
                source,
            })?;
        let stdout = child.stdout.take().ok_or_else(|| bad("no stdout"))?;
        let stdin = child.stdin.take();
        let pid = child.id().ok_or_else(|| bad("no PID"))?;
        let mut lines = BufReader::new(stdout).lines();
        // Lines before READY (none expected) are skipped.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let (addr, peer) = loop {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .map_err(|_| bad(format!("{}: no READY line within 60 s", spec.name)))?
                .map_err(|source| BenchError::Io {
                    what: "reading worker output".into(),
                    source,
                })?
                .ok_or_else(|| bad(format!("{} exited before READY", spec.name)))?;
            let mut it = line.split_whitespace();
            if let (Some("READY"), Some(a), Some(p)) = (it.next(), it.next(), it.next()) {
                break (a.parse::<SocketAddr>().ok(), p.to_string());
            }
        };
        let log = Arc::new(Mutex::new(WorkerLog::default()));
        let l2 = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                l2.lock().expect("worker log").parse(&line);
            }
            l2.lock().expect("worker log").ended = true;
        });
        Ok(Worker {
            child,
            stdin,
            name: spec.name.clone(),
            role: spec.role,
            addr,
            peer,
            pid,
            log,
            spec,
        })
    }

    /// Asks the worker to stop (`STOP` on its stdin).
    pub async fn ask_stop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"STOP\n").await;
            let _ = s.flush().await;
        }
    }

    /// Asks the worker to stop, waits up to `timeout` for its output to
    /// end, then kills it if still running and reaps it.
    pub async fn stop(&mut self, timeout: Duration) {
        self.ask_stop().await;
        let _ = tokio::time::timeout(timeout, self.child.wait()).await;
        let _ = self.child.kill().await;
    }

    /// Kills the process (SIGKILL, by its PID) and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// A copy of its log.
    pub fn snapshot(&self) -> WorkerLog {
        self.log.lock().expect("worker log").clone()
    }
}

/// One sample of a process from `/proc`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcSample {
    /// Resident memory (VmRSS), MB.
    pub rss_mb: f64,
    /// Open file descriptors (entries of `/proc/<pid>/fd`).
    pub fds: u64,
    /// Threads (entries of `/proc/<pid>/task`).
    pub threads: u64,
}

/// Reads RSS, descriptors and threads of `pid` (`None` when it is gone).
pub fn proc_sample(pid: u32) -> Option<ProcSample> {
    let rss_mb = crate::relay::rss_mb(pid)?;
    let count = |d: &str| -> Option<u64> {
        Some(std::fs::read_dir(format!("/proc/{pid}/{d}")).ok()?.count() as u64)
    };
    Some(ProcSample {
        rss_mb,
        fds: count("fd")?,
        threads: count("task")?,
    })
}

// ---------------------------------------------------------------------
// Rendezvous kills, shared by `chaos` and `recovery`.

/// Unix time now, ms (the clock of the workers' event lines).
pub fn unix_ms() -> f64 {
    now_ms()
}

/// Median, 99th percentile and maximum of `v` (sorted in place); `None`s
/// for no samples.
pub fn p50_p99_max(v: &mut [f64]) -> (Option<f64>, Option<f64>, Option<f64>) {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (None, None, None);
    }
    (
        Some(crate::util::percentile(v, 0.5)),
        Some(crate::util::percentile(v, 0.99)),
        v.last().copied(),
    )
}

/// The first lease (to anyone but `not`) an edge reported after unix ms `t`.
pub fn leased_after(log: &WorkerLog, t: f64, not: Option<&str>) -> Option<f64> {
    log.leases
        .iter()
        .find(|(at, p, gained)| *gained && *at > t && Some(p.as_str()) != not)
        .map(|(at, _, _)| *at)
}

/// One rendezvous kill ([`kill_busiest_rendezvous`]).
#[derive(Debug, Clone)]
pub struct RdvKill {
    /// Index of the killed rendezvous in the slice given.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// When it was killed (unix ms).
    pub t_kill: f64,
    /// Edges that held a lease with it.
    pub affected: usize,
    /// From the kill until each of those reported a lease with another
    /// rendezvous, ms (only those that did within the limit).
    pub recovery_ms: Vec<f64>,
}

/// Kills (SIGKILL by PID) the live rendezvous that the most `edges` lease
/// (the lowest index on a tie; those in `killed` are skipped), then waits up
/// to `limit` for every edge it orphaned to report a lease with another
/// rendezvous. `None` when no rendezvous is left to kill.
pub async fn kill_busiest_rendezvous(
    rdvs: &mut [Worker],
    killed: &[usize],
    edges: &[Worker],
    limit: Duration,
) -> Option<RdvKill> {
    let count = |r: &Worker| {
        edges
            .iter()
            .filter(|e| e.log.lock().expect("log").current_lease() == Some(&r.peer))
            .count()
    };
    let ti = (0..rdvs.len())
        .filter(|i| !killed.contains(i))
        .max_by_key(|i| (count(&rdvs[*i]), usize::MAX - i))?;
    let target = rdvs[ti].peer.clone();
    let affected: Vec<&Worker> = edges
        .iter()
        .filter(|e| e.log.lock().expect("log").current_lease() == Some(&target))
        .collect();
    let t_kill = now_ms();
    rdvs[ti].kill().await;
    let deadline = Instant::now() + limit;
    let mut rec: Vec<Option<f64>> = vec![None; affected.len()];
    while Instant::now() < deadline && rec.iter().any(Option::is_none) {
        for (k, e) in affected.iter().enumerate() {
            if rec[k].is_none() {
                let log = e.log.lock().expect("log");
                rec[k] = leased_after(&log, t_kill, Some(&target)).map(|t| t - t_kill);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Some(RdvKill {
        index: ti,
        name: rdvs[ti].name.clone(),
        t_kill,
        affected: affected.len(),
        recovery_ms: rec.into_iter().flatten().collect(),
    })
}

/// Waits up to `limit` until every edge reports a rendezvous lease;
/// returns how many do.
pub async fn wait_edges_leased(edges: &[Worker], limit: Duration) -> usize {
    let leased = || {
        edges
            .iter()
            .filter(|e| e.log.lock().expect("log").current_lease().is_some())
            .count()
    };
    let t = Instant::now();
    while t.elapsed() < limit && leased() < edges.len() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    leased()
}
