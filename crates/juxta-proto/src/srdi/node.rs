//! The SRDI side of a rendezvous as one sans-IO state machine, so the
//! runtime (and the simulator) only move messages: it owns the
//! [`SrdiIndex`] and the [`Admission`] control, indexes and replicates
//! incoming SRDI messages, and turns each resolver query into actions under
//! the configured [`SearchModel`].
//!
//! The owner feeds it the current global view
//! ([`super::placement::global_view`] over the peer view) and executes the
//! outputs: plain sends ([`SrdiNode::poll_transmit`]), walks (via
//! `RendezvousServer::walk`) and floods (via `RendezvousServer::propagate`)
//! ([`SrdiNode::poll_event`]).
//!
//! # Replication when the peer view changes
//!
//! JXSE (`net.jxta.impl.cm.SrdiManager`) replicates only when an SRDI
//! message arrives (`DiscoveryServiceImpl.processSrdi` indexes it, then
//! `SrdiManager.replicateEntries` bins its entries by replica peer and
//! `pushSrdi`s one message per bin); it never re-places entries when the
//! peer view changes: an entry whose replica left or moved is found again
//! only once its edge pushes it again (`SrdiManagerPeriodicPushTask` sends
//! deltas, i.e. new entries; everything only on `RDVCONNECT`) or it expires.
//! JXSE also indexes SRDI from any sender, with no acknowledgement.
//!
//! Juxta re-places the entries of the edges leased here after the view
//! changes (so lookups keep finding them while rendezvous come and go), but
//! coalesced, because a forming view of 1,000 rendezvous changes about
//! 1,000 times at each of them:
//! - a change only marks the placement dirty ([`SrdiNode::view_changed`]);
//!   the entries are re-placed once the view has been quiet for
//!   [`SrdiNodeConfig::settle_ms`], and at least every
//!   [`SrdiNodeConfig::max_defer_ms`] while it keeps changing (the
//!   rendezvous node caps this at one peer-view probe interval);
//! - each live entry is sent only to its replica under the new view, and
//!   only if that replica differs from the one under the view the entries
//!   were last placed over, or it is a peer that joined or left in between
//!   (it may have restarted empty). New entries arriving meanwhile are
//!   placed over that same last-placed view, so the difference is exact,
//!   and also sent to their replica under the current view, so they can
//!   be found at once instead of a settle period later (the re-placement
//!   may send them there again: at most one extra copy per entry);
//! - SRDI has no acknowledgement, so a replica cannot say it refused. A
//!   rendezvous accepts replicas only from peer-view members (an edge may
//!   push only its own entries), and a replica's own view may not hold the
//!   sender yet while views form. Rather than drop those entries (and
//!   depend on a later re-send), the receiving rendezvous holds them
//!   ([`SrdiNode::hold`], at most [`MAX_HELD_ENTRIES`] for at most
//!   [`HOLD_MS`], the oldest dropped first and counted in
//!   [`SrdiNodeStats::held_dropped`]) and indexes them when the sender joins
//!   its view ([`SrdiNode::release_held`]).

use std::collections::{HashSet, VecDeque};

use crate::endpoint::ServiceAddress;
use crate::id::PeerId;
use crate::message::Message;
use crate::rendezvous::messages::BusyNotice;
use crate::resolver::{query_queue, response_queue, srdi_queue, ResolverQuery, RESOLVER_SERVICE};
use crate::time::Millis;
use crate::transmit::Transmit;

use super::flow::{Admission, AdmissionConfig, Admit};
use super::index::{AddOutcome, SrdiIndex};
use super::placement::{
    replica_expr, replica_position, replicate, replicate_over, REPLICATION_THRESHOLD,
};
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
/// Most transmits, and most events, queued (oldest discarded beyond, counted in
/// [`SrdiNodeStats::overflow`]).
pub const MAX_PENDING_ACTIONS: usize = 65_536;
/// Default [`SrdiNodeConfig::settle_ms`].
pub const DEFAULT_SETTLE_MS: u64 = 1_000;
/// Default [`SrdiNodeConfig::max_defer_ms`].
pub const DEFAULT_MAX_DEFER_MS: u64 = 5_000;
/// Most replica entries held for senders not (yet) in the peer view.
pub const MAX_HELD_ENTRIES: usize = 4_096;
/// Longest a held replica entry waits for its sender to join the view
/// (JXSE's peer-view grace period).
pub const HOLD_MS: u64 = 300_000;
/// Most joined/left peers remembered between two placements; past this
/// the next placement re-sends every entry.
pub const MAX_TOUCHED: usize = 4_096;

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
    /// Entries are re-placed once the peer view has not changed for this
    /// long (ms).
    pub settle_ms: u64,
    /// ... and at least this often while it keeps changing (ms).
    pub max_defer_ms: u64,
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
            settle_ms: DEFAULT_SETTLE_MS,
            max_defer_ms: DEFAULT_MAX_DEFER_MS,
        }
    }
}

/// What the owner must do besides sending ([`SrdiNode::poll_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SrdiEvent {
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
    /// Times the leased edges' entries were re-placed over a changed view.
    pub rereplications: u64,
    /// SRDI messages those re-placements sent.
    pub rereplicated_messages: u64,
    /// Replica entries held because their sender was not (yet) in the
    /// peer view.
    pub held: u64,
    /// Held entries indexed once their sender joined the view.
    pub held_released: u64,
    /// Held entries dropped: over [`MAX_HELD_ENTRIES`] (oldest first) or
    /// older than [`HOLD_MS`].
    pub held_dropped: u64,
}

/// Replica entries from a sender not in the view, waiting for it to join.
#[derive(Debug)]
struct Held {
    at: Millis,
    from: PeerId,
    msg: SrdiMessage,
}

/// Where the leased edges' entries were last placed, and what changed since.
#[derive(Debug, Default)]
struct Placement {
    /// The global view the entries were last placed over (new entries are
    /// placed over it too until the next placement).
    placed: Vec<PeerId>,
    /// First unplaced change, if any.
    dirty_since: Option<Millis>,
    /// Latest change.
    last_change: Millis,
    /// Peers that joined or left since `placed`.
    touched: HashSet<PeerId>,
    /// `touched` overflowed: re-send everything.
    all: bool,
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
    out: VecDeque<Transmit>,
    events: VecDeque<SrdiEvent>,
    stats: SrdiNodeStats,
    placement: Placement,
    held: VecDeque<Held>,
    held_entries: usize,
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
            events: VecDeque::new(),
            stats: SrdiNodeStats::default(),
            placement: Placement::default(),
            held: VecDeque::new(),
            held_entries: 0,
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

    /// The next message to send, oldest first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next walk or flood to start, oldest first.
    pub fn poll_event(&mut self) -> Option<SrdiEvent> {
        self.events.pop_front()
    }

    /// When [`SrdiNode::handle_timeout`] (or, for a pending
    /// re-placement, [`SrdiNode::rereplicate`]) is next due.
    pub fn poll_timeout(&self) -> Option<Millis> {
        Some(
            self.placement_due()
                .map_or(self.next_expire, |t| t.min(self.next_expire)),
        )
    }

    /// Sweeps expired index entries and held replicas when due.
    pub fn handle_timeout(&mut self, now: Millis) {
        if now >= self.next_expire {
            self.index.expire(now);
            self.next_expire = now.saturating_add(EXPIRE_INTERVAL_MS);
            while self
                .held
                .front()
                .is_some_and(|h| h.at.saturating_add(HOLD_MS) <= now)
            {
                self.drop_oldest_held();
            }
        }
    }

    /// Replica entries held for senders not yet in the view.
    pub fn held_entries(&self) -> usize {
        self.held_entries
    }

    fn drop_oldest_held(&mut self) {
        if let Some(h) = self.held.pop_front() {
            let n = h.msg.entries.len();
            self.held_entries -= n;
            self.stats.held_dropped += n as u64;
        }
    }

    /// When the pending re-placement is due, if one is.
    fn placement_due(&self) -> Option<Millis> {
        let p = &self.placement;
        p.dirty_since.map(|first| {
            p.last_change
                .saturating_add(self.cfg.settle_ms)
                .min(first.saturating_add(self.cfg.max_defer_ms))
        })
    }

    /// Whether the leased edges' entries should be re-placed now
    /// ([`SrdiNode::rereplicate`]).
    pub fn rereplicate_due(&self, now: Millis) -> bool {
        self.placement_due().is_some_and(|t| t <= now)
    }

    fn mark_dirty(&mut self, now: Millis) {
        let p = &mut self.placement;
        p.dirty_since.get_or_insert(now);
        p.last_change = p.last_change.max(now);
    }

    /// The peer view changed at `now` in a way not reported by
    /// [`SrdiNode::view_changed`] (e.g. events were lost): re-place soon.
    pub fn view_stale(&mut self, now: Millis) {
        if self.cfg.model == SearchModel::Srdi {
            self.mark_dirty(now);
        }
    }

    /// The peer view changed: `peer` joined or left at `now`. Only marks
    /// the placement dirty; the owner calls [`SrdiNode::rereplicate`] when
    /// [`SrdiNode::rereplicate_due`] (see the module documentation).
    pub fn view_changed(&mut self, peer: PeerId, now: Millis) {
        if self.cfg.model != SearchModel::Srdi {
            return;
        }
        let p = &mut self.placement;
        if p.touched.len() < MAX_TOUCHED {
            p.touched.insert(peer);
        } else {
            p.all = true;
        }
        self.mark_dirty(now);
    }

    fn push(&mut self, t: Transmit) {
        if self.out.len() >= MAX_PENDING_ACTIONS {
            self.out.pop_front();
            self.stats.overflow += 1;
        }
        self.out.push_back(t);
    }

    fn push_event(&mut self, e: SrdiEvent) {
        if self.events.len() >= MAX_PENDING_ACTIONS {
            self.events.pop_front();
            self.stats.overflow += 1;
        }
        self.events.push_back(e);
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
        self.push(t);
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
        Ok(self.index_and_replicate(&sm, view, now))
    }

    fn index_and_replicate(
        &mut self,
        sm: &SrdiMessage,
        view: &[PeerId],
        now: Millis,
    ) -> AddOutcome {
        let out = self.index.add_message(sm, now);
        self.stats.refused_entries += out.refused as u64;
        if self.cfg.model == SearchModel::Srdi {
            // Over the view the other entries were placed over, so the
            // next re-placement's difference covers these too; while a
            // placement is pending, also to the replica the current view
            // names, so a lookup finds the entry now rather than after the
            // view settles.
            let placed = &self.placement.placed;
            let bins = if self.placement.dirty_since.is_some() && placed.as_slice() != view {
                replicate_over(sm, &[placed, view], &self.me)
            } else {
                replicate(sm, placed, &self.me)
            };
            for (dest, bin) in bins {
                self.send_srdi(dest, &bin);
            }
        }
        out
    }

    /// An SRDI message from `from`, which is neither leased here nor in the
    /// peer view: replica entries (of another peer) are held until `from`
    /// joins the view ([`SrdiNode::release_held`]), bounded; an edge's own
    /// entries are refused (it holds no lease here). Returns how many
    /// entries were held.
    pub fn hold(&mut self, from: &PeerId, msg: &Message, now: Millis) -> Result<usize, SrdiError> {
        let sm = ResolverSrdi::from_message(msg, &self.group_unique)
            .and_then(|e| e.srdi_message())
            .inspect_err(|_| self.stats.malformed += 1)?;
        if sm.peer == *from || self.cfg.model != SearchModel::Srdi || sm.entries.is_empty() {
            return Ok(0);
        }
        let n = sm.entries.len();
        if n > MAX_HELD_ENTRIES {
            self.stats.held_dropped += n as u64;
            return Ok(0);
        }
        while self.held_entries + n > MAX_HELD_ENTRIES {
            self.drop_oldest_held();
        }
        self.held_entries += n;
        self.stats.held += n as u64;
        self.held.push_back(Held {
            at: now,
            from: *from,
            msg: sm,
        });
        Ok(n)
    }

    /// `peer` joined the peer view: indexes the replica entries held for
    /// it. Returns how many entries were indexed or renewed.
    pub fn release_held(&mut self, peer: &PeerId, now: Millis) -> usize {
        if !self.held.iter().any(|h| h.from == *peer) {
            return 0;
        }
        let (mine, rest): (VecDeque<Held>, VecDeque<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.from == *peer);
        self.held = rest;
        let mut stored = 0;
        for h in mine {
            let n = h.msg.entries.len();
            self.held_entries -= n;
            self.stats.held_released += n as u64;
            // Held entries are replicas (scope 0): indexed, never
            // replicated again, so no view is needed.
            stored += self.index_and_replicate(&h.msg, &[], now).stored;
        }
        stored
    }

    /// Re-places the live entries of `clients` (the edges leased here)
    /// over `view`, the current global view (SRDI model only): each entry
    /// goes to its replica under `view` if that replica is not the one it
    /// was last placed on, or joined or left since. Clears the pending
    /// placement; call it when [`SrdiNode::rereplicate_due`].
    pub fn rereplicate(
        &mut self,
        clients: impl IntoIterator<Item = PeerId>,
        view: &[PeerId],
        now: Millis,
    ) {
        let p = std::mem::take(&mut self.placement);
        self.placement.placed = view.to_vec();
        if self.cfg.model != SearchModel::Srdi || view.len() < REPLICATION_THRESHOLD {
            return;
        }
        self.stats.rereplications += 1;
        let old_ok = p.placed.len() >= REPLICATION_THRESHOLD;
        let mut clients: Vec<PeerId> = clients.into_iter().collect();
        clients.sort_by_cached_key(|p| p.to_string());
        // One pass over the index for every client (not one per client).
        let mut all = self.index.entries_of_each(&clients, now);
        for c in clients {
            for (pkey, mut entries) in all.remove(&c).unwrap_or_default() {
                entries.retain(|e| {
                    let expr = replica_expr(&pkey, &e.key, &e.value);
                    let Some(new) = replica_position(&expr, view.len()).map(|i| view[i]) else {
                        return false;
                    };
                    if new == self.me {
                        return false;
                    }
                    p.all
                        || !old_ok
                        || p.touched.contains(&new)
                        || replica_position(&expr, p.placed.len()).map(|i| p.placed[i]) != Some(new)
                });
                if entries.is_empty() {
                    continue;
                }
                entries.sort_by(|a, b| (&a.key, &a.value).cmp(&(&b.key, &b.value)));
                let m = SrdiMessage {
                    peer: c,
                    primary_key: pkey,
                    scope: SCOPE_REPLICATE,
                    entries,
                };
                for (dest, bin) in replicate(&m, view, &self.me) {
                    self.stats.rereplicated_messages += 1;
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
                self.push(t);
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
                // The querier's number: saturating. The query goes on as
                // it came, only its hop count changed.
                let hc = q.hop_count.saturating_add(1);
                let m = Message::new().with(q.forwarded_element(&raw, &self.group_unique, hc));
                for p in peers {
                    self.push(Transmit {
                        to: *p,
                        dest: ores.clone(),
                        message: m.clone(),
                    });
                }
            }
            QueryPlan::Walk => self.push_event(SrdiEvent::Walk {
                dest: ores,
                message: raw,
                ttl: self.cfg.walk_ttl,
            }),
            QueryPlan::Flood => {
                let m = Message::new().with(q.to_element(&self.group_unique));
                self.push_event(SrdiEvent::Flood {
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
    use std::collections::HashMap;

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

    /// Where each replicated entry went: (destination, value).
    fn sent_entries(n: &mut SrdiNode) -> Vec<(PeerId, String)> {
        let mut v = Vec::new();
        while let Some(t) = n.poll_transmit() {
            let m = ResolverSrdi::from_message(&t.message, "g")
                .unwrap()
                .srdi_message()
                .unwrap();
            v.extend(m.entries.into_iter().map(|e| (t.to, e.value)));
        }
        v
    }

    /// An entry published while the placement over a changed view is still
    /// pending (the view has not settled) reaches its replica under the
    /// current view at once, as well as the one the last placement names:
    /// a lookup at the new replica must not miss for a settle period.
    #[test]
    fn entries_published_while_placement_is_pending_reach_the_current_replica() {
        let mut n = SrdiNode::new(peer(9), "g", "h", SrdiNodeConfig::default());
        let alone = global_view(peer(9), []);
        let two = global_view(peer(9), [peer(2)]);
        let three = global_view(peer(9), [peer(2), peer(3)]);
        let values: Vec<String> = (0..40).map(|i| format!("v{i}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        let replica = |view: &[PeerId], v: &str| {
            crate::srdi::placement::replica_peer(view, &replica_expr("Adv", "Name", v))
        };
        // Placed over the view of one (no replicas), then peer 2 joins: the
        // re-placement is pending while new entries arrive.
        n.rereplicate([], &alone, 0);
        n.view_changed(peer(2), 10);
        assert!(!n.rereplicate_due(10));
        n.handle_srdi(&peer(50), &publish(peer(50), &refs), &two, 10)
            .unwrap();
        let sent = sent_entries(&mut n);
        let want: Vec<(PeerId, String)> = values
            .iter()
            .filter_map(|v| {
                replica(&two, v)
                    .filter(|r| *r != peer(9))
                    .map(|r| (r, v.clone()))
            })
            .collect();
        assert!(!want.is_empty(), "some replicas fall on peer 2");
        let mut got = sent.clone();
        got.sort_by(|a, b| a.1.cmp(&b.1));
        let mut want_sorted = want.clone();
        want_sorted.sort_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(got, want_sorted);
        // Placed over two, then peer 3 joins: a new entry goes to its
        // replica under both views (once when they agree), never to self.
        n.rereplicate([peer(50)], &two, DEFAULT_SETTLE_MS + 10);
        sent_entries(&mut n);
        n.view_changed(peer(3), DEFAULT_SETTLE_MS + 20);
        n.handle_srdi(
            &peer(51),
            &publish(peer(51), &refs),
            &three,
            DEFAULT_SETTLE_MS + 20,
        )
        .unwrap();
        let sent = sent_entries(&mut n);
        for v in &values {
            let mut want: Vec<PeerId> = [replica(&two, v), replica(&three, v)]
                .into_iter()
                .flatten()
                .filter(|r| *r != peer(9))
                .collect();
            want.dedup();
            let mut got: Vec<PeerId> = sent
                .iter()
                .filter(|(_, x)| x == v)
                .map(|(p, _)| *p)
                .collect();
            got.sort_by_key(|p| want.iter().position(|w| w == p));
            assert_eq!(got, want, "{v}");
        }
        // Once settled, only the placed view is used (one copy per entry).
        n.rereplicate([peer(50), peer(51)], &three, 10 * DEFAULT_SETTLE_MS);
        sent_entries(&mut n);
        n.handle_srdi(
            &peer(52),
            &publish(peer(52), &refs),
            &three,
            10 * DEFAULT_SETTLE_MS,
        )
        .unwrap();
        let sent = sent_entries(&mut n);
        let want = values
            .iter()
            .filter(|v| replica(&three, v) != Some(peer(9)))
            .count();
        assert_eq!(sent.len(), want);
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
        // The view formed: placed over it.
        n.view_changed(peer(2), 0);
        assert!(!n.rereplicate_due(0));
        assert!(n.rereplicate_due(DEFAULT_SETTLE_MS));
        n.rereplicate([], &view, DEFAULT_SETTLE_MS);
        assert!(!n.rereplicate_due(u64::MAX));
        let out = n
            .handle_srdi(&peer(50), &publish(peer(50), &refs), &view, 0)
            .unwrap();
        assert_eq!(out.stored, 20);
        let mut replicated = 0;
        while let Some(t) = n.poll_transmit() {
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
        let Some(t) = n.poll_transmit() else { panic!() };
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
        let Some(t) = n.poll_transmit() else { panic!() };
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
        let Some(t) = n.poll_transmit() else { panic!() };
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
            f.poll_event(),
            Some(SrdiEvent::Flood {
                ttl: DEFAULT_FLOOD_TTL,
                ..
            })
        ));
    }

    /// The replica messages in `n`'s actions: (to, message).
    fn drain(n: &mut SrdiNode) -> Vec<(PeerId, Message)> {
        let mut v = Vec::new();
        while let Some(t) = n.poll_transmit() {
            v.push((t.to, t.message));
        }
        v
    }

    fn entries_in(msgs: &[(PeerId, Message)]) -> usize {
        msgs.iter()
            .map(|(_, m)| {
                ResolverSrdi::from_message(m, "g")
                    .unwrap()
                    .srdi_message()
                    .unwrap()
                    .entries
                    .len()
            })
            .sum()
    }

    #[test]
    fn replicas_refused_by_a_forming_view_are_held_and_indexed_when_the_sender_joins() {
        // Rendezvous 1 leases edge 50 and knows 1..=4; rendezvous 2..=4 do
        // not know 1 yet (their views are still forming).
        let view = global_view(peer(1), [peer(2), peer(3), peer(4)]);
        let mut a = SrdiNode::new(peer(1), "g", "h", SrdiNodeConfig::default());
        a.view_changed(peer(2), 0);
        a.rereplicate([], &view, 1);
        let values: Vec<String> = (0..200).map(|i| format!("v{i}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        a.handle_srdi(&peer(50), &publish(peer(50), &refs), &view, 2)
            .unwrap();
        let sent = drain(&mut a);
        let placed = entries_in(&sent);
        assert!(placed > 0);
        let mut replicas: HashMap<PeerId, SrdiNode> = [2, 3, 4]
            .into_iter()
            .map(|i| {
                (
                    peer(i),
                    SrdiNode::new(peer(i), "g", "h", SrdiNodeConfig::default()),
                )
            })
            .collect();
        let mut held = 0;
        for (to, m) in &sent {
            let r = replicas.get_mut(to).unwrap();
            // What the rendezvous node does for a sender outside its view.
            held += r.hold(&peer(1), m, 3).unwrap();
            assert!(r.index().is_empty());
        }
        assert_eq!(held, placed);
        // Time passes (less than HOLD_MS), then 1 joins their views.
        let mut indexed = 0;
        for r in replicas.values_mut() {
            r.handle_timeout(HOLD_MS / 2);
            indexed += r.release_held(&peer(1), HOLD_MS / 2);
            assert_eq!(r.held_entries(), 0);
            assert_eq!(r.stats().held_dropped, 0);
            assert_eq!(r.stats().held, r.stats().held_released);
            // Held replicas are not replicated again.
            assert!(r.poll_transmit().is_none() && r.poll_event().is_none());
        }
        assert_eq!(indexed, placed);
        // Every entry is on its replica: a query there finds edge 50.
        for v in &values {
            let expr = replica_expr("Adv", "Name", v);
            let to = crate::srdi::placement::replica_peer(&view, &expr).unwrap();
            let ix = if to == peer(1) {
                a.index()
            } else {
                replicas[&to].index()
            };
            assert_eq!(
                ix.query("Adv", Some("Name"), Some(v), 10, 10),
                vec![peer(50)],
                "{v} lost"
            );
        }
        // An edge pushing its own entries without a lease is not held; a
        // replica whose sender never joins is dropped after HOLD_MS, counted.
        let r = replicas.get_mut(&peer(2)).unwrap();
        assert_eq!(r.hold(&peer(60), &publish(peer(60), &["x"]), 0).unwrap(), 0);
        let m = &sent[0].1;
        let n = r.hold(&peer(7), m, HOLD_MS).unwrap();
        assert!(n > 0);
        r.handle_timeout(2 * HOLD_MS + EXPIRE_INTERVAL_MS);
        assert_eq!(r.held_entries(), 0);
        assert_eq!(r.stats().held_dropped, n as u64);
    }

    #[test]
    fn held_replicas_are_bounded_oldest_dropped_and_counted() {
        let mut r = SrdiNode::new(peer(2), "g", "h", SrdiNodeConfig::default());
        let values: Vec<String> = (0..100).map(|i| format!("v{i}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        let m = {
            let sm = SrdiMessage {
                scope: 0,
                ..ResolverSrdi::from_message(&publish(peer(50), &refs), "g")
                    .unwrap()
                    .srdi_message()
                    .unwrap()
            };
            let env = ResolverSrdi {
                handler: "h".into(),
                payload: sm.to_xml(),
            };
            Message::new().with(env.to_element("g"))
        };
        let rounds = MAX_HELD_ENTRIES / 100 + 5;
        for i in 0..rounds {
            assert_eq!(r.hold(&peer(1), &m, i as u64).unwrap(), 100);
            assert!(r.held_entries() <= MAX_HELD_ENTRIES);
        }
        let s = r.stats();
        assert_eq!(s.held, (rounds * 100) as u64);
        assert_eq!(s.held_dropped + r.held_entries() as u64, s.held);
        assert!(s.held_dropped > 0);
        r.release_held(&peer(1), rounds as u64);
        assert_eq!(r.index().len(), 100);
        assert_eq!(r.held_entries(), 0);
    }

    #[test]
    fn rereplication_is_coalesced_over_a_changing_view() {
        // 40 edges leased here with 5 entries each; the view grows from 2
        // to 2 + N members, one change every 100 ms.
        const N: u8 = 40;
        let mut a = SrdiNode::new(peer(1), "g", "h", SrdiNodeConfig::default());
        let mut members = vec![peer(2)];
        let mut view = global_view(peer(1), members.iter().copied());
        a.view_changed(peer(2), 0);
        a.rereplicate([], &view, 0);
        let edges: Vec<PeerId> = (100..140).map(peer).collect();
        let mut total = 0;
        for (k, e) in edges.iter().enumerate() {
            let values: Vec<String> = (0..5).map(|i| format!("e{k}v{i}")).collect();
            let refs: Vec<&str> = values.iter().map(String::as_str).collect();
            a.handle_srdi(e, &publish(*e, &refs), &view, 0).unwrap();
            total += 5;
        }
        drain(&mut a);
        let mut now = 0;
        let mut sent = Vec::new();
        for i in 0..N {
            now += 100;
            members.push(peer(3 + i));
            view = global_view(peer(1), members.iter().copied());
            a.view_changed(peer(3 + i), now);
            // What the rendezvous node does after every input.
            if a.rereplicate_due(now) {
                a.rereplicate(edges.iter().copied(), &view, now);
            }
            sent.extend(drain(&mut a));
        }
        // Still changing every 100 ms: nothing re-sent yet (settle 1 s,
        // at most 5 s deferred).
        assert!(sent.is_empty());
        let due = a.poll_timeout().unwrap();
        assert_eq!(due, now + DEFAULT_SETTLE_MS);
        a.rereplicate(edges.iter().copied(), &view, due);
        sent.extend(drain(&mut a));
        // The first placement and one for the N changes.
        assert_eq!(a.stats().rereplications, 2);
        // Each entry at most once (only those whose replica moved), where
        // re-placing on every change would have sent up to N times that.
        let moved = entries_in(&sent);
        assert!(moved > 0 && moved <= total, "{moved} of {total}");
        assert_eq!(a.stats().rereplicated_messages, sent.len() as u64);
        assert!(sent.len() <= total);
        // Each went to its replica under the final view.
        for (to, m) in &sent {
            let sm = ResolverSrdi::from_message(m, "g")
                .unwrap()
                .srdi_message()
                .unwrap();
            for e in &sm.entries {
                let expr = replica_expr(&sm.primary_key, &e.key, &e.value);
                assert_eq!(
                    crate::srdi::placement::replica_peer(&view, &expr),
                    Some(*to)
                );
            }
        }
        // Unchanged view: a second placement sends nothing.
        a.view_changed(peer(3), due + 1);
        members.retain(|p| *p != peer(3));
        view = global_view(peer(1), members.iter().copied());
        a.rereplicate(edges.iter().copied(), &view, due + 2_000);
        let left = drain(&mut a);
        // Only the entries that were on the peer that left move.
        assert!(entries_in(&left) < total);
        a.rereplicate(edges.iter().copied(), &view, due + 4_000);
        assert!(drain(&mut a).is_empty());
        // A view changing without pause is still re-placed within
        // max_defer_ms.
        let start = due + 5_000;
        let mut t = start;
        let mut placed_at = None;
        for i in 0..1_000u64 {
            t = start + i * 100;
            a.view_changed(peer(2), t);
            if a.rereplicate_due(t) {
                placed_at = Some(t);
                break;
            }
        }
        assert_eq!(placed_at, Some(start + DEFAULT_MAX_DEFER_MS));
        assert!(t < start + 100_000);
    }
}
