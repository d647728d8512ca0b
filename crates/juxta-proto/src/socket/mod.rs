//! JXTA sockets and bidirectional pipes: connection set-up messages
//! (`JXTASOC`, `JXTABIP`), the reliable stream engine (`jxtarel`) and the
//! native stream mode between Juxta peers ([`stream`]).

pub mod reliable;
pub mod setup;
pub mod stream;
