//! The edge's relay client: leases a slot at one of its seed relays and
//! keeps it (renews at half the lease, moves to the next seed when a relay
//! refuses, does not answer, or its connection drops).
//!
//! The runtime does what the [`ClientEvent`]s from
//! [`RelayClient::poll_event`] say (dial a seed, send a request, the lease
//! gained or lost), reports what happened with the `handle_*` inputs, and
//! calls [`RelayClient::handle_timeout`] at [`RelayClient::poll_timeout`];
//! time is [`Millis`].

use std::collections::VecDeque;

use super::{Refusal, RelayRequest, RelayResponse};
use crate::id::PeerId;
use crate::time::Millis;

/// Most events held for the owner (past this the oldest is dropped and
/// counted in [`RelayClient::dropped`]; an owner that polls after every
/// input holds at most two).
pub const MAX_EVENTS: usize = 64;

/// Timers of the relay client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// Lease length asked for, ms.
    pub lease_ms: u64,
    /// How long to wait for a connection or an answer, ms.
    pub response_timeout_ms: u64,
    /// Wait before trying the seeds again after all failed, ms.
    pub backoff_ms: u64,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            lease_ms: 3_600_000,
            response_timeout_ms: 5_000,
            backoff_ms: 2_000,
        }
    }
}

/// Where the client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientState {
    /// Waiting until `until` before trying a seed.
    Idle {
        /// When to try again.
        until_ms: u64,
    },
    /// Dialling seed `seed`.
    Connecting {
        /// Seed index.
        seed: usize,
        /// Give up at.
        deadline_ms: u64,
    },
    /// Asked `relay` for a lease.
    Requested {
        /// Seed index.
        seed: usize,
        /// The relay.
        relay: PeerId,
        /// Give up at.
        deadline_ms: u64,
    },
    /// Holding a lease at `relay`.
    Leased {
        /// Seed index.
        seed: usize,
        /// The relay.
        relay: PeerId,
        /// Renew at.
        renew_ms: u64,
        /// The lease ends at.
        expires_ms: u64,
    },
}

/// What the runtime must do, or learn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// Dial seed number `seed`, then call [`RelayClient::handle_connected`]
    /// or [`RelayClient::handle_connect_failed`].
    Connect {
        /// Seed index.
        seed: usize,
    },
    /// Send this request to `relay`'s relay service.
    Send {
        /// The relay.
        relay: PeerId,
        /// The request.
        request: RelayRequest,
    },
    /// A lease was gained at `relay`.
    LeaseGained {
        /// The relay.
        relay: PeerId,
    },
    /// The lease at `relay` is gone.
    LeaseLost {
        /// The relay.
        relay: PeerId,
    },
}

/// The lease state machine (see the module comment).
///
/// ```
/// use juxta_proto::relay::client::{ClientEvent, ClientConfig, RelayClient};
/// use juxta_proto::relay::RelayResponse;
/// use juxta_proto::id::PeerId;
/// let r = PeerId::from_public_key_spki(b"r");
/// let mut c = RelayClient::new(1, ClientConfig::default());
/// assert_eq!(c.poll_timeout(), Some(0));
/// c.handle_timeout(0);
/// assert_eq!(c.poll_event(), Some(ClientEvent::Connect { seed: 0 }));
/// c.handle_connected(0, r, 1);
/// assert!(matches!(c.poll_event(), Some(ClientEvent::Send { .. })));
/// c.handle_response(r, &RelayResponse::Connected { lease_ms: 60_000, relay: Some(r), relay_adv: None }, 2);
/// assert_eq!(c.poll_event(), Some(ClientEvent::LeaseGained { relay: r }));
/// assert_eq!(c.relay(), Some(r));
/// assert_eq!(c.poll_timeout(), Some(2 + 30_000), "renews at half the lease");
/// ```
#[derive(Debug, Clone)]
pub struct RelayClient {
    cfg: ClientConfig,
    seeds: usize,
    next_seed: usize,
    tried: usize,
    state: ClientState,
    events: VecDeque<ClientEvent>,
    dropped: u64,
}

impl RelayClient {
    /// A client with `seeds` seed relays (numbered from 0).
    pub fn new(seeds: usize, cfg: ClientConfig) -> RelayClient {
        RelayClient {
            cfg,
            seeds,
            next_seed: 0,
            tried: 0,
            state: ClientState::Idle { until_ms: 0 },
            events: VecDeque::new(),
            dropped: 0,
        }
    }

    /// The next thing to do or learn, oldest first.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Events dropped because the owner did not poll them.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// When [`RelayClient::handle_timeout`] is next due (`None`: never,
    /// with no seeds).
    pub fn poll_timeout(&self) -> Option<Millis> {
        let at = match self.state {
            ClientState::Idle { until_ms } => until_ms,
            ClientState::Connecting { deadline_ms, .. }
            | ClientState::Requested { deadline_ms, .. } => deadline_ms,
            ClientState::Leased {
                renew_ms,
                expires_ms,
                ..
            } => renew_ms.min(expires_ms),
        };
        (at != Millis::MAX).then_some(at)
    }

    fn push(&mut self, events: Vec<ClientEvent>) {
        for e in events {
            if self.events.len() >= MAX_EVENTS {
                self.events.pop_front();
                self.dropped = self.dropped.saturating_add(1);
            }
            self.events.push_back(e);
        }
    }

    /// The state.
    pub fn state(&self) -> &ClientState {
        &self.state
    }

    /// The relay leased, if any.
    pub fn relay(&self) -> Option<PeerId> {
        match self.state {
            ClientState::Leased { relay, .. } => Some(relay),
            _ => None,
        }
    }

    fn next(&mut self, now_ms: u64) -> Vec<ClientEvent> {
        if self.seeds == 0 {
            self.state = ClientState::Idle { until_ms: u64::MAX };
            return Vec::new();
        }
        if self.tried >= self.seeds {
            self.tried = 0;
            self.state = ClientState::Idle {
                until_ms: now_ms.saturating_add(self.cfg.backoff_ms),
            };
            return Vec::new();
        }
        let seed = self.next_seed % self.seeds;
        self.next_seed = (seed + 1) % self.seeds;
        self.tried += 1;
        self.state = ClientState::Connecting {
            seed,
            deadline_ms: now_ms.saturating_add(self.cfg.response_timeout_ms),
        };
        vec![ClientEvent::Connect { seed }]
    }

    fn lost(&mut self, now_ms: u64) -> Vec<ClientEvent> {
        let mut out = Vec::new();
        if let ClientState::Leased { relay, .. } = self.state {
            out.push(ClientEvent::LeaseLost { relay });
        }
        out.extend(self.next(now_ms));
        out
    }

    /// Time passes: starts, retries, renews, or gives up on a relay.
    pub fn handle_timeout(&mut self, now: Millis) {
        let e = self.timeout(now);
        self.push(e);
    }

    fn timeout(&mut self, now_ms: u64) -> Vec<ClientEvent> {
        match self.state.clone() {
            ClientState::Idle { until_ms } if now_ms >= until_ms => self.next(now_ms),
            ClientState::Connecting { deadline_ms, .. }
            | ClientState::Requested { deadline_ms, .. }
                if now_ms >= deadline_ms =>
            {
                self.next(now_ms)
            }
            ClientState::Leased {
                seed,
                relay,
                renew_ms,
                expires_ms,
            } => {
                if now_ms >= expires_ms {
                    self.lost(now_ms)
                } else if now_ms >= renew_ms {
                    self.state = ClientState::Leased {
                        seed,
                        relay,
                        renew_ms: expires_ms,
                        expires_ms,
                    };
                    vec![ClientEvent::Send {
                        relay,
                        request: RelayRequest::Connect {
                            lease_ms: Some(self.cfg.lease_ms),
                        },
                    }]
                } else {
                    Vec::new()
                }
            }
            _ => Vec::new(),
        }
    }

    /// Seed `seed` answered as peer `relay`: ask it for a lease.
    pub fn handle_connected(&mut self, seed: usize, relay: PeerId, now: Millis) {
        let e = self.connected(seed, relay, now);
        self.push(e);
    }

    fn connected(&mut self, seed: usize, relay: PeerId, now_ms: u64) -> Vec<ClientEvent> {
        match self.state {
            ClientState::Connecting { seed: s, .. } if s == seed => {
                self.state = ClientState::Requested {
                    seed,
                    relay,
                    deadline_ms: now_ms.saturating_add(self.cfg.response_timeout_ms),
                };
                vec![ClientEvent::Send {
                    relay,
                    request: RelayRequest::Connect {
                        lease_ms: Some(self.cfg.lease_ms),
                    },
                }]
            }
            _ => Vec::new(),
        }
    }

    /// Dialling seed `seed` failed: the next seed.
    pub fn handle_connect_failed(&mut self, seed: usize, now: Millis) {
        let e = match self.state {
            ClientState::Connecting { seed: s, .. } if s == seed => self.next(now),
            _ => Vec::new(),
        };
        self.push(e);
    }

    /// A response from `from`'s relay service.
    pub fn handle_response(&mut self, from: PeerId, resp: &RelayResponse, now: Millis) {
        let e = self.response(from, resp, now);
        self.push(e);
    }

    fn response(&mut self, from: PeerId, resp: &RelayResponse, now_ms: u64) -> Vec<ClientEvent> {
        let (seed, relay, was_leased) = match self.state {
            ClientState::Requested { seed, relay, .. } => (seed, relay, false),
            ClientState::Leased { seed, relay, .. } => (seed, relay, true),
            _ => return Vec::new(),
        };
        if from != relay {
            return Vec::new();
        }
        match resp {
            RelayResponse::Connected { lease_ms, .. } => {
                let lease = (*lease_ms).max(1);
                self.tried = 0;
                self.state = ClientState::Leased {
                    seed,
                    relay,
                    renew_ms: now_ms.saturating_add(lease / 2),
                    expires_ms: now_ms.saturating_add(lease),
                };
                if was_leased {
                    Vec::new()
                } else {
                    vec![ClientEvent::LeaseGained { relay }]
                }
            }
            RelayResponse::Disconnected
            | RelayResponse::Refused(
                Refusal::Unauthenticated | Refusal::Full | Refusal::NotRelay,
            ) => self.lost(now_ms),
            // A refused message (queue full, quota, ...) leaves the lease.
            RelayResponse::Refused(_) => Vec::new(),
            RelayResponse::Pid(_) => Vec::new(),
        }
    }

    /// The connection to `peer` closed.
    pub fn handle_link_down(&mut self, peer: PeerId, now: Millis) {
        let e = match self.state {
            ClientState::Requested { relay, .. } | ClientState::Leased { relay, .. }
                if relay == peer =>
            {
                self.lost(now)
            }
            _ => Vec::new(),
        };
        self.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each input, followed by the events it caused.
    impl RelayClient {
        fn drain(&mut self) -> Vec<ClientEvent> {
            std::iter::from_fn(|| self.poll_event()).collect()
        }
        fn tick(&mut self, now: Millis) -> Vec<ClientEvent> {
            self.handle_timeout(now);
            self.drain()
        }
        fn on_connected(&mut self, seed: usize, relay: PeerId, now: Millis) -> Vec<ClientEvent> {
            self.handle_connected(seed, relay, now);
            self.drain()
        }
        fn on_connect_failed(&mut self, seed: usize, now: Millis) -> Vec<ClientEvent> {
            self.handle_connect_failed(seed, now);
            self.drain()
        }
        fn on_response(
            &mut self,
            from: PeerId,
            r: &RelayResponse,
            now: Millis,
        ) -> Vec<ClientEvent> {
            self.handle_response(from, r, now);
            self.drain()
        }
        fn on_disconnected(&mut self, peer: PeerId, now: Millis) -> Vec<ClientEvent> {
            self.handle_link_down(peer, now);
            self.drain()
        }
    }

    #[test]
    fn the_deadline_follows_the_state_and_events_stay_bounded() {
        let cfg = ClientConfig {
            lease_ms: 1_000,
            response_timeout_ms: 100,
            backoff_ms: 500,
        };
        let mut c = RelayClient::new(1, cfg);
        assert_eq!(c.poll_timeout(), Some(0));
        c.handle_timeout(0);
        assert_eq!(c.poll_timeout(), Some(100), "dial deadline");
        c.handle_connected(0, p(1), 10);
        assert_eq!(c.poll_timeout(), Some(110), "answer deadline");
        c.handle_response(p(1), &connected(1_000), 20);
        assert_eq!(c.poll_timeout(), Some(520), "renewal at half");
        assert_eq!(c.drain().len(), 3);
        // No seeds: never due.
        let mut none = RelayClient::new(0, cfg);
        none.handle_timeout(0);
        assert_eq!(none.poll_timeout(), None);
        // An owner that never polls: bounded, counted.
        let mut c = RelayClient::new(1, cfg);
        for k in 0..200 {
            c.handle_timeout(k * 1_000);
            c.handle_connect_failed(0, k * 1_000 + 1);
        }
        assert!(c.events.len() <= MAX_EVENTS);
        assert!(c.dropped() > 0);
    }

    fn p(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n])
    }

    fn connected(lease_ms: u64) -> RelayResponse {
        RelayResponse::Connected {
            lease_ms,
            relay: None,
            relay_adv: None,
        }
    }

    #[test]
    fn fails_over_between_seeds_and_backs_off() {
        let cfg = ClientConfig {
            lease_ms: 1_000,
            response_timeout_ms: 100,
            backoff_ms: 500,
        };
        let mut c = RelayClient::new(2, cfg);
        assert_eq!(c.tick(0), vec![ClientEvent::Connect { seed: 0 }]);
        assert_eq!(c.tick(50), vec![]);
        assert_eq!(
            c.on_connect_failed(0, 60),
            vec![ClientEvent::Connect { seed: 1 }]
        );
        c.on_connected(1, p(1), 70);
        // Refused: both seeds tried, back off.
        assert_eq!(
            c.on_response(p(1), &RelayResponse::Refused(Refusal::Full), 80),
            vec![]
        );
        assert!(matches!(c.state(), ClientState::Idle { until_ms: 580 }));
        assert_eq!(c.tick(500), vec![]);
        assert_eq!(c.tick(580), vec![ClientEvent::Connect { seed: 0 }]);
        // No answer in time: next seed.
        c.on_connected(0, p(0), 590);
        assert_eq!(c.tick(700), vec![ClientEvent::Connect { seed: 1 }]);
    }

    #[test]
    fn renews_at_half_and_reacts_to_loss() {
        let mut c = RelayClient::new(1, ClientConfig::default());
        c.tick(0);
        c.on_connected(0, p(1), 0);
        // A response from someone else is ignored.
        assert_eq!(c.on_response(p(2), &connected(1_000), 1), vec![]);
        assert_eq!(
            c.on_response(p(1), &connected(1_000), 1),
            vec![ClientEvent::LeaseGained { relay: p(1) }]
        );
        assert_eq!(c.tick(400), vec![]);
        assert!(matches!(
            c.tick(501)[0],
            ClientEvent::Send {
                request: RelayRequest::Connect { .. },
                ..
            }
        ));
        assert_eq!(c.tick(600), vec![], "renewal sent once");
        assert_eq!(c.on_response(p(1), &connected(1_000), 610), vec![]);
        // A refused message does not end the lease.
        assert_eq!(
            c.on_response(p(1), &RelayResponse::Refused(Refusal::QueueFull), 620),
            vec![]
        );
        assert_eq!(c.relay(), Some(p(1)));
        assert_eq!(c.on_disconnected(p(9), 700), vec![]);
        assert_eq!(
            c.on_disconnected(p(1), 700),
            vec![
                ClientEvent::LeaseLost { relay: p(1) },
                ClientEvent::Connect { seed: 0 }
            ]
        );
        // An expired lease is lost too.
        c.on_connected(0, p(1), 710);
        c.on_response(p(1), &connected(100), 720);
        assert_eq!(c.tick(820)[0], ClientEvent::LeaseLost { relay: p(1) });
    }
}
