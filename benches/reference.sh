#!/usr/bin/env bash
# Runs the reference workloads (../shared/bench/*.sql and the GROUP BY ones
# in benches/, 30M rows each) with
# `weir run` at parallelism 1 and 2, several times each, and prints the median
# events/s and the peak resident memory. With --flink it also runs Apache Flink
# on the same files once each (../shared/flink/, set up with its setup.sh), so
# both are measured on this machine in one run.
#
#   cargo build --release && benches/reference.sh [--runs 5] [--flink] [--only groupby]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=5
flink=0
only=
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --flink) flink=1; shift ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--flink] [--only NAME-PATTERN]" >&2; exit 2 ;;
  esac
done
bench_dir=${WEIR_BENCH_DIR:-../shared/bench}
weir=${CARGO_TARGET_DIR:-target}/release/weir
[ -x "$weir" ] || weir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/weir
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
printf '%-22s %3s %10s %14s %10s\n' workload p "median s" "events/s" "peak RSS"
workloads=("$bench_dir/passthrough_seq.sql" "$bench_dir/tumble_seq.sql" "$bench_dir/hop_seq.sql"
  benches/groupby_seq.sql benches/groupby_1m_keys.sql benches/join_seq.sql benches/interval_join_seq.sql)
# measure LABEL PATH ROWS P [weir options...]: median time and peak RSS of $runs runs.
measure() {
  local label=$1 path=$2 rows=$3 p=$4
  shift 4
  local times=() peak=0 out rss median
  for _ in $(seq "$runs"); do
    /usr/bin/time -o "$tmp" -f "%e %M" "$weir" run "$path" --set parallelism.default=$p "$@" >/dev/null 2>&1
    out=$(tail -1 "$tmp")
    times+=("${out% *}"); rss=${out#* }; [ "$rss" -gt "$peak" ] && peak=$rss
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%-22s %3s %10s %14s %8s MB\n' "$label" "$p" "$median" \
    "$(awk -v r=$rows -v t="$median" 'BEGIN {printf "%.1fM", r / t / 1e6}')" "$((peak / 1024))"
}
for path in "${workloads[@]}"; do
  file=$(basename "$path" .sql)
  case "$file" in *$only*) ;; *) continue ;; esac
  # Rows read by the sources: events/s counts them, as Flink's figures do.
  case "$file" in
    join_seq) rows=10100000 ;;
    interval_join_seq) rows=20000000 ;;
    *) rows=30000000 ;;
  esac
  for p in 1 2; do
    measure "$file" "$path" "$rows" "$p"
    # The regular join's small side qualifies for a broadcast; measure the
    # hashed join too (Flink's streaming planner never broadcasts).
    if [ "$file" = join_seq ]; then
      measure "$file (hashed)" "$path" "$rows" "$p" --set table.optimizer.join.broadcast-threshold=-1
    fi
    if [ "$flink" = 1 ]; then
      /tmp/flinkenv/venv/bin/python ../shared/flink/run_sql.py "$path" -p "$p" \
        --conf table.local-time-zone=UTC 2>/dev/null | grep -E "^ *events/s" | sed 's/^ */    flink: /'
      case "$file" in groupby*)
        /tmp/flinkenv/venv/bin/python ../shared/flink/run_sql.py "$path" -p "$p" \
          --conf table.local-time-zone=UTC --conf table.exec.mini-batch.enabled=true \
          --conf "table.exec.mini-batch.allow-latency=1 s" --conf table.exec.mini-batch.size=5000 \
          2>/dev/null | grep -E "^ *events/s" | sed 's/^ */    flink, mini-batch 1 s\/5000: /' ;;
      esac
    fi
  done
done
