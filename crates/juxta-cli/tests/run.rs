//! `juxta run`: the launcher starts N ranks with the job in their
//! environment, prefixes their output, and fails the whole job (killing
//! the others by PID) when one rank fails.

use std::process::{Command, Output, Stdio};

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

#[test]
fn a_rank_of_the_communicator_dying_fails_the_job() {
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
        "fail",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
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
