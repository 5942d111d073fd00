// A GPU schedule for segtile's kernel pipelines (CUDA): every Func at root
// (as on the CPU: autodiff pipelines recompute exponentially when inlined),
// each definition's independent loops mapped to GPU blocks and threads,
// gathers (convs, their input gradients, pools, rfactor partials) summed
// per thread in registers, a conv in blocks of pixels x channels, and
// the reductions over an image (weight and bias gradients, global pools,
// losses) split with rfactor into partials that run in parallel, so that
// no stage runs on the host or in a single GPU thread over a whole image.
// A pure schedule: results do not change (up to float summation order).
#pragma once

#include <vector>

#include "Halide.h"

namespace segtile {

struct GpuScheduleOptions {
    int threads_per_block = 256;
    // Rows of an image that one weight-gradient partial sums: more rows,
    // fewer partials (less device memory) but fewer threads in parallel.
    int rows_per_partial = 16;
    // The block of pixels x output channels one thread computes of a conv
    // (forward, or the gather of its input gradient), in registers.
    int conv_block_x = 4, conv_block_channels = 4;
};

void schedule_gpu(const std::vector<Halide::Func> &outputs, const Halide::Target &target,
                  const GpuScheduleOptions &options = {});

// The CUDA target segtile builds for everywhere: an explicit compute
// capability (a plain host-cuda would query a GPU at build time). 8.6 is the
// newest Halide 21 knows; newer GPUs run its PTX.
Halide::Target segtile_cuda_target(const Halide::Target &host = Halide::get_host_target());

// Whether Halide can load the NVIDIA driver and find a GPU here (JIT).
bool cuda_device_usable();

}  // namespace segtile
