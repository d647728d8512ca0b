//! The bodies of the fuzz targets, shared by the libFuzzer binaries in
//! `fuzz_targets/` and by the stable-Rust corpus replay
//! (`crates/juxta-proto/tests/fuzz_corpus_replay.rs`, which includes this
//! file with `#[path]`). Each function must never panic on any input;
//! the `assert!`s are the round-trip properties and the memory property:
//! each decoder call allocates at most [`counting_alloc::bound`]`(n)` bytes
//! (16 per input byte plus 1 MiB) for an input of `n` bytes, checked when
//! the binary installs [`counting_alloc::CountingAlloc`] as its global
//! allocator (the fuzz targets and the stable replay do).
//!
//! This file only depends on `juxta_proto` and `bytes`. The targets for
//! the protocol documents and control messages are in [`proto`].

pub mod counting_alloc;
pub mod proto;

use bytes::{Bytes, BytesMut};
use counting_alloc::{check, check_since, current};
use juxta_proto::endpoint::ServiceAddress;
use juxta_proto::id::JxtaId;
use juxta_proto::message::codec::{decode_v0, encode_v0, EncodedMessage};
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{cbjx, Element, Message};
use juxta_proto::wire::compact::{
    stream_frame_header, CompactDecoder, CompactEncoder, CompactFrame, STREAM_HEADER_MAX,
};
use juxta_proto::wire::connection::{ConnectionConfig, Inbound, InboundEvent};
use juxta_proto::wire::frame;
use juxta_proto::wire::welcome::Welcome;

/// Body limit used by the targets: small, so that the "length larger than
/// allowed" paths are reachable with short inputs.
pub const FUZZ_MAX_MESSAGE: u64 = 1 << 20;

/// `Welcome::parse`; a parsed welcome re-encodes to a line that parses to
/// the same welcome.
pub fn welcome(data: &[u8]) {
    if let Ok(Some((w, used))) = check("Welcome::parse", data.len(), || Welcome::parse(data)) {
        assert!(used <= data.len());
        let line = w.to_line();
        let (again, used2) = Welcome::parse(line.as_bytes())
            .expect("re-encoded welcome parses")
            .expect("re-encoded welcome is complete");
        assert_eq!(again, w);
        assert_eq!(used2, line.len());
    }
}

/// `frame::parse_header` with two limits; a parsed header is within the
/// input and the limit, and its length survives `encode_header`.
pub fn frame_header(data: &[u8]) {
    for max in [FUZZ_MAX_MESSAGE, u64::MAX] {
        let parsed = check("frame::parse_header", data.len(), || {
            frame::parse_header(data, max)
        });
        if let Ok(Some(h)) = parsed {
            assert!(h.header_len <= data.len());
            assert!(h.content_length <= max);
            let enc = frame::encode_header(h.content_length);
            let back = frame::parse_header(&enc, max)
                .expect("encoded header parses")
                .expect("encoded header is complete");
            assert_eq!(back.content_length, h.content_length);
            assert_eq!(back.header_len, enc.len());
        }
    }
}

/// `decode_v0`; a decoded message re-encodes (both namespace orders) and
/// decodes to an equal message, up to one documented normalisation: like
/// JXSE, the encoder writes a signature element with its parent's
/// namespace ID (protocol digest §2.5, item 3), whatever ID it arrived with.
pub fn message(data: &[u8]) {
    let input = Bytes::copy_from_slice(data);
    let Ok(d) = check("decode_v0", data.len(), || decode_v0(input)) else {
        return;
    };
    assert!(d.elements_end <= data.len());
    let mut expected = d.message.clone();
    for e in &mut expected.elements {
        signature_in_parent_namespace(e);
    }
    for order in [JavaHashOrder::Java8, JavaHashOrder::Java6] {
        let enc = encode_v0(&d.message, order).expect("a decoded message re-encodes");
        let back = decode_v0(enc.to_bytes()).expect("a re-encoded message decodes");
        assert_eq!(back.elements_end, enc.len);
        assert_eq!(back.message, expected);
        // The normalised form is a fixed point.
        let again = encode_v0(&back.message, order).expect("re-encodes again");
        assert_eq!(again.to_bytes(), enc.to_bytes());
    }
}

fn signature_in_parent_namespace(e: &mut Element) {
    let ns = e.namespace.clone();
    if let Some(sig) = &mut e.signature {
        sig.namespace = ns;
        signature_in_parent_namespace(sig);
    }
}

/// `CompactDecoder::decode_next` in a loop over one receive buffer, by a
/// decoder without and with interned values; every decoded message
/// re-encodes (fresh tables, the same mode) and decodes to an equal
/// message, every stream frame re-encodes to a frame that decodes equal;
/// `CompactDecoder::decode` refuses stream frames and reads the same
/// messages.
pub fn compact(data: &[u8]) {
    for values in [false, true] {
        let mut rx = BytesMut::from(data);
        let mut plain = BytesMut::from(data);
        // What the decoder keeps between frames (its tables) counts too.
        let base = current();
        let mut dec = compact_decoder(values);
        let mut dec_plain = compact_decoder(values);
        // Until the first stream frame, which `decode` refuses.
        let mut plain_live = true;
        for _ in 0..=data.len() {
            let before = rx.len();
            let r = check_since(base, "CompactDecoder::decode_next", data.len(), || {
                dec.decode_next(&mut rx, FUZZ_MAX_MESSAGE)
            });
            let p = plain_live.then(|| dec_plain.decode(&mut plain, FUZZ_MAX_MESSAGE));
            match r {
                Ok(Some(CompactFrame::Message {
                    to,
                    message,
                    wire_len,
                })) => {
                    assert_eq!(before - rx.len(), wire_len);
                    if let Some(p) = p {
                        let (pt, pm, pl) = p.expect("decode reads what decode_next read").unwrap();
                        assert_eq!((&*pt, &pm, pl), (&*to, &message, wire_len));
                    }
                    check_compact_round_trip(&to, &message, values);
                }
                Ok(Some(CompactFrame::Stream {
                    stream,
                    data: bytes,
                    wire_len,
                })) => {
                    assert_eq!(before - rx.len(), wire_len);
                    if let Some(p) = p {
                        assert!(p.is_err(), "decode refuses a stream frame");
                        plain_live = false;
                    }
                    let mut h = [0u8; STREAM_HEADER_MAX];
                    let n = stream_frame_header(stream, bytes.len(), &mut h);
                    let mut again = BytesMut::from(&h[..n]);
                    again.extend_from_slice(&bytes);
                    match compact_decoder(values).decode_next(&mut again, u64::MAX) {
                        Ok(Some(CompactFrame::Stream {
                            stream: s, data: d, ..
                        })) => {
                            assert_eq!((s, &d), (stream, &bytes));
                        }
                        other => panic!("re-encoded stream frame: {other:?}"),
                    }
                }
                Ok(None) => {
                    assert_eq!(rx.len(), before, "Ok(None) must leave the buffer alone");
                    break;
                }
                Err(_) => break,
            }
        }
    }
}

fn compact_decoder(values: bool) -> CompactDecoder {
    if values {
        CompactDecoder::with_values()
    } else {
        CompactDecoder::new()
    }
}

fn check_compact_round_trip(to: &ServiceAddress, msg: &Message, values: bool) {
    let mut enc = if values {
        CompactEncoder::with_values()
    } else {
        CompactEncoder::new()
    };
    let mut dec = compact_decoder(values);
    // Twice: once with definitions, once with interned ids.
    for _ in 0..2 {
        let mut out = EncodedMessage::default();
        enc.encode(to, msg, &mut out);
        let wire = out.to_bytes();
        let mut rx = BytesMut::from(&wire[..]);
        let (t, m, used) = dec
            .decode(&mut rx, u64::MAX)
            .expect("re-encoded compact frame decodes")
            .expect("re-encoded compact frame is complete");
        assert_eq!(&*t, to);
        assert_eq!(&m, msg);
        assert_eq!(used, wire.len());
        assert!(rx.is_empty());
    }
}

/// `JxtaId` parsing; a parsed ID prints canonically and parses back equal,
/// and its canonical text is a fixed point.
pub fn id(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(id) = check("JxtaId::from_str", data.len(), || s.parse::<JxtaId>()) else {
        return;
    };
    let text = id.to_string();
    let back: JxtaId = text.parse().expect("canonical ID text parses");
    assert_eq!(back, id);
    assert_eq!(back.to_string(), text);
    let uv = id.unique_value();
    assert_eq!(
        JxtaId::from_unique_value(&uv).expect("unique value parses"),
        id
    );
}

/// `cbjx::parse_trailer`; a parsed trailer re-encodes to exactly its input.
pub fn cbjx_trailer(data: &[u8]) {
    let input = Bytes::copy_from_slice(data);
    if let Ok(t) = check("cbjx::parse_trailer", data.len(), || {
        cbjx::parse_trailer(input)
    }) {
        assert_eq!(t.encoded_len(), data.len());
        assert_eq!(&t.encode()[..], data);
    }
}

/// A fresh `Inbound` fed the input, polled until it needs more bytes or
/// fails. The first byte picks the configuration: bit 0 turns CBJX off,
/// bit 1 switches the receive side to compact right after the welcome,
/// bit 2 feeds the rest in 7-byte pieces instead of all at once.
pub fn inbound(data: &[u8]) {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let cfg = ConnectionConfig {
        max_message: FUZZ_MAX_MESSAGE,
        cbjx: mode & 1 == 0,
        ..ConnectionConfig::default()
    };
    let mut rx = BytesMut::with_capacity(data.len());
    // The receive buffer, the connection state and everything a poll
    // returns count against the bound (the events are dropped at once).
    let base = current();
    let mut inb = Inbound::new(cfg);
    let piece = if mode & 4 != 0 { 7 } else { data.len().max(1) };
    for chunk in data.chunks(piece) {
        rx.extend_from_slice(chunk);
        loop {
            let r = check_since(base, "Inbound::poll", data.len(), || inb.poll(&mut rx));
            match r {
                Ok(Some(InboundEvent::Welcome(_))) => {
                    assert!(inb.remote().is_some());
                    if mode & 2 != 0 {
                        inb.switch_to_compact();
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

/// `wire::http`: a request head (and the messages of its body, CBJX
/// required or not by the first byte), then the same bytes as a response
/// head. A parsed request rebuilt with `request_head` parses the same.
pub fn http(data: &[u8]) {
    use juxta_proto::message::cbjx::CbjxVerifier;
    use juxta_proto::wire::http::{decode_message, parse_request, parse_response, request_head};
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let request = check("http::parse_request", data.len(), || {
        parse_request(data, FUZZ_MAX_MESSAGE)
    });
    if let Ok(Some(r)) = request {
        assert!(r.head_len <= data.len());
        assert!(r.content_length <= FUZZ_MAX_MESSAGE);
        let _ = r.requestor();
        let _ = r.poll();
        let target = match &r.query {
            Some(q) => format!("{}?{q}", r.path),
            None => r.path.clone(),
        };
        let head = request_head(r.method, &target, "h", None, r.content_length, &[]);
        let again = parse_request(&head, FUZZ_MAX_MESSAGE)
            .expect("rebuilt head parses")
            .expect("rebuilt head is complete");
        assert_eq!(
            (again.method, &again.path, &again.query),
            (r.method, &r.path, &r.query)
        );
        assert_eq!(again.content_length, r.content_length);
        let mut body = Bytes::copy_from_slice(&data[r.head_len..]);
        let base = current();
        let mut verifier = CbjxVerifier::new();
        while !body.is_empty() {
            let m = check_since(base, "http::decode_message", data.len(), || {
                decode_message(&body, &mut verifier, mode & 1 == 0, None)
            });
            match m {
                Ok(m) => {
                    assert!(m.wire_len > 0 && m.wire_len <= body.len());
                    body = body.slice(m.wire_len..);
                }
                Err(_) => break,
            }
        }
    }
    let response = check("http::parse_response", data.len(), || {
        parse_response(data, FUZZ_MAX_MESSAGE)
    });
    if let Ok(Some(r)) = response {
        assert!(r.head_len <= data.len());
    }
}

/// A target body.
pub type Target = fn(&[u8]);

/// Every target, by name (the `fuzz_targets/` binaries and the seed
/// directories use these names).
pub const TARGETS: &[(&str, Target)] = &[
    ("welcome", welcome),
    ("frame_header", frame_header),
    ("message", message),
    ("compact", compact),
    ("id", id),
    ("cbjx_trailer", cbjx_trailer),
    ("inbound", inbound),
    ("http", http),
    ("advertisement", proto::advertisement),
    ("resolver", proto::resolver),
    ("discovery", proto::discovery),
    ("srdi", proto::srdi),
    ("rendezvous", proto::rendezvous),
    ("relay", proto::relay),
    ("router", proto::router),
    ("reliable", proto::reliable),
    ("socket_setup", proto::socket_setup),
    ("pipe", proto::pipe),
    ("stream", proto::stream),
    ("node", proto::node),
];
