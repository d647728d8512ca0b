//! What a rendezvous pays when its edges leave: an SRDI index holding
//! `PEERS` publishers with `PER_PEER` entries each, then every publisher
//! removed one by one (`SrdiIndex::remove_peer`, run for each edge whose
//! lease ends or whose connection closes).
//!
//! ```sh
//! cargo run --release -p juxta-proto --example srdi_departures -- 10000 10
//! ```

use std::time::Instant;

use juxta_proto::id::{IdFormat, IdType, JxtaId, PeerId};
use juxta_proto::srdi::index::SrdiIndex;

fn main() {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<usize>());
    let peers = args.next().and_then(Result::ok).unwrap_or(10_000);
    let per_peer = args.next().and_then(Result::ok).unwrap_or(10);
    let id = |n: usize| -> PeerId {
        let mut u = [0u8; 16];
        u[..8].copy_from_slice(&(n as u64).to_be_bytes());
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], u, IdType::Peer)
            .try_into()
            .expect("a peer ID")
    };
    let mut ix = SrdiIndex::new(peers * per_peer + 1, per_peer + 1);
    let t = Instant::now();
    for p in 0..peers {
        for k in 0..per_peer {
            ix.add("Adv", "Name", &format!("n-{p}-{k}"), id(p), u64::MAX)
                .expect("room");
        }
    }
    let fill = t.elapsed();
    let t = Instant::now();
    let mut removed = 0;
    for p in 0..peers {
        removed += ix.remove_peer(&id(p));
    }
    let leave = t.elapsed();
    assert_eq!(
        (removed, ix.len()),
        (peers * per_peer, 0),
        "every entry removed"
    );
    println!(
        "{peers} publishers x {per_peer} entries: filled in {:.1} ms; all left in {:.1} ms ({:.1} µs per departure)",
        fill.as_secs_f64() * 1e3,
        leave.as_secs_f64() * 1e3,
        leave.as_secs_f64() * 1e6 / peers as f64
    );
}
