//! The launcher behind `juxta run -n N -- PROGRAM ARGS`: starts `N`
//! processes of a program on this machine with the job in their
//! environment ([`super::ENV_RANK`], [`super::ENV_SIZE`],
//! [`super::ENV_SEED`], [`super::ENV_JOB`]), forwards their output line by
//! line prefixed `[rank]`, and when one rank fails (non-zero exit or a
//! signal) kills the others by PID and reports it.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

/// CPU placement of the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// Wherever the scheduler puts them.
    None,
    /// Rank `r` on core `r mod cores` (through `taskset`, which execs the
    /// program: the PID stays the rank's), as `mpirun --bind-to core`.
    Core,
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Ranks (processes).
    pub ranks: usize,
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// CPU placement.
    pub bind: Bind,
    /// Kill the job after this long; `None`: no limit.
    pub timeout: Option<Duration>,
    /// [`super::ENV_TIMEOUT`] passed to the ranks (their op timeout).
    pub op_timeout: Option<Duration>,
    /// The job's name; `None`: a random one.
    pub job: Option<String>,
}

/// Why a job failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No program, or a rank count of 0 or above [`super::MAX_RANKS`].
    #[error("bad job: {0}")]
    BadJob(&'static str),
    /// A rank's process could not be started.
    #[error("starting rank {rank}: {source}")]
    Spawn {
        /// the rank
        rank: usize,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// A rank failed; the others were killed.
    #[error("rank {rank} failed ({status}); the other ranks were killed")]
    RankFailed {
        /// the rank
        rank: usize,
        /// its exit status
        status: std::process::ExitStatus,
    },
    /// The job ran longer than [`LaunchOptions::timeout`]; every rank was
    /// killed.
    #[error("the job ran longer than {0:?}; every rank was killed")]
    Timeout(Duration),
    /// The seed address could not be reserved, or waiting failed.
    #[error("{what}: {source}")]
    Io {
        /// what was done
        what: &'static str,
        /// the error
        #[source]
        source: std::io::Error,
    },
}

impl LaunchError {
    /// The exit code `juxta run` ends with: the failed rank's own code
    /// when it has one, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::RankFailed { status, .. } => status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .filter(|&c| c != 0)
                .unwrap_or(1),
            _ => 1,
        }
    }
}

/// Runs the job to its end: `Ok` when every rank exited with status 0.
///
/// ```no_run
/// # async fn demo() -> Result<(), juxta::mp::launch::LaunchError> {
/// use juxta::mp::launch::{launch, Bind, LaunchOptions};
/// launch(&LaunchOptions {
///     ranks: 2,
///     command: vec!["./matmul".into(), "--n".into(), "512".into()],
///     bind: Bind::None,
///     timeout: None,
///     op_timeout: None,
///     job: None,
/// })
/// .await
/// # }
/// ```
pub async fn launch(opts: &LaunchOptions) -> Result<(), LaunchError> {
    if opts.command.is_empty() {
        return Err(LaunchError::BadJob("no program given"));
    }
    if opts.ranks == 0 || opts.ranks > super::MAX_RANKS {
        return Err(LaunchError::BadJob("the rank count is 1..=4096"));
    }
    // The seed: a free loopback port, released for rank 0 to bind.
    let seed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|source| LaunchError::Io {
            what: "reserving a seed port",
            source,
        })?;
    let job = opts
        .job
        .clone()
        .unwrap_or_else(|| format!("job-{:016x}", rand::random::<u64>()));
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // The ranks' homes, removed when this returns (every rank reaped).
    let homes = tempfile::Builder::new()
        .prefix("juxta-run-")
        .tempdir()
        .map_err(|source| LaunchError::Io {
            what: "creating the ranks' home directory",
            source,
        })?;
    let (kill_tx, kill_rx) = watch::channel(false);
    let mut waits = tokio::task::JoinSet::new();
    let mut outputs = Vec::new();
    for rank in 0..opts.ranks {
        let mut cmd = match opts.bind {
            Bind::None => Command::new(&opts.command[0]),
            Bind::Core => {
                let mut c = Command::new("taskset");
                c.arg("-c")
                    .arg((rank % cores).to_string())
                    .arg(&opts.command[0]);
                c
            }
        };
        cmd.args(&opts.command[1..])
            .env(super::ENV_RANK, rank.to_string())
            .env(super::ENV_SIZE, opts.ranks.to_string())
            .env(super::ENV_SEED, seed.to_string())
            .env(super::ENV_JOB, &job)
            .env(super::ENV_HOMES, homes.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if opts.ranks > cores && std::env::var_os(super::ENV_SPIN_US).is_none() {
            // Oversubscribed: ranks park at once instead of spinning.
            cmd.env(super::ENV_SPIN_US, "0");
        }
        if let Some(t) = opts.op_timeout {
            cmd.env(super::ENV_TIMEOUT, t.as_secs_f64().to_string());
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                let _ = kill_tx.send(true);
                while waits.join_next().await.is_some() {}
                return Err(LaunchError::Spawn { rank, source });
            }
        };
        if let Some(o) = child.stdout.take() {
            outputs.push(tokio::spawn(forward(rank, o, false)));
        }
        if let Some(e) = child.stderr.take() {
            outputs.push(tokio::spawn(forward(rank, e, true)));
        }
        let mut kill = kill_rx.clone();
        waits.spawn(async move {
            tokio::select! {
                st = child.wait() => (rank, st),
                _ = kill.changed() => {
                    // By PID: this rank's process only.
                    let _ = child.start_kill();
                    (rank, child.wait().await)
                }
            }
        });
    }
    let deadline = opts.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut failure: Option<LaunchError> = None;
    loop {
        let next = match deadline {
            Some(d) if failure.is_none() => {
                match tokio::time::timeout_at(d, waits.join_next()).await {
                    Ok(n) => n,
                    Err(_) => {
                        failure = Some(LaunchError::Timeout(opts.timeout.unwrap_or_default()));
                        let _ = kill_tx.send(true);
                        continue;
                    }
                }
            }
            _ => waits.join_next().await,
        };
        let Some(joined) = next else { break };
        let (rank, st) = joined.map_err(|e| LaunchError::Io {
            what: "waiting for a rank",
            source: std::io::Error::other(e),
        })?;
        let st = st.map_err(|source| LaunchError::Io {
            what: "waiting for a rank",
            source,
        })?;
        if !st.success() && failure.is_none() {
            failure = Some(LaunchError::RankFailed { rank, status: st });
            let _ = kill_tx.send(true);
        }
    }
    for o in outputs {
        let _ = o.await;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Copies a rank's output to ours, each line prefixed `[rank] ` (bytes
/// as they are: a line need not be UTF-8). Keeps draining the pipe when
/// our own output fails, so the rank never blocks on it.
async fn forward(rank: usize, from: impl tokio::io::AsyncRead + Unpin, err: bool) {
    let mut from = BufReader::new(from);
    let prefix = format!("[{rank}] ");
    let mut line = Vec::new();
    let mut ok = true;
    loop {
        line.clear();
        match from.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !ok {
            continue;
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        let mut text = prefix.clone().into_bytes();
        text.extend_from_slice(&line);
        let r = if err {
            std::io::Write::write_all(&mut std::io::stderr().lock(), &text)
        } else {
            let mut o = std::io::stdout().lock();
            std::io::Write::write_all(&mut o, &text).and_then(|()| std::io::Write::flush(&mut o))
        };
        ok = r.is_ok();
    }
}
