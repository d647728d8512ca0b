//! `juxta bench rendezvous`: query capacity of rendezvous peers.
//!
//! Why: JXTA's discovery scales only as far as its rendezvous answer
//! queries. Each rendezvous runs as its own process (`juxta rdv-serve`,
//! see [`serve`]); N edges in this process lease them (spread round robin)
//! and query at an offered total rate, open loop, `positive_pct` % for a
//! published advertisement, the rest for names nobody published.
//!
//! - `--query-kind pdp` (the default, what the thesis measured): the edges
//!   listen, publish the query space as advertisements
//!   ([`juxta::discovery::DiscoveryService::publish`]: cached, and indexed as
//!   SRDI entries at their rendezvous), and send JXTA discovery queries
//!   through the resolver to their rendezvous
//!   ([`juxta::discovery::Search::remote`] asking the leased rendezvous);
//!   the rendezvous forwards each query to the publishers its index names
//!   (SRDI; with several rendezvous: to the replica, else walked), floods
//!   it (flooding) or asks the central server (centralized), and the
//!   publisher answers the querier directly, as with JXSE. A query that
//!   finds nothing is never answered (JXSE sends no negative answer), so
//!   loss counts positive queries only.
//! - `--query-kind lookup`: Juxta's own SRDI lookup (`juxta-rdv-lookup`),
//!   answered by the rendezvous with the publishers' IDs.
//!
//! - `--group subgroup`: the same measurement inside a certificate
//!   subgroup of the Net peer group ([`crate::subgroup`]): a creator peer
//!   in this process issues every rendezvous and edge a member
//!   certificate; each rendezvous process joins with it and runs the
//!   group's own rendezvous ([`juxta::group::Group::start_rendezvous`],
//!   with the same model, peer view and index bound), and no Net peer
//!   group rendezvous; the edges lease them in the group, publish the
//!   query space in the group and query through the group's discovery.
//!   Every rendezvous message in the group is sealed with the sender's
//!   member key. Rows say which group they measured (`group`).
//!
//! Reported per configuration: answered queries/s, response time mean,
//! stddev, p50, p99, the thesis' coefficient of variation (stddev / mean),
//! loss, the stability of the completion rate (`completion_cv`), and the
//! rendezvous processes' CPU and RSS from `/proc`. Combinations that cannot
//! be honoured are refused before anything starts
//! ([`RendezvousOptions::validate`]); a configuration that cannot be set
//! up gives error rows and the run goes on.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use juxta::discovery::DiscoveryService;
use juxta::group::Group;
use juxta::proto::advertisement::{
    AdvKind, Advertisement, PeerAdvertisement, PeerGroupAdvertisement, PipeAdvertisement, PipeType,
    RouteAdvertisement,
};
use juxta::proto::discovery::MAX_RESPONSES;
use juxta::proto::id::{PeerGroupId, PeerId, PipeId};
use juxta::proto::srdi::flow::AdmissionConfig;
use juxta::proto::srdi::search::SearchModel;
use juxta::rendezvous::{RendezvousConfig, RendezvousHandle};
use juxta::{Peer, PeerConfig};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::BenchError;

/// How long one lookup may take before it counts as lost.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// Most lookups in flight per edge (beyond: counted as lost, not queued).
pub const MAX_IN_FLIGHT_PER_EDGE: usize = 4096;

/// A search model by name.
pub fn parse_model(s: &str) -> Result<&'static str, BenchError> {
    match s {
        "centralized" => Ok("centralized"),
        "flooding" => Ok("flooding"),
        "srdi" => Ok("srdi"),
        o => Err(BenchError::BadOption(format!(
            "unknown model {o:?} (known: centralized, flooding, srdi)"
        ))),
    }
}

/// Options of a rendezvous process ([`serve`]).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Home directory (identity).
    pub home: PathBuf,
    /// Search model name.
    pub model: String,
    /// Most leased edges.
    pub max_clients: usize,
    /// Admission: per-querier and total rate (queries/s).
    pub rate_limit: u32,
    /// RSA key size.
    pub key_bits: usize,
    /// The other rendezvous to form the peer view with.
    pub peers: Vec<SocketAddr>,
    /// The central server of the centralized model (default: itself).
    pub central: Option<PeerId>,
    /// Bound of the SRDI index, (key, publisher) entries (`--rdv-cache`).
    pub max_entries: usize,
    /// Run as the rendezvous of a certificate subgroup instead of the Net
    /// peer group's: the directory holding its membership
    /// ([`crate::subgroup::write_credential`]).
    pub group_credential: Option<PathBuf>,
    /// Most connections the process holds at once (the runtime's
    /// `max_connections`, 1,024 by default): `juxta bench leases` raises it
    /// to hold thousands of edges.
    pub max_connections: usize,
    /// Most connections accepted from one remote IP address; `None`: as
    /// many as `max_clients` (every edge of the older benches connects from
    /// one address). `juxta bench leases` keeps the runtime's default (32)
    /// and spreads its edges over many loopback addresses instead.
    pub max_per_addr: Option<usize>,
    /// Most connections from one address still in their welcome; `None`:
    /// as many as `max_clients`.
    pub max_pending_per_addr: Option<usize>,
    /// The lease granted to edges, ms; `None`: the protocol default
    /// (JXSE's 20 minutes).
    pub lease_ms: Option<u64>,
}

impl ServeOptions {
    /// The options of a Net peer group rendezvous on `listen` with home
    /// `home` and the `rdv-serve` defaults (SRDI model, 100,000 clients,
    /// 1024-bit key, the runtime's connection limit).
    ///
    /// ```
    /// use juxta_bench::rendezvous::ServeOptions;
    /// let o = ServeOptions::new("127.0.0.1:0".parse().unwrap(), "/tmp/rdv".into());
    /// assert_eq!(o.max_clients, 100_000);
    /// assert_eq!(o.max_per_addr, None);
    /// ```
    pub fn new(listen: SocketAddr, home: PathBuf) -> ServeOptions {
        ServeOptions {
            listen,
            home,
            model: "srdi".into(),
            max_clients: 100_000,
            rate_limit: 1_000_000,
            key_bits: 1024,
            peers: Vec::new(),
            central: None,
            max_entries: 1_000_000,
            group_credential: None,
            max_connections: juxta::PeerConfig::new(".").max_connections,
            max_per_addr: None,
            max_pending_per_addr: None,
            lease_ms: None,
        }
    }
}

/// Runs a rendezvous until the process is killed; `ready` gets its
/// address and ID once it listens. Then answers each `status` line on
/// standard input with `STATUS <index entries>` on standard output (its
/// rendezvous' SRDI index, in the group it serves) and `STATUS <index
/// entries> <leased edges>`; at the end of input it just runs on.
pub async fn serve(
    opts: ServeOptions,
    ready: impl FnOnce(SocketAddr, PeerId),
) -> Result<(), BenchError> {
    let listen = opts.listen;
    let served = start_served(opts).await?;
    ready(
        served.peer.local_addr().unwrap_or(listen),
        served.peer.peer_id(),
    );
    // Standard input on a thread of its own (blocking reads).
    let rdv = served.rdv.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if line.trim() == "status" {
                let st = rdv.status();
                println!("STATUS {} {}", st.index_entries, st.clients);
            }
        }
    });
    std::future::pending::<()>().await;
    drop(served);
    Ok(())
}

/// A rendezvous peer [`start_served`] started.
pub struct Served {
    /// The peer.
    pub peer: Peer,
    /// The certificate subgroup it serves (`None`: the Net peer group).
    pub group: Option<Group>,
    /// Its rendezvous service (in that group).
    pub rdv: RendezvousHandle,
}

/// Starts the rendezvous peer [`serve`] runs and returns it.
pub async fn start(opts: ServeOptions) -> Result<Peer, BenchError> {
    Ok(start_served(opts).await?.peer)
}

/// Starts the rendezvous peer [`serve`] runs: the Net peer group's
/// rendezvous, or with [`ServeOptions::group_credential`] a plain peer
/// that joins that certificate subgroup and runs its rendezvous.
pub async fn start_served(opts: ServeOptions) -> Result<Served, BenchError> {
    let model_name = parse_model(&opts.model)?;
    let rate = opts.rate_limit.max(1);
    let adm = AdmissionConfig {
        per_querier_rate: rate,
        per_querier_burst: (rate / 10).max(1),
        total_rate: rate,
        total_burst: (rate / 10).max(1),
        ..AdmissionConfig::default()
    };
    // Every edge of a bench run connects from one address (this host, or
    // the client namespace under --net), where the thesis' edges were
    // separate machines: the per-address limits (a defence against one
    // host taking every slot, 32 connections and 8 pending by default)
    // would refuse the 33rd edge and delay re-leases after a kill, so the
    // bench's rendezvous allows as many per address as it has clients.
    // `juxta bench leases` keeps the defences and spreads its edges over
    // many source addresses instead (`max_per_addr`).
    let per_addr = opts.max_clients.clamp(1, 65_536);
    // `--rate-limit` is the rendezvous' per-querier budget for every
    // query kind: the SRDI admission above and the resolver's per-peer
    // budget for discovery, peer-info and pipe-binding queries (200/s by
    // default, which 16 edges at 6,000 queries/s overrun: the excess was
    // dropped there and read as loss of the rendezvous).
    let disco = juxta::discovery::DiscoveryConfig {
        query_rate: f64::from(rate),
        query_burst: (rate / 10).max(1),
        ..Default::default()
    };
    let cfg = PeerConfig::new(&opts.home)
        .listen(opts.listen)
        .key_bits(opts.key_bits)
        .discovery(disco)
        .max_connections(opts.max_connections.max(1))
        .max_connections_per_addr(opts.max_per_addr.unwrap_or(per_addr).max(1))
        .max_pending_per_addr(opts.max_pending_per_addr.unwrap_or(per_addr).max(1));
    // The central server is this rendezvous itself (no peer view yet).
    let mut probe = cfg.clone();
    probe.listen = None;
    let id_probe = Peer::start(probe).await?;
    let me = id_probe.peer_id();
    drop(id_probe);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let model = match model_name {
        "centralized" => SearchModel::Centralized {
            server: opts.central.unwrap_or(me),
        },
        "flooding" => SearchModel::Flooding,
        _ => SearchModel::Srdi,
    };
    let mut rc = RendezvousConfig::rendezvous()
        .max_clients(opts.max_clients)
        .admission(adm)
        .model(model)
        .peers(opts.peers.clone());
    rc.srdi.max_entries = opts.max_entries.max(1);
    if let Some(ms) = opts.lease_ms {
        rc.server.lease_ms = ms.max(1);
    }
    let no_service = || BenchError::Responder {
        layer: "rendezvous".into(),
        reason: "no rendezvous service".into(),
    };
    match &opts.group_credential {
        None => {
            let peer = Peer::start(cfg.rendezvous(rc)).await?;
            let rdv = peer.rendezvous().cloned().ok_or_else(no_service)?;
            Ok(Served {
                peer,
                group: None,
                rdv,
            })
        }
        Some(dir) => {
            let (adv, cred) = crate::subgroup::read_credential(dir)?;
            let peer = Peer::start(cfg).await?;
            let group = peer
                .groups()
                .join_with_certificate(&adv, &cred)
                .await
                .map_err(crate::subgroup::SubgroupError::from)?;
            let rdv = group
                .start_rendezvous(rc)
                .map_err(crate::subgroup::SubgroupError::from)?;
            Ok(Served {
                peer,
                group: Some(group),
                rdv,
            })
        }
    }
}

/// A rendezvous child process (killed when dropped).
pub struct RdvProcess {
    child: Child,
    /// Its standard input (`status` requests) and output (`STATUS` lines).
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    /// Its address.
    pub addr: SocketAddr,
    /// Its peer ID.
    pub peer: PeerId,
    /// Its process ID.
    pub pid: u32,
    _home: tempfile::TempDir,
}

impl RdvProcess {
    /// Starts `<exe> rdv-serve ...` and waits for its READY line.
    pub async fn spawn(
        exe: &std::path::Path,
        model: &str,
        key_bits: usize,
        rate_limit: u32,
        peers: &[SocketAddr],
        central: Option<PeerId>,
        max_entries: usize,
    ) -> Result<RdvProcess, BenchError> {
        RdvProcess::spawn_in(
            exe,
            model,
            key_bits,
            rate_limit,
            peers,
            central,
            max_entries,
            &crate::net::Net::loopback(),
        )
        .await
    }

    /// [`RdvProcess::spawn`] in the responder namespace of `net`,
    /// listening on its responder address (`rdv-serve --netns`).
    #[allow(clippy::too_many_arguments)]
    pub async fn spawn_in(
        exe: &std::path::Path,
        model: &str,
        key_bits: usize,
        rate_limit: u32,
        peers: &[SocketAddr],
        central: Option<PeerId>,
        max_entries: usize,
        net: &crate::net::Net,
    ) -> Result<RdvProcess, BenchError> {
        RdvProcess::spawn_impl(
            exe,
            model,
            key_bits,
            rate_limit,
            peers,
            central,
            max_entries,
            net,
            None,
            &[],
        )
        .await
    }

    /// A Net peer group rendezvous on loopback (SRDI model, no admission
    /// limit to speak of) with more `rdv-serve` options (`extra`, e.g.
    /// `--max-connections 20000`); what `juxta bench leases` runs.
    pub async fn spawn_with_args(
        exe: &std::path::Path,
        key_bits: usize,
        extra: &[String],
    ) -> Result<RdvProcess, BenchError> {
        RdvProcess::spawn_impl(
            exe,
            "srdi",
            key_bits,
            1_000_000,
            &[],
            None,
            1_000_000,
            &crate::net::Net::loopback(),
            None,
            extra,
        )
        .await
    }

    /// [`RdvProcess::spawn_in`] as the rendezvous of `owner`'s certificate
    /// subgroup: its identity is made here first, `owner` issues it a
    /// member certificate into its home, and the process joins the group
    /// with it and runs the group's rendezvous (`rdv-serve
    /// --group-credential`), not the Net peer group's.
    #[allow(clippy::too_many_arguments)]
    pub async fn spawn_in_group(
        exe: &std::path::Path,
        model: &str,
        key_bits: usize,
        rate_limit: u32,
        peers: &[SocketAddr],
        central: Option<PeerId>,
        max_entries: usize,
        net: &crate::net::Net,
        owner: &Group,
    ) -> Result<RdvProcess, BenchError> {
        RdvProcess::spawn_impl(
            exe,
            model,
            key_bits,
            rate_limit,
            peers,
            central,
            max_entries,
            net,
            Some(owner),
            &[],
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn spawn_impl(
        exe: &std::path::Path,
        model: &str,
        key_bits: usize,
        rate_limit: u32,
        peers: &[SocketAddr],
        central: Option<PeerId>,
        max_entries: usize,
        net: &crate::net::Net,
        owner: Option<&Group>,
        extra: &[String],
    ) -> Result<RdvProcess, BenchError> {
        let home = tempfile::tempdir().map_err(|source| BenchError::Io {
            what: "creating a rendezvous home".into(),
            source,
        })?;
        if let Some(owner) = owner {
            // The identity the process will load from its home: made
            // here so the owner can issue its certificate beforehand.
            let probe = Peer::start(PeerConfig::new(home.path()).key_bits(key_bits)).await?;
            let id = probe.peer_id();
            drop(probe);
            tokio::time::sleep(Duration::from_millis(50)).await;
            crate::subgroup::write_credential(owner, id, home.path())?;
        }
        let mut cmd = Command::new(exe);
        cmd.arg("rdv-serve")
            .arg("--listen")
            .arg(SocketAddr::new(net.responder_ip, 0).to_string())
            .arg("--home")
            .arg(home.path())
            .arg("--model")
            .arg(model)
            .arg("--key-bits")
            .arg(key_bits.to_string())
            .arg("--rate-limit")
            .arg(rate_limit.to_string())
            .arg("--max-entries")
            .arg(max_entries.to_string())
            .args(
                (!peers.is_empty())
                    .then(|| {
                        let list: Vec<String> = peers.iter().map(|a| a.to_string()).collect();
                        ["--peers".to_string(), list.join(",")]
                    })
                    .into_iter()
                    .flatten(),
            )
            .args(
                central
                    .map(|c| ["--central".to_string(), c.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .stdout(Stdio::piped())
            .stdin(Stdio::piped())
            .kill_on_drop(true);
        if let Some(ns) = &net.responder_ns {
            cmd.arg("--netns").arg(ns);
        }
        if owner.is_some() {
            cmd.arg("--group-credential").arg(home.path());
        }
        cmd.args(extra);
        let mut child = cmd.spawn().map_err(|source| BenchError::Io {
            what: format!("starting rendezvous {}", exe.display()),
            source,
        })?;
        let bad = |reason: String| BenchError::Responder {
            layer: "rendezvous".into(),
            reason,
        };
        let stdout = child.stdout.take().ok_or_else(|| bad("no stdout".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .map_err(|_| bad("no READY line within 60 s".into()))?
            .map_err(|source| BenchError::Io {
                what: "reading rendezvous output".into(),
                source,
            })?
            .ok_or_else(|| bad("exited before READY".into()))?;
        let mut it = line.split_whitespace();
        let (Some("READY"), Some(a), Some(p)) = (it.next(), it.next(), it.next()) else {
            return Err(bad(format!("unexpected line {line:?}")));
        };
        let addr = a.parse().map_err(|_| bad(format!("bad address {a:?}")))?;
        let peer = p.parse().map_err(|_| bad(format!("bad peer ID {p:?}")))?;
        let pid = child.id().ok_or_else(|| bad("no PID".into()))?;
        let stdin = child.stdin.take();
        Ok(RdvProcess {
            child,
            stdin,
            lines,
            addr,
            peer,
            pid,
            _home: home,
        })
    }

    /// The entries in its rendezvous' SRDI index (of the group it serves),
    /// asked on its standard input; `None` if it does not answer in 5 s.
    pub async fn index_entries(&mut self) -> Option<u64> {
        self.status().await.map(|(index, _)| index)
    }

    /// Its rendezvous' SRDI index entries and leased edges (of the group it
    /// serves), asked on its standard input; `None` if it does not answer
    /// in 5 s.
    pub async fn status(&mut self) -> Option<(u64, u64)> {
        let stdin = self.stdin.as_mut()?;
        stdin.write_all(b"status\n").await.ok()?;
        stdin.flush().await.ok()?;
        let line = tokio::time::timeout(Duration::from_secs(5), self.lines.next_line())
            .await
            .ok()?
            .ok()??;
        let mut it = line.strip_prefix("STATUS ")?.split_whitespace();
        let index = it.next()?.parse().ok()?;
        let clients = it.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        Some((index, clients))
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// CPU seconds used so far (user + system) and RSS in MB, from /proc.
    pub fn usage(&self) -> Option<(f64, f64)> {
        let u = crate::util::proc_usage(self.pid)?;
        Some((u.cpu_s, u.rss_mb))
    }
}

/// The executable to re-run as a rendezvous (this one by default).
pub fn default_exe() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("juxta"))
}

/// Edges in this process leasing the given rendezvous (spread round robin).
pub async fn start_edges(
    homes: &std::path::Path,
    n: usize,
    seeds: &[SocketAddr],
    key_bits: usize,
) -> Result<Vec<Peer>, BenchError> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let c = PeerConfig::new(homes.join(format!("edge{i}")))
            .rendezvous(RendezvousConfig::edge(seeds.to_vec()).first_seed(i))
            .key_bits(key_bits);
        v.push(Peer::start(c).await?);
    }
    Ok(v)
}

/// Waits until every edge holds a lease.
pub async fn wait_all_leased(edges: &[Peer], timeout: Duration) -> Result<(), BenchError> {
    let mut handles = Vec::with_capacity(edges.len());
    for e in edges {
        handles.push(
            e.rendezvous()
                .cloned()
                .ok_or_else(|| BenchError::BadOption("edge without rendezvous service".into()))?,
        );
    }
    wait_handles_leased(&handles, timeout).await
}

/// Waits until every rendezvous service (edges' services, in any group)
/// holds a lease.
pub async fn wait_handles_leased(
    handles: &[RendezvousHandle],
    timeout: Duration,
) -> Result<(), BenchError> {
    for h in handles {
        if h.wait_leased(timeout).await.is_none() {
            return Err(BenchError::Responder {
                layer: "rendezvous".into(),
                reason: "an edge got no lease".into(),
            });
        }
    }
    Ok(())
}

/// What the edges ask the rendezvous (`--query-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryKind {
    /// JXTA discovery queries (PDP through the resolver), as the thesis
    /// measured: the querying edge asks its rendezvous, which forwards the
    /// query to the publishers its SRDI index names (or walks, floods or
    /// asks the central server, per model); the publisher answers the
    /// querier directly with its advertisements.
    Pdp,
    /// Juxta's own SRDI lookup (`juxta-rdv-lookup`): the rendezvous answers
    /// with the publishers' peer IDs.
    Lookup,
}

impl QueryKind {
    /// `pdp` or `lookup`.
    pub fn parse(s: &str) -> Result<QueryKind, BenchError> {
        match s {
            "pdp" => Ok(QueryKind::Pdp),
            "lookup" => Ok(QueryKind::Lookup),
            o => Err(BenchError::BadOption(format!(
                "--query-kind {o:?} (known: pdp, lookup)"
            ))),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            QueryKind::Pdp => "pdp",
            QueryKind::Lookup => "lookup",
        }
    }
}

/// The advertisement type discovery queries ask for (`--adv-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AdvType {
    /// Peer advertisements (`Peers`): each edge's own (a peer speaks only
    /// for itself, so the query space is at most the number of edges).
    Peer,
    /// Peer group advertisements (`Groups`).
    Group,
    /// Other advertisements (`Adv`): pipe advertisements.
    Adv,
}

impl AdvType {
    /// `peer`, `group` or `adv`.
    pub fn parse(s: &str) -> Result<AdvType, BenchError> {
        match s {
            "peer" => Ok(AdvType::Peer),
            "group" => Ok(AdvType::Group),
            "adv" => Ok(AdvType::Adv),
            o => Err(BenchError::BadOption(format!(
                "--adv-type {o:?} (known: peer, group, adv)"
            ))),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            AdvType::Peer => "peer",
            AdvType::Group => "group",
            AdvType::Adv => "adv",
        }
    }

    /// The discovery type.
    pub fn kind(self) -> AdvKind {
        match self {
            AdvType::Peer => AdvKind::Peer,
            AdvType::Group => AdvKind::Group,
            AdvType::Adv => AdvKind::Adv,
        }
    }

    /// SRDI entries one advertisement of this type puts in the index
    /// (its indexed fields: Name + PID; Name + GID + MSID; Name + Id).
    pub fn index_fields(self) -> usize {
        match self {
            AdvType::Peer => 2,
            AdvType::Group => 3,
            AdvType::Adv => 2,
        }
    }
}

/// The peer group measured (`--group`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupScope {
    /// The Net peer group: the rendezvous processes run the Net peer
    /// group's rendezvous.
    #[default]
    Net,
    /// A certificate subgroup of the Net peer group whose own rendezvous
    /// are the rendezvous processes ([`crate::subgroup`]).
    Subgroup,
}

impl GroupScope {
    /// `net` or `subgroup`.
    ///
    /// ```
    /// use juxta_bench::rendezvous::GroupScope;
    /// assert_eq!(GroupScope::parse("subgroup").unwrap(), GroupScope::Subgroup);
    /// assert!(GroupScope::parse("world").unwrap_err().to_string().contains("--group"));
    /// ```
    pub fn parse(s: &str) -> Result<GroupScope, BenchError> {
        match s {
            "net" => Ok(GroupScope::Net),
            "subgroup" => Ok(GroupScope::Subgroup),
            o => Err(BenchError::BadOption(format!(
                "--group {o:?} (known: net, subgroup)"
            ))),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            GroupScope::Net => "net",
            GroupScope::Subgroup => "subgroup",
        }
    }
}

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct RendezvousOptions {
    /// Search models.
    pub models: Vec<String>,
    /// Edge counts.
    pub edges: Vec<usize>,
    /// Rendezvous counts.
    pub rendezvous: Vec<usize>,
    /// Offered total rates, queries/s.
    pub rates: Vec<u32>,
    /// Measured time per configuration.
    pub duration: Duration,
    /// The `juxta` binary to re-run as rendezvous.
    pub exe: PathBuf,
    /// RSA key size.
    pub key_bits: usize,
    /// Share of queries that ask for a published advertisement, in
    /// percent (the rest ask for names nobody published).
    pub positive_pct: u8,
    /// Advertisements published across the edges, from which the
    /// positive queries pick (the thesis used 1,024).
    pub query_space: usize,
    /// Discovery queries or Juxta lookups.
    pub query_kind: QueryKind,
    /// PDP: responses wanted per query (the discovery query's threshold).
    /// The query space is published in groups of `threshold`
    /// advertisements sharing a name, each group by one edge, so a
    /// positive query can be answered with `threshold` advertisements.
    pub threshold: u32,
    /// PDP: the advertisement type asked for.
    pub adv_type: AdvType,
    /// The rendezvous' index bound, in advertisements (the thesis' cache
    /// size: 100 or 1,000). The SRDI index is bounded to this many
    /// advertisements' entries (times the type's indexed fields) plus 8
    /// entries per edge.
    pub rdv_cache: usize,
    /// How long a query may take before it counts as lost.
    pub timeout: Duration,
    /// Network profile: the rendezvous processes run in the responder
    /// namespace, the edges (this process) in the client namespace.
    pub net: crate::net::Net,
    /// The peer group measured: the Net peer group, or a certificate
    /// subgroup with its own rendezvous (`--group subgroup`).
    pub group: GroupScope,
}

/// Most advertisements a run may publish (`--query-space`).
pub const MAX_QUERY_SPACE: usize = 1_000_000;
/// Most edges or rendezvous of one configuration.
pub const MAX_PEERS: usize = 1024;
/// Default `--rdv-cache`: the index holds the default query space.
pub const DEFAULT_RDV_CACHE: usize = 10_000;

impl Default for RendezvousOptions {
    /// A small budget for the default suite (a few seconds per row):
    /// discovery queries at a thesis rate and two higher ones.
    fn default() -> RendezvousOptions {
        RendezvousOptions {
            models: vec!["srdi".into()],
            edges: vec![4, 16],
            rendezvous: vec![1],
            rates: vec![16, 200, 1_000],
            duration: Duration::from_millis(2_000),
            exe: default_exe(),
            key_bits: 1024,
            positive_pct: 50,
            query_space: 1024,
            query_kind: QueryKind::Pdp,
            threshold: 1,
            adv_type: AdvType::Adv,
            rdv_cache: DEFAULT_RDV_CACHE,
            timeout: LOOKUP_TIMEOUT,
            net: crate::net::Net::loopback(),
            group: GroupScope::Net,
        }
    }
}

impl RendezvousOptions {
    /// The thesis' sweep (`--full`): the three models, 4 to 32 edges, 1,
    /// 2 and 4 rendezvous, 2 to 16 queries/s and above (32, 64), 10 s per
    /// rate, 5 s query timeout. 36 configurations of 6 rates: about an
    /// hour (see [`RendezvousOptions::estimate`]).
    pub fn full() -> RendezvousOptions {
        RendezvousOptions {
            models: vec!["centralized".into(), "flooding".into(), "srdi".into()],
            edges: vec![4, 8, 16, 32],
            rendezvous: vec![1, 2, 4],
            rates: vec![2, 4, 8, 16, 32, 64],
            duration: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            ..RendezvousOptions::default()
        }
    }

    /// An upper estimate of the run's length: per configuration about
    /// 10 s of start-up (processes, edges, publishing, probes), per rate
    /// the duration plus the query timeout (the last queries' wait).
    pub fn estimate(&self) -> Duration {
        let configs = (self.models.len() * self.edges.len() * self.rendezvous.len()) as u32;
        let per_rate = self.duration + self.timeout;
        (Duration::from_secs(10) + per_rate * self.rates.len() as u32) * configs
    }

    /// Refuses combinations that cannot be honoured, naming the option.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::BadOption(m));
        if self.models.is_empty() {
            return bad("--model: none given".into());
        }
        for m in &self.models {
            parse_model(m)?;
        }
        for (name, v) in [("--edges", &self.edges), ("--rendezvous", &self.rendezvous)] {
            if v.is_empty() || v.iter().any(|&n| n == 0 || n > MAX_PEERS) {
                return bad(format!("{name} {v:?} (each 1 to {MAX_PEERS})"));
            }
        }
        if self.rates.is_empty() || self.rates.contains(&0) {
            return bad(format!("--rate {:?} (each at least 1 query/s)", self.rates));
        }
        if self.positive_pct > 100 {
            return bad(format!("--positive-pct {} (0 to 100)", self.positive_pct));
        }
        if self.query_space == 0 || self.query_space > MAX_QUERY_SPACE {
            return bad(format!(
                "--query-space {} (1 to {MAX_QUERY_SPACE} advertisements)",
                self.query_space
            ));
        }
        if self.rdv_cache == 0 || self.rdv_cache > MAX_QUERY_SPACE {
            return bad(format!(
                "--rdv-cache {} (1 to {MAX_QUERY_SPACE} advertisements)",
                self.rdv_cache
            ));
        }
        if self.query_space > self.rdv_cache {
            return bad(format!(
                "--query-space {} is larger than --rdv-cache {}: the rendezvous could not index every advertisement, so positive queries would be lost to the bound, not to load (lower --query-space or raise --rdv-cache)",
                self.query_space, self.rdv_cache
            ));
        }
        if self.timeout < Duration::from_millis(100) || self.timeout > Duration::from_secs(600) {
            return bad(format!(
                "--timeout-ms {} (100 to 600000)",
                self.timeout.as_millis()
            ));
        }
        match self.query_kind {
            QueryKind::Lookup => {
                if self.threshold != 1 {
                    return bad(format!(
                        "--threshold {} applies to --query-kind pdp only (a lookup has one answer)",
                        self.threshold
                    ));
                }
                if self.adv_type != AdvType::Adv {
                    return bad(format!(
                        "--adv-type {} applies to --query-kind pdp only",
                        self.adv_type.name()
                    ));
                }
            }
            QueryKind::Pdp => {
                if self.threshold == 0 || self.threshold as usize > MAX_RESPONSES {
                    return bad(format!(
                        "--threshold {} (responses wanted: 1 to {MAX_RESPONSES}, the most one discovery response carries)",
                        self.threshold
                    ));
                }
                if self.threshold as usize > self.query_space {
                    return bad(format!(
                        "--threshold {} is larger than --query-space {}",
                        self.threshold, self.query_space
                    ));
                }
                if self.adv_type == AdvType::Peer {
                    let min_edges = self.edges.iter().copied().min().unwrap_or(0);
                    if self.threshold != 1 {
                        return bad(format!(
                            "--threshold {} with --adv-type peer: each edge publishes only its own peer advertisement, so one answer holds one (use --threshold 1)",
                            self.threshold
                        ));
                    }
                    if self.query_space > min_edges {
                        return bad(format!(
                            "--query-space {} with --adv-type peer: each edge publishes only its own peer advertisement, so at most the smallest --edges ({min_edges})",
                            self.query_space
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The SRDI index bound the rendezvous get for `edges` edges.
    fn index_bound(&self, edges: usize) -> usize {
        let per_adv = match self.query_kind {
            QueryKind::Lookup => 1,
            QueryKind::Pdp => self.adv_type.index_fields(),
        };
        self.rdv_cache
            .saturating_mul(per_adv)
            .saturating_add(edges.saturating_mul(8))
    }

    /// Distinct names positive queries ask for.
    fn names(&self) -> usize {
        match self.query_kind {
            QueryKind::Lookup => self.query_space,
            QueryKind::Pdp => self.query_space.div_ceil(self.threshold.max(1) as usize),
        }
        .max(1)
    }
}

/// Whether lookup `k` (0, 1, ...) of a stream is positive when `pct`
/// percent should be: exactly `pct` of every 100 consecutive lookups, spread
/// evenly.
pub fn is_positive(k: u64, pct: u8) -> bool {
    let (k, pct) = (u128::from(k), u128::from(pct.min(100)));
    (k + 1) * pct / 100 > k * pct / 100
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct RendezvousRow {
    /// Always `rendezvous`.
    pub scenario: &'static str,
    /// The peer group measured: `net` (the Net peer group's rendezvous) or
    /// `subgroup` (a certificate subgroup's own rendezvous).
    pub group: GroupScope,
    /// Discovery queries (`pdp`) or Juxta lookups (`lookup`).
    pub query_kind: QueryKind,
    /// Search model.
    pub model: String,
    /// Edges.
    pub edges: usize,
    /// Rendezvous processes.
    pub rendezvous: usize,
    /// Offered queries/s.
    pub offered_qps: u32,
    /// Share of positive queries, %.
    pub positive_pct: u8,
    /// Advertisements published (the positive queries' space).
    pub query_space: usize,
    /// PDP: the advertisement type asked for (`adv` for lookups).
    pub adv_type: AdvType,
    /// PDP: responses wanted per query (1 for lookups).
    pub threshold: u32,
    /// The rendezvous' index bound, advertisements.
    pub rdv_cache: usize,
    /// The query timeout, ms.
    pub timeout_ms: u64,
    /// Answered queries/s (PDP: answered positive queries).
    pub queries_per_s: f64,
    /// Queries issued.
    pub queries_issued: u64,
    /// Of those, positive (for a published advertisement).
    pub positive_issued: u64,
    /// Positive queries answered within the timeout.
    pub positive_answered: u64,
    /// PDP: negative queries that got an answer (JXSE sends none: 0).
    pub negative_answered: u64,
    /// PDP: mean advertisements per answered positive query.
    pub responses_mean: f64,
    /// PDP: answered positive queries that got `threshold` advertisements, %.
    pub threshold_met_pct: f64,
    /// Median response time.
    pub response_ms_p50: f64,
    /// 99th percentile response time.
    pub response_ms_p99: f64,
    /// Mean response time (answered queries).
    pub response_ms_mean: f64,
    /// Standard deviation of the response times (answered queries).
    pub response_ms_stddev: f64,
    /// Queries lost, %: lookups without an answer in time; PDP: positive
    /// queries without an answer in time (a discovery query that finds
    /// nothing gets no answer, as with JXSE, so negatives cannot count).
    pub loss_pct: f64,
    /// Coefficient of variation of the response times, as the thesis
    /// defines it: `response_ms_stddev / response_ms_mean`.
    pub cv: f64,
    /// Stability of the answer rate: coefficient of variation of the
    /// number of queries completed per 100 ms (what `cv` meant before).
    pub completion_cv: f64,
    /// CPU of all rendezvous processes, % of one core.
    pub rdv_cpu_pct: f64,
    /// RSS of all rendezvous processes, MB.
    pub rdv_rss_mb: f64,
    /// Entries in the SRDI indexes of the measured group's rendezvous
    /// after the run, summed over the rendezvous (replicas counted at
    /// each): where the published query space was indexed.
    pub rdv_index_entries: u64,
    /// Where the lost queries went (their sum is the numerator of
    /// `loss_pct`).
    pub lost: LostWhy,
    /// Why this configuration produced no figures (the run went on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Default)]
struct Samples {
    latencies_ms: Vec<f64>,
    done_at_ms: Vec<u64>,
    lost: u64,
    lost_why: LostWhy,
    issued: u64,
    positive: u64,
    positive_answered: u64,
    negative_answered: u64,
    responses: u64,
    threshold_met: u64,
}

/// Why counted queries were lost (the parts of `loss_pct`), so a loss
/// figure says where the queries went.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct LostWhy {
    /// Not sent: the edge already had [`MAX_IN_FLIGHT_PER_EDGE`] queries
    /// in flight.
    pub in_flight_cap: u64,
    /// Not sent: the edge held no lease when the query was due.
    pub unleased: u64,
    /// Refused by the querier's own service (e.g. its table of pending
    /// queries full).
    pub refused: u64,
    /// Sent, and nobody answered before the timeout.
    pub no_answer: u64,
    /// Sent, answered, but the answers carried no advertisement (PDP) or
    /// the lookup failed.
    pub empty: u64,
}

/// A configuration that is up: rendezvous processes and leased edges.
struct Setup {
    rdvs: Vec<RdvProcess>,
    edges: Vec<Peer>,
    /// Each edge's services in the measured group.
    scopes: Vec<EdgeScope>,
    /// Subgroup: the edges' memberships and the creator (peer, group).
    groups: Vec<Group>,
    owner: Option<(Peer, Group)>,
}

/// An edge's discovery and rendezvous services in the measured group.
#[derive(Clone)]
struct EdgeScope {
    disco: DiscoveryService,
    rdv: RendezvousHandle,
}

/// The name edge `i` gets (PDP peer queries ask for it).
fn edge_name(i: usize) -> String {
    format!("rdvbench-edge-{i}")
}

/// The edge (of `n`) that publishes PDP name `b`.
fn publisher_of(_opts: &RendezvousOptions, b: usize, n: usize) -> usize {
    b % n.max(1)
}

/// The value a positive PDP query for name `b` asks for.
fn pdp_name(opts: &RendezvousOptions, b: usize) -> String {
    match opts.adv_type {
        AdvType::Peer => edge_name(b),
        _ => format!("item-{b}"),
    }
}

/// Starts the rendezvous and edges of one configuration and publishes the
/// query space (in the Net peer group, or in a new certificate subgroup
/// whose creator is a peer of this process).
async fn set_up(
    opts: &RendezvousOptions,
    model: &str,
    nr: usize,
    ne: usize,
    homes: &std::path::Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Setup, BenchError> {
    let sub = homes.join(format!("{model}-{nr}-{ne}"));
    let owner = match opts.group {
        GroupScope::Net => None,
        GroupScope::Subgroup => {
            // The creator only issues certificates (it neither listens
            // nor takes part in the measurement).
            let p = Peer::start(PeerConfig::new(sub.join("owner")).key_bits(opts.key_bits)).await?;
            let g = crate::subgroup::create(&p, &format!("rdvbench-{model}-{nr}-{ne}")).await?;
            Some((p, g))
        }
    };
    // The rendezvous form one peer view (each names those started before
    // it); the first is the central server.
    let mut rdvs: Vec<RdvProcess> = Vec::new();
    for _ in 0..nr {
        let peers: Vec<SocketAddr> = rdvs.iter().map(|r| r.addr).collect();
        let central = rdvs.first().map(|r| r.peer);
        let (exe, bound) = (&opts.exe, opts.index_bound(ne));
        rdvs.push(match &owner {
            None => {
                RdvProcess::spawn_in(
                    exe,
                    model,
                    opts.key_bits,
                    1_000_000,
                    &peers,
                    central,
                    bound,
                    &opts.net,
                )
                .await?
            }
            Some((_, g)) => {
                RdvProcess::spawn_in_group(
                    exe,
                    model,
                    opts.key_bits,
                    1_000_000,
                    &peers,
                    central,
                    bound,
                    &opts.net,
                    g,
                )
                .await?
            }
        });
    }
    if rdvs.len() > 1 {
        // Probes run every 500 ms: let the view settle.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let seeds: Vec<SocketAddr> = rdvs.iter().map(|r| r.addr).collect();
    // Edges listen for PDP: a publisher answers the querier directly.
    let listen = opts.query_kind == QueryKind::Pdp;
    let mut edges = Vec::with_capacity(ne);
    let mut scopes = Vec::with_capacity(ne);
    let mut groups = Vec::new();
    for i in 0..ne {
        let rc = RendezvousConfig::edge(seeds.clone()).first_seed(i);
        let mut c = PeerConfig::new(sub.join(format!("edge{i}"))).key_bits(opts.key_bits);
        if listen {
            c = c.listen(SocketAddr::new(opts.net.client_ip(), 0));
            c.name = edge_name(i);
        }
        match &owner {
            None => {
                let p = Peer::start(c.rendezvous(rc)).await?;
                let rdv = p.rendezvous().cloned().ok_or_else(|| {
                    BenchError::BadOption("edge without rendezvous service".into())
                })?;
                scopes.push(EdgeScope {
                    disco: p.discovery(),
                    rdv,
                });
                edges.push(p);
            }
            Some((_, og)) => {
                // A member of the subgroup, leasing its rendezvous there
                // (no Net peer group rendezvous service at all).
                let p = Peer::start(c).await?;
                let (g, rdv) = crate::subgroup::join_member(og, &p, rc, None).await?;
                scopes.push(EdgeScope {
                    disco: g.discovery(),
                    rdv,
                });
                groups.push(g);
                edges.push(p);
            }
        }
    }
    let handles: Vec<RendezvousHandle> = scopes.iter().map(|s| s.rdv.clone()).collect();
    wait_handles_leased(&handles, Duration::from_secs(30)).await?;
    let n = edges.len();
    match opts.query_kind {
        QueryKind::Lookup => {
            // The query space, spread round-robin over the edges.
            for j in 0..opts.query_space {
                let _ = scopes[j % n]
                    .rdv
                    .srdi_publish(
                        "Adv",
                        "Name",
                        &format!("item-{j}"),
                        Duration::from_secs(3600),
                    )
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        QueryKind::Pdp => {
            let gid = groups.first().map_or(PeerGroupId::NET, |g| g.id);
            publish_space(opts, &edges, &scopes, gid).await?;
            connect_mesh(&edges, progress).await;
            probe(opts, &scopes, progress).await;
        }
    }
    Ok(Setup {
        rdvs,
        edges,
        scopes,
        groups,
        owner,
    })
}

/// PDP: publishes the query space (remote publication: SRDI entries to
/// each publisher's rendezvous). Advertisement `j` is named after its
/// group `j / threshold`; group `b` is published by edge `b mod edges`.
async fn publish_space(
    opts: &RendezvousOptions,
    edges: &[Peer],
    scopes: &[EdgeScope],
    gid: PeerGroupId,
) -> Result<(), BenchError> {
    let n = edges.len();
    let t = opts.threshold.max(1) as usize;
    let mut rng = rand::thread_rng();
    let err = |e: juxta::discovery::DiscoveryError| BenchError::Responder {
        layer: "rendezvous".into(),
        reason: format!("publishing the query space: {e}"),
    };
    for j in 0..opts.query_space {
        let b = j / t;
        let (publisher, adv) = match opts.adv_type {
            AdvType::Peer => {
                // (`validate`: the query space is at most the edges.)
                let e = &edges[j % n];
                let route = e
                    .local_addr()
                    .map(|a| RouteAdvertisement::direct(e.peer_id(), [format!("tcp://{a}")]));
                let mut pa = PeerAdvertisement::new(e.peer_id(), gid, edge_name(j));
                pa.route = route;
                (j % n, Advertisement::Peer(pa))
            }
            AdvType::Group => {
                let new_gid = juxta::proto::group::new_group_id(&mut rng);
                let spec = juxta::proto::group::ALL_PURPOSE_GROUP_SPEC
                    .parse()
                    .map_err(|_| BenchError::BadOption("group spec ID".into()))?;
                (
                    b % n,
                    Advertisement::Group(PeerGroupAdvertisement::new(
                        new_gid,
                        spec,
                        pdp_name(opts, b),
                    )),
                )
            }
            AdvType::Adv => {
                let mut p = PipeAdvertisement::new(PipeId::random(&mut rng), PipeType::Unicast);
                p.name = Some(pdp_name(opts, b));
                (b % n, Advertisement::Pipe(p))
            }
        };
        scopes[publisher].disco.publish(&adv).await.map_err(err)?;
    }
    Ok(())
}

/// Most edges [`connect_mesh`] connects pairwise.
pub const MAX_MESH_EDGES: usize = 64;

/// PDP: connects every pair of edges, one connection at a time, before
/// measuring: the steady state of a group whose members have answered
/// each other before (the answer's connection set-up is not timed), and
/// no burst of simultaneous connections from one loopback address, which
/// the runtime's per-address limit of pending connections would refuse
/// (on separate hosts each peer has its own address). Queries still go
/// only to the rendezvous ([`juxta::discovery::Search::ask`]).
async fn connect_mesh(edges: &[Peer], progress: &mut dyn FnMut(&str)) {
    if edges.len() > MAX_MESH_EDGES {
        progress(&format!(
            "rendezvous: {} edges: not pre-connected (more than {MAX_MESH_EDGES})",
            edges.len()
        ));
        return;
    }
    let mut failed = 0;
    for (i, a) in edges.iter().enumerate() {
        for b in &edges[i + 1..] {
            let Some(addr) = b.local_addr() else { continue };
            if a.is_connected_to(&b.peer_id()) {
                continue;
            }
            if tokio::time::timeout(Duration::from_secs(5), a.connect(addr))
                .await
                .map_or(true, |r| r.is_err())
            {
                failed += 1;
            }
        }
    }
    if failed > 0 {
        progress(&format!(
            "rendezvous: {failed} edge pairs could not be pre-connected (measuring anyway)"
        ));
    }
}

/// PDP: waits (up to 15 s) until a few published names are found through
/// the rendezvous (the SRDI entries arrived); says so when not.
async fn probe(opts: &RendezvousOptions, scopes: &[EdgeScope], progress: &mut dyn FnMut(&str)) {
    let names = opts.names();
    let n = scopes.len();
    let deadline = Instant::now() + Duration::from_secs(15);
    for b in [0, names / 2, names - 1] {
        let asker = &scopes[(b + 1) % n];
        let found = loop {
            if let Some(Ok(f)) = pdp_query(opts, &asker.disco, &asker.rdv, &pdp_name(opts, b)).await
            {
                if !f.advertisements.is_empty() {
                    break true;
                }
            }
            if Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if !found {
            progress(&format!(
                "rendezvous: {} not found through the rendezvous within 15 s (measuring anyway)",
                pdp_name(opts, b)
            ));
            return;
        }
    }
}

/// One discovery query via the edge's rendezvous (`None`: no lease).
async fn pdp_query(
    opts: &RendezvousOptions,
    disco: &DiscoveryService,
    rdv: &RendezvousHandle,
    value: &str,
) -> Option<Result<juxta::discovery::Found, juxta::discovery::DiscoveryError>> {
    let rdv = rdv.status().leased_to?;
    Some(
        disco
            .search(opts.adv_type.kind())
            .matching("Name", value)
            .threshold(opts.threshold)
            .ask(rdv)
            .timeout(opts.timeout)
            .remote()
            .await,
    )
}

/// Runs every configuration; `progress` gets one line per row. A
/// configuration that cannot be set up gives error rows (one per rate)
/// and the run goes on.
pub async fn run(
    opts: &RendezvousOptions,
    progress: impl FnMut(&str),
) -> Result<Vec<RendezvousRow>, BenchError> {
    opts.validate()?;
    crate::net::scoped(&opts.net, run_here(opts, progress)).await
}

async fn run_here(
    opts: &RendezvousOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<RendezvousRow>, BenchError> {
    let homes = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating edge homes".into(),
        source,
    })?;
    let mut rows = Vec::new();
    for model in &opts.models {
        for &nr in &opts.rendezvous {
            for &ne in &opts.edges {
                let setup = set_up(opts, model, nr, ne, homes.path(), &mut progress).await;
                let mut setup = match setup {
                    Ok(s) => s,
                    Err(e) => {
                        progress(&format!(
                            "rendezvous model={model} edges={ne} rendezvous={nr}: error: {e}"
                        ));
                        for &rate in &opts.rates {
                            rows.push(error_row(opts, model, ne, nr, rate, e.to_string()));
                        }
                        continue;
                    }
                };
                for &rate in &opts.rates {
                    let row = measure(model, &mut setup.rdvs, &setup.scopes, rate, opts).await;
                    progress(&format!(
                        "rendezvous {}{} model={model} edges={ne} rendezvous={nr} offered={rate}/s: {:.1} q/s mean {:.2} ms p50 {:.2} ms p99 {:.2} ms cv {:.2} loss {:.2}% cpu {:.0}%",
                        opts.query_kind.name(),
                        match opts.group {
                            GroupScope::Net => "",
                            GroupScope::Subgroup => " group=subgroup",
                        },
                        row.queries_per_s, row.response_ms_mean, row.response_ms_p50, row.response_ms_p99, row.cv, row.loss_pct, row.rdv_cpu_pct
                    ));
                    rows.push(row);
                }
                drop(std::mem::take(&mut setup.scopes));
                drop(std::mem::take(&mut setup.groups));
                drop(std::mem::take(&mut setup.edges));
                drop(setup.owner.take());
                for r in &mut setup.rdvs {
                    r.kill().await;
                }
            }
        }
    }
    Ok(rows)
}

fn error_row(
    opts: &RendezvousOptions,
    model: &str,
    edges: usize,
    rendezvous: usize,
    rate: u32,
    error: String,
) -> RendezvousRow {
    RendezvousRow {
        scenario: "rendezvous",
        group: opts.group,
        query_kind: opts.query_kind,
        model: model.to_string(),
        edges,
        rendezvous,
        offered_qps: rate,
        positive_pct: opts.positive_pct,
        query_space: opts.query_space,
        adv_type: opts.adv_type,
        threshold: opts.threshold,
        rdv_cache: opts.rdv_cache,
        timeout_ms: opts.timeout.as_millis() as u64,
        queries_per_s: 0.0,
        queries_issued: 0,
        positive_issued: 0,
        positive_answered: 0,
        negative_answered: 0,
        responses_mean: 0.0,
        threshold_met_pct: 0.0,
        response_ms_p50: 0.0,
        response_ms_p99: 0.0,
        response_ms_mean: 0.0,
        response_ms_stddev: 0.0,
        loss_pct: 100.0,
        cv: 0.0,
        completion_cv: 0.0,
        rdv_cpu_pct: 0.0,
        rdv_rss_mb: 0.0,
        rdv_index_entries: 0,
        lost: LostWhy::default(),
        error: Some(error),
    }
}

async fn measure(
    model: &str,
    rdvs: &mut [RdvProcess],
    edges: &[EdgeScope],
    rate: u32,
    opts: &RendezvousOptions,
) -> RendezvousRow {
    let duration = opts.duration;
    let (positive_pct, names) = (opts.positive_pct, opts.names());
    let n = edges.len();
    let samples = Arc::new(Mutex::new(Samples::default()));
    let cpu0: f64 = rdvs.iter().filter_map(|r| r.usage()).map(|u| u.0).sum();
    let start = Instant::now();
    let per_edge = (rate as f64 / n as f64).max(0.001);
    let period = Duration::from_secs_f64(1.0 / per_edge);
    let shared = Arc::new(opts.clone());
    let mut gens = Vec::new();
    for (i, e) in edges.iter().enumerate() {
        let h = e.rdv.clone();
        let samples = samples.clone();
        let edge = e.disco.clone();
        let opts = shared.clone();
        gens.push(tokio::spawn(async move {
            let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            // Edges start at different points of their period.
            tokio::time::sleep(period.mul_f64(i as f64 / n as f64)).await;
            let mut k = 0usize;
            let mut tasks = Vec::new();
            while start.elapsed() < duration {
                tick.tick().await;
                if start.elapsed() >= duration {
                    break;
                }
                // `positive_pct` % ask for a published name (spread over
                // the query space, each edge from its own offset), the
                // rest for a name nobody published.
                // Offset by the edge: the edges' positive queries are not
                // in step.
                let positive = is_positive((k + i) as u64, positive_pct);
                let mut b = (i.wrapping_mul(7919) + k) % names;
                // PDP: never its own advertisements (a JXSE remote query
                // does not reach the querier's own cache): the next name.
                // (With one edge, or one name, there is no other.)
                if opts.query_kind == QueryKind::Pdp
                    && n > 1
                    && names > 1
                    && publisher_of(&opts, b, n) == i
                {
                    b = (b + 1) % names;
                }
                let value = match (positive, opts.query_kind) {
                    (true, QueryKind::Lookup) => format!("item-{b}"),
                    (true, QueryKind::Pdp) => pdp_name(&opts, b),
                    (false, _) => format!("none-{i}-{k}"),
                };
                k += 1;
                {
                    let mut s = samples.lock().expect("samples");
                    s.issued += 1;
                    s.positive += u64::from(positive);
                }
                if in_flight.load(std::sync::atomic::Ordering::Relaxed) >= MAX_IN_FLIGHT_PER_EDGE {
                    if opts.query_kind == QueryKind::Lookup || positive {
                        let mut s = samples.lock().expect("samples");
                        s.lost += 1;
                        s.lost_why.in_flight_cap += 1;
                    }
                    continue;
                }
                in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (h, samples, in_flight) = (h.clone(), samples.clone(), in_flight.clone());
                let (edge, opts) = (edge.clone(), opts.clone());
                tasks.push(tokio::spawn(async move {
                    let t = Instant::now();
                    // Advertisements (PDP) or publishers (lookup) found;
                    // `None`: no answer in time.
                    let (got, why): (Option<usize>, Option<Lost>) = match opts.query_kind {
                        QueryKind::Lookup => {
                            match h.lookup("Adv", "Name", &value, opts.timeout).await {
                                Ok(v) => (Some(v.len()), None),
                                Err(juxta::rendezvous::RendezvousError::Timeout) => {
                                    (None, Some(Lost::NoAnswer))
                                }
                                Err(_) => (None, Some(Lost::Refused)),
                            }
                        }
                        QueryKind::Pdp => match pdp_query(&opts, &edge, &h, &value).await {
                            Some(Ok(f)) if !f.advertisements.is_empty() => {
                                (Some(f.advertisements.len()), None)
                            }
                            Some(Ok(f)) if f.answered == 0 => (None, Some(Lost::NoAnswer)),
                            Some(Ok(_)) => (None, Some(Lost::Empty)),
                            Some(Err(juxta::discovery::DiscoveryError::NoAnswer { .. })) => {
                                (None, Some(Lost::NoAnswer))
                            }
                            Some(Err(_)) => (None, Some(Lost::Refused)),
                            None => (None, Some(Lost::Unleased)),
                        },
                    };
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    let mut s = samples.lock().expect("samples");
                    // A lookup is answered for negatives too (with no
                    // publisher); a discovery query only when found.
                    let answered = match opts.query_kind {
                        QueryKind::Lookup => got.is_some(),
                        QueryKind::Pdp => positive && got.is_some(),
                    };
                    if opts.query_kind == QueryKind::Pdp && !positive && got.is_some() {
                        s.negative_answered += 1;
                    }
                    if answered {
                        s.latencies_ms.push(ms);
                        s.done_at_ms.push(start.elapsed().as_millis() as u64);
                        if positive {
                            s.positive_answered += 1;
                            let c = got.unwrap_or(0) as u64;
                            s.responses += c;
                            if c >= u64::from(opts.threshold) {
                                s.threshold_met += 1;
                            }
                        }
                    } else if opts.query_kind == QueryKind::Lookup || positive {
                        s.lost += 1;
                        match why.unwrap_or(Lost::Empty) {
                            Lost::NoAnswer => s.lost_why.no_answer += 1,
                            Lost::Unleased => s.lost_why.unleased += 1,
                            Lost::Refused => s.lost_why.refused += 1,
                            Lost::Empty => s.lost_why.empty += 1,
                        }
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        }));
    }
    for g in gens {
        let _ = g.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu1: f64 = rdvs.iter().filter_map(|r| r.usage()).map(|u| u.0).sum();
    let rss: f64 = rdvs.iter().filter_map(|r| r.usage()).map(|u| u.1).sum();
    let mut index_entries = 0u64;
    for r in rdvs.iter_mut() {
        index_entries = index_entries.saturating_add(r.index_entries().await.unwrap_or(0));
    }
    let mut s = std::mem::take(&mut *samples.lock().expect("samples"));
    s.latencies_ms.sort_by(|a, b| a.total_cmp(b));
    let answered = s.latencies_ms.len();
    let measured = duration.as_secs_f64();
    let bins = (duration.as_millis() / 100).max(1) as usize;
    let mut per_bin = vec![0f64; bins];
    for t in &s.done_at_ms {
        let b = (*t / 100) as usize;
        if b < bins {
            per_bin[b] += 1.0;
        }
    }
    let mean = per_bin.iter().sum::<f64>() / bins as f64;
    let var = per_bin.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / bins as f64;
    let (rt_mean, rt_stddev) = mean_stddev(&s.latencies_ms);
    // PDP loss counts positive queries only (a miss is never answered).
    let counted = match opts.query_kind {
        QueryKind::Lookup => s.issued,
        QueryKind::Pdp => s.positive,
    };
    let pct = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            a as f64 * 100.0 / b as f64
        }
    };
    RendezvousRow {
        scenario: "rendezvous",
        group: opts.group,
        query_kind: opts.query_kind,
        model: model.to_string(),
        edges: n,
        rendezvous: rdvs.len(),
        offered_qps: rate,
        positive_pct,
        query_space: opts.query_space,
        adv_type: opts.adv_type,
        threshold: opts.threshold,
        rdv_cache: opts.rdv_cache,
        timeout_ms: opts.timeout.as_millis() as u64,
        // PDP: over the generation window (the drain at the end waits for
        // the misses' timeouts, which JXSE never answers).
        queries_per_s: match opts.query_kind {
            QueryKind::Lookup => answered as f64 / elapsed.max(measured),
            QueryKind::Pdp => answered as f64 / measured.max(1e-9),
        },
        queries_issued: s.issued,
        positive_issued: s.positive,
        positive_answered: s.positive_answered,
        negative_answered: s.negative_answered,
        responses_mean: if s.positive_answered == 0 {
            0.0
        } else {
            s.responses as f64 / s.positive_answered as f64
        },
        threshold_met_pct: pct(s.threshold_met, s.positive_answered),
        response_ms_p50: crate::util::percentile(&s.latencies_ms, 0.5),
        response_ms_p99: crate::util::percentile(&s.latencies_ms, 0.99),
        loss_pct: pct(s.lost, counted),
        response_ms_mean: rt_mean,
        response_ms_stddev: rt_stddev,
        cv: if rt_mean > 0.0 {
            rt_stddev / rt_mean
        } else {
            0.0
        },
        completion_cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
        rdv_cpu_pct: (cpu1 - cpu0) * 100.0 / elapsed.max(1e-9),
        rdv_rss_mb: rss,
        rdv_index_entries: index_entries,
        lost: s.lost_why,
        error: None,
    }
}

/// Why one query was lost (see [`LostWhy`]).
#[derive(Debug, Clone, Copy)]
enum Lost {
    NoAnswer,
    Unleased,
    Refused,
    Empty,
}

/// Mean and (population) standard deviation; zeros for no samples.
fn mean_stddev(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_share_is_exact_and_spread() {
        for pct in [0u8, 1, 25, 50, 90, 100] {
            let hits = (0..1000).filter(|&k| is_positive(k, pct)).count();
            assert_eq!(hits, usize::from(pct) * 10, "pct {pct}");
        }
        // 50 %: every other lookup, not 50 in a row.
        let first: Vec<bool> = (0..4).map(|k| is_positive(k, 50)).collect();
        assert_eq!(first, [false, true, false, true]);
        // Out-of-range shares are capped, never overflow.
        assert!(is_positive(u64::MAX, 255));
        assert!(!is_positive(u64::MAX, 0));
    }

    #[test]
    fn combinations_that_cannot_be_honoured_are_refused_by_name() {
        let ok = RendezvousOptions::default();
        assert!(ok.validate().is_ok());
        assert!(RendezvousOptions::full().validate().is_ok());
        let cases: Vec<(RendezvousOptions, &str)> = vec![
            (
                RendezvousOptions {
                    query_space: 1024,
                    rdv_cache: 100,
                    ..ok.clone()
                },
                "--rdv-cache",
            ),
            (
                RendezvousOptions {
                    threshold: 0,
                    ..ok.clone()
                },
                "--threshold",
            ),
            (
                RendezvousOptions {
                    threshold: 4,
                    query_space: 2,
                    ..ok.clone()
                },
                "--threshold",
            ),
            (
                RendezvousOptions {
                    adv_type: AdvType::Peer,
                    query_space: 8,
                    edges: vec![4],
                    ..ok.clone()
                },
                "--adv-type peer",
            ),
            (
                RendezvousOptions {
                    query_kind: QueryKind::Lookup,
                    threshold: 2,
                    ..ok.clone()
                },
                "--threshold",
            ),
            (
                RendezvousOptions {
                    rates: vec![8, 0],
                    ..ok.clone()
                },
                "--rate",
            ),
            (
                RendezvousOptions {
                    edges: vec![0],
                    ..ok.clone()
                },
                "--edges",
            ),
            (
                RendezvousOptions {
                    positive_pct: 101,
                    ..ok.clone()
                },
                "--positive-pct",
            ),
        ];
        for (o, name) in cases {
            let e = o.validate().unwrap_err().to_string();
            assert!(e.contains(name), "{name}: {e}");
        }
        assert!(QueryKind::parse("walk").is_err());
        assert!(GroupScope::parse("world")
            .unwrap_err()
            .to_string()
            .contains("--group"));
        // The subgroup takes the other models.
        let sub = RendezvousOptions {
            group: GroupScope::Subgroup,
            models: vec!["srdi".into(), "centralized".into()],
            ..ok.clone()
        };
        assert!(sub.validate().is_ok());
        assert_eq!(AdvType::parse("group").unwrap(), AdvType::Group);
        // The peer type within its bound is accepted.
        let peer = RendezvousOptions {
            adv_type: AdvType::Peer,
            query_space: 4,
            edges: vec![4, 8],
            ..ok
        };
        assert!(peer.validate().is_ok());
    }

    #[test]
    fn the_full_sweep_is_the_thesis_one_and_bounded() {
        let f = RendezvousOptions::full();
        assert_eq!(f.models.len(), 3);
        assert_eq!(f.rendezvous, [1, 2, 4]);
        assert_eq!(f.edges, [4, 8, 16, 32]);
        assert!([2, 4, 8, 16].iter().all(|r| f.rates.contains(r)));
        assert!(f.rates.iter().any(|&r| r > 16));
        assert_eq!(f.query_space, 1024);
        let est = f.estimate();
        assert!(
            est > Duration::ZERO && est < Duration::from_secs(2 * 3600),
            "{est:?}"
        );
    }

    #[test]
    fn response_time_cv_is_stddev_over_mean() {
        let (m, sd) = mean_stddev(&[1.0, 3.0]);
        assert_eq!((m, sd), (2.0, 1.0));
        assert_eq!(mean_stddev(&[]), (0.0, 0.0));
    }
}
