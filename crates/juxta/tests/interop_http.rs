//! JXSE 2.7's HTTP servlet transport against Juxta's, live, both ways
//! (the harness in `interop/jxse` with `--http-client` / `--http-port`):
//! * a JXSE HTTP client (`HttpClientMessenger`: POSTs to `/`, polls with
//!   no token) reaches a Juxta HTTP server that admits unproven JXSE
//!   clients ([`HttpConfig::allow_unproven_jxse_clients`]); endpoint
//!   messages travel both ways, checked by content, and the session is
//!   unproven and counted;
//! * a Juxta HTTP client that accepts servers without a challenge
//!   ([`HttpConfig::allow_unchallenged_servers`]) reaches JXSE's servlet
//!   (Jetty 4.2.25); messages both ways, checked by content;
//! * with the options off (the default) both refuse, typed and counted;
//!   malformed HTTP gets a typed refusal, counted; an unproven client
//!   never displaces a proven session for its peer ID.
//!
//! Needs `interop/jxse/build.sh` to have run (the JXSE tests skip, or fail
//! under `CI=true`, without it); the last test needs no Java.

mod common;
mod prereq;

use std::net::SocketAddr;

use common::{payload, sha, Jxse, WAIT};
use juxta::transport::http::{HttpClientError, HttpConfig};
use juxta::{Peer, PeerConfig, PeerError};
use juxta_proto::identity::Identity;
use juxta_proto::message::cbjx::trailer_for;
use juxta_proto::message::codec::encode_v0;
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{Element, Message, NS_JXTA};
use juxta_proto::wire::http::CONTENT_TYPE_JXTA_MSG;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn peer(dir: &std::path::Path, name: &str, http_listen: bool, http: HttpConfig) -> Peer {
    let mut cfg = PeerConfig::new(dir.join(name)).http(http);
    cfg.key_bits = 1024;
    if http_listen {
        cfg = cfg.http_listen("127.0.0.1:0".parse().unwrap());
    }
    Peer::start(cfg).await.unwrap()
}

fn msg(n: usize) -> (bytes::Bytes, Message) {
    let p = payload(n);
    let m = Message::new().with(Element::bytes("juxta", "payload", p.clone()));
    (p, m)
}

/// Sends raw bytes to `addr` and returns the response status and body
/// text (the server closes after a refusal).
async fn raw(addr: SocketAddr, req: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("no answer")
        .unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// A message as JXSE's HTTP client POSTs it: CBJX-signed by `id`, source
/// `jxta://<id>`, destination the server's HTTP address.
fn jxse_style_post(id: &Identity, server: SocketAddr, text: &str) -> Vec<u8> {
    let m = Message::new()
        .with(Element::text("juxta", "payload", text))
        .with(Element::text(
            NS_JXTA,
            "EndpointSourceAddress",
            &id.peer_id().endpoint_address(),
        ))
        .with(Element::text(
            NS_JXTA,
            "EndpointDestinationAddress",
            &format!("http://{server}/JuxtaTest/sink"),
        ));
    let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap();
    let mut body = enc.to_bytes().to_vec();
    body.extend_from_slice(&trailer_for(id, &enc.chunks));
    let mut req = format!(
        "POST / HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\nContent-Type: {CONTENT_TYPE_JXTA_MSG}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jxse_http_client_talks_to_juxta_http_server() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = peer(
        dir.path(),
        "a",
        true,
        HttpConfig::default().allow_unproven_jxse_clients(true),
    )
    .await;
    let http = a.http_local_addr().unwrap();
    let mut sink = a.listen("JuxtaTest", Some("sink")).unwrap();
    let mut jxse = tokio::task::block_in_place(|| Jxse::start_with(&["--http-client"]));

    // JXSE -> Juxta: JXSE pings, POSTs to `/` (CBJX-signed), polls.
    for n in [1usize, 65536] {
        jxse.command(&format!("SEND http://{http}/JuxtaTest/sink {n}"));
        let sent = tokio::task::block_in_place(|| jxse.expect("SENT"));
        let got = tokio::time::timeout(WAIT, sink.recv())
            .await
            .expect("no message from the JXSE HTTP client")
            .unwrap();
        assert_eq!(got.from, Some(jxse.peer_id));
        assert!(
            !got.verified.is_verified(),
            "a delivery over an unproven session is not proven"
        );
        let data = &got.message.get("juxta", "payload").unwrap().data;
        assert_eq!(data.len(), n);
        assert_eq!(sha(data), sent[2], "Juxta got different bytes");
    }
    let server = a.http_server().unwrap();
    let stats = || server.stats();
    assert_eq!(stats().unproven_sessions_opened, 1);
    assert_eq!(stats().unproven_messages, 2);
    assert_eq!(stats().sessions_opened, 0);
    let conn = a
        .connections()
        .into_iter()
        .find(|c| c.peer == jxse.peer_id)
        .expect("a connection for the JXSE client");
    assert!(!conn.proven, "a JXSE HTTP client is not a proven peer");

    // Juxta -> JXSE: through the session's queue, in the body of JXSE's
    // next poll (JXSE polls at most every 5 s).
    let to_jxse = a.messenger(&jxse.peer_id).unwrap();
    for n in [1usize, 65536] {
        let (p, m) = msg(n);
        to_jxse.send("JuxtaTest", Some("sink"), m).await.unwrap();
        let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
        assert_eq!(
            recv[3],
            n.to_string(),
            "JXSE got a different length: {recv:?}"
        );
        assert_eq!(recv[4], sha(&p), "JXSE got different bytes");
    }
    // Several queued at once: they may share one poll response body
    // (back to back, each with its trailer), which JXSE reads to its end.
    let mut want = std::collections::BTreeSet::new();
    for n in 2..7usize {
        let (p, m) = msg(n);
        want.insert((n.to_string(), sha(&p)));
        to_jxse.send("JuxtaTest", Some("sink"), m).await.unwrap();
    }
    let mut got = std::collections::BTreeSet::new();
    for _ in 0..want.len() {
        let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
        got.insert((recv[3].clone(), recv[4].clone()));
    }
    assert_eq!(got, want, "JXSE got other messages than sent");
    assert_eq!(stats().bad_request, 0);
    assert_eq!(stats().unauthenticated, 0);
    drop(jxse);
    a.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn juxta_http_client_talks_to_jxse_servlet() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hp = free_port();
    let mut jxse =
        tokio::task::block_in_place(|| Jxse::start_with(&["--http-port", &hp.to_string()]));
    let servlet: SocketAddr = format!("127.0.0.1:{hp}").parse().unwrap();

    // By default a server without a challenge is refused, typed.
    let strict = peer(dir.path(), "strict", false, HttpConfig::default()).await;
    match strict.connect_http(servlet).await {
        Err(PeerError::Http(HttpClientError::NoChallenge)) => {}
        Err(e) => panic!("expected NoChallenge, got {e}"),
        Ok(_) => panic!("a JXSE servlet was accepted without the option"),
    }
    strict.close().await.unwrap();

    let b = peer(
        dir.path(),
        "b",
        false,
        HttpConfig::default().allow_unchallenged_servers(true),
    )
    .await;
    let mut sink = b.listen("JuxtaTest", Some("sink")).unwrap();
    let to_jxse = b.connect_http(servlet).await.unwrap();
    assert_eq!(to_jxse.remote(), jxse.peer_id);
    let conn = b
        .connections()
        .into_iter()
        .find(|c| c.peer == jxse.peer_id)
        .expect("a connection for the JXSE servlet");
    assert!(!conn.proven, "a JXSE servlet gave no proof");

    // Juxta -> JXSE: POSTs to the servlet.
    for n in [1usize, 65536] {
        let (p, m) = msg(n);
        to_jxse.send("JuxtaTest", Some("sink"), m).await.unwrap();
        let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
        assert_eq!(
            recv[3],
            n.to_string(),
            "JXSE got a different length: {recv:?}"
        );
        assert_eq!(recv[4], sha(&p), "JXSE got different bytes");
    }

    // Several queued at once: one POST each (JXSE's servlet reads one
    // message per request body).
    let mut want = std::collections::BTreeSet::new();
    for n in 2..7usize {
        let (p, m) = msg(n);
        want.insert((n.to_string(), sha(&p)));
        to_jxse.send("JuxtaTest", Some("sink"), m).await.unwrap();
    }
    let mut got = std::collections::BTreeSet::new();
    for _ in 0..want.len() {
        let recv = tokio::task::block_in_place(|| jxse.expect("RECV"));
        got.insert((recv[3].clone(), recv[4].clone()));
    }
    assert_eq!(got, want, "JXSE got other messages than sent");

    // JXSE -> Juxta: through JXSE's router, over the messenger its servlet
    // makes of Juxta's poll.
    for n in [1usize, 65536] {
        jxse.command(&format!(
            "SEND {}/JuxtaTest/sink {n}",
            b.peer_id().endpoint_address()
        ));
        let sent = tokio::task::block_in_place(|| jxse.expect("SENT"));
        let got = tokio::time::timeout(WAIT, sink.recv())
            .await
            .expect("no message from the JXSE servlet")
            .unwrap();
        assert_eq!(got.from, Some(jxse.peer_id));
        assert!(
            !got.verified.is_verified(),
            "a delivery from a servlet without proof is not proven"
        );
        let data = &got.message.get("juxta", "payload").unwrap().data;
        assert_eq!(data.len(), n);
        assert_eq!(sha(data), sent[2], "Juxta got different bytes");
    }
    assert_eq!(b.stats().connections_failed, 0);
    drop(jxse);
    b.close().await.unwrap();
}

/// No Java needed: what the server refuses, with and without the option.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unproven_clients_are_refused_typed_and_never_displace_a_proven_session() {
    let dir = tempfile::tempdir().unwrap();
    let strict = peer(dir.path(), "strict", true, HttpConfig::default()).await;
    let open = peer(
        dir.path(),
        "open",
        true,
        HttpConfig::default().allow_unproven_jxse_clients(true),
    )
    .await;
    let edge = peer(dir.path(), "edge", false, HttpConfig::default()).await;
    let mut rng = rand::thread_rng();
    let stranger = Identity::generate(&mut rng, 1024, "stranger", 1_700_000_000).unwrap();

    // Option off: a JXSE-style POST (signed, no hello, no token) is refused.
    let s_addr = strict.http_local_addr().unwrap();
    let (status, _) = raw(s_addr, &jxse_style_post(&stranger, s_addr, "x")).await;
    assert_eq!(status, 404);
    let st = || strict.http_server().unwrap().stats();
    assert_eq!(st().unknown_session, 1);
    assert_eq!(st().unproven_sessions_opened, 0);

    // Malformed HTTP: typed refusals, counted, on both servers.
    let o_addr = open.http_local_addr().unwrap();
    for addr in [s_addr, o_addr] {
        let (status, body) = raw(addr, b"GET / HTTP/9.9\r\n\r\n").await;
        assert_eq!(status, 400);
        assert!(body.contains("unsupported HTTP version"), "{body}");
        let (status, _) = raw(addr, b"BREW / HTTP/1.1\r\n\r\n").await;
        assert_eq!(status, 405);
        let (status, _) = raw(addr, b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\njunk").await;
        assert_eq!(status, 400, "a body that is no JXTA message");
    }
    let os = || open.http_server().unwrap().stats();
    assert_eq!(os().bad_request, 3);
    assert_eq!(st().bad_request, 3);

    // Option on: an unsigned tokenless POST proves nothing: refused.
    let unsigned = {
        let mut r = jxse_style_post(&stranger, o_addr, "x");
        // Cut the trailer off: find the body, keep the message only.
        let head_end = r.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let body = r.split_off(head_end);
        let dec = juxta_proto::message::codec::decode_v0(bytes::Bytes::from(body.clone())).unwrap();
        let msg = &body[..dec.elements_end];
        let mut req = format!(
            "POST / HTTP/1.1\r\nConnection: close\r\nContent-Type: {CONTENT_TYPE_JXTA_MSG}\r\nContent-Length: {}\r\n\r\n",
            msg.len()
        )
        .into_bytes();
        req.extend_from_slice(msg);
        req
    };
    let (status, _) = raw(o_addr, &unsigned).await;
    assert_eq!(status, 403);
    assert_eq!(os().unauthenticated, 1);

    // A signed one opens an unproven session and is delivered.
    let mut sink = open.listen("JuxtaTest", Some("sink")).unwrap();
    let (status, _) = raw(o_addr, &jxse_style_post(&stranger, o_addr, "hello")).await;
    assert_eq!(status, 200);
    let got = tokio::time::timeout(WAIT, sink.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.from, Some(*stranger.peer_id()));
    assert!(!got.verified.is_verified());
    assert_eq!(
        got.message.get("juxta", "payload").unwrap().as_str(),
        Some("hello")
    );
    assert_eq!(os().unproven_sessions_opened, 1);

    // A proven session (Juxta's own client: nonce, signed hello, token)...
    let to_open = edge.connect_http(o_addr).await.unwrap();
    assert_eq!(to_open.remote(), open.peer_id());
    assert_eq!(os().sessions_opened, 1);
    let proven = open
        .connections()
        .into_iter()
        .find(|c| c.peer == edge.peer_id())
        .unwrap();
    assert!(proven.proven);
    // ...is not displaced by a tokenless POST signed with the same key
    // (e.g. a replayed one).
    let (status, body) = raw(o_addr, &jxse_style_post(edge.identity(), o_addr, "replay")).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("proven session"), "{body}");
    assert_eq!(os().unproven_refused_proven, 1);
    let still = open
        .connections()
        .into_iter()
        .find(|c| c.peer == edge.peer_id())
        .unwrap();
    assert!(still.proven, "the proven session stays");
    assert_eq!(os().unproven_sessions_opened, 1);

    edge.close().await.unwrap();
    open.close().await.unwrap();
    strict.close().await.unwrap();
}
