// The unscheduled Halide pipeline of one kernel of spec/kernel_signature.h,
// with its arguments in signature order: what the JIT compiles and what the
// planner lowers to read the schedule's allocations (autoscheduler/).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "Halide.h"
#include "spec/kernel_signature.h"

namespace segtile {

struct KernelPipeline {
    std::vector<KernelArg> signature;    // inputs, then the selected outputs
    std::vector<Halide::Argument> args;  // the inputs, as Params and ImageParams
    std::vector<Halide::Func> outputs;   // the selected outputs, in signature order
};

// `only` restricts the outputs (e.g. {"loss"} for a forward-only head).
// Throws std::runtime_error with Halide's message if the pipeline is invalid.
KernelPipeline kernel_pipeline(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                               Halide::Type t, const std::set<std::string> &only = {});

}  // namespace segtile
