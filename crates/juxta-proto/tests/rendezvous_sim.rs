//! A deterministic simulator for the rendezvous service: virtual time in
//! ms, in-memory message passing with a fixed one-way latency, no sockets,
//! no threads, no clock. Every peer is the same sans-IO
//! [`RendezvousNode`] the runtime (`juxta::rendezvous`) drives; the
//! simulator only moves messages, answers dials, and plays the resolver
//! and the application (an edge answers queries for the items it holds).
//! It checks the protocol's end-to-end properties: leases, SRDI
//! publication and lookup, fail-over after a rendezvous is killed (bounded
//! by the protocol's own constants), no query lost, the flooding and
//! centralized models, busy answers, and memory bounds.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;

use juxta_proto::advertisement::PeerAdvertisement;
use juxta_proto::endpoint::ServiceAddress;
use juxta_proto::id::{IdFormat, IdType, JxtaId, PeerGroupId, PeerId};
use juxta_proto::message::Message;
use juxta_proto::rendezvous::edge::EdgeConfig;
use juxta_proto::rendezvous::messages::{lease_address, BusyNotice, LeaseMessage};
use juxta_proto::rendezvous::node::{
    lookup_peers, NodeEvent, RendezvousConfig, RendezvousNode, LOOKUP_HANDLER,
};
use juxta_proto::rendezvous::server::ServerConfig;
use juxta_proto::rendezvous::Transmit;
use juxta_proto::resolver::{
    query_queue, response_queue, srdi_queue, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use juxta_proto::srdi::flow::AdmissionConfig;
use juxta_proto::srdi::node::SrdiNodeConfig;
use juxta_proto::srdi::search::SearchModel;
use juxta_proto::srdi::{ResolverSrdi, SrdiEntry, SrdiMessage};

/// One-way latency of every simulated link.
const LAT: u64 = 5;
const GROUP: &str = "jxta-NetGroup";
/// The handler of the application's queries (answered by the publisher).
const HANDLER: &str = "juxta-sim";
const PKEY: &str = "Adv";
const ATTR: &str = "Name";
const ENTRY_LIFE_MS: i64 = 3_600_000;

fn pid(kind: u8, n: u32) -> PeerId {
    let mut u = [0u8; 16];
    u[0] = kind;
    u[1..5].copy_from_slice(&n.to_be_bytes());
    JxtaId::from_parts(IdFormat::Cbid, [0x59; 16], u, IdType::Peer)
        .try_into()
        .unwrap()
}

fn pa(p: PeerId, name: &str) -> bytes::Bytes {
    PeerAdvertisement::new(p, PeerGroupId::NET, name)
        .to_xml()
        .into()
}

/// The (never opened) address of rendezvous `i`.
fn rdv_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9000 + i as u16))
}

fn ores() -> ServiceAddress {
    ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(GROUP)))
}

fn ires() -> ServiceAddress {
    ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(GROUP)))
}

fn srdi_addr() -> ServiceAddress {
    ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(GROUP)))
}

fn srdi_msg(m: &SrdiMessage) -> Message {
    let env = ResolverSrdi {
        handler: HANDLER.into(),
        payload: m.to_xml(),
    };
    Message::new().with(env.to_element(GROUP))
}

struct SimNode {
    node: RendezvousNode,
    alive: bool,
    /// Edge: the items it publishes and answers queries for.
    items: Vec<String>,
    /// Edge: answered queries: ID -> (value, publisher).
    answered: BTreeMap<i32, (String, PeerId)>,
    /// Edge: when it leased which rendezvous.
    connected_at: Vec<(u64, PeerId)>,
    /// Edge: the next ID of a query answered locally (negative).
    next_local: i32,
}

impl SimNode {
    fn rdv(&self) -> Option<PeerId> {
        self.node.leased_to()
    }
}

#[derive(Clone, Copy)]
enum NodeRef {
    Rdv(usize),
    Edge(usize),
}

struct Sim {
    now: u64,
    rdvs: Vec<SimNode>,
    edges: Vec<SimNode>,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    inflight: BTreeMap<u64, (PeerId, Transmit)>,
    seq: u64,
    ids: BTreeMap<String, NodeRef>,
    delivered: u64,
}

struct SimConfig {
    rdvs: usize,
    edges: usize,
    model: fn(&[PeerId]) -> SearchModel,
    admission: AdmissionConfig,
    edge: EdgeConfig,
    server: ServerConfig,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            rdvs: 3,
            edges: 50,
            model: |_| SearchModel::Srdi,
            admission: AdmissionConfig::default(),
            edge: EdgeConfig::default(),
            server: ServerConfig::default(),
        }
    }
}

fn sim_node(node: RendezvousNode, items: Vec<String>) -> SimNode {
    SimNode {
        node,
        alive: true,
        items,
        answered: BTreeMap::new(),
        connected_at: Vec::new(),
        next_local: -1,
    }
}

impl Sim {
    fn new(cfg: SimConfig) -> Sim {
        let rdv_ids: Vec<PeerId> = (0..cfg.rdvs as u32).map(|i| pid(1, i)).collect();
        let addrs: Vec<SocketAddr> = (0..cfg.rdvs).map(rdv_addr).collect();
        let model = (cfg.model)(&rdv_ids);
        let mut ids = BTreeMap::new();
        let mut rdvs = Vec::new();
        for (i, &r) in rdv_ids.iter().enumerate() {
            let rc = RendezvousConfig {
                server: cfg.server,
                srdi: SrdiNodeConfig {
                    model,
                    admission: cfg.admission,
                    ..SrdiNodeConfig::default()
                },
                peers: addrs.iter().copied().filter(|a| *a != addrs[i]).collect(),
                ..RendezvousConfig::rendezvous()
            };
            let node = RendezvousNode::new(rc, r, GROUP, pa(r, "rdv"), "rdv", i as u64);
            ids.insert(r.to_string(), NodeRef::Rdv(i));
            rdvs.push(sim_node(node, Vec::new()));
        }
        let mut edges = Vec::new();
        for i in 0..cfg.edges {
            let e = pid(2, i as u32);
            let rc = RendezvousConfig {
                edge: cfg.edge,
                first_seed: i,
                ..RendezvousConfig::edge(addrs.clone())
            };
            let mut node = RendezvousNode::new(rc, e, GROUP, pa(e, "edge"), "edge", i as u64);
            let items = vec![format!("item-{i}")];
            for v in &items {
                let key = (PKEY.to_string(), ATTR.to_string(), v.clone());
                node.publish(key, ENTRY_LIFE_MS, 0).unwrap();
            }
            ids.insert(e.to_string(), NodeRef::Edge(i));
            edges.push(sim_node(node, items));
        }
        Sim {
            now: 0,
            rdvs,
            edges,
            queue: BinaryHeap::new(),
            inflight: BTreeMap::new(),
            seq: 0,
            ids,
            delivered: 0,
        }
    }

    fn rdv_id(&self, i: usize) -> PeerId {
        self.rdvs[i].node.me()
    }

    fn edge_id(&self, i: usize) -> PeerId {
        self.edges[i].node.me()
    }

    fn node_mut(&mut self, r: NodeRef) -> &mut SimNode {
        match r {
            NodeRef::Rdv(i) => &mut self.rdvs[i],
            NodeRef::Edge(i) => &mut self.edges[i],
        }
    }

    fn refs(&self) -> Vec<NodeRef> {
        (0..self.rdvs.len())
            .map(NodeRef::Rdv)
            .chain((0..self.edges.len()).map(NodeRef::Edge))
            .collect()
    }

    /// Puts a message on the wire.
    fn send(&mut self, from: PeerId, t: Transmit) {
        self.seq += 1;
        self.queue.push(Reverse((self.now + LAT, self.seq)));
        self.inflight.insert(self.seq, (from, t));
    }

    /// Carries out every node's events and moves its output onto the wire.
    fn flush(&mut self) {
        let now = self.now;
        loop {
            let mut busy = false;
            for r in self.refs() {
                while let Some(ev) = self.node_mut(r).node.poll_event() {
                    busy = true;
                    self.on_event(r, ev);
                }
                let n = self.node_mut(r);
                let me = n.node.me();
                let alive = n.alive;
                let mut out = Vec::new();
                while let Some(t) = n.node.poll_transmit() {
                    out.push(t);
                }
                if alive {
                    for t in out {
                        self.send(me, t);
                    }
                }
            }
            if !busy {
                break;
            }
        }
        let _ = now;
    }

    fn on_event(&mut self, r: NodeRef, ev: NodeEvent) {
        let now = self.now;
        match ev {
            NodeEvent::Dial(a) => {
                // A dial reaches the rendezvous at that address if alive.
                let to = (0..self.rdvs.len())
                    .find(|&i| rdv_addr(i) == a && self.rdvs[i].alive)
                    .map(|i| self.rdv_id(i));
                self.node_mut(r).node.handle_dialed(a, to, now);
            }
            NodeEvent::Deliver {
                from,
                dest,
                message,
            } if dest == ores() => self.on_query(r, from, message),
            NodeEvent::LeaseGained(rdv) => self.node_mut(r).connected_at.push((now, rdv)),
            NodeEvent::Answered { id, response } => {
                let got = match response.split_once(' ') {
                    // An application answer: "value publisher".
                    Some((value, who)) if !value.starts_with("urn:") => {
                        Some((value.to_string(), who.parse().unwrap()))
                    }
                    // A lookup answer: the publishers (none: not answered).
                    _ => lookup_peers(&response)
                        .first()
                        .map(|p| (LOOKUP_HANDLER.to_string(), *p)),
                };
                if let Some(got) = got {
                    self.node_mut(r).answered.insert(id, got);
                }
            }
            _ => {}
        }
    }

    /// A resolver query arrived at node `r` (what the resolver does with
    /// it): a rendezvous hands it to its node, an edge answers it if it
    /// holds the item.
    fn on_query(&mut self, r: NodeRef, from: PeerId, msg: Message) {
        let now = self.now;
        let Ok(q) = ResolverQuery::from_message(&msg, GROUP) else {
            return;
        };
        match r {
            NodeRef::Rdv(i) => {
                let key = (q.handler == HANDLER)
                    .then(|| (PKEY.to_string(), ATTR.to_string(), q.query.clone()));
                self.rdvs[i].node.handle_query(Some(from), q, msg, key, now);
            }
            NodeRef::Edge(i) => {
                if q.handler == HANDLER && self.edges[i].items.contains(&q.query) {
                    let me = self.edge_id(i);
                    let resp = q.response(format!("{} {}", q.query, me));
                    let t = Transmit {
                        to: q.src_peer,
                        dest: ires(),
                        message: Message::new().with(resp.to_element(GROUP)),
                    };
                    if self.edges[i].alive {
                        self.send(me, t);
                    }
                }
            }
        }
    }

    fn next_timer(&self) -> Option<u64> {
        self.rdvs
            .iter()
            .chain(self.edges.iter())
            .filter(|n| n.alive)
            .filter_map(|n| n.node.poll_timeout())
            .min()
    }

    fn run_until(&mut self, end: u64) {
        let mut spins = 0u32;
        loop {
            self.flush();
            let next_msg = self.queue.peek().map(|Reverse((t, _))| *t);
            let next = match (next_msg, self.next_timer()) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if next > end {
                break;
            }
            if next <= self.now {
                spins += 1;
                assert!(
                    spins < 1_000_000,
                    "simulation does not advance at {}",
                    self.now
                );
            } else {
                spins = 0;
            }
            self.now = self.now.max(next);
            while let Some(Reverse((t, s))) = self.queue.peek().copied() {
                if t > self.now {
                    break;
                }
                self.queue.pop();
                let (from, tx) = self.inflight.remove(&s).unwrap();
                self.deliver(from, tx);
                self.flush();
            }
            self.timers();
        }
        self.now = self.now.max(end);
    }

    fn timers(&mut self) {
        let now = self.now;
        for r in self.refs() {
            let n = self.node_mut(r);
            if n.alive && n.node.poll_timeout().is_some_and(|t| t <= now) {
                n.node.handle_timeout(now);
            }
        }
    }

    fn deliver(&mut self, from: PeerId, tx: Transmit) {
        let now = self.now;
        let Some(&r) = self.ids.get(&tx.to.to_string()) else {
            return;
        };
        if !self.node_mut(r).alive {
            return;
        }
        self.delivered += 1;
        let Transmit { dest, message, .. } = tx;
        if dest == ores() {
            self.on_query(r, from, message);
        } else if dest == ires() {
            let n = &mut self.node_mut(r).node;
            if let Ok(Some(b)) = BusyNotice::from_message(&message) {
                n.handle_busy(b, now);
            } else if let Ok(resp) = ResolverResponse::from_message(&message, GROUP) {
                n.handle_response(resp, now);
            }
        } else {
            // The simulator's links are authenticated.
            let _ = self
                .node_mut(r)
                .node
                .handle_message(from, true, &dest, message, now);
        }
    }

    /// Edge `i` starts looking for `value`; returns the query ID.
    fn ask(&mut self, i: usize, value: String) -> i32 {
        let now = self.now;
        let me = self.edge_id(i);
        let e = &mut self.edges[i];
        if e.items.contains(&value) {
            // Found in its own cache, as the discovery service does.
            let id = e.next_local;
            e.next_local -= 1;
            e.answered.insert(id, (value, me));
            return id;
        }
        e.node.query(HANDLER, value, u64::MAX, now).unwrap()
    }

    /// Edge `i` looks up who published `value` (answered by the
    /// rendezvous from its index or its replica's).
    fn lookup(&mut self, i: usize, value: &str) -> i32 {
        let now = self.now;
        let key = (PKEY.to_string(), ATTR.to_string(), value.to_string());
        self.edges[i].node.lookup(&key, u64::MAX, now).unwrap()
    }

    /// Every edge asks for another edge's item; returns (edge, qid, owner).
    fn query_round(&mut self, salt: usize) -> Vec<(usize, i32, usize)> {
        let n = self.edges.len();
        let mut v = Vec::new();
        for i in 0..n {
            if !self.edges[i].alive {
                continue;
            }
            let owner = (i * 7 + 3 + salt) % n;
            let qid = self.ask(i, format!("item-{owner}"));
            v.push((i, qid, owner));
        }
        v
    }

    fn assert_answered(&self, round: &[(usize, i32, usize)]) {
        for &(i, qid, owner) in round {
            let got = self.edges[i].answered.get(&qid);
            assert!(
                got.is_some(),
                "edge {i} query {qid} for item-{owner} unanswered at {}",
                self.now
            );
            assert_eq!(got.unwrap().1, self.edge_id(owner));
        }
    }

    fn kill_rdv(&mut self, i: usize) {
        self.rdvs[i].alive = false;
        while self.rdvs[i].node.poll_transmit().is_some() {}
    }

    fn srv(&self, i: usize) -> &juxta_proto::rendezvous::server::RendezvousServer {
        self.rdvs[i].node.server().unwrap()
    }

    fn srdi(&self, i: usize) -> &juxta_proto::srdi::node::SrdiNode {
        self.rdvs[i].node.srdi().unwrap()
    }
}

fn setup(cfg: SimConfig) -> Sim {
    let mut sim = Sim::new(cfg);
    sim.run_until(3_000);
    for (i, e) in sim.edges.iter().enumerate() {
        assert!(e.rdv().is_some(), "edge {i} has no lease");
    }
    let total: usize = sim
        .rdvs
        .iter()
        .map(|r| r.node.server().unwrap().client_count())
        .sum();
    assert_eq!(total, sim.edges.len());
    for r in &sim.rdvs {
        assert_eq!(
            r.node.server().unwrap().peer_view().len(),
            sim.rdvs.len() - 1
        );
    }
    sim
}

#[test]
fn srdi_leases_lookup_failover_and_no_query_lost() {
    let mut sim = setup(SimConfig::default());
    // Spread: each rendezvous got a share of the edges.
    for r in &sim.rdvs {
        assert!(
            r.node.server().unwrap().client_count() >= 10,
            "{}",
            r.node.server().unwrap().client_count()
        );
    }
    // Every edge finds another edge's item through SRDI.
    let round1 = sim.query_round(0);
    sim.run_until(sim.now + 2_000);
    sim.assert_answered(&round1);

    // Kill rendezvous 1; edges on it must re-lease elsewhere.
    let victim = 1;
    let dead = sim.rdv_id(victim);
    let orphans: Vec<usize> = (0..sim.edges.len())
        .filter(|&i| sim.edges[i].rdv() == Some(dead))
        .collect();
    assert!(!orphans.is_empty());
    let kill_at = sim.now + 123; // mid-heartbeat
    sim.run_until(kill_at);
    sim.kill_rdv(victim);
    // Queries issued during the outage must not be lost.
    let during = sim.query_round(1);
    sim.run_until(kill_at + 10_000);

    let bound = EdgeConfig::default().detection_bound_ms() + 2 * LAT;
    for &i in &orphans {
        let e = &sim.edges[i];
        let (t, rdv) = *e
            .connected_at
            .iter()
            .find(|(t, _)| *t > kill_at)
            .unwrap_or_else(|| panic!("edge {i} never recovered"));
        assert_ne!(rdv, dead);
        assert!(
            t - kill_at <= bound,
            "edge {i} recovered after {} ms > bound {bound} ms",
            t - kill_at
        );
        assert_eq!(e.rdv(), Some(rdv));
    }
    for (i, r) in sim.rdvs.iter().enumerate() {
        if i != victim {
            assert!(!r.node.server().unwrap().peer_view().contains(&dead));
        }
    }
    let total: usize = (0..sim.rdvs.len())
        .filter(|&i| i != victim)
        .map(|i| sim.srv(i).client_count())
        .sum();
    assert_eq!(total, sim.edges.len());
    sim.assert_answered(&during);

    // After recovery every lookup succeeds again.
    let round2 = sim.query_round(2);
    sim.run_until(sim.now + 2_000);
    sim.assert_answered(&round2);
    for e in &sim.edges {
        assert_eq!(e.node.pending_queries(), 0);
        assert_eq!(e.node.status().busy, 0);
    }
}

#[test]
fn flooding_model_answers() {
    let mut sim = setup(SimConfig {
        model: |_| SearchModel::Flooding,
        ..SimConfig::default()
    });
    let round = sim.query_round(5);
    sim.run_until(sim.now + 2_000);
    sim.assert_answered(&round);
}

#[test]
fn centralized_model_answers() {
    let mut sim = setup(SimConfig {
        model: |rdvs| SearchModel::Centralized { server: rdvs[0] },
        ..SimConfig::default()
    });
    let round = sim.query_round(9);
    sim.run_until(sim.now + 2_000);
    sim.assert_answered(&round);
    // The central server holds every entry; the others hold none.
    assert_eq!(sim.srdi(0).index().len(), sim.edges.len());
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
        ..SimConfig::default()
    });
    let greedy = 0;
    let start = sim.now;
    let mut asked = Vec::new();
    for k in 0..40 {
        let owner = 1 + k % 49;
        asked.push((greedy, sim.ask(greedy, format!("item-{owner}")), owner));
    }
    let polite = sim.query_round(3);
    sim.run_until(start + 6_000);
    assert!(sim.edges[greedy].node.status().busy > 0);
    for &(i, _, _) in &polite {
        if i != greedy {
            assert_eq!(sim.edges[i].node.status().busy, 0, "edge {i} was told busy");
        }
    }
    // Nothing lost: the greedy edge's queries all complete after pacing.
    sim.assert_answered(&asked);
    sim.assert_answered(&polite);
    let busy: u64 = sim.rdvs.iter().map(|r| r.node.status().busy).sum();
    assert_eq!(busy, sim.edges[greedy].node.status().busy);
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
        ..SimConfig::default()
    });
    let target = sim.rdv_id(0);
    // 5,000 bogus lease requests with fresh peer IDs.
    for n in 0..5_000u32 {
        let p = pid(9, n);
        let m = LeaseMessage::Request {
            peer: p,
            peer_adv: pa(p, "bogus"),
        };
        sim.send(
            sim.edge_id(0),
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
        sim.send(
            sim.edge_id(0),
            Transmit {
                to: target,
                dest: srdi_addr(),
                message: srdi_msg(&m),
            },
        );
    }
    // Queries from 2,000 forged source peers.
    for n in 0..2_000u32 {
        let q = ResolverQuery {
            handler: HANDLER.into(),
            query_id: n as i32,
            hop_count: 0,
            src_peer: pid(8, n),
            query: "nothing".into(),
            src_route: None,
        };
        sim.send(
            sim.edge_id(0),
            Transmit {
                to: target,
                dest: ores(),
                message: Message::new().with(q.to_element(GROUP)),
            },
        );
    }
    sim.run_until(sim.now + 3_000);
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
    for (i, e) in sim.edges.iter().enumerate() {
        assert!(e.rdv().is_some(), "edge {i} lost its lease");
    }
    let round = sim.query_round(4);
    sim.run_until(sim.now + 3_000);
    sim.assert_answered(&round);
}

#[test]
fn simulation_is_deterministic() {
    let run = || {
        let mut sim = setup(SimConfig::default());
        let round = sim.query_round(0);
        sim.run_until(sim.now + 2_000);
        sim.assert_answered(&round);
        let conns: Vec<Option<PeerId>> = sim.edges.iter().map(|e| e.rdv()).collect();
        (sim.delivered, conns)
    };
    assert_eq!(run(), run());
}

#[test]
fn lookups_are_answered_by_the_rendezvous_through_replicas() {
    let mut sim = setup(SimConfig::default());
    // Every edge asks its rendezvous who published another edge's item:
    // the answer comes from its index, or from the replica it forwards
    // the lookup to (the answer relayed back).
    let n = sim.edges.len();
    let round: Vec<(usize, i32, usize)> = (0..n)
        .map(|i| {
            let owner = (i * 11 + 5) % n;
            (i, sim.lookup(i, &format!("item-{owner}")), owner)
        })
        .collect();
    sim.run_until(sim.now + 2_000);
    sim.assert_answered(&round);
    let relayed: usize = sim.rdvs.iter().map(|r| r.node.relayed_lookups()).sum();
    assert_eq!(relayed, 0, "every forwarded lookup was answered");
}
