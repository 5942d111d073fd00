// The untiled training loop of the main job: generated batches, one
// StepKernel call per batch, an optimizer step, a line per step.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "runtime/optimizer.h"
#include "runtime/step_kernel.h"
#include "runtime/synthetic.h"

namespace segtile {

struct TrainConfig {
    int steps = 200;
    int batch = 8;
    uint64_t seed = 0;
    SyntheticMarks data;
    OptimizerConfig optimizer;
};

struct TrainReport {
    std::vector<float> losses;    // per step
    std::vector<float> accuracy;  // per step, on the step's batch before its update
    int64_t peak_working = 0;     // ledger peak (runtime + Halide), bytes
    int64_t high_water_mark = 0;  // process VmHWM, bytes
    double seconds = 0;
};

TrainReport train_synthetic(const Model &m, StepKernel &kernel, const TrainConfig &cfg, MemoryLedger &ledger,
                            std::ostream &log);

}  // namespace segtile
