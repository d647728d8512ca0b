//! Collectives: dissemination barrier, binomial-tree bcast, reduce,
//! gather and scatter, recursive-doubling allreduce (reduce-scatter +
//! allgather from 32 KiB), Bruck allgather and
//! pairwise-exchange alltoall. Every algorithm works for any rank count
//! (not only powers of two) and takes `ceil(log2(n))` rounds except
//! alltoall (`n - 1`).

use bytes::{Bytes, BytesMut};

use super::wire::{Header, CTX_COLL};
use super::{to_vec, Communicator, Datatype, MpError, ReduceOp};

const BARRIER: u8 = 1;
const BCAST: u8 = 2;
const REDUCE: u8 = 3;
const ALLREDUCE: u8 = 4;
const GATHER: u8 = 5;
const SCATTER: u8 = 6;
const ALLGATHER: u8 = 7;
const ALLTOALL: u8 = 8;

/// Allreduces of at least this many bytes (and one element per rank of
/// the power of two) use reduce-scatter + allgather, which sends each
/// rank's data about twice in all instead of once per round.
const RABENSEIFNER_MIN: usize = 32 * 1024;

fn bytes_of<T: Datatype>(v: &[T]) -> Bytes {
    Bytes::copy_from_slice(bytemuck::cast_slice(v))
}

fn check_len(b: &Bytes, want: usize, rank: usize) -> Result<(), MpError> {
    if b.len() != want {
        return Err(MpError::CollectiveMismatch {
            rank,
            what: "length",
            expected: want as u64,
            got: b.len() as u64,
        });
    }
    Ok(())
}

impl Communicator {
    fn coll_header<T: Datatype>(&self, op: u8, root: usize, count: usize) -> Header {
        Header {
            ctx: CTX_COLL,
            op,
            dtype: T::CODE,
            src: self.s.rank as u32,
            tag: 0,
            root: root as u32,
            count: count as u64,
            seq: self.s.next_seq(),
        }
    }

    /// Waits until every rank has called `barrier` (dissemination:
    /// `ceil(log2(n))` rounds).
    pub async fn barrier(&self) -> Result<(), MpError> {
        let (n, r) = (self.size(), self.rank());
        let mut h = self.coll_header::<u8>(BARRIER, 0, 0);
        let mut dist = 1;
        while dist < n {
            self.coll_exchange((r + dist) % n, (r + n - dist) % n, &h, Bytes::new())
                .await?;
            h.tag += 1;
            dist *= 2;
        }
        Ok(())
    }

    /// Broadcasts `buf` from `root` to every rank (binomial tree). Every
    /// rank passes a buffer of the same length.
    pub async fn bcast<T: Datatype>(&self, buf: &mut [T], root: usize) -> Result<(), MpError> {
        self.check_rank(root)?;
        let mine = (self.rank() == root).then(|| bytes_of(buf));
        let got = self.bcast_bytes::<T>(mine, buf.len(), root).await?;
        if self.rank() != root {
            bytemuck::cast_slice_mut::<T, u8>(buf).copy_from_slice(&got);
        }
        Ok(())
    }

    /// [`Communicator::bcast`] of bytes held by the root (`Some` there,
    /// `None` elsewhere), `count` elements of `T`; returns the bytes.
    /// Forwarded without copies.
    pub async fn bcast_bytes<T: Datatype>(
        &self,
        data: Option<Bytes>,
        count: usize,
        root: usize,
    ) -> Result<Bytes, MpError> {
        self.check_rank(root)?;
        let (n, r) = (self.size(), self.rank());
        let len = count
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(MpError::BadLength {
                len: count,
                why: "count overflows",
            })?;
        let h = self.coll_header::<T>(BCAST, root, count);
        let vr = (r + n - root) % n;
        let mut data = match data {
            Some(d) if r == root => {
                check_len(&d, len, r)?;
                Some(d)
            }
            _ => None,
        };
        let mut mask = 1;
        while mask < n {
            if vr & mask != 0 {
                let src = (vr - mask + root) % n;
                let d = self.coll_recv(src, &h).await?;
                check_len(&d, len, src)?;
                data = Some(d);
                break;
            }
            mask <<= 1;
        }
        let data = data.ok_or(MpError::BadLength {
            len: 0,
            why: "the root passes the data",
        })?;
        mask >>= 1;
        while mask > 0 {
            if vr + mask < n {
                self.coll_send((vr + mask + root) % n, &h, data.clone())
                    .await?;
            }
            mask >>= 1;
        }
        Ok(data)
    }

    /// Combines every rank's `data` element by element with `op`; the
    /// result (`Some`) at `root` only (binomial tree).
    pub async fn reduce<T: Datatype>(
        &self,
        data: &[T],
        op: ReduceOp,
        root: usize,
    ) -> Result<Option<Vec<T>>, MpError> {
        self.check_rank(root)?;
        let (n, r) = (self.size(), self.rank());
        let mut h = self.coll_header::<T>(REDUCE, root, data.len());
        h.op |= op.code() << 4;
        let vr = (r + n - root) % n;
        let mut acc = data.to_vec();
        let mut mask = 1;
        while mask < n {
            if vr & mask == 0 {
                let src_v = vr | mask;
                if src_v < n {
                    let src = (src_v + root) % n;
                    let d = self.coll_recv(src, &h).await?;
                    check_len(&d, std::mem::size_of_val(data), src)?;
                    T::reduce(op, &mut acc, &to_vec::<T>(&d)?);
                }
            } else {
                let dst = ((vr & !mask) + root) % n;
                self.coll_send(dst, &h, bytes_of(&acc)).await?;
                return Ok(None);
            }
            mask <<= 1;
        }
        Ok(Some(acc))
    }

    /// Combines every rank's `buf` element by element with `op`, leaving
    /// the result in every rank's `buf` (recursive doubling, or from
    /// 32 KiB reduce-scatter + allgather; ranks beyond the largest power of
    /// two fold into a partner first).
    pub async fn allreduce<T: Datatype>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), MpError> {
        let (n, r) = (self.size(), self.rank());
        let mut h = self.coll_header::<T>(ALLREDUCE, 0, buf.len());
        h.op |= op.code() << 4;
        let len = std::mem::size_of_val(buf);
        let pof2 = if n.is_power_of_two() {
            n
        } else {
            n.next_power_of_two() / 2
        };
        let rem = n - pof2;
        // Fold: among the first 2*rem ranks, the even ones hand their data
        // to the odd ones and sit out.
        let newrank = if r < 2 * rem {
            if r % 2 == 0 {
                self.coll_send(r + 1, &h, bytes_of(buf)).await?;
                None
            } else {
                let d = self.coll_recv(r - 1, &h).await?;
                check_len(&d, len, r - 1)?;
                T::reduce(op, buf, &to_vec::<T>(&d)?);
                Some(r / 2)
            }
        } else {
            Some(r - rem)
        };
        h.tag = 1;
        if let Some(nr) = newrank.filter(|_| len >= RABENSEIFNER_MIN && buf.len() >= pof2) {
            self.reduce_scatter_allgather(buf, op, nr, pof2, rem, &mut h)
                .await?;
        } else if let Some(nr) = newrank {
            let mut mask = 1;
            while mask < pof2 {
                let nd = nr ^ mask;
                let dst = if nd < rem { nd * 2 + 1 } else { nd + rem };
                let d = self.coll_exchange(dst, dst, &h, bytes_of(buf)).await?;
                check_len(&d, len, dst)?;
                // The same operand order on both sides, so both get
                // bit-identical floats.
                let other = to_vec::<T>(&d)?;
                if dst < r {
                    let mut x = other;
                    T::reduce(op, &mut x, buf);
                    buf.copy_from_slice(&x);
                } else {
                    T::reduce(op, buf, &other);
                }
                mask <<= 1;
                h.tag += 1;
            }
        }
        h.tag = 1000;
        if r < 2 * rem {
            if r % 2 == 1 {
                self.coll_send(r - 1, &h, bytes_of(buf)).await?;
            } else {
                let d = self.coll_recv(r + 1, &h).await?;
                check_len(&d, len, r + 1)?;
                bytemuck::cast_slice_mut::<T, u8>(buf).copy_from_slice(&d);
            }
        }
        Ok(())
    }

    /// Rabenseifner's allreduce among the `pof2` ranks left after the
    /// fold (`nr` is this rank's number among them): a reduce-scatter by
    /// recursive halving (each round sends half of what is left), then an
    /// allgather by recursive doubling; every block is reduced on one rank
    /// only, so all ranks end with the same bits.
    async fn reduce_scatter_allgather<T: Datatype>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        nr: usize,
        pof2: usize,
        rem: usize,
        h: &mut Header,
    ) -> Result<(), MpError> {
        let count = buf.len();
        let sz = std::mem::size_of::<T>();
        let cnts: Vec<usize> = (0..pof2)
            .map(|i| count / pof2 + usize::from(i < count % pof2))
            .collect();
        let mut disps = vec![0usize; pof2 + 1];
        for i in 0..pof2 {
            disps[i + 1] = disps[i] + cnts[i];
        }
        let real = |nd: usize| if nd < rem { nd * 2 + 1 } else { nd + rem };
        let (mut send_idx, mut recv_idx, mut last_idx) = (0usize, 0usize, pof2);
        let mut mask = 1;
        while mask < pof2 {
            let nd = nr ^ mask;
            let dst = real(nd);
            if nr < nd {
                send_idx = recv_idx + pof2 / (mask * 2);
            } else {
                recv_idx = send_idx + pof2 / (mask * 2);
            }
            let (s0, s1, r0, r1) = if nr < nd {
                (send_idx, last_idx, recv_idx, send_idx)
            } else {
                (send_idx, recv_idx, recv_idx, last_idx)
            };
            let out = bytes_of(&buf[disps[s0]..disps[s1]]);
            let d = self.coll_exchange(dst, dst, h, out).await?;
            check_len(&d, (disps[r1] - disps[r0]) * sz, dst)?;
            T::reduce(op, &mut buf[disps[r0]..disps[r1]], &to_vec::<T>(&d)?);
            send_idx = recv_idx;
            mask <<= 1;
            if mask < pof2 {
                last_idx = recv_idx + pof2 / mask;
            }
            h.tag += 1;
        }
        mask >>= 1;
        while mask > 0 {
            let nd = nr ^ mask;
            let dst = real(nd);
            let (s0, s1, r0, r1);
            if nr < nd {
                if mask != pof2 / 2 {
                    last_idx += pof2 / (mask * 2);
                }
                recv_idx = send_idx + pof2 / (mask * 2);
                (s0, s1, r0, r1) = (send_idx, recv_idx, recv_idx, last_idx);
            } else {
                recv_idx = send_idx - pof2 / (mask * 2);
                (s0, s1, r0, r1) = (send_idx, last_idx, recv_idx, send_idx);
            }
            let out = bytes_of(&buf[disps[s0]..disps[s1]]);
            let d = self.coll_exchange(dst, dst, h, out).await?;
            check_len(&d, (disps[r1] - disps[r0]) * sz, dst)?;
            bytemuck::cast_slice_mut::<T, u8>(&mut buf[disps[r0]..disps[r1]]).copy_from_slice(&d);
            if nr > nd {
                send_idx = recv_idx;
            }
            mask >>= 1;
            h.tag += 1;
        }
        Ok(())
    }

    /// Collects every rank's `data` (same length everywhere) at `root`, in
    /// rank order (binomial tree); `Some` at the root only.
    pub async fn gather<T: Datatype>(
        &self,
        data: &[T],
        root: usize,
    ) -> Result<Option<Vec<T>>, MpError> {
        self.check_rank(root)?;
        let (n, r) = (self.size(), self.rank());
        let h = self.coll_header::<T>(GATHER, root, data.len());
        let blk = std::mem::size_of_val(data);
        let vr = (r + n - root) % n;
        // Blocks vr, vr+1, ... of this subtree, in relative order.
        let mut acc = BytesMut::from(bytemuck::cast_slice::<T, u8>(data));
        let mut mask = 1;
        while mask < n {
            if vr & mask == 0 {
                let src_v = vr | mask;
                if src_v < n {
                    let src = (src_v + root) % n;
                    let d = self.coll_recv(src, &h).await?;
                    check_len(&d, mask.min(n - src_v) * blk, src)?;
                    acc.extend_from_slice(&d);
                }
            } else {
                let dst = ((vr & !mask) + root) % n;
                self.coll_send(dst, &h, acc.freeze()).await?;
                return Ok(None);
            }
            mask <<= 1;
        }
        // Relative order to rank order.
        let mut out = vec![T::zeroed(); data.len() * n];
        let o = bytemuck::cast_slice_mut::<T, u8>(&mut out);
        for v in 0..n {
            let a = (v + root) % n;
            o[a * blk..(a + 1) * blk].copy_from_slice(&acc[v * blk..(v + 1) * blk]);
        }
        Ok(Some(out))
    }

    /// Hands rank `i` block `i` (`count` elements) of the root's `data`
    /// (`Some`, `count * size` elements, at the root; ignored elsewhere);
    /// binomial tree, blocks forwarded without copies.
    pub async fn scatter<T: Datatype>(
        &self,
        data: Option<&[T]>,
        count: usize,
        root: usize,
    ) -> Result<Vec<T>, MpError> {
        self.check_rank(root)?;
        let (n, r) = (self.size(), self.rank());
        let blk = count
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(MpError::BadLength {
                len: count,
                why: "count overflows",
            })?;
        let h = self.coll_header::<T>(SCATTER, root, count);
        let vr = (r + n - root) % n;
        // Blocks vr .. vr + span of the tree below this rank, relative order.
        let hold: Bytes;
        let mut mask = 1;
        if vr == 0 {
            let d = data.ok_or(MpError::BadLength {
                len: 0,
                why: "the root passes the data",
            })?;
            if d.len() != count.saturating_mul(n) {
                return Err(MpError::BadLength {
                    len: d.len(),
                    why: "scatter data is count * size elements",
                });
            }
            let src = bytemuck::cast_slice::<T, u8>(d);
            let mut rel = BytesMut::with_capacity(src.len());
            for v in 0..n {
                let a = (v + root) % n;
                rel.extend_from_slice(&src[a * blk..(a + 1) * blk]);
            }
            hold = rel.freeze();
            while mask < n {
                mask <<= 1;
            }
        } else {
            loop {
                if vr & mask != 0 {
                    let src = (vr - mask + root) % n;
                    let d = self.coll_recv(src, &h).await?;
                    check_len(&d, mask.min(n - vr) * blk, src)?;
                    hold = d;
                    break;
                }
                mask <<= 1;
            }
        }
        mask >>= 1;
        while mask > 0 {
            if vr + mask < n {
                let span = mask.min(n - vr - mask);
                let part = hold.slice(mask * blk..(mask + span) * blk);
                self.coll_send((vr + mask + root) % n, &h, part).await?;
            }
            mask >>= 1;
        }
        to_vec(&hold[..blk])
    }

    /// Every rank gets every rank's `data` (same length everywhere), in
    /// rank order (Bruck: `ceil(log2(n))` rounds for any `n`).
    pub async fn allgather<T: Datatype>(&self, data: &[T]) -> Result<Vec<T>, MpError> {
        let (n, r) = (self.size(), self.rank());
        let mut h = self.coll_header::<T>(ALLGATHER, 0, data.len());
        let blk = std::mem::size_of_val(data);
        // Blocks r, r+1, ... (mod n).
        let mut acc = BytesMut::with_capacity(blk * n);
        acc.extend_from_slice(bytemuck::cast_slice(data));
        let mut dist = 1;
        while dist < n {
            let cnt = dist.min(n - dist);
            let part = Bytes::copy_from_slice(&acc[..cnt * blk]);
            let src = (r + dist) % n;
            let d = self
                .coll_exchange((r + n - dist) % n, src, &h, part)
                .await?;
            check_len(&d, cnt * blk, src)?;
            acc.extend_from_slice(&d);
            dist *= 2;
            h.tag += 1;
        }
        let mut out = vec![T::zeroed(); data.len() * n];
        let o = bytemuck::cast_slice_mut::<T, u8>(&mut out);
        for i in 0..n {
            let a = (r + i) % n;
            o[a * blk..(a + 1) * blk].copy_from_slice(&acc[i * blk..(i + 1) * blk]);
        }
        Ok(out)
    }

    /// Rank `i` sends block `j` of its `data` (`size` equal blocks) to
    /// rank `j`, and gets block `i` of everyone's, in rank order
    /// (pairwise exchange, `n - 1` rounds).
    pub async fn alltoall<T: Datatype>(&self, data: &[T]) -> Result<Vec<T>, MpError> {
        let (n, r) = (self.size(), self.rank());
        if !data.len().is_multiple_of(n) {
            return Err(MpError::BadLength {
                len: data.len(),
                why: "alltoall data is a multiple of the size",
            });
        }
        let count = data.len() / n;
        let mut h = self.coll_header::<T>(ALLTOALL, 0, count);
        let all = bytes_of(data);
        let blk = all.len() / n;
        let mut out = vec![T::zeroed(); data.len()];
        let o = bytemuck::cast_slice_mut::<T, u8>(&mut out);
        o[r * blk..(r + 1) * blk].copy_from_slice(&all[r * blk..(r + 1) * blk]);
        for i in 1..n {
            let dst = (r + i) % n;
            let src = (r + n - i) % n;
            h.tag = i as i32;
            let d = self
                .coll_exchange(dst, src, &h, all.slice(dst * blk..(dst + 1) * blk))
                .await?;
            check_len(&d, blk, src)?;
            o[src * blk..(src + 1) * blk].copy_from_slice(&d);
        }
        Ok(out)
    }
}
