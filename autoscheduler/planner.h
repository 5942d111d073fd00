// The planner: cuts and a tile size per segment that minimise predicted
// time under a cap on working memory (docs/design.md, "Planner").
//
// Memory model: what the executor's ledger counts as working memory at its
// peak, i.e. the fixed part (parameters, gradients, optimizer state) plus,
// for the worst kernel call, the runtime's per-call tensors (input-gradient
// windows, weight-gradient partials) and the kernel's own allocations. The
// latter come from a KernelMemory: exact (lowered code, kernel_memory.h) or
// the analytic estimate below, which the planner uses to search and the
// exact model then corrects.
// Time model: FLOPs executed (halo recomputation included, spec/cost.h)
// at a calibrated rate, plus bytes moved and a per-tile overhead.
// Search: a dynamic program over cut positions in layer order; for every
// candidate segment, every tile size from a ladder is tried.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autoscheduler/plan.h"
#include "spec/errors.h"
#include "spec/kernel_call.h"
#include "spec/model.h"

namespace segtile {

// Plans cached on disk (apps/executor_cache.cpp) key on this: bump it when
// the search or its time and memory models change what it chooses.
constexpr int kPlannerVersion = 9;

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

// A segment's predicted time: its FLOPs (halo recomputation included) at
// one rate, plus the activation elements its layers read and write
// (spec/cost.h layer_traffic) at another, plus the executor's copies and
// the kernel calls. With FLOPs alone, Darknet19's measured segment times
// at 1024^2 were 0.63x to 2.61x the prediction (best common scale), by
// how memory-bound they are (a 1x1 conv after a batch norm on 256^2 planes
// against a 3x3 conv on 32^2); with the elements, 0.79x to 1.51x
// (docs/design.md, Planner).
// Defaults: measured on the development machine (2 cores of an AMD EPYC,
// AVX-512), fitted to one steady Darknet19 step at 1024^2.
// `segtile plan --calibrate` measures the host's. They must stay in
// proportion to each other: the planner trades recomputed FLOPs and
// activations against checkpoint copies and calls, so a FLOP rate 7x too
// low makes recomputation look 7x dearer than copies.
// A rate a fit found no use for, or a cost a target does not have.
constexpr double kUnusedRate = 1e18;

struct TimeRates {
    double flops_per_second = 147e9;     // kernels' arithmetic (calibrate: autoscheduler/calibrate.h)
    double elements_per_second = 1.8e9;  // kernels' activation elements read or written
    double bytes_per_second = 5e9;       // the executor's window copies and overlap-adds
    double seconds_per_tile = 30e-6;     // call overhead per kernel call
    // Trainable weights a backward call passes over, whatever its tile's
    // size: its weight gradients' lane partials, their zero init and sums
    // (schedules/cpu_schedule.cpp). A deep conv's weight gradient
    // (256->512 at 64^2) takes 1.7x longer in 4 tiles than in one, where
    // FLOPs, elements, copies and calls price 1.03x. The default: a
    // calibration's fit on the development machine (16.7 ns per weight and
    // call).
    double weights_per_second = 6e7;
};


// A CUDA GPU's rates (PlanRequest::device). `segtile plan --calibrate`
// measures a CPU; these are fitted (bench/gpu/fit_device_rates.cpp) to the
// kernel seconds of the GPU check's four runs on an H200 (VGG16 and
// Darknet19 at 4096^2 and 8192^2, 1024-pixel tiles, the schedule of
// 2a9087c): each segment's measured time 0.86x to 1.30x the prediction.
// The host's own work between calls (window staging, gradient adds) is
// not in them; the executor overlaps it with the GPU (docs/gpu.md).
// Their weight passes are not measured on a GPU yet (none is priced).
inline TimeRates device_time_rates() { return {6.68e12, 5.36e10, 1.06e10, 2.18e-3, kUnusedRate}; }

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

// The kernels' own peak allocation for one call. The planner asks for the
// forward and backward kernel of a segment (first..last, as in the layout
// passed) and for the head.
class KernelMemory {
public:
    // What peak() gives for a call that cannot run at any cap (its index
    // arithmetic overflows 32 bits): larger than any cap, and sums of a few
    // of it do not overflow.
    static constexpr int64_t kUnrunnableBytes = int64_t(1) << 60;
    virtual ~KernelMemory() = default;
    virtual int64_t peak(const SegmentLayout &layout, KernelKind kind, int segment, const KernelCall &call) = 0;
    // True when peak() is exact for this segment (the planner then stops refining it).
    virtual bool exact() const { return false; }
};

// The analytic estimate: each kernel holds its layers' values (and, backward,
// their adjoints) over the tile's windows. Cheap; typically within 2x of
// the lowered truth, which is why the planner refines with the exact model.
class AnalyticKernelMemory : public KernelMemory {
public:
    int64_t peak(const SegmentLayout &layout, KernelKind kind, int segment, const KernelCall &call) override;
    // The same from the tile's windows (what the call's scalars say), for
    // the search: building every candidate's KernelCall (names, maps) took
    // most of a plan's time (Darknet19 at 1024^2: 22 s).
    int64_t peak(const SegmentSpec &seg, KernelKind kind, const TileWindows &w) const;
    explicit AnalyticKernelMemory(const Model &m, int type_bytes) : model_(m), type_bytes_(type_bytes) {}

private:
    Model model_;
    int type_bytes_;
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
