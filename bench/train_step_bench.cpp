// The training step of the paper's two networks, VGG16 and Darknet19
// (batch 1, float32), at growing image sizes, with segtile's CPU schedule,
// under memory caps. Counters (bench/step_run.h): seconds per step,
// compile seconds, peak working memory (ledger), process high-water mark,
// useful GFLOP/s and fraction of machine peak; plus the checkpoint store
// and the recompute factor (FLOPs executed / FLOPs of untiled training).
//
//   train_step_bench [--long] [--peak_gflops=X] [--time_limit=S] \
//       --benchmark_out=bench/results/train_step.json --benchmark_out_format=json
//
// Default sizes 256, 512, 1024; --long adds 2048 and 4096 (the untiled
// VGG16 step at 4096 needs about 40 GiB: on a 24 GiB machine that
// configuration fails, which is the point of tiling, and the capped ones
// are sized from the planner's prediction instead). Bigger images, whose
// checkpoints outgrow memory too: scale_bench. Each configuration
// runs in its own process, which compiles its own kernels, so
// the high-water mark is its own; it includes the JIT compiler's memory
// (step_high_water_mark_bytes leaves it out). The row "1/8-mapped" is the
// 1/8 plan with its checkpoints in memory-mapped files and its kernels
// loaded from the kernel cache (filled by a process before it): the whole
// memory of a second `segtile train --checkpoint-dir` run.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "bench/bench_options.h"
#include "bench/capped_step.h"
#include "bench/isolated_run.h"
#include "bench/step_run.h"
#include "spec/environment.h"

namespace {

using namespace segtile;
using namespace segtile::bench;

// A cap on the step's working memory, as a fraction of the untiled step's
// measured peak at the same model and size; fraction 0 is no cap.
struct MemoryCap {
    std::string name;
    double fraction = 0;
    // The checkpoint store in memory-mapped files (--checkpoint-dir) and
    // the kernels loaded from a warm kernel cache, as a second `segtile
    // train` run has them: the process's whole memory, not just working.
    bool mapped = false;
};

// The caps every model and size runs under, in this order: the untiled step
// first (the capped runs are sized from its measured peak), then the
// planner's plans under 1/2, 1/8 and 1/32 of it, then 1/8 again with its
// checkpoints in files.
std::vector<MemoryCap> memory_caps() {
    return {{"none", 0}, {"1/2", 0.5}, {"1/8", 0.125}, {"1/32", 1.0 / 32}, {"1/8-mapped", 0.125, true}};
}

// The user's kernel cache (SEGTILE_KERNEL_CACHE, else $SEGTILE_HOME/kernels;
// "" when off: then the mapped rows JIT-compile in the measured process).
std::string bench_kernel_cache_dir() { return environment::kernel_cache_dir(); }

// A fresh folder for one mapped row's checkpoint files (they are unlinked
// as soon as mapped; the folder is removed after the run). On the disk of
// $TMPDIR: a tmpfs there would keep the "files" in memory.
std::string bench_checkpoint_dir() {
    const std::filesystem::path d =
        std::filesystem::temp_directory_path() / ("segtile-train-step-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d.string();
}

// Runs one step under `cap`, in a child process, compiled there:
// `untiled_peak_bytes` is what the "none" run of the same model and size
// measured (0 if it did not run or failed: then the planner's
// prediction). A step JIT-compiled in the parent and run in the forked
// child ran 6x slower (VGG16 256^2: 8.9 s against 1.5 s compiled in the
// child), so nothing is compiled before the fork (bench/isolated_run.h).
void run_step_under_cap(const MemoryCap &cap, const StepConfig &c, double untiled_peak_bytes, double peak_gflops,
                        IsolatedResult &r) {
    if (cap.fraction == 0) {
        CompiledStep step = compile_training_step(c);
        run_compiled_step(step, c, peak_gflops, r);
        r.counters["checkpoint_bytes"] = 0;  // untiled: no checkpoint store
        r.counters["recompute_factor"] = 1;  // every layer once forward, once backward
        return;
    }
    // Capped runs: plan for cap.fraction * untiled_peak_bytes, run the plan
    // with the SegmentedExecutor, report the same counters. Where the
    // untiled step did not run (too big for the machine), the planner's
    // prediction for it stands in.
    CappedStepOptions opt;
    if (cap.mapped) {
        opt.kernel_cache_dir = bench_kernel_cache_dir();
        opt.checkpoint_dir = bench_checkpoint_dir();
        opt.mapped_plan = true;
    }
    run_capped_fraction(c.model, c.size, cap.fraction, untiled_peak_bytes, peak_gflops, r, opt);
    if (cap.mapped) std::filesystem::remove_all(opt.checkpoint_dir);
}

// Fills the kernel cache with the plan's kernels in a process of its own,
// so that the measured one loads them all (a second run's process).
void prepare_mapped_kernels(const MemoryCap &cap, const StepConfig &c, double untiled_peak_bytes, double limit) {
    CappedStepOptions opt;
    opt.kernel_cache_dir = bench_kernel_cache_dir();
    opt.prepare_only = true;
    opt.mapped_plan = true;  // the measured process's plan
    const IsolatedResult r = run_isolated(
        [&](IsolatedResult &out) { run_capped_fraction(c.model, c.size, cap.fraction, untiled_peak_bytes, 0, out, opt); },
        limit);
    if (!r.ok) std::fprintf(stderr, "%s %d: filling the kernel cache failed: %s\n", c.model.c_str(), c.size, r.error.c_str());
}

struct Config {
    std::string model;
    int size;
};

// Owned by main and shared by the benchmarks in registration order: the
// untiled peaks the capped runs are sized from.
struct SuiteState {
    std::map<std::pair<std::string, int>, double> untiled_peak;
};

void register_suite(const std::vector<MemoryCap> &caps, const std::vector<Config> &configs, const BenchOptions &opt,
                    SuiteState &suite) {
    const double limit = opt.time_limit_seconds > 0 ? opt.time_limit_seconds : 1800;
    for (const Config &cfg : configs)
        for (const MemoryCap &cap : caps) {
            std::string cap_id = cap.name;
            for (char &ch : cap_id)
                if (ch == '/') ch = '_';  // "1_8", "1_8-mapped"
            const std::string name =
                "BM_TrainStep/" + cfg.model + "/size:" + std::to_string(cfg.size) + "/cap:" + cap_id;
            benchmark::RegisterBenchmark(name.c_str(), [=, &suite](benchmark::State &state) {
                StepConfig c;
                c.model = cfg.model;
                c.size = cfg.size;
                c.schedule = Schedule::Cpu;
                const auto key = std::make_pair(cfg.model, cfg.size);
                const double untiled = suite.untiled_peak.count(key) ? suite.untiled_peak.at(key) : 0;
                const std::string what = cfg.model + " " + std::to_string(cfg.size) + " cap " + cap.name;
                for (auto _ : state) {
                    if (cap.mapped) prepare_mapped_kernels(cap, c, untiled, limit);
                    state.counters["peak_gflops"] = opt.peak_gflops;
                    state.counters["cap_fraction"] = cap.fraction;
                    IsolatedResult r = run_isolated_iteration(
                        state, [&](IsolatedResult &out) { run_step_under_cap(cap, c, untiled, opt.peak_gflops, out); },
                        limit, what, "seconds_per_step");
                    if (r.ok && cap.fraction == 0) suite.untiled_peak[key] = r.counters["peak_working_bytes"];
                }
            })
                ->Iterations(1)
                ->UseManualTime()
                ->Unit(benchmark::kSecond);
        }
}

}  // namespace

int main(int argc, char **argv) {
    const BenchOptions opt = parse_bench_options(&argc, argv);
    std::vector<int> sizes = {256, 512, 1024};
    if (opt.long_run) sizes.insert(sizes.end(), {2048, 4096});
    std::vector<Config> configs;
    for (const char *m : {"vgg16", "darknet19"})
        for (int s : sizes) configs.push_back({m, s});
    SuiteState suite;
    register_suite(memory_caps(), configs, opt, suite);
    return run_registered_benchmarks(&argc, argv);
}
