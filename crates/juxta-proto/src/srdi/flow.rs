//! Flow control at a rendezvous: per-querier token buckets plus a total
//! bucket, deciding for every query "process it" or "answer busy".
//!
//! A query that is not admitted is never dropped silently: the caller sends
//! the querier a [`crate::rendezvous::messages::BusyNotice`] carrying the
//! query ID and the `retry_after_ms` computed here (the time until the
//! querier's bucket holds a token again). Well-behaved queriers keep being
//! served while one querier over its rate gets busy answers, and the
//! rendezvous' memory stays bounded: at most `max_queriers` buckets; queriers
//! beyond that share one overflow bucket.

use crate::id::{PeerId, PeerMap};

/// Default per-querier rate (queries per second).
pub const DEFAULT_PER_QUERIER_RATE: u32 = 2_000;
/// Default per-querier burst (queries).
pub const DEFAULT_PER_QUERIER_BURST: u32 = 200;
/// Default total rate of one rendezvous (queries per second).
pub const DEFAULT_TOTAL_RATE: u32 = 40_000;
/// Default total burst.
pub const DEFAULT_TOTAL_BURST: u32 = 4_000;
/// Default bound on tracked queriers.
pub const DEFAULT_MAX_QUERIERS: usize = 10_000;
/// Least time between two sweeps of idle buckets when the table is full.
pub const SWEEP_INTERVAL_MS: u64 = 1_000;

/// One unit of a bucket is a milli-token, so rates in queries/s refill
/// exactly `rate` units per ms.
const UNIT: u64 = 1_000;

/// Admission parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Sustained queries per second per querier (≥ 1).
    pub per_querier_rate: u32,
    /// Burst per querier (≥ 1).
    pub per_querier_burst: u32,
    /// Sustained queries per second in total (≥ 1).
    pub total_rate: u32,
    /// Total burst (≥ 1).
    pub total_burst: u32,
    /// Most queriers tracked individually.
    pub max_queriers: usize,
}

impl Default for AdmissionConfig {
    fn default() -> AdmissionConfig {
        AdmissionConfig {
            per_querier_rate: DEFAULT_PER_QUERIER_RATE,
            per_querier_burst: DEFAULT_PER_QUERIER_BURST,
            total_rate: DEFAULT_TOTAL_RATE,
            total_burst: DEFAULT_TOTAL_BURST,
            max_queriers: DEFAULT_MAX_QUERIERS,
        }
    }
}

/// The verdict for one query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Process the query.
    Admitted,
    /// Answer busy; the querier may retry after this many ms.
    Busy {
        /// Time until a token is available, ≥ 1 ms.
        retry_after_ms: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    units: u64,
    last: u64,
}

impl Bucket {
    fn full(burst: u32, now: u64) -> Bucket {
        Bucket {
            units: burst as u64 * UNIT,
            last: now,
        }
    }

    fn refill(&mut self, rate: u32, burst: u32, now: u64) {
        let dt = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        self.units = self
            .units
            .saturating_add(dt.saturating_mul(rate as u64))
            .min(burst as u64 * UNIT);
    }

    fn is_full(&self, burst: u32) -> bool {
        self.units >= burst as u64 * UNIT
    }

    /// Takes one token, or returns the wait until one is there.
    fn take(&mut self, rate: u32) -> Result<(), u64> {
        if self.units >= UNIT {
            self.units -= UNIT;
            Ok(())
        } else {
            Err((UNIT - self.units).div_ceil(rate.max(1) as u64).max(1))
        }
    }
}

/// Counters of an [`Admission`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Queries admitted.
    pub admitted: u64,
    /// Busy answers for a querier over its own rate.
    pub busy_querier: u64,
    /// Busy answers because the rendezvous as a whole was over its rate.
    pub busy_total: u64,
    /// Queries charged to the overflow bucket (querier table full).
    pub overflow: u64,
}

/// Per-querier and total admission control.
///
/// ```
/// use juxta_proto::srdi::flow::{Admission, AdmissionConfig, Admit};
/// let q = "urn:jxta:cbid-59616261646162614A78746150325033000000000000000000000000000000AB03".parse().unwrap();
/// let mut a = Admission::new(AdmissionConfig { per_querier_rate: 10, per_querier_burst: 1, ..Default::default() });
/// assert_eq!(a.admit(q, 0), Admit::Admitted);
/// assert_eq!(a.admit(q, 0), Admit::Busy { retry_after_ms: 100 });
/// assert_eq!(a.admit(q, 100), Admit::Admitted);
/// ```
#[derive(Debug, Clone)]
pub struct Admission {
    cfg: AdmissionConfig,
    queriers: PeerMap<Bucket>,
    overflow: Bucket,
    total: Bucket,
    last_sweep: Option<u64>,
    stats: AdmissionStats,
}

impl Admission {
    /// An admission controller; zero rates or bursts are raised to 1.
    pub fn new(cfg: AdmissionConfig) -> Admission {
        let cfg = AdmissionConfig {
            per_querier_rate: cfg.per_querier_rate.max(1),
            per_querier_burst: cfg.per_querier_burst.max(1),
            total_rate: cfg.total_rate.max(1),
            total_burst: cfg.total_burst.max(1),
            max_queriers: cfg.max_queriers,
        };
        Admission {
            overflow: Bucket::full(cfg.per_querier_burst, 0),
            total: Bucket::full(cfg.total_burst, 0),
            cfg,
            queriers: PeerMap::default(),
            last_sweep: None,
            stats: AdmissionStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AdmissionConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> AdmissionStats {
        self.stats
    }

    /// Queriers tracked individually now (≤ `max_queriers`).
    pub fn tracked(&self) -> usize {
        self.queriers.len()
    }

    /// Decides on one query from `querier` at `now` (ms).
    pub fn admit(&mut self, querier: PeerId, now: u64) -> Admit {
        let c = self.cfg;
        if !self.queriers.contains_key(&querier) && self.queriers.len() >= c.max_queriers {
            self.sweep(now);
        }
        let tracked = self.queriers.contains_key(&querier) || self.queriers.len() < c.max_queriers;
        let bucket = if tracked {
            self.queriers
                .entry(querier)
                .or_insert_with(|| Bucket::full(c.per_querier_burst, now))
        } else {
            self.stats.overflow += 1;
            &mut self.overflow
        };
        bucket.refill(c.per_querier_rate, c.per_querier_burst, now);
        if let Err(wait) = bucket.take(c.per_querier_rate) {
            self.stats.busy_querier += 1;
            return Admit::Busy {
                retry_after_ms: wait,
            };
        }
        self.total.refill(c.total_rate, c.total_burst, now);
        if let Err(wait) = self.total.take(c.total_rate) {
            // Give the querier its token back: it was not served.
            bucket_refund(
                if tracked {
                    self.queriers.get_mut(&querier)
                } else {
                    Some(&mut self.overflow)
                },
                c.per_querier_burst,
            );
            self.stats.busy_total += 1;
            return Admit::Busy {
                retry_after_ms: wait,
            };
        }
        self.stats.admitted += 1;
        Admit::Admitted
    }

    /// Forgets queriers whose bucket has refilled (they are idle), at most
    /// once per [`SWEEP_INTERVAL_MS`].
    fn sweep(&mut self, now: u64) {
        if self
            .last_sweep
            .is_some_and(|t| now.saturating_sub(t) < SWEEP_INTERVAL_MS)
        {
            return;
        }
        self.last_sweep = Some(now);
        let c = self.cfg;
        self.queriers.retain(|_, b| {
            b.refill(c.per_querier_rate, c.per_querier_burst, now);
            !b.is_full(c.per_querier_burst)
        });
    }
}

fn bucket_refund(b: Option<&mut Bucket>, burst: u32) {
    if let Some(b) = b {
        b.units = (b.units + UNIT).min(burst as u64 * UNIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{IdFormat, IdType, JxtaId};

    fn peer(n: u32) -> PeerId {
        let mut u = [0u8; 16];
        u[..4].copy_from_slice(&n.to_be_bytes());
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], u, IdType::Peer)
            .try_into()
            .unwrap()
    }

    #[test]
    fn greedy_querier_is_paced_others_served() {
        let mut a = Admission::new(AdmissionConfig {
            per_querier_rate: 100,
            per_querier_burst: 10,
            total_rate: 10_000,
            total_burst: 1_000,
            max_queriers: 100,
        });
        let mut admitted = 0;
        let mut busy = 0;
        // 1 s of a greedy querier sending 1000 q/s, and a polite one at 50 q/s.
        for ms in 0..1000u64 {
            match a.admit(peer(1), ms) {
                Admit::Admitted => admitted += 1,
                Admit::Busy { retry_after_ms } => {
                    assert!((1..=10).contains(&retry_after_ms));
                    busy += 1
                }
            }
            if ms % 20 == 0 {
                assert_eq!(a.admit(peer(2), ms), Admit::Admitted);
            }
        }
        assert!((100..=111).contains(&admitted), "{admitted}");
        assert_eq!(admitted + busy, 1000);
        assert_eq!(a.stats().busy_querier, busy);
    }

    #[test]
    fn total_rate_applies_and_refunds() {
        let mut a = Admission::new(AdmissionConfig {
            per_querier_rate: 1000,
            per_querier_burst: 5,
            total_rate: 1,
            total_burst: 2,
            max_queriers: 10,
        });
        assert_eq!(a.admit(peer(1), 0), Admit::Admitted);
        assert_eq!(a.admit(peer(2), 0), Admit::Admitted);
        assert_eq!(
            a.admit(peer(3), 0),
            Admit::Busy {
                retry_after_ms: 1000
            }
        );
        assert_eq!(a.stats().busy_total, 1);
        assert_eq!(a.admit(peer(3), 1000), Admit::Admitted);
    }

    #[test]
    fn querier_table_is_bounded() {
        let mut a = Admission::new(AdmissionConfig {
            per_querier_rate: 1,
            per_querier_burst: 1,
            total_rate: 1_000_000,
            total_burst: 1_000_000,
            max_queriers: 50,
        });
        for i in 0..10_000 {
            a.admit(peer(i), 0);
            assert!(a.tracked() <= 50);
        }
        assert!(a.stats().overflow > 0);
        // After they go idle, a sweep frees room for newcomers.
        assert_eq!(a.admit(peer(20_000), 10_000), Admit::Admitted);
        assert!(a.tracked() <= 50);
        assert_eq!(
            a.admit(peer(20_000), 10_000),
            Admit::Busy {
                retry_after_ms: 1000
            }
        );
    }
}
