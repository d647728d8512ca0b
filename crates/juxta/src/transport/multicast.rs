//! The IP multicast transport (JXSE's `McastTransport`).
//!
//! Why it exists: a propagate pipe otherwise reaches only the peers this peer
//! holds a connection to. Peers on the same LAN that nobody has connected to
//! yet (and JXSE peers, whose propagation also goes out by multicast) are
//! reached by sending each propagated message once more as a UDP datagram to
//! a multicast group, `224.0.1.85:1234` by default. Receivers deliver a
//! message that arrives both ways once (the propagate ID, see
//! [`crate::pipe`]).
//!
//! A datagram is exactly what JXSE 2.7 sends (digest §3.6):
//!
//! ```text
//! "JXTA"  header block  binary message v0  [CBJX trailer]
//! header block = content-type "application/x-jxta-msg", content-length
//!                (the message without the trailer, as JXSE writes it), 0
//! message      = the elements, then jxta:EndpointHeaderSrcPeer <peer URN>,
//!                jxta:EndpointSourceAddress jxta://<peer unique>,
//!                jxta:EndpointDestinationAddress
//!                    mcast://<group>/<mangled service>/<param>
//! ```
//!
//! at most [`MAX_DATAGRAM`] bytes; larger messages are refused with
//! [`DatagramError::TooLarge`] (connections still carry them). A receiver
//! reads the message to the end of the datagram (JXSE ignores
//! `content-length`), checks the CBJX trailer when CBJX is on (its signer
//! must be the `EndpointSourceAddress` peer, as JXSE's `CbjxFilter`
//! demands), drops its own datagrams, and dispatches the rest exactly like
//! messages received on a connection. Malformed datagrams are counted in
//! [`crate::Stats::bad_datagrams`] and dropped.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use juxta_proto::endpoint::address::EndpointAddress;
use juxta_proto::endpoint::{mangle, ServiceAddress, ELEM_DEST_ADDRESS, ELEM_SOURCE_ADDRESS};
use juxta_proto::id::PeerId;
use juxta_proto::identity::Identity;
use juxta_proto::message::cbjx::{self, CbjxError, CbjxVerifier, Trailer};
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{decode_v0, encode_v0, Element, Message, MessageError, NS_JXTA};
use juxta_proto::wire::connection::ConnectionConfig;
use juxta_proto::wire::frame::{self, FrameError, CONTENT_TYPE_JXTA_MSG};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use crate::config::MulticastConfig;
use crate::peer::{Inner, PeerError};
use crate::PeerConfig;

/// Largest datagram sent or accepted (JXSE's `multicastPacketSize`).
pub const MAX_DATAGRAM: usize = 16384;
/// The first four bytes of every datagram.
pub const DATAGRAM_MAGIC: &[u8; 4] = b"JXTA";
/// The endpoint protocol name of the transport (`mcast://group:port`).
pub const PROTOCOL: &str = "mcast";
/// `jxta:EndpointHeaderSrcPeer`: the sending peer's ID, which JXSE adds to
/// every propagated message for loop detection.
pub const ELEM_SRC_PEER: &str = "EndpointHeaderSrcPeer";
/// Senders whose certificates are kept parsed (a steady sender costs one
/// RSA verification per datagram, not a certificate parse as well).
const MAX_CACHED_SENDERS: usize = 256;

/// Errors encoding or decoding one datagram.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    /// The message does not fit one datagram.
    #[error("datagram of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// encoded (or received) length
        len: usize,
        /// the limit, [`MAX_DATAGRAM`]
        max: usize,
    },
    /// The datagram does not start with `JXTA`.
    #[error("not a JXTA datagram (bad magic)")]
    BadMagic,
    /// The header block ends before its terminating zero byte.
    #[error("datagram header block truncated")]
    TruncatedHeader,
    /// A malformed header block.
    #[error("datagram header: {0}")]
    Header(#[from] FrameError),
    /// `content-length` announces more bytes than the datagram holds.
    #[error("content-length {announced} exceeds the {available} bytes after the header")]
    ContentLength {
        /// announced length
        announced: u64,
        /// bytes present
        available: usize,
    },
    /// A malformed binary message (or one that cannot be encoded).
    #[error("message: {0}")]
    Message(#[from] MessageError),
    /// A malformed or unverifiable CBJX trailer.
    #[error("cbjx: {0}")]
    Cbjx(#[from] CbjxError),
    /// No CBJX trailer while CBJX is required.
    #[error("datagram without CBJX trailer")]
    MissingTrailer,
    /// No `EndpointSourceAddress` element.
    #[error("datagram without EndpointSourceAddress")]
    NoSource,
    /// The `EndpointSourceAddress` does not name a peer.
    #[error("EndpointSourceAddress is not a jxta:// peer address: {0:?}")]
    BadSource(String),
    /// The CBJX trailer was signed by another peer than the source element
    /// names.
    #[error("datagram from {source_peer} signed by {signer}")]
    SpoofedSource {
        /// who signed
        signer: Box<PeerId>,
        /// who the source element names
        source_peer: Box<PeerId>,
    },
    /// No usable `EndpointDestinationAddress` element.
    #[error("datagram without a valid EndpointDestinationAddress")]
    NoDestination,
    /// The source is a `cbid` peer ID but the trailer's certificate derives
    /// another one: someone else's key claiming that peer.
    #[error("datagram from {0} signed with a certificate that derives another peer ID")]
    CertNotForPeer(Box<PeerId>),
}

/// Errors of the multicast transport.
#[derive(Debug, thiserror::Error)]
pub enum MulticastError {
    /// The message cannot be sent as one datagram.
    #[error(transparent)]
    Datagram(#[from] DatagramError),
    /// The configured group is not an IPv4 multicast address.
    #[error("{0} is not an IPv4 multicast group")]
    NotMulticast(Ipv4Addr),
    /// A socket operation failed, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// what failed
        what: String,
        /// the error
        #[source]
        source: io::Error,
    },
}

/// A datagram decoded by [`decode_datagram`].
#[derive(Debug, Clone)]
pub struct Datagram {
    /// The service address on the wire (mangled, as on a connection).
    pub to: ServiceAddress,
    /// The sending peer (from `EndpointSourceAddress`; verified when the
    /// datagram carried a CBJX trailer).
    pub source: PeerId,
    /// The message without the address elements and `EndpointHeaderSrcPeer`.
    pub message: Message,
    /// Whether a CBJX trailer verified.
    pub signed: bool,
}

/// The header block JXSE 2.7's `McastTransport` writes: content-type, then
/// content-length.
fn encode_header(content_length: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(63);
    b.put_u8(12);
    b.put_slice(b"content-type");
    b.put_u16(CONTENT_TYPE_JXTA_MSG.len() as u16);
    b.put_slice(CONTENT_TYPE_JXTA_MSG.as_bytes());
    b.put_u8(14);
    b.put_slice(b"content-length");
    b.put_u16(8);
    b.put_u64(content_length);
    b.put_u8(0);
    b.freeze()
}

/// `mcast://a.b.c.d:port`.
fn public_address(group: SocketAddrV4) -> String {
    format!("{PROTOCOL}://{group}")
}

/// Encodes `msg` as the datagram `identity` sends to `group` for the
/// service address `to` (as it should appear on the wire, i.e. already
/// mangled). `cbjx`: append the signature trailer.
///
/// ```
/// use juxta::proto::endpoint::{mangle, ServiceAddress};
/// use juxta::proto::identity::Identity;
/// use juxta::proto::message::{namespace_order::JavaHashOrder, Element, Message};
/// use juxta::transport::multicast::{decode_datagram, encode_datagram};
/// let me = Identity::generate(&mut rand::thread_rng(), 1024, "doc", 1_700_000_000).unwrap();
/// let to = mangle("jxta-NetGroup", &ServiceAddress::new("Chat", Some("room")));
/// let msg = Message::new().with(Element::text("", "text", "hi"));
/// let group = "224.0.1.85:1234".parse().unwrap();
/// let d = encode_datagram(&me, group, &to, msg, true, JavaHashOrder::Java8).unwrap();
/// assert!(d.starts_with(b"JXTA"));
/// let other: juxta::proto::id::PeerId =
///     "urn:jxta:cbid-59616261646162614A7874615032503301AB03".parse().unwrap();
/// let mut v = Default::default();
/// let got = decode_datagram(d, &other, true, &mut v).unwrap().unwrap();
/// assert_eq!((&got.source, &got.to), (me.peer_id(), &to));
/// ```
pub fn encode_datagram(
    identity: &Identity,
    group: SocketAddrV4,
    to: &ServiceAddress,
    mut msg: Message,
    cbjx: bool,
    order: JavaHashOrder,
) -> Result<Bytes, DatagramError> {
    let dest = match &to.param {
        Some(p) => format!("{}/{}/{p}", public_address(group), to.service),
        None => format!("{}/{}", public_address(group), to.service),
    };
    let me = identity.peer_id();
    msg.remove_all(NS_JXTA, ELEM_SRC_PEER);
    msg.remove_all(NS_JXTA, ELEM_SOURCE_ADDRESS);
    msg.remove_all(NS_JXTA, ELEM_DEST_ADDRESS);
    msg.push(Element::text(NS_JXTA, ELEM_SRC_PEER, &me.to_string()));
    msg.push(Element::text(
        NS_JXTA,
        ELEM_SOURCE_ADDRESS,
        &me.endpoint_address(),
    ));
    msg.push(Element::text(NS_JXTA, ELEM_DEST_ADDRESS, &dest));
    let body = encode_v0(&msg, order)?;
    let header = encode_header(body.len as u64);
    let unsigned = DATAGRAM_MAGIC.len() + header.len() + body.len;
    if unsigned > MAX_DATAGRAM {
        // Refused before the (costly) signature.
        return Err(DatagramError::TooLarge {
            len: unsigned,
            max: MAX_DATAGRAM,
        });
    }
    let trailer = cbjx.then(|| cbjx::trailer_for(identity, &body.chunks));
    let len = unsigned + trailer.as_ref().map_or(0, |t| t.len());
    if len > MAX_DATAGRAM {
        return Err(DatagramError::TooLarge {
            len,
            max: MAX_DATAGRAM,
        });
    }
    let mut out = BytesMut::with_capacity(len);
    out.put_slice(DATAGRAM_MAGIC);
    out.put_slice(&header);
    for c in &body.chunks {
        out.put_slice(c);
    }
    if let Some(t) = trailer {
        out.put_slice(&t);
    }
    Ok(out.freeze())
}

/// A datagram parsed but not yet verified.
struct Parsed {
    to: ServiceAddress,
    source: PeerId,
    message: Message,
    /// The message from `jxmg` (the signed bytes are `..elements_end`).
    body: Bytes,
    elements_end: usize,
    trailer: Option<Trailer>,
}

fn parse(buf: Bytes) -> Result<Parsed, DatagramError> {
    if buf.len() > MAX_DATAGRAM {
        return Err(DatagramError::TooLarge {
            len: buf.len(),
            max: MAX_DATAGRAM,
        });
    }
    if buf.len() < DATAGRAM_MAGIC.len() || &buf[..DATAGRAM_MAGIC.len()] != DATAGRAM_MAGIC {
        return Err(DatagramError::BadMagic);
    }
    let rest = buf.slice(DATAGRAM_MAGIC.len()..);
    let h =
        frame::parse_header(&rest, MAX_DATAGRAM as u64)?.ok_or(DatagramError::TruncatedHeader)?;
    let body = rest.slice(h.header_len..);
    // JXSE announces the length without the trailer and its receiver reads
    // to the end of the datagram; so do we, after a sanity check.
    if h.content_length > body.len() as u64 {
        return Err(DatagramError::ContentLength {
            announced: h.content_length,
            available: body.len(),
        });
    }
    let decoded = decode_v0(body.clone())?;
    let elements_end = decoded.elements_end;
    let trailer = if elements_end < body.len() {
        Some(cbjx::parse_trailer(body.slice(elements_end..))?)
    } else {
        None
    };
    let mut message = decoded.message;
    let src = message
        .take(NS_JXTA, ELEM_SOURCE_ADDRESS)
        .ok_or(DatagramError::NoSource)?;
    let src = src.as_str().unwrap_or_default();
    let source = src
        .parse::<EndpointAddress>()
        .ok()
        .and_then(|a| a.peer_id())
        .ok_or_else(|| DatagramError::BadSource(src.chars().take(120).collect()))?;
    let dest = message
        .take(NS_JXTA, ELEM_DEST_ADDRESS)
        .and_then(|e| e.as_str().and_then(|s| s.parse::<EndpointAddress>().ok()))
        .ok_or(DatagramError::NoDestination)?;
    let to = ServiceAddress {
        service: dest.service.ok_or(DatagramError::NoDestination)?,
        param: dest.param,
    };
    message.remove_all(NS_JXTA, ELEM_SRC_PEER);
    Ok(Parsed {
        to,
        source,
        message,
        body,
        elements_end,
        trailer,
    })
}

impl Parsed {
    fn verify(
        self,
        require_cbjx: bool,
        verifier: &mut CbjxVerifier,
    ) -> Result<Datagram, DatagramError> {
        let signed = match &self.trailer {
            Some(t) => {
                let v = verifier.verify(&[&self.body[..self.elements_end]], t)?;
                let signer = v.peer;
                if signer != self.source {
                    return Err(DatagramError::SpoofedSource {
                        signer: Box::new(signer),
                        source_peer: Box::new(self.source),
                    });
                }
                if signer.is_cbid() && !v.cert_matches_id {
                    return Err(DatagramError::CertNotForPeer(Box::new(signer)));
                }
                true
            }
            None if require_cbjx => return Err(DatagramError::MissingTrailer),
            None => false,
        };
        Ok(Datagram {
            to: self.to,
            source: self.source,
            message: self.message,
            signed,
        })
    }
}

/// Decodes and checks one received datagram. `Ok(None)`: the datagram is
/// `local`'s own (looped back), to be ignored. A trailer, when present, is
/// always verified; `require_cbjx` also refuses datagrams without one.
pub fn decode_datagram(
    buf: Bytes,
    local: &PeerId,
    require_cbjx: bool,
    verifier: &mut CbjxVerifier,
) -> Result<Option<Datagram>, DatagramError> {
    let p = parse(buf)?;
    if &p.source == local {
        return Ok(None);
    }
    p.verify(require_cbjx, verifier).map(Some)
}

/// The multicast socket of a peer. Get it with [`crate::Peer::multicast`].
pub struct Multicast {
    socket: UdpSocket,
    cfg: MulticastConfig,
    conn: ConnectionConfig,
    identity: Arc<Identity>,
    /// Where announcements go when LAN discovery runs ([`crate::lan`]).
    lan: std::sync::OnceLock<crate::lan::LanTap>,
}

impl std::fmt::Debug for Multicast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multicast")
            .field("group", &self.cfg.group)
            .field("interface", &self.cfg.interface)
            .finish_non_exhaustive()
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> MulticastError {
    let what = what.into();
    move |source| MulticastError::Io { what, source }
}

impl Multicast {
    /// Opens the socket: `SO_REUSEADDR`/`SO_REUSEPORT` (several peers on one
    /// host share the port), bound to the group's port, joined to the group
    /// on the configured interface, which is also the sending interface.
    /// Must run inside a tokio runtime.
    pub(crate) fn bind(
        cfg: MulticastConfig,
        conn: ConnectionConfig,
        identity: Arc<Identity>,
    ) -> Result<Multicast, MulticastError> {
        let group = *cfg.group.ip();
        if !group.is_multicast() {
            return Err(MulticastError::NotMulticast(group));
        }
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(io_err("creating the multicast socket"))?;
        sock.set_reuse_address(true)
            .map_err(io_err("setting SO_REUSEADDR"))?;
        #[cfg(all(
            unix,
            not(any(target_os = "solaris", target_os = "illumos", target_os = "cygwin"))
        ))]
        sock.set_reuse_port(true)
            .map_err(io_err("setting SO_REUSEPORT"))?;
        sock.set_nonblocking(true)
            .map_err(io_err("making the multicast socket non-blocking"))?;
        // Bound to the group address, the socket receives only this group's
        // datagrams, not every datagram for the port (Windows wants the
        // wildcard address).
        let bind_ip = if cfg!(windows) {
            Ipv4Addr::UNSPECIFIED
        } else {
            group
        };
        let bind = SocketAddrV4::new(bind_ip, cfg.group.port());
        sock.bind(&bind.into())
            .map_err(io_err(format!("binding the multicast socket to {bind}")))?;
        sock.join_multicast_v4(&group, &cfg.interface)
            .map_err(io_err(format!(
                "joining multicast group {group} on interface {}",
                cfg.interface
            )))?;
        if !cfg.interface.is_unspecified() {
            sock.set_multicast_if_v4(&cfg.interface)
                .map_err(io_err(format!(
                    "sending multicast on interface {}",
                    cfg.interface
                )))?;
        }
        sock.set_multicast_ttl_v4(cfg.ttl)
            .map_err(io_err("setting the multicast TTL"))?;
        sock.set_multicast_loop_v4(cfg.loopback)
            .map_err(io_err("setting multicast loopback"))?;
        let socket =
            UdpSocket::from_std(sock.into()).map_err(io_err("registering the multicast socket"))?;
        Ok(Multicast {
            socket,
            cfg,
            conn,
            identity,
            lan: std::sync::OnceLock::new(),
        })
    }

    /// Opens the multicast socket a peer's configuration asks for, if any.
    pub(crate) fn open(
        cfg: &PeerConfig,
        identity: &Arc<Identity>,
    ) -> Result<Option<Arc<Multicast>>, PeerError> {
        let Some(m) = cfg.multicast else {
            return Ok(None);
        };
        let mc = Multicast::bind(m, cfg.connection.clone(), identity.clone()).map_err(|e| {
            let what = format!("multicast on {} via {}", m.group, m.interface);
            match e {
                MulticastError::Io { what: w, source } => PeerError::Io {
                    what: format!("{what}: {w}"),
                    source,
                },
                other => PeerError::Io {
                    what,
                    source: io::Error::new(io::ErrorKind::InvalidInput, other.to_string()),
                },
            }
        })?;
        tracing::info!(group = %m.group, interface = %m.interface, "multicast joined");
        Ok(Some(Arc::new(mc)))
    }

    /// Hands announcements to LAN discovery from now on (once).
    pub(crate) fn set_lan_tap(&self, tap: crate::lan::LanTap) {
        let _ = self.lan.set(tap);
    }

    /// The group datagrams go to and come from.
    pub fn group(&self) -> SocketAddrV4 {
        self.cfg.group
    }

    /// The settings in use.
    pub fn config(&self) -> &MulticastConfig {
        &self.cfg
    }

    /// Sends `msg` to `to` (a service and param in this peer's group,
    /// mangled here as on a connection) at every peer listening on the
    /// group, as one datagram. Returns its size. A message larger than one
    /// datagram is refused with [`DatagramError::TooLarge`].
    pub async fn send(&self, to: &ServiceAddress, msg: Message) -> Result<usize, MulticastError> {
        let to = mangle(&self.conn.group_unique, to);
        let d = encode_datagram(
            &self.identity,
            self.cfg.group,
            &to,
            msg,
            self.conn.cbjx,
            self.conn.hash_order,
        )?;
        let n = self
            .socket
            .send_to(&d, SocketAddr::V4(self.cfg.group))
            .await
            .map_err(io_err(format!("sending to {}", self.cfg.group)))?;
        if n != d.len() {
            return Err(MulticastError::Io {
                what: format!("sending to {}", self.cfg.group),
                source: io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("{n} of {} bytes sent", d.len()),
                ),
            });
        }
        Ok(n)
    }
}

impl crate::Peer {
    /// The multicast transport, when [`PeerConfig::multicast`] is set.
    pub fn multicast(&self) -> Option<&Multicast> {
        self.inner.multicast.as_deref()
    }
}

/// Parsed certificates of recent senders, keyed by the claimed source.
#[derive(Default)]
struct Verifiers(HashMap<PeerId, CbjxVerifier>);

impl Verifiers {
    fn get(&mut self, peer: PeerId) -> &mut CbjxVerifier {
        if self.0.len() >= MAX_CACHED_SENDERS && !self.0.contains_key(&peer) {
            self.0.clear();
        }
        self.0.entry(peer).or_default()
    }
}

/// Starts the receive task of a peer with multicast configured.
pub(crate) fn spawn(inner: &Arc<Inner>) -> Option<JoinHandle<()>> {
    let mc = inner.multicast.clone()?;
    Some(tokio::spawn(receive_loop(Arc::downgrade(inner), mc)))
}

async fn receive_loop(weak: Weak<Inner>, mc: Arc<Multicast>) {
    // One byte more than the limit, so an oversized datagram is seen as
    // such rather than silently cut.
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    let mut verifiers = Verifiers::default();
    let local = *mc.identity.peer_id();
    loop {
        let (n, from) = match mc.socket.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "multicast receive failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(inner) = weak.upgrade() else { return };
        let data = Bytes::copy_from_slice(&buf[..n]);
        let mut to_lan = None;
        let checked = parse(data).and_then(|p| {
            if p.source == local {
                return Ok(None);
            }
            if let Some(tap) = mc.lan.get().filter(|t| t.wants(&p.to)) {
                // Rate-limited before the signature check, the costly part.
                if !tap.admit(from.ip()) {
                    return Ok(None);
                }
                to_lan = Some(tap);
            }
            let v = verifiers.get(p.source);
            p.verify(mc.conn.cbjx, v).map(Some)
        });
        if let Some(tap) = to_lan {
            match checked {
                Ok(Some(d)) => tap.deliver(from, d),
                Ok(None) => {}
                Err(e) => {
                    tap.count_bad();
                    inner
                        .stats
                        .bad_datagrams
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(%from, error = %e, "multicast announcement dropped");
                }
            }
            continue;
        }
        match checked {
            // A full listener queue stalls this loop; the kernel then drops
            // datagrams (as UDP does), the connections still deliver.
            // A datagram is never a proven delivery: a signed datagram can
            // be replayed by anyone on the segment (docs/security.md).
            Ok(Some(d)) => {
                inner
                    .dispatch_from(
                        d.source,
                        juxta_proto::wire::connection::Proof::Claimed,
                        d.to,
                        d.message,
                    )
                    .await
            }
            Ok(None) => tracing::trace!(%from, "own multicast datagram ignored"),
            Err(e) => {
                inner
                    .stats
                    .bad_datagrams
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(%from, len = n, error = %e, "multicast datagram dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::sync::OnceLock;

    fn identity(seed: u64) -> &'static Identity {
        static A: OnceLock<Identity> = OnceLock::new();
        static B: OnceLock<Identity> = OnceLock::new();
        let cell = if seed == 1 { &A } else { &B };
        cell.get_or_init(|| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            Identity::generate(&mut rng, 1024, "JuxtaMcastTest", 1_700_000_000).unwrap()
        })
    }

    fn group() -> SocketAddrV4 {
        "224.0.1.85:1234".parse().unwrap()
    }

    fn to() -> ServiceAddress {
        mangle(
            "jxta-NetGroup",
            &ServiceAddress::new(
                "PipeService",
                Some("urn:jxta:cbid-59616261646162614E50472050325033FB13C4EF50E149519865DF4CF007791604"),
            ),
        )
    }

    fn msg(n: usize) -> Message {
        Message::new()
            .with(Element::text("", "text", "hello"))
            .with(Element::bytes("juxta", "PropagateId", vec![7u8; 16]))
            .with(Element::bytes("test", "data", vec![0x5au8; n]))
    }

    fn encode(id: &Identity, m: Message, cbjx: bool) -> Result<Bytes, DatagramError> {
        encode_datagram(id, group(), &to(), m, cbjx, JavaHashOrder::Java8)
    }

    fn decode(b: Bytes, cbjx: bool) -> Result<Option<Datagram>, DatagramError> {
        decode_datagram(b, identity(2).peer_id(), cbjx, &mut CbjxVerifier::new())
    }

    #[test]
    fn round_trip_signed_and_unsigned() {
        let a = identity(1);
        for cbjx in [true, false] {
            let d = encode(a, msg(100), cbjx).unwrap();
            assert!(d.len() <= MAX_DATAGRAM);
            let got = decode(d.clone(), cbjx).unwrap().unwrap();
            assert_eq!(&got.source, a.peer_id());
            assert_eq!(got.to, to());
            assert_eq!(got.signed, cbjx);
            // Address elements and the loop-detection header are removed.
            assert_eq!(got.message.elements, msg(100).elements);
            // A signed datagram is accepted where CBJX is off, too.
            assert!(decode(d, false).unwrap().is_some());
        }
        // An unsigned one is refused where CBJX is on.
        let d = encode(a, msg(1), false).unwrap();
        assert_eq!(decode(d, true).unwrap_err(), DatagramError::MissingTrailer);
    }

    #[test]
    fn layout_is_jxse_mcast() {
        let a = identity(1);
        let d = encode(a, msg(3), true).unwrap();
        assert_eq!(&d[..4], b"JXTA");
        // content-type first, then content-length, as McastTransport writes.
        assert_eq!(d[4], 12);
        assert_eq!(&d[5..17], b"content-type");
        assert_eq!(&d[19..41], CONTENT_TYPE_JXTA_MSG.as_bytes());
        assert_eq!(d[41], 14);
        assert_eq!(&d[42..56], b"content-length");
        let len = u64::from_be_bytes(d[58..66].try_into().unwrap()) as usize;
        assert_eq!(d[66], 0);
        let body = d.slice(67..);
        // content-length excludes the trailer (JXSE's getByteLength()).
        let decoded = decode_v0(body.clone()).unwrap();
        assert_eq!(len, decoded.elements_end);
        assert!(len < body.len());
        let m = decoded.message;
        let text = |name| m.get(NS_JXTA, name).unwrap().as_str().unwrap().to_string();
        assert_eq!(text(ELEM_SRC_PEER), a.peer_id().to_string());
        assert_eq!(text(ELEM_SOURCE_ADDRESS), a.peer_id().endpoint_address());
        assert_eq!(
            text(ELEM_DEST_ADDRESS),
            format!(
                "mcast://224.0.1.85:1234/EndpointService:jxta-NetGroup/{}",
                to().param.unwrap()
            )
        );
        // Element order: application elements, src peer, source, destination.
        let names: Vec<&str> = m.elements.iter().map(|e| &*e.name).collect();
        assert_eq!(
            &names[3..],
            [ELEM_SRC_PEER, ELEM_SOURCE_ADDRESS, ELEM_DEST_ADDRESS]
        );
        // A receiver that takes content-length to include the trailer works
        // too (the whole rest of the datagram is read either way).
        let mut alt = d.to_vec();
        alt[58..66].copy_from_slice(&(body.len() as u64).to_be_bytes());
        assert!(decode(Bytes::from(alt), true).unwrap().is_some());
    }

    #[test]
    fn own_datagrams_are_ignored() {
        let a = identity(1);
        let d = encode(a, msg(10), true).unwrap();
        let r = decode_datagram(d, a.peer_id(), true, &mut CbjxVerifier::new());
        assert!(r.unwrap().is_none());
    }

    #[test]
    fn oversize() {
        let a = identity(1);
        // Too large before signing.
        let e = encode(a, msg(MAX_DATAGRAM), true).unwrap_err();
        assert!(
            matches!(e, DatagramError::TooLarge { len, max: MAX_DATAGRAM } if len > MAX_DATAGRAM)
        );
        // Fits unsigned, not with the trailer.
        let unsigned = encode(a, msg(0), false).unwrap().len();
        let room = MAX_DATAGRAM - unsigned;
        assert_eq!(encode(a, msg(room), false).unwrap().len(), MAX_DATAGRAM);
        assert!(matches!(
            encode(a, msg(room), true),
            Err(DatagramError::TooLarge { .. })
        ));
        assert!(matches!(
            encode(a, msg(room + 1), false),
            Err(DatagramError::TooLarge { .. })
        ));
        // A received datagram over the limit is refused.
        let mut big = encode(a, msg(room), false).unwrap().to_vec();
        big.push(0);
        assert_eq!(
            decode(Bytes::from(big), false).unwrap_err(),
            DatagramError::TooLarge {
                len: MAX_DATAGRAM + 1,
                max: MAX_DATAGRAM
            }
        );
    }

    #[test]
    fn garbage_is_a_typed_error() {
        assert_eq!(
            decode(Bytes::new(), true).unwrap_err(),
            DatagramError::BadMagic
        );
        assert_eq!(
            decode(Bytes::from_static(b"JXT"), true).unwrap_err(),
            DatagramError::BadMagic
        );
        assert_eq!(
            decode(Bytes::from_static(b"HTTP/1.1 200 OK\r\n"), true).unwrap_err(),
            DatagramError::BadMagic
        );
        assert_eq!(
            decode(Bytes::from_static(b"JXTA"), true).unwrap_err(),
            DatagramError::TruncatedHeader
        );
        // Header without content-length.
        assert_eq!(
            decode(Bytes::from_static(b"JXTA\0jxmg"), true).unwrap_err(),
            DatagramError::Header(FrameError::MissingLength)
        );
        // content-length larger than the datagram.
        let mut b = b"JXTA".to_vec();
        b.extend_from_slice(&encode_header(100));
        b.extend_from_slice(b"jxmg\0");
        assert_eq!(
            decode(Bytes::from(b), true).unwrap_err(),
            DatagramError::ContentLength {
                announced: 100,
                available: 5
            }
        );
        // A body that is not a message.
        let mut b = b"JXTA".to_vec();
        b.extend_from_slice(&encode_header(8));
        b.extend_from_slice(b"xxxxxxxx");
        assert_eq!(
            decode(Bytes::from(b), true).unwrap_err(),
            DatagramError::Message(MessageError::BadMagic)
        );
        // A message without address elements.
        let body = encode_v0(&msg(1), JavaHashOrder::Java8).unwrap().to_bytes();
        let mut b = b"JXTA".to_vec();
        b.extend_from_slice(&encode_header(body.len() as u64));
        b.extend_from_slice(&body);
        assert_eq!(
            decode(Bytes::from(b), false).unwrap_err(),
            DatagramError::NoSource
        );
        // Random bytes after a valid prefix never panic.
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let good = encode(identity(1), msg(40), true).unwrap();
        for _ in 0..2000 {
            let cut = rand::Rng::gen_range(&mut rng, 0..good.len());
            let mut t = good[..cut].to_vec();
            let extra = rand::Rng::gen_range(&mut rng, 0..40);
            t.extend((0..extra).map(|_| rand::Rng::gen::<u8>(&mut rng)));
            assert!(decode(Bytes::from(t), true).is_err());
        }
    }

    #[test]
    fn truncated_and_tampered() {
        let a = identity(1);
        let d = encode(a, msg(50), true).unwrap();
        // Every truncation is an error, never a panic or a success.
        for cut in 0..d.len() {
            assert!(decode(d.slice(..cut), true).is_err(), "cut at {cut}");
        }
        // Flipping any byte after the header breaks the signature or parse.
        for i in 67..d.len() {
            let mut t = d.to_vec();
            t[i] ^= 0x20;
            assert!(decode(Bytes::from(t), true).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn spoofed_source_is_refused() {
        let a = identity(1);
        let b = identity(2);
        // a signs a datagram whose source element names b.
        let mut m = msg(5);
        let dest = format!(
            "mcast://224.0.1.85:1234/{}/{}",
            to().service,
            to().param.unwrap()
        );
        m.push(Element::text(
            NS_JXTA,
            ELEM_SOURCE_ADDRESS,
            &b.peer_id().endpoint_address(),
        ));
        m.push(Element::text(NS_JXTA, ELEM_DEST_ADDRESS, &dest));
        let body = encode_v0(&m, JavaHashOrder::Java8).unwrap();
        let trailer = cbjx::trailer_for(a, &body.chunks);
        let mut dg = b"JXTA".to_vec();
        dg.extend_from_slice(&encode_header(body.len as u64));
        dg.extend_from_slice(&body.to_bytes());
        dg.extend_from_slice(&trailer);
        // Received by a third peer: refused, whatever CBJX requires.
        let third: PeerId = "urn:jxta:cbid-59616261646162614A7874615032503301AB03"
            .parse()
            .unwrap();
        for require in [true, false] {
            let e = decode_datagram(
                Bytes::from(dg.clone()),
                &third,
                require,
                &mut CbjxVerifier::new(),
            )
            .unwrap_err();
            assert!(
                matches!(&e, DatagramError::SpoofedSource { signer, source_peer }
                    if **signer == *a.peer_id() && **source_peer == *b.peer_id()),
                "{e}"
            );
        }
    }
}
