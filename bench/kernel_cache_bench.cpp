// Getting a plan's kernels ready, three ways, each in its own process:
//   jit         JIT-compiled in memory one after another (what every run
//               paid before the kernel cache, and still pays with
//               SEGTILE_KERNEL_CACHE=off);
//   cache_cold  compiled into an empty kernel cache, in parallel on every
//               core (HL_NUM_THREADS), and stored;
//   cache_warm  loaded from the cache the cold run filled (every later run).
// The three of a configuration run one after another in one suite run, so
// their ratios compare. Counters: seconds, kernels, compiled, loaded, the
// process high-water mark (the JIT's includes the compiler's memory).
//
//   kernel_cache_bench [--long] --benchmark_out=bench/results/kernel_cache.json --benchmark_out_format=json
//
// Default: the main job's plan (marks_cnn, 9 kernels), Darknet19 and VGG16
// cut at pool2 and pool4 (7 kernels each); --long adds Darknet19 untiled
// (one head kernel of the whole network: minutes to compile).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/isolated_run.h"
#include "generators/jit_kernel.h"
#include "generators/kernel_cache.h"
#include "runtime/memory_ledger.h"
#include "spec/environment.h"

namespace {

using namespace segtile;
using namespace segtile::bench;
namespace fs = std::filesystem;

struct Config {
    std::string model;
    std::string cuts;  // "": untiled (the head kernel alone)
};

SegmentLayout layout_of(const Model &m, const std::string &cuts) {
    // Training kernels, as `segtile train` builds them (no image gradient).
    return cuts.empty() ? untiled_layout(m, false) : make_segments(m, parse_cuts(m, cuts), false);
}

void prepare(const Config &c, const std::string &how, const std::string &dir, IsolatedResult &r) {
    const Model m = load_model(c.model);
    const SegmentLayout layout = layout_of(m, c.cuts);
    const auto t0 = std::chrono::steady_clock::now();
    int kernels = 0;
    if (how == "jit") {
        if (c.cuts.empty()) {
            JitKernel head(m, layout, KernelKind::Head, 0, Halide::Float(32));
            kernels = 1;
        } else {
            ModelKernels k = jit_model_kernels(m, layout, Halide::Float(32));
            kernels = (int)(k.forward.size() + k.backward.size() + 1);
        }
        r.counters["compiled"] = kernels;
        r.counters["loaded"] = 0;
    } else {
        if (how == "cache_cold") fs::remove_all(dir);
        KernelCache cache(dir);
        if (c.cuts.empty()) {
            auto head = cache.kernel(m, layout, KernelKind::Head, 0, Halide::Float(32), nullptr);
            kernels = 1;
        } else {
            ModelKernels k = cache.model_kernels(m, layout, Halide::Float(32), nullptr, environment::threads());
            kernels = (int)(k.forward.size() + k.backward.size() + 1);
        }
        r.counters["compiled"] = cache.counts().compiled;
        r.counters["loaded"] = cache.counts().loaded;
        if (cache.counts().in_memory) throw std::runtime_error("the kernel cache could not store: " + cache.summary());
    }
    r.counters["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.counters["kernels"] = kernels;
    r.counters["threads"] = environment::threads();
    r.counters["high_water_mark_bytes"] = (double)process_high_water_mark();
}

void register_suite(const std::vector<Config> &configs, const BenchOptions &opt, const std::string &root) {
    const double limit = opt.time_limit_seconds > 0 ? opt.time_limit_seconds : 1800;
    for (const Config &cfg : configs)
        for (const char *how : {"jit", "cache_cold", "cache_warm"}) {
            std::string cuts_id = cfg.cuts.empty() ? "untiled" : cfg.cuts;
            for (char &ch : cuts_id)
                if (ch == ',') ch = '_';
            const std::string name = "BM_KernelPrep/" + cfg.model + "/cuts:" + cuts_id + "/" + how;
            const std::string dir = root + "/" + cfg.model + "-" + cuts_id;
            benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State &state) {
                const std::string what = cfg.model + " " + (cfg.cuts.empty() ? "untiled" : cfg.cuts) + " " + how;
                for (auto _ : state)
                    run_isolated_iteration(state, [&](IsolatedResult &out) { prepare(cfg, how, dir, out); }, limit,
                                           what, "seconds");
            })
                ->Iterations(1)
                ->UseManualTime()
                ->Unit(benchmark::kSecond);
        }
}

}  // namespace

int main(int argc, char **argv) {
    const BenchOptions opt = parse_bench_options(&argc, argv);
    std::vector<Config> configs = {{"marks_cnn", "down,pool1,pool2"}, {"darknet19", "pool2,pool4"}, {"vgg16", "pool2,pool4"}};
    if (opt.long_run) configs.push_back({"darknet19", ""});
    // A cache of the suite's own, removed at the end: the cold runs must
    // find nothing, and the user's cache stays as it was.
    std::string root = (fs::temp_directory_path() / "segtile-kernel-cache-bench-XXXXXX").string();
    if (!mkdtemp(root.data())) throw std::runtime_error("cannot create a folder for the bench's kernel cache");
    register_suite(configs, opt, root);
    const int rc = run_registered_benchmarks(&argc, argv);
    fs::remove_all(root);
    return rc;
}
