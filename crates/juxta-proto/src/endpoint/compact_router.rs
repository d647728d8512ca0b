//! The compact router header: the `EndpointRouterMsg` (ERM) as binary
//! fields, for routed messages between Juxta peers.
//!
//! Why: a routed message carries its origin, final destination (service
//! and param), last hop and forward/reverse hops. JXSE writes these as an
//! XML document of ~350 bytes that every hop parses (peer IDs as hex text)
//! and writes again; between Juxta peers that is most of a relay's own
//! work per message. On a connection whose send direction uses compact
//! framing (the other end is a Juxta peer that completed the compact
//! handshake, see [`crate::wire::handshake`]) the header travels as the
//! element `juxta:ERM` in this layout instead; a JXSE peer never sees it
//! (it never gets compact framing), and a relay forwarding to a JXSE peer
//! writes the XML ERM again ([`CompactRouterHeader::to_router_header`]).
//!
//! ```text
//! header := u8 version(=1)  peer src  peer dest  peer last
//!           str service  u8 hasParam [str param]
//!           varint nFwd  peer*nFwd  varint nRvs  peer*nRvs
//! peer   := u8 format (0 uuid, 1 cbid)  64 bytes (type byte 03: a peer ID)
//! str    := varint len  utf8
//! ```
//!
//! Every length is checked against what is left and against a cap
//! ([`MAX_COMPACT_ERM_LEN`], [`MAX_HOPS`], [`MAX_SERVICE_LEN`]) before
//! anything is allocated, and the header must end exactly where the
//! element does. The source fingerprint stays the separate
//! `jxta:EndpointRouterMsg-fingerprint` element, verified as for the XML
//! header ([`super::forward::inspect`]).
//!
//! ```
//! use juxta_proto::endpoint::compact_router::CompactRouterHeader;
//! use juxta_proto::id::PeerId;
//! let (a, b) = (PeerId::from_public_key_spki(b"a"), PeerId::from_public_key_spki(b"b"));
//! let h = CompactRouterHeader::originate(&a, &b, "PipeService", Some("urn:x"), &[]);
//! let bytes = h.encode();
//! assert_eq!(CompactRouterHeader::parse(&bytes).unwrap(), h);
//! assert!(CompactRouterHeader::parse(&bytes[..bytes.len() - 1]).is_err());
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use super::address::EndpointAddress;
use super::router::{Hop, RouterHeader, MAX_HOPS};
use crate::id::{IdFormat, JxtaId, PeerId, ID_LEN};
use crate::wire::compact::{get_varint, put_varint};

/// The compact header element's namespace.
pub const NS_JUXTA: &str = "juxta";
/// The compact header element's name (namespace [`NS_JUXTA`]).
pub const ELEM_COMPACT_ERM: &str = "ERM";
/// The layout version this module writes and reads.
pub const VERSION: u8 = 1;
/// Longest service or param accepted.
pub const MAX_SERVICE_LEN: usize = 4 * 1024;
/// Largest compact header element accepted: three peers, a service and a
/// param at their caps and [`MAX_HOPS`] hops each way fit.
pub const MAX_COMPACT_ERM_LEN: usize =
    1 + (3 + 2 * MAX_HOPS) * PEER_LEN + 2 * (MAX_SERVICE_LEN + 3) + 1 + 2 * 2;
/// Bytes one peer takes.
const PEER_LEN: usize = 1 + ID_LEN;

/// Why a compact router header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactRouterError {
    /// The element is larger than [`MAX_COMPACT_ERM_LEN`].
    #[error("compact router header of {0} bytes is too large")]
    TooLarge(usize),
    /// A field runs past the end of the element.
    #[error("compact router header truncated")]
    Truncated,
    /// A layout version this peer does not know.
    #[error("compact router header version {0} not supported")]
    Version(u8),
    /// A peer field is not a peer ID (unknown format or not type 03).
    #[error("compact router header: {0} is not a peer ID")]
    NotAPeer(&'static str),
    /// The service or param is not UTF-8, too long, empty or (the
    /// service) contains `/`.
    #[error("compact router header: bad {0}")]
    BadString(&'static str),
    /// A flag byte other than 0 or 1.
    #[error("compact router header: bad flag {0:#x}")]
    BadFlag(u8),
    /// More hops than [`MAX_HOPS`] in a list.
    #[error("compact router header lists {0} hops, more than {MAX_HOPS}")]
    TooManyHops(u64),
    /// Bytes after the header.
    #[error("trailing bytes after compact router header")]
    Trailing,
    /// A malformed varint.
    #[error("compact router header: malformed varint")]
    BadVarint,
}

/// A routed message's header in binary form (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactRouterHeader {
    /// The origin.
    pub src: PeerId,
    /// The final destination.
    pub dest: PeerId,
    /// The destination's service (non-empty, no `/`).
    pub service: String,
    /// The destination's service param.
    pub param: Option<String>,
    /// The last hop (the origin until a relay forwards the message).
    pub last: PeerId,
    /// Forward hops still to go after the next one.
    pub forward: Vec<PeerId>,
    /// Reverse hops back to the origin (the relays passed, in order).
    pub reverse: Vec<PeerId>,
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CompactRouterError> {
        if n > self.b.len() {
            return Err(CompactRouterError::Truncated);
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, CompactRouterError> {
        Ok(self.take(1)?[0])
    }
    fn varint(&mut self) -> Result<u64, CompactRouterError> {
        match get_varint(self.b).map_err(|_| CompactRouterError::BadVarint)? {
            Some((v, n)) => {
                self.b = &self.b[n..];
                Ok(v)
            }
            None => Err(CompactRouterError::Truncated),
        }
    }
    fn peer(&mut self, what: &'static str) -> Result<PeerId, CompactRouterError> {
        let format = match self.u8()? {
            0 => IdFormat::Uuid,
            1 => IdFormat::Cbid,
            _ => return Err(CompactRouterError::NotAPeer(what)),
        };
        let mut bytes = [0u8; ID_LEN];
        bytes.copy_from_slice(self.take(ID_LEN)?);
        PeerId::try_from(JxtaId::Bytes { format, bytes })
            .map_err(|_| CompactRouterError::NotAPeer(what))
    }
    fn str(&mut self, what: &'static str) -> Result<String, CompactRouterError> {
        let n = self.varint()?;
        if n > MAX_SERVICE_LEN as u64 {
            return Err(CompactRouterError::BadString(what));
        }
        let b = self.take(n as usize)?;
        let s = std::str::from_utf8(b).map_err(|_| CompactRouterError::BadString(what))?;
        Ok(s.to_string())
    }
    fn hops(&mut self) -> Result<Vec<PeerId>, CompactRouterError> {
        let n = self.varint()?;
        if n > MAX_HOPS as u64 {
            return Err(CompactRouterError::TooManyHops(n));
        }
        // Bounded by MAX_HOPS, and each hop is checked against the input.
        let mut v = Vec::with_capacity(n as usize);
        for _ in 0..n {
            v.push(self.peer("hop")?);
        }
        Ok(v)
    }
}

fn put_peer(b: &mut BytesMut, p: &PeerId) {
    match p.id() {
        JxtaId::Bytes { format, bytes } => {
            b.put_u8(match format {
                IdFormat::Uuid => 0,
                IdFormat::Cbid => 1,
            });
            b.put_slice(bytes);
        }
        // A PeerId is always a byte ID of type 03; never reached.
        JxtaId::WellKnown(_) => {
            b.put_u8(0xff);
            b.put_slice(&[0u8; ID_LEN]);
        }
    }
}

fn put_str(b: &mut BytesMut, s: &str) {
    put_varint(b, s.len() as u64);
    b.put_slice(s.as_bytes());
}

impl CompactRouterHeader {
    /// The header of a message `src` originates for `dest`'s
    /// `service`/`param`, to go through `forward` after the first hop.
    pub fn originate(
        src: &PeerId,
        dest: &PeerId,
        service: &str,
        param: Option<&str>,
        forward: &[PeerId],
    ) -> CompactRouterHeader {
        CompactRouterHeader {
            src: *src,
            dest: *dest,
            service: service.to_string(),
            param: param.map(str::to_string),
            last: *src,
            forward: forward.to_vec(),
            reverse: Vec::new(),
        }
    }

    /// Whether [`CompactRouterHeader::parse`] accepts this header once
    /// encoded: service non-empty, without `/` and at most
    /// [`MAX_SERVICE_LEN`] bytes, param at most that long, at most
    /// [`MAX_HOPS`] hops each way. A sender uses the XML ERM otherwise.
    pub fn is_valid(&self) -> bool {
        !self.service.is_empty()
            && !self.service.contains('/')
            && self.service.len() <= MAX_SERVICE_LEN
            && self
                .param
                .as_ref()
                .is_none_or(|p| p.len() <= MAX_SERVICE_LEN)
            && self.forward.len() <= MAX_HOPS
            && self.reverse.len() <= MAX_HOPS
    }

    /// The element bytes.
    pub fn encode(&self) -> Bytes {
        self.encode_with(&self.last, &self.forward, None)
    }

    /// The element bytes of this header as `local` forwards it: `last` is
    /// `local`, `local` joins the reverse hops, the forward hops are
    /// `forward`. The same bytes as [`crate::endpoint::forward::forwarded_header`]
    /// then [`CompactRouterHeader::encode`], in one buffer and without
    /// copying the header (a relay does this for every message it passes
    /// on).
    ///
    /// ```
    /// use juxta_proto::endpoint::compact_router::CompactRouterHeader;
    /// use juxta_proto::id::PeerId;
    /// let (a, r, b) = (PeerId::from_public_key_spki(b"a"), PeerId::from_public_key_spki(b"r"), PeerId::from_public_key_spki(b"b"));
    /// let h = CompactRouterHeader::originate(&a, &b, "PipeService", None, &[]);
    /// let f = CompactRouterHeader::parse(&h.encode_forwarded(&r, &[])).unwrap();
    /// assert_eq!((f.last, f.reverse), (r, vec![r]));
    /// ```
    pub fn encode_forwarded(&self, local: &PeerId, forward: &[PeerId]) -> Bytes {
        self.encode_with(local, forward, Some(local))
    }

    /// The element bytes with `last`, `forward`, and the reverse hops
    /// followed by `and_back` if given.
    fn encode_with(&self, last: &PeerId, forward: &[PeerId], and_back: Option<&PeerId>) -> Bytes {
        let reverse_len = self.reverse.len() + usize::from(and_back.is_some());
        let mut b = BytesMut::with_capacity(
            1 + PEER_LEN * (3 + forward.len() + reverse_len)
                + self.service.len()
                + self.param.as_ref().map_or(0, String::len)
                + 8,
        );
        b.put_u8(VERSION);
        put_peer(&mut b, &self.src);
        put_peer(&mut b, &self.dest);
        put_peer(&mut b, last);
        put_str(&mut b, &self.service);
        match &self.param {
            Some(p) => {
                b.put_u8(1);
                put_str(&mut b, p);
            }
            None => b.put_u8(0),
        }
        put_varint(&mut b, forward.len() as u64);
        for p in forward {
            put_peer(&mut b, p);
        }
        put_varint(&mut b, reverse_len as u64);
        for p in self.reverse.iter().chain(and_back) {
            put_peer(&mut b, p);
        }
        b.freeze()
    }

    /// Parses the element bytes (lengths checked, nothing left over).
    pub fn parse(data: &[u8]) -> Result<CompactRouterHeader, CompactRouterError> {
        if data.len() > MAX_COMPACT_ERM_LEN {
            return Err(CompactRouterError::TooLarge(data.len()));
        }
        let mut r = Reader { b: data };
        let v = r.u8()?;
        if v != VERSION {
            return Err(CompactRouterError::Version(v));
        }
        let src = r.peer("Src")?;
        let dest = r.peer("Dest")?;
        let last = r.peer("Last")?;
        let service = r.str("service")?;
        if service.is_empty() || service.contains('/') {
            return Err(CompactRouterError::BadString("service"));
        }
        let param = match r.u8()? {
            0 => None,
            1 => Some(r.str("param")?),
            f => return Err(CompactRouterError::BadFlag(f)),
        };
        let forward = r.hops()?;
        let reverse = r.hops()?;
        if !r.b.is_empty() {
            return Err(CompactRouterError::Trailing);
        }
        Ok(CompactRouterHeader {
            src,
            dest,
            service,
            param,
            last,
            forward,
            reverse,
        })
    }

    /// The same header as JXSE's XML ERM (for a next hop that is not a
    /// compact Juxta connection).
    pub fn to_router_header(&self) -> RouterHeader {
        let hop = |p: &PeerId| Hop {
            pid: Some(p.to_string()),
            addresses: Vec::new(),
        };
        RouterHeader {
            src: EndpointAddress::peer(&self.src, None, None),
            dest: EndpointAddress::peer(&self.dest, Some(&self.service), self.param.as_deref()),
            last: EndpointAddress::peer(&self.last, None, None),
            forward: self.forward.iter().map(hop).collect(),
            reverse: self.reverse.iter().map(hop).collect(),
        }
    }

    /// An XML ERM in compact form, when every field it needs is a peer
    /// address or a hop with a peer ID and the destination names a
    /// service; `None` otherwise (the XML is then sent on as it is).
    pub fn from_router_header(h: &RouterHeader) -> Option<CompactRouterHeader> {
        let peers = |hops: &[Hop]| -> Option<Vec<PeerId>> {
            hops.iter()
                .map(|x| {
                    let pid = x.pid.as_deref()?;
                    pid.parse::<EndpointAddress>()
                        .ok()
                        .and_then(|a| a.peer_id())
                        .or_else(|| pid.parse::<PeerId>().ok())
                })
                .collect()
        };
        let service = h.dest.service.clone()?;
        if service.is_empty()
            || service.len() > MAX_SERVICE_LEN
            || h.dest
                .param
                .as_ref()
                .is_some_and(|p| p.len() > MAX_SERVICE_LEN)
            || h.forward.len() > MAX_HOPS
            || h.reverse.len() > MAX_HOPS
        {
            return None;
        }
        Some(CompactRouterHeader {
            src: h.src.peer_id()?,
            dest: h.dest.peer_id()?,
            service,
            param: h.dest.param.clone(),
            last: h.last.peer_id()?,
            forward: peers(&h.forward)?,
            reverse: peers(&h.reverse)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n])
    }

    fn sample() -> CompactRouterHeader {
        let mut h = CompactRouterHeader::originate(
            &p(1),
            &p(2),
            "PipeService",
            Some("urn:jxta:x/y"),
            &[p(3)],
        );
        h.reverse.push(p(4));
        h.last = p(4);
        h
    }

    #[test]
    fn round_trips_and_matches_the_xml_header() {
        let h = sample();
        let b = h.encode();
        assert_eq!(CompactRouterHeader::parse(&b).unwrap(), h);
        let xml = h.to_router_header();
        assert_eq!(xml.dest.service.as_deref(), Some("PipeService"));
        assert_eq!(xml.dest.param.as_deref(), Some("urn:jxta:x/y"));
        // Through XML text and back: the same header.
        let back = RouterHeader::parse(xml.to_xml().as_bytes()).unwrap();
        assert_eq!(
            CompactRouterHeader::from_router_header(&back),
            Some(h.clone())
        );
        let mut no_param = h;
        no_param.param = None;
        assert_eq!(
            CompactRouterHeader::parse(&no_param.encode()).unwrap(),
            no_param
        );
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert!(CompactRouterHeader::parse(&b[..n]).is_err(), "prefix {n}");
        }
        let mut longer = b.to_vec();
        longer.push(0);
        assert_eq!(
            CompactRouterHeader::parse(&longer),
            Err(CompactRouterError::Trailing)
        );
    }

    #[test]
    fn malformed_fields_get_typed_errors() {
        let b = sample().encode().to_vec();
        let mut v = b.clone();
        v[0] = 2;
        assert_eq!(
            CompactRouterHeader::parse(&v),
            Err(CompactRouterError::Version(2))
        );
        let mut v = b.clone();
        v[1] = 7;
        assert_eq!(
            CompactRouterHeader::parse(&v),
            Err(CompactRouterError::NotAPeer("Src"))
        );
        // The type byte of Dest (last byte of its 64) says pipe (04).
        let mut v = b.clone();
        v[1 + PEER_LEN + ID_LEN] = 4;
        assert_eq!(
            CompactRouterHeader::parse(&v),
            Err(CompactRouterError::NotAPeer("Dest"))
        );
        // A service with '/' (would change meaning as an address).
        assert!(sample().is_valid());
        let bad = CompactRouterHeader {
            service: "a/b".into(),
            ..sample()
        };
        assert!(!bad.is_valid());
        let long = CompactRouterHeader {
            param: Some("p".repeat(MAX_SERVICE_LEN + 1)),
            ..sample()
        };
        assert!(!long.is_valid());
        assert!(matches!(
            CompactRouterHeader::parse(&long.encode()),
            Err(CompactRouterError::BadString("param"))
        ));
        assert_eq!(
            CompactRouterHeader::parse(&bad.encode()),
            Err(CompactRouterError::BadString("service"))
        );
        // Too many hops announced: refused before reading them.
        let mut many = sample();
        many.forward = vec![p(9); MAX_HOPS + 1];
        assert!(matches!(
            CompactRouterHeader::parse(&many.encode()),
            Err(CompactRouterError::TooManyHops(_)) | Err(CompactRouterError::TooLarge(_))
        ));
        let mut v = Vec::new();
        v.push(VERSION);
        v.extend_from_slice(&b[1..1 + 3 * PEER_LEN]);
        v.extend_from_slice(&[0xff; 11]);
        assert_eq!(
            CompactRouterHeader::parse(&v),
            Err(CompactRouterError::BadVarint)
        );
        assert!(matches!(
            CompactRouterHeader::parse(&vec![1u8; MAX_COMPACT_ERM_LEN + 1]),
            Err(CompactRouterError::TooLarge(_))
        ));
    }

    #[test]
    fn xml_headers_without_peer_fields_stay_xml() {
        let h = RouterHeader::direct(
            "tcp://1.2.3.4:5".parse().unwrap(),
            EndpointAddress::peer(&p(2), Some("S"), None),
        );
        assert_eq!(CompactRouterHeader::from_router_header(&h), None);
        let h = RouterHeader::direct(
            EndpointAddress::peer(&p(1), None, None),
            EndpointAddress::peer(&p(2), None, None),
        );
        assert_eq!(CompactRouterHeader::from_router_header(&h), None);
    }
}
