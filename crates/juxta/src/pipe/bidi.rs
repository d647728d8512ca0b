//! Bidirectional pipes (JXSE's `JxtaBiDiPipe` and `JxtaServerPipe`): a
//! message channel both ways between two peers, set up like a JXTA socket
//! (`JXTABIP` request and answer between two ephemeral pipes) but carrying
//! whole messages. Two modes, chosen by the client ([`BidiMode`]):
//! - **unreliable** (JXSE's default, and Juxta's): messages go as they are
//!   to the peer's ephemeral pipe; over a direct TCP or compact connection
//!   they already arrive in order and intact;
//! - **reliable** (`reliable=true` in the request): each message is one
//!   `jxtarel` block, acknowledged, ordered and retransmitted, as JXSE's
//!   `ReliableOutputStream.send(Message)` sends it (see `reliable.rs`).
//!
//! A [`BidiListener`] accepts both modes (the request decides, as in
//! JXSE's `JxtaServerPipe`).

use std::sync::Arc;
use std::time::Duration;

use juxta_proto::advertisement::PipeAdvertisement;
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use juxta_proto::socket::setup::{
    classify, CloseSignal, ConnectRequest, ConnectResponse, SetupKind, SetupMessage,
};

use super::{InputPipe, PipeError, PipeMessage, PipeService, PIPE_SERVICE};
use crate::endpoint::Messenger;
use crate::peer::Inner;

mod reliable;

pub use reliable::{BidiStats, MAX_HELD_BYTES};

/// How a bidirectional pipe carries its messages (the `reliable` element of
/// the `JXTABIP` request); pass it to [`PipeService::connect_bidi_with`].
///
/// ```
/// use juxta::pipe::bidi::BidiMode;
/// // Juxta's default is JXSE's: unreliable.
/// assert_eq!(BidiMode::default(), BidiMode::Unreliable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BidiMode {
    /// Messages go as they are (JXSE's and Juxta's default).
    #[default]
    Unreliable,
    /// Each message is one `jxtarel` block: acknowledged, ordered and
    /// retransmitted (JXSE's `reliable=true`).
    Reliable,
}

/// Accepts bidirectional pipes on a pipe (JXSE's `JxtaServerPipe`).
pub struct BidiListener {
    inner: Arc<Inner>,
    adv: PipeAdvertisement,
    input: InputPipe,
}

impl PipeService {
    /// Listens for bidirectional pipe connections on the unicast pipe `adv`.
    pub fn bind_bidi(&self, adv: &PipeAdvertisement) -> Result<BidiListener, PipeError> {
        Ok(BidiListener {
            inner: self.inner.clone(),
            adv: adv.clone(),
            input: self.create_input_pipe(adv)?,
        })
    }

    /// Connects a bidirectional pipe to the listener on `adv` at `peer`, in
    /// the default [`BidiMode::Unreliable`] mode.
    pub async fn connect_bidi(
        &self,
        adv: &PipeAdvertisement,
        peer: PeerId,
        timeout: Duration,
    ) -> Result<BidiPipe, PipeError> {
        self.connect_bidi_with(adv, peer, timeout, BidiMode::Unreliable)
            .await
    }

    /// Connects a bidirectional pipe to the listener on `adv` at `peer`,
    /// asking for `mode`. The answer may overrule it (a JXSE server never
    /// does; its answer has no `reliable` element and the client's choice
    /// stands): see [`BidiPipe::mode`].
    ///
    /// ```no_run
    /// # async fn demo(peer: juxta::Peer, adv: juxta_proto::advertisement::PipeAdvertisement, server: juxta_proto::id::PeerId) -> Result<(), juxta::pipe::PipeError> {
    /// use std::time::Duration;
    /// use juxta::pipe::bidi::BidiMode;
    /// use juxta_proto::message::{Element, Message};
    /// let mut p = peer
    ///     .pipes()
    ///     .connect_bidi_with(&adv, server, Duration::from_secs(30), BidiMode::Reliable)
    ///     .await?;
    /// assert_eq!(p.mode(), BidiMode::Reliable);
    /// p.send(Message::new().with(Element::text("app", "text", "hi"))).await?;
    /// let reply = p.recv().await;
    /// p.close().await?;
    /// # let _ = reply; Ok(()) }
    /// ```
    pub async fn connect_bidi_with(
        &self,
        adv: &PipeAdvertisement,
        peer: PeerId,
        timeout: Duration,
        mode: BidiMode,
    ) -> Result<BidiPipe, PipeError> {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + timeout;
        let local = super::ephemeral_adv(adv, "");
        let mut input = InputPipe::open(inner, None, &local)?;
        let bound = self.resolve(adv, &[peer], timeout).await?;
        let messenger = crate::relay::route::messenger_to(inner, &bound, timeout).await?;
        let req = ConnectRequest {
            kind: SetupKind::BiDi,
            req_pipe: local,
            rem_peer: super::local_peer_adv(inner),
            reliable: mode == BidiMode::Reliable,
            connection_properties: None,
        };
        messenger
            .send(PIPE_SERVICE, Some(&adv.id.to_string()), req.to_message())
            .await?;
        let timed_out = || PipeError::ResolveTimeout {
            pipe: adv.id.to_string(),
            timeout,
        };
        let resp = loop {
            let m = tokio::time::timeout_at(deadline, input.recv())
                .await
                .map_err(|_| timed_out())?
                .ok_or(PipeError::Stopped)?;
            if let Some(SetupMessage::Response) = classify(&m.message) {
                match ConnectResponse::from_message(&m.message) {
                    Ok(r) => break r,
                    Err(e) => {
                        tracing::info!(error = %e, "bad bidi pipe answer ignored");
                        continue;
                    }
                }
            }
        };
        let reliable = resp.reliable.unwrap_or(mode == BidiMode::Reliable);
        Ok(BidiPipe::start(
            inner,
            messenger,
            resp.rem_pipe.id.to_string(),
            input,
            reliable,
        ))
    }
}

impl BidiListener {
    /// Waits for the next connection request and answers it.
    pub async fn accept(&mut self) -> Result<BidiPipe, PipeError> {
        loop {
            let (req, messenger, _) =
                super::next_setup_request(&self.inner, &mut self.input, SetupKind::BiDi)
                    .await
                    .ok_or(PipeError::Stopped)?;
            let local = super::ephemeral_adv(&self.adv, "");
            let input = InputPipe::open(&self.inner, None, &local)?;
            let resp = ConnectResponse {
                kind: SetupKind::BiDi,
                rem_pipe: local,
                rem_peer: super::local_peer_adv(&self.inner),
                // JXSE's server sends no `reliable` element (the client's
                // choice stands); an explicit `true` tells a client that
                // reads it the same.
                reliable: req.reliable.then_some(true),
                encrypt: None,
            };
            let remote_pipe = req.req_pipe.id.to_string();
            if let Err(e) = messenger
                .send(PIPE_SERVICE, Some(&remote_pipe), resp.to_message())
                .await
            {
                tracing::info!(error = %e, "bidi answer not sent");
                continue;
            }
            return Ok(BidiPipe::start(
                &self.inner,
                messenger,
                remote_pipe,
                input,
                req.reliable,
            ));
        }
    }
}

/// A connected bidirectional pipe.
pub struct BidiPipe {
    remote: PeerId,
    imp: Imp,
}

enum Imp {
    Unreliable(Box<Unreliable>),
    Reliable(reliable::ReliableBidi),
}

struct Unreliable {
    messenger: Messenger,
    remote_pipe: String,
    input: InputPipe,
    closed: bool,
}

impl BidiPipe {
    fn start(
        inner: &Arc<Inner>,
        messenger: Messenger,
        remote_pipe: String,
        input: InputPipe,
        reliable: bool,
    ) -> BidiPipe {
        let remote = messenger.remote();
        let imp = if reliable {
            Imp::Reliable(reliable::ReliableBidi::start(
                inner,
                messenger,
                remote_pipe,
                input,
            ))
        } else {
            Imp::Unreliable(Box::new(Unreliable {
                messenger,
                remote_pipe,
                input,
                closed: false,
            }))
        };
        BidiPipe { remote, imp }
    }

    /// The peer at the other end.
    pub fn remote(&self) -> PeerId {
        self.remote
    }

    /// The mode the pipe runs in.
    pub fn mode(&self) -> BidiMode {
        match self.imp {
            Imp::Unreliable(_) => BidiMode::Unreliable,
            Imp::Reliable(_) => BidiMode::Reliable,
        }
    }

    /// Counters of a reliable pipe (an unreliable pipe's are zero: its
    /// input is an ordinary input pipe's).
    pub fn stats(&self) -> BidiStats {
        match &self.imp {
            Imp::Unreliable(_) => BidiStats::default(),
            Imp::Reliable(r) => r.stats(),
        }
    }

    /// Sends a message; returns the bytes it took on the wire (reliable:
    /// the block's length). Reliable mode returns once the message is
    /// queued in the send window, not when the peer acknowledged it.
    pub async fn send(&self, msg: Message) -> Result<usize, PipeError> {
        match &self.imp {
            Imp::Unreliable(u) => {
                if u.closed {
                    return Err(PipeError::Stopped);
                }
                Ok(u.messenger
                    .send(PIPE_SERVICE, Some(&u.remote_pipe), msg)
                    .await?)
            }
            Imp::Reliable(r) => r.send(msg).await,
        }
    }

    /// The next message; `None` once the other side has closed the pipe
    /// (reliable mode: also once it failed).
    pub async fn recv(&mut self) -> Option<PipeMessage> {
        match &mut self.imp {
            Imp::Unreliable(u) => {
                if u.closed {
                    return None;
                }
                let m = u.input.recv().await?;
                if let Some(SetupMessage::Close(_)) = classify(&m.message) {
                    u.closed = true;
                    return None;
                }
                Some(m)
            }
            Imp::Reliable(r) => {
                let message = r.recv().await?;
                Some(PipeMessage {
                    message,
                    from: Some(self.remote),
                    verified: r.verified(),
                })
            }
        }
    }

    /// Closes the pipe, telling the other side. Reliable mode: the close
    /// goes in the stream and this waits (at most 15 s) until the peer
    /// acknowledged everything sent; dropping the pipe closes it in the
    /// background.
    pub async fn close(self) -> Result<(), PipeError> {
        match self.imp {
            Imp::Unreliable(u) => {
                u.messenger
                    .send(
                        PIPE_SERVICE,
                        Some(&u.remote_pipe),
                        CloseSignal::Close.to_message(SetupKind::BiDi),
                    )
                    .await?;
                Ok(())
            }
            Imp::Reliable(r) => r.close().await,
        }
    }
}
