//! The per-message framing of JXSE's **reliable** bidi pipes
//! (`JxtaBiDiPipe` with `reliable=true`): each application message is one
//! `jxtarel` block (see [`super::reliable`]) whose bytes are the message in
//! the binary wire format, as JXSE 2.7's `ReliableOutputStream.send(Message)`
//! writes it (`WireFormatMessageFactory.toWireExternal`) and its
//! `ReliableInputStream` reads it back (`fromWireExternal`): the version-0
//! message, followed by the CBJX trailer when CBJX is on (JXSE's default;
//! its reader then refuses a block without a valid trailer).
//!
//! The close of a reliable bidi pipe travels the same way: a message holding
//! `JXTABIP:close` = `close`, in a block of its own (JXSE ignores a plain
//! close message in reliable mode).
//!
//! A block is hostile input: [`decode_block`] bounds its size, never
//! panics, verifies the trailer and requires its signer to be the pipe's
//! peer.

use bytes::{Bytes, BytesMut};

use crate::id::PeerId;
use crate::identity::Identity;
use crate::message::cbjx::{self, CbjxError, CbjxVerifier};
use crate::message::namespace_order::JavaHashOrder;
use crate::message::{decode_v0, encode_v0, Message, MessageError};

use super::setup::{CloseSignal, SetupKind};

/// Largest message (wire form, trailer included) carried in one block by
/// default: bigger messages are refused on both sides
/// ([`BlockError::TooLarge`]).
pub const DEFAULT_MAX_BLOCK_MESSAGE: usize = 16 * 1024 * 1024;

/// Errors of the bidi block framing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// The message (as a block) exceeds the limit.
    #[error("bidi block of {len} bytes exceeds {max}")]
    TooLarge {
        /// the block's length
        len: usize,
        /// the limit
        max: usize,
    },
    /// The block is not a binary message.
    #[error("bidi block: {0}")]
    Message(#[from] MessageError),
    /// The CBJX trailer is malformed or does not verify.
    #[error("bidi block: {0}")]
    Cbjx(#[from] CbjxError),
    /// CBJX is required and the block has no trailer.
    #[error("bidi block without the CBJX trailer")]
    MissingTrailer,
    /// The trailer was signed by another peer than the pipe's.
    #[error("bidi block signed by {signer}, not by the pipe's peer {expected}")]
    WrongSigner {
        /// who signed
        signer: Box<PeerId>,
        /// the pipe's peer
        expected: Box<PeerId>,
    },
    /// The signer's certificate does not derive its (cbid) peer ID.
    #[error("bidi block signer {0}: certificate does not derive the peer ID")]
    CertNotForPeer(Box<PeerId>),
}

/// Serializes `msg` as the bytes of one block: the version-0 message in
/// `order`, plus the CBJX trailer signed by `signer` if given. Refuses a
/// result longer than `max`.
///
/// ```
/// use juxta_proto::identity::Identity;
/// use juxta_proto::message::cbjx::CbjxVerifier;
/// use juxta_proto::message::{namespace_order::JavaHashOrder, Element, Message};
/// use juxta_proto::socket::bidi_block::{decode_block, encode_block, DEFAULT_MAX_BLOCK_MESSAGE};
/// let me = Identity::generate(&mut rand::thread_rng(), 1024, "doc", 1_700_000_000).unwrap();
/// let m = Message::new().with(Element::bytes("app", "data", &b"hello"[..]));
/// let block = encode_block(&m, JavaHashOrder::Java8, Some(&me), DEFAULT_MAX_BLOCK_MESSAGE).unwrap();
/// let back = decode_block(block, me.peer_id(), true, &mut CbjxVerifier::new(), DEFAULT_MAX_BLOCK_MESSAGE).unwrap();
/// assert_eq!(back, m);
/// ```
pub fn encode_block(
    msg: &Message,
    order: JavaHashOrder,
    signer: Option<&Identity>,
    max: usize,
) -> Result<Bytes, BlockError> {
    let enc = encode_v0(msg, order)?;
    if enc.len > max {
        return Err(BlockError::TooLarge { len: enc.len, max });
    }
    let trailer = signer.map(|id| cbjx::trailer_for(id, &enc.chunks));
    let len = enc.len + trailer.as_ref().map_or(0, |t| t.len());
    if len > max {
        return Err(BlockError::TooLarge { len, max });
    }
    let mut out = BytesMut::with_capacity(len);
    for c in &enc.chunks {
        out.extend_from_slice(c);
    }
    if let Some(t) = trailer {
        out.extend_from_slice(&t);
    }
    Ok(out.freeze())
}

/// Reads the message of one received block. A trailer, when present, is
/// always verified and must be signed by `peer` (with a certificate that
/// derives `peer`, for a cbid ID); `require_cbjx` also refuses a block
/// without one. Payloads are slices of `block`.
pub fn decode_block(
    block: Bytes,
    peer: &PeerId,
    require_cbjx: bool,
    verifier: &mut CbjxVerifier,
    max: usize,
) -> Result<Message, BlockError> {
    if block.len() > max {
        return Err(BlockError::TooLarge {
            len: block.len(),
            max,
        });
    }
    let decoded = decode_v0(block.clone())?;
    let end = decoded.elements_end;
    if end < block.len() {
        let trailer = cbjx::parse_trailer(block.slice(end..))?;
        let v = verifier.verify(&[&block[..end]], &trailer)?;
        if &v.peer != peer {
            return Err(BlockError::WrongSigner {
                signer: Box::new(v.peer),
                expected: Box::new(*peer),
            });
        }
        if v.peer.is_cbid() && !v.cert_matches_id {
            return Err(BlockError::CertNotForPeer(Box::new(v.peer)));
        }
    } else if require_cbjx {
        return Err(BlockError::MissingTrailer);
    }
    Ok(decoded.message)
}

/// The message a reliable bidi pipe's close travels as (in a block).
pub fn close_message() -> Message {
    CloseSignal::Close.to_message(SetupKind::BiDi)
}

/// Whether a message read from a block is the pipe's close (JXSE's
/// `hasClose`: a `JXTABIP:close` element, whatever its value).
pub fn is_close(msg: &Message) -> bool {
    matches!(
        CloseSignal::from_message(msg),
        Some((SetupKind::BiDi, CloseSignal::Close))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Element;
    use std::sync::OnceLock;

    fn id(n: usize) -> &'static Identity {
        static IDS: OnceLock<Vec<Identity>> = OnceLock::new();
        &IDS.get_or_init(|| {
            (0..2)
                .map(|i| {
                    Identity::generate(
                        &mut rand::thread_rng(),
                        1024,
                        &format!("t{i}"),
                        1_700_000_000,
                    )
                    .unwrap()
                })
                .collect()
        })[n]
    }

    fn msg(n: usize) -> Message {
        Message::new()
            .with(Element::bytes("juxta", "payload", vec![7u8; n]))
            .with(Element::text("juxta", "note", "x"))
    }

    const MAX: usize = DEFAULT_MAX_BLOCK_MESSAGE;

    #[test]
    fn round_trip_signed_and_unsigned() {
        let me = id(0);
        for n in [1usize, 1000, 100_000] {
            let b = encode_block(&msg(n), JavaHashOrder::Java8, Some(me), MAX).unwrap();
            let back = decode_block(b, me.peer_id(), true, &mut CbjxVerifier::new(), MAX).unwrap();
            assert_eq!(back, msg(n));
            let b = encode_block(&msg(n), JavaHashOrder::Java8, None, MAX).unwrap();
            let back = decode_block(b, me.peer_id(), false, &mut CbjxVerifier::new(), MAX).unwrap();
            assert_eq!(back, msg(n));
        }
    }

    #[test]
    fn unsigned_block_refused_when_cbjx_required() {
        let b = encode_block(&msg(10), JavaHashOrder::Java8, None, MAX).unwrap();
        assert_eq!(
            decode_block(b, id(0).peer_id(), true, &mut CbjxVerifier::new(), MAX).unwrap_err(),
            BlockError::MissingTrailer
        );
    }

    #[test]
    fn block_of_another_signer_refused() {
        let b = encode_block(&msg(10), JavaHashOrder::Java8, Some(id(1)), MAX).unwrap();
        assert!(matches!(
            decode_block(b, id(0).peer_id(), true, &mut CbjxVerifier::new(), MAX),
            Err(BlockError::WrongSigner { .. })
        ));
    }

    #[test]
    fn tampered_block_refused() {
        let b = encode_block(&msg(100), JavaHashOrder::Java8, Some(id(0)), MAX).unwrap();
        let mut t = b.to_vec();
        t[60] ^= 1; // inside the payload
        assert!(matches!(
            decode_block(
                Bytes::from(t),
                id(0).peer_id(),
                true,
                &mut CbjxVerifier::new(),
                MAX
            ),
            Err(BlockError::Cbjx(CbjxError::BadSignature))
        ));
    }

    #[test]
    fn sizes_bounded_both_ways() {
        assert!(matches!(
            encode_block(&msg(2000), JavaHashOrder::Java8, None, 1000),
            Err(BlockError::TooLarge { .. })
        ));
        let b = encode_block(&msg(2000), JavaHashOrder::Java8, None, MAX).unwrap();
        assert!(matches!(
            decode_block(b, id(0).peer_id(), false, &mut CbjxVerifier::new(), 1000),
            Err(BlockError::TooLarge { .. })
        ));
    }

    #[test]
    fn garbage_and_truncations_are_typed_errors() {
        let b = encode_block(&msg(300), JavaHashOrder::Java8, Some(id(0)), MAX).unwrap();
        for cut in 0..b.len() {
            let r = decode_block(
                b.slice(..cut),
                id(0).peer_id(),
                true,
                &mut CbjxVerifier::new(),
                MAX,
            );
            assert!(r.is_err(), "cut at {cut} accepted");
        }
        for junk in [&b"jxmg"[..], b"", b"hello world", &[0xffu8; 64]] {
            assert!(decode_block(
                Bytes::copy_from_slice(junk),
                id(0).peer_id(),
                false,
                &mut CbjxVerifier::new(),
                MAX
            )
            .is_err());
        }
    }

    proptest::proptest! {
        /// Arbitrary bytes, and a valid signed block with bytes flipped or
        /// cut anywhere, give a typed error, never a panic (the block left
        /// alone still decodes).
        #[test]
        fn hostile_blocks_never_panic(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            flips in proptest::collection::vec((0usize..4096, 1u8..=255), 0..4),
            cut in 0usize..4096,
        ) {
            let _ = decode_block(Bytes::from(junk), id(0).peer_id(), false, &mut CbjxVerifier::new(), MAX);
            let good = encode_block(&msg(50), JavaHashOrder::Java8, Some(id(0)), MAX).unwrap();
            let mut b = good.to_vec();
            for (at, x) in &flips {
                let i = at % b.len();
                b[i] ^= x;
            }
            b.truncate(cut.max(1).min(b.len()));
            let changed = b[..] != good[..];
            let r = decode_block(Bytes::from(b), id(0).peer_id(), true, &mut CbjxVerifier::new(), MAX);
            // Every byte is signed or parsed strictly: any change is refused.
            proptest::prop_assert_eq!(r.is_err(), changed);
        }
    }

    #[test]
    fn close_message_is_recognised() {
        assert!(is_close(&close_message()));
        assert!(!is_close(&msg(1)));
        let b = encode_block(&close_message(), JavaHashOrder::Java8, Some(id(0)), MAX).unwrap();
        let back = decode_block(b, id(0).peer_id(), true, &mut CbjxVerifier::new(), MAX).unwrap();
        assert!(is_close(&back));
    }
}
