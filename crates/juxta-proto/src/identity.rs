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
//!
//! # Private-key operations
//!
//! Every signature made with our private key (CBJX trailers, the compact
//! handshake, router fingerprints, SHA1withRSA advertisement signatures and
//! the certificate's own self-signature) is computed by OpenSSL (the
//! `openssl` crate over the system libcrypto), whose RSA private-key
//! operation is constant-time and blinded. The RustCrypto `rsa` crate, whose
//! big-number arithmetic is not constant-time (RUSTSEC-2023-0071, the
//! "Marvin" timing side channel), is used only for work on public data
//! (parsing certificates and verifying signatures) and to generate a new key
//! once, locally, before it is handed to OpenSSL as PKCS#8 DER. (The
//! Marvin findings against OpenSSL itself concern the PKCS#1 v1.5
//! *decryption* padding check; signing has none, and Juxta never decrypts
//! with RSA.)
//!
//! `ring` and `aws-lc-rs` were considered and cannot do the whole job:
//! neither signs SHA1withRSA (JXSE's advertisement signature), `ring`
//! hashes the message itself (no prehash API, while CBJX digests are
//! streamed over non-contiguous pieces), and both refuse RSA keys under
//! 2048 bits, which JXSE 2.7 itself generates (1024 bits) and
//! [`MIN_KEY_BITS`] accepts.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use der::asn1::{Any, ObjectIdentifier, SetOfVec};
use der::SecretDocument;
use der::{Decode, DecodePem, Encode, EncodePem, Header, Reader, SliceReader, Tag};
use openssl::md::{Md, MdRef};
use openssl::pkey::{PKey, Private, Public};
use openssl::pkey_ctx::PkeyCtx;
use rand::{CryptoRng, RngCore};
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::signature::{Keypair, Signer};
use rsa::traits::PublicKeyParts;
use rsa::{BigUint, Pkcs1v15Sign, RsaPrivateKey, RsaPublicKey};
use sha2::{Digest, Sha256};
use spki::{AlgorithmIdentifierRef, SignatureAlgorithmIdentifier};
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

/// DER `DigestInfo` prefix for SHA-256 (RFC 8017 §9.2, note 1).
const SHA256_DIGEST_INFO_PREFIX: [u8; 19] = [
    0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05,
    0x00, 0x04, 0x20,
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
    /// A DER element of the certificate claims more bytes than its
    /// enclosing element holds (refused before decoding: the decoder would
    /// allocate the claimed length first).
    #[error("malformed certificate: DER length beyond its enclosing element")]
    CertDerLength,
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
    /// The private-key operation failed (OpenSSL reported an error).
    #[error("RSA signing failed")]
    Signing,
}

/// This peer's identity: RSA private key, self-signed certificate and the
/// derived `cbid` peer ID.
///
/// The private key lives in OpenSSL and signs in constant time (see the
/// [module documentation](self#private-key-operations)); its PKCS#8 encoding
/// is kept in a buffer that is zeroed when the identity is dropped.
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
    private_key: PrivateKey,
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

/// The private key, held by OpenSSL, whose RSA private-key operation is
/// constant-time with blinding (unlike the `rsa` crate's, RUSTSEC-2023-0071).
#[derive(Clone)]
struct PrivateKey {
    pkey: PKey<Private>,
    /// The PKCS#8 DER the key was loaded from (zeroed on drop).
    pkcs8: SecretDocument,
    /// The public half, as the `rsa` crate's type (for the SPKI encoding
    /// and the comparison with a certificate).
    public: RsaPublicKey,
    bits: usize,
}

impl PrivateKey {
    /// Loads an unencrypted PKCS#8 RSA private key into OpenSSL and checks
    /// its size and consistency.
    fn from_pkcs8(pkcs8: SecretDocument) -> Result<PrivateKey, IdentityError> {
        let pkey = PKey::private_key_from_pkcs8(pkcs8.as_bytes())
            .map_err(|_| IdentityError::PrivateKeyDecode)?;
        let rsa = pkey.rsa().map_err(|_| IdentityError::PrivateKeyDecode)?;
        let bits = usize::try_from(pkey.bits()).map_err(|_| IdentityError::PrivateKeyDecode)?;
        check_bits(bits, MIN_KEY_BITS)?;
        if !rsa.check_key().unwrap_or(false) {
            return Err(IdentityError::PrivateKeyDecode);
        }
        let public = RsaPublicKey::new_with_max_size(
            BigUint::from_bytes_be(&rsa.n().to_vec()),
            BigUint::from_bytes_be(&rsa.e().to_vec()),
            MAX_KEY_BITS,
        )
        .map_err(|_| IdentityError::PrivateKeyDecode)?;
        Ok(PrivateKey {
            pkey,
            pkcs8,
            public,
            bits,
        })
    }

    /// RSASSA-PKCS1-v1_5 over a digest computed by the caller with `md`:
    /// `DigestInfo(md, digest)`, padded, raised to the private exponent.
    fn sign_prehash(&self, md: &MdRef, digest: &[u8]) -> Result<Vec<u8>, IdentityError> {
        let sign = || -> Result<Vec<u8>, openssl::error::ErrorStack> {
            let mut ctx = PkeyCtx::new(&self.pkey)?;
            ctx.sign_init()?;
            ctx.set_rsa_padding(openssl::rsa::Padding::PKCS1)?;
            ctx.set_signature_md(md)?;
            let mut sig = Vec::with_capacity(self.bits.div_ceil(8));
            ctx.sign_to_vec(digest, &mut sig)?;
            Ok(sig)
        };
        sign().map_err(|_| IdentityError::Signing)
    }
}

/// Signs a certificate's `tbsCertificate` (SHA256withRSA) with a
/// [`PrivateKey`], for x509-cert's [`CertificateBuilder`].
struct CertSigner<'a> {
    key: &'a PrivateKey,
    verifying_key: VerifyingKey<Sha256>,
}

impl Keypair for CertSigner<'_> {
    type VerifyingKey = VerifyingKey<Sha256>;

    fn verifying_key(&self) -> VerifyingKey<Sha256> {
        self.verifying_key.clone()
    }
}

impl SignatureAlgorithmIdentifier for CertSigner<'_> {
    type Params = der::asn1::AnyRef<'static>;

    // sha256WithRSAEncryption with NULL parameters, as the `rsa` crate's
    // signing key (and Java) encode it.
    const SIGNATURE_ALGORITHM_IDENTIFIER: AlgorithmIdentifierRef<'static> =
        AlgorithmIdentifierRef {
            oid: OID_SHA256_WITH_RSA,
            parameters: Some(der::asn1::AnyRef::NULL),
        };
}

impl Signer<Signature> for CertSigner<'_> {
    fn try_sign(&self, msg: &[u8]) -> Result<Signature, rsa::signature::Error> {
        let digest = Sha256::digest(msg);
        let sig = self
            .key
            .sign_prehash(Md::sha256(), &digest)
            .map_err(|_| rsa::signature::Error::new())?;
        Signature::try_from(&sig[..])
    }
}

/// Decodes a `-----BEGIN PRIVATE KEY-----` (unencrypted PKCS#8) PEM.
fn pkcs8_from_pem(key_pem: &str) -> Result<SecretDocument, IdentityError> {
    if key_pem.len() > MAX_PEM_LEN {
        return Err(IdentityError::TooLarge { len: key_pem.len() });
    }
    match SecretDocument::from_pem(key_pem) {
        Ok(("PRIVATE KEY", doc)) => Ok(doc),
        _ => Err(IdentityError::PrivateKeyDecode),
    }
}

impl Identity {
    /// Generates a new RSA key of `bits` bits and a self-signed
    /// SHA256withRSA certificate for it, with subject = issuer =
    /// `O=www.jxta.org, CN=<common_name>-CA, OU=<20 random hex digits>`
    /// (JXSE's layout) and validity `[now - 1 day, now + 20 years]`.
    ///
    /// `now_unix_secs` is the current time (this crate reads no clock).
    /// The runtime uses 2048 bits; JXSE 2.7 itself uses 1024.
    ///
    /// The key is generated by the `rsa` crate (locally, once; nothing a
    /// remote peer sends reaches it) and then loaded into OpenSSL, which
    /// makes every signature, the certificate's included.
    pub fn generate(
        rng: &mut (impl CryptoRng + RngCore),
        bits: usize,
        common_name: &str,
        now_unix_secs: u64,
    ) -> Result<Identity, IdentityError> {
        check_bits(bits, MIN_KEY_BITS)?;
        // Checked before the (slow) key generation, and again below.
        Identity::validity(common_name, now_unix_secs)?;
        let mut ou = [0u8; OU_RANDOM_BYTES];
        rng.fill_bytes(&mut ou);
        let mut serial = [0u8; 8];
        rng.fill_bytes(&mut serial);
        let pkcs8 = RsaPrivateKey::new(rng, bits)
            .map_err(|_| IdentityError::KeyGeneration)?
            .to_pkcs8_der()
            .map_err(|_| IdentityError::KeyGeneration)?;
        let private_key = PrivateKey::from_pkcs8(pkcs8)?;
        Identity::self_signed(private_key, common_name, now_unix_secs, ou, serial)
    }

    /// Loads a private key saved with [`Identity::to_pem`] whose certificate
    /// was lost, and issues a new self-signed certificate for it (as
    /// [`Identity::generate`] does: same subject layout, validity from
    /// `now_unix_secs`). The peer ID is derived from the key, so it is the
    /// same as before.
    ///
    /// ```
    /// use juxta_proto::identity::Identity;
    /// let mut rng = rand::thread_rng();
    /// let me = Identity::generate(&mut rng, 1024, "Juxta", 1_700_000_000).unwrap();
    /// let (key_pem, _lost_cert) = me.to_pem().unwrap();
    /// let again = Identity::from_key_pem(&mut rng, &key_pem, "Juxta", 1_800_000_000).unwrap();
    /// assert_eq!(again.peer_id(), me.peer_id());
    /// ```
    pub fn from_key_pem(
        rng: &mut (impl CryptoRng + RngCore),
        key_pem: &str,
        common_name: &str,
        now_unix_secs: u64,
    ) -> Result<Identity, IdentityError> {
        let private_key = PrivateKey::from_pkcs8(pkcs8_from_pem(key_pem)?)?;
        let mut ou = [0u8; OU_RANDOM_BYTES];
        rng.fill_bytes(&mut ou);
        let mut serial = [0u8; 8];
        rng.fill_bytes(&mut serial);
        Identity::self_signed(private_key, common_name, now_unix_secs, ou, serial)
    }

    /// The certificate's validity period and common name for `generate`.
    fn validity(
        common_name: &str,
        now_unix_secs: u64,
    ) -> Result<(String, Validity), IdentityError> {
        let cn = format!("{common_name}-CA");
        if cn.len() > MAX_COMMON_NAME_LEN {
            return Err(IdentityError::CommonNameTooLong { len: cn.len() });
        }
        let validity = Validity {
            not_before: time_at(now_unix_secs.saturating_sub(VALIDITY_BACKDATE_SECS))?,
            not_after: time_at(now_unix_secs.saturating_add(VALIDITY_SECS))?,
        };
        Ok((cn, validity))
    }

    /// Issues the self-signed certificate of `private_key`.
    fn self_signed(
        private_key: PrivateKey,
        common_name: &str,
        now_unix_secs: u64,
        ou: [u8; OU_RANDOM_BYTES],
        serial: [u8; 8],
    ) -> Result<Identity, IdentityError> {
        let (cn, validity) = Identity::validity(common_name, now_unix_secs)?;
        // DER order O, CN, OU, as in JXSE's certificates.
        let subject: Name = RdnSequence(vec![
            rdn(OID_ORGANIZATION, JXTA_ORGANIZATION)?,
            rdn(OID_COMMON_NAME, &cn)?,
            rdn(OID_ORG_UNIT, &hex::encode_upper(ou))?,
        ]);
        let serial = SerialNumber::from(u64::from_be_bytes(serial) >> 1 | 1);

        let spki_der = rsa_spki_der(&private_key.public)?;
        let spki = SubjectPublicKeyInfoOwned::from_der(&spki_der).map_err(IdentityError::Encode)?;
        let profile = Profile::Leaf {
            issuer: subject.clone(),
            enable_key_agreement: false,
            enable_key_encipherment: false,
        };
        let signer = CertSigner {
            key: &private_key,
            verifying_key: VerifyingKey::new(private_key.public.clone()),
        };
        let builder = CertificateBuilder::new(profile, serial, validity, subject, spki, &signer)
            .map_err(|_| IdentityError::CertBuild)?;
        let cert = builder
            .build::<Signature>()
            .map_err(|_| IdentityError::CertBuild)?;
        let cert_der = Bytes::from(cert.to_der().map_err(IdentityError::Encode)?);
        Ok(Identity::assemble(private_key, cert_der, spki_der))
    }

    fn assemble(private_key: PrivateKey, cert_der: Bytes, spki_der: Bytes) -> Identity {
        let peer_id = PeerId::from_public_key_spki(&spki_der);
        let peer_urn = Bytes::from(peer_id.to_string());
        Identity {
            private_key,
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
            .pkcs8
            .to_pem("PRIVATE KEY", LineEnding::LF)
            .map_err(IdentityError::Encode)?;
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
        let private_key = PrivateKey::from_pkcs8(pkcs8_from_pem(key_pem)?)?;
        if &private_key.public != remote.key.as_ref() {
            return Err(IdentityError::KeyMismatch);
        }
        Ok(Identity::assemble(private_key, remote.der, remote.spki_der))
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
        self.private_key.bits
    }

    /// The private key, unencrypted PKCS#8 DER, e.g. for a TLS library's
    /// signer. Secret: do not log or send it.
    pub fn private_key_pkcs8_der(&self) -> &[u8] {
        self.private_key.pkcs8.as_bytes()
    }

    /// Signs a SHA-256 digest computed by the caller (SHA256withRSA,
    /// PKCS#1 v1.5), so non-contiguous buffers can be hashed without
    /// copying them. Returns a signature as long as the modulus.
    ///
    /// Signing cannot fail for the key sizes an [`Identity`] accepts; should
    /// the RSA library ever report an error, the result is empty and every
    /// verifier rejects it.
    ///
    /// The private-key operation is OpenSSL's (constant-time, blinded).
    pub fn sign_sha256_prehash(&self, digest: &[u8; 32]) -> Bytes {
        match self.private_key.sign_prehash(Md::sha256(), digest) {
            Ok(sig) => Bytes::from(sig),
            Err(_) => Bytes::new(),
        }
    }

    /// Signs a SHA-1 digest computed by the caller (SHA1withRSA, PKCS#1
    /// v1.5), as JXSE 2.7 signs advertisements
    /// ([`advertisement::signed`](crate::advertisement::signed)). Returns a
    /// signature as long as the modulus.
    ///
    /// The private-key operation is OpenSSL's (constant-time, blinded).
    /// SHA-1 is used only because JXSE requires it.
    pub fn sign_sha1_prehash(&self, digest: &[u8; 20]) -> Result<Bytes, IdentityError> {
        self.private_key
            .sign_prehash(Md::sha1(), digest)
            .map(Bytes::from)
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
    /// The same public key in OpenSSL, which verifies message signatures
    /// several times faster than the `rsa` crate (one CBJX verification
    /// per received JXTA message).
    ossl: openssl::rsa::Rsa<Public>,
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

/// Deepest DER nesting [`der_lengths_fit`] follows (X.509 needs about 8).
const MAX_DER_DEPTH: usize = 32;

/// Whether no DER element in `b` claims more bytes than its enclosing
/// element holds, recursively into constructed elements, at most
/// [`MAX_DER_DEPTH`] deep. Only tags and lengths are read; a malformed
/// header (cut short, indefinite or over-long length) ends the walk with
/// `true`, since the decoder refuses it before allocating anything.
fn der_lengths_fit(mut b: &[u8], depth: usize) -> bool {
    if depth > MAX_DER_DEPTH {
        return false;
    }
    while let Some((&tag, rest)) = b.split_first() {
        b = rest;
        if tag & 0x1f == 0x1f {
            // High tag number: base-128 continuation bytes (at most 4).
            let n = b.iter().take_while(|&&x| x & 0x80 != 0).count() + 1;
            if n > 4 || n > b.len() {
                return true;
            }
            b = &b[n..];
        }
        let Some((&first, rest)) = b.split_first() else {
            return true;
        };
        b = rest;
        let len = if first < 0x80 {
            first as usize
        } else {
            let n = (first & 0x7f) as usize;
            // 0x80 is the indefinite length (not DER); over 4 bytes is more
            // than `der` reads: both are refused by the decoder as such.
            if n == 0 || n > 4 || n > b.len() {
                return true;
            }
            let len = b[..n]
                .iter()
                .fold(0usize, |acc, &x| (acc << 8) | x as usize);
            b = &b[n..];
            len
        };
        if len > b.len() {
            return false;
        }
        let (value, rest) = b.split_at(len);
        if tag & 0x20 != 0 && !der_lengths_fit(value, depth + 1) {
            return false;
        }
        b = rest;
    }
    true
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
        // `der` 0.7 allocates an owned field's claimed length before
        // reading it: a 2 KiB certificate claiming a 50 MB extension value
        // cost 50 MB. Every length must fit its parent first.
        if !der_lengths_fit(&der, 0) {
            return Err(IdentityError::CertDerLength);
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
        // The SPKI is our own re-encoding of a key whose size was bounded
        // above, so OpenSSL parses exactly the key the `rsa` crate checked.
        let ossl = PKey::public_key_from_der(&spki_der)
            .and_then(|k| k.rsa())
            .map_err(|_| IdentityError::BadPublicKey)?;
        Ok(RemoteCert {
            der,
            spki_der,
            key: VerifyingKey::<Sha256>::new(public_key),
            ossl,
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
        // What RSA_verify does, without OpenSSL 3's per-call context and
        // digest fetch (most of a 1024-bit verification's time): the
        // signature must be exactly as long as the modulus, its public-key
        // operation must give a PKCS#1 v1.5 type-1 block (checked by
        // OpenSSL), and the block's payload must be exactly
        // DigestInfo(SHA-256, digest). A test compares this with the
        // `rsa` crate's verifier on valid, tampered and mis-sized
        // signatures.
        let k = self.ossl.size() as usize;
        if sig.len() != k {
            return Err(IdentityError::BadSignature);
        }
        // The modulus is at most MAX_KEY_BITS (checked in `parse`).
        let mut block = [0u8; MAX_KEY_BITS / 8];
        let Some(out) = block.get_mut(..k) else {
            return Err(IdentityError::BadSignature);
        };
        let n = self
            .ossl
            .public_decrypt(sig, out, openssl::rsa::Padding::PKCS1)
            .map_err(|_| IdentityError::BadSignature)?;
        let got = out.get(..n).ok_or(IdentityError::BadSignature)?;
        let (prefix, value) = got.split_at(got.len().min(SHA256_DIGEST_INFO_PREFIX.len()));
        if prefix == SHA256_DIGEST_INFO_PREFIX && value == digest {
            Ok(())
        } else {
            Err(IdentityError::BadSignature)
        }
    }

    /// [`RemoteCert::verify_sha256_prehash`] by the `rsa` crate (the
    /// verifier used before OpenSSL), for comparison in tests.
    #[cfg(test)]
    pub(crate) fn verify_sha256_prehash_rsa_crate(
        &self,
        digest: &[u8; 32],
        sig: &[u8],
    ) -> Result<(), IdentityError> {
        use rsa::signature::hazmat::PrehashVerifier;
        let sig = Signature::try_from(sig).map_err(|_| IdentityError::BadSignature)?;
        self.key
            .verify_prehash(digest, &sig)
            .map_err(|_| IdentityError::BadSignature)
    }
}

/// The `rsa` crate's (non-constant-time) PKCS#1 v1.5 signer, the one every
/// signature was made with before OpenSSL: tests check that the new signer
/// produces exactly the same bytes, so the wire format is unchanged.
#[cfg(test)]
pub(crate) mod reference {
    use super::*;
    use rsa::pkcs8::DecodePrivateKey;

    fn key(identity: &Identity) -> RsaPrivateKey {
        RsaPrivateKey::from_pkcs8_der(identity.private_key_pkcs8_der()).unwrap()
    }

    /// SHA256withRSA over a digest, by the `rsa` crate.
    pub(crate) fn sign_sha256(identity: &Identity, digest: &[u8; 32]) -> Vec<u8> {
        key(identity)
            .sign(Pkcs1v15Sign::new::<Sha256>(), digest)
            .unwrap()
    }

    /// SHA1withRSA over a digest, by the `rsa` crate.
    pub(crate) fn sign_sha1(identity: &Identity, digest: &[u8; 20]) -> Vec<u8> {
        let scheme = Pkcs1v15Sign {
            hash_len: Some(20),
            prefix: SHA1_DIGEST_INFO_PREFIX.to_vec().into_boxed_slice(),
        };
        key(identity).sign(scheme, digest).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::sync::OnceLock;

    #[test]
    fn openssl_signatures_are_the_rsa_crate_signatures() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for bits in [1024, 2048] {
            let me = Identity::generate(&mut rng, bits, "Same", 1_700_000_000).unwrap();
            assert_eq!(me.key_bits(), bits);
            for i in 0..8u8 {
                let d256: [u8; 32] = Sha256::digest([i]).into();
                let sig = me.sign_sha256_prehash(&d256);
                assert_eq!(sig.len(), bits / 8);
                assert_eq!(&sig[..], &reference::sign_sha256(&me, &d256)[..]);
                let d1: [u8; 20] = sha1::Sha1::digest([i]).into();
                let sig = me.sign_sha1_prehash(&d1).unwrap();
                assert_eq!(sig.len(), bits / 8);
                assert_eq!(&sig[..], &reference::sign_sha1(&me, &d1)[..]);
            }
            // The certificate's self-signature too.
            let cert = Certificate::from_der(me.cert_der()).unwrap();
            let tbs: [u8; 32] = Sha256::digest(raw_tbs(me.cert_der()).unwrap()).into();
            assert_eq!(
                cert.signature.as_bytes().unwrap(),
                &reference::sign_sha256(&me, &tbs)[..]
            );
        }
    }

    #[test]
    fn small_or_foreign_private_keys_are_refused() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let small = RsaPrivateKey::new(&mut rng, 512).unwrap();
        let pem = small.to_pkcs8_pem(LineEnding::LF).unwrap();
        assert_eq!(
            Identity::from_key_pem(&mut rng, &pem, "x", 0).unwrap_err(),
            IdentityError::KeySize {
                bits: 512,
                min: MIN_KEY_BITS,
                max: MAX_KEY_BITS
            }
        );
        // PKCS#1 ("RSA PRIVATE KEY") is not what to_pem writes.
        let pkcs1 = rsa::pkcs1::EncodeRsaPrivateKey::to_pkcs1_pem(&small, LineEnding::LF).unwrap();
        assert_eq!(
            Identity::from_key_pem(&mut rng, &pkcs1, "x", 0).unwrap_err(),
            IdentityError::PrivateKeyDecode
        );
        let huge = "A".repeat(MAX_PEM_LEN + 1);
        assert_eq!(
            Identity::from_key_pem(&mut rng, &huge, "x", 0).unwrap_err(),
            IdentityError::TooLarge { len: huge.len() }
        );
    }

    #[test]
    fn generation_is_deterministic_for_a_seed() {
        // Same seed, same key and certificate (the rng is used in the same
        // order as before the signer moved to OpenSSL).
        let a = Identity::generate(
            &mut rand::rngs::StdRng::seed_from_u64(77),
            1024,
            "D",
            1_700_000_000,
        )
        .unwrap();
        let b = Identity::generate(
            &mut rand::rngs::StdRng::seed_from_u64(77),
            1024,
            "D",
            1_700_000_000,
        )
        .unwrap();
        assert_eq!(a.cert_der(), b.cert_der());
        assert_eq!(a.private_key_pkcs8_der(), b.private_key_pkcs8_der());
    }

    #[test]
    fn new_certificate_for_an_existing_key() {
        let me = identity();
        let (key_pem, cert_pem) = me.to_pem().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(99);
        let again = Identity::from_key_pem(&mut rng, &key_pem, "JuxtaTest", 1_800_000_000).unwrap();
        assert_eq!(again.peer_id(), me.peer_id());
        assert_eq!(again.spki_der(), me.spki_der());
        assert_eq!(again.private_key_pkcs8_der(), me.private_key_pkcs8_der());
        assert_ne!(again.cert_der(), me.cert_der());
        let remote = RemoteCert::parse(again.cert_der().clone()).unwrap();
        assert_eq!(remote.derived_peer_id(), me.peer_id());
        // The new pair loads like any saved identity.
        let (k2, c2) = again.to_pem().unwrap();
        assert_eq!(k2, key_pem);
        assert_ne!(c2, cert_pem);
        assert_eq!(
            Identity::from_pem(&k2, &c2).unwrap().peer_id(),
            me.peer_id()
        );
        assert_eq!(
            Identity::from_key_pem(&mut rng, "garbage", "x", 0).unwrap_err(),
            IdentityError::PrivateKeyDecode
        );
        // A certificate PEM is not a private key.
        assert_eq!(
            Identity::from_key_pem(&mut rng, &cert_pem, "x", 0).unwrap_err(),
            IdentityError::PrivateKeyDecode
        );
        assert!(matches!(
            Identity::from_key_pem(&mut rng, &key_pem, &"n".repeat(300), 0),
            Err(IdentityError::CommonNameTooLong { .. })
        ));
    }

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

    /// OpenSSL's verifier accepts and refuses exactly what the `rsa`
    /// crate's did: valid signatures, every single-bit flip of signature
    /// and digest, signatures cut short, padded, zero, all ones, and a
    /// signature by another key.
    #[test]
    fn openssl_verifier_agrees_with_the_rsa_crate() {
        let me = identity();
        let mut rng = rand::rngs::StdRng::seed_from_u64(77);
        let other = Identity::generate(&mut rng, 1024, "Other", 1_700_000_000).unwrap();
        let remote = RemoteCert::parse(me.cert_der().clone()).unwrap();
        let digest: [u8; 32] = Sha256::digest(b"agree").into();
        let sig = me.sign_sha256_prehash(&digest).to_vec();
        let check = |d: &[u8; 32], s: &[u8]| {
            let a = remote.verify_sha256_prehash(d, s);
            let b = remote.verify_sha256_prehash_rsa_crate(d, s);
            assert_eq!(a, b, "sig {s:02x?}");
            a.is_ok()
        };
        assert!(check(&digest, &sig));
        let mut accepted = 0;
        for i in 0..sig.len() * 8 {
            let mut t = sig.clone();
            t[i / 8] ^= 1 << (i % 8);
            accepted += usize::from(check(&digest, &t));
        }
        for i in 0..256 {
            let mut d = digest;
            d[i / 8] ^= 1 << (i % 8);
            accepted += usize::from(check(&d, &sig));
        }
        assert_eq!(accepted, 0);
        let mut long = sig.clone();
        long.push(0);
        let mut long0 = vec![0u8];
        long0.extend_from_slice(&sig);
        for s in [
            &sig[1..],
            &sig[..sig.len() - 1],
            &long[..],
            &long0[..],
            &[][..],
            &[0u8; 128][..],
            &[0xffu8; 128][..],
        ] {
            assert!(!check(&digest, s));
        }
        let foreign = other.sign_sha256_prehash(&digest);
        assert!(!check(&digest, &foreign));
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
        // An element claiming more than its parent holds is refused before
        // the decoder allocates the claimed length (a fuzzed CBJX trailer
        // whose certificate claimed a 50 MB field cost 50 MB).
        assert!(der_lengths_fit(&der, 0));
        let claims = [0x30, 0x06, 0x04, 0x84, 0x03, 0x02, 0x00, 0x00];
        assert!(!der_lengths_fit(&claims, 0));
        assert_eq!(
            RemoteCert::parse(Bytes::copy_from_slice(&claims)).unwrap_err(),
            IdentityError::CertDerLength
        );
        let mut deep = Vec::new();
        for _ in 0..=MAX_DER_DEPTH + 1 {
            deep.splice(0..0, [0x30, deep.len() as u8]);
        }
        assert!(!der_lengths_fit(&deep, 0));
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
