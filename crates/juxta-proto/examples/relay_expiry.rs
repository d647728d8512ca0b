//! What a relay pays to expire leases while it holds many: `expire` with
//! nothing due (what the relay's spooling task runs before each queued
//! message it sends) and a lease renewal (which expires first), on a
//! [`RelayServer`] holding N leases.
//!
//! ```sh
//! cargo run --release -p juxta-proto --example relay_expiry -- 10000
//! ```

use std::time::Instant;

use juxta_proto::id::PeerId;
use juxta_proto::relay::server::{RelayServer, ServerConfig};
use juxta_proto::relay::RelayRequest;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let cfg = ServerConfig {
        max_clients: n + 1,
        lease_ms: 3_600_000,
        ..ServerConfig::default()
    };
    let mut s: RelayServer<u32> = RelayServer::new(PeerId::from_public_key_spki(b"relay"), cfg);
    let edges: Vec<PeerId> = (0..n)
        .map(|i| PeerId::from_public_key_spki(&(i as u64).to_be_bytes()))
        .collect();
    let connect = RelayRequest::Connect { lease_ms: None };
    for (i, e) in edges.iter().enumerate() {
        s.on_request(*e, true, i as u64, &connect, 0);
    }
    let rounds = 20_000u64;
    let t = Instant::now();
    let mut gone = 0;
    for r in 0..rounds {
        gone += s.expire(1 + r % 1_000).len();
    }
    let per_expire = t.elapsed().as_nanos() as f64 / rounds as f64;
    let renewals = n.min(10_000);
    let t = Instant::now();
    for (i, e) in edges.iter().enumerate().take(renewals) {
        s.on_request(*e, true, i as u64, &connect, 2_000);
    }
    let per_renewal = t.elapsed().as_nanos() as f64 / renewals as f64;
    assert_eq!((gone, s.clients()), (0, n), "no lease was due");
    println!("leases {n}: expire with nothing due {per_expire:.0} ns, renewal {per_renewal:.0} ns");
}
