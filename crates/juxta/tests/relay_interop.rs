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
use juxta::rendezvous::RendezvousConfig;
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

/// Issue #18 (JXSE paths): a JXSE 2.7 edge that cannot be dialled
/// (`--no-incoming`) leases a Juxta relay (JXSE's `RelayClient`: it asks in
/// its welcome line, then, unanswered, in an explicit CBJX-signed connect
/// message, and keeps the lease only with the relay's `relayAdv`), and
/// reaches, through it, a Juxta edge that does not listen either; the
/// Juxta edge reaches it back the same way. The Juxta peer is rendezvous
/// and relay (JXSE's route queries go through its rendezvous, which
/// answers with a route through itself for an edge leased there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jxse_edge_leases_a_juxta_relay_and_reaches_a_juxta_edge_through_it() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rc = PeerConfig::new(dir.path().join("r"))
        .listen("127.0.0.1:0".parse().unwrap())
        .rendezvous(RendezvousConfig::rendezvous())
        .relay(RelayConfig::server());
    rc.key_bits = 1024;
    let r = Peer::start(rc).await.unwrap();
    let r_addr = r.local_addr().unwrap();
    let mut ec = PeerConfig::new(dir.path().join("e"))
        .rendezvous(RendezvousConfig::edge(vec![r_addr]))
        .relay(RelayConfig::client(vec![r_addr]));
    ec.key_bits = 1024;
    let e = Peer::start(ec).await.unwrap();
    assert_eq!(e.local_addr(), None);
    assert_eq!(
        e.relay().unwrap().wait_leased(WAIT).await,
        Some(r.peer_id())
    );
    let mut sink = e.listen("JuxtaTest", Some("sink")).unwrap();

    let seed = format!("tcp://{r_addr}");
    let mut jxse = tokio::task::block_in_place(|| {
        Jxse::start_with(&["--rdv-seed", &seed, "--relay-seed", &seed, "--no-incoming"])
    });
    let j = jxse.peer_id;
    // The JXSE edge holds a lease at the Juxta relay (E's and its own).
    let relay = r.relay().unwrap();
    let end = std::time::Instant::now() + WAIT;
    while relay.counters().clients < 2 && std::time::Instant::now() < end {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(relay.counters().clients, 2, "{:?}", relay.counters());

    // JXSE -> Juxta edge: JXSE's router finds the route through the relay
    // (route query answered by the Juxta rendezvous/relay) and sends.
    let p = payload(4000);
    let sent = tokio::task::block_in_place(|| {
        jxse.command(&format!(
            "SEND jxta://{}/JuxtaTest/sink 4000",
            e.peer_id().unique_value()
        ));
        jxse.expect("SENT")
    });
    assert_eq!(sent[2], sha(&p));
    let got = tokio::time::timeout(WAIT, sink.recv())
        .await
        .expect("no message from JXSE through the Juxta relay")
        .unwrap();
    assert_eq!(got.from, Some(j));
    assert_eq!(got.message.get("juxta", "payload").unwrap().data, p);

    // Juxta edge -> JXSE, through the relay JXSE leases.
    let to_j = e.route_to(&j, WAIT).await.unwrap();
    assert!(to_j.is_routed());
    let p = payload(3000);
    to_j.send(
        "JuxtaTest",
        Some("sink"),
        Message::new().with(Element::bytes("juxta", "payload", p.clone())),
    )
    .await
    .unwrap();
    let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
    assert_eq!(recv[3], "3000", "JXSE got {recv:?}");
    assert_eq!(recv[4], sha(&p));
    assert!(recv[1].contains(&e.peer_id().unique_value()), "{recv:?}");
    assert!(!e.is_connected_to(&j));
    assert!(relay.counters().forwarded >= 2, "{:?}", relay.counters());
}
