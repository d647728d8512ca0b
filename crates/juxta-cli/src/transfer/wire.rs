//! The file transfer protocol of `juxta send`/`juxta receive`, spoken over
//! one JXTA socket (the receiver connects to the sender's server socket).
//!
//! ```text
//! receiver -> sender   "JXTF" u8 version
//! sender -> receiver   "JXTF" u8 version, u32 header length, header:
//!                        u32 file count, per file: u16 path length, path
//!                        (UTF-8, '/'-separated, relative), u64 size,
//!                        32 bytes SHA-256 of the whole file
//! receiver -> sender   u32 file count, u64 offset per file (0..=size:
//!                        where its data starts; size: nothing to send)
//! sender -> receiver   the bytes of every file from its offset, in order
//! receiver -> sender   u8 status (0: all files verified and in place)
//! ```
//!
//! Instead of its header, a sender that will not serve writes
//! `"JXTR" u8 reason` ([`REFUSED`], [`Refusal`]: the ticket expired, too
//! many receivers at once) and closes.
//!
//! All integers are big-endian. Every length a peer sends is bounded
//! before anything is allocated ([`MAX_PATH`], [`MAX_FILES`],
//! [`MAX_HEADER`]), sizes are summed with checked arithmetic, and paths are
//! checked by [`check_path`] on both sides.
//!
//! This file is self-contained (no `crate::` paths) so that tests can
//! include it to build hostile senders.

use std::path::{Component, Path, PathBuf};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Protocol magic.
pub const MAGIC: &[u8; 4] = b"JXTF";
/// Protocol version.
pub const VERSION: u8 = 1;
/// What a sender that refuses writes instead of its header's magic.
pub const REFUSED: &[u8; 4] = b"JXTR";
/// Longest path, in bytes.
pub const MAX_PATH: usize = 4096;
/// Most files in one transfer.
pub const MAX_FILES: usize = 100_000;
/// Largest header, in bytes.
pub const MAX_HEADER: usize = 16 << 20;
/// Status: every file verified and in place.
pub const STATUS_OK: u8 = 0;
/// Status: a file's SHA-256 did not match the header.
pub const STATUS_HASH_MISMATCH: u8 = 1;
/// Status: the receiver refused or failed otherwise.
pub const STATUS_FAILED: u8 = 2;

/// One file of a transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Relative, '/'-separated path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the whole file.
    pub sha256: [u8; 32],
}

/// Why a sender refused a receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The ticket's expiry has passed (by the sender's clock).
    #[error("the ticket has expired; ask the sender for a new one")]
    Expired,
    /// The sender serves as many receivers as it allows.
    #[error("the sender serves as many receivers as it allows; try again later")]
    Busy,
    /// A reason this version does not know.
    #[error("reason {0}")]
    Other(u8),
}

impl Refusal {
    /// The reason's byte.
    pub fn code(self) -> u8 {
        match self {
            Refusal::Expired => 1,
            Refusal::Busy => 2,
            Refusal::Other(c) => c,
        }
    }

    /// The reason of a byte.
    pub fn from_code(c: u8) -> Refusal {
        match c {
            1 => Refusal::Expired,
            2 => Refusal::Busy,
            c => Refusal::Other(c),
        }
    }
}

/// Protocol errors.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The sender refused to serve.
    #[error("the sender refused: {0}")]
    Refused(Refusal),
    /// The socket failed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer does not speak this protocol.
    #[error("the peer does not speak the juxta transfer protocol")]
    Magic,
    /// Another protocol version.
    #[error("the peer speaks transfer protocol version {0}, this juxta speaks {VERSION}")]
    Version(u8),
    /// A header larger than [`MAX_HEADER`].
    #[error("header of {0} bytes is larger than the limit of {MAX_HEADER}")]
    HeaderTooLarge(u64),
    /// More files than [`MAX_FILES`].
    #[error("{0} files is more than the limit of {MAX_FILES}")]
    TooManyFiles(u64),
    /// The header does not parse (truncated, bytes left over).
    #[error("malformed header: {0}")]
    Malformed(&'static str),
    /// A path that must not be written.
    #[error("refused path {path:?}: {why}")]
    Path {
        /// The path as sent (lossy).
        path: String,
        /// Why it is refused.
        why: PathProblem,
    },
    /// The same path twice.
    #[error("path {0:?} appears twice in the header")]
    Duplicate(String),
    /// The sizes add up beyond 2^64.
    #[error("total size overflows")]
    SizeOverflow,
    /// The offsets answer does not match the header.
    #[error("bad offsets: {0}")]
    Offsets(&'static str),
}

/// Why [`check_path`] refused a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathProblem {
    /// Empty.
    #[error("empty")]
    Empty,
    /// Longer than [`MAX_PATH`].
    #[error("longer than {MAX_PATH} bytes")]
    TooLong,
    /// Not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// Starts with `/` (or is otherwise absolute).
    #[error("absolute")]
    Absolute,
    /// Has a `..` component.
    #[error("contains '..'")]
    ParentDir,
    /// Has an empty or `.` component, a NUL or a backslash.
    #[error("contains an empty or '.' component, a NUL or a backslash")]
    Unusual,
    /// Goes through a symbolic link on the receiver's disk.
    #[error("goes through a symbolic link")]
    Symlink,
    /// Names something on the receiver's disk that is not a plain file or
    /// directory where one is needed.
    #[error("a file on the way is not a directory")]
    NotADirectory,
}

/// Checks a relative path from a header: non-empty, at most [`MAX_PATH`]
/// bytes, `/`-separated components that are neither empty, `.` nor `..`,
/// no NUL or backslash, not absolute. Returns it as a relative [`PathBuf`]
/// (which [`Path::join`] can never take out of the directory it is joined
/// to).
pub fn check_path(p: &str) -> Result<PathBuf, PathProblem> {
    if p.is_empty() {
        return Err(PathProblem::Empty);
    }
    if p.len() > MAX_PATH {
        return Err(PathProblem::TooLong);
    }
    if p.starts_with('/') {
        return Err(PathProblem::Absolute);
    }
    if p.contains('\0') || p.contains('\\') {
        return Err(PathProblem::Unusual);
    }
    let mut out = PathBuf::new();
    for c in p.split('/') {
        match c {
            ".." => return Err(PathProblem::ParentDir),
            "" | "." => return Err(PathProblem::Unusual),
            c => out.push(c),
        }
    }
    // Belt and braces: only normal components may remain.
    if !out.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(PathProblem::Unusual);
    }
    Ok(out)
}

/// Checks that no existing component of `rel` under `root` is a symbolic
/// link (or a non-directory where a directory is needed), so that writing
/// `root/rel` stays inside `root`. The final component may be absent or a
/// plain file.
pub fn check_on_disk(root: &Path, rel: &Path) -> Result<(), PathProblem> {
    let mut at = root.to_path_buf();
    let n = rel.components().count();
    for (i, c) in rel.components().enumerate() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return Ok(()), // absent from here on
            Ok(m) if m.file_type().is_symlink() => return Err(PathProblem::Symlink),
            Ok(m) if i + 1 < n && !m.is_dir() => return Err(PathProblem::NotADirectory),
            Ok(m) if i + 1 == n && !m.is_file() => return Err(PathProblem::NotADirectory),
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Writes the hello (receiver).
pub async fn write_hello<W: AsyncWrite + Unpin>(w: &mut W) -> Result<(), WireError> {
    w.write_all(MAGIC).await?;
    w.write_all(&[VERSION]).await?;
    w.flush().await?;
    Ok(())
}

async fn read_magic<R: AsyncRead + Unpin>(r: &mut R) -> Result<(), WireError> {
    let mut m = [0u8; 5];
    r.read_exact(&mut m).await?;
    if &m[..4] == REFUSED {
        return Err(WireError::Refused(Refusal::from_code(m[4])));
    }
    if &m[..4] != MAGIC {
        return Err(WireError::Magic);
    }
    if m[4] != VERSION {
        return Err(WireError::Version(m[4]));
    }
    Ok(())
}

/// Reads the hello (sender).
pub async fn read_hello<R: AsyncRead + Unpin>(r: &mut R) -> Result<(), WireError> {
    read_magic(r).await
}

/// Writes a refusal (sender), instead of the header.
pub async fn write_refusal<W: AsyncWrite + Unpin>(
    w: &mut W,
    why: Refusal,
) -> Result<(), WireError> {
    w.write_all(REFUSED).await?;
    w.write_all(&[why.code()]).await?;
    w.flush().await?;
    Ok(())
}

/// Encodes a header (without validating it: a test's hostile sender uses
/// this to send bad paths).
pub fn encode_header(files: &[FileEntry]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&(files.len() as u32).to_be_bytes());
    for f in files {
        body.extend_from_slice(&(f.path.len() as u16).to_be_bytes());
        body.extend_from_slice(f.path.as_bytes());
        body.extend_from_slice(&f.size.to_be_bytes());
        body.extend_from_slice(&f.sha256);
    }
    let mut out = Vec::with_capacity(body.len() + 9);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Writes the header (sender).
pub async fn write_header<W: AsyncWrite + Unpin>(
    w: &mut W,
    files: &[FileEntry],
) -> Result<(), WireError> {
    w.write_all(&encode_header(files)).await?;
    w.flush().await?;
    Ok(())
}

/// Reads and validates the header (receiver): bounded sizes and counts,
/// every path checked with [`check_path`], no duplicates, no overflowing
/// total.
pub async fn read_header<R: AsyncRead + Unpin>(r: &mut R) -> Result<Vec<FileEntry>, WireError> {
    read_magic(r).await?;
    let len = r.read_u32().await? as u64;
    if len > MAX_HEADER as u64 {
        return Err(WireError::HeaderTooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    parse_header(&body)
}

/// Parses and validates a header body.
pub fn parse_header(mut b: &[u8]) -> Result<Vec<FileEntry>, WireError> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], WireError> {
        if b.len() < n {
            return Err(WireError::Malformed("truncated"));
        }
        let (a, rest) = b.split_at(n);
        *b = rest;
        Ok(a)
    }
    let count = u32::from_be_bytes(take(&mut b, 4)?.try_into().expect("4 bytes")) as u64;
    if count > MAX_FILES as u64 {
        return Err(WireError::TooManyFiles(count));
    }
    let mut files = Vec::with_capacity(count as usize);
    let mut seen = std::collections::HashSet::new();
    let mut total: u64 = 0;
    for _ in 0..count {
        let plen = u16::from_be_bytes(take(&mut b, 2)?.try_into().expect("2 bytes")) as usize;
        let raw = take(&mut b, plen)?;
        let path = match std::str::from_utf8(raw) {
            Ok(p) => p.to_string(),
            Err(_) => {
                return Err(WireError::Path {
                    path: String::from_utf8_lossy(raw).into_owned(),
                    why: PathProblem::NotUtf8,
                })
            }
        };
        check_path(&path).map_err(|why| WireError::Path {
            path: path.clone(),
            why,
        })?;
        let size = u64::from_be_bytes(take(&mut b, 8)?.try_into().expect("8 bytes"));
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(take(&mut b, 32)?);
        total = total.checked_add(size).ok_or(WireError::SizeOverflow)?;
        if !seen.insert(path.clone()) {
            return Err(WireError::Duplicate(path));
        }
        files.push(FileEntry { path, size, sha256 });
    }
    if !b.is_empty() {
        return Err(WireError::Malformed("bytes left over"));
    }
    Ok(files)
}

/// Writes the offsets (receiver).
pub async fn write_offsets<W: AsyncWrite + Unpin>(
    w: &mut W,
    offsets: &[u64],
) -> Result<(), WireError> {
    let mut b = Vec::with_capacity(4 + 8 * offsets.len());
    b.extend_from_slice(&(offsets.len() as u32).to_be_bytes());
    for o in offsets {
        b.extend_from_slice(&o.to_be_bytes());
    }
    w.write_all(&b).await?;
    w.flush().await?;
    Ok(())
}

/// Reads the offsets (sender), checked against the header.
pub async fn read_offsets<R: AsyncRead + Unpin>(
    r: &mut R,
    files: &[FileEntry],
) -> Result<Vec<u64>, WireError> {
    let n = r.read_u32().await? as usize;
    if n != files.len() {
        return Err(WireError::Offsets("count differs from the header"));
    }
    let mut out = Vec::with_capacity(n);
    for f in files {
        let o = r.read_u64().await?;
        if o > f.size {
            return Err(WireError::Offsets("offset beyond the end of a file"));
        }
        out.push(o);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_escape_are_refused() {
        assert_eq!(check_path("a/b.txt").unwrap(), PathBuf::from("a/b.txt"));
        assert_eq!(check_path("../x"), Err(PathProblem::ParentDir));
        assert_eq!(check_path("a/../../x"), Err(PathProblem::ParentDir));
        assert_eq!(check_path("a/.."), Err(PathProblem::ParentDir));
        assert_eq!(check_path("/etc/passwd"), Err(PathProblem::Absolute));
        assert_eq!(check_path(""), Err(PathProblem::Empty));
        assert_eq!(check_path("a//b"), Err(PathProblem::Unusual));
        assert_eq!(check_path("./a"), Err(PathProblem::Unusual));
        assert_eq!(check_path("a\\..\\b"), Err(PathProblem::Unusual));
        assert_eq!(check_path("a\0b"), Err(PathProblem::Unusual));
        assert_eq!(
            check_path(&"a".repeat(MAX_PATH + 1)),
            Err(PathProblem::TooLong)
        );
        assert!(check_path(&"a".repeat(MAX_PATH)).is_ok());
    }

    #[test]
    fn symlinks_on_the_way_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("link")).unwrap();
        std::fs::create_dir(d.path().join("real")).unwrap();
        std::fs::write(d.path().join("file"), b"x").unwrap();
        assert_eq!(
            check_on_disk(d.path(), Path::new("link/x")),
            Err(PathProblem::Symlink)
        );
        assert_eq!(
            check_on_disk(d.path(), Path::new("link")),
            Err(PathProblem::Symlink)
        );
        assert_eq!(
            check_on_disk(d.path(), Path::new("file/x")),
            Err(PathProblem::NotADirectory)
        );
        assert_eq!(
            check_on_disk(d.path(), Path::new("real")),
            Err(PathProblem::NotADirectory)
        );
        assert!(check_on_disk(d.path(), Path::new("real/new/x")).is_ok());
        assert!(check_on_disk(d.path(), Path::new("file")).is_ok());
    }

    fn entry(path: &str, size: u64) -> FileEntry {
        FileEntry {
            path: path.into(),
            size,
            sha256: [7; 32],
        }
    }

    #[test]
    fn header_round_trip_and_bounds() {
        let files = vec![entry("a", 3), entry("d/b", 0)];
        let enc = encode_header(&files);
        assert_eq!(parse_header(&enc[9..]).unwrap(), files);
        // Hostile headers.
        for bad in [
            vec![entry("../x", 1)],
            vec![entry("/etc/x", 1)],
            vec![entry("a", 1), entry("a", 2)],
            vec![entry("a", u64::MAX), entry("b", 1)],
        ] {
            assert!(parse_header(&encode_header(&bad)[9..]).is_err(), "{bad:?}");
        }
        // Truncated, and a count beyond the limit.
        assert!(parse_header(&enc[9..enc.len() - 1]).is_err());
        assert!(matches!(
            parse_header(&(MAX_FILES as u32 + 1).to_be_bytes()),
            Err(WireError::TooManyFiles(_))
        ));
    }

    #[tokio::test]
    async fn a_refusal_is_read_as_such() {
        for why in [Refusal::Expired, Refusal::Busy, Refusal::Other(77)] {
            let mut b = Vec::new();
            write_refusal(&mut b, why).await.unwrap();
            let mut r = &b[..];
            assert!(matches!(read_header(&mut r).await, Err(WireError::Refused(w)) if w == why));
        }
    }

    #[tokio::test]
    async fn oversized_header_is_refused_before_allocation() {
        let mut b = MAGIC.to_vec();
        b.push(VERSION);
        b.extend_from_slice(&u32::MAX.to_be_bytes());
        let mut r = &b[..];
        assert!(matches!(
            read_header(&mut r).await,
            Err(WireError::HeaderTooLarge(_))
        ));
    }
}
