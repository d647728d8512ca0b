//! The control channel: a Unix socket in the daemon's home (owner-only,
//! nothing on the network) carrying newline-delimited JSON, one request
//! line answered by one response line.
//!
//! Request: `{"request": "status"}`, `{"request": "discover", "kind":
//! "adv", "remote": true, ...}`. Response: `{"ok": true, "result": ...}`
//! or `{"ok": false, "error": {"kind": "unknown_request", "message":
//! "..."}}`. A request line is at most [`MAX_REQUEST`] bytes.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Largest request line (bytes, newline included).
pub const MAX_REQUEST: usize = 1 << 20;
/// Largest response line a client reads.
pub const MAX_RESPONSE: usize = 64 << 20;
/// How long a client may take to send a request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Clients served at once by default (`limits.control_clients`).
pub const DEFAULT_CLIENTS: usize = 64;
/// The socket's file name in the home directory.
pub const SOCKET_NAME: &str = "control.sock";

/// The control socket of the daemon whose home is `home`.
pub fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET_NAME)
}

/// Names of the requests, for the unknown-request error.
pub const REQUESTS: [&str; 9] = [
    "status",
    "peers",
    "groups",
    "discover",
    "publish",
    "route",
    "serve",
    "serve_stop",
    "transfers",
];

/// A request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Identity, addresses, roles, connections, leases, counters.
    Status,
    /// Connected and known peers.
    Peers,
    /// Groups joined.
    Groups,
    /// Advertisements, locally or from connected peers.
    Discover {
        /// `peer`, `group` or `adv`.
        #[serde(default = "default_kind")]
        kind: String,
        /// Attribute to match.
        #[serde(default)]
        attr: Option<String>,
        /// Value to match (`*` wildcards).
        #[serde(default)]
        value: Option<String>,
        /// Ask connected peers (rendezvous) too.
        #[serde(default)]
        remote: bool,
        /// Most advertisements.
        #[serde(default = "default_threshold")]
        threshold: u32,
    },
    /// Publish an advertisement (its XML).
    Publish {
        /// The advertisement document.
        xml: String,
    },
    /// How a peer is reached.
    Route {
        /// The peer ID (`urn:jxta:...`).
        peer: String,
    },
    /// Serve a file or directory (`juxta send` with a daemon): answers
    /// with the ticket.
    Serve {
        /// Absolute path of the file or directory.
        path: String,
        /// The ticket's lifetime in seconds (1 to 366 days).
        expires_s: u64,
        /// Stop after the first receiver that got everything.
        #[serde(default)]
        once: bool,
    },
    /// Stop serving a ticket.
    ServeStop {
        /// The ticket `serve` answered.
        ticket: String,
    },
    /// Tickets being served, and the last ones that ended.
    Transfers,
}

fn default_kind() -> String {
    "adv".into()
}

fn default_threshold() -> u32 {
    10
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ControlError {
    /// Machine-readable kind: `bad_request`, `unknown_request`,
    /// `too_large`, `busy`, `invalid_argument`, `no_route`, `not_connected`,
    /// `limit`, `not_found`, `failed`.
    pub kind: String,
    /// For a person.
    pub message: String,
}

impl ControlError {
    /// An error of `kind`.
    pub fn new(kind: &str, message: impl Into<String>) -> ControlError {
        ControlError {
            kind: kind.into(),
            message: message.into(),
        }
    }
}

/// A response line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The answer (when `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The error (when not `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ControlError>,
}

impl Response {
    fn from_result(r: Result<serde_json::Value, ControlError>) -> Response {
        match r {
            Ok(v) => Response {
                ok: true,
                result: Some(v),
                error: None,
            },
            Err(e) => Response {
                ok: false,
                result: None,
                error: Some(e),
            },
        }
    }
}

/// Parses one request line into a typed request or a typed error.
pub fn parse_request(line: &[u8]) -> Result<Request, ControlError> {
    let v: serde_json::Value = serde_json::from_slice(line)
        .map_err(|e| ControlError::new("bad_request", format!("not JSON: {e}")))?;
    let name = v.get("request").and_then(|r| r.as_str()).ok_or_else(|| {
        ControlError::new("bad_request", "no \"request\" field naming the request")
    })?;
    if !REQUESTS.contains(&name) {
        return Err(ControlError::new(
            "unknown_request",
            format!("unknown request {name:?} (known: {})", REQUESTS.join(", ")),
        ));
    }
    // serde does not enforce `deny_unknown_fields` on the unit variants
    // of an internally tagged enum.
    if matches!(name, "status" | "peers" | "groups" | "transfers") {
        if let Some(extra) = v
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "request"))
        {
            return Err(ControlError::new(
                "bad_request",
                format!("unknown field `{extra}` for request {name:?}"),
            ));
        }
    }
    serde_json::from_value(v).map_err(|e| ControlError::new("bad_request", e.to_string()))
}

/// What a control line read gave.
enum Line {
    Eof,
    TooLarge,
    Request(Vec<u8>),
}

/// Reads one line of at most `max` bytes.
async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, max: usize) -> std::io::Result<Line> {
    let mut buf = Vec::new();
    let n = (&mut *r)
        .take(max as u64 + 1)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Ok(Line::Eof);
    }
    if buf.len() > max || (buf.last() != Some(&b'\n') && buf.len() == max + 1) {
        return Ok(Line::TooLarge);
    }
    Ok(Line::Request(buf))
}

/// The control socket could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The home directory is unsafe for a control socket.
    #[error("{}: {reason}; refusing to use it for the control socket", path.display())]
    UnsafeHome {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The socket file is owned by someone else or open to others.
    #[error("control socket {}: {reason}; refused", path.display())]
    UnsafeSocket {
        /// The socket.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No daemon answers there.
    #[error("no peer daemon at {} ({source}); start one with `juxta peer --home <home>`", path.display())]
    NotRunning {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Reading or writing failed.
    #[error("control socket {}: {what}: {source}", path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// What was done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The daemon's answer was not a response.
    #[error("control socket {}: malformed response: {reason}", path.display())]
    BadResponse {
        /// What was wrong.
        reason: String,
        /// The socket.
        path: PathBuf,
    },
}

fn current_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// The daemon's check of its home: a directory owned by this user that
/// no one else may write to.
pub fn check_home(home: &Path) -> Result<(), SocketError> {
    let unsafe_home = |reason: String| SocketError::UnsafeHome {
        path: home.to_path_buf(),
        reason,
    };
    let m = std::fs::symlink_metadata(home).map_err(|e| unsafe_home(e.to_string()))?;
    if !m.is_dir() {
        return Err(unsafe_home("not a directory".into()));
    }
    if m.uid() != current_uid() {
        return Err(unsafe_home(format!(
            "owned by uid {}, not by this user (uid {})",
            m.uid(),
            current_uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(unsafe_home(format!(
            "writable by group or others (mode {:o})",
            m.mode() & 0o777
        )));
    }
    Ok(())
}

/// The client's check of the socket: owned by this user, not a symlink,
/// no permission for group or others.
pub fn check_socket(path: &Path) -> Result<(), SocketError> {
    let m = std::fs::symlink_metadata(path).map_err(|source| SocketError::NotRunning {
        path: path.to_path_buf(),
        source,
    })?;
    let refuse = |reason: String| SocketError::UnsafeSocket {
        path: path.to_path_buf(),
        reason,
    };
    use std::os::unix::fs::FileTypeExt;
    if !m.file_type().is_socket() {
        return Err(refuse("not a socket".into()));
    }
    if m.uid() != current_uid() {
        return Err(refuse(format!(
            "owned by uid {}, not by this user (uid {})",
            m.uid(),
            current_uid()
        )));
    }
    if m.mode() & 0o077 != 0 {
        return Err(refuse(format!(
            "open to group or others (mode {:o}, expected 600)",
            m.mode() & 0o777
        )));
    }
    Ok(())
}

/// Binds the control socket at `path` (replacing a stale one: the caller
/// holds the home's lock) with mode 0600.
pub fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    let io = |what: &'static str| {
        let path = path.to_path_buf();
        move |source| SocketError::Io { path, what, source }
    };
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("removing the stale socket")(e)),
    }
    let l = UnixListener::bind(path).map_err(io("binding"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io("setting mode 0600"))?;
    Ok(l)
}

/// Something that answers requests.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request.
    fn handle(
        &self,
        req: Request,
    ) -> impl std::future::Future<Output = Result<serde_json::Value, ControlError>> + Send;
}

/// Serves the control socket until the task is aborted: each client sends
/// request lines and gets one response line each. At most `max_clients`
/// are served at once; a further one gets a `busy` error.
pub async fn serve<H: Handler>(listener: UnixListener, handler: Arc<H>, max_clients: usize) {
    let slots = Arc::new(tokio::sync::Semaphore::new(max_clients.max(1)));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "control accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                let mut s = stream;
                let r = Response::from_result(Err(ControlError::new(
                    "busy",
                    "too many control clients at once",
                )));
                let _ = write_response(&mut s, &r).await;
            });
            continue;
        };
        let h = handler.clone();
        tokio::spawn(async move {
            serve_client(stream, h).await;
            drop(permit);
        });
    }
}

async fn write_response(s: &mut (impl AsyncWriteExt + Unpin), r: &Response) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(r).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
    line.push(b'\n');
    s.write_all(&line).await?;
    s.flush().await
}

async fn serve_client<H: Handler>(stream: UnixStream, handler: Arc<H>) {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    loop {
        let line = match tokio::time::timeout(REQUEST_TIMEOUT, read_line(&mut r, MAX_REQUEST)).await
        {
            Err(_) | Ok(Err(_)) | Ok(Ok(Line::Eof)) => return,
            Ok(Ok(Line::TooLarge)) => {
                let e = ControlError::new(
                    "too_large",
                    format!("request longer than {MAX_REQUEST} bytes"),
                );
                let _ = write_response(&mut w, &Response::from_result(Err(e))).await;
                return;
            }
            Ok(Ok(Line::Request(l))) => l,
        };
        let res = match parse_request(&line) {
            Ok(req) => handler.handle(req).await,
            Err(e) => Err(e),
        };
        if write_response(&mut w, &Response::from_result(res))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Sends `req` to the daemon of `home` and returns its answer.
pub async fn request(home: &Path, req: &Request) -> Result<Response, SocketError> {
    let path = socket_path(home);
    check_socket(&path)?;
    let s = UnixStream::connect(&path)
        .await
        .map_err(|source| SocketError::NotRunning {
            path: path.clone(),
            source,
        })?;
    let io = |what: &'static str| {
        let path = path.clone();
        move |source| SocketError::Io { path, what, source }
    };
    let (r, mut w) = s.into_split();
    let mut line = serde_json::to_vec(req).map_err(|e| SocketError::BadResponse {
        reason: e.to_string(),
        path: path.clone(),
    })?;
    line.push(b'\n');
    w.write_all(&line).await.map_err(io("sending"))?;
    let mut r = BufReader::new(r);
    match read_line(&mut r, MAX_RESPONSE)
        .await
        .map_err(io("receiving"))?
    {
        Line::Request(l) => serde_json::from_slice(&l).map_err(|e| SocketError::BadResponse {
            reason: e.to_string(),
            path: path.clone(),
        }),
        Line::Eof => Err(SocketError::BadResponse {
            reason: "connection closed".into(),
            path,
        }),
        Line::TooLarge => Err(SocketError::BadResponse {
            reason: "response too large".into(),
            path,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_errors_are_typed() {
        assert_eq!(
            parse_request(br#"{"request":"status"}"#),
            Ok(Request::Status)
        );
        let d = parse_request(br#"{"request":"discover","remote":true}"#).unwrap();
        assert_eq!(
            d,
            Request::Discover {
                kind: "adv".into(),
                attr: None,
                value: None,
                remote: true,
                threshold: 10
            }
        );
        assert_eq!(
            parse_request(br#"{"request":"reboot"}"#).unwrap_err().kind,
            "unknown_request"
        );
        assert_eq!(
            parse_request(b"\x00\xff garbage").unwrap_err().kind,
            "bad_request"
        );
        assert_eq!(
            parse_request(br#"{"request":"route"}"#).unwrap_err().kind,
            "bad_request"
        );
        assert_eq!(
            parse_request(br#"{"request":"serve","path":"/x","expires_s":60}"#).unwrap(),
            Request::Serve {
                path: "/x".into(),
                expires_s: 60,
                once: false
            }
        );
        assert_eq!(
            parse_request(br#"{"request":"serve","path":"/x","expires_s":-1}"#)
                .unwrap_err()
                .kind,
            "bad_request"
        );
        assert_eq!(
            parse_request(br#"{"request":"transfers","x":1}"#)
                .unwrap_err()
                .kind,
            "bad_request"
        );
        assert_eq!(
            parse_request(br#"{"request":"status","extra":1}"#)
                .unwrap_err()
                .kind,
            "bad_request"
        );
    }

    #[tokio::test]
    async fn long_lines_are_cut_at_the_bound() {
        let data = [b'x'; 100];
        let mut r = BufReader::new(&data[..]);
        assert!(matches!(
            read_line(&mut r, 10).await.unwrap(),
            Line::TooLarge
        ));
        let mut r = BufReader::new(&b"abc\n"[..]);
        assert!(matches!(read_line(&mut r, 10).await.unwrap(), Line::Request(l) if l == b"abc\n"));
        assert!(matches!(read_line(&mut r, 10).await.unwrap(), Line::Eof));
    }
}
