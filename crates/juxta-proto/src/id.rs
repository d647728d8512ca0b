//! JXTA IDs: the `urn:jxta:` URNs that name peers, groups, pipes and modules.
//!
//! JXSE 2.7 writes IDs in two byte-compatible formats, `uuid` and `cbid` (the
//! default), plus the literal `jxta` format for the well-known groups. A
//! `uuid`/`cbid` ID is a 64-byte array whose last byte is the type; its text
//! form trims trailing zero bytes of the body, so IDs are always compared as
//! parsed bytes and always printed canonically (upper-case hex). See the
//! protocol digest, section 1.

use std::fmt;
use std::str::FromStr;

use rand::RngCore;

/// Bytes in a `uuid`/`cbid` ID.
pub const ID_LEN: usize = 64;

/// The World group's UUID as it appears inside IDs (`59616261646162614A78746150325033`).
pub const WORLD_GROUP_UUID: [u8; 16] = *b"YabadabaJxtaP2P3";
/// The Net group's UUID as it appears inside IDs (`59616261646162614E50472050325033`).
pub const NET_GROUP_UUID: [u8; 16] = *b"YabadabaNPG P2P3";

/// Errors from parsing an ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The text does not start with `urn:jxta:`.
    #[error("not a JXTA URN (expected `urn:jxta:`): {0:?}")]
    NotJxtaUrn(String),
    /// The format part (`uuid`, `cbid`, `jxta`) is not known.
    #[error("unknown ID format {0:?}")]
    UnknownFormat(String),
    /// The hex payload is malformed (odd length, too long, not hex, empty).
    #[error("malformed ID payload: {0}")]
    BadPayload(&'static str),
    /// A `jxta-` ID that is not one of the well-known IDs.
    #[error("unknown well-known ID {0:?}")]
    UnknownWellKnown(String),
    /// The ID is valid but of another type than required.
    #[error("wrong ID type: expected {expected:?}, found {found:?}")]
    WrongType {
        /// The type the caller asked for.
        expected: IdType,
        /// The type the ID has.
        found: IdType,
    },
}

/// The format of a byte-array ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdFormat {
    /// `urn:jxta:uuid-…`
    Uuid,
    /// `urn:jxta:cbid-…` (JXSE 2.7's default; same layout as uuid)
    Cbid,
}

impl IdFormat {
    fn name(self) -> &'static str {
        match self {
            IdFormat::Uuid => "uuid",
            IdFormat::Cbid => "cbid",
        }
    }
}

/// The type byte of an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdType {
    /// Codat (content) ID, type 01.
    Codat,
    /// Peer group ID, type 02.
    PeerGroup,
    /// Peer ID, type 03.
    Peer,
    /// Pipe ID, type 04.
    Pipe,
    /// Module class ID, type 05.
    ModuleClass,
    /// Module spec ID, type 06.
    ModuleSpec,
    /// Content ID, type 07.
    Content,
    /// Any other type byte.
    Other(u8),
}

impl IdType {
    /// The type byte written at offset 63.
    pub fn byte(self) -> u8 {
        match self {
            IdType::Codat => 1,
            IdType::PeerGroup => 2,
            IdType::Peer => 3,
            IdType::Pipe => 4,
            IdType::ModuleClass => 5,
            IdType::ModuleSpec => 6,
            IdType::Content => 7,
            IdType::Other(b) => b,
        }
    }
    /// The type for a type byte.
    pub fn from_byte(b: u8) -> IdType {
        match b {
            1 => IdType::Codat,
            2 => IdType::PeerGroup,
            3 => IdType::Peer,
            4 => IdType::Pipe,
            5 => IdType::ModuleClass,
            6 => IdType::ModuleSpec,
            7 => IdType::Content,
            b => IdType::Other(b),
        }
    }
}

/// One of the literal `urn:jxta:jxta-*` IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WellKnown {
    /// `urn:jxta:jxta-WorldGroup`
    WorldGroup,
    /// `urn:jxta:jxta-NetGroup`
    NetGroup,
    /// `urn:jxta:jxta-Null`
    Null,
}

impl WellKnown {
    fn unique(self) -> &'static str {
        match self {
            WellKnown::WorldGroup => "jxta-WorldGroup",
            WellKnown::NetGroup => "jxta-NetGroup",
            WellKnown::Null => "jxta-Null",
        }
    }
}

/// Any JXTA ID.
///
/// ```
/// use juxta_proto::id::{JxtaId, IdType};
/// let id: JxtaId = "urn:jxta:cbid-59616261646162614a78746150325033ab03".parse().unwrap();
/// assert_eq!(id.id_type(), IdType::Peer);
/// assert_eq!(id.to_string(), "urn:jxta:cbid-59616261646162614A78746150325033AB03");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum JxtaId {
    /// A 64-byte `uuid` or `cbid` ID.
    Bytes {
        /// uuid or cbid
        format: IdFormat,
        /// the 64 bytes; byte 63 is the type
        bytes: [u8; ID_LEN],
    },
    /// A literal well-known ID.
    WellKnown(WellKnown),
}

impl JxtaId {
    /// The World group ID.
    pub const WORLD_GROUP: JxtaId = JxtaId::WellKnown(WellKnown::WorldGroup);
    /// The Net group ID.
    pub const NET_GROUP: JxtaId = JxtaId::WellKnown(WellKnown::NetGroup);
    /// The null ID.
    pub const NULL: JxtaId = JxtaId::WellKnown(WellKnown::Null);

    /// Builds a byte ID from a 16-byte group UUID, a 16-byte second UUID and a type.
    pub fn from_parts(format: IdFormat, first: [u8; 16], second: [u8; 16], ty: IdType) -> JxtaId {
        let mut bytes = [0u8; ID_LEN];
        bytes[..16].copy_from_slice(&first);
        bytes[16..32].copy_from_slice(&second);
        bytes[63] = ty.byte();
        JxtaId::Bytes { format, bytes }
    }

    /// A new random ID of type `ty` in the given group UUID (v4 UUID with
    /// JXSE's multicast bit), in `cbid` format.
    pub fn random_in(group_uuid: [u8; 16], ty: IdType, rng: &mut dyn RngCore) -> JxtaId {
        let mut u = [0u8; 16];
        rng.fill_bytes(&mut u);
        u[6] = (u[6] & 0x0f) | 0x40;
        u[8] = (u[8] & 0x3f) | 0x80;
        u[10] |= 0x80;
        JxtaId::from_parts(IdFormat::Cbid, group_uuid, u, ty)
    }

    /// The ID's type.
    pub fn id_type(&self) -> IdType {
        match self {
            JxtaId::Bytes { bytes, .. } => IdType::from_byte(bytes[63]),
            JxtaId::WellKnown(WellKnown::Null) => IdType::Other(0),
            JxtaId::WellKnown(_) => IdType::PeerGroup,
        }
    }

    /// The 64 bytes of a `uuid`/`cbid` ID.
    pub fn as_bytes(&self) -> Option<&[u8; ID_LEN]> {
        match self {
            JxtaId::Bytes { bytes, .. } => Some(bytes),
            JxtaId::WellKnown(_) => None,
        }
    }

    /// The part after `urn:jxta:`, e.g. `cbid-5961…03`. It names the peer in
    /// `jxta://` endpoint addresses.
    pub fn unique_value(&self) -> String {
        match self {
            JxtaId::WellKnown(w) => w.unique().to_string(),
            JxtaId::Bytes { format, bytes } => {
                let last = (1..63).rev().find(|&i| bytes[i] != 0).unwrap_or(0);
                let mut s = String::with_capacity(5 + 2 * (last + 2));
                s.push_str(format.name());
                s.push('-');
                push_hex_upper(&mut s, &bytes[..=last]);
                push_hex_upper(&mut s, &bytes[63..]);
                s
            }
        }
    }

    /// The unique value as a [`UniqueKey`]: sorts as [`JxtaId::unique_value`]
    /// does, without building the string.
    pub fn unique_key(&self) -> UniqueKey {
        match self {
            JxtaId::WellKnown(w) => UniqueKey(KeyRepr::Text(w.unique())),
            JxtaId::Bytes { format, bytes } => {
                let last = (1..63).rev().find(|&i| bytes[i] != 0).unwrap_or(0);
                let mut seq = [0u8; ID_LEN];
                seq[..=last].copy_from_slice(&bytes[..=last]);
                seq[last + 1] = bytes[63];
                UniqueKey(KeyRepr::Bytes {
                    format: *format,
                    // At most 64: `last` < 63.
                    len: (last + 2) as u8,
                    seq,
                })
            }
        }
    }

    /// Parses the unique value (`cbid-…`, `uuid-…`, `jxta-NetGroup`).
    pub fn from_unique_value(s: &str) -> Result<JxtaId, IdError> {
        let (fmt, payload) = s
            .split_once('-')
            .ok_or_else(|| IdError::UnknownFormat(s.to_string()))?;
        let format = match fmt {
            "uuid" => IdFormat::Uuid,
            "cbid" => IdFormat::Cbid,
            "jxta" => {
                return match payload {
                    "WorldGroup" => Ok(JxtaId::WORLD_GROUP),
                    "NetGroup" => Ok(JxtaId::NET_GROUP),
                    "Null" => Ok(JxtaId::NULL),
                    _ => Err(IdError::UnknownWellKnown(s.to_string())),
                }
            }
            other => return Err(IdError::UnknownFormat(other.to_string())),
        };
        if payload.len() < 2 {
            return Err(IdError::BadPayload("shorter than the type byte"));
        }
        if payload.len() % 2 != 0 {
            return Err(IdError::BadPayload("odd number of hex digits"));
        }
        if payload.len() > 2 * ID_LEN {
            return Err(IdError::BadPayload("longer than 64 bytes"));
        }
        // Decoded on the stack: every ID in every document a peer sends
        // is read through here.
        let mut buf = [0u8; ID_LEN];
        for (b, pair) in buf.iter_mut().zip(payload.as_bytes().chunks_exact(2)) {
            *b = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
        }
        let raw = &buf[..payload.len() / 2];
        let mut bytes = [0u8; ID_LEN];
        let (body, ty) = raw.split_at(raw.len() - 1);
        bytes[..body.len()].copy_from_slice(body);
        bytes[63] = ty[0];
        Ok(JxtaId::Bytes { format, bytes })
    }

    /// The group this ID belongs to (bytes 0..16 of peer, pipe and group IDs),
    /// translated back to the well-known IDs.
    pub fn group_part(&self) -> Option<JxtaId> {
        let bytes = self.as_bytes()?;
        let mut g = [0u8; 16];
        g.copy_from_slice(&bytes[..16]);
        Some(match g {
            WORLD_GROUP_UUID => JxtaId::WORLD_GROUP,
            NET_GROUP_UUID => JxtaId::NET_GROUP,
            _ => JxtaId::from_parts(IdFormat::Uuid, g, [0; 16], IdType::PeerGroup),
        })
    }

    fn expect(self, ty: IdType) -> Result<JxtaId, IdError> {
        let found = self.id_type();
        if found == ty {
            Ok(self)
        } else {
            Err(IdError::WrongType {
                expected: ty,
                found,
            })
        }
    }
}

impl fmt::Display for JxtaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "urn:jxta:{}", self.unique_value())
    }
}

impl fmt::Debug for JxtaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for JxtaId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<JxtaId, IdError> {
        let rest = s
            .get(..9)
            .filter(|p| p.eq_ignore_ascii_case("urn:jxta:"))
            .map(|_| &s[9..])
            .ok_or_else(|| IdError::NotJxtaUrn(s.chars().take(80).collect()))?;
        JxtaId::from_unique_value(rest)
    }
}

/// An ID's unique value (`cbid-…`) in a form that compares exactly as the
/// string [`JxtaId::unique_value`] does, but is built and compared without
/// allocating: the bytes the string spells in hex (the ID's bytes up to the
/// last non-zero one of 1..63, then the type byte). Hex digits sort as the
/// nibbles they spell, so comparing these bytes compares the strings; the
/// format name (`cbid` < `uuid`) comes first as in the string. Peer views
/// key their members by it (JXSE sorts its peer view by this string).
///
/// ```
/// use juxta_proto::id::JxtaId;
/// let a: JxtaId = "urn:jxta:cbid-59616261646162614A78746150325033AB03".parse().unwrap();
/// let b: JxtaId = "urn:jxta:cbid-5961626164616261AB03".parse().unwrap();
/// assert_eq!(a.unique_key() < b.unique_key(), a.unique_value() < b.unique_value());
/// assert_eq!(a.unique_key().to_string(), a.unique_value());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UniqueKey(KeyRepr);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum KeyRepr {
    /// A `uuid`/`cbid` ID: `seq[..len]` is what the string spells in hex
    /// (the rest is zero, so equal keys are equal structs).
    Bytes {
        format: IdFormat,
        len: u8,
        seq: [u8; ID_LEN],
    },
    /// A well-known ID (`jxta-NetGroup`).
    Text(&'static str),
}

impl UniqueKey {
    fn text(&self) -> std::borrow::Cow<'static, str> {
        match &self.0 {
            KeyRepr::Text(t) => std::borrow::Cow::Borrowed(t),
            KeyRepr::Bytes { format, len, seq } => {
                let mut s = String::with_capacity(5 + 2 * usize::from(*len));
                s.push_str(format.name());
                s.push('-');
                push_hex_upper(&mut s, &seq[..usize::from(*len)]);
                std::borrow::Cow::Owned(s)
            }
        }
    }
}

impl Ord for UniqueKey {
    fn cmp(&self, other: &UniqueKey) -> std::cmp::Ordering {
        match (&self.0, &other.0) {
            (
                KeyRepr::Bytes {
                    format: fa,
                    len: la,
                    seq: sa,
                },
                KeyRepr::Bytes {
                    format: fb,
                    len: lb,
                    seq: sb,
                },
            ) => fa.name().cmp(fb.name()).then_with(|| {
                let (la, lb) = (usize::from(*la), usize::from(*lb));
                if la >= 32 && lb >= 32 {
                    // The first 32 bytes (both have them) as two big-endian
                    // integers: the same order as comparing the bytes, in
                    // two instructions instead of a call (peer views do
                    // this millions of times).
                    let w = |s: &[u8; ID_LEN], i: usize| {
                        let mut b = [0u8; 16];
                        b.copy_from_slice(&s[i..i + 16]);
                        u128::from_be_bytes(b)
                    };
                    w(sa, 0)
                        .cmp(&w(sb, 0))
                        .then_with(|| w(sa, 16).cmp(&w(sb, 16)))
                        .then_with(|| sa[32..la].cmp(&sb[32..lb]))
                } else {
                    sa[..la].cmp(&sb[..lb])
                }
            }),
            // A well-known ID on either side: compare the strings (rare).
            _ => self.text().cmp(&other.text()),
        }
    }
}

impl PartialOrd for UniqueKey {
    fn partial_cmp(&self, other: &UniqueKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for UniqueKey {
    /// The unique value string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident, $ty:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(JxtaId);

        impl $name {
            /// The untyped ID.
            pub fn id(&self) -> &JxtaId {
                &self.0
            }
            /// The unique value (`cbid-…`).
            pub fn unique_value(&self) -> String {
                self.0.unique_value()
            }
            /// The unique value as a sort key ([`UniqueKey`]).
            pub fn unique_key(&self) -> UniqueKey {
                self.0.unique_key()
            }
        }

        impl TryFrom<JxtaId> for $name {
            type Error = IdError;
            fn try_from(id: JxtaId) -> Result<Self, IdError> {
                id.expect($ty).map($name)
            }
        }

        impl From<$name> for JxtaId {
            fn from(id: $name) -> JxtaId {
                id.0
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                s.parse::<JxtaId>()?.try_into()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

typed_id!(
    /// A peer ID (type 03).
    PeerId,
    IdType::Peer
);
typed_id!(
    /// A pipe ID (type 04).
    PipeId,
    IdType::Pipe
);
typed_id!(
    /// A module class ID (type 05).
    ModuleClassId,
    IdType::ModuleClass
);
typed_id!(
    /// A module spec ID (type 06).
    ModuleSpecId,
    IdType::ModuleSpec
);
typed_id!(
    /// A peer group ID (type 02, or the well-known World and Net groups).
    PeerGroupId,
    IdType::PeerGroup
);

/// Builds the hashers of maps keyed by IDs ([`PeerMap`]), and by the
/// addresses and values peers name on the message paths: aHash with keys
/// drawn at random once per process.
///
/// Why not the standard `RandomState` (SipHash-1-3): a peer ID is 64
/// bytes, and SipHash over it cost about 480 instructions per lookup, five
/// lookups for every message a relay passes on (its connections, leases
/// and queues). aHash takes a fraction of that and, keyed at random, keeps
/// what SipHash was chosen for: a peer that picks IDs (a router header
/// names any) cannot predict which ones collide.
#[derive(Clone, Debug)]
pub struct IdHashState(ahash::RandomState);

impl Default for IdHashState {
    fn default() -> IdHashState {
        static SEEDS: std::sync::OnceLock<[u64; 4]> = std::sync::OnceLock::new();
        let k = SEEDS.get_or_init(|| {
            let mut rng = rand::rngs::OsRng;
            [
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64(),
            ]
        });
        IdHashState(ahash::RandomState::with_seeds(k[0], k[1], k[2], k[3]))
    }
}

impl std::hash::BuildHasher for IdHashState {
    type Hasher = ahash::AHasher;
    fn build_hasher(&self) -> ahash::AHasher {
        self.0.build_hasher()
    }
}

/// A hash map keyed by peer ID, with [`IdHashState`].
///
/// ```
/// use juxta_proto::id::{PeerId, PeerMap};
/// let mut m: PeerMap<u32> = PeerMap::default();
/// m.insert(PeerId::from_public_key_spki(b"k"), 1);
/// assert_eq!(m.get(&PeerId::from_public_key_spki(b"k")), Some(&1));
/// ```
pub type PeerMap<V> = std::collections::HashMap<PeerId, V, IdHashState>;

impl PeerId {
    /// The peer ID JXSE 2.7 derives from a public key: `cbid`, group = World,
    /// peer UUID = the first 16 bytes of SHA-1 over the DER SubjectPublicKeyInfo.
    pub fn from_public_key_spki(spki_der: &[u8]) -> PeerId {
        use sha1::{Digest, Sha1};
        let digest = Sha1::digest(spki_der);
        let mut u = [0u8; 16];
        u.copy_from_slice(&digest[..16]);
        PeerId(JxtaId::from_parts(
            IdFormat::Cbid,
            WORLD_GROUP_UUID,
            u,
            IdType::Peer,
        ))
    }

    /// Whether this is a `cbid` ID: one that claims to be derived from a
    /// public key (and so can be proven by that key). JXSE also lets users
    /// set `uuid` peer IDs, which no key derives.
    pub fn is_cbid(&self) -> bool {
        matches!(
            self.0,
            JxtaId::Bytes {
                format: IdFormat::Cbid,
                ..
            }
        )
    }

    /// `jxta://<unique>`, the endpoint address of this peer.
    pub fn endpoint_address(&self) -> String {
        format!("jxta://{}", self.0.unique_value())
    }
}

impl PipeId {
    /// A new random pipe ID in the Net group, from the caller's RNG (for
    /// reproducible IDs in tests; [`PipeId::new_random`] needs none).
    pub fn random(rng: &mut dyn RngCore) -> PipeId {
        PipeId(JxtaId::random_in(NET_GROUP_UUID, IdType::Pipe, rng))
    }

    /// A new random pipe ID in the Net group, from the operating system's
    /// random source (no RNG to pass, no `rand` version tied to the
    /// caller).
    ///
    /// ```
    /// use juxta_proto::id::PipeId;
    /// let a = PipeId::new_random();
    /// assert_ne!(a, PipeId::new_random());
    /// assert!(a.to_string().starts_with("urn:jxta:cbid-"));
    /// ```
    pub fn new_random() -> PipeId {
        PipeId::random(&mut rand::rngs::OsRng)
    }
}

impl PeerGroupId {
    /// The World group.
    pub const WORLD: PeerGroupId = PeerGroupId(JxtaId::WORLD_GROUP);
    /// The Net group.
    pub const NET: PeerGroupId = PeerGroupId(JxtaId::NET_GROUP);
}

impl ModuleClassId {
    /// A reference module class ID `urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000xx05`.
    pub fn reference(xx: u8) -> ModuleClassId {
        let mut c = [0u8; 16];
        c[..12].copy_from_slice(&[
            0xDE, 0xAD, 0xBE, 0xEF, 0xDE, 0xAF, 0xBA, 0xBA, 0xFE, 0xED, 0xBA, 0xBE,
        ]);
        c[15] = xx;
        ModuleClassId(JxtaId::from_parts(
            IdFormat::Uuid,
            c,
            [0; 16],
            IdType::ModuleClass,
        ))
    }
}

/// Appends `bytes` in upper-case hexadecimal, without a temporary string.
fn push_hex_upper(s: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
}

/// The value of one hexadecimal digit (either case).
fn hex_digit(c: u8) -> Result<u8, IdError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(IdError::BadPayload("not hexadecimal")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_format_round_trip_canonical_upper_case() {
        let s = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";
        let id: JxtaId = s.parse().unwrap();
        assert_eq!(id.to_string(), s);
        let lower: JxtaId = s
            .to_lowercase()
            .replace("URN:JXTA", "urn:jxta")
            .parse()
            .unwrap();
        assert_eq!(lower, id);
        let mixed: JxtaId =
            "URN:Jxta:cbid-59616261646162614a78746150325033d9d9238ec0eefcb122cb5d3dfe39a9cc03"
                .parse()
                .unwrap();
        assert_eq!(mixed.to_string(), s);
        let peer: PeerId = s.parse().unwrap();
        assert_eq!(peer.id().group_part(), Some(JxtaId::WORLD_GROUP));
    }

    #[test]
    fn trimming_keeps_one_byte_and_type() {
        let id = JxtaId::from_parts(IdFormat::Uuid, [0; 16], [0; 16], IdType::Pipe);
        assert_eq!(id.to_string(), "urn:jxta:uuid-0004");
        assert_eq!("urn:jxta:uuid-0004".parse::<JxtaId>().unwrap(), id);
        // Explicit trailing zeros parse to the same bytes and print trimmed.
        let long: JxtaId = "urn:jxta:uuid-AB000004".parse().unwrap();
        assert_eq!(long.to_string(), "urn:jxta:uuid-AB04");
    }

    #[test]
    fn well_known_ids() {
        assert_eq!(
            "urn:jxta:jxta-NetGroup".parse::<JxtaId>().unwrap(),
            JxtaId::NET_GROUP
        );
        assert_eq!(JxtaId::WORLD_GROUP.to_string(), "urn:jxta:jxta-WorldGroup");
        assert!(matches!(
            "urn:jxta:jxta-Other".parse::<JxtaId>(),
            Err(IdError::UnknownWellKnown(_))
        ));
        let pg: PeerGroupId = "urn:jxta:jxta-NetGroup".parse().unwrap();
        assert_eq!(pg, PeerGroupId::NET);
        assert_eq!(
            ModuleClassId::reference(0x02).to_string(),
            "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000205"
        );
    }

    #[test]
    fn typed_errors() {
        assert!(matches!(
            "urn:foo:cbid-0003".parse::<JxtaId>(),
            Err(IdError::NotJxtaUrn(_))
        ));
        assert!(matches!(
            "urn:jxta:CBID-0003".parse::<JxtaId>(),
            Err(IdError::UnknownFormat(_))
        ));
        assert!(matches!(
            "urn:jxta:cbid-003".parse::<JxtaId>(),
            Err(IdError::BadPayload(_))
        ));
        assert!(matches!(
            "urn:jxta:cbid-zz03".parse::<JxtaId>(),
            Err(IdError::BadPayload(_))
        ));
        let too_long = format!("urn:jxta:cbid-{}", "00".repeat(65));
        assert!(matches!(
            too_long.parse::<JxtaId>(),
            Err(IdError::BadPayload(_))
        ));
        assert!(matches!(
            "urn:jxta:cbid-0004".parse::<PeerId>(),
            Err(IdError::WrongType { .. })
        ));
        assert!("".parse::<JxtaId>().is_err());
        assert!("urn:jxta:".parse::<JxtaId>().is_err());
        assert!("urn:jxta:é".parse::<JxtaId>().is_err());
    }

    #[test]
    fn random_pipe_ids_are_in_net_group() {
        let mut rng = rand::thread_rng();
        let p = PipeId::random(&mut rng);
        assert_eq!(p.id().group_part(), Some(JxtaId::NET_GROUP));
        assert_eq!(p.to_string().parse::<PipeId>().unwrap(), p);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_round_trip(body in proptest::collection::vec(proptest::num::u8::ANY, 63), ty in 1u8..8) {
            let mut bytes = [0u8; ID_LEN];
            bytes[..63].copy_from_slice(&body);
            bytes[63] = ty;
            let id = JxtaId::Bytes { format: IdFormat::Cbid, bytes };
            // byte 0 is always kept even if zero, so the body is recovered exactly
            let back: JxtaId = id.to_string().parse().unwrap();
            proptest::prop_assert_eq!(back, id);
        }

        #[test]
        fn unique_key_sorts_as_the_unique_value(
            a in proptest::collection::vec(0u8..4, 64),
            b in proptest::collection::vec(0u8..4, 64),
            cut_a in 0usize..64,
            cut_b in 0usize..64,
            fa in 0u8..5,
            fb in 0u8..5,
        ) {
            // Few distinct byte values and zeroed tails: long common
            // prefixes and IDs whose strings are prefixes of others.
            let id = |v: &[u8], cut: usize, f: u8| {
                let mut bytes = [0u8; ID_LEN];
                bytes[..cut].copy_from_slice(&v[..cut]);
                bytes[63] = v[63];
                match f {
                    0 => JxtaId::NET_GROUP,
                    1 => JxtaId::WORLD_GROUP,
                    2 => JxtaId::Bytes { format: IdFormat::Uuid, bytes },
                    _ => JxtaId::Bytes { format: IdFormat::Cbid, bytes },
                }
            };
            let (x, y) = (id(&a, cut_a, fa), id(&b, cut_b, fb));
            let (kx, ky) = (x.unique_key(), y.unique_key());
            proptest::prop_assert_eq!(kx.cmp(&ky), x.unique_value().cmp(&y.unique_value()));
            proptest::prop_assert_eq!(kx == ky, x.unique_value() == y.unique_value());
            proptest::prop_assert_eq!(kx.to_string(), x.unique_value());
        }

        #[test]
        fn parser_never_panics(s in ".{0,200}") {
            let _ = s.parse::<JxtaId>();
            let _ = JxtaId::from_unique_value(&s);
        }
    }
}
