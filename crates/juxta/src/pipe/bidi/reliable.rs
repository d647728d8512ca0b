//! JXSE's reliable bidi pipe mode (`reliable=true` in the `JXTABIP`
//! request): every message travels as one `jxtarel` block holding the
//! message in the binary wire format (with the CBJX trailer when CBJX is
//! on), acknowledged, ordered and retransmitted by the `jxtarel` engine
//! ([`juxta_proto::socket::reliable`]); the framing of a block is
//! [`juxta_proto::socket::bidi_block`]. The close is a `JXTABIP:close`
//! message in a block of its own.
//!
//! One driver task per pipe owns the engine: it reads the pipe's local input
//! pipe, feeds blocks and acks to the engine, hands whole messages to the
//! application through a bounded queue (a block is acknowledged when its
//! message enters that queue, so a slow reader stops the sender), writes the
//! application's blocks when the engine has room, and runs the timers. What
//! the engine sends goes through a small queue to a sender task, so the
//! driver keeps reading (and acknowledging) while a large block is written.
//!
//! Hostile input: only messages from the pipe's peer count (others are
//! dropped and counted, [`BidiStats::foreign`], and in
//! [`crate::Stats::undeliverable`]); malformed `jxtarel` elements, blocks
//! over the size limit and blocks that are not a valid (signed) message are
//! refused and counted ([`BidiStats::malformed`]). Received bytes held are
//! bounded by [`MAX_HELD_BYTES`] plus one message (a block that would
//! exceed it is dropped unless it is the next one in order; the sender
//! retransmits it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use juxta_proto::id::PeerId;
use juxta_proto::message::cbjx::CbjxVerifier;
use juxta_proto::message::Message;
use juxta_proto::socket::bidi_block::{self, BlockError, DEFAULT_MAX_BLOCK_MESSAGE};
use juxta_proto::socket::reliable::{
    self, Incoming, ReliableConfig, ReliableError, ReliableStats, ReliableStream,
};
use juxta_proto::socket::setup::{classify, CloseSignal, SetupMessage};
use tokio::sync::{mpsc, oneshot};

use crate::endpoint::{Messenger, Verified};
use crate::peer::Inner;
use crate::pipe::{InputPipe, PipeError, PIPE_SERVICE};

/// Received block bytes held (in order or not) beyond which a block other
/// than the next one in order is dropped.
pub const MAX_HELD_BYTES: usize = 32 * 1024 * 1024;
/// Messages received and not yet taken by [`super::BidiPipe::recv`].
const APP_QUEUE: usize = 16;
/// Blocks held for the application, in order or not (JXSE sends up to 50
/// unacknowledged blocks).
const RECV_BLOCKS: u32 = 64;
/// Blocks in flight (JXSE's bidi window, `FixedFlowControl(50)`).
const WINDOW: u32 = 50;
/// How long a close waits for the peer to acknowledge everything sent
/// (JXSE's bidi pipe waits its 15 s timeout).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(15);
/// After the peer closed: how long we keep retransmitting what it has not
/// acknowledged yet.
const LINGER: Duration = Duration::from_secs(15);
/// Messages (blocks, acks) queued for the sender task; further transmits
/// wait in the engine.
const OUT_QUEUE: usize = 8;

/// Counters of a bidi pipe ([`super::BidiPipe::stats`]).
///
/// ```
/// use juxta::pipe::bidi::BidiStats;
/// // An unreliable pipe's counters (its input is an ordinary input pipe's).
/// let s = BidiStats::default();
/// assert_eq!((s.foreign, s.malformed, s.over_budget), (0, 0, 0));
/// assert!(s.reliable.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BidiStats {
    /// Messages from another peer than the pipe's, dropped.
    pub foreign: u64,
    /// Malformed `jxtarel` messages, oversized blocks and blocks that are
    /// not a valid (signed) message, refused.
    pub malformed: u64,
    /// Blocks dropped because [`MAX_HELD_BYTES`] were held.
    pub over_budget: u64,
    /// The `jxtarel` engine's counters (reliable mode only).
    pub reliable: Option<ReliableStats>,
}

#[derive(Default)]
struct Counters {
    foreign: AtomicU64,
    malformed: AtomicU64,
    over_budget: AtomicU64,
    engine: Mutex<ReliableStats>,
    /// Why the pipe failed, once it has.
    failure: OnceLock<ReliableError>,
    /// Why sending failed (given to the first caller who asks).
    send_error: Mutex<Option<crate::SendError>>,
    /// The weakest verification of the remote's messages accepted so far
    /// (a message's bytes may come from several of them).
    weakest: Mutex<Option<Verified>>,
}

impl Counters {
    fn accepted(&self, v: Verified) {
        let mut w = self.weakest.lock().expect("verified lock");
        *w = Some(match *w {
            Some(old) if strength(old) <= strength(v) => old,
            _ => v,
        });
    }
}

fn strength(v: Verified) -> u8 {
    match v {
        Verified::Certificate => 3,
        Verified::Handshake => 2,
        Verified::CbjxSignature => 1,
        _ => 0,
    }
}

/// Where the driver answers a block handed to it.
type Reply = oneshot::Sender<Result<(), PipeError>>;

impl Counters {
    /// The sender's error, or `Stopped` once it was taken.
    fn take_send_error(&self) -> PipeError {
        match self.send_error.lock().expect("error lock").take() {
            Some(e) => PipeError::Send(e),
            None => PipeError::Stopped,
        }
    }
}

enum Cmd {
    /// One encoded block; answered once the engine took it.
    Block(Bytes, Reply),
}

/// The application's side of a reliable bidi pipe.
pub(super) struct ReliableBidi {
    inner: Weak<Inner>,
    cmd: Option<mpsc::Sender<Cmd>>,
    close: Option<oneshot::Sender<Reply>>,
    rx: mpsc::Receiver<Message>,
    counters: Arc<Counters>,
    max_block: usize,
}

impl ReliableBidi {
    /// Starts the driver for a connected pipe: `input` is our ephemeral
    /// pipe, `remote_pipe` the peer's.
    pub(super) fn start(
        inner: &Arc<Inner>,
        messenger: Messenger,
        remote_pipe: String,
        input: InputPipe,
    ) -> ReliableBidi {
        let max_block = usize::try_from(inner.cfg.connection.max_message)
            .unwrap_or(usize::MAX)
            .saturating_sub(64 * 1024)
            .clamp(1024, DEFAULT_MAX_BLOCK_MESSAGE);
        let cfg = ReliableConfig {
            block_size: max_block,
            max_window: WINDOW,
            recv_buffer_blocks: RECV_BLOCKS,
            dead_peer_timeout: Duration::from_secs(60),
            max_send_buffer: max_block.saturating_mul(2),
            ..ReliableConfig::default()
        };
        let (cmd_tx, cmd_rx) = mpsc::channel(1);
        let (close_tx, close_rx) = oneshot::channel();
        let (app_tx, app_rx) = mpsc::channel(APP_QUEUE);
        let counters = Arc::new(Counters::default());
        let driver = Driver {
            inner: Arc::downgrade(inner),
            remote: messenger.remote(),
            messenger,
            remote_pipe,
            engine: ReliableStream::new(cfg, inner.clock.now()),
            clock: inner.clock,
            verifier: CbjxVerifier::new(),
            require_cbjx: inner.cfg.connection.cbjx,
            max_block,
            counters: counters.clone(),
            consumed_blocks: 0,
            consumed_bytes: 0,
            app: Some(app_tx),
            remote_closed: false,
        };
        inner.tasks.spawn(driver.run(input, cmd_rx, close_rx));
        ReliableBidi {
            inner: Arc::downgrade(inner),
            cmd: Some(cmd_tx),
            close: Some(close_tx),
            rx: app_rx,
            counters,
            max_block,
        }
    }

    fn failed(&self) -> PipeError {
        match self.counters.failure.get() {
            Some(e) => PipeError::Reliable(e.clone()),
            None => self.counters.take_send_error(),
        }
    }

    /// Encodes `msg` as a block and hands it to the driver; returns the
    /// block's length.
    pub(super) async fn send(&self, msg: Message) -> Result<usize, PipeError> {
        let inner = self.inner.upgrade().ok_or(PipeError::Stopped)?;
        let signer = inner.cfg.connection.cbjx.then(|| inner.identity.clone());
        let order = inner.cfg.connection.hash_order;
        drop(inner);
        let block = bidi_block::encode_block(&msg, order, signer.as_deref(), self.max_block)?;
        let len = block.len();
        let cmd = self.cmd.as_ref().ok_or(PipeError::Stopped)?;
        let (tx, rx) = oneshot::channel();
        cmd.send(Cmd::Block(block, tx))
            .await
            .map_err(|_| self.failed())?;
        rx.await.map_err(|_| self.failed())??;
        Ok(len)
    }

    /// The next message; `None` once the peer closed (or the pipe failed).
    pub(super) async fn recv(&mut self) -> Option<Message> {
        self.rx.recv().await
    }

    /// How the remote's messages were verified: the weakest of those
    /// accepted so far.
    pub(super) fn verified(&self) -> Verified {
        self.counters
            .weakest
            .lock()
            .expect("verified lock")
            .unwrap_or(Verified::Unverified)
    }

    /// Sends the close (in a block) and waits until the peer acknowledged
    /// everything, at most [`CLOSE_TIMEOUT`].
    pub(super) async fn close(mut self) -> Result<(), PipeError> {
        self.cmd = None;
        let (tx, rx) = oneshot::channel();
        let asked = self.close.take().is_some_and(|c| c.send(tx).is_ok());
        if !asked {
            return Ok(());
        }
        match rx.await {
            Ok(r) => r,
            // The driver ended first (the peer closed, or it failed).
            Err(_) => match self.counters.failure.get() {
                Some(e) => Err(PipeError::Reliable(e.clone())),
                None => Ok(()),
            },
        }
    }

    pub(super) fn stats(&self) -> BidiStats {
        BidiStats {
            foreign: self.counters.foreign.load(Ordering::Relaxed),
            malformed: self.counters.malformed.load(Ordering::Relaxed),
            over_budget: self.counters.over_budget.load(Ordering::Relaxed),
            reliable: Some(self.counters.engine.lock().expect("stats lock").clone()),
        }
    }
}

struct Driver {
    inner: Weak<Inner>,
    remote: PeerId,
    messenger: Messenger,
    remote_pipe: String,
    engine: ReliableStream,
    /// The peer's clock, the engine's time.
    clock: juxta_proto::time::Clock,
    verifier: CbjxVerifier,
    require_cbjx: bool,
    max_block: usize,
    counters: Arc<Counters>,
    consumed_blocks: u64,
    consumed_bytes: u64,
    /// `None` once the application no longer gets messages (the peer
    /// closed, we are closing, or the application dropped the pipe).
    app: Option<mpsc::Sender<Message>>,
    remote_closed: bool,
}

impl Driver {
    fn malformed(&self, why: &dyn std::fmt::Display) {
        self.counters.malformed.fetch_add(1, Ordering::Relaxed);
        if let Some(inner) = self.inner.upgrade() {
            inner.stats.undeliverable.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(peer = %self.remote, error = %why, "reliable bidi pipe: input refused");
    }

    /// Feeds one message of our pipe to the engine.
    fn on_message(&mut self, from: Option<PeerId>, verified: Verified, msg: &Message) {
        if from != Some(self.remote) {
            self.counters.foreign.fetch_add(1, Ordering::Relaxed);
            if let Some(inner) = self.inner.upgrade() {
                inner.stats.undeliverable.fetch_add(1, Ordering::Relaxed);
            }
            tracing::debug!(?from, remote = %self.remote, "reliable bidi pipe: message from another peer dropped");
            return;
        }
        self.counters.accepted(verified);
        match classify(msg) {
            // A plain close (JXSE sends its close in a block in this mode;
            // a plain one is taken as well).
            Some(SetupMessage::Close(CloseSignal::Close)) => {
                self.remote_closed = true;
                return;
            }
            // A repeated request or answer: nothing for the stream.
            Some(_) => return,
            None => {}
        }
        let items = match reliable::parse(msg) {
            Ok(items) => items,
            Err(e) => return self.malformed(&e),
        };
        let now = self.clock.now();
        for item in items {
            match item {
                Incoming::Block { seq, data, retry } => {
                    if data.len() > self.max_block {
                        self.malformed(&BlockError::TooLarge {
                            len: data.len(),
                            max: self.max_block,
                        });
                        continue;
                    }
                    let received = self.engine.stats().bytes_received;
                    let held = received.saturating_sub(self.consumed_bytes);
                    let next = self.consumed_blocks.saturating_add(1);
                    if u64::from(seq) != next
                        && held.saturating_add(data.len() as u64) > MAX_HELD_BYTES as u64
                    {
                        self.counters.over_budget.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    self.engine.handle_block(now, seq, data, retry);
                }
                Incoming::Ack { cumulative, sacks } => {
                    self.engine.handle_ack(now, cumulative, &sacks)
                }
            }
        }
        if reliable::is_keepalive(msg) {
            self.engine.handle_keepalive(now);
        }
    }

    /// Takes in-order blocks out of the engine while the application's
    /// queue has room (or nobody reads any more): one block, one message.
    fn consume(&mut self) {
        while self.engine.readable() > 0 && !self.remote_closed {
            let permit = match &self.app {
                Some(tx) => match tx.try_reserve() {
                    Ok(p) => Some(p),
                    Err(mpsc::error::TrySendError::Full(())) => return,
                    Err(mpsc::error::TrySendError::Closed(())) => None,
                },
                None => None,
            };
            let Some(block) = self.engine.read_chunk(usize::MAX) else {
                return;
            };
            self.consumed_blocks += 1;
            self.consumed_bytes += block.len() as u64;
            match bidi_block::decode_block(
                block,
                &self.remote,
                self.require_cbjx,
                &mut self.verifier,
                self.max_block,
            ) {
                Ok(m) if bidi_block::is_close(&m) => {
                    self.remote_closed = true;
                }
                Ok(m) => {
                    if let Some(p) = permit {
                        p.send(m);
                    }
                }
                Err(e) => self.malformed(&e),
            }
        }
    }

    /// Hands what the engine has ready to the sender task, as far as its
    /// queue takes it; returns `true` if the queue is full (the driver then
    /// waits for room).
    fn pump(&mut self, out: &mpsc::Sender<Message>) -> bool {
        // The driver is the only producer: room seen here stays.
        while out.capacity() > 0 {
            let Some(t) = self.engine.poll_transmit(self.clock.now()) else {
                return false;
            };
            if out.try_send(t.into_message()).is_err() {
                return false; // the sender ended; the driver sees it next
            }
        }
        true
    }

    fn fail(&self, e: ReliableError) {
        let _ = self.counters.failure.set(e);
    }

    async fn run(
        mut self,
        mut input: InputPipe,
        mut cmd: mpsc::Receiver<Cmd>,
        mut close_req: oneshot::Receiver<Reply>,
    ) {
        let conn = self.messenger.connection().clone();
        // Sending runs on a task of its own, so the driver keeps reading
        // our pipe (and acking) while a large block is being written: two
        // peers sending to each other never wait on each other's reader.
        let (out, mut out_rx) = mpsc::channel::<Message>(OUT_QUEUE);
        let sender = {
            let messenger = self.messenger.clone();
            let pipe = self.remote_pipe.clone();
            let counters = self.counters.clone();
            tokio::spawn(async move {
                while let Some(m) = out_rx.recv().await {
                    if let Err(e) = messenger.send(PIPE_SERVICE, Some(&pipe), m).await {
                        *counters.send_error.lock().expect("error lock") = Some(e);
                        return;
                    }
                }
            })
        };
        let mut pending: Option<(Bytes, Option<Reply>)> = None;
        let mut closer: Option<Reply> = None;
        let mut closing_at: Option<tokio::time::Instant> = None;
        let mut linger_until: Option<tokio::time::Instant> = None;
        let mut cmd_open = true;
        let mut close_open = true;
        let result: Result<(), PipeError> = loop {
            // The application's block (or our close), when the engine has room.
            if let Some((b, _)) = &pending {
                if self.engine.writable() >= b.len() {
                    let (b, reply) = pending.take().expect("pending block");
                    if self.engine.write_bytes(b).is_err() {
                        // Only after an error (room was checked).
                        let e = self.engine.error().cloned();
                        if let Some(r) = reply {
                            let _ = r.send(Err(e
                                .clone()
                                .map_or(PipeError::Stopped, PipeError::Reliable)));
                        }
                    } else {
                        self.engine.flush();
                        if let Some(r) = reply {
                            let _ = r.send(Ok(()));
                        }
                    }
                }
            }
            // Counters first: what the application reads next is counted.
            *self.counters.engine.lock().expect("stats lock") = self.engine.stats().clone();
            self.consume();
            if out.is_closed() {
                break Err(self.counters.take_send_error());
            }
            let out_full = self.pump(&out);
            if let Some(e) = self.engine.error() {
                let e = e.clone();
                self.fail(e.clone());
                break Err(PipeError::Reliable(e));
            }
            if self.remote_closed {
                // No more messages for the application; what we sent may
                // still need retransmitting for a while.
                self.app = None;
                cmd_open = false;
                if let Some((_, Some(r))) = pending.take() {
                    let _ = r.send(Err(PipeError::Stopped));
                }
                // Sends already queued fail now, not when the driver ends.
                cmd.close();
                while let Ok(Cmd::Block(_, r)) = cmd.try_recv() {
                    let _ = r.send(Err(PipeError::Stopped));
                }
                linger_until.get_or_insert_with(|| tokio::time::Instant::now() + LINGER);
            }
            let closing = closing_at.is_some();
            if (closing || self.remote_closed) && pending.is_none() && self.engine.all_acked() {
                break Ok(());
            }
            let now = tokio::time::Instant::now();
            if closing_at.is_some_and(|d| now >= d) {
                break Err(PipeError::CloseTimeout(CLOSE_TIMEOUT));
            }
            if linger_until.is_some_and(|d| now >= d) {
                break Ok(());
            }
            let timer = self
                .engine
                .poll_timeout()
                .map(|t| tokio::time::Instant::from_std(self.clock.instant(t)));
            let wake_at = [timer, closing_at, linger_until]
                .into_iter()
                .flatten()
                .min();
            let want_room = self.engine.readable() > 0 && !self.remote_closed;
            let app = self.app.clone();
            tokio::select! {
                m = input.recv() => match m {
                    Some(m) => self.on_message(m.from, m.verified, &m.message),
                    None => break Err(PipeError::Stopped),
                },
                c = cmd.recv(), if cmd_open && pending.is_none() && !closing => match c {
                    Some(Cmd::Block(b, reply)) => pending = Some((b, Some(reply))),
                    None => cmd_open = false,
                },
                c = &mut close_req, if close_open && pending.is_none() && !closing => {
                    close_open = false;
                    // Closing (asked, or the application dropped the pipe).
                    closer = c.ok();
                    self.app = None;
                    cmd_open = false;
                    if !self.remote_closed {
                        match self.close_block() {
                            Ok(b) => {
                                pending = Some((b, None));
                                closing_at = Some(tokio::time::Instant::now() + CLOSE_TIMEOUT);
                            }
                            Err(e) => break Err(e),
                        }
                    }
                },
                r = async { app.as_ref().expect("app").reserve().await.map(drop) }, if want_room && app.is_some() => {
                    if r.is_err() {
                        self.app = None;
                    }
                },
                r = out.reserve(), if out_full => {
                    if r.is_err() {
                        break Err(self.counters.take_send_error());
                    }
                },
                _ = conn.closed() => break Err(PipeError::Stopped),
                _ = async {
                    match wake_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => self.engine.handle_timeout(self.clock.now()),
            }
        };
        if let Some((_, Some(r))) = pending.take() {
            let _ = r.send(Err(PipeError::Stopped));
        }
        // The sender finishes what is queued (acks, the last blocks) and
        // ends; after a failure there is nothing worth sending.
        drop(out);
        if result.is_err() {
            sender.abort();
        }
        if let Err(e) = &result {
            tracing::debug!(peer = %self.remote, error = %e, "reliable bidi pipe ended");
        }
        if let Some(c) = closer {
            let _ = c.send(result);
        }
    }

    fn close_block(&self) -> Result<Bytes, PipeError> {
        let inner = self.inner.upgrade().ok_or(PipeError::Stopped)?;
        let signer = inner.cfg.connection.cbjx.then(|| inner.identity.clone());
        Ok(bidi_block::encode_block(
            &bidi_block::close_message(),
            inner.cfg.connection.hash_order,
            signer.as_deref(),
            self.max_block,
        )?)
    }
}
