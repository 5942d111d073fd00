// Cuts and segments: how a model's trunk is split into segments that run
// tile by tile, and the untiled head (global pooling, dense layers, loss)
// that follows. Cuts are layer indices; a cut after layer c stores every
// tensor that crosses it (the layer's output, and skip connections) whole.
#pragma once

#include <string>
#include <vector>

#include "spec/model.h"

namespace segtile {

struct SegmentSpec {
    int first = 0, last = 0;   // layers first..last
    std::vector<int> inputs;   // tensors read from checkpoints (L = the image)
    std::vector<int> outputs;  // tensors stored as checkpoints; outputs.back() == last
};

struct SegmentLayout {
    std::vector<int> cuts;              // as given, sorted
    std::vector<SegmentSpec> segments;  // the tiled trunk
    int head_first = 0;                 // first layer of the untiled head (== trunk end + 1)
    std::vector<int> head_inputs;       // checkpoint tensors the head reads
    // Whether kernels give the image's gradient (grad_in_image). Training
    // wants only the parameters' gradients: without it segment 0's
    // backward skips the first layer's input gradient and the store holds
    // no W x H x C gradient of the image (docs/design.md).
    bool image_gradient = true;
    std::vector<int> checkpoints() const;  // every stored tensor, the image included
};

// Last layer of the tiled trunk: before the first global layer, or the loss
// input for dense (mse) models.
int trunk_end(const Model &m);

// Throws ModelError if a cut is out of range or inside the head.
SegmentLayout make_segments(const Model &m, std::vector<int> cuts, bool image_gradient = true);

// Per segment, whether its backward kernel gives a gradient training uses:
// its parameters' or, through an input, one a needed backward (or the
// image's gradient, where the layout asks for it) reads. A segment of
// parameterless layers reading only the image (a first downsampling
// layer) gives nothing without the image's gradient, though its kernel
// computes that gradient (spec/kernel_signature.h): the executor skips it.
std::vector<bool> backward_needed(const Model &m, const SegmentLayout &layout);

// Cuts from a string of layer names or indices, "conv3,pool4" or "5,9".
std::vector<int> parse_cuts(const Model &m, const std::string &s);

}  // namespace segtile
