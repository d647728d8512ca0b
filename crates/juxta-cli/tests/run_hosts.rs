//! `juxta run --hosts FILE`: a job's ranks started on "hosts" through the
//! `juxta peer` daemon running on each — here two daemons on two loopback
//! addresses (127.0.0.1 and 127.0.0.2), so ranks on the second host
//! listen on its address and the communicator joins across them. Only the
//! launcher a daemon allows may start anything; a failing rank, or a
//! launcher that disappears, takes the job's ranks on every host with it.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const JUXTA: &str = env!("CARGO_BIN_EXE_juxta");

fn home(root: &Path, name: &str) -> PathBuf {
    let h = root.join(name);
    std::fs::create_dir_all(&h).unwrap();
    std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o700)).unwrap();
    h
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A running daemon, stopped (by PID) when dropped.
struct Daemon {
    child: Child,
    addr: String,
    home: PathBuf,
    peer_id: String,
}

impl Daemon {
    fn start(home: &Path, listen: &str, allowed: &[&str]) -> Daemon {
        let allowed: Vec<String> = allowed.iter().map(|p| format!("\"{p}\"")).collect();
        std::fs::write(
            home.join("juxta.toml"),
            format!(
                "listen = \"{listen}\"\nkey_bits = 1024\n[launch]\nallowed_peers = [{}]\nmax_ranks = 8\n",
                allowed.join(", ")
            ),
        )
        .unwrap();
        let mut child = Command::new(JUXTA)
            .args(["peer", "--home"])
            .arg(home)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn juxta peer");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut addr = String::new();
        let mut peer_id = String::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(l) if l == "ready" => break,
                Ok(l) => {
                    if let Some(a) = l.split("listening on tcp://").nth(1) {
                        addr = a.trim().to_string();
                        peer_id = l.split_whitespace().nth(1).unwrap_or_default().to_string();
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("daemon in {} not ready: {e}", home.display());
                }
            }
        }
        assert!(!addr.is_empty());
        Daemon {
            child,
            addr,
            home: home.to_path_buf(),
            peer_id,
        }
    }

    fn status(&self) -> String {
        let o = Command::new(JUXTA)
            .args(["status", "--home"])
            .arg(&self.home)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(JUXTA)
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("juxta run")
}

fn gone(pid: i32) -> bool {
    !Command::new("sh")
        .args(["-c", &format!("kill -0 {pid} 2>/dev/null")])
        .status()
        .unwrap()
        .success()
}

/// Waits (bounded) until every PID is gone; the ones still there.
fn wait_gone(pids: &[i32]) -> Vec<i32> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
        if left.is_empty() || Instant::now() > end {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn pids_in(out: &str) -> Vec<i32> {
    out.lines()
        .filter_map(|l| l.split("pid ").nth(1))
        .map(|p| p.trim().parse().unwrap())
        .collect()
}

#[test]
fn jobs_run_across_hosts_through_their_daemons() {
    let root = tempfile::tempdir().unwrap();
    let launcher = home(root.path(), "launcher");
    let stranger = home(root.path(), "stranger");
    let l = launcher.to_str().unwrap();

    // The launcher learns its peer ID from the first refusal (it has no
    // identity before its first run); `juxta id` then prints it.
    let nobody = "urn:jxta:cbid-59616261646162614A78746150325033DBEB45881F3F3B29F700A5740EF05B2303";
    let probe = Daemon::start(&home(root.path(), "probe"), "127.0.0.1:0", &[nobody]);
    let hosts = root.path().join("hosts");
    std::fs::write(&hosts, format!("{}\n", probe.addr)).unwrap();
    let h = hosts.to_str().unwrap();
    let o = run(&["-n", "1", "--hosts", h, "--home", l, "--", "true"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refused rank 0")
            && err.contains("is not in this host's launch.allowed_peers"),
        "{err}"
    );
    drop(probe);
    let id = Command::new(JUXTA)
        .args(["id", "--home", l])
        .output()
        .unwrap();
    assert!(id.status.success());
    let id = text(&id.stdout).trim().to_string();
    assert!(err.contains(&id), "the refusal names the launcher: {err}");

    let a = Daemon::start(&home(root.path(), "a"), "127.0.0.1:0", &[&id]);
    let b = Daemon::start(&home(root.path(), "b"), "127.0.0.2:0", &[&id]);
    std::fs::write(
        &hosts,
        format!("# two hosts\n{} slots=1\n{} slots=2\n", a.addr, b.addr),
    )
    .unwrap();

    // Placement and environment: rank 0 on a, ranks 1-2 on b listening on
    // b's address, one seed on a's address; stderr forwarded.
    let o = run(&[
        "-n",
        "3",
        "--hosts",
        h,
        "--home",
        l,
        "--timeout",
        "120",
        "--",
        "sh",
        "-c",
        "echo $JUXTA_MP_RANK/$JUXTA_MP_SIZE $JUXTA_MP_SEED $JUXTA_MP_LISTEN; echo oops >&2",
    ]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    let seed = out
        .lines()
        .find_map(|l| l.strip_prefix("[0] 0/3 "))
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    assert!(seed.starts_with("127.0.0.1:"), "{out}");
    for r in 1..3 {
        assert!(
            out.lines()
                .any(|x| x == format!("[{r}] {r}/3 {seed} 127.0.0.2:0")),
            "{out}"
        );
    }
    let err = text(&o.stderr);
    for r in 0..3 {
        assert!(err.contains(&format!("[{r}] oops")), "{err}");
    }

    // The communicator across the two hosts.
    let o = run(&[
        "-n",
        "3",
        "--hosts",
        h,
        "--home",
        l,
        "--timeout",
        "120",
        "--",
        JUXTA,
        "mp-rank",
        "hello",
    ]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    for r in 0..3 {
        assert!(
            out.lines()
                .any(|x| x == format!("[{r}] rank {r} of 3: sum 3")),
            "{out}"
        );
    }

    // A failing rank (on b) fails the job with its code; the others, on
    // both hosts, are killed.
    let o = run(&[
        "-n",
        "3",
        "--hosts",
        h,
        "--home",
        l,
        "--timeout",
        "120",
        "--",
        "sh",
        "-c",
        "if [ $JUXTA_MP_RANK = 2 ]; then sleep 1; exit 3; fi; echo pid $$; exec sleep 300",
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("rank 2 on 127.0.0.2:"), "{err}");
    let pids = pids_in(&text(&o.stdout));
    assert!(!pids.is_empty() && pids.len() <= 2, "{}", text(&o.stdout));
    assert_eq!(wait_gone(&pids), Vec::<i32>::new(), "ranks left running");

    // A launcher that disappears (SIGKILL: no goodbye) takes its ranks with
    // it: the daemons notice its connection is gone.
    let mut job = Command::new(JUXTA)
        .args(["run", "-n", "2", "--hosts", h, "--home", l, "--"])
        .args(["sh", "-c", "echo pid $$; exec sleep 300"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(job.stdout.take().unwrap()).lines();
    let mut pids = Vec::new();
    while pids.len() < 2 {
        let line = lines.next().expect("a rank's pid line").unwrap();
        pids.extend(pids_in(&line));
    }
    Command::new("kill")
        .args(["-KILL", &job.id().to_string()])
        .status()
        .unwrap();
    let _ = job.wait();
    assert_eq!(wait_gone(&pids), Vec::<i32>::new(), "orphaned ranks");

    // A launcher the hosts do not allow starts nothing.
    let o = run(&[
        "-n",
        "2",
        "--hosts",
        h,
        "--home",
        stranger.to_str().unwrap(),
        "--",
        "touch",
        root.path().join("owned").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("is not in this host's launch.allowed_peers"));
    assert!(!root.path().join("owned").exists());

    // A host that proves another ID than the file pins is refused.
    std::fs::write(&hosts, format!("{} peer={}\n", a.addr, b.peer_id)).unwrap();
    let o = run(&["-n", "1", "--hosts", h, "--home", l, "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains(&format!("the hosts file says {}", b.peer_id)),
        "{}",
        text(&o.stderr)
    );

    let st = a.status();
    let launch = st
        .lines()
        .find(|l| l.starts_with("launch"))
        .unwrap_or_else(|| panic!("{st}"));
    assert!(launch.contains("0 ranks running"), "{launch}");
    assert!(
        !launch.contains(" 0 refused"),
        "the stranger was counted: {launch}"
    );
    drop(a);
    drop(b);
}

#[test]
fn bad_hosts_files_and_options_are_refused_before_anything_starts() {
    let root = tempfile::tempdir().unwrap();
    let hosts = root.path().join("hosts");
    let h = hosts.to_str().unwrap();
    std::fs::write(&hosts, "127.0.0.1:1 slots=many\n").unwrap();
    let o = run(&["-n", "1", "--hosts", h, "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains(":1: slots=many: expected 1..=4096"),
        "{}",
        text(&o.stderr)
    );
    std::fs::write(&hosts, "127.0.0.1:1\n").unwrap();
    let o = run(&["-n", "1", "--hosts", h, "--bind", "core", "--", "true"]);
    assert!(
        text(&o.stderr).contains("--bind core"),
        "{}",
        text(&o.stderr)
    );
    let o = run(&["-n", "1", "--hosts", "/nonexistent/hosts", "--", "true"]);
    assert!(
        text(&o.stderr).contains("/nonexistent/hosts"),
        "{}",
        text(&o.stderr)
    );
    // A daemon whose [launch] cannot work says so before it starts.
    let hm = home(root.path(), "d");
    std::fs::write(
        hm.join("juxta.toml"),
        "listen = \"0.0.0.0:0\"\n[launch]\nallowed_peers = [\"urn:jxta:cbid-59616261646162614A78746150325033DBEB45881F3F3B29F700A5740EF05B2303\"]\n",
    )
    .unwrap();
    let o = Command::new(JUXTA)
        .args(["peer", "--home"])
        .arg(&hm)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("launch.address"),
        "{}",
        text(&o.stderr)
    );
}
