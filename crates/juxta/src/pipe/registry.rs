//! What the pipe service keeps per peer: the input pipes open here (so the
//! resolver can answer binding queries) and the sinks of secure input
//! pipes; and [`Bindings`], the output-pipe resolutions in progress: the
//! sans-IO [`Binder`] owned by the resolver task, which drives its timer,
//! sends its queries and feeds it the answers. [`resolve`] asks that task
//! with a command and awaits the outcome: no lock is shared with it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::endpoint::Delivery;
use juxta_proto::id::{PeerId, PipeId};
use juxta_proto::message::Message;
use juxta_proto::pipe::binding::{
    BindEvent, BindId, Binder, OutgoingQuery, PipeResolverMsg, PIPE_RESOLVER_HANDLER,
};
use juxta_proto::resolver::{query_queue, ResolverQuery, RESOLVER_SERVICE};
use juxta_proto::time::Millis;
use tokio::sync::{mpsc, oneshot};

use super::PipeError;
use crate::peer::Inner;

/// Most resolutions in progress at once.
pub(crate) const MAX_BINDS: usize = 1024;

pub(crate) struct PipeRegistry {
    /// Open input pipes: type and the unique value of their group.
    inputs: RwLock<HashMap<PipeId, (PipeType, String)>>,
    secure_sinks: RwLock<HashMap<PipeId, mpsc::Sender<Delivery>>>,
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
}

/// A resolution a caller of [`resolve`] asks the resolver task for.
pub(crate) struct BindRequest {
    /// The group (`None`: the Net peer group).
    pub(crate) scope: Option<Arc<crate::group::GroupCtx>>,
    /// The pipe.
    pub(crate) pipe: PipeAdvertisement,
    /// The peers to ask (the rendezvous, the peers named, or every
    /// connected peer).
    pub(crate) candidates: Vec<PeerId>,
    /// One of the candidates is our rendezvous: the holder it forwards
    /// the query to answers, a peer we did not ask.
    pub(crate) via_rdv: bool,
    /// How long to wait for a positive answer.
    pub(crate) timeout: Duration,
    /// Where the outcome goes.
    pub(crate) reply: oneshot::Sender<Result<PeerId, PipeError>>,
}

/// A resolution in progress: its group and whom to tell.
struct Waiter {
    scope: Option<Arc<crate::group::GroupCtx>>,
    pipe: PipeId,
    timeout: Duration,
    reply: oneshot::Sender<Result<PeerId, PipeError>>,
}

/// The output-pipe resolutions in progress: the resolver task's.
pub(crate) struct Bindings {
    binder: Binder,
    waiting: HashMap<BindId, Waiter>,
}

impl Bindings {
    pub(crate) fn new() -> Bindings {
        Bindings {
            binder: Binder::new(rand::random::<u16>() as i32 + 1, MAX_BINDS),
            waiting: HashMap::new(),
        }
    }

    /// Starts a resolution and sends its first query (refused with
    /// [`PipeError::TooManyBinds`] when [`MAX_BINDS`] are in progress).
    pub(crate) fn start(&mut self, inner: &Arc<Inner>, req: BindRequest, now: Millis) {
        let BindRequest {
            scope,
            pipe,
            candidates,
            via_rdv,
            timeout,
            reply,
        } = req;
        if self.binder.len() >= MAX_BINDS {
            // Make room first: resolutions whose caller stopped waiting.
            self.reap();
        }
        let bind = match self
            .binder
            .start(now, pipe.id, pipe.pipe_type, candidates, timeout)
        {
            Ok(b) => b,
            Err(_) => {
                let _ = reply.send(Err(PipeError::TooManyBinds(MAX_BINDS)));
                return;
            }
        };
        if via_rdv {
            self.binder.accept_answers_from_any(bind);
        }
        self.waiting.insert(
            bind,
            Waiter {
                scope,
                pipe: pipe.id,
                timeout,
                reply,
            },
        );
        self.run(inner);
    }

    /// A binding answer arrived.
    pub(crate) fn on_answer(
        &mut self,
        inner: &Arc<Inner>,
        now: Millis,
        query_id: i32,
        msg: PipeResolverMsg,
        from: Option<PeerId>,
    ) {
        let Some(from) = from else { return };
        if self.binder.handle_answer(now, query_id, msg, from) {
            self.run(inner);
        }
    }

    /// When [`Bindings::handle_timeout`] is next due.
    pub(crate) fn poll_timeout(&self) -> Option<Millis> {
        self.binder.poll_timeout()
    }

    /// Re-sends due queries, ends resolutions past their deadline, and
    /// drops those whose caller stopped waiting.
    pub(crate) fn handle_timeout(&mut self, inner: &Arc<Inner>, now: Millis) {
        self.reap();
        self.binder.handle_timeout(now);
        self.run(inner);
    }

    /// Forgets the resolutions whose caller stopped waiting.
    fn reap(&mut self) {
        let binder = &mut self.binder;
        self.waiting.retain(|b, w| {
            let open = !w.reply.is_closed();
            if !open {
                binder.cancel(*b);
            }
            open
        });
    }

    /// Carries out the binder's events: queries out, outcomes to their
    /// callers.
    fn run(&mut self, inner: &Arc<Inner>) {
        while let Some(ev) = self.binder.poll_event() {
            let bind = ev.bind();
            if let BindEvent::Query(q) = &ev {
                if let Some(w) = self.waiting.get(&bind) {
                    send_query(inner, w.scope.as_ref(), q);
                }
                continue;
            }
            let Some(w) = self.waiting.remove(&bind) else {
                continue;
            };
            let outcome = match ev {
                BindEvent::Bound { peer, .. } => Ok(peer),
                BindEvent::NotFound { .. } => Err(PipeError::NotFound(w.pipe.to_string())),
                BindEvent::Query(_) | BindEvent::TimedOut { .. } => {
                    Err(PipeError::ResolveTimeout {
                        pipe: w.pipe.to_string(),
                        timeout: w.timeout,
                    })
                }
            };
            let _ = w.reply.send(outcome);
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
    // Asking our rendezvous: the answer comes from whoever holds the pipe,
    // a peer we did not ask.
    let via_rdv = crate::group::rdv_of(inner, scope)
        .and_then(|h| h.status().leased_to)
        .is_some_and(|r| candidates.contains(&r));
    let (reply, rx) = oneshot::channel();
    let req = BindRequest {
        scope: scope.cloned(),
        pipe: adv.clone(),
        candidates,
        via_rdv,
        timeout,
        reply,
    };
    // The resolver task owns the resolutions: it sends the queries, feeds
    // the answers and runs the timer. Dropping this future drops `rx`; the
    // task then forgets the resolution at its next timer.
    if !inner
        .commands
        .send(crate::resolver::Command::Bind(req))
        .await
    {
        return Err(PipeError::Stopped);
    }
    rx.await.map_err(|_| PipeError::Stopped)?
}

/// Sends one binding query to each of its peers (through the router, as JXSE
/// expects; a direct send on compact connections).
fn send_query(inner: &Arc<Inner>, scope: Option<&Arc<crate::group::GroupCtx>>, q: &OutgoingQuery) {
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
