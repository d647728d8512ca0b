//! The runnable programs of `docs/guide.md` (in `src/bin/`), built as a
//! user's own crate would be: they depend on `juxta` and `tokio` only, and
//! import everything through `juxta::prelude`. `tests/guide.rs` runs each
//! one; each program checks its own result and exits non-zero when it is
//! wrong.
//!
//! The one helper they share: scratch home directories for their peers.

use std::path::PathBuf;

/// A scratch directory holding the home directories of a demo's peers,
/// removed when dropped. Create it first in `main` so that it is dropped
/// after the peers. A real program keeps its home (the peer's identity
/// and cache live there); these demos start fresh each run.
pub struct Scratch {
    root: PathBuf,
}

impl Scratch {
    /// A new, empty scratch directory under the system's temporary
    /// directory, named after `demo` and this process.
    pub fn new(demo: &str) -> Scratch {
        let root = std::env::temp_dir().join(format!("juxta-guide-{demo}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        Scratch { root }
    }

    /// The home directory for the peer called `name`.
    pub fn home(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
