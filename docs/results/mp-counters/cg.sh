#!/bin/bash
# usage: cg.sh BINARY SPIN_US PAIRS OUTDIR -- rank 1 (the echo side) under callgrind, rank 0 native
BIN=$1; SPIN=$2; PAIRS=$3; OUT=$4; mkdir -p $OUT
PORT=$(( 20000 + RANDOM % 20000 ))
export JUXTA_MP_SIZE=2 JUXTA_MP_SEED=127.0.0.1:$PORT JUXTA_MP_JOB=m JUXTA_MP_SPIN_US=$SPIN
JUXTA_MP_RANK=0 nice -n 19 taskset -c 0 $BIN mp-rank pingpong --sizes 2 --warmup 200 --runs 1 --pairs $PAIRS --out $OUT/res0.txt &
JUXTA_MP_RANK=1 nice -n 19 taskset -c 1 valgrind --tool=callgrind --callgrind-out-file=$OUT/cg.out $BIN mp-rank pingpong --sizes 2 --warmup 200 --runs 1 --pairs $PAIRS --out $OUT/res1.txt 2>$OUT/vg.log &
wait
