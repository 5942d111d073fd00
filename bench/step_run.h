// One untiled training step (forward, loss, every gradient) of a model,
// JIT-compiled with a given schedule and run on a random image, with what
// the suites report about it. Runs happen inside run_isolated, so that the
// high-water mark is the configuration's own.
#pragma once

#include <memory>
#include <string>

#include "bench/isolated_run.h"
#include "generators/jit_kernel.h"
#include "runtime/step_kernel.h"

namespace segtile::bench {

struct StepConfig {
    std::string model;  // a shipped model name or a model file
    int size = 256;     // square image, batch 1, float32
    Schedule schedule = Schedule::Cpu;
    PeerSchedule peer;  // for Schedule::Peer (its width/height are set from size)
    // Steps repeat until this much time is spent (at least 2, at most
    // max_steps). The first after the peaks are reset allocates every
    // buffer fresh (reset_peaks empties the ledger's block cache; its time is
    // seconds_first_step), later ones reuse them, as a training run's steps do.
    double min_seconds = 2;
    int max_steps = 10;
};

// A compiled step and the ledger its Halide allocations go to. One compiled
// step serves every image size: a suite may compile it once in the parent
// process and run each size in a child (fork copies both).
struct CompiledStep {
    Model model;
    std::unique_ptr<MemoryLedger> ledger;
    std::unique_ptr<KernelStep> step;
    double compile_seconds = 0;
};

// Peer schedules are compiled for c.size (their estimates).
CompiledStep compile_training_step(const StepConfig &c);

// Runs the steps and fills r.counters:
//   compile_seconds        building and compiling the step (autoscheduling included)
//   seconds_per_step       fastest step (other work on the machine only slows steps down)
//   seconds_per_step_mean  mean over the steps run
//   steps                  how many
//   step_gflop             useful work of one step (spec/cost.h training_step_flops)
//   gflops                 useful GFLOP/s of the fastest step
//   fraction_of_peak       gflops / peak_gflops
//   peak_working_bytes     ledger: runtime tensors and every Halide allocation
//   high_water_mark_bytes  the process's VmHWM after the steps
//   step_high_water_mark_bytes  VmHWM reset once the kernel was compiled: the steps' own (-1 where it cannot be reset)
void run_compiled_step(CompiledStep &s, const StepConfig &c, double peak_gflops, IsolatedResult &r);

// Both, in the calling process.
void run_training_step(const StepConfig &c, double peak_gflops, IsolatedResult &r);

}  // namespace segtile::bench
