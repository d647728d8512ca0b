//! rust-libp2p side of `juxta bench pingpong --impl libp2p`: TCP + noise +
//! yamux, or QUIC (v1, its own TLS 1.3), on loopback, one stream opened
//! once and kept open, one message
//! (4-byte big-endian length + payload, as the `tcp` lane frames it) and a
//! 1-byte reply per pair, as every other implementation in the bench.
//!
//!   libp2p_pingpong serve [MULTIADDR]
//!                                listen on MULTIADDR (default
//!                                /ip4/127.0.0.1/tcp/0; a
//!                                /ip4/.../udp/PORT/quic-v1 address
//!                                serves QUIC), print
//!                                "READY <multiaddr>/p2p/<peer id>", answer
//!                                every message with 1 byte until killed.
//!   libp2p_pingpong client ADDR  dial, open the stream, print "READY",
//!                                then read commands on stdin, one answer
//!                                line each:
//!     PAIRS <size> <n>           n untimed pairs            -> "DONE"
//!     TIMED <size> <n>           n pairs, each timed with a monotonic
//!                                clock                      -> "TIMED us,us,..."
//!     STREAM <size> <n> <ms>     one-way messages (length with the top bit
//!                                set: no reply) back to back until n were
//!                                sent (n > 0) or ms passed (ms > 0), then an
//!                                end mark (length 0xFFFFFFFF and the 8-byte
//!                                count), answered with the 8-byte count the
//!                                server received; timed from the first send
//!                                until the answer
//!                                          -> "STREAMED <sent> <received> <us>"
//!     QUIT                       exit 0
//!   Errors: "ERROR <what>" and exit 1.
//!
//! Built by juxta-bench at run time (`cargo build --release --locked`).

use std::time::{Duration, Instant};

use futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p::{multiaddr::Protocol, noise, swarm::SwarmEvent, tcp, yamux, Multiaddr, PeerId};
use libp2p::{StreamProtocol, Swarm};
use tokio::io::AsyncBufReadExt;

const PROTOCOL: StreamProtocol = StreamProtocol::new("/juxta-bench/pingpong/1");
const MAX_SIZE: usize = 64 << 20;
/// Length bit of a streamed (one-way) message.
const NO_REPLY: u32 = 1 << 31;
/// Length of the end mark of a stream.
const END_MARK: u32 = u32::MAX;

fn die(what: impl std::fmt::Display) -> ! {
    println!("ERROR {what}");
    std::process::exit(1);
}

fn swarm() -> Swarm<libp2p_stream::Behaviour> {
    libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default().nodelay(true),
            noise::Config::new,
            yamux::Config::default,
        )
        .unwrap_or_else(|e| die(format!("transport: {e}")))
        .with_quic()
        .with_behaviour(|_| libp2p_stream::Behaviour::new())
        .unwrap_or_else(|e| die(format!("behaviour: {e}")))
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(24 * 3600)))
        .build()
}

async fn serve(listen: Option<&str>) {
    let mut swarm = swarm();
    let mut incoming = swarm
        .behaviour()
        .new_control()
        .accept(PROTOCOL)
        .unwrap_or_else(|e| die(format!("accept: {e}")));
    // The harness passes its own endpoint form (`tcp://...`) for every
    // stack: only a multiaddr is taken as one.
    let addr: Multiaddr = match listen.filter(|a| a.starts_with('/')) {
        Some(a) => a.parse().unwrap_or_else(|e| die(format!("listen address: {e}"))),
        None => "/ip4/127.0.0.1/tcp/0".parse().expect("a valid multiaddr"),
    };
    swarm
        .listen_on(addr)
        .unwrap_or_else(|e| die(format!("listen: {e}")));
    let me = *swarm.local_peer_id();
    loop {
        if let SwarmEvent::NewListenAddr { address, .. } = swarm.select_next_some().await {
            println!("READY {}", address.with(Protocol::P2p(me)));
            break;
        }
    }
    tokio::spawn(async move {
        loop {
            swarm.select_next_some().await;
        }
    });
    while let Some((_peer, stream)) = incoming.next().await {
        tokio::spawn(async move {
            // Buffered reads: one call into the muxer per 64 KiB, not two
            // per message (a stream of 1-byte messages is otherwise parsed
            // far slower than it arrives).
            let mut stream = futures::io::BufReader::with_capacity(64 << 10, stream);
            let mut buf = Vec::new();
            let mut streamed = 0u64;
            loop {
                // Reads from the buffer never wait: let the swarm task (which
                // drives the connection: acks, flow control, keep-alive) run
                // on this one-thread runtime between messages.
                if streamed % 256 == 255 {
                    tokio::task::yield_now().await;
                }
                let mut len = [0u8; 4];
                if stream.read_exact(&mut len).await.is_err() {
                    return;
                }
                let len = u32::from_be_bytes(len);
                if len == END_MARK {
                    let mut count = [0u8; 8];
                    if stream.read_exact(&mut count).await.is_err()
                        || stream.get_mut().write_all(&streamed.to_be_bytes()).await.is_err()
                        || stream.get_mut().flush().await.is_err()
                    {
                        return;
                    }
                    streamed = 0;
                    continue;
                }
                let n = (len & !NO_REPLY) as usize;
                if n > MAX_SIZE {
                    return;
                }
                buf.resize(n, 0);
                if stream.read_exact(&mut buf).await.is_err() {
                    return;
                }
                if len & NO_REPLY != 0 {
                    streamed += 1;
                    continue;
                }
                if stream.get_mut().write_all(&[1]).await.is_err()
                    || stream.get_mut().flush().await.is_err()
                {
                    return;
                }
            }
        });
    }
}

async fn client(addr: &str) {
    let addr: Multiaddr = addr
        .parse()
        .unwrap_or_else(|e| die(format!("address: {e}")));
    let Some(Protocol::P2p(peer)) = addr.iter().last() else {
        die("address has no /p2p/ peer id")
    };
    let peer: PeerId = peer;
    let mut swarm = swarm();
    let mut control = swarm.behaviour().new_control();
    swarm.dial(addr).unwrap_or_else(|e| die(format!("dial: {e}")));
    tokio::spawn(async move {
        loop {
            swarm.select_next_some().await;
        }
    });
    let mut stream = control
        .open_stream(peer, PROTOCOL)
        .await
        .unwrap_or_else(|e| die(format!("open stream: {e}")));
    println!("READY");
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut payload = Vec::new();
    let mut samples = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut it = line.split_whitespace();
        let cmd = it.next().unwrap_or("");
        if cmd == "QUIT" {
            return;
        }
        let size: usize = it.next().and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
        let n: usize = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        if cmd == "STREAM" {
            let ms: u64 = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            if size == 0 || size > MAX_SIZE || (n == 0 && ms == 0) {
                die(format!("bad command {line:?}"));
            }
            payload.clear();
            payload.extend_from_slice(&(size as u32 | NO_REPLY).to_be_bytes());
            payload.resize(4 + size, 0x5a);
            let t0 = Instant::now();
            let end = t0 + Duration::from_millis(ms);
            let mut sent = 0u64;
            loop {
                if let Err(e) = stream.write_all(&payload).await {
                    die(format!("stream failed: {e}"));
                }
                sent += 1;
                // A write that fits in the send buffer never waits: let
                // the swarm task drive the connection between messages
                // (over QUIC it otherwise starves and the peer times out).
                if sent % 256 == 0 {
                    tokio::task::yield_now().await;
                }
                if (n > 0 && sent >= n as u64) || (ms > 0 && Instant::now() >= end) {
                    break;
                }
            }
            let mut mark = END_MARK.to_be_bytes().to_vec();
            mark.extend_from_slice(&sent.to_be_bytes());
            let mut got = [0u8; 8];
            if let Err(e) = stream.write_all(&mark).await {
                die(format!("stream end mark: {e}"));
            }
            if let Err(e) = stream.flush().await {
                die(format!("stream end flush: {e}"));
            }
            if let Err(e) = stream.read_exact(&mut got).await {
                die(format!("stream count: {e}"));
            }
            let us = t0.elapsed().as_secs_f64() * 1e6;
            println!("STREAMED {sent} {} {us:.2}", u64::from_be_bytes(got));
            continue;
        }
        if !matches!(cmd, "PAIRS" | "TIMED") || size > MAX_SIZE || n == 0 {
            die(format!("bad command {line:?}"));
        }
        payload.clear();
        payload.extend_from_slice(&(size as u32).to_be_bytes());
        payload.resize(4 + size, 0x5a);
        samples.clear();
        for _ in 0..n {
            let t0 = Instant::now();
            let mut ack = [0u8; 1];
            if stream.write_all(&payload).await.is_err()
                || stream.flush().await.is_err()
                || stream.read_exact(&mut ack).await.is_err()
            {
                die("pair failed");
            }
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        if cmd == "PAIRS" {
            println!("DONE");
        } else {
            let list: Vec<String> = samples.iter().map(|s| format!("{s:.3}")).collect();
            println!("TIMED {}", list.join(","));
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(format!("runtime: {e}")));
    match args.get(1).map(String::as_str) {
        Some("serve") => rt.block_on(serve(args.get(2).map(String::as_str))),
        Some("client") if args.len() == 3 => rt.block_on(client(&args[2])),
        _ => die("usage: libp2p_pingpong serve [MULTIADDR] | client ADDR"),
    }
}
