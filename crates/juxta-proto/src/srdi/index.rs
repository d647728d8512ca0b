//! The SRDI index a rendezvous keeps: `(primary key, attribute, value)` →
//! the peers that published it, each with an absolute expiry time
//! (JXSE's `net.jxta.impl.cm.Srdi` / `SrdiIndex`).
//!
//! Memory is bounded twice: at most `max_entries` (key, peer) pairs in
//! total, and at most `max_per_peer` per publisher, so one peer flooding
//! bogus entries cannot push out the others. When a bound is hit the insert
//! is refused with [`IndexError`] (the caller can count or report it);
//! renewing an entry that is already there always succeeds.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::id::{IdHashState, PeerId, PeerMap};

use super::{SrdiEntry, SrdiMessage};

/// Default bound on (key, peer) pairs in one index.
pub const DEFAULT_MAX_ENTRIES: usize = 1_000_000;
/// Default bound on entries per publishing peer.
pub const DEFAULT_MAX_PER_PEER: usize = 10_000;
/// Lifetime given to entries published with a negative `Expiration`
/// (JXSE's default advertisement expiration, 2 h).
pub const DEFAULT_ENTRY_LIFETIME_MS: u64 = 2 * 60 * 60 * 1000;
/// The longest an SRDI entry is kept, whatever expiration it was sent
/// with (a peer cannot pin entries in the index for years).
pub const MAX_ENTRY_LIFETIME_MS: u64 = DEFAULT_ENTRY_LIFETIME_MS;

/// Why an entry was not indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// The index holds `max_entries` pairs.
    #[error("SRDI index full ({0} entries)")]
    Full(usize),
    /// The publisher already has `max_per_peer` entries.
    #[error("publisher already has {0} SRDI entries")]
    PeerQuota(usize),
}

/// What [`SrdiIndex::add_message`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddOutcome {
    /// Entries added or renewed.
    pub stored: usize,
    /// Entries refused (index full or publisher over quota).
    pub refused: usize,
    /// Entries with a zero lifetime, which remove the key for that peer.
    pub removed: usize,
}

type Attr = (String, String); // (primary key, attribute)

/// The bounded index. Time is ms on the caller's clock.
///
/// ```
/// use juxta_proto::srdi::index::SrdiIndex;
/// let peer = "urn:jxta:cbid-59616261646162614A78746150325033000000000000000000000000000000AB03".parse().unwrap();
/// let mut ix = SrdiIndex::new(100, 10);
/// ix.add("Adv", "Name", "chat", peer, 1_000).unwrap();
/// assert_eq!(ix.query("Adv", Some("Name"), Some("ch*"), 500, 10), vec![peer]);
/// assert!(ix.query("Adv", Some("Name"), Some("chat"), 1_000, 10).is_empty()); // expired
/// ```
#[derive(Debug, Clone)]
pub struct SrdiIndex {
    map: BTreeMap<Attr, HashMap<String, PeerMap<u64>, IdHashState>>,
    /// Each publisher's entries, `(key, attribute)` and value: the count
    /// its quota is checked against, and what [`SrdiIndex::remove_peer`]
    /// visits, so a departing edge costs its own entries, not a pass over
    /// the whole index (the strings are held twice; both copies are
    /// within `max_entries`).
    per_peer: PeerMap<HashSet<(Attr, String), IdHashState>>,
    len: usize,
    max_entries: usize,
    max_per_peer: usize,
}

impl Default for SrdiIndex {
    fn default() -> SrdiIndex {
        SrdiIndex::new(DEFAULT_MAX_ENTRIES, DEFAULT_MAX_PER_PEER)
    }
}

/// `*` wildcard match as JXSE's index does it: `*`, `x*`, `*x`, `*x*`, or exact.
/// Case-insensitive, like JXSE's discovery matching.
pub fn matches(pattern: &str, value: &str) -> bool {
    let p = pattern.to_ascii_lowercase();
    let v = value.to_ascii_lowercase();
    match (p.strip_prefix('*'), p.strip_suffix('*')) {
        _ if p == "*" => true,
        (Some(rest), _) if rest.ends_with('*') => v.contains(&rest[..rest.len() - 1]),
        (Some(rest), _) => v.ends_with(rest),
        (None, Some(rest)) => v.starts_with(rest),
        (None, None) => v == p,
    }
}

impl SrdiIndex {
    /// An index holding at most `max_entries` pairs, `max_per_peer` per peer.
    pub fn new(max_entries: usize, max_per_peer: usize) -> SrdiIndex {
        SrdiIndex {
            map: BTreeMap::new(),
            per_peer: PeerMap::default(),
            len: 0,
            max_entries,
            max_per_peer,
        }
    }

    /// Number of (key, peer) pairs held (expired ones count until swept).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries held for one publisher.
    pub fn peer_len(&self, peer: &PeerId) -> usize {
        self.per_peer.get(peer).map_or(0, HashSet::len)
    }

    /// Adds or renews one entry, valid until `expires_at`.
    pub fn add(
        &mut self,
        pkey: &str,
        attr: &str,
        value: &str,
        peer: PeerId,
        expires_at: u64,
    ) -> Result<(), IndexError> {
        let attr_key = (pkey.to_string(), attr.to_string());
        if let Some(exp) = self
            .map
            .get_mut(&attr_key)
            .and_then(|m| m.get_mut(value))
            .and_then(|m| m.get_mut(&peer))
        {
            *exp = expires_at;
            return Ok(());
        }
        if self.len >= self.max_entries {
            return Err(IndexError::Full(self.max_entries));
        }
        let mine = self.per_peer.entry(peer).or_default();
        if mine.len() >= self.max_per_peer {
            return Err(IndexError::PeerQuota(self.max_per_peer));
        }
        mine.insert((attr_key.clone(), value.to_string()));
        self.len += 1;
        self.map
            .entry(attr_key)
            .or_default()
            .entry(value.to_string())
            .or_default()
            .insert(peer, expires_at);
        Ok(())
    }

    /// Removes one entry of a peer; true if it was there.
    pub fn remove(&mut self, pkey: &str, attr: &str, value: &str, peer: &PeerId) -> bool {
        let attr_key = (pkey.to_string(), attr.to_string());
        let Some(values) = self.map.get_mut(&attr_key) else {
            return false;
        };
        let Some(peers) = values.get_mut(value) else {
            return false;
        };
        if peers.remove(peer).is_none() {
            return false;
        }
        if peers.is_empty() {
            values.remove(value);
        }
        if values.is_empty() {
            self.map.remove(&attr_key);
        }
        self.len -= 1;
        self.forget(peer, attr_key, value.to_string());
        true
    }

    /// Takes one entry out of its publisher's set.
    fn forget(&mut self, peer: &PeerId, attr: Attr, value: String) {
        if let Some(mine) = self.per_peer.get_mut(peer) {
            mine.remove(&(attr, value));
            if mine.is_empty() {
                self.per_peer.remove(peer);
            }
        }
    }

    /// Indexes every entry of an SRDI message received at `now`. A negative
    /// expiration means [`DEFAULT_ENTRY_LIFETIME_MS`]; zero removes the entry.
    pub fn add_message(&mut self, msg: &SrdiMessage, now: u64) -> AddOutcome {
        let mut out = AddOutcome::default();
        for SrdiEntry {
            key,
            value,
            expiration,
        } in &msg.entries
        {
            let life = match *expiration {
                e if e < 0 => DEFAULT_ENTRY_LIFETIME_MS,
                0 => {
                    self.remove(&msg.primary_key, key, value, &msg.peer);
                    out.removed += 1;
                    continue;
                }
                // Capped: an edge republishes while it is leased, so no
                // entry needs to outlive JXSE's default expiration.
                e => (e as u64).min(MAX_ENTRY_LIFETIME_MS),
            };
            match self.add(
                &msg.primary_key,
                key,
                value,
                msg.peer,
                now.saturating_add(life),
            ) {
                Ok(()) => out.stored += 1,
                Err(_) => out.refused += 1,
            }
        }
        out
    }

    /// The live peers holding `(pkey, attr, value)`, at most `limit`, in a
    /// stable order. `attr = None` matches every attribute of `pkey`;
    /// `value = None` or `*` patterns as in [`matches`].
    pub fn query(
        &self,
        pkey: &str,
        attr: Option<&str>,
        value: Option<&str>,
        now: u64,
        limit: usize,
    ) -> Vec<PeerId> {
        let mut out: Vec<PeerId> = Vec::new();
        let lo = (pkey.to_string(), attr.unwrap_or("").to_string());
        for ((pk, at), values) in self.map.range(lo..) {
            if pk != pkey || attr.is_some_and(|a| a != at) {
                break;
            }
            fn push(out: &mut Vec<PeerId>, peers: &PeerMap<u64>, now: u64) {
                let mut live: Vec<PeerId> = peers
                    .iter()
                    .filter(|(_, &exp)| exp > now)
                    .map(|(p, _)| *p)
                    .collect();
                live.sort_by_cached_key(|p| p.to_string());
                for p in live {
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
            }
            match value {
                Some(v) if !v.contains('*') => {
                    if let Some(peers) = values.get(v) {
                        push(&mut out, peers, now);
                    }
                }
                _ => {
                    let mut keys: Vec<&String> = values
                        .keys()
                        .filter(|k| value.is_none_or(|p| matches(p, k)))
                        .collect();
                    keys.sort();
                    for k in keys {
                        push(&mut out, &values[k], now);
                        if out.len() >= limit {
                            break;
                        }
                    }
                }
            }
            if out.len() >= limit {
                break;
            }
        }
        out.truncate(limit);
        out
    }

    /// Removes every entry of a peer (it left, or its lease ended); returns
    /// how many were removed.
    pub fn remove_peer(&mut self, peer: &PeerId) -> usize {
        let Some(mine) = self.per_peer.remove(peer) else {
            return 0;
        };
        let mut removed = 0;
        for (attr, value) in mine {
            let Some(values) = self.map.get_mut(&attr) else {
                continue;
            };
            if let Some(peers) = values.get_mut(&value) {
                if peers.remove(peer).is_some() {
                    removed += 1;
                }
                if peers.is_empty() {
                    values.remove(&value);
                }
            }
            if values.is_empty() {
                self.map.remove(&attr);
            }
        }
        self.len -= removed;
        removed
    }

    /// Drops every entry expired at `now`; returns how many.
    pub fn expire(&mut self, now: u64) -> usize {
        let mut gone: Vec<(PeerId, Attr, String)> = Vec::new();
        self.map.retain(|attr, values| {
            values.retain(|value, peers| {
                peers.retain(|p, exp| {
                    let keep = *exp > now;
                    if !keep {
                        gone.push((*p, attr.clone(), value.clone()));
                    }
                    keep
                });
                !peers.is_empty()
            });
            !values.is_empty()
        });
        let total = gone.len();
        for (p, attr, value) in gone {
            self.forget(&p, attr, value);
        }
        self.len -= total;
        total
    }

    /// [`entries_of`](Self::entries_of) for each of `peers` in one pass
    /// over the index (peers without entries are absent).
    pub fn entries_of_each(
        &self,
        peers: &[PeerId],
        now: u64,
    ) -> HashMap<PeerId, BTreeMap<String, Vec<SrdiEntry>>> {
        let wanted: std::collections::HashSet<&PeerId> = peers.iter().collect();
        let mut out: HashMap<PeerId, BTreeMap<String, Vec<SrdiEntry>>> = HashMap::new();
        for ((pk, at), values) in &self.map {
            for (v, holders) in values {
                // The same order as `entries_of`: by key, then value; the
                // peers of one value in any order (each is its own group).
                for (p, &exp) in holders {
                    if exp > now && wanted.contains(p) {
                        out.entry(*p)
                            .or_default()
                            .entry(pk.clone())
                            .or_default()
                            .push(SrdiEntry {
                                key: at.clone(),
                                value: v.clone(),
                                expiration: (exp - now).min(i64::MAX as u64) as i64,
                            });
                    }
                }
            }
        }
        out
    }

    /// Every live entry of one peer, as SRDI entries with their remaining
    /// lifetime, grouped by primary key (used to hand a departed
    /// rendezvous' replicas on, and by tests).
    pub fn entries_of(&self, peer: &PeerId, now: u64) -> BTreeMap<String, Vec<SrdiEntry>> {
        let mut out: BTreeMap<String, Vec<SrdiEntry>> = BTreeMap::new();
        for ((pk, at), values) in &self.map {
            for (v, peers) in values {
                if let Some(&exp) = peers.get(peer) {
                    if exp > now {
                        out.entry(pk.clone()).or_default().push(SrdiEntry {
                            key: at.clone(),
                            value: v.clone(),
                            expiration: (exp - now).min(i64::MAX as u64) as i64,
                        });
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{IdFormat, IdType, JxtaId};

    fn peer(n: u8) -> PeerId {
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], [n; 16], IdType::Peer)
            .try_into()
            .unwrap()
    }

    /// The index against a model of every (key, attribute, value, peer)
    /// entry: after any mix of adds, renewals, zero-lifetime removals,
    /// departures and expiry sweeps, the counts per peer and in all, the
    /// quota and what queries find agree with the model.
    #[test]
    fn departures_removals_and_expiry_agree_with_a_model() {
        use std::collections::BTreeMap;
        let attrs = [("Adv", "Name"), ("Adv", "Id"), ("Peers", "Name")];
        let mut ix = SrdiIndex::new(400, 12);
        let mut model: BTreeMap<(usize, String, u8), u64> = BTreeMap::new();
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15u64);
        let mut next = |n: u64| rng.gen_range(0..n);
        let mut now = 0u64;
        for step in 0..20_000u64 {
            now += next(5);
            let p = next(20) as u8;
            let a = next(3) as usize;
            let v = format!("v{}", next(15));
            let (pk, at) = attrs[a];
            match next(10) {
                0..=5 => {
                    let exp = now + 1 + next(400);
                    let key = (a, v.clone(), p);
                    let live_total = model.len();
                    let mine = model.keys().filter(|k| k.2 == p).count();
                    let r = ix.add(pk, at, &v, peer(p), exp);
                    let known = model.contains_key(&key);
                    let expected = if known {
                        Ok(())
                    } else if live_total >= 400 {
                        Err(IndexError::Full(400))
                    } else if mine >= 12 {
                        Err(IndexError::PeerQuota(12))
                    } else {
                        Ok(())
                    };
                    assert_eq!(r, expected, "step {step} (a renewal always succeeds)");
                    if r.is_ok() {
                        model.insert(key, exp);
                    }
                }
                6 => {
                    let was = model.remove(&(a, v.clone(), p)).is_some();
                    assert_eq!(ix.remove(pk, at, &v, &peer(p)), was, "step {step}");
                }
                7 => {
                    let n = model.keys().filter(|k| k.2 == p).count();
                    model.retain(|k, _| k.2 != p);
                    assert_eq!(ix.remove_peer(&peer(p)), n, "step {step}");
                }
                8 => {
                    let n = model.values().filter(|&&e| e <= now).count();
                    model.retain(|_, e| *e > now);
                    assert_eq!(ix.expire(now), n, "step {step}");
                }
                _ => {
                    let mut want: Vec<PeerId> = model
                        .iter()
                        .filter(|((ka, kv, _), e)| *ka == a && *kv == v && **e > now)
                        .map(|((_, _, kp), _)| peer(*kp))
                        .collect();
                    want.sort_by_cached_key(|p| p.to_string());
                    assert_eq!(
                        ix.query(pk, Some(at), Some(&v), now, 100),
                        want,
                        "step {step}"
                    );
                }
            }
            assert_eq!(ix.len(), model.len(), "step {step}");
            let q = next(20) as u8;
            assert_eq!(
                ix.peer_len(&peer(q)),
                model.keys().filter(|k| k.2 == q).count(),
                "step {step}"
            );
        }
    }

    #[test]
    fn wildcards() {
        assert!(matches("*", "x"));
        assert!(matches("ab*", "ABC"));
        assert!(matches("*bc", "abc"));
        assert!(matches("*b*", "abc"));
        assert!(matches("abc", "abc"));
        assert!(!matches("abd", "abc"));
        assert!(!matches("*d*", "abc"));
    }

    #[test]
    fn an_extreme_expiration_is_capped() {
        let mut ix = SrdiIndex::new(10, 3);
        let m = SrdiMessage {
            peer: peer(1),
            primary_key: "Adv".into(),
            scope: 0,
            entries: vec![SrdiEntry {
                key: "Name".into(),
                value: "a".into(),
                expiration: i64::MAX,
            }],
        };
        assert_eq!(ix.add_message(&m, 1_000).stored, 1);
        let got = ix.entries_of(&peer(1), 1_000);
        assert_eq!(got["Adv"][0].expiration, MAX_ENTRY_LIFETIME_MS as i64);
        assert_eq!(ix.expire(1_000 + MAX_ENTRY_LIFETIME_MS), 1);
    }

    #[test]
    fn add_query_expire_remove() {
        let mut ix = SrdiIndex::new(10, 3);
        ix.add("Adv", "Name", "a", peer(1), 100).unwrap();
        ix.add("Adv", "Name", "a", peer(2), 200).unwrap();
        ix.add("Adv", "Id", "i", peer(1), 100).unwrap();
        ix.add("Adv", "Name", "a", peer(1), 300).unwrap(); // renew
        assert_eq!(ix.len(), 3);
        assert_eq!(ix.query("Adv", Some("Name"), Some("a"), 0, 10).len(), 2);
        assert_eq!(ix.query("Adv", None, None, 0, 10).len(), 2);
        assert_eq!(
            ix.query("Adv", Some("Name"), Some("a"), 250, 10),
            vec![peer(1)]
        );
        assert_eq!(ix.query("Adv", Some("Name"), Some("a"), 0, 1).len(), 1);
        assert!(ix.query("Peers", None, None, 0, 10).is_empty());
        assert_eq!(ix.expire(150), 1); // Id of peer 1
        assert_eq!(ix.len(), 2);
        assert_eq!(ix.remove_peer(&peer(1)), 1);
        assert_eq!(ix.peer_len(&peer(1)), 0);
        assert!(ix.remove("Adv", "Name", "a", &peer(2)));
        assert!(!ix.remove("Adv", "Name", "a", &peer(2)));
        assert!(ix.is_empty());
    }

    #[test]
    fn bounds_push_back() {
        let mut ix = SrdiIndex::new(5, 3);
        for i in 0..3 {
            ix.add("Adv", "Name", &i.to_string(), peer(1), 100).unwrap();
        }
        assert_eq!(
            ix.add("Adv", "Name", "x", peer(1), 100),
            Err(IndexError::PeerQuota(3))
        );
        // Renewal still works at quota.
        ix.add("Adv", "Name", "0", peer(1), 500).unwrap();
        ix.add("Adv", "Name", "y", peer(2), 100).unwrap();
        ix.add("Adv", "Name", "z", peer(3), 100).unwrap();
        assert_eq!(
            ix.add("Adv", "Name", "w", peer(4), 100),
            Err(IndexError::Full(5))
        );
        assert_eq!(ix.len(), 5);
        let msg = SrdiMessage {
            peer: peer(2),
            primary_key: "Adv".into(),
            scope: 0,
            entries: vec![
                SrdiEntry {
                    key: "Name".into(),
                    value: "y".into(),
                    expiration: 0,
                },
                SrdiEntry {
                    key: "Name".into(),
                    value: "q".into(),
                    expiration: -1,
                },
                SrdiEntry {
                    key: "Name".into(),
                    value: "r".into(),
                    expiration: 5,
                },
            ],
        };
        let out = ix.add_message(&msg, 1000);
        assert_eq!(
            out,
            AddOutcome {
                stored: 1,
                refused: 1,
                removed: 1
            }
        );
        let entries = ix.entries_of(&peer(2), 1000);
        assert_eq!(
            entries["Adv"][0].expiration as u64,
            DEFAULT_ENTRY_LIFETIME_MS
        );
    }
}
