//! Helpers of the tests that build a LAN out of network namespaces
//! (`multicast_netns.rs`, `lan_netns.rs`): namespaces and child processes
//! that are cleaned up on drop, a bridge LAN, and the tagged-line protocol
//! between a parent test and its children.
//!
//! Sockets cannot be moved between namespaces, so peers run as child
//! processes: the test binary re-executes itself through
//! `ip netns exec <ns>`, running one of its `#[ignore]`d child tests with
//! its role in environment variables. A child prints lines starting with
//! the lab's tag for the parent; its stdin is a pipe the parent can close
//! ([`Lab::close_stdin`]) to tell it to finish.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The namespaces and child processes of one run; dropping it (also on a
/// failed assertion) kills the children and deletes the namespaces.
pub struct Lab {
    /// Namespaces created, deleted in reverse order on drop.
    pub namespaces: Vec<String>,
    /// Children by name.
    pub children: Vec<(String, Child)>,
    stdins: HashMap<String, ChildStdin>,
    /// Env variable holding a child's name.
    name_key: &'static str,
    /// Prefix of the lines children print for the parent.
    tag: &'static str,
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stdins.clear();
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in self.namespaces.iter().rev() {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Lab {
    /// An empty lab whose children are named by env `name_key` and tag
    /// their lines with `tag`.
    pub fn new(name_key: &'static str, tag: &'static str) -> Lab {
        Lab {
            namespaces: Vec::new(),
            children: Vec::new(),
            stdins: HashMap::new(),
            name_key,
            tag,
        }
    }

    /// Creates a namespace (with loopback up) and records it for deletion.
    pub fn add_ns(&mut self, name: &str) -> Result<(), String> {
        let out = Command::new("ip")
            .args(["netns", "add", name])
            .output()
            .map_err(|e| format!("cannot run `ip`: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        self.namespaces.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"]);
        Ok(())
    }

    /// Builds a LAN: in `hub` a bridge `br0` with address `hub_addr`
    /// (snooping off: the bridge floods multicast to every port), and for
    /// each `(port, ns, addr)` a veth pair from `hub` to `eth0` in `ns`
    /// with `addr`; multicast routed on the LAN everywhere.
    pub fn bridge(&self, hub: &str, hub_addr: &str, ports: &[(&str, &str, &str)]) {
        ip(&[
            "-n",
            hub,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ]);
        ip(&["-n", hub, "addr", "add", hub_addr, "dev", "br0"]);
        ip(&["-n", hub, "link", "set", "br0", "up"]);
        ip(&["-n", hub, "route", "add", "224.0.0.0/4", "dev", "br0"]);
        for (port, ns, addr) in ports {
            ip(&[
                "-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ]);
            ip(&["-n", hub, "link", "set", port, "master", "br0"]);
            ip(&["-n", hub, "link", "set", port, "up"]);
            ip(&["-n", ns, "addr", "add", addr, "dev", "eth0"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"]);
        }
    }

    /// Starts `child_test` inside `ns`; its tagged stdout lines go to `tx`.
    pub fn spawn(
        &mut self,
        ns: &str,
        child_test: &str,
        env: &[(&str, String)],
        tx: &mpsc::Sender<(String, String)>,
    ) {
        let exe = std::env::current_exe().expect("test binary path");
        let name = env
            .iter()
            .find(|(k, _)| *k == self.name_key)
            .map(|(_, v)| v.clone())
            .expect("child name");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .arg(&exe)
            .args(["--exact", child_test, "--nocapture", "--ignored"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawning a child peer");
        let stdout = child.stdout.take().expect("child stdout");
        if let Some(i) = child.stdin.take() {
            self.stdins.insert(name.clone(), i);
        }
        let tx = tx.clone();
        let tag = name.clone();
        let prefix = self.tag;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                eprintln!("[{tag}] {line}");
                if let Some(rest) = line.strip_prefix(prefix) {
                    let _ = tx.send((tag.clone(), rest.to_string()));
                }
            }
        });
        self.children.push((name, child));
    }

    /// Closes the stdin of child `name` (it reads EOF).
    pub fn close_stdin(&mut self, name: &str) {
        self.stdins.remove(name);
    }

    /// Waits (bounded) until every child has exited; asserts success.
    pub fn wait_all(&mut self, deadline: Instant) {
        self.stdins.clear();
        for (name, c) in &mut self.children {
            loop {
                if let Some(st) = c.try_wait().expect("try_wait") {
                    assert!(st.success(), "child {name} failed: {st}");
                    break;
                }
                assert!(Instant::now() < deadline, "child {name} did not finish");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.children.clear();
    }
}

/// Runs `ip <args>`; panics with its error output on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("cannot run `ip`");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Waits for the next tagged line of `who` starting with `starts` (lines
/// of others are kept in `pending`).
pub fn expect_line(
    rx: &mpsc::Receiver<(String, String)>,
    pending: &mut Vec<(String, String)>,
    who: &str,
    starts: &str,
    deadline: Instant,
) -> String {
    loop {
        if let Some(i) = pending
            .iter()
            .position(|(n, l)| n == who && l.starts_with(starts))
        {
            return pending.remove(i).1;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(x) => pending.push(x),
            Err(_) => panic!("no {starts:?} line from {who} in time (have {pending:?})"),
        }
    }
}

/// `key=value` fields of a line.
pub fn fields(line: &str) -> HashMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

/// Blocks until stdin reaches EOF (the parent closed it) or `timeout`.
pub fn wait_stdin_eof(timeout: Duration) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        while std::io::stdin()
            .read_line(&mut s)
            .map(|n| n > 0)
            .unwrap_or(false)
        {
            s.clear();
        }
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(timeout);
}
