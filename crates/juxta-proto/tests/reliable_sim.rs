//! Deterministic simulation of two reliable stream engines connected by a
//! lossy, reordering, delaying link on a fake clock.
//!
//! Every message goes through the real wire path: `Segment::into_message`,
//! `encode_v0`, `decode_v0`, `parse`. The link is seeded, so a failure is
//! reproducible; nothing here reads the wall clock except to get a base
//! `Instant`. The link runs on that fine clock; the engines see it as
//! [`Millis`] since the start (their clock), as a runtime gives them.

use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use juxta_proto::message::namespace_order::JavaHashOrder;
use juxta_proto::message::{decode_v0, encode_v0};
use juxta_proto::socket::reliable::{
    DeadPeerCause, ReliableConfig, ReliableError, ReliableStream, Segment,
};
use juxta_proto::time::Millis;

/// `t` on the engines' clock, which started at `start`.
fn ms(start: Instant, t: Instant) -> Millis {
    u64::try_from(t.saturating_duration_since(start).as_millis()).unwrap_or(u64::MAX)
}
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

/// One direction of the link.
struct Pipe {
    /// (deliver at, tie-breaker, encoded message), earliest first.
    queue: BinaryHeap<std::cmp::Reverse<(Instant, u64, Vec<u8>)>>,
    /// When the (bandwidth-limited) sender side is free again.
    busy_until: Instant,
    sent: u64,
    dropped: u64,
}

struct LinkParams {
    loss: f64,
    /// Bytes per second.
    rate: f64,
    latency: Duration,
    jitter: Duration,
    /// Probability that a message is held back (reordered).
    reorder: f64,
    reorder_delay: Duration,
    /// Drop-tail: messages that would queue longer than this are dropped.
    max_queue: Duration,
}

impl LinkParams {
    fn lossy(loss: f64) -> Self {
        LinkParams {
            loss,
            rate: 50e6,
            latency: Duration::from_millis(20),
            jitter: Duration::from_millis(5),
            reorder: 0.03,
            reorder_delay: Duration::from_millis(25),
            max_queue: Duration::from_millis(300),
        }
    }
}

struct Link {
    p: LinkParams,
    rng: StdRng,
    pipes: [Pipe; 2],
    seq: u64,
    /// Drop everything (a dead peer or a cut cable).
    cut: bool,
}

impl Link {
    fn new(p: LinkParams, seed: u64, now: Instant) -> Self {
        let pipe = || Pipe {
            queue: BinaryHeap::new(),
            busy_until: now,
            sent: 0,
            dropped: 0,
        };
        Link {
            p,
            rng: StdRng::seed_from_u64(seed),
            pipes: [pipe(), pipe()],
            seq: 0,
            cut: false,
        }
    }

    fn send(&mut self, dir: usize, now: Instant, t: Segment) {
        let wire = encode_v0(&t.into_message(), JavaHashOrder::Java8)
            .unwrap()
            .to_bytes()
            .to_vec();
        let pipe = &mut self.pipes[dir];
        pipe.sent += 1;
        let start = pipe.busy_until.max(now);
        if self.cut || self.rng.gen_bool(self.p.loss) || start - now > self.p.max_queue {
            pipe.dropped += 1;
            return;
        }
        let tx = Duration::from_secs_f64(wire.len() as f64 / self.p.rate);
        pipe.busy_until = start + tx;
        let mut at =
            pipe.busy_until + self.p.latency + self.p.jitter.mul_f64(self.rng.gen_range(0.0..1.0));
        if self.rng.gen_bool(self.p.reorder) {
            at += self.p.reorder_delay;
        }
        self.seq += 1;
        pipe.queue.push(std::cmp::Reverse((at, self.seq, wire)));
    }

    fn next_delivery(&self) -> Option<Instant> {
        self.pipes
            .iter()
            .filter_map(|p| p.queue.peek().map(|r| r.0 .0))
            .min()
    }

    /// Delivers every message due by `now` on pipe `dir` to `to`.
    fn deliver(&mut self, dir: usize, start: Instant, now: Instant, to: &mut ReliableStream) {
        let pipe = &mut self.pipes[dir];
        while pipe.queue.peek().is_some_and(|r| r.0 .0 <= now) {
            let std::cmp::Reverse((at, _, wire)) = pipe.queue.pop().unwrap();
            if self.cut {
                pipe.dropped += 1;
                continue;
            }
            let msg = decode_v0(Bytes::from(wire)).unwrap().message;
            to.handle_message(ms(start, at), &msg).unwrap();
        }
    }
}

/// One side's application: writes `out` in random pieces, reads and checks
/// what the other side wrote.
struct App {
    out: Bytes,
    written: usize,
    expect: Bytes,
    read: usize,
    writing: bool,
    reading: bool,
}

impl App {
    fn new(out: Bytes, expect: Bytes) -> Self {
        App {
            out,
            written: 0,
            expect,
            read: 0,
            writing: true,
            reading: true,
        }
    }

    fn step(&mut self, s: &mut ReliableStream, rng: &mut StdRng) {
        while self.writing && self.written < self.out.len() && s.writable() > 0 {
            let n = rng
                .gen_range(1..=200_000usize)
                .min(self.out.len() - self.written);
            let piece = self.out.slice(self.written..self.written + n);
            let accepted = if rng.gen_bool(0.5) {
                s.write(&piece)
            } else {
                match s.write_bytes(piece) {
                    Ok(()) => n,
                    Err(rest) => n - rest.len(),
                }
            };
            self.written += accepted;
            if rng.gen_bool(0.3) || self.written == self.out.len() {
                s.flush();
            }
        }
        if !self.reading {
            return;
        }
        loop {
            let got = if rng.gen_bool(0.5) {
                let mut buf = vec![0u8; rng.gen_range(1..=100_000)];
                let n = s.read(&mut buf);
                buf.truncate(n);
                Bytes::from(buf)
            } else {
                s.read_chunk(rng.gen_range(1..=100_000)).unwrap_or_default()
            };
            if got.is_empty() {
                break;
            }
            assert!(
                self.read + got.len() <= self.expect.len(),
                "read past the end"
            );
            assert!(
                got[..] == self.expect[self.read..self.read + got.len()],
                "corrupt or out-of-order bytes at offset {}",
                self.read
            );
            self.read += got.len();
        }
    }

    fn done(&self) -> bool {
        self.written == self.out.len() && self.read == self.expect.len()
    }
}

struct Sim {
    now: Instant,
    start: Instant,
    link: Link,
    s: [ReliableStream; 2],
    apps: [App; 2],
    rng: StdRng,
    /// Most blocks each side had in flight at once.
    peak_in_flight: [u32; 2],
}

impl Sim {
    fn new(cfg: ReliableConfig, link: LinkParams, seed: u64, bytes: usize) -> Self {
        let start = Instant::now();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let mut gen = |n: usize| {
            let mut v = vec![0u8; n];
            rng.fill_bytes(&mut v);
            Bytes::from(v)
        };
        let (a, b) = (gen(bytes), gen(bytes));
        Sim {
            now: start,
            start,
            link: Link::new(link, seed, start),
            s: [
                ReliableStream::new(cfg.clone(), 0),
                ReliableStream::new(cfg, 0),
            ],
            apps: [App::new(a.clone(), b.clone()), App::new(b, a)],
            rng,
            peak_in_flight: [0; 2],
        }
    }

    /// Runs until `stop` holds or simulated time passes `limit`; returns
    /// whether `stop` held.
    fn run(&mut self, limit: Duration, mut stop: impl FnMut(&Sim) -> bool) -> bool {
        loop {
            for i in 0..2 {
                if self.s[i].error().is_none() {
                    self.apps[i].step(&mut self.s[i], &mut self.rng);
                }
                while let Some(t) = self.s[i].poll_transmit(ms(self.start, self.now)) {
                    self.link.send(i, self.now, t);
                }
                self.peak_in_flight[i] = self.peak_in_flight[i].max(self.s[i].in_flight());
            }
            if stop(self) {
                return true;
            }
            let at = |m: Millis| self.start + Duration::from_millis(m);
            let next = [
                self.link.next_delivery(),
                self.s[0].poll_timeout().map(at),
                self.s[1].poll_timeout().map(at),
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("nothing left to happen");
            if next - self.start > limit {
                return false;
            }
            self.now = self.now.max(next);
            let [a, b] = &mut self.s;
            self.link.deliver(0, self.start, self.now, b);
            self.link.deliver(1, self.start, self.now, a);
            let now = ms(self.start, self.now);
            for s in &mut self.s {
                if s.poll_timeout().is_some_and(|t| t <= now) {
                    s.handle_timeout(now);
                }
            }
        }
    }

    /// Side 1 writes nothing; side 0 expects nothing.
    fn one_way(&mut self) {
        self.apps[1].out = Bytes::new();
        self.apps[0].expect = Bytes::new();
    }

    fn transfer_done(&self) -> bool {
        self.apps.iter().all(App::done) && self.s.iter().all(ReliableStream::all_acked)
    }
}

fn transfer(loss: f64, seed: u64, cfg: ReliableConfig) -> Sim {
    const MB10: usize = 10 * 1024 * 1024;
    let mut sim = Sim::new(cfg, LinkParams::lossy(loss), seed, MB10);
    let ok = sim.run(Duration::from_secs(3600), Sim::transfer_done);
    for (i, s) in sim.s.iter().enumerate() {
        assert_eq!(s.error(), None, "side {i}: {:?}", s.stats());
    }
    assert!(
        ok,
        "transfer did not finish: read {}/{} and {}/{}; stats {:?} / {:?}",
        sim.apps[0].read,
        MB10,
        sim.apps[1].read,
        MB10,
        sim.s[0].stats(),
        sim.s[1].stats()
    );
    for s in &sim.s {
        assert_eq!(s.stats().bytes_sent, MB10 as u64);
        assert_eq!(s.stats().bytes_received, MB10 as u64);
    }
    sim
}

#[test]
fn ten_megabytes_each_way_at_1_percent_loss() {
    for seed in [1, 2] {
        let sim = transfer(0.01, seed, ReliableConfig::default());
        assert!(sim.link.pipes.iter().all(|p| p.dropped > 0));
        // Losses were repaired by retransmission, and the window opened
        // beyond JXSE's 64 KB-per-block x 4 start.
        let st = sim.s[0].stats();
        assert!(st.blocks_retransmitted > 0);
        assert!(st.srtt.is_some());
    }
}

#[test]
fn ten_megabytes_each_way_at_10_percent_loss() {
    for seed in [3, 4] {
        let sim = transfer(0.10, seed, ReliableConfig::default());
        for s in &sim.s {
            assert!(s.stats().blocks_retransmitted > 0);
            assert!(s.stats().fast_retransmits > 0);
        }
    }
}

/// A lossless long fat link (100 MB/s, 200 ms RTT: 20 MB in flight): the
/// window opens to `max_window` (16 MiB), far beyond JXSE's 20 blocks.
#[test]
fn window_opens_on_a_long_fat_link() {
    let link = LinkParams {
        loss: 0.0,
        rate: 100e6,
        latency: Duration::from_millis(100),
        jitter: Duration::ZERO,
        reorder: 0.0,
        reorder_delay: Duration::ZERO,
        max_queue: Duration::from_secs(1),
    };
    let mut sim = Sim::new(ReliableConfig::default(), link, 10, 100 * 1024 * 1024);
    sim.one_way();
    assert!(sim.run(Duration::from_secs(600), Sim::transfer_done));
    let st = sim.s[0].stats();
    assert_eq!(sim.peak_in_flight[0], 256);
    assert_eq!(st.cwnd, 256);
    assert_eq!(st.blocks_retransmitted, 0);
    assert_eq!(sim.s[1].stats().duplicate_blocks, 0);
}

#[test]
fn ten_megabytes_each_way_with_jxse_window() {
    transfer(0.01, 5, ReliableConfig::jxse_peer());
}

#[test]
fn small_blocks_and_small_buffers() {
    let cfg = ReliableConfig {
        block_size: 1500,
        max_window: 64,
        recv_buffer_blocks: 64,
        max_send_buffer: 100_000,
        ..ReliableConfig::default()
    };
    transfer(0.05, 6, cfg);
}

#[test]
fn dead_peer_detected_after_timeout_when_link_goes_silent() {
    let cfg = ReliableConfig::default();
    let timeout = cfg.dead_peer_timeout;
    let mut sim = Sim::new(cfg, LinkParams::lossy(0.01), 7, 50 * 1024 * 1024);
    sim.one_way();
    // Idle first, so both sides see each other's keepalives.
    sim.apps[0].writing = false;
    assert!(!sim.run(Duration::from_secs(5), |_| false));
    assert!(sim.s.iter().all(|s| s.peer_sends_keepalives()));
    // Side 0 streams; side 1 only reads.
    sim.apps[0].writing = true;
    let mb = 1024 * 1024;
    assert!(sim.run(Duration::from_secs(600), |s| s.apps[1].read > 5 * mb));
    assert!(sim.s.iter().all(|s| s.error().is_none()));
    sim.link.cut = true;
    let cut_at = sim.now;
    let mut failed_at = [None, None];
    sim.run(Duration::from_secs(600), |s| {
        for (at, stream) in failed_at.iter_mut().zip(&s.s) {
            if at.is_none() && stream.error().is_some() {
                *at = Some(s.now);
            }
        }
        failed_at.iter().all(Option::is_some)
    });
    let [a, b] = failed_at.map(|t| t.expect("stream did not fail"));
    // The writer had unacked data: no ack progress since the cut.
    assert_eq!(
        sim.s[0].error(),
        Some(&ReliableError::DeadPeer(DeadPeerCause::NoAckProgress))
    );
    // The reader had nothing outstanding: silence from a keepalive sender.
    assert_eq!(
        sim.s[1].error(),
        Some(&ReliableError::DeadPeer(DeadPeerCause::Silent))
    );
    for t in [a, b] {
        assert!(t > cut_at, "failed before the link went silent");
        assert!(t <= cut_at + timeout, "failed late");
        assert!(
            t + Duration::from_secs(1) >= cut_at + timeout,
            "failed early"
        );
    }
    // Nothing is accepted or sent any more.
    assert_eq!(sim.s[0].write(b"x"), 0);
    assert_eq!(sim.s[0].writable(), 0);
    let now = ms(sim.start, sim.now);
    assert!(sim.s.iter_mut().all(|s| s.poll_transmit(now).is_none()));
}

fn stalled_reader(cfg: ReliableConfig, seed: u64) {
    let recv_cap = cfg.recv_buffer_blocks as usize * cfg.block_size;
    let send_cap = cfg.max_send_buffer;
    let window_cap = cfg.max_window as usize * cfg.block_size;
    let total = 2 * (recv_cap + send_cap + window_cap);
    let mut sim = Sim::new(cfg, LinkParams::lossy(0.01), seed, total);
    sim.one_way();
    sim.apps[1].reading = false;
    // One simulated minute, far beyond the dead-peer timeout.
    assert!(!sim.run(Duration::from_secs(60), |_| false));
    let (w, r) = (&sim.s[0], &sim.s[1]);
    assert_eq!(w.writable(), 0, "writer not pushed back");
    assert_eq!(w.error(), None);
    assert_eq!(r.error(), None);
    // Memory stays bounded on both sides.
    assert!(r.readable() <= recv_cap);
    assert!(sim.apps[0].written <= recv_cap + send_cap + window_cap);
    assert!(sim.apps[0].written < total);
    // The reader resumes: everything arrives.
    sim.apps[1].reading = true;
    assert!(sim.run(Duration::from_secs(600), Sim::transfer_done));
    assert_eq!(sim.apps[1].read, total);
}

#[test]
fn stalled_reader_pushes_back_on_the_writer() {
    stalled_reader(
        ReliableConfig {
            block_size: 16 * 1024,
            max_window: 32,
            recv_buffer_blocks: 32,
            max_send_buffer: 256 * 1024,
            ..ReliableConfig::default()
        },
        8,
    );
}

/// Default sizes: 256 held blocks, more than one ack's 100 SACKs.
#[test]
fn stalled_reader_pushes_back_with_default_config() {
    stalled_reader(ReliableConfig::default(), 9);
}
