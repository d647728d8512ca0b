//! Typed errors of the advertisement cache.
//!
//! Why this exists: a damaged cache file must produce a message that names
//! the file and says how to rebuild it, and bad entries must be refused
//! with a reason the caller can match on, never a panic or a silent drop.

use std::path::PathBuf;

/// What to do about an unusable cache file, appended to every error that
/// concerns the file itself.
pub const REBUILD_ADVICE: &str = "Nothing was changed in the file. To rebuild: stop the peer, \
move the file aside together with any `-wal` and `-shm` files next to it, and start again. \
An empty cache is created; remote advertisements are re-learned from the network, the peer \
advertisement is rebuilt from the identity in the home directory at start-up, and the \
application must publish its own advertisements again (the cache is not their system of \
record). AdvCache::open_with(.., OnCorrupt::MoveAside) does the move for you.";

/// Why an entry was refused by [`AdvCache::publish`](super::AdvCache::publish).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEntry {
    /// The entry's unique key is empty.
    #[error("empty id")]
    EmptyId,
    /// The entry's unique key is longer than the configured limit.
    #[error("id of {len} bytes exceeds the limit of {max}")]
    IdTooLong {
        /// Length in bytes.
        len: usize,
        /// Configured limit.
        max: usize,
    },
    /// More index fields than the configured limit.
    #[error("{count} index fields exceed the limit of {max}")]
    TooManyIndexFields {
        /// Number of fields given.
        count: usize,
        /// Configured limit.
        max: usize,
    },
    /// An attribute name is empty.
    #[error("empty index attribute name")]
    EmptyAttribute,
    /// An attribute name or value is longer than the configured limit.
    #[error("index field {attr:?} of {len} bytes exceeds the limit of {max}")]
    FieldTooLong {
        /// The attribute (truncated to 64 bytes for the message).
        attr: String,
        /// Length in bytes of the offending name or value.
        len: usize,
        /// Configured limit.
        max: usize,
    },
    /// A lifetime of zero: JXSE refuses it too (`lifetime <= 0`).
    #[error("lifetime of 0 ms")]
    ZeroLifetime,
}

/// Errors of the advertisement cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The file or its directory cannot be read or written.
    #[error("cannot use advertisement cache {path}: {source}. {REBUILD_ADVICE}")]
    Io {
        /// The cache file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not an SQLite database, is truncated, or SQLite found
    /// damage while reading it.
    #[error("advertisement cache {path} is damaged: {detail}. {REBUILD_ADVICE}")]
    Corrupt {
        /// The cache file (`:memory:` for an in-memory cache).
        path: PathBuf,
        /// What was found.
        detail: String,
    },
    /// A valid SQLite database that is not a Juxta advertisement cache.
    #[error("{path} is an SQLite database but not a Juxta advertisement cache: {detail}. {REBUILD_ADVICE}")]
    ForeignDatabase {
        /// The file.
        path: PathBuf,
        /// What did not match.
        detail: String,
    },
    /// A Juxta cache written with another schema version.
    #[error("advertisement cache {path} has schema version {found}; this build reads version {expected}. {REBUILD_ADVICE}")]
    SchemaVersion {
        /// The file.
        path: PathBuf,
        /// Version found in the file (`PRAGMA user_version`).
        found: i64,
        /// Version this build writes.
        expected: i64,
    },
    /// The document is larger than the configured maximum.
    #[error("advertisement document of {size} bytes exceeds the limit of {max} bytes")]
    DocumentTooLarge {
        /// Document size in bytes.
        size: usize,
        /// Configured limit.
        max: usize,
    },
    /// The entry is malformed.
    #[error("invalid cache entry: {0}")]
    InvalidEntry(#[from] InvalidEntry),
    /// The cache holds `max_entries` and no entry could be evicted under
    /// the configured [`FullPolicy`](super::FullPolicy).
    #[error("advertisement cache full ({max_entries} entries) and nothing expires sooner than the new entry")]
    Full {
        /// Configured maximum.
        max_entries: u64,
    },
    /// Any other SQLite failure (disk full, I/O error, locked, ...).
    #[error("advertisement cache {path}: SQLite error: {source}")]
    Sqlite {
        /// The cache file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The async handle's worker thread has stopped.
    #[error("advertisement cache worker has stopped")]
    Closed,
}

impl CacheError {
    /// Whether the error concerns a damaged or foreign file (as opposed to
    /// a refused entry or a transient failure).
    pub fn is_unusable_file(&self) -> bool {
        matches!(
            self,
            CacheError::Corrupt { .. }
                | CacheError::ForeignDatabase { .. }
                | CacheError::SchemaVersion { .. }
        )
    }
}

/// Internal error before the file path is attached.
#[derive(Debug)]
pub(crate) enum Inner {
    Sql(rusqlite::Error),
    Cache(CacheError),
    /// Bytes inside the database that do not decode (damage).
    Damaged(String),
}

impl From<rusqlite::Error> for Inner {
    fn from(e: rusqlite::Error) -> Self {
        Inner::Sql(e)
    }
}

impl From<CacheError> for Inner {
    fn from(e: CacheError) -> Self {
        Inner::Cache(e)
    }
}

impl From<InvalidEntry> for Inner {
    fn from(e: InvalidEntry) -> Self {
        Inner::Cache(CacheError::InvalidEntry(e))
    }
}

impl Inner {
    /// Attaches the file path; SQLite's corruption codes become
    /// [`CacheError::Corrupt`].
    pub(crate) fn at(self, path: &std::path::Path) -> CacheError {
        match self {
            Inner::Cache(e) => e,
            Inner::Damaged(detail) => CacheError::Corrupt {
                path: path.to_path_buf(),
                detail,
            },
            Inner::Sql(e) => {
                let corrupt = matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
                );
                if corrupt {
                    CacheError::Corrupt {
                        path: path.to_path_buf(),
                        detail: e.to_string(),
                    }
                } else {
                    CacheError::Sqlite {
                        path: path.to_path_buf(),
                        source: e,
                    }
                }
            }
        }
    }
}
