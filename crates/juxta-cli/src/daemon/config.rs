//! The daemon's settings: a TOML file (default `<home>/juxta.toml`),
//! overridden by command-line flags. Every key is documented in
//! docs/peer.md; an unknown or malformed key is an error naming the file,
//! line and key, reported before anything starts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::DaemonError;

/// The file's contents (every key optional).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Name written into a new identity's certificate.
    pub name: Option<String>,
    /// TCP listen address.
    pub listen: Option<SocketAddr>,
    /// HTTP (JXTA HTTP transport) listen address.
    pub http: Option<SocketAddr>,
    /// Roles: edge, rendezvous, relay.
    pub roles: Option<Vec<Role>>,
    /// Edge: rendezvous to lease; rendezvous: the other rendezvous of the
    /// peer view.
    pub seeds: Option<Vec<SocketAddr>>,
    /// Edge: relays to lease (TCP).
    pub relays: Option<Vec<SocketAddr>>,
    /// Prometheus metrics listen address.
    pub metrics: Option<SocketAddr>,
    /// RSA key size of a new identity.
    pub key_bits: Option<usize>,
    /// Compact framing between Juxta peers.
    pub compact: Option<bool>,
    /// CBJX message signatures.
    pub cbjx: Option<bool>,
    /// Answer the benchmark ack service.
    pub bench_ack: Option<bool>,
    /// Lease a rendezvous seed as relay when the peer cannot be dialled.
    pub auto_relay: Option<bool>,
    /// Advertisement files (XML) to publish at start.
    pub publish: Option<Vec<PathBuf>>,
    /// Groups to create or join at start.
    #[serde(default)]
    pub groups: Vec<GroupSpec>,
    /// Bounds.
    #[serde(default)]
    pub limits: Limits,
    /// The bench listener (benchmarks run from another host).
    #[serde(default)]
    pub bench: BenchConfig,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// Ranks of message-passing jobs started here by allowed launchers
    /// (`juxta run --hosts`).
    #[serde(default)]
    pub launch: LaunchConfig,
}

/// `[launch]`: start ranks of `juxta run --hosts` jobs for the peers
/// allowed. Off unless `allowed_peers` lists someone.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchConfig {
    /// Launcher peer IDs that may start ranks here (`juxta id --home
    /// ~/.juxta/launch` on the launching machine). An allowed peer runs any
    /// program (or one of `programs`) as the daemon's user.
    pub allowed_peers: Option<Vec<String>>,
    /// If set, the only programs a launcher may start (paths as the
    /// launcher gives them).
    pub programs: Option<Vec<PathBuf>>,
    /// Most ranks running here at once (default 64).
    pub max_ranks: Option<usize>,
    /// Working directory of the ranks (default: the home).
    pub dir: Option<PathBuf>,
    /// The address ranks listen on, reachable by the other hosts
    /// (default: the IP of `listen`; required when that is 0.0.0.0 or ::).
    pub address: Option<std::net::IpAddr>,
}

impl LaunchConfig {
    /// The settings the launch service runs with, or `None` when it is
    /// off (no allowed peer).
    pub fn settings(
        &self,
        home: &Path,
        listen: Option<SocketAddr>,
    ) -> Result<Option<crate::launch::serve::LaunchSettings>, ConfigError> {
        let peers: Vec<juxta_proto::id::PeerId> = self
            .allowed_peers
            .iter()
            .flatten()
            .map(|s| {
                s.parse().map_err(|e| {
                    ConfigError::Conflict(format!(
                        "launch.allowed_peers: {s:?} is not a peer ID: {e}"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        if peers.is_empty() {
            return Ok(None);
        }
        let address = match (self.address, listen) {
            (Some(a), _) => a,
            (None, Some(l)) if !l.ip().is_unspecified() => l.ip(),
            _ => {
                return Err(ConfigError::Conflict(
                    "launch: set `launch.address` (the address ranks listen on) or a `listen` address that is not 0.0.0.0/::".into(),
                ))
            }
        };
        let max_ranks = self
            .max_ranks
            .unwrap_or(crate::launch::serve::DEFAULT_MAX_RANKS);
        if max_ranks == 0 {
            return Err(ConfigError::Conflict("launch.max_ranks: at least 1".into()));
        }
        Ok(Some(crate::launch::serve::LaunchSettings {
            allowed_peers: peers,
            programs: self.programs.clone(),
            max_ranks,
            dir: self.dir.clone().unwrap_or_else(|| home.to_path_buf()),
            address,
        }))
    }
}

/// A role of the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Leases a rendezvous (and relays) among the seeds.
    Edge,
    /// Serves edges: leases, SRDI index, lookups.
    Rendezvous,
    /// Forwards messages for edges that cannot be dialled.
    Relay,
}

impl Role {
    /// The role's name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Edge => "edge",
            Role::Rendezvous => "rendezvous",
            Role::Relay => "relay",
        }
    }
}

/// A `[[groups]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// The group's name.
    pub name: String,
    /// `create` (a new group, password membership) or `join` (an existing
    /// one, found by `id` or by name).
    #[serde(default)]
    pub action: GroupAction,
    /// Join: the group ID (`urn:jxta:...`).
    pub id: Option<String>,
    /// The membership password.
    pub password: Option<String>,
}

/// What to do with a `[[groups]]` entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupAction {
    /// Join an existing group.
    #[default]
    Join,
    /// Create a new group and join it.
    Create,
}

/// `[limits]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Most simultaneous connections.
    pub max_connections: Option<usize>,
    /// Most connections accepted from one IP address.
    pub max_connections_per_addr: Option<usize>,
    /// Most not-yet-welcomed connections from one IP address.
    pub max_pending_per_addr: Option<usize>,
    /// Rendezvous: most leased edges.
    pub rendezvous_clients: Option<usize>,
    /// Relay: most leased edges.
    pub relay_clients: Option<usize>,
    /// Relay: messages queued per edge.
    pub relay_queue_messages: Option<usize>,
    /// Relay: bytes queued per edge.
    pub relay_queue_bytes: Option<usize>,
    /// Control socket: most clients served at once.
    pub control_clients: Option<usize>,
    /// Tickets served at once for `juxta send`.
    pub transfers: Option<usize>,
}

/// `[bench]`: serve benchmark responders to clients on other hosts
/// (`juxta bench pingpong --remote`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchConfig {
    /// Serve the bench listener (`--bench`).
    pub enabled: Option<bool>,
    /// Its TCP address (default 0.0.0.0:9711).
    pub listen: Option<SocketAddr>,
    /// The token clients present (default: a new random one each start,
    /// printed on stdout).
    pub token: Option<String>,
    /// Peer IDs served without the token, on a proof of the ID
    /// (`--identity HOME` on the client).
    pub allowed_peers: Option<Vec<String>>,
    /// Most responders running at once per client address (default 8).
    pub max_responders: Option<usize>,
    /// Most control connections at once (default 64).
    pub max_clients: Option<usize>,
}

/// The bench listener's default address.
pub const DEFAULT_BENCH_LISTEN: &str = "0.0.0.0:9711";

impl BenchConfig {
    /// The allowed peer IDs, parsed.
    pub fn peers(&self) -> Result<Vec<juxta_proto::id::PeerId>, ConfigError> {
        self.allowed_peers
            .iter()
            .flatten()
            .map(|s| {
                s.parse().map_err(|e| {
                    ConfigError::Conflict(format!(
                        "bench.allowed_peers: {s:?} is not a peer ID: {e}"
                    ))
                })
            })
            .collect()
    }
}

/// `[log]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// Level or `tracing` filter directives (`info`, `juxta=debug,warn`).
    pub level: Option<String>,
    /// `human` or `json` (one JSON object a line).
    pub format: Option<LogFormat>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Text lines for a person.
    #[default]
    Human,
    /// One JSON object a line.
    Json,
}

/// A configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key is unknown or its value malformed.
    #[error("{}:{line}:{column}: {}{message}", file.display(), key.as_ref().map(|k| format!("key `{k}`: ")).unwrap_or_default())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The key concerned, when the error is about one.
        key: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// Settings that contradict each other.
    #[error("{0}")]
    Conflict(String),
}

/// 1-based line and column of byte `offset` in `src`.
fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let before = &src[..offset.min(src.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Parses `src` (the contents of `file`).
pub fn parse(file: &Path, src: &str) -> Result<FileConfig, ConfigError> {
    toml::from_str::<FileConfig>(src).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let (line, column) = line_col(src, span.start);
        let text = src.get(span.clone()).unwrap_or("").trim();
        let msg = e.message().trim().to_string();
        // An unknown field's span is the key itself; a bad value's span is
        // the value, whose key starts its line.
        let key = if msg.starts_with("unknown field") {
            Some(text.trim_matches('"').to_string())
        } else {
            let line_text = src.lines().nth(line.saturating_sub(1)).unwrap_or("");
            line_text
                .split_once('=')
                .map(|(k, _)| k.trim().trim_matches('"').to_string())
                .filter(|k| !k.is_empty())
        };
        ConfigError::Invalid {
            file: file.to_path_buf(),
            line,
            column,
            key,
            message: msg,
        }
    })
}

/// Reads and parses `file`.
pub fn load(file: &Path) -> Result<FileConfig, ConfigError> {
    let src = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
        file: file.to_path_buf(),
        source,
    })?;
    parse(file, &src)
}

/// The settings the daemon runs with (file and flags merged).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Home directory.
    pub home: PathBuf,
    /// The configuration file read, if any.
    pub config_file: Option<PathBuf>,
    /// The file's settings, flags applied.
    pub file: FileConfig,
    /// Roles (at least one).
    pub roles: Vec<Role>,
}

impl Settings {
    /// The `tracing` filter.
    pub fn log_level(&self) -> String {
        self.file
            .log
            .level
            .clone()
            .or_else(|| std::env::var("RUST_LOG").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "info".into())
    }

    /// The peer configuration.
    pub fn peer_config(&self) -> Result<juxta::PeerConfig, DaemonError> {
        use juxta::relay::RelayConfig;
        use juxta::rendezvous::RendezvousConfig;
        let f = &self.file;
        let mut cfg = juxta::PeerConfig::new(&self.home)
            .compact(f.compact.unwrap_or(true))
            .cbjx(f.cbjx.unwrap_or(true))
            .auto_relay(f.auto_relay.unwrap_or(true));
        cfg.listen = f.listen;
        cfg.http_listen = f.http;
        if let Some(n) = &f.name {
            cfg = cfg.name(n.clone());
        }
        if let Some(k) = f.key_bits {
            cfg = cfg.key_bits(k);
        }
        let l = &f.limits;
        if let Some(n) = l.max_connections {
            cfg = cfg.max_connections(n.max(1));
        }
        if let Some(n) = l.max_connections_per_addr {
            cfg = cfg.max_connections_per_addr(n.max(1));
        }
        if let Some(n) = l.max_pending_per_addr {
            cfg = cfg.max_pending_per_addr(n.max(1));
        }
        let has = |r| self.roles.contains(&r);
        let seeds = f.seeds.clone().unwrap_or_default();
        let relays = f.relays.clone().unwrap_or_default();
        if has(Role::Edge) && has(Role::Rendezvous) {
            return Err(ConfigError::Conflict(
                "roles: a peer is an edge or a rendezvous, not both".into(),
            )
            .into());
        }
        if has(Role::Relay) && !relays.is_empty() {
            return Err(ConfigError::Conflict(
                "relays: a relay leases no relay (remove `relays` or the relay role)".into(),
            )
            .into());
        }
        if has(Role::Rendezvous) {
            let mut r = RendezvousConfig::rendezvous().peers(seeds.clone());
            if let Some(n) = l.rendezvous_clients {
                r = r.max_clients(n.max(1));
            }
            cfg = cfg.rendezvous(r);
        } else if !seeds.is_empty() {
            cfg = cfg.rendezvous(RendezvousConfig::edge(seeds));
        }
        if has(Role::Relay) {
            let mut r = RelayConfig::server();
            if let Some(n) = l.relay_clients {
                r = r.max_clients(n.max(1));
            }
            if l.relay_queue_messages.is_some() || l.relay_queue_bytes.is_some() {
                let msgs = l.relay_queue_messages.unwrap_or(r.server.queue_messages);
                let bytes = l.relay_queue_bytes.unwrap_or(r.server.queue_bytes);
                r = r.queue(msgs, bytes);
            }
            cfg = cfg.relay(r);
        } else if !relays.is_empty() {
            cfg = cfg.relay(RelayConfig::client(relays));
        }
        Ok(cfg)
    }
}

/// The flags that override the file (see `PeerArgs`).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--http`.
    pub http: Option<SocketAddr>,
    /// `--rendezvous`.
    pub rendezvous: bool,
    /// `--relay`.
    pub relay: bool,
    /// `--edge`.
    pub edge: bool,
    /// `--seed` (repeatable).
    pub seeds: Vec<SocketAddr>,
    /// `--relay-seed` (repeatable).
    pub relays: Vec<SocketAddr>,
    /// `--metrics`.
    pub metrics: Option<SocketAddr>,
    /// `--log-level`.
    pub log_level: Option<String>,
    /// `--log-format`.
    pub log_format: Option<LogFormat>,
    /// `--no-compact`.
    pub no_compact: bool,
    /// `--no-cbjx`.
    pub no_cbjx: bool,
    /// `--key-bits`.
    pub key_bits: Option<usize>,
    /// `--name`.
    pub name: Option<String>,
    /// `--bench`.
    pub bench: bool,
    /// `--bench-listen`.
    pub bench_listen: Option<SocketAddr>,
    /// `--bench-token`.
    pub bench_token: Option<String>,
}

/// Reads the configuration (`config`, else `<home>/juxta.toml` if it
/// exists) and applies the flags.
pub fn resolve(
    home: PathBuf,
    config: Option<PathBuf>,
    o: Overrides,
) -> Result<Settings, ConfigError> {
    let (config_file, mut file) = match config {
        Some(p) => {
            let f = load(&p)?;
            (Some(p), f)
        }
        None => {
            let p = home.join("juxta.toml");
            if p.is_file() {
                let f = load(&p)?;
                (Some(p), f)
            } else {
                (None, FileConfig::default())
            }
        }
    };
    if o.listen.is_some() {
        file.listen = o.listen;
    }
    if o.http.is_some() {
        file.http = o.http;
    }
    if !o.seeds.is_empty() {
        file.seeds = Some(o.seeds);
    }
    if !o.relays.is_empty() {
        file.relays = Some(o.relays);
    }
    if o.metrics.is_some() {
        file.metrics = o.metrics;
    }
    if o.log_level.is_some() {
        file.log.level = o.log_level;
    }
    if o.log_format.is_some() {
        file.log.format = o.log_format;
    }
    if o.no_compact {
        file.compact = Some(false);
    }
    if o.no_cbjx {
        file.cbjx = Some(false);
    }
    if o.key_bits.is_some() {
        file.key_bits = o.key_bits;
    }
    if o.name.is_some() {
        file.name = o.name;
    }
    if o.bench {
        file.bench.enabled = Some(true);
    }
    if o.bench_listen.is_some() {
        file.bench.listen = o.bench_listen;
    }
    if o.bench_token.is_some() {
        file.bench.token = o.bench_token;
    }
    if let Some(t) = &file.bench.token {
        if t.is_empty() || t.len() > juxta_bench::remote::MAX_TOKEN {
            return Err(ConfigError::Conflict(format!(
                "bench.token: 1..={} bytes",
                juxta_bench::remote::MAX_TOKEN
            )));
        }
    }
    file.bench.peers()?;
    let mut roles: Vec<Role> = if o.edge || o.rendezvous || o.relay {
        [
            (o.edge, Role::Edge),
            (o.rendezvous, Role::Rendezvous),
            (o.relay, Role::Relay),
        ]
        .into_iter()
        .filter_map(|(on, r)| on.then_some(r))
        .collect()
    } else {
        file.roles.clone().unwrap_or_default()
    };
    roles.dedup();
    if roles.is_empty() {
        roles.push(Role::Edge);
    }
    // Paths in the file are relative to the file's directory.
    if let (Some(cf), Some(list)) = (&config_file, file.publish.as_mut()) {
        let dir = cf.parent().unwrap_or(Path::new("."));
        for p in list.iter_mut() {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }
    Ok(Settings {
        home,
        config_file,
        file,
        roles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let src = r#"
name = "n1"
listen = "127.0.0.1:0"
http = "127.0.0.1:0"
roles = ["rendezvous", "relay"]
seeds = ["127.0.0.1:9701"]
metrics = "127.0.0.1:0"
key_bits = 1024
compact = true
cbjx = true
bench_ack = true
auto_relay = false
publish = ["a.xml"]

[[groups]]
name = "chat"
action = "create"
password = "pw"

[limits]
max_connections = 10
max_connections_per_addr = 4
max_pending_per_addr = 2
rendezvous_clients = 5
relay_clients = 5
relay_queue_messages = 10
relay_queue_bytes = 100000
control_clients = 4

[bench]
enabled = true
listen = "127.0.0.1:0"
token = "t0ken"
allowed_peers = []
max_responders = 2
max_clients = 8

[log]
level = "debug"
format = "json"
"#;
        let f = parse(Path::new("x.toml"), src).unwrap();
        assert_eq!(f.roles.unwrap(), vec![Role::Rendezvous, Role::Relay]);
        assert_eq!(f.groups[0].action, GroupAction::Create);
        assert_eq!(f.log.format, Some(LogFormat::Json));
        assert_eq!(f.limits.control_clients, Some(4));
    }

    #[test]
    fn an_unknown_key_names_file_line_and_key() {
        let src = "listen = \"127.0.0.1:0\"\n\n[limits]\nmax_conections = 3\n";
        let e = parse(Path::new("/h/juxta.toml"), src).unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("/h/juxta.toml:4:"), "{s}");
        assert!(s.contains("max_conections"), "{s}");
        match e {
            ConfigError::Invalid { line, key, .. } => {
                assert_eq!(line, 4);
                assert_eq!(key.as_deref(), Some("max_conections"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_malformed_value_names_its_key() {
        let src = "name = \"a\"\nlisten = \"not an address\"\n";
        let e = parse(Path::new("c.toml"), src).unwrap_err();
        match e {
            ConfigError::Invalid { line, key, .. } => {
                assert_eq!(line, 2);
                assert_eq!(key.as_deref(), Some("listen"));
            }
            other => panic!("{other:?}"),
        }
        let e = parse(Path::new("c.toml"), "roles = [\"edge\", \"boss\"]\n").unwrap_err();
        assert!(e.to_string().contains("roles"), "{e}");
    }

    #[test]
    fn flags_override_the_file_and_roles_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("juxta.toml");
        std::fs::write(
            &file,
            "roles = [\"edge\"]\nlisten = \"127.0.0.1:1\"\npublish = [\"adv.xml\"]\n",
        )
        .unwrap();
        let s = resolve(
            dir.path().to_path_buf(),
            None,
            Overrides {
                listen: Some("127.0.0.1:2".parse().unwrap()),
                rendezvous: true,
                relay: true,
                ..Overrides::default()
            },
        )
        .unwrap();
        assert_eq!(s.config_file.as_deref(), Some(file.as_path()));
        assert_eq!(s.file.listen, Some("127.0.0.1:2".parse().unwrap()));
        assert_eq!(s.roles, vec![Role::Rendezvous, Role::Relay]);
        assert_eq!(
            s.file.publish.as_ref().unwrap()[0],
            dir.path().join("adv.xml")
        );
        let cfg = s.peer_config().unwrap();
        assert!(cfg.rendezvous.is_some() && cfg.relay.is_some());
        let mut bad = s.clone();
        bad.roles = vec![Role::Edge, Role::Rendezvous];
        assert!(matches!(
            bad.peer_config(),
            Err(DaemonError::Config(ConfigError::Conflict(_)))
        ));
    }
}
