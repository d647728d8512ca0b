//! Peer groups: the well-known groups and their spec IDs (digest §1.3),
//! new group IDs, JXTA's password membership (`PasswdMembershipService`)
//! as pure state, and the rule deciding whether traffic scoped to a group
//! may be delivered to a peer.
//!
//! Password membership in JXSE 2.7: the group advertisement carries, in
//! the `Svc` entry of the membership class (`…0505`), a `Parm` holding
//! `<login>user:ENCODED:</login>` entries, where `ENCODED` is
//! [`make_psswd`] of the password (a fixed letter substitution: it is
//! obfuscation, not security). Joining checks the password and yields a
//! `jxta:Cred` of type `jxta:PasswdCred` ([`PasswdCredential`]).
//!
//! # Security: password membership protects nothing
//!
//! It is implemented for compatibility with JXSE only (see
//! `docs/security.md`, "Password membership"):
//!
//! - **The passwords are public.** The group advertisement is a public
//!   document (published, cached by rendezvous peers, answered to any
//!   discovery query) and the "encoded" password in it is a fixed,
//!   keyless letter substitution: anyone holding the advertisement reads
//!   every password back (up to letter case, which is ignored anyway).
//!   There is no hash, no salt and no secret.
//! - **An empty stored password accepts any password.**
//! - **Credentials prove nothing.** A [`PasswdCredential`] is plain XML
//!   whose "signature" is the constant `blah`
//!   ([`PASSWD_CRED_SIGNATURE`]): anyone can write one for any login, and
//!   no other peer can tell a forged one from a real one.
//! - **The check is local.** [`PasswdMembership::check`] runs on the
//!   joining peer itself; [`Memberships::may_deliver`] only decides what
//!   *this* peer accepts. Nothing stops another peer from sending to, or
//!   reading, a group's traffic, which is not encrypted by membership.
//!
//! Use password groups as names, never as access control. To restrict who
//! can talk to whom, authenticate peers by their `cbid` peer IDs (derived
//! from their certificates) and use TLS pipes for confidentiality.

use rand::RngCore;

pub mod cert;
pub mod seal;

use crate::advertisement::group::PeerGroupAdvertisement;
use crate::advertisement::tree::XmlElement;
use crate::advertisement::{parse_xml, req_id, truncate, AdvError};
use crate::id::{
    IdError, IdFormat, IdType, JxtaId, ModuleClassId, ModuleSpecId, PeerGroupId, PeerId, WellKnown,
    NET_GROUP_UUID, WORLD_GROUP_UUID,
};

/// The Net peer group's name (`config.properties`).
pub const NET_PEER_GROUP_NAME: &str = "NetPeerGroup";
/// The Net peer group's description.
pub const NET_PEER_GROUP_DESC: &str = "default Net Peer Group";
/// The World group implementation spec (`refPlatformSpecID`).
pub const WORLD_GROUP_SPEC: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000010106";
/// The Net peer group implementation spec (`refNetPeerGroupSpecID`).
pub const NET_GROUP_SPEC: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000010206";
/// The general-purpose group spec (`allPurposePeerGroupSpecID`), what
/// JXSE subgroups use by default.
pub const ALL_PURPOSE_GROUP_SPEC: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000010306";
/// The password membership service spec (`passwordMembershipSpecID`).
pub const PASSWD_MEMBERSHIP_SPEC: &str = "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000050206";
/// The `type` of a password credential.
pub const PASSWD_CRED_TYPE: &str = "jxta:PasswdCred";
/// The credential root element.
pub const CRED_ROOT: &str = "jxta:Cred";
/// The signature JXSE's `join` puts in every password credential.
pub const PASSWD_CRED_SIGNATURE: &str = "blah";
/// Most `login` entries read from a group advertisement.
pub const MAX_LOGINS: usize = 1024;
/// Most groups a [`Memberships`] value holds.
pub const MAX_MEMBERSHIPS: usize = 256;

/// The membership service class (`…0505`), whose `Svc` parameters hold
/// the logins.
pub fn membership_class() -> ModuleClassId {
    ModuleClassId::reference(0x05)
}

/// Parses a module spec ID URN such as [`ALL_PURPOSE_GROUP_SPEC`].
pub fn spec(urn: &str) -> Result<ModuleSpecId, IdError> {
    urn.parse()
}

/// Errors from membership.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// The group advertisement has no password membership parameters.
    #[error("group advertisement without password membership parameters")]
    NoParams,
    /// A `login` entry has no closing `:` (JXSE fails to start the group).
    #[error("malformed login entry {0:?}")]
    BadLogin(String),
    /// More than [`MAX_LOGINS`] entries.
    #[error("more than {MAX_LOGINS} logins")]
    TooManyLogins,
    /// Unknown identity or wrong password (JXSE does not say which).
    #[error("incorrect password")]
    IncorrectPassword,
    /// Already a member of [`MAX_MEMBERSHIPS`] groups.
    #[error("already a member of {MAX_MEMBERSHIPS} groups")]
    TooManyMemberships,
    /// A credential document is malformed.
    #[error(transparent)]
    Credential(#[from] AdvError),
}

/// A new random group ID with no parent (JXSE's
/// `IDFactory.newPeerGroupID()`): `cbid`, a version-4 UUID with JXSE's
/// multicast bit, parent part zero.
///
/// ```
/// let g = juxta_proto::group::new_group_id(&mut rand::thread_rng());
/// assert!(g.to_string().starts_with("urn:jxta:cbid-"));
/// assert!(g.to_string().ends_with("02"));
/// ```
pub fn new_group_id(rng: &mut dyn RngCore) -> PeerGroupId {
    group_id_with_parent(rng, [0; 16])
}

/// A new random subgroup ID recording its parent's UUID (JXSE's
/// `IDFactory.newPeerGroupID(parent)`).
pub fn new_subgroup_id(parent: &PeerGroupId, rng: &mut dyn RngCore) -> PeerGroupId {
    let parent_uuid = match parent.id() {
        JxtaId::WellKnown(WellKnown::NetGroup) => NET_GROUP_UUID,
        JxtaId::WellKnown(_) => WORLD_GROUP_UUID,
        JxtaId::Bytes { bytes, .. } => {
            let mut u = [0u8; 16];
            u.copy_from_slice(&bytes[..16]);
            u
        }
    };
    group_id_with_parent(rng, parent_uuid)
}

fn group_id_with_parent(rng: &mut dyn RngCore, parent: [u8; 16]) -> PeerGroupId {
    let mut u = [0u8; 16];
    rng.fill_bytes(&mut u);
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u[10] |= 0x80;
    JxtaId::from_parts(IdFormat::Cbid, u, parent, IdType::PeerGroup)
        .try_into()
        .unwrap_or(PeerGroupId::NET)
}

/// JXSE's `PasswdMembershipService.makePsswd`: each letter (either case)
/// becomes `'A' + index` of its upper-case form in
/// `DQKWHRTENOGXCVYSFJPILZABMU`; other characters are kept.
///
/// **Not a hash.** This is a fixed, public, keyless substitution that
/// anyone can invert, and its output is published in the group
/// advertisement: the password is readable by everyone who has the
/// advertisement (see the [module documentation](self#security-password-membership-protects-nothing)).
///
/// ```
/// assert_eq!(juxta_proto::group::make_psswd("abc"), "WXM");
/// assert_eq!(juxta_proto::group::make_psswd("AbC1!"), "WXM1!");
/// ```
pub fn make_psswd(source: &str) -> String {
    const TABLE: &[u8; 26] = b"DQKWHRTENOGXCVYSFJPILZABMU";
    source
        .chars()
        .map(|c| {
            // Java's Character.toUpperCase on a UTF-16 unit; only ASCII
            // letters can be in the table.
            let up = c.to_ascii_uppercase();
            match TABLE.iter().position(|&t| t as char == up) {
                Some(i) => (b'A' + i as u8) as char,
                None => c,
            }
        })
        .collect()
}

/// The `Parm` of the membership `Svc` entry for a list of
/// `(login, password)` pairs: `<login>name:ENCODED:</login>` each.
///
/// The passwords are only obfuscated ([`make_psswd`]): anyone who reads the
/// advertisement can recover them. Never reuse a real password here.
pub fn passwd_params<'a>(logins: impl IntoIterator<Item = (&'a str, &'a str)>) -> XmlElement {
    let mut parm = XmlElement::new("Parm");
    for (user, pw) in logins {
        parm.push_text("login", &format!("{user}:{}:", make_psswd(pw)));
    }
    parm
}

/// A subgroup advertisement using password membership: the given group
/// ID, implementation spec and name, with the logins in the membership
/// service parameters.
///
/// The logins and their (trivially decoded) passwords become part of a
/// public document: this gives JXSE compatibility, not access control (see
/// the [module documentation](self#security-password-membership-protects-nothing)).
///
/// ```
/// use juxta_proto::group::{self, PasswdMembership};
/// let gid = group::new_group_id(&mut rand::thread_rng());
/// let adv = group::passwd_group_advertisement(gid, group::spec(group::ALL_PURPOSE_GROUP_SPEC).unwrap(), "club", [("alice", "secret")]);
/// let m = PasswdMembership::from_group(&adv).unwrap();
/// assert!(m.check("alice", "secret"));
/// assert!(!m.check("alice", "guess"));
/// ```
pub fn passwd_group_advertisement<'a>(
    group_id: PeerGroupId,
    spec_id: ModuleSpecId,
    name: &str,
    logins: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> PeerGroupAdvertisement {
    let mut adv = PeerGroupAdvertisement::new(group_id, spec_id, name);
    adv.set_service_param(membership_class(), passwd_params(logins));
    adv
}

/// A password credential (`jxta:Cred type="jxta:PasswdCred"`), as JXSE's
/// `PasswdCredential.getDocument` writes it.
///
/// It proves nothing: its only "signature" is the constant `blah`, so
/// anyone can make one for any group, peer and login. Never accept a
/// received credential as evidence of membership.
///
/// ```
/// use juxta_proto::group::PasswdCredential;
/// use juxta_proto::id::PeerGroupId;
/// let pid = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03".parse().unwrap();
/// let c = PasswdCredential::new(PeerGroupId::NET, pid, "alice");
/// assert!(c.to_xml().contains("<Identity>alice</Identity><ReallyInsecureSignature>blah</ReallyInsecureSignature>"));
/// assert_eq!(PasswdCredential::parse(&c.to_xml()).unwrap(), c);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PasswdCredential {
    /// The group (`PeerGroupID`).
    pub group_id: PeerGroupId,
    /// The member peer (`PeerID`).
    pub peer_id: PeerId,
    /// The login (`Identity`).
    pub identity: String,
    /// `ReallyInsecureSignature` (JXSE always writes `blah`).
    pub signature: String,
}

impl PasswdCredential {
    /// A credential as JXSE's `join` makes it.
    pub fn new(group_id: PeerGroupId, peer_id: PeerId, identity: &str) -> PasswdCredential {
        PasswdCredential {
            group_id,
            peer_id,
            identity: identity.to_string(),
            signature: PASSWD_CRED_SIGNATURE.to_string(),
        }
    }

    /// The document tree. JXSE adds `xmlns:jxta`, `xml:space`, then
    /// `type`; each is inserted first, so they are written in reverse.
    pub fn to_element(&self) -> XmlElement {
        let mut e = XmlElement::new(CRED_ROOT)
            .with_attr("type", PASSWD_CRED_TYPE)
            .with_attr("xml:space", "preserve")
            .with_attr("xmlns:jxta", "http://jxta.org");
        e.push_text("PeerGroupID", &self.group_id.to_string());
        e.push_text("PeerID", &self.peer_id.to_string());
        e.push_text("Identity", &self.identity);
        e.push_text("ReallyInsecureSignature", &self.signature);
        e
    }

    /// The document as JXSE writes it.
    pub fn to_xml(&self) -> String {
        self.to_element().to_document()
    }

    /// Parses a password credential; the root must be `jxta:Cred` typed
    /// `jxta:PasswdCred` (or a `jxta:PasswdCred` root).
    pub fn parse(xml: &str) -> Result<PasswdCredential, MembershipError> {
        let n = parse_xml(xml).map_err(AdvError::from)?;
        let typed = n.name == CRED_ROOT && n.attr("type") == Some(PASSWD_CRED_TYPE);
        if !typed && n.name != PASSWD_CRED_TYPE {
            return Err(AdvError::UnknownType(truncate(&n.name)).into());
        }
        Ok(PasswdCredential {
            group_id: req_id(&n, "PeerGroupID")?,
            peer_id: req_id(&n, "PeerID")?,
            identity: n
                .child_value("Identity")
                .ok_or(AdvError::Missing("Identity"))?
                .to_string(),
            signature: n
                .child_value("ReallyInsecureSignature")
                .ok_or(AdvError::Missing("ReallyInsecureSignature"))?
                .to_string(),
        })
    }
}

/// The password membership service of one group: its logins, read from
/// the group advertisement.
///
/// Everything it checks comes from a public document and the check runs on
/// the joining peer itself: it keeps honest peers out of groups they were
/// not told the password of, and nothing more (see the
/// [module documentation](self#security-password-membership-protects-nothing)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdMembership {
    group_id: PeerGroupId,
    /// (login, encoded password); an empty encoded password accepts any.
    logins: Vec<(String, String)>,
}

impl PasswdMembership {
    /// Reads the logins from the membership `Svc` parameters, as JXSE's
    /// `init` does: entries are `login:encoded:`; one without `:` is
    /// skipped, one without the closing `:` is an error.
    pub fn from_group(adv: &PeerGroupAdvertisement) -> Result<PasswdMembership, MembershipError> {
        let parm = adv
            .service_param(&membership_class())
            .ok_or(MembershipError::NoParams)?;
        let mut logins: Vec<(String, String)> = Vec::new();
        for e in parm.children.iter().filter(|c| c.name == "login") {
            let entry = e.text.as_str();
            let Some(first) = entry.find(':') else {
                continue;
            };
            let rest = &entry[first + 1..];
            let second = rest
                .find(':')
                .ok_or_else(|| MembershipError::BadLogin(truncate(entry)))?;
            if logins.len() >= MAX_LOGINS {
                return Err(MembershipError::TooManyLogins);
            }
            let login = entry[..first].trim().to_string();
            let pw = rest[..second].to_string();
            // A later entry for the same login replaces the earlier one
            // (JXSE keeps them in a HashMap).
            match logins.iter_mut().find(|(l, _)| *l == login) {
                Some(slot) => slot.1 = pw,
                None => logins.push((login, pw)),
            }
        }
        Ok(PasswdMembership {
            group_id: adv.group_id,
            logins,
        })
    }

    /// The group.
    pub fn group_id(&self) -> PeerGroupId {
        self.group_id
    }

    /// JXSE's `checkPasswd`: the login must exist and the encoded
    /// password match (an empty stored password accepts anything).
    ///
    /// Letter case is ignored and the stored value can be decoded by anyone
    /// holding the advertisement: this is not authentication.
    pub fn check(&self, identity: &str, password: &str) -> bool {
        match self.logins.iter().find(|(l, _)| l == identity) {
            None => false,
            Some((_, stored)) => stored.is_empty() || *stored == make_psswd(password),
        }
    }

    /// Joins: checks the password and makes this peer's credential.
    pub fn join(
        &self,
        identity: &str,
        password: &str,
        peer_id: PeerId,
    ) -> Result<PasswdCredential, MembershipError> {
        if !self.check(identity, password) {
            return Err(MembershipError::IncorrectPassword);
        }
        Ok(PasswdCredential::new(self.group_id, peer_id, identity))
    }
}

/// The groups this peer has joined, with its credential in each. The
/// World and Net groups need no membership.
///
/// A local filter only: [`Memberships::may_deliver`] decides what this peer
/// accepts, not who may send or read a group's traffic.
///
/// ```
/// use juxta_proto::group::{self, Memberships};
/// use juxta_proto::id::PeerGroupId;
/// let me = "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03".parse().unwrap();
/// let gid = group::new_group_id(&mut rand::thread_rng());
/// let adv = group::passwd_group_advertisement(gid, group::spec(group::ALL_PURPOSE_GROUP_SPEC).unwrap(), "club", [("alice", "pw")]);
/// let mut m = Memberships::default();
/// assert!(!m.may_deliver(&gid));
/// assert!(m.join(&adv, "alice", "nope", me).is_err());
/// m.join(&adv, "alice", "pw", me).unwrap();
/// assert!(m.may_deliver(&gid) && m.may_deliver(&PeerGroupId::NET));
/// assert!(m.leave(&gid));
/// assert!(!m.may_deliver(&gid));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memberships {
    joined: Vec<PasswdCredential>,
}

impl Memberships {
    /// Joins a password group (replacing an earlier credential there).
    pub fn join(
        &mut self,
        adv: &PeerGroupAdvertisement,
        identity: &str,
        password: &str,
        peer_id: PeerId,
    ) -> Result<&PasswdCredential, MembershipError> {
        let cred = PasswdMembership::from_group(adv)?.join(identity, password, peer_id)?;
        let idx = match self.joined.iter().position(|c| c.group_id == cred.group_id) {
            Some(i) => {
                self.joined[i] = cred;
                i
            }
            None => {
                if self.joined.len() >= MAX_MEMBERSHIPS {
                    return Err(MembershipError::TooManyMemberships);
                }
                self.joined.push(cred);
                self.joined.len() - 1
            }
        };
        Ok(&self.joined[idx])
    }

    /// Leaves a group (JXSE's `resign`); `false` if not a member.
    pub fn leave(&mut self, group: &PeerGroupId) -> bool {
        let before = self.joined.len();
        self.joined.retain(|c| c.group_id != *group);
        before != self.joined.len()
    }

    /// The credential held in a group, if any.
    pub fn credential(&self, group: &PeerGroupId) -> Option<&PasswdCredential> {
        self.joined.iter().find(|c| c.group_id == *group)
    }

    /// Whether this peer is a member of the group (World and Net: always).
    pub fn is_member(&self, group: &PeerGroupId) -> bool {
        is_public_group(group) || self.credential(group).is_some()
    }

    /// Whether a message or query scoped to `group` may be delivered to
    /// this peer: only if it is a member.
    pub fn may_deliver(&self, group: &PeerGroupId) -> bool {
        self.is_member(group)
    }

    /// The groups joined (without World and Net).
    pub fn groups(&self) -> impl Iterator<Item = PeerGroupId> + '_ {
        self.joined.iter().map(|c| c.group_id)
    }
}

/// The World and Net groups, which every peer is in.
pub fn is_public_group(group: &PeerGroupId) -> bool {
    *group == PeerGroupId::WORLD || *group == PeerGroupId::NET
}

/// Whether traffic scoped to `group` may be delivered to a peer that is a
/// member of `peer_groups` (the World and Net groups are open to all).
pub fn may_deliver(group: &PeerGroupId, peer_groups: &[PeerGroupId]) -> bool {
    is_public_group(group) || peer_groups.contains(group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The inverse of `make_psswd`, which anyone can write: the documented
    /// weakness, checked.
    fn decode_psswd(encoded: &str) -> String {
        const TABLE: &[u8; 26] = b"DQKWHRTENOGXCVYSFJPILZABMU";
        encoded
            .chars()
            .map(|c| match c {
                'A'..='Z' => TABLE[(c as u8 - b'A') as usize] as char,
                _ => c,
            })
            .collect()
    }

    #[test]
    fn passwords_in_a_group_advertisement_are_readable_by_anyone() {
        let gid = new_group_id(&mut rand::rngs::StdRng::seed_from_u64(1));
        let spec = spec(ALL_PURPOSE_GROUP_SPEC).unwrap();
        let adv = passwd_group_advertisement(gid, spec, "club", [("alice", "Tr0ub4dor-3")]);
        // What a stranger sees: the public advertisement's XML.
        let xml = adv.to_xml();
        let start = xml.find("<login>alice:").unwrap() + "<login>alice:".len();
        let encoded = &xml[start..start + xml[start..].find(':').unwrap()];
        let recovered = decode_psswd(encoded);
        assert_eq!(recovered, "TR0UB4DOR-3");
        // …which joins, as letter case is ignored.
        let m = PasswdMembership::from_group(&adv).unwrap();
        assert!(m.check("alice", &recovered));
        // And a credential anyone can write is indistinguishable.
        let pid: PeerId = PID.parse().unwrap();
        let forged = PasswdCredential::parse(&PasswdCredential::new(gid, pid, "alice").to_xml());
        assert_eq!(
            forged.unwrap(),
            m.join("alice", "Tr0ub4dor-3", pid).unwrap()
        );
    }

    const PID: &str =
        "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

    #[test]
    fn well_known_specs_parse() {
        for s in [
            WORLD_GROUP_SPEC,
            NET_GROUP_SPEC,
            ALL_PURPOSE_GROUP_SPEC,
            PASSWD_MEMBERSHIP_SPEC,
        ] {
            assert_eq!(s.parse::<ModuleSpecId>().unwrap().to_string(), s);
            assert_eq!(spec(s).unwrap().to_string(), s);
        }
        assert_eq!(
            membership_class().to_string(),
            "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000505"
        );
    }

    #[test]
    fn group_ids() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let g = new_group_id(&mut rng);
        let s = g.to_string();
        assert!(s.starts_with("urn:jxta:cbid-") && s.ends_with("02"), "{s}");
        assert_eq!(s.parse::<PeerGroupId>().unwrap(), g);
        let sub = new_subgroup_id(&PeerGroupId::NET, &mut rng);
        let JxtaId::Bytes { bytes, .. } = *sub.id() else {
            panic!("not bytes")
        };
        assert_eq!(&bytes[16..32], &NET_GROUP_UUID);
        assert_ne!(new_group_id(&mut rng), g);
    }

    #[test]
    fn psswd_encoding_and_logins() {
        assert_eq!(make_psswd("abcxyz"), "WXMLOV");
        assert_eq!(make_psswd("d"), "A");
        assert_eq!(make_psswd("Q"), "B");
        assert_eq!(make_psswd("é-1"), "é-1");
        let gid = new_group_id(&mut rand::rngs::StdRng::seed_from_u64(4));
        let mut adv = passwd_group_advertisement(
            gid,
            spec(ALL_PURPOSE_GROUP_SPEC).unwrap(),
            "g",
            [("alice", "Secret"), ("bob", "")],
        );
        let m = PasswdMembership::from_group(&adv).unwrap();
        assert!(m.check("alice", "secret"), "case-insensitive like JXSE");
        assert!(!m.check("alice", "secrets"));
        assert!(m.check("bob", "anything"));
        assert!(!m.check("carol", ""));
        let me: PeerId = PID.parse().unwrap();
        let cred = m.join("alice", "Secret", me).unwrap();
        assert_eq!(cred.group_id, gid);
        assert_eq!(
            m.join("alice", "x", me),
            Err(MembershipError::IncorrectPassword)
        );
        let mut bad = XmlElement::new("Parm");
        bad.push_text("login", "eve:nocolon");
        adv.set_service_param(membership_class(), bad);
        assert!(matches!(
            PasswdMembership::from_group(&adv),
            Err(MembershipError::BadLogin(_))
        ));
        adv.services.clear();
        assert_eq!(
            PasswdMembership::from_group(&adv),
            Err(MembershipError::NoParams)
        );
    }

    #[test]
    fn credential_document() {
        let c = PasswdCredential::new(PeerGroupId::NET, PID.parse().unwrap(), "a&b");
        assert_eq!(c.to_xml(), format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:Cred>\n<jxta:Cred type=\"jxta:PasswdCred\" xml:space=\"preserve\" xmlns:jxta=\"http://jxta.org\">\n\t\n<PeerGroupID>urn:jxta:jxta-NetGroup</PeerGroupID><PeerID>{PID}</PeerID><Identity>a&amp;b</Identity><ReallyInsecureSignature>blah</ReallyInsecureSignature></jxta:Cred>\n"));
        assert_eq!(PasswdCredential::parse(&c.to_xml()).unwrap(), c);
        assert!(PasswdCredential::parse("<jxta:Cred type=\"jxta:PSECred\"/>").is_err());
        assert!(matches!(
            PasswdCredential::parse(
                &c.to_xml()
                    .replace("<PeerID>", "<PeerIDx>")
                    .replace("</PeerID>", "</PeerIDx>")
            ),
            Err(MembershipError::Credential(AdvError::Missing("PeerID")))
        ));
    }

    #[test]
    fn delivery_scoping() {
        let g = new_group_id(&mut rand::rngs::StdRng::seed_from_u64(5));
        assert!(may_deliver(&PeerGroupId::NET, &[]));
        assert!(may_deliver(&PeerGroupId::WORLD, &[]));
        assert!(!may_deliver(&g, &[]));
        assert!(may_deliver(&g, &[g]));
        let mut m = Memberships::default();
        assert!(!m.may_deliver(&g));
        assert!(!m.leave(&g));
        let adv =
            passwd_group_advertisement(g, spec(ALL_PURPOSE_GROUP_SPEC).unwrap(), "g", [("u", "p")]);
        m.join(&adv, "u", "p", PID.parse().unwrap()).unwrap();
        assert!(m.may_deliver(&g));
        assert_eq!(m.groups().collect::<Vec<_>>(), vec![g]);
        assert!(m.leave(&g));
        assert!(!m.may_deliver(&g));
    }
}
