//! The router's bounded route cache: for each destination peer it cannot
//! reach directly, the hops to go through (the first hop is a peer this
//! peer has a connection to).
//!
//! Routes are learned from route answers (`jxta:ERR`), from the reverse
//! hops of routed messages that verified, and from configuration. The cache
//! holds at most `capacity` routes; inserting into a full cache evicts the
//! least recently used one (counted in [`RouteCache::evicted`]), and every
//! route expires `ttl_ms` after it was learned. Time is passed in.

use crate::id::{PeerId, PeerMap};

/// Most hops a cached route may have.
pub const MAX_ROUTE_HOPS: usize = 8;

/// Why a route was not cached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteCacheError {
    /// A route must have at least one hop (a direct peer needs no route).
    #[error("a route needs at least one hop")]
    NoHops,
    /// More hops than [`MAX_ROUTE_HOPS`].
    #[error("route of {0} hops is longer than {MAX_ROUTE_HOPS}")]
    TooLong(usize),
    /// The route goes through its own destination or through this peer,
    /// or names a hop twice.
    #[error("route loops")]
    Loop,
}

#[derive(Debug, Clone)]
struct Entry {
    hops: Vec<PeerId>,
    expires_ms: u64,
    used_ms: u64,
}

/// Bounded cache of routes (see the module comment).
///
/// ```
/// use juxta_proto::endpoint::route_cache::RouteCache;
/// use juxta_proto::id::PeerId;
/// let p = |n: u8| PeerId::from_public_key_spki(&[n]);
/// let (me, relay, b) = (p(0), p(1), p(2));
/// let mut cache = RouteCache::new(me, 16, 60_000);
/// cache.insert(b, vec![relay], 0).unwrap();
/// assert_eq!(cache.get(&b, 1_000), Some(&[relay][..]));
/// assert_eq!(cache.get(&b, 61_000), None);
/// ```
#[derive(Debug, Clone)]
pub struct RouteCache {
    local: PeerId,
    capacity: usize,
    ttl_ms: u64,
    routes: PeerMap<Entry>,
    evicted: u64,
}

impl RouteCache {
    /// An empty cache for peer `local`.
    pub fn new(local: PeerId, capacity: usize, ttl_ms: u64) -> RouteCache {
        RouteCache {
            local,
            capacity: capacity.max(1),
            ttl_ms,
            routes: PeerMap::default(),
            evicted: 0,
        }
    }

    /// Caches `hops` (first hop first) as the route to `dest`, replacing any
    /// older route to it.
    pub fn insert(
        &mut self,
        dest: PeerId,
        hops: Vec<PeerId>,
        now_ms: u64,
    ) -> Result<(), RouteCacheError> {
        check_route(&self.local, &dest, &hops)?;
        if !self.routes.contains_key(&dest) && self.routes.len() >= self.capacity {
            self.expire(now_ms);
            if self.routes.len() >= self.capacity {
                if let Some(oldest) = self
                    .routes
                    .iter()
                    .min_by_key(|(_, e)| e.used_ms)
                    .map(|(p, _)| *p)
                {
                    self.routes.remove(&oldest);
                    self.evicted += 1;
                }
            }
        }
        self.routes.insert(
            dest,
            Entry {
                hops,
                expires_ms: now_ms.saturating_add(self.ttl_ms),
                used_ms: now_ms,
            },
        );
        Ok(())
    }

    /// The route to `dest`, if one is cached and not expired.
    pub fn get(&self, dest: &PeerId, now_ms: u64) -> Option<&[PeerId]> {
        self.routes
            .get(dest)
            .filter(|e| e.expires_ms > now_ms)
            .map(|e| &e.hops[..])
    }

    /// [`RouteCache::get`], marking the route as recently used.
    pub fn lookup(&mut self, dest: &PeerId, now_ms: u64) -> Option<&[PeerId]> {
        let e = self
            .routes
            .get_mut(dest)
            .filter(|e| e.expires_ms > now_ms)?;
        e.used_ms = now_ms;
        Some(&e.hops[..])
    }

    /// Forgets the route to `dest`.
    pub fn remove(&mut self, dest: &PeerId) {
        self.routes.remove(dest);
    }

    /// Forgets every route whose first hop is `hop` (its connection closed).
    pub fn remove_via(&mut self, hop: &PeerId) -> usize {
        let before = self.routes.len();
        self.routes.retain(|_, e| e.hops.first() != Some(hop));
        before - self.routes.len()
    }

    /// Drops expired routes.
    pub fn expire(&mut self, now_ms: u64) {
        self.routes.retain(|_, e| e.expires_ms > now_ms);
    }

    /// Routes cached.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Routes evicted because the cache was full.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

/// Checks a route from `local` to `dest` through `hops`: 1 to
/// [`MAX_ROUTE_HOPS`] hops, none of them `local` or `dest`, no repeats.
pub fn check_route(local: &PeerId, dest: &PeerId, hops: &[PeerId]) -> Result<(), RouteCacheError> {
    if hops.is_empty() {
        return Err(RouteCacheError::NoHops);
    }
    if hops.len() > MAX_ROUTE_HOPS {
        return Err(RouteCacheError::TooLong(hops.len()));
    }
    if dest == local {
        return Err(RouteCacheError::Loop);
    }
    for (i, h) in hops.iter().enumerate() {
        if h == local || h == dest || hops[..i].contains(h) {
            return Err(RouteCacheError::Loop);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n])
    }

    #[test]
    fn bounded_lru_and_ttl() {
        let mut c = RouteCache::new(p(0), 2, 1_000);
        c.insert(p(10), vec![p(1)], 0).unwrap();
        c.insert(p(11), vec![p(1)], 10).unwrap();
        assert!(c.lookup(&p(10), 20).is_some());
        c.insert(p(12), vec![p(2)], 30).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.evicted(), 1);
        assert!(c.get(&p(11), 30).is_none(), "least recently used went");
        assert!(c.get(&p(10), 30).is_some());
        assert!(c.get(&p(10), 1_000).is_none(), "expired");
        assert_eq!(c.remove_via(&p(2)), 1);
        c.expire(5_000);
        assert!(c.is_empty());
    }

    #[test]
    fn loops_and_bad_routes_refused() {
        let mut c = RouteCache::new(p(0), 8, 1_000);
        assert_eq!(c.insert(p(5), vec![], 0), Err(RouteCacheError::NoHops));
        assert_eq!(c.insert(p(5), vec![p(0)], 0), Err(RouteCacheError::Loop));
        assert_eq!(c.insert(p(5), vec![p(5)], 0), Err(RouteCacheError::Loop));
        assert_eq!(
            c.insert(p(5), vec![p(1), p(2), p(1)], 0),
            Err(RouteCacheError::Loop)
        );
        assert_eq!(c.insert(p(0), vec![p(1)], 0), Err(RouteCacheError::Loop));
        let long: Vec<PeerId> = (1..=9).map(p).collect();
        assert_eq!(c.insert(p(50), long, 0), Err(RouteCacheError::TooLong(9)));
        assert!(c.is_empty());
    }
}
