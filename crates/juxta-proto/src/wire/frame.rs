//! The JXTA message frame on a TCP stream (`MessagePackageHeader`).
//!
//! ```text
//! repeat { u8 nameLen name u16 valueLen value }  u8 0   body[content-length]
//! ```
//! JXSE writes `content-length` (8-byte big-endian) and `content-type`
//! (`application/x-jxta-msg`). The length is checked against the configured
//! maximum before anything is allocated for the body (digest §3.3).

use bytes::{BufMut, Bytes, BytesMut};

/// The content type of a binary JXTA message.
pub const CONTENT_TYPE_JXTA_MSG: &str = "application/x-jxta-msg";
/// Longest header block we accept (JXSE's own buffer is 1 KiB).
pub const MAX_HEADER_BLOCK: usize = 4096;
/// Default largest message body accepted (64 MiB).
pub const DEFAULT_MAX_MESSAGE: u64 = 64 * 1024 * 1024;

/// Errors from a frame header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The header block is longer than [`MAX_HEADER_BLOCK`].
    #[error("frame header block longer than {MAX_HEADER_BLOCK} bytes")]
    HeaderTooLong,
    /// No `content-length` header.
    #[error("frame without content-length")]
    MissingLength,
    /// `content-length` is not an 8-byte integer.
    #[error("content-length of {0} bytes (expected 8)")]
    BadLengthField(usize),
    /// The body is larger than allowed.
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// announced length
        len: u64,
        /// configured maximum
        max: u64,
    },
    /// A header name is not UTF-8.
    #[error("header name is not valid UTF-8")]
    InvalidUtf8,
    /// The content type is not a JXTA message.
    #[error("unsupported content type {0:?}")]
    BadContentType(String),
}

/// A parsed frame header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameHeader {
    /// Bytes of the body that follow the header.
    pub content_length: u64,
    /// Bytes the header block used.
    pub header_len: usize,
}

/// Parses a frame header at the start of `buf`. `Ok(None)`: need more bytes.
///
/// ```
/// use juxta_proto::wire::frame::{encode_header, parse_header};
/// let h = encode_header(1042);
/// let parsed = parse_header(&h, 1 << 20).unwrap().unwrap();
/// assert_eq!((parsed.content_length, parsed.header_len), (1042, 63));
/// ```
pub fn parse_header(buf: &[u8], max_body: u64) -> Result<Option<FrameHeader>, FrameError> {
    let mut pos = 0;
    let mut length = None;
    loop {
        if pos >= MAX_HEADER_BLOCK {
            return Err(FrameError::HeaderTooLong);
        }
        let Some(&name_len) = buf.get(pos) else {
            return Ok(None);
        };
        if name_len == 0 {
            let content_length = length.ok_or(FrameError::MissingLength)?;
            return Ok(Some(FrameHeader {
                content_length,
                header_len: pos + 1,
            }));
        }
        let name_end = pos + 1 + name_len as usize;
        if buf.len() < name_end + 2 {
            return if name_end + 2 > MAX_HEADER_BLOCK {
                Err(FrameError::HeaderTooLong)
            } else {
                Ok(None)
            };
        }
        let name = &buf[pos + 1..name_end];
        let value_len = u16::from_be_bytes([buf[name_end], buf[name_end + 1]]) as usize;
        let value_end = name_end + 2 + value_len;
        if value_end > MAX_HEADER_BLOCK {
            return Err(FrameError::HeaderTooLong);
        }
        if buf.len() < value_end {
            return Ok(None);
        }
        let value = &buf[name_end + 2..value_end];
        match name {
            b"content-length" => {
                if value.len() != 8 {
                    return Err(FrameError::BadLengthField(value.len()));
                }
                let mut b = [0u8; 8];
                b.copy_from_slice(value);
                let len = u64::from_be_bytes(b);
                if len > max_body {
                    return Err(FrameError::TooLarge { len, max: max_body });
                }
                length = Some(len);
            }
            b"content-type" => {
                let ct = std::str::from_utf8(value).map_err(|_| FrameError::InvalidUtf8)?;
                let base = ct.split(';').next().unwrap_or("").trim();
                if !base.eq_ignore_ascii_case(CONTENT_TYPE_JXTA_MSG) {
                    return Err(FrameError::BadContentType(ct.chars().take(64).collect()));
                }
            }
            _ => {
                std::str::from_utf8(name).map_err(|_| FrameError::InvalidUtf8)?;
            }
        }
        pos = value_end;
    }
}

/// Encodes the header JXSE writes: content-length then content-type.
pub fn encode_header(content_length: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(63);
    b.put_u8(14);
    b.put_slice(b"content-length");
    b.put_u16(8);
    b.put_u64(content_length);
    b.put_u8(12);
    b.put_slice(b"content-type");
    b.put_u16(CONTENT_TYPE_JXTA_MSG.len() as u16);
    b.put_slice(CONTENT_TYPE_JXTA_MSG.as_bytes());
    b.put_u8(0);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_header_parses_and_re_encodes() {
        let p = format!(
            "{}/tests/data/jxse-2.7-stock/40_endpoint_direct_tcp_message_1B.bin",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("vector {p} missing: {e}"));
        let h = parse_header(&bytes, DEFAULT_MAX_MESSAGE).unwrap().unwrap();
        assert_eq!(h.header_len, 63);
        assert_eq!(h.content_length as usize, bytes.len() - 63);
        assert_eq!(&encode_header(h.content_length)[..], &bytes[..63]);
    }

    #[test]
    fn partial_headers_need_more() {
        let h = encode_header(5);
        for cut in 0..h.len() {
            assert_eq!(parse_header(&h[..cut], 100).unwrap(), None);
        }
    }

    #[test]
    fn huge_length_is_refused_before_allocation() {
        let h = encode_header(1 << 63);
        assert_eq!(
            parse_header(&h, DEFAULT_MAX_MESSAGE).unwrap_err(),
            FrameError::TooLarge {
                len: 1 << 63,
                max: DEFAULT_MAX_MESSAGE
            }
        );
    }

    #[test]
    fn bad_headers() {
        assert_eq!(
            parse_header(&[0], 10).unwrap_err(),
            FrameError::MissingLength
        );
        let mut b = vec![14];
        b.extend_from_slice(b"content-length");
        b.extend_from_slice(&[0, 2, 0, 1, 0]);
        assert_eq!(
            parse_header(&b, 10).unwrap_err(),
            FrameError::BadLengthField(2)
        );
        let mut b = vec![12];
        b.extend_from_slice(b"content-type");
        b.extend_from_slice(&[0, 9]);
        b.extend_from_slice(b"text/html");
        assert!(matches!(
            parse_header(&b, 10).unwrap_err(),
            FrameError::BadContentType(_)
        ));
        // An endless run of unknown headers is cut off.
        let mut b = Vec::new();
        while b.len() < 5000 {
            b.extend_from_slice(&[1, b'x', 0, 10]);
            b.extend_from_slice(&[b'v'; 10]);
        }
        assert_eq!(parse_header(&b, 10).unwrap_err(), FrameError::HeaderTooLong);
        let b = [1u8, 0xff, 0, 0, 0];
        assert_eq!(parse_header(&b, 10).unwrap_err(), FrameError::InvalidUtf8);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse_header(&data, DEFAULT_MAX_MESSAGE);
        }
    }
}
