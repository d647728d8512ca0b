//! Async access to an [`AdvCache`] from the tokio runtime.
//!
//! Why this exists: `rusqlite::Connection` is `Send` but not `Sync`, and
//! every SQLite call blocks. Running it on a runtime worker would stall
//! unrelated tasks (a cold page read, a WAL write at commit). The handle
//! gives the cache to dedicated OS threads and sends them jobs over
//! **bounded** channels: when a queue is full, callers wait (back
//! pressure), nothing is dropped.
//!
//! For a file-backed cache there are two threads: a writer (publish,
//! remove, purge) and a reader with its own read-only connection (query,
//! get, len). In WAL mode a reader never waits for the writer, so a purge
//! batch or a large `publish_many` does not pause queries. A write that
//! has been awaited is visible to every later read. An in-memory cache
//! has a single thread for both.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::filter::ExactFilter;
use super::{
    AdvCache, AdvKind, BatchOutcome, CacheEntry, CacheError, CachedAdv, PublishOutcome,
    QueryOutcome,
};

type Job = Box<dyn FnOnce(&mut AdvCache) + Send>;

/// A cloneable async handle to an [`AdvCache`] owned by worker threads
/// (a writer, and a reader for a file-backed cache).
///
/// The workers stop (and the database is closed) when the last handle is
/// dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), juxta::cache::CacheError> {
/// use juxta::cache::{AdvCache, AdvKind, CacheHandle};
/// let cache = CacheHandle::spawn(AdvCache::open_in_memory()?, 64)?;
/// assert_eq!(cache.len().await?, 0);
/// let hits = cache.query(AdvKind::Peer, Some("Name".into()), Some("*".into()), 10, 0).await?;
/// assert!(hits.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct CacheHandle {
    tx: mpsc::Sender<Job>,
    reader: mpsc::Sender<Job>,
    /// Exact queries for a value the cache certainly does not hold are
    /// answered here, without a trip to the reader (`filter.rs`).
    filter: ExactFilter,
}

impl CacheHandle {
    /// Moves `cache` to a writer thread (`juxta-adv-cache`) and, for a
    /// file-backed cache, opens a read-only connection for a reader thread
    /// (`juxta-adv-cache-r`); at most `queue` requests wait for each
    /// (minimum 1).
    pub fn spawn(cache: AdvCache, queue: usize) -> Result<CacheHandle, CacheError> {
        let reader = cache.open_reader()?;
        let filter = cache.filter().clone();
        let tx = worker(cache, queue, "juxta-adv-cache")?;
        let reader = match reader {
            Some(r) => worker(r, queue, "juxta-adv-cache-r")?,
            None => tx.clone(),
        };
        // The writer's first job; until it is done every query goes to
        // SQLite. A failure leaves it unbuilt (everything may match).
        let build: Job = Box::new(|c| {
            if let Err(e) = c.rebuild_filter() {
                tracing::warn!(error = %e, "cache filter not built");
            }
        });
        tx.try_send(build).map_err(|_| CacheError::Closed)?;
        Ok(CacheHandle { tx, reader, filter })
    }

    async fn run<R, F>(tx: &mpsc::Sender<Job>, f: F) -> Result<R, CacheError>
    where
        F: FnOnce(&mut AdvCache) -> R + Send + 'static,
        R: Send + 'static,
    {
        let (otx, orx) = oneshot::channel();
        let job: Job = Box::new(move |c| {
            // The caller may have gone away (cancelled); nothing to do then.
            let _ = otx.send(f(c));
        });
        tx.send(job).await.map_err(|_| CacheError::Closed)?;
        orx.await.map_err(|_| CacheError::Closed)
    }

    /// Runs `f` on the read-only connection (the writer's, for an
    /// in-memory cache). Writes from `f` fail with a read-only error.
    pub async fn call_read<R, F>(&self, f: F) -> Result<R, CacheError>
    where
        F: FnOnce(&mut AdvCache) -> R + Send + 'static,
        R: Send + 'static,
    {
        Self::run(&self.reader, f).await
    }

    /// Runs `f` on the writer thread and returns its result.
    pub async fn call<R, F>(&self, f: F) -> Result<R, CacheError>
    where
        F: FnOnce(&mut AdvCache) -> R + Send + 'static,
        R: Send + 'static,
    {
        Self::run(&self.tx, f).await
    }

    /// [`AdvCache::publish`] on the writer.
    pub async fn publish(
        &self,
        entry: CacheEntry,
        now_ms: u64,
    ) -> Result<PublishOutcome, CacheError> {
        self.call(move |c| c.publish(entry, now_ms)).await?
    }

    /// [`AdvCache::publish_many`] on the writer.
    pub async fn publish_many(
        &self,
        entries: Vec<CacheEntry>,
        now_ms: u64,
    ) -> Result<BatchOutcome, CacheError> {
        self.call(move |c| c.publish_many(entries, now_ms)).await?
    }

    /// `false` only if an exact query for `value` of `attr` in `kind`
    /// certainly matches nothing here (the cache's filter, no trip to the
    /// reader); `true` for wildcards, queries without an attribute, and
    /// before the filter's first build.
    pub(crate) fn may_hold(&self, kind: AdvKind, attr: Option<&str>, value: Option<&str>) -> bool {
        self.filter.may_match(kind, attr, value)
    }

    /// [`AdvCache::query`] on the reader.
    pub async fn query(
        &self,
        kind: AdvKind,
        attr: Option<String>,
        value: Option<String>,
        threshold: usize,
        now_ms: u64,
    ) -> Result<Vec<CachedAdv>, CacheError> {
        if !self
            .filter
            .may_match(kind, attr.as_deref(), value.as_deref())
        {
            return Ok(Vec::new());
        }
        self.call_read(move |c| c.query(kind, attr.as_deref(), value.as_deref(), threshold, now_ms))
            .await?
    }

    /// [`AdvCache::query_outcome`] on the reader.
    pub async fn query_outcome(
        &self,
        kind: AdvKind,
        attr: Option<String>,
        value: Option<String>,
        threshold: usize,
        now_ms: u64,
    ) -> Result<QueryOutcome, CacheError> {
        if !self
            .filter
            .may_match(kind, attr.as_deref(), value.as_deref())
        {
            return Ok(QueryOutcome::default());
        }
        self.call_read(move |c| {
            c.query_outcome(kind, attr.as_deref(), value.as_deref(), threshold, now_ms)
        })
        .await?
    }

    /// [`AdvCache::get`] on the reader.
    pub async fn get(&self, id: String, now_ms: u64) -> Result<Option<CachedAdv>, CacheError> {
        self.call_read(move |c| c.get(&id, now_ms)).await?
    }

    /// [`AdvCache::remove`] on the writer.
    pub async fn remove(&self, id: String) -> Result<bool, CacheError> {
        self.call(move |c| c.remove(&id)).await?
    }

    /// [`AdvCache::purge_expired`] on the writer.
    pub async fn purge_expired(&self, now_ms: u64, max_rows: usize) -> Result<usize, CacheError> {
        self.call(move |c| c.purge_expired(now_ms, max_rows))
            .await?
    }

    /// [`AdvCache::len`] on the reader.
    pub async fn len(&self) -> Result<u64, CacheError> {
        self.call_read(|c| c.len()).await?
    }

    /// [`AdvCache::is_empty`] on the reader.
    pub async fn is_empty(&self) -> Result<bool, CacheError> {
        self.call_read(|c| c.is_empty()).await?
    }

    /// A task body that purges up to `batch` expired entries every
    /// `period`, reading the time from `now_ms`. It holds only a weak
    /// reference: it ends with `Ok(())` once every handle is dropped, or
    /// with the error of a failed purge. Spawn it next to the peer.
    pub fn purge_periodically(
        &self,
        period: Duration,
        batch: usize,
        now_ms: impl Fn() -> u64 + Send + 'static,
    ) -> impl std::future::Future<Output = Result<(), CacheError>> + Send + 'static {
        let weak = self.tx.downgrade();
        let filter = self.filter.clone();
        async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(tx) = weak.upgrade() else {
                    return Ok(());
                };
                let reader = tx.clone();
                let filter = filter.clone();
                match (CacheHandle { tx, reader, filter })
                    .purge_expired(now_ms(), batch)
                    .await
                {
                    Ok(_) => {}
                    Err(CacheError::Closed) => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

/// Starts a thread that owns `cache` and runs the jobs sent to it.
fn worker(mut cache: AdvCache, queue: usize, name: &str) -> Result<mpsc::Sender<Job>, CacheError> {
    let (tx, mut rx) = mpsc::channel::<Job>(queue.max(1));
    let path = cache.path().to_path_buf();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            while let Some(job) = rx.blocking_recv() {
                job(&mut cache);
            }
        })
        .map_err(|source| CacheError::Io { path, source })?;
    Ok(tx)
}
