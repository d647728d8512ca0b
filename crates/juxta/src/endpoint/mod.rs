//! The endpoint service's public face: listeners that receive messages for
//! a service address, and messengers that send to a connected peer.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use juxta_proto::endpoint::{self, mangle, Delivery, ServiceAddress};
use juxta_proto::id::PeerId;
use juxta_proto::message::{Element, Message};
use juxta_proto::wire::connection::{ConnectionError, Framed, Proof};
use tokio::sync::mpsc;

use crate::peer::Inner;
use crate::transport::tcp::Connection;

pub(crate) mod receivers;

/// Errors sending a message.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The message could not be framed (empty, too large a name, ...).
    #[error("cannot frame message: {0}")]
    Frame(#[from] ConnectionError),
    /// The socket failed; the connection is gone.
    #[error("connection to {peer} failed: {source}")]
    Io {
        /// remote peer
        peer: PeerId,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// The connection has closed.
    #[error("connection to {0} is closed")]
    Closed(PeerId),
    /// A service message was refused: the connection's service queue is
    /// full (the remote is not reading fast enough); counted in
    /// [`crate::Stats::service_refused`].
    #[error("service queue to {0} is full")]
    QueueFull(PeerId),
}

/// How the sender of a received message was verified: what a service can
/// rely on before it trusts [`EndpointMessage::from`] or
/// [`crate::pipe::PipeMessage::from`].
///
/// ```
/// use juxta::Verified;
/// assert!(Verified::Handshake.is_verified());
/// assert!(Verified::Certificate.is_verified());
/// assert!(!Verified::Unverified.is_verified());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verified {
    /// The sender's TLS 1.3 certificate, bound to its peer ID (secure
    /// pipes and secure sockets).
    Certificate,
    /// The connection the message came on straight from the sender: the
    /// sender proved its peer ID in Juxta's compact handshake (or, over
    /// HTTP, with a signed session hello).
    Handshake,
    /// The connection the message came on straight from the sender: a CBJX
    /// signature by the key the sender's peer ID derives from, over a
    /// message naming this peer (how a JXSE peer proves itself).
    CbjxSignature,
    /// Not verified: the sender is as the message or its connection
    /// claims. Messages relayed or routed on another peer's behalf (their
    /// origin is as the router header says), propagated messages, and
    /// messages from a peer that has not proved its ID yet.
    Unverified,
}

impl Verified {
    /// Whether the sender is verified (anything but
    /// [`Verified::Unverified`]).
    pub fn is_verified(self) -> bool {
        self != Verified::Unverified
    }

    pub(crate) fn of(proof: Proof) -> Verified {
        match proof {
            Proof::Claimed => Verified::Unverified,
            Proof::Signature => Verified::CbjxSignature,
            Proof::Handshake => Verified::Handshake,
        }
    }
}

/// A message received by a [`Listener`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EndpointMessage {
    /// The message (address and router elements removed).
    pub message: Message,
    /// The originating peer, if known; how far to trust it is
    /// [`EndpointMessage::verified`].
    pub from: Option<PeerId>,
    /// How `from` was verified.
    pub verified: Verified,
    /// The service address it was sent to (the listener's), shared with
    /// the connection's other messages to it.
    pub to: Arc<ServiceAddress>,
    /// The group it was addressed in (its unique value), if the address
    /// named one.
    pub group: Option<Arc<str>>,
    /// Whether it came through the endpoint router (relayed or routed)
    /// rather than straight from its origin.
    pub routed: bool,
}

impl EndpointMessage {
    /// The sender, only if it is verified.
    pub fn verified_sender(&self) -> Option<PeerId> {
        self.from.filter(|_| self.verified.is_verified())
    }
}

impl From<Delivery> for EndpointMessage {
    fn from(d: Delivery) -> EndpointMessage {
        EndpointMessage {
            verified: Verified::of(d.proof),
            message: d.message,
            from: d.from,
            to: d.to,
            group: d.group,
            routed: d.routed,
        }
    }
}

/// Receives the messages addressed to one service address. Dropping it
/// unregisters the service. The queue is bounded: while it is full, the
/// connections delivering to it stop reading (back-pressure).
pub struct Listener {
    to: ServiceAddress,
    rx: mpsc::Receiver<Delivery>,
    peer: Weak<Inner>,
}

impl Listener {
    pub(crate) fn new(to: ServiceAddress, rx: mpsc::Receiver<Delivery>, peer: Weak<Inner>) -> Self {
        Listener { to, rx, peer }
    }

    /// The next message; `None` once the peer is gone.
    pub async fn recv(&mut self) -> Option<EndpointMessage> {
        self.rx.recv().await.map(EndpointMessage::from)
    }

    /// The next message as the runtime's services take it (with the
    /// proof and the rendezvous that vouched for it).
    pub(crate) async fn recv_delivery(&mut self) -> Option<Delivery> {
        self.rx.recv().await
    }

    /// A message already queued, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Delivery> {
        self.rx.try_recv().ok()
    }

    /// The service address this listener serves.
    pub fn address(&self) -> &ServiceAddress {
        &self.to
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(p) = self.peer.upgrade() {
            p.remove_listener(&self.to);
        }
    }
}

/// Where a routed messenger's messages go: the final peer and the hops
/// after the first (the connection's peer).
struct Via {
    dest: PeerId,
    forward: Vec<PeerId>,
    /// The router header element of the last send: a routed messenger
    /// (an output pipe's, say) sends to the same service and param over
    /// and over, and the header depends only on those, the route and the
    /// first hop's framing.
    header: Mutex<Option<RoutedHeader>>,
}

/// A router header element as [`Messenger::wrap_via`] last built it.
struct RoutedHeader {
    service: String,
    param: Option<String>,
    compact: bool,
    element: Element,
}

/// Smallest payload [`Messenger::try_send_borrowed`] writes from the
/// caller's buffer (compact framing copies up to 512 bytes inline).
pub(crate) const BORROW_MIN: usize = 4096;

/// Sends messages to one peer: over the connection to it, or (a routed
/// messenger) through a route whose first hop is the connection's peer,
/// each message wrapped in an ERM for its final destination.
#[derive(Clone)]
pub struct Messenger {
    conn: Arc<Connection>,
    inner: Arc<Inner>,
    via: Option<Arc<Via>>,
}

impl Messenger {
    pub(crate) fn new(conn: Arc<Connection>, inner: Arc<Inner>) -> Messenger {
        Messenger {
            conn,
            inner,
            via: None,
        }
    }

    /// A messenger to `dest` through `first` (connected), then `forward`.
    pub(crate) fn routed(
        first: Arc<Connection>,
        inner: Arc<Inner>,
        dest: PeerId,
        forward: Vec<PeerId>,
    ) -> Messenger {
        Messenger {
            conn: first,
            inner,
            via: Some(Arc::new(Via {
                dest,
                forward,
                header: Mutex::new(None),
            })),
        }
    }

    /// The remote peer (the final destination of a routed messenger).
    pub fn remote(&self) -> PeerId {
        match &self.via {
            Some(v) => v.dest,
            None => self.conn.remote,
        }
    }

    /// Whether messages go through a route (relay) rather than directly.
    pub fn is_routed(&self) -> bool {
        self.via.is_some()
    }

    /// The peers messages pass through before the destination: none for
    /// a direct messenger; for a routed one, the first hop (the peer of
    /// [`Messenger::connection`]) and the rest of the route, in order.
    pub fn hops(&self) -> Vec<PeerId> {
        match &self.via {
            None => Vec::new(),
            Some(v) => std::iter::once(self.conn.remote)
                .chain(v.forward.iter().copied())
                .filter(|p| *p != v.dest)
                .collect(),
        }
    }

    /// The underlying connection; for a routed messenger, the connection
    /// to the first hop.
    pub(crate) fn connection(&self) -> &Arc<Connection> {
        &self.conn
    }

    /// A snapshot of the connection messages leave on (direct, or to the
    /// first hop of a route): its number, peer, address, traffic, framing
    /// and proof.
    ///
    /// ```no_run
    /// # async fn demo(peer: juxta::Peer, addr: std::net::SocketAddr) -> Result<(), juxta::PeerError> {
    /// let m = peer.connect(addr).await?;
    /// let link = m.link();
    /// println!("connection {} to {} at {}", link.id, link.peer, link.addr);
    /// # Ok(()) }
    /// ```
    pub fn link(&self) -> crate::ConnectionInfo {
        self.conn.info()
    }

    /// Whether the connection messages leave on has closed (a closed
    /// messenger's sends fail; get a new one from the peer).
    pub fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// Whether both directions already use compact framing (never for a
    /// routed messenger: the far end's framing is unknown).
    pub fn is_compact(&self) -> bool {
        self.via.is_none() && self.conn.is_compact()
    }

    /// Whether the connection messages leave on (direct, or to the first
    /// hop of a route) runs compact framing: the next peer is Juxta.
    pub(crate) fn first_hop_compact(&self) -> bool {
        self.conn.is_compact()
    }

    /// Waits until compact framing is on (both ends are Juxta peers with it
    /// enabled) or `timeout` passes; returns whether it is on.
    pub async fn wait_compact(&self, timeout: Duration) -> bool {
        if self.via.is_some() {
            return false;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.conn.compact_ready.notified();
            if self.conn.is_compact() {
                return true;
            }
            if self.conn.is_closed() || tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.conn.is_compact();
            }
        }
    }

    /// Sends `msg` directly to `service`/`param` at the remote peer (in the
    /// Net peer group). Returns the bytes it took on the wire.
    pub async fn send(
        &self,
        service: &str,
        param: Option<&str>,
        mut msg: Message,
    ) -> Result<usize, SendError> {
        let to = self.direct_to(service, param, &mut msg);
        self.send_raw(&to, msg).await
    }

    /// The wire address of a direct send (wrapping `msg` for a routed
    /// messenger).
    #[inline]
    fn direct_to(
        &self,
        service: &str,
        param: Option<&str>,
        msg: &mut Message,
    ) -> Arc<ServiceAddress> {
        match &self.via {
            Some(v) => self.wrap_via(v, service, param, msg),
            // The connection keeps the wire forms it used last: no
            // formatting or allocation per message.
            None => {
                self.conn
                    .addresses
                    .wire(&self.inner.cfg.connection.group_unique, service, param)
            }
        }
    }

    /// The wire address of a send through the remote's endpoint router
    /// ([`Messenger::send_routed`]), wrapping `msg` as needed.
    fn routed_to(
        &self,
        service: &str,
        param: Option<&str>,
        msg: &mut Message,
    ) -> Arc<ServiceAddress> {
        if self.via.is_some() || self.conn.compact_tx.load(Ordering::Acquire) {
            return self.direct_to(service, param, msg);
        }
        Arc::new(endpoint::wrap_routed(
            &self.inner.cfg.connection.group_unique,
            self.inner.identity.peer_id(),
            &self.conn.remote,
            &ServiceAddress::new(service, param),
            msg,
        ))
    }

    /// The wire address of a [`Messenger::send_routed`] with this peer's
    /// route embedded in the router header toward a JXTA-framed peer (see
    /// `juxta_proto::endpoint::wrap_routed_with_route`); a plain routed
    /// send when this peer does not listen or over compact framing.
    fn announced_to(
        &self,
        service: &str,
        param: Option<&str>,
        msg: &mut Message,
    ) -> Arc<ServiceAddress> {
        // Compact framing (Juxta peers): a plain send, no route to build.
        if self.conn.compact_tx.load(Ordering::Acquire) {
            return self.direct_to(service, param, msg);
        }
        match crate::discovery::local_route(&self.inner) {
            Some(r) => Arc::new(endpoint::wrap_routed_with_route(
                &self.inner.cfg.connection.group_unique,
                self.inner.identity.peer_id(),
                &self.conn.remote,
                &ServiceAddress::new(service, param),
                &r,
                msg,
            )),
            None => self.routed_to(service, param, msg),
        }
    }

    /// Wraps `msg` for the route's destination; returns the router address.
    fn wrap_via(
        &self,
        v: &Via,
        service: &str,
        param: Option<&str>,
        msg: &mut Message,
    ) -> Arc<ServiceAddress> {
        use juxta_proto::endpoint::compact_router::{
            CompactRouterHeader, ELEM_COMPACT_ERM, NS_JUXTA,
        };
        use juxta_proto::endpoint::router::{ELEM_ERM, ELEM_ERM_FINGERPRINT};
        use juxta_proto::message::NS_JXTA;
        let compact_link = self.conn.compact_tx.load(Ordering::Acquire);
        let header = {
            let mut last = v.header.lock().expect("via lock");
            match &*last {
                Some(h)
                    if h.compact == compact_link
                        && h.service == service
                        && h.param.as_deref() == param =>
                {
                    h.element.clone()
                }
                _ => {
                    let me = self.inner.identity.peer_id();
                    let compact = compact_link
                        .then(|| {
                            CompactRouterHeader::originate(me, &v.dest, service, param, &v.forward)
                        })
                        .filter(CompactRouterHeader::is_valid);
                    let element = match compact {
                        // The first hop is a Juxta peer on compact framing:
                        // the binary header (it rewrites it for the next hop
                        // as that hop's connection allows).
                        Some(h) => Element::bytes_static(NS_JUXTA, ELEM_COMPACT_ERM, h.encode()),
                        None => {
                            let h = endpoint::forward::originate(
                                me, &v.dest, service, param, &v.forward,
                            );
                            Element::xml(NS_JXTA, ELEM_ERM, h.to_xml())
                        }
                    };
                    *last = Some(RoutedHeader {
                        service: service.to_owned(),
                        param: param.map(str::to_owned),
                        compact: compact_link,
                        element: element.clone(),
                    });
                    element
                }
            }
        };
        msg.push(header);
        msg.push(Element::bytes_static(
            NS_JXTA,
            ELEM_ERM_FINGERPRINT,
            self.inner.router.fingerprint(&self.inner),
        ));
        self.conn.addresses.wire(
            &self.inner.cfg.connection.group_unique,
            endpoint::ROUTER_SERVICE,
            None,
        )
    }

    /// Sends `msg` to `service`/`param` through the remote peer's endpoint
    /// router (an `EndpointRouterMsg` header), the way JXSE itself reaches
    /// `jxta://` destinations. Over compact framing this is a direct send.
    pub async fn send_routed(
        &self,
        service: &str,
        param: Option<&str>,
        mut msg: Message,
    ) -> Result<usize, SendError> {
        let to = self.routed_to(service, param, &mut msg);
        self.send_raw(&to, msg).await
    }

    /// [`Messenger::send`] for the peer's own services: never waits. The
    /// message is written now if the socket takes it, else queued on the
    /// connection (bounded by [`crate::PeerConfig::service_queue`]) for a
    /// drain task; a full queue refuses it ([`SendError::QueueFull`],
    /// counted). So a service task serving many peers is never held up by
    /// one that stops reading.
    pub(crate) fn post(
        &self,
        service: &str,
        param: Option<&str>,
        mut msg: Message,
    ) -> Result<(), SendError> {
        let to = self.direct_to(service, param, &mut msg);
        self.post_raw(to, msg)
    }

    /// [`Messenger::send_routed`] without waiting (see [`Messenger::post`]).
    pub(crate) fn post_routed(
        &self,
        service: &str,
        param: Option<&str>,
        mut msg: Message,
    ) -> Result<(), SendError> {
        let to = self.routed_to(service, param, &mut msg);
        self.post_raw(to, msg)
    }

    /// [`Messenger::post_routed`] in the group whose unique value is
    /// `group` (its services' addresses mangled with it, as JXSE's
    /// endpoint service of that group does): through the remote's router
    /// in JXTA framing, directly in compact framing; for a routed
    /// messenger, the mangled group address rides in the router header.
    pub(crate) fn post_routed_in(
        &self,
        group: &str,
        service: &str,
        param: Option<&str>,
        mut msg: Message,
    ) -> Result<(), SendError> {
        if group == self.inner.cfg.connection.group_unique {
            return self.post_routed(service, param, msg);
        }
        let real = ServiceAddress::new(service, param);
        let to = match &self.via {
            Some(v) => {
                let m = mangle(group, &real);
                self.wrap_via(v, &m.service, m.param.as_deref(), &mut msg)
            }
            None if self.conn.compact_tx.load(Ordering::Acquire) => {
                self.conn.addresses.wire(group, service, param)
            }
            None => Arc::new(endpoint::wrap_routed(
                group,
                self.inner.identity.peer_id(),
                &self.conn.remote,
                &real,
                &mut msg,
            )),
        };
        self.post_raw(to, msg)
    }

    /// [`Messenger::post_routed`] with this peer's route embedded toward a
    /// JXTA-framed peer (see `Messenger::announced_to`).
    pub(crate) fn post_routed_announced(
        &self,
        service: &str,
        param: Option<&str>,
        mut msg: Message,
    ) -> Result<(), SendError> {
        let to = self.announced_to(service, param, &mut msg);
        self.post_raw(to, msg)
    }

    /// [`Messenger::post`] of `msg` as it is, to the wire address `to`.
    pub(crate) fn post_raw(&self, to: Arc<ServiceAddress>, msg: Message) -> Result<(), SendError> {
        let conn = &self.conn;
        if conn.is_closed() {
            return Err(SendError::Closed(conn.remote));
        }
        let mut q = conn.service.lock().expect("service queue lock");
        if !q.draining {
            if let Ok(mut w) = conn.writer.try_lock() {
                if w.backlog.is_empty() {
                    let enc = w.out.encode(&to, msg)?;
                    let whole = w.try_write_now(&enc).map_err(|source| SendError::Io {
                        peer: conn.remote,
                        source,
                    })?;
                    conn.bytes_out.fetch_add(enc.len as u64, Ordering::Relaxed);
                    self.inner.stats.count_out(enc.len);
                    if !whole {
                        q.draining = true;
                        drop(w);
                        drop(q);
                        self.spawn_service_drain();
                    }
                    return Ok(());
                }
            }
        }
        if q.items.len() >= self.inner.cfg.service_queue {
            drop(q);
            let n = self
                .inner
                .stats
                .service_refused
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            // Logged for the 1st, 2nd, 4th, ... refusal; the counter has all.
            if n.is_power_of_two() {
                tracing::info!(remote = %conn.remote, refused = n, "service message refused: connection queue full");
            }
            return Err(SendError::QueueFull(conn.remote));
        }
        q.items.push_back((to, msg));
        if !q.draining {
            q.draining = true;
            drop(q);
            self.spawn_service_drain();
        }
        Ok(())
    }

    /// Starts the task that writes the connection's backlog and service
    /// queue, one message per lock so the data path interleaves. Each write
    /// is bounded by [`crate::PeerConfig::write_timeout`], so the task ends.
    fn spawn_service_drain(&self) {
        let conn = self.conn.clone();
        let inner = self.inner.clone();
        tokio::spawn(async move {
            loop {
                let mut w = conn.writer.lock().await;
                let mut r = w.drain_backlog().await;
                if r.is_ok() {
                    let next = {
                        let mut q = conn.service.lock().expect("service queue lock");
                        match q.items.pop_front() {
                            Some(x) => x,
                            None => {
                                q.draining = false;
                                return;
                            }
                        }
                    };
                    let (to, msg) = next;
                    match w.out.encode(&to, msg) {
                        Ok(enc) => {
                            r = w.write(&enc).await;
                            if r.is_ok() {
                                conn.bytes_out.fetch_add(enc.len as u64, Ordering::Relaxed);
                                inner.stats.count_out(enc.len);
                            }
                        }
                        Err(e) => {
                            tracing::debug!(remote = %conn.remote, error = %e, "service message not framed");
                        }
                    }
                }
                if let Err(e) = r {
                    let mut q = conn.service.lock().expect("service queue lock");
                    tracing::debug!(remote = %conn.remote, error = %e, dropped = q.items.len(), "service messages not sent");
                    q.items.clear();
                    q.draining = false;
                    return;
                }
            }
        });
    }

    /// Sends `msg` to `service`/`param` without waiting, for callers in
    /// synchronous code (`poll_write`): if another send holds the
    /// connection, the message is handed back (`Ok(Err(msg))`). If the
    /// socket takes only part of the frame, the rest is finished by a task.
    pub(crate) fn try_send(
        &self,
        service: &str,
        param: Option<&str>,
        mut msg: Message,
    ) -> Result<Result<usize, Message>, SendError> {
        if self.conn.is_closed() {
            return Err(SendError::Closed(self.conn.remote));
        }
        let Ok(w) = self.conn.writer.try_lock() else {
            return Ok(Err(msg));
        };
        if !w.backlog.is_empty() {
            return Ok(Err(msg));
        }
        let to = self.direct_to(service, param, &mut msg);
        self.write_now(w, &to, msg).map(Ok)
    }

    /// [`Messenger::try_send`] of a message one of whose elements holds
    /// `placeholder` (a `Bytes::from_static` slice of `payload`'s length,
    /// longer than the compact framing copies inline) in place of
    /// `payload`: over a free connection the frame is written from
    /// `payload` itself, and only the part the socket does not take now is
    /// copied. Handed back (`Ok(Err(msg))`, still holding the placeholder)
    /// when the connection is busy or the framing did not keep the
    /// placeholder as a chunk of its own. When the socket took only part
    /// of the frame, the rest is copied and written by a task, whose
    /// handle comes back: wait for it before the next send to find the
    /// connection free again.
    pub(crate) fn try_send_borrowed(
        &self,
        service: &str,
        param: Option<&str>,
        mut msg: Message,
        placeholder: &'static [u8],
        payload: &[u8],
        scratch: &mut bytes::BytesMut,
    ) -> Result<Result<Option<tokio::task::JoinHandle<()>>, Message>, SendError> {
        if self.conn.is_closed() {
            return Err(SendError::Closed(self.conn.remote));
        }
        let Ok(mut w) = self.conn.writer.try_lock() else {
            return Ok(Err(msg));
        };
        // Compact framing keeps every payload over 512 bytes as a chunk
        // of its own (JXTA framing would sign the placeholder).
        if !w.backlog.is_empty()
            || self.via.is_some()
            || !w.out.is_compact()
            || payload.len() <= BORROW_MIN
        {
            return Ok(Err(msg));
        }
        let to = self.direct_to(service, param, &mut msg);
        let enc = w.out.encode(&to, msg)?;
        let kept = enc
            .chunks
            .iter()
            .any(|c| c.len() == payload.len() && std::ptr::eq(c.as_ptr(), placeholder.as_ptr()));
        if !kept {
            // Unreachable with compact framing; never write placeholder bytes.
            return Err(SendError::Io {
                peer: self.conn.remote,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "payload placeholder not kept as a chunk",
                ),
            });
        }
        let whole = w
            .try_write_now_borrowed(&enc, placeholder, payload, scratch)
            .map_err(|source| SendError::Io {
                peer: self.conn.remote,
                source,
            })?;
        drop(w);
        Ok(Ok(self.wrote_directly(enc.len, whole)))
    }

    /// Writes `payload` as stream `stream`'s data in a compact stream frame
    /// ([`juxta_proto::wire::compact::stream_frame_header`]), straight from
    /// the caller's buffer, if the connection is free now: a direct
    /// compact TCP connection with nothing queued. `Ok(Err(()))`: not now
    /// (busy, routed, or not a compact TCP link): send the data as a
    /// message. When the socket took only part of the frame, the rest is
    /// copied and written by a task whose handle comes back (see
    /// [`Messenger::try_send_borrowed`]).
    pub(crate) fn try_send_stream(
        &self,
        stream: u32,
        payload: &[u8],
        scratch: &mut bytes::BytesMut,
    ) -> Result<Result<Option<tokio::task::JoinHandle<()>>, ()>, SendError> {
        if self.conn.is_closed() {
            return Err(SendError::Closed(self.conn.remote));
        }
        if self.via.is_some() {
            return Ok(Err(()));
        }
        let Ok(mut w) = self.conn.writer.try_lock() else {
            return Ok(Err(()));
        };
        if !w.backlog.is_empty() {
            return Ok(Err(()));
        }
        let mut header = [0u8; juxta_proto::wire::compact::STREAM_HEADER_MAX];
        let Ok(h) = w.out.stream_header(stream, payload, &mut header) else {
            return Ok(Err(()));
        };
        let io = |source| SendError::Io {
            peer: self.conn.remote,
            source,
        };
        let Some(whole) = w
            .try_write_stream(&header[..h], payload, scratch)
            .map_err(io)?
        else {
            return Ok(Err(()));
        };
        drop(w);
        Ok(Ok(self.wrote_directly(h + payload.len(), whole)))
    }

    /// Counts a frame of `len` bytes written from the caller's buffer; when
    /// the socket took only part of it (`whole` false), a task drains the
    /// backlog, and its handle comes back for the next send to wait on.
    fn wrote_directly(&self, len: usize, whole: bool) -> Option<tokio::task::JoinHandle<()>> {
        self.conn.bytes_out.fetch_add(len as u64, Ordering::Relaxed);
        self.inner.stats.count_out(len);
        if whole {
            return None;
        }
        let conn = self.conn.clone();
        Some(tokio::spawn(async move {
            let mut w = conn.writer.lock().await;
            if let Err(e) = w.drain_backlog().await {
                tracing::debug!(remote = %conn.remote, error = %e, "write failed");
            }
        }))
    }

    /// [`Messenger::try_send`] of `msg` as it is, to the wire service
    /// address `to` (mangled).
    pub(crate) fn try_send_raw(
        &self,
        to: &ServiceAddress,
        msg: Message,
    ) -> Result<Result<usize, Message>, SendError> {
        if self.conn.is_closed() {
            return Err(SendError::Closed(self.conn.remote));
        }
        let Ok(w) = self.conn.writer.try_lock() else {
            return Ok(Err(msg));
        };
        if !w.backlog.is_empty() {
            return Ok(Err(msg));
        }
        self.write_now(w, to, msg).map(Ok)
    }

    /// Encodes `msg` for `to` and writes what the socket takes now; a task
    /// finishes the rest of the frame.
    fn write_now(
        &self,
        mut w: tokio::sync::MutexGuard<'_, crate::transport::tcp::WriterSide>,
        to: &ServiceAddress,
        msg: Message,
    ) -> Result<usize, SendError> {
        let enc = w.out.encode(to, msg)?;
        let whole = w.try_write_now(&enc).map_err(|source| SendError::Io {
            peer: self.conn.remote,
            source,
        })?;
        drop(w);
        if !whole {
            let conn = self.conn.clone();
            tokio::spawn(async move {
                let mut w = conn.writer.lock().await;
                if let Err(e) = w.drain_backlog().await {
                    tracing::debug!(remote = %conn.remote, error = %e, "write failed");
                }
            });
        }
        self.conn
            .bytes_out
            .fetch_add(enc.len as u64, Ordering::Relaxed);
        self.inner.stats.count_out(enc.len);
        Ok(enc.len)
    }

    /// Sends `msg` as it is to the wire service address `to` (mangled).
    pub(crate) async fn send_raw(
        &self,
        to: &ServiceAddress,
        msg: Message,
    ) -> Result<usize, SendError> {
        if self.conn.is_closed() {
            return Err(SendError::Closed(self.conn.remote));
        }
        let mut w = self.conn.writer.lock().await;
        // A large CBJX-signed message is hashed piece by piece as it is
        // written (same bytes on the wire).
        let framed = w
            .out
            .encode_streamed(to, msg, 2 * crate::transport::tcp::STREAM_PIECE)?;
        let (r, len) = match framed {
            Framed::Whole(enc) => (w.write(&enc).await, enc.len),
            Framed::Streamed(f) => {
                let len = f.len;
                (w.write_streamed(f).await, len)
            }
        };
        r.map_err(|source| SendError::Io {
            peer: self.conn.remote,
            source,
        })?;
        self.conn.bytes_out.fetch_add(len as u64, Ordering::Relaxed);
        self.inner.stats.count_out(len);
        Ok(len)
    }
}
