//! Peer settings: where the peer keeps its identity, where it listens, and
//! the bounds it enforces.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use juxta_proto::wire::connection::ConnectionConfig;

/// Settings for [`crate::Peer::start`].
///
/// ```
/// let cfg = juxta::PeerConfig::new("/tmp/juxta-doc-peer").listen("127.0.0.1:0".parse().unwrap());
/// assert!(cfg.connection.cbjx);
/// ```
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Home directory: holds `identity.key` and `identity.crt`, created on
    /// first start.
    pub home: PathBuf,
    /// TCP address to listen on; `None` for a peer that only dials out.
    pub listen: Option<SocketAddr>,
    /// Name written into the certificate.
    pub name: String,
    /// Framing and security settings for every connection.
    pub connection: ConnectionConfig,
    /// RSA key size for a new identity.
    pub key_bits: usize,
    /// `SO_SNDBUF`/`SO_RCVBUF`; `None` leaves Linux's automatic tuning on
    /// (buffers grow with the bandwidth-delay product up to `tcp_wmem`/`tcp_rmem`).
    pub socket_buffer: Option<usize>,
    /// How long a new connection may take to send its welcome line.
    pub welcome_timeout: Duration,
    /// Messages queued per listener before the connection stops reading
    /// (back-pressure to the sender).
    pub listener_queue: usize,
    /// Most simultaneous connections; further ones are refused.
    pub max_connections: usize,
    /// How long `connect` waits for the TCP connection and the welcome.
    pub connect_timeout: Duration,
}

impl PeerConfig {
    /// Defaults for a peer with its home in `home`.
    pub fn new(home: impl Into<PathBuf>) -> PeerConfig {
        PeerConfig {
            home: home.into(),
            listen: None,
            name: "juxta".into(),
            connection: ConnectionConfig::default(),
            key_bits: 2048,
            socket_buffer: None,
            welcome_timeout: Duration::from_secs(5),
            listener_queue: 1024,
            max_connections: 1024,
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// Sets the listen address.
    pub fn listen(mut self, addr: SocketAddr) -> PeerConfig {
        self.listen = Some(addr);
        self
    }

    /// Enables or disables compact framing between Juxta peers.
    pub fn compact(mut self, on: bool) -> PeerConfig {
        self.connection.compact = on;
        self
    }

    /// Enables or disables CBJX signatures (must match the other side).
    pub fn cbjx(mut self, on: bool) -> PeerConfig {
        self.connection.cbjx = on;
        self
    }
}
