//! A JXSE 2.7 peer (the Java harness in `interop/jxse`) behind a Juxta
//! relay: a Juxta edge with no connection to JXSE finds the route through
//! the relay (route query answered by the relay) and its messages reach
//! JXSE relayed, carrying the Juxta origin's `EndpointRouterMsg-fingerprint`
//! (JXSE verifies it and checks the source, digest §5.3); JXSE's echo comes
//! back to the edge through the relay.
//!
//! Needs `interop/jxse/build.sh` to have run (`scripts/test.sh` does it).

mod common;
mod prereq;

use common::{payload, sha, Jxse, WAIT};
use juxta::relay::RelayConfig;
use juxta::{Peer, PeerConfig};
use juxta_proto::message::{Element, Message};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn juxta_edge_reaches_jxse_through_a_juxta_relay() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let mut jxse = tokio::task::block_in_place(Jxse::start);
    let dir = tempfile::tempdir().unwrap();
    let mut rc = PeerConfig::new(dir.path().join("r"))
        .listen("127.0.0.1:0".parse().unwrap())
        .relay(RelayConfig::server());
    rc.key_bits = 1024;
    let r = Peer::start(rc).await.unwrap();
    r.connect(format!("127.0.0.1:{}", jxse.port).parse().unwrap())
        .await
        .unwrap();
    let mut ac = PeerConfig::new(dir.path().join("a"))
        .relay(RelayConfig::client(vec![r.local_addr().unwrap()]));
    ac.key_bits = 1024;
    let a = Peer::start(ac).await.unwrap();
    assert_eq!(
        a.relay().unwrap().wait_leased(WAIT).await,
        Some(r.peer_id())
    );
    let mut replies = a.listen("JuxtaTest", Some("echo-reply")).unwrap();

    let to_jxse = a.route_to(&jxse.peer_id, WAIT).await.unwrap();
    assert!(to_jxse.is_routed());
    for n in [1usize, 65536] {
        let p = payload(n);
        let msg = Message::new().with(Element::bytes("juxta", "payload", p.clone()));
        to_jxse.send("JuxtaTest", Some("sink"), msg).await.unwrap();
        let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
        assert_eq!(recv[3], n.to_string(), "JXSE got {recv:?}");
        assert_eq!(recv[4], sha(&p));
        assert!(
            recv[1].contains(&a.peer_id().unique_value()),
            "JXSE saw the edge as the source: {recv:?}"
        );
    }
    // JXSE answers through its router: back to the edge via the relay.
    let p = payload(1000);
    to_jxse
        .send(
            "JuxtaTest",
            Some("echo"),
            Message::new().with(Element::bytes("juxta", "payload", p.clone())),
        )
        .await
        .unwrap();
    tokio::task::block_in_place(|| jxse.expect("RECV"));
    let echoed = tokio::task::block_in_place(|| jxse.expect("ECHOED"));
    eprintln!("JXSE: {echoed:?}");
    let got = tokio::time::timeout(WAIT, replies.recv())
        .await
        .expect("no echo from JXSE through the relay")
        .unwrap();
    assert_eq!(got.from, Some(jxse.peer_id));
    assert_eq!(got.message.get("juxta", "payload").unwrap().data, p);
    assert!(!a.is_connected_to(&jxse.peer_id));
    assert!(r.relay().unwrap().counters().forwarded >= 4);
}
