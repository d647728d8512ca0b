//! Bootstrap of a job: how the ranks find each other (see the module
//! documentation of [`super`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use juxta_proto::id::PeerId;
use juxta_proto::message::{Element, Message};
use tokio::time::Instant;

use super::inbox::{Inbox, Registered};
use super::{Communicator, MpConfig, MpError, Shared, MAX_RANKS, SERVICE};
use crate::endpoint::{Listener, Messenger};
use crate::peer::Peer;
use crate::PeerConfig;

/// Environment variable: this process's rank.
pub const ENV_RANK: &str = "JUXTA_MP_RANK";
/// Environment variable: ranks in the job.
pub const ENV_SIZE: &str = "JUXTA_MP_SIZE";
/// Environment variable: the seed address (where rank 0 listens).
pub const ENV_SEED: &str = "JUXTA_MP_SEED";
/// Environment variable: the job's name (optional, default `job`).
pub const ENV_JOB: &str = "JUXTA_MP_JOB";
/// Environment variable: [`MpConfig::op_timeout`] in seconds (optional).
pub const ENV_TIMEOUT: &str = "JUXTA_MP_TIMEOUT";

/// Environment variable: [`MpConfig::spin`] in microseconds (optional).
pub const ENV_SPIN_US: &str = "JUXTA_MP_SPIN_US";

/// Environment variable: [`MpConfig::listen`], the address a rank other
/// than 0 listens on (optional; `juxta run --hosts` sets it to the host's
/// address so that ranks on other hosts can reach it).
pub const ENV_LISTEN: &str = "JUXTA_MP_LISTEN";
/// Directory a rank makes its peer's temporary home in (`juxta run` sets
/// it to a directory it owns and removes once every rank has ended, so a
/// rank that exits early or is killed leaves nothing behind; unset: the
/// system's temporary directory).
pub const ENV_HOMES: &str = "JUXTA_MP_HOMES";

const BOOT_SERVICE: &str = "juxta-mp-boot";
const NS: &str = "juxta-mp";

/// Why a job could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// A launcher variable is missing or malformed.
    #[error("environment variable {var}: {reason}")]
    Env {
        /// the variable
        var: &'static str,
        /// what is wrong
        reason: &'static str,
    },
    /// Size 0, more than [`MAX_RANKS`], or a rank outside `0..size`.
    #[error("rank {rank} of a job of {size} ranks is not possible")]
    BadLayout {
        /// the rank
        rank: usize,
        /// the size
        size: usize,
    },
    /// The bootstrap did not finish in [`MpConfig::boot_timeout`].
    #[error("bootstrap timed out waiting for {0}")]
    Timeout(&'static str),
    /// A rank's connection did not agree on compact framing (it is not a
    /// Juxta peer with the handshake on).
    #[error("the connection to rank {0} did not prove its peer (no compact framing)")]
    Unproven(usize),
    /// A rank answered from another peer than the table says.
    #[error("rank {0} answered as another peer than announced")]
    WrongPeer(usize),
    /// Rank 0's table was malformed.
    #[error("malformed table from rank 0")]
    BadTable,
    /// The temporary home of the rank's peer could not be made.
    #[error("creating the rank's home: {0}")]
    Home(#[source] std::io::Error),
}

fn text(m: &Message, name: &str) -> Option<String> {
    m.get(NS, name)
        .and_then(|e| e.as_str())
        .map(|s| s.to_string())
}

fn boot_msg(kind: &str, fields: &[(&str, String)]) -> Message {
    let mut m = Message::new().with(Element::text(NS, "kind", kind));
    for (k, v) in fields {
        m.push(Element::text(NS, k, v));
    }
    m
}

fn env_var<T: std::str::FromStr>(var: &'static str) -> Result<Option<T>, BootError> {
    match std::env::var(var) {
        Ok(v) => v.trim().parse().map(Some).map_err(|_| BootError::Env {
            var,
            reason: "not a valid value",
        }),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(BootError::Env {
            var,
            reason: "not unicode",
        }),
    }
}

impl Communicator {
    /// Joins the job described by the launcher's environment
    /// (`juxta run -n N -- PROGRAM`): [`ENV_RANK`], [`ENV_SIZE`],
    /// [`ENV_SEED`], optionally [`ENV_JOB`], [`ENV_TIMEOUT`],
    /// [`ENV_SPIN_US`] and [`ENV_LISTEN`].
    pub async fn from_env() -> Result<Communicator, MpError> {
        let need = |var: &'static str| BootError::Env {
            var,
            reason: "not set (launch with `juxta run -n N -- PROGRAM`)",
        };
        let rank: usize = env_var(ENV_RANK)?.ok_or_else(|| need(ENV_RANK))?;
        let size: usize = env_var(ENV_SIZE)?.ok_or_else(|| need(ENV_SIZE))?;
        let seed: SocketAddr = env_var(ENV_SEED)?.ok_or_else(|| need(ENV_SEED))?;
        let job: String = env_var(ENV_JOB)?.unwrap_or_else(|| "job".to_string());
        let mut cfg = MpConfig::default();
        if let Some(t) = env_var::<f64>(ENV_TIMEOUT)? {
            if !(t.is_finite() && t > 0.0) {
                return Err(BootError::Env {
                    var: ENV_TIMEOUT,
                    reason: "not a positive number of seconds",
                }
                .into());
            }
            cfg.op_timeout = Some(Duration::from_secs_f64(t));
        }
        if let Some(us) = env_var::<u64>(ENV_SPIN_US)? {
            cfg.spin = Duration::from_micros(us);
        }
        cfg.homes = env_var::<std::path::PathBuf>(ENV_HOMES)?;
        if let Some(listen) = env_var::<SocketAddr>(ENV_LISTEN)? {
            cfg.listen = listen;
        }
        Communicator::join(rank, size, seed, &job, cfg).await
    }

    /// Joins job `job` as `rank` of `size`: rank 0 listens on `seed`, the
    /// others find it there. Returns once this rank is connected to every
    /// other rank.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), juxta::mp::MpError> {
    /// use juxta::mp::{Communicator, MpConfig};
    /// let seed = "127.0.0.1:47000".parse().unwrap();
    /// let (a, b) = tokio::join!(
    ///     Communicator::join(0, 2, seed, "demo", MpConfig::default()),
    ///     Communicator::join(1, 2, seed, "demo", MpConfig::default()),
    /// );
    /// let (a, b) = (a?, b?);
    /// assert_eq!((a.rank(), b.rank()), (0, 1));
    /// # Ok(()) }
    /// ```
    pub async fn join(
        rank: usize,
        size: usize,
        seed: SocketAddr,
        job: &str,
        mut cfg: MpConfig,
    ) -> Result<Communicator, MpError> {
        if size == 0 || size > MAX_RANKS || rank >= size {
            return Err(BootError::BadLayout { rank, size }.into());
        }
        if rank == 0 {
            cfg.listen = seed;
        }
        let mut home = tempfile::Builder::new();
        home.prefix("juxta-mp-");
        let home = match &cfg.homes {
            Some(dir) => home.tempdir_in(dir),
            None => home.tempdir(),
        }
        .map_err(BootError::Home)?;
        let defaults = PeerConfig::new(home.path());
        let pc = PeerConfig::new(home.path())
            .listen(cfg.listen)
            .compact(true)
            .key_bits(cfg.key_bits)
            .max_message(cfg.max_message)
            // A rank may compute for minutes while its peers' messages
            // wait in the socket: do not cut writers that make no progress.
            .write_timeout(Duration::from_secs(24 * 3600))
            .frame_timeout(Duration::from_secs(24 * 3600))
            .first_message_timeout(cfg.boot_timeout)
            .max_connections_per_addr(defaults.max_connections_per_addr.max(size + 8))
            .max_pending_per_addr(defaults.max_pending_per_addr.max(size + 8));
        let peer = Peer::start(pc).await?;
        let to = juxta_proto::endpoint::ServiceAddress::new(SERVICE, Some(job));
        let wire_to = juxta_proto::endpoint::mangle(&peer.inner.cfg.connection.group_unique, &to);
        // Registered before the bootstrap: a rank that finished it may
        // send before this one has (held until the members are known).
        let inbox = Registered::new(Arc::new(Inbox::new(to, wire_to.clone(), &cfg)), &peer.inner)?;
        let mut boot = peer.listen(BOOT_SERVICE, Some(job))?;
        let deadline = Instant::now() + cfg.boot_timeout;
        let links = if size == 1 {
            vec![None]
        } else if rank == 0 {
            boot_root(&peer, &mut boot, size, job, deadline).await?
        } else {
            boot_rank(&peer, &mut boot, rank, size, seed, job, deadline).await?
        };
        let mut by_peer = HashMap::new();
        for (r, m) in links.iter().enumerate() {
            if let Some(m) = m {
                by_peer.insert(m.remote(), r);
            }
        }
        inbox.set_members(
            by_peer,
            links
                .iter()
                .map(|m| m.as_ref().map(|m| m.remote()))
                .collect(),
        );
        drop(boot);
        Ok(Communicator {
            s: Arc::new(Shared {
                rank,
                size,
                job: job.to_string(),
                cfg,
                links,
                wire_to,
                inbox,
                coll_seq: AtomicU64::new(0),
                peer,
                _home: Some(home),
            }),
        })
    }
}

async fn next(
    boot: &mut Listener,
    deadline: Instant,
    what: &'static str,
) -> Result<crate::EndpointMessage, MpError> {
    match tokio::time::timeout_at(deadline, boot.recv()).await {
        Ok(Some(d)) => Ok(d),
        Ok(None) => Err(MpError::Closed),
        Err(_) => Err(BootError::Timeout(what).into()),
    }
}

async fn proven(m: Messenger, rank: usize, deadline: Instant) -> Result<Messenger, MpError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if !m.wait_compact(left).await {
        return Err(BootError::Unproven(rank).into());
    }
    Ok(m)
}

async fn send(m: &Messenger, job: &str, rank: usize, msg: Message) -> Result<(), MpError> {
    m.send(BOOT_SERVICE, Some(job), msg)
        .await
        .map(|_| ())
        .map_err(|source| MpError::Send { rank, source })
}

/// Rank 0: collects every rank's hello, then sends everyone the table.
async fn boot_root(
    peer: &Peer,
    boot: &mut Listener,
    size: usize,
    job: &str,
    deadline: Instant,
) -> Result<Vec<Option<Messenger>>, MpError> {
    let mut seen: Vec<Option<(PeerId, String)>> = vec![None; size];
    let mut left = size - 1;
    while left > 0 {
        let d = next(boot, deadline, "the other ranks' hellos").await?;
        let Some(from) = d.verified_sender() else {
            continue;
        };
        let m = &d.message;
        if text(m, "kind").as_deref() != Some("hello") {
            continue;
        }
        let r: Option<usize> = text(m, "rank").and_then(|s| s.parse().ok());
        let sz: Option<usize> = text(m, "size").and_then(|s| s.parse().ok());
        let addr: Option<SocketAddr> = text(m, "addr").and_then(|s| s.parse().ok());
        match (r, sz, addr) {
            (Some(r), Some(sz), Some(a)) if sz == size && r > 0 && r < size => {
                match &seen[r] {
                    None => {
                        seen[r] = Some((from, a.to_string()));
                        left -= 1;
                    }
                    // The same rank saying hello again (it resends).
                    Some((p, _)) if *p == from => {}
                    Some(_) => {
                        tracing::warn!(rank = r, %from, "hello from a second peer for a rank ignored")
                    }
                }
            }
            _ => tracing::warn!(%from, "bad hello ignored"),
        }
    }
    let mut table = format!(
        "0 {} {}\n",
        peer.peer_id(),
        peer.local_addr().map(|a| a.to_string()).unwrap_or_default()
    );
    for (r, x) in seen.iter().enumerate().skip(1) {
        let (id, a) = x.as_ref().expect("all ranks seen");
        table.push_str(&format!("{r} {id} {a}\n"));
    }
    let mut links = vec![None];
    for (r, x) in seen.iter().enumerate().skip(1) {
        let (id, _) = x.as_ref().expect("all ranks seen");
        let m = proven(peer.messenger(id)?, r, deadline).await?;
        send(
            &m,
            job,
            r,
            boot_msg(
                "table",
                &[("size", size.to_string()), ("table", table.clone())],
            ),
        )
        .await?;
        links.push(Some(m));
    }
    Ok(links)
}

/// Rank `rank > 0`: hello to the seed, the table back, links to the lower
/// ranks, then waits for the higher ranks' links.
async fn boot_rank(
    peer: &Peer,
    boot: &mut Listener,
    rank: usize,
    size: usize,
    seed: SocketAddr,
    job: &str,
    deadline: Instant,
) -> Result<Vec<Option<Messenger>>, MpError> {
    // Rank 0 may not be listening yet.
    let root = loop {
        match peer.connect(seed).await {
            Ok(m) => break m,
            Err(e) => {
                if Instant::now() >= deadline {
                    tracing::warn!(error = %e, %seed, "seed not reachable");
                    return Err(BootError::Timeout("the seed (rank 0)").into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let root = proven(root, 0, deadline).await?;
    let me = peer.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let hello = boot_msg(
        "hello",
        &[
            ("rank", rank.to_string()),
            ("size", size.to_string()),
            ("addr", me),
        ],
    );
    // Rank 0 may take our connection before its boot listener exists (a
    // message to a service without a listener is dropped): say hello
    // again every half second until the table comes.
    let mut early_links: Vec<PeerId> = Vec::new();
    let table = 'table: loop {
        send(&root, job, 0, hello.clone()).await?;
        let again = (Instant::now() + Duration::from_millis(500)).min(deadline);
        loop {
            let d = match tokio::time::timeout_at(again, boot.recv()).await {
                Ok(Some(d)) => d,
                Ok(None) => return Err(MpError::Closed),
                Err(_) if again >= deadline => {
                    return Err(BootError::Timeout("the table from rank 0").into())
                }
                Err(_) => continue 'table,
            };
            let Some(from) = d.verified_sender() else {
                continue;
            };
            match text(&d.message, "kind").as_deref() {
                Some("table") if from == root.remote() => break 'table text(&d.message, "table"),
                Some("link") => early_links.push(from),
                _ => {}
            }
        }
    };
    let mut entries: Vec<Option<(PeerId, SocketAddr)>> = vec![None; size];
    for line in table.ok_or(BootError::BadTable)?.lines() {
        let mut it = line.split(' ');
        let (Some(r), Some(id), Some(a)) = (it.next(), it.next(), it.next()) else {
            return Err(BootError::BadTable.into());
        };
        let r: usize = r.parse().map_err(|_| BootError::BadTable)?;
        let id: PeerId = id.parse().map_err(|_| BootError::BadTable)?;
        let a: SocketAddr = a.parse().map_err(|_| BootError::BadTable)?;
        if r >= size || entries[r].is_some() {
            return Err(BootError::BadTable.into());
        }
        entries[r] = Some((id, a));
    }
    if entries.iter().any(|e| e.is_none()) || entries[0].map(|e| e.0) != Some(root.remote()) {
        return Err(BootError::BadTable.into());
    }
    let entries: Vec<(PeerId, SocketAddr)> =
        entries.into_iter().map(|e| e.expect("checked")).collect();
    if entries[rank].0 != peer.peer_id() {
        return Err(BootError::BadTable.into());
    }
    let mut links: Vec<Option<Messenger>> = vec![Some(root)];
    for (r, &(id, a)) in entries.iter().enumerate().take(rank).skip(1) {
        let m = proven(peer.connect(a).await?, r, deadline).await?;
        if m.remote() != id {
            return Err(BootError::WrongPeer(r).into());
        }
        send(&m, job, r, boot_msg("link", &[("rank", rank.to_string())])).await?;
        links.push(Some(m));
    }
    links.push(None);
    // Links from the higher ranks.
    let mut linked = vec![false; size];
    let mut left = size - rank - 1;
    let mark = |from: PeerId, linked: &mut Vec<bool>| -> bool {
        match entries.iter().position(|e| e.0 == from) {
            Some(r) if r > rank && !linked[r] => {
                linked[r] = true;
                true
            }
            _ => false,
        }
    };
    for from in early_links {
        if mark(from, &mut linked) {
            left -= 1;
        }
    }
    while left > 0 {
        let d = next(boot, deadline, "the higher ranks' links").await?;
        let Some(from) = d.verified_sender() else {
            continue;
        };
        if text(&d.message, "kind").as_deref() == Some("link") && mark(from, &mut linked) {
            left -= 1;
        }
    }
    for (r, &(id, _)) in entries.iter().enumerate().skip(rank + 1) {
        let m = proven(peer.messenger(&id)?, r, deadline).await?;
        links.push(Some(m));
    }
    Ok(links)
}
