#!/usr/bin/env bash
# A/B of the shared delivery addresses: H = 2c61084 (profiling build), L = 9ecc693.
cd /work/runs/s42
for r in 1 2 3; do
  for b in H L; do
    ./prof-$b bench pingpong --layers tcp,endpoint,unicast-pipe,socket --sizes 1,65536 --pin same --runs 10 --pairs 200 --json hlpp/$b-$r.json > hlpp/$b-$r.log 2>&1
  done
done
