//! What travels on a TCP connection between two peers.
