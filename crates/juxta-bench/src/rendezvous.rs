//! `juxta bench rendezvous`: lookup capacity of rendezvous peers.
//!
//! Why: JXTA's discovery scales only as far as its rendezvous answer
//! queries. Each rendezvous runs as its own process (`juxta rdv-serve`,
//! see [`serve`]); N emulated edges in this process lease them, publish one
//! SRDI entry each, and issue lookups at an offered total rate (half for
//! published values, half for values nobody has), open loop. Reported per
//! configuration: achieved queries/s, response time p50/p99, loss (lookups
//! without an answer within [`LOOKUP_TIMEOUT`]), the coefficient of
//! variation of completions per 100 ms, and the rendezvous processes' CPU
//! and RSS from `/proc`.
//!
//! Limits: rendezvous-to-rendezvous search is not wired in the runtime yet,
//! so with several rendezvous a lookup only finds publishers leased to the
//! same rendezvous, and the `centralized`/`flooding`/`srdi` models differ
//! only in what one rendezvous does locally.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use juxta::proto::id::PeerId;
use juxta::proto::srdi::flow::AdmissionConfig;
use juxta::proto::srdi::search::SearchModel;
use juxta::rendezvous::RendezvousConfig;
use juxta::{Peer, PeerConfig};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

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
}

/// Runs a rendezvous until the process is killed; `ready` gets its
/// address and ID once it listens.
pub async fn serve(
    opts: ServeOptions,
    ready: impl FnOnce(SocketAddr, PeerId),
) -> Result<(), BenchError> {
    let listen = opts.listen;
    let peer = start(opts).await?;
    ready(peer.local_addr().unwrap_or(listen), peer.peer_id());
    std::future::pending::<()>().await;
    Ok(())
}

/// Starts the rendezvous peer [`serve`] runs and returns it.
pub async fn start(opts: ServeOptions) -> Result<Peer, BenchError> {
    let model_name = parse_model(&opts.model)?;
    let rate = opts.rate_limit.max(1);
    let adm = AdmissionConfig {
        per_querier_rate: rate,
        per_querier_burst: (rate / 10).max(1),
        total_rate: rate,
        total_burst: (rate / 10).max(1),
        ..AdmissionConfig::default()
    };
    let cfg = PeerConfig::new(&opts.home)
        .listen(opts.listen)
        .key_bits(opts.key_bits);
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
    let rc = RendezvousConfig::rendezvous()
        .max_clients(opts.max_clients)
        .admission(adm)
        .model(model)
        .peers(opts.peers.clone());
    Ok(Peer::start(cfg.rendezvous(rc)).await?)
}

/// A rendezvous child process (killed when dropped).
pub struct RdvProcess {
    child: Child,
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
    ) -> Result<RdvProcess, BenchError> {
        let home = tempfile::tempdir().map_err(|source| BenchError::Io {
            what: "creating a rendezvous home".into(),
            source,
        })?;
        let mut cmd = Command::new(exe);
        cmd.arg("rdv-serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--home")
            .arg(home.path())
            .arg("--model")
            .arg(model)
            .arg("--key-bits")
            .arg(key_bits.to_string())
            .arg("--rate-limit")
            .arg(rate_limit.to_string())
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
            .stdin(Stdio::null())
            .kill_on_drop(true);
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
        Ok(RdvProcess {
            child,
            addr,
            peer,
            pid,
            _home: home,
        })
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// CPU seconds used so far (user + system) and RSS in MB, from /proc.
    pub fn usage(&self) -> Option<(f64, f64)> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 (utime, stime) are 12 and 13 after the comm.
        let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some((ticks / 100.0, kb / 1024.0))
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
    for e in edges {
        let h = e
            .rendezvous()
            .ok_or_else(|| BenchError::BadOption("edge without rendezvous service".into()))?;
        if h.wait_leased(timeout).await.is_none() {
            return Err(BenchError::Responder {
                layer: "rendezvous".into(),
                reason: "an edge got no lease".into(),
            });
        }
    }
    Ok(())
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
    /// Offered total rates, lookups/s.
    pub rates: Vec<u32>,
    /// Measured time per configuration.
    pub duration: Duration,
    /// The `juxta` binary to re-run as rendezvous.
    pub exe: PathBuf,
    /// RSA key size.
    pub key_bits: usize,
    /// Share of lookups that ask for a published advertisement, in
    /// percent (the rest ask for names nobody published).
    pub positive_pct: u8,
    /// Advertisements published across the edges (names `item-0` ..),
    /// from which the positive lookups pick (the thesis used 1,024).
    pub query_space: usize,
}

/// Most advertisements a run may publish (`--query-space`).
pub const MAX_QUERY_SPACE: usize = 1_000_000;

impl Default for RendezvousOptions {
    /// A small budget for the default suite (a few seconds per row).
    fn default() -> RendezvousOptions {
        RendezvousOptions {
            models: vec!["srdi".into()],
            edges: vec![4, 16],
            rendezvous: vec![1],
            rates: vec![1_000, 5_000, 20_000],
            duration: Duration::from_millis(2_000),
            exe: default_exe(),
            key_bits: 1024,
            positive_pct: 50,
            query_space: 1024,
        }
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
    /// Search model.
    pub model: String,
    /// Edges.
    pub edges: usize,
    /// Rendezvous processes.
    pub rendezvous: usize,
    /// Offered lookups/s.
    pub offered_qps: u32,
    /// Share of positive lookups, %.
    pub positive_pct: u8,
    /// Advertisements published (the positive lookups' space).
    pub query_space: usize,
    /// Answered lookups/s.
    pub queries_per_s: f64,
    /// Median response time.
    pub response_ms_p50: f64,
    /// 99th percentile response time.
    pub response_ms_p99: f64,
    /// Mean response time (answered lookups).
    pub response_ms_mean: f64,
    /// Standard deviation of the response times (answered lookups).
    pub response_ms_stddev: f64,
    /// Lookups not answered in time, %.
    pub loss_pct: f64,
    /// Coefficient of variation of the response times, as the thesis
    /// defines it: `response_ms_stddev / response_ms_mean`.
    pub cv: f64,
    /// Stability of the answer rate: coefficient of variation of the
    /// number of lookups completed per 100 ms (what `cv` meant before).
    pub completion_cv: f64,
    /// CPU of all rendezvous processes, % of one core.
    pub rdv_cpu_pct: f64,
    /// RSS of all rendezvous processes, MB.
    pub rdv_rss_mb: f64,
}

#[derive(Default)]
struct Samples {
    latencies_ms: Vec<f64>,
    done_at_ms: Vec<u64>,
    lost: u64,
    issued: u64,
}

/// Runs every configuration; `progress` gets one line per row.
pub async fn run(
    opts: &RendezvousOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<RendezvousRow>, BenchError> {
    let homes = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating edge homes".into(),
        source,
    })?;
    if opts.positive_pct > 100 {
        return Err(BenchError::BadOption(format!(
            "--positive-pct {} (0 to 100)",
            opts.positive_pct
        )));
    }
    if opts.query_space == 0 || opts.query_space > MAX_QUERY_SPACE {
        return Err(BenchError::BadOption(format!(
            "--query-space {} (1 to {MAX_QUERY_SPACE} advertisements)",
            opts.query_space
        )));
    }
    let mut rows = Vec::new();
    for model in &opts.models {
        parse_model(model)?;
        for &nr in &opts.rendezvous {
            for &ne in &opts.edges {
                // The rendezvous form one peer view (each names those
                // started before it); the first is the central server.
                let mut rdvs: Vec<RdvProcess> = Vec::new();
                for _ in 0..nr.max(1) {
                    let peers: Vec<SocketAddr> = rdvs.iter().map(|r| r.addr).collect();
                    let central = rdvs.first().map(|r| r.peer);
                    rdvs.push(
                        RdvProcess::spawn(
                            &opts.exe,
                            model,
                            opts.key_bits,
                            1_000_000,
                            &peers,
                            central,
                        )
                        .await?,
                    );
                }
                if rdvs.len() > 1 {
                    // Probes run every 500 ms: let the view settle.
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                }
                let seeds: Vec<SocketAddr> = rdvs.iter().map(|r| r.addr).collect();
                let edges = start_edges(homes.path(), ne.max(1), &seeds, opts.key_bits).await?;
                wait_all_leased(&edges, Duration::from_secs(30)).await?;
                // The query space, spread round-robin over the edges.
                for j in 0..opts.query_space {
                    if let Some(h) = edges[j % edges.len()].rendezvous() {
                        let _ = h
                            .srdi_publish(
                                "Adv",
                                "Name",
                                &format!("item-{j}"),
                                Duration::from_secs(3600),
                            )
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                for &rate in &opts.rates {
                    let row = measure(model, &rdvs, &edges, rate, opts).await;
                    progress(&format!(
                        "rendezvous model={model} edges={ne} rendezvous={nr} offered={rate}/s: {:.0} q/s p50 {:.2} ms p99 {:.2} ms loss {:.2}% cpu {:.0}%",
                        row.queries_per_s, row.response_ms_p50, row.response_ms_p99, row.loss_pct, row.rdv_cpu_pct
                    ));
                    rows.push(row);
                }
                drop(edges);
                for r in &mut rdvs {
                    r.kill().await;
                }
            }
        }
    }
    Ok(rows)
}

async fn measure(
    model: &str,
    rdvs: &[RdvProcess],
    edges: &[Peer],
    rate: u32,
    opts: &RendezvousOptions,
) -> RendezvousRow {
    let duration = opts.duration;
    let (positive_pct, space) = (opts.positive_pct, opts.query_space.max(1));
    let n = edges.len();
    let samples = Arc::new(Mutex::new(Samples::default()));
    let cpu0: f64 = rdvs.iter().filter_map(|r| r.usage()).map(|u| u.0).sum();
    let start = Instant::now();
    let per_edge = (rate as f64 / n as f64).max(0.001);
    let period = Duration::from_secs_f64(1.0 / per_edge);
    let mut gens = Vec::new();
    for (i, e) in edges.iter().enumerate() {
        let Some(h) = e.rendezvous().cloned() else {
            continue;
        };
        let samples = samples.clone();
        gens.push(tokio::spawn(async move {
            let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut k = 0usize;
            let mut tasks = Vec::new();
            while start.elapsed() < duration {
                tick.tick().await;
                // `positive_pct` % ask for a published item (spread over
                // the query space, each edge from its own offset), the
                // rest for a name nobody published.
                let value = if is_positive(k as u64, positive_pct) {
                    format!("item-{}", (i.wrapping_mul(7919) + k) % space)
                } else {
                    format!("none-{i}-{k}")
                };
                k += 1;
                samples.lock().expect("samples").issued += 1;
                if in_flight.load(std::sync::atomic::Ordering::Relaxed) >= MAX_IN_FLIGHT_PER_EDGE {
                    samples.lock().expect("samples").lost += 1;
                    continue;
                }
                in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (h, samples, in_flight) = (h.clone(), samples.clone(), in_flight.clone());
                tasks.push(tokio::spawn(async move {
                    let t = Instant::now();
                    let r = h.lookup("Adv", "Name", &value, LOOKUP_TIMEOUT).await;
                    in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    let mut s = samples.lock().expect("samples");
                    match r {
                        Ok(_) => {
                            s.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
                            s.done_at_ms.push(start.elapsed().as_millis() as u64);
                        }
                        Err(_) => s.lost += 1,
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
    RendezvousRow {
        scenario: "rendezvous",
        model: model.to_string(),
        edges: n,
        rendezvous: rdvs.len(),
        offered_qps: rate,
        positive_pct,
        query_space: space,
        queries_per_s: answered as f64 / elapsed.max(measured),
        response_ms_p50: crate::util::percentile(&s.latencies_ms, 0.5),
        response_ms_p99: crate::util::percentile(&s.latencies_ms, 0.99),
        loss_pct: if s.issued == 0 {
            0.0
        } else {
            s.lost as f64 * 100.0 / s.issued as f64
        },
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
    }
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
    fn response_time_cv_is_stddev_over_mean() {
        let (m, sd) = mean_stddev(&[1.0, 3.0]);
        assert_eq!((m, sd), (2.0, 1.0));
        assert_eq!(mean_stddev(&[]), (0.0, 0.0));
    }
}
