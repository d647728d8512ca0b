//! Liveness under hostile peers: one peer is attacked by 200 connections
//! from distinct loopback addresses (127.0.0.2 and up), mixing
//!
//! - connect-and-silent (no welcome at all),
//! - a welcome line trickled one byte at a time (slowloris on the welcome),
//! - a welcome and then nothing,
//! - a welcome and a compact-handshake offer, and then nothing,
//! - a valid message, then a frame trickled one byte at a time (slowloris),
//! - non-readers: pipe-resolver queries whose answers they never read,
//!
//! while an honest peer pair keeps exchanging 1-byte endpoint messages and
//! the attacked peer's resolver keeps answering. Checked: every honest
//! message is delivered, the resolver answers, and every hostile connection
//! is closed and counted in the counter of its timeout. The timeouts are
//! short in this configuration; nothing asserts how fast anything happens
//! (the hang guard only turns a hang into a failure).
//!
//! A second test checks the per-address limits.
//!
//! The honest round-trip time without and with the hostile connections is
//! printed (not asserted).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use juxta::{Listener, Messenger, Peer, PeerConfig};
use juxta_proto::advertisement::{AdvKind, PipeType};
use juxta_proto::endpoint::{mangle, ServiceAddress, NET_GROUP_UNIQUE};
use juxta_proto::id::PipeId;
use juxta_proto::identity::Identity;
use juxta_proto::message::{Element, Message};
use juxta_proto::pipe::binding::{PipeResolverMsg, PIPE_RESOLVER_HANDLER};
use juxta_proto::resolver::{query_queue, ResolverQuery, RESOLVER_SERVICE};
use juxta_proto::wire::connection::{ConnectionConfig, Outbound, Role};
use juxta_proto::wire::welcome::Welcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Only a guard against hangs; no test asserts on how fast anything is.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The attacked peer's timeouts in the 200-connection test.
const T: Duration = Duration::from_secs(10);

const NO_WELCOME: usize = 40;
const WELCOME_TRICKLE: usize = 40;
const WELCOME_SILENT: usize = 20;
const OFFER_SILENT: usize = 20;
const FRAME_TRICKLE: usize = 40;
const NON_READER: usize = 40;
const HOSTILE: usize =
    NO_WELCOME + WELCOME_TRICKLE + WELCOME_SILENT + OFFER_SILENT + FRAME_TRICKLE + NON_READER;
/// Queries each non-reader sends (their answers overflow the socket
/// buffers and the connection's service queue).
const QUERIES: usize = 150;
/// Pause between two trickled bytes.
const TRICKLE: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NoWelcome,
    WelcomeTrickle,
    WelcomeSilent,
    OfferSilent,
    FrameTrickle,
    NonReader,
}

fn kind_of(i: usize) -> Kind {
    let bounds = [
        (NO_WELCOME, Kind::NoWelcome),
        (WELCOME_TRICKLE, Kind::WelcomeTrickle),
        (WELCOME_SILENT, Kind::WelcomeSilent),
        (OFFER_SILENT, Kind::OfferSilent),
        (FRAME_TRICKLE, Kind::FrameTrickle),
        (NON_READER, Kind::NonReader),
    ];
    let mut i = i;
    for (n, k) in bounds {
        if i < n {
            return k;
        }
        i -= n;
    }
    unreachable!("index beyond HOSTILE")
}

fn identity(name: &str) -> Arc<Identity> {
    Arc::new(Identity::generate(&mut rand::thread_rng(), 1024, name, 1_700_000_000).unwrap())
}

/// A TCP connection to `to` from the loopback address `from` (bound before
/// connecting), with a small receive buffer if `rcvbuf` is set.
async fn connect_from(from: Ipv4Addr, to: SocketAddr, rcvbuf: Option<usize>) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::V4(SocketAddrV4::new(from, 0)).into())
        .unwrap();
    if let Some(b) = rcvbuf {
        s.set_recv_buffer_size(b).unwrap();
    }
    s.set_nonblocking(true).unwrap();
    let sock = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(s));
    tokio::time::timeout(HANG_GUARD, sock.connect(to))
        .await
        .expect("connect hung")
        .unwrap()
}

/// 127.0.1.2, 127.0.1.3, ...: one address per hostile connection, none of
/// them the honest peers' 127.0.0.1.
fn hostile_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1, u8::try_from(i + 2).unwrap())
}

fn welcome_line(server: SocketAddr, id: juxta_proto::id::PeerId) -> Vec<u8> {
    Welcome::new(format!("tcp://{server}"), "tcp://127.0.0.1:1".into(), id)
        .to_line()
        .into_bytes()
}

/// Reads the server's welcome line (it sends it first, unprompted); `None`
/// if the connection closed before one arrived.
async fn read_welcome(s: &mut TcpStream, rx: &mut BytesMut) -> Option<Welcome> {
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            if let Some((w, used)) = Welcome::parse(rx).unwrap() {
                let _ = rx.split_to(used);
                return Some(w);
            }
            match s.read_buf(rx).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("no welcome and no close from the peer (hang guard)")
}

/// Reads until the server closes the connection; panics at the hang guard.
async fn wait_closed(s: &mut TcpStream) {
    let r = tokio::time::timeout(HANG_GUARD, async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(r.is_ok(), "the peer did not close a hostile connection");
}

/// Writes `bytes` one at a time, `TRICKLE` apart, until the server closes
/// the connection (or all are sent, then waits for the close).
async fn trickle(s: TcpStream, bytes: Vec<u8>) {
    let (mut rd, mut wr) = s.into_split();
    let writer = async move {
        for b in bytes {
            if wr.write_all(&[b]).await.is_err() {
                break;
            }
            tokio::time::sleep(TRICKLE).await;
        }
        std::future::pending::<()>().await
    };
    let closed = async move {
        let mut buf = vec![0u8; 4096];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let r = tokio::time::timeout(HANG_GUARD, async {
        tokio::select! {
            _ = writer => {}
            _ = closed => {}
        }
    })
    .await;
    assert!(r.is_ok(), "the peer did not close a trickling connection");
}

/// A JXTA-framing outbound half for `me` toward the server whose welcome
/// is `w`; `compact` also yields the handshake offer.
fn outbound(
    me: &Arc<Identity>,
    w: Welcome,
    compact: bool,
) -> (
    Outbound,
    Option<juxta_proto::message::codec::EncodedMessage>,
) {
    let cfg = ConnectionConfig {
        compact,
        ..ConnectionConfig::default()
    };
    let mut out = Outbound::new(cfg, Role::Initiator, me.clone());
    let offer = out.on_remote_welcome(w, &mut rand::thread_rng()).unwrap();
    (out, offer)
}

fn probe_to() -> ServiceAddress {
    mangle(NET_GROUP_UNIQUE, &ServiceAddress::new("probe", Some("in")))
}

/// A pipe-resolver query directed at `target` (which answers it, "not
/// found"), from `me`.
fn pipe_query(me: &Identity, target: juxta_proto::id::PeerId, id: i32) -> Message {
    let q = PipeResolverMsg::Query {
        pipe_id: PipeId::new_random(),
        pipe_type: PipeType::Unicast,
        peers: vec![target],
    };
    let rq = ResolverQuery {
        handler: PIPE_RESOLVER_HANDLER.to_string(),
        query_id: id,
        hop_count: 0,
        src_peer: *me.peer_id(),
        query: q.to_xml(),
        src_route: None,
    };
    Message::new().with(rq.to_element(NET_GROUP_UNIQUE))
}

/// A non-reader's `QUERIES` queries, framed and signed in advance (so the
/// attack itself spends no CPU of the test's runtime on RSA).
fn non_reader_queries(
    me: &Arc<Identity>,
    server: SocketAddr,
    target: juxta_proto::id::PeerId,
) -> Vec<u8> {
    let w = Welcome::new(
        "tcp://127.0.0.1:1".into(),
        format!("tcp://{server}"),
        target,
    );
    let (mut out, _) = outbound(me, w, false);
    let to = mangle(
        NET_GROUP_UNIQUE,
        &ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(NET_GROUP_UNIQUE))),
    );
    let mut wire = Vec::new();
    for q in 0..QUERIES {
        let m = pipe_query(me, target, q as i32 + 1);
        wire.extend_from_slice(&out.encode(&to, m).unwrap().to_bytes());
    }
    wire
}

/// One hostile connection of kind `k` from `ip`; returns once the server
/// closed it (non-readers return their socket, unread, instead).
async fn hostile(
    k: Kind,
    ip: Ipv4Addr,
    server: SocketAddr,
    me: Arc<Identity>,
    queries: Vec<u8>,
) -> Option<TcpStream> {
    let rcvbuf = (k == Kind::NonReader).then_some(4096);
    let mut s = connect_from(ip, server, rcvbuf).await;
    match k {
        Kind::NoWelcome => {
            wait_closed(&mut s).await;
            None
        }
        Kind::WelcomeTrickle => {
            trickle(s, welcome_line(server, *me.peer_id())).await;
            None
        }
        Kind::WelcomeSilent => {
            s.write_all(&welcome_line(server, *me.peer_id()))
                .await
                .unwrap();
            wait_closed(&mut s).await;
            None
        }
        Kind::OfferSilent => {
            s.write_all(&welcome_line(server, *me.peer_id()))
                .await
                .unwrap();
            let w = read_welcome(&mut s, &mut BytesMut::new()).await.unwrap();
            let (_, offer) = outbound(&me, w, true);
            s.write_all(&offer.expect("an offer").to_bytes())
                .await
                .unwrap();
            wait_closed(&mut s).await;
            None
        }
        Kind::FrameTrickle => {
            s.write_all(&welcome_line(server, *me.peer_id()))
                .await
                .unwrap();
            let w = read_welcome(&mut s, &mut BytesMut::new()).await.unwrap();
            let (mut out, _) = outbound(&me, w, false);
            let first = out
                .encode(
                    &probe_to(),
                    Message::new().with(Element::text("", "t", "x")),
                )
                .unwrap()
                .to_bytes();
            s.write_all(&first).await.unwrap();
            let second = out
                .encode(
                    &probe_to(),
                    Message::new().with(Element::text("", "t", "y")),
                )
                .unwrap()
                .to_bytes();
            trickle(s, second.to_vec()).await;
            None
        }
        Kind::NonReader => {
            s.write_all(&welcome_line(server, *me.peer_id()))
                .await
                .unwrap();
            // The server's welcome is read; nothing after it ever is.
            read_welcome(&mut s, &mut BytesMut::new()).await.unwrap();
            let _ = s.write_all(&queries).await;
            Some(s)
        }
    }
}

/// `count` ping-pongs of 1-byte messages from `c` to the echo service and
/// back; returns the round-trip times. Every ping must come back, in order.
async fn pingpong(
    to: &Messenger,
    back: &mut Listener,
    seq: &mut u64,
    count: usize,
) -> Vec<Duration> {
    let mut rtts = Vec::with_capacity(count);
    for _ in 0..count {
        *seq += 1;
        let m = Message::new().with(Element::bytes("", "b", vec![(*seq % 251) as u8]));
        let t0 = Instant::now();
        to.send("echo", Some("in"), m.clone())
            .await
            .expect("honest send failed");
        let got = tokio::time::timeout(HANG_GUARD, back.recv())
            .await
            .expect("honest echo not delivered (hang guard)")
            .expect("peer gone");
        rtts.push(t0.elapsed());
        assert_eq!(got.message, m, "honest message {seq} came back changed");
    }
    rtts
}

/// An echo service on `s`: what arrives on `echo/in` goes back to its
/// sender's `echo/back`.
fn echo_service(s: &Arc<Peer>) -> tokio::task::JoinHandle<()> {
    let mut inbox = s.listen("echo", Some("in")).unwrap();
    let echo_peer = s.clone();
    tokio::spawn(async move {
        while let Some(d) = inbox.recv().await {
            let from = d.from.expect("echo: sender known");
            let m = echo_peer.messenger(&from).expect("echo: route back");
            m.send("echo", Some("back"), d.message)
                .await
                .expect("echo: send back");
        }
    })
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn start(dir: &std::path::Path, name: &str, tweak: impl FnOnce(&mut PeerConfig)) -> Peer {
    let mut cfg = PeerConfig::new(dir.join(name)).listen("127.0.0.1:0".parse().unwrap());
    cfg.key_bits = 1024;
    tweak(&mut cfg);
    Peer::start(cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_hostile_connections_do_not_stall_an_honest_pair() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(
        start(dir.path(), "server", |c| {
            c.welcome_timeout = T;
            c.frame_timeout = T;
            c.first_message_timeout = T;
            c.write_timeout = T;
            c.service_queue = 16;
            // Fixed socket buffers: on loopback Linux would grow the send
            // buffer to megabytes, and the non-readers would need that many
            // answers to fill it.
            c.socket_buffer = Some(32 * 1024);
        })
        .await,
    );
    let c = start(dir.path(), "client", |_| {}).await;
    let server = s.local_addr().unwrap();

    // Echo service on the attacked peer.
    let echo = echo_service(&s);
    let mut back = c.listen("echo", Some("back")).unwrap();
    let to_s = c.connect(server).await.unwrap();
    assert!(to_s.wait_compact(HANG_GUARD).await);
    let mut seq = 0u64;
    pingpong(&to_s, &mut back, &mut seq, 200).await; // warm-up
    let mut unloaded = pingpong(&to_s, &mut back, &mut seq, 2000).await;

    // Identities for the hostile connections that speak JXTA framing (each
    // non-reader its own, so the server routes each one's answers to it).
    let shared = identity("hostile");
    let target = s.peer_id();
    let gen: Vec<_> = (0..NON_READER)
        .map(|i| {
            tokio::task::spawn_blocking(move || {
                let me = identity(&format!("nonreader-{i}"));
                let q = non_reader_queries(&me, server, target);
                (me, q)
            })
        })
        .collect();
    let mut readers_ids = Vec::new();
    for g in gen {
        readers_ids.push(g.await.unwrap());
    }

    // The attack.
    let attack_start = Instant::now();
    let mut tasks = Vec::new();
    let mut nr = 0;
    for i in 0..HOSTILE {
        let k = kind_of(i);
        let (me, queries) = if k == Kind::NonReader {
            nr += 1;
            readers_ids[nr - 1].clone()
        } else {
            (shared.clone(), Vec::new())
        };
        tasks.push(tokio::spawn(hostile(k, hostile_ip(i), server, me, queries)));
    }
    // Honest traffic while the hostile connections are set up and the
    // non-readers send their queries (the others are connected by then
    // too: all started together).
    let mut flooded = Vec::new();
    let open_at_measure = {
        let stats = || s.stats();
        let t = tokio::time::timeout(HANG_GUARD, async {
            while !tasks
                .iter()
                .enumerate()
                .all(|(i, t)| kind_of(i) != Kind::NonReader || t.is_finished())
            {
                flooded.extend(pingpong(&to_s, &mut back, &mut seq, 10).await);
            }
        })
        .await;
        assert!(t.is_ok(), "non-readers could not send their queries");
        let closed = stats().handshake_timeouts
            + stats().frame_timeouts
            + stats().first_message_timeouts
            + stats().write_timeouts;
        HOSTILE as u64 - closed
    };
    let setup = attack_start.elapsed();
    let mut loaded = pingpong(&to_s, &mut back, &mut seq, 2000).await;
    let loaded_span = attack_start.elapsed();

    // The attacked peer's resolver still answers (a discovery query for its
    // own peer advertisement).
    let advs = c
        .discovery()
        .get_remote(AdvKind::Peer, None, None, 1, Some(target), HANG_GUARD)
        .await
        .expect("discovery query");
    assert!(
        !advs.is_empty(),
        "the attacked peer's resolver did not answer"
    );

    // Honest traffic goes on while the hostile connections are closed.
    let t = tokio::time::timeout(HANG_GUARD, async {
        while !tasks.iter().all(|t| t.is_finished()) {
            pingpong(&to_s, &mut back, &mut seq, 10).await;
        }
    })
    .await;
    assert!(t.is_ok(), "hostile connections were not all closed");
    let mut non_readers = Vec::new();
    for t in tasks {
        if let Some(sock) = t.await.expect("hostile task panicked") {
            non_readers.push(sock);
        }
    }
    // Non-readers: the server closed them after its write timeout (they
    // never read; draining now finds the end of the stream).
    let stats = || s.stats();
    let t = tokio::time::timeout(HANG_GUARD, async {
        while stats().write_timeouts < NON_READER as u64 {
            pingpong(&to_s, &mut back, &mut seq, 10).await;
        }
    })
    .await;
    assert!(
        t.is_ok(),
        "not every non-reader was closed for its write timeout: {:?}",
        stats()
    );
    assert_eq!(non_readers.len(), NON_READER);
    for sock in &mut non_readers {
        wait_closed(sock).await;
    }

    assert_eq!(
        stats().handshake_timeouts,
        (NO_WELCOME + WELCOME_TRICKLE + OFFER_SILENT) as u64,
        "welcome and handshake timeouts"
    );
    assert_eq!(stats().first_message_timeouts, WELCOME_SILENT as u64);
    assert_eq!(stats().frame_timeouts, FRAME_TRICKLE as u64);
    assert_eq!(stats().write_timeouts, NON_READER as u64);
    assert_eq!(stats().idle_timeouts, 0);
    assert!(stats().connections_failed >= HOSTILE as u64);
    assert_eq!(stats().addr_refused + stats().addr_pending_refused, 0);
    // The honest connection survived all of it, and still works.
    assert!(c.is_connected_to(&target));
    pingpong(&to_s, &mut back, &mut seq, 100).await;
    let advs = c
        .discovery()
        .get_remote(AdvKind::Peer, None, None, 1, Some(target), HANG_GUARD)
        .await
        .expect("discovery query after the attack");
    assert!(!advs.is_empty());

    let (mu, ml) = (median(&mut unloaded), median(&mut loaded));
    let mf = median(&mut flooded);
    println!(
        "honest 1 B endpoint RTT: unloaded median {mu:?} (2000 round trips); \
         during the attack's set-up (non-readers flooding queries, {} round trips in {setup:?}) \
         median {mf:?}, ratio {:.2}; then with {open_at_measure} of the {HOSTILE} hostile \
         connections open (2000 round trips, done {loaded_span:?} after the attack began) \
         median {ml:?}, ratio {:.2}; {seq} honest messages echoed; service messages refused: {}",
        flooded.len(),
        mf.as_secs_f64() / mu.as_secs_f64(),
        ml.as_secs_f64() / mu.as_secs_f64(),
        stats().service_refused,
    );
    echo.abort();
}

#[tokio::test]
async fn per_address_limits_refuse_at_accept_and_other_addresses_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), "server", |c| {
        c.max_connections_per_addr = 4;
        c.max_pending_per_addr = 2;
        c.welcome_timeout = HANG_GUARD;
        c.first_message_timeout = HANG_GUARD;
    })
    .await;
    let server = s.local_addr().unwrap();
    let stats = || s.stats();
    let a = Ipv4Addr::new(127, 0, 3, 50);
    let b = Ipv4Addr::new(127, 0, 3, 51);
    let me = identity("limits");
    let mut inbox = s.listen("probe", Some("in")).unwrap();

    // Two pending (no welcome sent) connections from `a` are accepted ...
    let mut pending = Vec::new();
    for _ in 0..2 {
        let mut c = connect_from(a, server, None).await;
        assert!(read_welcome(&mut c, &mut BytesMut::new()).await.is_some());
        pending.push(c);
    }
    // ... a third pending one is refused at accept, and counted.
    let mut c = connect_from(a, server, None).await;
    assert!(
        read_welcome(&mut c, &mut BytesMut::new()).await.is_none(),
        "a connection over the pending limit got a welcome"
    );
    assert_eq!(stats().addr_pending_refused, 1);
    assert_eq!(stats().addr_refused, 0);

    // Established connections from `a`, up to the limit of 4 in all.
    let mut established = Vec::new();
    for p in pending.iter_mut() {
        p.write_all(&welcome_line(server, *me.peer_id()))
            .await
            .unwrap();
    }
    for _ in 0..2 {
        let mut c = connect_from(a, server, None).await;
        c.write_all(&welcome_line(server, *me.peer_id()))
            .await
            .unwrap();
        let w = read_welcome(&mut c, &mut BytesMut::new()).await.unwrap();
        // A delivered message proves the connection is established.
        let (mut out, _) = outbound(&me, w, false);
        let wire = out
            .encode(
                &probe_to(),
                Message::new().with(Element::text("", "t", "x")),
            )
            .unwrap()
            .to_bytes();
        c.write_all(&wire).await.unwrap();
        tokio::time::timeout(HANG_GUARD, inbox.recv())
            .await
            .expect("message from an admitted connection not delivered")
            .unwrap();
        established.push(c);
    }
    // The fifth connection from `a` is refused at accept, and counted.
    let mut c = connect_from(a, server, None).await;
    assert!(
        read_welcome(&mut c, &mut BytesMut::new()).await.is_none(),
        "a connection over the per-address limit got a welcome"
    );
    assert_eq!(stats().addr_refused, 1);
    assert_eq!(stats().addr_pending_refused, 1);

    // Another address is still served ...
    let mut other = connect_from(b, server, None).await;
    assert!(read_welcome(&mut other, &mut BytesMut::new())
        .await
        .is_some());
    // ... and so is a Juxta peer from 127.0.0.1.
    let client = start(dir.path(), "client", |_| {}).await;
    let to_s = client.connect(server).await.unwrap();
    to_s.send(
        "probe",
        Some("in"),
        Message::new().with(Element::text("", "t", "ok")),
    )
    .await
    .unwrap();
    let got = tokio::time::timeout(HANG_GUARD, inbox.recv())
        .await
        .expect("honest message not delivered")
        .unwrap();
    assert_eq!(got.from, Some(client.peer_id()));

    // A closed connection gives its place back: `a` is admitted again once
    // the server has noticed the close.
    drop(established.pop());
    let t = tokio::time::timeout(HANG_GUARD, async {
        loop {
            let mut c = connect_from(a, server, None).await;
            if read_welcome(&mut c, &mut BytesMut::new()).await.is_some() {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(t.is_ok(), "the address was never admitted again");
    assert!(stats().addr_refused >= 1);
    assert_eq!(stats().connections_refused, 0);
}

fn vm_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Connections opened per flooding address.
const FLOOD_PER_ADDR: usize = 100;
/// Flooding addresses (127.0.2.2 and up).
const FLOOD_ADDRS: usize = 100;

/// A connection flood: 100 loopback addresses each open 100 connections
/// as fast as they can, one at a time, half of them closing at once and
/// half after sending a few bytes of garbage instead of a welcome
/// (10,000 attempts), while an honest pair keeps exchanging 1-byte
/// messages. Checked: every honest message comes back, every flooding
/// connection is accounted for (closed by its client or refused/closed by
/// the server), the attacked peer still accepts and serves a new honest
/// connection, and the process's resident memory grows by less than
/// 64 MiB. The honest round trip with and without the flood is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_from_100_addresses_leaves_memory_bounded_and_honest_peers_served() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(start(dir.path(), "server", |c| c.welcome_timeout = T).await);
    let c = start(dir.path(), "client", |_| {}).await;
    let server = s.local_addr().unwrap();
    let echo = echo_service(&s);
    let mut back = c.listen("echo", Some("back")).unwrap();
    let to_s = c.connect(server).await.unwrap();
    let mut seq = 0u64;
    pingpong(&to_s, &mut back, &mut seq, 200).await;
    let mut unloaded = pingpong(&to_s, &mut back, &mut seq, 2000).await;
    let rss_before = vm_rss_kib();

    let start_flood = Instant::now();
    let flooders: Vec<_> = (0..FLOOD_ADDRS)
        .map(|i| {
            let ip = Ipv4Addr::new(127, 0, 2, u8::try_from(i + 2).unwrap());
            tokio::spawn(async move {
                let mut opened = 0usize;
                for k in 0..FLOOD_PER_ADDR {
                    let sock =
                        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                            .unwrap();
                    sock.bind(&SocketAddr::V4(SocketAddrV4::new(ip, 0)).into())
                        .unwrap();
                    // No TIME_WAIT pile-up on the flooding side.
                    sock.set_linger(Some(Duration::ZERO)).unwrap();
                    sock.set_nonblocking(true).unwrap();
                    let t = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(sock));
                    let Ok(Ok(mut st)) = tokio::time::timeout(HANG_GUARD, t.connect(server)).await
                    else {
                        continue;
                    };
                    opened += 1;
                    if k % 2 == 1 {
                        let _ = st.write_all(b"GET / HTTP/1.0\r\n\r\n\0\xff").await;
                    }
                    drop(st);
                }
                opened
            })
        })
        .collect();
    let mut flooded = Vec::new();
    while !flooders.iter().all(|f| f.is_finished()) {
        flooded.extend(pingpong(&to_s, &mut back, &mut seq, 5).await);
    }
    let mut opened = 0;
    for f in flooders {
        opened += f.await.unwrap();
    }
    let flood_time = start_flood.elapsed();
    let rss_after = vm_rss_kib();

    // A new honest peer is still accepted and served.
    let d = start(dir.path(), "late", |_| {}).await;
    let mut late_back = d.listen("echo", Some("back")).unwrap();
    let to_s2 = d.connect(server).await.unwrap();
    let mut seq2 = 0u64;
    pingpong(&to_s2, &mut late_back, &mut seq2, 10).await;
    let mut after = pingpong(&to_s, &mut back, &mut seq, 2000).await;

    let stats = || s.stats();
    assert!(opened > 0, "no flooding connection was opened");
    assert!(
        rss_after.saturating_sub(rss_before) < 64 * 1024,
        "resident memory grew from {rss_before} KiB to {rss_after} KiB during the flood"
    );
    let (mu, mf, ma) = (
        median(&mut unloaded),
        median(&mut flooded),
        median(&mut after),
    );
    println!(
        "connection flood: {opened} connections from {FLOOD_ADDRS} addresses in {flood_time:?} \
         ({:.0}/s); honest 1 B RTT unloaded median {mu:?}, during the flood {mf:?} \
         ({} round trips, ratio {:.2}), after {ma:?}; RSS {rss_before} -> {rss_after} KiB; \
         refused at accept: {} per address, {} pending; failed: {}",
        opened as f64 / flood_time.as_secs_f64(),
        flooded.len(),
        mf.as_secs_f64() / mu.as_secs_f64(),
        stats().addr_refused,
        stats().addr_pending_refused,
        stats().connections_failed,
    );
    echo.abort();
}
