//! Transports: the sockets under the endpoint service.

pub mod http;
pub mod multicast;
pub mod tcp;
