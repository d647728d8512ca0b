//! JXTA sockets in stream mode (two Juxta peers on a direct compact
//! connection): the mode is negotiated, 10 MB go each way intact, `jxtarel`
//! stays in use with JXTA framing (CBJX) and when stream mode is off, and a
//! hostile client (a Juxta peer that performs the `JXTASOC` set-up by hand
//! and then sends crafted stream messages) cannot hurt the server: no
//! credit stalls only that socket, absurd credit is capped, sending past
//! the credit or after FIN/RESET is refused with a typed error and counted,
//! and resets or a closed connection surface as documented io errors.

use std::time::Duration;

use bytes::Bytes;
use juxta::pipe::{InputPipe, PIPE_SERVICE};
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig, SocketMode};
use juxta::{Messenger, Peer, PeerConfig};
use juxta_proto::advertisement::{PeerAdvertisement, PipeAdvertisement, PipeType};
use juxta_proto::id::{PeerGroupId, PipeId};
use juxta_proto::message::{Element, Message};
use juxta_proto::socket::setup::{ConnectRequest, ConnectResponse};
use juxta_proto::socket::stream::{self as st, ResetCode, MIN_WINDOW};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(120);

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + 7) as u8) ^ seed).collect()
}

fn adv(name: &str) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    a.name = Some(name.into());
    a
}

async fn peer(dir: &tempfile::TempDir, name: &str, listen: bool, compact: bool) -> Peer {
    let mut c = PeerConfig::new(dir.path().join(name)).compact(compact);
    if listen {
        c = c.listen("127.0.0.1:0".parse().unwrap());
    }
    c.key_bits = 1024;
    Peer::start(c).await.unwrap()
}

/// A listening peer A and a peer B connected to it (compact framing
/// agreed when `compact`).
async fn pair(dir: &tempfile::TempDir, compact: bool) -> (Peer, Peer, Messenger) {
    let a = peer(dir, "a", true, compact).await;
    let b = peer(dir, "b", false, compact).await;
    let m = b.connect(a.local_addr().unwrap()).await.unwrap();
    if compact {
        assert!(m.wait_compact(WAIT).await, "compact framing agreed");
    }
    (a, b, m)
}

/// Client writes `up`, reads `down`; server the reverse; both check the
/// bytes, the mode, and a clean end of stream.
async fn transfer(a: &Peer, b: &Peer, up: usize, down: usize, cfg: SocketConfig, want: SocketMode) {
    let ad = adv("sock");
    let grants_due = down as u64 >= cfg.stream_window / 4;
    let mut server = JxtaServerSocket::bind(a, &ad, cfg.clone()).unwrap();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        assert_eq!(s.mode(), want, "server mode");
        let mut got = vec![0u8; up];
        s.read_exact(&mut got).await.unwrap();
        assert!(got == pattern(up, 1), "server got corrupted data");
        // The client announced its stream frames ahead of its data.
        assert_eq!(
            s.sends_stream_frames(),
            want == SocketMode::Stream,
            "server sends stream frames"
        );
        s.write_all(&pattern(down, 2)).await.unwrap();
        s.flush().await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        s.shutdown().await.unwrap();
        s.stream_stats()
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg)
        .await
        .unwrap();
    assert_eq!(c.mode(), want, "client mode");
    assert_eq!(
        c.sends_stream_frames(),
        want == SocketMode::Stream,
        "client sends stream frames"
    );
    let data = pattern(up, 1);
    c.write_all(&data).await.unwrap();
    c.flush().await.unwrap();
    let mut back = vec![0u8; down];
    c.read_exact(&mut back).await.unwrap();
    assert_eq!(Sha256::digest(&back), Sha256::digest(pattern(down, 2)));
    c.shutdown().await.unwrap();
    // The server's end of stream reaches us too.
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    let stats = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
    if want == SocketMode::Stream {
        let s = stats.expect("stream stats");
        assert_eq!(s.violations, 0);
        assert_eq!(s.capped_grants, 0);
        if grants_due {
            assert!(s.credits_in > 0, "credit was granted as the client read");
        }
        assert_eq!(c.stats().blocks_sent, 0, "no jxtarel blocks in stream mode");
    } else {
        assert!(stats.is_none());
        assert!(c.stats().blocks_sent > 0, "jxtarel blocks");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_mode_between_juxta_peers_ten_megabytes_each_way() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _m) = pair(&dir, true).await;
    // A small window so credit is granted many times over the transfer.
    let cfg = SocketConfig {
        stream_window: 256 * 1024,
        ..SocketConfig::default()
    };
    tokio::time::timeout(
        WAIT,
        transfer(&a, &b, 10 << 20, 10 << 20, cfg, SocketMode::Stream),
    )
    .await
    .unwrap();
    // Default settings too.
    tokio::time::timeout(
        WAIT,
        transfer(
            &a,
            &b,
            3 << 20,
            5 << 20,
            SocketConfig::default(),
            SocketMode::Stream,
        ),
    )
    .await
    .unwrap();
}

/// The bulk read paths: `read_chunk` hands over the received bytes in
/// order (at most `max` each, `None` at the end), and `read_buf` into
/// spare capacity (no initialized buffer) gets them too; with a small
/// window so the reader's pace drives many grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_chunk_and_read_buf_deliver_the_stream_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _m) = pair(&dir, true).await;
    let cfg = SocketConfig {
        stream_window: MIN_WINDOW,
        ..SocketConfig::default()
    };
    const N: usize = 6 << 20;
    for chunked in [true, false] {
        let ad = adv(if chunked { "chunks" } else { "readbuf" });
        let mut server = JxtaServerSocket::bind(&a, &ad, cfg.clone()).unwrap();
        let srv = tokio::spawn(async move {
            let mut s = server.accept().await.unwrap();
            assert_eq!(s.mode(), SocketMode::Stream);
            let mut got = Vec::new();
            let mut most = 0;
            if chunked {
                assert_eq!(s.read_chunk(0).await.unwrap(), Some(Bytes::new()));
                while let Some(c) = s.read_chunk(100_000).await.unwrap() {
                    assert!(!c.is_empty() && c.len() <= 100_000);
                    most = most.max(c.len());
                    got.extend_from_slice(&c);
                }
                // At the end it stays at the end.
                assert_eq!(s.read_chunk(10).await.unwrap(), None);
            } else {
                loop {
                    let mut v = Vec::with_capacity(300_000);
                    let n = s.read_buf(&mut v).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    assert_eq!(n, v.len());
                    most = most.max(n);
                    got.extend_from_slice(&v);
                }
            }
            (got, most, s.stream_stats().unwrap())
        });
        let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg.clone())
            .await
            .unwrap();
        c.write_all(&pattern(N, 5)).await.unwrap();
        c.shutdown().await.unwrap();
        let (got, most, stats) = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
        assert_eq!(got.len(), N);
        assert!(got == pattern(N, 5), "data intact and in order");
        assert!(most > 1, "reads returned more than a byte at a time");
        assert_eq!(stats.violations, 0);
    }
}

/// A large write goes out in as few data messages as the sender's
/// `max_message` allows: 4 MiB each by default (`MAX_DATA_CHUNK`), less on
/// a peer configured for smaller messages (never past what it may send);
/// the bytes arrive intact either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_writes_go_in_messages_as_large_as_max_message_allows() {
    const N: usize = (9 << 20) + 5;
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    for (name, max_message, want) in [
        ("default", None, N.div_ceil(st::MAX_DATA_CHUNK)),
        // 2 MiB less the 64 KiB kept for headers: 1,984 KiB per message.
        (
            "small",
            Some(2u64 << 20),
            N.div_ceil((2 << 20) - (64 << 10)),
        ),
    ] {
        let mut c = PeerConfig::new(dir.path().join(name)).compact(true);
        c.key_bits = 1024;
        if let Some(m) = max_message {
            c = c.max_message(m);
        }
        let b = Peer::start(c).await.unwrap();
        let m = b.connect(a.local_addr().unwrap()).await.unwrap();
        assert!(m.wait_compact(WAIT).await, "compact framing agreed");
        let ad = adv(name);
        let mut server = JxtaServerSocket::bind(&a, &ad, SocketConfig::default()).unwrap();
        let srv = tokio::spawn(async move {
            let mut s = server.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            (got, s.stream_stats().unwrap())
        });
        let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), SocketConfig::default())
            .await
            .unwrap();
        assert_eq!(c.mode(), SocketMode::Stream);
        // One write call per message: the socket takes what one message
        // carries each time.
        c.write_all(&pattern(N, 9)).await.unwrap();
        c.shutdown().await.unwrap();
        let (got, stats) = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
        assert!(got == pattern(N, 9), "{name}: data intact and in order");
        assert_eq!(stats.data_in, want as u64, "{name}: data messages");
        assert_eq!(stats.violations, 0);
        b.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jxta_framing_with_cbjx_keeps_jxtarel() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, false).await;
    let b = peer(&dir, "b", false, false).await;
    let m = b.connect(a.local_addr().unwrap()).await.unwrap();
    assert!(!m.is_compact());
    tokio::time::timeout(
        WAIT,
        transfer(
            &a,
            &b,
            1 << 20,
            1 << 20,
            SocketConfig::default(),
            SocketMode::Reliable,
        ),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_mode_off_keeps_jxtarel_on_either_side() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _m) = pair(&dir, true).await;
    let off = SocketConfig {
        stream: false,
        ..SocketConfig::default()
    };
    tokio::time::timeout(
        WAIT,
        transfer(&a, &b, 1 << 20, 1 << 20, off.clone(), SocketMode::Reliable),
    )
    .await
    .unwrap();
    // Server refuses stream mode although the client offers it.
    let ad = adv("half");
    let mut server = JxtaServerSocket::bind(&a, &ad, off).unwrap();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        assert_eq!(s.mode(), SocketMode::Reliable);
        let mut got = [0u8; 5];
        s.read_exact(&mut got).await.unwrap();
        got
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    assert_eq!(c.mode(), SocketMode::Reliable);
    c.write_all(b"hello").await.unwrap();
    c.flush().await.unwrap();
    assert_eq!(
        &tokio::time::timeout(WAIT, srv).await.unwrap().unwrap(),
        b"hello"
    );
}

/// A hostile client: B performs the `JXTASOC` set-up by hand (offering
/// stream mode with `window`), then sends whatever it likes to the server
/// socket's pipe. Returns the server's socket, the server pipe to send to,
/// and B's input pipe (where the server's stream messages arrive).
struct Hostile {
    to: String,
    messenger: Messenger,
    input: InputPipe,
}

impl Hostile {
    async fn open(
        a: &Peer,
        b: &Peer,
        m: &Messenger,
        window: u64,
        server_window: u64,
    ) -> (JxtaSocket, Hostile) {
        let ad = adv("victim");
        let cfg = SocketConfig {
            stream_window: server_window,
            ..SocketConfig::default()
        };
        let mut server = JxtaServerSocket::bind(a, &ad, cfg).unwrap();
        let local = adv("hostile");
        let mut input = b.pipes().create_input_pipe(&local).unwrap();
        let me = PeerAdvertisement {
            peer_id: b.peer_id(),
            group_id: PeerGroupId::NET,
            name: "hostile".into(),
            desc: None,
            route: None,
        };
        let mut req = ConnectRequest::socket(local, me, true).to_message();
        req.push(st::offer_element(window));
        m.send(PIPE_SERVICE, Some(&ad.id.to_string()), req)
            .await
            .unwrap();
        let s = tokio::time::timeout(WAIT, server.accept())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s.mode(), SocketMode::Stream);
        let resp = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            st::offered_window(&resp.message).is_some(),
            "server accepted stream mode"
        );
        let r = ConnectResponse::from_message(&resp.message).unwrap();
        (
            s,
            Hostile {
                to: r.rem_pipe.id.to_string(),
                messenger: m.clone(),
                input,
            },
        )
    }

    async fn send(&self, elements: Vec<Element>) {
        let mut msg = Message::new();
        for e in elements {
            msg.push(e);
        }
        self.messenger
            .send(PIPE_SERVICE, Some(&self.to), msg)
            .await
            .unwrap();
    }

    /// Receives the server's stream messages until one carries an item
    /// `pick` accepts; returns the data bytes seen on the way.
    async fn recv_until(&mut self, mut pick: impl FnMut(&st::Item) -> bool) -> usize {
        let mut data = 0;
        loop {
            let m = tokio::time::timeout(WAIT, self.input.recv())
                .await
                .expect("server message")
                .unwrap();
            for it in st::items(&m.message) {
                let it = it.unwrap();
                if let st::Item::Data(d) = &it {
                    data += d.len();
                }
                if pick(&it) {
                    return data;
                }
            }
        }
    }
}

/// Checks that the connection between A and B still serves another socket.
async fn other_socket_works(a: &Peer, b: &Peer) {
    tokio::time::timeout(
        WAIT,
        transfer(
            a,
            b,
            1 << 20,
            64 << 10,
            SocketConfig::default(),
            SocketMode::Stream,
        ),
    )
    .await
    .expect("another socket on the same connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_that_never_grants_credit_blocks_only_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, m) = pair(&dir, true).await;
    let (server, mut h) = Hostile::open(&a, &b, &m, MIN_WINDOW, MIN_WINDOW).await;
    let mut server = server;
    let writer = tokio::spawn(async move {
        let r = server.write_all(&vec![5u8; 1 << 20]).await;
        (server, r)
    });
    // The window's worth arrives, then nothing: the writer waits.
    let got = tokio::time::timeout(Duration::from_secs(30), async {
        let mut n = 0;
        while n < MIN_WINDOW as usize {
            n += h.recv_until(|it| matches!(it, st::Item::Data(_))).await;
        }
        n
    })
    .await
    .unwrap();
    assert_eq!(got, MIN_WINDOW as usize, "exactly the window was sent");
    // Meanwhile the connection serves others.
    other_socket_works(&a, &b).await;
    assert!(!writer.is_finished(), "writer waits for credit");
    // A reset ends the blocked write with ConnectionReset.
    h.send(vec![st::reset_element(ResetCode::Abort)]).await;
    let (server, r) = tokio::time::timeout(WAIT, writer).await.unwrap().unwrap();
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset);
    // Data after the reset is refused and counted.
    h.send(vec![st::data_element(Bytes::from_static(b"late"))])
        .await;
    other_socket_works(&a, &b).await;
    let s = server.stream_stats().unwrap();
    assert_eq!(s.refused_after_reset, 1);
    assert_eq!(s.violations, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_credit_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, m) = pair(&dir, true).await;
    let (server, mut h) = Hostile::open(&a, &b, &m, MIN_WINDOW, MIN_WINDOW).await;
    h.send(vec![st::credit_element(u64::MAX)]).await;
    // The grant lets the whole megabyte through, and nothing overflows.
    let n = 1 << 20;
    let mut server = server;
    let w = tokio::spawn(async move {
        server.write_all(&vec![9u8; n]).await.unwrap();
        server.shutdown().await.unwrap();
        server
    });
    let got = h.recv_until(|it| matches!(it, st::Item::Fin(_))).await;
    assert_eq!(got, n);
    let server = tokio::time::timeout(WAIT, w).await.unwrap().unwrap();
    let s = server.stream_stats().unwrap();
    assert_eq!(s.capped_grants, 1);
    assert_eq!(s.credits_in, 1);
    // Writes after our own shutdown fail with BrokenPipe.
    let mut server = server;
    let e = server.write_all(b"x").await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sending_past_credit_resets_only_that_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, m) = pair(&dir, true).await;
    let (server, mut h) = Hostile::open(&a, &b, &m, MIN_WINDOW, MIN_WINDOW).await;
    h.send(vec![st::data_element(Bytes::from(vec![1u8; 1000]))])
        .await;
    h.send(vec![st::data_element(Bytes::from(vec![
        2u8;
        MIN_WINDOW as usize
    ]))])
    .await;
    // The server resets the stream and tells the hostile peer.
    h.recv_until(|it| matches!(it, st::Item::Reset(ResetCode::Protocol)))
        .await;
    let mut server = server;
    let mut buf = vec![0u8; 4096];
    let e = server.read(&mut buf).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    let s = server.stream_stats().unwrap();
    assert_eq!(s.violations, 1);
    // Further data is refused and counted; other users are fine.
    h.send(vec![st::data_element(Bytes::from_static(b"more"))])
        .await;
    other_socket_works(&a, &b).await;
    assert_eq!(server.stream_stats().unwrap().refused_after_reset, 1);
    assert!(b.is_connected_to(&a.peer_id()), "connection kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_after_fin_is_refused_and_reset_fails_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, m) = pair(&dir, true).await;
    let (server, h) = Hostile::open(&a, &b, &m, MIN_WINDOW, MIN_WINDOW).await;
    h.send(vec![
        st::data_element(Bytes::from_static(b"0123456789")),
        st::fin_element(10),
    ])
    .await;
    let mut server = server;
    let mut got = Vec::new();
    server.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"0123456789");
    h.send(vec![st::data_element(Bytes::from_static(b"late"))])
        .await;
    other_socket_works(&a, &b).await;
    let s = server.stream_stats().unwrap();
    assert_eq!(s.refused_after_fin, 1);
    assert_eq!(s.violations, 1, "data after FIN resets the stream");

    // A reset while the server waits in a read fails it: ConnectionReset.
    let (server, h) = Hostile::open(&a, &b, &m, MIN_WINDOW, MIN_WINDOW).await;
    let mut server = server;
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 16];
        server.read(&mut buf).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let to = h.to.clone();
    h.messenger
        .send(
            PIPE_SERVICE,
            Some(&to),
            Message::new().with(st::reset_element(ResetCode::Abort)),
        )
        .await
        .unwrap();
    let r = tokio::time::timeout(WAIT, reader).await.unwrap().unwrap();
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset);
}

/// A TCP forwarder to `target`; sending on the returned channel (or
/// dropping it) closes both sides.
async fn forwarder(
    target: std::net::SocketAddr,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut down, _) = l.accept().await.unwrap();
        let mut up = tokio::net::TcpStream::connect(target).await.unwrap();
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
            _ = rx => {}
        }
    });
    (addr, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_and_closed_connection_surface_as_connection_reset() {
    let dir = tempfile::tempdir().unwrap();
    let a = peer(&dir, "a", true, true).await;
    let b = peer(&dir, "b", false, true).await;
    let (via, cut) = forwarder(a.local_addr().unwrap()).await;
    let m = b.connect(via).await.unwrap();
    assert!(m.wait_compact(WAIT).await);
    // abort(): the peer's reads fail.
    let ad = adv("abort");
    let mut server = JxtaServerSocket::bind(&a, &ad, SocketConfig::default()).unwrap();
    let (got_tx, got_rx) = tokio::sync::oneshot::channel::<()>();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"hi");
        got_tx.send(()).unwrap();
        let e = s.read(&mut buf).await.unwrap_err();
        (e.kind(), server)
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    assert_eq!(c.mode(), SocketMode::Stream);
    c.write_all(b"hi").await.unwrap();
    c.flush().await.unwrap();
    tokio::time::timeout(WAIT, got_rx).await.unwrap().unwrap();
    c.abort();
    let (kind, mut server) = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
    assert_eq!(kind, std::io::ErrorKind::ConnectionReset);

    // The connection closing fails a blocked read and later writes with
    // ConnectionReset on both ends: never a silent end of stream.
    let (got_tx, got_rx) = tokio::sync::oneshot::channel::<()>();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        assert_eq!(s.mode(), SocketMode::Stream);
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(n, 3);
        got_tx.send(()).unwrap();
        let e = s.read(&mut buf).await.unwrap_err();
        let w = s.write_all(b"after").await.unwrap_err();
        (e.kind(), w.kind())
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    c.write_all(b"abc").await.unwrap();
    c.flush().await.unwrap();
    tokio::time::timeout(WAIT, got_rx).await.unwrap().unwrap();
    cut.send(()).unwrap();
    let (r, w) = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
    assert_eq!(r, std::io::ErrorKind::ConnectionReset);
    assert_eq!(w, std::io::ErrorKind::ConnectionReset);
    let mut buf = [0u8; 4];
    let e = tokio::time::timeout(WAIT, c.read(&mut buf))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
}

/// A Juxta server from before stream frames: its set-up response accepts
/// stream mode but announces no frame number (played here by hand on A's
/// pipes). The client then sends its data as data messages (which such a
/// server reads), announces no number of its own, and reads the server's
/// data messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_stream_frames_gets_and_sends_data_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _m) = pair(&dir, true).await;
    let ad = adv("old-server");
    let mut listening = a.pipes().create_input_pipe(&ad).unwrap();
    let local = adv("old-server-socket");
    let mut input = a.pipes().create_input_pipe(&local).unwrap();
    let (pipes, server_id, ad2) = (b.pipes(), a.peer_id(), ad.clone());
    let client = tokio::spawn(async move {
        let mut c = JxtaSocket::connect(&pipes, &ad2, server_id, SocketConfig::default())
            .await
            .unwrap();
        assert_eq!(c.mode(), SocketMode::Stream);
        assert!(
            !c.sends_stream_frames(),
            "no frames to a server that announced none"
        );
        c.write_all(&pattern(70_000, 1)).await.unwrap();
        c.write_all(b"!").await.unwrap();
        c.flush().await.unwrap();
        let mut back = vec![0u8; 5000];
        c.read_exact(&mut back).await.unwrap();
        assert!(back == pattern(5000, 2), "client got corrupted data");
        c
    });
    // The request, answered as a server before stream frames would.
    let req = tokio::time::timeout(WAIT, listening.recv())
        .await
        .unwrap()
        .unwrap();
    let req = ConnectRequest::from_message(&req.message).unwrap();
    let me = PeerAdvertisement {
        peer_id: a.peer_id(),
        group_id: PeerGroupId::NET,
        name: "old".into(),
        desc: None,
        route: None,
    };
    let mut resp = ConnectResponse {
        kind: req.kind,
        rem_pipe: local.clone(),
        rem_peer: me,
        reliable: Some(true),
        encrypt: Some(false),
    }
    .to_message();
    resp.push(st::offer_element(st::DEFAULT_WINDOW));
    let to_b = a.messenger(&b.peer_id()).unwrap();
    let client_pipe = req.req_pipe.id.to_string();
    to_b.send(PIPE_SERVICE, Some(&client_pipe), resp)
        .await
        .unwrap();
    // Everything the client sends comes as stream messages: data elements,
    // no frame number.
    let mut got = Vec::new();
    while got.len() < 70_001 {
        let m = tokio::time::timeout(WAIT, input.recv())
            .await
            .expect("client's data message")
            .unwrap();
        for it in st::items(&m.message) {
            match it.unwrap() {
                st::Item::Data(d) => got.extend_from_slice(&d),
                st::Item::Frames(n) => panic!("client announced frames {n} to an old server"),
                _ => {}
            }
        }
    }
    let mut want = pattern(70_000, 1);
    want.push(b'!');
    assert!(got == want, "server got corrupted data");
    let data = Bytes::from(pattern(5000, 2));
    to_b.send(
        PIPE_SERVICE,
        Some(&client_pipe),
        Message::new().with(st::data_element(data)),
    )
    .await
    .unwrap();
    let c = tokio::time::timeout(WAIT, client).await.unwrap().unwrap();
    assert_eq!(c.stream_stats().unwrap().violations, 0);
}

/// Stream frames between two Juxta peers: both sockets of a pair send
/// frames, the bytes arrive in order whatever the write sizes (frames the
/// kernel takes only in part included), and closing the sockets frees
/// their numbers (a frame for a number no socket holds is counted, never
/// delivered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_frames_carry_writes_of_every_size_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _m) = pair(&dir, true).await;
    let ad = adv("frames");
    let mut server = JxtaServerSocket::bind(&a, &ad, SocketConfig::default()).unwrap();
    let sizes: Vec<usize> = vec![1, 2, 100, 4096, 4097, 65_536, 300_000, 4 << 20, 3, 9 << 20];
    let total: usize = sizes.iter().sum();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut got = Vec::with_capacity(total);
        s.read_to_end(&mut got).await.unwrap();
        assert!(s.sends_stream_frames());
        // Echo a digest, in frames.
        s.write_all(&Sha256::digest(&got)).await.unwrap();
        s.shutdown().await.unwrap();
        (got.len(), s.stream_stats().unwrap())
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    assert!(c.sends_stream_frames());
    let mut want = Sha256::new();
    for (i, &n) in sizes.iter().enumerate() {
        let chunk = pattern(n, i as u8);
        want.update(&chunk);
        c.write_all(&chunk).await.unwrap();
    }
    c.shutdown().await.unwrap();
    let mut digest = Vec::new();
    tokio::time::timeout(WAIT, c.read_to_end(&mut digest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(digest, want.finalize().to_vec());
    let (n, stats) = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
    assert_eq!(n, total);
    assert_eq!(stats.violations, 0);
    let before = a.stats().unknown_pipe;
    assert_eq!(before, 0, "every frame found its socket");
}
