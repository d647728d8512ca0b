#!/usr/bin/env bash
# cgrun.sh BIN OUTDIR: callgrind of the relayed-pipe lane (client, relay,
# responder), counts over a 40 s window after a 25 s warm-up (live dumps),
# per round trip (the client's reader polls, one per round trip).
set -u
bin=$1; out=$2
rm -rf "$out"; mkdir -p "$out"; cd "$out"
valgrind --tool=callgrind --trace-children=yes "$bin" bench pingpong --layers relayed-pipe --sizes 1 --pin none --warmup 100 --runs 1 --pairs 100000 > out.txt 2>err.txt &
vpid=$!
sleep 90
pids=$(callgrind_control 2>/dev/null | grep -E "bench pingpong|relay-serve|bench-responder --relay" | sed 's/PID \([0-9]*\):.*/\1/')
for p in $pids; do callgrind_control -d $p >/dev/null; done
sleep 40
for p in $pids; do callgrind_control -d $p >/dev/null; done
sleep 2
kill $vpid 2>/dev/null
for p in $pids; do kill $p 2>/dev/null; done
callgrind_control 2>/dev/null | grep -E "bench-responder|relay-serve|bench pingpong" | sed 's/PID \([0-9]*\):.*/\1/' | xargs -r kill 2>/dev/null
ls
