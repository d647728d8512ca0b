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
//! Method: the same harness as every other implementation
//! ([`crate::pingpong`]): the JXSE layers are lanes beside a `tcp` lane
//! started in the same run; each size first warms every lane with the same
//! number of pairs as Juxta gets ([`crate::pingpong::warmup_pairs`]), then
//! the timed runs (5 x 100 pairs by default, always completed) alternate
//! tcp, JXSE layer, tcp, next layer, ... Before the first timed size the
//! JVMs are warmed on every size (JIT compilation of the large-message
//! paths happens before anything is timed). Each timed run is one harness
//! command: the JVM times its pairs itself. Both JVMs connect directly
//! (nothing in the timed path); bytes on the wire are the kernel's counters
//! of the client JVM's sockets ([`crate::socket_bytes`]), the same counter
//! as for Juxta and tcp. JXSE runs as shipped (CBJX signature on every
//! message) unless [`JxseOptions::cbjx`] is off (its
//! `WireFormatMessageFactory.CBJX_DISABLE` property), reported as
//! `impl = "jxse-nocbjx"`.
//!
//! Besides the endpoint, the unicast pipe (unreliable) and the socket
//! (stream mode, reliable over jxtarel), the ping-pong measures the two
//! other JXTA routines de Souza et al. measured: `socket-unreliable`
//! (`new JxtaSocket(.., stream = false)`: each write one `JXTASOC:data`
//! message, nothing retransmitted) and `bidi-pipe-reliable` (a
//! `JxtaBiDiPipe` with reliability on). [`reliable`] says which layer is
//! which. A message lost on an unreliable layer leaves a ping without its
//! ack: the client JVM gives up after its reply timeout (30 s) and the run
//! ends with a [`JxseError::Harness`] naming the layer and size.
//!
//! ```no_run
//! # async fn demo() -> Result<(), juxta_bench::BenchError> {
//! use juxta_bench::jxse::{run_pingpong, JxseOptions};
//! use juxta_bench::layers::Host;
//! let opts = JxseOptions { sizes: vec![1, 1 << 20], ..JxseOptions::default() };
//! let run = run_pingpong(&Host::Thread, &opts, &mut |line: &str| eprintln!("{line}")).await;
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::layers::{Host, Layer, Ping};
use crate::pingpong::PingPongRow;
use crate::socket_bytes::ClientSockets;
use crate::throughput::{Pattern, ThroughputRow};
use crate::util::{loss_pct, Pin};
use crate::BenchError;

/// The layers JXSE is measured on by default (ping-pong and throughput).
pub const JXSE_LAYERS: [Layer; 3] = [Layer::Endpoint, Layer::UnicastPipe, Layer::Socket];

/// Every layer the JXSE ping-pong measures: [`JXSE_LAYERS`] and the two
/// of [`Layer::JXSE_ONLY`], JXSE's unreliable socket (`socket-unreliable`)
/// and its reliable bidi pipe (`bidi-pipe-reliable`), de Souza's other
/// JXTA routines. The throughput runs [`JXSE_LAYERS`] only.
pub const JXSE_PINGPONG_LAYERS: [Layer; 5] = [
    Layer::Endpoint,
    Layer::UnicastPipe,
    Layer::BidiPipeReliable,
    Layer::Socket,
    Layer::SocketUnreliable,
];

/// Whether JXSE delivers on `layer` reliably (retransmits what is lost):
/// its socket (stream mode) and reliable bidi pipe run jxtarel; the
/// endpoint, the unicast pipe and the unreliable socket do not. `None`
/// for a layer JXSE is not measured on.
pub fn reliable(layer: Layer) -> Option<bool> {
    match layer {
        Layer::Socket | Layer::BidiPipeReliable => Some(true),
        Layer::Endpoint | Layer::UnicastPipe | Layer::SocketUnreliable => Some(false),
        _ => None,
    }
}

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
    #[error("layer {0} is not measured for JXSE (choose from: endpoint, unicast-pipe, socket; the ping-pong also bidi-pipe-reliable, socket-unreliable)")]
    UnsupportedLayer(String),
    /// The tcp lane measured beside JXSE failed.
    #[error("the tcp lane beside JXSE failed: {0}")]
    TcpLane(#[source] Box<BenchError>),
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
    /// Layers (of [`JXSE_PINGPONG_LAYERS`]; the throughput takes those of
    /// [`JXSE_LAYERS`]).
    pub layers: Vec<Layer>,
    /// Payload sizes in bytes (at most [`MAX_SIZE`]).
    pub sizes: Vec<usize>,
    /// Warm-up pairs per layer and size, the same rule as Juxta's
    /// ([`crate::pingpong::warmup_pairs`]: capped at 256 MiB of payload).
    pub warmup: usize,
    /// Timed runs (always completed).
    pub runs: usize,
    /// Pairs per timed run (always completed).
    pub pairs: usize,
    /// CBJX signatures on (JXSE as shipped) or off.
    pub cbjx: bool,
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
            warmup: 1000,
            runs: 5,
            pairs: 100,
            cbjx: true,
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
            if !JXSE_PINGPONG_LAYERS.contains(l) {
                return Err(JxseError::UnsupportedLayer(l.name().into()));
            }
        }
        if let Some(s) = self.sizes.iter().find(|&&s| s > MAX_SIZE) {
            return Err(JxseError::BadOption(format!(
                "size {s} is above the harness limit of {MAX_SIZE} bytes"
            )));
        }
        if self.runs == 0 || self.pairs == 0 {
            return Err(JxseError::BadOption(
                "runs and pairs must be at least 1".into(),
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

/// Whether the harness in `dir` is built (classes and runtime jars) and
/// not older than its sources (`src/`, `pom.xml`): a harness edited since
/// its last build counts as not built, so it is rebuilt.
pub fn harness_built(dir: &Path) -> bool {
    let main = dir.join("target/classes/org/juxta/harness/Bench.class");
    main.is_file()
        && dir
            .join("target/classes/net/jxta/impl/peergroup/CompatibilityUtils.class")
            .is_file()
        && dir.join("target/lib/jxse-2.7.jar").is_file()
        && !harness_stale(dir, &main)
}

/// Whether a file under `dir/src` or `dir/pom.xml` is newer than `built`.
pub fn harness_stale(dir: &Path, built: &Path) -> bool {
    fn newest(p: &Path, depth: usize) -> Option<std::time::SystemTime> {
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
    fn spawn(role: &'static str, dir: &Path, java: &Path, cbjx: bool) -> Result<Jvm, JxseError> {
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
            .arg(format!(
                "-Dnet.jxta.endpoint.WireFormatMessageFactory.CBJX_DISABLE={}",
                !cbjx
            ))
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
        if let Some(pid) = self.pid() {
            crate::util::pin_process(pid, core);
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

// ------------------------------------------------------------------ the bench

/// Two harness JVMs (client and responder) set up for benchmarking. Every
/// JVM is killed when this is dropped; [`JxseBench::stop`] ends them
/// cleanly.
pub struct JxseBench {
    client: Jvm,
    responder: Jvm,
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
    /// needed), connects them directly and sets up the responder and the
    /// client.
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
        let mut responder = Jvm::spawn("responder", &dir, &opts.java, opts.cbjx)?;
        let mut client = Jvm::spawn("client", &dir, &opts.java, opts.cbjx)?;
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
        let (to_resp, to_client) = (responder.port, client.port);
        let t = Duration::from_secs(30);
        let cmd = format!("ROUTE {} tcp://127.0.0.1:{to_resp}", responder.peer);
        client.call(&cmd, "ROUTED", t).await?;
        let cmd = format!("ROUTE {} tcp://127.0.0.1:{to_client}", client.peer);
        responder.call(&cmd, "ROUTED", t).await?;
        let cmd = format!("BENCH_SERVE {} tcp://127.0.0.1:{to_client}", client.peer);
        let serving = responder.call(&cmd, "BENCH_SERVING", t).await?;
        let pipes: Vec<&str> = serving.split_whitespace().skip(1).collect();
        if pipes.len() != 5 {
            return Err(JxseError::Parse {
                line: serving,
                reason: "expected 5 pipe IDs".into(),
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

    /// The client JVM's side of the connections between the two JVMs.
    pub fn sockets(&self) -> ClientSockets {
        ClientSockets {
            server_ports: vec![self.responder.port],
            client_ports: vec![self.client.port],
            ..ClientSockets::default()
        }
    }

    /// `n` untimed pairs of `layer` at `size` (warm-up).
    pub async fn warm(&mut self, layer: Layer, size: usize, n: usize) -> Result<(), JxseError> {
        if !JXSE_PINGPONG_LAYERS.contains(&layer) {
            return Err(JxseError::UnsupportedLayer(layer.name().into()));
        }
        let cmd = format!("BENCH_PAIRS {} {size} {n}", layer.name());
        // Every pair may wait 30 s for its ack in Java.
        let within = Duration::from_secs(30).saturating_mul(n as u32 + 1);
        self.client.call(&cmd, "BENCH_PAIRS_DONE", within).await?;
        Ok(())
    }

    /// One timed run of `pairs` pairs of `layer` at `size`, timed by the
    /// client JVM; the RTT of each pair (µs).
    pub async fn timed_run(
        &mut self,
        layer: Layer,
        size: usize,
        pairs: usize,
    ) -> Result<Vec<f64>, JxseError> {
        if !JXSE_PINGPONG_LAYERS.contains(&layer) {
            return Err(JxseError::UnsupportedLayer(layer.name().into()));
        }
        // No warm-up here, one run, every pair completed (budget 0).
        let cmd = format!("BENCH_PINGPONG {} {size} 0 1 {pairs} 0", layer.name());
        let within = Duration::from_secs(30).saturating_mul(pairs as u32 + 1);
        let line = self.client.call(&cmd, "BENCH_PINGPONG", within).await?;
        let mut f = line.split_whitespace();
        f.next();
        let (l, s): (String, usize) = (
            field(&line, f.next(), "layer")?,
            field(&line, f.next(), "size")?,
        );
        let _warm: usize = field(&line, f.next(), "warm-up count")?;
        if l != layer.name() || s != size {
            return Err(JxseError::Parse {
                line,
                reason: format!("answer for {l} {s}, asked for {} {size}", layer.name()),
            });
        }
        let mut runs = parse_runs(&line, f.next().unwrap_or(""))?;
        let run = runs.pop().unwrap_or_default();
        if run.len() != pairs || !runs.is_empty() {
            return Err(JxseError::Parse {
                line: line.chars().take(300).collect(),
                reason: format!("expected one run of {pairs} samples"),
            });
        }
        Ok(run)
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
            offered_msgs_per_s: None,
            receivers: None,
            msgs_per_s: rate,
            bandwidth_mb_s: rate * size as f64 / 1e6,
            loss_pct: loss_pct(sent, delivered),
        })
    }

    /// Ends both JVMs (QUIT, killed if they linger) and the forwarders.
    pub async fn stop(self) {
        let JxseBench {
            client, responder, ..
        } = self;
        tokio::join!(client.stop(), responder.stop());
    }
}

/// One JXSE layer as a lane of the common ping-pong harness.
pub(crate) struct JxseLane {
    bench: Arc<tokio::sync::Mutex<JxseBench>>,
    layer: Layer,
    sockets: ClientSockets,
}

impl JxseLane {
    pub(crate) fn sockets(&self) -> ClientSockets {
        self.sockets.clone()
    }

    pub(crate) async fn warm(&self, size: usize, n: usize) -> Result<(), JxseError> {
        self.bench.lock().await.warm(self.layer, size, n).await
    }

    pub(crate) async fn timed_run(&self, size: usize, pairs: usize) -> Result<Vec<f64>, JxseError> {
        self.bench
            .lock()
            .await
            .timed_run(self.layer, size, pairs)
            .await
    }
}

/// The `impl` of JXSE rows: `jxse` as shipped, `jxse-nocbjx` without CBJX.
pub fn impl_name(cbjx: bool) -> &'static str {
    if cbjx {
        "jxse"
    } else {
        "jxse-nocbjx"
    }
}

/// Runs the JXSE ping-pong for every layer and size of `opts` with the
/// common harness: a `tcp` lane (its responder started on `host`) and one
/// lane per JXSE layer, warmed and timed alike and interleaved (see the
/// module docs). Returns the tcp rows and the JXSE rows (ratios against
/// that tcp lane), also those measured before a failure.
pub async fn run_pingpong(
    host: &Host,
    opts: &JxseOptions,
    progress: &mut dyn FnMut(&str),
) -> JxseRun<PingPongRow> {
    let mut run = JxseRun {
        rows: Vec::new(),
        error: None,
        jvm_pids: Vec::new(),
    };
    progress("jxse: starting two JXSE 2.7 peers");
    let bench = match JxseBench::start(opts).await {
        Ok(b) => b,
        Err(e) => {
            run.error = Some(e);
            return run;
        }
    };
    run.jvm_pids = bench.pids();
    let sockets = bench.sockets();
    let bench = Arc::new(tokio::sync::Mutex::new(bench));
    if let Err(e) = pingpong_lanes(host, opts, &bench, sockets, &mut run.rows, progress).await {
        run.error = Some(match e {
            BenchError::Jxse(j) => j,
            other => JxseError::TcpLane(Box::new(other)),
        });
    }
    match Arc::try_unwrap(bench) {
        Ok(b) => b.into_inner().stop().await,
        Err(_) => {
            // Unreachable (the lanes are gone); the JVMs die with the last handle.
        }
    }
    run
}

async fn pingpong_lanes(
    host: &Host,
    opts: &JxseOptions,
    bench: &Arc<tokio::sync::Mutex<JxseBench>>,
    sockets: ClientSockets,
    rows: &mut Vec<PingPongRow>,
    progress: &mut dyn FnMut(&str),
) -> Result<(), BenchError> {
    use crate::pingpong::{connect_lanes, measure, rows_of, warmup_pairs, Driver, Lane, RunLabel};
    let net = crate::net::Net::default();
    let (tcp, responders) =
        connect_lanes(host, &[(Layer::Tcp, None)], 1024, opts.pin, &net, progress).await?;
    let mut lanes: Vec<Lane> = tcp;
    let mut shape = vec![(Layer::Tcp, None)];
    for &layer in &opts.layers {
        lanes.push(Lane {
            layer,
            receivers: None,
            client: Driver::Jxse(JxseLane {
                bench: bench.clone(),
                layer,
                sockets: sockets.clone(),
            }),
        });
        shape.push((layer, None));
    }
    let result = async {
        // The JIT sees every size before anything is timed.
        for &size in &opts.sizes {
            for &layer in &opts.layers {
                progress(&format!("jxse: JVM warm-up {} {size} B", layer.name()));
                let n = warmup_pairs(opts.warmup, size);
                bench.lock().await.warm(layer, size, n).await?;
            }
        }
        for &size in &opts.sizes {
            let ping = Ping::single(size);
            let samples = measure(
                &mut lanes,
                &ping,
                opts.warmup,
                opts.runs,
                opts.pairs,
                &format!("jxse size {size}"),
                progress,
            )
            .await?;
            let label = RunLabel {
                implementation: impl_name(opts.cbjx),
                warmup: warmup_pairs(opts.warmup, size),
                cbjx: Some(opts.cbjx),
            };
            rows.extend(rows_of(&shape, &samples, size, opts.pin, &label));
        }
        Ok::<(), BenchError>(())
    }
    .await;
    drop(lanes);
    for r in responders {
        r.stop().await;
    }
    result
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
    fn configurations_have_their_own_impl() {
        assert_eq!(impl_name(true), "jxse");
        assert_eq!(impl_name(false), "jxse-nocbjx");
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
        // The JXSE-only layers parse by name and the ping-pong takes them.
        for l in Layer::JXSE_ONLY {
            assert_eq!(Layer::parse(l.name()).unwrap(), l);
            assert!(!Layer::ALL.contains(&l));
        }
        let o = JxseOptions {
            layers: JXSE_PINGPONG_LAYERS.to_vec(),
            ..JxseOptions::default()
        };
        assert!(o.check().is_ok());
    }

    #[test]
    fn reliability_of_each_layer() {
        assert_eq!(reliable(Layer::Socket), Some(true));
        assert_eq!(reliable(Layer::BidiPipeReliable), Some(true));
        assert_eq!(reliable(Layer::UnicastPipe), Some(false));
        assert_eq!(reliable(Layer::SocketUnreliable), Some(false));
        assert_eq!(reliable(Layer::Endpoint), Some(false));
        assert_eq!(reliable(Layer::Propagate), None);
    }
}
