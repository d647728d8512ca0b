//! Transports: the sockets under the endpoint service.

pub mod tcp;
