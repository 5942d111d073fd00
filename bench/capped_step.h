// One training step planned under a working-memory cap (autoscheduler's
// planner, exact kernel memory) and run by the SegmentedExecutor with JIT
// kernels of segtile's CPU schedule: the capped configurations of the
// training-step and peer benchmarks.
#pragma once

#include <cstdint>
#include <string>

#include "autoscheduler/planner.h"
#include "bench/isolated_run.h"

namespace segtile::bench {

// Fills r.counters like run_compiled_step (bench/step_run.h), plus
//   cap_bytes, predicted_peak_bytes, checkpoint_bytes, recompute_factor,
//   segments, plan_seconds (planning, lowering included),
//   seconds_first_step (a step whose buffers all come fresh from the
//   system, as an epoch's first; seconds_per_step is the next one's),
//   minor_faults_first_step and minor_faults_per_step (pages each step
//   touched fresh: buffers not reused, checkpoints read back from files),
//   major_faults_per_step, storage_read_bytes_per_step and
//   storage_write_bytes_per_step (what went through the disk: a checkpoint
//   store in files larger than memory; -1 without /proc/self/io),
//   kernel_seconds_per_step (inside kernel calls, which on the CPU read
//   and write the checkpoint store in place; the rest of seconds_per_step
//   is the executor's copies and adds), io_stall_seconds_per_step and
//   resident_before_steps_bytes (VmRSS once the kernels are ready),
//   step_high_water_mark_bytes (the process's high-water mark reset after
//   the kernels were made: the steps' own, without the compiler's),
//   memory_stall_seconds_per_step (the machine's pressure stall "full"
//   time: wall time every running task waited on storage or on memory
//   reclaim; -1 without /proc/pressure; the kernel sums it every 2 s, so
//   it means something for the scale run's steps of minutes, not for a
//   step of a second)
// peak_working_bytes counts the ledger's working memory (the executor's
// tensors and every Halide allocation; the image and the checkpoint store
// are reported apart). Throws PlanError when nothing fits the cap.
struct CappedStepOptions {
    // A first, untimed step touches every buffer and starts Halide's thread
    // pool, then two are timed (.cpp); off for the scale run, where one
    // step takes tens of minutes and is timed alone.
    bool warm_up = true;
    std::string checkpoint_dir;  // "": the checkpoint store in memory
    // Plan as `segtile train --checkpoint-dir` does: the mapped checkpoint
    // pages a row of tiles holds count against the cap (PlanRequest).
    bool mapped_plan = false;
    // "": kernels JIT-compiled in this process; else they come from the
    // kernel cache in this folder (compiled into it where missing), as a
    // `segtile train` run's do.
    std::string kernel_cache_dir;
    // Plan and prepare the kernels (fill the kernel cache), run no step: a
    // first process that leaves the cache warm for the measured one.
    bool prepare_only = false;
    bool progress = false;       // a line on stderr per segment run
    // Also the image's gradient (kernels, store, plan), which training does
    // not need: to measure what leaving it out saves.
    bool image_gradient = false;
    // The time model's rates the plan is made with (the defaults, or this
    // machine's from `segtile plan --calibrate`).
    TimeRates rates;
};
void run_capped_step(const std::string &model, int size, int64_t cap_bytes, double peak_gflops, IsolatedResult &r,
                     const CappedStepOptions &opt = {});

// run_capped_step under `fraction` of the untiled step's peak working
// memory: `untiled_peak_bytes` as measured, or 0 where the untiled step did
// not run (then the planner's prediction of it stands in; counters
// cap_from_prediction and untiled_peak_bytes say which).
void run_capped_fraction(const std::string &model, int size, double fraction, double untiled_peak_bytes,
                         double peak_gflops, IsolatedResult &r, const CappedStepOptions &opt = {});

// The planner's prediction for the step with no cap (one segment, the whole
// image as its tile), with the same exact kernel memory: what capped runs
// are sized from where the untiled step itself cannot run (VGG16 at 4096^2
// needs about 40 GiB).
int64_t predicted_untiled_peak(const std::string &model, int size);

}  // namespace segtile::bench
