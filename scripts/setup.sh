#!/usr/bin/env bash
# Installs what segtile needs on a fresh Debian machine; idempotent and quick
# when everything is present. Venv and build live outside the clone
# (SEGTILE_HOME, default ~/.cache/segtile) so a rerun or a second clone reuses them.
set -euo pipefail
SEGTILE_HOME=${SEGTILE_HOME:-$HOME/.cache/segtile}
VENV=$SEGTILE_HOME/venv
DEB_PKGS=(g++ ninja-build libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
          pkg-config libtiff-dev libpng-dev libjpeg-dev libopenslide-dev libcairo2-dev)
PY_PKGS=(halide==21.0.0 "cmake>=3.28,<4.2" safetensors numpy matplotlib)

missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtual environment $VENV"
  mkdir -p "$SEGTILE_HOME"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import halide, numpy, safetensors.numpy, matplotlib" 2>/dev/null \
   || [ ! -x "$VENV/bin/cmake" ]; then
  echo "setup: installing ${PY_PKGS[*]} into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_PKGS[@]}"
fi
