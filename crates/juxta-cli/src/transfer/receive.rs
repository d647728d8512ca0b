//! `juxta receive TICKET [--dir D]`: fetches what a `juxta send` serves,
//! resuming from partial files, verifying every file's SHA-256 before it
//! gets its final name.
//!
//! Partial data lives in `D/.juxta-partial/<key>.part` (the key hashes the
//! file's path and announced SHA-256), never under the final name; a file
//! is renamed into place only after its hash checks. Paths from the header
//! are checked ([`wire::check_path`]: relative, no `..`) and so is the disk
//! ([`wire::check_on_disk`]: no symbolic link on the way).
//!
//! Durability: a verified file is fsynced before its rename, and its
//! directory after it ([`commit_file`]), so a crash leaves either the
//! partial file or the complete one, never a final name over data that
//! had not reached the disk.
//!
//! An expired ticket is refused before anything starts. `receive` always
//! runs a peer of its own, daemon or not (see docs/cli-transfer.md).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use juxta::proto::advertisement::{PipeAdvertisement, PipeType};
use juxta::socket::JxtaSocket;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::send::{socket_config, CHUNK};
use super::ticket::{unix_now, Ticket};
use super::wire::{self, FileEntry};
use super::{connect_any, PeerOpts, TransferError};
use juxta::socket::SocketError;

/// Received chunks queued for the disk writer thread (and, beside it, for
/// the hasher thread). Short, so that the connection's receive buffers
/// come back soon and are reused warm rather than allocated anew (see
/// docs/benchmarks.md, "1 GB transfer profile").
const WRITE_QUEUE: usize = 4;

/// Written data is handed to the kernel's writeback every this many bytes
/// ([`Writeback`]).
const WRITEBACK_STEP: u64 = 8 << 20;
/// ... over a trailing window this long: a page is advised a few times,
/// the first starting its writeback, a later one dropping it once clean.
const WRITEBACK_WINDOW: u64 = 32 << 20;

/// Directory (inside the target) that holds partial files.
pub const PARTIAL_DIR: &str = ".juxta-partial";

/// `juxta receive` options.
#[derive(clap::Args, Clone, Debug)]
pub struct ReceiveArgs {
    /// The ticket `juxta send` printed.
    pub ticket: String,
    /// Directory to write into (created if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub peer: PeerOpts,
}

/// One file of the plan.
struct Plan {
    entry: FileEntry,
    /// Final place.
    dest: PathBuf,
    /// Partial file.
    part: PathBuf,
    /// Bytes already there (resumed).
    offset: u64,
    /// The final file is there and verified already.
    done: bool,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The partial file's name for an entry.
fn part_name(e: &FileEntry) -> String {
    let mut h = Sha256::new();
    h.update(e.path.as_bytes());
    h.update([0]);
    h.update(e.sha256);
    format!("{}.part", hex(&h.finalize()[..16]))
}

/// Refuses a ticket whose expiry has passed at `now` (a version 1 ticket
/// has none: the sender decides).
pub fn check_expiry(t: &Ticket, now: u64) -> Result<(), TransferError> {
    match t.expires {
        Some(e) if t.expired_at(now) => Err(TransferError::Expired {
            at: super::send::utc(e),
            ago: humantime::format_duration(std::time::Duration::from_secs(now - e)).to_string(),
        }),
        _ => Ok(()),
    }
}

/// `juxta receive`.
pub async fn main(a: ReceiveArgs) -> Result<(), TransferError> {
    let t = Ticket::parse(&a.ticket)?;
    check_expiry(&t, unix_now())?;
    let timeout = a.peer.timeout()?;
    std::fs::create_dir_all(&a.dir)
        .map_err(TransferError::io(format!("creating {}", a.dir.display())))?;
    let root = a
        .dir
        .canonicalize()
        .map_err(TransferError::io(format!("opening {}", a.dir.display())))?;
    let peer = a.peer.start(None, &[]).await?;
    let m = connect_any(&peer, &t.addrs).await?;
    if m.remote() != t.peer {
        return Err(TransferError::WrongPeer(Box::new((
            t.addrs[0],
            m.remote(),
            t.peer,
        ))));
    }
    // Stream mode needs the compact handshake done first.
    m.wait_compact(timeout.min(std::time::Duration::from_secs(5)))
        .await;
    let adv = PipeAdvertisement::new(t.pipe, PipeType::Unicast);
    let mut cfg = socket_config();
    cfg.connect_timeout = timeout;
    let mut s = match JxtaSocket::connect(&peer.pipes(), &adv, t.peer, cfg).await {
        Ok(s) => s,
        Err(e @ SocketError::Bind(juxta::pipe::PipeError::NotFound(_))) => {
            return Err(TransferError::NotServed(e))
        }
        Err(e) => return Err(e.into()),
    };
    if let Err(e) = wire::write_hello(&mut s).await {
        // A sender that refuses (busy, expired) sends its refusal and closes
        // at once, possibly before our hello reaches it: the hello then
        // fails ("reads no more") while the refusal is still there to read.
        let within = timeout.min(std::time::Duration::from_secs(2));
        if let Ok(Err(r @ wire::WireError::Refused(_))) =
            tokio::time::timeout(within, wire::read_header(&mut s)).await
        {
            return Err(r.into());
        }
        return Err(e.into());
    }
    let entries = tokio::time::timeout(timeout, wire::read_header(&mut s))
        .await
        .map_err(|_| TransferError::Io {
            what: "waiting for the sender's file list".into(),
            source: std::io::ErrorKind::TimedOut.into(),
        })??;
    let plans = tokio::task::block_in_place(|| plan(&root, entries))?;
    let offsets: Vec<u64> = plans
        .iter()
        .map(|p| if p.done { p.entry.size } else { p.offset })
        .collect();
    wire::write_offsets(&mut s, &offsets).await?;
    let total: u64 = plans.iter().map(|p| p.entry.size).sum();
    let resumed: u64 = offsets.iter().sum();
    let want = total - resumed;
    let bar = progress(total, resumed);
    let started = Instant::now();

    // Disk writes and hashing on a thread of their own. The socket hands
    // over the buffers the connection read the data into (no copy), and
    // the channel is short so that those buffers are reused soon.
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(WRITE_QUEUE);
    let writer = std::thread::spawn(move || write_files(plans, rx));
    let mut got: u64 = 0;
    let mut read_err = None;
    while got < want {
        let r = s.read_chunk(CHUNK.min((want - got) as usize)).await;
        match r {
            Ok(None) => break,
            Ok(Some(buf)) => {
                let n = buf.len() as u64;
                got += n;
                bar.inc(n);
                if tx.send(buf).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                read_err = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let outcome = writer
        .join()
        .map_err(|_| TransferError::Usage("the writer thread panicked".into()))?;
    bar.finish_and_clear();
    let status = match &outcome {
        Ok(_) if got == want => wire::STATUS_OK,
        Err(TransferError::HashMismatch(_)) => wire::STATUS_HASH_MISMATCH,
        _ => wire::STATUS_FAILED,
    };
    let _ = s.write_all(&[status]).await;
    let _ = s.shutdown().await;
    // The sender closes once it has the status: wait for that (bounded),
    // so that the status is out before this process ends.
    let mut rest = [0u8; 64];
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), async {
        while let Ok(n) = s.read(&mut rest).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
    let files = outcome?;
    if got < want {
        if let Some(e) = read_err {
            eprintln!("juxta: connection: {e}");
        }
        return Err(TransferError::Truncated {
            got: resumed + got,
            want: total,
        });
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    eprintln!(
        "juxta: received {files} file(s) into {}: {total} bytes ({resumed} resumed, {got} transferred) in {secs:.2} s, {:.1} MB/s",
        root.display(),
        got as f64 / secs / 1e6
    );
    let _ = std::fs::remove_dir(root.join(PARTIAL_DIR));
    Ok(())
}

fn progress(total: u64, resumed: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bytes}/{total_bytes} [{wide_bar}] {bytes_per_sec} eta {eta}",
        )
        .expect("progress template"),
    );
    bar.set_position(resumed);
    bar.reset_eta();
    bar
}

/// Checks every path, finds what is there already (final files with the
/// right hash, partial files) and decides the offsets.
fn plan(root: &Path, entries: Vec<FileEntry>) -> Result<Vec<Plan>, TransferError> {
    let partial = root.join(PARTIAL_DIR);
    if std::fs::symlink_metadata(&partial).is_ok_and(|m| !m.is_dir()) {
        return Err(TransferError::Usage(format!(
            "{} is not a directory (a symbolic link?); remove it",
            partial.display()
        )));
    }
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let rel = wire::check_path(&entry.path).map_err(|why| wire::WireError::Path {
            path: entry.path.clone(),
            why,
        })?;
        if rel.components().next().and_then(|c| c.as_os_str().to_str()) == Some(PARTIAL_DIR) {
            return Err(wire::WireError::Path {
                path: entry.path.clone(),
                why: wire::PathProblem::Unusual,
            }
            .into());
        }
        wire::check_on_disk(root, &rel).map_err(|why| wire::WireError::Path {
            path: entry.path.clone(),
            why,
        })?;
        let dest = root.join(&rel);
        let part = partial.join(part_name(&entry));
        let mut done = false;
        if let Ok(m) = std::fs::symlink_metadata(&dest) {
            let same = m.is_file()
                && m.len() == entry.size
                && super::send::hash_file(&dest)?.0 == entry.sha256;
            if !same {
                return Err(TransferError::Exists(dest));
            }
            done = true;
        }
        let mut offset = 0;
        if !done {
            match std::fs::symlink_metadata(&part) {
                Ok(m) if m.is_file() && m.len() <= entry.size => offset = m.len(),
                Ok(m) if m.is_file() => {
                    std::fs::remove_file(&part)
                        .map_err(TransferError::io(format!("removing {}", part.display())))?;
                }
                Ok(_) => {
                    return Err(TransferError::Usage(format!(
                        "{} is not a plain file; remove it",
                        part.display()
                    )))
                }
                Err(_) => {}
            }
        }
        out.push(Plan {
            entry,
            dest,
            part,
            offset,
            done,
        });
    }
    Ok(out)
}

/// Puts a verified partial file (`f`, open on `part`) in place at
/// `root/rel`: fsyncs the file, creates the directories on the way (each
/// new one fsynced into its parent), checks again that nothing on the way
/// is a symbolic link and that the final name is free, renames, and
/// fsyncs the directory that now holds it. Until the rename the data only
/// has the partial name, so a crash never leaves an incomplete file under
/// the final one.
pub fn commit_file(
    f: std::fs::File,
    part: &Path,
    root: &Path,
    rel: &Path,
) -> Result<(), TransferError> {
    let dest = root.join(rel);
    f.sync_all()
        .map_err(TransferError::io(format!("syncing {}", part.display())))?;
    drop(f);
    let parent = dest.parent().unwrap_or(root);
    // Directories created now must reach the disk too: fsync each new one's
    // parent, from the top down.
    let mut missing: Vec<&Path> = parent
        .ancestors()
        .take_while(|d| *d != root && std::fs::symlink_metadata(d).is_err())
        .collect();
    missing.reverse();
    std::fs::create_dir_all(parent)
        .map_err(TransferError::io(format!("creating {}", parent.display())))?;
    for d in &missing {
        sync_dir(d.parent().unwrap_or(root))?;
    }
    // Checked again right before the rename: nothing on the way may have
    // become a symbolic link meanwhile.
    let rel_s = rel.to_string_lossy().into_owned();
    wire::check_on_disk(root, rel).map_err(|why| wire::WireError::Path { path: rel_s, why })?;
    if std::fs::symlink_metadata(&dest).is_ok() {
        return Err(TransferError::Exists(dest));
    }
    std::fs::rename(part, &dest).map_err(TransferError::io(format!(
        "renaming into {}",
        dest.display()
    )))?;
    sync_dir(parent)
}

/// fsyncs a directory (its entries: a rename or a new file in it).
fn sync_dir(d: &Path) -> Result<(), TransferError> {
    std::fs::File::open(d)
        .and_then(|f| f.sync_all())
        .map_err(TransferError::io(format!(
            "syncing directory {}",
            d.display()
        )))
}

/// Starts the writeback of what the writer wrote as it goes, so that the
/// fsync before the rename ([`commit_file`]) finds little left to write,
/// and lets the written pages go once they are on disk (the received file
/// is not read again: its hash is taken from the stream). Without it the
/// whole file sat dirty in the page cache until the final fsync wrote it
/// at once; measured on this machine (docs/benchmarks.md), `dd
/// conv=fsync` of 1 GB took 0.6-2.3 s that way and 0.35-0.41 s with
/// `oflag=nocache`, which does the same.
///
/// `posix_fadvise(DONTNEED)` on a trailing window: on Linux it starts
/// (without waiting for) the writeback of the range's dirty pages and
/// drops its clean ones. Advice only: an error changes nothing but speed,
/// so errors are ignored.
struct Writeback {
    /// File offset written up to.
    pos: u64,
    /// Offset at the last advice.
    advised: u64,
}

impl Writeback {
    fn new(at: u64) -> Writeback {
        Writeback {
            pos: at,
            advised: at,
        }
    }

    /// `n` more bytes were written at the end.
    fn wrote(&mut self, f: &std::fs::File, n: u64) {
        self.pos += n;
        if self.pos - self.advised < WRITEBACK_STEP {
            return;
        }
        self.advised = self.pos;
        let from = self.pos.saturating_sub(WRITEBACK_WINDOW);
        advise_dontneed(f, from, self.pos - from);
    }
}

#[cfg(target_os = "linux")]
fn advise_dontneed(f: &std::fs::File, from: u64, len: u64) {
    use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
    use nix::libc::off_t;
    use std::os::fd::AsRawFd;
    let (Ok(from), Ok(len)) = (off_t::try_from(from), off_t::try_from(len)) else {
        return;
    };
    let _ = posix_fadvise(
        f.as_raw_fd(),
        from,
        len,
        PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    );
}

#[cfg(not(target_os = "linux"))]
fn advise_dontneed(_f: &std::fs::File, _from: u64, _len: u64) {}

/// What the writer thread hands its hasher thread.
enum ToHasher {
    /// The next bytes of the current file.
    Data(bytes::Bytes),
    /// The current file is complete: its SHA-256 goes back, and the next
    /// bytes start a new file.
    Finish(std::sync::mpsc::SyncSender<[u8; 32]>),
}

/// The hasher thread: SHA-256 of each file, beside the writer thread so
/// that hashing and the disk writes of a chunk overlap (the chunks are
/// shared, not copied).
fn hasher(rx: std::sync::mpsc::Receiver<ToHasher>) {
    let mut h = Sha256::new();
    for m in rx {
        match m {
            ToHasher::Data(d) => h.update(&d),
            ToHasher::Finish(back) => {
                let done = std::mem::take(&mut h);
                let _ = back.send(done.finalize().into());
            }
        }
    }
}

/// Writes the incoming bytes into the partial files in order while a
/// thread of its own hashes them ([`write_files_hashed`]).
fn write_files(
    plans: Vec<Plan>,
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
) -> Result<usize, TransferError> {
    let (htx, hrx) = std::sync::mpsc::sync_channel::<ToHasher>(WRITE_QUEUE);
    let h = std::thread::spawn(move || hasher(hrx));
    let r = write_files_hashed(plans, rx, &htx);
    drop(htx);
    let _ = h.join();
    r
}

/// Writes the incoming bytes into the partial files in order, hashing
/// each whole file (the resumed prefix first); renames a file into place
/// once its hash checks ([`commit_file`]). Returns the number of files in
/// place.
fn write_files_hashed(
    plans: Vec<Plan>,
    mut rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    htx: &std::sync::mpsc::SyncSender<ToHasher>,
) -> Result<usize, TransferError> {
    let hasher_gone = || TransferError::Usage("the hasher thread ended".into());
    let digest = || -> Result<[u8; 32], TransferError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        htx.send(ToHasher::Finish(tx)).map_err(|_| hasher_gone())?;
        rx.recv().map_err(|_| hasher_gone())
    };
    let mut pending: Option<bytes::Bytes> = None;
    let mut pos = 0usize;
    let mut n = 0;
    for p in plans {
        if p.done {
            n += 1;
            continue;
        }
        let dir = p.part.parent().expect("partial dir");
        std::fs::create_dir_all(dir)
            .map_err(TransferError::io(format!("creating {}", dir.display())))?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&p.part)
            .map_err(TransferError::io(format!("opening {}", p.part.display())))?;
        // The resumed prefix.
        let mut left = p.offset;
        while left > 0 {
            let k = (left.min(CHUNK as u64)) as usize;
            let mut buf = vec![0u8; k];
            f.read_exact(&mut buf)
                .map_err(TransferError::io(format!("reading {}", p.part.display())))?;
            htx.send(ToHasher::Data(buf.into()))
                .map_err(|_| hasher_gone())?;
            left -= k as u64;
        }
        f.set_len(p.offset)
            .and_then(|()| f.seek(SeekFrom::Start(p.offset)).map(|_| ()))
            .map_err(TransferError::io(format!("resizing {}", p.part.display())))?;
        let mut left = p.entry.size - p.offset;
        let mut wb = Writeback::new(p.offset);
        while left > 0 {
            if pending.as_ref().is_none_or(|b| pos >= b.len()) {
                match rx.blocking_recv() {
                    Some(b) => {
                        pending = Some(b);
                        pos = 0;
                    }
                    // The connection ended: keep what arrived.
                    None => {
                        f.flush()
                            .map_err(TransferError::io(format!("writing {}", p.part.display())))?;
                        return Ok(n);
                    }
                }
            }
            let b = pending.as_ref().expect("a chunk");
            let k = ((b.len() - pos) as u64).min(left) as usize;
            let d = b.slice(pos..pos + k);
            htx.send(ToHasher::Data(d.clone()))
                .map_err(|_| hasher_gone())?;
            f.write_all(&d)
                .map_err(TransferError::io(format!("writing {}", p.part.display())))?;
            wb.wrote(&f, k as u64);
            pos += k;
            left -= k as u64;
        }
        f.flush()
            .map_err(TransferError::io(format!("writing {}", p.part.display())))?;
        if digest()? != p.entry.sha256 {
            drop(f);
            let _ = std::fs::remove_file(&p.part);
            return Err(TransferError::HashMismatch(p.entry.path.clone()));
        }
        let root_rel = p.entry.path.clone();
        let root = p
            .dest
            .ancestors()
            .nth(Path::new(&root_rel).components().count())
            .expect("root");
        commit_file(f, &p.part, root, Path::new(&root_rel))?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_syncs_and_renames_into_new_directories() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let partial = root.join(PARTIAL_DIR);
        std::fs::create_dir_all(&partial).unwrap();
        let part = partial.join("x.part");
        std::fs::write(&part, b"all of it").unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&part)
            .unwrap();
        commit_file(f, &part, root, Path::new("a/b/c.txt")).unwrap();
        assert_eq!(std::fs::read(root.join("a/b/c.txt")).unwrap(), b"all of it");
        assert!(!part.exists(), "the partial name is gone after the rename");
        // A second commit to the same name is refused: nothing overwritten.
        std::fs::write(&part, b"other").unwrap();
        let f = std::fs::File::open(&part).unwrap();
        assert!(matches!(
            commit_file(f, &part, root, Path::new("a/b/c.txt")),
            Err(TransferError::Exists(_))
        ));
        assert_eq!(std::fs::read(root.join("a/b/c.txt")).unwrap(), b"all of it");
        assert!(part.exists(), "a refused commit keeps the partial");
    }

    #[test]
    fn expired_tickets_are_refused_before_dialling() {
        let t = Ticket {
            peer: juxta::proto::id::PeerId::from_public_key_spki(b"k"),
            pipe: juxta::proto::id::PipeId::new_random(),
            addrs: vec!["127.0.0.1:1".parse().unwrap()],
            expires: Some(1000),
        };
        assert!(check_expiry(&t, 999).is_ok());
        let e = check_expiry(&t, 1090).unwrap_err().to_string();
        assert!(
            e.contains("expired at 1970-01-01T00:16:40Z (1m 30s ago)"),
            "{e}"
        );
        let old = Ticket { expires: None, ..t };
        assert!(check_expiry(&old, u64::MAX).is_ok());
    }
}
