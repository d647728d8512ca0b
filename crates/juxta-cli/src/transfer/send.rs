//! `juxta send FILE|DIR`: hashes the files, prints a ticket and serves the
//! files over a JXTA socket until one receiver has them all (or for ever
//! with `--keep`).

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use juxta::proto::advertisement::{PipeAdvertisement, PipeType};
use juxta::proto::id::PipeId;
use juxta::socket::{JxtaServerSocket, JxtaSocket, SocketConfig};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::ticket::Ticket;
use super::wire::{self, FileEntry};
use super::{advertised_addrs, PeerOpts, TransferError};

/// Bytes per read and per socket write.
pub const CHUNK: usize = 1 << 20;
/// Most receivers served at once.
pub const MAX_RECEIVERS: usize = 16;
/// How long a receiver may take to say hello and to send its offsets.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// `juxta send` options.
#[derive(clap::Args, Clone, Debug)]
pub struct SendArgs {
    /// The file or directory to send (a directory is sent with its
    /// contents; symbolic links in it are skipped).
    pub path: PathBuf,
    /// TCP address to listen on.
    #[arg(long, default_value = "0.0.0.0:0")]
    pub listen: SocketAddr,
    /// Keep serving after a receiver got everything (until Ctrl-C).
    #[arg(long)]
    pub keep: bool,
    /// Testing: stop sending file data after this many bytes (first
    /// connection only).
    #[arg(long, hide = true)]
    pub test_stop_after: Option<u64>,
    /// Testing: with --test-stop-after, keep the connection open but send
    /// nothing more (instead of closing it).
    #[arg(long, hide = true)]
    pub test_stall: bool,
    #[command(flatten)]
    pub peer: PeerOpts,
}

/// A file to send: where it is and what the header says.
#[derive(Debug, Clone)]
pub struct Source {
    /// On disk.
    pub disk: PathBuf,
    /// In the header.
    pub entry: FileEntry,
}

/// Lists the files under `root` (the file itself, or a directory's files
/// named `<dir name>/<relative path>`), sorted, skipping symbolic links.
pub fn collect(root: &Path) -> Result<Vec<(PathBuf, String)>, TransferError> {
    let meta = std::fs::symlink_metadata(root)
        .map_err(TransferError::io(format!("reading {}", root.display())))?;
    let name = root
        .canonicalize()
        .ok()
        .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
        .ok_or_else(|| TransferError::Usage(format!("{}: has no file name", root.display())))?;
    if meta.is_file() || (meta.file_type().is_symlink() && root.is_file()) {
        return Ok(vec![(root.to_path_buf(), name)]);
    }
    if !meta.is_dir() {
        return Err(TransferError::Usage(format!(
            "{}: not a file or directory",
            root.display()
        )));
    }
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), name)];
    while let Some((dir, rel)) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(TransferError::io(format!(
            "reading directory {}",
            dir.display()
        )))?;
        for e in rd {
            let e = e.map_err(TransferError::io(format!("reading {}", dir.display())))?;
            let ft = e
                .file_type()
                .map_err(TransferError::io(format!("reading {}", e.path().display())))?;
            let Some(n) = e.file_name().to_str().map(str::to_string) else {
                eprintln!("juxta: skipping {} (name not UTF-8)", e.path().display());
                continue;
            };
            let r = format!("{rel}/{n}");
            if ft.is_symlink() {
                eprintln!("juxta: skipping symbolic link {}", e.path().display());
            } else if ft.is_dir() {
                stack.push((e.path(), r));
            } else if ft.is_file() {
                out.push((e.path(), r));
            }
        }
    }
    if out.len() > wire::MAX_FILES {
        return Err(TransferError::Usage(format!(
            "{} files is more than a transfer may carry ({})",
            out.len(),
            wire::MAX_FILES
        )));
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// SHA-256 and size of a file.
pub fn hash_file(p: &Path) -> Result<([u8; 32], u64), TransferError> {
    let mut f =
        std::fs::File::open(p).map_err(TransferError::io(format!("opening {}", p.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut n: u64 = 0;
    loop {
        let k = f
            .read(&mut buf)
            .map_err(TransferError::io(format!("reading {}", p.display())))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((h.finalize().into(), n))
}

/// `juxta send`.
pub async fn main(a: SendArgs) -> Result<(), TransferError> {
    let files = collect(&a.path)?;
    let mut sources = Vec::with_capacity(files.len());
    for (disk, path) in files {
        wire::check_path(&path).map_err(|why| wire::WireError::Path {
            path: path.clone(),
            why,
        })?;
        let (sha256, size) = tokio::task::block_in_place(|| hash_file(&disk))?;
        sources.push(Source {
            disk,
            entry: FileEntry { path, size, sha256 },
        });
    }
    let total: u64 = sources.iter().map(|s| s.entry.size).sum();
    let peer = a.peer.start(Some(a.listen), &[]).await?;
    let local = peer
        .local_addr()
        .ok_or_else(|| TransferError::Usage("the peer did not start listening".into()))?;
    let adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    let mut server = JxtaServerSocket::bind(&peer, &adv, socket_config())?;
    let mut addrs = advertised_addrs(local);
    addrs.truncate(super::ticket::MAX_ADDRS);
    let t = Ticket {
        peer: peer.peer_id(),
        pipe: adv.id,
        addrs,
    };
    let text = t.encode()?;
    println!("{text}");
    eprintln!(
        "juxta: serving {} file(s), {total} bytes; on the other side run:\n  juxta receive {text}",
        sources.len()
    );
    let sources = Arc::new(sources);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(4);
    // --test-stop-after applies to the first connection only.
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    // At most MAX_RECEIVERS transfers at once; more are refused.
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_RECEIVERS));
    loop {
        tokio::select! {
            s = server.accept() => {
                let s = s?;
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    eprintln!(
                        "juxta: refusing {}: {MAX_RECEIVERS} transfers in progress",
                        s.remote()
                    );
                    continue;
                };
                let (sources, done_tx) = (sources.clone(), done_tx.clone());
                let stop = a
                    .test_stop_after
                    .filter(|_| first.swap(false, std::sync::atomic::Ordering::SeqCst))
                    .map(|n| (n, a.test_stall));
                tokio::spawn(async move {
                    let who = s.remote();
                    let r = serve(s, &sources, stop).await;
                    drop(slot);
                    match r {
                        Ok(sent) => {
                            eprintln!("juxta: sent {sent} bytes to {who}; transfer complete");
                            let _ = done_tx.send(()).await;
                        }
                        Err(e) => eprintln!("juxta: transfer to {who} failed: {e}"),
                    }
                });
            }
            Some(()) = done_rx.recv(), if !a.keep => return Ok(()),
            r = tokio::signal::ctrl_c() => {
                r.map_err(TransferError::io("waiting for Ctrl-C"))?;
                return Ok(());
            }
        }
    }
}

/// Socket settings of both sides: a larger stream window than the default
/// for bulk data.
pub fn socket_config() -> SocketConfig {
    SocketConfig {
        stream_window: 32 << 20,
        ..SocketConfig::default()
    }
}

/// Serves one receiver; returns the file bytes sent.
async fn serve(
    mut s: JxtaSocket,
    sources: &[Source],
    stop: Option<(u64, bool)>,
) -> Result<u64, TransferError> {
    let timed_out = || TransferError::Io {
        what: "waiting for the receiver".into(),
        source: std::io::ErrorKind::TimedOut.into(),
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, wire::read_hello(&mut s))
        .await
        .map_err(|_| timed_out())??;
    let entries: Vec<FileEntry> = sources.iter().map(|s| s.entry.clone()).collect();
    wire::write_header(&mut s, &entries).await?;
    let offsets = tokio::time::timeout(HANDSHAKE_TIMEOUT, wire::read_offsets(&mut s, &entries))
        .await
        .map_err(|_| timed_out())??;
    let mut sent: u64 = 0;
    let limit = stop.map(|(n, _)| n).unwrap_or(u64::MAX);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(8);
    let plan: Vec<(PathBuf, u64, u64)> = sources
        .iter()
        .zip(&offsets)
        .filter(|(src, off)| **off < src.entry.size)
        .map(|(src, off)| (src.disk.clone(), *off, src.entry.size))
        .collect();
    // Reads on a thread of its own, a few chunks ahead of the socket, into
    // buffers that come back once sent (a fresh 1 MiB buffer per chunk
    // would be mapped, faulted in and zeroed every time). At most the
    // channel's 8 plus the two being read and sent are ever allocated.
    let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        use std::io::{Seek, SeekFrom};
        for (disk, off, size) in plan {
            let r = (|| {
                let mut f = std::fs::File::open(&disk)?;
                f.seek(SeekFrom::Start(off))?;
                let mut left = size - off;
                while left > 0 {
                    let want = (left.min(CHUNK as u64)) as usize;
                    let mut buf = back_rx.try_recv().unwrap_or_default();
                    buf.resize(want, 0);
                    f.read_exact(&mut buf)?;
                    left -= want as u64;
                    if tx.blocking_send(Ok(buf)).is_err() {
                        return Ok(());
                    }
                }
                Ok::<(), std::io::Error>(())
            })();
            if let Err(e) = r {
                let _ = tx.blocking_send(Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", disk.display()),
                )));
                return;
            }
        }
    });
    while let Some(chunk) = rx.recv().await {
        let chunk = chunk.map_err(TransferError::io("reading a file to send"))?;
        let room = limit.saturating_sub(sent);
        let n = (chunk.len() as u64).min(room) as usize;
        s.write_all(&chunk[..n])
            .await
            .map_err(TransferError::io("sending"))?;
        sent += n as u64;
        let _ = back_tx.send(chunk);
        if sent >= limit {
            s.flush().await.map_err(TransferError::io("sending"))?;
            eprintln!("juxta: test: stopping after {sent} bytes");
            if stop.is_some_and(|(_, stall)| stall) {
                std::future::pending::<()>().await;
            }
            drop(rx);
            let _ = s.shutdown().await;
            let _ = reader.join();
            return Err(TransferError::Usage(format!(
                "test: stopped after {sent} bytes"
            )));
        }
    }
    let _ = reader.join();
    s.flush().await.map_err(TransferError::io("sending"))?;
    let status = tokio::time::timeout(HANDSHAKE_TIMEOUT, s.read_u8())
        .await
        .map_err(|_| timed_out())?
        .map_err(TransferError::io("waiting for the receiver's verdict"))?;
    if status != wire::STATUS_OK {
        return Err(TransferError::Status(status));
    }
    let _ = s.shutdown().await;
    Ok(sent)
}
