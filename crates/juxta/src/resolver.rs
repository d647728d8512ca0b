//! The resolver service (PRP) task: receives resolver queries and responses
//! for this peer and hands them to the protocol that owns their handler:
//! the Pipe Binding Protocol (`JxtaPipeResolver`), discovery (the
//! discovery class URN, possibly followed by the group, as JXSE names its
//! handlers) and peer info (PIP). Queries for other handlers are dropped.
//!
//! Group scoping: resolver queues are named after the group
//! (`<group unique ID>ORes`/`IRes`). Traffic for a group this peer has not
//! joined is dropped and counted ([`crate::Stats::group_refused`]); the Net
//! and World groups are open to all.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use juxta_proto::advertisement::PipeType;
use juxta_proto::discovery::peerinfo::{PeerInfoQuery, PEERINFO_HANDLER};
use juxta_proto::discovery::{DiscoveryQuery, DiscoveryResponse, DISCOVERY_HANDLER};
use juxta_proto::endpoint::{Delivery, ServiceAddress};
use juxta_proto::id::PeerId;
use juxta_proto::pipe::binding::{BindingError, PipeResolverMsg, PIPE_RESOLVER_HANDLER};
use juxta_proto::rendezvous::messages::BusyNotice;
use juxta_proto::resolver::{
    query_queue, response_queue, ResolverError, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use tokio::task::JoinHandle;

use crate::rendezvous::LOOKUP_HANDLER;

use crate::peer::{Inner, PeerError};

/// Why a resolver message was dropped (logged and counted).
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error(transparent)]
    Resolver(#[from] ResolverError),
    #[error(transparent)]
    Binding(#[from] BindingError),
    #[error(transparent)]
    Discovery(#[from] juxta_proto::discovery::DiscoveryError),
    #[error(transparent)]
    DiscoveryService(#[from] crate::discovery::DiscoveryError),
    #[error(transparent)]
    Send(#[from] crate::SendError),
    #[error("no connection to {0} for the answer")]
    NoRoute(PeerId),
    #[error(transparent)]
    Route(#[from] crate::relay::route::RouteFault),
}

/// Starts the resolver task of a peer.
pub(crate) fn spawn(inner: &Arc<Inner>) -> Result<JoinHandle<()>, PeerError> {
    let g = inner.group_unique().to_string();
    let mut queries = inner.add_listener(ServiceAddress::new(
        RESOLVER_SERVICE,
        Some(&query_queue(&g)),
    ))?;
    let mut responses = inner.add_listener(ServiceAddress::new(
        RESOLVER_SERVICE,
        Some(&response_queue(&g)),
    ))?;
    // Queues of other groups (subgroups) arrive here.
    let mut others = inner.add_listener(ServiceAddress::new(RESOLVER_SERVICE, None))?;
    let weak = Arc::downgrade(inner);
    Ok(tokio::spawn(async move {
        loop {
            let d = tokio::select! {
                d = queries.recv() => d,
                d = responses.recv() => d,
                d = others.recv() => d,
            };
            let (Some(d), Some(inner)) = (d, weak.upgrade()) else {
                return;
            };
            if let Err(why) = handle(&inner, &g, d).await {
                inner.stats.resolver_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%why, "resolver message dropped");
            }
        }
    }))
}

/// The group unique value and direction (`true`: query) of a queue name.
fn classify(param: Option<&str>) -> Option<(bool, &str)> {
    let p = param?;
    if let Some(g) = p.strip_suffix("ORes") {
        Some((true, g))
    } else {
        p.strip_suffix("IRes").map(|g| (false, g))
    }
}

async fn handle(inner: &Arc<Inner>, net: &str, mut d: Delivery) -> Result<(), Fault> {
    let param = d.to.param.clone();
    let Some((is_query, qg)) = classify(param.as_deref()) else {
        // E.g. SRDI (`<group>Srdi`), which no service here handles: the
        // same count as a message with no listener.
        inner.stats.unroutable.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(queue = ?param, "resolver message on a queue we do not serve");
        return Ok(());
    };
    // The group: the queue's. A message addressed in one group (its
    // mangled address) for another group's queue is refused, as is one
    // for a group we are not in.
    let addressed = d.group.as_deref().filter(|a| *a != net);
    let scope = if qg == net {
        if addressed.is_some() {
            None
        } else {
            Some(None)
        }
    } else if addressed.is_some_and(|a| a != qg) {
        None
    } else {
        inner.groups.get(qg).filter(|c| !c.is_closed()).map(Some)
    };
    let Some(ctx) = scope else {
        inner.stats.group_refused.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            group = qg,
            "resolver message for a group we are not in dropped"
        );
        return Ok(());
    };
    // A query the group's own rendezvous propagated here was checked
    // there and arrived under its verified member seal.
    let vouched = matches!((&ctx, d.vouched_in.as_deref()), (Some(c), Some(v)) if *c.unique == *v);
    if let Some(c) = ctx.as_ref().filter(|_| !vouched) {
        let queue = param.as_deref().unwrap_or_default();
        match c.authenticate(queue, &d.message, d.from) {
            // Sealed: the message is what the seal held.
            Ok(Some(m)) => d.message = m,
            Ok(None) => {}
            Err(e) => {
                let n = inner
                    .stats
                    .group_unauthenticated
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                if n.is_power_of_two() {
                    tracing::info!(group = qg, from = ?d.from, error = %e, refused = n, "group message without a valid member tag dropped");
                }
                return Ok(());
            }
        }
    }
    let g = qg.to_string();
    if is_query {
        on_query(inner, ctx.as_ref(), &g, d).await
    } else {
        on_response(inner, ctx.as_ref(), &g, d).await
    }
}

/// The advertisement cache of the group (`None`: the Net peer group's).
fn cache_of(
    inner: &Inner,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
) -> Option<crate::cache::CacheHandle> {
    match ctx {
        None => Some(inner.discovery.cache.clone()),
        Some(c) => c.cache(),
    }
}

fn is_discovery(handler: &str) -> bool {
    handler.starts_with(DISCOVERY_HANDLER)
}

/// Flow control of one peer's queries (discovery, peer info, pipe binding,
/// route queries share one budget per peer, see
/// [`crate::discovery::DiscoveryConfig::query_rate`]); `false` (counted):
/// drop it.
fn admit(
    inner: &Inner,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
    d: &Delivery,
    src: PeerId,
) -> bool {
    // A query forwarded by a rendezvous of our peer view (or by the
    // rendezvous this edge leases) was admitted there under its querier's
    // budget: it is charged to the querier it names. Charged to the
    // forwarder, everything one rendezvous forwards would share one
    // peer's rate (two rendezvous at 1,000 queries/s lost 30 %).
    let who = match (d.from, crate::group::rdv_of(inner, ctx)) {
        (Some(f), Some(h)) if f != src && h.is_forwarder(&f) => src,
        (from, _) => from.unwrap_or(src),
    };
    if inner.discovery.allow_query(who, Instant::now()) {
        true
    } else {
        let n = inner
            .stats
            .discovery_throttled
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        if n.is_power_of_two() {
            tracing::info!(peer = %who, throttled = n, "discovery queries throttled");
        }
        false
    }
}

async fn on_query(
    inner: &Arc<Inner>,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
    g: &str,
    d: Delivery,
) -> Result<(), Fault> {
    let q = ResolverQuery::from_message(&d.message, g)?;
    // The rendezvous of the query's group (its SRDI index, its walker):
    // the Net peer group's, or the subgroup's own; a query in a group is
    // never answered from another group's index.
    let rdv = crate::group::rdv_of(inner, ctx);
    if q.handler == crate::group::CRL_HANDLER {
        if let Some(c) = ctx {
            if admit(inner, ctx, &d, q.src_peer) {
                if let Some(from) = d.from.filter(|f| *f == q.src_peer) {
                    crate::group::on_revocations_query(inner, c, from, &q.query);
                }
            }
        }
        return Ok(());
    }
    if q.handler == LOOKUP_HANDLER {
        if let Some(h) = rdv {
            h.resolver_query(d.from, q, d.message, None).await;
        }
        return Ok(());
    }
    if is_discovery(&q.handler) {
        if !admit(inner, ctx, &d, q.src_peer) {
            return Ok(());
        }
        let dq = DiscoveryQuery::parse(&q.query)?;
        let Some(cache) = cache_of(inner, ctx) else {
            return Ok(());
        };
        let r = crate::discovery::answer(inner, &cache, &dq).await?;
        let on_rdv = rdv.filter(|h| h.is_rendezvous());
        // A peer answers when it holds something (JXSE answers only then,
        // `DiscoveryServiceImpl.processQuery`). An edge also answers
        // "nothing" to a querier that asked it directly, so that a direct
        // search can tell "nothing there" from "nobody answered"; never to
        // a query another peer forwarded (a rendezvous flooding it to its
        // edges): an empty answer there would reach the querier first and
        // end its search before the holder's answer. A rendezvous hands
        // the query to its SRDI index, which forwards it to the
        // publishers; they answer the querier themselves.
        let asked_directly = d.from == Some(q.src_peer);
        if !r.responses.is_empty() || (on_rdv.is_none() && asked_directly) {
            let resp = ResolverResponse {
                handler: q.handler.clone(),
                query_id: q.query_id,
                response: r.to_xml(),
            };
            send_response(inner, ctx, g, &q, d.from, resp).await?;
        }
        if let Some(h) = on_rdv {
            let key = match (&dq.attr, &dq.value) {
                (Some(a), Some(v)) if !a.trim().is_empty() => Some((
                    dq.kind.srdi_primary_key().to_string(),
                    a.trim().to_string(),
                    v.trim().to_string(),
                )),
                _ => None,
            };
            h.resolver_query(d.from, q, d.message, key).await;
        }
        return Ok(());
    }
    if q.handler == juxta_proto::endpoint::route_query::ROUTER_HANDLER {
        if !admit(inner, ctx, &d, q.src_peer) {
            return Ok(());
        }
        return match crate::relay::route::on_query(inner, g, &q, d.from).await? {
            Some(resp) => send_response(inner, ctx, g, &q, d.from, resp).await,
            None => Ok(()),
        };
    }
    if q.handler == PEERINFO_HANDLER {
        if !admit(inner, ctx, &d, q.src_peer) {
            return Ok(());
        }
        let pq = PeerInfoQuery::parse(&q.query)?;
        if pq.target != *inner.identity.peer_id() {
            return Ok(());
        }
        let uptime = inner.discovery.started.elapsed().as_millis() as u64;
        let mut resp = pq
            .answer(uptime, crate::cache::unix_now_ms(), None)
            .to_resolver_response(q.query_id);
        resp.handler = q.handler.clone();
        return send_response(inner, ctx, g, &q, d.from, resp).await;
    }
    if q.handler != PIPE_RESOLVER_HANDLER {
        tracing::debug!(handler = %q.handler, "resolver query for a handler we do not run");
        return Ok(());
    }
    if !admit(inner, ctx, &d, q.src_peer) {
        return Ok(());
    }
    let msg = PipeResolverMsg::parse(&q.query)?;
    let me = *inner.identity.peer_id();
    // A rendezvous that does not hold the pipe stays silent (a "not found"
    // would end the querier's binding) and forwards the query to the peer
    // its SRDI index names (`<pipe type>`/`Id`/pipe ID), which answers the
    // querier itself.
    if let (
        Some(h),
        PipeResolverMsg::Query {
            pipe_id, pipe_type, ..
        },
    ) = (rdv.filter(|h| h.is_rendezvous()), &msg)
    {
        if !inner.pipes.has_input(pipe_id, *pipe_type, g) {
            let key = Some((
                pipe_type.as_str().to_string(),
                "Id".to_string(),
                pipe_id.to_string(),
            ));
            h.resolver_query(d.from, q, d.message, key).await;
            return Ok(());
        }
    }
    let directed = matches!(&msg, PipeResolverMsg::Query { peers, .. } if peers.contains(&me));
    // Secure pipes speak TLS 1.3 to Juxta peers only (JXSE's secure pipes
    // use TLS 1.0 over its own transport): a peer on a direct connection in
    // JXTA framing is not told we hold one. A querier reached through a
    // relay may be either; it is answered, and its TLS handshake decides
    // (a JXSE peer fails there, with a clear error on its side).
    let jxta_framed_direct = d
        .from
        .and_then(|p| inner.messenger(&p))
        .is_some_and(|m| !m.is_routed() && !m.is_compact());
    let Some(answer) = juxta_proto::pipe::binding::answer_query(&me, &msg, directed, |id, ty| {
        (ty != PipeType::UnicastSecure || !jxta_framed_direct) && inner.pipes.has_input(id, ty, g)
    }) else {
        return Ok(());
    };
    let resp = ResolverResponse {
        handler: PIPE_RESOLVER_HANDLER.to_string(),
        query_id: q.query_id,
        response: answer.to_xml(),
    };
    send_response(inner, ctx, g, &q, d.from, resp).await
}

/// Dials made to answer queries from peers we have no connection to
/// (a query's `SrcPeerRoute`): any peer can send a query naming any
/// address, so these dials are bounded: one at a time per querier, at most
/// [`AnswerDials::MAX_IN_FLIGHT`] at once, and at most
/// [`AnswerDials::RATE`] new ones per second (burst
/// [`AnswerDials::BURST`]). A query beyond that is not answered (counted in
/// [`crate::Stats::dials_throttled`]); the querier's retry, or its
/// rendezvous, gets the answer later.
#[derive(Debug)]
pub(crate) struct AnswerDials {
    state: std::sync::Mutex<DialState>,
}

#[derive(Debug)]
struct DialState {
    in_flight: std::collections::HashSet<PeerId>,
    tokens: f64,
    at: Option<Instant>,
}

impl Default for AnswerDials {
    fn default() -> AnswerDials {
        AnswerDials {
            state: std::sync::Mutex::new(DialState {
                in_flight: std::collections::HashSet::new(),
                tokens: AnswerDials::BURST,
                at: None,
            }),
        }
    }
}

impl AnswerDials {
    /// Most answer dials in progress at once.
    pub(crate) const MAX_IN_FLIGHT: usize = 16;
    /// New answer dials per second, sustained.
    pub(crate) const RATE: f64 = 8.0;
    /// New answer dials allowed at once after a quiet period.
    pub(crate) const BURST: f64 = 16.0;

    /// Whether `to` may be dialled now; if so it counts as in progress
    /// until [`AnswerDials::finish`].
    fn try_start(&self, to: PeerId, now: Instant) -> bool {
        let mut s = self.state.lock().expect("answer dials lock");
        if let Some(at) = s.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * Self::RATE;
            s.tokens = (s.tokens + refill).min(Self::BURST);
        }
        s.at = Some(now);
        if s.in_flight.len() >= Self::MAX_IN_FLIGHT || s.tokens < 1.0 || s.in_flight.contains(&to) {
            return false;
        }
        s.tokens -= 1.0;
        s.in_flight.insert(to);
        true
    }

    fn finish(&self, to: &PeerId) {
        if let Ok(mut s) = self.state.lock() {
            s.in_flight.remove(to);
        }
    }
}

/// An answer dial in progress: ends when dropped.
pub(crate) struct DialTicket {
    inner: Arc<Inner>,
    to: PeerId,
}

impl DialTicket {
    /// A ticket for dialling `to` now, or `None` when the dial is refused.
    pub(crate) fn start(inner: &Arc<Inner>, to: PeerId, now: Instant) -> Option<DialTicket> {
        inner.answer_dials.try_start(to, now).then(|| DialTicket {
            inner: inner.clone(),
            to,
        })
    }
}

impl Drop for DialTicket {
    fn drop(&mut self) {
        self.inner.answer_dials.finish(&self.to);
    }
}

/// Most time spent dialling a querier's route to answer it.
const ANSWER_DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sends `resp` to the issuer of `q`: over a live connection (or known
/// route) to it; else, in the background, over a new connection to a TCP
/// address of the route its query carried (`SrcPeerRoute`), or over a
/// route found to it. Never through `via`, the peer the query came from,
/// unless that is the issuer.
async fn send_response(
    inner: &Arc<Inner>,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
    g: &str,
    q: &ResolverQuery,
    via: Option<PeerId>,
    resp: ResolverResponse,
) -> Result<(), Fault> {
    let to = q.src_peer;
    let queue = response_queue(g);
    let msg = match ctx {
        Some(c) => c.message(&queue, resp.to_element(g)),
        None => juxta_proto::message::Message::new().with(resp.to_element(g)),
    };
    // Answers are posted (written now or queued on the connection, never
    // awaited): one querier that stops reading cannot stall the resolver.
    if let Some(m) = inner.messenger(&to) {
        // An answer in JXTA framing is signed here (CBJX): a crypto permit.
        let _permit = if m.is_compact() {
            None
        } else {
            inner.crypto.acquire().await.ok()
        };
        m.post_routed_in(g, RESOLVER_SERVICE, Some(&queue), msg)?;
        return Ok(());
    }
    let dial: Vec<std::net::SocketAddr> = q
        .src_route
        .iter()
        .filter(|r| r.dest_peer == Some(to))
        .flat_map(|r| r.dest.addresses.iter())
        .filter_map(|ea| ea.strip_prefix("tcp://")?.parse().ok())
        .filter(|a: &std::net::SocketAddr| !a.ip().is_unspecified() && a.port() != 0)
        .take(4)
        .collect();
    // No connection to the querier: answer in the background, so the
    // resolver keeps serving. First over a new connection to an address
    // its query's route named (a query a rendezvous forwarded here, from a
    // peer never met); else, for a querier nobody can dial (an edge behind
    // its relay), over a route to it (through our relay, or a relay that
    // holds its signed route). Handing the answer to `via`, the peer that
    // forwarded the query, would give it to a peer that never asked.
    if via == Some(to) {
        return Err(Fault::NoRoute(to));
    }
    let Some(ticket) = DialTicket::start(inner, to, Instant::now()) else {
        let n = inner.stats.dials_throttled.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::info!(querier = %to, throttled = n, "answer to a querier we have no connection to not sent");
        }
        return Ok(());
    };
    let inner = inner.clone();
    let group = g.to_string();
    let tasks = inner.clone();
    tasks.tasks.spawn(async move {
        let _ticket = ticket;
        let mut found = None;
        for addr in dial {
            let c = tokio::time::timeout(
                ANSWER_DIAL_TIMEOUT,
                crate::peer::connect_to_peer(&inner, addr, Some(to)),
            )
            .await;
            if let Ok(Ok(m)) = c {
                if m.remote() == to {
                    found = Some(m);
                    break;
                }
            }
        }
        if found.is_none() {
            found = crate::relay::route::find_route(&inner, &to, ANSWER_DIAL_TIMEOUT)
                .await
                .ok();
        }
        match found {
            Some(m) => {
                if let Err(e) = m.post_routed_in(&group, RESOLVER_SERVICE, Some(&queue), msg) {
                    tracing::debug!(%to, error = %e, "answer not sent");
                }
            }
            None => {
                inner.stats.resolver_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%to, "no route to the querier for the answer");
            }
        }
    });
    Ok(())
}

async fn on_response(
    inner: &Arc<Inner>,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
    g: &str,
    d: Delivery,
) -> Result<(), Fault> {
    let rdv = crate::group::rdv_of(inner, ctx);
    if let Ok(Some(b)) = BusyNotice::from_message(&d.message) {
        if let Some(h) = rdv {
            h.busy(b).await;
        }
        return Ok(());
    }
    let r = ResolverResponse::from_message(&d.message, g)?;
    if r.handler == crate::group::CRL_HANDLER {
        if let Some(c) = ctx {
            crate::group::on_revocations(inner, c, &r.response);
        }
        return Ok(());
    }
    if r.handler == LOOKUP_HANDLER {
        if let Some(h) = rdv {
            h.resolver_response(r).await;
        }
        return Ok(());
    }
    if is_discovery(&r.handler) {
        // Unsolicited remote publishes share the querier's token bucket.
        if r.query_id == 0 {
            let Some(from) = d.from else { return Ok(()) };
            if !admit(inner, ctx, &d, from) {
                return Ok(());
            }
        }
        let resp = DiscoveryResponse::parse(&r.response)?;
        let Some(cache) = cache_of(inner, ctx) else {
            return Ok(());
        };
        crate::discovery::on_response(inner, g, &cache, r.query_id, resp, d.from, d.proven).await;
        return Ok(());
    }
    if r.handler == juxta_proto::endpoint::route_query::ROUTER_HANDLER {
        crate::relay::route::on_response(inner, g, &r, d.from).await?;
        return Ok(());
    }
    if r.handler == juxta_proto::endpoint::route_query::NO_ROUTE_HANDLER {
        crate::relay::route::on_no_route(inner, g, &r, d.from)?;
        return Ok(());
    }
    if r.handler != PIPE_RESOLVER_HANDLER {
        return Ok(());
    }
    let msg = PipeResolverMsg::parse(&r.response)?;
    inner.pipes.on_answer(r.query_id, msg, d.from);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u8) -> PeerId {
        PeerId::from_public_key_spki(&[n])
    }

    #[test]
    fn answer_dials_are_bounded_per_peer_in_flight_and_in_rate() {
        let d = AnswerDials::default();
        let t0 = Instant::now();
        assert!(d.try_start(peer(0), t0));
        // One dial at a time per querier.
        assert!(!d.try_start(peer(0), t0));
        d.finish(&peer(0));
        assert!(d.try_start(peer(0), t0));
        d.finish(&peer(0));
        // The burst is spent (two tokens used above); no more than
        // MAX_IN_FLIGHT at once either way.
        let mut started = 0;
        for i in 1..=100u8 {
            if d.try_start(peer(i), t0) {
                started += 1;
            }
        }
        assert_eq!(started, AnswerDials::BURST as usize - 2);
        assert!(started <= AnswerDials::MAX_IN_FLIGHT);
        for i in 1..=100u8 {
            d.finish(&peer(i));
        }
        // Nothing more without time passing; one second refills RATE.
        assert!(!d.try_start(peer(200), t0));
        let t1 = t0 + std::time::Duration::from_secs(1);
        let mut refilled = 0;
        for i in 101..=200u8 {
            if d.try_start(peer(i), t1) {
                refilled += 1;
            }
        }
        assert_eq!(refilled, AnswerDials::RATE as usize);
        // A clock that goes backwards refills nothing and does not panic.
        assert!(!d.try_start(peer(201), t0));
    }
}
