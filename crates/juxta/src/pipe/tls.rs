//! TLS 1.3 for secure pipes (placeholder).
