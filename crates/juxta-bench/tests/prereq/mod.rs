//! Prerequisites of the tests that need something besides Rust (root for
//! network namespaces, Java and the JXSE harness, Chromium): [`require`]
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

/// Whether the JXSE 2.7 harness can run here: `java` on PATH, the harness
/// found, and built or buildable (`mvn` on PATH). A failing build is not a
/// missing prerequisite: the test runs and reports it.
pub fn jxse() -> Result<(), String> {
    use juxta_bench::jxse;
    if on_path(&["java"]).is_none() {
        return Err("the JXSE harness needs `java` (JDK 17) on PATH".into());
    }
    let dir = jxse::locate_harness().map_err(|e| e.to_string())?;
    if !jxse::harness_built(&dir) && on_path(&["mvn"]).is_none() {
        return Err(format!(
            "the JXSE harness in {} is not built and `mvn` is not on PATH to build it",
            dir.display()
        ));
    }
    Ok(())
}

/// The JXSE harness directory, built if needed (panics when the build
/// fails). Builds one at a time: the tests of a binary run in parallel and
/// `build.sh` must not run twice at once in the same directory.
pub fn built_jxse_harness() -> PathBuf {
    use juxta_bench::jxse;
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = jxse::locate_harness().expect("the JXSE harness directory");
    jxse::ensure_built(&dir).expect("building the JXSE harness");
    dir
}
