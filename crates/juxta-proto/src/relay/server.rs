//! The relay server's state: which edges hold a lease, the bounded queue of
//! messages waiting to be forwarded to each, and what each sender has
//! spooled (its quota).
//!
//! Nothing is dropped silently: [`RelayServer::enqueue`] hands the message
//! back with a typed [`Refusal`] when the edge's queue or the sender's
//! quota is full, so the runtime can push back on the sender (stop reading
//! its connection for a while) and then refuse it, counted. Messages still
//! queued when a lease ends are counted in [`ServerCounters::dropped`].

use std::collections::{BTreeMap, VecDeque};

use super::{Refusal, RelayRequest, RelayResponse};
use crate::id::{PeerId, PeerMap};

/// Bounds and lease length of a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Most edges leased at once (JXSE: 150).
    pub max_clients: usize,
    /// Longest lease granted, ms (JXSE: 1 h).
    pub lease_ms: u64,
    /// Messages queued per edge (JXSE: 200).
    pub queue_messages: usize,
    /// Bytes queued per edge.
    pub queue_bytes: usize,
    /// Messages one sender may have queued at this relay at once, over all
    /// edges.
    pub sender_messages: usize,
    /// Bytes one sender may have queued at once.
    pub sender_bytes: usize,
    /// Largest message relayed.
    pub max_message: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_clients: 150,
            lease_ms: 3_600_000,
            queue_messages: 200,
            queue_bytes: 16 << 20,
            sender_messages: 400,
            sender_bytes: 32 << 20,
            max_message: 8 << 20,
        }
    }
}

/// What a relay has done, for its counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerCounters {
    /// Leases granted (renewals included).
    pub leases_granted: u64,
    /// Requests refused as unauthenticated.
    pub refused_unauthenticated: u64,
    /// Lease requests refused because the relay was full.
    pub refused_full: u64,
    /// Messages refused: edge queue full (by [`RelayServer::offer`]: once
    /// the message's push-back time ran out).
    pub refused_queue_full: u64,
    /// Messages refused: sender quota used up (as `refused_queue_full`).
    pub refused_quota: u64,
    /// Messages [`RelayServer::offer`] first told to wait (queue full or
    /// quota used up, push-back time left); each counted once, whether it
    /// was queued later or refused.
    pub pushed_back: u64,
    /// Messages refused: destination not leased.
    pub refused_not_leased: u64,
    /// Messages refused: too large.
    pub refused_too_large: u64,
    /// Messages queued.
    pub queued: u64,
    /// Messages taken from the queues to be forwarded.
    pub forwarded: u64,
    /// Bytes taken from the queues to be forwarded.
    pub forwarded_bytes: u64,
    /// Messages dropped because their edge's lease ended first.
    pub dropped: u64,
    /// Messages sent on to their edge at once, without queueing (the
    /// queue was empty and the edge's connection took them).
    pub passed: u64,
    /// Bytes of the messages counted in `passed`.
    pub passed_bytes: u64,
    /// Leases that expired or ended.
    pub leases_ended: u64,
}

/// A message taken from a queue, with what is needed to put it back.
#[derive(Debug)]
pub struct Popped<T> {
    /// Who sent it.
    pub sender: PeerId,
    /// Its size.
    pub len: usize,
    /// The message.
    pub item: T,
}

struct Queued<T> {
    sender: PeerId,
    len: usize,
    item: T,
}

/// What [`RelayServer::offer`] did with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Offered<T> {
    /// Queued for the edge.
    Queued,
    /// The edge's queue is full or the sender's quota used up, and the
    /// message's push-back time is not over: offer it again when space
    /// frees (not read from the sender meanwhile).
    Wait(T),
    /// Refused for good, with the reason to tell the sender.
    Refused(Refusal, T),
}

struct Lease<T> {
    conn: u64,
    expires_ms: u64,
    /// Its key in the expiry index beside `expires_ms` (grants and
    /// renewals in order).
    serial: u64,
    queue: VecDeque<Queued<T>>,
    bytes: usize,
}

/// The relay's lease table and queues; `T` is the queued message type.
///
/// ```
/// use juxta_proto::relay::server::{RelayServer, ServerConfig};
/// use juxta_proto::relay::{RelayRequest, RelayResponse};
/// use juxta_proto::id::PeerId;
/// let (relay, edge, a) = (PeerId::from_public_key_spki(b"r"), PeerId::from_public_key_spki(b"e"), PeerId::from_public_key_spki(b"a"));
/// let mut s = RelayServer::new(relay, ServerConfig::default());
/// let r = s.on_request(edge, true, 1, &RelayRequest::Connect { lease_ms: None }, 0);
/// assert!(matches!(r, RelayResponse::Connected { .. }));
/// s.enqueue(&edge, a, 10, "hello", 1).unwrap();
/// assert_eq!(s.pop(&edge), Some("hello"));
/// ```
pub struct RelayServer<T> {
    local: PeerId,
    cfg: ServerConfig,
    leases: PeerMap<Lease<T>>,
    /// Every lease's expiry, earliest first (one entry per lease, kept in
    /// step with `leases`): expiring finds the due leases without looking
    /// at the others, so a relay holding many leases pays for the ones
    /// that end, not for all of them, each time it checks.
    /// Keyed by expiry and the grant's serial (which orders leases that
    /// expire together by when they were granted or renewed).
    deadlines: BTreeMap<(u64, u64), PeerId>,
    next_serial: u64,
    senders: PeerMap<(usize, usize)>,
    counters: ServerCounters,
}

impl<T> RelayServer<T> {
    /// A relay with no leases.
    pub fn new(local: PeerId, cfg: ServerConfig) -> RelayServer<T> {
        RelayServer {
            local,
            cfg,
            leases: PeerMap::default(),
            deadlines: BTreeMap::new(),
            next_serial: 0,
            senders: PeerMap::default(),
            counters: ServerCounters::default(),
        }
    }

    /// The bounds.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> ServerCounters {
        self.counters
    }

    /// Answers a control request from `from`, received on connection
    /// `conn`; `authenticated` says whether that connection has proven
    /// its peer ID.
    pub fn on_request(
        &mut self,
        from: PeerId,
        authenticated: bool,
        conn: u64,
        req: &RelayRequest,
        now_ms: u64,
    ) -> RelayResponse {
        if !authenticated {
            self.counters.refused_unauthenticated += 1;
            return RelayResponse::Refused(Refusal::Unauthenticated);
        }
        match req {
            RelayRequest::Connect { lease_ms } => {
                self.expire(now_ms);
                let granted = lease_ms
                    .unwrap_or(self.cfg.lease_ms)
                    .clamp(1, self.cfg.lease_ms);
                let expires_ms = now_ms.saturating_add(granted);
                let serial = self.next_serial;
                if let Some(l) = self.leases.get_mut(&from) {
                    self.next_serial += 1;
                    self.deadlines.remove(&(l.expires_ms, l.serial));
                    self.deadlines.insert((expires_ms, serial), from);
                    l.expires_ms = expires_ms;
                    l.serial = serial;
                    l.conn = conn;
                } else {
                    if self.leases.len() >= self.cfg.max_clients {
                        self.counters.refused_full += 1;
                        return RelayResponse::Refused(Refusal::Full);
                    }
                    self.next_serial += 1;
                    self.deadlines.insert((expires_ms, serial), from);
                    self.leases.insert(
                        from,
                        Lease {
                            conn,
                            expires_ms,
                            serial,
                            queue: VecDeque::new(),
                            bytes: 0,
                        },
                    );
                }
                self.counters.leases_granted += 1;
                RelayResponse::Connected {
                    lease_ms: granted,
                    relay: Some(self.local),
                    relay_adv: None,
                }
            }
            RelayRequest::Disconnect => {
                self.end(&from);
                RelayResponse::Disconnected
            }
            RelayRequest::Pid => RelayResponse::Pid(self.local),
        }
    }

    /// Whether `edge` holds a lease; gives the connection it leased on.
    pub fn lease_conn(&self, edge: &PeerId, now_ms: u64) -> Option<u64> {
        self.leases
            .get(edge)
            .filter(|l| l.expires_ms > now_ms)
            .map(|l| l.conn)
    }

    /// Edges leased.
    pub fn clients(&self) -> usize {
        self.leases.len()
    }

    /// Messages queued for `edge`.
    pub fn queue_len(&self, edge: &PeerId) -> usize {
        self.leases.get(edge).map_or(0, |l| l.queue.len())
    }

    /// Whether a message of `len` bytes for `edge` may skip the queue: the
    /// edge holds a lease, the message is within the size limit and
    /// nothing is queued for it (so order is kept). Returns the lease's
    /// connection. When not, [`RelayServer::enqueue`] decides (and counts
    /// a refusal).
    pub fn can_pass(&self, edge: &PeerId, len: usize, now_ms: u64) -> Option<u64> {
        let l = self.leases.get(edge).filter(|l| l.expires_ms > now_ms)?;
        (len <= self.cfg.max_message && l.queue.is_empty()).then_some(l.conn)
    }

    /// Counts a message of `len` bytes sent on without queueing (see
    /// [`RelayServer::can_pass`]).
    pub fn count_passed(&mut self, len: usize) {
        self.counters.passed += 1;
        self.counters.passed_bytes = self.counters.passed_bytes.saturating_add(len as u64);
    }

    /// Queues `item` (`len` bytes, from `sender`) for `edge`, or hands it
    /// back with the reason (counted).
    pub fn enqueue(
        &mut self,
        edge: &PeerId,
        sender: PeerId,
        len: usize,
        item: T,
        now_ms: u64,
    ) -> Result<(), (Refusal, T)> {
        self.try_enqueue(edge, sender, len, item, now_ms)
            .map_err(|(r, item)| {
                self.count_refusal(r);
                (r, item)
            })
    }

    /// Offers `item` (`len` bytes, from `sender`) for `edge`'s queue, with
    /// push-back: while the edge's queue is full or the sender's quota is
    /// used up, a message waits (the caller stops reading the sender's
    /// connection and offers it again when space frees, see
    /// [`RelayServer::pop`]) until `push_back_ms` after it was first told
    /// to wait (`waiting_since`: `None` on its first offer), and is
    /// refused then. Any other refusal is at once.
    /// Refusal counters count messages refused for good;
    /// [`ServerCounters::pushed_back`] counts messages told to wait.
    ///
    /// ```
    /// use juxta_proto::relay::server::{Offered, RelayServer, ServerConfig};
    /// use juxta_proto::relay::{Refusal, RelayRequest};
    /// use juxta_proto::id::PeerId;
    /// let (relay, edge, a) = (PeerId::from_public_key_spki(b"r"), PeerId::from_public_key_spki(b"e"), PeerId::from_public_key_spki(b"a"));
    /// let cfg = ServerConfig { queue_messages: 1, ..ServerConfig::default() };
    /// let mut s = RelayServer::new(relay, cfg);
    /// s.on_request(edge, true, 1, &RelayRequest::Connect { lease_ms: None }, 0);
    /// assert!(matches!(s.offer(&edge, a, 1, "one", 10, None, 2_000), Offered::Queued));
    /// // Full: wait, for two seconds from the first offer...
    /// let Offered::Wait(two) = s.offer(&edge, a, 1, "two", 20, None, 2_000) else { panic!() };
    /// let Offered::Wait(two) = s.offer(&edge, a, 1, two, 2_019, Some(20), 2_000) else { panic!() };
    /// // ...then refused.
    /// assert!(matches!(s.offer(&edge, a, 1, two, 2_020, Some(20), 2_000), Offered::Refused(Refusal::QueueFull, _)));
    /// assert_eq!((s.counters().pushed_back, s.counters().refused_queue_full), (1, 1));
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn offer(
        &mut self,
        edge: &PeerId,
        sender: PeerId,
        len: usize,
        item: T,
        now_ms: u64,
        waiting_since: Option<u64>,
        push_back_ms: u64,
    ) -> Offered<T> {
        let since = waiting_since.unwrap_or(now_ms);
        match self.try_enqueue(edge, sender, len, item, now_ms) {
            Ok(()) => Offered::Queued,
            Err((Refusal::QueueFull | Refusal::Quota, item))
                if now_ms.saturating_sub(since) < push_back_ms =>
            {
                if waiting_since.is_none() {
                    self.counters.pushed_back += 1;
                }
                Offered::Wait(item)
            }
            Err((r, item)) => {
                self.count_refusal(r);
                Offered::Refused(r, item)
            }
        }
    }

    fn count_refusal(&mut self, r: Refusal) {
        let c = &mut self.counters;
        match r {
            Refusal::NotLeased => c.refused_not_leased += 1,
            Refusal::TooLarge => c.refused_too_large += 1,
            Refusal::QueueFull => c.refused_queue_full += 1,
            Refusal::Quota => c.refused_quota += 1,
            _ => {}
        }
    }

    fn try_enqueue(
        &mut self,
        edge: &PeerId,
        sender: PeerId,
        len: usize,
        item: T,
        now_ms: u64,
    ) -> Result<(), (Refusal, T)> {
        let cfg = self.cfg;
        let Some(l) = self.leases.get_mut(edge).filter(|l| l.expires_ms > now_ms) else {
            return Err((Refusal::NotLeased, item));
        };
        if len > cfg.max_message {
            return Err((Refusal::TooLarge, item));
        }
        if l.queue.len() >= cfg.queue_messages || l.bytes.saturating_add(len) > cfg.queue_bytes {
            return Err((Refusal::QueueFull, item));
        }
        let used = self.senders.entry(sender).or_insert((0, 0));
        if used.0 >= cfg.sender_messages || used.1.saturating_add(len) > cfg.sender_bytes {
            if used.0 == 0 {
                self.senders.remove(&sender);
            }
            return Err((Refusal::Quota, item));
        }
        used.0 += 1;
        used.1 += len;
        l.bytes += len;
        l.queue.push_back(Queued { sender, len, item });
        self.counters.queued += 1;
        Ok(())
    }

    fn release(&mut self, q: &Queued<T>) {
        if let Some(u) = self.senders.get_mut(&q.sender) {
            u.0 = u.0.saturating_sub(1);
            u.1 = u.1.saturating_sub(q.len);
            if u.0 == 0 {
                self.senders.remove(&q.sender);
            }
        }
    }

    /// The next message to forward to `edge`.
    pub fn pop(&mut self, edge: &PeerId) -> Option<T> {
        self.pop_entry(edge).map(|p| p.item)
    }

    /// [`RelayServer::pop`] with the sender and size, so that a send that
    /// could not go out now can be put back with [`RelayServer::unpop`].
    pub fn pop_entry(&mut self, edge: &PeerId) -> Option<Popped<T>> {
        let l = self.leases.get_mut(edge)?;
        let q = l.queue.pop_front()?;
        l.bytes -= q.len;
        self.release(&q);
        self.counters.forwarded += 1;
        self.counters.forwarded_bytes += q.len as u64;
        Some(Popped {
            sender: q.sender,
            len: q.len,
            item: q.item,
        })
    }

    /// Puts a popped message back at the head of `edge`'s queue (its send
    /// would have blocked), undoing the pop's accounting. If the lease has
    /// ended meanwhile the message is dropped and counted.
    pub fn unpop(&mut self, edge: &PeerId, p: Popped<T>) {
        self.counters.forwarded -= 1;
        self.counters.forwarded_bytes -= p.len as u64;
        let Some(l) = self.leases.get_mut(edge) else {
            self.counters.dropped += 1;
            return;
        };
        l.bytes += p.len;
        let used = self.senders.entry(p.sender).or_insert((0, 0));
        used.0 += 1;
        used.1 += p.len;
        l.queue.push_front(Queued {
            sender: p.sender,
            len: p.len,
            item: p.item,
        });
    }

    /// What `sender` has queued now: (messages, bytes).
    pub fn sender_use(&self, sender: &PeerId) -> (usize, usize) {
        self.senders.get(sender).copied().unwrap_or((0, 0))
    }

    /// Ends the lease of `edge` (its queued messages are dropped, counted).
    pub fn end(&mut self, edge: &PeerId) -> bool {
        let Some(mut l) = self.leases.remove(edge) else {
            return false;
        };
        self.deadlines.remove(&(l.expires_ms, l.serial));
        while let Some(q) = l.queue.pop_front() {
            self.release(&q);
            self.counters.dropped += 1;
        }
        self.counters.leases_ended += 1;
        true
    }

    /// Ends the lease of `edge` if it was taken on connection `conn` (that
    /// connection closed).
    pub fn connection_closed(&mut self, edge: &PeerId, conn: u64) -> bool {
        if self.leases.get(edge).map(|l| l.conn) == Some(conn) {
            self.end(edge)
        } else {
            false
        }
    }

    /// Ends the expired leases; returns their edges (earliest expiry
    /// first). Looks only at the leases that are due.
    pub fn expire(&mut self, now_ms: u64) -> Vec<PeerId> {
        let mut gone = Vec::new();
        while let Some((&(at, _), &edge)) = self.deadlines.first_key_value() {
            if at > now_ms {
                break;
            }
            self.deadlines.pop_first();
            if self.end(&edge) {
                gone.push(edge);
            }
        }
        gone
    }

    /// When the next lease expires ([`RelayServer::expire`] then has
    /// something to do).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.deadlines.first_key_value().map(|(&(at, _), _)| at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n])
    }

    fn cfg() -> ServerConfig {
        ServerConfig {
            max_clients: 2,
            lease_ms: 1_000,
            queue_messages: 3,
            queue_bytes: 70,
            sender_messages: 4,
            sender_bytes: 1_000,
            max_message: 60,
        }
    }

    #[test]
    fn leases_are_bounded_authenticated_and_expire() {
        let mut s: RelayServer<u32> = RelayServer::new(p(0), cfg());
        let c = RelayRequest::Connect {
            lease_ms: Some(5_000),
        };
        assert_eq!(
            s.on_request(p(1), false, 1, &c, 0),
            RelayResponse::Refused(Refusal::Unauthenticated)
        );
        assert_eq!(s.counters().refused_unauthenticated, 1);
        assert_eq!(
            s.on_request(p(1), true, 1, &c, 0),
            RelayResponse::Connected {
                lease_ms: 1_000,
                relay: Some(p(0)),
                relay_adv: None
            }
        );
        assert!(matches!(
            s.on_request(p(2), true, 2, &c, 0),
            RelayResponse::Connected { .. }
        ));
        assert_eq!(
            s.on_request(p(3), true, 3, &c, 0),
            RelayResponse::Refused(Refusal::Full)
        );
        // Renewal moves the expiry.
        assert!(matches!(
            s.on_request(p(1), true, 1, &c, 900),
            RelayResponse::Connected { .. }
        ));
        assert_eq!(s.expire(1_000), vec![p(2)]);
        assert_eq!(s.lease_conn(&p(1), 1_500), Some(1));
        assert!(!s.connection_closed(&p(1), 9), "another connection");
        assert!(s.connection_closed(&p(1), 1));
        assert_eq!(s.clients(), 0);
        assert_eq!(
            s.on_request(p(1), true, 1, &RelayRequest::Pid, 0),
            RelayResponse::Pid(p(0))
        );
    }

    /// The expiry index against a model: after any mix of grants,
    /// renewals, disconnects and closed connections, `expire` ends
    /// exactly the leases due (earliest first) and `poll_timeout` is the
    /// earliest expiry left.
    #[test]
    fn expiry_follows_renewals_and_ends_like_a_scan_of_every_lease() {
        let cfg = ServerConfig {
            max_clients: 64,
            lease_ms: 10_000,
            ..ServerConfig::default()
        };
        let mut s: RelayServer<u32> = RelayServer::new(p(0), cfg);
        // edge -> (expiry, connection): what a scan of every lease gives.
        let mut model: std::collections::BTreeMap<u8, (u64, u64)> = Default::default();
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x2545_f491_4f6c_dd1du64);
        let mut next = |n: u64| rng.gen_range(0..n);
        let mut now = 0u64;
        for step in 0..5_000u64 {
            now += next(50);
            let e = 1 + next(40) as u8;
            match next(4) {
                0 | 1 => {
                    let lease = 1 + next(2_000);
                    let conn = step;
                    let r = s.on_request(
                        p(e),
                        true,
                        conn,
                        &RelayRequest::Connect {
                            lease_ms: Some(lease),
                        },
                        now,
                    );
                    // Expired leases went first, so there is always room.
                    model.retain(|_, (at, _)| *at > now);
                    assert!(matches!(r, RelayResponse::Connected { .. }), "{r:?}");
                    model.insert(e, (now + lease, conn));
                }
                2 => {
                    s.on_request(p(e), true, 0, &RelayRequest::Disconnect, now);
                    model.remove(&e);
                }
                _ => {
                    let conn = model.get(&e).map_or(u64::MAX, |(_, c)| *c);
                    if s.connection_closed(&p(e), conn) {
                        model.remove(&e);
                    }
                }
            }
            if step % 7 == 0 {
                // Earliest first; together, in the order granted.
                let mut due: Vec<(u64, u64, u8)> = model
                    .iter()
                    .filter(|(_, (at, _))| *at <= now)
                    .map(|(e, (at, conn))| (*at, *conn, *e))
                    .collect();
                due.sort();
                let want: Vec<PeerId> = due.iter().map(|(_, _, e)| p(*e)).collect();
                assert_eq!(s.expire(now), want, "step {step}");
                model.retain(|_, (at, _)| *at > now);
            }
            assert_eq!(
                s.poll_timeout(),
                model.values().map(|(at, _)| *at).min(),
                "step {step}"
            );
            assert_eq!(s.clients(), model.len(), "step {step}");
        }
    }

    #[test]
    fn a_full_queue_or_quota_pushes_back_then_refuses_and_counts_each_message_once() {
        let mut s: RelayServer<u32> = RelayServer::new(p(0), cfg());
        let c = RelayRequest::Connect { lease_ms: None };
        s.on_request(p(1), true, 1, &c, 0);
        let (a, b) = (p(10), p(11));
        for i in 0..3 {
            assert_eq!(s.offer(&p(1), a, 10, i, 1, None, 100), Offered::Queued);
        }
        // Queue full: the message waits, offered again and again...
        assert_eq!(s.offer(&p(1), b, 10, 3, 5, None, 100), Offered::Wait(3));
        assert_eq!(s.offer(&p(1), b, 10, 3, 50, Some(5), 100), Offered::Wait(3));
        // ...until space frees: queued, never counted as refused.
        assert_eq!(s.pop(&p(1)), Some(0));
        assert_eq!(s.offer(&p(1), b, 10, 3, 60, Some(5), 100), Offered::Queued);
        let c = s.counters();
        assert_eq!((c.pushed_back, c.refused_queue_full, c.queued), (1, 0, 4));
        // Another waits out its push-back time: refused, counted once.
        assert_eq!(s.offer(&p(1), b, 10, 4, 70, None, 100), Offered::Wait(4));
        for t in [80, 120, 169] {
            assert_eq!(s.offer(&p(1), b, 10, 4, t, Some(70), 100), Offered::Wait(4));
        }
        assert_eq!(
            s.offer(&p(1), b, 10, 4, 170, Some(70), 100),
            Offered::Refused(Refusal::QueueFull, 4)
        );
        let c = s.counters();
        assert_eq!((c.pushed_back, c.refused_queue_full), (2, 1));
        // The sender's quota (4 messages) pushes back the same way.
        s.on_request(p(2), true, 2, &RelayRequest::Connect { lease_ms: None }, 0);
        assert_eq!(s.offer(&p(2), a, 10, 5, 200, None, 100), Offered::Queued);
        assert_eq!(s.offer(&p(2), a, 10, 55, 200, None, 100), Offered::Queued);
        assert_eq!(s.sender_use(&a), (4, 40));
        assert_eq!(s.offer(&p(2), a, 10, 6, 200, None, 100), Offered::Wait(6));
        assert_eq!(
            s.offer(&p(2), a, 10, 6, 300, Some(200), 100),
            Offered::Refused(Refusal::Quota, 6)
        );
        // Not leased, too large: refused at once, nothing pushed back.
        assert_eq!(
            s.offer(&p(9), a, 1, 7, 300, None, 100),
            Offered::Refused(Refusal::NotLeased, 7)
        );
        assert_eq!(
            s.offer(&p(2), b, 61, 8, 300, None, 100),
            Offered::Refused(Refusal::TooLarge, 8)
        );
        let c = s.counters();
        assert_eq!(
            (
                c.pushed_back,
                c.refused_quota,
                c.refused_not_leased,
                c.refused_too_large
            ),
            (3, 1, 1, 1)
        );
        // A clock that goes back never ends a wait early.
        assert_eq!(
            s.offer(&p(1), b, 10, 9, 10, Some(500), 100),
            Offered::Wait(9)
        );
    }

    #[test]
    fn queues_and_sender_quotas_refuse_with_reasons() {
        let mut s: RelayServer<u32> = RelayServer::new(p(0), cfg());
        let c = RelayRequest::Connect { lease_ms: None };
        s.on_request(p(1), true, 1, &c, 0);
        s.on_request(p(2), true, 2, &c, 0);
        let (a, b) = (p(10), p(11));
        assert_eq!(s.enqueue(&p(9), a, 1, 0, 1), Err((Refusal::NotLeased, 0)));
        assert_eq!(s.enqueue(&p(1), a, 61, 0, 1), Err((Refusal::TooLarge, 0)));
        for i in 0..3 {
            s.enqueue(&p(1), a, 10, i, 1).unwrap();
        }
        assert_eq!(s.enqueue(&p(1), b, 10, 3, 1), Err((Refusal::QueueFull, 3)));
        s.enqueue(&p(2), a, 10, 4, 1).unwrap();
        // Sender `a` has 4 queued: its quota.
        assert_eq!(s.sender_use(&a), (4, 40));
        assert_eq!(s.enqueue(&p(2), a, 10, 5, 1), Err((Refusal::Quota, 5)));
        s.enqueue(&p(2), b, 10, 6, 1).unwrap();
        assert_eq!(s.pop(&p(1)), Some(0));
        assert_eq!(s.sender_use(&a), (3, 30));
        s.enqueue(&p(2), a, 10, 7, 1).unwrap();
        // Byte bound of a queue.
        assert_eq!(
            s.enqueue(&p(1), b, 60, 8, 1).unwrap_err().0,
            Refusal::QueueFull
        );
        let c = s.counters();
        assert_eq!(
            (
                c.refused_not_leased,
                c.refused_too_large,
                c.refused_queue_full,
                c.refused_quota
            ),
            (1, 1, 2, 1)
        );
        assert_eq!(c.forwarded, 1);
        assert_eq!(c.forwarded_bytes, 10);
        // A pop undone puts the message back first, accounting restored.
        let before = s.sender_use(&a);
        let popped = s.pop_entry(&p(1)).unwrap();
        assert_eq!(popped.item, 1);
        assert_eq!(s.sender_use(&a), (before.0 - 1, before.1 - 10));
        s.unpop(&p(1), popped);
        assert_eq!(s.sender_use(&a), before);
        assert_eq!(s.counters().forwarded, 1);
        assert_eq!(s.queue_len(&p(1)), 2);
        let again = s.pop_entry(&p(1)).unwrap();
        assert_eq!(again.item, 1);
        s.unpop(&p(1), again);
        // Ending a lease drops (counted) and releases quotas.
        assert!(s.end(&p(2)));
        assert_eq!(s.counters().dropped, 3);
        assert_eq!(s.sender_use(&b), (0, 0));
        assert_eq!(s.sender_use(&a), (2, 20));
        assert_eq!(s.queue_len(&p(1)), 2);
    }
}
