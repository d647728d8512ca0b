//! Transfers the daemon serves for `juxta send` (control requests
//! `serve`, `serve_stop`, `transfers`): each a file or directory on a
//! server socket of the daemon's peer, named by a ticket, served until the
//! ticket expires, a `serve_stop`, or (with `once`) the first receiver that
//! got everything. At most `limits.transfers` at once; a further `serve`
//! is refused (`limit`) and counted.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use juxta::Peer;
use serde_json::{json, Value};

use super::control::ControlError;
use crate::transfer::send::{self, Ended, ServeOpts, ServeStats};
use crate::transfer::ticket::{unix_now, Ticket};

/// Tickets served at once by default (`limits.transfers`).
pub const DEFAULT_TRANSFERS: usize = 16;
/// Ended transfers remembered (for `transfers` and an attached
/// `juxta send` waiting for the outcome).
pub const ENDED_KEPT: usize = 64;

/// One ticket being served.
struct Served {
    ticket: String,
    path: String,
    files: usize,
    bytes: u64,
    expires: u64,
    once: bool,
    stats: Arc<ServeStats>,
    task: tokio::task::AbortHandle,
}

/// One that ended.
#[derive(Clone)]
struct EndedRec {
    id: u64,
    ticket: String,
    path: String,
    reason: String,
    expires: u64,
    completed: u64,
    bytes_sent: u64,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    /// `serve` requests hashing their files (they hold a place).
    preparing: usize,
    serving: BTreeMap<u64, Served>,
    ended: VecDeque<EndedRec>,
}

/// The daemon's served transfers.
pub struct Transfers {
    peer: Arc<Peer>,
    limit: usize,
    table: Mutex<Table>,
    /// `serve` requests refused at the limit.
    refused: AtomicU64,
}

impl Transfers {
    /// Served on `peer`, at most `limit` at once.
    pub fn new(peer: Arc<Peer>, limit: usize) -> Arc<Transfers> {
        Arc::new(Transfers {
            peer,
            limit: limit.max(1),
            table: Mutex::new(Table::default()),
            refused: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The `serve` request.
    pub async fn serve(
        self: &Arc<Self>,
        path: String,
        expires_s: u64,
        once: bool,
    ) -> Result<Value, ControlError> {
        let bad = |m: String| ControlError::new("invalid_argument", m);
        let life = Duration::from_secs(expires_s);
        if expires_s == 0 || life > send::MAX_EXPIRES {
            return Err(bad(format!(
                "expires_s {expires_s}: expected 1 to {}",
                send::MAX_EXPIRES.as_secs()
            )));
        }
        let p = PathBuf::from(&path);
        if !p.is_absolute() {
            return Err(bad(format!("path {path:?} is not absolute")));
        }
        if self.peer.local_addr().is_none() {
            return Err(ControlError::new(
                "failed",
                "this daemon does not listen on TCP (set `listen`): receivers could not reach it; use juxta send --no-daemon",
            ));
        }
        {
            let mut t = self.lock();
            if t.serving.len() + t.preparing >= self.limit {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(ControlError::new(
                    "limit",
                    format!(
                        "the daemon serves {} transfers already (limits.transfers); stop one with juxta send --stop TICKET",
                        self.limit
                    ),
                ));
            }
            t.preparing += 1;
        }
        let prepared = tokio::task::spawn_blocking(move || send::prepare(&p)).await;
        let offer = {
            let mut t = self.lock();
            t.preparing -= 1;
            match prepared {
                Ok(Ok(o)) => o,
                Ok(Err(e)) => return Err(ControlError::new("invalid_argument", e.to_string())),
                Err(e) => return Err(ControlError::new("failed", e.to_string())),
            }
        };
        let expires = unix_now().saturating_add(expires_s);
        let (server, ticket) = send::bind(&self.peer, expires)
            .map_err(|e| ControlError::new("failed", e.to_string()))?;
        let text = ticket
            .encode()
            .map_err(|e| ControlError::new("failed", e.to_string()))?;
        let stats = Arc::new(ServeStats::default());
        let opts = ServeOpts {
            expires,
            once,
            max_receivers: send::MAX_RECEIVERS,
            test_stop: None,
            stderr: false,
        };
        let (files, bytes) = (offer.sources.len(), offer.total);
        let mut t = self.lock();
        t.next_id += 1;
        let id = t.next_id;
        // The task records its end under the lock: it waits for the
        // insertion below.
        let me = self.clone();
        let st = stats.clone();
        let task = tokio::spawn(async move {
            let r = send::serve_offer(server, Arc::new(offer), opts, st).await;
            let reason = match r {
                Ok(e @ (Ended::Completed | Ended::Expired)) => e.as_str().to_string(),
                Err(e) => format!("failed: {e}"),
            };
            tracing::info!(id, %reason, "transfer ended");
            me.end(id, reason);
        });
        t.serving.insert(
            id,
            Served {
                ticket: text.clone(),
                path: path.clone(),
                files,
                bytes,
                expires,
                once,
                stats,
                task: task.abort_handle(),
            },
        );
        drop(t);
        tracing::info!(id, %path, files, bytes, expires, "serving a transfer");
        Ok(json!({
            "id": id,
            "ticket": text,
            "peer": ticket.peer.to_string(),
            "addrs": ticket.addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            "files": files,
            "bytes": bytes,
            "expires": expires,
        }))
    }

    /// Moves a transfer to the ended list.
    fn end(&self, id: u64, reason: String) -> Option<EndedRec> {
        let mut t = self.lock();
        let s = t.serving.remove(&id)?;
        s.task.abort();
        let rec = EndedRec {
            id,
            ticket: s.ticket,
            path: s.path,
            reason,
            expires: s.expires,
            completed: s.stats.completed.load(Ordering::Relaxed),
            bytes_sent: s.stats.bytes_sent.load(Ordering::Relaxed),
        };
        let out = rec.clone();
        if t.ended.len() >= ENDED_KEPT {
            t.ended.pop_front();
        }
        t.ended.push_back(rec);
        Some(out)
    }

    /// The `serve_stop` request: by ticket (any encoding of the same peer
    /// and pipe).
    pub fn stop(&self, ticket: &str) -> Result<Value, ControlError> {
        let want = Ticket::parse(ticket)
            .map_err(|e| ControlError::new("invalid_argument", e.to_string()))?;
        let id = {
            let t = self.lock();
            t.serving
                .iter()
                .find(|(_, s)| {
                    Ticket::parse(&s.ticket)
                        .is_ok_and(|x| x.pipe == want.pipe && x.peer == want.peer)
                })
                .map(|(id, _)| *id)
        };
        let rec = id
            .and_then(|id| self.end(id, "stopped".into()))
            .ok_or_else(|| {
                ControlError::new("not_found", "this daemon does not serve that ticket")
            })?;
        tracing::info!(id = rec.id, "transfer stopped");
        Ok(json!({ "id": rec.id, "completed": rec.completed, "bytes_sent": rec.bytes_sent }))
    }

    /// Stops every transfer (the daemon's stop).
    pub fn stop_all(&self) {
        let t = self.lock();
        for s in t.serving.values() {
            s.task.abort();
        }
    }

    /// The `transfers` answer (also part of `status`).
    pub fn list(&self) -> Value {
        let t = self.lock();
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let serving: Vec<Value> = t
            .serving
            .iter()
            .map(|(id, s)| {
                json!({
                    "id": id,
                    "ticket": s.ticket,
                    "path": s.path,
                    "files": s.files,
                    "bytes": s.bytes,
                    "expires": s.expires,
                    "once": s.once,
                    "active": ld(&s.stats.active),
                    "completed": ld(&s.stats.completed),
                    "failed": ld(&s.stats.failed),
                    "refused_busy": ld(&s.stats.refused_busy),
                    "refused_expired": ld(&s.stats.refused_expired),
                    "bytes_sent": ld(&s.stats.bytes_sent),
                })
            })
            .collect();
        let ended: Vec<Value> = t
            .ended
            .iter()
            .map(|e| {
                json!({
                    "id": e.id,
                    "ticket": e.ticket,
                    "path": e.path,
                    "reason": e.reason,
                    "expires": e.expires,
                    "completed": e.completed,
                    "bytes_sent": e.bytes_sent,
                })
            })
            .collect();
        json!({
            "limit": self.limit,
            "refused": self.refused.load(Ordering::Relaxed),
            "serving": serving,
            "ended": ended,
        })
    }
}
