//! A peer's identity: an RSA key pair, its self-signed X.509 certificate and
//! the `cbid` peer ID JXSE 2.7 derives from it (digest §1.4), plus the
//! parsed certificate of a remote peer ([`RemoteCert`]).
//!
//! Nothing here does IO or reads a clock: the caller passes the random
//! number generator and the current time, and persists the PEM strings
//! returned by [`Identity::to_pem`].
//!
//! JXSE checks a CBJX signature with `Signature.initVerify(Certificate)`,
//! which rejects a certificate whose *critical* KeyUsage extension lacks
//! `digitalSignature`. Our certificates therefore carry KeyUsage
//! `digitalSignature | nonRepudiation` (x509-cert's leaf profile, with the
//! issuer set to the subject so that the certificate is self-signed), never
//! the CA profile's `keyCertSign | cRLSign`.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use der::asn1::{Any, ObjectIdentifier, SetOfVec};
use der::{Decode, DecodePem, Encode, EncodePem, Header, Reader, SliceReader, Tag};
use rand::{CryptoRng, RngCore};
use rsa::pkcs1v15::{Signature, SigningKey, VerifyingKey};
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::signature::hazmat::{PrehashSigner, PrehashVerifier};
use rsa::signature::SignatureEncoding;
use rsa::traits::PublicKeyParts;
use rsa::{BigUint, Pkcs1v15Sign, RsaPrivateKey, RsaPublicKey};
use sha2::{Digest, Sha256};
use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::builder::{Builder, CertificateBuilder, Profile};
use x509_cert::name::{Name, RdnSequence, RelativeDistinguishedName};
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::SubjectPublicKeyInfoOwned;
use x509_cert::time::{Time, Validity};
use x509_cert::Certificate;

use crate::id::PeerId;

/// Smallest RSA modulus, in bits, accepted for our own identity.
pub const MIN_KEY_BITS: usize = 1024;
/// Largest RSA modulus, in bits, accepted anywhere (own or remote keys).
pub const MAX_KEY_BITS: usize = 8192;
/// Largest DER certificate accepted from a remote peer or a PEM file.
pub const MAX_CERT_LEN: usize = 16 * 1024;
/// Largest PEM input (key or certificate) accepted by [`Identity::from_pem`].
pub const MAX_PEM_LEN: usize = 64 * 1024;
/// Longest common name accepted by [`Identity::generate`].
pub const MAX_COMMON_NAME_LEN: usize = 256;
/// The organisation JXSE writes in its certificates' subject and issuer.
pub const JXTA_ORGANIZATION: &str = "www.jxta.org";

/// How long before `now` a generated certificate becomes valid (one day,
/// to tolerate clock skew between peers).
const VALIDITY_BACKDATE_SECS: u64 = 24 * 60 * 60;
/// How long after `now` a generated certificate stays valid (20 years).
const VALIDITY_SECS: u64 = 20 * 365 * 24 * 60 * 60 + 5 * 24 * 60 * 60;
/// Random bytes in the subject's OU (JXSE writes 10 bytes, 20 hex digits).
const OU_RANDOM_BYTES: usize = 10;

const OID_ORGANIZATION: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
const OID_COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const OID_ORG_UNIT: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.11");
const OID_RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const OID_SHA1_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.5");
const OID_SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
/// DER `DigestInfo` prefix for SHA-1 (RFC 8017 §9.2, note 1).
const SHA1_DIGEST_INFO_PREFIX: [u8; 15] = [
    0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00, 0x04, 0x14,
];

/// Errors from creating, loading or checking identities and certificates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The RSA modulus size is outside the accepted range.
    #[error("RSA key of {bits} bits is outside {min}..={max}")]
    KeySize {
        /// The size requested or found.
        bits: usize,
        /// The smallest size accepted here.
        min: usize,
        /// The largest size accepted here.
        max: usize,
    },
    /// The RSA library failed to generate a key.
    #[error("RSA key generation failed")]
    KeyGeneration,
    /// The common name is too long to put in a certificate.
    #[error("common name of {len} bytes is too long")]
    CommonNameTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The validity period cannot be represented (the time is out of range).
    #[error("certificate validity out of range: {0}")]
    Validity(der::Error),
    /// The certificate builder failed.
    #[error("building the certificate failed")]
    CertBuild,
    /// A certificate is larger than [`MAX_CERT_LEN`] (or a PEM input larger
    /// than [`MAX_PEM_LEN`]).
    #[error("certificate or PEM input of {len} bytes is too large")]
    TooLarge {
        /// Its length in bytes.
        len: usize,
    },
    /// The certificate is not valid DER / PEM X.509.
    #[error("malformed certificate: {0}")]
    CertDecode(der::Error),
    /// Encoding a certificate or key failed.
    #[error("encoding failed: {0}")]
    Encode(der::Error),
    /// The private key PEM is not a valid PKCS#8 RSA private key.
    #[error("malformed PKCS#8 RSA private key")]
    PrivateKeyDecode,
    /// The certificate's public key is not an RSA key.
    #[error("certificate public key is not RSA")]
    NotRsa,
    /// The certificate's RSA public key is malformed.
    #[error("malformed RSA public key")]
    BadPublicKey,
    /// The certificate is signed with an algorithm other than
    /// sha1WithRSAEncryption or sha256WithRSAEncryption.
    #[error("unsupported certificate signature algorithm {0}")]
    UnsupportedSignatureAlgorithm(ObjectIdentifier),
    /// The signature algorithm inside the signed part differs from the
    /// outer one (Java rejects such certificates too).
    #[error("certificate signature algorithm mismatch")]
    SignatureAlgorithmMismatch,
    /// The certificate's signature does not verify with its own key.
    #[error("certificate is not self-signed")]
    NotSelfSigned,
    /// The certificate does not certify the private key it was paired with.
    #[error("certificate public key does not match the private key")]
    KeyMismatch,
    /// A signature does not verify.
    #[error("signature verification failed")]
    BadSignature,
}

/// This peer's identity: RSA private key, self-signed certificate and the
/// derived `cbid` peer ID.
///
/// ```
/// use juxta_proto::identity::{Identity, RemoteCert};
/// let mut rng = rand::thread_rng();
/// let me = Identity::generate(&mut rng, 1024, "Juxta", 1_700_000_000).unwrap();
/// let remote = RemoteCert::parse(me.cert_der().clone()).unwrap();
/// assert_eq!(remote.derived_peer_id(), me.peer_id());
/// let digest = [7u8; 32];
/// let sig = me.sign_sha256_prehash(&digest);
/// remote.verify_sha256_prehash(&digest, &sig).unwrap();
/// ```
#[derive(Clone)]
pub struct Identity {
    private_key: RsaPrivateKey,
    signing_key: SigningKey<Sha256>,
    cert_der: Bytes,
    spki_der: Bytes,
    peer_id: PeerId,
    peer_urn: Bytes,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("peer_id", &self.peer_id)
            .field("key_bits", &self.key_bits())
            .field("cert_len", &self.cert_der.len())
            .finish_non_exhaustive()
    }
}

fn check_bits(bits: usize, min: usize) -> Result<(), IdentityError> {
    if (min..=MAX_KEY_BITS).contains(&bits) {
        Ok(())
    } else {
        Err(IdentityError::KeySize {
            bits,
            min,
            max: MAX_KEY_BITS,
        })
    }
}

/// One single-valued RDN `oid = UTF8String(value)`.
fn rdn(oid: ObjectIdentifier, value: &str) -> Result<RelativeDistinguishedName, IdentityError> {
    let atv = AttributeTypeAndValue {
        oid,
        value: Any::new(Tag::Utf8String, value.as_bytes()).map_err(IdentityError::Encode)?,
    };
    let set = SetOfVec::try_from(vec![atv]).map_err(IdentityError::Encode)?;
    Ok(RelativeDistinguishedName(set))
}

/// A `Time` `secs` after the Unix epoch (the builder turns it into UTCTime
/// before 2050 as RFC 5280 requires).
fn time_at(secs: u64) -> Result<Time, IdentityError> {
    let dt = der::DateTime::from_unix_duration(Duration::from_secs(secs))
        .map_err(IdentityError::Validity)?;
    let gt = der::asn1::GeneralizedTime::from_date_time(dt);
    Ok(Time::GeneralTime(gt))
}

/// The SubjectPublicKeyInfo DER of an RSA key, encoded as Java's
/// `PublicKey.getEncoded()` does (rsaEncryption with NULL parameters).
fn rsa_spki_der(key: &RsaPublicKey) -> Result<Bytes, IdentityError> {
    key.to_public_key_der()
        .map(|d| Bytes::copy_from_slice(d.as_bytes()))
        .map_err(|_| IdentityError::BadPublicKey)
}

impl Identity {
    /// Generates a new RSA key of `bits` bits and a self-signed
    /// SHA256withRSA certificate for it, with subject = issuer =
    /// `O=www.jxta.org, CN=<common_name>-CA, OU=<20 random hex digits>`
    /// (JXSE's layout) and validity `[now - 1 day, now + 20 years]`.
    ///
    /// `now_unix_secs` is the current time (this crate reads no clock).
    /// The runtime uses 2048 bits; JXSE 2.7 itself uses 1024.
    pub fn generate(
        rng: &mut (impl CryptoRng + RngCore),
        bits: usize,
        common_name: &str,
        now_unix_secs: u64,
    ) -> Result<Identity, IdentityError> {
        check_bits(bits, MIN_KEY_BITS)?;
        let cn = format!("{common_name}-CA");
        if cn.len() > MAX_COMMON_NAME_LEN {
            return Err(IdentityError::CommonNameTooLong { len: cn.len() });
        }
        let validity = Validity {
            not_before: time_at(now_unix_secs.saturating_sub(VALIDITY_BACKDATE_SECS))?,
            not_after: time_at(now_unix_secs.saturating_add(VALIDITY_SECS))?,
        };
        let mut ou = [0u8; OU_RANDOM_BYTES];
        rng.fill_bytes(&mut ou);
        // DER order O, CN, OU, as in JXSE's certificates.
        let subject: Name = RdnSequence(vec![
            rdn(OID_ORGANIZATION, JXTA_ORGANIZATION)?,
            rdn(OID_COMMON_NAME, &cn)?,
            rdn(OID_ORG_UNIT, &hex::encode_upper(ou))?,
        ]);
        let mut serial = [0u8; 8];
        rng.fill_bytes(&mut serial);
        let serial = SerialNumber::from(u64::from_be_bytes(serial) >> 1 | 1);

        let private_key =
            RsaPrivateKey::new(rng, bits).map_err(|_| IdentityError::KeyGeneration)?;
        let signing_key = SigningKey::<Sha256>::new(private_key.clone());
        let spki_der = rsa_spki_der(&private_key.to_public_key())?;
        let spki = SubjectPublicKeyInfoOwned::from_der(&spki_der).map_err(IdentityError::Encode)?;
        let profile = Profile::Leaf {
            issuer: subject.clone(),
            enable_key_agreement: false,
            enable_key_encipherment: false,
        };
        let builder =
            CertificateBuilder::new(profile, serial, validity, subject, spki, &signing_key)
                .map_err(|_| IdentityError::CertBuild)?;
        let cert = builder
            .build::<Signature>()
            .map_err(|_| IdentityError::CertBuild)?;
        let cert_der = Bytes::from(cert.to_der().map_err(IdentityError::Encode)?);
        Ok(Identity::assemble(
            private_key,
            signing_key,
            cert_der,
            spki_der,
        ))
    }

    fn assemble(
        private_key: RsaPrivateKey,
        signing_key: SigningKey<Sha256>,
        cert_der: Bytes,
        spki_der: Bytes,
    ) -> Identity {
        let peer_id = PeerId::from_public_key_spki(&spki_der);
        let peer_urn = Bytes::from(peer_id.to_string());
        Identity {
            private_key,
            signing_key,
            cert_der,
            spki_der,
            peer_id,
            peer_urn,
        }
    }

    /// Serialises the identity: (PKCS#8 private key PEM, certificate PEM),
    /// both with `\n` line endings. The key PEM is unencrypted; store it
    /// with restrictive permissions.
    pub fn to_pem(&self) -> Result<(String, String), IdentityError> {
        let key_pem = self
            .private_key
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|_| IdentityError::PrivateKeyDecode)?;
        let cert = Certificate::from_der(&self.cert_der).map_err(IdentityError::CertDecode)?;
        let cert_pem = cert.to_pem(LineEnding::LF).map_err(IdentityError::Encode)?;
        Ok((key_pem.as_str().to_owned(), cert_pem))
    }

    /// Loads an identity saved with [`Identity::to_pem`]. The certificate
    /// must be a self-signed RSA certificate (SHA-1 or SHA-256) whose
    /// public key is the private key's ([`IdentityError::KeyMismatch`]
    /// otherwise).
    pub fn from_pem(key_pem: &str, cert_pem: &str) -> Result<Identity, IdentityError> {
        for len in [key_pem.len(), cert_pem.len()] {
            if len > MAX_PEM_LEN {
                return Err(IdentityError::TooLarge { len });
            }
        }
        let cert = Certificate::from_pem(cert_pem.as_bytes()).map_err(IdentityError::CertDecode)?;
        let cert_der = Bytes::from(cert.to_der().map_err(IdentityError::Encode)?);
        let remote = RemoteCert::parse(cert_der)?;
        let private_key =
            RsaPrivateKey::from_pkcs8_pem(key_pem).map_err(|_| IdentityError::PrivateKeyDecode)?;
        check_bits(private_key.size() * 8, MIN_KEY_BITS)?;
        if private_key.validate().is_err() {
            return Err(IdentityError::PrivateKeyDecode);
        }
        if &private_key.to_public_key() != remote.key.as_ref() {
            return Err(IdentityError::KeyMismatch);
        }
        let signing_key = SigningKey::<Sha256>::new(private_key.clone());
        Ok(Identity::assemble(
            private_key,
            signing_key,
            remote.der,
            remote.spki_der,
        ))
    }

    /// The `cbid` peer ID derived from the certificate's public key.
    pub fn peer_id(&self) -> &PeerId {
        &self.peer_id
    }

    /// The peer ID as ASCII `urn:jxta:cbid-…` (canonical upper-case hex),
    /// exactly as written in a CBJX trailer's `src` field.
    pub fn peer_urn(&self) -> &Bytes {
        &self.peer_urn
    }

    /// The self-signed certificate, DER.
    pub fn cert_der(&self) -> &Bytes {
        &self.cert_der
    }

    /// The public key's SubjectPublicKeyInfo, DER (the seed of the peer ID).
    pub fn spki_der(&self) -> &Bytes {
        &self.spki_der
    }

    /// The RSA modulus size in bits.
    pub fn key_bits(&self) -> usize {
        self.private_key.size() * 8
    }

    /// The signing key (RSA PKCS#1 v1.5 with SHA-256), e.g. for a
    /// streaming `DigestSigner` or a blinded `RandomizedDigestSigner`.
    pub fn signing_key(&self) -> &SigningKey<Sha256> {
        &self.signing_key
    }

    /// Signs a SHA-256 digest computed by the caller (SHA256withRSA,
    /// PKCS#1 v1.5), so non-contiguous buffers can be hashed without
    /// copying them. Returns a signature as long as the modulus.
    ///
    /// Signing cannot fail for the key sizes an [`Identity`] accepts; should
    /// the RSA library ever report an error, the result is empty and every
    /// verifier rejects it.
    pub fn sign_sha256_prehash(&self, digest: &[u8; 32]) -> Bytes {
        match self.signing_key.sign_prehash(digest) {
            Ok(sig) => Bytes::from(sig.to_vec()),
            Err(_) => Bytes::new(),
        }
    }
}

/// A remote peer's certificate, parsed and checked to be self-signed.
///
/// Accepts JXSE's certificates (RSA, sha1WithRSAEncryption) and ours
/// (sha256WithRSAEncryption). The validity period is not checked (JXSE does
/// not check it either).
#[derive(Clone)]
pub struct RemoteCert {
    der: Bytes,
    spki_der: Bytes,
    key: VerifyingKey<Sha256>,
    derived_peer_id: PeerId,
}

impl fmt::Debug for RemoteCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteCert")
            .field("derived_peer_id", &self.derived_peer_id)
            .field("key_bits", &(self.key.as_ref().size() * 8))
            .field("der_len", &self.der.len())
            .finish()
    }
}

/// The exact bytes of the `tbsCertificate` TLV inside a certificate.
fn raw_tbs(der: &[u8]) -> Result<&[u8], der::Error> {
    let mut r = SliceReader::new(der)?;
    let header = Header::decode(&mut r)?;
    header.tag.assert_eq(Tag::Sequence)?;
    r.tlv_bytes()
}

impl RemoteCert {
    /// Parses a DER certificate (at most [`MAX_CERT_LEN`] bytes, RSA key
    /// of at most [`MAX_KEY_BITS`] bits) and checks that it is self-signed
    /// with sha1WithRSAEncryption or sha256WithRSAEncryption. The peer ID
    /// is derived as JXSE does (digest §1.4).
    pub fn parse(der: Bytes) -> Result<RemoteCert, IdentityError> {
        if der.len() > MAX_CERT_LEN {
            return Err(IdentityError::TooLarge { len: der.len() });
        }
        let cert = Certificate::from_der(&der).map_err(IdentityError::CertDecode)?;
        let tbs = &cert.tbs_certificate;

        let spki = &tbs.subject_public_key_info;
        if spki.algorithm.oid != OID_RSA_ENCRYPTION {
            return Err(IdentityError::NotRsa);
        }
        let key_bytes = spki
            .subject_public_key
            .as_bytes()
            .ok_or(IdentityError::BadPublicKey)?;
        let pkcs1 = rsa::pkcs1::RsaPublicKey::from_der(key_bytes)
            .map_err(|_| IdentityError::BadPublicKey)?;
        let n = pkcs1.modulus.as_bytes();
        // Bound the modulus before any big-number arithmetic.
        let bits = match n.first() {
            Some(b) => n.len() * 8 - b.leading_zeros() as usize,
            None => 0,
        };
        check_bits(bits, 0)?;
        let public_key = RsaPublicKey::new_with_max_size(
            BigUint::from_bytes_be(n),
            BigUint::from_bytes_be(pkcs1.public_exponent.as_bytes()),
            MAX_KEY_BITS,
        )
        .map_err(|_| IdentityError::BadPublicKey)?;

        let alg = cert.signature_algorithm.oid;
        if tbs.signature != cert.signature_algorithm {
            return Err(IdentityError::SignatureAlgorithmMismatch);
        }
        let sig = cert
            .signature
            .as_bytes()
            .ok_or(IdentityError::NotSelfSigned)?;
        let tbs_bytes = raw_tbs(&der).map_err(IdentityError::CertDecode)?;
        let self_signed = if alg == OID_SHA1_WITH_RSA {
            let scheme = Pkcs1v15Sign {
                hash_len: Some(20),
                prefix: SHA1_DIGEST_INFO_PREFIX.to_vec().into_boxed_slice(),
            };
            public_key.verify(scheme, &sha1::Sha1::digest(tbs_bytes), sig)
        } else if alg == OID_SHA256_WITH_RSA {
            public_key.verify(
                Pkcs1v15Sign::new::<Sha256>(),
                &Sha256::digest(tbs_bytes),
                sig,
            )
        } else {
            return Err(IdentityError::UnsupportedSignatureAlgorithm(alg));
        };
        if self_signed.is_err() {
            return Err(IdentityError::NotSelfSigned);
        }

        let spki_der = rsa_spki_der(&public_key)?;
        let derived_peer_id = PeerId::from_public_key_spki(&spki_der);
        Ok(RemoteCert {
            der,
            spki_der,
            key: VerifyingKey::<Sha256>::new(public_key),
            derived_peer_id,
        })
    }

    /// The certificate, DER, as received.
    pub fn der(&self) -> &Bytes {
        &self.der
    }

    /// The public key's SubjectPublicKeyInfo DER, as Java's
    /// `PublicKey.getEncoded()` gives it.
    pub fn spki_der(&self) -> &Bytes {
        &self.spki_der
    }

    /// The `cbid` peer ID JXSE derives from this certificate's key.
    pub fn derived_peer_id(&self) -> &PeerId {
        &self.derived_peer_id
    }

    /// The RSA modulus size in bits.
    pub fn key_bits(&self) -> usize {
        self.key.as_ref().size() * 8
    }

    /// The SHA256withRSA verifying key.
    pub fn verifying_key(&self) -> &VerifyingKey<Sha256> {
        &self.key
    }

    /// Verifies a SHA256withRSA (PKCS#1 v1.5) signature over a SHA-256
    /// digest computed by the caller.
    pub fn verify_sha256_prehash(
        &self,
        digest: &[u8; 32],
        sig: &[u8],
    ) -> Result<(), IdentityError> {
        let sig = Signature::try_from(sig).map_err(|_| IdentityError::BadSignature)?;
        self.key
            .verify_prehash(digest, &sig)
            .map_err(|_| IdentityError::BadSignature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::sync::OnceLock;

    fn identity() -> &'static Identity {
        static ID: OnceLock<Identity> = OnceLock::new();
        ID.get_or_init(|| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(42);
            Identity::generate(&mut rng, 1024, "JuxtaTest", 1_700_000_000).unwrap()
        })
    }

    #[test]
    fn generated_certificate_looks_like_jxse() {
        let me = identity();
        assert_eq!(me.key_bits(), 1024);
        let cert = Certificate::from_der(me.cert_der()).unwrap();
        let tbs = &cert.tbs_certificate;
        assert_eq!(tbs.subject, tbs.issuer);
        let rdns: Vec<String> = tbs.subject.0.iter().map(|r| r.to_string()).collect();
        assert_eq!(rdns[0], "O=www.jxta.org");
        assert_eq!(rdns[1], "CN=JuxtaTest-CA");
        assert!(rdns[2].starts_with("OU=") && rdns[2].len() == 3 + 2 * OU_RANDOM_BYTES);
        assert_eq!(cert.signature_algorithm.oid, OID_SHA256_WITH_RSA);
        assert_eq!(
            tbs.validity.not_before.to_unix_duration().as_secs(),
            1_700_000_000 - VALIDITY_BACKDATE_SECS
        );
        assert_eq!(
            tbs.validity.not_after.to_unix_duration().as_secs(),
            1_700_000_000 + VALIDITY_SECS
        );
        // KeyUsage must include digitalSignature (Java's initVerify(Certificate)).
        let ku = tbs
            .extensions
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.extn_id == ObjectIdentifier::new_unwrap("2.5.29.15"))
            .unwrap();
        let ku = x509_cert::ext::pkix::KeyUsage::from_der(ku.extn_value.as_bytes()).unwrap();
        assert!(ku.digital_signature());
        assert!(!ku.key_cert_sign());
        // The cert's SPKI is the one the peer ID is derived from.
        assert_eq!(
            tbs.subject_public_key_info.to_der().unwrap(),
            me.spki_der().to_vec()
        );
        assert_eq!(me.peer_id(), &PeerId::from_public_key_spki(me.spki_der()));
        assert_eq!(&me.peer_urn()[..], me.peer_id().to_string().as_bytes());
        assert!(format!("{me:?}").contains("cbid-"));
    }

    #[test]
    fn remote_cert_of_own_identity() {
        let me = identity();
        let remote = RemoteCert::parse(me.cert_der().clone()).unwrap();
        assert_eq!(remote.derived_peer_id(), me.peer_id());
        assert_eq!(remote.spki_der(), me.spki_der());
        assert_eq!(remote.key_bits(), 1024);
        let digest: [u8; 32] = Sha256::digest(b"hello").into();
        let sig = me.sign_sha256_prehash(&digest);
        assert_eq!(sig.len(), 128);
        remote.verify_sha256_prehash(&digest, &sig).unwrap();
        let mut other = digest;
        other[0] ^= 1;
        assert_eq!(
            remote.verify_sha256_prehash(&other, &sig),
            Err(IdentityError::BadSignature)
        );
        assert_eq!(
            remote.verify_sha256_prehash(&digest, &sig[1..]),
            Err(IdentityError::BadSignature)
        );
        assert_eq!(
            remote.verify_sha256_prehash(&digest, &[]),
            Err(IdentityError::BadSignature)
        );
    }

    #[test]
    fn pem_round_trip_and_mismatch() {
        let me = identity();
        let (key_pem, cert_pem) = me.to_pem().unwrap();
        assert!(key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let back = Identity::from_pem(&key_pem, &cert_pem).unwrap();
        assert_eq!(back.peer_id(), me.peer_id());
        assert_eq!(back.cert_der(), me.cert_der());
        assert_eq!(back.spki_der(), me.spki_der());
        let digest = [3u8; 32];
        assert_eq!(
            back.sign_sha256_prehash(&digest),
            me.sign_sha256_prehash(&digest)
        );

        let mut rng = rand::rngs::StdRng::seed_from_u64(43);
        let other = Identity::generate(&mut rng, 1024, "Other", 1_700_000_000).unwrap();
        let (other_key, other_cert) = other.to_pem().unwrap();
        assert_eq!(
            Identity::from_pem(&other_key, &cert_pem).unwrap_err(),
            IdentityError::KeyMismatch
        );
        assert_eq!(
            Identity::from_pem(&key_pem, &other_cert).unwrap_err(),
            IdentityError::KeyMismatch
        );
        assert_eq!(
            Identity::from_pem("garbage", &cert_pem).unwrap_err(),
            IdentityError::PrivateKeyDecode
        );
        assert!(matches!(
            Identity::from_pem(&key_pem, "garbage"),
            Err(IdentityError::CertDecode(_))
        ));
        let huge = "A".repeat(MAX_PEM_LEN + 1);
        assert!(matches!(
            Identity::from_pem(&huge, &cert_pem),
            Err(IdentityError::TooLarge { .. })
        ));
    }

    #[test]
    fn generate_bounds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        assert!(matches!(
            Identity::generate(&mut rng, 512, "x", 0),
            Err(IdentityError::KeySize { bits: 512, .. })
        ));
        assert!(matches!(
            Identity::generate(&mut rng, 16384, "x", 0),
            Err(IdentityError::KeySize { bits: 16384, .. })
        ));
        assert!(matches!(
            Identity::generate(&mut rng, 1024, &"n".repeat(300), 0),
            Err(IdentityError::CommonNameTooLong { .. })
        ));
        assert!(matches!(
            Identity::generate(&mut rng, 1024, "x", u64::MAX),
            Err(IdentityError::Validity(_))
        ));
    }

    #[test]
    fn remote_cert_rejects_bad_input() {
        let der = identity().cert_der().clone();
        assert!(matches!(
            RemoteCert::parse(Bytes::new()),
            Err(IdentityError::CertDecode(_))
        ));
        assert!(matches!(
            RemoteCert::parse(Bytes::from(vec![0u8; MAX_CERT_LEN + 1])),
            Err(IdentityError::TooLarge { .. })
        ));
        // A broken signature is not self-signed.
        let mut t = der.to_vec();
        let last = t.len() - 1;
        t[last] ^= 1;
        assert_eq!(
            RemoteCert::parse(Bytes::from(t)).unwrap_err(),
            IdentityError::NotSelfSigned
        );
        // Trailing garbage after the certificate.
        let mut t = der.to_vec();
        t.push(0);
        assert!(matches!(
            RemoteCert::parse(Bytes::from(t)),
            Err(IdentityError::CertDecode(_))
        ));
        // Every single-byte change is rejected, and none panics.
        for i in 0..der.len() {
            let mut t = der.to_vec();
            t[i] ^= 0x80;
            assert!(RemoteCert::parse(Bytes::from(t)).is_err(), "byte {i}");
        }
        // Random bytes never panic.
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for len in 0..400 {
            let mut b = vec![0u8; len];
            rng.fill_bytes(&mut b);
            if len > 4 {
                b[0] = 0x30;
                b[1] = 0x82;
            }
            assert!(RemoteCert::parse(Bytes::from(b)).is_err());
        }
    }
}
