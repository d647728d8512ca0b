#!/bin/bash
# A/B of two juxta binaries on the communicator's ping-pong (alternating runs), as used for #14:
# ab.sh BIN_A BIN_B RUNS  -> mp-<name>-<i>.json here, and one summary line per run on stdout
A=$1; B=$2; N=${3:-4}
for i in $(seq ${FIRST:-1} $N); do
  for bin in $A $B; do
    name=$(basename $bin)
    echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) $name run $i" >&2
    $bin bench mp --sizes ${SIZES:-2,200,1000} --matmul-n 0 --allreduce-doubles 0 --layers "" \
      --runs 10 --pairs 2000 --json mp-$name-$i.json > /dev/null 2>&1
    python3 - mp-$name-$i.json $name $i <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); rows=[r for r in d["results"] if r.get("scenario")=="mp-pingpong"]
j={r["size"]:r["rtt_us_median"] for r in rows if r["impl"]=="juxta" and r["layer"]=="mp"}
m={r["size"]:r["rtt_us_median"] for r in rows if r["impl"]=="mpi" and r["layer"]=="tcp"}
print(sys.argv[2], "run", sys.argv[3], " ".join("%dB %.1f/%.1f=%.2fx" % (s, j[s], m[s], j[s]/m[s]) for s in sorted(j) if s in m))
PY
  done
done
