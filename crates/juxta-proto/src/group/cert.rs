//! Certificate membership (Juxta's own, not in JXSE): a group is created
//! with an Ed25519 key; its ID is derived from that key, so an
//! advertisement naming another key for the same ID is refused. Members
//! hold a [`MemberCertificate`] binding their peer ID and an Ed25519
//! member key to the group, signed by the group key (or by a member whose
//! own certificate, signed by the group key, allows issuing), valid for a
//! period. Group traffic carries a [`GroupAuth`] tag: the sender's
//! certificate and its member key's signature over the message, so a peer
//! without a valid certificate cannot inject group traffic. Revocation is
//! a [`RevocationList`] signed by the group key, published in the group.
//!
//! Everything here is sans-IO: time is passed in (Unix ms), randomness is
//! a parameter.
//!
//! ```
//! use juxta_proto::group::cert::*;
//! use juxta_proto::id::{PeerGroupId, PeerId};
//! let mut rng = rand::thread_rng();
//! let owner = SigningKey::generate(&mut rng);
//! let gid = group_id_for_key(&owner.public(), &PeerGroupId::NET);
//! let me = PeerId::from_public_key_spki(b"member");
//! let member = SigningKey::generate(&mut rng);
//! let cert = MemberCertificate::issue(&owner, None, gid, me, member.public(), 1, 0, 60_000, false);
//! let m = CertMembership::new(gid, owner.public()).unwrap();
//! assert!(m.verify(&cert, &me, 1_000).is_ok());
//! assert_eq!(m.verify(&cert, &me, 60_001), Err(CertError::Expired));
//! let tag = GroupAuth::sign(&member, &cert, "q", b"payload", 1_000, [7; 16]);
//! let parsed = GroupAuth::decode(&tag.encode()).unwrap();
//! assert!(m.verify_message(&parsed, &me, "q", b"payload", 1_000).is_ok());
//! assert!(m.verify_message(&parsed, &me, "q", b"forged", 1_000).is_err());
//! ```

use std::collections::{HashSet, VecDeque};

use rand::RngCore;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use sha2::{Digest, Sha256};

use crate::advertisement::group::PeerGroupAdvertisement;
use crate::advertisement::tree::XmlElement;
use crate::id::{IdFormat, IdType, JxtaId, ModuleSpecId, PeerGroupId, PeerId};

/// Largest encoded certificate accepted (with its issuer's).
pub const MAX_CERT_BYTES: usize = 2048;
/// Largest encoded [`GroupAuth`] tag accepted.
pub const MAX_AUTH_BYTES: usize = 4096;
/// Most entries (peers + serials) in a revocation list.
pub const MAX_REVOKED: usize = 4096;
/// Largest encoded revocation list accepted.
pub const MAX_CRL_BYTES: usize = 64 + MAX_REVOKED * 140;
/// How far a [`GroupAuth`] timestamp may be from the receiver's clock, ms.
pub const AUTH_WINDOW_MS: u64 = 120_000;
/// The element (namespace `juxta`) carrying a [`GroupAuth`] tag.
pub const AUTH_ELEMENT: &str = "GroupAuth";
/// The element of a group advertisement's membership parameters holding
/// the group key (base64 of the 32-byte Ed25519 public key).
pub const GROUP_KEY_ELEMENT: &str = "GroupKey";

const CERT_MAGIC: &[u8; 4] = b"JXGC";
const CRL_MAGIC: &[u8; 4] = b"JXGR";
const AUTH_MAGIC: &[u8; 4] = b"JXGA";
const VERSION: u8 = 1;
const MSG_CONTEXT: &[u8] = b"juxta-group-msg-v1\0";

/// Errors of certificate membership. Each names what was wrong with what a
/// peer presented; none is a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// Not a certificate / tag / list in the expected encoding.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// Larger than the bound for its kind.
    #[error("{0} too large")]
    TooLarge(&'static str),
    /// Issued for another group.
    #[error("certificate for another group")]
    WrongGroup,
    /// Issued for another peer ID than the one presenting it.
    #[error("certificate for another peer ID")]
    WrongPeer,
    /// The signature does not verify with the group key (or its issuer's).
    #[error("certificate not signed by the group")]
    BadSignature,
    /// Signed by a member certificate that does not allow issuing (or that
    /// was itself issued by a member: one level of delegation only).
    #[error("certificate issuer is not authorised by the group")]
    NotAuthorised,
    /// Before its validity period.
    #[error("certificate not yet valid")]
    NotYetValid,
    /// After its validity period.
    #[error("certificate expired")]
    Expired,
    /// Revoked by the group's revocation list.
    #[error("certificate revoked")]
    Revoked,
    /// A message tag whose signature does not verify.
    #[error("message signature does not verify")]
    BadMessageSignature,
    /// A message tag whose time is too far from ours (or a replay).
    #[error("message tag outside the time window")]
    Stale,
    /// The group advertisement has no (or a bad) group key, or its ID is
    /// not the one derived from that key.
    #[error("group advertisement without a valid group key")]
    NoGroupKey,
    /// A key could not be made from the bytes given.
    #[error("bad key")]
    BadKey,
    /// A message in the clear in a group whose traffic is encrypted (or a
    /// sealed message whose encryption does not match the group's).
    #[error("group message not sealed as the group requires")]
    NotSealed,
    /// A sealed message that does not decrypt with the group's traffic key.
    #[error("sealed group message does not decrypt")]
    Undecryptable,
}

/// An Ed25519 key pair (the group key, or a member key).
pub struct SigningKey {
    seed: [u8; 32],
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("public", &hex::encode(self.public()))
            .finish_non_exhaustive()
    }
}

impl Clone for SigningKey {
    fn clone(&self) -> Self {
        SigningKey::from_seed(self.seed).expect("a seed that made a key makes it again")
    }
}

impl SigningKey {
    /// A new random key.
    pub fn generate(rng: &mut dyn RngCore) -> SigningKey {
        let mut seed = [0u8; 32];
        rng.fill_bytes(&mut seed);
        SigningKey::from_seed(seed).expect("any 32 bytes are an Ed25519 seed")
    }

    /// The key of a 32-byte seed (keep the seed secret).
    pub fn from_seed(seed: [u8; 32]) -> Result<SigningKey, CertError> {
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| CertError::BadKey)?;
        Ok(SigningKey { seed, pair })
    }

    /// The seed (secret).
    pub fn seed(&self) -> [u8; 32] {
        self.seed
    }

    /// The public key.
    pub fn public(&self) -> [u8; 32] {
        let mut p = [0u8; 32];
        p.copy_from_slice(self.pair.public_key().as_ref());
        p
    }

    /// Signs `msg`.
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        let mut s = [0u8; 64];
        s.copy_from_slice(self.pair.sign(msg).as_ref());
        s
    }
}

fn verify_sig(public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
    UnparsedPublicKey::new(&ED25519, public)
        .verify(msg, sig)
        .is_ok()
}

/// The ID of a group whose key is `public`, a subgroup of `parent`: a
/// `cbid` group ID whose first half is derived from the key (SHA-256), so
/// the ID names the key.
pub fn group_id_for_key(public: &[u8; 32], parent: &PeerGroupId) -> PeerGroupId {
    let mut h = Sha256::new();
    h.update(b"juxta-group-key-v1\0");
    h.update(public);
    let d = h.finalize();
    let mut u = [0u8; 16];
    u.copy_from_slice(&d[..16]);
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u[10] |= 0x80;
    let parent_uuid = match parent.id() {
        JxtaId::WellKnown(crate::id::WellKnown::NetGroup) => crate::id::NET_GROUP_UUID,
        JxtaId::WellKnown(_) => crate::id::WORLD_GROUP_UUID,
        JxtaId::Bytes { bytes, .. } => {
            let mut p = [0u8; 16];
            p.copy_from_slice(&bytes[..16]);
            p
        }
    };
    PeerGroupId::try_from(JxtaId::from_parts(
        IdFormat::Cbid,
        u,
        parent_uuid,
        IdType::PeerGroup,
    ))
    .expect("a peer group ID")
}

fn key_uuid_matches(gid: &PeerGroupId, public: &[u8; 32]) -> bool {
    let (JxtaId::Bytes { bytes: a, .. }, derived) =
        (gid.id(), group_id_for_key(public, &PeerGroupId::NET))
    else {
        return false;
    };
    let JxtaId::Bytes { bytes: b, .. } = derived.id() else {
        return false;
    };
    a[..16] == b[..16]
}

/// A group advertisement for a certificate group: the key is in the
/// membership service parameters (`<Parm><GroupKey>base64</GroupKey></Parm>`).
pub fn cert_group_advertisement(
    group_id: PeerGroupId,
    spec_id: ModuleSpecId,
    name: &str,
    public: &[u8; 32],
) -> PeerGroupAdvertisement {
    use base64::Engine;
    let mut adv = PeerGroupAdvertisement::new(group_id, spec_id, name);
    let mut parm = XmlElement::new("Parm");
    parm.push_text(
        GROUP_KEY_ELEMENT,
        &base64::engine::general_purpose::STANDARD.encode(public),
    );
    adv.set_service_param(super::membership_class(), parm);
    adv
}

/// Writer/reader helpers for the binary encodings (big-endian, lengths
/// bounded).
struct Reader<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CertError> {
        if self.b.len() < n {
            return Err(CertError::Malformed(self.what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], CertError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, CertError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, CertError> {
        Ok(u16::from_be_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Result<u32, CertError> {
        Ok(u32::from_be_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, CertError> {
        Ok(u64::from_be_bytes(self.arr()?))
    }
    fn str(&mut self) -> Result<&'a str, CertError> {
        let n = usize::from(self.u16()?);
        std::str::from_utf8(self.take(n)?).map_err(|_| CertError::Malformed(self.what))
    }
    fn done(&self) -> Result<(), CertError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(CertError::Malformed(self.what))
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let n = u16::try_from(b.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(&b[..usize::from(n)]);
}

/// A member certificate: binds `peer_id` and its member key to a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberCertificate {
    /// The group.
    pub group_id: PeerGroupId,
    /// The member.
    pub peer_id: PeerId,
    /// The member's Ed25519 public key (signs its group traffic).
    pub member_key: [u8; 32],
    /// Serial number (revocation may name it).
    pub serial: u64,
    /// Start of validity, Unix ms.
    pub not_before_ms: u64,
    /// End of validity (inclusive), Unix ms.
    pub not_after_ms: u64,
    /// Whether this member may issue certificates for the group.
    pub may_issue: bool,
    /// The issuing member's certificate; `None`: signed by the group key.
    pub issuer: Option<Box<MemberCertificate>>,
    /// Signature over the other fields.
    pub signature: [u8; 64],
}

impl MemberCertificate {
    /// Issues a certificate signed by `signer`: the group key (`issuer`
    /// `None`) or a member key whose certificate `issuer` allows issuing.
    #[allow(clippy::too_many_arguments)]
    pub fn issue(
        signer: &SigningKey,
        issuer: Option<&MemberCertificate>,
        group_id: PeerGroupId,
        peer_id: PeerId,
        member_key: [u8; 32],
        serial: u64,
        not_before_ms: u64,
        not_after_ms: u64,
        may_issue: bool,
    ) -> MemberCertificate {
        let mut c = MemberCertificate {
            group_id,
            peer_id,
            member_key,
            serial,
            not_before_ms,
            not_after_ms,
            // A delegated issuer cannot delegate further.
            may_issue: may_issue && issuer.is_none(),
            issuer: issuer.map(|i| Box::new(i.clone())),
            signature: [0; 64],
        };
        c.signature = signer.sign(&c.tbs());
        c
    }

    /// The signed bytes.
    fn tbs(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(256);
        o.extend_from_slice(CERT_MAGIC);
        o.push(VERSION);
        put_str(&mut o, &self.group_id.to_string());
        put_str(&mut o, &self.peer_id.to_string());
        o.extend_from_slice(&self.member_key);
        o.extend_from_slice(&self.serial.to_be_bytes());
        o.extend_from_slice(&self.not_before_ms.to_be_bytes());
        o.extend_from_slice(&self.not_after_ms.to_be_bytes());
        o.push(u8::from(self.may_issue));
        match &self.issuer {
            None => o.push(0),
            Some(i) => {
                o.push(1);
                let ib = i.encode();
                o.extend_from_slice(&(ib.len() as u32).to_be_bytes());
                o.extend_from_slice(&ib);
            }
        }
        o
    }

    /// The binary encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = self.tbs();
        o.extend_from_slice(&self.signature);
        o
    }

    /// Parses [`MemberCertificate::encode`]'s output (at most
    /// [`MAX_CERT_BYTES`]; one level of issuer).
    pub fn decode(b: &[u8]) -> Result<MemberCertificate, CertError> {
        Self::decode_depth(b, 0)
    }

    fn decode_depth(b: &[u8], depth: u8) -> Result<MemberCertificate, CertError> {
        const W: &str = "certificate";
        if b.len() > MAX_CERT_BYTES {
            return Err(CertError::TooLarge(W));
        }
        let mut r = Reader { b, what: W };
        if r.take(4)? != CERT_MAGIC || r.u8()? != VERSION {
            return Err(CertError::Malformed(W));
        }
        let group_id = r.str()?.parse().map_err(|_| CertError::Malformed(W))?;
        let peer_id = r.str()?.parse().map_err(|_| CertError::Malformed(W))?;
        let member_key = r.arr()?;
        let serial = r.u64()?;
        let not_before_ms = r.u64()?;
        let not_after_ms = r.u64()?;
        let may_issue = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(CertError::Malformed(W)),
        };
        let issuer = match r.u8()? {
            0 => None,
            1 if depth == 0 => {
                let n = usize::try_from(r.u32()?).map_err(|_| CertError::Malformed(W))?;
                let ib = r.take(n)?;
                Some(Box::new(Self::decode_depth(ib, depth + 1)?))
            }
            _ => return Err(CertError::Malformed(W)),
        };
        let signature = r.arr()?;
        r.done()?;
        Ok(MemberCertificate {
            group_id,
            peer_id,
            member_key,
            serial,
            not_before_ms,
            not_after_ms,
            may_issue,
            issuer,
            signature,
        })
    }

    fn check_time(&self, now_ms: u64) -> Result<(), CertError> {
        if now_ms < self.not_before_ms {
            Err(CertError::NotYetValid)
        } else if now_ms > self.not_after_ms {
            Err(CertError::Expired)
        } else {
            Ok(())
        }
    }
}

/// A revocation list: members (by peer ID) and certificates (by serial)
/// no longer in the group; signed by the group key; a higher `version`
/// replaces a lower one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationList {
    /// The group.
    pub group_id: PeerGroupId,
    /// Monotonic version.
    pub version: u64,
    /// Revoked peers.
    pub peers: Vec<PeerId>,
    /// Revoked serials.
    pub serials: Vec<u64>,
    /// Group key signature.
    pub signature: [u8; 64],
}

impl RevocationList {
    /// A signed list (at most [`MAX_REVOKED`] entries are kept, the first).
    pub fn sign(
        group_key: &SigningKey,
        group_id: PeerGroupId,
        version: u64,
        mut peers: Vec<PeerId>,
        mut serials: Vec<u64>,
    ) -> RevocationList {
        peers.truncate(MAX_REVOKED);
        serials.truncate(MAX_REVOKED.saturating_sub(peers.len()));
        let mut l = RevocationList {
            group_id,
            version,
            peers,
            serials,
            signature: [0; 64],
        };
        l.signature = group_key.sign(&l.tbs());
        l
    }

    fn tbs(&self) -> Vec<u8> {
        let mut o = Vec::new();
        o.extend_from_slice(CRL_MAGIC);
        o.push(VERSION);
        put_str(&mut o, &self.group_id.to_string());
        o.extend_from_slice(&self.version.to_be_bytes());
        o.extend_from_slice(&(self.peers.len() as u32).to_be_bytes());
        for p in &self.peers {
            put_str(&mut o, &p.to_string());
        }
        o.extend_from_slice(&(self.serials.len() as u32).to_be_bytes());
        for s in &self.serials {
            o.extend_from_slice(&s.to_be_bytes());
        }
        o
    }

    /// The binary encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = self.tbs();
        o.extend_from_slice(&self.signature);
        o
    }

    /// Parses [`RevocationList::encode`]'s output (bounded).
    pub fn decode(b: &[u8]) -> Result<RevocationList, CertError> {
        const W: &str = "revocation list";
        if b.len() > MAX_CRL_BYTES {
            return Err(CertError::TooLarge(W));
        }
        let mut r = Reader { b, what: W };
        if r.take(4)? != CRL_MAGIC || r.u8()? != VERSION {
            return Err(CertError::Malformed(W));
        }
        let group_id = r.str()?.parse().map_err(|_| CertError::Malformed(W))?;
        let version = r.u64()?;
        let np = r.u32()? as usize;
        if np > MAX_REVOKED {
            return Err(CertError::TooLarge(W));
        }
        let mut peers = Vec::with_capacity(np);
        for _ in 0..np {
            peers.push(r.str()?.parse().map_err(|_| CertError::Malformed(W))?);
        }
        let ns = r.u32()? as usize;
        if ns > MAX_REVOKED.saturating_sub(np) {
            return Err(CertError::TooLarge(W));
        }
        let mut serials = Vec::with_capacity(ns);
        for _ in 0..ns {
            serials.push(r.u64()?);
        }
        let signature = r.arr()?;
        r.done()?;
        Ok(RevocationList {
            group_id,
            version,
            peers,
            serials,
            signature,
        })
    }

    fn revokes(&self, c: &MemberCertificate) -> bool {
        self.peers.contains(&c.peer_id) || self.serials.contains(&c.serial)
    }
}

/// The authentication tag of one group message: who sent it (its
/// certificate), when, and the member key's signature over the group, the
/// queue, the time, a nonce and the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupAuth {
    /// Unix ms at the sender.
    pub time_ms: u64,
    /// Random, so two identical messages have distinct tags.
    pub nonce: [u8; 16],
    /// The sender's certificate.
    pub cert: MemberCertificate,
    /// The member key's signature.
    pub signature: [u8; 64],
}

fn msg_tbs(
    group: &PeerGroupId,
    queue: &str,
    time_ms: u64,
    nonce: &[u8; 16],
    payload: &[u8],
) -> Vec<u8> {
    let mut o = Vec::with_capacity(payload.len() + 128);
    o.extend_from_slice(MSG_CONTEXT);
    put_str(&mut o, &group.to_string());
    put_str(&mut o, queue);
    o.extend_from_slice(&time_ms.to_be_bytes());
    o.extend_from_slice(nonce);
    o.extend_from_slice(payload);
    o
}

impl GroupAuth {
    /// Tags `payload` sent on `queue` in the certificate's group.
    pub fn sign(
        member: &SigningKey,
        cert: &MemberCertificate,
        queue: &str,
        payload: &[u8],
        time_ms: u64,
        nonce: [u8; 16],
    ) -> GroupAuth {
        let signature = member.sign(&msg_tbs(&cert.group_id, queue, time_ms, &nonce, payload));
        GroupAuth {
            time_ms,
            nonce,
            cert: cert.clone(),
            signature,
        }
    }

    /// The binary encoding.
    pub fn encode(&self) -> Vec<u8> {
        let c = self.cert.encode();
        let mut o = Vec::with_capacity(c.len() + 100);
        o.extend_from_slice(AUTH_MAGIC);
        o.push(VERSION);
        o.extend_from_slice(&self.time_ms.to_be_bytes());
        o.extend_from_slice(&self.nonce);
        o.extend_from_slice(&self.signature);
        o.extend_from_slice(&(c.len() as u32).to_be_bytes());
        o.extend_from_slice(&c);
        o
    }

    /// Parses [`GroupAuth::encode`]'s output (at most [`MAX_AUTH_BYTES`]).
    pub fn decode(b: &[u8]) -> Result<GroupAuth, CertError> {
        const W: &str = "group message tag";
        if b.len() > MAX_AUTH_BYTES {
            return Err(CertError::TooLarge(W));
        }
        let mut r = Reader { b, what: W };
        if r.take(4)? != AUTH_MAGIC || r.u8()? != VERSION {
            return Err(CertError::Malformed(W));
        }
        let time_ms = r.u64()?;
        let nonce = r.arr()?;
        let signature = r.arr()?;
        let n = r.u32()? as usize;
        let cert = MemberCertificate::decode(r.take(n)?)?;
        r.done()?;
        Ok(GroupAuth {
            time_ms,
            nonce,
            cert,
            signature,
        })
    }
}

/// The certificate membership of one group: its key and current
/// revocation list; checks certificates and message tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertMembership {
    group_id: PeerGroupId,
    group_key: [u8; 32],
    crl: Option<RevocationList>,
    verified: VerifiedCerts,
}

/// Most certificate signatures remembered as verified per group.
pub const VERIFIED_CERTS: usize = 4096;

/// Certificate signatures already verified (by a digest of key, signed
/// bytes and signature): a member's certificate rides in every tag, and
/// its signature need not be checked again each time (its validity period
/// and revocation still are). Bounded: the oldest are forgotten first.
#[derive(Debug, Default)]
struct VerifiedCerts(std::sync::Mutex<Digests>);

/// Digests remembered, and their insertion order.
type Digests = (HashSet<[u8; 32]>, VecDeque<[u8; 32]>);

impl Clone for VerifiedCerts {
    fn clone(&self) -> Self {
        VerifiedCerts::default()
    }
}

impl PartialEq for VerifiedCerts {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for VerifiedCerts {}

impl VerifiedCerts {
    /// [`verify_sig`], remembering successes.
    fn verify(&self, public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        let mut h = Sha256::new();
        h.update(public);
        h.update((msg.len() as u64).to_be_bytes());
        h.update(msg);
        h.update(sig);
        let d: [u8; 32] = h.finalize().into();
        if let Ok(g) = self.0.lock() {
            if g.0.contains(&d) {
                return true;
            }
        }
        if !verify_sig(public, msg, sig) {
            return false;
        }
        if let Ok(mut g) = self.0.lock() {
            if g.1.len() >= VERIFIED_CERTS {
                if let Some(old) = g.1.pop_front() {
                    g.0.remove(&old);
                }
            }
            if g.0.insert(d) {
                g.1.push_back(d);
            }
        }
        true
    }
}

impl CertMembership {
    /// The membership of `group_id` with key `group_key`; the ID must be
    /// the one derived from the key ([`group_id_for_key`]).
    pub fn new(group_id: PeerGroupId, group_key: [u8; 32]) -> Result<CertMembership, CertError> {
        if !key_uuid_matches(&group_id, &group_key) {
            return Err(CertError::NoGroupKey);
        }
        Ok(CertMembership {
            group_id,
            group_key,
            crl: None,
            verified: VerifiedCerts::default(),
        })
    }

    /// Reads the group key from a group advertisement
    /// ([`cert_group_advertisement`]).
    pub fn from_group(adv: &PeerGroupAdvertisement) -> Result<CertMembership, CertError> {
        use base64::Engine;
        let parm = adv
            .service_param(&super::membership_class())
            .ok_or(CertError::NoGroupKey)?;
        let b64 = parm
            .child(GROUP_KEY_ELEMENT)
            .map(|c| c.text.as_str())
            .ok_or(CertError::NoGroupKey)?;
        if b64.len() > 64 {
            return Err(CertError::NoGroupKey);
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| CertError::NoGroupKey)?;
        let key: [u8; 32] = raw.try_into().map_err(|_| CertError::NoGroupKey)?;
        CertMembership::new(adv.group_id, key)
    }

    /// The group.
    pub fn group_id(&self) -> PeerGroupId {
        self.group_id
    }

    /// The group's public key.
    pub fn group_key(&self) -> [u8; 32] {
        self.group_key
    }

    /// The revocation list in force.
    pub fn revocations(&self) -> Option<&RevocationList> {
        self.crl.as_ref()
    }

    /// Installs a revocation list: it must be for this group, signed by
    /// the group key and newer than the one in force. Returns whether it
    /// replaced the current list (`Ok(false)`: not newer).
    pub fn apply_revocations(&mut self, l: RevocationList) -> Result<bool, CertError> {
        if l.group_id != self.group_id {
            return Err(CertError::WrongGroup);
        }
        if !verify_sig(&self.group_key, &l.tbs(), &l.signature) {
            return Err(CertError::BadSignature);
        }
        if self.crl.as_ref().is_some_and(|c| c.version >= l.version) {
            return Ok(false);
        }
        self.crl = Some(l);
        Ok(true)
    }

    fn revoked(&self, c: &MemberCertificate) -> bool {
        self.crl.as_ref().is_some_and(|l| l.revokes(c))
    }

    /// Checks that `cert` is valid for `peer` at `now_ms`: this group,
    /// this peer, in its validity period, signed by the group key (or by
    /// an issuing member's valid certificate), not revoked.
    pub fn verify(
        &self,
        cert: &MemberCertificate,
        peer: &PeerId,
        now_ms: u64,
    ) -> Result<(), CertError> {
        if cert.group_id != self.group_id {
            return Err(CertError::WrongGroup);
        }
        if cert.peer_id != *peer {
            return Err(CertError::WrongPeer);
        }
        let signer = match &cert.issuer {
            None => self.group_key,
            Some(i) => {
                if i.group_id != self.group_id || i.issuer.is_some() {
                    return Err(CertError::NotAuthorised);
                }
                if !self
                    .verified
                    .verify(&self.group_key, &i.tbs(), &i.signature)
                {
                    return Err(CertError::BadSignature);
                }
                if !i.may_issue {
                    return Err(CertError::NotAuthorised);
                }
                i.check_time(now_ms)?;
                if self.revoked(i) {
                    return Err(CertError::Revoked);
                }
                i.member_key
            }
        };
        if !self.verified.verify(&signer, &cert.tbs(), &cert.signature) {
            return Err(CertError::BadSignature);
        }
        cert.check_time(now_ms)?;
        if self.revoked(cert) {
            return Err(CertError::Revoked);
        }
        Ok(())
    }

    /// Checks a message tag from `from` on `queue` over `payload`: a valid
    /// certificate of `from`, a time within [`AUTH_WINDOW_MS`] of
    /// `now_ms`, and the member key's signature.
    pub fn verify_message(
        &self,
        tag: &GroupAuth,
        from: &PeerId,
        queue: &str,
        payload: &[u8],
        now_ms: u64,
    ) -> Result<(), CertError> {
        if tag.time_ms.abs_diff(now_ms) > AUTH_WINDOW_MS {
            return Err(CertError::Stale);
        }
        self.verify(&tag.cert, from, now_ms)?;
        let tbs = msg_tbs(&self.group_id, queue, tag.time_ms, &tag.nonce, payload);
        if !verify_sig(&tag.cert.member_key, &tbs, &tag.signature) {
            return Err(CertError::BadMessageSignature);
        }
        Ok(())
    }
}

/// Tags seen recently, so a captured group message replayed within the
/// time window is refused. Bounded: the oldest are forgotten first (a tag
/// older than [`AUTH_WINDOW_MS`] is refused by its time anyway as long as
/// the set holds a window's worth).
#[derive(Debug)]
pub struct ReplayGuard {
    seen: HashSet<[u8; 16]>,
    order: VecDeque<[u8; 16]>,
    capacity: usize,
}

impl ReplayGuard {
    /// A guard remembering at most `capacity` tags (at least 1).
    pub fn new(capacity: usize) -> ReplayGuard {
        ReplayGuard {
            seen: HashSet::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// `true` the first time a tag is seen.
    pub fn first_time(&mut self, tag: &GroupAuth) -> bool {
        let mut h = Sha256::new();
        h.update(tag.signature);
        let d = h.finalize();
        let mut k = [0u8; 16];
        k.copy_from_slice(&d[..16]);
        if !self.seen.insert(k) {
            return false;
        }
        self.order.push_back(k);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn setup() -> (SigningKey, PeerGroupId, CertMembership, PeerId, SigningKey) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let owner = SigningKey::generate(&mut rng);
        let gid = group_id_for_key(&owner.public(), &PeerGroupId::NET);
        let m = CertMembership::new(gid, owner.public()).unwrap();
        let me = PeerId::from_public_key_spki(b"me");
        (owner, gid, m, me, SigningKey::generate(&mut rng))
    }

    #[test]
    fn valid_certificate_round_trips_and_verifies() {
        let (owner, gid, m, me, member) = setup();
        let c = MemberCertificate::issue(&owner, None, gid, me, member.public(), 7, 10, 100, false);
        let d = MemberCertificate::decode(&c.encode()).unwrap();
        assert_eq!(d, c);
        assert_eq!(m.verify(&d, &me, 50), Ok(()));
        assert_eq!(m.verify(&d, &me, 9), Err(CertError::NotYetValid));
        assert_eq!(m.verify(&d, &me, 101), Err(CertError::Expired));
    }

    #[test]
    fn bad_certificates_are_refused_with_their_reason() {
        let (owner, gid, m, me, member) = setup();
        let other = PeerId::from_public_key_spki(b"other");
        // For another peer.
        let c =
            MemberCertificate::issue(&owner, None, gid, other, member.public(), 1, 0, 100, false);
        assert_eq!(m.verify(&c, &me, 1), Err(CertError::WrongPeer));
        // Not signed by the group: signed by some other key.
        let c = MemberCertificate::issue(&member, None, gid, me, member.public(), 1, 0, 100, false);
        assert_eq!(m.verify(&c, &me, 1), Err(CertError::BadSignature));
        // Another group.
        let g2 = group_id_for_key(&member.public(), &PeerGroupId::NET);
        let c = MemberCertificate::issue(&owner, None, g2, me, member.public(), 1, 0, 100, false);
        assert_eq!(m.verify(&c, &me, 1), Err(CertError::WrongGroup));
        // Tampered validity.
        let mut c =
            MemberCertificate::issue(&owner, None, gid, me, member.public(), 1, 0, 100, false);
        c.not_after_ms = u64::MAX;
        assert_eq!(m.verify(&c, &me, 1), Err(CertError::BadSignature));
        // Garbage and truncation.
        let enc =
            MemberCertificate::issue(&owner, None, gid, me, member.public(), 1, 0, 100, false)
                .encode();
        for n in 0..enc.len() {
            assert!(MemberCertificate::decode(&enc[..n]).is_err());
        }
        assert!(MemberCertificate::decode(&vec![0u8; MAX_CERT_BYTES + 1]).is_err());
        // A group ID that does not name the key.
        let random = crate::group::new_group_id(&mut rand::rngs::StdRng::seed_from_u64(2));
        assert_eq!(
            CertMembership::new(random, owner.public()),
            Err(CertError::NoGroupKey)
        );
    }

    #[test]
    fn delegated_issuer_and_revocation() {
        let (owner, gid, mut m, me, member) = setup();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let admin_key = SigningKey::generate(&mut rng);
        let admin_id = PeerId::from_public_key_spki(b"admin");
        let admin = MemberCertificate::issue(
            &owner,
            None,
            gid,
            admin_id,
            admin_key.public(),
            2,
            0,
            1000,
            true,
        );
        let c = MemberCertificate::issue(
            &admin_key,
            Some(&admin),
            gid,
            me,
            member.public(),
            3,
            0,
            1000,
            true,
        );
        assert!(!c.may_issue, "one level of delegation only");
        let c2 = MemberCertificate::decode(&c.encode()).unwrap();
        assert_eq!(m.verify(&c2, &me, 5), Ok(()));
        // An issuer without the right.
        let plain = MemberCertificate::issue(
            &owner,
            None,
            gid,
            admin_id,
            admin_key.public(),
            4,
            0,
            1000,
            false,
        );
        let c = MemberCertificate::issue(
            &admin_key,
            Some(&plain),
            gid,
            me,
            member.public(),
            5,
            0,
            1000,
            false,
        );
        assert_eq!(m.verify(&c, &me, 5), Err(CertError::NotAuthorised));
        // Revocation of the issuer revokes what it issued.
        let crl = RevocationList::sign(&owner, gid, 1, vec![admin_id], vec![]);
        let crl = RevocationList::decode(&crl.encode()).unwrap();
        assert_eq!(m.apply_revocations(crl.clone()), Ok(true));
        assert_eq!(m.apply_revocations(crl), Ok(false));
        assert_eq!(m.verify(&c2, &me, 5), Err(CertError::Revoked));
        // By serial.
        let own =
            MemberCertificate::issue(&owner, None, gid, me, member.public(), 9, 0, 1000, false);
        assert_eq!(m.verify(&own, &me, 5), Ok(()));
        let crl = RevocationList::sign(&owner, gid, 2, vec![], vec![9]);
        assert_eq!(m.apply_revocations(crl), Ok(true));
        assert_eq!(m.verify(&own, &me, 5), Err(CertError::Revoked));
        // A list not signed by the group key.
        let forged = RevocationList::sign(&member, gid, 3, vec![], vec![]);
        assert_eq!(m.apply_revocations(forged), Err(CertError::BadSignature));
    }

    #[test]
    fn message_tags() {
        let (owner, gid, m, me, member) = setup();
        let c = MemberCertificate::issue(
            &owner,
            None,
            gid,
            me,
            member.public(),
            1,
            0,
            u64::MAX,
            false,
        );
        let t = GroupAuth::sign(&member, &c, "GORes", b"hello", 1_000_000, [1; 16]);
        let t = GroupAuth::decode(&t.encode()).unwrap();
        assert_eq!(
            m.verify_message(&t, &me, "GORes", b"hello", 1_000_000),
            Ok(())
        );
        assert_eq!(
            m.verify_message(&t, &me, "GIRes", b"hello", 1_000_000),
            Err(CertError::BadMessageSignature)
        );
        assert_eq!(
            m.verify_message(&t, &me, "GORes", b"hellO", 1_000_000),
            Err(CertError::BadMessageSignature)
        );
        let other = PeerId::from_public_key_spki(b"x");
        assert_eq!(
            m.verify_message(&t, &other, "GORes", b"hello", 1_000_000),
            Err(CertError::WrongPeer)
        );
        assert_eq!(
            m.verify_message(&t, &me, "GORes", b"hello", 1_000_000 + AUTH_WINDOW_MS + 1),
            Err(CertError::Stale)
        );
        // Signed with another key than the certificate's.
        let t2 = GroupAuth::sign(&owner, &c, "GORes", b"hello", 1_000_000, [1; 16]);
        assert_eq!(
            m.verify_message(&t2, &me, "GORes", b"hello", 1_000_000),
            Err(CertError::BadMessageSignature)
        );
        let mut g = ReplayGuard::new(2);
        assert!(g.first_time(&t));
        assert!(!g.first_time(&t));
        assert!(g.first_time(&t2));
        let t3 = GroupAuth::sign(&member, &c, "GORes", b"x", 1, [3; 16]);
        assert!(g.first_time(&t3));
        assert!(g.first_time(&t), "forgotten past capacity");
        for n in 0..t.encode().len() {
            assert!(GroupAuth::decode(&t.encode()[..n]).is_err());
        }
    }

    #[test]
    fn advertisement_carries_the_key() {
        let (owner, gid, m, _, _) = setup();
        let spec = crate::group::spec(crate::group::ALL_PURPOSE_GROUP_SPEC).unwrap();
        let adv = cert_group_advertisement(gid, spec, "secure", &owner.public());
        let parsed = match crate::advertisement::Advertisement::parse(&adv.to_xml()).unwrap() {
            crate::advertisement::Advertisement::Group(g) => g,
            other => panic!("{other:?}"),
        };
        assert_eq!(CertMembership::from_group(&parsed).unwrap(), m);
        // Another key under the same ID: refused.
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let evil = SigningKey::generate(&mut rng);
        let fake = cert_group_advertisement(gid, spec, "secure", &evil.public());
        assert_eq!(
            CertMembership::from_group(&fake),
            Err(CertError::NoGroupKey)
        );
    }

    proptest::proptest! {
        /// Whatever a peer sends, decoding gives a value or an error,
        /// never a panic or a large allocation.
        #[test]
        fn decoding_arbitrary_bytes_never_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000)) {
            let _ = MemberCertificate::decode(&b);
            let _ = GroupAuth::decode(&b);
            let _ = RevocationList::decode(&b);
            let mut with_magic = b"JXGC\x01".to_vec();
            with_magic.extend_from_slice(&b);
            let _ = MemberCertificate::decode(&with_magic);
            let mut with_magic = b"JXGR\x01".to_vec();
            with_magic.extend_from_slice(&b);
            let _ = RevocationList::decode(&with_magic);
        }
    }
}
