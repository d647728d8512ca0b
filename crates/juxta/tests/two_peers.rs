//! Two Juxta peers on loopback: connection setup, compact negotiation and
//! messages in both directions, in compact mode and in JXTA+CBJX mode.

use std::time::Duration;

use bytes::Bytes;
use juxta::{Peer, PeerConfig, Verified};
use juxta_proto::message::{Element, Message};

fn payload(n: usize) -> Bytes {
    Bytes::from((0..n).map(|i| (i * 31 + 7) as u8).collect::<Vec<u8>>())
}

async fn pair(compact: bool) -> (Peer, Peer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut ca = PeerConfig::new(dir.path().join("a")).listen("127.0.0.1:0".parse().unwrap());
    ca.key_bits = 1024;
    ca.connection.compact = compact;
    let mut cb = PeerConfig::new(dir.path().join("b"));
    cb.key_bits = 1024;
    cb.connection.compact = compact;
    let a = Peer::start(ca).await.unwrap();
    let b = Peer::start(cb).await.unwrap();
    (a, b, dir)
}

async fn exchange(compact: bool) {
    let (a, b, _dir) = pair(compact).await;
    let mut a_in = a.listen("test", Some("in")).unwrap();
    let mut b_in = b.listen("test", Some("back")).unwrap();
    let to_a = b.connect(a.local_addr().unwrap()).await.unwrap();
    assert_eq!(to_a.remote(), a.peer_id());
    assert_eq!(to_a.wait_compact(Duration::from_secs(5)).await, compact);
    for size in [1usize, 65536, 1 << 20] {
        let p = payload(size);
        to_a.send(
            "test",
            Some("in"),
            Message::new().with(Element::bytes("juxta", "payload", p.clone())),
        )
        .await
        .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), a_in.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.from, Some(b.peer_id()));
        assert_eq!(got.message.get("juxta", "payload").unwrap().data, p);
        // Straight from `b`: as verified as its connection. Juxta peers
        // prove their IDs in the handshake whatever the framing (JXSE
        // peers, with CBJX signatures: interop_jxse.rs).
        assert_eq!(got.verified, Verified::Handshake, "size {size}");
        // Reply over the same connection, from the accepting side.
        let to_b = a.messenger(&b.peer_id()).unwrap();
        to_b.send(
            "test",
            Some("back"),
            Message::new().with(Element::bytes("juxta", "payload", p.clone())),
        )
        .await
        .unwrap();
        let back = tokio::time::timeout(Duration::from_secs(10), b_in.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back.message.get("juxta", "payload").unwrap().data, p);
    }
    assert_eq!(a.connection_count(), 1);
    assert_eq!(b.connection_count(), 1);
}

#[tokio::test]
async fn compact_mode_both_directions() {
    exchange(true).await;
}

#[tokio::test]
async fn jxta_cbjx_mode_both_directions() {
    exchange(false).await;
}

#[tokio::test]
async fn compact_one_byte_message_is_small_on_the_wire() {
    let (a, b, _dir) = pair(true).await;
    let mut a_in = a.listen("bench", Some("data")).unwrap();
    let to_a = b.connect(a.local_addr().unwrap()).await.unwrap();
    assert!(to_a.wait_compact(Duration::from_secs(5)).await);
    let msg = || Message::new().with(Element::bytes("bench", "data", &b"a"[..]));
    to_a.send("bench", Some("data"), msg()).await.unwrap();
    a_in.recv().await.unwrap();
    let n = to_a.send("bench", Some("data"), msg()).await.unwrap();
    assert!(n <= 33, "1-byte payload took {n} bytes");
    a_in.recv().await.unwrap();
}

#[tokio::test]
async fn routed_send_is_delivered_to_the_router_destination() {
    let (a, b, _dir) = pair(false).await;
    let mut a_in = a.listen("svc", Some("p")).unwrap();
    let to_a = b.connect(a.local_addr().unwrap()).await.unwrap();
    to_a.send_routed(
        "svc",
        Some("p"),
        Message::new().with(Element::bytes("x", "y", &b"routed"[..])),
    )
    .await
    .unwrap();
    let got = a_in.recv().await.unwrap();
    assert!(got.routed);
    assert_eq!(got.from, Some(b.peer_id()));
    assert_eq!(&got.message.get("x", "y").unwrap().data[..], b"routed");
}

#[tokio::test]
async fn identity_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = PeerConfig::new(dir.path());
    cfg.key_bits = 1024;
    let first = Peer::start(cfg.clone()).await.unwrap().peer_id();
    let second = Peer::start(cfg).await.unwrap().peer_id();
    assert_eq!(first, second);
}

#[tokio::test]
async fn an_unproven_welcome_does_not_capture_a_peer_id() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (a, b, _dir) = pair(true).await;
    // An impostor claims B's peer ID in its welcome line and then stays quiet.
    let impostor = tokio::net::TcpStream::connect(a.local_addr().unwrap())
        .await
        .unwrap();
    let (r, mut w) = impostor.into_split();
    let line = juxta_proto::wire::welcome::Welcome::new(
        format!("tcp://{}", a.local_addr().unwrap()),
        "tcp://127.0.0.1:1".into(),
        b.peer_id(),
    )
    .to_line();
    w.write_all(line.as_bytes()).await.unwrap();
    let mut a_welcome = String::new();
    BufReader::new(r).read_line(&mut a_welcome).await.unwrap();
    assert!(a_welcome.starts_with("JXTAHELLO"));
    // The real B connects and proves its identity by talking.
    let mut a_in = a.listen("t", None).unwrap();
    let mut b_in = b.listen("t", None).unwrap();
    let to_a = b.connect(a.local_addr().unwrap()).await.unwrap();
    to_a.send(
        "t",
        None,
        Message::new().with(Element::bytes("", "x", &b"1"[..])),
    )
    .await
    .unwrap();
    a_in.recv().await.unwrap();
    // A's messenger for B must reach the real B, not the impostor.
    a.messenger(&b.peer_id())
        .unwrap()
        .send(
            "t",
            None,
            Message::new().with(Element::bytes("", "x", &b"2"[..])),
        )
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), b_in.recv())
        .await
        .expect("the real B did not get the reply")
        .unwrap();
    assert_eq!(&got.message.get("", "x").unwrap().data[..], b"2");
    drop(w);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_counters_and_the_connection_list() {
    let (a, b, _dir) = pair(true).await;
    let mut a_in = a.listen("test", Some("in")).unwrap();
    let to_a = b.connect(a.local_addr().unwrap()).await.unwrap();
    assert!(to_a.hops().is_empty(), "a direct messenger has no hops");
    let before_in = a.stats().messages_in;
    let before_out = b.stats().messages_out;
    let sent_bytes = b.stats().bytes_out;
    for _ in 0..3 {
        to_a.send(
            "test",
            Some("in"),
            Message::new().with(Element::bytes("juxta", "payload", payload(1000))),
        )
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(10), a_in.recv())
            .await
            .unwrap()
            .unwrap();
    }
    assert!(b.stats().messages_out >= before_out + 3);
    assert!(a.stats().messages_in >= before_in + 3);
    assert!(b.stats().bytes_out >= sent_bytes + 3000);
    assert!(a.stats().bytes_in >= 3000);
    // The accepting side lists the connection once its peer is proven.
    let conns = a.connections();
    assert_eq!(conns.len(), 1, "{conns:?}");
    let c = &conns[0];
    assert_eq!(c.peer, b.peer_id());
    assert!(c.proven && c.compact);
    assert!(c.bytes_in >= 3000, "{c:?}");
    assert_eq!(c.addr.ip(), std::net::IpAddr::from([127, 0, 0, 1]));
    let bc = b.connections();
    assert_eq!(bc[0].addr, a.local_addr().unwrap());
    assert!(bc[0].bytes_out >= c.bytes_in, "{bc:?} {c:?}");
}

/// A listener that does not read fills its queue (4 here); the
/// connection then waits for room instead of reading on, and nothing is
/// lost: every message arrives, in order, once the listener reads.
#[tokio::test]
async fn a_full_listener_queue_pushes_back_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut ca = PeerConfig::new(dir.path().join("a")).listen("127.0.0.1:0".parse().unwrap());
    ca.key_bits = 1024;
    ca.listener_queue = 4;
    let mut cb = PeerConfig::new(dir.path().join("b"));
    cb.key_bits = 1024;
    let a = Peer::start(ca).await.unwrap();
    let b = Peer::start(cb).await.unwrap();
    let mut inbox = a.listen("test", Some("slow")).unwrap();
    let to_a = b.connect(a.local_addr().unwrap()).await.unwrap();
    const N: u32 = 300;
    let sender = tokio::spawn(async move {
        for i in 0..N {
            let m = Message::new().with(Element::bytes(
                "juxta",
                "n",
                Bytes::copy_from_slice(&i.to_be_bytes()),
            ));
            to_a.send("test", Some("slow"), m).await.unwrap();
        }
        to_a
    });
    // Not reading until the queue is surely full and the connection
    // waits on it.
    let filled = a.stats().messages_in;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        a.stats().messages_in - filled < u64::from(N),
        "the connection should be held back"
    );
    for i in 0..N {
        let got = tokio::time::timeout(Duration::from_secs(10), inbox.recv())
            .await
            .expect("no message lost")
            .unwrap();
        let n = got.message.get("juxta", "n").unwrap().data.clone();
        assert_eq!(u32::from_be_bytes(n[..].try_into().unwrap()), i, "in order");
    }
    sender.await.unwrap();
    assert_eq!(a.stats().unroutable, 0);
}
