#!/usr/bin/env bash
# Installs valkey-server (and valkey-cli) when missing. On Debian 12 it enables
# bookworm-backports by reusing the mirror already configured in the apt
# sources, so no registry host is written into this repository.
set -euo pipefail
if command -v valkey-server >/dev/null 2>&1 && command -v valkey-cli >/dev/null 2>&1; then
  echo "install-valkey.sh: found $(valkey-server --version | cut -d' ' -f1-3)"
  exit 0
fi
if [ ! -r /etc/os-release ] || ! grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "install-valkey.sh: valkey-server is not installed and this is not Debian 12 (bookworm)." >&2
  echo "install-valkey.sh: install valkey-server and valkey-cli (>= 7.2) with your package manager, then re-run." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  mirror=""
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    # deb822: take the URIs of the stanza whose Suites include plain "bookworm".
    mirror=$(awk '/^URIs:/{u=$2} /^Suites:/{for(i=2;i<=NF;i++) if($i=="bookworm"){print u; exit}}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$mirror" ] && [ -r /etc/apt/sources.list ]; then
    mirror=$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' /etc/apt/sources.list)
  fi
  if [ -z "$mirror" ]; then
    echo "install-valkey.sh: found no Debian mirror for bookworm in the apt sources; add bookworm-backports yourself." >&2
    exit 1
  fi
  echo "deb $mirror bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/idemgate-backports.list >/dev/null
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports valkey-server valkey-tools >/dev/null 2>&1 \
  || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports valkey-server
# The package starts a system service on :6379; tests start their own servers.
$SUDO systemctl disable --now valkey-server >/dev/null 2>&1 || true
command -v valkey-server >/dev/null && command -v valkey-cli >/dev/null || {
  echo "install-valkey.sh: valkey-server or valkey-cli still missing after apt-get install." >&2; exit 1; }
valkey-server --version
