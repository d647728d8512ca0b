//! TLS 1.3 sessions between two peers, for secure pipes and secure sockets.
//!
//! # Why
//!
//! A secure pipe (JXTA pipe type `JxtaUnicastSecure`) must keep its
//! messages confidential and prove who sent them. Juxta runs a TLS 1.3
//! session (rustls with the `ring` provider for the handshake, see "Record
//! layer" below for the records) between the output pipe's peer and the
//! input pipe's peer, and carries the TLS records as ordinary messages over
//! the peer connection that already exists between them (see
//! [`super::secure`]). That connection is already reliable and ordered, so
//! this module is a pure byte-stream-in / byte-stream-out state machine: a
//! [`SecureChannel`] owns no socket and does no IO. The caller feeds it the TLS bytes it received
//! ([`SecureChannel::read_tls`]), collects the TLS bytes to transmit
//! ([`SecureChannel::take_tls`] / [`SecureChannel::write_tls_into`]) and
//! moves plaintext in and out ([`SecureChannel::write_plaintext`],
//! [`SecureChannel::read_plaintext`]).
//!
//! # Authentication: peer IDs, not a PKI
//!
//! Every peer authenticates with its own self-signed certificate (its
//! [`Identity`]); there is no certificate authority, no chain and no host
//! name. What a certificate proves is the `cbid` peer ID derived from its
//! public key ([`RemoteCert::derived_peer_id`]):
//!
//! * the client is built for one expected peer
//!   ([`SecureChannel::client`]) and aborts the handshake with
//!   [`TlsError::PeerMismatch`] unless the server's certificate derives
//!   exactly that peer ID. The expected peer is carried by a per-connection
//!   certificate verifier: [`SecureChannel::client`] clones the shared
//!   [`ClientConfig`] (a handful of `Arc`s) and installs a verifier holding
//!   the expected [`PeerId`]. The TLS server name is a fixed placeholder
//!   and SNI is not sent (a cbid unique value, 71 characters, does not fit
//!   in a DNS label anyway);
//! * the server requires a client certificate and accepts any well-formed
//!   self-signed one; [`SecureChannel::peer_id`] then gives the client's
//!   derived peer ID for the caller to check or record;
//! * on both sides the certificate must parse as a self-signed RSA
//!   certificate ([`RemoteCert::parse`]), must come alone (no chain) and the
//!   TLS 1.3 `CertificateVerify` signature is really verified with the
//!   certificate's key ([`rustls::crypto::verify_tls13_signature`] with the
//!   `ring` provider's algorithms), so the peer proves it holds the private
//!   key. Validity dates are not checked (JXSE does not check them either,
//!   and peers' clocks are not trusted).
//!
//! Only TLS 1.3 is offered. Cipher suites, in preference order:
//! `TLS13_AES_128_GCM_SHA256` (fastest with AES-NI), `TLS13_AES_256_GCM_SHA384`,
//! `TLS13_CHACHA20_POLY1305_SHA256`; the server follows the client's order.
//! Handshake signatures are RSA-PSS (`rsa_pss_rsae_sha256` preferred, the
//! scheme TLS 1.3 mandates for RSA keys; `ring` signs and verifies it).
//! Session resumption, tickets and 0-RTT data are disabled: a resumed
//! session would skip the certificate check that binds the session to the
//! expected peer ID.
//!
//! # Key sizes
//!
//! `ring` signs with RSA keys of 2048 to 4096 bits only, and its RSA-PSS
//! verification accepts 2048 to 8192 bits. An identity with a key outside
//! [`MIN_RSA_BITS`]`..=`[`MAX_OWN_RSA_BITS`] (JXSE's default 1024-bit keys,
//! or Juxta's own 8192-bit maximum) cannot build a configuration
//! ([`TlsError::KeySize`]), and a peer presenting a key under
//! [`MIN_RSA_BITS`] is rejected ([`TlsError::RemoteKeyTooSmall`]). Juxta
//! generates 2048-bit identities by default.
//!
//! # JXSE interoperability
//!
//! There is none for secure pipes. JXSE 2.7 implements `JxtaUnicastSecure`
//! with its own TLS transport (the `jxtatls` endpoint protocol): JSSE
//! speaking TLSv1 (TLS 1.0) over JXSE's own reliable-stream layer, whose
//! messages carry the TLS records and acknowledgements in `jxtatls`
//! elements. rustls implements only TLS 1.2 and 1.3 (this module only
//! 1.3), not TLS 1.0, and Juxta carries its records in its own `JuxtaTls`
//! service messages rather than JXSE's reliable stream, so a Juxta secure
//! pipe cannot talk to a JXSE secure pipe in either direction. Unicast and
//! propagate pipes do interoperate.
//!
//! # Record layer: rustls for the handshake, ours after it
//!
//! rustls runs the handshake (and everything above: certificates,
//! signatures, key schedule). When it completes, the channel takes the
//! traffic keys from rustls ([`rustls::Connection::dangerous_extract_secrets`],
//! `enable_secret_extraction` is on in both configurations; the same hook
//! kTLS uses) and protects TLS 1.3 records itself (RFC 8446 §5: AES-GCM or
//! ChaCha20-Poly1305 per record, nonce = IV xor sequence number, the record
//! header as associated data, the content type inside). Until then every
//! received record goes to rustls one at a time, so rustls holds no partial
//! record when the keys move. What the record layer accepts after the
//! handshake: application data and alerts (`close_notify` ends the stream,
//! any other alert fails it); a handshake message (`KeyUpdate`,
//! `NewSessionTicket`: neither side sends one) or any other content type
//! fails the session, as do a record that fails authentication
//! (`DecryptError`; the `bad_record_mac` alert is queued for the peer) and
//! a header announcing more than 2^14 + 256 bytes (`PeerSentOversizedRecord`,
//! refused on the header, before anything is buffered for it). Keys are
//! never updated: a session ends with [`TlsError::KeysExhausted`] when one
//! direction reaches its suite's confidentiality limit (2^24 records for
//! AES-GCM, 256 GiB of full records).
//!
//! The records themselves: no copy on either side. Sealing
//! ([`SecureChannel::seal_into`]) takes a list of slices (a length prefix
//! and an encoded message's chunks need no joining) and encrypts each
//! record straight from the slice holding it into the caller's output
//! buffer (`aws-lc-rs`'s `seal_out_of_place_scatter`: the inner content
//! type byte is the "extra" plaintext, encrypted ahead of the tag); only a
//! record gathering several small slices (under 1 KiB each) is copied
//! first and encrypted in place. Records are the full 16 KiB except where
//! a slice ends. Callers keep that output buffer from write to write (at
//! its full length, every byte initialized, so no fresh memory and no
//! page faults per write). Opening ([`SecureChannel::read_tls_bytes`])
//! decrypts each record straight from the received bytes
//! (`open_separate_gather`) into a plaintext buffer the channel reuses
//! once nobody holds a slice of it, where the application data of
//! consecutive records lands contiguous (no `memmove` over headers and
//! tags); [`SecureChannel::take_plaintext`] hands it over as a `Bytes`
//! slice, and [`SecureChannel::read_tls_bytes_into`] decrypts the records
//! that fit straight into the caller's own buffer (the secure socket's
//! reads).
//!
//! The AEAD is `aws-lc-rs`'s (rustls keeps `ring` for the handshake). With
//! 16 KiB records, one core of the 2-core AMD EPYC (AVX-512, VAES) this was
//! measured on, load average about 8 from other builds: `ring` 0.17.14
//! AES-128-GCM sealed 4.5-5.2 GB/s and opened 4.4-5.2 GB/s in place,
//! `aws-lc-rs` 1.19 sealed 5.5-6.1 GB/s and opened 5.1-6.5 GB/s (a small
//! stand-alone program, three rounds of 256 MiB each). Through this
//! module (`cargo test -p juxta --release --lib pipe::tls::tests::throughput
//! -- --ignored --nocapture`): [`SecureChannel::seal`] 4.0 GB/s, opening in
//! place with [`SecureChannel::read_tls_bytes`] 6.3 GB/s; the buffered path
//! ([`SecureChannel::write_plaintext`] / [`SecureChannel::take_tls`] /
//! [`SecureChannel::read_tls`], one more copy each way) 2.6 / 3.5 GB/s.
//!
//! Why (issue #12, "secure channels at cipher speed"): before, sealing
//! copied the plaintext into the output buffer and encrypted it there,
//! and opening decrypted in place and moved each record's plaintext down
//! over the headers and tags. `perf` on the 1 MB secure-pipe ping-pong
//! (`docs/benchmarks.md`) put that copy at 38% and that `memmove` at 62%
//! of the AES-GCM time beside them; both are gone.
//!
//! Earlier: `perf record -g` on `juxta bench pingpong --layers secure-pipe
//! --sizes 1048576 --pin same` before the change (rustls's record layer,
//! one `JuxtaTls` message per 256 KiB, default allocator) showed, besides
//! the bench's RSA key generation, `memmove` 9.2%, page faults 6.8% (fresh
//! buffers for every record batch: rustls's per-record `Vec`s, the
//! outgoing copy, the plaintext copy) and AES-GCM only 10.3%
//! (`aes_gcm_enc_update_vaes_avx2` 5.7%, `dec` 4.7%); the 1 MB round trip
//! took 1.8 ms (0.08x `tcp`). After it (still with `ring`), page faults
//! are gone from the profile, `memmove` fell to 3.7% and AES-GCM (10.4%)
//! is the largest item after the kernel's own copies. (Shares of all
//! samples; the bench's key generation is 15% of the first profile and
//! 47% of the second, a shorter run.)
#![warn(missing_docs)]

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, BufRead, Write};
use std::sync::{Arc, OnceLock};

use aws_lc_rs::aead;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use juxta_proto::id::PeerId;
use juxta_proto::identity::{Identity, IdentityError, RemoteCert};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, SubjectPublicKeyInfoDer,
    UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::{CertifiedKey, Signer, SigningKey, SingleCertAndKey};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, ClientConnection, Connection,
    ConnectionTrafficSecrets, DigitallySignedStruct, DistinguishedName, OtherError, PeerMisbehaved,
    ServerConfig, ServerConnection, SignatureAlgorithm, SignatureScheme, SupportedCipherSuite,
};

/// Smallest RSA modulus, in bits, usable for TLS on either side (`ring`
/// neither signs nor verifies with smaller RSA keys).
pub const MIN_RSA_BITS: usize = 2048;
/// Largest RSA modulus, in bits, of our own key (`ring` does not sign with
/// larger RSA keys; it verifies up to 8192 bits).
pub const MAX_OWN_RSA_BITS: usize = 4096;
/// Default bound on the TLS bytes a [`SecureChannel`] holds for sending
/// (see [`SecureChannel::set_buffer_limit`]).
pub const DEFAULT_BUFFER_LIMIT: usize = 256 * 1024;
/// Default bound on the decrypted bytes a [`SecureChannel`] holds until
/// [`SecureChannel::read_plaintext`] takes them (see
/// [`SecureChannel::set_max_unread_plaintext`]).
pub const DEFAULT_MAX_UNREAD_PLAINTEXT: usize = 16 * 1024 * 1024;

/// The TLS server name the client uses. It is never sent (SNI is off) and
/// never checked: the server is authenticated by its peer ID.
const SERVER_NAME: &str = "peer.juxta.invalid";

/// Handshake signature schemes we accept and advertise, preferred first.
/// Juxta identities are RSA; TLS 1.3 signs with RSA only in PSS form.
const VERIFY_SCHEMES: [SignatureScheme; 3] = [
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
];

/// Errors from building TLS configurations and running a [`SecureChannel`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// rustls reported an error: a protocol violation, a failed
    /// decryption, an alert received from the peer, a configuration error.
    #[error("TLS: {0}")]
    Rustls(#[source] rustls::Error),
    /// The server's certificate derives another peer ID than the one the
    /// client expected.
    #[error("peer mismatch: expected {expected}, the certificate presented is {presented}'s")]
    PeerMismatch {
        /// The peer the client meant to reach.
        expected: Box<PeerId>,
        /// The peer ID derived from the certificate the server presented.
        presented: Box<PeerId>,
    },
    /// The handshake completed without a peer certificate.
    #[error("the peer presented no certificate")]
    NoCertificate,
    /// The peer's certificate is not a well-formed self-signed RSA
    /// certificate.
    #[error("unacceptable peer certificate: {0}")]
    BadCertificate(#[source] IdentityError),
    /// The peer sent a certificate chain; a Juxta peer presents its own
    /// self-signed certificate alone.
    #[error("the peer sent {len} extra certificates; a peer presents only its own")]
    UnexpectedChain {
        /// How many certificates followed the end-entity certificate.
        len: usize,
    },
    /// The peer's RSA key is too small for TLS.
    #[error("the peer's RSA key of {bits} bits is under {} bits", MIN_RSA_BITS)]
    RemoteKeyTooSmall {
        /// The peer's modulus size.
        bits: usize,
    },
    /// Our own RSA key cannot sign TLS handshakes with `ring`.
    #[error(
        "RSA key of {bits} bits unusable for TLS (need {}..={} bits)",
        MIN_RSA_BITS,
        MAX_OWN_RSA_BITS
    )]
    KeySize {
        /// Our modulus size.
        bits: usize,
    },
    /// Our private key could not be exported or loaded, or does not match
    /// our certificate.
    #[error("unusable private key: {0}")]
    BadKey(String),
    /// Feeding these TLS bytes could leave more decrypted data waiting
    /// than the channel's bound; nothing was consumed. Take the plaintext
    /// with [`SecureChannel::read_plaintext`] and feed the bytes again.
    #[error(
        "{unread} unread plaintext bytes plus {incoming} incoming exceed the bound of {limit}"
    )]
    BufferFull {
        /// Decrypted bytes not yet taken.
        unread: usize,
        /// Length of the TLS input refused.
        incoming: usize,
        /// The bound ([`SecureChannel::set_max_unread_plaintext`]).
        limit: usize,
    },
    /// rustls rejected the input at the record layer (e.g. a handshake
    /// message over 64 KiB) or failed on its internal buffers.
    #[error("TLS record layer: {0}")]
    Io(#[source] io::Error),
    /// TLS bytes arrived after the peer's `close_notify`.
    #[error("TLS data received after the peer's close_notify")]
    DataAfterClose,
    /// [`SecureChannel::seal`] was called before the handshake completed.
    #[error("the TLS handshake is not complete")]
    NotEstablished,
    /// [`SecureChannel::seal_into`] was given a buffer smaller than the
    /// records it would write.
    #[error("the output buffer holds {have} bytes, the records need {need}")]
    BufferTooSmall {
        /// Bytes the records may take ([`sealed_len`] plus pending bytes).
        need: usize,
        /// Bytes the buffer holds.
        have: usize,
    },
    /// The session sent as many records as one key may protect (the
    /// cipher suite's confidentiality limit, 2^24 records for AES-GCM:
    /// 256 GiB of full records); Juxta does not update keys, so the
    /// session ends. Open a new one.
    #[error("the session's key protected its limit of {0} records")]
    KeysExhausted(u64),
    /// Plaintext was written after [`SecureChannel::send_close_notify`].
    #[error("the TLS session is closed for sending")]
    Closed,
    /// A peer holds as many secure sessions as it accepts (raised by the
    /// secure pipe layer, [`super::secure`]).
    #[error("too many secure sessions (limit {0})")]
    TooManySessions(usize),
    /// A secure session failed or was misused; the text says why (also
    /// raised by the secure pipe layer).
    #[error("secure session failed: {0}")]
    Failed(String),
}

/// Why one of our verifiers refused a certificate. Travels inside
/// `rustls::Error::InvalidCertificate(CertificateError::Other(..))` and is
/// turned back into a [`TlsError`] by [`map_rustls`].
#[derive(Debug, Clone, thiserror::Error)]
enum Rejection {
    #[error("peer mismatch: expected {expected}, presented {presented}")]
    Mismatch {
        expected: Box<PeerId>,
        presented: Box<PeerId>,
    },
    #[error("bad certificate: {0}")]
    Cert(IdentityError),
    #[error("{0} extra certificates")]
    Chain(usize),
    #[error("RSA key of {0} bits")]
    KeyTooSmall(usize),
    #[error("client configuration used without an expected peer")]
    NoExpectedPeer,
}

impl From<Rejection> for rustls::Error {
    fn from(r: Rejection) -> Self {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(r))))
    }
}

/// Turns a rustls error into a [`TlsError`], recovering the typed reason
/// when one of our verifiers refused the peer's certificate.
fn map_rustls(err: rustls::Error) -> TlsError {
    if let rustls::Error::InvalidCertificate(CertificateError::Other(other)) = &err {
        if let Some(r) = other.0.downcast_ref::<Rejection>() {
            return match r.clone() {
                Rejection::Mismatch {
                    expected,
                    presented,
                } => TlsError::PeerMismatch {
                    expected,
                    presented,
                },
                Rejection::Cert(e) => TlsError::BadCertificate(e),
                Rejection::Chain(len) => TlsError::UnexpectedChain { len },
                Rejection::KeyTooSmall(bits) => TlsError::RemoteKeyTooSmall { bits },
                Rejection::NoExpectedPeer => TlsError::Failed(r.to_string()),
            };
        }
    }
    TlsError::Rustls(err)
}

/// The `ring` provider restricted to the TLS 1.3 suites, AES-128-GCM first.
fn provider() -> &'static Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER.get_or_init(|| {
        use rustls::crypto::ring::{cipher_suite, default_provider};
        Arc::new(CryptoProvider {
            cipher_suites: vec![
                cipher_suite::TLS13_AES_128_GCM_SHA256,
                cipher_suite::TLS13_AES_256_GCM_SHA384,
                cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
            ],
            ..default_provider()
        })
    })
}

fn algorithms() -> WebPkiSupportedAlgorithms {
    provider().signature_verification_algorithms
}

/// Checks a peer's certificate: alone, self-signed RSA, large enough.
fn check_cert(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
) -> Result<RemoteCert, Rejection> {
    if !intermediates.is_empty() {
        return Err(Rejection::Chain(intermediates.len()));
    }
    let cert =
        RemoteCert::parse(Bytes::copy_from_slice(end_entity.as_ref())).map_err(Rejection::Cert)?;
    if cert.key_bits() < MIN_RSA_BITS {
        return Err(Rejection::KeyTooSmall(cert.key_bits()));
    }
    Ok(cert)
}

/// Verifies a TLS 1.3 `CertificateVerify` signature with the certificate's
/// key, for one of the schemes we advertised.
fn check_tls13_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    if !VERIFY_SCHEMES.contains(&dss.scheme) {
        return Err(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
    }
    rustls::crypto::verify_tls13_signature(message, cert, dss, &algorithms())
}

fn tls12_refused() -> rustls::Error {
    rustls::Error::General("TLS 1.2 is not enabled for secure pipes".into())
}

/// Client side: accepts the server's certificate iff it is a lone
/// self-signed RSA certificate deriving the expected peer ID.
#[derive(Debug)]
struct ServerPeerVerifier {
    /// `None` in the shared configuration [`client_config`] returns: it
    /// refuses every server until [`SecureChannel::client`] sets a peer.
    expected: Option<PeerId>,
}

impl ServerCertVerifier for ServerPeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let expected = self.expected.ok_or(Rejection::NoExpectedPeer)?;
        let cert = check_cert(end_entity, intermediates)?;
        let presented = *cert.derived_peer_id();
        if presented != expected {
            return Err(Rejection::Mismatch {
                expected: Box::new(expected),
                presented: Box::new(presented),
            }
            .into());
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(tls12_refused())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        check_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        VERIFY_SCHEMES.to_vec()
    }
}

/// Server side: requires a client certificate and accepts any lone
/// self-signed RSA certificate; the channel exposes the derived peer ID.
#[derive(Debug)]
struct ClientPeerVerifier;

impl ClientCertVerifier for ClientPeerVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        check_cert(end_entity, intermediates)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(tls12_refused())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        check_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        VERIFY_SCHEMES.to_vec()
    }
}

/// `ring`'s RSA signing key, made to pick `rsa_pss_rsae_sha256` whenever
/// the peer offers it (`ring` alone would pick the SHA-512 variant first).
#[derive(Debug)]
struct PreferPssSha256(Arc<dyn SigningKey>);

impl SigningKey for PreferPssSha256 {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        if offered.contains(&SignatureScheme::RSA_PSS_SHA256) {
            self.0.choose_scheme(&[SignatureScheme::RSA_PSS_SHA256])
        } else {
            self.0.choose_scheme(offered)
        }
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        self.0.public_key()
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        self.0.algorithm()
    }
}

/// Our certificate and `ring` signing key (`ring` parses the identity's
/// PKCS#8 private key, which stays in the identity's zeroizing buffer).
fn certified_key(identity: &Identity) -> Result<Arc<CertifiedKey>, TlsError> {
    let bits = identity.key_bits();
    if !(MIN_RSA_BITS..=MAX_OWN_RSA_BITS).contains(&bits) {
        return Err(TlsError::KeySize { bits });
    }
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.private_key_pkcs8_der()));
    let key = rustls::crypto::ring::sign::any_supported_type(&der)
        .map_err(|e| TlsError::BadKey(e.to_string()))?;
    let certified = CertifiedKey::new(
        vec![CertificateDer::from(identity.cert_der().to_vec())],
        Arc::new(PreferPssSha256(key)),
    );
    certified
        .keys_match()
        .map_err(|e| TlsError::BadKey(e.to_string()))?;
    Ok(Arc::new(certified))
}

/// The client configuration for `identity`: TLS 1.3 only, our certificate
/// offered for client authentication, the suites in Juxta's order, no
/// resumption, no SNI.
///
/// Build it once per identity and share it: it holds the parsed signing
/// key. Its certificate verifier refuses every server; use it through
/// [`SecureChannel::client`], which installs a verifier for the expected
/// peer on a per-connection copy.
///
/// Fails with [`TlsError::KeySize`] unless the key has
/// [`MIN_RSA_BITS`]`..=`[`MAX_OWN_RSA_BITS`] bits.
pub fn client_config(identity: &Identity) -> Result<Arc<ClientConfig>, TlsError> {
    let key = certified_key(identity)?;
    let mut cfg = ClientConfig::builder_with_provider(provider().clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(map_rustls)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ServerPeerVerifier { expected: None }))
        .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    cfg.resumption = rustls::client::Resumption::disabled();
    cfg.enable_sni = false;
    cfg.enable_early_data = false;
    // Our record layer takes the keys once the handshake completes.
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// The server configuration for `identity`: TLS 1.3 only, our certificate,
/// a client certificate required (any lone self-signed RSA certificate;
/// see [`SecureChannel::peer_id`]), the suites in Juxta's order (the
/// client's order is followed), no session tickets or 0-RTT data.
///
/// Build it once per identity and share it. Fails with
/// [`TlsError::KeySize`] unless the key has
/// [`MIN_RSA_BITS`]`..=`[`MAX_OWN_RSA_BITS`] bits.
pub fn server_config(identity: &Identity) -> Result<Arc<ServerConfig>, TlsError> {
    let key = certified_key(identity)?;
    let mut cfg = ServerConfig::builder_with_provider(provider().clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(map_rustls)?
        .with_client_cert_verifier(Arc::new(ClientPeerVerifier))
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    cfg.max_early_data_size = 0;
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// Largest plaintext one TLS record carries (RFC 8446 §5.1: 2^14).
pub const MAX_RECORD_PLAINTEXT: usize = 16 * 1024;
/// TLS record header: type, legacy version, length.
const HEADER: usize = 5;
/// AES-GCM and ChaCha20-Poly1305 tag.
const TAG: usize = 16;
/// Bytes a record adds to its plaintext: header, inner content type, tag.
pub const RECORD_OVERHEAD: usize = HEADER + 1 + TAG;
/// Largest ciphertext a record may carry (RFC 8446 §5.2: 2^14 + 256).
const MAX_CIPHERTEXT: usize = MAX_RECORD_PLAINTEXT + 256;
const CT_ALERT: u8 = 21;
const CT_APPDATA: u8 = 23;
/// Smallest tail of a part sealed as a record of its own, straight from
/// the part, rather than gathered with the next parts' bytes.
const DIRECT_MIN: usize = 1024;

/// The keys of one direction of an established session, and its record
/// sequence number.
struct Keys {
    key: aead::LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
    seq: u64,
}

impl Keys {
    fn new((seq, secrets): (u64, ConnectionTrafficSecrets)) -> Result<Keys, TlsError> {
        let (alg, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return Err(TlsError::Failed("unsupported cipher suite".into())),
        };
        let key = aead::UnboundKey::new(alg, key.as_ref())
            .map_err(|_| TlsError::Failed("bad traffic key".into()))?;
        let iv: [u8; aead::NONCE_LEN] = iv
            .as_ref()
            .try_into()
            .map_err(|_| TlsError::Failed("bad traffic IV".into()))?;
        Ok(Keys {
            key: aead::LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    /// The nonce of the next record (RFC 8446 §5.3), advancing the
    /// sequence number.
    fn next_nonce(&mut self) -> aead::Nonce {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        self.seq = self.seq.saturating_add(1);
        aead::Nonce::assume_unique_for_key(n)
    }
}

/// An established session's record layer (see the module docs).
struct Traffic {
    tx: Keys,
    rx: Keys,
    /// Records one key may protect ([`rustls::CipherSuiteCommon::confidentiality_limit`]).
    limit: u64,
    suite: SupportedCipherSuite,
}

impl Traffic {
    /// Checks the key's record limit and returns the next nonce.
    fn next_tx_nonce(&mut self) -> Result<aead::Nonce, TlsError> {
        if self.tx.seq >= self.limit {
            return Err(TlsError::KeysExhausted(self.limit));
        }
        Ok(self.tx.next_nonce())
    }

    /// Writes one record of content type `ctype` holding the next `plen`
    /// bytes of `parts` at the start of `out` (which holds at least
    /// `plen + RECORD_OVERHEAD` bytes); returns the record's length. When
    /// those bytes lie in one part they are encrypted straight from it
    /// into `out` (no copy); else they are gathered into `out` and
    /// encrypted there.
    fn seal_record(
        &mut self,
        ctype: u8,
        parts: &mut PartsCursor<'_, '_>,
        plen: usize,
        out: &mut [u8],
    ) -> Result<usize, TlsError> {
        let nonce = self.next_tx_nonce()?;
        let clen = plen + 1 + TAG;
        let header = [CT_APPDATA, 3, 3, (clen >> 8) as u8, clen as u8];
        out[..HEADER].copy_from_slice(&header);
        let (body, tail) = out[HEADER..HEADER + clen].split_at_mut(plen);
        let sealed = match parts.contiguous(plen) {
            Some(src) => self.tx.key.seal_out_of_place_scatter(
                nonce,
                aead::Aad::from(header),
                src,
                body,
                &[ctype],
                tail,
            ),
            None => {
                parts.copy_to(body);
                tail[0] = ctype;
                let inner = &mut out[HEADER..HEADER + plen + 1];
                match self
                    .tx
                    .key
                    .seal_in_place_separate_tag(nonce, aead::Aad::from(header), inner)
                {
                    Ok(tag) => {
                        out[HEADER + plen + 1..HEADER + clen].copy_from_slice(tag.as_ref());
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        sealed.map_err(|_| TlsError::Failed("encryption failed".into()))?;
        Ok(HEADER + clen)
    }

    /// Seals all of `parts` as application-data records into `out` (at
    /// least [`sealed_len`] bytes); returns the bytes written.
    fn seal_into(&mut self, parts: &[&[u8]], out: &mut [u8]) -> Result<usize, TlsError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut cur = PartsCursor {
            parts,
            idx: 0,
            off: 0,
        };
        let mut left = total;
        let mut o = 0;
        while left > 0 {
            let plen = cur.next_record_len(left);
            o += self.seal_record(CT_APPDATA, &mut cur, plen, &mut out[o..])?;
            left -= plen;
        }
        Ok(o)
    }

    /// Seals all of `parts` as application-data records appended to `out`.
    fn seal(&mut self, parts: &[&[u8]], out: &mut BytesMut) -> Result<usize, TlsError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let start = out.len();
        out.resize(start + sealed_len(parts), 0);
        let n = self.seal_into(parts, &mut out[start..]);
        out.truncate(start + *n.as_ref().unwrap_or(&0));
        n.map(|_| total)
    }

    /// Seals one alert record.
    fn seal_alert(&mut self, level: u8, desc: AlertDescription, out: &mut BytesMut) {
        let body = [level, u8::from(desc)];
        let parts: [&[u8]; 1] = [&body];
        let mut cur = PartsCursor {
            parts: &parts,
            idx: 0,
            off: 0,
        };
        let start = out.len();
        out.resize(start + body.len() + RECORD_OVERHEAD, 0);
        // Past the key's limit no alert can be sent; the session is dead.
        match self.seal_record(CT_ALERT, &mut cur, body.len(), &mut out[start..]) {
            Ok(n) => out.truncate(start + n),
            Err(_) => out.truncate(start),
        }
    }
}

/// The most bytes [`SecureChannel::seal_into`] writes for `parts`: their
/// length plus [`RECORD_OVERHEAD`] per record (a record ends at the end of
/// a part it cannot encrypt in place of, so at most one more record per
/// part than full records).
pub fn sealed_len(parts: &[&[u8]]) -> usize {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    total + (total.div_ceil(MAX_RECORD_PLAINTEXT) + parts.len() + 1) * RECORD_OVERHEAD
}

/// Reads the bytes of a list of slices in order.
struct PartsCursor<'a, 'b> {
    parts: &'a [&'b [u8]],
    idx: usize,
    off: usize,
}

impl<'b> PartsCursor<'_, 'b> {
    /// Skips empty parts.
    fn settle(&mut self) {
        while self.idx < self.parts.len() && self.off == self.parts[self.idx].len() {
            self.idx += 1;
            self.off = 0;
        }
    }

    /// The plaintext length of the next record, `left` bytes remaining: a
    /// full record, or the rest of the current part when that part holds
    /// less than a record but at least [`DIRECT_MIN`] bytes (so that the
    /// records of a large part are encrypted straight from it), or what
    /// small parts gather up to a full record.
    fn next_record_len(&mut self, left: usize) -> usize {
        self.settle();
        let full = left.min(MAX_RECORD_PLAINTEXT);
        let Some(p) = self.parts.get(self.idx) else {
            return full;
        };
        let rem = p.len() - self.off;
        if rem >= full || rem < DIRECT_MIN {
            return full;
        }
        rem
    }

    /// The next `n` bytes, when they lie in the current part.
    fn contiguous(&mut self, n: usize) -> Option<&'b [u8]> {
        self.settle();
        let p: &'b [u8] = self.parts.get(self.idx)?;
        if p.len() - self.off < n {
            return None;
        }
        let s = &p[self.off..self.off + n];
        self.off += n;
        Some(s)
    }

    /// Copies the next `out.len()` bytes into `out` (zeroes the rest of
    /// `out` if the parts end first).
    fn copy_to(&mut self, out: &mut [u8]) {
        let mut o = 0;
        while o < out.len() && self.idx < self.parts.len() {
            let p = &self.parts[self.idx][self.off..];
            let k = p.len().min(out.len() - o);
            out[o..o + k].copy_from_slice(&p[..k]);
            o += k;
            self.off += k;
            if self.off == self.parts[self.idx].len() {
                self.idx += 1;
                self.off = 0;
            }
        }
        out[o..].fill(0);
    }
}

/// One end of a TLS 1.3 session between two peers, without IO.
///
/// The usual cycle: after creating the channel, and after every call that
/// may produce output ([`read_tls`](Self::read_tls),
/// [`write_plaintext`](Self::write_plaintext),
/// [`send_close_notify`](Self::send_close_notify)), send what
/// [`take_tls`](Self::take_tls) returns; feed every TLS byte received, in
/// order, to [`read_tls`](Self::read_tls) (or
/// [`read_tls_bytes`](Self::read_tls_bytes)), then take the decrypted bytes
/// with [`read_plaintext`](Self::read_plaintext). Plaintext written before
/// the handshake completes is queued and sent once it does. Once
/// established, [`seal`](Self::seal) encrypts a whole write into the
/// caller's buffer in one go.
///
/// After an error the session is dead, but still send what
/// [`take_tls`](Self::take_tls) returns: it may hold the alert that tells
/// the peer why.
pub struct SecureChannel {
    /// rustls, until the handshake completes.
    conn: Option<Connection>,
    /// Our record layer, once it has.
    traffic: Option<Traffic>,
    client: bool,
    /// The error that killed an established session.
    dead: Option<rustls::Error>,
    /// The peer a client must reach (`None` on the server side).
    expected: Option<PeerId>,
    /// The peer's certificate, once the handshake completed.
    peer: Option<RemoteCert>,
    /// TLS bytes received and not yet processed (a partial record).
    rx: BytesMut,
    /// TLS bytes produced and not yet taken.
    tls_out: BytesMut,
    /// Decrypted bytes not yet taken, in order, and their total length.
    plain_in: VecDeque<Bytes>,
    plain_len: usize,
    /// The buffer records are decrypted into, kept at its full length
    /// (every byte initialized) and reused once nobody holds a slice of
    /// it any more (no fresh memory, so no page faults, per read).
    plain_pool: Bytes,
    buffer_limit: usize,
    max_unread: usize,
    peer_closed: bool,
    sent_close: bool,
}

impl fmt::Debug for SecureChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = if self.client { "client" } else { "server" };
        f.debug_struct("SecureChannel")
            .field("role", &role)
            .field("handshaking", &self.is_handshaking())
            .field("expected", &self.expected)
            .field("peer", &self.peer_id())
            .field("pending_tls", &self.tls_out.len())
            .field("unread_plaintext", &self.plain_len)
            .field("peer_closed", &self.peer_closed)
            .field("sent_close", &self.sent_close)
            .finish()
    }
}

/// The plaintext buffer, at least `len` bytes long, every byte
/// initialized: the pooled one when nobody holds a slice of it.
fn plain_buffer(pool: &mut Bytes, len: usize) -> BytesMut {
    match std::mem::take(pool).try_into_mut() {
        Ok(m) if m.len() >= len => m,
        _ => BytesMut::zeroed(len),
    }
}

impl SecureChannel {
    /// Starts the client end of a session with the peer `expected`, using a
    /// configuration from [`client_config`]. The ClientHello is ready in
    /// [`take_tls`](Self::take_tls) on return. The handshake fails with
    /// [`TlsError::PeerMismatch`] unless the server's certificate derives
    /// `expected`.
    pub fn client(cfg: Arc<ClientConfig>, expected: PeerId) -> Result<SecureChannel, TlsError> {
        let mut per_peer = (*cfg).clone();
        per_peer
            .dangerous()
            .set_certificate_verifier(Arc::new(ServerPeerVerifier {
                expected: Some(expected),
            }));
        SecureChannel::client_with_config(Arc::new(per_peer), Some(expected))
    }

    /// A client with `cfg` as is (tests use it to check the shared
    /// configuration's verifier).
    fn client_with_config(
        cfg: Arc<ClientConfig>,
        expected: Option<PeerId>,
    ) -> Result<SecureChannel, TlsError> {
        let name = ServerName::try_from(SERVER_NAME)
            .map_err(|e| TlsError::Failed(format!("server name: {e}")))?;
        let conn = ClientConnection::new(cfg, name).map_err(map_rustls)?;
        Ok(SecureChannel::new(Connection::Client(conn), expected))
    }

    /// Starts the server end of a session, using a configuration from
    /// [`server_config`]. It waits for the client's first bytes.
    pub fn server(cfg: Arc<ServerConfig>) -> Result<SecureChannel, TlsError> {
        let conn = ServerConnection::new(cfg).map_err(map_rustls)?;
        Ok(SecureChannel::new(Connection::Server(conn), None))
    }

    fn new(mut conn: Connection, expected: Option<PeerId>) -> SecureChannel {
        conn.set_buffer_limit(Some(DEFAULT_BUFFER_LIMIT));
        let client = matches!(conn, Connection::Client(_));
        let mut chan = SecureChannel {
            conn: Some(conn),
            traffic: None,
            client,
            dead: None,
            expected,
            peer: None,
            rx: BytesMut::new(),
            tls_out: BytesMut::new(),
            plain_in: VecDeque::new(),
            plain_len: 0,
            plain_pool: Bytes::new(),
            buffer_limit: DEFAULT_BUFFER_LIMIT,
            max_unread: DEFAULT_MAX_UNREAD_PLAINTEXT,
            peer_closed: false,
            sent_close: false,
        };
        chan.drain_tls();
        chan
    }

    /// Bounds the TLS bytes held for sending:
    /// [`write_plaintext`](Self::write_plaintext) accepts nothing more once
    /// [`pending_tls`](Self::pending_tls) reaches `limit` (at least 1), and
    /// plaintext queued during the handshake is bounded likewise. Default
    /// [`DEFAULT_BUFFER_LIMIT`]. [`seal`](Self::seal) is not bounded by it.
    pub fn set_buffer_limit(&mut self, limit: usize) {
        self.buffer_limit = limit.max(1);
        if let Some(c) = &mut self.conn {
            c.set_buffer_limit(Some(self.buffer_limit));
        }
    }

    /// Bounds the decrypted bytes held until
    /// [`read_plaintext`](Self::read_plaintext) takes them:
    /// [`read_tls`](Self::read_tls) refuses input with [`TlsError::BufferFull`] when
    /// the unread plaintext plus the bytes of an unfinished record plus the
    /// input's length would exceed `limit`.
    /// Default [`DEFAULT_MAX_UNREAD_PLAINTEXT`].
    pub fn set_max_unread_plaintext(&mut self, limit: usize) {
        self.max_unread = limit;
    }

    /// Feeds TLS bytes received from the peer (any split: partial records
    /// are kept until the rest arrives), decrypts what they complete and
    /// processes handshake messages. Afterwards, send what
    /// [`take_tls`](Self::take_tls) returns and take the plaintext with
    /// [`read_plaintext`](Self::read_plaintext).
    ///
    /// Errors are fatal to the session, except [`TlsError::BufferFull`],
    /// returned before consuming anything. A record announcing more than
    /// 2^14 + 256 bytes fails at once (`PeerSentOversizedRecord`), before
    /// anything is buffered for it.
    pub fn read_tls(&mut self, data: &[u8]) -> Result<(), TlsError> {
        self.check_input(data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        self.rx.extend_from_slice(data);
        self.process()
    }

    /// [`read_tls`](Self::read_tls) taking the bytes by value: once the
    /// handshake is complete and no partial record is pending, the records
    /// are decrypted straight from `data` into the channel's plaintext
    /// buffer (only an incomplete last record is copied, to wait for its
    /// rest); take the plaintext with
    /// [`take_plaintext`](Self::take_plaintext) to avoid any other copy.
    pub fn read_tls_bytes(&mut self, data: Bytes) -> Result<(), TlsError> {
        self.check_input(data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        if self.rx.is_empty() && self.traffic.is_some() {
            let (used, res) = self.open_records(&data);
            if res.is_ok() && used < data.len() {
                self.rx.extend_from_slice(&data[used..]);
            }
            return res;
        }
        self.rx.extend_from_slice(&data);
        self.process()
    }

    /// [`read_tls_bytes`](Self::read_tls_bytes), the plaintext of the
    /// first records decrypted straight into `dst` (from its start) while
    /// it fits there whole; returns the bytes written into `dst`. The
    /// plaintext of the records after them is queued as usual (take it
    /// with [`take_plaintext`](Self::take_plaintext)), as is everything
    /// while earlier plaintext waits to be taken or the handshake is under
    /// way, so the order is kept. A record's plaintext is decrypted whole
    /// (content type and padding included) before its tag is checked: a
    /// record that fails authentication may have left garbage in `dst`
    /// beyond the bytes reported.
    pub fn read_tls_bytes_into(&mut self, data: Bytes, dst: &mut [u8]) -> Result<usize, TlsError> {
        if !(self.rx.is_empty() && self.traffic.is_some() && self.plain_in.is_empty()) {
            self.read_tls_bytes(data)?;
            return Ok(0);
        }
        self.check_input(data.len())?;
        let (used, n, res) = self.open_records_into(&data, dst);
        res?;
        if used < data.len() {
            self.rx.extend_from_slice(&data[used..]);
        }
        Ok(n)
    }

    fn check_input(&self, incoming: usize) -> Result<(), TlsError> {
        if let Some(e) = &self.dead {
            return Err(map_rustls(e.clone()));
        }
        if incoming > 0 && self.peer_closed {
            return Err(TlsError::DataAfterClose);
        }
        let unread = self.plain_len.saturating_add(self.rx.len());
        if unread.saturating_add(incoming) > self.max_unread {
            return Err(TlsError::BufferFull {
                unread,
                incoming,
                limit: self.max_unread,
            });
        }
        Ok(())
    }

    /// Processes the complete records in `rx`.
    fn process(&mut self) -> Result<(), TlsError> {
        while self.traffic.is_none() {
            // Handshake: one record at a time into rustls, so that rustls
            // holds nothing once the handshake completes and our record
            // layer takes over at the next record.
            let Some(len) = self.next_record_len()? else {
                return Ok(());
            };
            let rec = self.rx.split_to(HEADER + len);
            self.handshake_record(&rec)?;
        }
        if self.rx.is_empty() {
            return Ok(());
        }
        let rx = std::mem::take(&mut self.rx);
        let (used, res) = self.open_records(&rx);
        self.rx = rx;
        self.rx.advance(used);
        res
    }

    /// The body length of the first record in `rx`, once it is complete.
    fn next_record_len(&mut self) -> Result<Option<usize>, TlsError> {
        if self.rx.len() < HEADER {
            return Ok(None);
        }
        if !(20..=23).contains(&self.rx[0]) || self.rx[1] != 3 {
            // Not a TLS record: hand everything to rustls, which says why.
            return Ok(Some(self.rx.len() - HEADER));
        }
        let len = u16::from_be_bytes([self.rx[3], self.rx[4]]) as usize;
        if len > MAX_CIPHERTEXT {
            return Err(self.kill(
                rustls::Error::PeerSentOversizedRecord,
                AlertDescription::RecordOverflow,
            ));
        }
        if self.rx.len() < HEADER + len {
            self.rx.reserve(HEADER + len - self.rx.len());
            return Ok(None);
        }
        Ok(Some(len))
    }

    fn handshake_record(&mut self, rec: &[u8]) -> Result<(), TlsError> {
        let conn = self.conn.as_mut().ok_or(TlsError::Closed)?;
        let mut rest = rec;
        while !rest.is_empty() {
            let n = match conn.read_tls(&mut rest) {
                Ok(n) => n,
                Err(e) => {
                    self.drain_tls();
                    return Err(TlsError::Io(e));
                }
            };
            if n == 0 {
                self.drain_tls();
                return Err(TlsError::Io(io::Error::other("rustls accepted no input")));
            }
        }
        let state = match conn.process_new_packets() {
            Ok(state) => state,
            Err(e) => {
                // The alert rustls queued is for the peer.
                self.drain_tls();
                return Err(map_rustls(e));
            }
        };
        if state.plaintext_bytes_to_read() > 0 {
            self.drain_plaintext(state.plaintext_bytes_to_read());
        }
        if state.peer_has_closed() {
            self.peer_closed = true;
        }
        self.drain_tls();
        if !self.conn.as_ref().is_some_and(|c| c.is_handshaking()) {
            self.establish_peer()?;
            self.enter_traffic()?;
        }
        Ok(())
    }

    /// Takes the keys from rustls: from now on records are ours.
    fn enter_traffic(&mut self) -> Result<(), TlsError> {
        let Some(conn) = self.conn.take() else {
            return Ok(());
        };
        let suite = conn
            .negotiated_cipher_suite()
            .ok_or(TlsError::Failed("no cipher suite negotiated".into()))?;
        let limit = match suite {
            SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
            #[allow(unreachable_patterns)]
            _ => return Err(TlsError::Failed("not TLS 1.3".into())),
        };
        let secrets = conn.dangerous_extract_secrets().map_err(map_rustls)?;
        self.traffic = Some(Traffic {
            tx: Keys::new(secrets.tx)?,
            rx: Keys::new(secrets.rx)?,
            limit,
            suite,
        });
        Ok(())
    }

    /// Marks an established session dead, queues the alert for the peer
    /// and returns the error.
    fn kill(&mut self, err: rustls::Error, alert: AlertDescription) -> TlsError {
        if let Some(t) = &mut self.traffic {
            if self.dead.is_none() {
                t.seal_alert(2, alert, &mut self.tls_out);
            }
        }
        self.dead.get_or_insert(err.clone());
        map_rustls(err)
    }

    /// Decrypts the complete records at the start of `src` into the
    /// plaintext buffer (no copy of the ciphertext, no move of the
    /// plaintext: the application data of consecutive records lands
    /// contiguous) and queues their plaintext; returns the bytes of `src`
    /// consumed (an incomplete last record is not) and whether all was
    /// well.
    fn open_records(&mut self, src: &[u8]) -> (usize, Result<(), TlsError>) {
        let (r, _, res) = self.open_records_into(src, &mut []);
        (r, res)
    }

    /// [`open_records`](Self::open_records), the first records into
    /// `direct` while their plaintext fits there (the rest into the
    /// plaintext buffer, queued); also returns the bytes written into
    /// `direct`.
    fn open_records_into(
        &mut self,
        src: &[u8],
        direct: &mut [u8],
    ) -> (usize, usize, Result<(), TlsError>) {
        let mut dst: Option<BytesMut> = None;
        let mut r = 0;
        let mut w = 0;
        let mut dw = 0;
        let mut to_direct = true;
        let mut failure = None;
        {
            let Some(t) = self.traffic.as_mut() else {
                return (0, 0, Err(TlsError::Closed));
            };
            while src.len() - r >= HEADER {
                let header: [u8; HEADER] = [src[r], src[r + 1], src[r + 2], src[r + 3], src[r + 4]];
                let len = u16::from_be_bytes([header[3], header[4]]) as usize;
                if len > MAX_CIPHERTEXT {
                    failure = Some((
                        rustls::Error::PeerSentOversizedRecord,
                        AlertDescription::RecordOverflow,
                    ));
                    break;
                }
                if src.len() - r < HEADER + len {
                    break;
                }
                if header[0] != CT_APPDATA {
                    failure = Some((
                        rustls::Error::InappropriateMessage {
                            expect_types: vec![rustls::ContentType::ApplicationData],
                            got_type: rustls::ContentType::from(header[0]),
                        },
                        AlertDescription::UnexpectedMessage,
                    ));
                    break;
                }
                if self.peer_closed {
                    failure = Some((
                        rustls::Error::General("data after close_notify".into()),
                        AlertDescription::UnexpectedMessage,
                    ));
                    break;
                }
                let nonce = t.rx.next_nonce();
                let body = &src[r + HEADER..r + HEADER + len];
                // Shorter than a tag: cannot authenticate.
                let Some(clen) = len.checked_sub(TAG) else {
                    failure = Some((rustls::Error::DecryptError, AlertDescription::BadRecordMac));
                    break;
                };
                let (ct, tag) = body.split_at(clen);
                to_direct = to_direct && direct.len() - dw >= clen;
                let out = if to_direct {
                    &mut direct[dw..dw + clen]
                } else {
                    let d =
                        dst.get_or_insert_with(|| plain_buffer(&mut self.plain_pool, src.len()));
                    &mut d[w..w + clen]
                };
                if t.rx
                    .key
                    .open_separate_gather(nonce, aead::Aad::from(header), ct, tag, out)
                    .is_err()
                {
                    failure = Some((rustls::Error::DecryptError, AlertDescription::BadRecordMac));
                    break;
                }
                // The content type is the last non-zero byte (zeros after
                // it are padding).
                let Some((plen, ctype)) = out.iter().rposition(|&b| b != 0).map(|i| (i, out[i]))
                else {
                    failure = Some((
                        PeerMisbehaved::IllegalTlsInnerPlaintext.into(),
                        AlertDescription::UnexpectedMessage,
                    ));
                    break;
                };
                match ctype {
                    CT_APPDATA if to_direct => dw += plen,
                    CT_APPDATA => w += plen,
                    CT_ALERT if plen == 2 && out[1] == 0 => {
                        self.peer_closed = true;
                    }
                    CT_ALERT if plen == 2 => {
                        failure = Some((
                            rustls::Error::AlertReceived(AlertDescription::from(out[1])),
                            AlertDescription::CloseNotify,
                        ));
                        break;
                    }
                    // No tickets, no key updates: Juxta peers send neither.
                    other => {
                        failure = Some((
                            rustls::Error::InappropriateMessage {
                                expect_types: vec![
                                    rustls::ContentType::ApplicationData,
                                    rustls::ContentType::Alert,
                                ],
                                got_type: rustls::ContentType::from(other),
                            },
                            AlertDescription::UnexpectedMessage,
                        ));
                        break;
                    }
                }
                r += HEADER + len;
            }
        }
        if let Some(dst) = dst {
            let full = dst.freeze();
            if w > 0 {
                self.push_plain(full.slice(..w));
            }
            self.plain_pool = full;
        }
        if let Some((e, alert)) = failure {
            return (r, dw, Err(self.kill(e, alert)));
        }
        (r, dw, Ok(()))
    }

    fn push_plain(&mut self, b: Bytes) {
        self.plain_len += b.len();
        self.plain_in.push_back(b);
    }

    /// Records the peer's certificate once the handshake is complete (the
    /// verifiers already checked it; the client's expected peer is checked
    /// again here).
    fn establish_peer(&mut self) -> Result<(), TlsError> {
        let der = self
            .conn
            .as_ref()
            .and_then(|c| c.peer_certificates())
            .and_then(|certs| certs.first())
            .ok_or(TlsError::NoCertificate)?;
        let cert = RemoteCert::parse(Bytes::copy_from_slice(der.as_ref()))
            .map_err(TlsError::BadCertificate)?;
        if let Some(expected) = self.expected {
            let presented = *cert.derived_peer_id();
            if presented != expected {
                return Err(TlsError::PeerMismatch {
                    expected: Box::new(expected),
                    presented: Box::new(presented),
                });
            }
        }
        self.peer = Some(cert);
        Ok(())
    }

    /// Moves the TLS bytes rustls produced into `tls_out`.
    fn drain_tls(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        let mut w = (&mut self.tls_out).writer();
        while conn.wants_write() {
            // Writing into a BytesMut cannot fail.
            match conn.write_tls(&mut w) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }

    /// Moves the plaintext rustls decrypted into `plain_in`.
    fn drain_plaintext(&mut self, available: usize) {
        let Some(conn) = &mut self.conn else { return };
        let mut got = BytesMut::with_capacity(available);
        let mut reader = conn.reader();
        while let Ok(chunk) = reader.fill_buf() {
            if chunk.is_empty() {
                break;
            }
            let n = chunk.len();
            got.extend_from_slice(chunk);
            reader.consume(n);
        }
        if !got.is_empty() {
            self.push_plain(got.freeze());
        }
    }

    /// Takes up to `max` bytes of TLS data to transmit, or `None` if there
    /// is none (or `max` is 0). Taking everything pending hands over the
    /// buffer without copying.
    pub fn take_tls(&mut self, max: usize) -> Option<BytesMut> {
        if self.tls_out.is_empty() || max == 0 {
            return None;
        }
        if self.tls_out.len() <= max {
            return Some(self.tls_out.split());
        }
        Some(self.tls_out.split_to(max))
    }

    /// Appends all TLS data to transmit to `out`; returns how many bytes.
    pub fn write_tls_into(&mut self, out: &mut Vec<u8>) -> usize {
        let n = self.tls_out.len();
        out.extend_from_slice(&self.tls_out);
        self.tls_out.clear();
        n
    }

    /// TLS bytes waiting to be taken.
    pub fn pending_tls(&self) -> usize {
        self.tls_out.len()
    }

    /// Whether TLS bytes wait to be taken.
    pub fn wants_write(&self) -> bool {
        !self.tls_out.is_empty()
    }

    /// Encrypts a prefix of `data` (queues it, during the handshake) and
    /// returns its length: 0 when [`pending_tls`](Self::pending_tls) has
    /// reached the buffer limit
    /// ([`set_buffer_limit`](Self::set_buffer_limit)), in which case take the pending TLS bytes
    /// first. Fails with [`TlsError::Closed`] after
    /// [`send_close_notify`](Self::send_close_notify).
    pub fn write_plaintext(&mut self, data: &[u8]) -> Result<usize, TlsError> {
        if let Some(e) = &self.dead {
            return Err(map_rustls(e.clone()));
        }
        if self.sent_close {
            return Err(TlsError::Closed);
        }
        let room = self.buffer_limit.saturating_sub(self.tls_out.len());
        let take = data.len().min(room);
        if take == 0 {
            return Ok(0);
        }
        if let Some(t) = &mut self.traffic {
            return t.seal(&[&data[..take]], &mut self.tls_out);
        }
        let conn = self.conn.as_mut().ok_or(TlsError::Closed)?;
        let n = conn.writer().write(&data[..take]).map_err(TlsError::Io)?;
        self.drain_tls();
        Ok(n)
    }

    /// Encrypts all of `parts`, in order, as records of up to
    /// [`MAX_RECORD_PLAINTEXT`] bytes appended to `out`; returns the
    /// plaintext length. `out` grows by the plaintext plus
    /// [`RECORD_OVERHEAD`] per record; the caller bounds it. Only once the
    /// handshake is complete: before, fails with [`TlsError::NotEstablished`].
    /// [`seal_into`](Self::seal_into) does the same into a buffer the
    /// caller keeps from write to write.
    ///
    /// ```no_run
    /// # fn demo(chan: &mut juxta::pipe::tls::SecureChannel) -> Result<(), juxta::pipe::tls::TlsError> {
    /// let mut wire = bytes::BytesMut::new();
    /// chan.seal(&[&4u32.to_be_bytes()[..], &b"ping"[..]], &mut wire)?;
    /// // send `wire.freeze()` to the peer, which feeds it to `read_tls_bytes`
    /// # Ok(()) }
    /// ```
    pub fn seal(&mut self, parts: &[&[u8]], out: &mut BytesMut) -> Result<usize, TlsError> {
        self.check_seal()?;
        let t = self.traffic.as_mut().ok_or(TlsError::NotEstablished)?;
        // Whatever is pending goes first.
        if !self.tls_out.is_empty() {
            out.extend_from_slice(&self.tls_out);
            self.tls_out.clear();
        }
        t.seal(parts, out)
    }

    /// Encrypts all of `parts`, in order, into records written at the
    /// start of `out`, which must hold at least [`sealed_len`]`(parts)` +
    /// [`pending_tls`](Self::pending_tls) bytes (else
    /// [`TlsError::BufferTooSmall`]); returns the bytes written. The
    /// records are encrypted straight from the parts into `out` (a part's
    /// bytes are copied only where a record gathers several small parts):
    /// one pass over the plaintext. Only once the handshake is complete.
    ///
    /// ```no_run
    /// # fn demo(chan: &mut juxta::pipe::tls::SecureChannel) -> Result<(), juxta::pipe::tls::TlsError> {
    /// use juxta::pipe::tls::sealed_len;
    /// let parts: [&[u8]; 2] = [&4u32.to_be_bytes(), b"ping"];
    /// // Kept from write to write: no fresh memory per write.
    /// let mut wire = vec![0u8; sealed_len(&parts) + chan.pending_tls()];
    /// let n = chan.seal_into(&parts, &mut wire)?;
    /// // send `wire[..n]` to the peer
    /// # Ok(()) }
    /// ```
    pub fn seal_into(&mut self, parts: &[&[u8]], out: &mut [u8]) -> Result<usize, TlsError> {
        let need = sealed_len(parts) + self.tls_out.len();
        if out.len() < need {
            return Err(TlsError::BufferTooSmall {
                need,
                have: out.len(),
            });
        }
        self.check_seal()?;
        let pending = self.tls_out.len();
        let t = self.traffic.as_mut().ok_or(TlsError::NotEstablished)?;
        out[..pending].copy_from_slice(&self.tls_out);
        self.tls_out.clear();
        Ok(pending + t.seal_into(parts, &mut out[pending..])?)
    }

    /// Why nothing may be sealed now, if so.
    fn check_seal(&self) -> Result<(), TlsError> {
        if let Some(e) = &self.dead {
            return Err(map_rustls(e.clone()));
        }
        if self.sent_close {
            return Err(TlsError::Closed);
        }
        if self.traffic.is_none() {
            return Err(TlsError::NotEstablished);
        }
        Ok(())
    }

    /// Appends the decrypted bytes received so far to `buf` and returns
    /// how many. 0 means none yet, or none ever again if
    /// [`peer_closed`](Self::peer_closed).
    /// [`take_plaintext`](Self::take_plaintext) hands them over without
    /// this copy.
    ///
    /// Never fails at present; the `Result` keeps callers ready for a
    /// session that reports its failure here.
    pub fn read_plaintext(&mut self, buf: &mut BytesMut) -> Result<usize, TlsError> {
        let n = self.plain_len;
        buf.reserve(n);
        while let Some(b) = self.take_plaintext() {
            buf.extend_from_slice(&b);
        }
        Ok(n)
    }

    /// Takes the next piece of decrypted bytes, in order (`None`: none
    /// yet, or none ever again if [`peer_closed`](Self::peer_closed)). No
    /// copy: the piece is a slice of the buffer the records were decrypted
    /// into (the application data of all records decrypted at once, in
    /// one piece); that buffer is reused once the piece is dropped.
    pub fn take_plaintext(&mut self) -> Option<Bytes> {
        let b = self.plain_in.pop_front()?;
        self.plain_len -= b.len();
        Some(b)
    }

    /// Decrypted bytes waiting for [`read_plaintext`](Self::read_plaintext).
    pub fn plaintext_len(&self) -> usize {
        self.plain_len
    }

    /// Whether the handshake is still under way (also while it failed).
    pub fn is_handshaking(&self) -> bool {
        self.traffic.is_none()
    }

    /// The peer ID derived from the certificate the peer presented, once
    /// the handshake completed. On the client it is the expected peer; on
    /// the server it is whoever the client proved to be, for the caller to
    /// check.
    pub fn peer_id(&self) -> Option<PeerId> {
        self.peer.as_ref().map(|c| *c.derived_peer_id())
    }

    /// The certificate the peer presented, once the handshake completed.
    pub fn peer_cert(&self) -> Option<&RemoteCert> {
        self.peer.as_ref()
    }

    /// The cipher suite negotiated, once known.
    pub fn cipher_suite(&self) -> Option<SupportedCipherSuite> {
        match (&self.traffic, &self.conn) {
            (Some(t), _) => Some(t.suite),
            (None, Some(c)) => c.negotiated_cipher_suite(),
            (None, None) => None,
        }
    }

    /// Queues a `close_notify` alert (take it with
    /// [`take_tls`](Self::take_tls)); no plaintext may be written after it.
    pub fn send_close_notify(&mut self) {
        if !self.sent_close {
            if let Some(t) = &mut self.traffic {
                t.seal_alert(1, AlertDescription::CloseNotify, &mut self.tls_out);
            } else if let Some(c) = &mut self.conn {
                c.send_close_notify();
            }
        }
        self.sent_close = true;
        self.drain_tls();
    }

    /// Whether the peer sent `close_notify`: it will send no more data.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngCore, SeedableRng};
    use std::time::Instant;

    /// Two 2048-bit identities (ring refuses smaller RSA keys), generated
    /// once per test binary, in parallel.
    fn ids() -> &'static (Identity, Identity) {
        static IDS: OnceLock<(Identity, Identity)> = OnceLock::new();
        IDS.get_or_init(|| {
            let gen = |seed: u64| {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                Identity::generate(&mut rng, 2048, "TlsTest", 1_700_000_000).unwrap()
            };
            std::thread::scope(|s| {
                let a = s.spawn(|| gen(101));
                let b = s.spawn(|| gen(202));
                (a.join().unwrap(), b.join().unwrap())
            })
        })
    }

    /// Client configuration of identity A, server configuration of B.
    fn configs() -> &'static (Arc<ClientConfig>, Arc<ServerConfig>) {
        static CFGS: OnceLock<(Arc<ClientConfig>, Arc<ServerConfig>)> = OnceLock::new();
        CFGS.get_or_init(|| {
            let (a, b) = ids();
            (client_config(a).unwrap(), server_config(b).unwrap())
        })
    }

    /// Moves TLS bytes both ways until neither side has any; returns the
    /// first error each side reported (alerts keep flowing after one).
    fn pump(c: &mut SecureChannel, s: &mut SecureChannel) -> (Option<TlsError>, Option<TlsError>) {
        let (mut ce, mut se) = (None, None);
        for _ in 0..64 {
            let mut moved = false;
            if let Some(b) = c.take_tls(usize::MAX) {
                moved = true;
                if se.is_none() {
                    se = s.read_tls(&b).err();
                }
            }
            if let Some(b) = s.take_tls(usize::MAX) {
                moved = true;
                if ce.is_none() {
                    ce = c.read_tls(&b).err();
                }
            }
            if !moved {
                break;
            }
        }
        (ce, se)
    }

    fn connected() -> (SecureChannel, SecureChannel) {
        let (_, b) = ids();
        let (ccfg, scfg) = configs();
        let mut c = SecureChannel::client(ccfg.clone(), *b.peer_id()).unwrap();
        let mut s = SecureChannel::server(scfg.clone()).unwrap();
        let (ce, se) = pump(&mut c, &mut s);
        assert!(ce.is_none() && se.is_none(), "{ce:?} {se:?}");
        assert!(!c.is_handshaking() && !s.is_handshaking());
        (c, s)
    }

    /// Sends `data` from `tx` to `rx` through bounded writes and returns
    /// what `rx` decrypted.
    fn transfer(tx: &mut SecureChannel, rx: &mut SecureChannel, data: &[u8]) -> BytesMut {
        let mut got = BytesMut::new();
        let mut off = 0;
        while off < data.len() {
            let n = tx.write_plaintext(&data[off..]).unwrap();
            off += n;
            if n == 0 || tx.pending_tls() >= DEFAULT_BUFFER_LIMIT / 2 {
                while let Some(b) = tx.take_tls(100_000) {
                    rx.read_tls(&b).unwrap();
                }
            }
        }
        while let Some(b) = tx.take_tls(100_000) {
            rx.read_tls(&b).unwrap();
        }
        rx.read_plaintext(&mut got).unwrap();
        got
    }

    fn random(len: usize, seed: u64) -> Vec<u8> {
        let mut v = vec![0u8; len];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
        v
    }

    #[test]
    fn channel_is_send() {
        fn send<T: Send + 'static>() {}
        send::<SecureChannel>();
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<TlsError>();
    }

    #[test]
    fn handshake_and_data_both_ways() {
        let (a, b) = ids();
        let (mut c, mut s) = connected();
        assert_eq!(c.peer_id(), Some(*b.peer_id()));
        assert_eq!(s.peer_id(), Some(*a.peer_id()));
        assert_eq!(c.peer_cert().unwrap().der(), b.cert_der());

        assert_eq!(&transfer(&mut c, &mut s, b"x")[..], b"x");
        assert_eq!(&transfer(&mut s, &mut c, b"y")[..], b"y");
        let big = random(1 << 20, 1);
        assert_eq!(&transfer(&mut c, &mut s, &big)[..], &big[..]);
        let big2 = random(1 << 20, 2);
        assert_eq!(&transfer(&mut s, &mut c, &big2)[..], &big2[..]);
        assert_eq!(c.plaintext_len() + s.plaintext_len(), 0);
        assert!(format!("{c:?}").contains("client"));
    }

    #[test]
    fn negotiates_aes128_gcm() {
        let (c, s) = connected();
        for chan in [&c, &s] {
            let suite = chan.cipher_suite().unwrap();
            assert_eq!(suite.suite(), rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
            assert_eq!(suite.version(), &rustls::version::TLS13);
        }
    }

    #[test]
    fn server_exposes_client_peer_id() {
        let (a, _) = ids();
        let (_, scfg) = configs();
        let mut s = SecureChannel::server(scfg.clone()).unwrap();
        assert_eq!(s.peer_id(), None);
        let (_, b) = ids();
        let mut c = SecureChannel::client(configs().0.clone(), *b.peer_id()).unwrap();
        let (ce, se) = pump(&mut c, &mut s);
        assert!(ce.is_none() && se.is_none());
        assert_eq!(s.peer_id(), Some(*a.peer_id()));
        assert_eq!(s.peer_cert().unwrap().der(), a.cert_der());
    }

    #[test]
    fn client_rejects_unexpected_server() {
        let (a, b) = ids();
        let (ccfg, scfg) = configs();
        // The server is B; the client expects A.
        let mut c = SecureChannel::client(ccfg.clone(), *a.peer_id()).unwrap();
        let mut s = SecureChannel::server(scfg.clone()).unwrap();
        let (ce, se) = pump(&mut c, &mut s);
        match ce {
            Some(TlsError::PeerMismatch {
                expected,
                presented,
            }) => {
                assert_eq!(*expected, *a.peer_id());
                assert_eq!(*presented, *b.peer_id());
            }
            other => panic!("client: {other:?}"),
        }
        // The client's alert fails the server's handshake too.
        assert!(
            matches!(
                se,
                Some(TlsError::Rustls(rustls::Error::AlertReceived(
                    rustls::AlertDescription::CertificateUnknown
                )))
            ),
            "server: {se:?}"
        );
        assert_eq!(c.peer_id(), None);
        assert_eq!(s.peer_id(), None);
        // The dead session stays dead, typed, without panicking.
        assert!(matches!(
            c.read_tls(b"\x17\x03\x03\x00\x01\x00"),
            Err(TlsError::PeerMismatch { .. })
        ));
    }

    #[test]
    fn shared_client_config_refuses_every_server() {
        let (ccfg, scfg) = configs();
        let mut c = SecureChannel::client_with_config(ccfg.clone(), None).unwrap();
        let mut s = SecureChannel::server(scfg.clone()).unwrap();
        let (ce, se) = pump(&mut c, &mut s);
        assert!(matches!(ce, Some(TlsError::Failed(_))), "{ce:?}");
        assert!(se.is_some());
    }

    #[test]
    fn garbage_gives_typed_errors() {
        let (_, scfg) = configs();
        // Not TLS at all.
        let mut s = SecureChannel::server(scfg.clone()).unwrap();
        let e = s
            .read_tls(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap_err();
        assert!(matches!(e, TlsError::Rustls(_)), "{e:?}");
        // A handshake record with a bogus body.
        let mut s = SecureChannel::server(scfg.clone()).unwrap();
        let e = s
            .read_tls(b"\x16\x03\x01\x00\x08\x01\x00\x00\x04garb")
            .unwrap_err();
        assert!(matches!(e, TlsError::Rustls(_)), "{e:?}");
        // Random bytes, many sizes: errors, never panics.
        for seed in 0..200u64 {
            let mut s = SecureChannel::server(scfg.clone()).unwrap();
            let mut junk = random((seed as usize * 37) % 3000 + 1, seed);
            if seed % 2 == 0 {
                junk[0] = 0x16;
                if junk.len() > 2 {
                    junk[1] = 3;
                    junk[2] = 1;
                }
            }
            let _ = s.read_tls(&junk);
        }
        // A corrupted record in an established session.
        let (mut c, mut s) = connected();
        c.write_plaintext(b"hello").unwrap();
        let mut rec = c.take_tls(usize::MAX).unwrap();
        let last = rec.len() - 1;
        rec[last] ^= 1;
        let e = s.read_tls(&rec).unwrap_err();
        assert!(
            matches!(e, TlsError::Rustls(rustls::Error::DecryptError)),
            "{e:?}"
        );
    }

    #[test]
    fn small_rsa_keys_are_refused() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let small = Identity::generate(&mut rng, 1024, "Small", 1_700_000_000).unwrap();
        assert!(matches!(
            client_config(&small),
            Err(TlsError::KeySize { bits: 1024 })
        ));
        assert!(matches!(
            server_config(&small),
            Err(TlsError::KeySize { bits: 1024 })
        ));
        // Not only our check: ring itself refuses to sign with it.
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(small.private_key_pkcs8_der()));
        assert!(rustls::crypto::ring::sign::any_supported_type(&der).is_err());
        // And a peer presenting such a key is refused.
        let cert = CertificateDer::from(small.cert_der().to_vec());
        assert!(matches!(
            check_cert(&cert, &[]),
            Err(Rejection::KeyTooSmall(1024))
        ));
    }

    #[test]
    fn certificate_rules() {
        let (a, _) = ids();
        let cert = CertificateDer::from(a.cert_der().to_vec());
        assert_eq!(
            check_cert(&cert, &[]).unwrap().derived_peer_id(),
            a.peer_id()
        );
        assert!(matches!(
            check_cert(&cert, std::slice::from_ref(&cert)),
            Err(Rejection::Chain(1))
        ));
        let garbage = CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]);
        assert!(matches!(check_cert(&garbage, &[]), Err(Rejection::Cert(_))));
        assert!(matches!(
            map_rustls(Rejection::Chain(2).into()),
            TlsError::UnexpectedChain { len: 2 }
        ));
    }

    #[test]
    fn handshake_signature_is_verified_with_the_certificate_key() {
        // An impostor presents B's (public) certificate but holds only A's
        // private key: the peer ID matches, the CertificateVerify does not.
        let (a, b) = ids();
        let impostor_key = certified_key(a).unwrap().key.clone();
        let forged = CertifiedKey::new(
            vec![CertificateDer::from(b.cert_der().to_vec())],
            impostor_key,
        );
        let scfg = ServerConfig::builder_with_provider(provider().clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_client_cert_verifier(Arc::new(ClientPeerVerifier))
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(forged)));
        let mut c = SecureChannel::client(configs().0.clone(), *b.peer_id()).unwrap();
        let mut s = SecureChannel::server(Arc::new(scfg)).unwrap();
        let (ce, se) = pump(&mut c, &mut s);
        assert!(
            matches!(
                ce,
                Some(TlsError::Rustls(rustls::Error::InvalidCertificate(
                    CertificateError::BadSignature
                )))
            ),
            "client: {ce:?}"
        );
        assert!(
            matches!(
                se,
                Some(TlsError::Rustls(rustls::Error::AlertReceived(
                    rustls::AlertDescription::DecryptError
                )))
            ),
            "server: {se:?}"
        );
        assert_eq!(c.peer_id(), None);
    }

    #[test]
    fn signs_with_rsa_pss_sha256() {
        let key = certified_key(&ids().0).unwrap();
        let offered = [
            SignatureScheme::RSA_PSS_SHA512,
            SignatureScheme::RSA_PSS_SHA384,
            SignatureScheme::RSA_PSS_SHA256,
        ];
        let signer = key.key.choose_scheme(&offered).unwrap();
        assert_eq!(signer.scheme(), SignatureScheme::RSA_PSS_SHA256);
        let signer = key
            .key
            .choose_scheme(&[SignatureScheme::RSA_PSS_SHA512])
            .unwrap();
        assert_eq!(signer.scheme(), SignatureScheme::RSA_PSS_SHA512);
    }

    /// `seal_into` encrypts parts of every size straight from them (small
    /// parts gathered); the records open with `read_tls_bytes` (queued
    /// plaintext, in one piece) and with `read_tls_bytes_into` (straight
    /// into a buffer while records fit, the rest queued), in order.
    #[test]
    fn sealed_parts_open_into_buffers() {
        let (mut c, mut s) = connected();
        let big = random(3 * MAX_RECORD_PLAINTEXT + 777, 1);
        let mid = random(5000, 2);
        let parts: [&[u8]; 6] = [b"len!", b"hdr", &big, b"", &mid, b"tail"];
        let want: Vec<u8> = parts.concat();
        let mut wire = vec![0u8; sealed_len(&parts)];
        assert!(matches!(
            c.seal_into(&parts, &mut wire[..10]),
            Err(TlsError::BufferTooSmall { .. })
        ));
        let n = c.seal_into(&parts, &mut wire).unwrap();
        assert!(n <= sealed_len(&parts) && n > want.len());
        let wire = Bytes::copy_from_slice(&wire[..n]);
        s.read_tls_bytes(wire.clone()).unwrap();
        assert_eq!(s.plaintext_len(), want.len());
        let one = s.take_plaintext().unwrap();
        assert_eq!(&one[..], &want[..]);
        assert!(s.take_plaintext().is_none());
        drop(one);
        // Again (a new session), into a buffer that takes only the first
        // record, split at an odd place so that a partial record waits for
        // its rest.
        let (mut c, mut s) = connected();
        let mut wire = vec![0u8; sealed_len(&parts)];
        let n3 = c.seal_into(&parts, &mut wire).unwrap();
        let mut got = Vec::new();
        let mut dst = vec![0u8; MAX_RECORD_PLAINTEXT + 100];
        let cut = MAX_RECORD_PLAINTEXT + RECORD_OVERHEAD + 7000;
        let w = s
            .read_tls_bytes_into(Bytes::copy_from_slice(&wire[..cut]), &mut dst)
            .unwrap();
        assert!(w > 0);
        got.extend_from_slice(&dst[..w]);
        while let Some(b) = s.take_plaintext() {
            got.extend_from_slice(&b);
        }
        let w = s
            .read_tls_bytes_into(Bytes::copy_from_slice(&wire[cut..n3]), &mut dst)
            .unwrap();
        // A partial record was pending: everything was queued.
        assert_eq!(w, 0);
        while let Some(b) = s.take_plaintext() {
            got.extend_from_slice(&b);
        }
        assert_eq!(got, want);
        // Straight into a large buffer: all of it, nothing queued.
        let (mut c, mut s) = connected();
        let n = c.seal_into(&parts, &mut wire).unwrap();
        let mut dst = vec![0u8; want.len() + 100];
        let w = s
            .read_tls_bytes_into(Bytes::copy_from_slice(&wire[..n]), &mut dst)
            .unwrap();
        assert_eq!(&dst[..w], &want[..]);
        assert_eq!(s.plaintext_len(), 0);
        // A tampered record: an error, and the session is dead.
        let n = c.seal_into(&[b"x"], &mut wire).unwrap();
        wire[n - 1] ^= 1;
        let e = s
            .read_tls_bytes_into(Bytes::copy_from_slice(&wire[..n]), &mut dst)
            .unwrap_err();
        assert!(
            matches!(e, TlsError::Rustls(rustls::Error::DecryptError)),
            "{e:?}"
        );
        assert!(s.read_tls_bytes(Bytes::from_static(b"\x17")).is_err());
    }

    #[test]
    fn writes_are_bounded_and_records_may_split() {
        let (mut c, mut s) = connected();
        c.set_buffer_limit(64 * 1024);
        let data = random(1 << 20, 3);
        let n = c.write_plaintext(&data).unwrap();
        assert!(n > 0 && n <= 64 * 1024, "{n}");
        assert_eq!(c.write_plaintext(&data[n..]).unwrap(), 0);
        assert!(c.pending_tls() >= n && c.pending_tls() < 64 * 1024 + 1024);
        // Feed the records 1000 bytes at a time.
        while let Some(piece) = c.take_tls(1000) {
            assert!(piece.len() <= 1000);
            s.read_tls(&piece).unwrap();
        }
        let mut got = BytesMut::new();
        assert_eq!(s.read_plaintext(&mut got).unwrap(), n);
        assert_eq!(&got[..], &data[..n]);
        // Appending to a non-empty buffer.
        assert!(c.write_plaintext(b"tail").unwrap() == 4);
        let mut wire = vec![];
        c.write_tls_into(&mut wire);
        s.read_tls(&wire).unwrap();
        s.read_plaintext(&mut got).unwrap();
        assert_eq!(&got[n..], b"tail");
    }

    #[test]
    fn unread_plaintext_is_bounded() {
        let (mut c, mut s) = connected();
        c.write_plaintext(&[5u8; 1000]).unwrap();
        let rec = c.take_tls(usize::MAX).unwrap();
        s.set_max_unread_plaintext(500);
        assert!(matches!(
            s.read_tls(&rec),
            Err(TlsError::BufferFull { unread: 0, .. })
        ));
        s.set_max_unread_plaintext(10_000);
        s.read_tls(&rec).unwrap();
        let mut got = BytesMut::new();
        assert_eq!(s.read_plaintext(&mut got).unwrap(), 1000);
    }

    #[test]
    fn data_written_during_handshake_is_sent_after_it() {
        let (_, b) = ids();
        let (ccfg, scfg) = configs();
        let mut c = SecureChannel::client(ccfg.clone(), *b.peer_id()).unwrap();
        let mut s = SecureChannel::server(scfg.clone()).unwrap();
        assert_eq!(c.write_plaintext(b"early").unwrap(), 5);
        let (ce, se) = pump(&mut c, &mut s);
        assert!(ce.is_none() && se.is_none());
        let mut got = BytesMut::new();
        s.read_plaintext(&mut got).unwrap();
        assert_eq!(&got[..], b"early");
    }

    #[test]
    fn close_notify() {
        let (mut c, mut s) = connected();
        c.write_plaintext(b"last").unwrap();
        c.send_close_notify();
        assert!(matches!(c.write_plaintext(b"more"), Err(TlsError::Closed)));
        let wire = c.take_tls(usize::MAX).unwrap();
        s.read_tls(&wire).unwrap();
        assert!(s.peer_closed());
        let mut got = BytesMut::new();
        s.read_plaintext(&mut got).unwrap();
        assert_eq!(&got[..], b"last");
        assert!(matches!(
            s.read_tls(b"\x17\x03\x03\x00\x01\x00"),
            Err(TlsError::DataAfterClose)
        ));
    }

    /// Encrypt + decrypt throughput, for information:
    /// `cargo test -p juxta --release --lib pipe::tls::tests::throughput -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn throughput_64_mb() {
        const MSG: usize = 1 << 20;
        const COUNT: usize = 64;
        let (mut c, mut s) = connected();
        let msg = random(MSG, 9);
        let mut pieces: Vec<BytesMut> = Vec::new();
        let mut got = BytesMut::new();
        let (mut enc, mut dec) = (0f64, 0f64);
        let start = Instant::now();
        for _ in 0..COUNT {
            // Encrypt as a secure pipe does: bounded writes, the pending
            // records taken whenever the buffer is full.
            let t = Instant::now();
            let mut off = 0;
            while off < MSG {
                off += c.write_plaintext(&msg[off..]).unwrap();
                if let Some(b) = c.take_tls(usize::MAX) {
                    pieces.push(b);
                }
            }
            enc += t.elapsed().as_secs_f64();
            let t = Instant::now();
            for p in pieces.drain(..) {
                s.read_tls_bytes(p.freeze()).unwrap();
            }
            got.clear();
            assert_eq!(s.read_plaintext(&mut got).unwrap(), MSG);
            dec += t.elapsed().as_secs_f64();
        }
        let total = start.elapsed().as_secs_f64();
        let mb = (MSG * COUNT) as f64 / 1e6;
        // The fast path: one seal per message into a reused buffer,
        // straight from the message; decryption straight into a reused
        // plaintext buffer.
        let (mut seal, mut open) = (0f64, 0f64);
        let mut out = vec![0u8; sealed_len(&[&msg])];
        for _ in 0..COUNT {
            let t = Instant::now();
            let n = c.seal_into(&[&msg], &mut out).unwrap();
            seal += t.elapsed().as_secs_f64();
            let wire = Bytes::copy_from_slice(&out[..n]);
            let t = Instant::now();
            s.read_tls_bytes(wire).unwrap();
            assert_eq!(s.take_plaintext().unwrap().len(), MSG);
            open += t.elapsed().as_secs_f64();
        }
        println!(
            "seal_into {:.0} MB/s, read_tls_bytes + take_plaintext {:.0} MB/s",
            mb / seal,
            mb / open,
        );
        // The raw AEADs, 16 KiB records sealed in place: aws-lc-rs (ours)
        // against ring.
        let mut buf = msg.clone();
        let mut time = |f: &mut dyn FnMut(&mut [u8])| {
            let t = Instant::now();
            for _ in 0..COUNT {
                for chunk in buf.chunks_mut(MAX_RECORD_PLAINTEXT) {
                    f(chunk);
                }
            }
            mb / t.elapsed().as_secs_f64()
        };
        for (name, alg, ralg, klen) in [
            (
                "AES-128-GCM",
                &aead::AES_128_GCM,
                &ring::aead::AES_128_GCM,
                16,
            ),
            (
                "AES-256-GCM",
                &aead::AES_256_GCM,
                &ring::aead::AES_256_GCM,
                32,
            ),
            (
                "ChaCha20-Poly1305",
                &aead::CHACHA20_POLY1305,
                &ring::aead::CHACHA20_POLY1305,
                32,
            ),
        ] {
            let k = vec![7u8; klen];
            let key = aead::LessSafeKey::new(aead::UnboundKey::new(alg, &k).unwrap());
            let aws = time(&mut |chunk| {
                let nonce = aead::Nonce::assume_unique_for_key([1; 12]);
                let _ = key
                    .seal_in_place_separate_tag(nonce, aead::Aad::from([0u8; 5]), chunk)
                    .unwrap();
            });
            let rkey = ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(ralg, &k).unwrap());
            let ring_mbs = time(&mut |chunk| {
                let nonce = ring::aead::Nonce::assume_unique_for_key([1; 12]);
                let _ = rkey
                    .seal_in_place_separate_tag(nonce, ring::aead::Aad::from([0u8; 5]), chunk)
                    .unwrap();
            });
            println!(
                "raw {name}, 16 KiB records: aws-lc-rs {aws:.0} MB/s, ring {ring_mbs:.0} MB/s"
            );
        }
        println!(
            "TLS 1.3 {:?}: {COUNT} x 1 MiB: encrypt {:.0} MB/s, decrypt {:.0} MB/s, \
             encrypt+decrypt {:.0} MB/s ({total:.3} s)",
            c.cipher_suite().unwrap().suite(),
            mb / enc,
            mb / dec,
            mb / total
        );
    }
}
