//! The message-passing communicator: N ranks as N peers in one tokio
//! runtime, over loopback.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use juxta::mp::{Communicator, MpConfig, MpError, ReduceOp, ANY_SOURCE, ANY_TAG, SERVICE};

fn cfg() -> MpConfig {
    MpConfig {
        key_bits: 1024,
        liveness_interval: Duration::from_millis(20),
        boot_timeout: Duration::from_secs(30),
        // A bug that loses a message fails the test instead of hanging it.
        op_timeout: Some(Duration::from_secs(60)),
        ..MpConfig::default()
    }
}

fn free_seed() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Starts a job of `n` ranks with `cfg`; returns the communicators in
/// rank order.
async fn job_with(n: usize, cfg: MpConfig) -> Vec<Communicator> {
    let seed = free_seed();
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let c = cfg.clone();
            tokio::spawn(async move { Communicator::join(r, n, seed, "test", c).await })
        })
        .collect();
    let mut out = Vec::new();
    for (r, h) in hs.into_iter().enumerate() {
        let c = h.await.unwrap().unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert_eq!((c.rank(), c.size()), (r, n));
        out.push(c);
    }
    out
}

async fn job(n: usize) -> Vec<Communicator> {
    job_with(n, cfg()).await
}

/// Runs `f` on every rank at once; returns the results in rank order.
async fn each<F, Fut, T>(comms: &[Communicator], f: F) -> Vec<T>
where
    F: Fn(Communicator) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let hs: Vec<_> = comms.iter().map(|c| tokio::spawn(f(c.clone()))).collect();
    let mut out = Vec::new();
    for h in hs {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_to_point_matching() {
    let c = job(3).await;
    // Rank 1: tags 5 then 6; rank 2: tag 5.
    c[1].send(0, 5, &[1i32, 1]).await.unwrap();
    c[1].send(0, 6, &[2i32]).await.unwrap();
    c[2].send(0, 5, &[3i32, 3, 3]).await.unwrap();
    let r0 = &c[0];
    // Tag 6 first although tag 5 arrived before it.
    let mut b = [0i32; 8];
    let st = r0.recv(1, 6, &mut b).await.unwrap();
    assert_eq!((st.source, st.tag, st.len, b[0]), (1, 6, 4, 2));
    // Probe sees rank 2's message without taking it.
    let st = r0.probe(2, ANY_TAG).await.unwrap();
    assert_eq!((st.source, st.tag, st.len), (2, 5, 12));
    assert_eq!(r0.iprobe(2, 5).unwrap(), Some(st));
    // Any source, tag 5: both messages, each once.
    let mut got = Vec::new();
    for _ in 0..2 {
        let (v, st) = r0.recv_vec::<i32>(ANY_SOURCE, 5).await.unwrap();
        assert_eq!(v.len() * 4, st.len);
        got.push((st.source, v));
    }
    got.sort();
    assert_eq!(got, vec![(1, vec![1, 1]), (2, vec![3, 3, 3])]);
    assert_eq!(r0.iprobe(ANY_SOURCE, ANY_TAG).unwrap(), None);

    // Non-overtaking: same source and tag arrive in order.
    for i in 0..50i64 {
        c[2].send(1, 9, &[i]).await.unwrap();
    }
    for i in 0..50i64 {
        let (v, _) = c[1].recv_vec::<i64>(2, ANY_TAG).await.unwrap();
        assert_eq!(v, vec![i]);
    }

    // isend / irecv with test and wait.
    let mut rq = c[0].irecv(2, 11);
    assert!(!rq.test());
    let sq = c[2].isend(0, 11, Bytes::from_static(b"hello"));
    sq.wait().await.unwrap();
    let (b, st) = rq.wait().await.unwrap();
    assert_eq!((&b[..], st.source, st.tag), (&b"hello"[..], 2, 11));

    // sendrecv between 0 and 1 both ways at once, f64 and f32.
    let (a, b) = tokio::join!(
        async {
            let mut r = [0f64; 3];
            let st = c[0]
                .sendrecv(1, 1, &[1.5f64, 2.5, 3.5], 1, 2, &mut r)
                .await
                .unwrap();
            (st, r)
        },
        async {
            let mut r = [0f64; 3];
            let st = c[1]
                .sendrecv(0, 2, &[-1.0f64, -2.0, -3.0], 0, 1, &mut r)
                .await
                .unwrap();
            (st, r)
        }
    );
    assert_eq!(a.1, [-1.0, -2.0, -3.0]);
    assert_eq!(b.1, [1.5, 2.5, 3.5]);
    assert_eq!((a.0.source, b.0.source), (1, 0));

    // To self, u8 and f32.
    c[1].send(1, 3, &[7u8, 8]).await.unwrap();
    let mut u = [0u8; 2];
    c[1].recv(1, 3, &mut u).await.unwrap();
    assert_eq!(u, [7, 8]);
    c[2].send(2, 0, &[0.25f32]).await.unwrap();
    let (f, _) = c[2].recv_vec::<f32>(2, 0).await.unwrap();
    assert_eq!(f, vec![0.25]);

    // A 1 MB message arrives whole.
    let big: Vec<f64> = (0..131_072).map(|i| i as f64).collect();
    let (s, r) = tokio::join!(c[0].send(2, 4, &big), c[2].recv_vec::<f64>(0, 4));
    s.unwrap();
    assert_eq!(r.unwrap().0, big);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collectives_on_1_to_5_ranks() {
    for n in 1..=5usize {
        let c = job(n).await;
        for root in [0, n - 1, n / 2] {
            let out = each(&c, move |c| async move {
                let r = c.rank();
                c.barrier().await.unwrap();
                // bcast
                let mut b = if r == root {
                    [root as i64 * 10 + 1, 42]
                } else {
                    [0, 0]
                };
                c.bcast(&mut b, root).await.unwrap();
                assert_eq!(b, [root as i64 * 10 + 1, 42], "bcast n={n} root={root}");
                // reduce
                let red = c
                    .reduce(&[r as i32, 1, -(r as i32)], ReduceOp::Sum, root)
                    .await
                    .unwrap();
                let s = (0..n as i32).sum::<i32>();
                if r == root {
                    assert_eq!(red, Some(vec![s, n as i32, -s]), "reduce n={n}");
                } else {
                    assert_eq!(red, None);
                }
                let mx = c.reduce(&[r as f32], ReduceOp::Max, root).await.unwrap();
                if r == root {
                    assert_eq!(mx, Some(vec![(n - 1) as f32]));
                }
                // allreduce, every op
                for (op, want) in [
                    (ReduceOp::Sum, (0..n).map(|x| x as f64 + 1.0).sum::<f64>()),
                    (ReduceOp::Min, 1.0),
                    (ReduceOp::Max, n as f64),
                    (ReduceOp::Prod, (1..=n).map(|x| x as f64).product::<f64>()),
                ] {
                    let mut x = [r as f64 + 1.0; 5];
                    c.allreduce(&mut x, op).await.unwrap();
                    assert_eq!(x, [want; 5], "allreduce {op:?} n={n}");
                }
                // Large enough for reduce-scatter + allgather (uneven
                // blocks: 5003 elements).
                let mut big: Vec<f64> = (0..5003).map(|i| (i % 11) as f64 + r as f64).collect();
                c.allreduce(&mut big, ReduceOp::Sum).await.unwrap();
                let rs = (0..n).sum::<usize>() as f64;
                assert!(
                    big.iter()
                        .enumerate()
                        .all(|(i, v)| *v == n as f64 * (i % 11) as f64 + rs),
                    "large allreduce n={n}"
                );
                let mut bigi: Vec<i32> = vec![r as i32 + 1; 9000];
                c.allreduce(&mut bigi, ReduceOp::Max).await.unwrap();
                assert!(bigi.iter().all(|v| *v == n as i32), "large max n={n}");
                let mut xi = [r as i64 * 3, 1];
                c.allreduce(&mut xi, ReduceOp::Sum).await.unwrap();
                assert_eq!(xi, [3 * (0..n as i64).sum::<i64>(), n as i64]);
                // gather
                let g = c.gather(&[r as i32, r as i32 * 2], root).await.unwrap();
                if r == root {
                    let want: Vec<i32> = (0..n as i32).flat_map(|i| [i, i * 2]).collect();
                    assert_eq!(g, Some(want), "gather n={n} root={root}");
                } else {
                    assert_eq!(g, None);
                }
                // scatter
                let all: Vec<u8> = (0..(3 * n) as u8).collect();
                let mine = c
                    .scatter((r == root).then_some(&all[..]), 3, root)
                    .await
                    .unwrap();
                assert_eq!(mine, all[3 * r..3 * r + 3].to_vec(), "scatter n={n}");
                // allgather
                let ag = c.allgather(&[r as f32 + 0.5]).await.unwrap();
                let want: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
                assert_eq!(ag, want, "allgather n={n}");
                // alltoall: rank r sends r*100+j to j
                let send: Vec<i32> = (0..n as i32).map(|j| r as i32 * 100 + j).collect();
                let got = c.alltoall(&send).await.unwrap();
                let want: Vec<i32> = (0..n as i32).map(|i| i * 100 + r as i32).collect();
                assert_eq!(got, want, "alltoall n={n}");
                c.barrier().await.unwrap();
                r
            })
            .await;
            assert_eq!(out, (0..n).collect::<Vec<_>>());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_allreduce_and_bcast_on_3_ranks() {
    let c = job(3).await;
    let n = 131_072; // 1 MB of f64
    let out = each(&c, move |c| async move {
        let mut x: Vec<f64> = (0..n).map(|i| (i % 7) as f64 + c.rank() as f64).collect();
        c.allreduce(&mut x, ReduceOp::Sum).await.unwrap();
        let ok = x
            .iter()
            .enumerate()
            .all(|(i, v)| *v == 3.0 * (i % 7) as f64 + 3.0);
        let mut b: Vec<f64> = if c.rank() == 2 {
            vec![1.25; n]
        } else {
            vec![0.0; n]
        };
        c.bcast(&mut b, 2).await.unwrap();
        ok && b.iter().all(|v| *v == 1.25)
    })
    .await;
    assert_eq!(out, vec![true; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_message_stays_for_the_next_receive() {
    let c = job(2).await;
    c[1].send(0, 1, &[1i32, 2, 3, 4, 5, 6, 7, 8]).await.unwrap();
    let mut small = [0i32; 4];
    match c[0].recv(1, 1, &mut small).await {
        Err(MpError::Truncated {
            source_rank,
            tag,
            len,
            capacity,
        }) => assert_eq!((source_rank, tag, len, capacity), (1, 1, 32, 16)),
        other => panic!("want Truncated, got {other:?}"),
    }
    assert_eq!(small, [0; 4]);
    assert_eq!(c[0].stats().truncated, 1);
    let mut big = [0i32; 8];
    let st = c[0].recv(1, 1, &mut big).await.unwrap();
    assert_eq!(st.len, 32);
    assert_eq!(big, [1, 2, 3, 4, 5, 6, 7, 8]);
    // A message that is not a whole number of elements.
    c[1].send(0, 2, &[1u8, 2, 3]).await.unwrap();
    let mut f = [0f64; 2];
    assert!(matches!(
        c[0].recv(1, 2, &mut f).await,
        Err(MpError::BadLength { len: 3, .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_rank_fails_pending_operations_naming_it() {
    let mut c = job(3).await;
    let dead = c.pop().unwrap();
    assert_eq!(dead.rank(), 2);
    let pending = {
        let c0 = c[0].clone();
        tokio::spawn(async move {
            let mut b = [0u8; 4];
            c0.recv(2, 0, &mut b).await
        })
    };
    drop(dead);
    match pending.await.unwrap() {
        Err(MpError::RankDead { rank }) => assert_eq!(rank, 2),
        other => panic!("want RankDead, got {other:?}"),
    }
    // Any source: also fails, naming the dead rank.
    let mut b = [0u8; 4];
    match c[1].recv(ANY_SOURCE, ANY_TAG, &mut b).await {
        Err(MpError::RankDead { rank }) => assert_eq!(rank, 2),
        other => panic!("want RankDead, got {other:?}"),
    }
    // A collective needing rank 2 fails too.
    match c[0].barrier().await {
        Err(MpError::RankDead { rank }) => assert_eq!(rank, 2),
        other => panic!("want RankDead, got {other:?}"),
    }
    // Sends to it fail.
    assert!(c[1].send(2, 0, &[1u8]).await.is_err());
    // The live ranks still talk.
    c[1].send(0, 5, &[9u8]).await.unwrap();
    c[0].recv(1, 5, &mut b).await.unwrap();
    assert_eq!(b[0], 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op_timeout_names_the_rank() {
    let c = job_with(
        2,
        MpConfig {
            op_timeout: Some(Duration::from_millis(200)),
            ..cfg()
        },
    )
    .await;
    let mut b = [0u8; 1];
    match c[0].recv(1, 0, &mut b).await {
        Err(MpError::Timeout { rank, .. }) => assert_eq!(rank, 1),
        other => panic!("want Timeout, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_and_bad_tags_are_typed_errors() {
    let c = job(2).await;
    let mut b = [0u8; 1];
    let oor = |r: Result<(), MpError>| {
        assert!(
            matches!(r, Err(MpError::RankOutOfRange { rank: 5, size: 2 })),
            "{r:?}"
        )
    };
    oor(c[0].send(5, 0, &[1u8]).await);
    oor(c[0].recv(5, 0, &mut b).await.map(|_| ()));
    oor(c[0].bcast(&mut b, 5).await);
    oor(c[0].reduce(&b, ReduceOp::Sum, 5).await.map(|_| ()));
    oor(c[0].gather(&b, 5).await.map(|_| ()));
    oor(c[0].scatter(Some(&b[..]), 1, 5).await.map(|_| ()));
    assert!(matches!(
        c[0].send(1, -2, &b).await,
        Err(MpError::BadTag(-2))
    ));
    assert!(matches!(
        c[0].send(1, ANY_TAG, &b).await,
        Err(MpError::BadTag(-1))
    ));
    assert!(matches!(
        c[0].recv(1, -7, &mut b).await,
        Err(MpError::BadTag(-7))
    ));
    // Scatter data of the wrong length, alltoall not a multiple of size.
    assert!(matches!(
        c[0].scatter(Some(&[1u8, 2, 3][..]), 1, 0).await,
        Err(MpError::BadLength { len: 3, .. })
    ));
    assert!(matches!(
        c[0].alltoall(&[1u8, 2, 3]).await,
        Err(MpError::BadLength { len: 3, .. })
    ));
    // Job layout.
    let seed = free_seed();
    assert!(matches!(
        Communicator::join(3, 2, seed, "x", cfg()).await,
        Err(MpError::Boot(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatched_collectives_are_typed_errors() {
    let c2 = job(2).await;
    // Different counts on an allreduce.
    let (a, b) = tokio::join!(
        async {
            let mut x = [1f64; 4];
            c2[0].allreduce(&mut x, ReduceOp::Sum).await
        },
        async {
            let mut x = [1f64; 5];
            c2[1].allreduce(&mut x, ReduceOp::Sum).await
        }
    );
    for (r, e) in [(1, a), (0, b)] {
        match e {
            Err(MpError::CollectiveMismatch { rank, what, .. }) => {
                assert_eq!((rank, what), (r, "count"))
            }
            other => panic!("want CollectiveMismatch, got {other:?}"),
        }
    }
    let c3 = job(2).await;
    // Different collectives at the same point.
    let (a, b) = tokio::join!(c3[0].barrier(), async {
        let mut x = [1i32];
        c3[1].allreduce(&mut x, ReduceOp::Max).await
    });
    assert!(matches!(
        a,
        Err(MpError::CollectiveMismatch {
            rank: 1,
            what: "kind",
            ..
        })
    ));
    assert!(matches!(
        b,
        Err(MpError::CollectiveMismatch {
            rank: 0,
            what: "kind",
            ..
        })
    ));
    let c4 = job_with(
        3,
        MpConfig {
            op_timeout: Some(Duration::from_secs(5)),
            ..cfg()
        },
    )
    .await;
    // Roots differ: rank 2 takes itself for the root of a bcast that
    // ranks 0 and 1 root at 0; rank 2 gets rank 0's message and says so.
    let out = each(&c4, |c| async move {
        let root = if c.rank() == 2 { 1 } else { 0 };
        let mut x = [c.rank() as i32; 2];
        c.bcast(&mut x, root).await
    })
    .await;
    assert!(out[0].is_ok() && out[1].is_ok(), "{out:?}");
    assert!(
        matches!(
            out[2],
            Err(MpError::CollectiveMismatch {
                rank: 0,
                what: "root",
                expected: 1,
                got: 0
            })
        ),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_from_outside_the_job_are_refused_and_counted() {
    let c = job_with(
        2,
        MpConfig {
            op_timeout: Some(Duration::from_millis(300)),
            ..cfg()
        },
    )
    .await;
    // A stranger peer sends a well-formed communicator message to rank 0.
    let home = tempfile::tempdir().unwrap();
    let mut pc = juxta::PeerConfig::new(home.path());
    pc.key_bits = 1024;
    let stranger = juxta::Peer::start(pc).await.unwrap();
    let m = stranger
        .connect(c[0].peer().local_addr().unwrap())
        .await
        .unwrap();
    assert!(m.wait_compact(Duration::from_secs(10)).await);
    let mut hdr = [0u8; 32];
    hdr[0] = 1; // version; ctx p2p, src rank 1, tag 0
    hdr[4] = 1;
    let msg = |hdr: &[u8]| {
        juxta::proto::message::Message::new()
            .with(juxta::proto::message::Element::bytes(
                "juxta-mp",
                "h",
                Bytes::copy_from_slice(hdr),
            ))
            .with(juxta::proto::message::Element::bytes(
                "juxta-mp",
                "d",
                Bytes::from_static(b"evil"),
            ))
    };
    m.send(SERVICE, Some("test"), msg(&hdr)).await.unwrap();
    // A member claiming to be another rank, and a short header.
    let to0 = c[1].peer().messenger(&c[0].peer().peer_id()).unwrap();
    let mut forged = hdr;
    forged[4] = 0;
    to0.send(SERVICE, Some("test"), msg(&forged)).await.unwrap();
    to0.send(SERVICE, Some("test"), msg(&hdr[..10]))
        .await
        .unwrap();
    let mut b = [0u8; 8];
    assert!(matches!(
        c[0].recv(ANY_SOURCE, ANY_TAG, &mut b).await,
        Err(MpError::Timeout { .. })
    ));
    assert_eq!(c[0].stats().refused_outsider, 1);
    assert_eq!(c[0].stats().refused_malformed, 2);
    // Rank 1 is still served.
    c[1].send(0, 0, &[5u8]).await.unwrap();
    let st = c[0].recv(ANY_SOURCE, ANY_TAG, &mut b).await.unwrap();
    assert_eq!((st.source, st.len, b[0]), (1, 1, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_unexpected_queue_pushes_back() {
    let c = job_with(
        2,
        MpConfig {
            max_unexpected: 2,
            op_timeout: Some(Duration::from_millis(300)),
            ..cfg()
        },
    )
    .await;
    for t in 1..=3 {
        c[1].send(0, t, &[t as u8]).await.unwrap();
    }
    let mut b = [0u8; 1];
    // Tag 3 is behind two unexpected messages filling the queue.
    assert!(matches!(
        c[0].recv(1, 3, &mut b).await,
        Err(MpError::Timeout { rank: 1, .. })
    ));
    assert!(c[0].stats().pushback > 0);
    for t in 1..=3 {
        c[0].recv(1, t, &mut b).await.unwrap();
        assert_eq!(b[0], t as u8);
    }
}

/// `rank_main` runs the program as a task of its own runtime (not as the
/// `block_on` future), returns its output, and raises its panic again.
#[test]
fn rank_main_runs_the_program_in_a_task() {
    let out = juxta::mp::rank_main(async {
        // Inside a spawned task, not the runtime's block_on future.
        assert!(tokio::task::try_id().is_some());
        // Two ranks of a job in this one task: the communicator works there.
        let cfg = cfg();
        let seed = free_seed();
        let (a, b) = tokio::join!(
            Communicator::join(0, 2, seed, "rank-main", cfg.clone()),
            Communicator::join(1, 2, seed, "rank-main", cfg)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let (sent, got) = tokio::join!(
            a.send_bytes(1, 3, Bytes::from_static(b"hi")),
            b.recv_bytes(0, 3)
        );
        sent.unwrap();
        got.unwrap().0
    })
    .unwrap();
    assert_eq!(&out[..], b"hi");
    let panicked =
        std::panic::catch_unwind(|| juxta::mp::rank_main(async { panic!("rank failed") }));
    let msg = panicked.unwrap_err();
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"rank failed"));
}
