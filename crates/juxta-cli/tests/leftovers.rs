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
