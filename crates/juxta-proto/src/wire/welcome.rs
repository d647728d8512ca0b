//! The welcome line both sides of a JXTA TCP connection send first.
//!
//! `JXTAHELLO <destAddr> <publicAddr> <peerID> <noPropagate> <version>\r\n`
//! (digest §3.1). It names the peer on the other end, so a connection is
//! keyed by the peer ID it carries.

use std::fmt;

use crate::id::{JxtaId, PeerId};

/// Longest welcome line, CRLF included (JXSE's `WelcomeMessage`).
pub const MAX_WELCOME_LEN: usize = 4096;
/// The version JXSE 2.7 sends.
pub const WELCOME_VERSION: &str = "1.1";

/// Errors from parsing a welcome line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WelcomeError {
    /// No CRLF within the first 4096 bytes.
    #[error("welcome line longer than {MAX_WELCOME_LEN} bytes")]
    TooLong,
    /// The line does not start with `JXTAHELLO`.
    #[error("not a JXTA welcome (expected JXTAHELLO)")]
    BadGreeting,
    /// Wrong number of fields.
    #[error("welcome has {0} fields (expected 6 or 7)")]
    FieldCount(usize),
    /// The line is not UTF-8.
    #[error("welcome line is not valid UTF-8")]
    InvalidUtf8,
    /// The peer ID field is not a peer ID.
    #[error("bad peer ID in welcome: {0}")]
    BadPeerId(#[from] crate::id::IdError),
    /// The propagate flag is neither 0 nor 1.
    #[error("bad noPropagate flag {0:?}")]
    BadFlag(String),
}

/// A parsed welcome line.
///
/// ```
/// use juxta_proto::wire::welcome::Welcome;
/// let line = b"JXTAHELLO tcp://127.0.0.1:9701 tcp://127.0.0.1:9702 urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03 0 1.1\r\n";
/// let (w, used) = Welcome::parse(line).unwrap().unwrap();
/// assert_eq!(used, line.len());
/// assert_eq!(w.to_line().as_bytes(), &line[..]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The address the sender believes it is talking to.
    pub dest_addr: String,
    /// The sender's own reachable address.
    pub public_addr: String,
    /// The sender's peer ID.
    pub peer_id: PeerId,
    /// The sender does not want propagated messages.
    pub no_propagate: bool,
    /// Protocol version (`1.1` from JXSE 2.7, `3.0` from JXTA-C).
    pub version: String,
}

impl Welcome {
    /// A version-1.1 welcome.
    pub fn new(dest_addr: String, public_addr: String, peer_id: PeerId) -> Welcome {
        Welcome {
            dest_addr,
            public_addr,
            peer_id,
            no_propagate: false,
            version: WELCOME_VERSION.to_string(),
        }
    }

    /// The line, with CRLF.
    pub fn to_line(&self) -> String {
        format!(
            "JXTAHELLO {} {} {} {} {}\r\n",
            self.dest_addr,
            self.public_addr,
            self.peer_id,
            if self.no_propagate { 1 } else { 0 },
            self.version
        )
    }

    /// Parses a welcome from the start of `buf`. `Ok(None)` means more bytes
    /// are needed; on success returns the welcome and the bytes it used.
    pub fn parse(buf: &[u8]) -> Result<Option<(Welcome, usize)>, WelcomeError> {
        let window = &buf[..buf.len().min(MAX_WELCOME_LEN)];
        // Reject a wrong greeting as soon as its first bytes are in.
        let g = b"JXTAHELLO ";
        let n = window.len().min(g.len());
        if window[..n] != g[..n] {
            return Err(WelcomeError::BadGreeting);
        }
        let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
            return if buf.len() >= MAX_WELCOME_LEN {
                Err(WelcomeError::TooLong)
            } else {
                Ok(None)
            };
        };
        let line = std::str::from_utf8(&window[..end]).map_err(|_| WelcomeError::InvalidUtf8)?;
        // Counted before collecting, so a line of 4096 spaces allocates
        // nothing.
        let count = line.split(' ').count();
        if count != 6 && count != 7 {
            return Err(WelcomeError::FieldCount(count));
        }
        let fields: Vec<&str> = line.split(' ').collect();
        let id: JxtaId = fields[3].parse()?;
        let peer_id = PeerId::try_from(id)?;
        let no_propagate = match fields[4] {
            "0" => false,
            "1" => true,
            other => return Err(WelcomeError::BadFlag(other.chars().take(16).collect())),
        };
        Ok(Some((
            Welcome {
                dest_addr: fields[1].to_string(),
                public_addr: fields[2].to_string(),
                peer_id,
                no_propagate,
                version: fields[fields.len() - 1].to_string(),
            },
            end + 2,
        )))
    }
}

impl fmt::Display for Welcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.to_line().trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(name: &str) -> Vec<u8> {
        let p = format!(
            "{}/tests/data/jxse-2.7-stock/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&p).unwrap_or_else(|e| panic!("test vector {p} missing: {e}"))
    }

    #[test]
    fn captured_welcomes_round_trip() {
        for name in [
            "01_welcome_initiator_to_acceptor.bin",
            "02_welcome_acceptor_to_initiator.bin",
        ] {
            let bytes = vector(name);
            let (w, used) = Welcome::parse(&bytes).unwrap().unwrap();
            assert_eq!(used, bytes.len());
            assert_eq!(w.version, "1.1");
            assert_eq!(w.to_line().as_bytes(), &bytes[..], "{name}");
        }
    }

    #[test]
    fn partial_and_bad_input() {
        let line = b"JXTAHELLO tcp://a:1 tcp://b:2 urn:jxta:cbid-0003 0 1.1\r\n";
        for cut in 0..line.len() {
            assert_eq!(Welcome::parse(&line[..cut]).unwrap(), None, "cut {cut}");
        }
        assert!(Welcome::parse(line).unwrap().is_some());
        assert_eq!(
            Welcome::parse(b"GET / HTTP/1.1\r\n").unwrap_err(),
            WelcomeError::BadGreeting
        );
        assert_eq!(
            Welcome::parse(b"JXTAHELLO a b\r\n").unwrap_err(),
            WelcomeError::FieldCount(3)
        );
        assert!(matches!(
            Welcome::parse(b"JXTAHELLO a b urn:jxta:cbid-0004 0 1.1\r\n").unwrap_err(),
            WelcomeError::BadPeerId(_)
        ));
        let mut long = b"JXTAHELLO ".to_vec();
        long.resize(5000, b'x');
        assert_eq!(Welcome::parse(&long).unwrap_err(), WelcomeError::TooLong);
        assert_eq!(
            Welcome::parse(b"JXTAHELLO \xff b urn:jxta:cbid-0003 0 1.1\r\n").unwrap_err(),
            WelcomeError::InvalidUtf8
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = Welcome::parse(&data);
            let mut with = b"JXTAHELLO ".to_vec();
            with.extend_from_slice(&data);
            let _ = Welcome::parse(&with);
        }
    }
}
