#!/bin/bash
# usage: [SAN=address|none] run_batch.sh SECONDS target...
# Runs each target, one at a time under nice 19, towards 10^7 executions
# (capped at SECONDS), logging to logs/<target>-<time>.log.
# SAN=none (the default) builds without AddressSanitizer into target-nosan/.
cd "$(dirname "$0")"
secs=$1; shift
san=${SAN:-none}
if [ "$san" = none ]; then extra=(-s none --target-dir target-nosan); else extra=(-s "$san"); fi
for t in "$@"; do
  mkdir -p corpus/$t logs
  log=logs/$t-$san-$(date +%H%M%S).log
  echo "== $t san=$san $(date -u +%FT%TZ) $(git rev-parse --short HEAD)" > $log
  nice -n 19 cargo +nightly fuzz run -O "${extra[@]}" $t corpus/$t seeds/$t -- \
    -runs=10000000 -max_total_time=$secs -rss_limit_mb=2048 -print_final_stats=1 >> $log 2>&1
  echo "== rc=$? $(date -u +%FT%TZ)" >> $log
done
