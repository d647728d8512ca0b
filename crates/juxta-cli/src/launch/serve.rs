//! The daemon's side of `juxta run --hosts`: starts the ranks an allowed
//! launcher asks for, forwards their output and their end, and kills them
//! when the launcher asks, or when its connection is gone.
//!
//! Only a `start` that arrived straight from a peer listed in
//! `launch.allowed_peers`, over a connection on which that peer proved its
//! ID, starts anything; everything else is refused, counted and (when the
//! sender is known) answered with the reason.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use juxta::proto::id::PeerId;
use juxta::{Listener, Peer};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

use super::{LaunchMsg, StartRank, MAX_CHUNK, PARAM, SERVICE};

/// Default for `launch.max_ranks`.
pub const DEFAULT_MAX_RANKS: usize = 64;
/// How long a launcher's connection may be gone before its jobs' ranks
/// are killed.
pub const LAUNCHER_GONE: Duration = Duration::from_millis(1500);

/// `[launch]` as the daemon runs it.
#[derive(Debug, Clone)]
pub struct LaunchSettings {
    /// Peers that may start ranks here.
    pub allowed_peers: Vec<PeerId>,
    /// Programs they may start (`None`: any).
    pub programs: Option<Vec<PathBuf>>,
    /// Most ranks running here at once (all launchers together).
    pub max_ranks: usize,
    /// Working directory of the ranks.
    pub dir: PathBuf,
    /// The address ranks listen on (reachable by the other hosts).
    pub address: IpAddr,
}

/// What the launch service did, for `juxta status` and the metrics.
#[derive(Debug, Default)]
pub struct LaunchCounters {
    /// Ranks started.
    pub started: AtomicU64,
    /// Ranks running now.
    pub running: AtomicUsize,
    /// Requests refused (not allowed, unproven, malformed, full, bad
    /// program, spawn failure).
    pub refused: AtomicU64,
    /// Ranks killed (by the launcher's `kill` or its departure).
    pub killed: AtomicU64,
}

/// Jobs running here: (launcher, job) → the kill switch of its ranks.
type Jobs = Arc<Mutex<HashMap<(PeerId, String), watch::Sender<bool>>>>;

/// Serves the launch service until the listener closes.
pub async fn serve(
    peer: Arc<Peer>,
    mut listener: Listener,
    cfg: LaunchSettings,
    counters: Arc<LaunchCounters>,
) {
    let jobs: Jobs = Arc::default();
    while let Some(d) = listener.recv().await {
        let Some(from) = d.from else {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let msg = match LaunchMsg::from_message(&d.message) {
            Ok(m) => m,
            Err(e) => {
                counters.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%from, error = %e, "launch: malformed request");
                continue;
            }
        };
        let allowed = d.verified.is_verified() && !d.routed && cfg.allowed_peers.contains(&from);
        match msg {
            LaunchMsg::Start(s) => {
                if !allowed {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%from, verified = ?d.verified, "launch: start refused (peer not allowed)");
                    if d.verified.is_verified() {
                        let reason =
                            format!("peer {from} is not in this host's launch.allowed_peers");
                        reply(&peer, &from, refused(&s, reason)).await;
                    }
                    continue;
                }
                match start(&peer, from, s.clone(), &cfg, &counters, &jobs) {
                    Ok(started) => reply(&peer, &from, started).await,
                    Err(reason) => {
                        counters.refused.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%from, job = %s.job, rank = s.rank, %reason, "launch: rank not started");
                        reply(&peer, &from, refused(&s, reason)).await;
                    }
                }
            }
            LaunchMsg::Kill { job } if allowed => {
                if let Some(k) = jobs.lock().expect("jobs").get(&(from, job.clone())) {
                    tracing::info!(%from, %job, "launch: kill asked");
                    let _ = k.send(true);
                }
            }
            _ => {
                counters.refused.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn refused(s: &StartRank, reason: String) -> LaunchMsg {
    LaunchMsg::Refused {
        job: s.job.clone(),
        rank: s.rank,
        reason,
    }
}

async fn reply(peer: &Peer, to: &PeerId, msg: LaunchMsg) {
    match peer.messenger(to) {
        Ok(m) => {
            if let Err(e) = m.send(SERVICE, Some(PARAM), msg.to_message()).await {
                tracing::debug!(%to, error = %e, "launch: reply not sent");
            }
        }
        Err(e) => tracing::debug!(%to, error = %e, "launch: launcher unreachable"),
    }
}

/// Starts one rank; the answer to send, or why not.
fn start(
    peer: &Arc<Peer>,
    from: PeerId,
    s: StartRank,
    cfg: &LaunchSettings,
    counters: &Arc<LaunchCounters>,
    jobs: &Jobs,
) -> Result<LaunchMsg, String> {
    if let Some(programs) = &cfg.programs {
        if !programs.iter().any(|p| p.as_os_str() == s.argv[0].as_str()) {
            return Err(format!(
                "program {:?} is not in this host's launch.programs",
                s.argv[0]
            ));
        }
    }
    // Reserve a slot (all launchers together).
    if counters
        .running
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < cfg.max_ranks).then_some(n + 1)
        })
        .is_err()
    {
        return Err(format!(
            "this host runs {} ranks already (launch.max_ranks)",
            cfg.max_ranks
        ));
    }
    let release = || {
        counters.running.fetch_sub(1, Ordering::SeqCst);
    };
    let seed = if s.seed.is_empty() {
        // Rank 0: a free port on the address the others can reach,
        // released for the rank to bind.
        match std::net::TcpListener::bind(SocketAddr::new(cfg.address, 0))
            .and_then(|l| l.local_addr())
        {
            Ok(a) => a.to_string(),
            Err(e) => {
                release();
                return Err(format!("reserving a seed port on {}: {e}", cfg.address));
            }
        }
    } else {
        s.seed.clone()
    };
    // The rank's home, removed once it has been reaped (below).
    let homes = match tempfile::Builder::new().prefix("juxta-rank-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            release();
            return Err(format!("creating the rank's home directory: {e}"));
        }
    };
    let mut cmd = Command::new(&s.argv[0]);
    cmd.args(&s.argv[1..])
        .current_dir(&cfg.dir)
        .env(juxta::mp::ENV_RANK, s.rank.to_string())
        .env(juxta::mp::ENV_SIZE, s.size.to_string())
        .env(juxta::mp::ENV_SEED, &seed)
        .env(juxta::mp::ENV_JOB, &s.job)
        .env(juxta::mp::ENV_HOMES, homes.path())
        .env(
            juxta::mp::ENV_LISTEN,
            SocketAddr::new(cfg.address, 0).to_string(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(t) = s.op_timeout {
        cmd.env(juxta::mp::ENV_TIMEOUT, t.to_string());
    }
    if let Some(us) = s.spin_us {
        cmd.env(juxta::mp::ENV_SPIN_US, us.to_string());
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            release();
            return Err(format!("starting {:?}: {e}", s.argv[0]));
        }
    };
    let pid = child.id().unwrap_or(0);
    counters.started.fetch_add(1, Ordering::Relaxed);
    tracing::info!(%from, job = %s.job, rank = s.rank, pid, "launch: rank started");
    let mut kill = {
        let mut map = jobs.lock().expect("jobs");
        let key = (from, s.job.clone());
        match map.get(&key) {
            Some(k) => k.subscribe(),
            None => {
                let (tx, rx) = watch::channel(false);
                map.insert(key.clone(), tx);
                tokio::spawn(watch_launcher(peer.clone(), key, jobs.clone()));
                rx
            }
        }
    };
    let mut outs = Vec::new();
    if let Some(o) = child.stdout.take() {
        outs.push(tokio::spawn(forward(peer.clone(), from, &s, o, false)));
    }
    if let Some(e) = child.stderr.take() {
        outs.push(tokio::spawn(forward(peer.clone(), from, &s, e, true)));
    }
    let (peer2, counters2, s2) = (peer.clone(), counters.clone(), s.clone());
    tokio::spawn(async move {
        let status = tokio::select! {
            st = child.wait() => st,
            _ = async { let _ = kill.wait_for(|k| *k).await; } => {
                // By PID: this rank's process only.
                let _ = child.start_kill();
                counters2.killed.fetch_add(1, Ordering::Relaxed);
                child.wait().await
            }
        };
        // Its output first, then its end.
        for o in outs {
            let _ = o.await;
        }
        drop(homes);
        counters2.running.fetch_sub(1, Ordering::SeqCst);
        let (code, how) = match &status {
            Ok(st) => (st.code(), st.to_string()),
            Err(e) => (None, format!("waiting failed: {e}")),
        };
        tracing::info!(job = %s2.job, rank = s2.rank, %how, "launch: rank ended");
        reply(
            &peer2,
            &from,
            LaunchMsg::Exit {
                job: s2.job.clone(),
                rank: s2.rank,
                code,
                how,
            },
        )
        .await;
        drop(kill);
    });
    Ok(LaunchMsg::Started {
        job: s.job,
        rank: s.rank,
        pid,
        seed,
    })
}

/// Watches a job's launcher: when its connection has been gone for
/// [`LAUNCHER_GONE`], the job's ranks are killed (no orphans). Removes the
/// job's entry once its last rank has ended.
async fn watch_launcher(peer: Arc<Peer>, key: (PeerId, String), jobs: Jobs) {
    let tick = Duration::from_millis(250);
    let mut gone_for = Duration::ZERO;
    loop {
        tokio::time::sleep(tick).await;
        {
            let mut map = jobs.lock().expect("jobs");
            match map.get(&key) {
                Some(k) if k.receiver_count() > 0 => {}
                _ => {
                    map.remove(&key);
                    return;
                }
            }
        }
        let connected = peer.connections().iter().any(|c| c.peer == key.0);
        gone_for = if connected {
            Duration::ZERO
        } else {
            gone_for + tick
        };
        if gone_for >= LAUNCHER_GONE {
            if let Some(k) = jobs.lock().expect("jobs").get(&key) {
                if !*k.borrow() {
                    tracing::warn!(launcher = %key.0, job = %key.1, "launch: launcher gone, killing its ranks");
                    let _ = k.send(true);
                }
            }
        }
    }
}

/// Forwards a rank's output to the launcher, a line (at most
/// [`MAX_CHUNK`] bytes) per message; keeps draining when the launcher is
/// gone, so the rank never blocks on a full pipe.
fn forward(
    peer: Arc<Peer>,
    to: PeerId,
    s: &StartRank,
    from: impl AsyncRead + Unpin + Send + 'static,
    err: bool,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let (job, rank) = (s.job.clone(), s.rank);
    async move {
        let mut from = BufReader::with_capacity(MAX_CHUNK, from);
        let mut ok = true;
        loop {
            let chunk = match from.fill_buf().await {
                Ok([]) | Err(_) => return,
                Ok(b) => {
                    // Up to the last newline, or the whole buffer when it
                    // holds none (a long line goes in pieces).
                    let n = b
                        .iter()
                        .rposition(|&c| c == b'\n')
                        .map(|i| i + 1)
                        .unwrap_or(b.len());
                    let c = bytes::Bytes::copy_from_slice(&b[..n]);
                    from.consume(n);
                    c
                }
            };
            if !ok {
                continue;
            }
            let msg = LaunchMsg::Output {
                job: job.clone(),
                rank,
                err,
                data: chunk,
            };
            ok = match peer.messenger(&to) {
                Ok(m) => m.send(SERVICE, Some(PARAM), msg.to_message()).await.is_ok(),
                Err(_) => false,
            };
        }
    }
}
