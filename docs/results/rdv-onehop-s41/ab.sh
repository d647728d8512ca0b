#!/usr/bin/env bash
# ab.sh ROUNDS RATES OUTDIR: alternated A (fd16121) / B (working tree, one-hop query path) runs of the rendezvous query bench.
for r in $(seq 1 $1); do
  for x in A B; do
    bin=/work/runs/s40/prof-F; [ $x = B ] && bin=/work/runs/s41/prof-G
    echo "round $r $x load $(cut -d' ' -f1 /proc/loadavg)"
    $bin bench leases --edges 1000 --hold-ms 1000 --heartbeat-ms 30000 --identities /work/runs/s40/ids --query-rate $2 --query-ms 4000 --json $3/$x-$r.json 2>&1 | grep "/s:"
  done
done
