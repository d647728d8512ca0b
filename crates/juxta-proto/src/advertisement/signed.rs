//! JXSE 2.7 advertisement signatures (digest §8.3).
//!
//! `Advertisement.sign()` appends two children inside the root:
//! `XMLSignatureInfo` (`digest`, `encodedkey`?, `peerid`?, `keyalgorithm`?,
//! `signaturealgorithm`) and `XMLSignature` (`digest`, `signature`), all
//! binary values in base64. The scheme, read from
//! `PSEMembershipService.signAdvertisement`/`validateAdvertisement`:
//!
//! 1. `XMLSignatureInfo/digest` = SHA-1 over the advertisement's element
//!    tree (name, attributes, text, children; see
//!    [`XmlElement`]), leaving out the two signature
//!    children;
//! 2. `XMLSignature/digest` = SHA-1 over the `XMLSignatureInfo` element;
//! 3. `XMLSignature/signature` = SHA1withRSA over those 20 digest bytes,
//!    with the key in `encodedkey` (an X.509 SubjectPublicKeyInfo).
//!
//! JXSE signs the route advertisement in router messages and route
//! queries and the peer advertisement in pipe-binding answers and BiDi
//! pipes; no JXSE receive path verifies. Juxta verifies whenever the
//! children are present and additionally checks that the key belongs to
//! the peer the document is about (its `cbid` peer ID is derived from the
//! key, digest §1.4), so a forged or mangled document is rejected with a
//! [`SignatureError`] instead of being cached.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use rsa::pkcs8::DecodePublicKey;
use rsa::{Pkcs1v15Sign, RsaPublicKey};
use sha1::{Digest, Sha1};

use super::tree::XmlElement;
use crate::id::PeerId;
use crate::identity::Identity;

/// The signature-info child.
pub const SIGNATURE_INFO: &str = "XMLSignatureInfo";
/// The signature child.
pub const SIGNATURE: &str = "XMLSignature";
/// The children left out of the advertisement digest.
pub const SIGNATURE_CHILDREN: [&str; 2] = [SIGNATURE_INFO, SIGNATURE];
/// The signature algorithm JXSE 2.7 uses.
pub const SHA1_WITH_RSA: &str = "SHA1withRSA";
/// Longest base64 value accepted in a signature child (an 8192-bit key's
/// SubjectPublicKeyInfo is about 1.4 KB in base64).
pub const MAX_B64_LEN: usize = 4096;

/// DER `DigestInfo` prefix for SHA-1 (RFC 8017 §9.2, note 1).
const SHA1_PREFIX: [u8; 15] = [
    0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00, 0x04, 0x14,
];

fn sha1_scheme() -> Pkcs1v15Sign {
    Pkcs1v15Sign {
        hash_len: Some(20),
        prefix: SHA1_PREFIX.to_vec().into_boxed_slice(),
    }
}

/// Why a signature was rejected (or could not be made).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// Only one of the two signature children, or a required field of
    /// one, is present.
    #[error("signature without <{0}>")]
    Missing(&'static str),
    /// A base64 field does not decode, is too long or has the wrong size.
    #[error("bad base64 in signature <{0}>")]
    BadBase64(&'static str),
    /// The `peerid` field is not a peer ID.
    #[error("bad peer ID in signature")]
    BadPeerId,
    /// The key or signature algorithm is not RSA / SHA1withRSA.
    #[error("unsupported signature algorithm {0:?}")]
    UnsupportedAlgorithm(String),
    /// The signature has no embedded key (JXSE would look the peer up in
    /// its key store; Juxta has none).
    #[error("signature without embedded public key")]
    NoKey,
    /// The embedded key is not a usable RSA SubjectPublicKeyInfo.
    #[error("malformed public key in signature")]
    BadKey,
    /// The document does not match the digest that was signed.
    #[error("advertisement digest does not match the signed digest")]
    DigestMismatch,
    /// `XMLSignatureInfo` does not match the digest in `XMLSignature`.
    #[error("signature info digest mismatch")]
    InfoDigestMismatch,
    /// The RSA signature does not verify.
    #[error("RSA signature does not verify")]
    BadSignature,
    /// The key belongs to another peer than the one named.
    #[error("signed by {found} but the document names {expected}")]
    SignerMismatch {
        /// The peer the document (or its `peerid`) names.
        expected: Box<PeerId>,
        /// The peer whose key signed it.
        found: Box<PeerId>,
    },
    /// The RSA library failed to sign.
    #[error("signing failed")]
    Sign,
}

/// A JXSE advertisement signature: the two children appended to a signed
/// document.
///
/// ```
/// use juxta_proto::advertisement::{signed, AdvSignature, XmlElement};
/// use juxta_proto::identity::Identity;
/// use rand::SeedableRng;
/// let me = Identity::generate(&mut rand::rngs::StdRng::seed_from_u64(1), 1024, "doc", 1_700_000_000).unwrap();
/// let mut doc = XmlElement::adv_root("jxta:APA");
/// doc.push_text("EA", "tcp://127.0.0.1:9701");
/// let sig = signed::sign(&doc, &me, true, true).unwrap();
/// assert_eq!(sig.verify(&doc).unwrap(), *me.peer_id());
/// doc.push_text("EA", "tcp://10.0.0.1:9701");
/// assert!(sig.verify(&doc).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvSignature {
    /// SHA-1 of the document without its signature children.
    pub digest: [u8; 20],
    /// The signer's SubjectPublicKeyInfo DER (`encodedkey`), if included.
    pub encoded_key: Option<Vec<u8>>,
    /// The signer's peer ID (`peerid`), if included.
    pub peer_id: Option<PeerId>,
    /// `keyalgorithm` (JXSE writes it with the key: `RSA`).
    pub key_algorithm: Option<String>,
    /// `signaturealgorithm` (`SHA1withRSA`).
    pub signature_algorithm: String,
    /// SHA-1 of the `XMLSignatureInfo` element.
    pub info_digest: [u8; 20],
    /// The RSA signature over `info_digest`.
    pub signature: Vec<u8>,
    /// The `XMLSignatureInfo` element as received (or as built).
    info: XmlElement,
}

/// Signs a document (its root element, without signature children) as
/// JXSE does, with the peer's RSA key. `include_key` embeds the public
/// key (needed by any verifier), `include_peer_id` the peer ID.
pub fn sign(
    doc: &XmlElement,
    identity: &Identity,
    include_key: bool,
    include_peer_id: bool,
) -> Result<AdvSignature, SignatureError> {
    let digest = doc.sha1(&SIGNATURE_CHILDREN);
    let mut sig = AdvSignature {
        digest,
        encoded_key: include_key.then(|| identity.spki_der().to_vec()),
        peer_id: include_peer_id.then(|| *identity.peer_id()),
        key_algorithm: include_key.then(|| "RSA".to_string()),
        signature_algorithm: SHA1_WITH_RSA.to_string(),
        info_digest: [0; 20],
        signature: Vec::new(),
        info: XmlElement::default(),
    };
    sig.info = sig.build_info();
    sig.info_digest = sig.info.sha1(&[]);
    // SHA1withRSA over the 20 info-digest bytes: SHA-1 of them, signed
    // (constant-time, by OpenSSL: see `Identity::sign_sha1_prehash`).
    let hashed: [u8; 20] = Sha1::digest(sig.info_digest).into();
    sig.signature = identity
        .sign_sha1_prehash(&hashed)
        .map_err(|_| SignatureError::Sign)?
        .to_vec();
    Ok(sig)
}

fn b64_field(e: &XmlElement, name: &'static str) -> Result<Option<Vec<u8>>, SignatureError> {
    let Some(c) = e.child(name) else {
        return Ok(None);
    };
    let text: String = c
        .text
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    if text.len() > MAX_B64_LEN {
        return Err(SignatureError::BadBase64(name));
    }
    B64.decode(text.as_bytes())
        .map(Some)
        .map_err(|_| SignatureError::BadBase64(name))
}

fn digest20(v: Option<Vec<u8>>, name: &'static str) -> Result<[u8; 20], SignatureError> {
    v.ok_or(SignatureError::Missing(name))?
        .try_into()
        .map_err(|_| SignatureError::BadBase64(name))
}

impl AdvSignature {
    /// The canonical `XMLSignatureInfo` element for these fields.
    fn build_info(&self) -> XmlElement {
        let mut e = XmlElement::new(SIGNATURE_INFO);
        e.push_text("digest", &B64.encode(self.digest));
        if let Some(k) = &self.encoded_key {
            e.push_text("encodedkey", &B64.encode(k));
        }
        if let Some(p) = &self.peer_id {
            e.push_text("peerid", &p.to_string());
        }
        if let Some(a) = &self.key_algorithm {
            e.push_text("keyalgorithm", a);
        }
        e.push_text("signaturealgorithm", &self.signature_algorithm);
        e
    }

    /// The `XMLSignatureInfo` child.
    pub fn info_element(&self) -> XmlElement {
        self.info.clone()
    }

    /// The `XMLSignature` child.
    pub fn signature_element(&self) -> XmlElement {
        let mut e = XmlElement::new(SIGNATURE);
        e.push_text("digest", &B64.encode(self.info_digest));
        e.push_text("signature", &B64.encode(&self.signature));
        e
    }

    /// Appends both children to a document root (`getSignedDocument`).
    pub fn append_to(&self, root: &mut XmlElement) {
        root.push(self.info_element());
        root.push(self.signature_element());
    }

    /// Reads the signature children of a root element: `Ok(None)` when
    /// the document is unsigned, an error when only one child is present
    /// or a field is malformed.
    pub fn from_root(root: &XmlElement) -> Result<Option<AdvSignature>, SignatureError> {
        let info = root.child(SIGNATURE_INFO);
        let sig = root.child(SIGNATURE);
        let (info, sig) = match (info, sig) {
            (None, None) => return Ok(None),
            (Some(i), Some(s)) => (i, s),
            (None, Some(_)) => return Err(SignatureError::Missing(SIGNATURE_INFO)),
            (Some(_), None) => return Err(SignatureError::Missing(SIGNATURE)),
        };
        let digest = digest20(b64_field(info, "digest")?, "digest")?;
        let encoded_key = b64_field(info, "encodedkey")?;
        let peer_id = match info.child("peerid") {
            Some(p) => Some(
                p.text
                    .trim()
                    .parse::<PeerId>()
                    .map_err(|_| SignatureError::BadPeerId)?,
            ),
            None => None,
        };
        let key_algorithm = info
            .child("keyalgorithm")
            .map(|e| e.text.trim().to_string());
        let signature_algorithm = info
            .child("signaturealgorithm")
            .ok_or(SignatureError::Missing("signaturealgorithm"))?
            .text
            .trim()
            .to_string();
        let info_digest = digest20(b64_field(sig, "digest")?, "digest")?;
        let signature = b64_field(sig, "signature")?.ok_or(SignatureError::Missing("signature"))?;
        Ok(Some(AdvSignature {
            digest,
            encoded_key,
            peer_id,
            key_algorithm,
            signature_algorithm,
            info_digest,
            signature,
            info: info.clone(),
        }))
    }

    /// Verifies the signature against a document (its canonical tree, as
    /// this crate regenerates it; signature children, if present, are
    /// ignored) and returns the peer ID derived from the signing key.
    /// A `peerid` field that names another peer is a
    /// [`SignatureError::SignerMismatch`].
    pub fn verify(&self, doc: &XmlElement) -> Result<PeerId, SignatureError> {
        if doc.sha1(&SIGNATURE_CHILDREN) != self.digest {
            return Err(SignatureError::DigestMismatch);
        }
        if self.info.sha1(&[]) != self.info_digest {
            return Err(SignatureError::InfoDigestMismatch);
        }
        if self.signature_algorithm != SHA1_WITH_RSA {
            return Err(SignatureError::UnsupportedAlgorithm(super::truncate(
                &self.signature_algorithm,
            )));
        }
        let key_der = self.encoded_key.as_deref().ok_or(SignatureError::NoKey)?;
        match self.key_algorithm.as_deref() {
            None | Some("RSA") => {}
            Some(other) => {
                return Err(SignatureError::UnsupportedAlgorithm(super::truncate(other)))
            }
        }
        let key = RsaPublicKey::from_public_key_der(key_der).map_err(|_| SignatureError::BadKey)?;
        key.verify(
            sha1_scheme(),
            &Sha1::digest(self.info_digest),
            &self.signature,
        )
        .map_err(|_| SignatureError::BadSignature)?;
        let signer = PeerId::from_public_key_spki(key_der);
        if let Some(named) = self.peer_id {
            if named != signer {
                return Err(SignatureError::SignerMismatch {
                    expected: Box::new(named),
                    found: Box::new(signer),
                });
            }
        }
        Ok(signer)
    }

    /// [`AdvSignature::verify`], then checks that the signer is `owner`
    /// (the peer the advertisement describes).
    pub fn verify_owner(&self, doc: &XmlElement, owner: &PeerId) -> Result<PeerId, SignatureError> {
        let signer = self.verify(doc)?;
        if signer != *owner {
            return Err(SignatureError::SignerMismatch {
                expected: Box::new(*owner),
                found: Box::new(signer),
            });
        }
        Ok(signer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::sync::OnceLock;

    pub(crate) fn identity(seed: u64) -> Identity {
        Identity::generate(
            &mut rand::rngs::StdRng::seed_from_u64(seed),
            1024,
            "t",
            1_700_000_000,
        )
        .unwrap()
    }

    fn me() -> &'static Identity {
        static ID: OnceLock<Identity> = OnceLock::new();
        ID.get_or_init(|| identity(7))
    }

    fn doc() -> XmlElement {
        let mut d = XmlElement::adv_root("jxta:APA");
        d.push_text("EA", "tcp://127.0.0.1:1");
        d
    }

    #[test]
    fn signature_is_unchanged_by_the_openssl_signer() {
        let s = sign(&doc(), me(), true, true).unwrap();
        let hashed: [u8; 20] = Sha1::digest(s.info_digest).into();
        assert_eq!(
            s.signature,
            crate::identity::reference::sign_sha1(me(), &hashed)
        );
    }

    #[test]
    fn sign_verify_round_trip_through_xml() {
        let d = doc();
        let s = sign(&d, me(), true, true).unwrap();
        let mut signed = d.clone();
        s.append_to(&mut signed);
        let xml = signed.to_document();
        let parsed = XmlElement::from_node(&crate::advertisement::parse_xml(&xml).unwrap());
        let s2 = AdvSignature::from_root(&parsed).unwrap().unwrap();
        assert_eq!(s2, s);
        assert_eq!(s2.verify(&parsed).unwrap(), *me().peer_id());
        assert_eq!(
            s2.verify_owner(&d, me().peer_id()).unwrap(),
            *me().peer_id()
        );
    }

    #[test]
    fn rejects_tampering() {
        let d = doc();
        let s = sign(&d, me(), true, true).unwrap();
        let mut other = d.clone();
        other.children[0].text.push('2');
        assert_eq!(s.verify(&other), Err(SignatureError::DigestMismatch));
        let mut bad = s.clone();
        bad.signature[5] ^= 1;
        assert_eq!(bad.verify(&d), Err(SignatureError::BadSignature));
        let mut bad = s.clone();
        bad.info.children[0].text.push('A');
        assert_eq!(bad.verify(&d), Err(SignatureError::InfoDigestMismatch));
        let no_key = sign(&d, me(), false, true).unwrap();
        assert_eq!(no_key.verify(&d), Err(SignatureError::NoKey));
        let stranger = *identity(8).peer_id();
        assert!(matches!(
            s.verify_owner(&d, &stranger),
            Err(SignatureError::SignerMismatch { .. })
        ));
    }

    #[test]
    fn rejects_half_or_malformed_signatures() {
        let d = doc();
        let s = sign(&d, me(), true, false).unwrap();
        let mut half = d.clone();
        half.push(s.info_element());
        assert_eq!(
            AdvSignature::from_root(&half),
            Err(SignatureError::Missing(SIGNATURE))
        );
        let mut junk = d.clone();
        junk.push(s.info_element());
        let mut se = s.signature_element();
        se.children[1].text = "!!!".into();
        junk.push(se);
        assert_eq!(
            AdvSignature::from_root(&junk),
            Err(SignatureError::BadBase64("signature"))
        );
        assert_eq!(AdvSignature::from_root(&d), Ok(None));
    }
}
