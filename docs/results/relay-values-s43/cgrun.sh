#!/usr/bin/env bash
# cgrun.sh BIN OUTDIR (LAYER=relayed-pipe by default): callgrind of one
# pingpong lane (client, relay if any, responders), counts over a 40 s
# window after 90 s (live dumps), divided per round trip by cgsum.sh.
set -u
bin=$1; out=$2
rm -rf "$out"; mkdir -p "$out"; cd "$out"
valgrind --tool=callgrind --trace-children=yes "$bin" bench pingpong --layers ${LAYER:-relayed-pipe} --sizes 1 --pin none --warmup 100 --runs 1 --pairs ${PAIRS:-100000} > out.txt 2>err.txt &
vpid=$!
sleep 90
pids=$(callgrind_control 2>/dev/null | grep -E "bench pingpong|relay-serve|bench-responder" | sed 's/PID \([0-9]*\):.*/\1/')
for p in $pids; do callgrind_control -d $p >/dev/null; done
sleep 40
for p in $pids; do callgrind_control -d $p >/dev/null; done
sleep 2
kill $vpid 2>/dev/null
for p in $pids; do kill $p 2>/dev/null; done
callgrind_control 2>/dev/null | grep -E "bench-responder|relay-serve|bench pingpong" | sed 's/PID \([0-9]*\):.*/\1/' | xargs -r kill 2>/dev/null
ls
