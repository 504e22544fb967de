#!/usr/bin/env bash
# Runs the demo (README's run command): installs what a fresh Debian machine lacks to build the edge
# (cmake for Pingora's zlib-ng, pkg-config and libssl-dev for its OpenSSL), then the edge with the sale
# core embedded and a stand-in site. Extra arguments go to `wicket demo` (`--help` lists them).
#
#   bash scripts/demo.sh
#   bash scripts/demo.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cc >/dev/null || need+=(gcc)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
exec cargo run -p wicket-edge --bin wicket -- demo "$@"
