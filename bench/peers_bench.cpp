// The untiled training step (batch 1, float32) scheduled four ways, side by
// side in one run: by Halide's Li2018, Adams2019 and Mullapudi2016
// autoschedulers (the plugins of the same Halide package, estimates set for
// the image size; generators/peer_schedule.h) and by segtile's CPU schedule
// (autoscheduler/cpu_schedule.cpp). Counters: bench/step_run.h.
//
//   peers_bench [--long] [--peak_gflops=X] [--time_limit=S] \
//       --benchmark_out=bench/results/peers.json --benchmark_out_format=json
//
// Default: tiny_cnn, VGG16 and Darknet19 at 256x256; --long adds 512x512
// and VGG16/Darknet19 at 1024x1024. Each configuration runs in its own
// process (bench/isolated_run.h): one whose autoscheduler fails, crashes or
// passes the time limit (default 600 s, compile included, so the default
// run stays under about 15 minutes per model) is reported with the reason
// in its label and no counters, and the suite goes on. On 2 cores shared
// with other work, compiling a VGG16 step alone can take longer than that:
// raise --time_limit on an idle machine.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/isolated_run.h"
#include "bench/step_run.h"

namespace {

using namespace segtile;
using namespace segtile::bench;

struct Scheduler {
    std::string name;
    Schedule schedule;
};

const std::vector<Scheduler> &schedulers() {
    static const std::vector<Scheduler> s = {
        {"segtile_cpu", Schedule::Cpu},
        {"Li2018", Schedule::Peer},
        {"Adams2019", Schedule::Peer},
        {"Mullapudi2016", Schedule::Peer},
    };
    return s;
}

void run_config(benchmark::State &state, const std::string &model, int size, const Scheduler &s,
                const BenchOptions &opt) {
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
    for (auto _ : state) {
        IsolatedResult r = run_isolated([&](IsolatedResult &out) { run_training_step(c, opt.peak_gflops, out); }, limit);
        for (const auto &[k, v] : r.counters) state.counters[k] = v;
        state.counters["peak_gflops"] = opt.peak_gflops;
        std::string what = model + " " + std::to_string(size) + " " + s.name;
        for (const auto &[k, v] : c.peer.extra) what += " " + k + "=" + v;
        if (!r.ok) {
            state.SetLabel(what + ": FAILED: " + r.error);
            state.SetIterationTime(0);
            continue;
        }
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
    std::vector<Size> sizes = {{"tiny_cnn", 256}, {"vgg16", 256}, {"darknet19", 256}};
    if (opt.long_run)
        for (Size s : std::vector<Size>{{"tiny_cnn", 512}, {"vgg16", 512}, {"darknet19", 512}, {"vgg16", 1024},
                                        {"darknet19", 1024}})
            sizes.push_back(s);
    for (const Size &sz : sizes)
        for (const Scheduler &s : schedulers())
            benchmark::RegisterBenchmark(
                ("BM_PeerStep/" + sz.model + "/size:" + std::to_string(sz.size) + "/" + s.name).c_str(),
                [=](benchmark::State &st) { run_config(st, sz.model, sz.size, s, opt); })
                ->Iterations(1)
                ->UseManualTime()
                ->Unit(benchmark::kSecond);
    return run_registered_benchmarks(&argc, argv);
}
