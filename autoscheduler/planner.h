// The planner: cuts and a tile size per segment that minimise predicted
// time under a cap on working memory (docs/design.md, "Planner"). A
// dynamic program over cut positions in layer order (planner.cpp); for
// every candidate segment, every tile size from a ladder is tried
// (segment_search.h), priced by the memory model (memory_model.h) and the
// time model (time_model.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autoscheduler/memory_model.h"
#include "autoscheduler/plan.h"
#include "autoscheduler/time_model.h"
#include "spec/errors.h"
#include "spec/kernel_call.h"
#include "spec/model.h"

namespace segtile {

// Plans cached on disk (apps/executor_cache.cpp) key on this: bump it when
// the search or its time and memory models change what it chooses.
constexpr int kPlannerVersion = 10;

// Thrown when no plan fits: the message gives the smallest feasible cap the
// planner found. It is feasible (the planner runs that split when asked for
// it); with exact kernel memory it can exceed the true minimum slightly
// (the long MeasuredPeak test: 272.6 MiB named for VGG16 at 64^2, where a
// plan of 270.3 MiB exists).
class PlanError : public InfeasibleError {
public:
    PlanError(const std::string &what, int64_t smallest_cap) : InfeasibleError(what), smallest_feasible_cap(smallest_cap) {}
    int64_t smallest_feasible_cap;
};

struct PlanRequest {
    int64_t width = 0, height = 0;
    int batch = 1;               // images run one at a time; only the time scales
    // Working memory, bytes; 0: no cap (the fastest plan: whole-extent tiles,
    // cut where that saves recomputing a forward, docs/design.md).
    int64_t memory_cap = 0;
    // The kernels run on a GPU and memory_cap caps device memory: what one
    // kernel call holds there (its segment's parameters, its input and
    // output windows, gradients and intermediates; runtime/device_memory.h
    // counts it). Parameters, optimizer state and checkpoints stay on the
    // host, outside the cap. KernelMemory then gives device allocations.
    bool device = false;
    int64_t checkpoint_cap = 0;  // checkpoint store, bytes; 0: no cap
    // The checkpoint store lives in memory-mapped files (--checkpoint-dir):
    // outside the ledger, but each row of tiles faults in the pages of the
    // checkpoint rows it reads and writes, which stay resident until the
    // row ends (runtime/executor_tiles.cpp). Those pages then count
    // against memory_cap with the call's working memory, so the cap bounds
    // what the process holds, not just what it allocates. CPU plans only.
    bool mapped_checkpoints = false;
    // The kernels give the image's gradient (SegmentLayout::image_gradient):
    // segment 0's backward calls hold its windows and the store holds it.
    bool image_gradient = true;
    int type_bytes = 4;          // float32
    int optimizer_copies = 2;    // optimizer state per trainable parameter (Adam 2, SGD with momentum 1)
    int threads = 1;             // Halide's worker threads (parallel loops allocate per task)
    // Halide's runtime allocates a little outside the kernels' code (thread
    // pool work, seen up to ~50 KB here, timing-dependent): reserved.
    int64_t runtime_reserve = 64 << 10;
    TimeRates rates;
    // Restrict cuts to these sets (e.g. the kernels a linked library has);
    // empty: every cut position is searched.
    std::vector<std::vector<int>> allowed_cuts;
};

// Plans with `exact` (may be null: the analytic model alone). The search runs
// on a model that is the analytic one scaled per segment by the exact/analytic
// ratio, found for each segment the search picks, until the picked segments'
// predictions are all exact. Throws PlanError when nothing fits.
Plan make_plan(const Model &m, const PlanRequest &req, KernelMemory *exact = nullptr);

// Predictions for given cuts and tiles (no search), with the same models.
Plan evaluate_plan(const Model &m, const PlanRequest &req, const std::vector<int> &cuts,
                   const std::vector<TileSize> &tiles, KernelMemory *exact = nullptr);

}  // namespace segtile
