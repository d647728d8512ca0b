//! Connection set-up of JxtaSocket (`JXTASOC`) and JxtaBiDiPipe
//! (`JXTABIP`), digest §9.1, §9.4, §9.5.
//!
//! Both open the same way: the client sends a [`ConnectRequest`] naming its
//! ephemeral pipe (`reqPipe`) and itself (`remPeer`) to the server pipe; the
//! server answers on that ephemeral pipe with a [`ConnectResponse`] naming
//! its own ephemeral pipe (`remPipe`). Afterwards data flows ephemeral pipe
//! to ephemeral pipe, and either side ends with a [`CloseSignal`].
//!
//! Element order and types follow what JXSE 2.7 sends: advertisements are
//! `text/xml;charset=UTF-8`, booleans and close values
//! `text/plain;charset=UTF-8`, BiDi `connectionproperties` untyped bytes.
//! The optional `Cred` element is never written and ignored on receipt.
//! Socket encryption (`encrypt=true`, `symmetricKey`) is not supported: a
//! runtime should refuse a response with `encrypt == Some(true)`.

use bytes::Bytes;

use crate::advertisement::{AdvError, PeerAdvertisement, PipeAdvertisement};
use crate::message::{Element, Message};

/// The JxtaSocket namespace.
pub const NS_SOCKET: &str = "JXTASOC";
/// The JxtaBiDiPipe namespace.
pub const NS_BIDI: &str = "JXTABIP";
/// The requesting side's ephemeral pipe advertisement.
pub const ELEM_REQ_PIPE: &str = "reqPipe";
/// The answering side's ephemeral pipe advertisement.
pub const ELEM_REM_PIPE: &str = "remPipe";
/// The sender's peer advertisement.
pub const ELEM_REM_PEER: &str = "remPeer";
/// The sender's credential (optional; never validated by JXSE).
pub const ELEM_CRED: &str = "Cred";
/// JxtaSocket: reliable stream mode (`true`/`false`).
pub const ELEM_STREAM: &str = "stream";
/// JxtaSocket response: data encryption (`true`/`false`).
pub const ELEM_ENCRYPT: &str = "encrypt";
/// BiDi: reliable mode (`true`/`false`).
pub const ELEM_RELIABLE: &str = "reliable";
/// BiDi: direct messenger support; JXSE always sends `false`.
pub const ELEM_DIRECT: &str = "direct";
/// BiDi request: serialized Java properties (optional bytes).
pub const ELEM_CONNECTION_PROPERTIES: &str = "connectionproperties";
/// The close element (`close` / `closeACK`).
pub const ELEM_CLOSE: &str = "close";
/// Value of a close request.
pub const CLOSE_VALUE: &str = "close";
/// Value of a close acknowledgement (JxtaSocket only).
pub const CLOSE_ACK_VALUE: &str = "closeACK";

/// Which API the set-up belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetupKind {
    /// JxtaSocket / JxtaServerSocket (`JXTASOC`).
    Socket,
    /// JxtaBiDiPipe / JxtaServerPipe (`JXTABIP`).
    BiDi,
}

impl SetupKind {
    /// The element namespace.
    pub fn namespace(self) -> &'static str {
        match self {
            SetupKind::Socket => NS_SOCKET,
            SetupKind::BiDi => NS_BIDI,
        }
    }

    fn both() -> [SetupKind; 2] {
        [SetupKind::Socket, SetupKind::BiDi]
    }
}

/// Errors from a set-up message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// The message is not the kind of set-up message asked for.
    #[error("not a JxtaSocket/JxtaBiDiPipe {0}")]
    NotSetup(&'static str),
    /// A required element is missing.
    #[error("set-up message without {0}")]
    Missing(&'static str),
    /// An XML element is not UTF-8.
    #[error("{0} element is not valid UTF-8")]
    NotUtf8(&'static str),
    /// An advertisement does not parse.
    #[error("bad {element} advertisement: {source}")]
    Adv {
        /// The element holding it.
        element: &'static str,
        /// Why it did not parse.
        source: AdvError,
    },
}

fn bool_str(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// Java's `Boolean.valueOf`: only `true` (any case) is true.
fn java_bool(e: &Element) -> bool {
    e.as_str()
        .is_some_and(|s| s.trim().eq_ignore_ascii_case("true"))
}

fn opt_bool(msg: &Message, ns: &str, name: &str) -> Option<bool> {
    msg.get(ns, name).map(java_bool)
}

fn xml_text<'m>(msg: &'m Message, ns: &str, name: &'static str) -> Result<&'m str, SetupError> {
    msg.get(ns, name)
        .ok_or(SetupError::Missing(name))?
        .as_str()
        .ok_or(SetupError::NotUtf8(name))
}

fn pipe_adv(msg: &Message, ns: &str, name: &'static str) -> Result<PipeAdvertisement, SetupError> {
    PipeAdvertisement::parse(xml_text(msg, ns, name)?).map_err(|source| SetupError::Adv {
        element: name,
        source,
    })
}

fn peer_adv(msg: &Message, ns: &str) -> Result<PeerAdvertisement, SetupError> {
    PeerAdvertisement::parse(xml_text(msg, ns, ELEM_REM_PEER)?).map_err(|source| SetupError::Adv {
        element: ELEM_REM_PEER,
        source,
    })
}

/// The kind whose namespace holds element `name`, socket first.
fn kind_with(msg: &Message, name: &str) -> Option<SetupKind> {
    SetupKind::both()
        .into_iter()
        .find(|k| msg.get(k.namespace(), name).is_some())
}

/// A connect request, sent by the client to the server pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Socket or BiDi.
    pub kind: SetupKind,
    /// The client's ephemeral pipe (`reqPipe`): the server replies there.
    pub req_pipe: PipeAdvertisement,
    /// The client's peer advertisement (`remPeer`).
    pub rem_peer: PeerAdvertisement,
    /// Reliable mode: `stream` for sockets (default `true` in JXSE),
    /// `reliable` for BiDi (default `false`). Absent on receipt reads as
    /// `false`, as JXSE's servers do.
    pub reliable: bool,
    /// BiDi only: the `connectionproperties` bytes (ignored for sockets).
    pub connection_properties: Option<Bytes>,
}

impl ConnectRequest {
    /// A JxtaSocket request.
    pub fn socket(
        req_pipe: PipeAdvertisement,
        rem_peer: PeerAdvertisement,
        reliable: bool,
    ) -> ConnectRequest {
        ConnectRequest {
            kind: SetupKind::Socket,
            req_pipe,
            rem_peer,
            reliable,
            connection_properties: None,
        }
    }

    /// A JxtaBiDiPipe request.
    pub fn bidi(
        req_pipe: PipeAdvertisement,
        rem_peer: PeerAdvertisement,
        reliable: bool,
    ) -> ConnectRequest {
        ConnectRequest {
            kind: SetupKind::BiDi,
            ..ConnectRequest::socket(req_pipe, rem_peer, reliable)
        }
    }

    /// The message, elements in JXSE's order: socket `reqPipe`, `remPeer`,
    /// `stream`; BiDi `reqPipe`, `reliable`, `direct=false`,
    /// `connectionproperties`?, `remPeer`.
    pub fn to_message(&self) -> Message {
        let ns = self.kind.namespace();
        let req = Element::xml(ns, ELEM_REQ_PIPE, self.req_pipe.to_xml());
        let peer = Element::xml(ns, ELEM_REM_PEER, self.rem_peer.to_xml());
        let mut m = Message::new();
        match self.kind {
            SetupKind::Socket => {
                m.push(req).push(peer).push(Element::text(
                    ns,
                    ELEM_STREAM,
                    bool_str(self.reliable),
                ));
            }
            SetupKind::BiDi => {
                m.push(req)
                    .push(Element::text(ns, ELEM_RELIABLE, bool_str(self.reliable)))
                    .push(Element::text(ns, ELEM_DIRECT, "false"));
                if let Some(p) = &self.connection_properties {
                    m.push(Element::bytes(ns, ELEM_CONNECTION_PROPERTIES, p.clone()));
                }
                m.push(peer);
            }
        }
        m
    }

    /// Reads a request (socket if it has `JXTASOC:reqPipe`, else BiDi if it
    /// has `JXTABIP:reqPipe`). `reqPipe` and `remPeer` must parse, as JXSE's
    /// servers require; `Cred` and unknown elements are ignored.
    pub fn from_message(msg: &Message) -> Result<ConnectRequest, SetupError> {
        let kind = kind_with(msg, ELEM_REQ_PIPE).ok_or(SetupError::NotSetup("connect request"))?;
        let ns = kind.namespace();
        let req_pipe = pipe_adv(msg, ns, ELEM_REQ_PIPE)?;
        let rem_peer = peer_adv(msg, ns)?;
        let (reliable, connection_properties) = match kind {
            SetupKind::Socket => (opt_bool(msg, ns, ELEM_STREAM).unwrap_or(false), None),
            SetupKind::BiDi => (
                opt_bool(msg, ns, ELEM_RELIABLE).unwrap_or(false),
                msg.get(ns, ELEM_CONNECTION_PROPERTIES)
                    .map(|e| e.data.clone()),
            ),
        };
        Ok(ConnectRequest {
            kind,
            req_pipe,
            rem_peer,
            reliable,
            connection_properties,
        })
    }
}

/// A connect response, sent by the server to the client's ephemeral pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectResponse {
    /// Socket or BiDi.
    pub kind: SetupKind,
    /// The server's ephemeral pipe (`remPipe`): the client sends data there.
    pub rem_pipe: PipeAdvertisement,
    /// The server's peer advertisement (`remPeer`).
    pub rem_peer: PeerAdvertisement,
    /// Reliable mode (`stream` for sockets, `reliable` for BiDi); `None`
    /// when absent (a JXSE BiDi server never sends it: the client keeps its
    /// own setting).
    pub reliable: Option<bool>,
    /// Socket only: `encrypt`, sent by JXSE 2.7 server sockets (`false`
    /// unless the server socket encrypts, which Juxta does not support).
    pub encrypt: Option<bool>,
}

impl ConnectResponse {
    /// A JxtaServerSocket response as JXSE sends it: `stream` and
    /// `encrypt=false`.
    pub fn socket(
        rem_pipe: PipeAdvertisement,
        rem_peer: PeerAdvertisement,
        reliable: bool,
    ) -> ConnectResponse {
        ConnectResponse {
            kind: SetupKind::Socket,
            rem_pipe,
            rem_peer,
            reliable: Some(reliable),
            encrypt: Some(false),
        }
    }

    /// A JxtaServerPipe response as JXSE sends it (no `reliable`).
    pub fn bidi(rem_pipe: PipeAdvertisement, rem_peer: PeerAdvertisement) -> ConnectResponse {
        ConnectResponse {
            kind: SetupKind::BiDi,
            rem_pipe,
            rem_peer,
            reliable: None,
            encrypt: None,
        }
    }

    /// The message, elements in JXSE's order: socket `remPipe`, `remPeer`,
    /// `stream`?, `encrypt`?; BiDi `direct=false`, `reliable`?, `remPipe`,
    /// `remPeer` (`encrypt` is not written for BiDi).
    pub fn to_message(&self) -> Message {
        let ns = self.kind.namespace();
        let pipe = Element::xml(ns, ELEM_REM_PIPE, self.rem_pipe.to_xml());
        let peer = Element::xml(ns, ELEM_REM_PEER, self.rem_peer.to_xml());
        let mut m = Message::new();
        match self.kind {
            SetupKind::Socket => {
                m.push(pipe).push(peer);
                if let Some(r) = self.reliable {
                    m.push(Element::text(ns, ELEM_STREAM, bool_str(r)));
                }
                if let Some(e) = self.encrypt {
                    m.push(Element::text(ns, ELEM_ENCRYPT, bool_str(e)));
                }
            }
            SetupKind::BiDi => {
                m.push(Element::text(ns, ELEM_DIRECT, "false"));
                if let Some(r) = self.reliable {
                    m.push(Element::text(ns, ELEM_RELIABLE, bool_str(r)));
                }
                m.push(pipe).push(peer);
            }
        }
        m
    }

    /// Reads a response (socket if it has `JXTASOC:remPipe`, else BiDi).
    /// `remPipe` and `remPeer` must parse; `Cred`, `direct`,
    /// `symmetricKey` and unknown elements are ignored.
    pub fn from_message(msg: &Message) -> Result<ConnectResponse, SetupError> {
        let kind = kind_with(msg, ELEM_REM_PIPE).ok_or(SetupError::NotSetup("connect response"))?;
        let ns = kind.namespace();
        let rem_pipe = pipe_adv(msg, ns, ELEM_REM_PIPE)?;
        let rem_peer = peer_adv(msg, ns)?;
        let (reliable, encrypt) = match kind {
            SetupKind::Socket => (
                opt_bool(msg, ns, ELEM_STREAM),
                opt_bool(msg, ns, ELEM_ENCRYPT),
            ),
            SetupKind::BiDi => (opt_bool(msg, ns, ELEM_RELIABLE), None),
        };
        Ok(ConnectResponse {
            kind,
            rem_pipe,
            rem_peer,
            reliable,
            encrypt,
        })
    }
}

/// The close handshake signal (digest §9.4). Close messages travel as plain
/// pipe messages, outside the reliable stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseSignal {
    /// `close`: the sender is closing.
    Close,
    /// `closeACK`: the close was received (JxtaSocket; JXSE's BiDi never
    /// sends it, and its sockets don't in unreliable mode).
    CloseAck,
}

impl CloseSignal {
    /// The element value (`close` / `closeACK`).
    pub fn as_str(self) -> &'static str {
        match self {
            CloseSignal::Close => CLOSE_VALUE,
            CloseSignal::CloseAck => CLOSE_ACK_VALUE,
        }
    }

    /// The `close` element (`text/plain;charset=UTF-8`).
    pub fn to_element(self, kind: SetupKind) -> Element {
        Element::text(kind.namespace(), ELEM_CLOSE, self.as_str())
    }

    /// A message holding only the close element.
    pub fn to_message(self, kind: SetupKind) -> Message {
        Message::new().with(self.to_element(kind))
    }

    /// The close signal of a message, if it has one. A socket `close`
    /// element must read `close` or `closeACK` (JXSE ignores other values);
    /// for BiDi any value other than `closeACK` is a close, as JXSE only
    /// checks that the element is present.
    pub fn from_message(msg: &Message) -> Option<(SetupKind, CloseSignal)> {
        let kind = kind_with(msg, ELEM_CLOSE)?;
        let value = msg
            .get(kind.namespace(), ELEM_CLOSE)?
            .as_str()
            .map(str::trim);
        let signal = match (kind, value) {
            (_, Some(CLOSE_ACK_VALUE)) => CloseSignal::CloseAck,
            (_, Some(CLOSE_VALUE)) | (SetupKind::BiDi, _) => CloseSignal::Close,
            (SetupKind::Socket, _) => return None,
        };
        Some((kind, signal))
    }
}

/// What a set-up message arriving on a pipe is, as told by [`classify`].
/// [`setup_kind`] tells which API (namespace) it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupMessage {
    /// A connect request (has `reqPipe`): parse with
    /// [`ConnectRequest::from_message`].
    Request,
    /// A connect response (has `remPipe`): parse with
    /// [`ConnectResponse::from_message`].
    Response,
    /// A close request or acknowledgement.
    Close(CloseSignal),
}

/// Tells connect requests, connect responses and close signals (of either
/// namespace) apart without parsing the advertisements; `None` for
/// anything else (data, reliability acks, ...). Close is checked first, as
/// JxtaSocket does.
///
/// ```
/// use juxta_proto::socket::setup::{classify, setup_kind, CloseSignal, SetupKind, SetupMessage};
/// let m = CloseSignal::CloseAck.to_message(SetupKind::Socket);
/// assert_eq!(classify(&m), Some(SetupMessage::Close(CloseSignal::CloseAck)));
/// assert_eq!(setup_kind(&m), Some(SetupKind::Socket));
/// ```
pub fn classify(msg: &Message) -> Option<SetupMessage> {
    if let Some((_, signal)) = CloseSignal::from_message(msg) {
        return Some(SetupMessage::Close(signal));
    }
    if kind_with(msg, ELEM_REQ_PIPE).is_some() {
        return Some(SetupMessage::Request);
    }
    kind_with(msg, ELEM_REM_PIPE).map(|_| SetupMessage::Response)
}

/// The API a set-up message belongs to: [`SetupKind::Socket`] if it has a
/// `JXTASOC` `close`, `reqPipe` or `remPipe` element, else
/// [`SetupKind::BiDi`] for the same in `JXTABIP`, else `None`.
pub fn setup_kind(msg: &Message) -> Option<SetupKind> {
    SetupKind::both().into_iter().find(|k| {
        [ELEM_CLOSE, ELEM_REQ_PIPE, ELEM_REM_PIPE]
            .iter()
            .any(|n| msg.get(k.namespace(), n).is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::PipeType;
    use crate::id::PeerGroupId;
    use crate::message::{MIME_TEXT_UTF8, MIME_XML_UTF8};

    const PIPE: &str =
        "urn:jxta:cbid-59616261646162614E504720503250331BCCB518AD964EAEB85FC21D6192727604";
    const PEER: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    fn pipe() -> PipeAdvertisement {
        PipeAdvertisement::new(PIPE.parse().unwrap(), PipeType::Unicast).with_name("srv.remote")
    }
    fn peer() -> PeerAdvertisement {
        PeerAdvertisement::new(PEER.parse().unwrap(), PeerGroupId::NET, "me")
    }
    fn layout(m: &Message) -> Vec<(String, String, String)> {
        m.elements
            .iter()
            .map(|e| {
                (
                    e.namespace.to_string(),
                    e.name.to_string(),
                    e.mime().to_string(),
                )
            })
            .collect()
    }
    fn l(ns: &str, name: &str, mime: &str) -> (String, String, String) {
        (ns.into(), name.into(), mime.into())
    }

    #[test]
    fn socket_request() {
        let r = ConnectRequest::socket(pipe(), peer(), true);
        let m = r.to_message();
        assert_eq!(
            layout(&m),
            vec![
                l("JXTASOC", "reqPipe", MIME_XML_UTF8),
                l("JXTASOC", "remPeer", MIME_XML_UTF8),
                l("JXTASOC", "stream", MIME_TEXT_UTF8),
            ]
        );
        assert_eq!(m.get("JXTASOC", "stream").unwrap().as_str(), Some("true"));
        assert_eq!(ConnectRequest::from_message(&m).unwrap(), r);
        assert_eq!(classify(&m), Some(SetupMessage::Request));
        assert_eq!(setup_kind(&m), Some(SetupKind::Socket));
        // No stream element: unreliable, as JxtaServerSocket reads it.
        let mut m2 = m.clone();
        m2.remove_all("JXTASOC", "stream");
        assert!(!ConnectRequest::from_message(&m2).unwrap().reliable);
    }

    #[test]
    fn bidi_request() {
        let mut r = ConnectRequest::bidi(pipe(), peer(), false);
        r.connection_properties = Some(Bytes::from_static(b"\xac\xed\x00\x05"));
        let m = r.to_message();
        assert_eq!(
            layout(&m),
            vec![
                l("JXTABIP", "reqPipe", MIME_XML_UTF8),
                l("JXTABIP", "reliable", MIME_TEXT_UTF8),
                l("JXTABIP", "direct", MIME_TEXT_UTF8),
                l(
                    "JXTABIP",
                    "connectionproperties",
                    "application/octet-stream"
                ),
                l("JXTABIP", "remPeer", MIME_XML_UTF8),
            ]
        );
        assert_eq!(m.get("JXTABIP", "direct").unwrap().as_str(), Some("false"));
        assert_eq!(ConnectRequest::from_message(&m).unwrap(), r);
        assert_eq!(classify(&m), Some(SetupMessage::Request));
        assert_eq!(setup_kind(&m), Some(SetupKind::BiDi));
    }

    #[test]
    fn responses() {
        let s = ConnectResponse::socket(pipe(), peer(), true);
        let m = s.to_message();
        assert_eq!(
            layout(&m),
            vec![
                l("JXTASOC", "remPipe", MIME_XML_UTF8),
                l("JXTASOC", "remPeer", MIME_XML_UTF8),
                l("JXTASOC", "stream", MIME_TEXT_UTF8),
                l("JXTASOC", "encrypt", MIME_TEXT_UTF8),
            ]
        );
        assert_eq!(m.get("JXTASOC", "encrypt").unwrap().as_str(), Some("false"));
        assert_eq!(ConnectResponse::from_message(&m).unwrap(), s);
        assert_eq!(classify(&m), Some(SetupMessage::Response));
        assert_eq!(setup_kind(&m), Some(SetupKind::Socket));

        let b = ConnectResponse::bidi(pipe(), peer());
        let m = b.to_message();
        assert_eq!(
            layout(&m),
            vec![
                l("JXTABIP", "direct", MIME_TEXT_UTF8),
                l("JXTABIP", "remPipe", MIME_XML_UTF8),
                l("JXTABIP", "remPeer", MIME_XML_UTF8),
            ]
        );
        assert_eq!(ConnectResponse::from_message(&m).unwrap(), b);
        let b2 = ConnectResponse {
            reliable: Some(true),
            ..b
        };
        assert_eq!(ConnectResponse::from_message(&b2.to_message()).unwrap(), b2);
        assert_eq!(classify(&m), Some(SetupMessage::Response));
        assert_eq!(setup_kind(&m), Some(SetupKind::BiDi));
    }

    #[test]
    fn errors() {
        assert_eq!(
            ConnectRequest::from_message(&Message::new()),
            Err(SetupError::NotSetup("connect request"))
        );
        assert_eq!(
            ConnectResponse::from_message(
                &ConnectRequest::socket(pipe(), peer(), true).to_message()
            ),
            Err(SetupError::NotSetup("connect response"))
        );
        let mut m = ConnectRequest::socket(pipe(), peer(), true).to_message();
        m.remove_all("JXTASOC", "remPeer");
        assert_eq!(
            ConnectRequest::from_message(&m),
            Err(SetupError::Missing("remPeer"))
        );
        let m = Message::new().with(Element::xml("JXTASOC", "reqPipe", "<nope/>".into()));
        assert!(matches!(
            ConnectRequest::from_message(&m),
            Err(SetupError::Adv {
                element: "reqPipe",
                ..
            })
        ));
        let m = Message::new().with(Element::bytes("JXTABIP", "reqPipe", &b"\xff"[..]));
        assert_eq!(
            ConnectRequest::from_message(&m),
            Err(SetupError::NotUtf8("reqPipe"))
        );
    }

    #[test]
    fn close_signals() {
        for kind in SetupKind::both() {
            for s in [CloseSignal::Close, CloseSignal::CloseAck] {
                let m = s.to_message(kind);
                assert_eq!(m.elements[0].mime(), MIME_TEXT_UTF8);
                assert_eq!(m.elements[0].namespace, kind.namespace());
                assert_eq!(CloseSignal::from_message(&m), Some((kind, s)));
                assert_eq!(classify(&m), Some(SetupMessage::Close(s)));
                assert_eq!(setup_kind(&m), Some(kind));
            }
        }
        let odd = |ns: &str| Message::new().with(Element::text(ns, "close", "bye"));
        assert_eq!(CloseSignal::from_message(&odd("JXTASOC")), None);
        assert_eq!(
            CloseSignal::from_message(&odd("JXTABIP")),
            Some((SetupKind::BiDi, CloseSignal::Close))
        );
        let data = Message::new().with(Element::bytes("jxtarel", "1", &b"x"[..]));
        assert_eq!(classify(&data), None);
        assert_eq!(setup_kind(&data), None);
    }
}
