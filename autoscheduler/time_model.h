// The planner's time model: a segment's predicted seconds are what it does
// (FLOPs executed, halo recomputation included; activation elements read and
// written; bytes the executor copies; kernel calls; weights the backward
// calls pass over), each at a rate of its own.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/model.h"
#include "spec/tiling.h"

namespace segtile {

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
    // (schedules/cpu_weight_grad.cpp). A deep conv's weight gradient
    // (256->512 at 64^2) takes 1.7x longer in 4 tiles than in one, where
    // FLOPs, elements, copies and calls price 1.03x. The default: a
    // calibration's fit on the development machine (16.7 ns per weight and
    // call).
    double weights_per_second = 6e7;
};

// A CUDA GPU's rates (PlanRequest::device). `segtile plan --calibrate`
// measures a CPU; these are fitted (bench/gpu/fit_device_rates.cpp) to the
// kernel seconds of the GPU check's four runs on an H200 (VGG16 and
// Darknet19 at 4096^2 and 8192^2, 1024-pixel tiles): each segment's
// measured time 0.86x to 1.30x the prediction. The host's own work between
// calls (window staging, gradient adds) is not in them; the executor
// overlaps it with the GPU (docs/gpu.md). Weight passes are not measured
// on a GPU (none is priced).
inline TimeRates device_time_rates() { return {6.68e12, 5.36e10, 1.06e10, 2.18e-3, kUnusedRate}; }

// What the time model prices in a segment or step (SegmentPlan's flops,
// elements, moved_bytes, calls, weight_elements), and, for a measured
// sample, its seconds.
struct TimeSample {
    double flops = 0, elements = 0, moved_bytes = 0, calls = 0;
    double seconds = 0;  // measured
    double weight_elements = 0;
};

// What `r` predicts for a sample.
double predicted_seconds(const TimeRates &r, const TimeSample &s);

// What a segment's calls do over all its tiles at one tiling.
struct SegmentWork {
    TimeSample priced;    // seconds 0
    double recompute = 1;  // FLOPs executed / FLOPs of the segment untiled
};

// The bytes one call moves, from the memory model's worst call: `windows`
// (input windows), `outputs` (output tiles), `partials` (trainable weights
// of the segment, whose gradients every backward call adds to).
struct CallTraffic {
    int64_t windows = 0, outputs = 0, partials = 0;
};

// `backward`: the segment's backward runs (spec/segments.h backward_needed).
SegmentWork segment_work(const Model &m, const SegmentSpec &seg, const TileRegions &r,
                         const std::vector<Box<int64_t>> &whole, const std::vector<TensorShape> &shapes,
                         bool backward, bool image_gradient, const CallTraffic &call, int type_bytes);

// The head (untiled, after the trunk's last layer `end`): FLOPs and elements once.
TimeSample head_work(const Model &m, int end, const std::vector<TensorShape> &shapes);

}  // namespace segtile
