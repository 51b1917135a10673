#!/usr/bin/env bash
# Runs every idemgate test: installs valkey-server, the PostgreSQL server,
# nginx (the bench's target N and the test of docs/nginx.md) and Debian's
# prometheus (promtool and the server the deploy tests run) when missing, then unit, store-contract (standalone and Cluster Valkey,
# PostgreSQL), e2e and deploy tests with -race (the deploy tests build Helm
# and kustomize from deploy/tools), then each fuzz target for a short bounded
# time.
#   FUZZTIME=30s scripts/test.sh    # longer fuzzing
#   SKIP_FUZZ=1 scripts/test.sh     # tests only
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-valkey.sh
bash scripts/install-postgres.sh
bash scripts/install-nginx.sh
# promtool and the Prometheus server for the deploy tests (Debian 12's
# package; where systemd runs it may also start its own service on :9090,
# which no test uses: they start their own on free loopback ports).
command -v promtool >/dev/null && command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }
echo "== go vet"
go vet ./...
echo "== promtool: alert rules"
promtool check rules deploy/prometheus/idemgate-rules.yaml
(cd deploy/prometheus && promtool test rules idemgate-rules_test.yaml)
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
