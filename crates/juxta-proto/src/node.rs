//! One peer's control plane in one group, assembled: [`Node`].
//!
//! The parts are [`ResolverNode`] (queue classification, group scoping,
//! the registry of handlers, admission control of every query kind) and
//! [`RendezvousNode`] (leases, SRDI, lookups). This machine wires them the
//! way a peer runs them, so the owner never routes protocol traffic
//! itself:
//! - every resolver query and response passes the resolver first;
//!   Juxta's lookups ([`LOOKUP_HANDLER`]), busy notices and the answers to
//!   queries the rendezvous part asked go to the rendezvous part;
//! - a message the rendezvous part propagated or walked to the resolver
//!   (its [`NodeEvent::Deliver`] on a resolver queue) goes through the
//!   resolver too;
//! - queries and responses for the other registered handlers are events
//!   for the owner ([`Event::Query`], [`Event::Response`]), which answers
//!   with [`Node::respond`] or hands the query to the rendezvous' index
//!   with [`Node::forward_query`].
//!
//! It serves one group (the rendezvous part's). The runtime's rendezvous
//! task (`juxta::rendezvous`) runs one `Node` per group it serves: the
//! runtime's resolver task scopes and authenticates that group's resolver
//! traffic and hands it here, and executes the owner's events (discovery,
//! pipe binding, ...). The simulator ([`crate::sim`]) runs one `Node` per
//! peer.
//!
//! Inputs and outputs follow the quinn-proto style of the parts:
//! `handle_*(…, now)`, [`poll_transmit`](Node::poll_transmit),
//! [`poll_event`](Node::poll_event), [`poll_timeout`](Node::poll_timeout);
//! time is [`Millis`].
//!
//! ```
//! use juxta_proto::id::{IdFormat, IdType, JxtaId, PeerId};
//! use juxta_proto::node::{Event, Node};
//! use juxta_proto::rendezvous::node::{NodeEvent, RendezvousConfig, RendezvousNode};
//! use juxta_proto::resolver::node::{Handler, ResolverConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let me: PeerId = JxtaId::from_parts(IdFormat::Cbid, [0x59; 16], [7; 16], IdType::Peer).try_into()?;
//! let rdv = RendezvousNode::new(RendezvousConfig::rendezvous(), me, "jxta-NetGroup", bytes::Bytes::new(), "rdv", 1);
//! let mut node: Node<&str> = Node::new(rdv, ResolverConfig::new("jxta-NetGroup"))?;
//! node.register(Handler::exact("app", "my-handler"))?;
//! assert!(node.rendezvous().is_rendezvous());
//! assert!(node.poll_event().is_none());
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::endpoint::ServiceAddress;
use crate::id::PeerId;
use crate::message::Message;
use crate::rendezvous::node::{NodeError, NodeEvent, RendezvousNode, SrdiKey, LOOKUP_HANDLER};
use crate::resolver::node::{
    classify, Direction, Handler, Refusal, ResolverConfig, ResolverEvent, ResolverNode,
    ResolverNodeError,
};
use crate::resolver::{response_queue, ResolverQuery, ResolverResponse, RESOLVER_SERVICE};
use crate::time::Millis;
use crate::transmit::Transmit;

/// Most events and transmits the node queues for the owner (past this
/// they are dropped and counted in [`Node::dropped`]).
pub const MAX_QUEUED: usize = 65_536;

/// Who handles a resolver handler's traffic in a [`Node`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routed<K> {
    /// The rendezvous part (Juxta's lookups).
    Lookup,
    /// The owner's handler `K`.
    Owner(K),
}

/// What the owner acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<K> {
    /// Reported by the rendezvous part (dials, leases, answers, ...).
    Rendezvous(NodeEvent),
    /// An admitted query for the owner's handler `key`.
    Query {
        /// The handler.
        key: K,
        /// The peer it came from.
        from: PeerId,
        /// The query.
        query: Box<ResolverQuery>,
        /// The message it came in (for [`Node::forward_query`]).
        message: Message,
    },
    /// A response for the owner's handler `key` that the rendezvous part
    /// does not await.
    Response {
        /// The handler.
        key: K,
        /// The peer it came from.
        from: PeerId,
        /// Whether `from` proved its ID on the link the response came in
        /// (`false` for one the rendezvous part delivered: propagated or
        /// walked, its origin as the header says).
        proven: bool,
        /// The response.
        response: ResolverResponse,
    },
    /// A resolver message the rendezvous part delivered here (propagated
    /// or walked) was refused by the resolver (counted in its stats too);
    /// a refused input is returned by [`Node::handle_message`] instead.
    Refused(Refusal),
}

/// Why an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Refused by the resolver (counted in its stats).
    #[error(transparent)]
    Resolver(#[from] Refusal),
    /// Refused by the rendezvous part.
    #[error(transparent)]
    Rendezvous(#[from] NodeError),
}

/// The resolver and the rendezvous service of one peer in one group (see
/// the module documentation).
#[derive(Debug)]
pub struct Node<K> {
    resolver: ResolverNode<Routed<K>>,
    rdv: RendezvousNode,
    events: VecDeque<Event<K>>,
    out: VecDeque<Transmit>,
    now: Millis,
    dropped: u64,
}

impl<K: Clone> Node<K> {
    /// Assembles a node from its rendezvous part and resolver settings
    /// (whose Net group should be the rendezvous part's group); Juxta's
    /// lookups are routed to the rendezvous part, admitted by its own flow
    /// control.
    pub fn new(rdv: RendezvousNode, cfg: ResolverConfig) -> Result<Node<K>, ResolverNodeError> {
        let mut resolver = ResolverNode::new(cfg);
        resolver.register(Handler::exact(Routed::Lookup, LOOKUP_HANDLER).own_admission())?;
        Ok(Node {
            resolver,
            rdv,
            events: VecDeque::new(),
            out: VecDeque::new(),
            now: 0,
            dropped: 0,
        })
    }

    /// Registers an owner's handler.
    pub fn register(&mut self, h: Handler<K>) -> Result<(), ResolverNodeError> {
        self.resolver.register(h.map_key(Routed::Owner))
    }

    /// This peer.
    pub fn me(&self) -> PeerId {
        self.rdv.me()
    }

    /// The rendezvous part.
    pub fn rendezvous(&self) -> &RendezvousNode {
        &self.rdv
    }

    /// The rendezvous part, for its commands (publish, lookup, query,
    /// propagate, shutdown).
    pub fn rendezvous_mut(&mut self) -> &mut RendezvousNode {
        &mut self.rdv
    }

    /// The resolver part.
    pub fn resolver(&self) -> &ResolverNode<Routed<K>> {
        &self.resolver
    }

    /// Events and transmits dropped because the owner did not drain.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// A message from `from` (`proven`: it proved its ID) for listener
    /// `dest`: resolver queries and responses go through the resolver,
    /// everything else (RVP, propagation, walker, peer view, SRDI) to the
    /// rendezvous part.
    pub fn handle_message(
        &mut self,
        from: PeerId,
        proven: bool,
        dest: &ServiceAddress,
        message: Message,
        now: Millis,
    ) -> Result<(), InputError> {
        self.handle_message_in(from, proven, None, dest, message, now)
    }

    /// [`Node::handle_message`] for a message whose wire address named a
    /// group (`addressed`, its unique value: the group the sender mangled
    /// the address with): a resolver message addressed in one group for
    /// another group's queue is refused ([`Refusal::NotMember`]), as the
    /// resolver's scoping rules say.
    pub fn handle_message_in(
        &mut self,
        from: PeerId,
        proven: bool,
        addressed: Option<&str>,
        dest: &ServiceAddress,
        message: Message,
        now: Millis,
    ) -> Result<(), InputError> {
        self.now = self.now.max(now);
        if dest.service == RESOLVER_SERVICE && classify(dest.param.as_deref()).is_some() {
            return Ok(self.on_resolver(from, proven, addressed, dest, message, now)?);
        }
        Ok(self.rdv.handle_message(from, proven, dest, message, now)?)
    }

    fn on_resolver(
        &mut self,
        from: PeerId,
        proven: bool,
        addressed: Option<&str>,
        dest: &ServiceAddress,
        message: Message,
        now: Millis,
    ) -> Result<(), Refusal> {
        let s = self.resolver.accept(dest.param.as_deref(), addressed)?;
        match s.direction {
            Direction::Query => {
                let fwd = self.rdv.is_forwarder(&from);
                self.resolver
                    .handle_query(&s, Some(from), fwd, message, now)?;
            }
            Direction::Response => self
                .resolver
                .handle_response(&s, Some(from), &message, now)?,
        }
        while let Some(ev) = self.resolver.poll_event() {
            match ev {
                ResolverEvent::Query {
                    key: Routed::Lookup,
                    query,
                    message,
                    ..
                } => self
                    .rdv
                    .handle_query(Some(from), *query, message, None, now),
                ResolverEvent::Query {
                    key: Routed::Owner(key),
                    query,
                    message,
                    ..
                } => self.push(Event::Query {
                    key,
                    from,
                    query,
                    message,
                }),
                ResolverEvent::Response { key, response, .. } => {
                    let mine = matches!(key, Routed::Lookup)
                        || self.rdv.awaits(response.query_id, &response.handler);
                    match key {
                        Routed::Owner(key) if !mine => self.push(Event::Response {
                            key,
                            from,
                            proven,
                            response,
                        }),
                        _ => self.rdv.handle_response(response, now),
                    }
                }
                ResolverEvent::Busy { notice, .. } => self.rdv.handle_busy(notice, now),
            }
        }
        Ok(())
    }

    fn push(&mut self, e: Event<K>) {
        if self.events.len() >= MAX_QUEUED {
            self.dropped = self.dropped.saturating_add(1);
        } else {
            self.events.push_back(e);
        }
    }

    /// Hands a query for an owner's handler to the rendezvous part's SRDI
    /// index (a rendezvous that does not hold what is asked forwards it
    /// to the publishers under `key`).
    pub fn forward_query(
        &mut self,
        from: Option<PeerId>,
        query: ResolverQuery,
        message: Message,
        key: Option<SrdiKey>,
        now: Millis,
    ) {
        self.now = self.now.max(now);
        self.rdv.handle_query(from, query, message, key, now);
    }

    /// Answers `query` with `response` (the handler's document): sent to
    /// its issuer on the group's response queue.
    pub fn respond(&mut self, query: &ResolverQuery, response: String) {
        let g = self.resolver.config().net.clone();
        let r = query.response(response);
        let t = Transmit {
            to: query.src_peer,
            dest: ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(&g))),
            message: Message::new().with(r.to_element(&g)),
        };
        if self.out.len() >= MAX_QUEUED {
            self.dropped = self.dropped.saturating_add(1);
        } else {
            self.out.push_back(t);
        }
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front().or_else(|| self.rdv.poll_transmit())
    }

    /// The next event. A message the rendezvous part delivers to a
    /// resolver queue goes through the resolver here (its refusals are
    /// counted there).
    pub fn poll_event(&mut self) -> Option<Event<K>> {
        loop {
            if let Some(e) = self.events.pop_front() {
                return Some(e);
            }
            match self.rdv.poll_event()? {
                NodeEvent::Deliver {
                    from,
                    dest,
                    message,
                } if dest.service == RESOLVER_SERVICE
                    && classify(dest.param.as_deref()).is_some() =>
                {
                    let now = self.now;
                    if let Err(r) = self.on_resolver(from, false, None, &dest, message, now) {
                        self.push(Event::Refused(r));
                    }
                }
                e => return Some(Event::Rendezvous(e)),
            }
        }
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next.
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.rdv.poll_timeout()
    }

    /// Timers (the rendezvous part's).
    pub fn handle_timeout(&mut self, now: Millis) {
        self.now = self.now.max(now);
        self.rdv.handle_timeout(now);
    }

    /// The owner's dial of `addr` reached `peer` (or failed: `None`).
    pub fn handle_dialed(&mut self, addr: SocketAddr, peer: Option<PeerId>, now: Millis) {
        self.now = self.now.max(now);
        self.rdv.handle_dialed(addr, peer, now);
    }

    /// The link to `peer` is gone.
    pub fn handle_link_down(&mut self, peer: &PeerId, now: Millis) {
        self.now = self.now.max(now);
        self.rdv.handle_link_down(peer, now);
    }
}

#[cfg(test)]
mod tests;
