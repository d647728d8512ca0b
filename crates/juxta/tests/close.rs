//! Ending a peer: `Peer::close` gives the leases back, closes every
//! connection with the close handshake, ends every task and unlocks the
//! home; dropping a peer without closing it never keeps it alive.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use juxta::relay::RelayConfig;
use juxta::rendezvous::{RendezvousConfig, RendezvousEvent};
use juxta::{CloseError, Peer, PeerConfig};

fn config(home: &Path) -> PeerConfig {
    PeerConfig::new(home).key_bits(1024)
}

/// Waits (up to 10 s, then fails) until `f` holds.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "never: {what}");
}

fn port_free(addr: SocketAddr) -> bool {
    TcpListener::bind(addr).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_gives_the_leases_back_and_ends_everything() {
    let dir = tempfile::tempdir().unwrap();
    let rdv = Peer::start(
        config(&dir.path().join("rdv"))
            .listen("127.0.0.1:0".parse().unwrap())
            .rendezvous(RendezvousConfig::rendezvous())
            .relay(RelayConfig::server()),
    )
    .await
    .unwrap();
    let seeds = vec![rdv.local_addr().unwrap()];
    let mut events = rdv.rendezvous().unwrap().subscribe();
    let edge_home = dir.path().join("edge");
    let edge = Peer::start(
        config(&edge_home)
            .listen("127.0.0.1:0".parse().unwrap())
            .rendezvous(RendezvousConfig::edge(seeds.clone()))
            .relay(RelayConfig::client(seeds)),
    )
    .await
    .unwrap();
    let edge_id = edge.peer_id();
    let edge_addr = edge.local_addr().unwrap();
    assert_eq!(
        edge.rendezvous()
            .unwrap()
            .wait_leased(Duration::from_secs(10))
            .await,
        Some(rdv.peer_id())
    );
    assert_eq!(
        edge.relay()
            .unwrap()
            .wait_leased(Duration::from_secs(10))
            .await,
        Some(rdv.peer_id())
    );
    let relay = rdv.relay().unwrap();
    assert_eq!(relay.counters().clients, 1);

    let report = edge.close().await.expect("closed within the bound");
    assert!(report.rendezvous_released, "{report:?}");
    assert!(report.relay_released, "{report:?}");
    assert!(report.connections_closed >= 1, "{report:?}");
    assert_eq!(report.connections_cut, 0, "{report:?}");
    assert_eq!(report.tasks_aborted, 0, "{report:?}");
    assert!(report.tasks_cancelled >= 1, "{report:?}");

    // Everything is let go of when close returns: the listen port, the
    // connection (the rendezvous saw the close handshake), the home.
    assert!(port_free(edge_addr), "listen port still held after close");
    eventually("the rendezvous drops the connection", || {
        !rdv.is_connected_to(&edge_id)
    })
    .await;
    let again = Peer::start(config(&edge_home)).await.unwrap();
    assert_eq!(again.peer_id(), edge_id);
    drop(again);

    // The rendezvous and the relay let the edge go.
    let left = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(RendezvousEvent::ClientLeft(p)) if p == edge_id => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(left, Ok(true), "the rendezvous never saw the edge leave");
    eventually("the relay lease ends", || relay.counters().clients == 0).await;
    // One lease, given back once: the closing edge's lease task took no
    // new lease on a connection dialled while it was being stopped.
    assert_eq!(
        relay.counters().server.leases_ended,
        1,
        "{:?}",
        relay.counters()
    );

    // A second close is refused, and the closed peer sends nothing.
    assert!(matches!(edge.close().await, Err(CloseError::AlreadyClosed)));
    assert!(edge.connect(rdv.local_addr().unwrap()).await.is_err());

    let rdv_addr = rdv.local_addr().unwrap();
    let r = rdv.close().await.expect("rendezvous closed");
    assert!(!r.rendezvous_released && !r.relay_released, "{r:?}");
    assert!(port_free(rdv_addr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_peer_frees_its_port_and_its_connections() {
    let dir = tempfile::tempdir().unwrap();
    let a = Peer::start(
        config(&dir.path().join("a"))
            .listen("127.0.0.1:0".parse().unwrap())
            .rendezvous(RendezvousConfig::rendezvous()),
    )
    .await
    .unwrap();
    let b = Peer::start(
        config(&dir.path().join("b"))
            .rendezvous(RendezvousConfig::edge(vec![a.local_addr().unwrap()])),
    )
    .await
    .unwrap();
    assert!(b
        .rendezvous()
        .unwrap()
        .wait_leased(Duration::from_secs(10))
        .await
        .is_some());
    let a_addr = a.local_addr().unwrap();
    let a_id = a.peer_id();
    // Handles of every kind, dropped with the peer.
    let listener = a.listen("app", None).unwrap();
    let rdv = a.rendezvous().unwrap().clone();
    let to_b = a.messenger(&b.peer_id()).unwrap();
    drop((a, listener, rdv, to_b));

    // Its accept loop has stopped and its sockets are closed: the port is
    // free and the edge sees its connection end.
    eventually("the port is free", || port_free(a_addr)).await;
    eventually("the edge's connection closes", || !b.is_connected_to(&a_id)).await;
    // The home is free again.
    let again = Peer::start(config(&dir.path().join("a"))).await.unwrap();
    assert_eq!(again.peer_id(), a_id);
}
