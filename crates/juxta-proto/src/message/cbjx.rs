//! The CBJX signature trailer JXSE 2.7 appends after the last element of
//! every binary message it sends or accepts (digest §2.4):
//!
//! ```text
//! u32 certLen certDER[certLen]  u32 srcLen src[srcLen]  u32 sigLen sig[sigLen]
//! sig = SHA256withRSA( message bytes from "jxmg" to the end of the last element
//!                      || certDER || src )
//! src = ASCII "urn:jxta:cbid-…" (the signer's peer ID, canonical upper case)
//! ```
//!
//! [`trailer_for`] writes one; [`parse_trailer`] slices one out of a
//! received buffer without copying; a per-connection [`CbjxVerifier`]
//! checks it, keeping the sender's parsed certificate so that steady-state
//! verification is one SHA-256 pass plus one RSA public-key operation.

use bytes::{BufMut, Bytes, BytesMut};
/// SHA-256 as CBJX streams it: `sha2`'s on a CPU with the SHA extensions
/// (which it uses), `ring`'s assembly otherwise, which hashes about 1.8x
/// faster than `sha2`'s portable code there (345 against 187 MB/s on a
/// Cascade Lake Xeon: docs/benchmarks.md, "CBJX hashing without SHA-NI").
/// Both give the same digest; which one runs is chosen once per process.
#[derive(Clone)]
pub struct Sha256(Hasher);

#[derive(Clone)]
enum Hasher {
    Sha2(sha2::Sha256),
    /// Boxed: a `ring` context is several times the size of `sha2`'s.
    Ring(Box<ring::digest::Context>),
}

/// Whether `sha2` has the CPU's SHA extensions to use.
fn sha_extensions() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("sha"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

impl Sha256 {
    /// A hasher with nothing hashed yet.
    ///
    /// ```
    /// use juxta_proto::message::cbjx::Sha256;
    /// let d = Sha256::new().chain_update(b"ab").chain_update(b"c").finalize();
    /// assert_eq!(d[..4], [0xba, 0x78, 0x16, 0xbf]); // SHA-256("abc")
    /// ```
    pub fn new() -> Sha256 {
        if sha_extensions() {
            Sha256::with_sha2()
        } else {
            Sha256::with_ring()
        }
    }

    fn with_sha2() -> Sha256 {
        use sha2::Digest;
        Sha256(Hasher::Sha2(sha2::Sha256::new()))
    }

    fn with_ring() -> Sha256 {
        Sha256(Hasher::Ring(Box::new(ring::digest::Context::new(
            &ring::digest::SHA256,
        ))))
    }

    /// Hashes the next bytes.
    pub fn update(&mut self, data: &[u8]) {
        match &mut self.0 {
            Hasher::Sha2(h) => sha2::Digest::update(h, data),
            Hasher::Ring(h) => h.update(data),
        }
    }

    /// [`Sha256::update`], by value.
    pub fn chain_update(mut self, data: impl AsRef<[u8]>) -> Sha256 {
        self.update(data.as_ref());
        self
    }

    /// The digest of everything hashed.
    pub fn finalize(self) -> [u8; 32] {
        match self.0 {
            Hasher::Sha2(h) => sha2::Digest::finalize(h).into(),
            Hasher::Ring(h) => {
                let mut out = [0u8; 32];
                out.copy_from_slice((*h).finish().as_ref());
                out
            }
        }
    }
}

impl Default for Sha256 {
    fn default() -> Sha256 {
        Sha256::new()
    }
}

impl std::fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let which = match self.0 {
            Hasher::Sha2(_) => "sha2",
            Hasher::Ring(_) => "ring",
        };
        f.debug_tuple("Sha256").field(&which).finish()
    }
}

use crate::id::{IdError, PeerId};
use crate::identity::{Identity, IdentityError, RemoteCert};

/// Largest certificate accepted in a trailer.
pub const MAX_TRAILER_CERT_LEN: usize = 16 * 1024;
/// Largest `src` accepted in a trailer.
pub const MAX_TRAILER_SRC_LEN: usize = 1024;
/// Largest signature accepted in a trailer (8192-bit RSA).
pub const MAX_TRAILER_SIG_LEN: usize = 1024;

/// A field of the trailer, for error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrailerField {
    /// The certificate.
    Cert,
    /// The source peer ID.
    Src,
    /// The signature.
    Sig,
}

impl std::fmt::Display for TrailerField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrailerField::Cert => "cert",
            TrailerField::Src => "src",
            TrailerField::Sig => "sig",
        })
    }
}

/// Errors from parsing or verifying a CBJX trailer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CbjxError {
    /// The buffer ends inside the trailer.
    #[error("CBJX trailer truncated in {field}")]
    Truncated {
        /// The field being read.
        field: TrailerField,
    },
    /// A length field exceeds its bound.
    #[error("CBJX trailer {field} of {len} bytes exceeds {max}")]
    TooLong {
        /// The field.
        field: TrailerField,
        /// The length announced.
        len: u64,
        /// The bound.
        max: usize,
    },
    /// Bytes follow the signature.
    #[error("{0} bytes after the CBJX trailer")]
    TrailingBytes(usize),
    /// `src` is not ASCII text.
    #[error("CBJX src is not ASCII")]
    SrcNotAscii,
    /// `src` is not a peer ID URN.
    #[error("CBJX src is not a peer ID: {0}")]
    BadSrc(IdError),
    /// The certificate is unusable (malformed, not RSA, not self-signed…).
    #[error("CBJX certificate rejected: {0}")]
    BadCert(IdentityError),
    /// The signature does not verify.
    #[error("CBJX signature does not verify")]
    BadSignature,
}

/// A parsed trailer; every field is a slice of the received buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trailer {
    /// The signer's X.509 certificate, DER.
    pub cert: Bytes,
    /// The signer's peer ID, ASCII `urn:jxta:cbid-…`.
    pub src: Bytes,
    /// The SHA256withRSA signature.
    pub sig: Bytes,
}

impl Trailer {
    /// The encoded length of this trailer.
    pub fn encoded_len(&self) -> usize {
        12 + self.cert.len() + self.src.len() + self.sig.len()
    }

    /// Encodes the trailer (`u32 len, bytes` three times).
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.encoded_len());
        for f in [&self.cert, &self.src, &self.sig] {
            b.put_u32(f.len() as u32);
            b.put_slice(f);
        }
        b.freeze()
    }
}

/// The digest a CBJX signature covers: SHA-256 over the message pieces in
/// order, then `cert`, then `src`. Streams; nothing is concatenated.
pub fn signed_digest<'a>(
    message: impl IntoIterator<Item = &'a [u8]>,
    cert: &[u8],
    src: &[u8],
) -> [u8; 32] {
    let mut h = Sha256::new();
    for piece in message {
        h.update(piece);
    }
    h.update(cert);
    h.update(src);
    h.finalize()
}

/// Builds the trailer `identity` appends to a message whose encoding (from
/// `jxmg` to the end of the last element) is `message_chunks`, e.g.
/// [`EncodedMessage::chunks`](super::EncodedMessage::chunks).
///
/// ```
/// use juxta_proto::identity::Identity;
/// use juxta_proto::message::cbjx::{parse_trailer, trailer_for, CbjxVerifier};
/// use juxta_proto::message::{encode_v0, namespace_order::JavaHashOrder, Element, Message};
/// let me = Identity::generate(&mut rand::thread_rng(), 1024, "Juxta", 1_700_000_000).unwrap();
/// let msg = Message::new().with(Element::bytes("bench", "data", &b"a"[..]));
/// let enc = encode_v0(&msg, JavaHashOrder::Java8).unwrap();
/// let trailer = parse_trailer(trailer_for(&me, &enc.chunks)).unwrap();
/// let pieces: Vec<&[u8]> = enc.chunks.iter().map(|c| &c[..]).collect();
/// let src = CbjxVerifier::new().verify(&pieces, &trailer).unwrap();
/// assert_eq!(&src.peer, me.peer_id());
/// assert!(src.cert_matches_id);
/// ```
pub fn trailer_for(identity: &Identity, message_chunks: &[Bytes]) -> Bytes {
    let cert = identity.cert_der();
    let src = identity.peer_urn();
    let digest = signed_digest(message_chunks.iter().map(|c| &c[..]), cert, src);
    Trailer {
        cert: cert.clone(),
        src: src.clone(),
        sig: identity.sign_sha256_prehash(&digest),
    }
    .encode()
}

/// The trailer of a message whose bytes are hashed while they are written
/// (a large message need not be hashed whole before its first byte goes
/// out): feed every signed byte to [`PendingTrailer::update`], in order,
/// then [`PendingTrailer::finish`] signs and encodes the trailer, exactly
/// as [`trailer_for`] would over the same bytes.
///
/// ```
/// use juxta_proto::identity::Identity;
/// use juxta_proto::message::cbjx::{trailer_for, PendingTrailer};
/// use juxta_proto::message::{encode_v0, namespace_order::JavaHashOrder, Element, Message};
/// use std::sync::Arc;
/// let me = Arc::new(Identity::generate(&mut rand::thread_rng(), 1024, "Juxta", 1_700_000_000).unwrap());
/// let msg = Message::new().with(Element::bytes("bench", "data", &b"abc"[..]));
/// let enc = encode_v0(&msg, JavaHashOrder::Java8).unwrap();
/// let mut pending = PendingTrailer::new(me.clone());
/// for c in &enc.chunks {
///     pending.update(c);
/// }
/// let len = pending.encoded_len();
/// let trailer = pending.finish().unwrap();
/// assert_eq!(trailer.len(), len);
/// assert_eq!(trailer, trailer_for(&me, &enc.chunks));
/// ```
pub struct PendingTrailer {
    hasher: Sha256,
    identity: std::sync::Arc<Identity>,
}

impl std::fmt::Debug for PendingTrailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingTrailer")
            .field("signer", self.identity.peer_id())
            .finish_non_exhaustive()
    }
}

impl PendingTrailer {
    /// A trailer to be signed by `identity`, nothing hashed yet.
    pub fn new(identity: std::sync::Arc<Identity>) -> PendingTrailer {
        PendingTrailer {
            hasher: Sha256::new(),
            identity,
        }
    }

    /// Hashes the next signed bytes of the message.
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// The length [`PendingTrailer::finish`] returns (known before the
    /// message is hashed, for the frame's `content-length`): an RSA
    /// PKCS#1 v1.5 signature is as long as the modulus.
    pub fn encoded_len(&self) -> usize {
        12 + self.identity.cert_der().len()
            + self.identity.peer_urn().len()
            + self.identity.key_bits().div_ceil(8)
    }

    /// Signs the bytes hashed so far and encodes the trailer. `None` if
    /// the signature did not come out as long as announced (the signer
    /// failed): the frame whose length counted it cannot be completed.
    pub fn finish(self) -> Option<Bytes> {
        let want = self.encoded_len();
        let cert = self.identity.cert_der();
        let src = self.identity.peer_urn();
        let mut h = self.hasher;
        h.update(cert);
        h.update(src);
        let digest: [u8; 32] = h.finalize();
        let t = Trailer {
            cert: cert.clone(),
            src: src.clone(),
            sig: self.identity.sign_sha256_prehash(&digest),
        }
        .encode();
        (t.len() == want).then_some(t)
    }
}

/// Parses a trailer. `buf` must be exactly the bytes after the last element
/// (see [`DecodedMessage::elements_end`](super::DecodedMessage::elements_end));
/// the fields are zero-copy slices of it.
pub fn parse_trailer(buf: Bytes) -> Result<Trailer, CbjxError> {
    let mut pos = 0usize;
    let mut field = |field: TrailerField, max: usize| -> Result<Bytes, CbjxError> {
        let rest = &buf[pos..];
        if rest.len() < 4 {
            return Err(CbjxError::Truncated { field });
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > max {
            return Err(CbjxError::TooLong {
                field,
                len: len as u64,
                max,
            });
        }
        if rest.len() - 4 < len {
            return Err(CbjxError::Truncated { field });
        }
        let start = pos + 4;
        pos = start + len;
        Ok(buf.slice(start..pos))
    };
    let cert = field(TrailerField::Cert, MAX_TRAILER_CERT_LEN)?;
    let src = field(TrailerField::Src, MAX_TRAILER_SRC_LEN)?;
    let sig = field(TrailerField::Sig, MAX_TRAILER_SIG_LEN)?;
    if pos != buf.len() {
        return Err(CbjxError::TrailingBytes(buf.len() - pos));
    }
    Ok(Trailer { cert, src, sig })
}

/// Who signed a message whose trailer verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifiedSource {
    /// The peer ID the trailer's `src` names.
    pub peer: PeerId,
    /// Whether `peer` is the `cbid` derived from the certificate's key.
    /// JXSE peers whose IDs were set by hand do not match; the caller
    /// decides what that means (JXSE itself only requires it for the
    /// router's fingerprint element, digest §5.3).
    pub cert_matches_id: bool,
}

/// Verifies the CBJX trailers received on one connection. It keeps the last
/// sender certificate it parsed (keyed by its DER bytes), so a steady stream
/// from one peer costs one SHA-256 pass and one RSA verification per message.
#[derive(Debug, Default, Clone)]
pub struct CbjxVerifier {
    cert: Option<RemoteCert>,
}

impl CbjxVerifier {
    /// A verifier with an empty cache.
    pub fn new() -> CbjxVerifier {
        CbjxVerifier::default()
    }

    /// The certificate of the last verified sender, if any.
    pub fn cached_cert(&self) -> Option<&RemoteCert> {
        self.cert.as_ref()
    }

    /// Verifies `trailer` against the signed message bytes (from `jxmg` to
    /// [`elements_end`](super::DecodedMessage::elements_end), possibly in
    /// several pieces) and returns the peer the trailer's `src` names.
    ///
    /// Verify over the bytes as received: JXSE signs what it sends.
    pub fn verify(
        &mut self,
        signed: &[&[u8]],
        trailer: &Trailer,
    ) -> Result<VerifiedSource, CbjxError> {
        let mut h = Sha256::new();
        for piece in signed {
            h.update(piece);
        }
        self.verify_hashed(h, trailer)
    }

    /// [`CbjxVerifier::verify`] of a message whose signed bytes were
    /// hashed as they arrived: `message` has absorbed exactly the bytes
    /// from `jxmg` to the end of the last element, in order (the trailer's
    /// `cert` and `src` are added here). Same checks, same errors.
    pub fn verify_hashed(
        &mut self,
        message: Sha256,
        trailer: &Trailer,
    ) -> Result<VerifiedSource, CbjxError> {
        if !trailer.src.is_ascii() {
            return Err(CbjxError::SrcNotAscii);
        }
        // ASCII was checked, so this is valid UTF-8.
        let src_str = std::str::from_utf8(&trailer.src).map_err(|_| CbjxError::SrcNotAscii)?;
        let peer: PeerId = src_str.parse().map_err(CbjxError::BadSrc)?;

        let cached = match self.cert.take() {
            Some(c) if c.der()[..] == trailer.cert[..] => c,
            old => match RemoteCert::parse(trailer.cert.clone()) {
                Ok(c) => c,
                Err(e) => {
                    self.cert = old;
                    return Err(CbjxError::BadCert(e));
                }
            },
        };
        let cert = self.cert.insert(cached);

        let mut h = message;
        h.update(&trailer.cert);
        h.update(&trailer.src);
        let digest: [u8; 32] = h.finalize();
        cert.verify_sha256_prehash(&digest, &trailer.sig)
            .map_err(|_| CbjxError::BadSignature)?;
        Ok(VerifiedSource {
            cert_matches_id: cert.derived_peer_id() == &peer,
            peer,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_sha256_backends_give_the_same_digest_however_the_bytes_are_cut() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for len in [0usize, 1, 55, 56, 63, 64, 65, 1000, 65_536, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let want: [u8; 32] = sha2::Digest::finalize(sha2::Digest::chain_update(
                <sha2::Sha256 as sha2::Digest>::new(),
                &data,
            ))
            .into();
            for mut h in [Sha256::with_sha2(), Sha256::with_ring(), Sha256::new()] {
                let mut at = 0;
                while at < len {
                    let n = rng.gen_range(1..=(len - at).min(70_000));
                    h.update(&data[at..at + n]);
                    at += n;
                }
                assert_eq!(h.finalize(), want, "{len} bytes");
            }
        }
    }

    use super::*;
    use crate::message::namespace_order::JavaHashOrder;
    use crate::message::{decode_v0, encode_v0, Element, Message};
    use proptest::prelude::*;
    use rand::SeedableRng;
    use std::sync::OnceLock;

    const VECTOR_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jxse-2.7-stock/");

    fn identity() -> &'static Identity {
        static ID: OnceLock<Identity> = OnceLock::new();
        ID.get_or_init(|| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            Identity::generate(&mut rng, 1024, "JuxtaTest", 1_700_000_000).unwrap()
        })
    }

    fn sample_message() -> Message {
        Message::new()
            .with(Element::bytes("bench", "data", vec![0x61u8; 700]))
            .with(Element::text(
                "jxta",
                "EndpointSourceAddress",
                "jxta://cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03",
            ))
            .with(Element::text(
                "jxta",
                "EndpointDestinationAddress",
                "tcp://127.0.0.1:9701/EndpointService:jxta-NetGroup/BenchEP/data",
            ))
    }

    /// decode → parse trailer → verify, as a receiver does.
    fn receive(v: &mut CbjxVerifier, body: Bytes) -> Result<VerifiedSource, String> {
        let d = decode_v0(body.clone()).map_err(|e| format!("decode: {e}"))?;
        let t = parse_trailer(body.slice(d.elements_end..)).map_err(|e| format!("{e}"))?;
        v.verify(&[&body[..d.elements_end]], &t)
            .map_err(|e| format!("{e}"))
    }

    #[test]
    fn trailer_signature_is_unchanged_by_the_openssl_signer() {
        let me = identity();
        let enc = encode_v0(&sample_message(), JavaHashOrder::Java8).unwrap();
        let t = parse_trailer(trailer_for(me, &enc.chunks)).unwrap();
        let digest = signed_digest(
            enc.chunks.iter().map(|c| &c[..]),
            me.cert_der(),
            me.peer_urn(),
        );
        assert_eq!(
            &t.sig[..],
            &crate::identity::reference::sign_sha256(me, &digest)[..]
        );
    }

    #[test]
    fn round_trip_and_tamper() {
        let me = identity();
        let enc = encode_v0(&sample_message(), JavaHashOrder::Java8).unwrap();
        assert!(enc.chunks.len() > 1, "want a multi-chunk encoding");
        let trailer = trailer_for(me, &enc.chunks);
        let parsed = parse_trailer(trailer.clone()).unwrap();
        assert_eq!(parsed.cert, me.cert_der());
        assert_eq!(&parsed.src[..], me.peer_id().to_string().as_bytes());
        assert_eq!(parsed.sig.len(), 128);
        assert_eq!(parsed.encode(), trailer);

        let mut v = CbjxVerifier::new();
        // Verify over the pieces as encoded…
        let pieces: Vec<&[u8]> = enc.chunks.iter().map(|c| &c[..]).collect();
        let src = v.verify(&pieces, &parsed).unwrap();
        assert_eq!(&src.peer, me.peer_id());
        assert!(src.cert_matches_id);
        // …and over the contiguous frame, as received.
        let mut body = BytesMut::new();
        body.extend_from_slice(&enc.to_bytes());
        body.extend_from_slice(&trailer);
        let body = body.freeze();
        assert_eq!(receive(&mut v, body.clone()).unwrap(), src);
        assert!(v.cached_cert().is_some());

        // Flip every byte of message, cert, src and sig: always a typed error.
        let mut failures = 0;
        for i in 0..body.len() {
            let mut t = body.to_vec();
            t[i] ^= 0x01;
            let r = receive(&mut v, Bytes::from(t));
            assert!(r.is_err(), "flipping byte {i} still verified");
            failures += 1;
        }
        assert_eq!(failures, body.len());
        // The cache survived the bad certificates.
        assert_eq!(receive(&mut v, body).unwrap(), src);
    }

    #[test]
    fn hand_set_src_is_reported() {
        let me = identity();
        let enc = encode_v0(&sample_message(), JavaHashOrder::Java8).unwrap();
        let other =
            "urn:jxta:cbid-59616261646162614A7874615032503382ABB44155FA6D74CC260BD252D0829A03";
        let cert = me.cert_der().clone();
        let src = Bytes::from_static(other.as_bytes());
        let digest = signed_digest(enc.chunks.iter().map(|c| &c[..]), &cert, &src);
        let t = Trailer {
            cert,
            src,
            sig: me.sign_sha256_prehash(&digest),
        };
        let pieces: Vec<&[u8]> = enc.chunks.iter().map(|c| &c[..]).collect();
        let r = CbjxVerifier::new().verify(&pieces, &t).unwrap();
        assert_eq!(r.peer.to_string(), other);
        assert!(!r.cert_matches_id);
    }

    #[test]
    fn bad_src_and_bounds() {
        let me = identity();
        let mk = |src: &[u8]| Trailer {
            cert: me.cert_der().clone(),
            src: Bytes::copy_from_slice(src),
            sig: Bytes::from_static(&[0; 128]),
        };
        let mut v = CbjxVerifier::new();
        assert_eq!(
            v.verify(&[b"jxmg"], &mk(b"urn:jxta:\xff")),
            Err(CbjxError::SrcNotAscii)
        );
        assert!(matches!(
            v.verify(&[b"jxmg"], &mk(b"jxta://cbid-00")),
            Err(CbjxError::BadSrc(_))
        ));
        // A pipe ID is not a peer ID.
        assert!(matches!(
            v.verify(
                &[b"jxmg"],
                &mk(b"urn:jxta:cbid-59616261646162614E50472050325033FB13C4EF50E149519865DF4CF007791604")
            ),
            Err(CbjxError::BadSrc(_))
        ));
        assert_eq!(
            v.verify(&[b"jxmg"], &mk(me.peer_urn())),
            Err(CbjxError::BadSignature)
        );

        let good = mk(b"urn:jxta:cbid-00").encode();
        assert_eq!(
            parse_trailer(good.slice(..good.len() - 1)),
            Err(CbjxError::Truncated {
                field: TrailerField::Sig
            })
        );
        assert_eq!(
            parse_trailer(good.slice(..2)),
            Err(CbjxError::Truncated {
                field: TrailerField::Cert
            })
        );
        let mut extra = good.to_vec();
        extra.push(0);
        assert_eq!(
            parse_trailer(Bytes::from(extra)),
            Err(CbjxError::TrailingBytes(1))
        );
        assert_eq!(
            parse_trailer(Bytes::new()).unwrap_err(),
            CbjxError::Truncated {
                field: TrailerField::Cert
            }
        );
        let huge = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0]);
        assert_eq!(
            parse_trailer(huge),
            Err(CbjxError::TooLong {
                field: TrailerField::Cert,
                len: 0xffff_ffff,
                max: MAX_TRAILER_CERT_LEN
            })
        );
        let mut long_src = vec![0, 0, 0, 0];
        long_src.extend_from_slice(&(MAX_TRAILER_SRC_LEN as u32 + 1).to_be_bytes());
        assert!(matches!(
            parse_trailer(Bytes::from(long_src)),
            Err(CbjxError::TooLong {
                field: TrailerField::Src,
                ..
            })
        ));
    }

    /// Skips the JXTA frame header (`u8 nameLen, name, u16 valueLen, value`
    /// repeated, ended by a 0 byte) and returns the body, checking it
    /// against `content-length`.
    fn frame_body(frame: &[u8]) -> Bytes {
        let mut pos = 0;
        let mut content_length = None;
        loop {
            let name_len = frame[pos] as usize;
            pos += 1;
            if name_len == 0 {
                break;
            }
            let name = &frame[pos..pos + name_len];
            pos += name_len;
            let value_len = u16::from_be_bytes([frame[pos], frame[pos + 1]]) as usize;
            pos += 2;
            let value = &frame[pos..pos + value_len];
            pos += value_len;
            if name == b"content-length" {
                content_length = Some(u64::from_be_bytes(value.try_into().unwrap()));
            }
        }
        let body = Bytes::copy_from_slice(&frame[pos..]);
        assert_eq!(content_length, Some(body.len() as u64));
        body
    }

    fn read_vector(name: &str) -> Vec<u8> {
        let path = format!("{VECTOR_DIR}{name}");
        std::fs::read(&path).unwrap_or_else(|e| {
            panic!("JXSE test vector {path} is missing ({e}); it is committed under crates/juxta-proto/tests/data/")
        })
    }

    #[test]
    fn jxse_vectors_verify() {
        let mut jxse_peer = None;
        for name in [
            "40_endpoint_direct_tcp_message_1B.bin",
            "10_unicast_pipe_message_1B.bin",
            "41_endpoint_routed_message_1B.bin",
        ] {
            let body = frame_body(&read_vector(name));
            let d = decode_v0(body.clone()).unwrap();
            let trailer = parse_trailer(body.slice(d.elements_end..)).unwrap();
            assert_eq!(trailer.sig.len(), 128, "{name}");

            // JXSE's certificate: self-signed SHA1withRSA, and its derived
            // cbid is the trailer src (our derivation matches JXSE's).
            let cert = RemoteCert::parse(trailer.cert.clone()).unwrap();
            assert_eq!(cert.key_bits(), 1024);
            assert_eq!(
                cert.derived_peer_id().to_string().as_bytes(),
                &trailer.src[..],
                "{name}"
            );

            let mut v = CbjxVerifier::new();
            let src = v.verify(&[&body[..d.elements_end]], &trailer).unwrap();
            assert!(src.cert_matches_id, "{name}");
            // Same thing with the signed bytes split into pieces.
            let (a, b) = body[..d.elements_end].split_at(17);
            assert_eq!(v.verify(&[a, b, &[]], &trailer).unwrap(), src);
            if let Some(p) = jxse_peer {
                assert_eq!(p, src.peer, "one sender for all vectors");
            }
            jxse_peer = Some(src.peer);

            // Our encoder reproduces JXSE's bytes exactly (digest §2.5).
            let ours = encode_v0(&d.message, JavaHashOrder::Java8).unwrap();
            assert_eq!(ours.to_bytes(), body.slice(..d.elements_end), "{name}");

            // The router fingerprint (digest §5.3), when present:
            // u32 payload, u32 cert, u32 sig; sig over payload || cert.
            if let Some(fp) = d.message.get("jxta", "EndpointRouterMsg-fingerprint") {
                let f = parse_trailer(fp.data.clone()).unwrap();
                assert!(f.cert.starts_with(b"jxta://cbid-"), "payload first");
                let (payload, fcert, fsig) = (f.cert, f.src, f.sig);
                assert_eq!(fcert, trailer.cert);
                let digest: [u8; 32] = Sha256::new()
                    .chain_update(&payload)
                    .chain_update(&fcert)
                    .finalize();
                cert.verify_sha256_prehash(&digest, &fsig).unwrap();
                assert_eq!(
                    &payload[..],
                    cert.derived_peer_id().endpoint_address().as_bytes()
                );
            }
        }
    }

    #[test]
    fn parse_trailer_random_bytes_never_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..20_000 {
            let len = (rand::RngCore::next_u32(&mut rng) % 64) as usize;
            let mut b = vec![0u8; len];
            rand::RngCore::fill_bytes(&mut rng, &mut b);
            // Small length prefixes now and then so that parsing goes deep.
            for i in (0..len).step_by(4) {
                if b[i] & 1 == 0 && i + 3 < len {
                    b[i] = 0;
                    b[i + 1] = 0;
                    b[i + 2] = 0;
                    b[i + 3] %= 16;
                }
            }
            let _ = parse_trailer(Bytes::from(b));
        }
    }

    proptest! {
        #[test]
        fn parse_trailer_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse_trailer(Bytes::from(data));
        }

        #[test]
        fn parse_trailer_round_trips(
            cert in proptest::collection::vec(any::<u8>(), 0..600),
            src in proptest::collection::vec(any::<u8>(), 0..100),
            sig in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let t = Trailer { cert: cert.into(), src: src.into(), sig: sig.into() };
            prop_assert_eq!(parse_trailer(t.encode()), Ok(t));
        }

        #[test]
        fn verify_never_panics(
            cert in proptest::collection::vec(any::<u8>(), 0..600),
            src in proptest::collection::vec(any::<u8>(), 0..100),
            sig in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let t = Trailer { cert: cert.into(), src: src.into(), sig: sig.into() };
            prop_assert!(CbjxVerifier::new().verify(&[b"jxmg"], &t).is_err());
        }
    }
}
