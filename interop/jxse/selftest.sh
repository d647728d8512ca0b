#!/usr/bin/env bash
# Self-test: two harness peers (A, B) on 127.0.0.1, CBJX at JXSE's default (on) unless
# CBJX_DISABLE=true is exported (run.sh passes it on to both peers).
#   A: SEND tcp://127.0.0.1:$PORT_B/JuxtaTest/sink 1          -> B prints matching RECV
#   A: SEND jxta://<B unique>/JuxtaTest/sink 1048576          -> B prints matching RECV (router)
#   A: SEND tcp://127.0.0.1:$PORT_B/JuxtaTest/echo 65536      -> B: RECV + ECHOED, A: RECV on echo-reply
# Exits 0 on success, non-zero on failure. Every wait is bounded; only our own children are killed.
# Environment: PORT_A (19701), PORT_B (19702), KEEP=1 keeps the work dir, STEP_TIMEOUT (60 s).
set -uo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT_A=${PORT_A:-19701}
PORT_B=${PORT_B:-19702}
STEP_TIMEOUT=${STEP_TIMEOUT:-60}
OVERALL_TIMEOUT=${OVERALL_TIMEOUT:-300}

WORK=$(mktemp -d /tmp/jxse-selftest.XXXXXX)
PIDS=()
WATCHDOG=
FAILED=0

log() { printf '[selftest %s] %s\n' "$(date +%T)" "$*" >&2; }

cleanup() {
    local rc=$?
    exec 3>&- 4>&-
    for pid in "${PIDS[@]}"; do
        # Give a peer that got QUIT/EOF a moment to exit by itself, then TERM, then KILL.
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null; sleep 1; fi
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; fi
    done
    [[ -n $WATCHDOG ]] && kill "$WATCHDOG" 2>/dev/null
    if [[ $rc -ne 0 || $FAILED -ne 0 ]]; then
        for p in A B; do
            echo "----- peer $p stdout -----" >&2; cat "$WORK/$p.out" >&2 2>/dev/null
            echo "----- peer $p stderr (last 40 lines) -----" >&2; tail -n 40 "$WORK/$p.err" >&2 2>/dev/null
        done
        echo "selftest: FAIL (work dir kept: $WORK)" >&2
    elif [[ ${KEEP:-0} == 1 ]]; then
        echo "selftest: work dir kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

fail() { log "FAIL: $*"; FAILED=1; exit 1; }

# wait_count FILE REGEX N TIMEOUT: wait until FILE has at least N lines matching REGEX.
wait_count() {
    local file=$1 re=$2 n=$3 t=$4 deadline=$((SECONDS + $4))
    while (( SECONDS < deadline )); do
        local c; c=$(grep -c -E "$re" "$file" 2>/dev/null); c=${c:-0}
        (( c >= n )) && return 0
        sleep 0.05
    done
    return 1
}

# nth_match FILE REGEX N: print the N-th matching line.
nth_match() { grep -E "$2" "$1" | sed -n "${3}p"; }

start_peer() {  # name port fd
    local name=$1 port=$2 fd=$3
    mkfifo "$WORK/$name.in"
    "$DIR/run.sh" --port "$port" --home "$WORK/home-$name" --name "selftest-$name" \
        <"$WORK/$name.in" >"$WORK/$name.out" 2>"$WORK/$name.err" 3>&- 4>&- &
    PIDS+=($!)
    eval "exec $fd>\"$WORK/$name.in\""   # open the write end; keeps stdin open until we close it
}

[[ -f $DIR/target/lib/jxse-2.7.jar ]] || fail "not built: run $DIR/build.sh"
# Watchdog: its sleep must not outlive us (nor hold our stdout open), hence the trap and redirect.
( trap 'kill "$sp" 2>/dev/null; wait "$sp"; exit 0' TERM
  sleep "$OVERALL_TIMEOUT" & sp=$!; wait "$sp" && kill -TERM $$ 2>/dev/null ) >/dev/null 2>&1 &
WATCHDOG=$!

T0=$SECONDS
start_peer B "$PORT_B" 4
start_peer A "$PORT_A" 3

for p in A B; do
    wait_count "$WORK/$p.out" '^(READY|ERROR) ' 1 "$STEP_TIMEOUT" || fail "peer $p not READY within ${STEP_TIMEOUT}s"
    grep -q '^READY ' "$WORK/$p.out" || fail "peer $p failed to start: $(head -1 "$WORK/$p.out")"
done
log "both peers READY after $((SECONDS - T0)) s"
read -r _ URN_B ADDR_B < <(grep '^READY ' "$WORK/B.out")
read -r _ URN_A ADDR_A < <(grep '^READY ' "$WORK/A.out")
[[ $ADDR_B == "tcp://127.0.0.1:$PORT_B" ]] || fail "B announced $ADDR_B"
[[ $URN_B == urn:jxta:cbid-* ]] || fail "B peer ID is not a cbid: $URN_B"
UNIQUE_B=${URN_B#urn:jxta:}
UNIQUE_A=${URN_A#urn:jxta:}
log "A = $URN_A"
log "B = $URN_B"

NCMD=0
ANSWER_RE='^(SENT|ERROR|PEERID|BYE)( |$)'
# cmd_a "SEND ..." : send a command to A, wait for its one-line answer, leave it in $ANS.
cmd_a() {
    NCMD=$((NCMD + 1))
    echo "$1" >&3 || fail "cannot write to A"
    wait_count "$WORK/A.out" "$ANSWER_RE" "$NCMD" "$STEP_TIMEOUT" || fail "no answer from A to '$1'"
    ANS=$(nth_match "$WORK/A.out" "$ANSWER_RE" "$NCMD")
}

# expect_recv FILE PARAM LEN SHA NTH: the NTH RECV line for JuxtaTest/PARAM has LEN and SHA.
expect_recv() {
    local file=$1 param=$2 len=$3 sha=$4 nth=$5
    local re="^RECV [^ ]+ [^ ]*/JuxtaTest/$param [0-9-]+ "
    wait_count "$file" "$re" "$nth" "$STEP_TIMEOUT" || fail "no RECV for JuxtaTest/$param in $(basename "$file")"
    local line; line=$(nth_match "$file" "$re" "$nth")
    read -r _ src dst rlen rsha <<<"$line"
    [[ $rlen == "$len" && $rsha == "$sha" ]] || fail "RECV mismatch: got '$line', want len $len sha $sha"
    log "  ok: $line"
    RECV_SRC=$src
}

run_send() {  # address size
    local t=$SECONDS
    cmd_a "SEND $1 $2"
    log "A> SEND $1 $2  ->  $ANS  ($((SECONDS - t)) s)"
    read -r kind slen ssha <<<"$ANS"
    [[ $kind == SENT && $slen == "$2" ]] || fail "SEND failed: $ANS"
    SENT_SHA=$ssha
}

# 1. direct TCP, 1 byte
run_send "tcp://127.0.0.1:$PORT_B/JuxtaTest/sink" 1
expect_recv "$WORK/B.out" sink 1 "$SENT_SHA" 1
[[ $RECV_SRC == "jxta://$UNIQUE_A" ]] || log "  note: source address on B is $RECV_SRC"

# 2. via the endpoint router, 1 MiB
run_send "jxta://$UNIQUE_B/JuxtaTest/sink" 1048576
expect_recv "$WORK/B.out" sink 1048576 "$SENT_SHA" 2

# 3. direct TCP to echo, 64 KiB; B echoes through the router to A's echo-reply
run_send "tcp://127.0.0.1:$PORT_B/JuxtaTest/echo" 65536
expect_recv "$WORK/B.out" echo 65536 "$SENT_SHA" 1
wait_count "$WORK/B.out" '^(ECHOED|ERROR) ' 1 "$STEP_TIMEOUT" || fail "B did not report ECHOED"
grep -q '^ECHOED 65536$' "$WORK/B.out" || fail "B: $(grep -E '^(ECHOED|ERROR) ' "$WORK/B.out" | head -1)"
log "  ok: B ECHOED 65536"
expect_recv "$WORK/A.out" echo-reply 65536 "$SENT_SHA" 1

# 4. PEERID and shutdown (QUIT for A, EOF for B)
cmd_a "PEERID"
[[ $ANS == "PEERID $URN_A" ]] || fail "PEERID answered '$ANS'"
cmd_a "QUIT"
[[ $ANS == BYE ]] || fail "QUIT answered '$ANS'"
exec 4>&-   # EOF on B's stdin
wait_count "$WORK/B.out" '^BYE$' 1 "$STEP_TIMEOUT" || fail "B did not say BYE on EOF"
for i in 0 1; do
    pid=${PIDS[$i]}
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "peer pid $pid still running 30 s after BYE"
    wait "$pid"; rc=$?
    [[ $rc -eq 0 ]] || fail "peer pid $pid exited with $rc"
done
log "PASS ($((SECONDS - T0)) s total)"
