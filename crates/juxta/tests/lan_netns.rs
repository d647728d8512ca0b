//! Zero-configuration LAN discovery and auto-rendezvous, on a LAN built
//! from network namespaces (helpers in `netns/`).
//!
//! The LAN: namespace `S` holds a bridge (10.78.0.1/24) with veth ports to
//! `A` (10.78.0.2/24) and `B` (10.78.0.3/24); multicast stays inside them.
//!
//! - `lan_peers_with_no_configuration_find_each_other`: a peer in `A` and
//!   one in `B`, configured with nothing but [`PeerConfig::lan`] (JXSE's
//!   group, the kernel's interface, port 0), must each verify the other.
//!   Then an attacker in `S` replays a captured announcement from its own
//!   address, announces under the peers' IDs (signed by itself, and
//!   unsigned), sends a malformed announcement and a flood; each peer's
//!   view must still be exactly the other peer, with the forged, malformed
//!   and rate-limited datagrams counted.
//! - `lan_edge_promotes_itself_and_demotes_for_a_better_rendezvous`: an
//!   edge with auto-rendezvous alone on the LAN becomes a rendezvous; a
//!   configured rendezvous with a smaller peer ID then appears, and the
//!   edge gives the role up and leases it.
//! - `jxse_and_juxta_find_each_other_on_the_lan`: a JXSE 2.7 rendezvous
//!   (the harness with `--lan`, multicast on) in `A` and a Juxta peer with
//!   no configuration in `B`: Juxta verifies the JXSE peer from its
//!   multicast peer view probes and leases it; JXSE then lists the Juxta
//!   peer among its edges.
//! - `lan_discovery_latency` (ignored, a measurement): the time two peers
//!   with no configuration take to find each other, over many trials.
//!
//! Without root (no `ip netns`), the tests print `skipped: …` (and fail
//! with env `CI=true`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use juxta::lan::{Announcement, LanConfig};
use juxta::rendezvous::RendezvousConfig;
use juxta::transport::multicast::encode_datagram;
use juxta::{Peer, PeerConfig};
use juxta_proto::endpoint::mangle;
use juxta_proto::id::{PeerGroupId, PeerId};
use juxta_proto::identity::Identity;
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{Element, Message};
use juxta_proto::rendezvous::messages::peerview_address;

mod netns;
mod prereq;

use netns::{expect_line, fields, wait_stdin_eof, Lab};

const ENV_ROLE: &str = "JUXTA_LAN_ROLE";
const ENV_NAME: &str = "JUXTA_LAN_NAME";
/// Peer IDs the attacker forges, comma-separated.
const ENV_VICTIMS: &str = "JUXTA_LAN_VICTIMS";
/// The rendezvous child's ID must sort below this one.
const ENV_BELOW: &str = "JUXTA_LAN_BELOW";
/// `rate,burst` of the peers' announcement limiter.
const ENV_RATE: &str = "JUXTA_LAN_RATE";
const TAG: &str = "LAN ";
const GROUP: &str = "224.0.1.85:1234";
const HUB_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
/// Copies of a forged announcement in the flood.
const FLOOD: usize = 600;

// ---------------------------------------------------------------- parent

/// Builds the three namespaces and the bridge; `None` (after a visible
/// skip, or a failure in CI) when namespaces are unavailable.
fn lan(tag: &str) -> Option<(Lab, [String; 3])> {
    let id = std::process::id();
    let names = [
        format!("jxl{tag}{id}s"),
        format!("jxl{tag}{id}a"),
        format!("jxl{tag}{id}b"),
    ];
    let mut lab = Lab::new(ENV_NAME, TAG);
    if let Err(e) = lab.add_ns(&names[0]) {
        prereq::require(
            &format!("network namespaces (root and `ip` from iproute2): {e}"),
            false,
        );
        return None;
    }
    lab.add_ns(&names[1]).expect("second namespace");
    lab.add_ns(&names[2]).expect("third namespace");
    lab.bridge(
        &names[0],
        "10.78.0.1/24",
        &[
            ("va", &names[1], "10.78.0.2/24"),
            ("vb", &names[2], "10.78.0.3/24"),
        ],
    );
    Some((lab, names))
}

fn peer_env(name: &str, rate: Option<&str>) -> Vec<(&'static str, String)> {
    let mut v = vec![(ENV_ROLE, "peer".to_string()), (ENV_NAME, name.to_string())];
    if let Some(r) = rate {
        v.push((ENV_RATE, r.to_string()));
    }
    v
}

#[test]
fn lan_peers_with_no_configuration_find_each_other() {
    if std::env::var_os(ENV_ROLE).is_some() {
        return;
    }
    let Some((mut lab, [ns_s, ns_a, ns_b])) = lan("f") else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    let mut pending = Vec::new();
    // A low rate limit (10 a second and burst 10 per source), so the
    // flood surely exceeds it while the few bad datagrams before it fit.
    lab.spawn(&ns_a, "child_peer", &peer_env("a", Some("40,40")), &tx);
    lab.spawn(&ns_b, "child_peer", &peer_env("b", Some("40,40")), &tx);
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready_a = expect_line(&rx, &mut pending, "a", "READY", deadline);
    let ready_b = expect_line(&rx, &mut pending, "b", "READY", deadline);
    let id_a = fields(&ready_a)["id"].to_string();
    let id_b = fields(&ready_b)["id"].to_string();
    let found_a = expect_line(&rx, &mut pending, "a", "FOUND", deadline);
    let found_b = expect_line(&rx, &mut pending, "b", "FOUND", deadline);
    assert_eq!(fields(&found_a)["peer"], id_b, "{found_a}");
    assert_eq!(fields(&found_b)["peer"], id_a, "{found_b}");
    assert_eq!(fields(&found_a)["addr"], "10.78.0.3", "{found_a}");
    assert_eq!(fields(&found_b)["addr"], "10.78.0.2", "{found_b}");

    // The attacker, on the bridge.
    lab.spawn(
        &ns_s,
        "child_attacker",
        &[
            (ENV_ROLE, "attacker".into()),
            (ENV_NAME, "x".into()),
            (ENV_VICTIMS, format!("{id_a},{id_b}")),
        ],
        &tx,
    );
    let done = expect_line(&rx, &mut pending, "x", "DONE", deadline);
    assert_eq!(fields(&done)["replayed"], "1", "{done}");
    lab.close_stdin("a");
    lab.close_stdin("b");
    for (me, other) in [("a", &id_b), ("b", &id_a)] {
        let r = expect_line(&rx, &mut pending, me, "REPORT", deadline);
        let f = fields(&r);
        // The view is unchanged: exactly the other peer.
        assert_eq!(f["view"], other.as_str(), "{me}: {r}");
        let n = |k: &str| f[k].parse::<u64>().unwrap();
        assert!(n("forged") >= 1, "{me}: forged not counted: {r}");
        assert!(n("malformed") >= 2, "{me}: malformed not counted: {r}");
        assert!(n("rate_limited") >= 1, "{me}: flood not limited: {r}");
        // The replay from the attacker's address named a peer the
        // attacker cannot be: dialled there, refused.
        assert!(
            n("unreachable") + n("forged") + n("busy") >= 2,
            "{me}: replay not refused: {r}"
        );
    }
    lab.wait_all(Instant::now() + Duration::from_secs(10));
}

#[test]
fn lan_edge_promotes_itself_and_demotes_for_a_better_rendezvous() {
    if std::env::var_os(ENV_ROLE).is_some() {
        return;
    }
    let Some((mut lab, [_ns_s, ns_a, ns_b])) = lan("p") else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    let mut pending = Vec::new();
    lab.spawn(
        &ns_a,
        "child_auto_edge",
        &[(ENV_ROLE, "auto".into()), (ENV_NAME, "e".into())],
        &tx,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = expect_line(&rx, &mut pending, "e", "READY", deadline);
    let id_e = fields(&ready)["id"].to_string();
    // Alone on the LAN, with no rendezvous: it promotes itself.
    expect_line(&rx, &mut pending, "e", "PROMOTED", deadline);
    // A configured rendezvous whose ID sorts first appears.
    lab.spawn(
        &ns_b,
        "child_lan_rdv",
        &[
            (ENV_ROLE, "rdv".into()),
            (ENV_NAME, "r".into()),
            (ENV_BELOW, id_e.clone()),
        ],
        &tx,
    );
    let ready = expect_line(&rx, &mut pending, "r", "READY", deadline);
    let id_r = fields(&ready)["id"].to_string();
    assert!(id_r < id_e, "the rendezvous must sort first");
    expect_line(&rx, &mut pending, "e", "DEMOTED", deadline);
    let leased = expect_line(&rx, &mut pending, "e", "LEASED", deadline);
    let f = fields(&leased);
    assert_eq!(f["to"], id_r, "{leased}");
    assert_eq!(f["promotions"], "1", "{leased}");
    assert_eq!(f["demotions"], "1", "{leased}");
    // Its one client is the edge (which says it leased it, above).
    let client = expect_line(&rx, &mut pending, "r", "CLIENT", deadline);
    assert_eq!(fields(&client)["clients"], "1", "{client}");
    // The configured rendezvous stays one.
    assert_eq!(fields(&client)["rendezvous"], "true", "{client}");
    lab.wait_all(Instant::now() + Duration::from_secs(10));
}

#[test]
fn jxse_and_juxta_find_each_other_on_the_lan() {
    if std::env::var_os(ENV_ROLE).is_some() {
        return;
    }
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    let Some((mut lab, [_ns_s, ns_a, ns_b])) = lan("j") else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    let mut pending = Vec::new();
    // Juxta first: JXSE's first multicast probes go out while it starts.
    lab.spawn(&ns_b, "child_peer", &peer_env("juxta", None), &tx);
    let deadline = Instant::now() + Duration::from_secs(90);
    let ready = expect_line(&rx, &mut pending, "juxta", "READY", deadline);
    let id_juxta = fields(&ready)["id"].to_string();

    let run = concat!(env!("CARGO_MANIFEST_DIR"), "/../../interop/jxse/run.sh");
    let home = tempfile::tempdir().unwrap();
    let mut jxse = std::process::Command::new("ip")
        .args(["netns", "exec", &ns_a, "bash", run])
        .args(["--port", "9701", "--name", "jxse-lan", "--rendezvous"])
        .args(["--lan", "10.78.0.2", "--home"])
        .arg(home.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("starting the JXSE harness");
    let mut jin = jxse.stdin.take().unwrap();
    let jout = jxse.stdout.take().unwrap();
    lab.children.push(("jxse".into(), jxse));
    let jtx = tx.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(jout).lines().map_while(Result::ok) {
            eprintln!("[jxse] {l}");
            let _ = jtx.send(("jxse".to_string(), l));
        }
    });
    let ready = expect_line(&rx, &mut pending, "jxse", "READY", deadline);
    let id_jxse = ready.split_whitespace().nth(1).unwrap().to_string();

    // Juxta heard JXSE's probe, dialled it and proved its ID.
    let found = expect_line(&rx, &mut pending, "juxta", "FOUND", deadline);
    assert_eq!(fields(&found)["peer"], id_jxse, "{found}");
    assert_eq!(fields(&found)["addr"], "10.78.0.2", "{found}");
    // JXSE knows the Juxta peer: it leased (as an edge of the JXSE
    // rendezvous found on the LAN).
    use std::io::Write;
    let mut edges = String::new();
    while Instant::now() < deadline {
        writeln!(jin, "RDV_STATUS").unwrap();
        jin.flush().unwrap();
        let l = expect_line(&rx, &mut pending, "jxse", "RDV ", deadline);
        edges = l.split_whitespace().nth(3).unwrap_or("-").to_string();
        if edges.contains(&id_juxta) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        edges.split(',').any(|e| e == id_juxta),
        "JXSE never listed the Juxta edge (edges {edges})"
    );
    let _ = writeln!(jin, "QUIT");
    drop(jin);
    lab.close_stdin("juxta");
    let r = expect_line(&rx, &mut pending, "juxta", "REPORT", deadline);
    assert_eq!(fields(&r)["view"], id_jxse, "{r}");
    lab.wait_all(Instant::now() + Duration::from_secs(30));
}

/// The measurement of docs/benchmarks.md: `JUXTA_LAN_TRIALS` (default 30)
/// pairs of peers with no configuration; for each, the time from the later
/// peer's start until both have verified each other.
#[test]
#[ignore = "a measurement: cargo test --release -p juxta --test lan_netns -- --ignored --nocapture lan_discovery_latency"]
fn lan_discovery_latency() {
    if std::env::var_os(ENV_ROLE).is_some() {
        return;
    }
    let trials: usize = std::env::var("JUXTA_LAN_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let Some((mut lab, [_ns_s, ns_a, ns_b])) = lan("m") else {
        return;
    };
    let mut ms = Vec::new();
    for t in 0..trials {
        let (tx, rx) = mpsc::channel();
        let mut pending = Vec::new();
        let (a, b) = (format!("a{t}"), format!("b{t}"));
        lab.spawn(&ns_a, "child_peer", &peer_env(&a, None), &tx);
        lab.spawn(&ns_b, "child_peer", &peer_env(&b, None), &tx);
        let deadline = Instant::now() + Duration::from_secs(30);
        let fa = expect_line(&rx, &mut pending, &a, "FOUND", deadline);
        let fb = expect_line(&rx, &mut pending, &b, "FOUND", deadline);
        let num = |l: &str, k: &str| fields(l)[k].parse::<u64>().unwrap();
        let start = num(&fa, "started").max(num(&fb, "started"));
        let found = num(&fa, "at").max(num(&fb, "at"));
        let d = found.saturating_sub(start);
        eprintln!("trial {t}: {d} ms");
        ms.push(d);
        lab.wait_all(Instant::now() + Duration::from_secs(20));
    }
    ms.sort_unstable();
    let pct = |p: usize| ms[((ms.len() - 1) * p) / 100];
    println!(
        "LAN discovery over {} trials: min {} ms, median {} ms, p90 {} ms, max {} ms",
        ms.len(),
        ms[0],
        pct(50),
        pct(90),
        ms[ms.len() - 1]
    );
    assert_eq!(ms.len(), trials);
}

// ---------------------------------------------------------------- children

fn init_log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// A new 1024-bit identity whose peer ID satisfies `ok`.
fn new_identity(ok: impl Fn(&PeerId) -> bool) -> Identity {
    loop {
        let id = Identity::generate(&mut rand::thread_rng(), 1024, "lan", 1_700_000_000).unwrap();
        if ok(id.peer_id()) {
            return id;
        }
    }
}

/// Writes `id` where a peer with home `dir` loads it.
fn write_identity(dir: &std::path::Path, id: &Identity) {
    std::fs::create_dir_all(dir).unwrap();
    let (key, crt) = id.to_pem().unwrap();
    std::fs::write(dir.join("identity.key"), key).unwrap();
    std::fs::write(dir.join("identity.crt"), crt).unwrap();
}

async fn wait_eof() {
    tokio::task::spawn_blocking(|| wait_stdin_eof(Duration::from_secs(60)))
        .await
        .unwrap();
}

/// A peer configured with nothing but LAN discovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the tests above inside a namespace"]
async fn child_peer() {
    if std::env::var(ENV_ROLE).as_deref() != Ok("peer") {
        return;
    }
    init_log();
    let home = tempfile::tempdir().unwrap();
    let mut lc = LanConfig::default();
    if let Ok(r) = std::env::var(ENV_RATE) {
        let (rate, burst) = r.split_once(',').unwrap();
        lc = lc.rate(rate.parse().unwrap(), burst.parse().unwrap());
    }
    // The identity is made first, so that `started` (taken before
    // `Peer::start`) counts the peer's start-up and discovery, not the
    // RSA key generation.
    let dir = home.path().join("peer");
    write_identity(&dir, &new_identity(|_| true));
    let cfg = PeerConfig::new(&dir).lan(lc);
    let started = unix_ms();
    let peer = Peer::start(cfg).await.expect("peer start");
    println!("{TAG}READY id={} started={started}", peer.peer_id());
    let lan = peer.lan().expect("LAN discovery on");
    let found = lan
        .wait_for(|v| !v.is_empty(), Duration::from_secs(25))
        .await
        .expect("no peer found on the LAN");
    println!(
        "{TAG}FOUND peer={} addr={} at={} started={started}",
        found[0].peer,
        found[0].addr.ip(),
        unix_ms()
    );
    wait_eof().await;
    let st = lan.status();
    let view: Vec<String> = st.view.iter().map(|p| p.peer.to_string()).collect();
    let s = st.stats;
    println!(
        "{TAG}REPORT view={} forged={} malformed={} rate_limited={} unreachable={} busy={} address_mismatch={} received={}",
        view.join(","),
        s.forged,
        s.malformed,
        s.rate_limited,
        s.unreachable,
        s.busy,
        s.address_mismatch,
        s.received
    );
}

/// The attacker: replays, forges, floods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the tests above inside a namespace"]
async fn child_attacker() {
    if std::env::var(ENV_ROLE).as_deref() != Ok("attacker") {
        return;
    }
    init_log();
    let group: SocketAddrV4 = GROUP.parse().unwrap();
    let victims: Vec<PeerId> = env(ENV_VICTIMS)
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    // Capture one announcement of a victim (they announce periodically).
    let sock = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .unwrap();
    sock.set_reuse_address(true).unwrap();
    sock.bind(&SocketAddrV4::new(*group.ip(), group.port()).into())
        .unwrap();
    sock.join_multicast_v4(group.ip(), &HUB_IP).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let sock: std::net::UdpSocket = sock.into();
    let mut buf = vec![0u8; 20_000];
    let (n, from) = sock.recv_from(&mut buf).expect("no announcement heard");
    let captured = buf[..n].to_vec();
    eprintln!("captured {n} bytes from {from}");

    let me = Identity::generate(&mut rand::thread_rng(), 1024, "attacker", 1_700_000_000).unwrap();
    let to = mangle("jxta-NetGroup", &peerview_address(&PeerGroupId::NET));
    let here = "10.78.0.1:9701".parse().unwrap();
    let enc = |m: Message, signed: bool| {
        encode_datagram(&me, group, &to, m, signed, JavaHashOrder::Java8).unwrap()
    };
    let mut bad = Vec::new();
    for v in &victims {
        // Signed by the attacker, naming a victim: forged.
        bad.push(enc(
            Announcement::new(*v, true, vec![here]).to_message("x"),
            true,
        ));
        // Unsigned (CBJX is on), naming a victim: refused.
        bad.push(enc(
            Announcement::new(*v, true, vec![here]).to_message("x"),
            false,
        ));
    }
    // Signed, but not an advertisement.
    bad.push(enc(
        Message::new().with(Element::text("jxta", "PeerView.PeerAdv", "<junk/>")),
        true,
    ));
    let raw = std::net::UdpSocket::bind((HUB_IP, 0)).unwrap();
    for d in &bad {
        raw.send_to(d, group).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The captured announcement, replayed from here: its unspecified
    // address stands for this IP, where the victim is not.
    raw.send_to(&captured, group).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A flood of forged announcements.
    for _ in 0..FLOOD {
        raw.send_to(&bad[0], group).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("{TAG}DONE replayed=1 flood={FLOOD}");
}

/// An edge with auto-rendezvous and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the tests above inside a namespace"]
async fn child_auto_edge() {
    if std::env::var(ENV_ROLE).as_deref() != Ok("auto") {
        return;
    }
    init_log();
    let home = tempfile::tempdir().unwrap();
    let lc = LanConfig::default()
        .announce_interval_ms(500)
        .auto_rendezvous(1_000);
    let mut cfg = PeerConfig::new(home.path().join("peer")).lan(lc);
    cfg.key_bits = 1024;
    let peer = Peer::start(cfg).await.expect("peer start");
    println!("{TAG}READY id={}", peer.peer_id());
    let lan = peer.lan().unwrap();
    assert!(lan.wait_role(true, Duration::from_secs(20)).await);
    let rdv = peer.rendezvous().unwrap();
    for _ in 0..400 {
        if rdv.status().is_rendezvous {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        rdv.status().is_rendezvous,
        "the rendezvous service did not switch"
    );
    println!("{TAG}PROMOTED");
    assert!(lan.wait_role(false, Duration::from_secs(30)).await);
    println!("{TAG}DEMOTED");
    let mut leased = None;
    for _ in 0..600 {
        leased = rdv.status().leased_to;
        if leased.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = lan.stats();
    println!(
        "{TAG}LEASED to={} promotions={} demotions={}",
        leased.expect("no lease after demotion"),
        s.promotions,
        s.demotions
    );
    wait_eof().await;
}

/// A configured rendezvous with LAN discovery, whose ID sorts before
/// `ENV_BELOW`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the tests above inside a namespace"]
async fn child_lan_rdv() {
    if std::env::var(ENV_ROLE).as_deref() != Ok("rdv") {
        return;
    }
    init_log();
    let below = env(ENV_BELOW);
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("peer");
    let id = new_identity(|p| p.to_string() < below);
    write_identity(&dir, &id);
    let cfg = PeerConfig::new(&dir)
        .lan(LanConfig::default().announce_interval_ms(500))
        .rendezvous(RendezvousConfig::rendezvous());
    let peer = Peer::start(cfg).await.expect("peer start");
    println!("{TAG}READY id={}", peer.peer_id());
    assert_eq!(peer.peer_id(), *id.peer_id());
    // The edge may lease before this line runs (its LAN exchange with us
    // starts inside `Peer::start`): watch the state, not the events.
    let rdv = peer.rendezvous().unwrap();
    let mut clients = 0;
    for _ in 0..800 {
        clients = rdv.status().clients;
        if clients > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{TAG}CLIENT clients={clients} rendezvous={}",
        rdv.status().is_rendezvous
    );
    wait_eof().await;
}
