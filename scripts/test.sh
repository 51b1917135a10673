#!/usr/bin/env bash
# Runs every idemgate test: installs valkey-server and the PostgreSQL server
# when missing, then unit, store-contract (standalone and Cluster Valkey,
# PostgreSQL) and e2e tests with -race,
# then each fuzz target for a short bounded time.
#   FUZZTIME=30s scripts/test.sh    # longer fuzzing
#   SKIP_FUZZ=1 scripts/test.sh     # tests only
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-valkey.sh
bash scripts/install-postgres.sh
echo "== go vet"
go vet ./...
echo "== go test -race ./..."
go test -race -count=1 -timeout 20m ./...
if [ "${SKIP_FUZZ:-}" != 1 ]; then
  fuzztime="${FUZZTIME:-8s}"
  for pkg in $(go list ./...); do
    for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
      echo "== fuzz $pkg $target ($fuzztime)"
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
    done
  done
fi
echo "all tests passed"
