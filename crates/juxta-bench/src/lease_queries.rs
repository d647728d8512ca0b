//! Discovery queries from the lightweight clients of `juxta bench leases`
//! (`--query-rate`): how many JXTA discovery queries one rendezvous process
//! takes in and forwards by its SRDI index (issue #16: "one rendezvous
//! answers 100,000 discovery queries/s").
//!
//! Why here and not in `juxta bench rendezvous`: there every edge is a full
//! [`juxta::Peer`] (its own runtime, SQLite cache, resolver); 16 of them
//! could offer about 9,000 queries/s on this machine before the load
//! generator itself ran out of CPU, so the rendezvous' limit was never
//! reached. The lease clients are a TCP connection and the protocol crate's
//! code each; here they also
//! - publish SRDI entries (`Adv`/`Name`/`lq-<client>-<k>`) to the
//!   rendezvous once leased ([`srdi_transmit`], what an edge's rendezvous
//!   machine sends), and
//! - send JXTA discovery queries ([`DiscoveryQuery`] in a resolver query,
//!   to the rendezvous' `ORes` queue), open loop at a total offered rate,
//!   spread round robin over the leased clients, `positive_pct` % for a
//!   published name (owned by another client), the rest for names nobody
//!   published.
//!
//! The rendezvous does what it does for any edge's query: admission, its
//! own cache (SQLite), its SRDI index, and forwards a positive query to the
//! publisher over that publisher's lease connection. A client records
//! when a query it sent reaches it as the publisher. So what is measured
//! is the rendezvous' part of a discovery query: from the querier's write
//! to the publisher's read, through the rendezvous; the publisher's answer
//! to the querier does not cross the rendezvous in JXTA's SRDI model and
//! is not sent (the clients do not listen). Loss counts positive queries
//! that did not reach their publisher within the timeout; negative ones
//! are never forwarded (nobody is indexed for them) and only cost CPU.
//!
//! Reported per offered rate: queries sent, not sent (a client's queue was
//! full: the load generator fell behind, counted, never silently dropped),
//! forwarded and their rate, duplicates, loss, the time from write to
//! arrival (p50, p99, max), the rendezvous' CPU (% of one core, and µs per
//! query after its idle rate measured just before is taken off) and the
//! bench process' own CPU (the clients share the machine with the
//! rendezvous).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use juxta::proto::advertisement::AdvKind;
use juxta::proto::discovery::DiscoveryQuery;
use juxta::proto::endpoint::{mangle, ServiceAddress, NET_GROUP_UNIQUE};
use juxta::proto::id::PeerId;
use juxta::proto::message::Message;
use juxta::proto::rendezvous::node::srdi_transmit;
use juxta::proto::resolver::{query_queue, ResolverQuery, RESOLVER_SERVICE};
use juxta::proto::srdi::{SrdiEntry, SrdiMessage, SCOPE_REPLICATE};
use serde::Serialize;

/// Most queries one run may send over all its rates (each costs 8 bytes of
/// bookkeeping).
pub const MAX_QUERIES: usize = 20_000_000;
/// Queries waiting in one client's queue; beyond, a query is counted as
/// not sent (the load generator is behind).
pub const CLIENT_QUEUE: usize = 256;
/// Lifetime of the published SRDI entries, ms.
const ENTRY_LIFETIME_MS: i64 = 2 * 3600 * 1000;

/// What the scheduler asks a client to send: the query's number (its
/// resolver query ID) and the name it asks for.
#[derive(Debug, Clone)]
pub(crate) struct QueryOrder {
    pub seq: u32,
    pub name: String,
}

/// The name client `client` publishes as its `k`-th entry.
///
/// ```
/// assert_eq!(juxta_bench::lease_queries::published_name(7, 2), "lq-7-2");
/// ```
pub fn published_name(client: usize, k: usize) -> String {
    format!("lq-{client}-{k}")
}

/// A name nobody publishes (query `seq`).
fn unpublished_name(seq: u32) -> String {
    format!("ln-{seq}")
}

/// When each query was written and when it reached its publisher, µs
/// after the table's epoch (0: not yet). Shared by the scheduler and the
/// clients; fixed size, allocated once.
pub(crate) struct QueryTable {
    epoch: Instant,
    sent_us: Vec<AtomicU32>,
    arrived_us: Vec<AtomicU32>,
    /// Queries that arrived at a client more than once.
    pub dup: AtomicU64,
    /// Forwarded queries whose ID is not one of ours.
    pub stray: AtomicU64,
}

impl QueryTable {
    pub(crate) fn new(n: usize) -> QueryTable {
        QueryTable {
            epoch: Instant::now(),
            sent_us: (0..n).map(|_| AtomicU32::new(0)).collect(),
            arrived_us: (0..n).map(|_| AtomicU32::new(0)).collect(),
            dup: AtomicU64::new(0),
            stray: AtomicU64::new(0),
        }
    }

    fn now_us(&self) -> u32 {
        // At least 1 (0 means "not yet"); u32 µs lasts 71 minutes.
        (self.epoch.elapsed().as_micros().min(u32::MAX as u128) as u32).max(1)
    }

    /// A client is about to write query `seq`.
    pub(crate) fn sent(&self, seq: u32) {
        if let Some(s) = self.sent_us.get(seq as usize) {
            s.store(self.now_us(), Ordering::Relaxed);
        }
    }

    /// Query `id` (the resolver query ID a publisher read) arrived.
    pub(crate) fn arrived(&self, id: i32) {
        let Some(a) = usize::try_from(id)
            .ok()
            .and_then(|i| self.arrived_us.get(i))
        else {
            self.stray.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if a.compare_exchange(0, self.now_us(), Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.dup.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Write-to-arrival time of query `seq`, µs, if it arrived within
    /// `timeout`.
    fn latency_us(&self, seq: usize, timeout: Duration) -> Option<u64> {
        let s = self.sent_us.get(seq)?.load(Ordering::Relaxed);
        let a = self.arrived_us.get(seq)?.load(Ordering::Relaxed);
        if s == 0 || a == 0 {
            return None;
        }
        let d = u64::from(a.saturating_sub(s));
        (u128::from(d) <= timeout.as_micros()).then_some(d)
    }

    fn was_sent(&self, seq: usize) -> bool {
        self.sent_us
            .get(seq)
            .is_some_and(|s| s.load(Ordering::Relaxed) != 0)
    }
}

/// The SRDI message publishing client `client`'s `k` names (the entries a
/// full edge pushes for pipe advertisements by those names).
pub(crate) fn publish_message(me: PeerId, client: usize, k: usize) -> SrdiMessage {
    SrdiMessage {
        peer: me,
        primary_key: AdvKind::Adv.srdi_primary_key().to_string(),
        scope: SCOPE_REPLICATE,
        entries: (0..k)
            .map(|j| SrdiEntry {
                key: "Name".into(),
                value: published_name(client, j),
                expiration: ENTRY_LIFETIME_MS,
            })
            .collect(),
    }
}

/// The wire address and message of an SRDI push to `rdv`.
pub(crate) fn srdi_push(rdv: PeerId, m: &SrdiMessage) -> (ServiceAddress, Message) {
    let t = srdi_transmit(NET_GROUP_UNIQUE, rdv, m);
    (mangle(NET_GROUP_UNIQUE, &t.dest), t.message)
}

/// The wire address of the rendezvous' query queue (`ORes`).
pub(crate) fn query_address() -> ServiceAddress {
    mangle(
        NET_GROUP_UNIQUE,
        &ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(NET_GROUP_UNIQUE))),
    )
}

/// The message of discovery query `o` from `me`: advertisements of kind
/// `Adv` named `o.name`, one wanted.
pub(crate) fn query_message(me: PeerId, o: &QueryOrder) -> Message {
    let q = DiscoveryQuery::new(AdvKind::Adv, 1).matching("Name", &o.name);
    let rq = q.to_resolver_query(o.seq as i32, me);
    Message::new().with(rq.to_element(NET_GROUP_UNIQUE))
}

/// One client's discovery queries, printed once with holes for the query
/// ID and the name: the same bytes as [`query_message`] for the names the
/// bench asks for (letters, digits and `-`, which no XML level escapes),
/// without printing two XML documents per query. The load generator
/// shares the machine with the rendezvous it measures: printing each
/// query took about 14 % of its CPU.
pub(crate) struct QueryTemplate {
    /// The queue element's name.
    queue: String,
    /// Before the ID, between the ID and the name, after the name.
    parts: [String; 3],
    me: PeerId,
}

/// Stand-ins printed where the holes go (found once, then cut out).
const ID_MARK: i32 = i32::MIN;
const NAME_MARK: &str = "lqNAMEHOLElq";

impl QueryTemplate {
    pub(crate) fn new(me: PeerId) -> QueryTemplate {
        let m = query_message(
            me,
            &QueryOrder {
                seq: ID_MARK as u32,
                name: NAME_MARK.to_string(),
            },
        );
        let queue = query_queue(NET_GROUP_UNIQUE);
        let text = m
            .elements
            .first()
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
            .unwrap_or_default();
        let id = ID_MARK.to_string();
        assert_eq!(text.matches(&id).count(), 1, "the query ID is printed once");
        assert_eq!(
            text.matches(NAME_MARK).count(),
            1,
            "the name is printed once"
        );
        let (a, rest) = text.split_once(&id).expect("counted above");
        let (b, c) = rest
            .split_once(NAME_MARK)
            .expect("the name is printed after the query ID");
        QueryTemplate {
            queue,
            parts: [a.to_string(), b.to_string(), c.to_string()],
            me,
        }
    }

    /// The message of query `o` ([`query_message`]'s bytes).
    pub(crate) fn message(&self, o: &QueryOrder) -> Message {
        let plain = o
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !plain {
            return query_message(self.me, o);
        }
        let [a, b, c] = &self.parts;
        let mut t = String::with_capacity(a.len() + b.len() + c.len() + o.name.len() + 12);
        t.push_str(a);
        // Formatting an integer into the string: no allocation.
        let _ = std::fmt::Write::write_fmt(&mut t, format_args!("{}", o.seq as i32));
        t.push_str(b);
        t.push_str(&o.name);
        t.push_str(c);
        Message::new().with(juxta::proto::message::Element::xml(
            juxta::proto::message::NS_JXTA,
            &self.queue,
            t,
        ))
    }
}

/// Whether `real` (a demangled destination) is a resolver query queue;
/// then the message's query ID, if it parses.
pub(crate) fn forwarded_query_id(real: &ServiceAddress, m: &Message) -> Option<Option<i32>> {
    static QUEUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let queue = QUEUE.get_or_init(|| query_queue(NET_GROUP_UNIQUE));
    if real.service != RESOLVER_SERVICE || real.param.as_deref() != Some(queue.as_str()) {
        return None;
    }
    Some(query_id_of(m))
}

/// The query ID of a forwarded query: read from its `QueryID` element's
/// digits without parsing the document (the rendezvous forwards a query's
/// bytes with only its hop count changed); the whole document is parsed
/// when that element is not plain digits.
fn query_id_of(m: &Message) -> Option<i32> {
    let text = m.elements.first().map(|e| &e.data[..]).unwrap_or_default();
    const OPEN: &[u8] = b"<QueryID>";
    let quick = text
        .windows(OPEN.len())
        .position(|w| w == OPEN)
        .and_then(|at| {
            let rest = &text[at + OPEN.len()..];
            let end = rest.iter().position(|&b| b == b'<')?;
            std::str::from_utf8(&rest[..end]).ok()?.trim().parse().ok()
        });
    quick.or_else(|| {
        ResolverQuery::from_message(m, NET_GROUP_UNIQUE)
            .ok()
            .map(|q| q.query_id)
    })
}

/// One offered rate's figures.
#[derive(Debug, Clone, Serialize)]
pub struct QueryRow {
    /// Offered total queries/s.
    pub offered_per_s: u32,
    /// How long they were offered, s.
    pub duration_s: f64,
    /// Share of queries for a published name, %.
    pub positive_pct: u32,
    /// Clients the queries were spread over.
    pub queriers: usize,
    /// Queries handed to clients.
    pub scheduled: u64,
    /// Queries written to the rendezvous.
    pub sent: u64,
    /// Of those, for a published name.
    pub sent_positive: u64,
    /// Queries not sent: the client's queue was full or it had closed
    /// (the load generator fell behind; counted, never dropped silently).
    pub not_sent: u64,
    /// Positive queries that reached their publisher within the timeout.
    pub forwarded: u64,
    /// That per second of the offering.
    pub forwarded_per_s: f64,
    /// Positive queries sent that did not arrive within the timeout, %.
    pub loss_pct: f64,
    /// Queries that arrived more than once (whole run so far).
    pub duplicates: u64,
    /// Queries for an unpublished name that reached a client anyway.
    pub negative_arrived: u64,
    /// Forwarded queries that were not the bench's (whole run so far).
    pub stray: u64,
    /// Write to arrival at the publisher, ms: median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// The rendezvous' CPU from the first query until every positive one
    /// arrived (or the timeout), % of one core.
    pub rdv_cpu_pct: f64,
    /// Its CPU per query sent (positive and negative), µs, after its idle
    /// rate (leases, renewals), measured just before, is taken off.
    pub rdv_us_per_query: f64,
    /// Its idle CPU just before, % of one core.
    pub rdv_idle_cpu_pct: f64,
    /// The bench process' CPU (clients, scheduler), % of one core.
    pub bench_cpu_pct: f64,
    /// The timeout after which a query counts as lost, ms.
    pub timeout_ms: u64,
}

/// Summarizes the queries `first..end` of `table`; `positive[i]` says
/// whether query `first + i` asked for a published name.
pub(crate) struct Tally {
    pub sent: u64,
    pub sent_positive: u64,
    pub forwarded: u64,
    /// Negative queries that reached a client (none should: nobody is
    /// indexed for them).
    pub negative_arrived: u64,
    pub lat_us: Vec<u64>,
}

pub(crate) fn tally(
    table: &QueryTable,
    first: usize,
    positive: &[bool],
    timeout: Duration,
) -> Tally {
    let mut t = Tally {
        sent: 0,
        sent_positive: 0,
        forwarded: 0,
        negative_arrived: 0,
        lat_us: Vec::new(),
    };
    for (i, &pos) in positive.iter().enumerate() {
        let seq = first + i;
        if !table.was_sent(seq) {
            continue;
        }
        t.sent += 1;
        if !pos {
            if table.latency_us(seq, Duration::MAX).is_some() {
                t.negative_arrived += 1;
            }
            continue;
        }
        t.sent_positive += 1;
        if let Some(l) = table.latency_us(seq, timeout) {
            t.forwarded += 1;
            t.lat_us.push(l);
        }
    }
    t.lat_us.sort_unstable();
    t
}

/// Offers `rate` queries/s for `duration` through `orders` (one sender per
/// client, round robin; `None`: that client is not leased), query numbers
/// from `*next_seq` on, then waits `timeout` and tallies. `rdv_pid` is the
/// rendezvous process measured.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn offer(
    table: &QueryTable,
    orders: &[Option<tokio::sync::mpsc::Sender<QueryOrder>>],
    names_per_edge: usize,
    (rate, duration, positive_pct, timeout): (u32, Duration, u32, Duration),
    next_seq: &mut usize,
    rdv_pid: u32,
) -> QueryRow {
    use rand::Rng;
    let usage = |pid: u32| crate::util::proc_usage(pid).unwrap_or_default();
    let queriers: Vec<usize> = (0..orders.len()).filter(|&i| orders[i].is_some()).collect();
    let n = (f64::from(rate) * duration.as_secs_f64()).ceil() as usize;
    let first = *next_seq;
    let mut positive = Vec::with_capacity(n);
    // The rendezvous' idle rate just before (leases, renewals).
    let (idle0, t_idle) = (usage(rdv_pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle1 = usage(rdv_pid);
    let idle_rate = (idle1.cpu_s - idle0.cpu_s).max(0.0) / t_idle.elapsed().as_secs_f64();
    let (cpu0, self0) = (usage(rdv_pid), usage(std::process::id()));
    let start = Instant::now();
    let mut rng = rand::thread_rng();
    let (mut scheduled, mut not_sent, mut turn) = (0u64, 0u64, 0usize);
    if !queriers.is_empty() {
        while positive.len() < n {
            let el = start.elapsed();
            if el >= duration {
                break;
            }
            let due = ((f64::from(rate) * el.as_secs_f64()) as usize).min(n);
            while positive.len() < due {
                let seq = first + positive.len();
                let q = queriers[turn % queriers.len()];
                turn = turn.wrapping_add(1);
                let pos = rng.gen_range(0..100) < positive_pct;
                let name = if pos {
                    // Another client's name.
                    let mut owner = queriers[rng.gen_range(0..queriers.len())];
                    if owner == q {
                        owner = queriers[(turn + 1) % queriers.len()];
                    }
                    published_name(owner, rng.gen_range(0..names_per_edge))
                } else {
                    unpublished_name(seq as u32)
                };
                positive.push(pos);
                scheduled += 1;
                let tx = orders[q].as_ref().expect("a querier has a sender");
                if tx
                    .try_send(QueryOrder {
                        seq: seq as u32,
                        name,
                    })
                    .is_err()
                {
                    not_sent += 1;
                }
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    }
    let offered_s = start.elapsed().as_secs_f64();
    // Until every positive query sent arrived, or the timeout.
    let waited = Instant::now();
    while waited.elapsed() < timeout {
        let t = tally(table, first, &positive, timeout);
        if t.forwarded >= t.sent_positive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wall = start.elapsed().as_secs_f64();
    let (cpu1, self1) = (usage(rdv_pid), usage(std::process::id()));
    *next_seq = first + positive.len();
    let t = tally(table, first, &positive, timeout);
    let rdv_cpu = (cpu1.cpu_s - cpu0.cpu_s).max(0.0);
    let pct = |x: f64| if wall > 0.0 { 100.0 * x / wall } else { 0.0 };
    let p = |q: f64| {
        let v: Vec<f64> = t.lat_us.iter().map(|&x| x as f64 / 1000.0).collect();
        crate::util::percentile(&v, q)
    };
    QueryRow {
        offered_per_s: rate,
        duration_s: offered_s,
        positive_pct,
        queriers: queriers.len(),
        scheduled,
        sent: t.sent,
        sent_positive: t.sent_positive,
        not_sent,
        forwarded: t.forwarded,
        forwarded_per_s: if offered_s > 0.0 {
            t.forwarded as f64 / offered_s
        } else {
            0.0
        },
        loss_pct: if t.sent_positive == 0 {
            0.0
        } else {
            100.0 * (t.sent_positive - t.forwarded) as f64 / t.sent_positive as f64
        },
        duplicates: table.dup.load(Ordering::Relaxed),
        negative_arrived: t.negative_arrived,
        stray: table.stray.load(Ordering::Relaxed),
        p50_ms: p(0.5),
        p99_ms: p(0.99),
        max_ms: t.lat_us.last().map_or(0.0, |&x| x as f64 / 1000.0),
        rdv_cpu_pct: pct(rdv_cpu),
        rdv_us_per_query: if t.sent == 0 {
            0.0
        } else {
            (rdv_cpu - idle_rate * wall).max(0.0) * 1e6 / t.sent as f64
        },
        rdv_idle_cpu_pct: 100.0 * idle_rate,
        bench_cpu_pct: pct((self1.cpu_s - self0.cpu_s).max(0.0)),
        timeout_ms: timeout.as_millis() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_tells_sent_arrived_late_duplicate_and_stray_apart() {
        let t = QueryTable::new(4);
        t.sent(0);
        t.sent(1);
        t.sent(2);
        t.arrived(0);
        t.arrived(0);
        t.arrived(2);
        t.arrived(-1);
        t.arrived(99);
        assert_eq!(t.dup.load(Ordering::Relaxed), 1);
        assert_eq!(t.stray.load(Ordering::Relaxed), 2);
        // 3 was never sent; 1 never arrived; 2 is negative.
        let s = tally(&t, 0, &[true, true, false, true], Duration::from_secs(2));
        assert_eq!((s.sent, s.sent_positive, s.forwarded), (3, 2, 1));
        assert_eq!(s.lat_us.len(), 1);
        // A zero timeout still counts what arrived within the same µs.
        let z = tally(&t, 0, &[true, true, false, true], Duration::ZERO);
        assert!(z.forwarded <= 1);
    }

    #[test]
    fn a_query_message_carries_its_number_and_name_and_is_recognised() {
        let me: PeerId =
            "urn:jxta:cbid-59616261646162614A78746150325033000000000000000000000000000000AB03"
                .parse()
                .unwrap();
        let o = QueryOrder {
            seq: 41,
            name: published_name(3, 0),
        };
        let m = query_message(me, &o);
        let q = ResolverQuery::from_message(&m, NET_GROUP_UNIQUE).unwrap();
        assert_eq!(q.query_id, 41);
        assert!(q.query.contains("lq-3-0"), "{}", q.query);
        let dest = ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(NET_GROUP_UNIQUE)));
        assert_eq!(forwarded_query_id(&dest, &m), Some(Some(41)));
        let other = ServiceAddress::new(RESOLVER_SERVICE, Some("elsewhere"));
        assert_eq!(forwarded_query_id(&other, &m), None);
        assert_eq!(unpublished_name(5), "ln-5");
        // The printed-once template gives the same bytes, and the quick
        // read of a query ID the same number as the parse.
        let t = QueryTemplate::new(me);
        for (seq, name) in [
            (0, published_name(0, 0)),
            (41, published_name(3, 0)),
            (7_000_001, unpublished_name(7_000_001)),
            (u32::MAX, published_name(999, 9)),
            (5, "odd <&> name".to_string()),
        ] {
            let o = QueryOrder { seq, name };
            let quick = t.message(&o);
            assert_eq!(quick, query_message(me, &o), "{o:?}");
            assert_eq!(query_id_of(&quick), Some(seq as i32));
        }
        let p = publish_message(me, 3, 2);
        assert_eq!(p.entries.len(), 2);
        assert_eq!(p.entries[1].value, "lq-3-1");
    }
}
