#!/bin/bash
# usage: mpi.sh PAIRS OUTDIR  -- Open MPI TCP BTL 2 B ping-pong, each rank under perf stat
PAIRS=$1; OUT=$2; mkdir -p $OUT
EV=task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_poll,syscalls:sys_enter_ppoll,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_readv,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield
nice -n 19 mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to core --mca btl tcp,self \
  sh -c "perf stat -x, -e $EV -o $OUT/rank\$OMPI_COMM_WORLD_RANK.csv ./mpi_pingpong pingpong 200 1 $PAIRS 2" > $OUT/res0.txt
