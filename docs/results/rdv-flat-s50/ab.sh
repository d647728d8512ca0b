#!/usr/bin/env bash
# A/B of the rendezvous under discovery queries, with the plain-TCP
# forwarder of the same run beside each rate. A and B are two release
# builds of `juxta` (A = 939e79f, B = the flat XML reader, 4a149d6).
# Usage: ab.sh A_BIN B_BIN IDENTITY_DIR ROUNDS
set -euo pipefail
a=$1 b=$2 ids=$3 rounds=${4:-3}
for r in $(seq 1 "$rounds"); do
  for v in A B; do
    bin=$a; [ "$v" = B ] && bin=$b
    uptime
    "$bin" bench leases --edges 1000 --hold-ms 1000 --heartbeat-ms 30000 --identities "$ids" \
      --query-rate 20000,30000,40000 --query-ms 5000 --json "$v-$r.json"
  done
done
