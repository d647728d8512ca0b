//! What the pipe service keeps per peer: the input pipes open here (so the
//! resolver can answer binding queries), the sinks of secure input pipes,
//! and the output-pipe resolutions in progress, driven through the sans-IO
//! [`Binder`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::endpoint::Delivery;
use juxta_proto::id::{PeerId, PipeId};
use juxta_proto::message::Message;
use juxta_proto::pipe::binding::{
    BindEvent, BindId, Binder, BinderAction, OutgoingQuery, PipeResolverMsg, PIPE_RESOLVER_HANDLER,
};
use juxta_proto::resolver::{query_queue, ResolverQuery, RESOLVER_SERVICE};
use tokio::sync::{mpsc, oneshot};

use super::PipeError;
use crate::peer::Inner;

/// Most resolutions in progress at once.
pub(crate) const MAX_BINDS: usize = 1024;

pub(crate) struct PipeRegistry {
    /// Open input pipes: type and the unique value of their group.
    inputs: RwLock<HashMap<PipeId, (PipeType, String)>>,
    secure_sinks: RwLock<HashMap<PipeId, mpsc::Sender<Delivery>>>,
    binds: Mutex<Binds>,
}

struct Binds {
    binder: Binder,
    waiting: HashMap<BindId, oneshot::Sender<BindEvent>>,
}

/// Keeps an input pipe registered; dropping it unregisters the pipe.
pub(crate) struct Registration {
    inner: Weak<Inner>,
    id: PipeId,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner
                .pipes
                .inputs
                .write()
                .expect("pipes lock")
                .remove(&self.id);
            inner
                .pipes
                .secure_sinks
                .write()
                .expect("pipes lock")
                .remove(&self.id);
        }
    }
}

impl PipeRegistry {
    pub(crate) fn new() -> PipeRegistry {
        PipeRegistry {
            inputs: RwLock::new(HashMap::new()),
            secure_sinks: RwLock::new(HashMap::new()),
            binds: Mutex::new(Binds {
                binder: Binder::new(rand::random::<u16>() as i32 + 1, MAX_BINDS),
                waiting: HashMap::new(),
            }),
        }
    }

    pub(crate) fn register_input(
        &self,
        inner: &Arc<Inner>,
        adv: &PipeAdvertisement,
        group: &str,
    ) -> Result<Registration, PipeError> {
        let mut m = self.inputs.write().expect("pipes lock");
        if m.contains_key(&adv.id) {
            return Err(PipeError::AlreadyOpen(adv.id.to_string()));
        }
        m.insert(adv.id, (adv.pipe_type, group.to_string()));
        Ok(Registration {
            inner: Arc::downgrade(inner),
            id: adv.id,
        })
    }

    /// Whether an input pipe `id` of type `ty` is open here in the group
    /// whose unique value is `group`.
    pub(crate) fn has_input(&self, id: &PipeId, ty: PipeType, group: &str) -> bool {
        self.inputs
            .read()
            .expect("pipes lock")
            .get(id)
            .is_some_and(|(t, g)| *t == ty && g == group)
    }

    /// Closes an input pipe (its group was left): no more binding answers
    /// or secure records for it.
    pub(crate) fn close_input(&self, id: &PipeId) {
        self.inputs.write().expect("pipes lock").remove(id);
        self.secure_sinks.write().expect("pipes lock").remove(id);
    }

    pub(crate) fn set_secure_sink(&self, id: &PipeId, tx: mpsc::Sender<Delivery>) {
        self.secure_sinks
            .write()
            .expect("pipes lock")
            .insert(*id, tx);
    }

    pub(crate) fn secure_sink(&self, id: &PipeId) -> Option<mpsc::Sender<Delivery>> {
        self.secure_sinks
            .read()
            .expect("pipes lock")
            .get(id)
            .cloned()
    }

    /// A binding answer arrived from the resolver.
    pub(crate) fn on_answer(&self, query_id: i32, msg: PipeResolverMsg, from: Option<PeerId>) {
        let mut b = self.binds.lock().expect("binds lock");
        let Some(from) = from else { return };
        if let Some(ev) = b.binder.handle_answer(Instant::now(), query_id, msg, from) {
            let id = ev.bind();
            if let Some(tx) = b.waiting.remove(&id) {
                let _ = tx.send(ev);
            }
        }
    }
}

/// Resolves which peer holds the input pipe of `adv`.
pub(crate) async fn resolve(
    inner: &Arc<Inner>,
    scope: Option<&Arc<crate::group::GroupCtx>>,
    adv: &PipeAdvertisement,
    peers: &[PeerId],
    timeout: Duration,
) -> Result<PeerId, PipeError> {
    // Peers named but not connected: find a route to them first (through
    // a relay), so the binding query and the pipe can use it.
    // Searched in parallel; when none of them can be reached, the first
    // one's reasons are reported at once (no binding timeout to wait for).
    if !peers.is_empty() {
        let mut search = tokio::task::JoinSet::new();
        for (i, p) in peers.iter().enumerate() {
            let (inner, p) = (inner.clone(), *p);
            search.spawn(async move {
                (
                    i,
                    crate::relay::route::messenger_to(&inner, &p, timeout).await,
                )
            });
        }
        let mut first_err: Option<(usize, crate::relay::NoRoute)> = None;
        let mut reached = false;
        while let Some(r) = search.join_next().await {
            match r {
                // One reachable peer is enough to ask; the others' search
                // goes on in the background only as far as it got.
                Ok((_, Ok(_))) => {
                    reached = true;
                    break;
                }
                Ok((i, Err(e))) => {
                    if first_err.as_ref().is_none_or(|(j, _)| i < *j) {
                        first_err = Some((i, e));
                    }
                }
                Err(_) => return Err(PipeError::Stopped),
            }
        }
        if let (false, Some((_, e))) = (reached, first_err) {
            return Err(e.into());
        }
    }
    // In a subgroup with its own rendezvous leased, an open binding asks
    // it (its SRDI index forwards the query to the holder).
    let group_rdv = scope
        .and_then(|c| c.rendezvous())
        .and_then(|h| h.status().leased_to);
    let candidates = match group_rdv {
        Some(r) if peers.is_empty() => vec![r],
        _ if peers.is_empty() => inner.connected_peers(),
        _ => peers.to_vec(),
    };
    if candidates.is_empty() {
        return Err(PipeError::NotConnected("any peer".into()));
    }
    let (tx, mut rx) = oneshot::channel();
    let (bind, first) = {
        let mut b = inner.pipes.binds.lock().expect("binds lock");
        // Asking our rendezvous: the answer comes from whoever holds the
        // pipe, a peer we did not ask.
        let via_rdv = crate::group::rdv_of(inner, scope)
            .and_then(|h| h.status().leased_to)
            .is_some_and(|r| candidates.contains(&r));
        let (bind, q) = b
            .binder
            .start(Instant::now(), adv.id, adv.pipe_type, candidates, timeout)
            .map_err(|_| PipeError::TooManyBinds(MAX_BINDS))?;
        if via_rdv {
            b.binder.accept_answers_from_any(bind);
        }
        b.waiting.insert(bind, tx);
        (bind, q)
    };
    // Removes the waiter and the binder entry however this future ends.
    let _guard = CancelOnDrop { inner, bind };
    send_query(inner, scope, &first).await;
    loop {
        let next = inner
            .pipes
            .binds
            .lock()
            .expect("binds lock")
            .binder
            .poll_timeout();
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ev = &mut rx => {
                return match ev {
                    Ok(BindEvent::Bound { peer, .. }) => Ok(peer),
                    Ok(BindEvent::NotFound { .. }) => Err(PipeError::NotFound(adv.id.to_string())),
                    Ok(BindEvent::TimedOut { .. }) | Err(_) => Err(PipeError::ResolveTimeout { pipe: adv.id.to_string(), timeout }),
                };
            }
            _ = sleep => {
                let actions = {
                    let mut b = inner.pipes.binds.lock().expect("binds lock");
                    let actions = b.binder.handle_timeout(Instant::now());
                    let mut resend = Vec::new();
                    for a in actions {
                        match a {
                            BinderAction::Send(q) => resend.push(q),
                            BinderAction::Event(ev) => {
                                if let Some(tx) = b.waiting.remove(&ev.bind()) {
                                    let _ = tx.send(ev);
                                }
                            }
                        }
                    }
                    resend
                };
                for q in &actions {
                    send_query(inner, scope, q).await;
                }
            }
        }
    }
}

struct CancelOnDrop<'a> {
    inner: &'a Arc<Inner>,
    bind: BindId,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let mut b = self.inner.pipes.binds.lock().expect("binds lock");
        b.waiting.remove(&self.bind);
        b.binder.cancel(self.bind);
    }
}

/// Sends one binding query to each of its peers (through the router, as JXSE
/// expects; a direct send on compact connections).
async fn send_query(
    inner: &Arc<Inner>,
    scope: Option<&Arc<crate::group::GroupCtx>>,
    q: &OutgoingQuery,
) {
    let g = match scope {
        Some(c) => c.unique.clone(),
        None => inner.group_unique().to_string(),
    };
    let rdv = crate::group::rdv_of(inner, scope).and_then(|h| h.status().leased_to);
    for peer in &q.peers {
        let Some(m) = inner.messenger(peer) else {
            tracing::debug!(%peer, "no connection for a pipe binding query");
            continue;
        };
        let doc = ResolverQuery {
            handler: PIPE_RESOLVER_HANDLER.to_string(),
            query_id: q.query_id,
            hop_count: 0,
            src_peer: *inner.identity.peer_id(),
            // To our rendezvous the query names no peer (as JXSE's
            // resolution through a rendezvous): the rendezvous forwards it
            // to the holder its SRDI index names, which answers.
            query: match (&q.msg, rdv == Some(*peer)) {
                (
                    PipeResolverMsg::Query {
                        pipe_id, pipe_type, ..
                    },
                    true,
                ) => PipeResolverMsg::Query {
                    pipe_id: *pipe_id,
                    pipe_type: *pipe_type,
                    peers: Vec::new(),
                }
                .to_xml(),
                _ => q.msg.to_xml(),
            },
            // So a peer the query is forwarded to (by a rendezvous) can
            // answer directly.
            src_route: crate::discovery::local_route(inner),
        };
        let queue = query_queue(&g);
        let sent = match scope {
            Some(c) => {
                let msg = c.message(&queue, doc.to_element(&g));
                m.post_routed_in(&g, RESOLVER_SERVICE, Some(&queue), msg)
            }
            None => m.post_routed(
                RESOLVER_SERVICE,
                Some(&queue),
                Message::new().with(doc.to_element(&g)),
            ),
        };
        if let Err(e) = sent {
            tracing::debug!(%peer, error = %e, "pipe binding query not sent");
        }
    }
}
