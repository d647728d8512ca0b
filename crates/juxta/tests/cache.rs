//! Behaviour of the persistent advertisement cache (`juxta::cache`):
//! queries and wildcards, expiry, incremental purge, restarts, bounds,
//! damaged files, and the async handle.

use std::path::Path;

use bytes::Bytes;
use juxta::cache::{
    AdvCache, AdvKind, CacheConfig, CacheEntry, CacheError, CacheHandle, FullPolicy, InvalidEntry,
    OnCorrupt, Pattern,
};
use proptest::prelude::*;

const T0: u64 = 1_700_000_000_000;

fn entry(kind: AdvKind, id: &str, name: &str, lifetime_ms: u64) -> CacheEntry {
    CacheEntry {
        kind,
        adv_type: "jxta:PipeAdvertisement".into(),
        id: id.into(),
        index: vec![("Name".into(), name.into()), ("Id".into(), id.into())],
        document: Bytes::from(format!(
            "<jxta:PipeAdvertisement><Id>{id}</Id><Name>{name}</Name></jxta:PipeAdvertisement>"
        )),
        lifetime_ms,
        expiration_ms: 7_200_000,
    }
}

fn names(v: &[juxta::cache::CachedAdv]) -> Vec<String> {
    let mut n: Vec<String> = v.iter().map(|a| a.id.clone()).collect();
    n.sort();
    n
}

fn filled() -> AdvCache {
    let mut c = AdvCache::open_in_memory().unwrap();
    for (id, name) in [
        ("a1", "JuxtaChat"),
        ("a2", "JuxtaFiles"),
        ("a3", "chat-room"),
        ("a4", "OtherChat"),
        ("a5", "Juxta"),
    ] {
        c.publish(entry(AdvKind::Adv, id, name, 60_000), T0)
            .unwrap();
    }
    c.publish(entry(AdvKind::Peer, "p1", "JuxtaChat", 60_000), T0)
        .unwrap();
    c
}

fn q(c: &mut AdvCache, attr: Option<&str>, value: Option<&str>) -> Vec<String> {
    names(&c.query(AdvKind::Adv, attr, value, 100, T0 + 1).unwrap())
}

#[test]
fn exact_and_wildcard_queries() {
    let mut c = filled();
    assert_eq!(q(&mut c, Some("Name"), Some("JuxtaChat")), ["a1"]);
    assert_eq!(q(&mut c, Some("Name"), Some("Juxta*")), ["a1", "a2", "a5"]);
    assert_eq!(q(&mut c, Some("Name"), Some("*Chat")), ["a1", "a4"]);
    assert_eq!(q(&mut c, Some("Name"), Some("*hat*")), ["a1", "a3", "a4"]);
    assert_eq!(q(&mut c, Some("Name"), Some("J*a*s")), ["a2"]);
    assert_eq!(
        q(&mut c, Some("Name"), Some("*")),
        ["a1", "a2", "a3", "a4", "a5"]
    );
    assert_eq!(
        q(&mut c, Some("Name"), None),
        ["a1", "a2", "a3", "a4", "a5"]
    );
    assert_eq!(q(&mut c, None, None), ["a1", "a2", "a3", "a4", "a5"]);
    assert_eq!(q(&mut c, Some("Id"), Some("a3")), ["a3"]);
    assert!(q(&mut c, Some("Name"), Some("Nothing*")).is_empty());
    assert!(q(&mut c, Some("Desc"), Some("*")).is_empty());
    // Kinds are separate: the peer entry with the same name is not an ADV.
    let peers = c
        .query(AdvKind::Peer, Some("Name"), Some("JuxtaChat"), 10, T0 + 1)
        .unwrap();
    assert_eq!(names(&peers), ["p1"]);
    assert_eq!(peers[0].kind, AdvKind::Peer);
    assert!(peers[0].document.starts_with(b"<jxta:PipeAdvertisement>"));
}

#[test]
fn matching_is_case_sensitive_like_jxse() {
    let mut c = filled();
    assert!(q(&mut c, Some("Name"), Some("juxtachat")).is_empty());
    assert!(q(&mut c, Some("Name"), Some("juxta*")).is_empty());
    assert_eq!(q(&mut c, Some("Name"), Some("*chat*")), ["a3"]);
    assert!(q(&mut c, Some("name"), Some("*")).is_empty());
}

#[test]
fn threshold_limits_results() {
    let mut c = filled();
    let r = c
        .query(AdvKind::Adv, Some("Name"), Some("*"), 2, T0 + 1)
        .unwrap();
    assert_eq!(r.len(), 2);
    assert!(c
        .query(AdvKind::Adv, Some("Name"), Some("*"), 0, T0 + 1)
        .unwrap()
        .is_empty());
    let r = c.query(AdvKind::Adv, None, None, 3, T0 + 1).unwrap();
    assert_eq!(r.len(), 3);
}

#[test]
fn an_entry_with_several_matching_values_is_returned_once() {
    let mut c = AdvCache::open_in_memory().unwrap();
    let mut e = entry(AdvKind::Adv, "x", "alpha", 60_000);
    e.index.push(("Name".into(), "alphabet".into()));
    c.publish(e, T0).unwrap();
    let r = c
        .query(AdvKind::Adv, Some("Name"), Some("alpha*"), 10, T0)
        .unwrap();
    assert_eq!(names(&r), ["x"]);
}

#[test]
fn expired_entries_are_never_returned() {
    let mut c = AdvCache::open_in_memory().unwrap();
    c.publish(entry(AdvKind::Adv, "short", "n", 1_000), T0)
        .unwrap();
    c.publish(entry(AdvKind::Adv, "long", "n", 10_000), T0)
        .unwrap();
    let at = |c: &mut AdvCache, now| {
        names(
            &c.query(AdvKind::Adv, Some("Name"), Some("n"), 10, now)
                .unwrap(),
        )
    };
    assert_eq!(at(&mut c, T0 + 999), ["long", "short"]);
    assert_eq!(at(&mut c, T0 + 1_000), ["long"]);
    assert!(at(&mut c, T0 + 10_000).is_empty());
    assert!(c.get("short", T0 + 1_000).unwrap().is_none());
    assert!(c.get("short", T0 + 999).unwrap().is_some());
    assert!(c
        .query(AdvKind::Adv, None, None, 10, T0 + 10_000)
        .unwrap()
        .is_empty());
    for pat in ["*", "n*", "*n", "*n*"] {
        assert!(
            c.query(AdvKind::Adv, Some("Name"), Some(pat), 10, T0 + 10_000)
                .unwrap()
                .is_empty(),
            "{pat}"
        );
    }
    // Not purged yet: still counted until purge_expired runs.
    assert_eq!(c.len().unwrap(), 2);
}

#[test]
fn remaining_lifetime_and_expiration_are_reported() {
    let mut c = AdvCache::open_in_memory().unwrap();
    let mut e = entry(AdvKind::Adv, "x", "n", 10_000_000);
    e.expiration_ms = 7_200_000;
    c.publish(e, T0).unwrap();
    let a = c.get("x", T0 + 1_000).unwrap().unwrap();
    assert_eq!(a.remaining_lifetime_ms, 9_999_000);
    assert_eq!(a.remaining_expiration_ms, 7_200_000);
    let a = c.get("x", T0 + 9_000_000).unwrap().unwrap();
    assert_eq!(a.remaining_lifetime_ms, 1_000_000);
    assert_eq!(a.remaining_expiration_ms, 1_000_000);
    // Expiration is capped at the lifetime.
    let mut e = entry(AdvKind::Adv, "y", "n", 500);
    e.expiration_ms = 7_200_000;
    c.publish(e, T0).unwrap();
    assert_eq!(
        c.get("y", T0).unwrap().unwrap().remaining_expiration_ms,
        500
    );
}

#[test]
fn purge_is_incremental() {
    let mut c = AdvCache::open_in_memory().unwrap();
    let batch: Vec<CacheEntry> = (0..250)
        .map(|i| {
            entry(
                AdvKind::ALL[i % 3],
                &format!("old{i}"),
                "old",
                1_000 + i as u64,
            )
        })
        .chain((0..50).map(|i| entry(AdvKind::Adv, &format!("new{i}"), "new", 1_000_000)))
        .collect();
    let out = c.publish_many(batch, T0).unwrap();
    assert_eq!(out.inserted, 300);
    assert_eq!(c.len().unwrap(), 300);
    let now = T0 + 10_000;
    assert_eq!(c.purge_expired(now, 100).unwrap(), 100);
    assert_eq!(c.len().unwrap(), 200);
    assert_eq!(c.purge_expired(now, 100).unwrap(), 100);
    assert_eq!(c.purge_expired(now, 100).unwrap(), 50);
    assert_eq!(c.purge_expired(now, 100).unwrap(), 0);
    assert_eq!(c.len().unwrap(), 50);
    let live = c
        .query(AdvKind::Adv, Some("Name"), Some("new"), 100, now)
        .unwrap();
    assert_eq!(live.len(), 50);
    // Index rows went with the entries: re-adding an old id works cleanly.
    c.publish(entry(AdvKind::Adv, "old0", "again", 1_000), now)
        .unwrap();
    assert_eq!(
        names(
            &c.query(AdvKind::Adv, Some("Name"), Some("again"), 10, now)
                .unwrap()
        ),
        ["old0"]
    );
    assert!(c
        .query(AdvKind::Adv, Some("Name"), Some("old"), 10, now - 9_500)
        .unwrap()
        .is_empty());
}

#[test]
fn republish_replaces_and_never_shortens_lifetime() {
    let mut c = AdvCache::open_in_memory().unwrap();
    let first = c
        .publish(entry(AdvKind::Adv, "x", "before", 100_000), T0)
        .unwrap();
    assert!(!first.replaced);
    let second = c
        .publish(entry(AdvKind::Adv, "x", "after", 10), T0 + 1)
        .unwrap();
    assert!(second.replaced);
    assert_eq!(second.expires_at_ms, T0 + 100_000);
    assert_eq!(c.len().unwrap(), 1);
    assert!(c
        .query(AdvKind::Adv, Some("Name"), Some("before"), 10, T0 + 2)
        .unwrap()
        .is_empty());
    let r = c
        .query(AdvKind::Adv, Some("Name"), Some("after"), 10, T0 + 50_000)
        .unwrap();
    assert_eq!(names(&r), ["x"]);
    assert!(r[0].document.windows(5).any(|w| w == b"after"));
    // Changing kind moves it.
    c.publish(entry(AdvKind::Group, "x", "after", 10), T0 + 3)
        .unwrap();
    assert!(c
        .query(AdvKind::Adv, Some("Name"), Some("after"), 10, T0 + 4)
        .unwrap()
        .is_empty());
    assert_eq!(
        c.query(AdvKind::Group, Some("Name"), Some("after"), 10, T0 + 4)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn remove_deletes_entry_and_index() {
    let mut c = filled();
    assert!(c.remove("a1").unwrap());
    assert!(!c.remove("a1").unwrap());
    assert_eq!(q(&mut c, Some("Name"), Some("Juxta*")), ["a2", "a5"]);
    assert_eq!(c.len().unwrap(), 5);
}

#[test]
fn entries_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.sqlite");
    {
        let mut c = AdvCache::open(&path).unwrap();
        for i in 0..100 {
            c.publish(
                entry(AdvKind::Adv, &format!("id{i}"), &format!("name{i}"), 60_000),
                T0,
            )
            .unwrap();
        }
        c.remove("id5").unwrap();
    }
    let mut c = AdvCache::open(&path).unwrap();
    assert_eq!(c.len().unwrap(), 99);
    assert_eq!(
        names(
            &c.query(AdvKind::Adv, Some("Name"), Some("name42"), 10, T0 + 1)
                .unwrap()
        ),
        ["id42"]
    );
    assert!(c.get("id5", T0).unwrap().is_none());
    // Expiry is absolute: after the lifetime, a reopened cache returns nothing.
    assert!(c
        .query(AdvKind::Adv, None, None, 10, T0 + 60_000)
        .unwrap()
        .is_empty());
    assert!(c.moved_aside().is_none());
    c.verify().unwrap();
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn assert_mentions_rebuild(e: &CacheError, path: &Path) {
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("move the file aside"), "{msg}");
    assert!(e.is_unusable_file(), "{e:?}");
}

#[test]
fn random_bytes_give_a_typed_error_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.sqlite");
    let junk: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &junk).unwrap();
    let before = snapshot(dir.path());
    let e = AdvCache::open(&path).unwrap_err();
    assert!(matches!(e, CacheError::Corrupt { .. }), "{e:?}");
    assert_mentions_rebuild(&e, &path);
    assert_eq!(snapshot(dir.path()), before);
    // A tiny file too.
    std::fs::write(&path, b"hello").unwrap();
    assert!(matches!(
        AdvCache::open(&path).unwrap_err(),
        CacheError::Corrupt { .. }
    ));
}

fn populated(path: &Path, n: usize) {
    let mut c = AdvCache::open(path).unwrap();
    let batch: Vec<CacheEntry> = (0..n)
        .map(|i| {
            entry(
                AdvKind::Adv,
                &format!("urn:jxta:uuid-{i:032X}"),
                &format!("pipe-{i}"),
                3_600_000,
            )
        })
        .collect();
    c.publish_many(batch, T0).unwrap();
}

#[test]
fn truncated_database_gives_a_typed_error_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.sqlite");
    populated(&path, 2_000);
    let full = std::fs::read(&path).unwrap();
    assert!(full.len() > 64 * 1024, "{}", full.len());
    std::fs::write(&path, &full[..full.len() / 2]).unwrap();
    let before = snapshot(dir.path());
    let e = AdvCache::open(&path).unwrap_err();
    assert!(matches!(e, CacheError::Corrupt { .. }), "{e:?}");
    assert!(e.to_string().contains("truncated"), "{e}");
    assert_mentions_rebuild(&e, &path);
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn damaged_pages_are_reported_not_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.sqlite");
    populated(&path, 2_000);
    let mut bytes = std::fs::read(&path).unwrap();
    // Keep the header page, scribble over everything after it.
    let page = 4096;
    for (i, b) in bytes[page..].iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[1];
    }
    std::fs::write(&path, &bytes).unwrap();
    let outcome = (|| -> Result<(), CacheError> {
        let mut c = AdvCache::open(&path)?;
        c.query(AdvKind::Adv, Some("Name"), Some("pipe-1*"), 50, T0)?;
        c.query(AdvKind::Adv, None, None, 5_000, T0)?;
        c.verify()
    })();
    let e = outcome.expect_err("damage must be reported");
    assert!(
        matches!(
            e,
            CacheError::Corrupt { .. } | CacheError::ForeignDatabase { .. }
        ),
        "{e:?}"
    );
    assert_mentions_rebuild(&e, &path);
}

#[test]
fn foreign_and_other_version_databases_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("foreign.db");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    let e = AdvCache::open(&foreign).unwrap_err();
    assert!(matches!(e, CacheError::ForeignDatabase { .. }), "{e:?}");
    assert_mentions_rebuild(&e, &foreign);

    let newer = dir.path().join("newer.db");
    populated(&newer, 10);
    {
        let c = rusqlite::Connection::open(&newer).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
    }
    let e = AdvCache::open(&newer).unwrap_err();
    assert!(
        matches!(
            e,
            CacheError::SchemaVersion {
                found: 99,
                expected: 1,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn move_aside_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.sqlite");
    std::fs::write(&path, vec![0xAB; 8192]).unwrap();
    assert!(AdvCache::open(&path).is_err());
    let mut c = AdvCache::open_with(&path, CacheConfig::default(), OnCorrupt::MoveAside).unwrap();
    let aside = c.moved_aside().unwrap().to_path_buf();
    assert_eq!(aside, dir.path().join("cm.sqlite.corrupt-1"));
    assert_eq!(std::fs::read(&aside).unwrap(), vec![0xAB; 8192]);
    assert_eq!(c.len().unwrap(), 0);
    c.publish(entry(AdvKind::Adv, "x", "n", 1_000), T0).unwrap();
    drop(c);
    // A valid cache is never moved.
    let c = AdvCache::open_with(&path, CacheConfig::default(), OnCorrupt::MoveAside).unwrap();
    assert!(c.moved_aside().is_none());
    assert_eq!(c.len().unwrap(), 1);
}

#[test]
fn a_directory_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = AdvCache::open(dir.path()).unwrap_err();
    assert!(matches!(e, CacheError::Io { .. }), "{e:?}");
}

#[test]
fn bad_entries_are_refused() {
    let mut c = AdvCache::open_in_memory().unwrap();
    let mut big = entry(AdvKind::Adv, "big", "n", 1_000);
    big.document = Bytes::from(vec![b'x'; 64 * 1024 + 1]);
    assert!(matches!(
        c.publish(big, T0),
        Err(CacheError::DocumentTooLarge {
            size: 65537,
            max: 65536
        })
    ));
    let mut ok = entry(AdvKind::Adv, "ok", "n", 1_000);
    ok.document = Bytes::from(vec![b'x'; 64 * 1024]);
    c.publish(ok, T0).unwrap();

    let bad = |f: &dyn Fn(&mut CacheEntry)| {
        let mut e = entry(AdvKind::Adv, "e", "n", 1_000);
        f(&mut e);
        e
    };
    let cases: Vec<(CacheEntry, InvalidEntry)> = vec![
        (bad(&|e| e.id.clear()), InvalidEntry::EmptyId),
        (bad(&|e| e.lifetime_ms = 0), InvalidEntry::ZeroLifetime),
        (
            bad(&|e| e.index.push((String::new(), "v".into()))),
            InvalidEntry::EmptyAttribute,
        ),
    ];
    for (e, want) in cases {
        match c.publish(e, T0) {
            Err(CacheError::InvalidEntry(got)) => assert_eq!(got, want),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        c.publish(
            bad(&|e| e.index.push(("Desc".into(), "d".repeat(5000)))),
            T0
        ),
        Err(CacheError::InvalidEntry(InvalidEntry::FieldTooLong {
            len: 5000,
            ..
        }))
    ));
    assert!(matches!(
        c.publish(bad(&|e| e.id = "i".repeat(2000)), T0),
        Err(CacheError::InvalidEntry(InvalidEntry::IdTooLong { .. }))
    ));
    assert_eq!(c.len().unwrap(), 1);
}

#[test]
fn publish_many_is_all_or_nothing() {
    let mut c = AdvCache::open_in_memory().unwrap();
    let mut batch: Vec<CacheEntry> = (0..10)
        .map(|i| entry(AdvKind::Adv, &format!("i{i}"), "n", 1_000))
        .collect();
    batch[7].lifetime_ms = 0;
    assert!(c.publish_many(batch, T0).is_err());
    assert_eq!(c.len().unwrap(), 0);
}

fn small(policy: FullPolicy) -> AdvCache {
    let cfg = CacheConfig {
        max_entries: 10,
        full_policy: policy,
        ..CacheConfig::default()
    };
    let mut c = AdvCache::open_in_memory_with(cfg).unwrap();
    for i in 0..10u64 {
        c.publish(
            entry(AdvKind::Adv, &format!("e{i}"), "n", 10_000 + i * 1_000),
            T0,
        )
        .unwrap();
    }
    c
}

#[test]
fn full_cache_evicts_the_soonest_expiring_and_says_so() {
    let mut c = small(FullPolicy::EvictSoonestExpiring);
    let out = c
        .publish(entry(AdvKind::Peer, "own", "me", 1_000_000), T0)
        .unwrap();
    assert_eq!(out.evicted, 1);
    assert_eq!(c.len().unwrap(), 10);
    assert!(c.get("e0", T0).unwrap().is_none());
    assert!(c.get("e1", T0).unwrap().is_some());
    // Nothing expires sooner than a very short newcomer: refused, not dropped.
    let e = c
        .publish(entry(AdvKind::Adv, "brief", "n", 10), T0)
        .unwrap_err();
    assert!(matches!(e, CacheError::Full { max_entries: 10 }), "{e:?}");
    assert_eq!(c.len().unwrap(), 10);
    // Replacing an existing id never needs room.
    assert!(
        c.publish(entry(AdvKind::Adv, "e5", "m", 10), T0)
            .unwrap()
            .replaced
    );
    // Expired entries make room first, without counting as evictions.
    let later = T0 + 11_500; // e1 (11 s) has expired
    let out = c
        .publish(entry(AdvKind::Adv, "late", "n", 10), later)
        .unwrap();
    assert_eq!((out.evicted, out.purged_expired), (0, 1));
    assert_eq!(c.len().unwrap(), 10);
}

#[test]
fn full_cache_can_refuse_instead() {
    let mut c = small(FullPolicy::Refuse);
    let e = c
        .publish(entry(AdvKind::Adv, "new", "n", 1_000_000), T0)
        .unwrap_err();
    assert!(matches!(e, CacheError::Full { .. }));
    assert_eq!(c.len().unwrap(), 10);
    assert!(c.get("e0", T0).unwrap().is_some());
}

#[test]
fn contains_scans_are_bounded() {
    let cfg = CacheConfig {
        max_scan_rows: 50,
        ..CacheConfig::default()
    };
    let mut c = AdvCache::open_in_memory_with(cfg).unwrap();
    let batch: Vec<CacheEntry> = (0..200)
        .map(|i| {
            entry(
                AdvKind::Adv,
                &format!("i{i:03}"),
                &format!("n{i:03}"),
                1_000,
            )
        })
        .collect();
    c.publish_many(batch, T0).unwrap();
    let out = c
        .query_outcome(AdvKind::Adv, Some("Name"), Some("*199*"), 10, T0)
        .unwrap();
    assert!(out.scan_limit_reached);
    assert!(out.advs.is_empty());
    // An indexed pattern is not affected by the bound.
    let out = c
        .query_outcome(AdvKind::Adv, Some("Name"), Some("*199"), 10, T0)
        .unwrap();
    assert!(!out.scan_limit_reached);
    assert_eq!(names(&out.advs), ["i199"]);
}

#[tokio::test]
async fn async_handle_round_trip_and_purger_stops_with_the_handles() {
    let handle = CacheHandle::spawn(AdvCache::open_in_memory().unwrap(), 4).unwrap();
    handle
        .publish(entry(AdvKind::Adv, "x", "n", 1_000), T0)
        .await
        .unwrap();
    handle
        .publish_many(vec![entry(AdvKind::Adv, "y", "n", 50)], T0)
        .await
        .unwrap();
    let r = handle
        .query(AdvKind::Adv, Some("Name".into()), Some("n".into()), 10, T0)
        .await
        .unwrap();
    assert_eq!(names(&r), ["x", "y"]);
    let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(T0 + 100));
    let n2 = now.clone();
    let purger = tokio::spawn(handle.purge_periodically(
        std::time::Duration::from_millis(5),
        10,
        move || n2.load(std::sync::atomic::Ordering::Relaxed),
    ));
    for _ in 0..200 {
        if handle.len().await.unwrap() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(handle.len().await.unwrap(), 1);
    assert!(handle.get("x".into(), T0).await.unwrap().is_some());
    assert!(handle.remove("x".into()).await.unwrap());
    drop(handle);
    purger.await.unwrap().unwrap();
}

#[tokio::test]
async fn file_backed_handle_reads_on_a_separate_connection_see_awaited_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.sqlite");
    let h = CacheHandle::spawn(AdvCache::open(&path).unwrap(), 8).unwrap();
    for i in 0..50 {
        let id = format!("i{i}");
        h.publish(entry(AdvKind::Adv, &id, "n", 60_000), T0)
            .await
            .unwrap();
        assert!(h.get(id, T0).await.unwrap().is_some());
    }
    assert_eq!(h.len().await.unwrap(), 50);
    // The reader connection is read-only.
    let write_on_reader = h.call_read(|c| c.remove("i0")).await.unwrap();
    assert!(write_on_reader.is_err());
    assert!(h.remove("i0".into()).await.unwrap());
    assert!(h.get("i0".into(), T0).await.unwrap().is_none());
    let hits = h
        .query(AdvKind::Adv, Some("Name".into()), Some("n".into()), 100, T0)
        .await
        .unwrap();
    assert_eq!(hits.len(), 49);
    drop(h);
    assert_eq!(AdvCache::open(&path).unwrap().len().unwrap(), 49);
}

/// The handle answers exact queries for values the cache cannot hold
/// without SQLite (a filter of the indexed values): it must never hide an
/// entry. Through several rebuilds of that filter (6,000 entries of two
/// indexed values each, on a file whose first 300 entries were there
/// before the handle existed), removals, and republishing under new names,
/// every live name is found and no other.
#[tokio::test]
async fn exact_queries_find_every_live_value_through_filter_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.sqlite");
    {
        let mut c = AdvCache::open(&path).unwrap();
        for i in 0..300 {
            c.publish(
                entry(AdvKind::Adv, &format!("i{i}"), &format!("n{i}"), 600_000),
                T0,
            )
            .unwrap();
        }
    }
    let h = CacheHandle::spawn(AdvCache::open(&path).unwrap(), 8).unwrap();
    let find = |name: String| {
        let h = h.clone();
        async move {
            h.query(AdvKind::Adv, Some("Name".into()), Some(name), 10, T0)
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(find("n7".into()).await, 1, "there before the handle");
    for i in 300..6000 {
        h.publish(
            entry(AdvKind::Adv, &format!("i{i}"), &format!("n{i}"), 600_000),
            T0,
        )
        .await
        .unwrap();
    }
    for i in (0..6000).step_by(3) {
        assert!(h.remove(format!("i{i}")).await.unwrap());
    }
    // Republished under another name (the old one is gone).
    for i in (1..6000).step_by(30) {
        h.publish(
            entry(AdvKind::Adv, &format!("i{i}"), &format!("m{i}"), 600_000),
            T0,
        )
        .await
        .unwrap();
    }
    for i in 0..6000 {
        let want = usize::from(i % 3 != 0 && i % 30 != 1);
        assert_eq!(find(format!("n{i}")).await, want, "n{i}");
        let renamed = usize::from(i % 30 == 1);
        assert_eq!(find(format!("m{i}")).await, renamed, "m{i}");
    }
    // Another kind, attribute or case is another value.
    assert!(h
        .query(
            AdvKind::Peer,
            Some("Name".into()),
            Some("n2".into()),
            10,
            T0
        )
        .await
        .unwrap()
        .is_empty());
    assert!(h
        .query(AdvKind::Adv, Some("Id".into()), Some("n2".into()), 10, T0)
        .await
        .unwrap()
        .is_empty());
    assert!(h
        .query(AdvKind::Adv, Some("Name".into()), Some("N2".into()), 10, T0)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        h.query(AdvKind::Adv, Some("Id".into()), Some("i2".into()), 10, T0)
            .await
            .unwrap()
            .len(),
        1
    );
    // Wildcards are never filtered.
    assert_eq!(
        h.query(
            AdvKind::Adv,
            Some("Name".into()),
            Some("m*".into()),
            1000,
            T0
        )
        .await
        .unwrap()
        .len(),
        200
    );
}

/// Reference matcher: `*` matches any byte run, everything else itself.
fn reference_match(pat: &[u8], v: &[u8]) -> bool {
    let (n, m) = (pat.len(), v.len());
    let mut dp = vec![vec![false; m + 1]; n + 1];
    dp[0][0] = true;
    for i in 1..=n {
        if pat[i - 1] == b'*' {
            dp[i][0] = dp[i - 1][0];
        }
        for j in 1..=m {
            dp[i][j] = if pat[i - 1] == b'*' {
                dp[i - 1][j] || dp[i][j - 1]
            } else {
                dp[i - 1][j - 1] && pat[i - 1] == v[j - 1]
            };
        }
    }
    dp[n][m]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pattern_agrees_with_reference(pat in "[ab*Aé]{0,8}", v in "[abAé]{0,10}") {
        // An empty value means "any", as a missing one (JXSE: no query).
        let want = pat.is_empty() || reference_match(pat.as_bytes(), v.as_bytes());
        prop_assert_eq!(Pattern::parse(&pat).matches(v.as_bytes()), want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn cache_queries_agree_with_reference(
        values in proptest::collection::vec("[abé]{0,6}", 1..30),
        pats in proptest::collection::vec("[ab*é]{0,5}", 1..8),
    ) {
        let mut c = AdvCache::open_in_memory().unwrap();
        for (i, v) in values.iter().enumerate() {
            c.publish(entry(AdvKind::Adv, &format!("id{i}"), v, 1_000), T0).unwrap();
        }
        for pat in &pats {
            let got = names(&c.query(AdvKind::Adv, Some("Name"), Some(pat), 1_000, T0).unwrap());
            let mut want: Vec<String> = values
                .iter()
                .enumerate()
                .filter(|(_, v)| pat.is_empty() || reference_match(pat.as_bytes(), v.as_bytes()))
                .map(|(i, _)| format!("id{i}"))
                .collect();
            want.sort();
            prop_assert_eq!(got, want, "pattern {:?}", pat);
        }
    }
}
