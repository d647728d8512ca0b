//! Secure pipes (`JxtaUnicastSecure`): a TLS 1.3 session (rustls) between
//! the output pipe's peer and the input pipe's peer, its records carried as
//! ordinary messages to the `JuxtaTls` service over the existing connection
//! (which is already reliable and ordered). Each side proves its peer ID
//! with its own certificate, so a message on a secure input pipe comes from
//! the peer ID it names, checked cryptographically.
//!
//! Session messages: `JuxtaTls/<session id>` with element `juxta:tls`
//! (TLS bytes); the client's first message also names the pipe
//! (`juxta:pipe`). Inside the session, each application message is a
//! 4-byte big-endian length and the message: in binary format v0, or in
//! the compact framing when both ends agreed on it (below).
//!
//! Inner encoding: the client's first message offers the compact framing
//! (`juxta:inner` = [`INNER_COMPACT`]) and a server that knows it echoes
//! the element in its reply to that message (the one carrying the
//! ServerHello); the client encodes compactly only once it saw the echo
//! (application data waits for the handshake, so the echo always comes
//! first), and a server that never echoed decodes binary v0. The compact
//! framing ([`juxta_proto::wire::compact`]) interns element names once per
//! session, with small tables ([`INNER_LIMITS`]): a 1-byte message is a
//! few bytes instead of v0's header, namespace table and element header,
//! and encoding and decoding it cost a fraction of v0's. An older Juxta
//! peer neither offers nor echoes, and speaks v0 as before.
//!
//! Data path: an application message is encrypted into 16 KiB records
//! straight from its encoded buffers ([`SecureChannel::seal_into`], into a
//! buffer the session reuses) and sent as one `JuxtaTls` message (one per
//! 4 MiB of plaintext); the receiving peer decrypts it on the
//! connection's reader task, straight from the received bytes into a
//! reused plaintext buffer, decodes the message from there without a copy
//! and hands it to the secure input pipe (see [`super::tls`], "Record
//! layer").
//!
//! JXSE 2.7's secure pipes run its own TLS transport (JSSE TLSv1 over its
//! reliable stream, `jxtatls://` addresses); rustls has no TLS 1.0, so the
//! two do not interoperate (see `docs/interop.md`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use juxta_proto::advertisement::PipeAdvertisement;
use juxta_proto::endpoint::{Delivery, ServiceAddress};
use juxta_proto::id::{PeerId, PipeId};
use juxta_proto::message::codec::EncodedMessage;
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{decode_v0, encode_v0, Element, Message};
use juxta_proto::wire::compact::{CompactDecoder, CompactEncoder, TableLimits};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use super::output::NS_JUXTA;
use super::tls::{self, SecureChannel, TlsError};
use super::{PipeError, PIPE_SERVICE};
use crate::endpoint::Messenger;
use crate::peer::{Inner, PeerError};

/// Endpoint service carrying TLS records.
pub const TLS_SERVICE: &str = "JuxtaTls";
const ELEM_TLS: &str = "tls";
const ELEM_PIPE: &str = "pipe";
/// Offered by the client, echoed by the server: the inner messages are
/// compact frames (value [`INNER_COMPACT`]).
const ELEM_INNER: &str = "inner";
/// The inner encoding offered: the compact framing with [`INNER_LIMITS`].
pub const INNER_COMPACT: &str = "compact-1";
/// The intern tables of a session's inner compact framing, per direction:
/// small, so a full session table costs tens of KiB, not the MiB a
/// connection's may (a peer holds up to [`MAX_SESSIONS`] sessions).
pub const INNER_LIMITS: TableLimits = TableLimits {
    entries: 64,
    bytes: 8 * 1024,
};
/// Sent by the client when its output pipe closes: the server forgets the
/// session.
const ELEM_CLOSE: &str = "close";
/// TLS bytes taken from a session at once during the handshake.
const CHUNK: usize = 256 * 1024;
/// Most plaintext sealed into one `JuxtaTls` message: 16 records (256
/// KiB). A larger message goes as several, each sent as soon as it is
/// sealed, so that on two cores the receiver decrypts one while the next
/// is sealed (encryption, the transfer and decryption overlap instead of
/// running one after the other for the whole message).
const WIRE_PLAIN: usize = 16 * tls::MAX_RECORD_PLAINTEXT;
/// Largest application message inside a session.
const MAX_INNER: usize = 64 * 1024 * 1024;
/// Most TLS sessions a peer keeps.
const MAX_SESSIONS: usize = 1024;
/// Most secure sessions one peer may hold here at once (each costs a TLS
/// handshake's CPU and a session's buffers): one peer cannot take the
/// whole table.
pub(crate) const MAX_SESSIONS_PER_PEER: usize = 64;

/// Session table key: the remote peer and the client-chosen session id.
type Key = (PeerId, u64);

enum Role {
    Client {
        ready: Arc<Notify>,
    },
    Server {
        pipe: PipeId,
        plain: BytesMut,
        /// The pipe's delivery address, built once.
        to: Arc<ServiceAddress>,
        /// The input pipe's queue, found when the session began (looked up
        /// again only when it has closed: the pipe may have been opened
        /// anew).
        sink: mpsc::Sender<Delivery>,
        /// The inner messages' decoder, when the client offered compact
        /// frames (and so was told we accept them); binary v0 otherwise.
        compact: Option<Box<CompactDecoder>>,
        /// The echo of the offer is still to be sent (with the first reply).
        echo: bool,
    },
}

struct Session {
    chan: SecureChannel,
    role: Role,
    failed: Option<String>,
    /// Client: the handshake is done and our last flight has been sent.
    established: bool,
    /// Client: the server echoed our offer of compact inner frames.
    compact_accepted: bool,
}

/// The per-peer table of TLS sessions and the task that feeds them.
#[derive(Default)]
pub(crate) struct Sessions {
    /// Keyed by the proven peer and a session id it chose: a randomly
    /// keyed hash (ahash), so chosen ids cannot be made to collide.
    map: Mutex<HashMap<Key, Arc<Mutex<Session>>, juxta_proto::id::IdHashState>>,
    /// This peer's TLS configurations, built on first use.
    client_cfg: OnceLock<Arc<rustls::ClientConfig>>,
    server_cfg: OnceLock<Arc<rustls::ServerConfig>>,
    /// Tests: behave as a peer from before compact inner frames (neither
    /// offer them nor echo an offer).
    #[cfg(test)]
    v0_only: std::sync::atomic::AtomicBool,
}

impl Sessions {
    /// Whether this peer offers and accepts compact inner frames.
    fn compact_inner(&self) -> bool {
        #[cfg(test)]
        if self.v0_only.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        true
    }
}

pub(crate) fn client_cfg(inner: &Inner) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    if let Some(c) = inner.secure.client_cfg.get() {
        return Ok(c.clone());
    }
    let c = tls::client_config(&inner.identity)?;
    Ok(inner.secure.client_cfg.get_or_init(|| c).clone())
}

pub(crate) fn server_cfg(inner: &Inner) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    if let Some(c) = inner.secure.server_cfg.get() {
        return Ok(c.clone());
    }
    let c = tls::server_config(&inner.identity)?;
    Ok(inner.secure.server_cfg.get_or_init(|| c).clone())
}

/// The sending side of a secure pipe: a TLS client session to the peer
/// holding the input pipe.
pub struct SecureSession {
    inner: Arc<Inner>,
    key: Key,
    session: Arc<Mutex<Session>>,
    messenger: Messenger,
    param: String,
    /// Held while sending, so messages go out in order.
    send_lock: tokio::sync::Mutex<SendState>,
}

/// What a client session keeps from one message to the next.
struct SendState {
    /// The buffer records are sealed into, kept at its full length (every
    /// byte initialized) and reused once the connection let go of the
    /// slice it sent (no fresh memory, so no page faults, per message).
    pool: Bytes,
    /// The inner messages' encoder, once the server accepted compact
    /// frames, and the address it encodes for (the input pipe's).
    compact: Option<(CompactEncoder, ServiceAddress)>,
}

impl Drop for SecureSession {
    fn drop(&mut self) {
        self.inner
            .secure
            .map
            .lock()
            .expect("sessions lock")
            .remove(&self.key);
        let m = self.messenger.clone();
        let param = self.param.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let bye = Message::new().with(Element::text(NS_JUXTA, ELEM_CLOSE, "close"));
                let _ = m.send(TLS_SERVICE, Some(&param), bye).await;
            });
        }
    }
}

impl Sessions {
    /// Makes room for a new session: forgets sessions whose peer is no
    /// longer connected; fails if the table is still full.
    fn insert(&self, inner: &Inner, key: Key, s: Arc<Mutex<Session>>) -> Result<(), TlsError> {
        let mut m = self.map.lock().expect("sessions lock");
        if m.len() >= MAX_SESSIONS {
            let live = inner.connected_peers();
            m.retain(|(peer, _), _| live.contains(peer));
        }
        if m.len() >= MAX_SESSIONS {
            return Err(TlsError::TooManySessions(MAX_SESSIONS));
        }
        if m.keys().filter(|(p, _)| *p == key.0).count() >= MAX_SESSIONS_PER_PEER {
            inner
                .stats
                .secure_sessions_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(TlsError::TooManySessions(MAX_SESSIONS_PER_PEER));
        }
        m.insert(key, s);
        Ok(())
    }
}

impl SecureSession {
    pub(crate) async fn connect(
        inner: &Arc<Inner>,
        adv: &PipeAdvertisement,
        peer: PeerId,
        timeout: Duration,
    ) -> Result<Arc<SecureSession>, PipeError> {
        let messenger = inner
            .messenger(&peer)
            .ok_or_else(|| PipeError::NotConnected(peer.to_string()))?;
        let chan = SecureChannel::client(client_cfg(inner)?, peer)?;
        let ready = Arc::new(Notify::new());
        let id: u64 = rand::random();
        let key = (peer, id);
        let session = Arc::new(Mutex::new(Session {
            chan,
            role: Role::Client {
                ready: ready.clone(),
            },
            failed: None,
            established: false,
            compact_accepted: false,
        }));
        inner.secure.insert(inner, key, session.clone())?;
        let s = Arc::new(SecureSession {
            inner: inner.clone(),
            key,
            session,
            messenger,
            param: format!("{id:016x}"),
            send_lock: tokio::sync::Mutex::new(SendState {
                pool: Bytes::new(),
                compact: None,
            }),
        });
        let hello = s.take_outgoing()?;
        let mut first = Message::new();
        first.push(Element::text(NS_JUXTA, ELEM_PIPE, &adv.id.to_string()));
        if inner.secure.compact_inner() {
            first.push(Element::text(NS_JUXTA, ELEM_INNER, INNER_COMPACT));
        }
        for b in hello {
            first.push(Element::bytes_static(NS_JUXTA, ELEM_TLS, b));
        }
        s.messenger.send(TLS_SERVICE, Some(&s.param), first).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        let compact = loop {
            let notified = ready.notified();
            {
                let g = s.session.lock().expect("session lock");
                if let Some(f) = &g.failed {
                    return Err(PipeError::Tls(TlsError::Failed(f.clone())));
                }
                if g.established {
                    break g.compact_accepted;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(PipeError::ResolveTimeout {
                    pipe: adv.id.to_string(),
                    timeout,
                });
            }
        };
        if compact {
            s.send_lock.lock().await.compact = Some((
                CompactEncoder::new().with_limits(INNER_LIMITS),
                ServiceAddress::new(PIPE_SERVICE, Some(&adv.id.to_string())),
            ));
        }
        Ok(s)
    }

    /// Whether this session's inner messages are compact frames (the
    /// server accepted the offer).
    #[cfg(test)]
    async fn is_compact(&self) -> bool {
        self.send_lock.lock().await.compact.is_some()
    }

    /// The peer at the other end, proven by its certificate.
    pub fn remote(&self) -> PeerId {
        self.key.0
    }

    fn take_outgoing(&self) -> Result<Vec<Bytes>, TlsError> {
        let mut g = self.session.lock().expect("session lock");
        let mut out = Vec::new();
        while let Some(b) = g.chan.take_tls(CHUNK * 2) {
            out.push(Bytes::from(b));
        }
        Ok(out)
    }

    /// Encrypts and sends one message: the length prefix and the encoded
    /// message are encrypted straight from the message's buffers into one
    /// outgoing buffer (records of 16 KiB, [`SecureChannel::seal_into`]) and sent as
    /// one `JuxtaTls` message per [`WIRE_PLAIN`] bytes of plaintext (256
    /// KiB), each sent before the next is sealed.
    pub(crate) async fn send(&self, msg: Message) -> Result<usize, PipeError> {
        let mut state = self.send_lock.lock().await;
        let enc = match &mut state.compact {
            Some((enc, to)) => {
                CompactEncoder::check(&msg).map_err(|e| {
                    PipeError::Tls(TlsError::Failed(format!("cannot encode message: {e}")))
                })?;
                // Refused before encoding: the encoder's tables must not
                // learn a name from a frame that is never sent.
                let bound = compact_bound(&msg);
                if bound > MAX_INNER {
                    return Err(PipeError::Tls(TlsError::Failed(format!(
                        "message of up to {bound} bytes exceeds {MAX_INNER}"
                    ))));
                }
                let mut out = EncodedMessage::default();
                enc.encode(to, &msg, &mut out);
                out
            }
            None => encode_v0(&msg, JavaHashOrder::Java8).map_err(|e| {
                PipeError::Tls(TlsError::Failed(format!("cannot encode message: {e}")))
            })?,
        };
        if enc.len > MAX_INNER {
            return Err(PipeError::Tls(TlsError::Failed(format!(
                "message of {} bytes exceeds {MAX_INNER}",
                enc.len
            ))));
        }
        let len = (enc.len as u32).to_be_bytes();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(enc.chunks.len() + 1);
        parts.push(&len);
        parts.extend(enc.chunks.iter().map(|c| &c[..]));
        let pool = &mut state.pool;
        let mut wire = 0;
        // Split only messages over WIRE_PLAIN (no allocation for the rest).
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let split = (total > WIRE_PLAIN).then(|| groups(&parts, WIRE_PLAIN));
        for i in 0..split.as_ref().map_or(1, |s| s.len()) {
            let group: &[&[u8]] = match &split {
                Some(s) => &s[i],
                None => &parts,
            };
            let sealed = {
                let mut g = self.session.lock().expect("session lock");
                if let Some(f) = &g.failed {
                    return Err(PipeError::Tls(TlsError::Failed(f.clone())));
                }
                let size = tls::sealed_len(group) + g.chan.pending_tls();
                let mut buf = match std::mem::take(pool).try_into_mut() {
                    Ok(b) if b.len() >= size => b,
                    _ => BytesMut::zeroed(size),
                };
                let n = g.chan.seal_into(group, &mut buf);
                let full = buf.freeze();
                let sealed = n.map(|n| full.slice(..n));
                *pool = full;
                sealed?
            };
            let m = Message::new().with(Element::bytes_static(NS_JUXTA, ELEM_TLS, sealed));
            wire += self
                .messenger
                .send(TLS_SERVICE, Some(&self.param), m)
                .await?;
        }
        Ok(wire)
    }
}

/// An upper bound on a message's compact encoding: per element its
/// payload, its names and at most 64 bytes of tags, ids, lengths and
/// definition headers; 256 bytes for the frame's prefix and its channel.
fn compact_bound(msg: &Message) -> usize {
    msg.elements.iter().fold(256usize, |n, e| {
        n.saturating_add(e.data.len())
            .saturating_add(e.namespace.len() + e.name.len())
            .saturating_add(e.mime.as_ref().map_or(0, |m| m.len()) + 64)
    })
}

/// Splits `parts` into consecutive groups of at most `max` bytes each.
fn groups<'a>(parts: &[&'a [u8]], max: usize) -> Vec<Vec<&'a [u8]>> {
    let mut out = Vec::new();
    let mut cur: Vec<&'a [u8]> = Vec::new();
    let mut room = max;
    for &p in parts {
        let mut p = p;
        while !p.is_empty() {
            let k = p.len().min(room);
            cur.push(&p[..k]);
            p = &p[k..];
            room -= k;
            if room == 0 {
                out.push(std::mem::take(&mut cur));
                room = max;
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Starts the task that receives TLS records for every session of a peer.
pub(crate) fn spawn(inner: &Arc<Inner>) -> Result<JoinHandle<()>, PeerError> {
    let mut l = inner.add_listener(ServiceAddress::new(TLS_SERVICE, None))?;
    let weak = Arc::downgrade(inner);
    Ok(tokio::spawn(async move {
        while let Some(d) = l.recv_delivery().await {
            let Some(inner) = weak.upgrade() else { return };
            if let Err(e) = on_records(&inner, d).await {
                tracing::debug!(error = %e, "secure pipe records dropped");
            }
        }
    }))
}

/// Handles a `JuxtaTls` message on the connection's reader task (no queue
/// and no task switch on the data path); replies are written without
/// waiting (a task finishes them when the connection is busy), so the
/// reader never blocks on its own connection's writer.
pub(crate) async fn on_records_direct(inner: &Inner, d: Delivery) {
    if let Err(e) = on_records(inner, d).await {
        tracing::debug!(error = %e, "secure pipe records dropped");
    }
}

async fn on_records(inner: &Inner, mut d: Delivery) -> Result<(), TlsError> {
    let from = d
        .from
        .ok_or_else(|| TlsError::Failed("records from an unknown peer".into()))?;
    let sid =
        d.to.param
            .as_deref()
            .and_then(|p| u64::from_str_radix(p, 16).ok())
            .ok_or_else(|| TlsError::Failed("records without a session id".into()))?;
    let key = (from, sid);
    if d.message.get(NS_JUXTA, ELEM_CLOSE).is_some() {
        inner.secure.map.lock().expect("sessions lock").remove(&key);
        return Ok(());
    }
    // The client's offer, or the server's echo of it.
    let echoed = inner_compact(&d.message);
    let existing = inner
        .secure
        .map
        .lock()
        .expect("sessions lock")
        .get(&key)
        .cloned();
    let session = match existing {
        Some(s) => s,
        None => {
            // A new session: only for a secure input pipe open here.
            let pipe: PipeId = d
                .message
                .get(NS_JUXTA, ELEM_PIPE)
                .and_then(|e| e.as_str())
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| TlsError::Failed("new session without a pipe".into()))?;
            let sink = inner
                .pipes
                .secure_sink(&pipe)
                .ok_or_else(|| TlsError::Failed(format!("no secure input pipe {pipe}")))?;
            let offered = echoed && inner.secure.compact_inner();
            let s = Arc::new(Mutex::new(Session {
                chan: SecureChannel::server(server_cfg(inner)?)?,
                role: Role::Server {
                    to: Arc::new(ServiceAddress::new(PIPE_SERVICE, Some(&pipe.to_string()))),
                    pipe,
                    plain: BytesMut::new(),
                    sink,
                    compact: offered
                        .then(|| Box::new(CompactDecoder::new().with_limits(INNER_LIMITS))),
                    echo: offered,
                },
                failed: None,
                established: false,
                compact_accepted: false,
            }));
            inner.secure.insert(inner, key, s.clone())?;
            s
        }
    };
    let (replies, echo, messages, pipe, notify) = {
        let mut g = session.lock().expect("session lock");
        let mut res = Ok(());
        for e in std::mem::take(&mut d.message.elements)
            .into_iter()
            .filter(|e| e.name == ELEM_TLS && e.namespace == NS_JUXTA)
        {
            // By value: decrypted in place when the buffer is ours alone.
            res = g.chan.read_tls_bytes(e.data);
            if res.is_err() {
                break;
            }
        }
        if let Err(e) = res {
            g.failed = Some(e.to_string());
            if let Role::Client { ready } = &g.role {
                ready.notify_waiters();
            }
            drop(g);
            inner.secure.map.lock().expect("sessions lock").remove(&key);
            return Err(e);
        }
        let mut replies = Vec::new();
        while let Some(b) = g.chan.take_tls(CHUNK * 2) {
            replies.push(Bytes::from(b));
        }
        let handshaking = g.chan.is_handshaking();
        let peer = g.chan.peer_id();
        // The session must be with the peer at the other end of the
        // connection it arrived on (no tunnelling another identity).
        if let Some(p) = peer.filter(|p| *p != from) {
            drop(g);
            inner.secure.map.lock().expect("sessions lock").remove(&key);
            return Err(TlsError::PeerMismatch {
                expected: Box::new(from),
                presented: Box::new(p),
            });
        }
        let Session {
            chan,
            role,
            compact_accepted,
            established,
            ..
        } = &mut *g;
        let mut messages = Vec::new();
        let mut pipe = None;
        let mut notify = None;
        let mut echo = false;
        match role {
            Role::Client { ready } => {
                // Only before the session is established: application
                // data never changes its encoding.
                if echoed && !*established {
                    *compact_accepted = true;
                }
                if !handshaking {
                    // Woken after our last handshake flight is on the wire:
                    // application records must not overtake it.
                    notify = Some(ready.clone());
                }
                // Nothing travels server → client but handshake data.
                while chan.take_plaintext().is_some() {}
            }
            Role::Server {
                pipe: p,
                plain,
                to,
                sink,
                compact,
                echo: pending_echo,
            } => {
                if *pending_echo && !replies.is_empty() {
                    echo = true;
                    *pending_echo = false;
                }
                while let Some(mut b) = chan.take_plaintext() {
                    if plain.is_empty() {
                        // The usual case: whole messages, decoded from
                        // the decrypted buffer without a copy.
                        while b.len() >= 4 {
                            let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                            if n > MAX_INNER {
                                return Err(TlsError::Failed(format!(
                                    "inner message of {n} bytes"
                                )));
                            }
                            if b.len() < 4 + n {
                                break;
                            }
                            b.advance(4);
                            messages.push(decode_inner(compact, b.split_to(n))?);
                        }
                    }
                    plain.extend_from_slice(&b);
                }
                while plain.len() >= 4 {
                    let n = u32::from_be_bytes([plain[0], plain[1], plain[2], plain[3]]) as usize;
                    if n > MAX_INNER {
                        return Err(TlsError::Failed(format!("inner message of {n} bytes")));
                    }
                    if plain.len() < 4 + n {
                        plain.reserve(4 + n - plain.len());
                        break;
                    }
                    plain.advance(4);
                    let body = plain.split_to(n).freeze();
                    messages.push(decode_inner(compact, body)?);
                }
                if !messages.is_empty() {
                    pipe = Some((*p, peer, to.clone(), sink.clone()));
                }
            }
        }
        (replies, echo, messages, pipe, notify)
    };
    // Client: established once our last flight is on the wire (or handed
    // to the task writing it): application records must not overtake it.
    let established = {
        let waiter = notify.map(|ready| (ready, session.clone()));
        move || {
            if let Some((ready, session)) = waiter {
                session.lock().expect("session lock").established = true;
                ready.notify_waiters();
            }
        }
    };
    match (!replies.is_empty())
        .then(|| inner.messenger(&from))
        .flatten()
    {
        Some(m) => {
            let mut msg = Message::new();
            if echo {
                msg.push(Element::text(NS_JUXTA, ELEM_INNER, INNER_COMPACT));
            }
            for b in replies {
                msg.push(Element::bytes_static(NS_JUXTA, ELEM_TLS, b));
            }
            let param = format!("{sid:016x}");
            match m.try_send(TLS_SERVICE, Some(&param), msg) {
                Ok(Err(msg)) => {
                    tokio::spawn(async move {
                        let _ = m.send(TLS_SERVICE, Some(&param), msg).await;
                        established();
                    });
                }
                Ok(Ok(_)) | Err(_) => established(),
            }
        }
        None => established(),
    }
    let Some((pipe, peer, to, mut sink)) = pipe else {
        return Ok(());
    };
    for message in messages {
        let mut d = Delivery {
            vouched_in: None,
            group: None,
            to: to.clone(),
            from: peer,
            message,
            routed: false,
            // The TLS handshake verified a certificate deriving `peer`
            // (the input pipe reports it as `Verified::Certificate`).
            proof: if peer.is_some() {
                juxta_proto::wire::connection::Proof::Handshake
            } else {
                juxta_proto::wire::connection::Proof::Claimed
            },
        };
        loop {
            match crate::peer::hand_to(&sink, d).await {
                Ok(()) => break,
                // The pipe closed: it may have been opened again since.
                Err(back) => {
                    let fresh = inner
                        .pipes
                        .secure_sink(&pipe)
                        .filter(|s| !s.same_channel(&sink))
                        .ok_or_else(|| {
                            TlsError::Failed(format!("secure input pipe {pipe} closed"))
                        })?;
                    if let Role::Server { sink: kept, .. } =
                        &mut session.lock().expect("session lock").role
                    {
                        *kept = fresh.clone();
                    }
                    sink = fresh;
                    d = back;
                }
            }
        }
    }
    Ok(())
}

/// Whether `m` offers (client) or accepts (server) compact inner frames.
fn inner_compact(m: &Message) -> bool {
    m.get(NS_JUXTA, ELEM_INNER)
        .and_then(|e| e.as_str())
        .is_some_and(|v| v == INNER_COMPACT)
}

/// Decodes one inner message: a compact frame when the session agreed on
/// them, binary v0 otherwise.
fn decode_inner(
    compact: &mut Option<Box<CompactDecoder>>,
    body: Bytes,
) -> Result<Message, TlsError> {
    match compact {
        Some(dec) => dec
            .decode_frame(body, MAX_INNER as u64)
            .map(|(_, m)| m)
            .map_err(|e| TlsError::Failed(format!("bad inner message: {e}"))),
        None => decode_v0(body)
            .map(|m| m.message)
            .map_err(|e| TlsError::Failed(format!("bad inner message: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Peer, PeerConfig};
    use juxta_proto::advertisement::PipeType;

    const WAIT: Duration = Duration::from_secs(60);

    /// A peer with a 2048-bit key (TLS needs one), listening on loopback
    /// or not, its input queues holding `queue` deliveries.
    async fn peer(dir: &tempfile::TempDir, name: &str, listen: bool, queue: usize) -> Peer {
        let mut c = PeerConfig::new(dir.path().join(name));
        if listen {
            c = c.listen("127.0.0.1:0".parse().unwrap());
        }
        c.key_bits = 2048;
        c.listener_queue = queue;
        Peer::start(c).await.unwrap()
    }

    async fn recv(input: &mut crate::pipe::InputPipe) -> String {
        let d = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        d.message
            .get("test", "data")
            .and_then(|e| e.as_str())
            .unwrap()
            .to_string()
    }

    fn text(t: &str) -> Message {
        Message::new().with(Element::text("test", "data", t))
    }

    /// Peer `a` (listening, input queue of `queue`) with a secure input
    /// pipe, peer `b` connected to it on a compact connection, and one
    /// session from `b` to that pipe.
    struct Setup {
        a: Peer,
        b: Peer,
        ad: PipeAdvertisement,
        input: crate::pipe::InputPipe,
        session: Arc<SecureSession>,
    }

    async fn setup(dir: &tempfile::TempDir, queue: usize) -> Setup {
        let (a, b) = tokio::join!(peer(dir, "a", true, queue), peer(dir, "b", false, 1024));
        let ad = PipeAdvertisement::new(PipeId::new_random(), PipeType::UnicastSecure);
        let input = a.pipes().create_input_pipe(&ad).unwrap();
        let m = b.connect(a.local_addr().unwrap()).await.unwrap();
        assert!(m.wait_compact(WAIT).await);
        let session = session(&b, &ad, &a).await;
        Setup {
            a,
            b,
            ad,
            input,
            session,
        }
    }

    /// A new session from `b` to `a`'s pipe `ad`.
    async fn session(b: &Peer, ad: &PipeAdvertisement, a: &Peer) -> Arc<SecureSession> {
        SecureSession::connect(&b.inner, ad, a.peer_id(), WAIT)
            .await
            .unwrap()
    }

    /// A record that fails authentication ends that session on the
    /// receiving peer; other sessions on the same connection, to the same
    /// input pipe, and new ones keep working.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tampered_record_closes_that_session_only() {
        let dir = tempfile::tempdir().unwrap();
        let Setup {
            a,
            b,
            ad,
            mut input,
            session: s1,
        } = setup(&dir, 1024).await;
        let s2 = session(&b, &ad, &a).await;
        s1.send(text("one")).await.unwrap();
        assert_eq!(recv(&mut input).await, "one");
        // A real record of s1's session, one bit of its tag flipped.
        let mut rec = BytesMut::new();
        s1.session
            .lock()
            .unwrap()
            .chan
            .seal(&[b"tampered"], &mut rec)
            .unwrap();
        let last = rec.len() - 1;
        rec[last] ^= 1;
        let bad = Message::new().with(Element::bytes(NS_JUXTA, ELEM_TLS, rec.freeze()));
        s1.messenger
            .send(TLS_SERVICE, Some(&s1.param), bad)
            .await
            .unwrap();
        // A forgets that session...
        let key = (b.peer_id(), s1.key.1);
        tokio::time::timeout(WAIT, async {
            while a.inner.secure.map.lock().unwrap().contains_key(&key) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        // ...so what s1 sends after is not delivered, while s2 (same
        // connection, same input pipe, records handled in order) is.
        s1.send(text("lost")).await.unwrap();
        s2.send(text("two")).await.unwrap();
        assert_eq!(recv(&mut input).await, "two");
        assert!(a
            .inner
            .secure
            .map
            .lock()
            .unwrap()
            .contains_key(&(b.peer_id(), s2.key.1)));
        // New sessions are accepted.
        let s3 = session(&b, &ad, &a).await;
        s3.send(text("three")).await.unwrap();
        assert_eq!(recv(&mut input).await, "three");
        // And large messages still cross on the surviving session.
        let big = Bytes::from(vec![7u8; 3 << 20]);
        s2.send(Message::new().with(Element::bytes("test", "big", big.clone())))
            .await
            .unwrap();
        let d = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.message.get("test", "big").unwrap().data, big);
        assert_eq!(d.from, Some(b.peer_id()));
    }

    fn shape(m: &Message) -> Vec<(String, String, Bytes)> {
        m.elements
            .iter()
            .map(|e| (e.namespace.to_string(), e.name.to_string(), e.data.clone()))
            .collect()
    }

    /// Compact inner frames when both peers know them, binary v0 when
    /// either is older; either way every message arrives as sent: small
    /// ones, one with more names than the session's tables hold, and one
    /// split over several `JuxtaTls` messages.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inner_encoding_is_agreed_and_older_peers_keep_v0() {
        use std::sync::atomic::Ordering::Relaxed;
        let dir = tempfile::tempdir().unwrap();
        let Setup {
            a,
            b,
            ad,
            mut input,
            ..
        } = setup(&dir, 1024).await;
        let many = (0..INNER_LIMITS.entries + 10).fold(Message::new(), |m, i| {
            m.with(Element::bytes(
                "test",
                &format!("name-{i}"),
                vec![i as u8; i],
            ))
        });
        let big = Message::new()
            .with(Element::text("test", "data", "big"))
            .with(Element::bytes(
                "test",
                "big",
                vec![9u8; 4 * WIRE_PLAIN + 1000],
            ));
        for (server_old, client_old) in [(false, false), (true, false), (false, true)] {
            a.inner.secure.v0_only.store(server_old, Relaxed);
            b.inner.secure.v0_only.store(client_old, Relaxed);
            let s = session(&b, &ad, &a).await;
            assert_eq!(s.is_compact().await, !server_old && !client_old);
            for msg in [
                text("one"),
                many.clone(),
                text("two"),
                big.clone(),
                many.clone(),
            ] {
                s.send(msg.clone()).await.unwrap();
                let d = tokio::time::timeout(WAIT, input.recv())
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(shape(&d.message), shape(&msg));
                assert_eq!(d.from, Some(b.peer_id()));
            }
        }
    }

    /// A message refused for its size leaves the session's compact tables
    /// as they were: the next message, with the same new name, decodes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_message_teaches_the_encoder_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let Setup {
            a: _a,
            b: _b,
            mut input,
            session: s,
            ..
        } = setup(&dir, 1024).await;
        assert!(s.is_compact().await);
        let huge = Message::new().with(Element::bytes("test", "fresh", vec![0u8; MAX_INNER]));
        assert!(matches!(
            s.send(huge).await,
            Err(PipeError::Tls(TlsError::Failed(_)))
        ));
        let ok = Message::new().with(Element::bytes("test", "fresh", &b"x"[..]));
        s.send(ok.clone()).await.unwrap();
        let d = tokio::time::timeout(WAIT, input.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(shape(&d.message), shape(&ok));
    }

    /// A secure input pipe whose queue is full makes the session wait
    /// (the connection's reader pushes back): every message arrives, in
    /// order, once the application reads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_secure_input_queue_pushes_back_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let Setup {
            a: _a,
            b: _b,
            mut input,
            session: s,
            ..
        } = setup(&dir, 4).await;
        for i in 0..300 {
            s.send(text(&i.to_string())).await.unwrap();
        }
        for i in 0..300 {
            assert_eq!(recv(&mut input).await, i.to_string());
        }
    }

    /// The session keeps the input pipe's queue it found; when that pipe
    /// closes and is opened again, the session's next message goes to the
    /// new one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reopened_input_pipe_gets_the_sessions_messages() {
        let dir = tempfile::tempdir().unwrap();
        let Setup {
            a,
            b: _b,
            ad,
            mut input,
            session: s,
        } = setup(&dir, 1024).await;
        s.send(text("one")).await.unwrap();
        assert_eq!(recv(&mut input).await, "one");
        drop(input);
        let mut input = a.pipes().create_input_pipe(&ad).unwrap();
        s.send(text("two")).await.unwrap();
        assert_eq!(recv(&mut input).await, "two");
    }

    #[test]
    fn groups_split_at_the_bound_across_parts() {
        let a = vec![1u8; 5];
        let b = vec![2u8; 7];
        let parts: Vec<&[u8]> = vec![&a, &b];
        let g = groups(&parts, 4);
        let sizes: Vec<Vec<usize>> = g
            .iter()
            .map(|g| g.iter().map(|p| p.len()).collect())
            .collect();
        assert_eq!(sizes, vec![vec![4], vec![1, 3], vec![4]]);
        let flat: Vec<u8> = g.iter().flatten().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(flat, [a.clone(), b.clone()].concat());
        assert_eq!(groups(&parts, 100).len(), 1);
    }
}
