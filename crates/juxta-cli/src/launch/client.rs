//! The launcher's side of `juxta run --hosts`: connects to every host's
//! daemon, starts rank 0 (whose daemon reserves the seed), then the other
//! ranks with that seed, prints their output prefixed `[rank]`, and ends
//! with the job: when a rank fails, a host is lost, the time is up or the
//! user interrupts, every host is told to kill the job's ranks.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use juxta::proto::id::PeerId;
use juxta::{Messenger, Peer, PeerConfig};
use tokio::time::Instant;

use super::hostfile::{self, Host};
use super::{LaunchMsg, StartRank, PARAM, SERVICE};

/// A job to run on hosts.
#[derive(Debug, Clone)]
pub struct RemoteJob {
    /// The hosts (from the hosts file).
    pub hosts: Vec<Host>,
    /// Ranks in the job.
    pub ranks: usize,
    /// The program and its arguments, as the hosts will run them.
    pub command: Vec<OsString>,
    /// Kill the job after this long.
    pub timeout: Option<Duration>,
    /// The ranks' operation timeout.
    pub op_timeout: Option<Duration>,
    /// The launcher's home (its identity: the peer the hosts allow).
    pub home: PathBuf,
    /// How long to wait for a host to connect and answer.
    pub connect_timeout: Duration,
}

/// Why a job on hosts failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The job is malformed (no program, bad rank count, an argument that
    /// is not UTF-8).
    #[error("{0}")]
    BadJob(String),
    /// The launcher's peer could not start.
    #[error("starting the launcher's peer in {home}: {source}")]
    Peer {
        /// its home
        home: PathBuf,
        /// why
        #[source]
        source: Box<juxta::PeerError>,
    },
    /// A host could not be reached.
    #[error("host {addr}: {source}")]
    Connect {
        /// the host
        addr: SocketAddr,
        /// why
        #[source]
        source: Box<juxta::PeerError>,
    },
    /// A host answered as another peer than the hosts file pins.
    #[error("host {addr} is peer {}, the hosts file says {}", .ids.1, .ids.0)]
    WrongPeer {
        /// the host
        addr: SocketAddr,
        /// the pinned ID and the ID it proved
        ids: Box<(PeerId, PeerId)>,
    },
    /// A host refused to start a rank.
    #[error("host {addr} refused rank {rank}: {reason}")]
    Refused {
        /// the host
        addr: SocketAddr,
        /// the rank
        rank: usize,
        /// the host's reason
        reason: String,
    },
    /// A host did not answer a start in time.
    #[error("host {addr} did not answer the start of rank {rank} within {secs:.0} s")]
    NoAnswer {
        /// the host
        addr: SocketAddr,
        /// the rank
        rank: usize,
        /// the wait
        secs: f64,
    },
    /// A request could not be sent.
    #[error("host {addr}: sending failed: {source}")]
    Send {
        /// the host
        addr: SocketAddr,
        /// why
        #[source]
        source: juxta::SendError,
    },
    /// A rank ended with a failure.
    #[error("rank {rank} on {addr} failed ({how})")]
    RankFailed {
        /// the rank
        rank: usize,
        /// its host
        addr: SocketAddr,
        /// its exit code, if it had one
        code: Option<i32>,
        /// how it ended
        how: String,
    },
    /// A host's connection was lost while ranks ran there.
    #[error("lost the connection to host {addr} (ranks {ranks:?} ran there)")]
    HostLost {
        /// the host
        addr: SocketAddr,
        /// the ranks it ran
        ranks: Vec<usize>,
    },
    /// The job ran out of time.
    #[error("the job ran longer than {0:?}: killed")]
    Timeout(Duration),
    /// The user interrupted the job.
    #[error("interrupted: the job's ranks were killed")]
    Interrupted,
}

impl RemoteError {
    /// The launcher's exit status: the failed rank's code when it has
    /// one, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            RemoteError::RankFailed { code: Some(c), .. } if (1..=255).contains(c) => *c as u8,
            RemoteError::Interrupted => 130,
            _ => 1,
        }
    }
}

/// One connected host.
struct Conn {
    host: Host,
    messenger: Messenger,
    ranks: Vec<usize>,
}

/// Runs the job on its hosts; returns when every rank has ended.
pub async fn run(job: &RemoteJob) -> Result<(), RemoteError> {
    if job.command.is_empty() {
        return Err(RemoteError::BadJob("no program given".into()));
    }
    if job.ranks == 0 || job.ranks > juxta::mp::MAX_RANKS {
        return Err(RemoteError::BadJob(format!(
            "-n {}: the rank count is 1..={}",
            job.ranks,
            juxta::mp::MAX_RANKS
        )));
    }
    let argv = job
        .command
        .iter()
        .map(|a| {
            a.to_str()
                .map(str::to_string)
                .ok_or_else(|| RemoteError::BadJob(format!("argument {a:?} is not UTF-8")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if argv.len() > super::MAX_ARGS || argv.iter().any(|a| a.len() > super::MAX_ARG_BYTES) {
        return Err(RemoteError::BadJob(format!(
            "at most {} arguments of {} bytes each",
            super::MAX_ARGS,
            super::MAX_ARG_BYTES
        )));
    }
    let cfg = PeerConfig::new(&job.home)
        .compact(true)
        .connect_timeout(job.connect_timeout);
    let peer = Arc::new(Peer::start(cfg).await.map_err(|source| RemoteError::Peer {
        home: job.home.clone(),
        source: Box::new(source),
    })?);
    let r = drive(&peer, job, argv).await;
    let _ = peer.close_within(Duration::from_secs(2)).await;
    r
}

async fn drive(peer: &Arc<Peer>, job: &RemoteJob, argv: Vec<String>) -> Result<(), RemoteError> {
    let mut inbox = peer
        .listen(SERVICE, Some(PARAM))
        .map_err(|source| RemoteError::Peer {
            home: job.home.clone(),
            source: Box::new(source),
        })?;
    let placement = hostfile::place(&job.hosts, job.ranks);
    let mut conns: Vec<Conn> = Vec::new();
    for (i, h) in job.hosts.iter().enumerate() {
        let ranks: Vec<usize> = (0..job.ranks).filter(|&r| placement[r] == i).collect();
        if ranks.is_empty() {
            continue;
        }
        let messenger = peer
            .connect(h.addr)
            .await
            .map_err(|source| RemoteError::Connect {
                addr: h.addr,
                source: Box::new(source),
            })?;
        if let Some(expected) = h.peer {
            if messenger.remote() != expected {
                return Err(RemoteError::WrongPeer {
                    addr: h.addr,
                    ids: Box::new((expected, messenger.remote())),
                });
            }
        }
        conns.push(Conn {
            host: h.clone(),
            messenger,
            ranks,
        });
    }
    let name = format!("job-{:016x}", rand::random::<u64>());
    let by_peer: HashMap<PeerId, usize> = conns
        .iter()
        .enumerate()
        .map(|(i, c)| (c.messenger.remote(), i))
        .collect();
    let host_of = |rank: usize| -> usize {
        conns
            .iter()
            .position(|c| c.ranks.contains(&rank))
            .expect("every rank is placed")
    };
    let mut job_state = Job {
        name: name.clone(),
        running: vec![false; job.ranks],
        ended: vec![false; job.ranks],
        lines: HashMap::new(),
    };
    let start = |rank: usize, seed: String| StartRank {
        job: name.clone(),
        rank,
        size: job.ranks,
        seed,
        argv: argv.clone(),
        op_timeout: job.op_timeout.map(|t| t.as_secs_f64()),
        // Oversubscribed hosts: ranks park at once instead of spinning
        // (as the local launcher does), unless the user set it.
        spin_us: std::env::var(juxta::mp::ENV_SPIN_US)
            .ok()
            .and_then(|v| v.parse().ok()),
    };
    let deadline = job.timeout.map(|t| Instant::now() + t);
    // Rank 0 first: its host reserves the seed.
    let c0 = &conns[host_of(0)];
    send(c0, LaunchMsg::Start(start(0, String::new()))).await?;
    let answer_by = Instant::now() + job.connect_timeout;
    let seed = loop {
        let got = tokio::time::timeout_at(answer_by, next(&mut inbox, &by_peer)).await;
        let Ok(Some((host, msg))) = got else {
            return Err(RemoteError::NoAnswer {
                addr: c0.host.addr,
                rank: 0,
                secs: job.connect_timeout.as_secs_f64(),
            });
        };
        match msg {
            LaunchMsg::Started {
                job: j,
                rank: 0,
                seed,
                ..
            } if j == name && host == host_of(0) => {
                job_state.running[0] = true;
                break seed;
            }
            LaunchMsg::Refused {
                job: j,
                rank: 0,
                reason,
            } if j == name => {
                return Err(RemoteError::Refused {
                    addr: c0.host.addr,
                    rank: 0,
                    reason,
                })
            }
            other => {
                if let Err(e) = job_state.handle(&conns, host, other) {
                    kill_all(&conns, &name).await;
                    return Err(e);
                }
            }
        }
    };
    if seed.parse::<SocketAddr>().is_err() {
        kill_all(&conns, &name).await;
        return Err(RemoteError::Refused {
            addr: c0.host.addr,
            rank: 0,
            reason: format!("it gave an unusable seed address {seed:?}"),
        });
    }
    for rank in 1..job.ranks {
        if let Err(e) = send(
            &conns[host_of(rank)],
            LaunchMsg::Start(start(rank, seed.clone())),
        )
        .await
        {
            kill_all(&conns, &name).await;
            return Err(e);
        }
    }
    let mut check = tokio::time::interval(Duration::from_millis(250));
    let mut gone: HashMap<usize, Duration> = HashMap::new();
    let mut failure: Option<RemoteError> = None;
    let started_by = Instant::now() + job.connect_timeout;
    // After a failure the hosts have this long to report their ranks
    // killed; the launcher then ends regardless.
    let mut give_up: Option<Instant> = None;
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    while job_state.ended.iter().any(|e| !e) {
        if failure.is_some() && give_up.is_none() {
            give_up = Some(Instant::now() + Duration::from_secs(5));
        }
        let far = Instant::now() + Duration::from_secs(3600 * 24 * 365);
        tokio::select! {
            got = next(&mut inbox, &by_peer) => {
                let Some((host, msg)) = got else { break };
                if let Err(e) = job_state.handle(&conns, host, msg) {
                    if failure.is_none() {
                        kill_all(&conns, &name).await;
                        failure = Some(e);
                    }
                }
            }
            _ = check.tick() => {
                let now = Instant::now();
                if give_up.is_some_and(|g| now >= g) {
                    break;
                }
                if failure.is_none() && now >= started_by {
                    if let Some(rank) = (0..job.ranks).find(|&r| !job_state.running[r] && !job_state.ended[r]) {
                        kill_all(&conns, &name).await;
                        failure = Some(RemoteError::NoAnswer {
                            addr: conns[host_of(rank)].host.addr,
                            rank,
                            secs: job.connect_timeout.as_secs_f64(),
                        });
                    }
                }
                // A host whose connection is gone cannot report its ranks'
                // end: the job fails, the other hosts kill theirs.
                let connected: Vec<PeerId> = peer.connections().iter().map(|c| c.peer).collect();
                for (i, c) in conns.iter().enumerate() {
                    let open = c.ranks.iter().any(|&r| !job_state.ended[r]);
                    if !open || connected.contains(&c.messenger.remote()) {
                        gone.remove(&i);
                        continue;
                    }
                    let g = gone.entry(i).or_default();
                    *g += Duration::from_millis(250);
                    if *g >= super::serve::LAUNCHER_GONE {
                        for &r in &c.ranks {
                            job_state.ended[r] = true;
                        }
                        if failure.is_none() {
                            kill_all(&conns, &name).await;
                            failure = Some(RemoteError::HostLost { addr: c.host.addr, ranks: c.ranks.clone() });
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(far)), if failure.is_none() => {
                kill_all(&conns, &name).await;
                failure = Some(RemoteError::Timeout(job.timeout.unwrap_or_default()));
            }
            _ = &mut interrupt, if failure.is_none() => {
                kill_all(&conns, &name).await;
                failure = Some(RemoteError::Interrupted);
            }
        }
    }
    job_state.flush();
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What the launcher knows of the job.
struct Job {
    name: String,
    running: Vec<bool>,
    ended: Vec<bool>,
    /// Partial lines per (rank, stderr).
    lines: HashMap<(usize, bool), Vec<u8>>,
}

impl Job {
    /// Takes one message from host `host`; an error when the job fails.
    fn handle(&mut self, conns: &[Conn], host: usize, msg: LaunchMsg) -> Result<(), RemoteError> {
        let c = &conns[host];
        // Only about this job, and only about ranks placed on that host.
        let mine = |job: &str, rank: usize| job == self.name && c.ranks.contains(&rank);
        match msg {
            LaunchMsg::Started { job, rank, .. } if mine(&job, rank) => {
                self.running[rank] = true;
            }
            LaunchMsg::Refused { job, rank, reason } if mine(&job, rank) => {
                self.ended[rank] = true;
                return Err(RemoteError::Refused {
                    addr: c.host.addr,
                    rank,
                    reason,
                });
            }
            LaunchMsg::Output {
                job,
                rank,
                err,
                data,
            } if mine(&job, rank) => {
                self.output(rank, err, &data);
            }
            LaunchMsg::Exit {
                job,
                rank,
                code,
                how,
            } if mine(&job, rank) => {
                self.ended[rank] = true;
                self.flush_rank(rank);
                if code != Some(0) {
                    return Err(RemoteError::RankFailed {
                        rank,
                        addr: c.host.addr,
                        code,
                        how,
                    });
                }
            }
            other => tracing::debug!(?other, "launch: message about another job or rank ignored"),
        }
        Ok(())
    }

    /// Prints whole lines prefixed `[rank] `, keeps a partial one (bounded).
    fn output(&mut self, rank: usize, err: bool, data: &[u8]) {
        let buf = self.lines.entry((rank, err)).or_default();
        buf.extend_from_slice(data);
        let cut = match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None if buf.len() >= super::MAX_CHUNK => buf.len(),
            None => return,
        };
        let rest = buf.split_off(cut);
        let whole = std::mem::replace(buf, rest);
        print_lines(rank, err, &whole);
    }

    fn flush_rank(&mut self, rank: usize) {
        for err in [false, true] {
            if let Some(b) = self.lines.remove(&(rank, err)) {
                if !b.is_empty() {
                    print_lines(rank, err, &b);
                }
            }
        }
    }

    fn flush(&mut self) {
        for r in 0..self.ended.len() {
            self.flush_rank(r);
        }
    }
}

fn print_lines(rank: usize, err: bool, text: &[u8]) {
    let mut out = Vec::with_capacity(text.len() + 16);
    for line in text.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(format!("[{rank}] ").as_bytes());
        out.extend_from_slice(line);
        if line.last() != Some(&b'\n') {
            out.push(b'\n');
        }
    }
    let _ = if err {
        std::io::stderr().lock().write_all(&out)
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(&out).and_then(|()| o.flush())
    };
}

async fn send(c: &Conn, msg: LaunchMsg) -> Result<(), RemoteError> {
    c.messenger
        .send(SERVICE, Some(PARAM), msg.to_message())
        .await
        .map(|_| ())
        .map_err(|source| RemoteError::Send {
            addr: c.host.addr,
            source,
        })
}

async fn kill_all(conns: &[Conn], job: &str) {
    for c in conns {
        let _ = send(
            c,
            LaunchMsg::Kill {
                job: job.to_string(),
            },
        )
        .await;
    }
}

/// The next message from a host of the job: straight from it over a
/// connection on which it proved its ID; anything else is dropped.
async fn next(
    inbox: &mut juxta::Listener,
    by_peer: &HashMap<PeerId, usize>,
) -> Option<(usize, LaunchMsg)> {
    loop {
        let d = inbox.recv().await?;
        let Some(host) = d.from.and_then(|f| by_peer.get(&f).copied()) else {
            continue;
        };
        if !d.verified.is_verified() || d.routed {
            continue;
        }
        match LaunchMsg::from_message(&d.message) {
            Ok(m) => return Some((host, m)),
            Err(e) => tracing::warn!(error = %e, "launch: malformed message from a host"),
        }
    }
}
