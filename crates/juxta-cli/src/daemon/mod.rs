//! `juxta peer` as a daemon: settings from a TOML file and flags, roles
//! (edge, rendezvous, relay), a control socket for the operator commands
//! (`juxta status`, `peers`, `groups`, `discover`, `publish`, `route`),
//! Prometheus metrics, and a graceful stop on SIGINT/SIGTERM.
//! See docs/peer.md.

pub mod client;
pub mod config;
pub mod control;
pub mod metrics;
pub mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use juxta::{Messenger, Peer};
use juxta_bench::layers::BENCH_SERVICE;
use juxta_proto::advertisement::{AdvKind, Advertisement};
use juxta_proto::id::PeerId;
use juxta_proto::message::{Element, Message};
use serde_json::json;

use config::{ConfigError, LogFormat, Overrides, Role, Settings};
use control::{ControlError, Request};

/// How long a graceful stop may take before the process exits anyway.
pub const STOP_BOUND: Duration = Duration::from_secs(2);

/// Errors of the daemon and its commands.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The peer.
    #[error(transparent)]
    Peer(#[from] juxta::PeerError),
    /// The control socket.
    #[error(transparent)]
    Socket(#[from] control::SocketError),
    /// The daemon refused a request.
    #[error("{0}")]
    Control(#[from] ControlError),
    /// A listener (metrics) could not be bound.
    #[error("{what} {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An advertisement file did not parse.
    #[error("{}: not an advertisement: {message}", path.display())]
    BadAdvertisement {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A group of the configuration could not be created or joined.
    #[error("group {name:?}: {message}")]
    Group {
        /// The group's name.
        name: String,
        /// Why.
        message: String,
    },
    /// The home holds no identity yet.
    #[error("no identity in {} (start `juxta peer --home {}` once): {message}", home.display(), home.display())]
    NoIdentity {
        /// The home.
        home: PathBuf,
        /// Why.
        message: String,
    },
    /// Waiting for signals failed.
    #[error("signal handling: {0}")]
    Signal(std::io::Error),
}

/// The default home: `$JUXTA_HOME`, else `$HOME/.juxta`.
pub fn default_home() -> PathBuf {
    std::env::var_os("JUXTA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".juxta")))
        .unwrap_or_else(|| PathBuf::from(".juxta"))
}

/// `juxta peer`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PeerArgs {
    /// Home directory (identity, cache, control socket, juxta.toml);
    /// default $JUXTA_HOME or ~/.juxta.
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Configuration file (default <home>/juxta.toml when it exists).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// TCP address to listen on, e.g. 127.0.0.1:9701 (key `listen`).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Also listen for JXTA's HTTP transport here (key `http`).
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// Run as an edge (the default role; key `roles`).
    #[arg(long)]
    pub edge: bool,
    /// Run as a rendezvous (key `roles`).
    #[arg(long)]
    pub rendezvous: bool,
    /// Run as a relay (key `roles`).
    #[arg(long)]
    pub relay: bool,
    /// Rendezvous seed (edge) or peer-view member (rendezvous); repeatable
    /// (key `seeds`).
    #[arg(long = "seed")]
    pub seeds: Vec<SocketAddr>,
    /// Relay to lease (edge); repeatable (key `relays`).
    #[arg(long = "relay-seed")]
    pub relay_seeds: Vec<SocketAddr>,
    /// Serve Prometheus metrics at http://ADDR/metrics (key `metrics`).
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Log level or filter directives (key `log.level`).
    #[arg(long)]
    pub log_level: Option<String>,
    /// Log format (key `log.format`).
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Do not offer or accept compact framing (key `compact = false`).
    #[arg(long)]
    pub no_compact: bool,
    /// Do not sign messages with CBJX (key `cbjx = false`).
    #[arg(long)]
    pub no_cbjx: bool,
    /// RSA key size for a new identity (key `key_bits`, default 2048).
    #[arg(long)]
    pub key_bits: Option<usize>,
    /// Name in a new identity's certificate (key `name`).
    #[arg(long)]
    pub name: Option<String>,
    /// Serve benchmark responders to `juxta bench ... --remote` on other
    /// hosts, for clients with the token printed at start (key
    /// `bench.enabled`; see docs/peer.md).
    #[arg(long)]
    pub bench: bool,
    /// The bench listener's address (key `bench.listen`, default
    /// 0.0.0.0:9711).
    #[arg(long)]
    pub bench_listen: Option<SocketAddr>,
    /// The bench token (key `bench.token`; default a new random one).
    #[arg(long)]
    pub bench_token: Option<String>,
}

/// Runs `juxta peer` (sets up logging itself).
pub fn run(a: PeerArgs) -> ExitCode {
    let home = a.home.clone().unwrap_or_else(default_home);
    let settings = config::resolve(
        home,
        a.config.clone(),
        Overrides {
            listen: a.listen,
            http: a.http,
            rendezvous: a.rendezvous,
            relay: a.relay,
            edge: a.edge,
            seeds: a.seeds.clone(),
            relays: a.relay_seeds.clone(),
            metrics: a.metrics,
            log_level: a.log_level.clone(),
            log_format: a.log_format,
            no_compact: a.no_compact,
            no_cbjx: a.no_cbjx,
            key_bits: a.key_bits,
            name: a.name.clone(),
            bench: a.bench,
            bench_listen: a.bench_listen,
            bench_token: a.bench_token.clone(),
        },
    );
    let settings = match settings {
        Ok(s) => s,
        Err(e) => {
            eprintln!("juxta peer: {e}");
            return ExitCode::FAILURE;
        }
    };
    init_logging(&settings);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let r = rt.block_on(daemon(settings));
    // Tasks still running (connections being torn down) are not waited for.
    rt.shutdown_timeout(Duration::from_millis(200));
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("juxta peer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(s: &Settings) {
    let filter = tracing_subscriber::EnvFilter::try_new(s.log_level())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match s.file.log.format.unwrap_or_default() {
        LogFormat::Human => b.try_init(),
        LogFormat::Json => b.json().try_init(),
    };
}

/// How long a seeded edge waits for its first rendezvous and relay leases
/// before it serves the control socket and prints `ready`.
const LEASE_WAIT: Duration = Duration::from_secs(5);

/// The relay lease is waited for only when relays are named (an automatic
/// relay, a seed that may not relay, is not).
async fn wait_first_leases(peer: &Peer, relays_named: bool) {
    let t = Instant::now();
    if let Some(rdv) = peer.rendezvous() {
        if !rdv.status().is_rendezvous && rdv.wait_leased(LEASE_WAIT).await.is_none() {
            tracing::warn!(
                wait_ms = LEASE_WAIT.as_millis() as u64,
                "no rendezvous lease yet; still trying in the background"
            );
        }
    }
    if let Some(relay) = peer.relay().filter(|_| relays_named) {
        let left = LEASE_WAIT.saturating_sub(t.elapsed());
        if relay.wait_leased(left).await.is_none() {
            tracing::warn!(
                wait_ms = LEASE_WAIT.as_millis() as u64,
                "no relay lease yet; still trying in the background"
            );
        }
    }
}

/// The daemon's state the control handler reads.
struct State {
    peer: Arc<Peer>,
    settings: Settings,
    started: Instant,
    metrics: Option<SocketAddr>,
    control: PathBuf,
    /// The bench listener's address, when it serves.
    bench: Option<SocketAddr>,
    /// Transfers served for `juxta send`.
    transfers: Arc<serve::Transfers>,
    /// What the launch service did (`juxta run --hosts`).
    launch: Arc<crate::launch::serve::LaunchCounters>,
}

async fn daemon(settings: Settings) -> Result<(), DaemonError> {
    let t0 = Instant::now();
    let cfg = settings.peer_config()?;
    let launch = settings
        .file
        .launch
        .settings(&settings.home, settings.file.listen)?;
    // Before anything starts: the home must be ours alone, and the
    // advertisements to publish must parse.
    std::fs::create_dir_all(&settings.home).map_err(|source| DaemonError::Read {
        path: settings.home.clone(),
        source,
    })?;
    control::check_home(&settings.home)?;
    let mut advs = Vec::new();
    for p in settings.file.publish.iter().flatten() {
        let xml = std::fs::read_to_string(p).map_err(|source| DaemonError::Read {
            path: p.clone(),
            source,
        })?;
        let adv = Advertisement::parse(&xml).map_err(|e| DaemonError::BadAdvertisement {
            path: p.clone(),
            message: e.to_string(),
        })?;
        advs.push(adv);
    }
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(DaemonError::Signal)?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(DaemonError::Signal)?;
    let metrics_listener = match settings.file.metrics {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| DaemonError::Bind {
                    what: "metrics",
                    addr,
                    source,
                })?,
        ),
        None => None,
    };
    let bench = if settings.file.bench.enabled.unwrap_or(false) {
        Some(bench_listener(&settings).await?)
    } else {
        None
    };
    let tp = Instant::now();
    let peer = Arc::new(Peer::start(cfg).await?);
    let peer_start = tp.elapsed();
    // An edge with seeds (or relays) answers the operator only once its
    // first leases are held or `LEASE_WAIT` has passed: a `juxta status`
    // that succeeds then shows the lease, on the rendezvous too (its grant
    // is recorded before the edge hears of it). A seed that does not
    // answer delays the start by `LEASE_WAIT` and is logged; the lease is
    // still sought in the background.
    let relays_named = settings.file.relays.as_ref().is_some_and(|r| !r.is_empty());
    wait_first_leases(&peer, relays_named).await;
    let control_path = control::socket_path(&settings.home);
    let listener = control::bind(&control_path)?;
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
    let mut tasks = Vec::new();
    if let Some(l) = metrics_listener {
        tasks.push(tokio::spawn(metrics::serve(l, peer.clone())));
    }
    let launch_counters = Arc::new(crate::launch::serve::LaunchCounters::default());
    if let Some(l) = launch {
        let inbox = peer.listen(crate::launch::SERVICE, Some(crate::launch::PARAM))?;
        tracing::info!(
            allowed_peers = l.allowed_peers.len(),
            max_ranks = l.max_ranks,
            address = %l.address,
            "launch service serving (juxta run --hosts)"
        );
        tasks.push(tokio::spawn(crate::launch::serve::serve(
            peer.clone(),
            inbox,
            l,
            launch_counters.clone(),
        )));
    }
    if settings.file.bench_ack.unwrap_or(true) {
        let pings = peer.listen(BENCH_SERVICE, Some("ping"))?;
        tasks.push(tokio::spawn(serve_acks(peer.clone(), pings)));
    }
    for adv in &advs {
        peer.discovery()
            .publish(adv)
            .await
            .map_err(|e| DaemonError::BadAdvertisement {
                path: PathBuf::from(adv.id()),
                message: e.to_string(),
            })?;
    }
    for g in &settings.file.groups {
        if g.action == config::GroupAction::Create {
            let h = peer
                .groups()
                .create(&g.name, g.password.as_deref())
                .await
                .map_err(|e| DaemonError::Group {
                    name: g.name.clone(),
                    message: e.to_string(),
                })?;
            tracing::info!(name = %g.name, id = %h.id, "group created");
        } else {
            tasks.push(tokio::spawn(join_group(peer.clone(), g.clone())));
        }
    }
    let max_clients = settings
        .file
        .limits
        .control_clients
        .unwrap_or(control::DEFAULT_CLIENTS);
    let transfers = serve::Transfers::new(
        peer.clone(),
        settings
            .file
            .limits
            .transfers
            .unwrap_or(serve::DEFAULT_TRANSFERS),
    );
    let state = Arc::new(State {
        peer: peer.clone(),
        settings: settings.clone(),
        started: Instant::now(),
        metrics: metrics_addr,
        control: control_path.clone(),
        bench: bench.as_ref().and_then(|(l, _, _)| l.local_addr().ok()),
        transfers: transfers.clone(),
        launch: launch_counters.clone(),
    });
    tasks.push(tokio::spawn(control::serve(listener, state, max_clients)));
    let roles: Vec<&str> = settings.roles.iter().map(|r| r.as_str()).collect();
    // The line scripts and tests wait for (kept from the first `juxta peer`).
    println!(
        "peer {} listening on tcp://{}",
        peer.peer_id(),
        peer.local_addr().map(|a| a.to_string()).unwrap_or_default()
    );
    println!("control {}", control_path.display());
    if let Some(m) = metrics_addr {
        println!("metrics http://{m}/metrics");
    }
    if let Some((listener, serve_cfg, generated)) = bench {
        let addr = listener.local_addr().map_err(|source| DaemonError::Bind {
            what: "bench",
            addr: settings
                .file
                .bench
                .listen
                .unwrap_or_else(|| config::DEFAULT_BENCH_LISTEN.parse().expect("address")),
            source,
        })?;
        // The token goes to stdout (for the operator), never to the log.
        match (generated, &serve_cfg.token) {
            (true, Some(t)) => println!("bench tcp://{addr} token {t}"),
            _ => println!("bench tcp://{addr} token (from the configuration)"),
        }
        tracing::info!(
            %addr,
            allowed_peers = serve_cfg.allowed_peers.len(),
            max_responders = serve_cfg.max_responders,
            "bench listener serving"
        );
        tasks.push(tokio::spawn(juxta_bench::remote::serve(
            listener, serve_cfg,
        )));
    }
    println!("ready");
    tracing::info!(
        peer = %peer.peer_id(),
        roles = %roles.join(","),
        tcp = ?peer.local_addr(),
        http = ?peer.http_local_addr(),
        metrics = ?metrics_addr,
        start_ms = t0.elapsed().as_secs_f64() * 1e3,
        peer_start_ms = peer_start.as_secs_f64() * 1e3,
        "serving"
    );
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: stopping"),
        _ = sigint.recv() => tracing::info!("SIGINT: stopping"),
    }
    let t1 = Instant::now();
    for t in &tasks {
        t.abort();
    }
    transfers.stop_all();
    drop(transfers);
    let _ = std::fs::remove_file(&control_path);
    // The peer closes gracefully within STOP_BOUND: an edge gives its
    // rendezvous and relay leases back, every connection gets its close
    // handshake, every task of the peer ends.
    match peer.close_within(STOP_BOUND).await {
        Ok(r) => tracing::info!(
            rendezvous_released = r.rendezvous_released,
            relay_released = r.relay_released,
            connections_closed = r.connections_closed,
            connections_cut = r.connections_cut,
            "peer closed"
        ),
        Err(e) => tracing::warn!(error = %e, "peer closed with tasks aborted"),
    }
    for t in tasks {
        let _ = t.await;
    }
    tracing::info!(stop_ms = t1.elapsed().as_secs_f64() * 1e3, "stopped");
    Ok(())
}

/// Binds the bench listener; returns it, what it serves, and whether
/// the token was generated (then it is printed).
async fn bench_listener(
    settings: &Settings,
) -> Result<
    (
        tokio::net::TcpListener,
        juxta_bench::remote::ServeConfig,
        bool,
    ),
    DaemonError,
> {
    use juxta_bench::remote;
    let b = &settings.file.bench;
    let addr = b
        .listen
        .unwrap_or_else(|| config::DEFAULT_BENCH_LISTEN.parse().expect("address"));
    let exe = std::env::current_exe().map_err(|source| DaemonError::Read {
        path: PathBuf::from("/proc/self/exe"),
        source,
    })?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| DaemonError::Bind {
            what: "bench",
            addr,
            source,
        })?;
    let generated = b.token.is_none();
    let cfg = remote::ServeConfig {
        exe,
        token: Some(b.token.clone().unwrap_or_else(remote::new_token)),
        allowed_peers: b.peers()?,
        max_responders: b
            .max_responders
            .unwrap_or(remote::DEFAULT_MAX_RESPONDERS)
            .max(1),
        max_connections: b
            .max_clients
            .unwrap_or(remote::DEFAULT_MAX_CONNECTIONS)
            .max(1),
    };
    Ok((listener, cfg, generated))
}

async fn serve_acks(peer: Arc<Peer>, mut pings: juxta::Listener) {
    let mut back: Option<Messenger> = None;
    while let Some(d) = pings.recv().await {
        let Some(from) = d.from else { continue };
        if back.as_ref().map(|m| m.remote()) != Some(from) {
            back = peer.messenger(&from).ok();
        }
        if let Some(m) = &back {
            let ack = Message::new().with(Element::bytes("bench", "ack", &b"\x01"[..]));
            if let Err(e) = m.send(BENCH_SERVICE, Some("ack"), ack).await {
                tracing::warn!(error = %e, "ack failed");
            }
        }
    }
}

/// Joins a configured group: by ID or name in the local cache, else by
/// name from connected peers, retried for a minute.
async fn join_group(peer: Arc<Peer>, g: config::GroupSpec) {
    let groups = peer.groups();
    for attempt in 0..30u32 {
        let adv = match &g.id {
            Some(id) => match id.parse::<juxta_proto::id::PeerGroupId>() {
                Ok(gid) => match groups.join(gid, g.password.as_deref()).await {
                    Ok(h) => {
                        tracing::info!(name = %g.name, id = %h.id, "group joined");
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(name = %g.name, error = %e, "group not joined yet");
                        None
                    }
                },
                Err(e) => {
                    tracing::error!(name = %g.name, id = %id, error = %e, "bad group id");
                    return;
                }
            },
            None => {
                let local = groups.find_local(&g.name).await.unwrap_or_default();
                match local.into_iter().next() {
                    Some(a) => Some(a),
                    None => groups
                        .find_remote(&g.name, None, Duration::from_secs(2))
                        .await
                        .ok()
                        .and_then(|v| v.into_iter().next()),
                }
            }
        };
        if let Some(adv) = adv {
            match groups.join(adv, g.password.as_deref()).await {
                Ok(h) => {
                    tracing::info!(name = %g.name, id = %h.id, "group joined");
                    return;
                }
                Err(e) => {
                    tracing::error!(name = %g.name, error = %e, "group not joined");
                    return;
                }
            }
        }
        if attempt == 0 {
            tracing::info!(name = %g.name, "group not found yet; retrying");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tracing::warn!(name = %g.name, "group not found; gave up");
}

fn kind_of(s: &str) -> Result<AdvKind, ControlError> {
    match s {
        "peer" => Ok(AdvKind::Peer),
        "group" => Ok(AdvKind::Group),
        "adv" => Ok(AdvKind::Adv),
        other => Err(ControlError::new(
            "invalid_argument",
            format!("kind {other:?} (expected peer, group or adv)"),
        )),
    }
}

fn adv_json(a: &Advertisement) -> serde_json::Value {
    let fields: serde_json::Map<String, serde_json::Value> = a
        .index_fields()
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "type": a.adv_type(),
        "id": a.id(),
        "fields": fields,
        "xml": a.to_xml(),
    })
}

fn failed(e: impl std::fmt::Display) -> ControlError {
    ControlError::new("failed", e.to_string())
}

impl control::Handler for State {
    async fn handle(&self, req: Request) -> Result<serde_json::Value, ControlError> {
        let p = &self.peer;
        match req {
            Request::Status => Ok(self.status()),
            Request::Serve {
                path,
                expires_s,
                once,
            } => self.transfers.serve(path, expires_s, once).await,
            Request::ServeStop { ticket } => self.transfers.stop(&ticket),
            Request::Transfers => Ok(self.transfers.list()),
            Request::Peers => {
                let connected: Vec<_> = p
                    .connections()
                    .into_iter()
                    .map(|c| {
                        json!({
                            "peer": c.peer.to_string(),
                            "addr": c.addr.to_string(),
                            "bytes_in": c.bytes_in,
                            "bytes_out": c.bytes_out,
                            "compact": c.compact,
                            "proven": c.proven,
                        })
                    })
                    .collect();
                let known: Vec<_> = p
                    .discovery()
                    .get_local(AdvKind::Peer, None, None, 1000)
                    .await
                    .map_err(failed)?
                    .into_iter()
                    .filter_map(|a| match a {
                        Advertisement::Peer(pa) if pa.peer_id != p.peer_id() => Some(json!({
                            "peer": pa.peer_id.to_string(),
                            "name": pa.name,
                            "connected": p.is_connected_to(&pa.peer_id),
                        })),
                        _ => None,
                    })
                    .collect();
                Ok(json!({ "connected": connected, "known": known }))
            }
            Request::Groups => {
                let joined: Vec<_> = p
                    .groups()
                    .joined()
                    .into_iter()
                    .map(|g| {
                        json!({
                            "id": g.id.to_string(),
                            "name": g.adv.name,
                            "desc": g.adv.desc,
                        })
                    })
                    .collect();
                Ok(json!({ "joined": joined }))
            }
            Request::Discover {
                kind,
                attr,
                value,
                remote,
                threshold,
            } => {
                let kind = kind_of(&kind)?;
                if value.is_some() && attr.is_none() {
                    return Err(ControlError::new(
                        "invalid_argument",
                        "a value needs an attribute (--attr)",
                    ));
                }
                let d = p.discovery();
                let threshold = threshold.clamp(1, 1000);
                let mut found = Vec::new();
                let mut remote_error = None;
                if remote {
                    match d
                        .get_remote(
                            kind,
                            attr.as_deref(),
                            value.as_deref(),
                            threshold,
                            None,
                            Duration::from_secs(3),
                        )
                        .await
                    {
                        Ok(v) => found = v,
                        Err(e) => remote_error = Some(e.to_string()),
                    }
                }
                if found.is_empty() {
                    found = d
                        .get_local(kind, attr.as_deref(), value.as_deref(), threshold as usize)
                        .await
                        .map_err(failed)?;
                }
                Ok(json!({
                    "remote": remote,
                    "remote_error": remote_error,
                    "advertisements": found.iter().map(adv_json).collect::<Vec<_>>(),
                }))
            }
            Request::Publish { xml } => {
                let adv = Advertisement::parse(&xml).map_err(|e| {
                    ControlError::new("invalid_argument", format!("not an advertisement: {e}"))
                })?;
                p.discovery().publish(&adv).await.map_err(failed)?;
                Ok(json!({ "published": adv_json(&adv) }))
            }
            Request::Route { peer } => {
                let id: PeerId = peer.parse().map_err(|e| {
                    ControlError::new("invalid_argument", format!("peer {peer:?}: {e}"))
                })?;
                if id == p.peer_id() {
                    return Ok(json!({ "peer": peer, "how": "self", "hops": [] }));
                }
                if let Some(c) = p.connections().into_iter().find(|c| c.peer == id) {
                    return Ok(json!({
                        "peer": peer,
                        "how": "direct",
                        "addr": c.addr.to_string(),
                        "hops": [],
                    }));
                }
                match p.route_to(&id, Duration::from_secs(3)).await {
                    Ok(m) if m.is_routed() => Ok(json!({
                        "peer": peer,
                        "how": "relayed",
                        "hops": m.hops().iter().map(|h| h.to_string()).collect::<Vec<_>>(),
                    })),
                    Ok(m) => Ok(json!({
                        "peer": peer,
                        "how": "direct",
                        "addr": m.link().addr.to_string(),
                        "hops": [],
                    })),
                    Err(juxta::PeerError::NoRoute { tried, .. }) => Err(ControlError::new(
                        "no_route",
                        format!(
                            "no route to {peer} (tried: {})",
                            tried
                                .iter()
                                .map(|t| t.to_string())
                                .collect::<Vec<_>>()
                                .join("; ")
                        ),
                    )),
                    Err(e) => Err(ControlError::new("no_route", e.to_string())),
                }
            }
        }
    }
}

impl State {
    fn status(&self) -> serde_json::Value {
        let p = &self.peer;
        let s = p.stats();
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let rdv = p.rendezvous().map(|h| {
            let st = h.status();
            json!({
                "is_rendezvous": st.is_rendezvous,
                "leased_to": st.leased_to.map(|x| x.to_string()),
                "clients": st.clients,
                "view": st.view,
                "index_entries": st.index_entries,
                "queries": st.queries,
                "answered": st.answered,
                "busy": st.busy,
                "refused": st.refused,
            })
        });
        let relay = p.relay().map(|r| {
            let c = r.counters();
            json!({
                "leased_to": r.relay().map(|x| x.to_string()),
                "clients": c.clients,
                "forwarded": c.forwarded,
                "leases_granted": c.server.leases_granted,
                "queued": c.server.queued,
                "pushed_back": c.server.pushed_back,
                "refused_full": c.server.refused_full,
                "refused_queue_full": c.server.refused_queue_full,
                "refused_quota": c.server.refused_quota,
                "refused_not_leased": c.server.refused_not_leased,
                "refused_too_large": c.server.refused_too_large,
                "refused_unauthenticated": c.server.refused_unauthenticated,
            })
        });
        json!({
            "peer_id": p.peer_id().to_string(),
            "name": self.settings.file.name.clone().unwrap_or_else(|| "juxta".into()),
            "home": self.settings.home.display().to_string(),
            "config": self.settings.config_file.as_ref().map(|f| f.display().to_string()),
            "roles": self.settings.roles.iter().map(|r: &Role| r.as_str()).collect::<Vec<_>>(),
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "addresses": {
                "tcp": p.local_addr().map(|a| a.to_string()),
                "http": p.http_local_addr().map(|a| a.to_string()),
                "metrics": self.metrics.map(|a| a.to_string()),
                "control": self.control.display().to_string(),
                "bench": self.bench.map(|a| a.to_string()),
            },
            "connections": p.connection_count(),
            "groups": p.groups().joined().len(),
            "rendezvous": rdv,
            "relay": relay,
            "transfers": self.transfers.list(),
            "launch": {
                "started": ld(&self.launch.started),
                "running": self.launch.running.load(std::sync::atomic::Ordering::Relaxed),
                "refused": ld(&self.launch.refused),
                "killed": ld(&self.launch.killed),
            },
            "counters": {
                "bytes_in": s.bytes_in,
                "bytes_out": s.bytes_out,
                "messages_in": s.messages_in,
                "messages_out": s.messages_out,
                "connections_failed": s.connections_failed,
                "connections_refused": s.connections_refused,
                "unroutable": s.unroutable,
                "discovery_rejected": s.discovery_rejected,
                "discovery_throttled": s.discovery_throttled,
                "relay_refused": s.relay_refused,
                "route_no_route": s.route_no_route,
                "unproven_refused": s.unproven_refused,
                "service_refused": s.service_refused,
            },
        })
    }
}
