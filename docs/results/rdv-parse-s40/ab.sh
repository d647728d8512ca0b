#!/usr/bin/env bash
# ab.sh ROUNDS: alternated A (df64404) / B (fd16121) runs of the rendezvous query bench.
for r in $(seq 1 $1); do
  for x in A B; do
    bin=/work/runs/s39/prof-E; [ $x = B ] && bin=/work/runs/s40/prof-F
    echo "round $r $x load $(cut -d' ' -f1 /proc/loadavg)"
    $bin bench leases --edges 1000 --hold-ms 1000 --heartbeat-ms 30000 --identities /work/runs/s40/ids --query-rate 10000,20000,30000 --query-ms 3000 --json /work/runs/s40/ab/$x-$r.json 2>&1 | grep "/s:"
  done
done
