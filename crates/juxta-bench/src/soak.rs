//! `juxta bench soak`: does anything grow while a mixed load runs for a
//! long time?
//!
//! Why: leaks (memory, descriptors, threads, tasks) only show over time,
//! and a peer that runs for days must not grow. Every peer runs as its own
//! process ([`crate::worker`]): a rendezvous, a relay, and edges doing what
//! peers do:
//!
//! - `server` (edge of the rendezvous, listening): answers pings on a
//!   unicast pipe, accepts streaming JXTA sockets, publishes an SRDI entry
//!   and looks up the client's;
//! - `client` (edge of the rendezvous, connected to the server): pings the
//!   server over unicast pipes (one message, then its ack), streams the
//!   known byte pattern over JXTA sockets in segments of one connection
//!   each (paced), publishes and looks up;
//! - `relay-echo` and `relay-ping` (clients of the relay only): the same
//!   pipe ping-pong, relayed;
//! - `churn`: an edge that joins the rendezvous, publishes, looks up, and
//!   leaves after a few seconds; then the next one joins (a new identity
//!   each time).
//!
//! Every second the coordinator reads each long-lived process's RSS
//! (`VmRSS` of `/proc/<pid>/status`), open descriptors (`/proc/<pid>/fd`)
//! and threads (`/proc/<pid>/task`), with the tokio tasks alive and the
//! operations and errors the process reported on its stdout. Per process
//! it fits a least-squares line to the samples after the warm-up (the
//! first 20 % of the run, or 60 s when that is more and leaves at least
//! half of it) and reports the slopes per 10 minutes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::worker::{proc_sample, PingSpec, StreamSpec, Worker, WorkerLog, WorkerRole, WorkerSpec};
use crate::BenchError;

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// How long the load runs (sampling included).
    pub duration: Duration,
    /// The executable re-run as the workers (`<exe> soak-worker <json>`).
    pub exe: PathBuf,
    /// RSA key size of the peers.
    pub key_bits: usize,
    /// Time between two samples of every process.
    pub sample_every: Duration,
    /// How long each joining edge stays before it leaves.
    pub churn_lifetime: Duration,
    /// Socket stream rate (bytes/s).
    pub stream_rate_bytes_per_s: u64,
    /// Bytes per socket connection.
    pub segment_bytes: u64,
    /// Pause between pings (ms).
    pub ping_every_ms: u64,
    /// Pause between lookups (ms).
    pub lookup_every_ms: u64,
}

impl Default for SoakOptions {
    /// 30 minutes, one sample per second, 1 MB/s streamed in 4 MB
    /// connections, 50 pings/s per pair, 5 lookups/s per edge, a new edge
    /// every 10 s.
    fn default() -> SoakOptions {
        SoakOptions {
            duration: Duration::from_secs(30 * 60),
            exe: crate::rendezvous::default_exe(),
            key_bits: 1024,
            sample_every: Duration::from_secs(1),
            churn_lifetime: Duration::from_secs(10),
            stream_rate_bytes_per_s: 1_000_000,
            segment_bytes: 4_000_000,
            ping_every_ms: 20,
            lookup_every_ms: 200,
        }
    }
}

/// One process's samples over time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakSeries {
    /// Seconds since the load started.
    pub t_s: Vec<f64>,
    /// RSS, MB.
    pub rss_mb: Vec<f64>,
    /// Open descriptors.
    pub fds: Vec<f64>,
    /// Threads.
    pub threads: Vec<f64>,
    /// Tokio tasks alive (as the process last reported).
    pub tasks: Vec<f64>,
    /// Operations completed so far.
    pub ops: Vec<f64>,
    /// Errors so far.
    pub errors: Vec<f64>,
    /// Rendezvous: entries in its SRDI index (0 for other processes).
    pub srdi_entries: Vec<f64>,
}

/// One row per long-lived process.
#[derive(Debug, Clone, Serialize)]
pub struct SoakRow {
    /// Always `soak`.
    pub scenario: &'static str,
    /// Process name (`rendezvous`, `relay`, `server`, ...).
    pub process: String,
    /// Its role.
    pub role: WorkerRole,
    /// Measured seconds.
    pub duration_s: f64,
    /// Samples taken.
    pub samples: usize,
    /// Samples before this many seconds are left out of the slopes.
    pub warmup_s: f64,
    /// RSS at the end of the warm-up, MB.
    pub rss_mb_start: f64,
    /// RSS at the end, MB.
    pub rss_mb_end: f64,
    /// Largest RSS, MB.
    pub rss_mb_max: f64,
    /// Least-squares RSS slope after the warm-up, MB per 10 minutes.
    pub rss_mb_per_10min: Option<f64>,
    /// Descriptors at the end of the warm-up.
    pub fds_start: f64,
    /// Descriptors at the end.
    pub fds_end: f64,
    /// Descriptor slope after the warm-up, per 10 minutes.
    pub fds_per_10min: Option<f64>,
    /// Threads at the end of the warm-up.
    pub threads_start: f64,
    /// Threads at the end.
    pub threads_end: f64,
    /// Thread slope after the warm-up, per 10 minutes.
    pub threads_per_10min: Option<f64>,
    /// Tokio tasks at the end of the warm-up.
    pub tasks_start: f64,
    /// Tokio tasks at the end.
    pub tasks_end: f64,
    /// Task slope after the warm-up, per 10 minutes.
    pub tasks_per_10min: Option<f64>,
    /// Operations completed (pings acked or echoed, lookups answered,
    /// socket segments streamed).
    pub ops: u64,
    /// Errors (ping timeouts, failed lookups, failed sends, connects and
    /// segments).
    pub errors: u64,
    /// Rendezvous: SRDI index entries at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub srdi_entries_end: Option<f64>,
    /// Rendezvous: SRDI index slope after the warm-up, per 10 minutes
    /// (edges that join publish an entry each; entries of edges gone stay
    /// until they expire).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub srdi_entries_per_10min: Option<f64>,
    /// Rendezvous: leased edges at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rdv_clients_end: Option<f64>,
    /// The samples.
    pub series: SoakSeries,
}

/// The whole run's totals (one row, `process` = `total`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakTotals {
    /// Always `soak`.
    pub scenario: &'static str,
    /// Always `total`.
    pub process: &'static str,
    /// Measured seconds.
    pub duration_s: f64,
    /// Edges that joined (and left) during the run.
    pub churn_edges: u64,
    /// Joining edges that failed to start.
    pub churn_failures: u64,
    /// Operations of all processes (churn edges included).
    pub ops: u64,
    /// Errors of all processes.
    pub errors: u64,
    /// Lookups answered with a publisher.
    pub lookups_ok: u64,
    /// Lookups not answered with a publisher.
    pub lookups_failed: u64,
    /// Pings acked (direct and relayed).
    pub pings_acked: u64,
    /// Pings not acked in time.
    pub ping_timeouts: u64,
    /// Duplicates or reorderings seen by the pipe echoes.
    pub pipe_duplicates: u64,
    /// Socket accounting.
    #[serde(flatten)]
    pub sockets: SocketTally,
}

/// Matches the writing and reading ends of the streamed sockets.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct SocketTally {
    /// Connections the writer closed without error.
    pub socket_conns_ok: u64,
    /// Connections on which the writer got an error (reported, not silent).
    pub socket_conns_err: u64,
    /// Bytes written on the connections closed without error.
    pub socket_bytes_ok: u64,
    /// Of those, bytes the reader did not get (closed without error,
    /// yet short).
    pub socket_bytes_lost: u64,
    /// Bytes out of place at the reader (any connection).
    pub socket_bytes_out_of_order: u64,
    /// Connections closed without error at the writer with no report
    /// from the reader.
    pub socket_conns_unmatched: u64,
}

/// Tallies written and read ends.
pub fn tally_sockets<'a>(
    written: impl Iterator<Item = &'a (String, u64, bool)>,
    read: impl Iterator<Item = &'a (String, u64, u64, bool)>,
) -> SocketTally {
    let read: HashMap<&str, (u64, u64, bool)> = read
        .map(|(t, n, b, eof)| (t.as_str(), (*n, *b, *eof)))
        .collect();
    let mut t = SocketTally::default();
    for r in read.values() {
        t.socket_bytes_out_of_order += r.1;
    }
    for (tag, n, ok) in written {
        if !ok {
            t.socket_conns_err += 1;
            continue;
        }
        t.socket_conns_ok += 1;
        t.socket_bytes_ok += n;
        match read.get(tag.as_str()) {
            Some((got, _, _)) => t.socket_bytes_lost += n.saturating_sub(*got),
            None => {
                t.socket_conns_unmatched += 1;
                t.socket_bytes_lost += n;
            }
        }
    }
    t
}

/// Least-squares slope of `ys` over `ts` (per unit of `ts`); `None` with
/// fewer than two distinct times.
pub fn slope(ts: &[f64], ys: &[f64]) -> Option<f64> {
    let n = ts.len().min(ys.len());
    if n < 2 {
        return None;
    }
    let mt = ts[..n].iter().sum::<f64>() / n as f64;
    let my = ys[..n].iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for i in 0..n {
        sxy += (ts[i] - mt) * (ys[i] - my);
        sxx += (ts[i] - mt) * (ts[i] - mt);
    }
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The warm-up left out of the slopes: 20 % of the run, or 60 s when that
/// is more and leaves at least half of the run.
pub fn warmup_s(duration_s: f64) -> f64 {
    (0.2 * duration_s).max(60f64.min(0.5 * duration_s))
}

/// Builds a process's row from its samples.
pub fn process_row(
    process: &str,
    role: WorkerRole,
    series: SoakSeries,
    duration_s: f64,
    log: &WorkerLog,
) -> SoakRow {
    let w = warmup_s(duration_s);
    let from = series.t_s.iter().position(|t| *t >= w).unwrap_or(0);
    let per10 = |ys: &[f64]| slope(&series.t_s[from..], &ys[from..]).map(|s| s * 600.0);
    let at = |ys: &[f64], i: usize| ys.get(i).copied().unwrap_or(0.0);
    let last = series.t_s.len().saturating_sub(1);
    let rdv = role == WorkerRole::Rendezvous;
    SoakRow {
        scenario: "soak",
        process: process.to_string(),
        role,
        duration_s,
        samples: series.t_s.len(),
        warmup_s: w,
        rss_mb_start: at(&series.rss_mb, from),
        rss_mb_end: at(&series.rss_mb, last),
        rss_mb_max: series.rss_mb.iter().copied().fold(0.0, f64::max),
        rss_mb_per_10min: per10(&series.rss_mb),
        fds_start: at(&series.fds, from),
        fds_end: at(&series.fds, last),
        fds_per_10min: per10(&series.fds),
        threads_start: at(&series.threads, from),
        threads_end: at(&series.threads, last),
        threads_per_10min: per10(&series.threads),
        tasks_start: at(&series.tasks, from),
        tasks_end: at(&series.tasks, last),
        tasks_per_10min: per10(&series.tasks),
        ops: log.stat("ops") as u64,
        errors: log.stat("errors") as u64,
        srdi_entries_end: rdv.then(|| at(&series.srdi_entries, last)),
        srdi_entries_per_10min: if rdv {
            per10(&series.srdi_entries)
        } else {
            None
        },
        rdv_clients_end: rdv.then(|| log.stat("rdv_clients")),
        series,
    }
}

/// What [`run`] returns.
#[derive(Debug, Clone, Serialize)]
pub struct SoakOutcome {
    /// One row per long-lived process.
    pub processes: Vec<SoakRow>,
    /// The totals.
    pub totals: SoakTotals,
}

impl SoakOutcome {
    /// All rows as JSON values (processes, then the totals).
    pub fn rows(&self) -> Vec<serde_json::Value> {
        let mut v: Vec<serde_json::Value> = self
            .processes
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect();
        v.extend(serde_json::to_value(&self.totals).ok());
        v
    }
}

fn pipe_id() -> String {
    crate::util::random_pipe_id().to_string()
}

fn home(dir: &std::path::Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Runs the soak; `progress` gets a line per minute.
pub async fn run(
    opts: &SoakOptions,
    mut progress: impl FnMut(&str),
) -> Result<SoakOutcome, BenchError> {
    let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating peer homes".into(),
        source,
    })?;
    let d = dir.path();
    let kb = opts.key_bits;
    let exe = &opts.exe;
    let base = |name: &str, role: WorkerRole| WorkerSpec {
        role,
        name: name.into(),
        home: home(d, name),
        key_bits: kb,
        lookup_every_ms: opts.lookup_every_ms,
        ..WorkerSpec::default()
    };
    progress("soak: starting the rendezvous and the relay");
    let rdv = Worker::spawn(exe, base("rendezvous", WorkerRole::Rendezvous)).await?;
    let relay = Worker::spawn(exe, base("relay", WorkerRole::Relay)).await?;
    let rdv_addr = rdv
        .addr
        .ok_or_else(|| BenchError::BadOption("rendezvous without address".into()))?;
    let relay_addr = relay
        .addr
        .ok_or_else(|| BenchError::BadOption("relay without address".into()))?;
    let (echo_d, ack_d, stream_p, echo_r, ack_r) =
        (pipe_id(), pipe_id(), pipe_id(), pipe_id(), pipe_id());
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    progress("soak: starting the edges");
    let server = Worker::spawn(
        exe,
        WorkerSpec {
            listen: Some(loopback),
            rdvs: vec![rdv_addr],
            publish: Some("item-0".into()),
            lookup: Some("item-1".into()),
            echo_pipe: Some(echo_d.clone()),
            stream_server: Some(stream_p.clone()),
            ..base("server", WorkerRole::Edge)
        },
    )
    .await?;
    let client = Worker::spawn(
        exe,
        WorkerSpec {
            rdvs: vec![rdv_addr],
            publish: Some("item-1".into()),
            lookup: Some("item-0".into()),
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
            ..base("client", WorkerRole::Edge)
        },
    )
    .await?;
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
    let mut long = [rdv, relay, server, client, recho, rping];
    let mut series: Vec<SoakSeries> = vec![SoakSeries::default(); long.len()];
    let churn_spec = |i: u64, dir: &std::path::Path| WorkerSpec {
        rdvs: vec![rdv_addr],
        publish: Some(format!("churn-{i}")),
        lookup: Some("item-0".into()),
        lifetime_ms: Some(opts.churn_lifetime.as_millis() as u64),
        home: dir.join("home"),
        ..base(&format!("churn-{i}"), WorkerRole::Edge)
    };
    let mut churn: Option<(Worker, tempfile::TempDir)> = None;
    let mut churn_logs: Vec<WorkerLog> = Vec::new();
    let (mut churn_started, mut churn_failures) = (0u64, 0u64);
    progress("soak: load running");
    let start = Instant::now();
    let mut tick = tokio::time::interval(opts.sample_every.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_report = Instant::now();
    while start.elapsed() < opts.duration {
        tick.tick().await;
        let t = start.elapsed().as_secs_f64();
        for (w, s) in long.iter().zip(series.iter_mut()) {
            let Some(p) = proc_sample(w.pid) else {
                continue;
            };
            let log = w.log.lock().expect("worker log");
            s.t_s.push((t * 1000.0).round() / 1000.0);
            s.rss_mb.push((p.rss_mb * 1000.0).round() / 1000.0);
            s.fds.push(p.fds as f64);
            s.threads.push(p.threads as f64);
            s.tasks.push(log.stat("tasks"));
            s.ops.push(log.stat("ops"));
            s.errors.push(log.stat("errors"));
            s.srdi_entries.push(log.stat("rdv_index"));
        }
        // Edges join and leave: when the current one has left, the next
        // one joins (with a new identity).
        let gone = match &mut churn {
            Some((w, _)) => w.exited(),
            None => true,
        };
        if gone {
            if let Some((w, _dir)) = churn.take() {
                // Its output may still be draining: give it a moment.
                tokio::time::sleep(Duration::from_millis(20)).await;
                churn_logs.push(w.snapshot());
            }
            if start.elapsed() + Duration::from_secs(1) < opts.duration {
                let cd = tempfile::tempdir_in(d).map_err(|source| BenchError::Io {
                    what: "creating a churn home".into(),
                    source,
                })?;
                match Worker::spawn(exe, churn_spec(churn_started, cd.path())).await {
                    Ok(w) => churn = Some((w, cd)),
                    Err(e) => {
                        churn_failures += 1;
                        progress(&format!("soak: a joining edge failed to start: {e}"));
                    }
                }
                churn_started += 1;
            }
        }
        if last_report.elapsed() >= Duration::from_secs(60) {
            last_report = Instant::now();
            let line: Vec<String> = long
                .iter()
                .zip(&series)
                .map(|(w, s)| {
                    format!(
                        "{} {:.1} MB {} fds {} thr",
                        w.name,
                        s.rss_mb.last().copied().unwrap_or(0.0),
                        s.fds.last().copied().unwrap_or(0.0),
                        s.threads.last().copied().unwrap_or(0.0)
                    )
                })
                .collect();
            progress(&format!("soak {:.0} s: {}", t, line.join("; ")));
        }
    }
    let measured = start.elapsed().as_secs_f64();
    progress("soak: stopping");
    if let Some((mut w, _dir)) = churn.take() {
        w.stop(Duration::from_secs(10)).await;
        churn_logs.push(w.snapshot());
    }
    // The client (index 3) first: its last segment closes while the
    // server still reads.
    long[3].stop(Duration::from_secs(30)).await;
    for w in long.iter_mut().rev() {
        w.ask_stop().await;
    }
    for w in long.iter_mut().rev() {
        w.stop(Duration::from_secs(30)).await;
    }
    // The output readers finish after the processes exit.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let logs: Vec<WorkerLog> = long.iter().map(|w| w.snapshot()).collect();
    let processes: Vec<SoakRow> = long
        .iter()
        .zip(series)
        .zip(&logs)
        .map(|((w, s), log)| process_row(&w.name, w.role, s, measured, log))
        .collect();
    let all: Vec<&WorkerLog> = logs.iter().chain(&churn_logs).collect();
    let sum = |k: &str| all.iter().map(|l| l.stat(k) as u64).sum::<u64>();
    let totals = SoakTotals {
        scenario: "soak",
        process: "total",
        duration_s: measured,
        churn_edges: churn_started,
        churn_failures,
        ops: sum("ops"),
        errors: sum("errors"),
        lookups_ok: sum("lookups_ok"),
        lookups_failed: sum("lookups_failed"),
        pings_acked: sum("pings_acked"),
        ping_timeouts: sum("ping_timeouts"),
        pipe_duplicates: all.iter().map(|l| l.dups.len() as u64).sum(),
        sockets: tally_sockets(
            all.iter().flat_map(|l| l.written.iter()),
            all.iter().flat_map(|l| l.read.iter()),
        ),
    };
    for r in &processes {
        progress(&format!(
            "soak {}: RSS {:.1} -> {:.1} MB ({:+.3} MB/10 min), fds {} -> {} ({:+.2}/10 min), threads {} -> {} ({:+.2}/10 min), tasks {} -> {} ({:+.2}/10 min), {} ops, {} errors",
            r.process,
            r.rss_mb_start,
            r.rss_mb_end,
            r.rss_mb_per_10min.unwrap_or(0.0),
            r.fds_start,
            r.fds_end,
            r.fds_per_10min.unwrap_or(0.0),
            r.threads_start,
            r.threads_end,
            r.threads_per_10min.unwrap_or(0.0),
            r.tasks_start,
            r.tasks_end,
            r.tasks_per_10min.unwrap_or(0.0),
            r.ops,
            r.errors
        ));
    }
    progress(&format!(
        "soak total: {} edges joined and left, {} ops, {} errors, sockets {} ok / {} err, {} bytes lost, {} out of order, {} pipe duplicates",
        totals.churn_edges,
        totals.ops,
        totals.errors,
        totals.sockets.socket_conns_ok,
        totals.sockets.socket_conns_err,
        totals.sockets.socket_bytes_lost,
        totals.sockets.socket_bytes_out_of_order,
        totals.pipe_duplicates
    ));
    Ok(SoakOutcome { processes, totals })
}

/// The results document of a soak or chaos run: `command`, `machine`
/// (with the compiler version), `options`, `results`.
pub fn document(options: serde_json::Value, rows: Vec<serde_json::Value>) -> serde_json::Value {
    let mut machine =
        serde_json::to_value(crate::machine::facts()).unwrap_or_else(|_| serde_json::json!({}));
    if let (Some(obj), Some(v)) = (
        machine.as_object_mut(),
        crate::machine::tool_version("rustc", &["--version"]),
    ) {
        obj.insert("rustc".into(), serde_json::Value::String(v));
    }
    serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": machine,
        "options": options,
        "results": rows,
    })
}

/// Writes `results.json`, the CSV files (the per-second samples of soak
/// rows in `soak-samples.csv`, the rows without them in `soak.csv`) and
/// `report.html` into `dir`; returns the files written.
pub fn write_outputs(
    dir: &std::path::Path,
    doc: &serde_json::Value,
) -> Result<Vec<PathBuf>, BenchError> {
    let io = |what: String| move |source| BenchError::Io { what, source };
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let mut files = Vec::new();
    let json = dir.join("results.json");
    // Per-second samples make a soak document large: those are written
    // compactly, others indented.
    let has_series = doc["results"]
        .as_array()
        .is_some_and(|rs| rs.iter().any(|r| r.get("series").is_some()));
    let text = if has_series {
        serde_json::to_string(doc)
    } else {
        serde_json::to_string_pretty(doc)
    };
    std::fs::write(&json, text.unwrap_or_else(|_| "{}".into()))
        .map_err(io(format!("writing {}", json.display())))?;
    files.push(json);
    // Samples: one CSV line per process and second.
    let mut samples = String::new();
    let mut flat = doc.clone();
    if let Some(rs) = flat.get_mut("results").and_then(|r| r.as_array_mut()) {
        for r in rs.iter_mut() {
            let Some(obj) = r.as_object_mut() else {
                continue;
            };
            let Some(series) = obj.remove("series") else {
                continue;
            };
            let process = obj.get("process").and_then(|p| p.as_str()).unwrap_or("");
            let col = |k: &str| -> Vec<f64> {
                series
                    .get(k)
                    .and_then(|v| v.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                    .unwrap_or_default()
            };
            let cols: Vec<Vec<f64>> = SAMPLE_COLUMNS.iter().map(|k| col(k)).collect();
            for i in 0..cols[0].len() {
                samples.push_str(process);
                for c in &cols {
                    samples.push(',');
                    samples.push_str(&c.get(i).map(|v| v.to_string()).unwrap_or_default());
                }
                samples.push('\n');
            }
        }
    }
    if !samples.is_empty() {
        let p = dir.join("soak-samples.csv");
        let head = format!("process,{}\n", SAMPLE_COLUMNS.join(","));
        std::fs::write(&p, head + &samples).map_err(io(format!("writing {}", p.display())))?;
        files.push(p);
    }
    files.extend(crate::csv_out::write_csvs(&flat, dir)?);
    let html = dir.join("report.html");
    crate::report::write_report(doc, &html)?;
    files.push(html);
    Ok(files)
}

/// Columns of `soak-samples.csv` after the process name.
pub const SAMPLE_COLUMNS: [&str; 8] = [
    "t_s",
    "rss_mb",
    "fds",
    "threads",
    "tasks",
    "ops",
    "errors",
    "srdi_entries",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_is_least_squares() {
        let ts = [0.0, 1.0, 2.0, 3.0];
        assert_eq!(slope(&ts, &[1.0, 3.0, 5.0, 7.0]), Some(2.0));
        assert_eq!(slope(&ts, &[5.0, 5.0, 5.0, 5.0]), Some(0.0));
        assert_eq!(slope(&[1.0], &[1.0]), None);
        assert_eq!(slope(&[1.0, 1.0], &[1.0, 2.0]), None);
    }

    #[test]
    fn warmup_is_20_percent_or_60_s() {
        assert_eq!(warmup_s(10.0), 5.0);
        assert_eq!(warmup_s(600.0), 120.0);
        assert_eq!(warmup_s(200.0), 60.0);
    }

    #[test]
    fn sockets_are_matched_by_tag() {
        let w = [
            ("a".to_string(), 100, true),
            ("b".to_string(), 50, false),
            ("c".to_string(), 10, true),
        ];
        let r = [
            ("a".to_string(), 90, 2, true),
            ("b".to_string(), 20, 0, false),
        ];
        let t = tally_sockets(w.iter(), r.iter());
        assert_eq!(t.socket_conns_ok, 2);
        assert_eq!(t.socket_conns_err, 1);
        assert_eq!(t.socket_bytes_ok, 110);
        assert_eq!(t.socket_bytes_lost, 20);
        assert_eq!(t.socket_bytes_out_of_order, 2);
        assert_eq!(t.socket_conns_unmatched, 1);
    }
}
