#!/usr/bin/env bash
# Installs the PostgreSQL server (initdb, postgres) when missing, for the
# tests of store/postgres and the e2e suite, which start their own servers
# on free loopback ports (store/postgres/pgtest). On Debian 12 it installs the
# `postgresql` package (PostgreSQL 15) from the apt sources already
# configured, running apt-get update only when the package is not known yet.
set -euo pipefail
find_initdb() {
  local d
  if command -v pg_config >/dev/null 2>&1; then
    d=$(pg_config --bindir 2>/dev/null || true)
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then echo "$d"; return 0; fi
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then echo "$d"; return 0; fi
  done
  return 1
}
if bindir=$(find_initdb); then
  echo "install-postgres.sh: found $("$bindir/postgres" --version) in $bindir"
  exit 0
fi
if [ ! -r /etc/os-release ] || ! grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "install-postgres.sh: the PostgreSQL server is not installed and this is not Debian 12 (bookworm)." >&2
  echo "install-postgres.sh: install PostgreSQL 15 or newer (initdb and postgres) with your package manager, then re-run." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if ! apt-cache policy postgresql 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  $SUDO apt-get update -qq
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
# The package creates (and may start) a cluster on :5432. The tests never use
# it (each starts its own server on a free port, in its own directory, as the
# postgres user the package creates), but it need not run either.
$SUDO systemctl disable --now postgresql >/dev/null 2>&1 || true
if command -v pg_lsclusters >/dev/null 2>&1; then
  pg_lsclusters --no-header 2>/dev/null | while read -r ver name _; do
    $SUDO pg_ctlcluster "$ver" "$name" stop >/dev/null 2>&1 || true
  done
fi
bindir=$(find_initdb) || { echo "install-postgres.sh: initdb still missing after apt-get install postgresql." >&2; exit 1; }
id postgres >/dev/null 2>&1 || { echo "install-postgres.sh: the postgres user is missing; the tests run the server as that user when run as root." >&2; exit 1; }
"$bindir/postgres" --version
