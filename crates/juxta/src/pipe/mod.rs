//! The pipe service: input and output pipes (unicast, propagate, secure),
//! their binding through the resolver, and bidirectional pipes.

pub mod tls;
