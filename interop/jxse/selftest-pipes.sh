#!/usr/bin/env bash
# Pipe / JxtaSocket / JxtaBiDiPipe self-test: two harness peers (A, B) on 127.0.0.1, CBJX at
# JXSE's default (on) unless CBJX_DISABLE=true is exported. After READY, each peer gets a ROUTE
# to the other. Then, A being the client/sender and B the server/receiver unless stated:
#   1. unicast pipe:  B PIPE_LISTEN; A PIPE_SEND 1 KiB x3, then 10 MiB x1     -> B PIPE_RECV (sha)
#   2. pipe echo:     A PIPE_LISTEN R; B PIPE_LISTEN_ECHO E R A; A PIPE_SEND E -> A PIPE_RECV on R
#   3. propagate:     B PIPE_LISTEN propagate; A PIPE_SEND ... propagate       -> B PIPE_RECV
#   4. JxtaSocket:    B SOCKET_SERVE 10 MiB; A SOCKET_CONNECT 10 MiB/10 MiB      -> hashes + clean close
#   5. JxtaBiDiPipe:  B BIDI_SERVE; A BIDI_CONNECT 4 KiB x10 (unreliable), 100 KB x3 (reliable)
#   6. PIPE_CLOSE, QUIT (A) and EOF (B): both exit 0.
# Every wait is bounded; only our own children are killed (by PID). Exits 0 on PASS.
# Environment: PORT_A (19711), PORT_B (19712), KEEP=1 keeps the work dir, STEP_TIMEOUT (60 s),
# SOCKET_SIZE (10485760), OVERALL_TIMEOUT (400 s).
set -uo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT_A=${PORT_A:-19711}
PORT_B=${PORT_B:-19712}
STEP_TIMEOUT=${STEP_TIMEOUT:-60}
OVERALL_TIMEOUT=${OVERALL_TIMEOUT:-400}
SOCKET_SIZE=${SOCKET_SIZE:-10485760}

WORK=$(mktemp -d /tmp/jxse-selftest-pipes.XXXXXX)
PIDS=()
WATCHDOG=
FAILED=0

log() { printf '[selftest-pipes %s] %s\n' "$(date +%T)" "$*" >&2; }

cleanup() {
    local rc=$?
    exec 3>&- 4>&-
    for pid in "${PIDS[@]}"; do
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
        echo "selftest-pipes: FAIL (work dir kept: $WORK)" >&2
    elif [[ ${KEEP:-0} == 1 ]]; then
        echo "selftest-pipes: work dir kept: $WORK" >&2
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
    local file=$1 re=$2 n=$3 deadline=$((SECONDS + $4))
    while (( SECONDS < deadline )); do
        local c; c=$(grep -c -E "$re" "$file" 2>/dev/null); c=${c:-0}
        (( c >= n )) && return 0
        sleep 0.05
    done
    return 1
}
count() { local c; c=$(grep -c -E "$2" "$1" 2>/dev/null); echo "${c:-0}"; }
nth_match() { grep -E "$2" "$1" | sed -n "${3}p"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

start_peer() {  # name port fd
    local name=$1 port=$2 fd=$3
    mkfifo "$WORK/$name.in"
    "$DIR/run.sh" --port "$port" --home "$WORK/home-$name" --name "selftest-$name" \
        <"$WORK/$name.in" >"$WORK/$name.out" 2>"$WORK/$name.err" 3>&- 4>&- &
    PIDS+=($!)
    eval "exec $fd>\"$WORK/$name.in\""
}

# cmd PEER "COMMAND" ANSWER_REGEX [TIMEOUT]: send COMMAND, wait for the next line matching
# ANSWER_REGEX (counted from before the command), leave it in $ANS.
cmd() {
    local p=$1 line=$2 re=$3 t=${4:-$STEP_TIMEOUT} fd n
    [[ $p == A ]] && fd=3 || fd=4
    n=$(count "$WORK/$p.out" "$re")
    echo "$line" >&"$fd" || fail "cannot write to $p"
    wait_count "$WORK/$p.out" "$re" $((n + 1)) "$t" || fail "no answer from $p to '$line' within ${t}s"
    ANS=$(nth_match "$WORK/$p.out" "$re" $((n + 1)))
    log "$p> ${line:0:60}...  ->  ${ANS:0:110}"
}

# expect PEER REGEX N [TIMEOUT]: at least N lines matching REGEX on PEER's stdout.
expect() {
    wait_count "$WORK/$1.out" "$2" "$3" "${4:-$STEP_TIMEOUT}" \
        || fail "$1: want $3 line(s) matching '$2', got $(count "$WORK/$1.out" "$2")"
}

# pattern_sha SIZE: sha256 of the harness payload pattern, computed independently.
pattern_sha() {
    python3 -c 'import hashlib,sys
n=int(sys.argv[1]); b=bytes(((i*31+7)&0xff) for i in range(256))*(n//256+1)
print(hashlib.sha256(b[:n]).hexdigest())' "$1"
}

command -v python3 >/dev/null || fail "python3 is needed to compute expected hashes"
[[ -f $DIR/target/lib/jxse-2.7.jar && -f $DIR/target/classes/org/juxta/harness/Pipes.class ]] \
    || fail "not built: run $DIR/build.sh"
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
read -r _ URN_A ADDR_A < <(grep '^READY ' "$WORK/A.out")
read -r _ URN_B ADDR_B < <(grep '^READY ' "$WORK/B.out")
log "both peers READY after $((SECONDS - T0)) s: A = $URN_A, B = $URN_B"

cmd A "ROUTE $URN_B $ADDR_B" '^(ROUTED|ERROR)( |$)'
[[ $ANS == "ROUTED OK" || $ANS == "ROUTED ALREADY_EXIST" ]] || fail "A: $ANS"
cmd B "ROUTE $URN_A $ADDR_A" '^(ROUTED|ERROR)( |$)'
[[ $ANS == "ROUTED OK" || $ANS == "ROUTED ALREADY_EXIST" ]] || fail "B: $ANS"

new_pipe() {  # peer -> $PIPE
    cmd "$1" PIPE_NEW '^(PIPE|ERROR) '
    [[ $ANS == "PIPE urn:jxta:cbid-"* ]] || fail "PIPE_NEW answered '$ANS'"
    PIPE=${ANS#PIPE }
}

SHA_1K=$(pattern_sha 1024)
SHA_SOCK=$(pattern_sha "$SOCKET_SIZE")

# 1. unicast pipe A -> B
new_pipe B; P1=$PIPE
cmd B "PIPE_LISTEN $P1" '^(PIPE_LISTENING|ERROR) '
[[ $ANS == "PIPE_LISTENING $P1" ]] || fail "$ANS"
cmd A "PIPE_SEND $P1 $URN_B 1024 3" '^(PIPE_SENT|ERROR) '
[[ $ANS == "PIPE_SENT 3 1024 $SHA_1K" ]] || fail "PIPE_SEND: $ANS"
expect B "^PIPE_RECV $P1 1024 $SHA_1K\$" 3
log "  ok: B got 3 x 1024 B on $P1"
t=$(now_ms)
cmd A "PIPE_SEND $P1 $URN_B $SOCKET_SIZE" '^(PIPE_SENT|ERROR) '
[[ $ANS == "PIPE_SENT 1 $SOCKET_SIZE $SHA_SOCK" ]] || fail "PIPE_SEND: $ANS"
expect B "^PIPE_RECV $P1 $SOCKET_SIZE $SHA_SOCK\$" 1
PIPE_MS=$(( $(now_ms) - t ))
log "  ok: B got $SOCKET_SIZE B on $P1 ($PIPE_MS ms from PIPE_SEND to PIPE_RECV)"

# 2. pipe echo: A -> B (E), B -> A (R)
new_pipe A; R=$PIPE
cmd A "PIPE_LISTEN $R" '^(PIPE_LISTENING|ERROR) '
[[ $ANS == "PIPE_LISTENING $R" ]] || fail "$ANS"
new_pipe B; E=$PIPE
cmd B "PIPE_LISTEN_ECHO $E $R $URN_A" '^(PIPE_LISTENING|ERROR) '
[[ $ANS == "PIPE_LISTENING $E" ]] || fail "$ANS"
cmd A "PIPE_SEND $E $URN_B 1024" '^(PIPE_SENT|ERROR) '
[[ $ANS == "PIPE_SENT 1 1024 $SHA_1K" ]] || fail "PIPE_SEND: $ANS"
expect B "^PIPE_RECV $E 1024 $SHA_1K\$" 1
expect B '^(PIPE_ECHOED|ERROR PIPE_ECHO)' 1
grep -q '^PIPE_ECHOED 1024$' "$WORK/B.out" || fail "B: $(grep -E '^(PIPE_ECHOED|ERROR PIPE_ECHO)' "$WORK/B.out")"
expect A "^PIPE_RECV $R 1024 $SHA_1K\$" 1
log "  ok: echo came back on $R"

# 3. propagate pipe, sent to one peer
new_pipe B; P3=$PIPE
cmd B "PIPE_LISTEN $P3 propagate" '^(PIPE_LISTENING|ERROR) '
[[ $ANS == "PIPE_LISTENING $P3" ]] || fail "$ANS"
cmd A "PIPE_SEND $P3 $URN_B 1024 1 propagate" '^(PIPE_SENT|ERROR) '
[[ $ANS == "PIPE_SENT 1 1024 $SHA_1K" ]] || fail "PIPE_SEND: $ANS"
expect B "^PIPE_RECV $P3 1024 $SHA_1K\$" 1
log "  ok: propagate pipe message arrived"

# 4. JxtaSocket, SOCKET_SIZE each way
new_pipe B; P4=$PIPE
cmd B "SOCKET_SERVE $P4 $SOCKET_SIZE" '^(SOCKET_SERVING|ERROR) '
[[ $ANS == "SOCKET_SERVING $P4" ]] || fail "$ANS"
t=$(now_ms)
cmd A "SOCKET_CONNECT $P4 $URN_B $SOCKET_SIZE $SOCKET_SIZE" '^(SOCKET_DONE|ERROR SOCKET_CONNECT) ' 180
SOCKET_MS=$(( $(now_ms) - t ))
[[ $ANS == "SOCKET_DONE $SOCKET_SIZE $SHA_SOCK" ]] || fail "SOCKET_CONNECT: $ANS"
grep -q "^SOCKET_SENT $SOCKET_SIZE $SHA_SOCK\$" "$WORK/A.out" || fail "A: no matching SOCKET_SENT"
expect B "^SOCKET_ACCEPTED $P4 $URN_A\$" 1
expect B "^SOCKET_RECV $SOCKET_SIZE $SHA_SOCK\$" 1
expect B '^SOCKET_CLOSED ' 1
grep -q '^SOCKET_CLOSED ok$' "$WORK/B.out" || fail "B: $(grep '^SOCKET_CLOSED' "$WORK/B.out")"
log "  ok: JxtaSocket $SOCKET_SIZE B each way + close in $SOCKET_MS ms"
log "     A: $(grep -o 'SOCKET_CONNECT .*: connect.*' "$WORK/A.err" | sed 's/^SOCKET_CONNECT [^:]*: //')"
log "     B: $(grep -o 'SOCKET_SERVE .*: received.*' "$WORK/B.err" | sed 's/^SOCKET_SERVE [^:]*: //')"

# 5. JxtaBiDiPipe round trips
new_pipe B; P5=$PIPE
cmd B "BIDI_SERVE $P5" '^(BIDI_SERVING|ERROR) '
[[ $ANS == "BIDI_SERVING $P5" ]] || fail "$ANS"
SHA_4K=$(pattern_sha 4096)
cmd A "BIDI_CONNECT $P5 $URN_B 4096 10" '^(BIDI_DONE|ERROR BIDI_CONNECT) '
[[ $ANS == "BIDI_DONE 10 $SHA_4K" ]] || fail "BIDI_CONNECT: $ANS"
expect B "^BIDI_RECV 4096 $SHA_4K\$" 10
expect B "^BIDI_CLOSED $P5\$" 1
log "  ok: 10 unreliable bidi round trips"
SHA_100K=$(pattern_sha 100000)
cmd A "BIDI_CONNECT $P5 $URN_B 100000 3 reliable" '^(BIDI_DONE|ERROR BIDI_CONNECT) '
[[ $ANS == "BIDI_DONE 3 $SHA_100K" ]] || fail "BIDI_CONNECT reliable: $ANS"
expect B "^BIDI_RECV 100000 $SHA_100K\$" 3
expect B "^BIDI_ACCEPTED $P5 $URN_A unreliable\$" 1
expect B "^BIDI_ACCEPTED $P5 $URN_A reliable\$" 1
log "  ok: 3 reliable bidi round trips"

# 6. PIPE_CLOSE, shutdown (QUIT for A, EOF for B)
for p in "$P1" "$P4" "$P5"; do
    cmd B "PIPE_CLOSE $p" '^(PIPE_CLOSED|ERROR) '
    [[ $ANS == "PIPE_CLOSED $p" ]] || fail "PIPE_CLOSE: $ANS"
done
cmd A QUIT '^(BYE|ERROR)( |$)'
[[ $ANS == BYE ]] || fail "QUIT answered '$ANS'"
exec 4>&-
expect B '^BYE$' 1
for i in 0 1; do
    pid=${PIDS[$i]}
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "peer pid $pid still running 30 s after BYE"
    wait "$pid"; rc=$?
    [[ $rc -eq 0 ]] || fail "peer pid $pid exited with $rc"
done
if grep -E '^ERROR' "$WORK/A.out" "$WORK/B.out"; then fail "unexpected ERROR lines"; fi
log "PASS ($((SECONDS - T0)) s total; 10 MiB pipe message $PIPE_MS ms; JxtaSocket $SOCKET_SIZE B each way $SOCKET_MS ms)"
