// The machine's fused multiply-add throughput: the denominator of every
// "fraction of machine peak" figure in the benchmarks.
#pragma once

#include <cstdint>
#include <string>

namespace segtile::bench {

enum class Precision { Float32, Float64 };

// The widest FMA instruction set this CPU runs: "avx512" or "avx2" (from
// the CPU's own flags, as in /proc/cpuinfo).
std::string fma_isa();

// Logical CPUs this process may run on (sched_getaffinity), one FMA thread each.
int usable_cpus();

struct PeakResult {
    double gflops = 0;   // all threads together
    double seconds = 0;  // wall time of the measurement
    int threads = 0;
    std::string isa;
};

// Runs `threads` threads (pinned one per usable CPU), each doing 16
// independent FMA chains on full vector registers for about `seconds`.
PeakResult measure_fma_peak(Precision p, int threads, double seconds);

}  // namespace segtile::bench
