//! The one clock of the protocol core: [`Millis`].
//!
//! Every state machine in this crate takes time as an argument and reads no
//! clock. They all take the same type: milliseconds on the owner's
//! monotonic clock, counted from any starting point the owner picks (the
//! runtime counts from the peer's start, the simulator from virtual time
//! zero). Deadlines come back in the same unit from `poll_timeout`.
//!
//! A runtime keeps one [`Clock`] per peer and hands every machine of that
//! peer its [`Clock::now`], so deadlines from different machines compare.
//! Wall-clock time (milliseconds since the Unix epoch) appears only as
//! data: advertisement expirations stored in a cache and the peer info
//! protocol's timestamps, never as a machine's clock.
//!
//! ```
//! use std::time::Duration;
//! use juxta_proto::time::{later, Clock, Millis};
//! let clock = Clock::new();
//! let now: Millis = clock.now();
//! let deadline = later(now, Duration::from_secs(2));
//! assert_eq!(deadline - now, 2_000);
//! // The instant a runtime sleeps until for that deadline:
//! assert!(clock.instant(deadline) >= clock.instant(now));
//! // Saturating: a deadline never wraps.
//! assert_eq!(later(Millis::MAX - 1, Duration::from_secs(1)), Millis::MAX);
//! ```

use std::time::{Duration, Instant};

/// Milliseconds on the owner's monotonic clock.
pub type Millis = u64;

/// `now + d` in [`Millis`], saturating (a deadline past `u64::MAX` ms is
/// "never").
pub fn later(now: Millis, d: Duration) -> Millis {
    now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A [`Millis`] value as a [`Duration`].
pub fn as_duration(ms: Millis) -> Duration {
    Duration::from_millis(ms)
}

/// A peer's clock for the runtime: [`Millis`] since it was made. Copy it
/// into every task of the peer; all copies read the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose time is 0 now.
    pub fn new() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    /// Milliseconds since the clock was made (saturating).
    pub fn now(&self) -> Millis {
        self.at(Instant::now())
    }

    /// `t` on this clock (0 for an instant before the clock was made).
    pub fn at(&self, t: Instant) -> Millis {
        u64::try_from(t.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// The instant of `ms` on this clock, for a timer (a time too far
    /// ahead to represent is a century from now).
    pub fn instant(&self, ms: Millis) -> Instant {
        self.origin
            .checked_add(Duration::from_millis(ms))
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_round_trips_its_instants_and_never_goes_back() {
        let c = Clock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert_eq!(c.at(c.instant(1_234)), 1_234);
        // Before the origin reads as 0.
        let before = c.instant(0).checked_sub(Duration::from_secs(1));
        if let Some(t) = before {
            assert_eq!(c.at(t), 0);
        }
        // Far ahead does not panic.
        assert!(c.instant(Millis::MAX) > c.instant(0));
    }

    #[test]
    fn later_saturates() {
        assert_eq!(later(5, Duration::from_millis(7)), 12);
        assert_eq!(later(Millis::MAX, Duration::from_secs(1)), Millis::MAX);
        assert_eq!(later(0, Duration::MAX), Millis::MAX);
        assert_eq!(as_duration(1_500), Duration::from_millis(1_500));
    }
}
