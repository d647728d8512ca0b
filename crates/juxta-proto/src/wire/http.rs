//! JXTA's HTTP transport on the wire, without the socket (digest §10,
//! JXSE's `servlethttp`).
//!
//! JXSE's HTTP transport is a servlet: a client
//! * pings with `GET /` (no path, no body); the answer is the server's peer
//!   ID unique value (`cbid-…`) as `text/plain;charset=UTF-8`;
//! * sends by `POST`ing one binary message (`application/x-jxta-msg`, with
//!   its CBJX trailer) as the request body;
//! * receives by polling `GET /<its peer unique value>?<responseTimeout>,<extraResponseTimeout>,<destAddr>`;
//!   the response body holds binary messages back to back (each one
//!   delimits itself: element count, then the trailer's three length fields).
//!
//! A poll carries no proof of who polls, so Juxta adds a challenge: the
//! ping answer carries a fresh nonce ([`NONCE_HEADER`]); the client opens a
//! session by POSTing a CBJX-signed [`hello_message`] holding that nonce,
//! and gets a session token ([`SESSION_HEADER`]) that its polls and posts
//! must carry. Everything here is bounded: the head of a request or
//! response ([`MAX_HEAD`]) and bodies (checked from `content-length`
//! against the caller's limit before anything is allocated). Chunked
//! bodies are refused with a typed error.

use bytes::{BufMut, Bytes, BytesMut};

use crate::endpoint::address::EndpointAddress;
use crate::endpoint::{ServiceAddress, ELEM_DEST_ADDRESS, ELEM_SOURCE_ADDRESS};
use crate::id::{IdError, PeerId};
use crate::message::cbjx::{
    self, CbjxError, CbjxVerifier, TrailerField, MAX_TRAILER_CERT_LEN, MAX_TRAILER_SIG_LEN,
    MAX_TRAILER_SRC_LEN,
};
use crate::message::codec::{decode_v0, MessageError};
use crate::message::{Element, Message, NS_JXTA};

pub use super::frame::CONTENT_TYPE_JXTA_MSG;

/// Largest request or response head (request line and headers) accepted.
pub const MAX_HEAD: usize = 8 * 1024;
/// Most header lines accepted in one head.
pub const MAX_HEADERS: usize = 64;
/// Content type of the ping answer.
pub const CONTENT_TYPE_TEXT: &str = "text/plain;charset=UTF-8";
/// Header of the ping answer carrying the session challenge (Juxta only;
/// JXSE ignores it).
pub const NONCE_HEADER: &str = "x-jxta-nonce";
/// Header carrying the session token (Juxta only).
pub const SESSION_HEADER: &str = "x-jxta-session";
/// Service the session-opening message is addressed to.
pub const HELLO_SERVICE: &str = "JuxtaHttpSession";
/// Element of the hello message holding the nonce (empty namespace).
pub const HELLO_ELEMENT: &str = "nonce";
/// JXSE's cap on a poll's response timeout (2 minutes); 0 also means this.
pub const MAX_RESPONSE_TIMEOUT_MS: i64 = 120_000;
/// Longest nonce or session token accepted (hex text).
pub const MAX_TOKEN_LEN: usize = 128;

/// Errors parsing an HTTP head or body of the JXTA HTTP transport.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// No end of head within [`MAX_HEAD`] bytes.
    #[error("HTTP head longer than {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// More than [`MAX_HEADERS`] header lines.
    #[error("more than {MAX_HEADERS} header lines")]
    TooManyHeaders,
    /// The head is not UTF-8 text.
    #[error("HTTP head is not text")]
    NotText,
    /// The request line is not `METHOD target HTTP/1.x`.
    #[error("malformed request line")]
    BadRequestLine,
    /// The status line is not `HTTP/1.x code reason`.
    #[error("malformed status line")]
    BadStatusLine,
    /// A header line without a colon or with an invalid name.
    #[error("malformed header line")]
    BadHeader,
    /// A method other than GET and POST.
    #[error("unsupported method {0:?}")]
    UnsupportedMethod(String),
    /// Not HTTP/1.0 or HTTP/1.1.
    #[error("unsupported HTTP version")]
    UnsupportedVersion,
    /// `content-length` is not a number, or given twice with two values.
    #[error("invalid content-length")]
    BadContentLength,
    /// The body is larger than allowed.
    #[error("body of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// announced length
        len: u64,
        /// configured maximum
        max: u64,
    },
    /// A `transfer-encoding` (chunked) body: not supported.
    #[error("transfer-encoding is not supported")]
    TransferEncoding,
    /// The path does not name a peer (`/<cbid-…>`).
    #[error("path does not name a peer: {0}")]
    BadPeerId(IdError),
    /// A session token or nonce that is too long or not printable.
    #[error("invalid {0} header")]
    BadToken(&'static str),
    /// The body is not a binary JXTA message.
    #[error("message: {0}")]
    Message(#[from] MessageError),
    /// Bad or unverifiable CBJX trailer.
    #[error("cbjx: {0}")]
    Cbjx(#[from] CbjxError),
    /// A message without a trailer where one is required.
    #[error("message without CBJX trailer")]
    MissingTrailer,
    /// The trailer names another peer than expected.
    #[error("message signed by {signer} where {expected} was expected")]
    SpoofedSource {
        /// who signed
        signer: Box<PeerId>,
        /// who was expected
        expected: Box<PeerId>,
    },
    /// A message without a usable destination address element.
    #[error("message without a valid EndpointDestinationAddress")]
    NoDestination,
    /// The trailer's peer ID is not the `cbid` of its certificate's key:
    /// anyone can sign a claim to that ID, so it proves nothing.
    #[error("peer ID {0} is not derived from the signing certificate")]
    IdNotFromCert(Box<PeerId>),
}

/// The two methods of the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Ping or poll.
    Get,
    /// A message in the body.
    Post,
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// GET or POST.
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The query string (after `?`), if any.
    pub query: Option<String>,
    /// Body length (0 without a `content-length`).
    pub content_length: u64,
    /// `content-type`, if given.
    pub content_type: Option<String>,
    /// [`SESSION_HEADER`], if given.
    pub session: Option<String>,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// Bytes the head used (the body follows).
    pub head_len: usize,
}

impl Request {
    /// The peer the path names (JXSE's "requestor"): the path without its
    /// leading and trailing slashes, a peer ID unique value (`cbid-…`) or
    /// URN. `Ok(None)` for an empty path (`/`).
    pub fn requestor(&self) -> Result<Option<PeerId>, HttpError> {
        let p = self.path.trim_matches('/');
        if p.is_empty() {
            return Ok(None);
        }
        // Bytes, not `&p[..9]`: a multi-byte character may straddle byte 9.
        let urn = if p
            .as_bytes()
            .get(..9)
            .is_some_and(|b| b.eq_ignore_ascii_case(b"urn:jxta:"))
        {
            p.to_string()
        } else {
            format!("urn:jxta:{p}")
        };
        urn.parse::<PeerId>()
            .map(Some)
            .map_err(HttpError::BadPeerId)
    }

    /// The poll parameters, when the query has them.
    pub fn poll(&self) -> Option<PollQuery> {
        self.query.as_deref().map(PollQuery::parse)
    }
}

/// The query of a poll: `<responseTimeout>,<extraResponseTimeout>,<destAddr>`
/// (milliseconds). Parsed the way JXSE's servlet does: an unparsable
/// number is -1; 0 or more than 2 minutes is 2 minutes; the destination is
/// everything after the second comma.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollQuery {
    /// How long to wait for the first message (ms); negative: do not wait.
    pub response_timeout_ms: i64,
    /// How long to keep sending after the first message (ms); negative:
    /// one message only.
    pub extra_timeout_ms: i64,
    /// The address the client polled (`http://host:port`).
    pub dest: Option<String>,
}

impl PollQuery {
    /// Parses a query string.
    ///
    /// ```
    /// use juxta_proto::wire::http::PollQuery;
    /// let q = PollQuery::parse("0,500,http://127.0.0.1:9700");
    /// assert_eq!(q.response_timeout_ms, 120_000);
    /// assert_eq!(q.extra_timeout_ms, 500);
    /// assert_eq!(q.dest.as_deref(), Some("http://127.0.0.1:9700"));
    /// assert_eq!(PollQuery::parse(&q.to_query()), q);
    /// ```
    pub fn parse(q: &str) -> PollQuery {
        fn num(s: &str) -> i64 {
            match s.trim().parse::<i64>() {
                Ok(t) if t == 0 || t > MAX_RESPONSE_TIMEOUT_MS => MAX_RESPONSE_TIMEOUT_MS,
                Ok(t) => t,
                Err(_) => -1,
            }
        }
        let mut parts = q.splitn(3, ',');
        let response_timeout_ms = num(parts.next().unwrap_or(""));
        let extra_timeout_ms = parts.next().map_or(-1, num);
        let dest = parts.next().map(str::to_string);
        PollQuery {
            response_timeout_ms,
            extra_timeout_ms,
            dest,
        }
    }

    /// The query string.
    pub fn to_query(&self) -> String {
        match &self.dest {
            Some(d) => format!(
                "{},{},{}",
                self.response_timeout_ms, self.extra_timeout_ms, d
            ),
            None => format!("{},{}", self.response_timeout_ms, self.extra_timeout_ms),
        }
    }
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Body length (0 without a `content-length`).
    pub content_length: u64,
    /// `content-type`, if given.
    pub content_type: Option<String>,
    /// [`SESSION_HEADER`], if given.
    pub session: Option<String>,
    /// [`NONCE_HEADER`], if given.
    pub nonce: Option<String>,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// Bytes the head used.
    pub head_len: usize,
}

struct Head<'a> {
    first: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    len: usize,
}

fn find_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn parse_head(buf: &[u8]) -> Result<Option<Head<'_>>, HttpError> {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let Some(len) = find_end(window) else {
        return if buf.len() >= MAX_HEAD {
            Err(HttpError::HeadTooLarge)
        } else {
            Ok(None)
        };
    };
    let text = std::str::from_utf8(&buf[..len - 4]).map_err(|_| HttpError::NotText)?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == MAX_HEADERS {
            return Err(HttpError::TooManyHeaders);
        }
        let (name, value) = line.split_once(':').ok_or(HttpError::BadHeader)?;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
        {
            return Err(HttpError::BadHeader);
        }
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(HttpError::BadHeader);
        }
        headers.push((name, value.trim()));
    }
    Ok(Some(Head {
        first,
        headers,
        len,
    }))
}

/// The headers both directions use.
struct Common {
    content_length: u64,
    content_type: Option<String>,
    session: Option<String>,
    nonce: Option<String>,
    connection_close: bool,
    connection_keep_alive: bool,
}

fn token(v: &str, what: &'static str) -> Result<String, HttpError> {
    if v.is_empty() || v.len() > MAX_TOKEN_LEN || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(HttpError::BadToken(what));
    }
    Ok(v.to_string())
}

fn common(headers: &[(&str, &str)], max_body: u64) -> Result<Common, HttpError> {
    let mut c = Common {
        content_length: 0,
        content_type: None,
        session: None,
        nonce: None,
        connection_close: false,
        connection_keep_alive: false,
    };
    let mut length: Option<u64> = None;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("content-length") {
            if value.is_empty() || value.len() > 20 || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HttpError::BadContentLength);
            }
            let n: u64 = value.parse().map_err(|_| HttpError::BadContentLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::BadContentLength);
            }
            if n > max_body {
                return Err(HttpError::TooLarge {
                    len: n,
                    max: max_body,
                });
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::TransferEncoding);
        } else if name.eq_ignore_ascii_case("content-type") {
            c.content_type = Some(value.chars().take(256).collect());
        } else if name.eq_ignore_ascii_case(SESSION_HEADER) {
            c.session = Some(token(value, SESSION_HEADER)?);
        } else if name.eq_ignore_ascii_case(NONCE_HEADER) {
            c.nonce = Some(token(value, NONCE_HEADER)?);
        } else if name.eq_ignore_ascii_case("connection") {
            for t in value.split(',') {
                let t = t.trim();
                c.connection_close |= t.eq_ignore_ascii_case("close");
                c.connection_keep_alive |= t.eq_ignore_ascii_case("keep-alive");
            }
        }
    }
    c.content_length = length.unwrap_or(0);
    Ok(c)
}

fn version_11(v: &str) -> Result<bool, HttpError> {
    match v {
        "HTTP/1.1" => Ok(true),
        "HTTP/1.0" => Ok(false),
        _ => Err(HttpError::UnsupportedVersion),
    }
}

/// Parses a request head at the start of `buf`; `Ok(None)`: need more
/// bytes. A `content-length` above `max_body` is an error before any body
/// byte is read.
///
/// ```
/// use juxta_proto::wire::http::{parse_request, Method};
/// let r = parse_request(b"GET /cbid-00?0,0,http://h:1 HTTP/1.1\r\nHost: h\r\n\r\n", 1024)
///     .unwrap()
///     .unwrap();
/// assert_eq!(r.method, Method::Get);
/// assert_eq!(r.poll().unwrap().dest.as_deref(), Some("http://h:1"));
/// ```
pub fn parse_request(buf: &[u8], max_body: u64) -> Result<Option<Request>, HttpError> {
    let Some(head) = parse_head(buf)? else {
        return Ok(None);
    };
    let mut parts = head.first.split(' ');
    let (Some(m), Some(target), Some(v), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::BadRequestLine);
    };
    let method = match m {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "" => return Err(HttpError::BadRequestLine),
        other => {
            return Err(HttpError::UnsupportedMethod(
                other.chars().take(16).collect(),
            ))
        }
    };
    if !target.starts_with('/') {
        return Err(HttpError::BadRequestLine);
    }
    let http11 = version_11(v)?;
    let c = common(&head.headers, max_body)?;
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (target.to_string(), None),
    };
    Ok(Some(Request {
        method,
        path,
        query,
        content_length: c.content_length,
        content_type: c.content_type,
        session: c.session,
        keep_alive: if http11 {
            !c.connection_close
        } else {
            c.connection_keep_alive
        },
        head_len: head.len,
    }))
}

/// Parses a response head at the start of `buf`; `Ok(None)`: need more.
pub fn parse_response(buf: &[u8], max_body: u64) -> Result<Option<Response>, HttpError> {
    let Some(head) = parse_head(buf)? else {
        return Ok(None);
    };
    let mut parts = head.first.splitn(3, ' ');
    let (Some(v), Some(code)) = (parts.next(), parts.next()) else {
        return Err(HttpError::BadStatusLine);
    };
    let http11 = version_11(v)?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::BadStatusLine);
    }
    let status: u16 = code.parse().map_err(|_| HttpError::BadStatusLine)?;
    let c = common(&head.headers, max_body)?;
    Ok(Some(Response {
        status,
        content_length: c.content_length,
        content_type: c.content_type,
        session: c.session,
        nonce: c.nonce,
        keep_alive: if http11 {
            !c.connection_close
        } else {
            c.connection_keep_alive
        },
        head_len: head.len,
    }))
}

/// Builds a request head. `target` is the path and query; `headers` are
/// extra header lines (name, value).
///
/// ```
/// use juxta_proto::wire::http::{parse_request, request_head, Method, CONTENT_TYPE_JXTA_MSG};
/// let h = request_head(Method::Post, "/", "127.0.0.1:9700", Some(CONTENT_TYPE_JXTA_MSG), 10, &[]);
/// let r = parse_request(&h, 10).unwrap().unwrap();
/// assert_eq!((r.method, r.content_length, r.head_len), (Method::Post, 10, h.len()));
/// ```
pub fn request_head(
    method: Method,
    target: &str,
    host: &str,
    content_type: Option<&str>,
    content_length: u64,
    headers: &[(&str, &str)],
) -> Bytes {
    let m = match method {
        Method::Get => "GET",
        Method::Post => "POST",
    };
    let mut b = BytesMut::with_capacity(160 + target.len());
    b.put_slice(format!("{m} {target} HTTP/1.1\r\nHost: {host}\r\n").as_bytes());
    put_headers(&mut b, content_type, content_length, headers);
    b.freeze()
}

fn put_headers(
    b: &mut BytesMut,
    content_type: Option<&str>,
    content_length: u64,
    headers: &[(&str, &str)],
) {
    if let Some(ct) = content_type {
        b.put_slice(format!("Content-Type: {ct}\r\n").as_bytes());
    }
    b.put_slice(format!("Content-Length: {content_length}\r\n").as_bytes());
    for (n, v) in headers {
        b.put_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    b.put_slice(b"\r\n");
}

/// The reason phrase written for a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Builds a response head.
pub fn response_head(
    status: u16,
    content_type: Option<&str>,
    content_length: u64,
    headers: &[(&str, &str)],
) -> Bytes {
    let mut b = BytesMut::with_capacity(160);
    b.put_slice(format!("HTTP/1.1 {status} {}\r\n", reason(status)).as_bytes());
    put_headers(&mut b, content_type, content_length, headers);
    b.freeze()
}

/// A message taken from an HTTP body.
#[derive(Debug, Clone)]
pub struct HttpMessage {
    /// The service address on the wire (possibly mangled).
    pub to: ServiceAddress,
    /// `EndpointSourceAddress`, if present.
    pub source: Option<String>,
    /// The message, without the two address elements.
    pub message: Message,
    /// The peer whose CBJX signature verified, if the message had a trailer.
    pub signer: Option<PeerId>,
    /// Whether `signer` is the `cbid` derived from the signing certificate
    /// (only then does the signature prove the peer ID).
    pub cert_matches_id: bool,
    /// Bytes the message (and its trailer) took in the body.
    pub wire_len: usize,
}

/// The length of the CBJX trailer at the start of `buf` (three
/// length-prefixed fields, each within its bound).
pub fn trailer_len(buf: &[u8]) -> Result<usize, CbjxError> {
    let mut pos = 0usize;
    for (field, max) in [
        (TrailerField::Cert, MAX_TRAILER_CERT_LEN),
        (TrailerField::Src, MAX_TRAILER_SRC_LEN),
        (TrailerField::Sig, MAX_TRAILER_SIG_LEN),
    ] {
        let rest = &buf[pos.min(buf.len())..];
        if rest.len() < 4 {
            return Err(CbjxError::Truncated { field });
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > max {
            return Err(CbjxError::TooLong {
                field,
                len: len as u64,
                max,
            });
        }
        if rest.len() - 4 < len {
            return Err(CbjxError::Truncated { field });
        }
        pos += 4 + len;
    }
    Ok(pos)
}

/// Decodes the binary message at the start of `body` (a POST body, or one
/// of the messages of a poll response) and checks its CBJX trailer.
///
/// A trailer is present unless the message is followed directly by the
/// next message (`jxmg`) or the end of the body; `require_cbjx` makes a
/// missing trailer an error. When `expect` is given the signer must be that
/// peer. The `EndpointSourceAddress`/`EndpointDestinationAddress` elements
/// are taken off the message, as on TCP.
pub fn decode_message(
    body: &Bytes,
    verifier: &mut CbjxVerifier,
    require_cbjx: bool,
    expect: Option<&PeerId>,
) -> Result<HttpMessage, HttpError> {
    let decoded = decode_v0(body.clone())?;
    let end = decoded.elements_end;
    let rest = &body[end..];
    let has_trailer = !rest.is_empty() && !rest.starts_with(b"jxmg");
    let (signer, cert_matches_id, wire_len) = if has_trailer {
        let tlen = trailer_len(rest)?;
        let trailer = cbjx::parse_trailer(body.slice(end..end + tlen))?;
        let v = verifier.verify(&[&body[..end]], &trailer)?;
        let signer = v.peer;
        if let Some(e) = expect {
            if &signer != e {
                return Err(HttpError::SpoofedSource {
                    signer: Box::new(signer),
                    expected: Box::new(*e),
                });
            }
        }
        (Some(signer), v.cert_matches_id, end + tlen)
    } else if require_cbjx {
        return Err(HttpError::MissingTrailer);
    } else {
        (None, false, end)
    };
    let mut message = decoded.message;
    let source = message
        .take(NS_JXTA, ELEM_SOURCE_ADDRESS)
        .and_then(|e| e.as_str().map(str::to_string));
    let dest = message
        .take(NS_JXTA, ELEM_DEST_ADDRESS)
        .and_then(|e| e.as_str().and_then(|s| s.parse::<EndpointAddress>().ok()))
        .ok_or(HttpError::NoDestination)?;
    let to = ServiceAddress {
        service: dest.service.ok_or(HttpError::NoDestination)?,
        param: dest.param,
    };
    Ok(HttpMessage {
        to,
        source,
        message,
        signer,
        cert_matches_id,
        wire_len,
    })
}

/// The session-opening message: the server's nonce, to be signed (CBJX)
/// and POSTed to [`HELLO_SERVICE`].
pub fn hello_message(nonce: &str) -> Message {
    Message::new().with(Element::text("", HELLO_ELEMENT, nonce))
}

/// The nonce of a hello message.
pub fn hello_nonce(m: &Message) -> Option<&str> {
    m.get("", HELLO_ELEMENT).and_then(Element::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_jxse_poll_and_ping() {
        let req = b"GET /cbid-59616261646162614A787461503250332D1B4A9C3A3B4E0E9F3F0E4F3B3C3D3E03?120000,120000,http://127.0.0.1:9700 HTTP/1.1\r\nUser-Agent: Java/1.7\r\nHost: 127.0.0.1:9700\r\nConnection: keep-alive\r\n\r\n";
        let r = parse_request(req, 100).unwrap().unwrap();
        assert_eq!(r.head_len, req.len());
        assert!(r.keep_alive);
        let p = r.poll().unwrap();
        assert_eq!(p.response_timeout_ms, 120_000);
        assert_eq!(p.extra_timeout_ms, 120_000);
        assert_eq!(p.dest.as_deref(), Some("http://127.0.0.1:9700"));
        assert!(r.requestor().unwrap().is_some());

        let ping = parse_request(b"GET / HTTP/1.0\r\n\r\n", 100)
            .unwrap()
            .unwrap();
        assert_eq!(ping.requestor().unwrap(), None);
        assert!(!ping.keep_alive);
        assert_eq!(ping.content_length, 0);
    }

    #[test]
    fn requestor_with_multibyte_path_is_an_error_not_a_panic() {
        // Found by the http fuzz target: 'þ' straddles byte 9 of the path.
        let r = parse_request("POST /cbid-503þBCDEF HTTP/1.1\r\n\r\n".as_bytes(), 10)
            .unwrap()
            .unwrap();
        assert!(matches!(r.requestor(), Err(HttpError::BadPeerId(_))));
        let req = |path: &str| {
            parse_request(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes(), 10)
                .unwrap()
                .unwrap()
                .requestor()
        };
        let id = req("/cbid-0003").unwrap().unwrap();
        assert_eq!(req("/urn:jxta:cbid-0003").unwrap(), Some(id));
        assert!(req("/urn:jxta:þ").is_err());
    }

    #[test]
    fn incomplete_heads_need_more() {
        let full = b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n";
        for n in 0..full.len() {
            assert_eq!(parse_request(&full[..n], 10), Ok(None), "prefix {n}");
        }
        assert!(parse_request(full, 10).unwrap().is_some());
    }

    #[test]
    fn refuses_bad_heads() {
        let cases: &[(&[u8], HttpError)] = &[
            (
                b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n",
                HttpError::TooLarge { len: 11, max: 10 },
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                HttpError::BadContentLength,
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                HttpError::BadContentLength,
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                HttpError::BadContentLength,
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                HttpError::TransferEncoding,
            ),
            (
                b"PUT / HTTP/1.1\r\n\r\n",
                HttpError::UnsupportedMethod("PUT".into()),
            ),
            (b"GET / HTTP/2.0\r\n\r\n", HttpError::UnsupportedVersion),
            (b"GET /\r\n\r\n", HttpError::BadRequestLine),
            (b"GET x HTTP/1.1\r\n\r\n", HttpError::BadRequestLine),
            (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", HttpError::BadHeader),
            (b"\xff\xfe / HTTP/1.1\r\n\r\n", HttpError::NotText),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_request(input, 10).as_ref(),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        let long = vec![b'a'; MAX_HEAD + 1];
        assert_eq!(parse_request(&long, 10), Err(HttpError::HeadTooLarge));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_request(&many, 10), Err(HttpError::TooManyHeaders));
    }

    #[test]
    fn response_round_trip() {
        let h = response_head(
            200,
            Some(CONTENT_TYPE_TEXT),
            4,
            &[(NONCE_HEADER, "00ff"), (SESSION_HEADER, "ab")],
        );
        let r = parse_response(&h, 4).unwrap().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.content_length, 4);
        assert_eq!(r.nonce.as_deref(), Some("00ff"));
        assert_eq!(r.session.as_deref(), Some("ab"));
        assert_eq!(r.head_len, h.len());
        assert_eq!(
            parse_response(&h, 3),
            Err(HttpError::TooLarge { len: 4, max: 3 })
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 2x0 OK\r\n\r\n", 3),
            Err(HttpError::BadStatusLine)
        );
    }

    #[test]
    fn poll_query_follows_jxse() {
        let q = PollQuery::parse("abc");
        assert_eq!((q.response_timeout_ms, q.extra_timeout_ms), (-1, -1));
        let q = PollQuery::parse("999999,-5");
        assert_eq!((q.response_timeout_ms, q.extra_timeout_ms), (120_000, -5));
        assert_eq!(q.dest, None);
        let q = PollQuery::parse("10,20,http://a:1/x,y");
        assert_eq!(q.dest.as_deref(), Some("http://a:1/x,y"));
    }

    #[test]
    fn bad_tokens_refused() {
        let h = b"GET /x HTTP/1.1\r\nx-jxta-session: a b\r\n\r\n";
        assert_eq!(
            parse_request(h, 0),
            Err(HttpError::BadToken(SESSION_HEADER))
        );
    }

    #[test]
    fn requestor_rejects_garbage() {
        let r = parse_request(b"GET /not-a-peer HTTP/1.1\r\n\r\n", 0)
            .unwrap()
            .unwrap();
        assert!(matches!(r.requestor(), Err(HttpError::BadPeerId(_))));
    }

    #[test]
    fn trailer_len_bounds() {
        assert!(matches!(
            trailer_len(&[0, 0, 0]),
            Err(CbjxError::Truncated { .. })
        ));
        assert_eq!(trailer_len(&[0; 12]), Ok(12));
        assert!(matches!(
            trailer_len(&[0xff; 12]),
            Err(CbjxError::TooLong { .. })
        ));
    }

    fn signed(id: &crate::identity::Identity, service: &str, text: &str) -> Vec<u8> {
        use crate::message::codec::encode_v0;
        use crate::message::namespace_order::JavaHashOrder;
        let m = Message::new()
            .with(Element::text("app", "t", text))
            .with(Element::text(NS_JXTA, ELEM_SOURCE_ADDRESS, "jxta://x"))
            .with(Element::text(
                NS_JXTA,
                ELEM_DEST_ADDRESS,
                &format!("http://127.0.0.1:1/{service}/p"),
            ));
        let enc = encode_v0(&m, JavaHashOrder::Java8).unwrap();
        let mut out = enc.to_bytes().to_vec();
        out.extend_from_slice(&cbjx::trailer_for(id, &enc.chunks));
        out
    }

    #[test]
    fn decodes_back_to_back_signed_messages() {
        use crate::identity::Identity;
        let mut rng = rand::thread_rng();
        let a = Identity::generate(&mut rng, 1024, "A", 1_700_000_000).unwrap();
        let b = Identity::generate(&mut rng, 1024, "B", 1_700_000_000).unwrap();
        let mut body = signed(&a, "S", "one");
        body.extend_from_slice(&signed(&a, "S", "two"));
        let body = Bytes::from(body);
        let mut v = CbjxVerifier::new();
        let first = decode_message(&body, &mut v, true, Some(a.peer_id())).unwrap();
        assert_eq!(first.signer.as_ref(), Some(a.peer_id()));
        assert!(first.cert_matches_id);
        assert_eq!(first.to, ServiceAddress::new("S", Some("p")));
        assert_eq!(first.message.get("app", "t").unwrap().as_str(), Some("one"));
        assert_eq!(first.source.as_deref(), Some("jxta://x"));
        let rest = body.slice(first.wire_len..);
        let second = decode_message(&rest, &mut v, true, Some(a.peer_id())).unwrap();
        assert_eq!(second.wire_len, rest.len());
        assert_eq!(
            second.message.get("app", "t").unwrap().as_str(),
            Some("two")
        );
        // Signed by someone else than expected.
        let other = Bytes::from(signed(&b, "S", "x"));
        assert!(matches!(
            decode_message(&other, &mut v, true, Some(a.peer_id())),
            Err(HttpError::SpoofedSource { .. })
        ));
        // A flipped payload byte no longer verifies.
        let mut bad = signed(&a, "S", "one");
        let i = bad.windows(3).position(|w| w == b"one").unwrap();
        bad[i] = b'O';
        assert!(matches!(
            decode_message(&Bytes::from(bad), &mut v, true, None),
            Err(HttpError::Cbjx(CbjxError::BadSignature))
        ));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse_request(&data, 1 << 20);
            let _ = parse_response(&data, 1 << 20);
            let _ = trailer_len(&data);
            let b = Bytes::from(data);
            let _ = decode_message(&b, &mut CbjxVerifier::new(), true, None);
            let _ = decode_message(&b, &mut CbjxVerifier::new(), false, None);
        }

        #[test]
        fn heads_with_garbage_headers_never_panic(
            name in "[ -~]{0,20}", value in "[ -~]{0,40}", target in "/[ -~]{0,40}",
        ) {
            let s = format!("GET {target} HTTP/1.1\r\n{name}: {value}\r\n\r\n");
            if let Ok(Some(r)) = parse_request(s.as_bytes(), 100) {
                let _ = r.requestor();
                let _ = r.poll();
            }
        }
    }
}
