//! Unit tests of [`Node`] on a socket-less trio (one rendezvous, two
//! edges) joined by in-memory links, as quinn-proto's `Pair`: the
//! resolver routes lookups to the rendezvous part itself, and the
//! owner's handlers get their queries as events.

use std::collections::VecDeque;

use bytes::Bytes;

use super::*;
use crate::advertisement::PeerAdvertisement;
use crate::id::{IdFormat, IdType, JxtaId, PeerGroupId};
use crate::message::{Element, NS_JXTA};
use crate::rendezvous::node::{lookup_peers, RendezvousConfig};
use crate::resolver::query_queue;

const G: &str = "jxta-NetGroup";
const APP: &str = "node-test-app";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum App {
    Items,
    Shared,
}

fn pid(kind: u8, n: u32) -> PeerId {
    let mut u = [0u8; 16];
    u[0] = kind;
    u[1..5].copy_from_slice(&n.to_be_bytes());
    JxtaId::from_parts(IdFormat::Cbid, [0x42; 16], u, IdType::Peer)
        .try_into()
        .unwrap()
}

fn rdv_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000))
}

struct Trio {
    now: Millis,
    nodes: Vec<Node<App>>,
    /// Owner events other than the rendezvous part's, per node.
    seen: Vec<Vec<Event<App>>>,
    /// What the edges hold (edge 1: "item-1").
    holds: Vec<Option<&'static str>>,
}

impl Trio {
    fn new() -> Trio {
        let mk = |cfg: RendezvousConfig, me: PeerId, name: &str, seed: u64| {
            let pa: Bytes = PeerAdvertisement::new(me, PeerGroupId::NET, name)
                .to_xml()
                .into();
            let mut rc = ResolverConfig::new(G);
            rc.query_burst = 3;
            rc.query_rate = 1.0;
            let mut n = Node::new(RendezvousNode::new(cfg, me, G, pa, name, seed), rc).unwrap();
            n.register(Handler::exact(App::Items, APP).own_admission())
                .unwrap();
            n.register(Handler::exact(App::Shared, "shared")).unwrap();
            n
        };
        let nodes = vec![
            mk(RendezvousConfig::rendezvous(), pid(1, 0), "rdv", 1),
            mk(RendezvousConfig::edge(vec![rdv_addr()]), pid(2, 0), "e0", 2),
            mk(RendezvousConfig::edge(vec![rdv_addr()]), pid(2, 1), "e1", 3),
        ];
        let mut t = Trio {
            now: 0,
            seen: vec![Vec::new(), Vec::new(), Vec::new()],
            holds: vec![None, Some("item-1"), None],
            nodes,
        };
        t.flush();
        t
    }

    fn index(&self, p: &PeerId) -> Option<usize> {
        self.nodes.iter().position(|n| n.me() == *p)
    }

    /// Moves every transmit and event until nothing is left.
    fn flush(&mut self) {
        let mut wire = VecDeque::new();
        loop {
            let mut more = false;
            for i in 0..self.nodes.len() {
                while let Some(ev) = self.nodes[i].poll_event() {
                    more = true;
                    self.on_event(i, ev);
                }
                while let Some(t) = self.nodes[i].poll_transmit() {
                    more = true;
                    wire.push_back((self.nodes[i].me(), t));
                }
            }
            while let Some((from, t)) = wire.pop_front() {
                more = true;
                if let Some(j) = self.index(&t.to) {
                    let _ = self.nodes[j].handle_message(from, true, &t.dest, t.message, self.now);
                }
            }
            if !more {
                return;
            }
        }
    }

    /// What the owner does: dials, the application's handler.
    fn on_event(&mut self, i: usize, ev: Event<App>) {
        let now = self.now;
        match ev {
            Event::Rendezvous(NodeEvent::Dial(a)) => {
                let to = (a == rdv_addr()).then(|| self.nodes[0].me());
                self.nodes[i].handle_dialed(a, to, now);
            }
            Event::Query {
                key: App::Items,
                from,
                query,
                message,
            } => {
                if self.nodes[i].rendezvous().is_rendezvous() {
                    let key = Some(("Adv".into(), "Name".into(), query.query.clone()));
                    self.nodes[i].forward_query(Some(from), (*query).clone(), message, key, now);
                } else if self.holds[i] == Some(query.query.as_str()) {
                    let me = self.nodes[i].me();
                    self.nodes[i].respond(&query, format!("{} {me}", query.query));
                }
                self.seen[i].push(Event::Query {
                    key: App::Items,
                    from,
                    query,
                    message: Message::new(),
                });
            }
            Event::Rendezvous(_) => {}
            e => self.seen[i].push(e),
        }
    }

    fn advance(&mut self, ms: Millis) {
        let end = self.now + ms;
        while self.now < end {
            self.now += 10;
            for n in &mut self.nodes {
                if n.poll_timeout().is_some_and(|t| t <= self.now) {
                    n.handle_timeout(self.now);
                }
            }
            self.flush();
        }
    }
}

/// Runs `t` and collects edge `i`'s `Answered` events.
fn run_collect(t: &mut Trio, i: usize, ms: Millis) -> Vec<(i32, String)> {
    let mut got = Vec::new();
    let end = t.now + ms;
    while t.now < end {
        t.now += 10;
        let now = t.now;
        for n in &mut t.nodes {
            if n.poll_timeout().is_some_and(|x| x <= now) {
                n.handle_timeout(now);
            }
        }
        // Drain edge i's events first to see its answers.
        while let Some(ev) = t.nodes[i].poll_event() {
            match ev {
                Event::Rendezvous(NodeEvent::Answered { id, response }) => got.push((id, response)),
                e => t.on_event(i, e),
            }
        }
        t.flush_collect(i, &mut got);
    }
    got
}

impl Trio {
    fn flush_collect(&mut self, i: usize, got: &mut Vec<(i32, String)>) {
        let mut wire = VecDeque::new();
        loop {
            let mut more = false;
            for j in 0..self.nodes.len() {
                while let Some(ev) = self.nodes[j].poll_event() {
                    more = true;
                    match ev {
                        Event::Rendezvous(NodeEvent::Answered { id, response }) if j == i => {
                            got.push((id, response))
                        }
                        e => self.on_event(j, e),
                    }
                }
                while let Some(t) = self.nodes[j].poll_transmit() {
                    more = true;
                    wire.push_back((self.nodes[j].me(), t));
                }
            }
            while let Some((from, t)) = wire.pop_front() {
                more = true;
                if let Some(k) = self.index(&t.to) {
                    let _ = self.nodes[k].handle_message(from, true, &t.dest, t.message, self.now);
                }
            }
            if !more {
                return;
            }
        }
    }
}

#[test]
fn edges_lease_and_lookups_are_routed_to_the_rendezvous_part_by_the_resolver() {
    let mut t = Trio::new();
    t.advance(500);
    assert_eq!(t.nodes[1].rendezvous().leased_to(), Some(t.nodes[0].me()));
    assert_eq!(t.nodes[2].rendezvous().leased_to(), Some(t.nodes[0].me()));
    let key = ("Adv".to_string(), "Name".to_string(), "item-1".to_string());
    t.nodes[1]
        .rendezvous_mut()
        .publish(key, 60_000, t.now)
        .unwrap();
    t.advance(100);
    let now = t.now;
    let id = t.nodes[2]
        .rendezvous_mut()
        .lookup(&("Adv".into(), "Name".into(), "item-1".into()), 5_000, now)
        .unwrap();
    let got = run_collect(&mut t, 2, 500);
    let answer = got.iter().find(|(i, _)| *i == id).expect("lookup answered");
    assert_eq!(lookup_peers(&answer.1), vec![t.nodes[1].me()]);
    // The lookup passed the rendezvous' resolver (not the owner).
    assert!(t.nodes[0].resolver().stats().queries >= 1);
    assert!(t.seen[0].is_empty());
}

#[test]
fn owner_handlers_get_their_queries_and_answers_reach_the_asking_edge() {
    let mut t = Trio::new();
    t.advance(500);
    let key = ("Adv".to_string(), "Name".to_string(), "item-1".to_string());
    t.nodes[1]
        .rendezvous_mut()
        .publish(key, 60_000, t.now)
        .unwrap();
    t.advance(100);
    let now = t.now;
    let id = t.nodes[2]
        .rendezvous_mut()
        .query(APP, "item-1".into(), 5_000, now)
        .unwrap();
    let got = run_collect(&mut t, 2, 500);
    let me1 = t.nodes[1].me();
    assert!(got
        .iter()
        .any(|(i, r)| *i == id && *r == format!("item-1 {me1}")));
    // The rendezvous' owner saw the query (and handed it to the index);
    // the holder's owner saw it forwarded and answered.
    assert!(matches!(
        t.seen[0].first(),
        Some(Event::Query {
            key: App::Items,
            ..
        })
    ));
    assert!(matches!(
        t.seen[1].first(),
        Some(Event::Query {
            key: App::Items,
            ..
        })
    ));
}

#[test]
fn malformed_and_unknown_resolver_messages_are_refused_and_counted() {
    let mut t = Trio::new();
    let ores = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(G)));
    let junk = Message::new().with(Element::bytes(NS_JXTA, "Resolver", vec![0xff; 64]));
    let r = t.nodes[0].handle_message(pid(9, 9), true, &ores, junk, 0);
    assert!(matches!(
        r,
        Err(InputError::Resolver(Refusal::Malformed(_)))
    ));
    let q = ResolverQuery {
        handler: "nobody".into(),
        query_id: 1,
        hop_count: 0,
        src_peer: pid(9, 9),
        query: "x".into(),
        src_route: None,
    };
    let m = Message::new().with(q.to_element(G));
    let r = t.nodes[0].handle_message(pid(9, 9), true, &ores, m, 0);
    assert!(matches!(
        r,
        Err(InputError::Resolver(Refusal::NoHandler(_)))
    ));
    // A subgroup's queue: not served by this one-group node.
    let sub = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue("5ABC")));
    let r = t.nodes[0].handle_message(pid(9, 9), true, &sub, Message::new(), 0);
    assert!(matches!(
        r,
        Err(InputError::Resolver(Refusal::NotMember(_)))
    ));
    let s = t.nodes[0].resolver().stats();
    assert_eq!((s.malformed, s.no_handler, s.group_refused), (1, 1, 1));
    assert!(t.nodes[0].poll_event().is_none());
}

#[test]
fn a_flooding_querier_is_refused_while_another_is_served() {
    let mut t = Trio::new();
    let ores = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(G)));
    let ask = |t: &mut Trio, who: PeerId| {
        let q = ResolverQuery {
            handler: "shared".into(),
            query_id: 1,
            hop_count: 0,
            src_peer: who,
            query: "x".into(),
            src_route: None,
        };
        let m = Message::new().with(q.to_element(G));
        t.nodes[0].handle_message(who, true, &ores, m, 0)
    };
    for _ in 0..3 {
        assert!(ask(&mut t, pid(9, 1)).is_ok());
    }
    for _ in 0..5 {
        assert_eq!(
            ask(&mut t, pid(9, 1)),
            Err(InputError::Resolver(Refusal::Throttled(pid(9, 1))))
        );
    }
    assert!(ask(&mut t, pid(9, 2)).is_ok());
    assert_eq!(t.nodes[0].resolver().stats().throttled, 5);
    let mut shared = 0;
    while let Some(e) = t.nodes[0].poll_event() {
        if matches!(
            e,
            Event::Query {
                key: App::Shared,
                ..
            }
        ) {
            shared += 1;
        }
    }
    assert_eq!(shared, 4);
}

/// A resolver message the rendezvous part delivers (an edge propagated
/// it) passes the resolver too: a malformed one is reported as
/// [`Event::Refused`] (its sender is not the input's, so nothing returns
/// it), and a response for an owner's handler comes with `proven: false`
/// (its origin is as the propagation header says).
#[test]
fn propagated_resolver_messages_pass_the_resolver() {
    let mut t = Trio::new();
    t.advance(500);
    assert_eq!(t.nodes[1].rendezvous().leased_to(), Some(t.nodes[0].me()));
    let ores = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(G)));
    let junk = Message::new().with(Element::bytes(NS_JXTA, "Resolver", vec![0xff; 64]));
    let now = t.now;
    assert!(t.nodes[1]
        .rendezvous_mut()
        .propagate(&ores, junk, 3, now)
        .is_some());
    t.flush();
    assert!(t.seen[0]
        .iter()
        .any(|e| matches!(e, Event::Refused(Refusal::Malformed(_)))));
    assert!(t.nodes[0].resolver().stats().malformed >= 1);

    let ires = ServiceAddress::new(RESOLVER_SERVICE, Some(&crate::resolver::response_queue(G)));
    let r = ResolverResponse {
        handler: "shared".into(),
        query_id: 7,
        response: "r".into(),
    };
    let now = t.now;
    assert!(t.nodes[1]
        .rendezvous_mut()
        .propagate(&ires, Message::new().with(r.to_element(G)), 3, now)
        .is_some());
    t.flush();
    let me1 = t.nodes[1].me();
    assert!(t.seen[0].iter().any(|e| matches!(
        e,
        Event::Response { key: App::Shared, from, proven: false, response }
            if *from == me1 && response.query_id == 7
    )));
    // A response sent to the node directly came from a proven link.
    let r = ResolverResponse {
        handler: "shared".into(),
        query_id: 8,
        response: "r".into(),
    };
    let m = Message::new().with(r.to_element(G));
    t.nodes[0]
        .handle_message(me1, true, &ires, m, t.now)
        .unwrap();
    assert!(matches!(
        t.nodes[0].poll_event(),
        Some(Event::Response { proven: true, .. })
    ));
}

/// A node for a group where this peer runs no rendezvous service (as the
/// runtime's resolver task builds for such groups): it never dials,
/// leases or sends on its own; the owner's queries and responses come out
/// as events under the same admission; Juxta's lookups and busy notices
/// find nothing to act on.
#[test]
fn a_node_without_a_rendezvous_only_admits_and_routes() {
    let me = pid(3, 0);
    let pa: Bytes = PeerAdvertisement::new(me, PeerGroupId::NET, "plain")
        .to_xml()
        .into();
    let mut rc = ResolverConfig::new(G);
    rc.query_burst = 2;
    rc.query_rate = 1.0;
    let rdv = RendezvousNode::new(RendezvousConfig::none(), me, G, pa, "plain", 9);
    let mut n: Node<App> = Node::new(rdv, rc).unwrap();
    n.register(Handler::exact(App::Shared, "shared")).unwrap();
    // Time passes: nothing to dial, lease or send.
    for now in (0..60_000).step_by(100) {
        if n.poll_timeout().is_some_and(|t| t <= now) {
            n.handle_timeout(now);
        }
        assert!(n.poll_transmit().is_none());
        assert!(n.poll_event().is_none(), "at {now} ms");
    }
    assert!(!n.rendezvous().is_rendezvous());
    assert_eq!(n.rendezvous().leased_to(), None);

    let ores = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(G)));
    let ires = ServiceAddress::new(RESOLVER_SERVICE, Some(&crate::resolver::response_queue(G)));
    let query = |handler: &str, who: PeerId, text: &str| {
        let q = ResolverQuery {
            handler: handler.into(),
            query_id: 5,
            hop_count: 0,
            src_peer: who,
            query: text.into(),
            src_route: None,
        };
        Message::new().with(q.to_element(G))
    };
    // An owner's query: an event, charged to its querier.
    let asker = pid(9, 1);
    for _ in 0..2 {
        n.handle_message(asker, true, &ores, query("shared", asker, "x"), 60_000)
            .unwrap();
        assert!(matches!(
            n.poll_event(),
            Some(Event::Query { key: App::Shared, from, .. }) if from == asker
        ));
    }
    assert_eq!(
        n.handle_message(asker, true, &ores, query("shared", asker, "x"), 60_000),
        Err(InputError::Resolver(Refusal::Throttled(asker)))
    );
    // A Juxta lookup: nothing here to answer it from, nothing sent.
    let other = pid(9, 2);
    n.handle_message(
        other,
        true,
        &ores,
        query(LOOKUP_HANDLER, other, "Adv Name x"),
        60_000,
    )
    .unwrap();
    assert!(n.poll_event().is_none());
    assert!(n.poll_transmit().is_none());
    // An owner's response: an event with the link's proof.
    let r = ResolverResponse {
        handler: "shared".into(),
        query_id: 5,
        response: "r".into(),
    };
    n.handle_message(
        other,
        false,
        &ires,
        Message::new().with(r.to_element(G)),
        60_000,
    )
    .unwrap();
    assert!(matches!(
        n.poll_event(),
        Some(Event::Response { key: App::Shared, from, proven: false, .. }) if from == other
    ));
    assert!(n.poll_transmit().is_none());
}

#[test]
fn a_resolver_message_addressed_in_another_group_is_refused() {
    let mut t = Trio::new();
    let from = t.nodes[1].me();
    let to = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(G)));
    let now = t.now;
    // Mangled with another group's ID but for this group's queue.
    let r = t.nodes[0].handle_message_in(from, true, Some("other-group"), &to, Message::new(), now);
    assert!(
        matches!(r, Err(InputError::Resolver(Refusal::NotMember(ref g))) if g == G),
        "{r:?}"
    );
    // Addressed in this group, or in none: scoped in, then refused only
    // for what it is (an empty message carries no query).
    for addressed in [Some(G), None] {
        let r = t.nodes[0].handle_message_in(from, true, addressed, &to, Message::new(), now);
        assert!(
            !matches!(r, Err(InputError::Resolver(Refusal::NotMember(_)))),
            "{addressed:?}: {r:?}"
        );
    }
}
