#!/usr/bin/env bash
# Headless Chromium for the dashboard test: prints the path of a Chromium
# binary, installing Debian's `chromium` package first when none is there
# and this user may (root with apt-get). Exits non-zero, saying why, when
# there is none and none can be installed.
set -euo pipefail

find_chromium() {
  for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then
      command -v "$name"
      return 0
    fi
  done
  return 1
}

if find_chromium; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium.sh: no Chromium, and apt-get as root is not available to install it" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 || { echo "chromium.sh: apt-get update failed" >&2; exit 1; }
apt-get install -y -qq chromium >&2 || { echo "chromium.sh: apt-get install chromium failed" >&2; exit 1; }
find_chromium || { echo "chromium.sh: chromium installed but not found on PATH" >&2; exit 1; }
