//! The report, CSV files and run comparison: built from a synthetic
//! results document covering every scenario of docs/results-format.md
//! (with JXSE rows) and from the real documents in docs/results/, then
//! checked as files and rendered in headless Chromium, which must report
//! every plot drawn.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use juxta_bench::{compare, csv_out, report};
use serde_json::{json, Value};

mod prereq;

/// The names Chromium goes by on `PATH` (Debian: `chromium`, Ubuntu:
/// `chromium-browser`).
const CHROMIUM: [&str; 2] = ["chromium", "chromium-browser"];

const LAYERS: [&str; 7] = [
    "tcp",
    "endpoint",
    "endpoint-compat",
    "unicast-pipe",
    "secure-pipe",
    "bidi-pipe",
    "socket",
];
const SIZES: [u64; 4] = [1, 1024, 65536, 1_048_576];

/// A results document with rows of every scenario, including JXSE rows.
fn synthetic_doc() -> Value {
    let mut rows = Vec::new();
    for imp in ["tcp", "juxta", "jxse"] {
        for (li, layer) in LAYERS.iter().enumerate() {
            if (imp == "tcp") != (*layer == "tcp") {
                continue;
            }
            if imp == "jxse" && !matches!(*layer, "endpoint" | "unicast-pipe" | "socket") {
                continue;
            }
            let slow = match imp {
                "tcp" => 1.0,
                "juxta" => 1.0 + li as f64 * 0.1,
                _ => 20.0 + li as f64,
            };
            for size in SIZES {
                let rtt = 16.0 * slow + size as f64 / 2000.0;
                let bw = size as f64 / rtt;
                rows.push(json!({
                    "scenario": "pingpong", "impl": imp, "layer": layer, "size": size,
                    "rtt_us_median": rtt, "rtt_us_p99": rtt * 2.5, "bandwidth_mb_s": bw,
                    "wire_bytes": size + if imp == "tcp" { 4 } else { 60 * li as u64 + 200 * (imp == "jxse") as u64 },
                    "rtt_ratio_vs_tcp": rtt / (16.0 + size as f64 / 2000.0),
                    "bandwidth_ratio_vs_tcp": (16.0 + size as f64 / 2000.0) / rtt,
                    "run_spread": 0.02, "pin": "same", "samples": 500
                }));
                if *layer != "tcp" {
                    for pattern in ["smooth", "bursty"] {
                        let rate = 1e6 / rtt / if pattern == "bursty" { 2.0 } else { 1.0 };
                        rows.push(json!({
                            "scenario": "throughput", "impl": imp, "layer": layer, "size": size,
                            "pattern": pattern, "msgs_per_s": rate,
                            "bandwidth_mb_s": rate * size as f64 / 1e6,
                            "loss_pct": if imp == "jxse" && size > 60000 { 12.5 } else { 0.0 }
                        }));
                    }
                }
            }
        }
    }
    for imp in ["juxta", "jxse"] {
        for receivers in [1, 2, 4, 8] {
            for size in [1u64, 1024] {
                rows.push(json!({
                    "scenario": "pingpong", "impl": imp, "layer": "propagate", "size": size,
                    "receivers": receivers, "rtt_us_median": 30.0 * receivers as f64 * if imp == "jxse" { 30.0 } else { 1.0 },
                    "rtt_us_p99": 90.0, "bandwidth_mb_s": 0.01, "wire_bytes": 300,
                    "rtt_ratio_vs_tcp": 2.0 * receivers as f64, "bandwidth_ratio_vs_tcp": 0.5
                }));
            }
        }
    }
    for layer in ["tcp", "endpoint", "unicast-pipe"] {
        for (n, es) in [(1, 20480), (5, 4096), (10, 2048), (20, 1024)] {
            rows.push(json!({"scenario": "composition", "layer": layer, "elements": n,
                "element_size": es, "rtt_us_median": 20.0 + n as f64 * if layer == "tcp" { 0.0 } else { 0.4 }}));
        }
        for senders in [1, 2, 4, 8] {
            rows.push(json!({"scenario": "senders", "layer": layer, "senders": senders, "size": 1,
                "msgs_per_s": 50000.0 + senders as f64 * 3000.0, "rtt_us_median": 16.0 * senders as f64}));
            rows.push(
                json!({"scenario": "senders", "layer": layer, "mode": "oneway",
                "senders": senders, "size": 65536, "msgs_per_s": 20000.0,
                "bandwidth_mb_s": 1310.72, "loss_pct": 0.0}),
            );
        }
        if layer == "tcp" {
            for size in [65536u64, 1 << 20] {
                rows.push(json!({"scenario": "buffers", "impl": "tcp", "layer": "tcp",
                    "window": null, "window_label": "kernel", "size": size, "rtt_us_median": 30.0,
                    "bandwidth_mb_s": size as f64 / 30.0, "bandwidth_ratio_vs_tcp": 1.0,
                    "stream_mb_s": 1500.0, "stream_ratio_vs_tcp": 1.0, "samples": 50}));
                for (w, label) in [
                    (json!(16384), "16 KiB"),
                    (json!(524288), "512 KiB"),
                    (json!(null), "auto"),
                ] {
                    rows.push(
                        json!({"scenario": "buffers", "impl": "juxta", "layer": "socket",
                        "window": w, "window_label": label, "size": size, "rtt_us_median": 60.0,
                        "bandwidth_mb_s": size as f64 / 60.0, "bandwidth_ratio_vs_tcp": 0.5,
                        "stream_mb_s": 700.0, "stream_ratio_vs_tcp": 0.47, "samples": 50}),
                    );
                }
            }
        }
        for offered in [10.0, 100.0, 1000.0, 10000.0] {
            rows.push(json!({"scenario": "throughput", "impl": if layer == "tcp" { "tcp" } else { "juxta" },
                "layer": layer, "size": 1024, "pattern": "paced", "offered_msgs_per_s": offered,
                "msgs_per_s": offered * 0.99, "bandwidth_mb_s": offered * 1024.0 / 1e6, "loss_pct": 0.0}));
        }
    }
    let ops = [
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
    for config in ["ad-hoc", "tcp-rendezvous"] {
        for (i, op) in ops.iter().enumerate() {
            rows.push(json!({"scenario": "ops", "operation": op, "config": config,
                "ms_median": 0.05 * (i + 1) as f64, "ms_p99": 0.2 * (i + 1) as f64}));
        }
    }
    for model in ["centralized", "flooding", "srdi"] {
        for edges in [4, 8, 16, 32] {
            for qps in [2, 4, 8, 16] {
                rows.push(
                    json!({"scenario": "rendezvous", "model": model, "edges": edges,
                    "rendezvous": 1, "offered_qps": qps, "queries_per_s": qps as f64 * 0.99,
                    "response_ms_p50": 1.0 + (edges * qps) as f64 / 10.0, "response_ms_p99": 9.0,
                    "loss_pct": if model == "flooding" { qps as f64 } else { 0.0 },
                    "cv": 0.3, "rdv_cpu_pct": 4.0, "rdv_rss_mb": 30.0}),
                );
            }
        }
    }
    for (edges, rdv, ms) in [(16, 4, 1200.0), (16, 4, 1350.0), (8, 2, 900.0)] {
        rows.push(
            json!({"scenario": "recovery", "edges": edges, "rendezvous": rdv, "recovery_ms": ms}),
        );
    }
    // The thesis' procedure (`--kill-every`): per-kill and summary rows.
    for topology in ["ring", "star"] {
        for kill in 1..=3u64 {
            rows.push(
                json!({"scenario": "recovery", "row": "kill", "topology": topology,
                "rendezvous": 4, "edges": 16, "kill_every_s": 10.0, "kill": kill,
                "live_rendezvous": 4 - kill, "orphaned": 4 * kill, "recovered": 4 * kill,
                "never_recovered": 0, "recovery_ms": [20.0, 30.0], "recovery_ms_p50": 20.0,
                "recovery_ms_p99": 30.0, "recovery_ms_max": 30.0}),
            );
        }
        rows.push(
            json!({"scenario": "recovery", "row": "summary", "topology": topology,
            "rendezvous": 4, "edges": 16, "kill_every_s": 10.0, "kills": 3, "orphaned": 24,
            "never_recovered": 0, "recovery_ms_p50": 20.0, "recovery_ms_p99": 30.0,
            "recovery_ms_max": 30.0, "recovery_ms_mean": 24.0}),
        );
    }
    for path in ["direct", "tcp-relay", "http-relay", "two-relays"] {
        for size in [1u64, 65536] {
            rows.push(json!({"scenario": "relay", "path": path, "layer": "unicast-pipe",
                "size": size, "rtt_us_median": 40.0 + size as f64 / 1000.0, "bandwidth_mb_s": 1.0 + size as f64 / 1e4}));
        }
        for offered in [1000.0, 5000.0, 20000.0] {
            rows.push(json!({"scenario": "relay", "path": path, "run": "overload-curve", "offered_msgs_per_s": offered,
                "delivered_msgs_per_s": f64::min(offered, 8000.0), "loss_pct": 0.0, "relay_rss_mb_max": 20.0}));
        }
    }
    for (i, process) in ["rendezvous", "relay", "client"].iter().enumerate() {
        let t: Vec<f64> = (0..60).map(|s| s as f64).collect();
        let rss: Vec<f64> = t.iter().map(|s| 15.0 + i as f64 + s / 600.0).collect();
        rows.push(
            json!({"scenario": "soak", "process": process, "role": "edge",
            "duration_s": 60.0, "samples": 60, "warmup_s": 30.0,
            "rss_mb_start": 15.05, "rss_mb_end": 15.1, "rss_mb_per_10min": 1.0,
            "fds_start": 20, "fds_end": 20, "fds_per_10min": 0.0,
            "threads_end": 6, "threads_per_10min": 0.0, "tasks_end": 9, "tasks_per_10min": 0.0,
            "ops": 1000, "errors": 0,
            "series": {"t_s": t, "rss_mb": rss, "fds": vec![20.0; 60], "threads": vec![6.0; 60],
                "tasks": vec![9.0; 60], "ops": vec![1.0; 60], "errors": vec![0.0; 60]}}),
        );
    }
    rows.push(
        json!({"scenario": "soak", "process": "total", "churn_edges": 6, "ops": 3000,
        "errors": 0, "socket_conns_ok": 10, "socket_conns_err": 0, "socket_bytes_lost": 0}),
    );
    for (i, kind) in ["rendezvous", "rendezvous", "relay", "edge"]
        .iter()
        .enumerate()
    {
        rows.push(json!({"scenario": "chaos", "row": "event", "event": i, "kind": kind,
            "target": format!("p{i}"), "live_rendezvous": 3 - i.min(2), "affected": 2, "recovered": 2,
            "never_recovered": 0, "recovery_ms": [50.0 + i as f64, 60.0], "recovery_ms_p50": 50.0,
            "recovery_ms_p99": 60.0, "recovery_ms_max": 60.0}));
    }
    rows.push(json!({"scenario": "chaos", "row": "summary", "rendezvous_kills": 2,
        "release_ms_p50": 55.0, "release_ms_p99": 60.0, "release_ms_max": 60.0, "never_recovered": 0,
        "socket_conns_ok": 10, "socket_conns_err": 1, "socket_bytes_lost": 0,
        "socket_bytes_out_of_order": 0, "lookups_failed_outside_recovery": 0}));
    // Another stack beside Juxta in the pingpong.
    for size in SIZES {
        let rtt = 40.0 + size as f64 / 1000.0;
        rows.push(json!({"scenario": "pingpong", "impl": "libp2p", "layer": "tcp-noise-yamux",
            "size": size, "rtt_us_median": rtt, "bandwidth_mb_s": size as f64 / rtt, "samples": 500}));
    }
    // `juxta bench mp`: de Souza's sizes, the matmul and the allreduce.
    for size in [
        2u64, 200, 1000, 20_000, 100_000, 200_000, 600_000, 1_000_000,
    ] {
        for (imp, layer, k) in [
            ("tcp", "tcp", 1.0),
            ("juxta", "mp", 1.2),
            ("mpi", "tcp", 0.9),
        ] {
            let rtt = k * (15.0 + size as f64 / 2000.0);
            rows.push(
                json!({"scenario": "mp-pingpong", "impl": imp, "layer": layer, "size": size,
                "rtt_us_median": rtt, "bandwidth_mb_s": 2.0 * size as f64 / rtt}),
            );
        }
    }
    for (imp, ranks, seconds) in [
        ("rust-seq", 1, 20.0),
        ("c-O0", 1, 60.0),
        ("c-O3", 1, 21.0),
        ("juxta", 2, 11.0),
        ("mpi", 2, 10.5),
    ] {
        rows.push(
            json!({"scenario": "matmul", "impl": imp, "ranks": ranks, "n": 2400,
            "seconds": seconds, "speedup": 20.0 / seconds, "checksum": 1.0}),
        );
    }
    for (imp, us) in [("juxta", 2300.0), ("mpi", 3400.0)] {
        rows.push(
            json!({"scenario": "mp-allreduce", "impl": imp, "ranks": 4, "bytes": 1_048_576,
            "us_median": us}),
        );
    }
    rows.push(json!({"scenario": "future-scenario", "mystery": [1, 2], "x": {"y": 1}}));
    json!({
        "command": "juxta bench --net lan",
        "machine": {"cores": 2, "kernel": "6.1.0", "cpu": "AMD EPYC", "git_commit": "abc", "git_dirty": false,
            "juxta_version": "0.1.0", "rustc": "rustc 1.95.0", "java": "openjdk 17.0.15"},
        "net": "lan", "started_unix": 1_790_000_000u64, "duration_s": 212.5,
        "noise": {"baseline_rtt_us_1b": [16.1, 16.4, 17.0], "spread": 0.055},
        "options": {"sizes": SIZES},
        "errors": [{"scenario": "relay", "message": "http relay <timed out> & retried"}],
        "results": rows
    })
}

/// Every plot the synthetic document must produce.
const SYNTHETIC_PLOTS: &[&str] = &[
    "plot-pingpong-bandwidth",
    "plot-pingpong-rtt",
    "plot-pingpong-rtt-1b",
    "plot-pingpong-wire",
    "plot-pingpong-wire-ratio",
    "plot-propagate-receivers",
    "plot-throughput-msgs",
    "plot-throughput-mbs",
    "plot-throughput-loss",
    "plot-throughput-paced",
    "plot-composition",
    "plot-senders-msgs",
    "plot-senders-mbs",
    "plot-senders-rtt",
    "plot-buffers",
    "plot-ops",
    "plot-rendezvous-response-qps",
    "plot-rendezvous-loss-qps",
    "plot-rendezvous-cv-qps",
    "plot-rendezvous-response-edges",
    "plot-rendezvous-loss-edges",
    "plot-recovery",
    "plot-relay-rtt",
    "plot-relay-bandwidth",
    "plot-relay-overload",
    "plot-relay-overload-loss",
    "plot-relay-overload-rss",
    "plot-soak-rss",
    "plot-soak-fds",
    "plot-soak-threads",
    "plot-soak-tasks",
    "plot-chaos-recovery",
    "plot-mp-rtt-small",
    "plot-mp-rtt-medium",
    "plot-mp-rtt-large",
];

const SYNTHETIC_TABLES: &[&str] = &[
    "table-study-figures",
    "table-pingpong-published",
    "table-like-for-like",
    "table-stacks",
    "table-pingpong-wire",
    "table-propagate",
    "table-throughput-published",
    "table-composition",
    "table-buffers",
    "table-ops",
    "table-rendezvous",
    "table-recovery",
    "table-recovery-thesis",
    "table-relay",
    "table-soak",
    "table-soak-totals",
    "table-chaos-events",
    "table-chaos-summary",
    "table-mp-pingpong",
    "table-matmul",
    "table-mp-allreduce",
];

fn real_docs() -> Vec<(PathBuf, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let v = compare::load(&p).unwrap_or_else(|e| panic!("{e}"));
            out.push((p, v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 5, "expected the docs/results/*.json examples");
    out
}

/// All real documents' rows in one document (the header of the first).
fn merged_real_doc() -> Value {
    let docs = real_docs();
    let mut merged = docs[0].1.clone();
    let rows: Vec<Value> = docs
        .iter()
        .flat_map(|(_, d)| d["results"].as_array().cloned().unwrap_or_default())
        .collect();
    merged["results"] = Value::Array(rows);
    merged
}

fn csv_rows(path: &Path) -> (Vec<String>, usize) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let head = r.headers().unwrap().iter().map(String::from).collect();
    let records: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    (head, records.len())
}

#[test]
fn csv_per_scenario_with_union_header() {
    let doc = synthetic_doc();
    let dir = tempfile::tempdir().unwrap();
    let files = csv_out::write_csvs(&doc, dir.path()).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for s in [
        "pingpong",
        "throughput",
        "composition",
        "senders",
        "ops",
        "rendezvous",
        "recovery",
        "relay",
        "soak",
        "chaos",
        "mp-pingpong",
        "matmul",
        "mp-allreduce",
        "future-scenario",
    ] {
        assert!(
            names.contains(&format!("{s}.csv")),
            "{s}.csv missing: {names:?}"
        );
    }
    let rows = doc["results"].as_array().unwrap();
    let count = |s: &str| rows.iter().filter(|r| r["scenario"] == s).count();
    for f in &files {
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        let (head, n) = csv_rows(f);
        assert_eq!(n, count(&stem), "{stem}: row count");
        assert_eq!(head[0], "scenario");
        // Union of fields: every field of every row appears exactly once.
        for r in rows.iter().filter(|r| r["scenario"] == stem.as_str()) {
            for k in r.as_object().unwrap().keys() {
                assert_eq!(head.iter().filter(|h| *h == k).count(), 1, "{stem}: {k}");
            }
        }
    }
    let (head, _) = csv_rows(&dir.path().join("pingpong.csv"));
    assert_eq!(&head[..4], ["scenario", "impl", "layer", "size"]);
    assert!(head.contains(&"receivers".to_string()));
    // Relay rows mix two shapes: the header is their union.
    let (head, n) = csv_rows(&dir.path().join("relay.csv"));
    assert_eq!(n, 20);
    for f in [
        "path",
        "rtt_us_median",
        "offered_msgs_per_s",
        "relay_rss_mb_max",
    ] {
        assert!(head.contains(&f.to_string()), "relay.csv lacks {f}");
    }

    // Real documents: one file per scenario, all rows kept.
    for (p, d) in real_docs() {
        let out = tempfile::tempdir().unwrap();
        let files = csv_out::write_csvs(&d, out.path()).unwrap();
        let rows = d["results"].as_array().unwrap();
        let mut scenarios: Vec<&str> = rows.iter().filter_map(|r| r["scenario"].as_str()).collect();
        scenarios.sort_unstable();
        scenarios.dedup();
        assert_eq!(files.len(), scenarios.len(), "{}", p.display());
        let mut total = 0;
        for f in &files {
            let (head, n) = csv_rows(f);
            assert_eq!(head[0], "scenario");
            total += n;
        }
        assert_eq!(total, rows.len(), "{}", p.display());
    }
}

fn assert_ids(html: &str, ids: &[&str]) {
    for id in ids {
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "{id} missing from the report"
        );
    }
}

#[test]
fn report_has_every_figure_and_table() {
    let doc = synthetic_doc();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.html");
    let s = report::write_report(&doc, &path).unwrap();
    assert_eq!(s.plot_ids, SYNTHETIC_PLOTS);
    assert_eq!(s.plots, SYNTHETIC_PLOTS.len());
    assert_eq!(s.table_ids, SYNTHETIC_TABLES);
    assert!(s.not_measured.is_empty(), "{:?}", s.not_measured);
    assert_eq!(s.unknown_scenarios, ["future-scenario"]);
    let html = std::fs::read_to_string(&path).unwrap();
    assert_ids(&html, SYNTHETIC_PLOTS);
    assert_ids(&html, SYNTHETIC_TABLES);
    // Self-contained: no external resources.
    for bad in ["src=\"http", "href=\"http", "<link", "@import", "url("] {
        assert!(!html.contains(bad), "external resource: {bad}");
    }
    // One svg per figure; header facts; the error is escaped.
    assert_eq!(html.matches("<svg").count(), SYNTHETIC_PLOTS.len());
    assert!(html.contains("AMD EPYC") && html.contains("juxta bench --net lan"));
    assert!(html.contains("2026-09-21 14:13:20 UTC"));
    assert!(html.contains("http relay &lt;timed out&gt; &amp; retried"));
    assert!(html.contains("5.5%"), "noise spread");
    // JXSE rows share the plots with juxta and tcp.
    assert!(html.contains("jxse unicast-pipe") && html.contains("juxta unicast-pipe"));
    // Published beside ours, as ratios to each side's bound.
    assert!(html.contains("JXTA-J2SE 2.3 (Fast Ethernet LAN): 2.000 ms = 28.57 x socket"));
    assert!(
        html.contains("juxta: 17.60 us = 1.100 x tcp (1 B)"),
        "ours as ratio"
    );
    assert!(html.contains("future-scenario (1 rows)"));
}

#[test]
fn sections_without_rows_say_not_measured() {
    let doc = json!({"results": [
        {"scenario": "ops", "operation": "start", "config": "ad-hoc", "ms_median": 12.0, "ms_p99": 20.0}
    ]});
    let (html, s) = report::render_report(&doc).unwrap();
    assert_eq!(s.plot_ids, ["plot-ops"]);
    assert_eq!(s.not_measured.len(), report::SECTIONS.len() - 1);
    assert_eq!(
        html.matches("Not measured in this run.").count(),
        report::SECTIONS.len() - 1
    );
    assert!(html.contains("5311"), "published start time beside ours");
}

#[test]
fn real_documents_render() {
    let doc = merged_real_doc();
    let (html, s) = report::render_report(&doc).unwrap();
    let expected = [
        "plot-pingpong-bandwidth",
        "plot-pingpong-rtt",
        "plot-pingpong-rtt-1b",
        "plot-pingpong-wire",
        "plot-pingpong-wire-ratio",
        "plot-propagate-receivers",
        "plot-throughput-msgs",
        "plot-throughput-mbs",
        "plot-throughput-loss",
        "plot-throughput-paced",
        "plot-composition",
        "plot-senders-msgs",
        "plot-senders-mbs",
        "plot-senders-rtt",
        "plot-buffers",
        "plot-ops",
        "plot-ops-cache",
        "plot-rendezvous-response-qps",
        "plot-rendezvous-loss-qps",
        "plot-rendezvous-cv-qps",
        "plot-rendezvous-response-edges",
        "plot-rendezvous-loss-edges",
        "plot-recovery",
        "plot-relay-rtt",
        "plot-relay-bandwidth",
        "plot-relay-overload",
        "plot-relay-overload-loss",
        "plot-relay-overload-rss",
        "plot-soak-rss",
        "plot-soak-fds",
        "plot-soak-threads",
        "plot-soak-tasks",
        "plot-chaos-recovery",
        "plot-mp-rtt-small",
        "plot-mp-rtt-medium",
        "plot-mp-rtt-large",
    ];
    assert_eq!(s.plot_ids, expected);
    assert_ids(&html, &expected);
    // Every section has rows in the committed results.
    assert!(s.not_measured.is_empty(), "{:?}", s.not_measured);
    // Each document alone renders too: plots for the scenarios the report
    // draws; a document of only other scenarios (`juxta bench mp`'s) is
    // listed as such, not dropped silently.
    for (p, d) in real_docs() {
        let (_, s) = report::render_report(&d).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let rows = d["results"].as_array().unwrap();
        let all_unknown = rows.iter().all(|r| {
            r["scenario"]
                .as_str()
                .is_some_and(|sc| s.unknown_scenarios.iter().any(|u| u == sc))
        });
        assert!(s.plots >= 1 || all_unknown, "{}: {s:?}", p.display());
    }
}

#[test]
fn odd_input_never_panics() {
    let odd = [
        json!(null),
        json!(42),
        json!("text"),
        json!({}),
        json!({"results": null}),
        json!({"results": []}),
        json!({"results": {"not": "an array"}}),
        json!([{"scenario": "pingpong", "layer": "tcp"}]),
        json!({"results": [1, "x", null, [], {}]}),
        json!({"noise": "loud", "errors": "many", "machine": [1], "started_unix": "yesterday", "results": [
            {"scenario": "pingpong", "impl": "juxta", "layer": "endpoint", "size": "big", "rtt_us_median": "fast"},
            {"scenario": "pingpong", "impl": "juxta", "layer": "endpoint", "size": 0, "rtt_us_median": 0, "bandwidth_mb_s": -1},
            {"scenario": "pingpong", "impl": 7, "layer": null, "size": 1e308, "rtt_us_median": 1e308, "wire_bytes": 1e-300},
            {"scenario": "throughput", "layer": "socket", "size": 1, "msgs_per_s": 5},
            {"scenario": "ops", "operation": "start"},
            {"scenario": "rendezvous", "model": "srdi", "offered_qps": 2, "response_ms_p50": 1.0},
            {"scenario": "recovery", "recovery_ms": 5},
            {"scenario": "relay", "path": "direct"},
            {"scenario": "composition", "elements": 1, "rtt_us_median": 3},
            {"scenario": "senders", "senders": 1},
            {"scenario": "", "x": 1},
            {"scenario": "../../etc/passwd", "x": 1},
            {"scenario": "brand-new", "field": {"nested": true}},
        ]}),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, doc) in odd.iter().enumerate() {
        let s = report::write_report(doc, &dir.path().join(format!("r{i}.html")))
            .unwrap_or_else(|e| panic!("doc {i}: {e}"));
        assert!(s.plots <= SYNTHETIC_PLOTS.len());
        let csv_dir = dir.path().join(format!("csv{i}"));
        let files = csv_out::write_csvs(doc, &csv_dir).unwrap_or_else(|e| panic!("doc {i}: {e}"));
        for f in &files {
            assert!(
                f.starts_with(&csv_dir),
                "{} escapes the CSV dir",
                f.display()
            );
        }
        let c = compare::compare(doc, &synthetic_doc());
        let mut out = Vec::new();
        c.print_table(&mut out).unwrap();
        compare::write_html(&c, &dir.path().join(format!("c{i}.html"))).unwrap();
    }
    let (_, s) = report::render_report(&odd[0]).unwrap();
    assert_eq!(s.plots, 0);
    assert_eq!(s.not_measured.len(), report::SECTIONS.len());
}

fn pingpong_row(layer: &str, size: u64, rtt: f64, bw: f64) -> Value {
    let imp = if layer == "tcp" { "tcp" } else { "juxta" };
    json!({"scenario": "pingpong", "impl": imp, "layer": layer, "size": size,
        "rtt_us_median": rtt, "bandwidth_mb_s": bw, "samples": 500})
}

fn compare_docs() -> (Value, Value) {
    let a = json!({"command": "run a", "results": [
        pingpong_row("tcp", 1, 16.0, 0.06),
        pingpong_row("endpoint", 1, 20.0, 0.05),
        {"scenario": "throughput", "layer": "socket", "size": 1, "pattern": "smooth", "msgs_per_s": 1000.0},
        {"scenario": "ops", "operation": "start", "config": "ad-hoc", "ms_median": 0.0},
    ]});
    let b = json!({"command": "run b", "results": [
        pingpong_row("endpoint", 1, 10.0, 0.1),
        pingpong_row("tcp", 1, 16.0, 0.06),
        pingpong_row("endpoint", 1024, 30.0, 30.0),
        {"scenario": "ops", "operation": "start", "config": "ad-hoc", "ms_median": 3.0, "new_field": 1},
    ]});
    (a, b)
}

#[test]
fn compare_matches_rows_and_computes_ratios() {
    let (a, b) = compare_docs();
    let c = compare::compare(&a, &b);
    assert_eq!(c.matched.len(), 3);
    let ep = c
        .matched
        .iter()
        .find(|m| m.key.label() == "impl=juxta layer=endpoint size=1")
        .expect("endpoint row matched");
    let fig = |f: &str| ep.figures.iter().find(|x| x.field == f).unwrap();
    assert_eq!(fig("rtt_us_median").ratio, Some(0.5));
    assert_eq!(fig("rtt_us_median").improved(), Some(true));
    assert_eq!(fig("bandwidth_mb_s").ratio, Some(2.0));
    assert!(ep.figures.iter().all(|f| f.field != "samples"));
    let tcp = c
        .matched
        .iter()
        .find(|m| m.key.label().contains("layer=tcp"))
        .unwrap();
    assert!(tcp
        .figures
        .iter()
        .all(|f| f.ratio == Some(1.0) && f.improved().is_none()));
    let ops = c.matched.iter().find(|m| m.key.scenario == "ops").unwrap();
    assert_eq!(ops.figures.len(), 1, "only common figures");
    assert_eq!(ops.figures[0].ratio, None, "a = 0: no ratio");
    assert_eq!(c.only_a.len(), 1);
    assert_eq!(c.only_a[0].scenario, "throughput");
    assert_eq!(c.only_b.len(), 1);
    assert_eq!(c.only_b[0].label(), "impl=juxta layer=endpoint size=1024");

    let mut out = Vec::new();
    c.print_table(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("only in a:") && text.contains("only in b:"));
    assert!(text.contains("throughput layer=socket pattern=smooth size=1"));
    assert!(text.contains("0.500") && text.contains("better"));

    let dir = tempfile::tempdir().unwrap();
    let s = compare::write_html(&c, &dir.path().join("compare.html")).unwrap();
    assert_eq!(s.plot_ids, ["plot-compare-pingpong"]);
    let html = std::fs::read_to_string(dir.path().join("compare.html")).unwrap();
    assert!(html.contains("id=\"table-only-a\"") && html.contains("id=\"table-only-b\""));

    // Same document: every ratio 1, nothing one-sided.
    let same = compare::compare(&b, &b);
    assert!(same.only_a.is_empty() && same.only_b.is_empty());
    assert!(same
        .matched
        .iter()
        .flat_map(|m| &m.figures)
        .all(|f| f.ratio == Some(1.0)));
}

#[test]
fn compare_load_accepts_dir_or_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = compare_docs();
    std::fs::write(dir.path().join("results.json"), a.to_string()).unwrap();
    assert_eq!(compare::load(dir.path()).unwrap(), a);
    assert_eq!(compare::load(&dir.path().join("results.json")).unwrap(), a);
    std::fs::write(dir.path().join("bad.json"), "{not json").unwrap();
    assert!(matches!(
        compare::load(&dir.path().join("bad.json")),
        Err(report::ReportError::Json { .. })
    ));
    assert!(matches!(
        compare::load(&dir.path().join("missing.json")),
        Err(report::ReportError::Read { .. })
    ));
}

/// Loads `page` in headless `chromium` and returns the DOM after the
/// scripts ran.
fn chromium_dom(chromium: &Path, page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let out_path = out_dir.path().join("dom.html");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--virtual-time-budget=5000")
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::from(out))
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            // Kill our own child by its PID, then reap it.
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium (pid {}) hung on {}", child.id(), page.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "chromium failed: {status}");
    std::fs::read_to_string(&out_path).unwrap()
}

/// The `data-plots-ok` value chromium wrote on `<body>`.
fn plots_ok(dom: &str) -> String {
    let at = dom.find("data-plots-ok=\"").unwrap_or_else(|| {
        panic!("no data-plots-ok in the dumped DOM: the check script did not run")
    });
    let rest = &dom[at + "data-plots-ok=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

#[test]
fn chromium_renders_every_plot() {
    let chromium = prereq::on_path(&CHROMIUM);
    if !prereq::require(
        "Chromium (`chromium` or `chromium-browser` on PATH; `apt-get install chromium`)",
        chromium.is_some(),
    ) {
        return;
    }
    let chromium = chromium.expect("checked above");
    let dir = tempfile::tempdir().unwrap();
    let synthetic = dir.path().join("synthetic.html");
    let s = report::write_report(&synthetic_doc(), &synthetic).unwrap();
    let real = dir.path().join("real.html");
    let r = report::write_report(&merged_real_doc(), &real).unwrap();
    let (a, b) = compare_docs();
    let cmp = dir.path().join("compare.html");
    let c = compare::write_html(&compare::compare(&a, &b), &cmp).unwrap();
    let cmp_real = dir.path().join("compare-real.html");
    let docs = real_docs();
    let named = |n: &str| {
        docs.iter()
            .find(|(p, _)| p.file_name().is_some_and(|f| f == n))
            .map(|(_, d)| d.clone())
            .unwrap_or_else(|| panic!("docs/results/{n} missing"))
    };
    let cr = compare::write_html(
        &compare::compare(&named("pingpong-same.json"), &named("pingpong-split.json")),
        &cmp_real,
    )
    .unwrap();
    assert!(cr.plots >= 1);

    // To look at the pages: JUXTA_REPORT_KEEP=/some/dir cargo test ... chromium
    if let Some(keep) = std::env::var_os("JUXTA_REPORT_KEEP") {
        for p in [&synthetic, &real, &cmp, &cmp_real] {
            std::fs::copy(p, Path::new(&keep).join(p.file_name().unwrap())).unwrap();
        }
    }
    for (page, n) in [
        (synthetic, s.plots),
        (real, r.plots),
        (cmp, c.plots),
        (cmp_real, cr.plots),
    ] {
        let dom = chromium_dom(&chromium, &page);
        assert_eq!(plots_ok(&dom), format!("{n}/{n}"), "{}", page.display());
        assert!(!dom.contains("data-rendered=\"bad\""), "{}", page.display());
        assert_eq!(dom.matches("data-rendered=\"ok\"").count(), n);
    }
}

/// The studies' table of contents lists every study figure by its id,
/// says for each where it is reproduced or why it cannot be, and marks
/// the ones this run measured.
#[test]
fn study_toc_lists_every_figure() {
    use juxta_bench::report::published::STUDY_FIGURES;
    let doc = json!({"results": [
        {"scenario": "ops", "operation": "start", "config": "ad-hoc", "ms_median": 12.0, "ms_p99": 20.0}
    ]});
    let (html, s) = report::render_report(&doc).unwrap();
    assert_eq!(
        s.table_ids.first().map(String::as_str),
        Some(report::STUDY_TOC_ID)
    );
    let start = html
        .find(&format!("id=\"{}\"", report::STUDY_TOC_ID))
        .expect("the table of contents");
    let toc = &html[start..start + html[start..].find("</table>").unwrap()];
    let mut ids = std::collections::HashSet::new();
    for f in STUDY_FIGURES {
        assert!(ids.insert(f.id), "figure id {} twice", f.id);
        assert!(
            toc.contains(&format!("<td>{}</td>", f.id)),
            "{} not in the TOC",
            f.id
        );
        // Each figure points at a section of the report.
        assert!(
            report::SECTIONS.iter().any(|(_, id, _)| *id == f.section),
            "{} names no section",
            f.id
        );
        assert!(!f.published.is_empty() && !f.ours.is_empty(), "{}", f.id);
    }
    // Every study of the model is there, the figures the issue names too.
    for id in [
        "thesis-fig-6.1",
        "thesis-figs-6.14-6.17",
        "juxtest-fig-9",
        "thesis-relay-overload",
    ] {
        assert!(STUDY_FIGURES.iter().any(|f| f.id == id), "{id}");
    }
    // Those it cannot reproduce say why; the ops table of this run is
    // marked as reproduced.
    assert!(toc.contains("not reproduced: no JXTA-C build here"));
    let ops_line = toc
        .split("<tr>")
        .find(|r| r.contains("<td>thesis-ops-tcp-lan</td>"))
        .unwrap();
    assert!(ops_line.contains("reproduced in this run"), "{ops_line}");
}

/// The thesis' recovery figure counts as reproduced only with rows of its
/// procedure (`--kill-every`, per topology), not with the two-rendezvous
/// single kills of the default run, which are another experiment.
#[test]
fn thesis_recovery_needs_the_thesis_procedure() {
    let line = |rows: Value| {
        let (html, _) = report::render_report(&json!({ "results": rows })).unwrap();
        let start = html
            .find(&format!("id=\"{}\"", report::STUDY_TOC_ID))
            .unwrap();
        let toc = html[start..start + html[start..].find("</table>").unwrap()].to_string();
        toc.split("<tr>")
            .find(|r| r.contains("<td>thesis-recovery</td>"))
            .unwrap()
            .to_string()
    };
    let single =
        json!([{"scenario": "recovery", "edges": 64, "rendezvous": 2, "recovery_ms": 25.0}]);
    let l = line(single);
    assert!(l.contains("reproducible, not measured in this run"), "{l}");
    assert!(l.contains("--kill-every"), "{l}");
    let thesis = json!([
        {"scenario": "recovery", "edges": 64, "rendezvous": 2, "recovery_ms": 25.0},
        {"scenario": "recovery", "row": "summary", "topology": "ring", "rendezvous": 4,
         "edges": 16, "kill_every_s": 10.0, "kills": 3, "orphaned": 24, "never_recovered": 0,
         "recovery_ms_p50": 20.0, "recovery_ms_p99": 30.0, "recovery_ms_max": 30.0,
         "recovery_ms_mean": 24.0}
    ]);
    let l = line(thesis);
    assert!(l.contains("reproduced in this run"), "{l}");
    assert!(!l.contains("not measured"), "{l}");
}

/// A figure measured on another link than the study's says so: the
/// synthetic run is on `lan`, so JuxTest's LAN layers are reproduced and
/// its WAN and SAN figures are measured but not under the study's link.
#[test]
fn figures_name_the_study_link_when_the_run_used_another() {
    let (html, _) = report::render_report(&synthetic_doc()).unwrap();
    let start = html
        .find(&format!("id=\"{}\"", report::STUDY_TOC_ID))
        .unwrap();
    let toc = &html[start..start + html[start..].find("</table>").unwrap()];
    let line = |id: &str| {
        toc.split("<tr>")
            .find(|r| r.contains(&format!("<td>{id}</td>")))
            .unwrap()
            .to_string()
    };
    let lan = line("juxtest-lan-layers");
    assert!(lan.contains("reproduced in this run"), "{lan}");
    for (id, link) in [("juxtest-wan", "wan"), ("juxtest-san-layers", "san")] {
        let l = line(id);
        assert!(
            l.contains(&format!(
                "measured in this run on lan, not on the study&#39;s link ({link})"
            )),
            "{l}"
        );
    }
}
