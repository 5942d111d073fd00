// Arithmetic cost of layers: the FLOPs the planner's time model, the
// benchmarks' useful-GFLOP/s counters and the recompute factor share.
// A multiply-add counts as 2 FLOPs (the usual convention: PyTorch profilers,
// the paper's TFLOP figures).
#pragma once

#include <cstdint>

#include "spec/model.h"

namespace segtile {

// LayerFlops is in spec/layer_kinds.h: each kind's row counts its own.
// FLOPs of layer `i` of `m` over an output region of out_w x out_h pixels
// (all channels, one image).
LayerFlops layer_flops(const Model &m, int i, int64_t out_w, int64_t out_h);

// Activation elements a layer's kernels read and write over an output
// region of out_w x out_h pixels (all channels, one image): forward its
// input(s) and output; backward twice that (the saved activation and the
// output's gradient read, the input's gradient written). Memory traffic,
// not arithmetic, paces batch norms, activations, pools and the convs of
// large planes; the planner's time model counts both (docs/design.md,
// Planner).
struct LayerTraffic {
    double forward = 0;
    double backward = 0;
};
LayerTraffic layer_traffic(const Model &m, int i, int64_t out_w, int64_t out_h);

// Whether layer i reads the image (its gradient there is the image's,
// which training does not compute).
bool reads_image(const Model &m, int i);

// Useful FLOPs of one untiled training step on one width x height image:
// every layer once forward and once backward (the image's gradient excluded).
double training_step_flops(const Model &m, int64_t width, int64_t height);

// layer_traffic of every layer of one untiled training step, forward and
// backward, summed.
double training_step_elements(const Model &m, int64_t width, int64_t height);

}  // namespace segtile
