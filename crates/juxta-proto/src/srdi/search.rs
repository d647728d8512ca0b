//! Search models: what a rendezvous does with a query it cannot answer
//! from its own store, under the three models the benchmarks compare.
//!
//! - [`SearchModel::Centralized`]: one designated rendezvous indexes every
//!   entry (Napster-style); every other rendezvous forwards to it.
//! - [`SearchModel::Flooding`]: no index; the query is propagated to every
//!   leased edge and every peer-view member (Gnutella-style), TTL-limited.
//! - [`SearchModel::Srdi`]: JXSE's model: forward to the peers the local
//!   index names; on a miss forward to the entry's replica rendezvous; if
//!   this rendezvous is the replica, walk the peer view.
//!
//! [`decide`] is a pure function of the query's hop count, the local index
//! hits and the view, so the runtime and the simulator share it.

use crate::id::PeerId;

use super::placement::{replica_peer, MAX_QUERY_HOPS};

/// Which search model a rendezvous runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchModel {
    /// Every query and every SRDI entry goes to `server`.
    Centralized {
        /// The central index.
        server: PeerId,
    },
    /// Queries are flooded; SRDI is not used.
    Flooding,
    /// SRDI with replica placement and the limited-range walker.
    Srdi,
}

/// The inputs of a decision at one rendezvous.
#[derive(Debug, Clone)]
pub struct QueryContext<'a> {
    /// This rendezvous.
    pub me: PeerId,
    /// The query's hop count as received (`HC`).
    pub hop_count: u32,
    /// Peers the local SRDI index lists for the query (already limited to
    /// the query's threshold).
    pub index_hits: &'a [PeerId],
    /// The global view (peer view + self, sorted; see
    /// [`super::placement::global_view`]).
    pub view: &'a [PeerId],
    /// The replica expression of the query (`PKey + attr + value`), if the
    /// query names an exact value (wildcard queries have no replica).
    pub replica_expr: Option<&'a str>,
    /// Whether the query arrived by a walk (then a miss continues the walk
    /// rather than starting one).
    pub walked: bool,
    /// Whether the query arrived by flooding (then it is not re-flooded
    /// here; the propagation layer forwards it).
    pub flooded: bool,
}

/// What to do with the query (besides answering from the local store,
/// which the caller always does when it has matches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryPlan {
    /// Send the query, hop count + 1, to these peers (index hits, the
    /// replica, or the central server).
    Forward(Vec<PeerId>),
    /// Start (or continue) a limited-range walk over the peer view.
    Walk,
    /// Propagate to every leased edge and peer-view member.
    Flood,
    /// Nothing more to do (hop limit reached or nobody to ask).
    Done,
}

/// Decides the fate of a query at a rendezvous.
///
/// ```
/// use juxta_proto::srdi::search::{decide, QueryContext, QueryPlan, SearchModel};
/// let me = "urn:jxta:cbid-59616261646162614A78746150325033000000000000000000000000000000AB03".parse().unwrap();
/// let edge = "urn:jxta:cbid-59616261646162614A78746150325033000000000000000000000000000000CD03".parse().unwrap();
/// let ctx = QueryContext { me, hop_count: 0, index_hits: &[edge], view: &[me], replica_expr: None, walked: false, flooded: false };
/// assert_eq!(decide(SearchModel::Srdi, &ctx), QueryPlan::Forward(vec![edge]));
/// ```
pub fn decide(model: SearchModel, ctx: &QueryContext<'_>) -> QueryPlan {
    let can_forward = ctx.hop_count < MAX_QUERY_HOPS;
    match model {
        SearchModel::Flooding => {
            if ctx.flooded {
                QueryPlan::Done
            } else {
                QueryPlan::Flood
            }
        }
        SearchModel::Centralized { server } => {
            if ctx.me != server {
                if can_forward {
                    QueryPlan::Forward(vec![server])
                } else {
                    QueryPlan::Done
                }
            } else if !ctx.index_hits.is_empty() && can_forward {
                QueryPlan::Forward(ctx.index_hits.to_vec())
            } else {
                QueryPlan::Done
            }
        }
        SearchModel::Srdi => {
            if !ctx.index_hits.is_empty() {
                return if can_forward {
                    QueryPlan::Forward(ctx.index_hits.to_vec())
                } else {
                    QueryPlan::Done
                };
            }
            if !ctx.walked {
                if let Some(r) = ctx.replica_expr.and_then(|e| replica_peer(ctx.view, e)) {
                    if r != ctx.me && can_forward {
                        return QueryPlan::Forward(vec![r]);
                    }
                }
            }
            if ctx.view.len() > 1 {
                QueryPlan::Walk
            } else {
                QueryPlan::Done
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{IdFormat, IdType, JxtaId};
    use crate::srdi::placement::{global_view, replica_position};

    fn peer(n: u8) -> PeerId {
        JxtaId::from_parts(IdFormat::Cbid, [1; 16], [n; 16], IdType::Peer)
            .try_into()
            .unwrap()
    }

    fn ctx<'a>(
        me: PeerId,
        hits: &'a [PeerId],
        view: &'a [PeerId],
        expr: Option<&'a str>,
    ) -> QueryContext<'a> {
        QueryContext {
            me,
            hop_count: 0,
            index_hits: hits,
            view,
            replica_expr: expr,
            walked: false,
            flooded: false,
        }
    }

    #[test]
    fn srdi_model() {
        let view = global_view(peer(1), [peer(2), peer(3)]);
        let hits = [peer(9)];
        assert_eq!(
            decide(SearchModel::Srdi, &ctx(peer(1), &hits, &view, None)),
            QueryPlan::Forward(vec![peer(9)])
        );
        let mut c = ctx(peer(1), &hits, &view, None);
        c.hop_count = MAX_QUERY_HOPS;
        assert_eq!(decide(SearchModel::Srdi, &c), QueryPlan::Done);
        // Find an expression whose replica is not peer(1), and one whose is.
        let other = (0..)
            .map(|i| format!("e{i}"))
            .find(|e| view[replica_position(e, 3).unwrap()] != peer(1))
            .unwrap();
        let mine = (0..)
            .map(|i| format!("e{i}"))
            .find(|e| view[replica_position(e, 3).unwrap()] == peer(1))
            .unwrap();
        let r = view[replica_position(&other, 3).unwrap()];
        assert_eq!(
            decide(SearchModel::Srdi, &ctx(peer(1), &[], &view, Some(&other))),
            QueryPlan::Forward(vec![r])
        );
        assert_eq!(
            decide(SearchModel::Srdi, &ctx(peer(1), &[], &view, Some(&mine))),
            QueryPlan::Walk
        );
        let mut w = ctx(peer(1), &[], &view, Some(&other));
        w.walked = true;
        assert_eq!(decide(SearchModel::Srdi, &w), QueryPlan::Walk);
        let alone = [peer(1)];
        assert_eq!(
            decide(SearchModel::Srdi, &ctx(peer(1), &[], &alone, Some(&other))),
            QueryPlan::Done
        );
    }

    #[test]
    fn other_models() {
        let view = [peer(1), peer(2)];
        let c = SearchModel::Centralized { server: peer(2) };
        assert_eq!(
            decide(c, &ctx(peer(1), &[], &view, None)),
            QueryPlan::Forward(vec![peer(2)])
        );
        assert_eq!(
            decide(c, &ctx(peer(2), &[peer(7)], &view, None)),
            QueryPlan::Forward(vec![peer(7)])
        );
        assert_eq!(decide(c, &ctx(peer(2), &[], &view, None)), QueryPlan::Done);
        assert_eq!(
            decide(SearchModel::Flooding, &ctx(peer(1), &[], &view, None)),
            QueryPlan::Flood
        );
        let mut f = ctx(peer(1), &[], &view, None);
        f.flooded = true;
        assert_eq!(decide(SearchModel::Flooding, &f), QueryPlan::Done);
    }
}
