#!/usr/bin/env bash
# The lint gate: staticcheck and govulncheck, pinned in scripts/lint/go.mod,
# over every Go module of the repository (each go.mod below the root). Exits
# non-zero, naming the module and the tool, on any finding or when a tool
# cannot run; nothing is skipped. scripts/test.sh runs it; alone:
#   bash scripts/lint.sh
# govulncheck reads the Go vulnerability database as of VULNDB_VERSION: the
# reports of golang.org/x/vulndb at that commit, fetched through the Go
# module proxy (this machine and CI reach it; vuln.go.dev they may not) and
# indexed with its cmd/indexdb, so every run checks against the same
# database until the pin moves. Bump VULNDB_VERSION to the newest
# golang.org/x/vulndb pseudo-version for newer reports, or check against the
# live database (or a mirror, or a local copy) instead:
#   VULNDB=https://vuln.go.dev bash scripts/lint.sh
#   VULNDB=file:///path/to/vulndb bash scripts/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# govulncheck checks the standard library of the Go that runs it: the one
# scripts/test.sh builds and tests with, unless the caller chose another.
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
root="$PWD"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
(cd scripts/lint && go build -o "$bin/" honnef.co/go/tools/cmd/staticcheck golang.org/x/vuln/cmd/govulncheck)
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018
if [ -z "${VULNDB:-}" ]; then
  echo "== Go vulnerability database: golang.org/x/vulndb@$VULNDB_VERSION"
  reports="$(go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  if [ -z "$reports" ] || [ ! -d "$reports/data/osv" ]; then
    echo "lint gate failed: could not fetch golang.org/x/vulndb@$VULNDB_VERSION through the Go module proxy (GOPROXY=$(go env GOPROXY)); set VULNDB to a copy of the database"
    exit 1
  fi
  go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$reports/data/osv" -out "$bin/vulndb"
  VULNDB="file://$bin/vulndb"
fi
vulndb=(-db "$VULNDB")
failed=()
for mod in $(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort); do
  echo "== staticcheck $mod ($("$bin/staticcheck" -version))"
  if ! (cd "$root/$mod" && "$bin/staticcheck" ./...); then
    echo "staticcheck: findings in module $mod (listed above): fix them; a check that is wrong for this code is turned off in that module's staticcheck.conf, with the reason"
    failed+=("staticcheck $mod")
  fi
  echo "== govulncheck $mod"
  rc=0
  (cd "$root/$mod" && "$bin/govulncheck" "${vulndb[@]}" ./...) || rc=$?
  case "$rc" in
  0) ;;
  3)
    echo "govulncheck: module $mod calls vulnerable code (listed above): upgrade the module it names to its fixed version (go get MODULE@VERSION in $mod, then go mod tidy)"
    failed+=("govulncheck $mod")
    ;;
  *)
    echo "govulncheck: could not check module $mod (exit $rc; its error is above). It needs the Go vulnerability database: with no network to it, point VULNDB at a mirror or a local copy (VULNDB=file:///path). Not skipped: the lint gate fails"
    failed+=("govulncheck $mod (did not run)")
    ;;
  esac
done
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'lint gate failed: %s\n' "${failed[@]}"
  exit 1
fi
echo "lint gate passed"
