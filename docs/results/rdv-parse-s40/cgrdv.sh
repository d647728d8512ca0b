#!/usr/bin/env bash
# cgrdv.sh BIN OUTDIR: callgrind of one rendezvous process (`rdv-serve`)
# answering discovery queries from 4 edges (SRDI, 200 q/s offered): live
# dumps at 180 s (discarded: set-up and publishing) and 255 s (the window);
# the window's instructions per query come from cgrdvsum.sh.
set -u
bin=$1; out=$2
rm -rf "$out"; mkdir -p "$out"; cd "$out"
valgrind --tool=callgrind --trace-children=yes "$bin" bench rendezvous --model srdi --edges 4 --rendezvous 1 --rate 200 --duration-ms 600000 --timeout-ms 10000 > out.txt 2>err.txt &
vpid=$!
sleep 180
rdv=$(callgrind_control 2>/dev/null | grep "rdv-serve" | sed 's/PID \([0-9]*\):.*/\1/')
bench=$(callgrind_control 2>/dev/null | grep "bench rendezvous" | sed 's/PID \([0-9]*\):.*/\1/')
callgrind_control -d $rdv >/dev/null
sleep 75
callgrind_control -d $rdv >/dev/null
sleep 3
kill $bench $rdv $vpid 2>/dev/null
ls
