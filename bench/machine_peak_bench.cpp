// Machine peak: fused multiply-add throughput, float32 and float64, on one
// core and on every usable core (one pinned thread each), with the widest
// vector FMA the CPU has (AVX-512, else AVX2) and 16 independent chains per
// thread (bench/fma_peak.cpp says why, and what the disassembly shows).
// Every other suite's "fraction of machine peak" divides by the float32
// all-core figure.
//
//   machine_peak_bench --benchmark_out=bench/results/machine_peak.json --benchmark_out_format=json
//
// Other work on the machine only lowers the figure, so each benchmark keeps
// the best of three half-second measurements (gflops) and also reports
// their mean.
#include <benchmark/benchmark.h>

#include <algorithm>

#include "bench/fma_peak.h"

namespace {

using namespace segtile::bench;

void BM_FmaPeak(benchmark::State &state) {
    const Precision p = state.range(0) == 32 ? Precision::Float32 : Precision::Float64;
    const int threads = state.range(1) == 0 ? usable_cpus() : (int)state.range(1);
    for (auto _ : state) {
        double best = 0, sum = 0, seconds = 0;
        std::string isa;
        for (int rep = 0; rep < 3; rep++) {
            const PeakResult r = measure_fma_peak(p, threads, 0.5);
            best = std::max(best, r.gflops);
            sum += r.gflops;
            seconds += r.seconds;
            isa = r.isa;
        }
        state.SetIterationTime(seconds);
        state.counters["gflops"] = best;
        state.counters["gflops_mean"] = sum / 3;
        state.counters["gflops_per_thread"] = best / threads;
        state.counters["threads"] = threads;
        state.SetLabel(isa + (p == Precision::Float32 ? " float32" : " float64"));
    }
}
// range(1) == 0: one thread per usable CPU.
BENCHMARK(BM_FmaPeak)
    ->ArgNames({"bits", "threads"})
    ->Args({32, 1})
    ->Args({32, 0})
    ->Args({64, 1})
    ->Args({64, 0})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
