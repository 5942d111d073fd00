#!/usr/bin/env bash
# One command for every benchmark: builds segtile (scripts/build.sh), runs
# each suite with JSON out into bench/results/, then bench/report.py writes
# the tables and plots of docs/benchmarks.md and docs/img/.
#   bench/run_all.sh           default sizes (one to two hours on 2 idle cores)
#   bench/run_all.sh --long    adds the long sizes and the scale run (many hours)
# Extra arguments after --long (or after "--" without it) go to every suite,
# e.g. bench/run_all.sh -- --time_limit=1800
# SEGTILE_BUILD / SEGTILE_JOBS choose the build folder and jobs, as for build.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
long=()
if [ "${1:-}" = "--long" ]; then long=(--long); shift; fi
if [ "${1:-}" = "--" ]; then shift; fi
extra=("$@")
build=$("$here/scripts/build.sh" | tail -n 1)
py=${SEGTILE_HOME:-$HOME/.cache/segtile}/venv/bin/python
results=$here/bench/results
mkdir -p "$results"
run() {  # suite, json name, extra args
  local suite=$1 name=$2
  shift 2
  echo "== $suite" >&2
  # A suite's earlier files, whole or in parts, would be merged by report.py.
  rm -f "$results/$name.json" "$results/${name}_"*.json
  "$build/bench/$suite" "$@" --benchmark_out="$results/$name.json" --benchmark_out_format=json
}
run machine_peak_bench machine_peak
# Every later suite divides by this run's float32 all-core peak.
peak=$("$py" -c "import json,sys; d=json.load(open(sys.argv[1])); \
print([b['gflops'] for b in d['benchmarks'] if b['name'].startswith('BM_FmaPeak/bits:32/threads:0')][0])" \
  "$results/machine_peak.json")
run layer_bench layers --peak_gflops="$peak" ${long[@]+"${long[@]}"} ${extra[@]+"${extra[@]}"}
run peers_bench peers --peak_gflops="$peak" ${long[@]+"${long[@]}"} ${extra[@]+"${extra[@]}"}
run train_step_bench train_step --peak_gflops="$peak" ${long[@]+"${long[@]}"} ${extra[@]+"${extra[@]}"}
# PyTorch's step beside segtile's (skipped, with a message, without torch).
rm -f "$results/torch.json"
"$py" "$here/bench/torch_step.py" --out "$results/torch.json" ${long[@]+"${long[@]}"}
run kernel_cache_bench kernel_cache ${long[@]+"${long[@]}"} ${extra[@]+"${extra[@]}"}
# The scale run (Darknet19 at 16384^2 under 1 GiB, tens of minutes, about
# 40 GiB of checkpoint files under $TMPDIR or /tmp) only with --long.
if [ ${#long[@]} -gt 0 ]; then run scale_bench scale --peak_gflops="$peak" ${extra[@]+"${extra[@]}"}; fi
"$py" "$here/bench/report.py" --results "$results" --docs "$here/docs"
echo "wrote docs/benchmarks.md and docs/img/" >&2
