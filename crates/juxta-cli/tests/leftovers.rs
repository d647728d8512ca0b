//! A benchmark run leaves nothing behind in the temporary directory: its
//! responder processes are killed when their lane ends, so their peer homes
//! live in a directory the harness owns and removes, and Open MPI's session
//! directory (its shared-memory segments) is kept in the harness's own
//! temporary directory too. Before this, every run left a home per killed
//! responder and some 8 MB per killed mpirun in `/tmp`, which filled a CI
//! disk over a day of runs.

use std::process::{Command, Stdio};

#[path = "../../juxta/tests/prereq/mod.rs"]
mod prereq;

#[test]
fn a_pingpong_run_leaves_nothing_in_the_temporary_directory() {
    let mpi = prereq::on_path(&["mpicc"]).is_some() && prereq::on_path(&["mpirun"]).is_some();
    let mut layers = "tcp,endpoint,unicast-pipe,socket,secure-pipe,propagate".to_string();
    if prereq::require("Open MPI (Debian: openmpi-bin libopenmpi-dev)", mpi) {
        layers.push_str(",mpi-tcp,mpi-sm");
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_juxta");
    let o = Command::new(exe)
        .args(["bench", "pingpong", "--layers", &layers])
        .args([
            "--sizes", "1", "--warmup", "2", "--runs", "1", "--pairs", "5",
        ])
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .output()
        .expect("run juxta");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Every lane ran (a lane that failed to start would leave nothing
    // either).
    for lane in ["endpoint", "socket", "secure-pipe", "propagate"] {
        assert!(stdout.contains(lane), "no {lane} row in:\n{stdout}");
    }
    if mpi {
        assert!(stdout.contains("mpi "), "no Open MPI rows in:\n{stdout}");
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in the temporary directory: {left:?}");
}

/// The processes whose parent is `pid`, with their command lines.
fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // After the command name in parentheses: state, then parent PID.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(&pid.to_string()) {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            out.push((p, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    out
}

/// How many sockets process `pid` has open.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Whether `pid` still runs (a zombie waiting to be reaped has ended).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Starts `juxta ARGS`, waits until it has started children whose
/// command lines contain `role` (`want` of them), kills it with SIGKILL
/// (no destructor runs) and checks that those children end too.
fn children_end_with_a_killed_harness(args: &[&str], role: &str, want: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let mut harness = Command::new(env!("CARGO_BIN_EXE_juxta"))
        .args(args)
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run juxta");
    let mut kids = Vec::new();
    // Bounded waits for events, not timing assertions.
    for _ in 0..600 {
        // Started and serving: listening and connected (a child killed
        // while it starts up may die of its closed stdout instead).
        kids = children_of(harness.id())
            .into_iter()
            .filter(|(p, cmd)| cmd.contains(role) && sockets(*p) >= 2)
            .collect();
        if kids.len() >= want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Past their start-up (a child that has not yet printed its READY
    // line dies of the closed pipe anyway, which would prove nothing).
    std::thread::sleep(std::time::Duration::from_secs(2));
    harness.kill().unwrap();
    harness.wait().unwrap();
    assert!(
        kids.len() >= want,
        "the harness never started {want} {role} processes: {kids:?}"
    );
    let mut left = kids.clone();
    for _ in 0..600 {
        left.retain(|(p, _)| running(*p));
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for (p, _) in &left {
        // Ours: stop them before failing.
        let _ = Command::new("kill").arg("-9").arg(p.to_string()).status();
    }
    assert!(
        left.is_empty(),
        "still running after the harness was killed: {left:?}"
    );
}

#[test]
fn responders_end_when_the_harness_is_killed() {
    children_end_with_a_killed_harness(
        &[
            "bench",
            "pingpong",
            "--layers",
            "tcp,endpoint",
            "--sizes",
            "1",
            "--runs",
            "1000",
            "--pairs",
            "100000",
        ],
        "bench-responder",
        2,
    );
}

#[test]
fn relays_end_when_the_harness_is_killed() {
    children_end_with_a_killed_harness(
        &[
            "bench",
            "relay",
            // The baseline path briefly, then the overload run, which
            // keeps one relay process busy for ten minutes.
            "--paths",
            "direct",
            "--layers",
            "unicast-pipe",
            "--sizes",
            "1",
            "--pairs",
            "10",
            "--stream-ms",
            "10",
            "--transfer",
            "0",
            "--overload-secs",
            "600",
            "--curve-point-secs",
            "0",
        ],
        "relay-serve",
        1,
    );
}
