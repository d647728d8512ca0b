//! How two Juxta peers agree on compact framing, unseen by JXSE.
//!
//! After the welcome lines, a Juxta *initiator* sends one ordinary JXTA
//! message (CBJX-signed like any other) to the service `JuxtaCompact`. JXSE
//! has no such listener and drops it; a Juxta acceptor answers, and the
//! connection is authenticated once instead of signing every message:
//!
//! ```text
//! A -> B  offer   { nonceA, certA }                       (JXTA framing)
//! B -> A  accept  { nonceB, certB, sigB(accept transcript) }  (JXTA), then B sends compact
//! A -> B  confirm { sigA(confirm transcript) }             (JXTA), then A sends compact
//! ```
//! Each certificate must derive the peer ID its owner announced in its
//! welcome line, and each signature covers both nonces and both IDs, so a
//! replayed or relayed handshake fails. A switches its receive side to
//! compact right after `accept`, B right after `confirm`.
//!
//! The handshake is also how two Juxta peers prove their peer IDs to each
//! other, so it runs even when a side does not want compact framing: the
//! offer and the accept then carry `juxta:framing = jxta`, the transcripts
//! are labelled `accept-proof` / `confirm-proof`, and both directions stay
//! in JXTA framing with the identities proven.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::id::PeerId;
use crate::identity::{Identity, RemoteCert};
use crate::message::{Element, Message};

/// The (demangled) service the handshake messages go to.
pub const HANDSHAKE_SERVICE: &str = "JuxtaCompact";
const NS: &str = "juxta";
const VERSION: &[u8] = b"1";
/// Nonce length.
pub const NONCE_LEN: usize = 32;

/// Errors from the compact handshake; each closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// A required element is missing or malformed.
    #[error("malformed compact handshake message: {0}")]
    Malformed(&'static str),
    /// The certificate does not derive the peer ID of the welcome line.
    #[error("certificate does not belong to peer {0}")]
    WrongPeer(PeerId),
    /// The certificate could not be parsed or is not self-signed.
    #[error("bad certificate in compact handshake: {0}")]
    BadCert(String),
    /// A signature does not verify.
    #[error("compact handshake signature does not verify")]
    BadSignature,
    /// A message arrived in the wrong state.
    #[error("unexpected compact handshake message {0}")]
    Unexpected(&'static str),
}

/// A parsed handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeMsg {
    /// Initiator's offer.
    Offer {
        /// the initiator's nonce
        nonce: Bytes,
        /// its certificate (DER)
        cert: Bytes,
        /// whether the initiator wants compact framing (else: proof only)
        compact: bool,
        /// whether the initiator's compact framing can intern values
        /// ([`crate::wire::compact::INTERNED_VALUES`]); absent in older
        /// Juxta peers' offers
        values: bool,
    },
    /// Acceptor's answer.
    Accept {
        /// the acceptor's nonce
        nonce: Bytes,
        /// its certificate (DER)
        cert: Bytes,
        /// its signature over the accept transcript
        sig: Bytes,
        /// whether both sides switch to compact framing (else: proof only)
        compact: bool,
        /// whether that compact framing interns values, both directions
        values: bool,
    },
    /// Initiator's confirmation.
    Confirm {
        /// its signature over the confirm transcript
        sig: Bytes,
    },
}

impl HandshakeMsg {
    /// The message's param under [`HANDSHAKE_SERVICE`].
    pub fn param(&self) -> &'static str {
        match self {
            HandshakeMsg::Offer { .. } => "offer",
            HandshakeMsg::Accept { .. } => "accept",
            HandshakeMsg::Confirm { .. } => "confirm",
        }
    }

    /// As a JXTA message.
    pub fn to_message(&self) -> Message {
        let mut m = Message::new().with(Element::bytes(NS, "compact", VERSION));
        match self {
            HandshakeMsg::Offer {
                nonce,
                cert,
                compact,
                values,
            } => {
                m.push(Element::bytes(NS, "nonce", nonce.clone()));
                m.push(Element::bytes(NS, "cert", cert.clone()));
                if !compact {
                    m.push(Element::bytes(NS, "framing", FRAMING_JXTA));
                }
                if *values {
                    m.push(Element::bytes(NS, "values", VALUES_ON));
                }
            }
            HandshakeMsg::Accept {
                nonce,
                cert,
                sig,
                compact,
                values,
            } => {
                m.push(Element::bytes(NS, "nonce", nonce.clone()));
                m.push(Element::bytes(NS, "cert", cert.clone()));
                m.push(Element::bytes(NS, "sig", sig.clone()));
                if !compact {
                    m.push(Element::bytes(NS, "framing", FRAMING_JXTA));
                }
                if *values {
                    m.push(Element::bytes(NS, "values", VALUES_ON));
                }
            }
            HandshakeMsg::Confirm { sig } => {
                m.push(Element::bytes(NS, "sig", sig.clone()));
            }
        }
        m
    }

    /// Parses a message received at `JuxtaCompact/<param>`.
    pub fn from_message(param: &str, m: &Message) -> Result<HandshakeMsg, HandshakeError> {
        let get = |name: &'static str| {
            m.get(NS, name)
                .map(|e| e.data.clone())
                .ok_or(HandshakeError::Malformed(name))
        };
        if get("compact")?.as_ref() != VERSION {
            return Err(HandshakeError::Malformed("version"));
        }
        let nonce = || {
            get("nonce").and_then(|n| {
                if n.len() == NONCE_LEN {
                    Ok(n)
                } else {
                    Err(HandshakeError::Malformed("nonce"))
                }
            })
        };
        // Absent (older Juxta peers): compact.
        let compact = !matches!(m.get(NS, "framing"), Some(e) if e.data.as_ref() == FRAMING_JXTA);
        // Absent (older Juxta peers): no values.
        let values =
            compact && matches!(m.get(NS, "values"), Some(e) if e.data.as_ref() == VALUES_ON);
        match param {
            "offer" => Ok(HandshakeMsg::Offer {
                nonce: nonce()?,
                cert: get("cert")?,
                compact,
                values,
            }),
            "accept" => Ok(HandshakeMsg::Accept {
                nonce: nonce()?,
                cert: get("cert")?,
                sig: get("sig")?,
                compact,
                values,
            }),
            "confirm" => Ok(HandshakeMsg::Confirm { sig: get("sig")? }),
            _ => Err(HandshakeError::Malformed("param")),
        }
    }
}

const FRAMING_JXTA: &[u8] = b"jxta";
const VALUES_ON: &[u8] = b"1";

/// The transcript labels of the accept and confirm signatures: a
/// proof-only handshake signs other labels, so its signatures cannot be
/// taken for a compact one's (or the reverse).
pub fn labels(compact: bool) -> (&'static str, &'static str) {
    if compact {
        ("accept", "confirm")
    } else {
        ("accept-proof", "confirm-proof")
    }
}

/// The digest a side signs: label, both nonces, both peer IDs.
pub fn transcript(
    label: &str,
    nonce_a: &[u8],
    nonce_b: &[u8],
    initiator: &PeerId,
    acceptor: &PeerId,
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"juxta-compact-v1\0");
    h.update(label.as_bytes());
    h.update([0]);
    h.update(nonce_a);
    h.update(nonce_b);
    h.update(initiator.to_string().as_bytes());
    h.update([0]);
    h.update(acceptor.to_string().as_bytes());
    h.finalize().into()
}

/// Parses `cert` and checks it derives `expected`.
pub fn check_cert(cert: Bytes, expected: &PeerId) -> Result<RemoteCert, HandshakeError> {
    let rc = RemoteCert::parse(cert).map_err(|e| HandshakeError::BadCert(e.to_string()))?;
    if rc.derived_peer_id() != expected {
        return Err(HandshakeError::WrongPeer(*expected));
    }
    Ok(rc)
}

/// Signs a transcript.
pub fn sign(identity: &Identity, digest: &[u8; 32]) -> Bytes {
    identity.sign_sha256_prehash(digest)
}

/// Verifies a transcript signature.
pub fn verify(cert: &RemoteCert, digest: &[u8; 32], sig: &[u8]) -> Result<(), HandshakeError> {
    cert.verify_sha256_prehash(digest, sig)
        .map_err(|_| HandshakeError::BadSignature)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn transcript_signature_is_unchanged_by_the_openssl_signer() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let a = Identity::generate(&mut rng, 1024, "A", 1_700_000_000).unwrap();
        let b = Identity::generate(&mut rng, 1024, "B", 1_700_000_000).unwrap();
        let digest = transcript("accept", &[1; 16], &[2; 16], a.peer_id(), b.peer_id());
        let sig = sign(&a, &digest);
        assert_eq!(
            &sig[..],
            &crate::identity::reference::sign_sha256(&a, &digest)[..]
        );
        let cert = check_cert(a.cert_der().clone(), a.peer_id()).unwrap();
        verify(&cert, &digest, &sig).unwrap();
        let other = transcript("accept", &[1; 16], &[3; 16], a.peer_id(), b.peer_id());
        assert!(matches!(
            verify(&cert, &other, &sig),
            Err(HandshakeError::BadSignature)
        ));
    }
}
