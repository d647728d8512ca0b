//! Facts about the machine and the build, recorded with every result.

use serde::Serialize;

/// Machine and build facts.
#[derive(Debug, Clone, Serialize)]
pub struct MachineFacts {
    /// Logical CPUs.
    pub cores: usize,
    /// `uname -r`.
    pub kernel: String,
    /// CPU model name.
    pub cpu: String,
    /// `git rev-parse HEAD` of the source tree, if known.
    pub git_commit: String,
    /// Juxta version.
    pub juxta_version: String,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Collects the facts.
pub fn facts() -> MachineFacts {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    let git_commit = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    MachineFacts {
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        cpu,
        git_commit,
        juxta_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}
