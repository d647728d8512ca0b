//! Unit tests of [`ResolverNode`]: the resolver's rules without sockets
//! (the runtime's TCP tests cover the same behaviour end to end).

use proptest::prelude::*;

use super::*;
use crate::advertisement::route::AccessPointAdvertisement;
use crate::advertisement::RouteAdvertisement;
use crate::discovery::peerinfo::PEERINFO_HANDLER;
use crate::discovery::DISCOVERY_HANDLER;
use crate::endpoint::route_query::ROUTER_HANDLER;
use crate::id::{IdFormat, IdType, JxtaId};
use crate::message::{Element, NS_JXTA};
use crate::pipe::binding::PIPE_RESOLVER_HANDLER;
use crate::rendezvous::node::LOOKUP_HANDLER;
use crate::resolver::{query_queue, response_queue};

const NET: &str = "jxta-NetGroup";
const WORLD: &str = "jxta-WorldGroup";
const SUB: &str = "5ABC0000000000000000000000000000";
const OTHER: &str = "6DEF0000000000000000000000000000";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum H {
    Discovery,
    Pipes,
    PeerInfo,
    Route,
    Lookup,
    Crl,
}

fn pid(n: u32) -> PeerId {
    let mut u = [0u8; 16];
    u[1..5].copy_from_slice(&n.to_be_bytes());
    JxtaId::from_parts(IdFormat::Cbid, [0x42; 16], u, IdType::Peer)
        .try_into()
        .unwrap()
}

fn resolver() -> ResolverNode<H> {
    let mut cfg = ResolverConfig::new(NET);
    cfg.open.push(WORLD.to_string());
    cfg.query_rate = 10.0;
    cfg.query_burst = 5;
    cfg.max_tracked_peers = 8;
    let mut r = ResolverNode::new(cfg);
    r.register(Handler::prefix(H::Discovery, DISCOVERY_HANDLER).admit_unsolicited())
        .unwrap();
    r.register(Handler::exact(H::Pipes, PIPE_RESOLVER_HANDLER))
        .unwrap();
    r.register(Handler::exact(H::PeerInfo, PEERINFO_HANDLER))
        .unwrap();
    r.register(Handler::exact(H::Route, ROUTER_HANDLER))
        .unwrap();
    r.register(Handler::exact(H::Lookup, LOOKUP_HANDLER).own_admission())
        .unwrap();
    r.register(Handler::exact(H::Crl, "juxta.group.revocations").joined_only())
        .unwrap();
    r
}

fn query(handler: &str, src: PeerId, id: i32) -> ResolverQuery {
    ResolverQuery {
        handler: handler.to_string(),
        query_id: id,
        hop_count: 0,
        src_peer: src,
        query: "<q/>".to_string(),
        src_route: None,
    }
}

fn qmsg(g: &str, q: &ResolverQuery) -> Message {
    Message::new().with(q.to_element(g))
}

fn rmsg(g: &str, handler: &str, id: i32) -> Message {
    let r = ResolverResponse {
        handler: handler.to_string(),
        query_id: id,
        response: "<r/>".to_string(),
    };
    Message::new().with(r.to_element(g))
}

/// Feeds a query for `handler` from `from` (querier `src`) in group `g`.
fn ask(
    r: &mut ResolverNode<H>,
    g: &str,
    handler: &str,
    from: PeerId,
    src: PeerId,
    forwarder: bool,
    now: Millis,
) -> Result<Option<H>, Refusal> {
    let s = r.accept(Some(&query_queue(g)), None)?;
    r.handle_query(
        &s,
        Some(from),
        forwarder,
        qmsg(g, &query(handler, src, 1)),
        now,
    )?;
    Ok(match r.poll_event() {
        Some(ResolverEvent::Query { key, .. }) => Some(key),
        _ => None,
    })
}

#[test]
fn queries_go_to_the_handler_registered_under_their_name() {
    let mut r = resolver();
    let p = pid(1);
    assert_eq!(
        ask(&mut r, NET, PIPE_RESOLVER_HANDLER, p, p, false, 0),
        Ok(Some(H::Pipes))
    );
    assert_eq!(
        ask(&mut r, NET, PEERINFO_HANDLER, p, p, false, 0),
        Ok(Some(H::PeerInfo))
    );
    assert_eq!(
        ask(&mut r, NET, ROUTER_HANDLER, p, p, false, 0),
        Ok(Some(H::Route))
    );
    assert_eq!(
        ask(&mut r, NET, LOOKUP_HANDLER, p, p, false, 0),
        Ok(Some(H::Lookup))
    );
    // Discovery: the class URN alone, or followed by the group (JXSE).
    assert_eq!(
        ask(&mut r, NET, DISCOVERY_HANDLER, p, p, false, 0),
        Ok(Some(H::Discovery))
    );
    let named = format!("{DISCOVERY_HANDLER}{NET}");
    assert_eq!(
        ask(&mut r, NET, &named, p, p, false, 0),
        Ok(Some(H::Discovery))
    );
    // An exact handler does not match a longer name; unknown ones are
    // refused and counted.
    let longer = format!("{PIPE_RESOLVER_HANDLER}x");
    assert_eq!(
        ask(&mut r, NET, &longer, p, p, false, 0),
        Err(Refusal::NoHandler(longer.clone()))
    );
    assert_eq!(
        ask(&mut r, NET, "nobody", p, p, false, 0),
        Err(Refusal::NoHandler("nobody".into()))
    );
    assert_eq!(r.stats().no_handler, 2);
    assert_eq!(r.stats().queries, 6);
}

#[test]
fn the_query_event_carries_the_query_its_sender_and_group() {
    let mut r = resolver();
    let (from, src) = (pid(1), pid(2));
    let q = query(PIPE_RESOLVER_HANDLER, src, 42);
    let s = r.accept(Some(&query_queue(NET)), None).unwrap();
    assert_eq!(s.direction, Direction::Query);
    assert!(s.open);
    r.handle_query(&s, Some(from), false, qmsg(NET, &q), 0)
        .unwrap();
    match r.poll_event() {
        Some(ResolverEvent::Query {
            key,
            group,
            open,
            from: f,
            query,
            ..
        }) => {
            assert_eq!(key, H::Pipes);
            assert_eq!(group, NET);
            assert!(open);
            assert_eq!(f, Some(from));
            assert_eq!(*query, q);
        }
        e => panic!("unexpected {e:?}"),
    }
    assert_eq!(r.poll_event(), None);
}

#[test]
fn groups_not_joined_are_refused_and_open_groups_need_no_membership() {
    let mut r = resolver();
    let p = pid(1);
    // Net and World: open.
    assert_eq!(
        ask(&mut r, NET, PIPE_RESOLVER_HANDLER, p, p, false, 0),
        Ok(Some(H::Pipes))
    );
    assert_eq!(
        ask(&mut r, WORLD, PIPE_RESOLVER_HANDLER, p, p, false, 0),
        Ok(Some(H::Pipes))
    );
    // A subgroup: refused until joined, served while joined, refused
    // again once left.
    assert_eq!(
        r.accept(Some(&query_queue(SUB)), None),
        Err(Refusal::NotMember(SUB.into()))
    );
    assert_eq!(
        r.accept(Some(&response_queue(SUB)), None),
        Err(Refusal::NotMember(SUB.into()))
    );
    r.join(SUB).unwrap();
    let s = r.accept(Some(&query_queue(SUB)), None).unwrap();
    assert!(!s.open);
    assert_eq!(s.group, SUB);
    assert_eq!(s.queue(), query_queue(SUB));
    assert_eq!(
        ask(&mut r, SUB, PIPE_RESOLVER_HANDLER, p, p, false, 0),
        Ok(Some(H::Pipes))
    );
    r.leave(SUB);
    assert!(r.accept(Some(&query_queue(SUB)), None).is_err());
    assert_eq!(r.stats().group_refused, 3);
}

#[test]
fn a_message_addressed_in_one_group_for_another_groups_queue_is_refused() {
    let mut r = resolver();
    r.join(SUB).unwrap();
    r.join(OTHER).unwrap();
    // Addressed in the Net group (or not mangled): any served queue.
    assert!(r.accept(Some(&query_queue(SUB)), Some(NET)).is_ok());
    assert!(r.accept(Some(&query_queue(SUB)), Some(SUB)).is_ok());
    // Addressed in the subgroup, for the Net group's queue or another's.
    assert!(r.accept(Some(&query_queue(NET)), Some(SUB)).is_err());
    assert!(r.accept(Some(&query_queue(OTHER)), Some(SUB)).is_err());
    assert_eq!(r.stats().group_refused, 2);
}

#[test]
fn other_queues_are_not_the_resolvers() {
    let mut r = resolver();
    for q in [Some("jxta-NetGroupSrdi"), Some("whatever"), None] {
        assert!(matches!(r.accept(q, None), Err(Refusal::Unroutable(_))));
    }
    assert_eq!(r.stats().unroutable, 3);
}

#[test]
fn handlers_for_joined_groups_only_are_not_served_in_open_ones() {
    let mut r = resolver();
    r.join(SUB).unwrap();
    let p = pid(1);
    let crl = "juxta.group.revocations";
    assert_eq!(ask(&mut r, SUB, crl, p, p, false, 0), Ok(Some(H::Crl)));
    assert!(matches!(
        ask(&mut r, NET, crl, p, p, false, 0),
        Err(Refusal::NoHandler(_))
    ));
}

#[test]
fn a_flood_from_one_querier_is_refused_while_another_is_served() {
    let mut r = resolver();
    let (flood, other) = (pid(1), pid(2));
    // Every shared-budget kind draws on the same bucket (burst 5).
    let kinds = [
        DISCOVERY_HANDLER,
        PIPE_RESOLVER_HANDLER,
        PEERINFO_HANDLER,
        ROUTER_HANDLER,
        DISCOVERY_HANDLER,
    ];
    for k in kinds {
        assert!(ask(&mut r, NET, k, flood, flood, false, 0).is_ok());
    }
    for k in kinds {
        assert_eq!(
            ask(&mut r, NET, k, flood, flood, false, 0),
            Err(Refusal::Throttled(flood))
        );
    }
    assert_eq!(r.stats().throttled, 5);
    // Another querier has its own budget.
    assert_eq!(
        ask(&mut r, NET, PIPE_RESOLVER_HANDLER, other, other, false, 0),
        Ok(Some(H::Pipes))
    );
    // Lookups pass their handler's own flow control (the rendezvous'
    // busy notices), not the shared budget.
    assert_eq!(
        ask(&mut r, NET, LOOKUP_HANDLER, flood, flood, false, 0),
        Ok(Some(H::Lookup))
    );
    // Time refills the budget (10/s: one token per 100 ms).
    assert_eq!(
        ask(&mut r, NET, PIPE_RESOLVER_HANDLER, flood, flood, false, 100),
        Ok(Some(H::Pipes))
    );
    assert!(ask(&mut r, NET, PIPE_RESOLVER_HANDLER, flood, flood, false, 100).is_err());
    // A clock going backwards refills nothing and does not panic.
    assert!(ask(&mut r, NET, PIPE_RESOLVER_HANDLER, flood, flood, false, 0).is_err());
}

#[test]
fn forwarded_queries_are_charged_to_their_querier_not_to_the_forwarder() {
    let mut r = resolver();
    let fwd = pid(9);
    // A forwarder hands on queries of many queriers: none is refused.
    for n in 0..5 {
        for _ in 0..5 {
            assert!(ask(&mut r, NET, DISCOVERY_HANDLER, fwd, pid(100 + n), true, 0).is_ok());
        }
    }
    // The same from a peer that is not a forwarder: charged to it.
    for n in 0..5 {
        assert!(ask(
            &mut r,
            NET,
            DISCOVERY_HANDLER,
            pid(8),
            pid(200 + n),
            false,
            0
        )
        .is_ok());
    }
    assert!(ask(&mut r, NET, DISCOVERY_HANDLER, pid(8), pid(300), false, 0).is_err());
}

#[test]
fn the_table_of_queriers_is_bounded() {
    let mut r = resolver();
    for n in 0..8 {
        assert!(ask(&mut r, NET, PIPE_RESOLVER_HANDLER, pid(n), pid(n), false, 0).is_ok());
    }
    assert_eq!(r.tracked_peers(), 8);
    // Full of buckets that have not refilled: a new querier waits.
    assert!(ask(
        &mut r,
        NET,
        PIPE_RESOLVER_HANDLER,
        pid(50),
        pid(50),
        false,
        0
    )
    .is_err());
    // Once they refilled they are forgotten to make room.
    assert!(ask(
        &mut r,
        NET,
        PIPE_RESOLVER_HANDLER,
        pid(50),
        pid(50),
        false,
        1_000
    )
    .is_ok());
    assert!(r.tracked_peers() <= 8);
}

#[test]
fn malformed_messages_are_typed_errors_and_counted() {
    let mut r = resolver();
    let s = r.accept(Some(&query_queue(NET)), None).unwrap();
    // No element, garbage XML, a wrong root.
    let bad = [
        Message::new(),
        Message::new().with(Element::text(NS_JXTA, &query_queue(NET), "<<<")),
        Message::new().with(Element::text(NS_JXTA, &query_queue(NET), "<a/>")),
    ];
    for m in bad {
        assert!(matches!(
            r.handle_query(&s, Some(pid(1)), false, m, 0),
            Err(Refusal::Malformed(_))
        ));
    }
    let s = r.accept(Some(&response_queue(NET)), None).unwrap();
    assert!(matches!(
        r.handle_response(&s, Some(pid(1)), &Message::new(), 0),
        Err(Refusal::Malformed(_))
    ));
    assert_eq!(r.stats().malformed, 4);
    assert_eq!(r.poll_event(), None);
}

#[test]
fn responses_and_busy_notices_reach_their_handler() {
    let mut r = resolver();
    let p = pid(1);
    let s = r.accept(Some(&response_queue(NET)), None).unwrap();
    assert_eq!(s.direction, Direction::Response);
    r.handle_response(&s, Some(p), &rmsg(NET, PIPE_RESOLVER_HANDLER, 7), 0)
        .unwrap();
    assert!(matches!(
        r.poll_event(),
        Some(ResolverEvent::Response { key: H::Pipes, ref response, .. }) if response.query_id == 7
    ));
    let busy = BusyNotice {
        query_id: 3,
        retry_after_ms: u64::MAX,
    };
    r.handle_response(&s, Some(p), &Message::new().with(busy.to_element()), 0)
        .unwrap();
    assert!(matches!(
        r.poll_event(),
        Some(ResolverEvent::Busy { notice, .. }) if notice == busy
    ));
    assert!(matches!(
        r.handle_response(&s, Some(p), &rmsg(NET, "nobody", 1), 0),
        Err(Refusal::NoHandler(_))
    ));
}

#[test]
fn unsolicited_responses_share_their_senders_budget() {
    let mut r = resolver();
    let p = pid(1);
    let s = r.accept(Some(&response_queue(NET)), None).unwrap();
    // Discovery remote publishes (query ID 0): charged, burst 5.
    for _ in 0..5 {
        r.handle_response(&s, Some(p), &rmsg(NET, DISCOVERY_HANDLER, 0), 0)
            .unwrap();
    }
    assert_eq!(
        r.handle_response(&s, Some(p), &rmsg(NET, DISCOVERY_HANDLER, 0), 0),
        Err(Refusal::Throttled(p))
    );
    // Without a sender: refused.
    assert_eq!(
        r.handle_response(&s, None, &rmsg(NET, DISCOVERY_HANDLER, 0), 0),
        Err(Refusal::Anonymous)
    );
    // Answers to our queries are not charged.
    assert!(r
        .handle_response(&s, Some(p), &rmsg(NET, DISCOVERY_HANDLER, 9), 0)
        .is_ok());
}

#[test]
fn answers_go_direct_or_over_a_bounded_dial_never_through_the_forwarder() {
    let mut r = resolver();
    let (querier, fwd) = (pid(1), pid(2));
    let mut q = query(PIPE_RESOLVER_HANDLER, querier, 1);
    q.src_route = Some(RouteAdvertisement {
        dest_peer: Some(querier),
        dest: AccessPointAdvertisement {
            peer_id: None,
            addresses: vec![
                "tcp://127.0.0.1:9701".into(),
                "tcp://0.0.0.0:9702".into(),
                "http://127.0.0.1:9703".into(),
                "tcp://127.0.0.1:0".into(),
            ],
        },
        hops: Vec::new(),
    });
    // Linked: straight back.
    assert_eq!(
        r.answer_path(&q, Some(fwd), true, 0),
        Ok(AnswerPath::Direct(querier))
    );
    // Asked directly with no link left: nothing to dial.
    assert_eq!(
        r.answer_path(&q, Some(querier), false, 0),
        Err(Refusal::NoRoute(querier))
    );
    // Forwarded by another peer: a dial of the route's usable addresses.
    assert_eq!(
        r.answer_path(&q, Some(fwd), false, 0),
        Ok(AnswerPath::Dial {
            to: querier,
            addrs: vec!["127.0.0.1:9701".parse().unwrap()]
        })
    );
    // One dial at a time per querier.
    assert_eq!(
        r.answer_path(&q, Some(fwd), false, 0),
        Err(Refusal::DialThrottled(querier))
    );
    r.dial_finished(&querier);
    assert!(r.answer_path(&q, Some(fwd), false, 0).is_ok());
    r.dial_finished(&querier);
    // A route naming another peer is not dialled.
    let mut other = q.clone();
    other.src_peer = pid(3);
    assert_eq!(
        r.answer_path(&other, Some(fwd), false, 0),
        Ok(AnswerPath::Dial {
            to: pid(3),
            addrs: Vec::new()
        })
    );
    assert_eq!(r.stats().no_route, 1);
    assert_eq!(r.stats().dials_throttled, 1);
}

#[test]
fn answer_dials_are_bounded_in_flight_and_in_rate() {
    let mut r = resolver();
    let fwd = pid(0);
    let burst = ANSWER_DIAL_BURST as usize;
    let mut started = 0;
    for n in 1..=100 {
        if r.answer_path(&query("x", pid(n), 1), Some(fwd), false, 0)
            .is_ok()
        {
            started += 1;
        }
    }
    assert_eq!(started, burst.min(MAX_ANSWER_DIALS));
    assert_eq!(r.dials_in_flight(), started);
    for n in 1..=100 {
        r.dial_finished(&pid(n));
    }
    // Nothing more without time passing; one second refills RATE.
    assert!(r
        .answer_path(&query("x", pid(200), 1), Some(fwd), false, 0)
        .is_err());
    let mut refilled = 0;
    for n in 300..400 {
        if r.answer_path(&query("x", pid(n), 1), Some(fwd), false, 1_000)
            .is_ok()
        {
            refilled += 1;
        }
    }
    assert_eq!(refilled, ANSWER_DIAL_RATE as usize);
    // A clock that goes backwards refills nothing and does not panic.
    assert!(r
        .answer_path(&query("x", pid(500), 1), Some(fwd), false, 0)
        .is_err());
}

#[test]
fn registering_is_bounded_and_names_are_unique() {
    let mut r: ResolverNode<usize> = ResolverNode::new(ResolverConfig::new(NET));
    r.register(Handler::exact(0, "a")).unwrap();
    assert_eq!(
        r.register(Handler::exact(1, "a")),
        Err(ResolverNodeError::Duplicate("a".into()))
    );
    for i in 1..MAX_HANDLERS {
        r.register(Handler::exact(i, &format!("h{i}"))).unwrap();
    }
    assert_eq!(
        r.register(Handler::exact(99, "z")),
        Err(ResolverNodeError::TooManyHandlers)
    );
    let mut cfg = ResolverConfig::new(NET);
    cfg.max_groups = 1;
    let mut r: ResolverNode<usize> = ResolverNode::new(cfg);
    r.join(SUB).unwrap();
    r.join(SUB).unwrap();
    assert_eq!(r.join(OTHER), Err(ResolverNodeError::TooManyGroups));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Arbitrary bytes as the resolver element of a query or response
    /// (and as the queue name) never panic: refused with a typed error or
    /// routed.
    #[test]
    fn arbitrary_bytes_never_panic(
        queue in proptest::option::of("[A-Za-z0-9-]{0,40}(ORes|IRes|Srdi)?"),
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        as_text in any::<bool>(),
        now in any::<u64>(),
    ) {
        let mut r = resolver();
        r.join(SUB).unwrap();
        if let Ok(s) = r.accept(queue.as_deref(), None) {
            let name = s.queue();
            let e = if as_text {
                Element::text(NS_JXTA, &name, &String::from_utf8_lossy(&body))
            } else {
                Element::bytes(NS_JXTA, &name, body.clone())
            };
            let m = Message::new().with(e);
            let _ = match s.direction {
                Direction::Query => r.handle_query(&s, Some(pid(1)), false, m, now),
                Direction::Response => r.handle_response(&s, Some(pid(1)), &m, now),
            };
        }
        let st = r.stats();
        prop_assert!(st.queries + st.responses + st.malformed + st.no_handler
            + st.unroutable + st.group_refused + st.throttled <= 1);
    }
}
