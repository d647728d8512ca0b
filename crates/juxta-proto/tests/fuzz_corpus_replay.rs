//! Stable-Rust replay of the fuzz corpora: every file under
//! `fuzz/seeds/<target>/` and `fuzz/corpus/<target>/` (when present), plus
//! deterministic pseudo-random mutations of the seeds, goes through the
//! same entry points as the libFuzzer targets (`fuzz/src/lib.rs`, included
//! below), which assert the round-trip properties and, with the counting
//! allocator installed below, the memory bound. No nightly needed.
//!
//! `JUXTA_FUZZ_REPLAY_ITERS` sets the mutations per target (default 2000).
//! The seeds that are not copies of the JXSE vectors are written by
//! `cargo test -p juxta-proto --test fuzz_corpus_replay -- --ignored generate_seeds`.

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod targets;

/// The targets' memory bound is checked here as under libFuzzer.
#[global_allocator]
static ALLOC: targets::counting_alloc::CountingAlloc = targets::counting_alloc::CountingAlloc;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files_in(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

/// Runs `f` on `data`; on a panic, saves the input and fails with its path.
fn run(name: &str, f: fn(&[u8]), data: &[u8], what: &str) {
    if catch_unwind(AssertUnwindSafe(|| f(data))).is_err() {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-replay-{name}.bin"));
        std::fs::write(&out, data).unwrap();
        panic!(
            "target {name} panicked on {what}; input saved to {} (reproduce with \
             `cargo +nightly fuzz run {name} {}`)",
            out.display(),
            out.display()
        );
    }
}

/// xorshift64*: deterministic, no clock.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0x8000,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 63,
    u64::MAX,
];

fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = d.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                d[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                d[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                d.insert(i, rng.next() as u8);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                d.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                let piece = d[i..i + n].to_vec();
                let at = rng.below(len + 1);
                d.splice(at..at, piece);
            }
            5 if len > 0 => d.truncate(rng.below(len)),
            6 => {
                // Overwrite an integer field (1, 2, 4 or 8 bytes, big-endian).
                let w = 1 << rng.below(4);
                if len >= w {
                    let i = rng.below(len - w + 1);
                    let v = INTERESTING[rng.below(INTERESTING.len())];
                    d[i..i + w].copy_from_slice(&v.to_be_bytes()[8 - w..]);
                }
            }
            7 if !other.is_empty() => {
                // Splice in part of another seed.
                let i = rng.below(other.len());
                let n = 1 + rng.below((other.len() - i).min(256));
                let at = rng.below(len + 1);
                d.splice(at..at, other[i..i + n].iter().copied());
            }
            8 if len > 0 => {
                // LEB128 varint with the continuation bit set.
                let i = rng.below(len);
                d[i] |= 0x80;
            }
            _ => {}
        }
    }
    d
}

#[test]
fn seeds_and_corpora_replay() {
    assert!(
        targets::counting_alloc::active(),
        "the counting allocator must be installed for the memory bound"
    );
    let mut total = 0;
    for &(name, f) in targets::TARGETS {
        let seeds = files_in(&fuzz_dir().join("seeds").join(name));
        assert!(!seeds.is_empty(), "no seeds for target {name}");
        let corpus = files_in(&fuzz_dir().join("corpus").join(name));
        for (p, data) in seeds.iter().chain(corpus.iter()) {
            run(name, f, data, &p.display().to_string());
            total += 1;
        }
    }
    assert!(total > 0);
}

#[test]
fn seed_mutations_replay() {
    let iters: usize = std::env::var("JUXTA_FUZZ_REPLAY_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    for (t, &(name, f)) in targets::TARGETS.iter().enumerate() {
        let seeds: Vec<Vec<u8>> = files_in(&fuzz_dir().join("seeds").join(name))
            .into_iter()
            .map(|(_, b)| b)
            .collect();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
        for i in 0..iters {
            let seed = &seeds[rng.below(seeds.len())];
            let other = &seeds[rng.below(seeds.len())];
            let input = mutate(&mut rng, seed, other);
            run(name, f, &input, &format!("mutation #{i}"));
        }
    }
}

/// Writes the seeds that are built with the library (compact frames, Juxta
/// streams, a generated trailer and message). Deterministic: fixed RNG
/// seed, fixed certificate time.
#[test]
#[ignore = "writes fuzz/seeds; run by hand"]
fn generate_seeds() {
    use std::sync::Arc;

    use juxta_proto::endpoint::{mangle, ServiceAddress, NET_GROUP_UNIQUE};
    use juxta_proto::identity::Identity;
    use juxta_proto::message::cbjx::trailer_for;
    use juxta_proto::message::codec::{encode_v0, EncodedMessage};
    use juxta_proto::message::namespace_order::JavaHashOrder;
    use juxta_proto::message::{Element, Message};
    use juxta_proto::wire::compact::CompactEncoder;
    use juxta_proto::wire::connection::{ConnectionConfig, Outbound, Role};
    use juxta_proto::wire::welcome::Welcome;
    use rand::SeedableRng;

    let dir = fuzz_dir().join("seeds");
    let write = |target: &str, name: &str, data: &[u8]| {
        std::fs::write(dir.join(target).join(name), data).unwrap();
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(20240601);
    let a = Arc::new(Identity::generate(&mut rng, 1024, "FuzzSeedA", 1_700_000_000).unwrap());
    let b = Arc::new(Identity::generate(&mut rng, 1024, "FuzzSeedB", 1_700_000_000).unwrap());

    let rich = Message::new()
        .with(Element::bytes("bench", "data", &b"a"[..]))
        .with(Element::text("app", "greeting", "hello"))
        .with(Element::typed(
            "zz",
            "blob",
            "application/x-test",
            vec![7u8; 40],
        ))
        .with(Element {
            signature: Some(Box::new(Element::bytes("app", "sig", &b"s"[..]))),
            ..Element::bytes("app", "signed", &b"payload"[..])
        });

    // message: a generated message with custom namespaces, MIME types and a
    // signature element, with and without a CBJX trailer.
    let enc = encode_v0(&rich, JavaHashOrder::Java8).unwrap();
    write("message", "gen_rich", &enc.to_bytes());
    let trailer = trailer_for(&a, &enc.chunks);
    let mut signed = enc.to_bytes().to_vec();
    signed.extend_from_slice(&trailer);
    write("message", "gen_rich_cbjx", &signed);
    write("cbjx_trailer", "gen_trailer_1024", &trailer);

    // compact: three frames in a row (definitions, interned, literal-free
    // second channel), as one receive buffer.
    let mut ce = CompactEncoder::new();
    let mut out = EncodedMessage::default();
    let to = ServiceAddress::new("BenchEP", Some("data"));
    let one = Message::new().with(Element::bytes("bench", "data", &b"a"[..]));
    ce.encode(&to, &one, &mut out);
    ce.encode(&to, &one, &mut out);
    ce.encode(&ServiceAddress::new("S", None), &rich, &mut out);
    write("compact", "gen_three_frames", &out.to_bytes());
    // compact: stream frames (a socket's data) between two messages.
    let mut ce = CompactEncoder::new();
    let mut out = EncodedMessage::default();
    ce.encode(&to, &one, &mut out);
    let mut wire = out.to_bytes().to_vec();
    for (stream, len) in [(7u32, 5usize), (300, 200)] {
        let mut h = [0u8; juxta_proto::wire::compact::STREAM_HEADER_MAX];
        let n = juxta_proto::wire::compact::stream_frame_header(stream, len, &mut h);
        wire.extend_from_slice(&h[..n]);
        wire.extend((0..len).map(|i| i as u8));
    }
    let mut out = EncodedMessage::default();
    ce.encode(&to, &one, &mut out);
    wire.extend_from_slice(&out.to_bytes());
    write("compact", "gen_stream_frames", &wire);
    // compact with interned values: a routed message's fingerprint and
    // header defined, then referred to, then the table's first slot
    // replaced.
    let mut ce = CompactEncoder::with_values();
    let mut out = EncodedMessage::default();
    let routed = |fp: u8| {
        Message::new()
            .with(Element::bytes("juxta", "ERM", vec![fp; 300]))
            .with(Element::bytes(
                "jxta",
                "EndpointRouterMsg-fingerprint",
                vec![fp; 850],
            ))
            .with(Element::bytes("bench", "data", &b"a"[..]))
    };
    ce.encode(&to, &routed(1), &mut out);
    ce.encode(&to, &routed(1), &mut out);
    ce.encode(&to, &routed(2), &mut out);
    write("compact", "gen_values_frames", &out.to_bytes());

    // inbound: what a Juxta initiator sends, from its welcome on.
    let remote_welcome = Welcome::new(
        "tcp://127.0.0.1:9701".into(),
        "tcp://127.0.0.1:9702".into(),
        *b.peer_id(),
    );
    let stream = |cfg: ConnectionConfig, compact_body: bool| -> Vec<u8> {
        let mut out = Outbound::new(cfg, Role::Initiator, a.clone());
        let mut s = out
            .welcome("tcp://127.0.0.1:9702", "tcp://127.0.0.1:9701")
            .to_vec();
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        if let Some(offer) = out
            .on_remote_welcome(remote_welcome.clone(), &mut rng)
            .unwrap()
        {
            s.extend_from_slice(&offer.to_bytes());
        }
        if compact_body {
            let mut ce = CompactEncoder::new();
            let mut e = EncodedMessage::default();
            ce.encode(&to, &one, &mut e);
            ce.encode(&to, &one, &mut e);
            ce.encode(&ServiceAddress::new("S", Some("p")), &rich, &mut e);
            s.extend_from_slice(&e.to_bytes());
        } else {
            let to = mangle(NET_GROUP_UNIQUE, &to);
            for m in [one.clone(), rich.clone()] {
                s.extend_from_slice(&out.encode(&to, m).unwrap().to_bytes());
            }
        }
        s
    };
    let with_mode = |mode: u8, s: Vec<u8>| {
        let mut v = vec![mode];
        v.extend_from_slice(&s);
        v
    };
    let cbjx_offer = stream(ConnectionConfig::default(), false);
    write("inbound", "gen_juxta_cbjx_offer", &with_mode(0, cbjx_offer));
    let plain = stream(
        ConnectionConfig {
            cbjx: false,
            compact: false,
            ..ConnectionConfig::default()
        },
        false,
    );
    write("inbound", "gen_juxta_no_cbjx", &with_mode(1, plain));
    let compact = stream(
        ConnectionConfig {
            compact: false,
            ..ConnectionConfig::default()
        },
        true,
    );
    write(
        "inbound",
        "gen_juxta_compact",
        &with_mode(2, compact.clone()),
    );
    write(
        "inbound",
        "gen_juxta_compact_pieces",
        &with_mode(6, compact),
    );
}

/// Every message in the captured JXSE 2.7 byte streams
/// (`tests/data/jxse-2.7-*/stream_*.bin`): welcome line, then JXTA frames
/// whose bodies are binary messages (with a CBJX trailer in the stock run).
fn jxse_captured_messages() -> Vec<juxta_proto::message::Message> {
    use juxta_proto::message::codec::decode_v0;
    use juxta_proto::wire::frame::parse_header;
    use juxta_proto::wire::welcome::Welcome;

    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut out = Vec::new();
    for run in ["jxse-2.7-stock", "jxse-2.7-cbjx-off"] {
        for dir in ["stream_c2s.bin", "stream_s2c.bin"] {
            let bytes = std::fs::read(data.join(run).join(dir)).unwrap();
            let (_, mut at) = Welcome::parse(&bytes).unwrap().unwrap();
            while at < bytes.len() {
                let Ok(Some(h)) = parse_header(&bytes[at..], u64::MAX) else {
                    break;
                };
                let start = at + h.header_len;
                let end = start + h.content_length as usize;
                let body = bytes::Bytes::copy_from_slice(&bytes[start..end]);
                out.push(decode_v0(body).unwrap().message);
                at = end;
            }
        }
    }
    assert!(
        out.len() > 20,
        "captured streams hold {} messages",
        out.len()
    );
    out
}

/// Writes the seeds of the protocol-document targets (`fuzz/src/proto.rs`):
/// documents and messages built with the library (deterministic: fixed RNG
/// seed and certificate time), and the documents and messages of the
/// captured JXSE 2.7 streams (`jxse_*`), sorted to the targets by their
/// root element or namespace.
#[test]
#[ignore = "writes fuzz/seeds; run by hand"]
fn generate_proto_seeds() {
    use std::collections::BTreeMap;
    use std::io::Write;

    use juxta_proto::advertisement::{
        AccessPointAdvertisement, Advertisement, ModuleClassAdvertisement, ModuleImplAdvertisement,
        ModuleSpecAdvertisement, PeerAdvertisement, PipeAdvertisement, PipeType, RdvAdvertisement,
        RouteAdvertisement, XmlElement,
    };
    use juxta_proto::discovery::peerinfo::{PeerInfoQuery, PeerInfoResponse};
    use juxta_proto::discovery::{DiscoveryEntry, DiscoveryQuery, DiscoveryResponse};
    use juxta_proto::endpoint::address::EndpointAddress;
    use juxta_proto::endpoint::forward::fingerprint_for;
    use juxta_proto::endpoint::route_query::{RouteQuery, RouteResponse};
    use juxta_proto::endpoint::router::{Hop, RouterHeader, ELEM_ERM, ELEM_ERM_FINGERPRINT};
    use juxta_proto::group::{self, passwd_group_advertisement};
    use juxta_proto::id::{PeerGroupId, PipeId};
    use juxta_proto::identity::Identity;
    use juxta_proto::message::{Message, NS_JXTA};
    use juxta_proto::pipe::binding::PipeResolverMsg;
    use juxta_proto::pipe::wire_header::JxtaWireHeader;
    use juxta_proto::relay::{Control, Refusal, RelayRequest, RelayResponse};
    use juxta_proto::rendezvous::messages::{
        set_walk_target, BusyNotice, LeaseMessage, PeerViewKind, PeerViewMessage, PropagateHeader,
        WalkDirection, WalkHeader,
    };
    use juxta_proto::resolver::{ResolverQuery, ResolverResponse};
    use juxta_proto::socket::reliable::{
        ack_element, block_element, keepalive_element, retry_element,
    };
    use juxta_proto::socket::setup::{CloseSignal, ConnectRequest, ConnectResponse, SetupKind};
    use juxta_proto::srdi::{ResolverSrdi, SrdiEntry, SrdiMessage};
    use rand::SeedableRng;
    use targets::proto::{message_to_fuzz, FUZZ_GROUP};

    // target -> file name -> bytes (a map, so a rerun writes the same set).
    let mut seeds: BTreeMap<&str, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    let mut put = |t: &'static str, name: String, data: Vec<u8>| {
        seeds.entry(t).or_default().insert(name, data);
    };

    let mut rng = rand::rngs::StdRng::seed_from_u64(20241124);
    let a = Identity::generate(&mut rng, 1024, "FuzzSeedA", 1_700_000_000).unwrap();
    let b = Identity::generate(&mut rng, 1024, "FuzzSeedB", 1_700_000_000).unwrap();
    let pa_id = *a.peer_id();
    let pb_id = *b.peer_id();
    let net = PeerGroupId::NET;
    let pipe_id = PipeId::random(&mut rng);
    let msid = group::spec(group::ALL_PURPOSE_GROUP_SPEC).unwrap();
    let mcid = group::membership_class();
    let ra = RouteAdvertisement {
        hops: vec![AccessPointAdvertisement::new(
            Some(pb_id),
            ["tcp://127.0.0.1:9702".to_string()],
        )],
        ..RouteAdvertisement::direct(
            pa_id,
            [
                "tcp://127.0.0.1:9701".to_string(),
                "relay://cbid-0001".to_string(),
            ],
        )
    };
    let pa = PeerAdvertisement::new(pa_id, net, "FuzzSeedA")
        .with_desc("a <peer> & co")
        .with_route(ra.clone());
    let pipe = PipeAdvertisement::new(pipe_id, PipeType::Unicast).with_name("chat");
    let mut comp = XmlElement::new("Comp");
    comp.push_text("Efmt", "JRE1.5");
    comp.push_text("Bind", "V2.0 Ref Impl");
    let advs = [
        ("pa", Advertisement::Peer(pa.clone())),
        (
            "pga",
            Advertisement::Group(
                passwd_group_advertisement(net, msid, "fuzzgroup", [("alice", "secret")])
                    .with_desc("a group"),
            ),
        ),
        ("pipe", Advertisement::Pipe(pipe.clone())),
        (
            "pipe_propagate",
            Advertisement::Pipe(PipeAdvertisement::new(pipe_id, PipeType::Propagate)),
        ),
        (
            "mca",
            Advertisement::ModuleClass(
                ModuleClassAdvertisement::new(mcid)
                    .with_name("cls")
                    .with_desc("d"),
            ),
        ),
        (
            "msa",
            Advertisement::ModuleSpec(ModuleSpecAdvertisement::new(msid).with_name("spec")),
        ),
        (
            "mia",
            Advertisement::ModuleImpl(ModuleImplAdvertisement::new(
                msid,
                comp,
                "net.jxta.impl.Fuzz",
            )),
        ),
        ("ra", Advertisement::Route(ra.clone())),
        ("apa", Advertisement::AccessPoint(ra.dest.clone())),
        (
            "rdv",
            Advertisement::Rdv(
                RdvAdvertisement::new(net, pa_id, "svc")
                    .with_name("r")
                    .with_route(ra.clone()),
            ),
        ),
    ];
    for (name, adv) in &advs {
        put("advertisement", format!("gen_{name}"), adv.to_xml().into());
        put(
            "advertisement",
            format!("gen_{name}_jxse_string"),
            adv.to_jxse_string().into(),
        );
    }
    let signed_pa = Advertisement::Peer(PeerAdvertisement::new(pa_id, net, "signed"))
        .to_signed_xml(&a)
        .unwrap();
    put(
        "advertisement",
        "gen_pa_signed".into(),
        signed_pa.clone().into(),
    );
    let signed_ra = Advertisement::Route(RouteAdvertisement::direct(
        pa_id,
        ["tcp://127.0.0.1:9701".to_string()],
    ))
    .to_signed_xml(&a)
    .unwrap();
    put("advertisement", "gen_ra_signed".into(), signed_ra.into());

    // resolver
    let rq = ResolverQuery {
        handler: "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000305".into(),
        query_id: 7,
        hop_count: 1,
        src_peer: pa_id,
        query: DiscoveryQuery::new(juxta_proto::advertisement::AdvKind::Adv, 5)
            .matching("Name", "chat*")
            .to_xml(),
        src_route: Some(ra.clone()),
    };
    put("resolver", "gen_query".into(), rq.to_xml().into());
    let rr = ResolverResponse {
        handler: rq.handler.clone(),
        query_id: 7,
        response: "<x a=\"1\">&amp;</x>".into(),
    };
    put("resolver", "gen_response".into(), rr.to_xml().into());

    // discovery
    let dq = DiscoveryQuery::new(juxta_proto::advertisement::AdvKind::Peer, 3)
        .matching("Name", "Fuzz*")
        .with_peer_adv(&pa);
    put("discovery", "gen_query".into(), dq.to_xml().into());
    let mut dr = DiscoveryResponse::remote_publish(&advs[2].1, 7_200_000);
    dr.responses.push(DiscoveryEntry::new(&advs[0].1, 1000));
    dr.responses
        .push(DiscoveryEntry::document(&signed_pa, u64::MAX / 2));
    put("discovery", "gen_response".into(), dr.to_xml().into());
    let mut req = XmlElement::new("app");
    req.push_text("q", "uptime");
    let piq = PeerInfoQuery {
        source: pa_id,
        target: pb_id,
        request: Some(req.clone()),
    };
    put(
        "discovery",
        "gen_peerinfo_query".into(),
        piq.to_xml().into(),
    );
    let pir = PeerInfoResponse {
        source: pb_id,
        target: pa_id,
        response: Some(req),
        uptime_ms: 12345,
        timestamp_ms: 1_700_000_000_000,
    };
    put(
        "discovery",
        "gen_peerinfo_response".into(),
        pir.to_xml().into(),
    );

    // srdi
    let sm = SrdiMessage {
        peer: pa_id,
        primary_key: "Adv".into(),
        scope: 1,
        entries: vec![
            SrdiEntry {
                key: "Name".into(),
                value: "chat".into(),
                expiration: 7_200_000,
            },
            SrdiEntry {
                key: "Id".into(),
                value: pipe_id.to_string(),
                expiration: -1,
            },
        ],
    };
    put("srdi", "gen_srdi_message".into(), sm.to_xml().into());
    let rs = ResolverSrdi {
        handler: "urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000305".into(),
        payload: sm.to_xml(),
    };
    put("srdi", "gen_resolver_srdi".into(), rs.to_xml().into());
    put(
        "srdi",
        "gen_resolver_srdi_gzip".into(),
        rs.to_element(FUZZ_GROUP).data.to_vec(),
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![b' '; 200_000]).unwrap();
    put("srdi", "gen_gzip_bomb_200k".into(), gz.finish().unwrap());

    // rendezvous
    let pa_xml = bytes::Bytes::from(PeerAdvertisement::new(pa_id, net, "edge").to_xml());
    let rdv_xml = bytes::Bytes::from(
        Advertisement::Rdv(RdvAdvertisement::new(net, pb_id, "svc").with_route(ra.clone()))
            .to_xml(),
    );
    let msg = |m: &Message| message_to_fuzz(m);
    put(
        "rendezvous",
        "gen_lease_request".into(),
        msg(&LeaseMessage::Request {
            peer: pa_id,
            peer_adv: pa_xml.clone(),
        }
        .to_message()),
    );
    put(
        "rendezvous",
        "gen_lease_granted".into(),
        msg(&LeaseMessage::Granted {
            rdv: pb_id,
            rdv_adv: pa_xml.clone(),
            lease_ms: 1_200_000,
            refuse_reason: Some("full".into()),
        }
        .to_message()),
    );
    put(
        "rendezvous",
        "gen_lease_disconnect".into(),
        msg(&LeaseMessage::Disconnect {
            peer: pa_id,
            peer_adv: pa_xml.clone(),
        }
        .to_message()),
    );
    for (name, kind) in [
        ("gen_peerview_probe", PeerViewKind::Probe),
        ("gen_peerview_response", PeerViewKind::Response),
    ] {
        put(
            "rendezvous",
            name.into(),
            msg(&PeerViewMessage {
                kind,
                rdv_peer: pb_id,
                rdv_adv: rdv_xml.clone(),
                cached: true,
                failure: kind == PeerViewKind::Response,
                edge: true,
                src_route: Some(ra.to_xml().into()),
            }
            .to_message()),
        );
    }
    let mut walk = Message::new();
    WalkHeader {
        ttl: 3,
        direction: WalkDirection::Both,
        src_peer: pa_id,
        src_service: "svc".into(),
        src_param: Some("p".into()),
    }
    .write_into(&mut walk);
    set_walk_target(
        &mut walk,
        &juxta_proto::endpoint::ServiceAddress::new("LR-Greeter", Some("x")),
    );
    PropagateHeader {
        msg_id: juxta_proto::rendezvous::messages::uuid_string(0x1234_5678_9abc_def0),
        dest_service: "svc".into(),
        dest_param: None,
        ttl: 5,
        path: vec![pa_id.to_string(), pb_id.to_string()],
    }
    .write_into(&mut walk, FUZZ_GROUP);
    walk.push(
        BusyNotice {
            query_id: 9,
            retry_after_ms: 250,
        }
        .to_element(),
    );
    put("rendezvous", "gen_walk_propagate_busy".into(), msg(&walk));

    // node: a rendezvous leasing an edge, indexing its SRDI and taking a
    // query for it; an edge leased by its seed and sent a propagation.
    {
        use targets::proto::{node_message_op, node_peer};
        let (p1, p2) = (node_peer(1), node_peer(2));
        let p1_xml = bytes::Bytes::from(PeerAdvertisement::new(p1, net, "e1").to_xml());
        let mut rdv = vec![0u8];
        rdv.extend(node_message_op(
            0,
            true,
            3,
            &LeaseMessage::Request {
                peer: p1,
                peer_adv: p1_xml.clone(),
            }
            .to_message(),
        ));
        let srdi = SrdiMessage {
            peer: p1,
            ..sm.clone()
        };
        let rs1 = ResolverSrdi {
            handler: rs.handler.clone(),
            payload: srdi.to_xml(),
        };
        rdv.extend(node_message_op(
            0,
            true,
            2,
            &Message::new().with(rs1.to_element(FUZZ_GROUP)),
        ));
        let q = ResolverQuery {
            src_peer: p2,
            query: DiscoveryQuery::new(juxta_proto::advertisement::AdvKind::Adv, 5)
                .matching("Name", "chat")
                .to_xml(),
            src_route: None,
            ..rq.clone()
        };
        rdv.extend(node_message_op(
            1,
            true,
            0,
            &Message::new().with(q.to_element(FUZZ_GROUP)),
        ));
        rdv.extend([1, 0x10, 0x00]); // 65 s pass
        rdv.push(2); // peer 1's link goes down
        put("node", "gen_rdv_lease_srdi_query".into(), rdv);

        let mut edge = vec![1u8, 3 | 0x10]; // the seed dial reached peer 1
        edge.extend(node_message_op(
            0,
            true,
            3,
            &LeaseMessage::Granted {
                rdv: p1,
                rdv_adv: p1_xml.clone(),
                lease_ms: 1_200_000,
                refuse_reason: None,
            }
            .to_message(),
        ));
        edge.extend(node_message_op(0, true, 4, &walk));
        edge.extend([1, 0xff, 0xff]);
        put("node", "gen_edge_leased".into(), edge);
    }

    // relay
    for (name, c) in [
        (
            "connect",
            Control::Request(RelayRequest::Connect {
                lease_ms: Some(7_200_000),
            }),
        ),
        ("pid", Control::Request(RelayRequest::Pid)),
        (
            "connected",
            Control::Response(RelayResponse::Connected {
                lease_ms: 60_000,
                relay: Some(pb_id),
                relay_adv: Some(pa_xml.iter().map(|&b| b as char).collect()),
            }),
        ),
        (
            "refused",
            Control::Response(RelayResponse::Refused(Refusal::QueueFull)),
        ),
    ] {
        let m = match &c {
            Control::Request(r) => r.to_message(),
            Control::Response(r) => r.to_message(),
        };
        put("relay", format!("gen_{name}"), msg(&m));
    }

    // router
    let erm = RouterHeader {
        forward: vec![Hop {
            pid: Some(pb_id.to_string()),
            addresses: vec!["tcp://127.0.0.1:9702".into()],
        }],
        reverse: vec![Hop {
            pid: Some(pa_id.to_string()),
            addresses: vec![],
        }],
        ..RouterHeader::direct(
            EndpointAddress::peer(&pa_id, None, None),
            EndpointAddress::peer(&pb_id, Some("PipeService"), Some("p")),
        )
    };
    put("router", "gen_erm".into(), erm.to_xml().into());
    let mut cerm = juxta_proto::endpoint::compact_router::CompactRouterHeader::originate(
        &pa_id,
        &pb_id,
        "PipeService",
        Some("p"),
        &[pb_id],
    );
    cerm.reverse.push(pb_id);
    put("router", "gen_compact_erm".into(), cerm.encode().to_vec());
    let mut erq = RouteQuery::new(pb_id);
    erq.src_route = Some(ra.clone());
    erq.bad.push(pa_id);
    put("router", "gen_erq".into(), erq.to_xml().into());
    let err = RouteResponse {
        dest_route: ra.clone(),
        src_route: Some(RouteAdvertisement::direct(
            pb_id,
            ["tcp://1.2.3.4:9701".into()],
        )),
        signed_dest: None,
    };
    put("router", "gen_err".into(), err.to_xml().into());
    put(
        "router",
        "gen_fingerprint".into(),
        fingerprint_for(&a).to_vec(),
    );

    // reliable
    let mut rel = Message::new();
    rel.push(block_element(1, bytes::Bytes::from_static(b"abcd")))
        .push(block_element(3, bytes::Bytes::from_static(b"ef")))
        .push(retry_element());
    put("reliable", "gen_blocks_retry".into(), msg(&rel));
    let mut ack = Message::new();
    ack.push(ack_element(1, &[3, 4, 9]))
        .push(keepalive_element());
    put("reliable", "gen_ack_sacks".into(), msg(&ack));

    // stream (a relayed stream when the first item is an offset)
    {
        use juxta_proto::socket::stream::{
            credit_element, data_element, fin_element, frames_element, offset_element,
            reset_element, stop_element, ResetCode,
        };
        let d = |s: &'static [u8]| data_element(bytes::Bytes::from_static(s));
        let mut plain = Message::new();
        plain
            .push(frames_element(7))
            .push(credit_element(1 << 20))
            .push(d(b"hello "))
            .push(d(b"world"))
            .push(fin_element(11));
        put("stream", "gen_data_fin".into(), msg(&plain));
        let mut relayed = Message::new();
        relayed
            .push(offset_element(0))
            .push(d(b"abc"))
            .push(offset_element(3))
            .push(d(b"de"))
            .push(stop_element());
        put("stream", "gen_relayed".into(), msg(&relayed));
        let mut hostile = Message::new();
        hostile
            .push(credit_element(u64::MAX))
            .push(data_element(bytes::Bytes::from(vec![1u8; 20_000])))
            .push(reset_element(ResetCode::Other(9)));
        put("stream", "gen_over_credit".into(), msg(&hostile));
    }

    // socket setup
    let setup_msgs = [
        (
            "socket_request",
            ConnectRequest::socket(pipe.clone(), pa.clone(), true).to_message(),
        ),
        ("bidi_request", {
            let mut r = ConnectRequest::bidi(pipe.clone(), pa.clone(), false);
            r.connection_properties = Some(bytes::Bytes::from_static(b"props"));
            r.to_message()
        }),
        (
            "socket_response",
            ConnectResponse::socket(pipe.clone(), pa.clone(), true).to_message(),
        ),
        (
            "bidi_response",
            ConnectResponse::bidi(pipe.clone(), pa.clone()).to_message(),
        ),
        (
            "socket_close",
            CloseSignal::Close.to_message(SetupKind::Socket),
        ),
        (
            "bidi_close_ack",
            CloseSignal::CloseAck.to_message(SetupKind::BiDi),
        ),
    ];
    for (name, m) in &setup_msgs {
        put("socket_setup", format!("gen_{name}"), msg(m));
    }

    // pipe binding and wire header
    let bq = PipeResolverMsg::Query {
        pipe_id,
        pipe_type: PipeType::Unicast,
        peers: vec![pb_id],
    };
    put("pipe", "gen_binding_query".into(), bq.to_xml().into());
    let ba = PipeResolverMsg::Answer {
        pipe_id,
        pipe_type: PipeType::UnicastSecure,
        peers: vec![pa_id],
        found: true,
        peer_adv: None,
    }
    .with_peer_adv(pa.to_xml());
    put("pipe", "gen_binding_answer".into(), ba.to_xml().into());
    let mut wh = JxtaWireHeader::new(pipe_id, "msg-1".into(), 3);
    wh.src_peer = Some(pa_id);
    put("pipe", "gen_wire_header".into(), wh.to_xml().into());
    put(
        "pipe",
        "gen_wire_header_message".into(),
        msg(&Message::new().with(wh.to_element())),
    );

    // The captured JXSE messages: each whole message (in the fuzz record
    // format) and each XML element, sorted by what it holds.
    let xml_target = |text: &str| -> Option<&'static str> {
        let root = text
            .split('<')
            .filter(|s| !s.starts_with('?') && !s.starts_with('!'))
            .find(|s| !s.trim().is_empty())?;
        let root = root.split([' ', '>', '/', '\n', '\t']).next()?;
        Some(match root {
            "jxta:ResolverQuery" | "jxta:ResolverResponse" => "resolver",
            "jxta:DiscoveryQuery" | "jxta:DiscoveryResponse" => "discovery",
            "jxta:ResolverSrdi" | "jxta:GenSRDI" => "srdi",
            "jxta:ERM" | "jxta:ERQ" | "jxta:ERR" => "router",
            "jxta:PipeResolver" | "JxtaWire" => "pipe",
            "jxta:RendezVousPropagateMessage" | "jxta:LimitedRangeRdvMessage" => "rendezvous",
            _ => "advertisement",
        })
    };
    let mut seen = std::collections::HashSet::new();
    let mut xml_docs: Vec<String> = Vec::new();
    for (i, m) in jxse_captured_messages().iter().enumerate() {
        let namespaces: Vec<&str> = m.elements.iter().map(|e| &*e.namespace).collect();
        let body = msg(m);
        if !seen.insert(body.clone()) {
            continue;
        }
        let has = |ns: &str| namespaces.contains(&ns);
        if has("JXTASOC") || has("JXTABIP") {
            put("socket_setup", format!("jxse_msg_{i}"), body.clone());
        }
        if has("jxtarel") {
            put("reliable", format!("jxse_msg_{i}"), body.clone());
        }
        if m.get(NS_JXTA, ELEM_ERM).is_some() {
            // The ERM and its fingerprint, as `forward::inspect` sees them.
            let erm = m.get(NS_JXTA, ELEM_ERM).unwrap();
            put("router", format!("jxse_erm_{i}"), erm.data.to_vec());
            if let Some(fp) = m.get(NS_JXTA, ELEM_ERM_FINGERPRINT) {
                put("router", "jxse_fingerprint".into(), fp.data.to_vec());
            }
        }
        for e in &m.elements {
            if let Some(t) = e.as_str().filter(|t| t.trim_start().starts_with('<')) {
                xml_docs.push(t.to_string());
            }
        }
    }
    // Nested documents (a discovery response inside a resolver response,
    // the advertisements inside that) are seeds too.
    let mut i = 0;
    while i < xml_docs.len() {
        let t = xml_docs[i].clone();
        i += 1;
        if let Ok(r) = ResolverResponse::parse(&t) {
            xml_docs.push(r.response);
        }
        if let Ok(q) = ResolverQuery::parse(&t) {
            xml_docs.push(q.query);
        }
        if let Ok(r) = DiscoveryResponse::parse(&t) {
            xml_docs.extend(r.responses.into_iter().map(|e| e.adv));
            xml_docs.extend(r.peer_adv);
        }
        if let Ok(q) = DiscoveryQuery::parse(&t) {
            xml_docs.extend(q.peer_adv);
        }
    }
    let mut seen_docs = std::collections::HashSet::new();
    for (i, t) in xml_docs.iter().enumerate() {
        if !seen_docs.insert(t.clone()) {
            continue;
        }
        if let Some(target) = xml_target(t) {
            put(target, format!("jxse_doc_{i}"), t.clone().into_bytes());
        }
    }

    let dir = fuzz_dir().join("seeds");
    for (t, files) in seeds {
        std::fs::create_dir_all(dir.join(t)).unwrap();
        for (name, data) in files {
            std::fs::write(dir.join(t).join(name), data).unwrap();
        }
    }
}
