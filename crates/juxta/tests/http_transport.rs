//! The HTTP transport on loopback: an edge that only speaks HTTP opens a
//! session with a peer that listens on TCP and HTTP; endpoint messages,
//! a unicast pipe and a JXTA socket (10 MB each way) work over it; bad
//! requests are refused with the right status and counted while a good
//! client keeps being served; a client that stops polling is expired and
//! its queue freed.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::{PeerId, PipeId};
use juxta_proto::identity::Identity;
use juxta_proto::message::cbjx::trailer_for;
use juxta_proto::message::codec::encode_v0;
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{Element, Message, NS_JXTA};
use juxta_proto::wire::http::{
    self as wire, Method, CONTENT_TYPE_JXTA_MSG, HELLO_SERVICE, SESSION_HEADER,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(120);

fn payload(n: usize) -> Bytes {
    Bytes::from((0..n).map(|i| (i * 31 + 7) as u8).collect::<Vec<u8>>())
}

/// A peer listening on TCP and HTTP (the relay's role) and an edge that
/// listens on nothing and reaches it over HTTP only.
async fn pair(dir: &tempfile::TempDir, idle: Option<Duration>) -> (Peer, Peer) {
    let mut ca = PeerConfig::new(dir.path().join("server"))
        .listen("127.0.0.1:0".parse().unwrap())
        .http_listen("127.0.0.1:0".parse().unwrap());
    ca.key_bits = 1024;
    if let Some(i) = idle {
        ca.http.session_idle = i;
        ca.http.queue_messages = 4;
    }
    let mut cb = PeerConfig::new(dir.path().join("edge"));
    cb.key_bits = 1024;
    let a = Peer::start(ca).await.unwrap();
    let b = Peer::start(cb).await.unwrap();
    (a, b)
}

fn msg(p: &Bytes) -> Message {
    Message::new().with(Element::bytes("juxta", "payload", p.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_messages_both_ways_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, None).await;
    let mut a_in = a.listen("test", Some("in")).unwrap();
    let mut b_in = b.listen("test", Some("back")).unwrap();
    let to_a = b.connect_http(a.http_local_addr().unwrap()).await.unwrap();
    assert_eq!(to_a.remote(), a.peer_id());
    assert!(!to_a.is_compact());
    for size in [1usize, 65536, 1 << 20] {
        let p = payload(size);
        to_a.send("test", Some("in"), msg(&p)).await.unwrap();
        let got = tokio::time::timeout(WAIT, a_in.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.from, Some(b.peer_id()));
        assert_eq!(got.message.get("juxta", "payload").unwrap().data, p);
        // Back over the session, from the server side.
        let to_b = a.messenger(&b.peer_id()).unwrap();
        to_b.send("test", Some("back"), msg(&p)).await.unwrap();
        let back = tokio::time::timeout(WAIT, b_in.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back.from, Some(a.peer_id()));
        assert_eq!(back.message.get("juxta", "payload").unwrap().data, p);
        // Routed (ERM-wrapped) too, as JXSE and the relay send.
        to_b.send_routed("test", Some("back"), msg(&p))
            .await
            .unwrap();
        let back = tokio::time::timeout(WAIT, b_in.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(back.routed);
        assert_eq!(back.message.get("juxta", "payload").unwrap().data, p);
    }
    // Many small messages queued at once come back in batches, in order.
    let to_b = a.messenger(&b.peer_id()).unwrap();
    for i in 0..500u32 {
        to_b.send(
            "test",
            Some("back"),
            msg(&Bytes::from(i.to_be_bytes().to_vec())),
        )
        .await
        .unwrap();
    }
    for i in 0..500u32 {
        let got = tokio::time::timeout(WAIT, b_in.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            got.message.get("juxta", "payload").unwrap().data[..],
            i.to_be_bytes()
        );
    }
    assert_eq!(a.connection_count(), 1);
    assert_eq!(b.connection_count(), 1);
    let s = a.http_server().unwrap();
    assert_eq!(s.session_count(), 1);
    assert_eq!(s.stats().sessions_opened, 1);
    assert!(to_a.link().bytes_in > 0 && to_a.link().bytes_out > 0);
}

/// Two services of one edge dialling the same HTTP server at once (its
/// rendezvous and relay leases do): one session is opened and both get
/// it. (Two sessions for one peer closed one another's on the server: the
/// loser's lease waited out a retry, 7 s over the wan profile.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_dials_of_one_server_share_one_session() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, None).await;
    let mut a_in = a.listen("test", Some("in")).unwrap();
    let mut b_in = b.listen("test", Some("back")).unwrap();
    let addr = a.http_local_addr().unwrap();
    let (m1, m2) = tokio::join!(b.connect_http(addr), b.connect_http(addr));
    let (m1, m2) = (m1.unwrap(), m2.unwrap());
    for (i, m) in [&m1, &m2].into_iter().enumerate() {
        let p = payload(10 + i);
        m.send("test", Some("in"), msg(&p)).await.unwrap();
        let got = tokio::time::timeout(WAIT, a_in.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.message.get("juxta", "payload").unwrap().data, p);
    }
    let p = payload(64);
    a.messenger(&b.peer_id())
        .unwrap()
        .send("test", Some("back"), msg(&p))
        .await
        .unwrap();
    let back = tokio::time::timeout(WAIT, b_in.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.message.get("juxta", "payload").unwrap().data, p);
    let s = a.http_server().unwrap();
    assert_eq!(s.stats().sessions_opened, 1);
    assert_eq!(s.session_count(), 1);
    assert_eq!(b.connection_count(), 1);
}

fn adv() -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    a.name = Some("http".into());
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unicast_pipes_both_ways_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, None).await;
    b.connect_http(a.http_local_addr().unwrap()).await.unwrap();
    // Edge -> server.
    let ad = adv();
    let mut input = a.pipes().create_input_pipe(&ad).unwrap();
    let out = b
        .pipes()
        .create_output_pipe(&ad, &[a.peer_id()], WAIT)
        .await
        .unwrap();
    // Server -> edge (the resolver query travels in a poll response).
    let ad2 = adv();
    let mut input2 = b.pipes().create_input_pipe(&ad2).unwrap();
    let out2 = a
        .pipes()
        .create_output_pipe(&ad2, &[b.peer_id()], WAIT)
        .await
        .unwrap();
    for size in [1usize, 65536, 1 << 20] {
        let p = payload(size);
        out.send(msg(&p)).await.unwrap();
        let got = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.from, Some(b.peer_id()));
        assert_eq!(got.message.get("juxta", "payload").unwrap().data, p);
        out2.send(msg(&p)).await.unwrap();
        let got = tokio::time::timeout(WAIT, input2.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.from, Some(a.peer_id()));
        assert_eq!(got.message.get("juxta", "payload").unwrap().data, p);
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + 7) as u8) ^ seed).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jxta_socket_ten_megabytes_each_way_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, None).await;
    b.connect_http(a.http_local_addr().unwrap()).await.unwrap();
    let n = 10 << 20;
    let ad = adv();
    let cfg = SocketConfig::default();
    let mut server = JxtaServerSocket::bind(&a, &ad, cfg.clone()).unwrap();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(Sha256::digest(&got), Sha256::digest(pattern(n, 1)));
        s.write_all(&pattern(n, 2)).await.unwrap();
        s.flush().await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        s.shutdown().await.unwrap();
    });
    let run = async {
        let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg)
            .await
            .unwrap();
        c.write_all(&pattern(n, 1)).await.unwrap();
        c.flush().await.unwrap();
        let mut back = vec![0u8; n];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(Sha256::digest(&back), Sha256::digest(pattern(n, 2)));
        c.shutdown().await.unwrap();
        srv.await.unwrap();
    };
    tokio::time::timeout(WAIT, run).await.unwrap();
}

/// Sends raw bytes on a new connection and reads the response (status and
/// body); the server closes the connection after a refusal.
async fn raw(addr: SocketAddr, req: &[u8]) -> (u16, Option<String>, Bytes) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut buf = BytesMut::new();
    loop {
        if let Some(r) = wire::parse_response(&buf, 1 << 20).unwrap() {
            while buf.len() < r.head_len + r.content_length as usize {
                assert!(s.read_buf(&mut buf).await.unwrap() > 0, "short body");
            }
            let body = buf.split_off(r.head_len).freeze();
            return (r.status, r.session.or(r.nonce), body);
        }
        assert!(s.read_buf(&mut buf).await.unwrap() > 0, "no response");
    }
}

/// A binary message as an HTTP client sends it, signed by `id` (no trailer
/// when `id` is `None`).
fn client_message(id: &Identity, sign: bool, service: &str, body: Message) -> Vec<u8> {
    let mut m = body;
    m.push(Element::text(
        NS_JXTA,
        "EndpointSourceAddress",
        &id.peer_id().endpoint_address(),
    ));
    m.push(Element::text(
        NS_JXTA,
        "EndpointDestinationAddress",
        &format!("http://127.0.0.1:1/{service}"),
    ));
    let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap();
    let mut out = enc.to_bytes().to_vec();
    if sign {
        out.extend_from_slice(&trailer_for(id, &enc.chunks));
    }
    out
}

/// A message signed with `id`'s key whose trailer claims to come from
/// `claimed` (a forgery: the claimed ID is not derived from the key).
fn claim_as(id: &Identity, claimed: &PeerId, service: &str, body: Message) -> Vec<u8> {
    use juxta_proto::message::cbjx::{signed_digest, Trailer};
    let mut m = body;
    m.push(Element::text(
        NS_JXTA,
        "EndpointSourceAddress",
        &claimed.endpoint_address(),
    ));
    m.push(Element::text(
        NS_JXTA,
        "EndpointDestinationAddress",
        &format!("http://127.0.0.1:1/{service}"),
    ));
    let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap();
    let src = Bytes::from(claimed.to_string());
    let digest = signed_digest(enc.chunks.iter().map(|c| &c[..]), id.cert_der(), &src);
    let trailer = Trailer {
        cert: id.cert_der().clone(),
        src,
        sig: id.sign_sha256_prehash(&digest),
    };
    let mut out = enc.to_bytes().to_vec();
    out.extend_from_slice(&trailer.encode());
    out
}

fn post(path: &str, body: &[u8], session: Option<&str>) -> Vec<u8> {
    let headers: Vec<(&str, &str)> = session.map(|s| (SESSION_HEADER, s)).into_iter().collect();
    let mut r = wire::request_head(
        Method::Post,
        path,
        "x",
        Some(CONTENT_TYPE_JXTA_MSG),
        body.len() as u64,
        &headers,
    )
    .to_vec();
    r.extend_from_slice(body);
    r
}

fn identity(name: &str) -> Identity {
    Identity::generate(&mut rand::thread_rng(), 1024, name, 1_700_000_000).unwrap()
}

/// Ping, then a signed hello: returns the session token.
async fn open_session(addr: SocketAddr, id: &Identity) -> String {
    let (status, nonce, body) = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, 200);
    assert!(body.starts_with(b"cbid-"));
    let hello = client_message(
        id,
        true,
        HELLO_SERVICE,
        wire::hello_message(&nonce.unwrap()),
    );
    let path = format!("/{}", id.peer_id().unique_value());
    let (status, token, _) = raw(addr, &post(&path, &hello, None)).await;
    assert_eq!(status, 200);
    token.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, None).await;
    let addr = a.http_local_addr().unwrap();
    let mut a_in = a.listen("test", Some("in")).unwrap();
    let mut b_in = b.listen("test", Some("back")).unwrap();
    let to_a = b.connect_http(addr).await.unwrap();
    let stats = || a.http_server().unwrap().stats();
    let mallory = identity("Mallory");
    let me = format!("/{}", mallory.peer_id().unique_value());

    // The good client is served between every bad request.
    let mut round = 0u32;
    let mut still_served = || {
        round += 1;
        let p = Bytes::from(round.to_be_bytes().to_vec());
        let to_a = to_a.clone();
        let a_msgr = a.messenger(&b.peer_id()).unwrap();
        async move {
            to_a.send("test", Some("in"), msg(&p)).await.unwrap();
            a_msgr.send("test", Some("back"), msg(&p)).await.unwrap();
            p
        }
    };

    // Garbage.
    let (status, _, _) = raw(addr, b"\x16\x03\x01garbage\r\n\r\n").await;
    assert_eq!(status, 400);
    assert_eq!(stats().bad_request, 1);
    both_arrive(still_served().await, &mut a_in, &mut b_in).await;

    // Oversized content-length: refused from the head, before any body.
    let too_big = format!(
        "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        (64u64 << 20) + 1
    );
    let (status, _, _) = raw(addr, too_big.as_bytes()).await;
    assert_eq!(status, 413);
    assert_eq!(stats().too_large, 1);

    // A head that never ends.
    let mut huge = b"GET / HTTP/1.1\r\nX: ".to_vec();
    huge.resize(9000, b'a');
    let (status, _, _) = raw(addr, &huge).await;
    assert_eq!(status, 431);
    assert_eq!(stats().bad_request, 2);

    // Unknown session: a poll for a peer with no session, and one with a
    // wrong token for the good client's session.
    let poll = |peer: &PeerId, token: &str| {
        format!(
            "GET /{}?1000,1000,http://{addr} HTTP/1.1\r\n{SESSION_HEADER}: {token}\r\n\r\n",
            peer.unique_value()
        )
    };
    let (status, _, _) = raw(addr, poll(mallory.peer_id(), "00").as_bytes()).await;
    assert_eq!(status, 404);
    let (status, _, _) = raw(addr, poll(&b.peer_id(), "00").as_bytes()).await;
    assert_eq!(status, 404);
    assert_eq!(stats().unknown_session, 2);
    both_arrive(still_served().await, &mut a_in, &mut b_in).await;

    // Missing authentication: an unsigned message; a signed one posing as
    // the good client (path names it); a hello with a nonce never issued;
    // a signed, non-hello message without a session.
    let unsigned = client_message(&mallory, false, "test/in", msg(&payload(3)));
    let (status, _, _) = raw(addr, &post(&me, &unsigned, None)).await;
    assert_eq!(status, 403);
    let signed = client_message(&mallory, true, "test/in", msg(&payload(3)));
    let victim = format!("/{}", b.peer_id().unique_value());
    let (status, _, _) = raw(addr, &post(&victim, &signed, None)).await;
    assert_eq!(status, 403);
    let forged = client_message(&mallory, true, HELLO_SERVICE, wire::hello_message("00ff"));
    let (status, _, _) = raw(addr, &post(&me, &forged, None)).await;
    assert_eq!(status, 403);
    assert_eq!(stats().unauthenticated, 3);
    // A hello claiming the good client's ID, signed with Mallory's own key
    // (the ID is not derived from her certificate): refused, and the good
    // client's session is untouched.
    let (_, nonce, _) = raw(addr, b"GET / HTTP/1.1\r\n\r\n").await;
    let spoof = claim_as(
        &mallory,
        &b.peer_id(),
        HELLO_SERVICE,
        wire::hello_message(&nonce.unwrap()),
    );
    let (status, _, _) = raw(addr, &post(&victim, &spoof, None)).await;
    assert_eq!(status, 403);
    assert_eq!(stats().unauthenticated, 4);
    assert_eq!(stats().sessions_opened, 1);
    let (status, _, _) = raw(addr, &post(&me, &signed, None)).await;
    assert_eq!(status, 404);
    assert_eq!(stats().unknown_session, 3);
    // A session's token does not let another signer post into it.
    let token = open_session(addr, &mallory).await;
    let eve = identity("Eve");
    let eves = client_message(&eve, true, "test/in", msg(&payload(3)));
    let (status, _, _) = raw(addr, &post(&me, &eves, Some(&token))).await;
    assert_eq!(status, 403);
    assert_eq!(stats().unauthenticated, 5);
    // ... while Mallory's own signed message in her session is delivered.
    let (status, _, _) = raw(addr, &post(&me, &signed, Some(&token))).await;
    assert_eq!(status, 200);
    let got = tokio::time::timeout(WAIT, a_in.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.from, Some(*mallory.peer_id()));

    both_arrive(still_served().await, &mut a_in, &mut b_in).await;
    assert!(!to_a.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_polling_is_expired() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = pair(&dir, Some(Duration::from_millis(300))).await;
    let addr = a.http_local_addr().unwrap();
    let server = a.http_server().unwrap().clone();
    // A client that opens a session and never polls.
    let quiet = identity("Quiet");
    let _token = open_session(addr, &quiet).await;
    let peer = *quiet.peer_id();
    let to_quiet = a.messenger(&peer).unwrap();
    // Fill its queue (4 messages), then one more sender waits for room.
    for i in 0..4u8 {
        to_quiet
            .send("test", None, msg(&Bytes::from(vec![i; 100])))
            .await
            .unwrap();
    }
    assert_eq!(server.queued(&peer), 4);
    let blocked = {
        let m = to_quiet.clone();
        tokio::spawn(async move { m.send("test", None, msg(&Bytes::from_static(b"x"))).await })
    };
    // Expiry frees the queue and fails the waiting sender (no hang).
    let expired = async {
        while server.session_count() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, expired).await.unwrap();
    assert_eq!(server.stats().sessions_expired, 1);
    assert_eq!(server.queued(&peer), 0);
    let r = tokio::time::timeout(WAIT, blocked).await.unwrap().unwrap();
    assert!(r.is_err(), "sender to an expired session must fail");
    assert!(to_quiet.is_closed());
    assert!(a.messenger(&peer).is_err());
    assert!(to_quiet
        .send("test", None, msg(&Bytes::from_static(b"y")))
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_poll_takes_nothing_from_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = pair(&dir, None).await;
    let addr = a.http_local_addr().unwrap();
    let server = a.http_server().unwrap().clone();
    let c = identity("Client");
    let peer = *c.peer_id();
    let token = open_session(addr, &c).await;
    let poll = format!(
        "GET /{}?60000,-1,http://{addr} HTTP/1.1\r\n{SESSION_HEADER}: {token}\r\n\r\n",
        peer.unique_value()
    );
    let until = |want: usize| {
        let server = server.clone();
        async move {
            while server.polls_in_progress(&peer) != want {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // A long poll whose client goes away.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(poll.as_bytes()).await.unwrap();
    tokio::time::timeout(WAIT, until(1)).await.unwrap();
    drop(s);
    tokio::time::timeout(WAIT, until(0)).await.unwrap();
    // A message queued afterwards goes to the next poll.
    let p = payload(1000);
    a.messenger(&peer)
        .unwrap()
        .send("test", Some("x"), msg(&p))
        .await
        .unwrap();
    let (status, _, body) = raw(addr, poll.as_bytes()).await;
    assert_eq!(status, 200);
    let m = wire::decode_message(
        &body,
        &mut juxta_proto::message::cbjx::CbjxVerifier::new(),
        true,
        Some(&a.peer_id()),
    )
    .unwrap();
    assert_eq!(m.wire_len, body.len());
    assert_eq!(m.message.get("juxta", "payload").unwrap().data, p);
    assert_eq!(server.stats().lost_in_response, 0);
}

/// The good client's two messages (one each way) arrived, with payload `p`.
async fn both_arrive(p: Bytes, a_in: &mut juxta::Listener, b_in: &mut juxta::Listener) {
    for inbox in [a_in, b_in] {
        let d = tokio::time::timeout(WAIT, inbox.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.message.get("juxta", "payload").unwrap().data, p);
    }
}
