//! (being written) Comparing two result sets.
