//! Transports: the sockets under the endpoint service.

pub(crate) mod addresses;
pub mod http;
pub(crate) mod limits;
pub mod multicast;
pub mod tcp;
