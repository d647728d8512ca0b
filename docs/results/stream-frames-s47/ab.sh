#!/usr/bin/env bash
# ab.sh BASE_BIN NEW_BIN ROUNDS: alternates the two binaries (release builds of e07ac4a and of
# the stream-frames commit), one `juxta bench pingpong` run each per round, --pin same; then
# one --pin split run each. JSON beside this script.
set -euo pipefail
d=$(dirname "$0")
run() { # run BIN TAG PIN
  "$1" bench pingpong --layers tcp,unicast-pipe,socket,socket-chunk,secure-socket \
    --sizes 1,65536,1048576,4194304 --pin "$3" --runs 10 --pairs 300 --json "$d/$2.json" \
    2>&1 | grep -E "^(tcp|juxta) " | sed "s/^/$2 /"
}
for r in $(seq 1 "$3"); do
  run "$1" "A-$r" same
  run "$2" "B-$r" same
done
run "$1" A-split split
run "$2" B-split split
