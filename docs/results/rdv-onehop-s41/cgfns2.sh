#!/usr/bin/env bash
# cgfns2.sh DUMP: per resolver query read by the rendezvous (calls of
# ResolverQuery::from_message in the window), inclusive instructions of the
# query path's steps. (cgfns.sh counted resolver::on_query, which a query
# the rendezvous forwards at once no longer reaches.)
f=$1
n=$(callgrind_annotate --inclusive=yes --tree=caller "$f" 2>/dev/null | grep -m1 "=> .*ResolverQuery::from_message (" | sed 's/.*(\([0-9,]*\)x).*/\1/' | tr -d ,)
callgrind_annotate --inclusive=yes "$f" 2>/dev/null > /tmp/cgfns.$$
tot=$(awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}' /tmp/cgfns.$$)
echo "$f: $n queries, all $((tot / n))"
for fn in "ResolverQuery::from_message \[" "DiscoveryQuery::parse \[" "SrdiNode::handle_query \[" "forwarded_element \[" "resolver::on_query::{{closure}} \[" "SrdiNode::handle_srdi \[" "Task::run::{{closure}} \[" "resolver::spawn::{{closure}} \[" "tcp::run_connection::{{closure}} \["; do
  v=$(grep -m1 "$fn" /tmp/cgfns.$$ | awk '{gsub(",","",$1); print $1}')
  [ -n "$v" ] && printf "  %-40s %8d\n" "$fn" $((v / n))
done
rm -f /tmp/cgfns.$$
