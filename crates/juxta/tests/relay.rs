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

async fn start(
    dir: &tempfile::TempDir,
    name: &str,
    cfg: impl FnOnce(PeerConfig) -> PeerConfig,
) -> Peer {
    let mut c = PeerConfig::new(dir.path().join(name));
    c.key_bits = 1024;
    Peer::start(cfg(c)).await.unwrap()
}

fn adv(name: &str) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    a.name = Some(name.into());
    a
}

/// A relay and two edges leasing it.
async fn trio(dir: &tempfile::TempDir, relay: RelayConfig) -> (Peer, Peer, Peer) {
    trio_with(dir, relay, |c| c).await
}

/// [`trio`] with `b_cfg` applied to edge B's configuration.
async fn trio_with(
    dir: &tempfile::TempDir,
    relay: RelayConfig,
    b_cfg: impl FnOnce(PeerConfig) -> PeerConfig,
) -> (Peer, Peer, Peer) {
    let r = start(dir, "r", |c| {
        c.listen("127.0.0.1:0".parse().unwrap()).relay(relay)
    })
    .await;
    let seeds = vec![r.local_addr().unwrap()];
    let a = start(dir, "a", |c| c.relay(RelayConfig::client(seeds.clone()))).await;
    let b = start(dir, "b", |c| {
        b_cfg(c.relay(RelayConfig::client(seeds.clone())))
    })
    .await;
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
    let ra = b.relay().unwrap().route_advertisement();
    assert_eq!(ra.dest_peer, Some(b.peer_id()));
    assert_eq!(
        ra.dest.addresses,
        vec![format!("relay://{}", r.peer_id().unique_value())]
    );
    assert_eq!(ra.hops.len(), 1);
    assert_eq!(ra.hops[0].peer_id, Some(r.peer_id()));

    // Endpoint messages: route found by a route query to the relay.
    let mut inbox = b.listen("chat", None).unwrap();
    let to_b = a.route_to(&b.peer_id(), WAIT).await.unwrap();
    assert!(to_b.is_routed());
    assert_eq!(to_b.remote(), b.peer_id());
    to_b.send(
        "chat",
        None,
        Message::new().with(Element::text("", "t", "hi")),
    )
    .await
    .unwrap();
    let got = tokio::time::timeout(WAIT, inbox.recv())
        .await
        .unwrap()
        .unwrap();
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
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
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
    // Through a Juxta relay: stream mode, its data carrying offsets (a
    // message the relay refused resets the stream instead of a hole).
    assert_eq!(c.mode(), juxta::socket::SocketMode::Stream);
    c.write_all(&up).await.unwrap();
    c.flush().await.unwrap();
    let mut got = vec![0u8; n];
    c.read_exact(&mut got).await.unwrap();
    assert_eq!(Sha256::digest(&got), Sha256::digest(&down));
    c.shutdown().await.unwrap();
    tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();

    assert!(!a.is_connected_to(&b.peer_id()));
    let rc = r.relay().unwrap().counters();
    // 50 pipe messages, then the socket's set-up, data (1 MiB messages in
    // stream mode) and credit.
    assert!(rc.forwarded > 50, "relay forwarded {rc:?}");
    assert!(rc.server.forwarded + rc.server.passed > 50);
    assert!(rc.server.passed_bytes + rc.server.forwarded_bytes > 4 << 20);
    assert_eq!(rc.clients, 2);
    assert_eq!(r.stats().route_spoofed, 0);
}

/// Between Juxta peers the relayed stream's router header and the origin's
/// fingerprint (over a kilobyte together) travel once per connection, then
/// as references (the compact framing's interned values): a 1-byte pipe
/// message costs its sender tens of bytes, not a kilobyte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_stream_sends_its_header_and_fingerprint_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_r, a, b) = trio(&dir, RelayConfig::server()).await;
    let ad = adv("values");
    let mut input = b.pipes().create_input_pipe(&ad).unwrap();
    let out = a
        .pipes()
        .create_output_pipe(&ad, &[b.peer_id()], WAIT)
        .await
        .unwrap();
    let one = |i: u32| Message::new().with(Element::bytes("app", "d", vec![i as u8]));
    // The first message defines the values on each connection.
    out.send(one(0)).await.unwrap();
    tokio::time::timeout(WAIT, input.recv())
        .await
        .unwrap()
        .unwrap();
    let (a_out, b_in) = (a.stats().bytes_out, b.stats().bytes_in);
    const N: u32 = 200;
    for i in 1..=N {
        out.send(one(i)).await.unwrap();
    }
    for i in 1..=N {
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.from, Some(a.peer_id()));
        // Every message arrives whole: header and fingerprint restored.
        assert_eq!(m.message.get("app", "d").unwrap().data[..], [i as u8]);
    }
    // Without values each message would put about 1,200 bytes on each
    // hop; with them a few tens. The bound leaves room for the peers'
    // own background traffic in the meantime.
    let sent = a.stats().bytes_out - a_out;
    let got = b.stats().bytes_in - b_in;
    assert!(
        sent < u64::from(N) * 200,
        "A sent {sent} bytes for {N} messages"
    );
    assert!(
        got < u64::from(N) * 200,
        "B got {got} bytes for {N} messages"
    );
    assert!(sent >= u64::from(N) && got >= u64::from(N));
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_router_messages_are_refused_and_counted() {
    use juxta_proto::endpoint::address::EndpointAddress;
    use juxta_proto::endpoint::forward::{fingerprint_for, originate};
    use juxta_proto::endpoint::router::{Hop, ELEM_ERM, ELEM_ERM_FINGERPRINT, MAX_ERM_LEN};
    use juxta_proto::message::NS_JXTA;

    let dir = tempfile::tempdir().unwrap();
    let (r, a, b) = trio(&dir, RelayConfig::server()).await;
    // X: a plain peer with a direct connection to the relay.
    let x = start(&dir, "x", |c| c).await;
    let to_r = x.connect(r.local_addr().unwrap()).await.unwrap();
    let send = |erm: Option<Vec<u8>>, fp: Option<bytes::Bytes>| {
        let to_r = to_r.clone();
        async move {
            let mut m = Message::new().with(Element::bytes("app", "d", &b"x"[..]));
            if let Some(e) = erm {
                m.push(Element::typed(
                    NS_JXTA,
                    ELEM_ERM,
                    "text/xml;charset=UTF-8",
                    e,
                ));
            }
            if let Some(fp) = fp {
                m.push(Element::bytes(NS_JXTA, ELEM_ERM_FINGERPRINT, fp));
            }
            to_r.send("EndpointRouter", None, m).await.unwrap();
        }
    };
    let (ap, bp, rp, xp) = (a.peer_id(), b.peer_id(), r.peer_id(), x.peer_id());
    let erm = |h: &juxta_proto::endpoint::router::RouterHeader| Some(h.to_xml().into_bytes());

    // Spoofed source: X claims to be A, without and with (its own) fingerprint.
    let spoof = originate(&ap, &bp, "chat", None, &[]);
    send(erm(&spoof), None).await;
    send(erm(&spoof), Some(fingerprint_for(x.identity()))).await;
    eventually("spoofs counted", || r.stats().route_spoofed == 2).await;

    // Loops: source is the relay; last hop is the relay; relay in the
    // reverse hops; hop limit.
    send(erm(&originate(&rp, &bp, "chat", None, &[])), None).await;
    let mut h = originate(&xp, &bp, "chat", None, &[]);
    h.last = EndpointAddress::peer(&rp, None, None);
    send(erm(&h), None).await;
    let mut h = originate(&xp, &bp, "chat", None, &[]);
    h.reverse.push(Hop {
        pid: Some(rp.to_string()),
        addresses: vec![],
    });
    send(erm(&h), None).await;
    let mut h = originate(&xp, &bp, "chat", None, &[]);
    for i in 0..8u8 {
        h.reverse.push(Hop {
            pid: Some(juxta_proto::id::PeerId::from_public_key_spki(&[i]).to_string()),
            addresses: vec![],
        });
    }
    send(erm(&h), None).await;
    eventually("loops counted", || r.stats().route_loops == 4).await;

    // Malformed: no ERM, garbage, oversized, destination not a peer.
    send(None, None).await;
    send(Some(b"<jxta:ERM><Src>".to_vec()), None).await;
    send(Some(vec![b' '; MAX_ERM_LEN + 1]), None).await;
    let mut h = originate(&xp, &bp, "chat", None, &[]);
    h.dest = "tcp://10.1.2.3:9701/chat".parse().unwrap();
    send(erm(&h), None).await;
    eventually("malformed counted", || r.stats().route_malformed == 4).await;

    // No route to an unknown peer.
    let nobody = juxta_proto::id::PeerId::from_public_key_spki(b"nobody");
    send(erm(&originate(&xp, &nobody, "chat", None, &[])), None).await;
    eventually("no route counted", || r.stats().route_no_route == 1).await;
    // ... and the sender is told, typed (`notLeased`), and counts it.
    eventually("X told", || x.stats().relay_refused == 1).await;

    // The relay still works, and nothing above reached B.
    let mut inbox = b.listen("chat", None).unwrap();
    // A relayed message must carry its origin's fingerprint: without it B
    // refuses it as a spoof, with it B delivers it.
    send(erm(&originate(&xp, &bp, "chat", None, &[])), None).await;
    eventually("B refuses an unproven relayed source", || {
        b.stats().route_spoofed == 1
    })
    .await;
    send(
        erm(&originate(&xp, &bp, "chat", None, &[])),
        Some(fingerprint_for(x.identity())),
    )
    .await;
    let got = tokio::time::timeout(WAIT, inbox.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.from, Some(xp));
    assert!(got.routed);
    assert_eq!(b.stats().route_loops, 0);
    assert_eq!(b.stats().route_malformed, 0);
    drop(a);
}

/// The compact router header (`juxta:ERM`) between Juxta peers on compact
/// framing: relayed traffic uses it and is sent on without queueing; a
/// hostile peer's spoofed, garbled, oversized or doubled headers are
/// refused, typed and counted, and the relay keeps serving; an edge
/// without compact framing (as JXSE) gets the XML ERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_router_header_is_checked_and_jxse_edges_get_xml() {
    use juxta_proto::endpoint::compact_router::{
        CompactRouterHeader, ELEM_COMPACT_ERM, MAX_COMPACT_ERM_LEN, NS_JUXTA,
    };
    use juxta_proto::endpoint::forward::{fingerprint_for, originate};
    use juxta_proto::endpoint::router::{ELEM_ERM, ELEM_ERM_FINGERPRINT};
    use juxta_proto::message::NS_JXTA;

    let dir = tempfile::tempdir().unwrap();
    // B does not speak compact framing: the relay must give it XML.
    let (r, a, b) = trio_with(&dir, RelayConfig::server(), |c| c.compact(false)).await;
    let x = start(&dir, "x", |c| c).await;
    let to_r = x.connect(r.local_addr().unwrap()).await.unwrap();
    assert!(
        to_r.wait_compact(WAIT).await,
        "X and R agree on compact framing"
    );
    let send = |hdr: Option<bytes::Bytes>, xml: Option<String>, fp: Option<bytes::Bytes>| {
        let to_r = to_r.clone();
        async move {
            let mut m = Message::new().with(Element::bytes("app", "d", &b"x"[..]));
            if let Some(h) = hdr {
                m.push(Element::bytes(NS_JUXTA, ELEM_COMPACT_ERM, h));
            }
            if let Some(x) = xml {
                m.push(Element::xml(NS_JXTA, ELEM_ERM, x));
            }
            if let Some(fp) = fp {
                m.push(Element::bytes(NS_JXTA, ELEM_ERM_FINGERPRINT, fp));
            }
            to_r.send("EndpointRouter", None, m).await.unwrap();
        }
    };
    let (ap, bp, xp) = (a.peer_id(), b.peer_id(), x.peer_id());
    let c = |src, dest| Some(CompactRouterHeader::originate(src, dest, "chat", None, &[]).encode());

    // X claims to be A: without a fingerprint, and with its own.
    send(c(&ap, &bp), None, None).await;
    send(c(&ap, &bp), None, Some(fingerprint_for(x.identity()))).await;
    eventually("spoofs counted", || r.stats().route_spoofed == 2).await;
    // Garbled, truncated, oversized, two headers at once.
    let good = c(&xp, &bp).unwrap();
    send(Some(bytes::Bytes::from_static(b"\x01garbage")), None, None).await;
    send(Some(good.slice(..good.len() - 1)), None, None).await;
    send(Some(vec![1u8; MAX_COMPACT_ERM_LEN + 1].into()), None, None).await;
    send(
        Some(good.clone()),
        Some(originate(&xp, &bp, "chat", None, &[]).to_xml()),
        None,
    )
    .await;
    eventually("malformed counted", || r.stats().route_malformed == 4).await;

    // The relay still serves: X's own message reaches B (no compact
    // framing) as XML, which B accepts; a compact header would have been
    // refused there (counted as malformed).
    let mut inbox = b.listen("chat", None).unwrap();
    send(Some(good), None, Some(fingerprint_for(x.identity()))).await;
    let got = tokio::time::timeout(WAIT, inbox.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.from, Some(xp));
    assert!(got.routed);
    assert_eq!(got.message.get("app", "d").unwrap().data.as_ref(), b"x");
    assert_eq!(b.stats().route_malformed, 0);
    assert_eq!(b.stats().route_spoofed, 0);

    // B (XML) to A (compact) on a pipe through the relay.
    let ad = adv("compact-hdr");
    let mut input = a.pipes().create_input_pipe(&ad).unwrap();
    let out = b
        .pipes()
        .create_output_pipe(&ad, &[ap], WAIT)
        .await
        .unwrap();
    out.send(Message::new().with(Element::bytes("app", "d", &b"y"[..])))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, input.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.from, Some(bp));
    // A to X, both Juxta peers on compact framing to the relay: the
    // compact header on both hops, each message proven by A's fingerprint.
    let mut x_inbox = x.listen("chat", None).unwrap();
    let to_x = a.route_to(&xp, WAIT).await.unwrap();
    assert!(to_x.is_routed());
    for i in 0..20u8 {
        to_x.send(
            "chat",
            None,
            Message::new().with(Element::bytes("app", "d", vec![i])),
        )
        .await
        .unwrap();
    }
    for i in 0..20u8 {
        let got = tokio::time::timeout(WAIT, x_inbox.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.from, Some(ap));
        assert!(got.routed);
        assert_eq!(got.message.get("app", "d").unwrap().data.as_ref(), &[i]);
    }
    for p in [&a, &x] {
        assert_eq!(p.stats().route_malformed, 0);
        assert_eq!(p.stats().route_spoofed, 0);
    }
    let rc = r.relay().unwrap().counters();
    assert_eq!(rc.server.dropped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_relay_requests_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Neither CBJX nor the Juxta handshake: the edge's connection never
    // proves its peer ID.
    let r = start(&dir, "r", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .cbjx(false)
            .handshake(false)
            .relay(RelayConfig::server())
    })
    .await;
    let seeds = vec![r.local_addr().unwrap()];
    let e = start(&dir, "e", |c| {
        c.cbjx(false)
            .handshake(false)
            .relay(RelayConfig::client(seeds))
    })
    .await;
    eventually("refusal counted", || r.stats().relay_unauthenticated >= 1).await;
    eventually("edge told", || e.stats().relay_refused >= 1).await;
    assert_eq!(e.relay().unwrap().relay(), None);
    let c = r.relay().unwrap().counters();
    assert!(c.server.refused_unauthenticated >= 1);
    assert_eq!(c.clients, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_edge_queue_and_sender_quota_push_back_then_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let relay = RelayConfig::server()
        .queue(4, 1 << 20)
        .sender_quota(1_000, 256 << 10)
        .max_message(128 << 10)
        .push_back(Duration::from_millis(20));
    // B's listeners hold 4 messages: once its "sink" listener is full, its
    // connection stops reading whatever the machine's speed, so the relay's
    // queue for B fills and refusals must come (with the default 1,024 the
    // 400 messages all fit and refusals only came when the relay forwarded
    // slower than A sent: the test timed out waiting for one under load).
    let (r, a, b) = trio_with(&dir, relay, |mut c| {
        c.listener_queue = 4;
        c
    })
    .await;
    let to_b = a.route_to(&b.peer_id(), WAIT).await.unwrap();
    // Over the relay's message bound: refused at once, typed and counted.
    to_b.send(
        "sink",
        None,
        Message::new().with(Element::bytes("app", "d", vec![0u8; 200 << 10])),
    )
    .await
    .unwrap();
    eventually("too large refused", || {
        r.relay().unwrap().counters().server.refused_too_large == 1
    })
    .await;
    eventually("A told", || a.stats().relay_refused >= 1).await;
    // The relay's final refusals so far (the too-large one).
    let refused_before = r.stats().relay_refused;

    // B does not read: its listener fills (4 messages), its connection
    // stops reading, the relay's queue for B fills, and A's messages are
    // pushed back, then refused. None is lost without being counted.
    let mut sink = b.listen("sink", None).unwrap();
    let sent = 400u64;
    for i in 0..sent {
        let body = vec![(i % 251) as u8; 60 << 10];
        to_b.send(
            "sink",
            None,
            Message::new().with(Element::bytes("app", "d", body)),
        )
        .await
        .unwrap();
    }
    // Messages the relay finally refused (a pushed-back message that gets
    // through on a later try is not one of them).
    let refused = || r.stats().relay_refused - refused_before;
    eventually("queue full refusals", || refused() >= 1).await;
    // Read until every message is accounted for, delivered or refused (the
    // refusals happen at the relay, so the count is also re-checked while
    // no message arrives); a lost message fails at the deadline, not after
    // some quiet period a loaded machine can exceed.
    let mut received = 0u64;
    let deadline = tokio::time::Instant::now() + WAIT;
    while received + refused() < sent && tokio::time::Instant::now() < deadline {
        tokio::select! {
            m = sink.recv() => {
                assert!(m.is_some(), "B's listener closed");
                received += 1;
            }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    assert_eq!(
        received + refused(),
        sent,
        "every message delivered or refused"
    );
    assert!(received >= 4);
    let c = r.relay().unwrap().counters().server;
    // The server counts messages, not attempts: each refused one once,
    // each pushed-back one once.
    assert_eq!(c.refused_queue_full + c.refused_quota, refused(), "{c:?}");
    assert!(c.pushed_back >= refused(), "{c:?}");
    assert_eq!(c.dropped, 0);
    assert!(r.relay().unwrap().queued_for(&b.peer_id()) <= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_route_through_a_relay() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _a, b) = trio(&dir, RelayConfig::server()).await;
    // X is no relay client: it is only connected to R and is told the route.
    let x = start(&dir, "x", |c| c).await;
    x.connect(r.local_addr().unwrap()).await.unwrap();
    assert!(x.messenger(&b.peer_id()).is_err(), "no route yet");
    assert!(matches!(
        x.add_route(b.peer_id(), vec![b.peer_id()]),
        Err(juxta::PeerError::Route(_))
    ));
    x.add_route(b.peer_id(), vec![r.peer_id()]).unwrap();
    let m = x.messenger(&b.peer_id()).unwrap();
    assert!(m.is_routed());
    let mut inbox = b.listen("chat", None).unwrap();
    m.send(
        "chat",
        None,
        Message::new().with(Element::text("", "t", "via R")),
    )
    .await
    .unwrap();
    let got = tokio::time::timeout(WAIT, inbox.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.from, Some(x.peer_id()));
    assert_eq!(got.message.get("", "t").unwrap().as_str(), Some("via R"));
}

/// Prints round-trip and socket figures through a relay beside the direct
/// path (no assertion on time): `cargo test --release -p juxta --test relay
/// -- --ignored --nocapture relay_figures`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn relay_figures() {
    let dir = tempfile::tempdir().unwrap();
    let (r, a, b) = trio(&dir, RelayConfig::server()).await;
    let d = start(&dir, "d", |c| c.listen("127.0.0.1:0".parse().unwrap())).await;
    let direct = a.connect(d.local_addr().unwrap()).await.unwrap();
    let relayed = a.route_to(&b.peer_id(), WAIT).await.unwrap();
    for (name, to, peer) in [("direct", direct, &d), ("relayed", relayed, &b)] {
        let mut echo = peer.listen("echo", None).unwrap();
        let mut back = a.listen("back", Some(name)).unwrap();
        let pp = peer.peer_id();
        let reply_to = a.peer_id();
        let n = 2000;
        let responder = async {
            let mut m = None;
            for _ in 0..n {
                let got = echo.recv().await.unwrap();
                if m.is_none() {
                    m = Some(peer.route_to(&reply_to, WAIT).await.unwrap());
                }
                let m = m.as_ref().unwrap();
                m.send("back", Some(name), got.message).await.unwrap();
            }
        };
        let client = async {
            let t = std::time::Instant::now();
            for _ in 0..n {
                to.send(
                    "echo",
                    None,
                    Message::new().with(Element::bytes("a", "b", &b"1"[..])),
                )
                .await
                .unwrap();
                back.recv().await.unwrap();
            }
            t.elapsed() / n
        };
        let ((), rtt) = tokio::join!(responder, client);
        let sad = adv(&format!("fig-{name}"));
        let mut server = JxtaServerSocket::bind(peer, &sad, SocketConfig::default()).unwrap();
        let size = 32 << 20;
        let srv = tokio::spawn(async move {
            let mut s = server.accept().await.unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut got = 0;
            while got < size {
                got += s.read(&mut buf).await.unwrap();
            }
            s.write_all(b"k").await.unwrap();
            s.flush().await.unwrap();
        });
        let mut c = JxtaSocket::connect(&a.pipes(), &sad, pp, SocketConfig::default())
            .await
            .unwrap();
        let chunk = vec![7u8; 1 << 20];
        let t = std::time::Instant::now();
        for _ in 0..32 {
            c.write_all(&chunk).await.unwrap();
        }
        c.flush().await.unwrap();
        let mut k = [0u8; 1];
        c.read_exact(&mut k).await.unwrap();
        let secs = t.elapsed().as_secs_f64();
        srv.await.unwrap();
        println!(
            "{name}: 1-byte round trip {rtt:?}; socket 32 MiB in {secs:.2} s = {:.0} MB/s",
            32.0 * 1.048576 / secs
        );
    }
    println!("relay counters: {:?}", r.relay().unwrap().counters());
}

/// Routes are believed only when something vouches for them. X is no relay
/// client, only connected to R; it asks R for routes.
/// - To B, which leases R: R's answer carries B's route signed by B naming
///   R, so X learns it and reaches B.
/// - To C, which is merely connected to R (no lease, so no signed route
///   naming R): R's answer is R's word alone ("C is behind me"), which any
///   peer could say of any other; X refuses it and counts it, unless
///   configured to accept unsigned routes (as towards JXSE routers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_signed_or_own_relay_routes_are_learned() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _a, b) = trio(&dir, RelayConfig::server()).await;
    let c = start(&dir, "c", |c| c).await;
    c.connect(r.local_addr().unwrap()).await.unwrap();
    let x = start(&dir, "x", |c| c).await;
    x.connect(r.local_addr().unwrap()).await.unwrap();
    let short = Duration::from_secs(3);

    // Signed by B, naming R as its relay: learned.
    let to_b = x.route_to(&b.peer_id(), WAIT).await.unwrap();
    assert!(to_b.is_routed());
    let mut inbox = b.listen("chat", None).unwrap();
    to_b.send(
        "chat",
        None,
        Message::new().with(Element::text("", "t", "via a signed route")),
    )
    .await
    .unwrap();
    let got = tokio::time::timeout(WAIT, inbox.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.from, Some(x.peer_id()));
    assert!(
        !got.verified.is_verified(),
        "a relayed message never counts as proven"
    );
    assert_eq!(x.stats().routes_unverified, 0);

    // R's unsigned word about C: refused and counted.
    assert!(x.route_to(&c.peer_id(), short).await.is_err());
    assert!(x.stats().routes_unverified >= 1);

    // A peer that accepts unsigned routes takes R's word.
    let y = start(&dir, "y", |mut cfg| {
        cfg.accept_unsigned_routes = true;
        cfg
    })
    .await;
    y.connect(r.local_addr().unwrap()).await.unwrap();
    let to_c = y.route_to(&c.peer_id(), WAIT).await.unwrap();
    assert!(to_c.is_routed());
    assert_eq!(y.stats().routes_unverified, 0);
}

/// The router fingerprint is a bearer token: M, holding a copy of V's
/// (as any peer that ever received a routed message from V does), sends B
/// a routed message "from V". B delivers it as not proven, and does not
/// learn M as the way back to V (which would let M intercept what B sends
/// to V).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_fingerprint_proves_nothing_and_teaches_no_route() {
    use juxta_proto::endpoint::forward::{fingerprint_for, originate};
    use juxta_proto::endpoint::router::{ELEM_ERM, ELEM_ERM_FINGERPRINT};
    use juxta_proto::message::NS_JXTA;

    let dir = tempfile::tempdir().unwrap();
    let b = start(&dir, "b", |c| c.listen("127.0.0.1:0".parse().unwrap())).await;
    let m = start(&dir, "m", |c| c).await;
    let v = start(&dir, "v", |c| c).await;
    let to_b = m.connect(b.local_addr().unwrap()).await.unwrap();
    let mut inbox = b.listen("chat", None).unwrap();
    let h = originate(&v.peer_id(), &b.peer_id(), "chat", None, &[]);
    let msg = Message::new()
        .with(Element::text("", "t", "from V, says M"))
        .with(Element::typed(
            NS_JXTA,
            ELEM_ERM,
            "text/xml;charset=UTF-8",
            h.to_xml().into_bytes(),
        ))
        .with(Element::bytes(
            NS_JXTA,
            ELEM_ERM_FINGERPRINT,
            fingerprint_for(v.identity()),
        ));
    to_b.send("EndpointRouter", None, msg).await.unwrap();
    let got = tokio::time::timeout(WAIT, inbox.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.from, Some(v.peer_id()));
    assert!(got.routed);
    assert!(
        !got.verified.is_verified(),
        "a relayed origin is never proven"
    );
    assert!(
        b.messenger(&v.peer_id()).is_err(),
        "B learned M as the route back to V"
    );
}

/// How the edges of [`firewalled_scenario`] get their relay lease.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lease {
    /// `RelayConfig::client` on the rendezvous seed.
    Explicit,
    /// Nothing configured: the default for a peer with no listen address.
    Automatic,
}

/// A rendezvous that is also a relay, and two edges with no listen
/// address that lease it (rendezvous and relay), all started and leased.
async fn firewalled_trio(dir: &tempfile::TempDir, lease: Lease) -> (Peer, Peer, Peer) {
    firewalled_trio_with(
        dir,
        lease,
        juxta::rendezvous::RendezvousConfig::rendezvous(),
    )
    .await
}

/// [`firewalled_trio`] with the rendezvous configured by `rdv`.
async fn firewalled_trio_with(
    dir: &tempfile::TempDir,
    lease: Lease,
    rdv: juxta::rendezvous::RendezvousConfig,
) -> (Peer, Peer, Peer) {
    use juxta::rendezvous::RendezvousConfig;
    let r = start(dir, "r", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .relay(RelayConfig::server())
            .rendezvous(rdv)
    })
    .await;
    let seeds = vec![r.local_addr().unwrap()];
    let edge = |name: &'static str| {
        let seeds = seeds.clone();
        start(dir, name, move |c| {
            let c = c.rendezvous(RendezvousConfig::edge(seeds.clone()));
            match lease {
                Lease::Explicit => c.relay(RelayConfig::client(seeds)),
                Lease::Automatic => {
                    assert!(c.relay.is_none() && c.auto_relay);
                    c
                }
            }
        })
    };
    let a = edge("a").await;
    let b = edge("b").await;
    for p in [&a, &b] {
        assert!(p.local_addr().is_none(), "edges do not listen");
        assert_eq!(
            p.relay()
                .expect("relay service running")
                .wait_leased(WAIT)
                .await,
            Some(r.peer_id())
        );
        assert!(p.rendezvous().unwrap().wait_leased(WAIT).await.is_some());
    }
    (r, a, b)
}

/// The new user's scenario of the firewalled-edges issue: one peer is
/// both rendezvous and relay; two edges do not listen and hold a relay
/// lease there. B discovers, by name, an advertisement A published, binds
/// an output pipe to it without naming A, sends 10 messages, and streams
/// `socket_bytes` to A over a JXTA socket (checked by SHA-256). Every
/// answer must find its way back to a querier nobody can dial.
async fn firewalled_scenario(lease: Lease, socket_bytes: u32) -> (Peer, Peer, Peer) {
    let dir = tempfile::tempdir().unwrap();
    let (r, a, b) = firewalled_trio(&dir, lease).await;
    new_user_scenario(&[&r], &a, &b, socket_bytes).await;
    (r, a, b)
}

/// The steps of [`firewalled_scenario`] on edges `a` and `b` whose
/// rendezvous are `rdvs` (A's entries must reach one of them).
async fn new_user_scenario(rdvs: &[&Peer], a: &Peer, b: &Peer, socket_bytes: u32) {
    use juxta_proto::advertisement::{AdvKind, Advertisement};
    let ad = adv("firewalled-printer");
    a.discovery()
        .publish(&Advertisement::Pipe(ad.clone()))
        .await
        .unwrap();
    let mut input = a.pipes().create_input_pipe(&ad).unwrap();
    let indexed = || {
        rdvs.iter()
            .map(|r| r.rendezvous().unwrap().status().index_entries)
            .max()
            .unwrap_or(0)
    };
    for _ in 0..400 {
        if indexed() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(indexed() >= 3, "A's entries indexed");

    // First try, no retry.
    let found = b
        .discovery()
        .get_remote(
            AdvKind::Adv,
            Some("Name"),
            Some("firewalled-printer"),
            1,
            None,
            WAIT,
        )
        .await
        .unwrap();
    let [Advertisement::Pipe(got)] = &found[..] else {
        panic!("found {found:?}");
    };
    assert_eq!(got.id, ad.id);
    let out = b.pipes().create_output_pipe(got, &[], WAIT).await.unwrap();
    for i in 0..10 {
        out.send(Message::new().with(Element::text("", "n", &i.to_string())))
            .await
            .unwrap();
    }
    for i in 0..10 {
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            m.message.get("", "n").unwrap().as_str(),
            Some(&*i.to_string())
        );
        assert_eq!(m.from, Some(b.peer_id()));
    }
    // A socket stream from B to A, checked by hash.
    let sadv = adv("firewalled-socket");
    let mut server = JxtaServerSocket::bind(a, &sadv, SocketConfig::default()).unwrap();
    let client = tokio::spawn({
        let (pipes, a_id) = (b.pipes(), a.peer_id());
        async move {
            let mut s = JxtaSocket::connect(&pipes, &sadv, a_id, SocketConfig::default())
                .await
                .unwrap();
            let mut h = Sha256::new();
            let mut chunk = vec![0u8; 1 << 20];
            let mut sent = 0u32;
            while sent < socket_bytes {
                let n = (socket_bytes - sent).min(chunk.len() as u32) as usize;
                for (j, x) in chunk[..n].iter_mut().enumerate() {
                    *x = ((sent as usize + j) % 251) as u8;
                }
                h.update(&chunk[..n]);
                s.write_all(&chunk[..n]).await.unwrap();
                sent += n as u32;
            }
            s.shutdown().await.unwrap();
            h.finalize()
        }
    });
    let mut s = tokio::time::timeout(WAIT, server.accept())
        .await
        .unwrap()
        .unwrap();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        got += n as u64;
    }
    let want = client.await.unwrap();
    assert_eq!(got, u64::from(socket_bytes));
    assert_eq!(h.finalize(), want);
    assert!(!a.is_connected_to(&b.peer_id()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_that_do_not_listen_discover_and_bind_through_the_rendezvous_relay() {
    firewalled_scenario(Lease::Explicit, 4 << 20).await;
}

/// The same scenario with nothing configured about relays: the edges,
/// which cannot be dialled, lease their rendezvous seed as relay by
/// default; the socket carries 100 MB (under a second in release on
/// loopback). Then the other services that answer a querier
/// nobody can dial: route queries, rendezvous lookups, bidirectional pipe
/// set-up, discovery asked of the edge itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_without_relay_configuration_lease_their_rendezvous_by_default() {
    use juxta_proto::advertisement::{AdvKind, Advertisement};
    let (r, a, b) = firewalled_scenario(Lease::Automatic, 100_000_000).await;

    // Route query: B has a route to A through R (learned or asked).
    let to_a = b.route_to(&a.peer_id(), WAIT).await.unwrap();
    assert!(to_a.is_routed());

    // Rendezvous lookup of A's SRDI entry for the pipe, from B.
    let ad = adv("firewalled-lookup");
    let mut _input = a.pipes().create_input_pipe(&ad).unwrap();
    a.discovery()
        .publish(&Advertisement::Pipe(ad.clone()))
        .await
        .unwrap();
    let mut holders = Vec::new();
    for _ in 0..200 {
        holders = b
            .rendezvous()
            .unwrap()
            .lookup("Adv", "Name", "firewalled-lookup", WAIT)
            .await
            .unwrap();
        if !holders.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(holders, vec![a.peer_id()]);

    // Bidirectional pipe, A listening, B connecting by A's ID.
    let bd = adv("firewalled-bidi");
    let mut listener = a.pipes().bind_bidi(&bd).unwrap();
    let srv = tokio::spawn(async move {
        let mut p = listener.accept().await.unwrap();
        let m = p.recv().await.unwrap();
        p.send(m.message).await.unwrap();
        // Kept open until the echo is read.
        p
    });
    let mut bidi = b
        .pipes()
        .connect_bidi(&bd, a.peer_id(), WAIT)
        .await
        .unwrap();
    assert_eq!(bidi.remote(), a.peer_id());
    bidi.send(Message::new().with(Element::text("", "t", "echo me")))
        .await
        .unwrap();
    let echo = tokio::time::timeout(WAIT, bidi.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(echo.message.get("", "t").unwrap().as_str(), Some("echo me"));
    let server_end = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
    assert_eq!(server_end.remote(), b.peer_id());

    // Discovery asked of A itself (through the relay): A's peer
    // advertisement.
    let peers = b
        .discovery()
        .get_remote(
            AdvKind::Peer,
            Some("PID"),
            Some(&a.peer_id().to_string()),
            1,
            Some(a.peer_id()),
            WAIT,
        )
        .await
        .unwrap();
    assert!(
        peers
            .iter()
            .any(|p| matches!(p, Advertisement::Peer(pa) if pa.peer_id == a.peer_id())),
        "{peers:?}"
    );
    assert!(!a.is_connected_to(&b.peer_id()));
    assert_eq!(r.relay().unwrap().counters().clients, 2);
}

/// Opting out, or listening, means no automatic lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_relay_lease_only_for_peers_that_cannot_be_dialled() {
    use juxta::rendezvous::RendezvousConfig;
    let dir = tempfile::tempdir().unwrap();
    let r = start(&dir, "r", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .relay(RelayConfig::server())
            .rendezvous(RendezvousConfig::rendezvous())
    })
    .await;
    let seeds = vec![r.local_addr().unwrap()];
    let off = start(&dir, "off", |c| {
        c.rendezvous(RendezvousConfig::edge(seeds.clone()))
            .auto_relay(false)
    })
    .await;
    let listening = start(&dir, "listening", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .rendezvous(RendezvousConfig::edge(seeds.clone()))
    })
    .await;
    for p in [&off, &listening] {
        assert!(p.relay().is_none());
        assert!(p.rendezvous().unwrap().wait_leased(WAIT).await.is_some());
    }
    assert_eq!(r.relay().unwrap().counters().clients, 0);

    // A rendezvous that is no relay: the edge asks, is told so, and stops
    // asking (one refusal per seed, not one per back-off period).
    let plain = start(&dir, "plain", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .rendezvous(RendezvousConfig::rendezvous())
    })
    .await;
    let e = start(&dir, "e", |c| {
        c.rendezvous(RendezvousConfig::edge(vec![plain.local_addr().unwrap()]))
    })
    .await;
    assert!(e.rendezvous().unwrap().wait_leased(WAIT).await.is_some());
    eventually("refusal received", || e.stats().relay_refused >= 1).await;
    // Longer than the lease task's back-off (2 s): no second request.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(e.stats().relay_refused, 1);
    assert_eq!(plain.stats().relay_refused, 1);
    assert_eq!(e.relay().unwrap().relay(), None);
}

/// No route: connecting a socket, binding a pipe named to a peer, or
/// asking for a messenger to a peer ID nobody knows fails with a typed
/// `NoRoute` listing what was tried, after the route query timeout
/// (900 ms), not after the caller's (60 s) timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_nobody_knows_is_reported_as_no_route() {
    use juxta::pipe::PipeError;
    use juxta::relay::RouteAttempt;
    use juxta::socket::SocketError;
    let dir = tempfile::tempdir().unwrap();
    let (r, a, b) = firewalled_trio(&dir, Lease::Automatic).await;
    // Negative route answers go over compact connections only: wait until
    // every link of the trio has agreed on compact framing, both ends.
    for (x, y) in [(&a, &r), (&r, &a), (&b, &r), (&r, &b)] {
        let m = x.messenger(&y.peer_id()).expect("connected");
        assert!(m.wait_compact(WAIT).await, "compact framing agreed");
    }
    let nobody = juxta_proto::id::PeerId::from_public_key_spki(b"nobody at all");
    let long = SocketConfig {
        connect_timeout: WAIT,
        ..SocketConfig::default()
    };
    let started = tokio::time::Instant::now();
    let connected = JxtaSocket::connect(&a.pipes(), &adv("nowhere"), nobody, long).await;
    // Printed, not asserted (timing): a round of negative answers, not
    // route_query_timeout (900 ms).
    eprintln!(
        "JxtaSocket::connect to nobody failed after {:?}",
        started.elapsed()
    );
    match connected {
        Err(SocketError::NoRoute { peer, tried }) => {
            assert_eq!(peer, nobody);
            assert!(tried.contains(&RouteAttempt::NoConnection), "{tried:?}");
            assert!(tried.contains(&RouteAttempt::NoCachedRoute), "{tried:?}");
            // R (a Juxta relay and rendezvous) asked the other edge, which
            // knows nothing: both answered no, so the search ended without
            // waiting for route_query_timeout.
            assert!(
                tried.contains(&RouteAttempt::Denied(r.peer_id())),
                "the relay/rendezvous answered no: {tried:?}"
            );
            assert!(!tried.contains(&RouteAttempt::NoRelayLease), "{tried:?}");
        }
        Err(e) => panic!("expected NoRoute, got {e}"),
        Ok(_) => panic!("connected to nobody"),
    }
    match a
        .pipes()
        .create_output_pipe(&adv("nowhere"), &[nobody], WAIT)
        .await
    {
        Err(PipeError::NoRoute { peer, .. }) => assert_eq!(peer, nobody),
        Err(e) => panic!("expected NoRoute, got {e}"),
        Ok(_) => panic!("bound to nobody"),
    }
    match a.route_to(&nobody, WAIT).await {
        Err(juxta::PeerError::NoRoute { peer, tried }) => {
            assert_eq!(peer, nobody);
            assert!(!tried.is_empty());
        }
        Err(e) => panic!("expected NoRoute, got {e}"),
        Ok(_) => panic!("route to nobody"),
    }
    // Far less than any of the 60 s timeouts given: reported, not waited
    // out (this only tells the route query timeout from the caller's).
    assert!(started.elapsed() < WAIT);

    // Told a route through R to a peer that never leased there: R refuses
    // to forward (typed `notLeased` refusal, counted on both sides).
    let refused_before = a.stats().relay_refused;
    a.add_route(nobody, vec![r.peer_id()]).unwrap();
    a.messenger(&nobody)
        .unwrap()
        .send(
            "chat",
            None,
            Message::new().with(Element::text("", "t", "to nobody")),
        )
        .await
        .unwrap();
    eventually("R counted no route", || r.stats().route_no_route >= 1).await;
    eventually("A told", || a.stats().relay_refused > refused_before).await;
    assert_eq!(a.relay().unwrap().relay(), Some(r.peer_id()), "lease kept");

    // A peer with no connection at all: nobody to ask.
    let alone = start(&dir, "alone", |c| c).await;
    let t0 = tokio::time::Instant::now();
    let alone_route = alone.route_to(&nobody, WAIT).await;
    eprintln!(
        "route_to with nobody to ask failed after {:?}",
        t0.elapsed()
    );
    match alone_route {
        Err(juxta::PeerError::NoRoute { tried, .. }) => {
            assert!(tried.contains(&RouteAttempt::NobodyToAsk), "{tried:?}");
            assert!(tried.contains(&RouteAttempt::NoRelayLease), "{tried:?}");
        }
        Err(e) => panic!("expected NoRoute, got {e}"),
        Ok(_) => panic!("route to nobody"),
    }
    let Err(e) = alone.route_to(&nobody, WAIT).await else {
        panic!("route to nobody");
    };
    assert!(e.to_string().contains("nobody to ask"), "{e}");
}

/// Reflection: M sends A a pipe binding query in the name of Q, a peer
/// nobody knows, whose route (`SrcPeerRoute`) names T's address and T as
/// hop. A must not hand its answer to T (it dials T's address, finds T is
/// not Q: refused and counted), nor to M (the peer the query came
/// through), and learns no route to Q through T; the answer is dropped
/// (counted) once no route to Q is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_not_reflected_to_a_third_peer_the_query_names() {
    use juxta_proto::endpoint::route_query::route_through;
    use juxta_proto::pipe::binding::{PipeResolverMsg, PIPE_RESOLVER_HANDLER};
    use juxta_proto::resolver::{query_queue, ResolverQuery, RESOLVER_SERVICE};
    let dir = tempfile::tempdir().unwrap();
    let a = start(&dir, "a", |c| c.listen("127.0.0.1:0".parse().unwrap())).await;
    let t = start(&dir, "t", |c| c.listen("127.0.0.1:0".parse().unwrap())).await;
    let m = start(&dir, "m", |c| c).await;
    let ad = adv("reflected");
    let _input = a.pipes().create_input_pipe(&ad).unwrap();
    let q = juxta_proto::id::PeerId::from_public_key_spki(b"querier Q");
    let t_ea = format!("tcp://{}", t.local_addr().unwrap());
    let route = route_through(q, vec![t_ea.clone()], &[(t.peer_id(), vec![t_ea])]);
    let query = PipeResolverMsg::Query {
        pipe_id: ad.id,
        pipe_type: PipeType::Unicast,
        peers: vec![a.peer_id()],
    };
    let rq = ResolverQuery {
        handler: PIPE_RESOLVER_HANDLER.into(),
        query_id: 42,
        hop_count: 0,
        src_peer: q,
        query: query.to_xml(),
        src_route: Some(route),
    };
    let to_a = m.connect(a.local_addr().unwrap()).await.unwrap();
    to_a.send_routed(
        RESOLVER_SERVICE,
        Some(&query_queue("jxta-NetGroup")),
        Message::new().with(rq.to_element("jxta-NetGroup")),
    )
    .await
    .unwrap();
    eventually("A refused T as Q", || a.stats().identity_refused >= 1).await;
    eventually("the answer dropped: no route to Q", || {
        a.stats().resolver_errors >= 1
    })
    .await;
    assert!(a.messenger(&q).is_err(), "A learned a route to Q");
    eventually("A not connected to T", || !a.is_connected_to(&t.peer_id())).await;
    assert!(!m.is_connected_to(&t.peer_id()));
    assert_eq!(t.stats().resolver_errors, 0);
}

/// Secure pipes (TLS 1.3 end to end) between two edges that do not listen:
/// the records travel through the rendezvous/relay, which cannot read
/// them, and each side proves its peer ID to the other (issue #19 item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_pipe_between_edges_that_do_not_listen() {
    use juxta::rendezvous::RendezvousConfig;
    let dir = tempfile::tempdir().unwrap();
    // TLS needs RSA keys of at least 2048 bits.
    let start2048 = |name: &'static str, cfg: Box<dyn FnOnce(PeerConfig) -> PeerConfig + Send>| {
        let home = dir.path().join(name);
        async move {
            let mut c = PeerConfig::new(home);
            c.key_bits = 2048;
            Peer::start(cfg(c)).await.unwrap()
        }
    };
    let r = start2048(
        "r",
        Box::new(|c| {
            c.listen("127.0.0.1:0".parse().unwrap())
                .relay(RelayConfig::server())
                .rendezvous(RendezvousConfig::rendezvous())
        }),
    )
    .await;
    let seeds = vec![r.local_addr().unwrap()];
    let s1 = seeds.clone();
    let a = start2048(
        "a",
        Box::new(move |c| c.rendezvous(RendezvousConfig::edge(s1))),
    )
    .await;
    let b = start2048(
        "b",
        Box::new(move |c| c.rendezvous(RendezvousConfig::edge(seeds))),
    )
    .await;
    for p in [&a, &b] {
        assert!(p.local_addr().is_none());
        assert_eq!(
            p.relay().expect("automatic lease").wait_leased(WAIT).await,
            Some(r.peer_id())
        );
    }
    let mut sad = adv("firewalled-secure");
    sad.pipe_type = PipeType::UnicastSecure;
    let mut input = a.pipes().create_input_pipe(&sad).unwrap();
    let out = b
        .pipes()
        .create_output_pipe(&sad, &[a.peer_id()], WAIT)
        .await
        .unwrap();
    for i in 0..5 {
        out.send(Message::new().with(Element::text("", "n", &i.to_string())))
            .await
            .unwrap();
    }
    for i in 0..5 {
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            m.message.get("", "n").unwrap().as_str(),
            Some(&*i.to_string())
        );
        assert_eq!(m.from, Some(b.peer_id()));
    }
    assert!(!a.is_connected_to(&b.peer_id()));
}

fn prop_adv(name: &str) -> PipeAdvertisement {
    let mut a = adv(name);
    a.pipe_type = PipeType::Propagate;
    a
}

/// Receives from `input` until the message whose `n` is `end`; returns
/// the `n`s before it, in arrival order.
async fn until_end(input: &mut juxta::pipe::InputPipe, end: &str) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .expect("propagated message arrives")
            .unwrap();
        let n = m
            .message
            .get("", "n")
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            m.message
                .get("jxta", "RendezVousPropagatejxta-NetGroup")
                .is_none(),
            "the rendezvous header is not handed to the application"
        );
        if n == end {
            return got;
        }
        got.push(n);
    }
}

/// Propagate pipes between two edges that only dial out (issue #19 item
/// 2): a propagate pipe opened with no target list on edge A hands each
/// message to its rendezvous (also its relay), which delivers it there and
/// sends it on to edge B. Each listener gets every message once (the
/// rendezvous is not sent a second, direct copy; a replay is dropped by
/// message ID), in order, both ways, and the edges never connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagate_pipe_between_edges_that_do_not_listen() {
    let dir = tempfile::tempdir().unwrap();
    let (r, a, b) = firewalled_trio(&dir, Lease::Automatic).await;
    let pad = prop_adv("firewalled-propagate");
    let mut in_a = a.pipes().create_input_pipe(&pad).unwrap();
    let mut in_b = b.pipes().create_input_pipe(&pad).unwrap();
    let mut in_r = r.pipes().create_input_pipe(&pad).unwrap();
    let out_a = a.pipes().create_output_pipe(&pad, &[], WAIT).await.unwrap();
    let out_b = b.pipes().create_output_pipe(&pad, &[], WAIT).await.unwrap();
    let want: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    for n in want.iter().map(String::as_str).chain(["end-a"]) {
        out_a
            .send(Message::new().with(Element::text("", "n", n)))
            .await
            .unwrap();
    }
    assert_eq!(
        until_end(&mut in_b, "end-a").await,
        want,
        "A -> B once each"
    );
    assert_eq!(
        until_end(&mut in_r, "end-a").await,
        want,
        "A -> R once each"
    );
    for n in want.iter().map(String::as_str).chain(["end-b"]) {
        out_b
            .send(Message::new().with(Element::text("", "n", n)))
            .await
            .unwrap();
    }
    assert_eq!(
        until_end(&mut in_a, "end-b").await,
        want,
        "B -> A once each"
    );
    assert_eq!(
        until_end(&mut in_r, "end-b").await,
        want,
        "B -> R once each"
    );
    // The origin does not get its own messages back: the next thing A
    // reads is R's message, not one of its own.
    let out_r = r.pipes().create_output_pipe(&pad, &[], WAIT).await.unwrap();
    out_r
        .send(Message::new().with(Element::text("", "n", "end-r")))
        .await
        .unwrap();
    assert_eq!(until_end(&mut in_a, "end-r").await, Vec::<String>::new());
    assert_eq!(until_end(&mut in_b, "end-r").await, Vec::<String>::new());
    assert!(!a.is_connected_to(&b.peer_id()));
    assert_eq!(r.rendezvous().unwrap().status().refused, 0);
}

/// What an edge makes the rendezvous/relay carry by propagating is bounded
/// by the rendezvous' per-sender propagation rate: beyond it the messages
/// are refused and counted, the other edge gets no more than the budget,
/// and the refused edge's next messages go once its budget refills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_through_the_rendezvous_respects_its_per_edge_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut rdv = juxta::rendezvous::RendezvousConfig::rendezvous();
    rdv.server.propagate_rate = 5;
    let (r, a, b) = firewalled_trio_with(&dir, Lease::Automatic, rdv).await;
    let pad = prop_adv("budgeted-propagate");
    let mut in_b = b.pipes().create_input_pipe(&pad).unwrap();
    let out_a = a.pipes().create_output_pipe(&pad, &[], WAIT).await.unwrap();
    const BURST: usize = 50;
    for i in 0..BURST {
        out_a
            .send(Message::new().with(Element::text("", "n", &i.to_string())))
            .await
            .unwrap();
    }
    let rh = r.rendezvous().unwrap();
    eventually("R refused the excess", || rh.status().refused >= 10).await;
    // After the budget refills (5 per second), one more goes through.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    out_a
        .send(Message::new().with(Element::text("", "n", "end")))
        .await
        .unwrap();
    let got = until_end(&mut in_b, "end").await;
    assert!(!got.is_empty(), "the budget let some through");
    assert!(
        got.len() + rh.status().refused as usize >= BURST,
        "every message was either carried or refused and counted"
    );
    assert!(
        got.len() < BURST,
        "the excess was not carried: {}",
        got.len()
    );
    assert!(!a.is_connected_to(&b.peer_id()));
}

/// The rendezvous and the relay on different peers (issue #19 item 2): two
/// edges that do not listen, seeded with a rendezvous that is no relay,
/// and leasing a separate relay. Discovery by name through the
/// rendezvous, a pipe bound without naming its holder, messages, and a
/// socket stream: every answer and every data message goes back through
/// the relay, the rendezvous only carries queries and SRDI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendezvous_and_relay_on_different_peers() {
    use juxta::rendezvous::RendezvousConfig;
    let dir = tempfile::tempdir().unwrap();
    let rdv = start(&dir, "rdv", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .rendezvous(RendezvousConfig::rendezvous())
    })
    .await;
    let relay = start(&dir, "relay", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .relay(RelayConfig::server())
    })
    .await;
    let (rdv_seeds, relay_seeds) = (
        vec![rdv.local_addr().unwrap()],
        vec![relay.local_addr().unwrap()],
    );
    let edge = |name: &'static str| {
        let (s1, s2) = (rdv_seeds.clone(), relay_seeds.clone());
        start(&dir, name, move |c| {
            c.rendezvous(RendezvousConfig::edge(s1))
                .relay(RelayConfig::client(s2))
        })
    };
    let a = edge("a").await;
    let b = edge("b").await;
    for p in [&a, &b] {
        assert!(p.local_addr().is_none(), "edges do not listen");
        assert_eq!(
            p.relay().unwrap().wait_leased(WAIT).await,
            Some(relay.peer_id())
        );
        assert_eq!(
            p.rendezvous().unwrap().wait_leased(WAIT).await,
            Some(rdv.peer_id())
        );
    }
    assert!(rdv.relay().is_none(), "the rendezvous is no relay");
    new_user_scenario(&[&rdv], &a, &b, 8 << 20).await;
    assert!(!a.is_connected_to(&b.peer_id()));
    let c = relay.relay().unwrap().counters();
    assert_eq!(c.clients, 2);
    assert!(
        c.server.forwarded + c.server.passed > 10,
        "the data went through the relay: {c:?}"
    );
}

/// A chain of two relays (issue #19 item 2): A leases R1, B leases R2;
/// R1 and R2 are rendezvous of one peer view and relays, connected to
/// each other, and A and B only dial out to their own. Discovery by name
/// across the peer view, a pipe bound without naming its holder, messages
/// and a socket stream go A - R1 - R2 - B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_pipe_and_socket_through_a_chain_of_two_relays() {
    use juxta::rendezvous::RendezvousConfig;
    let dir = tempfile::tempdir().unwrap();
    let r2 = start(&dir, "r2", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .relay(RelayConfig::server())
            .rendezvous(RendezvousConfig::rendezvous())
    })
    .await;
    let r2_addr = r2.local_addr().unwrap();
    let r1 = start(&dir, "r1", |c| {
        c.listen("127.0.0.1:0".parse().unwrap())
            .relay(RelayConfig::server())
            .rendezvous(RendezvousConfig::rendezvous().peers(vec![r2_addr]))
    })
    .await;
    let r1_addr = r1.local_addr().unwrap();
    let a = start(&dir, "a", |c| {
        c.rendezvous(RendezvousConfig::edge(vec![r1_addr]))
    })
    .await;
    let b = start(&dir, "b", |c| {
        c.rendezvous(RendezvousConfig::edge(vec![r2_addr]))
    })
    .await;
    for (p, r) in [(&a, &r1), (&b, &r2)] {
        assert!(p.local_addr().is_none(), "edges do not listen");
        assert_eq!(
            p.relay().expect("automatic lease").wait_leased(WAIT).await,
            Some(r.peer_id())
        );
        assert_eq!(
            p.rendezvous().unwrap().wait_leased(WAIT).await,
            Some(r.peer_id())
        );
    }
    eventually("peer view formed", || {
        r1.rendezvous().unwrap().status().view == 1 && r2.rendezvous().unwrap().status().view == 1
    })
    .await;
    new_user_scenario(&[&r1, &r2], &a, &b, 8 << 20).await;
    assert!(!a.is_connected_to(&b.peer_id()));
    assert!(!a.is_connected_to(&r2.peer_id()), "A only dialled R1");
    assert!(!b.is_connected_to(&r1.peer_id()), "B only dialled R2");
    let (c1, c2) = (
        r1.relay().unwrap().counters(),
        r2.relay().unwrap().counters(),
    );
    assert!(c1.forwarded > 10 && c2.forwarded > 10, "{c1:?} {c2:?}");
}

/// The stream channel through a relay (issue #19 item 2): a socket
/// between two edges that only dial out runs Juxta's stream mode (not
/// `jxtarel`), with its credit flow control end to end: while the
/// receiver reads nothing, the sender's writes complete for no more than
/// the receiver's window, however fast the relay could carry them; once
/// it reads, everything arrives, in order, checked by SHA-256, and both
/// ends' stream counters show no refused or foreign message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_mode_through_a_relay_with_credit_end_to_end() {
    use juxta::socket::SocketMode;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    const WINDOW: u64 = 64 * 1024;
    const TOTAL: usize = 8 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (r, a, b) = firewalled_trio(&dir, Lease::Automatic).await;
    let sadv = adv("relayed-stream");
    let small = SocketConfig {
        stream_window: WINDOW,
        ..SocketConfig::default()
    };
    let mut server = JxtaServerSocket::bind(&a, &sadv, small).unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let client = tokio::spawn({
        let (pipes, a_id, written) = (b.pipes(), a.peer_id(), written.clone());
        let sadv = sadv.clone();
        async move {
            let mut s = JxtaSocket::connect(&pipes, &sadv, a_id, SocketConfig::default())
                .await
                .unwrap();
            assert_eq!(s.mode(), SocketMode::Stream, "stream mode, relayed");
            let mut h = Sha256::new();
            let mut off = 0usize;
            while off < TOTAL {
                let n = (TOTAL - off).min(48 * 1024);
                let chunk: Vec<u8> = (off..off + n).map(|i| (i % 253) as u8).collect();
                h.update(&chunk);
                s.write_all(&chunk).await.unwrap();
                off += n;
                written.store(off as u64, Ordering::SeqCst);
            }
            s.shutdown().await.unwrap();
            (h.finalize(), s.stream_stats().unwrap())
        }
    });
    let mut s = tokio::time::timeout(WAIT, server.accept())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.mode(), SocketMode::Stream);
    // Not reading: the sender runs out of credit at the window (plus at
    // most one 48 KiB write the credit cut short, still pending).
    eventually("the sender used its credit", || {
        written.load(Ordering::SeqCst) > 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let early = written.load(Ordering::SeqCst);
    assert!(
        early <= WINDOW,
        "wrote {early} bytes past a {WINDOW}-byte window"
    );
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0usize;
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        got += n;
    }
    let (want, client_stats) = tokio::time::timeout(WAIT, client).await.unwrap().unwrap();
    assert_eq!(got, TOTAL);
    assert_eq!(h.finalize(), want);
    let server_stats = s.stream_stats().unwrap();
    assert!(server_stats.data_in > 0);
    assert_eq!(server_stats.violations, 0);
    assert!(
        client_stats.credits_in > 0,
        "credit came back through the relay"
    );
    assert_eq!(s.stream_foreign(), Some(0));
    assert!(!a.is_connected_to(&b.peer_id()), "relayed");
    let c = r.relay().unwrap().counters();
    assert_eq!(
        c.server.refused_queue_full + c.server.refused_quota,
        0,
        "{c:?}"
    );
}
