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
use juxta_proto::resolver::{
    query_queue, response_queue, ResolverError, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use tokio::task::JoinHandle;

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

async fn handle(inner: &Arc<Inner>, net: &str, d: Delivery) -> Result<(), Fault> {
    let param = d.to.param.clone();
    let Some((is_query, qg)) = classify(param.as_deref()) else {
        // E.g. SRDI (`<group>Srdi`), which no service here handles: the
        // same count as a message with no listener.
        inner.stats.unroutable.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(queue = ?param, "resolver message on a queue we do not serve");
        return Ok(());
    };
    for scope in [d.group.as_deref(), Some(qg)].into_iter().flatten() {
        if scope == net {
            continue;
        }
        let ok =
            crate::group::group_of_unique(scope).is_some_and(|gid| inner.groups.may_deliver(&gid));
        if !ok {
            inner.stats.group_refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                group = scope,
                "resolver message for a group we are not in dropped"
            );
            return Ok(());
        }
    }
    let g = qg.to_string();
    if is_query {
        on_query(inner, &g, d).await
    } else {
        on_response(inner, &g, d).await
    }
}

fn is_discovery(handler: &str) -> bool {
    handler.starts_with(DISCOVERY_HANDLER)
}

/// Flow control of one peer's queries; `false` (counted): drop it.
fn admit(inner: &Inner, d: &Delivery, src: PeerId) -> bool {
    let who = d.from.unwrap_or(src);
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

async fn on_query(inner: &Arc<Inner>, g: &str, d: Delivery) -> Result<(), Fault> {
    let q = ResolverQuery::from_message(&d.message, g)?;
    if is_discovery(&q.handler) {
        if !admit(inner, &d, q.src_peer) {
            return Ok(());
        }
        let dq = DiscoveryQuery::parse(&q.query)?;
        let r = crate::discovery::answer(inner, &dq).await?;
        let resp = ResolverResponse {
            handler: q.handler.clone(),
            query_id: q.query_id,
            response: r.to_xml(),
        };
        return send_response(inner, g, q.src_peer, d.from, resp).await;
    }
    if q.handler == juxta_proto::endpoint::route_query::ROUTER_HANDLER {
        return match crate::relay::route::on_query(inner, g, &q, d.from).await? {
            Some(resp) => send_response(inner, g, q.src_peer, d.from, resp).await,
            None => Ok(()),
        };
    }
    if q.handler == PEERINFO_HANDLER {
        if !admit(inner, &d, q.src_peer) {
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
        return send_response(inner, g, q.src_peer, d.from, resp).await;
    }
    if q.handler != PIPE_RESOLVER_HANDLER {
        tracing::debug!(handler = %q.handler, "resolver query for a handler we do not run");
        return Ok(());
    }
    let msg = PipeResolverMsg::parse(&q.query)?;
    let me = *inner.identity.peer_id();
    let directed = matches!(&msg, PipeResolverMsg::Query { peers, .. } if peers.contains(&me));
    // Secure pipes speak TLS 1.3 to Juxta peers only (JXSE's secure pipes
    // use TLS 1.0 over its own transport): a peer on a connection in JXTA
    // framing is not told we hold one.
    let juxta_peer = d
        .from
        .and_then(|p| inner.messenger(&p))
        .is_some_and(|m| m.is_compact());
    let Some(answer) = juxta_proto::pipe::binding::answer_query(&me, &msg, directed, |id, ty| {
        (ty != PipeType::UnicastSecure || juxta_peer) && inner.pipes.has_input(id, ty)
    }) else {
        return Ok(());
    };
    let resp = ResolverResponse {
        handler: PIPE_RESOLVER_HANDLER.to_string(),
        query_id: q.query_id,
        response: answer.to_xml(),
    };
    send_response(inner, g, q.src_peer, d.from, resp).await
}

async fn send_response(
    inner: &Arc<Inner>,
    g: &str,
    to: PeerId,
    via: Option<PeerId>,
    resp: ResolverResponse,
) -> Result<(), Fault> {
    let m = inner
        .messenger(&to)
        .or_else(|| via.and_then(|v| inner.messenger(&v)))
        .ok_or(Fault::NoRoute(to))?;
    let msg = juxta_proto::message::Message::new().with(resp.to_element(g));
    m.send_routed(RESOLVER_SERVICE, Some(&response_queue(g)), msg)
        .await?;
    Ok(())
}

async fn on_response(inner: &Arc<Inner>, g: &str, d: Delivery) -> Result<(), Fault> {
    let r = ResolverResponse::from_message(&d.message, g)?;
    if is_discovery(&r.handler) {
        // Unsolicited remote publishes share the querier's token bucket.
        if r.query_id == 0 {
            let Some(from) = d.from else { return Ok(()) };
            if !admit(inner, &d, from) {
                return Ok(());
            }
        }
        let resp = DiscoveryResponse::parse(&r.response)?;
        crate::discovery::on_response(inner, r.query_id, resp).await;
        return Ok(());
    }
    if r.handler == juxta_proto::endpoint::route_query::ROUTER_HANDLER {
        crate::relay::route::on_response(inner, g, &r, d.from).await?;
        return Ok(());
    }
    if r.handler != PIPE_RESOLVER_HANDLER {
        return Ok(());
    }
    let msg = PipeResolverMsg::parse(&r.response)?;
    inner.pipes.on_answer(r.query_id, msg, d.from);
    Ok(())
}
