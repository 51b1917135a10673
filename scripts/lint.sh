#!/usr/bin/env bash
# The lint gate: staticcheck and govulncheck, pinned in scripts/lint/go.mod,
# over every Go module of the repository (each go.mod below the root). Exits
# non-zero, naming the module and the tool, on any finding or when a tool
# cannot run; nothing is skipped. scripts/test.sh runs it; alone:
#   bash scripts/lint.sh
# govulncheck reads the Go vulnerability database over the network (its
# default -db); to use a mirror or a local copy of it instead:
#   VULNDB=file:///path/to/vulndb bash scripts/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
(cd scripts/lint && go build -o "$bin/" honnef.co/go/tools/cmd/staticcheck golang.org/x/vuln/cmd/govulncheck)
vulndb=()
[ -z "${VULNDB:-}" ] || vulndb=(-db "$VULNDB")
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
