//! The cost of one RSA private-key operation with a 2048-bit identity:
//! `cargo run --release -p juxta-proto --example sign_cost -- [COUNT]`.
//!
//! Signs COUNT (default 2,000) distinct SHA-256 digests with
//! [`Identity::sign_sha256_prehash`] (CBJX trailers, handshakes, router
//! fingerprints) and COUNT advertisements with [`signed::sign`] (SHA1withRSA),
//! and prints the mean time per signature in microseconds.

use std::time::Instant;

use juxta_proto::advertisement::{signed, XmlElement};
use juxta_proto::identity::Identity;
use rand::SeedableRng;

fn main() {
    let count: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    let mut rng = rand::rngs::StdRng::seed_from_u64(2048);
    let me = Identity::generate(&mut rng, 2048, "SignCost", 1_700_000_000).expect("key");

    let mut digest = [0u8; 32];
    let start = Instant::now();
    let mut total = 0usize;
    for i in 0..count {
        digest[..4].copy_from_slice(&i.to_be_bytes());
        total += me.sign_sha256_prehash(&digest).len();
    }
    let per = start.elapsed().as_secs_f64() * 1e6 / f64::from(count);
    assert_eq!(total, 256 * count as usize);
    println!("SHA256withRSA prehash, 2048-bit: {count} signatures, {per:.1} us/signature");

    let start = Instant::now();
    for i in 0..count {
        let mut doc = XmlElement::adv_root("jxta:APA");
        doc.push_text("EA", &format!("tcp://127.0.0.1:{i}"));
        let sig = signed::sign(&doc, &me, true, true).expect("sign");
        assert_eq!(sig.signature.len(), 256);
    }
    let per = start.elapsed().as_secs_f64() * 1e6 / f64::from(count);
    println!("SHA1withRSA advertisement, 2048-bit: {count} signatures, {per:.1} us/signature");
}
