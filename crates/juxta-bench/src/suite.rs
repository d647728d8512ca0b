//! (being written) The default run: every scenario in one command.
