#!/usr/bin/env bash
# Runs every fuzz target of the module for the given time each (default 30s).
# `make test` runs their seed corpora; this explores beyond them.
set -euo pipefail
cd "$(dirname "$0")/.."
# The toolchain of the Makefile, also when this script is run on its own.
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
fuzztime="${1:-30s}"
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== $pkg $target"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
  done
done
