//! Transports: the sockets under the endpoint service.

pub mod multicast;
pub mod tcp;
