//! The synchronous SQLite store behind [`AdvCache`].
//!
//! Why this exists: it owns the single `rusqlite::Connection`, the schema,
//! the prepared statements and every transaction, so that the rest of the
//! runtime only sees entries, queries and typed errors.
//!
//! Schema (version [`SCHEMA_VERSION`], `PRAGMA application_id` =
//! [`APPLICATION_ID`]):
//!
//! * `adv(rid, id UNIQUE, kind, adv_type, expires_at, expiration, attrs, doc)`
//!   — one row per advertisement; `expires_at` is the absolute end of the
//!   local lifetime (ms since the Unix epoch), `expiration` the relative
//!   TTL promised to others, `attrs` the index fields (so they can be
//!   removed from the index tables without parsing the document), `doc`
//!   last so that reading the other columns never touches its overflow
//!   pages. Index `(kind, expires_at)` serves purge, eviction and
//!   "all adverts of a kind".
//! * `idx_fwd(kind, attr, value, rid)` and `idx_rev(kind, attr, rvalue, rid)`
//!   — `WITHOUT ROWID` tables whose primary key is the index: exact and
//!   prefix queries are a range on `value`; suffix queries a range on the
//!   byte-reversed value. Values are BLOBs compared with `memcmp`, so a
//!   prefix range `[p, p+1)` is exact and matching is byte-wise,
//!   case-sensitive, as in JXSE.
//! * `meta(k, v)` — the entry count, kept by triggers, so `len()` and the
//!   capacity check never count rows.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use rusqlite::types::Value;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::error::{CacheError, Inner, InvalidEntry};
use super::filter::ExactFilter;
use super::pattern::{prefix_upper_bound, Pattern};
use super::{
    AdvKind, BatchOutcome, CacheConfig, CacheEntry, CachedAdv, FullPolicy, OnCorrupt,
    PublishOutcome, QueryOutcome,
};

/// `PRAGMA application_id` of a Juxta advertisement cache ("JXAC").
pub const APPLICATION_ID: i64 = 0x4A58_4143;
/// `PRAGMA user_version` written by this build.
pub const SCHEMA_VERSION: i64 = 1;

/// Most entries freed by one publish when the cache is full or over its
/// maximum (e.g. after the maximum was lowered): bounds the work of one
/// call; the cache converges back under the limit over later calls.
const EVICT_BATCH: u64 = 64;

const SCHEMA: &str = "
CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta (k, v) VALUES ('count', 0);
CREATE TABLE adv (
    rid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    kind INTEGER NOT NULL,
    adv_type TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    expiration INTEGER NOT NULL,
    attrs BLOB NOT NULL,
    doc BLOB NOT NULL
);
CREATE INDEX adv_kind_exp ON adv (kind, expires_at);
CREATE TABLE idx_fwd (
    kind INTEGER NOT NULL, attr TEXT NOT NULL, value BLOB NOT NULL, rid INTEGER NOT NULL,
    PRIMARY KEY (kind, attr, value, rid)
) WITHOUT ROWID;
CREATE TABLE idx_rev (
    kind INTEGER NOT NULL, attr TEXT NOT NULL, rvalue BLOB NOT NULL, rid INTEGER NOT NULL,
    PRIMARY KEY (kind, attr, rvalue, rid)
) WITHOUT ROWID;
CREATE TRIGGER adv_count_ins AFTER INSERT ON adv
    BEGIN UPDATE meta SET v = v + 1 WHERE k = 'count'; END;
CREATE TRIGGER adv_count_del AFTER DELETE ON adv
    BEGIN UPDATE meta SET v = v - 1 WHERE k = 'count'; END;
";

/// Schema objects a valid cache must contain (checked at open through
/// `sqlite_master`, which is a handful of rows whatever the cache size).
const EXPECTED_OBJECTS: [&str; 7] = [
    "meta",
    "adv",
    "adv_kind_exp",
    "idx_fwd",
    "idx_rev",
    "adv_count_ins",
    "adv_count_del",
];

const SQL_COUNT: &str = "SELECT v FROM meta WHERE k = 'count'";
const SQL_FIND_ID: &str = "SELECT rid, kind, expires_at, attrs FROM adv WHERE id = ?1";
const SQL_INSERT_ADV: &str =
    "INSERT INTO adv (id, kind, adv_type, expires_at, expiration, attrs, doc) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
const SQL_UPDATE_ADV: &str = "UPDATE adv SET kind = ?2, adv_type = ?3, expires_at = ?4, \
     expiration = ?5, attrs = ?6, doc = ?7 WHERE rid = ?1";
const SQL_DELETE_ADV: &str = "DELETE FROM adv WHERE rid = ?1";
const SQL_INS_FWD: &str =
    "INSERT OR IGNORE INTO idx_fwd (kind, attr, value, rid) VALUES (?1, ?2, ?3, ?4)";
const SQL_INS_REV: &str =
    "INSERT OR IGNORE INTO idx_rev (kind, attr, rvalue, rid) VALUES (?1, ?2, ?3, ?4)";
const SQL_DEL_FWD: &str =
    "DELETE FROM idx_fwd WHERE kind = ?1 AND attr = ?2 AND value = ?3 AND rid = ?4";
const SQL_DEL_REV: &str =
    "DELETE FROM idx_rev WHERE kind = ?1 AND attr = ?2 AND rvalue = ?3 AND rid = ?4";
const SQL_EXPIRED: &str = "SELECT rid, kind, attrs FROM adv WHERE kind = ?1 AND expires_at <= ?2 \
     ORDER BY expires_at LIMIT ?3";
const SQL_SOONEST: &str = "SELECT rid, kind, attrs, expires_at FROM adv WHERE kind = ?1 \
     ORDER BY expires_at LIMIT 1";

/// Index scans return (rid, stored value); the advertisement row is read
/// only for candidates that match, by rid ([`SQL_BY_RID`]).
macro_rules! idx_sql {
    ($table:literal, $col:literal, $cond:literal) => {
        concat!(
            "SELECT rid, ",
            $col,
            " FROM ",
            $table,
            " WHERE kind = ?1 AND attr = ?2",
            $cond
        )
    };
}
const SQL_Q_ATTR: &str = idx_sql!("idx_fwd", "value", "");
const SQL_Q_EXACT: &str = idx_sql!("idx_fwd", "value", " AND value = ?3");
const SQL_Q_PREFIX: &str = idx_sql!("idx_fwd", "value", " AND value >= ?3 AND value < ?4");
const SQL_Q_PREFIX_OPEN: &str = idx_sql!("idx_fwd", "value", " AND value >= ?3");
const SQL_Q_SUFFIX: &str = idx_sql!("idx_rev", "rvalue", " AND rvalue >= ?3 AND rvalue < ?4");
const SQL_Q_SUFFIX_OPEN: &str = idx_sql!("idx_rev", "rvalue", " AND rvalue >= ?3");
/// Columns of a returned advertisement, in this order: rid, (unused),
/// id, kind, adv_type, expires_at, expiration, doc.
const SQL_BY_RID: &str = "SELECT rid, NULL, id, kind, adv_type, expires_at, expiration, doc \
     FROM adv WHERE rid = ?1";
const SQL_Q_KIND: &str = "SELECT rid, NULL, id, kind, adv_type, expires_at, expiration, doc \
     FROM adv WHERE kind = ?1 AND expires_at > ?2 ORDER BY expires_at DESC";
const SQL_GET: &str = "SELECT rid, NULL, id, kind, adv_type, expires_at, expiration, doc \
     FROM adv WHERE id = ?1";

/// A persistent, bounded, indexed advertisement cache (synchronous).
///
/// Not `Sync` (one SQLite connection); use [`CacheHandle`](super::CacheHandle)
/// from async code. Every method that depends on time takes `now_ms`
/// (milliseconds since the Unix epoch): the cache never reads a clock.
///
/// ```
/// use juxta::cache::{AdvCache, AdvKind, CacheEntry};
/// let mut cache = AdvCache::open_in_memory().unwrap();
/// let now = 1_000_000;
/// cache.publish(CacheEntry {
///     kind: AdvKind::Adv,
///     adv_type: "jxta:PipeAdvertisement".into(),
///     id: "urn:jxta:uuid-1234".into(),
///     index: vec![("Name".into(), "chat".into()), ("Id".into(), "urn:jxta:uuid-1234".into())],
///     document: bytes::Bytes::from_static(b"<jxta:PipeAdvertisement/>"),
///     lifetime_ms: 60_000,
///     expiration_ms: 7_200_000,
/// }, now).unwrap();
/// let hits = cache.query(AdvKind::Adv, Some("Name"), Some("ch*"), 10, now + 1).unwrap();
/// assert_eq!(hits.len(), 1);
/// assert_eq!(hits[0].remaining_expiration_ms, 59_999); // capped by the lifetime
/// assert!(cache.query(AdvKind::Adv, Some("Name"), Some("chat"), 10, now + 60_000).unwrap().is_empty());
/// ```
pub struct AdvCache {
    conn: Connection,
    path: PathBuf,
    config: CacheConfig,
    moved_aside: Option<PathBuf>,
    /// Exact-value triples this cache may hold (shared with its reader;
    /// built by [`CacheHandle`](super::CacheHandle), see `filter.rs`).
    filter: ExactFilter,
}

impl std::fmt::Debug for AdvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdvCache")
            .field("path", &self.path)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AdvCache {
    /// Opens (or creates) the cache file at `path` with the default
    /// configuration; a damaged file is an error and is left untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<AdvCache, CacheError> {
        Self::open_with(path, CacheConfig::default(), OnCorrupt::Fail)
    }

    /// Opens (or creates) the cache file at `path`.
    ///
    /// Start-up work does not depend on the number of entries: a 100-byte
    /// header check, SQLite's schema load, a look at `sqlite_master` and
    /// one read of the entry counter (no row count, no integrity check;
    /// [`AdvCache::verify`] is the full check, for operators).
    ///
    /// With [`OnCorrupt::MoveAside`], a damaged, foreign or other-version
    /// file (and its `-wal`/`-shm`) is renamed to `<file>.corrupt-<n>` and
    /// an empty cache is created; [`AdvCache::moved_aside`] says where.
    pub fn open_with(
        path: impl AsRef<Path>,
        config: CacheConfig,
        on_corrupt: OnCorrupt,
    ) -> Result<AdvCache, CacheError> {
        let path = path.as_ref();
        match Self::try_open(path, config.clone()) {
            Err(e) if e.is_unusable_file() && on_corrupt == OnCorrupt::MoveAside => {
                let aside = move_aside(path)?;
                tracing::warn!(file = %path.display(), moved_to = %aside.display(), error = %e,
                    "advertisement cache unusable; moved aside and starting empty");
                let mut cache = Self::try_open(path, config)?;
                cache.moved_aside = Some(aside);
                Ok(cache)
            }
            other => other,
        }
    }

    /// An empty cache in memory (tests, or peers that must not persist).
    pub fn open_in_memory() -> Result<AdvCache, CacheError> {
        Self::open_in_memory_with(CacheConfig::default())
    }

    /// An empty cache in memory with the given configuration.
    pub fn open_in_memory_with(config: CacheConfig) -> Result<AdvCache, CacheError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| Inner::from(e).at(&path))?;
        Self::init(conn, path, config)
    }

    fn try_open(path: &Path, config: CacheConfig) -> Result<AdvCache, CacheError> {
        check_header(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| open_err(path, e))?;
        Self::init(conn, path.to_path_buf(), config)
    }

    fn init(conn: Connection, path: PathBuf, config: CacheConfig) -> Result<AdvCache, CacheError> {
        let on_disk = path.as_os_str() != ":memory:";
        let r: Result<(), Inner> = (|| {
            conn.busy_timeout(Duration::from_secs(5))?;
            let app_id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
            let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
            let fresh = if app_id == 0 && version == 0 {
                let objects: i64 =
                    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
                if objects != 0 {
                    return Err(CacheError::ForeignDatabase {
                        path: path.clone(),
                        detail: format!(
                            "no Juxta application id, and it already holds {objects} schema objects"
                        ),
                    }
                    .into());
                }
                true
            } else if app_id != APPLICATION_ID {
                return Err(CacheError::ForeignDatabase {
                    path: path.clone(),
                    detail: format!(
                        "application_id is {app_id:#x}, a Juxta cache has {APPLICATION_ID:#x}"
                    ),
                }
                .into());
            } else if version != SCHEMA_VERSION {
                return Err(CacheError::SchemaVersion {
                    path: path.clone(),
                    found: version,
                    expected: SCHEMA_VERSION,
                }
                .into());
            } else {
                false
            };
            if on_disk {
                // WAL: readers never wait for the writer and a commit is one
                // sequential append. NORMAL sync in WAL mode survives process
                // crashes; a power cut may lose the last commits, which for a
                // cache only means re-learning them.
                let _mode: String =
                    conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
                conn.pragma_update(None, "synchronous", "NORMAL")?;
                conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
            }
            conn.pragma_update(None, "cache_size", -(config.page_cache_kib as i64))?;
            conn.pragma_update(None, "temp_store", "MEMORY")?;
            if fresh {
                conn.execute_batch(&format!(
                    "BEGIN IMMEDIATE; {SCHEMA} PRAGMA application_id = {APPLICATION_ID}; \
                     PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                ))?;
            } else {
                let mut st = conn.prepare("SELECT name FROM sqlite_master")?;
                let names: HashSet<String> = st
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect::<Result<_, _>>()?;
                let missing: Vec<&str> = EXPECTED_OBJECTS
                    .iter()
                    .copied()
                    .filter(|n| !names.contains(*n))
                    .collect();
                if !missing.is_empty() {
                    return Err(Inner::Damaged(format!(
                        "schema objects missing: {}",
                        missing.join(", ")
                    )));
                }
            }
            conn.set_prepared_statement_cache_capacity(32);
            // One read of the counter: proves the meta table is readable.
            let _n: i64 = conn
                .prepare_cached(SQL_COUNT)?
                .query_row([], |r| r.get(0))
                .optional()?
                .ok_or_else(|| Inner::Damaged("entry counter missing".into()))?;
            Ok(())
        })();
        r.map_err(|e| e.at(&path))?;
        Ok(AdvCache {
            conn,
            path,
            config,
            moved_aside: None,
            filter: ExactFilter::new(),
        })
    }

    /// A second, read-only connection to the same file, for running
    /// queries while this one writes (WAL readers never wait for the
    /// writer; each read sees the last committed state). `None` for an
    /// in-memory cache. [`CacheHandle`](super::CacheHandle) uses it.
    pub fn open_reader(&self) -> Result<Option<AdvCache>, CacheError> {
        if self.path.as_os_str() == ":memory:" {
            return Ok(None);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(&self.path, flags).map_err(|e| open_err(&self.path, e))?;
        let r: Result<(), Inner> = (|| {
            conn.busy_timeout(Duration::from_secs(5))?;
            conn.pragma_update(None, "query_only", true)?;
            conn.pragma_update(None, "cache_size", -(self.config.page_cache_kib as i64))?;
            conn.set_prepared_statement_cache_capacity(32);
            Ok(())
        })();
        r.map_err(|e| e.at(&self.path))?;
        Ok(Some(AdvCache {
            conn,
            path: self.path.clone(),
            config: self.config.clone(),
            moved_aside: None,
            filter: self.filter.clone(),
        }))
    }

    /// The file this cache lives in (`:memory:` for an in-memory cache).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration in force.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Where an unusable file was moved by [`OnCorrupt::MoveAside`], if it was.
    pub fn moved_aside(&self) -> Option<&Path> {
        self.moved_aside.as_deref()
    }

    /// Number of stored entries, expired-but-not-yet-purged included
    /// (read from a counter, O(1)).
    pub fn len(&self) -> Result<u64, CacheError> {
        self.count().map_err(|e| e.at(&self.path))
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> Result<bool, CacheError> {
        Ok(self.len()? == 0)
    }

    fn count(&self) -> Result<u64, Inner> {
        count_in(&self.conn)
    }

    /// Stores `entry`, replacing any entry with the same `id`.
    ///
    /// The entry lives locally until `now_ms + lifetime_ms`; its
    /// expiration (the TTL given to others) is capped at the lifetime. On
    /// republish the local lifetime never shrinks (as JXSE: the later of
    /// the old and new end is kept, unless the old one had already
    /// passed). When the cache is full, expired entries are dropped first,
    /// then the [`FullPolicy`] applies; evictions are reported in the
    /// outcome, never silent.
    pub fn publish(
        &mut self,
        entry: CacheEntry,
        now_ms: u64,
    ) -> Result<PublishOutcome, CacheError> {
        let r: Result<PublishOutcome, Inner> = (|| {
            validate(&self.config, &entry)?;
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let out = publish_in(&tx, &self.config, &self.filter, &entry, ms(now_ms))?;
            tx.commit()?;
            Ok(out)
        })();
        let r = r.map_err(|e| e.at(&self.path));
        self.rebuild_filter_if_due();
        r
    }

    /// Stores many entries in one transaction (all or nothing: the first
    /// invalid entry or failure rolls the whole batch back).
    pub fn publish_many(
        &mut self,
        entries: impl IntoIterator<Item = CacheEntry>,
        now_ms: u64,
    ) -> Result<BatchOutcome, CacheError> {
        let r: Result<BatchOutcome, Inner> = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut total = BatchOutcome::default();
            for entry in entries {
                validate(&self.config, &entry)?;
                let out = publish_in(&tx, &self.config, &self.filter, &entry, ms(now_ms))?;
                if out.replaced {
                    total.replaced += 1;
                } else {
                    total.inserted += 1;
                }
                total.evicted += out.evicted;
                total.purged_expired += out.purged_expired;
            }
            tx.commit()?;
            Ok(total)
        })();
        let r = r.map_err(|e| e.at(&self.path));
        self.rebuild_filter_if_due();
        r
    }

    /// Builds the exact-value filter from the index (one scan of it),
    /// replacing the one in use. Run by the writer, which makes every
    /// insert: none can be missed.
    pub(crate) fn rebuild_filter(&mut self) -> Result<(), CacheError> {
        // Streamed: a full cache's index is millions of rows.
        let (conn, filter) = (&self.conn, &self.filter);
        let r: Result<(), Inner> = (|| {
            let n: i64 = conn.query_row("SELECT count(*) FROM idx_fwd", [], |r| r.get(0))?;
            filter.rebuild_with(usize::try_from(n).unwrap_or(0), |add| {
                let mut st = conn.prepare("SELECT kind, attr, value FROM idx_fwd")?;
                let mut rows = st.query([])?;
                while let Some(r) = rows.next()? {
                    let kind: i64 = r.get(0)?;
                    let attr = r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
                    let value = r.get_ref(2)?.as_blob().map_err(rusqlite::Error::from)?;
                    add(kind, attr, value);
                }
                Ok(())
            })
        })();
        r.map_err(|e| e.at(&self.path))
    }

    /// Rebuilds the filter once it has taken as many inserts as it was
    /// sized for (a failed rebuild keeps the old one, still a superset).
    fn rebuild_filter_if_due(&mut self) {
        if self.filter.rebuild_due() {
            if let Err(e) = self.rebuild_filter() {
                tracing::warn!(error = %e, "cache filter not rebuilt");
            }
        }
    }

    /// The filter shared with the reader and the handle.
    pub(crate) fn filter(&self) -> &ExactFilter {
        &self.filter
    }

    /// Discovery query: up to `threshold` live advertisements of `kind`
    /// whose attribute `attr` matches `value` (`*` wildcards, byte-wise,
    /// case-sensitive; see [`Pattern`]).
    ///
    /// `attr = None` returns advertisements of the kind regardless of
    /// their fields (longest-lived first); `value = None`, `""` or `"*"`
    /// returns those that have the attribute. Expired entries are never
    /// returned, whether or not they were purged yet.
    pub fn query(
        &mut self,
        kind: AdvKind,
        attr: Option<&str>,
        value: Option<&str>,
        threshold: usize,
        now_ms: u64,
    ) -> Result<Vec<CachedAdv>, CacheError> {
        Ok(self
            .query_outcome(kind, attr, value, threshold, now_ms)?
            .advs)
    }

    /// Like [`AdvCache::query`], also saying whether the scan stopped at
    /// [`CacheConfig::max_scan_rows`] before reaching the threshold (only
    /// possible for `*x*`-style patterns or many expired entries).
    pub fn query_outcome(
        &mut self,
        kind: AdvKind,
        attr: Option<&str>,
        value: Option<&str>,
        threshold: usize,
        now_ms: u64,
    ) -> Result<QueryOutcome, CacheError> {
        self.query_in(kind, attr, value, threshold, ms(now_ms))
            .map_err(|e| e.at(&self.path))
    }

    fn query_in(
        &self,
        kind: AdvKind,
        attr: Option<&str>,
        value: Option<&str>,
        threshold: usize,
        now: i64,
    ) -> Result<QueryOutcome, Inner> {
        let limit = threshold.min(self.config.max_query_results);
        let mut out = QueryOutcome::default();
        if limit == 0 || !self.filter.may_match(kind, attr, value) {
            return Ok(out);
        }
        let k = kind as i64;
        let Some(attr) = attr else {
            let plan = Plan {
                sql: SQL_Q_KIND,
                params: vec![Value::Integer(k), Value::Integer(now)],
                reversed: false,
            };
            self.run(plan, &Pattern::Any, limit, now, &mut out)?;
            return Ok(out);
        };
        let pattern = Pattern::parse(value.unwrap_or(""));
        let base = |mut extra: Vec<Value>| {
            let mut p = vec![Value::Integer(k), Value::Text(attr.to_owned())];
            p.append(&mut extra);
            p
        };
        let range = |lo: Vec<u8>, closed: &'static str, open: &'static str| {
            let up = prefix_upper_bound(&lo);
            match up {
                Some(up) => (closed, vec![Value::Blob(lo), Value::Blob(up)]),
                None => (open, vec![Value::Blob(lo)]),
            }
        };
        let plan = match &pattern {
            Pattern::Any => Plan {
                sql: SQL_Q_ATTR,
                params: base(vec![]),
                reversed: false,
            },
            Pattern::Exact(v) => Plan {
                sql: SQL_Q_EXACT,
                params: base(vec![Value::Blob(v.clone())]),
                reversed: false,
            },
            Pattern::Glob { prefix, suffix, .. } => {
                if !prefix.is_empty() && prefix.len() >= suffix.len() {
                    let (sql, extra) = range(prefix.clone(), SQL_Q_PREFIX, SQL_Q_PREFIX_OPEN);
                    Plan {
                        sql,
                        params: base(extra),
                        reversed: false,
                    }
                } else if !suffix.is_empty() {
                    let rev: Vec<u8> = suffix.iter().rev().copied().collect();
                    let (sql, extra) = range(rev, SQL_Q_SUFFIX, SQL_Q_SUFFIX_OPEN);
                    Plan {
                        sql,
                        params: base(extra),
                        reversed: true,
                    }
                } else {
                    // `*x*`: no literal end to range on; a bounded scan of
                    // the attribute's entries.
                    Plan {
                        sql: SQL_Q_ATTR,
                        params: base(vec![]),
                        reversed: false,
                    }
                }
            }
        };
        self.run(plan, &pattern, limit, now, &mut out)?;
        Ok(out)
    }

    fn run(
        &self,
        plan: Plan,
        pattern: &Pattern,
        limit: usize,
        now: i64,
        out: &mut QueryOutcome,
    ) -> Result<(), Inner> {
        let mut st = self.conn.prepare_cached(plan.sql)?;
        let mut rows = st.query(rusqlite::params_from_iter(plan.params))?;
        // Kind-only scans already return whole rows; index scans return
        // (rid, value) and the row is fetched by rid for matches only.
        let whole_rows = plan.sql == SQL_Q_KIND;
        let mut by_rid = self.conn.prepare_cached(SQL_BY_RID)?;
        let mut seen: HashSet<i64> = HashSet::new();
        let mut scanned = 0usize;
        while let Some(row) = rows.next()? {
            if out.advs.len() >= limit {
                break;
            }
            if scanned >= self.config.max_scan_rows {
                out.scan_limit_reached = true;
                break;
            }
            scanned += 1;
            let rid: i64 = row.get(0)?;
            if whole_rows {
                out.advs.push(cached_from_row(row, now)?);
                continue;
            }
            if !matches!(pattern, Pattern::Any) {
                let v = row
                    .get_ref(1)?
                    .as_blob()
                    .map_err(|e| Inner::Damaged(format!("index value: {e}")))?;
                let ok = if plan.reversed {
                    let fwd: Vec<u8> = v.iter().rev().copied().collect();
                    pattern.matches(&fwd)
                } else {
                    pattern.matches(v)
                };
                if !ok {
                    continue;
                }
            }
            if seen.contains(&rid) {
                continue;
            }
            let mut adv = by_rid.query([rid])?;
            let Some(arow) = adv.next()? else {
                return Err(Inner::Damaged(format!(
                    "index refers to missing entry {rid}"
                )));
            };
            let expires_at: i64 = arow.get(5)?;
            if expires_at <= now {
                continue;
            }
            seen.insert(rid);
            out.advs.push(cached_from_row(arow, now)?);
        }
        Ok(())
    }

    /// The live entry with this `id`, if any.
    pub fn get(&mut self, id: &str, now_ms: u64) -> Result<Option<CachedAdv>, CacheError> {
        let now = ms(now_ms);
        let r: Result<Option<CachedAdv>, Inner> = (|| {
            let mut st = self.conn.prepare_cached(SQL_GET)?;
            let mut rows = st.query([id])?;
            match rows.next()? {
                Some(row) => {
                    let expires_at: i64 = row.get(5)?;
                    if expires_at <= now {
                        Ok(None)
                    } else {
                        Ok(Some(cached_from_row(row, now)?))
                    }
                }
                None => Ok(None),
            }
        })();
        r.map_err(|e| e.at(&self.path))
    }

    /// Removes the entry with this `id`; returns whether there was one.
    pub fn remove(&mut self, id: &str) -> Result<bool, CacheError> {
        let r: Result<bool, Inner> = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let found: Option<(i64, i64, i64, Vec<u8>)> = tx
                .prepare_cached(SQL_FIND_ID)?
                .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()?;
            let Some((rid, kind, _, attrs)) = found else {
                return Ok(false);
            };
            delete_entry(&tx, rid, kind, &attrs)?;
            tx.commit()?;
            Ok(true)
        })();
        r.map_err(|e| e.at(&self.path))
    }

    /// Deletes up to `max_rows` entries whose lifetime ended at or before
    /// `now_ms`, soonest first, in one short transaction; returns how many.
    ///
    /// Incremental by design: it walks the `(kind, expires_at)` index, so
    /// its cost is proportional to `max_rows`, not to the cache size, and
    /// queries run between batches. The runtime calls it periodically
    /// (e.g. every second with a few hundred rows). Queries never need it
    /// for correctness: they skip expired entries themselves.
    pub fn purge_expired(&mut self, now_ms: u64, max_rows: usize) -> Result<usize, CacheError> {
        let r: Result<usize, Inner> = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = purge_in(&tx, ms(now_ms), max_rows as u64)?;
            tx.commit()?;
            Ok(n as usize)
        })();
        r.map_err(|e| e.at(&self.path))
    }

    /// Full consistency check of the file (`PRAGMA quick_check`): reads
    /// every page, so it takes time proportional to the cache size. Never
    /// run at open; for operators and tests.
    pub fn verify(&mut self) -> Result<(), CacheError> {
        let r: Result<(), Inner> = (|| {
            let mut st = self.conn.prepare("PRAGMA quick_check(8)")?;
            let lines: Vec<String> = st
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<_, _>>()?;
            if lines.len() == 1 && lines[0] == "ok" {
                Ok(())
            } else {
                Err(Inner::Damaged(format!(
                    "integrity check failed: {}",
                    lines.join("; ")
                )))
            }
        })();
        r.map_err(|e| e.at(&self.path))
    }
}

/// A query: SQL, its parameters, and whether column 1 holds the reversed
/// value.
struct Plan {
    sql: &'static str,
    params: Vec<Value>,
    reversed: bool,
}

/// Milliseconds as SQLite's signed integer (saturating: `u64::MAX` means
/// "forever").
fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn count_in(conn: &Connection) -> Result<u64, Inner> {
    let n: i64 = conn
        .prepare_cached(SQL_COUNT)?
        .query_row([], |r| r.get(0))?;
    u64::try_from(n).map_err(|_| Inner::Damaged(format!("negative entry counter {n}")))
}

fn cached_from_row(row: &rusqlite::Row<'_>, now: i64) -> Result<CachedAdv, Inner> {
    let id: String = row.get(2)?;
    let kind_code: i64 = row.get(3)?;
    let adv_type: String = row.get(4)?;
    let expires_at: i64 = row.get(5)?;
    let expiration: i64 = row.get(6)?;
    let doc: Vec<u8> = row.get(7)?;
    let kind = AdvKind::from_code(kind_code)
        .ok_or_else(|| Inner::Damaged(format!("entry {id:?} has unknown kind {kind_code}")))?;
    let remaining_lifetime = expires_at.saturating_sub(now).max(0) as u64;
    let remaining_expiration = remaining_lifetime.min(expiration.max(0) as u64);
    Ok(CachedAdv {
        id,
        kind,
        adv_type,
        document: Bytes::from(doc),
        remaining_lifetime_ms: remaining_lifetime,
        remaining_expiration_ms: remaining_expiration,
    })
}

fn validate(cfg: &CacheConfig, e: &CacheEntry) -> Result<(), CacheError> {
    if e.id.is_empty() {
        return Err(InvalidEntry::EmptyId.into());
    }
    if e.id.len() > cfg.max_id_bytes {
        return Err(InvalidEntry::IdTooLong {
            len: e.id.len(),
            max: cfg.max_id_bytes,
        }
        .into());
    }
    if e.document.len() > cfg.max_document_bytes {
        return Err(CacheError::DocumentTooLarge {
            size: e.document.len(),
            max: cfg.max_document_bytes,
        });
    }
    if e.index.len() > cfg.max_index_fields {
        return Err(InvalidEntry::TooManyIndexFields {
            count: e.index.len(),
            max: cfg.max_index_fields,
        }
        .into());
    }
    for (a, v) in &e.index {
        if a.is_empty() {
            return Err(InvalidEntry::EmptyAttribute.into());
        }
        let len = a.len().max(v.len());
        if len > cfg.max_field_bytes {
            let mut shown = a.clone();
            if shown.len() > 64 {
                let mut cut = 64;
                while !shown.is_char_boundary(cut) {
                    cut -= 1;
                }
                shown.truncate(cut);
            }
            return Err(InvalidEntry::FieldTooLong {
                attr: shown,
                len,
                max: cfg.max_field_bytes,
            }
            .into());
        }
    }
    if e.lifetime_ms == 0 {
        return Err(InvalidEntry::ZeroLifetime.into());
    }
    Ok(())
}

fn publish_in(
    tx: &Connection,
    cfg: &CacheConfig,
    filter: &ExactFilter,
    e: &CacheEntry,
    now: i64,
) -> Result<PublishOutcome, Inner> {
    let new_end = now.saturating_add(ms(e.lifetime_ms));
    let expiration = ms(e.expiration_ms.min(e.lifetime_ms));
    let attrs = encode_attrs(&e.index);
    let kind = e.kind as i64;
    let existing: Option<(i64, i64, i64, Vec<u8>)> = tx
        .prepare_cached(SQL_FIND_ID)?
        .query_row([&e.id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    if let Some((rid, old_kind, old_end, old_attrs)) = existing {
        delete_index(tx, rid, old_kind, &old_attrs)?;
        let end = if old_end > now {
            old_end.max(new_end)
        } else {
            new_end
        };
        tx.prepare_cached(SQL_UPDATE_ADV)?.execute(params![
            rid,
            kind,
            e.adv_type,
            end,
            expiration,
            attrs,
            &e.document[..]
        ])?;
        insert_index(tx, filter, rid, kind, &e.index)?;
        return Ok(PublishOutcome {
            replaced: true,
            evicted: 0,
            purged_expired: 0,
            expires_at_ms: end as u64,
        });
    }
    let mut evicted = 0u64;
    let mut purged = 0u64;
    let count = count_in(tx)?;
    if count >= cfg.max_entries {
        let need = (count + 1 - cfg.max_entries).min(EVICT_BATCH);
        purged = purge_in(tx, now, need)?;
        let mut freed = purged;
        while freed < need && cfg.full_policy == FullPolicy::EvictSoonestExpiring {
            match soonest(tx)? {
                Some((rid, vkind, vattrs, vend)) if vend < new_end => {
                    delete_entry(tx, rid, vkind, &vattrs)?;
                    evicted += 1;
                    freed += 1;
                }
                _ => break,
            }
        }
        if freed == 0 {
            return Err(CacheError::Full {
                max_entries: cfg.max_entries,
            }
            .into());
        }
    }
    tx.prepare_cached(SQL_INSERT_ADV)?.execute(params![
        e.id,
        kind,
        e.adv_type,
        new_end,
        expiration,
        attrs,
        &e.document[..]
    ])?;
    let rid = tx.last_insert_rowid();
    insert_index(tx, filter, rid, kind, &e.index)?;
    Ok(PublishOutcome {
        replaced: false,
        evicted,
        purged_expired: purged,
        expires_at_ms: new_end as u64,
    })
}

/// An eviction candidate: rid, kind, attrs, expires_at.
type Victim = (i64, i64, Vec<u8>, i64);

/// The entry that expires soonest, across kinds (three index probes).
fn soonest(tx: &Connection) -> Result<Option<Victim>, Inner> {
    let mut best: Option<Victim> = None;
    let mut st = tx.prepare_cached(SQL_SOONEST)?;
    for kind in AdvKind::ALL {
        let row: Option<Victim> = st
            .query_row([kind as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        if let Some(r) = row {
            let better = match &best {
                Some(b) => r.3 < b.3,
                None => true,
            };
            if better {
                best = Some(r);
            }
        }
    }
    Ok(best)
}

fn purge_in(tx: &Connection, now: i64, max_rows: u64) -> Result<u64, Inner> {
    let mut victims: Vec<(i64, i64, Vec<u8>)> = Vec::new();
    {
        let mut st = tx.prepare_cached(SQL_EXPIRED)?;
        for kind in AdvKind::ALL {
            let left = max_rows.saturating_sub(victims.len() as u64);
            if left == 0 {
                break;
            }
            let rows = st.query_map(params![kind as i64, now, ms(left)], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
            for r in rows {
                victims.push(r?);
            }
        }
    }
    for (rid, kind, attrs) in &victims {
        delete_entry(tx, *rid, *kind, attrs)?;
    }
    Ok(victims.len() as u64)
}

fn delete_entry(tx: &Connection, rid: i64, kind: i64, attrs: &[u8]) -> Result<(), Inner> {
    delete_index(tx, rid, kind, attrs)?;
    tx.prepare_cached(SQL_DELETE_ADV)?.execute([rid])?;
    Ok(())
}

fn insert_index(
    tx: &Connection,
    filter: &ExactFilter,
    rid: i64,
    kind: i64,
    index: &[(String, String)],
) -> Result<(), Inner> {
    let mut fwd = tx.prepare_cached(SQL_INS_FWD)?;
    let mut rev = tx.prepare_cached(SQL_INS_REV)?;
    for (a, v) in index {
        // Before the row can be seen (the transaction has not committed).
        filter.add(kind, a, v.as_bytes());
        let r: Vec<u8> = v.bytes().rev().collect();
        fwd.execute(params![kind, a, v.as_bytes(), rid])?;
        rev.execute(params![kind, a, r, rid])?;
    }
    Ok(())
}

fn delete_index(tx: &Connection, rid: i64, kind: i64, attrs: &[u8]) -> Result<(), Inner> {
    let pairs = decode_attrs(attrs)?;
    let mut fwd = tx.prepare_cached(SQL_DEL_FWD)?;
    let mut rev = tx.prepare_cached(SQL_DEL_REV)?;
    for (a, v) in pairs {
        let r: Vec<u8> = v.iter().rev().copied().collect();
        fwd.execute(params![kind, a, v, rid])?;
        rev.execute(params![kind, a, r, rid])?;
    }
    Ok(())
}

/// `u32 count`, then per field `u32 len, attr, u32 len, value` (little endian).
fn encode_attrs(index: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        4 + index
            .iter()
            .map(|(a, v)| 8 + a.len() + v.len())
            .sum::<usize>(),
    );
    out.extend_from_slice(&(index.len() as u32).to_le_bytes());
    for (a, v) in index {
        out.extend_from_slice(&(a.len() as u32).to_le_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

fn decode_attrs(mut b: &[u8]) -> Result<Vec<(String, Vec<u8>)>, Inner> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], Inner> {
        if b.len() < n {
            return Err(Inner::Damaged("index field list is truncated".into()));
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Ok(h)
    }
    fn len(b: &mut &[u8]) -> Result<usize, Inner> {
        let h = take(b, 4)?;
        Ok(u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize)
    }
    let n = len(&mut b)?;
    let mut out = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let al = len(&mut b)?;
        let a = String::from_utf8(take(&mut b, al)?.to_vec())
            .map_err(|_| Inner::Damaged("index attribute is not UTF-8".into()))?;
        let vl = len(&mut b)?;
        out.push((a, take(&mut b, vl)?.to_vec()));
    }
    Ok(out)
}

fn open_err(path: &Path, e: rusqlite::Error) -> CacheError {
    let kind = match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::PermissionDenied) => std::io::ErrorKind::PermissionDenied,
        Some(rusqlite::ErrorCode::CannotOpen) => std::io::ErrorKind::Other,
        _ => return Inner::from(e).at(path),
    };
    CacheError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(kind, e.to_string()),
    }
}

/// Cheap structural check of an existing file before SQLite touches it:
/// the 16-byte magic, a sane page size, and a length that covers the page
/// count in the header (catches truncation). 100 bytes read, whatever the
/// size of the cache.
fn check_header(path: &Path) -> Result<(), CacheError> {
    let io = |source| CacheError::Io {
        path: path.to_path_buf(),
        source,
    };
    let corrupt = |detail: String| CacheError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    let meta = f.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "is a directory",
        )));
    }
    let len = meta.len();
    if len == 0 {
        // A new file (or one whose content is still only in the WAL).
        return Ok(());
    }
    if len < 100 {
        return Err(corrupt(format!(
            "{len} bytes, shorter than the 100-byte SQLite header (truncated?)"
        )));
    }
    let mut h = [0u8; 100];
    f.read_exact(&mut h).map_err(io)?;
    if &h[..16] != b"SQLite format 3\0" {
        return Err(corrupt("not an SQLite database (bad magic bytes)".into()));
    }
    let raw = u16::from_be_bytes([h[16], h[17]]) as u64;
    let page_size = if raw == 1 { 65536 } else { raw };
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(corrupt(format!("invalid page size {raw} in the header")));
    }
    let pages = u32::from_be_bytes([h[28], h[29], h[30], h[31]]) as u64;
    let size_valid = h[24..28] == h[92..96] && pages > 0;
    // Pages still in the WAL are not in the main file yet: only check the
    // length when there is no WAL to recover from.
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_len = std::fs::metadata(PathBuf::from(wal))
        .map(|m| m.len())
        .unwrap_or(0);
    if size_valid && wal_len == 0 && len < pages * page_size {
        return Err(corrupt(format!(
            "truncated: the header says {pages} pages of {page_size} bytes ({} bytes) but the file has {len}",
            pages * page_size
        )));
    }
    Ok(())
}

/// Renames `path` (and its `-wal`/`-shm`) to `<path>.corrupt-<n>` with the
/// first free `n`.
fn move_aside(path: &Path) -> Result<PathBuf, CacheError> {
    let io = |source| CacheError::Io {
        path: path.to_path_buf(),
        source,
    };
    let with = |base: &Path, suffix: &str| {
        let mut s = base.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    };
    for n in 1..=1000u32 {
        let target = with(path, &format!(".corrupt-{n}"));
        if target.exists() {
            continue;
        }
        std::fs::rename(path, &target).map_err(io)?;
        for side in ["-wal", "-shm"] {
            let from = with(path, side);
            if from.exists() {
                std::fs::rename(&from, with(&target, side)).map_err(io)?;
            }
        }
        return Ok(target);
    }
    Err(io(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        "1000 .corrupt-<n> files already exist next to the cache; clean them up",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_roundtrip() {
        let idx = vec![
            ("Name".to_string(), "x".to_string()),
            ("Id".into(), "".into()),
        ];
        let d = decode_attrs(&encode_attrs(&idx)).unwrap();
        assert_eq!(
            d,
            vec![("Name".into(), b"x".to_vec()), ("Id".into(), vec![])]
        );
        assert!(matches!(
            decode_attrs(&[5, 0, 0, 0, 1]),
            Err(Inner::Damaged(_))
        ));
    }

    #[test]
    fn plans_use_the_indexes() {
        let c = AdvCache::open_in_memory().unwrap();
        for sql in [
            SQL_Q_EXACT,
            SQL_Q_PREFIX,
            SQL_Q_SUFFIX,
            SQL_Q_KIND,
            SQL_BY_RID,
        ] {
            let mut st = c
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap();
            let n = st.parameter_count();
            let plan: Vec<String> = st
                .query_map(rusqlite::params_from_iter(vec![0i64; n]), |r| {
                    r.get::<_, String>(3)
                })
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
            let text = plan.join(" | ");
            assert!(!text.contains("SCAN"), "{sql}: {text}");
            assert!(!text.contains("TEMP B-TREE"), "{sql}: {text}");
        }
    }
}
