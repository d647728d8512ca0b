//! Checks the advertisement, resolver, pipe-binding and socket set-up
//! parsers (and writers) against bytes captured between real JXSE 2.7
//! peers: `tests/data/jxse-2.7-stock`, `jxse-2.7-cbjx-off` and the
//! extra two-peer pcap.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use juxta_proto::advertisement::{PeerAdvertisement, PipeAdvertisement, PipeType};
use juxta_proto::id::{PeerGroupId, PeerId};
use juxta_proto::message::{decode_v0, Message, MIME_TEXT_UTF8, MIME_XML_UTF8};
use juxta_proto::pipe::binding::{
    answer_query, BindEvent, Binder, PipeResolverMsg, PIPE_RESOLVER_HANDLER,
};
use juxta_proto::resolver::{
    query_queue, response_queue, ResolverQuery, ResolverResponse, RESOLVER_SERVICE,
};
use juxta_proto::socket::setup::{
    classify, setup_kind, CloseSignal, ConnectRequest, ConnectResponse, SetupKind, SetupMessage,
};
use juxta_proto::wire::frame::{parse_header, DEFAULT_MAX_MESSAGE};

const GROUP: &str = "jxta-NetGroup";
const DIRS: [&str; 2] = ["jxse-2.7-stock", "jxse-2.7-cbjx-off"];

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn read(path: PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("vector {} missing: {e}", path.display()))
}

/// Decodes one frame at the start of `buf`: the message and the bytes used.
fn decode_frame(buf: &[u8]) -> (Message, usize) {
    let h = parse_header(buf, DEFAULT_MAX_MESSAGE)
        .expect("frame header")
        .expect("complete frame header");
    let end = h.header_len + h.content_length as usize;
    let body = Bytes::copy_from_slice(&buf[h.header_len..end]);
    (decode_v0(body).expect("binary message v0").message, end)
}

/// All messages of a TCP byte stream that starts with a welcome line.
fn decode_stream(data: &[u8]) -> Vec<Message> {
    let mut pos = data
        .windows(2)
        .position(|w| w == b"\r\n")
        .expect("welcome line")
        + 2;
    let mut out = Vec::new();
    while pos < data.len() {
        let (m, used) = decode_frame(&data[pos..]);
        out.push(m);
        pos += used;
    }
    out
}

fn vector(dir: &str, file: &str) -> Message {
    let data = read(vectors().join(dir).join(file));
    let (m, used) = decode_frame(&data);
    assert_eq!(used, data.len(), "{dir}/{file}: one whole frame");
    m
}

fn streams(dir: &str) -> (Vec<Message>, Vec<Message>) {
    (
        decode_stream(&read(vectors().join(dir).join("stream_c2s.bin"))),
        decode_stream(&read(vectors().join(dir).join("stream_s2c.bin"))),
    )
}

/// The TCP payload streams of an Ethernet/IPv4 pcap, per (src port, dst
/// port), reassembled by sequence number.
fn pcap_streams(data: &[u8]) -> BTreeMap<(u16, u16), Vec<u8>> {
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    assert_eq!(&data[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "little-endian pcap");
    assert_eq!(le32(&data[20..24]), 1, "Ethernet link type");
    let mut segs: BTreeMap<(u16, u16), BTreeMap<u32, Vec<u8>>> = BTreeMap::new();
    let mut pos = 24;
    while pos + 16 <= data.len() {
        let incl = le32(&data[pos + 8..pos + 12]);
        let pkt = &data[pos + 16..pos + 16 + incl];
        pos += 16 + incl;
        let ip = &pkt[14..];
        if ip[0] >> 4 != 4 || ip[9] != 6 {
            continue;
        }
        let ihl = (ip[0] & 15) as usize * 4;
        let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        let tcp = &ip[ihl..total];
        let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
        let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let off = (tcp[12] >> 4) as usize * 4;
        if tcp.len() > off {
            segs.entry((sport, dport))
                .or_default()
                .insert(seq, tcp[off..].to_vec());
        }
    }
    segs.into_iter()
        .map(|(k, v)| (k, v.into_values().flatten().collect()))
        .collect()
}

fn text<'m>(m: &'m Message, ns: &str, name: &str) -> &'m str {
    m.get(ns, name)
        .unwrap_or_else(|| panic!("no {ns}:{name}"))
        .as_str()
        .expect("UTF-8")
}

/// `classify` plus `setup_kind`.
fn kinded(m: &Message) -> Option<(SetupKind, SetupMessage)> {
    let c = classify(m)?;
    Some((setup_kind(m).expect("a classified message has a kind"), c))
}

/// Cuts `from`…`to` (inclusive) out of `s`, if present.
fn cut(s: &str, from: &str, to: &str) -> String {
    match (s.find(from), s.find(to)) {
        (Some(i), Some(j)) => format!("{}{}", &s[..i], &s[j + to.len()..]),
        _ => s.to_string(),
    }
}

/// The peer ID in a `jxta:Cred` element.
fn cred_peer(m: &Message, ns: &str) -> PeerId {
    let c = text(m, ns, "Cred");
    let i = c.find("<PeerID>").unwrap() + 8;
    let j = c.find("</PeerID>").unwrap();
    c[i..j].parse().unwrap()
}

// ---------------------------------------------------------------------------
// JxtaSocket / JxtaBiDiPipe set-up.
// ---------------------------------------------------------------------------

#[test]
fn socket_connect_request_vector_20() {
    for dir in DIRS {
        let m = vector(dir, "20_jxtasocket_connect_request.bin");
        assert_eq!(classify(&m), Some(SetupMessage::Request));
        assert_eq!(setup_kind(&m), Some(SetupKind::Socket));
        let r = ConnectRequest::from_message(&m).unwrap();
        assert_eq!(r.kind, SetupKind::Socket);
        assert!(r.reliable);
        assert_eq!(r.connection_properties, None);
        assert_eq!(r.req_pipe.pipe_type, PipeType::Unicast);
        assert_eq!(
            r.req_pipe.name.as_deref(),
            Some("bench-socket-server.remote")
        );
        assert_eq!(r.rem_peer.name, "sender");
        assert_eq!(r.rem_peer.group_id, PeerGroupId::NET);
        assert_eq!(
            r.rem_peer.desc.as_deref(),
            Some("Created by NetworkManager")
        );
        assert_eq!(r.rem_peer.peer_id, cred_peer(&m, "JXTASOC"));
        // Our pipe advertisement is JXSE's, byte for byte.
        assert_eq!(
            r.req_pipe.to_xml().as_bytes(),
            &m.get("JXTASOC", "reqPipe").unwrap().data[..],
            "{dir}"
        );
        // Our message has JXSE's element names, order and types (minus Cred).
        let ours = r.to_message();
        let jxse: Vec<_> = m
            .elements
            .iter()
            .filter(|e| e.namespace == "JXTASOC" && e.name != "Cred")
            .map(|e| (e.name.clone(), e.mime.clone()))
            .collect();
        let mine: Vec<_> = ours
            .elements
            .iter()
            .map(|e| (e.name.clone(), e.mime.clone()))
            .collect();
        assert_eq!(mine, jxse);
        assert_eq!(ours.get("JXTASOC", "stream"), m.get("JXTASOC", "stream"));
        assert_eq!(ConnectRequest::from_message(&ours).unwrap(), r);
    }
}

#[test]
fn socket_connect_response_vector_21() {
    for dir in DIRS {
        let m = vector(dir, "21_jxtasocket_connect_response.bin");
        assert_eq!(classify(&m), Some(SetupMessage::Response));
        assert_eq!(setup_kind(&m), Some(SetupKind::Socket));
        let r = ConnectResponse::from_message(&m).unwrap();
        assert_eq!(r.kind, SetupKind::Socket);
        assert_eq!((r.reliable, r.encrypt), (Some(true), Some(false)));
        assert_eq!(r.rem_peer.name, "receiver");
        assert_eq!(r.rem_peer.peer_id, cred_peer(&m, "JXTASOC"));
        assert_eq!(
            r.rem_pipe.to_xml().as_bytes(),
            &m.get("JXTASOC", "remPipe").unwrap().data[..]
        );
        let ours = r.to_message();
        let jxse: Vec<_> = m
            .elements
            .iter()
            .filter(|e| e.namespace == "JXTASOC" && e.name != "Cred")
            .map(|e| (e.name.clone(), e.mime.clone(), e.data.len()))
            .filter(|(n, ..)| n != "remPeer")
            .collect();
        let mine: Vec<_> = ours
            .elements
            .iter()
            .map(|e| (e.name.clone(), e.mime.clone(), e.data.len()))
            .filter(|(n, ..)| n != "remPeer")
            .collect();
        assert_eq!(mine, jxse);
        assert_eq!(
            ConnectResponse::socket(r.rem_pipe.clone(), r.rem_peer.clone(), true),
            r
        );
    }
}

#[test]
fn bidi_connect_request_vector_30() {
    for dir in DIRS {
        let m = vector(dir, "30_bidipipe_connect_request.bin");
        assert_eq!(classify(&m), Some(SetupMessage::Request));
        assert_eq!(setup_kind(&m), Some(SetupKind::BiDi));
        let r = ConnectRequest::from_message(&m).unwrap();
        assert_eq!(r.kind, SetupKind::BiDi);
        assert!(!r.reliable);
        assert_eq!(r.connection_properties, None);
        assert_eq!(r.req_pipe.name.as_deref(), Some("bench-bidi-server"));
        assert_eq!(r.rem_peer.peer_id, cred_peer(&m, "JXTABIP"));
        assert_eq!(
            r.req_pipe.to_xml().as_bytes(),
            &m.get("JXTABIP", "reqPipe").unwrap().data[..]
        );
        let ours = r.to_message();
        let names = |m: &Message| {
            m.elements
                .iter()
                .filter(|e| e.namespace == "JXTABIP" && e.name != "Cred")
                .map(|e| (e.name.clone(), e.mime.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&ours), names(&m));
        assert_eq!(
            ours.get("JXTABIP", "reliable"),
            m.get("JXTABIP", "reliable")
        );
        assert_eq!(ours.get("JXTABIP", "direct"), m.get("JXTABIP", "direct"));
    }
}

#[test]
fn stream_setup_and_close_messages() {
    for dir in DIRS {
        let (c2s, s2c) = streams(dir);
        let all: Vec<(&str, &Message)> = c2s
            .iter()
            .map(|m| ("c2s", m))
            .chain(s2c.iter().map(|m| ("s2c", m)))
            .collect();
        let mut seen = Vec::new();
        for (side, m) in &all {
            let has_setup_ns = m
                .elements
                .iter()
                .any(|e| e.namespace == "JXTASOC" || e.namespace == "JXTABIP");
            let c = kinded(m);
            assert_eq!(c.is_some(), has_setup_ns, "{dir} {side}: {m:?}");
            match c {
                Some((_, SetupMessage::Request)) => {
                    let r = ConnectRequest::from_message(m).unwrap();
                    assert_eq!(
                        r.req_pipe.to_xml().as_bytes(),
                        &m.get(r.kind.namespace(), "reqPipe").unwrap().data[..]
                    );
                }
                Some((kind, SetupMessage::Response)) => {
                    let r = ConnectResponse::from_message(m).unwrap();
                    assert_eq!(r.kind, kind);
                    assert_eq!(
                        r.rem_pipe.to_xml().as_bytes(),
                        &m.get(kind.namespace(), "remPipe").unwrap().data[..]
                    );
                    if kind == SetupKind::BiDi {
                        // JxtaServerPipe sends no `reliable` and no `encrypt`.
                        assert_eq!((r.reliable, r.encrypt), (None, None));
                        assert_eq!(r.rem_peer.name, "receiver");
                        let ours = r.to_message();
                        let names = |m: &Message| {
                            m.elements
                                .iter()
                                .filter(|e| e.namespace == "JXTABIP" && e.name != "Cred")
                                .map(|e| (e.name.clone(), e.mime.clone()))
                                .collect::<Vec<_>>()
                        };
                        assert_eq!(names(&ours), names(m));
                    }
                }
                Some((kind, SetupMessage::Close(sig))) => {
                    let e = m.get(kind.namespace(), "close").unwrap();
                    assert_eq!(e.mime(), MIME_TEXT_UTF8);
                    assert_eq!(sig.to_element(kind), *e);
                }
                None => {}
            }
            if let Some(c) = c {
                seen.push((*side, c));
            }
        }
        assert_eq!(
            seen,
            vec![
                ("c2s", (SetupKind::Socket, SetupMessage::Request)),
                (
                    "c2s",
                    (SetupKind::Socket, SetupMessage::Close(CloseSignal::Close))
                ),
                ("c2s", (SetupKind::BiDi, SetupMessage::Request)),
                ("s2c", (SetupKind::Socket, SetupMessage::Response)),
                (
                    "s2c",
                    (
                        SetupKind::Socket,
                        SetupMessage::Close(CloseSignal::CloseAck)
                    )
                ),
                ("s2c", (SetupKind::BiDi, SetupMessage::Response)),
            ],
            "{dir}"
        );
    }
}

// ---------------------------------------------------------------------------
// Resolver and pipe binding.
// ---------------------------------------------------------------------------

/// Checks every resolver query and response of a set of messages and
/// returns the parsed ones.
fn check_resolver(label: &str, msgs: &[Message]) -> (Vec<ResolverQuery>, Vec<ResolverResponse>) {
    let (mut qs, mut rs) = (Vec::new(), Vec::new());
    for m in msgs {
        if let Some(e) = m.get("jxta", &query_queue(GROUP)) {
            assert_eq!(e.mime(), MIME_XML_UTF8);
            let captured = e.as_str().unwrap();
            let q = ResolverQuery::from_message(m, GROUP).unwrap();
            assert_eq!(q.handler, PIPE_RESOLVER_HANDLER);
            assert_eq!(q.hop_count, 0);
            assert_eq!(q.src_peer, cred_peer_in(captured));
            // Re-encode, parse back equal.
            let again = ResolverQuery::parse(&q.to_xml()).unwrap();
            assert_eq!(again, q);
            let el = q.to_element(GROUP);
            assert_eq!(
                (&*el.namespace, &*el.name, el.mime()),
                ("jxta", &*e.name, MIME_XML_UTF8)
            );
            // Our document is JXSE's minus the optional Cred; the
            // SrcPeerRoute is written back byte for byte.
            let stripped = cut(captured, "\t<jxta:Cred", "</jxta:Cred>\n");
            assert_eq!(q.to_xml(), stripped, "{label}");
            // The embedded PBP query, byte for byte (JXSE trims the embedded text).
            let pbp = PipeResolverMsg::parse(&q.query).unwrap();
            assert!(matches!(pbp, PipeResolverMsg::Query { ref peers, .. } if peers.len() == 1));
            assert_eq!(pbp.to_xml().trim_end(), q.query, "{label}");
            qs.push(q);
        }
        if let Some(e) = m.get("jxta", &response_queue(GROUP)) {
            assert_eq!(e.mime(), MIME_XML_UTF8);
            let captured = e.as_str().unwrap();
            let r = ResolverResponse::from_message(m, GROUP).unwrap();
            assert_eq!(r.handler, PIPE_RESOLVER_HANDLER);
            assert_eq!(ResolverResponse::parse(&r.to_xml()).unwrap(), r);
            assert_eq!(
                r.to_xml(),
                cut(captured, "\t<jxta:Cred", "</jxta:Cred>\n"),
                "{label}"
            );
            let pbp = PipeResolverMsg::parse(&r.response).unwrap();
            assert_eq!(pbp.to_xml().trim_end(), r.response, "{label}");
            let PipeResolverMsg::Answer {
                ref peers, found, ..
            } = pbp
            else {
                panic!("{label}: not an answer");
            };
            assert!(found);
            assert_eq!(peers.clone(), vec![cred_peer_in(captured)]);
            // The PeerAdv is JXSE's full PA: PID/GID/Name extracted.
            let pa: PeerAdvertisement = pbp.peer_advertisement().unwrap().unwrap();
            assert_eq!(pa.peer_id, peers[0]);
            assert_eq!(pa.group_id, PeerGroupId::NET);
            assert!(!pa.name.is_empty());
            rs.push(r);
        }
    }
    (qs, rs)
}

fn cred_peer_in(doc: &str) -> PeerId {
    let i = doc.find("<PeerID>").unwrap() + 8;
    let j = doc.find("</PeerID>").unwrap();
    doc[i..j].parse().unwrap()
}

/// Plays the capture's binding exchanges through our responder and binder.
fn check_binding(label: &str, qs: &[ResolverQuery], rs: &[ResolverResponse]) {
    assert!(
        !qs.is_empty() && !rs.is_empty(),
        "{label}: no resolver traffic"
    );
    let mut matched = 0;
    let mut routes = 0;
    for q in qs {
        let pbp = PipeResolverMsg::parse(&q.query).unwrap();
        let Some(r) = rs.iter().find(|r| {
            r.query_id == q.query_id
                && PipeResolverMsg::parse(&r.response).unwrap().pipe_id() == pbp.pipe_id()
        }) else {
            continue;
        };
        matched += 1;
        let jxse_answer = PipeResolverMsg::parse(&r.response).unwrap();
        let host = jxse_answer.peers()[0];
        // Our responder gives JXSE's answer (once JXSE's PA is attached).
        let ours = answer_query(&host, &pbp, false, |id, ty| {
            id == pbp.pipe_id() && ty == pbp.pipe_type()
        })
        .unwrap();
        let PipeResolverMsg::Answer { peer_adv, .. } = &jxse_answer else {
            unreachable!()
        };
        let ours = ours.with_peer_adv(peer_adv.clone().unwrap());
        assert_eq!(ours, jxse_answer, "{label}");
        assert_eq!(q.response(ours.to_xml()).to_xml(), r.to_xml());
        // A peer that does not host it says so, as JXSE would.
        let nak = answer_query(&host, &pbp, false, |_, _| false).unwrap();
        assert!(matches!(nak, PipeResolverMsg::Answer { found: false, .. }));
        // The binder, seeded with the captured query ID, binds on JXSE's answer.
        let t0 = 1_000;
        let mut b = Binder::new(q.query_id, 4);
        let bind = b
            .start(
                t0,
                *pbp.pipe_id(),
                pbp.pipe_type(),
                vec![host],
                Duration::from_secs(15),
            )
            .unwrap();
        let Some(BindEvent::Query(out)) = b.poll_event() else {
            panic!("{label}: no query to send");
        };
        assert_eq!(out.query_id, q.query_id);
        assert_eq!(out.msg, pbp, "{label}: same PBP query as JXSE");
        assert_eq!(
            out.resolver_query(q.src_peer),
            ResolverQuery {
                query: pbp.to_xml(),
                src_route: None,
                ..q.clone()
            }
        );
        // JXSE's query carries its route; it is read, and written back so
        // that it parses to the same route.
        if let Some(r) = &q.src_route {
            assert_eq!(
                r.dest_peer,
                Some(q.src_peer),
                "{label}: route names the issuer"
            );
            assert!(!r.dest.addresses.is_empty(), "{label}: route has addresses");
            assert_eq!(ResolverQuery::parse(&q.to_xml()).unwrap(), *q);
            routes += 1;
        }
        assert!(b.handle_answer(t0 + 5, r.query_id, jxse_answer, host));
        assert_eq!(b.poll_event(), Some(BindEvent::Bound { bind, peer: host }));
    }
    assert!(matched > 0, "{label}: no query/answer pair");
    assert!(routes > 0, "{label}: no JXSE query carried SrcPeerRoute");
}

#[test]
fn resolver_and_binding_in_streams() {
    for dir in DIRS {
        let (c2s, s2c) = streams(dir);
        let (q1, r1) = check_resolver(&format!("{dir} c2s"), &c2s);
        let (q2, r2) = check_resolver(&format!("{dir} s2c"), &s2c);
        // c2s #2/#4 and s2c #2/#3 of INDEX.md, and the repeats.
        assert_eq!(
            (q1.len(), r1.len(), q2.len(), r2.len()),
            (4, 1, 1, 4),
            "{dir}"
        );
        let qs: Vec<_> = q1.into_iter().chain(q2).collect();
        let rs: Vec<_> = r1.into_iter().chain(r2).collect();
        check_binding(dir, &qs, &rs);
    }
}

#[test]
fn extra_pcap_resolution_and_socket() {
    let data = read(vectors().join("jxse-2.7-two-peers-extra.pcap"));
    let flows = pcap_streams(&data);
    assert_eq!(flows.len(), 2);
    let (mut qs, mut rs) = (Vec::new(), Vec::new());
    let mut setups = Vec::new();
    for ((sport, dport), bytes) in &flows {
        let msgs = decode_stream(bytes);
        let (q, r) = check_resolver(&format!("pcap {sport}->{dport}"), &msgs);
        qs.extend(q);
        rs.extend(r);
        for m in &msgs {
            match kinded(m) {
                Some((k, SetupMessage::Request)) => {
                    let r = ConnectRequest::from_message(m).unwrap();
                    assert_eq!(
                        r.req_pipe.to_xml().as_bytes(),
                        &m.get(k.namespace(), "reqPipe").unwrap().data[..]
                    );
                    setups.push((k, SetupMessage::Request));
                }
                Some((k, SetupMessage::Response)) => {
                    let r = ConnectResponse::from_message(m).unwrap();
                    assert_eq!(r.encrypt, Some(false));
                    assert_eq!(
                        r.rem_pipe.to_xml().as_bytes(),
                        &m.get(k.namespace(), "remPipe").unwrap().data[..]
                    );
                    setups.push((k, SetupMessage::Response));
                }
                Some(c) => setups.push(c),
                None => {}
            }
        }
    }
    assert_eq!((qs.len(), rs.len()), (1, 1));
    check_binding("pcap", &qs, &rs);
    setups.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(
        setups,
        vec![
            (SetupKind::Socket, SetupMessage::Close(CloseSignal::Close)),
            (
                SetupKind::Socket,
                SetupMessage::Close(CloseSignal::CloseAck)
            ),
            (SetupKind::Socket, SetupMessage::Request),
            (SetupKind::Socket, SetupMessage::Response),
        ]
    );
}

#[test]
fn resolver_queue_names_match_capture() {
    let (c2s, _) = streams("jxse-2.7-stock");
    // The ERM carries the real destination service/param.
    let erm = c2s
        .iter()
        .find(|m| m.get("jxta", &query_queue(GROUP)).is_some())
        .and_then(|m| m.get("jxta", "EndpointRouterMsg"))
        .and_then(|e| e.as_str())
        .unwrap();
    assert!(
        erm.contains(&format!("{RESOLVER_SERVICE}/{}", query_queue(GROUP))),
        "{erm}"
    );
}

#[test]
fn pipe_adverts_from_capture_round_trip() {
    for dir in DIRS {
        let (c2s, s2c) = streams(dir);
        let mut n = 0;
        for m in c2s.iter().chain(&s2c) {
            for e in &m.elements {
                if (e.namespace == "JXTASOC" || e.namespace == "JXTABIP")
                    && (e.name == "reqPipe" || e.name == "remPipe")
                {
                    let xml = e.as_str().unwrap();
                    let adv = PipeAdvertisement::parse(xml).unwrap();
                    assert_eq!(adv.to_xml(), xml);
                    n += 1;
                }
                if e.name == "remPeer" {
                    let pa = PeerAdvertisement::parse(e.as_str().unwrap()).unwrap();
                    assert_eq!(PeerAdvertisement::parse(&pa.to_xml()).unwrap(), pa);
                }
            }
        }
        assert_eq!(n, 4, "{dir}");
    }
}
