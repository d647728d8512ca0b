//! Bidirectional pipes (JXSE's `JxtaBiDiPipe` and `JxtaServerPipe`): a
//! message channel both ways between two peers, set up like a JXTA socket
//! (`JXTABIP` request and answer between two ephemeral pipes) but carrying
//! whole messages. Juxta runs them in JXSE's default unreliable mode: over a
//! direct TCP or compact connection, messages already arrive in order and
//! intact.

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

    /// Connects a bidirectional pipe to the listener on `adv` at `peer`.
    pub async fn connect_bidi(
        &self,
        adv: &PipeAdvertisement,
        peer: PeerId,
        timeout: Duration,
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
            reliable: false,
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
        Ok(BidiPipe {
            messenger,
            remote_pipe: resp.rem_pipe.id.to_string(),
            input,
            closed: false,
        })
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
            if req.reliable {
                tracing::info!(peer = %req.rem_peer.peer_id, "reliable bidi pipe request refused: Juxta runs bidi pipes unreliable (over ordered connections)");
                continue;
            }
            let local = super::ephemeral_adv(&self.adv, "");
            let input = InputPipe::open(&self.inner, None, &local)?;
            let resp = ConnectResponse {
                kind: SetupKind::BiDi,
                rem_pipe: local,
                rem_peer: super::local_peer_adv(&self.inner),
                reliable: None,
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
            return Ok(BidiPipe {
                messenger,
                remote_pipe,
                input,
                closed: false,
            });
        }
    }
}

/// A connected bidirectional pipe.
pub struct BidiPipe {
    messenger: Messenger,
    remote_pipe: String,
    input: InputPipe,
    closed: bool,
}

impl BidiPipe {
    /// The peer at the other end.
    pub fn remote(&self) -> PeerId {
        self.messenger.remote()
    }

    /// Sends a message; returns the bytes it took on the wire.
    pub async fn send(&self, msg: Message) -> Result<usize, PipeError> {
        if self.closed {
            return Err(PipeError::Stopped);
        }
        Ok(self
            .messenger
            .send(PIPE_SERVICE, Some(&self.remote_pipe), msg)
            .await?)
    }

    /// The next message; `None` once the other side has closed the pipe.
    pub async fn recv(&mut self) -> Option<PipeMessage> {
        if self.closed {
            return None;
        }
        let m = self.input.recv().await?;
        if let Some(SetupMessage::Close(_)) = classify(&m.message) {
            self.closed = true;
            return None;
        }
        Some(m)
    }

    /// Closes the pipe, telling the other side.
    pub async fn close(mut self) -> Result<(), PipeError> {
        self.closed = true;
        self.messenger
            .send(
                PIPE_SERVICE,
                Some(&self.remote_pipe),
                CloseSignal::Close.to_message(SetupKind::BiDi),
            )
            .await?;
        Ok(())
    }
}
