//! `juxta run`: the launcher starts N ranks with the job in their
//! environment, prefixes their output, and fails the whole job (killing
//! the others by PID) when one rank fails.

use std::process::{Command, Output, Stdio};

#[path = "../../juxta/tests/prereq/mod.rs"]
mod prereq;

fn juxta(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_juxta"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run juxta")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn ranks_get_the_job_and_their_output_is_prefixed() {
    let exe = env!("CARGO_BIN_EXE_juxta");
    let o = juxta(&[
        "run",
        "-n",
        "3",
        "--timeout",
        "120",
        "--",
        exe,
        "mp-rank",
        "hello",
    ]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    for r in 0..3 {
        assert!(
            out.lines()
                .any(|l| l == format!("[{r}] rank {r} of 3: sum 3")),
            "{out}"
        );
    }
}

#[test]
fn environment_and_stderr_are_forwarded() {
    let o = juxta(&[
        "run",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "echo $JUXTA_MP_RANK/$JUXTA_MP_SIZE $JUXTA_MP_SEED; echo oops >&2",
    ]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    let seeds: Vec<&str> = out.lines().filter_map(|l| l.split(' ').nth(2)).collect();
    assert_eq!(seeds.len(), 2, "{out}");
    assert_eq!(seeds[0], seeds[1], "one seed for the job: {out}");
    assert!(seeds[0].starts_with("127.0.0.1:"), "{out}");
    assert!(
        out.contains("[0] 0/2 ") && out.contains("[1] 1/2 "),
        "{out}"
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("[0] oops") && err.contains("[1] oops"),
        "{err}"
    );
}

#[test]
fn a_failing_rank_fails_the_job_and_the_others_are_killed() {
    // Rank 1 exits with 3; the others print their PID and sleep.
    let o = juxta(&[
        "run",
        "-n",
        "3",
        "--timeout",
        "120",
        "--",
        "sh",
        "-c",
        "if [ $JUXTA_MP_RANK = 1 ]; then sleep 1; exit 3; fi; echo pid $$; exec sleep 300",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("rank 1 failed"),
        "{}",
        text(&o.stderr)
    );
    let out = text(&o.stdout);
    let pids: Vec<i32> = out
        .lines()
        .filter_map(|l| l.split("pid ").nth(1))
        .map(|p| p.trim().parse().unwrap())
        .collect();
    // A rank killed before it printed has no PID here; each one that
    // printed must be gone.
    assert!(!pids.is_empty() && pids.len() <= 2, "{out}");
    for p in pids {
        // Gone (and reaped by the launcher): `kill -0` finds no such process.
        let alive = Command::new("sh")
            .args(["-c", &format!("kill -0 {p} 2>/dev/null")])
            .status()
            .expect("sh");
        assert!(!alive.success(), "rank process {p} still exists");
    }
}

/// Also: the ranks' peer homes are gone afterwards, those of the rank that
/// exited without unwinding and of the ones the launcher killed included
/// (they are made in a directory the launcher owns and removes).
#[test]
fn a_rank_of_the_communicator_dying_fails_the_job() {
    let exe = env!("CARGO_BIN_EXE_juxta");
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(exe)
        .args([
            "run",
            "-n",
            "3",
            "--timeout",
            "120",
            "--",
            exe,
            "mp-rank",
            "fail",
        ])
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .output()
        .expect("run juxta");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in the temporary directory: {left:?}");
}

#[test]
fn bad_jobs_are_refused() {
    let o = juxta(&["run", "-n", "0", "--", "true"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("rank count"),
        "{}",
        text(&o.stderr)
    );
    let o = juxta(&["run", "-n", "2", "--bind", "sideways", "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--bind"), "{}", text(&o.stderr));
    let o = juxta(&["run", "-n", "2", "--", "/nonexistent/program"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("starting rank 0"),
        "{}",
        text(&o.stderr)
    );
}

/// `juxta bench mp` end to end at a tiny budget: the ranks' echo
/// ping-pong (tcp, the communicator, Open MPI when installed), the
/// study's pipe, socket and UDP routines through the common harness
/// (`reply: ack`), the matmul and the allreduce, all in one JSON file.
#[test]
fn bench_mp_writes_every_routine_s_rows() {
    let (_, doc) = bench_mp(&[
        "--sizes",
        "2,1000,100000",
        "--warmup",
        "5",
        "--runs",
        "1",
        "--pairs",
        "5",
        "--matmul-n",
        "64",
        "--no-c-o0",
        "--allreduce-doubles",
        "1024",
        "--allreduce-ranks",
        "2",
    ]);
    let rows = doc["results"].as_array().expect("results");
    let pp = |imp: &str, layer: &str, reply: &str| {
        rows.iter()
            .filter(|r| {
                r["scenario"] == "mp-pingpong"
                    && r["impl"] == imp
                    && r["layer"] == layer
                    && r["reply"] == reply
            })
            .map(|r| {
                let rtt = r["rtt_us_median"].as_f64().unwrap();
                assert!(rtt > 0.0 && rtt.is_finite(), "{r}");
                r["size"].as_u64().unwrap()
            })
            .collect::<Vec<_>>()
    };
    for (imp, layer, reply) in [
        ("tcp", "tcp", "echo"),
        ("juxta", "mp", "echo"),
        ("juxta", "unicast-pipe", "ack"),
        ("juxta", "socket", "ack"),
    ] {
        assert_eq!(pp(imp, layer, reply), [2, 1000, 100_000], "{imp} {layer}");
    }
    // UDP carries datagrams up to 64 KB only.
    assert_eq!(pp("udp", "udp", "ack"), [2, 1000]);
    let mpi = which("mpirun") && which("mpicc");
    if std::env::var_os("CI").is_some() {
        assert!(mpi, "CI installs Open MPI (openmpi-bin libopenmpi-dev)");
    }
    if mpi {
        assert_eq!(pp("mpi", "tcp", "echo"), [2, 1000, 100_000]);
        assert_eq!(pp("mpi", "sm", "echo"), [2, 1000, 100_000]);
    } else {
        eprintln!("skipped: the Open MPI rows (openmpi-bin libopenmpi-dev not installed)");
    }
    let mm: Vec<&str> = rows
        .iter()
        .filter(|r| r["scenario"] == "matmul")
        .filter_map(|r| r["impl"].as_str())
        .collect();
    for imp in ["rust-seq", "c-O3", "juxta"] {
        assert!(mm.contains(&imp), "{mm:?}");
    }
    // Every matmul computes the same product.
    let sums: Vec<f64> = rows
        .iter()
        .filter(|r| r["scenario"] == "matmul")
        .map(|r| r["checksum"].as_f64().unwrap())
        .collect();
    assert!(
        sums.windows(2)
            .all(|w| (w[0] - w[1]).abs() <= 1e-9 * w[0].abs()),
        "{sums:?}"
    );
    assert!(rows
        .iter()
        .any(|r| r["scenario"] == "mp-allreduce" && r["impl"] == "juxta"));
}

/// `juxta bench mp --impl jxse` end to end: JXSE 2.7's pipes and
/// sockets, reliable and unreliable, each with a row per size, a positive
/// RTT and `reliable` saying which is which (needs Java and the harness).
#[test]
fn bench_mp_with_jxse_reports_reliable_and_unreliable_routines() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let (stdout, doc) = bench_mp(&[
        "--impl",
        "jxse",
        "--layers",
        "",
        "--sizes",
        "2,20000",
        "--warmup",
        "3",
        "--runs",
        "1",
        "--pairs",
        "3",
        "--matmul-n",
        "0",
        "--allreduce-doubles",
        "0",
    ]);
    assert!(!stdout.contains("stopped early"), "{stdout}");
    let rows = doc["results"].as_array().expect("results");
    for (layer, reliable) in [
        ("unicast-pipe", false),
        ("bidi-pipe-reliable", true),
        ("socket", true),
        ("socket-unreliable", false),
    ] {
        let sizes: Vec<u64> = rows
            .iter()
            .filter(|r| {
                r["scenario"] == "mp-pingpong" && r["impl"] == "jxse" && r["layer"] == layer
            })
            .map(|r| {
                let rtt = r["rtt_us_median"].as_f64().unwrap();
                assert!(rtt > 0.0 && rtt.is_finite(), "{r}");
                assert_eq!(r["reply"], "ack", "{r}");
                assert_eq!(r["reliable"], reliable, "{r}");
                r["size"].as_u64().unwrap()
            })
            .collect();
        assert_eq!(sizes, [2, 20_000], "{layer}");
    }
}

/// Runs `juxta bench mp ARGS --json FILE`, checks that it succeeded and
/// returns its stdout and the JSON document it wrote.
fn bench_mp(args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("mp.json");
    let mut all = vec!["bench", "mp"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let o = juxta(&all);
    assert!(
        o.status.success(),
        "{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let doc = serde_json::from_slice(&std::fs::read(&json).expect("the json file")).unwrap();
    (text(&o.stdout), doc)
}

fn which(p: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
}
