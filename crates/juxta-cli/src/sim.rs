//! `juxta sim`: the rendezvous network simulator ([`juxta_proto::sim`]),
//! running the real protocol nodes in virtual time, with rows in the JSON
//! shape of `juxta bench rendezvous` (see docs/results-format.md).

use std::path::{Path, PathBuf};
use std::time::Instant;

use juxta_proto::rendezvous::edge::EdgeConfig;
use juxta_proto::rendezvous::peerview::PeerViewConfig;
use juxta_proto::rendezvous::server::ServerConfig;
use juxta_proto::sim::{
    Costs, Dist, LinkModel, Model, Partition, Sim, SimConfig, SimReport, Workload,
};

/// Arguments of `juxta sim`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Peers in total (rendezvous + edges).
    #[arg(long, default_value_t = 1_000)]
    pub peers: usize,
    /// Rendezvous among them.
    #[arg(long, default_value_t = 10)]
    pub rendezvous: usize,
    /// Virtual seconds to simulate.
    #[arg(long, default_value_t = 600)]
    pub virtual_s: u64,
    /// Search model: srdi, centralized, flooding.
    #[arg(long, default_value = "srdi")]
    pub model: String,
    /// Lookups per second per 100 edges.
    #[arg(long, default_value_t = 1.0)]
    pub query_rate_per_100: f64,
    /// % of lookups for a published value (the rest: negative).
    #[arg(long, default_value_t = 50)]
    pub positive_pct: u8,
    /// % of the edges crashing per minute (each restarts after the
    /// downtime).
    #[arg(long, default_value_t = 1.0)]
    pub churn_pct_per_min: f64,
    /// Downtime of a crashed edge, ms: `N`, `A..B` (uniform) or
    /// `exp:MIN:MEAN`.
    #[arg(long, default_value = "exp:1000:30000")]
    pub downtime_ms: String,
    /// Seed of every random choice (same seed: same rows, but `wall_s`).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// One-way link latency, ms (`N`, `A..B`, `exp:MIN:MEAN`), drawn per link.
    #[arg(long, default_value = "2..40")]
    pub latency_ms: String,
    /// Link bandwidth, Mbit/s (0: unlimited), drawn per link.
    #[arg(long, default_value = "10..1000")]
    pub bandwidth_mbit: String,
    /// Link loss, %, drawn per link.
    #[arg(long, default_value = "0")]
    pub loss_pct: String,
    /// Rendezvous killed one after the other (the thesis' successive
    /// kills: with 4 rendezvous, 3 kills leave 1).
    #[arg(long, default_value_t = 0)]
    pub rdv_kills: usize,
    /// When the first rendezvous is killed, virtual s.
    #[arg(long, default_value_t = 60)]
    pub kill_at_s: u64,
    /// Interval between kills, virtual s.
    #[arg(long, default_value_t = 60)]
    pub kill_interval_s: u64,
    /// % of the edges that are hostile (send malformed, oversized,
    /// replayed and forged messages instead of lookups).
    #[arg(long, default_value_t = 0.0)]
    pub hostile_pct: f64,
    /// Interval between two junk messages of one hostile edge, ms.
    #[arg(long, default_value_t = 1_000)]
    pub hostile_interval_ms: u64,
    /// Partitions `START_S:DURATION_S:PCT` (comma-separated): PCT % of the
    /// peers cut from the rest.
    #[arg(long)]
    pub partition: Option<String>,
    /// Lookup timeout (a lookup not answered by then is lost), ms.
    #[arg(long, default_value_t = 2_000)]
    pub lookup_timeout_ms: u64,
    /// Lookups issued before this are not measured, virtual s.
    #[arg(long, default_value_t = 10)]
    pub warmup_s: u64,
    /// Edge lease renewal interval, ms (also the failure detection:
    /// detection ≤ heartbeat + response timeout).
    #[arg(long, default_value_t = 10_000)]
    pub heartbeat_ms: u64,
    /// Edge wait for a lease answer, ms.
    #[arg(long, default_value_t = 1_000)]
    pub response_timeout_ms: u64,
    /// Rendezvous peer-view probe interval, ms (every member is probed
    /// each interval: R² probes per interval).
    #[arg(long, default_value_t = 60_000)]
    pub view_probe_ms: u64,
    /// Silence after which a peer-view member is dropped, ms.
    #[arg(long, default_value_t = 180_000)]
    pub view_failure_ms: u64,
    /// Seeds each edge knows (drawn at random; 0: all).
    #[arg(long, default_value_t = 3)]
    pub seeds_per_edge: usize,
    /// Other rendezvous each rendezvous is configured with (0: all; the
    /// rest is learned through the peer view).
    #[arg(long, default_value_t = 8)]
    pub rdv_peers: usize,
    /// Most edges a rendezvous leases (default: 4 × edges / rendezvous,
    /// at least JXSE's 200).
    #[arg(long)]
    pub max_clients: Option<usize>,
    /// Take per-message processing costs from a `juxta bench` results
    /// file: the rendezvous rows' `rdv_cpu_pct / 100 / queries_per_s`
    /// (CPU seconds per lookup at the rendezvous, the row with the most
    /// queries_per_s), else half the `rtt_us_median` of the Juxta
    /// `endpoint` pingpong row with the smallest size (per message, both
    /// roles).
    #[arg(long)]
    pub costs: Option<PathBuf>,
    /// Per-message cost at a rendezvous, µs (overrides --costs).
    #[arg(long)]
    pub rdv_cost_us: Option<f64>,
    /// Per-message cost at an edge, µs (overrides --costs).
    #[arg(long)]
    pub edge_cost_us: Option<f64>,
    /// Write `{"command", "machine", "options", "results"}` here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Errors of `juxta sim`.
#[derive(Debug, thiserror::Error)]
pub enum SimCliError {
    /// A parameter is impossible.
    #[error("--{param}: {why}")]
    Param {
        /// The flag.
        param: &'static str,
        /// Why.
        why: String,
    },
    /// The simulator refused its configuration.
    #[error(transparent)]
    Sim(#[from] juxta_proto::sim::SimError),
    /// The costs file.
    #[error("--costs {path}: {why}")]
    Costs {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

fn param(param: &'static str, why: impl Into<String>) -> SimCliError {
    SimCliError::Param {
        param,
        why: why.into(),
    }
}

fn dist(flag: &'static str, s: &str) -> Result<Dist, SimCliError> {
    Dist::parse(s).ok_or_else(|| {
        param(
            flag,
            format!("{s:?} is not N, A..B or exp:MIN:MEAN with 0 ≤ A ≤ B"),
        )
    })
}

/// Per-message costs (µs at a rendezvous, µs at an edge) read from a
/// `juxta bench` results file (see [`SimArgs::costs`]).
pub fn costs_from_results(path: &Path) -> Result<(f64, f64, String), SimCliError> {
    let err = |why: String| SimCliError::Costs {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
    let rows = doc
        .get("results")
        .and_then(|r| r.as_array())
        .ok_or_else(|| err("no \"results\" array".into()))?;
    let f = |r: &serde_json::Value, k: &str| r.get(k).and_then(|v| v.as_f64());
    let best = rows
        .iter()
        .filter(|r| r.get("scenario").and_then(|s| s.as_str()) == Some("rendezvous"))
        .filter_map(|r| Some((f(r, "queries_per_s")?, f(r, "rdv_cpu_pct")?)))
        .filter(|(q, c)| *q > 0.0 && *c > 0.0)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((qps, cpu)) = best {
        let us = cpu / 100.0 / qps * 1e6;
        let why = format!("rendezvous row: rdv_cpu_pct {cpu} / 100 / queries_per_s {qps}");
        return Ok((us, us, why));
    }
    let ping = rows
        .iter()
        .filter(|r| r.get("scenario").and_then(|s| s.as_str()) == Some("pingpong"))
        .filter(|r| r.get("impl").and_then(|s| s.as_str()).unwrap_or("juxta") == "juxta")
        .filter(|r| r.get("layer").and_then(|s| s.as_str()) == Some("endpoint"))
        .filter_map(|r| Some((f(r, "size")?, f(r, "rtt_us_median")?)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    match ping {
        Some((size, rtt)) => Ok((
            rtt / 2.0,
            rtt / 2.0,
            format!("pingpong endpoint row (size {size}): rtt_us_median {rtt} / 2"),
        )),
        None => Err(err(
            "no rendezvous row with queries_per_s and rdv_cpu_pct, no Juxta endpoint pingpong row"
                .into(),
        )),
    }
}

/// Builds the simulator's configuration; refuses impossible parameters
/// naming the flag.
pub fn config(a: &SimArgs) -> Result<(SimConfig, Option<String>), SimCliError> {
    if a.rendezvous == 0 {
        return Err(param("rendezvous", "at least 1"));
    }
    if a.rendezvous > a.peers {
        return Err(param(
            "rendezvous",
            format!("{} rendezvous > {} peers", a.rendezvous, a.peers),
        ));
    }
    if a.peers > juxta_proto::sim::MAX_PEERS {
        return Err(param(
            "peers",
            format!("at most {}", juxta_proto::sim::MAX_PEERS),
        ));
    }
    if a.virtual_s == 0 || a.virtual_s > 86_400 * 30 {
        return Err(param("virtual-s", "1 to 2,592,000 s"));
    }
    if a.warmup_s >= a.virtual_s {
        return Err(param(
            "warmup-s",
            format!(
                "{} s leaves nothing of --virtual-s {}",
                a.warmup_s, a.virtual_s
            ),
        ));
    }
    let model = Model::parse(&a.model).ok_or_else(|| {
        param(
            "model",
            format!("{:?}: srdi, centralized or flooding", a.model),
        )
    })?;
    if !(a.query_rate_per_100.is_finite() && a.query_rate_per_100 >= 0.0) {
        return Err(param("query-rate-per-100", "must be ≥ 0"));
    }
    if !(a.churn_pct_per_min.is_finite() && (0.0..=100.0).contains(&a.churn_pct_per_min)) {
        return Err(param("churn-pct-per-min", "0 to 100"));
    }
    if a.positive_pct > 100 {
        return Err(param("positive-pct", "0 to 100"));
    }
    if !(a.hostile_pct.is_finite() && (0.0..=100.0).contains(&a.hostile_pct)) {
        return Err(param("hostile-pct", "0 to 100"));
    }
    if a.hostile_interval_ms == 0 {
        return Err(param("hostile-interval-ms", "must be > 0"));
    }
    if a.rdv_kills > 0 && a.rdv_kills >= a.rendezvous {
        return Err(param(
            "rdv-kills",
            format!(
                "{} kills of {} rendezvous leave none",
                a.rdv_kills, a.rendezvous
            ),
        ));
    }
    if a.heartbeat_ms == 0 || a.response_timeout_ms == 0 {
        return Err(param(
            "heartbeat-ms",
            "heartbeat and response timeout must be > 0",
        ));
    }
    if a.view_probe_ms == 0 || a.view_failure_ms <= a.view_probe_ms {
        return Err(param(
            "view-failure-ms",
            "the probe interval must be > 0 and below the failure timeout",
        ));
    }
    if a.lookup_timeout_ms == 0 {
        return Err(param("lookup-timeout-ms", "must be > 0"));
    }
    let latency = dist("latency-ms", &a.latency_ms)?;
    let bandwidth = dist("bandwidth-mbit", &a.bandwidth_mbit)?;
    let loss = dist("loss-pct", &a.loss_pct)?;
    if loss.max() > 100.0 {
        return Err(param("loss-pct", "at most 100"));
    }
    let downtime = dist("downtime-ms", &a.downtime_ms)?;
    let mut partitions = Vec::new();
    for p in a
        .partition
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
    {
        let v: Vec<&str> = p.split(':').collect();
        let parsed = match v.as_slice() {
            [s, d, pct] => (|| {
                Some((
                    s.parse::<u64>().ok()?,
                    d.parse::<u64>().ok()?,
                    pct.parse::<u8>().ok()?,
                ))
            })(),
            _ => None,
        };
        let Some((s, d, pct)) = parsed.filter(|x| x.2 <= 100) else {
            return Err(param(
                "partition",
                format!("{p:?} is not START_S:DURATION_S:PCT"),
            ));
        };
        partitions.push(Partition {
            start_ms: s.saturating_mul(1000),
            end_ms: s.saturating_add(d).saturating_mul(1000),
            pct,
        });
    }
    let mut costs = Costs::default();
    let mut costs_note = None;
    if let Some(p) = &a.costs {
        let (r, e, why) = costs_from_results(p)?;
        costs = Costs {
            rdv_us: r,
            edge_us: e,
        };
        costs_note = Some(why);
    }
    if let Some(c) = a.rdv_cost_us {
        costs.rdv_us = c;
    }
    if let Some(c) = a.edge_cost_us {
        costs.edge_us = c;
    }
    if !(costs.rdv_us.is_finite()
        && costs.rdv_us >= 0.0
        && costs.edge_us.is_finite()
        && costs.edge_us >= 0.0)
    {
        return Err(param("rdv-cost-us", "costs must be ≥ 0 µs"));
    }
    let edges = a.peers - a.rendezvous;
    let max_clients = a
        .max_clients
        .unwrap_or_else(|| (edges.div_ceil(a.rendezvous) * 4).max(200));
    let cfg = SimConfig {
        rendezvous: a.rendezvous,
        edges,
        model,
        seed: a.seed,
        link: LinkModel {
            latency_ms: latency,
            bandwidth_mbit: bandwidth,
            loss_pct: loss,
        },
        costs,
        edge: EdgeConfig {
            heartbeat_ms: a.heartbeat_ms,
            response_timeout_ms: a.response_timeout_ms,
            ..EdgeConfig::default()
        },
        server: ServerConfig {
            max_clients,
            peer_view: PeerViewConfig {
                probe_interval_ms: a.view_probe_ms,
                failure_timeout_ms: a.view_failure_ms,
                ..PeerViewConfig::default()
            },
            ..ServerConfig::default()
        },
        seeds_per_edge: a.seeds_per_edge,
        rdv_peers: a.rdv_peers,
        record: false,
        workload: Workload {
            query_rate_per_100: a.query_rate_per_100,
            positive_pct: a.positive_pct,
            lookup_timeout_ms: a.lookup_timeout_ms,
            warmup_ms: a.warmup_s * 1000,
            churn_pct_per_min: a.churn_pct_per_min,
            downtime_ms: downtime,
            hostile_pct: a.hostile_pct,
            hostile_interval_ms: a.hostile_interval_ms,
            rdv_kills: a.rdv_kills,
            kill_at_ms: a.kill_at_s * 1000,
            kill_interval_ms: a.kill_interval_s * 1000,
            partitions,
        },
        ..SimConfig::default()
    };
    cfg.validate()?;
    Ok((cfg, costs_note))
}

/// The row of a run: the fields of a `juxta bench rendezvous` row plus the
/// simulator's.
pub fn row(r: &SimReport, seed: u64, wall_s: f64) -> serde_json::Value {
    let f = &r.refusals;
    let mut row = serde_json::json!({
        "scenario": "rendezvous",
        "source": "sim",
        "model": r.model,
        "edges": r.edges,
        "rendezvous": r.rendezvous,
        "offered_qps": r.offered_qps,
        "positive_pct": r.positive_pct,
        "query_space": r.query_space,
        "queries_per_s": r.queries_per_s,
        "response_ms_p50": r.response_ms_p50,
        "response_ms_p99": r.response_ms_p99,
        "response_ms_mean": r.response_ms_mean,
        "response_ms_stddev": r.response_ms_stddev,
        "loss_pct": r.loss_pct,
        "cv": r.cv,
        "completion_cv": r.completion_cv,
        "rdv_cpu_pct": r.rdv_cpu_pct,
        "rdv_rss_mb": serde_json::Value::Null,
    });
    let more = serde_json::json!({
        "peers": r.peers,
        "virtual_s": r.virtual_s,
        "wall_s": wall_s,
        "events": r.events,
        "seed": seed,
        "issued": r.issued,
        "answered": r.answered,
        "correct": r.correct,
        "timed_out": r.timed_out,
        "querier_crashed": r.querier_crashed,
        "honest_success_pct": r.honest_success_pct,
        "delivered": r.delivered,
        "lost_link": r.lost_link,
        "lost_partition": r.lost_partition,
        "lost_dead": r.lost_dead,
        "rdv_kills": r.rdv_kills,
        "orphaned": r.orphaned,
        "recovered": r.recovered,
        "never_recovered": r.never_recovered,
        "recovery_ms_p50": r.recovery_ms_p50,
        "recovery_ms_p99": r.recovery_ms_p99,
        "recovery_ms_max": r.recovery_ms_max,
        "crashes": r.crashes,
        "restarts": r.restarts,
        "rejoin_ms_p50": r.rejoin_ms_p50,
        "rejoin_ms_p99": r.rejoin_ms_p99,
        "live_edges": r.live_edges,
        "leased_edges": r.leased_edges,
        "hostile_peers": r.hostile_peers,
        "hostile_sent": r.hostile_sent,
        "refused": {
            "total": f.total(),
            "resolver_malformed": f.resolver_malformed,
            "rdv_malformed": f.rdv_malformed,
            "lease_refused": f.lease_refused,
            "not_member": f.not_member,
            "srdi_malformed": f.srdi_malformed,
            "srdi_refused_entries": f.srdi_refused_entries,
            "busy": f.busy,
            "admission_overflow": f.admission_overflow,
            "duplicates": f.duplicates,
        },
    });
    if let (Some(a), serde_json::Value::Object(b)) = (row.as_object_mut(), more) {
        a.extend(b);
    }
    row
}

/// Runs `juxta sim`: progress on stderr every 10 % of the virtual time;
/// returns the options and the row.
pub fn run(a: &SimArgs) -> Result<(serde_json::Value, serde_json::Value), SimCliError> {
    let (cfg, costs_note) = config(a)?;
    let wall = Instant::now();
    eprintln!(
        "sim: {} peers ({} rendezvous, {} edges), model {}, {} virtual s, seed {}",
        a.peers, cfg.rendezvous, cfg.edges, a.model, a.virtual_s, a.seed
    );
    if let Some(n) = &costs_note {
        eprintln!(
            "sim: costs {:.1} µs per message at rendezvous, {:.1} µs at edges ({n})",
            cfg.costs.rdv_us, cfg.costs.edge_us
        );
    }
    let mut sim = Sim::new(cfg.clone())?;
    eprintln!("sim: built in {:.1} s", wall.elapsed().as_secs_f64());
    let end = a.virtual_s * 1000;
    let step = (end / 10).max(1);
    let mut t = 0;
    while t < end {
        t = (t + step).min(end);
        sim.run_until(t);
        let r = sim.report();
        let el = wall.elapsed().as_secs_f64();
        eprintln!(
            "sim: {:>5.0} s virtual, {:>6.1} s wall, {:>11} events ({:.0}/s), {} lookups answered, {:.2} % correct, {} / {} edges leased",
            r.virtual_s,
            el,
            r.events,
            r.events as f64 / el.max(1e-9),
            r.answered,
            r.honest_success_pct,
            r.leased_edges,
            r.live_edges
        );
    }
    let r = sim.report();
    let wall_s = wall.elapsed().as_secs_f64();
    let options = serde_json::json!({
        "peers": a.peers,
        "rendezvous": a.rendezvous,
        "virtual_s": a.virtual_s,
        "model": a.model,
        "query_rate_per_100": a.query_rate_per_100,
        "positive_pct": a.positive_pct,
        "churn_pct_per_min": a.churn_pct_per_min,
        "downtime_ms": a.downtime_ms,
        "seed": a.seed,
        "latency_ms": a.latency_ms,
        "bandwidth_mbit": a.bandwidth_mbit,
        "loss_pct": a.loss_pct,
        "rdv_kills": a.rdv_kills,
        "kill_at_s": a.kill_at_s,
        "kill_interval_s": a.kill_interval_s,
        "hostile_pct": a.hostile_pct,
        "hostile_interval_ms": a.hostile_interval_ms,
        "partition": a.partition,
        "lookup_timeout_ms": a.lookup_timeout_ms,
        "warmup_s": a.warmup_s,
        "heartbeat_ms": a.heartbeat_ms,
        "response_timeout_ms": a.response_timeout_ms,
        "view_probe_ms": a.view_probe_ms,
        "view_failure_ms": a.view_failure_ms,
        "seeds_per_edge": a.seeds_per_edge,
        "rdv_peers": a.rdv_peers,
        "max_clients": cfg.server.max_clients,
        "rdv_cost_us": cfg.costs.rdv_us,
        "edge_cost_us": cfg.costs.edge_us,
        "costs": a.costs.as_ref().map(|p| p.display().to_string()),
        "costs_field": costs_note,
    });
    eprintln!(
        "sim: done in {wall_s:.1} s wall: {:.2} % correct, {:.1} lookups/s, p50 {:.1} ms, p99 {:.1} ms, loss {:.2} %, recovery p99 {:.0} ms ({} of {} orphaned recovered), rejoin p99 {:.0} ms, {} refused",
        r.honest_success_pct,
        r.queries_per_s,
        r.response_ms_p50,
        r.response_ms_p99,
        r.loss_pct,
        r.recovery_ms_p99,
        r.recovered,
        r.orphaned,
        r.rejoin_ms_p99,
        r.refusals.total()
    );
    Ok((options, row(&r, a.seed, wall_s)))
}
