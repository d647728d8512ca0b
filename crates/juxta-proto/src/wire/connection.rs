//! The state of one TCP connection between two peers, without the socket.
//!
//! A connection has two halves that the runtime drives independently: the
//! [`Inbound`] half turns received bytes into events (the remote welcome,
//! messages, compact-handshake steps) and the [`Outbound`] half turns
//! messages into the chunks of one vectored write. Reading and writing then
//! never wait for each other; the only coupling is the compact handshake,
//! where the reader hands each step to [`Outbound::handle_handshake`] and
//! applies the returned switch before decoding the next frame.
//!
//! Both halves speak JXTA framing (welcome line, `content-length` frames,
//! binary messages with the CBJX trailer) until the handshake switches a
//! direction to [`super::compact`] framing.

use std::sync::Arc;

use crate::message::cbjx::Sha256;
use bytes::{Buf, Bytes, BytesMut};
use rand::RngCore;

use super::compact::{self, CompactDecoder, CompactEncoder, CompactError, CompactFrame};
use super::frame::{self, FrameError};
use super::handshake::{self, HandshakeError, HandshakeMsg, HANDSHAKE_SERVICE, NONCE_LEN};
use super::welcome::{Welcome, WelcomeError};
use crate::endpoint::address::EndpointAddress;
use crate::endpoint::{demangle, mangle, ServiceAddress, ELEM_DEST_ADDRESS, ELEM_SOURCE_ADDRESS};
use crate::id::PeerId;
use crate::identity::{Identity, RemoteCert};
use crate::message::cbjx::{self, CbjxError, CbjxVerifier, PendingTrailer};
use crate::message::codec::{decode_v0, encode_v0, EncodedMessage, MessageError};
use crate::message::namespace_order::JavaHashOrder;
use crate::message::{Element, Message, NS_JXTA};

/// Largest message accepted from a remote that has not proven its peer ID
/// yet (see [`ConnectionConfig::max_unproven_message`]).
pub const DEFAULT_MAX_UNPROVEN_MESSAGE: u64 = 64 * 1024;

/// JXTA-framed messages from this size on are hashed (CBJX) while their
/// bytes arrive, once the connection's trailer length is known (see
/// [`Inbound::poll`]).
pub const STREAM_HASH_MIN: usize = 64 * 1024;

/// Settings shared by both halves.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Largest message body accepted (checked from the length field) once
    /// the remote has proven its peer ID.
    pub max_message: u64,
    /// Largest message body accepted before that (JXTA framing with CBJX
    /// on, until the first message whose signature verifies): what one
    /// unauthenticated frame can make this peer read and decode.
    pub max_unproven_message: u64,
    /// Sign outgoing JXTA messages with a CBJX trailer and require one on
    /// incoming JXTA messages (JXSE 2.7's default).
    pub cbjx: bool,
    /// Offer (as initiator) and answer (as acceptor) the Juxta handshake
    /// that proves both peer IDs ([`Proof::Handshake`]) between Juxta
    /// peers. JXSE ignores it. Off: Juxta peers prove nothing beyond what
    /// CBJX signatures give (see [`Proof`]).
    pub handshake: bool,
    /// With the handshake, also switch to compact framing (both sides must
    /// want it).
    pub compact: bool,
    /// Namespace-table order of the JVM on the other side.
    pub hash_order: JavaHashOrder,
    /// Group the handshake is mangled into.
    pub group_unique: String,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            max_message: frame::DEFAULT_MAX_MESSAGE,
            max_unproven_message: DEFAULT_MAX_UNPROVEN_MESSAGE,
            cbjx: true,
            handshake: true,
            compact: true,
            hash_order: JavaHashOrder::Java8,
            group_unique: crate::endpoint::NET_GROUP_UNIQUE.to_string(),
        }
    }
}

/// Which side opened the TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We dialled.
    Initiator,
    /// We accepted.
    Acceptor,
}

/// Errors that close a connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// Bad welcome line.
    #[error("welcome: {0}")]
    Welcome(#[from] WelcomeError),
    /// Bad frame header.
    #[error("frame: {0}")]
    Frame(#[from] FrameError),
    /// Bad binary message.
    #[error("message: {0}")]
    Message(#[from] MessageError),
    /// Bad or missing CBJX trailer.
    #[error("cbjx: {0}")]
    Cbjx(#[from] CbjxError),
    /// The CBJX trailer names another peer than the welcome line.
    #[error("message signed by {signer} on the connection of {peer}")]
    SpoofedSource {
        /// who signed
        signer: Box<PeerId>,
        /// who the connection belongs to
        peer: Box<PeerId>,
    },
    /// A JXTA message without a trailer while CBJX is required.
    #[error("message without CBJX trailer")]
    MissingTrailer,
    /// A message without a usable destination address element.
    #[error("message without a valid EndpointDestinationAddress")]
    NoDestination,
    /// Bad compact frame.
    #[error("compact: {0}")]
    Compact(#[from] CompactError),
    /// Compact handshake failure.
    #[error("handshake: {0}")]
    Handshake(#[from] HandshakeError),
    /// Sending before the remote welcome arrived.
    #[error("connection not established yet")]
    NotEstablished,
    /// We dialled one peer and the welcome line names another.
    #[error("dialled peer {expected} but the remote welcome names {got}")]
    UnexpectedPeer {
        /// who we dialled
        expected: Box<PeerId>,
        /// who answered
        got: Box<PeerId>,
    },
    /// The connection's peer ID is a `cbid` (derived from a key) and a
    /// message is signed with a certificate whose key derives another ID:
    /// someone else's key claiming that peer's ID.
    #[error("message signed for {peer} with a certificate that derives another peer ID")]
    CertNotForPeer {
        /// the claimed peer
        peer: Box<PeerId>,
    },
    /// A later message on the connection is signed with another
    /// certificate than the first one (a connection has one signer).
    #[error("CBJX certificate changed within the connection")]
    CertificateChanged,
}

/// How far the remote peer ID of a connection has been proven.
///
/// JXTA framing carries the peer ID in the welcome line, which anyone can
/// write. It counts for more only after proof that the remote holds the
/// key the ID derives from:
///
/// - [`Proof::Handshake`]: the compact handshake (Juxta peers) verified a
///   signature over both fresh nonces and both IDs with a certificate that
///   derives the claimed ID. Fresh: cannot be replayed or relayed to another
///   connection.
/// - [`Proof::Signature`]: a CBJX-signed message (JXSE peers) whose
///   certificate derives the claimed ID, whose signed bytes name this peer,
///   and which this peer had not seen before. JXSE signs no challenge, so
///   this proves possession of a message the key holder signed for us,
///   not possession of the key now (see docs/security.md).
/// - [`Proof::Claimed`]: nothing beyond the welcome line: CBJX off, a JXSE
///   peer whose ID was set by hand (`uuid` IDs, which no key derives), or no
///   qualifying message yet. Such peers are served (interop) but never
///   trusted for leases, SRDI ownership, relay forwarding or secure-pipe
///   binding.
///
/// ```
/// use juxta_proto::wire::connection::Proof;
/// assert!(Proof::Handshake.is_proven() && Proof::Signature.is_proven());
/// assert!(!Proof::Claimed.is_proven());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub enum Proof {
    /// Only the welcome line names the peer.
    #[default]
    Claimed,
    /// A CBJX signature by the ID's key over a message naming us.
    Signature,
    /// The compact handshake.
    Handshake,
}

impl Proof {
    /// Whether the remote proved it holds the key its peer ID derives from.
    pub fn is_proven(self) -> bool {
        self != Proof::Claimed
    }
}

/// What the CBJX trailer of a received JXTA message established; the
/// caller turns it into [`Proof::Signature`] (see
/// [`Inbound::prove_by_signature`]) after its replay check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedBy {
    /// The certificate derives the connection's peer ID.
    pub cert_matches_id: bool,
    /// The signed bytes name this peer's ID or this connection (the
    /// message was meant for us). Only computed while the connection is not
    /// proven yet (`false` after).
    pub names_local: bool,
    /// The first 16 bytes of the signature: with the signer, identifies
    /// the message for a replay check (PKCS#1 v1.5 signatures are
    /// deterministic, so a replay carries the same bytes).
    pub tag: [u8; 16],
}

/// A message received on a connection.
#[derive(Debug, Clone)]
pub struct Received {
    /// The service address on the wire (possibly mangled); shared with
    /// the compact decoder's channel table (no copy per message).
    pub to: Arc<ServiceAddress>,
    /// `EndpointSourceAddress`, if present (JXTA framing only).
    pub source: Option<String>,
    /// The message, without the two address elements.
    pub message: Message,
    /// Bytes the frame occupied on the wire.
    pub wire_len: usize,
    /// For a CBJX-signed JXTA message: what its signature established.
    pub signed: Option<SignedBy>,
}

/// What the inbound half produced.
#[derive(Debug, Clone)]
pub enum InboundEvent {
    /// The remote welcome line arrived.
    Welcome(Welcome),
    /// A message.
    Message(Received),
    /// A compact-handshake step: pass it to [`Outbound::handle_handshake`].
    Handshake(HandshakeMsg),
    /// Data of a stream, in a compact stream frame
    /// ([`compact::stream_frame_header`]); compact framing only. Which
    /// stream `stream` is, and whether this peer may send to it, is the
    /// receiver's to check.
    Stream {
        /// The number the receiver gave the stream.
        stream: u32,
        /// The data (a slice of the receive buffer).
        data: Bytes,
        /// Bytes the frame took on the wire.
        wire_len: usize,
    },
}

/// The SHA-256 of the frame being received, over the bytes that arrived.
struct RxHash {
    hasher: Sha256,
    /// Body bytes hashed so far.
    hashed: usize,
    /// Where the signed bytes are expected to end (the body length less
    /// the connection's trailer length); checked against the decoded
    /// message before the hash is used.
    signed_len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RxMode {
    Welcome,
    Jxta,
    Compact,
}

/// The receiving half.
pub struct Inbound {
    cfg: ConnectionConfig,
    mode: RxMode,
    remote: Option<PeerId>,
    compact: CompactDecoder,
    verifier: CbjxVerifier,
    received: u64,
    /// How messages meant for us name us: our ID as it appears in
    /// `jxta://` addresses, and our public endpoint address.
    local_names: Vec<Vec<u8>>,
    /// The peer we dialled, if we know who it should be.
    expected: Option<PeerId>,
    proof: Proof,
    /// The certificate of the first verified message: every later
    /// message must be signed with the same one.
    pinned_cert: Option<Bytes>,
    /// Whether the full message limit applies (see
    /// [`ConnectionConfig::max_unproven_message`]).
    full_limit: bool,
    /// The length of the last verified CBJX trailer: with one certificate
    /// and one signer per connection, the next trailer is as long, so the
    /// signed part of a large frame is known from its header and hashed
    /// while the frame arrives.
    trailer_len: Option<usize>,
    /// That running hash, for the frame at the front of the buffer.
    rx_hash: Option<RxHash>,
}

impl Inbound {
    /// A receiving half expecting the remote welcome first.
    pub fn new(cfg: ConnectionConfig) -> Inbound {
        // With CBJX off nothing can be proven in JXTA framing, so the
        // small limit would only refuse honest JXSE peers: the decoders'
        // own bounds are the protection then (docs/security.md).
        let full_limit = !cfg.cbjx;
        Inbound {
            cfg,
            mode: RxMode::Welcome,
            remote: None,
            compact: CompactDecoder::new(),
            verifier: CbjxVerifier::default(),
            received: 0,
            local_names: Vec::new(),
            expected: None,
            proof: Proof::Claimed,
            pinned_cert: None,
            full_limit,
            trailer_len: None,
            rx_hash: None,
        }
    }

    /// Sets our own peer ID, so that a CBJX-signed message can be checked
    /// to name us ([`SignedBy::names_local`]).
    pub fn with_local(mut self, me: &PeerId) -> Inbound {
        self.local_names.push(me.unique_value().into_bytes());
        self
    }

    /// Adds the destination address of our welcome line on this
    /// connection (`tcp://host:port`, the remote's address as we see it).
    /// JXSE's direct (unrouted) messages carry exactly that address in the
    /// `EndpointDestinationAddress` it signs, so such a message names this
    /// connection: a message replayed from another connection names
    /// another address.
    pub fn with_local_address(mut self, addr: &str) -> Inbound {
        if !addr.is_empty() {
            self.local_names.push(format!("{addr}/").into_bytes());
        }
        self
    }

    /// Sets the peer we dialled: a welcome naming another peer closes the
    /// connection ([`ConnectionError::UnexpectedPeer`]).
    pub fn expecting(mut self, peer: Option<PeerId>) -> Inbound {
        self.expected = peer;
        self
    }

    /// The remote peer, once its welcome arrived.
    pub fn remote(&self) -> Option<PeerId> {
        self.remote
    }

    /// How far the remote's peer ID is proven.
    pub fn proof(&self) -> Proof {
        self.proof
    }

    /// Records a [`Proof::Signature`] after the caller's replay check of a
    /// message whose [`SignedBy`] had `cert_matches_id` and `names_local`.
    /// Never lowers a stronger proof.
    pub fn prove_by_signature(&mut self) {
        self.proof = self.proof.max(Proof::Signature);
        self.full_limit = true;
    }

    /// The message limit in force now.
    pub fn message_limit(&self) -> u64 {
        if self.full_limit {
            self.cfg.max_message
        } else {
            self.cfg.max_unproven_message.min(self.cfg.max_message)
        }
    }

    /// Whether the receive direction speaks compact framing.
    pub fn is_compact(&self) -> bool {
        self.mode == RxMode::Compact
    }

    /// Messages received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Switches the receive direction to compact framing (after the
    /// handshake said so: the remote proved its ID, [`Proof::Handshake`]).
    pub fn switch_to_compact(&mut self) {
        self.switch_to_compact_with(false);
    }

    /// [`Inbound::switch_to_compact`], reading interned values when the
    /// handshake agreed on them ([`HandshakeOutcome::values`]).
    pub fn switch_to_compact_with(&mut self, values: bool) {
        if values {
            self.compact = CompactDecoder::with_values();
        }
        self.mode = RxMode::Compact;
        self.prove_by_handshake();
    }

    /// Records a completed handshake ([`HandshakeOutcome::proven`]).
    pub fn prove_by_handshake(&mut self) {
        self.proof = Proof::Handshake;
        self.full_limit = true;
    }

    /// The whole length (header included) of the frame at the front of
    /// `rx`, once its header has arrived; `None` before that, and for a
    /// header [`Inbound::poll`] would refuse (it reports the error). A
    /// reader uses it to read the rest of a frame into the space already
    /// reserved for it instead of growing (and copying) the buffer.
    ///
    /// ```
    /// use juxta_proto::wire::connection::{ConnectionConfig, Inbound};
    /// let mut inbound = Inbound::new(ConnectionConfig::default());
    /// inbound.switch_to_compact();
    /// // A compact frame: a varint length (300), then that many bytes.
    /// assert_eq!(inbound.frame_len(&[0xac, 0x02, 0x01]), Some(302));
    /// assert_eq!(inbound.frame_len(&[0xac]), None);
    /// ```
    pub fn frame_len(&self, rx: &[u8]) -> Option<usize> {
        match self.mode {
            RxMode::Welcome => None,
            RxMode::Compact => match super::compact::get_varint(rx) {
                Ok(Some((len, n))) if len <= self.cfg.max_message => {
                    n.checked_add(usize::try_from(len).ok()?)
                }
                _ => None,
            },
            RxMode::Jxta => match frame::parse_header(rx, self.message_limit()) {
                Ok(Some(h)) => h
                    .header_len
                    .checked_add(usize::try_from(h.content_length).ok()?),
                _ => None,
            },
        }
    }

    /// Decodes the next event from the front of `rx`. `Ok(None)`: need more
    /// bytes (the buffer has been reserved for the whole pending frame, so
    /// large messages are read straight into place). An error is fatal for
    /// the connection.
    pub fn poll(&mut self, rx: &mut BytesMut) -> Result<Option<InboundEvent>, ConnectionError> {
        match self.mode {
            RxMode::Welcome => {
                let Some((w, used)) = Welcome::parse(rx)? else {
                    return Ok(None);
                };
                if let Some(expected) = self.expected {
                    if expected != w.peer_id {
                        return Err(ConnectionError::UnexpectedPeer {
                            expected: Box::new(expected),
                            got: Box::new(w.peer_id),
                        });
                    }
                }
                rx.advance(used);
                self.remote = Some(w.peer_id);
                self.mode = RxMode::Jxta;
                Ok(Some(InboundEvent::Welcome(w)))
            }
            RxMode::Compact => match self.compact.decode_next(rx, self.cfg.max_message)? {
                None => Ok(None),
                Some(CompactFrame::Message {
                    to,
                    message,
                    wire_len,
                }) => {
                    self.received += 1;
                    Ok(Some(InboundEvent::Message(Received {
                        to,
                        source: None,
                        message,
                        wire_len,
                        signed: None,
                    })))
                }
                Some(CompactFrame::Stream {
                    stream,
                    data,
                    wire_len,
                }) => {
                    self.received += 1;
                    Ok(Some(InboundEvent::Stream {
                        stream,
                        data,
                        wire_len,
                    }))
                }
            },
            RxMode::Jxta => self.poll_jxta(rx),
        }
    }

    fn poll_jxta(&mut self, rx: &mut BytesMut) -> Result<Option<InboundEvent>, ConnectionError> {
        let Some(h) = frame::parse_header(rx, self.message_limit())? else {
            return Ok(None);
        };
        let total = h.header_len.saturating_add(h.content_length as usize);
        if rx.len() < total {
            self.hash_ahead(rx, h.header_len, h.content_length as usize);
            // A proven peer's frame is read straight into place; before
            // proof the buffer grows only in step with what has arrived (at
            // most doubling, plus 64 KiB), so a header alone never makes
            // this peer allocate what it announces.
            let want = if self.proof.is_proven() {
                total
            } else {
                total.min(rx.len().saturating_mul(2).saturating_add(64 * 1024))
            };
            if rx.capacity() < want {
                rx.reserve(want - rx.len());
            }
            return Ok(None);
        }
        rx.advance(h.header_len);
        let body = rx.split_to(h.content_length as usize).freeze();
        let streamed = self.rx_hash.take();
        let decoded = decode_v0(body.clone())?;
        let end = decoded.elements_end;
        let mut signed = None;
        if end < body.len() {
            let trailer = cbjx::parse_trailer(body.slice(end..))?;
            if let Some(pinned) = &self.pinned_cert {
                if pinned[..] != trailer.cert[..] {
                    return Err(ConnectionError::CertificateChanged);
                }
            }
            // The hash taken while the frame arrived counts only if it
            // covers exactly the signed bytes; otherwise hash them now.
            let hasher = match streamed {
                Some(s) if s.signed_len == end && s.hashed <= end => {
                    let mut h = s.hasher;
                    h.update(&body[s.hashed..end]);
                    h
                }
                _ => Sha256::new().chain_update(&body[..end]),
            };
            let v = self.verifier.verify_hashed(hasher, &trailer)?;
            self.trailer_len = Some(body.len() - end);
            if let Some(peer) = self.remote {
                if v.peer != peer {
                    return Err(ConnectionError::SpoofedSource {
                        signer: Box::new(v.peer),
                        peer: Box::new(peer),
                    });
                }
            }
            if v.peer.is_cbid() && !v.cert_matches_id {
                return Err(ConnectionError::CertNotForPeer {
                    peer: Box::new(v.peer),
                });
            }
            if self.pinned_cert.is_none() {
                self.pinned_cert = Some(trailer.cert.clone());
                // A verified signature by the peer this connection names:
                // what one frame may make us read grows to the full limit
                // (the signer paid for a key and a signature; uuid-ID JXSE
                // peers never prove more than this).
                self.full_limit = true;
            }
            // Only needed until the connection is proven: a proven
            // connection skips the search (large messages stay one pass).
            let names_local = !self.proof.is_proven()
                && self
                    .local_names
                    .iter()
                    .any(|me| memchr::memmem::find(&body[..end], me).is_some());
            let mut tag = [0u8; 16];
            let n = trailer.sig.len().min(16);
            tag[..n].copy_from_slice(&trailer.sig[..n]);
            signed = Some(SignedBy {
                cert_matches_id: v.cert_matches_id,
                names_local,
                tag,
            });
        } else if self.cfg.cbjx {
            return Err(ConnectionError::MissingTrailer);
        }
        let mut message = decoded.message;
        let source = message
            .take(NS_JXTA, ELEM_SOURCE_ADDRESS)
            .and_then(|e| e.as_str().map(str::to_string));
        let dest = message
            .take(NS_JXTA, ELEM_DEST_ADDRESS)
            .and_then(|e| e.as_str().and_then(|s| s.parse::<EndpointAddress>().ok()))
            .ok_or(ConnectionError::NoDestination)?;
        let to = ServiceAddress {
            service: dest.service.ok_or(ConnectionError::NoDestination)?,
            param: dest.param,
        };
        let (_, real) = demangle(to.clone());
        if real.service == HANDSHAKE_SERVICE {
            let param = real.param.as_deref().unwrap_or("");
            return Ok(Some(InboundEvent::Handshake(HandshakeMsg::from_message(
                param, &message,
            )?)));
        }
        self.received += 1;
        Ok(Some(InboundEvent::Message(Received {
            to: Arc::new(to),
            source,
            message,
            wire_len: total,
            signed,
        })))
    }

    /// Hashes what has arrived of the signed part of an incomplete large
    /// frame (body of `content_length` bytes after `header_len`), so that
    /// hashing overlaps the transfer and reads bytes still in cache. Only
    /// once a trailer verified on this connection (its length predicts
    /// where the signed bytes end); nothing is held beyond the frame
    /// buffer itself.
    fn hash_ahead(&mut self, rx: &BytesMut, header_len: usize, content_length: usize) {
        let Some(tl) = self.trailer_len else {
            return;
        };
        if content_length < STREAM_HASH_MIN || content_length <= tl {
            return;
        }
        let st = self.rx_hash.get_or_insert_with(|| RxHash {
            hasher: Sha256::new(),
            hashed: 0,
            signed_len: content_length - tl,
        });
        let avail = rx.len().saturating_sub(header_len).min(st.signed_len);
        if avail > st.hashed {
            st.hasher
                .update(&rx[header_len + st.hashed..header_len + avail]);
            st.hashed = avail;
        }
    }
}

enum HandshakeState {
    Idle,
    OfferSent {
        nonce_a: Bytes,
        compact: bool,
    },
    AwaitConfirm {
        nonce_a: Bytes,
        nonce_b: Bytes,
        cert_a: Box<RemoteCert>,
        compact: bool,
        values: bool,
    },
    Done,
}

/// What the outbound half wants done after a handshake step.
#[derive(Debug, Default)]
pub struct HandshakeOutcome {
    /// Write this (already framed) before anything else.
    pub reply: Option<EncodedMessage>,
    /// The remote proved its peer ID just now ([`Proof::Handshake`]):
    /// call [`Inbound::prove_by_handshake`] (or switch to compact).
    pub proven: bool,
    /// Switch the inbound half to compact now.
    pub switch_inbound: bool,
    /// The compact framing interns values, both directions: switch with
    /// [`Inbound::switch_to_compact_with`]`(values)`.
    pub values: bool,
}

/// The compact encoder a handshake's outcome calls for.
fn compact_encoder(values: bool) -> CompactEncoder {
    if values {
        CompactEncoder::with_values()
    } else {
        CompactEncoder::new()
    }
}

/// The sending half.
pub struct Outbound {
    cfg: ConnectionConfig,
    role: Role,
    identity: Arc<Identity>,
    remote: Option<Welcome>,
    compact: Option<CompactEncoder>,
    handshake: HandshakeState,
    source_address: String,
}

impl Outbound {
    /// A sending half for `identity`.
    pub fn new(cfg: ConnectionConfig, role: Role, identity: Arc<Identity>) -> Outbound {
        let source_address = identity.peer_id().endpoint_address();
        Outbound {
            cfg,
            role,
            identity,
            remote: None,
            compact: None,
            handshake: HandshakeState::Idle,
            source_address,
        }
    }

    /// Our welcome line: `dest` is the address we talk to, `public` our own.
    pub fn welcome(&self, dest: &str, public: &str) -> Bytes {
        Bytes::from(
            Welcome::new(
                dest.to_string(),
                public.to_string(),
                *self.identity.peer_id(),
            )
            .to_line(),
        )
    }

    /// Whether the send direction speaks compact framing.
    pub fn is_compact(&self) -> bool {
        self.compact.is_some()
    }

    /// Records the remote welcome; as initiator with compact enabled,
    /// returns the offer to send.
    pub fn on_remote_welcome(
        &mut self,
        w: Welcome,
        rng: &mut dyn RngCore,
    ) -> Result<Option<EncodedMessage>, ConnectionError> {
        self.remote = Some(w);
        if self.role == Role::Initiator && self.cfg.handshake {
            let mut nonce = vec![0u8; NONCE_LEN];
            rng.fill_bytes(&mut nonce);
            let nonce = Bytes::from(nonce);
            let compact = self.cfg.compact;
            let offer = HandshakeMsg::Offer {
                nonce: nonce.clone(),
                cert: self.identity.cert_der().clone(),
                compact,
                values: compact,
            };
            self.handshake = HandshakeState::OfferSent {
                nonce_a: nonce,
                compact,
            };
            return Ok(Some(self.encode_handshake(&offer)?));
        }
        Ok(None)
    }

    fn encode_handshake(&mut self, m: &HandshakeMsg) -> Result<EncodedMessage, ConnectionError> {
        let to = mangle(
            &self.cfg.group_unique,
            &ServiceAddress::new(HANDSHAKE_SERVICE, Some(m.param())),
        );
        self.encode_jxta(&to, m.to_message())
    }

    /// Applies a handshake step the inbound half received.
    pub fn handle_handshake(
        &mut self,
        msg: HandshakeMsg,
        rng: &mut dyn RngCore,
    ) -> Result<HandshakeOutcome, ConnectionError> {
        let remote = self
            .remote
            .as_ref()
            .map(|w| w.peer_id)
            .ok_or(ConnectionError::NotEstablished)?;
        let me = *self.identity.peer_id();
        let state = std::mem::replace(&mut self.handshake, HandshakeState::Idle);
        match (self.role, state, msg) {
            (
                Role::Acceptor,
                HandshakeState::Idle,
                HandshakeMsg::Offer {
                    nonce,
                    cert,
                    compact,
                    values,
                },
            ) => {
                if !self.cfg.handshake {
                    return Ok(HandshakeOutcome::default());
                }
                let compact = compact && self.cfg.compact;
                let values = values && compact;
                let (accept_label, _) = handshake::labels(compact);
                let cert_a = handshake::check_cert(cert, &remote)?;
                let mut nb = vec![0u8; NONCE_LEN];
                rng.fill_bytes(&mut nb);
                let nonce_b = Bytes::from(nb);
                let digest = handshake::transcript(accept_label, &nonce, &nonce_b, &remote, &me);
                let accept = HandshakeMsg::Accept {
                    nonce: nonce_b.clone(),
                    cert: self.identity.cert_der().clone(),
                    sig: handshake::sign(&self.identity, &digest),
                    compact,
                    values,
                };
                let reply = self.encode_handshake(&accept)?;
                if compact {
                    self.compact = Some(compact_encoder(values));
                }
                self.handshake = HandshakeState::AwaitConfirm {
                    nonce_a: nonce,
                    nonce_b,
                    cert_a: Box::new(cert_a),
                    compact,
                    values,
                };
                Ok(HandshakeOutcome {
                    reply: Some(reply),
                    proven: false,
                    switch_inbound: false,
                    values,
                })
            }
            (
                Role::Acceptor,
                HandshakeState::AwaitConfirm {
                    nonce_a,
                    nonce_b,
                    cert_a,
                    compact,
                    values,
                },
                HandshakeMsg::Confirm { sig },
            ) => {
                let (_, confirm_label) = handshake::labels(compact);
                let digest = handshake::transcript(confirm_label, &nonce_a, &nonce_b, &remote, &me);
                handshake::verify(&cert_a, &digest, &sig)?;
                self.handshake = HandshakeState::Done;
                Ok(HandshakeOutcome {
                    reply: None,
                    proven: true,
                    switch_inbound: compact,
                    values,
                })
            }
            (
                Role::Initiator,
                HandshakeState::OfferSent {
                    nonce_a,
                    compact: offered,
                },
                HandshakeMsg::Accept {
                    nonce,
                    cert,
                    sig,
                    compact,
                    values,
                },
            ) => {
                if compact && !offered {
                    return Err(HandshakeError::Unexpected("accept").into());
                }
                // Values were offered with compact framing.
                let values = values && compact;
                let (accept_label, confirm_label) = handshake::labels(compact);
                let cert_b = handshake::check_cert(cert, &remote)?;
                let digest = handshake::transcript(accept_label, &nonce_a, &nonce, &me, &remote);
                handshake::verify(&cert_b, &digest, &sig)?;
                let digest = handshake::transcript(confirm_label, &nonce_a, &nonce, &me, &remote);
                let confirm = HandshakeMsg::Confirm {
                    sig: handshake::sign(&self.identity, &digest),
                };
                let reply = self.encode_handshake(&confirm)?;
                if compact {
                    self.compact = Some(compact_encoder(values));
                }
                self.handshake = HandshakeState::Done;
                Ok(HandshakeOutcome {
                    reply: Some(reply),
                    proven: true,
                    switch_inbound: compact,
                    values,
                })
            }
            (_, _, m) => Err(HandshakeError::Unexpected(m.param()).into()),
        }
    }

    /// Frames `msg` for the service address `to` (as it should appear on the
    /// wire, i.e. already mangled). In JXTA framing the address elements and
    /// (if enabled) the CBJX trailer are added; in compact framing the
    /// address is interned.
    pub fn encode(
        &mut self,
        to: &ServiceAddress,
        msg: Message,
    ) -> Result<EncodedMessage, ConnectionError> {
        if self.remote.is_none() {
            return Err(ConnectionError::NotEstablished);
        }
        if let Some(c) = &mut self.compact {
            if msg.elements.is_empty() {
                return Err(MessageError::Empty.into());
            }
            let mut out = EncodedMessage::default();
            c.encode(to, &msg, &mut out);
            return Ok(out);
        }
        self.encode_jxta(to, msg)
    }

    /// The header of a compact stream frame carrying `data` for stream
    /// `stream` ([`compact::stream_frame_header_for`]: a large frame's
    /// header aligned to `data`) into `out`, its length returned; `data` is
    /// written after it from where it lies. Only on a compact connection
    /// ([`ConnectionError::NotEstablished`] otherwise: JXTA framing has no
    /// stream frames).
    pub fn stream_header(
        &self,
        stream: u32,
        data: &[u8],
        out: &mut [u8; compact::STREAM_HEADER_MAX],
    ) -> Result<usize, ConnectionError> {
        if self.remote.is_none() || self.compact.is_none() {
            return Err(ConnectionError::NotEstablished);
        }
        Ok(compact::stream_frame_header_for(stream, data, out))
    }

    /// [`Outbound::encode`], except that a CBJX-signed JXTA frame whose
    /// message is at least `stream_min` bytes comes back unsigned
    /// ([`Framed::Streamed`]): its writer hashes each byte as it writes it
    /// and appends the trailer last, so the first bytes leave before the
    /// whole message is hashed. The bytes on the wire are the same.
    pub fn encode_streamed(
        &mut self,
        to: &ServiceAddress,
        msg: Message,
        stream_min: usize,
    ) -> Result<Framed, ConnectionError> {
        if self.compact.is_some() || !self.cfg.cbjx {
            return self.encode(to, msg).map(Framed::Whole);
        }
        if self.remote.is_none() {
            return Err(ConnectionError::NotEstablished);
        }
        let body = self.jxta_body(to, msg)?;
        if body.len < stream_min {
            return Ok(Framed::Whole(self.frame_signed(body)));
        }
        let trailer = PendingTrailer::new(self.identity.clone());
        let len = body.len + trailer.encoded_len();
        let header = frame::encode_header(len as u64);
        Ok(Framed::Streamed(StreamedFrame {
            len: header.len() + len,
            header,
            body: body.chunks,
            trailer,
        }))
    }

    fn encode_jxta(
        &mut self,
        to: &ServiceAddress,
        msg: Message,
    ) -> Result<EncodedMessage, ConnectionError> {
        let body = self.jxta_body(to, msg)?;
        Ok(self.frame_signed(body))
    }

    /// The header, `body` and (with CBJX) its trailer.
    fn frame_signed(&self, body: EncodedMessage) -> EncodedMessage {
        let trailer = self
            .cfg
            .cbjx
            .then(|| cbjx::trailer_for(&self.identity, &body.chunks));
        let len = body.len + trailer.as_ref().map_or(0, |t| t.len());
        let mut out = EncodedMessage::default();
        out.push(frame::encode_header(len as u64));
        for c in body.chunks {
            out.push(c);
        }
        if let Some(t) = trailer {
            out.push(t);
        }
        out
    }

    /// The binary message of a JXTA frame: `msg` with the endpoint address
    /// elements.
    fn jxta_body(
        &mut self,
        to: &ServiceAddress,
        mut msg: Message,
    ) -> Result<EncodedMessage, ConnectionError> {
        let base = self
            .remote
            .as_ref()
            .map(|w| w.public_addr.as_str())
            .ok_or(ConnectionError::NotEstablished)?;
        let dest = match &to.param {
            Some(p) => format!("{base}/{}/{p}", to.service),
            None => format!("{base}/{}", to.service),
        };
        msg.push(Element::text(
            NS_JXTA,
            ELEM_SOURCE_ADDRESS,
            &self.source_address,
        ));
        msg.push(Element::text(NS_JXTA, ELEM_DEST_ADDRESS, &dest));
        Ok(encode_v0(&msg, self.cfg.hash_order)?)
    }
}

/// A frame from [`Outbound::encode_streamed`].
#[derive(Debug)]
pub enum Framed {
    /// Complete: write the chunks as they are.
    Whole(EncodedMessage),
    /// Signed while written.
    Streamed(StreamedFrame),
}

/// A JXTA frame whose CBJX trailer is computed while it is written: write
/// `header`, then each byte of `body` after passing it to
/// [`PendingTrailer::update`], then [`PendingTrailer::finish`].
#[derive(Debug)]
pub struct StreamedFrame {
    /// The frame header (not signed); its `content-length` counts the
    /// trailer.
    pub header: Bytes,
    /// The binary message, in order (signed).
    pub body: Vec<Bytes>,
    /// The trailer being hashed.
    pub trailer: PendingTrailer,
    /// The whole frame's length.
    pub len: usize,
}

impl StreamedFrame {
    /// Hashes and signs the whole message now: the complete frame, for a
    /// sink that cannot stream. `None` if signing failed.
    pub fn into_whole(self) -> Option<EncodedMessage> {
        let mut trailer = self.trailer;
        let mut out = EncodedMessage::default();
        out.push(self.header);
        for c in self.body {
            trailer.update(&c);
            out.push(c);
        }
        out.push(trailer.finish()?);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    //! An initiator and an acceptor driven against each other in memory:
    //! each side's bytes are handed to the other side's [`Inbound`], and the
    //! events are applied exactly as the runtime does.

    use std::sync::OnceLock;

    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::endpoint::NET_GROUP_UNIQUE;

    /// Two peers and a third key that must not be accepted for either.
    fn identities() -> &'static [Arc<Identity>; 3] {
        static IDS: OnceLock<[Arc<Identity>; 3]> = OnceLock::new();
        IDS.get_or_init(|| {
            let mut rng = StdRng::seed_from_u64(0xC0FFEE);
            let mut gen =
                |n| Arc::new(Identity::generate(&mut rng, 1024, n, 1_700_000_000).unwrap());
            [gen("Initiator"), gen("Acceptor"), gen("Mallory")]
        })
    }

    struct Side {
        inb: Inbound,
        out: Outbound,
        /// Bytes received, not yet decoded.
        rx: BytesMut,
        /// Bytes this side wrote, not yet delivered.
        tx: Vec<u8>,
        got: Vec<Received>,
        /// Stream frames received: stream, data, bytes on the wire.
        streams: Vec<(u32, Bytes, usize)>,
        rng: StdRng,
    }

    impl Side {
        fn new(cfg: ConnectionConfig, role: Role, id: &Arc<Identity>, seed: u64) -> Side {
            Side {
                inb: Inbound::new(cfg.clone()).with_local(id.peer_id()),
                out: Outbound::new(cfg, role, id.clone()),
                rx: BytesMut::new(),
                tx: Vec::new(),
                got: Vec::new(),
                streams: Vec::new(),
                rng: StdRng::seed_from_u64(seed),
            }
        }

        fn write(&mut self, e: &EncodedMessage) {
            self.tx.extend_from_slice(&e.to_bytes());
        }

        /// Takes `bytes` off the wire in `chunk`-sized reads and applies
        /// every event, as the runtime's reader task does.
        fn receive(&mut self, bytes: &[u8], chunk: usize) -> Result<(), ConnectionError> {
            for piece in bytes.chunks(chunk.max(1)) {
                self.rx.extend_from_slice(piece);
                while let Some(ev) = self.inb.poll(&mut self.rx)? {
                    match ev {
                        InboundEvent::Welcome(w) => {
                            if let Some(offer) = self.out.on_remote_welcome(w, &mut self.rng)? {
                                self.write(&offer);
                            }
                        }
                        InboundEvent::Handshake(h) => {
                            let o = self.out.handle_handshake(h, &mut self.rng)?;
                            if let Some(r) = o.reply {
                                self.write(&r);
                            }
                            if o.switch_inbound {
                                self.inb.switch_to_compact_with(o.values);
                            } else if o.proven {
                                self.inb.prove_by_handshake();
                            }
                        }
                        InboundEvent::Message(m) => self.got.push(m),
                        InboundEvent::Stream {
                            stream,
                            data,
                            wire_len,
                        } => self.streams.push((stream, data, wire_len)),
                    }
                }
            }
            Ok(())
        }

        fn is_compact(&self) -> bool {
            self.inb.is_compact() && self.out.is_compact()
        }
    }

    struct Pair {
        i: Side,
        a: Side,
        chunk: usize,
    }

    impl Pair {
        fn new(icfg: ConnectionConfig, acfg: ConnectionConfig, chunk: usize) -> Pair {
            let [ia, ib, _] = identities();
            let mut i = Side::new(icfg, Role::Initiator, ia, 1);
            let mut a = Side::new(acfg, Role::Acceptor, ib, 2);
            i.tx = i
                .out
                .welcome("tcp://127.0.0.1:9701", "tcp://127.0.0.1:9702")
                .to_vec();
            a.tx = a
                .out
                .welcome("tcp://127.0.0.1:9702", "tcp://127.0.0.1:9701")
                .to_vec();
            Pair { i, a, chunk }
        }

        /// Exchanges the welcome lines, whole; the initiator answers the
        /// acceptor's welcome with its offer, which is not delivered.
        /// Returns both welcomes and the offer's bytes.
        fn welcomes(&mut self) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
            let w_i = std::mem::take(&mut self.i.tx);
            self.a.receive(&w_i, usize::MAX).unwrap();
            let w_a = std::mem::take(&mut self.a.tx);
            self.i.receive(&w_a, usize::MAX).unwrap();
            let offer = std::mem::take(&mut self.i.tx);
            (w_i, w_a, offer)
        }

        /// Moves bytes both ways until neither side has anything to say.
        fn pump(&mut self) -> Result<(), ConnectionError> {
            while !self.i.tx.is_empty() || !self.a.tx.is_empty() {
                let to_a = std::mem::take(&mut self.i.tx);
                self.a.receive(&to_a, self.chunk)?;
                let to_i = std::mem::take(&mut self.a.tx);
                self.i.receive(&to_i, self.chunk)?;
            }
            Ok(())
        }

        /// Sends `m` from the initiator (or the acceptor) to the other side
        /// and returns what arrived and the bytes it took.
        fn send(
            &mut self,
            from_initiator: bool,
            to: &ServiceAddress,
            m: Message,
        ) -> (Received, usize) {
            let chunk = self.chunk;
            let (src, dst) = if from_initiator {
                (&mut self.i, &mut self.a)
            } else {
                (&mut self.a, &mut self.i)
            };
            let enc = src.out.encode(to, m).unwrap();
            let wire = enc.to_bytes();
            assert_eq!(wire.len(), enc.len);
            dst.receive(&wire, chunk).unwrap();
            assert_eq!(dst.got.len(), 1, "exactly one message arrives");
            assert!(dst.rx.is_empty());
            (dst.got.pop().unwrap(), wire.len())
        }
    }

    fn cfg(compact: bool) -> ConnectionConfig {
        ConnectionConfig {
            compact,
            ..ConnectionConfig::default()
        }
    }

    fn to() -> ServiceAddress {
        mangle(NET_GROUP_UNIQUE, &ServiceAddress::new("test", Some("in")))
    }

    fn payload_message(n: usize) -> Message {
        let data: Vec<u8> = (0..n).map(|i| (i * 31 + 7) as u8).collect();
        Message::new()
            .with(Element::bytes("juxta", "payload", data))
            .with(Element::text("app", "note", "hello"))
    }

    /// Messages of several sizes both ways; checks content and destination.
    fn exchange(p: &mut Pair) -> Vec<usize> {
        let mut sizes = Vec::new();
        for n in [1usize, 600, 70_000] {
            for from_initiator in [true, false] {
                let m = payload_message(n);
                let (got, len) = p.send(from_initiator, &to(), m.clone());
                assert_eq!(got.message, m);
                assert_eq!(*got.to, to());
                assert_eq!(got.wire_len, len);
                sizes.push(len);
            }
        }
        sizes
    }

    #[test]
    fn welcome_exchange_names_both_peers() {
        let [ia, ib, _] = identities();
        let mut p = Pair::new(cfg(false), cfg(false), usize::MAX);
        assert!(matches!(
            p.i.out.encode(&to(), payload_message(1)),
            Err(ConnectionError::NotEstablished)
        ));
        p.pump().unwrap();
        assert_eq!(p.a.inb.remote(), Some(*ia.peer_id()));
        assert_eq!(p.i.inb.remote(), Some(*ib.peer_id()));
        assert!(!p.i.is_compact() && !p.a.is_compact());
    }

    #[test]
    fn compact_handshake_completes_and_messages_flow_both_ways() {
        // Whole writes, then byte-at-a-time reads.
        for chunk in [usize::MAX, 1] {
            let mut p = Pair::new(cfg(true), cfg(true), chunk);
            p.pump().unwrap();
            assert!(p.i.is_compact(), "initiator compact (chunk {chunk})");
            assert!(p.a.is_compact(), "acceptor compact (chunk {chunk})");
            assert!(matches!(p.i.out.handshake, HandshakeState::Done));
            assert!(matches!(p.a.out.handshake, HandshakeState::Done));
            exchange(&mut p);
            // Compact frames carry no source address.
            let (got, _) = p.send(true, &to(), payload_message(3));
            assert_eq!(got.source, None);
            assert_eq!(p.a.inb.received(), 4);
            assert_eq!(p.i.inb.received(), 3);
        }
    }

    #[test]
    fn stream_frames_flow_on_compact_connections_only() {
        let mut h = [0u8; compact::STREAM_HEADER_MAX];
        // JXTA framing (and before the welcome): no stream frames.
        let mut p = Pair::new(cfg(false), cfg(false), usize::MAX);
        assert!(p.i.out.stream_header(1, b"x", &mut h).is_err());
        p.pump().unwrap();
        assert!(matches!(
            p.i.out.stream_header(1, b"x", &mut h),
            Err(ConnectionError::NotEstablished)
        ));
        for chunk in [usize::MAX, 1] {
            let mut p = Pair::new(cfg(true), cfg(true), chunk);
            p.pump().unwrap();
            exchange(&mut p);
            for (stream, data) in [
                (9u32, &b"x"[..]),
                (300, &[7u8; 5000][..]),
                (5, &[9u8; 70_000][..]),
            ] {
                let n = p.a.out.stream_header(stream, data, &mut h).unwrap();
                let mut wire = h[..n].to_vec();
                wire.extend_from_slice(data);
                p.i.receive(&wire, chunk).unwrap();
                let (s, d, len) = p.i.streams.pop().expect("a stream frame arrived");
                assert_eq!((s, &d[..], len), (stream, data, wire.len()));
                assert!(p.i.rx.is_empty());
            }
            // Messages still flow after them.
            let (got, _) = p.send(false, &to(), payload_message(2));
            assert_eq!(got.message, payload_message(2));
        }
    }

    /// A routed message's header and fingerprint, and a 1-byte payload.
    fn routed_message() -> Message {
        Message::new()
            .with(Element::bytes("juxta", "ERM", vec![1u8; 306]))
            .with(Element::bytes(
                "jxta",
                "EndpointRouterMsg-fingerprint",
                vec![2u8; 850],
            ))
            .with(Element::bytes("bench", "data", &b"a"[..]))
    }

    /// Sends a routed message from each side three times; returns the
    /// largest wire size of the later two.
    fn routed_sizes(p: &mut Pair) -> usize {
        let to = mangle(
            NET_GROUP_UNIQUE,
            &ServiceAddress::new("EndpointRouter", None),
        );
        let mut most = 0;
        for from_initiator in [true, false] {
            for k in 0..3 {
                let (got, len) = p.send(from_initiator, &to, routed_message());
                assert_eq!(got.message, routed_message());
                if k > 0 {
                    most = most.max(len);
                }
            }
        }
        most
    }

    #[test]
    fn two_juxta_peers_agree_on_values_and_an_older_offer_goes_without() {
        let mut p = Pair::new(cfg(true), cfg(true), usize::MAX);
        p.pump().unwrap();
        assert!(p.i.is_compact() && p.a.is_compact());
        let most = routed_sizes(&mut p);
        assert!(most < 40, "a repeated routed message took {most} bytes");

        // An initiator from before values: its offer has no `values`
        // element (replaced here by one without it, signed as usual).
        let mut p = Pair::new(cfg(true), cfg(true), usize::MAX);
        let (w_i, _, offer) = p.welcomes();
        let mut scratch = Inbound::new(cfg(true));
        let mut rx = BytesMut::from(&w_i[..]);
        scratch.poll(&mut rx).unwrap().unwrap();
        rx.extend_from_slice(&offer);
        let Some(InboundEvent::Handshake(HandshakeMsg::Offer {
            nonce,
            cert,
            compact,
            values,
        })) = scratch.poll(&mut rx).unwrap()
        else {
            panic!("the initiator did not offer");
        };
        assert!(compact && values);
        let old =
            p.i.out
                .encode_handshake(&HandshakeMsg::Offer {
                    nonce,
                    cert,
                    compact,
                    values: false,
                })
                .unwrap();
        assert!(!old
            .to_bytes()
            .windows(b"values".len())
            .any(|w| w == b"values"));
        p.a.receive(&old.to_bytes(), usize::MAX).unwrap();
        p.pump().unwrap();
        assert!(p.i.is_compact() && p.a.is_compact());
        let most = routed_sizes(&mut p);
        assert!(
            most > 850,
            "without values a routed message took {most} bytes"
        );
    }

    #[test]
    fn one_byte_message_in_compact_mode_is_at_most_33_bytes() {
        let mut p = Pair::new(cfg(true), cfg(true), usize::MAX);
        p.pump().unwrap();
        assert!(p.i.is_compact() && p.a.is_compact());
        let to = mangle(
            NET_GROUP_UNIQUE,
            &ServiceAddress::new("BenchEP", Some("data")),
        );
        let one = || Message::new().with(Element::bytes("bench", "data", &b"a"[..]));
        for from_initiator in [true, false] {
            // The first message defines the channel and the name…
            let (got, _) = p.send(from_initiator, &to, one());
            assert_eq!(got.message, one());
            // …after that a 1-byte payload is a handful of bytes.
            for _ in 0..3 {
                let (got, len) = p.send(from_initiator, &to, one());
                assert_eq!(got.message, one());
                assert!(len <= 33, "1-byte message took {len} bytes");
            }
        }
    }

    #[test]
    fn jxta_mode_messages_flow_both_ways_with_cbjx() {
        let [ia, ib, _] = identities();
        let mut p = Pair::new(cfg(false), cfg(false), usize::MAX);
        p.pump().unwrap();
        let sizes = exchange(&mut p);
        // JXTA framing: header block, addresses and a CBJX trailer each time.
        assert!(sizes.iter().all(|&n| n > 200), "{sizes:?}");
        let (got, _) = p.send(true, &to(), payload_message(1));
        assert_eq!(got.source, Some(ia.peer_id().endpoint_address()));
        let (got, _) = p.send(false, &to(), payload_message(1));
        assert_eq!(got.source, Some(ib.peer_id().endpoint_address()));
    }

    /// Feeds `wire` to `inb` in `chunk`-byte reads; the last event.
    fn feed(
        inb: &mut Inbound,
        rx: &mut BytesMut,
        wire: &[u8],
        chunk: usize,
    ) -> Result<Option<InboundEvent>, ConnectionError> {
        let mut last = None;
        for piece in wire.chunks(chunk) {
            rx.extend_from_slice(piece);
            while let Some(ev) = inb.poll(rx)? {
                last = Some(ev);
            }
        }
        Ok(last)
    }

    /// A pair in JXTA framing with CBJX, after one verified message each
    /// way (so each side knows its remote's trailer length).
    fn jxta_pair() -> Pair {
        let mut p = Pair::new(cfg(false), cfg(false), usize::MAX);
        p.pump().unwrap();
        p.send(true, &to(), payload_message(1));
        p.send(false, &to(), payload_message(1));
        assert!(p.a.inb.trailer_len.is_some() && p.i.inb.trailer_len.is_some());
        p
    }

    #[test]
    fn streamed_frames_are_the_whole_frames() {
        let mut p = jxta_pair();
        let m = payload_message(300_000);
        let whole = p.i.out.encode(&to(), m.clone()).unwrap().to_bytes();
        // Below the threshold: the whole frame.
        let Framed::Whole(w) =
            p.i.out
                .encode_streamed(&to(), m.clone(), usize::MAX)
                .unwrap()
        else {
            panic!("small frame streamed");
        };
        assert_eq!(w.to_bytes(), whole);
        // Streamed: hashed piece by piece as a writer does, then signed.
        let Framed::Streamed(f) = p.i.out.encode_streamed(&to(), m.clone(), 0).unwrap() else {
            panic!("not streamed");
        };
        assert_eq!(f.len, whole.len());
        let mut wire = f.header.to_vec();
        let mut trailer = f.trailer;
        for c in &f.body {
            for piece in c.chunks(4096) {
                trailer.update(piece);
                wire.extend_from_slice(piece);
            }
        }
        wire.extend_from_slice(&trailer.finish().unwrap());
        assert_eq!(&wire[..], &whole[..], "same bytes, same signature");
        let Framed::Streamed(f) = p.i.out.encode_streamed(&to(), m.clone(), 0).unwrap() else {
            panic!("not streamed");
        };
        assert_eq!(f.into_whole().unwrap().to_bytes(), whole);
        // And the receiver takes it, hashing as it arrives.
        p.a.receive(&wire, 8192).unwrap();
        assert_eq!(p.a.got.pop().unwrap().message, m);
        // Compact framing and CBJX off never stream.
        let mut off = ConnectionConfig {
            cbjx: false,
            ..cfg(false)
        };
        off.handshake = false;
        let mut q = Pair::new(off.clone(), off, usize::MAX);
        q.pump().unwrap();
        assert!(matches!(
            q.i.out.encode_streamed(&to(), m, 0).unwrap(),
            Framed::Whole(_)
        ));
    }

    #[test]
    fn large_frames_are_hashed_as_they_arrive() {
        let mut p = jxta_pair();
        let m = payload_message(200_000);
        let wire = p.i.out.encode(&to(), m.clone()).unwrap().to_bytes();
        let (inb, rx) = (&mut p.a.inb, &mut p.a.rx);
        // All but the last byte: no event, most of the message hashed.
        assert!(feed(inb, rx, &wire[..wire.len() - 1], 4096)
            .unwrap()
            .is_none());
        let st = inb.rx_hash.as_ref().expect("hashing while it arrives");
        assert!(st.hashed > 190_000, "{}", st.hashed);
        assert!(st.signed_len < wire.len() - inb.trailer_len.unwrap());
        let Some(InboundEvent::Message(got)) = feed(inb, rx, &wire[wire.len() - 1..], 1).unwrap()
        else {
            panic!("message not delivered");
        };
        assert_eq!(got.message, m);
        assert!(got.signed.is_some());
        assert!(inb.rx_hash.is_none());
        // A wrong prediction of the signed length (as if the trailer had
        // another length) falls back to hashing the message whole.
        inb.trailer_len = Some(inb.trailer_len.unwrap() + 7);
        let Some(InboundEvent::Message(got)) = feed(inb, rx, &wire, 1000).unwrap() else {
            panic!("message not delivered");
        };
        assert_eq!(got.message, m);
    }

    #[test]
    fn tampered_large_frames_are_refused_when_hashed_as_they_arrive() {
        let mut p = jxta_pair();
        let m = payload_message(200_000);
        let wire = p.i.out.encode(&to(), m).unwrap().to_bytes();
        let tl = p.a.inb.trailer_len.unwrap();
        // A payload byte hashed long before the end, one hashed with the
        // last reads, and a signature byte: a typed signature failure.
        for at in [1000, 150_000, 199_000, wire.len() - 1] {
            let mut p = jxta_pair();
            let mut bad = wire.to_vec();
            bad[at] ^= 0x01;
            assert_eq!(
                feed(&mut p.a.inb, &mut p.a.rx, &bad, 4096).unwrap_err(),
                ConnectionError::Cbjx(CbjxError::BadSignature),
                "byte {at}"
            );
        }
        // A certificate byte: not the connection's certificate.
        let mut p = jxta_pair();
        let mut bad = wire.to_vec();
        bad[wire.len() - tl + 40] ^= 0x01;
        assert_eq!(
            feed(&mut p.a.inb, &mut p.a.rx, &bad, 4096).unwrap_err(),
            ConnectionError::CertificateChanged
        );
    }

    #[test]
    fn compact_disabled_on_acceptor_keeps_jxta_framing() {
        let mut p = Pair::new(cfg(true), cfg(false), usize::MAX);
        p.pump().unwrap();
        // The handshake ran for the proof only: nothing switched, both
        // identities are proven.
        assert!(matches!(p.i.out.handshake, HandshakeState::Done));
        assert_eq!(p.i.inb.proof(), Proof::Handshake);
        assert_eq!(p.a.inb.proof(), Proof::Handshake);
        assert!(!p.i.inb.is_compact() && !p.i.out.is_compact());
        assert!(!p.a.inb.is_compact() && !p.a.out.is_compact());
        let sizes = exchange(&mut p);
        assert!(sizes.iter().all(|&n| n > 200), "{sizes:?}");
        let (got, _) = p.send(true, &to(), payload_message(1));
        assert!(
            got.source.is_some(),
            "JXTA framing carries the source address"
        );
    }

    /// Runs the handshake up to the acceptor's `accept`, replaces that
    /// accept by `forge(nonce_a, real accept)` (still CBJX-signed by the
    /// acceptor, so only the handshake check can refuse it) and returns
    /// what the initiator makes of it.
    fn forged_accept(
        forge: impl FnOnce(&Bytes, HandshakeMsg) -> HandshakeMsg,
    ) -> Result<(), ConnectionError> {
        let mut p = Pair::new(cfg(true), cfg(true), usize::MAX);
        let (_, w_a, offer) = p.welcomes();
        assert!(!offer.is_empty(), "initiator sent an offer");
        p.a.receive(&offer, usize::MAX).unwrap();
        let real = std::mem::take(&mut p.a.tx);
        let nonce_a = match &p.a.out.handshake {
            HandshakeState::AwaitConfirm { nonce_a, .. } => nonce_a.clone(),
            _ => panic!("acceptor is not waiting for a confirm"),
        };
        // Read the real accept with a scratch receiver to get its fields.
        let mut scratch = Inbound::new(cfg(true));
        let mut rx = BytesMut::from(&w_a[..]);
        scratch.poll(&mut rx).unwrap().unwrap();
        rx.extend_from_slice(&real);
        let Some(InboundEvent::Handshake(accept)) = scratch.poll(&mut rx).unwrap() else {
            panic!("acceptor did not answer with a handshake message");
        };
        let forged = p.a.out.encode_handshake(&forge(&nonce_a, accept)).unwrap();
        let r = p.i.receive(&forged.to_bytes(), usize::MAX);
        assert!(!p.i.is_compact(), "a refused accept switches nothing");
        r
    }

    #[test]
    fn accept_signed_by_the_wrong_key_is_refused() {
        let [ia, ib, mallory] = identities();
        // The acceptor's certificate, but Mallory's signature over the
        // right transcript.
        let r = forged_accept(|nonce_a, accept| {
            let HandshakeMsg::Accept { nonce, cert, .. } = accept else {
                panic!("not an accept");
            };
            let digest =
                handshake::transcript("accept", nonce_a, &nonce, ia.peer_id(), ib.peer_id());
            HandshakeMsg::Accept {
                nonce,
                cert,
                sig: handshake::sign(mallory, &digest),
                compact: true,
                values: true,
            }
        });
        assert_eq!(
            r.unwrap_err(),
            ConnectionError::Handshake(HandshakeError::BadSignature)
        );
        // Mallory's certificate and signature: not the acceptor's key.
        let r = forged_accept(|nonce_a, accept| {
            let HandshakeMsg::Accept { nonce, .. } = accept else {
                panic!("not an accept");
            };
            let digest =
                handshake::transcript("accept", nonce_a, &nonce, ia.peer_id(), ib.peer_id());
            HandshakeMsg::Accept {
                nonce,
                cert: mallory.cert_der().clone(),
                sig: handshake::sign(mallory, &digest),
                compact: true,
                values: true,
            }
        });
        assert!(
            matches!(
                r,
                Err(ConnectionError::Handshake(HandshakeError::WrongPeer(p))) if p == *ib.peer_id()
            ),
            "{r:?}"
        );
        // The acceptor's own key, but over another transcript (a replay).
        let r = forged_accept(|_, accept| {
            let HandshakeMsg::Accept { nonce, cert, .. } = accept else {
                panic!("not an accept");
            };
            let digest =
                handshake::transcript("accept", &[0u8; 32], &nonce, ia.peer_id(), ib.peer_id());
            HandshakeMsg::Accept {
                nonce,
                cert,
                sig: handshake::sign(ib, &digest),
                compact: true,
                values: true,
            }
        });
        assert_eq!(
            r.unwrap_err(),
            ConnectionError::Handshake(HandshakeError::BadSignature)
        );
    }

    /// A JXTA-framed message from `signer`'s key whose trailer claims
    /// `claimed` (cert = the signer's), with `extra` as an element, framed
    /// for the wire.
    fn forged_cbjx(signer: &Identity, claimed: &PeerId, extra: &str) -> Vec<u8> {
        let m = payload_message(1)
            .with(Element::text("app", "names", extra))
            .with(Element::text(
                NS_JXTA,
                ELEM_DEST_ADDRESS,
                "tcp://127.0.0.1:9702/EndpointService:jxta-NetGroup/test/in",
            ));
        let body = encode_v0(&m, JavaHashOrder::Java8).unwrap();
        let cert = signer.cert_der().clone();
        let src = Bytes::from(claimed.to_string());
        let digest = cbjx::signed_digest(body.chunks.iter().map(|c| &c[..]), &cert, &src);
        let trailer = cbjx::Trailer {
            cert,
            src,
            sig: signer.sign_sha256_prehash(&digest),
        }
        .encode();
        let mut out = frame::encode_header((body.len + trailer.len()) as u64).to_vec();
        out.extend_from_slice(&body.to_bytes());
        out.extend_from_slice(&trailer);
        out
    }

    /// A receiver (the initiator side, JXTA framing) that has read the
    /// welcome of a remote claiming `claimed`.
    fn receiver_after_welcome(claimed: &PeerId) -> Inbound {
        let [ia, _, _] = identities();
        let mut inb = Inbound::new(cfg(false)).with_local(ia.peer_id());
        let w = Welcome::new(
            "tcp://127.0.0.1:9701".into(),
            "tcp://127.0.0.1:9702".into(),
            *claimed,
        )
        .to_line();
        let mut rx = BytesMut::from(&w[..]);
        assert!(matches!(
            inb.poll(&mut rx).unwrap(),
            Some(InboundEvent::Welcome(_))
        ));
        inb
    }

    #[test]
    fn own_key_signing_for_another_cbid_is_refused() {
        // The attack of issue #20: a welcome naming victim V, then a message
        // signed with the attacker's own key whose trailer src is V.
        let [_, victim, mallory] = identities();
        let mut inb = receiver_after_welcome(victim.peer_id());
        let mut rx = BytesMut::from(&forged_cbjx(mallory, victim.peer_id(), "x")[..]);
        let r = inb.poll(&mut rx);
        assert!(
            matches!(&r, Err(ConnectionError::CertNotForPeer { peer }) if **peer == *victim.peer_id()),
            "{r:?}"
        );
        assert_eq!(inb.proof(), Proof::Claimed);
    }

    #[test]
    fn uuid_peer_ids_stay_claimed() {
        // JXSE lets users set uuid peer IDs: no key derives them, so such a
        // peer is served but never proven.
        let [_, _, mallory] = identities();
        let uuid: PeerId =
            "urn:jxta:uuid-59616261646162614A78746150325033DEADBEEFDEADBEEFDEADBEEFDEADBEEF03"
                .parse()
                .unwrap();
        assert!(!uuid.is_cbid());
        let mut inb = receiver_after_welcome(&uuid);
        let [ia, _, _] = identities();
        let mut rx = BytesMut::from(&forged_cbjx(mallory, &uuid, &ia.peer_id().to_string())[..]);
        let Some(InboundEvent::Message(m)) = inb.poll(&mut rx).unwrap() else {
            panic!("message not delivered");
        };
        let s = m.signed.expect("signed");
        assert!(!s.cert_matches_id && s.names_local);
        assert_eq!(inb.proof(), Proof::Claimed);
    }

    #[test]
    fn signature_proof_needs_the_key_and_a_message_naming_us() {
        let [ia, ib, mallory] = identities();
        let mut inb = receiver_after_welcome(ib.peer_id());
        // Signed by the right key but not naming the receiver: no proof yet.
        let mut rx = BytesMut::from(&forged_cbjx(ib, ib.peer_id(), "someone else")[..]);
        let Some(InboundEvent::Message(m)) = inb.poll(&mut rx).unwrap() else {
            panic!("message not delivered");
        };
        let s = m.signed.unwrap();
        assert!(s.cert_matches_id && !s.names_local);
        // Naming the receiver: a proof candidate for the caller's replay check.
        let mut rx = BytesMut::from(&forged_cbjx(ib, ib.peer_id(), &ia.peer_id().to_string())[..]);
        let Some(InboundEvent::Message(m)) = inb.poll(&mut rx).unwrap() else {
            panic!("message not delivered");
        };
        let s = m.signed.unwrap();
        assert!(s.cert_matches_id && s.names_local);
        inb.prove_by_signature();
        assert_eq!(inb.proof(), Proof::Signature);
        // The signer's certificate is pinned: another key, even one whose
        // trailer names itself consistently, is refused on this connection.
        let mut rx = BytesMut::from(&forged_cbjx(mallory, ib.peer_id(), "x")[..]);
        assert_eq!(
            inb.poll(&mut rx).unwrap_err(),
            ConnectionError::CertificateChanged
        );
    }

    #[test]
    fn large_frames_wait_for_a_verified_signature() {
        let [_, ib, _] = identities();
        let mut inb = receiver_after_welcome(ib.peer_id());
        assert_eq!(inb.message_limit(), DEFAULT_MAX_UNPROVEN_MESSAGE);
        // A header announcing 1 MiB before anything was verified: refused
        // from the header alone, nothing reserved.
        let mut rx = BytesMut::from(&frame::encode_header(1 << 20)[..]);
        assert!(matches!(
            inb.poll(&mut rx),
            Err(ConnectionError::Frame(FrameError::TooLarge { .. }))
        ));
        assert!(rx.capacity() < 1 << 20);
        // After one verified message the full limit applies.
        let mut inb = receiver_after_welcome(ib.peer_id());
        let mut rx = BytesMut::from(&forged_cbjx(ib, ib.peer_id(), "x")[..]);
        inb.poll(&mut rx).unwrap().unwrap();
        assert_eq!(inb.message_limit(), frame::DEFAULT_MAX_MESSAGE);
    }

    #[test]
    fn an_announced_length_alone_reserves_little_before_proof() {
        // CBJX off: the full limit applies from the start, so only the
        // step-wise growth keeps a header from reserving 32 MiB.
        let [ia, ib, _] = identities();
        let mut inb = Inbound::new(ConnectionConfig {
            cbjx: false,
            ..cfg(false)
        })
        .with_local(ia.peer_id());
        let w = Welcome::new("tcp://a:1".into(), "tcp://b:2".into(), *ib.peer_id()).to_line();
        let mut rx = BytesMut::from(&w[..]);
        inb.poll(&mut rx).unwrap().unwrap();
        rx.extend_from_slice(&frame::encode_header(32 << 20));
        assert!(inb.poll(&mut rx).unwrap().is_none());
        assert!(rx.capacity() < 1 << 20, "reserved {}", rx.capacity());
    }

    #[test]
    fn welcome_from_another_peer_than_dialled_is_refused() {
        let [ia, ib, mallory] = identities();
        let mut inb = Inbound::new(cfg(false))
            .with_local(ia.peer_id())
            .expecting(Some(*ib.peer_id()));
        let w = Welcome::new("tcp://a:1".into(), "tcp://b:2".into(), *mallory.peer_id()).to_line();
        let mut rx = BytesMut::from(&w[..]);
        assert!(matches!(
            inb.poll(&mut rx),
            Err(ConnectionError::UnexpectedPeer { expected, got })
                if *expected == *ib.peer_id() && *got == *mallory.peer_id()
        ));
    }

    #[test]
    fn handshake_off_proves_nothing_and_stays_in_jxta_framing() {
        let off = ConnectionConfig {
            handshake: false,
            compact: false,
            ..ConnectionConfig::default()
        };
        for (i, a) in [(off.clone(), cfg(true)), (cfg(true), off)] {
            let mut p = Pair::new(i, a, usize::MAX);
            p.pump().unwrap();
            assert_eq!(p.i.inb.proof(), Proof::Claimed);
            assert_eq!(p.a.inb.proof(), Proof::Claimed);
            assert!(!p.i.is_compact() && !p.a.is_compact());
            exchange(&mut p);
        }
    }

    #[test]
    fn compact_handshake_proves_both_sides() {
        let mut p = Pair::new(cfg(true), cfg(true), usize::MAX);
        p.pump().unwrap();
        assert_eq!(p.i.inb.proof(), Proof::Handshake);
        assert_eq!(p.a.inb.proof(), Proof::Handshake);
        assert_eq!(p.a.inb.message_limit(), frame::DEFAULT_MAX_MESSAGE);
    }

    #[test]
    fn message_signed_by_another_peer_is_spoofed() {
        let [_, ib, mallory] = identities();
        // No handshake: nothing signed by the acceptor arrives before
        // Mallory's message (which would pin the acceptor's certificate and
        // refuse Mallory's as `CertificateChanged`).
        let no_hs = ConnectionConfig {
            handshake: false,
            compact: false,
            ..ConnectionConfig::default()
        };
        let mut p = Pair::new(no_hs.clone(), no_hs, usize::MAX);
        p.pump().unwrap();
        // Mallory frames a message on the acceptor's connection.
        let mut fake = Outbound::new(cfg(false), Role::Acceptor, mallory.clone());
        let w = p.i.out.welcome("tcp://x:1", "tcp://127.0.0.1:9702");
        let (w, _) = Welcome::parse(&w).unwrap().unwrap();
        fake.on_remote_welcome(w, &mut StdRng::seed_from_u64(3))
            .unwrap();
        let enc = fake.encode(&to(), payload_message(1)).unwrap();
        let r = p.i.receive(&enc.to_bytes(), usize::MAX);
        assert!(
            matches!(
                &r,
                Err(ConnectionError::SpoofedSource { signer, peer })
                    if **signer == *mallory.peer_id() && **peer == *ib.peer_id()
            ),
            "{r:?}"
        );
    }
}
