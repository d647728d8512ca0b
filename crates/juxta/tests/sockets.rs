//! JXTA sockets between Juxta peers: 10 MB each way with a clean close, a
//! link that loses 1% of the socket's messages (a lossy forwarder between
//! the peers), and a peer that goes silent (reads and writes fail within the
//! configured time, never hang).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::PipeId;
use juxta_proto::wire::frame::parse_header;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WAIT: Duration = Duration::from_secs(120);

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + 7) as u8) ^ seed).collect()
}

fn adv() -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    a.name = Some("sock".into());
    a
}

async fn peer(dir: &tempfile::TempDir, name: &str, listen: bool, compact: bool) -> Peer {
    let mut c = PeerConfig::new(dir.path().join(name));
    if listen {
        c = c.listen("127.0.0.1:0".parse().unwrap());
    }
    c.connection.compact = compact;
    c.key_bits = 1024; // fast key generation; no TLS here
    Peer::start(c).await.unwrap()
}

/// Client writes `up` bytes then reads `down` bytes; server reads `up`,
/// writes `down`; both check content and close cleanly.
async fn transfer(
    a: &Peer,
    b: &Peer,
    connect_to: std::net::SocketAddr,
    up: usize,
    down: usize,
    cfg: SocketConfig,
) {
    let ad = adv();
    let mut server = JxtaServerSocket::bind(a, &ad, cfg.clone()).unwrap();
    b.connect(connect_to).await.unwrap();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut got = vec![0u8; up];
        s.read_exact(&mut got).await.unwrap();
        assert!(got == pattern(up, 1), "server got corrupted data");
        s.write_all(&pattern(down, 2)).await.unwrap();
        s.flush().await.unwrap();
        // The client closes after reading: we see end-of-stream.
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        s.shutdown().await.unwrap();
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg)
        .await
        .unwrap();
    let data = pattern(up, 1);
    let writer = async {
        c.write_all(&data).await.unwrap();
        c.flush().await.unwrap();
    };
    writer.await;
    let mut back = vec![0u8; down];
    c.read_exact(&mut back).await.unwrap();
    assert_eq!(Sha256::digest(&back), Sha256::digest(pattern(down, 2)));
    c.shutdown().await.unwrap();
    tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabytes_each_way_compact() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let b = peer(&dir, "b", false, true).await;
    let addr = a.local_addr().unwrap();
    tokio::time::timeout(
        WAIT,
        transfer(&a, &b, addr, 10 << 20, 10 << 20, SocketConfig::default()),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabytes_each_way_jxta_framing() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, false).await;
    let b = peer(&dir, "b", false, false).await;
    let addr = a.local_addr().unwrap();
    tokio::time::timeout(
        WAIT,
        transfer(&a, &b, addr, 10 << 20, 10 << 20, SocketConfig::default()),
    )
    .await
    .unwrap();
}

/// A half-close over jxtarel: the client ends its direction
/// (`shutdown` returns once its close is out) and only then does the
/// server, having read the end of stream, write its answer and close.
/// The client reads the whole answer, then the end. (The server used to
/// acknowledge the client's close at once, closing both directions, so an
/// answer written after reading the end failed or was cut: found as a
/// secure socket's close_notify lost under load.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_over_jxtarel_lets_the_server_answer_after_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, false).await;
    let b = peer(&dir, "b", false, false).await;
    let ad = adv();
    let cfg = SocketConfig::default();
    let mut server = JxtaServerSocket::bind(&a, &ad, cfg.clone()).unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    let (client_done_tx, client_done_rx) = tokio::sync::oneshot::channel::<()>();
    const UP: usize = 300_000;
    const DOWN: usize = 1 << 20;
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert!(got == pattern(UP, 1), "server got corrupted data");
        // Only once the client's shutdown has returned.
        client_done_rx.await.unwrap();
        s.write_all(&pattern(DOWN, 2)).await.unwrap();
        s.shutdown().await.unwrap();
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg)
        .await
        .unwrap();
    assert_eq!(c.mode(), juxta::socket::SocketMode::Reliable);
    c.write_all(&pattern(UP, 1)).await.unwrap();
    c.shutdown().await.unwrap();
    client_done_tx.send(()).unwrap();
    let mut back = Vec::new();
    tokio::time::timeout(WAIT, c.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.len(), DOWN, "the whole answer, then the end");
    assert!(back == pattern(DOWN, 2), "answer corrupted");
    tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
}

/// Forwards a JXTA-framed TCP connection (compact framing off), dropping
/// each frame that carries reliable-stream data or acks with probability
/// `loss`, or everything once `blackhole` is set.
async fn forwarder(
    target: std::net::SocketAddr,
    loss: f64,
    blackhole: Arc<AtomicBool>,
) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (down, _) = l.accept().await.unwrap();
        let up = TcpStream::connect(target).await.unwrap();
        let (dr, dw) = down.into_split();
        let (ur, uw) = up.into_split();
        tokio::spawn(pump(dr, uw, loss, 1, blackhole.clone()));
        tokio::spawn(pump(ur, dw, loss, 2, blackhole));
    });
    addr
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    loss: f64,
    seed: u64,
    blackhole: Arc<AtomicBool>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut buf = Vec::new();
    let mut welcome_done = false;
    let mut tmp = vec![0u8; 256 * 1024];
    loop {
        let n = match r.read(&mut tmp).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&tmp[..n]);
        loop {
            if !welcome_done {
                let Some(i) = buf.windows(2).position(|w| w == b"\r\n") else {
                    break;
                };
                let line: Vec<u8> = buf.drain(..i + 2).collect();
                if w.write_all(&line).await.is_err() {
                    return;
                }
                welcome_done = true;
                continue;
            }
            let Ok(Some(h)) = parse_header(&buf, u64::MAX) else {
                break;
            };
            let total = h.header_len + h.content_length as usize;
            if buf.len() < total {
                break;
            }
            let frame: Vec<u8> = buf.drain(..total).collect();
            let reliable = frame.windows(7).any(|w| w == b"jxtarel");
            let drop_it =
                blackhole.load(Ordering::Relaxed) || (reliable && rng.gen::<f64>() < loss);
            if !drop_it && w.write_all(&frame).await.is_err() {
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_link_delivers_every_byte_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, false).await;
    let b = peer(&dir, "b", false, false).await;
    let via = forwarder(
        a.local_addr().unwrap(),
        0.01,
        Arc::new(AtomicBool::new(false)),
    )
    .await;
    tokio::time::timeout(
        WAIT,
        transfer(&a, &b, via, 4 << 20, 4 << 20, SocketConfig::default()),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peer_fails_reads_and_writes_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, false).await;
    let b = peer(&dir, "b", false, false).await;
    let hole = Arc::new(AtomicBool::new(false));
    let via = forwarder(a.local_addr().unwrap(), 0.0, hole.clone()).await;
    let cfg = SocketConfig {
        dead_peer_timeout: Duration::from_secs(2),
        ..SocketConfig::default()
    };
    let ad = adv();
    let mut server = JxtaServerSocket::bind(&a, &ad, cfg.clone()).unwrap();
    b.connect(via).await.unwrap();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut buf = vec![0u8; 1024];
        // Reads fail once the client has gone silent.
        loop {
            match s.read(&mut buf).await {
                Ok(0) => panic!("clean end of stream from a silent peer"),
                Ok(_) => continue,
                Err(e) => return e.kind(),
            }
        }
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg)
        .await
        .unwrap();
    c.write_all(b"hello").await.unwrap();
    c.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    hole.store(true, Ordering::Relaxed);
    // Writes fail: nothing is acknowledged any more.
    let started = std::time::Instant::now();
    let big = vec![7u8; 8 << 20];
    let w = tokio::time::timeout(Duration::from_secs(60), async {
        c.write_all(&big).await?;
        c.flush().await?;
        // Small writes may fit the window: wait for the acks that never come.
        c.shutdown().await
    })
    .await
    .expect("write hung");
    assert!(w.is_err(), "writes to a silent peer succeeded");
    let kind = tokio::time::timeout(Duration::from_secs(60), srv)
        .await
        .expect("read hung")
        .unwrap();
    assert_ne!(kind, std::io::ErrorKind::UnexpectedEof);
    eprintln!("failed after {:?}", started.elapsed());
}

/// Two peers on a JXTA-framed connection with CBJX on (every message
/// signed), a server socket bound on the listening one (`a`).
async fn signed_pair(dir: &tempfile::TempDir) -> (Peer, Peer, PipeAdvertisement, JxtaServerSocket) {
    let a = peer(dir, "a", true, false).await;
    let b = peer(dir, "b", false, false).await;
    let ad = adv();
    let server = JxtaServerSocket::bind(&a, &ad, SocketConfig::default()).unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    (a, b, ad, server)
}

/// Towards a JXTA-framed peer with CBJX on, every message is signed, so a
/// direct socket sends its data in 1 MiB blocks, not JxtaSocket's 64 KiB:
/// a megabyte takes 1 data message, not 16.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_connections_carry_megabyte_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, ad, mut server) = signed_pair(&dir).await;
    let n = 1 << 20;
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).await.unwrap();
        assert!(got == pattern(n, 3), "server got corrupted data");
        s.write_all(&[1]).await.unwrap();
        s.flush().await.unwrap();
        s
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    let before = b.stats().messages_out;
    c.write_all(&pattern(n, 3)).await.unwrap();
    c.flush().await.unwrap();
    let mut ack = [0u8; 1];
    tokio::time::timeout(WAIT, c.read_exact(&mut ack))
        .await
        .unwrap()
        .unwrap();
    let sent = b.stats().messages_out - before;
    // One block, plus acks of the server's one byte (64 KiB blocks: 16+,
    // 256 KiB blocks: 4+).
    assert!((1..4).contains(&sent), "{sent} messages for 1 MiB");
    let _server_socket = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
}

/// On a signed JXTA-framed link a request-response round trip takes one
/// message each way: the ack of the request rides on the response (each
/// message costs an RSA signature there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_pongs_acks_ride_on_the_replies() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, ad, mut server) = signed_pair(&dir).await;
    let rounds = 50u64;
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut byte = [0u8; 1];
        for _ in 0..rounds {
            s.read_exact(&mut byte).await.unwrap();
            s.write_all(&byte).await.unwrap();
            s.flush().await.unwrap();
        }
        s
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    // One round first: the set-up's own messages are done by then.
    let mut byte = [7u8; 1];
    c.write_all(&byte).await.unwrap();
    c.flush().await.unwrap();
    c.read_exact(&mut byte).await.unwrap();
    let (out, inb) = (b.stats().messages_out, b.stats().messages_in);
    for i in 1..rounds {
        c.write_all(&[i as u8]).await.unwrap();
        c.flush().await.unwrap();
        tokio::time::timeout(WAIT, c.read_exact(&mut byte))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(byte[0], i as u8);
    }
    let sent = b.stats().messages_out - out;
    let got = b.stats().messages_in - inb;
    // Separate acks make it 2 per round each way. An ack still goes
    // alone when its reply comes later than the ack delay (5 ms, a
    // starved CI host), so this asserts only that acks ride at all; the
    // engine's unit tests pin the rule down
    // (`a_consumed_blocks_ack_rides_on_the_next_block_or_waits_its_delay`).
    let n = rounds - 1;
    assert!(sent < 2 * n, "{sent} messages sent for {n} round trips");
    assert!(got < 2 * n, "{got} messages received for {n} round trips");
    let _server_socket = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
}
