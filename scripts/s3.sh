#!/usr/bin/env bash
# An S3-protocol server for the tests of checkpoints on S3: moto's server
# (Apache-2.0, from PyPI), installed on first use into a virtual
# environment in a cache, listening on a free port of 127.0.0.1.
#
#   scripts/s3.sh start DIR BUCKET  starts it (files in DIR), creates BUCKET,
#                                   prints its endpoint (http://127.0.0.1:PORT)
#
# WEIR_S3_WATCH=PID stops the server and removes DIR when process PID exits.
# MOTO_VERSION picks moto's version; WEIR_MOTO_CACHE the environment
# (default ~/.cache/weir/moto-<version>).
set -euo pipefail

VERSION="${MOTO_VERSION:-5.2.1}"
CACHE="${WEIR_MOTO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weir/moto-$VERSION}"

die() { echo "s3.sh: $*" >&2; exit 1; }

# The virtual environment with moto's server in it; made once.
install() {
  if [ -x "$CACHE/bin/moto_server" ]; then
    return
  fi
  local python
  python=$(command -v python3 || command -v python) || die "no python3 to install moto with"
  rm -rf "$CACHE.partial"
  "$python" -m venv "$CACHE.partial" || die "python3 -m venv failed"
  "$CACHE.partial/bin/pip" install --quiet "moto[server]==$VERSION" >&2 \
    || die "pip install 'moto[server]==$VERSION' failed"
  rm -rf "$CACHE"
  mv "$CACHE.partial" "$CACHE"
  # A virtual environment's scripts name its interpreter by path: remake
  # them where the environment now is.
  sed -i "1s|.*|#!$CACHE/bin/python|" "$CACHE/bin/moto_server"
}

start() {
  local dir=$1 bucket=$2
  install
  mkdir -p "$dir"
  local port
  port=$("$CACHE/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  nohup "$CACHE/bin/moto_server" -H 127.0.0.1 -p "$port" > "$dir/moto.log" 2>&1 &
  local pid=$!
  echo "$pid" > "$dir/pid"
  if [ -n "${WEIR_S3_WATCH:-}" ]; then
    nohup bash -c "while kill -0 $WEIR_S3_WATCH 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 1; done;
      kill $pid 2>/dev/null; rm -rf '$dir'" >/dev/null 2>&1 &
  fi
  local endpoint="http://127.0.0.1:$port"
  for _ in $(seq 1 240); do
    kill -0 "$pid" 2>/dev/null || die "moto_server exited: $(tail -20 "$dir/moto.log")"
    if "$CACHE/bin/python" -c "import urllib.request as r; r.urlopen(r.Request('$endpoint/$bucket', method='PUT'), timeout=5)" 2>/dev/null; then
      echo "$endpoint"
      return
    fi
    sleep 0.25
  done
  die "moto_server did not answer on $endpoint within 60 s: $(tail -20 "$dir/moto.log")"
}

case "${1:-}" in
  start) [ $# -eq 3 ] || die "usage: s3.sh start DIR BUCKET"; start "$2" "$3" ;;
  *) die "usage: s3.sh start DIR BUCKET" ;;
esac
