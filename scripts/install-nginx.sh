#!/usr/bin/env bash
# Installs nginx when missing (Debian 12: the nginx-light package, from the
# apt sources already configured; no registry host is written here). The
# bench's target N and the e2e test of docs/nginx.md run their own nginx on
# a free loopback port; the system service the package may start is stopped
# and disabled again.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  echo "install-nginx.sh: found $( (command -v nginx || echo /usr/sbin/nginx) )"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-nginx.sh: nginx is not installed and apt-get is missing: install nginx (>= 1.18) with your package manager, then re-run." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nginx-light >/dev/null \
  || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null
# The package may start a system service on :80; the tests start their own.
$SUDO systemctl disable --now nginx >/dev/null 2>&1 || $SUDO service nginx stop >/dev/null 2>&1 || true
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || {
  echo "install-nginx.sh: nginx still missing after apt-get install." >&2; exit 1; }
/usr/sbin/nginx -v
