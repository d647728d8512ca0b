//! The opt-in long scenarios, shortened: soak for a few seconds and chaos
//! with one rendezvous kill, each peer a `juxta-bench-worker` process.
//! Only the structure of the results and the loss checks are asserted
//! (never how fast anything was).

use std::path::PathBuf;
use std::time::Duration;

use juxta_bench::chaos::{self, ChaosOptions};
use juxta_bench::soak::{self, SoakOptions};

fn worker_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_juxta-bench-worker"))
}

fn quiet(_: &str) {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_samples_every_process_and_loses_no_byte() {
    let opts = SoakOptions {
        duration: Duration::from_secs(6),
        exe: worker_exe(),
        churn_lifetime: Duration::from_secs(2),
        segment_bytes: 100_000,
        stream_rate_bytes_per_s: 500_000,
        ..SoakOptions::default()
    };
    let out = soak::run(&opts, quiet).await.expect("soak run");
    let names: Vec<&str> = out.processes.iter().map(|r| r.process.as_str()).collect();
    assert_eq!(
        names,
        [
            "rendezvous",
            "relay",
            "server",
            "client",
            "relay-echo",
            "relay-ping"
        ]
    );
    for r in &out.processes {
        assert!(r.samples >= 2, "{}: {} samples", r.process, r.samples);
        assert_eq!(r.series.t_s.len(), r.samples);
        assert_eq!(r.series.rss_mb.len(), r.samples);
        assert!(r.series.rss_mb.iter().all(|m| *m > 0.0), "{}", r.process);
        assert!(r.series.fds.iter().all(|n| *n > 0.0), "{}", r.process);
        assert!(r.series.threads.iter().all(|n| *n >= 1.0), "{}", r.process);
        assert!(r.rss_mb_per_10min.is_some(), "{}: no RSS slope", r.process);
        assert!(r.fds_per_10min.is_some() && r.threads_per_10min.is_some());
        assert!(r.tasks_per_10min.is_some(), "{}: no task slope", r.process);
        assert!(
            r.series.tasks.iter().any(|n| *n > 0.0),
            "{}: no tasks",
            r.process
        );
    }
    // The rendezvous reports its index; the others do not.
    let rdv = &out.processes[0];
    assert!(rdv.srdi_entries_end.is_some() && rdv.srdi_entries_per_10min.is_some());
    assert!(rdv.rdv_clients_end.is_some());
    assert!(out.processes[1..]
        .iter()
        .all(|r| r.srdi_entries_end.is_none()));
    // The load ran: pings were acked (direct and relayed), bytes streamed.
    let client = &out.processes[3];
    assert!(client.ops > 0, "client did nothing");
    assert!(out.processes[5].ops > 0, "relayed pings: none acked");
    let t = &out.totals;
    assert!(t.churn_edges >= 1);
    assert!(t.sockets.socket_conns_ok >= 1, "{t:?}");
    assert_eq!(t.sockets.socket_bytes_lost, 0, "{t:?}");
    assert_eq!(t.sockets.socket_bytes_out_of_order, 0, "{t:?}");
    assert_eq!(t.sockets.socket_conns_unmatched, 0, "{t:?}");
    assert_eq!(t.pipe_duplicates, 0);

    // The files: results, samples, CSV, report with the soak plots.
    let dir = tempfile::tempdir().unwrap();
    let doc = soak::document(serde_json::json!({"duration_s": 6}), out.rows());
    let files = soak::write_outputs(dir.path(), &doc).expect("outputs");
    for f in [
        "results.json",
        "soak-samples.csv",
        "soak.csv",
        "report.html",
    ] {
        assert!(
            files.contains(&dir.path().join(f)),
            "{f} missing: {files:?}"
        );
    }
    let samples = std::fs::read_to_string(dir.path().join("soak-samples.csv")).unwrap();
    let lines = samples.lines().count();
    let total: usize = out.processes.iter().map(|r| r.samples).sum();
    assert_eq!(lines, total + 1, "one line per sample plus the header");
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("id=\"plot-soak-rss\"") && html.contains("id=\"table-soak\""));
    let csv = std::fs::read_to_string(dir.path().join("soak.csv")).unwrap();
    assert!(!csv.contains("series"), "soak.csv keeps the samples out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_with_one_kill_reports_the_recovery_and_loses_no_byte() {
    let opts = ChaosOptions {
        exe: worker_exe(),
        rendezvous: 2,
        lookup_edges: 1,
        rounds: 1,
        relay_kills: 0,
        edge_kills: 0,
        settle: Duration::from_secs(1),
        segment_bytes: 100_000,
        ..ChaosOptions::default()
    };
    let out = chaos::run(&opts, quiet).await.expect("chaos run");
    assert_eq!(out.events.len(), 1, "{:?}", out.events);
    let e = &out.events[0];
    assert_eq!(e.kind, "rendezvous");
    assert_eq!(e.live_rendezvous, 1);
    // All three edges listed the same rendezvous first: all had to move.
    assert_eq!(e.affected, 3, "{e:?}");
    assert_eq!(e.recovered + e.never_recovered, e.affected);
    assert_eq!(e.never_recovered, 0, "{e:?}");
    assert_eq!(e.recovery_ms.len(), e.recovered);
    assert!(e.recovery_ms.iter().all(|ms| *ms > 0.0));
    assert!(e.recovery_ms_p50.is_some() && e.recovery_ms_p99.is_some());
    let s = &out.summary;
    assert_eq!(s.rendezvous_kills, 1);
    assert_eq!(s.releases, e.recovered);
    assert!(s.sockets.socket_conns_ok >= 1, "{s:?}");
    assert_eq!(s.sockets.socket_bytes_lost, 0, "{s:?}");
    assert_eq!(s.sockets.socket_bytes_out_of_order, 0, "{s:?}");
    assert_eq!(s.pipe_duplicates, 0, "{s:?}");
    assert!(s.pings_acked > 0 && s.lookups_ok > 0, "{s:?}");
    let rows = out.rows();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["row"], "summary");
    assert!(
        rows[1].get("socket_bytes_lost").is_some(),
        "flattened tally"
    );
}
