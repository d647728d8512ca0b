//! What travels on a TCP connection between two peers: the welcome line,
//! JXTA frames, Juxta's compact frames, the handshake that picks between
//! them, and the per-connection state machine that ties them together.

pub mod compact;
pub mod connection;
pub mod frame;
pub mod handshake;
pub mod http;
pub mod http_session;
pub mod proof;
pub mod replay;
pub mod welcome;
