//! `juxta sim`: impossible parameters are refused up front naming the
//! flag; a small run writes one row in the `juxta bench rendezvous` shape
//! (plus the simulator's fields), the same for the same seed.

use std::process::Command;

fn juxta() -> Command {
    Command::new(env!("CARGO_BIN_EXE_juxta"))
}

#[test]
fn impossible_parameters_are_refused_naming_the_flag() {
    for (args, flag) in [
        (vec!["--peers", "10", "--rendezvous", "20"], "--rendezvous"),
        (vec!["--rendezvous", "0"], "--rendezvous"),
        (vec!["--model", "gossip"], "--model"),
        (vec!["--rendezvous", "4", "--rdv-kills", "4"], "--rdv-kills"),
        (vec!["--churn-pct-per-min", "150"], "--churn-pct-per-min"),
        (vec!["--latency-ms", "9..2"], "--latency-ms"),
        (vec!["--loss-pct", "120"], "--loss-pct"),
        (vec!["--partition", "10:5"], "--partition"),
        (vec!["--virtual-s", "5", "--warmup-s", "10"], "--warmup-s"),
    ] {
        let out = juxta().arg("sim").args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

#[test]
fn rows_have_the_rendezvous_shape_and_repeat_with_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let p = dir.path().join(name);
        let out = juxta()
            .args([
                "sim",
                "--peers",
                "300",
                "--rendezvous",
                "4",
                "--virtual-s",
                "40",
                "--warmup-s",
                "5",
                "--query-rate-per-100",
                "10",
                "--churn-pct-per-min",
                "5",
                "--rdv-kills",
                "1",
                "--kill-at-s",
                "15",
                "--heartbeat-ms",
                "500",
                "--seed",
                "9",
                "--json",
            ])
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert!(doc["command"].as_str().unwrap().contains("sim"));
        assert!(doc["machine"]["cores"].as_u64().unwrap() >= 1);
        let mut row = doc["results"][0].clone();
        for k in [
            "scenario",
            "model",
            "edges",
            "rendezvous",
            "offered_qps",
            "positive_pct",
            "query_space",
            "queries_per_s",
            "response_ms_p50",
            "response_ms_p99",
            "response_ms_mean",
            "response_ms_stddev",
            "loss_pct",
            "cv",
            "completion_cv",
            "rdv_cpu_pct",
            "peers",
            "virtual_s",
            "wall_s",
            "events",
            "recovery_ms_p99",
            "never_recovered",
            "honest_success_pct",
        ] {
            assert!(row.get(k).is_some(), "no {k} in {row}");
        }
        assert_eq!(row["scenario"], "rendezvous");
        assert_eq!(row["peers"], 300);
        assert_eq!(row["rdv_kills"], 1);
        assert!(row["orphaned"].as_u64().unwrap() > 0, "{row}");
        assert_eq!(row["never_recovered"], 0, "{row}");
        assert!(row["answered"].as_u64().unwrap() > 0, "{row}");
        row.as_object_mut().unwrap().remove("wall_s");
        row
    };
    assert_eq!(run("a.json"), run("b.json"));
}
