//! `juxta run --hosts FILE`: ranks of a message-passing job started on
//! other hosts through the `juxta peer` daemon running on each.
//!
//! Why through the daemon: it is the long-lived Juxta peer a host already
//! runs, with an identity; the launcher reaches it over a proven compact
//! connection, so the daemon knows *which peer* asks before it starts a
//! process (only peers in its `launch.allowed_peers` may, like SSH's
//! authorized keys), and a launcher that goes away takes its ranks with it.
//!
//! The conversation is a handful of endpoint messages on the service
//! [`SERVICE`] (namespace [`NS`]): the launcher sends `start` (one rank)
//! and `kill` (the job); the daemon answers `started` (the rank's PID and,
//! for rank 0, the seed address it reserved) or `refused` (why), then
//! forwards the rank's output as `out`/`err` chunks of whole lines and its
//! end as `exit`. [`serve`] is the daemon's side, [`client`] the
//! launcher's; [`hostfile`] reads the hosts file.

pub mod client;
pub mod hostfile;
pub mod serve;

use juxta::proto::message::{Element, Message};

/// Endpoint service of the launch conversation.
pub const SERVICE: &str = "juxta-launch";
/// Its parameter (the protocol version).
pub const PARAM: &str = "v1";
/// Namespace of its elements.
pub const NS: &str = "juxta-launch";

/// Most arguments in a rank's command line.
pub const MAX_ARGS: usize = 256;
/// Most bytes in one argument.
pub const MAX_ARG_BYTES: usize = 4096;
/// Most bytes of a job name.
pub const MAX_JOB: usize = 128;
/// Most bytes of output in one `out`/`err` message.
pub const MAX_CHUNK: usize = 64 * 1024;

/// A message of the launch conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum LaunchMsg {
    /// Launcher → daemon: start one rank.
    Start(StartRank),
    /// Daemon → launcher: the rank runs.
    Started {
        /// the job
        job: String,
        /// the rank
        rank: usize,
        /// its process ID on the host
        pid: u32,
        /// the seed (rank 0's address) the rank was given
        seed: String,
    },
    /// Daemon → launcher: the rank was not started.
    Refused {
        /// the job
        job: String,
        /// the rank
        rank: usize,
        /// why, for the user
        reason: String,
    },
    /// Daemon → launcher: output of a rank (whole lines).
    Output {
        /// the job
        job: String,
        /// the rank
        rank: usize,
        /// standard error (else standard output)
        err: bool,
        /// the bytes
        data: bytes::Bytes,
    },
    /// Daemon → launcher: the rank ended.
    Exit {
        /// the job
        job: String,
        /// the rank
        rank: usize,
        /// exit code, or `None` when killed by a signal
        code: Option<i32>,
        /// how it ended, for the user (`exit status: 3`, `signal: 9`)
        how: String,
    },
    /// Launcher → daemon: kill every rank of the job on this host.
    Kill {
        /// the job
        job: String,
    },
}

/// `start`: one rank to run.
#[derive(Debug, Clone, PartialEq)]
pub struct StartRank {
    /// The job's name (letters, digits, `.`, `_`, `-`).
    pub job: String,
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub size: usize,
    /// Rank 0's address; empty for rank 0: the daemon reserves one.
    pub seed: String,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// `JUXTA_MP_TIMEOUT` (seconds), if set.
    pub op_timeout: Option<f64>,
    /// `JUXTA_MP_SPIN_US`, if set.
    pub spin_us: Option<u64>,
}

/// Why a launch message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchMsgError {
    /// An element the kind needs is missing.
    #[error("launch message: element `{0}` missing")]
    Missing(&'static str),
    /// An element is malformed or out of bounds.
    #[error("launch message: element `{0}` malformed or out of bounds")]
    Bad(&'static str),
    /// The kind is not one of the protocol's.
    #[error("launch message: unknown kind")]
    UnknownKind,
}

fn text<'a>(m: &'a Message, name: &'static str) -> Result<&'a str, LaunchMsgError> {
    m.get(NS, name)
        .ok_or(LaunchMsgError::Missing(name))?
        .as_str()
        .ok_or(LaunchMsgError::Bad(name))
}

fn num<T: std::str::FromStr>(m: &Message, name: &'static str) -> Result<T, LaunchMsgError> {
    text(m, name)?
        .trim()
        .parse()
        .map_err(|_| LaunchMsgError::Bad(name))
}

fn opt_num<T: std::str::FromStr>(
    m: &Message,
    name: &'static str,
) -> Result<Option<T>, LaunchMsgError> {
    match m.get(NS, name) {
        None => Ok(None),
        Some(_) => num(m, name).map(Some),
    }
}

/// Whether `job` is a name the daemon accepts (it goes into environment
/// variables and logs).
pub fn valid_job(job: &str) -> bool {
    !job.is_empty()
        && job.len() <= MAX_JOB
        && job
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn job(m: &Message) -> Result<String, LaunchMsgError> {
    let j = text(m, "job")?;
    if !valid_job(j) {
        return Err(LaunchMsgError::Bad("job"));
    }
    Ok(j.to_string())
}

impl LaunchMsg {
    /// Encodes the message.
    pub fn to_message(&self) -> Message {
        let t = |name: &str, v: &str| Element::text(NS, name, v);
        let mut m = Message::new();
        match self {
            LaunchMsg::Start(s) => {
                m.push(t("kind", "start"));
                m.push(t("job", &s.job));
                m.push(t("rank", &s.rank.to_string()));
                m.push(t("size", &s.size.to_string()));
                m.push(t("seed", &s.seed));
                m.push(t("argc", &s.argv.len().to_string()));
                for (i, a) in s.argv.iter().enumerate() {
                    m.push(t(&format!("arg{i}"), a));
                }
                if let Some(x) = s.op_timeout {
                    m.push(t("op_timeout", &x.to_string()));
                }
                if let Some(x) = s.spin_us {
                    m.push(t("spin_us", &x.to_string()));
                }
            }
            LaunchMsg::Started {
                job,
                rank,
                pid,
                seed,
            } => {
                m.push(t("kind", "started"));
                m.push(t("job", job));
                m.push(t("rank", &rank.to_string()));
                m.push(t("pid", &pid.to_string()));
                m.push(t("seed", seed));
            }
            LaunchMsg::Refused { job, rank, reason } => {
                m.push(t("kind", "refused"));
                m.push(t("job", job));
                m.push(t("rank", &rank.to_string()));
                m.push(t("reason", reason));
            }
            LaunchMsg::Output {
                job,
                rank,
                err,
                data,
            } => {
                m.push(t("kind", if *err { "err" } else { "out" }));
                m.push(t("job", job));
                m.push(t("rank", &rank.to_string()));
                m.push(Element::bytes(NS, "data", data.clone()));
            }
            LaunchMsg::Exit {
                job,
                rank,
                code,
                how,
            } => {
                m.push(t("kind", "exit"));
                m.push(t("job", job));
                m.push(t("rank", &rank.to_string()));
                if let Some(c) = code {
                    m.push(t("code", &c.to_string()));
                }
                m.push(t("how", how));
            }
            LaunchMsg::Kill { job } => {
                m.push(t("kind", "kill"));
                m.push(t("job", job));
            }
        }
        m
    }

    /// Decodes a message from a peer: every field checked and bounded.
    pub fn from_message(m: &Message) -> Result<LaunchMsg, LaunchMsgError> {
        let rank = |m: &Message| -> Result<usize, LaunchMsgError> {
            let r: usize = num(m, "rank")?;
            if r >= juxta::mp::MAX_RANKS {
                return Err(LaunchMsgError::Bad("rank"));
            }
            Ok(r)
        };
        Ok(match text(m, "kind")? {
            "start" => {
                let size: usize = num(m, "size")?;
                if size == 0 || size > juxta::mp::MAX_RANKS {
                    return Err(LaunchMsgError::Bad("size"));
                }
                let r = rank(m)?;
                if r >= size {
                    return Err(LaunchMsgError::Bad("rank"));
                }
                let argc: usize = num(m, "argc")?;
                if argc == 0 || argc > MAX_ARGS {
                    return Err(LaunchMsgError::Bad("argc"));
                }
                let mut argv = Vec::with_capacity(argc);
                for i in 0..argc {
                    let e = m
                        .get(NS, &format!("arg{i}"))
                        .ok_or(LaunchMsgError::Missing("arg"))?;
                    let a = e.as_str().ok_or(LaunchMsgError::Bad("arg"))?;
                    if a.len() > MAX_ARG_BYTES || a.contains('\0') {
                        return Err(LaunchMsgError::Bad("arg"));
                    }
                    argv.push(a.to_string());
                }
                let seed = text(m, "seed")?;
                if !seed.is_empty() && seed.parse::<std::net::SocketAddr>().is_err() {
                    return Err(LaunchMsgError::Bad("seed"));
                }
                let op_timeout: Option<f64> = opt_num(m, "op_timeout")?;
                if op_timeout.is_some_and(|t| !(t.is_finite() && t > 0.0 && t < 1e9)) {
                    return Err(LaunchMsgError::Bad("op_timeout"));
                }
                LaunchMsg::Start(StartRank {
                    job: job(m)?,
                    rank: r,
                    size,
                    seed: seed.to_string(),
                    argv,
                    op_timeout,
                    spin_us: opt_num(m, "spin_us")?,
                })
            }
            "started" => LaunchMsg::Started {
                job: job(m)?,
                rank: rank(m)?,
                pid: num(m, "pid")?,
                seed: text(m, "seed")?.chars().take(64).collect(),
            },
            "refused" => LaunchMsg::Refused {
                job: job(m)?,
                rank: rank(m)?,
                reason: text(m, "reason")?.chars().take(512).collect(),
            },
            k @ ("out" | "err") => {
                let data = &m
                    .get(NS, "data")
                    .ok_or(LaunchMsgError::Missing("data"))?
                    .data;
                if data.len() > MAX_CHUNK {
                    return Err(LaunchMsgError::Bad("data"));
                }
                LaunchMsg::Output {
                    job: job(m)?,
                    rank: rank(m)?,
                    err: k == "err",
                    data: data.clone(),
                }
            }
            "exit" => LaunchMsg::Exit {
                job: job(m)?,
                rank: rank(m)?,
                code: opt_num(m, "code")?,
                how: text(m, "how")?.chars().take(128).collect(),
            },
            "kill" => LaunchMsg::Kill { job: job(m)? },
            _ => return Err(LaunchMsgError::UnknownKind),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> StartRank {
        StartRank {
            job: "job-1".into(),
            rank: 1,
            size: 2,
            seed: "127.0.0.1:4000".into(),
            argv: vec!["./prog".into(), "--n".into(), "8".into()],
            op_timeout: Some(2.5),
            spin_us: Some(0),
        }
    }

    #[test]
    fn every_kind_round_trips() {
        let all = [
            LaunchMsg::Start(start()),
            LaunchMsg::Started {
                job: "j".into(),
                rank: 0,
                pid: 42,
                seed: "127.0.0.1:1".into(),
            },
            LaunchMsg::Refused {
                job: "j".into(),
                rank: 3,
                reason: "no".into(),
            },
            LaunchMsg::Output {
                job: "j".into(),
                rank: 1,
                err: true,
                data: bytes::Bytes::from_static(b"x\n"),
            },
            LaunchMsg::Exit {
                job: "j".into(),
                rank: 1,
                code: None,
                how: "signal: 9".into(),
            },
            LaunchMsg::Kill { job: "j".into() },
        ];
        for m in all {
            assert_eq!(LaunchMsg::from_message(&m.to_message()).unwrap(), m);
        }
    }

    #[test]
    fn hostile_starts_are_refused_with_the_element_named() {
        let bad = |f: &dyn Fn(&mut StartRank)| {
            let mut s = start();
            f(&mut s);
            LaunchMsg::from_message(&LaunchMsg::Start(s).to_message()).unwrap_err()
        };
        assert_eq!(bad(&|s| s.rank = 2), LaunchMsgError::Bad("rank"));
        assert_eq!(bad(&|s| s.size = 0), LaunchMsgError::Bad("size"));
        assert_eq!(bad(&|s| s.size = usize::MAX), LaunchMsgError::Bad("size"));
        assert_eq!(bad(&|s| s.job = "a b".into()), LaunchMsgError::Bad("job"));
        assert_eq!(
            bad(&|s| s.job = "x".repeat(200)),
            LaunchMsgError::Bad("job")
        );
        assert_eq!(bad(&|s| s.argv.clear()), LaunchMsgError::Bad("argc"));
        assert_eq!(
            bad(&|s| s.argv = vec!["a".into(); MAX_ARGS + 1]),
            LaunchMsgError::Bad("argc")
        );
        assert_eq!(
            bad(&|s| s.argv[0] = "x".repeat(MAX_ARG_BYTES + 1)),
            LaunchMsgError::Bad("arg")
        );
        assert_eq!(
            bad(&|s| s.seed = "nowhere".into()),
            LaunchMsgError::Bad("seed")
        );
        assert_eq!(
            bad(&|s| s.op_timeout = Some(f64::NAN)),
            LaunchMsgError::Bad("op_timeout")
        );
        // argc larger than the arguments present.
        let mut m = LaunchMsg::Start(start()).to_message();
        m.remove_all(NS, "argc");
        m.push(Element::text(NS, "argc", "5"));
        assert_eq!(
            LaunchMsg::from_message(&m).unwrap_err(),
            LaunchMsgError::Missing("arg")
        );
        let m = Message::new().with(Element::text(NS, "kind", "format-disk"));
        assert_eq!(
            LaunchMsg::from_message(&m).unwrap_err(),
            LaunchMsgError::UnknownKind
        );
    }
}
