//! The pipe service: input and output pipes (unicast, propagate, secure),
//! their binding through the resolver (the Pipe Binding Protocol), and
//! bidirectional pipes.
//!
//! A pipe is named by a pipe advertisement; an input pipe listens on the
//! endpoint address `PipeService/<pipe URN>`, an output pipe first asks the
//! resolver which peer holds the input pipe (JXSE does the same, and only
//! sends after an answer), then sends straight to that address. Between two
//! Juxta peers the compact framing interns that address per connection, so a
//! pipe message is addressed by a small number, not by XML.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use juxta::{Peer, PeerConfig};
//! use juxta::proto::advertisement::{PipeAdvertisement, PipeType};
//! use juxta::proto::id::PipeId;
//! use juxta::proto::message::{Element, Message};
//! let a = Peer::start(PeerConfig::new("/tmp/pa").listen("127.0.0.1:0".parse()?)).await?;
//! let b = Peer::start(PeerConfig::new("/tmp/pb")).await?;
//! let adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
//! let mut input = a.pipes().create_input_pipe(&adv)?;
//! b.connect(a.local_addr().unwrap()).await?;
//! let out = b.pipes().create_output_pipe(&adv, &[a.peer_id()], Duration::from_secs(5)).await?;
//! out.send(Message::new().with(Element::text("", "text", "hi"))).await?;
//! let got = input.recv().await.unwrap();
//! assert_eq!(got.message.get("", "text").unwrap().as_str(), Some("hi"));
//! # Ok(()) }
//! ```

pub mod bidi;
mod input;
mod output;
pub(crate) mod registry;
pub mod secure;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::endpoint::ServiceAddress;
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;

pub use input::InputPipe;
pub use output::OutputPipe;

use crate::peer::Inner;
use crate::SendError;

/// The endpoint service input pipes listen on.
pub const PIPE_SERVICE: &str = "PipeService";

/// Errors from the pipe service.
#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    /// An input pipe with this ID is open here already.
    #[error("an input pipe for {0} is open already")]
    AlreadyOpen(String),
    /// No peer answered that it holds the input pipe in time.
    #[error("no peer answered for pipe {pipe} within {timeout:?}")]
    ResolveTimeout {
        /// pipe URN
        pipe: String,
        /// how long we waited
        timeout: Duration,
    },
    /// Every peer asked answered that it does not hold the pipe.
    #[error("no peer holds pipe {0}")]
    NotFound(String),
    /// No connection to any peer to ask, or to the peer named.
    #[error("not connected to {0}")]
    NotConnected(String),
    /// Too many resolutions are in progress at once.
    #[error("too many pipe resolutions in progress (limit {0})")]
    TooManyBinds(usize),
    /// This operation needs a different pipe type.
    #[error("pipe type {got} cannot be used here (need {need})")]
    WrongType {
        /// the advertisement's type
        got: &'static str,
        /// what the operation needs
        need: &'static str,
    },
    /// Sending failed.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The TLS session of a secure pipe failed.
    #[error("secure pipe: {0}")]
    Tls(#[from] tls::TlsError),
    /// The peer is shutting down.
    #[error("the peer has stopped")]
    Stopped,
    /// No route to `peer`, a peer named for the binding or the peer that
    /// answered it: see [`crate::PeerError::NoRoute`].
    #[error("no route to {peer} (tried: {})", crate::relay::describe(tried))]
    NoRoute {
        /// The peer.
        peer: PeerId,
        /// What was tried.
        tried: Vec<crate::relay::RouteAttempt>,
    },
    /// A listener could not be registered.
    #[error(transparent)]
    Peer(#[from] Box<crate::PeerError>),
    /// A reliable bidi pipe message could not be framed (too large, or not
    /// encodable).
    #[error("reliable bidi pipe: {0}")]
    Block(#[from] juxta_proto::socket::bidi_block::BlockError),
    /// A reliable bidi pipe failed (the peer stopped acknowledging).
    #[error("reliable bidi pipe: {0}")]
    Reliable(juxta_proto::socket::reliable::ReliableError),
    /// The peer did not acknowledge everything sent within the close
    /// timeout.
    #[error("close not acknowledged within {0:?}")]
    CloseTimeout(Duration),
}

impl From<crate::relay::NoRoute> for PipeError {
    fn from(e: crate::relay::NoRoute) -> Self {
        PipeError::NoRoute {
            peer: e.peer,
            tried: e.tried,
        }
    }
}

impl From<crate::PeerError> for PipeError {
    fn from(e: crate::PeerError) -> Self {
        PipeError::Peer(Box::new(e))
    }
}

/// This peer's advertisement as sockets and bidi pipes send it (`remPeer`).
pub(crate) fn local_peer_adv(inner: &Inner) -> juxta_proto::advertisement::PeerAdvertisement {
    juxta_proto::advertisement::PeerAdvertisement {
        peer_id: *inner.identity.peer_id(),
        group_id: juxta_proto::id::PeerGroupId::NET,
        name: inner.cfg.name.clone(),
        desc: None,
        route: crate::discovery::local_route(inner),
    }
}

/// A fresh unicast pipe for one end of a socket or bidi pipe, named after
/// the server pipe (plus `suffix`, as JXSE names its client pipes).
pub(crate) fn ephemeral_adv(server: &PipeAdvertisement, suffix: &str) -> PipeAdvertisement {
    let mut adv = PipeAdvertisement::new(juxta_proto::id::PipeId::new_random(), PipeType::Unicast);
    adv.name = Some(format!("{}{suffix}", server.name.as_deref().unwrap_or("")));
    adv
}

/// The next set-up request of `kind` on a server pipe whose sender has a
/// live connection, with a messenger back to it; other messages are logged
/// and skipped (the request's message comes too, for elements beyond
/// JXSE's). `None` once the peer stops.
pub(crate) async fn next_setup_request(
    inner: &Inner,
    input: &mut InputPipe,
    kind: juxta_proto::socket::setup::SetupKind,
) -> Option<(
    juxta_proto::socket::setup::ConnectRequest,
    crate::Messenger,
    Message,
)> {
    use juxta_proto::socket::setup::ConnectRequest;
    loop {
        let m = input.recv().await?;
        let req = match ConnectRequest::from_message(&m.message) {
            Ok(r) if r.kind == kind => r,
            Ok(_) => continue,
            Err(e) => {
                tracing::info!(from = ?m.from, error = %e, ?kind, "bad connection request ignored");
                continue;
            }
        };
        let client = req.rem_peer.peer_id;
        match inner
            .messenger(&client)
            .or_else(|| m.from.and_then(|p| inner.messenger(&p)))
        {
            Some(messenger) => return Some((req, messenger, m.message)),
            None => {
                tracing::info!(%client, ?kind, "connection request from a peer with no connection ignored");
            }
        }
    }
}

/// Receives the messages of one pipe synchronously on the connection's
/// reader task (used by sockets, whose engine takes them without a queue).
pub(crate) trait DirectSink: Send + Sync {
    fn deliver(&self, d: juxta_proto::endpoint::Delivery);
}

/// A message received on an input pipe.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PipeMessage {
    /// The application's elements.
    pub message: Message,
    /// The sending peer, when known; how far to trust it is
    /// [`PipeMessage::verified`]. On a secure pipe it is the peer ID
    /// proven by the TLS certificate.
    pub from: Option<PeerId>,
    /// How `from` was verified: [`crate::Verified::Certificate`] on a
    /// secure pipe, the connection's proof for a message that came
    /// straight from its sender, [`crate::Verified::Unverified`] for one
    /// relayed, routed or propagated on its behalf.
    pub verified: crate::Verified,
}

impl PipeMessage {
    /// The sender, only if it is verified.
    pub fn verified_sender(&self) -> Option<PeerId> {
        self.from.filter(|_| self.verified.is_verified())
    }
}

/// Opens pipes on a [`crate::Peer`]; get one with [`crate::Peer::pipes`].
#[derive(Clone)]
pub struct PipeService {
    pub(crate) inner: Arc<Inner>,
    /// The group (`None`: the Net peer group).
    pub(crate) scope: Option<Arc<crate::group::GroupCtx>>,
}

impl crate::Peer {
    /// The pipe service of this peer.
    pub fn pipes(&self) -> PipeService {
        PipeService {
            inner: self.inner.clone(),
            scope: None,
        }
    }
}

impl PipeService {
    /// Opens an input pipe for `adv`: messages sent to the pipe by any
    /// number of peers arrive on it, and this peer answers resolver queries
    /// for it. Closing (dropping) the pipe stops both.
    pub fn create_input_pipe(&self, adv: &PipeAdvertisement) -> Result<InputPipe, PipeError> {
        InputPipe::open(&self.inner, self.scope.as_ref(), adv)
    }

    /// Opens an output pipe for `adv`. For a unicast or secure pipe, asks
    /// `peers` (every connected peer if empty) which one holds the input
    /// pipe, and binds to the first that answers, within `timeout`. For a
    /// propagate pipe, sends to every peer in `peers` (every connected peer
    /// if empty) with no resolution.
    ///
    /// Timeouts and errors of a unicast pipe: a peer named in `peers` that
    /// this peer has no connection or known route to is looked for first
    /// (route query to the connected peers); when none of them can be
    /// reached this fails with [`PipeError::NoRoute`] after at most
    /// [`crate::PeerConfig::route_query_timeout`] (default 900 ms; at once with
    /// no connected peer to ask), not after `timeout`. The binding query
    /// then waits up to `timeout` for an answer
    /// ([`PipeError::ResolveTimeout`]); a "not here" from every peer asked
    /// ends it at once ([`PipeError::NotFound`]). A binding answered by a
    /// peer with no route back (neither connection nor route) fails with
    /// [`PipeError::NoRoute`] too.
    pub async fn create_output_pipe(
        &self,
        adv: &PipeAdvertisement,
        peers: &[PeerId],
        timeout: Duration,
    ) -> Result<OutputPipe, PipeError> {
        match adv.pipe_type {
            PipeType::Propagate => {
                OutputPipe::propagate(&self.inner, self.scope.as_ref(), adv, peers)
            }
            PipeType::Unicast | PipeType::UnicastSecure => {
                if adv.pipe_type == PipeType::UnicastSecure {
                    // Secure pipes are answered only over compact (Juxta)
                    // connections: let a fresh connection finish its
                    // handshake before asking.
                    for p in peers {
                        if let Some(m) = self.inner.messenger(p) {
                            m.wait_compact(timeout).await;
                        }
                    }
                }
                let peer = self.resolve(adv, peers, timeout).await?;
                OutputPipe::unicast(&self.inner, adv, peer, timeout).await
            }
        }
    }

    /// Asks `peers` (all connected peers if empty) which one holds the input
    /// pipe of `adv`; returns the first that answers "found".
    pub async fn resolve(
        &self,
        adv: &PipeAdvertisement,
        peers: &[PeerId],
        timeout: Duration,
    ) -> Result<PeerId, PipeError> {
        if self.scope.as_ref().is_some_and(|c| c.is_closed()) {
            return Err(PipeError::NotConnected("a group this peer left".into()));
        }
        registry::resolve(&self.inner, self.scope.as_ref(), adv, peers, timeout).await
    }
}

/// Where a propagated message for JXSE's wire-pipe service goes here: a
/// JXSE peer sends a propagate pipe's messages to the whole group through
/// its rendezvous addressed to `jxta.service.wirepipe`/`<group unique>`,
/// the pipe named only in its `jxta:JxtaWireHeader`
/// (`WirePipe.sendMessage`); the input pipe here listens on
/// `PipeService/<pipe URN>`. `Ok(None)`: not a wire-pipe message of the
/// Net group. A message whose header is missing or malformed (hostile
/// input: the header is parsed within the XML parser's bounds) is `Err`:
/// it goes nowhere and is counted in [`crate::Stats::undeliverable`].
pub(crate) fn wire_pipe_destination(
    inner: &crate::peer::Inner,
    dest: &ServiceAddress,
    message: &juxta_proto::message::Message,
) -> Result<Option<ServiceAddress>, juxta_proto::pipe::wire_header::WireHeaderError> {
    use juxta_proto::pipe::wire_header::{JxtaWireHeader, WIRE_PIPE_SERVICE};
    if dest.service != WIRE_PIPE_SERVICE
        || dest
            .param
            .as_deref()
            .is_some_and(|g| g != inner.group_unique())
    {
        return Ok(None);
    }
    match JxtaWireHeader::from_message(message) {
        Ok(h) => Ok(Some(ServiceAddress::new(
            PIPE_SERVICE,
            Some(&h.pipe_id.to_string()),
        ))),
        Err(e) => {
            inner
                .stats
                .undeliverable
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(error = %e, "wire-pipe message without a usable header dropped");
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use juxta_proto::id::PipeId;
    use juxta_proto::message::{Element, NS_JXTA};
    use juxta_proto::pipe::wire_header::{JxtaWireHeader, ELEM_WIRE_HEADER, WIRE_PIPE_SERVICE};
    use std::sync::atomic::Ordering;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wire_pipe_messages_go_to_the_pipe_their_header_names_and_bad_headers_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = crate::PeerConfig::new(dir.path().join("p"));
        cfg.key_bits = 1024;
        let p = crate::Peer::start(cfg).await.unwrap();
        let inner = &p.inner;
        let g = inner.group_unique().to_string();
        let wire = ServiceAddress::new(WIRE_PIPE_SERVICE, Some(&g));
        let pipe = PipeId::new_random();
        let good = Message::new()
            .with(JxtaWireHeader::new(pipe, "m-1".into(), 3).to_element())
            .with(Element::bytes("juxta", "payload", &b"x"[..]));
        assert_eq!(
            wire_pipe_destination(inner, &wire, &good).unwrap(),
            Some(ServiceAddress::new(PIPE_SERVICE, Some(&pipe.to_string())))
        );
        // Not the wire-pipe service, or another group's: left alone.
        let other = ServiceAddress::new(PIPE_SERVICE, Some("x"));
        assert_eq!(wire_pipe_destination(inner, &other, &good).unwrap(), None);
        let sub = ServiceAddress::new(WIRE_PIPE_SERVICE, Some("another-group"));
        assert_eq!(wire_pipe_destination(inner, &sub, &good).unwrap(), None);
        assert_eq!(inner.stats.undeliverable.load(Ordering::Relaxed), 0);
        // Hostile headers: none, not XML, no pipe ID, a bad TTL, huge.
        let bad = [
            Message::new().with(Element::bytes("juxta", "payload", &b"x"[..])),
            Message::new().with(Element::xml(NS_JXTA, ELEM_WIRE_HEADER, "<<<".to_string())),
            Message::new().with(Element::xml(
                NS_JXTA,
                ELEM_WIRE_HEADER,
                "<JxtaWire><MsgId>a</MsgId><TTL>1</TTL></JxtaWire>".to_string(),
            )),
            Message::new().with(Element::xml(
                NS_JXTA,
                ELEM_WIRE_HEADER,
                format!(
                    "<JxtaWire><PipeId>{pipe}</PipeId><MsgId>a</MsgId><TTL>-5</TTL></JxtaWire>"
                ),
            )),
            Message::new().with(Element::xml(
                NS_JXTA,
                ELEM_WIRE_HEADER,
                format!(
                    "<JxtaWire><MsgId>{}</MsgId></JxtaWire>",
                    "a".repeat(4 << 20)
                ),
            )),
        ];
        for (i, m) in bad.iter().enumerate() {
            assert!(
                wire_pipe_destination(inner, &wire, m).is_err(),
                "bad header {i} accepted"
            );
        }
        assert_eq!(
            inner.stats.undeliverable.load(Ordering::Relaxed),
            bad.len() as u64
        );
    }
}
