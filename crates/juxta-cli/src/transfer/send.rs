//! `juxta send FILE|DIR`: hashes the files, prints a ticket (valid for
//! `--expires`, default 24 h) and serves the files over a JXTA socket until
//! one receiver has them all (or, with `--keep`, until Ctrl-C or the
//! expiry). When a daemon (`juxta peer`) runs for the home in use, the
//! daemon serves them ([`crate::daemon::serve`]); otherwise this command
//! runs a peer of its own.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use juxta::proto::advertisement::{PipeAdvertisement, PipeType};
use juxta::proto::id::PipeId;
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::ticket::{unix_now, Ticket};
use super::wire::{self, FileEntry, Refusal};
use super::{advertised_addrs, PeerOpts, TransferError};
use crate::daemon::control::{self, Request, SocketError};

/// Bytes per read and per socket write.
pub const CHUNK: usize = 1 << 20;
/// Most receivers served at once (per ticket).
pub const MAX_RECEIVERS: usize = 16;
/// Most refusals being written at once; further refused receivers are
/// dropped without a word (and counted).
pub const MAX_REFUSING: usize = 16;
/// How long a receiver may take to say hello and to send its offsets.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);
/// The default lifetime of a ticket.
pub const DEFAULT_EXPIRES: &str = "24h";
/// The longest lifetime a ticket may be given.
pub const MAX_EXPIRES: Duration = Duration::from_secs(366 * 24 * 3600);
/// How often an attached `juxta send` asks the daemon how its transfer
/// goes.
const POLL: Duration = Duration::from_millis(250);

/// `juxta send` options.
#[derive(clap::Args, Clone, Debug)]
pub struct SendArgs {
    /// The file or directory to send (a directory is sent with its
    /// contents; symbolic links in it are skipped).
    #[arg(required_unless_present = "stop")]
    pub path: Option<PathBuf>,
    /// How long the ticket is valid, e.g. 90s, 30m, 24h, 7d (at most
    /// 366 days). The sender refuses receivers once it has passed.
    #[arg(long, default_value = DEFAULT_EXPIRES, value_parser = parse_expires)]
    pub expires: Duration,
    /// TCP address this command's own peer listens on (default
    /// 0.0.0.0:0; not with a daemon).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Keep serving after a receiver got everything (until Ctrl-C or the
    /// expiry).
    #[arg(long)]
    pub keep: bool,
    /// With a daemon: print the ticket and return; the daemon serves until
    /// the expiry (after the first complete receiver without --keep) or
    /// `juxta send --stop TICKET`.
    #[arg(long)]
    pub detach: bool,
    /// Ask the daemon to stop serving TICKET (no PATH).
    #[arg(long, value_name = "TICKET", conflicts_with_all = ["path", "keep", "detach", "no_daemon"])]
    pub stop: Option<String>,
    /// Run a peer of this command's own even if a daemon runs.
    #[arg(long)]
    pub no_daemon: bool,
    /// Testing: stop sending file data after this many bytes (first
    /// connection only).
    #[arg(long, hide = true)]
    pub test_stop_after: Option<u64>,
    /// Testing: with --test-stop-after, keep the connection open but send
    /// nothing more (instead of closing it).
    #[arg(long, hide = true)]
    pub test_stall: bool,
    #[command(flatten)]
    pub peer: PeerOpts,
}

/// A `--expires` value that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ExpiresError {
    /// Not a duration.
    #[error("{0} (expected a duration such as 90s, 30m, 24h or 7d)")]
    Parse(#[from] humantime::DurationError),
    /// Zero, under a second, or more than [`MAX_EXPIRES`].
    #[error("{0:?} is out of range (1 s to 366 days)")]
    Range(Duration),
}

/// Parses `--expires`: a duration of 1 s to 366 days.
pub fn parse_expires(s: &str) -> Result<Duration, ExpiresError> {
    let d = humantime::parse_duration(s)?;
    if d < Duration::from_secs(1) || d > MAX_EXPIRES {
        return Err(ExpiresError::Range(d));
    }
    Ok(d)
}

/// A time as `2026-11-24T19:40:00Z`.
pub fn utc(unix: u64) -> String {
    let t = std::time::UNIX_EPOCH
        .checked_add(Duration::from_secs(unix.min(super::ticket::MAX_EXPIRES)))
        .unwrap_or(std::time::UNIX_EPOCH);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A file to send: where it is and what the header says.
#[derive(Debug, Clone)]
pub struct Source {
    /// On disk.
    pub disk: PathBuf,
    /// In the header.
    pub entry: FileEntry,
}

/// Lists the files under `root` (the file itself, or a directory's files
/// named `<dir name>/<relative path>`), sorted, skipping symbolic links.
pub fn collect(root: &Path) -> Result<Vec<(PathBuf, String)>, TransferError> {
    let meta = std::fs::symlink_metadata(root)
        .map_err(TransferError::io(format!("reading {}", root.display())))?;
    let name = root
        .canonicalize()
        .ok()
        .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
        .ok_or_else(|| TransferError::Usage(format!("{}: has no file name", root.display())))?;
    if meta.is_file() || (meta.file_type().is_symlink() && root.is_file()) {
        return Ok(vec![(root.to_path_buf(), name)]);
    }
    if !meta.is_dir() {
        return Err(TransferError::Usage(format!(
            "{}: not a file or directory",
            root.display()
        )));
    }
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), name)];
    while let Some((dir, rel)) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(TransferError::io(format!(
            "reading directory {}",
            dir.display()
        )))?;
        for e in rd {
            let e = e.map_err(TransferError::io(format!("reading {}", dir.display())))?;
            let ft = e
                .file_type()
                .map_err(TransferError::io(format!("reading {}", e.path().display())))?;
            let Some(n) = e.file_name().to_str().map(str::to_string) else {
                eprintln!("juxta: skipping {} (name not UTF-8)", e.path().display());
                continue;
            };
            let r = format!("{rel}/{n}");
            if ft.is_symlink() {
                eprintln!("juxta: skipping symbolic link {}", e.path().display());
            } else if ft.is_dir() {
                stack.push((e.path(), r));
            } else if ft.is_file() {
                out.push((e.path(), r));
            }
        }
    }
    if out.len() > wire::MAX_FILES {
        return Err(TransferError::Usage(format!(
            "{} files is more than a transfer may carry ({})",
            out.len(),
            wire::MAX_FILES
        )));
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// SHA-256 and size of a file.
pub fn hash_file(p: &Path) -> Result<([u8; 32], u64), TransferError> {
    let mut f =
        std::fs::File::open(p).map_err(TransferError::io(format!("opening {}", p.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut n: u64 = 0;
    loop {
        let k = f
            .read(&mut buf)
            .map_err(TransferError::io(format!("reading {}", p.display())))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((h.finalize().into(), n))
}

/// The files a sender serves, hashed.
#[derive(Debug)]
pub struct Offer {
    /// The files.
    pub sources: Vec<Source>,
    /// Their total size.
    pub total: u64,
}

/// Lists and hashes the files under `path` (blocking: call it on a thread
/// that may block).
pub fn prepare(path: &Path) -> Result<Offer, TransferError> {
    let files = collect(path)?;
    let mut sources = Vec::with_capacity(files.len());
    for (disk, path) in files {
        wire::check_path(&path).map_err(|why| wire::WireError::Path {
            path: path.clone(),
            why,
        })?;
        let (sha256, size) = hash_file(&disk)?;
        sources.push(Source {
            disk,
            entry: FileEntry { path, size, sha256 },
        });
    }
    let total = sources
        .iter()
        .try_fold(0u64, |t, s| t.checked_add(s.entry.size))
        .ok_or_else(|| TransferError::Usage("the files' sizes add up beyond 2^64".into()))?;
    Ok(Offer { sources, total })
}

/// How a served ticket is served.
#[derive(Debug, Clone)]
pub struct ServeOpts {
    /// The ticket's expiry (seconds since the epoch): receivers that come
    /// later are refused ([`Refusal::Expired`]) and serving ends.
    pub expires: u64,
    /// End after the first receiver that got everything.
    pub once: bool,
    /// Most receivers at once; more are refused ([`Refusal::Busy`]).
    pub max_receivers: usize,
    /// Testing: stop after this many bytes (first connection; stall
    /// instead of closing when the flag is set).
    pub test_stop: Option<(u64, bool)>,
    /// Report on stderr (`juxta send`) rather than in the log (daemon).
    pub stderr: bool,
}

/// Counters of one served ticket.
#[derive(Debug, Default)]
pub struct ServeStats {
    /// Receivers being served now.
    pub active: AtomicU64,
    /// Receivers that got everything.
    pub completed: AtomicU64,
    /// Transfers that failed.
    pub failed: AtomicU64,
    /// Receivers refused: too many at once.
    pub refused_busy: AtomicU64,
    /// Receivers refused: the ticket had expired.
    pub refused_expired: AtomicU64,
    /// File bytes sent.
    pub bytes_sent: AtomicU64,
}

/// Why serving a ticket ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A receiver got everything (with [`ServeOpts::once`]).
    Completed,
    /// The ticket expired (transfers under way were let finish).
    Expired,
}

impl Ended {
    /// As a word.
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Completed => "completed",
            Ended::Expired => "expired",
        }
    }
}

/// A fresh server socket on `peer` and the ticket naming it.
pub fn bind(peer: &juxta::Peer, expires: u64) -> Result<(JxtaServerSocket, Ticket), TransferError> {
    let local = peer.local_addr().ok_or_else(|| {
        TransferError::Usage("the peer does not listen on TCP: a receiver cannot reach it".into())
    })?;
    let adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    let server = JxtaServerSocket::bind(peer, &adv, socket_config())?;
    let mut addrs = advertised_addrs(local);
    addrs.truncate(super::ticket::MAX_ADDRS);
    let t = Ticket {
        peer: peer.peer_id(),
        pipe: adv.id,
        addrs,
        expires: Some(expires),
    };
    Ok((server, t))
}

fn say(opts: &ServeOpts, msg: std::fmt::Arguments) {
    if opts.stderr {
        eprintln!("juxta: {msg}");
    } else {
        tracing::info!("transfer: {msg}");
    }
}

/// Serves `offer` on `server` until a receiver got everything (with
/// `once`) or the expiry; receivers beyond `max_receivers`, and any after
/// the expiry, are refused with a reason. Dropping the future stops every
/// transfer under way.
pub async fn serve_offer(
    mut server: JxtaServerSocket,
    offer: Arc<Offer>,
    opts: ServeOpts,
    stats: Arc<ServeStats>,
) -> Result<Ended, TransferError> {
    let mut running: tokio::task::JoinSet<(juxta::proto::id::PeerId, Result<u64, TransferError>)> =
        tokio::task::JoinSet::new();
    let mut refusing = tokio::task::JoinSet::new();
    let mut first = true;
    let deadline = |now: u64| {
        tokio::time::Instant::now() + Duration::from_secs(opts.expires.saturating_sub(now))
    };
    let mut at = deadline(unix_now());
    let finished = |r: Result<
        (juxta::proto::id::PeerId, Result<u64, TransferError>),
        tokio::task::JoinError,
    >|
     -> bool {
        stats.active.fetch_sub(1, Ordering::Relaxed);
        match r {
            Ok((who, Ok(sent))) => {
                stats.completed.fetch_add(1, Ordering::Relaxed);
                say(
                    &opts,
                    format_args!("sent {sent} bytes to {who}; transfer complete"),
                );
                true
            }
            Ok((who, Err(e))) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                say(&opts, format_args!("transfer to {who} failed: {e}"));
                false
            }
            Err(e) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                say(&opts, format_args!("transfer task failed: {e}"));
                false
            }
        }
    };
    loop {
        tokio::select! {
            s = server.accept() => {
                let s = s?;
                let why = if unix_now() >= opts.expires {
                    stats.refused_expired.fetch_add(1, Ordering::Relaxed);
                    // The wall clock passed the expiry before the timer
                    // (it jumped forward): end now.
                    at = tokio::time::Instant::now();
                    Refusal::Expired
                } else if running.len() >= opts.max_receivers {
                    stats.refused_busy.fetch_add(1, Ordering::Relaxed);
                    Refusal::Busy
                } else {
                    let stop = opts.test_stop.filter(|_| std::mem::take(&mut first));
                    let (offer, stats2) = (offer.clone(), stats.clone());
                    stats.active.fetch_add(1, Ordering::Relaxed);
                    running.spawn(async move {
                        let who = s.remote();
                        (who, serve(s, &offer.sources, stop, &stats2).await)
                    });
                    continue;
                };
                say(&opts, format_args!("refusing {}: {why}", s.remote()));
                if refusing.len() < MAX_REFUSING {
                    refusing.spawn(refuse(s, why));
                }
            }
            Some(r) = running.join_next(), if !running.is_empty() => {
                if finished(r) && opts.once {
                    return Ok(Ended::Completed);
                }
            }
            Some(_) = refusing.join_next(), if !refusing.is_empty() => {}
            _ = tokio::time::sleep_until(at) => {
                let now = unix_now();
                if now < opts.expires {
                    // The wall clock went back: sleep again.
                    at = deadline(now);
                    continue;
                }
                drop(server);
                say(&opts, format_args!("the ticket expired at {}; no new receiver is served", utc(opts.expires)));
                let mut done = false;
                while let Some(r) = running.join_next().await {
                    done |= finished(r);
                    if done && opts.once {
                        return Ok(Ended::Completed);
                    }
                }
                return Ok(Ended::Expired);
            }
        }
    }
}

/// Tells a receiver why it is not served, then closes (bounded).
async fn refuse(mut s: JxtaSocket, why: Refusal) {
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = wire::write_refusal(&mut s, why).await;
        let _ = s.shutdown().await;
    })
    .await;
}

/// Where a daemon for this command would run: `--home`, else the
/// daemon's default home.
pub fn daemon_home(p: &PeerOpts) -> PathBuf {
    p.home.clone().unwrap_or_else(crate::daemon::default_home)
}

/// The status of the daemon answering at `home`, if one does (a warning
/// when its socket is there but unusable).
pub async fn daemon_status(home: &Path) -> Option<serde_json::Value> {
    match control::request(home, &Request::Status).await {
        Ok(r) if r.ok => r.result,
        Ok(_) => None,
        Err(SocketError::NotRunning { .. }) => None,
        Err(e) => {
            eprintln!("juxta: not using the daemon: {e}");
            None
        }
    }
}

/// Sends a request to the daemon; its result, or its error as a
/// [`TransferError::Daemon`].
pub async fn ask(home: &Path, req: &Request) -> Result<serde_json::Value, TransferError> {
    let r = control::request(home, req).await?;
    match (r.ok, r.result, r.error) {
        (true, Some(v), _) => Ok(v),
        (_, _, Some(e)) => Err(TransferError::Daemon(e)),
        _ => Err(TransferError::Daemon(control::ControlError::new(
            "failed",
            "the daemon's answer has no result",
        ))),
    }
}

/// `juxta send`.
pub async fn main(a: SendArgs) -> Result<(), TransferError> {
    if let Some(t) = &a.stop {
        let home = daemon_home(&a.peer);
        let t = Ticket::parse(t)?;
        let text = t.encode()?;
        let v = ask(&home, &Request::ServeStop { ticket: text }).await?;
        eprintln!(
            "juxta: the daemon stopped serving transfer {} ({} receiver(s) had everything)",
            v["id"], v["completed"]
        );
        return Ok(());
    }
    let path = a
        .path
        .clone()
        .ok_or_else(|| TransferError::Usage("give the FILE or DIR to send".into()))?;
    let home = daemon_home(&a.peer);
    let daemon = if a.no_daemon {
        None
    } else {
        daemon_status(&home).await
    };
    let daemon = daemon.filter(|st| {
        let listens = !st["addresses"]["tcp"].is_null();
        if !listens {
            eprintln!(
                "juxta: the daemon at {} does not listen on TCP (no `listen`), so receivers could not reach it; serving with a peer of this command's own",
                home.display()
            );
        }
        listens
    });
    if daemon.is_some() {
        if a.listen.is_some() || a.test_stop_after.is_some() {
            return Err(TransferError::Usage(format!(
                "a daemon runs at {}: --listen and the test options apply to a peer of send's own; add --no-daemon",
                home.display()
            )));
        }
        return via_daemon(&a, &path, &home).await;
    }
    if a.detach {
        return Err(TransferError::Usage(format!(
            "--detach needs a running daemon that listens on TCP (none at {}); start `juxta peer --home {} --listen ADDR`",
            home.display(),
            home.display()
        )));
    }
    let offer = tokio::task::block_in_place(|| prepare(&path))?;
    let listen = a
        .listen
        .unwrap_or_else(|| "0.0.0.0:0".parse().expect("address"));
    let peer = a.peer.start(Some(listen), &[]).await?;
    let expires = unix_now().saturating_add(a.expires.as_secs());
    let (server, t) = bind(&peer, expires)?;
    let text = t.encode()?;
    println!("{text}");
    eprintln!(
        "juxta: serving {} file(s), {} bytes until {} (the ticket's expiry); on the other side run:\n  juxta receive {text}",
        offer.sources.len(),
        offer.total,
        utc(expires)
    );
    let opts = ServeOpts {
        expires,
        once: !a.keep,
        max_receivers: MAX_RECEIVERS,
        test_stop: a.test_stop_after.map(|n| (n, a.test_stall)),
        stderr: true,
    };
    let stats = Arc::new(ServeStats::default());
    tokio::select! {
        r = serve_offer(server, Arc::new(offer), opts, stats.clone()) => match r? {
            Ended::Completed => Ok(()),
            Ended::Expired if a.keep || stats.completed.load(Ordering::Relaxed) > 0 => Ok(()),
            Ended::Expired => Err(TransferError::ExpiredUnfetched(utc(expires))),
        },
        r = tokio::signal::ctrl_c() => {
            r.map_err(TransferError::io("waiting for Ctrl-C"))?;
            Ok(())
        }
    }
}

/// `juxta send` through the daemon of `home`.
async fn via_daemon(a: &SendArgs, path: &Path, home: &Path) -> Result<(), TransferError> {
    let abs = path
        .canonicalize()
        .map_err(TransferError::io(format!("reading {}", path.display())))?;
    let v = ask(
        home,
        &Request::Serve {
            path: abs.display().to_string(),
            expires_s: a.expires.as_secs(),
            once: !a.keep,
        },
    )
    .await?;
    let text = v["ticket"].as_str().unwrap_or_default().to_string();
    let id = v["id"].as_u64().unwrap_or_default();
    println!("{text}");
    eprintln!(
        "juxta: the daemon at {} (peer {}) serves {} file(s), {} bytes until {}; on the other side run:\n  juxta receive {text}",
        home.display(),
        v["peer"].as_str().unwrap_or_default(),
        v["files"],
        v["bytes"],
        utc(v["expires"].as_u64().unwrap_or_default()),
    );
    if a.detach {
        eprintln!("juxta: detached; stop it with: juxta send --stop {text}");
        return Ok(());
    }
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        tokio::select! {
            r = &mut ctrl_c => {
                r.map_err(TransferError::io("waiting for Ctrl-C"))?;
                let _ = ask(home, &Request::ServeStop { ticket: text.clone() }).await;
                eprintln!("juxta: stopped; the daemon no longer serves this ticket");
                return Ok(());
            }
            _ = tokio::time::sleep(POLL) => {}
        }
        let list = ask(home, &Request::Transfers).await?;
        let find = |k: &str| {
            list[k]
                .as_array()
                .and_then(|l| l.iter().find(|t| t["id"].as_u64() == Some(id)).cloned())
        };
        if find("serving").is_some() {
            continue;
        }
        let Some(e) = find("ended") else {
            return Err(TransferError::Usage(format!(
                "the daemon at {} no longer knows transfer {id} (restarted?)",
                home.display()
            )));
        };
        let completed = e["completed"].as_u64().unwrap_or(0);
        return match e["reason"].as_str() {
            Some("completed") => {
                eprintln!("juxta: sent {} bytes; transfer complete", e["bytes_sent"]);
                Ok(())
            }
            Some("expired") if a.keep || completed > 0 => Ok(()),
            Some("expired") => Err(TransferError::ExpiredUnfetched(utc(e["expires"]
                .as_u64()
                .unwrap_or_default()))),
            other => Err(TransferError::Usage(format!(
                "the daemon ended transfer {id}: {}",
                other.unwrap_or("unknown reason")
            ))),
        };
    }
}

/// Socket settings of both sides: a larger stream window than the default
/// for bulk data.
pub fn socket_config() -> SocketConfig {
    SocketConfig {
        stream_window: 32 << 20,
        ..SocketConfig::default()
    }
}

/// Serves one receiver; returns the file bytes sent.
async fn serve(
    mut s: JxtaSocket,
    sources: &[Source],
    stop: Option<(u64, bool)>,
    stats: &ServeStats,
) -> Result<u64, TransferError> {
    let timed_out = || TransferError::Io {
        what: "waiting for the receiver".into(),
        source: std::io::ErrorKind::TimedOut.into(),
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, wire::read_hello(&mut s))
        .await
        .map_err(|_| timed_out())??;
    let entries: Vec<FileEntry> = sources.iter().map(|s| s.entry.clone()).collect();
    wire::write_header(&mut s, &entries).await?;
    let offsets = tokio::time::timeout(HANDSHAKE_TIMEOUT, wire::read_offsets(&mut s, &entries))
        .await
        .map_err(|_| timed_out())??;
    let mut sent: u64 = 0;
    let limit = stop.map(|(n, _)| n).unwrap_or(u64::MAX);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(8);
    let plan: Vec<(PathBuf, u64, u64)> = sources
        .iter()
        .zip(&offsets)
        .filter(|(src, off)| **off < src.entry.size)
        .map(|(src, off)| (src.disk.clone(), *off, src.entry.size))
        .collect();
    // Reads on a thread of its own, a few chunks ahead of the socket, into
    // buffers that come back once sent (a fresh 1 MiB buffer per chunk
    // would be mapped, faulted in and zeroed every time). At most the
    // channel's 8 plus the two being read and sent are ever allocated.
    let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        use std::io::{Seek, SeekFrom};
        for (disk, off, size) in plan {
            let r = (|| {
                let mut f = std::fs::File::open(&disk)?;
                f.seek(SeekFrom::Start(off))?;
                let mut left = size - off;
                while left > 0 {
                    let want = (left.min(CHUNK as u64)) as usize;
                    let mut buf = back_rx.try_recv().unwrap_or_default();
                    buf.resize(want, 0);
                    f.read_exact(&mut buf)?;
                    left -= want as u64;
                    if tx.blocking_send(Ok(buf)).is_err() {
                        return Ok(());
                    }
                }
                Ok::<(), std::io::Error>(())
            })();
            if let Err(e) = r {
                let _ = tx.blocking_send(Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", disk.display()),
                )));
                return;
            }
        }
    });
    while let Some(chunk) = rx.recv().await {
        let chunk = chunk.map_err(TransferError::io("reading a file to send"))?;
        let room = limit.saturating_sub(sent);
        let n = (chunk.len() as u64).min(room) as usize;
        s.write_all(&chunk[..n])
            .await
            .map_err(TransferError::io("sending"))?;
        sent += n as u64;
        stats.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
        let _ = back_tx.send(chunk);
        if sent >= limit {
            s.flush().await.map_err(TransferError::io("sending"))?;
            eprintln!("juxta: test: stopping after {sent} bytes");
            if stop.is_some_and(|(_, stall)| stall) {
                std::future::pending::<()>().await;
            }
            drop(rx);
            let _ = s.shutdown().await;
            let _ = reader.join();
            return Err(TransferError::Usage(format!(
                "test: stopped after {sent} bytes"
            )));
        }
    }
    let _ = reader.join();
    s.flush().await.map_err(TransferError::io("sending"))?;
    let status = tokio::time::timeout(HANDSHAKE_TIMEOUT, s.read_u8())
        .await
        .map_err(|_| timed_out())?
        .map_err(TransferError::io("waiting for the receiver's verdict"))?;
    if status != wire::STATUS_OK {
        return Err(TransferError::Status(status));
    }
    let _ = s.shutdown().await;
    Ok(sent)
}
