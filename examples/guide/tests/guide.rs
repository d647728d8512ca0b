//! Runs every program of docs/guide.md; each checks its own result.

use std::process::Command;

fn run(exe: &str) {
    let out = Command::new(exe).output().expect("program starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{exe} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("ok: "),
        "{exe} printed no result:\n{stdout}"
    );
}

#[test]
fn firewalled_chat() {
    run(env!("CARGO_BIN_EXE_firewalled_chat"));
}

#[test]
fn socket_copy() {
    run(env!("CARGO_BIN_EXE_socket_copy"));
}

#[test]
fn secure_pipe() {
    run(env!("CARGO_BIN_EXE_secure_pipe"));
}

#[test]
fn groups() {
    run(env!("CARGO_BIN_EXE_groups"));
}

#[test]
fn group_rendezvous() {
    run(env!("CARGO_BIN_EXE_group_rendezvous"));
}
