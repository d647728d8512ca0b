//! Prerequisites of the tests that need something besides Rust (root and
//! iproute2 for network namespaces, Java and the built JXSE harness): [`require`]
//! skips such a test visibly on a machine without it and fails it in CI
//! (env `CI=true`), so a CI run never passes a test that did not run.
#![allow(dead_code)]

use std::path::PathBuf;

/// `true` when the test can go on. When `available` is false: with env
/// `CI=true` (or `CI=1`) it panics, so the test fails and names what CI
/// must provide; otherwise it prints `skipped: <test>: <prereq>` to stderr
/// (past the test harness's output capture) and returns `false` (the
/// caller returns).
///
/// ```ignore
/// if !prereq::require("root (network namespaces)", prereq::is_root()) {
///     return;
/// }
/// ```
pub fn require(prereq: &str, available: bool) -> bool {
    if available {
        return true;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_string();
    if in_ci() {
        panic!("{test}: missing prerequisite (CI=true, so this test must run): {prereq}");
    }
    // Straight to the stderr stream, not `eprintln!`: the test harness
    // captures that for passing tests and the skip would go unseen.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {prereq}");
    false
}

/// [`require`] for a check that gives the reason it failed.
pub fn require_ok(check: Result<(), String>) -> bool {
    match check {
        Ok(()) => true,
        Err(why) => require(&why, false),
    }
}

/// Whether env `CI` says this is a CI run.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The first of `names` found as a file in a `PATH` directory.
pub fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

/// Whether this process runs as root (uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        == Some("0")
}

/// Whether network namespaces can be made here: root and `ip` (iproute2).
pub fn netns() -> Result<(), String> {
    if !is_root() {
        return Err("network namespaces need root".into());
    }
    on_path(&["ip"])
        .map(|_| ())
        .ok_or_else(|| "network namespaces need `ip` (iproute2) on PATH".into())
}

/// Whether the JXSE 2.7 harness (`interop/jxse`) can run here: `java` on
/// PATH and the harness built (`bash interop/jxse/build.sh`, which
/// scripts/test.sh runs before the tests).
pub fn jxse() -> Result<(), String> {
    if on_path(&["java"]).is_none() {
        return Err("the JXSE harness needs `java` (JDK 17) on PATH".into());
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/jxse");
    let built = [
        "target/classes/net/jxta/impl/peergroup/CompatibilityUtils.class",
        "target/lib/jxse-2.7.jar",
    ]
    .iter()
    .all(|f| dir.join(f).is_file());
    if !built {
        return Err("the JXSE harness is not built: run `bash interop/jxse/build.sh`".into());
    }
    // A harness edited since its last build would run the old code.
    let main = dir.join("target/classes/org/juxta/harness/Main.class");
    if harness_stale(&dir, &main) {
        return Err("the JXSE harness is older than its sources (interop/jxse/src, pom.xml): run `bash interop/jxse/build.sh`".into());
    }
    Ok(())
}

/// Whether a file under `dir/src` or `dir/pom.xml` is newer than `built`
/// (the same rule as `juxta_bench::jxse::harness_stale`, which rebuilds;
/// the tests only report it: several test binaries must not run Maven at
/// once).
fn harness_stale(dir: &std::path::Path, built: &std::path::Path) -> bool {
    fn newest(p: &std::path::Path, depth: usize) -> Option<std::time::SystemTime> {
        let m = std::fs::metadata(p).ok()?;
        if !m.is_dir() {
            return m.modified().ok();
        }
        if depth == 0 {
            return None;
        }
        std::fs::read_dir(p)
            .ok()?
            .flatten()
            .filter_map(|e| newest(&e.path(), depth - 1))
            .max()
    }
    let Some(built) = std::fs::metadata(built).and_then(|m| m.modified()).ok() else {
        return true;
    };
    [dir.join("src"), dir.join("pom.xml")]
        .iter()
        .filter_map(|p| newest(p, 12))
        .any(|t| t > built)
}
