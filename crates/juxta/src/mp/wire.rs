//! The communicator's message header: 32 bytes, little-endian, in an
//! element of its own beside the payload element (so the payload is never
//! copied to prepend it).

use bytes::Bytes;
use juxta_proto::message::{ByteString, Element};

/// Element namespace of communicator messages.
pub(crate) const NS: &str = "juxta-mp";
/// Header element name.
pub(crate) const ELEM_HDR: &str = "h";
/// Payload element name.
pub(crate) const ELEM_DATA: &str = "d";
/// Header length in bytes.
pub(crate) const HDR_LEN: usize = 32;
const VERSION: u8 = 1;

/// An element of a communicator message: its namespace and name are
/// static (no copy of them per message).
pub(crate) fn element(name: &'static str, data: Bytes) -> Element {
    Element {
        namespace: ByteString::from_static(NS),
        name: ByteString::from_static(name),
        mime: None,
        data,
        signature: None,
    }
}

/// Point-to-point traffic.
pub(crate) const CTX_P2P: u8 = 0;
/// Collective traffic (matched on the collective's sequence number).
pub(crate) const CTX_COLL: u8 = 1;

/// What a message is, as its sender says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub ctx: u8,
    /// Collective kind (and reduce operation in the high nibble).
    pub op: u8,
    /// Datatype code of a collective's elements.
    pub dtype: u8,
    /// Sender's rank.
    pub src: u32,
    /// User tag (point-to-point) or round (collectives).
    pub tag: i32,
    /// Root of a rooted collective.
    pub root: u32,
    /// Elements per rank of a collective.
    pub count: u64,
    /// Collective sequence number.
    pub seq: u64,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Not 32 bytes.
    #[error("header of {0} bytes (want 32)")]
    Length(usize),
    /// Unknown version.
    #[error("header version {0} (want 1)")]
    Version(u8),
    /// Unknown context.
    #[error("unknown context {0}")]
    Context(u8),
}

impl Header {
    pub(crate) fn encode(&self) -> Bytes {
        let mut b = [0u8; HDR_LEN];
        b[0] = VERSION;
        b[1] = self.ctx;
        b[2] = self.op;
        b[3] = self.dtype;
        b[4..8].copy_from_slice(&self.src.to_le_bytes());
        b[8..12].copy_from_slice(&self.tag.to_le_bytes());
        b[12..16].copy_from_slice(&self.root.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        Bytes::copy_from_slice(&b)
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Header, HeaderError> {
        let b: &[u8; HDR_LEN] = b.try_into().map_err(|_| HeaderError::Length(b.len()))?;
        if b[0] != VERSION {
            return Err(HeaderError::Version(b[0]));
        }
        if b[1] != CTX_P2P && b[1] != CTX_COLL {
            return Err(HeaderError::Context(b[1]));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Ok(Header {
            ctx: b[1],
            op: b[2],
            dtype: b[3],
            src: u32_at(4),
            tag: u32_at(8) as i32,
            root: u32_at(12),
            count: u64_at(16),
            seq: u64_at(24),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_bad_input() {
        let h = Header {
            ctx: CTX_COLL,
            op: 0x34,
            dtype: 5,
            src: 7,
            tag: -3,
            root: 2,
            count: u64::MAX,
            seq: 99,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        assert_eq!(Header::decode(&[1; 31]), Err(HeaderError::Length(31)));
        let mut b = h.encode().to_vec();
        b[0] = 9;
        assert_eq!(Header::decode(&b), Err(HeaderError::Version(9)));
        b[0] = 1;
        b[1] = 7;
        assert_eq!(Header::decode(&b), Err(HeaderError::Context(7)));
    }
}
