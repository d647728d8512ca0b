//! Who takes the messages this peer receives: the endpoint listeners (by
//! service address), parallel communicators' inboxes, the pipe sinks that
//! take a pipe's messages straight from a connection's reader (sockets),
//! and the stream sockets numbered for compact stream frames.
//!
//! Why one table: the connection readers look a received message's
//! receiver up here, and the services register and remove theirs here;
//! before, each of those reached into the peer's shared state (four
//! locked maps on the peer, written by the socket module directly). Now
//! the locks are private to [`Receivers`] and every change goes through
//! its methods, which keep the one rule the maps share: an address has at
//! most one listener or inbox.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use juxta_proto::endpoint::{Delivery, ServiceAddress};
use juxta_proto::id::IdHashState;
use tokio::sync::mpsc;

use crate::mp::Inbox;
use crate::pipe::DirectSink;
use crate::socket::stream::FrameTable;

/// An address already has a listener or a communicator's inbox.
#[derive(Debug)]
pub(crate) struct Taken;

/// The receivers registered on one peer (see the module documentation).
#[derive(Default)]
pub(crate) struct Receivers {
    listeners: RwLock<HashMap<ServiceAddress, mpsc::Sender<Delivery>, IdHashState>>,
    /// Communicators' receive queues: their messages go from the
    /// connection's reader straight in (see `crate::mp::Inbox`).
    inboxes: RwLock<Vec<Arc<Inbox>>>,
    /// Pipe sinks by pipe URN: a socket's messages, taken on the reader.
    direct: RwLock<HashMap<String, Arc<dyn DirectSink>, IdHashState>>,
    /// Stream sockets that take their data in compact stream frames, by
    /// number (the connection's reader hands each frame over).
    frames: FrameTable,
}

impl Receivers {
    /// Registers a listener for `to` with a queue of `queue` deliveries.
    pub(crate) fn add_listener(
        &self,
        to: &ServiceAddress,
        queue: usize,
    ) -> Result<mpsc::Receiver<Delivery>, Taken> {
        let mut l = self.listeners.write().expect("listeners lock");
        if l.contains_key(to) || self.inbox(|i| i.to == *to).is_some() {
            return Err(Taken);
        }
        let (tx, rx) = mpsc::channel(queue);
        l.insert(to.clone(), tx);
        Ok(rx)
    }

    /// Unregisters the listener for `to`.
    pub(crate) fn remove_listener(&self, to: &ServiceAddress) {
        self.listeners.write().expect("listeners lock").remove(to);
    }

    /// The queue of the listener for `to`, else of the listener for its
    /// service (any parameter).
    pub(crate) fn listener(&self, to: &ServiceAddress) -> Option<mpsc::Sender<Delivery>> {
        let l = self.listeners.read().expect("listeners lock");
        l.get(to)
            .or_else(|| {
                l.get(&ServiceAddress {
                    service: to.service.clone(),
                    param: None,
                })
            })
            .cloned()
    }

    /// Registers a communicator's inbox (its address must be free).
    pub(crate) fn add_inbox(&self, inbox: Arc<Inbox>) -> Result<(), Taken> {
        // The listeners' lock first, as in `add_listener`: the two checks
        // and the insert are one step for both kinds.
        let l = self.listeners.read().expect("listeners lock");
        let mut v = self.inboxes.write().expect("inboxes lock");
        if l.contains_key(&inbox.to) || v.iter().any(|i| i.to == inbox.to) {
            return Err(Taken);
        }
        v.push(inbox);
        Ok(())
    }

    /// Unregisters a communicator's inbox.
    pub(crate) fn remove_inbox(&self, inbox: &Arc<Inbox>) {
        self.inboxes
            .write()
            .expect("inboxes lock")
            .retain(|i| !Arc::ptr_eq(i, inbox));
    }

    /// The communicator inbox `f` picks, if any (none registered: one
    /// uncontended read lock).
    pub(crate) fn inbox(&self, f: impl Fn(&Inbox) -> bool) -> Option<Arc<Inbox>> {
        let v = self.inboxes.read().expect("inboxes lock");
        v.iter().find(|i| f(i)).cloned()
    }

    /// Hands the messages of pipe `urn` to `sink` on the connection's
    /// reader (replacing any sink it had).
    pub(crate) fn add_sink(&self, urn: String, sink: Arc<dyn DirectSink>) {
        self.direct.write().expect("direct lock").insert(urn, sink);
    }

    /// Stops handing pipe `urn`'s messages to a sink.
    pub(crate) fn remove_sink(&self, urn: &str) {
        self.direct.write().expect("direct lock").remove(urn);
    }

    /// The sink of pipe `urn`, if one takes its messages.
    pub(crate) fn sink(&self, urn: &str) -> Option<Arc<dyn DirectSink>> {
        self.direct.read().expect("direct lock").get(urn).cloned()
    }

    /// The stream sockets by frame number.
    pub(crate) fn frames(&self) -> &FrameTable {
        &self.frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_has_one_listener_and_a_listener_falls_back_to_its_service() {
        let r = Receivers::default();
        let exact = ServiceAddress::new("svc", Some("p"));
        let any = ServiceAddress::new("svc", None);
        let _rx = r.add_listener(&exact, 4).unwrap();
        assert!(r.add_listener(&exact, 4).is_err(), "taken");
        assert!(r.listener(&exact).is_some());
        assert!(r.listener(&ServiceAddress::new("svc", Some("q"))).is_none());
        let _rx_any = r.add_listener(&any, 4).unwrap();
        assert!(
            r.listener(&ServiceAddress::new("svc", Some("q"))).is_some(),
            "the service's listener takes any parameter"
        );
        r.remove_listener(&exact);
        assert!(r.add_listener(&exact, 4).is_ok(), "free again");
        assert!(r.sink("urn:x").is_none());
        r.remove_sink("urn:x");
    }
}
