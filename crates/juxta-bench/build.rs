//! Records the commit the bench is built from, and whether the tree had
//! uncommitted changes then, in `JUXTA_GIT_COMMIT` / `JUXTA_GIT_DIRTY`:
//! results name the source of the binary that measured them, not the
//! state of the work tree when the binary happens to run (a binary kept
//! from an older commit used to report the tree's newer one).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    // The workspace's sources: any change there may change the dirty flag.
    println!("cargo:rerun-if-changed=../../crates");
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    let Some(commit) = git(&["rev-parse", "HEAD"]) else {
        // Not built from a git checkout (e.g. a source archive).
        println!("cargo:rustc-env=JUXTA_GIT_COMMIT=unknown");
        println!("cargo:rustc-env=JUXTA_GIT_DIRTY=false");
        return;
    };
    // A commit, a checkout or a pull moves HEAD, a ref or the index.
    let mut watch = vec!["HEAD".to_string(), "index".into(), "packed-refs".into()];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(r);
    }
    for w in watch {
        if let Some(p) = git(&["rev-parse", "--git-path", &w]) {
            if Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    println!("cargo:rustc-env=JUXTA_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=JUXTA_GIT_DIRTY={dirty}");
}
