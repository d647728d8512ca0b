//! Prometheus metrics (`--metrics ADDR`): `GET /metrics` answers the
//! peer's counters in the Prometheus text format, encoded by the
//! `prometheus-client` crate from the library's [`juxta::Stats`] and the
//! rendezvous and relay handles, read at each scrape.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Largest HTTP request head read.
const MAX_HEAD: usize = 8192;
/// Scrapes answered at once.
const MAX_SCRAPES: usize = 16;

type Labels = Vec<(String, String)>;

fn counter(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let c: Counter = Counter::default();
    c.inc_by(v);
    reg.register(name, help, c);
}

fn gauge(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let g: Gauge = Gauge::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    reg.register(name, help, g);
}

fn family(reg: &mut Registry, name: &str, help: &str, label: &str, values: &[(&str, u64)]) {
    let f = Family::<Labels, Counter>::default();
    for (k, v) in values {
        f.get_or_create(&vec![(label.to_string(), (*k).to_string())])
            .inc_by(*v);
    }
    reg.register(name, help, f);
}

/// The metrics text of `peer` now.
pub fn render(peer: &juxta::Peer) -> String {
    let s = peer.stats();
    let mut reg = Registry::with_prefix("juxta");
    counter(
        &mut reg,
        "bytes_in",
        "Bytes read from TCP connections",
        s.bytes_in,
    );
    counter(
        &mut reg,
        "bytes_out",
        "Bytes written to TCP connections",
        s.bytes_out,
    );
    counter(
        &mut reg,
        "messages_in",
        "Messages read from TCP connections",
        s.messages_in,
    );
    counter(
        &mut reg,
        "messages_out",
        "Messages written to TCP connections",
        s.messages_out,
    );
    gauge(
        &mut reg,
        "connections",
        "Open connections",
        peer.connection_count() as u64,
    );
    let rdv = peer.rendezvous().map(|h| h.status()).unwrap_or_default();
    gauge(
        &mut reg,
        "rendezvous_leases",
        "Rendezvous: edges leased here; edge: 1 while it holds a rendezvous lease",
        if rdv.is_rendezvous {
            rdv.clients as u64
        } else {
            u64::from(rdv.leased_to.is_some())
        },
    );
    gauge(
        &mut reg,
        "rendezvous_view",
        "Other rendezvous in the peer view",
        rdv.view as u64,
    );
    gauge(
        &mut reg,
        "rendezvous_index_entries",
        "SRDI index entries",
        rdv.index_entries as u64,
    );
    counter(
        &mut reg,
        "rendezvous_queries_answered",
        "Rendezvous: lookups admitted; edge: lookups answered",
        if rdv.is_rendezvous {
            rdv.queries
        } else {
            rdv.answered
        },
    );
    counter(
        &mut reg,
        "rendezvous_queries_refused",
        "Busy answers (rendezvous: sent, edge: received)",
        rdv.busy,
    );
    counter(
        &mut reg,
        "rendezvous_refused",
        "Peer-view, propagated or walked messages refused",
        rdv.refused,
    );
    let relay = peer.relay();
    let rc = relay.as_ref().map(|r| r.counters()).unwrap_or_default();
    let srv = rc.server;
    gauge(
        &mut reg,
        "relay_clients",
        "Relay: edges leased here",
        rc.clients as u64,
    );
    gauge(
        &mut reg,
        "relay_leased",
        "Edge: 1 while it holds a relay lease",
        u64::from(relay.as_ref().and_then(|r| r.relay()).is_some()),
    );
    gauge(
        &mut reg,
        "relay_queue_depth",
        "Relay: messages queued for edges now",
        srv.queued
            .saturating_sub(srv.forwarded)
            .saturating_sub(srv.dropped),
    );
    counter(
        &mut reg,
        "relay_forwarded",
        "Routed messages forwarded",
        rc.forwarded,
    );
    family(
        &mut reg,
        "relay_refusals",
        "Relay refusals by reason",
        "reason",
        &[
            ("unauthenticated", srv.refused_unauthenticated),
            ("full", srv.refused_full),
            ("queue_full", srv.refused_queue_full),
            ("quota", srv.refused_quota),
            ("not_leased", srv.refused_not_leased),
            ("too_large", srv.refused_too_large),
        ],
    );
    counter(
        &mut reg,
        "relay_pushed_back",
        "Relayed messages made to wait for queue space or quota (each once)",
        srv.pushed_back,
    );
    counter(
        &mut reg,
        "relay_leases_granted",
        "Relay leases granted (renewals included)",
        srv.leases_granted,
    );
    family(
        &mut reg,
        "errors",
        "Errors and refusals by kind",
        "kind",
        &[
            ("unroutable", s.unroutable),
            ("undeliverable", s.undeliverable),
            ("connection_failed", s.connections_failed),
            ("connection_refused", s.connections_refused),
            ("unknown_pipe", s.unknown_pipe),
            ("resolver", s.resolver_errors),
            ("bad_datagram", s.bad_datagrams),
            ("discovery_throttled", s.discovery_throttled),
            ("discovery_rejected", s.discovery_rejected),
            ("discovery_late", s.discovery_late),
            ("group_refused", s.group_refused),
            ("group_unauthenticated", s.group_unauthenticated),
            ("group_cert_refused", s.group_cert_refused),
            ("route_loop", s.route_loops),
            ("route_spoofed", s.route_spoofed),
            ("route_malformed", s.route_malformed),
            ("route_no_route", s.route_no_route),
            ("relay_unauthenticated", s.relay_unauthenticated),
            ("relay_refused", s.relay_refused),
            ("identity_refused", s.identity_refused),
            ("replayed_signature", s.replayed_signatures),
            ("unproven_refused", s.unproven_refused),
            ("dial_throttled", s.dials_throttled),
            ("route_unverified", s.routes_unverified),
            ("secure_session_refused", s.secure_sessions_refused),
            ("handshake_timeout", s.handshake_timeouts),
            ("frame_timeout", s.frame_timeouts),
            ("first_message_timeout", s.first_message_timeouts),
            ("idle_timeout", s.idle_timeouts),
            ("write_timeout", s.write_timeouts),
            ("addr_refused", s.addr_refused),
            ("addr_pending_refused", s.addr_pending_refused),
            ("service_refused", s.service_refused),
        ],
    );
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// Serves `GET /metrics` on `listener` until aborted; anything else gets
/// 404 (unknown path) or 405 (another method). One request per connection.
pub async fn serve(listener: TcpListener, peer: Arc<juxta::Peer>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPES));
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let peer = peer.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(Duration::from_secs(10), answer(&mut s, &peer)).await;
        });
    }
}

async fn answer(s: &mut tokio::net::TcpStream, peer: &juxta::Peer) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return reply(
                s,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request head too large\n",
            )
            .await;
        }
    }
    let first = head.split(|b| *b == b'\n').next().unwrap_or(&[]);
    let first = String::from_utf8_lossy(first);
    let mut parts = first.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => {
            let body = render(peer);
            reply(
                s,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
            .await
        }
        ("GET", _) => reply(s, "404 Not Found", "text/plain", "try /metrics\n").await,
        _ => reply(s, "405 Method Not Allowed", "text/plain", "GET only\n").await,
    }
}

async fn reply(
    s: &mut tokio::net::TcpStream,
    status: &str,
    ctype: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    s.shutdown().await
}
