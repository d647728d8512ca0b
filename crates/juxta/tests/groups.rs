//! Peer groups as scopes between Juxta peers on loopback: discovery with
//! a cache partition per group (a search in G sees only G's
//! advertisements, a non-member answers nothing), pipes resolved only in
//! their group and closed when it is left, nested groups, and certificate
//! membership (bad certificates refused with their reason and counted,
//! injection by a non-member dropped and counted, revocation).

use std::time::Duration;

use juxta::discovery::DiscoveryError;
use juxta::group::GroupError;
use juxta::{Peer, PeerConfig};
use juxta_proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
use juxta_proto::discovery::DiscoveryQuery;
use juxta_proto::group::cert::{self, CertError, GroupAuth, MemberCertificate, SigningKey};
use juxta_proto::id::PipeId;
use juxta_proto::message::{Element, Message};
use juxta_proto::resolver::{query_queue, RESOLVER_SERVICE};

const WAIT: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_millis(1500);
const HOUR: Duration = Duration::from_secs(3600);

fn cfg(dir: &tempfile::TempDir, name: &str, listen: bool) -> PeerConfig {
    let mut c = PeerConfig::new(dir.path().join(name));
    c.key_bits = 1024;
    if listen {
        c = c.listen("127.0.0.1:0".parse().unwrap());
    }
    c
}

fn pipe_adv(name: &str) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    a.name = Some(name.into());
    a
}

fn names(v: &[Advertisement]) -> Vec<String> {
    let mut n: Vec<String> = v
        .iter()
        .filter_map(|a| match a {
            Advertisement::Pipe(p) => p.name.clone(),
            _ => None,
        })
        .collect();
    n.sort();
    n
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
async fn discovery_in_a_group_answers_only_from_that_group() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    let c = Peer::start(cfg(&dir, "c", false)).await.unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(a.local_addr().unwrap()).await.unwrap();
    until("a to see both connections", || a.connection_count() == 2).await;

    let ag = a.groups().create("g", Some("pw")).await.unwrap();
    let ah = a.groups().create("h", Some("pw")).await.unwrap();
    let bg = b.groups().join(&ag.adv, Some("pw")).await.unwrap();
    let bh = b.groups().join(&ah.adv, Some("pw")).await.unwrap();
    let ch = c.groups().join(&ah.adv, Some("pw")).await.unwrap();

    bg.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("x-in-g")))
        .await
        .unwrap();
    bh.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("x-in-h-b")))
        .await
        .unwrap();
    ch.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("x-in-h-c")))
        .await
        .unwrap();
    b.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("x-in-net")))
        .await
        .unwrap();

    // Local searches: each partition holds what was published in it.
    let local = |d: juxta::discovery::DiscoveryService| async move {
        names(
            &d.search(AdvKind::Adv)
                .matching("Name", "x-*")
                .local()
                .await
                .unwrap(),
        )
    };
    assert_eq!(local(bg.discovery()).await, vec!["x-in-g"]);
    assert_eq!(local(bh.discovery()).await, vec!["x-in-h-b"]);
    assert_eq!(local(b.discovery()).await, vec!["x-in-net"]);

    // Remote search in G from a: b answers from its G partition only; c,
    // not in G, drops the query (counted) and answers nothing.
    let refused_before = c.stats().group_refused;
    let found = ag
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "x-*")
        .timeout(SHORT)
        .remote()
        .await
        .unwrap();
    assert_eq!(names(&found.advertisements), vec!["x-in-g"]);
    until("c to refuse the query in G", || {
        c.stats().group_refused > refused_before
    })
    .await;
    // What arrived in G was cached in a's G partition, not in H or Net.
    assert_eq!(local(ag.discovery()).await, vec!["x-in-g"]);
    assert!(local(ah.discovery()).await.is_empty());
    assert!(local(a.discovery()).await.is_empty());

    // In H: both b and c answer, from their H partitions.
    let found = ah
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "x-*")
        .timeout(SHORT)
        .remote()
        .await
        .unwrap();
    assert_eq!(names(&found.advertisements), vec!["x-in-h-b", "x-in-h-c"]);

    // In the Net group: only the Net advertisement.
    let found = a
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "x-*")
        .timeout(SHORT)
        .remote()
        .await
        .unwrap();
    assert_eq!(names(&found.advertisements), vec!["x-in-net"]);

    // Leaving drops the partition: the handle's services refuse.
    bg.leave().unwrap();
    assert!(!bg.is_joined());
    assert!(matches!(
        bg.discovery().search(AdvKind::Adv).local().await,
        Err(DiscoveryError::NotMember(_))
    ));
    // And b no longer answers in G.
    let r = ag
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "x-*")
        .ask(b.peer_id())
        .timeout(SHORT)
        .remote()
        .await;
    assert!(matches!(r, Err(DiscoveryError::NoAnswer { .. })), "{r:?}");
}

/// Memberships reach the resolver task in the order they were made: a
/// group left and joined again at once is served, joining a group again
/// while in it (a new credential) keeps it served, and leaving it refuses
/// its traffic.
#[tokio::test]
async fn a_group_left_and_joined_again_at_once_is_served_in_the_order_made() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    until("a to see b", || a.connection_count() == 1).await;
    let ag = a.groups().create("g", Some("pw")).await.unwrap();
    let ask_b = |name: &'static str| {
        let d = ag.discovery();
        let who = b.peer_id();
        async move {
            let found = d
                .search(AdvKind::Adv)
                .matching("Name", name)
                .ask(who)
                .timeout(WAIT)
                .remote()
                .await
                .unwrap();
            names(&found.advertisements)
        }
    };

    // Left and joined again twenty times in a row, without a pause: the
    // last join is served (each leave came before the join after it).
    let mut bg = b.groups().join(&ag.adv, Some("pw")).await.unwrap();
    for _ in 0..20 {
        bg.leave().unwrap();
        bg = b.groups().join(&ag.adv, Some("pw")).await.unwrap();
    }
    bg.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("y-1")))
        .await
        .unwrap();
    assert_eq!(ask_b("y-1").await, vec!["y-1"]);

    // Joined again while in it: the old handle's services close, the
    // group stays served, from the new partition.
    let again = b.groups().join(&ag.adv, Some("pw")).await.unwrap();
    assert!(!bg.is_joined());
    assert!(again.is_joined());
    again
        .discovery()
        .publish(&Advertisement::Pipe(pipe_adv("y-2")))
        .await
        .unwrap();
    assert_eq!(ask_b("y-*").await, vec!["y-2"]);

    // Left: b refuses the group's queries (counted), a hears nothing.
    again.leave().unwrap();
    let refused_before = b.stats().group_refused;
    let r = ag
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "y-*")
        .ask(b.peer_id())
        .timeout(SHORT)
        .remote()
        .await;
    assert!(matches!(r, Err(DiscoveryError::NoAnswer { .. })), "{r:?}");
    assert!(b.stats().group_refused > refused_before);
}

#[tokio::test]
async fn pipes_resolve_only_in_their_group_and_close_on_leave() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    // a is the input's side (b, which dialled, holds the connection).
    let ag = a.groups().create("g", None).await.unwrap();
    let bg = b.groups().join(&ag.adv, None).await.unwrap();

    let adv = pipe_adv("in-g");
    let mut input = ag.pipes().create_input_pipe(&adv).unwrap();
    // Resolved in G, and messages flow.
    let out = bg
        .pipes()
        .create_output_pipe(&adv, &[a.peer_id()], WAIT)
        .await
        .unwrap();
    out.send(Message::new().with(Element::text("", "m", "hello")))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, input.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.message.get("", "m").unwrap().as_str(), Some("hello"));
    // Not resolved by a binding query in the Net group.
    let net = b.pipes().resolve(&adv, &[a.peer_id()], SHORT).await;
    assert!(net.is_err(), "{net:?}");

    // Leaving closes the pipe: the input ends and G's queries go unanswered.
    ag.leave().unwrap();
    let end = tokio::time::timeout(WAIT, input.recv()).await.unwrap();
    assert!(end.is_none());
    let r = bg.pipes().resolve(&adv, &[a.peer_id()], SHORT).await;
    assert!(r.is_err(), "{r:?}");
    // A pipe cannot be opened in a group left.
    assert!(ag.pipes().create_input_pipe(&pipe_adv("late")).is_err());
}

#[tokio::test]
async fn nested_groups() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    let ag = a.groups().create("outer", Some("o")).await.unwrap();
    let an = ag.groups().create("inner", Some("i")).await.unwrap();
    assert_eq!(an.parent(), ag.id);
    an.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("y-nested")))
        .await
        .unwrap();

    // The inner group's advertisement lives in the outer group only.
    assert!(a.groups().find_local("inner").await.unwrap().is_empty());
    assert_eq!(ag.groups().find_local("inner").await.unwrap().len(), 1);

    let bg = b.groups().join(&ag.adv, Some("o")).await.unwrap();
    assert!(b
        .groups()
        .find_remote("inner", None, SHORT)
        .await
        .unwrap()
        .is_empty());
    let found = bg.groups().find_remote("inner", None, WAIT).await.unwrap();
    assert_eq!(found, vec![an.adv.clone()]);
    let bn = bg.groups().join(&found[0], Some("i")).await.unwrap();
    let hits = bn
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "y-*")
        .timeout(WAIT)
        .remote()
        .await
        .unwrap();
    assert_eq!(names(&hits.advertisements), vec!["y-nested"]);

    // Leaving the outer group leaves the inner one too.
    bg.leave().unwrap();
    assert!(!bn.is_joined());
    assert!(!b.groups().is_member(&an.id));
    assert!(b.groups().joined().is_empty());
    // Joining a subgroup of a group left is refused.
    assert!(matches!(
        bg.groups().join(&an.adv, Some("i")).await,
        Err(GroupError::NotMember(_))
    ));
}

#[tokio::test]
async fn certificate_membership_refuses_bad_certificates_and_non_member_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", true)).await.unwrap();
    let c = Peer::start(cfg(&dir, "c", false)).await.unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(b.local_addr().unwrap()).await.unwrap();
    until("the connections to register", || {
        a.connection_count() == 2 && b.connection_count() == 2
    })
    .await;

    let ag = a.groups().create_secure("vault", HOUR).await.unwrap();
    assert!(ag.certificate().unwrap().may_issue);
    let cred_b = ag.issue(b.peer_id(), HOUR, false).unwrap();
    ag.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("z-secret")))
        .await
        .unwrap();

    // Bad credentials for c: each refused with its reason, and counted.
    let refusal = |r: Result<juxta::group::Group, GroupError>| match r {
        Err(GroupError::Certificate(e)) => e,
        other => panic!("expected a certificate refusal, got {other:?}"),
    };
    // b's certificate: another peer ID.
    let e = refusal(c.groups().join_with_certificate(&ag.adv, &cred_b).await);
    assert_eq!(e, CertError::WrongPeer);
    // Expired.
    let expired = ag.issue(c.peer_id(), Duration::ZERO, false).unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let e = refusal(c.groups().join_with_certificate(&ag.adv, &expired).await);
    assert_eq!(e, CertError::Expired);
    // Signed by c itself, not the group.
    let own = SigningKey::generate(&mut rand::thread_rng());
    let forged = MemberCertificate::issue(
        &own,
        None,
        ag.id,
        c.peer_id(),
        own.public(),
        1,
        0,
        u64::MAX,
        false,
    );
    let forged = juxta::group::CertCredential::new(forged, own.seed()).unwrap();
    let e = refusal(c.groups().join_with_certificate(&ag.adv, &forged).await);
    assert_eq!(e, CertError::BadSignature);
    // Issued by another group.
    let ch = c.groups().create_secure("other", HOUR).await.unwrap();
    let other = ch.issue(c.peer_id(), HOUR, false).unwrap();
    let e = refusal(c.groups().join_with_certificate(&ag.adv, &other).await);
    assert_eq!(e, CertError::WrongGroup);
    assert_eq!(c.stats().group_cert_refused, 4);
    assert!(!c.groups().is_member(&ag.id));

    // b joins with its certificate and discovers inside the group.
    let bg = b
        .groups()
        .join_with_certificate(&ag.adv, &cred_b)
        .await
        .unwrap();
    let found = bg
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "z-*")
        .ask(a.peer_id())
        .timeout(WAIT)
        .remote()
        .await
        .unwrap();
    assert_eq!(names(&found.advertisements), vec!["z-secret"]);

    // c injects group traffic to b: without a tag, and with a tag of a
    // certificate it signed itself. Both dropped and counted, never
    // answered.
    let g = ag.id.unique_value();
    let q = DiscoveryQuery::new(AdvKind::Adv, 5).to_resolver_query(77, c.peer_id());
    let queue = query_queue(&g);
    let mb = c.messenger(&b.peer_id()).unwrap();
    mb.send(
        RESOLVER_SERVICE,
        Some(&queue),
        Message::new().with(q.to_element(&g)),
    )
    .await
    .unwrap();
    let own_cert = MemberCertificate::issue(
        &own,
        None,
        ag.id,
        c.peer_id(),
        own.public(),
        2,
        0,
        u64::MAX,
        false,
    );
    let elem = q.to_element(&g);
    let tag = GroupAuth::sign(
        &own,
        &own_cert,
        &queue,
        &elem.data,
        juxta::cache::unix_now_ms(),
        [9; 16],
    );
    let msg =
        Message::new()
            .with(elem)
            .with(Element::bytes("juxta", cert::AUTH_ELEMENT, tag.encode()));
    mb.send(RESOLVER_SERVICE, Some(&queue), msg).await.unwrap();
    until("b to drop c's injected queries", || {
        b.stats().group_unauthenticated == 2
    })
    .await;
    assert_eq!(c.stats().discovery_late, 0);

    // Revocation: a revokes b; a then drops b's group traffic.
    let sent = ag.revoke(&[b.peer_id()], &[]).unwrap();
    assert!(sent >= 1);
    assert_eq!(ag.revocations().unwrap().peers, vec![b.peer_id()]);
    until("b to install the revocation list", || {
        bg.revocations().is_some()
    })
    .await;
    let before = a.stats().group_unauthenticated;
    let r = bg
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "z-*")
        .ask(a.peer_id())
        .timeout(SHORT)
        .remote()
        .await;
    assert!(matches!(r, Err(DiscoveryError::NoAnswer { .. })), "{r:?}");
    assert!(a.stats().group_unauthenticated > before);
    // Only the group's creator revokes.
    assert!(matches!(
        bg.revoke(&[a.peer_id()], &[]),
        Err(GroupError::NotIssuer(_))
    ));
}

#[tokio::test]
async fn a_member_allowed_to_issue_issues_and_password_groups_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(cfg(&dir, "a", true)).await.unwrap();
    let b = Peer::start(cfg(&dir, "b", false)).await.unwrap();
    let c = Peer::start(cfg(&dir, "c", false)).await.unwrap();
    b.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(a.local_addr().unwrap()).await.unwrap();
    let ag = a.groups().create_secure("deleg", HOUR).await.unwrap();
    let admin = ag.issue(b.peer_id(), HOUR, true).unwrap();
    let bg = b
        .groups()
        .join_with_certificate(&ag.adv, &admin)
        .await
        .unwrap();
    let plain = ag.issue(c.peer_id(), HOUR, false).unwrap();
    let cred_c = bg.issue(c.peer_id(), HOUR, false).unwrap();
    assert!(cred_c.certificate.issuer.is_some());
    let cg = c
        .groups()
        .join_with_certificate(&ag.adv, &cred_c)
        .await
        .unwrap();
    // c (certified by b) is heard by a.
    ag.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("w-1")))
        .await
        .unwrap();
    let found = cg
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "w-*")
        .timeout(WAIT)
        .remote()
        .await
        .unwrap();
    assert_eq!(names(&found.advertisements), vec!["w-1"]);
    // A member without the right cannot issue.
    let cg2 = c
        .groups()
        .join_with_certificate(&ag.adv, &plain)
        .await
        .unwrap();
    assert!(matches!(
        cg2.issue(a.peer_id(), HOUR, false),
        Err(GroupError::NotIssuer(_))
    ));
    // Password membership (JXSE's) is unchanged.
    let pw = a.groups().create("pw", Some("s")).await.unwrap();
    assert!(matches!(
        b.groups().join(&pw.adv, Some("wrong")).await,
        Err(GroupError::Membership(_))
    ));
    assert!(b.groups().join(&pw.adv, Some("s")).await.is_ok());
    // A password advertisement has no group key.
    let e = b.groups().join_with_certificate(&pw.adv, &plain).await;
    assert!(matches!(
        e,
        Err(GroupError::Certificate(CertError::NoGroupKey))
    ));
}

/// Members that cannot be dialled reach each other through a relay that
/// is not a member: discovery in a certificate group works over the route
/// (the group's address rides in the router header; one member in JXTA
/// framing, so the XML header is exercised too); a non-member edge of the
/// same relay injecting group traffic is dropped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_group_through_a_relay_with_a_non_member_on_it() {
    use juxta::relay::RelayConfig;
    let dir = tempfile::tempdir().unwrap();
    let r = Peer::start(cfg(&dir, "r", true).relay(RelayConfig::server()))
        .await
        .unwrap();
    let seeds = vec![r.local_addr().unwrap()];
    let a = Peer::start(cfg(&dir, "a", false).relay(RelayConfig::client(seeds.clone())))
        .await
        .unwrap();
    let b = Peer::start(
        cfg(&dir, "b", false)
            .relay(RelayConfig::client(seeds.clone()))
            .compact(false),
    )
    .await
    .unwrap();
    let c = Peer::start(cfg(&dir, "c", false).relay(RelayConfig::client(seeds.clone())))
        .await
        .unwrap();
    for p in [&a, &b, &c] {
        assert_eq!(
            p.relay().unwrap().wait_leased(WAIT).await,
            Some(r.peer_id())
        );
    }
    let ag = a.groups().create_secure("relayed", HOUR).await.unwrap();
    let cred = ag.issue(b.peer_id(), HOUR, false).unwrap();
    ag.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("r-1")))
        .await
        .unwrap();
    let bg = b
        .groups()
        .join_with_certificate(&ag.adv, &cred)
        .await
        .unwrap();
    let to_a = b.route_to(&a.peer_id(), WAIT).await.unwrap();
    assert!(to_a.is_routed());
    let found = bg
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "r-*")
        .ask(a.peer_id())
        .timeout(WAIT)
        .remote()
        .await
        .unwrap();
    assert_eq!(names(&found.advertisements), vec!["r-1"]);
    // The relay, not a member, holds nothing of the group.
    assert!(!r.groups().is_member(&ag.id));

    // c, on the same relay, injects a query in the group to a.
    let g = ag.id.unique_value();
    let queue = query_queue(&g);
    let q = DiscoveryQuery::new(AdvKind::Adv, 5).to_resolver_query(78, c.peer_id());
    let to_a = c.route_to(&a.peer_id(), WAIT).await.unwrap();
    let before = a.stats().group_unauthenticated;
    to_a.send(
        RESOLVER_SERVICE,
        Some(&queue),
        Message::new().with(q.to_element(&g)),
    )
    .await
    .unwrap();
    until("a to drop c's injected query", || {
        a.stats().group_unauthenticated > before
    })
    .await;
    assert_eq!(c.stats().discovery_late, 0);
}
