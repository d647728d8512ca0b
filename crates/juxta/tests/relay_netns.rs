//! Relays on real topologies: network namespaces joined by veth pairs.
//!
//! - `through_one_relay`: edges A and B sit in namespaces with no route to
//!   each other; relay R's namespace has an address on both links but does
//!   not forward IP (`net.ipv4.ip_forward=0`). Pipe messages and a JXTA
//!   socket stream between A and B flow through R.
//! - `through_a_chain_of_two_relays`: A - R1 - R2 - B; A leases R1, B
//!   leases R2, R1 connects to R2, and the route A -> B ([R1, R2]) is found
//!   by a route query that R1 passes on to R2.
//!
//! Each peer runs on its own thread, with its own current-thread tokio
//! runtime, after the thread has entered the peer's namespace (`setns`), so
//! every socket it opens lives there. Namespace names include the process
//! ID; a guard deletes them however the test ends. Without root or without
//! `ip`, the tests print `skipped: …` (and fail with env `CI=true`).

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use juxta::relay::{RelayConfig, RelayCounters};
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::{PeerId, PipeId};
use juxta_proto::message::{Element, Message};
use sha2::{Digest, Sha256};

mod prereq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, watch};

const WAIT: Duration = Duration::from_secs(60);
const PORT: u16 = 9701;
const PIPE_MESSAGES: usize = 200;
const SOCKET_BYTES: usize = 1 << 20;

/// Deletes its namespaces when dropped (also on a failed assertion).
struct Lab {
    namespaces: Vec<String>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Lab {
    /// Creates the namespaces; `Err` (a reason to skip) when that is not
    /// possible here (not root, no `ip`).
    fn new(tag: &str, names: &[&str]) -> Result<(Lab, Vec<String>), String> {
        let mut lab = Lab {
            namespaces: Vec::new(),
        };
        let mut full = Vec::new();
        for n in names {
            let name = format!("jxr{}{tag}{n}", std::process::id());
            let out = Command::new("ip")
                .args(["netns", "add", &name])
                .output()
                .map_err(|e| format!("cannot run `ip`: {e}"))?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
            }
            lab.namespaces.push(name.clone());
            ip(&["-n", &name, "link", "set", "lo", "up"]);
            full.push(name);
        }
        Ok((lab, full))
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

/// Joins `ns1` (interface `if1`, address `a1`) and `ns2` (`if2`, `a2`)
/// with a veth pair.
fn link(ns1: &str, if1: &str, a1: &str, ns2: &str, if2: &str, a2: &str) {
    ip(&[
        "-n", ns1, "link", "add", if1, "type", "veth", "peer", "name", if2, "netns", ns2,
    ]);
    ip(&["-n", ns1, "addr", "add", a1, "dev", if1]);
    ip(&["-n", ns2, "addr", "add", a2, "dev", if2]);
    ip(&["-n", ns1, "link", "set", if1, "up"]);
    ip(&["-n", ns2, "link", "set", if2, "up"]);
}

fn no_forwarding(ns: &str) {
    ip(&[
        "netns",
        "exec",
        ns,
        "sysctl",
        "-qw",
        "net.ipv4.ip_forward=0",
    ]);
}

/// Runs `f` on a new thread inside namespace `ns`, on a current-thread
/// runtime of its own.
fn in_ns<T, F>(ns: &str, f: impl FnOnce() -> F + Send + 'static) -> std::thread::JoinHandle<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = T>,
{
    let path = PathBuf::from("/run/netns").join(ns);
    let name = ns.to_string();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let target = File::open(&path).unwrap_or_else(|e| panic!("open {name}: {e}"));
            nix::sched::setns(&target, nix::sched::CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|e| panic!("setns {name}: {e}"));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(f())
        })
        .unwrap()
}

fn cfg(home: PathBuf) -> PeerConfig {
    let mut c = PeerConfig::new(home);
    c.key_bits = 1024;
    c
}

fn adv(name: &str) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::random(&mut rand::thread_rng()), PipeType::Unicast);
    a.name = Some(name.into());
    a
}

fn up_data() -> Vec<u8> {
    (0..SOCKET_BYTES).map(|i| (i * 31 + 7) as u8).collect()
}

fn down_data() -> Vec<u8> {
    (0..SOCKET_BYTES).map(|i| (i * 17 + 3) as u8).collect()
}

/// A relay: runs until `done` turns true, then returns its counters and
/// whether it ever had a direct connection between A and B (it must not
/// matter; reported for the assertions). `connect_to`: another relay to
/// join; `ready` gets our peer ID once that connection is up.
async fn relay_main(
    home: PathBuf,
    connect_to: Option<SocketAddr>,
    ready: oneshot::Sender<PeerId>,
    mut done: watch::Receiver<bool>,
) -> RelayCounters {
    let r = Peer::start(
        cfg(home)
            .listen(SocketAddr::from(([0, 0, 0, 0], PORT)))
            .relay(RelayConfig::server()),
    )
    .await
    .unwrap();
    if let Some(addr) = connect_to {
        let deadline = tokio::time::Instant::now() + WAIT;
        while r.connect(addr).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay {addr} unreachable"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let _ = ready.send(r.peer_id());
    let _ = done.wait_for(|d| *d).await;
    r.relay().unwrap().counters()
}

/// Edge B: leases its relay, holds an input pipe and a server socket,
/// checks what arrives and answers on the socket.
async fn b_main(
    home: PathBuf,
    relay: SocketAddr,
    pipe: PipeAdvertisement,
    sock: PipeAdvertisement,
    ready: oneshot::Sender<PeerId>,
) -> usize {
    let b = Peer::start(cfg(home).relay(RelayConfig::client(vec![relay])))
        .await
        .unwrap();
    assert!(
        b.relay().unwrap().wait_leased(WAIT).await.is_some(),
        "B leased"
    );
    let mut input = b.pipes().create_input_pipe(&pipe).unwrap();
    let mut server = JxtaServerSocket::bind(&b, &sock, SocketConfig::default()).unwrap();
    let _ = ready.send(b.peer_id());
    let mut got = 0;
    for i in 0..PIPE_MESSAGES {
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        let d = m.message.get("app", "d").unwrap();
        assert_eq!(d.data.len(), 100 + i, "pipe message {i} intact");
        assert!(d.data.iter().all(|&x| x == (i % 251) as u8));
        got += 1;
    }
    let mut s = tokio::time::timeout(WAIT, server.accept())
        .await
        .unwrap()
        .unwrap();
    let mut buf = vec![0u8; SOCKET_BYTES];
    s.read_exact(&mut buf).await.unwrap();
    assert!(buf == up_data(), "socket data intact at B");
    s.write_all(&down_data()).await.unwrap();
    s.flush().await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    s.shutdown().await.unwrap();
    got
}

/// Edge A: leases its relay, checks it cannot reach B's address, then
/// sends pipe messages and a socket stream to B. Returns whether it ever
/// had a direct connection to B.
async fn a_main(
    home: PathBuf,
    relay: SocketAddr,
    b_addr: SocketAddr,
    pipe: PipeAdvertisement,
    sock: PipeAdvertisement,
    b: oneshot::Receiver<PeerId>,
) -> bool {
    assert!(
        TcpStream::connect_timeout(&b_addr, Duration::from_secs(2)).is_err(),
        "A must have no IP route to B"
    );
    let a = Peer::start(cfg(home).relay(RelayConfig::client(vec![relay])))
        .await
        .unwrap();
    assert!(
        a.relay().unwrap().wait_leased(WAIT).await.is_some(),
        "A leased"
    );
    let b = tokio::time::timeout(WAIT, b).await.unwrap().unwrap();
    let out = a
        .pipes()
        .create_output_pipe(&pipe, &[b], WAIT)
        .await
        .unwrap();
    for i in 0..PIPE_MESSAGES {
        let body = vec![(i % 251) as u8; 100 + i];
        out.send(Message::new().with(Element::bytes("app", "d", body)))
            .await
            .unwrap();
    }
    let mut c = JxtaSocket::connect(&a.pipes(), &sock, b, SocketConfig::default())
        .await
        .unwrap();
    c.write_all(&up_data()).await.unwrap();
    c.flush().await.unwrap();
    let mut got = vec![0u8; SOCKET_BYTES];
    c.read_exact(&mut got).await.unwrap();
    assert_eq!(Sha256::digest(&got), Sha256::digest(down_data()));
    c.shutdown().await.unwrap();
    assert_eq!(a.stats().route_spoofed.load(Ordering::Relaxed), 0);
    a.is_connected_to(&b)
}

/// Skips (or, with env `CI=true`, fails) a test that cannot make its
/// namespaces.
fn skip(why: &str) {
    prereq::require(
        &format!("network namespaces (root and `ip` from iproute2): {why}"),
        false,
    );
}

#[test]
fn through_one_relay() {
    let (_lab, ns) = match Lab::new("s", &["a", "r", "b"]) {
        Ok(x) => x,
        Err(e) => return skip(&e),
    };
    let (na, nr, nb) = (&ns[0], &ns[1], &ns[2]);
    link(na, "eth0", "10.71.1.2/24", nr, "ra", "10.71.1.1/24");
    link(nb, "eth0", "10.71.2.2/24", nr, "rb", "10.71.2.1/24");
    no_forwarding(nr);
    let dir = tempfile::tempdir().unwrap();
    let (pipe, sock) = (adv("relayed-pipe"), adv("relayed-socket"));
    let (done_tx, done_rx) = watch::channel(false);
    let (r_tx, r_rx) = oneshot::channel();
    let home = dir.path().join("r");
    let r = in_ns(nr, move || relay_main(home, None, r_tx, done_rx));
    let _ = r_rx.blocking_recv();
    let (b_tx, b_rx) = oneshot::channel();
    let (home, p, s) = (dir.path().join("b"), pipe.clone(), sock.clone());
    let relay_b: SocketAddr = "10.71.2.1:9701".parse().unwrap();
    let b = in_ns(nb, move || b_main(home, relay_b, p, s, b_tx));
    let home = dir.path().join("a");
    let relay_a: SocketAddr = "10.71.1.1:9701".parse().unwrap();
    let b_addr: SocketAddr = "10.71.2.2:9701".parse().unwrap();
    let a = in_ns(na, move || a_main(home, relay_a, b_addr, pipe, sock, b_rx));
    let a_direct = a.join().expect("edge A");
    let b_got = b.join().expect("edge B");
    let _ = done_tx.send(true);
    let counters = r.join().expect("relay");
    eprintln!("relay counters: {counters:?}");
    assert!(!a_direct, "A had no direct connection to B");
    assert_eq!(b_got, PIPE_MESSAGES);
    assert_eq!(counters.clients, 2);
    assert!(
        (counters.server.forwarded + counters.server.passed) as usize > PIPE_MESSAGES,
        "the relay forwarded the traffic: {counters:?}"
    );
    assert_eq!(counters.server.dropped, 0);
}

#[test]
fn through_a_chain_of_two_relays() {
    let (_lab, ns) = match Lab::new("c", &["a", "r1", "r2", "b"]) {
        Ok(x) => x,
        Err(e) => return skip(&e),
    };
    let (na, nr1, nr2, nb) = (&ns[0], &ns[1], &ns[2], &ns[3]);
    link(na, "eth0", "10.72.1.2/24", nr1, "ra", "10.72.1.1/24");
    link(nr1, "mid", "10.72.2.1/24", nr2, "mid", "10.72.2.2/24");
    link(nb, "eth0", "10.72.3.2/24", nr2, "rb", "10.72.3.1/24");
    no_forwarding(nr1);
    no_forwarding(nr2);
    let dir = tempfile::tempdir().unwrap();
    let (pipe, sock) = (adv("chain-pipe"), adv("chain-socket"));
    let (done_tx, done_rx) = watch::channel(false);
    let (r2_tx, r2_rx) = oneshot::channel();
    let home = dir.path().join("r2");
    let d2 = done_rx.clone();
    let r2 = in_ns(nr2, move || relay_main(home, None, r2_tx, d2));
    let _ = r2_rx.blocking_recv();
    let (r1_tx, r1_rx) = oneshot::channel();
    let home = dir.path().join("r1");
    let r2_addr: SocketAddr = "10.72.2.2:9701".parse().unwrap();
    let r1 = in_ns(nr1, move || relay_main(home, Some(r2_addr), r1_tx, done_rx));
    let _ = r1_rx.blocking_recv();
    let (b_tx, b_rx) = oneshot::channel();
    let (home, p, s) = (dir.path().join("b"), pipe.clone(), sock.clone());
    let relay_b: SocketAddr = "10.72.3.1:9701".parse().unwrap();
    let b = in_ns(nb, move || b_main(home, relay_b, p, s, b_tx));
    let home = dir.path().join("a");
    let relay_a: SocketAddr = "10.72.1.1:9701".parse().unwrap();
    let b_addr: SocketAddr = "10.72.3.2:9701".parse().unwrap();
    let a = in_ns(na, move || a_main(home, relay_a, b_addr, pipe, sock, b_rx));
    let a_direct = a.join().expect("edge A");
    let b_got = b.join().expect("edge B");
    let _ = done_tx.send(true);
    let c1 = r1.join().expect("relay 1");
    let c2 = r2.join().expect("relay 2");
    eprintln!("relay 1: {c1:?}\nrelay 2: {c2:?}");
    assert!(!a_direct);
    assert_eq!(b_got, PIPE_MESSAGES);
    // A -> B: R1 forwards to R2 (direct), R2 queues for B; B -> A: R2
    // forwards to R1, R1 queues for A.
    assert!(c1.forwarded as usize > PIPE_MESSAGES, "{c1:?}");
    assert!(c2.forwarded as usize > PIPE_MESSAGES, "{c2:?}");
    assert!(
        (c2.server.forwarded + c2.server.passed) as usize >= PIPE_MESSAGES,
        "R2 sent on (or spooled) for B"
    );
    assert!(
        c1.server.forwarded + c1.server.passed > 0,
        "R1 sent on (or spooled) for A"
    );
}
