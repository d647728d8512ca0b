//! Pipes between Juxta peers on loopback: unicast (compact and JXTA
//! framing), many senders into one input pipe, propagate fan-out, secure
//! pipes, bidirectional pipes (unreliable and reliable), and bad input
//! (unknown pipe, unanswerable resolution, malformed resolver traffic,
//! malformed and foreign reliable bidi blocks).

use std::time::Duration;

use bytes::Bytes;
use juxta::pipe::bidi::{BidiMode, BidiPipe};
use juxta::pipe::PipeError;
use juxta::{Peer, PeerConfig, Verified};
use juxta_proto::advertisement::{PeerAdvertisement, PipeAdvertisement, PipeType};
use juxta_proto::id::{PeerGroupId, PipeId};
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{Element, Message};
use juxta_proto::socket::bidi_block::{close_message, encode_block};
use juxta_proto::socket::reliable::{parse, Incoming, Segment, MIME_BLOCK};
use juxta_proto::socket::setup::{ConnectRequest, ConnectResponse, SetupKind};

const WAIT: Duration = Duration::from_secs(20);

fn payload(n: usize) -> Bytes {
    Bytes::from((0..n).map(|i| (i * 31 + 7) as u8).collect::<Vec<u8>>())
}

fn adv(ty: PipeType) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), ty);
    a.name = Some("test-pipe".into());
    a
}

async fn peer(dir: &tempfile::TempDir, name: &str, listen: bool, compact: bool) -> Peer {
    let mut c = PeerConfig::new(dir.path().join(name));
    if listen {
        c = c.listen("127.0.0.1:0".parse().unwrap());
    }
    c.connection.compact = compact;
    Peer::start(c).await.unwrap()
}

fn data_msg(p: &Bytes) -> Message {
    Message::new().with(Element::bytes("test", "data", p.clone()))
}

async fn unicast(compact: bool) {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, compact).await;
    let b = peer(&dir, "b", false, compact).await;
    let ad = adv(PipeType::Unicast);
    let mut input = a.pipes().create_input_pipe(&ad).unwrap();
    let m = b.connect(a.local_addr().unwrap()).await.unwrap();
    m.wait_compact(Duration::from_secs(5)).await;
    let out = b
        .pipes()
        .create_output_pipe(&ad, &[a.peer_id()], WAIT)
        .await
        .unwrap();
    assert_eq!(out.remote(), Some(a.peer_id()));
    assert_eq!(out.is_compact(), compact);
    for size in [1usize, 65536, 1 << 20] {
        let p = payload(size);
        let wire = out.send(data_msg(&p)).await.unwrap();
        if compact && size == 1 {
            // The first message defines the pipe's channel number and the
            // element name on this connection; later ones only refer to them.
            let got = tokio::time::timeout(WAIT, input.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(got.message.get("test", "data").unwrap().data, p);
            let again = out.send(data_msg(&p)).await.unwrap();
            assert!(again < wire);
            assert!(again <= 48, "1-byte pipe message took {again} bytes");
        }
        let got = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.from, Some(b.peer_id()));
        assert_eq!(got.message.get("test", "data").unwrap().data, p);
        if compact {
            assert_eq!(got.verified, Verified::Handshake);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unicast_pipe_compact() {
    unicast(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unicast_pipe_jxta_framing() {
    unicast(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_senders_into_one_input_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let ad = adv(PipeType::Unicast);
    let mut input = a.pipes().create_input_pipe(&ad).unwrap();
    let mut senders = Vec::new();
    for i in 0..4 {
        let s = peer(&dir, &format!("s{i}"), false, true).await;
        s.connect(a.local_addr().unwrap()).await.unwrap();
        senders.push(s);
    }
    let mut tasks = Vec::new();
    for (i, s) in senders.iter().enumerate() {
        let out = s.pipes().create_output_pipe(&ad, &[], WAIT).await.unwrap();
        tasks.push(tokio::spawn(async move {
            for n in 0..50u32 {
                let m = Message::new().with(Element::bytes(
                    "test",
                    "n",
                    Bytes::from(format!("{i}:{n}")),
                ));
                out.send(m).await.unwrap();
            }
        }));
    }
    let mut seen = std::collections::HashSet::new();
    while seen.len() < 200 {
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        let v = m
            .message
            .get("test", "n")
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        assert!(seen.insert(v), "duplicate delivery");
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagate_reaches_every_listener_once() {
    let dir = tempfile::tempdir().unwrap();
    let sender = peer(&dir, "s", true, true).await;
    let ad = adv(PipeType::Propagate);
    let mut receivers = Vec::new();
    for i in 0..3 {
        let r = peer(&dir, &format!("r{i}"), false, true).await;
        let input = r.pipes().create_input_pipe(&ad).unwrap();
        r.connect(sender.local_addr().unwrap()).await.unwrap();
        receivers.push((r, input));
    }
    // The sender learns its peers from the incoming connections once they
    // are proven (compact handshake).
    let deadline = tokio::time::Instant::now() + WAIT;
    while sender.connection_count() < 3 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = sender
        .pipes()
        .create_output_pipe(&ad, &[], WAIT)
        .await
        .unwrap();
    for n in 0..10u8 {
        out.send(data_msg(&Bytes::from(vec![n]))).await.unwrap();
    }
    for (_, input) in &mut receivers {
        for n in 0..10u8 {
            let m = tokio::time::timeout(WAIT, input.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(m.message.get("test", "data").unwrap().data[..], [n]);
            assert!(m.message.get("juxta", "PropagateId").is_none());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_pipe_proves_the_sender() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let b = peer(&dir, "b", false, true).await;
    let ad = adv(PipeType::UnicastSecure);
    let mut input = a.pipes().create_input_pipe(&ad).unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    let out = b
        .pipes()
        .create_output_pipe(&ad, &[a.peer_id()], WAIT)
        .await
        .unwrap();
    // 6 MiB: sealed into two `JuxtaTls` messages (4 MiB each at most).
    for size in [1usize, 100_000, 1 << 20, 6 << 20] {
        let p = payload(size);
        out.send(data_msg(&p)).await.unwrap();
        let got = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.from, Some(b.peer_id()));
        assert_eq!(got.message.get("test", "data").unwrap().data, p);
        assert_eq!(got.verified, Verified::Certificate);
    }
    // A plain (unencrypted) message to the secure pipe's endpoint address is
    // not delivered to it.
    let m = b.messenger(&a.peer_id()).unwrap();
    m.send(
        "PipeService",
        Some(&ad.id.to_string()),
        data_msg(&payload(3)),
    )
    .await
    .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), input.recv())
            .await
            .is_err(),
        "plain message reached a secure input pipe"
    );
}

/// A bidi pipe between two Juxta peers in `mode`: echoes of 1 B, 4 KB and
/// 1 MB come back intact, and the close ends the server's `recv`.
async fn bidi_echo(mode: BidiMode) {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let b = peer(&dir, "b", false, true).await;
    let ad = adv(PipeType::Unicast);
    let mut listener = a.pipes().bind_bidi(&ad).unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    let server = tokio::spawn(async move {
        let mut p = listener.accept().await.unwrap();
        assert_eq!(p.mode(), mode);
        let mut n = 0;
        while let Some(m) = p.recv().await {
            p.send(m.message).await.unwrap();
            n += 1;
        }
        n
    });
    let mut c = b
        .pipes()
        .connect_bidi_with(&ad, a.peer_id(), WAIT, mode)
        .await
        .unwrap();
    assert_eq!(c.remote(), a.peer_id());
    assert_eq!(c.mode(), mode);
    for size in [1usize, 4096, 1 << 20] {
        let p = payload(size);
        c.send(data_msg(&p)).await.unwrap();
        let got = tokio::time::timeout(WAIT, c.recv()).await.unwrap().unwrap();
        assert_eq!(got.message.get("test", "data").unwrap().data, p);
        // Straight from `a` over a connection it proved in the handshake.
        assert_eq!(got.verified, Verified::Handshake);
        assert_eq!(got.verified_sender(), Some(a.peer_id()));
    }
    let stats = c.stats();
    c.close().await.unwrap();
    assert_eq!(
        tokio::time::timeout(WAIT, server).await.unwrap().unwrap(),
        3
    );
    assert_eq!((stats.foreign, stats.malformed), (0, 0));
    if mode == BidiMode::Reliable {
        assert_eq!(stats.reliable.unwrap().blocks_received, 3);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidi_pipe_echo() {
    bidi_echo(BidiMode::Unreliable).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reliable_bidi_pipe_echo() {
    bidi_echo(BidiMode::Reliable).await;
}

/// Both ends of a reliable bidi pipe send twelve 1 MB messages at the same
/// time, then read the other side's: all arrive, intact and in order, both
/// ways (the drivers keep reading and acking while they send).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reliable_bidi_both_ways_at_once() {
    const N: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let b = peer(&dir, "b", false, true).await;
    let ad = adv(PipeType::Unicast);
    let mut listener = a.pipes().bind_bidi(&ad).unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    let pipes = b.pipes();
    let (server, client) = tokio::join!(
        async { listener.accept().await.unwrap() },
        pipes.connect_bidi_with(&ad, a.peer_id(), WAIT, BidiMode::Reliable)
    );
    // Message i: 1 MB of byte `tag + i`.
    async fn exchange(mut p: BidiPipe, mine: u8, theirs: u8) -> BidiPipe {
        for i in 0..N as u8 {
            let m = Message::new().with(Element::bytes("test", "data", vec![mine + i; 1 << 20]));
            p.send(m).await.unwrap();
        }
        for i in 0..N as u8 {
            let m = p.recv().await.expect("pipe ended early");
            let d = &m.message.get("test", "data").unwrap().data;
            assert!(
                d.len() == 1 << 20 && d.iter().all(|&x| x == theirs + i),
                "message {i}"
            );
        }
        p
    }
    let (s, c) = tokio::time::timeout(WAIT, async {
        tokio::join!(exchange(server, 100, 0), exchange(client.unwrap(), 0, 100))
    })
    .await
    .expect("simultaneous sends hung");
    for p in [&s, &c] {
        let st = p.stats();
        assert_eq!((st.foreign, st.malformed), (0, 0));
    }
    c.close().await.unwrap();
    s.close().await.unwrap();
}

/// A reliable bidi pipe's server end facing a hand-made client: blocks
/// with a bad name, blocks that are not a message, unsigned and wrongly
/// signed messages are refused and counted; a third peer's block is dropped
/// and counted as foreign; the good messages still arrive in order, and a
/// close in a block ends the pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reliable_bidi_refuses_bad_blocks_and_foreign_data() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let b = peer(&dir, "b", false, true).await;
    let c = peer(&dir, "c", false, true).await;
    let ad = adv(PipeType::Unicast);
    let mut listener = a.pipes().bind_bidi(&ad).unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(a.local_addr().unwrap()).await.unwrap();
    let accept = tokio::spawn(async move { listener.accept().await.unwrap() });

    // b asks for a reliable pipe by hand.
    let mine = adv(PipeType::Unicast);
    let mut input = b.pipes().create_input_pipe(&mine).unwrap();
    let req = ConnectRequest {
        kind: SetupKind::BiDi,
        req_pipe: mine.clone(),
        rem_peer: PeerAdvertisement {
            peer_id: b.peer_id(),
            group_id: PeerGroupId::NET,
            name: "b".into(),
            desc: None,
            route: None,
        },
        reliable: true,
        connection_properties: None,
    };
    let mb = b.messenger(&a.peer_id()).unwrap();
    mb.send("PipeService", Some(&ad.id.to_string()), req.to_message())
        .await
        .unwrap();
    let resp = loop {
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        if let Ok(r) = ConnectResponse::from_message(&m.message) {
            break r;
        }
    };
    assert_eq!(resp.reliable, Some(true));
    let mut p = tokio::time::timeout(WAIT, accept).await.unwrap().unwrap();
    assert_eq!(p.mode(), BidiMode::Reliable);
    let theirs = resp.rem_pipe.id.to_string();
    let block = |seq: u32, data: Bytes| {
        Segment::Block {
            seq,
            data,
            retry: false,
        }
        .into_message()
    };
    let signed = |who: &Peer, m: &Message| {
        encode_block(m, JavaHashOrder::Java8, Some(&**who.identity()), 1 << 24).unwrap()
    };
    let good1 = data_msg(&payload(100));
    let good2 = data_msg(&payload(70_000));
    let bad = [
        // Not a sequence number.
        Message::new().with(Element::typed("jxtarel", "x1", MIME_BLOCK, &b"x"[..])),
        // Block 1: not a message.
        block(1, Bytes::from_static(b"not a jxta message")),
        // Block 2: a message without its CBJX trailer (CBJX is on).
        block(
            2,
            encode_block(&good1, JavaHashOrder::Java8, None, 1 << 24).unwrap(),
        ),
        // Block 3: signed by c, not by b.
        block(3, signed(&c, &good1)),
    ];
    for m in bad {
        mb.send("PipeService", Some(&theirs), m).await.unwrap();
    }
    // c sends a well-formed block of its own to the pipe.
    let mc = c.messenger(&a.peer_id()).unwrap();
    mc.send("PipeService", Some(&theirs), block(4, signed(&c, &good1)))
        .await
        .unwrap();
    for (seq, m) in [(4, &good1), (5, &good2)] {
        mb.send("PipeService", Some(&theirs), block(seq, signed(&b, m)))
            .await
            .unwrap();
    }
    for want in [&good1, &good2] {
        let got = tokio::time::timeout(WAIT, p.recv()).await.unwrap().unwrap();
        assert_eq!(&got.message, want);
        assert_eq!(got.from, Some(b.peer_id()));
    }
    // c's block comes over another connection: wait until it was seen.
    let foreign_seen = async {
        while p.stats().foreign == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT, foreign_seen).await.unwrap();
    let stats = p.stats();
    assert_eq!(stats.malformed, 4, "{stats:?}");
    assert_eq!(stats.foreign, 1, "{stats:?}");
    // The close, in block 6, ends the pipe; a acknowledges all six blocks.
    mb.send(
        "PipeService",
        Some(&theirs),
        block(6, signed(&b, &close_message())),
    )
    .await
    .unwrap();
    assert!(tokio::time::timeout(WAIT, p.recv())
        .await
        .unwrap()
        .is_none());
    let acked = async {
        loop {
            let m = input.recv().await.unwrap();
            if let Ok(items) = parse(&m.message) {
                if items
                    .iter()
                    .any(|i| matches!(i, Incoming::Ack { cumulative: 6, .. }))
                {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(WAIT, acked).await.unwrap();
    tokio::time::timeout(WAIT, p.close())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_pipe_and_missing_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let b = peer(&dir, "b", false, true).await;
    let ad = adv(PipeType::Unicast);
    b.connect(a.local_addr().unwrap()).await.unwrap();
    // Resolution directed at a peer without the pipe: it answers "not
    // found" and the output pipe fails at once rather than waiting.
    let r = b
        .pipes()
        .create_output_pipe(&ad, &[a.peer_id()], WAIT)
        .await;
    assert!(matches!(r, Err(PipeError::NotFound(_))), "{:?}", r.err());
    // A message to a pipe nobody holds is counted and dropped.
    let m = b.messenger(&a.peer_id()).unwrap();
    m.send(
        "PipeService",
        Some(&ad.id.to_string()),
        data_msg(&payload(1)),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.stats().unknown_pipe == 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Malformed resolver traffic is counted, and the peer keeps serving.
    m.send(
        "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000205",
        Some("jxta-NetGroupORes"),
        Message::new().with(Element::xml(
            "jxta",
            "jxta-NetGroupORes",
            "<not a query".into(),
        )),
    )
    .await
    .unwrap();
    while a.stats().resolver_errors == 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut input = a.pipes().create_input_pipe(&ad).unwrap();
    let out = b
        .pipes()
        .create_output_pipe(&ad, &[a.peer_id()], WAIT)
        .await
        .unwrap();
    out.send(data_msg(&payload(5))).await.unwrap();
    assert!(tokio::time::timeout(WAIT, input.recv())
        .await
        .unwrap()
        .is_some());
    // A second input pipe with the same ID is refused.
    assert!(matches!(
        a.pipes().create_input_pipe(&ad),
        Err(PipeError::AlreadyOpen(_))
    ));
}

/// One peer may hold at most 64 secure sessions with another: the 65th
/// secure output pipe is refused with a typed error and counted; the
/// sessions already open keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_sessions_per_peer_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let b = peer(&dir, "b", false, true).await;
    let ad = adv(PipeType::UnicastSecure);
    let mut input = a.pipes().create_input_pipe(&ad).unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    let mut open = Vec::new();
    for _ in 0..64 {
        open.push(
            b.pipes()
                .create_output_pipe(&ad, &[a.peer_id()], WAIT)
                .await
                .unwrap(),
        );
    }
    let r = b
        .pipes()
        .create_output_pipe(&ad, &[a.peer_id()], WAIT)
        .await;
    assert!(r.is_err(), "a 65th secure session to one peer was refused");
    let refused = |p: &Peer| p.stats().secure_sessions_refused;
    assert_eq!(refused(&b) + refused(&a), 1);
    let p = payload(10);
    open[63].send(data_msg(&p)).await.unwrap();
    let got = tokio::time::timeout(WAIT, input.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.message.get("test", "data").unwrap().data, p);
}
