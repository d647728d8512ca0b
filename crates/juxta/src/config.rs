//! Peer settings: where the peer keeps its identity, where it listens, and
//! the bounds it enforces.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use juxta_proto::wire::connection::ConnectionConfig;

/// Settings for [`crate::Peer::start`], built from [`PeerConfig::new`]
/// with one method per setting (each documented with its default); no
/// `juxta_proto` type is needed for the common ones. The fields stay
/// readable (and assignable); the struct is `#[non_exhaustive]`, so new
/// settings are not breaking changes.
///
/// ```
/// use std::time::Duration;
/// let cfg = juxta::PeerConfig::new("/tmp/juxta-doc-peer")
///     .listen("127.0.0.1:0".parse().unwrap())
///     .name("printer-room")
///     .max_connections(256)
///     .connect_timeout(Duration::from_secs(3))
///     .idle_timeout(Some(Duration::from_secs(300)));
/// assert!(cfg.connection.cbjx);
/// assert_eq!(cfg.max_connections, 256);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// How long a new connection may take to become usable: the welcome
    /// lines (ours sent, the remote's received) must be exchanged within
    /// this time of the TCP connection, and a compact handshake the remote
    /// started (a Juxta initiator offers one right after its welcome) must
    /// complete within this time of its first step. Default 5 s.
    pub welcome_timeout: Duration,
    /// How long one frame may take to arrive once its first byte has: a
    /// connection that keeps an incomplete frame buffered for longer
    /// (a "slowloris" sending a byte now and then) is closed and counted in
    /// [`crate::Stats::frame_timeouts`]. Time this peer spends not reading
    /// (back-pressure from a full listener queue) does not count. It bounds
    /// the slowest honest sender too: a message of `max_message` bytes must
    /// arrive within it. Default 60 s.
    pub frame_timeout: Duration,
    /// How long a connection this peer accepted may stay silent after the
    /// welcome lines before its first frame (a message or a compact
    /// handshake step); closed and counted in
    /// [`crate::Stats::first_message_timeouts`] after that. JXSE and Juxta
    /// peers send right after connecting (JXSE opens a connection to send;
    /// a Juxta initiator offers the compact handshake), so only a peer that
    /// connects and never speaks trips it. Default 60 s.
    pub first_message_timeout: Duration,
    /// Closes a connection after this long without receiving a byte
    /// ([`crate::Stats::idle_timeouts`]); `None` (the default): no idle
    /// limit. JXSE 2.7 sends no keepalives and keeps idle connections open
    /// for as long as the process lives, so an idle limit would cut honest
    /// JXSE peers; the slow or silent ones are caught by
    /// [`PeerConfig::frame_timeout`] and
    /// [`PeerConfig::first_message_timeout`] instead.
    pub idle_timeout: Option<Duration>,
    /// How long a write may make no progress (the remote stops reading and
    /// the socket buffer stays full) before its connection is closed and
    /// counted in [`crate::Stats::write_timeouts`]. Bounds how long any
    /// sender can wait on one connection. Default 10 s.
    pub write_timeout: Duration,
    /// Most connections (established or not) accepted from one remote IP
    /// address at a time; further ones are refused at accept and counted in
    /// [`crate::Stats::addr_refused`]. Connections this peer dials are not
    /// counted. Default 32.
    pub max_connections_per_addr: usize,
    /// Most accepted connections from one remote IP address that have not
    /// yet exchanged welcome lines; further ones are refused at accept and
    /// counted in [`crate::Stats::addr_pending_refused`]. Default 8.
    pub max_pending_per_addr: usize,
    /// Messages of the peer's own services (resolver answers, discovery,
    /// rendezvous, relay and route control traffic) queued per connection
    /// while that connection's socket is busy; services never wait for a
    /// connection, and a message beyond this bound is refused and counted
    /// in [`crate::Stats::service_refused`]. Default 128.
    pub service_queue: usize,
    /// Messages queued per listener before the connection stops reading
    /// (back-pressure to the sender).
    pub listener_queue: usize,
    /// Most simultaneous connections; further ones are refused.
    pub max_connections: usize,
    /// How long `connect` waits for the TCP connection and the welcome.
    pub connect_timeout: Duration,
    /// IP multicast on the LAN (JXSE's `McastTransport`); `None` (the
    /// default): no multicast socket, nothing sent or received by multicast.
    pub multicast: Option<MulticastConfig>,
    /// Zero-configuration discovery on the LAN ([`crate::lan`]); `None`
    /// (the default): off. On, the peer announces itself by multicast
    /// (JXSE's peer view probe), verifies and keeps the peers it hears,
    /// and leases the rendezvous among them. Setting it with
    /// [`PeerConfig::lan`] also gives the peer what it needs and was not
    /// configured: multicast with JXSE's group
    /// ([`MulticastConfig::default`]), a listen address (port 0 on the
    /// multicast interface's address), and the rendezvous service as an
    /// edge with no seeds.
    pub lan: Option<crate::lan::LanConfig>,
    /// The advertisement cache file; `None` (the default): `home/cm.sqlite`.
    pub cache: Option<PathBuf>,
    /// Flow control and bounds of the discovery service.
    pub discovery: crate::discovery::DiscoveryConfig,
    /// The rendezvous service (edge or rendezvous role); `None` (the
    /// default): the peer takes no part in RVP/SRDI.
    pub rendezvous: Option<crate::rendezvous::RendezvousConfig>,
    /// Whether the rendezvous service reaches its seeds (and a
    /// rendezvous its peer rendezvous) over JXTA's HTTP transport, at
    /// their [`PeerConfig::http_listen`] addresses, instead of TCP
    /// (default `false`): an edge that can only speak HTTP (the thesis'
    /// "HTTP rendezvous"). See [`PeerConfig::rendezvous_over_http`].
    pub rendezvous_http: bool,
    /// Address to listen for HTTP clients on (JXTA's HTTP transport);
    /// `None` (the default): no HTTP listener.
    pub http_listen: Option<SocketAddr>,
    /// Bounds and timeouts of the HTTP transport (server and client).
    pub http: crate::transport::http::HttpConfig,
    /// The relay service (edge leasing a relay, or relay); `None` (the
    /// default): the peer neither leases nor forwards (it still routes its
    /// own messages through relays it learns of).
    pub relay: Option<crate::relay::RelayConfig>,
    /// Whether route answers that the destination did not sign are
    /// believed (default `false`). A route is otherwise learned only from
    /// the connection itself, from the relay this peer leases (which
    /// carries all of its traffic anyway), or from an answer carrying the
    /// destination's signed route that names the last hop as one of its
    /// relays (see `juxta_proto::endpoint::signed_route`). JXSE peers never
    /// sign routes: turn this on to route to a JXSE peer through a JXSE
    /// relay or rendezvous, accepting that any peer answering a route
    /// query can then put itself on the path (docs/security.md).
    pub accept_unsigned_routes: bool,
    /// Whether a peer that cannot be dialled leases a relay by itself
    /// (default `true`). A peer with no listen address (neither
    /// [`PeerConfig::listen`] nor [`PeerConfig::http_listen`]), no
    /// [`PeerConfig::relay`] configured and rendezvous seeds
    /// ([`crate::rendezvous::RendezvousConfig::edge`]) leases one of those
    /// seeds as its relay, as if configured with
    /// [`crate::relay::RelayConfig::client`] on them: answers, pipe
    /// messages and socket traffic for it then reach it through that
    /// relay, although nobody can connect to it. A seed that answers it is
    /// no relay is not asked again; once every seed has said so, the lease
    /// task ends. Turn it off with [`PeerConfig::auto_relay`]`(false)`, or
    /// configure the relay service explicitly (which always wins).
    /// [`PeerConfig::effective_relay`] tells what a configuration ends up
    /// with.
    pub auto_relay: bool,
    /// How long a search for a route to a peer this one has neither a
    /// connection nor a known route to waits for a usable route answer
    /// from the peers it asked (its relay, rendezvous and other connected
    /// peers) before reporting [`crate::PeerError::NoRoute`]; bounded in
    /// turn by the caller's own timeout. With no connected peer to ask the
    /// search fails at once. Default 900 ms, so that a peer nobody can
    /// reach is reported within a second (route answers on a LAN or
    /// through one relay come back in milliseconds; JXTA has no negative
    /// route answer, so "nobody knows" is the absence of answers).
    pub route_query_timeout: Duration,
}

/// Settings of the IP multicast transport: propagate pipes also send each
/// message as one UDP datagram to `group`, and every message received
/// there is dispatched like one received on a connection.
///
/// ```
/// use std::net::Ipv4Addr;
/// use juxta::config::MulticastConfig;
/// let m = MulticastConfig::new(Ipv4Addr::new(10, 77, 0, 1)).ttl(2);
/// assert_eq!(m.group.to_string(), "224.0.1.85:1234");
/// let cfg = juxta::PeerConfig::new("/tmp/juxta-doc-mcast").multicast(m);
/// assert_eq!(cfg.multicast.unwrap().ttl, 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MulticastConfig {
    /// Group address and port; JXSE's default is `224.0.1.85:1234`.
    pub group: SocketAddrV4,
    /// Address of the local interface to join the group on and send from
    /// (`IP_MULTICAST_IF`); `0.0.0.0` lets the kernel pick by route.
    pub interface: Ipv4Addr,
    /// Time to live of sent datagrams (`IP_MULTICAST_TTL`); 1 keeps them on
    /// the local link.
    pub ttl: u32,
    /// Whether sent datagrams also reach sockets on this host
    /// (`IP_MULTICAST_LOOP`), e.g. other peers on the same machine. A peer
    /// ignores its own datagrams either way.
    pub loopback: bool,
}

impl Default for MulticastConfig {
    fn default() -> Self {
        MulticastConfig {
            group: SocketAddrV4::new(Ipv4Addr::new(224, 0, 1, 85), 1234),
            interface: Ipv4Addr::UNSPECIFIED,
            ttl: 1,
            loopback: false,
        }
    }
}

impl MulticastConfig {
    /// Defaults (JXSE's group, TTL 1, no loopback) on the interface with
    /// address `interface`.
    pub fn new(interface: Ipv4Addr) -> MulticastConfig {
        MulticastConfig {
            interface,
            ..MulticastConfig::default()
        }
    }

    /// Sets the group address and port.
    pub fn group(mut self, group: SocketAddrV4) -> MulticastConfig {
        self.group = group;
        self
    }

    /// Sets the TTL of sent datagrams.
    pub fn ttl(mut self, ttl: u32) -> MulticastConfig {
        self.ttl = ttl;
        self
    }

    /// Sets whether sent datagrams loop back to sockets on this host.
    pub fn loopback(mut self, on: bool) -> MulticastConfig {
        self.loopback = on;
        self
    }
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
            frame_timeout: Duration::from_secs(60),
            first_message_timeout: Duration::from_secs(60),
            idle_timeout: None,
            write_timeout: Duration::from_secs(10),
            max_connections_per_addr: 32,
            max_pending_per_addr: 8,
            service_queue: 128,
            listener_queue: 1024,
            max_connections: 1024,
            connect_timeout: Duration::from_secs(10),
            multicast: None,
            lan: None,
            cache: None,
            discovery: crate::discovery::DiscoveryConfig::default(),
            rendezvous: None,
            rendezvous_http: false,
            http_listen: None,
            http: crate::transport::http::HttpConfig::default(),
            relay: None,
            accept_unsigned_routes: false,
            auto_relay: true,
            route_query_timeout: Duration::from_millis(900),
        }
    }

    /// Turns the automatic relay lease of a peer that cannot be dialled on
    /// (the default) or off; see [`PeerConfig::auto_relay`].
    ///
    /// ```
    /// use juxta::rendezvous::RendezvousConfig;
    /// let seeds = vec!["127.0.0.1:9701".parse().unwrap()];
    /// let edge = juxta::PeerConfig::new("/tmp/juxta-doc-auto").rendezvous(RendezvousConfig::edge(seeds.clone()));
    /// // No listen address, a rendezvous seed: the seed is leased as relay.
    /// assert_eq!(edge.effective_relay(), Some(juxta::relay::RelayConfig::auto(seeds)));
    /// assert_eq!(edge.clone().auto_relay(false).effective_relay(), None);
    /// // A peer that listens can be dialled: no automatic lease.
    /// assert_eq!(edge.listen("127.0.0.1:0".parse().unwrap()).effective_relay(), None);
    /// ```
    pub fn auto_relay(mut self, on: bool) -> PeerConfig {
        self.auto_relay = on;
        self
    }

    /// The relay service this configuration runs: [`PeerConfig::relay`]
    /// when set; else, for a peer with no listen address and rendezvous
    /// seeds while [`PeerConfig::auto_relay`] is on, a lease at one of
    /// those seeds ([`crate::relay::RelayConfig::auto`]); else none.
    pub fn effective_relay(&self) -> Option<crate::relay::RelayConfig> {
        if self.relay.is_some() {
            return self.relay.clone();
        }
        if !self.auto_relay || self.listen.is_some() || self.http_listen.is_some() {
            return None;
        }
        match &self.rendezvous.as_ref()?.role {
            crate::rendezvous::RendezvousRole::Edge { seeds } if !seeds.is_empty() => {
                let mut r = crate::relay::RelayConfig::auto(seeds.clone());
                if self.rendezvous_http {
                    // The seeds are HTTP listeners: leased over HTTP too.
                    if let crate::relay::RelayRole::Client { http, .. } = &mut r.role {
                        *http = true;
                    }
                }
                Some(r)
            }
            _ => None,
        }
    }

    /// Sets the advertisement cache file (default `home/cm.sqlite`).
    pub fn cache(mut self, path: impl Into<PathBuf>) -> PeerConfig {
        self.cache = Some(path.into());
        self
    }

    /// The advertisement cache file this configuration uses.
    pub fn cache_path(&self) -> PathBuf {
        self.cache
            .clone()
            .unwrap_or_else(|| self.home.join("cm.sqlite"))
    }

    /// Sets the listen address.
    pub fn listen(mut self, addr: SocketAddr) -> PeerConfig {
        self.listen = Some(addr);
        self
    }

    /// Also listens for HTTP clients (edges that can only speak HTTP) on
    /// `addr`; see [`crate::Peer::connect_http`].
    ///
    /// ```
    /// let cfg = juxta::PeerConfig::new("/tmp/juxta-doc-http").http_listen("127.0.0.1:0".parse().unwrap());
    /// assert!(cfg.http_listen.is_some());
    /// ```
    pub fn http_listen(mut self, addr: SocketAddr) -> PeerConfig {
        self.http_listen = Some(addr);
        self
    }

    /// Enables or disables compact framing between Juxta peers.
    pub fn compact(mut self, on: bool) -> PeerConfig {
        self.connection.compact = on;
        self
    }

    /// Runs (default) or skips the Juxta handshake that proves peer IDs
    /// between Juxta peers. Off, a Juxta peer proves its ID only as a JXSE
    /// peer does (CBJX signatures naming the receiver), and never uses
    /// compact framing: see docs/security.md.
    pub fn handshake(mut self, on: bool) -> PeerConfig {
        self.connection.handshake = on;
        if !on {
            self.connection.compact = false;
        }
        self
    }

    /// Turns on zero-configuration LAN discovery ([`PeerConfig::lan`]),
    /// filling in multicast, a listen address and the rendezvous service
    /// when they are not set yet (set them before or after, either way:
    /// [`crate::Peer::start`] fills what is still missing).
    ///
    /// ```
    /// use juxta::lan::LanConfig;
    /// // An edge that becomes a rendezvous after 3 s without one.
    /// let cfg = juxta::PeerConfig::new("/tmp/juxta-doc-lan").lan(LanConfig::default().auto_rendezvous(3_000));
    /// let cfg = cfg.with_lan_defaults();
    /// assert_eq!(cfg.multicast.unwrap().group.to_string(), "224.0.1.85:1234");
    /// assert_eq!(cfg.listen, Some("0.0.0.0:0".parse().unwrap()));
    /// assert!(cfg.rendezvous.is_some());
    /// ```
    pub fn lan(mut self, l: crate::lan::LanConfig) -> PeerConfig {
        self.lan = Some(l);
        self
    }

    /// With LAN discovery on, the settings it needs that are still
    /// missing (see [`PeerConfig::lan`]); otherwise unchanged.
    pub fn with_lan_defaults(mut self) -> PeerConfig {
        if self.lan.is_none() {
            return self;
        }
        let m = *self.multicast.get_or_insert_with(MulticastConfig::default);
        if self.listen.is_none() {
            self.listen = Some(SocketAddr::new(m.interface.into(), 0));
        }
        if self.rendezvous.is_none() {
            self.rendezvous = Some(crate::rendezvous::RendezvousConfig::edge(Vec::new()));
        }
        self
    }

    /// Enables IP multicast with these settings.
    pub fn multicast(mut self, m: MulticastConfig) -> PeerConfig {
        self.multicast = Some(m);
        self
    }

    /// Runs the rendezvous service in this role.
    pub fn rendezvous(mut self, r: crate::rendezvous::RendezvousConfig) -> PeerConfig {
        self.rendezvous = Some(r);
        self
    }

    /// Reaches the rendezvous seeds (and, for a rendezvous, its peer
    /// rendezvous) over JXTA's HTTP transport instead of TCP: the
    /// addresses given to [`crate::rendezvous::RendezvousConfig::edge`] are
    /// then [`PeerConfig::http_listen`] addresses. An edge that can only
    /// speak HTTP does this with no listen address of its own; its
    /// automatic relay lease ([`PeerConfig::auto_relay`]) then also goes
    /// over HTTP, so everything for it comes back in its HTTP polls.
    ///
    /// ```
    /// use juxta::rendezvous::RendezvousConfig;
    /// let seeds = vec!["127.0.0.1:9780".parse().unwrap()];
    /// let edge = juxta::PeerConfig::new("/tmp/juxta-doc-rdv-http")
    ///     .rendezvous(RendezvousConfig::edge(seeds.clone()))
    ///     .rendezvous_over_http(true);
    /// assert!(edge.rendezvous_http);
    /// // Its relay lease at the seed goes over HTTP as well.
    /// assert!(matches!(
    ///     edge.effective_relay().unwrap().role,
    ///     juxta::relay::RelayRole::Client { http: true, auto: true, .. }
    /// ));
    /// ```
    pub fn rendezvous_over_http(mut self, on: bool) -> PeerConfig {
        self.rendezvous_http = on;
        self
    }

    /// Runs the relay service in this role.
    pub fn relay(mut self, r: crate::relay::RelayConfig) -> PeerConfig {
        self.relay = Some(r);
        self
    }

    /// Enables or disables CBJX signatures (must match the other side).
    pub fn cbjx(mut self, on: bool) -> PeerConfig {
        self.connection.cbjx = on;
        self
    }

    /// The name written into a new identity's certificate (default `"juxta"`).
    pub fn name(mut self, name: impl Into<String>) -> PeerConfig {
        self.name = name.into();
        self
    }

    /// The RSA key size of a new identity (default 2048; an existing identity keeps its key).
    pub fn key_bits(mut self, bits: usize) -> PeerConfig {
        self.key_bits = bits;
        self
    }

    /// `SO_SNDBUF`/`SO_RCVBUF` of every TCP connection; `None` (default) leaves the kernel's automatic tuning on.
    pub fn socket_buffer(mut self, bytes: Option<usize>) -> PeerConfig {
        self.socket_buffer = bytes;
        self
    }

    /// How long the welcome lines (and a compact handshake the remote started) may take before the connection is closed (default 5 s).
    pub fn welcome_timeout(mut self, d: Duration) -> PeerConfig {
        self.welcome_timeout = d;
        self
    }

    /// How long a frame, once begun, may take to arrive whole (default 60 s; slowloris).
    pub fn frame_timeout(mut self, d: Duration) -> PeerConfig {
        self.frame_timeout = d;
        self
    }

    /// How long an accepted connection may stay silent after the welcome (default 60 s).
    pub fn first_message_timeout(mut self, d: Duration) -> PeerConfig {
        self.first_message_timeout = d;
        self
    }

    /// Closes a connection on which nothing arrived for this long; `None` (default): never.
    pub fn idle_timeout(mut self, d: Option<Duration>) -> PeerConfig {
        self.idle_timeout = d;
        self
    }

    /// How long a write may make no progress (the remote stopped reading) before the connection is closed (default 10 s).
    pub fn write_timeout(mut self, d: Duration) -> PeerConfig {
        self.write_timeout = d;
        self
    }

    /// Connections open at once, both directions (default 1024); more are refused.
    pub fn max_connections(mut self, n: usize) -> PeerConfig {
        self.max_connections = n;
        self
    }

    /// Accepted connections from one IP address (default 32).
    pub fn max_connections_per_addr(mut self, n: usize) -> PeerConfig {
        self.max_connections_per_addr = n;
        self
    }

    /// Accepted connections from one IP address still exchanging welcome lines (default 8).
    pub fn max_pending_per_addr(mut self, n: usize) -> PeerConfig {
        self.max_pending_per_addr = n;
        self
    }

    /// Service messages (resolver, discovery, rendezvous, relay) queued per connection while its socket is busy (default 128); more are refused and counted.
    pub fn service_queue(mut self, n: usize) -> PeerConfig {
        self.service_queue = n;
        self
    }

    /// Messages queued per listener (default 1024); a full queue makes the connection stop reading (back-pressure).
    pub fn listener_queue(mut self, n: usize) -> PeerConfig {
        self.listener_queue = n;
        self
    }

    /// How long a dial (TCP connect and welcome) may take (default 10 s).
    pub fn connect_timeout(mut self, d: Duration) -> PeerConfig {
        self.connect_timeout = d;
        self
    }

    /// How long [`crate::Peer::route_to`] waits for a usable route answer (default 900 ms).
    pub fn route_query_timeout(mut self, d: Duration) -> PeerConfig {
        self.route_query_timeout = d;
        self
    }

    /// Learns routes nothing vouches for (off by default; on only for JXSE peers that send unsigned routes, on a trusted network).
    pub fn accept_unsigned_routes(mut self, on: bool) -> PeerConfig {
        self.accept_unsigned_routes = on;
        self
    }

    /// The largest message accepted or sent on a connection, in bytes (default: JXSE's limit).
    pub fn max_message(mut self, bytes: u64) -> PeerConfig {
        self.connection.max_message = bytes;
        self
    }

    /// Discovery's bounds (queries pending, answers per query, flow control).
    pub fn discovery(mut self, d: crate::discovery::DiscoveryConfig) -> PeerConfig {
        self.discovery = d;
        self
    }

    /// The HTTP transport's settings (sessions, polls, limits), for [`PeerConfig::http_listen`] and [`crate::Peer::connect_http`].
    pub fn http(mut self, h: crate::transport::http::HttpConfig) -> PeerConfig {
        self.http = h;
        self
    }

    /// Every framing and security setting of connections at once (advanced; [`PeerConfig::compact`], [`PeerConfig::cbjx`], [`PeerConfig::handshake`] and [`PeerConfig::max_message`] cover the common ones).
    pub fn connection(mut self, c: ConnectionConfig) -> PeerConfig {
        self.connection = c;
        self
    }
}
