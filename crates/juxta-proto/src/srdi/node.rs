//! The SRDI side of a rendezvous as one sans-IO state machine, so the
//! runtime (and the simulator) only move messages: it owns the
//! [`SrdiIndex`] and the [`Admission`] control, indexes and replicates
//! incoming SRDI messages, and turns each resolver query into actions under
//! the configured [`SearchModel`].
//!
//! The owner feeds it the current global view
//! ([`super::placement::global_view`] over the peer view) and executes the
//! [`SrdiAction`]s: plain sends, walks (via
//! `RendezvousServer::walk`) and floods (via `RendezvousServer::propagate`).

use std::collections::VecDeque;

use crate::endpoint::ServiceAddress;
use crate::id::PeerId;
use crate::message::Message;
use crate::rendezvous::messages::BusyNotice;
use crate::rendezvous::{Millis, Transmit};
use crate::resolver::{query_queue, response_queue, srdi_queue, ResolverQuery, RESOLVER_SERVICE};

use super::flow::{Admission, AdmissionConfig, Admit};
use super::index::{AddOutcome, SrdiIndex};
use super::placement::{replica_expr, replicate};
use super::search::{decide, QueryContext, QueryPlan, SearchModel};
use super::{ResolverSrdi, SrdiError, SrdiMessage, SCOPE_REPLICATE};

/// How often the index is swept for expired entries.
pub const EXPIRE_INTERVAL_MS: u64 = 10_000;
/// Most index hits a query is forwarded to.
pub const MAX_FORWARD: usize = 10;
/// Default walk TTL.
pub const DEFAULT_WALK_TTL: i32 = 10;
/// Default flood TTL.
pub const DEFAULT_FLOOD_TTL: i32 = 3;
/// Most actions queued (oldest discarded beyond, counted in
/// [`SrdiNodeStats::overflow`]).
pub const MAX_PENDING_ACTIONS: usize = 65_536;

/// Configuration of an [`SrdiNode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrdiNodeConfig {
    /// The search model.
    pub model: SearchModel,
    /// Admission control for queries arriving from their origin.
    pub admission: AdmissionConfig,
    /// Index bound: (key, peer) pairs.
    pub max_entries: usize,
    /// Index bound: entries per publisher.
    pub max_per_peer: usize,
    /// TTL of walks started here.
    pub walk_ttl: i32,
    /// TTL of floods started here.
    pub flood_ttl: i32,
}

impl Default for SrdiNodeConfig {
    fn default() -> SrdiNodeConfig {
        SrdiNodeConfig {
            model: SearchModel::Srdi,
            admission: AdmissionConfig::default(),
            max_entries: super::index::DEFAULT_MAX_ENTRIES,
            max_per_peer: super::index::DEFAULT_MAX_PER_PEER,
            walk_ttl: DEFAULT_WALK_TTL,
            flood_ttl: DEFAULT_FLOOD_TTL,
        }
    }
}

/// What the owner must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SrdiAction {
    /// Send this message.
    Send(Transmit),
    /// Walk `message` to `dest` on the other rendezvous
    /// (`RendezvousServer::walk(dest, message, ttl)`).
    Walk {
        /// The listener on the other rendezvous.
        dest: ServiceAddress,
        /// The message (with its walker header if it arrived by a walk).
        message: Message,
        /// TTL.
        ttl: i32,
    },
    /// Propagate `message` group-wide (`RendezvousServer::propagate`).
    Flood {
        /// The listener everywhere.
        dest: ServiceAddress,
        /// The message.
        message: Message,
        /// TTL.
        ttl: i32,
    },
}

/// How a query reached this rendezvous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Sent to us directly (by its origin or forwarded).
    Direct,
    /// By a limited-range walk.
    Walked,
    /// By propagation.
    Flooded,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SrdiNodeStats {
    /// Busy answers sent.
    pub busy: u64,
    /// Queries handled (admitted).
    pub queries: u64,
    /// SRDI messages that did not parse.
    pub malformed: u64,
    /// Index entries refused by its bounds.
    pub refused_entries: u64,
    /// Actions discarded because the owner did not drain.
    pub overflow: u64,
}

/// The SRDI state of one rendezvous.
#[derive(Debug)]
pub struct SrdiNode {
    me: PeerId,
    group_unique: String,
    handler: String,
    cfg: SrdiNodeConfig,
    index: SrdiIndex,
    adm: Admission,
    next_expire: Millis,
    out: VecDeque<SrdiAction>,
    stats: SrdiNodeStats,
}

impl SrdiNode {
    /// The SRDI node of rendezvous `me` in a group, for SRDI handler
    /// `handler` (the name written in the `jxta:ResolverSRDI` envelopes it
    /// sends).
    pub fn new(me: PeerId, group_unique: &str, handler: &str, cfg: SrdiNodeConfig) -> SrdiNode {
        SrdiNode {
            me,
            group_unique: group_unique.to_string(),
            handler: handler.to_string(),
            index: SrdiIndex::new(cfg.max_entries, cfg.max_per_peer),
            adm: Admission::new(cfg.admission),
            cfg,
            next_expire: EXPIRE_INTERVAL_MS,
            out: VecDeque::new(),
            stats: SrdiNodeStats::default(),
        }
    }

    /// The index.
    pub fn index(&self) -> &SrdiIndex {
        &self.index
    }

    /// The admission control.
    pub fn admission(&self) -> &Admission {
        &self.adm
    }

    /// The search model.
    pub fn model(&self) -> SearchModel {
        self.cfg.model
    }

    /// Counters.
    pub fn stats(&self) -> SrdiNodeStats {
        self.stats
    }

    /// Next action, oldest first.
    pub fn poll_action(&mut self) -> Option<SrdiAction> {
        self.out.pop_front()
    }

    /// When [`SrdiNode::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Millis> {
        Some(self.next_expire)
    }

    /// Sweeps expired index entries when due.
    pub fn handle_timeout(&mut self, now: Millis) {
        if now >= self.next_expire {
            self.index.expire(now);
            self.next_expire = now + EXPIRE_INTERVAL_MS;
        }
    }

    fn push(&mut self, a: SrdiAction) {
        if self.out.len() >= MAX_PENDING_ACTIONS {
            self.out.pop_front();
            self.stats.overflow += 1;
        }
        self.out.push_back(a);
    }

    fn srdi_addr(&self) -> ServiceAddress {
        ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(&self.group_unique)))
    }

    fn send_srdi(&mut self, to: PeerId, m: &SrdiMessage) {
        let env = ResolverSrdi {
            handler: self.handler.clone(),
            payload: m.to_xml(),
        };
        let t = Transmit {
            to,
            dest: self.srdi_addr(),
            message: Message::new().with(env.to_element(&self.group_unique)),
        };
        self.push(SrdiAction::Send(t));
    }

    /// A peer left (lease ended): forget its entries.
    pub fn remove_peer(&mut self, peer: &PeerId) -> usize {
        self.index.remove_peer(peer)
    }

    /// Handles an SRDI message (the `<group>Srdi` element) received at
    /// `now`, with the current global view: indexes it and replicates it
    /// (SRDI model), or hands it to the central server (centralized model).
    ///
    /// `from` is the (proven) sender: an edge may push only its own
    /// entries; peers of the `view` replicate entries of others.
    pub fn handle_srdi(
        &mut self,
        from: &PeerId,
        msg: &Message,
        view: &[PeerId],
        now: Millis,
    ) -> Result<AddOutcome, SrdiError> {
        let sm = ResolverSrdi::from_message(msg, &self.group_unique)
            .and_then(|e| e.srdi_message())
            .inspect_err(|_| self.stats.malformed += 1)?;
        if sm.peer != *from && !view.contains(from) {
            self.stats.refused_entries += sm.entries.len() as u64;
            return Err(SrdiError::NotOwner {
                owner: Box::new(sm.peer),
                sender: Box::new(*from),
            });
        }
        if let SearchModel::Centralized { server } = self.cfg.model {
            if server != self.me {
                self.send_srdi(server, &SrdiMessage { scope: 0, ..sm });
                return Ok(AddOutcome::default());
            }
        }
        let out = self.index.add_message(&sm, now);
        self.stats.refused_entries += out.refused as u64;
        if self.cfg.model == SearchModel::Srdi {
            for (dest, bin) in replicate(&sm, view, &self.me) {
                self.send_srdi(dest, &bin);
            }
        }
        Ok(out)
    }

    /// After a peer view change: re-places the live entries of `clients`
    /// (the edges leased here) over the new view (SRDI model only).
    pub fn rereplicate(
        &mut self,
        clients: impl IntoIterator<Item = PeerId>,
        view: &[PeerId],
        now: Millis,
    ) {
        if self.cfg.model != SearchModel::Srdi {
            return;
        }
        let mut clients: Vec<PeerId> = clients.into_iter().collect();
        clients.sort_by_cached_key(|p| p.to_string());
        // One pass over the index for every client (not one per client).
        let mut all = self.index.entries_of_each(&clients, now);
        for c in clients {
            for (pkey, mut entries) in all.remove(&c).unwrap_or_default() {
                entries.sort_by(|a, b| (&a.key, &a.value).cmp(&(&b.key, &b.value)));
                let m = SrdiMessage {
                    peer: c,
                    primary_key: pkey,
                    scope: SCOPE_REPLICATE,
                    entries,
                };
                for (dest, bin) in replicate(&m, view, &self.me) {
                    self.send_srdi(dest, &bin);
                }
            }
        }
    }

    /// Handles a resolver query. `raw` is the message it came in (kept for
    /// walks, whose header it carries); `key` is the `(primary key,
    /// attribute, value)` the handler's query asks for, if it names one.
    /// Queries arriving from their origin pass admission control first; a
    /// refused one is answered with a [`BusyNotice`] to its source.
    /// Returns the plan chosen (`None` when answered busy).
    #[allow(clippy::too_many_arguments)]
    pub fn handle_query(
        &mut self,
        q: &ResolverQuery,
        raw: Message,
        key: Option<(&str, &str, &str)>,
        arrival: Arrival,
        view: &[PeerId],
        now: Millis,
    ) -> Option<QueryPlan> {
        if q.hop_count == 0 && arrival == Arrival::Direct {
            if let Admit::Busy { retry_after_ms } = self.adm.admit(q.src_peer, now) {
                self.stats.busy += 1;
                let b = BusyNotice {
                    query_id: q.query_id,
                    retry_after_ms,
                };
                let t = Transmit {
                    to: q.src_peer,
                    dest: ServiceAddress::new(
                        RESOLVER_SERVICE,
                        Some(&response_queue(&self.group_unique)),
                    ),
                    message: Message::new().with(b.to_element()),
                };
                self.push(SrdiAction::Send(t));
                return None;
            }
        }
        self.stats.queries += 1;
        let hits = match (self.cfg.model, key) {
            (SearchModel::Flooding, _) | (_, None) => Vec::new(),
            (_, Some((pk, at, v))) => self.index.query(pk, Some(at), Some(v), now, MAX_FORWARD),
        };
        let expr = key
            .filter(|k| !k.2.contains('*'))
            .map(|(pk, at, v)| replica_expr(pk, at, v));
        let ctx = QueryContext {
            me: self.me,
            hop_count: q.hop_count,
            index_hits: &hits,
            view,
            replica_expr: expr.as_deref(),
            walked: arrival == Arrival::Walked,
            flooded: arrival == Arrival::Flooded,
        };
        let plan = decide(self.cfg.model, &ctx);
        let ores = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(&self.group_unique)));
        match &plan {
            QueryPlan::Forward(peers) => {
                let mut q2 = q.clone();
                // The querier's number: saturating.
                q2.hop_count = q2.hop_count.saturating_add(1);
                let m = Message::new().with(q2.to_element(&self.group_unique));
                for p in peers {
                    self.push(SrdiAction::Send(Transmit {
                        to: *p,
                        dest: ores.clone(),
                        message: m.clone(),
                    }));
                }
            }
            QueryPlan::Walk => self.push(SrdiAction::Walk {
                dest: ores,
                message: raw,
                ttl: self.cfg.walk_ttl,
            }),
            QueryPlan::Flood => {
                let m = Message::new().with(q.to_element(&self.group_unique));
                self.push(SrdiAction::Flood {
                    dest: ores,
                    message: m,
                    ttl: self.cfg.flood_ttl,
                })
            }
            QueryPlan::Done => {}
        }
        Some(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{IdFormat, IdType, JxtaId};
    use crate::srdi::placement::global_view;
    use crate::srdi::SrdiEntry;

    fn peer(n: u8) -> PeerId {
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], [n; 16], IdType::Peer)
            .try_into()
            .unwrap()
    }

    fn publish(edge: PeerId, values: &[&str]) -> Message {
        let m = SrdiMessage {
            peer: edge,
            primary_key: "Adv".into(),
            scope: SCOPE_REPLICATE,
            entries: values
                .iter()
                .map(|v| SrdiEntry {
                    key: "Name".into(),
                    value: v.to_string(),
                    expiration: 60_000,
                })
                .collect(),
        };
        let env = ResolverSrdi {
            handler: "h".into(),
            payload: m.to_xml(),
        };
        Message::new().with(env.to_element("g"))
    }

    fn query(src: PeerId, hc: u32, value: &str) -> ResolverQuery {
        ResolverQuery {
            handler: "h".into(),
            query_id: 9,
            hop_count: hc,
            src_peer: src,
            query: value.into(),
            src_route: None,
        }
    }

    #[test]
    fn index_replicate_forward_and_busy() {
        let view = global_view(peer(1), [peer(2), peer(3)]);
        let mut n = SrdiNode::new(
            peer(1),
            "g",
            "h",
            SrdiNodeConfig {
                admission: AdmissionConfig {
                    per_querier_rate: 1,
                    per_querier_burst: 1,
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let values: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        // Another peer cannot push entries in peer 50's name.
        assert!(matches!(
            n.handle_srdi(&peer(51), &publish(peer(50), &refs), &view, 0),
            Err(SrdiError::NotOwner { .. })
        ));
        assert!(n.index().is_empty());
        let out = n
            .handle_srdi(&peer(50), &publish(peer(50), &refs), &view, 0)
            .unwrap();
        assert_eq!(out.stored, 20);
        let mut replicated = 0;
        while let Some(a) = n.poll_action() {
            let SrdiAction::Send(t) = a else { panic!() };
            assert_ne!(t.to, peer(1));
            let m = ResolverSrdi::from_message(&t.message, "g")
                .unwrap()
                .srdi_message()
                .unwrap();
            assert_eq!(m.scope, 0);
            replicated += m.entries.len();
        }
        assert!(replicated > 0 && replicated < 20);
        // A hit is forwarded to the publisher with HC + 1.
        let plan = n.handle_query(
            &query(peer(60), 0, "v3"),
            Message::new(),
            Some(("Adv", "Name", "v3")),
            Arrival::Direct,
            &view,
            1,
        );
        assert_eq!(plan, Some(QueryPlan::Forward(vec![peer(50)])));
        let Some(SrdiAction::Send(t)) = n.poll_action() else {
            panic!()
        };
        assert_eq!(t.to, peer(50));
        assert_eq!(
            ResolverQuery::from_message(&t.message, "g")
                .unwrap()
                .hop_count,
            1
        );
        // The same querier again at once: busy, with the query ID echoed.
        let plan = n.handle_query(
            &query(peer(60), 0, "v3"),
            Message::new(),
            Some(("Adv", "Name", "v3")),
            Arrival::Direct,
            &view,
            1,
        );
        assert_eq!(plan, None);
        let Some(SrdiAction::Send(t)) = n.poll_action() else {
            panic!()
        };
        assert_eq!(t.to, peer(60));
        assert_eq!(
            BusyNotice::from_message(&t.message).unwrap(),
            Some(BusyNotice {
                query_id: 9,
                retry_after_ms: 1000
            })
        );
        // Forwarded queries are not charged to the querier.
        let plan = n.handle_query(
            &query(peer(60), 1, "zz"),
            Message::new(),
            Some(("Adv", "Name", "zz")),
            Arrival::Direct,
            &view,
            1,
        );
        assert!(matches!(
            plan,
            Some(QueryPlan::Walk) | Some(QueryPlan::Forward(_))
        ));
        // The publisher leaves: its entries go.
        assert_eq!(n.remove_peer(&peer(50)), 20);
        assert!(n.handle_srdi(&peer(50), &Message::new(), &view, 0).is_err());
        assert_eq!(n.stats().malformed, 1);
    }

    #[test]
    fn centralized_hands_entries_to_the_server() {
        let view = global_view(peer(1), [peer(2)]);
        let mut n = SrdiNode::new(
            peer(1),
            "g",
            "h",
            SrdiNodeConfig {
                model: SearchModel::Centralized { server: peer(2) },
                ..Default::default()
            },
        );
        n.handle_srdi(&peer(50), &publish(peer(50), &["a"]), &view, 0)
            .unwrap();
        assert!(n.index().is_empty());
        let Some(SrdiAction::Send(t)) = n.poll_action() else {
            panic!()
        };
        assert_eq!(t.to, peer(2));
        let plan = n.handle_query(
            &query(peer(60), 0, "a"),
            Message::new(),
            Some(("Adv", "Name", "a")),
            Arrival::Direct,
            &view,
            0,
        );
        assert_eq!(plan, Some(QueryPlan::Forward(vec![peer(2)])));
        let mut f = SrdiNode::new(
            peer(1),
            "g",
            "h",
            SrdiNodeConfig {
                model: SearchModel::Flooding,
                ..Default::default()
            },
        );
        let plan = f.handle_query(
            &query(peer(60), 0, "a"),
            Message::new(),
            None,
            Arrival::Direct,
            &view,
            0,
        );
        assert_eq!(plan, Some(QueryPlan::Flood));
        assert!(matches!(
            f.poll_action(),
            Some(SrdiAction::Flood {
                ttl: DEFAULT_FLOOD_TTL,
                ..
            })
        ));
    }
}
