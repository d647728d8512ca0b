//! The rendezvous side of RVP (JXSE's `RdvPeerRdvService`): it grants,
//! renews and expires edge leases in a bounded table, refuses with a reason
//! when full, owns the [`PeerView`], and propagates messages to its leased
//! edges and peer-view members with TTL, visited path and duplicate
//! detection (`RendezVousPropagateMessage`), and walks messages along the
//! view (limited-range walker).
//!
//! Input: [`RendezvousServer::handle_message`] for everything addressed to
//! the lease, propagation, peer view or walker services;
//! [`RendezvousServer::propagate`] / [`RendezvousServer::walk`] to send.
//! Output: [`RendezvousServer::poll_transmit`] and
//! [`RendezvousServer::poll_event`] (lease changes, for instance to drop a
//! departed edge's SRDI entries, and messages delivered to local listeners).
//!
//! Refusal: JXSE simply does not answer a lease request when full; Juxta
//! answers with `ConnectedLease` 0 (which a JXSE edge reads as "rejected")
//! plus a `Juxta.RefuseReason` element, so the edge fails over at once.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use crate::endpoint::ServiceAddress;
use crate::id::{PeerGroupId, PeerId, PeerMap};
use crate::message::Message;
use crate::pipe::wire_header::DuplicateFilter;
use crate::srdi::placement::walk_step;

use super::messages::{
    lease_address, propagate_address, set_walk_target, walk_address, walk_target, LeaseMessage,
    PropagateHeader, RdvMessageError, WalkHeader, MAX_TTL, PEERVIEW_SERVICE, PROPAGATE_SERVICE,
    RDV_SERVICE, WALK_SERVICE_PREFIX,
};
use super::peerview::{PeerView, PeerViewConfig, PeerViewEvent};
use super::{IdGen, Millis, Transmit};

/// JXSE's default lease (20 min).
pub const DEFAULT_LEASE_MS: u64 = 20 * 60 * 1000;
/// JXSE's default client limit.
pub const DEFAULT_MAX_CLIENTS: usize = 200;
/// Hard ceiling on the client limit, whatever the configuration says.
pub const MAX_CLIENTS_LIMIT: usize = 100_000;
/// Propagated message IDs remembered for duplicate detection (JXSE's
/// `MAX_MSGIDS`).
pub const DEDUP_WINDOW: usize = 1_000;
/// Most lease advertisements remembered as already read (see
/// `RendezvousServer::pa_memo`).
pub const PA_MEMO_MAX: usize = 4_096;
/// Largest lease advertisement remembered as already read.
pub const PA_MEMO_MAX_BYTES: usize = 8_192;
/// Default TTL of a new propagation or walk.
pub const DEFAULT_PROPAGATE_TTL: i32 = 10;
/// Most transmits queued before the owner drains them (oldest discarded
/// and counted in [`ServerStats::transmit_overflow`]).
pub const MAX_PENDING_TRANSMITS: usize = 65_536;
/// Most events queued (same policy, [`ServerStats::event_overflow`]).
pub const MAX_PENDING_EVENTS: usize = 65_536;

/// Server parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Lease granted to edges, ms.
    pub lease_ms: u64,
    /// Most leased edges (capped by [`MAX_CLIENTS_LIMIT`]).
    pub max_clients: usize,
    /// The peer view's timers and bound.
    pub peer_view: PeerViewConfig,
    /// Propagated and walked messages accepted per second from one sender
    /// (a leased edge or a peer-view member), sustained; also the burst.
    /// Each one fans out to every edge and neighbour, so beyond this they
    /// are dropped and counted ([`ServerStats::over_rate`]).
    pub propagate_rate: u32,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            lease_ms: DEFAULT_LEASE_MS,
            max_clients: DEFAULT_MAX_CLIENTS,
            peer_view: PeerViewConfig::default(),
            propagate_rate: DEFAULT_PROPAGATE_RATE,
        }
    }
}

/// Default [`ServerConfig::propagate_rate`].
pub const DEFAULT_PROPAGATE_RATE: u32 = 2_000;

/// Why an edge left the lease table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveReason {
    /// It sent `Disconnect`.
    Disconnected,
    /// Its lease ran out.
    Expired,
    /// The transport reported it unreachable.
    Unreachable,
}

/// Something the owner must know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A new edge holds a lease.
    ClientJoined(PeerId),
    /// An edge lost its lease; its SRDI entries should be removed.
    ClientLeft(PeerId, LeaveReason),
    /// A lease request was refused because the table is full.
    Refused(PeerId),
    /// A rendezvous joined the peer view.
    RendezvousJoined(PeerId),
    /// A rendezvous left the peer view (its replicas should be re-placed).
    RendezvousLeft(PeerId),
    /// A propagated or walked message for a local listener.
    Deliver {
        /// The neighbour it came from.
        from: PeerId,
        /// The real destination listener.
        dest: ServiceAddress,
        /// The message (headers still attached, so it can be walked on).
        message: Message,
        /// Its walker header, if it came by a walk.
        walk: Option<WalkHeader>,
    },
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Leases granted (new and renewed).
    pub granted: u64,
    /// Lease requests refused (full).
    pub refused: u64,
    /// Propagated messages dropped as duplicates.
    pub duplicates: u64,
    /// Propagated messages dropped because we are on their path.
    pub loops: u64,
    /// Propagated messages dropped with TTL ≤ 0.
    pub dead: u64,
    /// Messages that did not parse.
    pub malformed: u64,
    /// Transmits discarded because the owner did not drain.
    pub transmit_overflow: u64,
    /// Events discarded because the owner did not drain.
    pub event_overflow: u64,
    /// Propagated or walked messages refused because their sender is
    /// neither a leased edge nor a peer-view member.
    pub not_member: u64,
    /// Propagated or walked messages dropped because their sender passed
    /// [`ServerConfig::propagate_rate`].
    pub over_rate: u64,
}

/// The rendezvous state machine.
#[derive(Debug)]
pub struct RendezvousServer {
    me: PeerId,
    group: PeerGroupId,
    group_unique: String,
    my_pa: Bytes,
    cfg: ServerConfig,
    clients: PeerMap<Millis>,
    /// Per-sender token buckets of propagated/walked messages: (tokens,
    /// last refill). Only leased edges and view members get one, so it is
    /// bounded by their number.
    prop_budget: PeerMap<(f64, Millis)>,
    next_expiry: Option<Millis>,
    peer_view: PeerView,
    dedup: DuplicateFilter,
    /// `jxta:PA` bytes already read in a lease message, and the `PID` they
    /// name (a memo of a pure function: every renewal carries the same
    /// advertisement; parsing it was most of a lease's cost). Bounded:
    /// cleared when [`PA_MEMO_MAX`] entries, only advertisements up to
    /// [`PA_MEMO_MAX_BYTES`], copied so no message buffer is kept.
    pa_memo: HashMap<Bytes, PeerId>,
    ids: IdGen,
    out: VecDeque<Transmit>,
    events: VecDeque<ServerEvent>,
    stats: ServerStats,
}

impl RendezvousServer {
    /// A rendezvous `me` in `group`, with its `jxta:PA` (sent in grants) and
    /// `jxta:RdvAdvertisement` (sent in peer view probes). `seed` seeds the
    /// message ID generator (use distinct seeds per peer).
    pub fn new(
        me: PeerId,
        group: PeerGroupId,
        my_pa: Bytes,
        my_rdv_adv: Bytes,
        cfg: ServerConfig,
        seed: u64,
    ) -> RendezvousServer {
        let cfg = ServerConfig {
            max_clients: cfg.max_clients.min(MAX_CLIENTS_LIMIT),
            ..cfg
        };
        RendezvousServer {
            me,
            group,
            group_unique: group.unique_value(),
            my_pa,
            peer_view: PeerView::new(me, my_rdv_adv, group, cfg.peer_view),
            cfg,
            clients: PeerMap::default(),
            prop_budget: PeerMap::default(),
            next_expiry: None,
            dedup: DuplicateFilter::new(DEDUP_WINDOW),
            pa_memo: HashMap::new(),
            ids: IdGen::new(seed ^ 0x5244_565f_5345_5256),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: ServerStats::default(),
        }
    }

    /// This rendezvous.
    pub fn me(&self) -> PeerId {
        self.me
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// The peer view.
    pub fn peer_view(&self) -> &PeerView {
        &self.peer_view
    }

    /// The peer view, mutably (to add seeds).
    pub fn peer_view_mut(&mut self) -> &mut PeerView {
        &mut self.peer_view
    }

    /// Number of leased edges.
    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    /// Whether an edge holds a lease.
    pub fn is_client(&self, peer: &PeerId) -> bool {
        self.clients.contains_key(peer)
    }

    /// The leased edges (arbitrary order).
    pub fn clients(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.clients.keys().copied()
    }

    fn send(&mut self, to: PeerId, dest: ServiceAddress, message: Message) {
        if self.out.len() >= MAX_PENDING_TRANSMITS {
            self.out.pop_front();
            self.stats.transmit_overflow += 1;
        }
        self.out.push_back(Transmit { to, dest, message });
    }

    fn event(&mut self, e: ServerEvent) {
        if self.events.len() >= MAX_PENDING_EVENTS {
            self.events.pop_front();
            self.stats.event_overflow += 1;
        }
        self.events.push_back(e);
    }

    fn pull_peer_view(&mut self) {
        while let Some(t) = self.peer_view.poll_transmit() {
            self.send(t.to, t.dest, t.message);
        }
        while let Some(e) = self.peer_view.poll_event() {
            self.event(match e {
                PeerViewEvent::Added(p) => ServerEvent::RendezvousJoined(p),
                PeerViewEvent::Removed(p) => ServerEvent::RendezvousLeft(p),
            });
        }
    }

    /// Queued output, oldest first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.pull_peer_view();
        self.out.pop_front()
    }

    /// Events, oldest first.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.pull_peer_view();
        self.events.pop_front()
    }

    /// When [`RendezvousServer::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Millis> {
        match (self.next_expiry, self.peer_view.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expires leases and runs the peer view's timers.
    pub fn handle_timeout(&mut self, now: Millis) {
        if self.next_expiry.is_some_and(|t| t <= now) {
            let gone: Vec<PeerId> = self
                .clients
                .iter()
                .filter(|(_, &end)| end <= now)
                .map(|(p, _)| *p)
                .collect();
            for p in gone {
                self.clients.remove(&p);
                self.event(ServerEvent::ClientLeft(p, LeaveReason::Expired));
            }
            self.next_expiry = self.clients.values().min().copied();
        }
        self.peer_view.handle_timeout(now);
        self.pull_peer_view();
    }

    /// The transport says `peer` is unreachable: drop its lease or its
    /// peer view entry.
    pub fn handle_unreachable(&mut self, peer: &PeerId) {
        if self.clients.remove(peer).is_some() {
            self.event(ServerEvent::ClientLeft(*peer, LeaveReason::Unreachable));
        }
        self.peer_view.handle_unreachable(peer);
        self.pull_peer_view();
    }

    /// Handles a message addressed to one of the rendezvous services
    /// (lease, `JxtaPropagate`, `PeerView`, walker greeter); other services
    /// are an error ([`RdvMessageError::NotThisProtocol`]).
    pub fn handle_message(
        &mut self,
        from: PeerId,
        dest: &ServiceAddress,
        msg: Message,
        now: Millis,
    ) -> Result<(), RdvMessageError> {
        let r = if dest.service == RDV_SERVICE {
            self.handle_lease(from, &msg, now)
        } else if dest.service == PROPAGATE_SERVICE {
            if !self.admit_propagated(&from, now) {
                return Ok(());
            }
            self.handle_propagated(from, msg)
        } else if dest.service == PEERVIEW_SERVICE {
            let r = self.peer_view.handle_message(from, &msg, now);
            self.pull_peer_view();
            r
        } else if dest.service.starts_with(WALK_SERVICE_PREFIX) {
            if !self.admit_propagated(&from, now) {
                return Ok(());
            }
            self.handle_walked(from, msg)
        } else {
            return Err(RdvMessageError::NotThisProtocol);
        };
        if r.is_err() && !matches!(r, Err(RdvMessageError::NotSender { .. })) {
            self.stats.malformed += 1;
        }
        r
    }

    fn handle_lease(
        &mut self,
        from: PeerId,
        msg: &Message,
        now: Millis,
    ) -> Result<(), RdvMessageError> {
        let memo = &self.pa_memo;
        let hit = std::cell::Cell::new(false);
        let lm = LeaseMessage::from_message_known(msg, |pa| {
            memo.get(pa).copied().inspect(|_| hit.set(true))
        })?;
        if let LeaseMessage::Request { peer, peer_adv }
        | LeaseMessage::Disconnect { peer, peer_adv } = &lm
        {
            if !hit.get() && peer_adv.len() <= PA_MEMO_MAX_BYTES {
                if self.pa_memo.len() >= PA_MEMO_MAX {
                    self.pa_memo.clear();
                }
                self.pa_memo.insert(Bytes::copy_from_slice(peer_adv), *peer);
            }
        }
        // Leases and disconnects act on the sender, never on an ID written
        // in the body: otherwise any connected peer could lease for, or
        // disconnect, another.
        if let LeaseMessage::Request { peer, .. } | LeaseMessage::Disconnect { peer, .. } = &lm {
            if *peer != from {
                self.stats.refused += 1;
                return Err(RdvMessageError::NotSender {
                    claimed: Box::new(*peer),
                    sender: Box::new(from),
                });
            }
        }
        match lm {
            LeaseMessage::Request { peer, .. } => {
                let known = self.clients.contains_key(&peer);
                if !known && self.clients.len() >= self.cfg.max_clients {
                    self.stats.refused += 1;
                    self.event(ServerEvent::Refused(peer));
                    let refuse = LeaseMessage::Granted {
                        rdv: self.me,
                        rdv_adv: self.my_pa.clone(),
                        lease_ms: 0,
                        refuse_reason: Some(format!("full: {} clients", self.cfg.max_clients)),
                    };
                    self.send(from, lease_address(&self.group), refuse.to_message());
                    return Ok(());
                }
                let end = now.saturating_add(self.cfg.lease_ms);
                self.clients.insert(peer, end);
                self.next_expiry = Some(self.next_expiry.map_or(end, |t| t.min(end)));
                self.stats.granted += 1;
                if !known {
                    self.event(ServerEvent::ClientJoined(peer));
                }
                let grant = LeaseMessage::Granted {
                    rdv: self.me,
                    rdv_adv: self.my_pa.clone(),
                    lease_ms: self.cfg.lease_ms.min(i64::MAX as u64) as i64,
                    refuse_reason: None,
                };
                self.send(from, lease_address(&self.group), grant.to_message());
            }
            LeaseMessage::Disconnect { peer, .. } => {
                if self.clients.remove(&peer).is_some() {
                    self.event(ServerEvent::ClientLeft(peer, LeaveReason::Disconnected));
                }
            }
            LeaseMessage::Granted { .. } => {}
        }
        Ok(())
    }

    /// Sends a `Disconnect` to a leased edge and drops its lease.
    pub fn disconnect(&mut self, peer: &PeerId) {
        if self.clients.remove(peer).is_some() {
            self.event(ServerEvent::ClientLeft(*peer, LeaveReason::Disconnected));
            let d = LeaseMessage::Disconnect {
                peer: self.me,
                peer_adv: self.my_pa.clone(),
            };
            self.send(*peer, lease_address(&self.group), d.to_message());
        }
    }

    /// Everyone a propagated message may go to: leased edges and peer view
    /// members, minus the path and `except`.
    fn fan_out(&mut self, hdr: &PropagateHeader, mut msg: Message, except: Option<PeerId>) {
        hdr.write_into(&mut msg, &self.group_unique);
        let mut targets: Vec<PeerId> = self.clients.keys().copied().collect();
        targets.sort_by_cached_key(|p| p.to_string());
        targets.extend(self.peer_view.members());
        let addr = propagate_address(&self.group);
        for t in targets {
            if Some(t) == except || hdr.visited(&t) {
                continue;
            }
            self.send(t, addr.clone(), msg.clone());
        }
    }

    /// Propagates a message group-wide: to every leased edge and peer view
    /// member, with a new header (TTL capped at [`MAX_TTL`]). Returns the
    /// message ID.
    pub fn propagate(&mut self, dest: &ServiceAddress, msg: Message, ttl: i32) -> String {
        let hdr = PropagateHeader {
            msg_id: self.ids.msg_id(),
            dest_service: dest.service.clone(),
            dest_param: dest.param.clone(),
            ttl: ttl.clamp(1, MAX_TTL),
            path: vec![self.me.to_string()],
        };
        self.dedup.first_time(hdr.msg_id.as_bytes());
        self.fan_out(&hdr, msg, None);
        hdr.msg_id
    }

    /// Whether a propagated or walked message from `from` is taken: only
    /// from leased edges and peer-view members (each one fans out to all
    /// of them: a stranger must not be able to make us flood), within
    /// [`ServerConfig::propagate_rate`] per sender. Refusals are counted.
    fn admit_propagated(&mut self, from: &PeerId, now: Millis) -> bool {
        if !self.clients.contains_key(from) && !self.peer_view.contains(from) {
            self.stats.not_member += 1;
            self.prop_budget.remove(from);
            return false;
        }
        let rate = f64::from(self.cfg.propagate_rate.max(1));
        if self.prop_budget.len() > self.clients.len() + self.peer_view.len() + 16 {
            // Forget senders that are no longer edges or members.
            let (clients, view) = (&self.clients, &self.peer_view);
            self.prop_budget
                .retain(|p, _| clients.contains_key(p) || view.contains(p));
        }
        let b = self.prop_budget.entry(*from).or_insert((rate, now));
        let elapsed = now.saturating_sub(b.1) as f64 / 1000.0;
        b.0 = (b.0 + elapsed * rate).min(rate);
        b.1 = now.max(b.1);
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            true
        } else {
            self.stats.over_rate += 1;
            false
        }
    }

    fn handle_propagated(&mut self, from: PeerId, msg: Message) -> Result<(), RdvMessageError> {
        let mut hdr = PropagateHeader::from_message(&msg, &self.group_unique)?;
        if hdr.ttl <= 0 {
            self.stats.dead += 1;
            return Ok(());
        }
        if !self.dedup.first_time(hdr.msg_id.as_bytes()) {
            self.stats.duplicates += 1;
            return Ok(());
        }
        if hdr.visited(&self.me) {
            self.stats.loops += 1;
            return Ok(());
        }
        self.event(ServerEvent::Deliver {
            from,
            dest: ServiceAddress {
                service: hdr.dest_service.clone(),
                param: hdr.dest_param.clone(),
            },
            message: msg.clone(),
            walk: None,
        });
        // JXSE's updatePropHeader: TTL − 1, add self to the path.
        hdr.ttl = (hdr.ttl - 1).min(MAX_TTL);
        hdr.path.push(self.me.to_string());
        if hdr.ttl > 0 && hdr.path.len() < super::messages::MAX_PATH {
            self.fan_out(&hdr, msg, Some(from));
        }
        Ok(())
    }

    /// Starts a limited-range walk of `msg` towards listener `dest` on the
    /// other rendezvous (JXSE's `walk(msg, svc, param, ttl)`), or continues
    /// the walk a received message is on. Returns how many neighbours it
    /// was sent to.
    pub fn walk(&mut self, dest: &ServiceAddress, mut msg: Message, ttl: i32) -> usize {
        let received = WalkHeader::from_message(&msg).ok();
        set_walk_target(&mut msg, dest);
        let lease = lease_address(&self.group);
        let steps = walk_step(
            received.as_ref(),
            self.me,
            &lease.service,
            lease.param.as_deref(),
            ttl,
            self.peer_view.len(),
            self.peer_view.up(),
            self.peer_view.down(),
        );
        let addr = walk_address(&self.group);
        let n = steps.len();
        for (to, h) in steps {
            let mut m = msg.clone();
            h.write_into(&mut m);
            self.send(to, addr.clone(), m);
        }
        n
    }

    fn handle_walked(&mut self, from: PeerId, msg: Message) -> Result<(), RdvMessageError> {
        let hdr = WalkHeader::from_message(&msg)?;
        let dest = walk_target(&msg)?;
        self.event(ServerEvent::Deliver {
            from,
            dest,
            message: msg,
            walk: Some(hdr),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::PeerAdvertisement;
    use crate::id::{IdFormat, IdType, JxtaId};
    use crate::rendezvous::messages::minimal_rdv_adv;

    fn peer(n: u8) -> PeerId {
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], [n; 16], IdType::Peer)
            .try_into()
            .unwrap()
    }

    fn server(n: u8, cfg: ServerConfig) -> RendezvousServer {
        let pa = PeerAdvertisement::new(peer(n), PeerGroupId::NET, "rdv").to_xml();
        let ra = minimal_rdv_adv(&peer(n), &PeerGroupId::NET, "rdv");
        RendezvousServer::new(
            peer(n),
            PeerGroupId::NET,
            pa.into(),
            ra.into(),
            cfg,
            n as u64,
        )
    }

    fn request(n: u8) -> Message {
        let pa = PeerAdvertisement::new(peer(n), PeerGroupId::NET, "edge").to_xml();
        LeaseMessage::Request {
            peer: peer(n),
            peer_adv: pa.into(),
        }
        .to_message()
    }

    /// Makes `peer(n)` a member of `s`'s peer view (it probes `s`
    /// advertising itself); drains what that produced.
    fn join_view(s: &mut RendezvousServer, n: u8) {
        let probe = crate::rendezvous::messages::PeerViewMessage {
            kind: crate::rendezvous::messages::PeerViewKind::Probe,
            rdv_peer: peer(n),
            rdv_adv: minimal_rdv_adv(&peer(n), &PeerGroupId::NET, "rdv").into(),
            cached: false,
            failure: false,
            edge: false,
            src_route: None,
        };
        let pv = crate::rendezvous::messages::peerview_address(&PeerGroupId::NET);
        s.handle_message(peer(n), &pv, probe.to_message(), 0)
            .unwrap();
        drain(s);
    }

    fn drain(s: &mut RendezvousServer) -> (Vec<Transmit>, Vec<ServerEvent>) {
        let mut t = Vec::new();
        while let Some(x) = s.poll_transmit() {
            t.push(x);
        }
        let mut e = Vec::new();
        while let Some(x) = s.poll_event() {
            e.push(x);
        }
        (t, e)
    }

    #[test]
    fn grant_renew_refuse_expire() {
        let mut s = server(
            1,
            ServerConfig {
                lease_ms: 1000,
                max_clients: 2,
                ..Default::default()
            },
        );
        let lease = lease_address(&PeerGroupId::NET);
        s.handle_message(peer(10), &lease, request(10), 0).unwrap();
        s.handle_message(peer(11), &lease, request(11), 0).unwrap();
        s.handle_message(peer(12), &lease, request(12), 0).unwrap();
        let (t, e) = drain(&mut s);
        assert_eq!(t.len(), 3);
        let lease_of = |m: &Message| match LeaseMessage::from_message(m).unwrap() {
            LeaseMessage::Granted {
                lease_ms,
                refuse_reason,
                ..
            } => (lease_ms, refuse_reason),
            _ => panic!(),
        };
        assert_eq!(lease_of(&t[0].message), (1000, None));
        assert_eq!(t[2].to, peer(12));
        assert_eq!(lease_of(&t[2].message).0, 0);
        assert!(lease_of(&t[2].message).1.unwrap().contains("full"));
        assert_eq!(
            e,
            vec![
                ServerEvent::ClientJoined(peer(10)),
                ServerEvent::ClientJoined(peer(11)),
                ServerEvent::Refused(peer(12))
            ]
        );
        // Renewal at 600 keeps 10 alive past 1000; 11 expires.
        s.handle_message(peer(10), &lease, request(10), 600)
            .unwrap();
        assert_eq!(s.poll_timeout(), Some(0)); // peer view's first round
        s.handle_timeout(1000);
        let (_, e) = drain(&mut s);
        assert_eq!(
            e,
            vec![ServerEvent::ClientLeft(peer(11), LeaveReason::Expired)]
        );
        assert!(s.is_client(&peer(10)));
        let d = LeaseMessage::Disconnect {
            peer: peer(10),
            peer_adv: PeerAdvertisement::new(peer(10), PeerGroupId::NET, "e")
                .to_xml()
                .into(),
        };
        // Another peer cannot disconnect 10, nor lease in its name.
        assert!(matches!(
            s.handle_message(peer(13), &lease, d.to_message(), 1050),
            Err(RdvMessageError::NotSender { .. })
        ));
        assert!(matches!(
            s.handle_message(peer(13), &lease, request(14), 1050),
            Err(RdvMessageError::NotSender { .. })
        ));
        assert!(s.is_client(&peer(10)) && !s.is_client(&peer(14)));
        s.handle_message(peer(10), &lease, d.to_message(), 1100)
            .unwrap();
        assert_eq!(s.client_count(), 0);
        // A flood of bogus lease requests stays within the bound.
        for i in 0..=255u8 {
            let _ = s.handle_message(peer(i), &lease, request(i), 2000);
        }
        assert_eq!(s.client_count(), 2);
        assert!(s
            .handle_message(peer(1), &lease, Message::new(), 0)
            .is_err());
        assert_eq!(s.stats().malformed, 1);
    }

    #[test]
    fn a_renewals_advertisement_is_read_once_and_a_forged_one_still_refused() {
        let mut s = server(1, ServerConfig::default());
        let lease = lease_address(&PeerGroupId::NET);
        for _ in 0..3 {
            s.handle_message(peer(10), &lease, request(10), 0).unwrap();
        }
        assert_eq!(s.pa_memo.len(), 1, "one advertisement, remembered once");
        assert_eq!(s.clients().collect::<Vec<_>>(), vec![peer(10)]);
        // Another peer replaying peer 10's remembered advertisement is
        // refused as before: the memo gives the PID the bytes name.
        assert!(matches!(
            s.handle_message(peer(11), &lease, request(10), 0),
            Err(RdvMessageError::NotSender { .. })
        ));
        assert_eq!(s.clients().count(), 1);
        // Bounded: a new advertisement when full clears it first.
        while s.pa_memo.len() < PA_MEMO_MAX {
            let pa = Bytes::from(format!("<jxta:PA>{}</jxta:PA>", s.pa_memo.len()));
            s.pa_memo.insert(pa, peer(12));
        }
        s.handle_message(peer(13), &lease, request(13), 0).unwrap();
        assert_eq!(s.pa_memo.len(), 1);
        assert_eq!(s.clients().count(), 2);
    }

    #[test]
    fn propagation_ttl_dup_and_loops() {
        let mut a = server(1, ServerConfig::default());
        let mut b = server(2, ServerConfig::default());
        let lease = lease_address(&PeerGroupId::NET);
        b.handle_message(peer(20), &lease, request(20), 0).unwrap();
        b.handle_message(peer(21), &lease, request(21), 0).unwrap();
        drain(&mut b);
        a.handle_message(peer(10), &lease, request(10), 0).unwrap();
        drain(&mut a);
        let dest = ServiceAddress::new("svc", Some("p"));
        a.propagate(&dest, Message::new(), 3);
        let (t, _) = drain(&mut a);
        assert_eq!(t.len(), 1); // one edge, no view members yet
        let m = t[0].message.clone();
        let h = PropagateHeader::from_message(&m, "jxta-NetGroup").unwrap();
        assert_eq!((h.ttl, h.path.clone()), (3, vec![peer(1).to_string()]));
        // b receives it from a (a member of b's view): delivers and
        // forwards to its edges.
        let pa = propagate_address(&PeerGroupId::NET);
        // From a stranger (neither edge nor member): refused, counted.
        b.handle_message(peer(1), &pa, m.clone(), 0).unwrap();
        assert_eq!(b.stats().not_member, 1);
        let (t, e) = drain(&mut b);
        assert!(t.is_empty() && e.is_empty());
        join_view(&mut b, 1);
        join_view(&mut b, 3);
        join_view(&mut a, 2);
        b.handle_message(peer(1), &pa, m.clone(), 0).unwrap();
        let (t, e) = drain(&mut b);
        // Its two edges and the other member (3); never back to a.
        assert_eq!(t.len(), 3);
        let t: Vec<Transmit> = t.into_iter().filter(|t| t.to != peer(3)).collect();
        assert_eq!(t.len(), 2);
        let h2 = PropagateHeader::from_message(&t[0].message, "jxta-NetGroup").unwrap();
        assert_eq!(h2.ttl, 2);
        assert_eq!(h2.path.len(), 2);
        assert!(matches!(&e[0], ServerEvent::Deliver { dest: d, walk: None, .. } if *d == dest));
        // Duplicate dropped.
        b.handle_message(peer(1), &pa, m, 0).unwrap();
        assert_eq!(b.stats().duplicates, 1);
        assert!(drain(&mut b).0.is_empty());
        // Loop: a sees its own ID in the path.
        a.handle_message(peer(2), &pa, t[0].message.clone(), 0)
            .unwrap();
        assert_eq!(a.stats().loops + a.stats().duplicates, 1);
        // TTL 1 is delivered but not forwarded.
        let mut h3 = h2.clone();
        h3.msg_id = "other".into();
        h3.ttl = 1;
        h3.path = vec![peer(1).to_string()];
        let mut m3 = Message::new();
        h3.write_into(&mut m3, "jxta-NetGroup");
        b.handle_message(peer(3), &pa, m3, 0).unwrap();
        let (t, e) = drain(&mut b);
        assert!(t.is_empty());
        assert_eq!(e.len(), 1);
    }

    #[test]
    fn propagation_is_rate_limited_per_sender() {
        let mut b = server(
            2,
            ServerConfig {
                propagate_rate: 5,
                ..Default::default()
            },
        );
        let lease = lease_address(&PeerGroupId::NET);
        b.handle_message(peer(20), &lease, request(20), 0).unwrap();
        drain(&mut b);
        let pa = propagate_address(&PeerGroupId::NET);
        let send = |b: &mut RendezvousServer, i: u32, now: Millis| {
            let h = PropagateHeader {
                msg_id: format!("m{i}"),
                dest_service: "svc".into(),
                dest_param: None,
                ttl: 2,
                path: vec![peer(20).to_string()],
            };
            let mut m = Message::new();
            h.write_into(&mut m, "jxta-NetGroup");
            b.handle_message(peer(20), &pa, m, now).unwrap();
        };
        for i in 0..7 {
            send(&mut b, i, 0);
        }
        assert_eq!(b.stats().over_rate, 2);
        let (_, e) = drain(&mut b);
        assert_eq!(e.len(), 5, "five delivered here");
        // A second later the bucket is full again; time going backwards
        // refills nothing.
        send(&mut b, 100, 1_000);
        send(&mut b, 101, 500);
        assert_eq!(b.stats().over_rate, 2);
        for i in 0..10 {
            send(&mut b, 200 + i, 1_000);
        }
        assert_eq!(b.stats().over_rate, 9);
    }

    #[test]
    fn walk_along_the_view() {
        let mut ss: Vec<RendezvousServer> = (1..=4)
            .map(|n| server(n, ServerConfig::default()))
            .collect();
        for s in ss.iter_mut() {
            for n in 1..=4 {
                s.peer_view_mut().add_seed(peer(n));
            }
        }
        // Let the views converge.
        for round in 0..3 {
            for s in ss.iter_mut() {
                s.handle_timeout(round * 500);
            }
            loop {
                let mut moved = false;
                for i in 0..ss.len() {
                    while let Some(t) = ss[i].poll_transmit() {
                        moved = true;
                        let from = ss[i].me();
                        let j = ss.iter().position(|s| s.me() == t.to).unwrap();
                        ss[j]
                            .handle_message(from, &t.dest, t.message, round * 500)
                            .unwrap();
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        for s in ss.iter_mut() {
            assert_eq!(s.peer_view().len(), 3);
            drain(s);
        }
        // Walk from rendezvous 2: one copy up (3), one down (1).
        let dest = ServiceAddress::new("svc", Some("p"));
        assert_eq!(ss[1].walk(&dest, Message::new(), 10), 2);
        let (t, _) = drain(&mut ss[1]);
        let to: Vec<PeerId> = t.iter().map(|t| t.to).collect();
        assert_eq!(to, vec![peer(3), peer(1)]);
        assert_eq!(t[0].dest, walk_address(&PeerGroupId::NET));
        // Rendezvous 3 receives it: delivered with the walk header, and
        // continuing the walk only goes further up.
        let up = t[0].clone();
        ss[2]
            .handle_message(peer(2), &up.dest, up.message, 0)
            .unwrap();
        let (_, e) = drain(&mut ss[2]);
        let ServerEvent::Deliver {
            dest: d,
            message,
            walk: Some(h),
            ..
        } = e[0].clone()
        else {
            panic!("{e:?}")
        };
        assert_eq!(d, dest);
        assert_eq!(h.ttl, 4); // min(10, |view| + 1)
        assert_eq!(ss[2].walk(&d, message, 10), 1);
        let (t, _) = drain(&mut ss[2]);
        assert_eq!(t[0].to, peer(4));
        assert_eq!(WalkHeader::from_message(&t[0].message).unwrap().ttl, 3);
        // At the top of the view the walk ends.
        let last = t[0].clone();
        ss[3]
            .handle_message(peer(3), &last.dest, last.message, 0)
            .unwrap();
        let (_, e) = drain(&mut ss[3]);
        let ServerEvent::Deliver { message, .. } = e[0].clone() else {
            panic!()
        };
        assert_eq!(ss[3].walk(&dest, message, 10), 0);
        // Malformed walker messages are typed errors.
        assert!(ss[3]
            .handle_message(peer(3), &walk_address(&PeerGroupId::NET), Message::new(), 0)
            .is_err());
        assert_eq!(
            ss[3].handle_message(
                peer(3),
                &ServiceAddress::new("Other", None),
                Message::new(),
                0
            ),
            Err(RdvMessageError::NotThisProtocol)
        );
    }
}
