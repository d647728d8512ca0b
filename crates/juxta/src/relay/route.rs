//! The router's run-time paths: routed messages received on a connection
//! (checked, delivered here or forwarded), route queries and answers
//! (resolver handler `EndpointRouter`), and finding a route for a send.
//!
//! Route queries in flight ([`RouteSearches`]: the sans-IO
//! `RouteResolver` and this peer's own searches) belong to the resolver
//! task, where the answers arrive; [`find_route`] sends it a command and
//! awaits the outcome.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use juxta_proto::endpoint::route_query::{RouteResolver, RouteResolverConfig};
use juxta_proto::time::{later, Millis};
use tokio::sync::oneshot;

use juxta_proto::advertisement::tree::XmlElement;
use juxta_proto::advertisement::RouteAdvertisement;
use juxta_proto::endpoint::forward::{self, ForwardError, Inspected};
use juxta_proto::endpoint::route_query::{
    route_from_answer, route_through, NoAnswer, RouteEvent, RouteQuery, RouteResponse, Waiter,
    NO_ROUTE_HANDLER, ROUTER_HANDLER,
};
use juxta_proto::endpoint::route_trust::{self, AnswerFacts, BackFacts, Reach, Unvouched};
use juxta_proto::endpoint::signed_route::SignedRoute;
use juxta_proto::endpoint::{demangle, Delivery, ServiceAddress, ROUTER_SERVICE};
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use juxta_proto::relay::server::Offered;
use juxta_proto::relay::{Refusal, RelayResponse, RELAY_SERVICE};
use juxta_proto::resolver::{
    query_queue, response_queue, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use juxta_proto::wire::connection::Proof;

use crate::peer::Inner;
use crate::transport::tcp::Connection;

/// Handles a message received on `conn` before listener dispatch: router
/// and relay traffic is taken care of here; anything else comes back as a
/// delivery for a listener. The address comes demangled: the group (if
/// the wire address was mangled) and the service address it names.
pub(crate) async fn on_link_message(
    inner: &Arc<Inner>,
    conn: &Arc<Connection>,
    (group, real): (Option<Arc<str>>, Arc<ServiceAddress>),
    message: Message,
) -> Option<Delivery> {
    if real.service == RELAY_SERVICE {
        super::on_control(inner, conn, message).await;
        return None;
    }
    if !is_router_or_relay(&real) {
        return Some(link_delivery(conn, (group, real), message));
    }
    let link = conn.remote;
    let local = *inner.identity.peer_id();
    let checked = {
        let mut v = inner.router.verifier.lock().expect("router lock");
        forward::inspect(
            &local,
            &link,
            &message,
            &mut v,
            inner.router.max_hops,
            conn.compact_rx.load(Ordering::Acquire),
        )
    };
    let m = match checked {
        Ok(m) => m,
        Err(e) => {
            refused(inner, &link, &e);
            return None;
        }
    };
    learn_back(inner, &local, &link, &m);
    if m.dest == local {
        return match forward::into_local(message, &m) {
            Ok((to, message)) => {
                // A group address named in the router header (a group
                // message sent through a relay) gives the group.
                let (inner_group, to) = demangle(to);
                Some(Delivery {
                    vouched_in: None,
                    group: inner_group.map(Arc::from).or(group),
                    to: Arc::new(to),
                    from: Some(m.src),
                    message,
                    routed: true,
                    // Relayed on behalf of another peer: the router fingerprint
                    // is a bearer token, so only the link's own traffic counts.
                    proof: if m.src == link {
                        conn.proof()
                    } else {
                        Proof::Claimed
                    },
                })
            }
            Err(e) => {
                refused(inner, &link, &e);
                None
            }
        };
    }
    if let Err(e) = forward_message(inner, conn, m, message).await {
        refused(inner, &link, &e);
    }
    None
}

/// Whether a message to `to` is router or relay traffic, which
/// [`on_link_message`] checks (and may forward) before any listener sees
/// it; everything else goes straight to its listener
/// ([`link_delivery`]).
pub(crate) fn is_router_or_relay(to: &ServiceAddress) -> bool {
    to.service == ROUTER_SERVICE || to.service == RELAY_SERVICE
}

/// The delivery of a message received on `conn` for a listener here
/// (neither router nor relay traffic): from the connection's peer, as
/// proven as the connection.
pub(crate) fn link_delivery(
    conn: &Connection,
    (group, to): (Option<Arc<str>>, Arc<ServiceAddress>),
    message: Message,
) -> Delivery {
    Delivery {
        vouched_in: None,
        group,
        to,
        from: Some(conn.remote),
        message,
        routed: false,
        proof: conn.proof(),
    }
}

/// [`forward::rewrite_forwarded`] with the router's memory of the headers
/// it read and forwarded (a stream's header is encoded once).
fn rewrite_forwarded(
    inner: &Inner,
    message: &mut Message,
    local: &PeerId,
    m: &forward::Inspected,
    next: &[PeerId],
    compact_next: bool,
) {
    let mut v = inner.router.verifier.lock().expect("router lock");
    forward::rewrite_forwarded(message, local, &m.header, next, compact_next, v.headers());
}

fn refused(inner: &Inner, link: &PeerId, e: &ForwardError) {
    let s = &inner.stats;
    let c = match e {
        ForwardError::Loop(_) | ForwardError::HopLimit(_) => &s.route_loops,
        ForwardError::Spoofed { .. } | ForwardError::BadFingerprint(_) => &s.route_spoofed,
        ForwardError::NoRoute(_) | ForwardError::NotForwarding(_) => &s.route_no_route,
        ForwardError::NoRouterHeader
        | ForwardError::Malformed(_)
        | ForwardError::CompactMalformed(_)
        | ForwardError::CompactNotAllowed(_)
        | ForwardError::NotAPeer(_)
        | ForwardError::NoService => &s.route_malformed,
    };
    let n = c.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::info!(%link, error = %e, count = n, "routed message refused");
    } else {
        tracing::debug!(%link, error = %e, "routed message refused");
    }
}

/// Whether `peer` is the relay or the rendezvous this peer leases: the
/// peers that carry its traffic anyway (every query, SRDI push and
/// propagated message of an edge goes through its rendezvous), so a route
/// they claim to start at themselves adds nobody new to the path. JXSE
/// edges route through their rendezvous the same way: its router answers
/// a route query for a peer it has a connection to with a route through
/// itself (`RouteResolver.processQuery`, "direct route to destination").
pub(crate) fn carries_our_traffic(inner: &Inner, peer: &PeerId) -> bool {
    *inner.router.leased.borrow() == Some(*peer)
        || inner
            .rendezvous
            .get()
            .and_then(crate::rendezvous::RendezvousHandle::leased_to)
            == Some(*peer)
}

/// Learns the route back to the origin of a verified routed message, by
/// the proto's rules ([`route_trust::learn_back`]): only through the
/// relay or rendezvous this peer leases unless unsigned routes are
/// accepted.
fn learn_back(inner: &Inner, local: &PeerId, link: &PeerId, m: &Inspected) {
    // From the link's own peer: the link is the route (no route back).
    if m.src == *link {
        return;
    }
    // A stream of routed messages from one origin carries one route back,
    // message after message: looked at again only once in a while.
    let now = inner.router.now_ms();
    if let forward::Header::Compact(h) = &m.header {
        let again = inner
            .router
            .trust
            .lock()
            .expect("route lock")
            .look_again(link, &m.src, &h.reverse, now);
        if !again {
            return;
        }
    }
    // Gathered cheapest first: with the origin connected the rule needs
    // nothing else, so the lease lookups are skipped.
    let origin_connected = inner.connection(&m.src).is_some();
    let facts = BackFacts {
        origin_connected,
        link_carries_our_traffic: !origin_connected && carries_our_traffic(inner, link),
        accept_unsigned: inner.cfg.accept_unsigned_routes,
    };
    if let Some(hops) = route_trust::learn_back(local, link, m, facts) {
        let mut c = inner.router.cache.lock().expect("route lock");
        if c.get(&m.src, now) != Some(&hops[..]) && c.insert(m.src, hops, now).is_ok() {
            drop(c);
            inner.router.learned.notify_waiters();
        }
    }
}

async fn forward_message(
    inner: &Arc<Inner>,
    conn: &Arc<Connection>,
    m: Inspected,
    mut message: Message,
) -> Result<(), ForwardError> {
    let Some(server) = inner.router.server.clone() else {
        return Err(ForwardError::NotForwarding(m.dest));
    };
    // Forwarding is for peers that proved who they are: quotas and
    // refusals are then charged to the right peer.
    if !conn.proof().is_proven() {
        inner
            .stats
            .relay_unauthenticated
            .fetch_add(1, Ordering::Relaxed);
        crate::peer::count_unproven(inner, &conn.remote, "relay forwarding");
        return Ok(());
    }
    let local = *inner.identity.peer_id();
    let now = inner.router.now_ms();
    // A destination with a connection here needs no route: the route
    // cache is asked only for one without.
    let dest_connected = inner.connection(&m.dest).is_some();
    let cached = if dest_connected {
        None
    } else {
        inner
            .router
            .cache
            .lock()
            .expect("route lock")
            .lookup(&m.dest, now)
            .map(<[PeerId]>::to_vec)
    };
    let nh = match forward::next_hop(
        &local,
        &m,
        |p| (dest_connected && *p == m.dest) || inner.connection(p).is_some(),
        cached.as_deref(),
    ) {
        Ok(nh) => nh,
        Err(ForwardError::NoRoute(hop)) => {
            if hop == m.dest {
                refuse_not_leased(inner, conn);
            }
            return Err(ForwardError::NoRoute(hop));
        }
        Err(e) => return Err(e),
    };
    let to = inner.router.wire_address(inner);
    let leased = nh.hop == m.dest
        && server
            .state
            .lock()
            .expect("relay lock")
            .lease_conn(&m.dest, now)
            .is_some();
    if !leased {
        let Some(hop) = inner.connection(&nh.hop) else {
            if nh.hop == m.dest {
                refuse_not_leased(inner, conn);
            }
            return Err(ForwardError::NoRoute(nh.hop));
        };
        // The compact header only to a Juxta peer on compact framing; a
        // JXSE hop gets the XML ERM.
        let compact_next = hop.compact_tx.load(Ordering::Acquire);
        rewrite_forwarded(inner, &mut message, &local, &m, &nh.forward, compact_next);
        crate::Messenger::new(hop, inner.clone())
            .send_raw(&to, message)
            .await
            .map_err(|_| ForwardError::NoRoute(nh.hop))?;
        inner.stats.routed_forwarded.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    // The edge's lease connection decides the header's form, and takes
    // the message at once when nothing is queued for it and its writer
    // is free; otherwise it is spooled.
    let compact_next =
        super::edge_conn(&server, &m.dest).is_some_and(|c| c.compact_tx.load(Ordering::Acquire));
    rewrite_forwarded(inner, &mut message, &local, &m, &nh.forward, compact_next);
    let len = message.payload_len();
    let message = match super::pass_through(inner, &server, &m.dest, len, &to, message) {
        super::Passed::Sent => {
            inner.stats.routed_forwarded.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        super::Passed::Failed => return Err(ForwardError::NoRoute(m.dest)),
        super::Passed::Back(back) => back,
    };
    // Spool for the edge; while its queue or the sender's quota is full,
    // this connection's reader waits (push-back: the relay server's rule
    // says how long), then refuses.
    let push_back_ms = u64::try_from(server.push_back.as_millis()).unwrap_or(u64::MAX);
    let mut waiting_since = None;
    let mut item = message;
    loop {
        let now = inner.router.now_ms();
        let r = server.state.lock().expect("relay lock").offer(
            &m.dest,
            // Quotas by the proven link peer, never by the header's
            // claimed origin.
            conn.remote,
            len,
            item,
            now,
            waiting_since,
            push_back_ms,
        );
        match r {
            Offered::Queued => {
                super::after_enqueue(inner, &server, &m.dest);
                inner.stats.routed_forwarded.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Offered::Wait(back) => {
                item = back;
                waiting_since.get_or_insert(now);
                let _ =
                    tokio::time::timeout(Duration::from_millis(20), server.space.notified()).await;
            }
            Offered::Refused(reason, _) => {
                inner.stats.relay_refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(dest = %m.dest, src = %m.src, %reason, "relayed message refused");
                let refusal = RelayResponse::Refused(reason).to_message();
                let _ = crate::Messenger::new(conn.clone(), inner.clone()).post(
                    RELAY_SERVICE,
                    None,
                    refusal,
                );
                return Ok(());
            }
        }
    }
}

/// A relay asked to forward to a destination that holds no lease here (it
/// never leased, or its lease ended) and that it cannot reach otherwise:
/// the (proven) sender is told, typed (`notLeased`); the caller counts the
/// message in [`crate::Stats::route_no_route`]. The refusal is a service
/// message, queued within [`crate::PeerConfig::service_queue`].
fn refuse_not_leased(inner: &Arc<Inner>, conn: &Arc<Connection>) {
    let refusal = RelayResponse::Refused(Refusal::NotLeased).to_message();
    let _ = crate::Messenger::new(conn.clone(), inner.clone()).post(RELAY_SERVICE, None, refusal);
}

/// This peer's own route advertisement: behind its relay when it holds a
/// lease, else its TCP address.
pub(crate) fn own_route(inner: &Inner) -> RouteAdvertisement {
    let me = *inner.identity.peer_id();
    let leased = *inner.router.leased.borrow();
    match leased {
        Some(relay) => route_via(inner, relay),
        None => RouteAdvertisement::direct(me, [inner.public_addr.clone()]),
    }
}

/// This peer's route through `relay`.
pub(crate) fn route_via(inner: &Inner, relay: PeerId) -> RouteAdvertisement {
    let relay_eas = inner
        .connection(&relay)
        .map(|c| vec![format!("tcp://{}", c.peer_addr())])
        .unwrap_or_default();
    route_through(
        *inner.identity.peer_id(),
        vec![format!("relay://{}", relay.unique_value())],
        &[(relay, relay_eas)],
    )
}

/// `route` (this peer's own) signed by this peer
/// ([`RouteTrust::own_signed`]: the held signature while it is unchanged
/// and fresh, else one RSA signature).
pub(crate) fn signed_own(inner: &Inner, route: RouteAdvertisement) -> Option<XmlElement> {
    let now = crate::cache::unix_now_ms();
    let mut t = inner.router.trust.lock().expect("route lock");
    match t.own_signed(route, &inner.identity, now) {
        Ok(s) => Some(s.to_element()),
        Err(e) => {
            tracing::warn!(error = %e, "own route not signed");
            None
        }
    }
}

/// The signed route of `dest` this peer holds (its own, or another's
/// still valid).
fn proof_for(inner: &Inner, dest: &PeerId) -> Option<XmlElement> {
    if dest == inner.identity.peer_id() {
        return signed_own(inner, own_route(inner));
    }
    let now = crate::cache::unix_now_ms();
    let t = inner.router.trust.lock().expect("route lock");
    t.proof_for(dest, now).map(SignedRoute::to_element)
}

fn count_unverified(inner: &Inner, dest: &PeerId, why: Unvouched) {
    let n = inner
        .stats
        .routes_unverified
        .fetch_add(1, Ordering::Relaxed)
        + 1;
    if n.is_power_of_two() {
        tracing::info!(%dest, %why, count = n, "route not learned: nothing vouches for it");
    } else {
        tracing::debug!(%dest, %why, "route not learned");
    }
}

/// A relay granted a lease on `conn`: keeps the edge's signed route from
/// the request, if it is the edge's own, names this relay, and verifies
/// ([`RouteTrust::lease_route`]).
pub(crate) fn keep_lease_route(inner: &Inner, conn: &Connection, request: &Message) {
    let xml = juxta_proto::relay::signed_route_xml(request);
    let now = crate::cache::unix_now_ms();
    let r = inner.router.trust.lock().expect("route lock").lease_route(
        xml,
        &conn.remote,
        inner.identity.peer_id(),
        now,
    );
    if let Err(why) = r {
        count_unverified(inner, &conn.remote, why);
    }
}

/// The route this peer can vouch for to `dest`, if any: itself, an edge
/// leased here, or (a relay only) a peer it is connected to or has a route
/// to, through itself.
fn known_route(inner: &Inner, dest: &PeerId) -> Option<RouteResponse> {
    let ra = known_route_adv(inner, dest)?;
    Some(RouteResponse {
        dest_route: ra,
        src_route: Some(own_route(inner)),
        signed_dest: proof_for(inner, dest),
    })
}

/// The route to `dest` this peer vouches for ([`route_trust::vouch`]),
/// from what it sees now; its own route for itself.
fn known_route_adv(inner: &Inner, dest: &PeerId) -> Option<RouteAdvertisement> {
    let me = *inner.identity.peer_id();
    if *dest == me {
        return Some(own_route(inner));
    }
    let server = inner.router.server.as_ref()?;
    let now = inner.router.now_ms();
    let leased = server
        .state
        .lock()
        .expect("relay lock")
        .lease_conn(dest, now)
        .is_some();
    let cached;
    let reach = if leased {
        Reach::Leased
    } else if inner.connection(dest).is_some() {
        Reach::Connected
    } else {
        cached = inner
            .router
            .cache
            .lock()
            .expect("route lock")
            .get(dest, now)
            .map(<[PeerId]>::to_vec);
        cached.as_deref().map_or(Reach::Unknown, Reach::Cached)
    };
    route_trust::vouch(me, &inner.public_addr, true, *dest, reach)
}

/// Errors of route queries and answers (counted as resolver errors).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RouteFault {
    /// A malformed document, or an answer for no query in flight.
    #[error(transparent)]
    Doc(#[from] juxta_proto::endpoint::route_query::RouteQueryError),
}

/// A route query (`EndpointRouter` handler) from `q.src_peer`: the answer
/// if this peer knows a route; a relay that does not asks its own
/// neighbours and answers later.
pub(crate) fn on_query(
    inner: &Arc<Inner>,
    routes: &mut RouteSearches,
    g: &str,
    q: &ResolverQuery,
    from: Option<PeerId>,
) -> Result<Option<ResolverResponse>, RouteFault> {
    let rq = RouteQuery::parse(&q.query)?;
    if let Some(resp) = known_route(inner, &rq.dest) {
        return Ok(Some(q.response(resp.to_xml())));
    }
    // Asked directly by a Juxta peer (compact connection): say at once
    // that nothing is known here, so it need not wait out its timeout.
    let tell_no = from == Some(q.src_peer)
        && inner
            .connection(&q.src_peer)
            .is_some_and(|c| c.is_compact());
    let no_route = || ResolverResponse {
        handler: NO_ROUTE_HANDLER.to_string(),
        query_id: q.query_id,
        response: RouteQuery::new(rq.dest).to_xml(),
    };
    if !inner.router.forwards() {
        return Ok(tell_no.then(no_route));
    }
    let now = inner.router.now_ms();
    let waiter = Waiter::Remote {
        peer: q.src_peer,
        query_id: q.query_id,
    };
    let r = routes.resolver.request(rq.dest, waiter, q.hop_count, now);
    // A new query goes to the other connected peers; with nobody else to
    // ask it ends here, and a Juxta asker is told no at once.
    routes.settle(inner, g, &[Some(q.src_peer), from]);
    if let Err(e) = r {
        tracing::debug!(dest = %rq.dest, error = %e, "route query not asked further");
        return Ok(tell_no.then(no_route));
    }
    Ok(None)
}

/// A negative route answer ([`NO_ROUTE_HANDLER`]) from `from`: noted;
/// when every peer the query went to said no, the query ends: a local
/// search fails at once ([`find_route`]), remote queriers that are Juxta
/// peers are told no in turn.
pub(crate) fn on_no_route(
    inner: &Arc<Inner>,
    routes: &mut RouteSearches,
    g: &str,
    r: &ResolverResponse,
    from: Option<PeerId>,
) -> Result<(), RouteFault> {
    let dest = RouteQuery::parse(&r.response)?.dest;
    let Some(from) = from else {
        return Ok(());
    };
    routes.resolver.on_no_route(r.query_id, &dest, &from)?;
    routes.settle(inner, g, &[]);
    Ok(())
}

/// Tells `peer`, a Juxta peer that asked us for a route to `dest` (its
/// query `query_id`), that none was found. JXSE peers are not told: they
/// know no such answer and wait out their timeout.
fn tell_no(inner: &Arc<Inner>, g: &str, peer: PeerId, query_id: i32, dest: PeerId) {
    let Some(m) = inner.messenger(&peer).filter(|m| m.is_compact()) else {
        return;
    };
    let resp = ResolverResponse {
        handler: NO_ROUTE_HANDLER.to_string(),
        query_id,
        response: RouteQuery::new(dest).to_xml(),
    };
    let msg = Message::new().with(resp.to_element(g));
    if let Err(e) = m.post_routed(RESOLVER_SERVICE, Some(&response_queue(g)), msg) {
        tracing::debug!(%peer, error = %e, "negative route answer not sent");
    }
}

/// Answers `peer`, which asked us for a route to `dest` (its query
/// `query_id`), with the route now known, if one is.
fn tell_route(inner: &Arc<Inner>, g: &str, peer: PeerId, query_id: i32, dest: &PeerId) {
    let Some(rr) = known_route(inner, dest) else {
        return;
    };
    let resp = ResolverResponse {
        handler: ROUTER_HANDLER.to_string(),
        query_id,
        response: rr.to_xml(),
    };
    let Some(m) = inner.messenger(&peer) else {
        return;
    };
    let msg = Message::new().with(resp.to_element(g));
    if let Err(e) = m.post_routed(RESOLVER_SERVICE, Some(&response_queue(g)), msg) {
        tracing::debug!(%peer, error = %e, "route answer not sent");
    }
}

fn send_queries(
    inner: &Arc<Inner>,
    resolver: &mut RouteResolver,
    g: &str,
    query_id: i32,
    hop_count: u32,
    query: &RouteQuery,
    skip: &[Option<PeerId>],
) -> Vec<PeerId> {
    let mut sent = Vec::new();
    // The asker's own route rides in the query: JXSE's route resolver
    // drops a query without one ("No src Route in route query").
    let mut query = query.clone();
    if query.src_route.is_none() {
        query.src_route = Some(own_route(inner));
    }
    let doc = ResolverQuery {
        handler: ROUTER_HANDLER.to_string(),
        query_id,
        hop_count,
        src_peer: *inner.identity.peer_id(),
        query: query.to_xml(),
        src_route: None,
    };
    let targets: Vec<(PeerId, Arc<Connection>)> = inner
        .connected_peers()
        .into_iter()
        .filter(|p| !skip.contains(&Some(*p)) && *p != query.dest)
        .filter_map(|p| Some((p, inner.connection(&p)?)))
        .collect();
    // Recorded before anything is sent: a negative answer can come back
    // before this function returns. A peer the query then fails to reach
    // never answers, so the query waits for its timeout as before.
    let peers: Vec<PeerId> = targets.iter().map(|(p, _)| *p).collect();
    resolver.asked(query_id, &peers);
    for (p, conn) in targets {
        let msg = Message::new().with(doc.to_element(g));
        let m = crate::Messenger::new(conn, inner.clone());
        match m.post_routed(RESOLVER_SERVICE, Some(&query_queue(g)), msg) {
            Ok(_) => sent.push(p),
            Err(e) => tracing::debug!(peer = %p, error = %e, "route query not sent"),
        }
    }
    sent
}

/// A route answer from `from`: caches the route and answers the peers
/// that asked us.
pub(crate) fn on_response(
    inner: &Arc<Inner>,
    routes: &mut RouteSearches,
    g: &str,
    r: &ResolverResponse,
    from: Option<PeerId>,
) -> Result<(), RouteFault> {
    let rr = RouteResponse::parse(&r.response)?;
    let dest = rr
        .dest_route
        .dest_peer
        .ok_or(juxta_proto::endpoint::route_query::RouteQueryError::Missing("Dst"))?;
    routes.resolver.on_answer(r.query_id, &dest)?;
    learn(inner, routes, g, &rr, dest, from);
    // The peers that asked us are answered from what was learned.
    routes.settle(inner, g, &[]);
    Ok(())
}

/// Keeps the route a matched answer names, if it is usable and believed.
fn learn(
    inner: &Arc<Inner>,
    routes: &mut RouteSearches,
    g: &str,
    rr: &RouteResponse,
    dest: PeerId,
    from: Option<PeerId>,
) {
    let local = *inner.identity.peer_id();
    let Some(answering) = from else {
        return;
    };
    // The destination's own signed route, when the answer carries a
    // valid one: its hops (its relays) are what it vouches for.
    let unix_now = crate::cache::unix_now_ms();
    let signed = route_trust::answer_proof(rr, &dest, unix_now).unwrap_or_else(|e| {
        tracing::debug!(%dest, error = %e, "signed route in a route answer refused");
        None
    });
    let ra = signed.as_ref().map_or(&rr.dest_route, SignedRoute::route);
    let hops = route_from_answer(&local, ra, &answering, |p| inner.connection(p).is_some());
    let Some(hops) = hops else {
        tracing::debug!(%dest, "route answer with no usable route");
        return;
    };
    let believed = route_trust::believe_answer(&AnswerFacts {
        hops: &hops,
        answering,
        answering_carries_our_traffic: carries_our_traffic(inner, &answering),
        signed: signed.as_ref(),
        accept_unsigned: inner.cfg.accept_unsigned_routes,
    });
    if let Err(why) = believed {
        count_unverified(inner, &dest, why);
        return;
    }
    if let Some(s) = signed {
        let mut t = inner.router.trust.lock().expect("route lock");
        t.keep_proof(s, unix_now);
    }
    let now = inner.router.now_ms();
    if inner
        .router
        .cache
        .lock()
        .expect("route lock")
        .insert(dest, hops, now)
        .is_ok()
    {
        inner.router.learned.notify_waiters();
        // Our own searches for `dest` end here.
        routes.step(inner, g, Some(dest));
    }
}

/// A messenger to `peer`: direct, through a cached route, or through a
/// route found by asking the connected peers. Gives up after `timeout`, or
/// after `route_query_timeout` without a usable answer, or at once with
/// nobody to ask; the error lists what was tried. The search runs in the
/// resolver task ([`RouteSearches`]).
pub(crate) async fn find_route(
    inner: &Arc<Inner>,
    peer: &PeerId,
    timeout: Duration,
) -> Result<crate::Messenger, super::NoRoute> {
    if let Some(m) = inner.messenger(peer) {
        return Ok(m);
    }
    let stopped = || super::NoRoute {
        peer: *peer,
        tried: vec![super::RouteAttempt::NoConnection],
    };
    let (reply, rx) = oneshot::channel();
    let req = RouteRequest {
        peer: *peer,
        timeout,
        reply,
    };
    if !inner
        .commands
        .send(crate::resolver::Command::FindRoute(req))
        .await
    {
        return Err(stopped());
    }
    rx.await.unwrap_or_else(|_| Err(stopped()))
}

/// A route search [`find_route`] asks the resolver task for.
pub(crate) struct RouteRequest {
    peer: PeerId,
    timeout: Duration,
    reply: oneshot::Sender<Result<crate::Messenger, super::NoRoute>>,
}

/// One of this peer's own searches for a route.
struct LocalSearch {
    peer: PeerId,
    deadline: Millis,
    /// When to look again (a route can also come from a new connection
    /// or lease, which no answer announces).
    next_check: Millis,
    asked: Vec<PeerId>,
    unverified_before: u64,
    /// Every peer asked said no (these).
    denied: Option<Vec<PeerId>>,
    reply: oneshot::Sender<Result<crate::Messenger, super::NoRoute>>,
}

/// How often a search looks again without news (as before: at most
/// 250 ms between looks).
const LOOK_AGAIN_MS: Millis = 250;

/// Most of this peer's own route searches at once (a caller past this
/// is told at once that nothing was found).
pub(crate) const MAX_LOCAL_SEARCHES: usize = 1024;

/// Route queries in flight and this peer's own searches: the resolver
/// task's.
pub(crate) struct RouteSearches {
    resolver: RouteResolver,
    local: Vec<LocalSearch>,
    /// The resolver's dropped events already counted.
    dropped_seen: u64,
}

impl RouteSearches {
    pub(crate) fn new() -> RouteSearches {
        RouteSearches {
            resolver: RouteResolver::new(RouteResolverConfig::default()),
            local: Vec::new(),
            dropped_seen: 0,
        }
    }

    /// Starts a search for a route to `req.peer`.
    pub(crate) fn start(&mut self, inner: &Arc<Inner>, req: RouteRequest) {
        let RouteRequest {
            peer,
            timeout,
            reply,
        } = req;
        if self.local.len() >= MAX_LOCAL_SEARCHES {
            // Make room first: searches whose caller stopped waiting.
            self.local.retain(|s| !s.reply.is_closed());
        }
        if self.local.len() >= MAX_LOCAL_SEARCHES {
            let mut tried = vec![
                super::RouteAttempt::NoConnection,
                super::RouteAttempt::NoCachedRoute,
            ];
            if inner.router.leased.borrow().is_none() {
                tried.push(super::RouteAttempt::NoRelayLease);
            }
            let _ = reply.send(Err(super::NoRoute { peer, tried }));
            return;
        }
        let now = inner.router.now_ms();
        self.local.push(LocalSearch {
            peer,
            deadline: later(now, timeout.min(inner.cfg.route_query_timeout)),
            next_check: now,
            asked: Vec::new(),
            unverified_before: inner.stats.routes_unverified.load(Ordering::Relaxed),
            denied: None,
            reply,
        });
        let g = inner.group_unique().to_string();
        self.step(inner, &g, Some(peer));
    }

    /// Carries out what the route resolver decided: sends each new query
    /// to the connected peers but `skip` (the asker and the link it came
    /// by), ending it at once if nobody could be asked; answers the peers
    /// that asked us when a query ends; marks this peer's own searches
    /// that every asked peer denied. The peers the new queries went to
    /// and the destinations of the denied searches ([`Self::settle`]
    /// looks at those again).
    fn drain(
        &mut self,
        inner: &Arc<Inner>,
        g: &str,
        skip: &[Option<PeerId>],
    ) -> (Vec<PeerId>, Vec<PeerId>) {
        let mut asked = Vec::new();
        let mut denied_dests = Vec::new();
        while let Some(e) = self.resolver.poll_event() {
            match e {
                RouteEvent::Ask {
                    query_id,
                    hop_count,
                    query,
                } => {
                    let sent = send_queries(
                        inner,
                        &mut self.resolver,
                        g,
                        query_id,
                        hop_count,
                        &query,
                        skip,
                    );
                    if sent.is_empty() {
                        self.resolver.abandon(query_id);
                    }
                    asked.extend(sent);
                }
                RouteEvent::Answered(a) => {
                    // Our own searches look at the route cache, which the
                    // answer filled if it was believed.
                    for w in a.waiters {
                        if let Waiter::Remote { peer, query_id } = w {
                            tell_route(inner, g, peer, query_id, &a.dest);
                        }
                    }
                }
                RouteEvent::Unanswered { answered, why } => {
                    let dest = answered.dest;
                    for w in answered.waiters {
                        match (w, &why) {
                            (Waiter::Remote { peer, query_id }, _) => {
                                tell_no(inner, g, peer, query_id, dest)
                            }
                            (Waiter::Local, NoAnswer::Denied(denied)) => {
                                for s in self.local.iter_mut().filter(|s| s.peer == dest) {
                                    s.denied = Some(denied.clone());
                                }
                                denied_dests.push(dest);
                            }
                            // A search with nobody to ask finds that out
                            // itself; one that timed out asks again at
                            // its next look, until its own deadline.
                            (Waiter::Local, NoAnswer::NobodyAsked | NoAnswer::TimedOut) => {}
                        }
                    }
                }
            }
        }
        let dropped = self.resolver.dropped_events();
        if dropped != self.dropped_seen {
            let n = dropped.saturating_sub(self.dropped_seen);
            self.dropped_seen = dropped;
            inner.stats.resolver_errors.fetch_add(n, Ordering::Relaxed);
            tracing::warn!(n, "route resolver events dropped");
        }
        (asked, denied_dests)
    }

    /// [`Self::drain`], then ends the searches every asked peer denied.
    fn settle(&mut self, inner: &Arc<Inner>, g: &str, skip: &[Option<PeerId>]) {
        let (_, denied) = self.drain(inner, g, skip);
        for dest in denied {
            self.step(inner, g, Some(dest));
        }
    }

    /// When [`RouteSearches::handle_timeout`] is next due: a search to
    /// look at again or a route query that times out.
    pub(crate) fn poll_timeout(&self) -> Option<Millis> {
        self.local
            .iter()
            .map(|s| s.next_check.min(s.deadline))
            .chain(self.resolver.poll_timeout())
            .min()
    }

    /// Whether a search of this peer's own is in progress.
    pub(crate) fn searching(&self) -> bool {
        !self.local.is_empty()
    }

    /// Looks again at the searches due (time passed), or at every search
    /// (`all`: a route was learned somewhere).
    pub(crate) fn handle_timeout(&mut self, inner: &Arc<Inner>, all: bool) {
        let g = inner.group_unique().to_string();
        self.resolver.handle_timeout(inner.router.now_ms());
        self.settle(inner, &g, &[]);
        if all {
            for s in &mut self.local {
                s.next_check = 0;
            }
        }
        self.step(inner, &g, None);
    }

    /// Looks at the searches for `only` (those due: `None`): ends those
    /// that found a route, were denied, have nobody to ask or ran out of
    /// time; asks (again) for the others. Drops those whose caller
    /// stopped waiting.
    fn step(&mut self, inner: &Arc<Inner>, g: &str, only: Option<PeerId>) {
        let now = inner.router.now_ms();
        let mut i = 0;
        while i < self.local.len() {
            let s = &self.local[i];
            if s.reply.is_closed() {
                self.local.swap_remove(i);
                continue;
            }
            let look = match only {
                Some(p) => p == s.peer,
                None => now >= s.next_check || now >= s.deadline,
            };
            if !look {
                i += 1;
                continue;
            }
            match self.look(inner, g, i, now) {
                Some(outcome) => {
                    let s = self.local.swap_remove(i);
                    let _ = s.reply.send(outcome);
                }
                None => i += 1,
            }
        }
    }

    /// One look at search `i` (the loop body `find_route` ran every
    /// 250 ms before it moved here): its outcome if it is over.
    fn look(
        &mut self,
        inner: &Arc<Inner>,
        g: &str,
        i: usize,
        now: Millis,
    ) -> Option<Result<crate::Messenger, super::NoRoute>> {
        use super::RouteAttempt;
        let peer = self.local[i].peer;
        if let Some(m) = inner.messenger(&peer) {
            return Some(Ok(m));
        }
        let mut tried = vec![RouteAttempt::NoConnection, RouteAttempt::NoCachedRoute];
        if inner.router.leased.borrow().is_none() {
            tried.push(RouteAttempt::NoRelayLease);
        }
        if let Some(denied) = self.local[i].denied.take() {
            // Every peer asked answered that it knows no route.
            tried.extend(denied.into_iter().map(RouteAttempt::Denied));
            return Some(Err(super::NoRoute { peer, tried }));
        }
        if let Err(e) = self.resolver.request(peer, Waiter::Local, 0, now) {
            tracing::debug!(%peer, error = %e, "route query not sent");
        }
        // No search is looked at (and so none removed) while draining
        // here, so `i` stays valid. A denial drained here (none can be:
        // they are drained where they arrive) ends its search at its
        // next look.
        for p in self.drain(inner, g, &[]).0 {
            let asked = &mut self.local[i].asked;
            if !asked.contains(&p) {
                asked.push(p);
            }
        }
        let s = &mut self.local[i];
        let nobody = s.asked.is_empty()
            && !inner
                .connected_peers()
                .iter()
                .any(|p| *p != peer && inner.connection(p).is_some());
        if nobody || now >= s.deadline {
            if nobody {
                tried.push(RouteAttempt::NobodyToAsk);
            }
            tried.extend(
                std::mem::take(&mut s.asked)
                    .into_iter()
                    .map(RouteAttempt::Asked),
            );
            if inner.stats.routes_unverified.load(Ordering::Relaxed) != s.unverified_before {
                tried.push(RouteAttempt::AnswerNotVouched);
            }
            return Some(Err(super::NoRoute { peer, tried }));
        }
        s.next_check = now.saturating_add(LOOK_AGAIN_MS);
        None
    }
}

/// A messenger to `peer` after a binding named it: as [`find_route`].
pub(crate) async fn messenger_to(
    inner: &Arc<Inner>,
    peer: &PeerId,
    timeout: Duration,
) -> Result<crate::Messenger, super::NoRoute> {
    match inner.messenger(peer) {
        Some(m) => Ok(m),
        None => find_route(inner, peer, timeout).await,
    }
}
