//! Secure sockets: a TLS 1.3 session ([`SecureChannel`], the one secure
//! pipes use, with the same peer-ID authentication) run over a JXTA
//! socket's byte stream.
//!
//! Set-up: the client's connection request carries a `juxta:secure`
//! element; a server that agrees answers with one too (JXSE ignores the
//! element and does not answer it, so a secure socket towards JXSE fails
//! with [`SocketError::SecureRefused`]). Once the plain socket is up (stream
//! mode between Juxta peers on a direct compact connection, `jxtarel`
//! otherwise) the client runs the TLS handshake as its first bytes,
//! expecting the server's peer ID; the server learns the client's peer ID
//! from its certificate and requires it to be the peer at the other end of
//! the connection. Both sides give up after
//! [`SocketConfig::connect_timeout`](super::SocketConfig::connect_timeout)
//! ([`SocketError::HandshakeTimeout`]).
//!
//! Data: each write seals up to [`PIPELINED_WRITE`] bytes (32 records)
//! after a read, twice as much with each further write up to
//! [`MAX_WRITE`], into records whose bytes go to the plain socket as one
//! write (framed straight from that buffer in stream mode), so a large
//! write is sealed, carried and opened piece by piece, the three
//! overlapping. When the plain socket
//! cannot take them at once (its previous write still going out, or no
//! credit), they wait in the socket and go on with the next write, read,
//! `flush` or `shutdown`: call `flush` after the last write of a burst
//! unless a read follows (as with any buffered `AsyncWrite`). The records
//! are encrypted straight from the caller's buffer into a sealing buffer
//! the socket keeps from write to write. Reads take the plain socket's
//! received chunks without copying and decrypt each record straight into
//! the caller's buffer when its plaintext fits there whole; the rest is
//! decrypted into a plaintext buffer (reused once read out) and copied
//! from there.
//!
//! Errors: a record that fails authentication (tampered, replayed,
//! reordered), any other TLS protocol violation, or an end of stream
//! without the peer's `close_notify` (truncation) fail reads and writes on
//! this socket with [`io::ErrorKind::InvalidData`] (the text names the TLS
//! error; the end of stream gives [`io::ErrorKind::UnexpectedEof`]); the
//! TLS alert is sent and the plain socket aborted. Other sockets and pipes
//! on the same connection are not affected. Errors of the plain socket
//! pass through unchanged.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use juxta_proto::id::PeerId;
use juxta_proto::message::{Element, Message};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::{JxtaSocket, SocketError};
use crate::peer::Inner;
use crate::pipe::tls::{
    sealed_len, SecureChannel, TlsError, MAX_RECORD_PLAINTEXT, RECORD_OVERHEAD,
};

const NS_JUXTA: &str = "juxta";
/// The set-up element asking for (request) and agreeing to (answer) TLS.
const ELEM_SECURE: &str = "secure";
/// The bound on plaintext sealed per write: 64 records fill exactly one
/// stream mode data message of 1 MiB (the most a relayed stream carries,
/// so a secure socket's writes are never split, relayed or not). Writes
/// seal [`PIPELINED_WRITE`] (half of it) first after a read.
pub const MAX_WRITE: usize = juxta_proto::socket::stream::MAX_RELAYED_CHUNK - 64 * RECORD_OVERHEAD;
/// Most plaintext the first write after a read seals: 32 records (512
/// KiB) go out as one frame (or data message), and the receiver decrypts
/// them while the next are sealed here, so that on two cores encryption,
/// the transfer and decryption overlap instead of running one after the
/// other for a whole [`MAX_WRITE`]. Each further write seals twice as
/// much, up to [`MAX_WRITE`].
pub const PIPELINED_WRITE: usize = 32 * MAX_RECORD_PLAINTEXT;
const _: () = assert!(PIPELINED_WRITE <= MAX_WRITE);
/// Most ciphertext taken from the plain socket per read.
const READ_CHUNK: usize = 1024 * 1024 + 64 * 1024;
/// Handshake bytes read at once.
const HANDSHAKE_READ: usize = 4 * MAX_RECORD_PLAINTEXT;

/// The `juxta:secure` set-up element.
pub(super) fn secure_element() -> Element {
    Element::text(NS_JUXTA, ELEM_SECURE, "tls1.3")
}

/// Whether a set-up message carries the `juxta:secure` element.
pub(super) fn asks_secure(m: &Message) -> bool {
    m.get(NS_JUXTA, ELEM_SECURE).is_some()
}

/// Runs the handshake over `plain`: the client (`expect` set) proves the
/// server is that peer; the server requires the client to be the peer at
/// the other end of the connection. Bounded by `timeout`.
pub(super) async fn handshake(
    inner: &Arc<Inner>,
    mut plain: JxtaSocket,
    expect: Option<PeerId>,
    timeout: Duration,
) -> Result<JxtaSocket, SocketError> {
    let mut chan = match expect {
        Some(p) => SecureChannel::client(crate::pipe::secure::client_cfg(inner)?, p)?,
        None => SecureChannel::server(crate::pipe::secure::server_cfg(inner)?)?,
    };
    let remote = plain.remote();
    let run = async {
        let mut buf = vec![0u8; HANDSHAKE_READ];
        loop {
            while let Some(b) = chan.take_tls(usize::MAX) {
                plain.write_all(&b).await?;
            }
            plain.flush().await?;
            if !chan.is_handshaking() {
                return Ok::<(), SocketError>(());
            }
            let n = plain.read(&mut buf).await?;
            if n == 0 {
                return Err(SocketError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the socket during the TLS handshake",
                )));
            }
            if let Err(e) = chan.read_tls(&buf[..n]) {
                // Tell the peer why, best effort.
                if let Some(b) = chan.take_tls(usize::MAX) {
                    let _ = plain.write_all(&b).await;
                }
                return Err(e.into());
            }
        }
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            plain.abort();
            return Err(e);
        }
        Err(_) => {
            plain.abort();
            return Err(SocketError::HandshakeTimeout(timeout));
        }
    }
    let proven = chan.peer_id().ok_or(TlsError::NoCertificate)?;
    if proven != remote {
        plain.abort();
        return Err(TlsError::PeerMismatch {
            expected: Box::new(remote),
            presented: Box::new(proven),
        }
        .into());
    }
    let mut early = BytesMut::new();
    // Application data that came with the last handshake flight.
    chan.read_plaintext(&mut early)?;
    let early = early.freeze();
    Ok(JxtaSocket {
        remote,
        imp: super::Imp::Secure(Box::new(SecureSocket {
            plain: Some(plain),
            chan,
            out: Vec::new(),
            out_len: 0,
            sent: 0,
            plain_in: early,
            failed: None,
            close_sent: false,
            piece: PIPELINED_WRITE,
        })),
    })
}

/// An established secure socket.
pub(super) struct SecureSocket {
    /// The plain socket (`None` once aborted after a TLS failure).
    plain: Option<JxtaSocket>,
    chan: SecureChannel,
    /// Sealed bytes, `out[..out_len]`; those from `sent` on are not yet
    /// taken by the plain socket. The buffer keeps its length (every byte
    /// initialized, records are encrypted straight into it) and is reused
    /// from write to write (no fresh memory, so no page faults, per write).
    out: Vec<u8>,
    out_len: usize,
    sent: usize,
    /// Decrypted bytes not yet read.
    plain_in: Bytes,
    failed: Option<(io::ErrorKind, String)>,
    close_sent: bool,
    /// Plaintext the next write seals at most: [`PIPELINED_WRITE`] after a
    /// read (a request's or a response's first piece, so its receiver
    /// starts decrypting early), doubling with each write after that up
    /// to [`MAX_WRITE`] (fewer, larger frames once the pipeline runs).
    piece: usize,
}

impl SecureSocket {
    pub(super) fn plain(&self) -> Option<&JxtaSocket> {
        self.plain.as_ref()
    }

    fn err(&self) -> Option<io::Error> {
        self.failed
            .as_ref()
            .map(|(k, why)| io::Error::new(*k, why.clone()))
    }

    /// A TLS failure: the alert goes out best effort, the plain socket is
    /// aborted, reads and writes fail from now on.
    fn fail(&mut self, kind: io::ErrorKind, why: String, cx: &mut Context<'_>) -> io::Error {
        if self.failed.is_none() {
            tracing::info!(error = %why, "secure socket failed");
            self.failed = Some((kind, why));
            if let Some(mut p) = self.plain.take() {
                if let Some(alert) = self.chan.take_tls(usize::MAX) {
                    let _ = Pin::new(&mut p).poll_write(cx, &alert);
                }
                p.abort();
            }
        }
        self.err().expect("failed above")
    }

    /// Writes the pending sealed bytes to the plain socket.
    fn poll_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(p) = self.plain.as_mut() else {
            return Poll::Ready(Err(self.err().unwrap_or_else(|| {
                io::Error::new(io::ErrorKind::BrokenPipe, "secure socket closed")
            })));
        };
        while self.sent < self.out_len {
            match ready!(Pin::new(&mut *p).poll_write(cx, &self.out[self.sent..self.out_len])) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.sent += n,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.out_len = 0;
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    pub(super) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // A write the plain socket could not take at once goes on from
        // here too: a task that writes and then reads needs no flush.
        if self.sent < self.out_len && self.failed.is_none() {
            if let Poll::Ready(Err(e)) = self.poll_out(cx) {
                return Poll::Ready(Err(e));
            }
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if self.plain_in.is_empty() {
                if let Some(b) = self.chan.take_plaintext() {
                    self.plain_in = b;
                }
            }
            if !self.plain_in.is_empty() {
                let n = self.plain_in.len().min(buf.remaining());
                buf.put_slice(&self.plain_in[..n]);
                self.plain_in.advance(n);
                self.piece = PIPELINED_WRITE;
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = self.err() {
                return Poll::Ready(Err(e));
            }
            if self.chan.peer_closed() {
                return Poll::Ready(Ok(()));
            }
            let Some(p) = self.plain.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            let chunk = match ready!(p.poll_read_bytes(cx, READ_CHUNK)) {
                Ok(Some(b)) => b,
                Ok(None) => {
                    let e = self.fail(
                        io::ErrorKind::UnexpectedEof,
                        "the peer ended the stream without a TLS close_notify".into(),
                        cx,
                    );
                    return Poll::Ready(Err(e));
                }
                Err(e) => return Poll::Ready(Err(e)),
            };
            // Records whose plaintext fits in the caller's buffer are
            // decrypted straight into it. Their plaintext is shorter than
            // the chunk: only that much of an uninitialized buffer is
            // zeroed first.
            let room = buf.remaining().min(chunk.len());
            match self
                .chan
                .read_tls_bytes_into(chunk, buf.initialize_unfilled_to(room))
            {
                Ok(0) => {}
                Ok(n) => {
                    buf.advance(n);
                    self.piece = PIPELINED_WRITE;
                    return Poll::Ready(Ok(()));
                }
                Err(e) => {
                    let e = self.fail(io::ErrorKind::InvalidData, format!("TLS: {e}"), cx);
                    return Poll::Ready(Err(e));
                }
            }
        }
    }

    pub(super) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.err() {
            return Poll::Ready(Err(e));
        }
        ready!(self.poll_out(cx))?;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let take = data.len().min(self.piece);
        self.piece = self.piece.saturating_mul(2).min(MAX_WRITE);
        let parts: [&[u8]; 1] = [&data[..take]];
        let need = sealed_len(&parts) + self.chan.pending_tls();
        if self.out.len() < need {
            self.out.resize(need, 0);
        }
        match self.chan.seal_into(&parts, &mut self.out) {
            Ok(n) => {
                self.out_len = n;
                self.sent = 0;
            }
            Err(e) => {
                let kind = match e {
                    TlsError::Closed => io::ErrorKind::BrokenPipe,
                    _ => io::ErrorKind::InvalidData,
                };
                return Poll::Ready(Err(io::Error::new(kind, e)));
            }
        }
        // Out now if the plain socket takes it; else on the next call.
        if let Poll::Ready(Err(e)) = self.poll_out(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(take))
    }

    pub(super) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.err() {
            return Poll::Ready(Err(e));
        }
        ready!(self.poll_out(cx))?;
        match self.plain.as_mut() {
            Some(p) => Pin::new(p).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    pub(super) fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.err() {
            return Poll::Ready(Err(e));
        }
        ready!(self.poll_out(cx))?;
        if !self.close_sent {
            self.chan.send_close_notify();
            self.close_sent = true;
            if let Some(b) = self.chan.take_tls(usize::MAX) {
                self.out.clear();
                self.out.extend_from_slice(&b);
                self.out_len = self.out.len();
                self.sent = 0;
            }
            ready!(self.poll_out(cx))?;
        }
        match self.plain.as_mut() {
            Some(p) => Pin::new(p).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    pub(super) fn abort(&mut self) {
        if let Some(p) = self.plain.take() {
            p.abort();
        }
    }
}

impl Drop for SecureSocket {
    /// Dropped without `shutdown`: the `close_notify` goes out if the plain
    /// socket takes it at once (it then ends its stream as usual), so the
    /// peer reads a clean end rather than a truncation.
    fn drop(&mut self) {
        if self.close_sent || self.failed.is_some() {
            return;
        }
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: Arc<Self>) {}
        }
        let waker = std::task::Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        if self.poll_out(&mut cx).is_pending() {
            return;
        }
        self.chan.send_close_notify();
        if let (Some(b), Some(p)) = (self.chan.take_tls(usize::MAX), self.plain.as_mut()) {
            let _ = Pin::new(p).poll_write(&mut cx, &b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::{Imp, JxtaServerSocket, SocketConfig};
    use crate::Peer;
    use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
    use juxta_proto::id::PipeId;

    const WAIT: Duration = Duration::from_secs(60);

    /// A listening peer A and a peer B connected to it on compact framing.
    async fn pair(dir: &tempfile::TempDir) -> (Peer, Peer) {
        crate::socket::test_peers::pair(dir, 2048).await
    }

    fn adv() -> PipeAdvertisement {
        PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast)
    }

    /// A connected socket pair (server end on A, client end on B).
    async fn sockets(a: &Peer, b: &Peer, secure: bool) -> (JxtaSocket, JxtaSocket) {
        let cfg = SocketConfig {
            secure,
            ..SocketConfig::default()
        };
        let ad = adv();
        let mut server = JxtaServerSocket::bind(a, &ad, cfg.clone()).unwrap();
        let srv = tokio::spawn(async move { server.accept().await.unwrap() });
        let c = JxtaSocket::connect(&b.pipes(), &ad, a.peer_id(), cfg)
            .await
            .unwrap();
        let s = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
        assert_eq!(c.is_secure(), secure);
        assert_eq!(s.is_secure(), secure);
        (s, c)
    }

    async fn ping(x: &mut JxtaSocket, y: &mut JxtaSocket, what: &[u8]) {
        x.write_all(what).await.unwrap();
        x.flush().await.unwrap();
        let mut got = vec![0u8; what.len()];
        tokio::time::timeout(WAIT, y.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, what);
    }

    fn secure_mut(s: &mut JxtaSocket) -> &mut SecureSocket {
        match &mut s.imp {
            Imp::Secure(x) => x,
            _ => panic!("not a secure socket"),
        }
    }

    /// Writes `raw` on the plain socket under a secure one, bypassing TLS.
    async fn write_raw(s: &mut JxtaSocket, raw: &[u8]) {
        let p = secure_mut(s).plain.as_mut().unwrap();
        p.write_all(raw).await.unwrap();
        p.flush().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_write_is_sealed_in_pieces_and_arrives_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = pair(&dir).await;
        let (mut s, mut c) = sockets(&a, &b, true).await;
        let big: Vec<u8> = (0..(1usize << 20) + 5)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        // One write seals one piece: the receiver can open it while the
        // next is sealed.
        let n = c.write(&big).await.unwrap();
        assert_eq!(n, PIPELINED_WRITE);
        c.write_all(&big[n..]).await.unwrap();
        c.flush().await.unwrap();
        let mut got = vec![0u8; big.len()];
        tokio::time::timeout(WAIT, s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got == big, "the data arrived changed");
        ping(&mut s, &mut c, b"and back").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_refuses_a_server_that_is_not_the_expected_peer() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = pair(&dir).await;
        let (s, c) = sockets(&a, &b, false).await;
        // The client expects B itself; A answers.
        let (srv, cli) = tokio::join!(
            handshake(&a.inner, s, None, Duration::from_secs(10)),
            handshake(&b.inner, c, Some(b.peer_id()), Duration::from_secs(10)),
        );
        match cli {
            Err(SocketError::Tls(TlsError::PeerMismatch {
                expected,
                presented,
            })) => {
                assert_eq!(*expected, b.peer_id());
                assert_eq!(*presented, a.peer_id());
            }
            Err(e) => panic!("client: {e}"),
            Ok(_) => panic!("client accepted the wrong peer"),
        }
        assert!(srv.is_err(), "the server's handshake fails too");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn silent_client_times_the_handshake_out() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = pair(&dir).await;
        let (s, c) = sockets(&a, &b, false).await;
        let t = Duration::from_millis(500);
        let r = handshake(&a.inner, s, None, t).await;
        assert!(
            matches!(r, Err(SocketError::HandshakeTimeout(d)) if d == t),
            "{:?}",
            r.err()
        );
        drop(c);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tampered_record_fails_that_socket_only() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = pair(&dir).await;
        let (mut s1, mut c1) = sockets(&a, &b, true).await;
        let (mut s2, mut c2) = sockets(&a, &b, true).await;
        let (mut s3, mut c3) = sockets(&a, &b, false).await;
        ping(&mut c1, &mut s1, b"before").await;
        // A real record of this session, one bit flipped.
        let mut rec = BytesMut::new();
        secure_mut(&mut c1)
            .chan
            .seal(&[b"tampered"], &mut rec)
            .unwrap();
        let last = rec.len() - 1;
        rec[last] ^= 0x01;
        write_raw(&mut c1, &rec).await;
        let mut buf = [0u8; 16];
        let e = tokio::time::timeout(WAIT, s1.read(&mut buf))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("decrypt"), "{e}");
        // Dead for good, both ways.
        assert_eq!(
            s1.write_all(b"x").await.unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // The client's end learns of it (alert or reset), in bounded time.
        let e = tokio::time::timeout(WAIT, c1.read(&mut buf))
            .await
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::InvalidData | io::ErrorKind::ConnectionReset
            ),
            "{e}"
        );
        // The other sockets on the same connection keep working.
        ping(&mut c2, &mut s2, b"secure still fine").await;
        ping(&mut s2, &mut c2, b"and back").await;
        ping(&mut c3, &mut s3, b"plain still fine").await;
        let (mut s4, mut c4) = sockets(&a, &b, true).await;
        ping(&mut c4, &mut s4, b"new secure socket").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn oversized_record_and_garbage_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = pair(&dir).await;
        let (mut s1, mut c1) = sockets(&a, &b, true).await;
        // A record header announcing 65535 bytes: refused at the header,
        // nothing buffered for it.
        write_raw(&mut c1, &[0x17, 3, 3, 0xff, 0xff, 1, 2, 3]).await;
        let mut buf = [0u8; 16];
        let e = tokio::time::timeout(WAIT, s1.read(&mut buf))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("record size"), "{e}");
        // A record of another content type.
        let (mut s2, mut c2) = sockets(&a, &b, true).await;
        write_raw(&mut c2, &[0x16, 3, 3, 0, 20]).await;
        write_raw(&mut c2, &[0u8; 20]).await;
        let e = tokio::time::timeout(WAIT, s2.read(&mut buf))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        // The end of stream without close_notify is a truncation.
        let (mut s3, mut c3) = sockets(&a, &b, true).await;
        secure_mut(&mut c3).close_sent = true; // skip it on shutdown
        let p = secure_mut(&mut c3).plain.as_mut().unwrap();
        p.shutdown().await.unwrap();
        let e = tokio::time::timeout(WAIT, s3.read(&mut buf))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    }
}
