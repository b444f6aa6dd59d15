#!/usr/bin/env bash
# Times the README's two set-up commands as a newcomer runs them: a fresh
# clone, an empty target directory. Prints each command's wall time and how
# many crates the second one compiled (it should be weir's test targets and
# the test-only crates, never arrow or DataFusion again). A failing command
# is reported with its first errors; its logs are kept.
#
#   benches/fresh-clone.sh [repository]   (default: this checkout)
set -euo pipefail
repo="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone --quiet "$repo" "$work/weir"
cd "$work/weir"
export CARGO_TARGET_DIR="$work/target"

started=$(date +%s)
run_status=0
cargo run -- run sql/examples/hop_bids.sql 2> "$work/run.log" > /dev/null || run_status=$?
ran=$(date +%s)
test_status=0
cargo test 2> "$work/test.log" > "$work/test.out" || test_status=$?
tested=$(date +%s)

first_compiled=$(grep -c '^ *Compiling ' "$work/run.log" || true)
second_compiled=$(grep -c '^ *Compiling ' "$work/test.log" || true)
shared=$(grep '^ *Compiling ' "$work/test.log" | grep -cE ' (arrow|parquet|datafusion)[-a-z]* v' || true)
echo "cargo run:  $((ran - started)) s, $first_compiled crates compiled"
echo "cargo test: $((tested - ran)) s, $second_compiled crates compiled ($shared of them arrow, parquet or DataFusion)"
grep '^ *Compiling ' "$work/test.log" | sed 's/^ *Compiling /  /'
echo "exit status: cargo run $run_status, cargo test $test_status"
if [ "$run_status" != 0 ] || [ "$test_status" != 0 ]; then
  kept="${TMPDIR:-/tmp}/fresh-clone-logs-$(date +%s)"
  mkdir -p "$kept" && cp "$work"/*.log "$work"/test.out "$kept"/
  grep -hE "^test .*FAILED|panicked|^FAIL|error(\[|:)" "$work/test.out" "$work/test.log" "$work/run.log" | head -20
  echo "logs kept in $kept"
  exit 1
fi
