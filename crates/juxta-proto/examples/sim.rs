//! The simulator as a library: `cargo run --release -p juxta-proto
//! --example sim -- PEERS RENDEZVOUS VIRTUAL_S` runs the `juxta sim`
//! defaults' load (1 lookup/s per 100 edges, 1 % churn per minute) and
//! prints the report (`juxta sim` in crates/juxta-cli is the full tool).

use juxta_proto::rendezvous::edge::EdgeConfig;
use juxta_proto::rendezvous::peerview::PeerViewConfig;
use juxta_proto::rendezvous::server::ServerConfig;
use juxta_proto::sim::{Dist, LinkModel, Sim, SimConfig, Workload};

fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("a number"))
        .collect();
    let (peers, rn, vs) = (
        *a.first().unwrap_or(&1_000) as usize,
        *a.get(1).unwrap_or(&10) as usize,
        *a.get(2).unwrap_or(&60),
    );
    let edges = peers.saturating_sub(rn);
    let cfg = SimConfig {
        rendezvous: rn,
        edges,
        record: false,
        seeds_per_edge: 3,
        rdv_peers: 8,
        link: LinkModel {
            latency_ms: Dist::Uniform {
                min: 2.0,
                max: 40.0,
            },
            bandwidth_mbit: Dist::Uniform {
                min: 10.0,
                max: 1000.0,
            },
            loss_pct: Dist::Const(0.0),
        },
        edge: EdgeConfig {
            heartbeat_ms: 10_000,
            response_timeout_ms: 1_000,
            ..EdgeConfig::default()
        },
        server: ServerConfig {
            max_clients: (edges.div_ceil(rn) * 4).max(200),
            peer_view: PeerViewConfig {
                probe_interval_ms: 60_000,
                failure_timeout_ms: 180_000,
                ..PeerViewConfig::default()
            },
            ..ServerConfig::default()
        },
        workload: Workload {
            query_rate_per_100: 1.0,
            churn_pct_per_min: 1.0,
            ..Workload::default()
        },
        ..SimConfig::default()
    };
    let t = std::time::Instant::now();
    let mut sim = Sim::new(cfg).expect("a valid configuration");
    for k in 1..=10 {
        sim.run_until(vs * 100 * k);
        let r = sim.report();
        let mut st = [0u64; 5];
        for i in 0..rn {
            let s = sim.srdi(i).stats();
            st[0] += s.rereplications;
            st[1] += s.rereplicated_messages;
            st[2] += s.held;
            st[3] += s.held_released;
            st[4] += s.held_dropped;
        }
        eprintln!("  srdi: rereplications, messages, held, released, dropped: {st:?}");
        eprintln!(
            "{} s virtual, {:.1} s wall, {} events, {} answered, {} correct",
            sim.now_ms() / 1000,
            t.elapsed().as_secs_f64(),
            sim.events(),
            r.answered,
            r.correct
        );
    }
    println!("{:#?}", sim.report());
}
