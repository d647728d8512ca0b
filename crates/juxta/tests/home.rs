//! The home directory: identity files created safely (never through a
//! symbolic link, never overwritten, key mode 0600), a lost certificate
//! issued again from the kept key, and one running peer per home.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use juxta::peer::IdentityFileProblem;
use juxta::{Peer, PeerConfig, PeerError};

fn config(home: &Path) -> PeerConfig {
    let mut cfg = PeerConfig::new(home.to_path_buf());
    cfg.key_bits = 1024;
    cfg
}

#[tokio::test]
async fn new_identity_files_are_created_private_and_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let id = {
        let p = Peer::start(config(&home)).await.unwrap();
        p.peer_id()
    };
    let key = home.join("identity.key");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "identity.key mode {mode:o}");
    assert!(std::fs::read_to_string(&key)
        .unwrap()
        .starts_with("-----BEGIN PRIVATE KEY-----"));
    let crt = std::fs::read(home.join("identity.crt")).unwrap();
    // Restart: the same identity, files untouched.
    let p = Peer::start(config(&home)).await.unwrap();
    assert_eq!(p.peer_id(), id);
    assert_eq!(std::fs::read(home.join("identity.crt")).unwrap(), crt);
}

#[tokio::test]
async fn symlinked_key_is_refused_and_its_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious data\n").unwrap();
    symlink(&victim, home.join("identity.key")).unwrap();
    // No certificate: the old code overwrote the key path (through the
    // link) with a fresh key.
    match Peer::start(config(&home)).await {
        Err(PeerError::IdentityFile { path, problem }) => {
            assert_eq!(path, home.join("identity.key"));
            assert_eq!(problem, IdentityFileProblem::Symlink);
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a symlinked identity.key was accepted"),
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious data\n");
    assert!(!home.join("identity.crt").exists());
    assert!(std::fs::symlink_metadata(home.join("identity.key"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[tokio::test]
async fn symlinked_certificate_is_refused_and_its_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    drop(Peer::start(config(&home)).await.unwrap());
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious data\n").unwrap();
    std::fs::remove_file(home.join("identity.crt")).unwrap();
    symlink(&victim, home.join("identity.crt")).unwrap();
    match Peer::start(config(&home)).await {
        Err(PeerError::IdentityFile { path, problem }) => {
            assert_eq!(path, home.join("identity.crt"));
            assert_eq!(problem, IdentityFileProblem::Symlink);
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a symlinked identity.crt was accepted"),
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious data\n");
}

#[tokio::test]
async fn missing_certificate_is_issued_again_and_the_key_kept() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let id = Peer::start(config(&home)).await.unwrap().peer_id();
    let key = std::fs::read(home.join("identity.key")).unwrap();
    let old_crt = std::fs::read(home.join("identity.crt")).unwrap();
    std::fs::remove_file(home.join("identity.crt")).unwrap();

    let p = Peer::start(config(&home)).await.unwrap();
    assert_eq!(p.peer_id(), id, "the peer ID comes from the kept key");
    assert_eq!(std::fs::read(home.join("identity.key")).unwrap(), key);
    let new_crt = std::fs::read(home.join("identity.crt")).unwrap();
    assert_ne!(new_crt, old_crt);
    assert_eq!(p.identity().cert_der().len(), {
        let pem = String::from_utf8(new_crt).unwrap();
        juxta_proto::identity::Identity::from_pem(&String::from_utf8(key).unwrap(), &pem)
            .unwrap()
            .cert_der()
            .len()
    });
}

#[tokio::test]
async fn certificate_without_key_is_refused_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    drop(Peer::start(config(&home)).await.unwrap());
    let crt = std::fs::read(home.join("identity.crt")).unwrap();
    std::fs::remove_file(home.join("identity.key")).unwrap();
    match Peer::start(config(&home)).await {
        Err(PeerError::IdentityFile { path, problem }) => {
            assert_eq!(path, home.join("identity.crt"));
            assert_eq!(problem, IdentityFileProblem::CertificateWithoutKey);
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("started without identity.key"),
    }
    assert_eq!(std::fs::read(home.join("identity.crt")).unwrap(), crt);
    assert!(!home.join("identity.key").exists());
}

#[tokio::test]
async fn second_peer_on_the_same_home_is_refused_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let first = Peer::start(config(&home)).await.unwrap();
    match Peer::start(config(&home)).await {
        Err(PeerError::HomeLocked { path, pid }) => {
            assert_eq!(path, home);
            // The holder recorded its process: this one.
            assert_eq!(pid, Some(std::process::id()));
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("two peers share one home"),
    }
    let err = Peer::start(config(&home)).await.err().unwrap();
    assert!(
        err.to_string().contains(&home.display().to_string()),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("process {}", std::process::id())),
        "{err}"
    );
    // Another home is not affected.
    let other = Peer::start(config(&dir.path().join("other")))
        .await
        .unwrap();
    assert_ne!(other.peer_id(), first.peer_id());

    let id = first.peer_id();
    drop(first);
    let again = Peer::start(config(&home)).await.unwrap();
    assert_eq!(again.peer_id(), id);
    // Closing (not only dropping) unlocks the home, even while the closed
    // peer's value lives on.
    again.close().await.unwrap();
    let third = Peer::start(config(&home)).await.unwrap();
    assert_eq!(third.peer_id(), id);
}
