//! JXSE's unreliable socket mode (`stream=false` in the connect request):
//! no `jxtarel` blocks, acks or retransmissions; each write travels as one
//! pipe message holding a `JXTASOC:data` element
//! (`JxtaSocket.write`), and the receiver reads the data elements in the
//! order the messages arrive (`JxtaSocketInputStream`). A `JXTASOC:close`
//! (`close`) ends the stream and is answered `closeACK`: JXSE's `close()`
//! waits for that (up to 20 s) even in this mode, though it sends none
//! itself here.
//!
//! What the peer sends is hostile input: only messages from the socket's
//! peer count (others are dropped and counted in
//! [`crate::Stats::undeliverable`]); the receive queue is the input pipe's
//! bounded queue ([`crate::PeerConfig::listener_queue`] messages) plus at
//! most [`QUEUE`] data elements here, so a peer writing faster than the
//! application reads is pushed back, as any pipe sender is.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use juxta_proto::message::{Element, Message};
use juxta_proto::socket::setup::{CloseSignal, SetupKind, NS_SOCKET};
use tokio::io::ReadBuf;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::endpoint::Messenger;
use crate::peer::Inner;
use crate::pipe::{InputPipe, PIPE_SERVICE};

/// The data element's name (`JXTASOC:data`).
const ELEM_DATA: &str = "data";
/// Largest write sent as one message (JXSE's socket output buffer default).
pub(super) const MAX_CHUNK: usize = 64 * 1024;
/// Data elements received and not yet read, at most.
const QUEUE: usize = 64;

type SendFuture = Pin<Box<dyn Future<Output = io::Result<usize>> + Send>>;

/// One unreliable socket.
pub(super) struct UnreliableSocket {
    messenger: Messenger,
    remote_pipe: String,
    rx: mpsc::Receiver<Bytes>,
    pending: Bytes,
    sending: Option<SendFuture>,
    closing: Option<SendFuture>,
    shut: bool,
    /// The peer sent `close`: nothing more is sent to its pipe.
    peer_closed: Arc<AtomicBool>,
    reader: JoinHandle<()>,
}

impl UnreliableSocket {
    /// Starts reading `input` (the socket's local pipe) for data from
    /// `remote` and sends to `remote_pipe` over `messenger`.
    pub(super) fn start(
        inner: &Arc<Inner>,
        messenger: Messenger,
        remote_pipe: String,
        mut input: InputPipe,
    ) -> UnreliableSocket {
        let (tx, rx) = mpsc::channel(QUEUE);
        let remote = messenger.remote();
        let weak = Arc::downgrade(inner);
        let acker = messenger.clone();
        let ack_pipe = remote_pipe.clone();
        let peer_closed = Arc::new(AtomicBool::new(false));
        let closed = peer_closed.clone();
        let reader = tokio::spawn(async move {
            while let Some(m) = input.recv().await {
                if m.from != Some(remote) {
                    if let Some(inner) = weak.upgrade() {
                        inner.stats.undeliverable.fetch_add(1, Ordering::Relaxed);
                    }
                    tracing::debug!(from = ?m.from, %remote, "unreliable socket: message from another peer dropped");
                    continue;
                }
                if let Some((_, signal)) = CloseSignal::from_message(&m.message) {
                    closed.store(true, Ordering::Release);
                    if signal == CloseSignal::Close {
                        let _ = acker.post(
                            PIPE_SERVICE,
                            Some(&ack_pipe),
                            CloseSignal::CloseAck.to_message(SetupKind::Socket),
                        );
                    }
                    return;
                }
                let data = m.message.elements.iter().filter(|e| {
                    &*e.namespace == NS_SOCKET && &*e.name == ELEM_DATA && !e.data.is_empty()
                });
                for e in data {
                    if tx.send(e.data.clone()).await.is_err() {
                        return;
                    }
                }
            }
        });
        UnreliableSocket {
            messenger,
            remote_pipe,
            rx,
            pending: Bytes::new(),
            sending: None,
            closing: None,
            shut: false,
            peer_closed,
            reader,
        }
    }

    fn send_future(&self, msg: Message) -> SendFuture {
        let m = self.messenger.clone();
        let pipe = self.remote_pipe.clone();
        Box::pin(async move {
            m.send(PIPE_SERVICE, Some(&pipe), msg)
                .await
                .map_err(|e| io::Error::new(io::ErrorKind::ConnectionReset, e.to_string()))
        })
    }

    pub(super) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pending.is_empty() {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(b)) => self.pending = b,
                // The peer closed (or the reader ended): end of stream.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.pending.len().min(buf.remaining());
        buf.put_slice(&self.pending.split_to(n));
        Poll::Ready(Ok(()))
    }

    pub(super) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.shut {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        // One message in flight: finish it first.
        if let Some(f) = self.sending.as_mut() {
            match f.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => {
                    self.sending = None;
                    r?;
                }
            }
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let n = data.len().min(MAX_CHUNK);
        let msg = Message::new().with(Element::bytes(
            NS_SOCKET,
            ELEM_DATA,
            Bytes::copy_from_slice(&data[..n]),
        ));
        let mut f = self.send_future(msg);
        // The bytes are taken: a send still under way finishes on the
        // next write, flush or shutdown.
        if let Poll::Ready(r) = f.as_mut().poll(cx) {
            r?;
        } else {
            self.sending = Some(f);
        }
        Poll::Ready(Ok(n))
    }

    pub(super) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(f) = self.sending.as_mut() {
            let r = std::task::ready!(f.as_mut().poll(cx));
            self.sending = None;
            r?;
        }
        Poll::Ready(Ok(()))
    }

    /// Flushes, then sends `close` once (JXSE expects no more).
    pub(super) fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_flush(cx))?;
        if (self.shut || self.peer_closed.load(Ordering::Acquire)) && self.closing.is_none() {
            self.shut = true;
            return Poll::Ready(Ok(()));
        }
        if self.closing.is_none() {
            self.shut = true;
            let f = self.send_future(CloseSignal::Close.to_message(SetupKind::Socket));
            self.closing = Some(f);
        }
        let f = self.closing.as_mut().expect("close under way");
        let r = std::task::ready!(f.as_mut().poll(cx));
        self.closing = None;
        Poll::Ready(r.map(|_| ()))
    }
}

impl Drop for UnreliableSocket {
    fn drop(&mut self) {
        self.reader.abort();
        if !self.shut && !self.peer_closed.load(Ordering::Acquire) {
            // Best effort, never awaited: the peer learns the socket is gone.
            let _ = self.messenger.post(
                PIPE_SERVICE,
                Some(&self.remote_pipe),
                CloseSignal::Close.to_message(SetupKind::Socket),
            );
        }
    }
}
