#!/usr/bin/env bash
# cgpair.sh DUMP_SMALL DUMP_LARGE PAIRS: instructions of the client process per extra
# round trip (both lanes of the run: tcp and the Juxta layer), with the RSA key generation
# (random in length) taken off each dump.
t() { callgrind_annotate --inclusive=yes "$1" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}'; }
rsa() { v=$(callgrind_annotate --inclusive=yes "$1" 2>/dev/null | grep -m1 "juxta::peer::load_or_create_identity \[" | awk '{gsub(",","",$1); print $1}';); echo ${v:-0}; }
a=$(( $(t $1) - $(rsa $1) )); b=$(( $(t $2) - $(rsa $2) ))
echo "per round trip (tcp + layer): $(( (b - a) / $3 ))"
