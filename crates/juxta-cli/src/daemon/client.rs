//! The operator commands: `juxta id`, `status`, `peers`, `groups`,
//! `discover`, `publish`, `route`. Each but `id` asks the daemon of a home
//! over its control socket and prints the answer for a person, or as JSON
//! with `--json`.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

use super::control::{self, Request};
use super::{default_home, DaemonError};

/// Flags every operator command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// The daemon's home directory (default $JUXTA_HOME or ~/.juxta).
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Print the answer as JSON (for scripts).
    #[arg(long)]
    pub json: bool,
}

/// The operator commands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum OpCmd {
    /// Identity, addresses, roles, connections, leases, relay clients,
    /// rendezvous view and counters of a running peer.
    Status(Common),
    /// Peers connected to a running peer, and peers it knows of.
    Peers(Common),
    /// Groups a running peer has joined.
    Groups(Common),
    /// Advertisements in a running peer's cache, or (--remote) found
    /// through the peers it is connected to (its rendezvous).
    Discover {
        #[command(flatten)]
        common: Common,
        /// Kind: peer, group or adv.
        #[arg(long = "type", default_value = "adv")]
        kind: String,
        /// Attribute to match (Name, PID, GID, Id, ...).
        #[arg(long)]
        attr: Option<String>,
        /// Value to match (`*` wildcards).
        #[arg(long)]
        value: Option<String>,
        /// Ask connected peers too.
        #[arg(long)]
        remote: bool,
        /// Most advertisements.
        #[arg(long, default_value_t = 10)]
        threshold: u32,
    },
    /// Publish an advertisement (an XML file) from a running peer.
    Publish {
        #[command(flatten)]
        common: Common,
        /// The advertisement file.
        file: PathBuf,
    },
    /// How a running peer reaches PEER: directly, or through relays.
    Route {
        #[command(flatten)]
        common: Common,
        /// The peer ID (urn:jxta:...).
        peer: String,
    },
}

/// `juxta id`: prints the peer ID of a home's identity.
pub fn id(home: Option<PathBuf>) -> ExitCode {
    let home = home.unwrap_or_else(default_home);
    let read = |name: &str| std::fs::read_to_string(home.join(name));
    let r = match (read("identity.key"), read("identity.crt")) {
        (Ok(k), Ok(c)) => juxta_proto::identity::Identity::from_pem(&k, &c)
            .map(|i| *i.peer_id())
            .map_err(|e| DaemonError::NoIdentity {
                home: home.clone(),
                message: e.to_string(),
            }),
        (Err(e), _) | (_, Err(e)) => Err(DaemonError::NoIdentity {
            home: home.clone(),
            message: e.to_string(),
        }),
    };
    match r {
        Ok(p) => {
            println!("{p}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("juxta id: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs an operator command.
pub fn run(cmd: OpCmd) -> ExitCode {
    let (name, common, req) = match request_of(cmd) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("juxta: {e}");
            return ExitCode::FAILURE;
        }
    };
    let home = common.home.clone().unwrap_or_else(default_home);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let resp = match rt.block_on(control::request(&home, &req)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("juxta {name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if common.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&resp).unwrap_or_default()
        );
    } else if let Some(e) = &resp.error {
        eprintln!("juxta {name}: {} ({})", e.message, e.kind);
    } else if let Some(v) = &resp.result {
        print!("{}", human(name, v));
    }
    if resp.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn request_of(cmd: OpCmd) -> Result<(&'static str, Common, Request), DaemonError> {
    Ok(match cmd {
        OpCmd::Status(c) => ("status", c, Request::Status),
        OpCmd::Peers(c) => ("peers", c, Request::Peers),
        OpCmd::Groups(c) => ("groups", c, Request::Groups),
        OpCmd::Discover {
            common,
            kind,
            attr,
            value,
            remote,
            threshold,
        } => (
            "discover",
            common,
            Request::Discover {
                kind,
                attr,
                value,
                remote,
                threshold,
            },
        ),
        OpCmd::Publish { common, file } => {
            let xml = std::fs::read_to_string(&file)
                .map_err(|source| DaemonError::Read { path: file, source })?;
            ("publish", common, Request::Publish { xml })
        }
        OpCmd::Route { common, peer } => ("route", common, Request::Route { peer }),
    })
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The answer for a person.
fn human(name: &str, v: &Value) -> String {
    let mut o = String::new();
    let mut line = |k: &str, val: String| o.push_str(&format!("{k:<21}{val}\n"));
    match name {
        "status" => {
            line("peer", s(&v["peer_id"]));
            line("name", s(&v["name"]));
            line("home", s(&v["home"]));
            line("config", s(&v["config"]));
            line(
                "roles",
                v["roles"]
                    .as_array()
                    .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
                    .unwrap_or_default(),
            );
            line(
                "uptime",
                format!("{:.1} s", v["uptime_s"].as_f64().unwrap_or(0.0)),
            );
            for k in ["tcp", "http", "metrics", "control", "bench"] {
                line(k, s(&v["addresses"][k]));
            }
            line("connections", s(&v["connections"]));
            line("groups", s(&v["groups"]));
            if let Some(r) = v["rendezvous"].as_object() {
                if r["is_rendezvous"].as_bool() == Some(true) {
                    line(
                        "rendezvous",
                        format!(
                            "serving: {} edges leased, view {}, {} index entries, {} queries, {} busy, {} refused",
                            s(&r["clients"]), s(&r["view"]), s(&r["index_entries"]), s(&r["queries"]), s(&r["busy"]), s(&r["refused"])
                        ),
                    );
                } else {
                    line(
                        "rendezvous",
                        format!(
                            "edge: leased to {}, {} lookups answered",
                            s(&r["leased_to"]),
                            s(&r["answered"])
                        ),
                    );
                }
            }
            if let Some(r) = v["relay"].as_object() {
                line(
                    "relay",
                    format!(
                        "leased to {}; {} clients, {} forwarded, {} queued, {} pushed back, refused: {} full, {} queue full, {} quota",
                        s(&r["leased_to"]), s(&r["clients"]), s(&r["forwarded"]), s(&r["queued"]), s(&r["pushed_back"]), s(&r["refused_full"]), s(&r["refused_queue_full"]), s(&r["refused_quota"])
                    ),
                );
            }
            if let Some(l) = v["launch"].as_object() {
                line(
                    "launch",
                    format!(
                        "{} ranks running, {} started, {} refused, {} killed",
                        s(&l["running"]),
                        s(&l["started"]),
                        s(&l["refused"]),
                        s(&l["killed"])
                    ),
                );
            }
            if let Some(t) = v["transfers"].as_object() {
                let serving = t["serving"].as_array().cloned().unwrap_or_default();
                line(
                    "transfers",
                    format!(
                        "{} serving (limit {}, {} refused at the limit)",
                        serving.len(),
                        s(&t["limit"]),
                        s(&t["refused"])
                    ),
                );
                for x in &serving {
                    line(
                        &format!("  #{}", s(&x["id"])),
                        format!(
                            "{}: {} file(s), {} bytes, until {}{}; {} active, {} complete, {} refused, {} bytes sent; {}",
                            s(&x["path"]),
                            s(&x["files"]),
                            s(&x["bytes"]),
                            crate::transfer::send::utc(x["expires"].as_u64().unwrap_or(0)),
                            if x["once"].as_bool() == Some(true) { " or one complete receiver" } else { "" },
                            s(&x["active"]),
                            s(&x["completed"]),
                            x["refused_busy"].as_u64().unwrap_or(0) + x["refused_expired"].as_u64().unwrap_or(0),
                            s(&x["bytes_sent"]),
                            s(&x["ticket"]),
                        ),
                    );
                }
            }
            if let Some(c) = v["counters"].as_object() {
                for (k, val) in c {
                    line(k, s(val));
                }
            }
        }
        "peers" => {
            o.push_str("connected:\n");
            for c in v["connected"].as_array().into_iter().flatten() {
                o.push_str(&format!(
                    "  {}  {}  in {} B, out {} B{}{}\n",
                    s(&c["peer"]),
                    s(&c["addr"]),
                    s(&c["bytes_in"]),
                    s(&c["bytes_out"]),
                    if c["compact"].as_bool() == Some(true) {
                        ", compact"
                    } else {
                        ""
                    },
                    if c["proven"].as_bool() == Some(true) {
                        ", proven"
                    } else {
                        ""
                    },
                ));
            }
            o.push_str("known:\n");
            for k in v["known"].as_array().into_iter().flatten() {
                o.push_str(&format!(
                    "  {}  {}{}\n",
                    s(&k["peer"]),
                    s(&k["name"]),
                    if k["connected"].as_bool() == Some(true) {
                        " (connected)"
                    } else {
                        ""
                    }
                ));
            }
        }
        "groups" => {
            for g in v["joined"].as_array().into_iter().flatten() {
                o.push_str(&format!("{}  {}\n", s(&g["id"]), s(&g["name"])));
            }
        }
        "discover" => {
            if let Some(e) = v["remote_error"].as_str() {
                o.push_str(&format!("(remote: {e}; local cache shown)\n"));
            }
            for a in v["advertisements"].as_array().into_iter().flatten() {
                let fields = a["fields"]
                    .as_object()
                    .map(|f| {
                        f.iter()
                            .map(|(k, x)| format!("{k}={}", s(x)))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                o.push_str(&format!("{}  {}  {}\n", s(&a["type"]), s(&a["id"]), fields));
            }
        }
        "publish" => {
            let a = &v["published"];
            o.push_str(&format!("published {} {}\n", s(&a["type"]), s(&a["id"])));
        }
        "route" => match v["how"].as_str() {
            Some("direct") => o.push_str(&format!(
                "{}: direct, tcp://{}\n",
                s(&v["peer"]),
                s(&v["addr"])
            )),
            Some("relayed") => o.push_str(&format!(
                "{}: through {}\n",
                s(&v["peer"]),
                v["hops"]
                    .as_array()
                    .map(|h| h.iter().map(s).collect::<Vec<_>>().join(" -> "))
                    .unwrap_or_default()
            )),
            _ => o.push_str(&format!("{}: {}\n", s(&v["peer"]), s(&v["how"]))),
        },
        _ => o.push_str(&format!("{v}\n")),
    }
    o
}
