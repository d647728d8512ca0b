#!/usr/bin/env bash
# ab.sh ROUNDS BIN...: alternated wall-clock rounds of the relayed lane
# against the direct pipe and tcp, one JSON per binary and round.
set -u
# (Output paths as on the machine that ran it; change them to rerun.)
rounds=$1; shift
out=/work/runs/s43/ab; mkdir -p $out
for r in $(seq 1 $rounds); do
  for b in "$@"; do
    tag=$(basename $b | sed 's/prof-//')
    $b bench pingpong --layers tcp,unicast-pipe,relayed-pipe --sizes 1,65536 --pin ${PIN:-same} --runs 10 --pairs 200 --json $out/$tag${PIN:+-$PIN}-$r.json > $out/$tag${PIN:+-$PIN}-$r.out 2>&1
    echo "round $r $tag: $(grep -E '^(tcp|juxta) ' $out/$tag${PIN:+-$PIN}-$r.out | awk '{printf "%s/%s %s %s; ", $2, $4, $5, $7}')"
  done
done
