//! Where SRDI entries live and how a miss travels, as pure functions.
//!
//! - [`global_view`] / [`replica_peer`]: JXSE's `SrdiManager.getReplicaPeer`:
//!   the rendezvous view plus self, sorted by full ID URN string; the
//!   replica for an expression is `view[|SHA-1(expr)| · N / 2^(8·L)]` where
//!   `L` is the length of the digest's two's-complement byte array.
//!   Because `|digest| < 2^(8L-1)` always holds, `pos < N/2`: JXSE only
//!   ever places replicas on the lower half of the sorted view (with two
//!   rendezvous, always on the first). Juxta reproduces this exactly, since
//!   a JXSE rendezvous looking for a replica computes the same position.
//! - [`replicate`]: JXSE's `replicateEntries`: bins the entries of a
//!   replicate-scoped message by replica peer (self excluded).
//! - [`walk_step`]: JXSE's `LimitedRangeWalker`: who gets a walked message
//!   next, with which header.

use std::collections::{BTreeMap, HashMap};

use sha1::{Digest, Sha1};

use crate::id::PeerId;
use crate::rendezvous::messages::{WalkDirection, WalkHeader, MAX_TTL};

use super::{SrdiMessage, SCOPE_REPLICATE};

/// JXSE's `RPV_REPLICATION_THRESHOLD`: no replica below this view size.
pub const REPLICATION_THRESHOLD: usize = 2;
/// JXSE's hop limit for forwarded queries (`forwardQuery` drops when the
/// incremented hop count exceeds it).
pub const MAX_QUERY_HOPS: u32 = 2;

/// The position of the replica of `expr` in a view of `n` peers, computed
/// exactly as JXSE does (`BigInteger` arithmetic on the SHA-1 digest of the
/// UTF-8 bytes). `None` when `n` is 0.
///
/// ```
/// use juxta_proto::srdi::placement::replica_position;
/// let p = replica_position("AdvNamechat", 3).unwrap();
/// assert!(p < 3);
/// assert_eq!(replica_position("x", 0), None);
/// ```
pub fn replica_position(expr: &str, n: usize) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let d: [u8; 20] = Sha1::digest(expr.as_bytes()).into();
    // |BigInteger(d)|: negate the two's complement value when negative.
    let mut mag = d;
    if d[0] & 0x80 != 0 {
        let mut carry = 1u16;
        for b in mag.iter_mut().rev() {
            let v = (!*b) as u16 + carry;
            *b = v as u8;
            carry = v >> 8;
        }
    }
    // Minimal big-endian magnitude, then BigInteger.toByteArray() length.
    let first = mag.iter().position(|&b| b != 0);
    let (mag, l) = match first {
        None => (&mag[19..], 1usize),
        Some(i) => {
            let m = &mag[i..];
            (m, m.len() + usize::from(m[0] & 0x80 != 0))
        }
    };
    // product = mag * n, big-endian, then shift right by 8*l bits.
    let n = n as u64;
    let mut prod = vec![0u8; mag.len() + 8];
    let mut carry = 0u128;
    for (i, &b) in mag.iter().rev().enumerate() {
        let v = b as u128 * n as u128 + carry;
        let at = prod.len() - 1 - i;
        prod[at] = v as u8;
        carry = v >> 8;
    }
    let mut i = prod.len() - 1 - mag.len();
    while carry > 0 {
        prod[i] = carry as u8;
        carry >>= 8;
        i = i.saturating_sub(1);
    }
    let keep = prod.len().saturating_sub(l);
    let mut pos: u64 = 0;
    for &b in &prod[..keep] {
        pos = (pos << 8) | b as u64;
    }
    Some(pos as usize)
}

/// The view SRDI places entries over: the given rendezvous plus self,
/// deduplicated and sorted by full ID URN string (JXSE's
/// `getGlobalPeerView`).
pub fn global_view(me: PeerId, members: impl IntoIterator<Item = PeerId>) -> Vec<PeerId> {
    let mut v: Vec<(String, PeerId)> = members
        .into_iter()
        .chain(std::iter::once(me))
        .map(|p| (p.to_string(), p))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v.dedup_by(|a, b| a.0 == b.0);
    v.into_iter().map(|(_, p)| p).collect()
}

/// The replica peer for an expression (`PKey + SKey + value`) over a
/// global view; `None` below [`REPLICATION_THRESHOLD`].
pub fn replica_peer(view: &[PeerId], expr: &str) -> Option<PeerId> {
    if view.len() < REPLICATION_THRESHOLD {
        return None;
    }
    replica_position(expr, view.len()).map(|i| view[i])
}

/// The expression JXSE hashes for an entry.
pub fn replica_expr(pkey: &str, attr: &str, value: &str) -> String {
    let mut s = String::with_capacity(pkey.len() + attr.len() + value.len());
    s.push_str(pkey);
    s.push_str(attr);
    s.push_str(value);
    s
}

/// The replication bins of a message received by rendezvous `me`: one SRDI
/// message (scope 0, so it is not replicated again) per replica peer other
/// than `me`, in view order. Nothing unless the message asks for
/// replication and the view has ≥ [`REPLICATION_THRESHOLD`] peers.
pub fn replicate(msg: &SrdiMessage, view: &[PeerId], me: &PeerId) -> Vec<(PeerId, SrdiMessage)> {
    if msg.scope < SCOPE_REPLICATE || view.len() < REPLICATION_THRESHOLD {
        return Vec::new();
    }
    let mut bins: BTreeMap<usize, SrdiMessage> = BTreeMap::new();
    for e in &msg.entries {
        let expr = replica_expr(&msg.primary_key, &e.key, &e.value);
        let Some(i) = replica_position(&expr, view.len()) else {
            continue;
        };
        if view[i] == *me {
            continue;
        }
        bins.entry(i)
            .or_insert_with(|| SrdiMessage {
                peer: msg.peer,
                primary_key: msg.primary_key.clone(),
                scope: 0,
                entries: Vec::new(),
            })
            .entries
            .push(e.clone());
    }
    bins.into_iter().map(|(i, m)| (view[i], m)).collect()
}

/// Like [`replicate`], over several views at once: each entry goes to its
/// replica under every view that reaches [`REPLICATION_THRESHOLD`], once
/// per distinct replica (a rendezvous whose placement is pending sends a
/// new entry both where its last placement put the others and where the
/// current view puts it). Bins come in first-seen order, deterministic.
pub fn replicate_over(
    msg: &SrdiMessage,
    views: &[&[PeerId]],
    me: &PeerId,
) -> Vec<(PeerId, SrdiMessage)> {
    if msg.scope < SCOPE_REPLICATE {
        return Vec::new();
    }
    let views: Vec<&[PeerId]> = views
        .iter()
        .copied()
        .filter(|v| v.len() >= REPLICATION_THRESHOLD)
        .collect();
    if views.is_empty() {
        return Vec::new();
    }
    let mut bins: Vec<(PeerId, SrdiMessage)> = Vec::new();
    let mut slot: HashMap<PeerId, usize> = HashMap::new();
    for e in &msg.entries {
        let expr = replica_expr(&msg.primary_key, &e.key, &e.value);
        let mut sent_to: Vec<PeerId> = Vec::with_capacity(views.len());
        for view in &views {
            let Some(i) = replica_position(&expr, view.len()) else {
                continue;
            };
            let dest = view[i];
            if dest == *me || sent_to.contains(&dest) {
                continue;
            }
            sent_to.push(dest);
            let at = *slot.entry(dest).or_insert_with(|| {
                bins.push((
                    dest,
                    SrdiMessage {
                        peer: msg.peer,
                        primary_key: msg.primary_key.clone(),
                        scope: 0,
                        entries: Vec::new(),
                    },
                ));
                bins.len() - 1
            });
            bins[at].1.entries.push(e.clone());
        }
    }
    bins
}

/// One step of the limited-range walker at rendezvous `me`.
///
/// - `received`: the walker header of the message being continued, or
///   `None` to start a new walk (direction both, originator `me`, replies to
///   `src_service`/`src_param`).
/// - `requested_ttl`: the caller's TTL; the result is
///   `min(requested, header TTL − 1, |view| + 1, MAX_TTL)`.
/// - `up` / `down`: the live neighbours in the sorted peer view.
///
/// Returns the next hops with the header each must carry (direction `Up`
/// to the up peer, `Down` to the down peer); empty when the TTL runs out or
/// no neighbour exists in the walk's direction.
#[allow(clippy::too_many_arguments)]
pub fn walk_step(
    received: Option<&WalkHeader>,
    me: PeerId,
    src_service: &str,
    src_param: Option<&str>,
    requested_ttl: i32,
    view_len: usize,
    up: Option<PeerId>,
    down: Option<PeerId>,
) -> Vec<(PeerId, WalkHeader)> {
    let mut h = match received {
        Some(r) => {
            let mut h = r.clone();
            h.ttl = r.ttl.saturating_sub(1);
            h
        }
        None => WalkHeader {
            ttl: i32::MAX,
            direction: WalkDirection::Both,
            src_peer: me,
            src_service: src_service.to_string(),
            src_param: src_param.map(str::to_string),
        },
    };
    let view_cap = i32::try_from(view_len.saturating_add(1)).unwrap_or(i32::MAX);
    h.ttl = h.ttl.min(requested_ttl).min(view_cap).min(MAX_TTL);
    if h.ttl <= 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(2);
    let dir = h.direction;
    if matches!(dir, WalkDirection::Both | WalkDirection::Up) {
        if let Some(u) = up {
            out.push((
                u,
                WalkHeader {
                    direction: WalkDirection::Up,
                    ..h.clone()
                },
            ));
        }
    }
    if matches!(dir, WalkDirection::Both | WalkDirection::Down) {
        if let Some(d) = down {
            out.push((
                d,
                WalkHeader {
                    direction: WalkDirection::Down,
                    ..h
                },
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{IdFormat, IdType, JxtaId};
    use crate::srdi::SrdiEntry;

    fn peer(n: u8) -> PeerId {
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], [n; 16], IdType::Peer)
            .try_into()
            .unwrap()
    }

    /// A reference computation with u128 pieces, using the definition
    /// directly: pos = floor(mag * n / 2^(8L)).
    fn reference(expr: &str, n: u64) -> u64 {
        let d: [u8; 20] = Sha1::digest(expr.as_bytes()).into();
        // Work with the value as f64-free long division over bytes.
        let neg = d[0] & 0x80 != 0;
        let mut mag = d.to_vec();
        if neg {
            // two's complement negate
            let mut c = true;
            for b in mag.iter_mut().rev() {
                *b = !*b;
                if c {
                    let (v, o) = b.overflowing_add(1);
                    *b = v;
                    c = o;
                }
            }
        }
        while mag.len() > 1 && mag[0] == 0 {
            mag.remove(0);
        }
        let l = mag.len() + usize::from(mag[0] & 0x80 != 0);
        // pos = floor(mag * n / 256^l): compute mag * n as base-256 digits.
        let mut digits: Vec<u64> = mag.iter().map(|&b| b as u64 * n).collect();
        for i in (1..digits.len()).rev() {
            let c = digits[i] >> 8;
            digits[i] &= 0xff;
            digits[i - 1] += c;
        }
        // digits[0] may exceed 255; value = sum digits[i] * 256^(len-1-i).
        // Shift right by l bytes: since len <= l, only the overflow of
        // digits[0] beyond 256^(l-len+1)... handle generally:
        let len = digits.len();
        let mut hi = digits[0];
        let mut shift = l - (len - 1); // bytes still to shift off digits[0]
        while shift > 0 {
            hi >>= 8;
            shift -= 1;
        }
        hi
    }

    #[test]
    fn replica_position_matches_definition() {
        for n in [1u64, 2, 3, 5, 7, 64, 1000, 65_537] {
            for i in 0..300 {
                let e = format!("AdvName{i}");
                let p = replica_position(&e, n as usize).unwrap() as u64;
                assert!(p < n, "{e} {n}");
                assert_eq!(p, reference(&e, n), "{e} {n}");
            }
        }
    }

    #[test]
    fn replica_positions_use_the_lower_half_like_jxse() {
        // |digest| < 2^159 has a clear top bit in its minimal two's
        // complement form, so digest < 2^(8L-1) and pos < N/2: JXSE only
        // ever places replicas on the lower half of the sorted view.
        for n in [2usize, 3, 4, 7] {
            let mut counts = vec![0usize; n];
            for i in 0..4000 {
                counts[replica_position(&format!("k{i}"), n).unwrap()] += 1;
            }
            let half = n.div_ceil(2);
            assert!(counts[half..].iter().all(|&c| c == 0), "{n}: {counts:?}");
            assert!(
                counts[..n / 2].iter().all(|&c| c > 0) || n == 2,
                "{n}: {counts:?}"
            );
        }
    }

    #[test]
    fn view_and_replication() {
        let v = global_view(peer(2), [peer(3), peer(1), peer(3)]);
        assert_eq!(v, vec![peer(1), peer(2), peer(3)]);
        assert_eq!(replica_peer(&v[..1], "x"), None);
        let expr = replica_expr("Adv", "Name", "x");
        assert_eq!(
            replica_peer(&v, &expr),
            Some(v[replica_position(&expr, 3).unwrap()])
        );

        let entries: Vec<SrdiEntry> = (0..30)
            .map(|i| SrdiEntry {
                key: "Name".into(),
                value: format!("v{i}"),
                expiration: 10,
            })
            .collect();
        let msg = SrdiMessage {
            peer: peer(9),
            primary_key: "Adv".into(),
            scope: 1,
            entries,
        };
        let bins = replicate(&msg, &v, &peer(2));
        let total: usize = bins.iter().map(|(_, m)| m.entries.len()).sum();
        let mine = msg
            .entries
            .iter()
            .filter(|e| replica_peer(&v, &replica_expr("Adv", &e.key, &e.value)) == Some(peer(2)))
            .count();
        assert_eq!(total + mine, 30);
        for (dest, m) in &bins {
            assert_ne!(*dest, peer(2));
            assert_eq!(m.scope, 0);
            for e in &m.entries {
                assert_eq!(
                    replica_peer(&v, &replica_expr("Adv", &e.key, &e.value)),
                    Some(*dest)
                );
            }
        }
        let no = SrdiMessage { scope: 0, ..msg };
        assert!(replicate(&no, &v, &peer(2)).is_empty());
    }

    #[test]
    fn walker_steps() {
        let me = peer(5);
        let first = walk_step(
            None,
            me,
            "svc",
            Some("p"),
            10,
            3,
            Some(peer(6)),
            Some(peer(4)),
        );
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].0, peer(6));
        assert_eq!(first[0].1.direction, WalkDirection::Up);
        assert_eq!(first[0].1.ttl, 4); // |view| + 1
        assert_eq!(first[1].1.direction, WalkDirection::Down);
        assert_eq!(first[1].1.src_peer, me);
        // Continuing an up walk only goes up, TTL decreasing.
        let next = walk_step(
            Some(&first[0].1),
            peer(6),
            "",
            None,
            10,
            3,
            Some(peer(7)),
            Some(me),
        );
        assert_eq!(next.len(), 1);
        assert_eq!(
            (next[0].0, next[0].1.ttl, next[0].1.direction),
            (peer(7), 3, WalkDirection::Up)
        );
        assert_eq!(next[0].1.src_service, "svc");
        // TTL 1 received: it dies here.
        let mut dying = next[0].1.clone();
        dying.ttl = 1;
        assert!(walk_step(Some(&dying), peer(7), "", None, 10, 3, Some(peer(8)), None).is_empty());
        // No neighbour in the direction.
        assert!(walk_step(
            Some(&next[0].1),
            peer(7),
            "",
            None,
            10,
            3,
            None,
            Some(peer(6))
        )
        .is_empty());
        // Requested TTL and MAX_TTL cap it.
        assert_eq!(
            walk_step(None, me, "s", None, 2, 1000, Some(peer(6)), None)[0]
                .1
                .ttl,
            2
        );
        assert_eq!(
            walk_step(None, me, "s", None, 1000, 1000, Some(peer(6)), None)[0]
                .1
                .ttl,
            MAX_TTL
        );
    }
}
