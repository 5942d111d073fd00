#include "bench/bench_options.h"

#include <cstdlib>
#include <cstring>

#include <benchmark/benchmark.h>

#include "bench/fma_peak.h"

namespace segtile::bench {

BenchOptions parse_bench_options(int *argc, char **argv) {
    BenchOptions o;
    const char *env = std::getenv("SEGTILE_BENCH_LONG");
    o.long_run = env && std::strcmp(env, "0") != 0 && *env;
    int kept = 1;
    for (int i = 1; i < *argc; i++) {
        const std::string a = argv[i];
        if (a == "--long") o.long_run = true;
        else if (a.rfind("--peak_gflops=", 0) == 0) o.peak_gflops = std::atof(a.c_str() + 14);
        else if (a.rfind("--time_limit=", 0) == 0) o.time_limit_seconds = std::atof(a.c_str() + 13);
        else argv[kept++] = argv[i];
    }
    *argc = kept;
    argv[kept] = nullptr;
    if (o.peak_gflops > 0) {
        o.peak_source = "flag";
    } else {
        // Threads end before any benchmark forks (bench/isolated_run.h).
        o.peak_gflops = measure_fma_peak(Precision::Float32, usable_cpus(), 0.5).gflops;
        o.peak_source = "measured";
    }
    return o;
}

int run_registered_benchmarks(int *argc, char **argv) {
    benchmark::Initialize(argc, argv);
    if (benchmark::ReportUnrecognizedArguments(*argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}

}  // namespace segtile::bench
