#!/usr/bin/env bash
# Set-up (scripts/setup.sh), then configure and build segtile. The build
# folder lives outside the clone, keyed by the clone's path, so reruns are
# incremental: $SEGTILE_HOME/build/<hash>. Prints nothing else on stdout
# but the build folder on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SEGTILE_HOME=${SEGTILE_HOME:-$HOME/.cache/segtile}
export SEGTILE_HOME
"$here/scripts/setup.sh" >&2
VENV=$SEGTILE_HOME/venv
SEGTILE_BUILD=${SEGTILE_BUILD:-$SEGTILE_HOME/build/$(printf %s "$here" | sha1sum | cut -c1-12)}
export SEGTILE_HALIDE_DIR=$("$VENV/bin/python" -c "import halide; print(halide.install_dir())")
if [ ! -f "$SEGTILE_BUILD/build.ninja" ]; then
  "$VENV/bin/cmake" --preset default -S "$here" -B "$SEGTILE_BUILD" >&2
fi
"$VENV/bin/cmake" --build "$SEGTILE_BUILD" -j "${SEGTILE_JOBS:-$(nproc)}" >&2
echo "$SEGTILE_BUILD"
