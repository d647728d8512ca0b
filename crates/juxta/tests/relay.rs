//! Relay and endpoint router on loopback: two edges that never connect to
//! each other exchange endpoint messages, pipe messages and a JXTA socket
//! stream through a relay; and the bad-input cases (route loops, spoofed
//! sources, malformed router elements, unauthenticated relay requests,
//! per-edge quotas) are refused with typed errors and counted.

use std::sync::atomic::Ordering;
use std::time::Duration;

use juxta::relay::RelayConfig;
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::PipeId;
use juxta_proto::message::{Element, Message};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(60);

async fn start(dir: &tempfile::TempDir, name: &str, cfg: impl FnOnce(PeerConfig) -> PeerConfig) -> Peer {
    let mut c = PeerConfig::new(dir.path().join(name));
    c.key_bits = 1024;
    Peer::start(cfg(c)).await.unwrap()
}

fn adv(name: &str) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::random(&mut rand::thread_rng()), PipeType::Unicast);
    a.name = Some(name.into());
    a
}

/// A relay and two edges leasing it.
async fn trio(dir: &tempfile::TempDir, relay: RelayConfig) -> (Peer, Peer, Peer) {
    let r = start(dir, "r", |c| c.listen("127.0.0.1:0".parse().unwrap()).relay(relay)).await;
    let seeds = vec![r.local_addr().unwrap()];
    let a = start(dir, "a", |c| c.relay(RelayConfig::client(seeds.clone()))).await;
    let b = start(dir, "b", |c| c.relay(RelayConfig::client(seeds.clone()))).await;
    for p in [&a, &b] {
        assert_eq!(
            p.relay().unwrap().wait_leased(WAIT).await,
            Some(r.peer_id()),
            "edge leased the relay"
        );
    }
    (r, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_pipe_and_socket_through_a_relay() {
    let dir = tempfile::tempdir().unwrap();
    let (r, a, b) = trio(&dir, RelayConfig::server()).await;

    // Endpoint messages: route found by a route query to the relay.
    let mut inbox = b.listen("chat", None).unwrap();
    let to_b = a.route_to(&b.peer_id(), WAIT).await.unwrap();
    assert!(to_b.is_routed());
    assert_eq!(to_b.remote(), b.peer_id());
    to_b.send("chat", None, Message::new().with(Element::text("", "t", "hi")))
        .await
        .unwrap();
    let got = tokio::time::timeout(WAIT, inbox.recv()).await.unwrap().unwrap();
    assert_eq!(got.from, Some(a.peer_id()));
    assert!(got.routed);
    assert_eq!(got.message.get("", "t").unwrap().as_str(), Some("hi"));
    assert!(!a.is_connected_to(&b.peer_id()));
    assert!(!b.is_connected_to(&a.peer_id()));

    // Unicast pipe, bound through the relay, and the reply path B -> A
    // learned from the reverse hops.
    let ad = adv("relayed");
    let mut input = b.pipes().create_input_pipe(&ad).unwrap();
    let out = a
        .pipes()
        .create_output_pipe(&ad, &[b.peer_id()], WAIT)
        .await
        .unwrap();
    assert_eq!(out.remote(), Some(b.peer_id()));
    for i in 0..50u32 {
        let body = vec![(i % 251) as u8; 1000 + i as usize];
        out.send(Message::new().with(Element::bytes("app", "d", body)))
            .await
            .unwrap();
    }
    for i in 0..50u32 {
        let m = tokio::time::timeout(WAIT, input.recv()).await.unwrap().unwrap();
        assert_eq!(m.from, Some(a.peer_id()));
        let d = m.message.get("app", "d").unwrap();
        assert_eq!(d.data.len(), 1000 + i as usize);
        assert!(d.data.iter().all(|&x| x == (i % 251) as u8));
    }
    let back = b.messenger(&a.peer_id()).unwrap();
    assert!(back.is_routed(), "B reaches A through the learned route");

    // A JXTA socket, 2 MB each way.
    let sad = adv("sock");
    let mut server = JxtaServerSocket::bind(&b, &sad, SocketConfig::default()).unwrap();
    let n = 2 << 20;
    let up: Vec<u8> = (0..n).map(|i| (i * 31 + 7) as u8).collect();
    let down: Vec<u8> = (0..n).map(|i| (i * 17 + 3) as u8).collect();
    let (up2, down2) = (up.clone(), down.clone());
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).await.unwrap();
        assert!(got == up2, "server got corrupted data");
        s.write_all(&down2).await.unwrap();
        s.flush().await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        s.shutdown().await.unwrap();
    });
    let mut c = JxtaSocket::connect(&a.pipes(), &sad, b.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    c.write_all(&up).await.unwrap();
    c.flush().await.unwrap();
    let mut got = vec![0u8; n];
    c.read_exact(&mut got).await.unwrap();
    assert_eq!(Sha256::digest(&got), Sha256::digest(&down));
    c.shutdown().await.unwrap();
    tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();

    assert!(!a.is_connected_to(&b.peer_id()));
    let rc = r.relay().unwrap().counters();
    assert!(rc.forwarded > 100, "relay forwarded {rc:?}");
    assert!(rc.server.forwarded > 100);
    assert_eq!(rc.clients, 2);
    assert_eq!(r.stats().route_spoofed.load(Ordering::Relaxed), 0);
}
