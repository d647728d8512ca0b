//! Socket and bidi-pipe connection set-up (placeholder).
