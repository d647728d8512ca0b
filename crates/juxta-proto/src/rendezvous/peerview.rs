//! The rendezvous peer view (JXSE's `rpv.PeerView`): the set of rendezvous
//! a rendezvous knows, sorted by the string form of their peer IDs' unique
//! values, with "up" and "down" neighbours for the walker and the whole set
//! for SRDI placement.
//!
//! Protocol (service `PeerView`, param = group unique value), as JXSE:
//! - a *probe* carries the sender's own `jxta:RdvAdvertisement`; the
//!   receiver adds the sender and answers with a *response* carrying its own
//!   advertisement, plus one *cached* response referring to another member;
//! - a cached response about a peer not in the view triggers a probe to it;
//! - a `PeerView.Failure` message removes the peer it names.
//!
//! Differences from JXSE, all invisible on the wire: every member (not just
//! up/down) is probed each `probe_interval_ms`, a member silent for
//! `failure_timeout_ms` is removed and the failure is announced to the
//! others, and the view is bounded (`max_members`). JXSE's timers (30 s
//! watchdog, 5 min grace) are available as [`PeerViewConfig::jxse`].

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;

use crate::endpoint::ServiceAddress;
use crate::id::{PeerGroupId, PeerId, UniqueKey};
use crate::message::Message;

use super::messages::{peerview_address, PeerViewKind, PeerViewMessage, RdvMessageError};
use super::{Millis, Transmit};

/// Default interval between probes of each member and seed.
pub const DEFAULT_PROBE_INTERVAL_MS: u64 = 500;
/// Default silence after which a member is removed.
pub const DEFAULT_FAILURE_TIMEOUT_MS: u64 = 1_750;
/// Default bound on members.
pub const DEFAULT_MAX_MEMBERS: usize = 1_024;
/// Most seed rendezvous remembered.
pub const MAX_SEEDS: usize = 64;
/// Most transmits queued before the owner drains them; beyond this the
/// oldest is discarded and counted in [`PeerViewStats::transmit_overflow`].
pub const MAX_PENDING_TRANSMITS: usize = 8_192;
/// Most events queued; same policy, counted in
/// [`PeerViewStats::event_overflow`].
pub const MAX_PENDING_EVENTS: usize = 8_192;

/// Peer view timers and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerViewConfig {
    /// Interval between probe rounds.
    pub probe_interval_ms: u64,
    /// Silence after which a member is declared failed.
    pub failure_timeout_ms: u64,
    /// Most members kept.
    pub max_members: usize,
}

impl Default for PeerViewConfig {
    fn default() -> PeerViewConfig {
        PeerViewConfig {
            probe_interval_ms: DEFAULT_PROBE_INTERVAL_MS,
            failure_timeout_ms: DEFAULT_FAILURE_TIMEOUT_MS,
            max_members: DEFAULT_MAX_MEMBERS,
        }
    }
}

impl PeerViewConfig {
    /// JXSE's timers: watchdog every 30 s, 5 min grace.
    pub fn jxse() -> PeerViewConfig {
        PeerViewConfig {
            probe_interval_ms: 30_000,
            failure_timeout_ms: 300_000,
            max_members: DEFAULT_MAX_MEMBERS,
        }
    }
}

/// A change of the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerViewEvent {
    /// A rendezvous joined the view.
    Added(PeerId),
    /// A rendezvous left the view (failed, announced failed, or unreachable).
    Removed(PeerId),
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerViewStats {
    /// Rendezvous not added because the view was full.
    pub refused_full: u64,
    /// Transmits discarded because the owner did not drain the queue.
    pub transmit_overflow: u64,
    /// Events discarded because the owner did not drain the queue.
    pub event_overflow: u64,
    /// Probes or responses refused because they advertised another
    /// rendezvous than their sender.
    pub not_sender: u64,
}

#[derive(Debug, Clone)]
struct Member {
    peer: PeerId,
    adv: Bytes,
    last_heard: Millis,
}

/// The peer view of one rendezvous.
#[derive(Debug)]
pub struct PeerView {
    me: PeerId,
    my_key: UniqueKey,
    my_adv: Bytes,
    /// The peer view service address of the group (every transmit's).
    dest: ServiceAddress,
    cfg: PeerViewConfig,
    /// Keyed by unique value, compared as the string but without
    /// building it ([`UniqueKey`]).
    members: BTreeMap<UniqueKey, Member>,
    seeds: Vec<PeerId>,
    next_probe: Millis,
    referral: usize,
    out: VecDeque<Transmit>,
    events: VecDeque<PeerViewEvent>,
    stats: PeerViewStats,
    generation: u64,
    /// The members' keys in view order (kept sorted as members join and
    /// leave: a probe answer picks its referral by index in it).
    order: Vec<UniqueKey>,
    /// The members' advertisements (the bytes each member's entry holds)
    /// and whose they are: a referral to a member carries its
    /// advertisement, already read (a third of a full view's messages).
    by_adv: HashMap<Bytes, PeerId>,
}

impl PeerView {
    /// A view for rendezvous `me`, whose `jxta:RdvAdvertisement` is `my_adv`.
    /// The first probe round happens at the first `handle_timeout`.
    pub fn new(me: PeerId, my_adv: Bytes, group: PeerGroupId, cfg: PeerViewConfig) -> PeerView {
        PeerView {
            me,
            my_key: me.unique_key(),
            my_adv,
            dest: peerview_address(&group),
            cfg,
            members: BTreeMap::new(),
            seeds: Vec::new(),
            next_probe: 0,
            referral: 0,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: PeerViewStats::default(),
            generation: 0,
            order: Vec::new(),
            by_adv: HashMap::new(),
        }
    }

    /// This rendezvous.
    pub fn me(&self) -> PeerId {
        self.me
    }

    /// The configuration.
    pub fn config(&self) -> &PeerViewConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> PeerViewStats {
        self.stats
    }

    /// Adds a seed rendezvous to probe until it answers (bounded by
    /// [`MAX_SEEDS`]; returns false when full or already known).
    pub fn add_seed(&mut self, seed: PeerId) -> bool {
        if seed == self.me || self.seeds.contains(&seed) || self.seeds.len() >= MAX_SEEDS {
            return false;
        }
        self.seeds.push(seed);
        true
    }

    /// Probes `peer` now (outside the probe rounds): the owner does this
    /// for a seed it has just reached, so that the view forms without
    /// waiting for the next round (`probe_interval_ms`, 30 s with JXSE's
    /// timers).
    pub fn probe_now(&mut self, peer: PeerId) {
        if peer != self.me {
            let probe = self.own(PeerViewKind::Probe);
            self.send(peer, probe);
        }
    }

    /// Changes every time a member joins or leaves (so an owner caching
    /// something computed from [`PeerView::members`] can tell it is stale
    /// without comparing the members).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The members (not including self), in view order.
    pub fn members(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.members.values().map(|m| m.peer)
    }

    /// Number of members (not including self).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the view has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether a peer is a member.
    pub fn contains(&self, peer: &PeerId) -> bool {
        self.members.contains_key(&peer.unique_key())
    }

    /// The next member above self in view order (JXSE's up peer).
    pub fn up(&self) -> Option<PeerId> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.members
            .range::<UniqueKey, _>((Excluded(&self.my_key), Unbounded))
            .next()
            .map(|(_, m)| m.peer)
    }

    /// The next member below self in view order (JXSE's down peer).
    pub fn down(&self) -> Option<PeerId> {
        self.members
            .range::<UniqueKey, _>(..&self.my_key)
            .next_back()
            .map(|(_, m)| m.peer)
    }

    /// Queued output, oldest first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// View changes, oldest first.
    pub fn poll_event(&mut self) -> Option<PeerViewEvent> {
        self.events.pop_front()
    }

    /// When [`PeerView::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Millis> {
        Some(self.next_probe)
    }

    fn send(&mut self, to: PeerId, m: PeerViewMessage) {
        if self.out.len() >= MAX_PENDING_TRANSMITS {
            self.out.pop_front();
            self.stats.transmit_overflow += 1;
        }
        self.out.push_back(Transmit {
            to,
            dest: self.dest.clone(),
            message: m.to_message(),
        });
    }

    fn event(&mut self, e: PeerViewEvent) {
        if self.events.len() >= MAX_PENDING_EVENTS {
            self.events.pop_front();
            self.stats.event_overflow += 1;
        }
        self.events.push_back(e);
    }

    fn own(&self, kind: PeerViewKind) -> PeerViewMessage {
        PeerViewMessage {
            kind,
            rdv_peer: self.me,
            rdv_adv: self.my_adv.clone(),
            cached: false,
            failure: false,
            edge: false,
            src_route: None,
        }
    }

    fn about(&self, m: &Member, kind: PeerViewKind, failure: bool) -> PeerViewMessage {
        PeerViewMessage {
            kind,
            rdv_peer: m.peer,
            rdv_adv: m.adv.clone(),
            cached: true,
            failure,
            edge: false,
            src_route: None,
        }
    }

    /// Adds or refreshes a member; false if the view is full.
    fn upsert(&mut self, peer: PeerId, adv: Bytes, now: Millis) -> bool {
        let key = peer.unique_key();
        if let Some(m) = self.members.get_mut(&key) {
            if m.adv != adv {
                if self.by_adv.get(&m.adv) == Some(&peer) {
                    self.by_adv.remove(&m.adv);
                }
                self.by_adv.insert(adv.clone(), peer);
            }
            m.adv = adv;
            m.last_heard = now;
            return true;
        }
        if self.members.len() >= self.cfg.max_members {
            self.stats.refused_full += 1;
            return false;
        }
        if let Err(at) = self.order.binary_search(&key) {
            self.order.insert(at, key.clone());
        }
        self.by_adv.insert(adv.clone(), peer);
        self.members.insert(
            key,
            Member {
                peer,
                adv,
                last_heard: now,
            },
        );
        self.generation = self.generation.wrapping_add(1);
        self.event(PeerViewEvent::Added(peer));
        true
    }

    fn remove(&mut self, peer: &PeerId, announce: bool) -> bool {
        let key = peer.unique_key();
        let Some(gone) = self.members.remove(&key) else {
            return false;
        };
        if let Ok(at) = self.order.binary_search(&key) {
            self.order.remove(at);
        }
        if self.by_adv.get(&gone.adv) == Some(&gone.peer) {
            self.by_adv.remove(&gone.adv);
        }
        self.generation = self.generation.wrapping_add(1);
        self.event(PeerViewEvent::Removed(gone.peer));
        if announce {
            let notice = self.about(&gone, PeerViewKind::Response, true);
            let others: Vec<PeerId> = self.members().collect();
            for o in others {
                self.send(o, notice.clone());
            }
        }
        true
    }

    /// Handles a message received on the peer view service.
    pub fn handle_message(
        &mut self,
        from: PeerId,
        msg: &Message,
        now: Millis,
    ) -> Result<(), RdvMessageError> {
        // A member's advertisement, unchanged since it was last read (its
        // entry holds those bytes): not parsed again. The sender's own is
        // checked first (probes and answers), then any member's (referrals).
        let member = self.members.get(&from.unique_key());
        let by_adv = &self.by_adv;
        let pv = PeerViewMessage::from_message_known(msg, |adv| {
            member
                .filter(|m| m.adv == adv)
                .map(|m| m.peer)
                .or_else(|| by_adv.get(adv).copied())
        })?;
        self.handle(from, pv, now)
    }

    /// Handles a parsed peer view message from `from` (a proven sender).
    /// `pv.rdv_peer` must be its advertisement's `RdvPeerId`, as
    /// [`PeerViewMessage::from_message`] reads it (the view reuses that
    /// reading when the same advertisement comes again).
    ///
    /// A peer speaks for itself only: a probe or response that is not a
    /// referral (`Cached`) must advertise its sender
    /// ([`RdvMessageError::NotSender`] otherwise), and a failure report
    /// removes a member only when the member itself sends it (leaving). A
    /// third party's failure report about a member not heard from within
    /// the probe interval makes us probe that member instead: it stays
    /// until it fails to answer, as any member does.
    pub fn handle(
        &mut self,
        from: PeerId,
        pv: PeerViewMessage,
        now: Millis,
    ) -> Result<(), RdvMessageError> {
        if pv.rdv_peer == self.me {
            return Ok(());
        }
        if pv.failure {
            if from == pv.rdv_peer {
                self.remove(&pv.rdv_peer, false);
                return Ok(());
            }
            let stale = self
                .members
                .get(&pv.rdv_peer.unique_key())
                .is_some_and(|m| now.saturating_sub(m.last_heard) >= self.cfg.probe_interval_ms);
            if stale {
                self.send(pv.rdv_peer, self.own(PeerViewKind::Probe));
            }
            return Ok(());
        }
        if !pv.cached && pv.rdv_peer != from {
            self.stats.not_sender += 1;
            return Err(RdvMessageError::NotSender {
                claimed: Box::new(pv.rdv_peer),
                sender: Box::new(from),
            });
        }
        match (pv.kind, pv.cached) {
            (PeerViewKind::Probe, false) => {
                if !pv.edge {
                    self.upsert(pv.rdv_peer, pv.rdv_adv, now);
                }
                self.send(from, self.own(PeerViewKind::Response));
                // One referral, round robin over the other members (the
                // members but the sender, in view order; picked by index
                // in the sorted key order, not by filtering the members:
                // that was most of a 1,000-rendezvous view's probe cost).
                let skip = self.order.binary_search(&from.unique_key()).ok();
                let others = self.order.len() - usize::from(skip.is_some());
                if others > 0 {
                    let mut k = self.referral % others;
                    if skip.is_some_and(|s| k >= s) {
                        k += 1;
                    }
                    let r = self
                        .members
                        .get(&self.order[k])
                        .map(|m| self.about(m, PeerViewKind::Response, false));
                    self.referral = self.referral.wrapping_add(1);
                    if let Some(r) = r {
                        self.send(from, r);
                    }
                }
            }
            (PeerViewKind::Response, false) => {
                if !pv.edge {
                    self.upsert(pv.rdv_peer, pv.rdv_adv, now);
                }
            }
            (PeerViewKind::Response, true) => {
                if !self.contains(&pv.rdv_peer) && self.members.len() < self.cfg.max_members {
                    self.send(pv.rdv_peer, self.own(PeerViewKind::Probe));
                }
            }
            (PeerViewKind::Probe, true) => {}
        }
        Ok(())
    }

    /// The transport says `peer` cannot be reached: remove it now and
    /// announce the failure.
    pub fn handle_unreachable(&mut self, peer: &PeerId) {
        self.remove(peer, true);
    }

    /// Runs a probe round if due: removes silent members (announcing it),
    /// probes the others and the seeds that are not members.
    pub fn handle_timeout(&mut self, now: Millis) {
        if now < self.next_probe {
            return;
        }
        self.next_probe = now + self.cfg.probe_interval_ms.max(1);
        let silent: Vec<PeerId> = self
            .members
            .values()
            .filter(|m| now.saturating_sub(m.last_heard) > self.cfg.failure_timeout_ms)
            .map(|m| m.peer)
            .collect();
        for p in silent {
            self.remove(&p, true);
        }
        let probe = self.own(PeerViewKind::Probe);
        let targets: Vec<PeerId> = self
            .members()
            .chain(self.seeds.iter().copied().filter(|s| !self.contains(s)))
            .collect();
        for t in targets {
            self.send(t, probe.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{IdFormat, IdType, JxtaId};
    use crate::rendezvous::messages::minimal_rdv_adv;

    fn peer(n: u8) -> PeerId {
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], [n; 16], IdType::Peer)
            .try_into()
            .unwrap()
    }

    fn view(n: u8) -> PeerView {
        let adv = minimal_rdv_adv(&peer(n), &PeerGroupId::NET, "r");
        PeerView::new(
            peer(n),
            adv.into(),
            PeerGroupId::NET,
            PeerViewConfig::default(),
        )
    }

    /// Delivers everything queued between views until quiet.
    fn pump(views: &mut [PeerView], now: Millis) {
        loop {
            let mut moved = false;
            for i in 0..views.len() {
                while let Some(t) = views[i].poll_transmit() {
                    moved = true;
                    let from = views[i].me();
                    if let Some(j) = views.iter().position(|v| v.me() == t.to) {
                        views[j].handle_message(from, &t.message, now).unwrap();
                    }
                }
            }
            if !moved {
                break;
            }
        }
    }

    #[test]
    fn views_converge_through_seeds_and_referrals() {
        let mut vs: Vec<PeerView> = (1..=5).map(view).collect();
        // Everyone only knows rendezvous 1.
        for v in vs.iter_mut().skip(1) {
            v.add_seed(peer(1));
        }
        for t in 0..4 {
            for v in vs.iter_mut() {
                v.handle_timeout(t * 500);
            }
            pump(&mut vs, t * 500);
        }
        for v in &vs {
            assert_eq!(v.len(), 4, "{:?}", v.me());
            assert!(v.order.iter().eq(v.members.keys()), "order kept sorted");
        }
        assert_eq!(vs[2].up(), Some(peer(4)));
        assert_eq!(vs[2].down(), Some(peer(2)));
        assert_eq!(vs[0].down(), None);
        assert_eq!(vs[4].up(), None);
        let mut added = 0;
        while let Some(e) = vs[0].poll_event() {
            assert!(matches!(e, PeerViewEvent::Added(_)));
            added += 1;
        }
        assert_eq!(added, 4);

        // Rendezvous 3 dies: the others drop it within the failure timeout.
        let dead = vs.remove(2);
        let mut t = 2000;
        while t <= 2000 + DEFAULT_FAILURE_TIMEOUT_MS + 2 * DEFAULT_PROBE_INTERVAL_MS {
            for v in vs.iter_mut() {
                v.handle_timeout(t);
            }
            pump(&mut vs, t);
            t += 100;
        }
        for v in &vs {
            assert!(!v.contains(&dead.me()));
            assert_eq!(v.len(), 3);
            assert!(v.order.iter().eq(v.members.keys()), "order kept sorted");
            assert_eq!(v.by_adv.len(), v.len(), "one advertisement per member");
            assert!(v
                .members
                .values()
                .all(|m| v.by_adv.get(&m.adv) == Some(&m.peer)));
        }
        assert_eq!(vs[1].up(), Some(peer(4)));
    }

    #[test]
    fn bounded_and_failure_messages() {
        let mut v = PeerView::new(
            peer(1),
            Bytes::new(),
            PeerGroupId::NET,
            PeerViewConfig {
                max_members: 2,
                ..Default::default()
            },
        );
        for n in 2..10 {
            let adv = minimal_rdv_adv(&peer(n), &PeerGroupId::NET, "r");
            let m = PeerViewMessage {
                kind: PeerViewKind::Probe,
                rdv_peer: peer(n),
                rdv_adv: adv.into(),
                cached: false,
                failure: false,
                edge: false,
                src_route: None,
            };
            v.handle(peer(n), m, 0).unwrap();
        }
        assert_eq!(v.len(), 2);
        assert_eq!(v.stats().refused_full, 6);
        // Every probe got an answer even when not added.
        let mut answers = 0;
        while v.poll_transmit().is_some() {
            answers += 1;
        }
        assert!(answers >= 8);
        // A third party's failure report for a member heard long ago removes it.
        let fail = PeerViewMessage {
            kind: PeerViewKind::Response,
            rdv_peer: peer(2),
            rdv_adv: minimal_rdv_adv(&peer(2), &PeerGroupId::NET, "r").into(),
            cached: true,
            failure: true,
            edge: false,
            src_route: None,
        };
        while v.poll_transmit().is_some() {}
        v.handle(peer(3), fail.clone(), 10).unwrap();
        assert!(v.contains(&peer(2)), "heard recently: kept");
        assert!(v.poll_transmit().is_none(), "and not even probed");
        // Heard long ago: a third party's word makes us probe it, not drop it.
        v.handle(peer(3), fail.clone(), 10_000).unwrap();
        assert!(v.contains(&peer(2)));
        let probe = v.poll_transmit().expect("the reported member is probed");
        assert_eq!(probe.to, peer(2));
        // The member itself leaving is believed.
        let mut leaving = fail;
        leaving.cached = false;
        v.handle(peer(2), leaving, 10_000).unwrap();
        assert!(!v.contains(&peer(2)));
        // A probe advertising another rendezvous than its sender: refused.
        let forged = PeerViewMessage {
            kind: PeerViewKind::Probe,
            rdv_peer: peer(30),
            rdv_adv: minimal_rdv_adv(&peer(30), &PeerGroupId::NET, "r").into(),
            cached: false,
            failure: false,
            edge: false,
            src_route: None,
        };
        assert!(matches!(
            v.handle(peer(3), forged, 10_000),
            Err(RdvMessageError::NotSender { .. })
        ));
        assert!(!v.contains(&peer(30)));
        assert_eq!(v.stats().not_sender, 1);
        // Edge probes get answers but don't join.
        let edge = PeerViewMessage {
            kind: PeerViewKind::Probe,
            rdv_peer: peer(20),
            rdv_adv: minimal_rdv_adv(&peer(20), &PeerGroupId::NET, "e").into(),
            cached: false,
            failure: false,
            edge: true,
            src_route: None,
        };
        v.handle(peer(20), edge, 10_000).unwrap();
        assert!(!v.contains(&peer(20)));
        assert!(v.handle_message(peer(3), &Message::new(), 0).is_err());
    }
}
