//! The plain-TCP baseline of `juxta bench leases --query-rate`: a process
//! that forwards the same number of queries, of the same size, over the
//! same number of loopback connections, and does nothing else.
//!
//! Why: the rendezvous' cost per discovery query (and the highest rate it
//! takes with p99 ≤ 5 ms) means little without the floor of this machine
//! in the same run: what reading a query from one connection and writing
//! it to another costs here (system calls, loopback delivery, the tokio
//! runtime), with the load generator sharing the same cores. The
//! forwarder (`juxta query-forward`, a process of its own, on the same
//! multi-threaded runtime as `rdv-serve`) does exactly that per query:
//! one read (shared by what arrives together), one write to the
//! destination's connection. The destination is named in the frame, so no
//! index, no parsing and no resolver: what the rendezvous does beyond this
//! floor is its protocol work.
//!
//! Wire (between the bench's raw clients and the forwarder only):
//! - a client opens with its index, 4 bytes big-endian; the forwarder
//!   answers one byte, [`HELLO_ACK`], once that index is its (so no frame
//!   sent to it later is dropped for want of its registration);
//! - then frames: `len` (4 bytes, big-endian, at most [`MAX_FRAME`]), then
//!   `len` bytes: the destination client's index (4 bytes, `u32::MAX`:
//!   nobody, as a query for a name nobody published), the query number
//!   (4 bytes), then padding to the size of a real query document.
//!
//! The forwarder still treats its input as hostile: a frame longer than
//! [`MAX_FRAME`], an index beyond its connection bound or one already
//! taken closes that connection only; frames for an index nobody holds
//! are counted and dropped (the real rendezvous drops such a query too).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpSocket};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch, Mutex};

use crate::lease_queries::{QueryOrder, QueryTable};
use crate::BenchError;

/// Longest frame body the forwarder takes (a query is a few KB).
pub const MAX_FRAME: usize = 64 * 1024;
/// Destination of a frame for nobody.
pub const NOBODY: u32 = u32::MAX;
/// Bytes of a frame body before its padding (destination, query number).
pub const FRAME_HEAD: usize = 8;
/// The forwarder's answer to a hello it took.
pub const HELLO_ACK: u8 = b'K';
/// Receive buffer reserved per connection.
const RX_RESERVE: usize = 8 * 1024;

/// What the forwarder counted.
#[derive(Debug, Default)]
pub struct ForwardStats {
    /// Frames written to their destination.
    pub forwarded: AtomicU64,
    /// Frames for nobody, or for an index no connection holds.
    pub dropped: AtomicU64,
    /// Connections closed for a bad hello or frame, or refused at the bound.
    pub refused: AtomicU64,
}

type Writers = Arc<RwLock<HashMap<u32, Arc<Mutex<OwnedWriteHalf>>>>>;

/// Serves until `stop` turns true: accepts connections on `listener`, at
/// most `max_connections`, and forwards their frames. `ready` gets the
/// address once listening.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let (_tx, stop) = tokio::sync::watch::channel(false);
/// let stats = std::sync::Arc::new(juxta_bench::query_forward::ForwardStats::default());
/// juxta_bench::query_forward::serve(l, 1024, stats, stop).await;
/// # Ok(()) }
/// ```
pub async fn serve(
    listener: TcpListener,
    max_connections: usize,
    stats: Arc<ForwardStats>,
    mut stop: watch::Receiver<bool>,
) {
    let writers: Writers = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            a = listener.accept() => {
                let Ok((s, _)) = a else { continue };
                let _ = s.set_nodelay(true);
                tasks.spawn(connection(s, max_connections, writers.clone(), stats.clone()));
                // Ended connections' results, so the set stays bounded.
                while tasks.try_join_next().is_some() {}
            }
            _ = stop.changed() => break,
        }
    }
    tasks.abort_all();
}

/// The `juxta query-forward` process: listens on `listen`, prints
/// `READY <addr>`, serves until its standard input closes (the bench
/// holds it; it is also killed by PID at the end of the run).
pub async fn run_process(listen: SocketAddr, max_connections: usize) -> Result<(), BenchError> {
    let l = TcpListener::bind(listen)
        .await
        .map_err(|source| BenchError::Io {
            what: format!("query-forward: binding {listen}"),
            source,
        })?;
    let addr = l.local_addr().map_err(|source| BenchError::Io {
        what: "query-forward: local address".into(),
        source,
    })?;
    let (stop_tx, stop) = watch::channel(false);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut sink = [0u8; 256];
        let mut stdin = std::io::stdin().lock();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = stop_tx.send(true);
    });
    println!("READY {addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    serve(l, max_connections, Arc::default(), stop).await;
    Ok(())
}

async fn connection(
    s: tokio::net::TcpStream,
    max_connections: usize,
    writers: Writers,
    stats: Arc<ForwardStats>,
) {
    let (mut rd, wr) = s.into_split();
    let refuse = || {
        stats.refused.fetch_add(1, Ordering::Relaxed);
    };
    let mut hello = [0u8; 4];
    let ok = tokio::time::timeout(Duration::from_secs(10), rd.read_exact(&mut hello)).await;
    if !matches!(ok, Ok(Ok(_))) {
        return refuse();
    }
    let me = u32::from_be_bytes(hello);
    {
        let Ok(mut w) = writers.write() else {
            return refuse();
        };
        if me as usize >= max_connections || w.contains_key(&me) {
            return refuse();
        }
        w.insert(me, Arc::new(Mutex::new(wr)));
    }
    let ack = writers.read().ok().and_then(|w| w.get(&me).cloned());
    if let Some(w) = ack {
        if w.lock().await.write_all(&[HELLO_ACK]).await.is_err() {
            if let Ok(mut w) = writers.write() {
                w.remove(&me);
            }
            return;
        }
    }
    let mut rx = BytesMut::with_capacity(RX_RESERVE);
    'read: loop {
        if rx.capacity() - rx.len() < 1024 {
            rx.reserve(RX_RESERVE);
        }
        match rd.read_buf(&mut rx).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        while rx.len() >= 4 {
            let len = u32::from_be_bytes([rx[0], rx[1], rx[2], rx[3]]) as usize;
            if !(FRAME_HEAD..=MAX_FRAME).contains(&len) {
                refuse();
                break 'read;
            }
            if rx.len() < 4 + len {
                rx.reserve(4 + len - rx.len());
                break;
            }
            let frame = rx.split_to(4 + len).freeze();
            let dest = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            let to = (dest != NOBODY)
                .then(|| writers.read().ok().and_then(|w| w.get(&dest).cloned()))
                .flatten();
            let Some(to) = to else {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if to.lock().await.write_all(&frame).await.is_ok() {
                stats.forwarded.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    if let Ok(mut w) = writers.write() {
        w.remove(&me);
    }
}

/// The destination a query for `name` goes to: the client that published
/// it (`lq-<client>-<k>`), else [`NOBODY`].
///
/// ```
/// use juxta_bench::query_forward::{destination, NOBODY};
/// assert_eq!(destination("lq-17-2"), 17);
/// assert_eq!(destination("ln-5"), NOBODY);
/// assert_eq!(destination("lq-99999999999-0"), NOBODY);
/// ```
pub fn destination(name: &str) -> u32 {
    name.strip_prefix("lq-")
        .and_then(|r| r.split('-').next())
        .and_then(|c| c.parse::<u32>().ok())
        .filter(|&c| c != NOBODY)
        .unwrap_or(NOBODY)
}

/// Appends the frame of query `o` padded to `pad` bytes after its head.
pub(crate) fn put_frame(buf: &mut Vec<u8>, o: &QueryOrder, pad: usize) {
    let len = (FRAME_HEAD + pad).min(MAX_FRAME);
    buf.put_u32(len as u32);
    buf.put_u32(destination(&o.name));
    buf.put_u32(o.seq);
    buf.resize(buf.len() + len - FRAME_HEAD, b'q');
}

/// `juxta query-forward`, started by the bench: its process ID and address.
pub struct ForwardProcess {
    child: Child,
    /// Its address.
    pub addr: SocketAddr,
    /// Its process ID.
    pub pid: u32,
}

impl ForwardProcess {
    /// Starts `<exe> query-forward --listen 127.0.0.1:0 --max-connections N`
    /// and waits for its `READY <addr>` line.
    pub async fn spawn(
        exe: &std::path::Path,
        max_connections: usize,
    ) -> Result<ForwardProcess, BenchError> {
        let bad = |reason: String| BenchError::Responder {
            layer: "query-forward".into(),
            reason,
        };
        let mut child = Command::new(exe)
            .arg("query-forward")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--max-connections")
            .arg(max_connections.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BenchError::Io {
                what: format!("starting {} query-forward", exe.display()),
                source,
            })?;
        let stdout = child.stdout.take().ok_or_else(|| bad("no stdout".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .map_err(|_| bad("no READY line within 30 s".into()))?
            .map_err(|source| BenchError::Io {
                what: "reading query-forward output".into(),
                source,
            })?
            .ok_or_else(|| bad("exited before READY".into()))?;
        let addr = line
            .strip_prefix("READY ")
            .and_then(|a| a.trim().parse().ok())
            .ok_or_else(|| bad(format!("unexpected line {line:?}")))?;
        let pid = child.id().ok_or_else(|| bad("no PID".into()))?;
        Ok(ForwardProcess { child, addr, pid })
    }

    /// Kills it (by its PID, through the child handle) and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// One raw client of the forwarder: connects from `src`, says its index,
/// writes the queries it is handed (what is queued goes out in one write,
/// as the lease clients do) and records those that reach it.
pub(crate) async fn client(
    (index, src, to): (u32, std::net::IpAddr, SocketAddr),
    mut orders: mpsc::Receiver<QueryOrder>,
    (table, pad): (Arc<QueryTable>, usize),
    connected: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(src, 0))?;
    let s = sock.connect(to).await?;
    s.set_nodelay(true)?;
    let (mut rd, mut wr) = s.into_split();
    wr.write_all(&index.to_be_bytes()).await?;
    let mut ack = [0u8; 1];
    rd.read_exact(&mut ack).await?;
    if ack[0] != HELLO_ACK {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "query-forward did not take the hello",
        ));
    }
    connected.fetch_add(1, Ordering::Relaxed);
    let mut rx = BytesMut::with_capacity(RX_RESERVE);
    let mut open = true;
    let mut buf = Vec::new();
    loop {
        if rx.capacity() - rx.len() < 1024 {
            rx.reserve(RX_RESERVE);
        }
        tokio::select! {
            r = rd.read_buf(&mut rx) => {
                if r? == 0 {
                    return Ok(());
                }
                while rx.len() >= 4 + FRAME_HEAD {
                    let len = u32::from_be_bytes([rx[0], rx[1], rx[2], rx[3]]) as usize;
                    if rx.len() < 4 + len {
                        break;
                    }
                    let mut f = rx.split_to(4 + len);
                    f.advance(8);
                    table.arrived(f.get_u32() as i32);
                }
            }
            o = orders.recv(), if open => {
                let Some(o) = o else {
                    open = false;
                    continue;
                };
                buf.clear();
                let mut next = Some(o);
                while let Some(o) = next.take() {
                    table.sent(o.seq);
                    put_frame(&mut buf, &o, pad);
                    if buf.len() < 64 * 1024 {
                        next = orders.try_recv().ok();
                    }
                }
                wr.write_all(&buf).await?;
            }
            _ = stop.changed() => return Ok(()),
        }
    }
}

/// Starts `n` raw clients against `addr` (client `i` from
/// `source(i)`), and waits until all are connected or `within` passed.
/// Returns their order senders and the tasks.
pub(crate) async fn start_clients(
    n: usize,
    addr: SocketAddr,
    source: impl Fn(usize) -> std::net::IpAddr,
    (table, pad): (Arc<QueryTable>, usize),
    stop: watch::Receiver<bool>,
    within: Duration,
) -> Result<
    (
        Vec<Option<mpsc::Sender<QueryOrder>>>,
        tokio::task::JoinSet<std::io::Result<()>>,
    ),
    BenchError,
> {
    let connected = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    let mut orders = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = mpsc::channel(crate::lease_queries::CLIENT_QUEUE);
        orders.push(Some(tx));
        tasks.spawn(client(
            (i as u32, source(i), addr),
            rx,
            (table.clone(), pad),
            connected.clone(),
            stop.clone(),
        ));
    }
    let t = Instant::now();
    while (connected.load(Ordering::Relaxed) as usize) < n {
        if t.elapsed() > within {
            return Err(BenchError::Responder {
                layer: "query-forward".into(),
                reason: format!(
                    "{} of {n} raw clients connected within {within:?}",
                    connected.load(Ordering::Relaxed)
                ),
            });
        }
        if let Some(Ok(Err(e))) = tasks.try_join_next() {
            return Err(BenchError::Io {
                what: "a raw client of query-forward".into(),
                source: e,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((orders, tasks))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn forwarder(max: usize) -> (SocketAddr, Arc<ForwardStats>, watch::Sender<bool>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stats = Arc::new(ForwardStats::default());
        let (tx, rx) = watch::channel(false);
        tokio::spawn(serve(l, max, stats.clone(), rx));
        (addr, stats, tx)
    }

    /// Connects and says `me`; then the forwarder's first byte: the ack,
    /// or `None` when it closed the connection.
    async fn hello(addr: SocketAddr, me: u32) -> (tokio::net::TcpStream, Option<u8>) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(&me.to_be_bytes()).await.unwrap();
        let mut b = [0u8; 1];
        let got = match s.read(&mut b).await {
            Ok(1) => Some(b[0]),
            _ => None,
        };
        (s, got)
    }

    async fn wait(stats: &ForwardStats, f: impl Fn(&ForwardStats) -> bool) {
        let t = Instant::now();
        while !f(stats) {
            assert!(t.elapsed() < Duration::from_secs(20), "{stats:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn frames_reach_the_named_client_and_bad_input_closes_only_its_connection() {
        let (addr, stats, stop) = forwarder(4).await;
        let (mut a, ack) = hello(addr, 0).await;
        assert_eq!(ack, Some(HELLO_ACK));
        let (mut b, ack) = hello(addr, 1).await;
        assert_eq!(ack, Some(HELLO_ACK));
        // A second claim of index 1 and an index beyond the bound: closed.
        assert_eq!(hello(addr, 1).await.1, None);
        assert_eq!(hello(addr, 4).await.1, None);
        let mut eof = [0u8; 1];
        // a -> b, a -> nobody, a -> an index nobody holds.
        let mut buf = Vec::new();
        let q = |seq, name: &str| QueryOrder {
            seq,
            name: name.into(),
        };
        put_frame(&mut buf, &q(7, "lq-1-0"), 100);
        put_frame(&mut buf, &q(8, "ln-8"), 100);
        put_frame(&mut buf, &q(9, "lq-3-0"), 100);
        a.write_all(&buf).await.unwrap();
        let mut got = vec![0u8; 4 + FRAME_HEAD + 100];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[4..8], &1u32.to_be_bytes());
        assert_eq!(&got[8..12], &7u32.to_be_bytes());
        wait(&stats, |s| s.dropped.load(Ordering::Relaxed) == 2).await;
        // A frame longer than the bound: that connection is closed, the
        // others still forwarded.
        let (mut evil, ack) = hello(addr, 2).await;
        assert_eq!(ack, Some(HELLO_ACK));
        evil.write_all(&(MAX_FRAME as u32 + 1).to_be_bytes())
            .await
            .unwrap();
        assert_eq!(evil.read(&mut eof).await.unwrap(), 0);
        buf.clear();
        put_frame(&mut buf, &q(10, "lq-0-0"), 0);
        b.write_all(&buf).await.unwrap();
        let mut got = vec![0u8; 4 + FRAME_HEAD];
        a.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[8..12], &10u32.to_be_bytes());
        assert_eq!(stats.forwarded.load(Ordering::Relaxed), 2);
        assert_eq!(stats.refused.load(Ordering::Relaxed), 3);
        let _ = stop.send(true);
    }

    #[tokio::test]
    async fn raw_clients_record_what_reaches_them() {
        let (addr, _stats, stop_fwd) = forwarder(8).await;
        let table = Arc::new(QueryTable::new(4));
        let (stop_tx, stop) = watch::channel(false);
        let (orders, mut tasks) = start_clients(
            2,
            addr,
            |_| std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            (table.clone(), 300),
            stop,
            Duration::from_secs(20),
        )
        .await
        .unwrap();
        let tx = orders[0].as_ref().unwrap();
        for (seq, name) in [(0, "lq-1-0"), (1, "ln-1"), (2, "lq-1-0")] {
            tx.send(QueryOrder {
                seq,
                name: name.into(),
            })
            .await
            .unwrap();
        }
        let t = Instant::now();
        let done = |t: &QueryTable| {
            let s = crate::lease_queries::tally(t, 0, &[true, false, true], Duration::MAX);
            s.forwarded == 2 && s.sent == 3
        };
        while !done(&table) {
            assert!(t.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let s = crate::lease_queries::tally(&table, 0, &[true, false, true], Duration::MAX);
        assert_eq!(s.negative_arrived, 0);
        assert_eq!(table.dup.load(Ordering::Relaxed), 0);
        let _ = stop_tx.send(true);
        while let Some(r) = tasks.join_next().await {
            r.unwrap().unwrap();
        }
        let _ = stop_fwd.send(true);
    }
}
