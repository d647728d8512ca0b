//! Builds a large advertisement cache and measures what the issue asks:
//! start-up time and exact-query time, plus prefix/suffix queries and
//! incremental purge batches.
//!
//! ```text
//! cargo run --release -p juxta --example cache_scale -- [ENTRIES] [DIR]
//! ```
//!
//! ENTRIES defaults to 1,000,000; DIR to `$TMPDIR/juxta-cache-scale`. An
//! existing cache of the right size in DIR is reused (delete it to
//! rebuild). The numbers are printed; `docs/cache.md` records a run.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use juxta::cache::{AdvCache, AdvKind, CacheConfig, CacheEntry, OnCorrupt};

const T0: u64 = 1_700_000_000_000;
const HOUR: u64 = 3_600_000;
const GROUP_HEX: &str = "59616261646162614E50472050325033";

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn pipe_id(i: u64) -> String {
    format!(
        "urn:jxta:uuid-{GROUP_HEX}{:016X}{:016X}04",
        splitmix(i),
        splitmix(i ^ 0xABCD)
    )
}

fn pipe_entry(i: u64) -> CacheEntry {
    let id = pipe_id(i);
    let name = format!("pipe-{i}");
    let doc = format!(
        "<?xml version=\"1.0\"?>\n<!DOCTYPE jxta:PipeAdvertisement>\n\
         <jxta:PipeAdvertisement xmlns:jxta=\"http://jxta.org\">\n\t<Id>{id}</Id>\n\
         \t<Type>JxtaUnicast</Type>\n\t<Name>{name}</Name>\n</jxta:PipeAdvertisement>\n"
    );
    CacheEntry {
        kind: AdvKind::Adv,
        adv_type: "jxta:PipeAdvertisement".into(),
        id: id.clone(),
        index: vec![("Name".into(), name), ("Id".into(), id)],
        document: Bytes::from(doc),
        // 1 h plus 0..1000 s, so that a purge at T0 + 1 h + 10 s finds ~1 %.
        lifetime_ms: HOUR + (i % 1000) * 1000,
        expiration_ms: 2 * HOUR,
    }
}

fn config(n: u64) -> CacheConfig {
    CacheConfig {
        max_entries: n.max(1 << 20),
        ..CacheConfig::default()
    }
}

fn build(path: &Path, n: u64) {
    if let Ok(c) = AdvCache::open_with(path, config(n), OnCorrupt::Fail) {
        if c.len().unwrap_or(0) == n {
            println!("reusing {} ({n} entries)", path.display());
            return;
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    let start = Instant::now();
    let mut c = AdvCache::open_with(path, config(n), OnCorrupt::Fail).expect("create");
    let batch = 10_000u64;
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        c.publish_many((i..end).map(pipe_entry), T0)
            .expect("publish");
        i = end;
        if i % 200_000 == 0 {
            println!("  built {i} in {:.1} s", start.elapsed().as_secs_f64());
        }
    }
    drop(c); // checkpoints the WAL into the main file
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    println!(
        "built {n} entries in {:.1} s, file {:.0} MiB",
        start.elapsed().as_secs_f64(),
        size as f64 / (1 << 20) as f64
    );
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn measure(path: &Path, n: u64) {
    // Start-up: open + first exact query, several times (page cache warm).
    let mut opens = Vec::new();
    let mut firsts = Vec::new();
    for k in 0..7u64 {
        let t = Instant::now();
        let mut c = AdvCache::open_with(path, config(n), OnCorrupt::Fail).expect("open");
        opens.push(t.elapsed());
        let name = format!("pipe-{}", splitmix(k) % n);
        let t = Instant::now();
        let r = c
            .query(AdvKind::Adv, Some("Name"), Some(&name), 50, T0 + 1)
            .unwrap();
        firsts.push(t.elapsed());
        assert_eq!(r.len(), 1);
    }
    println!(
        "[{n}] open: median {} max {} | first exact query after open: median {} max {}",
        us(pct(&mut opens, 0.5)),
        us(pct(&mut opens, 1.0)),
        us(pct(&mut firsts, 0.5)),
        us(pct(&mut firsts, 1.0)),
    );

    let mut c = AdvCache::open_with(path, config(n), OnCorrupt::Fail).expect("open");
    let rounds = 10_000u64.min(n * 4);
    for (attr, label) in [("Name", "exact Name"), ("Id", "exact Id")] {
        let mut lat = Vec::with_capacity(rounds as usize);
        for k in 0..rounds {
            let i = splitmix(k + 1_000) % n;
            let v = if attr == "Name" {
                format!("pipe-{i}")
            } else {
                pipe_id(i)
            };
            let t = Instant::now();
            let r = c
                .query(AdvKind::Adv, Some(attr), Some(&v), 50, T0 + 1)
                .unwrap();
            lat.push(t.elapsed());
            assert_eq!(r.len(), 1, "{attr}={v}");
        }
        println!(
            "[{n}] {label} ({rounds} queries): p50 {} p99 {} max {}",
            us(pct(&mut lat, 0.5)),
            us(pct(&mut lat, 0.99)),
            us(pct(&mut lat, 1.0))
        );
    }
    let patterns = [
        ("prefix", format!("pipe-{}*", n / 7)),
        ("suffix", format!("*{:04}", n % 9973)),
        ("contains", "*e-4242*".to_string()),
    ];
    for (label, pat) in patterns {
        let t = Instant::now();
        let out = c
            .query_outcome(AdvKind::Adv, Some("Name"), Some(&pat), 50, T0 + 1)
            .unwrap();
        println!(
            "[{n}] {label} {pat:?} threshold 50: {} results in {} (scan limit reached: {})",
            out.advs.len(),
            us(t.elapsed()),
            out.scan_limit_reached
        );
    }
    // Incremental purge: ~1 % of entries are expired at this time.
    let now = T0 + HOUR + 10_000;
    let mut batches = Vec::new();
    let mut total = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let k = c.purge_expired(now, 500).unwrap();
        batches.push(t.elapsed());
        total += k;
    }
    println!(
        "[{n}] purge_expired(500 rows): {total} rows in 5 batches, median {} max {} per batch",
        us(pct(&mut batches, 0.5)),
        us(pct(&mut batches, 1.0))
    );
    // The same purge batches on the writer while another connection (as
    // CacheHandle's reader thread) runs exact queries: queries do not
    // wait for the purge.
    let reader = c.open_reader().unwrap().expect("file-backed");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    let q = std::thread::spawn(move || {
        let mut reader = reader;
        let mut lat = Vec::new();
        let mut k = 0u64;
        while !d2.load(std::sync::atomic::Ordering::Relaxed) || lat.len() < 1000 {
            let i = splitmix(k + 77_777) % n;
            k += 1;
            let name = format!("pipe-{i}");
            let t = Instant::now();
            reader
                .query(AdvKind::Adv, Some("Name"), Some(&name), 50, T0 + 1)
                .unwrap();
            lat.push(t.elapsed());
        }
        lat
    });
    let t = Instant::now();
    let mut purged = 0;
    for _ in 0..5 {
        purged += c.purge_expired(now, 500).unwrap();
    }
    let purge_time = t.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut lat = q.join().unwrap();
    println!(
        "[{n}] exact Name on a reader connection during {purged} purged rows ({:.0} ms): \
         {} queries, p50 {} p99 {} max {}",
        purge_time.as_secs_f64() * 1e3,
        lat.len(),
        us(pct(&mut lat, 0.5)),
        us(pct(&mut lat, 0.99)),
        us(pct(&mut lat, 1.0))
    );
    // Put the purged entries back (those whose lifetime is <= 1 h + 10 s)
    // so that the file can be reused by the next run.
    let expired = (0..n).filter(|i| i % 1000 <= 10).map(pipe_entry);
    c.publish_many(expired, T0).unwrap();
    assert_eq!(c.len().unwrap(), n);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map(|a| {
            a.replace('_', "")
                .parse()
                .expect("ENTRIES must be a number")
        })
        .unwrap_or(1_000_000);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("juxta-cache-scale"));
    std::fs::create_dir_all(&dir).expect("create DIR");
    // A small cache first, to show start-up does not grow with size.
    let small = dir.join("small.sqlite");
    build(&small, 1_000);
    measure(&small, 1_000);
    let big = dir.join(format!("cache-{n}.sqlite"));
    build(&big, n);
    measure(&big, n);
    println!("files kept in {} (delete them when done)", dir.display());
}
