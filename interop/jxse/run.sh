#!/usr/bin/env bash
# Run one harness peer:  ./run.sh --port P [--home DIR] [--name NAME]
# stdout: protocol lines only; stderr: logs.
# Environment:
#   JXSE_LOG_LEVEL  JXSE/JUL log level (default WARNING)
#   CBJX_DISABLE=true  turn off the CBJX signature trailer (both sides must agree)
#   JAVA_OPTS       extra JVM flags (e.g. -Dnet.jxta.MTU=... -Djuxta.harness.sendTimeoutMs=...)
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ ! -f $DIR/target/classes/net/jxta/impl/peergroup/CompatibilityUtils.class || ! -f $DIR/target/lib/jxse-2.7.jar ]]; then
    echo "run.sh: harness not built; run $DIR/build.sh first" >&2
    exit 1
fi
flags=(-Dnet.jxta.logging.Logging="${JXSE_LOG_LEVEL:-WARNING}")
if [[ ${CBJX_DISABLE:-} == true ]]; then
    flags+=(-Dnet.jxta.endpoint.WireFormatMessageFactory.CBJX_DISABLE=true)
fi
# target/classes MUST precede the jxse jar: it holds the Java 9+ CompatibilityUtils shim.
# shellcheck disable=SC2086
exec java "${flags[@]}" ${JAVA_OPTS:-} -cp "$DIR/target/classes:$DIR/target/lib/*" org.juxta.harness.Main "$@"
