//! Discovery and peer groups between Juxta peers on loopback: local
//! publish/get with wildcards and thresholds, remote discovery of pipe and
//! peer advertisements, expiry, rejection of bad advertisements, per-peer
//! flow control, persistence across a restart, and group
//! create/discover/join/leave with group-scoped resolver traffic.

mod common;
mod prereq;

use std::time::Duration;

use juxta::discovery::DiscoveryConfig;
use juxta::group::GroupError;
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
use juxta_proto::discovery::{DiscoveryEntry, DiscoveryQuery, DiscoveryResponse, Lifetimes};
use juxta_proto::group::MembershipError;
use juxta_proto::id::PipeId;
use juxta_proto::message::Message;
use juxta_proto::resolver::{query_queue, response_queue, RESOLVER_SERVICE};

const WAIT: Duration = Duration::from_secs(10);
const NET: &str = "jxta-NetGroup";

fn cfg(dir: &tempfile::TempDir, name: &str, listen: bool) -> PeerConfig {
    let mut c = PeerConfig::new(dir.path().join(name));
    c.key_bits = 1024;
    if listen {
        c = c.listen("127.0.0.1:0".parse().unwrap());
    }
    c
}

fn pipe(name: &str) -> Advertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    a.name = Some(name.into());
    Advertisement::Pipe(a)
}

/// A rendezvous holding nothing (it stays silent to searches for what
/// nobody published) and an edge leasing it, the edge configured by
/// `edge`.
async fn silent_rendezvous_and_edge(
    dir: &tempfile::TempDir,
    edge: impl FnOnce(PeerConfig) -> PeerConfig,
) -> (Peer, Peer) {
    use juxta::rendezvous::RendezvousConfig;
    let r = Peer::start(cfg(dir, "r", true).rendezvous(RendezvousConfig::rendezvous()))
        .await
        .unwrap();
    let e = Peer::start(edge(
        cfg(dir, "e", false).rendezvous(RendezvousConfig::edge(vec![r.local_addr().unwrap()])),
    ))
    .await
    .unwrap();
    assert!(e.rendezvous().unwrap().wait_leased(WAIT).await.is_some());
    (r, e)
}

async fn until(what: &str, f: impl Fn() -> bool) {
    let end = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn local_publish_and_get_with_wildcards_and_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", false)).await.unwrap();
    let d = a.discovery();
    for i in 0..5 {
        d.publish(&pipe(&format!("chat-{i}"))).await.unwrap();
    }
    d.publish(&pipe("other")).await.unwrap();
    let all_chat = d
        .get_local(AdvKind::Adv, Some("Name"), Some("chat*"), 10)
        .await
        .unwrap();
    assert_eq!(all_chat.len(), 5);
    assert!(all_chat.iter().all(
        |a| matches!(a, Advertisement::Pipe(p) if p.name.as_deref().unwrap().starts_with("chat-"))
    ));
    assert_eq!(
        d.get_local(AdvKind::Adv, Some("Name"), Some("chat*"), 2)
            .await
            .unwrap()
            .len(),
        2
    );
    let three = d
        .get_local(AdvKind::Adv, Some("Name"), Some("*-3"), 10)
        .await
        .unwrap();
    assert_eq!(three.len(), 1);
    assert_eq!(
        d.get_local(AdvKind::Adv, None, None, 100)
            .await
            .unwrap()
            .len(),
        6
    );
    // The peer's own advertisement is published at start.
    let me = d
        .get_local(
            AdvKind::Peer,
            Some("PID"),
            Some(&a.peer_id().to_string()),
            5,
        )
        .await
        .unwrap();
    assert!(matches!(&me[..], [Advertisement::Peer(p)] if p.peer_id == a.peer_id()));
    // Flushed advertisements are gone.
    assert!(d.flush(&three[0].id()).await.unwrap());
    assert!(d
        .get_local(AdvKind::Adv, Some("Name"), Some("*-3"), 10)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn remote_discovery_of_pipe_and_peer_advertisements() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    let p = pipe("remote-pipe");
    a.discovery().publish(&p).await.unwrap();
    a.discovery().publish(&pipe("unrelated")).await.unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();

    let found = b
        .discovery()
        .get_remote(AdvKind::Adv, Some("Name"), Some("remote*"), 10, None, WAIT)
        .await
        .unwrap();
    assert_eq!(found, vec![p.clone()]);
    // Cached on b with the remote expiration.
    let cached = b
        .discovery()
        .get_local(AdvKind::Adv, Some("Name"), Some("remote-pipe"), 10)
        .await
        .unwrap();
    assert_eq!(cached, vec![p]);

    let peers = b
        .discovery()
        .get_remote(
            AdvKind::Peer,
            Some("PID"),
            Some(&a.peer_id().to_string()),
            5,
            Some(a.peer_id()),
            WAIT,
        )
        .await
        .unwrap();
    assert!(matches!(&peers[..], [Advertisement::Peer(pa)] if pa.peer_id == a.peer_id()));
    // Threshold 0 on a peer query: the responder's own advertisement.
    let own = b
        .discovery()
        .get_remote(AdvKind::Peer, None, None, 0, None, WAIT)
        .await
        .unwrap();
    assert!(matches!(&own[..], [Advertisement::Peer(pa)] if pa.peer_id == a.peer_id()));
    assert_eq!(a.stats().discovery_throttled, 0);

    // A remote publish from b lands in a's cache.
    let pushed = pipe("pushed");
    assert_eq!(
        b.discovery()
            .remote_publish(&pushed, Some(a.peer_id()))
            .await
            .unwrap(),
        1
    );
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let got = a
            .discovery()
            .get_local(AdvKind::Adv, Some("Name"), Some("pushed"), 1)
            .await
            .unwrap();
        if !got.is_empty() {
            assert_eq!(got, vec![pushed]);
            break;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "remote publish not cached"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The search builder: named settings, `local()` and `remote()`; an
/// answer that holds nothing (`Ok`, answered) is told apart from nobody
/// answering in time (`Err(NoAnswer)`): a rendezvous that holds nothing
/// stays silent, as JXSE's does.
#[tokio::test]
async fn search_tells_nothing_found_from_nobody_answered() {
    use juxta::discovery::DiscoveryError;
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    for i in 0..3 {
        a.discovery()
            .publish(&pipe(&format!("printer-{i}")))
            .await
            .unwrap();
    }
    b.connect(a.local_addr().unwrap()).await.unwrap();

    let found = b
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "printer-*")
        .threshold(2)
        .timeout(WAIT)
        .remote()
        .await
        .unwrap();
    assert_eq!(found.advertisements.len(), 2, "threshold honoured");
    assert_eq!((found.asked, found.answered), (1, 1));
    // Cached by the remote search, found by a local one.
    let local = b
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "printer-*")
        .local()
        .await
        .unwrap();
    assert_eq!(local.len(), 2);
    // Asked by ID, nothing there: an answer with nothing in it.
    let none = b
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "scanner")
        .ask(a.peer_id())
        .timeout(WAIT)
        .remote()
        .await
        .unwrap();
    assert!(none.advertisements.is_empty());
    assert_eq!(none.answered, 1);

    // A rendezvous holding nothing stays silent: NoAnswer, after the
    // timeout, naming how many peers were asked.
    let (_r, e) = silent_rendezvous_and_edge(&dir, |c| c).await;
    let err = e
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "nothing-here")
        .timeout(Duration::from_millis(300))
        .remote()
        .await
        .unwrap_err();
    assert!(
        matches!(err, DiscoveryError::NoAnswer { asked: 1, timeout } if timeout == Duration::from_millis(300)),
        "{err:?}"
    );
    assert!(err
        .to_string()
        .contains("none of the 1 peers asked answered"));
}

/// A search its caller gave up on frees its place at once (the resolver
/// task owns the searches; the caller only awaits an answer): with room
/// for two searches, two abandoned ones do not refuse a third, and two
/// live ones do.
#[tokio::test]
async fn abandoned_searches_free_their_place() {
    use juxta::discovery::DiscoveryError;
    let dir = tempfile::tempdir().unwrap();
    let (_r, e) = silent_rendezvous_and_edge(&dir, |c| {
        c.discovery(DiscoveryConfig {
            max_pending: 2,
            ..DiscoveryConfig::default()
        })
    })
    .await;
    let search = |timeout: Duration| {
        let d = e.discovery();
        async move {
            d.search(AdvKind::Adv)
                .matching("Name", "nothing-here")
                .timeout(timeout)
                .remote()
                .await
        }
    };
    for _ in 0..2 {
        let abandoned =
            tokio::time::timeout(Duration::from_millis(200), search(Duration::from_secs(60))).await;
        assert!(abandoned.is_err(), "nobody answers: still waiting");
    }
    let err = search(Duration::from_millis(300)).await.unwrap_err();
    assert!(
        matches!(err, DiscoveryError::NoAnswer { asked: 1, .. }),
        "the third search ran: {err:?}"
    );
    // Two searches still waited for fill the table. (A probe can take a
    // place before a live search does: that one is refused and started
    // again.)
    let mut live: Vec<_> = (0..2)
        .map(|_| tokio::spawn(search(Duration::from_secs(60))))
        .collect();
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        for t in &mut live {
            if t.is_finished() {
                let r = (&mut *t).await.unwrap();
                assert!(
                    matches!(r, Err(DiscoveryError::TooManyQueries(2))),
                    "a live search ended: {r:?}"
                );
                *t = tokio::spawn(search(Duration::from_secs(60)));
            }
        }
        // The live searches send their commands first (this test's
        // runtime has one thread: they run before it continues).
        tokio::task::yield_now().await;
        match search(Duration::from_millis(50)).await {
            Err(DiscoveryError::TooManyQueries(2)) => break,
            other => assert!(
                matches!(other, Err(DiscoveryError::NoAnswer { .. })),
                "{other:?}"
            ),
        }
        assert!(tokio::time::Instant::now() < end, "never full");
    }
    for t in live {
        t.abort();
    }
}

/// A search waiting for answers when its peer closes ends at once with
/// `Stopped` (its state was the resolver task's, which ended), not at its
/// timeout.
#[tokio::test]
async fn a_search_in_progress_ends_when_its_peer_closes() {
    use juxta::discovery::DiscoveryError;
    let dir = tempfile::tempdir().unwrap();
    let (_r, e) = silent_rendezvous_and_edge(&dir, |c| c).await;
    let d = e.discovery();
    let search = tokio::spawn(async move {
        d.search(AdvKind::Adv)
            .matching("Name", "nothing-here")
            .timeout(Duration::from_secs(3600))
            .remote()
            .await
    });
    // Let it start (however far it got, closing must end it).
    tokio::task::yield_now().await;
    e.close().await.unwrap();
    let r = tokio::time::timeout(WAIT, search)
        .await
        .expect("the search ended with its peer")
        .unwrap();
    // Stopped; or, if the connections closed before the query went out,
    // nobody to ask.
    assert!(
        matches!(
            r,
            Err(DiscoveryError::Stopped) | Err(DiscoveryError::NotConnected(_))
        ),
        "{r:?}"
    );
}

#[tokio::test]
async fn expired_advertisements_are_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    let short = Lifetimes {
        lifetime_ms: 100,
        expiration_ms: 100,
    };
    a.discovery()
        .publish_with(&pipe("short-lived"), short)
        .await
        .unwrap();
    a.discovery().publish(&pipe("long-lived")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let local = a
        .discovery()
        .get_local(AdvKind::Adv, Some("Name"), Some("*-lived"), 10)
        .await
        .unwrap();
    assert_eq!(local.len(), 1);
    b.connect(a.local_addr().unwrap()).await.unwrap();
    let remote = b
        .discovery()
        .get_remote(AdvKind::Adv, Some("Name"), Some("*-lived"), 10, None, WAIT)
        .await
        .unwrap();
    assert!(
        matches!(&remote[..], [Advertisement::Pipe(p)] if p.name.as_deref() == Some("long-lived"))
    );
}

#[tokio::test]
async fn malformed_and_oversized_advertisements_are_rejected_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    let m = b.connect(a.local_addr().unwrap()).await.unwrap();
    let good = pipe("good");
    let Advertisement::Pipe(mut big) = pipe("x") else {
        unreachable!()
    };
    big.name = Some("x".repeat(40 * 1024));
    let r = DiscoveryResponse {
        kind: AdvKind::Adv,
        peer_adv: None,
        attr: None,
        value: None,
        responses: vec![
            DiscoveryEntry::document("<jxta:PipeAdvertisement><Id>garbage", 60_000),
            DiscoveryEntry::document(&Advertisement::Pipe(big).to_xml(), 60_000),
            DiscoveryEntry::document("<jxta:Nonsense>x</jxta:Nonsense>", 60_000),
            DiscoveryEntry::new(&good, 60_000),
        ],
    };
    // A remote publish (query ID 0).
    let msg = Message::new().with(r.to_resolver_response(0).to_element(NET));
    m.send_routed(RESOLVER_SERVICE, Some(&response_queue(NET)), msg)
        .await
        .unwrap();
    until("rejections", || a.stats().discovery_rejected >= 3).await;
    // The bad entries are counted as the response is read; the good one is
    // stored after that, by the cache's own thread: wait for it.
    let end = tokio::time::Instant::now() + WAIT;
    let all = loop {
        let all = a
            .discovery()
            .get_local(AdvKind::Adv, None, None, 100)
            .await
            .unwrap();
        if !all.is_empty() {
            break all;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "the good advertisement was never cached"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(all, vec![good]);
    assert_eq!(a.stats().discovery_rejected, 3);
}

#[tokio::test]
async fn query_flood_is_throttled_while_other_peers_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let mut ca = cfg(&dir, "a", true);
    ca.discovery = DiscoveryConfig {
        query_rate: 1.0,
        query_burst: 5,
        ..DiscoveryConfig::default()
    };
    let a = Peer::start(ca).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    let c = Peer::start(cfg(&dir, "c", false)).await.unwrap();
    let mb = b.connect(a.local_addr().unwrap()).await.unwrap();
    let q = DiscoveryQuery::new(AdvKind::Peer, 1);
    for id in 1..=200 {
        let rq = q.to_resolver_query(id, b.peer_id());
        let msg = Message::new().with(rq.to_element(NET));
        mb.send_routed(RESOLVER_SERVICE, Some(&query_queue(NET)), msg)
            .await
            .unwrap();
    }
    until("the flood to be throttled", || {
        a.stats().discovery_throttled >= 150
    })
    .await;
    c.connect(a.local_addr().unwrap()).await.unwrap();
    let got = c
        .discovery()
        .get_remote(AdvKind::Peer, None, None, 0, None, WAIT)
        .await
        .unwrap();
    assert!(matches!(&got[..], [Advertisement::Peer(pa)] if pa.peer_id == a.peer_id()));
    // b's answers that were sent were for queries it never made: late.
    until("b's late answers", || b.stats().discovery_late >= 1).await;
}

#[tokio::test]
async fn cache_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipe("persistent");
    let id = {
        let a = Peer::start(cfg(&dir, "a", false)).await.unwrap();
        a.discovery().publish(&p).await.unwrap();
        a.peer_id()
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let a = Peer::start(cfg(&dir, "a", false)).await.unwrap();
    assert_eq!(a.peer_id(), id);
    assert!(dir.path().join("a").join("cm.sqlite").exists());
    let got = a
        .discovery()
        .get_local(AdvKind::Adv, Some("Name"), Some("persistent"), 10)
        .await
        .unwrap();
    assert_eq!(got, vec![p]);
}

#[tokio::test]
async fn groups_create_discover_join_leave() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    let club = a.groups().create("club", Some("secret")).await.unwrap();
    assert!(a.groups().is_member(&club.id));
    let ma = b.connect(a.local_addr().unwrap()).await.unwrap();

    let found = b.groups().find_remote("cl*", None, WAIT).await.unwrap();
    assert_eq!(found, vec![club.adv.clone()]);
    assert!(!b.groups().is_member(&club.id));

    // Group-scoped resolver traffic for a group b is not in: dropped.
    let sub = club.id.unique_value();
    let q = DiscoveryQuery::new(AdvKind::Adv, 5).to_resolver_query(7, a.peer_id());
    let send_scoped = || async {
        let mb = a.messenger(&b.peer_id()).unwrap();
        let msg = Message::new().with(q.to_element(&sub));
        mb.send(RESOLVER_SERVICE, Some(&query_queue(&sub)), msg)
            .await
            .unwrap();
    };
    send_scoped().await;
    until("the scoped query to be refused", || {
        b.stats().group_refused == 1
    })
    .await;

    let wrong = b.groups().join(club.id, Some("guess")).await;
    assert!(matches!(
        wrong,
        Err(GroupError::Membership(MembershipError::IncorrectPassword))
    ));
    assert!(!b.groups().is_member(&club.id));
    let joined = b.groups().join(&found[0], Some("secret")).await.unwrap();
    assert_eq!(joined.id, club.id);
    assert!(b.groups().is_member(&club.id));
    assert_eq!(b.groups().joined().len(), 1);

    // Now b answers in the group (a, a member, gets the answer: late,
    // as a made no query).
    send_scoped().await;
    until("a to receive b's answer", || a.stats().discovery_late >= 1).await;
    assert_eq!(b.stats().group_refused, 1);

    b.groups().leave(&club.id).unwrap();
    assert!(!b.groups().is_member(&club.id));
    assert!(matches!(
        b.groups().leave(&club.id),
        Err(GroupError::NotMember(_))
    ));
    drop(ma);
}

/// JXSE 2.7 answers a Juxta discovery query for its own peer
/// advertisement (needs Java and the harness in interop/jxse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jxse_answers_a_peer_discovery_query() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let jxse = tokio::task::block_in_place(common::Jxse::start);
    let dir = tempfile::tempdir().unwrap();
    let a = common::juxta_peer(dir.path(), "a", true).await;
    a.connect(format!("127.0.0.1:{}", jxse.port).parse().unwrap())
        .await
        .unwrap();
    let found = a
        .discovery()
        .get_remote(
            AdvKind::Peer,
            Some("PID"),
            Some(&jxse.peer_id.to_string()),
            5,
            Some(jxse.peer_id),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert!(
        found
            .iter()
            .any(|adv| matches!(adv, Advertisement::Peer(pa) if pa.peer_id == jxse.peer_id)),
        "JXSE did not answer with its peer advertisement: {found:?}; rejected {}",
        a.stats().discovery_rejected
    );
}
