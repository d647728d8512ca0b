//! (being written) The original JXSE 2.7 side by side.

/// Errors running the JXSE side of a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum JxseError {
    /// Java is not installed.
    #[error("java not found: install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)")]
    JavaMissing,
}
