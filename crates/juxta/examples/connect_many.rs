//! Connects N in-process peers to one address and keeps them connected
//! until killed: load for measuring a daemon with many connections
//! (docs/peer.md: `juxta status` on a peer serving 1,000 connections).
//!
//! `cargo run --release -p juxta --example connect_many -- 127.0.0.1:9701 1000`
//! prints `connected N` once every peer is connected.

use std::net::SocketAddr;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().ok_or("usage: connect_many ADDR [N]")?.parse()?;
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let root = tempfile::tempdir()?;
    let mut peers = Vec::with_capacity(n);
    for i in 0..n {
        let mut cfg = juxta::PeerConfig::new(root.path().join(i.to_string()));
        cfg.key_bits = 1024;
        let p = juxta::Peer::start(cfg).await?;
        p.connect(addr).await?;
        peers.push(p);
        if (i + 1) % 100 == 0 {
            eprintln!("{} peers connected", i + 1);
        }
    }
    println!("connected {n}");
    std::future::pending::<()>().await;
    Ok(())
}
