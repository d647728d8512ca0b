//! Transports: the sockets under the endpoint service.

pub mod http;
pub(crate) mod limits;
pub mod multicast;
pub mod tcp;
