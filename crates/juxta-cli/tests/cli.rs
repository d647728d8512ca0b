//! The `juxta` command's answers to bad input: each names what to do and
//! exits with a failure status, without running anything.

use std::process::{Command, Output};

fn juxta(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_juxta"))
        .args(args)
        .output()
        .expect("run juxta")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_unknown_scenario_is_refused_with_the_list_of_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let o = juxta(&[
        "bench",
        "--scenarios",
        "pingpong,bogus",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("unknown scenario \"bogus\""), "{e}");
    assert!(e.contains("pingpong") && e.contains("throughput"), "{e}");
    assert!(!out.exists(), "nothing may run or be written");
}

#[test]
fn bad_relay_paths_and_layers_are_refused() {
    let o = juxta(&["bench", "relay", "--paths", "carrier-pigeon"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("carrier-pigeon") && e.contains("two-relays"),
        "{e}"
    );
    let o = juxta(&["bench", "relay", "--layers", "endpoint"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("endpoint") && e.contains("socket"), "{e}");
    let o = juxta(&["bench", "relay", "--curve-factors", "2,-1"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--curve-factors"), "{}", stderr(&o));
}

#[test]
fn the_relay_overload_runs_against_a_relay_process() {
    // The overload relay is this binary re-run as `juxta relay-serve`.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("relay.json");
    let o = juxta(&[
        "bench",
        "relay",
        "--paths",
        "tcp-relay",
        "--layers",
        "unicast-pipe",
        "--sizes",
        "1",
        "--pairs",
        "3",
        "--stream-ms",
        "50",
        "--overload-secs",
        "1",
        "--sink-rate",
        "200",
        "--curve-point-secs",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    says_what_produced_it(&doc, "relay");
    let rows = doc["results"].as_array().unwrap();
    for path in ["direct", "tcp-relay"] {
        assert!(
            rows.iter()
                .any(|r| r["path"] == path && r["rtt_us_median"].as_f64().unwrap_or(0.0) > 0.0),
            "no {path} row: {rows:?}"
        );
    }
    let o = rows
        .iter()
        .find(|r| r["run"] == "overload")
        .expect("overload row");
    assert!(o["relay_rss_mb_max"].as_f64().unwrap() > 0.0, "{o}");
    let loss = o["loss_pct"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&loss), "{o}");
}

#[test]
fn the_relay_paths_run_against_relay_processes() {
    // Each path's relay is this binary re-run as `juxta relay-serve`
    // (two-relays: R1 started with `--peer <R2>`; http-relay: with
    // `--http-listen`; firewalled: with `--rendezvous`).
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("relay.json");
    let o = juxta(&[
        "bench",
        "relay",
        "--paths",
        "http-relay,two-relays,firewalled",
        "--layers",
        "unicast-pipe,socket",
        "--sizes",
        "1",
        "--pairs",
        "3",
        "--stream-ms",
        "50",
        "--transfer",
        "1M",
        "--overload-secs",
        "0",
        "--curve-point-secs",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = doc["results"].as_array().unwrap();
    for path in ["direct", "firewalled"] {
        let t = rows
            .iter()
            .find(|r| r["path"] == path && r["run"] == "transfer")
            .unwrap_or_else(|| panic!("no {path} transfer row: {rows:?}"));
        assert_eq!(t["size"], 1 << 20);
        assert!(t["bandwidth_mb_s"].as_f64().unwrap() > 0.0, "{t}");
    }
    for path in ["direct", "http-relay", "two-relays", "firewalled"] {
        for layer in ["unicast-pipe", "socket"] {
            let r = rows
                .iter()
                .find(|r| r["path"] == path && r["layer"] == layer)
                .unwrap_or_else(|| panic!("no {path} {layer} row: {rows:?}"));
            assert!(r["rtt_us_median"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["bandwidth_mb_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["rtt_ratio_vs_direct"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    assert!(rows.iter().all(|r| r["run"] != "overload"), "{rows:?}");
}

#[test]
fn an_unknown_layer_is_refused() {
    let o = juxta(&["bench", "--layers", "carrier-pigeon"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("unknown layer") && e.contains("unicast-pipe"),
        "{e}"
    );
}

#[test]
fn an_unwritable_output_directory_is_refused_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let out = file.join("results");
    let o = juxta(&["bench", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("--out") && e.contains("cannot create"), "{e}");
}

#[test]
fn a_bad_pin_value_is_refused() {
    let o = juxta(&["bench", "--pin", "sideways"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("same, split or none"), "{}", stderr(&o));
}

#[test]
fn the_default_run_covers_scenarios_that_run_their_own_processes() {
    // recovery re-runs this binary as rendezvous processes and kills one.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let o = juxta(&[
        "bench",
        "--scenarios",
        "recovery",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let rows = doc["results"].as_array().unwrap();
    assert!(!rows.is_empty());
    // One row per kill, then their summary.
    let (summary, kills) = rows.split_last().unwrap();
    assert!(!kills.is_empty());
    for r in kills {
        assert_eq!(r["scenario"], "recovery");
        assert!(r["recovery_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["rendezvous"], 2);
    }
    assert_eq!(summary["row"], "summary", "{summary}");
    assert_eq!(summary["kills"].as_u64().unwrap() as usize, kills.len());
    let max = kills
        .iter()
        .map(|r| r["recovery_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(
        summary["recovery_ms_max"].as_f64().unwrap(),
        max,
        "{summary}"
    );
    assert!(out.join("recovery.csv").exists());
    assert!(out.join("report.html").exists());
}

#[test]
fn unknown_profile_and_implementation_names_are_refused() {
    let o = juxta(&["bench", "--net", "adsl"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("adsl") && e.contains("wan"), "{e}");
    let o = juxta(&["bench", "--impl", "jxta-c"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("jxta-c") && e.contains("jxse"), "{e}");
}

#[test]
fn compare_prints_ratios_and_writes_a_page() {
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/results");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("cmp.html");
    let o = juxta(&[
        "bench",
        "compare",
        &format!("{docs}/pingpong-same.json"),
        &format!("{docs}/pingpong-split.json"),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("rtt_us_median"), "{out}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg"), "no plot in the page");
    let o = juxta(&["bench", "compare", "/nonexistent/a", "/nonexistent/b"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("/nonexistent/a"), "{}", stderr(&o));
}

#[test]
fn soak_refuses_a_bad_length_and_the_worker_a_bad_spec() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    let o = juxta(&[
        "bench",
        "soak",
        "--seconds",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("must be positive"), "{}", stderr(&o));
    assert!(!out.exists(), "nothing may run or be written");
    let o = juxta(&["soak-worker", "{not json"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("bad spec"), "{}", stderr(&o));
}

#[test]
fn a_short_soak_runs_its_peers_as_juxta_processes() {
    // Every peer is this binary re-run as `juxta soak-worker`.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    let o = juxta(&[
        "bench",
        "soak",
        "--seconds",
        "3",
        "--churn-secs",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let rows = doc["results"].as_array().unwrap();
    let procs: Vec<&str> = rows.iter().filter_map(|r| r["process"].as_str()).collect();
    assert_eq!(
        procs,
        [
            "rendezvous",
            "relay",
            "server",
            "client",
            "relay-echo",
            "relay-ping",
            "total"
        ]
    );
    for r in &rows[..6] {
        assert!(r["samples"].as_u64().unwrap() >= 1, "{r}");
        assert!(r["rss_mb_end"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(rows[6]["socket_bytes_lost"], 0);
    assert_eq!(rows[6]["socket_bytes_out_of_order"], 0);
    assert!(out.join("report.html").exists() && out.join("soak-samples.csv").exists());
}

/// A results file names the command, the commit and the machine that
/// produced it (issue #13: every file under docs/results does).
fn says_what_produced_it(doc: &serde_json::Value, scenario: &str) {
    let command = doc["command"].as_str().unwrap_or_default();
    assert!(
        command.contains("bench") && command.contains(scenario),
        "{doc}"
    );
    assert!(
        doc["machine"]["git_commit"].is_string(),
        "{}",
        doc["machine"]
    );
    assert!(
        doc["machine"]["cores"].as_u64().unwrap_or(0) >= 1,
        "{}",
        doc["machine"]
    );
}

#[test]
fn ops_results_say_what_produced_them() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ops.json");
    let o = juxta(&[
        "bench",
        "ops",
        "--configs",
        "ad-hoc",
        "--runs",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    says_what_produced_it(&doc, "ops");
    assert!(!doc["results"].as_array().unwrap().is_empty(), "{doc}");
}
