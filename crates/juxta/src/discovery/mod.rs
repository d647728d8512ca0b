//! The discovery service (PDP, digest §7.2): publishes advertisements into
//! the peer's persistent cache ([`crate::cache`]), finds them there, asks
//! connected peers for theirs through the resolver, and answers their
//! queries from the cache.
//!
//! Why it exists: every higher-level lookup (peers, groups, pipes) goes
//! through discovery. The wire documents and lifetime rules are in
//! [`juxta_proto::discovery`]; this module adds what needs I/O and a clock:
//! the cache, remote searches (bounded; their state is the sans-IO
//! [`juxta_proto::discovery::search::Searches`], owned by the resolver task
//! where the answers arrive: [`DiscoveryService`] sends it a command and
//! awaits the outcome), validation of everything a
//! remote peer sends before it is cached, and per-peer flow control of
//! incoming queries (a token bucket: a flooding querier is throttled and
//! counted in [`crate::Stats::discovery_throttled`]; other peers keep being
//! answered).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use juxta::{Peer, PeerConfig};
//! use juxta::proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
//! use juxta::proto::id::PipeId;
//! let a = Peer::start(PeerConfig::new("/tmp/da").listen("127.0.0.1:0".parse()?)).await?;
//! let b = Peer::start(PeerConfig::new("/tmp/db")).await?;
//! let mut pipe = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
//! pipe.name = Some("chat".into());
//! a.discovery().publish(&Advertisement::Pipe(pipe)).await?;
//! b.connect(a.local_addr().unwrap()).await?;
//! let found = b.discovery()
//!     .get_remote(AdvKind::Adv, Some("Name"), Some("ch*"), 10, None, Duration::from_secs(2))
//!     .await?;
//! assert_eq!(found.len(), 1);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use juxta_proto::advertisement::{AdvError, AdvKind, Advertisement, MAX_XML_LEN};
use juxta_proto::discovery::search::{SearchEvent, Searches};
use juxta_proto::discovery::{
    peer_adv_text, DiscoveryEntry, DiscoveryQuery, DiscoveryResponse, Lifetimes,
    DEFAULT_LIFETIME_MS, MAX_RESPONSES,
};
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use juxta_proto::resolver::{query_queue, response_queue, RESOLVER_SERVICE};
use juxta_proto::time::Millis;
use tokio::sync::oneshot;

use crate::cache::{self, CacheEntry, CacheError, CacheHandle};
use crate::peer::Inner;
use crate::SendError;

/// Errors from the discovery service.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The query is not valid (e.g. threshold 0 for a non-peer query).
    #[error("invalid discovery query: {0}")]
    InvalidQuery(#[from] juxta_proto::discovery::DiscoveryError),
    /// No connection to any peer to ask, or to the peer named.
    #[error("not connected to {0}")]
    NotConnected(String),
    /// Too many remote queries are in progress at once.
    #[error("too many discovery queries in progress (limit {0})")]
    TooManyQueries(usize),
    /// The cache failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// Sending the query failed.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The peer stopped (closed or dropped) before the search ended.
    #[error("the peer stopped")]
    Stopped,
    /// The search or publish was in a group this peer has left.
    #[error("not a member of group {0}")]
    NotMember(String),
    /// A remote search ([`Search::remote`]) asked `asked` peers and none
    /// of them answered within `timeout`: distinct from an answer that
    /// found nothing (`Ok` with no advertisements).
    #[error("none of the {asked} peers asked answered within {timeout:?}")]
    NoAnswer {
        /// Peers the query was sent to.
        asked: usize,
        /// How long the search waited.
        timeout: Duration,
    },
}

/// Why an advertisement received from another peer was not cached.
#[derive(Debug, thiserror::Error)]
pub enum Rejected {
    /// Larger than [`MAX_XML_LEN`].
    #[error("advertisement of {0} bytes is too large")]
    Oversized(usize),
    /// Malformed, of an unknown type, or wrongly signed.
    #[error("bad advertisement: {0}")]
    Invalid(#[from] AdvError),
    /// The sender gave it no time to live (`Expiration` 0).
    #[error("advertisement with expiration 0")]
    Expired,
    /// The cache refused it (field too long, cache full, ...).
    #[error("cache refused the advertisement: {0}")]
    Cache(#[from] CacheError),
    /// A peer advertisement of this peer, or an unsigned one of another
    /// peer than the sender: a peer speaks only for itself (another's
    /// advertisement needs that peer's signature).
    #[error("peer advertisement of {0} not from that peer")]
    NotFromPeer(PeerId),
}

/// Flow control and bounds of the discovery service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiscoveryConfig {
    /// Resolver queries per second answered for one peer, sustained:
    /// discovery, peer info, pipe binding and route queries share this
    /// budget (a query beyond it is dropped and counted in
    /// [`crate::Stats::discovery_throttled`]).
    pub query_rate: f64,
    /// Queries one peer may send in a burst before it is throttled.
    pub query_burst: u32,
    /// Most peers tracked by the token buckets.
    pub max_tracked_peers: usize,
    /// Most remote queries in progress at once.
    pub max_pending: usize,
    /// Longest expiration accepted from another peer, ms (longer ones are
    /// capped).
    pub max_remote_expiration_ms: u64,
    /// Largest advertisement accepted from another peer, bytes (at most
    /// [`MAX_XML_LEN`]; the whole resolver response is bounded by it too).
    pub max_adv_bytes: usize,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            query_rate: 200.0,
            query_burst: 100,
            max_tracked_peers: 4096,
            max_pending: 1024,
            max_remote_expiration_ms: DEFAULT_LIFETIME_MS,
            max_adv_bytes: 32 * 1024,
        }
    }
}

/// Per-peer discovery state kept in the peer.
pub(crate) struct State {
    pub(crate) cache: CacheHandle,
    cfg: DiscoveryConfig,
    /// This peer's advertisement as discovery responses carry it (it does
    /// not change while the peer runs: ID, name, listening address),
    /// printed once instead of for every query answered.
    own_text: std::sync::OnceLock<String>,
}

impl State {
    pub(crate) fn new(cache: CacheHandle, cfg: DiscoveryConfig) -> State {
        State {
            cache,
            cfg,
            own_text: std::sync::OnceLock::new(),
        }
    }
}

/// A remote search a [`DiscoveryService`] asks the resolver task for.
pub(crate) struct SearchRequest {
    /// The group (`None`: the Net peer group).
    scope: Option<Arc<crate::group::GroupCtx>>,
    /// Its unique value.
    group: String,
    /// The query (its ID is the search's).
    query: DiscoveryQuery,
    /// The peers to ask.
    targets: Vec<PeerId>,
    /// How long to wait for answers.
    timeout: Duration,
    /// Where the outcome goes.
    reply: oneshot::Sender<Result<Found, DiscoveryError>>,
}

/// The remote searches in progress: the resolver task's (it sends their
/// queries, feeds them the answers and runs their timer).
pub(crate) struct RemoteSearches {
    searches: Searches,
    waiting: HashMap<i32, oneshot::Sender<Result<Found, DiscoveryError>>>,
}

impl RemoteSearches {
    pub(crate) fn new(max: usize) -> RemoteSearches {
        RemoteSearches {
            searches: Searches::new(rand::random::<u16>() as i32 + 1, max),
            waiting: HashMap::new(),
        }
    }

    /// Starts a search: sends its query to each target.
    pub(crate) fn start(&mut self, inner: &Inner, req: SearchRequest, now: Millis) {
        let SearchRequest {
            scope,
            group,
            query,
            targets,
            timeout,
            reply,
        } = req;
        let want = (query.threshold as usize).max(1);
        if self.searches.len() >= inner.discovery.cfg.max_pending {
            // Make room first: searches whose caller stopped waiting.
            self.reap();
        }
        let id = match self.searches.start(now, &group, want, timeout) {
            Ok(id) => id,
            Err(_) => {
                let max = inner.discovery.cfg.max_pending;
                let _ = reply.send(Err(DiscoveryError::TooManyQueries(max)));
                return;
            }
        };
        let mut rq = query.to_resolver_query(id, *inner.identity.peer_id());
        rq.src_route = local_route(inner);
        let mut asked = 0;
        for p in &targets {
            let Some(m) = inner.messenger(p) else {
                continue;
            };
            if post(
                scope.as_ref(),
                &m,
                &query_queue(&group),
                rq.to_element(&group),
            )
            .is_ok()
            {
                asked += 1;
            }
        }
        if asked == 0 {
            self.searches.cancel(id);
            let _ = reply.send(Err(DiscoveryError::NotConnected("any peer".into())));
            return;
        }
        self.waiting.insert(id, reply);
        self.searches.asked(id, asked);
        self.run();
    }

    /// Whether an answer `query_id` on `group`'s queue is awaited.
    fn is_pending(&self, query_id: i32, group: &str) -> bool {
        self.searches.is_pending(query_id, group)
    }

    /// An answer arrived, with the advertisements kept from it.
    fn answered(
        &mut self,
        now: Millis,
        query_id: i32,
        group: &str,
        advs: Vec<Advertisement>,
    ) -> bool {
        let taken = self.searches.handle_answer(now, query_id, group, advs);
        self.run();
        taken
    }

    /// When [`RemoteSearches::handle_timeout`] is next due.
    pub(crate) fn poll_timeout(&self) -> Option<Millis> {
        self.searches.poll_timeout()
    }

    /// Ends the searches past their deadline, and forgets those whose
    /// caller stopped waiting.
    pub(crate) fn handle_timeout(&mut self, now: Millis) {
        self.reap();
        self.searches.handle_timeout(now);
        self.run();
    }

    /// Forgets the searches whose caller stopped waiting.
    fn reap(&mut self) {
        self.waiting.retain(|id, w| {
            let open = !w.is_closed();
            if !open {
                self.searches.cancel(*id);
            }
            open
        });
    }

    fn run(&mut self) {
        while let Some(SearchEvent::Done { query_id, found }) = self.searches.poll_event() {
            if let Some(w) = self.waiting.remove(&query_id) {
                let _ = w.send(Ok(Found {
                    advertisements: found.advertisements,
                    asked: found.asked,
                    answered: found.answered,
                }));
            }
        }
    }
}

/// A resolver message carrying `elem` on `queue` in the group of `scope`
/// (with the group tag in a certificate group), posted to `m`.
fn post(
    scope: Option<&Arc<crate::group::GroupCtx>>,
    m: &crate::endpoint::Messenger,
    queue: &str,
    elem: juxta_proto::message::Element,
) -> Result<(), SendError> {
    match scope {
        None => m.post_routed(RESOLVER_SERVICE, Some(queue), Message::new().with(elem)),
        Some(c) => m.post_routed_in(
            &c.unique,
            RESOLVER_SERVICE,
            Some(queue),
            c.message(queue, elem),
        ),
    }
}

fn to_cache_kind(k: AdvKind) -> cache::AdvKind {
    match k {
        AdvKind::Peer => cache::AdvKind::Peer,
        AdvKind::Group => cache::AdvKind::Group,
        AdvKind::Adv => cache::AdvKind::Adv,
    }
}

fn entry_for(adv: &Advertisement, document: String, life: Lifetimes) -> CacheEntry {
    CacheEntry {
        kind: to_cache_kind(adv.kind()),
        adv_type: adv.adv_type().to_string(),
        id: adv.id(),
        index: adv
            .index_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        document: Bytes::from(document),
        lifetime_ms: life.lifetime_ms.max(1),
        expiration_ms: life.expiration_ms,
    }
}

/// Checks one advertisement received from another peer: at most
/// `max_bytes` (and [`MAX_XML_LEN`]), a time to live, well formed, of a
/// known type, and correctly signed if signed.
pub fn validate_entry(e: &DiscoveryEntry, max_bytes: usize) -> Result<Advertisement, Rejected> {
    if e.adv.len() > max_bytes.min(MAX_XML_LEN) {
        return Err(Rejected::Oversized(e.adv.len()));
    }
    if e.expiration_ms == 0 {
        return Err(Rejected::Expired);
    }
    Ok(e.advertisement()?)
}

/// The discovery service of a [`crate::Peer`]; get it with
/// [`crate::Peer::discovery`].
#[derive(Clone)]
pub struct DiscoveryService {
    pub(crate) inner: Arc<Inner>,
    /// The group (`None`: the Net peer group).
    pub(crate) scope: Option<Arc<crate::group::GroupCtx>>,
}

impl crate::Peer {
    /// The discovery service of this peer (Net peer group).
    pub fn discovery(&self) -> DiscoveryService {
        DiscoveryService {
            inner: self.inner.clone(),
            scope: None,
        }
    }
}

impl DiscoveryService {
    /// The cache of this service's group (its partition in a subgroup).
    fn cache(&self) -> Result<CacheHandle, DiscoveryError> {
        match &self.scope {
            None => Ok(self.inner.discovery.cache.clone()),
            Some(c) => c
                .cache()
                .ok_or_else(|| DiscoveryError::NotMember(c.id.to_string())),
        }
    }

    /// The unique value of this service's group.
    fn group(&self) -> String {
        match &self.scope {
            None => self.inner.group_unique().to_string(),
            Some(c) => c.unique.clone(),
        }
    }

    /// Publishes `adv` locally with JXSE's default lifetimes (kept 1 year,
    /// given to others for 2 hours).
    pub async fn publish(&self, adv: &Advertisement) -> Result<(), DiscoveryError> {
        self.publish_with(adv, Lifetimes::default()).await
    }

    /// Publishes `adv` locally with the given lifetimes. On an edge with a
    /// rendezvous ([`crate::PeerConfig::rendezvous`]), its indexed fields
    /// are also pushed as SRDI entries (`Peers`/`Groups`/`Adv`, attribute,
    /// value) to the rendezvous, so queries through the rendezvous reach
    /// this peer, as a JXSE edge's entries would.
    pub async fn publish_with(
        &self,
        adv: &Advertisement,
        life: Lifetimes,
    ) -> Result<(), DiscoveryError> {
        let e = entry_for(adv, adv.to_xml(), life);
        self.cache()?.publish(e, cache::unix_now_ms()).await?;
        // SRDI entries go to the rendezvous of this service's group: the
        // Net peer group's, or the subgroup's own (its entries are in the
        // group's scope only).
        let rdv = crate::group::rdv_of(&self.inner, self.scope.as_ref());
        if let Some(h) = rdv.filter(|h| !h.is_rendezvous()) {
            let fields: Vec<(String, String)> = adv
                .index_fields()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            h.publish_entries(
                adv.kind().srdi_primary_key(),
                &fields,
                Duration::from_millis(life.expiration_ms),
            )
            .await;
        }
        Ok(())
    }

    /// Sends `adv` to `to` (every connected peer if `None`) as a remote
    /// publish (a discovery response with query ID 0), with the default
    /// expiration. Returns how many peers it was sent to.
    pub async fn remote_publish(
        &self,
        adv: &Advertisement,
        to: Option<PeerId>,
    ) -> Result<usize, DiscoveryError> {
        let targets = self.targets(to)?;
        let r = DiscoveryResponse::remote_publish(adv, Lifetimes::default().expiration_ms);
        let g = self.group();
        self.cache()?;
        let mut sent = 0;
        for p in targets {
            let Some(m) = self.inner.messenger(&p) else {
                continue;
            };
            let elem = r.to_resolver_response(0).to_element(&g);
            post(self.scope.as_ref(), &m, &response_queue(&g), elem)?;
            sent += 1;
        }
        Ok(sent)
    }

    /// Advertisements of `kind` in the local cache whose indexed field
    /// `attr` matches `value` (`*` wildcards; `None`: any), at most
    /// `threshold`. Expired ones are never returned.
    pub async fn get_local(
        &self,
        kind: AdvKind,
        attr: Option<&str>,
        value: Option<&str>,
        threshold: usize,
    ) -> Result<Vec<Advertisement>, DiscoveryError> {
        let hits = self
            .cache()?
            .query(
                to_cache_kind(kind),
                attr.map(str::to_string),
                value.map(str::to_string),
                threshold,
                cache::unix_now_ms(),
            )
            .await?;
        Ok(hits
            .iter()
            .filter_map(|h| {
                let doc = std::str::from_utf8(&h.document).ok()?;
                Advertisement::parse(doc).ok()
            })
            .collect())
    }

    /// Removes an advertisement (by [`Advertisement::id`]) from the local
    /// cache; `false` if it was not there.
    pub async fn flush(&self, id: &str) -> Result<bool, DiscoveryError> {
        Ok(self.cache()?.remove(id.to_string()).await?)
    }

    fn targets(&self, peer: Option<PeerId>) -> Result<Vec<PeerId>, DiscoveryError> {
        // In a subgroup with its own rendezvous leased: the query goes
        // through it (its SRDI index forwards it to the publishers).
        let group_rdv = self
            .scope
            .as_ref()
            .and_then(|c| c.rendezvous())
            .and_then(|h| h.status().leased_to)
            .filter(|r| self.inner.messenger(r).is_some());
        match peer {
            Some(p) if self.inner.messenger(&p).is_some() => Ok(vec![p]),
            Some(p) => Err(DiscoveryError::NotConnected(p.to_string())),
            None if group_rdv.is_some() => Ok(group_rdv.into_iter().collect()),
            None => {
                let all = self.inner.connected_peers();
                if all.is_empty() {
                    Err(DiscoveryError::NotConnected("any peer".into()))
                } else {
                    Ok(all)
                }
            }
        }
    }

    /// Starts building a search for advertisements of `kind`: see
    /// [`Search`]. The same query as [`DiscoveryService::get_local`] and
    /// [`DiscoveryService::get_remote`], with named settings instead of
    /// positional arguments and a remote result that tells "nobody
    /// answered" apart from "nothing found".
    pub fn search(&self, kind: AdvKind) -> Search<'_> {
        Search {
            svc: self,
            kind,
            attr: None,
            value: None,
            threshold: 10,
            peer: None,
            timeout: Duration::from_secs(3),
        }
    }

    /// Asks `peer` (every connected peer if `None`) for advertisements of
    /// `kind` matching `attr`/`value`, and collects the answers until
    /// `threshold` advertisements arrived, every peer asked answered, or
    /// `timeout` passed. Every advertisement received is validated (bad
    /// ones are counted in [`crate::Stats::discovery_rejected`], never
    /// cached) and cached with the expiration it came with.
    ///
    /// Returns `Ok` with what arrived, also when nobody answered in time;
    /// [`DiscoveryService::search`] with [`Search::remote`] tells those
    /// cases apart.
    pub async fn get_remote(
        &self,
        kind: AdvKind,
        attr: Option<&str>,
        value: Option<&str>,
        threshold: u32,
        peer: Option<PeerId>,
        timeout: Duration,
    ) -> Result<Vec<Advertisement>, DiscoveryError> {
        Ok(self
            .remote_query(kind, attr, value, threshold, peer, timeout)
            .await?
            .advertisements)
    }

    async fn remote_query(
        &self,
        kind: AdvKind,
        attr: Option<&str>,
        value: Option<&str>,
        threshold: u32,
        peer: Option<PeerId>,
        timeout: Duration,
    ) -> Result<Found, DiscoveryError> {
        let mut q = DiscoveryQuery::new(kind, threshold);
        if let Some(a) = attr {
            q = q.matching(a, value.unwrap_or("*"));
        }
        q.validate()?;
        self.cache()?;
        let targets = self.targets(peer)?;
        let (reply, rx) = oneshot::channel();
        let req = SearchRequest {
            scope: self.scope.clone(),
            group: self.group(),
            query: q,
            targets,
            timeout,
            reply,
        };
        // The resolver task owns the search: it sends the query, takes the
        // answers and ends it (enough found, everyone answered, or the
        // timeout). Dropping this future abandons it.
        if !self
            .inner
            .commands
            .send(crate::resolver::Command::Search(req))
            .await
        {
            return Err(DiscoveryError::Stopped);
        }
        rx.await.map_err(|_| DiscoveryError::Stopped)?
    }
}

/// A discovery search being built ([`DiscoveryService::search`]).
///
/// Defaults: any advertisement of the kind, at most 10, every connected
/// peer asked, 3 s to wait for answers.
///
/// ```no_run
/// # async fn demo(peer: &juxta::Peer) -> Result<(), juxta::discovery::DiscoveryError> {
/// use std::time::Duration;
/// use juxta::discovery::DiscoveryError;
/// use juxta::proto::advertisement::AdvKind;
/// match peer
///     .discovery()
///     .search(AdvKind::Adv)
///     .matching("Name", "printer*")
///     .threshold(5)
///     .timeout(Duration::from_secs(2))
///     .remote()
///     .await
/// {
///     Ok(found) => println!("{} of {} peers answered: {:?}",
///         found.answered, found.asked, found.advertisements),
///     Err(DiscoveryError::NoAnswer { asked, .. }) => println!("none of {asked} peers answered"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[must_use = "a search does nothing until `local()` or `remote()` is awaited"]
pub struct Search<'a> {
    svc: &'a DiscoveryService,
    kind: AdvKind,
    attr: Option<String>,
    value: Option<String>,
    threshold: u32,
    peer: Option<PeerId>,
    timeout: Duration,
}

impl Search<'_> {
    /// Only advertisements whose indexed field `attr` (e.g. `Name`,
    /// `PID`, `GID`) matches `value` (`*` wildcards at either end).
    pub fn matching(mut self, attr: &str, value: &str) -> Self {
        self.attr = Some(attr.to_string());
        self.value = Some(value.to_string());
        self
    }

    /// At most `n` advertisements (a remote search also stops waiting
    /// once `n` arrived).
    pub fn threshold(mut self, n: u32) -> Self {
        self.threshold = n;
        self
    }

    /// Ask only `peer` (a remote search); by default every connected
    /// peer (for an edge: its rendezvous, which forwards the query).
    pub fn ask(mut self, peer: PeerId) -> Self {
        self.peer = Some(peer);
        self
    }

    /// How long a remote search waits for answers.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Searches this peer's own cache.
    pub async fn local(self) -> Result<Vec<Advertisement>, DiscoveryError> {
        self.svc
            .get_local(
                self.kind,
                self.attr.as_deref(),
                self.value.as_deref(),
                self.threshold as usize,
            )
            .await
    }

    /// Asks other peers. `Err(DiscoveryError::NoAnswer)` when none of the
    /// peers asked answered within the timeout; `Ok` (possibly with no
    /// advertisements) when at least one did.
    pub async fn remote(self) -> Result<Found, DiscoveryError> {
        let found = self
            .svc
            .remote_query(
                self.kind,
                self.attr.as_deref(),
                self.value.as_deref(),
                self.threshold,
                self.peer,
                self.timeout,
            )
            .await?;
        if found.answered == 0 && found.advertisements.is_empty() {
            return Err(DiscoveryError::NoAnswer {
                asked: found.asked,
                timeout: self.timeout,
            });
        }
        Ok(found)
    }
}

/// What a remote search ([`Search::remote`]) collected.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Found {
    /// The advertisements received (validated, cached, no duplicates).
    pub advertisements: Vec<Advertisement>,
    /// Peers the query was sent to.
    pub asked: usize,
    /// Answers received before the search ended (a peer may answer more
    /// than once, e.g. a rendezvous and the edges it forwarded to).
    pub answered: usize,
}

/// This peer's route (its TCP listen address), for `SrcPeerRoute`: lets a
/// peer that receives the query forwarded by a rendezvous answer directly.
/// `None` when the peer does not listen.
pub(crate) fn local_route(inner: &Inner) -> Option<juxta_proto::advertisement::RouteAdvertisement> {
    let addr: std::net::SocketAddr = inner.public_addr.strip_prefix("tcp://")?.parse().ok()?;
    if addr.port() == 0 {
        return None;
    }
    Some(juxta_proto::advertisement::RouteAdvertisement::direct(
        *inner.identity.peer_id(),
        [inner.public_addr.clone()],
    ))
}

/// This peer's own advertisement, published at start.
pub(crate) fn own_adv(inner: &Inner) -> Advertisement {
    Advertisement::Peer(crate::pipe::local_peer_adv(inner))
}

/// Publishes the peer's own advertisement into its cache.
pub(crate) async fn publish_own(inner: &Inner) -> Result<(), CacheError> {
    let adv = own_adv(inner);
    let e = entry_for(&adv, adv.to_xml(), Lifetimes::default());
    inner
        .discovery
        .cache
        .publish(e, cache::unix_now_ms())
        .await
        .map(|_| ())
}

/// Whether [`answer`] would certainly find nothing for `q` in `cache`
/// (an exact query the cache's filter rules out), so that a rendezvous,
/// which sends no empty answers, only has to forward it.
pub(crate) fn certainly_unanswered(cache: &CacheHandle, q: &DiscoveryQuery) -> bool {
    if q.kind == AdvKind::Peer && q.answer_limit() == 0 {
        // Answered with this peer's own advertisement.
        return false;
    }
    let (attr, value) = exact_terms(q);
    !cache.may_hold(to_cache_kind(q.kind), attr, value)
}

/// The attribute and value [`answer`] looks `q` up by (no value without a
/// non-blank attribute).
fn exact_terms(q: &DiscoveryQuery) -> (Option<&str>, Option<&str>) {
    match q.attr.as_deref().filter(|a| !a.trim().is_empty()) {
        Some(a) => (Some(a), q.value.as_deref()),
        None => (None, None),
    }
}

/// Answers a discovery query from the local cache (called by the resolver
/// after flow control).
pub(crate) async fn answer(
    inner: &Inner,
    cache: &CacheHandle,
    q: &DiscoveryQuery,
) -> Result<DiscoveryResponse, DiscoveryError> {
    let limit = q.answer_limit();
    let mut entries: Vec<DiscoveryEntry> = Vec::new();
    if q.kind == AdvKind::Peer && limit == 0 {
        entries.push(DiscoveryEntry::new(
            &own_adv(inner),
            Lifetimes::default().expiration_ms,
        ));
    } else {
        let (attr, value) = exact_terms(q);
        let hits = cache
            .query(
                to_cache_kind(q.kind),
                attr.map(str::to_string),
                value.map(str::to_string),
                limit,
                cache::unix_now_ms(),
            )
            .await?;
        for h in hits {
            if h.remaining_expiration_ms == 0 {
                continue;
            }
            let Ok(doc) = std::str::from_utf8(&h.document) else {
                continue;
            };
            entries.push(DiscoveryEntry::document(doc, h.remaining_expiration_ms));
        }
    }
    entries.truncate(MAX_RESPONSES);
    let mut r = q.response(entries)?;
    let own = inner
        .discovery
        .own_text
        .get_or_init(|| peer_adv_text(&crate::pipe::local_peer_adv(inner)));
    r.peer_adv = Some(own.clone());
    Ok(r)
}

/// A discovery response arrived: validates and caches its advertisements
/// and hands them to the waiting query (query ID 0: a remote publish).
///
/// Nothing unsolicited is cached: a response for no pending query is
/// dropped (counted in `discovery_late`), a remote publish is taken only
/// from a peer that proved its ID, and there only peer advertisements of
/// the sender itself. No remote advertisement replaces this peer's own.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn on_response(
    inner: &Inner,
    searches: &mut RemoteSearches,
    group: &str,
    cache: &CacheHandle,
    query_id: i32,
    r: DiscoveryResponse,
    from: Option<PeerId>,
    proven: bool,
) {
    let st = &inner.discovery;
    if query_id == 0 {
        if !proven {
            crate::peer::count_unproven(
                inner,
                &from.unwrap_or(*inner.identity.peer_id()),
                "discovery remote publish",
            );
            return;
        }
    } else if !searches.is_pending(query_id, group) {
        // No search awaits it, or it came on another group's queue than
        // the query's (it would put that group's advertisements here).
        inner.stats.discovery_late.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(query_id, "discovery response for no pending query dropped");
        return;
    }
    let me = *inner.identity.peer_id();
    let mut good = Vec::new();
    let mut entries = Vec::new();
    for e in &r.responses {
        let checked = validate_entry(e, st.cfg.max_adv_bytes).and_then(|adv| match &adv {
            Advertisement::Peer(pa) if pa.peer_id == me => Err(Rejected::NotFromPeer(pa.peer_id)),
            // Another peer's advertisement (in an answer or a remote
            // publish): believed only when that peer signed it, since it
            // names where that peer can be reached.
            Advertisement::Peer(pa) if Some(pa.peer_id) != from => {
                match Advertisement::parse_signed(&e.adv) {
                    Ok((_, Some(signer))) if signer == pa.peer_id => Ok(adv),
                    _ => Err(Rejected::NotFromPeer(pa.peer_id)),
                }
            }
            _ => Ok(adv),
        });
        match checked {
            Ok(adv) => {
                let exp = e.expiration_ms.min(st.cfg.max_remote_expiration_ms);
                entries.push(entry_for(&adv, e.adv.clone(), Lifetimes::remote(exp)));
                good.push(adv);
            }
            Err(why) => {
                inner
                    .stats
                    .discovery_rejected
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%why, "advertisement in a discovery response rejected");
            }
        }
    }
    if !entries.is_empty() {
        let now = cache::unix_now_ms();
        let res = cache
            .call(move |c| {
                entries
                    .into_iter()
                    .map(|e| c.publish(e, now).is_ok())
                    .collect::<Vec<bool>>()
            })
            .await;
        match res {
            Ok(oks) => {
                let mut i = 0;
                good.retain(|_| {
                    let ok = oks.get(i).copied().unwrap_or(false);
                    i += 1;
                    ok
                });
                let refused = oks.iter().filter(|ok| !**ok).count() as u64;
                inner
                    .stats
                    .discovery_rejected
                    .fetch_add(refused, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(error = %e, "discovery cache unavailable"),
        }
    }
    if query_id != 0 && !searches.answered(inner.clock.now(), query_id, group, good) {
        inner.stats.discovery_late.fetch_add(1, Ordering::Relaxed);
    }
}
