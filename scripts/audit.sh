#!/usr/bin/env bash
# Dependency audit: `cargo deny check advisories` (deny.toml) against the
# RustSec advisory database committed in third_party/advisory-db, with no
# network access to the database. A dependency with a known vulnerability
# that deny.toml does not ignore (with a reason) makes this script fail.
#
# cargo-deny reads advisory databases as git clones of URLs. This script
# turns the committed copy into a local git repository and, for the
# cargo-deny commands only, tells git (GIT_CONFIG_* environment, nothing is
# written to any git config) to fetch the URL in deny.toml from it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-deny >/dev/null 2>&1; then
  echo "installing cargo-deny from crates.io (cargo install --locked cargo-deny)" >&2
  cargo install --locked cargo-deny
fi

db_url="https://github.com/rustsec/advisory-db"   # as in deny.toml
src="$PWD/target/advisory-db-src"
rm -rf "$src"
mkdir -p "$src"
cp -R third_party/advisory-db/. "$src/"
# Fixed dates: the same snapshot always gives the same commit.
export GIT_AUTHOR_DATE="2000-01-01T00:00:00Z" GIT_COMMITTER_DATE="2000-01-01T00:00:00Z"
git -C "$src" init -q -b main
git -C "$src" add -A
git -C "$src" -c user.name=juxta -c user.email=juxta@localhost -c commit.gpgsign=false \
  commit -q -m "RustSec advisory-db, committed copy (third_party/advisory-db)"
unset GIT_AUTHOR_DATE GIT_COMMITTER_DATE

deny() {
  GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="url.file://$src.insteadOf" GIT_CONFIG_VALUE_0="$db_url" \
    cargo deny --color never "$@"
}

# 1. The canary: a fixture depending on smallvec 1.6.0 (RUSTSEC-2021-0003)
#    must be reported, or the database is not really being used.
if out=$(deny --manifest-path scripts/deny-canary/Cargo.toml --config scripts/deny-canary/deny.toml \
           check advisories 2>&1); then
  printf '%s\n' "$out" >&2
  echo "audit: the canary (smallvec 1.6.0) passed: the advisory database is not being used" >&2
  exit 1
fi
if ! grep -q "RUSTSEC-2021-0003" <<<"$out"; then
  printf '%s\n' "$out" >&2
  echo "audit: the canary failed without reporting RUSTSEC-2021-0003" >&2
  exit 1
fi
echo "audit: canary reported RUSTSEC-2021-0003 as expected"

# 2. The workspace.
deny --locked check advisories
