//! Peer groups at run time, as scopes with their own services.
//!
//! The Net peer group is the default (every peer is in it). Creating or
//! joining a subgroup gives a [`Group`] handle exposing the same services
//! as the [`crate::Peer`] does for the Net peer group, scoped to that group:
//!
//! - **resolver**: the group's queries and responses travel on its own
//!   queues (`<group unique ID>ORes`/`IRes`) at addresses mangled with the
//!   group (`EndpointService:<group unique ID>`), as JXSE's endpoint
//!   service of that group sends them; traffic for a group this peer is
//!   not in is dropped and counted ([`crate::Stats::group_refused`]);
//! - **discovery** ([`Group::discovery`]): its own advertisement cache
//!   partition (in memory, bounded): a query in the group is answered only
//!   from that partition, a publish lands only there;
//! - **pipes** ([`Group::pipes`]): an input pipe created in the group is
//!   found only by binding queries in that group;
//! - **subgroups** ([`Group::groups`]): nested groups, whose advertisement
//!   is published in the parent group.
//!
//! Leaving a group ([`Group::leave`]) closes its input pipes, drops its
//! cache partition and leaves its subgroups.
//!
//! Membership: JXSE's password membership ([`GroupService::create`],
//! [`GroupService::join`]; for interop, it protects nothing, see
//! [`juxta_proto::group`]), or Juxta's certificate membership
//! ([`GroupService::create_secure`], [`GroupService::join_with_certificate`],
//! [`juxta_proto::group::cert`]): the group has an Ed25519 key, members a
//! certificate signed by it, and every resolver message in the group
//! carries a signature of its sender's member key. A message without a
//! valid one (a non-member injecting, a revoked member) is dropped and
//! counted ([`crate::Stats::group_unauthenticated`]); a certificate refused
//! at join is counted in [`crate::Stats::group_cert_refused`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use juxta::{Peer, PeerConfig};
//! use juxta::proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
//! use juxta::proto::id::PipeId;
//! let a = Peer::start(PeerConfig::new("/tmp/ga").listen("127.0.0.1:0".parse()?)).await?;
//! let b = Peer::start(PeerConfig::new("/tmp/gb")).await?;
//! b.connect(a.local_addr().unwrap()).await?;
//! // a creates a certificate group and issues b a credential.
//! let club = a.groups().create_secure("club", Duration::from_secs(3600)).await?;
//! let cred = club.issue(b.peer_id(), Duration::from_secs(3600), false)?;
//! let mut pipe = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
//! pipe.name = Some("club-chat".into());
//! club.discovery().publish(&Advertisement::Pipe(pipe)).await?;
//! // b joins with it and discovers inside the group only.
//! let g = b.groups().join_with_certificate(&club.adv, &cred).await?;
//! let found = g.discovery().search(AdvKind::Adv).matching("Name", "club-*").remote().await?;
//! assert_eq!(found.advertisements.len(), 1);
//! g.leave()?;
//! # Ok(()) }
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use juxta_proto::advertisement::{AdvKind, Advertisement, PeerGroupAdvertisement};
use juxta_proto::endpoint::ServiceAddress;
use juxta_proto::group::cert::{
    self, CertError, CertMembership, GroupAuth, MemberCertificate, ReplayGuard, RevocationList,
    SigningKey,
};
use juxta_proto::group::seal::{self as gseal, TrafficKey, GROUP_SECRET_LEN, SEALED_ELEMENT};
use juxta_proto::group::{self, MembershipError, PasswdCredential, PasswdMembership};
use juxta_proto::id::{PeerGroupId, PeerId, PipeId};
use juxta_proto::message::{Element, Message};

use crate::cache::{AdvCache, CacheConfig, CacheHandle};
use crate::discovery::{DiscoveryError, DiscoveryService};
use crate::peer::Inner;
use crate::pipe::PipeService;

/// The login name groups made by [`GroupService::create`] use (JXSE's
/// password membership needs one; joiners use the same).
pub const DEFAULT_LOGIN: &str = "member";
/// Most entries in one group's advertisement cache partition.
pub const GROUP_CACHE_ENTRIES: u64 = 65_536;
/// Group message tags remembered per group (replay protection).
const REPLAY_CAPACITY: usize = 16_384;
/// The namespace of the group message tag element.
pub const NS_JUXTA: &str = "juxta";
/// The resolver handler carrying a group's revocation list.
pub const CRL_HANDLER: &str = "juxta.group.revocations";
/// Most groups in which one peer runs a rendezvous service (as a
/// rendezvous or as an edge leasing one) at once.
pub const MAX_GROUP_RENDEZVOUS: usize = 16;

/// Errors from the group service.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// Password membership refused (wrong password, ...), or the
    /// advertisement has no password membership.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// Certificate membership refused: the certificate is not signed by
    /// the group, expired, revoked, for another peer ID or group, or the
    /// advertisement carries no valid group key.
    #[error("certificate refused: {0}")]
    Certificate(#[from] CertError),
    /// The group advertisement is not known locally (discover it first).
    #[error("unknown group {0}")]
    UnknownGroup(String),
    /// Not a member of that group (or it was left).
    #[error("not a member of group {0}")]
    NotMember(String),
    /// Already a member of [`group::MAX_MEMBERSHIPS`] groups.
    #[error("already a member of {} groups", group::MAX_MEMBERSHIPS)]
    TooManyGroups,
    /// The peer is closing: nothing can be joined.
    #[error("the peer is closing")]
    Stopped,
    /// This peer holds neither the group key nor a certificate allowing it
    /// to issue (or revoke).
    #[error("not allowed to issue or revoke in group {0}")]
    NotIssuer(String),
    /// The group's cache partition could not be made.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// Publishing or discovering failed.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The group's rendezvous service is already running here.
    #[error("the rendezvous service of group {0} is already running")]
    RendezvousRunning(String),
    /// This peer already runs [`MAX_GROUP_RENDEZVOUS`] group rendezvous
    /// services.
    #[error("already running {} group rendezvous services", MAX_GROUP_RENDEZVOUS)]
    TooManyRendezvous,
    /// The group's rendezvous service could not start.
    #[error("group rendezvous service: {0}")]
    Rendezvous(Box<crate::peer::PeerError>),
}

/// A member credential of a certificate group: the certificate and the
/// member key it certifies (secret: whoever holds it speaks for the member
/// in the group). Made by [`Group::issue`]; hand it to the member over a
/// confidential channel.
#[derive(Debug, Clone)]
pub struct CertCredential {
    /// The certificate.
    pub certificate: MemberCertificate,
    key: SigningKey,
    secret: Option<[u8; GROUP_SECRET_LEN]>,
}

impl CertCredential {
    /// A credential from a certificate and its member key's seed.
    pub fn new(certificate: MemberCertificate, key_seed: [u8; 32]) -> Result<Self, GroupError> {
        let key = SigningKey::from_seed(key_seed)?;
        if key.public() != certificate.member_key {
            return Err(GroupError::Certificate(CertError::BadKey));
        }
        Ok(CertCredential {
            certificate,
            key,
            secret: None,
        })
    }

    /// The same credential carrying the group secret of a group whose
    /// traffic is encrypted (see [`GroupService::create_secure_encrypted`]).
    pub fn with_group_secret(mut self, secret: [u8; GROUP_SECRET_LEN]) -> CertCredential {
        self.secret = Some(secret);
        self
    }

    /// The member key's seed (secret).
    pub fn key_seed(&self) -> [u8; 32] {
        self.key.seed()
    }

    /// The group secret (secret), in a group whose traffic is encrypted.
    pub fn group_secret(&self) -> Option<[u8; GROUP_SECRET_LEN]> {
        self.secret
    }
}

/// How this peer is a member of a group.
pub(crate) enum Credential {
    Passwd(#[allow(dead_code)] PasswdCredential),
    Cert(Box<CertCredential>),
}

/// Certificate state of a group (key, revocation list, replay guard).
pub(crate) struct CertState {
    pub(crate) membership: CertMembership,
    replay: ReplayGuard,
    traffic: Option<TrafficKey>,
    owner_key: Option<SigningKey>,
    next_serial: u64,
}

/// One joined group: its services' state.
pub(crate) struct GroupCtx {
    pub(crate) id: PeerGroupId,
    pub(crate) unique: String,
    pub(crate) parent: PeerGroupId,
    pub(crate) adv: PeerGroupAdvertisement,
    cache: Mutex<Option<CacheHandle>>,
    credential: Credential,
    cert: Option<Mutex<CertState>>,
    pipes: Mutex<HashSet<PipeId>>,
    closed: AtomicBool,
    /// Where the group's revocation list is persisted (certificate groups).
    crl_path: Option<std::path::PathBuf>,
    /// The group's own rendezvous service here, when started.
    rendezvous: Mutex<Option<GroupRendezvous>>,
}

/// A group's rendezvous service running on this peer.
struct GroupRendezvous {
    handle: crate::rendezvous::RendezvousHandle,
    task: tokio::task::JoinHandle<()>,
}

/// The label a sealed message sent to `dest` is sealed under.
pub(crate) fn seal_label(dest: &ServiceAddress) -> String {
    format!("{}/{}", dest.service, dest.param.as_deref().unwrap_or(""))
}

impl GroupCtx {
    /// The group's cache partition, unless the group was left.
    pub(crate) fn cache(&self) -> Option<CacheHandle> {
        self.cache.lock().expect("group cache lock").clone()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Records an input pipe opened in this group.
    pub(crate) fn add_pipe(&self, id: PipeId) {
        self.pipes.lock().expect("group pipes lock").insert(id);
    }

    /// Forgets an input pipe closed by its owner.
    pub(crate) fn remove_pipe(&self, id: &PipeId) {
        self.pipes.lock().expect("group pipes lock").remove(id);
    }

    /// The group's rendezvous service here, if started.
    pub(crate) fn rendezvous(&self) -> Option<crate::rendezvous::RendezvousHandle> {
        self.rendezvous
            .lock()
            .expect("group rendezvous lock")
            .as_ref()
            .map(|r| r.handle.clone())
    }

    /// Whether this group's traffic is encrypted.
    pub(crate) fn is_encrypted(&self) -> bool {
        self.cert
            .as_ref()
            .is_some_and(|c| c.lock().expect("group cert lock").traffic.is_some())
    }

    /// `msg`, to be sent to `dest` in this group: in a certificate group,
    /// sealed (tagged by this member, encrypted if the group's traffic
    /// is); in a password group, as it is.
    pub(crate) fn seal(&self, dest: &ServiceAddress, mut msg: Message) -> Message {
        let (Credential::Cert(c), Some(cs)) = (&self.credential, &self.cert) else {
            return msg;
        };
        // A forwarded member message: its own tag is no part of ours.
        msg.remove_all(NS_JUXTA, cert::AUTH_ELEMENT);
        msg.remove_all(NS_JUXTA, SEALED_ELEMENT);
        let cs = cs.lock().expect("group cert lock");
        match gseal::seal(
            &c.key,
            &c.certificate,
            cs.traffic.as_ref(),
            &seal_label(dest),
            &msg,
            crate::cache::unix_now_ms(),
            &mut rand::thread_rng(),
        ) {
            Ok(b) => Message::new().with(Element::bytes(NS_JUXTA, SEALED_ELEMENT, b)),
            // An empty message: nothing to seal, nothing to send.
            Err(_) => Message::new(),
        }
    }

    /// Opens a message received at `dest` in this group from `from`: in a
    /// certificate group it must be sealed by a member (`from` itself),
    /// fresh, and encrypted when the group's traffic is; in a password
    /// group it is taken as it is.
    pub(crate) fn open(
        &self,
        dest: &ServiceAddress,
        msg: Message,
        from: Option<PeerId>,
    ) -> Result<Message, CertError> {
        let Some(cs) = &self.cert else {
            return Ok(msg);
        };
        let from = from.ok_or(CertError::Malformed("message without a source"))?;
        let sealed = msg
            .get(NS_JUXTA, SEALED_ELEMENT)
            .ok_or(CertError::NotSealed)?;
        let mut cs = cs.lock().expect("group cert lock");
        let (tag, inner) = gseal::open(
            &cs.membership,
            cs.traffic.as_ref(),
            &seal_label(dest),
            &from,
            &sealed.data,
            crate::cache::unix_now_ms(),
        )?;
        if !cs.replay.first_time(&tag) {
            return Err(CertError::Stale);
        }
        Ok(inner)
    }

    /// A message carrying `elem` (the resolver element on `queue`) in this
    /// group: in a certificate group, with the sender's tag over it (and
    /// sealed, when the group's traffic is encrypted).
    pub(crate) fn message(&self, queue: &str, elem: Element) -> Message {
        if self.is_encrypted() {
            let dest = ServiceAddress::new(juxta_proto::resolver::RESOLVER_SERVICE, Some(queue));
            return self.seal(&dest, Message::new().with(elem));
        }
        let tag = match &self.credential {
            Credential::Cert(c) => {
                let mut nonce = [0u8; 16];
                rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut nonce);
                Some(GroupAuth::sign(
                    &c.key,
                    &c.certificate,
                    queue,
                    &elem.data,
                    crate::cache::unix_now_ms(),
                    nonce,
                ))
            }
            Credential::Passwd(_) => None,
        };
        let mut m = Message::new().with(elem);
        if let Some(t) = tag {
            m.push(Element::bytes(NS_JUXTA, cert::AUTH_ELEMENT, t.encode()));
        }
        m
    }

    /// Checks a message received in this group on `queue` (whose element
    /// of that name is the payload) from `from`: in a certificate group,
    /// it must carry a valid tag of `from`, seen for the first time, or
    /// be sealed by `from` (then the opened message is returned); in a
    /// group whose traffic is encrypted, it must be sealed.
    pub(crate) fn authenticate(
        &self,
        queue: &str,
        msg: &Message,
        from: Option<PeerId>,
    ) -> Result<Option<Message>, CertError> {
        let Some(cs) = &self.cert else {
            return Ok(None);
        };
        if msg.get(NS_JUXTA, SEALED_ELEMENT).is_some() || self.is_encrypted() {
            let dest = ServiceAddress::new(juxta_proto::resolver::RESOLVER_SERVICE, Some(queue));
            return self.open(&dest, msg.clone(), from).map(Some);
        }
        let from = from.ok_or(CertError::Malformed("message without a source"))?;
        let tag = msg
            .get(NS_JUXTA, cert::AUTH_ELEMENT)
            .ok_or(CertError::Malformed("group message without a tag"))?;
        let tag = GroupAuth::decode(&tag.data)?;
        let payload = msg
            .get(juxta_proto::message::NS_JXTA, queue)
            .ok_or(CertError::Malformed("group message without its element"))?;
        let mut cs = cs.lock().expect("group cert lock");
        cs.membership.verify_message(
            &tag,
            &from,
            queue,
            &payload.data,
            crate::cache::unix_now_ms(),
        )?;
        if !cs.replay.first_time(&tag) {
            return Err(CertError::Stale);
        }
        Ok(None)
    }

    /// Installs a revocation list received in the group.
    pub(crate) fn apply_revocations(&self, bytes: &[u8]) -> Result<bool, CertError> {
        let Some(cs) = &self.cert else {
            return Ok(false);
        };
        let l = RevocationList::decode(bytes)?;
        let mut cs = cs.lock().expect("group cert lock");
        let changed = cs.membership.apply_revocations(l.clone())?;
        if changed {
            // Written before the lock is released: whoever sees the new
            // list in force (`revocations`) finds it persisted too, so a
            // leave and rejoin right after cannot miss it.
            self.persist_revocations(&l);
        }
        drop(cs);
        Ok(changed)
    }

    /// Writes the revocation list in force to the peer's home, so a
    /// restarted member refuses revoked members before it hears the list
    /// again (best effort: a failure is logged).
    pub(crate) fn persist_revocations(&self, l: &RevocationList) {
        let Some(path) = &self.crl_path else {
            return;
        };
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension("crl.tmp");
            std::fs::write(&tmp, l.encode())?;
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            tracing::info!(group = %self.id, error = %e, "revocation list not persisted");
        }
    }

    /// The revocation list in force, if any.
    pub(crate) fn revocations(&self) -> Option<RevocationList> {
        let cs = self.cert.as_ref()?;
        cs.lock()
            .expect("group cert lock")
            .membership
            .revocations()
            .cloned()
    }
}

/// Where a certificate group's revocation list is kept in `home`.
pub fn revocations_path(home: &std::path::Path, group: &PeerGroupId) -> std::path::PathBuf {
    let name: String = group
        .unique_value()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    home.join("groups").join(format!("{name}.crl"))
}

/// Reads a persisted revocation list (`None`: none, unreadable or too
/// large; its signature is checked when it is applied).
fn load_revocations(path: &std::path::Path) -> Option<RevocationList> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > cert::MAX_CRL_BYTES as u64 {
        return None;
    }
    RevocationList::decode(&std::fs::read(path).ok()?).ok()
}

/// Membership state kept in the peer: the joined groups by unique value.
#[derive(Default)]
pub(crate) struct State {
    joined: RwLock<HashMap<String, Arc<GroupCtx>>>,
}

impl State {
    /// The joined group whose unique value is `unique`.
    pub(crate) fn get(&self, unique: &str) -> Option<Arc<GroupCtx>> {
        self.joined
            .read()
            .expect("groups lock")
            .get(unique)
            .cloned()
    }

    /// Whether traffic scoped to `group` may be delivered here.
    pub(crate) fn may_deliver(&self, group: &PeerGroupId) -> bool {
        group::is_public_group(group) || self.get(&group.unique_value()).is_some()
    }
}

/// A group this peer created or joined: its services, scoped to it.
///
/// Cheap to clone. After [`Group::leave`] its services fail with
/// [`GroupError::NotMember`] / [`DiscoveryError::NotMember`].
#[derive(Clone)]
pub struct Group {
    /// The group's ID.
    pub id: PeerGroupId,
    /// Its advertisement.
    pub adv: PeerGroupAdvertisement,
    inner: Arc<Inner>,
    pub(crate) ctx: Arc<GroupCtx>,
}

/// The former name of [`Group`].
pub type GroupHandle = Group;

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("id", &self.id)
            .field("name", &self.adv.name)
            .field("joined", &!self.ctx.is_closed())
            .finish()
    }
}

impl Group {
    fn new(inner: &Arc<Inner>, ctx: Arc<GroupCtx>) -> Group {
        Group {
            id: ctx.id,
            adv: ctx.adv.clone(),
            inner: inner.clone(),
            ctx,
        }
    }

    /// The discovery service of this group: its own cache partition and
    /// queries.
    pub fn discovery(&self) -> DiscoveryService {
        DiscoveryService {
            inner: self.inner.clone(),
            scope: Some(self.ctx.clone()),
        }
    }

    /// The pipe service of this group: its input pipes are resolved only by
    /// binding queries in this group.
    pub fn pipes(&self) -> PipeService {
        PipeService {
            inner: self.inner.clone(),
            scope: Some(self.ctx.clone()),
        }
    }

    /// The group service inside this group: creates and joins its
    /// subgroups (whose advertisements live in this group's cache).
    pub fn groups(&self) -> GroupService {
        GroupService {
            inner: self.inner.clone(),
            parent: Some(self.ctx.clone()),
        }
    }

    /// The group this one is a subgroup of.
    pub fn parent(&self) -> PeerGroupId {
        self.ctx.parent
    }

    /// Whether this peer is still a member.
    pub fn is_joined(&self) -> bool {
        !self.ctx.is_closed()
    }

    /// This peer's certificate in a certificate group.
    pub fn certificate(&self) -> Option<&MemberCertificate> {
        match &self.ctx.credential {
            Credential::Cert(c) => Some(&c.certificate),
            Credential::Passwd(_) => None,
        }
    }

    /// The revocation list in force in a certificate group.
    pub fn revocations(&self) -> Option<RevocationList> {
        let cs = self.ctx.cert.as_ref()?;
        cs.lock()
            .expect("group cert lock")
            .membership
            .revocations()
            .cloned()
    }

    /// Leaves the group (see [`GroupService::leave`]).
    pub fn leave(&self) -> Result<(), GroupError> {
        GroupService {
            inner: self.inner.clone(),
            parent: None,
        }
        .leave(&self.id)
    }

    /// Issues a member credential for `peer`, valid from now for
    /// `validity` (a fresh member key is made for it). Only the group's
    /// creator (who holds the group key) or a member whose certificate
    /// allows issuing may; `may_issue` (creator only) lets the new member
    /// issue in turn.
    pub fn issue(
        &self,
        peer: PeerId,
        validity: Duration,
        may_issue: bool,
    ) -> Result<CertCredential, GroupError> {
        let not_member = || GroupError::NotMember(self.id.to_string());
        if self.ctx.is_closed() {
            return Err(not_member());
        }
        let cs = self.ctx.cert.as_ref().ok_or_else(not_member)?;
        let mut cs = cs.lock().expect("group cert lock");
        let now = crate::cache::unix_now_ms();
        let until = now.saturating_add(u64::try_from(validity.as_millis()).unwrap_or(u64::MAX));
        let member = SigningKey::generate(&mut rand::thread_rng());
        let serial = rand::random::<u64>() ^ cs.next_serial;
        cs.next_serial = cs.next_serial.wrapping_add(1);
        let cert = match (&cs.owner_key, &self.ctx.credential) {
            (Some(k), _) => MemberCertificate::issue(
                k,
                None,
                self.id,
                peer,
                member.public(),
                serial,
                now,
                until,
                may_issue,
            ),
            (None, Credential::Cert(mine)) if mine.certificate.may_issue => {
                MemberCertificate::issue(
                    &mine.key,
                    Some(&mine.certificate),
                    self.id,
                    peer,
                    member.public(),
                    serial,
                    now,
                    until.min(mine.certificate.not_after_ms),
                    false,
                )
            }
            _ => return Err(GroupError::NotIssuer(self.id.to_string())),
        };
        let secret = match &self.ctx.credential {
            Credential::Cert(mine) => mine.secret,
            Credential::Passwd(_) => None,
        };
        Ok(CertCredential {
            certificate: cert,
            key: member,
            secret,
        })
    }

    /// Starts this group's own rendezvous service on this peer, apart
    /// from the Net peer group's (JXSE runs one per group): with
    /// [`crate::rendezvous::RendezvousConfig::rendezvous`] this member
    /// serves leases, an SRDI index and lookups for this group only; with
    /// [`crate::rendezvous::RendezvousConfig::edge`] (the addresses of
    /// members that are the group's rendezvous) it leases one of them,
    /// and then its discovery and pipe binding in the group go through it
    /// and its publications become SRDI entries there. In a certificate
    /// group every message of the service is sealed by its sender's
    /// member key (and encrypted if the group's traffic is): a non-member
    /// can neither lease the group's rendezvous nor read or feed its
    /// index. [`Group::leave`] ends the lease (the rendezvous drops this
    /// peer's entries at once) and stops the service. At most
    /// [`MAX_GROUP_RENDEZVOUS`] groups per peer.
    ///
    /// ```no_run
    /// # async fn demo(g: juxta::group::Group, rdv: std::net::SocketAddr) -> Result<(), juxta::group::GroupError> {
    /// use juxta::rendezvous::RendezvousConfig;
    /// let h = g.start_rendezvous(RendezvousConfig::edge(vec![rdv]))?;
    /// h.wait_leased(std::time::Duration::from_secs(5)).await;
    /// # Ok(()) }
    /// ```
    pub fn start_rendezvous(
        &self,
        cfg: crate::rendezvous::RendezvousConfig,
    ) -> Result<crate::rendezvous::RendezvousHandle, GroupError> {
        if self.ctx.is_closed() {
            return Err(GroupError::NotMember(self.id.to_string()));
        }
        let running = self
            .inner
            .groups
            .joined
            .read()
            .expect("groups lock")
            .values()
            .filter(|c| c.rendezvous().is_some())
            .count();
        let mut slot = self.ctx.rendezvous.lock().expect("group rendezvous lock");
        if slot.is_some() {
            return Err(GroupError::RendezvousRunning(self.id.to_string()));
        }
        if running >= MAX_GROUP_RENDEZVOUS {
            return Err(GroupError::TooManyRendezvous);
        }
        let (handle, task) = crate::rendezvous::spawn_in(&self.inner, cfg, Some(self.ctx.clone()))
            .map_err(|e| GroupError::Rendezvous(Box::new(e)))?;
        *slot = Some(GroupRendezvous {
            handle: handle.clone(),
            task,
        });
        Ok(handle)
    }

    /// This group's rendezvous service on this peer, if started
    /// ([`Group::start_rendezvous`]).
    pub fn rendezvous(&self) -> Option<crate::rendezvous::RendezvousHandle> {
        self.ctx.rendezvous()
    }

    /// Whether this group's traffic is encrypted (a certificate group
    /// created with [`GroupService::create_secure_encrypted`]).
    pub fn is_encrypted(&self) -> bool {
        self.ctx.is_encrypted()
    }

    /// Revokes members (by peer ID) and certificates (by serial): signs a
    /// new revocation list (creator only), applies it here and sends it to
    /// the connected peers in the group; returns to how many it was sent.
    /// Members that receive it refuse the revoked members' traffic.
    pub fn revoke(&self, peers: &[PeerId], serials: &[u64]) -> Result<usize, GroupError> {
        let not_issuer = || GroupError::NotIssuer(self.id.to_string());
        let cs = self.ctx.cert.as_ref().ok_or_else(not_issuer)?;
        let list = {
            let mut cs = cs.lock().expect("group cert lock");
            let key = cs.owner_key.as_ref().ok_or_else(not_issuer)?;
            let (mut ps, mut ss, version) = match cs.membership.revocations() {
                Some(l) => (
                    l.peers.clone(),
                    l.serials.clone(),
                    l.version.saturating_add(1),
                ),
                None => (Vec::new(), Vec::new(), 1),
            };
            for p in peers {
                if !ps.contains(p) {
                    ps.push(*p);
                }
            }
            for s in serials {
                if !ss.contains(s) {
                    ss.push(*s);
                }
            }
            let l = RevocationList::sign(key, self.id, version, ps, ss);
            cs.membership.apply_revocations(l.clone())?;
            // Persisted under the lock, as in `apply_revocations`.
            self.ctx.persist_revocations(&l);
            l
        };
        Ok(send_revocations(&self.inner, &self.ctx, &list, None))
    }
}

/// Asks the connected peers, in the group, for its revocation list (a
/// resolver query, handler [`CRL_HANDLER`], naming the version held): a
/// member holding a newer one answers with it (non-members drop the
/// query). Returns how many peers were asked.
fn ask_revocations(inner: &Arc<Inner>, ctx: &GroupCtx) -> usize {
    use juxta_proto::resolver::{query_queue, ResolverQuery, RESOLVER_SERVICE};
    let version = ctx.revocations().map_or(0, |l| l.version);
    let q = ResolverQuery {
        handler: CRL_HANDLER.to_string(),
        query_id: 0,
        hop_count: 0,
        src_peer: *inner.identity.peer_id(),
        query: version.to_string(),
        src_route: None,
    };
    let queue = query_queue(&ctx.unique);
    let mut asked = 0;
    for p in inner.connected_peers() {
        let Some(m) = inner.messenger(&p) else {
            continue;
        };
        let msg = ctx.message(&queue, q.to_element(&ctx.unique));
        if m.post_routed_in(&ctx.unique, RESOLVER_SERVICE, Some(&queue), msg)
            .is_ok()
        {
            asked += 1;
        }
    }
    asked
}

/// A member asked for the group's revocation list (`query`: the version
/// it holds): answered with ours when it is newer.
pub(crate) fn on_revocations_query(inner: &Arc<Inner>, ctx: &GroupCtx, from: PeerId, query: &str) {
    let held: u64 = query.trim().parse().unwrap_or(0);
    if let Some(l) = ctx.revocations().filter(|l| l.version > held) {
        send_revocations(inner, ctx, &l, Some(from));
    }
}

/// Sends a revocation list in the group (a resolver response with query
/// ID 0 on the group's `IRes` queue, handler [`CRL_HANDLER`]).
pub(crate) fn send_revocations(
    inner: &Arc<Inner>,
    ctx: &GroupCtx,
    list: &RevocationList,
    to: Option<PeerId>,
) -> usize {
    use base64::Engine;
    use juxta_proto::resolver::{response_queue, ResolverResponse, RESOLVER_SERVICE};
    let r = ResolverResponse {
        handler: CRL_HANDLER.to_string(),
        query_id: 0,
        response: base64::engine::general_purpose::STANDARD.encode(list.encode()),
    };
    let queue = response_queue(&ctx.unique);
    let targets = match to {
        Some(p) => vec![p],
        None => inner.connected_peers(),
    };
    let mut sent = 0;
    for p in targets {
        let Some(m) = inner.messenger(&p) else {
            continue;
        };
        let msg = ctx.message(&queue, r.to_element(&ctx.unique));
        if m.post_routed_in(&ctx.unique, RESOLVER_SERVICE, Some(&queue), msg)
            .is_ok()
        {
            sent += 1;
        }
    }
    sent
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

/// Creates, joins and leaves peer groups; get it with
/// [`crate::Peer::groups`] (subgroups of the Net peer group) or
/// [`Group::groups`] (subgroups of that group).
#[derive(Clone)]
pub struct GroupService {
    inner: Arc<Inner>,
    parent: Option<Arc<GroupCtx>>,
}

impl crate::Peer {
    /// The peer group service (subgroups of the Net peer group).
    pub fn groups(&self) -> GroupService {
        GroupService {
            inner: self.inner.clone(),
            parent: None,
        }
    }
}

impl GroupService {
    fn me(&self) -> PeerId {
        *self.inner.identity.peer_id()
    }

    fn discovery(&self) -> DiscoveryService {
        DiscoveryService {
            inner: self.inner.clone(),
            scope: self.parent.clone(),
        }
    }

    fn parent_id(&self) -> Result<PeerGroupId, GroupError> {
        match &self.parent {
            None => Ok(PeerGroupId::NET),
            Some(p) if p.is_closed() => Err(GroupError::NotMember(p.id.to_string())),
            Some(p) => Ok(p.id),
        }
    }

    /// Creates a subgroup named `name` with JXSE password membership (login
    /// [`DEFAULT_LOGIN`]; `None`: any password is accepted), publishes its
    /// advertisement in the parent group and joins it.
    pub async fn create(&self, name: &str, password: Option<&str>) -> Result<Group, GroupError> {
        let parent = self.parent_id()?;
        let id = group::new_subgroup_id(&parent, &mut rand::thread_rng());
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
        self.join_adv(&adv, password.unwrap_or("")).await
    }

    /// Creates a subgroup named `name` with certificate membership: makes
    /// its Ed25519 group key (the group ID is derived from it), publishes
    /// its advertisement in the parent group and joins it with a
    /// certificate for this peer valid for `validity`, which allows
    /// issuing. Issue members' credentials with [`Group::issue`].
    pub async fn create_secure(&self, name: &str, validity: Duration) -> Result<Group, GroupError> {
        self.create_cert_group(name, validity, None).await
    }

    /// [`GroupService::create_secure`], with the group's traffic encrypted:
    /// a random group secret is made, and handed to members in the
    /// credentials [`Group::issue`] makes; every group message (resolver:
    /// discovery, pipe binding, revocations; the group's rendezvous) is
    /// sealed with ChaCha20-Poly1305 under a key derived from it (HKDF,
    /// [`juxta_proto::group::seal`]) and signed by its sender's member
    /// key. A non-member, even on the same rendezvous or relay, can
    /// neither read it nor inject; a message in the clear is refused.
    pub async fn create_secure_encrypted(
        &self,
        name: &str,
        validity: Duration,
    ) -> Result<Group, GroupError> {
        let mut secret = [0u8; GROUP_SECRET_LEN];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut secret);
        self.create_cert_group(name, validity, Some(secret)).await
    }

    async fn create_cert_group(
        &self,
        name: &str,
        validity: Duration,
        secret: Option<[u8; GROUP_SECRET_LEN]>,
    ) -> Result<Group, GroupError> {
        let parent = self.parent_id()?;
        let key = SigningKey::generate(&mut rand::thread_rng());
        let id = cert::group_id_for_key(&key.public(), &parent);
        let spec = group::spec(group::ALL_PURPOSE_GROUP_SPEC)
            .map_err(|_| GroupError::UnknownGroup(group::ALL_PURPOSE_GROUP_SPEC.into()))?;
        let adv = cert::cert_group_advertisement(id, spec, name, &key.public());
        self.discovery()
            .publish(&Advertisement::Group(adv.clone()))
            .await?;
        let now = crate::cache::unix_now_ms();
        let member = SigningKey::generate(&mut rand::thread_rng());
        let certificate = MemberCertificate::issue(
            &key,
            None,
            id,
            self.me(),
            member.public(),
            rand::random(),
            now,
            now.saturating_add(u64::try_from(validity.as_millis()).unwrap_or(u64::MAX)),
            true,
        );
        let cred = CertCredential {
            certificate,
            key: member,
            secret,
        };
        self.join_cert(&adv, &cred, Some(key)).await
    }

    async fn insert(&self, ctx: GroupCtx) -> Result<Group, GroupError> {
        let ctx = Arc::new(ctx);
        let replaced = {
            let mut j = self.inner.groups.joined.write().expect("groups lock");
            let old = j.remove(&ctx.unique);
            if old.is_none() && j.len() >= group::MAX_MEMBERSHIPS {
                return Err(GroupError::TooManyGroups);
            }
            old
        };
        // Joining again replaces the credential; services start over. The
        // resolver keeps serving the group (it is joined again below).
        if let Some(old) = replaced {
            close_services(&self.inner, &old);
        }
        // The resolver task serves the group's traffic from its answer on
        // (the group is not in the registry before: nothing of it is
        // delivered yet).
        crate::resolver::join(&self.inner, &ctx.unique).await?;
        let mut j = self.inner.groups.joined.write().expect("groups lock");
        match j.insert(ctx.unique.clone(), ctx.clone()) {
            // The same group joined at once by another caller: its
            // services close, the resolver's membership stays.
            Some(raced) => close_services(&self.inner, &raced),
            None if j.len() > group::MAX_MEMBERSHIPS => {
                // Other groups joined meanwhile filled the registry.
                j.remove(&ctx.unique);
                close(&self.inner, &ctx);
                return Err(GroupError::TooManyGroups);
            }
            None => {}
        }
        Ok(Group::new(&self.inner, ctx))
    }

    fn new_ctx(
        &self,
        adv: &PeerGroupAdvertisement,
        credential: Credential,
        cert: Option<CertState>,
    ) -> Result<GroupCtx, GroupError> {
        let parent = self.parent_id()?;
        let cert_group = cert.is_some();
        let cache = CacheHandle::spawn(
            AdvCache::open_in_memory_with(CacheConfig {
                max_entries: GROUP_CACHE_ENTRIES,
                page_cache_kib: 1024,
                ..CacheConfig::default()
            })?,
            256,
        )?;
        Ok(GroupCtx {
            id: adv.group_id,
            unique: adv.group_id.unique_value(),
            parent,
            adv: adv.clone(),
            cache: Mutex::new(Some(cache)),
            credential,
            cert: cert.map(Mutex::new),
            pipes: Mutex::new(HashSet::new()),
            closed: AtomicBool::new(false),
            crl_path: cert_group.then(|| revocations_path(&self.inner.cfg.home, &adv.group_id)),
            rendezvous: Mutex::new(None),
        })
    }

    async fn join_adv(
        &self,
        adv: &PeerGroupAdvertisement,
        password: &str,
    ) -> Result<Group, GroupError> {
        if group::is_public_group(&adv.group_id) {
            return Err(GroupError::UnknownGroup(adv.group_id.to_string()));
        }
        let cred = PasswdMembership::from_group(adv)?.join(DEFAULT_LOGIN, password, self.me())?;
        let ctx = self.new_ctx(adv, Credential::Passwd(cred), None)?;
        self.insert(ctx).await
    }

    async fn join_cert(
        &self,
        adv: &PeerGroupAdvertisement,
        cred: &CertCredential,
        owner_key: Option<SigningKey>,
    ) -> Result<Group, GroupError> {
        let checked = CertMembership::from_group(adv).and_then(|mut m| {
            // The revocation list persisted here (if any) is in force
            // from the start: a revoked certificate cannot join again.
            if let Some(l) = load_revocations(&revocations_path(&self.inner.cfg.home, &adv.group_id))
            {
                if let Err(e) = m.apply_revocations(l) {
                    tracing::info!(group = %adv.group_id, error = %e, "persisted revocation list ignored");
                }
            }
            m.verify(&cred.certificate, &self.me(), crate::cache::unix_now_ms())?;
            if cred.key.public() != cred.certificate.member_key {
                return Err(CertError::BadKey);
            }
            Ok(m)
        });
        let membership = match checked {
            Ok(m) => m,
            Err(e) => {
                self.inner
                    .stats
                    .group_cert_refused
                    .fetch_add(1, Ordering::Relaxed);
                return Err(e.into());
            }
        };
        let state = CertState {
            membership,
            replay: ReplayGuard::new(REPLAY_CAPACITY),
            traffic: cred.secret.map(|s| TrafficKey::derive(&s, &adv.group_id)),
            owner_key,
            next_serial: 1,
        };
        let ctx = self.new_ctx(adv, Credential::Cert(Box::new(cred.clone())), Some(state))?;
        self.insert(ctx).await
    }

    async fn resolve_ref(&self, group: GroupRef) -> Result<PeerGroupAdvertisement, GroupError> {
        match group {
            GroupRef::Adv(a) => Ok(a),
            GroupRef::Id(id) => self.local_adv(&id).await,
        }
    }

    /// Joins a password group with `password` (checked against the
    /// advertisement's password membership; a wrong one gives
    /// [`MembershipError::IncorrectPassword`]). An ID is looked up in the
    /// parent group's local cache.
    pub async fn join(
        &self,
        group: impl Into<GroupRef>,
        password: Option<&str>,
    ) -> Result<Group, GroupError> {
        let adv = self.resolve_ref(group.into()).await?;
        self.join_adv(&adv, password.unwrap_or("")).await
    }

    /// Joins a certificate group with a credential issued by its creator
    /// (or an authorised member). Refused, with the reason, when the
    /// certificate is not signed by the group, not yet valid or expired,
    /// for another peer ID or group, or when the advertisement carries no
    /// group key matching its ID; each refusal is counted in
    /// [`crate::Stats::group_cert_refused`].
    pub async fn join_with_certificate(
        &self,
        group: impl Into<GroupRef>,
        credential: &CertCredential,
    ) -> Result<Group, GroupError> {
        let adv = self.resolve_ref(group.into()).await?;
        let g = self.join_cert(&adv, credential, None).await?;
        // The list in force may be newer than the one persisted here (or
        // there may be none yet): ask the members connected; the group's
        // rendezvous also sends it when it grants a lease.
        ask_revocations(&self.inner, &g.ctx);
        Ok(g)
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

    /// Leaves a group: closes the input pipes opened in it, drops its
    /// cache partition, and leaves its subgroups.
    pub fn leave(&self, id: &PeerGroupId) -> Result<(), GroupError> {
        let mut j = self.inner.groups.joined.write().expect("groups lock");
        let Some(ctx) = j.remove(&id.unique_value()) else {
            return Err(GroupError::NotMember(id.to_string()));
        };
        close(&self.inner, &ctx);
        // Nested groups go with their parent.
        let mut gone = vec![ctx.id];
        while let Some(p) = gone.pop() {
            let children: Vec<String> = j
                .iter()
                .filter(|(_, c)| c.parent == p)
                .map(|(u, _)| u.clone())
                .collect();
            for u in children {
                if let Some(c) = j.remove(&u) {
                    close(&self.inner, &c);
                    gone.push(c.id);
                }
            }
        }
        Ok(())
    }

    /// Whether this peer is a member (always for the World and Net groups).
    pub fn is_member(&self, id: &PeerGroupId) -> bool {
        self.inner.groups.may_deliver(id)
    }

    /// The groups joined (all levels; without the Net group).
    pub fn joined(&self) -> Vec<Group> {
        let j = self.inner.groups.joined.read().expect("groups lock");
        j.values()
            .map(|c| Group::new(&self.inner, c.clone()))
            .collect()
    }

    /// Group advertisements whose name matches `name` (`*` wildcards) in
    /// the parent group's local cache.
    pub async fn find_local(&self, name: &str) -> Result<Vec<PeerGroupAdvertisement>, GroupError> {
        let found = self
            .discovery()
            .get_local(AdvKind::Group, Some("Name"), Some(name), 100)
            .await?;
        Ok(groups_only(found))
    }

    /// Asks connected peers (or `peer`), in the parent group, for group
    /// advertisements whose name matches `name`; found ones are cached.
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

/// Closes a group's services: marks it left, drops its cache partition,
/// closes its input pipes.
fn close(inner: &Inner, ctx: &GroupCtx) {
    crate::resolver::leave(inner, &ctx.unique);
    close_services(inner, ctx);
}

/// Closes a group's services as [`close`] does, but leaves the resolver
/// serving the group (it was joined again with another credential).
fn close_services(inner: &Inner, ctx: &GroupCtx) {
    ctx.closed.store(true, Ordering::Release);
    // The group's rendezvous: an edge ends its lease politely (the
    // rendezvous drops its SRDI entries at once), then the service stops.
    if let Some(r) = ctx.rendezvous.lock().expect("group rendezvous lock").take() {
        let GroupRendezvous { handle, task } = r;
        inner.tasks.spawn(async move {
            if !handle.status().is_rendezvous {
                let _ = tokio::time::timeout(Duration::from_secs(2), handle.shutdown()).await;
            }
            task.abort();
        });
    }
    ctx.cache.lock().expect("group cache lock").take();
    let pipes: Vec<PipeId> = ctx
        .pipes
        .lock()
        .expect("group pipes lock")
        .drain()
        .collect();
    for id in pipes {
        inner.pipes.close_input(&id);
        inner.remove_listener(&ServiceAddress::new(
            crate::pipe::PIPE_SERVICE,
            Some(&id.to_string()),
        ));
    }
}

/// The rendezvous service of a group here (`None`: the Net peer
/// group's).
pub(crate) fn rdv_of(
    inner: &Inner,
    ctx: Option<&Arc<GroupCtx>>,
) -> Option<crate::rendezvous::RendezvousHandle> {
    match ctx {
        None => inner.rendezvous.get().cloned(),
        Some(c) => c.rendezvous(),
    }
}

/// A resolver response carrying a revocation list arrived in `ctx`.
pub(crate) fn on_revocations(inner: &Inner, ctx: &GroupCtx, response: &str) {
    use base64::Engine;
    let applied = base64::engine::general_purpose::STANDARD
        .decode(response.trim())
        .map_err(|_| CertError::Malformed("revocation list"))
        .and_then(|b: Vec<u8>| ctx.apply_revocations(&b));
    if let Err(e) = applied {
        inner
            .stats
            .group_cert_refused
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(error = %e, group = %ctx.id, "revocation list refused");
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
