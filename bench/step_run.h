// One untiled training step (forward, loss, every gradient) of a model,
// JIT-compiled with a given schedule and run on a random image, with what
// the suites report about it. Meant to run inside run_isolated, so that the
// high-water mark is this configuration's own.
#pragma once

#include <string>

#include "bench/isolated_run.h"
#include "generators/jit_kernel.h"

namespace segtile::bench {

struct StepConfig {
    std::string model;  // a shipped model name or a model file
    int size = 256;     // square image, batch 1, float32
    Schedule schedule = Schedule::Cpu;
    PeerSchedule peer;  // for Schedule::Peer (its width/height are set from size)
    // Steps repeat until this much time is spent (at least 1, at most max_steps).
    double min_seconds = 2;
    int max_steps = 10;
};

// Fills r.counters:
//   compile_seconds        building and compiling the step (autoscheduling included)
//   seconds_per_step       fastest step (other work on the machine only slows steps down)
//   seconds_per_step_mean  mean over the steps run
//   steps                  how many
//   step_gflop             useful work of one step (spec/cost.h training_step_flops)
//   gflops                 useful GFLOP/s of the fastest step
//   fraction_of_peak       gflops / peak_gflops
//   peak_working_bytes     ledger: runtime tensors and every Halide allocation
//   high_water_mark_bytes  the process's VmHWM after the steps
void run_training_step(const StepConfig &c, double peak_gflops, IsolatedResult &r);

}  // namespace segtile::bench
