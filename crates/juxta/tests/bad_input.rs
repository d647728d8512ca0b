//! A real peer fed bad input over raw TCP connections.
//!
//! Each case opens a plain `TcpStream` to a listening peer, sends (where
//! needed) a valid welcome line and then the bad bytes, and checks that
//!
//! - the peer closes that connection (read returns 0 or an error; the
//!   10 s timeout is only a hang guard, nothing here asserts on speed),
//! - it closes it for the intended reason (the peer's own log line for
//!   that connection names the error),
//! - `connections_failed` counted it (where it is a failure), and
//! - the same peer still serves a well-behaved Juxta peer afterwards.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use juxta::{Peer, PeerConfig};
use juxta_proto::endpoint::{mangle, ServiceAddress, NET_GROUP_UNIQUE};
use juxta_proto::id::{IdType, JxtaId, PeerId, WORLD_GROUP_UUID};
use juxta_proto::identity::Identity;
use juxta_proto::message::{Element, Message};
use juxta_proto::wire::connection::{ConnectionConfig, Inbound, InboundEvent, Outbound, Role};
use juxta_proto::wire::frame;
use juxta_proto::wire::handshake::{self, HandshakeMsg, HANDSHAKE_SERVICE};
use juxta_proto::wire::welcome::Welcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Only a guard against hangs; no test asserts on how fast anything is.
const HANG_GUARD: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- logging

/// Everything the peers log, so a test can find the line about its own
/// connection (keyed by the raw client's local address).
fn log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || LogWriter(w.clone()))
            .try_init();
        buf
    })
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The peer's log lines about the connection from `client`.
fn lines_about(client: SocketAddr) -> String {
    let key = format!("peer_addr={client}");
    let log = log().lock().unwrap();
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(&key))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts the peer logged that it closed the connection from `client`
/// with an error whose text contains `reason`.
fn assert_closed_because(client: SocketAddr, reason: &str) {
    let lines = lines_about(client);
    assert!(
        lines.contains("connection closed") && lines.contains(reason),
        "expected the peer to close {client} because of {reason:?}; its log says:\n{lines}"
    );
}

// ---------------------------------------------------------------- helpers

/// A listening peer with a small key and its home in `dir`.
async fn target(dir: &tempfile::TempDir, tweak: impl FnOnce(&mut PeerConfig)) -> Peer {
    log();
    let mut cfg = PeerConfig::new(dir.path().join("target")).listen("127.0.0.1:0".parse().unwrap());
    cfg.key_bits = 1024;
    tweak(&mut cfg);
    Peer::start(cfg).await.unwrap()
}

fn failed(p: &Peer) -> u64 {
    p.stats().connections_failed
}

fn identity() -> Arc<Identity> {
    Arc::new(Identity::generate(&mut rand::thread_rng(), 1024, "BadInput", 1_700_000_000).unwrap())
}

fn random_peer_id() -> PeerId {
    PeerId::try_from(JxtaId::random_in(
        WORLD_GROUP_UUID,
        IdType::Peer,
        &mut rand::thread_rng(),
    ))
    .unwrap()
}

fn welcome_line(peer: &Peer, id: PeerId) -> Vec<u8> {
    Welcome::new(
        format!("tcp://{}", peer.local_addr().unwrap()),
        "tcp://127.0.0.1:1".into(),
        id,
    )
    .to_line()
    .into_bytes()
}

async fn connect(peer: &Peer) -> (TcpStream, SocketAddr) {
    let s = TcpStream::connect(peer.local_addr().unwrap())
        .await
        .unwrap();
    let local = s.local_addr().unwrap();
    (s, local)
}

/// Writes, ignoring errors: the peer may already have closed.
async fn send(s: &mut TcpStream, b: &[u8]) {
    let _ = s.write_all(b).await;
}

/// Reads until the peer closes the connection (EOF or a reset); panics if
/// it is still open after [`HANG_GUARD`]. Returns what the peer sent.
async fn expect_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let r = tokio::time::timeout(HANG_GUARD, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        r.is_ok(),
        "the peer did not close the connection (hang guard hit)"
    );
    got
}

/// Reads the peer's welcome line (it sends it first, unprompted).
async fn read_welcome(s: &mut TcpStream, rx: &mut BytesMut) -> Welcome {
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            if let Some((w, used)) = Welcome::parse(rx).unwrap() {
                let _ = rx.split_to(used);
                return w;
            }
            assert!(s.read_buf(rx).await.unwrap() > 0, "EOF before the welcome");
        }
    })
    .await
    .expect("no welcome from the peer")
}

/// A raw client speaking JXTA framing for `signer`, whose welcome claims
/// `claimed` (normally the signer's own ID). Returns the stream and an
/// outbound half ready to frame messages to the peer.
async fn raw_jxta_client(
    peer: &Peer,
    signer: &Arc<Identity>,
    claimed: PeerId,
) -> (TcpStream, SocketAddr, Outbound) {
    raw_client(peer, signer, claimed, true).await
}

/// [`raw_jxta_client`], with the outbound half's CBJX trailer on or off.
async fn raw_client(
    peer: &Peer,
    signer: &Arc<Identity>,
    claimed: PeerId,
    cbjx: bool,
) -> (TcpStream, SocketAddr, Outbound) {
    let (mut s, local) = connect(peer).await;
    send(&mut s, &welcome_line(peer, claimed)).await;
    let w = read_welcome(&mut s, &mut BytesMut::new()).await;
    let cfg = ConnectionConfig {
        handshake: false,
        compact: false,
        cbjx,
        ..ConnectionConfig::default()
    };
    let mut out = Outbound::new(cfg, Role::Initiator, signer.clone());
    assert!(out
        .on_remote_welcome(w, &mut rand::thread_rng())
        .unwrap()
        .is_none());
    (s, local, out)
}

fn probe_to() -> ServiceAddress {
    mangle(NET_GROUP_UNIQUE, &ServiceAddress::new("probe", Some("in")))
}

fn small_message() -> Message {
    Message::new().with(Element::bytes("juxta", "XXXX", &b"payload"[..]))
}

/// A normal Juxta peer connects to `peer`, sends a message and gets it
/// delivered; the peer answers over the same connection.
async fn still_serves(peer: &Peer, dir: &tempfile::TempDir) {
    let mut cfg = PeerConfig::new(dir.path().join(format!("client-{}", rand::random::<u32>())));
    cfg.key_bits = 1024;
    let client = Peer::start(cfg).await.unwrap();
    let mut inbox = peer.listen("ok", Some("in")).unwrap();
    let mut back = client.listen("ok", Some("back")).unwrap();
    let to_peer = tokio::time::timeout(HANG_GUARD, client.connect(peer.local_addr().unwrap()))
        .await
        .expect("connect hung")
        .expect("a well-behaved peer can still connect");
    let m = Message::new().with(Element::bytes("juxta", "hello", &b"still here"[..]));
    to_peer.send("ok", Some("in"), m.clone()).await.unwrap();
    let got = tokio::time::timeout(HANG_GUARD, inbox.recv())
        .await
        .expect("message not delivered")
        .unwrap();
    assert_eq!(got.from, Some(client.peer_id()));
    assert_eq!(got.message, m);
    let reply = peer.messenger(&client.peer_id()).unwrap();
    reply.send("ok", Some("back"), m.clone()).await.unwrap();
    let got = tokio::time::timeout(HANG_GUARD, back.recv())
        .await
        .expect("reply not delivered")
        .unwrap();
    assert_eq!(got.message, m);
}

fn vm_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

// ------------------------------------------------------------------ cases

/// The raw client's framing is right: a correctly signed message from it
/// is delivered. (Makes the negative cases below meaningful.)
#[tokio::test]
async fn raw_client_control_valid_message_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let mut inbox = peer.listen("probe", Some("in")).unwrap();
    let me = identity();
    let (mut s, _, mut out) = raw_jxta_client(&peer, &me, *me.peer_id()).await;
    let enc = out.encode(&probe_to(), small_message()).unwrap();
    send(&mut s, &enc.to_bytes()).await;
    let got = tokio::time::timeout(HANG_GUARD, inbox.recv())
        .await
        .expect("valid raw message not delivered")
        .unwrap();
    assert_eq!(got.from, Some(*me.peer_id()));
    assert_eq!(got.message, small_message());
    assert_eq!(failed(&peer), 0);
}

#[tokio::test]
async fn garbage_instead_of_welcome_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let (mut s, local) = connect(&peer).await;
    send(&mut s, b"GET / HTTP/1.1\r\nHost: example\r\n\r\n").await;
    expect_closed(&mut s).await;
    assert_closed_because(local, "not a JXTA welcome");
    assert_eq!(failed(&peer), 1);
    // Binary garbage too.
    let (mut s, local) = connect(&peer).await;
    send(&mut s, &[0u8, 0xff, 0x13, 0x37, 0x80, 0x00, 0x01]).await;
    expect_closed(&mut s).await;
    assert_closed_because(local, "not a JXTA welcome");
    assert_eq!(failed(&peer), 2);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn welcome_longer_than_4096_bytes_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let (mut s, local) = connect(&peer).await;
    let mut line = b"JXTAHELLO tcp://127.0.0.1:1/".to_vec();
    line.resize(5000, b'x');
    line.extend_from_slice(b" tcp://127.0.0.1:1 urn:jxta:cbid-0003 0 1.1\r\n");
    send(&mut s, &line).await;
    expect_closed(&mut s).await;
    assert_closed_because(local, "longer than 4096");
    assert_eq!(failed(&peer), 1);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn no_welcome_at_all_is_closed_after_the_welcome_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |c| c.welcome_timeout = Duration::from_secs(1)).await;
    let (mut s, local) = connect(&peer).await;
    // Send nothing; the peer's own welcome arrives, then the close.
    let got = expect_closed(&mut s).await;
    assert!(
        Welcome::parse(&got).unwrap().is_some(),
        "peer sent its welcome"
    );
    assert_closed_because(local, "no welcome line within");
    assert_eq!(failed(&peer), 1);
    // A welcome that stops half-way is no better.
    let (mut s, local) = connect(&peer).await;
    send(&mut s, b"JXTAHELLO tcp://127.0.0.1:1 tcp://").await;
    expect_closed(&mut s).await;
    assert_closed_because(local, "no welcome line within");
    assert_eq!(failed(&peer), 2);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn truncated_frame_then_eof_does_not_hang_the_peer() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let me = identity();
    for cut in [10usize, 63, 200] {
        let (mut s, local, mut out) = raw_jxta_client(&peer, &me, *me.peer_id()).await;
        let wire = out.encode(&probe_to(), small_message()).unwrap().to_bytes();
        assert!(wire.len() > cut);
        send(&mut s, &wire[..cut]).await;
        s.shutdown().await.unwrap();
        expect_closed(&mut s).await;
        assert_closed_because(local, "closed by remote");
    }
    // The remote hung up: not counted as a failure.
    assert_eq!(failed(&peer), 0);
    assert_eq!(peer.connection_count(), 0);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn content_length_2_pow_63_is_refused_without_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let rss_before = vm_rss_kib();
    let (mut s, local) = connect(&peer).await;
    send(&mut s, &welcome_line(&peer, random_peer_id())).await;
    send(&mut s, &frame::encode_header(1 << 63)).await;
    send(&mut s, b"jxmg\0").await;
    expect_closed(&mut s).await;
    let rss_after = vm_rss_kib();
    assert_closed_because(local, "exceeds the limit");
    assert_eq!(failed(&peer), 1);
    let growth_mib = rss_after.saturating_sub(rss_before) / 1024;
    assert!(
        growth_mib < 100,
        "RSS grew by {growth_mib} MiB ({rss_before} -> {rss_after} KiB)"
    );
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn invalid_utf8_element_name_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let me = identity();
    let (mut s, local, mut out) = raw_jxta_client(&peer, &me, *me.peer_id()).await;
    let mut wire = out
        .encode(&probe_to(), small_message())
        .unwrap()
        .to_bytes()
        .to_vec();
    let at = wire
        .windows(4)
        .position(|w| w == b"XXXX")
        .expect("element name in the frame");
    wire[at..at + 4].copy_from_slice(&[0xff, 0xfe, 0xc3, 0x28]);
    send(&mut s, &wire).await;
    expect_closed(&mut s).await;
    assert_closed_because(local, "invalid UTF-8 in element name");
    assert_eq!(failed(&peer), 1);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn wrong_cbjx_signature_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let me = identity();
    let (mut s, local, mut out) = raw_jxta_client(&peer, &me, *me.peer_id()).await;
    let mut wire = out
        .encode(&probe_to(), small_message())
        .unwrap()
        .to_bytes()
        .to_vec();
    // The signature is the last field of the trailer, at the very end.
    let n = wire.len();
    wire[n - 5] ^= 0x40;
    send(&mut s, &wire).await;
    expect_closed(&mut s).await;
    assert_closed_because(local, "CBJX signature does not verify");
    assert_eq!(failed(&peer), 1);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn wrong_cbjx_signature_of_a_message_hashed_as_it_arrives_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let me = identity();
    let (mut s, local, mut out) = raw_jxta_client(&peer, &me, *me.peer_id()).await;
    // One valid message first: the peer learns this connection's trailer
    // length, so the next large frame is hashed while it arrives.
    let first = out.encode(&probe_to(), small_message()).unwrap().to_bytes();
    send(&mut s, &first).await;
    let big = Message::new().with(Element::bytes("juxta", "data", vec![7u8; 300_000]));
    let mut wire = out.encode(&probe_to(), big).unwrap().to_bytes().to_vec();
    // A payload byte in the middle, hashed long before the trailer arrives.
    wire[150_000] ^= 0x01;
    for piece in wire.chunks(32 * 1024) {
        send(&mut s, piece).await;
    }
    expect_closed(&mut s).await;
    assert_closed_because(local, "CBJX signature does not verify");
    assert_eq!(failed(&peer), 1);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn cbjx_signed_by_another_peer_than_the_welcome_is_spoofed() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let claimed = identity();
    let signer = identity();
    // Welcome as `claimed`, messages validly signed by `signer`.
    let (mut s, local, mut out) = raw_jxta_client(&peer, &signer, *claimed.peer_id()).await;
    let wire = out.encode(&probe_to(), small_message()).unwrap().to_bytes();
    send(&mut s, &wire).await;
    expect_closed(&mut s).await;
    assert_closed_because(local, &format!("message signed by {}", signer.peer_id()));
    assert_eq!(failed(&peer), 1);
    still_serves(&peer, &dir).await;
}

/// Runs the compact handshake as initiator up to the peer's accept, then
/// sends `confirm` (built from the accept) instead of a valid confirm.
async fn handshake_then(
    peer: &Peer,
    me: &Arc<Identity>,
    offer_cert: Bytes,
    confirm: impl FnOnce(&HandshakeMsg) -> HandshakeMsg,
) -> SocketAddr {
    let (mut s, local) = connect(peer).await;
    send(&mut s, &welcome_line(peer, *me.peer_id())).await;
    let mut rx = BytesMut::new();
    let w = read_welcome(&mut s, &mut rx).await;
    // Decodes the peer's frames (the welcome is consumed already).
    let mut inb = Inbound::new(ConnectionConfig::default());
    let mut line = BytesMut::from(w.to_line().as_bytes());
    assert!(matches!(
        inb.poll(&mut line),
        Ok(Some(InboundEvent::Welcome(_)))
    ));
    let mut out = Outbound::new(ConnectionConfig::default(), Role::Initiator, me.clone());
    let nonce = Bytes::from(vec![7u8; handshake::NONCE_LEN]);
    out.on_remote_welcome(w, &mut rand::thread_rng()).unwrap();
    let to = |param| {
        mangle(
            NET_GROUP_UNIQUE,
            &ServiceAddress::new(HANDSHAKE_SERVICE, Some(param)),
        )
    };
    // The offer, with the certificate under test.
    let offer = HandshakeMsg::Offer {
        nonce,
        cert: offer_cert,
        compact: true,
        values: true,
    };
    send(
        &mut s,
        &out.encode(&to("offer"), offer.to_message())
            .unwrap()
            .to_bytes(),
    )
    .await;
    // The peer's accept, if it accepts the offer at all.
    let accept = tokio::time::timeout(HANG_GUARD, async {
        loop {
            match inb.poll(&mut rx) {
                Ok(Some(InboundEvent::Handshake(h))) => return Some(h),
                Ok(Some(_)) => {}
                Ok(None) => match s.read_buf(&mut rx).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                },
                Err(e) => panic!("bad bytes from the peer: {e}"),
            }
        }
    })
    .await
    .expect("no answer to the offer");
    if let Some(accept) = accept {
        let c = confirm(&accept);
        send(
            &mut s,
            &out.encode(&to("confirm"), c.to_message())
                .unwrap()
                .to_bytes(),
        )
        .await;
    }
    expect_closed(&mut s).await;
    local
}

#[tokio::test]
async fn compact_handshake_with_a_bad_signature_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let me = identity();
    let local = handshake_then(&peer, &me, me.cert_der().clone(), |accept| {
        assert!(matches!(accept, HandshakeMsg::Accept { .. }), "{accept:?}");
        // A well-formed signature by the right key, over the wrong transcript.
        HandshakeMsg::Confirm {
            sig: handshake::sign(&me, &[0u8; 32]),
        }
    })
    .await;
    assert_closed_because(local, "compact handshake signature does not verify");
    assert_eq!(failed(&peer), 1);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn compact_handshake_offer_with_another_peers_certificate_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let me = identity();
    let other = identity();
    let local = handshake_then(&peer, &me, other.cert_der().clone(), |_| {
        panic!("the peer accepted an offer with someone else's certificate")
    })
    .await;
    assert_closed_because(local, "certificate does not belong to peer");
    assert_eq!(failed(&peer), 1);
    still_serves(&peer, &dir).await;
}

// ------------------------------------------------------ hostile peers (#20)

/// A JXTA-framed message framed by `out` (CBJX off) whose trailer is
/// forged: `signer`'s certificate and signature, `src` = `claimed`.
fn forged_trailer_frame(
    out: &mut Outbound,
    signer: &Identity,
    claimed: &PeerId,
    m: Message,
) -> Vec<u8> {
    let enc = out.encode(&probe_to(), m).unwrap();
    // chunks[0] is the frame header; the rest is the message body.
    let body: Vec<u8> = enc.chunks[1..].iter().flat_map(|c| c.to_vec()).collect();
    let cert = signer.cert_der().clone();
    let src = Bytes::from(claimed.to_string());
    let digest = juxta_proto::message::cbjx::signed_digest([&body[..]], &cert, &src);
    let trailer = juxta_proto::message::cbjx::Trailer {
        cert,
        src,
        sig: signer.sign_sha256_prehash(&digest),
    }
    .encode();
    let mut wire = frame::encode_header((body.len() + trailer.len()) as u64).to_vec();
    wire.extend_from_slice(&body);
    wire.extend_from_slice(&trailer);
    wire
}

/// A raw client with CBJX off in its outbound half (the tests add their
/// own trailers).
async fn raw_unsigned_client(peer: &Peer, claimed: PeerId) -> (TcpStream, SocketAddr, Outbound) {
    raw_client(peer, &identity(), claimed, false).await
}

#[tokio::test]
async fn impersonation_with_the_attackers_own_key_is_refused() {
    // Issue #20's attack: a welcome naming victim V, then a message signed
    // with the attacker's own key and a trailer whose src is V.
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let victim = identity();
    let mallory = identity();
    let (mut s, local, mut out) = raw_unsigned_client(&peer, *victim.peer_id()).await;
    let wire = forged_trailer_frame(&mut out, &mallory, victim.peer_id(), small_message());
    send(&mut s, &wire).await;
    expect_closed(&mut s).await;
    assert_closed_because(local, "certificate that derives another peer ID");
    assert!(!peer.is_connected_to(victim.peer_id()));
    assert_eq!(failed(&peer), 1);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn replayed_signed_message_proves_nothing_on_another_connection() {
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let mut inbox = peer.listen("probe", Some("in")).unwrap();
    let victim = identity();
    // The victim's message names the receiver (as a routed JXSE message's
    // router header does), so it proves the victim's first connection.
    let naming = small_message().with(Element::text(
        "app",
        "to",
        &peer.peer_id().endpoint_address(),
    ));
    let (mut s1, _, mut out1) = raw_unsigned_client(&peer, *victim.peer_id()).await;
    let wire = forged_trailer_frame(&mut out1, &victim, victim.peer_id(), naming.clone());
    send(&mut s1, &wire).await;
    tokio::time::timeout(HANG_GUARD, inbox.recv())
        .await
        .expect("the victim's message is delivered")
        .unwrap();
    assert!(peer.is_connected_to(victim.peer_id()));
    let replays = || peer.stats().replayed_signatures;
    assert_eq!(replays(), 0);
    // Mallory replays the same bytes on her own connection, claiming V.
    let (mut s2, _, _) = raw_unsigned_client(&peer, *victim.peer_id()).await;
    send(&mut s2, &wire).await;
    let end = tokio::time::Instant::now() + HANG_GUARD;
    while replays() == 0 {
        assert!(tokio::time::Instant::now() < end, "replay not counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(replays(), 1);
    drop(s1);
    drop(s2);
    still_serves(&peer, &dir).await;
}

#[tokio::test]
async fn unsolicited_discovery_answers_and_foreign_remote_publishes_are_not_cached() {
    use juxta_proto::advertisement::{AdvKind, Advertisement, PeerAdvertisement};
    use juxta_proto::discovery::{DiscoveryEntry, DiscoveryResponse};
    use juxta_proto::id::PeerGroupId;
    use juxta_proto::resolver::{response_queue, RESOLVER_SERVICE};
    let dir = tempfile::tempdir().unwrap();
    let peer = target(&dir, |_| {}).await;
    let mut cfg = PeerConfig::new(dir.path().join("mallory"));
    cfg.key_bits = 1024;
    let mallory = Peer::start(cfg).await.unwrap();
    let m = mallory.connect(peer.local_addr().unwrap()).await.unwrap();
    let victim = random_peer_id();
    let forged_pa = Advertisement::Peer(PeerAdvertisement::new(victim, PeerGroupId::NET, "v"));
    let own_pa = Advertisement::Peer(PeerAdvertisement::new(
        peer.peer_id(),
        PeerGroupId::NET,
        "evil twin",
    ));
    let response = |entries: Vec<DiscoveryEntry>| DiscoveryResponse {
        kind: AdvKind::Peer,
        peer_adv: None,
        attr: None,
        value: None,
        responses: entries,
    };
    // An answer to a query the peer never sent (query ID 77).
    let r = response(vec![DiscoveryEntry::new(&forged_pa, 60_000)]);
    let msg = Message::new().with(r.to_resolver_response(77).to_element(NET_GROUP_UNIQUE));
    m.send_routed(
        RESOLVER_SERVICE,
        Some(&response_queue(NET_GROUP_UNIQUE)),
        msg,
    )
    .await
    .unwrap();
    // A remote publish (query ID 0) of another peer's advertisement and of
    // the target's own.
    let r = response(vec![
        DiscoveryEntry::new(&forged_pa, 60_000),
        DiscoveryEntry::new(&own_pa, 60_000),
    ]);
    let msg = Message::new().with(r.to_resolver_response(0).to_element(NET_GROUP_UNIQUE));
    m.send_routed(
        RESOLVER_SERVICE,
        Some(&response_queue(NET_GROUP_UNIQUE)),
        msg,
    )
    .await
    .unwrap();
    let end = tokio::time::Instant::now() + HANG_GUARD;
    while peer.stats().discovery_late < 1 || peer.stats().discovery_rejected < 2 {
        assert!(tokio::time::Instant::now() < end, "refusals not counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cached = peer
        .discovery()
        .get_local(AdvKind::Peer, None, None, 100)
        .await
        .unwrap();
    assert!(
        cached.iter().all(|a| !matches!(a, Advertisement::Peer(pa)
            if pa.peer_id == victim || pa.name == "evil twin")),
        "{cached:?}"
    );
}
