#!/bin/bash
# ab.sh ROUNDS TAG: alternated A/B runs
for r in $(seq 1 $1); do for v in A B2; do
  ./$v bench pingpong --layers tcp,endpoint,unicast-pipe,secure-pipe --sizes 1,65536 --pin same --runs 10 --pairs 300 --json $2-$v-$r.json > /dev/null 2>&1
done; done
