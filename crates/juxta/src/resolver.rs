//! The resolver service (PRP) task. Every group's resolver traffic passes
//! a [`juxta_proto::node::Node`], the machine the simulator and the
//! socket-less tests run: its resolver part parses, admits (a budget per
//! querier for every query kind) and routes each query and response, and
//! the queries and responses it admits for this task's services come out
//! as events that this task executes: the Pipe Binding Protocol
//! (`JxtaPipeResolver`), discovery, peer info (PIP), routes and group
//! revocation lists, answered over the path the peer's resolver machine
//! ([`Machine`]) chose.
//!
//! Step one is this task's, before any node: the machine scopes the
//! message (its queue and group; only joined groups are served), and the
//! group's member seal is checked here (the group's key material).
//! Step two is the group's node:
//! - a group whose rendezvous service runs on this peer (the Net group
//!   with [`crate::PeerConfig::rendezvous`], a subgroup after
//!   [`crate::group::Group::start_rendezvous`]) has its node in its
//!   rendezvous task; the message is handed there, Juxta's lookups, busy
//!   notices and the answers the rendezvous awaits stay in the node, and
//!   what it admitted for the services above comes back here
//!   ([`Admitted`]);
//! - any other group's node runs in this task, on a rendezvous part
//!   without a role ([`RendezvousConfig::none`]); its events are executed
//!   the same way.
//!
//! Refusals are counted in [`crate::Stats`]: a group this peer has not
//! joined in [`crate::Stats::group_refused`] (the Net group is open to
//! all), a querier over its budget in
//! [`crate::Stats::discovery_throttled`], an answer dial refused in
//! [`crate::Stats::dials_throttled`], a malformed message in
//! [`crate::Stats::resolver_errors`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use juxta_proto::advertisement::PipeType;
use juxta_proto::discovery::peerinfo::{PeerInfoQuery, PEERINFO_HANDLER};
use juxta_proto::discovery::{DiscoveryQuery, DiscoveryResponse, DISCOVERY_HANDLER};
use juxta_proto::endpoint::route_query::{NO_ROUTE_HANDLER, ROUTER_HANDLER};
use juxta_proto::endpoint::{Delivery, ServiceAddress};
use juxta_proto::id::{PeerGroupId, PeerId};
use juxta_proto::message::Message;
use juxta_proto::node::{Event, InputError};
use juxta_proto::pipe::binding::{BindingError, PipeResolverMsg, PIPE_RESOLVER_HANDLER};
use juxta_proto::rendezvous::node::{RendezvousConfig, RendezvousNode};
use juxta_proto::resolver::node::{
    AnswerPath, Groups, Handler, Refusal, ResolverConfig, ResolverNode,
};
use juxta_proto::resolver::{
    query_queue, response_queue, ResolverError, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use tokio::sync::{mpsc, oneshot};
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
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Route(#[from] crate::relay::route::RouteFault),
    #[error(transparent)]
    Node(juxta_proto::rendezvous::node::NodeError),
}

/// The services of this peer that own resolver handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    /// Discovery (the class URN, possibly followed by the group).
    Discovery,
    /// The Pipe Binding Protocol.
    PipeBinding,
    /// Peer info (PIP).
    PeerInfo,
    /// Route queries and responses of the endpoint router.
    Route,
    /// Juxta's "no route" answers (responses only).
    NoRoute,
    /// A group's certificate revocation list (joined groups only).
    Revocations,
}

/// The peer's resolver machine for step one (which group and queue a
/// message is for, joined groups) and for answers (their paths and the
/// bounds on answer dials): the resolver task's (the Net group's
/// rendezvous task scopes the Net group's queues in its own node, with
/// `Node::handle_message_in`). Step two, parsing and admission, is a
/// group node's.
pub(crate) type Machine = ResolverNode<Service>;

/// The resolver settings of a peer whose Net group (or, for a group's
/// node, whose group) has unique value `net`, with the discovery
/// service's query budget.
pub(crate) fn config(net: &str, d: &crate::discovery::DiscoveryConfig) -> ResolverConfig {
    let mut cfg = ResolverConfig::new(net);
    cfg.query_rate = d.query_rate;
    cfg.query_burst = d.query_burst;
    cfg.max_tracked_peers = d.max_tracked_peers;
    cfg.max_groups = juxta_proto::group::MAX_MEMBERSHIPS;
    cfg
}

/// The handlers of the services this task runs, registered in every
/// group's node (which adds the rendezvous' lookups). A group's
/// revocation list is served in joined groups only (`crl`:
/// [`Groups::JoinedOnly`] in the Net group's node; [`Groups::All`] in a
/// subgroup's node, whose one group is joined).
pub(crate) fn handlers(crl: Groups) -> [Handler<Service>; 6] {
    let mut revocations = Handler::exact(Service::Revocations, crate::group::CRL_HANDLER);
    revocations.groups = crl;
    [
        Handler::prefix(Service::Discovery, DISCOVERY_HANDLER).admit_unsolicited(),
        Handler::exact(Service::PipeBinding, PIPE_RESOLVER_HANDLER),
        Handler::exact(Service::PeerInfo, PEERINFO_HANDLER),
        Handler::exact(Service::Route, ROUTER_HANDLER),
        Handler::exact(Service::NoRoute, NO_ROUTE_HANDLER).responses_only(),
        revocations,
    ]
}

/// The resolver machine of a peer in the group `net` (see [`Machine`]).
pub(crate) fn machine(net: &str, d: &crate::discovery::DiscoveryConfig) -> Machine {
    ResolverNode::new(config(net, d))
}

/// The rendezvous part of a node in the Net peer group (on `g`, its
/// configured unique value) or in a subgroup.
pub(crate) fn rendezvous_part(
    cfg: RendezvousConfig,
    me: PeerId,
    group: PeerGroupId,
    g: &str,
    pa: Bytes,
    name: &str,
) -> RendezvousNode {
    if group == PeerGroupId::NET {
        RendezvousNode::new(cfg, me, g, pa, name, rand::random())
    } else {
        RendezvousNode::new_in(cfg, me, group, pa, name, rand::random())
    }
}

/// The node of group `group` (unique value `g`): a rendezvous part on
/// `cfg` ([`rendezvous_part`]) behind the group's resolver, with
/// [`handlers`] (and the rendezvous' lookups) and the discovery service's
/// budgets. The Net group's node serves the revocation lists of joined
/// groups only ([`Groups::JoinedOnly`]); a subgroup's node serves its one
/// (joined) group's ([`Groups::All`]).
pub(crate) fn group_node(
    cfg: RendezvousConfig,
    me: PeerId,
    group: PeerGroupId,
    g: &str,
    pa: Bytes,
    name: &str,
    d: &crate::discovery::DiscoveryConfig,
) -> juxta_proto::node::Node<Service> {
    let crl = if group == PeerGroupId::NET {
        Groups::JoinedOnly
    } else {
        Groups::All
    };
    let rdv = rendezvous_part(cfg, me, group, g, pa, name);
    // Only the lookup handler is registered before: cannot fail.
    let mut n = juxta_proto::node::Node::new(rdv, config(g, d)).expect("an empty registry");
    for h in handlers(crl) {
        // Distinct names, fewer than MAX_HANDLERS: cannot fail.
        let _ = n.register(h);
    }
    n
}

/// Most admitted queries and responses queued from the groups' nodes for
/// this task (past this a node's are dropped and counted in
/// [`crate::Stats::resolver_errors`]: a node never waits for this task,
/// which waits for the nodes).
pub(crate) const ADMITTED_QUEUE: usize = 1024;

/// A query or response a group's node admitted for one of this task's
/// services.
pub(crate) struct Admitted {
    /// The group (`None`: the Net peer group).
    pub(crate) ctx: Option<Arc<crate::group::GroupCtx>>,
    /// Its unique value.
    pub(crate) group: String,
    /// [`Event::Query`] or [`Event::Response`].
    pub(crate) event: Event<Service>,
}

/// The resolver's clock: the peer's.
fn now_ms(inner: &Inner) -> u64 {
    inner.clock.now()
}

/// Most commands queued for the resolver task (a caller past this waits
/// for room: services push back, nothing is dropped).
pub(crate) const COMMAND_QUEUE: usize = 256;

/// What a service asks the resolver task to do: the task owns the state
/// of the searches and resolutions in progress, since their answers arrive
/// there.
pub(crate) enum Command {
    /// Resolve which peer holds an input pipe.
    Bind(crate::pipe::registry::BindRequest),
    /// Ask peers a discovery query and gather their answers.
    Search(crate::discovery::SearchRequest),
    /// Find a route to a peer this peer has no connection to.
    FindRoute(crate::relay::route::RouteRequest),
}

/// A way to the resolver task: one bounded channel of `T` (the services'
/// [`Commands`], the peer's [`Notices`]).
pub(crate) struct ToTask<T>(mpsc::Sender<T>);

impl<T> Clone for ToTask<T> {
    fn clone(&self) -> Self {
        ToTask(self.0.clone())
    }
}

impl<T: Send + 'static> ToTask<T> {
    /// A handle and the task's end of a channel of `capacity`.
    pub(crate) fn channel(capacity: usize) -> (ToTask<T>, mpsc::Receiver<T>) {
        let (tx, rx) = mpsc::channel(capacity);
        (ToTask(tx), rx)
    }

    /// Hands `t` to the task, waiting for room (an outcome comes on the
    /// request's reply channel); `false` when the task is gone (the peer
    /// stopped).
    pub(crate) async fn send(&self, t: T) -> bool {
        self.0.send(t).await.is_ok()
    }

    /// Hands `t` to the task without waiting. The queues this is used on
    /// are sized so that it finds room; if it ever does not, `t` is sent
    /// from a task of its own (its order against later items is then not
    /// kept) and counted in [`crate::Stats::resolver_errors`].
    fn post(&self, inner: &Inner, t: T) {
        match self.0.try_send(t) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(t)) => {
                inner.stats.resolver_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("resolver task queue full: one item sent late");
                let tx = self.0.clone();
                inner.tasks.spawn(async move {
                    let _ = tx.send(t).await;
                });
            }
        }
    }
}

/// The services' commands to the resolver task ([`COMMAND_QUEUE`]).
pub(crate) type Commands = ToTask<Command>;

/// Room for notices: a leave is sent once per group left, and a join
/// waits for its answer, which the task gives after every notice before
/// it, so at most [`juxta_proto::group::MAX_MEMBERSHIPS`] leaves wait at
/// once per join in progress; dial ends are at most
/// [`juxta_proto::resolver::node::MAX_ANSWER_DIALS`] (one per dial in
/// progress). Twice the memberships and the dials leave room for joins
/// racing leaves.
pub(crate) const NOTICE_QUEUE: usize =
    2 * juxta_proto::group::MAX_MEMBERSHIPS + juxta_proto::resolver::node::MAX_ANSWER_DIALS;

/// What the resolver task's machine must learn of the peer's groups and
/// answer dials. One channel, so that a leave and a later join of the
/// same group arrive in the order they were made.
pub(crate) enum Notice {
    /// The group (unique value) was joined: its traffic is served once the
    /// reply comes (refused: too many groups).
    Join(
        String,
        oneshot::Sender<Result<(), crate::group::GroupError>>,
    ),
    /// The group was left: its traffic is refused.
    Leave(String),
    /// An answer dial to this peer ended (delivered or not).
    DialFinished(PeerId),
}

/// The way to tell the resolver task of memberships and dial ends (see
/// [`Notice`], [`NOTICE_QUEUE`]): joins wait for their answer; leaves and
/// dial ends, sent from code that cannot wait (a group closed under its
/// registry's lock, a dial ticket dropped), are posted.
pub(crate) type Notices = ToTask<Notice>;

/// What the resolver task owns besides the groups' nodes.
struct Services {
    /// Step one and answer paths (see [`Machine`]).
    machine: Machine,
    nodes: Nodes,
    binds: crate::pipe::registry::Bindings,
    searches: crate::discovery::RemoteSearches,
    routes: crate::relay::route::RouteSearches,
}

impl Services {
    /// The earliest deadline of the state held here.
    fn poll_timeout(&self) -> Option<u64> {
        [
            self.binds.poll_timeout(),
            self.searches.poll_timeout(),
            self.routes.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, inner: &Arc<Inner>, now: u64) {
        self.binds.handle_timeout(inner, now);
        self.searches.handle_timeout(now);
        self.routes.handle_timeout(inner, false);
    }

    fn command(&mut self, inner: &Arc<Inner>, c: Command) {
        let now = now_ms(inner);
        match c {
            Command::Bind(req) => self.binds.start(inner, req, now),
            Command::Search(req) => self.searches.start(inner, req, now),
            Command::FindRoute(req) => self.routes.start(inner, req),
        }
    }
}

/// The group `unique` was joined: its resolver traffic is served once
/// this returns. [`crate::group::GroupError::TooManyGroups`] past
/// [`juxta_proto::group::MAX_MEMBERSHIPS`];
/// [`crate::group::GroupError::Stopped`] when the peer is closing.
pub(crate) async fn join(inner: &Inner, unique: &str) -> Result<(), crate::group::GroupError> {
    let (tx, rx) = oneshot::channel();
    if !inner
        .notices
        .send(Notice::Join(unique.to_string(), tx))
        .await
    {
        return Err(crate::group::GroupError::Stopped);
    }
    rx.await.unwrap_or(Err(crate::group::GroupError::Stopped))
}

/// The group `unique` was left: its resolver traffic is refused (the
/// task learns it without this call waiting; a later [`join`] of the same
/// group comes after it).
pub(crate) fn leave(inner: &Inner, unique: &str) {
    inner.notices.post(inner, Notice::Leave(unique.to_string()));
}

impl Services {
    fn notice(&mut self, n: Notice) {
        match n {
            Notice::Join(unique, reply) => {
                let r = self
                    .machine
                    .join(&unique)
                    .map_err(|_| crate::group::GroupError::TooManyGroups);
                // A joiner that gave up: nothing to tell.
                let _ = reply.send(r);
            }
            Notice::Leave(unique) => self.machine.leave(&unique),
            Notice::DialFinished(to) => self.machine.dial_finished(&to),
        }
    }
}

/// Counts a refusal in the peer's statistics (as the runtime always has).
pub(crate) fn count(inner: &Inner, r: &Refusal) {
    let s = &inner.stats;
    match r {
        Refusal::Unroutable(queue) => {
            // E.g. SRDI (`<group>Srdi`), which no service here handles:
            // the same count as a message with no listener.
            s.unroutable.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(?queue, "resolver message on a queue we do not serve");
        }
        Refusal::NotMember(group) => {
            s.group_refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(group, "resolver message for a group we are not in dropped");
        }
        Refusal::Throttled(who) => {
            let n = s.discovery_throttled.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::info!(peer = %who, throttled = n, "discovery queries throttled");
            }
        }
        Refusal::DialThrottled(to) => {
            let n = s.dials_throttled.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::info!(querier = %to, throttled = n, "answer to a querier we have no connection to not sent");
            }
        }
        Refusal::Malformed(_) | Refusal::NoRoute(_) => {
            s.resolver_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(why = %r, "resolver message dropped");
        }
        Refusal::NoHandler(_) | Refusal::Anonymous => {
            tracing::debug!(why = %r, "resolver message for a handler we do not run");
        }
    }
}

/// Starts the resolver task of a peer.
pub(crate) fn spawn(
    inner: &Arc<Inner>,
    mut admitted: mpsc::Receiver<Admitted>,
    mut commands: mpsc::Receiver<Command>,
    mut notices: mpsc::Receiver<Notice>,
) -> Result<JoinHandle<()>, PeerError> {
    // With a rendezvous service, the Net group's queues are read by its
    // task, which runs the group's node ([`net_queues`]): a
    // query takes no detour through this task on its way to the node.
    let (mut queries, mut responses) = if inner.cfg.rendezvous.is_some() {
        (None, None)
    } else {
        let [q, r] = net_queues(inner)?;
        (Some(q), Some(r))
    };
    // Queues of other groups (subgroups) arrive here.
    let mut others = inner.add_listener(ServiceAddress::new(RESOLVER_SERVICE, None))?;
    let weak = Arc::downgrade(inner);
    let clock = inner.clock;
    let max_searches = inner.cfg.discovery.max_pending;
    // Routes learned anywhere (a routed message, a configured route):
    // this peer's own route searches look again at once.
    let learned = inner.router.learned.clone();
    let machine = machine(inner.group_unique(), &inner.cfg.discovery);
    Ok(tokio::spawn(async move {
        // The nodes of the groups served here (no rendezvous task of
        // their own), by unique value, and the services' state.
        let mut svc = Services {
            machine,
            nodes: Nodes::default(),
            binds: crate::pipe::registry::Bindings::new(),
            searches: crate::discovery::RemoteSearches::new(max_searches),
            routes: crate::relay::route::RouteSearches::new(),
        };
        enum Input {
            Message(Delivery),
            Admitted(Admitted),
            Command(Command),
            Notice(Notice),
            Timer,
            RouteLearned,
        }
        loop {
            let deadline = svc.poll_timeout();
            let timer = async {
                match deadline {
                    Some(t) => tokio::time::sleep_until(clock.instant(t).into()).await,
                    None => std::future::pending().await,
                }
            };
            let searching = svc.routes.searching();
            let input = tokio::select! {
                d = recv_opt(&mut queries) => d.map(Input::Message),
                d = recv_opt(&mut responses) => d.map(Input::Message),
                d = others.recv_delivery() => d.map(Input::Message),
                a = admitted.recv() => a.map(Input::Admitted),
                c = commands.recv() => c.map(Input::Command),
                n = notices.recv() => n.map(Input::Notice),
                _ = timer => Some(Input::Timer),
                _ = learned.notified(), if searching => Some(Input::RouteLearned),
            };
            let (Some(input), Some(inner)) = (input, weak.upgrade()) else {
                return;
            };
            let r = match input {
                Input::Message(d) => handle(&inner, &mut svc, d).await,
                Input::Admitted(a) => execute(&inner, &mut svc, a).await,
                Input::Command(c) => {
                    svc.command(&inner, c);
                    Ok(())
                }
                Input::Notice(n) => {
                    svc.notice(n);
                    Ok(())
                }
                Input::Timer => {
                    svc.handle_timeout(&inner, clock.now());
                    Ok(())
                }
                Input::RouteLearned => {
                    svc.routes.handle_timeout(&inner, true);
                    Ok(())
                }
            };
            if let Err(why) = r {
                match why {
                    Fault::Refused(r) => count(&inner, &r),
                    why => {
                        inner.stats.resolver_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%why, "resolver message dropped");
                    }
                }
            }
        }
    }))
}

/// The listeners of the Net group's resolver query and response queues.
pub(crate) fn net_queues(inner: &Arc<Inner>) -> Result<[crate::Listener; 2], PeerError> {
    let g = inner.group_unique();
    Ok([
        inner.add_listener(ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(g))))?,
        inner.add_listener(ServiceAddress::new(
            RESOLVER_SERVICE,
            Some(&response_queue(g)),
        ))?,
    ])
}

/// The next delivery of a listener this task may not have (pending
/// forever without one).
pub(crate) async fn recv_opt(l: &mut Option<crate::Listener>) -> Option<Delivery> {
    match l {
        Some(l) => l.recv_delivery().await,
        None => std::future::pending().await,
    }
}

/// The nodes of the groups whose resolver traffic this task serves
/// itself (no rendezvous service runs for them on this peer), by unique
/// value: each the same [`juxta_proto::node::Node`] a group's rendezvous
/// task drives, on a rendezvous part without a role
/// ([`RendezvousConfig::none`]). Only groups still joined are kept, so
/// there are at most [`juxta_proto::group::MAX_MEMBERSHIPS`] + 1.
#[derive(Default)]
struct Nodes(std::collections::HashMap<String, juxta_proto::node::Node<Service>>);

impl Nodes {
    /// The node of group `g` (`ctx`: its context, `None` for the Net
    /// group), made on its first message.
    fn get(
        &mut self,
        inner: &Inner,
        ctx: Option<&Arc<crate::group::GroupCtx>>,
        g: &str,
    ) -> &mut juxta_proto::node::Node<Service> {
        if !self.0.contains_key(g) {
            // Forget the groups left meanwhile.
            let net = inner.group_unique();
            self.0
                .retain(|u, _| u == net || inner.groups.get(u).is_some_and(|c| !c.is_closed()));
            let group = ctx.map_or(PeerGroupId::NET, |c| c.id);
            let node = group_node(
                RendezvousConfig::none(),
                *inner.identity.peer_id(),
                group,
                g,
                Bytes::new(),
                &inner.cfg.name,
                &inner.cfg.discovery,
            );
            self.0.insert(g.to_string(), node);
        }
        self.0.get_mut(g).expect("inserted above")
    }
}

async fn handle(inner: &Arc<Inner>, svc: &mut Services, mut d: Delivery) -> Result<(), Fault> {
    // Step one: the machine scopes the message (its queue, its group).
    let s = svc
        .machine
        .accept(d.to.param.as_deref(), d.group.as_deref())?;
    // The Net group is the only open one here; any other is a joined
    // group whose context holds its key material and services.
    let ctx = if s.open {
        None
    } else {
        match inner.groups.get(&s.group).filter(|c| !c.is_closed()) {
            Some(c) => Some(c),
            // Left between the two looks.
            None => return Err(Refusal::NotMember(s.group).into()),
        }
    };
    // A query the group's own rendezvous propagated here was checked
    // there and arrived under its verified member seal.
    let vouched = matches!((&ctx, d.vouched_in.as_deref()), (Some(c), Some(v)) if *c.unique == *v);
    if let Some(c) = ctx.as_ref().filter(|_| !vouched) {
        match c.authenticate(&s.queue(), &d.message, d.from) {
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
                    tracing::info!(group = %s.group, from = ?d.from, error = %e, refused = n, "group message without a valid member tag dropped");
                }
                return Ok(());
            }
        }
    }
    // Step two in the group's node, where its rendezvous runs.
    let proven = d.proven();
    if let (Some(from), Some(h)) = (d.from, crate::group::rdv_of(inner, ctx.as_ref())) {
        h.resolver_message(from, proven, d.to, d.message).await;
        return Ok(());
    }
    // Else here, in the group's node without a rendezvous part: it
    // parses, finds the handler and admits (no forwarders here, so each
    // query is charged to the peer it came from).
    let Some(from) = d.from else {
        return Err(Refusal::Anonymous.into());
    };
    let g = s.group;
    let node = svc.nodes.get(inner, ctx.as_ref(), &g);
    match node.handle_message(from, proven, &d.to, d.message, now_ms(inner)) {
        Ok(()) => {}
        Err(InputError::Resolver(r)) => return Err(r.into()),
        Err(InputError::Rendezvous(e)) => return Err(Fault::Node(e)),
    }
    let events: Vec<Event<Service>> = std::iter::from_fn(|| node.poll_event()).collect();
    // A node without a rendezvous part has nothing to send of its own.
    let unsent = std::iter::from_fn(|| node.poll_transmit()).count();
    if unsent > 0 {
        inner
            .stats
            .resolver_errors
            .fetch_add(unsent as u64, Ordering::Relaxed);
        tracing::debug!(unsent, group = %g, "transmits of a group node without a rendezvous dropped");
    }
    for event in events {
        execute(
            inner,
            svc,
            Admitted {
                ctx: ctx.clone(),
                group: g.clone(),
                event,
            },
        )
        .await?;
    }
    Ok(())
}

/// Executes what a group's node admitted.
async fn execute(inner: &Arc<Inner>, svc: &mut Services, a: Admitted) -> Result<(), Fault> {
    let Admitted { ctx, group, event } = a;
    if ctx.as_ref().is_some_and(|c| c.is_closed()) {
        // Left meanwhile.
        return Err(Refusal::NotMember(group).into());
    }
    match event {
        Event::Query {
            key,
            from,
            query,
            message,
        } => {
            on_query(
                inner,
                svc,
                ctx.as_ref(),
                &group,
                key,
                Some(from),
                *query,
                message,
            )
            .await
        }
        Event::Response {
            key,
            from,
            proven,
            response,
        } => {
            on_response(
                inner,
                svc,
                ctx.as_ref(),
                &group,
                key,
                proven,
                Some(from),
                response,
            )
            .await
        }
        Event::Rendezvous(_) | Event::Refused(_) => Ok(()),
    }
}

/// The advertisement cache of the group (`None`: the Net peer group's).
pub(crate) fn cache_of(
    inner: &Inner,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
) -> Option<crate::cache::CacheHandle> {
    match ctx {
        None => Some(inner.discovery.cache.clone()),
        Some(c) => c.cache(),
    }
}

/// An admitted query for `key`'s service (see [`Machine`]).
#[allow(clippy::too_many_arguments)]
async fn on_query(
    inner: &Arc<Inner>,
    svc: &mut Services,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
    g: &str,
    key: Service,
    from: Option<PeerId>,
    q: ResolverQuery,
    message: Message,
) -> Result<(), Fault> {
    // The rendezvous of the query's group (its SRDI index, its walker):
    // the Net peer group's, or the subgroup's own; a query in a group is
    // never answered from another group's index.
    let rdv = crate::group::rdv_of(inner, ctx);
    match key {
        Service::Revocations => {
            if let (Some(c), Some(from)) = (ctx, from.filter(|f| *f == q.src_peer)) {
                crate::group::on_revocations_query(inner, c, from, &q.query);
            }
            Ok(())
        }
        Service::Discovery => {
            let dq = DiscoveryQuery::parse(&q.query)?;
            let Some(cache) = cache_of(inner, ctx) else {
                return Ok(());
            };
            let r = crate::discovery::answer(inner, &cache, &dq).await?;
            let on_rdv = rdv.filter(|h| h.is_rendezvous());
            let asked_directly = from == Some(q.src_peer);
            if juxta_proto::discovery::answers(
                !r.responses.is_empty(),
                on_rdv.is_some(),
                asked_directly,
            ) {
                let resp = q.response(r.to_xml());
                send_response(inner, &mut svc.machine, ctx, g, &q, from, resp).await?;
            }
            if let Some(h) = on_rdv {
                let key = dq.srdi_key();
                h.resolver_query(from, q, message, key).await;
            }
            Ok(())
        }
        Service::Route => match crate::relay::route::on_query(inner, &mut svc.routes, g, &q, from)?
        {
            Some(resp) => send_response(inner, &mut svc.machine, ctx, g, &q, from, resp).await,
            None => Ok(()),
        },
        Service::PeerInfo => {
            let pq = PeerInfoQuery::parse(&q.query)?;
            if pq.target != *inner.identity.peer_id() {
                return Ok(());
            }
            let uptime = now_ms(inner);
            let mut resp = pq
                .answer(uptime, crate::cache::unix_now_ms(), None)
                .to_resolver_response(q.query_id);
            resp.handler = q.handler.clone();
            send_response(inner, &mut svc.machine, ctx, g, &q, from, resp).await
        }
        Service::PipeBinding => on_pipe_query(inner, svc, ctx, g, from, q).await,
        // Registered for responses only.
        Service::NoRoute => Ok(()),
    }
}

async fn on_pipe_query(
    inner: &Arc<Inner>,
    svc: &mut Services,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
    g: &str,
    from: Option<PeerId>,
    q: ResolverQuery,
) -> Result<(), Fault> {
    let msg = PipeResolverMsg::parse(&q.query)?;
    let me = *inner.identity.peer_id();
    // A rendezvous that does not hold the pipe never gets here: its task
    // forwards the query at once (`rendezvous::Task::shortcut`), silent (a
    // "not found" would end the querier's binding), to the peer its SRDI
    // index names, which answers the querier itself.
    let directed = msg.is_directed_to(&me);
    // Secure pipes speak TLS 1.3 to Juxta peers only (JXSE's secure pipes
    // use TLS 1.0 over its own transport): a peer on a direct connection in
    // JXTA framing is not told we hold one. A querier reached through a
    // relay may be either; it is answered, and its TLS handshake decides
    // (a JXSE peer fails there, with a clear error on its side).
    let jxta_framed_direct = from
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
    send_response(inner, &mut svc.machine, ctx, g, &q, from, resp).await
}

/// Most time spent dialling a querier's route to answer it.
const ANSWER_DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// An answer dial in progress (admitted by the machine's dial bounds):
/// reported finished when dropped.
struct DialTicket {
    inner: Arc<Inner>,
    to: PeerId,
}

impl Drop for DialTicket {
    fn drop(&mut self) {
        self.inner
            .notices
            .post(&self.inner, Notice::DialFinished(self.to));
    }
}

/// Sends `resp` to the issuer of `q` over the path the machine chose
/// ([`ResolverNode::answer_path`]): the live connection (or known route)
/// to it; else, in the background, a new connection to a TCP address of
/// the route its query carried (`SrcPeerRoute`), or a route found to it.
/// Never through `via`, the peer the query came from.
async fn send_response(
    inner: &Arc<Inner>,
    machine: &mut Machine,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
    g: &str,
    q: &ResolverQuery,
    via: Option<PeerId>,
    resp: ResolverResponse,
) -> Result<(), Fault> {
    let queue = response_queue(g);
    let msg = match ctx {
        Some(c) => c.message(&queue, resp.to_element(g)),
        None => Message::new().with(resp.to_element(g)),
    };
    let linked = inner.messenger(&q.src_peer);
    let path = machine.answer_path(q, via, linked.is_some(), now_ms(inner))?;
    let (to, dial) = match (path, linked) {
        // Answers are posted (written now or queued on the connection,
        // never awaited): one querier that stops reading cannot stall the
        // resolver.
        (AnswerPath::Direct(_), Some(m)) => {
            // An answer in JXTA framing is signed here (CBJX): a crypto
            // permit.
            let _permit = if m.is_compact() {
                None
            } else {
                inner.crypto.acquire().await.ok()
            };
            m.post_routed_in(g, RESOLVER_SERVICE, Some(&queue), msg)?;
            return Ok(());
        }
        (AnswerPath::Direct(to), None) => return Err(Refusal::NoRoute(to).into()),
        (AnswerPath::Dial { to, addrs }, _) => (to, addrs),
    };
    // No connection to the querier: answer in the background, so the
    // resolver keeps serving. First over a new connection to an address
    // its query's route named (a query a rendezvous forwarded here, from a
    // peer never met); else, for a querier nobody can dial (an edge behind
    // its relay), over a route to it (through our relay, or a relay that
    // holds its signed route).
    let ticket = DialTicket {
        inner: inner.clone(),
        to,
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

/// A response (or an admitted unsolicited one) for `key`'s service.
#[allow(clippy::too_many_arguments)]
async fn on_response(
    inner: &Arc<Inner>,
    svc: &mut Services,
    ctx: Option<&Arc<crate::group::GroupCtx>>,
    g: &str,
    key: Service,
    proven: bool,
    from: Option<PeerId>,
    r: ResolverResponse,
) -> Result<(), Fault> {
    match key {
        Service::Revocations => {
            if let Some(c) = ctx {
                crate::group::on_revocations(inner, c, &r.response);
            }
        }
        Service::Discovery => {
            let resp = DiscoveryResponse::parse(&r.response)?;
            let Some(cache) = cache_of(inner, ctx) else {
                return Ok(());
            };
            crate::discovery::on_response(
                inner,
                &mut svc.searches,
                g,
                &cache,
                r.query_id,
                resp,
                from,
                proven,
            )
            .await;
        }
        Service::Route => crate::relay::route::on_response(inner, &mut svc.routes, g, &r, from)?,
        Service::NoRoute => crate::relay::route::on_no_route(inner, &mut svc.routes, g, &r, from)?,
        Service::PipeBinding => {
            let msg = PipeResolverMsg::parse(&r.response)?;
            svc.binds
                .on_answer(inner, now_ms(inner), r.query_id, msg, from);
        }
        // Peer info answers are not asked for here.
        Service::PeerInfo => {}
    }
    Ok(())
}
