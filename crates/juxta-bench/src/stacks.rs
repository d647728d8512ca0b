//! The stacks people pick today, beside Juxta in the same harness.
//!
//! Why: a user choosing a messaging or P2P stack compares Juxta with
//! ZeroMQ, MPI or libp2p, and those comparisons are only worth something
//! when they are measured like Juxta's layers: the same warm-up, the same
//! 5 x 100 pairs, interleaved with a `tcp` lane of the same run, the same
//! pinning, bytes counted by the kernel at the client's sockets
//! ([`crate::socket_bytes`]).
//!
//! Each stack is a small program of its own (a client and a responder
//! process) that speaks one line protocol on the client's stdin/stdout:
//! `PAIRS <size> <n>` (untimed pairs, answer `DONE`), `TIMED <size> <n>`
//! (pairs timed by the client itself with a monotonic clock, answer
//! `TIMED us,us,...`: the control channel is never inside a
//! measurement), `STREAM <size> <n> <ms>` (one-way messages back to back
//! until `n` were sent or `ms` passed, then an end mark the responder
//! answers with the count it received; answer `STREAMED <sent>
//! <received> <us>`, for the throughput scenario) and `QUIT`. The harness drives it as a lane
//! ([`crate::pingpong`]), exactly as it drives the JXSE JVMs.
//!
//! Stacks: `zmq` (libzmq REQ/REP over TCP, [`Stack::Zmq`]), `libp2p`
//! (rust-libp2p over TCP + noise + yamux, one stream opened once and kept
//! open, [`Stack::Libp2p`]) and `mpi` (Open MPI, two ranks under `mpirun`,
//! over its TCP transport restricted to loopback and over shared memory:
//! [`Stack::MpiTcp`], [`Stack::MpiSm`]). Each program's source is compiled
//! into the binary and built at run time (`cc` against libzmq, `mpicc`,
//! `cargo build --release --locked` for the libp2p crate with its committed
//! Cargo.lock, into a target directory kept between runs: the first build
//! takes minutes); a missing compiler or library is a typed error naming
//! what to install (Debian: `libzmq3-dev`, `openmpi-bin libopenmpi-dev`).
//! MPI's ranks keep Open MPI's default binding (see [`StackLane::start`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), juxta_bench::stacks::StackError> {
//! use juxta_bench::stacks::{Stack, StackLane};
//! let mut lane = StackLane::start(Stack::Zmq, None, None).await?;
//! lane.warm(1, 100).await?;
//! let rtts_us = lane.timed_run(1, 100).await?;
//! println!("median of {} pairs", rtts_us.len());
//! lane.stop().await;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::socket_bytes::ClientSockets;

/// C source of the ZeroMQ client and responder.
const ZMQ_SOURCE: &str = include_str!("../peers/zmq_pingpong.c");
/// C source of the two MPI ranks.
const MPI_SOURCE: &str = include_str!("../peers/mpi_pingpong.c");
/// The rust-libp2p program: its manifest, lock file and source.
const LIBP2P_FILES: [(&str, &str); 3] = [
    (
        "Cargo.toml",
        include_str!("../peers/libp2p_pingpong/Cargo.toml"),
    ),
    (
        "Cargo.lock",
        include_str!("../peers/libp2p_pingpong/Cargo.lock"),
    ),
    (
        "src/main.rs",
        include_str!("../peers/libp2p_pingpong/src/main.rs"),
    ),
];

/// How long a program may take to build or to say `READY`.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Largest payload a stack is asked to carry.
pub const MAX_SIZE: usize = 64 << 20;

/// A stack measured beside Juxta.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stack {
    /// libzmq, REQ/REP sockets over TCP.
    Zmq,
    /// rust-libp2p 0.57, TCP + noise + yamux, one stream kept open
    /// (libp2p-stream), each message a 4-byte length and the payload.
    Libp2p,
    /// The same program over QUIC (v1, TLS 1.3 in QUIC's own packets):
    /// its client and responder run in the two namespaces of a
    /// [`crate::net::VethPair`] (needs root), where the kernel counts its
    /// UDP bytes at the client's interface.
    Libp2pQuic,
    /// Open MPI, two ranks, `MPI_Send`/`MPI_Recv` over its TCP transport
    /// (`btl tcp,self`, loopback only).
    MpiTcp,
    /// Open MPI, two ranks, over shared memory (`btl vader,self`).
    MpiSm,
}

impl Stack {
    /// Every stack, in report order.
    pub const ALL: [Stack; 5] = [
        Stack::Zmq,
        Stack::Libp2p,
        Stack::Libp2pQuic,
        Stack::MpiTcp,
        Stack::MpiSm,
    ];

    /// The `impl` of its rows.
    pub fn name(self) -> &'static str {
        match self {
            Stack::Zmq => "zmq",
            Stack::Libp2p | Stack::Libp2pQuic => "libp2p",
            Stack::MpiTcp | Stack::MpiSm => "mpi",
        }
    }

    /// The `layer` of its rows: its configuration.
    pub fn configuration(self) -> &'static str {
        match self {
            Stack::Zmq => "tcp-req-rep",
            Stack::Libp2p => "tcp-noise-yamux",
            Stack::Libp2pQuic => "quic",
            Stack::MpiTcp => "tcp",
            Stack::MpiSm => "sm",
        }
    }

    /// The `layer` of its throughput rows: ZeroMQ streams over PUSH/PULL
    /// (REQ/REP cannot send twice without a reply); the others over the
    /// same connection as their ping-pong.
    pub fn stream_configuration(self) -> &'static str {
        match self {
            Stack::Zmq => "tcp-push-pull",
            other => other.configuration(),
        }
    }

    /// The stacks an `--impl` name selects.
    pub fn parse(s: &str) -> Vec<Stack> {
        Stack::ALL.into_iter().filter(|k| k.name() == s).collect()
    }

    fn source(self) -> (&'static str, &'static str) {
        match self {
            Stack::Zmq => ("zmq_pingpong", ZMQ_SOURCE),
            Stack::Libp2p | Stack::Libp2pQuic => ("libp2p_pingpong", LIBP2P_FILES[2].1),
            Stack::MpiTcp | Stack::MpiSm => ("mpi_pingpong", MPI_SOURCE),
        }
    }

    fn is_libp2p(self) -> bool {
        matches!(self, Stack::Libp2p | Stack::Libp2pQuic)
    }

    fn is_mpi(self) -> bool {
        matches!(self, Stack::MpiTcp | Stack::MpiSm)
    }
}

/// Errors running a stack.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The C compiler or pkg-config is missing.
    #[error("{tool} not found: building the {stack} bench program needs it (Debian: apt-get install {package})")]
    ToolMissing {
        /// the stack
        stack: &'static str,
        /// the missing tool
        tool: &'static str,
        /// what to install
        package: &'static str,
    },
    /// The stack's library is not installed.
    #[error("{library} not found by pkg-config: install it to measure {stack} (Debian: apt-get install {package})")]
    LibraryMissing {
        /// the stack
        stack: &'static str,
        /// its pkg-config name
        library: &'static str,
        /// what to install
        package: &'static str,
    },
    /// Building the libp2p program with cargo failed (it fetches its
    /// crates from crates.io the first time).
    #[error("building the {stack} bench program with cargo failed (it needs crates.io the first time): {output}")]
    CargoFailed {
        /// the stack
        stack: &'static str,
        /// cargo's output (its end)
        output: String,
    },
    /// Compiling the program failed.
    #[error("building the {stack} bench program failed: {output}")]
    BuildFailed {
        /// the stack
        stack: &'static str,
        /// the compiler's output
        output: String,
    },
    /// A process could not be started, written or read.
    #[error("{stack} {role}: {what}: {source}")]
    Io {
        /// the stack
        stack: &'static str,
        /// `client` or `responder`
        role: &'static str,
        /// what was done
        what: &'static str,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// The program answered something else than the protocol says.
    #[error("{stack} {role} answered {line:?} to {command:?}")]
    Protocol {
        /// the stack
        stack: &'static str,
        /// `client` or `responder`
        role: &'static str,
        /// the command (or `startup`)
        command: String,
        /// the answer (or `end of output`)
        line: String,
    },
    /// The program did not answer in time (it is killed).
    #[error("{stack} {role} did not answer {command:?} within {after:?}")]
    Timeout {
        /// the stack
        stack: &'static str,
        /// `client` or `responder`
        role: &'static str,
        /// the command (or `startup`)
        command: String,
        /// how long was waited
        after: Duration,
    },
    /// The namespaces a lane runs in could not be made (QUIC's counted
    /// link needs root and iproute2).
    #[error("{stack} {configuration}: {source}")]
    Namespace {
        /// the stack
        stack: &'static str,
        /// its configuration
        configuration: &'static str,
        /// why
        #[source]
        source: crate::net::NetError,
    },
    /// A size the stack cannot carry.
    #[error("{stack}: size {size} is above the limit of {MAX_SIZE} bytes")]
    TooLarge {
        /// the stack
        stack: &'static str,
        /// the size asked
        size: usize,
    },
}

/// Where the libp2p program is built: kept between runs (the first build
/// compiles rust-libp2p, minutes; later runs reuse it).
/// `JUXTA_BENCH_LIBP2P_DIR` overrides.
fn libp2p_dir() -> PathBuf {
    std::env::var_os("JUXTA_BENCH_LIBP2P_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("juxta-bench-libp2p"))
}

/// Builds the rust-libp2p program (cargo, `--locked`, offline once its
/// crates are fetched); returns its path.
fn build_libp2p() -> Result<PathBuf, StackError> {
    let name = "libp2p";
    let dir = libp2p_dir();
    let io = |what, source| StackError::Io {
        stack: name,
        role: "build",
        what,
        source,
    };
    let src = dir.join("src");
    std::fs::create_dir_all(&src).map_err(|e| io("creating the build directory", e))?;
    for (file, text) in LIBP2P_FILES {
        let path = dir.join(file);
        // Rewritten only when changed: cargo rebuilds on a newer mtime.
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
            std::fs::write(&path, text).map_err(|e| io("writing the sources", e))?;
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--manifest-path",
        ])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTFLAGS")
        .stdout(Stdio::null())
        .output()
        .map_err(|_| StackError::ToolMissing {
            stack: name,
            tool: "cargo",
            package: "cargo (rustup)",
        })?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let start = text.len().saturating_sub(2000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        return Err(StackError::CargoFailed {
            stack: name,
            output: text[start..].to_string(),
        });
    }
    Ok(dir.join("target/release/libp2p_pingpong"))
}

/// The port of a responder's endpoint: `tcp://127.0.0.1:PORT` (zmq) or a
/// multiaddr `/ip4/127.0.0.1/tcp/PORT/p2p/...` or `.../udp/PORT/quic-v1/...`
/// (libp2p).
fn endpoint_port(endpoint: &str) -> Option<u16> {
    if endpoint.starts_with('/') {
        let mut parts = endpoint.split('/');
        parts.find(|p| *p == "tcp" || *p == "udp")?;
        return parts.next()?.parse().ok();
    }
    endpoint.rsplit_once(':')?.1.parse().ok()
}

/// Builds `stack`'s program into `dir`; returns its path.
fn build(stack: Stack, dir: &Path) -> Result<PathBuf, StackError> {
    let name = stack.name();
    if stack.is_libp2p() {
        return build_libp2p();
    }
    let (bin, source) = stack.source();
    let src = dir.join(format!("{bin}.c"));
    let exe = dir.join(bin);
    std::fs::write(&src, source).map_err(|source| StackError::Io {
        stack: name,
        role: "build",
        what: "writing the source",
        source,
    })?;
    let mut cmd = if stack.is_mpi() {
        let mut c = std::process::Command::new("mpicc");
        c.arg("-O2").arg("-o").arg(&exe).arg(&src);
        c
    } else {
        let (library, package) = ("libzmq", "libzmq3-dev");
        let flags = match std::process::Command::new("pkg-config")
            .args(["--cflags", "--libs", library])
            .output()
        {
            Err(_) => {
                return Err(StackError::ToolMissing {
                    stack: name,
                    tool: "pkg-config",
                    package: "pkg-config",
                })
            }
            Ok(o) if !o.status.success() => {
                return Err(StackError::LibraryMissing {
                    stack: name,
                    library,
                    package,
                })
            }
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        };
        let mut c = std::process::Command::new("cc");
        c.arg("-O2")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .args(flags.split_whitespace());
        c
    };
    let out = cmd.output().map_err(|_| {
        if stack.is_mpi() {
            StackError::ToolMissing {
                stack: name,
                tool: "mpicc",
                package: "openmpi-bin libopenmpi-dev",
            }
        } else {
            StackError::ToolMissing {
                stack: name,
                tool: "cc",
                package: "gcc",
            }
        }
    })?;
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stderr).into_owned();
        output.truncate(2000);
        return Err(StackError::BuildFailed {
            stack: name,
            output,
        });
    }
    Ok(exe)
}

/// What one `STREAM` run measured ([`StackLane::stream`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamRun {
    /// Messages sent.
    pub sent: u64,
    /// Messages the responder counted.
    pub received: u64,
    /// From the first send until the responder's count was back.
    pub elapsed: Duration,
}

/// One stack's client and responder processes, driven as a bench lane.
/// Both processes are killed when this is dropped.
pub struct StackLane {
    stack: Stack,
    client: Child,
    /// Separate responder process (MPI's second rank is mpirun's).
    responder: Option<Child>,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    sockets: ClientSockets,
    _dir: tempfile::TempDir,
    /// QUIC's namespaces (deleted after the processes are killed: fields
    /// drop in order).
    _pair: Option<crate::net::VethPair>,
}

async fn next_line(
    stack: Stack,
    role: &'static str,
    lines: &mut Lines<BufReader<ChildStdout>>,
    command: &str,
    within: Duration,
) -> Result<String, StackError> {
    match tokio::time::timeout(within, lines.next_line()).await {
        Err(_) => Err(StackError::Timeout {
            stack: stack.name(),
            role,
            command: command.into(),
            after: within,
        }),
        Ok(Err(source)) => Err(StackError::Io {
            stack: stack.name(),
            role,
            what: "reading its output",
            source,
        }),
        Ok(Ok(None)) => Err(StackError::Protocol {
            stack: stack.name(),
            role,
            command: command.into(),
            line: "end of output".into(),
        }),
        Ok(Ok(Some(l))) => Ok(l),
    }
}

/// Environment that keeps Open MPI's session directory (its PMIx stores and
/// shared-memory segments, some 8 MB per run) inside `dir`, a directory the
/// harness deletes. mpirun removes the directory itself when it exits
/// normally, but not when it is killed (a failed or interrupted run), and
/// the default place is a shared `/tmp/ompi.*` that nothing else cleans.
/// Open MPI 4 reads the first variable, Open MPI 5 (PRRTE) the second.
pub(crate) fn mpi_session_env(dir: &Path) -> [(&'static str, &Path); 2] {
    [
        ("OMPI_MCA_orte_tmpdir_base", dir),
        ("PRTE_MCA_prte_tmpdir_base", dir),
    ]
}

fn spawn(
    stack: Stack,
    role: &'static str,
    exe: &Path,
    args: &[&str],
    netns: Option<&str>,
    env: &[(&str, &Path)],
) -> Result<(Child, ChildStdout), StackError> {
    // In a namespace: `ip netns exec NS EXE ARGS` (ip execs the program:
    // same PID, so pinning and killing reach it).
    let mut command = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let mut child = command
        .args(args)
        .envs(env.iter().copied())
        // mpirun refuses to run as root without these (tests run as root).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| StackError::Io {
            stack: stack.name(),
            role,
            what: "starting",
            source,
        })?;
    let out = child.stdout.take().ok_or_else(|| StackError::Protocol {
        stack: stack.name(),
        role,
        command: "startup".into(),
        line: "no stdout".into(),
    })?;
    Ok((child, out))
}

impl StackLane {
    /// Builds and starts `stack`'s responder (pinned to `responder_core`)
    /// and client (pinned to `client_core`) on loopback. MPI's two ranks
    /// keep Open MPI's default binding (one core each): its ranks
    /// busy-poll, and pinned to one core they take turns by scheduler
    /// slices (milliseconds per round trip), which measures the scheduler.
    pub async fn start(
        stack: Stack,
        client_core: Option<usize>,
        responder_core: Option<usize>,
    ) -> Result<StackLane, StackError> {
        let name = stack.name();
        let dir = tempfile::Builder::new()
            .prefix("juxta-bench-stack-")
            .tempdir()
            .map_err(|source| StackError::Io {
                stack: name,
                role: "build",
                what: "creating a build directory",
                source,
            })?;
        let d = dir.path().to_path_buf();
        let exe = tokio::task::spawn_blocking(move || build(stack, &d))
            .await
            .map_err(|e| StackError::Io {
                stack: name,
                role: "build",
                what: "building",
                source: std::io::Error::other(e),
            })??;
        if stack.is_mpi() {
            return Self::start_mpi(stack, exe, dir).await;
        }
        let pair = if stack == Stack::Libp2pQuic {
            let pair = tokio::task::spawn_blocking(crate::net::VethPair::create)
                .await
                .map_err(|e| StackError::Io {
                    stack: name,
                    role: "responder",
                    what: "creating its namespaces",
                    source: std::io::Error::other(e),
                })?
                .map_err(|source| StackError::Namespace {
                    stack: name,
                    configuration: stack.configuration(),
                    source,
                })?;
            Some(pair)
        } else {
            None
        };
        let quic_listen = format!("/ip4/{}/udp/4001/quic-v1", crate::net::RESPONDER_IP);
        let (listen, responder_ns, client_ns) = match &pair {
            Some(p) => (
                quic_listen.as_str(),
                Some(p.responder_ns()),
                Some(p.client_ns()),
            ),
            None => ("tcp://127.0.0.1:*", None, None),
        };
        let (mut responder, rout) = spawn(
            stack,
            "responder",
            &exe,
            &["serve", listen],
            responder_ns,
            &[],
        )?;
        let mut rlines = BufReader::new(rout).lines();
        let ready = next_line(stack, "responder", &mut rlines, "startup", START_TIMEOUT).await;
        // `READY <endpoint> [<second endpoint>]`: zmq's one-way messages
        // go to a PULL socket beside its REP socket.
        let endpoints: Vec<String> = match ready.as_deref().map(|l| l.strip_prefix("READY ")) {
            Ok(Some(eps)) => eps.split_whitespace().map(str::to_string).collect(),
            Ok(None) | Err(_) => {
                let _ = responder.start_kill();
                return Err(match ready {
                    Err(e) => e,
                    Ok(line) => StackError::Protocol {
                        stack: name,
                        role: "responder",
                        command: "startup".into(),
                        line,
                    },
                });
            }
        };
        let ports: Option<Vec<u16>> = endpoints.iter().map(|e| endpoint_port(e)).collect();
        let ports = match ports {
            Some(p) if !p.is_empty() && p.len() <= 2 => p,
            _ => {
                let _ = responder.start_kill();
                return Err(StackError::Protocol {
                    stack: name,
                    role: "responder",
                    command: "startup".into(),
                    line: endpoints.join(" "),
                });
            }
        };
        let mut args = vec!["client"];
        args.extend(endpoints.iter().map(String::as_str));
        let (mut client, cout) = spawn(stack, "client", &exe, &args, client_ns, &[])?;
        let mut lines = BufReader::new(cout).lines();
        let line = next_line(stack, "client", &mut lines, "startup", START_TIMEOUT).await?;
        if line.trim() != "READY" {
            let _ = client.start_kill();
            return Err(StackError::Protocol {
                stack: name,
                role: "client",
                command: "startup".into(),
                line,
            });
        }
        if let Some(pid) = responder.id() {
            crate::util::pin_process(pid, responder_core);
        }
        if let Some(pid) = client.id() {
            crate::util::pin_process(pid, client_core);
        }
        let stdin = client.stdin.take().ok_or_else(|| StackError::Protocol {
            stack: name,
            role: "client",
            command: "startup".into(),
            line: "no stdin".into(),
        })?;
        // Keep reading the responder's output so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = rlines.next_line().await {} });
        Ok(StackLane {
            stack,
            client,
            responder: Some(responder),
            stdin,
            lines,
            sockets: match &pair {
                Some(p) => ClientSockets {
                    link: Some((
                        p.client_ns().to_string(),
                        crate::net::PAIR_CLIENT_DEV.to_string(),
                    )),
                    ..ClientSockets::default()
                },
                None => ClientSockets {
                    server_ports: ports,
                    ..ClientSockets::default()
                },
            },
            _dir: dir,
            _pair: pair,
        })
    }

    async fn start_mpi(
        stack: Stack,
        exe: PathBuf,
        dir: tempfile::TempDir,
    ) -> Result<StackLane, StackError> {
        let name = stack.name();
        let exe_s = exe.to_string_lossy().into_owned();
        let mut args = vec!["-n", "2"];
        match stack {
            // Loopback only, for the data and for mpirun's own channel.
            Stack::MpiTcp => args.extend([
                "--mca",
                "btl",
                "tcp,self",
                "--mca",
                "btl_tcp_if_include",
                "lo",
                "--mca",
                "oob_tcp_if_include",
                "lo",
            ]),
            _ => args.extend([
                "--mca",
                "btl",
                "vader,self",
                "--mca",
                "oob_tcp_if_include",
                "lo",
            ]),
        }
        args.push(&exe_s);
        let session = mpi_session_env(dir.path());
        let (mut client, out) = spawn(stack, "client", Path::new("mpirun"), &args, None, &session)
            .map_err(|e| match e {
                StackError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    StackError::ToolMissing {
                        stack: name,
                        tool: "mpirun",
                        package: "openmpi-bin",
                    }
                }
                other => other,
            })?;
        let mut lines = BufReader::new(out).lines();
        let line = next_line(stack, "client", &mut lines, "startup", START_TIMEOUT).await?;
        let Some(pid) = line
            .trim()
            .strip_prefix("READY ")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            let _ = client.start_kill();
            return Err(StackError::Protocol {
                stack: name,
                role: "client",
                command: "startup".into(),
                line,
            });
        };
        let stdin = client.stdin.take().ok_or_else(|| StackError::Protocol {
            stack: name,
            role: "client",
            command: "startup".into(),
            line: "no stdin".into(),
        })?;
        Ok(StackLane {
            stack,
            client,
            responder: None,
            stdin,
            lines,
            sockets: ClientSockets {
                pids: vec![pid],
                ..ClientSockets::default()
            },
            _dir: dir,
            _pair: None,
        })
    }

    /// The stack.
    pub fn stack(&self) -> Stack {
        self.stack
    }

    /// The client's side of the connections to the responder.
    pub fn sockets(&self) -> ClientSockets {
        self.sockets.clone()
    }

    async fn call(&mut self, command: String, within: Duration) -> Result<String, StackError> {
        let name = self.stack.name();
        let io = |what, source| StackError::Io {
            stack: name,
            role: "client",
            what,
            source,
        };
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(|e| io("writing a command", e))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| io("writing a command", e))?;
        let r = next_line(self.stack, "client", &mut self.lines, &command, within).await;
        if r.is_err() {
            let _ = self.client.start_kill();
        }
        r
    }

    fn bound(n: usize) -> Duration {
        // A second per pair is far beyond any stack on loopback: only a hang gets there.
        Duration::from_secs(30).saturating_add(Duration::from_secs(n as u64))
    }

    /// `n` untimed pairs of `size` bytes.
    pub async fn warm(&mut self, size: usize, n: usize) -> Result<(), StackError> {
        self.check(size)?;
        let cmd = format!("PAIRS {size} {n}");
        let line = self.call(cmd.clone(), Self::bound(n)).await?;
        if line.trim() == "DONE" {
            Ok(())
        } else {
            Err(self.protocol(cmd, line))
        }
    }

    /// `n` pairs of `size` bytes timed by the client: each RTT in µs.
    pub async fn timed_run(&mut self, size: usize, n: usize) -> Result<Vec<f64>, StackError> {
        self.check(size)?;
        let cmd = format!("TIMED {size} {n}");
        let line = self.call(cmd.clone(), Self::bound(n)).await?;
        let Some(list) = line.trim().strip_prefix("TIMED ") else {
            return Err(self.protocol(cmd, line));
        };
        let v: Option<Vec<f64>> = list
            .split(',')
            .map(|x| x.parse::<f64>().ok().filter(|f| f.is_finite() && *f >= 0.0))
            .collect();
        match v {
            Some(v) if v.len() == n => Ok(v),
            _ => Err(self.protocol(cmd, line)),
        }
    }

    /// One-way messages of `size` bytes back to back until `n` were sent
    /// (`n > 0`) or `duration` passed (non-zero), then the end mark; timed
    /// by the client from the first send until the responder's count is
    /// back (the throughput scenario's smooth run).
    pub async fn stream(
        &mut self,
        size: usize,
        n: u64,
        duration: Duration,
    ) -> Result<StreamRun, StackError> {
        self.check(size)?;
        let ms = duration.as_millis().min(3_600_000) as u64;
        let cmd = format!("STREAM {} {n} {ms}", size.max(1));
        let within = Duration::from_secs(60)
            .saturating_add(Duration::from_millis(ms))
            .saturating_add(Duration::from_millis(n.min(1 << 30)));
        let line = self.call(cmd.clone(), within).await?;
        let parsed = line.trim().strip_prefix("STREAMED ").and_then(|rest| {
            let mut it = rest.split_whitespace();
            let sent = it.next()?.parse::<u64>().ok()?;
            let received = it.next()?.parse::<u64>().ok()?;
            let us = it.next()?.parse::<f64>().ok()?;
            (us.is_finite() && us >= 0.0 && received <= sent && it.next().is_none())
                .then_some((sent, received, us))
        });
        match parsed {
            Some((sent, received, us)) => Ok(StreamRun {
                sent,
                received,
                elapsed: Duration::from_secs_f64(us / 1e6),
            }),
            None => Err(self.protocol(cmd, line)),
        }
    }

    fn check(&self, size: usize) -> Result<(), StackError> {
        if size > MAX_SIZE {
            return Err(StackError::TooLarge {
                stack: self.stack.name(),
                size,
            });
        }
        Ok(())
    }

    fn protocol(&self, command: String, mut line: String) -> StackError {
        line.truncate(300);
        StackError::Protocol {
            stack: self.stack.name(),
            role: "client",
            command,
            line,
        }
    }

    /// Ends both processes.
    pub async fn stop(mut self) {
        let _ = self.stdin.write_all(b"QUIT\n").await;
        let _ = self.stdin.flush().await;
        if tokio::time::timeout(Duration::from_secs(5), self.client.wait())
            .await
            .is_err()
        {
            let _ = self.client.start_kill();
            let _ = self.client.wait().await;
        }
        if let Some(mut r) = self.responder.take() {
            let _ = r.start_kill();
            let _ = r.wait().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for s in Stack::ALL {
            assert!(Stack::parse(s.name()).contains(&s));
        }
        assert!(Stack::parse("nanomsg").is_empty());
        assert_eq!(Stack::parse("mpi"), vec![Stack::MpiTcp, Stack::MpiSm]);
        assert_eq!(Stack::Zmq.configuration(), "tcp-req-rep");
        assert_eq!(Stack::MpiSm.configuration(), "sm");
        assert_eq!(
            Stack::parse("libp2p"),
            vec![Stack::Libp2p, Stack::Libp2pQuic]
        );
        assert_eq!(Stack::Libp2pQuic.configuration(), "quic");
    }

    #[test]
    fn responder_ports_are_read_from_both_endpoint_forms() {
        assert_eq!(endpoint_port("tcp://127.0.0.1:5555"), Some(5555));
        assert_eq!(
            endpoint_port(
                "/ip4/127.0.0.1/tcp/37867/p2p/12D3KooWAoryK88AtJj6cBv2xc9T6yCYU8ixHFLUQiCDJ9iS4TKi"
            ),
            Some(37867)
        );
        assert_eq!(
            endpoint_port("/ip4/10.77.0.2/udp/4001/quic-v1/p2p/12D3KooWAoryK88AtJj6cBv2xc9T6yCYU8ixHFLUQiCDJ9iS4TKi"),
            Some(4001)
        );
        assert_eq!(endpoint_port("/ip4/127.0.0.1/dns/x"), None);
        assert_eq!(endpoint_port("/ip4/127.0.0.1/tcp/99999"), None);
        assert_eq!(endpoint_port("garbage"), None);
    }
}
