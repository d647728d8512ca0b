//! Rendezvous and SRDI interop with live JXSE 2.7 peers (the harness in
//! `interop/jxse`, started as an edge with `--rdv-seed` or as a rendezvous
//! with `--rendezvous`).
//!
//! - A JXSE edge leases a Juxta rendezvous and discovers, through it, an
//!   advertisement a Juxta edge published: the Juxta edge pushed its SRDI
//!   entries to the rendezvous (JXSE's gzip `jxta:GenSRDI` on the resolver
//!   SRDI queue), the JXSE edge's query reached the rendezvous walked on
//!   `JxtaPropagate`, the rendezvous forwarded it to the publisher by its
//!   index, and the publisher answered the JXSE edge over the route the
//!   query carried.
//! - A Juxta edge discovers through a JXSE rendezvous: two Juxta edges lease
//!   it, one publishes (SRDI to JXSE's index), the other's query is
//!   forwarded by JXSE to the publisher, which answers directly.
//! - Two Juxta edges that do not listen do the same through a JXSE
//!   rendezvous, then bind pipes both ways and exchange messages: answers
//!   and messages go through the rendezvous (its router's route).
//!
//! JXSE edges are not used as publishers: JXSE 2.7's edge discovery service
//! never creates its SRDI manager when it starts as an edge
//! (`DiscoveryServiceImpl.beEdge` returns early because `isRdv` starts
//! false), so a JXSE edge pushes no SRDI at all (its push fails with a
//! NullPointerException); docs/interop.md has the details.

mod common;
mod prereq;

use std::time::{Duration, Instant};

use common::Jxse;
use juxta::rendezvous::RendezvousConfig;
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
use juxta_proto::id::PipeId;
use juxta_proto::message::{Element, Message};
use sha2::Digest;

/// `JUXTA_TEST_LOG=1` prints Juxta's debug log (to follow a failure).
fn log() {
    if std::env::var_os("JUXTA_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .try_init();
    }
}

async fn peer(dir: &std::path::Path, name: &str, rc: RendezvousConfig) -> Peer {
    log();
    let mut cfg = PeerConfig::new(dir.join(name))
        .listen("127.0.0.1:0".parse().unwrap())
        .rendezvous(rc);
    cfg.key_bits = 1024;
    Peer::start(cfg).await.unwrap()
}

fn pipe_adv(name: &str) -> (PipeId, Advertisement) {
    let id = PipeId::new_random();
    let mut a = PipeAdvertisement::new(id, PipeType::Unicast);
    a.name = Some(name.to_string());
    (id, Advertisement::Pipe(a))
}

/// `publisher` publishes a pipe advertisement named `name`; `asker` asks
/// for it by remote discovery until found (the SRDI push and the query
/// race; bounded at 60 s) and it must be that advertisement.
async fn publish_and_find(publisher: &Peer, asker: &Peer, name: &str) -> PipeAdvertisement {
    let (pipe_id, adv) = pipe_adv(name);
    publish_then_find(publisher, asker, name, pipe_id, &adv).await
}

/// As [`publish_and_find`], for an advertisement made by the caller.
async fn publish_then_find(
    publisher: &Peer,
    asker: &Peer,
    name: &str,
    pipe_id: PipeId,
    adv: &Advertisement,
) -> PipeAdvertisement {
    publisher.discovery().publish(adv).await.unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    let found = loop {
        let r = asker
            .discovery()
            .get_remote(
                AdvKind::Adv,
                Some("Name"),
                Some(name),
                1,
                None,
                Duration::from_secs(3),
            )
            .await
            .unwrap();
        if !r.is_empty() || Instant::now() > end {
            break r;
        }
    };
    match &found[..] {
        [Advertisement::Pipe(p)] if p.id == pipe_id => p.clone(),
        _ => panic!("found {found:?}"),
    }
}

/// Polls the harness' `RDV_STATUS` until it reports a lease (or the
/// deadline); returns the last status line.
fn wait_jxse_leased(j: &mut Jxse, deadline: Duration) -> Vec<String> {
    let end = Instant::now() + deadline;
    loop {
        j.command("RDV_STATUS");
        let s = j.expect("RDV");
        if s.get(2).map(String::as_str) == Some("true") || Instant::now() > end {
            return s;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jxse_edge_discovers_through_a_juxta_rendezvous() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rdv = peer(dir.path(), "rdv", RendezvousConfig::rendezvous()).await;
    let rdv_addr = rdv.local_addr().unwrap();
    let edge = peer(dir.path(), "edge", RendezvousConfig::edge(vec![rdv_addr])).await;
    let h = edge.rendezvous().unwrap();
    assert_eq!(
        h.wait_leased(Duration::from_secs(30)).await,
        Some(rdv.peer_id())
    );

    let name = format!("juxta-printer-{}", std::process::id());
    let (pipe_id, adv) = pipe_adv(&name);
    edge.discovery().publish(&adv).await.unwrap();
    // The rendezvous indexed the entries (Name and Id of the pipe).
    let rh = rdv.rendezvous().unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while rh.status().index_entries < 2 && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rh.status().index_entries >= 2, "{:?}", rh.status());

    let seed = format!("tcp://{rdv_addr}");
    let found = tokio::task::spawn_blocking(move || {
        let mut j = Jxse::start_with(&["--rdv-seed", &seed]);
        let st = wait_jxse_leased(&mut j, Duration::from_secs(60));
        eprintln!("JXSE edge: {st:?}");
        j.command(&format!("DISC_REMOTE Name {name} 30000"));
        let found = j.expect("FOUND");
        (st, found, j.peer_id)
    })
    .await
    .unwrap();
    let (status, found, jxse_id) = found;
    assert_eq!(status[2], "true", "JXSE edge never leased: {status:?}");
    assert_eq!(
        status[3],
        rdv.peer_id().to_string(),
        "leased the Juxta rendezvous"
    );
    assert_eq!(found[1], format!("juxta-printer-{}", std::process::id()));
    assert_eq!(found[2], pipe_id.to_string());
    // The rendezvous counted the JXSE edge among its clients at some point
    // and handled its query; the answer came from the publisher.
    assert!(rh.status().queries >= 1, "{:?}", rh.status());
    let _ = jxse_id;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_juxta_edge_discovers_through_a_jxse_rendezvous() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut j, port) = tokio::task::spawn_blocking(|| {
        let j = Jxse::start_with(&["--rendezvous"]);
        let p = j.port;
        (j, p)
    })
    .await
    .unwrap();
    let seeds = vec![format!("127.0.0.1:{port}").parse().unwrap()];
    let publisher = peer(dir.path(), "pub", RendezvousConfig::edge(seeds.clone())).await;
    let asker = peer(dir.path(), "ask", RendezvousConfig::edge(seeds)).await;
    for p in [&publisher, &asker] {
        assert_eq!(
            p.rendezvous()
                .unwrap()
                .wait_leased(Duration::from_secs(30))
                .await,
            Some(j.peer_id),
            "leased the JXSE rendezvous"
        );
    }
    publish_and_find(
        &publisher,
        &asker,
        &format!("via-jxse-{}", std::process::id()),
    )
    .await;
    // JXSE lists both Juxta edges as its clients.
    let st = tokio::task::spawn_blocking(move || {
        j.command("RDV_STATUS");
        j.expect("RDV")
    })
    .await
    .unwrap();
    assert!(st[3].contains(&publisher.peer_id().to_string()), "{st:?}");
    assert!(st[3].contains(&asker.peer_id().to_string()), "{st:?}");
}

/// Issue #19 against JXSE: two Juxta edges that do not listen (no TCP
/// address at all), seeded with a JXSE 2.7 rendezvous (relay off, as the
/// harness runs it), lease it; one discovers what the other published,
/// binds an output pipe to the other's input pipe without naming its
/// holder, and pipe messages go both ways. Neither edge can dial the
/// other: every answer and message travels over the connections they
/// opened to the rendezvous. As a JXSE edge does, the answering edge asks
/// for a route to the querier (`EndpointRouter` route query, carrying its
/// own route, which JXSE requires); JXSE's router answers with a route
/// through itself (it holds the querier's connection), which the edge
/// believes because that is the rendezvous it leases; JXSE's router then
/// forwards the ERM-addressed answer to the querier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn juxta_edges_that_do_not_listen_discover_through_a_jxse_rendezvous() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    log();
    let dir = tempfile::tempdir().unwrap();
    let (mut j, port) = tokio::task::spawn_blocking(|| {
        let j = Jxse::start_with(&["--rendezvous"]);
        let p = j.port;
        (j, p)
    })
    .await
    .unwrap();
    let seeds: Vec<std::net::SocketAddr> = vec![format!("127.0.0.1:{port}").parse().unwrap()];
    let edge = |name: &str| {
        let mut cfg = PeerConfig::new(dir.path().join(name))
            .rendezvous(RendezvousConfig::edge(seeds.clone()));
        cfg.key_bits = 1024;
        cfg
    };
    let publisher = Peer::start(edge("pub")).await.unwrap();
    let asker = Peer::start(edge("ask")).await.unwrap();
    assert_eq!(
        publisher.local_addr(),
        None,
        "the publisher does not listen"
    );
    assert_eq!(asker.local_addr(), None, "the asker does not listen");
    for p in [&publisher, &asker] {
        assert_eq!(
            p.rendezvous()
                .unwrap()
                .wait_leased(Duration::from_secs(30))
                .await,
            Some(j.peer_id),
            "leased the JXSE rendezvous"
        );
    }
    // The publisher holds an input pipe for the advertisement it
    // publishes (its SRDI entry goes to the JXSE rendezvous too).
    let name = format!("via-jxse-nolisten-{}", std::process::id());
    let (pipe_id, adv) = pipe_adv(&name);
    let Advertisement::Pipe(pa) = &adv else {
        unreachable!()
    };
    let mut input = publisher.pipes().create_input_pipe(pa).unwrap();
    let found = publish_then_find(&publisher, &asker, &name, pipe_id, &adv).await;

    // Binding without naming the holder: the query goes to the JXSE
    // rendezvous, which forwards it to the publisher; its answer comes
    // back through the rendezvous.
    let out = asker
        .pipes()
        .create_output_pipe(&found, &[], Duration::from_secs(30))
        .await
        .expect("bound through the JXSE rendezvous");
    assert_eq!(out.remote(), Some(publisher.peer_id()));
    for i in 0..10u8 {
        out.send(Message::new().with(Element::bytes("app", "d", vec![i; 1000 + usize::from(i)])))
            .await
            .unwrap();
    }
    // All ten, each intact; in any order: forwarded by JXSE's router they
    // arrived out of order in some runs (seen: 1, 2, 0, 3, ...), and
    // unicast pipes promise no order.
    let mut got = Vec::new();
    while got.len() < 10 {
        let m = tokio::time::timeout(Duration::from_secs(30), input.recv())
            .await
            .unwrap_or_else(|_| panic!("pipe messages through the JXSE rendezvous: {got:?}"))
            .unwrap();
        assert_eq!(m.from, Some(asker.peer_id()));
        let d = m.message.get("app", "d").unwrap();
        let i = d.data[0];
        assert_eq!(&d.data[..], &vec![i; 1000 + usize::from(i)][..]);
        got.push(i);
    }
    got.sort_unstable();
    assert_eq!(got, (0..10).collect::<Vec<u8>>());
    assert!(!publisher.is_connected_to(&asker.peer_id()));
    assert!(!asker.is_connected_to(&publisher.peer_id()));

    // And back: the asker holds a pipe, the publisher binds to it from
    // its advertisement alone.
    let (_, back_adv) = pipe_adv(&format!("{name}-back"));
    let Advertisement::Pipe(back) = back_adv else {
        unreachable!()
    };
    let mut back_in = asker.pipes().create_input_pipe(&back).unwrap();
    let back_out = publisher
        .pipes()
        .create_output_pipe(&back, &[], Duration::from_secs(30))
        .await
        .expect("bound back through the JXSE rendezvous");
    assert_eq!(back_out.remote(), Some(asker.peer_id()));
    back_out
        .send(Message::new().with(Element::bytes("app", "d", &b"reply"[..])))
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(30), back_in.recv())
        .await
        .expect("reply through the JXSE rendezvous")
        .unwrap();
    assert_eq!(m.from, Some(publisher.peer_id()));
    assert_eq!(&m.message.get("app", "d").unwrap().data[..], b"reply");

    let st = tokio::task::spawn_blocking(move || {
        j.command("RDV_STATUS");
        j.expect("RDV")
    })
    .await
    .unwrap();
    assert!(st[3].contains(&asker.peer_id().to_string()), "{st:?}");
    assert!(st[3].contains(&publisher.peer_id().to_string()), "{st:?}");
}

/// Issue #18 (JXSE paths): propagate pipes through a Juxta rendezvous,
/// both ways. A JXSE edge sends on a propagate pipe to the whole group
/// (`WirePipe.sendMessage` with no peers: walked to its rendezvous,
/// service `jxta.service.wirepipe`, with a `JxtaWireHeader`); the Juxta
/// rendezvous delivers it to its own listeners and to its edges, and a
/// Juxta edge that does not listen receives each message once. Then that
/// Juxta edge propagates on the same pipe and the JXSE edge's listener
/// gets it (JXSE's wire pipe drops a message without a `JxtaWireHeader`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagate_pipes_between_a_jxse_edge_and_juxta_edges_through_a_juxta_rendezvous() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    log();
    let dir = tempfile::tempdir().unwrap();
    let rdv = peer(dir.path(), "rdv", RendezvousConfig::rendezvous()).await;
    let rdv_addr = rdv.local_addr().unwrap();
    let mut ec =
        PeerConfig::new(dir.path().join("edge")).rendezvous(RendezvousConfig::edge(vec![rdv_addr]));
    ec.key_bits = 1024;
    let edge = Peer::start(ec).await.unwrap();
    assert_eq!(edge.local_addr(), None);
    assert_eq!(
        edge.rendezvous()
            .unwrap()
            .wait_leased(Duration::from_secs(30))
            .await,
        Some(rdv.peer_id())
    );
    let pipe = PipeId::new_random();
    let mut pa = PipeAdvertisement::new(pipe, PipeType::Propagate);
    pa.name = Some("juxta-harness".into());
    let mut at_edge = edge.pipes().create_input_pipe(&pa).unwrap();
    let mut at_rdv = rdv.pipes().create_input_pipe(&pa).unwrap();

    let seed = format!("tcp://{rdv_addr}");
    let mut j = tokio::task::spawn_blocking(move || {
        let mut j = Jxse::start_with(&["--rdv-seed", &seed]);
        let st = wait_jxse_leased(&mut j, Duration::from_secs(60));
        assert_eq!(st[2], "true", "JXSE edge never leased: {st:?}");
        j
    })
    .await
    .unwrap();
    let jxse_id = j.peer_id;

    // JXSE -> Juxta: three messages to the whole group.
    let (mut j, sent) = tokio::task::spawn_blocking(move || {
        j.command(&format!("PIPE_SEND {pipe} - 1500 3 propagate"));
        let s = j.expect("PIPE_SENT");
        (j, s)
    })
    .await
    .unwrap();
    let sha = sent[3].clone();
    // The rendezvous first: if nothing arrives there, JXSE did not send
    // (or the rendezvous refused); if only the edge misses it, the fan-out
    // lost it.
    for (who, input) in [("rendezvous", &mut at_rdv), ("edge", &mut at_edge)] {
        for _ in 0..3 {
            let m = tokio::time::timeout(Duration::from_secs(30), input.recv())
                .await
                .unwrap_or_else(|_| panic!("JXSE's propagated message did not reach the {who}"))
                .unwrap();
            let d = m.message.get("juxta", "payload").expect("payload");
            assert_eq!(d.data.len(), 1500);
            assert_eq!(hex::encode(sha2::Sha256::digest(&d.data)), sha);
        }
        // Each once.
        assert!(
            tokio::time::timeout(Duration::from_millis(500), input.recv())
                .await
                .is_err(),
            "a duplicate at the {who}"
        );
    }

    // Juxta edge -> JXSE edge, through the rendezvous.
    let mut j = tokio::task::spawn_blocking(move || {
        j.command(&format!("PIPE_LISTEN {pipe} propagate"));
        j.expect("PIPE_LISTENING");
        j
    })
    .await
    .unwrap();
    let out = edge
        .pipes()
        .create_output_pipe(&pa, &[], Duration::from_secs(10))
        .await
        .unwrap();
    let body = vec![7u8; 2000];
    out.send(Message::new().with(Element::bytes("juxta", "payload", body.clone())))
        .await
        .unwrap();
    let got = tokio::task::spawn_blocking(move || {
        let r = j.expect("PIPE_RECV");
        (j, r)
    })
    .await
    .unwrap()
    .1;
    assert_eq!(got[2], "2000", "{got:?}");
    assert_eq!(got[3], hex::encode(sha2::Sha256::digest(&body)));
    let _ = jxse_id;
}
