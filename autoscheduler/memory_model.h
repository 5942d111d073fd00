// The planner's memory model: what the executor's ledger counts as working
// memory at its peak, i.e. the fixed part (parameters, gradients, optimizer
// state) plus, for the worst kernel call, the runtime's per-call tensors
// (input-gradient windows, weight-gradient partials) and the kernel's own
// allocations. The latter come from a KernelMemory: exact (lowered code,
// kernel_memory.h) or the analytic estimate below, which the planner uses to
// search and the exact model then corrects.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "spec/kernel_call.h"
#include "spec/model.h"
#include "spec/tiling.h"

namespace segtile {

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

// A kernel's peak for one tile's call (exact or analytic, as the caller chose).
using CallPeak = std::function<int64_t(KernelKind, const TileWindows &)>;

// A segment's largest calls at one tiling.
struct WorstCalls {
    int64_t forward = 0;   // the forward kernel's peak
    int64_t backward = 0;  // the backward kernel's, where it runs
    // The windows of the call that holds most with what the runtime adds
    // (the gradient windows of `graded`); the forward's where no backward runs.
    TileWindows windows;
};

// `graded`: the inputs whose gradient windows the backward calls hold.
// Edge tiles are clipped by the image and partial tiles are smaller, so the
// worst is among the first, second and last tile along each axis.
WorstCalls worst_calls(const Model &m, const SegmentSpec &seg, const TileRegions &r,
                       const std::vector<Box<int64_t>> &whole, bool backward, const std::vector<int> &graded,
                       int type_bytes, const CallPeak &peak);

// Channels of tensor t (a layer, or the image at index layers.size()).
inline int64_t channels_of(const Model &m, int t) {
    return t == (int)m.layers.size() ? m.input_channels : m.layers[t].channels;
}

}  // namespace segtile
