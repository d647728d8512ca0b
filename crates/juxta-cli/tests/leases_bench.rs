//! `juxta bench leases` (issue #16): a small run holds every lease from
//! several loopback source addresses, reports the rendezvous process' RSS,
//! renewals during the hold and the probe's lookups, and stops the
//! rendezvous process; bad options are refused. No timing thresholds.

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

/// Whether process `pid` still runs (a zombie counts as stopped).
fn running(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[test]
fn forty_edges_over_three_addresses_all_lease_and_the_rendezvous_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("leases.json");
    let ids = dir.path().join("ids");
    let o = juxta(&[
        "bench",
        "leases",
        "--edges",
        "40",
        "--per-addr",
        "16",
        "--in-flight",
        "8",
        "--hold-ms",
        "2000",
        // Renewals during the hold even on a slow debug build.
        "--heartbeat-ms",
        "300",
        "--response-timeout-ms",
        "5000",
        "--identities",
        ids.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(doc["command"].is_string(), "{doc}");
    assert!(doc["machine"].is_object(), "{doc}");
    let rows = doc["results"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r["scenario"], "leases", "{r}");
    assert_eq!(r["edges"], 40, "{r}");
    assert_eq!(r["leased"], 40, "{r}");
    assert_eq!(r["failed"], serde_json::json!({}), "{r}");
    assert_eq!(r["source_addrs"], 3, "{r}");
    assert_eq!(r["identities"]["generated"], 40, "{r}");
    // The rendezvous counts every edge (and the probe) as leased at the end.
    assert_eq!(r["rdv_clients_end"], 41, "{r}");
    // And every client still holds its lease when stopped.
    assert_eq!(r["leased_end"], 40, "{r}");
    assert!(r["granted_lease_ms"].as_i64().unwrap() > 0, "{r}");
    for f in [
        "rdv_rss_mb_before",
        "rdv_rss_mb_after",
        "rdv_rss_mb_end",
        "rdv_hwm_mb",
        "rdv_cpu_s_total",
        "bench_rss_mb",
    ] {
        assert!(r[f].as_f64().unwrap() > 0.0, "{f}: {r}");
    }
    assert!(r["rss_kb_per_edge"].is_number(), "{r}");
    assert!(r["renewals_ok"].as_u64().unwrap() > 0, "{r}");
    assert!(r["probe_idle_n"].as_u64().unwrap() > 0, "{r}");
    assert!(r["probe_hold_n"].as_u64().unwrap() > 0, "{r}");
    let pid = r["rdv_pid"].as_u64().unwrap();
    assert!(pid > 0);
    assert!(!running(pid), "rendezvous {pid} still runs");

    // Again: the identities come from the directory this time; with
    // discovery queries from the clients, forwarded by the rendezvous to
    // the client that published each name.
    let o = juxta(&[
        "bench",
        "leases",
        "--edges",
        "40",
        "--per-addr",
        "16",
        "--hold-ms",
        "200",
        "--query-rate",
        "100,300",
        "--query-ms",
        "1000",
        "--positive-pct",
        "60",
        "--names-per-edge",
        "3",
        // Long enough that nothing counts as lost on a slow machine: the
        // run waits only until every positive query arrived.
        "--query-timeout-ms",
        "60000",
        "--identities",
        ids.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let r = &doc["results"][0];
    assert_eq!(r["leased"], 40, "{r}");
    assert_eq!(r["identities"]["loaded"], 40, "{r}");
    assert_eq!(r["identities"]["generated"], 0, "{r}");
    let q = r["queries"].as_array().unwrap();
    assert_eq!(q.len(), 2, "{r}");
    // The same rates through the plain-TCP forwarder, in the same run.
    let b = r["query_baseline"].as_array().unwrap();
    assert_eq!(b.len(), 2, "{r}");
    for (row, rate) in q.iter().zip([100, 300]).chain(b.iter().zip([100, 300])) {
        assert_eq!(row["offered_per_s"], rate, "{row}");
        assert_eq!(row["not_sent"], 0, "{row}");
        let sent = row["sent"].as_u64().unwrap();
        let positive = row["sent_positive"].as_u64().unwrap();
        assert!(sent > 0 && positive > 0 && positive < sent, "{row}");
        // Every query for a published name reached its publisher, once;
        // nothing else was forwarded.
        assert_eq!(row["forwarded"], positive, "{row}");
        assert_eq!(row["loss_pct"], 0.0, "{row}");
        assert_eq!(row["duplicates"], 0, "{row}");
        assert_eq!(row["negative_arrived"], 0, "{row}");
        assert_eq!(row["stray"], 0, "{row}");
        assert!(row["p99_ms"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["rdv_us_per_query"].is_number(), "{row}");
    }
    assert!(!running(r["rdv_pid"].as_u64().unwrap()));
    assert!(!running(r["query_forward_pid"].as_u64().unwrap()));
}

#[test]
fn options_the_rendezvous_would_refuse_are_refused_first() {
    for args in [
        &["--edges", "4", "--per-addr", "33"][..],
        &["--edges", "0"][..],
        &["--edges", "4", "--in-flight", "0"][..],
        &["--edges", "4", "--query-rate", "100,0"][..],
        &["--edges", "1", "--query-rate", "100"][..],
        &[
            "--edges",
            "4",
            "--query-rate",
            "100",
            "--positive-pct",
            "101",
        ][..],
        &[
            "--edges",
            "4",
            "--query-rate",
            "100",
            "--names-per-edge",
            "0",
        ][..],
        &[
            "--edges",
            "4",
            "--query-rate",
            "100000000",
            "--query-ms",
            "10000",
        ][..],
    ] {
        let mut all = vec!["bench", "leases"];
        all.extend_from_slice(args);
        let o = juxta(&all);
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(stderr(&o).contains("bad option"), "{}", stderr(&o));
    }
}
