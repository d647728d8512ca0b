#!/bin/bash
# Ir per round trip after the bootstrap: (program total - Communicator::from_env inclusive) / round trips
d=$1; n=$2
tot=$(grep "PROGRAM TOTALS" $d/incl.txt | awk '{gsub(",","",$1); print $1}')
boot=$(grep "Communicator>::from_env::{{closure}} \[" $d/incl.txt | head -1 | awk '{gsub(",","",$1); print $1}')
park=$(grep "current_thread::Context::park_yield \[" $d/incl.txt | head -1 | awk '{gsub(",","",$1); print $1}')
echo "$d: total-after-boot/RT=$(( (tot-boot)/n ))  of which park_yield(spin polls)/RT=$(( park/n ))"
