//! The session rules of an HTTP listener (JXTA's HTTP transport as Juxta
//! serves it), sans-IO: which challenges are outstanding, which request
//! reaches which session, when an unproven client gets one, when a
//! session expires. The runtime's HTTP server keeps its sessions (their
//! connection and queue) in a [`Sessions`] table and does what it decides;
//! time is [`Millis`], passed in.
//!
//! The rules:
//! - a ping hands out a challenge (nonce); at most
//!   [`SessionRules::max_nonces`] are outstanding (the oldest is dropped,
//!   and the caller counts it), each valid for [`SessionRules::nonce_ttl`]
//!   and usable once;
//! - a proven session (opened by a hello signed over a fresh nonce) is
//!   reached with its token only;
//! - an unproven session (a JXSE client, when
//!   [`SessionRules::allow_unproven`]) has no token and is reached without
//!   one; it never displaces a proven session of the same peer, and at
//!   most [`SessionRules::max_unproven`] are open at once;
//! - a session whose connection closed, or with no poll in progress for
//!   [`SessionRules::idle`], is removed.

use std::collections::{HashMap, VecDeque};

use crate::id::PeerId;
use crate::time::Millis;

/// What the table needs to know of a session the runtime holds.
pub trait SessionState {
    /// Its connection has closed.
    fn is_closed(&self) -> bool;
    /// A poll is in progress on it.
    fn is_polling(&self) -> bool;
    /// When it was last used (a request, or the end of a poll).
    fn last_seen(&self) -> Millis;
}

impl<T: SessionState + ?Sized> SessionState for std::sync::Arc<T> {
    fn is_closed(&self) -> bool {
        (**self).is_closed()
    }

    fn is_polling(&self) -> bool {
        (**self).is_polling()
    }

    fn last_seen(&self) -> Millis {
        (**self).last_seen()
    }
}

/// The listener's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRules {
    /// Most outstanding challenges.
    pub max_nonces: usize,
    /// How long a challenge stays valid, ms.
    pub nonce_ttl: Millis,
    /// Serve clients without the session proof (unproven sessions).
    pub allow_unproven: bool,
    /// Most unproven sessions at once.
    pub max_unproven: usize,
    /// A session with no poll in progress for this long expires, ms.
    pub idle: Millis,
}

/// Why a request found no session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionRefusal {
    /// No session for the peer, a wrong token, a closed one, or a
    /// tokenless request where unproven sessions are not served.
    #[error("no such session")]
    UnknownSession,
    /// An unproven client claims a peer ID that holds a proven session.
    #[error("a proven session exists for {0}")]
    ProvenSessionExists(Box<PeerId>),
    /// The unproven sessions are at their limit.
    #[error("too many sessions")]
    TooManySessions,
}

struct Entry<H> {
    token: String,
    proven: bool,
    handle: H,
}

/// The sessions and challenges of one HTTP listener.
///
/// ```
/// use juxta_proto::wire::http_session::{SessionRules, Sessions, SessionState};
/// # #[derive(Clone)] struct S;
/// # impl SessionState for S {
/// #     fn is_closed(&self) -> bool { false }
/// #     fn is_polling(&self) -> bool { false }
/// #     fn last_seen(&self) -> u64 { 0 }
/// # }
/// let rules = SessionRules { max_nonces: 4, nonce_ttl: 60_000, allow_unproven: false, max_unproven: 0, idle: 30_000 };
/// let mut t: Sessions<S> = Sessions::new(rules);
/// t.issue_nonce("n1".into(), 0);
/// assert!(t.take_nonce("n1", 10));
/// assert!(!t.take_nonce("n1", 10), "a challenge is used once");
/// ```
pub struct Sessions<H> {
    rules: SessionRules,
    nonces: VecDeque<(String, Millis)>,
    map: HashMap<PeerId, Entry<H>>,
}

/// Compares two secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl<H: SessionState + Clone> Sessions<H> {
    /// An empty table.
    pub fn new(rules: SessionRules) -> Sessions<H> {
        Sessions {
            rules,
            nonces: VecDeque::new(),
            map: HashMap::new(),
        }
    }

    /// The rules.
    pub fn rules(&self) -> &SessionRules {
        &self.rules
    }

    /// Records a challenge handed out at `now`. Returns whether an older
    /// one was dropped to make room (the caller counts it).
    pub fn issue_nonce(&mut self, nonce: String, now: Millis) -> bool {
        let ttl = self.rules.nonce_ttl;
        while self
            .nonces
            .front()
            .is_some_and(|(_, t)| now.saturating_sub(*t) > ttl)
        {
            self.nonces.pop_front();
        }
        let dropped = self.nonces.len() >= self.rules.max_nonces.max(1);
        if dropped {
            self.nonces.pop_front();
        }
        self.nonces.push_back((nonce, now));
        dropped
    }

    /// Uses up challenge `n`: whether it was outstanding and still valid.
    pub fn take_nonce(&mut self, n: &str, now: Millis) -> bool {
        match self.nonces.iter().position(|(x, _)| same_secret(x, n)) {
            Some(i) => self
                .nonces
                .remove(i)
                .is_some_and(|(_, t)| now.saturating_sub(t) <= self.rules.nonce_ttl),
            None => false,
        }
    }

    /// The session a request of `peer` reaches: with `token`, its proven
    /// session; without, its unproven one (where those are served).
    pub fn session(&self, peer: &PeerId, token: Option<&str>) -> Result<&H, SessionRefusal> {
        let e = self.map.get(peer).ok_or(SessionRefusal::UnknownSession)?;
        let open = !e.handle.is_closed();
        match token {
            Some(t) if e.proven && open && same_secret(&e.token, t) => Ok(&e.handle),
            None if !e.proven && open && self.rules.allow_unproven => Ok(&e.handle),
            _ => Err(SessionRefusal::UnknownSession),
        }
    }

    /// Where an unproven client's messages signed by `signer` go: its open
    /// unproven session (`Some`), or a new one to open (`None`), unless a
    /// proven session holds the ID or the unproven ones are at their limit.
    pub fn for_unproven(&self, signer: &PeerId) -> Result<Option<&H>, SessionRefusal> {
        match self.map.get(signer) {
            Some(e) if e.proven && !e.handle.is_closed() => {
                Err(SessionRefusal::ProvenSessionExists(Box::new(*signer)))
            }
            Some(e) if !e.handle.is_closed() => Ok(Some(&e.handle)),
            _ => {
                let unproven = self
                    .map
                    .values()
                    .filter(|e| !e.proven && !e.handle.is_closed())
                    .count();
                if unproven >= self.rules.max_unproven {
                    Err(SessionRefusal::TooManySessions)
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// Opens `peer`'s session (`proven`: by a verified hello, reached with
    /// `token`). Returns the session it replaced (to be closed). An
    /// unproven session never replaces an open proven one.
    pub fn insert(
        &mut self,
        peer: PeerId,
        token: String,
        proven: bool,
        handle: H,
    ) -> Result<Option<H>, SessionRefusal> {
        if !proven
            && self
                .map
                .get(&peer)
                .is_some_and(|o| o.proven && !o.handle.is_closed())
        {
            return Err(SessionRefusal::ProvenSessionExists(Box::new(peer)));
        }
        let old = self.map.insert(
            peer,
            Entry {
                token,
                proven,
                handle,
            },
        );
        Ok(old.map(|e| e.handle))
    }

    /// Removes `peer`'s session if `is_it` says it is the one meant (a
    /// newer one may have replaced it).
    pub fn remove_if(&mut self, peer: &PeerId, is_it: impl FnOnce(&H) -> bool) -> Option<H> {
        if self.map.get(peer).is_some_and(|e| is_it(&e.handle)) {
            self.map.remove(peer).map(|e| e.handle)
        } else {
            None
        }
    }

    /// Removes the sessions whose connection closed or that expired (no
    /// poll in progress, unused for [`SessionRules::idle`]) and returns
    /// them; `true` beside those that expired while open.
    pub fn expire(&mut self, now: Millis) -> Vec<(PeerId, H, bool)> {
        let idle = self.rules.idle;
        let stale: Vec<PeerId> = self
            .map
            .iter()
            .filter(|(_, e)| {
                e.handle.is_closed()
                    || (!e.handle.is_polling() && now.saturating_sub(e.handle.last_seen()) > idle)
            })
            .map(|(p, _)| *p)
            .collect();
        stale
            .into_iter()
            .filter_map(|p| {
                self.map.remove(&p).map(|e| {
                    let expired = !e.handle.is_closed();
                    (p, e.handle, expired)
                })
            })
            .collect()
    }

    /// The session of `peer`, whatever its state.
    pub fn get(&self, peer: &PeerId) -> Option<&H> {
        self.map.get(peer).map(|e| &e.handle)
    }

    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;
    use crate::id::{IdFormat, IdType, JxtaId};

    #[derive(Clone, Default)]
    struct S(Rc<(Cell<bool>, Cell<bool>, Cell<Millis>)>);

    impl S {
        fn close(&self) {
            self.0 .0.set(true);
        }
        fn poll(&self, on: bool) {
            self.0 .1.set(on);
        }
        fn seen(&self, t: Millis) {
            self.0 .2.set(t);
        }
    }

    impl SessionState for S {
        fn is_closed(&self) -> bool {
            self.0 .0.get()
        }
        fn is_polling(&self) -> bool {
            self.0 .1.get()
        }
        fn last_seen(&self) -> Millis {
            self.0 .2.get()
        }
    }

    fn pid(n: u8) -> PeerId {
        JxtaId::from_parts(IdFormat::Cbid, [0x42; 16], [n; 16], IdType::Peer)
            .try_into()
            .unwrap()
    }

    fn rules(allow_unproven: bool) -> SessionRules {
        SessionRules {
            max_nonces: 2,
            nonce_ttl: 60_000,
            allow_unproven,
            max_unproven: 2,
            idle: 30_000,
        }
    }

    #[test]
    fn challenges_are_bounded_expire_and_are_used_once() {
        let mut t: Sessions<S> = Sessions::new(rules(false));
        assert!(!t.issue_nonce("a".into(), 0));
        assert!(!t.issue_nonce("b".into(), 0));
        assert!(t.issue_nonce("c".into(), 0), "the oldest is dropped");
        assert!(!t.take_nonce("a", 1));
        assert!(t.take_nonce("b", 1));
        assert!(!t.take_nonce("b", 1));
        assert!(!t.take_nonce("c", 60_001), "stale");
        assert!(!t.take_nonce("", 0));
    }

    #[test]
    fn a_proven_session_needs_its_token_and_an_unproven_one_none() {
        let (p, q) = (pid(1), pid(2));
        let mut t: Sessions<S> = Sessions::new(rules(true));
        let s = S::default();
        t.insert(p, "tok".into(), true, s.clone()).unwrap();
        assert!(t.session(&p, Some("tok")).is_ok());
        for bad in [Some("tox"), Some("to"), None] {
            assert_eq!(
                t.session(&p, bad).err(),
                Some(SessionRefusal::UnknownSession)
            );
        }
        // An unproven client claiming p: refused, the proven one stays.
        assert_eq!(
            t.for_unproven(&p).err(),
            Some(SessionRefusal::ProvenSessionExists(Box::new(p)))
        );
        assert_eq!(
            t.insert(p, String::new(), false, S::default()).err(),
            Some(SessionRefusal::ProvenSessionExists(Box::new(p)))
        );
        // q: opened unproven, reached without a token only.
        assert!(t.for_unproven(&q).unwrap().is_none());
        t.insert(q, String::new(), false, S::default()).unwrap();
        assert!(t.session(&q, None).is_ok());
        assert!(t.session(&q, Some("")).is_err());
        assert!(t.for_unproven(&q).unwrap().is_some());
        // Closed: reached no more.
        s.close();
        assert!(t.session(&p, Some("tok")).is_err());

        // With unproven clients off, a tokenless request reaches nothing.
        let mut off: Sessions<S> = Sessions::new(rules(false));
        off.insert(q, String::new(), false, S::default()).unwrap();
        assert!(off.session(&q, None).is_err());
    }

    #[test]
    fn unproven_sessions_are_bounded() {
        let mut t: Sessions<S> = Sessions::new(rules(true));
        t.insert(pid(1), String::new(), false, S::default())
            .unwrap();
        let second = S::default();
        t.insert(pid(2), String::new(), false, second.clone())
            .unwrap();
        assert_eq!(
            t.for_unproven(&pid(3)).err(),
            Some(SessionRefusal::TooManySessions)
        );
        // A proven one does not count; a closed one frees its place.
        t.insert(pid(4), "t".into(), true, S::default()).unwrap();
        second.close();
        assert!(t.for_unproven(&pid(3)).unwrap().is_none());
    }

    #[test]
    fn sessions_expire_when_idle_and_not_polling_or_closed() {
        let mut t: Sessions<S> = Sessions::new(rules(false));
        let (idle, polling, busy, closed) =
            (S::default(), S::default(), S::default(), S::default());
        polling.poll(true);
        busy.seen(20_000);
        closed.seen(40_000);
        t.insert(pid(1), "a".into(), true, idle).unwrap();
        t.insert(pid(2), "b".into(), true, polling).unwrap();
        t.insert(pid(3), "c".into(), true, busy).unwrap();
        t.insert(pid(4), "d".into(), true, closed.clone()).unwrap();
        assert!(t.expire(30_000).is_empty());
        closed.close();
        let mut gone: Vec<(String, bool)> = t
            .expire(40_000)
            .into_iter()
            .map(|(p, _, expired)| (p.to_string(), expired))
            .collect();
        gone.sort();
        let mut want = vec![(pid(1).to_string(), true), (pid(4).to_string(), false)];
        want.sort();
        assert_eq!(gone, want, "the idle one expired, the closed one went");
        assert!(t.get(&pid(2)).is_some() && t.get(&pid(3)).is_some());
        assert!(t.expire(50_001).len() == 1, "the busy one, idle since 20 s");
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_replaced_session_is_returned_and_only_the_current_one_removed() {
        let mut t: Sessions<S> = Sessions::new(rules(false));
        let (a, b) = (S::default(), S::default());
        a.seen(1);
        b.seen(2);
        assert!(t.insert(pid(1), "a".into(), true, a).unwrap().is_none());
        let old = t.insert(pid(1), "b".into(), true, b).unwrap().unwrap();
        assert_eq!(old.last_seen(), 1);
        assert!(t.remove_if(&pid(1), |h| h.last_seen() == 1).is_none());
        assert!(t.remove_if(&pid(1), |h| h.last_seen() == 2).is_some());
        assert!(t.is_empty());
    }
}
