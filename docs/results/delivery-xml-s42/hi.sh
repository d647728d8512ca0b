#!/usr/bin/env bash
# ab.sh ROUNDS RATES OUTDIR: alternated H (2c61084) / K (shared delivery addresses, XML fast paths) runs of the rendezvous query bench.
for r in $(seq 1 $1); do
  for x in H K; do
    bin=/work/runs/s42/prof-H; [ $x = K ] && bin=/work/runs/s42/prof-K
    echo "round $r $x load $(cut -d' ' -f1 /proc/loadavg)"
    $bin bench leases --edges 1000 --hold-ms 1000 --heartbeat-ms 30000 --identities /work/runs/s40/ids --query-rate $2 --query-ms 4000 --json $3/$x-$r.json 2>&1 | grep "/s:"
  done
done
