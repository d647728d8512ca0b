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
