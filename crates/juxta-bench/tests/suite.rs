//! The default run end to end on a tiny plan: every scenario's rows land in
//! results.json with the noise and machine facts, the CSV files and the
//! report are written, and a failing peer process is recorded while the
//! results gathered so far are still written.

use juxta_bench::layers::{Host, Layer};
use juxta_bench::suite::{self, LogProgress, Scenario, Step, SuiteOptions};
use serde_json::Value;

mod prereq;

fn tiny_plan(opts: &SuiteOptions) -> Vec<Step> {
    suite::plan(opts)
        .into_iter()
        // Its ranks are the `juxta` binary, which this test is not
        // (crates/juxta-cli/tests/run.rs runs `juxta bench mp`).
        .filter(|s| !matches!(s, Step::Mp(_)))
        .map(|s| match s {
            Step::Pingpong(mut o) => {
                o.sizes = vec![1, 4096];
                o.receivers = vec![1, 2];
                o.warmup = 5;
                o.runs = 2;
                o.pairs = 5;
                Step::Pingpong(o)
            }
            Step::Throughput(mut o) => {
                o.sizes = vec![1024];
                o.duration_ms = 50;
                o.bursts = 1;
                o.burst_len = 10;
                o.idle_ms = 10;
                o.warmup = 10;
                Step::Throughput(o)
            }
            Step::Composition(mut o) => {
                o.compositions = vec![(2, 1024)];
                o.warmup = 5;
                o.runs = 2;
                o.pairs = 5;
                Step::Composition(o)
            }
            Step::Ops(mut o) => {
                o.runs = 2;
                Step::Ops(o)
            }
            Step::Senders(mut o) => {
                o.senders = vec![1, 2];
                o.duration_ms = 50;
                o.warmup = 5;
                Step::Senders(o)
            }
            other => other,
        })
        // These re-run the juxta binary (tests run in a test binary): the
        // CLI test covers them.
        .filter(|s| !matches!(s, Step::Rendezvous(_) | Step::Recovery(_) | Step::Relay(_)))
        .collect()
}

fn read(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("results.json")).expect("json")
}

#[tokio::test(flavor = "current_thread")]
async fn a_small_default_run_writes_every_scenario_and_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SuiteOptions::quick(dir.path().join("run"));
    opts.layers = Some(vec![Layer::Endpoint, Layer::UnicastPipe, Layer::Propagate]);
    let steps = tiny_plan(&opts);
    let outcome = suite::run_plan(&Host::Thread, &opts, steps, &mut LogProgress::new())
        .await
        .expect("run");
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    let doc = read(&dir.path().join("run/results.json"));
    // What was written is what was returned (floats aside: JSON text
    // round-trips them to the nearest representation).
    assert_eq!(
        doc["results"].as_array().unwrap().len(),
        outcome.doc["results"].as_array().unwrap().len()
    );
    let floats = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (written, returned) = (
        floats(&doc["noise"]["baseline_rtt_us_1b"]),
        floats(&outcome.doc["noise"]["baseline_rtt_us_1b"]),
    );
    assert_eq!(written.len(), returned.len());
    for (w, r) in written.iter().zip(&returned) {
        assert!((w - r).abs() <= 1e-9 * r.abs().max(1.0), "{w} vs {r}");
    }
    let rows = doc["results"].as_array().unwrap();
    assert_eq!(rows.len(), outcome.rows);
    for sc in Scenario::ALL.into_iter().filter(|s| {
        !matches!(
            s,
            Scenario::Rendezvous | Scenario::Recovery | Scenario::Relay | Scenario::Mp
        )
    }) {
        assert!(
            rows.iter().any(|r| r["scenario"] == sc.name()),
            "no {} rows",
            sc.name()
        );
    }
    // One tcp pingpong row per size, the reruns kept as noise.
    let tcp: Vec<&Value> = rows
        .iter()
        .filter(|r| r["scenario"] == "pingpong" && r["layer"] == "tcp")
        .collect();
    assert_eq!(tcp.len(), 2);
    let reruns = doc["noise"]["baseline_rtt_us_1b"].as_array().unwrap();
    assert_eq!(reruns.len(), 3, "tcp reran beside each of the 3 layers");
    assert!(doc["noise"]["spread"].as_f64().unwrap() >= 0.0);
    assert!(rows
        .iter()
        .any(|r| r["layer"] == "propagate" && r["receivers"] == 2));
    assert!(doc["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(doc["duration_s"].as_f64().unwrap() > 0.0);
    for f in [
        "pingpong.csv",
        "throughput.csv",
        "composition.csv",
        "senders.csv",
        "report.html",
    ] {
        let p = dir.path().join("run").join(f);
        assert!(p.exists(), "{f} missing");
        assert!(outcome.files.contains(&p), "{f} not listed");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_failing_peer_process_is_recorded_and_results_are_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SuiteOptions::quick(dir.path().join("run"));
    opts.scenarios = vec![Scenario::Pingpong];
    opts.layers = Some(vec![Layer::Endpoint, Layer::UnicastPipe]);
    let steps = tiny_plan(&opts);
    let host = Host::Process("/nonexistent/juxta".into());
    let outcome = suite::run_plan(&host, &opts, steps, &mut LogProgress::new())
        .await
        .expect("the run itself completes");
    assert_eq!(outcome.errors.len(), 2, "{:?}", outcome.errors);
    for e in &outcome.errors {
        assert_eq!(e.scenario, "pingpong");
        assert!(!e.message.is_empty());
    }
    let doc = read(&dir.path().join("run/results.json"));
    assert_eq!(doc["errors"].as_array().unwrap().len(), 2);
    assert!(dir.path().join("run/report.html").exists());
}

#[tokio::test(flavor = "current_thread")]
async fn an_unwritable_output_directory_fails_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let opts = SuiteOptions::quick(file.join("run"));
    let e = suite::run(&Host::Thread, &opts, &mut LogProgress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--out"), "{e}");
}

/// Open MPI's TCP ping-pong rows (impl `mpi`, layer `tcp`) stay rows of
/// their own in the suite: they were once taken for reruns of the tcp
/// baseline (same layer name) and dropped.
#[tokio::test(flavor = "current_thread")]
async fn open_mpi_tcp_rows_are_kept_beside_the_tcp_baseline() {
    if !prereq::require(
        "Open MPI (Debian: openmpi-bin libopenmpi-dev)",
        prereq::on_path(&["mpicc"]).is_some() && prereq::on_path(&["mpirun"]).is_some(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SuiteOptions::quick(dir.path().join("run"));
    opts.scenarios = vec![Scenario::Pingpong];
    opts.layers = Some(vec![Layer::Endpoint]);
    opts.mpi = true;
    let steps = tiny_plan(&opts);
    let outcome = suite::run_plan(&Host::Thread, &opts, steps, &mut LogProgress::new())
        .await
        .expect("run");
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    let doc = read(&dir.path().join("run/results.json"));
    let rows = doc["results"].as_array().unwrap();
    let count = |imp: &str, layer: &str| {
        rows.iter()
            .filter(|r| r["scenario"] == "pingpong" && r["impl"] == imp && r["layer"] == layer)
            .count()
    };
    assert_eq!(count("mpi", "tcp"), 2, "{rows:?}");
    assert_eq!(count("mpi", "sm"), 2, "{rows:?}");
    assert_eq!(count("tcp", "tcp"), 2, "one tcp row per size: {rows:?}");
}
