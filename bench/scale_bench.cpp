// Issue 6's scale run: one complete training step far beyond what the
// machine could hold untiled, by default Darknet19 at 16384x16384 under a
// 1 GiB working-memory cap with the checkpoint store in memory-mapped files
// (about 36 GiB for that plan, more than this machine's 24 GiB of memory).
// One step, not the best of several: it takes tens of minutes, so the time
// includes the first touch of every buffer. A line per segment on stderr
// shows progress. Counters as train_step_bench's capped rows
// (bench/capped_step.h).
//
//   scale_bench [--peak_gflops=X] [--model=darknet19] [--size=16384] \
//       [--cap=1GiB] [--checkpoint_dir=DIR] [--warm_up] [--image_gradient] [--calibrated] [--kernel_cache] \
//       --benchmark_out=bench/results/scale.json --benchmark_out_format=json
//
// DIR defaults to a fresh folder under $TMPDIR (or /tmp), removed after the
// run; it needs the checkpoint store's size free on disk. --image_gradient
// also computes and stores the image's gradient, which training leaves out.
// --calibrated plans with the rates `segtile plan --calibrate` saved
// (calibration_path()) instead of the defaults; bench/time_model_check.py
// compares the plan's predicted segment times with the measured ones.
// --kernel_cache takes the kernels from the kernel cache (compiling into it
// what is missing) instead of JIT-compiling them in the process.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "autoscheduler/calibrate.h"
#include "bench/bench_options.h"
#include "bench/capped_step.h"
#include "bench/isolated_run.h"
#include "runtime/memory_ledger.h"
#include "spec/environment.h"

namespace {

using namespace segtile;
using namespace segtile::bench;

struct ScaleOptions {
    std::string model = "darknet19";
    int size = 16384;
    std::string cap = "1GiB";
    std::string checkpoint_dir;  // "": a temporary folder
    bool warm_up = false;
    bool image_gradient = false;
    bool calibrated = false;
    bool kernel_cache = false;  // kernels from the kernel cache, as `segtile train`'s
    // The plan counts the mapped checkpoint pages against the cap, as
    // `segtile train --checkpoint-dir` plans; off: the cap is of working
    // memory alone (the runs before 2026-12-07 evening).
    bool mapped_plan = false;
};

// Takes this suite's own flags out of argv, as parse_bench_options does.
ScaleOptions parse_scale_options(int *argc, char **argv) {
    ScaleOptions o;
    int kept = 1;
    for (int i = 1; i < *argc; i++) {
        const std::string a = argv[i];
        auto value = [&](const char *flag) { return a.substr(std::string(flag).size()); };
        if (a.rfind("--model=", 0) == 0) o.model = value("--model=");
        else if (a.rfind("--size=", 0) == 0) o.size = std::stoi(value("--size="));
        else if (a.rfind("--cap=", 0) == 0) o.cap = value("--cap=");
        else if (a.rfind("--checkpoint_dir=", 0) == 0) o.checkpoint_dir = value("--checkpoint_dir=");
        else if (a == "--warm_up") o.warm_up = true;
        else if (a == "--image_gradient") o.image_gradient = true;
        else if (a == "--calibrated") o.calibrated = true;
        else if (a == "--kernel_cache") o.kernel_cache = true;
        else if (a == "--mapped_plan") o.mapped_plan = true;
        else argv[kept++] = argv[i];
    }
    *argc = kept;
    argv[kept] = nullptr;
    return o;
}

}  // namespace

int main(int argc, char **argv) {
    const BenchOptions opt = parse_bench_options(&argc, argv);
    ScaleOptions so = parse_scale_options(&argc, argv);
    const int64_t cap = parse_bytes(so.cap);
    TimeRates rates;
    if (so.calibrated && !load_time_rates(rates, calibration_path())) {
        std::fprintf(stderr, "--calibrated: no calibration at %s; run `segtile plan --calibrate` first\n",
                     calibration_path().c_str());
        return 2;
    }
    namespace fs = std::filesystem;
    bool temporary = so.checkpoint_dir.empty();
    if (temporary) {
        const char *tmp = std::getenv("TMPDIR");
        so.checkpoint_dir = (fs::path(tmp && *tmp ? tmp : "/tmp") / ("segtile-scale-" + std::to_string(getpid()))).string();
    }
    fs::create_directories(so.checkpoint_dir);
    const std::string name = "BM_ScaleStep/" + so.model + "/size:" + std::to_string(so.size) + "/cap:" + so.cap +
                             (so.image_gradient ? "/image_gradient" : "") + (so.calibrated ? "/calibrated" : "") + (so.mapped_plan ? "/mapped_plan" : "");
    benchmark::RegisterBenchmark(name.c_str(), [&](benchmark::State &state) {
        for (auto _ : state) {
            CappedStepOptions co;
            co.warm_up = so.warm_up;
            co.mapped_plan = so.mapped_plan;
            co.image_gradient = so.image_gradient;
            co.checkpoint_dir = so.checkpoint_dir;
            co.progress = true;
            co.rates = rates;
            if (so.kernel_cache) co.kernel_cache_dir = environment::kernel_cache_dir();
            // No time limit beyond the suite's flag: the run is the point.
            IsolatedResult r = run_isolated(
                [&](IsolatedResult &out) { run_capped_step(so.model, so.size, cap, opt.peak_gflops, out, co); },
                opt.time_limit_seconds > 0 ? opt.time_limit_seconds : 6 * 3600.0);
            for (const auto &[k, v] : r.counters) state.counters[k] = v;
            const std::string what = so.model + " " + std::to_string(so.size) + " cap " + so.cap;
            if (!r.ok) {  // reported as the other suites do (bench/report.py)
                state.SetLabel(what + ": FAILED: " + r.error);
                continue;
            }
            state.SetLabel(what + " checkpoints in " + so.checkpoint_dir);
            state.SetIterationTime(r.counters["seconds_per_step"]);
        }
    })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kSecond);
    const int status = run_registered_benchmarks(&argc, argv);
    if (temporary) fs::remove_all(so.checkpoint_dir);
    return status;
}
