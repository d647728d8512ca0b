//! Facts about the machine and the build, recorded with every result.

use serde::Serialize;

/// Machine and build facts.
#[derive(Debug, Clone, Serialize)]
pub struct MachineFacts {
    /// Logical CPUs of the machine (not the affinity mask of a pinned
    /// process).
    pub cores: usize,
    /// `uname -r`.
    pub kernel: String,
    /// CPU model name.
    pub cpu: String,
    /// `git rev-parse HEAD` of the source tree, if known.
    pub git_commit: String,
    /// Whether the source tree had uncommitted changes (then `git_commit`
    /// alone does not describe what was measured).
    pub git_dirty: bool,
    /// Juxta version.
    pub juxta_version: String,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Online CPUs from `/sys` (`0-1` or `0,2-3`), else the processors in
/// `/proc/cpuinfo`; `None` if neither is readable.
fn online_cpus() -> Option<usize> {
    let from_sys = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()));
    from_sys.or_else(|| {
        let n = std::fs::read_to_string("/proc/cpuinfo")
            .ok()?
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        (n > 0).then_some(n)
    })
}

/// Counts a kernel CPU list such as `0-3,6`.
fn count_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0;
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                n += b.checked_sub(a)? + 1;
            }
            None => {
                part.parse::<usize>().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

/// The first line `cmd args` prints (on stdout or stderr: `java -version`
/// writes to stderr), if the command runs.
pub fn tool_version(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
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
    // Recorded when the binary was built (build.rs), not read from the
    // work tree now: the tree may have moved on since.
    let git_commit = env!("JUXTA_GIT_COMMIT").to_string();
    let git_dirty = env!("JUXTA_GIT_DIRTY") == "true";
    MachineFacts {
        // The bench pins itself before collecting these, so the affinity
        // mask (available_parallelism) would say 1.
        cores: online_cpus().unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }),
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        cpu,
        git_commit,
        git_dirty,
        juxta_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("x"), None);
        assert_eq!(count_cpu_list("3-1"), None);
    }

    #[test]
    fn facts_count_the_machine_not_the_affinity() {
        let f = facts();
        assert!(f.cores >= 1);
        if let Some(n) = online_cpus() {
            assert_eq!(f.cores, n);
        }
    }

    #[test]
    fn the_commit_is_the_one_the_binary_was_built_from() {
        let f = facts();
        // A full hash from a checkout, or "unknown" from a source archive.
        assert!(
            f.git_commit == "unknown"
                || (f.git_commit.len() == 40
                    && f.git_commit.chars().all(|c| c.is_ascii_hexdigit())),
            "{}",
            f.git_commit
        );
    }
}
