//! The edge side of RVP (JXSE's `EdgePeerRdvService`): hold one lease with
//! one rendezvous out of a seed list, renew it, notice quickly when the
//! rendezvous is gone, and fail over.
//!
//! JXSE's edge only re-checks its lease every 15 s and falls back on a
//! fixed wait, so a killed rendezvous costs its edges 78–100 s. Here:
//! - every `heartbeat_ms` the edge renews its lease (a `Connect`, which any
//!   rendezvous, JXSE included, answers with a grant), so the renewal *is*
//!   the heartbeat; no answer within `response_timeout_ms` means failure;
//! - the owner can also report the transport's verdict at once with
//!   [`EdgeClient::handle_unreachable`] (e.g. the TCP connection closed);
//! - on failure, a refusal (`ConnectedLease` ≤ 0) or a `Disconnect`, the
//!   edge asks the *next* seed immediately; only after a full round of
//!   seeds has failed does it wait, with a backoff doubling from
//!   `backoff_min_ms` to `backoff_max_ms`;
//! - every new lease raises [`EdgeEvent::RepublishSrdi`]: the owner pushes
//!   all its SRDI entries to the new rendezvous, so queries find them again.
//!
//! Worst case after a rendezvous dies silently: detection within
//! `heartbeat_ms + response_timeout_ms` ([`EdgeConfig::detection_bound_ms`]),
//! then one round trip to the next live seed.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::id::{PeerGroupId, PeerId};
use crate::message::Message;

use crate::endpoint::ServiceAddress;
use crate::pipe::wire_header::DuplicateFilter;

use super::messages::{
    lease_address, propagate_address, LeaseMessage, PropagateHeader, RdvMessageError, MAX_TTL,
};
use super::server::DEDUP_WINDOW;
use super::{Millis, Transmit};

/// Default interval between lease renewals (heartbeats).
pub const DEFAULT_HEARTBEAT_MS: u64 = 500;
/// Default wait for a grant before the rendezvous counts as failed.
pub const DEFAULT_RESPONSE_TIMEOUT_MS: u64 = 750;
/// Default first backoff after a whole round of seeds failed.
pub const DEFAULT_BACKOFF_MIN_MS: u64 = 100;
/// Default backoff ceiling.
pub const DEFAULT_BACKOFF_MAX_MS: u64 = 2_000;
/// Most seeds remembered.
pub const MAX_SEEDS: usize = 64;
/// Most transmits/events queued (the owner drains after every call; beyond
/// this the oldest is discarded and counted in [`EdgeStats::overflow`]).
pub const MAX_PENDING: usize = 256;

/// Edge timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeConfig {
    /// Interval between renewals; also bounded by half the granted lease.
    pub heartbeat_ms: u64,
    /// How long to wait for a grant.
    pub response_timeout_ms: u64,
    /// First backoff after a failed round of seeds.
    pub backoff_min_ms: u64,
    /// Backoff ceiling.
    pub backoff_max_ms: u64,
}

impl Default for EdgeConfig {
    fn default() -> EdgeConfig {
        EdgeConfig {
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            response_timeout_ms: DEFAULT_RESPONSE_TIMEOUT_MS,
            backoff_min_ms: DEFAULT_BACKOFF_MIN_MS,
            backoff_max_ms: DEFAULT_BACKOFF_MAX_MS,
        }
    }
}

impl EdgeConfig {
    /// Longest time between a rendezvous dying silently and its edge
    /// noticing: the next heartbeat is at most `heartbeat_ms` away and its
    /// answer is awaited `response_timeout_ms`.
    pub fn detection_bound_ms(&self) -> u64 {
        self.heartbeat_ms + self.response_timeout_ms
    }
}

/// Why the edge lost (or never got) a rendezvous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LossReason {
    /// No grant within the response timeout.
    Timeout,
    /// The rendezvous refused (`ConnectedLease` ≤ 0), with Juxta's reason
    /// if it gave one.
    Refused(Option<String>),
    /// The rendezvous sent `Disconnect`.
    Disconnected,
    /// The transport reported it unreachable.
    Unreachable,
    /// The lease ran out without renewal.
    Expired,
}

/// Something the owner must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgeEvent {
    /// A lease with `rdv` started.
    Connected {
        /// The rendezvous.
        rdv: PeerId,
        /// Its `jxta:PA` XML.
        rdv_adv: Bytes,
    },
    /// Push every local SRDI entry to `rdv` now (it has none of ours).
    RepublishSrdi {
        /// The new rendezvous.
        rdv: PeerId,
    },
    /// The lease with `rdv` ended (or the request failed); the edge is
    /// already asking another rendezvous.
    Lost {
        /// The rendezvous.
        rdv: PeerId,
        /// Why.
        reason: LossReason,
    },
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeStats {
    /// Lease requests sent (first requests and renewals).
    pub requests: u64,
    /// Grants received for the current rendezvous.
    pub grants: u64,
    /// Fail-overs.
    pub failovers: u64,
    /// Queue entries discarded because the owner did not drain.
    pub overflow: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not started, or waiting out a backoff until the given time.
    Idle { retry_at: Option<Millis> },
    /// A request is out to `rdv`.
    Requesting { rdv: PeerId, deadline: Millis },
    /// Leased to `rdv`.
    Connected {
        rdv: PeerId,
        lease_end: Millis,
        next_renew: Millis,
        /// When the outstanding renewal was sent.
        pending_since: Option<Millis>,
    },
}

/// The edge's rendezvous client.
#[derive(Debug)]
pub struct EdgeClient {
    me: PeerId,
    group: PeerGroupId,
    my_pa: Bytes,
    cfg: EdgeConfig,
    seeds: Vec<PeerId>,
    cursor: usize,
    failed_in_round: usize,
    backoff: u64,
    state: State,
    stopped: bool,
    dedup: DuplicateFilter,
    out: VecDeque<Transmit>,
    events: VecDeque<EdgeEvent>,
    stats: EdgeStats,
}

impl EdgeClient {
    /// An edge `me` with its `jxta:PA` (sent in every `Connect`) and seed
    /// rendezvous (at most [`MAX_SEEDS`], duplicates ignored). Nothing is
    /// sent until the first [`EdgeClient::handle_timeout`].
    pub fn new(
        me: PeerId,
        group: PeerGroupId,
        my_pa: Bytes,
        seeds: impl IntoIterator<Item = PeerId>,
        cfg: EdgeConfig,
    ) -> EdgeClient {
        let mut e = EdgeClient {
            me,
            group,
            my_pa,
            cfg,
            seeds: Vec::new(),
            cursor: 0,
            failed_in_round: 0,
            backoff: cfg.backoff_min_ms,
            state: State::Idle { retry_at: Some(0) },
            stopped: false,
            dedup: DuplicateFilter::new(DEDUP_WINDOW),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: EdgeStats::default(),
        };
        for s in seeds {
            e.add_seed(s);
        }
        e
    }

    /// Adds a seed rendezvous; false when already known, self, or full.
    pub fn add_seed(&mut self, seed: PeerId) -> bool {
        if seed == self.me || self.seeds.contains(&seed) || self.seeds.len() >= MAX_SEEDS {
            return false;
        }
        self.seeds.push(seed);
        true
    }

    /// Starts the edge at a given offset into its seed list (spreading edges
    /// over rendezvous; JXSE shuffles its seeds).
    pub fn with_first_seed(mut self, index: usize) -> EdgeClient {
        if !self.seeds.is_empty() {
            self.cursor = index % self.seeds.len();
        }
        self
    }

    /// This edge.
    pub fn me(&self) -> PeerId {
        self.me
    }

    /// Counters.
    pub fn stats(&self) -> EdgeStats {
        self.stats
    }

    /// The rendezvous the edge holds a lease with.
    pub fn rendezvous(&self) -> Option<PeerId> {
        match self.state {
            State::Connected { rdv, .. } => Some(rdv),
            _ => None,
        }
    }

    /// Queued output, oldest first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// Events, oldest first.
    pub fn poll_event(&mut self) -> Option<EdgeEvent> {
        self.events.pop_front()
    }

    /// When [`EdgeClient::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Millis> {
        match self.state {
            State::Idle { retry_at } => retry_at,
            State::Requesting { deadline, .. } => Some(deadline),
            State::Connected {
                lease_end,
                next_renew,
                pending_since,
                ..
            } => Some(match pending_since {
                Some(s) => (s + self.cfg.response_timeout_ms).min(lease_end),
                None => next_renew.min(lease_end),
            }),
        }
    }

    fn event(&mut self, e: EdgeEvent) {
        if self.events.len() >= MAX_PENDING {
            self.events.pop_front();
            self.stats.overflow += 1;
        }
        self.events.push_back(e);
    }

    fn send_request(&mut self, to: PeerId) {
        if self.out.len() >= MAX_PENDING {
            self.out.pop_front();
            self.stats.overflow += 1;
        }
        self.stats.requests += 1;
        let m = LeaseMessage::Request {
            peer: self.me,
            peer_adv: self.my_pa.clone(),
        };
        self.out.push_back(Transmit {
            to,
            dest: lease_address(&self.group),
            message: m.to_message(),
        });
    }

    fn try_next(&mut self, now: Millis) {
        if self.seeds.is_empty() {
            self.state = State::Idle { retry_at: None };
            return;
        }
        if self.failed_in_round >= self.seeds.len() {
            // A whole round failed: back off before the next one.
            self.failed_in_round = 0;
            let wait = self.backoff;
            self.backoff = (self.backoff * 2).clamp(1, self.cfg.backoff_max_ms.max(1));
            self.state = State::Idle {
                retry_at: Some(now + wait),
            };
            return;
        }
        let rdv = self.seeds[self.cursor % self.seeds.len()];
        self.send_request(rdv);
        self.state = State::Requesting {
            rdv,
            deadline: now + self.cfg.response_timeout_ms,
        };
    }

    /// Drops the current rendezvous and asks the next seed at once.
    fn fail(&mut self, rdv: PeerId, reason: LossReason, now: Millis) {
        self.stats.failovers += 1;
        self.event(EdgeEvent::Lost { rdv, reason });
        self.failed_in_round += 1;
        if self.seeds.get(self.cursor % self.seeds.len().max(1)) == Some(&rdv) {
            self.cursor = (self.cursor + 1) % self.seeds.len();
        }
        self.try_next(now);
    }

    fn current(&self) -> Option<PeerId> {
        match self.state {
            State::Requesting { rdv, .. } | State::Connected { rdv, .. } => Some(rdv),
            State::Idle { .. } => None,
        }
    }

    /// Runs the timers: first request, renewals, response timeouts, lease
    /// expiry, backoff.
    pub fn handle_timeout(&mut self, now: Millis) {
        match self.state {
            State::Idle { retry_at: Some(t) } if now >= t => self.try_next(now),
            State::Idle { .. } => {}
            State::Requesting { rdv, deadline } if now >= deadline => {
                self.fail(rdv, LossReason::Timeout, now)
            }
            State::Requesting { .. } => {}
            State::Connected {
                rdv,
                lease_end,
                next_renew,
                pending_since,
            } => {
                if now >= lease_end {
                    self.fail(rdv, LossReason::Expired, now);
                } else if let Some(s) = pending_since {
                    if now >= s + self.cfg.response_timeout_ms {
                        self.fail(rdv, LossReason::Timeout, now);
                    }
                } else if now >= next_renew {
                    self.send_request(rdv);
                    self.state = State::Connected {
                        rdv,
                        lease_end,
                        next_renew,
                        pending_since: Some(now),
                    };
                }
            }
        }
    }

    /// The transport says `peer` cannot be reached; if it is our
    /// rendezvous, fail over now.
    pub fn handle_unreachable(&mut self, peer: &PeerId, now: Millis) {
        if self.current() == Some(*peer) {
            self.fail(*peer, LossReason::Unreachable, now);
        }
    }

    /// Handles a message received on the lease service.
    pub fn handle_message(
        &mut self,
        from: PeerId,
        msg: &Message,
        now: Millis,
    ) -> Result<(), RdvMessageError> {
        let parsed = LeaseMessage::from_message(msg)?;
        if self.stopped {
            return Ok(());
        }
        // A grant or disconnect speaks for its sender only: a peer cannot
        // grant a lease in another rendezvous' name or end ours.
        if let LeaseMessage::Granted { rdv: peer, .. } | LeaseMessage::Disconnect { peer, .. } =
            &parsed
        {
            if *peer != from {
                return Err(RdvMessageError::NotSender {
                    claimed: Box::new(*peer),
                    sender: Box::new(from),
                });
            }
        }
        match parsed {
            LeaseMessage::Granted {
                rdv,
                rdv_adv,
                lease_ms,
                refuse_reason,
            } => {
                let cur = self.current();
                if lease_ms <= 0 {
                    if cur == Some(rdv) {
                        self.fail(rdv, LossReason::Refused(refuse_reason), now);
                    }
                    return Ok(());
                }
                let lease = lease_ms as u64;
                let renew_in = self.cfg.heartbeat_ms.min(lease / 2).max(1);
                let asked = match self.state {
                    State::Requesting { rdv: r, .. } | State::Connected { rdv: r, .. } => r == rdv,
                    State::Idle { .. } => false,
                };
                if !asked && !self.seeds.contains(&rdv) {
                    // Unsolicited: no request went to this peer and it is
                    // not one of our rendezvous.
                    return Ok(());
                }
                match self.state {
                    State::Connected { rdv: r, .. } if r == rdv => {
                        self.stats.grants += 1;
                        self.state = State::Connected {
                            rdv,
                            lease_end: now.saturating_add(lease),
                            next_renew: now.saturating_add(renew_in),
                            pending_since: None,
                        };
                    }
                    State::Connected { .. } => {
                        // A late grant from a rendezvous we gave up on: cancel
                        // it so it does not keep a ghost lease.
                        let d = LeaseMessage::Disconnect {
                            peer: self.me,
                            peer_adv: self.my_pa.clone(),
                        };
                        if self.out.len() < MAX_PENDING {
                            self.out.push_back(Transmit {
                                to: rdv,
                                dest: lease_address(&self.group),
                                message: d.to_message(),
                            });
                        }
                    }
                    State::Requesting { .. } | State::Idle { .. } => {
                        self.stats.grants += 1;
                        self.failed_in_round = 0;
                        self.backoff = self.cfg.backoff_min_ms;
                        if let Some(i) = self.seeds.iter().position(|s| *s == rdv) {
                            self.cursor = i;
                        }
                        self.state = State::Connected {
                            rdv,
                            lease_end: now.saturating_add(lease),
                            next_renew: now.saturating_add(renew_in),
                            pending_since: None,
                        };
                        self.event(EdgeEvent::Connected { rdv, rdv_adv });
                        self.event(EdgeEvent::RepublishSrdi { rdv });
                    }
                }
            }
            LeaseMessage::Disconnect { peer, .. } => {
                if self.current() == Some(peer) {
                    self.fail(peer, LossReason::Disconnected, now);
                }
            }
            LeaseMessage::Request { .. } => {}
        }
        Ok(())
    }

    /// Checks a message received on the propagation service (`JxtaPropagate`)
    /// as JXSE's edge does: a valid header, TTL > 0, not seen before, not
    /// looped back. Returns the listener to deliver it to, or `None` to drop
    /// it. Edges never forward propagated messages.
    ///
    /// Only our own rendezvous propagates to us: a message from `from`
    /// while leased to another peer (or to none) is refused with
    /// [`RdvMessageError::NotSender`].
    pub fn accept_propagated(
        &mut self,
        from: PeerId,
        msg: &Message,
    ) -> Result<Option<ServiceAddress>, RdvMessageError> {
        if self.current() != Some(from) {
            return Err(RdvMessageError::NotSender {
                claimed: Box::new(self.current().unwrap_or(self.me)),
                sender: Box::new(from),
            });
        }
        let h = PropagateHeader::from_message(msg, &self.group.unique_value())?;
        if h.ttl <= 0 || h.visited(&self.me) || !self.dedup.first_time(h.msg_id.as_bytes()) {
            return Ok(None);
        }
        Ok(Some(ServiceAddress {
            service: h.dest_service,
            param: h.dest_param,
        }))
    }

    /// Hands `msg` to the leased rendezvous for propagation group-wide to
    /// listener `dest` (JXSE's `RendezVousServiceClient.propagate`): a
    /// `RendezVousPropagateMessage` header with `msg_id`, TTL `ttl`
    /// (clamped to 1..=[`MAX_TTL`]) and this edge as the whole path, sent on
    /// `JxtaPropagate`. The rendezvous delivers it, fans it out to its other
    /// edges and its peer view; the ID is remembered here, so a copy that
    /// comes back is not delivered twice. Returns the rendezvous it went
    /// to, or `None` without a lease (nothing sent).
    pub fn propagate(
        &mut self,
        dest: &ServiceAddress,
        mut msg: Message,
        ttl: i32,
        msg_id: String,
    ) -> Option<PeerId> {
        let rdv = self.rendezvous()?;
        let hdr = PropagateHeader {
            msg_id,
            dest_service: dest.service.clone(),
            dest_param: dest.param.clone(),
            ttl: ttl.clamp(1, MAX_TTL),
            path: vec![self.me.to_string()],
        };
        self.dedup.first_time(hdr.msg_id.as_bytes());
        hdr.write_into(&mut msg, &self.group.unique_value());
        if self.out.len() >= MAX_PENDING {
            self.out.pop_front();
            self.stats.overflow += 1;
        }
        self.out.push_back(Transmit {
            to: rdv,
            dest: propagate_address(&self.group),
            message: msg,
        });
        Some(rdv)
    }

    /// Ends the lease politely (sends `Disconnect`) and stops.
    pub fn shutdown(&mut self) {
        if let Some(rdv) = self.current() {
            let d = LeaseMessage::Disconnect {
                peer: self.me,
                peer_adv: self.my_pa.clone(),
            };
            self.out.push_back(Transmit {
                to: rdv,
                dest: lease_address(&self.group),
                message: d.to_message(),
            });
        }
        self.state = State::Idle { retry_at: None };
        self.stopped = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::PeerAdvertisement;
    use crate::id::{IdFormat, IdType, JxtaId};

    fn peer(n: u8) -> PeerId {
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], [n; 16], IdType::Peer)
            .try_into()
            .unwrap()
    }

    fn pa(n: u8) -> Bytes {
        PeerAdvertisement::new(peer(n), PeerGroupId::NET, "p")
            .to_xml()
            .into()
    }

    fn grant(n: u8, lease: i64) -> Message {
        LeaseMessage::Granted {
            rdv: peer(n),
            rdv_adv: pa(n),
            lease_ms: lease,
            refuse_reason: None,
        }
        .to_message()
    }

    fn edge() -> EdgeClient {
        EdgeClient::new(
            peer(100),
            PeerGroupId::NET,
            pa(100),
            [peer(1), peer(2), peer(3)],
            EdgeConfig::default(),
        )
    }

    fn sent_to(e: &mut EdgeClient) -> Vec<PeerId> {
        let mut v = Vec::new();
        while let Some(t) = e.poll_transmit() {
            v.push(t.to);
        }
        v
    }

    #[test]
    fn extreme_lease_saturates() {
        // A rendezvous may grant i64::MAX ms; late in the clock's range
        // the lease end saturates instead of overflowing (first grant and
        // renewal alike), and the edge keeps renewing on its heartbeat.
        let mut e = edge();
        let t0 = u64::MAX - 1_000;
        e.handle_timeout(t0);
        assert_eq!(sent_to(&mut e), vec![peer(1)]);
        e.handle_message(peer(1), &grant(1, i64::MAX), t0).unwrap();
        assert_eq!(e.rendezvous(), Some(peer(1)));
        let renew = t0 + DEFAULT_HEARTBEAT_MS;
        assert_eq!(e.poll_timeout(), Some(renew));
        e.handle_timeout(renew);
        assert_eq!(sent_to(&mut e), vec![peer(1)]);
        e.handle_message(peer(1), &grant(1, i64::MAX), renew)
            .unwrap();
        assert_eq!(e.rendezvous(), Some(peer(1)));
        assert_eq!(e.poll_timeout(), Some(renew + DEFAULT_HEARTBEAT_MS));
    }

    #[test]
    fn lease_heartbeat_failover() {
        let mut e = edge();
        assert_eq!(e.poll_timeout(), Some(0));
        e.handle_timeout(0);
        assert_eq!(sent_to(&mut e), vec![peer(1)]);
        e.handle_message(peer(1), &grant(1, 60_000), 10).unwrap();
        assert_eq!(e.rendezvous(), Some(peer(1)));
        assert!(matches!(e.poll_event(), Some(EdgeEvent::Connected { .. })));
        assert_eq!(
            e.poll_event(),
            Some(EdgeEvent::RepublishSrdi { rdv: peer(1) })
        );
        // Heartbeat at 510, answered.
        assert_eq!(e.poll_timeout(), Some(510));
        e.handle_timeout(510);
        assert_eq!(sent_to(&mut e), vec![peer(1)]);
        e.handle_message(peer(1), &grant(1, 60_000), 520).unwrap();
        assert_eq!(e.poll_event(), None);
        // Next heartbeat unanswered: failure detected response_timeout later.
        e.handle_timeout(1020);
        assert_eq!(sent_to(&mut e), vec![peer(1)]);
        e.handle_timeout(1020 + DEFAULT_RESPONSE_TIMEOUT_MS - 1);
        assert!(sent_to(&mut e).is_empty());
        e.handle_timeout(1020 + DEFAULT_RESPONSE_TIMEOUT_MS);
        assert_eq!(
            e.poll_event(),
            Some(EdgeEvent::Lost {
                rdv: peer(1),
                reason: LossReason::Timeout
            })
        );
        assert_eq!(sent_to(&mut e), vec![peer(2)], "next seed asked at once");
        // peer 2 refuses: peer 3 asked at once.
        let refuse = LeaseMessage::Granted {
            rdv: peer(2),
            rdv_adv: pa(2),
            lease_ms: 0,
            refuse_reason: Some("full".into()),
        };
        e.handle_message(peer(2), &refuse.to_message(), 1800)
            .unwrap();
        assert_eq!(
            e.poll_event(),
            Some(EdgeEvent::Lost {
                rdv: peer(2),
                reason: LossReason::Refused(Some("full".into()))
            })
        );
        assert_eq!(sent_to(&mut e), vec![peer(3)]);
        // peer 3 unreachable: a full round failed, so back off.
        e.handle_unreachable(&peer(3), 1801);
        assert!(sent_to(&mut e).is_empty());
        assert_eq!(e.poll_timeout(), Some(1801 + DEFAULT_BACKOFF_MIN_MS));
        e.handle_timeout(1801 + DEFAULT_BACKOFF_MIN_MS);
        assert_eq!(sent_to(&mut e), vec![peer(1)]);
        // A late grant from peer 3 while requesting peer 1 is taken.
        e.handle_message(peer(3), &grant(3, 60_000), 2000).unwrap();
        assert_eq!(e.rendezvous(), Some(peer(3)));
        // Then peer 1's grant arrives: cancelled.
        e.handle_message(peer(1), &grant(1, 60_000), 2001).unwrap();
        let t = e.poll_transmit().unwrap();
        assert_eq!(t.to, peer(1));
        assert!(matches!(
            LeaseMessage::from_message(&t.message).unwrap(),
            LeaseMessage::Disconnect { .. }
        ));
        assert_eq!(e.rendezvous(), Some(peer(3)));
        // The rendezvous disconnects us.
        let d = LeaseMessage::Disconnect {
            peer: peer(3),
            peer_adv: pa(3),
        };
        while e.poll_event().is_some() {}
        e.handle_message(peer(3), &d.to_message(), 2100).unwrap();
        assert_eq!(
            e.poll_event(),
            Some(EdgeEvent::Lost {
                rdv: peer(3),
                reason: LossReason::Disconnected
            })
        );
        assert_eq!(e.stats().failovers, 4);
        assert!(e.handle_message(peer(3), &Message::new(), 0).is_err());
    }

    #[test]
    fn short_lease_renews_at_half_and_expires() {
        let mut e = edge();
        e.handle_timeout(0);
        sent_to(&mut e);
        e.handle_message(peer(1), &grant(1, 400), 0).unwrap();
        assert_eq!(e.poll_timeout(), Some(200));
        e.handle_timeout(200);
        assert_eq!(sent_to(&mut e), vec![peer(1)]);
        // Unanswered; the lease end (400) comes before the response timeout.
        assert_eq!(e.poll_timeout(), Some(400));
        e.handle_timeout(400);
        while let Some(ev) = e.poll_event() {
            if let EdgeEvent::Lost { reason, .. } = ev {
                assert_eq!(reason, LossReason::Expired);
            }
        }
        assert_eq!(sent_to(&mut e), vec![peer(2)]);
    }

    #[test]
    fn shutdown_disconnects_and_ignores_grants() {
        let mut e = edge();
        e.handle_timeout(0);
        sent_to(&mut e);
        e.handle_message(peer(1), &grant(1, 60_000), 0).unwrap();
        e.shutdown();
        let t = e.poll_transmit().unwrap();
        assert_eq!(t.to, peer(1));
        assert!(matches!(
            LeaseMessage::from_message(&t.message).unwrap(),
            LeaseMessage::Disconnect { .. }
        ));
        assert_eq!(e.poll_timeout(), None);
        e.handle_message(peer(2), &grant(2, 60_000), 10).unwrap();
        assert_eq!(e.rendezvous(), None);
    }

    #[test]
    fn propagate_goes_to_the_leased_rendezvous_only_and_is_not_echoed() {
        let mut e = edge();
        let dest = ServiceAddress::new("PipeService", Some("urn:jxta:p"));
        assert_eq!(
            e.propagate(&dest, Message::new(), 5, "m0".into()),
            None,
            "no lease: nothing sent"
        );
        e.handle_timeout(0);
        sent_to(&mut e);
        e.handle_message(peer(1), &grant(1, 60_000), 0).unwrap();
        assert_eq!(
            e.propagate(&dest, Message::new(), 10_000, "m1".into()),
            Some(peer(1))
        );
        let t = e.poll_transmit().unwrap();
        assert_eq!(t.to, peer(1));
        assert_eq!(t.dest, propagate_address(&PeerGroupId::NET));
        let g = PeerGroupId::NET.unique_value();
        let h = PropagateHeader::from_message(&t.message, &g).unwrap();
        assert_eq!(h.msg_id, "m1");
        assert_eq!(h.ttl, MAX_TTL, "TTL capped");
        assert_eq!(h.path, vec![peer(100).to_string()]);
        assert_eq!(h.dest_service, "PipeService");
        // The rendezvous' copy coming back (its path now longer) is not
        // delivered: the edge is on the path and knows the ID.
        let mut back = t.message.clone();
        let mut h2 = h.clone();
        h2.path.push(peer(1).to_string());
        h2.write_into(&mut back, &g);
        assert_eq!(e.accept_propagated(peer(1), &back).unwrap(), None);
    }

    #[test]
    fn propagated_messages_deduplicated() {
        let mut e = edge();
        let h = PropagateHeader {
            msg_id: "m1".into(),
            dest_service: "svc".into(),
            dest_param: None,
            ttl: 2,
            path: vec![peer(1).to_string()],
        };
        let mut m = Message::new();
        h.write_into(&mut m, "jxta-NetGroup");
        // Not leased: nobody may propagate to us.
        assert!(matches!(
            e.accept_propagated(peer(1), &m),
            Err(RdvMessageError::NotSender { .. })
        ));
        e.handle_timeout(0);
        sent_to(&mut e);
        e.handle_message(peer(1), &grant(1, 60_000), 0).unwrap();
        // Another peer than our rendezvous: refused.
        assert!(matches!(
            e.accept_propagated(peer(2), &m),
            Err(RdvMessageError::NotSender { .. })
        ));
        assert_eq!(
            e.accept_propagated(peer(1), &m).unwrap(),
            Some(ServiceAddress::new("svc", None))
        );
        assert_eq!(e.accept_propagated(peer(1), &m).unwrap(), None);
        assert!(e.accept_propagated(peer(1), &Message::new()).is_err());
    }

    #[test]
    fn grants_and_disconnects_act_only_for_their_sender() {
        let mut e = edge();
        e.handle_timeout(0);
        sent_to(&mut e);
        // peer(2) forges a grant in peer(1)'s name: refused.
        assert!(matches!(
            e.handle_message(peer(2), &grant(1, 60_000), 0),
            Err(RdvMessageError::NotSender { .. })
        ));
        assert_eq!(e.rendezvous(), None);
        // A grant of a peer that is neither asked nor a seed: ignored.
        let stranger = peer(77);
        e.handle_message(stranger, &grant(77, 60_000), 0).unwrap();
        assert_eq!(e.rendezvous(), None);
        e.handle_message(peer(1), &grant(1, 60_000), 0).unwrap();
        assert_eq!(e.rendezvous(), Some(peer(1)));
        // A disconnect in the rendezvous' name from someone else: refused.
        let d = LeaseMessage::Disconnect {
            peer: peer(1),
            peer_adv: PeerAdvertisement::new(peer(1), PeerGroupId::NET, "r")
                .to_xml()
                .into(),
        };
        assert!(e.handle_message(peer(2), &d.to_message(), 5).is_err());
        assert_eq!(e.rendezvous(), Some(peer(1)));
        // An extreme lease length saturates instead of wrapping.
        e.handle_message(peer(1), &grant(1, i64::MAX), u64::MAX - 5)
            .unwrap();
        assert_eq!(e.rendezvous(), Some(peer(1)));
    }
}
