//! `juxta bench recovery`: how long edges take to find things again after
//! their rendezvous dies.
//!
//! Why: JXSE's edges need 78–100 s to notice a dead rendezvous; Juxta's
//! edges watch their connection and renew every 500 ms. Two rendezvous run
//! as their own processes (`juxta rdv-serve`); N edges in this process all
//! lease the first, publish one SRDI entry each and check that lookups
//! work; then the first rendezvous process is killed (SIGKILL by PID) and
//! the clock runs until every edge has had a lookup of another edge's
//! entry answered with its publisher again (fail-over + republish +
//! lookup). Repeated `repeats` times with fresh processes.
//!
//! [`run_successive`] is the thesis' procedure (`--kill-every S`): 4
//! rendezvous and 16 edges, each peer its own process ([`crate::worker`]);
//! every `S` seconds the rendezvous that the most edges lease is killed
//! (SIGKILL by PID), down to one, and every edge it orphaned is timed until
//! it reports a lease with another rendezvous; an edge that has not within
//! the limit (the kill interval) counts as never recovered. Two seeding
//! topologies ([`Topology`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use juxta::proto::srdi::index::DEFAULT_MAX_ENTRIES;
use serde::Serialize;

use crate::rendezvous::{default_exe, wait_all_leased, RdvProcess};
use crate::worker::{
    kill_busiest_rendezvous, p50_p99_max, wait_edges_leased, Worker, WorkerRole, WorkerSpec,
};
use crate::BenchError;

/// Longest a recovery may take before the run fails.
pub const RECOVERY_LIMIT: Duration = Duration::from_secs(60);

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct RecoveryOptions {
    /// Edges in this process.
    pub edges: usize,
    /// Kills measured (each with fresh rendezvous processes).
    pub repeats: usize,
    /// The `juxta` binary to re-run as rendezvous.
    pub exe: PathBuf,
    /// RSA key size.
    pub key_bits: usize,
    /// Network profile: the rendezvous processes run in the responder
    /// namespace, the edges (this process) in the client namespace.
    pub net: crate::net::Net,
}

impl Default for RecoveryOptions {
    /// 16 edges, 3 kills: a few seconds in all.
    fn default() -> RecoveryOptions {
        RecoveryOptions {
            edges: 16,
            repeats: 3,
            exe: default_exe(),
            key_bits: 1024,
            net: crate::net::Net::loopback(),
        }
    }
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryRow {
    /// Always `recovery`.
    pub scenario: &'static str,
    /// Edges.
    pub edges: usize,
    /// Rendezvous processes (2).
    pub rendezvous: usize,
    /// From the kill until every edge's lookup was answered again, ms.
    pub recovery_ms: f64,
}

/// All kills of one [`run`] as one set (issue #16's target is a p99 over
/// at least 20 kills): the row `row: "summary"` after the kills.
///
/// ```
/// use juxta_bench::recovery::{summarize, RecoveryRow};
/// let rows: Vec<RecoveryRow> = [5.0, 7.0, 6.0]
///     .iter()
///     .map(|&ms| RecoveryRow { scenario: "recovery", edges: 16, rendezvous: 2, recovery_ms: ms })
///     .collect();
/// let s = summarize(&rows).unwrap();
/// assert_eq!((s.kills, s.recovery_ms_p50, s.recovery_ms_max), (3, 6.0, 7.0));
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct RecoverySummary {
    /// Always `recovery`.
    pub scenario: &'static str,
    /// Always `summary`.
    pub row: &'static str,
    /// Edges per kill.
    pub edges: usize,
    /// Rendezvous processes per kill (2).
    pub rendezvous: usize,
    /// Kills measured (every one recovered: a kill that does not within
    /// [`RECOVERY_LIMIT`] fails the run).
    pub kills: usize,
    /// Median recovery, ms.
    pub recovery_ms_p50: f64,
    /// 99th percentile (nearest rank), ms.
    pub recovery_ms_p99: f64,
    /// Longest, ms.
    pub recovery_ms_max: f64,
    /// Mean, ms.
    pub recovery_ms_mean: f64,
}

/// The summary of [`run`]'s rows (`None` without rows).
pub fn summarize(rows: &[RecoveryRow]) -> Option<RecoverySummary> {
    let first = rows.first()?;
    let mut v: Vec<f64> = rows.iter().map(|r| r.recovery_ms).collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let (p50, p99, max) = p50_p99_max(&mut v);
    Some(RecoverySummary {
        scenario: "recovery",
        row: "summary",
        edges: first.edges,
        rendezvous: first.rendezvous,
        kills: rows.len(),
        recovery_ms_p50: p50?,
        recovery_ms_p99: p99?,
        recovery_ms_max: max?,
        recovery_ms_mean: mean,
    })
}

/// [`run`]'s rows and their summary as JSON values (kills, then the
/// summary), as the CLI and the suite write them.
pub fn rows_with_summary(rows: &[RecoveryRow]) -> Vec<serde_json::Value> {
    let mut v: Vec<serde_json::Value> = rows
        .iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect();
    v.extend(summarize(rows).and_then(|s| serde_json::to_value(s).ok()));
    v
}

/// Runs the kills; `progress` gets one line per row.
pub async fn run(
    opts: &RecoveryOptions,
    progress: impl FnMut(&str),
) -> Result<Vec<RecoveryRow>, BenchError> {
    crate::net::scoped(&opts.net, run_here(opts, progress)).await
}

async fn run_here(
    opts: &RecoveryOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<RecoveryRow>, BenchError> {
    let homes = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating edge homes".into(),
        source,
    })?;
    let n = opts.edges.max(2);
    let mut rows = Vec::new();
    for _ in 0..opts.repeats.max(1) {
        let mut r0 = RdvProcess::spawn_in(
            &opts.exe,
            "srdi",
            opts.key_bits,
            1_000_000,
            &[],
            None,
            DEFAULT_MAX_ENTRIES,
            &opts.net,
        )
        .await?;
        let mut r1 = RdvProcess::spawn_in(
            &opts.exe,
            "srdi",
            opts.key_bits,
            1_000_000,
            &[r0.addr],
            None,
            DEFAULT_MAX_ENTRIES,
            &opts.net,
        )
        .await?;
        // Every edge lists r0 first: all lease r0.
        let mut edges = Vec::with_capacity(n);
        for i in 0..n {
            let c = juxta::PeerConfig::new(homes.path().join(format!("edge{i}")))
                .rendezvous(juxta::rendezvous::RendezvousConfig::edge(vec![
                    r0.addr, r1.addr,
                ]))
                .key_bits(opts.key_bits);
            edges.push(juxta::Peer::start(c).await?);
        }
        wait_all_leased(&edges, Duration::from_secs(30)).await?;
        for (i, e) in edges.iter().enumerate() {
            if let Some(h) = e.rendezvous() {
                h.srdi_publish(
                    "Adv",
                    "Name",
                    &format!("item-{i}"),
                    Duration::from_secs(3600),
                )
                .await
                .map_err(|e| BenchError::BadOption(format!("publish: {e}")))?;
            }
        }
        // Lookups work before the kill.
        lookups_until_found(&edges, Instant::now() + RECOVERY_LIMIT).await?;
        let t0 = Instant::now();
        r0.kill().await;
        lookups_until_found(&edges, t0 + RECOVERY_LIMIT).await?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let moved = edges
            .iter()
            .filter(|e| e.rendezvous().and_then(|h| h.status().leased_to) == Some(r1.peer))
            .count();
        progress(&format!(
            "recovery edges={n} rendezvous=2: {ms:.0} ms ({moved}/{n} edges on the survivor)"
        ));
        rows.push(RecoveryRow {
            scenario: "recovery",
            edges: n,
            rendezvous: 2,
            recovery_ms: ms,
        });
        drop(edges);
        r1.kill().await;
    }
    if let Some(s) = summarize(&rows) {
        progress(&format!(
            "recovery over {} kills: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, mean {:.1} ms",
            s.kills, s.recovery_ms_p50, s.recovery_ms_p99, s.recovery_ms_max, s.recovery_ms_mean
        ));
    }
    Ok(rows)
}

/// Every edge looks up the next edge's entry until it is answered with
/// that edge, all in parallel.
async fn lookups_until_found(edges: &[juxta::Peer], deadline: Instant) -> Result<(), BenchError> {
    let n = edges.len();
    let mut tasks = Vec::new();
    for (i, e) in edges.iter().enumerate() {
        let Some(h) = e.rendezvous().cloned() else {
            continue;
        };
        let owner = (i + 1) % n;
        let want = edges[owner].peer_id();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                if let Ok(found) = h
                    .lookup(
                        "Adv",
                        "Name",
                        &format!("item-{owner}"),
                        Duration::from_secs(5),
                    )
                    .await
                {
                    if found.contains(&want) {
                        return true;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            false
        }));
    }
    for t in tasks {
        if !t.await.unwrap_or(false) {
            return Err(BenchError::Responder {
                layer: "rendezvous".into(),
                reason: "an edge did not recover within the limit".into(),
            });
        }
    }
    Ok(())
}

/// How the rendezvous and edges of [`run_successive`] are seeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// Rendezvous `i` names its neighbour `i - 1` (the last also names the
    /// first, closing the ring); edge `e` lists every rendezvous, rotated
    /// to start at `e mod R`: the edges spread evenly, and a kill orphans
    /// about `edges / live rendezvous` of them, which fail over to the
    /// next rendezvous of their own rotation.
    Ring,
    /// Every rendezvous names rendezvous 0 (the hub) only; every edge
    /// lists rendezvous 0 first and the others after it in the same order
    /// (Juxta edges do not learn rendezvous from the peer view, so the
    /// fall-back seeds are listed): all edges lease the hub, every kill
    /// orphans all of them at once, and they all move to the same next one.
    Star,
}

impl Topology {
    /// `ring` or `star`.
    pub fn parse(s: &str) -> Result<Topology, BenchError> {
        match s {
            "ring" => Ok(Topology::Ring),
            "star" => Ok(Topology::Star),
            o => Err(BenchError::BadOption(format!(
                "--topology {o:?} (known: ring, star)"
            ))),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Ring => "ring",
            Topology::Star => "star",
        }
    }
}

/// Options of [`run_successive`].
#[derive(Debug, Clone)]
pub struct SuccessiveOptions {
    /// Rendezvous processes at the start (killed down to one).
    pub rendezvous: usize,
    /// Edge processes.
    pub edges: usize,
    /// Time between two kills; also the limit within which an orphaned
    /// edge must hold a new lease (else: never recovered).
    pub kill_every: Duration,
    /// Seeding.
    pub topology: Topology,
    /// Pause between lookups of each edge (each publishes one SRDI entry
    /// and looks up its neighbour's, as load during the kills).
    pub lookup_every_ms: u64,
    /// The executable re-run as the workers.
    pub exe: PathBuf,
    /// RSA key size.
    pub key_bits: usize,
}

impl Default for SuccessiveOptions {
    /// The thesis' setting with a 10 s interval (it used 10 minutes).
    fn default() -> SuccessiveOptions {
        SuccessiveOptions {
            rendezvous: 4,
            edges: 16,
            kill_every: Duration::from_secs(10),
            topology: Topology::Ring,
            lookup_every_ms: 1000,
            exe: default_exe(),
            key_bits: 1024,
        }
    }
}

/// Most rendezvous or edge processes [`run_successive`] starts.
pub const MAX_PROCESSES: usize = 256;

impl SuccessiveOptions {
    /// Refuses what cannot be run, naming the option.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.rendezvous < 2 || self.rendezvous > MAX_PROCESSES {
            return Err(BenchError::BadOption(format!(
                "--rendezvous {} (2 to {MAX_PROCESSES}: kills go down to one)",
                self.rendezvous
            )));
        }
        if self.edges == 0 || self.edges > MAX_PROCESSES {
            return Err(BenchError::BadOption(format!(
                "--edges {} (1 to {MAX_PROCESSES})",
                self.edges
            )));
        }
        if self.kill_every < Duration::from_millis(500)
            || self.kill_every > Duration::from_secs(3600)
        {
            return Err(BenchError::BadOption(format!(
                "--kill-every {} s (0.5 to 3600)",
                self.kill_every.as_secs_f64()
            )));
        }
        Ok(())
    }
}

/// One kill of [`run_successive`].
#[derive(Debug, Clone, Serialize)]
pub struct KillRow {
    /// Always `recovery`.
    pub scenario: &'static str,
    /// Always `kill`.
    pub row: &'static str,
    /// Seeding topology.
    pub topology: Topology,
    /// Rendezvous at the start.
    pub rendezvous: usize,
    /// Edges.
    pub edges: usize,
    /// Seconds between kills (and the recovery limit).
    pub kill_every_s: f64,
    /// 1 for the first kill.
    pub kill: usize,
    /// The rendezvous killed.
    pub target: String,
    /// Rendezvous alive after the kill.
    pub live_rendezvous: usize,
    /// Edges that leased the killed rendezvous.
    pub orphaned: usize,
    /// Of those, leased again within the limit.
    pub recovered: usize,
    /// Of those, not leased again within the limit.
    pub never_recovered: usize,
    /// The limit, ms.
    pub limit_ms: f64,
    /// From the kill until each orphan's new lease, ms.
    pub recovery_ms: Vec<f64>,
    /// Median, ms.
    pub recovery_ms_p50: Option<f64>,
    /// 99th percentile, ms.
    pub recovery_ms_p99: Option<f64>,
    /// Longest, ms.
    pub recovery_ms_max: Option<f64>,
}

/// All kills of [`run_successive`] together.
#[derive(Debug, Clone, Serialize)]
pub struct KillSummary {
    /// Always `recovery`.
    pub scenario: &'static str,
    /// Always `summary`.
    pub row: &'static str,
    /// Seeding topology.
    pub topology: Topology,
    /// Rendezvous at the start.
    pub rendezvous: usize,
    /// Edges.
    pub edges: usize,
    /// Seconds between kills.
    pub kill_every_s: f64,
    /// Kills done.
    pub kills: usize,
    /// Orphaned edges over all kills.
    pub orphaned: usize,
    /// Of those, not leased again within the limit.
    pub never_recovered: usize,
    /// Median recovery over all kills, ms.
    pub recovery_ms_p50: Option<f64>,
    /// 99th percentile, ms.
    pub recovery_ms_p99: Option<f64>,
    /// Longest, ms.
    pub recovery_ms_max: Option<f64>,
    /// Mean, ms (the thesis reports means).
    pub recovery_ms_mean: Option<f64>,
    /// Lookups answered with a publisher (all edges, whole run).
    pub lookups_ok: u64,
    /// Lookups failed.
    pub lookups_failed: u64,
    /// Edges holding no lease at the end.
    pub unleased_at_end: usize,
}

/// What [`run_successive`] returns.
#[derive(Debug, Clone, Serialize)]
pub struct SuccessiveOutcome {
    /// One row per kill.
    pub kills: Vec<KillRow>,
    /// All kills together.
    pub summary: KillSummary,
}

impl SuccessiveOutcome {
    /// All rows as JSON values (kills, then the summary).
    pub fn rows(&self) -> Vec<serde_json::Value> {
        let mut v: Vec<serde_json::Value> = self
            .kills
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect();
        v.extend(serde_json::to_value(&self.summary).ok());
        v
    }
}

/// The thesis' recovery run: kills down to one rendezvous, one every
/// `kill_every`; `progress` gets a line per kill.
pub async fn run_successive(
    opts: &SuccessiveOptions,
    mut progress: impl FnMut(&str),
) -> Result<SuccessiveOutcome, BenchError> {
    opts.validate()?;
    let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating peer homes".into(),
        source,
    })?;
    let d = dir.path();
    let (nr, ne, topo) = (opts.rendezvous, opts.edges, opts.topology);
    let base = |name: String, role: WorkerRole| WorkerSpec {
        role,
        home: d.join(&name),
        name,
        key_bits: opts.key_bits,
        lookup_every_ms: opts.lookup_every_ms,
        ..WorkerSpec::default()
    };
    progress(&format!(
        "recovery: starting {nr} rendezvous ({}) and {ne} edges",
        topo.name()
    ));
    let mut rdvs: Vec<Worker> = Vec::with_capacity(nr);
    for i in 0..nr {
        let addrs: Vec<std::net::SocketAddr> = rdvs.iter().filter_map(|r| r.addr).collect();
        let peers = match topo {
            // The neighbour started before it; the last closes the ring.
            Topology::Ring => {
                let mut p: Vec<_> = addrs.last().copied().into_iter().collect();
                if i + 1 == nr && nr > 2 {
                    p.extend(addrs.first().copied());
                }
                p
            }
            Topology::Star => addrs.first().copied().into_iter().collect(),
        };
        rdvs.push(
            Worker::spawn(
                &opts.exe,
                WorkerSpec {
                    peers,
                    ..base(format!("rendezvous-{i}"), WorkerRole::Rendezvous)
                },
            )
            .await?,
        );
    }
    let addrs: Vec<std::net::SocketAddr> = rdvs.iter().filter_map(|r| r.addr).collect();
    let mut edges: Vec<Worker> = Vec::with_capacity(ne);
    for e in 0..ne {
        let mut seeds = addrs.clone();
        if topo == Topology::Ring {
            seeds.rotate_left(e % nr);
        }
        edges.push(
            Worker::spawn(
                &opts.exe,
                WorkerSpec {
                    rdvs: seeds,
                    publish: Some(format!("item-{e}")),
                    lookup: Some(format!("item-{}", (e + 1) % ne)),
                    ..base(format!("edge-{e}"), WorkerRole::Edge)
                },
            )
            .await?,
        );
    }
    let leased = wait_edges_leased(&edges, Duration::from_secs(30)).await;
    if leased < ne {
        return Err(BenchError::Responder {
            layer: "recovery".into(),
            reason: format!("only {leased} of {ne} edges leased a rendezvous within 30 s"),
        });
    }
    // Let the peer view form and the entries reach the rendezvous.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut killed: Vec<usize> = Vec::new();
    let mut kills: Vec<KillRow> = Vec::new();
    let mut all: Vec<f64> = Vec::new();
    let limit = opts.kill_every;
    let mut next = tokio::time::Instant::now();
    while rdvs.len() - killed.len() > 1 {
        tokio::time::sleep_until(next).await;
        next += opts.kill_every;
        let Some(k) = kill_busiest_rendezvous(&mut rdvs, &killed, &edges, limit).await else {
            break;
        };
        killed.push(k.index);
        let mut rec = k.recovery_ms.clone();
        all.extend(&rec);
        let (p50, p99, max) = p50_p99_max(&mut rec);
        let row = KillRow {
            scenario: "recovery",
            row: "kill",
            topology: topo,
            rendezvous: nr,
            edges: ne,
            kill_every_s: opts.kill_every.as_secs_f64(),
            kill: kills.len() + 1,
            target: k.name.clone(),
            live_rendezvous: rdvs.len() - killed.len(),
            orphaned: k.affected,
            recovered: rec.len(),
            never_recovered: k.affected.saturating_sub(rec.len()),
            limit_ms: limit.as_secs_f64() * 1e3,
            recovery_ms: rec,
            recovery_ms_p50: p50,
            recovery_ms_p99: p99,
            recovery_ms_max: max,
        };
        progress(&format!(
            "recovery {}: kill {} ({}), {} live: {}/{} orphans leased again, p50 {:.0} ms p99 {:.0} ms max {:.0} ms",
            topo.name(),
            row.kill,
            row.target,
            row.live_rendezvous,
            row.recovered,
            row.orphaned,
            p50.unwrap_or(f64::NAN),
            p99.unwrap_or(f64::NAN),
            max.unwrap_or(f64::NAN)
        ));
        kills.push(row);
    }
    // One more interval with one rendezvous left, as load.
    tokio::time::sleep_until(next).await;
    let unleased_at_end = edges
        .iter()
        .filter(|e| e.log.lock().expect("log").current_lease().is_none())
        .count();
    for w in &mut edges {
        w.ask_stop().await;
    }
    for w in edges.iter_mut().chain(rdvs.iter_mut()) {
        w.stop(Duration::from_secs(5)).await;
    }
    let logs: Vec<_> = edges.iter().map(|w| w.snapshot()).collect();
    let sum = |k: &str| logs.iter().map(|l| l.stat(k) as u64).sum::<u64>();
    let mean = (!all.is_empty()).then(|| all.iter().sum::<f64>() / all.len() as f64);
    let (p50, p99, max) = p50_p99_max(&mut all);
    let summary = KillSummary {
        scenario: "recovery",
        row: "summary",
        topology: topo,
        rendezvous: nr,
        edges: ne,
        kill_every_s: opts.kill_every.as_secs_f64(),
        kills: kills.len(),
        orphaned: kills.iter().map(|k| k.orphaned).sum(),
        never_recovered: kills.iter().map(|k| k.never_recovered).sum(),
        recovery_ms_p50: p50,
        recovery_ms_p99: p99,
        recovery_ms_max: max,
        recovery_ms_mean: mean,
        lookups_ok: sum("lookups_ok"),
        lookups_failed: sum("lookups_failed"),
        unleased_at_end,
    };
    progress(&format!(
        "recovery {}: {} kills, {} orphans, {} never recovered, mean {:.0} ms, p99 {:.0} ms, max {:.0} ms; lookups {} ok / {} failed",
        topo.name(),
        summary.kills,
        summary.orphaned,
        summary.never_recovered,
        mean.unwrap_or(f64::NAN),
        p99.unwrap_or(f64::NAN),
        max.unwrap_or(f64::NAN),
        summary.lookups_ok,
        summary.lookups_failed
    ));
    Ok(SuccessiveOutcome { kills, summary })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_successive_options_are_refused_by_name() {
        let o = SuccessiveOptions::default();
        assert!(o.validate().is_ok());
        for (bad, name) in [
            (
                SuccessiveOptions {
                    rendezvous: 1,
                    ..o.clone()
                },
                "--rendezvous",
            ),
            (
                SuccessiveOptions {
                    edges: 0,
                    ..o.clone()
                },
                "--edges",
            ),
            (
                SuccessiveOptions {
                    kill_every: Duration::ZERO,
                    ..o.clone()
                },
                "--kill-every",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(name), "{e}");
        }
        assert!(Topology::parse("mesh")
            .unwrap_err()
            .to_string()
            .contains("--topology"));
        assert_eq!(Topology::parse("star").unwrap(), Topology::Star);
    }
}
