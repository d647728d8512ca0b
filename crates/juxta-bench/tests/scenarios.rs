//! End-to-end smoke tests: every scenario with tiny parameters, responders
//! on threads of the test process. They check that rows come out with sane
//! fields (no timing thresholds: this is not a performance test).

use juxta_bench::composition::{self, CompositionOptions};
use juxta_bench::layers::{Host, Layer};
use juxta_bench::pingpong::{self, PingPongOptions};
use juxta_bench::senders::{self, SendersOptions};
use juxta_bench::throughput::{self, Pattern, ThroughputOptions};
use juxta_bench::util::Pin;

mod prereq;

fn quiet(_: &str) {}

#[tokio::test]
async fn pingpong_new_layers() {
    let opts = PingPongOptions {
        layers: vec![
            Layer::UnicastPipe,
            Layer::SecurePipe,
            Layer::BidiPipe,
            Layer::Socket,
            Layer::Propagate,
        ],
        sizes: vec![1, 5000],
        receivers: vec![1, 3],
        pin: Pin::None,
        warmup: 10,
        runs: 2,
        pairs: 5,
        key_bits: 1024,
        net: Default::default(),
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    // tcp + 4 layers + propagate x2, per size.
    assert_eq!(rows.len(), 7 * 2);
    for r in &rows {
        assert_eq!(r.scenario, "pingpong");
        assert!(
            r.rtt_us_median > 0.0 && r.rtt_us_p99 >= r.rtt_us_median,
            "{r:?}"
        );
        assert!(r.bandwidth_mb_s > 0.0 && r.rtt_ratio_vs_tcp > 0.0, "{r:?}");
        assert!(r.wire_bytes as usize >= r.size, "{r:?}");
        // tcp is timed before each of the 6 other lanes in every run.
        let runs = if r.layer == "tcp" { 2 * 6 } else { 2 };
        assert_eq!(r.samples, runs * 5, "{r:?}");
        assert_eq!(r.receivers.is_some(), r.layer == "propagate", "{r:?}");
    }
    let get = |layer: &str, size: usize| {
        rows.iter()
            .find(|r| r.layer == layer && r.size == size)
            .unwrap()
    };
    assert_eq!(get("tcp", 1).rtt_ratio_vs_tcp, 1.0);
    // Counted by the kernel at the client's socket: tcp's 4-byte length
    // and 1-byte payload out, its 1-byte ack back, nothing else.
    assert_eq!(get("tcp", 1).wire_bytes, 5);
    assert_eq!(get("tcp", 1).wire_bytes_rtt, 6);
    assert_eq!(get("tcp", 5000).wire_bytes, 5004);
    for r in &rows {
        assert!(r.wire_bytes_rtt > r.wire_bytes, "{r:?}");
        assert_eq!(r.warmup, 10, "{r:?}");
    }
    assert_eq!(get("tcp", 1).implementation, "tcp");
    assert_eq!(get("unicast-pipe", 1).implementation, "juxta");
    // Steady state on a compact connection: the pipe is a small number.
    assert!(get("unicast-pipe", 1).wire_bytes < 100);
    let prop: Vec<_> = rows
        .iter()
        .filter(|r| r.layer == "propagate" && r.size == 1)
        .map(|r| r.receivers.unwrap())
        .collect();
    assert_eq!(prop, vec![1, 3]);
}

/// The relayed pipe lane: the client and the responder lease one relay
/// and neither listens, so every ping and ack passes the relay, each
/// carrying a router header the direct pipe does not.
#[tokio::test]
async fn relayed_pipe_lane_goes_through_its_relay() {
    let opts = PingPongOptions {
        layers: vec![Layer::UnicastPipe, Layer::RelayedPipe],
        sizes: vec![1, 5000],
        pin: Pin::None,
        warmup: 5,
        runs: 2,
        pairs: 5,
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    assert_eq!(rows.len(), 3 * 2, "{rows:?}");
    for size in [1, 5000] {
        let get = |layer: &str| {
            rows.iter()
                .find(|r| r.layer == layer && r.size == size)
                .unwrap_or_else(|| panic!("no {layer} row for {size}: {rows:?}"))
        };
        let (direct, relayed) = (get("unicast-pipe"), get("relayed-pipe"));
        assert_eq!(relayed.implementation, "juxta");
        assert_eq!(relayed.samples, 2 * 5, "{relayed:?}");
        assert!(relayed.rtt_us_median > 0.0, "{relayed:?}");
        // Counted at the client's connection, which goes to the relay: the
        // payload plus a router header on every ping, which the direct
        // pipe does not carry.
        assert!(relayed.wire_bytes as usize > size, "{relayed:?}");
        assert!(relayed.wire_bytes > direct.wire_bytes, "{rows:?}");
    }
}

/// The socket lane whose responder reads with `read_chunk`: pings larger
/// than one stream message (1 MiB) and of odd sizes are read exactly, so
/// every ping gets its one ack and the rows come out like `socket`'s.
#[tokio::test]
async fn socket_chunk_lane_reads_each_ping_exactly() {
    let opts = PingPongOptions {
        layers: vec![Layer::Socket, Layer::SocketChunk],
        sizes: vec![1, 70_001, (1 << 20) + 3],
        pin: Pin::None,
        warmup: 3,
        runs: 2,
        pairs: 3,
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    assert_eq!(rows.len(), 3 * 3, "{rows:?}");
    for size in [1, 70_001, (1 << 20) + 3] {
        let get = |layer: &str| {
            rows.iter()
                .find(|r| r.layer == layer && r.size == size)
                .unwrap_or_else(|| panic!("no {layer} row for {size}: {rows:?}"))
        };
        let (plain, chunk) = (get("socket"), get("socket-chunk"));
        assert_eq!(chunk.samples, 2 * 3, "{chunk:?}");
        assert!(
            chunk.rtt_us_median > 0.0 && chunk.bandwidth_mb_s > 0.0,
            "{chunk:?}"
        );
        // The same socket and framing on the wire: only the reading differs.
        assert_eq!(chunk.wire_bytes, plain.wire_bytes, "{rows:?}");
        assert!(chunk.wire_bytes as usize >= size, "{chunk:?}");
    }
}

/// The JXTA-framed layers Juxta is compared with JXSE on, with and without
/// CBJX: rows say which, and the signature shows in the counted bytes.
#[tokio::test]
async fn jxta_framed_layers_with_and_without_cbjx() {
    let opts = PingPongOptions {
        layers: vec![
            Layer::EndpointCompat,
            Layer::EndpointCompatNoCbjx,
            Layer::PipeCompat,
            Layer::PipeCompatNoCbjx,
            Layer::SocketCompatNoCbjx,
        ],
        sizes: vec![1],
        pin: Pin::None,
        warmup: 10,
        runs: 1,
        pairs: 5,
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    assert_eq!(rows.len(), 6);
    let get = |layer: &str| rows.iter().find(|r| r.layer == layer).unwrap();
    assert_eq!(get("tcp").cbjx, None);
    assert_eq!(get("endpoint-compat").cbjx, Some(true));
    assert_eq!(get("pipe-compat").cbjx, Some(true));
    assert_eq!(get("pipe-compat-nocbjx").cbjx, Some(false));
    assert_eq!(get("socket-compat-nocbjx").cbjx, Some(false));
    // A CBJX trailer (signature and certificate) per message.
    assert!(
        get("endpoint-compat-nocbjx").wire_bytes + 100 < get("endpoint-compat").wire_bytes,
        "{rows:?}"
    );
    assert!(
        get("pipe-compat-nocbjx").wire_bytes + 100 < get("pipe-compat").wire_bytes,
        "{rows:?}"
    );
}

/// UDP datagrams as de Souza measured: rows of their own `impl`, only for
/// payloads a datagram carries, the tcp lane still beside them.
#[tokio::test]
async fn udp_lane_up_to_64k() {
    let opts = PingPongOptions {
        layers: vec![Layer::Udp],
        sizes: vec![1, 5000, 100_000],
        pin: Pin::None,
        warmup: 10,
        runs: 1,
        pairs: 5,
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    let udp: Vec<_> = rows.iter().filter(|r| r.layer == "udp").collect();
    assert_eq!(udp.len(), 2, "{rows:?}");
    for r in &udp {
        assert_eq!(r.implementation, "udp");
        assert_eq!(r.wire_bytes, r.size as u64);
        assert_eq!(r.wire_bytes_rtt, r.size as u64 + 1);
        assert_eq!(r.samples, 5);
        assert!(r.rtt_ratio_vs_tcp > 0.0);
    }
    assert!(rows.iter().any(|r| r.layer == "tcp" && r.size == 100_000));
    assert!(!rows.iter().any(|r| r.layer == "udp" && r.size == 100_000));
}

/// ZeroMQ in the same harness: its own programs (built here with the C
/// compiler against libzmq), rows of its own `impl`, every sample, bytes
/// counted by the kernel at its client's socket.
#[tokio::test]
async fn zmq_lane_beside_tcp() {
    let have = std::process::Command::new("pkg-config")
        .args(["--exists", "libzmq"])
        .status()
        .is_ok_and(|s| s.success());
    if !prereq::require("libzmq (Debian: libzmq3-dev) and pkg-config", have)
        || !prereq::require("a C compiler `cc`", prereq::on_path(&["cc"]).is_some())
    {
        return;
    }
    let opts = PingPongOptions {
        layers: vec![Layer::ZmqReqRep],
        sizes: vec![1, 100_000],
        pin: Pin::None,
        warmup: 10,
        runs: 2,
        pairs: 5,
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    let zmq: Vec<_> = rows.iter().filter(|r| r.implementation == "zmq").collect();
    assert_eq!(zmq.len(), 2, "{rows:?}");
    for r in zmq {
        assert_eq!(r.layer, "tcp-req-rep");
        assert_eq!(r.samples, 10);
        assert!(r.rtt_us_median > 0.0 && r.rtt_ratio_vs_tcp > 0.0, "{r:?}");
        // ZMTP frames the payload: a few bytes more, counted at the socket.
        assert!(r.wire_bytes > r.size as u64, "{r:?}");
        assert!(r.wire_bytes < r.size as u64 + 64, "{r:?}");
    }
}

/// The other stacks in the throughput scenario: ZeroMQ (PUSH/PULL beside
/// its REQ/REP), rust-libp2p and Open MPI (TCP and shared memory) stream one-way
/// messages in the same loop as the `tcp` lane; every message sent is
/// counted by their responder; only smooth rows (no bursty ones).
#[tokio::test]
async fn stacks_in_throughput_beside_tcp() {
    let have_zmq = std::process::Command::new("pkg-config")
        .args(["--exists", "libzmq"])
        .status()
        .is_ok_and(|s| s.success());
    if !prereq::require("libzmq (Debian: libzmq3-dev) and pkg-config", have_zmq)
        || !prereq::require("a C compiler `cc`", prereq::on_path(&["cc"]).is_some())
        || !prereq::require(
            "Open MPI (Debian: openmpi-bin libopenmpi-dev)",
            prereq::on_path(&["mpicc"]).is_some() && prereq::on_path(&["mpirun"]).is_some(),
        )
        || !prereq::require(
            "cargo (the libp2p program is built with it)",
            std::env::var_os("CARGO").is_some() || prereq::on_path(&["cargo"]).is_some(),
        )
        || !prereq::require_ok(prereq::netns())
    {
        return;
    }
    use juxta_bench::stacks::Stack;
    let opts = ThroughputOptions {
        layers: vec![Layer::Tcp],
        sizes: vec![1, 70_000],
        patterns: vec![Pattern::Smooth, Pattern::Bursty],
        count: Some(200),
        bursts: 1,
        burst_len: 5,
        idle_ms: 1,
        warmup: 10,
        pin: Pin::None,
        stacks: Stack::ALL.to_vec(),
        ..ThroughputOptions::default()
    };
    let rows = throughput::run(&Host::Thread, &opts, quiet).await.unwrap();
    // tcp: 2 sizes x 2 patterns; each stack: 2 sizes x smooth.
    assert_eq!(rows.len(), 4 + Stack::ALL.len() * 2, "{rows:?}");
    for (implementation, layer) in [
        ("zmq", "tcp-push-pull"),
        ("libp2p", "tcp-noise-yamux"),
        ("libp2p", "quic"),
        ("mpi", "tcp"),
        ("mpi", "sm"),
    ] {
        let mine: Vec<_> = rows
            .iter()
            .filter(|r| r.implementation == implementation && r.layer == layer)
            .collect();
        assert_eq!(mine.len(), 2, "{implementation}/{layer}: {rows:?}");
        for r in mine {
            assert_eq!(r.pattern, Pattern::Smooth, "{r:?}");
            assert_eq!(r.loss_pct, 0.0, "{r:?}");
            assert!(r.msgs_per_s > 0.0, "{r:?}");
            assert!(
                (r.bandwidth_mb_s - r.msgs_per_s * r.size as f64 / 1e6).abs() < 1e-6,
                "{r:?}"
            );
        }
    }
}

/// rust-libp2p in the same harness: its program (a crate of its own built
/// here with cargo from its committed Cargo.lock), TCP + noise + yamux
/// with one stream kept open, rows of its own `impl`, every sample, bytes
/// counted by the kernel at its client's socket.
#[tokio::test]
async fn libp2p_lane_beside_tcp() {
    if !prereq::require(
        "cargo (the libp2p program is built with it)",
        std::env::var_os("CARGO").is_some() || prereq::on_path(&["cargo"]).is_some(),
    ) {
        return;
    }
    let opts = PingPongOptions {
        layers: vec![Layer::Libp2p],
        sizes: vec![1, 100_000],
        pin: Pin::None,
        warmup: 10,
        runs: 2,
        pairs: 5,
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    let p2p: Vec<_> = rows
        .iter()
        .filter(|r| r.implementation == "libp2p")
        .collect();
    assert_eq!(p2p.len(), 2, "{rows:?}");
    for r in p2p {
        assert_eq!(r.layer, "tcp-noise-yamux");
        assert_eq!(r.samples, 10);
        assert!(r.rtt_us_median > 0.0 && r.rtt_ratio_vs_tcp > 0.0, "{r:?}");
        // noise (16-byte tag, 2-byte length) and yamux (12-byte header)
        // frame every message, and yamux sends window updates: more
        // bytes than the payload at the socket, but not a multiple of it.
        assert!(r.wire_bytes > r.size as u64 + 4, "{r:?}");
        assert!(r.wire_bytes < 2 * r.size as u64 + 512, "{r:?}");
    }
}

/// rust-libp2p over QUIC in the same harness: its two processes in the
/// two namespaces of a veth pair (root), the bytes counted at the client's
/// interface (UDP payload: QUIC's packets with their headers and AEAD
/// tags, acks included).
#[tokio::test]
async fn libp2p_quic_lane_beside_tcp() {
    if !prereq::require(
        "cargo (the libp2p program is built with it)",
        std::env::var_os("CARGO").is_some() || prereq::on_path(&["cargo"]).is_some(),
    ) || !prereq::require_ok(prereq::netns())
    {
        return;
    }
    let opts = PingPongOptions {
        layers: vec![Layer::Libp2pQuic],
        sizes: vec![1, 100_000],
        pin: Pin::None,
        warmup: 10,
        runs: 2,
        pairs: 5,
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    let quic: Vec<_> = rows.iter().filter(|r| r.layer == "quic").collect();
    assert_eq!(quic.len(), 2, "{rows:?}");
    for r in quic {
        assert_eq!(r.implementation, "libp2p");
        assert_eq!(r.samples, 10);
        assert!(r.rtt_us_median > 0.0 && r.rtt_ratio_vs_tcp > 0.0, "{r:?}");
        // QUIC headers, frame headers and a 16-byte AEAD tag per packet
        // (100 KB: about 80 packets), and acks back: more than the
        // payload, far less than twice it.
        assert!(r.wire_bytes > r.size as u64 + 4 + 16, "{r:?}");
        assert!(r.wire_bytes < 2 * r.size as u64 + 512, "{r:?}");
        assert!(r.wire_bytes_rtt > r.wire_bytes, "{r:?}");
    }
}

/// Open MPI in the same harness: two ranks under mpirun, its TCP transport
/// (bytes counted at rank 0's sockets) and shared memory (no socket).
#[tokio::test]
async fn mpi_lanes_beside_tcp() {
    if !prereq::require(
        "Open MPI (Debian: openmpi-bin libopenmpi-dev)",
        prereq::on_path(&["mpicc"]).is_some() && prereq::on_path(&["mpirun"]).is_some(),
    ) {
        return;
    }
    let opts = PingPongOptions {
        layers: vec![Layer::MpiTcp, Layer::MpiSm],
        sizes: vec![1, 100_000],
        pin: Pin::None,
        warmup: 10,
        runs: 2,
        pairs: 5,
        ..PingPongOptions::default()
    };
    let rows = pingpong::run(&Host::Thread, &opts, quiet).await.unwrap();
    let mpi: Vec<_> = rows.iter().filter(|r| r.implementation == "mpi").collect();
    assert_eq!(mpi.len(), 4, "{rows:?}");
    for r in mpi {
        assert_eq!(r.samples, 10, "{r:?}");
        assert!(r.rtt_us_median > 0.0, "{r:?}");
        match r.layer {
            // Its headers on top of the payload, and the 1-byte answer's.
            "tcp" => assert!(r.wire_bytes > r.size as u64, "{r:?}"),
            "sm" => assert_eq!(r.wire_bytes, 0, "{r:?}"),
            other => panic!("unexpected mpi layer {other}"),
        }
    }
}

#[tokio::test]
async fn throughput_every_layer() {
    let opts = ThroughputOptions {
        layers: throughput::LAYERS.to_vec(),
        sizes: vec![1, 3000],
        patterns: vec![Pattern::Smooth, Pattern::Bursty, Pattern::Paced],
        duration_ms: 50,
        count: Some(300),
        bursts: 2,
        burst_len: 20,
        idle_ms: 20,
        rates: vec![5000.0],
        receivers: 2,
        warmup: 20,
        pin: Pin::None,
        key_bits: 1024,
        net: Default::default(),
        stacks: Vec::new(),
    };
    let rows = throughput::run(&Host::Thread, &opts, quiet).await.unwrap();
    assert_eq!(rows.len(), throughput::LAYERS.len() * 2 * 3);
    for r in &rows {
        assert_eq!(r.scenario, "throughput");
        assert!(r.msgs_per_s > 0.0 && r.bandwidth_mb_s > 0.0, "{r:?}");
        // Every layer is reliable over loopback TCP.
        assert_eq!(r.loss_pct, 0.0, "{r:?}");
        // Paced rows carry their offered rate, the others none.
        assert_eq!(
            r.offered_msgs_per_s,
            (r.pattern == Pattern::Paced).then_some(5000.0),
            "{r:?}"
        );
        // Propagate rows say how many receivers each message reached.
        assert_eq!(r.receivers, (r.layer == "propagate").then_some(2), "{r:?}");
    }
    for l in throughput::LAYERS {
        for p in [Pattern::Smooth, Pattern::Bursty, Pattern::Paced] {
            assert!(
                rows.iter()
                    .any(|r| r.layer == l.name() && r.pattern == p && r.size == 3000),
                "no row for {} {p:?}",
                l.name()
            );
        }
    }
}

#[tokio::test]
async fn composition_rows() {
    let opts = CompositionOptions {
        layers: vec![
            Layer::Endpoint,
            Layer::UnicastPipe,
            Layer::SecurePipe,
            Layer::BidiPipe,
            Layer::Propagate,
            Layer::PipeCompat,
        ],
        compositions: vec![(1, 2048), (4, 512)],
        pin: Pin::None,
        warmup: 10,
        runs: 1,
        pairs: 5,
        key_bits: 1024,
        net: Default::default(),
    };
    let rows = composition::run(&Host::Thread, &opts, quiet).await.unwrap();
    assert_eq!(rows.len(), 7 * 2);
    for r in &rows {
        assert_eq!(r.scenario, "composition");
        assert!(r.rtt_us_median > 0.0, "{r:?}");
        assert_eq!(r.elements * r.element_size, 2048);
    }
    let layers: Vec<&str> = rows.iter().take(7).map(|r| r.layer).collect();
    assert_eq!(
        layers,
        [
            "tcp",
            "endpoint",
            "unicast-pipe",
            "secure-pipe",
            "bidi-pipe",
            "propagate",
            "pipe-compat"
        ]
    );
    assert!(composition::run(
        &Host::Thread,
        &CompositionOptions {
            layers: vec![Layer::Socket],
            ..opts
        },
        quiet
    )
    .await
    .is_err());
}

#[tokio::test]
async fn senders_rows() {
    let opts = SendersOptions {
        layers: vec![
            Layer::Tcp,
            Layer::Endpoint,
            Layer::UnicastPipe,
            Layer::Socket,
        ],
        senders: vec![1, 3],
        modes: vec![senders::Mode::Pingpong, senders::Mode::Oneway],
        sizes: vec![1, 100],
        duration_ms: 60,
        warmup: 5,
        pin: Pin::None,
        key_bits: 1024,
        net: Default::default(),
    };
    let rows = senders::run(&Host::Thread, &opts, quiet).await.unwrap();
    assert_eq!(rows.len(), 2 * 4 * 2 * 2);
    for r in &rows {
        assert_eq!(r.scenario, "senders");
        assert!(r.msgs_per_s > 0.0 && r.bandwidth_mb_s > 0.0, "{r:?}");
        match r.mode {
            senders::Mode::Pingpong => {
                assert!(r.rtt_us_median.is_some_and(|m| m > 0.0), "{r:?}");
                assert_eq!(r.loss_pct, None);
            }
            // Every sender's messages counted by id: nothing lost over
            // loopback TCP, whichever the layer.
            senders::Mode::Oneway => {
                assert_eq!(r.loss_pct, Some(0.0), "{r:?}");
                assert_eq!(r.rtt_us_median, None);
            }
        }
    }
    for mode in [senders::Mode::Pingpong, senders::Mode::Oneway] {
        for layer in ["unicast-pipe", "socket"] {
            assert!(rows
                .iter()
                .any(|r| r.mode == mode && r.layer == layer && r.senders == 3 && r.size == 100));
        }
    }
}

#[tokio::test]
async fn buffer_sweep_rows() {
    use juxta_bench::buffers::{self, BuffersOptions};
    let opts = BuffersOptions {
        windows: vec![Some(16 << 10), Some(512 << 10), None],
        sizes: vec![1000, 100_000],
        pin: Pin::None,
        warmup: 3,
        runs: 1,
        pairs: 3,
        stream_ms: 50,
        key_bits: 1024,
        net: Default::default(),
    };
    let rows = buffers::run(&Host::Thread, &opts, quiet).await.unwrap();
    // Per size: tcp, then the socket at each window.
    assert_eq!(rows.len(), 2 * 4);
    for r in &rows {
        assert_eq!(r.scenario, "buffers");
        assert!(r.rtt_us_median > 0.0 && r.bandwidth_mb_s > 0.0, "{r:?}");
        assert!(r.stream_mb_s.is_some_and(|s| s > 0.0), "{r:?}");
        // tcp runs beside each of the three windows (interleaved).
        assert_eq!(r.samples, if r.layer == "tcp" { 9 } else { 3 }, "{r:?}");
    }
    let labels: Vec<&str> = rows
        .iter()
        .take(4)
        .map(|r| r.window_label.as_str())
        .collect();
    assert_eq!(labels, ["kernel", "16 KiB", "512 KiB", "auto"]);
    assert_eq!(rows[1].window, Some(16 << 10));
    assert_eq!(rows[0].bandwidth_ratio_vs_tcp, 1.0);
    // A message ten times the smallest window arrives whole.
    assert!(rows
        .iter()
        .any(|r| r.window == Some(16 << 10) && r.size == 100_000));
    assert!(buffers::run(
        &Host::Thread,
        &BuffersOptions {
            sizes: vec![0],
            ..opts
        },
        quiet
    )
    .await
    .is_err());
}

/// A sender that streams more messages than an input pipe queues (1,024)
/// before the responder has bound its reply pipe: binding (resolution, TLS
/// handshake) needs answers on the same connection, which stops being read
/// while the input pipe is full, so a responder that waited for the binding
/// before draining its pipe deadlocked here.
#[tokio::test]
async fn reply_pipes_bind_while_a_sender_streams() {
    let opts = ThroughputOptions {
        layers: vec![Layer::SecurePipe, Layer::UnicastPipe],
        sizes: vec![1],
        patterns: vec![Pattern::Smooth],
        duration_ms: 10,
        count: Some(100),
        bursts: 1,
        burst_len: 1,
        idle_ms: 0,
        warmup: 5000,
        pin: Pin::None,
        key_bits: 1024,
        net: Default::default(),
        stacks: Vec::new(),
        ..ThroughputOptions::default()
    };
    let rows = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        throughput::run(&Host::Thread, &opts, quiet),
    )
    .await
    .expect("deadlocked")
    .unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.loss_pct == 0.0 && r.msgs_per_s > 0.0));
}

/// `ops` in the `firewalled` and `http-rendezvous` configurations: edges
/// without listeners behind the rendezvous, which is also their relay
/// (leased by default; over JXTA's HTTP transport in `http-rendezvous`):
/// every operation is measured, none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_firewalled_and_http_rendezvous_configs() {
    use juxta_bench::ops::{self, OpsOptions, OPERATIONS};
    for config in ["firewalled", "http-rendezvous"] {
        let opts = OpsOptions {
            runs: 2,
            configs: vec![config.into()],
            ..OpsOptions::default()
        };
        let report = ops::run_report(&opts, quiet).await.unwrap();
        assert!(
            report.failures.is_empty(),
            "{config}: {:?}",
            report.failures
        );
        let ops: Vec<&str> = report.rows.iter().map(|r| r.operation.as_str()).collect();
        assert_eq!(ops, OPERATIONS, "{config}");
        for r in &report.rows {
            assert_eq!(
                (r.scenario.as_str(), r.config.as_str(), r.runs),
                ("ops", config, 2)
            );
            assert!(r.ms_p99 >= r.ms_median, "{r:?}");
        }
    }
}

/// `ops` ad hoc with the `--full` preset's 100 repetitions: on loopback
/// they ask the far peer more resolver queries than its default per-peer
/// budget allows (200/s, bursts of 100), and a dropped query made an
/// operation fail with "nothing found" (the `--full` run failed so). The
/// bench's peers raise that budget; every operation is measured 100 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_ad_hoc_with_the_full_presets_repetitions() {
    use juxta_bench::ops::{self, OpsOptions};
    let opts = OpsOptions {
        runs: 100,
        configs: vec!["ad-hoc".into()],
        ..OpsOptions::default()
    };
    let report = ops::run_report(&opts, quiet).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    for op in ["remote-peers", "remote-pipe", "open-output-pipe"] {
        let row = report.rows.iter().find(|r| r.operation == op);
        assert_eq!(row.map(|r| r.runs), Some(100), "{op}: {:?}", report.rows);
    }
}

/// The `rendezvous` configuration of the operations table: two edges of a
/// rendezvous, discovery and pipe binding through it. Every operation is
/// accounted for once (a row, or a failure saying why); the discovery
/// operations through the rendezvous get rows with positive times.
/// (`open-output-pipe` may be a failure while binding answers forwarded by
/// a rendezvous are not accepted: see the report of `ops::run_report`.)
#[tokio::test]
async fn ops_rendezvous_config() {
    use juxta_bench::ops::{self, OpsOptions, OPERATIONS};
    let opts = OpsOptions {
        runs: 2,
        configs: vec!["rendezvous".into()],
        ..OpsOptions::default()
    };
    let report = ops::run_report(&opts, quiet).await.unwrap();
    for op in OPERATIONS {
        let rows = report.rows.iter().filter(|r| r.operation == op).count();
        let failed = report.failures.iter().filter(|f| f.operation == op).count();
        assert_eq!(rows + failed, 1, "{op}: {report:?}");
    }
    for f in &report.failures {
        assert_eq!(f.config, "rendezvous");
        assert!(!f.reason.is_empty(), "{f:?}");
    }
    for r in &report.rows {
        assert_eq!(
            (r.scenario.as_str(), r.config.as_str()),
            ("ops", "rendezvous")
        );
        assert_eq!(r.runs, 2, "{r:?}");
        assert!(r.ms_median > 0.0 && r.ms_p99 >= r.ms_median, "{r:?}");
    }
    for op in [
        "start",
        "publish",
        "remote-peers",
        "cached-peers",
        "remote-pipe",
        "cached-pipe",
    ] {
        assert!(
            report.rows.iter().any(|r| r.operation == op),
            "no {op} row: {:?}",
            report.failures
        );
    }
}

/// `ops` in the `subgroup` configuration: every group operation measured
/// (password and certificate groups, discovery and binding inside one).
#[tokio::test]
async fn ops_subgroup_config() {
    use juxta_bench::ops::{self, OpsOptions, GROUP_OPERATIONS};
    let opts = OpsOptions {
        runs: 2,
        configs: vec!["subgroup".into()],
        ..OpsOptions::default()
    };
    let report = ops::run_report(&opts, quiet).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let ops: Vec<&str> = report.rows.iter().map(|r| r.operation.as_str()).collect();
    assert_eq!(ops, GROUP_OPERATIONS);
    for r in &report.rows {
        assert_eq!(
            (r.scenario.as_str(), r.config.as_str(), r.runs),
            ("ops", "subgroup", 2)
        );
        assert!(r.ms_p99 >= r.ms_median, "{r:?}");
    }
}

/// Both configurations by default, ad-hoc first; an unknown one is a typed
/// error before anything runs.
#[tokio::test]
async fn ops_default_configs_and_bad_config() {
    use juxta_bench::ops::{self, OpsError, OpsOptions};
    assert_eq!(OpsOptions::default().configs, ["ad-hoc", "rendezvous"]);
    let opts = OpsOptions {
        runs: 1,
        ..OpsOptions::default()
    };
    let rows = ops::run(&opts, quiet).await.unwrap();
    let configs: Vec<&str> = rows.iter().map(|r| r.config.as_str()).collect();
    let split = configs.iter().position(|c| *c == "rendezvous").unwrap();
    assert!(configs[..split].iter().all(|c| *c == "ad-hoc"));
    assert!(configs[split..].iter().all(|c| *c == "rendezvous"));
    for op in ["remote-peers", "remote-pipe"] {
        for c in ["ad-hoc", "rendezvous"] {
            let r = rows
                .iter()
                .find(|r| r.operation == op && r.config == c)
                .unwrap_or_else(|| panic!("no {op} row in {c}"));
            assert!(r.ms_median > 0.0, "{r:?}");
        }
    }
    let bad = OpsOptions {
        configs: vec!["mesh".into()],
        ..OpsOptions::default()
    };
    let e = ops::run(&bad, quiet).await.unwrap_err();
    assert!(
        matches!(e, juxta_bench::BenchError::Ops(OpsError::UnknownConfig(ref c)) if c == "mesh"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_paths_and_overload_rows() {
    use juxta_bench::relay::{self, OverloadOptions, RelayOptions, RelayPath};
    let opts = RelayOptions {
        paths: RelayPath::ALL.to_vec(),
        layers: relay::DEFAULT_LAYERS.to_vec(),
        sizes: vec![1, 4096],
        warmup: 2,
        pairs: 5,
        stream: std::time::Duration::from_millis(50),
        transfer: 1 << 20,
        overload: Some(OverloadOptions {
            duration: std::time::Duration::from_millis(1000),
            sink_msgs_per_s: 500,
            in_process: true,
            ..OverloadOptions::default()
        }),
        relays_in_process: true,
        ..RelayOptions::default()
    };
    let rows = relay::run(&opts, quiet).await.expect("relay run");
    let j = serde_json::to_value(&rows).unwrap();
    let rows = j.as_array().unwrap();
    // One SHA-256-checked socket transfer per path that has one.
    for path in ["direct", "tcp-relay", "firewalled"] {
        let t = rows
            .iter()
            .find(|r| r["path"] == path && r["run"] == "transfer")
            .unwrap_or_else(|| panic!("no transfer row {path}"));
        assert_eq!(t["layer"], "socket-transfer");
        assert_eq!(t["size"], 1 << 20);
        assert!(t["bandwidth_mb_s"].as_f64().unwrap() > 0.0, "{t}");
        assert!(
            t["bandwidth_ratio_vs_direct"].as_f64().unwrap() > 0.0,
            "{t}"
        );
    }
    assert!(!rows
        .iter()
        .any(|r| r["run"] == "transfer" && r["path"] == "two-relays"));
    for path in [
        "direct",
        "tcp-relay",
        "http-relay",
        "two-relays",
        "firewalled",
    ] {
        for layer in ["unicast-pipe", "socket"] {
            for size in [1, 4096] {
                let r = rows
                    .iter()
                    .find(|r| {
                        r["path"] == path
                            && r["layer"] == layer
                            && r["size"] == size
                            && r["run"] == "pingpong"
                    })
                    .unwrap_or_else(|| panic!("no row {path} {layer} {size}"));
                assert_eq!(r["scenario"], "relay");
                assert!(r["rtt_us_median"].as_f64().unwrap() > 0.0, "{r}");
                assert!(r["bandwidth_mb_s"].as_f64().unwrap() > 0.0, "{r}");
                assert!(r["rtt_ratio_vs_direct"].as_f64().unwrap() > 0.0, "{r}");
                assert!(
                    r["bandwidth_ratio_vs_direct"].as_f64().unwrap() > 0.0,
                    "{r}"
                );
            }
        }
    }
    let o: Vec<&serde_json::Value> = rows.iter().filter(|r| r["run"] == "overload").collect();
    assert_eq!(o.len(), 1);
    let o = o[0];
    let loss = o["loss_pct"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&loss), "{o}");
    assert!(o["offered_msgs_per_s"].as_f64().unwrap() > 0.0, "{o}");
    assert!(o["delivered_msgs_per_s"].as_f64().unwrap() > 0.0, "{o}");
    assert!(o["relay_rss_mb_max"].as_f64().unwrap() > 0.0, "{o}");
    assert!(!o["relay_rss_mb_samples"].as_array().unwrap().is_empty());
    // Every offered message is delivered or accounted for.
    let n = |k: &str| o[k].as_u64().unwrap();
    assert!(n("delivered") <= n("offered"));
    assert_eq!(
        n("offered") - n("delivered"),
        n("held_back") + n("refused_by_relay") + n("send_errors") + n("unaccounted"),
        "{o}"
    );
    // The other edge pair was served during the overload.
    assert!(n("other_edge_answered") > 0, "{o}");
}

/// Secure, bidi and propagate pipes through one and two relays (and the
/// firewalled path, where the pipes are found by discovery): a row per
/// path, layer and size with an RTT and a bandwidth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_carries_secure_bidi_and_propagate_pipes() {
    use juxta_bench::relay::{self, RelayOptions, RelayPath};
    let layers = [Layer::SecurePipe, Layer::BidiPipe, Layer::Propagate];
    let opts = RelayOptions {
        paths: vec![
            RelayPath::Direct,
            RelayPath::TcpRelay,
            RelayPath::TwoRelays,
            RelayPath::Firewalled,
        ],
        layers: layers.to_vec(),
        sizes: vec![1, 4096],
        warmup: 2,
        pairs: 5,
        stream: std::time::Duration::from_millis(50),
        transfer: 0,
        overload: None,
        relays_in_process: true,
        ..RelayOptions::default()
    };
    let rows = relay::run(&opts, quiet).await.expect("relay run");
    for path in ["direct", "tcp-relay", "two-relays", "firewalled"] {
        for layer in layers {
            for size in [1, 4096] {
                let r = rows
                    .iter()
                    .find(|r| r.path == path && r.layer == layer.name() && r.size == size)
                    .unwrap_or_else(|| panic!("no row {path} {} {size}", layer.name()));
                assert!(r.rtt_us_median.unwrap() > 0.0, "{r:?}");
                assert!(r.bandwidth_mb_s.unwrap() > 0.0, "{r:?}");
            }
        }
    }
}

/// The overload curve: the forwarding rate is measured, then one row per
/// factor, offered rate rising with the factor; every offered message
/// delivered or accounted for; the relay's RSS sampled per point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_overload_curve_rows() {
    use juxta_bench::relay::{self, CurveOptions, RelayOptions, RelayPath};
    let opts = RelayOptions {
        paths: vec![RelayPath::Direct],
        layers: vec![],
        sizes: vec![],
        transfer: 0,
        overload: None,
        curve: Some(CurveOptions {
            factors: vec![0.5, 4.0],
            point: std::time::Duration::from_millis(700),
            calibrate: std::time::Duration::from_millis(700),
            in_process: true,
            ..CurveOptions::default()
        }),
        relays_in_process: true,
        ..RelayOptions::default()
    };
    let rows = relay::run(&opts, quiet).await.expect("relay run");
    let c: Vec<_> = rows.iter().filter(|r| r.run == "overload-curve").collect();
    assert_eq!(c.len(), 2, "{rows:?}");
    assert_eq!(c[0].offered_factor, Some(0.5));
    assert_eq!(c[1].offered_factor, Some(4.0));
    assert!(c[0].forwarding_msgs_per_s.unwrap() > 0.0);
    assert!(c[1].offered_msgs_per_s.unwrap() > c[0].offered_msgs_per_s.unwrap());
    for r in &c {
        assert!(r.delivered_msgs_per_s.unwrap() > 0.0, "{r:?}");
        assert!(r.relay_rss_mb_max.unwrap() > 0.0, "{r:?}");
        let loss = r.loss_pct.unwrap();
        assert!((0.0..=100.0).contains(&loss), "{r:?}");
        let (o, d) = (r.offered.unwrap(), r.delivered.unwrap());
        assert!(d <= o);
        assert_eq!(
            o - d,
            r.held_back.unwrap()
                + r.refused_by_relay.unwrap()
                + r.send_errors.unwrap()
                + r.unaccounted.unwrap(),
            "{r:?}"
        );
    }
    // Bad curves are refused before anything starts.
    let bad = RelayOptions {
        curve: Some(CurveOptions {
            factors: vec![-1.0],
            ..CurveOptions::default()
        }),
        ..opts
    };
    assert!(matches!(
        relay::run(&bad, quiet).await,
        Err(juxta_bench::BenchError::BadOption(_))
    ));
}
