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
//! 4-byte big-endian length and the message in binary format v0.
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
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{decode_v0, encode_v0, Element, Message};
use tokio::sync::Notify;
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
/// Sent by the client when its output pipe closes: the server forgets the
/// session.
const ELEM_CLOSE: &str = "close";
/// TLS bytes taken from a session at once during the handshake.
const CHUNK: usize = 256 * 1024;
/// Most plaintext sealed into one `JuxtaTls` message.
const WIRE_PLAIN: usize = 4 * 1024 * 1024;
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
        to: ServiceAddress,
    },
}

struct Session {
    chan: SecureChannel,
    role: Role,
    failed: Option<String>,
    /// Client: the handshake is done and our last flight has been sent.
    established: bool,
}

/// The per-peer table of TLS sessions and the task that feeds them.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<Key, Arc<Mutex<Session>>>>,
    /// This peer's TLS configurations, built on first use.
    client_cfg: OnceLock<Arc<rustls::ClientConfig>>,
    server_cfg: OnceLock<Arc<rustls::ServerConfig>>,
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
    /// Held while sending, so messages go out in order; the buffer their
    /// records are sealed into, kept at its full length (every byte
    /// initialized) and reused once the connection let go of the slice it
    /// sent (no fresh memory, so no page faults, per message).
    send_lock: tokio::sync::Mutex<Bytes>,
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
        }));
        inner.secure.insert(inner, key, session.clone())?;
        let s = Arc::new(SecureSession {
            inner: inner.clone(),
            key,
            session,
            messenger,
            param: format!("{id:016x}"),
            send_lock: tokio::sync::Mutex::new(Bytes::new()),
        });
        let hello = s.take_outgoing()?;
        let mut first = Message::new();
        first.push(Element::text(NS_JUXTA, ELEM_PIPE, &adv.id.to_string()));
        for b in hello {
            first.push(Element::bytes_static(NS_JUXTA, ELEM_TLS, b));
        }
        s.messenger.send(TLS_SERVICE, Some(&s.param), first).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = ready.notified();
            {
                let g = s.session.lock().expect("session lock");
                if let Some(f) = &g.failed {
                    return Err(PipeError::Tls(TlsError::Failed(f.clone())));
                }
                if g.established {
                    break;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(PipeError::ResolveTimeout {
                    pipe: adv.id.to_string(),
                    timeout,
                });
            }
        }
        Ok(s)
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
    /// one `JuxtaTls` message per [`WIRE_PLAIN`] bytes of plaintext: a
    /// message of up to 4 MiB is one endpoint message.
    pub(crate) async fn send(&self, msg: Message) -> Result<usize, PipeError> {
        let enc = encode_v0(&msg, JavaHashOrder::Java8)
            .map_err(|e| PipeError::Tls(TlsError::Failed(format!("cannot encode message: {e}"))))?;
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
        let mut pool = self.send_lock.lock().await;
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
                let mut buf = match std::mem::take(&mut *pool).try_into_mut() {
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
            if inner.pipes.secure_sink(&pipe).is_none() {
                return Err(TlsError::Failed(format!("no secure input pipe {pipe}")));
            }
            let s = Arc::new(Mutex::new(Session {
                chan: SecureChannel::server(server_cfg(inner)?)?,
                role: Role::Server {
                    to: ServiceAddress::new(PIPE_SERVICE, Some(&pipe.to_string())),
                    pipe,
                    plain: BytesMut::new(),
                },
                failed: None,
                established: false,
            }));
            inner.secure.insert(inner, key, s.clone())?;
            s
        }
    };
    let (replies, messages, pipe, notify) = {
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
        let Session { chan, role, .. } = &mut *g;
        let mut messages = Vec::new();
        let mut pipe = None;
        let mut notify = None;
        match role {
            Role::Client { ready } => {
                if !handshaking {
                    // Woken after our last handshake flight is on the wire:
                    // application records must not overtake it.
                    notify = Some(ready.clone());
                }
                // Nothing travels server → client but handshake data.
                while chan.take_plaintext().is_some() {}
            }
            Role::Server { pipe: p, plain, to } => {
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
                            let m = decode_v0(b.split_to(n))
                                .map_err(|e| TlsError::Failed(format!("bad inner message: {e}")))?;
                            messages.push(m.message);
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
                    let m = decode_v0(body)
                        .map_err(|e| TlsError::Failed(format!("bad inner message: {e}")))?;
                    messages.push(m.message);
                }
                pipe = Some((*p, peer, to.clone()));
            }
        }
        (replies, messages, pipe, notify)
    };
    // Client: established once our last flight is on the wire (or handed
    // to the task writing it): application records must not overtake it.
    let established = move || {
        if let Some(ready) = notify {
            session.lock().expect("session lock").established = true;
            ready.notify_waiters();
        }
    };
    match (!replies.is_empty())
        .then(|| inner.messenger(&from))
        .flatten()
    {
        Some(m) => {
            let mut msg = Message::new();
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
    if let Some((pipe, peer, to)) = pipe {
        if messages.is_empty() {
            return Ok(());
        }
        let sink = inner
            .pipes
            .secure_sink(&pipe)
            .ok_or_else(|| TlsError::Failed(format!("secure input pipe {pipe} closed")))?;
        let to = Arc::new(to);
        for message in messages {
            let d = Delivery {
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
            if sink.send(d).await.is_err() {
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Peer, PeerConfig};
    use juxta_proto::advertisement::PipeType;

    const WAIT: Duration = Duration::from_secs(60);

    async fn peer(dir: &tempfile::TempDir, name: &str, listen: bool) -> Peer {
        let mut c = PeerConfig::new(dir.path().join(name));
        if listen {
            c = c.listen("127.0.0.1:0".parse().unwrap());
        }
        c.key_bits = 2048;
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

    /// A record that fails authentication ends that session on the
    /// receiving peer; other sessions on the same connection, to the same
    /// input pipe, and new ones keep working.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tampered_record_closes_that_session_only() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = tokio::join!(peer(&dir, "a", true), peer(&dir, "b", false));
        let ad = PipeAdvertisement::new(PipeId::new_random(), PipeType::UnicastSecure);
        let mut input = a.pipes().create_input_pipe(&ad).unwrap();
        let m = b.connect(a.local_addr().unwrap()).await.unwrap();
        assert!(m.wait_compact(WAIT).await);
        let s1 = SecureSession::connect(&b.inner, &ad, a.peer_id(), WAIT)
            .await
            .unwrap();
        let s2 = SecureSession::connect(&b.inner, &ad, a.peer_id(), WAIT)
            .await
            .unwrap();
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
        let s3 = SecureSession::connect(&b.inner, &ad, a.peer_id(), WAIT)
            .await
            .unwrap();
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
