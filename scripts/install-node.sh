#!/usr/bin/env bash
# Installs Node.js and npm when missing (Debian 12: the nodejs and npm
# packages, from the apt sources already configured; no registry host is
# written here). The bench's in-app comparison (docs/performance.md,
# "Against in-app middleware") and its test run an Express handler with the
# npm packages pinned in e2e/bench/inapp/package-lock.json, which they
# install themselves with npm ci into the user's cache directory.
set -euo pipefail
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  echo "install-node.sh: found $(command -v node) $(node --version), npm $(npm --version)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-node.sh: node or npm is not installed and apt-get is missing: install Node.js (>= 18) and npm with your package manager, then re-run." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
command -v node >/dev/null && command -v npm >/dev/null || {
  echo "install-node.sh: node or npm still missing after apt-get install." >&2; exit 1; }
echo "install-node.sh: $(node --version), npm $(npm --version)"
