//! When a connection's claimed peer ID counts as proven, and what waits
//! until it is: the proof rules of one connection's inbound side, sans-IO.
//!
//! A welcome line only claims a peer ID. It becomes proven in one of two
//! ways ([`Proof`]):
//! - the compact handshake completes ([`ProofGate::on_handshake`]);
//! - a CBJX-signed JXTA message arrives whose certificate derives the
//!   claimed ID, whose signed bytes name this peer (it was meant for us),
//!   and whose signature was not first seen on another connection (a
//!   replay proves nothing: [`crate::wire::replay`]); see
//!   [`ProofGate::on_message`].
//!
//! A Juxta initiator sends its offer and may send messages before the
//! acceptor's reply reaches it: those arrive before its confirm, in JXTA
//! framing, from a peer not proven yet. The gate holds them (bounded:
//! [`MAX_HELD_MESSAGES`], [`MAX_HELD_BYTES`]) until the confirm proves the
//! peer, then releases them in order, so no service sees a Juxta peer's
//! first requests as unproven. The runtime's connection reader and the
//! socket-less tests run this same code.

use crate::wire::connection::{HandshakeOutcome, Inbound, Proof, Received};

/// Most messages held while a compact handshake is pending.
pub const MAX_HELD_MESSAGES: usize = 256;
/// Most bytes (as on the wire) held while a compact handshake is pending.
pub const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;

/// The remote sent more than [`MAX_HELD_MESSAGES`] messages or
/// [`MAX_HELD_BYTES`] bytes while its handshake was pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too much traffic before the compact handshake completed")]
pub struct Backlog;

/// What to do with a message that arrived.
#[derive(Debug)]
pub enum Admit {
    /// Deliver it now. `proved`: its signature just proved the peer
    /// ([`Proof::Signature`]): the connection may now replace a claimed
    /// one for the same peer.
    Deliver {
        /// The message.
        message: Received,
        /// Whether it proved the peer just now.
        proved: bool,
    },
    /// Held until the handshake completes.
    Held,
}

/// The proof rules of one connection's inbound side (see the module
/// documentation).
///
/// ```
/// use juxta_proto::wire::proof::ProofGate;
/// let gate = ProofGate::new();
/// assert!(!gate.is_holding());
/// ```
#[derive(Debug, Default)]
pub struct ProofGate {
    holding: bool,
    held: Vec<Received>,
    held_bytes: usize,
}

impl ProofGate {
    /// A gate delivering everything until a handshake says to hold.
    pub fn new() -> ProofGate {
        ProofGate::default()
    }

    /// Whether messages are held (an accept was sent, the confirm is
    /// awaited).
    pub fn is_holding(&self) -> bool {
        self.holding
    }

    /// A message decoded by `inbound`. `fresh(tag)`: whether a signature
    /// with this tag is new to this connection (not first seen on another
    /// one; the caller keeps the peer-wide replay record), asked only when
    /// the signature would prove the peer.
    pub fn on_message(
        &mut self,
        inbound: &mut Inbound,
        m: Received,
        fresh: impl FnOnce(&[u8; 16]) -> bool,
    ) -> Result<Admit, Backlog> {
        if self.holding {
            self.held_bytes = self.held_bytes.saturating_add(m.wire_len);
            self.held.push(m);
            if self.held.len() > MAX_HELD_MESSAGES || self.held_bytes > MAX_HELD_BYTES {
                return Err(Backlog);
            }
            return Ok(Admit::Held);
        }
        let proved = match &m.signed {
            Some(s) => {
                s.cert_matches_id && s.names_local && !inbound.proof().is_proven() && fresh(&s.tag)
            }
            None => false,
        };
        if proved {
            inbound.prove_by_signature();
        }
        Ok(Admit::Deliver { message: m, proved })
    }

    /// The compact handshake advanced (`outcome`, from
    /// [`crate::wire::connection::Outbound::handle_handshake`]): holds what
    /// comes while an accept awaits its confirm; once the peer is proven,
    /// marks `inbound` proven (switching it to compact framing when the
    /// outcome says so) and returns the held messages, in order, to be
    /// delivered as proven.
    pub fn on_handshake(
        &mut self,
        inbound: &mut Inbound,
        outcome: &HandshakeOutcome,
    ) -> Vec<Received> {
        self.holding = outcome.reply.is_some() && !outcome.proven;
        if !outcome.proven {
            return Vec::new();
        }
        if outcome.switch_inbound {
            inbound.switch_to_compact_with(outcome.values);
        } else {
            inbound.prove_by_handshake();
        }
        debug_assert_eq!(inbound.proof(), Proof::Handshake);
        self.held_bytes = 0;
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::endpoint::ServiceAddress;
    use crate::message::Message;
    use crate::wire::connection::{ConnectionConfig, SignedBy};

    fn msg(n: usize, signed: Option<SignedBy>) -> Received {
        Received {
            to: Arc::new(ServiceAddress::new("svc", Some(&n.to_string()))),
            source: None,
            message: Message::new(),
            wire_len: 100,
            signed,
        }
    }

    fn signed(cert: bool, names: bool, tag: u8) -> Option<SignedBy> {
        Some(SignedBy {
            cert_matches_id: cert,
            names_local: names,
            tag: [tag; 16],
        })
    }

    fn awaiting_confirm() -> HandshakeOutcome {
        HandshakeOutcome {
            reply: Some(crate::message::codec::EncodedMessage::default()),
            proven: false,
            switch_inbound: false,
            values: false,
        }
    }

    #[test]
    fn a_signature_proves_only_when_it_derives_the_id_names_us_and_is_fresh() {
        let mut inb = Inbound::new(ConnectionConfig::default());
        let mut g = ProofGate::new();
        let delivered = |a: Admit| match a {
            Admit::Deliver { proved, .. } => proved,
            Admit::Held => panic!("held without a handshake"),
        };
        // Unsigned, another key, not meant for us, a replay: nothing.
        assert!(!delivered(
            g.on_message(&mut inb, msg(0, None), |_| true).unwrap()
        ));
        assert!(!delivered(
            g.on_message(&mut inb, msg(1, signed(false, true, 1)), |_| true)
                .unwrap()
        ));
        assert!(!delivered(
            g.on_message(&mut inb, msg(2, signed(true, false, 2)), |_| true)
                .unwrap()
        ));
        assert!(!delivered(
            g.on_message(&mut inb, msg(3, signed(true, true, 3)), |_| false)
                .unwrap()
        ));
        assert_eq!(inb.proof(), Proof::Claimed);
        // A fresh one: proves, once; the replay record is not asked again.
        let mut asked = Vec::new();
        assert!(delivered(
            g.on_message(&mut inb, msg(4, signed(true, true, 4)), |t| {
                asked.push(t[0]);
                true
            })
            .unwrap()
        ));
        assert_eq!(inb.proof(), Proof::Signature);
        assert!(!delivered(
            g.on_message(&mut inb, msg(5, signed(true, true, 5)), |t| {
                asked.push(t[0]);
                true
            })
            .unwrap()
        ));
        assert_eq!(asked, vec![4]);
    }

    #[test]
    fn messages_before_the_confirm_are_held_then_released_in_order_as_proven() {
        let mut inb = Inbound::new(ConnectionConfig::default());
        let mut g = ProofGate::new();
        assert!(g.on_handshake(&mut inb, &awaiting_confirm()).is_empty());
        assert!(g.is_holding());
        for n in 0..5 {
            assert!(matches!(
                g.on_message(&mut inb, msg(n, None), |_| true),
                Ok(Admit::Held)
            ));
        }
        assert_eq!(inb.proof(), Proof::Claimed);
        let confirm = HandshakeOutcome {
            reply: None,
            proven: true,
            switch_inbound: false,
            values: false,
        };
        let released = g.on_handshake(&mut inb, &confirm);
        assert_eq!(inb.proof(), Proof::Handshake);
        let order: Vec<String> = released
            .iter()
            .map(|m| m.to.param.clone().unwrap())
            .collect();
        assert_eq!(order, ["0", "1", "2", "3", "4"]);
        assert!(!g.is_holding());
        assert!(matches!(
            g.on_message(&mut inb, msg(9, None), |_| true),
            Ok(Admit::Deliver { proved: false, .. })
        ));
    }

    #[test]
    fn holding_is_bounded_in_messages_and_bytes() {
        let mut inb = Inbound::new(ConnectionConfig::default());
        let mut g = ProofGate::new();
        g.on_handshake(&mut inb, &awaiting_confirm());
        for n in 0..MAX_HELD_MESSAGES {
            assert!(g.on_message(&mut inb, msg(n, None), |_| true).is_ok());
        }
        assert_eq!(
            g.on_message(&mut inb, msg(0, None), |_| true).unwrap_err(),
            Backlog
        );

        let mut g = ProofGate::new();
        g.on_handshake(&mut inb, &awaiting_confirm());
        let mut big = msg(0, None);
        big.wire_len = MAX_HELD_BYTES;
        assert!(g.on_message(&mut inb, big.clone(), |_| true).is_ok());
        big.wire_len = usize::MAX;
        assert_eq!(
            g.on_message(&mut inb, big, |_| true).unwrap_err(),
            Backlog,
            "sizes add up saturating"
        );
    }
}
