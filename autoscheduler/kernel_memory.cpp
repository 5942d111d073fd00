#include "autoscheduler/kernel_memory.h"

#include <chrono>
#include <cstdio>

#include "generators/kernel_pipeline.h"
#include "spec/kernel_error.h"

namespace segtile {

LoweredKernelMemory::LoweredKernelMemory(const Model &m, Halide::Type t, ScheduleFn schedule, Halide::Target target)
    : model_(m), type_(t), schedule_(std::move(schedule)), target_(target) {}

int64_t LoweredKernelMemory::peak(const SegmentLayout &layout, KernelKind kind, int segment, const KernelCall &call) {
    const auto [first, last] = kernel_layers(model_, layout, kind, segment);
    const auto key = std::make_tuple(first, last, (int)kind, layout.image_gradient);
    auto it = cache_.find(key);
    auto what = [&] {  // only for messages: peak() runs in the planner's inner loop
        return std::string(kind == KernelKind::Forward ? "forward" : kind == KernelKind::Backward ? "backward" : "head") +
               " kernel of " + layer_span(model_, first, last);
    };
    if (it == cache_.end()) {
        const auto start = std::chrono::steady_clock::now();
        try {
            KernelPipeline kp = kernel_pipeline(model_, layout, kind, segment, type_);
            schedule_(kp.outputs);
            it = cache_.emplace(key, std::make_unique<LoweredMemory>(kp.outputs, kp.args, target_)).first;
        } catch (const Halide::Error &e) {
            throw KernelError("planning: lowering " + kernel_description(model_, layout, kind, segment) +
                              " to size its memory: Halide: " + e.what());
        }
        if (progress_) {
            char line[64];
            std::snprintf(line, sizeof line, " (%.1f s; %d kernels so far)",
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                          (int)cache_.size());
            progress_("lowered the " + what() + line);
        }
    }
    int unknown = 0;
    bool overflows = false;
    const int64_t bytes = it->second->peak(call, &unknown, &overflows);
    if (overflows) return kUnrunnableBytes;  // this tile cannot run; smaller ones may
    if (unknown > 0)
        throw std::runtime_error("kernel memory: " + std::to_string(unknown) + " allocations of the " + what() +
                                 " have sizes the planner cannot evaluate");
    return bytes;
}

}  // namespace segtile
