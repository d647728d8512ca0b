//! Streams and files from the command line (issue #15 item 3), in the
//! spirit of iroh's dumbpipe and sendme, each command running a peer of
//! its own (no daemon needed):
//!
//! - `juxta pipe listen NAME` / `juxta pipe send NAME`: messages over a
//!   unicast pipe found by name through discovery ([`pipe_cmd`]);
//! - `juxta socket listen NAME` / `juxta socket connect NAME`: netcat over
//!   a JXTA socket ([`socket_cmd`]);
//! - `juxta send FILE|DIR` / `juxta receive TICKET`: resumable, verified
//!   file transfer over a JXTA socket named by a ticket ([`send`],
//!   [`receive`], [`ticket`], [`wire`]).
//!
//! `juxta send` uses the daemon (`juxta peer`) when one runs for the home
//! in use; see docs/cli-transfer.md.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use juxta::proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement};
use juxta::proto::id::PeerId;
use juxta::rendezvous::RendezvousConfig;
use juxta::{Messenger, Peer, PeerConfig};

pub mod pipe_cmd;
pub mod receive;
pub mod send;
pub mod socket_cmd;
pub mod ticket;
pub mod wire;

/// How many default homes (`~/.juxta/cli-<n>`) are tried before giving up.
const HOMES: usize = 64;

/// Options every command of this module takes.
#[derive(clap::Args, Clone, Debug)]
pub struct PeerOpts {
    /// Home directory of this command's peer (identity, cache). Default:
    /// the first free ~/.juxta/cli-<n> (a home serves one running peer at
    /// a time).
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Seconds to wait for the other side (connecting, finding the name).
    #[arg(long, default_value_t = 15.0)]
    pub timeout: f64,
    /// RSA key size of a new identity.
    #[arg(long, default_value_t = 2048, hide = true)]
    pub key_bits: usize,
}

/// How the two sides of `pipe` and `socket` meet.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MeetOpts {
    /// TCP address this peer listens on (listeners, and with --seed the
    /// other side too, default to 0.0.0.0:0, an ephemeral port on every
    /// interface; a listener prints its address at start).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// A rendezvous to meet through (repeatable): names are published to
    /// it and looked up through it.
    #[arg(long)]
    pub seed: Vec<SocketAddr>,
    /// A peer to connect to directly (repeatable), e.g. the address the
    /// listening side printed.
    #[arg(long)]
    pub connect: Vec<SocketAddr>,
}

impl MeetOpts {
    /// The listen address of the side that looks the name up: `--listen`,
    /// or with a rendezvous 0.0.0.0:0 (answers routed through the
    /// rendezvous come back to this address), or none.
    pub fn connect_listen(&self) -> Option<SocketAddr> {
        self.listen
            .or_else(|| (!self.seed.is_empty()).then(|| "0.0.0.0:0".parse().expect("addr")))
    }
}

/// Errors of the transfer commands.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// Starting or using the peer failed.
    #[error(transparent)]
    Peer(#[from] juxta::PeerError),
    /// Every default home is in use.
    #[error("every home ~/.juxta/cli-0..{HOMES} is in use by a running peer; pass --home")]
    NoFreeHome,
    /// No home directory to put the default home in.
    #[error("no HOME environment variable; pass --home")]
    NoHome,
    /// A bad `--timeout` or other option.
    #[error("{0}")]
    Usage(String),
    /// A ticket that cannot be read.
    #[error(transparent)]
    Ticket(#[from] ticket::TicketError),
    /// None of the addresses answered.
    #[error("could not reach the peer: {}", describe_tried(.0))]
    Unreachable(Vec<(SocketAddr, String)>),
    /// An address (first) answered as another peer (second) than the one
    /// the ticket names (third).
    #[error("{} answered as peer {}, expected {}", .0.0, .0.1, .0.2)]
    WrongPeer(Box<(SocketAddr, PeerId, PeerId)>),
    /// A rendezvous did not grant a lease.
    #[error("no rendezvous among {0:?} answered within the timeout")]
    NoRendezvous(Vec<SocketAddr>),
    /// `pipe send`/`socket connect` without a way to meet.
    #[error("give --connect ADDR (the listener's address) or --seed ADDR (a rendezvous)")]
    NowhereToLook,
    /// The name was not found in time.
    #[error("no listener for {name:?} found within {secs:.0} s{}", if .tried.is_empty() { String::new() } else { format!(" ({})", .tried.join("; ")) })]
    NameNotFound {
        /// The name.
        name: String,
        /// Seconds waited.
        secs: f64,
        /// What failed on the way.
        tried: Vec<String>,
    },
    /// Discovery failed.
    #[error(transparent)]
    Discovery(#[from] juxta::discovery::DiscoveryError),
    /// A pipe failed.
    #[error(transparent)]
    Pipe(#[from] juxta::pipe::PipeError),
    /// A socket failed to open.
    #[error(transparent)]
    Socket(#[from] juxta::socket::SocketError),
    /// The peer could not be shut down gracefully (what it had queued may
    /// not have reached the other side).
    #[error("closing the peer: {0}")]
    Close(#[from] juxta::CloseError),
    /// Local file or stream I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The transfer protocol failed.
    #[error(transparent)]
    Wire(#[from] wire::WireError),
    /// A file's content does not match the SHA-256 the sender announced.
    #[error("{0}: SHA-256 mismatch (the partial data was discarded; receive again)")]
    HashMismatch(String),
    /// The target exists with other content.
    #[error("{0} exists already with other content; move it away or choose another --dir")]
    Exists(PathBuf),
    /// The sender reported a failure.
    #[error("the receiver reported status {0} (transfer not complete)")]
    Status(u8),
    /// The connection ended before all data arrived.
    #[error("the sender stopped after {got} of {want} bytes; the partial data is kept, run the same receive again to resume")]
    Truncated {
        /// Bytes received in this run (resumed bytes included).
        got: u64,
        /// Bytes expected.
        want: u64,
    },
    /// The ticket's expiry has passed (checked before dialling).
    #[error("the ticket expired at {at} ({ago} ago); ask the sender for a new one")]
    Expired {
        /// When it expired (UTC).
        at: String,
        /// How long ago.
        ago: String,
    },
    /// The ticket expired before any receiver fetched everything.
    #[error("the ticket expired at {0} before a receiver fetched everything")]
    ExpiredUnfetched(String),
    /// The sender's peer answered, but no longer serves the ticket's pipe.
    #[error("the sender no longer serves this ticket (it expired, was stopped, or its juxta send ended): {0}")]
    NotServed(juxta::socket::SocketError),
    /// The daemon's control socket.
    #[error(transparent)]
    Control(#[from] crate::daemon::control::SocketError),
    /// The daemon refused a request.
    #[error("the daemon refused: {0}")]
    Daemon(crate::daemon::control::ControlError),
    /// A message too large for a pipe.
    #[error("{0}: {1} bytes is more than a pipe message may carry ({2}); use juxta send")]
    TooLarge(PathBuf, u64, u64),
}

fn describe_tried(t: &[(SocketAddr, String)]) -> String {
    t.iter()
        .map(|(a, e)| format!("{a}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl TransferError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TransferError {
        let what = what.into();
        move |source| TransferError::Io { what, source }
    }
}

/// Runs `f` on a multi-thread runtime and turns its result into an exit
/// code (errors printed as `juxta: ...`).
pub fn run<F>(f: F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), TransferError>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let r = rt.block_on(f);
    // A read of stdin blocked on a thread must not hold the exit up.
    rt.shutdown_timeout(Duration::from_millis(100));
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("juxta: {e}");
            ExitCode::FAILURE
        }
    }
}

impl PeerOpts {
    /// The timeout as a duration.
    pub fn timeout(&self) -> Result<Duration, TransferError> {
        if self.timeout.is_finite() && self.timeout > 0.0 && self.timeout < 1e9 {
            Ok(Duration::from_secs_f64(self.timeout))
        } else {
            Err(TransferError::Usage(format!(
                "--timeout {}: expected a positive number of seconds",
                self.timeout
            )))
        }
    }

    /// Starts this command's peer: in `--home`, or in the first free
    /// default home.
    pub async fn start(
        &self,
        listen: Option<SocketAddr>,
        seeds: &[SocketAddr],
    ) -> Result<Arc<Peer>, TransferError> {
        let timeout = self.timeout()?;
        let cfg = |home: PathBuf| {
            let mut c = PeerConfig::new(home);
            c.key_bits = self.key_bits;
            c.connect_timeout = timeout;
            c.listen = listen;
            if !seeds.is_empty() {
                c = c.rendezvous(RendezvousConfig::edge(seeds.to_vec()));
            }
            c
        };
        let peer = match &self.home {
            Some(h) => Peer::start(cfg(h.clone())).await?,
            None => {
                let base = std::env::var_os("HOME")
                    .filter(|h| !h.is_empty())
                    .map(|h| PathBuf::from(h).join(".juxta"))
                    .ok_or(TransferError::NoHome)?;
                let mut found = None;
                for n in 0..HOMES {
                    match Peer::start(cfg(base.join(format!("cli-{n}")))).await {
                        Ok(p) => {
                            found = Some(p);
                            break;
                        }
                        Err(juxta::PeerError::HomeLocked { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                found.ok_or(TransferError::NoFreeHome)?
            }
        };
        if !seeds.is_empty() {
            let leased = match peer.rendezvous() {
                Some(r) => r.wait_leased(timeout).await,
                None => None,
            };
            if leased.is_none() {
                return Err(TransferError::NoRendezvous(seeds.to_vec()));
            }
        }
        Ok(Arc::new(peer))
    }
}

/// The addresses to tell others for a peer listening on `local`: itself,
/// or for an unspecified address (0.0.0.0, ::) the address of the
/// interface the default route leaves by (found without sending anything)
/// and loopback.
pub fn advertised_addrs(local: SocketAddr) -> Vec<SocketAddr> {
    if !local.ip().is_unspecified() {
        return vec![local];
    }
    let mut out = Vec::new();
    // A connected UDP socket only picks a route; no datagram is sent.
    let probe = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
        .and_then(|s| s.local_addr());
    if let Ok(a) = probe {
        if !a.ip().is_unspecified() && !a.ip().is_loopback() {
            out.push(SocketAddr::new(a.ip(), local.port()));
        }
    }
    out.push(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        local.port(),
    ));
    out
}

/// Connects to the first of `addrs` that answers (all tried at once),
/// within the peer's connect timeout; the error lists every address and
/// why it failed.
pub async fn connect_any(
    peer: &Arc<Peer>,
    addrs: &[SocketAddr],
) -> Result<Messenger, TransferError> {
    let mut set = tokio::task::JoinSet::new();
    for (i, a) in addrs.iter().enumerate() {
        let (p, a) = (peer.clone(), *a);
        set.spawn(async move { (i, a, p.connect(a).await) });
    }
    let mut tried = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok((_, _, Ok(m))) => {
                set.abort_all();
                return Ok(m);
            }
            Ok((_, a, Err(e))) => tried.push((a, e.to_string())),
            Err(e) => return Err(TransferError::Usage(format!("connect task failed: {e}"))),
        }
    }
    Err(TransferError::Unreachable(tried))
}

/// Connects to every `--connect` address (each must answer); returns the
/// peers reached.
pub async fn connect_all(
    peer: &Arc<Peer>,
    addrs: &[SocketAddr],
) -> Result<Vec<PeerId>, TransferError> {
    let mut out = Vec::new();
    for a in addrs {
        let m = connect_any(peer, std::slice::from_ref(a)).await?;
        out.push(m.remote());
    }
    Ok(out)
}

/// Publishes a unicast pipe advertisement named `name` (after flushing
/// stale ones of that name a previous run left in this home's cache).
pub async fn publish_name(peer: &Peer, name: &str) -> Result<PipeAdvertisement, TransferError> {
    let d = peer.discovery();
    for old in d
        .get_local(AdvKind::Adv, Some("Name"), Some(name), 100)
        .await?
    {
        if matches!(&old, Advertisement::Pipe(p) if p.name.as_deref() == Some(name)) {
            d.flush(&old.id()).await?;
        }
    }
    let adv = PipeAdvertisement::new(
        juxta::proto::id::PipeId::new_random(),
        juxta::proto::advertisement::PipeType::Unicast,
    )
    .with_name(name);
    d.publish(&Advertisement::Pipe(adv.clone())).await?;
    Ok(adv)
}

/// Looks for a listener of the pipe named `name`: asks `targets` (every
/// connected peer if empty, e.g. the rendezvous) for pipe advertisements
/// of that name and resolves each found until one peer holds its input
/// pipe; retried until `timeout` (the listener may start later).
pub async fn find_name(
    peer: &Peer,
    name: &str,
    targets: &[PeerId],
    timeout: Duration,
) -> Result<(PipeAdvertisement, PeerId), TransferError> {
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    let mut tried: Vec<String> = Vec::new();
    let note = |tried: &mut Vec<String>, s: String| {
        if !tried.contains(&s) && tried.len() < 8 {
            tried.push(s);
        }
    };
    let round = Duration::from_secs(2);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(TransferError::NameNotFound {
                name: name.into(),
                secs: started.elapsed().as_secs_f64(),
                tried,
            });
        }
        let per = left.min(round);
        let asks: Vec<Option<PeerId>> = if targets.is_empty() {
            vec![None]
        } else {
            targets.iter().copied().map(Some).collect()
        };
        let mut advs = Vec::new();
        for t in asks {
            match peer
                .discovery()
                .get_remote(AdvKind::Adv, Some("Name"), Some(name), 10, t, per)
                .await
            {
                Ok(found) => advs.extend(found.into_iter().filter_map(|a| match a {
                    Advertisement::Pipe(p) if p.name.as_deref() == Some(name) => Some(p),
                    _ => None,
                })),
                Err(e) => note(&mut tried, format!("discovery: {e}")),
            }
        }
        advs.dedup_by(|a, b| a.id == b.id);
        for adv in advs {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match peer.pipes().resolve(&adv, targets, left.min(round)).await {
                Ok(holder) => return Ok((adv, holder)),
                Err(e) => note(&mut tried, format!("resolving {}: {e}", adv.id)),
            }
        }
        tokio::time::sleep(Duration::from_millis(300).min(left)).await;
    }
}

/// Reads stdin on a thread of its own: chunks (lines when `lines`) arrive
/// on the channel, which closes at end of input; a read error arrives as
/// the last item.
pub fn stdin_reader(lines: bool) -> tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>> {
    use std::io::{BufRead, Read};
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        loop {
            let mut buf = Vec::new();
            let r = if lines {
                lock.read_until(b'\n', &mut buf)
            } else {
                buf.resize(64 << 10, 0);
                lock.read(&mut buf).inspect(|&n| buf.truncate(n))
            };
            match r {
                Ok(0) => return,
                Ok(_) => {
                    if tx.blocking_send(Ok(buf)).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    rx
}

/// Writes `data` to stdout and flushes (on this worker thread, allowed to
/// block).
pub fn write_stdout(data: &[u8]) -> Result<(), TransferError> {
    use std::io::Write;
    tokio::task::block_in_place(|| {
        let mut out = std::io::stdout().lock();
        out.write_all(data)?;
        out.flush()
    })
    .map_err(TransferError::io("writing stdout"))
}

/// Tells (on stderr) how others reach a listener.
pub fn announce(peer: &Peer, what: &str, name: &str) {
    let addrs = peer
        .local_addr()
        .map(advertised_addrs)
        .unwrap_or_default()
        .iter()
        .map(|a| format!("--connect {a}"))
        .collect::<Vec<_>>()
        .join(" or ");
    eprintln!(
        "juxta: {what} {name:?} listening as peer {}; the other side can use {addrs}",
        peer.peer_id()
    );
}
