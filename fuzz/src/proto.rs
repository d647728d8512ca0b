//! Targets for the protocol documents and control messages above the wire:
//! advertisements, resolver, discovery, SRDI, rendezvous, relay, endpoint
//! router (ERM/ERQ/ERR), the reliable stream and the socket/bidi-pipe
//! setup, pipe binding. Part of the target library (see `lib.rs`).
//!
//! The XML targets take the input as a UTF-8 document (other inputs are
//! ignored). The message targets build a [`Message`] from the input with
//! [`message_from_fuzz`], a deliberately simple record format (so libFuzzer
//! mutates element names, types and bodies, not the binary codec that the
//! `message` target already covers); [`message_to_fuzz`] writes it, for the
//! seeds.
//!
//! Each target checks the memory property on every parser call (as the
//! wire targets do) and, where the type has an encoder, that a parsed value
//! re-encodes to something that parses equal.

use bytes::Bytes;
use juxta_proto::advertisement::{
    AccessPointAdvertisement, Advertisement, ModuleClassAdvertisement, ModuleImplAdvertisement,
    ModuleSpecAdvertisement, PeerAdvertisement, PeerGroupAdvertisement, PipeAdvertisement,
    RdvAdvertisement, RouteAdvertisement, XmlElement,
};
use juxta_proto::discovery::peerinfo::{PeerInfoQuery, PeerInfoResponse};
use juxta_proto::discovery::{DiscoveryQuery, DiscoveryResponse};
use juxta_proto::endpoint::compact_router::{CompactRouterHeader, ELEM_COMPACT_ERM, NS_JUXTA};
use juxta_proto::endpoint::forward::{inspect, FingerprintVerifier};
use juxta_proto::endpoint::route_query::{RouteQuery, RouteResponse};
use juxta_proto::endpoint::router::RouterHeader;
use juxta_proto::endpoint::NET_GROUP_UNIQUE;
use juxta_proto::id::PeerId;
use juxta_proto::lan::{Announcement, LanConfig, LanDiscovery, LanEvent};
use juxta_proto::message::{Element, Message};
use juxta_proto::pipe::binding::PipeResolverMsg;
use juxta_proto::pipe::wire_header::JxtaWireHeader;
use juxta_proto::relay::{Control, RelayRequest, RelayResponse};
use juxta_proto::rendezvous::messages::{
    rdv_adv_peer_id, walk_target, BusyNotice, LeaseMessage, PeerViewMessage, PropagateHeader,
    WalkHeader,
};
use juxta_proto::resolver::{ResolverQuery, ResolverResponse};
use juxta_proto::socket::reliable::{
    self, ack_element, block_element, retry_element, Incoming, ReliableConfig, ReliableStream,
};
use juxta_proto::socket::setup::{CloseSignal, ConnectRequest, ConnectResponse};
use juxta_proto::srdi::{ResolverSrdi, SrdiMessage};

use super::counting_alloc::check;

/// The group the message targets look up their group-named elements for
/// (the net peer group, as in the seeds).
pub const FUZZ_GROUP: &str = NET_GROUP_UNIQUE;

/// Builds a message from fuzz input: records of
/// `[ns len u8][ns][name len u8][name][mime len u8][mime][body len u16 BE][body]`,
/// strings read as lossy UTF-8, MIME length 0 meaning no type. A record cut
/// short takes what is left as its body; input after the last whole record
/// ends the message. At most 64 elements.
pub fn message_from_fuzz(mut data: &[u8]) -> Message {
    fn take<'a>(d: &mut &'a [u8], n: usize) -> &'a [u8] {
        let n = n.min(d.len());
        let (a, b) = d.split_at(n);
        *d = b;
        a
    }
    fn string(d: &mut &[u8]) -> String {
        let n = take(d, 1).first().copied().unwrap_or(0) as usize;
        String::from_utf8_lossy(take(d, n)).into_owned()
    }
    let mut m = Message::new();
    while !data.is_empty() && m.elements.len() < 64 {
        let ns = string(&mut data);
        let name = string(&mut data);
        let mime = string(&mut data);
        let len = match take(&mut data, 2) {
            [a, b] => u16::from_be_bytes([*a, *b]) as usize,
            _ => usize::MAX,
        };
        let body = Bytes::copy_from_slice(take(&mut data, len));
        m.push(if mime.is_empty() {
            Element::bytes(&ns, &name, body)
        } else {
            Element::typed(&ns, &name, &mime, body)
        });
    }
    m
}

/// Writes a message in the format [`message_from_fuzz`] reads (strings
/// over 255 bytes and bodies over 65535 bytes are cut; signatures dropped).
pub fn message_to_fuzz(m: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    let string = |out: &mut Vec<u8>, s: &str| {
        let b = &s.as_bytes()[..s.len().min(255)];
        out.push(b.len() as u8);
        out.extend_from_slice(b);
    };
    for e in &m.elements {
        string(&mut out, &e.namespace);
        string(&mut out, &e.name);
        string(&mut out, e.mime.as_deref().unwrap_or(""));
        let body = &e.data[..e.data.len().min(65535)];
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
    }
    out
}

/// The input as a document, if it is UTF-8.
fn doc(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// Every advertisement parser: the generic [`Advertisement::parse_signed`]
/// (root dispatch, signature check), the tree reader and the type's own
/// parser. A parsed advertisement re-encodes (`to_xml`, and JXSE's
/// `toString` form) to a document that parses equal, its own parser
/// agrees, and a parsed tree printed and read again is the same tree.
pub fn advertisement(data: &[u8]) {
    let Some(xml) = doc(data) else {
        return;
    };
    let n = data.len();
    if let Ok(tree) = check("XmlElement::parse", n, || XmlElement::parse(xml)) {
        let again = XmlElement::parse(&tree.to_document()).expect("printed tree parses");
        assert_eq!(again, tree);
    }
    let Ok((adv, _signer)) = check("Advertisement::parse_signed", n, || {
        Advertisement::parse_signed(xml)
    }) else {
        return;
    };
    let _ = (adv.id(), adv.index_fields(), adv.kind(), adv.owner());
    let forms: [String; 2] = [adv.to_xml(), adv.to_jxse_string()];
    for text in &forms {
        let back = Advertisement::parse(text).expect("re-encoded advertisement parses");
        assert_eq!(back, adv);
        assert_eq!(back.to_xml(), adv.to_xml());
    }
    // The type's own parser reads the re-encoded document the same way.
    let text: &str = &forms[0];
    let same = match &adv {
        Advertisement::Peer(a) => PeerAdvertisement::parse(text).ok().as_ref() == Some(a),
        Advertisement::Group(a) => PeerGroupAdvertisement::parse(text).ok().as_ref() == Some(a),
        Advertisement::Pipe(a) => PipeAdvertisement::parse(text).ok().as_ref() == Some(a),
        Advertisement::ModuleClass(a) => {
            ModuleClassAdvertisement::parse(text).ok().as_ref() == Some(a)
        }
        Advertisement::ModuleSpec(a) => {
            ModuleSpecAdvertisement::parse(text).ok().as_ref() == Some(a)
        }
        Advertisement::ModuleImpl(a) => {
            ModuleImplAdvertisement::parse(text).ok().as_ref() == Some(a)
        }
        Advertisement::Route(a) => RouteAdvertisement::parse(text).ok().as_ref() == Some(a),
        Advertisement::AccessPoint(a) => {
            AccessPointAdvertisement::parse(text).ok().as_ref() == Some(a)
        }
        Advertisement::Rdv(a) => RdvAdvertisement::parse(text).ok().as_ref() == Some(a),
    };
    assert!(
        same,
        "the type's own parser disagrees with Advertisement::parse"
    );
}

/// `ResolverQuery::parse` and `ResolverResponse::parse`; each re-encodes
/// to a document that parses equal.
pub fn resolver(data: &[u8]) {
    let Some(xml) = doc(data) else {
        return;
    };
    let n = data.len();
    if let Ok(q) = check("ResolverQuery::parse", n, || ResolverQuery::parse(xml)) {
        let back = ResolverQuery::parse(&q.to_xml()).expect("re-encoded query parses");
        assert_eq!(back, q);
    }
    if let Ok(r) = check("ResolverResponse::parse", n, || {
        ResolverResponse::parse(xml)
    }) {
        let back = ResolverResponse::parse(&r.to_xml()).expect("re-encoded response parses");
        assert_eq!(back, r);
    }
}

/// Discovery and peer-info queries and responses; each re-encodes to a
/// document that parses equal; the advertisements they carry go through
/// the advertisement parser.
pub fn discovery(data: &[u8]) {
    let Some(xml) = doc(data) else {
        return;
    };
    let n = data.len();
    if let Ok(q) = check("DiscoveryQuery::parse", n, || DiscoveryQuery::parse(xml)) {
        let back = DiscoveryQuery::parse(&q.to_xml()).expect("re-encoded query parses");
        assert_eq!(back, q);
        let _ = check("DiscoveryQuery::peer_advertisement", n, || {
            q.peer_advertisement()
        });
        assert!(q.answer_limit() <= q.threshold as usize);
    }
    if let Ok(r) = check("DiscoveryResponse::parse", n, || {
        DiscoveryResponse::parse(xml)
    }) {
        let back = DiscoveryResponse::parse(&r.to_xml()).expect("re-encoded response parses");
        assert_eq!(back, r);
        let _ = check("DiscoveryResponse::peer_advertisement", n, || {
            r.peer_advertisement()
        });
        for e in &r.responses {
            let _ = check("DiscoveryEntry::advertisement", n, || e.advertisement());
        }
    }
    if let Ok(q) = check("PeerInfoQuery::parse", n, || PeerInfoQuery::parse(xml)) {
        let back = PeerInfoQuery::parse(&q.to_xml()).expect("re-encoded peer info query parses");
        assert_eq!(back, q);
    }
    if let Ok(r) = check("PeerInfoResponse::parse", n, || {
        PeerInfoResponse::parse(xml)
    }) {
        let back =
            PeerInfoResponse::parse(&r.to_xml()).expect("re-encoded peer info response parses");
        assert_eq!(back, r);
    }
}

/// `SrdiMessage::parse` and `ResolverSrdi::parse` on the input as a
/// document, then `ResolverSrdi::from_message` with the input as the
/// gzip-compressed SRDI element (the decompression bound) and as a plain
/// XML element. Parsed documents re-encode to documents that parse equal.
pub fn srdi(data: &[u8]) {
    let n = data.len();
    if let Some(xml) = doc(data) {
        if let Ok(m) = check("SrdiMessage::parse", n, || SrdiMessage::parse(xml)) {
            let back = SrdiMessage::parse(&m.to_xml()).expect("re-encoded SRDI message parses");
            assert_eq!(back, m);
        }
        if let Ok(r) = check("ResolverSrdi::parse", n, || ResolverSrdi::parse(xml)) {
            check_resolver_srdi(&r);
        }
    }
    let name = juxta_proto::resolver::srdi_queue(FUZZ_GROUP);
    for mime in ["application/gzip", "text/xml;charset=UTF-8"] {
        let m = Message::new().with(Element::typed(
            juxta_proto::message::NS_JXTA,
            &name,
            mime,
            Bytes::copy_from_slice(data),
        ));
        if let Ok(r) = check("ResolverSrdi::from_message", n, || {
            ResolverSrdi::from_message(&m, FUZZ_GROUP)
        }) {
            check_resolver_srdi(&r);
            let _ = check("ResolverSrdi::srdi_message", n, || r.srdi_message());
        }
    }
}

fn check_resolver_srdi(r: &ResolverSrdi) {
    let back = ResolverSrdi::parse(&r.to_xml()).expect("re-encoded SRDI envelope parses");
    assert_eq!(&back, r);
    let m = Message::new().with(r.to_element(FUZZ_GROUP));
    let back = ResolverSrdi::from_message(&m, FUZZ_GROUP).expect("gzip SRDI element parses");
    assert_eq!(&back, r);
}

/// Every rendezvous message reader on a message built from the input
/// (lease request/grant/disconnect, peer view probe/response, walker
/// header and target, propagation header, busy notice), and the document
/// parsers on every element's text. Parsed messages re-encode to messages
/// that parse equal.
/// The LAN peer the `rendezvous` target plays.
const FUZZ_LAN_PEER: &str =
    "urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03";

pub fn rendezvous(data: &[u8]) {
    let n = data.len();
    let msg = check("message_from_fuzz", n, || message_from_fuzz(data));
    if let Ok(l) = check("LeaseMessage::from_message", n, || {
        LeaseMessage::from_message(&msg)
    }) {
        let back = LeaseMessage::from_message(&l.to_message()).expect("lease message re-parses");
        assert_eq!(back, l);
    }
    if let Ok(p) = check("PeerViewMessage::from_message", n, || {
        PeerViewMessage::from_message(&msg)
    }) {
        let back =
            PeerViewMessage::from_message(&p.to_message()).expect("peer view message re-parses");
        assert_eq!(back, p);
    }
    if let Ok(w) = check("WalkHeader::from_message", n, || {
        WalkHeader::from_message(&msg)
    }) {
        let back = WalkHeader::parse(&w.to_xml()).expect("walk header re-parses");
        assert_eq!(back, w);
    }
    let _ = check("walk_target", n, || walk_target(&msg));
    // LAN announcements (a peer view probe read as one), and the LAN
    // state machine fed it from a LAN address: bounded, never panics.
    if let Ok(a) = check("Announcement::from_message", n, || {
        Announcement::from_message(&msg)
    }) {
        assert!(a.addrs.len() <= juxta_proto::lan::MAX_ADDRESSES);
        let back =
            Announcement::from_message(&a.to_message("fuzz")).expect("announcement re-parses");
        assert_eq!(back, a);
    }
    let me: PeerId = FUZZ_LAN_PEER.parse().expect("fuzz peer ID");
    let mut lan = LanDiscovery::new(LanConfig::default(), me, false, 0);
    let src = std::net::IpAddr::from([10, 0, 0, 2]);
    let _ = lan.handle_announcement(src, &msg, 1);
    while let Some(e) = lan.poll_event() {
        if let LanEvent::Verify { peer, addr } = e {
            assert_eq!(addr.ip(), src, "a dial off the datagram's source IP");
            lan.handle_verified(peer, addr, Some(peer), 2);
        }
    }
    assert!(lan.view().len() <= 1);
    if let Ok(h) = check("PropagateHeader::from_message", n, || {
        PropagateHeader::from_message(&msg, FUZZ_GROUP)
    }) {
        check_propagate(&h);
    }
    if let Ok(Some(b)) = check("BusyNotice::from_message", n, || {
        BusyNotice::from_message(&msg)
    }) {
        let m = Message::new().with(b.to_element());
        assert_eq!(BusyNotice::from_message(&m), Ok(Some(b)));
    }
    for e in &msg.elements {
        let Some(text) = e.as_str() else {
            continue;
        };
        if let Ok(h) = check("PropagateHeader::parse", n, || PropagateHeader::parse(text)) {
            check_propagate(&h);
        }
        if let Ok(w) = check("WalkHeader::parse", n, || WalkHeader::parse(text)) {
            let back = WalkHeader::parse(&w.to_xml()).expect("walk header re-parses");
            assert_eq!(back, w);
        }
        let _ = check("rdv_adv_peer_id", n, || rdv_adv_peer_id(text));
    }
}

fn check_propagate(h: &PropagateHeader) {
    let back = PropagateHeader::parse(&h.to_xml()).expect("propagate header re-parses");
    assert_eq!(&back, h);
    let mut m = Message::new();
    h.write_into(&mut m, FUZZ_GROUP);
    assert_eq!(
        PropagateHeader::from_message(&m, FUZZ_GROUP).as_ref(),
        Ok(h)
    );
}

/// `relay::Control::parse` on a message built from the input; a parsed
/// control message re-encodes to a message that parses equal.
pub fn relay(data: &[u8]) {
    let n = data.len();
    let msg = check("message_from_fuzz", n, || message_from_fuzz(data));
    if let Ok(c) = check("Control::parse", n, || Control::parse(&msg)) {
        let m = match &c {
            Control::Request(r) => RelayRequest::to_message(r),
            Control::Response(r) => RelayResponse::to_message(r),
        };
        assert_eq!(Control::parse(&m), Ok(c));
    }
}

/// The endpoint router: `RouterHeader::parse` (ERM) on the input bytes,
/// `RouteQuery::parse` (ERQ) and `RouteResponse::parse` (ERR) on the input
/// as a document, `forward::inspect` on a message whose ERM element is the
/// input, and the router fingerprint check on the input. Parsed documents
/// re-encode to documents that parse equal. The input is also a compact
/// router header (`CompactRouterHeader::parse`, re-encoding to exactly the
/// input; `inspect` of it on a compact link, where without a fingerprint
/// only the link may be the source, and on a JXTA-framed link, where it is
/// refused).
pub fn router(data: &[u8]) {
    let n = data.len();
    if let Ok(h) = check("RouterHeader::parse", n, || RouterHeader::parse(data)) {
        let back = RouterHeader::parse(h.to_xml().as_bytes()).expect("re-encoded ERM parses");
        assert_eq!(back, h);
    }
    if let Some(xml) = doc(data) {
        if let Ok(q) = check("RouteQuery::parse", n, || RouteQuery::parse(xml)) {
            let back = RouteQuery::parse(&q.to_xml()).expect("re-encoded route query parses");
            assert_eq!(back, q);
        }
        if let Ok(r) = check("RouteResponse::parse", n, || RouteResponse::parse(xml)) {
            let back = RouteResponse::parse(&r.to_xml()).expect("re-encoded route answer parses");
            assert_eq!(back, r);
        }
    }
    let local = PeerId::from_public_key_spki(b"local");
    let link = PeerId::from_public_key_spki(b"link");
    let m = Message::new().with(Element::xml(
        juxta_proto::message::NS_JXTA,
        juxta_proto::endpoint::router::ELEM_ERM,
        String::from_utf8_lossy(data).into_owned(),
    ));
    let mut verifier = FingerprintVerifier::new(4);
    if let Ok(i) = check("forward::inspect", n, || {
        inspect(&local, &link, &m, &mut verifier, 8, false)
    }) {
        assert_eq!(
            i.src, link,
            "without a fingerprint only the link may be the source"
        );
        assert_ne!(i.src, local);
    }
    if let Ok(h) = check("CompactRouterHeader::parse", n, || {
        CompactRouterHeader::parse(data)
    }) {
        assert_eq!(
            &h.encode()[..],
            data,
            "a compact header re-encodes to its input"
        );
    }
    let c = Message::new().with(Element::bytes(
        NS_JUXTA,
        ELEM_COMPACT_ERM,
        Bytes::copy_from_slice(data),
    ));
    if let Ok(i) = check("forward::inspect compact", n, || {
        inspect(&local, &link, &c, &mut verifier, 8, true)
    }) {
        assert_eq!(
            i.src, link,
            "without a fingerprint only the link may be the source"
        );
        assert_ne!(i.src, local);
    }
    assert!(
        inspect(&local, &link, &c, &mut verifier, 8, false).is_err(),
        "a compact header is refused on a JXTA-framed link"
    );
    let fp = Bytes::copy_from_slice(data);
    let _ = check("FingerprintVerifier::verify", n, || verifier.verify(&fp));
}

/// `socket::reliable::parse` on a message built from the input; the items
/// re-encode (block, ack and retry elements) to a message that parses to
/// the same items; then a fresh [`ReliableStream`] is fed the items, asked
/// what it transmits and read from: nothing it does may panic, and it never
/// holds more readable bytes than it was given.
pub fn reliable(data: &[u8]) {
    let n = data.len();
    let msg = check("message_from_fuzz", n, || message_from_fuzz(data));
    let Ok(items) = check("reliable::parse", n, || reliable::parse(&msg)) else {
        return;
    };
    let mut again = Message::new();
    let mut retry = false;
    for it in &items {
        match it {
            Incoming::Block {
                seq,
                data,
                retry: r,
            } => {
                retry |= *r;
                again.push(block_element(*seq, data.clone()));
            }
            Incoming::Ack { cumulative, sacks } => {
                again.push(ack_element(*cumulative, sacks));
            }
        }
    }
    if retry {
        again.push(retry_element());
    }
    assert_eq!(reliable::parse(&again).as_ref(), Ok(&items));

    let t0: u64 = 1_000;
    let cfg = ReliableConfig {
        max_window: 8,
        recv_buffer_blocks: 8,
        ..ReliableConfig::default()
    };
    let mut s = ReliableStream::new(cfg, t0);
    let _ = s.write(b"fuzz");
    let given: usize = items
        .iter()
        .map(|i| match i {
            Incoming::Block { data, .. } => data.len(),
            Incoming::Ack { .. } => 0,
        })
        .sum();
    let mut now = t0;
    for it in items {
        now += 1;
        s.handle_incoming(now, it);
        assert!(s.readable() <= given);
        for _ in 0..64 {
            if s.poll_transmit(now).is_none() {
                break;
            }
        }
    }
    let mut buf = [0u8; 256];
    let mut read = 0;
    while read <= given {
        let k = s.read(&mut buf);
        if k == 0 {
            break;
        }
        read += k;
    }
    assert!(read <= given, "read {read} bytes of {given} given");
    s.handle_timeout(now + 3_600_000);
    let _ = s.poll_timeout();
}

/// The JxtaSocket / bidi pipe setup messages (connect request, connect
/// response, close) on a message built from the input; parsed messages
/// re-encode to messages that parse equal.
pub fn socket_setup(data: &[u8]) {
    let n = data.len();
    let msg = check("message_from_fuzz", n, || message_from_fuzz(data));
    if let Ok(r) = check("ConnectRequest::from_message", n, || {
        ConnectRequest::from_message(&msg)
    }) {
        let back = ConnectRequest::from_message(&r.to_message()).expect("request re-parses");
        assert_eq!(back, r);
    }
    if let Ok(r) = check("ConnectResponse::from_message", n, || {
        ConnectResponse::from_message(&msg)
    }) {
        let back = ConnectResponse::from_message(&r.to_message()).expect("response re-parses");
        assert_eq!(back, r);
    }
    if let Some((kind, sig)) = check("CloseSignal::from_message", n, || {
        CloseSignal::from_message(&msg)
    }) {
        assert_eq!(
            CloseSignal::from_message(&sig.to_message(kind)),
            Some((kind, sig))
        );
    }
}

/// The pipe resolver document (`PipeResolverMsg::parse`) and the
/// propagate pipe header (`JxtaWireHeader::parse`) on the input as a
/// document, and `JxtaWireHeader::from_message` on a message built from
/// the input; parsed documents re-encode to documents that parse equal.
pub fn pipe(data: &[u8]) {
    let n = data.len();
    if let Some(xml) = doc(data) {
        if let Ok(p) = check("PipeResolverMsg::parse", n, || PipeResolverMsg::parse(xml)) {
            let back = PipeResolverMsg::parse(&p.to_xml()).expect("re-encoded binding parses");
            assert_eq!(back, p);
        }
        if let Ok(h) = check("JxtaWireHeader::parse", n, || JxtaWireHeader::parse(xml)) {
            let back = JxtaWireHeader::parse(&h.to_xml()).expect("re-encoded wire header parses");
            assert_eq!(back, h);
        }
    }
    let msg = check("message_from_fuzz", n, || message_from_fuzz(data));
    if let Ok(h) = check("JxtaWireHeader::from_message", n, || {
        JxtaWireHeader::from_message(&msg)
    }) {
        let m = Message::new().with(h.to_element());
        assert_eq!(JxtaWireHeader::from_message(&m), Ok(h));
    }
}

/// The stream channel of sockets between Juxta peers
/// (`socket::stream`): [`stream::items`] on a message built from the input,
/// the items re-encoded (data, credit, FIN, offset, frames, STOP, RESET
/// elements) to a message that parses to the same items; then a
/// [`StreamState`] with the smallest window (relayed, with offsets, when
/// the first item is an offset) is fed the items as a hostile peer would
/// send them, the reader taking a few bytes after each. Checked after every
/// step:
/// - the bytes buffered never pass the receive window, and reads return
///   exactly the data accepted, in order;
/// - credit never lets this end send more than [`stream::MAX_WINDOW`]
///   beyond what it sent;
/// - a refused item that is a protocol violation resets the stream (typed
///   error, nothing left to read, later items refused), any other refusal
///   leaves it as it was; grants only grow and never pass the bytes read
///   plus the window.
pub fn stream(data: &[u8]) {
    use juxta_proto::socket::stream::{
        self as st, credit_element, data_element, fin_element, frames_element, offset_element,
        reset_element, stop_element, Item, StreamState, MAX_WINDOW, MIN_WINDOW,
    };
    let n = data.len();
    let msg = check("message_from_fuzz", n, || message_from_fuzz(data));
    let items: Vec<_> = check("stream::items", n, || st::items(&msg).collect());
    let parsed: Vec<Item> = items.iter().filter_map(|i| i.clone().ok()).collect();
    let relayed = matches!(parsed.first(), Some(Item::Offset(_)));
    let mut again = Message::new();
    for it in &parsed {
        again.push(match it {
            Item::Data(d) => data_element(d.clone()),
            Item::Credit(c) => credit_element(*c),
            Item::Fin(t) => fin_element(*t),
            Item::Stop => stop_element(),
            Item::Reset(code) => reset_element(*code),
            Item::Offset(o) => offset_element(*o),
            Item::Frames(f) => frames_element(*f),
        });
    }
    let back: Vec<Item> = st::items(&again)
        .map(|i| i.expect("a re-encoded item parses"))
        .collect();
    assert_eq!(back, parsed, "items re-encode to the same items");

    let mut s = StreamState::new(MIN_WINDOW, MIN_WINDOW);
    if relayed {
        s = s.with_offsets();
    }
    // What the reader must get: the data accepted, in order.
    let mut accepted: Vec<u8> = Vec::new();
    let mut read: Vec<u8> = Vec::new();
    let mut last_grant = MIN_WINDOW;
    let mut buf = [0u8; 4096];
    for (k, it) in parsed.into_iter().enumerate() {
        let was_reset = s.is_reset();
        let (buffered, sent) = (s.readable(), s.sent());
        let payload = match &it {
            Item::Data(d) => Some(d.clone()),
            _ => None,
        };
        match check("StreamState::handle", n, || s.handle(it)) {
            Ok(()) => {
                assert!(!was_reset, "an item was taken after a reset");
                if let Some(d) = payload {
                    accepted.extend_from_slice(&d);
                }
            }
            Err(e) if was_reset => {
                assert_eq!(e, st::StreamError::AfterReset);
            }
            Err(e) if e.is_protocol() => {
                assert!(s.is_reset(), "a violation ({e}) resets the stream");
                assert_eq!(s.readable(), 0, "a reset stream holds nothing");
                assert_eq!(s.read_error(), Some(e));
                assert_eq!(s.writable(), 0);
            }
            Err(e) => {
                // A refusal: the stream is as it was.
                assert!(!s.is_reset(), "a refusal ({e}) reset the stream");
                assert_eq!((s.readable(), s.sent()), (buffered, sent));
            }
        }
        assert!(
            s.readable() as u64 <= MIN_WINDOW,
            "more buffered than the window"
        );
        assert!(s.writable() as u64 <= MAX_WINDOW, "credit past the cap");
        // The reader takes a little (sometimes nothing), then maybe grants.
        let want = k % 3 * 1500;
        let take = want.min(buf.len());
        let got = s.read(&mut buf[..take]);
        read.extend_from_slice(&buf[..got]);
        if let Some(g) = s.poll_grant() {
            assert!(g > last_grant, "grants only grow");
            assert!(g <= read.len() as u64 + MIN_WINDOW, "grant past the window");
            last_grant = g;
        }
        // This end sends what it may (the credit the peer gave).
        let w = s.writable().min(1 << 20);
        s.on_sent(w);
    }
    if !s.is_reset() {
        while let Some(b) = s.read_bytes(1000) {
            read.extend_from_slice(&b);
        }
        assert_eq!(read, accepted, "reads return the accepted data in order");
        assert_eq!(s.at_eof(), s.fin_received());
    } else {
        assert!(
            accepted.starts_with(&read),
            "reads are a prefix of the data"
        );
    }
}

/// One peer's composed control plane ([`juxta_proto::node::Node`], the
/// machine the runtime and the simulator run) fed a hostile link. The
/// input's first byte picks the role (even: a rendezvous, odd: an edge of
/// one seed); then operations, each led by one byte `op`:
/// - `op % 4 == 0`: a message (`[len u16 BE][message_from_fuzz record
///   bytes]`) from one of four peers (`op >> 2 & 3`; peer 3 is the node
///   itself), proven when `op & 0x10`, to one of eight listeners
///   (`op >> 5`: the resolver's query, response and SRDI queues, RVP,
///   propagation, peer view, the walker, an unknown service);
/// - `1`: time passes (`[ms u16 BE]` × 16) and the timers run;
/// - `2`: the link to a peer goes down;
/// - `3`: a dial the node asked for ends (connected to a peer, or failed).
///
/// After each operation every transmit and event is taken; a query for the
/// owner's handler is handed to the rendezvous' index
/// ([`Node::forward_query`], as the runtime does with discovery queries)
/// or answered ([`Node::respond`]). Checked: nothing panics, and what the
/// node holds beyond its start never passes the memory bound of the whole
/// input (its tables are bounded; the bound counts every message given).
pub fn node(data: &[u8]) {
    use std::net::SocketAddr;

    use juxta_proto::id::PeerGroupId;
    use juxta_proto::node::{Event, Node};
    use juxta_proto::rendezvous::messages::{
        walk_address, PEERVIEW_SERVICE, PROPAGATE_SERVICE, RDV_SERVICE,
    };
    use juxta_proto::rendezvous::node::{RendezvousConfig, RendezvousNode};
    use juxta_proto::resolver::node::{Handler, ResolverConfig};
    use juxta_proto::resolver::{query_queue, response_queue, srdi_queue, RESOLVER_SERVICE};

    use juxta_proto::discovery::DISCOVERY_HANDLER;
    use juxta_proto::endpoint::ServiceAddress;

    let Some((&role, mut rest)) = data.split_first() else {
        return;
    };
    let pid = node_peer;
    let g = FUZZ_GROUP;
    let me = pid(0xAA);
    let seed: SocketAddr = ([127, 0, 0, 1], 9701).into();
    let cfg = if role & 1 == 0 {
        RendezvousConfig::rendezvous()
    } else {
        RendezvousConfig::edge(vec![seed])
    };
    let pa: Bytes = PeerAdvertisement::new(me, PeerGroupId::NET, "fuzz")
        .to_xml()
        .into();
    let mut node: Node<u8> = Node::new(
        RendezvousNode::new(cfg, me, g, pa, "fuzz", 1),
        ResolverConfig::new(g),
    )
    .expect("a node");
    node.register(Handler::exact(1, DISCOVERY_HANDLER))
        .expect("a handler");
    node.register(Handler::exact(2, "fuzz-app").own_admission())
        .expect("a handler");
    let peers = [pid(1), pid(2), pid(3), me];
    let dests = [
        ServiceAddress::new(RESOLVER_SERVICE, Some(&query_queue(g))),
        ServiceAddress::new(RESOLVER_SERVICE, Some(&response_queue(g))),
        ServiceAddress::new(RESOLVER_SERVICE, Some(&srdi_queue(g))),
        ServiceAddress::new(RDV_SERVICE, Some(g)),
        ServiceAddress::new(PROPAGATE_SERVICE, Some(g)),
        ServiceAddress::new(PEERVIEW_SERVICE, Some(g)),
        walk_address(&PeerGroupId::NET),
        ServiceAddress::new("fuzz-service", None),
    ];
    let n = data.len();
    let base = super::counting_alloc::current();
    let mut now: u64 = 1_000;
    let take = |node: &mut Node<u8>, now: u64| {
        for _ in 0..100_000 {
            let mut more = false;
            while node.poll_transmit().is_some() {
                more = true;
            }
            while let Some(ev) = node.poll_event() {
                more = true;
                if let Event::Query {
                    key,
                    from,
                    query,
                    message,
                } = ev
                {
                    if key == 1 {
                        node.forward_query(Some(from), *query, message, None, now);
                    } else {
                        node.respond(&query, "<r/>".into());
                    }
                }
            }
            if !more {
                return;
            }
        }
        panic!("the node kept producing output");
    };
    super::counting_alloc::check_since(base, "Node", n, || {
        take(&mut node, now);
        while let Some((&op, r)) = rest.split_first() {
            rest = r;
            let two = |rest: &mut &[u8]| -> u16 {
                let v = match rest {
                    [a, b, ..] => u16::from_be_bytes([*a, *b]),
                    [a] => u16::from(*a),
                    [] => 0,
                };
                *rest = &rest[rest.len().min(2)..];
                v
            };
            let who = peers[usize::from(op >> 2 & 3)];
            match op % 4 {
                0 => {
                    let len = usize::from(two(&mut rest)).min(rest.len());
                    let (body, r) = rest.split_at(len);
                    rest = r;
                    let msg = message_from_fuzz(body);
                    let dest = &dests[usize::from(op >> 5)];
                    let _ = node.handle_message(who, op & 0x10 != 0, dest, msg, now);
                }
                1 => {
                    now = now.saturating_add(u64::from(two(&mut rest)) * 16);
                    node.handle_timeout(now);
                }
                2 => node.handle_link_down(&who, now),
                _ => {
                    let ok = op & 0x10 != 0;
                    node.handle_dialed(seed, ok.then_some(who), now);
                }
            }
            take(&mut node, now);
        }
    });
}

/// The peers of the [`node`] target: `node_peer(1..=3)` send, `0xAA` is
/// the node.
pub fn node_peer(n: u8) -> PeerId {
    use juxta_proto::id::{IdFormat, IdType, JxtaId};
    let mut u = [0u8; 16];
    u[0] = n;
    JxtaId::from_parts(IdFormat::Cbid, [0x42; 16], u, IdType::Peer)
        .try_into()
        .expect("a peer ID")
}

/// A [`node`] operation handing `m` from peer `peer` (0..=3), `proven` or
/// not, to listener `dest` (0..=7), for the seeds.
pub fn node_message_op(peer: u8, proven: bool, dest: u8, m: &Message) -> Vec<u8> {
    let body = message_to_fuzz(m);
    let len = u16::try_from(body.len()).expect("a seed message under 64 KiB");
    let mut v = vec![dest << 5 | u8::from(proven) << 4 | (peer & 3) << 2];
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(&body);
    v
}
