//! The hosts file of `juxta run --hosts FILE`: one host per line,
//!
//! ```text
//! # the daemon's TCP address   ranks it takes   (optional) its peer ID
//! 10.0.0.1:9701   slots=2
//! 10.0.0.2:9701   slots=2   peer=urn:jxta:cbid-59616261...03
//! ```
//!
//! `slots` defaults to 1; ranks fill the hosts' slots in order (rank 0 on
//! the first host), and wrap around when the job has more ranks than
//! slots. `peer` pins the daemon's identity: a host that answers as
//! another peer is refused.

use std::net::SocketAddr;
use std::path::Path;

use juxta::proto::id::PeerId;

/// Most hosts in a file.
pub const MAX_HOSTS: usize = 4096;
/// Most slots on one host.
pub const MAX_SLOTS: usize = 4096;

/// A host of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The daemon's TCP address.
    pub addr: SocketAddr,
    /// Ranks it takes before the next host gets one.
    pub slots: usize,
    /// The daemon's peer ID, if pinned.
    pub peer: Option<PeerId>,
}

/// What is wrong with a hosts file.
#[derive(Debug, thiserror::Error)]
pub enum HostfileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// the file
        path: String,
        /// why
        #[source]
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("{path}:{line}: {what}")]
    Line {
        /// the file
        path: String,
        /// 1-based line number
        line: usize,
        /// what is wrong
        what: String,
    },
    /// No host in the file.
    #[error("{0}: no host listed")]
    Empty(String),
}

/// Reads and checks a hosts file.
pub fn read(path: &Path) -> Result<Vec<Host>, HostfileError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| HostfileError::Read {
        path: p.clone(),
        source,
    })?;
    parse(&p, &text)
}

/// Parses a hosts file's text (`path` names it in errors).
pub fn parse(path: &str, text: &str) -> Result<Vec<Host>, HostfileError> {
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let err = |what: String| HostfileError::Line {
            path: path.to_string(),
            line: i + 1,
            what,
        };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let addr_text = words.next().unwrap_or_default();
        let addr: SocketAddr = addr_text
            .parse()
            .map_err(|_| err(format!("`{addr_text}` is not an IP:PORT address")))?;
        let mut host = Host {
            addr,
            slots: 1,
            peer: None,
        };
        for w in words {
            match w.split_once('=') {
                Some(("slots", v)) => {
                    host.slots = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_SLOTS).contains(n))
                        .ok_or_else(|| err(format!("slots={v}: expected 1..={MAX_SLOTS}")))?;
                }
                Some(("peer", v)) => {
                    host.peer = Some(
                        v.parse()
                            .map_err(|e| err(format!("peer={v}: not a peer ID ({e})")))?,
                    );
                }
                _ => return Err(err(format!("`{w}`: expected slots=N or peer=ID"))),
            }
        }
        if hosts.len() == MAX_HOSTS {
            return Err(err(format!("more than {MAX_HOSTS} hosts")));
        }
        hosts.push(host);
    }
    if hosts.is_empty() {
        return Err(HostfileError::Empty(path.to_string()));
    }
    Ok(hosts)
}

/// The host index of each rank: the hosts' slots filled in order, wrapping
/// around when there are more ranks than slots.
pub fn place(hosts: &[Host], ranks: usize) -> Vec<usize> {
    let order: Vec<usize> = hosts
        .iter()
        .enumerate()
        .flat_map(|(i, h)| std::iter::repeat_n(i, h.slots))
        .collect();
    (0..ranks).map(|r| order[r % order.len()]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_slots_and_pins_parse_and_ranks_fill_slots_in_order() {
        let h = parse(
            "f",
            "# two hosts\n127.0.0.1:9701 slots=2\n\n127.0.0.2:9701   # one slot\n",
        )
        .unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].slots, h[1].slots), (2, 1));
        assert_eq!(place(&h, 5), vec![0, 0, 1, 0, 0]);
        assert_eq!(place(&h, 1), vec![0]);
    }

    #[test]
    fn bad_lines_name_the_line() {
        for (text, want) in [
            ("nowhere\n", "f:1: `nowhere` is not an IP:PORT address"),
            ("127.0.0.1:1 slots=0\n", "f:1: slots=0: expected 1..=4096"),
            (
                "\n127.0.0.1:1 cores=2\n",
                "f:2: `cores=2`: expected slots=N or peer=ID",
            ),
            ("# nothing\n", "f: no host listed"),
        ] {
            assert_eq!(parse("f", text).unwrap_err().to_string(), want);
        }
        assert!(parse("f", "127.0.0.1:1 peer=urn:jxta:nope\n")
            .unwrap_err()
            .to_string()
            .starts_with("f:1: peer=urn:jxta:nope: not a peer ID"));
    }
}
