//! JXTA sockets and bidirectional pipes: connection set-up messages
//! (`JXTASOC`, `JXTABIP`), the reliable stream engine (`jxtarel`) and the
//! native stream mode between Juxta peers ([`stream`]), and the
//! per-message blocks of reliable bidi pipes ([`bidi_block`]).

pub mod bidi_block;
pub mod reliable;
pub mod setup;
pub mod stream;
