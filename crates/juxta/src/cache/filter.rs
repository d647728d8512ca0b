//! A Bloom filter of the cache's indexed `(kind, attribute, value)`
//! triples, in front of exact-value queries.
//!
//! Why this exists: a rendezvous is asked for advertisements it almost
//! never holds (in the SRDI model the publishers hold them; the rendezvous
//! forwards the query). Each such query used to be an SQLite read on the
//! cache's reader thread: a hand-over to that thread and back, and file
//! locks, for an empty answer, one query at a time. The filter answers
//! "certainly not here" for an exact value without leaving the caller.
//!
//! It is a superset, never a subset, of what the index holds, so a query
//! it turns away could not have matched:
//! - every triple is added by the writer (`insert_index`) inside the
//!   transaction that indexes it, before that commits, so a query that
//!   starts after a publish returned sees its bits;
//! - deletions and expiry do not clear bits (a cleared bit could belong
//!   to another triple); the filter is rebuilt from the index on the
//!   writer thread (which also does every insert, so nothing is missed in
//!   between) once it has taken as many inserts again as it was sized for;
//! - until the first build (queued on the writer when the cache is handed
//!   to its threads, so opening stays independent of the cache's size) it
//!   answers "maybe" for everything.
//!
//! Matching is byte-wise and case-sensitive, like the index; wildcard
//! patterns and queries without an attribute are never filtered.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::AdvKind;

/// Smallest and largest filter, bits.
const MIN_BITS: usize = 1 << 16;
const MAX_BITS: usize = 1 << 23;
/// Bits per triple when sized: at most 1/16 of the bits are used at a
/// build and 1/8 when the next one is due (two probes: about 5 % false
/// positives then).
const BITS_PER_TRIPLE: usize = 16;

struct Bloom {
    bits: Box<[AtomicU64]>,
    mask: u64,
    /// Triples added since the build.
    added: AtomicU64,
    /// Triples it takes before a rebuild is due.
    capacity: u64,
}

impl Bloom {
    fn new(triples: usize) -> Bloom {
        let bits = triples
            .saturating_mul(BITS_PER_TRIPLE)
            .next_power_of_two()
            .clamp(MIN_BITS, MAX_BITS);
        Bloom {
            bits: (0..bits / 64).map(|_| AtomicU64::new(0)).collect(),
            mask: bits as u64 - 1,
            added: AtomicU64::new(0),
            capacity: (bits / BITS_PER_TRIPLE) as u64,
        }
    }

    /// The two bit positions of a hash.
    fn probes(&self, h: u64) -> [u64; 2] {
        [h & self.mask, h.rotate_left(39) & self.mask]
    }

    fn add(&self, h: u64) {
        for p in self.probes(h) {
            self.bits[(p / 64) as usize].fetch_or(1 << (p % 64), Ordering::Release);
        }
    }

    fn may_hold(&self, h: u64) -> bool {
        self.probes(h)
            .iter()
            .all(|&p| self.bits[(p / 64) as usize].load(Ordering::Acquire) & (1 << (p % 64)) != 0)
    }
}

/// The filter shared by a cache's writer, its reader and its handle.
#[derive(Clone)]
pub(crate) struct ExactFilter(Arc<Shared>);

struct Shared {
    hasher: RandomState,
    /// `None` until the first build.
    bloom: RwLock<Option<Arc<Bloom>>>,
}

impl std::fmt::Debug for ExactFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactFilter")
            .field("built", &self.current().is_some())
            .finish()
    }
}

impl ExactFilter {
    /// An unbuilt filter: everything may match.
    pub(crate) fn new() -> ExactFilter {
        ExactFilter(Arc::new(Shared {
            hasher: RandomState::new(),
            bloom: RwLock::new(None),
        }))
    }

    fn current(&self) -> Option<Arc<Bloom>> {
        self.0
            .bloom
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn hash(&self, kind: i64, attr: &str, value: &[u8]) -> u64 {
        let mut h = self.0.hasher.build_hasher();
        h.write_i64(kind);
        h.write_usize(attr.len());
        h.write(attr.as_bytes());
        h.write(value);
        h.finish()
    }

    /// The writer indexes `(kind, attr, value)`. `true` when a rebuild is
    /// due.
    pub(crate) fn add(&self, kind: i64, attr: &str, value: &[u8]) -> bool {
        let Some(b) = self.current() else {
            return false;
        };
        b.add(self.hash(kind, attr, value));
        b.added.fetch_add(1, Ordering::Relaxed) + 1 >= b.capacity
    }

    /// Whether the filter has taken as many inserts as it was sized for.
    pub(crate) fn rebuild_due(&self) -> bool {
        self.current()
            .is_some_and(|b| b.added.load(Ordering::Relaxed) >= b.capacity)
    }

    /// Replaces the filter by one sized for `triples` and filled by
    /// `fill`, which hands every triple of the index to the function it is
    /// given (the writer reads them from the index, and makes every insert,
    /// so none is missed; nothing is collected in memory). On an error the
    /// filter in use stays.
    pub(crate) fn rebuild_with<E>(
        &self,
        triples: usize,
        fill: impl FnOnce(&mut dyn FnMut(i64, &str, &[u8])) -> Result<(), E>,
    ) -> Result<(), E> {
        let b = Bloom::new(triples);
        fill(&mut |k, a, v| b.add(self.hash(k, a, v)))?;
        *self.0.bloom.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(b));
        Ok(())
    }

    /// [`ExactFilter::rebuild_with`] from a list.
    #[cfg(test)]
    pub(crate) fn rebuild<'a>(
        &self,
        triples: impl ExactSizeIterator<Item = (i64, &'a str, &'a [u8])>,
    ) {
        let n = triples.len();
        let _ = self.rebuild_with::<()>(n, |add| {
            for (k, a, v) in triples {
                add(k, a, v);
            }
            Ok(())
        });
    }

    /// `false` only if an exact query for `value` of `attr` in `kind`
    /// certainly matches nothing; `true` for wildcards, queries without an
    /// attribute, and before the first build.
    pub(crate) fn may_match(&self, kind: AdvKind, attr: Option<&str>, value: Option<&str>) -> bool {
        let (Some(attr), Some(value)) = (attr, value) else {
            return true;
        };
        if value.is_empty() || value.contains('*') {
            return true;
        }
        match self.current() {
            None => true,
            Some(b) => b.may_hold(self.hash(kind as i64, attr, value.as_bytes())),
        }
    }

    /// Whether it has been built.
    #[cfg(test)]
    pub(crate) fn is_built(&self) -> bool {
        self.current().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbuilt_says_maybe_built_is_a_superset_and_wildcards_pass() {
        let f = ExactFilter::new();
        assert!(f.may_match(AdvKind::Adv, Some("Name"), Some("x")));
        assert!(!f.add(2, "Name", b"x"), "no rebuild is due before a build");
        let rows: Vec<(i64, String, Vec<u8>)> = (0..1000)
            .map(|i| (2, "Name".to_string(), format!("n{i}").into_bytes()))
            .collect();
        f.rebuild(rows.iter().map(|(k, a, v)| (*k, a.as_str(), v.as_slice())));
        assert!(f.is_built());
        for i in 0..1000 {
            assert!(f.may_match(AdvKind::Adv, Some("Name"), Some(&format!("n{i}"))));
        }
        // Case, attribute and kind are part of the key.
        let misses = (0..1000)
            .filter(|i| !f.may_match(AdvKind::Adv, Some("Name"), Some(&format!("N{i}"))))
            .count();
        assert!(misses > 900, "{misses} of 1000 absent values turned away");
        assert!(f.may_match(AdvKind::Adv, Some("Name"), Some("n*")));
        assert!(f.may_match(AdvKind::Adv, Some("Name"), Some("")));
        assert!(f.may_match(AdvKind::Adv, None, None));
        // Added after the build: seen.
        f.add(0, "PID", b"later");
        assert!(f.may_match(AdvKind::Peer, Some("PID"), Some("later")));
    }

    #[test]
    fn a_rebuild_becomes_due_after_as_many_inserts_as_it_was_sized_for() {
        let f = ExactFilter::new();
        f.rebuild(std::iter::empty::<(i64, &str, &[u8])>());
        let cap = (MIN_BITS / BITS_PER_TRIPLE) as u64;
        let due = (0..cap)
            .filter(|i| f.add(2, "Name", format!("v{i}").as_bytes()))
            .count();
        assert_eq!(due, 1, "due exactly once, at the capacity");
    }
}
