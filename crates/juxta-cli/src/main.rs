//! The `juxta` command: run a peer, run the benchmark suite.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use juxta::{Messenger, Peer, PeerConfig};
use juxta_bench::pingpong::{self, Layer, Pin, PingPongOptions, BENCH_SERVICE};
use juxta_proto::message::{Element, Message};

#[derive(Parser)]
#[command(
    name = "juxta",
    version,
    about = "Juxta: the JXTA peer-to-peer platform, done right"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a peer until interrupted (Ctrl-C). It logs connections and
    /// answers the benchmark ack service (JuxtaBench/ping -> JuxtaBench/ack).
    Peer {
        /// TCP address to listen on, e.g. 127.0.0.1:9701.
        #[arg(long)]
        listen: SocketAddr,
        /// Home directory (identity key and certificate are kept there).
        #[arg(long)]
        home: PathBuf,
        /// Do not offer or accept compact framing (always JXTA framing).
        #[arg(long)]
        no_compact: bool,
        /// Do not sign messages with CBJX (both sides must agree).
        #[arg(long)]
        no_cbjx: bool,
        /// RSA key size for a new identity (JXSE uses 1024).
        #[arg(long, default_value_t = 2048)]
        key_bits: usize,
    },
    /// Run the benchmark suite (with no scenario: the default run).
    Bench {
        #[command(subcommand)]
        scenario: Option<BenchCmd>,
        /// Output directory for the default run (default results/<timestamp>).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Internal: the responder process of a benchmark.
    #[command(hide = true)]
    BenchResponder {
        #[arg(long)]
        layer: String,
        #[arg(long)]
        core: Option<usize>,
        #[arg(long, default_value_t = 1024)]
        key_bits: usize,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Message/ack ping-pong per layer against plain TCP.
    Pingpong(PingPongArgs),
}

#[derive(clap::Args, Clone)]
struct PingPongArgs {
    /// Layers (tcp is always measured): tcp, endpoint, endpoint-compat.
    #[arg(long, default_value = "tcp,endpoint,endpoint-compat")]
    layers: String,
    /// Payload sizes in bytes.
    #[arg(long, default_value = "1,1024,16384,65536,262144,1048576,4194304")]
    sizes: String,
    /// CPU placement of the two processes: same, split or none.
    #[arg(long, default_value = "same")]
    pin: String,
    /// Warm-up pairs per layer and size (capped at 256 MiB of payload).
    #[arg(long, default_value_t = 1000)]
    warmup: usize,
    /// Timed runs.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Pairs per timed run.
    #[arg(long, default_value_t = 100)]
    pairs: usize,
    /// RSA key size of the bench peers (JXSE uses 1024).
    #[arg(long, default_value_t = 1024)]
    key_bits: usize,
    /// Write {"results": [...]} here.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl Default for PingPongArgs {
    fn default() -> Self {
        PingPongArgs {
            layers: "tcp,endpoint,endpoint-compat".into(),
            sizes: "1,1024,16384,65536,262144,1048576,4194304".into(),
            pin: "same".into(),
            warmup: 1000,
            runs: 5,
            pairs: 100,
            key_bits: 1024,
            json: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Bench(#[from] juxta_bench::BenchError),
    #[error(transparent)]
    Peer(#[from] juxta::PeerError),
    #[error("{0}")]
    Msg(String),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                match cli.command {
                    Cmd::Peer { .. } => "info".into(),
                    _ => "warn".into(),
                }
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Cmd::Peer {
            listen,
            home,
            no_compact,
            no_cbjx,
            key_bits,
        } => multi_thread().block_on(run_peer(listen, home, !no_compact, !no_cbjx, key_bits)),
        Cmd::BenchResponder {
            layer,
            core,
            key_bits,
        } => {
            pingpong::pin_current(core);
            match Layer::parse(&layer) {
                Ok(l) => current_thread()
                    .block_on(pingpong::run_responder(l, key_bits))
                    .map_err(CliError::from),
                Err(e) => Err(e.into()),
            }
        }
        Cmd::Bench { scenario, out } => {
            let (args, default_run) = match scenario {
                Some(BenchCmd::Pingpong(a)) => (a, false),
                None => (PingPongArgs::default(), true),
            };
            run_pingpong(
                args,
                default_run.then(|| out.unwrap_or_else(default_out_dir)),
            )
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("juxta: {e}");
            ExitCode::FAILURE
        }
    }
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn default_out_dir() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from("results").join(secs.to_string())
}

async fn run_peer(
    listen: SocketAddr,
    home: PathBuf,
    compact: bool,
    cbjx: bool,
    key_bits: usize,
) -> Result<(), CliError> {
    let mut cfg = PeerConfig::new(home)
        .listen(listen)
        .compact(compact)
        .cbjx(cbjx);
    cfg.key_bits = key_bits;
    let peer = Peer::start(cfg).await?;
    let mut pings = peer.listen(BENCH_SERVICE, Some("ping"))?;
    println!(
        "peer {} listening on tcp://{}",
        peer.peer_id(),
        peer.local_addr().map(|a| a.to_string()).unwrap_or_default()
    );
    let serve = async {
        let mut back: Option<Messenger> = None;
        while let Some(d) = pings.recv().await {
            let Some(from) = d.from else { continue };
            if back.as_ref().map(|m| m.remote()) != Some(from) {
                back = peer.messenger(&from).ok();
            }
            if let Some(m) = &back {
                let ack = Message::new().with(Element::bytes("bench", "ack", &b"\x01"[..]));
                if let Err(e) = m.send(BENCH_SERVICE, Some("ack"), ack).await {
                    tracing::warn!(error = %e, "ack failed");
                }
            }
        }
    };
    tokio::select! {
        _ = serve => {}
        r = tokio::signal::ctrl_c() => {
            r.map_err(|e| CliError::Msg(format!("waiting for Ctrl-C: {e}")))?;
            tracing::info!("interrupted; stopping");
        }
    }
    Ok(())
}

fn parse_list<T>(
    s: &str,
    f: impl Fn(&str) -> Result<T, juxta_bench::BenchError>,
) -> Result<Vec<T>, CliError> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| f(x).map_err(CliError::from))
        .collect()
}

fn run_pingpong(args: PingPongArgs, out_dir: Option<PathBuf>) -> Result<(), CliError> {
    let layers: Vec<Layer> = parse_list(&args.layers, Layer::parse)?
        .into_iter()
        .filter(|l| *l != Layer::Tcp)
        .collect();
    let sizes: Vec<usize> = parse_list(&args.sizes, |s| {
        s.parse()
            .map_err(|_| juxta_bench::BenchError::BadOption(format!("size {s:?}")))
    })?;
    if sizes.iter().any(|&s| s > (1 << 30)) {
        return Err(CliError::Msg("sizes above 1 GiB are not supported".into()));
    }
    let opts = PingPongOptions {
        layers,
        sizes,
        pin: Pin::parse(&args.pin)?,
        warmup: args.warmup,
        runs: args.runs.max(1),
        pairs: args.pairs.max(1),
        key_bits: args.key_bits,
    };
    let json_path = match (&args.json, &out_dir) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(d)) => Some(d.join("results.json")),
        (None, None) => None,
    };
    if let Some(p) = &json_path {
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                CliError::Msg(format!(
                    "cannot create output directory {}: {e}",
                    dir.display()
                ))
            })?;
        }
    }
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Msg(format!("cannot find the juxta executable: {e}")))?;
    let started = std::time::Instant::now();
    let rows = current_thread().block_on(pingpong::run(&exe, &opts, |line| {
        eprintln!("[{:>6.1}s] {line}", started.elapsed().as_secs_f64())
    }))?;
    println!(
        "{:<16} {:>9} {:>12} {:>11} {:>12} {:>10} {:>9} {:>8}",
        "layer", "size", "rtt_med_us", "rtt_p99_us", "bw_MB_s", "wire_B", "rtt/tcp", "bw/tcp"
    );
    for r in &rows {
        println!(
            "{:<16} {:>9} {:>12.1} {:>11.1} {:>12.1} {:>10} {:>9.2} {:>8.2}",
            r.layer,
            r.size,
            r.rtt_us_median,
            r.rtt_us_p99,
            r.bandwidth_mb_s,
            r.wire_bytes,
            r.rtt_ratio_vs_tcp,
            r.bandwidth_ratio_vs_tcp
        );
    }
    if let Some(p) = json_path {
        let doc = serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "machine": juxta_bench::machine::facts(),
            "options": opts,
            "results": rows,
        });
        std::fs::write(&p, serde_json::to_string_pretty(&doc).expect("json"))
            .map_err(|e| CliError::Msg(format!("cannot write {}: {e}", p.display())))?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}
