//! Sealed group messages (Juxta's own, certificate groups only): a whole
//! message carried as one element, tagged by its sender's member key
//! ([`GroupAuth`]) and, in a group whose traffic is encrypted, encrypted
//! with the group's traffic key.
//!
//! Why: the rendezvous of a group (its leases, SRDI entries, propagation)
//! speaks messages of several elements; sealing the whole message lets
//! one tag cover all of it, whatever the endpoint layer adds around it on
//! the way (router headers, route announcements). Encryption: the group's
//! creator makes a random 32-byte group secret and hands it to members in
//! their credential; the traffic key is derived from it with HKDF-SHA256
//! (salt [`TRAFFIC_SALT`], info: the group ID), and every group message is
//! sealed with ChaCha20-Poly1305 under a random 96-bit nonce. The tag
//! signs the ciphertext (encrypt, then sign): a non-member can neither
//! read (no secret) nor inject (no certificate); a member's tag names it.
//!
//! Wire form of the [`SEALED_ELEMENT`] element (namespace `juxta`):
//! `"JXGS"`, version 1, flags (bit 0: encrypted), the tag's length (u32,
//! big-endian) and its encoding, then the body: the message in JXTA
//! binary form (v0), or the 12-byte nonce and the AEAD ciphertext of it.
//!
//! ```
//! use juxta_proto::group::cert::*;
//! use juxta_proto::group::seal::*;
//! use juxta_proto::id::{PeerGroupId, PeerId};
//! use juxta_proto::message::{Element, Message};
//! let mut rng = rand::thread_rng();
//! let owner = SigningKey::generate(&mut rng);
//! let gid = group_id_for_key(&owner.public(), &PeerGroupId::NET);
//! let me = PeerId::from_public_key_spki(b"member");
//! let member = SigningKey::generate(&mut rng);
//! let cert = MemberCertificate::issue(&owner, None, gid, me, member.public(), 1, 0, u64::MAX, false);
//! let m = CertMembership::new(gid, owner.public()).unwrap();
//! let key = TrafficKey::derive(&[3; 32], &gid);
//! let msg = Message::new().with(Element::text("jxta", "q", "secret"));
//! let sealed = seal(&member, &cert, Some(&key), "svc/q", &msg, 1_000, &mut rng).unwrap();
//! let (_tag, back) = open(&m, Some(&key), "svc/q", &me, &sealed, 1_000).unwrap();
//! assert_eq!(back, msg);
//! // Without the key (a non-member), or as another label: refused.
//! assert_eq!(open(&m, None, "svc/q", &me, &sealed, 1_000).unwrap_err(), CertError::NotSealed);
//! assert!(open(&m, Some(&key), "svc/x", &me, &sealed, 1_000).is_err());
//! ```

use rand::RngCore;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use ring::hkdf;

use super::cert::{CertError, CertMembership, GroupAuth, MemberCertificate, SigningKey};
use crate::id::{PeerGroupId, PeerId};
use crate::message::namespace_order::JavaHashOrder;
use crate::message::{decode_v0, encode_v0, Message};

/// The element (namespace `juxta`) carrying a sealed message.
pub const SEALED_ELEMENT: &str = "GroupSealed";
/// Largest sealed element accepted (a message travels within the peer's
/// message size bound anyway).
pub const MAX_SEALED_BYTES: usize = 16 * 1024 * 1024;
/// Length of a group secret.
pub const GROUP_SECRET_LEN: usize = 32;
/// HKDF salt of the traffic key.
pub const TRAFFIC_SALT: &[u8] = b"juxta-group-traffic-v1";

const SEAL_MAGIC: &[u8; 4] = b"JXGS";
const VERSION: u8 = 1;
const FLAG_ENCRYPTED: u8 = 1;
const NONCE_LEN: usize = 12;

/// The AEAD key a group's traffic is encrypted with.
pub struct TrafficKey(LessSafeKey);

impl std::fmt::Debug for TrafficKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrafficKey(..)")
    }
}

struct Len32;

impl hkdf::KeyType for Len32 {
    fn len(&self) -> usize {
        32
    }
}

impl TrafficKey {
    /// The traffic key of `group` derived from its group secret.
    pub fn derive(secret: &[u8; GROUP_SECRET_LEN], group: &PeerGroupId) -> TrafficKey {
        let info = group.to_string();
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, TRAFFIC_SALT).extract(secret);
        let info_parts = [info.as_bytes()];
        let mut k = [0u8; 32];
        // Infallible: 32 bytes is far below HKDF-SHA256's limit.
        if let Ok(okm) = prk.expand(&info_parts, Len32) {
            let _ = okm.fill(&mut k);
        }
        // Infallible: a 32-byte key is ChaCha20-Poly1305's length.
        let key = UnboundKey::new(&CHACHA20_POLY1305, &k).unwrap_or_else(|_| {
            unreachable!("a 32-byte key is always a valid ChaCha20-Poly1305 key")
        });
        TrafficKey(LessSafeKey::new(key))
    }
}

fn signed_label(label: &str, flags: u8) -> String {
    format!("sealed:{flags}:{label}")
}

/// Seals `msg` sent as `label` (the destination service and parameter)
/// in the certificate's group: encodes it, encrypts it under `key` when
/// the group's traffic is encrypted, and tags it with the member key.
pub fn seal(
    member: &SigningKey,
    cert: &MemberCertificate,
    key: Option<&TrafficKey>,
    label: &str,
    msg: &Message,
    time_ms: u64,
    rng: &mut dyn RngCore,
) -> Result<Vec<u8>, CertError> {
    let plain = encode_v0(msg, JavaHashOrder::Java8)
        .map_err(|_| CertError::Malformed("message to seal"))?
        .to_bytes();
    let (flags, body) = match key {
        None => (0, plain.to_vec()),
        Some(k) => {
            let mut n = [0u8; NONCE_LEN];
            rng.fill_bytes(&mut n);
            let mut buf = plain.to_vec();
            k.0.seal_in_place_append_tag(
                Nonce::assume_unique_for_key(n),
                Aad::from(label.as_bytes()),
                &mut buf,
            )
            .map_err(|_| CertError::Malformed("message to seal"))?;
            let mut body = Vec::with_capacity(NONCE_LEN + buf.len());
            body.extend_from_slice(&n);
            body.extend_from_slice(&buf);
            (FLAG_ENCRYPTED, body)
        }
    };
    let mut nonce = [0u8; 16];
    rng.fill_bytes(&mut nonce);
    let tag = GroupAuth::sign(
        member,
        cert,
        &signed_label(label, flags),
        &body,
        time_ms,
        nonce,
    )
    .encode();
    let mut o = Vec::with_capacity(10 + tag.len() + body.len());
    o.extend_from_slice(SEAL_MAGIC);
    o.push(VERSION);
    o.push(flags);
    o.extend_from_slice(&(tag.len() as u32).to_be_bytes());
    o.extend_from_slice(&tag);
    o.extend_from_slice(&body);
    Ok(o)
}

/// Opens a sealed message received as `label` from `from`: checks the tag
/// (a valid, unrevoked certificate of `from` in the group, a signature
/// over the body, a time within the window), that it is encrypted exactly
/// when the group's traffic is (`key`), and decrypts and decodes it.
/// Returns the tag (for replay checks) and the message.
pub fn open(
    membership: &CertMembership,
    key: Option<&TrafficKey>,
    label: &str,
    from: &PeerId,
    sealed: &[u8],
    now_ms: u64,
) -> Result<(GroupAuth, Message), CertError> {
    const W: &str = "sealed group message";
    if sealed.len() > MAX_SEALED_BYTES {
        return Err(CertError::TooLarge(W));
    }
    if sealed.len() < 10 || &sealed[..4] != SEAL_MAGIC || sealed[4] != VERSION {
        return Err(CertError::Malformed(W));
    }
    let flags = sealed[5];
    if flags & !FLAG_ENCRYPTED != 0 {
        return Err(CertError::Malformed(W));
    }
    let encrypted = flags & FLAG_ENCRYPTED != 0;
    if encrypted != key.is_some() {
        return Err(CertError::NotSealed);
    }
    let n = u32::from_be_bytes([sealed[6], sealed[7], sealed[8], sealed[9]]) as usize;
    let rest = &sealed[10..];
    if n > rest.len() {
        return Err(CertError::Malformed(W));
    }
    let (tag, body) = rest.split_at(n);
    let tag = GroupAuth::decode(tag)?;
    membership.verify_message(&tag, from, &signed_label(label, flags), body, now_ms)?;
    let plain = match key {
        None => body.to_vec(),
        Some(k) => {
            if body.len() < NONCE_LEN + aead::MAX_TAG_LEN {
                return Err(CertError::Malformed(W));
            }
            let (nonce, ct) = body.split_at(NONCE_LEN);
            let mut nb = [0u8; NONCE_LEN];
            nb.copy_from_slice(nonce);
            let mut buf = ct.to_vec();
            let len =
                k.0.open_in_place(
                    Nonce::assume_unique_for_key(nb),
                    Aad::from(label.as_bytes()),
                    &mut buf,
                )
                .map_err(|_| CertError::Undecryptable)?
                .len();
            buf.truncate(len);
            buf
        }
    };
    let m = decode_v0(plain.into()).map_err(|_| CertError::Malformed(W))?;
    Ok((tag, m.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::cert::group_id_for_key;
    use crate::message::Element;

    fn setup() -> (
        SigningKey,
        MemberCertificate,
        CertMembership,
        PeerId,
        PeerGroupId,
    ) {
        let mut rng = rand::thread_rng();
        let owner = SigningKey::generate(&mut rng);
        let gid = group_id_for_key(&owner.public(), &PeerGroupId::NET);
        let me = PeerId::from_public_key_spki(b"m");
        let member = SigningKey::generate(&mut rng);
        let cert = MemberCertificate::issue(
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
        let m = CertMembership::new(gid, owner.public()).unwrap();
        (member, cert, m, me, gid)
    }

    #[test]
    fn sealed_messages_open_only_for_members_with_the_key_and_bad_input_is_refused() {
        let (member, cert, m, me, gid) = setup();
        let key = TrafficKey::derive(&[1; 32], &gid);
        let other = TrafficKey::derive(&[2; 32], &gid);
        let msg = Message::new()
            .with(Element::text("jxta", "a", "x"))
            .with(Element::bytes("juxta", "b", vec![0u8; 300]));
        let mut rng = rand::thread_rng();
        let s = seal(&member, &cert, Some(&key), "l", &msg, 5, &mut rng).unwrap();
        assert_eq!(open(&m, Some(&key), "l", &me, &s, 5).unwrap().1, msg);
        // Another key: does not decrypt.
        assert_eq!(
            open(&m, Some(&other), "l", &me, &s, 5).unwrap_err(),
            CertError::Undecryptable
        );
        // The plaintext is not in the sealed bytes.
        assert!(!s.windows(300).any(|w| w == [0u8; 300]));
        // From another peer: the certificate is not its.
        let you = PeerId::from_public_key_spki(b"y");
        assert_eq!(
            open(&m, Some(&key), "l", &you, &s, 5).unwrap_err(),
            CertError::WrongPeer
        );
        // Any flipped byte: refused, never a panic.
        for i in 0..s.len() {
            let mut t = s.clone();
            t[i] ^= 0x40;
            assert!(open(&m, Some(&key), "l", &me, &t, 5).is_err(), "byte {i}");
        }
        // Truncations.
        for n in 0..s.len() {
            assert!(open(&m, Some(&key), "l", &me, &s[..n], 5).is_err());
        }
        // In the clear where the group encrypts, and the reverse.
        let clear = seal(&member, &cert, None, "l", &msg, 5, &mut rng).unwrap();
        assert_eq!(
            open(&m, Some(&key), "l", &me, &clear, 5).unwrap_err(),
            CertError::NotSealed
        );
        assert_eq!(open(&m, None, "l", &me, &clear, 5).unwrap().1, msg);
        assert_eq!(
            open(&m, None, "l", &me, &s, 5).unwrap_err(),
            CertError::NotSealed
        );
    }
}
