//! Remembers which CBJX-signed messages this peer has seen, so that a
//! signed message cannot prove a peer's identity twice.
//!
//! JXSE signs no challenge: a CBJX trailer proves that the key holder
//! signed *this message* once, not that the sender holds the key now. An
//! attacker who captured a message V signed for us could open its own
//! connection, claim V in the welcome line and replay it. PKCS#1 v1.5
//! signatures are deterministic, so a replay carries the same signature
//! bytes: the cache keys each message by its signer and the first 16 bytes
//! of its signature and remembers the connection it first arrived on. A
//! message first seen on another connection is a replay and proves nothing.
//!
//! Bounded: at most `capacity` entries, the oldest forgotten first (a
//! message older than that could be replayed; docs/security.md says so).

use std::collections::{HashMap, VecDeque};

use crate::id::PeerId;

/// Default number of remembered messages (about 80 bytes each).
pub const DEFAULT_REPLAY_CAPACITY: usize = 65_536;

/// What the cache knew of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Never seen: now remembered for this connection.
    New,
    /// Seen before on the same connection (a retransmission).
    SameConnection,
    /// Seen before on another connection: a replay.
    OtherConnection,
}

/// A bounded record of signed messages by signer and signature.
///
/// ```
/// use juxta_proto::wire::replay::{ReplayCache, Seen};
/// let p: juxta_proto::id::PeerId = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03".parse().unwrap();
/// let mut c = ReplayCache::new(2);
/// assert_eq!(c.check(&p, [1; 16], 7), Seen::New);
/// assert_eq!(c.check(&p, [1; 16], 7), Seen::SameConnection);
/// assert_eq!(c.check(&p, [1; 16], 8), Seen::OtherConnection);
/// ```
#[derive(Debug)]
pub struct ReplayCache {
    capacity: usize,
    seen: HashMap<(PeerId, [u8; 16]), u64>,
    order: VecDeque<(PeerId, [u8; 16])>,
}

impl ReplayCache {
    /// A cache remembering at most `capacity` messages (at least one).
    pub fn new(capacity: usize) -> ReplayCache {
        let capacity = capacity.max(1);
        ReplayCache {
            capacity,
            seen: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Messages remembered now.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Looks up the message `tag` signed by `signer` arriving on connection
    /// `conn`, remembering it if new.
    pub fn check(&mut self, signer: &PeerId, tag: [u8; 16], conn: u64) -> Seen {
        let key = (*signer, tag);
        match self.seen.get(&key) {
            Some(&c) if c == conn => return Seen::SameConnection,
            Some(_) => return Seen::OtherConnection,
            None => {}
        }
        if self.seen.len() >= self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.seen.insert(key, conn);
        self.order.push_back(key);
        Seen::New
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n; 8])
    }

    #[test]
    fn replay_on_another_connection_is_seen_and_the_cache_stays_bounded() {
        let mut c = ReplayCache::new(3);
        assert_eq!(c.check(&peer(1), [1; 16], 1), Seen::New);
        // Same tag from another signer is another message.
        assert_eq!(c.check(&peer(2), [1; 16], 2), Seen::New);
        assert_eq!(c.check(&peer(1), [1; 16], 1), Seen::SameConnection);
        assert_eq!(c.check(&peer(1), [1; 16], 9), Seen::OtherConnection);
        for i in 0..100u8 {
            c.check(&peer(3), [i; 16], 3);
            assert!(c.len() <= 3);
        }
        // The oldest were forgotten.
        assert_eq!(c.check(&peer(1), [1; 16], 9), Seen::New);
    }
}
