//! Quick in-process socket ping-pong, for profiling the socket layer:
//! `cargo run --release -p juxta --example socket_pingpong -- SIZE ROUNDS`.
//! (The measured benchmark is `juxta bench pingpong --layers socket`.)

use std::time::{Duration, Instant};

use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::PipeId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let size: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let mut ca = PeerConfig::new(dir.path().join("a")).listen("127.0.0.1:0".parse().unwrap());
    ca.key_bits = 1024;
    let mut cb = PeerConfig::new(dir.path().join("b"));
    cb.key_bits = 1024;
    let a = Peer::start(ca).await.unwrap();
    let b = Peer::start(cb).await.unwrap();
    let adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    let mut server = JxtaServerSocket::bind(&a, &adv, SocketConfig::default()).unwrap();
    let m = b.connect(a.local_addr().unwrap()).await.unwrap();
    m.wait_compact(Duration::from_secs(5)).await;
    tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut buf = vec![0u8; size];
        loop {
            if s.read_exact(&mut buf).await.is_err() {
                return;
            }
            s.write_all(&[1u8]).await.unwrap();
            s.flush().await.unwrap();
        }
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &adv, a.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    let data = vec![7u8; size];
    let mut ack = [0u8; 1];
    for _ in 0..rounds / 5 {
        c.write_all(&data).await.unwrap();
        c.flush().await.unwrap();
        c.read_exact(&mut ack).await.unwrap();
    }
    let t = Instant::now();
    for _ in 0..rounds {
        c.write_all(&data).await.unwrap();
        c.flush().await.unwrap();
        c.read_exact(&mut ack).await.unwrap();
    }
    let rtt = t.elapsed() / rounds as u32;
    println!(
        "size {size}: rtt {:?}, {:.0} MB/s, stats {:?}",
        rtt,
        size as f64 / rtt.as_secs_f64() / 1e6,
        c.stats()
    );
}
