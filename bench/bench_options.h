// Options every segtile suite takes besides Google Benchmark's own, removed
// from argv before benchmark::Initialize sees it:
//   --long                 also run the big sizes (hours); or SEGTILE_BENCH_LONG=1
//   --peak_gflops=X        the machine's float32 FMA peak (machine_peak_bench's
//                          all-core figure); measured at start-up when absent
//   --time_limit=S         seconds one configuration may take, compile included
#pragma once

#include <string>

namespace segtile::bench {

struct BenchOptions {
    bool long_run = false;
    double peak_gflops = 0;
    double time_limit_seconds = 0;  // 0: the suite's default
    std::string peak_source;        // "flag" or "measured"
};

// Takes the options above out of argv (argc shrinks); measures the peak
// (half a second on every core) unless given.
BenchOptions parse_bench_options(int *argc, char **argv);

// Google Benchmark's own start-up, run and shut-down of every registered
// benchmark; returns main's exit status (1 on an unrecognised argument).
int run_registered_benchmarks(int *argc, char **argv);

}  // namespace segtile::bench
