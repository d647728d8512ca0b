//! Prerequisites of the tests that need something besides Rust (root for
//! network namespaces, Java and the JXSE harness, Chromium): [`require`]
//! and the checks are shared with the `juxta` crate's tests
//! (`crates/juxta/tests/prereq/mod.rs`); the JXSE checks here also build
//! the harness.

#![allow(dead_code)]

use std::path::PathBuf;

#[path = "../../../juxta/tests/prereq/mod.rs"]
mod shared;

#[allow(unused_imports)]
pub use shared::{in_ci, is_root, netns, on_path, require, require_ok};

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
