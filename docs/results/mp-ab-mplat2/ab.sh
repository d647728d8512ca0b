#!/usr/bin/env bash
# A/B of the mp small-message path: main (ddbaac6) vs mplat2, alternating, 3 runs each.
cd /work/runs/mp-ab
for i in $(seq 1 ${ROUNDS:-3}); do
  for b in main mplat2; do
    case $b in main) exe=/work/bin-ddbaac6/juxta;; mplat2) exe=/work/bin-mplat2/juxta;; esac
    echo "$b run $i start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
    $exe bench mp --sizes 2,200,1000,20000 --matmul-n 0 --allreduce-doubles 0 --layers "" --runs 10 --pairs 2000 --json mp-$b-$i.json > mp-$b-$i.log 2>&1
    echo "$b run $i rc $? end $(date -u +%FT%TZ)"
  done
done
