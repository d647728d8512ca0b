//! The scenarios whose peers are processes of their own (relay,
//! rendezvous, recovery) honour `--net`: the relays and rendezvous run in
//! the responder namespace, the edges in the client namespace, so their
//! traffic crosses the emulated link (a behaviour check: the measured
//! RTT is at least the profile's). `ops` runs its far-side peers on a
//! thread in the responder namespace; its subgroup configurations refuse a
//! profile, naming the flag. Needs root and iproute2 (CI runs as root): elsewhere the
//! namespace tests print `skipped: …`, with env `CI=true` they fail.

use std::path::Path;
use std::process::Command;

#[path = "../../juxta/tests/prereq/mod.rs"]
mod prereq;

const JUXTA: &str = env!("CARGO_BIN_EXE_juxta");

/// Runs `juxta bench <args> --json <tmp>` and returns the result rows;
/// checks that the run left none of its namespaces behind (they are named
/// after its PID, so the tests of this file running in parallel do not
/// see each other's).
fn bench_rows(args: &[&str]) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let child = Command::new(JUXTA)
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "juxta bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        no_namespaces_left_by(&format!("juxta-{pid}-")),
        "juxta bench {args:?} left namespaces behind"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(doc["command"].is_string());
    doc["results"].as_array().unwrap().clone()
}

/// No namespace of this test's children is left behind.
fn no_namespaces_left_by(pid_prefix: &str) -> bool {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with(pid_prefix))
        })
        .unwrap_or(true)
}

#[test]
fn relay_runs_across_a_lan_profile() {
    if !prereq::require_ok(prereq::netns()) {
        return;
    }
    let rows = bench_rows(&[
        "relay",
        "--net",
        "lan",
        "--paths",
        "tcp-relay",
        "--layers",
        "unicast-pipe,bidi-pipe",
        "--sizes",
        "1",
        "--pairs",
        "5",
        "--stream-ms",
        "100",
        "--transfer",
        "0",
        "--overload-secs",
        "0",
        "--curve-factors",
        "1",
        "--curve-point-secs",
        "1",
    ]);
    // Through the relay across the link: A -> relay -> B and back is two
    // crossings each way, at least the profile's RTT twice.
    for layer in ["unicast-pipe", "bidi-pipe"] {
        let r = rows
            .iter()
            .find(|r| r["path"] == "tcp-relay" && r["layer"] == layer && r["run"] == "pingpong")
            .unwrap_or_else(|| panic!("no tcp-relay {layer} row: {rows:?}"));
        assert!(r["rtt_us_median"].as_f64().unwrap() >= 2.0 * 70.0, "{r}");
    }
    let c: Vec<_> = rows
        .iter()
        .filter(|r| r["run"] == "overload-curve")
        .collect();
    assert_eq!(c.len(), 1, "{rows:?}");
    assert!(c[0]["delivered_msgs_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn rendezvous_and_recovery_run_across_a_lan_profile() {
    if !prereq::require_ok(prereq::netns()) {
        return;
    }
    let rows = bench_rows(&[
        "rendezvous",
        "--net",
        "lan",
        "--model",
        "srdi",
        "--edges",
        "2",
        "--rendezvous",
        "1",
        "--rate",
        "8",
        "--duration-ms",
        "1000",
    ]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert!(r.get("error").is_none(), "{r}");
    // Every answered query crossed the link to the rendezvous and back.
    assert!(r["response_ms_mean"].as_f64().unwrap() >= 0.07, "{r}");
    let rows = bench_rows(&["recovery", "--net", "lan", "--edges", "2", "--repeats", "1"]);
    assert_eq!(rows.len(), 2, "one kill and the summary: {rows:?}");
    assert!(rows[0]["recovery_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(rows[1]["row"], "summary", "{rows:?}");
    assert_eq!(rows[1]["kills"], 1, "{rows:?}");
}

/// `ops` runs across a profile: the publisher (ad-hoc), the rendezvous and
/// the publishing edge (rendezvous) in the responder namespace, the querier
/// in the client's, so every remote operation crosses the link (at least
/// one RTT of the profile) while local ones do not.
#[test]
fn ops_runs_across_a_lan_profile() {
    if !prereq::require_ok(prereq::netns()) {
        return;
    }
    let rows = bench_rows(&[
        "ops",
        "--net",
        "lan",
        "--runs",
        "2",
        "--configs",
        "ad-hoc,rendezvous",
    ]);
    let ms = |config: &str, op: &str| {
        rows.iter()
            .find(|r| r["config"] == config && r["operation"] == op)
            .unwrap_or_else(|| panic!("{config} {op} in {rows:?}"))["ms_median"]
            .as_f64()
            .unwrap()
    };
    for config in ["ad-hoc", "rendezvous"] {
        // The lan profile's RTT is 70 us: a remote answer takes at least one.
        for op in ["remote-peers", "remote-pipe", "open-output-pipe"] {
            assert!(ms(config, op) >= 0.07, "{config} {op}: {rows:?}");
        }
        assert!(ms(config, "cached-pipe") >= 0.0);
    }
}

/// Scenarios and configurations that cannot sit across a link refuse a
/// profile up front, naming --net (no root needed: refused before any
/// namespace exists).
#[test]
fn subgroup_ops_and_successive_recovery_refuse_a_profile() {
    for args in [
        &["ops", "--net", "wan", "--configs", "ad-hoc,subgroup"][..],
        &["ops", "--net", "wan", "--configs", "subgroup-rendezvous"][..],
        &["recovery", "--net", "wan", "--kill-every", "5"][..],
    ] {
        let out = Command::new(JUXTA)
            .arg("bench")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--net wan"), "{args:?}: {err}");
        assert!(err.contains("drop --net"), "{args:?}: {err}");
    }
    assert!(Path::new(JUXTA).exists());
}
