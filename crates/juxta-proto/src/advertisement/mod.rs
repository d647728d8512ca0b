//! Advertisements: the XML documents JXTA peers publish about themselves
//! and their resources (pipes, peers, ...), byte-compatible with JXSE 2.7.
