//! The multicast datagram decoder (reached by anyone on the LAN, before any
//! authentication) allocates at most `16 × n + 1 MiB` bytes for an
//! `n`-byte datagram, measured by the counting global allocator shared with
//! the fuzz targets (`fuzz/src/counting_alloc.rs`). The protocol decoders
//! it calls are covered by `crates/juxta-proto/tests/alloc_bound.rs`.

#[path = "../../../fuzz/src/counting_alloc.rs"]
#[allow(dead_code)]
mod counting_alloc;

use bytes::{BufMut, Bytes, BytesMut};
use counting_alloc::{bound, measure, CountingAlloc};
use juxta::proto::id::PeerId;
use juxta::proto::message::cbjx::CbjxVerifier;
use juxta::proto::wire::frame;
use juxta::transport::multicast::{decode_datagram, DATAGRAM_MAGIC, MAX_DATAGRAM};
use proptest::prelude::*;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn local() -> PeerId {
    "urn:jxta:cbid-59616261646162614A7874615032503301AB03"
        .parse()
        .unwrap()
}

/// `JXTA`, a frame header, then a message with one `ns_len`-byte namespace,
/// element count 0 and 12-byte elements referring to it up to the datagram
/// limit.
fn hostile(ns_len: usize) -> Bytes {
    let mut body = BytesMut::new();
    body.put_slice(b"jxmg\x00");
    body.put_u16(1);
    body.put_u16(ns_len as u16);
    body.put_bytes(b'n', ns_len);
    body.put_u16(0);
    let header = frame::encode_header(0);
    while DATAGRAM_MAGIC.len() + header.len() + body.len() + 12 <= MAX_DATAGRAM {
        body.put_slice(b"jxel\x02\x00\x00\x00\x00\x00\x00\x00");
    }
    let mut d = BytesMut::new();
    d.put_slice(DATAGRAM_MAGIC);
    d.put_slice(&frame::encode_header(body.len() as u64));
    d.put_slice(&body);
    d.freeze()
}

fn decode(d: &Bytes, require_cbjx: bool) -> usize {
    let me = local();
    let mut v = CbjxVerifier::new();
    let (r, used) = measure(|| decode_datagram(d.clone(), &me, require_cbjx, &mut v));
    assert!(r.is_err(), "a hostile datagram is refused");
    drop(r);
    assert!(
        used <= bound(d.len()),
        "decode_datagram: {used} bytes for {} input bytes (bound {})",
        d.len(),
        bound(d.len())
    );
    used
}

#[test]
fn many_elements_sharing_a_namespace() {
    assert!(counting_alloc::active(), "counting allocator not installed");
    for ns_len in [0, 1000, 4096, 8000] {
        let d = hostile(ns_len);
        assert!(d.len() <= MAX_DATAGRAM);
        for cbjx in [true, false] {
            let used = decode(&d, cbjx);
            // The element list (at most 16 KiB / 12 elements) stays small.
            assert!(used < 512 * 1024, "ns {ns_len}: {used} bytes");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_datagrams(tail in proptest::collection::vec(any::<u8>(), 0..MAX_DATAGRAM)) {
        let mut d = DATAGRAM_MAGIC.to_vec();
        d.extend_from_slice(&frame::encode_header(tail.len() as u64));
        d.extend_from_slice(&tail);
        let d = Bytes::from(d);
        let me = local();
        let mut v = CbjxVerifier::new();
        let (r, used) = measure(|| decode_datagram(d.clone(), &me, true, &mut v));
        drop(r);
        prop_assert!(used <= bound(d.len()), "{} bytes for {}", used, d.len());
    }
}
