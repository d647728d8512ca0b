//! JXTA sockets (placeholder).
