//! Reliable stream engine (placeholder).
