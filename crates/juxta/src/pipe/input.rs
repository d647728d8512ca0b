//! Input pipes: the receiving end of a pipe, fed by the endpoint listener
//! for `PipeService/<pipe URN>` (unicast, propagate) or by the TLS sessions
//! of a secure pipe.

use std::sync::Arc;

use juxta_proto::advertisement::{PipeAdvertisement, PipeType};
use juxta_proto::endpoint::{Delivery, ServiceAddress};
use juxta_proto::message::NS_JXTA;
use juxta_proto::pipe::wire_header::DuplicateFilter;
use juxta_proto::rendezvous::messages::propagate_element_name;
use tokio::sync::mpsc;

use super::registry::Registration;
use super::{PipeError, PipeMessage, PIPE_SERVICE};
use crate::endpoint::{Listener, Verified};
use crate::peer::Inner;

enum Source {
    Endpoint(Listener),
    Secure(mpsc::Receiver<Delivery>),
}

/// The receiving end of a pipe. Messages queue in a bounded buffer
/// ([`crate::PeerConfig::listener_queue`]); while it is full the senders'
/// connections stop being read (back-pressure), nothing is dropped.
/// How long a rendezvous keeps the SRDI entry of an input pipe (JXSE's
/// pipe resolver publishes its entries for 2 hours and re-pushes them).
const PIPE_SRDI_EXPIRATION: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// Dropping the input pipe closes it.
pub struct InputPipe {
    adv: PipeAdvertisement,
    source: Source,
    dedup: Option<DuplicateFilter>,
    /// Name of the rendezvous propagation header element of our group.
    propagate_header: String,
    _registration: Registration,
    _group: Option<GroupPipe>,
}

/// Forgets the pipe in its group when the pipe is closed.
struct GroupPipe {
    ctx: Arc<crate::group::GroupCtx>,
    id: juxta_proto::id::PipeId,
}

impl Drop for GroupPipe {
    fn drop(&mut self) {
        self.ctx.remove_pipe(&self.id);
    }
}

impl InputPipe {
    pub(crate) fn open(
        inner: &Arc<Inner>,
        scope: Option<&Arc<crate::group::GroupCtx>>,
        adv: &PipeAdvertisement,
    ) -> Result<InputPipe, PipeError> {
        if scope.is_some_and(|c| c.is_closed()) {
            return Err(PipeError::NotConnected("a group this peer left".into()));
        }
        let group = match scope {
            Some(c) => c.unique.clone(),
            None => inner.group_unique().to_string(),
        };
        let registration = inner.pipes.register_input(inner, adv, &group)?;
        let source = match adv.pipe_type {
            PipeType::UnicastSecure => {
                let (tx, rx) = mpsc::channel(inner.cfg.listener_queue);
                inner.pipes.set_secure_sink(&adv.id, tx);
                Source::Secure(rx)
            }
            PipeType::Unicast | PipeType::Propagate => {
                let urn = adv.id.to_string();
                Source::Endpoint(inner.add_listener(ServiceAddress::new(PIPE_SERVICE, Some(&urn)))?)
            }
        };
        let dedup = (adv.pipe_type == PipeType::Propagate).then(DuplicateFilter::default);
        // On an edge: tell the rendezvous (SRDI `<pipe type>`/`Id`/pipe ID,
        // as JXSE's pipe resolver does), so binding queries through the
        // rendezvous reach this peer.
        if let Some(c) = scope {
            c.add_pipe(adv.id);
        }
        if let Some(h) = crate::group::rdv_of(inner, scope).filter(|h| !h.is_rendezvous()) {
            let h = h.clone();
            let (ty, id) = (adv.pipe_type.as_str(), adv.id.to_string());
            tokio::spawn(async move {
                h.publish_entries(ty, &[("Id".to_string(), id)], PIPE_SRDI_EXPIRATION)
                    .await;
            });
        }
        Ok(InputPipe {
            adv: adv.clone(),
            source,
            dedup,
            propagate_header: propagate_element_name(&group),
            _registration: registration,
            _group: scope.map(|c| GroupPipe {
                ctx: c.clone(),
                id: adv.id,
            }),
        })
    }

    /// The pipe's advertisement.
    pub fn advertisement(&self) -> &PipeAdvertisement {
        &self.adv
    }

    /// The next message; `None` once the peer has stopped.
    pub async fn recv(&mut self) -> Option<PipeMessage> {
        loop {
            let (d, verified) = match &mut self.source {
                Source::Endpoint(l) => {
                    let d = l.recv_delivery().await?;
                    let v = Verified::of(d.proof);
                    (d, v)
                }
                Source::Secure(rx) => {
                    let d = rx.recv().await?;
                    let v = if d.proven() {
                        Verified::Certificate
                    } else {
                        Verified::Unverified
                    };
                    (d, v)
                }
            };
            let mut message = d.message;
            if let Some(filter) = &mut self.dedup {
                // A propagated message can reach us along several paths;
                // deliver it once.
                match super::output::take_propagate_id(&mut message) {
                    Some(id) if !filter.first_time(&id) => continue,
                    _ => {}
                }
                // Propagated through a rendezvous: its header is no part
                // of the application's message.
                message.remove_all(NS_JXTA, &self.propagate_header);
            }
            return Some(PipeMessage {
                message,
                from: d.from,
                verified,
            });
        }
    }

    /// A message already queued (unicast pipes), without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<PipeMessage> {
        match &mut self.source {
            Source::Endpoint(l) => l.try_recv().map(|d| PipeMessage {
                verified: Verified::of(d.proof),
                message: d.message,
                from: d.from,
            }),
            Source::Secure(_) => None,
        }
    }

    /// Hands every message to `handler` on a task of its own (the JXTA
    /// "pipe listener" style) until the peer stops; returns the task.
    pub fn spawn_listener<F>(mut self, mut handler: F) -> tokio::task::JoinHandle<()>
    where
        F: FnMut(PipeMessage) + Send + 'static,
    {
        tokio::spawn(async move {
            while let Some(m) = self.recv().await {
                handler(m);
            }
        })
    }
}
