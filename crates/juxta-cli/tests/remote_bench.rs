//! Benchmarks against another host (`juxta peer --bench` and
//! `juxta bench pingpong --remote`), on two network namespaces joined by
//! a veth pair: the daemon runs in one as its own process, the bench
//! client in the other.
//!
//! Namespace names include the process ID; a guard deletes them and
//! kills the daemon (by PID) however the test ends. Without root or
//! without `ip`, the test prints `skipped: ...` (and fails with env
//! `CI=true`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const JUXTA: &str = env!("CARGO_BIN_EXE_juxta");

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether namespaces can be made here (root and `ip`); else the reason.
fn netns_possible() -> Result<(), String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        == Some("0");
    if !root {
        return Err("network namespaces need root".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("network namespaces need `ip` (iproute2)".into()),
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces joined by a veth pair, and the daemon started in the
/// first; deleted and killed when dropped.
struct Lab {
    namespaces: Vec<String>,
    daemon: Option<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            stop(&mut d);
        }
        for ns in self.namespaces.iter().rev() {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// SIGTERM by PID (the daemon kills its responders as it stops), then
/// SIGKILL if it is still there.
fn stop(d: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &d.id().to_string()])
        .status();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = d.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = d.kill();
    let _ = d.wait();
}

const SERVER_IP: &str = "10.77.0.1";
const CLIENT_IP: &str = "10.77.0.2";

impl Lab {
    fn new() -> Result<(Lab, String, String), String> {
        let mut lab = Lab {
            namespaces: Vec::new(),
            daemon: None,
        };
        let pid = std::process::id();
        let (a, b) = (format!("jxb{pid}s"), format!("jxb{pid}c"));
        for n in [&a, &b] {
            let out = Command::new("ip")
                .args(["netns", "add", n])
                .output()
                .map_err(|e| format!("cannot run `ip`: {e}"))?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
            }
            lab.namespaces.push(n.clone());
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        let (ia, ib) = (format!("vb{pid}s"), format!("vb{pid}c"));
        ip(&[
            "-n", &a, "link", "add", &ia, "type", "veth", "peer", "name", &ib, "netns", &b,
        ]);
        ip(&[
            "-n",
            &a,
            "addr",
            "add",
            &format!("{SERVER_IP}/24"),
            "dev",
            &ia,
        ]);
        ip(&[
            "-n",
            &b,
            "addr",
            "add",
            &format!("{CLIENT_IP}/24"),
            "dev",
            &ib,
        ]);
        ip(&["-n", &a, "link", "set", &ia, "up"]);
        ip(&["-n", &b, "link", "set", &ib, "up"]);
        Ok((lab, a, b))
    }
}

/// `juxta bench pingpong --remote ...` in namespace `ns`.
fn pingpong(ns: &str, remote: &str, token: &str, layers: &str, json: &Path) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns, JUXTA, "bench", "pingpong"])
        .args(["--remote", remote, "--token", token, "--layers", layers])
        .args(["--sizes", "1,65536", "--warmup", "5", "--runs", "1"])
        .args(["--pairs", "5", "--pin", "none", "--json"])
        .arg(json)
        .output()
        .expect("running juxta bench")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The daemon's children (its responders), by `ps`.
fn children(pid: u32) -> Vec<String> {
    let o = Command::new("ps")
        .args(["--ppid", &pid.to_string(), "-o", "pid=,args="])
        .output()
        .expect("running ps");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Starts a peer in `home` once (it creates its identity), stops it, and
/// returns its peer ID.
fn make_identity(ns: &str, home: &Path) -> String {
    std::fs::create_dir_all(home).unwrap();
    let mut p = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            JUXTA,
            "peer",
            "--key-bits",
            "1024",
            "--home",
        ])
        .arg(home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting juxta peer");
    let out = p.stdout.take().unwrap();
    let mut id = None;
    for line in BufReader::new(out).lines() {
        let line = line.expect("peer output");
        if let Some(rest) = line.strip_prefix("peer ") {
            id = rest.split_whitespace().next().map(String::from);
        }
        if line == "ready" {
            break;
        }
    }
    stop(&mut p);
    id.expect("the peer printed its ID")
}

#[test]
fn pingpong_against_a_daemon_in_another_namespace() {
    if let Err(why) = netns_possible() {
        if in_ci() {
            panic!("missing prerequisite (CI=true, so this test must run): {why}");
        }
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: pingpong_against_a_daemon_in_another_namespace: {why}"
        );
        return;
    }
    let (mut lab, server_ns, client_ns) = Lab::new().expect("namespaces");
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // A client identity (made by a first start of a peer in its home),
    // whose peer ID the daemon allows without the token.
    let client_home = dir.path().join("client");
    let client_id = make_identity(&client_ns, &client_home);
    // Bounded: three responders at once per client (tcp, unicast-pipe,
    // socket); a fourth is refused.
    let conf = dir.path().join("juxta.toml");
    std::fs::write(
        &conf,
        format!("[bench]\nmax_responders = 3\nallowed_peers = [\"{client_id}\"]\n"),
    )
    .unwrap();
    let log = dir.path().join("daemon.log");
    let mut daemon = Command::new("ip")
        .args(["netns", "exec", &server_ns, JUXTA, "peer", "--home"])
        .arg(&home)
        .arg("--config")
        .arg(&conf)
        .args(["--listen", &format!("{SERVER_IP}:0"), "--key-bits", "1024"])
        .args(["--bench", "--bench-listen", &format!("{SERVER_IP}:0")])
        .env("TMPDIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("starting juxta peer");
    let out = daemon.stdout.take().unwrap();
    let pid = daemon.id();
    lab.daemon = Some(daemon);
    let mut bench = None;
    for line in BufReader::new(out).lines() {
        let line = line.expect("daemon output");
        if let Some(rest) = line.strip_prefix("bench tcp://") {
            let (addr, token) = rest.split_once(" token ").expect("bench line");
            bench = Some((addr.to_string(), token.to_string()));
        }
        if line == "ready" {
            break;
        }
    }
    let (addr, token) = bench.expect("the daemon printed its bench listener and token");
    assert!(addr.starts_with(SERVER_IP), "{addr}");
    assert!(token.len() >= 32, "token {token:?}");

    // The run: tcp baseline, unicast pipe and socket against the daemon's
    // responders, across the veth pair.
    let json = dir.path().join("pp.json");
    let o = pingpong(&client_ns, &addr, &token, "unicast-pipe,socket", &json);
    assert!(o.status.success(), "bench failed: {}", stderr(&o));
    println!("{}", String::from_utf8_lossy(&o.stdout));
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = doc["results"].as_array().expect("results");
    for layer in ["tcp", "unicast-pipe", "socket"] {
        for size in [1, 65536] {
            let row = rows
                .iter()
                .find(|r| r["layer"] == layer && r["size"] == size)
                .unwrap_or_else(|| panic!("no row for {layer} size {size}: {doc}"));
            let rtt = row["rtt_us_median"].as_f64().unwrap();
            assert!(rtt > 0.0, "{layer} {size}: rtt {rtt}");
        }
    }
    // Both machines' facts: this one's and the remote's, fetched from it.
    assert_eq!(doc["remote"]["addr"], addr.as_str(), "{doc}");
    assert!(doc["remote"]["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(doc["remote"]["machine"]["juxta_version"].is_string());
    assert!(doc["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(
        !doc["command"].as_str().unwrap().contains(&token),
        "the token is not written to the results"
    );

    // The responders died with the client's connections.
    let t0 = Instant::now();
    while !children(pid).is_empty() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        children(pid),
        Vec::<String>::new(),
        "responders left behind"
    );

    // Throughput against the same host.
    let tjson = dir.path().join("tp.json");
    let o = Command::new("ip")
        .args(["netns", "exec", &client_ns, JUXTA, "bench", "throughput"])
        .args(["--remote", &addr, "--token", &token])
        .args(["--layers", "tcp,unicast-pipe", "--sizes", "1024"])
        .args([
            "--patterns",
            "smooth",
            "--duration-ms",
            "200",
            "--warmup",
            "50",
        ])
        .args(["--pin", "none", "--json"])
        .arg(&tjson)
        .output()
        .unwrap();
    assert!(o.status.success(), "throughput failed: {}", stderr(&o));
    println!("{}", String::from_utf8_lossy(&o.stdout));
    let doc: Value = serde_json::from_slice(&std::fs::read(&tjson).unwrap()).unwrap();
    for layer in ["tcp", "unicast-pipe"] {
        let row = doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["layer"] == layer)
            .unwrap_or_else(|| panic!("no throughput row for {layer}: {doc}"));
        assert!(row["msgs_per_s"].as_f64().unwrap() > 0.0, "{row}");
    }
    assert!(doc["remote"]["machine"]["cores"].as_u64().unwrap() >= 1);

    // A listed peer ID, proven, needs no token; an unlisted one is refused.
    let o = Command::new("ip")
        .args(["netns", "exec", &client_ns, JUXTA, "bench", "pingpong"])
        .args(["--remote", &addr, "--identity"])
        .arg(&client_home)
        .args(["--layers", "socket", "--sizes", "1", "--warmup", "2"])
        .args(["--runs", "1", "--pairs", "2", "--pin", "none"])
        .output()
        .unwrap();
    assert!(o.status.success(), "allowed peer refused: {}", stderr(&o));
    let o = Command::new("ip")
        .args(["netns", "exec", &client_ns, JUXTA, "bench", "pingpong"])
        .args(["--remote", &addr, "--identity"])
        .arg(&home)
        .args(["--layers", "socket"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "an unlisted peer was served");
    assert!(stderr(&o).contains("peer ID not allowed"), "{}", stderr(&o));

    // A wrong token is refused with a typed error naming it, and logged.
    let o = pingpong(&client_ns, &addr, "not-the-token", "socket", &json);
    assert!(!o.status.success(), "a wrong token was accepted");
    assert!(stderr(&o).contains("wrong token"), "{}", stderr(&o));

    // No token at all: refused before anything is sent.
    let o = Command::new("ip")
        .args(["netns", "exec", &client_ns, JUXTA, "bench", "pingpong"])
        .args(["--remote", &addr, "--layers", "socket"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--token"), "{}", stderr(&o));

    // A fourth responder at once is refused (max_responders = 3).
    let o = pingpong(
        &client_ns,
        &addr,
        &token,
        "unicast-pipe,socket,endpoint",
        &json,
    );
    assert!(!o.status.success(), "a fourth responder was started");
    assert!(stderr(&o).contains("too many responders"), "{}", stderr(&o));

    // Stacks run on this machine only: refused under --remote.
    let o = Command::new("ip")
        .args(["netns", "exec", &client_ns, JUXTA, "bench", "pingpong"])
        .args(["--remote", &addr, "--token", &token, "--impl", "zmq"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--impl"), "{}", stderr(&o));

    let mut d = lab.daemon.take().unwrap();
    stop(&mut d);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("bench: refused"), "{log}");
    assert!(log.contains("wrong-token"), "{log}");
    assert!(log.contains("too-many-responders"), "{log}");
    assert!(log.contains("peer-not-allowed"), "{log}");
    assert!(log.contains("bench: responder started"), "{log}");
    assert!(!log.contains(&token), "the token is not logged");
}

/// Whether process `pid` still runs (a zombie counts as ended).
fn running(pid: &str) -> bool {
    let o = Command::new("ps")
        .args(["-o", "stat=", "-p", pid])
        .output()
        .expect("running ps");
    let stat = String::from_utf8_lossy(&o.stdout).trim().to_string();
    !stat.is_empty() && !stat.starts_with('Z')
}

#[test]
fn responders_end_with_a_daemon_killed_by_sigkill() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let daemon = Command::new(JUXTA)
        .args(["peer", "--key-bits", "1024", "--home"])
        .arg(&home)
        .args(["--bench", "--bench-listen", "127.0.0.1:0"])
        // Killed below: what its responders leave goes with `dir`.
        .env("TMPDIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting juxta peer");
    // Stops the daemon (by PID) if an assertion fails first.
    let mut lab = Lab {
        namespaces: Vec::new(),
        daemon: Some(daemon),
    };
    let daemon_pid = lab.daemon.as_ref().unwrap().id();
    let out = lab.daemon.as_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let mut bench = None;
    for line in lines.by_ref() {
        let line = line.expect("daemon output");
        if let Some(rest) = line.strip_prefix("bench tcp://") {
            let (addr, token) = rest.split_once(" token ").expect("bench line");
            bench = Some((addr.to_string(), token.to_string()));
        }
        if line == "ready" {
            break;
        }
    }
    let (addr, token) = bench.expect("bench line");
    // `juxta status` names the bench listener.
    let o = Command::new(JUXTA)
        .args(["status", "--json", "--home"])
        .arg(&home)
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        status["result"]["addresses"]["bench"],
        addr.as_str(),
        "{status}"
    );
    // The protocol by hand: hello, one request, the READY answer.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut hello = String::new();
    r.read_line(&mut hello).unwrap();
    let hello: Value = serde_json::from_str(&hello).unwrap();
    assert_eq!(hello["protocol"], "juxta-bench-remote/1");
    let req = serde_json::json!({"token": token, "op": "responder", "layer": "tcp"});
    writeln!(s, "{req}").unwrap();
    let mut answer = String::new();
    r.read_line(&mut answer).unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert!(
        answer["ready"]
            .as_str()
            .unwrap()
            .starts_with("READY 127.0.0.1:"),
        "{answer}"
    );
    let kids = children(daemon_pid);
    assert_eq!(kids.len(), 1, "one responder: {kids:?}");
    assert!(kids[0].contains("bench-responder"), "{kids:?}");
    let responder = kids[0].split_whitespace().next().unwrap().to_string();
    // SIGKILL: the daemon cannot clean up; the responder sees its stdin
    // pipe close and exits by itself.
    let mut daemon = lab.daemon.take().unwrap();
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let t0 = Instant::now();
    while running(&responder) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !running(&responder),
        "responder {responder} outlived the daemon"
    );
    // And the control connection is gone with the daemon.
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(rest.is_empty());
}
