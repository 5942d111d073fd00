// The training step (batch 1, float32) side by side in one run: untiled,
// scheduled by Halide's Li2018, Adams2019 and Mullapudi2016 autoschedulers
// (the plugins of the same Halide package, estimates set for the image
// size; generators/peer_schedule.h) and by segtile's CPU schedule
// (schedules/cpu_schedule.cpp); then segtile's planned, tiled step
// under caps of 1/4 and 1/16 of segtile's untiled peak measured just
// before (issue 4). The peers have no way to run under a cap: their rows'
// peaks say how far over it they are. Counters: bench/step_run.h, and the
// capped rows' bench/capped_step.h.
//
//   peers_bench [--long] [--peak_gflops=X] [--time_limit=S] \
//       --benchmark_out=bench/results/peers.json --benchmark_out_format=json
//
// Default: tiny_cnn, VGG16 and Darknet19 at 256x256 and VGG16 at 512x512;
// --long adds tiny_cnn and Darknet19 at 512x512 and VGG16/Darknet19 at
// 1024x1024. Each configuration runs in its own process
// (bench/isolated_run.h): one whose autoscheduler fails, crashes or passes
// the time limit (default 600 s, compile included, so the default run
// stays under about 15 minutes per model) is reported with the reason in
// its label and no counters, and the suite goes on; so is a cap below the
// smallest feasible plan (the parameters, their gradients and Adam's state
// alone exceed 1/16 of VGG16's untiled peak below 1024x1024), with that
// smallest cap. On 2 cores shared with other work, compiling a VGG16 step
// alone can take longer than the limit: raise --time_limit on an idle
// machine.
#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_options.h"
#include "bench/capped_step.h"
#include "bench/isolated_run.h"
#include "bench/step_run.h"

namespace {

using namespace segtile;
using namespace segtile::bench;

struct Scheduler {
    std::string name;
    Schedule schedule;
    double cap_fraction = 0;  // of segtile's untiled peak; 0: untiled, no cap
};

const std::vector<Scheduler> &schedulers() {
    static const std::vector<Scheduler> s = {
        {"segtile_cpu", Schedule::Cpu},
        {"Li2018", Schedule::Peer},
        {"Adams2019", Schedule::Peer},
        {"Mullapudi2016", Schedule::Peer},
        {"segtile_cpu_cap_1_4", Schedule::Cpu, 0.25},
        {"segtile_cpu_cap_1_16", Schedule::Cpu, 1.0 / 16},
    };
    return s;
}

// segtile's untiled peaks, measured by the first row of each model and
// size; the capped rows after it are sized from them.
using UntiledPeaks = std::map<std::pair<std::string, int>, double>;

void run_config(benchmark::State &state, const std::string &model, int size, const Scheduler &s,
                const BenchOptions &opt, UntiledPeaks &untiled) {
    StepConfig c;
    c.model = model;
    c.size = size;
    c.schedule = s.schedule;
    c.peer.autoscheduler = s.name;
    // Adams2019's default beam search (beam_size 32) took 3 minutes for
    // one conv + relu backward here; a whole training step has dozens of
    // layers. Greedy search (beam_size 1) finishes; the label says so.
    if (s.name == "Adams2019") c.peer.extra["beam_size"] = "1";
    const double limit = opt.time_limit_seconds > 0 ? opt.time_limit_seconds : 600;
    const auto key = std::make_pair(model, size);
    for (auto _ : state) {
        IsolatedResult r = run_isolated(
            [&](IsolatedResult &out) {
                if (s.cap_fraction == 0) return run_training_step(c, opt.peak_gflops, out);
                run_capped_fraction(model, size, s.cap_fraction, untiled.count(key) ? untiled.at(key) : 0,
                                    opt.peak_gflops, out);
            },
            limit);
        for (const auto &[k, v] : r.counters) state.counters[k] = v;
        state.counters["peak_gflops"] = opt.peak_gflops;
        state.counters["cap_fraction"] = s.cap_fraction;
        std::string what = model + " " + std::to_string(size) + " " + s.name;
        for (const auto &[k, v] : c.peer.extra) what += " " + k + "=" + v;
        if (!r.ok) {
            state.SetLabel(what + ": FAILED: " + r.error);
            state.SetIterationTime(0);
            continue;
        }
        if (s.name == "segtile_cpu") untiled[key] = r.counters["peak_working_bytes"];
        state.SetLabel(what);
        state.SetIterationTime(r.counters["seconds_per_step"]);
    }
}

}  // namespace

int main(int argc, char **argv) {
    const BenchOptions opt = parse_bench_options(&argc, argv);
    struct Size {
        std::string model;
        int size;
    };
    std::vector<Size> sizes = {{"tiny_cnn", 256}, {"vgg16", 256}, {"darknet19", 256}, {"vgg16", 512}};
    if (opt.long_run)
        for (Size s : std::vector<Size>{{"tiny_cnn", 512}, {"darknet19", 512}, {"vgg16", 1024}, {"darknet19", 1024}})
            sizes.push_back(s);
    UntiledPeaks untiled;  // outlives the benchmarks, which run after registration
    for (const Size &sz : sizes)
        for (const Scheduler &s : schedulers())
            benchmark::RegisterBenchmark(
                ("BM_PeerStep/" + sz.model + "/size:" + std::to_string(sz.size) + "/" + s.name).c_str(),
                [=, &untiled](benchmark::State &st) { run_config(st, sz.model, sz.size, s, opt, untiled); })
                ->Iterations(1)
                ->UseManualTime()
                ->Unit(benchmark::kSecond);
    return run_registered_benchmarks(&argc, argv);
}
