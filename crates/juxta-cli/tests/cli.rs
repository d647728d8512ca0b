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
fn a_scenario_not_built_yet_says_where_it_comes_from() {
    let o = juxta(&["bench", "--scenarios", "relay"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("not implemented yet") && e.contains("#5"), "{e}");
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
    for r in rows {
        assert_eq!(r["scenario"], "recovery");
        assert!(r["recovery_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["rendezvous"], 2);
    }
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
