// The values and buffer shapes one kernel call receives, as plain data:
// what the planner evaluates a kernel's lowered memory at (LoweredMemory),
// derived from the same signature and tile windows the executor binds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "spec/kernel_signature.h"
#include "spec/tiling.h"

namespace segtile {

struct KernelCall {
    std::map<std::string, int64_t> scalars;  // scalar arguments by name
    // Buffer arguments (inputs and outputs) by name: (min, extent) per dimension.
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> buffers;
    int threads = 1;  // workers of Halide's thread pool
};

// The scalars of tile `w` of a segment kernel, by name: the image size, each
// output's tile and each window (spec/kernel_signature.h). The executor binds
// exactly these; the planner evaluates allocations at them.
std::map<std::string, int64_t> tile_scalars(const Model &m, const TileWindows &w, int64_t width, int64_t height);

// A segment kernel (Forward or Backward) called on tile `w` of an image of
// width x height (shapes: Model::shapes of it), batch 1.
KernelCall tile_kernel_call(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                            const TileWindows &w, const std::vector<TensorShape> &shapes, int64_t width,
                            int64_t height);

// The untiled head on one image.
KernelCall head_kernel_call(const Model &m, const SegmentLayout &layout, const std::vector<TensorShape> &shapes,
                            int64_t width, int64_t height);

}  // namespace segtile
