#!/usr/bin/env bash
# Throughput of a job at parallelism 2 run three ways on this machine:
# in one process (`weir run`), on one TaskManager with 2 slots, and on two
# TaskManagers with 1 slot each (channels between them over Arrow Flight
# on loopback). Prints the median seconds and events/s of several runs.
#
#   cargo build --release && benches/cluster.sh [--runs 3] [WORKLOAD.sql ...]
#
# Defaults: ../shared/bench/tumble_seq.sql (30M rows) and
# benches/join_seq.sql (10M bids x 100k auctions, hash exchange).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || files=(../shared/bench/tumble_seq.sql benches/join_seq.sql)
weir=${CARGO_TARGET_DIR:-target}/release/weir
[ -x "$weir" ] || { echo "build first: cargo build --release" >&2; exit 2; }
work=$(mktemp -d)
pids=()
stop_cluster() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; pids=(); }
trap 'stop_cluster; rm -rf "$work"' EXIT

# Starts a JobManager and TaskManagers with the given slot counts; sets $jm.
start_cluster() {
  "$weir" jobmanager --port 0 --rest-port 0 > "$work/jm.log" 2>&1 & pids+=($!)
  for _ in $(seq 50); do grep -q "listening on" "$work/jm.log" && break; sleep 0.1; done
  jm=$(grep "listening on" "$work/jm.log" | grep -o '127.0.0.1:[0-9]*' | head -1)
  local n=0
  for slots in "$@"; do
    "$weir" taskmanager --jobmanager "$jm" --slots "$slots" > "$work/tm$n.log" 2>&1 & pids+=($!)
    n=$((n + 1))
    for _ in $(seq 50); do [ "$(grep -c registered "$work/jm.log")" -ge $n ] && break; sleep 0.1; done
  done
}

# Seconds of one run of $file ($@: extra weir run arguments).
seconds() {
  local start end
  start=$(date +%s.%N)
  "$weir" run --set parallelism.default=2 "$@" "$file" > /dev/null 2> "$work/run.log" || { cat "$work/run.log" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-18s %-26s %9s %12s\n' workload mode "median s" "events/s"
for file in "${files[@]}"; do
  rows=$(grep -o "'fields.id.end' = '[0-9]*'" "$file" | head -1 | grep -o '[0-9]*' | tail -1)
  rows=$((rows + 1))
  for mode in single "one TM, 2 slots" "two TMs, 1 slot each"; do
    case "$mode" in
      single) args=() ;;
      "one TM, 2 slots") start_cluster 2; args=(--jobmanager "$jm") ;;
      *) start_cluster 1 1; args=(--jobmanager "$jm") ;;
    esac
    s=$(for _ in $(seq "$runs"); do seconds "${args[@]}"; done | median)
    printf '%-18s %-26s %9.2f %12.0f\n' "$(basename "$file" .sql)" "$mode" "$s" "$(echo "$rows / $s" | bc -l)"
    stop_cluster
  done
done
