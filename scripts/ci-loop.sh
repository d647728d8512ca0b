#!/usr/bin/env bash
# Runs `.ci/run` N times in a row (default 10) on a fresh clone of one
# commit with nothing beside it, stopping at the first failure: the check
# behind "10 consecutive clean runs" (issue #17). The clone and its build
# directory are kept from run to run (the first run builds, the rest reuse
# it), so a failure can be rerun in place.
#
#   bash scripts/ci-loop.sh [N] [COMMIT]     # default: 10 runs of HEAD
#
# Writes DIR/run-K.log for each run and DIR/summary.txt (one line per run
# start and end: commit, exit code, seconds, load average); DIR is
# $CI_LOOP_DIR or a new directory under /tmp. Exit status: 0 when every run
# passed, else the failing run's.
set -uo pipefail
n=${1:-10}
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse "${2:-HEAD}") || exit 2
dir=${CI_LOOP_DIR:-$(mktemp -d /tmp/juxta-ci-loop.XXXXXX)}
mkdir -p "$dir"
if [ ! -d "$dir/juxta/.git" ]; then
  git clone -q "$repo" "$dir/juxta" || exit 2
fi
git -C "$dir/juxta" fetch -q "$repo" "$commit" && git -C "$dir/juxta" checkout -q --detach "$commit" || exit 2
echo "loop of $n runs on ${commit:0:7} in $dir/juxta (logs: $dir)"
for i in $(seq 1 "$n"); do
  s=$(date +%s)
  echo "run $i commit ${commit:0:7} start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$dir/summary.txt"
  (cd "$dir/juxta" && CI=true bash .ci/run) >"$dir/run-$i.log" 2>&1
  rc=$?
  echo "run $i rc $rc secs $(($(date +%s) - s)) end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$dir/summary.txt"
  tail -n 1 "$dir/summary.txt"
  if [ "$rc" -ne 0 ]; then
    echo "run $i failed: $dir/run-$i.log" >&2
    exit "$rc"
  fi
done
echo "$n consecutive clean runs on ${commit:0:7}"
