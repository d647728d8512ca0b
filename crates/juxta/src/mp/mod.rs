//! Message passing on Juxta peers: an MPI-like [`Communicator`] for a job
//! of `N` ranks, each rank a [`Peer`] talking to the others over direct
//! compact-framed endpoint connections.
//!
//! * Bootstrap (see [`Communicator::join`]): rank 0 listens on the job's
//!   *seed* address; every other rank starts a peer on an ephemeral
//!   loopback port, connects to the seed and says hello (rank, size,
//!   address). Rank 0 answers everyone with the table (rank → peer ID,
//!   address); then rank `j` connects to every rank `0 < i < j` and says
//!   so, so each pair has exactly one connection. Peer IDs are proven by
//!   the Juxta handshake: a message is taken as coming from rank `r` only
//!   when it arrives on the connection on which `r`'s peer ID was proven.
//! * Point-to-point: [`Communicator::send`]/[`Communicator::recv`] match on
//!   (source, tag), with [`ANY_SOURCE`]/[`ANY_TAG`]; non-overtaking per
//!   (source, tag) as in MPI. Sends are eager: a send returns once the
//!   message is on the socket. Messages that arrive before their receive
//!   wait in a bounded unexpected-message queue; when it is full the
//!   communicator stops reading (push-back to the senders, counted).
//! * Collectives use binomial trees (bcast, reduce, gather, scatter),
//!   recursive doubling or, from 32 KiB, reduce-scatter + allgather
//!   (allreduce), Bruck (allgather), dissemination
//!   (barrier) and pairwise exchange (alltoall); each carries its kind,
//!   root, count and datatype, so ranks that call different collectives
//!   get [`MpError::CollectiveMismatch`].
//! * Failures: a rank whose connection closes makes the operations waiting
//!   on it fail with [`MpError::RankDead`] (checked every
//!   [`MpConfig::liveness_interval`]); [`MpConfig::op_timeout`] bounds any
//!   single wait.
//!
//! ```no_run
//! # async fn demo() -> Result<(), juxta::mp::MpError> {
//! use juxta::mp::{Communicator, ReduceOp, ANY_SOURCE};
//! // Launched with `juxta run -n 4 -- ./my-program`:
//! let comm = Communicator::from_env().await?;
//! let mut x = [comm.rank() as f64];
//! comm.allreduce(&mut x, ReduceOp::Sum).await?;
//! assert_eq!(x[0], (0..comm.size()).sum::<usize>() as f64);
//! if comm.rank() == 0 {
//!     let mut buf = [0i32; 4];
//!     let st = comm.recv(ANY_SOURCE, 7, &mut buf).await?;
//!     println!("{} ints from rank {}", st.len / 4, st.source);
//! } else if comm.rank() == 1 {
//!     comm.send(0, 7, &[1i32, 2, 3, 4]).await?;
//! }
//! comm.barrier().await?;
//! # Ok(()) }
//! ```

mod boot;
mod coll;
mod datatype;
mod inbox;
pub mod launch;
mod wire;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use juxta_proto::id::PeerId;
use juxta_proto::message::Message;
use tokio::sync::oneshot;

use crate::endpoint::{Messenger, SendError};
use crate::peer::{Peer, PeerError};

pub use boot::{
    ENV_HOMES, ENV_JOB, ENV_LISTEN, ENV_RANK, ENV_SEED, ENV_SIZE, ENV_SPIN_US, ENV_TIMEOUT,
};
pub use datatype::{Datatype, ReduceOp};
pub(crate) use inbox::Inbox;
pub use wire::HeaderError;
use wire::{Header, CTX_COLL, CTX_P2P, ELEM_DATA, ELEM_HDR};

/// Runs a rank's program the way its messages are received fastest: on a
/// single-threaded tokio runtime (as an MPI process is one thread), with
/// the program in a task of its own rather than as the runtime's
/// `block_on` future.
///
/// Why: tokio's current-thread scheduler polls the `block_on` future
/// before the tasks an I/O event woke (here, the connection's reader). A
/// receive waiting there sees a message only one scheduler turn (an
/// `epoll_wait` and the timer, signal and I/O drivers) after the reader
/// queued it; a task is polled right after the reader, in the same turn.
/// On this project's 2-core VM that turn is about 0.5 µs per message:
/// a 2-byte ping-pong took 13.7-13.8 µs from `block_on` and 12.6 µs from
/// a task (docs/message-passing.md). Any program works either way; this
/// is only faster. A panic in `program` is raised again here.
///
/// ```no_run
/// use juxta::mp::{Communicator, MpError};
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     juxta::mp::rank_main(async {
///         let comm = Communicator::from_env().await?;
///         comm.barrier().await?;
///         Ok::<(), MpError>(())
///     })??;
///     Ok(())
/// }
/// ```
pub fn rank_main<F>(program: F) -> std::io::Result<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match rt.block_on(async move { tokio::spawn(program).await }) {
        Ok(v) => Ok(v),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// Matches a message from any source.
pub const ANY_SOURCE: usize = usize::MAX;
/// Matches a message with any tag.
pub const ANY_TAG: i32 = -1;
/// Largest rank count of a job.
pub const MAX_RANKS: usize = 4096;
/// Endpoint service name of communicator traffic (the param is the job).
pub const SERVICE: &str = "juxta-mp";

/// Errors of the communicator.
#[derive(Debug, thiserror::Error)]
pub enum MpError {
    /// The receive buffer is smaller than the matched message; the message
    /// stays queued for the next receive.
    #[error("message of {len} bytes from rank {source_rank} (tag {tag}) does not fit a buffer of {capacity} bytes")]
    Truncated {
        /// sender
        source_rank: usize,
        /// its tag
        tag: i32,
        /// message bytes
        len: usize,
        /// buffer bytes
        capacity: usize,
    },
    /// A rank's connection closed (the process died or left) while an
    /// operation needed it.
    #[error("rank {rank} is gone (its connection closed)")]
    RankDead {
        /// the rank
        rank: usize,
    },
    /// An operation waited longer than [`MpConfig::op_timeout`].
    #[error("timed out after {after:?} waiting for rank {rank}")]
    Timeout {
        /// the rank waited on ([`ANY_SOURCE`] for any)
        rank: usize,
        /// how long
        after: Duration,
    },
    /// A rank outside `0..size`.
    #[error("rank {rank} is out of range (job of {size} ranks)")]
    RankOutOfRange {
        /// the rank given
        rank: usize,
        /// the job size
        size: usize,
    },
    /// A negative tag other than [`ANY_TAG`], or [`ANY_TAG`] on a send.
    #[error("bad tag {0} (tags are >= 0; ANY_TAG only on receives)")]
    BadTag(i32),
    /// Ranks called different collectives, or the same one with different
    /// roots, counts, datatypes or operations.
    #[error("collective mismatch with rank {rank}: {what} is {got} there, {expected} here")]
    CollectiveMismatch {
        /// the other rank
        rank: usize,
        /// what differs (kind, root, count, datatype, length)
        what: &'static str,
        /// value at this rank
        expected: u64,
        /// value at the other rank
        got: u64,
    },
    /// A buffer whose length does not fit the operation (scatter's
    /// `count * size`, alltoall's multiple of the size, a message whose
    /// bytes are not a whole number of elements).
    #[error("bad buffer length {len} ({why})")]
    BadLength {
        /// the length
        len: usize,
        /// what was expected
        why: &'static str,
    },
    /// A message to self did not fit the unexpected-message queue.
    #[error("unexpected-message queue full (message to self refused)")]
    QueueFull,
    /// Sending to a rank failed.
    #[error("sending to rank {rank}: {source}")]
    Send {
        /// the rank
        rank: usize,
        /// the error
        #[source]
        source: SendError,
    },
    /// The local peer failed.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// The job could not be set up.
    #[error("bootstrap: {0}")]
    Boot(#[from] boot::BootError),
    /// The local peer stopped delivering (it is shutting down).
    #[error("the local peer is gone")]
    Closed,
}

/// Settings of a communicator.
#[derive(Debug, Clone)]
pub struct MpConfig {
    /// Longest any single wait (a receive, a collective step) may take;
    /// `None` (the default): no limit, only a dead rank ends a wait.
    pub op_timeout: Option<Duration>,
    /// How often a waiting operation checks that the rank it waits on is
    /// still connected (default 50 ms). A dead rank fails waits within
    /// about twice this.
    pub liveness_interval: Duration,
    /// How long the bootstrap may take (default 60 s).
    pub boot_timeout: Duration,
    /// Most messages in the unexpected-message queue (default 65536).
    pub max_unexpected: usize,
    /// Most payload bytes in the unexpected-message queue (default
    /// 256 MiB); one message larger than this is still taken when the
    /// queue is empty.
    pub max_unexpected_bytes: usize,
    /// Largest message (default 64 MiB, the frame limit).
    pub max_message: u64,
    /// RSA key size of the ranks' peer identities (default 2048).
    pub key_bits: usize,
    /// How long a receive busy-polls (yielding to the runtime, which polls
    /// the sockets without sleeping) before it parks (default 2 ms; zero:
    /// never). Saves the wake-up of a parked thread on every message (and
    /// on every socket read of a large one), at the cost of CPU while
    /// waiting, as MPI's progress engine does. `juxta run` turns it off
    /// (through [`ENV_SPIN_US`]) when the job has more ranks than the
    /// machine has cores: spinning ranks would steal the CPU of the ones
    /// computing.
    pub spin: Duration,
    /// Address this rank's peer listens on (default `127.0.0.1:0`; rank 0
    /// listens on the seed).
    pub listen: SocketAddr,
    /// Directory the rank's temporary peer home is made in (default
    /// `None`: the system's temporary directory; [`ENV_HOMES`] under
    /// `juxta run`).
    pub homes: Option<std::path::PathBuf>,
}

impl Default for MpConfig {
    fn default() -> Self {
        MpConfig {
            op_timeout: None,
            liveness_interval: Duration::from_millis(50),
            boot_timeout: Duration::from_secs(60),
            max_unexpected: 65536,
            max_unexpected_bytes: 256 << 20,
            max_message: juxta_proto::wire::frame::DEFAULT_MAX_MESSAGE,
            key_bits: 2048,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            spin: Duration::from_millis(2),
            homes: None,
        }
    }
}

/// What a receive matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Sender's rank.
    pub source: usize,
    /// The message's tag.
    pub tag: i32,
    /// Payload bytes.
    pub len: usize,
}

crate::counters::counters! {
    /// Counters of a communicator.
    pub struct MpStats;
    /// The live counters behind [`MpStats`].
    struct MpCounters;
    {
        /// Messages refused because their sender is not a rank of this job
        /// (or did not prove its peer ID).
        refused_outsider,
        /// Messages refused because their header was malformed or claimed
        /// another rank than the connection's.
        refused_malformed,
        /// Times the unexpected-message queue was full and reading stopped.
        pushback,
        /// Receives that found a message larger than their buffer.
        truncated,
    }
}

/// A received message waiting to be matched.
#[derive(Debug)]
struct Envelope {
    hdr: Header,
    src: usize,
    data: Bytes,
}

/// What a receive waits for.
#[derive(Debug, Clone, Copy)]
struct Want {
    ctx: u8,
    src: usize,
    tag: i32,
    seq: u64,
}

impl Want {
    fn matches(&self, e: &Envelope) -> bool {
        e.hdr.ctx == self.ctx
            && (self.src == ANY_SOURCE || self.src == e.src)
            && if self.ctx == CTX_P2P {
                self.tag == ANY_TAG || self.tag == e.hdr.tag
            } else {
                // Collectives: the round (tag) is checked once matched,
                // so that a rank in another collective is reported.
                self.seq == e.hdr.seq
            }
    }
}

struct Shared {
    rank: usize,
    size: usize,
    job: String,
    cfg: MpConfig,
    links: Vec<Option<Messenger>>,
    /// The wire address of the job's traffic (the service and job mangled
    /// with the Net group), computed once instead of per message.
    wire_to: juxta_proto::endpoint::ServiceAddress,
    /// The receive queue, filled by the connections' readers.
    inbox: inbox::Registered,
    coll_seq: AtomicU64,
    // Dropped last: the messengers and inbox above belong to it.
    peer: Peer,
    _home: Option<tempfile::TempDir>,
}

/// One rank's handle on a job: cheap to clone (all clones are the same
/// rank). Dropping the last clone stops the rank's peer, which the other
/// ranks see as [`MpError::RankDead`].
///
/// One collective at a time per communicator (as in MPI: every rank calls
/// the collectives in the same order); point-to-point operations may run
/// concurrently from several tasks.
#[derive(Clone)]
pub struct Communicator {
    s: Arc<Shared>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.s.rank)
            .field("size", &self.s.size)
            .field("job", &self.s.job)
            .finish()
    }
}

/// A pending non-blocking operation ([`Communicator::isend`],
/// [`Communicator::irecv`]).
#[derive(Debug)]
pub struct Request<T> {
    rx: oneshot::Receiver<Result<T, MpError>>,
    done: Option<Result<T, MpError>>,
}

impl<T: Send + 'static> Request<T> {
    fn spawn<F>(f: F) -> Request<T>
    where
        F: std::future::Future<Output = Result<T, MpError>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let _ = tx.send(f.await);
        });
        Request { rx, done: None }
    }

    /// Waits for the operation to finish.
    pub async fn wait(self) -> Result<T, MpError> {
        if let Some(r) = self.done {
            return r;
        }
        self.rx.await.unwrap_or(Err(MpError::Closed))
    }

    /// Whether the operation has finished (then [`Request::wait`] returns
    /// at once).
    pub fn test(&mut self) -> bool {
        if self.done.is_some() {
            return true;
        }
        match self.rx.try_recv() {
            Ok(r) => {
                self.done = Some(r);
                true
            }
            Err(oneshot::error::TryRecvError::Empty) => false,
            Err(oneshot::error::TryRecvError::Closed) => {
                self.done = Some(Err(MpError::Closed));
                true
            }
        }
    }
}

fn cast_len<T: Datatype>(len: usize) -> Result<usize, MpError> {
    let sz = std::mem::size_of::<T>();
    if !len.is_multiple_of(sz) {
        return Err(MpError::BadLength {
            len,
            why: "not a whole number of elements",
        });
    }
    Ok(len / sz)
}

/// A typed copy of received bytes.
pub(crate) fn to_vec<T: Datatype>(b: &[u8]) -> Result<Vec<T>, MpError> {
    let n = cast_len::<T>(b.len())?;
    let mut v = vec![T::zeroed(); n];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(b);
    Ok(v)
}

impl Communicator {
    /// This rank, in `0..size()`.
    pub fn rank(&self) -> usize {
        self.s.rank
    }

    /// Ranks in the job.
    pub fn size(&self) -> usize {
        self.s.size
    }

    /// The job's name (the endpoint param of its traffic).
    pub fn job(&self) -> &str {
        &self.s.job
    }

    /// The rank's peer.
    pub fn peer(&self) -> &Peer {
        &self.s.peer
    }

    /// A snapshot of this communicator's counters.
    pub fn stats(&self) -> MpStats {
        self.s.inbox.stats.snapshot()
    }

    /// Peer ID of `rank`.
    pub fn peer_of(&self, rank: usize) -> Option<PeerId> {
        if rank == self.s.rank {
            return Some(self.s.peer.peer_id());
        }
        self.s.links.get(rank)?.as_ref().map(|m| m.remote())
    }

    fn check_rank(&self, rank: usize) -> Result<(), MpError> {
        if rank >= self.s.size {
            return Err(MpError::RankOutOfRange {
                rank,
                size: self.s.size,
            });
        }
        Ok(())
    }

    fn check_src(&self, src: usize, tag: i32) -> Result<(), MpError> {
        if src != ANY_SOURCE {
            self.check_rank(src)?;
        }
        if tag < 0 && tag != ANY_TAG {
            return Err(MpError::BadTag(tag));
        }
        Ok(())
    }

    /// Sends `data` to `dest` with `tag` (one copy of the slice into the
    /// message; [`Communicator::send_bytes`] sends without one).
    pub async fn send<T: Datatype>(
        &self,
        dest: usize,
        tag: i32,
        data: &[T],
    ) -> Result<(), MpError> {
        self.send_bytes(
            dest,
            tag,
            Bytes::copy_from_slice(bytemuck::cast_slice(data)),
        )
        .await
    }

    /// Sends `data` to `dest` with `tag`, without copying it.
    pub async fn send_bytes(&self, dest: usize, tag: i32, data: Bytes) -> Result<(), MpError> {
        self.check_rank(dest)?;
        if tag < 0 {
            return Err(MpError::BadTag(tag));
        }
        let hdr = Header {
            ctx: CTX_P2P,
            op: 0,
            dtype: 0,
            src: self.s.rank as u32,
            tag,
            root: 0,
            count: data.len() as u64,
            seq: 0,
        };
        self.post(dest, hdr, data).await
    }

    /// Sends one message with this header.
    async fn post(&self, dest: usize, hdr: Header, data: Bytes) -> Result<(), MpError> {
        if data.len() as u64 > self.s.cfg.max_message.saturating_sub(1024) {
            return Err(MpError::BadLength {
                len: data.len(),
                why: "larger than MpConfig::max_message",
            });
        }
        let Some(m) = &self.s.links[dest] else {
            // To self: straight into the queue.
            let e = Envelope {
                hdr,
                src: dest,
                data,
            };
            if !self.s.inbox.push_local(e) {
                return Err(MpError::QueueFull);
            }
            return Ok(());
        };
        let msg = Message {
            elements: vec![
                wire::element(ELEM_HDR, hdr.encode()),
                wire::element(ELEM_DATA, data),
            ],
        };
        let sent = if m.is_routed() {
            m.send(SERVICE, Some(&self.s.job), msg).await
        } else {
            m.send_raw(&self.s.wire_to, msg).await
        };
        match sent {
            Ok(_) => Ok(()),
            Err(SendError::Closed(_)) => Err(MpError::RankDead { rank: dest }),
            Err(source) => Err(MpError::Send { rank: dest, source }),
        }
    }

    /// Receives a message from `source` (or [`ANY_SOURCE`]) with `tag` (or
    /// [`ANY_TAG`]) into `buf`. A message larger than `buf` is
    /// [`MpError::Truncated`] and stays queued.
    pub async fn recv<T: Datatype>(
        &self,
        source: usize,
        tag: i32,
        buf: &mut [T],
    ) -> Result<Status, MpError> {
        self.check_src(source, tag)?;
        let cap = std::mem::size_of_val(buf);
        let e = self
            .take(
                Want {
                    ctx: CTX_P2P,
                    src: source,
                    tag,
                    seq: 0,
                },
                Some(cap),
                false,
                None,
            )
            .await?;
        let len = e.data.len();
        cast_len::<T>(len)?;
        bytemuck::cast_slice_mut::<T, u8>(buf)[..len].copy_from_slice(&e.data);
        Ok(Status {
            source: e.src,
            tag: e.hdr.tag,
            len,
        })
    }

    /// Receives a message as the bytes it arrived in (no copy).
    pub async fn recv_bytes(&self, source: usize, tag: i32) -> Result<(Bytes, Status), MpError> {
        self.check_src(source, tag)?;
        let e = self
            .take(
                Want {
                    ctx: CTX_P2P,
                    src: source,
                    tag,
                    seq: 0,
                },
                None,
                false,
                None,
            )
            .await?;
        let st = Status {
            source: e.src,
            tag: e.hdr.tag,
            len: e.data.len(),
        };
        Ok((e.data, st))
    }

    /// Receives a message into a new vector of its length.
    pub async fn recv_vec<T: Datatype>(
        &self,
        source: usize,
        tag: i32,
    ) -> Result<(Vec<T>, Status), MpError> {
        let (b, st) = self.recv_bytes(source, tag).await?;
        Ok((to_vec(&b)?, st))
    }

    /// Waits for a matching message and tells what it is, leaving it
    /// queued.
    pub async fn probe(&self, source: usize, tag: i32) -> Result<Status, MpError> {
        self.check_src(source, tag)?;
        let e = self
            .take(
                Want {
                    ctx: CTX_P2P,
                    src: source,
                    tag,
                    seq: 0,
                },
                None,
                true,
                None,
            )
            .await?;
        Ok(Status {
            source: e.src,
            tag: e.hdr.tag,
            len: e.data.len(),
        })
    }

    /// [`Communicator::probe`] without waiting: `None` if no matching
    /// message has arrived yet.
    pub fn iprobe(&self, source: usize, tag: i32) -> Result<Option<Status>, MpError> {
        self.check_src(source, tag)?;
        let want = Want {
            ctx: CTX_P2P,
            src: source,
            tag,
            seq: 0,
        };
        let q = self.s.inbox.state.lock().expect("mp queue lock");
        Ok(q.items.iter().find(|e| want.matches(e)).map(|e| Status {
            source: e.src,
            tag: e.hdr.tag,
            len: e.data.len(),
        }))
    }

    /// Starts sending `data`; the returned request finishes once it is on
    /// the socket.
    pub fn isend(&self, dest: usize, tag: i32, data: Bytes) -> Request<()> {
        let c = self.clone();
        Request::spawn(async move { c.send_bytes(dest, tag, data).await })
    }

    /// Starts receiving a matching message.
    pub fn irecv(&self, source: usize, tag: i32) -> Request<(Bytes, Status)> {
        let c = self.clone();
        Request::spawn(async move { c.recv_bytes(source, tag).await })
    }

    /// Sends `send` to `dest` and receives into `recv` from `source` at
    /// once (no deadlock when two ranks exchange).
    #[allow(clippy::too_many_arguments)]
    pub async fn sendrecv<T: Datatype>(
        &self,
        dest: usize,
        send_tag: i32,
        send: &[T],
        source: usize,
        recv_tag: i32,
        recv: &mut [T],
    ) -> Result<Status, MpError> {
        let (a, b) = tokio::join!(
            self.send(dest, send_tag, send),
            self.recv(source, recv_tag, recv)
        );
        a?;
        b
    }

    /// Takes (or with `peek`, finds) the first queued message matching
    /// `want`, waiting while none is there (the connections' readers queue
    /// what arrives, see [`Inbox`]). `cap`:
    /// the largest message the caller takes (else `Truncated`).
    async fn take(
        &self,
        want: Want,
        cap: Option<usize>,
        peek: bool,
        coll: Option<&Header>,
    ) -> Result<Envelope, MpError> {
        let s = &*self.s;
        let ib = &*s.inbox;
        // Read only when a deadline applies (a clock read per receive
        // otherwise).
        let start = s.cfg.op_timeout.map(|_| Instant::now());
        let mut dead_seen: Option<usize> = None;
        loop {
            // What was queued up to here is looked at below; anything
            // later changes the counter (seen by the busy-poll, or by the
            // check made after registering to be woken).
            let seen = ib.arrivals.load(Ordering::SeqCst);
            if let Some(e) = self.try_take(&want, cap, peek, coll)? {
                return Ok(e);
            }
            let mut progressed = false;
            if !s.cfg.spin.is_zero() {
                // Busy-poll first (as MPI's progress engine does): each
                // yield lets the runtime poll the sockets without
                // sleeping, and the connection's reader queue what came;
                // a reply due in microseconds is taken without the
                // wake-up of a parked thread.
                let until = Instant::now() + s.cfg.spin;
                let mut polls = 0u32;
                loop {
                    tokio::task::yield_now().await;
                    if ib.arrivals.load(Ordering::SeqCst) != seen {
                        progressed = true;
                        break;
                    }
                    // The clock every 16 polls (a poll is well under a
                    // microsecond): the spin ends within a few µs of `until`.
                    polls = polls.wrapping_add(1);
                    if polls.is_multiple_of(16) && Instant::now() >= until {
                        break;
                    }
                }
            }
            if !progressed {
                // Parks: registered to be woken first, then counted as
                // parked, then the counter checked again. A message queued
                // meanwhile is either seen here or wakes this waiter (the
                // queue wakes waiters only while one is counted; both
                // sides' operations are SeqCst). (A full queue makes the
                // readers wait for room, counted there: a message this
                // receive waits for may be behind.)
                let notified = ib.arrived.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                // Uncounted on drop, also when this receive is cancelled
                // while parked.
                let _parked = inbox::Parked::new(&ib.parked);
                progressed = ib.arrivals.load(Ordering::SeqCst) != seen
                    || tokio::time::timeout(s.cfg.liveness_interval, notified)
                        .await
                        .is_ok();
            }
            if progressed {
                continue;
            }
            // Liveness: a rank seen dead on two checks a tick apart (so
            // its last messages have been read) fails the wait.
            let dead = self.dead_rank(want.src);
            match (dead, dead_seen) {
                (Some(r), Some(p)) if r == p => {
                    if let Some(e) = self.try_take(&want, cap, peek, coll)? {
                        return Ok(e);
                    }
                    return Err(MpError::RankDead { rank: r });
                }
                (d, _) => dead_seen = d,
            }
            if let (Some(t), Some(start)) = (s.cfg.op_timeout, start) {
                if start.elapsed() >= t {
                    return Err(MpError::Timeout {
                        rank: want.src,
                        after: start.elapsed(),
                    });
                }
            }
        }
    }

    /// The first dead rank among those `src` stands for.
    fn dead_rank(&self, src: usize) -> Option<usize> {
        let closed = |r: usize| {
            self.s
                .links
                .get(r)
                .and_then(|m| m.as_ref())
                .is_some_and(|m| m.connection().is_closed())
        };
        if src == ANY_SOURCE {
            (0..self.s.size).find(|&r| closed(r))
        } else {
            closed(src).then_some(src)
        }
    }

    fn try_take(
        &self,
        want: &Want,
        cap: Option<usize>,
        peek: bool,
        coll: Option<&Header>,
    ) -> Result<Option<Envelope>, MpError> {
        let ib = &*self.s.inbox;
        let mut q = ib.state.lock().expect("mp queue lock");
        let Some(i) = q.items.iter().position(|e| want.matches(e)) else {
            if let Some(h) = coll {
                // Another rank's message of this very collective that
                // disagrees on it: the ranks called different collectives.
                for e in q
                    .items
                    .iter()
                    .filter(|e| e.hdr.ctx == CTX_COLL && e.hdr.seq == h.seq)
                {
                    coll_mismatch(h, e)?;
                }
            }
            return Ok(None);
        };
        let e = &q.items[i];
        if let Some(cap) = cap {
            if e.data.len() > cap {
                ib.stats.truncated.fetch_add(1, Ordering::Relaxed);
                return Err(MpError::Truncated {
                    source_rank: e.src,
                    tag: e.hdr.tag,
                    len: e.data.len(),
                    capacity: cap,
                });
            }
        }
        if peek {
            return Ok(Some(Envelope {
                hdr: e.hdr,
                src: e.src,
                data: e.data.clone(),
            }));
        }
        Ok(ib.remove(&mut q, i))
    }
}

/// Whether `e` belongs to the collective `expect` describes.
fn coll_mismatch(expect: &Header, e: &Envelope) -> Result<(), MpError> {
    let checks: [(&'static str, u64, u64); 4] = [
        ("kind", u64::from(expect.op), u64::from(e.hdr.op)),
        ("root", u64::from(expect.root), u64::from(e.hdr.root)),
        ("count", expect.count, e.hdr.count),
        ("datatype", u64::from(expect.dtype), u64::from(e.hdr.dtype)),
    ];
    for (what, expected, got) in checks {
        if expected != got {
            return Err(MpError::CollectiveMismatch {
                rank: e.src,
                what,
                expected,
                got,
            });
        }
    }
    Ok(())
}

impl Shared {
    fn next_seq(&self) -> u64 {
        self.coll_seq.fetch_add(1, Ordering::Relaxed)
    }
}

impl Communicator {
    /// Receives the collective message of round `round` of collective
    /// `seq` from `src`, checking that it belongs to the same collective.
    async fn coll_recv(&self, src: usize, expect: &Header) -> Result<Bytes, MpError> {
        let e = self
            .take(
                Want {
                    ctx: CTX_COLL,
                    src,
                    tag: expect.tag,
                    seq: expect.seq,
                },
                None,
                false,
                Some(expect),
            )
            .await?;
        coll_mismatch(expect, &e)?;
        if e.hdr.tag != expect.tag {
            return Err(MpError::CollectiveMismatch {
                rank: src,
                what: "round",
                expected: expect.tag as u64,
                got: e.hdr.tag as u64,
            });
        }
        Ok(e.data)
    }

    async fn coll_send(&self, dest: usize, hdr: &Header, data: Bytes) -> Result<(), MpError> {
        let mut h = *hdr;
        h.src = self.s.rank as u32;
        self.post(dest, h, data).await
    }

    /// Sends to `dest` and receives from `src` in one step.
    async fn coll_exchange(
        &self,
        dest: usize,
        src: usize,
        hdr: &Header,
        data: Bytes,
    ) -> Result<Bytes, MpError> {
        let (a, b) = tokio::join!(self.coll_send(dest, hdr, data), self.coll_recv(src, hdr));
        a?;
        b
    }
}
