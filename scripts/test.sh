#!/usr/bin/env bash
# Builds segtile (scripts/build.sh) and runs the whole test suite with ctest.
set -euo pipefail
build=$("$(dirname "$0")/build.sh" | tail -n 1)
ctest_bin=${SEGTILE_HOME:-$HOME/.cache/segtile}/venv/bin/ctest
cd "$build"
"$ctest_bin" --output-on-failure -j "${SEGTILE_JOBS:-$(nproc)}" "$@"
