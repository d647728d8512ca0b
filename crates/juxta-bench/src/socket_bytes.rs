//! Bytes on the wire, counted by the kernel at the socket, the same way for
//! every implementation.
//!
//! Why: an encoder's own idea of a message's length leaves out what an
//! implementation sends besides it (acks, control messages, keep-alives),
//! and a counting forwarder in the path adds a hop to what is timed. The
//! kernel keeps per-connection counters (`tcp_info`: `bytes_acked` for what
//! was sent, each byte once even when retransmitted, and `bytes_received`;
//! TCP payload only, no headers); `ss -tin` (iproute2)
//! prints them for any process's sockets. A lane reads the counters of the
//! client's side of its connections before and after its timed pairs and
//! divides by the pairs: the same counter below `tcp`, every Juxta layer
//! and the JXSE JVMs, and nothing in the timed path (the reads happen
//! between timed runs).
//!
//! UDP has no such per-socket counters: a UDP lane (libp2p over QUIC)
//! runs across a veth pair of its own and its client interface's frame
//! counters are read instead, headers taken off
//! ([`ClientSockets::link`]).
//!
//! Which sockets are the client's: those whose peer port is one of the
//! responder's listening ports (connections the client opened) and those
//! whose local port is one of the client's own listening ports
//! (connections the responder opened back). Lanes are timed one after the
//! other, so counting every such socket around a lane's run counts only
//! that lane's traffic (idle connections of other lanes add nothing).
//!
//! ```no_run
//! use juxta_bench::socket_bytes::{ClientSockets, Counted};
//! let lane = ClientSockets { server_ports: vec![9701], ..ClientSockets::default() };
//! let before = lane.read().unwrap();
//! // ... timed pairs ...
//! let after = lane.read().unwrap();
//! let d: Counted = after.since(before);
//! println!("{} bytes sent, {} received", d.sent, d.received);
//! ```

use std::process::Command;

/// Errors reading the kernel's counters.
#[derive(Debug, thiserror::Error)]
pub enum SocketBytesError {
    /// The counters of a lane's interface could not be read.
    #[error("reading an interface's counters: {0}")]
    Link(#[from] crate::net::NetError),
    /// `ss` could not be run.
    #[error("cannot run `ss` (iproute2; Debian: apt-get install iproute2): {0}")]
    Spawn(#[source] std::io::Error),
    /// `ss` failed.
    #[error("`ss -tin` failed ({status}): {stderr}")]
    Failed {
        /// its exit status
        status: String,
        /// its stderr
        stderr: String,
    },
}

/// Byte counters of a set of sockets (TCP payload bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Bytes the client's sockets sent.
    pub sent: u64,
    /// Bytes the client's sockets received.
    pub received: u64,
}

impl Counted {
    /// What was counted since `earlier` (saturating: a connection that
    /// closed in between takes its counters with it).
    pub fn since(self, earlier: Counted) -> Counted {
        Counted {
            sent: self.sent.saturating_sub(earlier.sent),
            received: self.received.saturating_sub(earlier.received),
        }
    }

    /// Adds another count.
    pub fn add(&mut self, other: Counted) {
        self.sent = self.sent.saturating_add(other.sent);
        self.received = self.received.saturating_add(other.received);
    }
}

/// The client's side of one lane's connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientSockets {
    /// Listening ports of the responder (the client dials them).
    pub server_ports: Vec<u16>,
    /// Listening ports of the client (the responder may dial them).
    pub client_ports: Vec<u16>,
    /// Processes whose every TCP socket is the client's (for stacks whose
    /// ports are not known in advance, such as MPI's TCP transport).
    pub pids: Vec<u32>,
    /// A lane the kernel cannot count per socket (UDP: QUIC) runs across
    /// a [`crate::net::VethPair`]: (namespace, interface) of the client's
    /// end, whose counters are the lane's traffic alone (UDP payload:
    /// frame bytes less [`crate::net::UDP_FRAME_OVERHEAD`] per frame, as
    /// `tcp_info` counts TCP payload). The socket fields are then unused.
    pub link: Option<(String, String)>,
}

impl ClientSockets {
    /// Reads the counters of the client's sockets now.
    pub fn read(&self) -> Result<Counted, SocketBytesError> {
        if let Some((ns, dev)) = &self.link {
            let c = crate::net::link_counters(ns, dev)?;
            return Ok(Counted {
                sent: c.tx_payload(),
                received: c.rx_payload(),
            });
        }
        if self.server_ports.is_empty() && self.client_ports.is_empty() && self.pids.is_empty() {
            return Ok(Counted::default());
        }
        let args = if self.pids.is_empty() {
            "-tinH"
        } else {
            "-tinpH"
        };
        let out = Command::new("ss")
            .arg(args)
            .output()
            .map_err(SocketBytesError::Spawn)?;
        if !out.status.success() {
            return Err(SocketBytesError::Failed {
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(self.count(&String::from_utf8_lossy(&out.stdout)))
    }

    /// Sums the counters of the client's sockets in `ss -tinH` output.
    pub fn count(&self, ss: &str) -> Counted {
        let mut total = Counted::default();
        let mut mine = false;
        for line in ss.lines() {
            if line.is_empty() {
                continue;
            }
            if !line.starts_with(char::is_whitespace) {
                // State line: State Recv-Q Send-Q Local Peer [Process]
                let f: Vec<&str> = line.split_whitespace().collect();
                mine = match (
                    f.get(3).and_then(|a| port(a)),
                    f.get(4).and_then(|a| port(a)),
                ) {
                    (Some(local), Some(peer)) => {
                        self.server_ports.contains(&peer)
                            || self.client_ports.contains(&local)
                            || owner(line).is_some_and(|p| self.pids.contains(&p))
                    }
                    _ => false,
                };
                continue;
            }
            if !mine {
                continue;
            }
            mine = false;
            let (mut sent, mut acked) = (None, None);
            for f in line.split_whitespace() {
                if let Some(v) = f.strip_prefix("bytes_sent:") {
                    sent = v.parse::<u64>().ok();
                } else if let Some(v) = f.strip_prefix("bytes_acked:") {
                    acked = v.parse::<u64>().ok();
                } else if let Some(v) = f.strip_prefix("bytes_received:") {
                    total.received = total.received.saturating_add(v.parse().unwrap_or(0));
                }
            }
            // What the peer acknowledged counts each byte once: bytes_sent
            // also counts retransmissions (a starved receiver on a loaded
            // machine gets spurious RTO retransmits even on loopback).
            // bytes_acked counts the SYN/FIN too (1 each): constant per
            // connection, gone in the differences a lane takes.
            total.sent = total.sent.saturating_add(acked.or(sent).unwrap_or(0));
        }
        total
    }
}

/// The first process owning a socket, from `users:(("x",pid=12,fd=3))`.
fn owner(line: &str) -> Option<u32> {
    let rest = &line[line.find("pid=")? + 4..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The port of `127.0.0.1:80`, `[::1]:80` or `*:80`.
fn port(addr: &str) -> Option<u16> {
    addr.rsplit_once(':')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SS: &str = "ESTAB 0      0      127.0.0.1:35798 127.0.0.1:58263\n\
\t bbr wscale:10,10 rto:204 bytes_sent:1000 bytes_acked:1001 bytes_received:10 segs_out:4\n\
ESTAB 0      0      127.0.0.1:58263 127.0.0.1:35798\n\
\t bbr wscale:10,10 rto:204 bytes_sent:10 bytes_acked:10 bytes_received:1000 segs_out:2\n\
ESTAB 0      0      [::1]:40000 [::1]:9000\n\
\t cubic bytes_sent:7 bytes_received:3\n\
ESTAB 0      0      127.0.0.1:1234 127.0.0.1:5555\n\
\t cubic bytes_received:99\n";

    #[test]
    fn counts_only_the_client_side() {
        let c = ClientSockets {
            server_ports: vec![58263],
            ..ClientSockets::default()
        };
        // bytes_acked (1,000 bytes and the SYN), not bytes_sent.
        assert_eq!(
            c.count(SS),
            Counted {
                sent: 1001,
                received: 10
            }
        );
        let c = ClientSockets {
            server_ports: vec![58263, 9000],
            client_ports: vec![1234],
            ..ClientSockets::default()
        };
        assert_eq!(
            c.count(SS),
            Counted {
                sent: 1008,
                received: 112
            }
        );
        assert_eq!(ClientSockets::default().count(SS), Counted::default());
    }

    #[test]
    fn counts_the_sockets_of_a_process() {
        let ss = "ESTAB 0 0 127.0.0.1:40001 127.0.0.1:40002 users:((\"a\",pid=77,fd=5))\n\
\t cubic bytes_sent:12 bytes_acked:11 bytes_received:4\n\
ESTAB 0 0 127.0.0.1:40002 127.0.0.1:40001 users:((\"b\",pid=78,fd=5))\n\
\t cubic bytes_sent:4 bytes_received:11\n";
        let c = ClientSockets {
            pids: vec![77],
            ..ClientSockets::default()
        };
        assert_eq!(
            c.count(ss),
            Counted {
                sent: 11,
                received: 4
            }
        );
        assert_eq!(owner("x users:((\"a\",pid=123,fd=1))"), Some(123));
        assert_eq!(owner("no owner"), None);
    }

    #[test]
    fn since_saturates() {
        let a = Counted {
            sent: 5,
            received: 1,
        };
        let b = Counted {
            sent: 3,
            received: 4,
        };
        assert_eq!(
            a.since(b),
            Counted {
                sent: 2,
                received: 0
            }
        );
    }

    #[test]
    fn reads_a_real_connection() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let lane = ClientSockets {
            server_ports: vec![port],
            ..ClientSockets::default()
        };
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut a, _) = l.accept().unwrap();
        let before = match lane.read() {
            Ok(b) => b,
            Err(e) if std::env::var_os("CI").is_none() => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        c.write_all(&[7u8; 1000]).unwrap();
        let mut buf = [0u8; 1000];
        a.read_exact(&mut buf).unwrap();
        a.write_all(&[1u8; 10]).unwrap();
        c.read_exact(&mut buf[..10]).unwrap();
        let d = lane.read().unwrap().since(before);
        assert_eq!(
            d,
            Counted {
                sent: 1000,
                received: 10
            }
        );
    }
}
