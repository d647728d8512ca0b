//! The delay element: a user-space link emulator between the two veth ends
//! of the middle namespace.
//!
//! This kernel has no `netem` (nor `fq`, so no EDT timestamps from BPF), so
//! nothing in the kernel can hold a packet for a while. Each direction gets
//! a thread that reads whole frames from one veth end with an `AF_PACKET`
//! socket and writes them to the other end when they are due. The sockets
//! use `PACKET_VNET_HDR`, so a TCP GSO super-frame (up to 64 KiB) crosses as
//! one frame with its segmentation and checksum offload intact: at 1 Gb/s
//! that is a few thousand frames per second instead of 83 000, which the
//! two-core machine can afford next to the benchmark itself.
//!
//! The element models a link, not only a delay: a frame of `n` bytes
//! leaves the link `n × 8 / rate` after the previous one has left (or after
//! it arrived, if the link was idle) and is delivered one propagation delay
//! (half the profile's RTT) later. It counts bytes as `tbf` does and runs
//! 1% faster than the `tbf` in front of it, so that `tbf` stays the
//! bottleneck (where TCP gets push-back rather than a growing queue here). So one 64 KiB message over 1 Gb/s takes
//! its 0.5 ms even when the sender's `tbf` bucket is full. The `tbf` on each
//! endpoint's egress keeps the average at the link rate and pushes back on
//! TCP (TCP small queues), like a real NIC; the element's queue therefore
//! stays short. It is bounded all the same (frames and bytes): a frame that
//! does not fit is dropped, as a router would, and counted in [`Counters`].

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libc::c_int;

/// `SOL_PACKET` (linux/socket.h).
const SOL_PACKET: c_int = 263;
/// `PACKET_VNET_HDR` (linux/if_packet.h).
const PACKET_VNET_HDR: c_int = 15;
/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, Linux 4.20).
const PACKET_IGNORE_OUTGOING: c_int = 23;
/// `struct virtio_net_hdr` in front of every frame.
const VNET_HDR: usize = 10;
/// Receive buffer: the largest GSO frame (64 KiB) with headers, and slack.
/// A longer frame is counted as truncated and dropped.
const FRAME_MAX: usize = 128 * 1024;
/// Per segment besides its payload: Ethernet header (14), IPv4 (20), TCP
/// with timestamps (32); counted as `tbf` counts a GSO frame's segments
/// (preamble, FCS and inter-frame gap are not: 1.6% of a full frame).
const SEGMENT_OVERHEAD: u64 = 66;
/// Longest sleep between checks of the stop flag.
const TICK: Duration = Duration::from_millis(20);
/// A frame due sooner than this is waited for by polling the socket
/// without sleeping: a timer wake-up on this VM costs tens of
/// microseconds, as long as the LAN delay itself. Costs at most this much
/// CPU per frame.
const SPIN: Duration = Duration::from_micros(50);

/// What one direction of the element did.
#[derive(Debug, Default)]
pub struct Counters {
    /// Frames delivered.
    pub forwarded: AtomicU64,
    /// Frames dropped because the element's queue was full.
    pub dropped_full: AtomicU64,
    /// Frames dropped because they were longer than the receive buffer.
    pub dropped_truncated: AtomicU64,
    /// Frames the kernel refused to send (counted, not retried).
    pub send_errors: AtomicU64,
}

/// Parameters of one direction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link {
    /// Bits per second.
    pub rate_bps: u64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Queue bound in frames.
    pub max_frames: usize,
    /// Queue bound in bytes.
    pub max_bytes: usize,
}

/// The running element: two threads (one per direction). Dropping it stops
/// and joins them.
pub(crate) struct DelayLine {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Counters of the two directions (A to B, B to A).
    pub counters: [Arc<Counters>; 2],
}

impl DelayLine {
    /// Starts forwarding between `left` and `right` (interfaces of the
    /// namespace file `ns`). Returns once both directions have their
    /// sockets, or the first error.
    pub fn start(ns: &str, left: &str, right: &str, link: Link) -> Result<DelayLine, io::Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = [Arc::new(Counters::default()), Arc::new(Counters::default())];
        let mut line = DelayLine {
            stop: stop.clone(),
            threads: Vec::new(),
            counters: counters.clone(),
        };
        for (i, (from, to)) in [(left, right), (right, left)].into_iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<()>>(1);
            let (ns, from, to) = (ns.to_string(), from.to_string(), to.to_string());
            let stop = stop.clone();
            let counters = counters[i].clone();
            let h = std::thread::Builder::new()
                .name(format!("netdelay-{from}"))
                .spawn(move || {
                    // Free to run on any CPU, even if the creating thread
                    // was pinned (the bench pins its client to CPU 0).
                    let mut all = nix::sched::CpuSet::new();
                    for cpu in 0..nix::sched::CpuSet::count() {
                        let _ = all.set(cpu);
                    }
                    let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &all);
                    let opened = super::enter(&ns)
                        .map_err(io::Error::other)
                        .and_then(|guard| {
                            let r = open(&from, true)?;
                            let t = open(&to, false)?;
                            Ok((guard, r, t))
                        });
                    match opened {
                        Ok((_guard, r, t)) => {
                            let _ = tx.send(Ok(()));
                            forward(&r, &t, link, &counters, &stop);
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    }
                })?;
            line.threads.push(h);
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(io::Error::other("delay thread ended at start")),
            }
        }
        Ok(line)
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

fn set_int(fd: &OwnedFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
    // SAFETY: `fd` is an open socket we own; the option value points to a
    // live c_int and its exact size is passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const c_int).cast(),
            std::mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(last_err())
    } else {
        Ok(())
    }
}

/// An `AF_PACKET` socket bound to interface `ifname` of the calling
/// thread's namespace, with virtio-net headers. `receive`: it takes every
/// incoming frame (not the ones sent from this namespace); otherwise it
/// only sends (protocol 0 receives nothing).
fn open(ifname: &str, receive: bool) -> io::Result<OwnedFd> {
    let cname = CString::new(ifname).map_err(io::Error::other)?;
    // SAFETY: `cname` is a valid NUL-terminated string for the whole call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(last_err());
    }
    let proto: u16 = if receive {
        (libc::ETH_P_ALL as u16).to_be()
    } else {
        0
    };
    // SAFETY: a system call with integer arguments only.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            c_int::from(proto),
        )
    };
    if raw < 0 {
        return Err(last_err());
    }
    // SAFETY: `raw` is a descriptor just returned by socket(2), owned by
    // nobody else; OwnedFd closes it exactly once.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_int(&fd, SOL_PACKET, PACKET_VNET_HDR, 1)?;
    if receive {
        set_int(&fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        // Room for a burst of super-frames while the thread sleeps.
        set_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20)?;
    } else {
        set_int(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 16 << 20)?;
    }
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = index as c_int;
    // SAFETY: the address points to a live sockaddr_ll and its exact size
    // is passed; `fd` is open.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(last_err());
    }
    Ok(fd)
}

/// Waits until `fd` is readable or `timeout` passed (nanosecond timer).
fn wait_readable(fd: &OwnedFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one live pollfd (count 1), a live timespec, no signal mask.
    // An error (EINTR) just ends the wait early, which the caller handles.
    unsafe {
        libc::ppoll(&mut p, 1, &ts, std::ptr::null());
    }
}

/// Bytes of a frame (virtio-net header first) as `tbf` counts them: the
/// Ethernet frame, plus the headers of every further segment a GSO frame
/// stands for.
fn wire_bytes(frame: &[u8]) -> u64 {
    let n = frame.len().saturating_sub(VNET_HDR) as u64;
    let gso_type = frame.get(1).copied().unwrap_or(0);
    let gso_size = frame
        .get(4..6)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .unwrap_or(0) as u64;
    if gso_type == 0 || gso_size == 0 {
        return n;
    }
    let segments = n.saturating_sub(SEGMENT_OVERHEAD).div_ceil(gso_size).max(1);
    n + (segments - 1) * SEGMENT_OVERHEAD
}

/// The forwarding loop of one direction, until `stop`.
fn forward(rx: &OwnedFd, tx: &OwnedFd, link: Link, counters: &Counters, stop: &AtomicBool) {
    // Wake-ups of 1 us precision instead of the default 50 us slack (the
    // LAN and SAN delays are tens of microseconds).
    // SAFETY: prctl with integer arguments; it only changes this thread's
    // timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut queued_bytes = 0usize;
    let mut link_free = Instant::now();
    let mut buf = vec![0u8; FRAME_MAX];
    // 1% faster than the tbf: never the bottleneck.
    let rate = (link.rate_bps + link.rate_bps / 100).max(1);
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        while queue.front().is_some_and(|(due, _)| *due <= now) {
            let (_, frame) = queue.pop_front().expect("checked");
            queued_bytes -= frame.len();
            // SAFETY: the pointer and length describe the live `frame`.
            let r = unsafe { libc::send(tx.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if r < 0 {
                counters.send_errors.fetch_add(1, Ordering::Relaxed);
            } else {
                counters.forwarded.fetch_add(1, Ordering::Relaxed);
            }
        }
        let wait = queue
            .front()
            .map(|(due, _)| due.saturating_duration_since(now))
            .unwrap_or(TICK)
            .min(TICK);
        if wait > SPIN {
            wait_readable(rx, wait - SPIN);
        } else {
            std::hint::spin_loop();
        }
        loop {
            // SAFETY: the pointer and length describe the live `buf`;
            // MSG_TRUNC makes the result the frame's real length.
            let r = unsafe {
                libc::recv(
                    rx.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if r < 0 {
                break;
            }
            let arrived = Instant::now();
            let n = r as usize;
            if n > buf.len() {
                counters.dropped_truncated.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if queue.len() >= link.max_frames || queued_bytes + n > link.max_bytes {
                counters.dropped_full.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let frame = buf[..n].to_vec();
            let bits = wire_bytes(&frame) * 8;
            let serialise = Duration::from_nanos(bits.saturating_mul(1_000_000_000) / rate);
            link_free = link_free.max(arrived) + serialise;
            queued_bytes += n;
            queue.push_back((link_free + link.delay, frame));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_bytes_count_every_segment() {
        // A plain frame: 10-byte header, 100 bytes.
        let mut f = vec![0u8; 110];
        assert_eq!(wire_bytes(&f), 100);
        // A GSO frame of 3 full-size segments (1448 bytes each, 66 of
        // headers) is counted as the three frames of 1514 bytes.
        f = vec![0u8; 10 + 66 + 3 * 1448];
        f[1] = 1;
        f[4..6].copy_from_slice(&1448u16.to_le_bytes());
        assert_eq!(wire_bytes(&f), 3 * 1514);
        // One byte more: a fourth segment.
        f.push(0);
        assert_eq!(wire_bytes(&f), 3 * 1514 + 1 + 66);
        assert_eq!(wire_bytes(&[]), 0);
    }
}
