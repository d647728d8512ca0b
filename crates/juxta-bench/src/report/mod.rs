//! (being written) The HTML report with SVG plots.

/// Errors while writing the report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Could not write a file.
    #[error("cannot write {path}: {source}")]
    Write {
        /// the file
        path: std::path::PathBuf,
        /// the error
        #[source]
        source: std::io::Error,
    },
}
