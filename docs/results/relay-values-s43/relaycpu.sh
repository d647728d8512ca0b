#!/usr/bin/env bash
# relaycpu.sh BIN TAG: one relayed-pipe 1 B lane; the relay process's CPU
# time (user, system; clock ticks of 10 ms) read from /proc until it exits.
set -u
# (Output paths as on the machine that ran it; change them to rerun.)
bin=$1; tag=$2; out=/work/runs/s43/cpu
"$bin" bench pingpong --layers relayed-pipe --sizes 1 --pin none --warmup 1000 --runs 5 --pairs 20000 --json $out/$tag.json > $out/$tag.out 2>&1 &
b=$!
relay=""
last=""
while kill -0 $b 2>/dev/null; do
  [ -z "$relay" ] && relay=$(pgrep -P $b -f relay-serve | head -1)
  if [ -n "$relay" ] && [ -r /proc/$relay/stat ]; then
    s=$(awk '{print $14, $15}' /proc/$relay/stat 2>/dev/null) && [ -n "$s" ] && last=$s
  fi
  sleep 0.1
done
wait $b
rts=$((1000 + 5 * 20000))
set -- $last
echo "$tag relay utime $1 stime $2 ticks; per RT: user $(echo "scale=2; $1*10000/$rts" | bc) us, sys $(echo "scale=2; $2*10000/$rts" | bc) us, total $(echo "scale=2; ($1+$2)*10000/$rts" | bc) us" | tee -a $out/summary.txt
