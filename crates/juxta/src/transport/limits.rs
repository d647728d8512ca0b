//! Per-address connection limits: how many connections (and how many not
//! yet established ones) one remote IP address may hold at a time, on top
//! of the peer's global connection slots.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedSemaphorePermit;

/// Why an accepted connection was refused by [`AddrLimits::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AddrRefusal {
    /// The address holds its most connections.
    #[error("{0} connections from this address")]
    Connections(usize),
    /// The address holds its most connections still exchanging welcomes.
    #[error("{0} pending connections from this address")]
    Pending(usize),
}

#[derive(Debug, Default, Clone, Copy)]
struct Count {
    total: usize,
    pending: usize,
}

/// Connection counts per remote IP address. The table holds only addresses
/// with a live connection (each holds a global slot too), so it is bounded
/// by the global connection limit.
#[derive(Debug)]
pub(crate) struct AddrLimits {
    max_total: usize,
    max_pending: usize,
    counts: Mutex<HashMap<IpAddr, Count>>,
}

impl AddrLimits {
    pub(crate) fn new(max_total: usize, max_pending: usize) -> Arc<AddrLimits> {
        Arc::new(AddrLimits {
            max_total,
            max_pending,
            counts: Mutex::new(HashMap::new()),
        })
    }

    /// Admits a new (pending) connection from `ip`, or says why not.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<AddrSlot, AddrRefusal> {
        let ip = ip.to_canonical();
        let mut m = self.counts.lock().expect("address limits lock");
        let c = m.entry(ip).or_default();
        if c.total >= self.max_total {
            let r = AddrRefusal::Connections(c.total);
            if c.total == 0 {
                m.remove(&ip);
            }
            return Err(r);
        }
        if c.pending >= self.max_pending {
            let r = AddrRefusal::Pending(c.pending);
            if c.total == 0 {
                m.remove(&ip);
            }
            return Err(r);
        }
        c.total += 1;
        c.pending += 1;
        Ok(AddrSlot {
            limits: self.clone(),
            ip,
            pending: true,
        })
    }

    /// Connections from `ip` now (established and pending).
    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> (usize, usize) {
        let m = self.counts.lock().expect("address limits lock");
        m.get(&ip.to_canonical())
            .map(|c| (c.total, c.pending))
            .unwrap_or((0, 0))
    }
}

/// One connection's place in [`AddrLimits`]; given back when dropped.
#[derive(Debug)]
pub(crate) struct AddrSlot {
    limits: Arc<AddrLimits>,
    ip: IpAddr,
    pending: bool,
}

impl AddrSlot {
    /// The welcome lines are exchanged: no longer pending.
    pub(crate) fn established(&mut self) {
        if std::mem::take(&mut self.pending) {
            let mut m = self.limits.counts.lock().expect("address limits lock");
            if let Some(c) = m.get_mut(&self.ip) {
                c.pending = c.pending.saturating_sub(1);
            }
        }
    }
}

impl Drop for AddrSlot {
    fn drop(&mut self) {
        let mut m = self.limits.counts.lock().expect("address limits lock");
        if let Some(c) = m.get_mut(&self.ip) {
            c.total = c.total.saturating_sub(1);
            if self.pending {
                c.pending = c.pending.saturating_sub(1);
            }
            if c.total == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// What a connection holds while it lives: a global connection slot and,
/// for an accepted connection, its place in the per-address limits.
#[derive(Debug)]
pub(crate) struct ConnSlot {
    _global: OwnedSemaphorePermit,
    addr: Option<AddrSlot>,
}

impl ConnSlot {
    pub(crate) fn new(global: OwnedSemaphorePermit, addr: Option<AddrSlot>) -> ConnSlot {
        ConnSlot {
            _global: global,
            addr,
        }
    }

    /// The welcome lines are exchanged.
    pub(crate) fn established(&mut self) {
        if let Some(a) = &mut self.addr {
            a.established();
        }
    }
}

impl From<OwnedSemaphorePermit> for ConnSlot {
    fn from(global: OwnedSemaphorePermit) -> ConnSlot {
        ConnSlot::new(global, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_total_and_pending_per_address_and_release_on_drop() {
        let l = AddrLimits::new(3, 2);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let mut s1 = l.admit(a).unwrap();
        let _s2 = l.admit(a).unwrap();
        assert_eq!(l.admit(a).unwrap_err(), AddrRefusal::Pending(2));
        // Another address is unaffected.
        let _t = l.admit(b).unwrap();
        s1.established();
        assert_eq!(l.count(a), (2, 1));
        let _s3 = l.admit(a).unwrap();
        assert_eq!(l.admit(a).unwrap_err(), AddrRefusal::Connections(3));
        drop(s1);
        assert_eq!(l.count(a), (2, 2));
        drop(_s2);
        drop(_s3);
        assert_eq!(l.count(a), (0, 0));
        assert!(l.counts.lock().unwrap().get(&a).is_none());
    }

    #[test]
    fn ipv4_mapped_ipv6_counts_as_the_ipv4_address() {
        let l = AddrLimits::new(1, 1);
        let _s = l.admit("127.0.0.9".parse().unwrap()).unwrap();
        assert_eq!(
            l.admit("::ffff:127.0.0.9".parse().unwrap()).unwrap_err(),
            AddrRefusal::Connections(1)
        );
    }
}
