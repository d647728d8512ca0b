//! The tasks a peer spawns, tracked so that [`crate::Peer::close`] can end
//! and await them (with a bound) and dropping the [`crate::Peer`] can abort
//! them: no task of a closed or dropped peer keeps running, holding its
//! sockets or its state.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The tracked tasks of one peer (finished ones are pruned as new ones
/// come).
#[derive(Default)]
pub(crate) struct Tasks {
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// Set once the peer closes or is dropped: nothing is spawned after.
    stopped: AtomicBool,
}

/// How the tracked tasks ended ([`Tasks::stop`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stopped {
    /// Tasks that had finished on their own when the stop came.
    pub(crate) finished: usize,
    /// Tasks cancelled at an await point (service loops), and ended.
    pub(crate) cancelled: usize,
    /// Tasks still running at the deadline (busy without yielding); they
    /// stay aborted and end at their next await.
    pub(crate) stuck: usize,
}

impl Tasks {
    /// Spawns `f` as a tracked task; once the peer has stopped, `f` is
    /// dropped instead (a handle that outlives its peer starts nothing).
    pub(crate) fn spawn<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.is_stopped() {
            return;
        }
        self.adopt(tokio::spawn(f));
    }

    /// Tracks a task spawned elsewhere (aborted at once if the peer has
    /// stopped).
    pub(crate) fn adopt(&self, h: JoinHandle<()>) {
        let mut v = self.handles.lock().expect("tasks lock");
        if self.is_stopped() {
            h.abort();
            return;
        }
        v.retain(|h| !h.is_finished());
        v.push(h);
    }

    /// Whether the peer has stopped.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Tasks not finished yet.
    #[cfg(test)]
    pub(crate) fn running(&self) -> usize {
        let mut v = self.handles.lock().expect("tasks lock");
        v.retain(|h| !h.is_finished());
        v.len()
    }

    /// Aborts every task without waiting (a dropped peer).
    pub(crate) fn abort_all(&self) {
        let mut v = self.handles.lock().expect("tasks lock");
        self.stopped.store(true, Ordering::Release);
        for h in v.drain(..) {
            h.abort();
        }
    }

    /// Stops spawning, cancels every task still running and awaits them
    /// all until `deadline`.
    pub(crate) async fn stop(&self, deadline: Instant) -> Stopped {
        let handles: Vec<JoinHandle<()>> = {
            let mut v = self.handles.lock().expect("tasks lock");
            self.stopped.store(true, Ordering::Release);
            v.drain(..).collect()
        };
        let mut out = Stopped::default();
        let mut waiting = Vec::new();
        for h in handles {
            if h.is_finished() {
                out.finished += 1;
            } else {
                h.abort();
                waiting.push(h);
            }
        }
        for h in waiting {
            match tokio::time::timeout_at(deadline, h).await {
                // Finished between the check and the abort, or cancelled.
                Ok(Ok(())) => out.finished += 1,
                Ok(Err(_)) => out.cancelled += 1,
                Err(_) => out.stuck += 1,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::rendezvous::RendezvousConfig;
    use crate::{Peer, PeerConfig};

    /// Dropping every handle of a peer frees its state: no task (nor
    /// anything else) keeps it alive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_every_handle_frees_the_peer() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = |n: &str| PeerConfig::new(dir.path().join(n)).key_bits(1024);
        let a = Peer::start(
            cfg("a")
                .listen("127.0.0.1:0".parse().unwrap())
                .rendezvous(RendezvousConfig::rendezvous()),
        )
        .await
        .unwrap();
        let b =
            Peer::start(cfg("b").rendezvous(RendezvousConfig::edge(vec![a.local_addr().unwrap()])))
                .await
                .unwrap();
        assert!(b
            .rendezvous()
            .unwrap()
            .wait_leased(Duration::from_secs(10))
            .await
            .is_some());
        let (wa, wb) = (Arc::downgrade(&a.inner), Arc::downgrade(&b.inner));
        assert!(a.inner.tasks.running() > 0);
        let m = b.messenger(&a.peer_id()).unwrap();
        drop((a, b, m));
        let freed = tokio::time::timeout(Duration::from_secs(10), async {
            while wa.strong_count() + wb.strong_count() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            freed.is_ok(),
            "peer state still held: a {} b {}",
            wa.strong_count(),
            wb.strong_count()
        );
    }

    /// A closed peer's handles start no task.
    #[tokio::test]
    async fn nothing_is_spawned_after_the_stop() {
        let t = super::Tasks::default();
        t.spawn(std::future::pending());
        assert_eq!(t.running(), 1);
        let s = t
            .stop(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
        assert_eq!(s.cancelled, 1);
        assert_eq!(s.stuck, 0);
        t.spawn(std::future::pending());
        assert_eq!(t.running(), 0);
    }
}
