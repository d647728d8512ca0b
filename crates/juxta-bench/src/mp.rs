//! The message-passing scenario (de Souza et al., "Evaluation of JXTA and
//! Java for developing message passing parallel programs"): ping-pong of
//! 2 B .. 1 MB between two processes over plain TCP, the Juxta
//! communicator ([`juxta::mp`]) and Open MPI (TCP and shared-memory
//! BTLs); matrix multiplication sequential (Rust, C at -O0 and -O3) and
//! parallel (Juxta, Open MPI); a 1 MB f64 allreduce over 4 ranks.
//!
//! Every process is started the same way: the Juxta and TCP ranks by the
//! `juxta run` launcher ([`juxta::mp::launch`]), the MPI ranks by
//! `mpirun`, both binding rank `r` to core `r` for 2-rank runs
//! (`--bind-to core`) and not binding the oversubscribed 4-rank
//! allreduce. The ranks are the `juxta` binary itself (`juxta mp-rank`)
//! or the C programs of `crates/juxta-bench/mpi/`, compiled here with
//! `mpicc`/`cc` into a temporary directory.
//!
//! Ping-pong: rank 0 sends `size` bytes, rank 1 sends them back; after a
//! warm-up, `runs x pairs` timed round trips; `rtt_us_median` is their
//! median and `bandwidth_mb_s = 2 * size / median` (bytes carried per
//! round trip, 10^6 B/s).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use juxta::mp::launch::{launch, Bind, LaunchOptions};
use juxta::mp::{Communicator, ReduceOp};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::BenchError;

/// The C ping-pong and allreduce (Open MPI).
pub const MPI_PINGPONG_C: &str = include_str!("../mpi/pingpong.c");
/// The parallel C matrix multiplication (Open MPI).
pub const MPI_MATMUL_C: &str = include_str!("../mpi/matmul_mpi.c");
/// The sequential C matrix multiplication.
pub const SEQ_MATMUL_C: &str = include_str!("../mpi/matmul_seq.c");
/// Data and kernel shared by the C matrix multiplications.
pub const MATMUL_COMMON_H: &str = include_str!("../mpi/matmul_common.h");

/// Layers `juxta bench mp` can measure through the common ping-pong
/// harness beside the ranks (tcp is always there, as the harness's bound).
pub const LAYERS: [crate::layers::Layer; 7] = [
    crate::layers::Layer::Tcp,
    crate::layers::Layer::UnicastPipe,
    crate::layers::Layer::Socket,
    crate::layers::Layer::Udp,
    crate::layers::Layer::Endpoint,
    crate::layers::Layer::BidiPipe,
    crate::layers::Layer::SecurePipe,
];

/// The study's message sizes: small, medium and large.
pub const DE_SOUZA_SIZES: [usize; 16] = [
    2, 200, 400, 600, 800, 1000, 20_000, 40_000, 60_000, 80_000, 100_000, 200_000, 400_000,
    600_000, 800_000, 1_000_000,
];

/// What one `juxta mp-rank` process does.
#[derive(Debug, Clone, clap::Args)]
pub struct RankArgs {
    /// hello, pingpong, tcp-pingpong, matmul, matmul-seq, allreduce.
    pub mode: String,
    /// Ping-pong sizes (comma-separated bytes).
    #[arg(long, default_value = "2,1000")]
    pub sizes: String,
    /// Warm-up round trips per size (capped at 256 MiB of payload).
    #[arg(long, default_value_t = 200)]
    pub warmup: usize,
    /// Timed runs per size.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Round trips per timed run.
    #[arg(long, default_value_t = 100)]
    pub pairs: usize,
    /// Matrix order.
    #[arg(long, default_value_t = 512)]
    pub n: usize,
    /// Allreduce: f64 elements.
    #[arg(long, default_value_t = 131_072)]
    pub doubles: usize,
    /// Allreduce: timed repetitions.
    #[arg(long, default_value_t = 20)]
    pub reps: usize,
    /// Where rank 0 writes its result lines (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn mp_err(e: juxta::mp::MpError) -> BenchError {
    BenchError::Responder {
        layer: "mp".into(),
        reason: e.to_string(),
    }
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        what: what.to_string(),
        source,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::util::percentile(v, 0.5)
}

/// Runs one rank of a benchmark job (`juxta mp-rank MODE`), in a
/// single-threaded runtime as an MPI process is.
pub fn rank_main(a: &RankArgs) -> Result<(), BenchError> {
    // `rank_main` runs the work as a task of a current-thread runtime:
    // a receive there sees a message in the scheduler turn its
    // connection's reader queued it, not one turn later.
    let args = a.clone();
    let lines = juxta::mp::rank_main(async move { rank_run(&args).await })
        .map_err(io("tokio runtime"))??;
    if lines.is_empty() {
        return Ok(());
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    match &a.out {
        Some(p) => std::fs::write(p, text).map_err(io("writing rank results")),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

async fn rank_run(a: &RankArgs) -> Result<Vec<String>, BenchError> {
    let sizes = crate::util::parse_sizes(&a.sizes)?;
    match a.mode.as_str() {
        "hello" => {
            let c = Communicator::from_env().await.map_err(mp_err)?;
            let mut x = [c.rank() as i64];
            c.allreduce(&mut x, ReduceOp::Sum).await.map_err(mp_err)?;
            c.barrier().await.map_err(mp_err)?;
            println!("rank {} of {}: sum {}", c.rank(), c.size(), x[0]);
            Ok(vec![])
        }
        "fail" => {
            // For the launcher's tests: rank 1 fails at once, the others
            // wait for a message that never comes.
            let c = Communicator::from_env().await.map_err(mp_err)?;
            if c.rank() == 1 {
                std::process::exit(3);
            }
            println!("rank {} waiting", c.rank());
            let mut b = [0u8; 1];
            c.recv(1, 0, &mut b).await.map_err(mp_err)?;
            Ok(vec![])
        }
        "pingpong" => {
            let c = Communicator::from_env().await.map_err(mp_err)?;
            if c.size() != 2 {
                return Err(BenchError::BadOption("pingpong needs 2 ranks".into()));
            }
            let mut out = Vec::new();
            for &size in &sizes {
                let data = Bytes::from(vec![0u8; size]);
                let mut t = Vec::new();
                for i in 0..warmup(a.warmup, size) + a.runs * a.pairs {
                    let t0 = Instant::now();
                    if c.rank() == 0 {
                        c.send_bytes(1, 0, data.clone()).await.map_err(mp_err)?;
                        c.recv_bytes(1, 0).await.map_err(mp_err)?;
                    } else {
                        let (b, _) = c.recv_bytes(0, 0).await.map_err(mp_err)?;
                        c.send_bytes(0, 0, b).await.map_err(mp_err)?;
                    }
                    if i >= warmup(a.warmup, size) {
                        t.push(t0.elapsed().as_secs_f64() * 1e6);
                    }
                }
                out.push(format!("pingpong {size} {:.3}", median(&mut t)));
            }
            Ok(if c.rank() == 0 { out } else { vec![] })
        }
        "tcp-pingpong" => tcp_pingpong(a, &sizes).await,
        "matmul-seq" => {
            let n = a.n;
            let (ma, mb) = fill(n);
            let mut mc = vec![0.0; n * n];
            let t0 = Instant::now();
            multiply(&ma, &mb, &mut mc, n, n);
            let s = t0.elapsed().as_secs_f64();
            Ok(vec![format!("matmul {n} {s:.6} {:.6e}", mc.iter().sum::<f64>())])
        }
        "matmul" => matmul(a.n).await,
        "allreduce" => {
            let c = Communicator::from_env().await.map_err(mp_err)?;
            let x: Vec<f64> = (0..a.doubles)
                .map(|i| (c.rank() + i % 7) as f64)
                .collect();
            let mut t = Vec::new();
            for i in 0..3 + a.reps {
                let mut y = x.clone();
                c.barrier().await.map_err(mp_err)?;
                let t0 = Instant::now();
                c.allreduce(&mut y, ReduceOp::Sum).await.map_err(mp_err)?;
                if i >= 3 {
                    t.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
            let m = median(&mut t);
            Ok(if c.rank() == 0 {
                vec![format!("allreduce {} {m:.3}", a.doubles * 8)]
            } else {
                vec![]
            })
        }
        other => Err(BenchError::BadOption(format!(
            "mp-rank mode {other:?} (known: hello, pingpong, tcp-pingpong, matmul, matmul-seq, allreduce)"
        ))),
    }
}

fn warmup(w: usize, size: usize) -> usize {
    w.min((256 << 20) / size.max(1)).max(10)
}

/// The baseline: the same ping-pong over one plain TCP connection
/// (length-prefixed frames), rank 0 listening on the job's seed.
async fn tcp_pingpong(a: &RankArgs, sizes: &[usize]) -> Result<Vec<String>, BenchError> {
    let env = |v: &str| std::env::var(v).unwrap_or_default();
    let rank: usize = env(juxta::mp::ENV_RANK).parse().unwrap_or(usize::MAX);
    let seed: std::net::SocketAddr = env(juxta::mp::ENV_SEED).parse().map_err(|_| {
        BenchError::BadOption("tcp-pingpong: no seed (run it under juxta run)".into())
    })?;
    let mut s = if rank == 0 {
        let l = tokio::net::TcpListener::bind(seed)
            .await
            .map_err(io("binding the seed"))?;
        l.accept().await.map_err(io("accept"))?.0
    } else {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match tokio::net::TcpStream::connect(seed).await {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => return Err(io("connecting to rank 0")(e)),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    s.set_nodelay(true).map_err(io("nodelay"))?;
    let mut out = Vec::new();
    for &size in sizes {
        let mut buf = vec![0u8; size + 4];
        buf[..4].copy_from_slice(&(size as u32).to_le_bytes());
        let mut t = Vec::new();
        for i in 0..warmup(a.warmup, size) + a.runs * a.pairs {
            let t0 = Instant::now();
            if rank == 0 {
                s.write_all(&buf).await.map_err(io("tcp write"))?;
                s.read_exact(&mut buf).await.map_err(io("tcp read"))?;
            } else {
                s.read_exact(&mut buf).await.map_err(io("tcp read"))?;
                s.write_all(&buf).await.map_err(io("tcp write"))?;
            }
            if i >= warmup(a.warmup, size) {
                t.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        out.push(format!("pingpong {size} {:.3}", median(&mut t)));
    }
    Ok(if rank == 0 { out } else { vec![] })
}

/// The matrices: the same values as `mpi/matmul_common.h`.
pub fn fill(n: usize) -> (Vec<f64>, Vec<f64>) {
    let a = (0..n * n)
        .map(|i| ((i * 7 + 3) % 17) as f64 / 16.0)
        .collect();
    let b = (0..n * n)
        .map(|i| ((i * 5 + 1) % 13) as f64 / 12.0)
        .collect();
    (a, b)
}

/// `rows x n` block of A times B added into C, i-k-j order (as the C).
pub fn multiply(a: &[f64], b: &[f64], c: &mut [f64], rows: usize, n: usize) {
    for i in 0..rows {
        let ci = &mut c[i * n..(i + 1) * n];
        for k in 0..n {
            let aik = a[i * n + k];
            let bk = &b[k * n..(k + 1) * n];
            for (x, y) in ci.iter_mut().zip(bk) {
                *x += aik * y;
            }
        }
    }
}

/// Parallel matmul on the communicator: row blocks of A scattered, B
/// broadcast (in pieces of at most 16 MiB), C gathered at rank 0; timed
/// at rank 0 from the scatter to the end of the gather.
async fn matmul(n: usize) -> Result<Vec<String>, BenchError> {
    let c = Communicator::from_env().await.map_err(mp_err)?;
    let p = c.size();
    if n == 0 || !n.is_multiple_of(p) {
        return Err(BenchError::BadOption(format!(
            "matmul: n = {n} is not a positive multiple of {p} ranks"
        )));
    }
    let rows = n / p;
    let (a, mut b) = if c.rank() == 0 {
        fill(n)
    } else {
        (Vec::new(), vec![0.0; n * n])
    };
    c.barrier().await.map_err(mp_err)?;
    let t0 = Instant::now();
    let my_a = c
        .scatter((c.rank() == 0).then_some(&a[..]), rows * n, 0)
        .await
        .map_err(mp_err)?;
    let piece = ((16 << 20) / (8 * n)).max(1) * n;
    for chunk in b.chunks_mut(piece) {
        c.bcast(chunk, 0).await.map_err(mp_err)?;
    }
    let mut my_c = vec![0.0; rows * n];
    multiply(&my_a, &b, &mut my_c, rows, n);
    let all = c.gather(&my_c, 0).await.map_err(mp_err)?;
    let s = t0.elapsed().as_secs_f64();
    Ok(match all {
        Some(m) => vec![format!("matmul {n} {s:.6} {:.6e}", m.iter().sum::<f64>())],
        None => vec![],
    })
}

/// Options of `juxta bench mp`.
#[derive(Debug, Clone, Serialize)]
pub struct MpOptions {
    /// Ping-pong sizes.
    pub sizes: Vec<usize>,
    /// Warm-up round trips per size.
    pub warmup: usize,
    /// Timed runs per size.
    pub runs: usize,
    /// Round trips per run.
    pub pairs: usize,
    /// Matrix order (0: no matmul).
    pub matmul_n: usize,
    /// Ranks of the parallel matmul.
    pub matmul_ranks: usize,
    /// Sequential C at -O0 too (the slowest run).
    pub c_o0: bool,
    /// Allreduce f64 elements (0: no allreduce).
    pub allreduce_doubles: usize,
    /// Allreduce ranks.
    pub allreduce_ranks: usize,
    /// Bind 2-rank runs to cores 0 and 1 (and sequential runs to core 0).
    pub bind: bool,
    /// Juxta layers (and `udp`) measured by the common ping-pong harness
    /// at the same sizes, beside the ranks' echo ping-pong: the study's
    /// pipes, sockets and UDP routines. Their reply is a 1-byte ack (the
    /// rows say so in `reply`).
    pub layers: Vec<crate::layers::Layer>,
    /// JXSE 2.7's pipes and sockets through the harness (as shipped, CBJX
    /// on), beside the layers: the unicast pipe (unreliable), the bidi pipe
    /// with reliability on (`bidi-pipe-reliable`), the socket (stream mode,
    /// reliable) and the unreliable socket (`socket-unreliable`).
    pub jxse: bool,
    /// The `juxta` binary the ranks run (`juxta mp-rank`); `None`: this
    /// executable.
    #[serde(skip)]
    pub exe: Option<PathBuf>,
}

impl Default for MpOptions {
    fn default() -> Self {
        MpOptions {
            sizes: DE_SOUZA_SIZES.to_vec(),
            warmup: 200,
            runs: 5,
            pairs: 100,
            matmul_n: 2400,
            matmul_ranks: 2,
            c_o0: true,
            allreduce_doubles: 131_072,
            allreduce_ranks: 4,
            bind: true,
            layers: vec![
                crate::layers::Layer::UnicastPipe,
                crate::layers::Layer::Socket,
                crate::layers::Layer::Udp,
            ],
            jxse: false,
            exe: None,
        }
    }
}

/// A ping-pong row.
#[derive(Debug, Clone, Serialize)]
pub struct MpPingPongRow {
    /// `mp-pingpong`.
    pub scenario: &'static str,
    /// `tcp`, `juxta`, `mpi`, `udp` or `jxse`.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// `tcp`, `mp`, the MPI BTL (`tcp`, `sm`), or a harness layer
    /// (`unicast-pipe`, `socket`, `udp`; for JXSE also
    /// `bidi-pipe-reliable` and `socket-unreliable`).
    pub layer: &'static str,
    /// `echo` (the message comes back: the ranks' ping-pong, as the study
    /// ran it) or `ack` (a 1-byte reply: the common ping-pong harness,
    /// [`crate::pingpong`]).
    pub reply: &'static str,
    /// Payload bytes.
    pub size: usize,
    /// Median round trip (µs).
    pub rtt_us_median: f64,
    /// Payload bytes carried per round trip over the median RTT (10^6
    /// B/s): 2 * size for an echo, size for an ack.
    pub bandwidth_mb_s: f64,
    /// Median RTT over the MPI TCP BTL's for this size, when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_ratio_vs_mpi_tcp: Option<f64>,
    /// Bandwidth over the MPI TCP BTL's, when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_ratio_vs_mpi_tcp: Option<f64>,
    /// JXSE rows: whether the layer delivers reliably (retransmits what is
    /// lost, [`crate::jxse::reliable`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reliable: Option<bool>,
}

/// A matrix multiplication row.
#[derive(Debug, Clone, Serialize)]
pub struct MatmulRow {
    /// `matmul`.
    pub scenario: &'static str,
    /// rust-seq, c-O0, c-O3, juxta, mpi.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// Processes.
    pub ranks: usize,
    /// Matrix order.
    pub n: usize,
    /// Wall time (s) of the multiplication (parallel: scatter to gather).
    pub seconds: f64,
    /// rust-seq seconds over these.
    pub speedup: f64,
    /// Sum of C (the same for every implementation).
    pub checksum: f64,
}

/// An allreduce row.
#[derive(Debug, Clone, Serialize)]
pub struct AllreduceRow {
    /// `mp-allreduce`.
    pub scenario: &'static str,
    /// juxta or mpi.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// Ranks.
    pub ranks: usize,
    /// Bytes per rank.
    pub bytes: usize,
    /// Median time of one allreduce at rank 0 (µs).
    pub us_median: f64,
}

/// Everything one `juxta bench mp` measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MpResults {
    /// Ping-pong rows.
    pub pingpong: Vec<MpPingPongRow>,
    /// Matmul rows.
    pub matmul: Vec<MatmulRow>,
    /// Allreduce rows.
    pub allreduce: Vec<AllreduceRow>,
    /// What was not measured, and why.
    pub notes: Vec<String>,
}

impl MpResults {
    /// Every row, as JSON values.
    pub fn rows(&self) -> Vec<serde_json::Value> {
        let mut v: Vec<serde_json::Value> = Vec::new();
        v.extend(
            self.pingpong
                .iter()
                .map(|r| serde_json::to_value(r).expect("json")),
        );
        v.extend(
            self.matmul
                .iter()
                .map(|r| serde_json::to_value(r).expect("json")),
        );
        v.extend(
            self.allreduce
                .iter()
                .map(|r| serde_json::to_value(r).expect("json")),
        );
        v
    }
}

/// Result lines (`KIND A B [C]`) parsed as numbers.
fn parse_lines(text: &str, kind: &str) -> Vec<Vec<f64>> {
    text.lines()
        .map(|l| {
            l.trim_start_matches(|c: char| c == '[' || c.is_ascii_digit() || c == ']' || c == ' ')
        })
        .filter_map(|l| l.strip_prefix(kind))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .collect()
}

fn exe(given: &Option<PathBuf>) -> Result<OsString, BenchError> {
    match given {
        Some(p) => Ok(p.clone().into_os_string()),
        None => Ok(std::env::current_exe()
            .map_err(io("finding the juxta binary"))?
            .into_os_string()),
    }
}

/// Runs `juxta mp-rank MODE ...` as a job of `ranks` and returns rank 0's
/// lines.
async fn juxta_job(
    juxta: &Option<PathBuf>,
    ranks: usize,
    bind: bool,
    mode: &str,
    extra: &[String],
    dir: &Path,
) -> Result<String, BenchError> {
    let out = dir.join(format!("{mode}-{ranks}.txt"));
    let mut command = vec![exe(juxta)?, "mp-rank".into(), mode.into()];
    command.extend(extra.iter().map(OsString::from));
    command.push("--out".into());
    command.push(out.clone().into_os_string());
    launch(&LaunchOptions {
        ranks,
        command,
        bind: if bind { Bind::Core } else { Bind::None },
        timeout: Some(Duration::from_secs(3600)),
        op_timeout: None,
        job: None,
    })
    .await
    .map_err(|e| BenchError::Responder {
        layer: mode.into(),
        reason: e.to_string(),
    })?;
    std::fs::read_to_string(&out).map_err(io("reading rank 0's results"))
}

/// Runs a command, returning its standard output (error if it fails).
async fn run_cmd(what: &str, cmd: &mut tokio::process::Command) -> Result<String, BenchError> {
    let o = cmd
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(io(what))?;
    if !o.status.success() {
        return Err(BenchError::Responder {
            layer: what.into(),
            reason: format!(
                "{}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn which(p: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(p))
            .find(|f| f.is_file())
    })
}

/// The compiled C programs.
struct CPrograms {
    pingpong: Option<PathBuf>,
    matmul_mpi: Option<PathBuf>,
    seq_o0: PathBuf,
    seq_o3: PathBuf,
}

async fn compile(dir: &Path, mpi: bool) -> Result<CPrograms, BenchError> {
    for (name, text) in [
        ("pingpong.c", MPI_PINGPONG_C),
        ("matmul_mpi.c", MPI_MATMUL_C),
        ("matmul_seq.c", SEQ_MATMUL_C),
        ("matmul_common.h", MATMUL_COMMON_H),
    ] {
        std::fs::write(dir.join(name), text).map_err(io("writing the C sources"))?;
    }
    let cc = |compiler: &str, opt: &str, src: &str, out: &str| {
        let mut c = tokio::process::Command::new(compiler);
        c.current_dir(dir).args([opt, "-o", out, src]);
        c
    };
    let cc_name = if which("cc").is_some() { "cc" } else { "gcc" };
    run_cmd("cc -O0", &mut cc(cc_name, "-O0", "matmul_seq.c", "seq_O0")).await?;
    run_cmd("cc -O3", &mut cc(cc_name, "-O3", "matmul_seq.c", "seq_O3")).await?;
    let (mut pingpong, mut matmul_mpi) = (None, None);
    if mpi {
        run_cmd(
            "mpicc",
            &mut cc("mpicc", "-O3", "pingpong.c", "mp_pingpong"),
        )
        .await?;
        run_cmd(
            "mpicc",
            &mut cc("mpicc", "-O3", "matmul_mpi.c", "matmul_mpi"),
        )
        .await?;
        pingpong = Some(dir.join("mp_pingpong"));
        matmul_mpi = Some(dir.join("matmul_mpi"));
    }
    Ok(CPrograms {
        pingpong,
        matmul_mpi,
        seq_o0: dir.join("seq_O0"),
        seq_o3: dir.join("seq_O3"),
    })
}

/// `mpirun -np N [binding] [BTL] PROGRAM ARGS`, allowed as root, on
/// loopback, its session directory in the program's (temporary) directory.
fn mpirun(
    np: usize,
    bind: bool,
    btl: &str,
    prog: &Path,
    args: &[String],
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("mpirun");
    if let Some(dir) = prog.parent() {
        c.envs(crate::stacks::mpi_session_env(dir));
    }
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg("-np")
        .arg(np.to_string())
        .args(if bind {
            ["--bind-to", "core"]
        } else {
            ["--bind-to", "none"]
        })
        .args(["--oversubscribe", "--mca", "btl", btl])
        .args([
            "--mca",
            "btl_tcp_if_include",
            "lo",
            "--mca",
            "oob_tcp_if_include",
            "lo",
        ])
        .arg(prog)
        .args(args);
    c
}

/// Runs the scenario; `progress` gets a line per step.
pub async fn run(
    host: &crate::layers::Host,
    opts: &MpOptions,
    mut progress: impl FnMut(&str),
) -> Result<MpResults, BenchError> {
    let dir = tempfile::Builder::new()
        .prefix("juxta-bench-mp-")
        .tempdir()
        .map_err(io("temporary directory"))?;
    let mut res = MpResults::default();
    let mpi = which("mpirun").is_some() && which("mpicc").is_some();
    if !mpi {
        let note = "skipped: Open MPI rows (mpirun/mpicc not installed: apt-get install openmpi-bin libopenmpi-dev)";
        eprintln!("{note}");
        res.notes.push(note.into());
    }
    progress("compiling the C programs");
    let c = compile(dir.path(), mpi).await?;
    let sizes = opts
        .sizes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let pp_args = vec![
        "--sizes".to_string(),
        sizes,
        "--warmup".into(),
        opts.warmup.to_string(),
        "--runs".into(),
        opts.runs.to_string(),
        "--pairs".into(),
        opts.pairs.to_string(),
    ];
    let mut pp: Vec<(&'static str, &'static str, Vec<Vec<f64>>)> = Vec::new();
    if !opts.sizes.is_empty() {
        progress("ping-pong: tcp");
        let t = juxta_job(
            &opts.exe,
            2,
            opts.bind,
            "tcp-pingpong",
            &pp_args,
            dir.path(),
        )
        .await?;
        pp.push(("tcp", "tcp", parse_lines(&t, "pingpong")));
        progress("ping-pong: juxta communicator");
        let t = juxta_job(&opts.exe, 2, opts.bind, "pingpong", &pp_args, dir.path()).await?;
        pp.push(("juxta", "mp", parse_lines(&t, "pingpong")));
        if let Some(prog) = &c.pingpong {
            let args: Vec<String> = [
                "pingpong".to_string(),
                opts.warmup.to_string(),
                opts.runs.to_string(),
                opts.pairs.to_string(),
            ]
            .into_iter()
            .chain(opts.sizes.iter().map(|s| s.to_string()))
            .collect();
            for (btl, layer) in [("tcp,self", "tcp"), ("vader,self", "sm")] {
                progress(&format!("ping-pong: Open MPI {layer}"));
                let t = run_cmd("mpirun", &mut mpirun(2, opts.bind, btl, prog, &args)).await?;
                pp.push(("mpi", layer, parse_lines(&t, "pingpong")));
            }
        }
    }
    let mpi_tcp: Vec<(usize, f64)> = pp
        .iter()
        .find(|(i, l, _)| *i == "mpi" && *l == "tcp")
        .map(|(_, _, v)| {
            v.iter()
                .filter(|x| x.len() >= 2)
                .map(|x| (x[0] as usize, x[1]))
                .collect()
        })
        .unwrap_or_default();
    let mut acked: Vec<(&'static str, &'static str, usize, f64)> = Vec::new();
    if !opts.sizes.is_empty() && (!opts.layers.is_empty() || opts.jxse) {
        harness_rows(host, opts, &mut acked, &mut res.notes, &mut progress).await?;
    }
    let echoed = pp.iter().flat_map(|(imp, layer, lines)| {
        lines
            .iter()
            .filter(|x| x.len() >= 2)
            .map(move |x| (*imp, *layer, x[0] as usize, x[1]))
    });
    for (imp, layer, size, rtt, echo) in echoed
        .map(|(i, l, s, r)| (i, l, s, r, true))
        .chain(acked.into_iter().map(|(i, l, s, r)| (i, l, s, r, false)))
    {
        let carried = if echo { 2.0 } else { 1.0 } * size as f64;
        let bw = carried / rtt;
        let base = mpi_tcp.iter().find(|(s, _)| *s == size).map(|p| p.1);
        res.pingpong.push(MpPingPongRow {
            scenario: "mp-pingpong",
            implementation: imp,
            layer,
            reply: if echo { "echo" } else { "ack" },
            size,
            rtt_us_median: rtt,
            bandwidth_mb_s: bw,
            rtt_ratio_vs_mpi_tcp: base.map(|b| rtt / b),
            bandwidth_ratio_vs_mpi_tcp: base.map(|b| bw / (2.0 * size as f64 / b)),
            reliable: if imp.starts_with("jxse") {
                crate::layers::Layer::parse(layer)
                    .ok()
                    .and_then(crate::jxse::reliable)
            } else {
                None
            },
        });
    }
    if opts.matmul_n > 0 {
        let n = opts.matmul_n;
        let p = opts.matmul_ranks;
        let na = ["--n".to_string(), n.to_string()];
        let mut mm: Vec<(&'static str, usize, Vec<f64>)> = Vec::new();
        progress(&format!("matmul n={n}: rust-seq"));
        let t = juxta_job(&opts.exe, 1, opts.bind, "matmul-seq", &na, dir.path()).await?;
        mm.extend(
            parse_lines(&t, "matmul")
                .into_iter()
                .map(|v| ("rust-seq", 1, v)),
        );
        let pinned = |prog: &Path| {
            let mut cmd = if opts.bind {
                let mut c = tokio::process::Command::new("taskset");
                c.args(["-c", "0"]).arg(prog);
                c
            } else {
                tokio::process::Command::new(prog)
            };
            cmd.arg(n.to_string());
            cmd
        };
        progress(&format!("matmul n={n}: c-O3"));
        let t = run_cmd("matmul c-O3", &mut pinned(&c.seq_o3)).await?;
        mm.extend(
            parse_lines(&t, "matmul")
                .into_iter()
                .map(|v| ("c-O3", 1, v)),
        );
        if opts.c_o0 {
            progress(&format!("matmul n={n}: c-O0"));
            let t = run_cmd("matmul c-O0", &mut pinned(&c.seq_o0)).await?;
            mm.extend(
                parse_lines(&t, "matmul")
                    .into_iter()
                    .map(|v| ("c-O0", 1, v)),
            );
        }
        progress(&format!("matmul n={n}: juxta, {p} ranks"));
        let t = juxta_job(&opts.exe, p, opts.bind, "matmul", &na, dir.path()).await?;
        mm.extend(
            parse_lines(&t, "matmul")
                .into_iter()
                .map(|v| ("juxta", p, v)),
        );
        if let Some(prog) = &c.matmul_mpi {
            progress(&format!("matmul n={n}: Open MPI, {p} ranks"));
            let t = run_cmd(
                "mpirun matmul",
                &mut mpirun(p, opts.bind, "vader,self,tcp", prog, &[n.to_string()]),
            )
            .await?;
            mm.extend(parse_lines(&t, "matmul").into_iter().map(|v| ("mpi", p, v)));
        }
        let seq = mm
            .iter()
            .find(|m| m.0 == "rust-seq")
            .and_then(|m| m.2.get(1).copied());
        for (imp, ranks, v) in mm {
            if v.len() < 3 {
                continue;
            }
            res.matmul.push(MatmulRow {
                scenario: "matmul",
                implementation: imp,
                ranks,
                n,
                seconds: v[1],
                speedup: seq.map(|s| s / v[1]).unwrap_or(0.0),
                checksum: v[2],
            });
        }
    }
    if opts.allreduce_doubles > 0 {
        let p = opts.allreduce_ranks;
        let args = [
            "--doubles".to_string(),
            opts.allreduce_doubles.to_string(),
            "--reps".into(),
            "20".into(),
        ];
        // More ranks than cores: neither side binds.
        let bind = opts.bind && p <= 2;
        progress(&format!("allreduce: juxta, {p} ranks"));
        let t = juxta_job(&opts.exe, p, bind, "allreduce", &args, dir.path()).await?;
        let mut ar: Vec<(&'static str, Vec<f64>)> = parse_lines(&t, "allreduce")
            .into_iter()
            .map(|v| ("juxta", v))
            .collect();
        if let Some(prog) = &c.pingpong {
            progress(&format!("allreduce: Open MPI, {p} ranks"));
            let a = [
                "allreduce".to_string(),
                opts.allreduce_doubles.to_string(),
                "20".into(),
            ];
            let t = run_cmd(
                "mpirun allreduce",
                &mut mpirun(p, bind, "vader,self,tcp", prog, &a),
            )
            .await?;
            ar.extend(parse_lines(&t, "allreduce").into_iter().map(|v| ("mpi", v)));
        }
        for (imp, v) in ar {
            if v.len() >= 2 {
                res.allreduce.push(AllreduceRow {
                    scenario: "mp-allreduce",
                    implementation: imp,
                    ranks: p,
                    bytes: v[0] as usize,
                    us_median: v[1],
                });
            }
        }
    }
    Ok(res)
}

/// The study's pipe, socket and UDP routines through the common ping-pong
/// harness at the job's sizes (Juxta's layers, then JXSE's as shipped),
/// placed as the ranks are (client on core 0, responder on core 1). Their
/// own `tcp` lanes stay out of the rows: the ranks' tcp echo is the
/// study's socket. Returns (impl, layer, size, median RTT) per row.
async fn harness_rows(
    host: &crate::layers::Host,
    opts: &MpOptions,
    out: &mut Vec<(&'static str, &'static str, usize, f64)>,
    notes: &mut Vec<String>,
    progress: &mut impl FnMut(&str),
) -> Result<(), BenchError> {
    use crate::pingpong::PingPongOptions;
    use crate::util::Pin;
    let pin = if opts.bind { Pin::Split } else { Pin::None };
    let keep = |r: &crate::pingpong::PingPongRow| r.implementation != "tcp";
    if !opts.layers.is_empty() {
        progress("ping-pong: juxta layers through the harness");
        let po = PingPongOptions {
            layers: opts.layers.clone(),
            sizes: opts.sizes.clone(),
            receivers: vec![1],
            pin,
            warmup: opts.warmup,
            runs: opts.runs,
            pairs: opts.pairs,
            ..PingPongOptions::default()
        };
        let rows = crate::pingpong::run(host, &po, |m| progress(m)).await?;
        out.extend(
            rows.iter()
                .filter(|r| keep(r))
                .map(|r| (r.implementation, r.layer, r.size, r.rtt_us_median)),
        );
    }
    if opts.jxse {
        use crate::layers::Layer;
        let j = crate::jxse::JxseOptions {
            layers: vec![
                Layer::UnicastPipe,
                Layer::BidiPipeReliable,
                Layer::Socket,
                Layer::SocketUnreliable,
            ],
            sizes: opts.sizes.clone(),
            pin,
            warmup: opts.warmup,
            runs: opts.runs,
            pairs: opts.pairs,
            cbjx: true,
            ..Default::default()
        };
        let run = crate::jxse::run_pingpong(host, &j, &mut |m| progress(m)).await;
        out.extend(
            run.rows
                .iter()
                .filter(|r| keep(r))
                .map(|r| (r.implementation, r.layer, r.size, r.rtt_us_median)),
        );
        if let Some(e) = run.error {
            notes.push(format!("the JXSE side stopped early: {e}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_parse_with_and_without_rank_prefixes() {
        let t = "pingpong 2 14.5\n[0] pingpong 1000 15.25\nnoise\nmatmul 8 0.5 1.0e3\n";
        assert_eq!(
            parse_lines(t, "pingpong"),
            vec![vec![2.0, 14.5], vec![1000.0, 15.25]]
        );
        assert_eq!(parse_lines(t, "matmul"), vec![vec![8.0, 0.5, 1000.0]]);
    }

    #[test]
    fn multiply_matches_a_naive_product_and_blocks_compose() {
        let n = 6;
        let (a, b) = fill(n);
        let mut c = vec![0.0; n * n];
        multiply(&a, &b, &mut c, n, n);
        for i in 0..n {
            for j in 0..n {
                let want: f64 = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
                assert!((c[i * n + j] - want).abs() < 1e-12);
            }
        }
        // Row blocks computed apart give the same rows.
        let mut top = vec![0.0; 3 * n];
        multiply(&a[3 * n..], &b, &mut top, 3, n);
        assert_eq!(&top[..], &c[3 * n..]);
    }
}
