#!/usr/bin/env bash
# wk.sh ROUNDS RATES OUTDIR: prof-H with the default workers (D) / TOKIO_WORKER_THREADS=1 (W1) in every process, alternated.
for r in $(seq 1 $1); do
  for x in D W1; do
    echo "round $r $x load $(cut -d' ' -f1 /proc/loadavg)"
    if [ $x = W1 ]; then export TOKIO_WORKER_THREADS=1; else unset TOKIO_WORKER_THREADS; fi
    /work/runs/s41/prof-H bench leases --edges 1000 --hold-ms 1000 --heartbeat-ms 30000 --identities /work/runs/s40/ids --query-rate $2 --query-ms 4000 --json $3/$x-$r.json 2>&1 | grep "/s:"
  done
done
