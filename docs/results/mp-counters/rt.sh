#!/bin/bash
# Per-round-trip counters of the communicator's 2 B ping-pong, per rank.
# usage: rt.sh BINARY SPIN_US PAIRS OUTDIR
# Runs rank 0 on core 0 and rank 1 on core 1 (as juxta run --bind core),
# each under its own `perf stat` (niced 19), 2 B messages, warm-up 200, 1 run of PAIRS.
BIN=$1; SPIN=$2; PAIRS=$3; OUT=$4
mkdir -p $OUT
PORT=$(( 20000 + RANDOM % 20000 ))
EV=task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_readv,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield,syscalls:sys_enter_recvmsg
for r in 0 1; do
  JUXTA_MP_RANK=$r JUXTA_MP_SIZE=2 JUXTA_MP_SEED=127.0.0.1:$PORT JUXTA_MP_JOB=m JUXTA_MP_SPIN_US=$SPIN \
  nice -n 19 perf stat -x, -e $EV -o $OUT/rank$r.csv taskset -c $r $BIN mp-rank pingpong --sizes 2 --warmup 200 --runs 1 --pairs $PAIRS --out $OUT/res$r.txt &
done
wait
