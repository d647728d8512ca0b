//! Output pipes: the sending end. A unicast pipe sends straight to the
//! bound peer's `PipeService/<pipe URN>` (no router header on a direct
//! link); a secure pipe sends through a TLS 1.3 session with that peer; a
//! propagate pipe fans out to every target peer, tagging each message with
//! an ID so receivers reached twice deliver once (and with JXSE's
//! `jxta:JxtaWireHeader`, without which a JXSE receiver drops it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::endpoint::ServiceAddress;
use juxta_proto::id::PeerId;
use juxta_proto::message::{Element, Message, NS_JXTA};
use juxta_proto::pipe::wire_header::JxtaWireHeader;

use super::secure::SecureSession;
use super::{PipeError, PIPE_SERVICE};
use crate::endpoint::Messenger;
use crate::peer::Inner;

/// Namespace of Juxta's own elements.
pub(crate) const NS_JUXTA: &str = "juxta";
/// Element carrying a propagated message's 16-byte ID.
const ELEM_PROPAGATE_ID: &str = "PropagateId";
/// JXSE's propagate header element (`jxta:JxtaWireHeader`).
const ELEM_WIRE_HEADER: &str = "JxtaWireHeader";
/// TTL of a propagate pipe's message handed to the rendezvous (an edge's
/// rendezvous, its peer view, their edges: 3 would do; JXSE's wire pipes
/// use the rendezvous default).
const PROPAGATE_TTL: i32 = 10;

enum Kind {
    Unicast {
        messenger: Messenger,
    },
    Secure {
        session: Arc<SecureSession>,
    },
    Propagate {
        targets: Vec<PeerId>,
        tag: u64,
        next: AtomicU64,
        /// The group the pipe is in (`None`: the Net peer group).
        scope: Option<Arc<crate::group::GroupCtx>>,
    },
}

/// The sending end of a pipe; cheap to share behind an `Arc`, and every
/// send is one vectored write on the connection.
pub struct OutputPipe {
    adv: PipeAdvertisement,
    urn: String,
    inner: Arc<Inner>,
    kind: Kind,
}

impl OutputPipe {
    pub(crate) async fn unicast(
        inner: &Arc<Inner>,
        adv: &PipeAdvertisement,
        peer: PeerId,
        timeout: Duration,
    ) -> Result<OutputPipe, PipeError> {
        let kind = match adv.pipe_type {
            PipeType::UnicastSecure => Kind::Secure {
                session: SecureSession::connect(inner, adv, peer, timeout).await?,
            },
            _ => Kind::Unicast {
                messenger: crate::relay::route::messenger_to(inner, &peer, timeout).await?,
            },
        };
        Ok(OutputPipe {
            adv: adv.clone(),
            urn: adv.id.to_string(),
            inner: inner.clone(),
            kind,
        })
    }

    pub(crate) fn propagate(
        inner: &Arc<Inner>,
        scope: Option<&Arc<crate::group::GroupCtx>>,
        adv: &PipeAdvertisement,
        peers: &[PeerId],
    ) -> Result<OutputPipe, PipeError> {
        Ok(OutputPipe {
            adv: adv.clone(),
            urn: adv.id.to_string(),
            inner: inner.clone(),
            kind: Kind::Propagate {
                targets: peers.to_vec(),
                tag: rand::random(),
                next: AtomicU64::new(0),
                scope: scope.cloned(),
            },
        })
    }

    /// The pipe's advertisement.
    pub fn advertisement(&self) -> &PipeAdvertisement {
        &self.adv
    }

    /// The peer a unicast or secure pipe is bound to.
    pub fn remote(&self) -> Option<PeerId> {
        match &self.kind {
            Kind::Unicast { messenger } => Some(messenger.remote()),
            Kind::Secure { session } => Some(session.remote()),
            Kind::Propagate { .. } => None,
        }
    }

    /// Whether messages travel in compact framing (unicast pipes only).
    pub fn is_compact(&self) -> bool {
        matches!(&self.kind, Kind::Unicast { messenger } if messenger.is_compact())
    }

    /// Sends `msg`; returns the bytes it took on the wire (for a propagate
    /// pipe, summed over the peers reached, plus the multicast datagram: a
    /// propagate pipe opened with no target list also sends each message
    /// once by IP multicast when the peer has multicast configured). A
    /// propagate pipe with no peer reachable and no multicast datagram sent
    /// returns [`PipeError::NotConnected`].
    pub async fn send(&self, msg: Message) -> Result<usize, PipeError> {
        match &self.kind {
            Kind::Unicast { messenger } => {
                Ok(messenger.send(PIPE_SERVICE, Some(&self.urn), msg).await?)
            }
            Kind::Secure { session } => session.send(msg).await,
            Kind::Propagate {
                targets,
                tag,
                next,
                scope,
            } => {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let mut id = BytesMut::with_capacity(16);
                id.put_u64(*tag);
                id.put_u64(n);
                let mut msg = msg;
                msg.push(Element::bytes_static(
                    NS_JUXTA,
                    ELEM_PROPAGATE_ID,
                    id.freeze(),
                ));
                // JXSE's wire pipe drops a propagated message without its
                // header (`WirePipe.processIncomingMessage`); Juxta peers
                // read the compact ID above and drop the header. It is
                // added (an XML document per message) only on the paths a
                // JXSE peer can be on: multicast, the rendezvous, links in
                // JXTA framing; compact links carry the message without it.
                let mut jxse_copy: Option<Message> = None;
                let mut with_header = || {
                    jxse_copy
                        .get_or_insert_with(|| {
                            let mut wire = JxtaWireHeader::new(
                                self.adv.id,
                                format!("{tag:016x}-{n:016x}"),
                                PROPAGATE_TTL.unsigned_abs(),
                            );
                            wire.src_peer = Some(*self.inner.identity.peer_id());
                            let mut m = msg.clone();
                            m.push(wire.to_element());
                            m
                        })
                        .clone()
                };
                // In a subgroup with its own rendezvous, a message to
                // everyone goes through that rendezvous only (never to
                // connected peers that may not be members).
                let group_rdv = scope.as_ref().and_then(|c| c.rendezvous());
                let all;
                let to: &[PeerId] = if targets.is_empty() && group_rdv.is_some() {
                    &[]
                } else if targets.is_empty() {
                    all = self.inner.connected_peers();
                    &all
                } else {
                    targets
                };
                let mut total = 0;
                let mut reached = 0;
                let mut last_err = None;
                // Sent to everyone (no target list, as JXSE propagates):
                // once by IP multicast to the LAN as well, which reaches
                // peers we hold no connection to. A message too large for a
                // datagram goes only over the connections.
                let mut mcast_err = None;
                if let Some(mc) = self
                    .inner
                    .multicast
                    .as_ref()
                    .filter(|_| targets.is_empty() && scope.is_none())
                {
                    let at = ServiceAddress::new(PIPE_SERVICE, Some(&self.urn));
                    match mc.send(&at, with_header()).await {
                        Ok(n) => {
                            total += n;
                            reached += 1;
                        }
                        Err(e) => {
                            tracing::debug!(pipe = %self.urn, error = %e, "propagate by multicast failed");
                            mcast_err = Some(e);
                        }
                    }
                }
                // Sent to everyone, on a peer with a rendezvous service:
                // propagated through the rendezvous as well (an edge's
                // leased rendezvous delivers it and sends it on to its
                // other edges and its peer view), which reaches the peers
                // that only dial out to it. The peers it covers are not
                // sent a second copy; any other path's copy carries the
                // same propagate ID and is delivered once.
                let mut covered = Vec::new();
                let rdv = match scope {
                    None => self.inner.rendezvous.get().cloned(),
                    Some(_) => group_rdv,
                };
                if let Some(h) = rdv.filter(|_| targets.is_empty()) {
                    let at = ServiceAddress::new(PIPE_SERVICE, Some(&self.urn));
                    if let Some(c) = h.propagate(at, with_header(), PROPAGATE_TTL).await {
                        reached += 1;
                        covered = c;
                    }
                }
                for p in to {
                    if covered.contains(p) {
                        continue;
                    }
                    let Some(m) = self.inner.messenger(p) else {
                        continue;
                    };
                    let copy = if m.is_compact() {
                        msg.clone()
                    } else {
                        with_header()
                    };
                    match m.send(PIPE_SERVICE, Some(&self.urn), copy).await {
                        Ok(n) => {
                            total += n;
                            reached += 1;
                        }
                        Err(e) => last_err = Some(e),
                    }
                }
                match (reached, last_err) {
                    (0, Some(e)) => Err(e.into()),
                    (0, None) => Err(PipeError::NotConnected(match mcast_err {
                        Some(e) => format!("any propagate target (multicast: {e})"),
                        None => "any propagate target".into(),
                    })),
                    _ => Ok(total),
                }
            }
        }
    }
}

/// Removes the propagate ID from a received message: Juxta's 16-byte
/// element, or the `MsgId` of JXSE's `JxtaWireHeader`.
pub(crate) fn take_propagate_id(msg: &mut Message) -> Option<Bytes> {
    if let Some(e) = msg.take(NS_JUXTA, ELEM_PROPAGATE_ID) {
        // A Juxta sender's copy of the header for JXSE receivers.
        msg.remove_all(NS_JXTA, ELEM_WIRE_HEADER);
        return Some(e.data);
    }
    let e = msg.take(NS_JXTA, ELEM_WIRE_HEADER)?;
    let text = std::str::from_utf8(&e.data).ok()?;
    let h = JxtaWireHeader::parse(text).ok()?;
    Some(Bytes::from(h.msg_id.into_bytes()))
}
