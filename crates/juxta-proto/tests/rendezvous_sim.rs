//! The rendezvous service on the library simulator ([`juxta_proto::sim`]):
//! every peer is the same sans-IO [`RendezvousNode`] the runtime
//! (`juxta::rendezvous`) drives; the simulator only moves messages,
//! answers dials, and plays the resolver and the application. These tests
//! check the protocol's end-to-end properties: leases, SRDI publication and
//! lookup, fail-over after a rendezvous is killed (bounded by the
//! protocol's own constants), no query lost, the flooding and centralized
//! models, busy answers, and memory bounds; and the simulator's own: the
//! same seed gives the same run, hostile peers are refused while honest
//! ones are served, successive kills leave no edge without a rendezvous.

use juxta_proto::id::{PeerGroupId, PeerId};
use juxta_proto::message::Message;
use juxta_proto::rendezvous::edge::EdgeConfig;
use juxta_proto::rendezvous::messages::{lease_address, LeaseMessage};
#[allow(unused_imports)]
use juxta_proto::rendezvous::node::RendezvousNode;
use juxta_proto::rendezvous::server::ServerConfig;
use juxta_proto::rendezvous::Transmit;
use juxta_proto::resolver::ResolverQuery;
use juxta_proto::sim::{
    query_address, sim_peer_adv, sim_peer_id, srdi_address, srdi_message, Dist, LinkModel, Model,
    Sim, SimConfig, SimReport, Workload, APP_HANDLER, ATTR, ENTRY_LIFE_MS, GROUP, PKEY,
};
use juxta_proto::srdi::flow::AdmissionConfig;
use juxta_proto::srdi::{SrdiEntry, SrdiMessage};

/// One-way latency of every simulated link in these tests, ms.
const LAT: u64 = 5;

fn config() -> SimConfig {
    SimConfig {
        rendezvous: 3,
        edges: 50,
        link: LinkModel {
            latency_ms: Dist::Const(LAT as f64),
            ..LinkModel::default()
        },
        ..SimConfig::default()
    }
}

/// Every edge asks for another edge's item; returns (edge, qid, owner).
fn query_round(sim: &mut Sim, salt: usize) -> Vec<(usize, i32, usize)> {
    let n = sim.config().edges;
    let mut v = Vec::new();
    for i in 0..n {
        if !sim.edge_alive(i) {
            continue;
        }
        let owner = (i * 7 + 3 + salt) % n;
        let qid = sim.ask(i, format!("item-{owner}"));
        v.push((i, qid, owner));
    }
    v
}

fn assert_answered(sim: &Sim, round: &[(usize, i32, usize)]) {
    for &(i, qid, owner) in round {
        let got = sim.answer(i, qid);
        assert!(
            got.is_some(),
            "edge {i} query {qid} for item-{owner} unanswered at {}",
            sim.now_ms()
        );
        assert_eq!(got.unwrap().1, sim.edge_id(owner));
    }
}

fn setup(cfg: SimConfig) -> Sim {
    let mut sim = Sim::new(cfg).unwrap();
    sim.run_until(3_000);
    let (rn, en) = (sim.config().rendezvous, sim.config().edges);
    for i in 0..en {
        assert!(sim.edge(i).leased_to().is_some(), "edge {i} has no lease");
    }
    let total: usize = (0..rn).map(|i| sim.srv(i).client_count()).sum();
    assert_eq!(total, en);
    for i in 0..rn {
        assert_eq!(sim.srv(i).peer_view().len(), rn - 1);
    }
    sim
}

#[test]
fn srdi_leases_lookup_failover_and_no_query_lost() {
    let mut sim = setup(config());
    // Spread: each rendezvous got a share of the edges.
    for i in 0..3 {
        assert!(
            sim.srv(i).client_count() >= 10,
            "{}",
            sim.srv(i).client_count()
        );
    }
    // Every edge finds another edge's item through SRDI.
    let round1 = query_round(&mut sim, 0);
    sim.run_until(sim.now_ms() + 2_000);
    assert_answered(&sim, &round1);

    // Kill rendezvous 1; edges on it must re-lease elsewhere.
    let victim = 1;
    let dead = sim.rdv_id(victim);
    let orphans: Vec<usize> = (0..50)
        .filter(|&i| sim.edge(i).leased_to() == Some(dead))
        .collect();
    assert!(!orphans.is_empty());
    let kill_at = sim.now_ms() + 123; // mid-heartbeat
    sim.run_until(kill_at);
    sim.kill_rdv(victim);
    // Queries issued during the outage must not be lost.
    let during = query_round(&mut sim, 1);
    sim.run_until(kill_at + 10_000);

    let bound = EdgeConfig::default().detection_bound_ms() + 2 * LAT;
    for &i in &orphans {
        let (t, rdv) = *sim
            .leases(i)
            .iter()
            .find(|(t, _)| *t > kill_at)
            .unwrap_or_else(|| panic!("edge {i} never recovered"));
        assert_ne!(rdv, dead);
        assert!(
            t - kill_at <= bound,
            "edge {i} recovered after {} ms > bound {bound} ms",
            t - kill_at
        );
        assert_eq!(sim.edge(i).leased_to(), Some(rdv));
    }
    for i in 0..3 {
        if i != victim {
            assert!(!sim.srv(i).peer_view().contains(&dead));
        }
    }
    let total: usize = (0..3)
        .filter(|&i| i != victim)
        .map(|i| sim.srv(i).client_count())
        .sum();
    assert_eq!(total, 50);
    assert_answered(&sim, &during);

    // After recovery every lookup succeeds again.
    let round2 = query_round(&mut sim, 2);
    sim.run_until(sim.now_ms() + 2_000);
    assert_answered(&sim, &round2);
    for i in 0..50 {
        assert_eq!(sim.edge(i).pending_queries(), 0);
        assert_eq!(sim.edge(i).status().busy, 0);
    }
}

#[test]
fn flooding_model_answers() {
    let mut sim = setup(SimConfig {
        model: Model::Flooding,
        ..config()
    });
    let round = query_round(&mut sim, 5);
    sim.run_until(sim.now_ms() + 2_000);
    assert_answered(&sim, &round);
}

#[test]
fn centralized_model_answers() {
    let mut sim = setup(SimConfig {
        model: Model::Centralized,
        ..config()
    });
    let round = query_round(&mut sim, 9);
    sim.run_until(sim.now_ms() + 2_000);
    assert_answered(&sim, &round);
    // The central server holds every entry; the others hold none.
    assert_eq!(sim.srdi(0).index().len(), 50);
    assert!(sim.srdi(1).index().is_empty() && sim.srdi(2).index().is_empty());
}

#[test]
fn greedy_querier_gets_busy_answers_others_served() {
    let mut sim = setup(SimConfig {
        admission: AdmissionConfig {
            per_querier_rate: 20,
            per_querier_burst: 2,
            ..AdmissionConfig::default()
        },
        ..config()
    });
    let greedy = 0;
    let start = sim.now_ms();
    let mut asked = Vec::new();
    for k in 0..40 {
        let owner = 1 + k % 49;
        asked.push((greedy, sim.ask(greedy, format!("item-{owner}")), owner));
    }
    let polite = query_round(&mut sim, 3);
    sim.run_until(start + 6_000);
    assert!(sim.edge(greedy).status().busy > 0);
    for &(i, _, _) in &polite {
        if i != greedy {
            assert_eq!(sim.edge(i).status().busy, 0, "edge {i} was told busy");
        }
    }
    // Nothing lost: the greedy edge's queries all complete after pacing.
    assert_answered(&sim, &asked);
    assert_answered(&sim, &polite);
    let busy: u64 = (0..3).map(|i| sim.rdv(i).status().busy).sum();
    assert_eq!(busy, sim.edge(greedy).status().busy);
}

#[test]
fn memory_bounds_hold_under_bogus_floods() {
    let mut sim = setup(SimConfig {
        server: ServerConfig {
            max_clients: 60,
            ..ServerConfig::default()
        },
        admission: AdmissionConfig {
            max_queriers: 100,
            ..AdmissionConfig::default()
        },
        ..config()
    });
    let target = sim.rdv_id(0);
    // 5,000 bogus lease requests with fresh peer IDs.
    for n in 0..5_000u32 {
        let p = sim_peer_id(9, n);
        let m = LeaseMessage::Request {
            peer: p,
            peer_adv: sim_peer_adv(p, "bogus"),
        };
        sim.inject(
            0,
            Transmit {
                to: target,
                dest: lease_address(&PeerGroupId::NET),
                message: m.to_message(),
            },
        );
    }
    // A publisher floods SRDI entries in its own name (entries in another
    // peer's name are refused outright): 12,000 entries in messages that
    // each fit the 64 KiB document bound.
    let bogus = sim.edge_id(0);
    for k in 0..30 {
        let m = SrdiMessage {
            peer: bogus,
            primary_key: PKEY.into(),
            scope: 0,
            entries: (0..400)
                .map(|j| SrdiEntry {
                    key: ATTR.into(),
                    value: format!("junk-{k}-{j}"),
                    expiration: ENTRY_LIFE_MS,
                })
                .collect(),
        };
        sim.inject(
            0,
            Transmit {
                to: target,
                dest: srdi_address(),
                message: srdi_message(&m),
            },
        );
    }
    // Queries from 2,000 forged source peers.
    for n in 0..2_000u32 {
        let q = ResolverQuery {
            handler: APP_HANDLER.into(),
            query_id: n as i32,
            hop_count: 0,
            src_peer: sim_peer_id(8, n),
            query: "nothing".into(),
            src_route: None,
        };
        sim.inject(
            0,
            Transmit {
                to: target,
                dest: query_address(),
                message: Message::new().with(q.to_element(GROUP)),
            },
        );
    }
    sim.run_until(sim.now_ms() + 3_000);
    let (srv, srdi) = (sim.srv(0), sim.srdi(0));
    assert!(srv.client_count() <= 60);
    assert!(srv.stats().refused > 0);
    assert_eq!(
        srdi.index().peer_len(&bogus),
        juxta_proto::srdi::index::DEFAULT_MAX_PER_PEER
    );
    assert!(srdi.index().len() <= juxta_proto::srdi::index::DEFAULT_MAX_ENTRIES);
    assert!(srdi.stats().refused_entries > 0);
    assert!(srdi.admission().tracked() <= 100);
    assert!(srdi.admission().stats().overflow > 0);
    // Legitimate edges still hold leases and still find items.
    for i in 0..50 {
        assert!(sim.edge(i).leased_to().is_some(), "edge {i} lost its lease");
    }
    let round = query_round(&mut sim, 4);
    sim.run_until(sim.now_ms() + 3_000);
    assert_answered(&sim, &round);
}

#[test]
fn simulation_is_deterministic() {
    let run = || {
        let mut sim = setup(config());
        let round = query_round(&mut sim, 0);
        sim.run_until(sim.now_ms() + 2_000);
        assert_answered(&sim, &round);
        let conns: Vec<Option<PeerId>> = (0..50).map(|i| sim.edge(i).leased_to()).collect();
        (sim.delivered(), conns)
    };
    assert_eq!(run(), run());
}

#[test]
fn lookups_are_answered_by_the_rendezvous_through_replicas() {
    let mut sim = setup(config());
    // Every edge asks its rendezvous who published another edge's item:
    // the answer comes from its index, or from the replica it forwards
    // the lookup to (the answer relayed back).
    let n = sim.config().edges;
    let round: Vec<(usize, i32, usize)> = (0..n)
        .map(|i| {
            let owner = (i * 11 + 5) % n;
            (i, sim.lookup(i, &format!("item-{owner}")), owner)
        })
        .collect();
    sim.run_until(sim.now_ms() + 2_000);
    assert_answered(&sim, &round);
    let relayed: usize = (0..3).map(|i| sim.rdv(i).relayed_lookups()).sum();
    assert_eq!(relayed, 0, "every forwarded lookup was answered");
}

/// A small network under load: jittery links, churn, lookups.
fn loaded(seed: u64) -> SimConfig {
    SimConfig {
        rendezvous: 4,
        edges: 200,
        seed,
        record: false,
        link: LinkModel {
            latency_ms: Dist::Uniform {
                min: 1.0,
                max: 20.0,
            },
            bandwidth_mbit: Dist::Const(100.0),
            loss_pct: Dist::Const(0.0),
        },
        workload: Workload {
            query_rate_per_100: 20.0,
            warmup_ms: 3_000,
            churn_pct_per_min: 5.0,
            ..Workload::default()
        },
        ..SimConfig::default()
    }
}

fn run(cfg: SimConfig, ms: u64) -> SimReport {
    let mut sim = Sim::new(cfg).unwrap();
    sim.run_until(ms);
    sim.report()
}

#[test]
fn same_seed_same_report_other_seed_other_run() {
    let a = run(loaded(7), 20_000);
    let b = run(loaded(7), 20_000);
    assert_eq!(a, b);
    assert!(a.issued > 0 && a.answered > 0 && a.crashes > 0, "{a:?}");
    let c = run(loaded(8), 20_000);
    assert_ne!(a, c);
}

#[test]
fn hostile_peers_are_refused_and_honest_peers_served() {
    let mut cfg = loaded(3);
    cfg.workload.churn_pct_per_min = 0.0;
    cfg.workload.hostile_pct = 10.0;
    cfg.workload.hostile_interval_ms = 50;
    // A querier may send 10 at once (a replay of 10 + 10 gets busy answers).
    cfg.admission = AdmissionConfig {
        per_querier_rate: 50,
        per_querier_burst: 10,
        ..AdmissionConfig::default()
    };
    let r = run(cfg, 20_000);
    assert_eq!(r.hostile_peers, 20);
    assert!(r.hostile_sent > 1_000, "{r:?}");
    let f = r.refusals;
    assert!(f.resolver_malformed > 0, "{f:?}");
    assert!(f.rdv_malformed > 0, "{f:?}");
    assert!(f.srdi_malformed > 0, "{f:?}");
    assert!(f.srdi_refused_entries > 0, "{f:?}");
    assert!(f.busy > 0, "{f:?}");
    assert!(r.answered > 500, "{r:?}");
    // Honest lookups are still answered correctly.
    assert!(r.honest_success_pct >= 99.0, "{r:?}");
    assert_eq!(r.leased_edges, r.live_edges);
}

#[test]
fn successive_kills_four_to_one_leave_no_edge_behind() {
    let mut cfg = loaded(5);
    cfg.workload.churn_pct_per_min = 0.0;
    cfg.workload.rdv_kills = 3;
    cfg.workload.kill_at_ms = 5_000;
    cfg.workload.kill_interval_ms = 5_000;
    let mut sim = Sim::new(cfg).unwrap();
    sim.run_until(30_000);
    let r = sim.report();
    assert_eq!(r.rdv_kills, 3);
    assert!(r.orphaned >= 200, "{r:?}");
    assert_eq!(r.recovered, r.orphaned, "{r:?}");
    assert_eq!(r.never_recovered, 0);
    assert_eq!(r.leased_edges, 200);
    // Everyone ends on the last rendezvous.
    assert_eq!(sim.srv(3).client_count(), 200);
    let bound = EdgeConfig::default().detection_bound_ms() as f64;
    assert!(
        r.recovery_ms_max > 0.0 && r.recovery_ms_max <= bound + 1_000.0,
        "{r:?}"
    );
}

#[test]
fn partitions_and_loss_cost_lookups_but_runs_stay_deterministic() {
    let mut cfg = loaded(11);
    cfg.link.loss_pct = Dist::Const(2.0);
    cfg.workload.partitions = vec![juxta_proto::sim::Partition {
        start_ms: 8_000,
        end_ms: 12_000,
        pct: 30,
    }];
    let a = run(cfg.clone(), 20_000);
    assert!(a.lost_link > 0 && a.lost_partition > 0, "{a:?}");
    assert!(a.answered > 0);
    assert_eq!(a, run(cfg, 20_000));
}
