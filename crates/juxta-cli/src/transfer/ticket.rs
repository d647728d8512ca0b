//! Tickets of `juxta send`: what a receiver needs to fetch the files (the
//! sender's peer ID, its addresses and the pipe of its server socket) as
//! one short copy-pasteable string.
//!
//! Encoding: `jx1` followed by unpadded URL-safe base64 of
//!
//! ```text
//! u8  version (2; 1 for tickets of older juxta versions)
//! 16  the peer ID's UUID (a cbid peer ID in the World group)
//! 16  the pipe ID's UUID (a cbid pipe ID in the Net group)
//! u64 version 2 only: expiry, seconds since 1970-01-01 UTC (big-endian,
//!     at most [`MAX_EXPIRES`], the end of year 9999)
//! u8  address count (1..=16), then per address:
//!     u8 4 + 4 bytes + u16 port, or u8 6 + 16 bytes + u16 port
//! 4   the first 4 bytes of SHA-256 over everything before
//! ```
//!
//! The checksum catches garbled or truncated tickets before anything is
//! dialled. The pipe ID is random (122 bits) and never published: it works
//! as the capability to fetch. The expiry is checked by the receiver before
//! dialling, as a convenience; it is not authenticated (anyone can re-encode
//! a ticket with another expiry), so the sender enforces the expiry it
//! issued on its own side.
//!
//! This file is self-contained (no `crate::` paths) so that tests can
//! include it to build hostile senders.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use base64::Engine as _;
use juxta_proto::id::{
    IdFormat, IdType, JxtaId, PeerId, PipeId, NET_GROUP_UUID as NET, WORLD_GROUP_UUID as WORLD,
};
use sha2::{Digest, Sha256};

/// The text every ticket starts with.
pub const PREFIX: &str = "jx1";
/// Most addresses a ticket carries.
pub const MAX_ADDRS: usize = 16;
/// Longest ticket text accepted (far above the 16-address maximum).
pub const MAX_TEXT: usize = 1024;
/// The version written for a ticket with an expiry.
pub const VERSION: u8 = 2;
/// The version of tickets without expiry (older juxta; still read).
pub const VERSION_NO_EXPIRY: u8 = 1;
/// Latest expiry a ticket may carry: 9999-12-31T23:59:59Z, in seconds
/// since the epoch (anything later is garbage, and far from overflowing
/// [`std::time::SystemTime`]).
pub const MAX_EXPIRES: u64 = 253_402_300_799;

/// What a ticket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The sending peer.
    pub peer: PeerId,
    /// The pipe of the sender's server socket.
    pub pipe: PipeId,
    /// Where the sender listens, in the order to try.
    pub addrs: Vec<SocketAddr>,
    /// When the ticket expires, in seconds since 1970-01-01 UTC; `None`
    /// for a version 1 ticket (no expiry).
    pub expires: Option<u64>,
}

/// Why a ticket could not be read or written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TicketError {
    /// Not starting with `jx1`.
    #[error("not a juxta ticket (tickets start with {PREFIX:?})")]
    Prefix,
    /// Too long to be a ticket.
    #[error("ticket of {0} characters is too long")]
    TooLong(usize),
    /// Not base64.
    #[error("ticket is garbled (not base64)")]
    Encoding,
    /// The checksum does not match: a character was changed, dropped or
    /// added.
    #[error("ticket is garbled (checksum mismatch); copy it again")]
    Checksum,
    /// Too short, or bytes left over.
    #[error("ticket is garbled ({0})")]
    Malformed(&'static str),
    /// A ticket of a newer format.
    #[error("ticket version {0} is not supported (this juxta reads versions {VERSION_NO_EXPIRY} and {VERSION})")]
    Version(u8),
    /// An ID a ticket cannot carry.
    #[error("{0} cannot be put in a ticket (not a cbid ID of the usual group)")]
    Unencodable(String),
    /// No address, or too many.
    #[error("a ticket carries 1 to {MAX_ADDRS} addresses, not {0}")]
    AddrCount(usize),
    /// An expiry beyond [`MAX_EXPIRES`].
    #[error("ticket is garbled (expiry {0} is past the year 9999)")]
    Expiry(u64),
}

fn uuid_of(id: &JxtaId, group: &[u8; 16], ty: IdType) -> Result<[u8; 16], TicketError> {
    let bytes = id
        .as_bytes()
        .ok_or_else(|| TicketError::Unencodable(id.to_string()))?;
    let plain = matches!(
        id,
        JxtaId::Bytes {
            format: IdFormat::Cbid,
            ..
        }
    ) && &bytes[..16] == group
        && bytes[32..63].iter().all(|b| *b == 0)
        && id.id_type() == ty;
    if !plain {
        return Err(TicketError::Unencodable(id.to_string()));
    }
    let mut u = [0u8; 16];
    u.copy_from_slice(&bytes[16..32]);
    Ok(u)
}

impl Ticket {
    /// The ticket as text.
    ///
    /// Version 2 with an expiry, version 1 without.
    ///
    /// ```ignore
    /// let t = Ticket { peer, pipe, addrs: vec!["127.0.0.1:9701".parse()?], expires: Some(1_900_000_000) };
    /// assert_eq!(Ticket::parse(&t.encode()?)?, t);
    /// ```
    pub fn encode(&self) -> Result<String, TicketError> {
        if self.addrs.is_empty() || self.addrs.len() > MAX_ADDRS {
            return Err(TicketError::AddrCount(self.addrs.len()));
        }
        let mut b = Vec::with_capacity(72);
        b.push(if self.expires.is_some() {
            VERSION
        } else {
            VERSION_NO_EXPIRY
        });
        b.extend_from_slice(&uuid_of(self.peer.id(), &WORLD, IdType::Peer)?);
        b.extend_from_slice(&uuid_of(self.pipe.id(), &NET, IdType::Pipe)?);
        if let Some(e) = self.expires {
            if e > MAX_EXPIRES {
                return Err(TicketError::Expiry(e));
            }
            b.extend_from_slice(&e.to_be_bytes());
        }
        b.push(self.addrs.len() as u8);
        for a in &self.addrs {
            match a.ip() {
                IpAddr::V4(ip) => {
                    b.push(4);
                    b.extend_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    b.push(6);
                    b.extend_from_slice(&ip.octets());
                }
            }
            b.extend_from_slice(&a.port().to_be_bytes());
        }
        let sum = Sha256::digest(&b);
        b.extend_from_slice(&sum[..4]);
        Ok(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&b)
        ))
    }

    /// Reads a ticket (surrounding white space is ignored).
    pub fn parse(text: &str) -> Result<Ticket, TicketError> {
        let text = text.trim();
        if text.len() > MAX_TEXT {
            return Err(TicketError::TooLong(text.len()));
        }
        let body = text.strip_prefix(PREFIX).ok_or(TicketError::Prefix)?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| TicketError::Encoding)?;
        if raw.len() < 5 {
            return Err(TicketError::Malformed("too short"));
        }
        let (data, sum) = raw.split_at(raw.len() - 4);
        if Sha256::digest(data)[..4] != *sum {
            return Err(TicketError::Checksum);
        }
        let mut r = Reader(data);
        let v = r.u8()?;
        if v != VERSION && v != VERSION_NO_EXPIRY {
            return Err(TicketError::Version(v));
        }
        let peer = r.array16()?;
        let pipe = r.array16()?;
        let expires = if v == VERSION {
            let mut e = [0u8; 8];
            e.copy_from_slice(r.take(8)?);
            let e = u64::from_be_bytes(e);
            if e > MAX_EXPIRES {
                return Err(TicketError::Expiry(e));
            }
            Some(e)
        } else {
            None
        };
        let n = r.u8()? as usize;
        if n == 0 || n > MAX_ADDRS {
            return Err(TicketError::AddrCount(n));
        }
        let mut addrs = Vec::with_capacity(n);
        for _ in 0..n {
            let ip = match r.u8()? {
                4 => {
                    let mut o = [0u8; 4];
                    o.copy_from_slice(r.take(4)?);
                    IpAddr::V4(Ipv4Addr::from(o))
                }
                6 => IpAddr::V6(Ipv6Addr::from(r.array16()?)),
                _ => return Err(TicketError::Malformed("unknown address family")),
            };
            let port = u16::from_be_bytes([r.u8()?, r.u8()?]);
            addrs.push(SocketAddr::new(ip, port));
        }
        if !r.0.is_empty() {
            return Err(TicketError::Malformed("bytes left over"));
        }
        let peer = PeerId::try_from(JxtaId::from_parts(
            IdFormat::Cbid,
            WORLD,
            peer,
            IdType::Peer,
        ))
        .map_err(|_| TicketError::Malformed("peer ID"))?;
        let pipe = PipeId::try_from(JxtaId::from_parts(IdFormat::Cbid, NET, pipe, IdType::Pipe))
            .map_err(|_| TicketError::Malformed("pipe ID"))?;
        Ok(Ticket {
            peer,
            pipe,
            addrs,
            expires,
        })
    }

    /// Whether the ticket has expired at `now` (seconds since the epoch);
    /// a ticket without expiry never has.
    pub fn expired_at(&self, now: u64) -> bool {
        self.expires.is_some_and(|e| now >= e)
    }
}

/// Seconds since 1970-01-01 UTC now (0 for a clock before 1970).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TicketError> {
        if self.0.len() < n {
            return Err(TicketError::Malformed("too short"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, TicketError> {
        Ok(self.take(1)?[0])
    }
    fn array16(&mut self) -> Result<[u8; 16], TicketError> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16)?);
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ticket {
        let spki = b"not really a key, but any bytes derive a peer id";
        Ticket {
            peer: PeerId::from_public_key_spki(spki),
            pipe: PipeId::new_random(),
            addrs: vec![
                "127.0.0.1:9701".parse().unwrap(),
                "[::1]:40000".parse().unwrap(),
            ],
            expires: Some(1_900_000_000),
        }
    }

    /// A ticket's bytes with a fresh checksum (what an attacker can make).
    fn forge(data: &[u8]) -> String {
        let mut b = data.to_vec();
        let sum = Sha256::digest(&b);
        b.extend_from_slice(&sum[..4]);
        format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&b)
        )
    }

    fn raw(s: &str) -> Vec<u8> {
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&s[PREFIX.len()..])
            .unwrap();
        b[..b.len() - 4].to_vec()
    }

    #[test]
    fn expiry_round_trip_and_bounds() {
        let t = sample();
        assert!(!t.expired_at(1_899_999_999));
        assert!(t.expired_at(1_900_000_000));
        assert!(t.expired_at(u64::MAX));
        // Version 1 (no expiry) still reads, and never expires.
        let old = Ticket {
            expires: None,
            ..sample()
        };
        let s = old.encode().unwrap();
        assert_eq!(raw(&s)[0], VERSION_NO_EXPIRY);
        assert_eq!(Ticket::parse(&s).unwrap(), old);
        assert!(!old.expired_at(u64::MAX));
        // Absurd expiries: refused when writing and when reading.
        let far = Ticket {
            expires: Some(MAX_EXPIRES + 1),
            ..sample()
        };
        assert_eq!(
            far.encode().unwrap_err(),
            TicketError::Expiry(MAX_EXPIRES + 1)
        );
        let mut b = raw(&t.encode().unwrap());
        b[33..41].copy_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(
            Ticket::parse(&forge(&b)).unwrap_err(),
            TicketError::Expiry(u64::MAX)
        );
        b[33..41].copy_from_slice(&MAX_EXPIRES.to_be_bytes());
        assert_eq!(
            Ticket::parse(&forge(&b)).unwrap().expires,
            Some(MAX_EXPIRES)
        );
        b[33..41].copy_from_slice(&0u64.to_be_bytes());
        assert!(Ticket::parse(&forge(&b)).unwrap().expired_at(unix_now()));
        // A version 2 ticket cut inside its expiry, an unknown version.
        assert_eq!(
            Ticket::parse(&forge(&b[..37])).unwrap_err(),
            TicketError::Malformed("too short")
        );
        b[0] = 3;
        assert_eq!(
            Ticket::parse(&forge(&b)).unwrap_err(),
            TicketError::Version(3)
        );
    }

    #[test]
    fn garbage_never_panics() {
        use rand::{Rng, RngCore, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(15);
        let good = raw(&sample().encode().unwrap());
        for i in 0..20_000 {
            let mut b = if i % 2 == 0 {
                good.clone()
            } else {
                let mut v = vec![0u8; rng.gen_range(0..120)];
                rng.fill_bytes(&mut v);
                v
            };
            if !b.is_empty() {
                let k = rng.gen_range(0..b.len());
                b[k] = rng.gen();
                b.truncate(rng.gen_range(0..=b.len()));
            }
            let _ = Ticket::parse(&forge(&b));
        }
    }

    #[test]
    fn round_trip() {
        let t = sample();
        let s = t.encode().unwrap();
        assert!(s.starts_with(PREFIX));
        assert!(s.len() < 100, "{s}");
        assert_eq!(Ticket::parse(&s).unwrap(), t);
        assert_eq!(Ticket::parse(&format!("  {s}\n")).unwrap(), t);
    }

    #[test]
    fn garbled_is_detected() {
        let s = sample().encode().unwrap();
        // Every single-character change is caught.
        for i in PREFIX.len()..s.len() {
            let mut b = s.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let g = String::from_utf8(b).unwrap();
            assert!(Ticket::parse(&g).is_err(), "{g}");
        }
        // Truncated: the base64 tail or the checksum gives it away.
        for cut in 1..8 {
            assert!(matches!(
                Ticket::parse(&s[..s.len() - cut]).unwrap_err(),
                TicketError::Checksum | TicketError::Encoding | TicketError::Malformed(_)
            ));
        }
        assert_eq!(Ticket::parse("hello").unwrap_err(), TicketError::Prefix);
        assert_eq!(Ticket::parse("jx1!!").unwrap_err(), TicketError::Encoding);
        assert!(matches!(
            Ticket::parse(&"jx1".repeat(400)).unwrap_err(),
            TicketError::TooLong(_)
        ));
    }

    #[test]
    fn address_count_is_bounded() {
        let mut t = sample();
        t.addrs.clear();
        assert_eq!(t.encode().unwrap_err(), TicketError::AddrCount(0));
        t.addrs = vec!["127.0.0.1:1".parse().unwrap(); MAX_ADDRS + 1];
        assert!(t.encode().is_err());
    }
}
