#!/usr/bin/env bash
# Build the JXSE 2.7 interop harness: target/classes (harness + CompatibilityUtils shim)
# and target/lib/*.jar (jxse, netty, bcprov). Needs JDK 17 and Maven; only Maven Central is used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rm -rf target/lib            # never leave stale jars behind if dependencies change
if ! mvn -B -q -Dstyle.color=never -DskipTests package "$@"; then
    echo "build.sh: maven build FAILED (rerun without -q for details: mvn -B -DskipTests package)" >&2
    exit 1
fi
for f in target/classes/net/jxta/impl/peergroup/CompatibilityUtils.class \
         target/classes/org/juxta/harness/Main.class; do
    [[ -f $f ]] || { echo "build.sh: missing $f" >&2; exit 1; }
done
ls target/lib/jxse-2.7.jar target/lib/netty-3.2.2.Final.jar target/lib/bcprov-jdk15-140.jar >/dev/null \
    || { echo "build.sh: runtime jars missing from target/lib" >&2; exit 1; }
