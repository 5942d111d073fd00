// The executor's host-side work on tensors between kernel calls: windows
// copied and added into checkpoints, weight-gradient partials summed over
// tiles. One channel plane (or one chunk) per task where `threads` is given.
#pragma once

#include <cstdint>

#include "HalideBuffer.h"
#include "runtime/tensor.h"

namespace segtile {

class HostThreads;

// dst(x0 + x, y0 + y, c, 0) += src(x, y, c, 0): overlapping input-gradient windows add.
void add_window(Tensor &dst, Tensor &src, int64_t x0, int64_t y0, HostThreads *threads = nullptr);
// sum += src with Kahan's compensation in `carry` (as wide as sum).
void add_compensated(Tensor &sum, Tensor &carry, Tensor &src, HostThreads *threads);
// dst += scale * src.
void add_scaled(Tensor &dst, Tensor &src, double scale, HostThreads *threads = nullptr);
// t *= f.
void scale(Tensor &t, double f);
// dst = src over the same region (x, y, channels, batch of one).
void copy_window(Halide::Runtime::Buffer<> &dst, const Halide::Runtime::Buffer<> &src, HostThreads *threads);
// Image n of a batch as a (W, H, C, 1) buffer with n at 0, as kernels expect.
Halide::Runtime::Buffer<> batch_item(const Halide::Runtime::Buffer<> &b, int n);

}  // namespace segtile
