//! JXTA messages: an ordered list of named, typed elements.
//!
//! A message is what every JXTA layer exchanges; the binary wire format
//! (`application/x-jxta-msg`, version 0, digest §2) lives in [`codec`], the
//! CBJX signature trailer JXSE 2.7 appends to every message in [`cbjx`].
//! Element payloads are [`Bytes`]: decoding slices the received buffer and
//! encoding hands the payload buffers to the socket as they are, so a payload
//! is never copied between the application and the wire.
//!
//! Namespaces, names and MIME types are [`ByteString`]s: a decoded element's
//! strings are slices of the received buffer (or of the namespace table /
//! the connection's interned names), so a hostile message whose thousands of
//! elements all reference one 32 KiB namespace costs a reference count per
//! element, not a copy.

pub mod cbjx;
pub mod codec;
pub mod namespace_order;

use bytes::Bytes;
pub use bytestring::ByteString;

pub use codec::{decode_v0, encode_v0, DecodedMessage, EncodedMessage, MessageError};

/// The MIME type JXSE gives a `StringMessageElement`.
pub const MIME_TEXT_UTF8: &str = "text/plain;charset=UTF-8";
/// The MIME type JXSE gives an XML document element.
pub const MIME_XML_UTF8: &str = "text/xml;charset=UTF-8";
/// The default type, never written on the wire.
pub const MIME_OCTET_STREAM: &str = "application/octet-stream";
/// The namespace of JXTA's own elements (namespace ID 1 on the wire).
pub const NS_JXTA: &str = "jxta";

/// One message element.
///
/// ```
/// use juxta_proto::message::Element;
/// let e = Element::text("jxta", "EndpointSourceAddress", "jxta://cbid-0003");
/// assert_eq!(e.mime(), "text/plain;charset=UTF-8");
/// assert_eq!(&e.data[..], b"jxta://cbid-0003");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    /// Namespace (`""`, `jxta`, or a custom one such as `JXTASOC`).
    pub namespace: ByteString,
    /// Element name.
    pub name: ByteString,
    /// MIME type; `None` means `application/octet-stream` (written as no type).
    pub mime: Option<ByteString>,
    /// The payload.
    pub data: Bytes,
    /// An optional signature element attached to this element.
    pub signature: Option<Box<Element>>,
}

impl Element {
    /// An untyped (`application/octet-stream`) element.
    pub fn bytes(namespace: &str, name: &str, data: impl Into<Bytes>) -> Element {
        Element {
            namespace: shared_str(namespace),
            name: ByteString::from(name),
            mime: None,
            data: data.into(),
            signature: None,
        }
    }

    /// An untyped element whose namespace and name are static strings
    /// (no copy of them is made).
    ///
    /// ```
    /// use juxta_proto::message::Element;
    /// let e = Element::bytes_static("juxta", "ERM", &b"hdr"[..]);
    /// assert_eq!(e, Element::bytes("juxta", "ERM", &b"hdr"[..]));
    /// ```
    pub fn bytes_static(
        namespace: &'static str,
        name: &'static str,
        data: impl Into<Bytes>,
    ) -> Element {
        Element {
            namespace: ByteString::from_static(namespace),
            name: ByteString::from_static(name),
            mime: None,
            data: data.into(),
            signature: None,
        }
    }

    /// A `text/plain;charset=UTF-8` element, as JXSE's `StringMessageElement`.
    pub fn text(namespace: &str, name: &str, text: &str) -> Element {
        Element {
            mime: Some(ByteString::from_static(MIME_TEXT_UTF8)),
            ..Element::bytes(namespace, name, Bytes::copy_from_slice(text.as_bytes()))
        }
    }

    /// A `text/xml;charset=UTF-8` element.
    pub fn xml(namespace: &str, name: &str, xml: String) -> Element {
        Element {
            mime: Some(ByteString::from_static(MIME_XML_UTF8)),
            ..Element::bytes(namespace, name, Bytes::from(xml))
        }
    }

    /// An element with an explicit MIME type (normalised: octet-stream is dropped).
    pub fn typed(namespace: &str, name: &str, mime: &str, data: impl Into<Bytes>) -> Element {
        Element {
            mime: (mime != MIME_OCTET_STREAM).then(|| ByteString::from(mime)),
            ..Element::bytes(namespace, name, data)
        }
    }

    /// [`Element::typed`] with a static namespace and MIME type (no copy
    /// of them is made), for elements built once per message.
    ///
    /// ```
    /// use juxta_proto::message::Element;
    /// let e = Element::typed_static("jxtarel", "7", "application/x-block", &b"x"[..]);
    /// assert_eq!(e, Element::typed("jxtarel", "7", "application/x-block", &b"x"[..]));
    /// ```
    pub fn typed_static(
        namespace: &'static str,
        name: &str,
        mime: &'static str,
        data: impl Into<Bytes>,
    ) -> Element {
        Element {
            namespace: ByteString::from_static(namespace),
            name: ByteString::from(name),
            mime: (mime != MIME_OCTET_STREAM).then(|| ByteString::from_static(mime)),
            data: data.into(),
            signature: None,
        }
    }

    /// The MIME type, with the default filled in.
    pub fn mime(&self) -> &str {
        self.mime.as_deref().unwrap_or(MIME_OCTET_STREAM)
    }

    /// The payload as UTF-8 text, if it is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.data).ok()
    }
}

/// The two predefined namespaces without an allocation, others copied.
fn shared_str(ns: &str) -> ByteString {
    match ns {
        NS_JXTA => ByteString::from_static(NS_JXTA),
        _ => ByteString::from(ns),
    }
}

/// A JXTA message: elements in order; duplicate names are allowed.
///
/// ```
/// use juxta_proto::message::{Element, Message};
/// let mut m = Message::new();
/// m.push(Element::bytes("bench", "data", &b"a"[..]));
/// assert_eq!(m.get("bench", "data").unwrap().data.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// The elements, in wire order.
    pub elements: Vec<Element>,
}

impl Message {
    /// An empty message.
    pub fn new() -> Message {
        Message::default()
    }

    /// Appends an element.
    pub fn push(&mut self, e: Element) -> &mut Message {
        self.elements.push(e);
        self
    }

    /// Builder form of [`Message::push`].
    pub fn with(mut self, e: Element) -> Message {
        self.elements.push(e);
        self
    }

    /// The first element with that namespace and name.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Element> {
        self.elements
            .iter()
            .find(|e| e.namespace == namespace && e.name == name)
    }

    /// Removes and returns the first element with that namespace and name.
    pub fn take(&mut self, namespace: &str, name: &str) -> Option<Element> {
        let i = self
            .elements
            .iter()
            .position(|e| e.namespace == namespace && e.name == name)?;
        Some(self.elements.remove(i))
    }

    /// Removes every element with that namespace and name.
    pub fn remove_all(&mut self, namespace: &str, name: &str) {
        self.elements
            .retain(|e| !(e.namespace == namespace && e.name == name));
    }

    /// Total payload bytes of all elements.
    pub fn payload_len(&self) -> usize {
        self.elements.iter().map(|e| e.data.len()).sum()
    }
}
