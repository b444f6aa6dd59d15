#!/usr/bin/env bash
# weir's Python package: builds its wheel with maturin and runs its pytest
# suite in a virtual environment kept in a cache (maturin, pyarrow, pandas
# and pytest from PyPI, installed on first use).
#
#   scripts/python.sh test     builds the wheel, installs it, runs pytest
#   scripts/python.sh wheel    builds the wheel only (target/wheels)
#   scripts/python.sh bench    builds an optimized (release) wheel, installs
#                              it, runs benches/python.py (the first release
#                              build of the crate took 21 min here)
#
# WEIR_PYTHON_ENV picks the environment (default ~/.cache/weir/python).
set -euo pipefail
cd "$(dirname "$0")/.."
ENV="${WEIR_PYTHON_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/weir/python}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"

if [ ! -x "$ENV/bin/maturin" ]; then
  python=$(command -v python3 || command -v python) || { echo "python.sh: no python3" >&2; exit 1; }
  rm -rf "$ENV"
  "$python" -m venv "$ENV"
  "$ENV/bin/pip" install --quiet "maturin>=1.7,<2" "pyarrow>=14" "pandas>=1.5" "pytest>=7"
fi

# The dev profile: our crates quick to build, dependencies optimized, and
# the same build as `cargo test`'s, so nothing above arrow is built twice.
profile=dev
[ "${1:-test}" = bench ] && profile=release
rm -rf "$CARGO_TARGET_DIR/wheels"
"$ENV/bin/maturin" build --quiet --profile "$profile" -m python/Cargo.toml --out "$CARGO_TARGET_DIR/wheels" \
  --interpreter "$ENV/bin/python"
case "${1:-test}" in
  bench)
    "$ENV/bin/pip" install --quiet --force-reinstall --no-deps "$CARGO_TARGET_DIR"/wheels/weir-*.whl
    shift
    "$ENV/bin/python" benches/python.py "$@" ;;
  wheel) ls "$CARGO_TARGET_DIR"/wheels/*.whl ;;
  test)
    "$ENV/bin/pip" install --quiet --force-reinstall --no-deps "$CARGO_TARGET_DIR"/wheels/weir-*.whl
    cd python/tests && "$ENV/bin/python" -m pytest -q . ;;
  *) echo "python.sh: test, wheel or bench, not $1" >&2; exit 2 ;;
esac
