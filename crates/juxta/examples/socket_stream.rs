//! One-way stream over a JXTA socket, for profiling:
//! `cargo run --release -p juxta --example socket_stream -- BYTES`.

use std::time::{Duration, Instant};

use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::id::PipeId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10 << 20);
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
    let t0 = Instant::now();
    let srv = tokio::spawn(async move {
        let mut s = server.accept().await.unwrap();
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf).await.unwrap();
        eprintln!("server read all at {:?}", t0.elapsed());
        s.write_all(&buf).await.unwrap();
        s.flush().await.unwrap();
        eprintln!("server wrote back at {:?}", t0.elapsed());
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        eprintln!("server eof at {:?}", t0.elapsed());
        s.shutdown().await.unwrap();
        eprintln!("server closed at {:?}", t0.elapsed());
    });
    let mut c = JxtaSocket::connect(&b.pipes(), &adv, a.peer_id(), SocketConfig::default())
        .await
        .unwrap();
    eprintln!("connected at {:?}", t0.elapsed());
    c.write_all(&vec![5u8; n]).await.unwrap();
    c.flush().await.unwrap();
    eprintln!("client wrote all at {:?}", t0.elapsed());
    let mut back = vec![0u8; n];
    c.read_exact(&mut back).await.unwrap();
    eprintln!("client read back at {:?}", t0.elapsed());
    c.shutdown().await.unwrap();
    eprintln!("client closed at {:?} stats {:?}", t0.elapsed(), c.stats());
    srv.await.unwrap();
}
