//! The persistent advertisement cache (JXSE's `Cm`).
//!
//! Why this exists: discovery answers queries from what a peer has
//! learned (remote advertisements) and what it publishes itself. This
//! module stores those advertisements in one SQLite file, indexed by kind
//! (the discovery types PEER = 0, GROUP = 1, ADV = 2) and by the
//! attributes discovery queries use (`Name`, `PID`, `GID`, `Id`, `MSID`,
//! ...; see [`jxse_index_fields`]), with `*` wildcards, expiry, a bound
//! on size, and start-up time that does not depend on how much is stored.
//!
//! The cache never parses XML: callers hand it a [`CacheEntry`] with the
//! fields they extracted and the document bytes as received.
//!
//! # Why SQLite (rusqlite, bundled) rather than redb
//!
//! * **Secondary indexes and ranges for free.** A query is "kind, attribute,
//!   value pattern": composite B-tree keys, range scans for `abc*`, and a
//!   second key on the reversed value for `*abc`, all kept consistent by
//!   one transaction. With redb each index is a hand-maintained table.
//! * **Start-up independent of size, even after a crash.** Opening SQLite
//!   reads the header and the schema; crash recovery replays only the WAL,
//!   whose size is bounded (`journal_size_limit`, auto-checkpoints).
//!   redb repairs the whole file after an unclean shutdown, which takes
//!   time proportional to its size.
//! * **Damage is detected and reported** (`SQLITE_CORRUPT`,
//!   `SQLITE_NOTADB`) and can be inspected or salvaged by operators with
//!   the standard `sqlite3` tool (`.recover`).
//! * **No system dependency** (the `bundled` feature compiles SQLite in),
//!   and it matches JXSE's own SQL caches (`impl/cm/sql`, Derby/H2) in
//!   layout, which eases comparison.
//!
//! The cost: C code under the hood and connections that are not `Sync`;
//! [`CacheHandle`] gives them to worker threads (one writer, and one
//! read-only reader for a file-backed cache, so purges and bulk loads do
//! not pause queries).
//!
//! # Semantics (from JXSE 2.7 `XIndiceAdvertisementCache`)
//!
//! * **lifetime** is how long the entry stays here; **expiration** is the
//!   TTL promised to others, capped at the lifetime. A result carries the
//!   remaining values ([`CachedAdv::remaining_expiration_ms`] is what a
//!   discovery response sends as `Expiration`).
//! * Republishing the same id replaces document and index fields; the
//!   local lifetime never shrinks.
//! * Matching is byte-wise and case-sensitive, as JXSE's default cache.
//! * Expired entries are never returned. [`AdvCache::purge_expired`]
//!   deletes them in bounded batches through an index on the expiry time,
//!   never in one stop-the-world sweep.
//!
//! Details, numbers and the rebuild procedure: `docs/cache.md`.

mod error;
mod filter;
mod handle;
mod pattern;
mod store;

use bytes::Bytes;

pub use error::{CacheError, InvalidEntry, REBUILD_ADVICE};
pub use handle::CacheHandle;
pub use pattern::Pattern;
pub use store::{AdvCache, APPLICATION_ID, SCHEMA_VERSION};

/// Discovery type of an advertisement (`DiscoveryQuery` `Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AdvKind {
    /// Peer advertisements (`jxta:PA`), type 0.
    Peer = 0,
    /// Peer group advertisements (`jxta:PGA`), type 1.
    Group = 1,
    /// Every other advertisement, type 2.
    Adv = 2,
}

impl AdvKind {
    /// The three kinds, in code order.
    pub const ALL: [AdvKind; 3] = [AdvKind::Peer, AdvKind::Group, AdvKind::Adv];

    /// The kind with this discovery type code (0, 1, 2).
    pub fn from_code(code: i64) -> Option<AdvKind> {
        match code {
            0 => Some(AdvKind::Peer),
            1 => Some(AdvKind::Group),
            2 => Some(AdvKind::Adv),
            _ => None,
        }
    }

    /// The discovery type code.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// What the caller extracted from an advertisement, ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// Discovery kind.
    pub kind: AdvKind,
    /// Advertisement type, e.g. `jxta:PipeAdvertisement`.
    pub adv_type: String,
    /// Unique key, e.g. the advertisement ID or a hash of the document.
    pub id: String,
    /// Indexed fields, attribute → value, e.g. `("Name", "chat")`.
    pub index: Vec<(String, String)>,
    /// The document as received.
    pub document: Bytes,
    /// How long to keep it locally, ms (must be > 0).
    pub lifetime_ms: u64,
    /// TTL to give others, ms (capped at `lifetime_ms`; 0 = do not share).
    pub expiration_ms: u64,
}

/// An advertisement returned by the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedAdv {
    /// Unique key.
    pub id: String,
    /// Discovery kind.
    pub kind: AdvKind,
    /// Advertisement type.
    pub adv_type: String,
    /// The document as stored.
    pub document: Bytes,
    /// Time left in the local cache, ms (> 0).
    pub remaining_lifetime_ms: u64,
    /// `min(remaining lifetime, expiration)`: the `Expiration` to send
    /// with it in a discovery response (0: publisher asked not to share).
    pub remaining_expiration_ms: u64,
}

/// Result of one [`AdvCache::publish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishOutcome {
    /// An entry with the same id was replaced.
    pub replaced: bool,
    /// Live entries evicted to make room (see [`FullPolicy`]).
    pub evicted: u64,
    /// Expired entries deleted to make room.
    pub purged_expired: u64,
    /// When the entry's local lifetime ends (ms since the epoch).
    pub expires_at_ms: u64,
}

/// Totals of one [`AdvCache::publish_many`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// New entries.
    pub inserted: u64,
    /// Entries that replaced one with the same id.
    pub replaced: u64,
    /// Live entries evicted to make room.
    pub evicted: u64,
    /// Expired entries deleted to make room.
    pub purged_expired: u64,
}

/// Result of [`AdvCache::query_outcome`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryOutcome {
    /// Matching live advertisements, at most the threshold.
    pub advs: Vec<CachedAdv>,
    /// The scan stopped at [`CacheConfig::max_scan_rows`]: more entries
    /// might match.
    pub scan_limit_reached: bool,
}

/// What a publish does when the cache holds [`CacheConfig::max_entries`]
/// (after expired entries, which always go first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullPolicy {
    /// Evict the live entry that expires soonest, if it expires before the
    /// new one; otherwise refuse with [`CacheError::Full`]. Long-lived
    /// entries (the peer's own, 1 year by default) survive; short-lived
    /// remote ones (2 h) make room. Evictions are counted in the outcome.
    EvictSoonestExpiring,
    /// Refuse with [`CacheError::Full`].
    Refuse,
}

/// What [`AdvCache::open_with`] does with a damaged, foreign or
/// other-version file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnCorrupt {
    /// Return the error; the file is left exactly as it was.
    #[default]
    Fail,
    /// Rename it (and its `-wal`/`-shm`) to `<file>.corrupt-<n>`, log a
    /// warning and start with an empty cache; nothing is deleted.
    MoveAside,
}

/// Limits and tuning of a cache. Every field is a bound; none is infinite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Maximum number of entries (default 2²⁰ = 1,048,576).
    pub max_entries: u64,
    /// Maximum document size in bytes (default 64 KiB, as elsewhere).
    pub max_document_bytes: usize,
    /// Maximum id length in bytes (default 1 KiB).
    pub max_id_bytes: usize,
    /// Maximum index fields per entry (default 32).
    pub max_index_fields: usize,
    /// Maximum length of an attribute name or value in bytes (default 4 KiB).
    pub max_field_bytes: usize,
    /// Cap on results per query, whatever the threshold (default 10,000).
    pub max_query_results: usize,
    /// Most index rows one query examines (default 100,000); bounds
    /// `*abc*` scans and runs of expired entries.
    pub max_scan_rows: usize,
    /// Behaviour when full.
    pub full_policy: FullPolicy,
    /// SQLite page cache in KiB (default 16 MiB).
    pub page_cache_kib: u32,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: 1 << 20,
            max_document_bytes: 64 * 1024,
            max_id_bytes: 1024,
            max_index_fields: 32,
            max_field_bytes: 4096,
            max_query_results: 10_000,
            max_scan_rows: 100_000,
            full_policy: FullPolicy::EvictSoonestExpiring,
            page_cache_kib: 16 * 1024,
        }
    }
}

/// Fields JXSE 2.7 indexes per advertisement type (`getIndexFields()`),
/// for callers building [`CacheEntry::index`]. Unknown types: `&[]`
/// (JXSE indexes nothing it does not know; the entry is still returned by
/// kind-only queries).
///
/// ```
/// assert_eq!(juxta::cache::jxse_index_fields("jxta:PA"), &["Name", "PID"]);
/// ```
pub fn jxse_index_fields(adv_type: &str) -> &'static [&'static str] {
    match adv_type {
        "jxta:PA" => &["Name", "PID"],
        "jxta:PGA" => &["Name", "GID", "Desc", "MSID"],
        "jxta:PipeAdvertisement" => &["Name", "Id"],
        "jxta:MCA" => &["Name", "MCID"],
        "jxta:MSA" => &["Name", "MSID"],
        "jxta:MIA" => &["MSID"],
        "jxta:RA" => &["DstPID"],
        "jxta:APA" => &["PID"],
        "jxta:RdvAdvertisement" => &["RdvPeerId", "RdvServiceName", "RdvGroupId"],
        _ => &[],
    }
}

/// Milliseconds since the Unix epoch from the system clock, for callers
/// of the cache (the cache itself never reads a clock).
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis().min(u64::MAX as u128) as u64)
        .unwrap_or(0)
}
