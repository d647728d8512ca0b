//! Certificate subgroups with their own rendezvous, set up the same way for
//! every benchmark that measures inside one.
//!
//! Why: `juxta bench ops --configs subgroup-rendezvous` and `juxta bench
//! rendezvous --group subgroup` both need a certificate subgroup
//! ([`juxta::group::GroupService::create_secure`]) whose rendezvous and
//! edges are members holding a certificate issued by the group's creator,
//! the rendezvous running as the group's own
//! ([`juxta::group::Group::start_rendezvous`]) and the edges leasing them
//! in the group. This module is that set-up, once: [`create`],
//! [`join_member`], and, for a rendezvous running in another process
//! (`juxta rdv-serve --group-credential DIR`), [`write_credential`] /
//! [`read_credential`] to hand it its membership through its home.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use juxta::rendezvous::RendezvousConfig;
//! use juxta::{Peer, PeerConfig};
//! let m = Peer::start(PeerConfig::new("/tmp/sg-m").listen("127.0.0.1:0".parse()?)).await?;
//! let a = Peer::start(PeerConfig::new("/tmp/sg-a").listen("127.0.0.1:0".parse()?)).await?;
//! // m creates the group and runs its rendezvous; a joins as an edge.
//! let mg = juxta_bench::subgroup::create(&m, "club").await?;
//! let rdv = mg.start_rendezvous(RendezvousConfig::rendezvous())?;
//! let seed = m.local_addr().unwrap();
//! let (ag, edge) = juxta_bench::subgroup::join_member(
//!     &mg,
//!     &a,
//!     RendezvousConfig::edge(vec![seed]),
//!     Some(Duration::from_secs(10)),
//! )
//! .await?;
//! assert_eq!(edge.status().leased_to, Some(m.peer_id()));
//! assert_eq!(rdv.status().clients, 1);
//! assert_eq!(ag.id, mg.id);
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use juxta::group::{CertCredential, Group, GroupError};
use juxta::proto::advertisement::PeerGroupAdvertisement;
use juxta::proto::group::cert::MemberCertificate;
use juxta::proto::id::PeerId;
use juxta::rendezvous::{RendezvousConfig, RendezvousHandle};
use juxta::Peer;

/// How long the benchmarks' groups and member certificates are valid.
pub const VALIDITY: Duration = Duration::from_secs(3600);

/// The group advertisement file of a credential directory.
const ADV_FILE: &str = "group-adv.xml";
/// The member certificate file (binary, [`MemberCertificate::encode`]).
const CERT_FILE: &str = "member.cert";
/// The member key's seed (hex; secret).
const KEY_FILE: &str = "member.key";

/// Errors setting up a subgroup member.
#[derive(Debug, thiserror::Error)]
pub enum SubgroupError {
    /// Creating, issuing, joining or starting the group's rendezvous failed.
    #[error(transparent)]
    Group(#[from] GroupError),
    /// An edge did not lease the group's rendezvous in time.
    #[error("group edge: not leased by the group's rendezvous within {0:?}")]
    NotLeased(Duration),
    /// A credential file could not be written or read.
    #[error("member credential {path}: {source}")]
    Io {
        /// the file
        path: PathBuf,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// A credential file holds something else.
    #[error("member credential {path}: malformed {what}")]
    Malformed {
        /// the file
        path: PathBuf,
        /// what could not be read
        what: &'static str,
    },
}

/// Creates a certificate subgroup of the Net peer group on `owner` (which
/// holds the group key and issues the members' certificates).
pub async fn create(owner: &Peer, name: &str) -> Result<Group, SubgroupError> {
    Ok(owner.groups().create_secure(name, VALIDITY).await?)
}

/// Issues `peer` a member certificate of `owner`'s group, joins it with
/// that certificate and starts the group's rendezvous service on it as
/// `rc` (a rendezvous or an edge). With `lease_timeout`, waits until the
/// edge holds a lease in the group ([`SubgroupError::NotLeased`] if not).
pub async fn join_member(
    owner: &Group,
    peer: &Peer,
    rc: RendezvousConfig,
    lease_timeout: Option<Duration>,
) -> Result<(Group, RendezvousHandle), SubgroupError> {
    let cred = owner.issue(peer.peer_id(), VALIDITY, false)?;
    let g = peer
        .groups()
        .join_with_certificate(&owner.adv, &cred)
        .await?;
    let h = g.start_rendezvous(rc)?;
    if let Some(t) = lease_timeout {
        if h.wait_leased(t).await.is_none() {
            return Err(SubgroupError::NotLeased(t));
        }
    }
    Ok((g, h))
}

/// Issues `member` a certificate of `owner`'s group and writes the group's
/// advertisement and the credential into `dir` (for a member in another
/// process, [`read_credential`]). The member key is secret: `dir` is the
/// member's own home.
pub fn write_credential(owner: &Group, member: PeerId, dir: &Path) -> Result<(), SubgroupError> {
    let cred = owner.issue(member, VALIDITY, false)?;
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|source| SubgroupError::Io { path, source })
    };
    write(ADV_FILE, owner.adv.to_xml().as_bytes())?;
    write(CERT_FILE, &cred.certificate.encode())?;
    write(KEY_FILE, hex::encode(cred.key_seed()).as_bytes())
}

/// Reads what [`write_credential`] wrote: the group's advertisement and
/// the member credential.
pub fn read_credential(
    dir: &Path,
) -> Result<(PeerGroupAdvertisement, CertCredential), SubgroupError> {
    // The files are small; bound what is read anyway.
    const MAX: u64 = 64 * 1024;
    let read = |name: &str| {
        let path = dir.join(name);
        let len = std::fs::metadata(&path)
            .map_err(|source| SubgroupError::Io {
                path: path.clone(),
                source,
            })?
            .len();
        if len > MAX {
            return Err(SubgroupError::Malformed {
                path,
                what: "file (too large)",
            });
        }
        std::fs::read(&path)
            .map(|b| (path.clone(), b))
            .map_err(|source| SubgroupError::Io { path, source })
    };
    let (path, adv) = read(ADV_FILE)?;
    let adv = std::str::from_utf8(&adv)
        .ok()
        .and_then(|s| PeerGroupAdvertisement::parse(s).ok())
        .ok_or(SubgroupError::Malformed {
            path,
            what: "group advertisement",
        })?;
    let (path, cert) = read(CERT_FILE)?;
    let cert = MemberCertificate::decode(&cert).map_err(|_| SubgroupError::Malformed {
        path,
        what: "member certificate",
    })?;
    let (path, key) = read(KEY_FILE)?;
    let seed: [u8; 32] = hex::decode(key.trim_ascii())
        .ok()
        .and_then(|k| k.try_into().ok())
        .ok_or(SubgroupError::Malformed {
            path: path.clone(),
            what: "member key",
        })?;
    let cred = CertCredential::new(cert, seed).map_err(|_| SubgroupError::Malformed {
        path,
        what: "member key (not the certificate's)",
    })?;
    Ok((adv, cred))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_written_credential_reads_back_and_bad_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let owner = Peer::start(juxta::PeerConfig::new(dir.path().join("o")).key_bits(1024))
            .await
            .unwrap();
        let g = create(&owner, "cred-test").await.unwrap();
        // (Any peer ID: the file round trip is what is tested.)
        let member = owner.peer_id();
        let home = dir.path().join("m");
        std::fs::create_dir_all(&home).unwrap();
        write_credential(&g, member, &home).unwrap();
        let (adv, cred) = read_credential(&home).unwrap();
        assert_eq!(adv.group_id, g.id);
        assert_eq!(cred.certificate.peer_id, member);
        // A key that is not the certificate's is refused, typed.
        std::fs::write(home.join(KEY_FILE), hex::encode([7u8; 32])).unwrap();
        assert!(matches!(
            read_credential(&home),
            Err(SubgroupError::Malformed { .. })
        ));
        std::fs::write(home.join(KEY_FILE), "zz").unwrap();
        assert!(matches!(
            read_credential(&home),
            Err(SubgroupError::Malformed { .. })
        ));
        std::fs::remove_file(home.join(CERT_FILE)).unwrap();
        assert!(matches!(
            read_credential(&home),
            Err(SubgroupError::Io { .. })
        ));
    }
}
