#!/usr/bin/env bash
# Times the README's two set-up commands as a newcomer runs them: a fresh
# clone, an empty target directory. Prints each command's wall time and how
# many crates the second one compiled (it should be weir's test targets and
# the test-only crates, never arrow or DataFusion again).
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
cargo run -- run sql/examples/hop_bids.sql 2> "$work/run.log" > /dev/null
ran=$(date +%s)
cargo test 2> "$work/test.log" > "$work/test.out"
tested=$(date +%s)

first_compiled=$(grep -c '^ *Compiling ' "$work/run.log" || true)
second_compiled=$(grep -c '^ *Compiling ' "$work/test.log" || true)
shared=$(grep '^ *Compiling ' "$work/test.log" | grep -cE ' (arrow|parquet|datafusion)[-a-z]* v' || true)
echo "cargo run:  $((ran - started)) s, $first_compiled crates compiled"
echo "cargo test: $((tested - ran)) s, $second_compiled crates compiled ($shared of them arrow, parquet or DataFusion)"
grep '^ *Compiling ' "$work/test.log" | sed 's/^ *Compiling /  /'
