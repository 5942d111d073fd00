// Analytic geometry of a model: which input region a layer needs for a given
// output region, and the stride, receptive field and halo of layer chains.
// The planner and the executor use these maps; tests check that they agree
// with Halide's bounds inference on the generated kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/model.h"

namespace segtile {

// Inclusive integer interval [lo, hi]; empty when hi < lo.
struct Interval {
    int64_t lo = 0, hi = -1;
    int64_t extent() const { return hi >= lo ? hi - lo + 1 : 0; }
    bool empty() const { return hi < lo; }
    Interval hull(const Interval &o) const;
    Interval intersect(const Interval &o) const;
    bool operator==(const Interval &o) const { return lo == o.lo && hi == o.hi; }
};

// A spatial region: x and y intervals (all channels, one image).
struct Region {
    Interval x, y;
    bool empty() const { return x.empty() || y.empty(); }
    Region hull(const Region &o) const { return {x.hull(o.x), y.hull(o.y)}; }
    Region intersect(const Region &o) const { return {x.intersect(o.x), y.intersect(o.y)}; }
    bool operator==(const Region &o) const { return x == o.x && y == o.y; }
};

// Input interval (one axis) that `layer` reads to produce output interval `out`.
// Not clipped to the image: reads outside it are zero padding.
Interval input_interval(const Layer &layer, const Interval &out);
Region input_region(const Layer &layer, const Region &out);

// For every layer (index i) and the model input (index layers.size()), the
// region of its output that is needed to compute `out` of layer `target`,
// clipped to each tensor's extent for the given image size; empty if unused.
// Global layers (pooling, flatten, dense) need their whole input.
std::vector<Region> required_regions(const Model &m, int target, const Region &out, int64_t width, int64_t height);

// Geometry of a chain of spatial layers applied in order (conv, pools,
// upsample, elementwise): an output pixel at o reads input positions within
// [floor(o * num / den) - halo_lo, floor(o * num / den) + halo_hi], exactly
// those when the chain has no upsample. With upsampling, pixels read at
// different offsets (floor division) and the halo covers them all; use
// input_interval/input_region for exact regions.
struct ChainGeometry {
    int64_t stride_num = 1, stride_den = 1;  // cumulative stride as a fraction
    int64_t receptive_field = 1;             // most input extent one output pixel needs
    int64_t halo_lo = 0, halo_hi = 0;        // reach before/after the strided position
};
ChainGeometry chain_geometry(const std::vector<Layer> &chain);

}  // namespace segtile
