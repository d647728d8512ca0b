//! `juxta bench leases`: how many leased edges one rendezvous process holds,
//! and what each costs it (issue #16: "one rendezvous holds 10,000 leased
//! edges, report RSS per edge").
//!
//! Why a scenario of its own: `juxta bench rendezvous` emulates each edge
//! as a full runtime [`juxta::Peer`] in the bench process, far too heavy
//! for thousands. Here one rendezvous runs as its own process (`juxta
//! rdv-serve`, [`RdvProcess`]) and the bench opens N lightweight lease
//! clients against it. Each is a real TCP connection from its own peer
//! identity (an RSA key and the certificate its `cbid` peer ID derives
//! from) speaking the real protocol with the protocol crate's own code,
//! nothing re-implemented:
//! - the welcome and the compact handshake that proves the client's peer
//!   ID ([`juxta_proto::wire::connection`]; a rendezvous leases only to
//!   proven peers, docs/security.md);
//! - RVP lease requests and renewals, driven by the edge state machine the
//!   runtime's edges run ([`EdgeClient`]: renewal every `heartbeat_ms` or
//!   half the granted lease, a renewal unanswered within
//!   `response_timeout_ms` loses the lease and asks again).
//!
//! The rendezvous keeps its defences: at most 32 connections per remote
//! address (the runtime's default, `rdv-serve --max-per-addr 32`) and 8
//! still in their welcome per address, so the clients spread over many
//! loopback source addresses (`127.2.x.y`, at most
//! [`LeasesOptions::per_addr`] clients each, consecutive clients on
//! different addresses, at most 8 from one address in their welcome); only
//! its total connection limit is raised to hold N (`rdv-serve
//! --max-connections`). At most [`LeasesOptions::in_flight`] clients are
//! setting up at once.
//!
//! Measured: edges leased, refused and failed (by reason), the time to
//! lease all, the rendezvous process' RSS before any edge, after all
//! leases and at the end of the hold, its peak (`VmHWM`), RSS per leased
//! edge, its CPU time; then, holding the leases for
//! [`LeasesOptions::hold`]: renewals answered and their round trip,
//! leases lost (by reason), and the round trip of SRDI lookups from one
//! extra full edge (a [`juxta::Peer`]) before the edges and while they are
//! held. The rendezvous is killed by PID at the end, also on error.
//!
//! Identities: RSA key generation is the slow part of setting up N clients
//! (about 10 ms per 1024-bit key here); keys are generated on every core,
//! at [`LeasesOptions::key_bits`] (1024 by default: the smallest the
//! identity code accepts, [`juxta_proto::identity::MIN_KEY_BITS`], and what
//! JXSE 2.7 generates), and with [`LeasesOptions::identities`] kept in that
//! directory (PEM files) and reused by the next run.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use juxta::proto::advertisement::PeerAdvertisement;
use juxta::proto::endpoint::{demangle, mangle, NET_GROUP_UNIQUE};
use juxta::proto::id::{PeerGroupId, PeerId};
use juxta::proto::identity::{Identity, IdentityError};
use juxta::proto::message::codec::EncodedMessage;
use juxta::proto::rendezvous::edge::{EdgeClient, EdgeConfig, EdgeEvent, LossReason};
use juxta::proto::rendezvous::messages::{LeaseMessage, RDV_SERVICE};
use juxta::proto::wire::connection::{
    ConnectionConfig, ConnectionError, Inbound, InboundEvent, Outbound, Role,
};
use juxta::rendezvous::RendezvousConfig;
use juxta::{Peer, PeerConfig};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpSocket;
use tokio::sync::{watch, Semaphore};

use crate::lease_queries::{published_name, QueryOrder, QueryRow, QueryTable};
use crate::rendezvous::RdvProcess;
use crate::BenchError;

/// Most clients per source address the rendezvous' default per-address
/// limit (`max_connections_per_addr`, 32) admits.
pub const RUNTIME_PER_ADDR: usize = 32;
/// The runtime's default per-address limit of connections still in their
/// welcome (`max_pending_per_addr`).
pub const RUNTIME_PENDING_PER_ADDR: usize = 8;
/// Most source addresses (`127.2.0.1` on).
pub const MAX_SOURCE_ADDRS: usize = 254 * 250;
/// Most edges asked for in one run.
pub const MAX_EDGES: usize = 100_000;
/// Receive buffer reserved per client (messages here are a few KB).
const RX_RESERVE: usize = 8 * 1024;

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct LeasesOptions {
    /// Lease clients to open.
    pub edges: usize,
    /// Clients per loopback source address (at most 32, the rendezvous'
    /// per-address limit).
    pub per_addr: usize,
    /// Clients setting up (connect, handshake, first lease) at once.
    pub in_flight: usize,
    /// How long the leases are held after all are set up.
    pub hold: Duration,
    /// Renewal interval of the clients (the runtime edges' heartbeat,
    /// 500 ms by default; also bounded by half the granted lease).
    pub heartbeat_ms: u64,
    /// How long a client waits for a grant before its lease counts as lost.
    pub response_timeout_ms: u64,
    /// The lease the rendezvous grants, ms (`None`: its default, 20 min).
    pub lease_ms: Option<u64>,
    /// RSA key size of the clients and the rendezvous.
    pub key_bits: usize,
    /// Directory keeping the clients' identities between runs (never the
    /// repository); `None`: generated each run.
    pub identities: Option<PathBuf>,
    /// Longest setup of one client (connect, handshake, first lease) after
    /// it got its turn.
    pub setup_timeout: Duration,
    /// Interval of the probe edge's lookups.
    pub probe_interval: Duration,
    /// The executable to run as `rdv-serve`.
    pub exe: PathBuf,
    /// Offered total discovery query rates, queries/s, one after the other
    /// once every client is leased (empty: no queries;
    /// [`crate::lease_queries`]).
    pub query_rates: Vec<u32>,
    /// How long each rate is offered.
    pub query_duration: Duration,
    /// Share of queries for a published name, %.
    pub positive_pct: u32,
    /// SRDI entries (names) each client publishes when queries are asked.
    pub names_per_edge: usize,
    /// A query not at its publisher after this long counts as lost.
    pub query_timeout: Duration,
    /// With queries: after each rate, the same rate through the plain-TCP
    /// forwarder ([`crate::query_forward`]), the floor of this machine.
    pub query_baseline: bool,
}

impl Default for LeasesOptions {
    fn default() -> LeasesOptions {
        LeasesOptions {
            edges: 10_000,
            per_addr: 16,
            in_flight: 64,
            hold: Duration::from_secs(30),
            heartbeat_ms: juxta::proto::rendezvous::edge::DEFAULT_HEARTBEAT_MS,
            response_timeout_ms: juxta::proto::rendezvous::edge::DEFAULT_RESPONSE_TIMEOUT_MS,
            lease_ms: None,
            key_bits: juxta::proto::identity::MIN_KEY_BITS,
            identities: None,
            setup_timeout: Duration::from_secs(60),
            probe_interval: Duration::from_millis(100),
            exe: crate::rendezvous::default_exe(),
            query_rates: Vec::new(),
            query_duration: Duration::from_secs(5),
            positive_pct: 50,
            names_per_edge: 1,
            query_timeout: crate::rendezvous::LOOKUP_TIMEOUT,
            query_baseline: true,
        }
    }
}

impl LeasesOptions {
    /// Refuses what cannot be honoured, naming the option.
    ///
    /// ```
    /// use juxta_bench::leases::LeasesOptions;
    /// let mut o = LeasesOptions { edges: 40, ..Default::default() };
    /// assert!(o.validate().is_ok());
    /// o.per_addr = 33;
    /// assert!(o.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::BadOption(m));
        if self.edges == 0 || self.edges > MAX_EDGES {
            return bad(format!("--edges {}: 1..={MAX_EDGES}", self.edges));
        }
        if self.per_addr == 0 || self.per_addr > RUNTIME_PER_ADDR {
            return bad(format!(
                "--per-addr {}: 1..={RUNTIME_PER_ADDR} (the rendezvous' per-address limit)",
                self.per_addr
            ));
        }
        if self.source_addrs() > MAX_SOURCE_ADDRS {
            return bad(format!(
                "--edges {} / --per-addr {}: more than {MAX_SOURCE_ADDRS} source addresses",
                self.edges, self.per_addr
            ));
        }
        if self.in_flight == 0 || self.in_flight > 4096 {
            return bad(format!("--in-flight {}: 1..=4096", self.in_flight));
        }
        if self.heartbeat_ms == 0 || self.response_timeout_ms == 0 {
            return bad("--heartbeat-ms and --response-timeout-ms must be > 0".into());
        }
        if self.lease_ms == Some(0) {
            return bad("--lease-ms must be > 0".into());
        }
        if !self.query_rates.is_empty() {
            if self.query_rates.contains(&0) {
                return bad("--query-rate: every rate must be > 0".into());
            }
            if self.edges < 2 {
                return bad("--query-rate needs --edges 2 or more (querier and publisher)".into());
            }
            if self.positive_pct > 100 {
                return bad(format!("--positive-pct {}: 0..=100", self.positive_pct));
            }
            if self.names_per_edge == 0 || self.names_per_edge > 1000 {
                return bad(format!(
                    "--names-per-edge {}: 1..=1000",
                    self.names_per_edge
                ));
            }
            if self.query_duration.is_zero() || self.query_timeout.is_zero() {
                return bad("--query-ms and --query-timeout-ms must be > 0".into());
            }
            if self.total_queries() > crate::lease_queries::MAX_QUERIES {
                return bad(format!(
                    "--query-rate x --query-ms: {} queries, at most {}",
                    self.total_queries(),
                    crate::lease_queries::MAX_QUERIES
                ));
            }
        }
        Ok(())
    }

    /// Queries all the rates offer together.
    pub fn total_queries(&self) -> usize {
        self.query_rates
            .iter()
            .map(|&r| (f64::from(r) * self.query_duration.as_secs_f64()).ceil() as usize)
            .fold(0usize, |a, b| a.saturating_add(b))
    }

    /// Source addresses the clients use.
    pub fn source_addrs(&self) -> usize {
        self.edges.div_ceil(self.per_addr.max(1))
    }
}

/// Loopback source address number `a`: `127.2.0.1` and on (never
/// `127.0.0.1`, the rendezvous' and the probe's). Client `i` of a run with
/// `n` addresses uses address `i % n`, so consecutive clients (which set up
/// at the same time) come from different addresses.
///
/// ```
/// use juxta_bench::leases::source_addr;
/// assert_eq!(source_addr(0).to_string(), "127.2.0.1");
/// assert_eq!(source_addr(1).to_string(), "127.2.0.2");
/// assert_eq!(source_addr(254).to_string(), "127.2.1.1");
/// ```
pub fn source_addr(a: usize) -> IpAddr {
    let hi = 2 + a / (254 * 256);
    let mid = (a / 254) % 256;
    let lo = a % 254 + 1;
    IpAddr::V4(Ipv4Addr::new(127, hi as u8, mid as u8, lo as u8))
}

/// Errors of the identity cache.
#[derive(Debug, thiserror::Error)]
pub enum LeasesError {
    /// Generating or loading an identity failed.
    #[error("identity {index}: {source}")]
    Identity {
        /// which one
        index: usize,
        /// why
        #[source]
        source: IdentityError,
    },
    /// A cached identity file is not a key and a certificate.
    #[error("identity file {0} holds no certificate")]
    BadCache(PathBuf),
}

impl From<LeasesError> for BenchError {
    fn from(e: LeasesError) -> BenchError {
        BenchError::BadOption(e.to_string())
    }
}

/// How the clients' identities were obtained.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IdentityFacts {
    /// Generated this run.
    pub generated: usize,
    /// Loaded from the cache directory.
    pub loaded: usize,
    /// Wall time of generating and loading them all, s.
    pub seconds: f64,
    /// Threads used.
    pub threads: usize,
}

/// `n` identities of `bits` bits, from `cache` where present there
/// (`rsa<bits>/<i>.pem`: key then certificate), the rest generated on every
/// core (and written to `cache`).
pub fn identities(
    n: usize,
    bits: usize,
    cache: Option<&Path>,
) -> Result<(Vec<Arc<Identity>>, IdentityFacts), BenchError> {
    let t0 = Instant::now();
    let dir = cache.map(|c| c.join(format!("rsa{bits}")));
    if let Some(d) = &dir {
        std::fs::create_dir_all(d).map_err(|source| BenchError::Io {
            what: format!("creating {}", d.display()),
            source,
        })?;
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let generated = AtomicUsize::new(0);
    let loaded = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Arc<Identity>>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let first_error: Mutex<Option<BenchError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || first_error.lock().map(|e| e.is_some()).unwrap_or(true) {
                    return;
                }
                match one_identity(i, bits, dir.as_deref(), now) {
                    Ok((id, was_loaded)) => {
                        if was_loaded {
                            loaded.fetch_add(1, Ordering::Relaxed);
                        } else {
                            generated.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Ok(mut slot) = slots[i].lock() {
                            *slot = Some(Arc::new(id));
                        }
                    }
                    Err(e) => {
                        if let Ok(mut f) = first_error.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().ok().flatten() {
        return Err(e);
    }
    let ids: Vec<Arc<Identity>> = slots
        .into_iter()
        .filter_map(|m| m.into_inner().ok().flatten())
        .collect();
    if ids.len() != n {
        return Err(BenchError::BadOption(format!(
            "made {} identities of {n}",
            ids.len()
        )));
    }
    Ok((
        ids,
        IdentityFacts {
            generated: generated.into_inner(),
            loaded: loaded.into_inner(),
            seconds: t0.elapsed().as_secs_f64(),
            threads,
        },
    ))
}

/// Identity `i`: loaded from `dir` if there, else generated (and saved).
fn one_identity(
    i: usize,
    bits: usize,
    dir: Option<&Path>,
    now: u64,
) -> Result<(Identity, bool), BenchError> {
    let id_err = |source| LeasesError::Identity { index: i, source };
    let path = dir.map(|d| d.join(format!("{i}.pem")));
    if let Some(p) = &path {
        if let Ok(text) = std::fs::read_to_string(p) {
            let at = text
                .find("-----BEGIN CERTIFICATE-----")
                .ok_or_else(|| LeasesError::BadCache(p.clone()))?;
            let (key, cert) = text.split_at(at);
            let id = Identity::from_pem(key, cert).map_err(id_err)?;
            return Ok((id, true));
        }
    }
    let id =
        Identity::generate(&mut rand::thread_rng(), bits, "JuxtaLease", now).map_err(id_err)?;
    if let Some(p) = &path {
        let (key, cert) = id.to_pem().map_err(id_err)?;
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, format!("{key}{cert}"))
            .and_then(|()| std::fs::rename(&tmp, p))
            .map_err(|source| BenchError::Io {
                what: format!("writing {}", p.display()),
                source,
            })?;
    }
    Ok((id, false))
}

/// Raises this process' descriptor limit (soft, up to the hard limit) to
/// at least `want`; the rendezvous child inherits it. Returns the limit now
/// in force.
pub fn raise_nofile(want: u64) -> Result<u64, BenchError> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| BenchError::Io {
        what: "reading RLIMIT_NOFILE".into(),
        source: e.into(),
    })?;
    if soft >= want {
        return Ok(soft);
    }
    let new = want.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, new, hard).map_err(|e| BenchError::Io {
        what: "raising RLIMIT_NOFILE".into(),
        source: e.into(),
    })?;
    Ok(new)
}

pub use crate::util::{proc_usage, ProcUsage};

/// Why a client ended or lost its lease, as a short label.
#[derive(Debug, thiserror::Error)]
enum ClientError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Protocol(#[from] ConnectionError),
    #[error("closed by the rendezvous")]
    Closed,
    #[error("setup timed out")]
    SetupTimeout,
}

impl ClientError {
    fn label(&self) -> String {
        match self {
            ClientError::Connect(e) => format!("connect: {:?}", e.kind()),
            ClientError::Io(e) => format!("io: {:?}", e.kind()),
            ClientError::Protocol(e) => format!("protocol: {e}"),
            ClientError::Closed => "closed".into(),
            ClientError::SetupTimeout => "setup timeout".into(),
        }
    }
}

fn loss_label(r: &LossReason) -> String {
    match r {
        LossReason::Timeout => "timeout".into(),
        LossReason::Refused(why) => format!("refused: {}", why.as_deref().unwrap_or("-")),
        LossReason::Disconnected => "disconnected".into(),
        LossReason::Unreachable => "unreachable".into(),
        LossReason::Expired => "expired".into(),
    }
}

/// Counters shared by the clients.
#[derive(Default)]
struct Shared {
    /// Clients that got their first lease.
    leased: AtomicUsize,
    /// Clients that ended (failed setup, or closed later).
    ended: AtomicUsize,
    /// Clients whose setup failed, by reason.
    failed: Mutex<BTreeMap<String, u64>>,
    /// Refusals (`ConnectedLease` 0) seen, by reason.
    refused: Mutex<BTreeMap<String, u64>>,
    /// Established clients whose connection ended, by reason.
    closed: Mutex<BTreeMap<String, u64>>,
    /// Losses seen by clients that had a lease (a renewal, or a request
    /// to regain the lease, not answered in time; a refusal; a
    /// disconnect), by reason.
    lost: Mutex<BTreeMap<String, u64>>,
    /// Clients holding a lease when told to stop.
    leased_at_stop: AtomicUsize,
    /// Renewals sent (lease requests while leased).
    renewals_sent: AtomicU64,
    /// Renewals answered with a grant.
    renewals_ok: AtomicU64,
    /// Leases regained after a loss.
    releases: AtomicU64,
    /// Messages other than lease messages received.
    other_messages: AtomicU64,
    /// The lease the rendezvous granted (ms), from a first grant.
    granted_lease_ms: AtomicI64,
    /// Setup times (connect to first grant), µs.
    setup_us: Mutex<Vec<u64>>,
    /// Renewal round trips, µs, with the time they were taken (ms since
    /// the epoch of the run).
    renew_rtt_us: Mutex<Vec<(u64, u64)>>,
    /// When the last first lease was granted (ms since the epoch).
    last_lease_ms: AtomicU64,
}

fn bump(m: &Mutex<BTreeMap<String, u64>>, k: String) {
    if let Ok(mut m) = m.lock() {
        *m.entry(k).or_default() += 1;
    }
}

fn snapshot_lost(s: &Shared) -> u64 {
    s.lost.lock().map(|m| m.values().sum()).unwrap_or(0)
}

/// What every client shares.
struct Ctx {
    rdv_addr: SocketAddr,
    rdv_peer: PeerId,
    epoch: Instant,
    edge: EdgeConfig,
    setup_timeout: Duration,
    turns: Arc<Semaphore>,
    shared: Shared,
    /// Discovery queries: names each client publishes and the table of
    /// sent and arrived queries (`None`: no queries).
    queries: Option<(usize, Arc<QueryTable>)>,
    /// The rendezvous' query queue, on the wire.
    query_to: juxta::proto::endpoint::ServiceAddress,
}

impl Ctx {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// One established connection: the protocol crate's two halves and the
/// socket.
struct Conn {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    inbound: Inbound,
    out: Outbound,
    rx: BytesMut,
}

async fn write_encoded(wr: &mut OwnedWriteHalf, enc: &EncodedMessage) -> std::io::Result<()> {
    if enc.chunks.len() == 1 {
        return wr.write_all(&enc.chunks[0]).await;
    }
    let mut buf = Vec::with_capacity(enc.len);
    for c in &enc.chunks {
        buf.extend_from_slice(c);
    }
    wr.write_all(&buf).await
}

/// Connects from `src`, exchanges welcomes and runs the compact handshake
/// to its end (the rendezvous then holds this peer ID as proven).
async fn open(ctx: &Ctx, id: &Arc<Identity>, src: IpAddr) -> Result<Conn, ClientError> {
    let sock = TcpSocket::new_v4().map_err(ClientError::Connect)?;
    sock.bind(SocketAddr::new(src, 0))
        .map_err(ClientError::Connect)?;
    let stream = sock
        .connect(ctx.rdv_addr)
        .await
        .map_err(ClientError::Connect)?;
    stream.set_nodelay(true)?;
    let (rd, mut wr) = stream.into_split();
    let cfg = ConnectionConfig::default();
    let dest = format!("tcp://{}", ctx.rdv_addr);
    let out = Outbound::new(cfg.clone(), Role::Initiator, id.clone());
    // A peer that does not listen names no reachable address, as the
    // runtime's own edges do.
    wr.write_all(&out.welcome(&dest, "tcp://127.0.0.1:0"))
        .await?;
    let inbound = Inbound::new(cfg)
        .with_local(id.peer_id())
        .with_local_address(&dest)
        .expecting(Some(ctx.rdv_peer));
    let mut c = Conn {
        rd,
        wr,
        inbound,
        out,
        rx: BytesMut::with_capacity(RX_RESERVE),
    };
    loop {
        while let Some(ev) = c.inbound.poll(&mut c.rx)? {
            match ev {
                InboundEvent::Welcome(w) => {
                    let offer = c.out.on_remote_welcome(w, &mut rand::thread_rng())?;
                    if let Some(o) = offer {
                        write_encoded(&mut c.wr, &o).await?;
                    }
                }
                InboundEvent::Handshake(h) => {
                    let outcome = c.out.handle_handshake(h, &mut rand::thread_rng())?;
                    if let Some(r) = &outcome.reply {
                        write_encoded(&mut c.wr, r).await?;
                    }
                    if outcome.proven {
                        if outcome.switch_inbound {
                            c.inbound.switch_to_compact_with(outcome.values);
                        } else {
                            c.inbound.prove_by_handshake();
                        }
                        return Ok(c);
                    }
                }
                InboundEvent::Message(_) | InboundEvent::Stream { .. } => {
                    ctx.shared.other_messages.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if c.rx.capacity() - c.rx.len() < 1024 {
            c.rx.reserve(RX_RESERVE);
        }
        if c.rd.read_buf(&mut c.rx).await? == 0 {
            return Err(ClientError::Closed);
        }
    }
}

/// One lease client, from its turn to the stop signal.
async fn client(
    ctx: Arc<Ctx>,
    (index, id): (usize, Arc<Identity>),
    (src, pending): (IpAddr, Arc<Semaphore>),
    mut orders: Option<tokio::sync::mpsc::Receiver<QueryOrder>>,
    mut stop: watch::Receiver<bool>,
) {
    let s = &ctx.shared;
    let Ok(turn) = ctx.turns.clone().acquire_owned().await else {
        return;
    };
    let mut turn = Some(turn);
    let t0 = Instant::now();
    let fail = |e: ClientError| {
        bump(&s.failed, e.label());
        s.ended.fetch_add(1, Ordering::Relaxed);
    };
    // At most the rendezvous' per-address limit of connections from one
    // address are in their welcome at once (beyond, it refuses them).
    let opened = tokio::time::timeout(ctx.setup_timeout, async {
        let _pending = pending.acquire().await;
        open(&ctx, &id, src).await
    })
    .await;
    let mut c = match opened {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return fail(e),
        Err(_) => return fail(ClientError::SetupTimeout),
    };
    let me = *id.peer_id();
    let pa: Bytes = PeerAdvertisement::new(me, PeerGroupId::NET, "JuxtaLease")
        .to_xml()
        .into();
    let mut edge = EdgeClient::new(me, PeerGroupId::NET, pa, [ctx.rdv_peer], ctx.edge);
    // This client's queries, printed once (with --query-rate).
    let mut template: Option<crate::lease_queries::QueryTemplate> = None;
    // The last wire address received and what it demangles to: the
    // compact decoder hands out one shared address per channel.
    let mut last_to: Option<(
        std::sync::Arc<juxta::proto::endpoint::ServiceAddress>,
        juxta::proto::endpoint::ServiceAddress,
    )> = None;
    let mut ever_leased = false;
    let mut renew_sent: Option<Instant> = None;
    let setup_deadline = tokio::time::Instant::from_std(t0 + ctx.setup_timeout);
    let r: Result<(), ClientError> = async {
        loop {
            let now = ctx.now();
            if edge.poll_timeout().is_some_and(|t| t <= now) {
                edge.handle_timeout(now);
            }
            let leased = edge.rendezvous().is_some();
            while let Some(t) = edge.poll_transmit() {
                let to = mangle(NET_GROUP_UNIQUE, &t.dest);
                let enc = c.out.encode(&to, t.message)?;
                write_encoded(&mut c.wr, &enc).await?;
                if leased {
                    s.renewals_sent.fetch_add(1, Ordering::Relaxed);
                    renew_sent = Some(Instant::now());
                }
            }
            while let Some(ev) = edge.poll_event() {
                match ev {
                    EdgeEvent::Connected { .. } => {
                        if ever_leased {
                            s.releases.fetch_add(1, Ordering::Relaxed);
                        } else {
                            ever_leased = true;
                            if let Some((k, _)) = &ctx.queries {
                                let m = crate::lease_queries::publish_message(me, index, *k);
                                let (to, msg) = crate::lease_queries::srdi_push(ctx.rdv_peer, &m);
                                let enc = c.out.encode(&to, msg)?;
                                write_encoded(&mut c.wr, &enc).await?;
                            }
                            s.leased.fetch_add(1, Ordering::Relaxed);
                            s.last_lease_ms.fetch_max(ctx.now(), Ordering::Relaxed);
                            if let Ok(mut v) = s.setup_us.lock() {
                                v.push(t0.elapsed().as_micros() as u64);
                            }
                            turn = None;
                        }
                    }
                    EdgeEvent::Lost { reason, .. } => {
                        if let LossReason::Refused(_) = reason {
                            bump(&s.refused, loss_label(&reason));
                        }
                        if ever_leased {
                            bump(&s.lost, loss_label(&reason));
                        }
                        renew_sent = None;
                    }
                    EdgeEvent::RepublishSrdi { .. } => {}
                }
            }
            if turn.is_some() && tokio::time::Instant::now() >= setup_deadline {
                return Err(ClientError::SetupTimeout);
            }
            let next = edge
                .poll_timeout()
                .map(|t| ctx.epoch + Duration::from_millis(t))
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            let next = tokio::time::Instant::from_std(next);
            let next = if turn.is_some() {
                next.min(setup_deadline)
            } else {
                next
            };
            if c.rx.capacity() - c.rx.len() < 1024 {
                c.rx.reserve(RX_RESERVE);
            }
            tokio::select! {
                r = c.rd.read_buf(&mut c.rx) => {
                    if r? == 0 {
                        return Err(ClientError::Closed);
                    }
                    while let Some(ev) = c.inbound.poll(&mut c.rx)? {
                        let InboundEvent::Message(m) = ev else {
                            continue;
                        };
                        if !last_to.as_ref().is_some_and(|(w, _)| std::sync::Arc::ptr_eq(w, &m.to)) {
                            last_to = Some((m.to.clone(), demangle((*m.to).clone()).1));
                        }
                        let real = &last_to.as_ref().expect("set above").1;
                        if let Some((_, table)) = &ctx.queries {
                            match crate::lease_queries::forwarded_query_id(real, &m.message) {
                                Some(Some(id)) => {
                                    table.arrived(id);
                                    continue;
                                }
                                Some(None) => {
                                    table.stray.fetch_add(1, Ordering::Relaxed);
                                    continue;
                                }
                                None => {}
                            }
                        }
                        if real.service != RDV_SERVICE {
                            s.other_messages.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        let was_leased = edge.rendezvous().is_some();
                        let grants = edge.stats().grants;
                        let now = ctx.now();
                        if !ever_leased && s.granted_lease_ms.load(Ordering::Relaxed) == 0 {
                            if let Ok(LeaseMessage::Granted { lease_ms, .. }) =
                                LeaseMessage::from_message(&m.message)
                            {
                                s.granted_lease_ms.store(lease_ms, Ordering::Relaxed);
                            }
                        }
                        if edge.handle_message(ctx.rdv_peer, &m.message, now).is_err() {
                            s.other_messages.fetch_add(1, Ordering::Relaxed);
                        }
                        if was_leased && edge.stats().grants > grants {
                            s.renewals_ok.fetch_add(1, Ordering::Relaxed);
                            if let Some(at) = renew_sent.take() {
                                if let Ok(mut v) = s.renew_rtt_us.lock() {
                                    v.push((now, at.elapsed().as_micros() as u64));
                                }
                            }
                        }
                    }
                }
                _ = tokio::time::sleep_until(next) => {}
                o = async {
                    match orders.as_mut() {
                        Some(r) => r.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let Some(o) = o else {
                        orders = None;
                        continue;
                    };
                    // What is queued goes out in one write.
                    let mut buf = Vec::new();
                    let mut next = Some(o);
                    while let Some(o) = next.take() {
                        if let Some((_, table)) = &ctx.queries {
                            table.sent(o.seq);
                        }
                        let msg = template
                            .get_or_insert_with(|| crate::lease_queries::QueryTemplate::new(me))
                            .message(&o);
                        let enc = c.out.encode(&ctx.query_to, msg)?;
                        for ch in &enc.chunks {
                            buf.extend_from_slice(ch);
                        }
                        if buf.len() < 64 * 1024 {
                            next = orders.as_mut().and_then(|r| r.try_recv().ok());
                        }
                    }
                    c.wr.write_all(&buf).await?;
                }
                _ = stop.changed() => {
                    if edge.rendezvous().is_some() {
                        s.leased_at_stop.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(());
                }
            }
        }
    }
    .await;
    match r {
        Ok(()) => {}
        Err(e) if ever_leased => {
            bump(&s.closed, e.label());
            s.ended.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => fail(e),
    }
}

/// Percentile `p` (0..=100) of sorted values ([`crate::util::percentile`]).
fn pct(sorted: &[u64], p: f64) -> f64 {
    let v: Vec<f64> = sorted.iter().map(|&x| x as f64).collect();
    crate::util::percentile(&v, p / 100.0)
}

/// Round trips of `n` SRDI lookups from the probe edge, ms (sorted), and
/// how many failed or did not find the probe.
async fn probe(
    h: &juxta::rendezvous::RendezvousHandle,
    me: PeerId,
    until: Instant,
    interval: Duration,
    max: usize,
) -> (Vec<u64>, u64) {
    let mut rtt = Vec::new();
    let mut failed = 0;
    while Instant::now() < until && rtt.len() + (failed as usize) < max {
        let t = Instant::now();
        match h
            .lookup("Adv", "Name", "leases-probe", Duration::from_secs(5))
            .await
        {
            Ok(who) if who.contains(&me) => rtt.push(t.elapsed().as_micros() as u64),
            _ => failed += 1,
        }
        tokio::time::sleep(interval.saturating_sub(t.elapsed())).await;
    }
    rtt.sort_unstable();
    (rtt, failed)
}

/// The result row (`scenario: "leases"`).
#[derive(Debug, Clone, Serialize)]
pub struct LeasesRow {
    /// `leases`.
    pub scenario: &'static str,
    /// Edges asked for.
    pub edges: usize,
    /// Edges that got a lease.
    pub leased: usize,
    /// Edges that never got one (setup failed), by reason.
    pub failed: BTreeMap<String, u64>,
    /// Refusals (`ConnectedLease` 0) received, by reason.
    pub refused: BTreeMap<String, u64>,
    /// Source addresses used, clients per address, setups at once.
    pub source_addrs: usize,
    /// Clients per source address.
    pub per_addr: usize,
    /// Clients setting up at once.
    pub in_flight: usize,
    /// RSA key size (clients and rendezvous).
    pub key_bits: usize,
    /// How the identities were made.
    pub identities: IdentityFacts,
    /// The clients' renewal interval, ms.
    pub heartbeat_ms: u64,
    /// The clients' wait for a grant, ms.
    pub response_timeout_ms: u64,
    /// The lease the rendezvous granted, ms.
    pub granted_lease_ms: i64,
    /// First connect to last first lease, s.
    pub lease_all_s: f64,
    /// One client's setup (connect, handshake, first grant) after its
    /// turn came, ms.
    pub setup_ms_p50: f64,
    /// Same, 99th percentile.
    pub setup_ms_p99: f64,
    /// The rendezvous process: RSS before any edge, MB.
    pub rdv_rss_mb_before: f64,
    /// RSS once every edge leased, MB.
    pub rdv_rss_mb_after: f64,
    /// RSS at the end of the hold, MB.
    pub rdv_rss_mb_end: f64,
    /// Peak RSS (`VmHWM`) at the end, MB.
    pub rdv_hwm_mb: f64,
    /// (after − before) / leased, KB.
    pub rss_kb_per_edge: f64,
    /// (end − before) / leased, KB.
    pub rss_kb_per_edge_end: f64,
    /// CPU time of the rendezvous while the edges leased, s.
    pub rdv_cpu_s_lease: f64,
    /// CPU time of the rendezvous during the hold, s.
    pub rdv_cpu_s_hold: f64,
    /// That over the hold's wall time, % of one core.
    pub rdv_cpu_pct_hold: f64,
    /// Its total CPU time at the end, s.
    pub rdv_cpu_s_total: f64,
    /// Leased edges the rendezvous itself counts at the end of the hold.
    pub rdv_clients_end: Option<u64>,
    /// The hold, s.
    pub hold_s: f64,
    /// Renewals sent during the hold.
    pub renewals_sent: u64,
    /// Renewals answered with a grant during the hold.
    pub renewals_ok: u64,
    /// Losses during the hold (the same as `lost_hold`): renewals, or
    /// requests to regain a lease, not answered within
    /// `response_timeout_ms`, or refused.
    pub renewals_failed: u64,
    /// Renewal round trip during the hold, ms.
    pub renew_ms_p50: f64,
    /// Same, 99th percentile.
    pub renew_ms_p99: f64,
    /// Same, maximum.
    pub renew_ms_max: f64,
    /// Losses over the whole run, by reason: lease requests (renewals, or
    /// requests to regain a lease) of clients that had a lease, not
    /// answered within `response_timeout_ms` (`timeout`), refused or
    /// disconnected. One outage can count several (each re-request that
    /// times out).
    pub lost: BTreeMap<String, u64>,
    /// Losses during the hold.
    pub lost_hold: u64,
    /// Clients holding a lease when stopped (their own view).
    pub leased_end: usize,
    /// Leases regained after a loss (whole run).
    pub releases: u64,
    /// Established connections that ended before the stop, by reason.
    pub closed: BTreeMap<String, u64>,
    /// Non-lease messages the clients received.
    pub other_messages: u64,
    /// Probe lookups before the edges: count and round trip, ms.
    pub probe_idle_n: usize,
    /// p50.
    pub probe_idle_ms_p50: f64,
    /// p99.
    pub probe_idle_ms_p99: f64,
    /// Probe lookups while the leases were held.
    pub probe_hold_n: usize,
    /// p50.
    pub probe_hold_ms_p50: f64,
    /// p99.
    pub probe_hold_ms_p99: f64,
    /// Probe lookups that failed or did not find the probe.
    pub probe_failed: u64,
    /// The bench process' own RSS at the end, MB.
    pub bench_rss_mb: f64,
    /// The bench process' CPU time during the hold (the clients and the
    /// probe), % of one core.
    pub bench_cpu_pct_hold: f64,
    /// The rendezvous' PID (killed at the end).
    pub rdv_pid: u32,
    /// Wall time of the whole run, s.
    pub duration_s: f64,
    /// Discovery queries, one row per offered rate (`--query-rate`).
    pub queries: Vec<QueryRow>,
    /// The same rates through the plain-TCP forwarder, each offered right
    /// after the rendezvous' (its `rdv_*` figures are the forwarder
    /// process'; empty without queries or with `--no-query-baseline`).
    pub query_baseline: Vec<QueryRow>,
    /// The forwarder's process ID (killed before the run returns).
    pub query_forward_pid: Option<u32>,
}

/// Runs the scenario; `log` gets progress lines. The rendezvous process
/// is killed by PID before this returns, whatever happened.
/// Offers one rate of discovery queries (`plan`: rate, duration, positive
/// share, time-out) to the process `at.0` and logs its row, labelled
/// `at.1` after the rate and naming that process `at.2`.
async fn offer_logged(
    table: &crate::lease_queries::QueryTable,
    orders: &[Option<tokio::sync::mpsc::Sender<crate::lease_queries::QueryOrder>>],
    names_per_edge: usize,
    plan: (u32, Duration, u32, Duration),
    next_seq: &mut usize,
    at: (u32, &str, &str),
    log: &impl Fn(String),
) -> QueryRow {
    let r = crate::lease_queries::offer(table, orders, names_per_edge, plan, next_seq, at.0).await;
    let (rate, label, who) = (plan.0, at.1, at.2);
    log(format!(
        "leases: {rate}/s{label}: {} sent, {} not sent, {:.0} forwarded/s, loss {:.2} %, p50 {:.2} ms, p99 {:.2} ms, {who} {:.0} % CPU, {:.1} us/query, bench {:.0} % CPU",
        r.sent, r.not_sent, r.forwarded_per_s, r.loss_pct, r.p50_ms, r.p99_ms,
        r.rdv_cpu_pct, r.rdv_us_per_query, r.bench_cpu_pct
    ));
    r
}

pub async fn run(o: &LeasesOptions, log: impl Fn(String)) -> Result<LeasesRow, BenchError> {
    o.validate()?;
    let started = Instant::now();
    // With the baseline, its raw clients and the forwarder's ends too.
    let fds = if o.query_baseline && !o.query_rates.is_empty() {
        3 * o.edges as u64
    } else {
        o.edges as u64
    };
    let limit = raise_nofile(fds + 512)?;
    if limit < fds + 64 {
        return Err(BenchError::BadOption(format!(
            "--edges {}: the descriptor limit is {limit} (raise `ulimit -n`)",
            o.edges
        )));
    }
    log(format!(
        "leases: {} identities of {} bits{}",
        o.edges,
        o.key_bits,
        o.identities
            .as_ref()
            .map(|d| format!(" (cache {})", d.display()))
            .unwrap_or_default()
    ));
    let (edges, bits, cache) = (o.edges, o.key_bits, o.identities.clone());
    let (ids, facts) =
        tokio::task::spawn_blocking(move || identities(edges, bits, cache.as_deref()))
            .await
            .map_err(|e| BenchError::BadOption(format!("identity thread: {e}")))??;
    log(format!(
        "leases: identities in {:.1} s ({} generated, {} loaded, {} threads)",
        facts.seconds, facts.generated, facts.loaded, facts.threads
    ));
    let mut extra = vec![
        "--max-connections".to_string(),
        (o.edges + 256).to_string(),
        "--max-per-addr".to_string(),
        RUNTIME_PER_ADDR.to_string(),
        "--max-pending-per-addr".to_string(),
        RUNTIME_PENDING_PER_ADDR.to_string(),
    ];
    if let Some(l) = o.lease_ms {
        extra.extend(["--lease-ms".to_string(), l.to_string()]);
    }
    let mut rdv = RdvProcess::spawn_with_args(&o.exe, o.key_bits, &extra).await?;
    let r = measure(o, &mut rdv, ids, facts, started, &log).await;
    rdv.kill().await;
    r
}

async fn measure(
    o: &LeasesOptions,
    rdv: &mut RdvProcess,
    ids: Vec<Arc<Identity>>,
    facts: IdentityFacts,
    started: Instant,
    log: &impl Fn(String),
) -> Result<LeasesRow, BenchError> {
    let gone = || BenchError::Responder {
        layer: "rendezvous".into(),
        reason: "the rendezvous process is gone".into(),
    };
    log(format!("leases: rendezvous {} (pid {})", rdv.addr, rdv.pid));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = proc_usage(rdv.pid).ok_or_else(gone)?;

    // The probe: one full edge, leased before the clients, with one SRDI
    // entry it looks up.
    let probe_home = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating the probe's home".into(),
        source,
    })?;
    let probe_peer = Peer::start(
        PeerConfig::new(probe_home.path())
            .key_bits(o.key_bits)
            .rendezvous(RendezvousConfig::edge(vec![rdv.addr])),
    )
    .await?;
    let ph = probe_peer
        .rendezvous()
        .cloned()
        .ok_or_else(|| BenchError::BadOption("probe without rendezvous service".into()))?;
    if ph.wait_leased(Duration::from_secs(30)).await.is_none() {
        return Err(BenchError::Responder {
            layer: "rendezvous".into(),
            reason: "the probe edge got no lease".into(),
        });
    }
    ph.srdi_publish("Adv", "Name", "leases-probe", Duration::from_secs(7200))
        .await
        .map_err(|e| BenchError::BadOption(format!("probe publish: {e}")))?;
    let me = probe_peer.peer_id();
    // Until the entry is indexed, then 50 timed lookups.
    let _ = probe(
        &ph,
        me,
        Instant::now() + Duration::from_secs(5),
        Duration::ZERO,
        1,
    )
    .await;
    let (idle, idle_failed) = probe(
        &ph,
        me,
        Instant::now() + Duration::from_secs(20),
        o.probe_interval.min(Duration::from_millis(20)),
        50,
    )
    .await;

    // The size of a query document, which the plain-TCP baseline's frames
    // carry as padding.
    let query_pad = ids.first().map_or(0, |id| {
        let m = crate::lease_queries::query_message(
            *id.peer_id(),
            &crate::lease_queries::QueryOrder {
                seq: 1_000_000,
                name: published_name(o.edges.saturating_sub(1), 0),
            },
        );
        m.elements.first().map_or(0, |e| e.data.len())
    });
    // The clients.
    let ctx = Arc::new(Ctx {
        rdv_addr: rdv.addr,
        rdv_peer: rdv.peer,
        epoch: Instant::now(),
        edge: EdgeConfig {
            heartbeat_ms: o.heartbeat_ms,
            response_timeout_ms: o.response_timeout_ms,
            ..EdgeConfig::default()
        },
        setup_timeout: o.setup_timeout,
        turns: Arc::new(Semaphore::new(o.in_flight)),
        shared: Shared::default(),
        queries: (!o.query_rates.is_empty()).then(|| {
            (
                o.names_per_edge,
                Arc::new(QueryTable::new(o.total_queries())),
            )
        }),
        query_to: crate::lease_queries::query_address(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let cpu0 = proc_usage(rdv.pid).ok_or_else(gone)?;
    let t_lease = Instant::now();
    let addrs = o.source_addrs();
    let pending: Vec<Arc<Semaphore>> = (0..addrs)
        .map(|_| Arc::new(Semaphore::new(RUNTIME_PENDING_PER_ADDR)))
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    let mut orders = Vec::with_capacity(o.edges);
    for (i, id) in ids.into_iter().enumerate() {
        let a = i % addrs;
        let (tx, rx) = if ctx.queries.is_some() {
            let (tx, rx) = tokio::sync::mpsc::channel(crate::lease_queries::CLIENT_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        orders.push(tx);
        tasks.spawn(client(
            ctx.clone(),
            (i, id),
            (source_addr(a), pending[a].clone()),
            rx,
            stop_rx.clone(),
        ));
    }
    let s = &ctx.shared;
    let mut last_log = Instant::now();
    loop {
        let (l, e) = (
            s.leased.load(Ordering::Relaxed),
            s.ended.load(Ordering::Relaxed),
        );
        if l + e >= o.edges {
            break;
        }
        if last_log.elapsed() >= Duration::from_secs(5) {
            last_log = Instant::now();
            let u = proc_usage(rdv.pid).unwrap_or_default();
            log(format!(
                "leases: {l} leased, {e} ended, {:.0} s, rendezvous RSS {:.1} MB",
                t_lease.elapsed().as_secs_f64(),
                u.rss_mb
            ));
        }
        if proc_usage(rdv.pid).is_none() {
            return Err(gone());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leased = s.leased.load(Ordering::Relaxed);
    let lease_all_s = Duration::from_millis(s.last_lease_ms.load(Ordering::Relaxed))
        .saturating_sub(t_lease.duration_since(ctx.epoch))
        .as_secs_f64();
    // Let the last grants' work settle before reading the RSS.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = proc_usage(rdv.pid).ok_or_else(gone)?;
    log(format!(
        "leases: {leased} of {} leased in {lease_all_s:.1} s; rendezvous RSS {:.1} -> {:.1} MB",
        o.edges, before.rss_mb, after.rss_mb
    ));

    // Discovery queries, rate after rate.
    let mut queries = Vec::new();
    let mut query_baseline = Vec::new();
    let mut query_forward_pid = None;
    if let Some((k, table)) = &ctx.queries {
        // Until the last client's entries are indexed.
        let last = published_name(o.edges - 1, 0);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            match ph
                .lookup("Adv", "Name", &last, Duration::from_secs(2))
                .await
            {
                Ok(who) if !who.is_empty() => break,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        // The plain-TCP floor: a forwarder process and as many raw
        // clients, each rate offered to it right after the rendezvous.
        let mut baseline = if o.query_baseline {
            let fwd = crate::query_forward::ForwardProcess::spawn(&o.exe, o.edges).await?;
            log(format!(
                "leases: plain-TCP forwarder {} (pid {}), {} raw clients, frames of {} B",
                fwd.addr,
                fwd.pid,
                o.edges,
                4 + crate::query_forward::FRAME_HEAD + query_pad
            ));
            let btable = Arc::new(QueryTable::new(o.total_queries()));
            let addrs = o.source_addrs();
            let started = crate::query_forward::start_clients(
                o.edges,
                fwd.addr,
                |i| source_addr(i % addrs),
                (btable.clone(), query_pad),
                stop_rx.clone(),
                Duration::from_secs(60),
            )
            .await;
            let mut fwd = fwd;
            query_forward_pid = Some(fwd.pid);
            match started {
                Ok((orders, tasks)) => Some((fwd, btable, orders, tasks, 0usize)),
                Err(e) => {
                    fwd.kill().await;
                    return Err(e);
                }
            }
        } else {
            None
        };
        let mut next_seq = 0;
        for &rate in &o.query_rates {
            log(format!(
                "leases: {rate} discovery queries/s for {:.1} s",
                o.query_duration.as_secs_f64()
            ));
            let plan = (rate, o.query_duration, o.positive_pct, o.query_timeout);
            let at = (rdv.pid, "", "rendezvous");
            let r = offer_logged(table, &orders, *k, plan, &mut next_seq, at, log).await;
            queries.push(r);
            if proc_usage(rdv.pid).is_none() {
                return Err(gone());
            }
            if let Some((fwd, btable, borders, _, bseq)) = baseline.as_mut() {
                let at = (fwd.pid, " plain TCP", "forwarder");
                let r = offer_logged(btable, borders, *k, plan, bseq, at, log).await;
                query_baseline.push(r);
            }
        }
        if let Some((mut fwd, _, borders, mut tasks, _)) = baseline.take() {
            drop(borders);
            fwd.kill().await;
            tasks.abort_all();
        }
    }
    drop(orders);

    // The hold.
    let hold_start_ms = ctx.now();
    let sent0 = s.renewals_sent.load(Ordering::Relaxed);
    let ok0 = s.renewals_ok.load(Ordering::Relaxed);
    let lost0 = snapshot_lost(s);
    let self_cpu0 = proc_usage(std::process::id()).unwrap_or_default().cpu_s;
    let t_hold = Instant::now();
    let (held, hold_failed) = probe(&ph, me, t_hold + o.hold, o.probe_interval, usize::MAX).await;
    let rest = o.hold.saturating_sub(t_hold.elapsed());
    tokio::time::sleep(rest).await;
    let hold_s = t_hold.elapsed().as_secs_f64();
    let sent = s.renewals_sent.load(Ordering::Relaxed) - sent0;
    let ok = s.renewals_ok.load(Ordering::Relaxed) - ok0;
    let lost_hold = snapshot_lost(s) - lost0;
    let end = proc_usage(rdv.pid).ok_or_else(gone)?;
    let self_cpu = proc_usage(std::process::id()).unwrap_or_default().cpu_s - self_cpu0;
    let rdv_clients_end = rdv.status().await.map(|(_, c)| c);
    let _ = stop_tx.send(true);
    let mut renew: Vec<u64> = s
        .renew_rtt_us
        .lock()
        .map(|v| {
            v.iter()
                .filter(|(at, _)| *at >= hold_start_ms)
                .map(|(_, us)| *us)
                .collect()
        })
        .unwrap_or_default();
    renew.sort_unstable();
    let mut setup = s.setup_us.lock().map(|v| v.clone()).unwrap_or_default();
    setup.sort_unstable();
    // The clients close their connections.
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    drop(probe_peer);
    let bench_rss_mb = proc_usage(std::process::id())
        .map(|u| u.rss_mb)
        .unwrap_or(0.0);
    let per_edge = |mb: f64| {
        if leased == 0 {
            0.0
        } else {
            (mb - before.rss_mb) * 1024.0 / leased as f64
        }
    };
    let map = |m: &Mutex<BTreeMap<String, u64>>| m.lock().map(|m| m.clone()).unwrap_or_default();
    Ok(LeasesRow {
        scenario: "leases",
        edges: o.edges,
        leased,
        failed: map(&s.failed),
        refused: map(&s.refused),
        source_addrs: o.source_addrs(),
        per_addr: o.per_addr,
        in_flight: o.in_flight,
        key_bits: o.key_bits,
        identities: facts,
        heartbeat_ms: o.heartbeat_ms,
        response_timeout_ms: o.response_timeout_ms,
        granted_lease_ms: s.granted_lease_ms.load(Ordering::Relaxed),
        lease_all_s,
        setup_ms_p50: pct(&setup, 50.0) / 1000.0,
        setup_ms_p99: pct(&setup, 99.0) / 1000.0,
        rdv_rss_mb_before: before.rss_mb,
        rdv_rss_mb_after: after.rss_mb,
        rdv_rss_mb_end: end.rss_mb,
        rdv_hwm_mb: end.hwm_mb,
        rss_kb_per_edge: per_edge(after.rss_mb),
        rss_kb_per_edge_end: per_edge(end.rss_mb),
        rdv_cpu_s_lease: after.cpu_s - cpu0.cpu_s,
        rdv_cpu_s_hold: end.cpu_s - after.cpu_s,
        rdv_cpu_pct_hold: if hold_s > 0.0 {
            100.0 * (end.cpu_s - after.cpu_s) / hold_s
        } else {
            0.0
        },
        rdv_cpu_s_total: end.cpu_s,
        rdv_clients_end,
        hold_s,
        renewals_sent: sent,
        renewals_ok: ok,
        renewals_failed: lost_hold,
        renew_ms_p50: pct(&renew, 50.0) / 1000.0,
        renew_ms_p99: pct(&renew, 99.0) / 1000.0,
        renew_ms_max: renew.last().copied().unwrap_or(0) as f64 / 1000.0,
        lost: map(&s.lost),
        lost_hold,
        leased_end: s.leased_at_stop.load(Ordering::Relaxed),
        releases: s.releases.load(Ordering::Relaxed),
        closed: map(&s.closed),
        other_messages: s.other_messages.load(Ordering::Relaxed),
        probe_idle_n: idle.len(),
        probe_idle_ms_p50: pct(&idle, 50.0) / 1000.0,
        probe_idle_ms_p99: pct(&idle, 99.0) / 1000.0,
        probe_hold_n: held.len(),
        probe_hold_ms_p50: pct(&held, 50.0) / 1000.0,
        probe_hold_ms_p99: pct(&held, 99.0) / 1000.0,
        probe_failed: idle_failed + hold_failed,
        bench_rss_mb,
        bench_cpu_pct_hold: if hold_s > 0.0 {
            100.0 * self_cpu / hold_s
        } else {
            0.0
        },
        rdv_pid: rdv.pid,
        duration_s: started.elapsed().as_secs_f64(),
        queries,
        query_baseline,
        query_forward_pid,
    })
}
