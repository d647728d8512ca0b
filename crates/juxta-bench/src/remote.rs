//! Benchmarks against another host: a bench listener (served by
//! `juxta peer --bench`) starts responders on its machine for clients
//! that present its token (or prove a listed peer ID), and
//! [`RemoteHost`] is the client side ([`crate::layers::Host::Remote`]).
//!
//! The protocol is one line of JSON each way over a TCP control
//! connection, every line at most [`MAX_LINE`] bytes:
//!
//! 1. the listener says hello: `{"protocol": "juxta-bench-remote/1",
//!    "nonce": "<32 hex digits>"}`;
//! 2. the client asks: `{"token": "...", "op": "machine"}` (the remote's
//!    machine facts) or `{"token": "...", "op": "responder", "layer":
//!    "unicast-pipe", "key_bits": 1024, "receivers": 1}`; instead of a
//!    token, a `proof` (peer ID, certificate, signature over the nonce)
//!    for a peer ID the listener allows;
//! 3. the listener answers `{"ready": "READY ..."}` or `{"machine": {...}}`,
//!    or `{"refused": "wrong-token", "message": "..."}`.
//!
//! A responder lives as long as its control connection: when the client
//! closes it (or goes away), the responder process is killed. At most
//! [`ServeConfig::max_responders`] responders run at once per client
//! address, and at most [`ServeConfig::max_connections`] control
//! connections are open at once.
//!
//! ```no_run
//! # async fn demo() -> Result<(), juxta_bench::BenchError> {
//! use juxta_bench::remote::RemoteHost;
//! let host = RemoteHost::new("192.0.2.7:9711".parse().unwrap(), Some("3f2a...".into()));
//! let facts = host.machine().await?;
//! println!("remote cores: {}", facts["cores"]);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use juxta_proto::id::PeerId;
use juxta_proto::identity::{Identity, RemoteCert};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::layers::{Host, Layer, Ready, ResponderSpec};
use crate::BenchError;

/// The protocol's name and version, in the listener's hello.
pub const PROTOCOL: &str = "juxta-bench-remote/1";
/// Longest line either side accepts (bytes, newline excluded).
pub const MAX_LINE: usize = 16 * 1024;
/// Default of [`ServeConfig::max_responders`].
pub const DEFAULT_MAX_RESPONDERS: usize = 8;
/// Default of [`ServeConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// Longest token accepted (bytes).
pub const MAX_TOKEN: usize = 256;
/// Most receivers a remote propagate responder may host.
pub const MAX_RECEIVERS: usize = 16;
/// RSA key sizes a remote responder may be asked for.
pub const KEY_BITS: std::ops::RangeInclusive<usize> = 1024..=4096;
/// How long the hello and the request may take.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);
/// How long starting a responder may take (key generation included).
const START_WAIT: Duration = Duration::from_secs(90);

/// Why a bench listener refused a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
    /// The request carried no token (and no proof).
    NoToken,
    /// The token is not the listener's.
    WrongToken,
    /// The proven peer ID is not among the allowed ones.
    PeerNotAllowed,
    /// The peer-ID proof did not verify.
    BadProof,
    /// The client already runs the most responders allowed.
    TooManyResponders,
    /// The listener serves the most control connections it may.
    Busy,
    /// The request is malformed or out of bounds.
    BadRequest,
    /// The responder could not be started.
    Failed,
}

impl Refusal {
    /// The refusal's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::NoToken => "no-token",
            Refusal::WrongToken => "wrong-token",
            Refusal::PeerNotAllowed => "peer-not-allowed",
            Refusal::BadProof => "bad-proof",
            Refusal::TooManyResponders => "too-many-responders",
            Refusal::Busy => "busy",
            Refusal::BadRequest => "bad-request",
            Refusal::Failed => "failed",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::NoToken => "no token given (pass the token `juxta peer --bench` printed)",
            Refusal::WrongToken => {
                "wrong token (pass the token `juxta peer --bench` printed at start)"
            }
            Refusal::PeerNotAllowed => "peer ID not allowed (bench.allowed_peers)",
            Refusal::BadProof => "the peer-ID proof did not verify",
            Refusal::TooManyResponders => "too many responders at once for this client",
            Refusal::Busy => "too many control connections at once",
            Refusal::BadRequest => "bad request",
            Refusal::Failed => "the responder could not be started",
        })
    }
}

/// Errors of the client side of a remote bench.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The listener could not be reached.
    #[error("cannot reach the bench listener at {addr}: {source}")]
    Connect {
        /// The listener.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The listener refused the request.
    #[error("the bench listener at {addr} refused: {kind}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Refused {
        /// The listener.
        addr: SocketAddr,
        /// Why.
        kind: Refusal,
        /// The listener's details.
        message: String,
    },
    /// The listener broke the protocol (or is not a bench listener).
    #[error("bench listener at {addr}: {what}")]
    Protocol {
        /// The listener.
        addr: SocketAddr,
        /// What was wrong.
        what: String,
    },
    /// The listener did not answer in time.
    #[error("bench listener at {addr}: no answer within {} s", wait.as_secs())]
    Timeout {
        /// The listener.
        addr: SocketAddr,
        /// How long we waited.
        wait: Duration,
    },
}

/// The listener's first line.
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    protocol: String,
    nonce: String,
}

/// A proof of a peer ID: its certificate and a signature over
/// [`transcript`] of the listener's nonce.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Proof {
    /// The peer ID claimed (`urn:jxta:...`).
    pub peer: String,
    /// The peer's certificate (DER, hex).
    pub cert: String,
    /// RSA signature over [`transcript`] (hex).
    pub sig: String,
}

/// A client's request.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Request {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    proof: Option<Proof>,
    op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    layer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_bits: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    receivers: Option<usize>,
}

/// The listener's answer.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Reply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ready: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    machine: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refused: Option<Refusal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// The digest a peer-ID proof signs: a label, the listener's nonce and
/// the peer ID.
pub fn transcript(nonce: &str, peer: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"juxta-bench-remote-v1\0");
    h.update(nonce.as_bytes());
    h.update([0]);
    h.update(peer.as_bytes());
    h.finalize().into()
}

/// Why a line could not be read.
#[derive(Debug)]
enum LineError {
    Io(std::io::Error),
    TooLong,
    Closed,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineError::Io(e) => write!(f, "{e}"),
            LineError::TooLong => write!(f, "a line longer than {MAX_LINE} bytes"),
            LineError::Closed => f.write_str("connection closed"),
        }
    }
}

/// Reads one `\n`-terminated line of at most [`MAX_LINE`] bytes.
async fn read_line<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> Result<String, LineError> {
    let mut buf = Vec::new();
    let n = (&mut *r)
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(LineError::Io)?;
    if n == 0 {
        return Err(LineError::Closed);
    }
    if buf.last() != Some(&b'\n') {
        return Err(if buf.len() > MAX_LINE {
            LineError::TooLong
        } else {
            LineError::Closed
        });
    }
    buf.pop();
    String::from_utf8(buf).map_err(|_| LineError::Io(std::io::ErrorKind::InvalidData.into()))
}

async fn write_json<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, v: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await
}

// ---------------------------------------------------------------- client

/// A bench listener on another host, and how to authenticate to it.
#[derive(Clone)]
pub struct RemoteHost {
    /// The listener's address.
    pub addr: SocketAddr,
    /// The token it printed at start.
    pub token: Option<String>,
    /// An identity whose peer ID the listener allows (used instead of
    /// the token when set).
    pub identity: Option<Arc<Identity>>,
}

impl fmt::Debug for RemoteHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteHost")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("identity", &self.identity.as_ref().map(|i| *i.peer_id()))
            .finish()
    }
}

/// A responder started on a remote host: what it announced, and the
/// control connection that keeps it alive (dropping it stops it).
pub struct RemoteResponder {
    /// Its `READY` announcement.
    pub ready: Ready,
    /// The control connection.
    pub control: TcpStream,
}

impl RemoteHost {
    /// A listener at `addr`, authenticated by `token`.
    pub fn new(addr: SocketAddr, token: Option<String>) -> RemoteHost {
        RemoteHost {
            addr,
            token,
            identity: None,
        }
    }

    /// Opens a control connection, sends `req` and reads the answer.
    async fn ask(&self, mut req: Request) -> Result<(TcpStream, Reply), RemoteError> {
        let addr = self.addr;
        let timeout = |wait| RemoteError::Timeout { addr, wait };
        let stream = tokio::time::timeout(HANDSHAKE_WAIT, TcpStream::connect(addr))
            .await
            .map_err(|_| timeout(HANDSHAKE_WAIT))?
            .map_err(|source| RemoteError::Connect { addr, source })?;
        let _ = stream.set_nodelay(true);
        let mut r = BufReader::new(stream);
        let proto = |what: String| RemoteError::Protocol { addr, what };
        let hello = tokio::time::timeout(HANDSHAKE_WAIT, read_line(&mut r))
            .await
            .map_err(|_| timeout(HANDSHAKE_WAIT))?
            .map_err(|e| proto(format!("reading the hello: {e}")))?;
        let hello: Hello = match serde_json::from_str(&hello) {
            Ok(h) => h,
            Err(_) => {
                // A refusal before the hello (the listener is busy).
                let reply: Reply = serde_json::from_str(&hello)
                    .map_err(|e| proto(format!("not a bench listener ({e})")))?;
                return Err(refused(addr, reply));
            }
        };
        if hello.protocol != PROTOCOL {
            return Err(proto(format!(
                "speaks {:?}, this juxta speaks {PROTOCOL:?}",
                hello.protocol
            )));
        }
        if let Some(id) = &self.identity {
            let peer = id.peer_id().to_string();
            let sig = id.sign_sha256_prehash(&transcript(&hello.nonce, &peer));
            req.proof = Some(Proof {
                peer,
                cert: hex::encode(id.cert_der()),
                sig: hex::encode(&sig),
            });
        } else {
            req.token = self.token.clone();
        }
        write_json(r.get_mut(), &req)
            .await
            .map_err(|e| proto(format!("sending the request: {e}")))?;
        let line = tokio::time::timeout(START_WAIT, read_line(&mut r))
            .await
            .map_err(|_| timeout(START_WAIT))?
            .map_err(|e| proto(format!("reading the answer: {e}")))?;
        let reply: Reply =
            serde_json::from_str(&line).map_err(|e| proto(format!("bad answer: {e}")))?;
        if reply.refused.is_some() {
            return Err(refused(addr, reply));
        }
        Ok((r.into_inner(), reply))
    }

    /// The remote machine's facts ([`crate::machine::MachineFacts`] as
    /// JSON).
    pub async fn machine(&self) -> Result<serde_json::Value, RemoteError> {
        let (_, reply) = self
            .ask(Request {
                op: "machine".into(),
                ..Request::default()
            })
            .await?;
        reply.machine.ok_or_else(|| RemoteError::Protocol {
            addr: self.addr,
            what: "no machine facts in the answer".into(),
        })
    }

    /// Starts a responder for `spec` on the remote host (its bind
    /// address and namespace are the remote's choice).
    pub async fn responder(&self, spec: &ResponderSpec) -> Result<RemoteResponder, RemoteError> {
        let (control, reply) = self
            .ask(Request {
                op: "responder".into(),
                layer: Some(spec.layer.name().into()),
                key_bits: Some(spec.key_bits),
                receivers: Some(spec.receivers),
                ..Request::default()
            })
            .await?;
        let line = reply.ready.ok_or_else(|| RemoteError::Protocol {
            addr: self.addr,
            what: "no READY line in the answer".into(),
        })?;
        let ready = Ready::parse(&line).ok_or_else(|| RemoteError::Protocol {
            addr: self.addr,
            what: format!("unexpected READY line {line:?}"),
        })?;
        Ok(RemoteResponder { ready, control })
    }
}

fn refused(addr: SocketAddr, reply: Reply) -> RemoteError {
    RemoteError::Refused {
        addr,
        kind: reply.refused.unwrap_or(Refusal::Failed),
        message: reply.message.unwrap_or_default(),
    }
}

// ---------------------------------------------------------------- server

/// What a bench listener serves, and to whom.
#[derive(Clone)]
pub struct ServeConfig {
    /// The `juxta` binary (runs `bench-responder`).
    pub exe: PathBuf,
    /// The token clients present (`None`: only allowed peers).
    pub token: Option<String>,
    /// Peer IDs allowed without the token (with a proof).
    pub allowed_peers: Vec<PeerId>,
    /// Most responders at once per client address.
    pub max_responders: usize,
    /// Most control connections at once.
    pub max_connections: usize,
}

impl fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeConfig")
            .field("exe", &self.exe)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("allowed_peers", &self.allowed_peers)
            .field("max_responders", &self.max_responders)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// A new random token (32 hex digits).
pub fn new_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// Responders running per client address.
type Slots = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// Releases a client's responder slot when dropped.
struct Slot {
    slots: Slots,
    ip: IpAddr,
}

impl Slot {
    fn take(slots: &Slots, ip: IpAddr, max: usize) -> Option<Slot> {
        let mut m = slots.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Slot {
            slots: slots.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Serves bench clients on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, cfg: ServeConfig) {
    let cfg = Arc::new(cfg);
    let slots: Slots = Arc::default();
    let conns = Arc::new(tokio::sync::Semaphore::new(cfg.max_connections.max(1)));
    loop {
        let (mut stream, from) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "bench: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            tracing::warn!(client = %from, reason = Refusal::Busy.name(), "bench: refused");
            tokio::spawn(async move {
                let r = Reply {
                    refused: Some(Refusal::Busy),
                    ..Reply::default()
                };
                let _ = tokio::time::timeout(HANDSHAKE_WAIT, write_json(&mut stream, &r)).await;
            });
            continue;
        };
        let cfg = cfg.clone();
        let slots = slots.clone();
        tokio::spawn(async move {
            let _permit = permit;
            serve_client(stream, from, &cfg, &slots).await;
        });
    }
}

/// Compares two tokens in time independent of where they differ.
fn same_token(a: &str, b: &str) -> bool {
    let (ha, hb) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    ha.iter()
        .zip(hb.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Checks the request's credentials; `Ok` names who the client is.
fn authorize(cfg: &ServeConfig, nonce: &str, req: &Request) -> Result<String, (Refusal, String)> {
    if let Some(p) = &req.proof {
        let claimed: PeerId = p
            .peer
            .parse()
            .map_err(|e| (Refusal::BadProof, format!("peer ID: {e}")))?;
        if !cfg.allowed_peers.contains(&claimed) {
            return Err((Refusal::PeerNotAllowed, claimed.to_string()));
        }
        let cert = hex::decode(&p.cert).map_err(|_| (Refusal::BadProof, "cert: not hex".into()))?;
        let sig = hex::decode(&p.sig).map_err(|_| (Refusal::BadProof, "sig: not hex".into()))?;
        let cert = RemoteCert::parse(cert.into())
            .map_err(|e| (Refusal::BadProof, format!("cert: {e}")))?;
        if cert.derived_peer_id() != &claimed {
            return Err((
                Refusal::BadProof,
                "the certificate is not the peer ID's".into(),
            ));
        }
        cert.verify_sha256_prehash(&transcript(nonce, &p.peer), &sig)
            .map_err(|_| (Refusal::BadProof, "the signature does not verify".into()))?;
        return Ok(format!("peer {claimed}"));
    }
    match (&req.token, &cfg.token) {
        (None, _) => Err((Refusal::NoToken, String::new())),
        (Some(t), Some(mine)) if same_token(t, mine) => Ok("token".into()),
        (Some(_), _) => Err((Refusal::WrongToken, String::new())),
    }
}

async fn refuse<W: AsyncWrite + Unpin>(
    w: &mut W,
    from: SocketAddr,
    kind: Refusal,
    message: String,
) {
    tracing::warn!(client = %from, reason = kind.name(), detail = %message, "bench: refused");
    let r = Reply {
        refused: Some(kind),
        message: (!message.is_empty()).then_some(message),
        ..Reply::default()
    };
    let _ = tokio::time::timeout(HANDSHAKE_WAIT, write_json(w, &r)).await;
}

async fn serve_client(stream: TcpStream, from: SocketAddr, cfg: &ServeConfig, slots: &Slots) {
    let _ = stream.set_nodelay(true);
    // The address the client reached: responders bind it.
    let local = match stream.local_addr() {
        Ok(a) => a.ip().to_canonical(),
        Err(_) => return,
    };
    let mut r = BufReader::new(stream);
    let nonce = hex::encode(rand::random::<[u8; 16]>());
    let hello = Hello {
        protocol: PROTOCOL.into(),
        nonce: nonce.clone(),
    };
    if write_json(r.get_mut(), &hello).await.is_err() {
        return;
    }
    let line = match tokio::time::timeout(HANDSHAKE_WAIT, read_line(&mut r)).await {
        Ok(Ok(l)) => l,
        Ok(Err(LineError::Closed)) => return,
        Ok(Err(e)) => return refuse(r.get_mut(), from, Refusal::BadRequest, e.to_string()).await,
        Err(_) => {
            let m = format!("no request within {} s", HANDSHAKE_WAIT.as_secs());
            return refuse(r.get_mut(), from, Refusal::BadRequest, m).await;
        }
    };
    let req: Request = match serde_json::from_str(&line) {
        Ok(q) => q,
        Err(e) => return refuse(r.get_mut(), from, Refusal::BadRequest, e.to_string()).await,
    };
    if req.token.as_ref().is_some_and(|t| t.len() > MAX_TOKEN) {
        let m = format!("token longer than {MAX_TOKEN} bytes");
        return refuse(r.get_mut(), from, Refusal::BadRequest, m).await;
    }
    let who = match authorize(cfg, &nonce, &req) {
        Ok(w) => w,
        Err((kind, m)) => return refuse(r.get_mut(), from, kind, m).await,
    };
    match req.op.as_str() {
        "machine" => {
            tracing::info!(client = %from, by = %who, "bench: machine facts");
            let reply = Reply {
                machine: serde_json::to_value(crate::machine::facts()).ok(),
                ..Reply::default()
            };
            let _ = write_json(r.get_mut(), &reply).await;
        }
        "responder" => {
            let spec = match responder_spec(&req, local) {
                Ok(s) => s,
                Err(m) => return refuse(r.get_mut(), from, Refusal::BadRequest, m).await,
            };
            let Some(_slot) = Slot::take(slots, from.ip().to_canonical(), cfg.max_responders)
            else {
                let m = format!("at most {} at once", cfg.max_responders);
                return refuse(r.get_mut(), from, Refusal::TooManyResponders, m).await;
            };
            let host = Host::Process(cfg.exe.clone());
            let started = tokio::time::timeout(
                START_WAIT,
                crate::layers::spawn_responder(&host, &spec, None),
            )
            .await;
            let mut responder = match started {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => {
                    return refuse(r.get_mut(), from, Refusal::Failed, e.to_string()).await
                }
                Err(_) => {
                    let m = format!("not ready within {} s", START_WAIT.as_secs());
                    return refuse(r.get_mut(), from, Refusal::Failed, m).await;
                }
            };
            tracing::info!(
                client = %from,
                by = %who,
                layer = spec.layer.name(),
                ready = %responder.ready.to_line(),
                "bench: responder started"
            );
            let reply = Reply {
                ready: Some(responder.ready.to_line()),
                ..Reply::default()
            };
            if write_json(r.get_mut(), &reply).await.is_ok() {
                // The responder lives until the client closes the
                // connection (or it ends by itself: then the connection
                // is closed); anything the client sends is read and
                // dropped (bounded buffer).
                let mut buf = [0u8; 512];
                let closed = async {
                    loop {
                        match r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                };
                tokio::select! {
                    _ = closed => {}
                    _ = responder.exited() => {
                        tracing::warn!(client = %from, layer = spec.layer.name(), "bench: responder ended by itself");
                    }
                }
            }
            responder.stop().await;
            tracing::info!(client = %from, layer = spec.layer.name(), "bench: responder stopped");
        }
        other => {
            let m = format!(
                "unknown op {:?}",
                other.chars().take(64).collect::<String>()
            );
            refuse(r.get_mut(), from, Refusal::BadRequest, m).await
        }
    }
}

/// The responder a request asks for, its numbers checked.
fn responder_spec(req: &Request, bind: IpAddr) -> Result<ResponderSpec, String> {
    let name = req.layer.as_deref().ok_or("no layer")?;
    let layer = Layer::parse(name).map_err(|e| e.to_string())?;
    if layer.stack().is_some() {
        return Err(format!(
            "layer {} runs another stack's programs, not a responder",
            layer.name()
        ));
    }
    let key_bits = req.key_bits.unwrap_or(1024);
    if !KEY_BITS.contains(&key_bits) {
        return Err(format!(
            "key_bits {key_bits} outside {}..={}",
            KEY_BITS.start(),
            KEY_BITS.end()
        ));
    }
    let receivers = req.receivers.unwrap_or(1);
    if !(1..=MAX_RECEIVERS).contains(&receivers) {
        return Err(format!("receivers {receivers} outside 1..={MAX_RECEIVERS}"));
    }
    let mut spec = ResponderSpec::new(layer, key_bits, receivers);
    spec.bind = bind;
    Ok(spec)
}

impl From<RemoteError> for BenchError {
    fn from(e: RemoteError) -> BenchError {
        BenchError::Remote(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(token: &str) -> ServeConfig {
        ServeConfig {
            exe: PathBuf::from("/nonexistent"),
            token: Some(token.into()),
            allowed_peers: vec![],
            max_responders: 1,
            max_connections: 4,
        }
    }

    #[tokio::test]
    async fn tokens_are_checked_and_refusals_typed() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(serve(l, cfg("good")));
        let ok = RemoteHost::new(addr, Some("good".into()));
        let facts = ok.machine().await.unwrap();
        assert!(facts["cores"].as_u64().unwrap() >= 1);
        for (token, kind) in [(Some("bad"), Refusal::WrongToken), (None, Refusal::NoToken)] {
            let h = RemoteHost::new(addr, token.map(String::from));
            match h.machine().await {
                Err(RemoteError::Refused { kind: k, .. }) => assert_eq!(k, kind),
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        let e = ok
            .ask(Request {
                op: "responder".into(),
                layer: Some("tcp".into()),
                key_bits: Some(1 << 20),
                ..Request::default()
            })
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                RemoteError::Refused {
                    kind: Refusal::BadRequest,
                    ..
                }
            ),
            "{e}"
        );
        server.abort();
    }

    #[tokio::test]
    async fn an_overlong_line_is_refused_and_the_listener_goes_on() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(serve(l, cfg("good")));
        let s = TcpStream::connect(addr).await.unwrap();
        let mut r = BufReader::new(s);
        read_line(&mut r).await.unwrap();
        let junk = vec![b'x'; MAX_LINE + 1];
        let _ = r.get_mut().write_all(&junk).await;
        let answer = read_line(&mut r).await.unwrap();
        let reply: Reply = serde_json::from_str(&answer).unwrap();
        assert_eq!(reply.refused, Some(Refusal::BadRequest));
        let ok = RemoteHost::new(addr, Some("good".into()));
        assert!(ok.machine().await.is_ok());
        server.abort();
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_are_refused_busy() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut c = cfg("good");
        c.max_connections = 1;
        let server = tokio::spawn(serve(l, c));
        // One connection holds the only place (it says nothing yet).
        let held = TcpStream::connect(addr).await.unwrap();
        let mut held = BufReader::new(held);
        read_line(&mut held).await.unwrap();
        let ok = RemoteHost::new(addr, Some("good".into()));
        match ok.machine().await {
            Err(RemoteError::Refused {
                kind: Refusal::Busy,
                ..
            }) => {}
            other => panic!("expected busy, got {other:?}"),
        }
        // Once it is gone, the place is free again.
        drop(held);
        let mut served = false;
        for _ in 0..100 {
            if ok.machine().await.is_ok() {
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served, "the place was not freed");
        server.abort();
    }

    #[test]
    fn peer_proofs_verify_only_for_listed_peers() {
        let mut rng = rand::thread_rng();
        let id = Identity::generate(&mut rng, 1024, "c", 1_700_000_000).unwrap();
        let other = Identity::generate(&mut rng, 1024, "o", 1_700_000_000).unwrap();
        let mut c = cfg("t");
        c.allowed_peers = vec![*id.peer_id()];
        let proof = |who: &Identity, signer: &Identity, nonce: &str| Request {
            proof: Some(Proof {
                peer: who.peer_id().to_string(),
                cert: hex::encode(who.cert_der()),
                sig: hex::encode(
                    signer.sign_sha256_prehash(&transcript(nonce, &who.peer_id().to_string())),
                ),
            }),
            op: "machine".into(),
            ..Request::default()
        };
        assert!(authorize(&c, "n1", &proof(&id, &id, "n1")).is_ok());
        // Replayed against another nonce, signed by someone else, or a
        // peer not listed: refused.
        assert_eq!(
            authorize(&c, "n2", &proof(&id, &id, "n1")).unwrap_err().0,
            Refusal::BadProof
        );
        assert_eq!(
            authorize(&c, "n1", &proof(&id, &other, "n1"))
                .unwrap_err()
                .0,
            Refusal::BadProof
        );
        assert_eq!(
            authorize(&c, "n1", &proof(&other, &other, "n1"))
                .unwrap_err()
                .0,
            Refusal::PeerNotAllowed
        );
    }
}
