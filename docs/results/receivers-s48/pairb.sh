#!/bin/bash
# pairb.sh BIN TAG LAYER [N]
N=${4:-2000}; B=$1
for n in $N $((2*N)); do timeout 900 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg/$2-$n.cg $B bench pingpong --layers $3 --sizes 1 --warmup 0 --runs 1 --pairs $n > /dev/null 2>&1; done
echo "$2 $3 $(bash /tmp/cg/cgpair.sh /tmp/cg/$2-$N.cg /tmp/cg/$2-$((2*N)).cg $N)"
