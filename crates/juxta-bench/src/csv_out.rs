//! (being written) CSV files, one per scenario.
