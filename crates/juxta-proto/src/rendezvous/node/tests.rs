//! Unit tests of [`RendezvousNode`] on a socket-less cluster: nodes joined
//! by in-memory links with a fixed latency, dials answered from a table,
//! and the resolver's part (queries to the node, answers and busy notices
//! back) played by the harness, as quinn-proto's `Pair`.

use std::collections::VecDeque;

use super::*;
use crate::advertisement::PeerAdvertisement;
use crate::id::{IdFormat, IdType, JxtaId};
use crate::srdi::search::SearchModel;

const G: &str = "jxta-NetGroup";
/// One-way latency of every link.
const LAT: Millis = 1;

fn pid(kind: u8, n: u32) -> PeerId {
    let mut u = [0u8; 16];
    u[0] = kind;
    u[1..5].copy_from_slice(&n.to_be_bytes());
    JxtaId::from_parts(IdFormat::Cbid, [0x42; 16], u, IdType::Peer)
        .try_into()
        .unwrap()
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000 + i as u16))
}

fn ores() -> ServiceAddress {
    ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(G)))
}

fn ires() -> ServiceAddress {
    ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(G)))
}

fn key(v: &str) -> SrdiKey {
    ("Adv".into(), "Name".into(), v.into())
}

struct Node {
    n: RendezvousNode,
    addr: SocketAddr,
    alive: bool,
    events: Vec<(Millis, NodeEvent)>,
}

/// Drops a message on the wire when it returns true.
type Filter = Box<dyn FnMut(&PeerId, &Transmit) -> bool>;

struct Cluster {
    now: Millis,
    nodes: Vec<Node>,
    wire: VecDeque<(Millis, PeerId, Transmit)>,
    /// Every message put on the wire: (time, from, message).
    log: Vec<(Millis, PeerId, Transmit)>,
    filter: Option<Filter>,
}

impl Cluster {
    /// `rdvs` rendezvous (each with the others as peers) and `edges` edges
    /// seeded with every rendezvous, edge `i` trying rendezvous `i` first.
    fn new(rdvs: usize, edges: usize, model: fn(&[PeerId]) -> SearchModel) -> Cluster {
        Cluster::with(rdvs, edges, model, |c| c)
    }

    fn with(
        rdvs: usize,
        edges: usize,
        model: fn(&[PeerId]) -> SearchModel,
        tweak: fn(RendezvousConfig) -> RendezvousConfig,
    ) -> Cluster {
        let rdv_ids: Vec<PeerId> = (0..rdvs as u32).map(|i| pid(1, i)).collect();
        let addrs: Vec<SocketAddr> = (0..rdvs).map(addr).collect();
        let mut nodes = Vec::new();
        for (i, &me) in rdv_ids.iter().enumerate() {
            let cfg = tweak(
                RendezvousConfig::rendezvous()
                    .model(model(&rdv_ids))
                    .peers(addrs.iter().copied().filter(|a| *a != addrs[i]).collect()),
            );
            let pa: Bytes = PeerAdvertisement::new(me, PeerGroupId::NET, "rdv")
                .to_xml()
                .into();
            nodes.push(Node {
                n: RendezvousNode::new(cfg, me, G, pa, "rdv", i as u64),
                addr: addrs[i],
                alive: true,
                events: Vec::new(),
            });
        }
        for i in 0..edges {
            let me = pid(2, i as u32);
            let cfg = tweak(RendezvousConfig::edge(addrs.clone()).first_seed(i));
            let pa: Bytes = PeerAdvertisement::new(me, PeerGroupId::NET, "edge")
                .to_xml()
                .into();
            nodes.push(Node {
                n: RendezvousNode::new(cfg, me, G, pa, "edge", 100 + i as u64),
                addr: addr(1000 + i),
                alive: true,
                events: Vec::new(),
            });
        }
        let mut c = Cluster {
            now: 0,
            nodes,
            wire: VecDeque::new(),
            log: Vec::new(),
            filter: None,
        };
        c.flush();
        c
    }

    fn id(&self, i: usize) -> PeerId {
        self.nodes[i].n.me()
    }

    fn index_of(&self, p: &PeerId) -> Option<usize> {
        self.nodes.iter().position(|n| n.n.me() == *p)
    }

    fn flush(&mut self) {
        loop {
            let mut more = false;
            for i in 0..self.nodes.len() {
                while let Some(ev) = self.nodes[i].n.poll_event() {
                    more = true;
                    if let NodeEvent::Dial(a) = ev {
                        let to = self
                            .nodes
                            .iter()
                            .find(|n| n.addr == a && n.alive)
                            .map(|n| n.n.me());
                        let now = self.now;
                        self.nodes[i].n.handle_dialed(a, to, now);
                    }
                    self.nodes[i].events.push((self.now, ev));
                }
                let me = self.nodes[i].n.me();
                while let Some(t) = self.nodes[i].n.poll_transmit() {
                    if !self.nodes[i].alive {
                        continue;
                    }
                    self.log.push((self.now, me, t.clone()));
                    if let Some(f) = self.filter.as_mut() {
                        if f(&me, &t) {
                            continue;
                        }
                    }
                    self.wire.push_back((self.now + LAT, me, t));
                }
            }
            if !more {
                break;
            }
        }
    }

    fn deliver(&mut self, from: PeerId, t: Transmit) {
        let now = self.now;
        let Some(i) = self.index_of(&t.to) else {
            return;
        };
        if !self.nodes[i].alive {
            return;
        }
        let n = &mut self.nodes[i].n;
        if t.dest == ores() {
            if n.is_rendezvous() {
                if let Ok(q) = ResolverQuery::from_message(&t.message, G) {
                    n.handle_query(Some(from), q, t.message, None, now);
                }
            }
        } else if t.dest == ires() {
            if let Ok(Some(b)) = BusyNotice::from_message(&t.message) {
                n.handle_busy(b, now);
            } else if let Ok(r) = ResolverResponse::from_message(&t.message, G) {
                n.handle_response(r, now);
            }
        } else {
            let _ = n.handle_message(from, true, &t.dest, t.message, now);
        }
    }

    fn run_until(&mut self, end: Millis) {
        loop {
            self.flush();
            let timer = self
                .nodes
                .iter()
                .filter(|n| n.alive)
                .filter_map(|n| n.n.poll_timeout())
                .min();
            let msg = self.wire.front().map(|w| w.0);
            let Some(next) = [timer, msg].into_iter().flatten().min() else {
                break;
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            while self.wire.front().is_some_and(|w| w.0 <= self.now) {
                let (_, from, t) = self.wire.pop_front().unwrap();
                self.deliver(from, t);
                self.flush();
            }
            let now = self.now;
            for n in self.nodes.iter_mut().filter(|n| n.alive) {
                if n.n.poll_timeout().is_some_and(|t| t <= now) {
                    n.n.handle_timeout(now);
                }
            }
        }
        self.now = self.now.max(end);
    }

    /// The answers node `i` got: query ID -> publishers.
    fn answers(&self, i: usize) -> Vec<(QueryId, Vec<PeerId>)> {
        self.nodes[i]
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                NodeEvent::Answered { id, response } => Some((*id, lookup_peers(response))),
                _ => None,
            })
            .collect()
    }

    /// Lookups node `from` sent (time, query ID).
    fn lookups_sent(&self, from: usize) -> Vec<(Millis, QueryId)> {
        let me = self.id(from);
        self.log
            .iter()
            .filter(|(_, f, t)| *f == me && t.dest == ores())
            .filter_map(|(at, _, t)| {
                let q = ResolverQuery::from_message(&t.message, G).ok()?;
                Some((*at, q.query_id))
            })
            .collect()
    }
}

fn leased(c: &mut Cluster, edges: std::ops::Range<usize>) {
    c.run_until(c.now + 2_000);
    for i in edges {
        assert!(c.nodes[i].n.leased_to().is_some(), "node {i} has no lease");
    }
}

#[test]
fn first_events_are_dials_of_the_seeds() {
    let me = pid(2, 0);
    let cfg = RendezvousConfig::edge(vec![addr(0), addr(1), addr(0)]);
    let mut n = RendezvousNode::new(cfg, me, G, Bytes::new(), "e", 0);
    assert_eq!(n.poll_event(), Some(NodeEvent::Dial(addr(0))));
    assert_eq!(n.poll_event(), Some(NodeEvent::Dial(addr(1))));
    assert_eq!(n.poll_event(), None);
}

#[test]
fn seeds_learned_at_run_time_are_dialled_and_leased_from() {
    // An edge with no seed (LAN discovery gives it one later).
    let me = pid(2, 0);
    let mut n = RendezvousNode::new(
        RendezvousConfig::edge(Vec::new()),
        me,
        G,
        Bytes::new(),
        "e",
        0,
    );
    assert_eq!(n.poll_event(), None);
    assert_eq!(n.poll_timeout(), None);
    n.add_seed(addr(3), 5);
    assert_eq!(n.poll_event(), Some(NodeEvent::Dial(addr(3))));
    // Known already: nothing more.
    n.add_seed(addr(3), 6);
    assert_eq!(n.poll_event(), None);
    // The dial reaches a rendezvous: the edge asks it for a lease.
    let rdv = pid(1, 0);
    n.handle_dialed(addr(3), Some(rdv), 7);
    let t = n.poll_transmit().expect("a lease request");
    assert_eq!(t.to, rdv);
    // Bounded: the oldest address goes first.
    for i in 0..MAX_LINK_ADDRS + 5 {
        n.add_seed(addr(100 + i), 10);
    }
    let links = match &n.side {
        Side::Edge(e) => e.links.addrs.len(),
        Side::Rdv(_) => unreachable!(),
    };
    assert_eq!(links, MAX_LINK_ADDRS);
}

#[test]
fn failed_seeds_are_redialled_at_most_every_redial_ms() {
    let me = pid(2, 0);
    let mut n = RendezvousNode::new(
        RendezvousConfig::edge(vec![addr(0)]),
        me,
        G,
        Bytes::new(),
        "e",
        0,
    );
    assert_eq!(n.poll_event(), Some(NodeEvent::Dial(addr(0))));
    n.handle_dialed(addr(0), None, 10);
    // The first failure is redialled at once, then paced.
    assert_eq!(n.poll_timeout(), Some(0));
    n.handle_timeout(10);
    assert_eq!(n.poll_event(), Some(NodeEvent::Dial(addr(0))));
    n.handle_dialed(addr(0), None, 20);
    assert_eq!(n.poll_timeout(), Some(10 + REDIAL_MS));
    n.handle_timeout(10 + REDIAL_MS - 1);
    assert_eq!(n.poll_event(), None);
    n.handle_timeout(10 + REDIAL_MS);
    assert_eq!(n.poll_event(), Some(NodeEvent::Dial(addr(0))));
    // A dial in progress is never doubled.
    n.handle_timeout(10 + 3 * REDIAL_MS);
    assert_eq!(n.poll_event(), None);
}

#[test]
fn edge_leases_publishes_and_looks_up() {
    let mut c = Cluster::new(1, 2, |_| SearchModel::Srdi);
    leased(&mut c, 1..3);
    let now = c.now;
    c.nodes[1].n.publish(key("printer"), 60_000, now).unwrap();
    let id = c.nodes[2].n.lookup(&key("printer"), 5_000, now).unwrap();
    c.run_until(now + 100);
    assert_eq!(c.answers(2), vec![(id, vec![c.id(1)])]);
    assert_eq!(c.nodes[2].n.pending_queries(), 0);
    assert_eq!(c.nodes[2].n.status().answered, 1);
    assert_eq!(c.nodes[0].n.status().clients, 2);
    assert_eq!(c.nodes[0].n.status().index_entries, 1);
}

#[test]
fn commands_check_their_role_and_input() {
    let mut c = Cluster::new(1, 1, |_| SearchModel::Srdi);
    assert_eq!(
        c.nodes[0].n.publish(key("x"), 1, 0),
        Err(NodeError::NotEdge)
    );
    assert_eq!(
        c.nodes[0].n.lookup(&key("x"), 1, 0),
        Err(NodeError::NotEdge)
    );
    assert_eq!(c.nodes[0].n.shutdown(0), Err(NodeError::NotEdge));
    let bad = ("Adv".to_string(), "Na\tme".to_string(), "x".to_string());
    assert_eq!(
        c.nodes[1].n.publish(bad, 1, 0),
        Err(NodeError::Invalid("attribute"))
    );
    assert_eq!(
        c.nodes[1].n.lookup(&key(""), 1, 0),
        Err(NodeError::Invalid("value"))
    );
    let long = "v".repeat(MAX_KEY_LEN + 1);
    assert_eq!(
        srdi_key("Adv", "Name", &long),
        Err(NodeError::Invalid("value"))
    );
}

#[test]
fn lookup_is_resent_after_query_retry_ms_when_unanswered() {
    let mut c = Cluster::new(1, 2, |_| SearchModel::Srdi);
    leased(&mut c, 1..3);
    let now = c.now;
    c.nodes[1].n.publish(key("printer"), 60_000, now).unwrap();
    c.run_until(now + 10);
    // The first copy of every lookup is lost.
    let mut lost = false;
    c.filter = Some(Box::new(move |_, t| {
        if t.dest == ores() && !lost {
            lost = true;
            return true;
        }
        false
    }));
    let t0 = c.now;
    let id = c.nodes[2].n.lookup(&key("printer"), 10_000, t0).unwrap();
    c.run_until(t0 + QUERY_RETRY_MS - 1);
    assert!(c.answers(2).is_empty());
    c.run_until(t0 + QUERY_RETRY_MS + 10);
    assert_eq!(c.answers(2), vec![(id, vec![c.id(1)])]);
    let sent = c.lookups_sent(2);
    assert_eq!(sent, vec![(t0, id), (t0 + QUERY_RETRY_MS, id)]);
}

#[test]
fn lookup_times_out_at_its_deadline() {
    let mut c = Cluster::new(1, 1, |_| SearchModel::Srdi);
    leased(&mut c, 1..2);
    c.filter = Some(Box::new(|_, t| t.dest == ores()));
    let t0 = c.now;
    let id = c.nodes[1].n.lookup(&key("x"), 2_500, t0).unwrap();
    c.run_until(t0 + 3_000);
    let timed_out: Vec<_> = c.nodes[1]
        .events
        .iter()
        .filter(|(_, e)| *e == NodeEvent::TimedOut { id })
        .map(|(at, _)| *at)
        .collect();
    assert_eq!(timed_out, vec![t0 + 2_500]);
    assert_eq!(c.nodes[1].n.pending_queries(), 0);
    // Sent at 0, 1000 and 2000 ms, never after the deadline.
    assert_eq!(c.lookups_sent(1).len(), 3);
}

#[test]
fn busy_answer_defers_the_lookup_capped_even_for_u64_max() {
    let mut c = Cluster::new(1, 1, |_| SearchModel::Srdi);
    leased(&mut c, 1..2);
    // The rendezvous never sees the lookup; the edge is told "busy" with
    // the most hostile delay a peer can send.
    c.filter = Some(Box::new(|_, t| t.dest == ores()));
    let t0 = c.now;
    let id = c.nodes[1].n.lookup(&key("x"), u64::MAX, t0).unwrap();
    c.run_until(t0 + 1);
    let b = BusyNotice {
        query_id: id,
        retry_after_ms: u64::MAX,
    };
    c.nodes[1].n.handle_busy(b, t0 + 1);
    assert_eq!(c.nodes[1].n.status().busy, 1);
    c.run_until(t0 + 1 + MAX_BUSY_RETRY_MS + 10);
    let sent: Vec<Millis> = c.lookups_sent(1).iter().map(|s| s.0).collect();
    // Not re-sent after QUERY_RETRY_MS: held for the capped delay.
    assert_eq!(sent, vec![t0, t0 + 1 + MAX_BUSY_RETRY_MS]);
    // A busy notice for an unknown query only counts.
    let b = BusyNotice {
        query_id: 9_999,
        retry_after_ms: 0,
    };
    c.nodes[1].n.handle_busy(b, c.now);
    assert_eq!(c.nodes[1].n.status().busy, 2);
}

#[test]
fn busy_retry_is_capped_and_saturating() {
    // Whatever a peer sends, the retry comes within the cap.
    assert_eq!(busy_retry_at(5, u64::MAX), 5 + MAX_BUSY_RETRY_MS);
    assert_eq!(
        busy_retry_at(5, MAX_BUSY_RETRY_MS + 1),
        5 + MAX_BUSY_RETRY_MS
    );
    assert_eq!(busy_retry_at(5, 250), 255);
    // Zero still waits a little; the end of time saturates.
    assert_eq!(busy_retry_at(5, 0), 6);
    assert_eq!(busy_retry_at(u64::MAX - 1, u64::MAX), u64::MAX);
}

#[test]
fn busy_answers_from_admission_pace_a_greedy_edge_and_nothing_is_lost() {
    let mut c = Cluster::with(
        1,
        2,
        |_| SearchModel::Srdi,
        |cfg| {
            cfg.admission(AdmissionConfig {
                per_querier_rate: 10,
                per_querier_burst: 2,
                ..AdmissionConfig::default()
            })
        },
    );
    leased(&mut c, 1..3);
    let now = c.now;
    c.nodes[1].n.publish(key("printer"), 600_000, now).unwrap();
    c.run_until(now + 10);
    let now = c.now;
    let ids: Vec<QueryId> = (0..20)
        .map(|_| c.nodes[2].n.lookup(&key("printer"), 60_000, now).unwrap())
        .collect();
    c.run_until(now + 10_000);
    assert!(c.nodes[2].n.status().busy > 0);
    assert_eq!(c.nodes[2].n.status().busy, c.nodes[0].n.status().busy);
    let mut got: Vec<QueryId> = c.answers(2).iter().map(|a| a.0).collect();
    got.sort();
    assert_eq!(got, ids);
}

#[test]
fn lookup_is_forwarded_to_the_central_server_and_the_answer_relayed() {
    // Rendezvous 0 is the central server; edge 3 leases rendezvous 1.
    let mut c = Cluster::new(2, 2, |r| SearchModel::Centralized { server: r[0] });
    leased(&mut c, 2..4);
    assert_eq!(c.nodes[3].n.leased_to(), Some(c.id(1)));
    assert_eq!(c.nodes[2].n.leased_to(), Some(c.id(0)));
    let now = c.now;
    c.nodes[2].n.publish(key("printer"), 60_000, now).unwrap();
    c.run_until(now + 50);
    let now = c.now;
    let id = c.nodes[3].n.lookup(&key("printer"), 5_000, now).unwrap();
    c.run_until(now + 50);
    assert_eq!(c.answers(3), vec![(id, vec![c.id(2)])]);
    // Rendezvous 1 forwarded it (its own query ID) and forgot it once
    // relayed.
    let fwd = c
        .log
        .iter()
        .filter(|(_, f, t)| *f == c.id(1) && t.to == c.id(0) && t.dest == ores())
        .count();
    assert_eq!(fwd, 1);
    assert_eq!(c.nodes[1].n.relayed_lookups(), 0);
}

#[test]
fn forwarded_lookup_table_is_bounded_and_expires() {
    let mut c = Cluster::new(1, 0, |_| SearchModel::Srdi);
    let edge = pid(2, 1);
    let Side::Rdv(r) = &mut c.nodes[0].n.side else {
        unreachable!()
    };
    let mut st = NodeStats::default();
    let mut ids = BTreeSet::new();
    for k in 0..(MAX_RELAYED_LOOKUPS + 10) {
        ids.insert(RendezvousNode::relay_insert(
            r, &mut st, edge, k as i32, 100,
        ));
    }
    assert_eq!(r.relayed.len(), MAX_RELAYED_LOOKUPS);
    assert_eq!(st.relay_evicted, 10);
    // IDs are never 0 and unique among the live entries.
    assert!(!ids.contains(&0));
    // Answered entries leave stale order records; they stay bounded.
    let live: Vec<QueryId> = r.relayed.keys().copied().collect();
    for id in live {
        r.relayed.remove(&id);
    }
    for k in 0..(3 * MAX_RELAYED_LOOKUPS) {
        let id = RendezvousNode::relay_insert(r, &mut st, edge, k as i32, 200);
        r.relayed.remove(&id);
    }
    assert!(r.relay_order.len() <= 2 * MAX_RELAYED_LOOKUPS);
    // Unanswered entries expire after RELAY_TTL_MS.
    RendezvousNode::relay_insert(r, &mut st, edge, 1, 300);
    assert_eq!(r.relayed.len(), 1);
    c.nodes[0].n.handle_timeout(300 + RELAY_TTL_MS);
    assert_eq!(c.nodes[0].n.relayed_lookups(), 0);
    assert_eq!(c.nodes[0].n.stats().relay_expired, 1);
}

#[test]
fn relayed_answer_for_an_unknown_id_is_ignored() {
    let mut c = Cluster::new(1, 0, |_| SearchModel::Srdi);
    let r = ResolverResponse {
        handler: LOOKUP_HANDLER.into(),
        query_id: 77,
        response: String::new(),
    };
    c.nodes[0].n.handle_response(r, 5);
    assert_eq!(c.nodes[0].n.poll_transmit(), None);
}

#[test]
fn hostile_hop_count_and_long_answers_are_bounded() {
    // A lookup with the largest hop count is past the hop limit: not
    // forwarded (no overflow), no relay entry; one hop is forwarded with 2.
    let mut c = Cluster::new(2, 1, |r| SearchModel::Centralized { server: r[0] });
    leased(&mut c, 2..3);
    let q = ResolverQuery {
        handler: LOOKUP_HANDLER.into(),
        query_id: 5,
        hop_count: u32::MAX,
        src_peer: c.id(2),
        query: "Adv\tName\tx".into(),
        src_route: None,
    };
    let now = c.now;
    let from = c.id(2);
    let forwarded = |c: &mut Cluster, q: ResolverQuery| {
        let raw = Message::new().with(q.to_element(G));
        c.nodes[1].n.handle_query(Some(from), q, raw, None, now);
        std::iter::from_fn(|| c.nodes[1].n.poll_transmit())
            .filter(|t| t.dest == ores())
            .map(|t| ResolverQuery::from_message(&t.message, G).unwrap())
            .collect::<Vec<_>>()
    };
    assert!(forwarded(&mut c, q.clone()).is_empty());
    assert_eq!(c.nodes[1].n.relayed_lookups(), 0);
    let fwd = forwarded(&mut c, ResolverQuery { hop_count: 1, ..q });
    assert_eq!(fwd.len(), 1);
    assert_eq!(fwd[0].hop_count, 2);
    assert_eq!(c.nodes[1].n.relayed_lookups(), 1);
    // An answer listing many peers is read up to MAX_ANSWER_PEERS.
    let many: Vec<String> = (0..1_000).map(|i| pid(3, i).to_string()).collect();
    assert_eq!(lookup_peers(&many.join(" ")).len(), MAX_ANSWER_PEERS);
    assert!(lookup_peers("garbage not-an-id").is_empty());
}

#[test]
fn srdi_republish_is_chunked_per_primary_key() {
    let mut c = Cluster::new(1, 1, |_| SearchModel::Srdi);
    // Published before any lease: pushed when the lease starts.
    let n = 2 * MAX_ENTRIES_PER_MESSAGE + 1;
    for k in 0..n {
        c.nodes[1]
            .n
            .publish(key(&format!("v{k}")), 600_000, 0)
            .unwrap();
    }
    let other = ("Grp".to_string(), "Name".to_string(), "g".to_string());
    c.nodes[1].n.publish(other, 600_000, 0).unwrap();
    assert_eq!(
        c.nodes[1].n.poll_transmit(),
        None,
        "nothing sent before a lease"
    );
    leased(&mut c, 1..2);
    let srdi = ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(G)));
    let msgs: Vec<SrdiMessage> = c
        .log
        .iter()
        .filter(|(_, f, t)| *f == c.id(1) && t.dest == srdi)
        .map(|(_, _, t)| {
            ResolverSrdi::from_message(&t.message, G)
                .unwrap()
                .srdi_message()
                .unwrap()
        })
        .collect();
    // At least two full-count chunks of "Adv" plus the remainder, and one
    // of "Grp"; each parsed back (so within the document bound).
    assert!(msgs.len() >= 4, "{}", msgs.len());
    assert!(msgs
        .iter()
        .all(|m| m.entries.len() <= MAX_ENTRIES_PER_MESSAGE));
    assert_eq!(msgs.iter().filter(|m| m.primary_key == "Grp").count(), 1);
    let adv: usize = msgs
        .iter()
        .filter(|m| m.primary_key == "Adv")
        .map(|m| m.entries.len())
        .sum();
    assert_eq!(adv, n);
    assert_eq!(c.nodes[0].n.status().index_entries, n + 1);
    // The bound on published entries.
    let e = &mut c.nodes[1].n;
    for k in n + 1..MAX_PUBLISHED {
        e.publish(key(&format!("v{k}")), 1, 0).unwrap();
    }
    assert_eq!(
        e.publish(key("one-too-many"), 1, 0),
        Err(NodeError::TooMany("published entries"))
    );
    // Re-publishing a known key is not a new entry.
    e.publish(key("v0"), 5, 0).unwrap();
}

#[test]
fn queries_for_unlinked_publishers_go_to_the_peer_view() {
    let mut c = Cluster::new(3, 1, |_| SearchModel::Srdi);
    leased(&mut c, 3..4);
    assert_eq!(c.nodes[0].n.server().unwrap().peer_view().len(), 2);
    let stranger = pid(9, 9);
    let t = Transmit {
        to: stranger,
        dest: ores(),
        message: Message::new(),
    };
    let now = c.now;
    c.nodes[0].n.handle_undeliverable(t, now);
    let mut to: Vec<PeerId> = std::iter::from_fn(|| c.nodes[0].n.poll_transmit())
        .filter(|t| t.dest == ores())
        .map(|t| t.to)
        .collect();
    to.sort_by_key(|p| p.to_string());
    let mut want = vec![c.id(1), c.id(2)];
    want.sort_by_key(|p| p.to_string());
    assert_eq!(to, want);
    // Anything else undeliverable to a leased edge ends its lease.
    let edge = c.id(3);
    let leased_here = c.nodes[0].n.clients().contains(&edge);
    let t = Transmit {
        to: edge,
        dest: ires(),
        message: Message::new(),
    };
    c.nodes[0].n.handle_undeliverable(t, now);
    if leased_here {
        assert!(!c.nodes[0].n.clients().contains(&edge));
    }
}

#[test]
fn peer_view_forms_and_entries_are_replicated() {
    let mut c = Cluster::new(3, 3, |_| SearchModel::Srdi);
    leased(&mut c, 3..6);
    for i in 0..3 {
        assert_eq!(c.nodes[i].n.status().view, 2);
        assert!(c.nodes[i]
            .events
            .iter()
            .any(|(_, e)| matches!(e, NodeEvent::RendezvousJoined(_))));
    }
    let now = c.now;
    c.nodes[3].n.publish(key("printer"), 600_000, now).unwrap();
    c.run_until(now + 50);
    // Held by the edge's rendezvous and replicated to the one its hash
    // names (possibly the same).
    let holders = (0..3)
        .filter(|&i| c.nodes[i].n.status().index_entries > 0)
        .count();
    assert!(holders >= 1);
    // Every edge finds it, wherever it leases.
    let now = c.now;
    for i in 4..6 {
        c.nodes[i].n.lookup(&key("printer"), 5_000, now).unwrap();
    }
    c.run_until(now + 100);
    for i in 4..6 {
        assert_eq!(c.answers(i).len(), 1, "edge {i}");
        assert_eq!(c.answers(i)[0].1, vec![c.id(3)]);
    }
}

#[test]
fn failover_after_silent_rendezvous_death_restores_lookups() {
    let mut c = Cluster::new(2, 2, |_| SearchModel::Srdi);
    leased(&mut c, 2..4);
    let now = c.now;
    c.nodes[2].n.publish(key("printer"), 600_000, now).unwrap();
    c.run_until(now + 50);
    // Edge 2 leases rendezvous 0, which dies silently.
    assert_eq!(c.nodes[2].n.leased_to(), Some(c.id(0)));
    let killed = c.now;
    c.nodes[0].alive = false;
    let bound = EdgeConfig::default().detection_bound_ms();
    c.run_until(killed + bound + 100);
    assert_eq!(c.nodes[2].n.leased_to(), Some(c.id(1)));
    let lost = c.nodes[2]
        .events
        .iter()
        .any(|(_, e)| matches!(e, NodeEvent::LeaseLost { rdv, .. } if *rdv == c.id(0)));
    assert!(lost);
    // The entry was republished to the new rendezvous: lookups work.
    let now = c.now;
    let id = c.nodes[3].n.lookup(&key("printer"), 5_000, now).unwrap();
    c.run_until(now + 100);
    assert!(c.answers(3).contains(&(id, vec![c.id(2)])));
}

#[test]
fn link_down_fails_over_at_once_and_releases_clients() {
    let mut c = Cluster::new(2, 1, |_| SearchModel::Srdi);
    leased(&mut c, 2..3);
    let rdv = c.nodes[2].n.leased_to().unwrap();
    let ri = c.index_of(&rdv).unwrap();
    let now = c.now;
    c.nodes[2].n.publish(key("printer"), 600_000, now).unwrap();
    c.run_until(now + 10);
    assert!(c.nodes[ri].n.linked().is_empty() || c.nodes[ri].n.clients().contains(&c.id(2)));
    // The edge's link to its rendezvous closes: it asks the other at once.
    let now = c.now;
    let edge = c.id(2);
    c.nodes[2].n.handle_link_down(&rdv, now);
    c.flush();
    assert!(c.nodes[2]
        .events
        .iter()
        .any(|(_, e)| matches!(e, NodeEvent::LeaseLost { .. })));
    // The rendezvous sees the edge's link close: lease and entries go now.
    c.nodes[ri].n.handle_link_down(&edge, now);
    assert!(!c.nodes[ri].n.clients().contains(&edge));
    assert_eq!(c.nodes[ri].n.status().index_entries, 0);
    c.run_until(now + 2_000);
    let other = c.id(1 - ri);
    assert_eq!(c.nodes[2].n.leased_to(), Some(other));
}

#[test]
fn leases_of_silent_edges_expire() {
    let mut c = Cluster::with(
        1,
        1,
        |_| SearchModel::Srdi,
        |mut cfg| {
            cfg.server.lease_ms = 5_000;
            cfg
        },
    );
    leased(&mut c, 1..2);
    let now = c.now;
    c.nodes[1].n.publish(key("printer"), 600_000, now).unwrap();
    c.run_until(now + 10);
    assert_eq!(c.nodes[0].n.status().clients, 1);
    assert_eq!(c.nodes[0].n.status().index_entries, 1);
    c.nodes[1].alive = false;
    c.run_until(c.now + 5_000 + 2_000);
    assert_eq!(c.nodes[0].n.status().clients, 0);
    assert_eq!(c.nodes[0].n.status().index_entries, 0);
    assert!(c.nodes[0]
        .events
        .iter()
        .any(|(_, e)| matches!(e, NodeEvent::ClientLeft(_))));
}

#[test]
fn shutdown_ends_the_lease_politely() {
    let mut c = Cluster::new(1, 1, |_| SearchModel::Srdi);
    leased(&mut c, 1..2);
    let now = c.now;
    c.nodes[1].n.publish(key("printer"), 600_000, now).unwrap();
    c.run_until(now + 10);
    let now = c.now;
    c.nodes[1].n.shutdown(now).unwrap();
    c.run_until(now + 10);
    assert_eq!(c.nodes[0].n.status().clients, 0);
    assert_eq!(c.nodes[0].n.status().index_entries, 0);
    // And it leases no more.
    c.run_until(now + 30_000);
    assert_eq!(c.nodes[0].n.status().clients, 0);
}

#[test]
fn rendezvous_refuses_unproven_senders() {
    let mut c = Cluster::new(1, 0, |_| SearchModel::Srdi);
    let stranger = pid(9, 1);
    let m = super::super::messages::LeaseMessage::Request {
        peer: stranger,
        peer_adv: Bytes::new(),
    };
    let dest = super::super::messages::lease_address(&PeerGroupId::NET);
    let r = c.nodes[0]
        .n
        .handle_message(stranger, false, &dest, m.to_message(), 0);
    assert_eq!(r, Err(NodeError::Unproven));
    let srdi = ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(G)));
    let r = c.nodes[0]
        .n
        .handle_message(stranger, false, &srdi, Message::new(), 0);
    assert_eq!(r, Err(NodeError::Unproven));
    assert_eq!(c.nodes[0].n.stats().unproven, 2);
    assert_eq!(c.nodes[0].n.status().clients, 0);
}

#[test]
fn pending_lookups_are_bounded() {
    let mut c = Cluster::new(0, 1, |_| SearchModel::Srdi);
    let e = &mut c.nodes[0].n;
    for _ in 0..MAX_PENDING_LOOKUPS {
        e.lookup(&key("x"), 1_000, 0).unwrap();
    }
    assert_eq!(
        e.lookup(&key("x"), 1_000, 0),
        Err(NodeError::TooMany("pending lookups"))
    );
    // Query IDs are distinct and never 0.
    assert_eq!(e.pending_queries(), MAX_PENDING_LOOKUPS);
    // Without a lease nothing is sent, and they time out.
    e.handle_timeout(1_000);
    assert_eq!(e.pending_queries(), 0);
    assert_eq!(e.poll_transmit(), None);
}

#[test]
fn republished_envelopes_fit_the_document_bound() {
    // Entries with the longest values: a count-only chunk would be far
    // over the receiver's bound.
    let me = pid(2, 0);
    let mut published = BTreeMap::new();
    for k in 0..200 {
        let v = format!("{k:04}{}", "<".repeat(MAX_KEY_LEN - 4));
        published.insert(("Adv".to_string(), "Name".to_string(), v), 1_000);
    }
    let msgs = republish(me, &published);
    assert!(msgs.len() > 1);
    assert_eq!(msgs.iter().map(|m| m.entries.len()).sum::<usize>(), 200);
    for m in msgs {
        let t = srdi_transmit(G, pid(1, 0), &m);
        let back = ResolverSrdi::from_message(&t.message, G)
            .unwrap()
            .srdi_message()
            .unwrap();
        assert_eq!(back.entries.len(), m.entries.len());
    }
}

/// Propagation from an edge (issue #19): the edge hands the message to its
/// rendezvous, which delivers it and fans it out to its other edges and to
/// the peer view, whose members deliver it to their edges. Every other
/// peer gets it once, the origin never; a second propagation is a new
/// message; a replay of the same header is a duplicate everywhere.
#[test]
fn an_edge_propagates_through_its_rendezvous_to_every_peer_once() {
    let mut c = Cluster::new(2, 3, |_| SearchModel::Srdi);
    leased(&mut c, 2..5);
    c.run_until(c.now + 2_000);
    for i in 0..2 {
        assert_eq!(c.nodes[i].n.status().view, 1, "peer view formed");
    }
    let dest = ServiceAddress::new("PipeService", Some("urn:jxta:prop"));
    let delivered = |c: &Cluster, i: usize| {
        c.nodes[i]
            .events
            .iter()
            .filter(|(_, e)| matches!(e, NodeEvent::Deliver { dest: d, .. } if *d == dest))
            .count()
    };
    let now = c.now;
    // Edge 2 (node 4) leases rendezvous 0, like edge 0 (node 2); edge 1
    // (node 3) leases rendezvous 1.
    let id = c.nodes[4]
        .n
        .propagate(&dest, Message::new(), 5, now)
        .expect("leased: sent");
    c.run_until(now + 100);
    for i in 0..4 {
        assert_eq!(delivered(&c, i), 1, "node {i} got it once");
    }
    assert_eq!(delivered(&c, 4), 0, "not back to the origin");
    // The copy on the wire, replayed to everyone: duplicates, dropped.
    let copy = c
        .log
        .iter()
        .find(|(_, from, t)| *from == c.id(4) && t.dest.service == PROPAGATE_SERVICE)
        .map(|(_, _, t)| t.clone())
        .unwrap();
    let h = PropagateHeader::from_message(&copy.message, G).unwrap();
    assert_eq!(h.msg_id, id);
    let origin = c.id(4);
    for to in [c.id(0), c.id(1)] {
        let mut t = copy.clone();
        t.to = to;
        c.deliver(origin, t);
    }
    let now = c.now;
    c.run_until(now + 100);
    for i in 0..4 {
        assert_eq!(delivered(&c, i), 1, "node {i}: the replay is a duplicate");
    }
    // A rendezvous propagates too; an edge without a lease sends nothing.
    let now = c.now;
    assert!(c.nodes[1]
        .n
        .propagate(&dest, Message::new(), 5, now)
        .is_some());
    c.run_until(now + 100);
    for i in [0, 2, 3] {
        assert_eq!(delivered(&c, i), 2, "node {i}");
    }
    assert_eq!(
        delivered(&c, 4),
        1,
        "node 4: its own, never delivered, and this one"
    );
    assert_eq!(delivered(&c, 1), 1, "not back to the origin rendezvous");
    let lone = pid(2, 77);
    let mut n = RendezvousNode::new(
        RendezvousConfig::edge(vec![addr(0)]),
        lone,
        G,
        Bytes::new(),
        "e",
        7,
    );
    while n.poll_event().is_some() {}
    assert_eq!(n.propagate(&dest, Message::new(), 5, 0), None);
    assert!(n.poll_transmit().is_none());
}
