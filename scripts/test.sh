#!/usr/bin/env bash
# Runs every test: unit, integration, fuzz-corpus replay and the interop
# tests against a live JXSE 2.7 peer (built from interop/jxse with Maven),
# plus the dependency audit (scripts/audit.sh: cargo-deny, installed from
# crates.io when missing, against the committed RustSec advisory database).
# Building needs OpenSSL's development files (libssl-dev, pkg-config).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust with rustup (https://rustup.rs)" >&2; exit 1; }
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need_apt+=(chromium)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
pkg-config --exists openssl 2>/dev/null || need_apt+=(libssl-dev)
# The bench's other stacks (crates/juxta-bench/peers/*.c, built by the bench):
# ZeroMQ and Open MPI.
pkg-config --exists libzmq 2>/dev/null || need_apt+=(libzmq3-dev)
command -v mpicc >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v git >/dev/null 2>&1 || need_apt+=(git)
# README.md's session (crates/juxta-cli/tests/readme.rs) reads metrics with curl.
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing ${need_apt[*]} with apt-get" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

echo "== building the JXSE 2.7 interop harness (Maven Central) =="
bash interop/jxse/build.sh

echo "== cargo fmt / clippy =="
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings

echo "== dependency audit: cargo deny check advisories (committed RustSec advisory-db) =="
bash scripts/audit.sh

echo "== cargo test =="
cargo test --workspace --release

echo "== cargo test -p juxta-proto (debug: overflow checks on) =="
cargo test -p juxta-proto
