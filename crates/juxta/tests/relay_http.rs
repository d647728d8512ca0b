//! The HTTP relay: an edge that can only speak HTTP leases a relay over
//! JXTA's HTTP transport (`RelayConfig::client_http`) and exchanges endpoint
//! and pipe messages, both ways, with a TCP edge of the same relay; they
//! never connect to each other, and everything for the HTTP edge is spooled
//! on the relay and returned in its polls.

use std::time::Duration;

use juxta::relay::RelayConfig;
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::PipeId;
use juxta_proto::message::{Element, Message};

const WAIT: Duration = Duration::from_secs(60);

async fn start(
    dir: &tempfile::TempDir,
    name: &str,
    cfg: impl FnOnce(PeerConfig) -> PeerConfig,
) -> Peer {
    let mut c = PeerConfig::new(dir.path().join(name));
    c.key_bits = 1024;
    Peer::start(cfg(c)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_only_edge_talks_through_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(&dir, "r", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .http_listen("127.0.0.1:0".parse().unwrap())
            .relay(RelayConfig::server())
    })
    .await;
    let http_seed = vec![r.http_local_addr().unwrap()];
    let tcp_seed = vec![r.local_addr().unwrap()];
    // `h` opens no TCP connection at all: it does not listen and its only
    // seed is the relay's HTTP listener.
    let h = start(&dir, "h", |c| c.relay(RelayConfig::client_http(http_seed))).await;
    let t = start(&dir, "t", |c| c.relay(RelayConfig::client(tcp_seed))).await;
    for p in [&h, &t] {
        assert_eq!(
            p.relay().unwrap().wait_leased(WAIT).await,
            Some(r.peer_id())
        );
    }
    assert_eq!(r.http_server().unwrap().session_count(), 1);

    // TCP edge -> HTTP edge (spooled on the relay, returned in polls).
    let mut inbox_h = h.listen("chat", None).unwrap();
    let to_h = t.route_to(&h.peer_id(), WAIT).await.unwrap();
    assert!(to_h.is_routed());
    for i in 0..20 {
        to_h.send(
            "chat",
            None,
            Message::new().with(Element::text("", "n", &i.to_string())),
        )
        .await
        .unwrap();
    }
    for i in 0..20 {
        let d = tokio::time::timeout(WAIT, inbox_h.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.from, Some(t.peer_id()));
        assert_eq!(
            d.message.get("", "n").unwrap().as_str(),
            Some(i.to_string().as_str())
        );
    }

    // HTTP edge -> TCP edge, over a unicast pipe bound through the relay.
    let mut adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    adv.name = Some("http-relay".into());
    let mut input = t.pipes().create_input_pipe(&adv).unwrap();
    let out = h
        .pipes()
        .create_output_pipe(&adv, &[t.peer_id()], WAIT)
        .await
        .unwrap();
    let payload = vec![7u8; 64 * 1024];
    out.send(Message::new().with(Element::bytes("", "p", payload.clone())))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, input.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.message.get("", "p").unwrap().data.as_ref(), &payload[..]);
    assert!(!h.is_connected_to(&t.peer_id()), "no direct connection");
    let c = r.relay().unwrap().counters().server;
    assert!(c.forwarded + c.passed >= 21, "{c:?}");
}
