//! The Rendezvous Protocol (RVP), sans-IO (digest §7.3).
//!
//! Rendezvous peers are JXTA's super-peers: edges lease a connection to one
//! rendezvous, rendezvous peers know each other through the *peer view*, and
//! together they propagate messages group-wide and host the SRDI index
//! ([`crate::srdi`]). This module holds:
//! - [`messages`]: the wire messages, element for element as JXSE 2.7;
//! - [`edge`]: the edge side: seed list, lease request and renewal,
//!   heartbeats, fail-over and "republish your SRDI entries" events;
//! - [`server`]: the rendezvous side: bounded lease table, grants, refusals,
//!   expiry, and propagation with TTL and duplicate detection;
//! - [`peerview`]: the rendezvous peer view: the sorted, bounded set of
//!   known rendezvous, probes, referrals and failure removal.
//!
//! Everything follows the same quinn-proto style: `handle_*(…, now)` feeds
//! input, `poll_transmit()` / `poll_event()` drain output, `poll_timeout()`
//! says when to call `handle_timeout(now)`. Time is a `u64` of milliseconds
//! chosen by the caller (any epoch), so a simulator can run it on virtual time.

pub mod edge;
pub mod messages;
pub mod node;
pub mod peerview;
pub mod server;

pub use crate::time::Millis;
pub use crate::transmit::Transmit;

/// A small deterministic generator (splitmix64) for message IDs, so the
/// state machines need no entropy source and simulations replay exactly.
#[derive(Debug, Clone)]
pub struct IdGen(u64);

impl IdGen {
    /// A generator from a seed.
    pub fn new(seed: u64) -> IdGen {
        IdGen(seed)
    }

    /// The next 64 random-looking bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A fresh `java.util.UUID`-style message ID.
    pub fn msg_id(&mut self) -> String {
        let hi = self.next_u64() as u128;
        let lo = self.next_u64() as u128;
        messages::uuid_string((hi << 64) | lo)
    }
}
