//! Interop with a real JXSE 2.7 peer (the Java harness in `interop/jxse`),
//! CBJX on as JXSE ships it: handshakes in both directions and endpoint
//! messages of 1 B, 64 KB and 1 MB in both directions, direct and routed.
//!
//! Needs `interop/jxse/build.sh` to have run (`scripts/test.sh` does it).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use juxta::{Peer, PeerConfig};
use juxta_proto::id::PeerId;
use juxta_proto::message::{Element, Message};
use sha2::{Digest, Sha256};

const WAIT: Duration = Duration::from_secs(60);

fn payload(n: usize) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| ((i * 31 + 7) & 0xff) as u8)
            .collect::<Vec<u8>>(),
    )
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// A JXSE harness process, driven by its line protocol.
struct Jxse {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    peer_id: PeerId,
    port: u16,
    _home: tempfile::TempDir,
}

impl Jxse {
    fn start() -> Jxse {
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

    fn command(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next line starting with `prefix` (other lines are skipped).
    fn expect(&mut self, prefix: &str) -> Vec<String> {
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

async fn juxta_peer(dir: &std::path::Path, name: &str, listen: bool) -> Peer {
    let mut cfg = PeerConfig::new(dir.join(name));
    cfg.key_bits = 1024;
    if listen {
        cfg = cfg.listen("127.0.0.1:0".parse().unwrap());
    }
    Peer::start(cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jxse_interop_with_cbjx() {
    let mut jxse = tokio::task::block_in_place(Jxse::start);
    let dir = tempfile::tempdir().unwrap();
    let sizes = [1usize, 65536, 1 << 20];

    // Juxta dials JXSE: welcome lines both ways, remote ID from JXSE's welcome.
    let a = juxta_peer(dir.path(), "a", true).await;
    let mut a_sink = a.listen("JuxtaTest", Some("sink")).unwrap();
    let to_jxse = a
        .connect(format!("127.0.0.1:{}", jxse.port).parse().unwrap())
        .await
        .unwrap();
    assert_eq!(to_jxse.remote(), jxse.peer_id);
    assert!(!to_jxse.wait_compact(Duration::from_millis(500)).await);

    // Juxta -> JXSE, direct (mangled service name) and through JXSE's router.
    for (i, &n) in sizes.iter().enumerate() {
        let p = payload(n);
        let msg = Message::new().with(Element::bytes("juxta", "payload", p.clone()));
        if i % 2 == 0 {
            to_jxse.send("JuxtaTest", Some("sink"), msg).await.unwrap();
        } else {
            to_jxse
                .send_routed("JuxtaTest", Some("sink"), msg)
                .await
                .unwrap();
        }
        let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
        assert_eq!(
            recv[3],
            n.to_string(),
            "JXSE got a different length: {recv:?}"
        );
        assert_eq!(recv[4], sha(&p), "JXSE got different bytes");
    }

    // JXSE -> Juxta through its router, over the connection Juxta opened.
    for &n in &sizes {
        let cmd = format!("SEND {}/JuxtaTest/sink {n}", a.peer_id().endpoint_address());
        jxse.command(&cmd);
        let sent = tokio::task::block_in_place(|| jxse.expect("SENT"));
        let got = tokio::time::timeout(WAIT, a_sink.recv())
            .await
            .expect("no message from JXSE")
            .unwrap();
        assert_eq!(got.from, Some(jxse.peer_id));
        let data = &got.message.get("juxta", "payload").unwrap().data;
        assert_eq!(data.len(), n);
        assert_eq!(sha(data), sent[2]);
    }
    assert_eq!(
        a.stats()
            .connections_failed
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );

    // JXSE dials Juxta: JXSE sends its welcome first as the initiator.
    let b = juxta_peer(dir.path(), "b", true).await;
    let mut b_sink = b.listen("JuxtaTest", Some("sink")).unwrap();
    for &n in &sizes {
        let cmd = format!("SEND tcp://{}/JuxtaTest/sink {n}", b.local_addr().unwrap());
        jxse.command(&cmd);
        let sent = tokio::task::block_in_place(|| jxse.expect("SENT"));
        let got = tokio::time::timeout(WAIT, b_sink.recv())
            .await
            .expect("no message from JXSE over its own connection")
            .unwrap();
        assert_eq!(got.from, Some(jxse.peer_id));
        let data = &got.message.get("juxta", "payload").unwrap().data;
        assert_eq!(sha(data), sent[2]);
    }
    let back = b
        .messenger(&jxse.peer_id)
        .expect("JXSE's connection is registered");
    back.send(
        "JuxtaTest",
        Some("sink"),
        Message::new().with(Element::bytes("juxta", "payload", payload(10))),
    )
    .await
    .unwrap();
    let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
    assert_eq!(recv[4], sha(&payload(10)));
}
