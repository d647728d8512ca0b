//! Cache size vs start-up time (the thesis' Fig. 6.1; `juxta bench ops
//! --cache-sizes`).
//!
//! For each size N a peer home is prepared: the peer is started once (its
//! identity is created), stopped, and its advertisement cache
//! (`cm.sqlite`) is filled with N pipe advertisements as discovery stores
//! them (indexed fields, lifetimes of a day). Then the peer is started
//! `runs` times on that home: `start_ms` is [`juxta::Peer::start`] to
//! ready (the cache opened, the identity loaded, the listener bound), and
//! `first_query_ms` the first local discovery query by name after the
//! start (one hit expected; a miss is an error). The thesis varied the
//! cache from 10 to 1,000 advertisements; the default here goes to
//! 10,000, `--full` to 1,000,000 (the cache's bound is 1,048,576).

use std::path::Path;
use std::time::{Duration, Instant};

use juxta::cache::{AdvCache, CacheConfig, CacheEntry, OnCorrupt};
use juxta::proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
use juxta::{Peer, PeerConfig};
use serde::Serialize;

use crate::util::{percentile, random_pipe_id};
use crate::BenchError;

/// Largest cache a run may build (the cache's default bound).
pub const MAX_CACHE_SIZE: u64 = 1 << 20;

/// Options of [`run`].
#[derive(Debug, Clone, Serialize)]
pub struct CacheScaleOptions {
    /// Cache sizes (advertisements).
    pub sizes: Vec<u64>,
    /// Timed starts per size.
    pub runs: usize,
    /// RSA key size of the peer.
    pub key_bits: usize,
}

impl Default for CacheScaleOptions {
    fn default() -> CacheScaleOptions {
        CacheScaleOptions {
            sizes: vec![10, 100, 1_000, 10_000],
            runs: 5,
            key_bits: 1024,
        }
    }
}

impl CacheScaleOptions {
    /// The thesis' range and beyond (`--full`): 10 to 1,000,000.
    pub fn full() -> CacheScaleOptions {
        CacheScaleOptions {
            sizes: vec![10, 100, 1_000, 10_000, 100_000, 1_000_000],
            ..CacheScaleOptions::default()
        }
    }

    /// Refuses sizes the cache cannot hold, naming the option.
    pub fn validate(&self) -> Result<(), BenchError> {
        if let Some(n) = self.sizes.iter().find(|&&n| n == 0 || n > MAX_CACHE_SIZE) {
            return Err(BenchError::BadOption(format!(
                "--cache-sizes {n}: 1 to {MAX_CACHE_SIZE} advertisements (the cache's bound)"
            )));
        }
        Ok(())
    }
}

/// One row: a cache size.
#[derive(Debug, Clone, Serialize)]
pub struct CacheScaleRow {
    /// Always `ops-cache`.
    pub scenario: &'static str,
    /// Advertisements in the cache.
    pub cache_entries: u64,
    /// Median time of `Peer::start` on the filled home, ms.
    pub start_ms_median: f64,
    /// Largest of the timed starts, ms.
    pub start_ms_max: f64,
    /// Median time of the first local query by name after a start, ms.
    pub first_query_ms_median: f64,
    /// Seconds it took to fill the cache (not part of the start-up).
    pub build_s: f64,
    /// The cache file's size, MB.
    pub file_mb: f64,
    /// Timed starts.
    pub runs: usize,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        what: what.to_string(),
        source,
    }
}

fn fail(reason: String) -> BenchError {
    BenchError::Responder {
        layer: "ops-cache".into(),
        reason,
    }
}

/// The cache entry discovery would store for `adv`.
fn entry(adv: &Advertisement) -> CacheEntry {
    let day = 24 * 3_600_000;
    CacheEntry {
        kind: match adv.kind() {
            AdvKind::Peer => juxta::cache::AdvKind::Peer,
            AdvKind::Group => juxta::cache::AdvKind::Group,
            AdvKind::Adv => juxta::cache::AdvKind::Adv,
        },
        adv_type: adv.adv_type().to_string(),
        id: adv.id(),
        index: adv
            .index_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        document: bytes::Bytes::from(adv.to_xml()),
        lifetime_ms: day,
        expiration_ms: day,
    }
}

fn name(i: u64) -> String {
    format!("cache-scale-pipe-{i}")
}

/// Fills the cache at `path` with `n` pipe advertisements.
fn fill(path: &Path, n: u64) -> Result<(), BenchError> {
    let now = juxta::cache::unix_now_ms();
    let mut c = AdvCache::open_with(path, CacheConfig::default(), OnCorrupt::Fail)
        .map_err(|e| fail(format!("opening {}: {e}", path.display())))?;
    let mut i = 0;
    while i < n {
        let end = (i + 10_000).min(n);
        let batch: Vec<CacheEntry> = (i..end)
            .map(|k| {
                let mut a = PipeAdvertisement::new(random_pipe_id(), PipeType::Unicast);
                a.name = Some(name(k));
                entry(&Advertisement::Pipe(a))
            })
            .collect();
        c.publish_many(batch, now)
            .map_err(|e| fail(format!("filling the cache: {e}")))?;
        i = end;
    }
    Ok(())
}

/// Runs every size; `progress` gets one line per size.
pub async fn run(
    opts: &CacheScaleOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<CacheScaleRow>, BenchError> {
    opts.validate()?;
    let homes = tempfile::tempdir().map_err(io("creating peer homes"))?;
    let mut rows = Vec::new();
    for &n in &opts.sizes {
        let home = homes.path().join(format!("cache-{n}"));
        let cfg = || {
            PeerConfig::new(&home)
                .key_bits(opts.key_bits)
                .listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        };
        // The identity, created once (not timed).
        let p = Peer::start(cfg()).await?;
        let cache_path = home.join("cm.sqlite");
        drop(p);
        tokio::time::sleep(Duration::from_millis(50)).await;
        progress(&format!("ops cache: filling a cache of {n} advertisements"));
        let t = Instant::now();
        let path = cache_path.clone();
        tokio::task::spawn_blocking(move || fill(&path, n))
            .await
            .map_err(|e| fail(format!("filling the cache: {e}")))??;
        let build_s = t.elapsed().as_secs_f64();
        let file_mb = std::fs::metadata(&cache_path)
            .map(|m| m.len() as f64 / 1e6)
            .unwrap_or(0.0);
        let mut starts = Vec::new();
        let mut queries = Vec::new();
        for k in 0..opts.runs.max(1) as u64 {
            let t = Instant::now();
            let p = Peer::start(cfg()).await?;
            starts.push(t.elapsed().as_secs_f64() * 1e3);
            let want = name(k.wrapping_mul(2_654_435_761).wrapping_add(7) % n);
            let t = Instant::now();
            let found = p
                .discovery()
                .get_local(AdvKind::Adv, Some("Name"), Some(&want), 1)
                .await
                .map_err(|e| fail(format!("local query: {e}")))?;
            queries.push(t.elapsed().as_secs_f64() * 1e3);
            if found.len() != 1 {
                return Err(fail(format!(
                    "a cache of {n}: {want} not found after the start ({} hits)",
                    found.len()
                )));
            }
            drop(p);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        starts.sort_by(f64::total_cmp);
        queries.sort_by(f64::total_cmp);
        let row = CacheScaleRow {
            scenario: "ops-cache",
            cache_entries: n,
            start_ms_median: percentile(&starts, 0.5),
            start_ms_max: starts.last().copied().unwrap_or(0.0),
            first_query_ms_median: percentile(&queries, 0.5),
            build_s,
            file_mb,
            runs: starts.len(),
        };
        progress(&format!(
            "ops cache: {n} advertisements: start {:.1} ms median, first query {:.3} ms (filled in {build_s:.1} s, {file_mb:.1} MB)",
            row.start_ms_median, row.first_query_ms_median
        ));
        rows.push(row);
    }
    Ok(rows)
}
