//! Nothing is amplified before authentication: every decoder a peer reaches
//! with unauthenticated bytes allocates at most `16 × n + 1 MiB` bytes of
//! heap for `n` bytes of input (peak, including what the decoded value
//! still holds), measured by a counting global allocator
//! (`fuzz/src/counting_alloc.rs`, shared with the fuzz targets).
//!
//! The hostile inputs are the ones that used to blow up: a binary message
//! whose (count 0, "read to the end") elements each refer to a long
//! namespace, and a compact frame whose elements each refer to a long
//! interned name. Proptest adds random bytes and random variations of both
//! shapes for each decoder.

#[path = "../../../fuzz/src/counting_alloc.rs"]
#[allow(dead_code)]
mod counting_alloc;

use bytes::{BufMut, Bytes, BytesMut};
use counting_alloc::{bound, measure, CountingAlloc};
use juxta_proto::message::cbjx::{self, CbjxVerifier};
use juxta_proto::message::codec::decode_v0;
use juxta_proto::wire::compact::{put_varint, CompactDecoder};
use juxta_proto::wire::connection::{ConnectionConfig, Inbound};
use juxta_proto::wire::frame;
use juxta_proto::wire::http;
use juxta_proto::wire::welcome::Welcome;
use proptest::prelude::*;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Runs `f` (a decoder on `n` input bytes) and fails if it allocated more
/// than the bound; returns the bytes it allocated.
fn bounded<R>(what: &str, n: usize, f: impl FnOnce() -> R) -> usize {
    let (r, used) = measure(f);
    drop(r);
    assert!(
        used <= bound(n),
        "{what}: {used} bytes allocated for {n} input bytes (bound {})",
        bound(n)
    );
    used
}

/// `jxmg` v0 with one custom namespace of `ns_len` bytes, element count
/// field `count`, then `elements` minimal elements (12 bytes each: `jxel`,
/// namespace 2, no flags, empty name, no data).
fn binary_many_elements(ns_len: usize, count: u16, elements: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(11 + ns_len + 12 * elements);
    b.put_slice(b"jxmg\x00");
    b.put_u16(1);
    b.put_u16(ns_len as u16);
    b.put_bytes(b'n', ns_len);
    b.put_u16(count);
    for _ in 0..elements {
        b.put_slice(b"jxel\x02\x00\x00\x00\x00\x00\x00\x00");
    }
    b.freeze()
}

/// The 255 KiB frame body of the report: a 32767-byte namespace, count 0,
/// then 12-byte elements to the end.
fn reported_binary() -> Bytes {
    let n = (255 * 1024 - 11 - 32767) / 12;
    binary_many_elements(32767, 0, n)
}

fn put_cstr(b: &mut BytesMut, len: usize, fill: u8) {
    put_varint(b, len as u64);
    b.put_bytes(fill, len);
}

/// A compact frame defining name 1 as (namespace, name, MIME) of `str_len`
/// bytes each, then a message to a literal channel with `elements` elements
/// that all refer to name 1 (2 bytes each: id 1, length 0).
fn compact_interned(str_len: usize, count: u64, elements: usize) -> BytesMut {
    let mut body = BytesMut::new();
    body.put_u8(0x02);
    put_varint(&mut body, 1);
    put_cstr(&mut body, str_len, b'a');
    put_cstr(&mut body, str_len, b'b');
    put_cstr(&mut body, str_len, b'c');
    body.put_u8(0x03);
    put_varint(&mut body, 0);
    put_cstr(&mut body, 1, b'S');
    body.put_u8(0);
    put_varint(&mut body, count);
    for _ in 0..elements {
        body.put_slice(&[1, 0]);
    }
    let mut frame = BytesMut::new();
    put_varint(&mut frame, body.len() as u64);
    frame.extend_from_slice(&body);
    frame
}

/// The 105 KiB compact frame of the report: 32 KiB strings, then elements
/// to the end of the frame.
fn reported_compact() -> BytesMut {
    let n = (105 * 1024 - 3 * (32 * 1024 + 3) - 16) / 2;
    compact_interned(32 * 1024, n as u64, n)
}

fn decode_binary(input: &Bytes) -> usize {
    bounded("decode_v0", input.len(), || decode_v0(input.clone()))
}

fn decode_compact(input: &BytesMut) -> usize {
    let n = input.len();
    let mut rx = input.clone();
    let mut dec = CompactDecoder::new();
    bounded("CompactDecoder::decode", n, move || {
        let mut frames = 0;
        while let Ok(Some(_)) = dec.decode(&mut rx, 1 << 20) {
            frames += 1;
        }
        frames
    })
}

const PEER: &str =
    "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

/// A welcome line, then one JXTA frame holding `body`.
fn jxta_stream(body: &[u8]) -> BytesMut {
    let mut s = BytesMut::new();
    s.extend_from_slice(
        format!("JXTAHELLO tcp://127.0.0.1:9701 tcp://127.0.0.1:9702 {PEER} 0 1.1\r\n").as_bytes(),
    );
    s.extend_from_slice(&frame::encode_header(body.len() as u64));
    s.extend_from_slice(body);
    s
}

/// A fresh connection's receiving half fed `input`, polled until it needs
/// more or fails (the TCP transport before authentication), with a 1 MiB
/// message limit.
fn decode_inbound(input: &BytesMut) -> usize {
    let n = input.len();
    let mut rx = input.clone();
    let mut inb = Inbound::new(ConnectionConfig {
        max_message: 1 << 20,
        ..ConnectionConfig::default()
    });
    bounded("Inbound::poll", n, move || {
        let mut events = 0;
        while let Ok(Some(_)) = inb.poll(&mut rx) {
            events += 1;
        }
        events
    })
}

/// An HTTP POST of `body` (the HTTP transport before authentication): the
/// head, then the message(s) of the body, CBJX required.
fn decode_http(body: &Bytes) -> usize {
    let mut req = BytesMut::new();
    req.extend_from_slice(
        format!(
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-jxta-msg\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    req.extend_from_slice(body);
    let req = req.freeze();
    bounded("http", req.len(), || {
        let Ok(Some(head)) = http::parse_request(&req, 1 << 20) else {
            return 0;
        };
        let mut body = req.slice(head.head_len..);
        let mut v = CbjxVerifier::new();
        let mut n = 0;
        while let Ok(m) = http::decode_message(&body, &mut v, true, None) {
            n += 1;
            body = body.slice(m.wire_len.min(body.len())..);
            if body.is_empty() {
                break;
            }
        }
        n
    })
}

/// All byte-level decoders on the same input.
fn every_decoder(data: &[u8]) {
    let n = data.len();
    decode_binary(&Bytes::copy_from_slice(data));
    decode_compact(&BytesMut::from(data));
    bounded("Welcome::parse", n, || {
        Welcome::parse(data).map(|w| w.is_some())
    });
    bounded("frame::parse_header", n, || {
        frame::parse_header(data, u64::MAX)
    });
    let b = Bytes::copy_from_slice(data);
    bounded("cbjx::parse_trailer", n, || cbjx::parse_trailer(b.clone()));
    bounded("http::parse_request", n, || {
        http::parse_request(data, 1 << 20)
    });
    bounded("http::parse_response", n, || {
        http::parse_response(data, 1 << 20)
    });
    decode_http(&b);
    decode_inbound(&BytesMut::from(data));
}

#[test]
fn the_allocator_counts() {
    assert!(counting_alloc::active(), "counting allocator not installed");
    let (v, n) = measure(|| vec![0u8; 100_000]);
    assert_eq!(v.len(), 100_000);
    assert!(n >= 100_000, "measured {n}");
    assert_eq!(bound(0), 1 << 20);
}

#[test]
fn reported_binary_frame_is_bounded() {
    let input = reported_binary();
    assert!(input.len() > 250 * 1024);
    let n = input.len();
    println!(
        "decode_v0, reported frame: {} B for {n} B",
        decode_binary(&input)
    );
    println!("http, reported frame: {} B", decode_http(&input));
    println!(
        "Inbound, reported frame: {} B",
        decode_inbound(&jxta_stream(&input))
    );
}

#[test]
fn many_elements_sharing_one_namespace_are_bounded() {
    // Within every cap: 4096 elements that all name a 4 KiB namespace.
    let input = binary_many_elements(4096, 0, 4096);
    let used = decode_binary(&input);
    println!(
        "decode_v0, 4096 x 4 KiB namespace: {used} B for {} B",
        input.len()
    );
    let d = decode_v0(input.clone()).expect("decodes");
    assert_eq!(d.message.elements.len(), 4096);
    assert!(d.message.elements.iter().all(|e| e.namespace.len() == 4096));
    // Shared, not copied: every element's namespace is the same bytes.
    let first = d.message.elements[0].namespace.as_ptr();
    assert!(d
        .message
        .elements
        .iter()
        .all(|e| e.namespace.as_ptr() == first));
    assert!(used < 1 << 20, "{used}");
    // The same with an explicit count, and one element more.
    decode_binary(&binary_many_elements(4096, 4096, 4096));
    decode_binary(&binary_many_elements(4096, 4097, 4097));
    let more = binary_many_elements(4096, 0, 4097);
    decode_binary(&more);
    assert!(decode_v0(more).is_err(), "more than 4096 elements");
    decode_inbound(&jxta_stream(&binary_many_elements(4096, 0, 20_000)));
    decode_http(&binary_many_elements(4096, 0, 20_000));
}

#[test]
fn reported_compact_frame_is_bounded() {
    let input = reported_compact();
    assert!(input.len() > 100 * 1024);
    let n = input.len();
    println!(
        "compact, reported frame: {} B for {n} B",
        decode_compact(&input)
    );
    // Within the caps: 4096 elements sharing one interned 3 × 4 KiB name.
    let input = compact_interned(4096, 4096, 4096);
    let used = decode_compact(&input);
    println!(
        "compact, 4096 x 3 x 4 KiB name: {used} B for {} B",
        input.len()
    );
    assert!(used < 1 << 20, "{used}");
    let mut rx = input.clone();
    let (_, m, _) = CompactDecoder::new()
        .decode(&mut rx, 1 << 20)
        .expect("decodes")
        .expect("complete");
    assert_eq!(m.elements.len(), 4096);
    let first = m.elements[0].name.as_ptr();
    assert!(m.elements.iter().all(|e| e.name.as_ptr() == first));
    // A count past the cap, with the elements there or not.
    decode_compact(&compact_interned(4096, 50_000, 50_000));
    decode_compact(&compact_interned(4096, 1 << 40, 10));
}

#[test]
fn compact_length_alone_reserves_little() {
    // A frame that announces 1 MiB and sends 3 bytes of it.
    let mut rx = BytesMut::new();
    put_varint(&mut rx, 1 << 20);
    rx.put_slice(&[0x03, 0x00]);
    let n = rx.len();
    let mut dec = CompactDecoder::new();
    let used = bounded("CompactDecoder::decode (partial)", n, || {
        dec.decode(&mut rx, 1 << 20).map(|r| r.is_none())
    });
    assert!(
        used < 256 * 1024,
        "{used} bytes reserved for a partial frame"
    );
}

#[test]
fn welcome_of_spaces_is_bounded() {
    let mut line = b"JXTAHELLO ".to_vec();
    line.resize(4094, b' ');
    line.extend_from_slice(b"\r\n");
    let used = bounded("Welcome::parse", line.len(), || Welcome::parse(&line));
    assert!(used < 16 * 1024, "{used}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_to_every_decoder(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        every_decoder(&data);
    }

    #[test]
    fn random_binary_shapes(
        ns_len in 0usize..33_000,
        count in prop_oneof![Just(0u16), any::<u16>()],
        elements in 0usize..6000,
        cut in any::<prop::sample::Index>(),
    ) {
        let full = binary_many_elements(ns_len.min(32767), count, elements);
        let input = full.slice(..cut.index(full.len() + 1));
        decode_binary(&input);
        decode_http(&input);
        decode_inbound(&jxta_stream(&input));
    }

    #[test]
    fn random_compact_shapes(
        str_len in 0usize..40_000,
        count in prop_oneof![0u64..6000, any::<u64>()],
        elements in 0usize..6000,
    ) {
        decode_compact(&compact_interned(str_len, count, elements));
    }
}
