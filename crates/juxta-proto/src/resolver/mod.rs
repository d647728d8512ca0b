//! The Peer Resolver Protocol (PRP): the query/response envelope that
//! carries the pipe binding, discovery and route protocols.
