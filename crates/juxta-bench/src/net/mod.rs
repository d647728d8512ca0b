//! (being written) Network profiles: namespaces, veth, rate and delay.

/// Errors setting up a network profile.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Unknown profile name.
    #[error("unknown network profile {0:?} (known: loopback, lan, san, wan)")]
    UnknownProfile(String),
}
