//! The remote discovery searches of one peer, as a sans-IO machine:
//! [`Searches`].
//!
//! A search asks some peers one discovery query and gathers what they
//! answer until it has enough advertisements, every peer asked has
//! answered, or its deadline passes. The machine gives each search its
//! resolver query ID, matches answers by that ID and by group (an answer on
//! another group's queue is not an answer to it), drops duplicates, and
//! reports each search's end once ([`SearchEvent::Done`]). It validates
//! nothing: the owner feeds it only advertisements it checked and kept.
//! Bounded: at most `max` searches at once, each holding at most what it
//! asked for.
//!
//! ```
//! use std::time::Duration;
//! use juxta_proto::discovery::search::{SearchEvent, Searches};
//! let mut s = Searches::new(1, 16);
//! let id = s.start(0, "jxta-NetGroup", 5, Duration::from_secs(3)).unwrap();
//! // The owner sends the query (with `id`) to two peers:
//! s.asked(id, 2);
//! assert!(s.is_pending(id, "jxta-NetGroup"));
//! s.handle_answer(10, id, "jxta-NetGroup", Vec::new());
//! s.handle_answer(20, id, "jxta-NetGroup", Vec::new());
//! // Both answered (nothing found): the search is over.
//! let Some(SearchEvent::Done { query_id, found }) = s.poll_event() else { unreachable!() };
//! assert_eq!((query_id, found.asked, found.answered), (id, 2, 2));
//! assert!(found.advertisements.is_empty());
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::advertisement::Advertisement;
use crate::resolver::QueryIds;
use crate::time::{later, Millis};

/// What a search gathered.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The advertisements received, without duplicates (by
    /// [`Advertisement::id`]), at most the number asked for.
    pub advertisements: Vec<Advertisement>,
    /// Peers the query was sent to.
    pub asked: usize,
    /// Answers received before the search ended (a peer may answer more
    /// than once, e.g. a rendezvous and the edges it forwarded to).
    pub answered: usize,
}

/// What [`Searches`] reports ([`Searches::poll_event`]).
#[derive(Debug, Clone, PartialEq)]
pub enum SearchEvent {
    /// A search ended: enough advertisements, every peer answered, its
    /// deadline passed, or nobody could be asked.
    Done {
        /// Its resolver query ID.
        query_id: i32,
        /// What it gathered.
        found: Found,
    },
}

/// Why a search could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    /// The most searches at once are in progress.
    #[error("too many discovery searches in progress (limit {0})")]
    Full(usize),
}

#[derive(Debug)]
struct Search {
    group: String,
    want: usize,
    asked: usize,
    answered: usize,
    found: Vec<Advertisement>,
    deadline: Millis,
}

/// The searches in progress (see the module comment).
#[derive(Debug)]
pub struct Searches {
    next_id: QueryIds,
    max: usize,
    pending: BTreeMap<i32, Search>,
    events: VecDeque<SearchEvent>,
}

impl Searches {
    /// Searches whose query IDs count up from `first_id` (values below 1
    /// start at 1: 0 is the remote publish's ID; the runtime seeds it
    /// randomly), at most `max` at once.
    pub fn new(first_id: i32, max: usize) -> Searches {
        Searches {
            next_id: QueryIds::new(first_id),
            max,
            pending: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    /// Searches in progress.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no search is in progress.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Starts a search in group `group` (its unique value) for `want`
    /// advertisements (at least 1), ending at `now + timeout` at the
    /// latest. Returns its query ID; tell it how many peers were asked
    /// with [`Searches::asked`].
    pub fn start(
        &mut self,
        now: Millis,
        group: &str,
        want: usize,
        timeout: Duration,
    ) -> Result<i32, SearchError> {
        if self.pending.len() >= self.max {
            return Err(SearchError::Full(self.max));
        }
        let pending = &self.pending;
        let id = self.next_id.next(|id| pending.contains_key(&id));
        self.pending.insert(
            id,
            Search {
                group: group.to_string(),
                want: want.max(1),
                asked: 0,
                answered: 0,
                found: Vec::new(),
                deadline: later(now, timeout),
            },
        );
        Ok(id)
    }

    /// The query went to `asked` peers. With none the search ends at once.
    pub fn asked(&mut self, query_id: i32, asked: usize) {
        if let Some(s) = self.pending.get_mut(&query_id) {
            s.asked = asked;
            if asked == 0 {
                self.finish(query_id);
            }
        }
    }

    /// Whether an answer with `query_id` on group `group`'s queue belongs
    /// to a search in progress (check before doing work for it).
    pub fn is_pending(&self, query_id: i32, group: &str) -> bool {
        self.pending
            .get(&query_id)
            .is_some_and(|s| s.group == group)
    }

    /// An answer to `query_id` arrived on group `group`'s queue, with the
    /// advertisements the owner kept from it. Returns `false` (and takes
    /// nothing) when it is no answer to a search in progress.
    pub fn handle_answer(
        &mut self,
        now: Millis,
        query_id: i32,
        group: &str,
        advertisements: Vec<Advertisement>,
    ) -> bool {
        let _ = now;
        let Some(s) = self.pending.get_mut(&query_id).filter(|s| s.group == group) else {
            return false;
        };
        s.answered = s.answered.saturating_add(1);
        for a in advertisements {
            if s.found.len() >= s.want {
                break;
            }
            let key = a.id();
            if !s.found.iter().any(|f| f.id() == key) {
                s.found.push(a);
            }
        }
        if s.found.len() >= s.want || (s.asked > 0 && s.answered >= s.asked) {
            self.finish(query_id);
        }
        true
    }

    /// Abandons a search (no event). Returns whether it was in progress.
    pub fn cancel(&mut self, query_id: i32) -> bool {
        self.pending.remove(&query_id).is_some()
    }

    fn finish(&mut self, query_id: i32) {
        if let Some(s) = self.pending.remove(&query_id) {
            self.events.push_back(SearchEvent::Done {
                query_id,
                found: Found {
                    advertisements: s.found,
                    asked: s.asked,
                    answered: s.answered,
                },
            });
        }
    }

    /// The next search that ended, oldest first. (At most one event per
    /// search, so the queue is bounded by the searches started.)
    pub fn poll_event(&mut self) -> Option<SearchEvent> {
        self.events.pop_front()
    }

    /// When [`Searches::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.pending.values().map(|s| s.deadline).min()
    }

    /// Ends the searches whose deadline has passed, in query ID order.
    pub fn handle_timeout(&mut self, now: Millis) {
        let due: Vec<i32> = self
            .pending
            .iter()
            .filter(|(_, s)| now >= s.deadline)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.finish(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::{PipeAdvertisement, PipeType};
    use crate::id::PipeId;

    fn adv(i: u8) -> Advertisement {
        let id: PipeId = format!(
            "urn:jxta:cbid-59616261646162614E50472050325033{:032X}04",
            u128::from(i) + 1
        )
        .parse()
        .unwrap();
        Advertisement::Pipe(PipeAdvertisement::new(id, PipeType::Unicast))
    }

    fn done(s: &mut Searches) -> Option<(i32, Found)> {
        match s.poll_event()? {
            SearchEvent::Done { query_id, found } => Some((query_id, found)),
        }
    }

    #[test]
    fn enough_advertisements_end_a_search_without_duplicates() {
        let mut s = Searches::new(7, 4);
        let id = s.start(0, "g", 2, Duration::from_secs(1)).unwrap();
        assert_eq!(id, 7);
        s.asked(id, 3);
        assert!(s.handle_answer(1, id, "g", vec![adv(1), adv(1)]));
        assert_eq!(s.poll_event(), None, "one distinct of two wanted");
        assert!(s.handle_answer(2, id, "g", vec![adv(1), adv(2), adv(3)]));
        let (q, f) = done(&mut s).unwrap();
        assert_eq!(q, id);
        assert_eq!(f.advertisements, vec![adv(1), adv(2)]);
        assert_eq!((f.asked, f.answered), (3, 2));
        // Late answers belong to nothing.
        assert!(!s.is_pending(id, "g"));
        assert!(!s.handle_answer(3, id, "g", vec![adv(4)]));
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn another_groups_answer_is_not_taken() {
        let mut s = Searches::new(1, 4);
        let id = s.start(0, "g", 5, Duration::from_secs(1)).unwrap();
        s.asked(id, 1);
        assert!(!s.is_pending(id, "other"));
        assert!(!s.handle_answer(1, id, "other", vec![adv(1)]));
        assert!(s.is_pending(id, "g"));
        assert_eq!(s.poll_event(), None);
    }

    #[test]
    fn the_deadline_ends_a_search_with_what_it_has() {
        let mut s = Searches::new(1, 4);
        let a = s.start(100, "g", 5, Duration::from_millis(50)).unwrap();
        let b = s.start(120, "g", 5, Duration::from_millis(50)).unwrap();
        s.asked(a, 2);
        s.asked(b, 2);
        s.handle_answer(110, a, "g", vec![adv(9)]);
        assert_eq!(s.poll_timeout(), Some(150));
        s.handle_timeout(149);
        assert_eq!(s.poll_event(), None);
        s.handle_timeout(150);
        let (q, f) = done(&mut s).unwrap();
        assert_eq!((q, f.advertisements.len(), f.answered), (a, 1, 1));
        assert_eq!(s.poll_event(), None);
        assert_eq!(s.poll_timeout(), Some(170));
        s.handle_timeout(u64::MAX);
        let (q, f) = done(&mut s).unwrap();
        assert_eq!((q, f.answered), (b, 0));
        assert!(s.is_empty());
    }

    #[test]
    fn nobody_asked_ends_at_once_and_bounds_hold() {
        let mut s = Searches::new(i32::MAX - 1, 2);
        let a = s.start(0, "g", 1, Duration::MAX).unwrap();
        let b = s.start(0, "g", 1, Duration::MAX).unwrap();
        assert_eq!((a, b), (i32::MAX - 1, 1), "wraps to 1, never 0");
        assert_eq!(s.start(0, "g", 1, Duration::MAX), Err(SearchError::Full(2)));
        assert_eq!(s.poll_timeout(), Some(u64::MAX), "saturated deadline");
        s.asked(a, 0);
        let (q, f) = done(&mut s).unwrap();
        assert_eq!((q, f.asked, f.answered), (a, 0, 0));
        assert!(s.cancel(b));
        assert!(!s.cancel(b));
        assert_eq!(s.poll_event(), None, "a cancelled search reports nothing");
        // IDs in use are skipped.
        let mut s = Searches::new(1, 4);
        let x = s.start(0, "g", 1, Duration::MAX).unwrap();
        s.next_id = QueryIds::new(x);
        let y = s.start(0, "g", 1, Duration::MAX).unwrap();
        assert_eq!((x, y), (1, 2));
    }
}
