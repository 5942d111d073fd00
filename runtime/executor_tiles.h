// The executor's tile calls: what one tile's kernel call holds (its windows,
// their host staging, its arguments) and what every tile of a segment's
// kernel shares. Internal to runtime/: executor.cpp runs segments,
// executor_tiles.cpp makes and finishes tile calls, device_tiles.cpp runs
// them on a GPU.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "HalideBuffer.h"
#include "runtime/executor.h"
#include "runtime/kernel_context.h"

namespace segtile {

// One tile's kernel call: its windows, their host staging and the argument
// list, kept together so that on the device the next tile's can be made
// while this one runs (run_segment).
struct SegmentedExecutor::TileCall {
    size_t tx = 0, ty = 0;
    std::chrono::steady_clock::time_point start;
    TileWindows win;
    std::deque<Halide::Runtime::Buffer<>> views;  // stable addresses for the call
    // On the device, each window of a checkpoint goes through a dense host
    // copy: a cropped view keeps its checkpoint's strides, and Halide gives
    // a buffer its whole span (size_in_bytes) on the device, all but the
    // whole checkpoint for a window with channels.
    std::deque<Tensor> staging;
    std::vector<std::pair<Halide::Runtime::Buffer<>, Halide::Runtime::Buffer<>>> copy_back;  // (dense, window) of outputs
    std::vector<std::pair<int, Tensor>> grad_windows;  // (input, its gradient's window)
    ArgList args;
    std::vector<void *> built;  // args in the kernel's order
    std::vector<Tensor> *partials = nullptr;  // the set this call writes its weight-gradient partials to
    int stream = -1;  // TwoStreams: the slot of the stream the call runs on (-1: the default)
};

// What every tile of one segment's kernel shares.
struct SegmentedExecutor::SegmentRun {
    int s = 0;
    const SegmentSpec *segment = nullptr;
    bool backward = false;
    Kernel *kernel = nullptr;
    TileRegions regions;
    std::vector<Box<int64_t>> full;
    std::vector<ParamSpec> specs;
    std::vector<int> graded;        // inputs whose gradient the backward kernel gives
    // Weight-gradient partials, reused by every other tile: with overlap,
    // tile k+1's call writes one set while tile k's is added from the other.
    std::vector<Tensor> partials[2];
    std::vector<Tensor> carries;  // the compensation of each weight gradient's sum over tiles
    std::vector<Tensor> spare;  // device path: finished tiles' host windows, for the next tiles
    bool trainable(size_t p) const {
        const SegmentSpec &seg = *segment;
        return backward && specs[p].trainable && specs[p].layer >= seg.first && specs[p].layer <= seg.last;
    }
};

// Until a device step ends, however it ends (device_tiles.cpp).
struct SegmentedExecutor::DeviceStep {
    SegmentedExecutor &e;
    explicit DeviceStep(SegmentedExecutor &exec);
    ~DeviceStep();
};

// After a device kernel call: its outputs back into the host tensors they
// view and its device buffers freed (device_tiles.cpp).
void sync_to_host(std::deque<Halide::Runtime::Buffer<>> &views, KernelContext *ctx = nullptr);

}  // namespace segtile
