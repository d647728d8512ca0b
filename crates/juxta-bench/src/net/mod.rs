//! Network profiles: the two peers of a benchmark in their own network
//! namespaces, joined by a link of a given rate and delay.
//!
//! | profile | rate | RTT | what it stands for |
//! |---|---|---|---|
//! | `loopback` | - | - | both peers on 127.0.0.1 in this namespace (the default, as before) |
//! | `lan` | 100 Mb/s | 70 us | the studies' Fast Ethernet LAN |
//! | `san` | 1 Gb/s | 45 us | the studies' Gigabit Ethernet SAN |
//! | `wan` | 1 Gb/s | 11.2 ms | Grid'5000 Rennes-Toulouse |
//! | `cable` | 4 Mb/s | 30 ms | a cable-modem home link (the thesis' WAN rows) |
//! | `modem56k` | 56 kb/s | 150 ms | the thesis' 56 kbps dial-up WAN (typical operations) |
//!
//! (performance-model.md, section 2.)
//!
//! ## Topology
//!
//! Three namespaces named `juxta-<pid>-<n>-{a,m,b}`: the client side `a`
//! (10.77.0.1), the responder side `b` (10.77.0.2) and a middle `m`:
//!
//! ```text
//!   [a] a0 ==veth== m0 [m: delay element] m1 ==veth== b0 [b]
//!       tbf                                             tbf
//! ```
//!
//! * **Rate**: a `tbf` qdisc on the egress of `a0` and `b0` (each host's NIC,
//!   where the Grid'5000 bottleneck was): it keeps the average at the link
//!   rate and pushes back on TCP through TCP small queues instead of
//!   dropping. Its bucket holds at least one 64 KiB GSO frame so it does not
//!   split them. Like all of tc it counts Ethernet frames without preamble,
//!   FCS and gap, so 1 Gb/s carries at most 119.6 MB/s of TCP payload
//!   (1448 of every 1514 bytes at 125 MB/s).
//! * **Delay**: this kernel has no `netem`, no `fq` (so no EDT timestamps),
//!   and no clang/bpftool; nothing in the kernel can hold a packet. The
//!   delay element (`net/delay.rs`) is a user-space link emulator in `m`: two
//!   threads of this process forward whole L2 frames (`AF_PACKET` with
//!   virtio-net headers, so GSO super-frames stay whole) from one veth to the
//!   other when they are due: serialisation at the link rate, then the
//!   one-way propagation delay (RTT/2). Being below IP, the endpoints' TCP
//!   sees the real RTT, so its window and buffer autotuning are tested (a
//!   TCP relay would hide both). Its own cost (a wake-up per frame and
//!   direction, on a loaded two-core VM) adds about 50 to 100 us to each
//!   RTT: measured RTTs are never below the profile's, and the small-message
//!   RTTs of `lan`/`san` read higher than the published ones (for example
//!   1-byte TCP over `san`: about 120 us for 45 us). Bulk timing is close:
//!   a 64 KiB ping over `lan` takes 6.0 ms (5.3 ms of wire time), 1-byte
//!   pings over `wan` 11.5 ms for 11.2.
//! * **TCP buffers**: Juxta leaves `SO_SNDBUF`/`SO_RCVBUF` unset by default
//!   ([`juxta::PeerConfig::socket_buffer`] is `None`), so Linux autotunes
//!   them. Autotuning grows them up to the namespace's `tcp_wmem`/`tcp_rmem`
//!   maxima, which [`Topology::create`] raises to at least 4 × the profile's
//!   bandwidth-delay product (1.4 MB for `wan`) in `a` and `b`.
//! * **Congestion control**: the route between `a` and `b` says CUBIC
//!   (`congctl`), Linux's default since 2.6.19; the studies' hosts ran its
//!   predecessor BIC. This host defaults to BBR, whose pacing slows
//!   application-limited ping-pongs down (a 64 KiB message then takes more
//!   than one RTT over `wan`), and a namespace may not change its default
//!   to a congestion control outside the host's allowed list.
//!
//! ## Entering the namespaces
//!
//! A thread can switch its own network namespace (`setns`); the sockets it
//! creates stay in that namespace and threads (and child processes) it
//! starts afterwards inherit it. A scenario given a namespaced [`Net`]
//! switches the calling thread into `a` for the run ([`Net::enter_client`],
//! which needs the current-thread runtime the bench uses, so that every
//! socket is created on that thread) and restores it afterwards; responder
//! processes are started with a hidden `--netns b` argument and switch
//! before they build their runtime; responder threads (tests) switch at
//! start.
//!
//! ## Clean-up
//!
//! Dropping the [`Topology`] stops the delay element and deletes the three
//! namespaces (their veths go with them), also when a scenario fails. A
//! namespaced scenario also ends on Ctrl-C with [`NetError::Interrupted`],
//! so that the topology is dropped (this installs tokio's SIGINT handler for
//! the rest of the process: callers that go on after such a run should
//! watch `tokio::signal::ctrl_c` themselves). If the process dies anyway (SIGKILL),
//! the next [`Topology::create`] removes namespaces whose PID is gone
//! ([`clean_stale`]).

mod delay;

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sched::CloneFlags;
use serde::Serialize;

/// Errors setting up a network profile.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Unknown profile name.
    #[error("unknown network profile {0:?} (known: loopback, lan, san, wan, cable, modem56k)")]
    UnknownProfile(String),
    /// Creating namespaces needs privileges this process lacks.
    #[error("network profile {0} needs root (namespaces, veth and tc need CAP_SYS_ADMIN and CAP_NET_ADMIN): run as root, or use --net loopback")]
    NotRoot(&'static str),
    /// Something other than a profile needs namespaces (and root).
    #[error("{0} needs root (namespaces and veth need CAP_SYS_ADMIN and CAP_NET_ADMIN)")]
    NeedsRoot(&'static str),
    /// A command the topology needs is missing.
    #[error("the `{0}` command was not found: install iproute2 (it provides `ip` and `tc`), or use --net loopback")]
    MissingTool(&'static str),
    /// A set-up command failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// the command line
        command: String,
        /// what it printed on stderr
        stderr: String,
    },
    /// Switching a thread into a namespace failed.
    #[error("cannot enter network namespace {ns}: {source}")]
    Enter {
        /// the namespace
        ns: String,
        /// the error
        #[source]
        source: io::Error,
    },
    /// Other I/O with context.
    #[error("{what}: {source}")]
    Io {
        /// what was done
        what: String,
        /// the error
        #[source]
        source: io::Error,
    },
    /// A namespaced scenario was driven by a multi-thread runtime.
    #[error("a scenario over network namespaces must run on a current-thread tokio runtime (its sockets are created by the thread that entered the namespace)")]
    NeedsCurrentThread,
    /// Ctrl-C during a namespaced scenario.
    #[error("interrupted (the network namespaces were removed)")]
    Interrupted,
}

/// A network profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// 127.0.0.1 in this namespace: no topology.
    #[default]
    Loopback,
    /// Fast Ethernet: 100 Mb/s, 70 us RTT.
    Lan,
    /// Gigabit Ethernet: 1 Gb/s, 45 us RTT.
    San,
    /// Grid'5000 WAN: 1 Gb/s, 11.2 ms RTT.
    Wan,
    /// A cable-modem home link: 4 Mb/s, 30 ms RTT.
    Cable,
    /// A 56 kb/s dial-up modem, 150 ms RTT (the thesis' 56 kbps WAN).
    Modem56k,
}

impl Profile {
    /// Every profile.
    pub const ALL: [Profile; 6] = [
        Profile::Loopback,
        Profile::Lan,
        Profile::San,
        Profile::Wan,
        Profile::Cable,
        Profile::Modem56k,
    ];

    /// Parses `loopback|lan|san|wan|cable|modem56k`.
    ///
    /// ```
    /// use juxta_bench::net::Profile;
    /// assert_eq!(Profile::parse("wan").unwrap(), Profile::Wan);
    /// assert!(Profile::parse("adsl").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Profile, NetError> {
        match s.trim() {
            "loopback" | "lo" => Ok(Profile::Loopback),
            "lan" => Ok(Profile::Lan),
            "san" => Ok(Profile::San),
            "wan" => Ok(Profile::Wan),
            "cable" => Ok(Profile::Cable),
            "modem56k" | "modem" => Ok(Profile::Modem56k),
            other => Err(NetError::UnknownProfile(other.to_string())),
        }
    }

    /// The profile's name.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Loopback => "loopback",
            Profile::Lan => "lan",
            Profile::San => "san",
            Profile::Wan => "wan",
            Profile::Cable => "cable",
            Profile::Modem56k => "modem56k",
        }
    }

    /// Link rate in bits per second (`None`: loopback, unlimited).
    pub fn rate_bps(self) -> Option<u64> {
        match self {
            Profile::Loopback => None,
            Profile::Lan => Some(100_000_000),
            Profile::San | Profile::Wan => Some(1_000_000_000),
            Profile::Cable => Some(4_000_000),
            Profile::Modem56k => Some(56_000),
        }
    }

    /// Round-trip propagation delay the link adds (zero for loopback).
    pub fn rtt(self) -> Duration {
        match self {
            Profile::Loopback => Duration::ZERO,
            Profile::Lan => Duration::from_micros(70),
            Profile::San => Duration::from_micros(45),
            Profile::Wan => Duration::from_micros(11_200),
            Profile::Cable => Duration::from_millis(30),
            Profile::Modem56k => Duration::from_millis(150),
        }
    }

    /// Bandwidth × RTT in bytes (zero for loopback).
    pub fn bdp_bytes(self) -> u64 {
        let rate = self.rate_bps().unwrap_or(0) as u128;
        (rate * self.rtt().as_nanos() / 8 / 1_000_000_000) as u64
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Profile {
    type Err = NetError;
    fn from_str(s: &str) -> Result<Profile, NetError> {
        Profile::parse(s)
    }
}

/// Where the two sides of a scenario run: carried in the scenario options.
/// The default is loopback (no namespaces, 127.0.0.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Net {
    /// The profile.
    pub profile: Profile,
    /// Namespace the client side (this process) enters; `None`: stay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ns: Option<String>,
    /// Namespace the responders enter; `None`: stay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub responder_ns: Option<String>,
    /// Address the responders bind.
    pub responder_ip: IpAddr,
}

impl Default for Net {
    fn default() -> Net {
        Net::loopback()
    }
}

impl Net {
    /// Both sides here, on 127.0.0.1.
    pub fn loopback() -> Net {
        Net {
            profile: Profile::Loopback,
            client_ns: None,
            responder_ns: None,
            responder_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// The address peers of the client side (this process) listen on:
    /// [`CLIENT_IP`] in a namespace, else 127.0.0.1.
    pub fn client_ip(&self) -> IpAddr {
        if self.client_ns.is_some() {
            IpAddr::V4(CLIENT_IP)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        }
    }

    /// True when no namespace is involved.
    pub fn is_local(&self) -> bool {
        self.client_ns.is_none() && self.responder_ns.is_none()
    }

    /// Switches the calling thread into the client namespace until the
    /// guard drops (`None` for loopback). Must be called from a task of a
    /// current-thread runtime (checked when inside one).
    pub fn enter_client(&self) -> Result<Option<NsGuard>, NetError> {
        let Some(ns) = &self.client_ns else {
            return Ok(None);
        };
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            if h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread {
                return Err(NetError::NeedsCurrentThread);
            }
        }
        enter(ns).map(Some)
    }
}

/// Runs a namespaced scenario future: enters the client namespace for its
/// duration and ends it with [`NetError::Interrupted`] on Ctrl-C (so the
/// caller's [`Topology`] is dropped and removed). Loopback runs `f` as is.
pub(crate) async fn scoped<T, F>(net: &Net, f: F) -> Result<T, crate::BenchError>
where
    F: std::future::Future<Output = Result<T, crate::BenchError>>,
{
    if net.is_local() {
        return f.await;
    }
    let _guard = net.enter_client()?;
    tokio::select! {
        r = f => r,
        _ = tokio::signal::ctrl_c() => Err(NetError::Interrupted.into()),
    }
}

/// A runtime on a thread of its own inside the responder namespace, for a
/// scenario whose far-side peers live in this process (`ops`): a socket
/// belongs to the namespace of the thread that creates it, and a peer
/// creates sockets (dials, accepts) on the runtime that runs it, so every
/// call on those peers goes through [`FarRuntime::run`]. Without a
/// responder namespace, `run` awaits the future where it is.
pub(crate) struct FarRuntime {
    handle: Option<tokio::runtime::Handle>,
    /// Ends the thread's `block_on` (dropping its runtime) when dropped.
    _stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FarRuntime {
    /// Starts the far side of `net` (nothing for loopback).
    pub(crate) async fn start(net: &Net) -> Result<FarRuntime, NetError> {
        let Some(ns) = net.responder_ns.clone() else {
            return Ok(FarRuntime {
                handle: None,
                _stop: None,
            });
        };
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("far-side".into())
            .spawn(move || {
                let rt = enter_for_good(&ns).and_then(|()| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|source| NetError::Io {
                            what: "building the far side's runtime".into(),
                            source,
                        })
                });
                match rt {
                    Ok(rt) => {
                        let _ = ready_tx.send(Ok(rt.handle().clone()));
                        // Drives the far peers' tasks until stopped; the
                        // runtime (and whatever still runs on it) is
                        // dropped on this thread.
                        rt.block_on(async {
                            let _ = stop_rx.await;
                        });
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|source| NetError::Io {
                what: "starting the far side's thread".into(),
                source,
            })?;
        let handle = ready_rx.await.map_err(|_| NetError::Io {
            what: "starting the far side's thread".into(),
            source: io::Error::other("the thread ended before its runtime was ready"),
        })??;
        Ok(FarRuntime {
            handle: Some(handle),
            _stop: Some(stop_tx),
        })
    }

    /// Runs `f` on the far side and returns its output (a panic in `f` is
    /// resumed here).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, NetError> {
        let Some(h) = &self.handle else {
            return Ok(f.await);
        };
        match h.spawn(f).await {
            Ok(v) => Ok(v),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(NetError::Io {
                what: "running an operation on the far side".into(),
                source: io::Error::other("its runtime stopped"),
            }),
        }
    }
}

/// The calling thread is in another network namespace until this drops;
/// then the thread that drops it returns to the namespace the guard was
/// made in (drop it on the thread that made it).
#[derive(Debug)]
pub struct NsGuard {
    back: File,
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        if let Err(e) = nix::sched::setns(&self.back, CloneFlags::CLONE_NEWNET) {
            tracing::error!(error = %e, "cannot return to the original network namespace");
        }
    }
}

/// Switches the calling thread into namespace `name` (`/run/netns/<name>`,
/// as `ip netns add` makes them) until the guard drops.
pub fn enter(name: &str) -> Result<NsGuard, NetError> {
    let err = |source: io::Error| NetError::Enter {
        ns: name.to_string(),
        source,
    };
    let back = File::open("/proc/thread-self/ns/net").map_err(err)?;
    let target = File::open(Path::new("/run/netns").join(name)).map_err(err)?;
    nix::sched::setns(&target, CloneFlags::CLONE_NEWNET)
        .map_err(|e| err(io::Error::from_raw_os_error(e as i32)))?;
    Ok(NsGuard { back })
}

/// Switches the calling thread into `name` for good (responder processes
/// at start, before their runtime exists).
pub fn enter_for_good(name: &str) -> Result<(), NetError> {
    std::mem::forget(enter(name)?);
    Ok(())
}

/// Runs `f` on a new thread inside namespace `name` and returns its value.
fn in_ns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T, NetError> {
    std::thread::scope(|s| {
        s.spawn(|| enter(name).map(|_g| f()))
            .join()
            .unwrap_or_else(|_| {
                Err(NetError::Io {
                    what: format!("a set-up thread in {name} panicked"),
                    source: io::Error::other("panic"),
                })
            })
    })
}

/// Client (`a`) address.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Responder (`b`) address.
pub const RESPONDER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const PREFIX: &str = "juxta-";

/// What the delay element did so far (both directions summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    /// Frames delivered.
    pub forwarded: u64,
    /// Frames dropped because the element's queue was full.
    pub dropped_full: u64,
    /// Frames too long for the element (dropped).
    pub dropped_truncated: u64,
    /// Frames the kernel refused to send.
    pub send_errors: u64,
}

/// A created profile: namespaces, veths, qdiscs and the delay element.
/// Dropping it removes everything.
///
/// ```no_run
/// use juxta_bench::net::{Profile, Topology};
/// let topo = Topology::create(Profile::parse("wan")?)?;
/// let net = topo.net(); // put this in the scenario options
/// # Ok::<(), juxta_bench::net::NetError>(())
/// ```
pub struct Topology {
    profile: Profile,
    /// Namespaces created so far (removed on drop, last first).
    names: Vec<String>,
    delay: Option<delay::DelayLine>,
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topology")
            .field("profile", &self.profile)
            .field("namespaces", &self.names)
            .finish()
    }
}

fn run(cmd: &str, args: &[&str]) -> Result<(), NetError> {
    let out = Command::new(cmd).args(args).output().map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            NetError::MissingTool(if cmd == "tc" { "tc" } else { "ip" })
        } else {
            NetError::Io {
                what: format!("running {cmd}"),
                source: e,
            }
        }
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetError::Command {
            command: format!("{cmd} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Removes namespaces `juxta-<pid>-…` left by processes that no longer
/// exist (killed before they could clean up). Returns their names.
pub fn clean_stale() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        if run("ip", &["netns", "del", &name]).is_ok() {
            tracing::info!(ns = %name, "removed a stale network namespace");
            removed.push(name);
        }
    }
    removed
}

/// Raises the maximum (third field) of a `tcp_rmem`/`tcp_wmem` triple in
/// the calling thread's namespace to at least `min_max`.
fn raise_tcp_mem(file: &str, min_max: u64) -> io::Result<()> {
    let path = Path::new("/proc/sys/net/ipv4").join(file);
    let cur = std::fs::read_to_string(&path)?;
    let v: Vec<u64> = cur
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() != 3 {
        return Err(io::Error::other(format!("unexpected {file}: {cur:?}")));
    }
    if v[2] >= min_max {
        return Ok(());
    }
    std::fs::write(&path, format!("{} {} {}", v[0], v[1], min_max))
}

fn ns_sysctls(tcp_max: u64) -> io::Result<()> {
    // No IPv6 chatter (router solicitations, DAD) crossing the link.
    for f in ["all", "default"] {
        let p = format!("/proc/sys/net/ipv6/conf/{f}/disable_ipv6");
        if Path::new(&p).exists() {
            std::fs::write(p, "1")?;
        }
    }
    if tcp_max > 0 {
        raise_tcp_mem("tcp_rmem", tcp_max)?;
        raise_tcp_mem("tcp_wmem", tcp_max)?;
    }
    Ok(())
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Gives `dev` in `ns` address `ip`/24 and brings it and `lo` up.
fn address_and_up(ns: &str, dev: &str, ip: Ipv4Addr) -> Result<(), NetError> {
    run(
        "ip",
        &["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", dev],
    )?;
    run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
    run("ip", &["-n", ns, "link", "set", dev, "up"])
}

impl Topology {
    /// Creates the profile's topology (nothing for loopback). Needs root and
    /// iproute2 (`ip`, `tc`). Removes stale namespaces of dead processes
    /// first.
    pub fn create(profile: Profile) -> Result<Topology, NetError> {
        let mut t = Topology {
            profile,
            names: Vec::new(),
            delay: None,
        };
        let Some(rate) = profile.rate_bps() else {
            return Ok(t);
        };
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(NetError::NotRoot(profile.name()));
        }
        run("ip", &["-V"])?;
        run("tc", &["-V"])?;
        clean_stale();
        let base = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let (a, m, b) = (
            format!("{base}-a"),
            format!("{base}-m"),
            format!("{base}-b"),
        );
        for n in [&a, &m, &b] {
            run("ip", &["netns", "add", n])?;
            t.names.push(n.clone());
        }
        run(
            "ip",
            &[
                "-n", &a, "link", "add", "a0", "type", "veth", "peer", "name", "m0", "netns", &m,
            ],
        )?;
        run(
            "ip",
            &[
                "-n", &m, "link", "add", "m1", "type", "veth", "peer", "name", "b0", "netns", &b,
            ],
        )?;
        // Twice the BDP in flight plus slack, at least the Linux defaults.
        let tcp_max = (4 * profile.bdp_bytes()).max(4 << 20);
        for (ns, dev, ip) in [(&a, "a0", CLIENT_IP), (&b, "b0", RESPONDER_IP)] {
            in_ns(ns, || ns_sysctls(tcp_max))?.map_err(|source| NetError::Io {
                what: format!("setting the TCP buffer limits of {ns}"),
                source,
            })?;
            address_and_up(ns, dev, ip)?;
            run(
                "ip",
                &[
                    "-n",
                    ns,
                    "route",
                    "replace",
                    "10.77.0.0/24",
                    "dev",
                    dev,
                    "proto",
                    "kernel",
                    "scope",
                    "link",
                    "src",
                    &ip.to_string(),
                    "congctl",
                    "cubic",
                ],
            )?;
            // The bucket holds one 64 KiB GSO frame (or 1 ms at the rate);
            // the queue 2 MB (TCP small queues keep it far shorter).
            let burst = (rate / 8 / 1000).max(96 * 1024);
            run(
                "tc",
                &[
                    "-n",
                    ns,
                    "qdisc",
                    "add",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    &format!("{rate}bit"),
                    "burst",
                    &burst.to_string(),
                    "limit",
                    &(2u64 << 20).to_string(),
                ],
            )?;
        }
        in_ns(&m, || ns_sysctls(0))?.map_err(|source| NetError::Io {
            what: format!("setting up {m}"),
            source,
        })?;
        for dev in ["m0", "m1"] {
            run("ip", &["-n", &m, "link", "set", dev, "up"])?;
        }
        // Room for the BDP in each direction several times over.
        let max_bytes = (8 * profile.bdp_bytes() as usize).max(16 << 20);
        t.delay = Some(
            delay::DelayLine::start(
                &m,
                "m0",
                "m1",
                delay::Link {
                    rate_bps: rate,
                    delay: profile.rtt() / 2,
                    max_frames: 65_536,
                    max_bytes,
                },
            )
            .map_err(|source| NetError::Io {
                what: format!("starting the delay element in {m}"),
                source,
            })?,
        );
        Ok(t)
    }

    /// The profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The namespaces (client, middle, responder; empty for loopback).
    pub fn namespaces(&self) -> &[String] {
        &self.names
    }

    /// What the scenarios need to run across this topology.
    pub fn net(&self) -> Net {
        if self.names.len() < 3 {
            return Net::loopback();
        }
        Net {
            profile: self.profile,
            client_ns: Some(self.names[0].clone()),
            responder_ns: Some(self.names[2].clone()),
            responder_ip: IpAddr::V4(RESPONDER_IP),
        }
    }

    /// Counters of the delay element (zero for loopback).
    pub fn stats(&self) -> LinkStats {
        let mut s = LinkStats::default();
        if let Some(d) = &self.delay {
            for c in &d.counters {
                s.forwarded += c.forwarded.load(Ordering::Relaxed);
                s.dropped_full += c.dropped_full.load(Ordering::Relaxed);
                s.dropped_truncated += c.dropped_truncated.load(Ordering::Relaxed);
                s.send_errors += c.send_errors.load(Ordering::Relaxed);
            }
        }
        s
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let s = self.stats();
        if s.dropped_full + s.dropped_truncated + s.send_errors > 0 {
            tracing::warn!(stats = ?s, profile = %self.profile, "the delay element lost frames");
        }
        // The forwarding threads hold sockets in the middle namespace.
        self.delay.take();
        for n in self.names.drain(..).rev() {
            if let Err(e) = run("ip", &["netns", "del", &n]) {
                tracing::error!(ns = %n, error = %e, "cannot remove a network namespace");
            }
        }
    }
}

/// Two namespaces `juxta-<pid>-<n>-{a,b}` joined by a bare veth (`a0`,
/// `b0`; no rate limit, no delay element, IPv6 off, neighbours fixed so no
/// ARP crosses it): for a lane whose bytes the kernel cannot count per
/// socket (UDP, such as libp2p's QUIC), run across it so that the client
/// interface's counters are exactly that lane's traffic
/// ([`link_counters`]). Dropping it deletes both namespaces.
///
/// ```no_run
/// use juxta_bench::net::{link_counters, VethPair, PAIR_CLIENT_DEV};
/// let pair = VethPair::create()?;
/// // start the client in pair.client_ns(), the responder in pair.responder_ns()
/// let c = link_counters(pair.client_ns(), PAIR_CLIENT_DEV)?;
/// println!("{} bytes sent", c.tx_payload());
/// # Ok::<(), juxta_bench::net::NetError>(())
/// ```
#[derive(Debug)]
pub struct VethPair {
    names: Vec<String>,
}

/// The client's interface of a [`VethPair`].
pub const PAIR_CLIENT_DEV: &str = "a0";
const PAIR_CLIENT_MAC: &str = "02:6a:78:00:00:01";
const PAIR_RESPONDER_MAC: &str = "02:6a:78:00:00:02";

impl VethPair {
    /// Creates the pair (needs root and iproute2).
    pub fn create() -> Result<VethPair, NetError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(NetError::NeedsRoot("a veth pair between two namespaces"));
        }
        run("ip", &["-V"])?;
        clean_stale();
        let base = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let (a, b) = (format!("{base}-a"), format!("{base}-b"));
        let mut pair = VethPair { names: Vec::new() };
        for n in [&a, &b] {
            run("ip", &["netns", "add", n])?;
            pair.names.push(n.clone());
            in_ns(n, || ns_sysctls(0))?.map_err(|source| NetError::Io {
                what: format!("setting up {n}"),
                source,
            })?;
        }
        run(
            "ip",
            &[
                "-n",
                &a,
                "link",
                "add",
                "a0",
                "address",
                PAIR_CLIENT_MAC,
                "type",
                "veth",
                "peer",
                "name",
                "b0",
                "address",
                PAIR_RESPONDER_MAC,
                "netns",
                &b,
            ],
        )?;
        for (ns, dev, ip, other_ip, other_mac) in [
            (&a, "a0", CLIENT_IP, RESPONDER_IP, PAIR_RESPONDER_MAC),
            (&b, "b0", RESPONDER_IP, CLIENT_IP, PAIR_CLIENT_MAC),
        ] {
            address_and_up(ns, dev, ip)?;
            run(
                "ip",
                &[
                    "-n",
                    ns,
                    "neigh",
                    "replace",
                    &other_ip.to_string(),
                    "lladdr",
                    other_mac,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ],
            )?;
        }
        Ok(pair)
    }

    /// The client's namespace (address [`CLIENT_IP`], interface
    /// [`PAIR_CLIENT_DEV`]).
    pub fn client_ns(&self) -> &str {
        &self.names[0]
    }

    /// The responder's namespace (address [`RESPONDER_IP`]).
    pub fn responder_ns(&self) -> &str {
        &self.names[1]
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for n in self.names.drain(..).rev() {
            if let Err(e) = run("ip", &["netns", "del", &n]) {
                tracing::error!(ns = %n, error = %e, "cannot remove a network namespace");
            }
        }
    }
}

/// Ethernet (14), IPv4 (20) and UDP (8) headers: what an interface counts
/// per frame of a UDP datagram beyond its payload (a GSO frame carries one
/// set of headers for all its segments and is counted once).
pub const UDP_FRAME_OVERHEAD: u64 = 14 + 20 + 8;

/// An interface's counters (`/proc/net/dev`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Bytes received (frames, L2 headers included).
    pub rx_bytes: u64,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes sent (frames, L2 headers included).
    pub tx_bytes: u64,
    /// Frames sent.
    pub tx_packets: u64,
}

impl LinkCounters {
    /// UDP payload bytes sent, when every frame sent was one UDP datagram
    /// over IPv4 (as on a [`VethPair`]).
    pub fn tx_payload(&self) -> u64 {
        self.tx_bytes
            .saturating_sub(self.tx_packets.saturating_mul(UDP_FRAME_OVERHEAD))
    }

    /// UDP payload bytes received (as [`LinkCounters::tx_payload`]).
    pub fn rx_payload(&self) -> u64 {
        self.rx_bytes
            .saturating_sub(self.rx_packets.saturating_mul(UDP_FRAME_OVERHEAD))
    }

    /// Reads interface `dev` from `/proc/net/dev` text.
    pub fn parse(dev_table: &str, dev: &str) -> Option<LinkCounters> {
        dev_table.lines().find_map(|line| {
            let (name, rest) = line.split_once(':')?;
            if name.trim() != dev {
                return None;
            }
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            // rx: bytes packets errs drop fifo frame compressed multicast,
            // then tx: bytes packets ...
            (f.len() >= 10).then(|| LinkCounters {
                rx_bytes: f[0],
                rx_packets: f[1],
                tx_bytes: f[8],
                tx_packets: f[9],
            })
        })
    }
}

/// The counters of interface `dev` in namespace `ns` (read by a thread
/// that enters it: `/proc/thread-self/net/dev` shows that thread's
/// namespace).
pub fn link_counters(ns: &str, dev: &str) -> Result<LinkCounters, NetError> {
    let table =
        in_ns(ns, || std::fs::read_to_string("/proc/thread-self/net/dev"))?.map_err(|source| {
            NetError::Io {
                what: format!("reading the interfaces of {ns}"),
                source,
            }
        })?;
    LinkCounters::parse(&table, dev).ok_or_else(|| NetError::Io {
        what: format!("reading {dev}'s counters in {ns}"),
        source: io::Error::other("no such interface"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_describe() {
        for p in Profile::ALL {
            assert_eq!(Profile::parse(p.name()).unwrap(), p);
        }
        assert!(matches!(
            Profile::parse("adsl"),
            Err(NetError::UnknownProfile(n)) if n == "adsl"
        ));
        assert_eq!(Profile::Wan.bdp_bytes(), 1_400_000);
        assert_eq!(Profile::Lan.rate_bps(), Some(100_000_000));
        assert_eq!(Profile::Loopback.rate_bps(), None);
        assert!(Net::default().is_local());
        assert_eq!(Net::default().responder_ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn interface_counters_are_read_from_proc_net_dev() {
        let table = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n    \
a0:    1094      12    0    0    0     0          0         0     2084      22    0    0    0     0       0          0\n";
        let c = LinkCounters::parse(table, "a0").unwrap();
        assert_eq!(
            (c.rx_bytes, c.rx_packets, c.tx_bytes, c.tx_packets),
            (1094, 12, 2084, 22)
        );
        assert_eq!(c.tx_payload(), 2084 - 22 * 42);
        assert_eq!(c.rx_payload(), 1094 - 12 * 42);
        assert_eq!(LinkCounters::parse(table, "b0"), None);
        assert_eq!(LinkCounters::parse("a0: 1 2 x\n", "a0"), None);
        // Counters a peer cannot make negative: saturating.
        let odd = LinkCounters {
            tx_bytes: 10,
            tx_packets: 5,
            ..LinkCounters::default()
        };
        assert_eq!(odd.tx_payload(), 0);
    }

    #[test]
    fn loopback_topology_is_empty() {
        let t = Topology::create(Profile::Loopback).unwrap();
        assert!(t.namespaces().is_empty());
        assert_eq!(t.net(), Net::loopback());
        assert_eq!(t.stats(), LinkStats::default());
    }
}
