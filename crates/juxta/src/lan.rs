//! Zero-configuration discovery on a LAN and auto-rendezvous: the tokio
//! driver of the sans-IO [`LanDiscovery`] (`juxta_proto::lan`).
//!
//! Why it exists: peers on one LAN with nothing configured but
//! [`crate::PeerConfig::lan`] find each other and a rendezvous, as JXSE's
//! ad-hoc mode does. Each peer announces itself by IP multicast (a JXSE
//! peer view probe carrying its `jxta:RdvAdvertisement` and TCP address,
//! sent to `224.0.1.85:1234` like JXSE's `PeerView.seed()`), and keeps the
//! peers it hears once a dial to the announced address proves the
//! announced peer ID. A verified rendezvous is added to the rendezvous
//! service as a seed (an edge leases it as if configured; a rendezvous
//! links its peer view to it). With [`LanConfig::promote_after_ms`] an
//! edge that finds no rendezvous for that long becomes one, and gives the
//! role up again when a verified rendezvous with a smaller peer ID shows
//! up (the rule is in `juxta_proto::lan`).
//!
//! What an attacker on the LAN can and cannot do: announcements are
//! rate-limited before their signature is checked, per source IP and for
//! all together ([`juxta_proto::lan::Admission`]; a flood costs token
//! buckets, not RSA verifications), malformed and forged ones are counted in
//! [`LanHandle::stats`] and change nothing; an announcement naming another
//! peer cannot redirect its traffic, since an address is dialled only on
//! the datagram's source IP and believed only once the connection proves
//! the peer ID (Juxta's handshake; towards JXSE peers, the welcome line and
//! CBJX as on any connection, see docs/security.md). The dial names the
//! peer it expects, so one that reaches another peer is closed at the
//! welcome and counted in [`LanStats::unreachable`] (and the peer's
//! [`crate::Stats::identity_refused`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use juxta::lan::LanConfig;
//! use juxta::{Peer, PeerConfig};
//! let a = Peer::start(PeerConfig::new("/tmp/lan-a").lan(LanConfig::default())).await?;
//! let lan = a.lan().unwrap();
//! // Wait until some other peer of the LAN is verified.
//! let found = lan.wait_for(|v| !v.is_empty(), Duration::from_secs(5)).await;
//! println!("found {found:?}, counters {:?}", lan.stats());
//! # Ok(()) }
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use juxta_proto::endpoint::{mangle, ServiceAddress};
use juxta_proto::id::{PeerGroupId, PeerId};
use juxta_proto::lan::{Admission, LanDiscovery, LanEvent};
use juxta_proto::message::Message;
use juxta_proto::rendezvous::messages::peerview_address;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::peer::Inner;
use crate::rendezvous::RendezvousHandle;

pub use juxta_proto::lan::{Announcement, LanConfig, LanError, LanPeer, LanStats};

/// Announcements queued from the multicast receive loop to the LAN task;
/// beyond this they are dropped and counted as rate-limited.
const QUEUE: usize = 256;
/// Longest a verification dial may take.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// One announcement handed over by the receive loop.
pub(crate) struct Heard {
    from: IpAddr,
    sender: PeerId,
    message: Message,
}

/// The receive loop's side of LAN discovery: which datagrams are
/// announcements, the rate limit, and the queue to the task.
pub(crate) struct LanTap {
    to: ServiceAddress,
    limiter: Mutex<Admission>,
    clock: juxta_proto::time::Clock,
    tx: mpsc::Sender<Heard>,
    counters: Arc<TapCounters>,
}

#[derive(Default)]
struct TapCounters {
    rate_limited: AtomicU64,
    bad: AtomicU64,
}

impl LanTap {
    /// Whether a datagram for `to` (as on the wire) is an announcement.
    pub(crate) fn wants(&self, to: &ServiceAddress) -> bool {
        *to == self.to
    }

    /// Takes a token from the buckets of `from`; counts a refusal.
    pub(crate) fn admit(&self, from: IpAddr) -> bool {
        let now = self.clock.now();
        let ok = self
            .limiter
            .lock()
            .map(|mut l| l.admit(from, now))
            .unwrap_or(false);
        if !ok {
            self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Counts a datagram that failed its checks (format, signature).
    pub(crate) fn count_bad(&self) {
        self.counters.bad.fetch_add(1, Ordering::Relaxed);
    }

    /// Queues a checked datagram for the task (never waits).
    pub(crate) fn deliver(&self, from: SocketAddr, d: crate::transport::multicast::Datagram) {
        let h = Heard {
            from: from.ip(),
            sender: d.source,
            message: d.message,
        };
        if self.tx.try_send(h).is_err() {
            self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A snapshot of LAN discovery.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LanStatus {
    /// The verified peers, in peer view order.
    pub view: Vec<LanPeer>,
    /// The counters (including datagrams refused by the receive loop).
    pub stats: LanStats,
    /// Whether this peer announces itself as a rendezvous.
    pub rendezvous: bool,
}

/// The application's handle on LAN discovery (cheap to clone); get it
/// with [`crate::Peer::lan`].
#[derive(Clone)]
pub struct LanHandle {
    status: watch::Receiver<LanStatus>,
    counters: Arc<TapCounters>,
}

impl std::fmt::Debug for LanHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanHandle")
            .field("status", &*self.status.borrow())
            .finish()
    }
}

impl LanHandle {
    /// The current state.
    pub fn status(&self) -> LanStatus {
        let mut s = self.status.borrow().clone();
        s.stats.rate_limited += self.counters.rate_limited.load(Ordering::Relaxed);
        let bad = self.counters.bad.load(Ordering::Relaxed);
        s.stats.received += bad;
        s.stats.malformed += bad;
        s
    }

    /// The verified peers.
    pub fn view(&self) -> Vec<LanPeer> {
        self.status.borrow().view.clone()
    }

    /// The counters.
    pub fn stats(&self) -> LanStats {
        self.status().stats
    }

    /// Waits until `pred` holds for the view, or `timeout`; returns the
    /// view that satisfied it, or `None`.
    pub async fn wait_for(
        &self,
        mut pred: impl FnMut(&[LanPeer]) -> bool,
        timeout: Duration,
    ) -> Option<Vec<LanPeer>> {
        let mut rx = self.status.clone();
        let r = tokio::time::timeout(timeout, rx.wait_for(|s| pred(&s.view))).await;
        match r {
            Ok(Ok(s)) => Some(s.view.clone()),
            _ => None,
        }
    }

    /// Waits until this peer announces itself as a rendezvous (`true`) or
    /// an edge (`false`), or `timeout`; returns whether it did.
    pub async fn wait_role(&self, rendezvous: bool, timeout: Duration) -> bool {
        let mut rx = self.status.clone();
        let r = tokio::time::timeout(timeout, rx.wait_for(|s| s.rendezvous == rendezvous)).await;
        matches!(r, Ok(Ok(_)))
    }
}

impl crate::Peer {
    /// LAN discovery, when [`crate::PeerConfig::lan`] is set (and multicast
    /// could be opened).
    pub fn lan(&self) -> Option<&LanHandle> {
        self.lan.as_ref()
    }
}

/// Starts LAN discovery: installs the tap on the multicast socket and
/// spawns the task. `listen`: the peer's TCP listen address.
pub(crate) fn spawn(
    inner: &Arc<Inner>,
    cfg: LanConfig,
    rdv: RendezvousHandle,
    listen: Option<SocketAddr>,
) -> (Option<LanHandle>, Option<JoinHandle<()>>) {
    let Some(mc) = inner.multicast.clone() else {
        return (None, None);
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    let counters = Arc::new(TapCounters::default());
    let to = mangle(inner.group_unique(), &peerview_address(&PeerGroupId::NET));
    mc.set_lan_tap(LanTap {
        to,
        limiter: Mutex::new(Admission::new(&cfg, 0)),
        clock: inner.clock,
        tx,
        counters: counters.clone(),
    });
    // The address announced: an unspecified IP is replaced by the
    // multicast interface's, else by the one the kernel sends to the group
    // from (JXSE answers a probe on the address it names); failing both it
    // stays unspecified, and Juxta receivers take the datagram's source IP.
    let addrs: Vec<SocketAddr> = listen
        .map(|mut a| {
            if a.ip().is_unspecified() {
                let iface = mc.config().interface;
                let ip = if iface.is_unspecified() {
                    source_ip_towards(mc.group()).unwrap_or(iface)
                } else {
                    iface
                };
                a.set_ip(ip.into());
            }
            a
        })
        .into_iter()
        .collect();
    let is_rdv = rdv.is_rendezvous();
    let (status_tx, status_rx) = watch::channel(LanStatus {
        rendezvous: is_rdv,
        ..LanStatus::default()
    });
    let me = *inner.identity.peer_id();
    let machine = LanDiscovery::new(cfg, me, is_rdv, 0);
    let (vtx, vrx) = mpsc::channel(cfg.max_verifying.max(1));
    let task = Task {
        inner: Arc::downgrade(inner),
        mc,
        machine,
        rdv,
        addrs,
        clock: inner.clock,
        vtx,
        status: status_tx,
    };
    let h = tokio::spawn(task.run(rx, vrx));
    (
        Some(LanHandle {
            status: status_rx,
            counters,
        }),
        Some(h),
    )
}

type Verified = (PeerId, SocketAddr, Option<PeerId>);

/// The local IP the kernel would send to `group` from (a UDP "connect"
/// sends nothing).
fn source_ip_towards(group: std::net::SocketAddrV4) -> Option<std::net::Ipv4Addr> {
    let s = std::net::UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    s.connect(group).ok()?;
    match s.local_addr().ok()?.ip() {
        IpAddr::V4(ip) if !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

struct Task {
    inner: Weak<Inner>,
    mc: Arc<crate::transport::multicast::Multicast>,
    machine: LanDiscovery,
    rdv: RendezvousHandle,
    addrs: Vec<SocketAddr>,
    clock: juxta_proto::time::Clock,
    vtx: mpsc::Sender<Verified>,
    status: watch::Sender<LanStatus>,
}

impl Task {
    fn now(&self) -> u64 {
        self.clock.now()
    }

    async fn run(
        mut self,
        mut heard: mpsc::Receiver<Heard>,
        mut verified: mpsc::Receiver<Verified>,
    ) {
        let mut rdv_status = self.rdv.watch_status();
        let mut last_rdv = rdv_status.borrow().is_rendezvous;
        loop {
            if !self.drain().await {
                return;
            }
            self.publish();
            let now = self.now();
            let next = self
                .machine
                .poll_timeout()
                .unwrap_or(now.saturating_add(1_000));
            let at: tokio::time::Instant = self.clock.instant(next).into();
            tokio::select! {
                h = heard.recv() => {
                    let Some(h) = h else { return };
                    let now = self.now();
                    if let Err(e) = self.machine.handle_datagram(h.from, &h.sender, &h.message, now) {
                        tracing::debug!(from = %h.from, error = %e, "LAN announcement not used");
                    }
                }
                v = verified.recv() => {
                    let Some((peer, addr, reached)) = v else { return };
                    let now = self.now();
                    self.machine.handle_verified(peer, addr, reached, now);
                }
                c = rdv_status.changed() => {
                    if c.is_err() {
                        return;
                    }
                    let st = rdv_status.borrow_and_update().clone();
                    let now = self.now();
                    self.machine.set_leased(st.leased_to.is_some(), now);
                    if st.is_rendezvous != last_rdv {
                        last_rdv = st.is_rendezvous;
                        self.machine.set_rendezvous(st.is_rendezvous, now);
                    }
                }
                _ = tokio::time::sleep_until(at) => {
                    let now = self.now();
                    if let Some(inner) = self.inner.upgrade() {
                        for p in self.machine.view() {
                            if inner.connection(&p.peer).is_some_and(|c| !c.is_closed()) {
                                self.machine.refresh(&p.peer, now);
                            }
                        }
                    }
                    self.machine.handle_timeout(now);
                }
            }
        }
    }

    /// Carries out the machine's events; false once the peer is gone.
    async fn drain(&mut self) -> bool {
        while let Some(ev) = self.machine.poll_event() {
            let Some(inner) = self.inner.upgrade() else {
                return false;
            };
            match ev {
                LanEvent::Announce => {
                    let a = self.machine.announcement(self.addrs.clone());
                    let msg = a.to_message(&inner.cfg.name);
                    match self
                        .mc
                        .send(&peerview_address(&PeerGroupId::NET), msg)
                        .await
                    {
                        Ok(_) => self.machine.handle_announced(),
                        Err(e) => tracing::debug!(error = %e, "LAN announcement not sent"),
                    }
                }
                LanEvent::Verify { peer, addr } => {
                    let tx = self.vtx.clone();
                    let tasks = inner.clone();
                    tasks.tasks.spawn(async move {
                        let r = tokio::time::timeout(
                            VERIFY_TIMEOUT,
                            crate::peer::connect_to_peer(&inner, addr, Some(peer)),
                        )
                        .await;
                        let reached = match r {
                            Ok(Ok(m)) => Some(m.remote()),
                            _ => None,
                        };
                        let _ = tx.send((peer, addr, reached)).await;
                    });
                }
                LanEvent::Found {
                    peer,
                    addr,
                    rendezvous,
                } => {
                    tracing::info!(%peer, %addr, rendezvous, "LAN peer verified");
                    if rendezvous {
                        let _ = self.rdv.add_seed(addr).await;
                    }
                }
                LanEvent::Lost(p) => tracing::info!(peer = %p, "LAN peer silent, dropped"),
                LanEvent::Promote => {
                    tracing::info!("no rendezvous on the LAN: becoming one");
                    let _ = self.rdv.set_role(true, Vec::new()).await;
                }
                LanEvent::Demote(seeds) => {
                    tracing::info!(?seeds, "a better rendezvous on the LAN: becoming an edge");
                    let _ = self.rdv.set_role(false, seeds).await;
                }
            }
        }
        true
    }

    fn publish(&self) {
        let st = LanStatus {
            view: self.machine.view(),
            stats: self.machine.stats(),
            rendezvous: self.machine.is_rendezvous(),
        };
        self.status.send_if_modified(|old| {
            if *old != st {
                *old = st;
                true
            } else {
                false
            }
        });
    }
}
