//! Network profiles: each topology is created, carries traffic from the
//! client namespace to the responder's, delays it at least by the profile's
//! RTT (a behaviour check: the delay element must delay), runs the real
//! scenarios over `lan`, and is gone after it is dropped. Needs root and
//! iproute2 (CI runs as root): elsewhere the namespace tests print
//! `skipped: …`, with env `CI=true` they fail.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use juxta_bench::layers::{Host, Layer};
use juxta_bench::net::{self, NetError, Profile, Topology, RESPONDER_IP};
use juxta_bench::pingpong::{self, PingPongOptions};
use juxta_bench::throughput::{self, Pattern, ThroughputOptions};
use juxta_bench::util::Pin;
use juxta_bench::BenchError;

mod prereq;

fn quiet(_: &str) {}

fn gone(names: &[String]) -> bool {
    names
        .iter()
        .all(|n| !Path::new("/run/netns").join(n).exists())
}

/// `n` one-byte ping-pongs over TCP from the client namespace to a server
/// in the responder namespace; returns the smallest RTT.
fn min_tcp_rtt(topo: &Topology, n: usize) -> Duration {
    let names = topo.namespaces();
    let (client_ns, server_ns) = (names[0].clone(), names[2].clone());
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    let server = std::thread::spawn(move || {
        let _in_b = net::enter(&server_ns).unwrap();
        let l = TcpListener::bind((RESPONDER_IP, 0)).unwrap();
        tx.send(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() {
            s.write_all(&b).unwrap();
        }
    });
    let addr = rx.recv().unwrap();
    let best = std::thread::spawn(move || {
        let _in_a = net::enter(&client_ns).unwrap();
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        s.set_nodelay(true).unwrap();
        let mut best = Duration::MAX;
        let mut b = [7u8; 1];
        for _ in 0..n {
            let t = Instant::now();
            s.write_all(&b).unwrap();
            s.read_exact(&mut b).unwrap();
            best = best.min(t.elapsed());
        }
        best
    })
    .join()
    .unwrap();
    server.join().unwrap();
    best
}

#[test]
fn unknown_profile_is_an_error() {
    assert!(matches!(
        Profile::parse("token-ring"),
        Err(NetError::UnknownProfile(n)) if n == "token-ring"
    ));
    let msg = Profile::parse("gigabit").unwrap_err().to_string();
    assert!(
        msg.contains("loopback, lan, san, wan, cable, modem56k"),
        "{msg}"
    );
    assert_eq!(Profile::parse("wan").unwrap(), Profile::Wan);
}

#[test]
fn every_profile_connects_and_delays() {
    if !prereq::require_ok(prereq::netns()) {
        return;
    }
    for p in [
        Profile::Lan,
        Profile::San,
        Profile::Wan,
        Profile::Cable,
        Profile::Modem56k,
    ] {
        let topo = Topology::create(p).unwrap();
        let names = topo.namespaces().to_vec();
        assert_eq!(names.len(), 3, "{p}");
        let pid = std::process::id().to_string();
        for n in &names {
            assert!(n.contains(&pid), "{n} is named after the PID");
            assert!(Path::new("/run/netns").join(n).exists(), "{n}");
        }
        let rtt = min_tcp_rtt(&topo, 20);
        assert!(
            rtt >= p.rtt(),
            "{p}: a ping-pong took {rtt:?}, less than the profile's {:?}",
            p.rtt()
        );
        let stats = topo.stats();
        assert!(stats.forwarded >= 40, "{p}: {stats:?}");
        assert_eq!(stats.dropped_full + stats.dropped_truncated, 0, "{stats:?}");
        drop(topo);
        assert!(gone(&names), "{p}: namespaces left: {names:?}");
    }
}

#[test]
fn loopback_needs_no_namespace() {
    let topo = Topology::create(Profile::Loopback).unwrap();
    assert!(topo.namespaces().is_empty());
    assert!(topo.net().is_local());
}

#[tokio::test]
async fn lan_scenarios_run_through_the_bench() {
    if !prereq::require_ok(prereq::netns()) {
        return;
    }
    let topo = Topology::create(Profile::Lan).unwrap();
    let names = topo.namespaces().to_vec();
    let before = topo.stats().forwarded;
    let opts = PingPongOptions {
        layers: vec![Layer::Endpoint],
        sizes: vec![1, 20_000],
        pin: Pin::None,
        warmup: 5,
        runs: 2,
        pairs: 5,
        net: topo.net(),
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    assert_eq!(rows.len(), 2 * 2, "{rows:?}");
    for r in &rows {
        assert!(
            r.rtt_us_median >= Profile::Lan.rtt().as_secs_f64() * 1e6,
            "{r:?}"
        );
    }
    // 20 000 bytes at 100 Mb/s take 1.6 ms on the wire one way.
    for r in rows.iter().filter(|r| r.size == 20_000) {
        assert!(r.rtt_us_median >= 1600.0, "{r:?}");
    }
    let opts = ThroughputOptions {
        layers: vec![Layer::Tcp, Layer::Endpoint],
        sizes: vec![1000],
        patterns: vec![Pattern::Smooth],
        count: Some(300),
        warmup: 20,
        pin: Pin::None,
        net: topo.net(),
        ..ThroughputOptions::default()
    };
    let rows = throughput::run(&Host::Thread, &opts, quiet).await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r.loss_pct, 0.0, "{r:?}");
        assert!(r.msgs_per_s > 0.0, "{r:?}");
    }
    // The traffic went through the delay element (GSO frames carry many
    // messages each, so fewer frames than messages).
    let stats = topo.stats();
    assert!(stats.forwarded > before, "{stats:?}");
    assert_eq!(stats.dropped_full + stats.dropped_truncated, 0, "{stats:?}");
    drop(topo);
    assert!(gone(&names), "namespaces left: {names:?}");
}

#[test]
fn namespaced_scenarios_refuse_a_multi_thread_runtime() {
    if !prereq::require_ok(prereq::netns()) {
        return;
    }
    let topo = Topology::create(Profile::Lan).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let opts = PingPongOptions {
        layers: vec![],
        sizes: vec![1],
        net: topo.net(),
        ..PingPongOptions::default()
    };
    let r = rt.block_on(pingpong::run(&Host::Thread, &opts, quiet));
    assert!(
        matches!(r, Err(BenchError::Net(NetError::NeedsCurrentThread))),
        "{:?}",
        r.err()
    );
}

/// A veth pair counts exactly the UDP payload that crossed it: one
/// datagram of 1,000 bytes each way and nothing else (no ARP, no IPv6),
/// headers taken off per frame; both namespaces gone after the drop.
#[test]
fn a_veth_pair_counts_udp_payload_exactly() {
    if !prereq::require_ok(prereq::netns()) {
        return;
    }
    let pair = net::VethPair::create().unwrap();
    let names = vec![
        pair.client_ns().to_string(),
        pair.responder_ns().to_string(),
    ];
    let before = net::link_counters(pair.client_ns(), net::PAIR_CLIENT_DEV).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    let server_ns = pair.responder_ns().to_string();
    let server = std::thread::spawn(move || {
        let _in_b = net::enter(&server_ns).unwrap();
        let s = std::net::UdpSocket::bind((RESPONDER_IP, 0)).unwrap();
        tx.send(s.local_addr().unwrap()).unwrap();
        let mut b = [0u8; 2000];
        let (n, from) = s.recv_from(&mut b).unwrap();
        s.send_to(&b[..n / 2], from).unwrap();
    });
    let addr = rx.recv().unwrap();
    let client_ns = pair.client_ns().to_string();
    std::thread::spawn(move || {
        let _in_a = net::enter(&client_ns).unwrap();
        let s = std::net::UdpSocket::bind((net::CLIENT_IP, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.send_to(&[7u8; 1000], addr).unwrap();
        let mut b = [0u8; 2000];
        assert_eq!(s.recv(&mut b).unwrap(), 500);
    })
    .join()
    .unwrap();
    server.join().unwrap();
    let after = net::link_counters(pair.client_ns(), net::PAIR_CLIENT_DEV).unwrap();
    assert_eq!(
        after.tx_packets - before.tx_packets,
        1,
        "{before:?} {after:?}"
    );
    assert_eq!(
        after.rx_packets - before.rx_packets,
        1,
        "{before:?} {after:?}"
    );
    assert_eq!(after.tx_payload() - before.tx_payload(), 1000);
    assert_eq!(after.rx_payload() - before.rx_payload(), 500);
    drop(pair);
    assert!(gone(&names), "namespaces left: {names:?}");
}
