//! Propagate pipes over IP multicast between peers that hold no connection
//! to each other, on a LAN built from network namespaces.
//!
//! The parent test builds three namespaces: `S` holds a bridge
//! (10.77.0.1/24) with two veth ports leading to `A` (10.77.0.2/24) and `B`
//! (10.77.0.3/24). Sockets cannot be moved between namespaces, so the peers
//! run as child processes: the test binary re-executes itself through
//! `ip netns exec <ns>`, running one of the `#[ignore]`d child tests below
//! with its role in environment variables. Two receivers share namespace
//! `A` (and the group's port, through `SO_REUSEPORT`), one is in `B`; the
//! sender in `S` first sends a few bad datagrams to the group, then 20
//! messages on a propagate output pipe, with no TCP connection anywhere.
//! Each receiver must get all 20 exactly once, from the sender, and count
//! the bad datagrams; the sender must not hear itself although its own
//! datagrams loop back to it.
//!
//! Without root (no `ip netns`), the test prints `skipped: …` (and fails
//! with env `CI=true`).

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use juxta::config::MulticastConfig;
use juxta::pipe::PipeError;
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::endpoint::{mangle, ServiceAddress};
use juxta_proto::id::PipeId;
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{Element, Message};

mod netns;
mod prereq;

use netns::{expect_line, fields, Lab};

const ENV_ROLE: &str = "JUXTA_MCAST_ROLE";
const ENV_NAME: &str = "JUXTA_MCAST_NAME";
const ENV_PIPE: &str = "JUXTA_MCAST_PIPE";
const ENV_IFACE: &str = "JUXTA_MCAST_IFACE";
const MESSAGES: usize = 20;
/// Bad datagrams the sender puts on the group before the messages.
const BAD_DATAGRAMS: usize = 4;
const GROUP: &str = "224.0.1.85:1234";
/// Lines the children print for the parent start with this.
const TAG: &str = "MCAST ";

// ---------------------------------------------------------------- parent

#[test]
fn propagate_pipe_reaches_lan_peers_by_multicast() {
    if std::env::var_os(ENV_ROLE).is_some() {
        return;
    }
    let start = Instant::now();
    let id = std::process::id();
    let (ns_s, ns_a, ns_b) = (
        format!("jxmc{id}s"),
        format!("jxmc{id}a"),
        format!("jxmc{id}b"),
    );
    let mut lab = Lab::new(ENV_NAME, TAG);
    if let Err(e) = lab.add_ns(&ns_s) {
        prereq::require(
            &format!("network namespaces (root and `ip` from iproute2): {e}"),
            false,
        );
        return;
    }
    lab.add_ns(&ns_a).expect("second namespace");
    lab.add_ns(&ns_b).expect("third namespace");

    // S: bridge br0 = 10.77.0.1, ports va -> A:eth0, vb -> B:eth0.
    lab.bridge(
        &ns_s,
        "10.77.0.1/24",
        &[("va", &ns_a, "10.77.0.2/24"), ("vb", &ns_b, "10.77.0.3/24")],
    );

    let pipe = PipeId::new_random().to_string();
    let (tx, rx) = mpsc::channel();
    let mut pending = Vec::new();
    let receivers = [
        ("a1", &ns_a, "10.77.0.2"),
        ("a2", &ns_a, "10.77.0.2"),
        ("b1", &ns_b, "10.77.0.3"),
    ];
    for (name, ns, iface) in receivers {
        lab.spawn(
            ns,
            "child_receiver",
            &[
                (ENV_ROLE, "receiver".into()),
                (ENV_NAME, name.into()),
                (ENV_PIPE, pipe.clone()),
                (ENV_IFACE, iface.into()),
            ],
            &tx,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (name, ..) in receivers {
        expect_line(&rx, &mut pending, name, "READY", deadline);
    }
    lab.spawn(
        &ns_s,
        "child_sender",
        &[
            (ENV_ROLE, "sender".into()),
            (ENV_NAME, "s".into()),
            (ENV_PIPE, pipe.clone()),
            (ENV_IFACE, "10.77.0.1".into()),
        ],
        &tx,
    );

    let deadline = Instant::now() + Duration::from_secs(15);
    let sender = expect_line(&rx, &mut pending, "s", "READY", deadline);
    let sender_id = sender
        .split_whitespace()
        .nth(1)
        .expect("sender id")
        .to_string();
    let big = expect_line(&rx, &mut pending, "s", "TOO-LARGE", deadline);
    assert!(big.contains("refused"), "{big}");
    let sent = expect_line(&rx, &mut pending, "s", "SENT", deadline);
    let f = fields(&sent);
    assert_eq!(f["count"], MESSAGES.to_string(), "{sent}");
    assert_eq!(f["connections"], "0", "{sent}");
    assert_eq!(f["self_rx"], "0", "the sender heard itself: {sent}");
    for (name, ..) in receivers {
        let got = expect_line(&rx, &mut pending, name, "RECEIVED", deadline);
        let f = fields(&got);
        assert_eq!(f["count"], MESSAGES.to_string(), "{name}: {got}");
        assert_eq!(f["distinct"], MESSAGES.to_string(), "{name}: {got}");
        assert_eq!(f["from"], sender_id, "{name}: {got}");
        assert_eq!(f["connections"], "0", "{name}: {got}");
        assert_eq!(f["bad"], BAD_DATAGRAMS.to_string(), "{name}: {got}");
    }
    lab.wait_all(Instant::now() + Duration::from_secs(5));
    eprintln!("multicast netns test took {:?}", start.elapsed());
}

// ---------------------------------------------------------------- children

fn init_log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

async fn start_peer(
    home: &tempfile::TempDir,
    iface: Ipv4Addr,
    loopback: bool,
) -> (Peer, PipeAdvertisement) {
    let mut cfg = PeerConfig::new(home.path().join("peer"))
        .multicast(MulticastConfig::new(iface).loopback(loopback));
    cfg.key_bits = 1024;
    let peer = Peer::start(cfg).await.expect("peer start");
    let pipe: PipeId = env(ENV_PIPE).parse().expect("pipe id");
    (peer, PipeAdvertisement::new(pipe, PipeType::Propagate))
}

/// A receiver: opens the propagate input pipe, reports every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by propagate_pipe_reaches_lan_peers_by_multicast inside a namespace"]
async fn child_receiver() {
    if std::env::var(ENV_ROLE).as_deref() != Ok("receiver") {
        return;
    }
    init_log();
    let home = tempfile::tempdir().unwrap();
    let (peer, adv) = start_peer(&home, env(ENV_IFACE).parse().unwrap(), false).await;
    let mut input = peer.pipes().create_input_pipe(&adv).unwrap();
    println!("{TAG}READY {}", peer.peer_id());

    let mut seqs = Vec::new();
    let mut from = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(12);
    loop {
        // Until all arrived (or time is up), then a little longer: any
        // duplicate would show up in the count.
        let until = if seqs.len() >= MESSAGES {
            tokio::time::Instant::now() + Duration::from_millis(300)
        } else {
            deadline
        };
        match tokio::time::timeout_at(until, input.recv()).await {
            Ok(Some(m)) => {
                let seq = m
                    .message
                    .get("test", "seq")
                    .and_then(|e| e.as_str())
                    .and_then(|s| s.parse::<usize>().ok())
                    .expect("seq element");
                seqs.push(seq);
                from.insert(m.from.map_or("none".into(), |p| p.to_string()));
            }
            _ => break,
        }
    }
    let distinct: BTreeSet<usize> = seqs.iter().copied().collect();
    assert!(distinct.iter().all(|s| *s < MESSAGES));
    println!(
        "{TAG}RECEIVED count={} distinct={} from={} connections={} bad={}",
        seqs.len(),
        distinct.len(),
        from.into_iter().collect::<Vec<_>>().join(","),
        peer.connection_count(),
        peer.stats().bad_datagrams,
    );
}

/// The sender: bad datagrams first, then the messages on the pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by propagate_pipe_reaches_lan_peers_by_multicast inside a namespace"]
async fn child_sender() {
    if std::env::var(ENV_ROLE).as_deref() != Ok("sender") {
        return;
    }
    init_log();
    let iface: Ipv4Addr = env(ENV_IFACE).parse().unwrap();
    let home = tempfile::tempdir().unwrap();
    // Loopback on: its own datagrams come back to it and must be ignored.
    let (peer, adv) = start_peer(&home, iface, true).await;
    let mut own = peer.pipes().create_input_pipe(&adv).unwrap();
    println!("{TAG}READY {}", peer.peer_id());
    let group: SocketAddrV4 = GROUP.parse().unwrap();
    assert_eq!(peer.multicast().expect("multicast on").group(), group);

    // Bad datagrams: not JXTA, a broken header, a valid but unsigned
    // message (CBJX is on), and one over the size limit.
    let to = mangle(
        "jxta-NetGroup",
        &ServiceAddress::new("PipeService", Some(&adv.id.to_string())),
    );
    let unsigned = juxta::transport::multicast::encode_datagram(
        peer.identity(),
        group,
        &to,
        Message::new().with(Element::text("test", "seq", "0")),
        false,
        JavaHashOrder::Java8,
    )
    .unwrap();
    let mut oversized = b"JXTA".to_vec();
    oversized.resize(20_000, 0x55);
    let bad: [&[u8]; BAD_DATAGRAMS] = [b"hello, group", b"JXTA\x05junk", &unsigned, &oversized];
    let raw = std::net::UdpSocket::bind((iface, 0)).unwrap();
    for d in bad {
        raw.send_to(d, group).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;

    let out = peer
        .pipes()
        .create_output_pipe(&adv, &[], Duration::from_secs(5))
        .await
        .unwrap();
    for i in 0..MESSAGES {
        let m = Message::new().with(Element::text("test", "seq", &i.to_string()));
        out.send(m).await.expect("send by multicast alone");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Too large for a datagram, and no connection to carry it.
    let big = Message::new().with(Element::bytes("test", "data", vec![0u8; 20_000]));
    match out.send(big).await {
        Err(PipeError::NotConnected(why)) if why.contains("exceeds") => {
            println!("{TAG}TOO-LARGE refused ({why})")
        }
        other => panic!("an oversized propagate message went out: {other:?}"),
    }
    let self_rx = match tokio::time::timeout(Duration::from_millis(500), own.recv()).await {
        Ok(Some(_)) => 1,
        _ => 0,
    };
    println!(
        "{TAG}SENT count={MESSAGES} connections={} self_rx={self_rx}",
        peer.connection_count()
    );
}
