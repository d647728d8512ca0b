//! docs/guide.md, "Streams: JXTA sockets": a reliable byte stream between
//! two peers (tokio's AsyncRead/AsyncWrite), plain and over TLS 1.3.

use std::time::Duration;

use juxta::prelude::*;
use juxta_guide::Scratch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BYTES: usize = 16 << 20;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = Scratch::new("socket");
    let server_peer =
        Peer::start(PeerConfig::new(scratch.home("server")).listen("127.0.0.1:0".parse()?)).await?;
    let client_peer = Peer::start(PeerConfig::new(scratch.home("client"))).await?;
    client_peer
        .connect(server_peer.local_addr().expect("listening"))
        .await?;

    for secure in [false, true] {
        let adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
        let cfg = SocketConfig {
            secure,
            ..SocketConfig::default()
        };
        let mut server = JxtaServerSocket::bind(&server_peer, &adv, cfg.clone())?;
        // The server echoes a checksum of everything it read.
        let srv = tokio::spawn(async move {
            let mut s = server.accept().await?;
            let (mut n, mut sum) = (0usize, 0u64);
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let k = s.read(&mut buf).await?;
                if k == 0 {
                    break;
                }
                n += k;
                sum = buf[..k]
                    .iter()
                    .fold(sum, |a, &b| a.wrapping_mul(31).wrapping_add(u64::from(b)));
            }
            s.write_all(&sum.to_be_bytes()).await?;
            s.shutdown().await?;
            Ok::<usize, Box<dyn std::error::Error + Send + Sync>>(n)
        });

        let data: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
        let want = data
            .iter()
            .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(u64::from(b)));
        let mut s =
            JxtaSocket::connect(&client_peer.pipes(), &adv, server_peer.peer_id(), cfg).await?;
        s.write_all(&data).await?;
        s.shutdown().await?; // half-close: the server sees end of stream
        let mut back = [0u8; 8];
        tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut back)).await??;
        assert_eq!(u64::from_be_bytes(back), want, "checksum echoed");
        assert_eq!(srv.await?.map_err(|e| e.to_string())?, BYTES);
        println!(
            "ok: {} MiB over a {} JXTA socket, checksum echoed",
            BYTES >> 20,
            if secure { "TLS" } else { "plain" },
        );
    }
    Ok(())
}
