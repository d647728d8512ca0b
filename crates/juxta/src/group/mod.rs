//! Peer groups at run time: the Net peer group is the default (every peer
//! is in it); [`GroupService::create`] makes a subgroup with password
//! membership and publishes its advertisement, [`GroupService::join`]
//! checks the password (JXSE's `PasswdMembershipService`), and
//! [`GroupService::leave`] resigns.
//!
//! Why it exists: resolver traffic scoped to a group this peer has not
//! joined must not be delivered. The resolver asks
//! [`State::may_deliver`] for the group named in each resolver queue
//! (`<group unique ID>ORes`/`IRes`) and drops (and counts, in
//! [`crate::Stats::group_refused`]) what is not for us.
//!
//! The pure membership state is [`juxta_proto::group::Memberships`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use juxta::{Peer, PeerConfig};
//! let a = Peer::start(PeerConfig::new("/tmp/ga")).await?;
//! let club = a.groups().create("club", Some("secret")).await?;
//! assert!(a.groups().is_member(&club.id));
//! a.groups().leave(&club.id)?;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use juxta_proto::advertisement::{AdvKind, Advertisement, PeerGroupAdvertisement};
use juxta_proto::group::{self, MembershipError, Memberships};
use juxta_proto::id::{JxtaId, PeerGroupId, PeerId};

use crate::discovery::DiscoveryError;
use crate::peer::Inner;

/// The login name groups made by [`GroupService::create`] use (JXSE's
/// password membership needs one; joiners use the same).
pub const DEFAULT_LOGIN: &str = "member";

/// Errors from the group service.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// Membership refused (wrong password, ...), or the advertisement has
    /// no password membership.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// The group advertisement is not known locally (discover it first).
    #[error("unknown group {0}")]
    UnknownGroup(String),
    /// Not a member of that group.
    #[error("not a member of group {0}")]
    NotMember(String),
    /// Publishing or discovering failed.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
}

/// A group this peer created or joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupHandle {
    /// The group's ID.
    pub id: PeerGroupId,
    /// Its advertisement.
    pub adv: PeerGroupAdvertisement,
}

/// What to join: an advertisement, or the ID of one in the local cache.
#[derive(Debug, Clone)]
pub enum GroupRef {
    /// A group advertisement (e.g. found by discovery).
    Adv(PeerGroupAdvertisement),
    /// A group ID whose advertisement is in the local cache.
    Id(PeerGroupId),
}

impl From<PeerGroupAdvertisement> for GroupRef {
    fn from(a: PeerGroupAdvertisement) -> Self {
        GroupRef::Adv(a)
    }
}

impl From<&PeerGroupAdvertisement> for GroupRef {
    fn from(a: &PeerGroupAdvertisement) -> Self {
        GroupRef::Adv(a.clone())
    }
}

impl From<PeerGroupId> for GroupRef {
    fn from(id: PeerGroupId) -> Self {
        GroupRef::Id(id)
    }
}

/// Membership state kept in the peer.
#[derive(Default)]
pub(crate) struct State {
    joined: Mutex<(Memberships, HashMap<PeerGroupId, PeerGroupAdvertisement>)>,
}

impl State {
    /// Whether traffic scoped to `group` may be delivered here.
    pub(crate) fn may_deliver(&self, group: &PeerGroupId) -> bool {
        self.joined
            .lock()
            .expect("groups lock")
            .0
            .may_deliver(group)
    }
}

/// The group a resolver queue (`<unique>ORes`, `<unique>IRes`) or a
/// mangled group name belongs to; `None` if it names no group.
pub(crate) fn group_of_unique(unique: &str) -> Option<PeerGroupId> {
    JxtaId::from_unique_value(unique).ok()?.try_into().ok()
}

/// Creates, joins and leaves peer groups; get it with
/// [`crate::Peer::groups`].
#[derive(Clone)]
pub struct GroupService {
    inner: Arc<Inner>,
}

impl crate::Peer {
    /// The peer group service.
    pub fn groups(&self) -> GroupService {
        GroupService {
            inner: self.inner.clone(),
        }
    }
}

impl GroupService {
    fn me(&self) -> PeerId {
        *self.inner.identity.peer_id()
    }

    fn discovery(&self) -> crate::discovery::DiscoveryService {
        crate::discovery::DiscoveryService {
            inner: self.inner.clone(),
        }
    }

    /// Creates a subgroup of the Net peer group named `name`, with password
    /// membership (login [`DEFAULT_LOGIN`]; `None`: any password is
    /// accepted), publishes its advertisement locally and joins it.
    pub async fn create(
        &self,
        name: &str,
        password: Option<&str>,
    ) -> Result<GroupHandle, GroupError> {
        let id = group::new_subgroup_id(&PeerGroupId::NET, &mut rand::thread_rng());
        let spec = group::spec(group::ALL_PURPOSE_GROUP_SPEC)
            .map_err(|_| GroupError::UnknownGroup(group::ALL_PURPOSE_GROUP_SPEC.into()))?;
        let adv = group::passwd_group_advertisement(
            id,
            spec,
            name,
            [(DEFAULT_LOGIN, password.unwrap_or(""))],
        );
        self.discovery()
            .publish(&Advertisement::Group(adv.clone()))
            .await?;
        self.join_adv(&adv, password.unwrap_or(""))?;
        Ok(GroupHandle { id, adv })
    }

    fn join_adv(&self, adv: &PeerGroupAdvertisement, password: &str) -> Result<(), GroupError> {
        let me = self.me();
        let mut j = self.inner.groups.joined.lock().expect("groups lock");
        j.0.join(adv, DEFAULT_LOGIN, password, me)?;
        j.1.insert(adv.group_id, adv.clone());
        Ok(())
    }

    /// Joins a group with `password` (checked against the advertisement's
    /// password membership; a wrong one gives
    /// [`MembershipError::IncorrectPassword`]). An ID is looked up in the
    /// local cache.
    pub async fn join(
        &self,
        group: impl Into<GroupRef>,
        password: Option<&str>,
    ) -> Result<GroupHandle, GroupError> {
        let adv = match group.into() {
            GroupRef::Adv(a) => a,
            GroupRef::Id(id) => self.local_adv(&id).await?,
        };
        self.join_adv(&adv, password.unwrap_or(""))?;
        Ok(GroupHandle {
            id: adv.group_id,
            adv,
        })
    }

    async fn local_adv(&self, id: &PeerGroupId) -> Result<PeerGroupAdvertisement, GroupError> {
        let found = self
            .discovery()
            .get_local(AdvKind::Group, Some("GID"), Some(&id.to_string()), 1)
            .await?;
        found
            .into_iter()
            .find_map(|a| match a {
                Advertisement::Group(g) if g.group_id == *id => Some(g),
                _ => None,
            })
            .ok_or_else(|| GroupError::UnknownGroup(id.to_string()))
    }

    /// Leaves a group.
    pub fn leave(&self, id: &PeerGroupId) -> Result<(), GroupError> {
        let mut j = self.inner.groups.joined.lock().expect("groups lock");
        j.1.remove(id);
        if j.0.leave(id) {
            Ok(())
        } else {
            Err(GroupError::NotMember(id.to_string()))
        }
    }

    /// Whether this peer is a member (always for the World and Net groups).
    pub fn is_member(&self, id: &PeerGroupId) -> bool {
        self.inner.groups.may_deliver(id)
    }

    /// The groups joined (without the Net group).
    pub fn joined(&self) -> Vec<GroupHandle> {
        let j = self.inner.groups.joined.lock().expect("groups lock");
        j.1.iter()
            .map(|(id, adv)| GroupHandle {
                id: *id,
                adv: adv.clone(),
            })
            .collect()
    }

    /// Group advertisements whose name matches `name` (`*` wildcards) in
    /// the local cache.
    pub async fn find_local(&self, name: &str) -> Result<Vec<PeerGroupAdvertisement>, GroupError> {
        let found = self
            .discovery()
            .get_local(AdvKind::Group, Some("Name"), Some(name), 100)
            .await?;
        Ok(groups_only(found))
    }

    /// Asks connected peers (or `peer`) for group advertisements whose name
    /// matches `name`; found ones are cached.
    pub async fn find_remote(
        &self,
        name: &str,
        peer: Option<PeerId>,
        timeout: Duration,
    ) -> Result<Vec<PeerGroupAdvertisement>, GroupError> {
        let found = self
            .discovery()
            .get_remote(AdvKind::Group, Some("Name"), Some(name), 10, peer, timeout)
            .await?;
        Ok(groups_only(found))
    }
}

fn groups_only(v: Vec<Advertisement>) -> Vec<PeerGroupAdvertisement> {
    v.into_iter()
        .filter_map(|a| match a {
            Advertisement::Group(g) => Some(g),
            _ => None,
        })
        .collect()
}
