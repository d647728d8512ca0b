#!/usr/bin/env bash
# cgsum.sh DIR: per-round-trip instructions of each process in the window
cd "$1"
client=$(grep -l "bench pingpong" callgrind.out.*.2)
rts=$(callgrind_annotate --inclusive=yes $client 2>/dev/null | grep -m1 "=> .*tcp::run_connection::{{closure}} (" | sed 's/.*(\([0-9,]*\)x).*/\1/' | tr -d ,)
echo "round trips: $rts"
for f in callgrind.out.*.2; do
  who=$(grep -m1 "^cmd:" $f | grep -oE "bench pingpong|relay-serve|bench-responder")
  tot=$(grep -m1 "^summary" $f | awk '{print $2}')
  echo "$who: $((tot / rts)) instr/RT"
done
