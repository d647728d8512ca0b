//! The endpoint service.
