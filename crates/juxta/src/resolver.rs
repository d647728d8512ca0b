//! The resolver service (PRP) task: receives resolver queries and responses
//! for this peer and hands them to the protocol that owns their handler.
//! For now that is the Pipe Binding Protocol (`JxtaPipeResolver`); queries
//! for other handlers are counted and dropped.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use juxta_proto::advertisement::PipeType;
use juxta_proto::endpoint::{Delivery, ServiceAddress};
use juxta_proto::id::PeerId;
use juxta_proto::pipe::binding::{PipeResolverMsg, PIPE_RESOLVER_HANDLER};
use juxta_proto::resolver::{
    query_queue, response_queue, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use tokio::task::JoinHandle;

use crate::peer::{Inner, PeerError};

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
    let weak = Arc::downgrade(inner);
    Ok(tokio::spawn(async move {
        loop {
            let (d, is_query) = tokio::select! {
                d = queries.recv() => (d, true),
                d = responses.recv() => (d, false),
            };
            let (Some(d), Some(inner)) = (d, weak.upgrade()) else {
                return;
            };
            let r = if is_query {
                on_query(&inner, &g, d).await
            } else {
                on_response(&inner, &g, d)
            };
            if let Err(why) = r {
                inner.stats.resolver_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%why, "resolver message dropped");
            }
        }
    }))
}

async fn on_query(inner: &Arc<Inner>, g: &str, d: Delivery) -> Result<(), String> {
    let q = ResolverQuery::from_message(&d.message, g).map_err(|e| e.to_string())?;
    if q.handler != PIPE_RESOLVER_HANDLER {
        tracing::debug!(handler = %q.handler, "resolver query for a handler we do not run");
        return Ok(());
    }
    let msg = PipeResolverMsg::parse(&q.query).map_err(|e| e.to_string())?;
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
) -> Result<(), String> {
    let m = inner
        .messenger(&to)
        .or_else(|| via.and_then(|v| inner.messenger(&v)))
        .ok_or_else(|| format!("no connection to {to} for the answer"))?;
    let msg = juxta_proto::message::Message::new().with(resp.to_element(g));
    m.send_routed(RESOLVER_SERVICE, Some(&response_queue(g)), msg)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn on_response(inner: &Arc<Inner>, g: &str, d: Delivery) -> Result<(), String> {
    let r = ResolverResponse::from_message(&d.message, g).map_err(|e| e.to_string())?;
    if r.handler != PIPE_RESOLVER_HANDLER {
        return Ok(());
    }
    let msg = PipeResolverMsg::parse(&r.response).map_err(|e| e.to_string())?;
    inner.pipes.on_answer(r.query_id, msg, d.from);
    Ok(())
}
