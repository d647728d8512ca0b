//! The original JXSE 2.7 side by side: the ping-pong and throughput
//! scenarios run between two real JXSE peers (the `interop/jxse` harness),
//! so one report shows JXSE, Juxta and plain TCP.
//!
//! Why it looks like this: JXSE is a Java library, so two harness JVMs run
//! on loopback, a responder (`BENCH_SERVE`) and a client (`BENCH_CLIENT`).
//! The client times every message/ack pair itself, in Java, with
//! `System.nanoTime` (so the stdin/stdout control channel is never inside a
//! measurement) and prints one result line per (layer, size); this module
//! turns those lines into the same [`PingPongRow`] and [`ThroughputRow`]
//! structs Juxta's scenarios produce, with `impl = "jxse"`.
//!
//! Wire bytes: unless [`JxseOptions::count_wire`] is off, both JVMs reach
//! each other only through a small counting TCP forwarder on loopback (the
//! harness `ROUTE`s each peer to it), and `wire_bytes` is what the client
//! peer wrote per message/ack pair (its message plus its share of acks and
//! control traffic), measured over [`JxseOptions::wire_pairs`] extra pairs.
//! The forwarder adds one loopback hop each way (tens of microseconds);
//! JXSE round trips are milliseconds.
//!
//! Budgets are small by default (JXSE takes milliseconds per message): each
//! (layer, size) gets at most [`JxseOptions::budget_ms`] of timed pairs, so
//! the whole JXSE part of a run stays around a minute.
//!
//! ```no_run
//! # async fn demo() -> Result<(), juxta_bench::BenchError> {
//! use juxta_bench::jxse::{run_pingpong, JxseOptions};
//! let opts = JxseOptions { sizes: vec![1, 1 << 20], ..JxseOptions::default() };
//! let run = run_pingpong(&opts, &[], &mut |line: &str| eprintln!("{line}")).await;
//! for row in &run.rows {
//!     println!("{} {} B: {:.0} us", row.layer, row.size, row.rtt_us_median);
//! }
//! let rows = run.into_result()?; // the error, if any, after the partial rows were used
//! # let _ = rows; Ok(()) }
//! ```

use std::collections::VecDeque;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::layers::Layer;
use crate::pingpong::PingPongRow;
use crate::throughput::{Pattern, ThroughputRow};
use crate::util::{loss_pct, percentile, Pin};
use crate::BenchError;

/// The layers JXSE is measured on.
pub const JXSE_LAYERS: [Layer; 3] = [Layer::Endpoint, Layer::UnicastPipe, Layer::Socket];

/// Largest payload the harness accepts (its payload is one Java byte array).
pub const MAX_SIZE: usize = 64 << 20;

/// How long a harness build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);
/// Lines of JVM stderr kept for error messages.
const STDERR_TAIL: usize = 30;
/// Protocol lines buffered from one JVM before its reader pushes back.
const LINE_QUEUE: usize = 256;

/// Errors running the JXSE side of a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum JxseError {
    /// Java is not installed.
    #[error("java not found: install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)")]
    JavaMissing,
    /// Maven is needed to build the harness and is not installed.
    #[error("mvn not found: the JXSE harness in {dir} is not built and building it needs Maven (Debian: apt-get install maven), or build it elsewhere with interop/jxse/build.sh")]
    MavenMissing {
        /// the harness directory
        dir: PathBuf,
    },
    /// No harness directory was found.
    #[error("JXSE harness not found (looked in {}): run from the repository root or set JUXTA_JXSE_HARNESS=<path to interop/jxse>", .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    HarnessNotFound {
        /// where it was looked for
        searched: Vec<PathBuf>,
    },
    /// The harness build failed.
    #[error("building the JXSE harness ({dir}/build.sh) failed: {tail}")]
    BuildFailed {
        /// the harness directory
        dir: PathBuf,
        /// the end of the build's output
        tail: String,
    },
    /// A JVM could not be started.
    #[error("cannot start {what}: {source}")]
    Spawn {
        /// what was started
        what: String,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// A harness answered with an `ERROR` line.
    #[error("JXSE {role} answered {command:?} with {line:?}; its stderr ends with: {stderr}")]
    Harness {
        /// `client` or `responder`
        role: &'static str,
        /// the command
        command: String,
        /// the ERROR line
        line: String,
        /// its stderr tail
        stderr: String,
    },
    /// A harness did not answer in time (it was killed).
    #[error("JXSE {role} did not answer {command:?} within {after:?} (killed); its stderr ends with: {stderr}")]
    Timeout {
        /// `client` or `responder`
        role: &'static str,
        /// the command (or `startup`)
        command: String,
        /// how long was waited
        after: Duration,
        /// its stderr tail
        stderr: String,
    },
    /// A harness JVM exited.
    #[error(
        "JXSE {role} exited ({status}) while running {command:?}; its stderr ends with: {stderr}"
    )]
    Exited {
        /// `client` or `responder`
        role: &'static str,
        /// the command (or `startup`)
        command: String,
        /// the exit status
        status: String,
        /// its stderr tail
        stderr: String,
    },
    /// A result line that does not parse.
    #[error("unparsable JXSE result line {line:?}: {reason}")]
    Parse {
        /// the line
        line: String,
        /// what is wrong
        reason: String,
    },
    /// A layer JXSE is not measured on.
    #[error("layer {0} is not measured for JXSE (choose from: endpoint, unicast-pipe, socket)")]
    UnsupportedLayer(String),
    /// Bad option value.
    #[error("bad JXSE option: {0}")]
    BadOption(String),
    /// I/O error with context.
    #[error("{what}: {source}")]
    Io {
        /// what was done
        what: String,
        /// the error
        #[source]
        source: std::io::Error,
    },
}

/// Options of the JXSE side.
#[derive(Debug, Clone, Serialize)]
pub struct JxseOptions {
    /// Layers (of [`JXSE_LAYERS`]).
    pub layers: Vec<Layer>,
    /// Payload sizes in bytes (at most [`MAX_SIZE`]).
    pub sizes: Vec<usize>,
    /// Warm-up pairs per layer and size (cut short after a quarter of `budget_ms`).
    pub warmup: usize,
    /// Timed runs.
    pub runs: usize,
    /// Pairs per timed run (a run ends early once it used `budget_ms / runs`).
    pub pairs: usize,
    /// Time budget of the timed runs of one layer and size (ms).
    pub budget_ms: u64,
    /// Route both JVMs through a counting forwarder and report `wire_bytes`.
    pub count_wire: bool,
    /// Extra (untimed) pairs the wire bytes are averaged over.
    pub wire_pairs: usize,
    /// Throughput: how long to send per layer and size (ms).
    pub throughput_duration_ms: u64,
    /// Throughput: at most this many messages per layer and size.
    pub throughput_max_count: u64,
    /// The harness directory (`interop/jxse`); found with [`locate_harness`] if unset.
    pub harness_dir: Option<PathBuf>,
    /// The `java` executable.
    pub java: PathBuf,
    /// Build the harness with its `build.sh` if it is not built.
    pub build: bool,
    /// How long a JVM may take to print `READY` (ms).
    pub startup_timeout_ms: u64,
    /// CPU placement of the JVMs: `same` both on CPU 0, `split` client on
    /// 0 and responder on 1, `none` every CPU (set explicitly, so JVMs
    /// started from a pinned thread are not confined by inheritance).
    pub pin: Pin,
}

impl Default for JxseOptions {
    fn default() -> Self {
        JxseOptions {
            layers: JXSE_LAYERS.to_vec(),
            sizes: vec![1, 1024, 65536, 1_048_576],
            warmup: 50,
            runs: 5,
            pairs: 100,
            budget_ms: 3000,
            count_wire: true,
            wire_pairs: 10,
            throughput_duration_ms: 1000,
            throughput_max_count: 20_000,
            harness_dir: None,
            java: PathBuf::from("java"),
            build: true,
            startup_timeout_ms: 60_000,
            pin: Pin::None,
        }
    }
}

impl JxseOptions {
    fn check(&self) -> Result<(), JxseError> {
        for l in &self.layers {
            if !JXSE_LAYERS.contains(l) {
                return Err(JxseError::UnsupportedLayer(l.name().into()));
            }
        }
        if let Some(s) = self.sizes.iter().find(|&&s| s > MAX_SIZE) {
            return Err(JxseError::BadOption(format!(
                "size {s} is above the harness limit of {MAX_SIZE} bytes"
            )));
        }
        if self.runs == 0 || self.pairs == 0 || self.budget_ms == 0 {
            return Err(JxseError::BadOption(
                "runs, pairs and budget_ms must be at least 1".into(),
            ));
        }
        if self.throughput_max_count == 0 {
            return Err(JxseError::BadOption(
                "throughput_max_count must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// What a JXSE run measured: the rows measured before any failure, the
/// failure, and the process ids of the JVMs it started (all stopped when
/// the run returns).
#[derive(Debug)]
pub struct JxseRun<T> {
    /// Rows measured (also those before a failure).
    pub rows: Vec<T>,
    /// What stopped the run early, if anything.
    pub error: Option<JxseError>,
    /// PIDs of the harness JVMs that were started.
    pub jvm_pids: Vec<u32>,
}

impl<T> JxseRun<T> {
    /// The rows, or the error if there was one.
    pub fn into_result(self) -> Result<Vec<T>, BenchError> {
        match self.error {
            Some(e) => Err(e.into()),
            None => Ok(self.rows),
        }
    }
}

// ------------------------------------------------------------------ harness

/// Finds the harness directory: `$JUXTA_JXSE_HARNESS`, then `interop/jxse`
/// under the current directory and its parents, then the copy next to this
/// crate's sources.
pub fn locate_harness() -> Result<PathBuf, JxseError> {
    let mut searched = Vec::new();
    if let Some(p) = std::env::var_os("JUXTA_JXSE_HARNESS") {
        searched.push(PathBuf::from(p));
    }
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            searched.push(dir.join("interop/jxse"));
        }
    }
    searched.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/jxse"));
    for p in &searched {
        if p.join("build.sh").is_file() {
            return Ok(p.canonicalize().unwrap_or_else(|_| p.clone()));
        }
    }
    Err(JxseError::HarnessNotFound { searched })
}

/// Checks, before a run starts, that Java is installed and the harness is
/// found and built (building it if needed): each failure names what to
/// install or do. Returns the harness directory.
pub fn preflight() -> Result<PathBuf, JxseError> {
    if !on_path("java") {
        return Err(JxseError::JavaMissing);
    }
    let dir = locate_harness()?;
    ensure_built(&dir)?;
    Ok(dir)
}

/// Whether the harness in `dir` is built (classes and runtime jars).
pub fn harness_built(dir: &Path) -> bool {
    dir.join("target/classes/org/juxta/harness/Bench.class")
        .is_file()
        && dir
            .join("target/classes/net/jxta/impl/peergroup/CompatibilityUtils.class")
            .is_file()
        && dir.join("target/lib/jxse-2.7.jar").is_file()
}

/// Checks that `dir` holds the harness, building it with its `build.sh`
/// (needs Maven) if it is not built. Blocks for the build (about 5 to 15 s,
/// at most 10 minutes).
pub fn ensure_built(dir: &Path) -> Result<(), JxseError> {
    if !dir.join("build.sh").is_file() {
        return Err(JxseError::HarnessNotFound {
            searched: vec![dir.to_path_buf()],
        });
    }
    if harness_built(dir) {
        return Ok(());
    }
    if !on_path("mvn") {
        return Err(JxseError::MavenMissing {
            dir: dir.to_path_buf(),
        });
    }
    let log = tempfile::tempfile().map_err(|source| JxseError::Io {
        what: "creating the build log".into(),
        source,
    })?;
    let clone = |f: &std::fs::File| {
        f.try_clone().map_err(|source| JxseError::Io {
            what: "creating the build log".into(),
            source,
        })
    };
    let (log2, mut reader) = (clone(&log)?, clone(&log)?);
    let mut child = std::process::Command::new("bash")
        .arg(dir.join("build.sh"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        // Its own process group, so a build that hangs is killed with Maven.
        .process_group(0)
        .spawn()
        .map_err(|source| JxseError::Spawn {
            what: format!("{}/build.sh", dir.display()),
            source,
        })?;
    let deadline = std::time::Instant::now() + BUILD_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200))
            }
            _ => {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    if status.is_none_or(|s| !s.success()) || !harness_built(dir) {
        use std::io::{Read, Seek};
        let mut text = String::new();
        let _ = reader.seek(std::io::SeekFrom::Start(0));
        let _ = reader.read_to_string(&mut text);
        let lines: Vec<&str> = text.lines().collect();
        let mut tail = lines[lines.len().saturating_sub(15)..].join(" | ");
        match status {
            None => tail = format!("timed out after {BUILD_TIMEOUT:?} (killed); {tail}"),
            Some(s) if tail.is_empty() => tail = format!("exit {s}"),
            _ => {}
        }
        return Err(JxseError::BuildFailed {
            dir: dir.to_path_buf(),
            tail,
        });
    }
    Ok(())
}

fn on_path(exe: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(exe).is_file()))
        .unwrap_or(false)
}

// ------------------------------------------------------------------ one JVM

/// One harness JVM, killed when dropped.
struct Jvm {
    role: &'static str,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    peer: String,
    port: u16,
    _home: tempfile::TempDir,
}

fn free_port() -> Result<u16, JxseError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| JxseError::Io {
            what: "finding a free loopback port".into(),
            source,
        })
}

impl Jvm {
    fn spawn(role: &'static str, dir: &Path, java: &Path) -> Result<Jvm, JxseError> {
        let port = free_port()?;
        let home = tempfile::Builder::new()
            .prefix("juxta-bench-jxse-")
            .tempdir()
            .map_err(|source| JxseError::Io {
                what: "creating a JXSE home directory".into(),
                source,
            })?;
        let cp = format!(
            "{}:{}",
            dir.join("target/classes").display(),
            dir.join("target/lib/*").display()
        );
        let mut child = Command::new(java)
            .arg("-Dnet.jxta.logging.Logging=WARNING")
            .arg("-cp")
            .arg(cp)
            .arg("org.juxta.harness.Main")
            .args(["--port", &port.to_string(), "--name", role, "--home"])
            .arg(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    JxseError::JavaMissing
                } else {
                    JxseError::Spawn {
                        what: format!("{} (JXSE {role})", java.display()),
                        source,
                    }
                }
            })?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel(LINE_QUEUE);
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(l)) = r.next_line().await {
                if tx.send(l).await.is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let tail = stderr.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(stderr_pipe).lines();
            while let Ok(Some(l)) = r.next_line().await {
                let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                if t.len() == STDERR_TAIL {
                    t.pop_front();
                }
                t.push_back(l);
            }
        });
        Ok(Jvm {
            role,
            child,
            stdin,
            lines,
            stderr,
            peer: String::new(),
            port,
            _home: home,
        })
    }

    fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sets the CPU affinity of every thread of the JVM (threads it creates
    /// later inherit it from their creator). Best effort: a JVM that cannot
    /// be pinned still runs.
    fn pin(&self, core: Option<usize>) {
        use nix::sched::{sched_setaffinity, CpuSet};
        use nix::unistd::Pid;
        let Some(pid) = self.pid() else { return };
        let mut set = CpuSet::new();
        let cores = match core {
            Some(c) => c..c + 1,
            None => 0..CpuSet::count(),
        };
        for c in cores {
            let _ = set.set(c);
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return;
        };
        for t in tasks.flatten() {
            if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) {
                let _ = sched_setaffinity(Pid::from_raw(tid), &set);
            }
        }
    }

    fn stderr_tail(&self) -> String {
        let t = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        let v: Vec<&str> = t.iter().map(String::as_str).collect();
        let n = v.len().saturating_sub(8);
        v[n..].join(" | ")
    }

    /// Waits for the next line starting with `prefix`; other lines are
    /// skipped, an `ERROR` line fails.
    async fn expect(
        &mut self,
        command: &str,
        prefix: &str,
        within: Duration,
    ) -> Result<String, JxseError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(l)) if l.starts_with(prefix) => return Ok(l),
                Ok(Some(l)) if l.starts_with("ERROR") => {
                    return Err(JxseError::Harness {
                        role: self.role,
                        command: command.into(),
                        line: l,
                        stderr: self.stderr_tail(),
                    })
                }
                Ok(Some(_)) => continue,
                Ok(None) => {
                    let status =
                        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await
                        {
                            Ok(Ok(s)) => s.to_string(),
                            _ => "stdout closed".into(),
                        };
                    // Give the stderr reader a moment to catch the last lines.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return Err(JxseError::Exited {
                        role: self.role,
                        command: command.into(),
                        status,
                        stderr: self.stderr_tail(),
                    });
                }
                Err(_) => {
                    let _ = self.child.start_kill();
                    let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
                    return Err(JxseError::Timeout {
                        role: self.role,
                        command: command.into(),
                        after: within,
                        stderr: self.stderr_tail(),
                    });
                }
            }
        }
    }

    /// Sends `command` and waits for its answer (the line starting with `prefix`).
    async fn call(
        &mut self,
        command: &str,
        prefix: &str,
        within: Duration,
    ) -> Result<String, JxseError> {
        let sent = async {
            self.stdin.write_all(command.as_bytes()).await?;
            self.stdin.write_all(b"\n").await?;
            self.stdin.flush().await
        };
        if sent.await.is_err() {
            // The JVM is gone: report how (expect sees the closed stdout).
            return self.expect(command, prefix, Duration::from_secs(5)).await;
        }
        self.expect(command, prefix, within).await
    }

    /// QUIT, then wait up to 20 s (the harness bounds its own shutdown at
    /// 15 s); kill if it is still there.
    async fn stop(mut self) {
        let _ = self.stdin.write_all(b"QUIT\n").await;
        let _ = self.stdin.flush().await;
        if tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        }
    }
}

// ------------------------------------------------------------------ counting forwarder

/// A loopback TCP forwarder counting bytes each way; stops when dropped.
struct Forwarder {
    port: u16,
    /// bytes from the side that connected to the forwarder
    up: Arc<AtomicU64>,
    /// bytes towards the side that connected
    down: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Forwarder {
    async fn start(target: u16) -> Result<Forwarder, JxseError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|source| JxseError::Io {
                what: "binding the wire-counting forwarder".into(),
                source,
            })?;
        let port = listener
            .local_addr()
            .map_err(|source| JxseError::Io {
                what: "binding the wire-counting forwarder".into(),
                source,
            })?
            .port();
        let up = Arc::new(AtomicU64::new(0));
        let down = Arc::new(AtomicU64::new(0));
        let (u, d) = (up.clone(), down.clone());
        let task = tokio::spawn(async move {
            // Dropping the set (when this task is aborted) aborts every connection.
            let mut conns = JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let (ir, iw) = inbound.into_split();
                let (or, ow) = outbound.into_split();
                conns.spawn(pump(ir, ow, u.clone()));
                conns.spawn(pump(or, iw, d.clone()));
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Forwarder {
            port,
            up,
            down,
            task,
        })
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = to.shutdown().await;
}

// ------------------------------------------------------------------ the bench

/// Two harness JVMs (client and responder) set up for benchmarking. Every
/// JVM is killed when this is dropped; [`JxseBench::stop`] ends them
/// cleanly.
pub struct JxseBench {
    client: Jvm,
    responder: Jvm,
    /// client -> responder and responder -> client forwarders
    wire: Option<(Forwarder, Forwarder)>,
    opts: JxseOptions,
}

fn field<T: std::str::FromStr>(line: &str, f: Option<&str>, what: &str) -> Result<T, JxseError> {
    f.and_then(|s| s.parse().ok())
        .ok_or_else(|| JxseError::Parse {
            line: line.chars().take(300).collect(),
            reason: format!("missing or bad {what}"),
        })
}

/// Per-run RTTs (µs) from `a,b,c;d,e,...`.
fn parse_runs(line: &str, text: &str) -> Result<Vec<Vec<f64>>, JxseError> {
    text.split(';')
        .map(|run| {
            run.split(',')
                .map(|v| match v.parse::<f64>() {
                    Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                    _ => Err(JxseError::Parse {
                        line: line.chars().take(300).collect(),
                        reason: format!("bad sample {v:?}"),
                    }),
                })
                .collect()
        })
        .collect()
}

impl JxseBench {
    /// Starts both JVMs (building the harness first if allowed and
    /// needed), connects them (through the counting forwarders if
    /// `count_wire`) and sets up the responder and the client.
    pub async fn start(opts: &JxseOptions) -> Result<JxseBench, JxseError> {
        opts.check()?;
        let dir = match &opts.harness_dir {
            Some(d) => d.clone(),
            None => locate_harness()?,
        };
        if !dir.join("build.sh").is_file() {
            return Err(JxseError::HarnessNotFound {
                searched: vec![dir],
            });
        }
        if !harness_built(&dir) {
            if !opts.build {
                return Err(JxseError::BuildFailed {
                    dir: dir.clone(),
                    tail: "the harness is not built (run interop/jxse/build.sh)".into(),
                });
            }
            let d = dir.clone();
            tokio::task::spawn_blocking(move || ensure_built(&d))
                .await
                .map_err(|e| JxseError::Io {
                    what: "building the harness".into(),
                    source: std::io::Error::other(e.to_string()),
                })??;
        }
        let mut responder = Jvm::spawn("responder", &dir, &opts.java)?;
        let mut client = Jvm::spawn("client", &dir, &opts.java)?;
        let startup = Duration::from_millis(opts.startup_timeout_ms);
        let (r, c) = tokio::join!(
            responder.expect("startup", "READY", startup),
            client.expect("startup", "READY", startup)
        );
        let ready_peer = |l: String| -> Result<String, JxseError> {
            l.split_whitespace()
                .nth(1)
                .map(str::to_string)
                .ok_or(JxseError::Parse {
                    line: l,
                    reason: "READY without a peer ID".into(),
                })
        };
        responder.peer = ready_peer(r?)?;
        client.peer = ready_peer(c?)?;
        responder.pin(opts.pin.responder_core());
        client.pin(opts.pin.client_core());
        let wire = if opts.count_wire {
            Some((
                Forwarder::start(responder.port).await?,
                Forwarder::start(client.port).await?,
            ))
        } else {
            None
        };
        let (to_resp, to_client) = match &wire {
            Some((a, b)) => (a.port, b.port),
            None => (responder.port, client.port),
        };
        let t = Duration::from_secs(30);
        let cmd = format!("ROUTE {} tcp://127.0.0.1:{to_resp}", responder.peer);
        client.call(&cmd, "ROUTED", t).await?;
        let cmd = format!("ROUTE {} tcp://127.0.0.1:{to_client}", client.peer);
        responder.call(&cmd, "ROUTED", t).await?;
        let cmd = format!("BENCH_SERVE {} tcp://127.0.0.1:{to_client}", client.peer);
        let serving = responder.call(&cmd, "BENCH_SERVING", t).await?;
        let pipes: Vec<&str> = serving.split_whitespace().skip(1).collect();
        if pipes.len() != 4 {
            return Err(JxseError::Parse {
                line: serving,
                reason: "expected 4 pipe IDs".into(),
            });
        }
        let cmd = format!(
            "BENCH_CLIENT {} tcp://127.0.0.1:{to_resp} {}",
            responder.peer,
            pipes.join(" ")
        );
        client.call(&cmd, "BENCH_CLIENT_READY", t).await?;
        // Again, for threads started while setting up.
        responder.pin(opts.pin.responder_core());
        client.pin(opts.pin.client_core());
        Ok(JxseBench {
            client,
            responder,
            wire,
            opts: opts.clone(),
        })
    }

    /// PIDs of the two JVMs (client, responder) while they run.
    pub fn pids(&self) -> Vec<u32> {
        [self.client.pid(), self.responder.pid()]
            .into_iter()
            .flatten()
            .collect()
    }

    fn client_bytes(&self) -> Option<u64> {
        self.wire.as_ref().map(|(to_resp, to_client)| {
            to_resp.up.load(Ordering::Relaxed) + to_client.down.load(Ordering::Relaxed)
        })
    }

    /// Runs the ping-pong of one layer and size; ratios are computed
    /// against `tcp` (a tcp row of the same size from the same run), or 0
    /// without one.
    pub async fn pingpong(
        &mut self,
        layer: Layer,
        size: usize,
        tcp: Option<&PingPongRow>,
    ) -> Result<PingPongRow, JxseError> {
        if !JXSE_LAYERS.contains(&layer) {
            return Err(JxseError::UnsupportedLayer(layer.name().into()));
        }
        let o = &self.opts;
        let cmd = format!(
            "BENCH_PINGPONG {} {size} {} {} {} {}",
            layer.name(),
            o.warmup,
            o.runs,
            o.pairs,
            o.budget_ms
        );
        // Every pair may wait 30 s for its ack in Java: allow that plus the budget.
        let within = Duration::from_millis(o.budget_ms * 2 + 90_000);
        let line = self.client.call(&cmd, "BENCH_PINGPONG", within).await?;
        let mut f = line.split_whitespace();
        f.next();
        let (l, s): (String, usize) = (
            field(&line, f.next(), "layer")?,
            field(&line, f.next(), "size")?,
        );
        let _warm: usize = field(&line, f.next(), "warm-up count")?;
        let runs = parse_runs(&line, f.next().unwrap_or(""))?;
        if l != layer.name() || s != size {
            return Err(JxseError::Parse {
                line,
                reason: format!("answer for {l} {s}, asked for {} {size}", layer.name()),
            });
        }
        let mut wire = 0;
        if self.wire.is_some() && o.wire_pairs > 0 {
            let before = self.client_bytes().unwrap_or(0);
            let n = o.wire_pairs;
            let cmd = format!("BENCH_PAIRS {} {size} {n}", layer.name());
            let within = Duration::from_millis(n as u64 * 30_000 + 30_000);
            self.client.call(&cmd, "BENCH_PAIRS_DONE", within).await?;
            // Let the last ack's bytes pass the forwarder.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let after = self.client_bytes().unwrap_or(0);
            wire = (after.saturating_sub(before) + n as u64 / 2) / n as u64;
        }
        Ok(row_of(layer, size, &runs, wire, tcp, self.opts.pin))
    }

    /// Runs the (smooth) throughput of one layer and size.
    pub async fn throughput(
        &mut self,
        layer: Layer,
        size: usize,
    ) -> Result<ThroughputRow, JxseError> {
        if !JXSE_LAYERS.contains(&layer) {
            return Err(JxseError::UnsupportedLayer(layer.name().into()));
        }
        let o = &self.opts;
        let cmd = format!(
            "BENCH_THROUGHPUT {} {size} {} {}",
            layer.name(),
            o.throughput_duration_ms,
            o.throughput_max_count
        );
        let within = Duration::from_millis(o.throughput_duration_ms + 120_000);
        let line = self.client.call(&cmd, "BENCH_THROUGHPUT", within).await?;
        let mut f = line.split_whitespace();
        f.next();
        let _l: String = field(&line, f.next(), "layer")?;
        let _s: usize = field(&line, f.next(), "size")?;
        let sent: u64 = field(&line, f.next(), "sent")?;
        let got: u64 = field(&line, f.next(), "received")?;
        let ns: u64 = field(&line, f.next(), "elapsed")?;
        let delivered = got.min(sent);
        let secs = ns as f64 / 1e9;
        let rate = if secs > 0.0 {
            delivered as f64 / secs
        } else {
            0.0
        };
        Ok(ThroughputRow {
            scenario: "throughput",
            implementation: "jxse",
            layer: layer.name(),
            size,
            pattern: Pattern::Smooth,
            msgs_per_s: rate,
            bandwidth_mb_s: rate * size as f64 / 1e6,
            loss_pct: loss_pct(sent, delivered),
        })
    }

    /// Ends both JVMs (QUIT, killed if they linger) and the forwarders.
    pub async fn stop(self) {
        let JxseBench {
            client,
            responder,
            wire,
            ..
        } = self;
        tokio::join!(client.stop(), responder.stop());
        drop(wire);
    }
}

/// The row of one layer and size from its per-run RTTs (µs).
fn row_of(
    layer: Layer,
    size: usize,
    runs: &[Vec<f64>],
    wire: u64,
    tcp: Option<&PingPongRow>,
    pin: Pin,
) -> PingPongRow {
    let mut all: Vec<f64> = runs.iter().flatten().copied().collect();
    all.sort_by(f64::total_cmp);
    let median = percentile(&all, 0.5);
    let run_medians: Vec<f64> = runs
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| {
            let mut r = r.clone();
            r.sort_by(f64::total_cmp);
            percentile(&r, 0.5)
        })
        .collect();
    let (lo, hi) = run_medians
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let spread = if median > 0.0 && hi >= lo {
        (hi - lo) / median
    } else {
        0.0
    };
    let bw = if median > 0.0 {
        size as f64 / median
    } else {
        0.0
    };
    let (rtt_ratio, bw_ratio) = match tcp {
        Some(t) if t.rtt_us_median > 0.0 && t.bandwidth_mb_s > 0.0 => {
            (median / t.rtt_us_median, bw / t.bandwidth_mb_s)
        }
        _ => (0.0, 0.0),
    };
    PingPongRow {
        scenario: "pingpong",
        implementation: "jxse",
        layer: layer.name(),
        size,
        receivers: None,
        rtt_us_median: median,
        rtt_us_p99: percentile(&all, 0.99),
        bandwidth_mb_s: bw,
        wire_bytes: wire,
        rtt_ratio_vs_tcp: rtt_ratio,
        bandwidth_ratio_vs_tcp: bw_ratio,
        run_spread: spread,
        pin,
        samples: all.len(),
    }
}

fn tcp_row_for(tcp_rows: &[PingPongRow], size: usize) -> Option<&PingPongRow> {
    tcp_rows
        .iter()
        .find(|r| r.layer == "tcp" && r.size == size && r.receivers.is_none())
}

/// Runs the JXSE ping-pong for every layer and size of `opts` (sizes in
/// the outer loop); ratios are against the `tcp` row of the same size in
/// `tcp_rows` (measured by the caller in the same run). Returns what was
/// measured, also when something failed part-way.
pub async fn run_pingpong(
    opts: &JxseOptions,
    tcp_rows: &[PingPongRow],
    progress: &mut dyn FnMut(&str),
) -> JxseRun<PingPongRow> {
    let mut run = JxseRun {
        rows: Vec::new(),
        error: None,
        jvm_pids: Vec::new(),
    };
    progress("jxse: starting two JXSE 2.7 peers");
    let mut bench = match JxseBench::start(opts).await {
        Ok(b) => b,
        Err(e) => {
            run.error = Some(e);
            return run;
        }
    };
    run.jvm_pids = bench.pids();
    'outer: for &size in &opts.sizes {
        for &layer in &opts.layers {
            progress(&format!("jxse pingpong: {} {size} B", layer.name()));
            match bench
                .pingpong(layer, size, tcp_row_for(tcp_rows, size))
                .await
            {
                Ok(r) => run.rows.push(r),
                Err(e) => {
                    run.error = Some(e);
                    break 'outer;
                }
            }
        }
    }
    bench.stop().await;
    run
}

/// Runs the JXSE throughput (smooth) for every layer and size of `opts`.
/// Returns what was measured, also when something failed part-way.
pub async fn run_throughput(
    opts: &JxseOptions,
    progress: &mut dyn FnMut(&str),
) -> JxseRun<ThroughputRow> {
    let mut run = JxseRun {
        rows: Vec::new(),
        error: None,
        jvm_pids: Vec::new(),
    };
    progress("jxse: starting two JXSE 2.7 peers");
    let mut bench = match JxseBench::start(opts).await {
        Ok(b) => b,
        Err(e) => {
            run.error = Some(e);
            return run;
        }
    };
    run.jvm_pids = bench.pids();
    'outer: for &size in &opts.sizes {
        for &layer in &opts.layers {
            progress(&format!("jxse throughput: {} {size} B", layer.name()));
            match bench.throughput(layer, size).await {
                Ok(r) => run.rows.push(r),
                Err(e) => {
                    run.error = Some(e);
                    break 'outer;
                }
            }
        }
    }
    bench.stop().await;
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_from_runs() {
        let runs = vec![vec![10.0, 20.0, 30.0], vec![40.0, 50.0]];
        let tcp = row_of(Layer::Endpoint, 100, &[vec![1.0]], 0, None, Pin::None);
        let r = row_of(Layer::Socket, 100, &runs, 123, Some(&tcp), Pin::Split);
        assert_eq!(r.pin, Pin::Split);
        assert_eq!(r.implementation, "jxse");
        assert_eq!(r.layer, "socket");
        assert_eq!(r.samples, 5);
        assert_eq!(r.rtt_us_median, 30.0);
        assert_eq!(r.rtt_us_p99, 50.0);
        assert_eq!(r.bandwidth_mb_s, 100.0 / 30.0);
        assert_eq!(r.rtt_ratio_vs_tcp, 30.0);
        assert_eq!(r.wire_bytes, 123);
        // run medians 20 and 45 (index round(0.5) = 1 of [40, 50] is 50)
        assert!(r.run_spread > 0.0);
        let none = row_of(Layer::Socket, 100, &runs, 0, None, Pin::None);
        assert_eq!(none.rtt_ratio_vs_tcp, 0.0);
    }

    #[test]
    fn bad_samples_are_parse_errors() {
        assert_eq!(
            parse_runs("l", "1.5,2;3").unwrap(),
            vec![vec![1.5, 2.0], vec![3.0]]
        );
        assert!(matches!(
            parse_runs("l", "1,x"),
            Err(JxseError::Parse { .. })
        ));
        assert!(matches!(parse_runs("l", ""), Err(JxseError::Parse { .. })));
        assert!(matches!(
            parse_runs("l", "NaN"),
            Err(JxseError::Parse { .. })
        ));
    }

    #[test]
    fn options_are_checked() {
        let o = JxseOptions {
            layers: vec![Layer::Propagate],
            ..JxseOptions::default()
        };
        assert!(matches!(o.check(), Err(JxseError::UnsupportedLayer(_))));
        let o = JxseOptions {
            sizes: vec![MAX_SIZE + 1],
            ..JxseOptions::default()
        };
        assert!(matches!(o.check(), Err(JxseError::BadOption(_))));
        assert!(JxseOptions::default().check().is_ok());
    }
}
