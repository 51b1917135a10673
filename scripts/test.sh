#!/usr/bin/env bash
# Runs every idemgate test: installs valkey-server, the PostgreSQL server,
# nginx (the bench's target N and the test of docs/nginx.md), Node.js and
# npm (the bench's in-app middleware comparison), Debian's wrk (the
# bench's closed-loop load generator) and Debian's prometheus (promtool and
# the server the deploy tests run) when missing;
# then gofmt, go vet and the lint gate (scripts/lint.sh: staticcheck and
# govulncheck, pinned in scripts/lint/go.mod, over every module); then unit,
# store-contract (standalone and Cluster Valkey, PostgreSQL), e2e and deploy
# tests with -race (the deploy tests build Helm and kustomize from
# deploy/tools), the Caddy module's tests (caddy/: a real Caddy built
# with the module), then each fuzz target for a bounded number of
# executions. Every stage after the installs runs even when one fails; the
# failures are summarized at the end and the exit status is non-zero.
#   FUZZTIME=30s scripts/test.sh    # longer fuzzing (a duration works too)
#   SKIP_FUZZ=1 scripts/test.sh     # tests only
set -euo pipefail
cd "$(dirname "$0")/.."
# The Go every build and test here uses: 1.27.3, taken from the Go module
# proxy by the go command itself (about 76 MB, once per machine). The
# machine's own Go 1.26.8 has standard-library vulnerabilities that the
# lint gate reports (net/http, crypto/tls, crypto/x509: fixed in 1.26.9 and
# 1.26.10, which the module proxy here does not serve); the container image
# builds with the newest Go 1.27 (Dockerfile GO_VERSION). The allocation
# ceilings of proxy/allocs_race_*_test.go are this Go's figures.
export GOTOOLCHAIN=go1.27.3
bash scripts/install-valkey.sh
bash scripts/install-postgres.sh
bash scripts/install-nginx.sh
bash scripts/install-node.sh
# promtool and the Prometheus server for the deploy tests (Debian 12's
# package; where systemd runs it may also start its own service on :9090,
# which no test uses: they start their own on free loopback ports).
command -v promtool >/dev/null && command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }
# wrk, the bench's closed-loop load generator (TestBenchWrkSmoke; the bench
# itself installs it the same way when it runs without it).
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk >/dev/null; }
# Every stage below runs even when an earlier one failed, so one red run
# says what is wrong everywhere (a failing e2e test does not hide the
# Caddy module's tests or a fuzz finding); each failed stage is named again
# at the end with the lines that say why, and the script exits non-zero.
# The installs above stay fatal: a stage without its server only fails
# for that reason.
failed=()
summary="$(mktemp)"
stagelog="$(mktemp)"
trap 'rm -f "$summary" "$stagelog"' EXIT
# The lines of a failed stage's output that say why: go test's failed tests
# with their messages (file_test.go:N: ...), FAIL lines, panics, races and
# build errors. A stage with none of them is summarized by its last lines.
why='^[[:space:]]*--- FAIL|^FAIL|^panic:|^WARNING: DATA RACE|^[[:space:]]+[^[:space:]]+\.go:[0-9]+: |^[^[:space:]]+\.go:[0-9]+:[0-9]+: '
# stage NAME CMD...: runs CMD with its output shown as it comes and kept;
# on failure records NAME and the lines that say why for the summary.
stage() {
  local name="$1" rc=0 n
  shift
  echo "== $name"
  "$@" 2>&1 | tee "$stagelog" || rc=$?
  if [ "$rc" -ne 0 ]; then
    failed+=("$name")
    {
      echo "== FAILED: $name (exit $rc)"
      n="$(grep -cE "$why" "$stagelog" || true)"
      if [ "$n" -gt 0 ]; then
        grep -E "$why" "$stagelog" | head -n 80
        [ "$n" -le 80 ] || echo "... and $((n - 80)) more such lines in the output above"
      else
        tail -n 20 "$stagelog"
      fi
    } >>"$summary"
  fi
  return 0
}
gofmt_check() {
  local unformatted
  unformatted="$(gofmt -l .)" || return 1
  [ -z "$unformatted" ] || { echo "gofmt -w these files: $unformatted"; return 1; }
}
stage "gofmt" gofmt_check
stage "go vet" go vet ./...
stage "lint gate: staticcheck, govulncheck" bash scripts/lint.sh
stage "promtool: alert rules" bash -c 'promtool check rules deploy/prometheus/idemgate-rules.yaml && cd deploy/prometheus && promtool test rules idemgate-rules_test.yaml'
stage "go test -race ./..." go test -race -count=1 -timeout 20m ./...
# The Caddy module (its own Go module, so Caddy stays out of idemgate's
# binary): its tests build Caddy with the module and run the scenarios
# through it on a real valkey-server. Only the packages that have tests
# are tested: go test ./... would also compile Caddy's whole tree with
# -race for the packages without tests (cmd/caddy, the module), which
# doubles the cold build for nothing; vet covers those.
stage "caddy: go vet" bash -c 'cd caddy && go vet ./...'
stage "caddy: go test -race (the packages with tests)" bash -c 'cd caddy && pkgs="$(go list -f "{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}" ./...)" && go test -race -count=1 -timeout 10m $pkgs'
if [ "${SKIP_FUZZ:-}" != 1 ]; then
  # A count, not a duration: Go 1.26's fuzz coordinator can report a bare
  # "context deadline exceeded" when a worker is mid-call at the -fuzztime
  # deadline on a loaded machine (go.dev/issue/75804, fixed in Go 1.27); a
  # count has no deadline to race. 30,000 executions take 4-10 s a target on
  # a 2-core machine. A real finding still fails: it writes testdata/fuzz.
  fuzztime="${FUZZTIME:-30000x}"
  if ! pkgs="$(go list ./...)"; then
    failed+=("fuzz: go list ./...")
    echo "== FAILED: fuzz: go list ./..." >>"$summary"
  fi
  for pkg in $pkgs; do
    if ! targets="$(go test -list '^Fuzz' "$pkg")"; then
      failed+=("fuzz: go test -list $pkg")
      { echo "== FAILED: fuzz: go test -list $pkg"; echo "$targets" | tail -n 20; } >>"$summary"
      continue
    fi
    for target in $(echo "$targets" | grep '^Fuzz' || true); do
      stage "fuzz $pkg $target ($fuzztime)" go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
    done
  done
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo
  echo "== summary: ${#failed[@]} stage(s) failed"
  cat "$summary"
  echo
  # One closing line, as go test ends with its verdict.
  joined="$(printf '; %s' "${failed[@]}")"
  echo "FAIL: ${#failed[@]} stage(s) failed: ${joined#; }"
  exit 1
fi
echo "all tests passed"
