// The planner's exact kernel memory: each segment kernel is built, scheduled
// as it will run, and lowered once (LoweredMemory); every tile size is then
// an evaluation of its allocations. Links libHalide (the segtile tool and
// tests use it; a program with prebuilt kernels plans analytically or
// reads a plan file).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "Halide.h"
#include "autoscheduler/lowered_memory.h"
#include "autoscheduler/planner.h"

namespace segtile {

class LoweredKernelMemory : public KernelMemory {
public:
    // `schedule` applies the schedule the kernels will run with (e.g.
    // schedule_cpu) to a kernel's outputs; `target` is what they compile for.
    using ScheduleFn = std::function<void(const std::vector<Halide::Func> &)>;
    LoweredKernelMemory(const Model &m, Halide::Type t, ScheduleFn schedule, Halide::Target target);

    int64_t peak(const SegmentLayout &layout, KernelKind kind, int segment, const KernelCall &call) override;
    bool exact() const override { return true; }
    int kernels_lowered() const { return (int)cache_.size(); }
    // Called after each kernel is lowered (seconds each; a plan may lower
    // dozens) with a line saying which and how long it took.
    using Progress = std::function<void(const std::string &)>;
    void set_progress(Progress progress) { progress_ = std::move(progress); }

private:
    Model model_;
    Halide::Type type_;
    ScheduleFn schedule_;
    Halide::Target target_;
    std::map<std::tuple<int, int, int, bool>, std::unique_ptr<LoweredMemory>> cache_;  // (first, last, kind, image_gradient)
    Progress progress_;
};

}  // namespace segtile
