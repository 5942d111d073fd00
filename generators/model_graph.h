// Assembles a model's layers into Halide Funcs. Every tensor is bounded: it
// is zero outside the region the kernel computes of it (intersected with the
// image), which is the image border's zero padding and, for tiled kernels,
// what keeps forward and backward bounds tight (see docs/design.md).
#pragma once

#include <map>
#include <vector>

#include "Halide.h"
#include "spec/kernel_signature.h"
#include "spec/model.h"

namespace segtile {

// Bounds of one tensor: a layer's output, or the model input.
struct TensorBounds {
    Halide::Expr width, height;                // whole-image extent
    Halide::Expr x_min, x_max, y_min, y_max;   // inclusive region computed; zero outside
};

// Index of the model input among tensors: tensors are layers 0..L-1, then the input.
inline int input_tensor(const Model &m) { return (int)m.layers.size(); }

// A layer's Func is named "l_" + c_identifier(layer name).
// Whole-image bounds of every tensor for an image of width x height.
std::vector<TensorBounds> whole_image_bounds(const Model &m, Halide::Expr width, Halide::Expr height);

// Builds layers first..last. `sources` maps tensor index -> Func for every
// tensor read but not built here (the model input, checkpoints); those are
// bounded too. `params` holds one Func per entry of m.params().
// Returns the bounded Func of every tensor built or bounded (others undefined).
std::vector<Halide::Func> build_forward(const Model &m, const std::map<int, Halide::Func> &sources,
                                        const std::vector<Halide::Func> &params,
                                        const std::vector<TensorBounds> &bounds, Halide::Type t, int first,
                                        int last);

}  // namespace segtile
