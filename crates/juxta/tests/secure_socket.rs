//! Secure JXTA sockets (TLS 1.3 over the socket's byte stream): 10 MB go
//! each way intact (SHA-256 compared) in stream mode and over `jxtarel`,
//! both ends see the other's proven peer ID, a `JxtaUnicastSecure`
//! advertisement asks for TLS by itself, and a secure server refuses a
//! plain client. Tampered and oversized records, a wrong peer ID and a
//! silent handshake are tested next to the code (`socket::secure`), where
//! the records can be reached.

use std::time::Duration;

use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig, SocketError, SocketMode};
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::PipeId;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(120);

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + 7) as u8) ^ seed).collect()
}

fn adv(ty: PipeType) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), ty);
    a.name = Some("secure-sock".into());
    a
}

async fn peer(dir: &tempfile::TempDir, name: &str, listen: bool, compact: bool) -> Peer {
    let mut c = PeerConfig::new(dir.path().join(name)).compact(compact);
    if listen {
        c = c.listen("127.0.0.1:0".parse().unwrap());
    }
    // TLS signs with RSA keys of 2048 bits or more.
    c.key_bits = 2048;
    Peer::start(c).await.unwrap()
}

async fn pair(dir: &tempfile::TempDir, compact: bool) -> (Peer, Peer) {
    let (a, b) = tokio::join!(
        peer(dir, "a", true, compact),
        peer(dir, "b", false, compact)
    );
    let m = b.connect(a.local_addr().unwrap()).await.unwrap();
    if compact {
        assert!(m.wait_compact(WAIT).await, "compact framing agreed");
    }
    (a, b)
}

/// `up` bytes client → server, then `down` bytes back, both compared by
/// SHA-256; clean ends of stream both ways.
async fn transfer(
    a: &Peer,
    b: &Peer,
    ad: PipeAdvertisement,
    cfg: SocketConfig,
    up: usize,
    down: usize,
    want: SocketMode,
) {
    let mut server = JxtaServerSocket::bind(a, &ad, cfg.clone()).unwrap();
    let client_id = b.peer_id();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        assert!(s.is_secure());
        assert_eq!(s.remote(), client_id, "the client's proven peer ID");
        assert_eq!(s.mode(), want);
        let mut got = vec![0u8; up];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(Sha256::digest(&got), Sha256::digest(pattern(up, 1)));
        s.write_all(&pattern(down, 2)).await.unwrap();
        s.flush().await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        s.shutdown().await.unwrap();
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg)
        .await
        .unwrap();
    assert!(c.is_secure());
    assert_eq!(c.remote(), a.peer_id());
    assert_eq!(c.mode(), want);
    c.write_all(&pattern(up, 1)).await.unwrap();
    c.flush().await.unwrap();
    let mut back = vec![0u8; down];
    c.read_exact(&mut back).await.unwrap();
    assert_eq!(Sha256::digest(&back), Sha256::digest(pattern(down, 2)));
    c.shutdown().await.unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabytes_each_way_in_stream_mode() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, true).await;
    let cfg = SocketConfig {
        secure: true,
        ..SocketConfig::default()
    };
    tokio::time::timeout(
        WAIT,
        transfer(
            &a,
            &b,
            adv(PipeType::Unicast),
            cfg,
            10 << 20,
            10 << 20,
            SocketMode::Stream,
        ),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unicast_secure_advertisement_asks_for_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, true).await;
    // No option set: the advertisement's type is enough, on both sides.
    tokio::time::timeout(
        WAIT,
        transfer(
            &a,
            &b,
            adv(PipeType::UnicastSecure),
            SocketConfig::default(),
            1 << 20,
            12345,
            SocketMode::Stream,
        ),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabytes_each_way_over_jxtarel() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, true).await;
    let cfg = SocketConfig {
        secure: true,
        stream: false,
        ..SocketConfig::default()
    };
    tokio::time::timeout(
        WAIT,
        transfer(
            &a,
            &b,
            adv(PipeType::Unicast),
            cfg,
            10 << 20,
            10 << 20,
            SocketMode::Reliable,
        ),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_server_refuses_a_plain_client() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(&dir, true).await;
    let ad = adv(PipeType::Unicast);
    let secure = SocketConfig {
        secure: true,
        ..SocketConfig::default()
    };
    let mut server = JxtaServerSocket::bind(&a, &ad, secure.clone()).unwrap();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        (s.is_secure(), got)
    });
    let plain = SocketConfig {
        connect_timeout: Duration::from_secs(2),
        ..SocketConfig::default()
    };
    let r = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), plain).await;
    assert!(
        matches!(r, Err(SocketError::ConnectTimeout(_))),
        "a plain client gets no answer from a secure server: {:?}",
        r.err()
    );
    // The server still serves secure clients.
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), secure)
        .await
        .unwrap();
    c.write_all(b"after the refusal").await.unwrap();
    c.shutdown().await.unwrap();
    let (is_secure, got) = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
    assert!(is_secure);
    assert_eq!(got, b"after the refusal");
}
