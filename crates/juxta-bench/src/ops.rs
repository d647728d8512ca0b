//! The "typical peer operations" table of the performance model: how long
//! the everyday operations of a JXTA application take, timed in-process on
//! loopback, in two configurations:
//!
//! - `ad-hoc`: two peers, no rendezvous, the peers connected directly;
//! - `rendezvous`: a third peer R runs as a rendezvous and the two measured
//!   peers are its edges, with no direct connection between them at the
//!   start. Remote discovery goes to R, which forwards the query by its SRDI
//!   index to the publishing edge, which answers the querier directly (over
//!   the route the query carries). Pipe binding asks R too;
//! - `firewalled` (not run by default: `--configs firewalled`): as
//!   `rendezvous`, but R is also a relay and the edges do not listen (they
//!   cannot be dialled, as behind a firewall): they lease R as relay by
//!   default, `start` lasts until both leases (rendezvous and relay) are
//!   held, answers reach the querier through the relay, and
//!   `open-output-pipe` binds without naming a peer, as a user would;
//! - `http-rendezvous` (not run by default): the thesis' HTTP rendezvous:
//!   as `firewalled`, but the edges can only speak HTTP: they reach R's
//!   HTTP listener over JXTA's HTTP transport
//!   ([`juxta::PeerConfig::rendezvous_over_http`]) and lease it as
//!   rendezvous and relay over those sessions, so every answer and message
//!   for them comes back in their HTTP polls;
//! - `subgroup` (not run by default: `--configs subgroup`): two peers
//!   connected directly, operating inside subgroups of the Net peer group
//!   with their own services ([`juxta::group::Group`]): the operations of
//!   [`GROUP_OPERATIONS`]: `create-group` (password membership, JXSE's),
//!   `create-secure-group` (an Ed25519 group key and the creator's own
//!   certificate), `issue-certificate` (a member's credential),
//!   `join-group` (password), `join-group-certificate` (the certificate
//!   checked against the group key; every later group message is signed
//!   and verified), then, inside a certificate group, `publish`,
//!   `cached-pipe`, `remote-pipe` (discovery in the group's own cache
//!   partition), `open-input-pipe` and `open-output-pipe` (binding by the
//!   group's resolver).
//! - `subgroup-rendezvous` (not run by default): the `rendezvous`
//!   configuration inside a certificate subgroup with its own rendezvous
//!   ([`juxta::group::Group::start_rendezvous`]): a member M is the
//!   group's rendezvous, the two measured members lease it as edges
//!   (they are not connected to each other at the start), and the
//!   operations of [`GROUP_RDV_OPERATIONS`] go through M: `publish` (an
//!   SRDI entry in the group's scope, waited for at M as in
//!   `rendezvous`), `remote-pipe` (asked of M, which forwards the query by
//!   the group's index; every message sealed by its sender's member key),
//!   `cached-pipe`, `open-output-pipe` (binding through M). Compare its
//!   `remote-pipe` with `rendezvous`'s (the Net peer group's rendezvous).
//!
//! Operations (each repeated [`OpsOptions::runs`] times, median and p99 in
//! ms): `start` (a peer with an existing identity; in `rendezvous`, until
//! the edge is leased), `create-group`, `join-group` (password membership),
//! `open-input-pipe`, `cached-peers` and `cached-pipe` (local discovery),
//! `remote-peers` and `remote-pipe` (a discovery query and its answer),
//! `open-output-pipe` (pipe binding through the resolver) and `publish` (a
//! pipe advertisement into the local cache; on an edge this also queues its
//! SRDI entries for the rendezvous).
//!
//! In `rendezvous`, the SRDI push of a publish is asynchronous: the run
//! waits until R's index holds the new entries before the remote lookups, so
//! they time the query, not the push. `remote-peers` asks for the other
//! edge's peer advertisement by `PID` (republished once so that its entries
//! reach R). An operation that fails in `rendezvous` is reported as an
//! [`OpsFailure`] (no row) and the others are still measured.
//!
//! ```no_run
//! # async fn demo() -> Result<(), juxta_bench::BenchError> {
//! let rows = juxta_bench::ops::run(&juxta_bench::ops::OpsOptions::default(), |l| eprintln!("{l}")).await?;
//! assert_eq!(rows[0].operation, "start");
//! # Ok(()) }
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use juxta::proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
use juxta::rendezvous::{RendezvousConfig, RendezvousHandle};
use juxta::{Peer, PeerConfig};
use serde::Serialize;

use crate::net::FarRuntime;
use crate::util::{percentile, random_pipe_id};
use crate::BenchError;

/// The operations, in table order.
pub const OPERATIONS: [&str; 10] = [
    "start",
    "create-group",
    "join-group",
    "open-input-pipe",
    "cached-peers",
    "remote-peers",
    "cached-pipe",
    "remote-pipe",
    "open-output-pipe",
    "publish",
];

/// The operations of the `subgroup` configuration, in table order.
pub const GROUP_OPERATIONS: [&str; 10] = [
    "create-group",
    "create-secure-group",
    "issue-certificate",
    "join-group",
    "join-group-certificate",
    "open-input-pipe",
    "publish",
    "cached-pipe",
    "remote-pipe",
    "open-output-pipe",
];

/// The operations of the `subgroup-rendezvous` configuration, in table
/// order.
pub const GROUP_RDV_OPERATIONS: [&str; 5] = [
    "open-input-pipe",
    "publish",
    "remote-pipe",
    "cached-pipe",
    "open-output-pipe",
];

/// The configurations, in run order.
pub const CONFIGS: [&str; 6] = [
    "ad-hoc",
    "rendezvous",
    "firewalled",
    "http-rendezvous",
    "subgroup",
    "subgroup-rendezvous",
];

/// The configurations run by default.
pub const DEFAULT_CONFIGS: [&str; 2] = ["ad-hoc", "rendezvous"];

/// The configurations that run under a network profile (`--net`): their
/// far-side peers (in `ad-hoc` the publisher, in `rendezvous` and
/// `firewalled` and `http-rendezvous` the rendezvous and the publishing
/// edge) run in the responder namespace, the measured querier in the
/// client's.
pub const NET_CONFIGS: [&str; 4] = ["ad-hoc", "rendezvous", "firewalled", "http-rendezvous"];

/// How long a remote operation may take before it counts as failed.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for a rendezvous' SRDI index to show a publish.
const INDEX_WAIT: Duration = Duration::from_secs(5);

/// Errors specific to the operations scenario.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// Discovery failed.
    #[error(transparent)]
    Discovery(#[from] juxta::discovery::DiscoveryError),
    /// A group operation failed.
    #[error(transparent)]
    Group(#[from] juxta::group::GroupError),
    /// An operation returned nothing where something was expected.
    #[error("{0}: nothing found")]
    NotFound(&'static str),
    /// A configuration name that does not exist.
    #[error("unknown ops configuration {0:?} (known: ad-hoc, rendezvous, firewalled, http-rendezvous, subgroup, subgroup-rendezvous)")]
    UnknownConfig(String),
    /// No configuration to run.
    #[error("no ops configuration given (known: ad-hoc, rendezvous, firewalled, http-rendezvous, subgroup, subgroup-rendezvous)")]
    NoConfig,
    /// An edge did not lease its rendezvous in time.
    #[error("{0}: not leased by the rendezvous within {1:?}")]
    NotLeased(&'static str, Duration),
    /// An edge that cannot be dialled did not lease its relay in time.
    #[error("{0}: no relay lease within {1:?}")]
    NotRelayed(&'static str, Duration),
}

/// Checks a configuration name; returns its canonical spelling.
///
/// ```
/// assert_eq!(juxta_bench::ops::parse_config("rendezvous").unwrap(), "rendezvous");
/// assert!(juxta_bench::ops::parse_config("mesh").is_err());
/// ```
pub fn parse_config(s: &str) -> Result<&'static str, BenchError> {
    CONFIGS
        .iter()
        .find(|c| **c == s.trim())
        .copied()
        .ok_or_else(|| OpsError::UnknownConfig(s.to_string()).into())
}

/// Options of the scenario.
#[derive(Debug, Clone, Serialize)]
pub struct OpsOptions {
    /// Repetitions of each operation (default 20).
    pub runs: usize,
    /// RSA key size of the peers' identities (default 1024).
    pub key_bits: usize,
    /// Configurations to measure, in order (default:
    /// [`DEFAULT_CONFIGS`]; any of [`CONFIGS`]).
    pub configs: Vec<String>,
    /// Cache sizes for the start-up vs cache size rows (the thesis' Fig.
    /// 6.1, [`crate::cache_scale`]); empty: none.
    pub cache_sizes: Vec<u64>,
    /// Network profile. Under one, the configurations of [`NET_CONFIGS`]
    /// run their far-side peers on a thread of their own in the responder
    /// namespace (`ad-hoc`: the publisher; the rendezvous configurations: the
    /// rendezvous and the publishing edge) and the measured querier, and
    /// the edges `start` times, in the client namespace (this thread, which
    /// must belong to a current-thread runtime); the others are refused
    /// with [`BenchError::NetUnsupported`]. Operations on a far peer are
    /// timed on its side.
    pub net: crate::net::Net,
}

impl Default for OpsOptions {
    fn default() -> Self {
        OpsOptions {
            runs: 20,
            key_bits: 1024,
            configs: DEFAULT_CONFIGS.iter().map(|c| c.to_string()).collect(),
            cache_sizes: Vec::new(),
            net: crate::net::Net::loopback(),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OpsRow {
    /// Always `ops`.
    pub scenario: String,
    /// One of [`OPERATIONS`] (of [`GROUP_OPERATIONS`] in `subgroup`).
    pub operation: String,
    /// The configuration (one of [`CONFIGS`]).
    pub config: String,
    /// Median, ms.
    pub ms_median: f64,
    /// 99th percentile, ms.
    pub ms_p99: f64,
    /// Repetitions measured.
    pub runs: usize,
}

/// An operation that could not be measured in a configuration.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OpsFailure {
    /// The configuration.
    pub config: String,
    /// The operation.
    pub operation: String,
    /// Why (the first failure; the operation is not retried after it).
    pub reason: String,
}

/// Everything a run produced.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpsReport {
    /// One row per measured operation and configuration.
    pub rows: Vec<OpsRow>,
    /// The operations that failed (no row).
    pub failures: Vec<OpsFailure>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pipe(name: String) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(random_pipe_id(), PipeType::Unicast);
    a.name = Some(name);
    a
}

/// Samples per operation, and the first failure of each.
struct Tally {
    config: &'static str,
    ops: &'static [&'static str],
    samples: Vec<Vec<f64>>,
    failed: Vec<Option<String>>,
}

impl Tally {
    fn new(config: &'static str, runs: usize) -> Tally {
        Tally::with_ops(config, runs, &OPERATIONS)
    }

    fn with_ops(config: &'static str, runs: usize, ops: &'static [&'static str]) -> Tally {
        Tally {
            config,
            ops,
            samples: vec![Vec::with_capacity(runs); ops.len()],
            failed: vec![None; ops.len()],
        }
    }

    fn idx(&self, op: &str) -> usize {
        self.ops.iter().position(|o| *o == op).expect("operation")
    }

    fn add(&mut self, op: &str, d: Duration) {
        let i = self.idx(op);
        self.samples[i].push(ms(d));
    }

    /// Whether `op` is still measured (it has not failed).
    fn live(&self, op: &str) -> bool {
        self.failed[self.idx(op)].is_none()
    }

    fn fail(&mut self, op: &str, why: impl std::fmt::Display, progress: &mut impl FnMut(&str)) {
        let i = self.idx(op);
        if self.failed[i].is_none() {
            let why = why.to_string();
            progress(&format!(
                "ops: {}: {op} FAILED, not measured: {why}",
                self.config
            ));
            self.failed[i] = Some(why);
        }
    }

    fn finish(self, report: &mut OpsReport) {
        for ((op, mut s), f) in self.ops.iter().zip(self.samples).zip(self.failed) {
            if let Some(reason) = f {
                report.failures.push(OpsFailure {
                    config: self.config.into(),
                    operation: op.to_string(),
                    reason,
                });
                continue;
            }
            s.sort_by(f64::total_cmp);
            report.rows.push(OpsRow {
                scenario: "ops".into(),
                operation: op.to_string(),
                config: self.config.into(),
                ms_median: percentile(&s, 0.5),
                ms_p99: percentile(&s, 0.99),
                runs: s.len(),
            });
        }
    }
}

/// A bench peer. Its per-peer query budget is raised far above what the
/// scenario's one querier sends: the scenario times operations back to
/// back, 3-4 resolver queries per repetition, and on loopback `--full`'s
/// 100 repetitions ask more than the default budget allows (200 queries/s
/// sustained, bursts of 100), so a query was dropped as a flood and its
/// operation failed with "nothing found". The thesis timed operations, not
/// a peer's flood protection (tested in `crates/juxta/tests/discovery.rs`).
fn peer_cfg(dir: &Path, name: &str, key_bits: usize, listen: Option<IpAddr>) -> PeerConfig {
    let mut c = PeerConfig::new(dir.join(name))
        .key_bits(key_bits)
        .discovery(juxta::discovery::DiscoveryConfig {
            query_rate: 1_000_000.0,
            query_burst: 1_000_000,
            ..Default::default()
        });
    if let Some(ip) = listen {
        c = c.listen(SocketAddr::new(ip, 0));
    }
    c
}

/// 127.0.0.1: where peers of the configurations that stay on loopback
/// listen.
const LOOPBACK: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

/// Runs the scenario and returns one row per operation and configuration,
/// configurations in [`OpsOptions::configs`] order, operations in
/// [`OPERATIONS`] order. Operations that failed in `rendezvous` have no
/// row (see [`run_report`] for why).
pub async fn run(opts: &OpsOptions, progress: impl FnMut(&str)) -> Result<Vec<OpsRow>, BenchError> {
    Ok(run_report(opts, progress).await?.rows)
}

/// Like [`run`], and also says which operations failed and why.
pub async fn run_report(
    opts: &OpsOptions,
    progress: impl FnMut(&str),
) -> Result<OpsReport, BenchError> {
    let configs = opts
        .configs
        .iter()
        .map(|c| parse_config(c))
        .collect::<Result<Vec<_>, _>>()?;
    if configs.is_empty() {
        return Err(OpsError::NoConfig.into());
    }
    if !opts.net.is_local() {
        if let Some(c) = configs.iter().find(|c| !NET_CONFIGS.contains(c)) {
            return Err(BenchError::NetUnsupported {
                profile: opts.net.profile.name().into(),
                scenario: format!("ops --configs {c}"),
                reason: format!(
                    "its group members all run on one side of the link (under a profile: --configs {})",
                    NET_CONFIGS.join(",")
                ),
            });
        }
        return crate::net::scoped(&opts.net, run_configs(opts, configs, progress)).await;
    }
    run_configs(opts, configs, progress).await
}

/// Runs `configs` (checked) where this thread is.
async fn run_configs(
    opts: &OpsOptions,
    configs: Vec<&'static str>,
    mut progress: impl FnMut(&str),
) -> Result<OpsReport, BenchError> {
    let runs = opts.runs.max(1);
    let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating a temporary directory".into(),
        source,
    })?;
    let mut report = OpsReport::default();
    for config in configs {
        let first = report.rows.len();
        let t = if config == "rendezvous" {
            rendezvous(
                opts,
                runs,
                &dir.path().join("rdv"),
                Reach::Tcp,
                &mut progress,
            )
            .await?
        } else if config == "firewalled" {
            rendezvous(
                opts,
                runs,
                &dir.path().join("fw"),
                Reach::Firewalled,
                &mut progress,
            )
            .await?
        } else if config == "http-rendezvous" {
            rendezvous(
                opts,
                runs,
                &dir.path().join("http"),
                Reach::Http,
                &mut progress,
            )
            .await?
        } else if config == "subgroup" {
            subgroup(opts, runs, &dir.path().join("sub"), &mut progress).await?
        } else if config == "subgroup-rendezvous" {
            subgroup_rendezvous(opts, runs, &dir.path().join("sub-rdv"), &mut progress).await?
        } else {
            ad_hoc(opts, runs, &dir.path().join("ad-hoc"), &mut progress).await?
        };
        t.finish(&mut report);
        for r in &report.rows[first..] {
            progress(&format!(
                "ops: {:<10} {:<16} median {:>8.3} ms  p99 {:>8.3} ms",
                r.config, r.operation, r.ms_median, r.ms_p99
            ));
        }
    }
    Ok(report)
}

/// Two peers connected directly: every failure fails the run. Under a
/// network profile, the publisher `a` runs on the far side of the link.
async fn ad_hoc(
    opts: &OpsOptions,
    runs: usize,
    dir: &Path,
    progress: &mut impl FnMut(&str),
) -> Result<Tally, BenchError> {
    let cfg = |name: &str, listen: Option<IpAddr>| peer_cfg(dir, name, opts.key_bits, listen);
    let mut t = Tally::new("ad-hoc", runs);
    let far = FarRuntime::start(&opts.net).await?;

    progress("ops: ad-hoc: start");
    // The identity is created once; `start` loads it.
    drop(Peer::start(cfg("s", None)).await?);
    for _ in 0..runs {
        let t0 = Instant::now();
        let p = Peer::start(cfg("s", None)).await?;
        t.add("start", t0.elapsed());
        drop(p);
    }

    progress(&format!(
        "ops: ad-hoc: two peers ({})",
        if opts.net.is_local() {
            "on loopback".to_string()
        } else {
            format!("across the {} link", opts.net.profile)
        }
    ));
    let a = Arc::new(
        far.run(Peer::start(cfg("a", Some(opts.net.responder_ip))))
            .await??,
    );
    let b = Peer::start(cfg("b", None)).await?;
    let addr = a
        .local_addr()
        .ok_or(OpsError::NotFound("listen address"))
        .map_err(BenchError::from)?;
    let to_a = b.connect(addr).await?;
    to_a.wait_compact(OP_TIMEOUT).await;
    let aid = a.peer_id();
    let db = b.discovery();

    progress("ops: ad-hoc: groups");
    for i in 0..runs {
        let (d, g) = far
            .run(timed({
                let a = a.clone();
                async move {
                    a.groups()
                        .create(&format!("ops-group-{i}"), Some("pw"))
                        .await
                }
            }))
            .await?;
        let g = g.map_err(OpsError::from)?;
        t.add("create-group", d);
        let t0 = Instant::now();
        b.groups()
            .join(&g.adv, Some("pw"))
            .await
            .map_err(OpsError::from)?;
        t.add("join-group", t0.elapsed());
        b.groups().leave(&g.id).map_err(OpsError::from)?;
    }

    progress("ops: ad-hoc: pipes and discovery");
    let mut inputs = Vec::with_capacity(runs);
    for i in 0..runs {
        let adv = pipe(format!("ops-pipe-{i}"));
        let (d, input) = far
            .run(timed({
                let (a, adv) = (a.clone(), adv.clone());
                async move { a.pipes().create_input_pipe(&adv) }
            }))
            .await?;
        inputs.push(input?);
        t.add("open-input-pipe", d);

        let (d, r) = far
            .run(timed({
                let (a, adv) = (a.clone(), Advertisement::Pipe(adv.clone()));
                async move { a.discovery().publish(&adv).await }
            }))
            .await?;
        r.map_err(OpsError::from)?;
        t.add("publish", d);

        let t0 = Instant::now();
        let found = db
            .get_remote(AdvKind::Peer, None, None, 10, Some(aid), OP_TIMEOUT)
            .await
            .map_err(OpsError::from)?;
        t.add("remote-peers", t0.elapsed());
        if found.is_empty() {
            return Err(OpsError::NotFound("remote-peers").into());
        }

        let t0 = Instant::now();
        let found = db
            .get_local(AdvKind::Peer, None, None, 10)
            .await
            .map_err(OpsError::from)?;
        t.add("cached-peers", t0.elapsed());
        if found.is_empty() {
            return Err(OpsError::NotFound("cached-peers").into());
        }

        find_and_bind(&mut t, &db, &b.pipes(), &adv, aid, None).await?;
    }
    // The far peer and its pipes end on their own side.
    far.run(async move { drop((inputs, a)) }).await?;
    drop(b);
    Ok(t)
}

/// Runs `f` and says how long it took (timed where it runs: on the far
/// side, the hand-over between the two threads is not counted).
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (Duration, T) {
    let t0 = Instant::now();
    let v = f.await;
    (t0.elapsed(), v)
}

/// Finds the pipe advertisement `adv` names through `db`, asking `aid`
/// (`remote-pipe`), then in the cache (`cached-pipe`), and binds an output
/// pipe to it through `aid` (`open-output-pipe`): the same steps in the Net
/// peer group, in a subgroup and through a subgroup's rendezvous. `holder`:
/// the peer the pipe must bind to, when it is not `aid`.
async fn find_and_bind(
    t: &mut Tally,
    db: &juxta::discovery::DiscoveryService,
    pipes: &juxta::pipe::PipeService,
    adv: &PipeAdvertisement,
    aid: juxta::proto::id::PeerId,
    holder: Option<juxta::proto::id::PeerId>,
) -> Result<(), BenchError> {
    let name = adv.name.clone().unwrap_or_default();
    let t0 = Instant::now();
    let found = db
        .get_remote(
            AdvKind::Adv,
            Some("Name"),
            Some(&name),
            1,
            Some(aid),
            OP_TIMEOUT,
        )
        .await
        .map_err(OpsError::from)?;
    t.add("remote-pipe", t0.elapsed());
    if found.is_empty() {
        return Err(OpsError::NotFound("remote-pipe").into());
    }

    let t0 = Instant::now();
    let found = db
        .get_local(AdvKind::Adv, Some("Name"), Some(&name), 1)
        .await
        .map_err(OpsError::from)?;
    t.add("cached-pipe", t0.elapsed());
    let Some(Advertisement::Pipe(found)) = found.into_iter().next() else {
        return Err(OpsError::NotFound("cached-pipe").into());
    };

    let t0 = Instant::now();
    let out = pipes.create_output_pipe(&found, &[aid], OP_TIMEOUT).await?;
    t.add("open-output-pipe", t0.elapsed());
    if holder.is_some_and(|h| out.remote() != Some(h)) {
        return Err(OpsError::NotFound("open-output-pipe").into());
    }
    drop(out);
    Ok(())
}

/// Two peers connected directly, operating inside subgroups: every
/// failure fails the run.
async fn subgroup(
    opts: &OpsOptions,
    runs: usize,
    dir: &Path,
    progress: &mut impl FnMut(&str),
) -> Result<Tally, BenchError> {
    const VALIDITY: Duration = Duration::from_secs(3600);
    let cfg = |name: &str, listen: bool| {
        peer_cfg(
            dir,
            name,
            opts.key_bits,
            if listen { LOOPBACK } else { None },
        )
    };
    let mut t = Tally::with_ops("subgroup", runs, &GROUP_OPERATIONS);
    progress("ops: subgroup: two peers on loopback");
    let a = Peer::start(cfg("a", true)).await?;
    let b = Peer::start(cfg("b", false)).await?;
    let addr = a
        .local_addr()
        .ok_or(OpsError::NotFound("listen address"))
        .map_err(BenchError::from)?;
    let to_a = b.connect(addr).await?;
    to_a.wait_compact(OP_TIMEOUT).await;
    let aid = a.peer_id();

    progress("ops: subgroup: create and join");
    for i in 0..runs {
        let t0 = Instant::now();
        let g = a
            .groups()
            .create(&format!("ops-sub-pw-{i}"), Some("pw"))
            .await
            .map_err(OpsError::from)?;
        t.add("create-group", t0.elapsed());
        let t0 = Instant::now();
        let bg = b
            .groups()
            .join(&g.adv, Some("pw"))
            .await
            .map_err(OpsError::from)?;
        t.add("join-group", t0.elapsed());
        bg.leave().map_err(OpsError::from)?;
        g.leave().map_err(OpsError::from)?;

        let t0 = Instant::now();
        let g = a
            .groups()
            .create_secure(&format!("ops-sub-cert-{i}"), VALIDITY)
            .await
            .map_err(OpsError::from)?;
        t.add("create-secure-group", t0.elapsed());
        let t0 = Instant::now();
        let cred = g
            .issue(b.peer_id(), VALIDITY, false)
            .map_err(OpsError::from)?;
        t.add("issue-certificate", t0.elapsed());
        let t0 = Instant::now();
        let bg = b
            .groups()
            .join_with_certificate(&g.adv, &cred)
            .await
            .map_err(OpsError::from)?;
        t.add("join-group-certificate", t0.elapsed());
        bg.leave().map_err(OpsError::from)?;
        g.leave().map_err(OpsError::from)?;
    }

    progress("ops: subgroup: pipes and discovery in a certificate group");
    let ag = a
        .groups()
        .create_secure("ops-sub-work", VALIDITY)
        .await
        .map_err(OpsError::from)?;
    let cred = ag
        .issue(b.peer_id(), VALIDITY, false)
        .map_err(OpsError::from)?;
    let bg = b
        .groups()
        .join_with_certificate(&ag.adv, &cred)
        .await
        .map_err(OpsError::from)?;
    let (da, db) = (ag.discovery(), bg.discovery());
    let mut inputs = Vec::with_capacity(runs);
    for i in 0..runs {
        let adv = pipe(format!("ops-sub-pipe-{i}"));
        let t0 = Instant::now();
        inputs.push(ag.pipes().create_input_pipe(&adv)?);
        t.add("open-input-pipe", t0.elapsed());

        let t0 = Instant::now();
        da.publish(&Advertisement::Pipe(adv.clone()))
            .await
            .map_err(OpsError::from)?;
        t.add("publish", t0.elapsed());

        find_and_bind(&mut t, &db, &bg.pipes(), &adv, aid, None).await?;
    }
    drop(inputs);
    Ok(t)
}

/// Three members of a certificate subgroup: M its rendezvous, A and B
/// edges leasing M (not connected to each other at the start); discovery
/// and binding in the group go through M. Every failure fails the run.
async fn subgroup_rendezvous(
    opts: &OpsOptions,
    runs: usize,
    dir: &Path,
    progress: &mut impl FnMut(&str),
) -> Result<Tally, BenchError> {
    let cfg = |name: &str| peer_cfg(dir, name, opts.key_bits, LOOPBACK);
    let mut t = Tally::with_ops("subgroup-rendezvous", runs, &GROUP_RDV_OPERATIONS);
    progress("ops: subgroup-rendezvous: the group's rendezvous and two edges on loopback");
    let m = Peer::start(cfg("m")).await?;
    let a = Peer::start(cfg("a")).await?;
    let b = Peer::start(cfg("b")).await?;
    let maddr = m
        .local_addr()
        .ok_or(OpsError::NotFound("listen address"))
        .map_err(BenchError::from)?;
    // The shared subgroup set-up (also `bench rendezvous --group subgroup`).
    let mg = crate::subgroup::create(&m, "ops-sub-rdv").await?;
    let mh = mg
        .start_rendezvous(RendezvousConfig::rendezvous())
        .map_err(OpsError::from)?;
    let mut members = Vec::new();
    for p in [&a, &b] {
        let (g, _) = crate::subgroup::join_member(
            &mg,
            p,
            RendezvousConfig::edge(vec![maddr]),
            Some(OP_TIMEOUT),
        )
        .await?;
        members.push(g);
    }
    let (ag, bg) = (&members[0], &members[1]);
    let (da, db) = (ag.discovery(), bg.discovery());
    let mid = m.peer_id();
    let aid = a.peer_id();

    progress("ops: subgroup-rendezvous: pipes and discovery through the group's rendezvous");
    let mut inputs = Vec::with_capacity(runs);
    for i in 0..runs {
        let adv = pipe(format!("ops-sub-rdv-pipe-{i}"));
        let before = mh.status().index_entries;
        let t0 = Instant::now();
        inputs.push(ag.pipes().create_input_pipe(&adv)?);
        t.add("open-input-pipe", t0.elapsed());
        wait_index(&mh, before, 1, progress).await;

        let before = mh.status().index_entries;
        let doc = Advertisement::Pipe(adv.clone());
        let want = doc
            .index_fields()
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .count()
            .max(1);
        let t0 = Instant::now();
        da.publish(&doc).await.map_err(OpsError::from)?;
        t.add("publish", t0.elapsed());
        wait_index(&mh, before, want, progress).await;

        find_and_bind(&mut t, &db, &bg.pipes(), &adv, mid, Some(aid)).await?;
    }
    drop(inputs);
    drop(members);
    drop((a, b, m));
    Ok(t)
}

/// How the edges of the rendezvous configurations reach the rendezvous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// They listen on TCP and dial it (`rendezvous`).
    Tcp,
    /// They do not listen and lease it as relay too (`firewalled`).
    Firewalled,
    /// As `Firewalled`, over JXTA's HTTP transport (`http-rendezvous`).
    Http,
}

impl Reach {
    /// The configuration's name.
    fn config(self) -> &'static str {
        match self {
            Reach::Tcp => "rendezvous",
            Reach::Firewalled => "firewalled",
            Reach::Http => "http-rendezvous",
        }
    }

    /// Whether the edges cannot be dialled (they lease a relay).
    fn relayed(self) -> bool {
        self != Reach::Tcp
    }
}

/// Starts an edge of the rendezvous at `seed` and waits until it is
/// leased; an edge that does not listen ([`Reach::relayed`]) is also waited
/// for until it holds its (default) relay lease at `seed`.
async fn start_edge(
    dir: &Path,
    name: &str,
    key_bits: usize,
    seed: SocketAddr,
    reach: Reach,
    ip: IpAddr,
) -> Result<Result<Peer, OpsError>, BenchError> {
    let listen = (!reach.relayed()).then_some(ip);
    let cfg = peer_cfg(dir, name, key_bits, listen)
        .rendezvous(RendezvousConfig::edge(vec![seed]))
        .rendezvous_over_http(reach == Reach::Http);
    let p = Peer::start(cfg).await?;
    let leased = match p.rendezvous() {
        Some(h) => h.wait_leased(OP_TIMEOUT).await.is_some(),
        None => false,
    };
    if !leased {
        return Ok(Err(OpsError::NotLeased("edge", OP_TIMEOUT)));
    }
    if reach.relayed() {
        let relayed = match p.relay() {
            Some(h) => h.wait_leased(OP_TIMEOUT).await.is_some(),
            None => false,
        };
        if !relayed {
            return Ok(Err(OpsError::NotRelayed("edge", OP_TIMEOUT)));
        }
    }
    Ok(Ok(p))
}

/// Publishes `adv` on `peer` (which runs on `far`) and waits until the
/// rendezvous `r` indexed its SRDI entries (or [`INDEX_WAIT`] passed: said
/// on `progress`). Returns how long the publish took.
async fn publish_indexed(
    far: &FarRuntime,
    peer: &Arc<Peer>,
    r: &RendezvousHandle,
    adv: &Advertisement,
    progress: &mut impl FnMut(&str),
) -> Result<Duration, BenchError> {
    let before = r.status().index_entries;
    // The entries the edge pushes: its non-empty indexed fields.
    let want = adv
        .index_fields()
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .count()
        .max(1);
    let (took, res) = far
        .run(timed({
            let (peer, adv) = (peer.clone(), adv.clone());
            async move { peer.discovery().publish(&adv).await }
        }))
        .await?;
    res.map_err(OpsError::from)?;
    wait_index(r, before, want, progress).await;
    Ok(took)
}

/// Waits until the rendezvous `r` indexes `want` more entries than
/// `before` (or [`INDEX_WAIT`] passed: said on `progress`).
async fn wait_index(
    r: &RendezvousHandle,
    before: usize,
    want: usize,
    progress: &mut impl FnMut(&str),
) {
    let deadline = Instant::now() + INDEX_WAIT;
    while r.status().index_entries < before + want {
        if Instant::now() >= deadline {
            progress(&format!(
                "ops: rendezvous: index grew from {before} to {} within {INDEX_WAIT:?}, {want} entries expected",
                r.status().index_entries
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Two edges of a rendezvous: operation failures are recorded, set-up
/// failures (the rendezvous, the edges' leases) fail the run.
/// Edges that do not listen ([`Reach::relayed`]): the rendezvous is also
/// a relay (configurations `firewalled`, `http-rendezvous`).
async fn rendezvous(
    opts: &OpsOptions,
    runs: usize,
    dir: &Path,
    reach: Reach,
    progress: &mut impl FnMut(&str),
) -> Result<Tally, BenchError> {
    let kb = opts.key_bits;
    let config = reach.config();
    let firewalled = reach.relayed();
    let mut t = Tally::new(config, runs);

    // Under a network profile the rendezvous and the publishing edge `a`
    // run on the far side of the link, the started edges and the querier
    // `b` here.
    let far = FarRuntime::start(&opts.net).await?;
    let (near_ip, far_ip) = (opts.net.client_ip(), opts.net.responder_ip);

    progress(&format!("ops: {config}: rendezvous peer"));
    // Room for the edges started by `start` (their leases outlive them).
    let mut rcfg = peer_cfg(dir, "r", kb, Some(far_ip))
        .rendezvous(RendezvousConfig::rendezvous().max_clients(runs + 8));
    if firewalled {
        rcfg = rcfg.relay(juxta::relay::RelayConfig::server().max_clients(runs + 8));
    }
    if reach == Reach::Http {
        rcfg = rcfg.http_listen(SocketAddr::new(far_ip, 0));
    }
    let r = far.run(Peer::start(rcfg)).await??;
    let r_addr = if reach == Reach::Http {
        r.http_local_addr()
            .ok_or(OpsError::NotFound("rendezvous HTTP listen address"))?
    } else {
        r.local_addr()
            .ok_or(OpsError::NotFound("rendezvous listen address"))?
    };
    let rid = r.peer_id();
    let rh = r
        .rendezvous()
        .ok_or(OpsError::NotFound("rendezvous service"))?
        .clone();

    progress(&format!("ops: {config}: start (until leased)"));
    // One identity per start, created beforehand (`start` loads it): a
    // restarted edge with the same peer ID is not leased again while the
    // rendezvous still holds its previous lease.
    for i in 0..runs {
        drop(Peer::start(peer_cfg(dir, &format!("s{i}"), kb, None)).await?);
    }
    for i in 0..runs {
        let t0 = Instant::now();
        match start_edge(dir, &format!("s{i}"), kb, r_addr, reach, near_ip).await? {
            Ok(p) => {
                t.add("start", t0.elapsed());
                drop(p);
            }
            Err(e) => {
                t.fail("start", e, progress);
                break;
            }
        }
    }

    progress(&format!("ops: {config}: two edges"));
    let a = {
        let d = dir.to_path_buf();
        Arc::new(
            far.run(async move { start_edge(&d, "a", kb, r_addr, reach, far_ip).await })
                .await???,
        )
    };
    let b = start_edge(dir, "b", kb, r_addr, reach, near_ip).await??;
    let aid = a.peer_id();
    let db = b.discovery();

    progress(&format!("ops: {config}: groups"));
    for i in 0..runs {
        let (d, g) = far
            .run(timed({
                let a = a.clone();
                async move {
                    a.groups()
                        .create(&format!("ops-rdv-group-{i}"), Some("pw"))
                        .await
                }
            }))
            .await?;
        let g = match g {
            Ok(g) => g,
            Err(e) => {
                t.fail("create-group", e, progress);
                t.fail("join-group", "no group created", progress);
                break;
            }
        };
        t.add("create-group", d);
        if !t.live("join-group") {
            continue;
        }
        let t0 = Instant::now();
        match b.groups().join(&g.adv, Some("pw")).await {
            Ok(_) => {
                t.add("join-group", t0.elapsed());
                b.groups().leave(&g.id).map_err(OpsError::from)?;
            }
            Err(e) => t.fail("join-group", e, progress),
        }
    }

    // A's own peer advertisement is in its cache since start, without SRDI
    // entries: published again so that R indexes it.
    let own = far
        .run({
            let a = a.clone();
            async move {
                a.discovery()
                    .get_local(AdvKind::Peer, Some("PID"), Some(&aid.to_string()), 1)
                    .await
            }
        })
        .await?
        .map_err(OpsError::from)?;
    let own = own
        .into_iter()
        .next()
        .ok_or(OpsError::NotFound("own peer advertisement"))?;
    publish_indexed(&far, &a, &rh, &own, progress).await?;
    let aid_text = aid.to_string();

    progress(&format!("ops: {config}: pipes and discovery"));
    let mut inputs = Vec::with_capacity(runs);
    for i in 0..runs {
        let adv = pipe(format!("ops-rdv-pipe-{i}"));
        let before = rh.status().index_entries;
        let (d, input) = far
            .run(timed({
                let (a, adv) = (a.clone(), adv.clone());
                async move { a.pipes().create_input_pipe(&adv) }
            }))
            .await?;
        match input {
            Ok(p) => {
                t.add("open-input-pipe", d);
                inputs.push(p);
                // The input pipe's SRDI entry (pipe type, Id), pushed
                // asynchronously: indexed before binding is timed.
                wait_index(&rh, before, 1, progress).await;
            }
            Err(e) => t.fail("open-input-pipe", e, progress),
        }

        match publish_indexed(&far, &a, &rh, &Advertisement::Pipe(adv.clone()), progress).await {
            Ok(d) => t.add("publish", d),
            Err(e) => t.fail("publish", e, progress),
        }

        if t.live("remote-peers") {
            let t0 = Instant::now();
            let r = db
                .get_remote(
                    AdvKind::Peer,
                    Some("PID"),
                    Some(&aid_text),
                    1,
                    Some(rid),
                    OP_TIMEOUT,
                )
                .await;
            let d = t0.elapsed();
            match r {
                Ok(f)
                    if f.iter()
                        .any(|x| matches!(x, Advertisement::Peer(p) if p.peer_id == aid)) =>
                {
                    t.add("remote-peers", d)
                }
                Ok(_) => t.fail(
                    "remote-peers",
                    "the other edge's peer advertisement was not found through the rendezvous",
                    progress,
                ),
                Err(e) => t.fail("remote-peers", e, progress),
            }
        }

        let t0 = Instant::now();
        match db.get_local(AdvKind::Peer, None, None, 10).await {
            Ok(f) if !f.is_empty() => t.add("cached-peers", t0.elapsed()),
            Ok(_) => t.fail("cached-peers", "no peer advertisement cached", progress),
            Err(e) => t.fail("cached-peers", e, progress),
        }

        let name = adv.name.clone().unwrap_or_default();
        let mut found_remote = false;
        if t.live("remote-pipe") {
            let t0 = Instant::now();
            let r = db
                .get_remote(
                    AdvKind::Adv,
                    Some("Name"),
                    Some(&name),
                    1,
                    Some(rid),
                    OP_TIMEOUT,
                )
                .await;
            let d = t0.elapsed();
            match r {
                Ok(f) if !f.is_empty() => {
                    t.add("remote-pipe", d);
                    found_remote = true;
                }
                Ok(_) => t.fail(
                    "remote-pipe",
                    "the pipe advertisement was not found through the rendezvous",
                    progress,
                ),
                Err(e) => t.fail("remote-pipe", e, progress),
            }
        }

        // Only meaningful once remote-pipe brought the advertisement here.
        let mut target = adv.clone();
        if found_remote && t.live("cached-pipe") {
            let t0 = Instant::now();
            match db
                .get_local(AdvKind::Adv, Some("Name"), Some(&name), 1)
                .await
            {
                Ok(f) => match f.into_iter().next() {
                    Some(Advertisement::Pipe(p)) => {
                        t.add("cached-pipe", t0.elapsed());
                        target = p;
                    }
                    _ => t.fail(
                        "cached-pipe",
                        "the pipe advertisement found remotely is not cached",
                        progress,
                    ),
                },
                Err(e) => t.fail("cached-pipe", e, progress),
            }
        } else if !found_remote {
            t.fail(
                "cached-pipe",
                "remote-pipe found nothing to cache",
                progress,
            );
        }

        if t.live("open-output-pipe") {
            // Bound through the rendezvous: the query goes to R only (a
            // firewalled edge is connected to R only and names no peer,
            // as a user would; A's answer comes through the relay).
            let named = if firewalled { vec![] } else { vec![rid] };
            let t0 = Instant::now();
            match b
                .pipes()
                .create_output_pipe(&target, &named, OP_TIMEOUT)
                .await
            {
                Ok(out) => {
                    t.add("open-output-pipe", t0.elapsed());
                    drop(out);
                }
                Err(e) => t.fail("open-output-pipe", e, progress),
            }
        }
    }
    drop(b);
    // The far peers and the pipes end on their own side.
    far.run(async move { drop((inputs, a, r)) }).await?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_measured_in_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let opts = OpsOptions {
            runs: 2,
            key_bits: 1024,
            configs: vec!["ad-hoc".into()],
            ..OpsOptions::default()
        };
        let rows = rt.block_on(run(&opts, |_| {})).unwrap();
        let ops: Vec<&str> = rows.iter().map(|r| r.operation.as_str()).collect();
        assert_eq!(ops, OPERATIONS);
        for r in &rows {
            assert_eq!(
                (r.scenario.as_str(), r.config.as_str(), r.runs),
                ("ops", "ad-hoc", 2)
            );
            assert!(r.ms_median >= 0.0 && r.ms_p99 >= r.ms_median);
        }
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["operation"], "start");
        assert!(json["ms_median"].is_number() && json["ms_p99"].is_number());
    }

    #[test]
    fn subgroup_rendezvous_measures_every_group_operation() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let opts = OpsOptions {
            runs: 2,
            key_bits: 1024,
            configs: vec!["subgroup-rendezvous".into()],
            ..OpsOptions::default()
        };
        let report = rt.block_on(run_report(&opts, |_| {})).unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        let ops: Vec<&str> = report.rows.iter().map(|r| r.operation.as_str()).collect();
        assert_eq!(ops, GROUP_RDV_OPERATIONS);
        assert!(report
            .rows
            .iter()
            .all(|r| r.config == "subgroup-rendezvous" && r.runs == 2));
    }

    #[test]
    fn configurations_are_checked() {
        assert_eq!(parse_config("ad-hoc").unwrap(), "ad-hoc");
        assert_eq!(parse_config(" rendezvous ").unwrap(), "rendezvous");
        assert!(matches!(
            parse_config("mesh"),
            Err(BenchError::Ops(OpsError::UnknownConfig(c))) if c == "mesh"
        ));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for (configs, bad) in [
            (vec![], "no config"),
            (vec!["ad-hoc".into(), "x".into()], "x"),
        ] {
            let opts = OpsOptions {
                runs: 1,
                configs,
                ..OpsOptions::default()
            };
            let e = rt.block_on(run(&opts, |_| {})).unwrap_err();
            assert!(
                matches!(
                    e,
                    BenchError::Ops(OpsError::NoConfig | OpsError::UnknownConfig(_))
                ),
                "{bad}: {e}"
            );
        }
    }
}
