//! `juxta bench chaos`: kill rendezvous, relays and edges while sockets
//! stream and queries run, and check that nothing reliable is lost.
//!
//! Why: a peer-to-peer network loses peers all the time; what must hold
//! is that the reliable layers lose nothing silently and that edges find
//! a rendezvous again quickly. Every peer runs as its own process
//! ([`crate::worker`]):
//!
//! - `rendezvous` rendezvous forming one peer view (4 by default, as in the
//!   thesis); every edge lists them all in the same order, so all lease
//!   the first;
//! - `server` and `client` edges: the client pings the server over unicast
//!   pipes and streams the known byte pattern over JXTA sockets (one
//!   connection per segment); `lookup-N` edges publish an SRDI entry each
//!   and look up another's; all of them look up again and again;
//! - a relay with a `relay-echo`/`relay-ping` pair pinging through it.
//!
//! Then, in order: the rendezvous the edges lease is killed (SIGKILL by
//! PID) until one rendezvous is left (4 -> 3 -> 2 -> 1), each time timing
//! every orphaned edge until it reports a new lease; the killed rendezvous
//! are restarted (same address and identity) for the next round; the relay
//! is killed and restarted (its clients' re-lease is timed); edges are
//! killed and restarted (the server, which breaks the streaming socket
//! and the pings, and a lookup edge).
//!
//! Checks: every socket connection the writer closed without error
//! delivered every byte in order (or the writer saw an error: both
//! counted); the pipe echoes saw no duplicate; lookups failed only within
//! a kill's recovery window (from the kill until the last affected edge
//! recovered, plus one lookup timeout and one second). Reported: the
//! re-lease distribution (p50/p99/max) and edges that never recovered
//! within the limit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::soak::{tally_sockets, SocketTally};
use crate::worker::{
    kill_busiest_rendezvous, leased_after, p50_p99_max as stats, PingSpec, StreamSpec, Worker,
    WorkerLog, WorkerRole, WorkerSpec, LOOKUP_TIMEOUT,
};
use crate::BenchError;

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// The executable re-run as the workers.
    pub exe: PathBuf,
    /// RSA key size.
    pub key_bits: usize,
    /// Rendezvous processes (each round kills all but one).
    pub rendezvous: usize,
    /// Edges that only publish and look up (besides server and client).
    pub lookup_edges: usize,
    /// Rounds of rendezvous kills (the killed ones are restarted after
    /// each round).
    pub rounds: usize,
    /// Relay kills (each followed by a restart).
    pub relay_kills: usize,
    /// Edge kills (each followed by a restart; the server and a lookup
    /// edge in turn).
    pub edge_kills: usize,
    /// Pause between two kills.
    pub settle: Duration,
    /// Longest wait for an edge to recover before it counts as never
    /// recovered.
    pub recovery_limit: Duration,
    /// Socket stream rate (bytes/s).
    pub stream_rate_bytes_per_s: u64,
    /// Bytes per socket connection.
    pub segment_bytes: u64,
    /// Pause between pings (ms).
    pub ping_every_ms: u64,
    /// Pause between lookups (ms).
    pub lookup_every_ms: u64,
}

impl Default for ChaosOptions {
    /// 4 rendezvous, 4 lookup edges, one round, one relay kill, two edge
    /// kills.
    fn default() -> ChaosOptions {
        ChaosOptions {
            exe: crate::rendezvous::default_exe(),
            key_bits: 1024,
            rendezvous: 4,
            lookup_edges: 4,
            rounds: 1,
            relay_kills: 1,
            edge_kills: 2,
            settle: Duration::from_secs(3),
            recovery_limit: Duration::from_secs(30),
            stream_rate_bytes_per_s: 2_000_000,
            segment_bytes: 1_000_000,
            ping_every_ms: 10,
            lookup_every_ms: 100,
        }
    }
}

/// One kill.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosEvent {
    /// Always `chaos`.
    pub scenario: &'static str,
    /// Always `event`.
    pub row: &'static str,
    /// Order of the kill.
    pub event: usize,
    /// `rendezvous`, `relay` or `edge`.
    pub kind: &'static str,
    /// The process killed.
    pub target: String,
    /// Rendezvous alive after the kill.
    pub live_rendezvous: usize,
    /// Processes that had to recover: edges leased to the killed
    /// rendezvous, relay clients, or the restarted edge itself.
    pub affected: usize,
    /// Of those, recovered within the limit.
    pub recovered: usize,
    /// Of those, not recovered within the limit.
    pub never_recovered: usize,
    /// From the kill until each recovered (new lease reported), ms.
    pub recovery_ms: Vec<f64>,
    /// Median recovery, ms.
    pub recovery_ms_p50: Option<f64>,
    /// 99th percentile recovery, ms.
    pub recovery_ms_p99: Option<f64>,
    /// Longest recovery, ms.
    pub recovery_ms_max: Option<f64>,
}

/// The run's checks and figures (one row).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChaosSummary {
    /// Always `chaos`.
    pub scenario: &'static str,
    /// Always `summary`.
    pub row: &'static str,
    /// Rendezvous processes at the start.
    pub rendezvous: usize,
    /// Edges leasing them.
    pub edges: usize,
    /// Rendezvous killed.
    pub rendezvous_kills: usize,
    /// Relays killed (and restarted).
    pub relay_kills: usize,
    /// Edges killed (and restarted).
    pub edge_kills: usize,
    /// Edge re-leases after rendezvous kills.
    pub releases: usize,
    /// Median re-lease after a rendezvous kill, ms.
    pub release_ms_p50: Option<f64>,
    /// 99th percentile, ms.
    pub release_ms_p99: Option<f64>,
    /// Longest, ms.
    pub release_ms_max: Option<f64>,
    /// Edges that did not re-lease within the limit (all kills).
    pub never_recovered: usize,
    /// Longest re-lease of a relay client after a relay kill and
    /// restart, ms.
    pub relay_release_ms_max: Option<f64>,
    /// Pings sent (direct and relayed).
    pub pings_sent: u64,
    /// Pings acked.
    pub pings_acked: u64,
    /// Pings not acked in time (unicast pipes are unreliable: a message
    /// sent while a peer is dead is lost).
    pub ping_timeouts: u64,
    /// Duplicates or reorderings seen by the pipe echoes.
    pub pipe_duplicates: u64,
    /// Lookups answered with a publisher.
    pub lookups_ok: u64,
    /// Lookups failed (all).
    pub lookups_failed: u64,
    /// Lookups failed outside every recovery window.
    pub lookups_failed_outside_recovery: u64,
    /// Socket accounting.
    #[serde(flatten)]
    pub sockets: SocketTally,
    /// Seconds from the first kill to the end.
    pub duration_s: f64,
}

/// What [`run`] returns.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosOutcome {
    /// One row per kill.
    pub events: Vec<ChaosEvent>,
    /// The checks.
    pub summary: ChaosSummary,
}

impl ChaosOutcome {
    /// All rows as JSON values (events, then the summary).
    pub fn rows(&self) -> Vec<serde_json::Value> {
        let mut v: Vec<serde_json::Value> = self
            .events
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect();
        v.extend(serde_json::to_value(&self.summary).ok());
        v
    }
}

fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

fn pipe_id() -> String {
    crate::util::random_pipe_id().to_string()
}

/// Restarts a worker from its spec, on the address it had (retried a
/// few times while the port is still held).
async fn restart(exe: &std::path::Path, old: &Worker) -> Result<Worker, BenchError> {
    let mut spec = old.spec.clone();
    if old.addr.is_some() {
        spec.listen = old.addr;
    }
    let mut last = None;
    for _ in 0..10 {
        match Worker::spawn(exe, spec.clone()).await {
            Ok(w) => return Ok(w),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(last.unwrap_or_else(|| BenchError::BadOption("restart failed".into())))
}

/// Runs the kills; `progress` gets a line per event.
pub async fn run(
    opts: &ChaosOptions,
    mut progress: impl FnMut(&str),
) -> Result<ChaosOutcome, BenchError> {
    let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating peer homes".into(),
        source,
    })?;
    let d = dir.path();
    let exe = &opts.exe;
    let base = |name: &str, role: WorkerRole| WorkerSpec {
        role,
        name: name.into(),
        home: d.join(name),
        key_bits: opts.key_bits,
        lookup_every_ms: opts.lookup_every_ms,
        ..WorkerSpec::default()
    };
    let nr = opts.rendezvous.max(1);
    progress(&format!("chaos: starting {nr} rendezvous and a relay"));
    let mut rdvs: Vec<Worker> = Vec::new();
    for i in 0..nr {
        let peers: Vec<SocketAddr> = rdvs.iter().filter_map(|r| r.addr).collect();
        rdvs.push(
            Worker::spawn(
                exe,
                WorkerSpec {
                    peers,
                    ..base(&format!("rendezvous-{i}"), WorkerRole::Rendezvous)
                },
            )
            .await?,
        );
    }
    let rdv_addrs: Vec<SocketAddr> = rdvs.iter().filter_map(|r| r.addr).collect();
    // A restarted rendezvous names all the others.
    for r in &mut rdvs {
        r.spec.peers = rdv_addrs
            .iter()
            .copied()
            .filter(|a| Some(*a) != r.addr)
            .collect();
    }
    let mut relay = Worker::spawn(exe, base("relay", WorkerRole::Relay)).await?;
    let relay_addr = relay
        .addr
        .ok_or_else(|| BenchError::BadOption("relay without address".into()))?;
    let items = opts.lookup_edges + 2;
    let edge = |name: &str, i: usize| WorkerSpec {
        rdvs: rdv_addrs.clone(),
        publish: Some(format!("item-{i}")),
        lookup: Some(format!("item-{}", (i + 1) % items)),
        ..base(name, WorkerRole::Edge)
    };
    progress("chaos: starting the edges");
    let (echo_d, ack_d, stream_p, echo_r, ack_r) =
        (pipe_id(), pipe_id(), pipe_id(), pipe_id(), pipe_id());
    let server = Worker::spawn(
        exe,
        WorkerSpec {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            echo_pipe: Some(echo_d.clone()),
            stream_server: Some(stream_p.clone()),
            ..edge("server", 0)
        },
    )
    .await?;
    let client = Worker::spawn(
        exe,
        WorkerSpec {
            ping: Some(PingSpec {
                pipe: echo_d,
                ack_pipe: ack_d,
                peer: server.peer.clone(),
                addr: server.addr,
                every_ms: opts.ping_every_ms,
            }),
            stream: Some(StreamSpec {
                pipe: stream_p,
                peer: server.peer.clone(),
                addr: server.addr,
                segment_bytes: opts.segment_bytes.max(1),
                rate_bytes_per_s: opts.stream_rate_bytes_per_s.max(1),
            }),
            ..edge("client", 1)
        },
    )
    .await?;
    // Edges leasing the rendezvous: server, client, lookup edges.
    let mut edges = vec![server, client];
    for i in 0..opts.lookup_edges {
        edges.push(Worker::spawn(exe, edge(&format!("lookup-{i}"), i + 2)).await?);
    }
    let recho = Worker::spawn(
        exe,
        WorkerSpec {
            relays: vec![relay_addr],
            echo_pipe: Some(echo_r.clone()),
            ..base("relay-echo", WorkerRole::Edge)
        },
    )
    .await?;
    let rping = Worker::spawn(
        exe,
        WorkerSpec {
            relays: vec![relay_addr],
            ping: Some(PingSpec {
                pipe: echo_r,
                ack_pipe: ack_r,
                peer: recho.peer.clone(),
                addr: None,
                every_ms: opts.ping_every_ms,
            }),
            ..base("relay-ping", WorkerRole::Edge)
        },
    )
    .await?;
    let mut relay_edges = vec![recho, rping];
    // Logs of processes killed along the way (for the final tally).
    let mut dead_logs: Vec<WorkerLog> = Vec::new();

    // Everyone leased, entries published, lookups answered.
    let t_wait = Instant::now();
    while t_wait.elapsed() < opts.recovery_limit {
        let leased = edges
            .iter()
            .all(|e| e.log.lock().expect("log").current_lease().is_some())
            && relay_edges.iter().all(|e| {
                matches!(
                    e.log.lock().expect("log").relay_leases.last(),
                    Some((_, Some(_)))
                )
            });
        if leased {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(opts.settle).await;
    let t_ready = now_ms();
    let start = Instant::now();
    // Recovery windows (unix ms) for the lookup check.
    let mut windows: Vec<(f64, f64)> = Vec::new();
    let mut events: Vec<ChaosEvent> = Vec::new();
    let limit_ms = opts.recovery_limit.as_secs_f64() * 1e3;
    let slack_ms = LOOKUP_TIMEOUT.as_secs_f64() * 1e3 + 1000.0;
    let event = |kind: &'static str,
                 target: String,
                 live: usize,
                 affected: usize,
                 mut rec: Vec<f64>,
                 events: &mut Vec<ChaosEvent>,
                 progress: &mut dyn FnMut(&str)| {
        let recovered = rec.len();
        let (p50, p99, max) = stats(&mut rec);
        progress(&format!(
            "chaos: killed {target} ({kind}): {recovered}/{affected} recovered, p50 {:.0} ms, max {:.0} ms",
            p50.unwrap_or(f64::NAN),
            max.unwrap_or(f64::NAN)
        ));
        events.push(ChaosEvent {
            scenario: "chaos",
            row: "event",
            event: events.len(),
            kind,
            target,
            live_rendezvous: live,
            affected,
            recovered,
            never_recovered: affected - recovered,
            recovery_ms: rec,
            recovery_ms_p50: p50,
            recovery_ms_p99: p99,
            recovery_ms_max: max,
        });
    };

    // Rendezvous: kill the one the edges lease, down to one, per round.
    let mut rdv_kills = 0;
    for round in 0..opts.rounds {
        let mut killed: Vec<usize> = Vec::new();
        while rdvs.len() - killed.len() > 1 {
            let Some(k) =
                kill_busiest_rendezvous(&mut rdvs, &killed, &edges, opts.recovery_limit).await
            else {
                break;
            };
            let (ti, t_kill, rec) = (k.index, k.t_kill, k.recovery_ms);
            killed.push(ti);
            rdv_kills += 1;
            let until = rec.iter().copied().fold(0.0, f64::max);
            let until = if rec.len() < k.affected {
                limit_ms
            } else {
                until
            };
            windows.push((t_kill, t_kill + until + slack_ms));
            event(
                "rendezvous",
                rdvs[ti].name.clone(),
                rdvs.len() - killed.len(),
                k.affected,
                rec,
                &mut events,
                &mut progress,
            );
            tokio::time::sleep(opts.settle).await;
        }
        progress(&format!(
            "chaos: round {round}: restarting the killed rendezvous"
        ));
        for ti in killed {
            let t0 = now_ms();
            let w = restart(exe, &rdvs[ti]).await?;
            let old = std::mem::replace(&mut rdvs[ti], w);
            dead_logs.push(old.snapshot());
            windows.push((t0, now_ms() + slack_ms));
        }
        tokio::time::sleep(opts.settle).await;
    }

    // Relay: kill and restart at once; time its clients' re-lease.
    let mut relay_rec_all: Vec<f64> = Vec::new();
    for _ in 0..opts.relay_kills {
        let t_kill = now_ms();
        relay.kill().await;
        let w = restart(exe, &relay).await?;
        let old = std::mem::replace(&mut relay, w);
        dead_logs.push(old.snapshot());
        let deadline = Instant::now() + opts.recovery_limit;
        let mut rec: Vec<Option<f64>> = vec![None; relay_edges.len()];
        while Instant::now() < deadline && rec.iter().any(Option::is_none) {
            for (k, e) in relay_edges.iter().enumerate() {
                if rec[k].is_none() {
                    rec[k] = e
                        .log
                        .lock()
                        .expect("log")
                        .relay_leases
                        .iter()
                        .find(|(t, p)| *t > t_kill && p.is_some())
                        .map(|(t, _)| t - t_kill);
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let rec: Vec<f64> = rec.into_iter().flatten().collect();
        relay_rec_all.extend(&rec);
        event(
            "relay",
            relay.name.clone(),
            rdvs.len(),
            relay_edges.len(),
            rec,
            &mut events,
            &mut progress,
        );
        tokio::time::sleep(opts.settle).await;
    }

    // Edges: the server (breaks the stream and the pings) and a lookup
    // edge in turn, each restarted at once with its identity.
    for k in 0..opts.edge_kills {
        let ei = if k % 2 == 0 || edges.len() < 3 { 0 } else { 2 };
        let t_kill = now_ms();
        edges[ei].kill().await;
        let w = restart(exe, &edges[ei]).await?;
        let old = std::mem::replace(&mut edges[ei], w);
        let name = old.name.clone();
        dead_logs.push(old.snapshot());
        let deadline = Instant::now() + opts.recovery_limit;
        let mut rec = None;
        while Instant::now() < deadline && rec.is_none() {
            rec =
                leased_after(&edges[ei].log.lock().expect("log"), t_kill, None).map(|t| t - t_kill);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let until = rec.unwrap_or(limit_ms);
        windows.push((t_kill, t_kill + until + slack_ms));
        event(
            "edge",
            name,
            rdvs.len(),
            1,
            rec.into_iter().collect(),
            &mut events,
            &mut progress,
        );
        tokio::time::sleep(opts.settle).await;
    }
    let duration_s = start.elapsed().as_secs_f64();

    progress("chaos: stopping");
    // The client first, so that its last segment closes cleanly.
    edges[1].stop(Duration::from_secs(30)).await;
    for w in edges.iter_mut().chain(relay_edges.iter_mut()) {
        w.ask_stop().await;
    }
    for w in edges.iter_mut().chain(relay_edges.iter_mut()) {
        w.stop(Duration::from_secs(30)).await;
    }
    relay.stop(Duration::from_secs(5)).await;
    for r in &mut rdvs {
        r.stop(Duration::from_secs(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut logs: Vec<WorkerLog> = edges
        .iter()
        .chain(&relay_edges)
        .map(|w| w.snapshot())
        .collect();
    logs.extend(dead_logs);
    let sum = |k: &str| logs.iter().map(|l| l.stat(k) as u64).sum::<u64>();
    let outside = logs
        .iter()
        .flat_map(|l| l.query_failures.iter())
        .filter(|t| **t >= t_ready && !windows.iter().any(|(a, b)| **t >= *a && **t <= *b))
        .count() as u64;
    let mut releases: Vec<f64> = events
        .iter()
        .filter(|e| e.kind == "rendezvous")
        .flat_map(|e| e.recovery_ms.iter().copied())
        .collect();
    let (p50, p99, max) = stats(&mut releases);
    let summary = ChaosSummary {
        scenario: "chaos",
        row: "summary",
        rendezvous: nr,
        edges: edges.len(),
        rendezvous_kills: rdv_kills,
        relay_kills: opts.relay_kills,
        edge_kills: opts.edge_kills,
        releases: releases.len(),
        release_ms_p50: p50,
        release_ms_p99: p99,
        release_ms_max: max,
        never_recovered: events.iter().map(|e| e.never_recovered).sum(),
        relay_release_ms_max: relay_rec_all.iter().copied().reduce(f64::max),
        pings_sent: sum("pings_sent"),
        pings_acked: sum("pings_acked"),
        ping_timeouts: sum("ping_timeouts"),
        pipe_duplicates: logs.iter().map(|l| l.dups.len() as u64).sum(),
        lookups_ok: sum("lookups_ok"),
        lookups_failed: sum("lookups_failed"),
        lookups_failed_outside_recovery: outside,
        sockets: tally_sockets(
            logs.iter().flat_map(|l| l.written.iter()),
            logs.iter().flat_map(|l| l.read.iter()),
        ),
        duration_s,
    };
    progress(&format!(
        "chaos: re-lease after rendezvous kills p50 {:.0} ms p99 {:.0} ms max {:.0} ms ({} re-leases, {} never recovered); sockets {} ok / {} err, {} bytes lost, {} out of order; pings {} acked, {} timed out, {} duplicates; lookups {} ok, {} failed ({} outside recovery)",
        p50.unwrap_or(f64::NAN),
        p99.unwrap_or(f64::NAN),
        max.unwrap_or(f64::NAN),
        summary.releases,
        summary.never_recovered,
        summary.sockets.socket_conns_ok,
        summary.sockets.socket_conns_err,
        summary.sockets.socket_bytes_lost,
        summary.sockets.socket_bytes_out_of_order,
        summary.pings_acked,
        summary.ping_timeouts,
        summary.pipe_duplicates,
        summary.lookups_ok,
        summary.lookups_failed,
        summary.lookups_failed_outside_recovery,
    ));
    Ok(ChaosOutcome { events, summary })
}
