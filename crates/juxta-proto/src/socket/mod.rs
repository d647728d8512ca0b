//! JXTA sockets and bidirectional pipes: connection set-up messages
//! (`JXTASOC`, `JXTABIP`) and the reliable stream engine (`jxtarel`).

pub mod reliable;
pub mod setup;
