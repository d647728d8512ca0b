//! Driver for the JXSE 2.7 harness (`interop/jxse`) shared by the interop
//! tests: starts a real JXSE peer and speaks its line protocol.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use juxta::{Peer, PeerConfig};
use juxta_proto::id::PeerId;
use sha2::{Digest, Sha256};

pub const WAIT: Duration = Duration::from_secs(60);

pub fn payload(n: usize) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| ((i * 31 + 7) & 0xff) as u8)
            .collect::<Vec<u8>>(),
    )
}

pub fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// A JXSE harness process, driven by its line protocol.
pub struct Jxse {
    pub child: Child,
    pub stdin: ChildStdin,
    pub lines: mpsc::Receiver<String>,
    pub peer_id: PeerId,
    pub port: u16,
    _home: tempfile::TempDir,
}

impl Jxse {
    pub fn start() -> Jxse {
        Jxse::start_with(&[])
    }

    /// A harness started with extra arguments (`--rdv-seed URI`,
    /// `--rendezvous`).
    pub fn start_with(extra: &[&str]) -> Jxse {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../interop/jxse");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let home = tempfile::tempdir().unwrap();
        let mut child = Command::new("bash")
            .arg(format!("{root}/run.sh"))
            .args(["--port", &port.to_string(), "--name", "interop"])
            .arg("--home")
            .arg(home.path())
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot start the JXSE harness (is Java installed? run interop/jxse/build.sh)");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let ready = lines
            .recv_timeout(WAIT)
            .expect("JXSE harness printed nothing (run interop/jxse/build.sh first)");
        let mut f = ready.split_whitespace();
        assert_eq!(f.next(), Some("READY"), "unexpected first line {ready:?}");
        let peer_id: PeerId = f.next().unwrap().parse().unwrap();
        Jxse {
            child,
            stdin,
            lines,
            peer_id,
            port,
            _home: home,
        }
    }

    pub fn command(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next line starting with `prefix` (other lines are skipped).
    pub fn expect(&mut self, prefix: &str) -> Vec<String> {
        loop {
            let l = self
                .lines
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("no {prefix} line from JXSE"));
            if l.starts_with("ERROR") && prefix != "ERROR" {
                panic!("JXSE harness: {l}");
            }
            if l.starts_with(prefix) {
                return l.split_whitespace().map(str::to_string).collect();
            }
        }
    }
}

impl Drop for Jxse {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "QUIT");
        let _ = self.stdin.flush();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn juxta_peer(dir: &std::path::Path, name: &str, listen: bool) -> Peer {
    let mut cfg = PeerConfig::new(dir.join(name));
    cfg.key_bits = 1024;
    if listen {
        cfg = cfg.listen("127.0.0.1:0".parse().unwrap());
    }
    Peer::start(cfg).await.unwrap()
}
