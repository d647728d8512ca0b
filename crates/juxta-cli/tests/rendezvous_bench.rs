//! `juxta bench rendezvous` with discovery queries (PDP) and `juxta bench
//! recovery --kill-every`: rows carry every parameter, combinations that
//! cannot be honoured are refused before anything runs, successive kills
//! are each reported. Short parameters; no timing thresholds.

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

fn results(path: &std::path::Path) -> Vec<serde_json::Value> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert!(doc["command"].is_string(), "{doc}");
    doc["results"].as_array().unwrap().clone()
}

#[test]
fn pdp_rows_record_their_parameters_and_find_published_advertisements() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("rdv.json");
    let o = juxta(&[
        "bench",
        "rendezvous",
        "--query-kind",
        "pdp",
        "--model",
        "srdi,centralized",
        "--edges",
        "3",
        "--rendezvous",
        "1",
        "--rate",
        "10",
        "--duration-ms",
        "1500",
        "--query-space",
        "12",
        "--threshold",
        "2",
        "--adv-type",
        "adv",
        "--rdv-cache",
        "100",
        "--timeout-ms",
        "5000",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = results(&json);
    assert_eq!(rows.len(), 2, "{rows:?}");
    // (Flooding is left out: its first answer may be an empty one from an
    // edge without the advertisement, see docs/benchmarks.md.)
    for (r, model) in rows.iter().zip(["srdi", "centralized"]) {
        assert_eq!(r["scenario"], "rendezvous");
        assert_eq!(r["query_kind"], "pdp");
        assert_eq!(r["model"], model);
        assert_eq!(r["edges"], 3);
        assert_eq!(r["rendezvous"], 1);
        assert_eq!(r["offered_qps"], 10);
        assert_eq!(r["query_space"], 12);
        assert_eq!(r["threshold"], 2);
        assert_eq!(r["adv_type"], "adv");
        assert_eq!(r["rdv_cache"], 100);
        assert_eq!(r["timeout_ms"], 5000);
        assert!(r.get("error").is_none(), "{r}");
        assert!(r["positive_issued"].as_u64().unwrap() > 0, "{r}");
        // Published advertisements are found through the rendezvous, two
        // per answer (groups of `threshold` share a name and a publisher);
        // a miss is never answered.
        assert!(r["positive_answered"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["responses_mean"].as_f64().unwrap(), 2.0, "{r}");
        assert_eq!(r["negative_answered"], 0, "{r}");
        // Every positive query is answered or lost for a stated reason.
        let lost: u64 = ["no_answer", "refused", "unleased", "empty", "in_flight_cap"]
            .iter()
            .map(|k| r["lost"][k].as_u64().unwrap())
            .sum();
        assert_eq!(
            lost + r["positive_answered"].as_u64().unwrap(),
            r["positive_issued"].as_u64().unwrap(),
            "{r}"
        );
        let (mean, sd, cv) = (
            r["response_ms_mean"].as_f64().unwrap(),
            r["response_ms_stddev"].as_f64().unwrap(),
            r["cv"].as_f64().unwrap(),
        );
        assert!(mean > 0.0, "{r}");
        assert!((cv - sd / mean).abs() < 1e-9, "{r}");
    }
}

/// A small `bench rendezvous` run (3 edges, 10 q/s for 1.5 s, 12
/// advertisements, threshold 2) with these groups, models and rendezvous
/// counts; its result rows.
fn small_group_run(groups: &str, models: &str, rendezvous: &str) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("rdv.json");
    let o = juxta(&[
        "bench",
        "rendezvous",
        "--group",
        groups,
        "--model",
        models,
        "--edges",
        "3",
        "--rendezvous",
        rendezvous,
        "--rate",
        "10",
        "--duration-ms",
        "1500",
        "--query-space",
        "12",
        "--threshold",
        "2",
        "--rdv-cache",
        "100",
        "--timeout-ms",
        "5000",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    results(&json)
}

/// `--group subgroup`: the rendezvous processes run a certificate
/// subgroup's own rendezvous (and none of the Net peer group), the edges
/// are members publishing and querying in the group: the answers come
/// through the group's index, which holds the query space.
#[test]
fn subgroup_rows_are_answered_through_the_groups_own_rendezvous() {
    // Both groups in one run, same parameters: the Net group's rows first.
    let rows = small_group_run("net,subgroup", "srdi", "1,2");
    assert_eq!(rows.len(), 4, "{rows:?}");
    let (net, sub) = rows.split_at(2);
    for (r, group) in net
        .iter()
        .map(|r| (r, "net"))
        .chain(sub.iter().map(|r| (r, "subgroup")))
    {
        assert_eq!(r["group"], group, "{r}");
        assert!(r.get("error").is_none(), "{r}");
        assert!(r["positive_answered"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["responses_mean"].as_f64().unwrap(), 2.0, "{r}");
        assert_eq!(r["negative_answered"], 0, "{r}");
        // The measured group's rendezvous indexed the query space: an Id
        // entry per advertisement (12) and a Name entry per name and
        // publisher (6), each at one rendezvous at least; in the subgroup
        // the rendezvous run no Net peer group rendezvous at all, so this
        // is the group's own index.
        let entries = r["rdv_index_entries"].as_u64().unwrap();
        assert!(entries >= 18, "{group}: {entries} index entries: {r}");
    }
    assert_eq!(sub[0]["rendezvous"], 1);
    assert_eq!(sub[1]["rendezvous"], 2);
}

/// Flooding inside a certificate subgroup: the group's rendezvous floods
/// each query to its edges under its own member seal; the edges take it
/// as vouched for by that member (the querier's tag was checked at the
/// rendezvous) and the holders answer the querier. (Before, the edges
/// dropped every flooded query: it no longer carried its querier's tag.)
#[test]
fn flooded_queries_in_a_subgroup_are_answered() {
    let rows = small_group_run("subgroup", "flooding", "1");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r["group"], "subgroup", "{r}");
    assert_eq!(r["model"], "flooding", "{r}");
    assert!(r.get("error").is_none(), "{r}");
    assert!(r["positive_answered"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn rendezvous_combinations_that_cannot_be_honoured_are_refused_up_front() {
    for (args, name) in [
        (
            &["--query-space", "1024", "--rdv-cache", "100"][..],
            "--rdv-cache",
        ),
        (&["--threshold", "0"][..], "--threshold"),
        (&["--threshold", "51"][..], "--threshold"),
        (
            &["--adv-type", "peer", "--edges", "4", "--query-space", "8"][..],
            "--adv-type peer",
        ),
        (&["--adv-type", "module"][..], "--adv-type"),
        (&["--query-kind", "walk"][..], "--query-kind"),
        (
            &["--query-kind", "lookup", "--threshold", "3"][..],
            "--threshold",
        ),
        (&["--rate", "0"][..], "rate \"0\""),
        (&["--group", "world"][..], "--group"),
    ] {
        let mut a = vec!["bench", "rendezvous"];
        a.extend_from_slice(args);
        let o = juxta(&a);
        assert!(!o.status.success(), "{args:?} was accepted");
        let e = stderr(&o);
        assert!(e.contains(name), "{args:?}: {e}");
        assert!(!e.contains("rendezvous model="), "{args:?} ran: {e}");
    }
    for args in [
        &["--kill-every", "0"][..],
        &["--kill-every", "2", "--rendezvous", "1"][..],
        &["--kill-every", "2", "--topology", "mesh"][..],
    ] {
        let mut a = vec!["bench", "recovery"];
        a.extend_from_slice(args);
        let o = juxta(&a);
        assert!(!o.status.success(), "{args:?} was accepted");
        let e = stderr(&o);
        assert!(
            e.contains("--kill-every") || e.contains("--rendezvous") || e.contains("--topology"),
            "{args:?}: {e}"
        );
    }
}

fn successive(topology: &str) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("rec.json");
    let o = juxta(&[
        "bench",
        "recovery",
        "--rendezvous",
        "4",
        "--kill-every",
        "4",
        "--topology",
        topology,
        "--edges",
        "4",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    results(&json)
}

#[test]
fn recovery_kills_down_to_one_rendezvous_and_reports_every_kill() {
    for topology in ["ring", "star"] {
        let rows = successive(topology);
        let kills: Vec<&serde_json::Value> = rows.iter().filter(|r| r["row"] == "kill").collect();
        assert_eq!(kills.len(), 3, "{topology}: {rows:?}");
        for (i, k) in kills.iter().enumerate() {
            assert_eq!(k["scenario"], "recovery");
            assert_eq!(k["topology"], topology);
            assert_eq!(k["kill"], i + 1);
            assert_eq!(k["live_rendezvous"], 3 - i, "{k}");
            // The busiest rendezvous is killed: someone leased it.
            let orphaned = k["orphaned"].as_u64().unwrap();
            assert!(orphaned >= 1, "{k}");
            assert_eq!(k["never_recovered"], 0, "{topology}: {k}");
            assert_eq!(k["recovered"], orphaned, "{k}");
            assert_eq!(
                k["recovery_ms"].as_array().unwrap().len() as u64,
                orphaned,
                "{k}"
            );
            assert!(k["recovery_ms_max"].as_f64().unwrap() > 0.0, "{k}");
        }
        if topology == "star" {
            // Everyone leases the hub first: its kill orphans every edge.
            assert_eq!(kills[0]["orphaned"], 4, "{:?}", kills[0]);
        }
        let s = rows.iter().find(|r| r["row"] == "summary").unwrap();
        assert_eq!(s["kills"], 3);
        assert_eq!(s["never_recovered"], 0, "{s}");
        assert_eq!(s["unleased_at_end"], 0, "{s}");
    }
}

/// More edges than a peer's default per-address limit (32 connections,
/// 8 pending): every bench edge connects from one address (this host, or
/// the client namespace under --net), so the bench's rendezvous processes
/// allow as many per address as they have clients. Before, the 33rd edge
/// was refused and `juxta bench --full --net wan`'s recovery step (64
/// edges) failed with "an edge got no lease".
#[test]
fn recovery_with_more_edges_than_the_per_address_limit() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("rec.json");
    let o = juxta(&[
        "bench",
        "recovery",
        "--edges",
        "40",
        "--repeats",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = results(&json);
    assert_eq!(rows.len(), 2, "one kill and the summary: {rows:?}");
    assert!(rows[0].get("error").is_none(), "{rows:?}");
    assert_eq!(rows[0]["edges"], 40, "{rows:?}");
    assert!(rows[0]["recovery_ms"].as_f64().unwrap() > 0.0, "{rows:?}");
    assert_eq!(rows[1]["row"], "summary", "{rows:?}");
    assert_eq!(
        rows[1]["recovery_ms_p99"], rows[0]["recovery_ms"],
        "one kill: its time is the p99: {rows:?}"
    );
}
