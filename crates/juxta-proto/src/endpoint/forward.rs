//! The router's receive-side decisions (digest §5.2, §5.3): checks a routed
//! message (loops, hop limit, source address), decides whether it is for
//! this peer or must be forwarded and to which next hop, rewrites the ERM
//! for the next hop, and derives the route back to the origin.
//!
//! Source verification: an `EndpointRouterMsg-fingerprint` element, when
//! present, must carry a valid signature by a certificate whose derived
//! `cbid` is the ERM `Src`. Without it, `Src` must be the peer at the other
//! end of the link the message came on (that link's CBJX trailer or compact
//! handshake vouches for it). So a relayed message must carry the origin's
//! fingerprint; [`fingerprint_for`] builds it (it covers the origin's
//! address, not the message, so one per peer is enough, as in JXSE).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::address::EndpointAddress;
use super::compact_router::{CompactRouterError, CompactRouterHeader, ELEM_COMPACT_ERM, NS_JUXTA};
use super::route_cache::check_route;
use super::router::{Hop, RouterError, RouterHeader, ELEM_ERM, ELEM_ERM_FINGERPRINT};
use crate::id::PeerId;
use crate::identity::{Identity, RemoteCert};
use crate::message::cbjx::parse_trailer;
use crate::message::{Element, Message, NS_JXTA};

/// Default most peers a message may have been forwarded by (reverse hops).
pub const DEFAULT_MAX_FORWARD_HOPS: usize = 8;
/// Largest fingerprint element accepted.
pub const MAX_FINGERPRINT_LEN: usize = 20 * 1024;

/// Which loop rule a message broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopKind {
    /// The ERM `Src` is this peer.
    Source,
    /// The ERM `Last` is this peer.
    LastHop,
    /// This peer is already in the reverse hops.
    Reverse,
}

/// Why a routed message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// The router message has no ERM element.
    #[error("EndpointRouter message without EndpointRouterMsg element")]
    NoRouterHeader,
    /// The ERM is malformed or oversized.
    #[error("router header: {0}")]
    Malformed(#[from] RouterError),
    /// The compact router header is malformed or oversized.
    #[error("compact router header: {0}")]
    CompactMalformed(#[from] CompactRouterError),
    /// A compact router header on a link that does not use compact
    /// framing (only Juxta peers that agreed on it may send one), or a
    /// message with both an XML and a compact header.
    #[error("compact router header not allowed here ({0})")]
    CompactNotAllowed(&'static str),
    /// The `Src` or `Dest` is not a peer address.
    #[error("router header {0} is not a jxta:// peer address")]
    NotAPeer(&'static str),
    /// A loop rule was broken.
    #[error("routing loop ({0:?})")]
    Loop(LoopKind),
    /// The message went through too many peers.
    #[error("message forwarded {0} times, more than allowed")]
    HopLimit(usize),
    /// `Src` is not the link's peer and no fingerprint proves it.
    #[error("source {claimed} not proven on a link from {link}")]
    Spoofed {
        /// The ERM `Src`.
        claimed: Box<PeerId>,
        /// The peer at the other end of the link.
        link: Box<PeerId>,
    },
    /// The fingerprint is malformed, wrongly signed, or names another peer.
    #[error("bad router fingerprint: {0}")]
    BadFingerprint(&'static str),
    /// The destination has no service.
    #[error("routed message without a destination service")]
    NoService,
    /// This peer does not forward (not a relay).
    #[error("message for {0}: this peer does not forward")]
    NotForwarding(PeerId),
    /// No connection or route to the next hop.
    #[error("no route to {0}")]
    NoRoute(PeerId),
}

/// A router header in either form.
// The XML form is held inline: boxing it would add an allocation per
// message from JXSE peers to save a move of a few hundred bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// JXSE's XML `EndpointRouterMsg`.
    Xml(RouterHeader),
    /// The compact form between Juxta peers (shared with the
    /// [`CompactHeaderMemo`] that read it).
    Compact(Arc<CompactRouterHeader>),
}

impl Header {
    /// The forward hops that name a peer, in order.
    pub fn forward_peers(&self) -> Vec<PeerId> {
        match self {
            Header::Xml(h) => h.forward.iter().filter_map(hop_peer).collect(),
            Header::Compact(h) => h.forward.clone(),
        }
    }

    /// The reverse hops that name a peer, in order.
    pub fn reverse_peers(&self) -> Vec<PeerId> {
        match self {
            Header::Xml(h) => h.reverse.iter().filter_map(hop_peer).collect(),
            Header::Compact(h) => h.reverse.clone(),
        }
    }

    fn reverse_len(&self) -> usize {
        match self {
            Header::Xml(h) => h.reverse.len(),
            Header::Compact(h) => h.reverse.len(),
        }
    }

    fn last_peer(&self) -> Option<PeerId> {
        match self {
            Header::Xml(h) => h.last.peer_id(),
            Header::Compact(h) => Some(h.last),
        }
    }

    /// The XML form (converted from the compact one if needed).
    pub fn to_router_header(&self) -> RouterHeader {
        match self {
            Header::Xml(h) => h.clone(),
            Header::Compact(h) => h.to_router_header(),
        }
    }
}

/// How many compact router headers [`CompactHeaderMemo`] remembers, read
/// and forwarded.
pub const REMEMBERED_HEADERS: usize = 4;

/// The last compact router headers read (compared by content with a copy
/// of their bytes) and the forwarded forms written from them.
///
/// Why: a stream of routed messages carries the same header message after
/// message (between Juxta peers even as the same buffer, an interned value
/// of the compact framing: [`crate::wire::compact::INTERNED_VALUES`]), so
/// a relay would parse it and encode its forwarded form again for every
/// message. Comparing a few hundred bytes costs a fraction of either, and
/// the forwarded bytes handed out are one buffer, which the next hop's
/// compact encoder then finds by address.
///
/// ```
/// use juxta_proto::endpoint::compact_router::CompactRouterHeader;
/// use juxta_proto::endpoint::forward::CompactHeaderMemo;
/// use juxta_proto::id::PeerId;
/// let (a, r, b) = (PeerId::from_public_key_spki(b"a"), PeerId::from_public_key_spki(b"r"), PeerId::from_public_key_spki(b"b"));
/// let bytes = CompactRouterHeader::originate(&a, &b, "PipeService", None, &[]).encode();
/// let mut memo = CompactHeaderMemo::default();
/// let h = memo.parse(&bytes).unwrap();
/// assert!(std::sync::Arc::ptr_eq(&h, &memo.parse(&bytes.to_vec()).unwrap()));
/// let f = memo.forwarded(&h, &r, &[]);
/// assert_eq!(f, h.encode_forwarded(&r, &[]));
/// assert_eq!(f.as_ptr(), memo.forwarded(&h, &r, &[]).as_ptr());
/// ```
#[derive(Debug, Default)]
pub struct CompactHeaderMemo {
    read: [Option<(Bytes, Arc<CompactRouterHeader>)>; REMEMBERED_HEADERS],
    next_read: usize,
    forwarded: [Option<ForwardedHeader>; REMEMBERED_HEADERS],
    next_forwarded: usize,
}

#[derive(Debug)]
struct ForwardedHeader {
    /// Held, so the pointer comparison cannot meet a new header at the
    /// same address.
    from: Arc<CompactRouterHeader>,
    local: PeerId,
    forward: Vec<PeerId>,
    bytes: Bytes,
}

impl CompactHeaderMemo {
    /// [`CompactRouterHeader::parse`], or the header remembered for the
    /// same bytes.
    pub fn parse(&mut self, data: &[u8]) -> Result<Arc<CompactRouterHeader>, CompactRouterError> {
        if let Some((_, h)) = self.read.iter().flatten().find(|(k, _)| k[..] == *data) {
            return Ok(h.clone());
        }
        let h = Arc::new(CompactRouterHeader::parse(data)?);
        self.read[self.next_read] = Some((Bytes::copy_from_slice(data), h.clone()));
        self.next_read = (self.next_read + 1) % REMEMBERED_HEADERS;
        Ok(h)
    }

    /// [`CompactRouterHeader::encode_forwarded`] of `h`, or the same bytes
    /// remembered from the last time `h` (this very header, as
    /// [`CompactHeaderMemo::parse`] gave it) went on with `local` and
    /// `forward`.
    pub fn forwarded(
        &mut self,
        h: &Arc<CompactRouterHeader>,
        local: &PeerId,
        forward: &[PeerId],
    ) -> Bytes {
        if let Some(f) = self
            .forwarded
            .iter()
            .flatten()
            .find(|f| Arc::ptr_eq(&f.from, h) && f.local == *local && f.forward[..] == *forward)
        {
            return f.bytes.clone();
        }
        let bytes = h.encode_forwarded(local, forward);
        self.forwarded[self.next_forwarded] = Some(ForwardedHeader {
            from: h.clone(),
            local: *local,
            forward: forward.to_vec(),
            bytes: bytes.clone(),
        });
        self.next_forwarded = (self.next_forwarded + 1) % REMEMBERED_HEADERS;
        bytes
    }
}

/// A routed message that passed the checks.
#[derive(Debug, Clone)]
pub struct Inspected {
    /// The parsed header.
    pub header: Header,
    /// The origin, proven.
    pub src: PeerId,
    /// The final destination.
    pub dest: PeerId,
}

/// Verifies router fingerprints, remembering (bounded) the ones it checked
/// so that a stream of relayed messages costs one RSA verification per
/// origin.
///
/// A stream of routed messages carries the same few fingerprints (about
/// 850 bytes each with a 1024-bit key) over and over, so the last
/// [`RECENT_FINGERPRINTS`] it proved are compared first (by buffer, then
/// byte for byte; a mismatch ends at the first differing byte), before
/// the table, whose lookup hashes the whole element.
#[derive(Debug, Default)]
pub struct FingerprintVerifier {
    /// The compact router headers read and forwarded last.
    headers: CompactHeaderMemo,
    verified: HashMap<Bytes, PeerId>,
    capacity: usize,
    /// The last fingerprints proved (or found in `verified`), newest at
    /// `next - 1`.
    recent: [Option<(Bytes, PeerId)>; RECENT_FINGERPRINTS],
    next: usize,
}

/// How many fingerprints [`FingerprintVerifier`] compares before its table.
pub const RECENT_FINGERPRINTS: usize = 4;

impl FingerprintVerifier {
    /// A verifier remembering up to `capacity` fingerprints.
    pub fn new(capacity: usize) -> FingerprintVerifier {
        FingerprintVerifier {
            headers: CompactHeaderMemo::default(),
            verified: HashMap::new(),
            capacity: capacity.max(1),
            recent: Default::default(),
            next: 0,
        }
    }

    /// The memory of compact router headers [`inspect`] reads with, for
    /// [`rewrite_forwarded`].
    pub fn headers(&mut self) -> &mut CompactHeaderMemo {
        &mut self.headers
    }

    fn remember_recent(&mut self, fp: &Bytes, peer: PeerId) {
        self.recent[self.next % RECENT_FINGERPRINTS] = Some((fp.clone(), peer));
        self.next = (self.next + 1) % RECENT_FINGERPRINTS;
    }

    /// The peer a fingerprint element proves (its payload names it and its
    /// certificate derives it, signature valid).
    pub fn verify(&mut self, fp: &Bytes) -> Result<PeerId, ForwardError> {
        if let Some(p) = self
            .recent
            .iter()
            .flatten()
            // The same buffer (a compact connection's interned value is
            // one copy, handed to every message that refers to it) is the
            // same bytes: `known` is held here, so its memory is not reused.
            .find(|(known, _)| {
                known.len() == fp.len() && (known.as_ptr() == fp.as_ptr() || known[..] == fp[..])
            })
            .map(|(_, p)| *p)
        {
            return Ok(p);
        }
        if let Some(p) = self.verified.get(fp).copied() {
            self.remember_recent(fp, p);
            return Ok(p);
        }
        if fp.len() > MAX_FINGERPRINT_LEN {
            return Err(ForwardError::BadFingerprint("too large"));
        }
        // Same layout as the CBJX trailer: three u32-length fields, here
        // payload, certificate, signature.
        let t = parse_trailer(fp.clone()).map_err(|_| ForwardError::BadFingerprint("layout"))?;
        let (payload, cert, sig) = (t.cert, t.src, t.sig);
        let text =
            std::str::from_utf8(&payload).map_err(|_| ForwardError::BadFingerprint("payload"))?;
        let claimed = text
            .parse::<EndpointAddress>()
            .ok()
            .and_then(|a| a.peer_id())
            .ok_or(ForwardError::BadFingerprint("payload"))?;
        let cert = RemoteCert::parse(cert).map_err(|_| ForwardError::BadFingerprint("cert"))?;
        let digest: [u8; 32] = Sha256::new()
            .chain_update(&payload)
            .chain_update(cert.der())
            .finalize()
            .into();
        cert.verify_sha256_prehash(&digest, &sig)
            .map_err(|_| ForwardError::BadFingerprint("signature"))?;
        if cert.derived_peer_id() != &claimed {
            return Err(ForwardError::BadFingerprint(
                "certificate is not the payload's peer",
            ));
        }
        if self.verified.len() >= self.capacity {
            self.verified.clear();
        }
        self.verified.insert(fp.clone(), claimed);
        self.remember_recent(fp, claimed);
        Ok(claimed)
    }
}

/// The fingerprint element content of `identity` (digest §5.3): payload
/// `jxta://<peer>`, certificate, SHA256withRSA over both.
pub fn fingerprint_for(identity: &Identity) -> Bytes {
    let payload = identity.peer_id().endpoint_address();
    let cert = identity.cert_der();
    let digest: [u8; 32] = Sha256::new()
        .chain_update(payload.as_bytes())
        .chain_update(cert)
        .finalize()
        .into();
    let sig = identity.sign_sha256_prehash(&digest);
    let mut b = BytesMut::with_capacity(12 + payload.len() + cert.len() + sig.len());
    for f in [payload.as_bytes(), &cert[..], &sig[..]] {
        b.put_u32(f.len() as u32);
        b.put_slice(f);
    }
    b.freeze()
}

fn hop_peer(h: &Hop) -> Option<PeerId> {
    let pid = h.pid.as_deref()?;
    pid.parse::<EndpointAddress>().ok()?.peer_id()
}

/// Checks a routed message received from `link` by `local`: the ERM is
/// well formed, breaks no loop rule, has been forwarded fewer than
/// `max_hops` times, and its source is proven (see the module comment).
/// The header is the XML ERM, or (only when `compact_link`: the link
/// receives in compact framing, its peer a Juxta peer) the compact
/// header `juxta:ERM`; a message carrying both is refused.
pub fn inspect(
    local: &PeerId,
    link: &PeerId,
    message: &Message,
    verifier: &mut FingerprintVerifier,
    max_hops: usize,
    compact_link: bool,
) -> Result<Inspected, ForwardError> {
    let header = match (
        message.get(NS_JUXTA, ELEM_COMPACT_ERM),
        message.get(NS_JXTA, ELEM_ERM),
    ) {
        (Some(_), _) if !compact_link => {
            return Err(ForwardError::CompactNotAllowed("link not compact"))
        }
        (Some(_), Some(_)) => return Err(ForwardError::CompactNotAllowed("two router headers")),
        (Some(c), None) => Header::Compact(verifier.headers.parse(&c.data)?),
        (None, Some(erm)) => Header::Xml(RouterHeader::parse(&erm.data)?),
        (None, None) => return Err(ForwardError::NoRouterHeader),
    };
    let (src, dest) = match &header {
        Header::Xml(h) => (
            h.src.peer_id().ok_or(ForwardError::NotAPeer("Src"))?,
            h.dest.peer_id().ok_or(ForwardError::NotAPeer("Dest"))?,
        ),
        Header::Compact(h) => (h.src, h.dest),
    };
    if src == *local {
        return Err(ForwardError::Loop(LoopKind::Source));
    }
    if header.last_peer().as_ref() == Some(local) {
        return Err(ForwardError::Loop(LoopKind::LastHop));
    }
    let in_reverse = match &header {
        Header::Xml(h) => h
            .reverse
            .iter()
            .any(|h| hop_peer(h).as_ref() == Some(local)),
        Header::Compact(h) => h.reverse.contains(local),
    };
    if in_reverse {
        return Err(ForwardError::Loop(LoopKind::Reverse));
    }
    if header.reverse_len() >= max_hops {
        return Err(ForwardError::HopLimit(header.reverse_len()));
    }
    match message.get(NS_JXTA, ELEM_ERM_FINGERPRINT) {
        Some(fp) => {
            let proven = verifier.verify(&fp.data)?;
            if proven != src {
                return Err(ForwardError::BadFingerprint(
                    "fingerprint names another peer",
                ));
            }
        }
        None if src != *link => {
            return Err(ForwardError::Spoofed {
                claimed: Box::new(src),
                link: Box::new(*link),
            })
        }
        None => {}
    }
    Ok(Inspected { header, src, dest })
}

/// The route (first hop first) from `local` back to the origin of an
/// inspected message received from `link`: the reverse hops, last first,
/// starting with `link`. `None` when the origin is `link` itself (a direct
/// peer) or the hops would loop.
pub fn route_back(local: &PeerId, link: &PeerId, m: &Inspected) -> Option<Vec<PeerId>> {
    if m.src == *link {
        return None;
    }
    let mut hops: Vec<PeerId> = m.header.reverse_peers().into_iter().rev().collect();
    if hops.first() != Some(link) {
        hops.insert(0, *link);
    }
    check_route(local, &m.src, &hops).ok()?;
    Some(hops)
}

/// Where to send a message that is not for this peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHop {
    /// The connected peer to send it to.
    pub hop: PeerId,
    /// The forward hops still to go after `hop`.
    pub forward: Vec<PeerId>,
}

/// Picks the next hop toward `m.dest`: the destination itself when
/// connected, else the first forward hop in the header when connected,
/// else the cached route `cached` when its first hop is connected.
pub fn next_hop(
    local: &PeerId,
    m: &Inspected,
    connected: impl Fn(&PeerId) -> bool,
    cached: Option<&[PeerId]>,
) -> Result<NextHop, ForwardError> {
    if connected(&m.dest) {
        return Ok(NextHop {
            hop: m.dest,
            forward: Vec::new(),
        });
    }
    let mut fwd: Vec<PeerId> = m.header.forward_peers();
    while fwd.first() == Some(local) {
        fwd.remove(0);
    }
    if let Some(first) = fwd.first().copied() {
        if connected(&first) && check_route(local, &m.dest, &fwd).is_ok() {
            return Ok(NextHop {
                hop: first,
                forward: fwd[1..].to_vec(),
            });
        }
    }
    if let Some(route) = cached {
        if let Some(first) = route.first().copied() {
            if connected(&first) && check_route(local, &m.dest, route).is_ok() {
                return Ok(NextHop {
                    hop: first,
                    forward: route[1..].to_vec(),
                });
            }
        }
    }
    Err(ForwardError::NoRoute(m.dest))
}

fn hop_of(p: &PeerId) -> Hop {
    Hop {
        pid: Some(p.to_string()),
        addresses: Vec::new(),
    }
}

/// The header to send on to the next hop: `Last` becomes `local`, `local`
/// joins the reverse hops, the forward hops are `forward` (same form as
/// `h`).
pub fn forwarded_header(local: &PeerId, h: &Header, forward: &[PeerId]) -> Header {
    match h {
        Header::Xml(h) => {
            let mut out = h.clone();
            out.last = EndpointAddress::peer(local, None, None);
            out.reverse.push(hop_of(local));
            out.forward = forward.iter().map(hop_of).collect();
            Header::Xml(out)
        }
        Header::Compact(h) => {
            let mut out = CompactRouterHeader::clone(h);
            out.last = *local;
            out.reverse.push(*local);
            out.forward = forward.to_vec();
            Header::Compact(Arc::new(out))
        }
    }
}

/// Replaces the router header of `message` with `h` (the fingerprint and
/// every other element stay as they are): in compact form when
/// `compact_next` (the next hop's connection sends compact framing, its
/// peer is a Juxta peer) and `h` has one, else as JXSE's XML ERM.
pub fn rewrite(message: &mut Message, h: &Header, compact_next: bool) {
    message.remove_all(NS_JXTA, ELEM_ERM);
    message.remove_all(NS_JUXTA, ELEM_COMPACT_ERM);
    let compact = match (h, compact_next) {
        (_, false) => None,
        (Header::Compact(c), true) => Some(c.encode()),
        (Header::Xml(x), true) => CompactRouterHeader::from_router_header(x).map(|c| c.encode()),
    };
    let e = match compact {
        Some(b) => Element::bytes_static(NS_JUXTA, ELEM_COMPACT_ERM, b),
        None => Element::xml(NS_JXTA, ELEM_ERM, h.to_router_header().to_xml()),
    };
    message.push(e);
}

/// [`forwarded_header`] then [`rewrite`] in one step, as a relay (`local`)
/// passes `message` on with header `h` and the forward hops `forward`: a
/// compact header going to a compact hop is encoded as forwarded straight
/// from `h` ([`CompactRouterHeader::encode_forwarded`]: no copy of the
/// header); any other case takes the two steps.
pub fn rewrite_forwarded(
    message: &mut Message,
    local: &PeerId,
    h: &Header,
    forward: &[PeerId],
    compact_next: bool,
    memo: &mut CompactHeaderMemo,
) {
    match (h, compact_next) {
        (Header::Compact(c), true) => {
            message.remove_all(NS_JXTA, ELEM_ERM);
            message.remove_all(NS_JUXTA, ELEM_COMPACT_ERM);
            message.push(Element::bytes_static(
                NS_JUXTA,
                ELEM_COMPACT_ERM,
                memo.forwarded(c, local, forward),
            ));
        }
        _ => rewrite(message, &forwarded_header(local, h, forward), compact_next),
    }
}

/// Turns a compact router header in `message` (if any) back into JXSE's
/// XML ERM, for a connection that does not send compact framing (a
/// message spooled while its edge was reached over a compact connection
/// that has since been replaced). A header that does not parse is
/// removed, and the error returned.
pub fn compact_to_xml(message: &mut Message) -> Result<(), CompactRouterError> {
    let Some(c) = message.get(NS_JUXTA, ELEM_COMPACT_ERM) else {
        return Ok(());
    };
    let parsed = CompactRouterHeader::parse(&c.data);
    message.remove_all(NS_JUXTA, ELEM_COMPACT_ERM);
    let h = parsed?;
    message.push(Element::xml(
        NS_JXTA,
        ELEM_ERM,
        h.to_router_header().to_xml(),
    ));
    Ok(())
}

/// The header of a message `local` originates for `dest`'s
/// `service`/`param`, to go through `forward` after the first hop.
pub fn originate(
    local: &PeerId,
    dest: &PeerId,
    service: &str,
    param: Option<&str>,
    forward: &[PeerId],
) -> RouterHeader {
    let mut h = RouterHeader::direct(
        EndpointAddress::peer(local, None, None),
        EndpointAddress::peer(dest, Some(service), param),
    );
    h.forward = forward.iter().map(hop_of).collect();
    h
}

/// Strips the router elements of a message for this peer and names its
/// listener (`service`, `param`).
pub fn into_local(
    mut message: Message,
    m: &Inspected,
) -> Result<(super::ServiceAddress, Message), ForwardError> {
    message.remove_all(NS_JXTA, ELEM_ERM);
    message.remove_all(NS_JUXTA, ELEM_COMPACT_ERM);
    message.remove_all(NS_JXTA, ELEM_ERM_FINGERPRINT);
    let (service, param) = match &m.header {
        Header::Xml(h) => (
            h.dest.service.clone().ok_or(ForwardError::NoService)?,
            h.dest.param.clone(),
        ),
        Header::Compact(h) => (h.service.clone(), h.param.clone()),
    };
    Ok((super::ServiceAddress { service, param }, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::sync::OnceLock;

    fn ids() -> &'static [Identity; 2] {
        static IDS: OnceLock<[Identity; 2]> = OnceLock::new();
        IDS.get_or_init(|| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(11);
            [
                Identity::generate(&mut rng, 1024, "A", 1_700_000_000).unwrap(),
                Identity::generate(&mut rng, 1024, "B", 1_700_000_000).unwrap(),
            ]
        })
    }

    fn p(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n])
    }

    #[test]
    fn fingerprint_signature_is_unchanged_by_the_openssl_signer() {
        let me = &ids()[0];
        let fp = fingerprint_for(me);
        // Three u32-length fields: payload, certificate, signature.
        let mut fields = Vec::new();
        let mut rest = &fp[..];
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            fields.push(&rest[4..4 + len]);
            rest = &rest[4 + len..];
        }
        assert_eq!(fields.len(), 3);
        assert_eq!(fields[0], me.peer_id().endpoint_address().as_bytes());
        assert_eq!(fields[1], &me.cert_der()[..]);
        let digest: [u8; 32] = Sha256::new()
            .chain_update(fields[0])
            .chain_update(fields[1])
            .finalize()
            .into();
        assert_eq!(
            fields[2],
            &crate::identity::reference::sign_sha256(me, &digest)[..]
        );
    }

    fn msg(h: &RouterHeader, fp: Option<Bytes>) -> Message {
        let mut m = Message::new().with(Element::bytes("app", "x", &b"1"[..]));
        m.push(Element::xml(NS_JXTA, ELEM_ERM, h.to_xml()));
        if let Some(fp) = fp {
            m.push(Element::bytes(NS_JXTA, ELEM_ERM_FINGERPRINT, fp));
        }
        m
    }

    #[test]
    fn relayed_message_with_fingerprint_is_proven_and_forwarded() {
        let a = ids()[0].peer_id();
        let (r, b) = (p(1), p(2));
        let mut v = FingerprintVerifier::new(4);
        let fp = fingerprint_for(&ids()[0]);
        let h = originate(a, &b, "PipeService", Some("urn:x"), &[]);
        // At the relay, from a direct link with A: no fingerprint needed.
        let m0 = msg(&h, None);
        let i = inspect(&r, a, &m0, &mut v, 8, false).unwrap();
        assert_eq!((i.src, i.dest), (*a, b));
        let nh = next_hop(&r, &i, |x| *x == b, None).unwrap();
        assert_eq!(nh.hop, b);
        let fh = forwarded_header(&r, &i.header, &nh.forward).to_router_header();
        // At B, from the relay: the fingerprint proves A.
        let mut m1 = msg(&fh, Some(fp.clone()));
        let i = inspect(&b, &r, &m1, &mut v, 8, false).unwrap();
        assert_eq!(i.src, *a);
        assert_eq!(route_back(&b, &r, &i), Some(vec![r]));
        // Without it, the same message is a spoof.
        m1.remove_all(NS_JXTA, ELEM_ERM_FINGERPRINT);
        assert_eq!(
            inspect(&b, &r, &m1, &mut v, 8, false).unwrap_err(),
            ForwardError::Spoofed {
                claimed: Box::new(*a),
                link: Box::new(r)
            }
        );
        let (to, local) = into_local(m1, &i).unwrap();
        assert_eq!(to.service, "PipeService");
        assert_eq!(local.elements.len(), 1);
    }

    #[test]
    fn fingerprint_of_another_peer_or_garbage_is_refused() {
        let a = ids()[0].peer_id();
        let b_fp = fingerprint_for(&ids()[1]);
        let mut v = FingerprintVerifier::new(4);
        let h = originate(a, &p(2), "S", None, &[]);
        assert_eq!(
            inspect(&p(2), &p(1), &msg(&h, Some(b_fp)), &mut v, 8, false).unwrap_err(),
            ForwardError::BadFingerprint("fingerprint names another peer")
        );
        let mut bad = fingerprint_for(&ids()[0]).to_vec();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert_eq!(
            v.verify(&Bytes::from(bad)).unwrap_err(),
            ForwardError::BadFingerprint("signature")
        );
        assert!(v.verify(&Bytes::from_static(b"\0\0\0\x05ab")).is_err());
        assert!(v
            .verify(&Bytes::from(vec![0u8; MAX_FINGERPRINT_LEN + 1]))
            .is_err());
    }

    #[test]
    fn remembered_fingerprints_match_only_byte_for_byte() {
        let (a, b) = (ids()[0].peer_id(), ids()[1].peer_id());
        let (fa, fb) = (fingerprint_for(&ids()[0]), fingerprint_for(&ids()[1]));
        let mut v = FingerprintVerifier::new(4);
        // Alternating origins, each element a fresh copy (as a decoder
        // hands them out), past the ring of recent ones several times.
        for _ in 0..3 * RECENT_FINGERPRINTS {
            assert_eq!(v.verify(&Bytes::from(fa.to_vec())).unwrap(), *a);
            assert_eq!(v.verify(&Bytes::from(fb.to_vec())).unwrap(), *b);
        }
        // One flipped byte anywhere, or one byte fewer, is not a match: it
        // goes to the full check and fails there.
        for i in [0, fa.len() / 2, fa.len() - 1] {
            let mut bad = fa.to_vec();
            bad[i] ^= 0x40;
            assert!(v.verify(&Bytes::from(bad)).is_err(), "byte {i}");
        }
        assert!(v.verify(&fa.slice(..fa.len() - 1)).is_err());
        // A full table is emptied; the ring still answers, and only for
        // what was proved.
        let mut small = FingerprintVerifier::new(1);
        assert_eq!(small.verify(&fa).unwrap(), *a);
        assert_eq!(small.verify(&fb).unwrap(), *b);
        assert_eq!(small.verify(&fa).unwrap(), *a);
        assert_eq!(small.verified.len(), 1);
    }

    #[test]
    fn loop_rules_and_hop_limit() {
        let (a, r, b) = (p(10), p(1), p(2));
        let mut v = FingerprintVerifier::new(4);
        let h = originate(&a, &b, "S", None, &[]);
        assert_eq!(
            inspect(&a, &a, &msg(&h, None), &mut v, 8, false).unwrap_err(),
            ForwardError::Loop(LoopKind::Source)
        );
        let mut h2 = forwarded_header(&r, &Header::Xml(h.clone()), &[]).to_router_header();
        assert_eq!(
            inspect(&r, &a, &msg(&h2, None), &mut v, 8, false).unwrap_err(),
            ForwardError::Loop(LoopKind::LastHop)
        );
        h2.last = EndpointAddress::peer(&p(3), None, None);
        assert_eq!(
            inspect(&r, &a, &msg(&h2, None), &mut v, 8, false).unwrap_err(),
            ForwardError::Loop(LoopKind::Reverse)
        );
        let mut h3 = h.clone();
        for i in 0..8 {
            h3.reverse.push(hop_of(&p(100 + i)));
        }
        assert_eq!(
            inspect(&b, &a, &msg(&h3, None), &mut v, 8, false).unwrap_err(),
            ForwardError::HopLimit(8)
        );
        let mut m = msg(&h, None);
        m.remove_all(NS_JXTA, ELEM_ERM);
        assert_eq!(
            inspect(&b, &a, &m, &mut v, 8, false).unwrap_err(),
            ForwardError::NoRouterHeader
        );
        m.push(Element::xml(NS_JXTA, ELEM_ERM, "<jxta:ERM><Src>".into()));
        assert!(matches!(
            inspect(&b, &a, &m, &mut v, 8, false).unwrap_err(),
            ForwardError::Malformed(_)
        ));
        let mut m = msg(&h, None);
        m.remove_all(NS_JXTA, ELEM_ERM);
        m.push(Element::bytes(
            NS_JXTA,
            ELEM_ERM,
            vec![b' '; super::super::router::MAX_ERM_LEN + 1],
        ));
        assert!(matches!(
            inspect(&b, &a, &m, &mut v, 8, false).unwrap_err(),
            ForwardError::Malformed(RouterError::TooLarge(_))
        ));
        let tcp = RouterHeader::direct(
            "tcp://1.2.3.4:5".parse().unwrap(),
            EndpointAddress::peer(&b, Some("S"), None),
        );
        assert_eq!(
            inspect(&b, &a, &msg(&tcp, None), &mut v, 8, false).unwrap_err(),
            ForwardError::NotAPeer("Src")
        );
    }

    #[test]
    fn next_hop_prefers_direct_then_forward_list_then_cache() {
        let (a, r1, r2, b) = (p(10), p(1), p(2), p(3));
        let mut v = FingerprintVerifier::new(4);
        let h = originate(&a, &b, "S", None, &[r2]);
        let i = inspect(&r1, &a, &msg(&h, None), &mut v, 8, false).unwrap();
        assert_eq!(
            next_hop(&r1, &i, |x| *x == r2, None).unwrap(),
            NextHop {
                hop: r2,
                forward: vec![]
            }
        );
        assert_eq!(next_hop(&r1, &i, |x| *x == b, None).unwrap().hop, b);
        let i2 = inspect(
            &r1,
            &a,
            &msg(&originate(&a, &b, "S", None, &[]), None),
            &mut v,
            8,
            false,
        )
        .unwrap();
        assert_eq!(
            next_hop(&r1, &i2, |x| *x == p(7), Some(&[p(7), r2])).unwrap(),
            NextHop {
                hop: p(7),
                forward: vec![r2]
            }
        );
        assert_eq!(
            next_hop(&r1, &i2, |_| false, Some(&[r2])).unwrap_err(),
            ForwardError::NoRoute(b)
        );
        // A cached route through the destination's own origin is a loop.
        assert!(next_hop(&r1, &i2, |x| *x == r2, Some(&[r2, r1])).is_err());
    }

    fn compact_msg(h: &CompactRouterHeader, fp: Option<Bytes>) -> Message {
        let mut m = Message::new().with(Element::bytes("app", "x", &b"1"[..]));
        m.push(Element::bytes(NS_JUXTA, ELEM_COMPACT_ERM, h.encode()));
        if let Some(fp) = fp {
            m.push(Element::bytes(NS_JXTA, ELEM_ERM_FINGERPRINT, fp));
        }
        m
    }

    /// More streams than the memo holds, in turn: every header read and
    /// forwarded is what parsing and encoding give; a refused header is
    /// refused again.
    #[test]
    fn the_header_memo_gives_what_parsing_and_encoding_give() {
        let a = *ids()[0].peer_id();
        let (r, r2) = (p(1), p(3));
        let mut memo = CompactHeaderMemo::default();
        for round in 0..3 {
            for k in 0..REMEMBERED_HEADERS + 2 {
                let h = CompactRouterHeader::originate(&a, &p(20 + k as u8), "S", None, &[]);
                let bytes = h.encode();
                let got = memo.parse(&bytes).unwrap();
                assert_eq!(*got, h);
                for (local, forward) in [(r, vec![]), (r2, vec![]), (r, vec![r2])] {
                    assert_eq!(
                        memo.forwarded(&got, &local, &forward),
                        h.encode_forwarded(&local, &forward),
                        "round {round} stream {k}"
                    );
                }
                let mut bad = bytes.to_vec();
                bad.push(0);
                assert!(memo.parse(&bad).is_err());
                assert!(memo.parse(&bad).is_err());
            }
        }
    }

    #[test]
    fn forwarding_in_one_step_gives_the_two_steps_bytes() {
        let a = *ids()[0].peer_id();
        let (r, r2, b) = (p(1), p(3), p(2));
        let fp = fingerprint_for(&ids()[0]);
        for (param, forward, reverse) in [
            (None, vec![], vec![]),
            (Some("urn:x"), vec![r2], vec![]),
            (Some(""), vec![r2, p(4)], vec![p(5), p(6)]),
        ] {
            let mut h = CompactRouterHeader::originate(&a, &b, "PipeService", param, &forward);
            h.reverse = reverse;
            let i = Header::Compact(Arc::new(h.clone()));
            let mut memo = CompactHeaderMemo::default();
            for compact_next in [true, false, true] {
                let mut one = compact_msg(&h, Some(fp.clone()));
                let mut two = one.clone();
                rewrite_forwarded(&mut one, &r, &i, &forward, compact_next, &mut memo);
                rewrite(&mut two, &forwarded_header(&r, &i, &forward), compact_next);
                assert_eq!(one, two);
            }
            // And what it gives parses as the forwarded header.
            let f = CompactRouterHeader::parse(&h.encode_forwarded(&r, &forward)).unwrap();
            let Header::Compact(want) = forwarded_header(&r, &i, &forward) else {
                unreachable!()
            };
            assert_eq!(f, *want);
        }
        // An XML header takes the two steps.
        let x = Header::Xml(
            CompactRouterHeader::originate(&a, &b, "PipeService", None, &[]).to_router_header(),
        );
        for compact_next in [true, false] {
            let mut one = Message::new().with(Element::bytes("app", "x", &b"1"[..]));
            let mut two = one.clone();
            rewrite_forwarded(
                &mut one,
                &r,
                &x,
                &[],
                compact_next,
                &mut CompactHeaderMemo::default(),
            );
            rewrite(&mut two, &forwarded_header(&r, &x, &[]), compact_next);
            assert_eq!(one, two);
        }
    }

    #[test]
    fn compact_header_through_a_relay_keeps_the_source_rules() {
        let a = ids()[0].peer_id();
        let (r, b) = (p(1), p(2));
        let mut v = FingerprintVerifier::new(4);
        let fp = fingerprint_for(&ids()[0]);
        let h = CompactRouterHeader::originate(a, &b, "PipeService", Some("urn:x"), &[]);
        // Only on a compact link.
        assert_eq!(
            inspect(&r, a, &compact_msg(&h, None), &mut v, 8, false).unwrap_err(),
            ForwardError::CompactNotAllowed("link not compact")
        );
        let i = inspect(&r, a, &compact_msg(&h, None), &mut v, 8, true).unwrap();
        assert_eq!((i.src, i.dest), (*a, b));
        let nh = next_hop(&r, &i, |x| *x == b, None).unwrap();
        let fh = forwarded_header(&r, &i.header, &nh.forward);
        // Forwarded to a compact peer: compact; to a JXSE peer: XML.
        let mut m1 = compact_msg(&h, Some(fp.clone()));
        rewrite(&mut m1, &fh, true);
        assert!(m1.get(NS_JXTA, ELEM_ERM).is_none());
        let i = inspect(&b, &r, &m1, &mut v, 8, true).unwrap();
        assert_eq!(i.src, *a);
        assert_eq!(route_back(&b, &r, &i), Some(vec![r]));
        let mut x1 = compact_msg(&h, Some(fp.clone()));
        rewrite(&mut x1, &fh, false);
        assert!(x1.get(NS_JUXTA, ELEM_COMPACT_ERM).is_none());
        let xi = inspect(&b, &r, &x1, &mut v, 8, false).unwrap();
        assert_eq!(xi.header.to_router_header(), fh.to_router_header());
        // Without the fingerprint, a relayed compact header is a spoof.
        m1.remove_all(NS_JXTA, ELEM_ERM_FINGERPRINT);
        assert_eq!(
            inspect(&b, &r, &m1, &mut v, 8, true).unwrap_err(),
            ForwardError::Spoofed {
                claimed: Box::new(*a),
                link: Box::new(r)
            }
        );
        // Another peer's fingerprint does not prove the claimed source.
        let mut m2 = compact_msg(&h, Some(fingerprint_for(&ids()[1])));
        rewrite(&mut m2, &fh, true);
        assert_eq!(
            inspect(&b, &r, &m2, &mut v, 8, true).unwrap_err(),
            ForwardError::BadFingerprint("fingerprint names another peer")
        );
        let (to, local) = into_local(m1, &i).unwrap();
        assert_eq!(
            to,
            super::super::ServiceAddress::new("PipeService", Some("urn:x"))
        );
        assert_eq!(local.elements.len(), 1);
    }

    #[test]
    fn compact_header_turns_back_into_xml() {
        let (a, b) = (p(10), p(2));
        let h = CompactRouterHeader::originate(&a, &b, "S", Some("q"), &[]);
        let mut m = compact_msg(&h, None);
        compact_to_xml(&mut m).unwrap();
        assert!(m.get(NS_JUXTA, ELEM_COMPACT_ERM).is_none());
        let mut v = FingerprintVerifier::new(4);
        let i = inspect(&b, &a, &m, &mut v, 8, false).unwrap();
        assert_eq!(i.header, Header::Xml(h.to_router_header()));
        // Nothing to do without a compact header; garbage is removed.
        let before = m.clone();
        compact_to_xml(&mut m).unwrap();
        assert_eq!(m, before);
        let mut g = Message::new().with(Element::bytes(NS_JUXTA, ELEM_COMPACT_ERM, &b"\x02"[..]));
        assert!(compact_to_xml(&mut g).is_err());
        assert!(g.get(NS_JUXTA, ELEM_COMPACT_ERM).is_none());
    }

    #[test]
    fn compact_header_loops_garbage_and_doubles_are_refused() {
        let (a, r, b) = (p(10), p(1), p(2));
        let mut v = FingerprintVerifier::new(4);
        let h = CompactRouterHeader::originate(&a, &b, "S", None, &[]);
        assert_eq!(
            inspect(&a, &a, &compact_msg(&h, None), &mut v, 8, true).unwrap_err(),
            ForwardError::Loop(LoopKind::Source)
        );
        let Header::Compact(mut h2) =
            forwarded_header(&r, &Header::Compact(Arc::new(h.clone())), &[])
        else {
            unreachable!()
        };
        assert_eq!(
            inspect(&r, &a, &compact_msg(&h2, None), &mut v, 8, true).unwrap_err(),
            ForwardError::Loop(LoopKind::LastHop)
        );
        Arc::make_mut(&mut h2).last = p(3);
        assert_eq!(
            inspect(&r, &a, &compact_msg(&h2, None), &mut v, 8, true).unwrap_err(),
            ForwardError::Loop(LoopKind::Reverse)
        );
        let mut h3 = h.clone();
        h3.reverse = (0..8).map(|i| p(100 + i)).collect();
        assert_eq!(
            inspect(&b, &a, &compact_msg(&h3, None), &mut v, 8, true).unwrap_err(),
            ForwardError::HopLimit(8)
        );
        let mut garbled = Message::new().with(Element::bytes(
            NS_JUXTA,
            ELEM_COMPACT_ERM,
            &b"\x01garbage"[..],
        ));
        assert!(matches!(
            inspect(&b, &a, &garbled, &mut v, 8, true).unwrap_err(),
            ForwardError::CompactMalformed(_)
        ));
        garbled.push(Element::xml(
            NS_JXTA,
            ELEM_ERM,
            originate(&a, &b, "S", None, &[]).to_xml(),
        ));
        assert_eq!(
            inspect(&b, &a, &garbled, &mut v, 8, true).unwrap_err(),
            ForwardError::CompactNotAllowed("two router headers")
        );
    }
}
