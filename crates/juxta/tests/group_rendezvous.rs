//! A subgroup's own rendezvous (issue #18 item 1) on loopback: two edges
//! that do not know each other's addresses find each other inside a
//! certificate group through the group's rendezvous (a member), apart from
//! the Net peer group's rendezvous (not a member): discovery, pipe binding
//! and propagation go through the group's rendezvous, a search in the
//! group is never answered from the Net group's index, a non-member on the
//! same Net rendezvous cannot lease the group's rendezvous nor query or
//! feed its index (dropped and counted), and leaving withdraws the
//! member's entries and ends its lease. Nothing asserts on timing.

use std::net::SocketAddr;
use std::time::Duration;

use juxta::discovery::DiscoveryError;
use juxta::proto::advertisement::{
    AdvKind, Advertisement, PeerAdvertisement, PipeAdvertisement, PipeType,
};
use juxta::proto::discovery::DiscoveryQuery;
use juxta::proto::group::cert::{MemberCertificate, SigningKey};
use juxta::proto::group::seal;
use juxta::proto::id::{PeerGroupId, PipeId};
use juxta::proto::message::{Element, Message};
use juxta::proto::rendezvous::messages::{lease_address, LeaseMessage};
use juxta::proto::resolver::{query_queue, RESOLVER_SERVICE};
use juxta::rendezvous::RendezvousConfig;
use juxta::{Peer, PeerConfig};

const WAIT: Duration = Duration::from_secs(20);
const SHORT: Duration = Duration::from_millis(1500);
const HOUR: Duration = Duration::from_secs(3600);

async fn start(dir: &tempfile::TempDir, name: &str, rc: RendezvousConfig) -> Peer {
    let mut c = PeerConfig::new(dir.path().join(name))
        .listen("127.0.0.1:0".parse().unwrap())
        .rendezvous(rc);
    c.key_bits = 1024;
    Peer::start(c).await.unwrap()
}

fn pipe_adv(name: &str, ty: PipeType) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(PipeId::new_random(), ty);
    a.name = Some(name.into());
    a
}

fn names(v: &[Advertisement]) -> Vec<String> {
    v.iter()
        .filter_map(|a| match a {
            Advertisement::Pipe(p) => p.name.clone(),
            _ => None,
        })
        .collect()
}

/// `p` joins `mg` (created by `owner`, its rendezvous) with a member
/// certificate and leases `owner` as an edge of the group.
async fn join_as_edge(
    p: &Peer,
    mg: &juxta::group::Group,
    owner: &Peer,
) -> (juxta::group::Group, juxta::rendezvous::RendezvousHandle) {
    let cred = mg.issue(p.peer_id(), HOUR, false).unwrap();
    let g = p
        .groups()
        .join_with_certificate(&mg.adv, &cred)
        .await
        .unwrap();
    let h = g
        .start_rendezvous(RendezvousConfig::edge(vec![owner.local_addr().unwrap()]))
        .unwrap();
    assert_eq!(h.wait_leased(WAIT).await, Some(owner.peer_id()));
    (g, h)
}

/// A remote search of group `g` for pipe advertisements named `pattern`
/// (one wanted).
async fn search(g: &juxta::group::Group, pattern: &str) -> juxta::discovery::Found {
    g.discovery()
        .search(AdvKind::Adv)
        .matching("Name", pattern)
        .threshold(1)
        .timeout(WAIT)
        .remote()
        .await
        .unwrap()
}

/// Until the group rendezvous `rdv` indexes an entry.
async fn until_indexed(rdv: &juxta::rendezvous::RendezvousHandle) {
    until("the group's index to hold a's entry", || {
        rdv.status().index_entries > 0
    })
    .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_find_each_other_through_their_groups_rendezvous_and_non_members_are_kept_out() {
    let dir = tempfile::tempdir().unwrap();
    // The Net peer group's rendezvous: not a member of the group.
    let r = start(&dir, "r", RendezvousConfig::rendezvous()).await;
    let net_seeds: Vec<SocketAddr> = vec![r.local_addr().unwrap()];
    let m = start(&dir, "m", RendezvousConfig::edge(net_seeds.clone())).await;
    let a = start(&dir, "a", RendezvousConfig::edge(net_seeds.clone())).await;
    let b = start(&dir, "b", RendezvousConfig::edge(net_seeds.clone())).await;
    let c = start(&dir, "c", RendezvousConfig::edge(net_seeds.clone())).await;
    for p in [&m, &a, &b, &c] {
        assert_eq!(
            p.rendezvous().unwrap().wait_leased(WAIT).await,
            Some(r.peer_id())
        );
    }

    // m creates a certificate group and is its rendezvous; a and b join
    // and lease it (its address is all they are told).
    let mg = m.groups().create_secure("club", HOUR).await.unwrap();
    let mrdv = mg.start_rendezvous(RendezvousConfig::rendezvous()).unwrap();
    assert!(matches!(
        mg.start_rendezvous(RendezvousConfig::rendezvous()),
        Err(juxta::group::GroupError::RendezvousRunning(_))
    ));
    let mut joined = Vec::new();
    for p in [&a, &b] {
        joined.push(join_as_edge(p, &mg, &m).await.0);
    }
    let (ag, bg) = (joined[0].clone(), joined[1].clone());
    assert!(!a.is_connected_to(&b.peer_id()));
    until("m to lease to a and b", || mrdv.status().clients == 2).await;

    // a publishes in the group (an SRDI entry at the group's rendezvous),
    // and in the Net group something the group must never see.
    ag.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("club-a", PipeType::Unicast)))
        .await
        .unwrap();
    a.discovery()
        .publish(&Advertisement::Pipe(pipe_adv(
            "club-net",
            PipeType::Unicast,
        )))
        .await
        .unwrap();
    until_indexed(&mrdv).await;
    // b finds it through m, and a answers b directly (they had never met).
    let found = search(&bg, "club-a").await;
    assert_eq!(names(&found.advertisements), vec!["club-a"]);
    assert_eq!(found.asked, 1, "asked the group's rendezvous only");
    // Never answered from the Net group's index (r holds club-net).
    let net_only = bg
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "club-net")
        .threshold(1)
        .timeout(SHORT)
        .remote()
        .await;
    match net_only {
        Ok(f) => assert!(f.advertisements.is_empty(), "{:?}", f.advertisements),
        Err(DiscoveryError::NoAnswer { .. }) => {}
        Err(e) => panic!("{e}"),
    }

    // Pipe binding through the group's rendezvous.
    let uni = pipe_adv("club-pipe", PipeType::Unicast);
    let mut ain = ag.pipes().create_input_pipe(&uni).unwrap();
    until("the group's index to hold a's pipe", || {
        mrdv.status().index_entries >= 2
    })
    .await;
    let out = bg
        .pipes()
        .create_output_pipe(&uni, &[], WAIT)
        .await
        .unwrap();
    assert_eq!(out.remote(), Some(a.peer_id()));
    out.send(Message::new().with(Element::text("app", "hi", "over the group")))
        .await
        .unwrap();
    let got = tokio::time::timeout(WAIT, ain.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got.message.get("app", "hi").unwrap().as_str(),
        Some("over the group")
    );

    // A propagate pipe in the group fans out through its rendezvous.
    let prop = pipe_adv("club-all", PipeType::Propagate);
    let mut aprop = ag.pipes().create_input_pipe(&prop).unwrap();
    let pout = bg
        .pipes()
        .create_output_pipe(&prop, &[], WAIT)
        .await
        .unwrap();
    pout.send(Message::new().with(Element::text("app", "all", "to everyone")))
        .await
        .unwrap();
    let got = tokio::time::timeout(WAIT, aprop.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got.message.get("app", "all").unwrap().as_str(),
        Some("to everyone")
    );

    // c, a non-member edge of the same Net rendezvous, tries to lease the
    // group's rendezvous (plain, and sealed with a certificate it signed
    // itself) and to query the group: all dropped and counted.
    let before = m.stats().group_unauthenticated;
    let to_m = c.connect(m.local_addr().unwrap()).await.unwrap();
    let pa = PeerAdvertisement::new(c.peer_id(), PeerGroupId::NET, "c").to_xml();
    let lease = LeaseMessage::Request {
        peer: c.peer_id(),
        peer_adv: pa.into(),
    }
    .to_message();
    let at = lease_address(&mg.id);
    to_m.send(&at.service, at.param.as_deref(), lease.clone())
        .await
        .unwrap();
    let own = SigningKey::generate(&mut rand::thread_rng());
    let own_cert = MemberCertificate::issue(
        &own,
        None,
        mg.id,
        c.peer_id(),
        own.public(),
        9,
        0,
        u64::MAX,
        false,
    );
    let label = format!("{}/{}", at.service, at.param.as_deref().unwrap());
    let sealed = seal::seal(
        &own,
        &own_cert,
        None,
        &label,
        &lease,
        juxta::cache::unix_now_ms(),
        &mut rand::thread_rng(),
    )
    .unwrap();
    to_m.send(
        &at.service,
        at.param.as_deref(),
        Message::new().with(Element::bytes("juxta", seal::SEALED_ELEMENT, sealed)),
    )
    .await
    .unwrap();
    let gq = mg.id.unique_value();
    let q = DiscoveryQuery::new(AdvKind::Adv, 5).to_resolver_query(91, c.peer_id());
    to_m.send(
        RESOLVER_SERVICE,
        Some(&query_queue(&gq)),
        Message::new().with(q.to_element(&gq)),
    )
    .await
    .unwrap();
    until("m to drop c's three messages", || {
        m.stats().group_unauthenticated >= before + 3
    })
    .await;
    assert_eq!(mrdv.status().clients, 2, "c holds no lease");
    assert_eq!(c.stats().discovery_late, 0);
    // The Net rendezvous holds none of the group's entries: c's search in
    // the Net group through r finds nothing of the group.
    let through_r = c
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "club-a")
        .threshold(1)
        .timeout(SHORT)
        .remote()
        .await;
    match through_r {
        Ok(f) => assert!(f.advertisements.is_empty(), "{:?}", f.advertisements),
        Err(DiscoveryError::NoAnswer { .. }) => {}
        Err(e) => panic!("{e}"),
    }

    // b publishes, then leaves: its entries are withdrawn from the group's
    // rendezvous and its lease ends.
    // (What the index holds before b publishes, so that b's entry is
    // waited for itself: a count the index may already hold is no proof.)
    let before_b = mrdv.status().index_entries;
    bg.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("club-b", PipeType::Unicast)))
        .await
        .unwrap();
    until("the group's index to hold b's entry", || {
        mrdv.status().index_entries > before_b
    })
    .await;
    let with_b = mrdv.status().index_entries;
    bg.leave().unwrap();
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let s = mrdv.status();
        if s.clients == 1 && s.index_entries < with_b {
            break;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for m to release b's lease and entries: clients {} entries {} (with b {with_b})",
            s.clients,
            s.index_entries
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gone = ag
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "club-b")
        .threshold(1)
        .timeout(SHORT)
        .remote()
        .await;
    match gone {
        Ok(f) => assert!(f.advertisements.is_empty(), "{:?}", f.advertisements),
        Err(DiscoveryError::NoAnswer { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    assert!(bg.rendezvous().is_none());
}

/// A member joining after a revocation learns the list in force from the
/// group's rendezvous (when leasing it) or from any member it is
/// connected to, and keeps it in its home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_joining_after_a_revocation_fetch_the_list_and_persist_it() {
    use juxta::proto::group::cert::RevocationList;
    let dir = tempfile::tempdir().unwrap();
    let m = start(&dir, "m", RendezvousConfig::rendezvous()).await;
    let mg = m.groups().create_secure("crl", HOUR).await.unwrap();
    let mrdv = mg.start_rendezvous(RendezvousConfig::rendezvous()).unwrap();
    let a = start(&dir, "a", RendezvousConfig::rendezvous()).await;
    let cred = mg.issue(a.peer_id(), HOUR, false).unwrap();
    let ag = a
        .groups()
        .join_with_certificate(&mg.adv, &cred)
        .await
        .unwrap();
    ag.start_rendezvous(RendezvousConfig::edge(vec![m.local_addr().unwrap()]))
        .unwrap()
        .wait_leased(WAIT)
        .await
        .unwrap();
    // m revokes a peer (x): a, connected, gets the list at once.
    let x = juxta::proto::id::PeerId::from_public_key_spki(b"x");
    mg.revoke(&[x], &[]).unwrap();
    until("a to hold the list", || ag.revocations().is_some()).await;

    // b joins later and leases the group's rendezvous: m hands it the list.
    let b = start(&dir, "b", RendezvousConfig::rendezvous()).await;
    let cred = mg.issue(b.peer_id(), HOUR, false).unwrap();
    let bg = b
        .groups()
        .join_with_certificate(&mg.adv, &cred)
        .await
        .unwrap();
    assert!(bg.revocations().is_none());
    bg.start_rendezvous(RendezvousConfig::edge(vec![m.local_addr().unwrap()]))
        .unwrap();
    until("b to receive the list from the group's rendezvous", || {
        bg.revocations().is_some_and(|l| l.peers == vec![x])
    })
    .await;
    assert_eq!(mrdv.status().clients, 2);

    // d joins connected only to a (a member, not the rendezvous): it asks
    // at join and a answers.
    let d = start(&dir, "d", RendezvousConfig::rendezvous()).await;
    d.connect(a.local_addr().unwrap()).await.unwrap();
    let cred = mg.issue(d.peer_id(), HOUR, false).unwrap();
    let dg = d
        .groups()
        .join_with_certificate(&mg.adv, &cred)
        .await
        .unwrap();
    until("d to receive the list from a", || {
        dg.revocations().is_some_and(|l| l.peers == vec![x])
    })
    .await;

    // Persisted in each member's home.
    for (home, name) in [("b", "b"), ("d", "d"), ("m", "m")] {
        let path = juxta::group::revocations_path(&dir.path().join(home), &mg.id);
        let l = RevocationList::decode(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(l.peers, vec![x], "{name}");
    }
    // A revoked peer with a persisted list cannot even join: b's own
    // certificate revoked and persisted, its join is refused at once.
    mg.revoke(&[b.peer_id()], &[]).unwrap();
    until("b to learn it is revoked", || {
        bg.revocations()
            .is_some_and(|l| l.peers.contains(&b.peer_id()))
    })
    .await;
    bg.leave().unwrap();
    let cred_again = mg.issue(b.peer_id(), HOUR, false).unwrap();
    let again = b.groups().join_with_certificate(&mg.adv, &cred_again).await;
    assert!(
        matches!(
            again,
            Err(juxta::group::GroupError::Certificate(
                juxta::proto::group::cert::CertError::Revoked
            ))
        ),
        "{again:?}"
    );
}

/// In a group whose traffic is encrypted, members find each other through
/// the group's rendezvous as before; a non-member on the same Net links
/// (connected to the members) receives only sealed bytes it cannot read,
/// and what it injects (in the clear, or sealed under a certificate it
/// made itself) is dropped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_group_traffic_is_unreadable_and_uninjectable_by_non_members() {
    use juxta::proto::resolver::response_queue;
    let dir = tempfile::tempdir().unwrap();
    let r = start(&dir, "r", RendezvousConfig::rendezvous()).await;
    let seeds = vec![r.local_addr().unwrap()];
    let m = start(&dir, "m", RendezvousConfig::edge(seeds.clone())).await;
    let a = start(&dir, "a", RendezvousConfig::edge(seeds.clone())).await;
    let b = start(&dir, "b", RendezvousConfig::edge(seeds.clone())).await;
    let c = start(&dir, "c", RendezvousConfig::edge(seeds.clone())).await;
    let mg = m
        .groups()
        .create_secure_encrypted("vault", HOUR)
        .await
        .unwrap();
    assert!(mg.is_encrypted());
    let mrdv = mg.start_rendezvous(RendezvousConfig::rendezvous()).unwrap();
    let mut joined = Vec::new();
    for p in [&a, &b] {
        let cred = mg.issue(p.peer_id(), HOUR, false).unwrap();
        assert!(cred.group_secret().is_some());
        let g = p
            .groups()
            .join_with_certificate(&mg.adv, &cred)
            .await
            .unwrap();
        assert!(g.is_encrypted());
        g.start_rendezvous(RendezvousConfig::edge(vec![m.local_addr().unwrap()]))
            .unwrap()
            .wait_leased(WAIT)
            .await
            .unwrap();
        joined.push(g);
    }
    let (ag, bg) = (joined[0].clone(), joined[1].clone());
    let secret = pipe_adv("vault-secret-name", PipeType::Unicast);
    ag.discovery()
        .publish(&Advertisement::Pipe(secret.clone()))
        .await
        .unwrap();
    until_indexed(&mrdv).await;
    let found = search(&bg, "vault-*").await;
    assert_eq!(names(&found.advertisements), vec!["vault-secret-name"]);

    // c, a non-member connected to a, listens on the group's queue and a
    // pushes the advertisement to every peer it is connected to.
    let g = mg.id.unique_value();
    let mut tap = c
        .listen(RESOLVER_SERVICE, Some(&response_queue(&g)))
        .unwrap();
    let to_a = c.connect(a.local_addr().unwrap()).await.unwrap();
    until("a to see c", || a.is_connected_to(&c.peer_id())).await;
    let sent = ag
        .discovery()
        .remote_publish(&Advertisement::Pipe(secret.clone()), Some(c.peer_id()))
        .await
        .unwrap();
    assert_eq!(sent, 1);
    let got = tokio::time::timeout(WAIT, tap.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(got.message.get("juxta", seal::SEALED_ELEMENT).is_some());
    for e in &got.message.elements {
        assert!(
            !e.data.windows(12).any(|w| w == b"vault-secret"),
            "plaintext visible in element {}",
            e.name
        );
    }

    // c injects into a: a query in the clear, and one sealed (in the
    // clear and "encrypted") under a certificate it made itself.
    let before = a.stats().group_unauthenticated;
    let queue = query_queue(&g);
    let q = DiscoveryQuery::new(AdvKind::Adv, 5).to_resolver_query(93, c.peer_id());
    to_a.send(
        RESOLVER_SERVICE,
        Some(&queue),
        Message::new().with(q.to_element(&g)),
    )
    .await
    .unwrap();
    let own = SigningKey::generate(&mut rand::thread_rng());
    let own_cert = MemberCertificate::issue(
        &own,
        None,
        mg.id,
        c.peer_id(),
        own.public(),
        9,
        0,
        u64::MAX,
        false,
    );
    let guess = seal::TrafficKey::derive(&[0; 32], &mg.id);
    let label = format!("{RESOLVER_SERVICE}/{queue}");
    for key in [None, Some(&guess)] {
        let sealed = seal::seal(
            &own,
            &own_cert,
            key,
            &label,
            &Message::new().with(q.to_element(&g)),
            juxta::cache::unix_now_ms(),
            &mut rand::thread_rng(),
        )
        .unwrap();
        to_a.send(
            RESOLVER_SERVICE,
            Some(&queue),
            Message::new().with(Element::bytes("juxta", seal::SEALED_ELEMENT, sealed)),
        )
        .await
        .unwrap();
    }
    until("a to drop c's three injections", || {
        a.stats().group_unauthenticated >= before + 3
    })
    .await;
    assert_eq!(c.stats().discovery_late, 0);
    // Nothing came back to c's tap (a answered nothing).
    assert!(
        tokio::time::timeout(SHORT, tap.recv()).await.is_err(),
        "c got an answer"
    );
}

/// A group's resolver traffic is decided by that group's node (run by its
/// rendezvous task): a search in the group is admitted by the group
/// rendezvous' resolver, not the Net group's, and the answer to the
/// member that asked passes its own group node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_resolver_traffic_passes_the_groups_node() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(&dir, "m", RendezvousConfig::rendezvous()).await;
    let mg = m.groups().create_secure("nodes", HOUR).await.unwrap();
    let mrdv = mg.start_rendezvous(RendezvousConfig::rendezvous()).unwrap();
    let mut joined = Vec::new();
    let mut peers = Vec::new();
    for name in ["a", "b"] {
        let p = start(&dir, name, RendezvousConfig::rendezvous()).await;
        joined.push(join_as_edge(&p, &mg, &m).await);
        peers.push(p);
    }
    let (ag, _) = &joined[0];
    let (bg, bh) = &joined[1];
    ag.discovery()
        .publish(&Advertisement::Pipe(pipe_adv("node-a", PipeType::Unicast)))
        .await
        .unwrap();
    until_indexed(&mrdv).await;
    let net_queries = m.rendezvous().unwrap().resolver_stats().queries;
    let found = search(bg, "node-a").await;
    assert_eq!(names(&found.advertisements), vec!["node-a"]);
    until("the group rendezvous' node to admit the search", || {
        mrdv.resolver_stats().queries >= 1
    })
    .await;
    until("b's group node to take the answer", || {
        bh.resolver_stats().responses >= 1
    })
    .await;
    // The group's search never reached the Net group's node of m.
    assert_eq!(
        m.rendezvous().unwrap().resolver_stats().queries,
        net_queries
    );
}
