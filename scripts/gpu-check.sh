#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, its driver, Python with
# PyTorch, and no Halide: builds nothing. Runs, each under its own timeout,
# all within ~9 minutes:
#   1. cuda_tiled_test: tiled steps on the GPU against the CPU kernels
#      (tiny_cnn) and against one tile (VGG16);
#   2. per size (4096^2, 8192^2, 20480^2): PyTorch baselines
#      (bench/gpu/pytorch_baseline.py: VGG16 and Darknet19, untiled and
#      checkpoint_sequential, capped at $CAP_GIB GiB of device memory, OOMs
#      recorded), then segtile_gpu_check, the same steps tiled with the CUDA
#      kernels; device memory sampled with nvidia-smi during every run.
# Settings (environment): BUDGET_S, SIZES, CAP_GIB, TILE_PX, LIMIT_LARGE_S, BASELINES=0
# (segtile alone, for a rerun once the baselines are measured), OVERLAP
# (streams, host or sequential: how segtile_gpu_check's main steps run).
# Results: one JSON per run, nvidia-smi output, summary.json, in <out dir>.
#
#   scripts/gpu-check.sh <bundle dir> <out dir>
#
# <bundle dir> is what `cmake --build <build> --target gpu_check_bundle`
# writes to <build>/gpu-check-bundle (bin/, models/).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bundle=$(cd "${1:?usage: gpu-check.sh <bundle dir> <out dir>}" && pwd)
out=${2:?usage: gpu-check.sh <bundle dir> <out dir>}
mkdir -p "$out"
out=$(cd "$out" && pwd)
CAP_GIB=${CAP_GIB:-11}
TILE_PX=${TILE_PX:-1024}       # segtile tile side in image pixels
BUDGET_S=${BUDGET_S:-530}      # whole run, seconds
SIZES=${SIZES:-"4096 8192 20480"}
OVERLAP=${OVERLAP:-streams}   # segtile_gpu_check's main steps: streams, host or sequential
overlap=$OVERLAP
BASELINES=${BASELINES:-1}     # 0: segtile only (a rerun after the baselines were measured)
PYTHON=${PYTHON:-python3}
export SEGTILE_MODELS_DIR="$bundle/models"
start=$(date +%s)

left() { echo $((BUDGET_S - ($(date +%s) - start))); }

# run_limited <name> <seconds> <command...>: stdout/stderr to <name>.log;
# the exit status (124: timed out) to <name>.rc. Never more than what is left.
run_limited() {
  local name=$1 limit=$2
  shift 2
  local l
  l=$(left)
  if [ "$l" -lt 15 ]; then
    echo "skipped: no time left" > "$out/$name.log"
    echo skipped > "$out/$name.rc"
    return
  fi
  [ "$limit" -gt $((l - 5)) ] && limit=$((l - 5))
  echo "== $name (limit ${limit}s, $(left)s left)"
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1
  echo $? > "$out/$name.rc"
  tail -n 2 "$out/$name.log"
}

# Device memory used, sampled every 100 ms while a command runs.
run_sampled() {
  local name=$1
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.mem.csv" 2>/dev/null &
  local sampler=$!
  run_limited "$@"
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
}

# Halide's CUDA runtime opens "libcuda.so"; a driver-only install (a
# container, say) may hold only libcuda.so.1, and then every kernel would
# find no device and the exactness tests would skip. Point it at .so.1.
find_libcuda() {
  local d so1 dirs ldp=${LD_LIBRARY_PATH:-}
  dirs="${ldp//:/ } /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/wsl/lib"
  for d in $dirs; do
    [ -e "$d/libcuda.so" ] && { echo "$d/libcuda.so"; return; }
  done
  ldconfig -p 2>/dev/null | grep -q 'libcuda\.so ' && { echo "libcuda.so (ldconfig)"; return; }
  so1=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
  for d in $dirs; do
    [ -z "$so1" ] && [ -e "$d/libcuda.so.1" ] && so1="$d/libcuda.so.1"
  done
  [ -z "$so1" ] && { echo "not found"; return; }
  mkdir -p "$out/libcuda"
  ln -sf "$so1" "$out/libcuda/libcuda.so"
  echo "$so1 (as $out/libcuda/libcuda.so)"
}
echo "libcuda: $(find_libcuda)" | tee "$out/libcuda.txt"
[ -d "$out/libcuda" ] && export LD_LIBRARY_PATH="$out/libcuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

nvidia-smi > "$out/nvidia-smi.txt" 2>&1
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits > "$out/idle-memory-mib.txt" 2>&1

run_limited exactness 150 "$bundle/bin/cuda_tiled_test" --gtest_output="json:$out/exactness.json"

# One segtile step, $name, of the loop below: $model at $size, in $overlap.
segtile_step() {
  run_sampled "$name" "$limit" "$bundle/bin/segtile_gpu_check" "$model" "$size" "$TILE_PX" "$out/$name.json" \
    $((CAP_GIB * 1024 * 1024 * 1024)) "$overlap" $compare
}

# Size by size, baselines then segtile, so that what a short budget cuts is
# the largest size.
for size in $SIZES; do
  for model in vgg16 darknet19; do
    [ "$BASELINES" = 0 ] && break
    for mode in untiled checkpoint; do
      run_sampled "pytorch_${model}_${size}_${mode}" 45 \
        "$PYTHON" "$here/bench/gpu/pytorch_baseline.py" --model "$model" --size "$size" --mode "$mode" \
        --cap-gib "$CAP_GIB" --out "$out/pytorch_${model}_${size}_${mode}.json"
    done
  done
  # VGG16 at 4096^2 took over 60 s on an H200 (2026-12-04): give the
  # smallest size room for one VGG16 figure.
  # At the first size each step runs three times: on two CUDA streams
  # (OVERLAP, default streams), then with only the host's work overlapping
  # the GPU, then one tile at a time: what each overlap gains.
  case $size in 4096) limit=120 ;; 8192) limit=120 ;; *) limit=${LIMIT_LARGE_S:-330} ;; esac
  compare=""
  [ "$size" = "${SIZES%% *}" ] && compare=compare
  # Darknet19 first: the cheaper step, so a short budget cuts VGG16's.
  for model in darknet19 vgg16; do
    name="segtile_${model}_${size}"
    segtile_step
    # Two streams had not run on a GPU when this was written: if a step
    # fails on them (not a timeout), the rest of the check runs without,
    # starting with that step again (its failure stays in *_streams.*).
    if [ "$overlap" = streams ] && ! grep -qE '^(0|124|137|skipped)$' "$out/$name.rc"; then
      for f in json log rc mem.csv; do
        [ -e "$out/$name.$f" ] && mv "$out/$name.$f" "$out/${name}_streams.$f"
      done
      overlap=host
      segtile_step
    fi
  done
done

nvidia-smi > "$out/nvidia-smi-end.txt" 2>&1

# One summary: every run's JSON (or its exit status), with the device
# memory peak sampled during it.
"$PYTHON" - "$out" "$CAP_GIB" <<'EOF'
import glob, json, os, sys
out, cap = sys.argv[1], float(sys.argv[2])
idle = 0
try:
    idle = int(open(os.path.join(out, "idle-memory-mib.txt")).read().split()[0])
except Exception:
    pass
runs = []
for rc_file in sorted(glob.glob(os.path.join(out, "*.rc"))):
    name = os.path.basename(rc_file)[:-3]
    rc = open(rc_file).read().strip()
    r = {"run": name, "exit": rc}
    j = os.path.join(out, name + ".json")
    if os.path.exists(j) and name != "exactness":
        try:
            r.update(json.load(open(j)))
        except ValueError:
            pass
    if rc == "124":
        r["status"] = "timeout"
    mem = os.path.join(out, name + ".mem.csv")
    if os.path.exists(mem):
        vals = [int(v) for v in open(mem).read().split() if v.strip().isdigit()]
        if vals:
            r["device_used_peak_mib"] = max(vals)
            r["device_used_peak_over_idle_mib"] = max(vals) - idle
            r["over_cap"] = (max(vals) - idle) > cap * 1024
    runs.append(r)
# A skipped exactness test on a machine with a GPU means the kernels found
# no device (libcuda): that is a failure of the check, not a pass.
exact = {"passed": 0, "failed": 0, "skipped": 0}
try:
    for suite in json.load(open(os.path.join(out, "exactness.json")))["testsuites"]:
        for t in suite["testsuite"]:
            k = "skipped" if t.get("result") == "SKIPPED" else "failed" if t.get("failures") else "passed"
            exact[k] += 1
except (OSError, ValueError, KeyError):
    exact["error"] = "no readable exactness.json"
print("exactness tests:", exact)
summary = {"cap_gib": cap, "idle_device_mib": idle, "exactness": exact, "runs": runs}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
for r in runs:
    print(r["run"], r.get("status", r["exit"]), r.get("seconds", ""), r.get("device_used_peak_over_idle_mib", ""),
          r.get("device_peak_bytes", r.get("peak_allocated_bytes", "")), r.get("error", "")[:200])
EOF
echo "gpu-check: $(( $(date +%s) - start )) s; results in $out"
