//! A deterministic simulator for the rendezvous and SRDI state machines:
//! virtual time in ms, in-memory message passing with a fixed one-way
//! latency, no sockets, no threads, no clock. It wires `RendezvousServer`,
//! `EdgeClient`, `SrdiIndex`, `Admission` and the search decision the way
//! the runtime will, and checks the protocol's end-to-end properties:
//! leases, SRDI publication and lookup, fail-over after a rendezvous is
//! killed (bounded by the protocol's own constants), no query lost, the
//! flooding and centralized models, busy answers, and memory bounds.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use juxta_proto::advertisement::PeerAdvertisement;
use juxta_proto::endpoint::ServiceAddress;
use juxta_proto::id::{IdFormat, IdType, JxtaId, PeerGroupId, PeerId};
use juxta_proto::message::Message;
use juxta_proto::rendezvous::edge::{EdgeClient, EdgeConfig, EdgeEvent};
use juxta_proto::rendezvous::messages::{
    lease_address, minimal_rdv_adv, BusyNotice, LeaseMessage, PROPAGATE_SERVICE, RDV_SERVICE,
};
use juxta_proto::rendezvous::server::{RendezvousServer, ServerConfig, ServerEvent};
use juxta_proto::rendezvous::Transmit;
use juxta_proto::resolver::{
    query_queue, response_queue, srdi_queue, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use juxta_proto::srdi::flow::AdmissionConfig;
use juxta_proto::srdi::node::{Arrival, SrdiAction, SrdiNode, SrdiNodeConfig};
use juxta_proto::srdi::placement::global_view;
use juxta_proto::srdi::search::SearchModel;
use juxta_proto::srdi::{ResolverSrdi, SrdiEntry, SrdiMessage, SCOPE_REPLICATE};

/// One-way latency of every simulated link.
const LAT: u64 = 5;
const GROUP: &str = "jxta-NetGroup";
const HANDLER: &str = "juxta-sim";
const PKEY: &str = "Adv";
const ATTR: &str = "Name";
/// How often an edge re-sends an unanswered query.
const QUERY_RETRY_MS: u64 = 1_000;
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

struct RdvNode {
    srv: RendezvousServer,
    srdi: SrdiNode,
    alive: bool,
    out: Vec<Transmit>,
}

struct Pending {
    value: String,
    next_send: u64,
}

struct EdgeNode {
    cli: EdgeClient,
    items: Vec<String>,
    pending: BTreeMap<i32, Pending>,
    answered: BTreeMap<i32, (String, PeerId)>,
    next_qid: i32,
    busy: u64,
    alive: bool,
    out: Vec<Transmit>,
    connected_at: Vec<(u64, PeerId)>,
}

#[derive(Clone, Copy)]
enum NodeRef {
    Rdv(usize),
    Edge(usize),
}

struct Sim {
    now: u64,
    rdvs: Vec<RdvNode>,
    edges: Vec<EdgeNode>,
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

impl Sim {
    fn new(cfg: SimConfig) -> Sim {
        let rdv_ids: Vec<PeerId> = (0..cfg.rdvs as u32).map(|i| pid(1, i)).collect();
        let model = (cfg.model)(&rdv_ids);
        let mut ids = BTreeMap::new();
        let mut rdvs = Vec::new();
        for (i, &r) in rdv_ids.iter().enumerate() {
            let radv = minimal_rdv_adv(&r, &PeerGroupId::NET, "rdv");
            let mut srv = RendezvousServer::new(
                r,
                PeerGroupId::NET,
                pa(r, "rdv"),
                radv.into(),
                cfg.server,
                i as u64,
            );
            for &o in &rdv_ids {
                srv.peer_view_mut().add_seed(o);
            }
            ids.insert(r.to_string(), NodeRef::Rdv(i));
            let srdi = SrdiNode::new(
                r,
                GROUP,
                HANDLER,
                SrdiNodeConfig {
                    model,
                    admission: cfg.admission,
                    ..SrdiNodeConfig::default()
                },
            );
            rdvs.push(RdvNode {
                srv,
                srdi,
                alive: true,
                out: Vec::new(),
            });
        }
        let mut edges = Vec::new();
        for i in 0..cfg.edges {
            let e = pid(2, i as u32);
            let cli = EdgeClient::new(
                e,
                PeerGroupId::NET,
                pa(e, "edge"),
                rdv_ids.clone(),
                cfg.edge,
            )
            .with_first_seed(i);
            ids.insert(e.to_string(), NodeRef::Edge(i));
            edges.push(EdgeNode {
                cli,
                items: vec![format!("item-{i}")],
                pending: BTreeMap::new(),
                answered: BTreeMap::new(),
                next_qid: 1,
                busy: 0,
                alive: true,
                out: Vec::new(),
                connected_at: Vec::new(),
            });
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
        self.rdvs[i].srv.me()
    }

    fn edge_id(&self, i: usize) -> PeerId {
        self.edges[i].cli.me()
    }

    /// Moves every node's output onto the wire.
    fn flush(&mut self) {
        let mut sends: Vec<(PeerId, Transmit)> = Vec::new();
        for r in &mut self.rdvs {
            let me = r.srv.me();
            while let Some(a) = r.srdi.poll_action() {
                match a {
                    SrdiAction::Send(t) => r.out.push(t),
                    SrdiAction::Walk { dest, message, ttl } => {
                        r.srv.walk(&dest, message, ttl);
                    }
                    SrdiAction::Flood { dest, message, ttl } => {
                        r.srv.propagate(&dest, message, ttl);
                    }
                }
            }
            while let Some(t) = r.srv.poll_transmit() {
                r.out.push(t);
            }
            if r.alive {
                sends.extend(r.out.drain(..).map(|t| (me, t)));
            } else {
                r.out.clear();
            }
        }
        for e in &mut self.edges {
            let me = e.cli.me();
            while let Some(t) = e.cli.poll_transmit() {
                e.out.push(t);
            }
            if e.alive {
                sends.extend(e.out.drain(..).map(|t| (me, t)));
            } else {
                e.out.clear();
            }
        }
        for (from, t) in sends {
            self.seq += 1;
            self.queue.push(Reverse((self.now + LAT, self.seq)));
            self.inflight.insert(self.seq, (from, t));
        }
    }

    fn next_timer(&self) -> Option<u64> {
        let r = self
            .rdvs
            .iter()
            .filter(|r| r.alive)
            .filter_map(|r| r.srv.poll_timeout().min(r.srdi.poll_timeout()));
        let e = self.edges.iter().filter(|e| e.alive).filter_map(|e| {
            let p = e.pending.values().map(|p| p.next_send).min();
            match (e.cli.poll_timeout(), p) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        });
        r.chain(e).min()
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
        for i in 0..self.rdvs.len() {
            if self.rdvs[i].alive && self.rdvs[i].srv.poll_timeout().is_some_and(|t| t <= now) {
                self.rdvs[i].srv.handle_timeout(now);
                self.rdv_events(i);
            }
            if self.rdvs[i].alive {
                self.rdvs[i].srdi.handle_timeout(now);
            }
        }
        for i in 0..self.edges.len() {
            if !self.edges[i].alive {
                continue;
            }
            if self.edges[i].cli.poll_timeout().is_some_and(|t| t <= now) {
                self.edges[i].cli.handle_timeout(now);
                self.edge_events(i);
            }
            let rdv = self.edges[i].cli.rendezvous();
            let me = self.edge_id(i);
            let e = &mut self.edges[i];
            for (&qid, p) in e.pending.iter_mut() {
                if p.next_send > now {
                    continue;
                }
                match rdv {
                    Some(r) => {
                        let q = ResolverQuery {
                            handler: HANDLER.into(),
                            query_id: qid,
                            hop_count: 0,
                            src_peer: me,
                            query: p.value.clone(),
                            src_route: None,
                        };
                        e.out.push(Transmit {
                            to: r,
                            dest: ores(),
                            message: Message::new().with(q.to_element(GROUP)),
                        });
                        p.next_send = now + QUERY_RETRY_MS;
                    }
                    None => p.next_send = now + 100,
                }
            }
        }
    }

    fn deliver(&mut self, from: PeerId, tx: Transmit) {
        let Some(&node) = self.ids.get(&tx.to.to_string()) else {
            return;
        };
        match node {
            NodeRef::Rdv(i) if self.rdvs[i].alive => {
                self.delivered += 1;
                self.rdv_receive(i, from, tx)
            }
            NodeRef::Edge(i) if self.edges[i].alive => {
                self.delivered += 1;
                self.edge_receive(i, from, tx)
            }
            _ => {}
        }
    }

    fn rdv_receive(&mut self, i: usize, from: PeerId, tx: Transmit) {
        let now = self.now;
        let dest = tx.dest.clone();
        if dest.service == RESOLVER_SERVICE {
            let p = dest.param.as_deref().unwrap_or("");
            if p == query_queue(GROUP) {
                self.rdv_query(i, tx.message, Arrival::Direct);
            } else if p == srdi_queue(GROUP) {
                let r = &mut self.rdvs[i];
                let view = global_view(r.srv.me(), r.srv.peer_view().members());
                let _ = r.srdi.handle_srdi(&from, &tx.message, &view, now);
            }
        } else {
            let _ = self.rdvs[i]
                .srv
                .handle_message(from, &dest, tx.message, now);
        }
        self.rdv_events(i);
    }

    fn rdv_events(&mut self, i: usize) {
        while let Some(ev) = self.rdvs[i].srv.poll_event() {
            match ev {
                ServerEvent::ClientLeft(p, _) => {
                    self.rdvs[i].srdi.remove_peer(&p);
                }
                ServerEvent::RendezvousJoined(_) | ServerEvent::RendezvousLeft(_) => {
                    // JXSE re-pushes periodically; here, on every view change.
                    let now = self.now;
                    let r = &mut self.rdvs[i];
                    let view = global_view(r.srv.me(), r.srv.peer_view().members());
                    let clients: Vec<PeerId> = r.srv.clients().collect();
                    r.srdi.rereplicate(clients, &view, now);
                }
                ServerEvent::Deliver {
                    dest,
                    message,
                    walk,
                    ..
                } => {
                    if dest == ores() {
                        let how = if walk.is_some() {
                            Arrival::Walked
                        } else {
                            Arrival::Flooded
                        };
                        self.rdv_query(i, message, how);
                    }
                }
                ServerEvent::ClientJoined(_) | ServerEvent::Refused(_) => {}
            }
        }
    }

    fn rdv_query(&mut self, i: usize, msg: Message, how: Arrival) {
        let now = self.now;
        let r = &mut self.rdvs[i];
        let Ok(q) = ResolverQuery::from_message(&msg, GROUP) else {
            return;
        };
        let view = global_view(r.srv.me(), r.srv.peer_view().members());
        let value = q.query.clone();
        r.srdi
            .handle_query(&q, msg, Some((PKEY, ATTR, &value)), how, &view, now);
    }

    fn edge_receive(&mut self, i: usize, from: PeerId, tx: Transmit) {
        let now = self.now;
        let me = self.edge_id(i);
        let e = &mut self.edges[i];
        let dest = tx.dest;
        if dest.service == RDV_SERVICE {
            let _ = e.cli.handle_message(from, &tx.message, now);
        } else if dest.service == PROPAGATE_SERVICE {
            if let Ok(Some(d)) = e.cli.accept_propagated(from, &tx.message) {
                if d == ores() {
                    Self::edge_query(e, me, &tx.message);
                }
            }
        } else if dest == ores() {
            Self::edge_query(e, me, &tx.message);
        } else if dest == ires() {
            if let Ok(Some(b)) = BusyNotice::from_message(&tx.message) {
                e.busy += 1;
                if let Some(p) = e.pending.get_mut(&b.query_id) {
                    p.next_send = now + b.retry_after_ms;
                }
            } else if let Ok(r) = ResolverResponse::from_message(&tx.message, GROUP) {
                if let Some(p) = e.pending.remove(&r.query_id) {
                    let (value, who) = r.response.split_once(' ').unwrap();
                    assert_eq!(value, p.value);
                    e.answered
                        .insert(r.query_id, (value.to_string(), who.parse().unwrap()));
                }
            }
        }
        self.edge_events(i);
    }

    fn edge_query(e: &mut EdgeNode, me: PeerId, msg: &Message) {
        let Ok(q) = ResolverQuery::from_message(msg, GROUP) else {
            return;
        };
        if e.items.contains(&q.query) {
            let r = q.response(format!("{} {}", q.query, me));
            e.out.push(Transmit {
                to: q.src_peer,
                dest: ires(),
                message: Message::new().with(r.to_element(GROUP)),
            });
        }
    }

    fn edge_events(&mut self, i: usize) {
        let now = self.now;
        let e = &mut self.edges[i];
        while let Some(ev) = e.cli.poll_event() {
            match ev {
                EdgeEvent::Connected { rdv, .. } => e.connected_at.push((now, rdv)),
                EdgeEvent::RepublishSrdi { rdv } => {
                    let m = SrdiMessage {
                        peer: e.cli.me(),
                        primary_key: PKEY.into(),
                        scope: SCOPE_REPLICATE,
                        entries: e
                            .items
                            .iter()
                            .map(|v| SrdiEntry {
                                key: ATTR.into(),
                                value: v.clone(),
                                expiration: ENTRY_LIFE_MS,
                            })
                            .collect(),
                    };
                    e.out.push(Transmit {
                        to: rdv,
                        dest: srdi_addr(),
                        message: srdi_msg(&m),
                    });
                }
                EdgeEvent::Lost { .. } => {}
            }
        }
    }

    /// Edge `i` starts looking for `value`; returns the query ID.
    fn ask(&mut self, i: usize, value: String) -> i32 {
        let now = self.now;
        let e = &mut self.edges[i];
        let qid = e.next_qid;
        e.next_qid += 1;
        e.pending.insert(
            qid,
            Pending {
                value,
                next_send: now,
            },
        );
        qid
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
        self.rdvs[i].out.clear();
    }
}

fn setup(cfg: SimConfig) -> Sim {
    let mut sim = Sim::new(cfg);
    sim.run_until(3_000);
    for (i, e) in sim.edges.iter().enumerate() {
        assert!(e.cli.rendezvous().is_some(), "edge {i} has no lease");
    }
    let total: usize = sim.rdvs.iter().map(|r| r.srv.client_count()).sum();
    assert_eq!(total, sim.edges.len());
    for r in &sim.rdvs {
        assert_eq!(r.srv.peer_view().len(), sim.rdvs.len() - 1);
    }
    sim
}

#[test]
fn srdi_leases_lookup_failover_and_no_query_lost() {
    let mut sim = setup(SimConfig::default());
    // Spread: each rendezvous got a share of the edges.
    for r in &sim.rdvs {
        assert!(r.srv.client_count() >= 10, "{}", r.srv.client_count());
    }
    // Every edge finds another edge's item through SRDI.
    let round1 = sim.query_round(0);
    sim.run_until(sim.now + 2_000);
    sim.assert_answered(&round1);

    // Kill rendezvous 1; edges on it must re-lease elsewhere.
    let victim = 1;
    let dead = sim.rdv_id(victim);
    let orphans: Vec<usize> = (0..sim.edges.len())
        .filter(|&i| sim.edges[i].cli.rendezvous() == Some(dead))
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
        assert_eq!(e.cli.rendezvous(), Some(rdv));
    }
    for (i, r) in sim.rdvs.iter().enumerate() {
        if i != victim {
            assert!(!r.srv.peer_view().contains(&dead));
        }
    }
    let total: usize = (0..sim.rdvs.len())
        .filter(|&i| i != victim)
        .map(|i| sim.rdvs[i].srv.client_count())
        .sum();
    assert_eq!(total, sim.edges.len());
    sim.assert_answered(&during);

    // After recovery every lookup succeeds again.
    let round2 = sim.query_round(2);
    sim.run_until(sim.now + 2_000);
    sim.assert_answered(&round2);
    for e in &sim.edges {
        assert!(e.pending.is_empty());
        assert_eq!(e.busy, 0);
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
    assert_eq!(sim.rdvs[0].srdi.index().len(), sim.edges.len());
    assert!(sim.rdvs[1].srdi.index().is_empty() && sim.rdvs[2].srdi.index().is_empty());
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
    assert!(sim.edges[greedy].busy > 0);
    for &(i, _, _) in &polite {
        if i != greedy {
            assert_eq!(sim.edges[i].busy, 0, "edge {i} was told busy");
        }
    }
    // Nothing lost: the greedy edge's queries all complete after pacing.
    sim.assert_answered(&asked);
    sim.assert_answered(&polite);
    let busy: u64 = sim.rdvs.iter().map(|r| r.srdi.stats().busy).sum();
    assert_eq!(busy, sim.edges[greedy].busy);
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
        sim.edges[0].out.push(Transmit {
            to: target,
            dest: lease_address(&PeerGroupId::NET),
            message: m.to_message(),
        });
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
        sim.edges[0].out.push(Transmit {
            to: target,
            dest: srdi_addr(),
            message: srdi_msg(&m),
        });
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
        sim.edges[0].out.push(Transmit {
            to: target,
            dest: ores(),
            message: Message::new().with(q.to_element(GROUP)),
        });
    }
    sim.run_until(sim.now + 3_000);
    let r = &sim.rdvs[0];
    assert!(r.srv.client_count() <= 60);
    assert!(r.srv.stats().refused > 0);
    assert_eq!(
        r.srdi.index().peer_len(&bogus),
        juxta_proto::srdi::index::DEFAULT_MAX_PER_PEER
    );
    assert!(r.srdi.index().len() <= juxta_proto::srdi::index::DEFAULT_MAX_ENTRIES);
    assert!(r.srdi.stats().refused_entries > 0);
    assert!(r.srdi.admission().tracked() <= 100);
    assert!(r.srdi.admission().stats().overflow > 0);
    // Legitimate edges still hold leases and still find items.
    for (i, e) in sim.edges.iter().enumerate() {
        assert!(e.cli.rendezvous().is_some(), "edge {i} lost its lease");
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
        let conns: Vec<Option<PeerId>> = sim.edges.iter().map(|e| e.cli.rendezvous()).collect();
        (sim.delivered, conns)
    };
    assert_eq!(run(), run());
}
