//! Small pieces shared by the scenarios: list and size parsing, CPU
//! pinning, percentiles, random pipe IDs, payloads, and the receiver's
//! message-id accounting.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use juxta_proto::id::{IdFormat, IdType, JxtaId, PipeId, NET_GROUP_UUID};
use serde::Serialize;

use crate::BenchError;

/// Runs `fut` on a task of its own and waits for it: a panic in it goes on
/// unwinding here; a task that ended without a result (the runtime shut
/// down) is a [`BenchError::Task`] naming `what`.
///
/// The benchmark's loops run so, not as the current-thread runtime's
/// `block_on` future: tokio polls the I/O driver once more (a zero-timeout
/// `epoll_wait`) before each poll of a `block_on` future another task
/// woke, which Juxta's lanes (answers handed over by a connection's reader
/// task) would pay per message and the `tcp` lane (woken by the driver)
/// would not.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let n = juxta_bench::util::on_task("adding", async { 1 + 1 }).await.unwrap();
/// assert_eq!(n, 2);
/// # });
/// ```
pub async fn on_task<T: Send + 'static>(
    what: &str,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, BenchError> {
    match tokio::spawn(fut).await {
        Ok(v) => Ok(v),
        Err(e) => match e.try_into_panic() {
            Ok(p) => std::panic::resume_unwind(p),
            Err(e) => Err(BenchError::Task {
                what: what.into(),
                reason: e.to_string(),
            }),
        },
    }
}

/// CPU placement of the client and responder processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pin {
    /// Both on CPU 0.
    Same,
    /// Client on CPU 0, responder on CPU 1.
    Split,
    /// No affinity.
    None,
}

impl Pin {
    /// Parses `same|split|none`.
    pub fn parse(s: &str) -> Result<Pin, BenchError> {
        match s {
            "same" => Ok(Pin::Same),
            "split" => Ok(Pin::Split),
            "none" => Ok(Pin::None),
            _ => Err(BenchError::BadOption(format!(
                "--pin {s:?} (expected same, split or none)"
            ))),
        }
    }
    /// The core the client (this process) runs on.
    pub fn client_core(self) -> Option<usize> {
        match self {
            Pin::None => None,
            _ => Some(0),
        }
    }
    /// The core the responder processes run on.
    pub fn responder_core(self) -> Option<usize> {
        match self {
            Pin::None => None,
            Pin::Same => Some(0),
            Pin::Split => Some(1),
        }
    }
}

/// Pins the calling thread (and threads it creates later) to `core`.
/// Best effort: a core this machine does not have leaves the thread as
/// it is (logged).
///
/// The mask is set directly, whatever the thread's current mask: a
/// responder process starts with the mask of the client that spawned it
/// (pinned to core 0), and choosing among the cores of that inherited
/// mask (as `core_affinity::get_core_ids` does) left every `--pin split`
/// responder on core 0 beside the client.
pub fn pin_current(core: Option<usize>) {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    if let Some(c) = core {
        let mut set = CpuSet::new();
        let r = set
            .set(c)
            .and_then(|()| sched_setaffinity(Pid::from_raw(0), &set));
        if let Err(e) = r {
            tracing::warn!(core = c, error = %e, "could not pin to this core");
        }
    }
}

/// Pins every thread of process `pid` to `core` (`None`: every CPU);
/// threads it starts later inherit the mask. Best effort: a process that
/// exits meanwhile is left alone.
pub fn pin_process(pid: u32, core: Option<usize>) {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    let cores = match core {
        Some(c) => c..c + 1,
        None => 0..CpuSet::count(),
    };
    for c in cores {
        let _ = set.set(c);
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for t in tasks.flatten() {
        if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) {
            let _ = sched_setaffinity(Pid::from_raw(tid), &set);
        }
    }
}

/// Splits a comma-separated list, trimming blanks, and parses each item.
pub fn parse_list<T>(
    s: &str,
    f: impl Fn(&str) -> Result<T, BenchError>,
) -> Result<Vec<T>, BenchError> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(f)
        .collect()
}

/// Largest payload a scenario accepts (the stream framing keeps two bits of
/// the 32-bit length for itself).
pub const MAX_SIZE: usize = (1 << 30) - 1;

/// Parses a byte count: `1024`, `1K`/`1KB`/`1k` (×1024), `1M`/`1MB` (×2^20).
pub fn parse_size(s: &str) -> Result<usize, BenchError> {
    let t = s.trim();
    let upper = t.to_ascii_uppercase();
    let digits = upper.trim_end_matches('B');
    let (num, mult) = if let Some(n) = digits.strip_suffix('K') {
        (n, 1usize << 10)
    } else if let Some(n) = digits.strip_suffix('M') {
        (n, 1 << 20)
    } else if let Some(n) = digits.strip_suffix('G') {
        (n, 1 << 30)
    } else if upper.ends_with('B') && !digits.is_empty() {
        (digits, 1)
    } else {
        (upper.as_str(), 1)
    };
    let v: usize = num
        .trim()
        .parse()
        .map_err(|_| BenchError::BadOption(format!("size {s:?}")))?;
    let v = v
        .checked_mul(mult)
        .ok_or_else(|| BenchError::BadOption(format!("size {s:?} too large")))?;
    if v > MAX_SIZE {
        return Err(BenchError::BadOption(format!(
            "size {s:?}: sizes of 1 GiB or more are not supported"
        )));
    }
    Ok(v)
}

/// Parses a list of sizes (see [`parse_size`]).
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, BenchError> {
    let v = parse_list(s, parse_size)?;
    if v.is_empty() {
        return Err(BenchError::BadOption(format!("empty size list {s:?}")));
    }
    Ok(v)
}

/// Parses a list of positive counts (`1,2,4,8`).
pub fn parse_counts(s: &str, what: &str) -> Result<Vec<usize>, BenchError> {
    let v = parse_list(s, |x| {
        x.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
            BenchError::BadOption(format!("{what} {x:?} (expected a positive integer)"))
        })
    })?;
    if v.is_empty() {
        return Err(BenchError::BadOption(format!("empty {what} list {s:?}")));
    }
    Ok(v)
}

/// Value at quantile `p` of sorted samples (nearest rank, rounded).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The median of unsorted samples.
pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    percentile(samples, 0.5)
}

/// The bench's payload pattern, `n` bytes.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + 7) as u8).collect()
}

/// 64 random bits from the standard library's per-process random hash keys
/// (enough for unique pipe IDs and connection tags; not for cryptography).
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// A new random pipe ID in the Net group (v4 UUID layout, as
/// `PipeId::random` builds it).
pub fn random_pipe_id() -> PipeId {
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&random_u64().to_le_bytes());
    u[8..].copy_from_slice(&random_u64().to_le_bytes());
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u[10] |= 0x80;
    PipeId::try_from(JxtaId::from_parts(
        IdFormat::Cbid,
        NET_GROUP_UUID,
        u,
        IdType::Pipe,
    ))
    .expect("a pipe-typed ID")
}

/// How many leading payload bytes carry the message id (all 8 unless the
/// payload is shorter; then the id's low bytes).
pub fn id_width(size: usize) -> usize {
    size.min(8)
}

/// Writes the low `id_width(buf.len())` bytes of `id`, big-endian, at the
/// start of `buf`.
pub fn put_id(buf: &mut [u8], id: u64) {
    let w = id_width(buf.len());
    buf[..w].copy_from_slice(&id.to_be_bytes()[8 - w..]);
}

/// Reads the id written by [`put_id`].
pub fn get_id(buf: &[u8]) -> u64 {
    let w = id_width(buf.len());
    let mut b = [0u8; 8];
    b[8 - w..].copy_from_slice(&buf[..w]);
    u64::from_be_bytes(b)
}

/// Payloads for one-way streams: one buffer reused across sends (the id is
/// rewritten in place once the runtime has let go of the previous send),
/// so the sender does not copy `size` bytes per message.
pub struct CountedPayload {
    size: usize,
    spare: Option<BytesMut>,
    /// Buffers that had to be built afresh because the previous one was
    /// still referenced.
    pub fresh_buffers: u64,
}

impl CountedPayload {
    /// Payloads of `size` bytes.
    pub fn new(size: usize) -> CountedPayload {
        CountedPayload {
            size,
            spare: None,
            fresh_buffers: 0,
        }
    }

    /// The payload carrying `id`.
    pub fn get(&mut self, id: u64) -> Bytes {
        let mut b = match self.spare.take() {
            Some(b) => b,
            None => {
                self.fresh_buffers += 1;
                BytesMut::from(&pattern(self.size)[..])
            }
        };
        put_id(&mut b, id);
        b.freeze()
    }

    /// Hands a payload back for reuse (kept only if nobody else holds it).
    pub fn put_back(&mut self, b: Bytes) {
        if let Ok(m) = b.try_into_mut() {
            if m.len() == self.size {
                self.spare = Some(m);
            }
        }
    }
}

/// The receiver's accounting of one stream of id-tagged messages: ids are
/// expected in order from 0; an id ahead of the expected one counts it and
/// marks the skipped ones lost; one behind (duplicate or late) is ignored.
/// Ids narrower than 8 bytes are compared modulo their width.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SeqCounter {
    /// Messages received.
    pub received: u64,
    /// Distinct messages delivered in order or ahead (what counts).
    pub unique: u64,
    /// Payload bytes received.
    pub bytes: u64,
    next: u64,
}

impl SeqCounter {
    /// Starts over (a new run).
    pub fn reset(&mut self) {
        *self = SeqCounter::default();
    }

    /// Counts a message whose payload is `payload`.
    pub fn observe(&mut self, payload: &[u8]) {
        self.received += 1;
        self.bytes += payload.len() as u64;
        let w = id_width(payload.len());
        if w == 0 {
            return;
        }
        let id = get_id(payload);
        let bits = 8 * w as u32;
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let diff = id.wrapping_sub(self.next) & mask;
        if diff < (1u64 << (bits - 1)) {
            self.unique += 1;
            self.next = self.next.wrapping_add(diff + 1);
        }
    }

    /// Loss in percent of `sent` messages.
    pub fn loss_pct(&self, sent: u64) -> f64 {
        loss_pct(sent, self.unique)
    }

    /// The 24-byte report: received, unique, bytes (big-endian u64s).
    pub fn report(&self) -> [u8; 24] {
        let mut r = [0u8; 24];
        r[..8].copy_from_slice(&self.received.to_be_bytes());
        r[8..16].copy_from_slice(&self.unique.to_be_bytes());
        r[16..].copy_from_slice(&self.bytes.to_be_bytes());
        r
    }
}

/// What the receiver reports at the end of a one-way run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    /// Messages received.
    pub received: u64,
    /// Distinct messages (by id).
    pub unique: u64,
    /// Payload bytes received.
    pub bytes: u64,
}

impl Report {
    /// Parses [`SeqCounter::report`].
    pub fn parse(b: &[u8]) -> Option<Report> {
        if b.len() != 24 {
            return None;
        }
        let u = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Report {
            received: u(0),
            unique: u(8),
            bytes: u(16),
        })
    }
}

/// `100 * (sent - delivered) / sent`, 0 when nothing was sent.
pub fn loss_pct(sent: u64, delivered: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        100.0 * sent.saturating_sub(delivered) as f64 / sent as f64
    }
}

/// What `/proc` says about a process.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ProcUsage {
    /// Resident set, MB (`VmRSS`).
    pub rss_mb: f64,
    /// Peak resident set, MB (`VmHWM`).
    pub hwm_mb: f64,
    /// CPU time used, user + system, s.
    pub cpu_s: f64,
}

/// [`ProcUsage`] of process `pid` (`None` if it is gone).
pub fn proc_usage(pid: u32) -> Option<ProcUsage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |field: &str| -> Option<f64> {
        status
            .lines()
            .find(|l| l.starts_with(field))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime (fields 14 and 15) are 12 and 13 after the comm.
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    let hz = match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(hz)) if hz > 0 => hz as f64,
        _ => 100.0,
    };
    Some(ProcUsage {
        rss_mb: kb("VmRSS:")? / 1024.0,
        hwm_mb: kb("VmHWM:")? / 1024.0,
        cpu_s: ticks / hz,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs the calling thread may run on.
    fn allowed() -> Vec<usize> {
        use nix::sched::{sched_getaffinity, CpuSet};
        let set = sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("affinity");
        (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect()
    }

    #[test]
    fn a_thread_pinned_to_one_core_can_be_pinned_to_another() {
        // As a `--pin split` responder: spawned by a client pinned to core
        // 0, it must still get core 1 (the highest core this test may use
        // here; the same core on a one-CPU machine).
        let last = *allowed().last().expect("some CPU");
        let first = *allowed().first().expect("some CPU");
        let got = std::thread::spawn(move || {
            pin_current(Some(first));
            let pinned_first = allowed();
            pin_current(Some(last));
            (pinned_first, allowed())
        })
        .join()
        .expect("thread");
        assert_eq!(got, (vec![first], vec![last]));
    }

    #[test]
    fn pinning_to_a_core_the_machine_lacks_changes_nothing() {
        let before = allowed();
        let got = std::thread::spawn(|| {
            pin_current(Some(nix::sched::CpuSet::count() + 1));
            pin_current(None);
            allowed()
        })
        .join()
        .expect("thread");
        assert_eq!(got, before);
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("1").unwrap(), 1);
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64kb").unwrap(), 65536);
        assert_eq!(parse_size("1MB").unwrap(), 1 << 20);
        assert_eq!(parse_size("20B").unwrap(), 20);
        assert!(parse_size("1G").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(
            parse_sizes("1, 1K,,64K,1M").unwrap(),
            vec![1, 1024, 65536, 1 << 20]
        );
        assert!(parse_sizes(" , ").is_err());
    }

    #[test]
    fn counts_parse_positive() {
        assert_eq!(
            parse_counts("1,2,4,8", "receivers").unwrap(),
            vec![1, 2, 4, 8]
        );
        assert!(parse_counts("0", "receivers").is_err());
        assert!(parse_counts("a", "receivers").is_err());
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        let mut u = vec![3.0, 1.0, 2.0];
        assert_eq!(median(&mut u), 2.0);
    }

    #[test]
    fn pipe_ids_are_random_and_round_trip() {
        let a = random_pipe_id();
        let b = random_pipe_id();
        assert_ne!(a, b);
        let s = a.to_string();
        assert!(s.starts_with("urn:jxta:cbid-"), "{s}");
        assert_eq!(s.parse::<PipeId>().unwrap(), a);
    }

    #[test]
    fn ids_round_trip_in_any_width() {
        for size in [1usize, 3, 8, 100] {
            let mut b = pattern(size);
            put_id(&mut b, 0x0102_0304_0506_0708);
            let w = id_width(size);
            let mask = if w == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * w)) - 1
            };
            assert_eq!(get_id(&b), 0x0102_0304_0506_0708 & mask);
            // The rest of the payload is untouched.
            assert_eq!(b[w..], pattern(size)[w..]);
        }
    }

    #[test]
    fn seq_counter_counts_in_order_gaps_and_duplicates() {
        let msg = |id: u64| {
            let mut b = vec![0u8; 16];
            put_id(&mut b, id);
            b
        };
        let mut c = SeqCounter::default();
        for id in 0..10 {
            c.observe(&msg(id));
        }
        assert_eq!((c.received, c.unique, c.bytes), (10, 10, 160));
        assert_eq!(c.loss_pct(10), 0.0);
        // 10..12 lost, then 13; then a duplicate of 5.
        c.observe(&msg(13));
        c.observe(&msg(5));
        assert_eq!((c.received, c.unique), (12, 11));
        assert!((c.loss_pct(14) - 100.0 * 3.0 / 14.0).abs() < 1e-9);
        let r = Report::parse(&c.report()).unwrap();
        assert_eq!((r.received, r.unique, r.bytes), (12, 11, 192));
        c.reset();
        assert_eq!(c, SeqCounter::default());
    }

    #[test]
    fn seq_counter_wraps_one_byte_ids() {
        let mut c = SeqCounter::default();
        for id in 0..1000u64 {
            let mut b = [0u8; 1];
            put_id(&mut b, id);
            c.observe(&b);
        }
        assert_eq!((c.received, c.unique), (1000, 1000));
        assert_eq!(c.loss_pct(1000), 0.0);
        // A one-byte duplicate of the last id is not counted twice.
        c.observe(&[(999 % 256) as u8]);
        assert_eq!(c.unique, 1000);
    }

    #[test]
    fn counted_payload_reuses_its_buffer() {
        let mut p = CountedPayload::new(32);
        let a = p.get(1);
        assert_eq!(get_id(&a), 1);
        p.put_back(a);
        let b = p.get(2);
        assert_eq!(get_id(&b), 2);
        let held = b.clone();
        p.put_back(b);
        // Still referenced elsewhere: not reused.
        let c = p.get(3);
        assert_eq!(get_id(&held), 2);
        assert_eq!(get_id(&c), 3);
        assert_eq!(p.fresh_buffers, 2);
        assert!(loss_pct(0, 0) == 0.0 && loss_pct(4, 3) == 25.0);
    }
}
