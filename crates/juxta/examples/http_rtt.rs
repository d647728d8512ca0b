//! Round-trip time and one-way throughput of endpoint messages over the
//! HTTP transport, next to TCP (JXTA framing and compact framing), on
//! loopback. A quick look, not a benchmark: medians of N round trips.
//!
//! `cargo run --release -p juxta --example http_rtt [N]`

use std::time::{Duration, Instant};

use bytes::Bytes;
use juxta::{Messenger, Peer, PeerConfig};
use juxta_proto::message::{Element, Message};

fn msg(n: usize) -> Message {
    Message::new().with(Element::bytes("bench", "data", Bytes::from(vec![7u8; n])))
}

async fn rtt(to: &Messenger, inbox: &mut juxta::Listener, size: usize, n: usize) -> Duration {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n + n / 10 {
        let t = Instant::now();
        to.send("echo", None, msg(size)).await.unwrap();
        inbox.recv().await.unwrap();
        v.push(t.elapsed());
    }
    v.drain(..n / 10); // warm-up
    v.sort();
    v[v.len() / 2]
}

async fn throughput(to: &Messenger, sink: &mut juxta::Listener, size: usize, total: usize) -> f64 {
    let n = total / size;
    let t = Instant::now();
    let send = async {
        for _ in 0..n {
            to.send("sink", None, msg(size)).await.unwrap();
        }
    };
    let recv = async {
        for _ in 0..n {
            sink.recv().await.unwrap();
        }
    };
    tokio::join!(send, recv);
    (n * size) as f64 / t.elapsed().as_secs_f64() / 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile_dir();
    let mut cs = PeerConfig::new(dir.join("server"))
        .listen("127.0.0.1:0".parse().unwrap())
        .http_listen("127.0.0.1:0".parse().unwrap());
    cs.key_bits = 1024;
    let server = Peer::start(cs).await.unwrap();
    // Echo: every message to "echo" goes back to its sender's "echo-back".
    let mut echo = server.listen("echo", None).unwrap();
    let mut sink = server.listen("sink", None).unwrap();
    let inner = std::sync::Arc::new(server);
    let s2 = inner.clone();
    tokio::spawn(async move {
        while let Some(d) = echo.recv().await {
            let from = d.from.unwrap();
            let m = s2.messenger(&from).unwrap();
            m.send("echo-back", None, d.message).await.unwrap();
        }
    });
    for (name, how) in [("tcp compact", 0), ("tcp jxta+cbjx", 1), ("http", 2)] {
        let mut c = PeerConfig::new(dir.join(format!("client{how}")));
        c.key_bits = 1024;
        c.connection.compact = how == 0;
        let client = Peer::start(c).await.unwrap();
        let mut back = client.listen("echo-back", None).unwrap();
        let to = match how {
            2 => client
                .connect_http(inner.http_local_addr().unwrap())
                .await
                .unwrap(),
            _ => client.connect(inner.local_addr().unwrap()).await.unwrap(),
        };
        to.wait_compact(Duration::from_secs(2)).await;
        let r1 = rtt(&to, &mut back, 1, n).await;
        let r64 = rtt(&to, &mut back, 65536, n / 4).await;
        let tp = throughput(&to, &mut sink, 65536, 256 << 20).await;
        println!(
            "{name:>14}: RTT 1 B {:>7.1} us, 64 KiB {:>7.1} us; one-way 64 KiB messages {:>7.0} MB/s",
            r1.as_secs_f64() * 1e6,
            r64.as_secs_f64() * 1e6,
            tp
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("juxta-http-rtt-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
