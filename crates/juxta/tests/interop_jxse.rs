//! Interop with a real JXSE 2.7 peer (the Java harness in `interop/jxse`),
//! CBJX on as JXSE ships it: handshakes in both directions and endpoint
//! messages of 1 B, 64 KB and 1 MB in both directions, direct and routed.
//!
//! Needs `interop/jxse/build.sh` to have run (`scripts/test.sh` does it).

mod common;
mod prereq;

use std::time::Duration;

use common::{juxta_peer, payload, sha, Jxse, WAIT};
use juxta_proto::message::{Element, Message};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jxse_interop_with_cbjx() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let mut jxse = tokio::task::block_in_place(Jxse::start);
    let dir = tempfile::tempdir().unwrap();
    let sizes = [1usize, 65536, 1 << 20];

    // Juxta dials JXSE: welcome lines both ways, remote ID from JXSE's welcome.
    let a = juxta_peer(dir.path(), "a", true).await;
    let mut a_sink = a.listen("JuxtaTest", Some("sink")).unwrap();
    let to_jxse = a
        .connect(format!("127.0.0.1:{}", jxse.port).parse().unwrap())
        .await
        .unwrap();
    assert_eq!(to_jxse.remote(), jxse.peer_id);
    assert!(!to_jxse.wait_compact(Duration::from_millis(500)).await);

    // Juxta -> JXSE, direct (mangled service name) and through JXSE's router.
    for (i, &n) in sizes.iter().enumerate() {
        let p = payload(n);
        let msg = Message::new().with(Element::bytes("juxta", "payload", p.clone()));
        if i % 2 == 0 {
            to_jxse.send("JuxtaTest", Some("sink"), msg).await.unwrap();
        } else {
            to_jxse
                .send_routed("JuxtaTest", Some("sink"), msg)
                .await
                .unwrap();
        }
        let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
        assert_eq!(
            recv[3],
            n.to_string(),
            "JXSE got a different length: {recv:?}"
        );
        assert_eq!(recv[4], sha(&p), "JXSE got different bytes");
    }

    // JXSE -> Juxta through its router, over the connection Juxta opened.
    for &n in &sizes {
        let cmd = format!("SEND {}/JuxtaTest/sink {n}", a.peer_id().endpoint_address());
        jxse.command(&cmd);
        let sent = tokio::task::block_in_place(|| jxse.expect("SENT"));
        let got = tokio::time::timeout(WAIT, a_sink.recv())
            .await
            .expect("no message from JXSE")
            .unwrap();
        assert_eq!(got.from, Some(jxse.peer_id));
        let data = &got.message.get("juxta", "payload").unwrap().data;
        assert_eq!(data.len(), n);
        assert_eq!(sha(data), sent[2]);
    }
    assert_eq!(a.stats().connections_failed, 0);

    // JXSE dials Juxta: JXSE sends its welcome first as the initiator.
    let b = juxta_peer(dir.path(), "b", true).await;
    let mut b_sink = b.listen("JuxtaTest", Some("sink")).unwrap();
    for &n in &sizes {
        let cmd = format!("SEND tcp://{}/JuxtaTest/sink {n}", b.local_addr().unwrap());
        jxse.command(&cmd);
        let sent = tokio::task::block_in_place(|| jxse.expect("SENT"));
        let got = tokio::time::timeout(WAIT, b_sink.recv())
            .await
            .expect("no message from JXSE over its own connection")
            .unwrap();
        assert_eq!(got.from, Some(jxse.peer_id));
        // JXSE proves its peer ID with CBJX signatures.
        assert_eq!(got.verified, juxta::Verified::CbjxSignature);
        let data = &got.message.get("juxta", "payload").unwrap().data;
        assert_eq!(sha(data), sent[2]);
    }
    let back = b
        .messenger(&jxse.peer_id)
        .expect("JXSE's connection is registered");
    back.send(
        "JuxtaTest",
        Some("sink"),
        Message::new().with(Element::bytes("juxta", "payload", payload(10))),
    )
    .await
    .unwrap();
    let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
    assert_eq!(recv[4], sha(&payload(10)));
}
