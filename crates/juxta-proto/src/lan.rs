//! Zero-configuration discovery on a LAN and auto-rendezvous, sans-IO.
//!
//! Why it exists: with no seed configured, peers on one LAN must still find
//! each other and a rendezvous, as JXSE's ad-hoc mode does. JXSE does it
//! with its peer view: `PeerView.seed()` propagates (over IP multicast,
//! service `PeerView`, param = the group's unique value) a *probe* carrying
//! the peer's own `jxta:RdvAdvertisement`, whose `RdvRoute` lists the
//! peer's endpoint addresses; an edge adds `PeerView.EdgePeer`. A Juxta
//! peer sends exactly that message as its announcement ([`Announcement`])
//! and reads JXSE's probes the same way.
//!
//! [`LanDiscovery`] decides, on time passed in by its owner:
//! - when to announce (at start, every [`LanConfig::announce_interval_ms`],
//!   and once more, at most every [`MIN_TRIGGERED_GAP_MS`], when an
//!   unknown peer is heard, so a newcomer learns everyone at once);
//! - whom to *verify*: an announcement proves nothing by itself (a CBJX
//!   signature shows who wrote it, not that the sender may speak for it
//!   now: anybody can replay one). So a peer enters the view only after
//!   the owner dialled the announced address and the connection proved the
//!   announced peer ID ([`LanDiscovery::handle_verified`]). Addresses are
//!   taken only on the datagram's own source IP (an announcement cannot
//!   make the LAN dial a third host), a known peer's address is replaced
//!   only by a new successful verification, and a dial that reaches another
//!   peer is counted as forged;
//! - the bounds: the view ([`LanConfig::max_peers`]), the dials under way
//!   ([`LanConfig::max_verifying`]), the remembered failures, and a token
//!   bucket ([`RateLimiter`]) on announcements; what is refused is counted
//!   in [`LanStats`];
//! - auto-rendezvous ([`LanConfig::promote_after_ms`]), see
//!   [`LanDiscovery::handle_timeout`]: an edge that has had neither a lease
//!   nor a verified rendezvous on the LAN for that long promotes itself;
//!   a rendezvous it promoted demotes itself as soon as a verified LAN
//!   rendezvous with a smaller peer ID (compared as strings of their unique
//!   value, the order of JXSE's peer view) is in the view. Two edges that
//!   promote at once thus converge on one rendezvous (the smaller ID), and
//!   a configured rendezvous never demotes.
//!
//! ```
//! use juxta_proto::lan::{Announcement, LanConfig, LanDiscovery, LanEvent};
//! use juxta_proto::id::PeerId;
//! let me: PeerId = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03".parse().unwrap();
//! let other: PeerId = "urn:jxta:cbid-59616261646162614A7874615032503301AB03".parse().unwrap();
//! let mut lan = LanDiscovery::new(LanConfig::default(), me, false, 0);
//! assert!(matches!(lan.poll_event(), Some(LanEvent::Announce)));
//! // An announcement from 10.0.0.2: the owner is asked to dial it.
//! let ann = Announcement::new(other, true, vec!["0.0.0.0:9701".parse().unwrap()]);
//! lan.handle_announcement("10.0.0.2".parse().unwrap(), &ann.to_message("x"), 10).unwrap();
//! let addr = "10.0.0.2:9701".parse().unwrap();
//! assert_eq!(lan.poll_event(), Some(LanEvent::Verify { peer: other, addr }));
//! // A newcomer is answered with this peer's own announcement.
//! assert_eq!(lan.poll_event(), Some(LanEvent::Announce));
//! // The dial proved the ID: the peer (a rendezvous) is in the view.
//! lan.handle_verified(other, addr, Some(other), 20);
//! assert_eq!(lan.view().len(), 1);
//! assert!(matches!(lan.poll_event(), Some(LanEvent::Found { rendezvous: true, .. })));
//! ```

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use crate::advertisement::{RdvAdvertisement, RouteAdvertisement};
use crate::id::{PeerGroupId, PeerId};
use crate::message::Message;
use crate::rendezvous::messages::{PeerViewKind, PeerViewMessage, RDV_SERVICE};
use crate::time::Millis;

/// Default interval between periodic announcements.
pub const DEFAULT_ANNOUNCE_INTERVAL_MS: u64 = 2_000;
/// Least time between two announcements triggered by unknown peers.
pub const MIN_TRIGGERED_GAP_MS: u64 = 100;
/// Most failed verifications remembered (oldest forgotten first).
pub const MAX_FAILED: usize = 256;
/// Most events queued for the owner; beyond this they are dropped and
/// counted in [`LanStats::event_overflow`].
pub const MAX_EVENTS: usize = 4_096;
/// Most endpoint addresses read from one announcement.
pub const MAX_ADDRESSES: usize = 16;
/// Longest announcement element accepted (a JXSE `RdvAdvertisement` is
/// well under 2 KiB).
pub const MAX_ANNOUNCEMENT_LEN: usize = 8_192;

/// Settings of LAN discovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanConfig {
    /// Interval between periodic announcements (default 2 s).
    pub announce_interval_ms: u64,
    /// A verified peer not heard for this long leaves the view (default
    /// 3 intervals + 1 s).
    pub expiry_ms: u64,
    /// Most peers in the view (default 256); further ones are refused and
    /// counted in [`LanStats::full`].
    pub max_peers: usize,
    /// Most verifications (dials) under way at once (default 8); further
    /// announcements of unknown peers are ignored until one ends (counted
    /// in [`LanStats::busy`]).
    pub max_verifying: usize,
    /// After a failed verification the same peer is not dialled again for
    /// this long (default 5 s).
    pub retry_ms: u64,
    /// Announcements accepted per second, all senders together (default
    /// 100; each source IP gets a quarter, see [`Admission`]); the rest are
    /// dropped and counted in [`LanStats::rate_limited`].
    pub rate_per_sec: u32,
    /// Burst of announcements accepted above the rate (default 200).
    pub burst: u32,
    /// Auto-rendezvous: an edge with no lease and no verified LAN
    /// rendezvous for this long promotes itself; `None` (the default):
    /// never.
    pub promote_after_ms: Option<u64>,
}

impl Default for LanConfig {
    fn default() -> LanConfig {
        LanConfig {
            announce_interval_ms: DEFAULT_ANNOUNCE_INTERVAL_MS,
            expiry_ms: 3 * DEFAULT_ANNOUNCE_INTERVAL_MS + 1_000,
            max_peers: 256,
            max_verifying: 8,
            retry_ms: 5_000,
            rate_per_sec: 100,
            burst: 200,
            promote_after_ms: None,
        }
    }
}

impl LanConfig {
    /// Sets the announcement interval (and the expiry to 3 intervals + 1 s).
    pub fn announce_interval_ms(mut self, ms: u64) -> LanConfig {
        self.announce_interval_ms = ms.max(1);
        self.expiry_ms = ms.saturating_mul(3).saturating_add(1_000);
        self
    }

    /// Turns auto-rendezvous on: promote after `ms` without a rendezvous.
    pub fn auto_rendezvous(mut self, ms: u64) -> LanConfig {
        self.promote_after_ms = Some(ms);
        self
    }

    /// Sets the most peers kept in the view.
    pub fn max_peers(mut self, n: usize) -> LanConfig {
        self.max_peers = n;
        self
    }

    /// Sets the rate limit (announcements per second and burst).
    pub fn rate(mut self, per_sec: u32, burst: u32) -> LanConfig {
        self.rate_per_sec = per_sec;
        self.burst = burst;
        self
    }
}

/// Why an announcement was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LanError {
    /// Not a peer view probe, or an unreadable advertisement.
    #[error("malformed announcement: {0}")]
    Malformed(String),
    /// The announcement is this peer's own.
    #[error("own announcement")]
    Own,
    /// The datagram's signer is not the announced peer.
    #[error("announcement for {announced} sent by {sender}")]
    NotSender {
        /// The peer the advertisement names.
        announced: Box<PeerId>,
        /// The peer that sent (signed) the datagram.
        sender: Box<PeerId>,
    },
    /// No TCP address on the datagram's source IP.
    #[error("no address of the announcement is on its source {0}")]
    AddressMismatch(IpAddr),
    /// Over the rate limit.
    #[error("announcement rate limit reached")]
    RateLimited,
    /// The view is full.
    #[error("LAN view full")]
    Full,
    /// Too many verifications under way, or this peer failed one recently.
    #[error("verification deferred")]
    Deferred,
}

/// Counters of LAN discovery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LanStats {
    /// Announcements received (before any check).
    pub received: u64,
    /// Malformed ones (not a probe, bad advertisement, too long).
    pub malformed: u64,
    /// Announcements naming another peer than their sender, or whose
    /// verification dial reached another peer.
    pub forged: u64,
    /// Announcements with no address on their source IP.
    pub address_mismatch: u64,
    /// Announcements over the rate limit.
    pub rate_limited: u64,
    /// Peers refused because the view was full.
    pub full: u64,
    /// Announcements of unknown peers deferred (dials busy, recent failure).
    pub busy: u64,
    /// Verification dials that failed (nobody, or not in time).
    pub unreachable: u64,
    /// Peers that entered the view.
    pub found: u64,
    /// Peers that left it (silent for `expiry_ms`).
    pub lost: u64,
    /// Announcements sent (as asked by [`LanEvent::Announce`]).
    pub announced: u64,
    /// Auto-rendezvous promotions and demotions.
    pub promotions: u64,
    /// See `promotions`.
    pub demotions: u64,
    /// Events dropped because the owner did not drain them.
    pub event_overflow: u64,
}

/// One peer's announcement: who, whether it is a rendezvous, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    /// The announced peer.
    pub peer: PeerId,
    /// Whether it is a rendezvous (no `PeerView.EdgePeer` element).
    pub rendezvous: bool,
    /// Its TCP addresses (an unspecified IP means "the IP I send from").
    pub addrs: Vec<SocketAddr>,
}

impl Announcement {
    /// An announcement.
    pub fn new(peer: PeerId, rendezvous: bool, addrs: Vec<SocketAddr>) -> Announcement {
        Announcement {
            peer,
            rendezvous,
            addrs,
        }
    }

    /// The JXSE peer view probe carrying it (`name` goes in the
    /// advertisement's `Name`).
    pub fn to_message(&self, name: &str) -> Message {
        let group = PeerGroupId::NET;
        let route =
            RouteAdvertisement::direct(self.peer, self.addrs.iter().map(|a| format!("tcp://{a}")));
        let adv = RdvAdvertisement::new(
            group,
            self.peer,
            format!("{RDV_SERVICE}{}", group.unique_value()),
        )
        .with_name(name)
        .with_route(route);
        PeerViewMessage {
            kind: PeerViewKind::Probe,
            rdv_peer: self.peer,
            rdv_adv: adv.to_xml().into(),
            cached: false,
            failure: false,
            edge: !self.rendezvous,
            src_route: None,
        }
        .to_message()
    }

    /// Reads an announcement from a peer view message (a probe or a
    /// response; cached and failure messages are about other peers and
    /// refused). Addresses other than `tcp://ip:port` are skipped; at most
    /// [`MAX_ADDRESSES`] are read.
    pub fn from_message(msg: &Message) -> Result<Announcement, LanError> {
        let pv =
            PeerViewMessage::from_message(msg).map_err(|e| LanError::Malformed(e.to_string()))?;
        if pv.cached || pv.failure {
            return Err(LanError::Malformed("cached or failure message".into()));
        }
        if pv.rdv_adv.len() > MAX_ANNOUNCEMENT_LEN {
            return Err(LanError::Malformed(format!(
                "advertisement of {} bytes",
                pv.rdv_adv.len()
            )));
        }
        let xml = std::str::from_utf8(&pv.rdv_adv)
            .map_err(|_| LanError::Malformed("advertisement not UTF-8".into()))?;
        let adv = RdvAdvertisement::parse(xml).map_err(|e| LanError::Malformed(e.to_string()))?;
        if adv.group_id != PeerGroupId::NET {
            return Err(LanError::Malformed("another group".into()));
        }
        let addrs = adv
            .route
            .iter()
            .flat_map(|r| r.dest.addresses.iter())
            .filter_map(|a| a.strip_prefix("tcp://"))
            .filter_map(|a| a.parse::<SocketAddr>().ok())
            .filter(|a| a.port() != 0)
            .take(MAX_ADDRESSES)
            .collect();
        Ok(Announcement {
            peer: adv.peer_id,
            rendezvous: !pv.edge,
            addrs,
        })
    }

    /// The address to dial for an announcement that came from `source`:
    /// the first one on that IP (an unspecified IP stands for it).
    pub fn address_on(&self, source: IpAddr) -> Option<SocketAddr> {
        self.addrs.iter().find_map(|a| {
            if a.ip() == source {
                Some(*a)
            } else if a.ip().is_unspecified() {
                Some(SocketAddr::new(source, a.port()))
            } else {
                None
            }
        })
    }
}

/// A token bucket: `rate` tokens a second, at most `burst` kept.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    rate: u32,
    burst: u32,
    /// Tokens in thousandths.
    milli_tokens: u64,
    last: Millis,
}

impl RateLimiter {
    /// A full bucket at time `now`.
    pub fn new(rate: u32, burst: u32, now: Millis) -> RateLimiter {
        RateLimiter {
            rate,
            burst,
            milli_tokens: u64::from(burst).saturating_mul(1000),
            last: now,
        }
    }

    /// Takes one token if there is one.
    pub fn allow(&mut self, now: Millis) -> bool {
        let dt = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        let cap = u64::from(self.burst).saturating_mul(1000);
        self.milli_tokens = self
            .milli_tokens
            .saturating_add(dt.saturating_mul(u64::from(self.rate)))
            .min(cap);
        if self.milli_tokens >= 1000 {
            self.milli_tokens -= 1000;
            true
        } else {
            false
        }
    }
}

/// Most source addresses with a bucket of their own in [`Admission`]
/// (all are forgotten when a new one would exceed it).
pub const MAX_SOURCES: usize = 1_024;

/// Admission of announcement datagrams: a token bucket per source IP (a
/// quarter of the rate and burst, at least 1), then one for all sources
/// ([`LanConfig::rate_per_sec`], [`LanConfig::burst`]). One flooding host
/// thus uses up its own bucket, not everybody's; hosts forging many source
/// addresses still meet the global bucket.
#[derive(Debug, Clone)]
pub struct Admission {
    global: RateLimiter,
    per_source: HashMap<IpAddr, RateLimiter>,
    rate: u32,
    burst: u32,
}

impl Admission {
    /// Full buckets at `now`.
    pub fn new(cfg: &LanConfig, now: Millis) -> Admission {
        Admission {
            global: RateLimiter::new(cfg.rate_per_sec, cfg.burst, now),
            per_source: HashMap::new(),
            rate: (cfg.rate_per_sec / 4).max(1),
            burst: (cfg.burst / 4).max(1),
        }
    }

    /// Whether a datagram from `source` may be looked at.
    pub fn admit(&mut self, source: IpAddr, now: Millis) -> bool {
        if !self.per_source.contains_key(&source) && self.per_source.len() >= MAX_SOURCES {
            self.per_source.clear();
        }
        let (rate, burst) = (self.rate, self.burst);
        let own = self
            .per_source
            .entry(source)
            .or_insert_with(|| RateLimiter::new(rate, burst, now));
        own.allow(now) && self.global.allow(now)
    }
}

/// A peer in the LAN view (verified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanPeer {
    /// Its peer ID, proven by the verification dial.
    pub peer: PeerId,
    /// The address the dial reached.
    pub addr: SocketAddr,
    /// Whether its last announcement said it is a rendezvous.
    pub rendezvous: bool,
    /// When it was verified.
    pub since: Millis,
    /// When it was last heard.
    pub last_heard: Millis,
}

/// What the owner must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LanEvent {
    /// Send this peer's announcement (see [`LanDiscovery::announcement`])
    /// to the group now, and count it with
    /// [`LanDiscovery::handle_announced`].
    Announce,
    /// Dial `addr` expecting `peer`, then report with
    /// [`LanDiscovery::handle_verified`].
    Verify {
        /// The announced peer.
        peer: PeerId,
        /// Where it said it listens.
        addr: SocketAddr,
    },
    /// A peer entered the view (or became a rendezvous).
    Found {
        /// The peer.
        peer: PeerId,
        /// Its verified address.
        addr: SocketAddr,
        /// Whether it is a rendezvous (lease it, or link the peer view).
        rendezvous: bool,
    },
    /// A peer left the view.
    Lost(PeerId),
    /// Auto-rendezvous: become a rendezvous.
    Promote,
    /// Auto-rendezvous: become an edge again, leasing these rendezvous.
    Demote(Vec<SocketAddr>),
}

struct Verifying {
    addr: SocketAddr,
    rendezvous: bool,
}

/// The LAN discovery state machine (see the module documentation).
pub struct LanDiscovery {
    cfg: LanConfig,
    me: PeerId,
    rendezvous: bool,
    /// Whether this peer became a rendezvous by promotion (only then does
    /// it demote).
    promoted: bool,
    leased: bool,
    /// Since when no rendezvous was reachable (edge only).
    alone_since: Option<Millis>,
    view: HashMap<PeerId, LanPeer>,
    verifying: HashMap<PeerId, Verifying>,
    failed: VecDeque<(PeerId, Millis)>,
    next_announce: Millis,
    last_triggered: Option<Millis>,
    limiter: RateLimiter,
    events: VecDeque<LanEvent>,
    stats: LanStats,
}

impl std::fmt::Debug for LanDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanDiscovery")
            .field("me", &self.me)
            .field("rendezvous", &self.rendezvous)
            .field("view", &self.view.len())
            .finish_non_exhaustive()
    }
}

/// JXSE's peer view order: the string of the unique value.
fn rank(p: &PeerId) -> String {
    p.to_string()
}

impl LanDiscovery {
    /// A state machine for peer `me`, a rendezvous or not, at `now`. Its
    /// first event is [`LanEvent::Announce`].
    pub fn new(cfg: LanConfig, me: PeerId, rendezvous: bool, now: Millis) -> LanDiscovery {
        let mut l = LanDiscovery {
            cfg,
            me,
            rendezvous,
            promoted: false,
            leased: false,
            alone_since: (!rendezvous).then_some(now),
            view: HashMap::new(),
            verifying: HashMap::new(),
            failed: VecDeque::new(),
            next_announce: now,
            last_triggered: None,
            limiter: RateLimiter::new(cfg.rate_per_sec, cfg.burst, now),
            events: VecDeque::new(),
            stats: LanStats::default(),
        };
        l.handle_timeout(now);
        l
    }

    /// The counters.
    pub fn stats(&self) -> LanStats {
        self.stats
    }

    /// The verified peers, in peer view order.
    pub fn view(&self) -> Vec<LanPeer> {
        let mut v: Vec<LanPeer> = self.view.values().copied().collect();
        v.sort_by_cached_key(|p| rank(&p.peer));
        v
    }

    /// Whether this peer is (now) a rendezvous.
    pub fn is_rendezvous(&self) -> bool {
        self.rendezvous
    }

    /// This peer's announcement with its listen addresses.
    pub fn announcement(&self, addrs: Vec<SocketAddr>) -> Announcement {
        Announcement::new(self.me, self.rendezvous, addrs)
    }

    fn event(&mut self, e: LanEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.stats.event_overflow += 1;
            return;
        }
        self.events.push_back(e);
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<LanEvent> {
        self.events.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next.
    pub fn poll_timeout(&self) -> Option<Millis> {
        let expiry = self
            .view
            .values()
            .map(|p| p.last_heard.saturating_add(self.cfg.expiry_ms))
            .min();
        let promote = match (self.cfg.promote_after_ms, self.alone_since) {
            (Some(d), Some(t)) if !self.rendezvous => Some(t.saturating_add(d)),
            _ => None,
        };
        [Some(self.next_announce), expiry, promote]
            .into_iter()
            .flatten()
            .min()
    }

    /// The owner sent an announcement.
    pub fn handle_announced(&mut self) {
        self.stats.announced += 1;
    }

    /// Checks the rate limit for one announcement datagram; call before
    /// any costly check (signature verification) of the datagram. Counted.
    pub fn admit(&mut self, now: Millis) -> bool {
        if self.limiter.allow(now) {
            true
        } else {
            self.stats.rate_limited += 1;
            false
        }
    }

    /// Counts a datagram refused before it reached
    /// [`handle_announcement`](Self::handle_announcement) (bad signature,
    /// datagram format).
    pub fn count_malformed(&mut self) {
        self.stats.received += 1;
        self.stats.malformed += 1;
    }

    /// An announcement `msg` arrived in a datagram from IP `source`, sent
    /// (signed, when CBJX is on) by `sender`. Every refusal is counted.
    pub fn handle_datagram(
        &mut self,
        source: IpAddr,
        sender: &PeerId,
        msg: &Message,
        now: Millis,
    ) -> Result<(), LanError> {
        self.stats.received += 1;
        let a = match Announcement::from_message(msg) {
            Ok(a) => a,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        if a.peer != *sender {
            self.stats.forged += 1;
            return Err(LanError::NotSender {
                announced: Box::new(a.peer),
                sender: Box::new(*sender),
            });
        }
        self.announcement_in(source, a, now)
    }

    /// An announcement message from IP `source` whose sender is not known
    /// (no signed datagram): the announced ID is checked by the dial alone.
    pub fn handle_announcement(
        &mut self,
        source: IpAddr,
        msg: &Message,
        now: Millis,
    ) -> Result<(), LanError> {
        self.stats.received += 1;
        let a = match Announcement::from_message(msg) {
            Ok(a) => a,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        self.announcement_in(source, a, now)
    }

    fn announcement_in(
        &mut self,
        source: IpAddr,
        a: Announcement,
        now: Millis,
    ) -> Result<(), LanError> {
        if a.peer == self.me {
            return Err(LanError::Own);
        }
        let Some(addr) = a.address_on(source) else {
            self.stats.address_mismatch += 1;
            return Err(LanError::AddressMismatch(source));
        };
        if let Some(p) = self.view.get_mut(&a.peer) {
            if p.addr == addr {
                p.last_heard = now;
                if p.rendezvous != a.rendezvous {
                    p.rendezvous = a.rendezvous;
                    let (peer, addr, rendezvous) = (p.peer, p.addr, p.rendezvous);
                    self.event(LanEvent::Found {
                        peer,
                        addr,
                        rendezvous,
                    });
                    self.check_auto(now);
                }
                return Ok(());
            }
            // Another address for a known peer: believed only once a dial
            // there proves the same ID; the known entry stays meanwhile.
        } else if self.view.len() >= self.cfg.max_peers {
            self.stats.full += 1;
            return Err(LanError::Full);
        }
        if self.verifying.contains_key(&a.peer)
            || self.verifying.len() >= self.cfg.max_verifying
            || self
                .failed
                .iter()
                .any(|(p, t)| *p == a.peer && now < t.saturating_add(self.cfg.retry_ms))
        {
            self.stats.busy += 1;
            return Err(LanError::Deferred);
        }
        self.verifying.insert(
            a.peer,
            Verifying {
                addr,
                rendezvous: a.rendezvous,
            },
        );
        self.event(LanEvent::Verify { peer: a.peer, addr });
        if !self.view.contains_key(&a.peer)
            && self
                .last_triggered
                .is_none_or(|t| now >= t.saturating_add(MIN_TRIGGERED_GAP_MS))
        {
            // A newcomer: answer with our own announcement.
            self.last_triggered = Some(now);
            self.event(LanEvent::Announce);
        }
        Ok(())
    }

    /// The owner's dial of `addr` for `peer` (after [`LanEvent::Verify`])
    /// reached `reached` (`None`: failed).
    pub fn handle_verified(
        &mut self,
        peer: PeerId,
        addr: SocketAddr,
        reached: Option<PeerId>,
        now: Millis,
    ) {
        let Some(v) = self.verifying.remove(&peer) else {
            return;
        };
        if v.addr != addr {
            return;
        }
        match reached {
            Some(r) if r == peer => {
                if !self.view.contains_key(&peer) && self.view.len() >= self.cfg.max_peers {
                    self.stats.full += 1;
                    return;
                }
                let since = self.view.get(&peer).map_or(now, |p| p.since);
                self.view.insert(
                    peer,
                    LanPeer {
                        peer,
                        addr,
                        rendezvous: v.rendezvous,
                        since,
                        last_heard: now,
                    },
                );
                self.stats.found += 1;
                self.event(LanEvent::Found {
                    peer,
                    addr,
                    rendezvous: v.rendezvous,
                });
                self.check_auto(now);
            }
            other => {
                if other.is_some() {
                    self.stats.forged += 1;
                } else {
                    self.stats.unreachable += 1;
                }
                if self.failed.len() >= MAX_FAILED {
                    self.failed.pop_front();
                }
                self.failed.push_back((peer, now));
            }
        }
    }

    /// The owner still holds a working connection to `peer`: as good as
    /// hearing it (a JXSE rendezvous probes less and less often, and stays
    /// in the view while its connection lasts). Unknown peers are ignored.
    pub fn refresh(&mut self, peer: &PeerId, now: Millis) {
        if let Some(p) = self.view.get_mut(peer) {
            p.last_heard = p.last_heard.max(now);
        }
    }

    /// The owner's rendezvous service: whether this peer holds a lease.
    pub fn set_leased(&mut self, leased: bool, now: Millis) {
        self.leased = leased;
        self.check_auto(now);
    }

    /// The owner's rendezvous service changed role by itself (or on a
    /// [`LanEvent::Promote`]/[`LanEvent::Demote`]): keep the announcements
    /// right.
    pub fn set_rendezvous(&mut self, rendezvous: bool, now: Millis) {
        if self.rendezvous != rendezvous {
            self.rendezvous = rendezvous;
            self.next_announce = now;
        }
        self.check_auto(now);
    }

    /// The best verified rendezvous in the view (smallest rank).
    fn best_rdv(&self) -> Option<&LanPeer> {
        self.view
            .values()
            .filter(|p| p.rendezvous)
            .min_by_key(|p| rank(&p.peer))
    }

    fn check_auto(&mut self, now: Millis) {
        let Some(after) = self.cfg.promote_after_ms else {
            return;
        };
        if self.rendezvous {
            self.alone_since = None;
            if self.promoted {
                let me = rank(&self.me);
                if self.best_rdv().is_some_and(|b| rank(&b.peer) < me) {
                    let mut seeds: Vec<(String, SocketAddr)> = self
                        .view
                        .values()
                        .filter(|p| p.rendezvous)
                        .map(|p| (rank(&p.peer), p.addr))
                        .collect();
                    seeds.sort();
                    self.rendezvous = false;
                    self.promoted = false;
                    self.leased = false;
                    self.alone_since = Some(now);
                    self.next_announce = now;
                    self.stats.demotions += 1;
                    self.event(LanEvent::Demote(seeds.into_iter().map(|s| s.1).collect()));
                }
            }
            return;
        }
        if self.leased || self.best_rdv().is_some() {
            self.alone_since = None;
            return;
        }
        let since = *self.alone_since.get_or_insert(now);
        if now >= since.saturating_add(after) {
            self.rendezvous = true;
            self.promoted = true;
            self.alone_since = None;
            self.next_announce = now;
            self.stats.promotions += 1;
            self.event(LanEvent::Promote);
        }
    }

    /// Timers: announcements, expiry of silent peers, auto-rendezvous.
    pub fn handle_timeout(&mut self, now: Millis) {
        let expired: Vec<PeerId> = self
            .view
            .values()
            .filter(|p| now >= p.last_heard.saturating_add(self.cfg.expiry_ms))
            .map(|p| p.peer)
            .collect();
        for p in expired {
            self.view.remove(&p);
            self.stats.lost += 1;
            self.event(LanEvent::Lost(p));
        }
        self.check_auto(now);
        if now >= self.next_announce {
            self.next_announce = now.saturating_add(self.cfg.announce_interval_ms);
            self.event(LanEvent::Announce);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Element;

    fn pid(n: u8) -> PeerId {
        // cbid peer IDs with distinct, ordered unique values.
        format!(
            "urn:jxta:cbid-59616261646162614A78746150325033{n:02X}D9238EC0EEFCB122CB5D3DFE39A9CC03"
        )
        .parse()
        .unwrap()
    }

    fn src() -> IpAddr {
        "10.0.0.2".parse().unwrap()
    }

    fn ann(p: PeerId, rdv: bool) -> Message {
        Announcement::new(p, rdv, vec!["10.0.0.2:9701".parse().unwrap()]).to_message("t")
    }

    fn drain(l: &mut LanDiscovery) -> Vec<LanEvent> {
        std::iter::from_fn(|| l.poll_event()).collect()
    }

    #[test]
    fn announcement_round_trip_is_a_jxse_probe() {
        let a = Announcement::new(pid(1), false, vec!["10.0.0.2:9701".parse().unwrap()]);
        let m = a.to_message("me");
        let pv = PeerViewMessage::from_message(&m).unwrap();
        assert_eq!(pv.kind, PeerViewKind::Probe);
        assert!(pv.edge);
        assert_eq!(pv.rdv_peer, pid(1));
        assert_eq!(Announcement::from_message(&m).unwrap(), a);
        let r = Announcement::new(pid(1), true, a.addrs.clone());
        assert!(
            !PeerViewMessage::from_message(&r.to_message("me"))
                .unwrap()
                .edge
        );
        assert_eq!(Announcement::from_message(&r.to_message("x")).unwrap(), r);
    }

    #[test]
    fn verify_then_found_and_expiry() {
        let me = pid(9);
        let mut l = LanDiscovery::new(LanConfig::default(), me, false, 0);
        assert_eq!(drain(&mut l), vec![LanEvent::Announce]);
        l.handle_datagram(src(), &pid(1), &ann(pid(1), false), 5)
            .unwrap();
        let addr: SocketAddr = "10.0.0.2:9701".parse().unwrap();
        assert_eq!(
            drain(&mut l),
            vec![LanEvent::Verify { peer: pid(1), addr }, LanEvent::Announce]
        );
        // While verifying, repeats are deferred.
        assert_eq!(
            l.handle_datagram(src(), &pid(1), &ann(pid(1), false), 6),
            Err(LanError::Deferred)
        );
        l.handle_verified(pid(1), addr, Some(pid(1)), 7);
        assert_eq!(l.view().len(), 1);
        assert_eq!(
            drain(&mut l),
            vec![LanEvent::Found {
                peer: pid(1),
                addr,
                rendezvous: false
            }]
        );
        // Heard again: refreshed.
        l.handle_datagram(src(), &pid(1), &ann(pid(1), false), 1000)
            .unwrap();
        assert!(drain(&mut l).is_empty());
        // A live connection counts as hearing it.
        l.refresh(&pid(1), 1500);
        l.refresh(&pid(2), 1500);
        let exp = 1500 + l.cfg.expiry_ms;
        l.handle_timeout(exp - 1);
        assert_eq!(l.view().len(), 1);
        l.handle_timeout(exp);
        assert!(l.view().is_empty());
        assert!(drain(&mut l).contains(&LanEvent::Lost(pid(1))));
        assert_eq!(l.stats().lost, 1);
    }

    #[test]
    fn forged_and_malformed_leave_the_view_unchanged() {
        let mut l = LanDiscovery::new(LanConfig::default(), pid(9), false, 0);
        drain(&mut l);
        let addr: SocketAddr = "10.0.0.2:9701".parse().unwrap();
        l.handle_datagram(src(), &pid(1), &ann(pid(1), false), 1)
            .unwrap();
        l.handle_verified(pid(1), addr, Some(pid(1)), 2);
        drain(&mut l);
        let before = l.view();
        // Signed by 2, naming 1.
        assert!(matches!(
            l.handle_datagram(src(), &pid(2), &ann(pid(1), false), 3),
            Err(LanError::NotSender { .. })
        ));
        // Naming 1 from another IP (a replay elsewhere): no address there.
        let other: IpAddr = "10.0.0.66".parse().unwrap();
        assert_eq!(
            l.handle_datagram(other, &pid(1), &ann(pid(1), false), 3),
            Err(LanError::AddressMismatch(other))
        );
        // Unsigned, naming 3, but the dial reaches 4: forged.
        l.handle_announcement(src(), &ann(pid(3), true), 4).unwrap();
        l.handle_verified(pid(3), addr, Some(pid(4)), 5);
        // Unsigned, claiming 1 at a new port: the dial reaches someone
        // else; the known entry keeps its address.
        let moved = Announcement::new(pid(1), true, vec!["10.0.0.2:9999".parse().unwrap()]);
        l.handle_announcement(src(), &moved.to_message("x"), 6)
            .unwrap();
        l.handle_verified(pid(1), "10.0.0.2:9999".parse().unwrap(), None, 7);
        // Garbage.
        let junk = Message::new().with(Element::text("jxta", "PeerView.PeerAdv", "<x/>"));
        assert!(matches!(
            l.handle_announcement(src(), &junk, 8),
            Err(LanError::Malformed(_))
        ));
        assert!(matches!(
            l.handle_announcement(src(), &Message::new(), 8),
            Err(LanError::Malformed(_))
        ));
        assert_eq!(l.view(), before);
        let s = l.stats();
        assert_eq!(
            (s.forged, s.address_mismatch, s.malformed, s.unreachable),
            (2, 1, 2, 1)
        );
        assert!(!drain(&mut l)
            .iter()
            .any(|e| matches!(e, LanEvent::Found { .. })));
    }

    #[test]
    fn bounds_and_rate_limit() {
        let cfg = LanConfig::default().max_peers(2).rate(10, 5);
        let mut l = LanDiscovery::new(cfg, pid(99), false, 0);
        // A burst of 5, then one token per 100 ms.
        let admitted = (0..50).filter(|_| l.admit(0)).count();
        assert_eq!(admitted, 5);
        assert_eq!(l.stats().rate_limited, 45);
        assert!(!l.admit(50));
        assert!(l.admit(100));
        // The view holds 2 peers.
        for n in 1..=3u8 {
            let a = Announcement::new(
                pid(n),
                false,
                vec![format!("10.0.0.{n}:1").parse().unwrap()],
            );
            let ip: IpAddr = format!("10.0.0.{n}").parse().unwrap();
            let r = l.handle_announcement(ip, &a.to_message("x"), 200);
            if n <= 2 {
                r.unwrap();
                l.handle_verified(pid(n), a.addrs[0], Some(pid(n)), 201);
            } else {
                assert_eq!(r, Err(LanError::Full));
            }
        }
        assert_eq!(l.view().len(), 2);
        assert_eq!(l.stats().full, 1);
        // Dials under way are bounded.
        let cfg = LanConfig {
            max_verifying: 2,
            ..LanConfig::default()
        };
        let mut l = LanDiscovery::new(cfg, pid(99), false, 0);
        let mut deferred = 0;
        for n in 1..=5u8 {
            let a = Announcement::new(pid(n), false, vec!["0.0.0.0:7".parse().unwrap()]);
            if l.handle_announcement(src(), &a.to_message("x"), 1).is_err() {
                deferred += 1;
            }
        }
        assert_eq!(deferred, 3);
        assert_eq!(l.stats().busy, 3);
    }

    #[test]
    fn auto_rendezvous_promotes_and_demotes() {
        let cfg = LanConfig::default().auto_rendezvous(1_000);
        let me = pid(5);
        let mut l = LanDiscovery::new(cfg, me, false, 0);
        // The next timer is the promotion's.
        assert_eq!(l.poll_timeout(), Some(1_000));
        drain(&mut l);
        // A lease keeps it an edge.
        l.set_leased(true, 10);
        l.handle_timeout(5_000);
        assert!(!l.is_rendezvous());
        l.set_leased(false, 5_000);
        l.handle_timeout(5_999);
        assert!(!l.is_rendezvous());
        l.handle_timeout(6_000);
        assert!(l.is_rendezvous());
        assert!(drain(&mut l).contains(&LanEvent::Promote));
        // A worse rendezvous (larger ID) appears: stays.
        let addr: SocketAddr = "10.0.0.2:9701".parse().unwrap();
        l.handle_announcement(src(), &ann(pid(7), true), 6_100)
            .unwrap();
        l.handle_verified(pid(7), addr, Some(pid(7)), 6_101);
        assert!(l.is_rendezvous());
        // A better one (smaller ID): demotes, leasing it.
        let addr3: SocketAddr = "10.0.0.3:9701".parse().unwrap();
        let a = Announcement::new(pid(3), true, vec![addr3]);
        l.handle_announcement(addr3.ip(), &a.to_message("x"), 6_200)
            .unwrap();
        l.handle_verified(pid(3), addr3, Some(pid(3)), 6_201);
        assert!(!l.is_rendezvous());
        let ev = drain(&mut l);
        assert!(ev.contains(&LanEvent::Demote(vec![addr3, addr])), "{ev:?}");
        assert_eq!((l.stats().promotions, l.stats().demotions), (1, 1));
        // With a rendezvous in view it stays an edge, past the delay.
        l.handle_timeout(6_201 + 2_000);
        assert!(!l.is_rendezvous());
        // Once they are gone (silent), it promotes again after the delay.
        let gone = 6_201 + l.cfg.expiry_ms;
        l.handle_timeout(gone);
        assert!(l.view().is_empty());
        l.handle_timeout(gone + 1_000);
        assert!(l.is_rendezvous());
        assert_eq!(l.stats().promotions, 2);
    }

    #[test]
    fn configured_rendezvous_never_demotes() {
        let cfg = LanConfig::default().auto_rendezvous(10);
        let mut l = LanDiscovery::new(cfg, pid(9), true, 0);
        l.handle_announcement(src(), &ann(pid(1), true), 1).unwrap();
        l.handle_verified(pid(1), "10.0.0.2:9701".parse().unwrap(), Some(pid(1)), 2);
        assert!(l.is_rendezvous());
        assert_eq!(l.stats().demotions, 0);
    }

    #[test]
    fn one_flooding_source_does_not_starve_the_others() {
        let cfg = LanConfig::default().rate(100, 100);
        let mut a = Admission::new(&cfg, 0);
        let bad: IpAddr = "10.0.0.66".parse().unwrap();
        let good: IpAddr = "10.0.0.2".parse().unwrap();
        let passed = (0..1000).filter(|_| a.admit(bad, 0)).count();
        assert_eq!(passed, 25);
        assert!(a.admit(good, 0));
        // Many forged sources meet the global bucket.
        let many = (0..1000u32)
            .filter(|i| a.admit(IpAddr::from(i.to_be_bytes()), 0))
            .count();
        assert_eq!(many, 100 - 25 - 1);
        assert!(a.per_source.len() <= MAX_SOURCES);
    }

    #[test]
    fn limiter_saturates() {
        let mut r = RateLimiter::new(u32::MAX, u32::MAX, 0);
        assert!(r.allow(u64::MAX));
        let mut r = RateLimiter::new(0, 0, 0);
        assert!(!r.allow(u64::MAX));
    }
}
