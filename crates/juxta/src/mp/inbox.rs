//! A communicator's receive queue, filled by the connections' reader
//! tasks themselves: a message for the job goes from the socket's decoder
//! straight into the queue its receive looks at, with no listener channel,
//! no second task and no service-address rewriting on the way (see
//! `Inner::dispatch`). Membership and header checks happen here, on
//! arrival; a full queue makes the delivering reader wait (push-back to
//! the sender, counted), so nothing is dropped and nothing overtakes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use juxta_proto::endpoint::ServiceAddress;
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use tokio::sync::Notify;

use super::wire::{Header, ELEM_DATA, ELEM_HDR, NS};
use super::{Envelope, MpCounters};
use crate::peer::Inner;

/// Who may send to the job: known once the bootstrap is done.
struct Members {
    by_peer: HashMap<PeerId, usize>,
    /// Peer ID of each rank (`None`: this rank).
    remotes: Vec<Option<PeerId>>,
}

/// A message that arrived before the bootstrap finished (its sender is
/// checked once the members are known).
struct Early {
    from: Option<PeerId>,
    proven: bool,
    routed: bool,
    message: Message,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) items: VecDeque<Envelope>,
    pub(super) bytes: usize,
    members: Option<Members>,
    early: VecDeque<Early>,
}

/// See the module documentation.
pub(crate) struct Inbox {
    /// The job's address (`juxta-mp`, the job's name).
    pub(crate) to: ServiceAddress,
    /// The same, as on the wire (mangled with the Net group).
    pub(crate) wire_to: ServiceAddress,
    pub(super) state: Mutex<State>,
    /// Woken (all waiters) when a message is queued.
    pub(super) arrived: Notify,
    /// Bumped when a message is queued: what a busy-polling receive
    /// watches (one atomic load per poll).
    pub(super) arrivals: AtomicU64,
    /// Receives parked on `arrived` (the queue wakes them only when there
    /// are some: no lock per message while receives busy-poll).
    pub(super) parked: AtomicUsize,
    /// Woken (all waiters) when a full queue gives up a message.
    space: Notify,
    /// Set when the communicator is gone: deliveries are dropped.
    closed: AtomicBool,
    pub(super) stats: MpCounters,
    max_items: usize,
    max_bytes: usize,
}

impl State {
    fn len(&self) -> usize {
        self.items.len() + self.early.len()
    }

    /// Queues a checked message, counting its bytes.
    fn push(&mut self, e: Envelope) {
        self.bytes += e.data.len();
        self.items.push_back(e);
    }
}

impl Inbox {
    pub(super) fn new(to: ServiceAddress, wire_to: ServiceAddress, cfg: &super::MpConfig) -> Inbox {
        Inbox {
            to,
            wire_to,
            state: Mutex::new(State::default()),
            arrived: Notify::new(),
            arrivals: AtomicU64::new(0),
            parked: AtomicUsize::new(0),
            space: Notify::new(),
            closed: AtomicBool::new(false),
            stats: MpCounters::default(),
            max_items: cfg.max_unexpected,
            max_bytes: cfg.max_unexpected_bytes,
        }
    }

    /// Whether the queue takes no more (the readers wait).
    pub(super) fn full(&self, st: &State) -> bool {
        st.len() >= self.max_items || st.bytes >= self.max_bytes
    }

    /// A message from a connection (or a route): checked and queued,
    /// waiting while the queue is full.
    pub(crate) async fn deliver(
        &self,
        from: Option<PeerId>,
        proven: bool,
        routed: bool,
        message: Message,
    ) {
        let mut item = Early {
            from,
            proven,
            routed,
            message,
        };
        // The usual case first: room in the queue, no waiter registered.
        match self.offer(item) {
            None => return,
            Some(back) => item = back,
        }
        let mut counted = false;
        loop {
            let space = self.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            match self.offer(item) {
                None => return,
                Some(back) => item = back,
            }
            if !counted {
                counted = true;
                self.stats.pushback.fetch_add(1, Ordering::Relaxed);
            }
            space.await;
        }
    }

    /// [`Inbox::deliver`] without waiting: `false` if the queue is full
    /// (the message is dropped; a propagated message, which never waits).
    pub(crate) fn try_deliver(&self, from: Option<PeerId>, message: Message) -> bool {
        self.offer(Early {
            from,
            proven: false,
            routed: false,
            message,
        })
        .is_none()
    }

    /// Queues (or refuses) `item`; hands it back when the queue is full.
    fn offer(&self, item: Early) -> Option<Early> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let mut st = self.state.lock().expect("mp queue lock");
        if self.full(&st) {
            return Some(item);
        }
        let Some(m) = &st.members else {
            st.early.push_back(item);
            return None;
        };
        if let Some(e) = self.check(m, item) {
            st.push(e);
            drop(st);
            self.announce();
        }
        None
    }

    /// The job's members are known: checks and queues what came before.
    pub(super) fn set_members(
        &self,
        by_peer: HashMap<PeerId, usize>,
        remotes: Vec<Option<PeerId>>,
    ) {
        let mut st = self.state.lock().expect("mp queue lock");
        let m = Members { by_peer, remotes };
        let early = std::mem::take(&mut st.early);
        for item in early {
            if let Some(e) = self.check(&m, item) {
                st.push(e);
            }
        }
        st.members = Some(m);
        drop(st);
        self.announce();
        self.space.notify_waiters();
    }

    /// Queues a message to self; `false` if it does not fit.
    pub(super) fn push_local(&self, e: Envelope) -> bool {
        let mut st = self.state.lock().expect("mp queue lock");
        if st.len() >= self.max_items
            || (st.bytes + e.data.len() > self.max_bytes && !st.items.is_empty())
        {
            return false;
        }
        st.push(e);
        drop(st);
        self.announce();
        true
    }

    /// Tells a receiver (busy-polling the counter or parked) that
    /// something was queued.
    fn announce(&self) {
        // SeqCst, paired with the receive's count-then-check in `take`.
        self.arrivals.fetch_add(1, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) > 0 {
            self.arrived.notify_waiters();
        }
    }

    /// Takes item `i` out of the queue (the lock held), waking a reader
    /// waiting for room.
    pub(super) fn remove(
        &self,
        st: &mut std::sync::MutexGuard<'_, State>,
        i: usize,
    ) -> Option<Envelope> {
        let was_full = self.full(st);
        let e = st.items.remove(i)?;
        st.bytes -= e.data.len();
        if was_full {
            self.space.notify_waiters();
        }
        Some(e)
    }

    /// Membership and header checks of a message.
    fn check(&self, m: &Members, item: Early) -> Option<Envelope> {
        let Early {
            from,
            proven,
            routed,
            mut message,
        } = item;
        let stats = &self.stats;
        // A communicator sends [header, data] in that order: taken by
        // position when the names agree, else looked up by name.
        let in_order = message.elements.len() == 2
            && message.elements[0].name == ELEM_HDR
            && message.elements[1].name == ELEM_DATA
            && message.elements.iter().all(|e| e.namespace == NS);
        let hdr_bytes = if in_order {
            Some(message.elements[0].data.clone())
        } else {
            message.get(NS, ELEM_HDR).map(|e| e.data.clone())
        };
        // The rank the header names, when its peer is the sender (the
        // usual case: no hashing); else the table decides.
        let named = hdr_bytes
            .as_ref()
            .and_then(|b| b.get(4..8))
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .filter(|&r| from.is_some() && m.remotes.get(r).copied().flatten() == from);
        let member = named.or_else(|| from.and_then(|p| m.by_peer.get(&p).copied()));
        let src = match member {
            Some(r) if proven && !routed => r,
            _ => {
                let n = stats.refused_outsider.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::info!(
                        ?from,
                        refused = n,
                        "mp message from outside the job refused"
                    );
                }
                return None;
            }
        };
        let malformed = |why: &str| {
            let n = stats.refused_malformed.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::info!(rank = src, why, refused = n, "malformed mp message refused");
            }
        };
        let hdr = match hdr_bytes.map(|b| Header::decode(&b)) {
            Some(Ok(h)) => h,
            Some(Err(e)) => {
                malformed(&e.to_string());
                return None;
            }
            None => {
                malformed("no header");
                return None;
            }
        };
        if hdr.src as usize != src {
            malformed("header names another rank");
            return None;
        }
        let data: Bytes = if in_order {
            message.elements.pop().map(|e| e.data).unwrap_or_default()
        } else {
            message
                .take(NS, ELEM_DATA)
                .map(|e| e.data)
                .unwrap_or_default()
        };
        Some(Envelope { hdr, src, data })
    }
}

/// A receive counted in [`Inbox::parked`] while it lives (so that a
/// cancelled receive never stays counted).
pub(super) struct Parked<'a>(&'a AtomicUsize);

impl<'a> Parked<'a> {
    pub(super) fn new(count: &'a AtomicUsize) -> Parked<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Parked(count)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An inbox registered with its peer: unregistered (and closed, so that
/// no reader waits on it any more) when dropped.
pub(super) struct Registered {
    pub(super) inbox: Arc<Inbox>,
    peer: Weak<Inner>,
}

impl Registered {
    pub(super) fn new(
        inbox: Arc<Inbox>,
        peer: &Arc<Inner>,
    ) -> Result<Registered, crate::peer::PeerError> {
        peer.add_mp_inbox(inbox.clone())?;
        Ok(Registered {
            inbox,
            peer: Arc::downgrade(peer),
        })
    }
}

impl std::ops::Deref for Registered {
    type Target = Inbox;
    fn deref(&self) -> &Inbox {
        &self.inbox
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.inbox.closed.store(true, Ordering::Release);
        self.inbox.space.notify_waiters();
        if let Some(p) = self.peer.upgrade() {
            p.remove_mp_inbox(&self.inbox);
        }
    }
}
