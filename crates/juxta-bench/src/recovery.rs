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

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::rendezvous::{default_exe, wait_all_leased, RdvProcess};
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
}

impl Default for RecoveryOptions {
    /// 16 edges, 3 kills: a few seconds in all.
    fn default() -> RecoveryOptions {
        RecoveryOptions {
            edges: 16,
            repeats: 3,
            exe: default_exe(),
            key_bits: 1024,
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

/// Runs the kills; `progress` gets one line per row.
pub async fn run(
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
        let mut r0 =
            RdvProcess::spawn(&opts.exe, "srdi", opts.key_bits, 1_000_000, &[], None).await?;
        let mut r1 = RdvProcess::spawn(
            &opts.exe,
            "srdi",
            opts.key_bits,
            1_000_000,
            &[r0.addr],
            None,
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
