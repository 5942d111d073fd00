// LoweredMemory: the heap memory a scheduled pipeline allocates, read off its
// lowered code. Every Halide allocation is an Allocate node whose size is an
// expression of the pipeline's scalar arguments and buffer shapes, so once
// the pipeline is lowered (seconds) the peak for any tile size is an
// evaluation (microseconds): the planner's memory model for the kernels'
// own allocations is exact, not a fitted guess.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "Halide.h"
#include "spec/kernel_call.h"

namespace segtile {

// Keeps the Stmt Halide runs custom lowering passes on (after the last
// simplification, before GPU offload: For loops still say gpu_block /
// gpu_thread and every buffer is an Allocate); changes nothing.
class CaptureStmt : public Halide::Internal::IRMutator {
public:
    Halide::Internal::Stmt captured;
    using IRMutator::mutate;
    Halide::Internal::Stmt mutate(const Halide::Internal::Stmt &s) override {
        captured = s;
        return s;
    }
};

class LoweredMemory {
public:
    // Lowers `outputs` (already scheduled) for `target`. For a GPU target
    // the memory is the device's: the buffers allocated outside GPU kernels
    // (the GPU schedule computes every Func at root on the device), read
    // from the Stmt before Halide offloads the GPU loops.
    LoweredMemory(const std::vector<Halide::Func> &outputs, const std::vector<Halide::Argument> &args,
                  const Halide::Target &target);

    // Peak of simultaneously live heap allocations (halide_malloc; for a
    // GPU target, device allocations) of one call, in bytes. Allocations whose size cannot be evaluated from the
    // call's values count as `unknown` (reported, never silently zero);
    // `overflows` says whether some of them overflow Halide's 32-bit index
    // arithmetic for this call (then the call cannot run at all).
    int64_t peak(const KernelCall &call, int *unknown = nullptr, bool *overflows = nullptr) const;

    // Number of Allocate nodes that go to the heap (for tests and reports).
    int heap_allocations() const { return heap_allocations_; }

private:
    Halide::Internal::Stmt body_;
    std::map<std::string, Halide::Internal::LoweredFunc> functions_;  // parallel loop bodies
    int heap_allocations_ = 0;
    bool device_ = false;
};

}  // namespace segtile
