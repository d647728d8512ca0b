//! Pipes: pipe types, the Pipe Binding Protocol messages and the
//! propagate-pipe wire header.
