//! Dialing: services that start together dial the same address at once
//! (an edge's rendezvous and relay clients dial the same seed); the dials
//! share one connection instead of racing to open duplicates, which a
//! peer would then have to tell apart (a lease taken on one, given back
//! on the other).

use juxta::{Peer, PeerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_dials_to_one_address_share_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = Peer::start(
        PeerConfig::new(dir.path().join("server"))
            .key_bits(1024)
            .listen("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let addr = server.local_addr().unwrap();
    let client = Peer::start(PeerConfig::new(dir.path().join("client")).key_bits(1024))
        .await
        .unwrap();
    let (a, b, c, d) = tokio::join!(
        client.connect(addr),
        client.connect(addr),
        client.connect(addr),
        client.connect(addr)
    );
    let first = a.unwrap();
    for m in [b.unwrap(), c.unwrap(), d.unwrap()] {
        assert!(
            m.link().id == first.link().id,
            "a second connection was opened to the same address"
        );
    }
    assert_eq!(first.remote(), server.peer_id());
    // A later dial reuses it too.
    let again = client.connect(addr).await.unwrap();
    assert!(again.link().id == first.link().id);
    client.close().await.unwrap();
    server.close().await.unwrap();
}
