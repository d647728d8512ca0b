#!/usr/bin/env bash
# ab.sh BASE_BIN NEW_BIN ROUNDS: alternates the two binaries (release builds of e07ac4a and of
# the stream-frames commit), one `juxta bench pingpong` run each per round, --pin same; then
# one --pin split run each. JSON beside this script.
set -euo pipefail
d=$(dirname "$0")
for r in $(seq 1 "$3"); do
  for b in A B; do
    bin=$1; [ $b = B ] && bin=$2
    $bin bench pingpong --layers tcp,unicast-pipe,socket,socket-chunk,secure-socket \
      --sizes 1,65536,1048576,4194304 --pin same --runs 10 --pairs 300 --json "$d/$b-$r.json" \
      2>&1 | grep -E "^(tcp|juxta) " | sed "s/^/$b-$r /"
  done
done
for b in A B; do
  bin=$1; [ $b = B ] && bin=$2
  $bin bench pingpong --layers tcp,unicast-pipe,socket,socket-chunk,secure-socket \
    --sizes 1,65536,1048576,4194304 --pin split --runs 10 --pairs 300 --json "$d/$b-split.json" \
    2>&1 | grep -E "^(tcp|juxta) " | sed "s/^/$b-split /"
done
