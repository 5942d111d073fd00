// The argument list of every compiled kernel, as plain data: the generators
// declare their Inputs/Outputs from it, the JIT path builds its Params from
// it, and the runtime binds buffers to it by name. Tensors are named after
// their layer ("conv3"), the model input is "image".
//
// forward (segment s):  scalars image_width, image_height, for each output
//                       tensor T: tile_T_{x_min,x_max,y_min,y_max}, and for
//                       each tensor T the kernel reads or computes (its
//                       window_tensors): window_T_{x_min,x_max,y_min,y_max};
//                       in_T (window of each input checkpoint), parameters;
//                       -> out_T (each output over its tile)
// backward (segment s): the forward's inputs plus grad_out_T (each output's
//                       gradient over its tile)
//                       -> grad_in_T (each input's gradient over its window),
//                          grad_<param> (this tile's share)
// head:                 in_T (whole checkpoints), parameters, labels (n) or
//                       dense_target -> loss, prediction, grad_in_T, grad_<param>
// grad_in_image is left out where layout.image_gradient is false, unless it
// would be a backward kernel's only output (a segment of parameterless
// layers reading only the image).
#pragma once

#include <string>
#include <vector>

#include "spec/model.h"
#include "spec/segments.h"

namespace segtile {

enum class KernelKind { Forward, Backward, Head };

struct KernelArg {
    std::string name;
    bool output = false;
    bool scalar = false;  // int32 scalar; otherwise a buffer
    bool integer = false;  // int32 buffer (labels); otherwise the model's float type
    int dims = 0;
    int tensor = -1;       // tensor index for in_/out_/grad_ buffers
    int param = -1;        // m.params() index for parameters and their gradients
};

std::string tensor_name(const Model &m, int tensor);  // layer name, or "image"
std::string c_identifier(const std::string &s);       // "features.0.weight" -> "features_0_weight"

// Inside a kernel's pipeline each parameter is read through a copy Func
// named "p_" and its identifier (generators/kernels.cpp); the schedules
// know parameter-shaped Funcs (copies, their adjoints, weight gradients)
// by that prefix, so it is named here once.
inline std::string parameter_func_name(const std::string &param_name) { return "p_" + c_identifier(param_name); }
inline bool is_parameter_func(const std::string &func_name) { return func_name.rfind("p_", 0) == 0; }
// For messages: "layers conv1..relu3", "layer fc", or "no layers (the loss
// alone)" for a kernel whose range is empty (first > last: an mse head).
std::string layer_span(const Model &m, int first, int last);
// For messages: "model 'unet', the backward kernel of segment 1 (layers
// enc1..pool2)"; "the head kernel (...)" for KernelKind::Head.
std::string kernel_description(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment);
// The head's label argument: "labels" (softmax) or "dense_target" (mse;
// "target" is taken by Halide's generators).
const char *loss_target_name(const Model &m);

std::vector<KernelArg> kernel_signature(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment);
// Whether a signature has an argument of that name (e.g. "grad_in_image").
bool has_arg(const std::vector<KernelArg> &sig, const std::string &name);

// The tensors a segment kernel bounds by a window: its inputs and the layers
// it computes, each over the region this tile needs of it (spec/tiling.h),
// in index order. Which tensors these are is structural; the windows are
// computed on the host and passed as scalars, because a window derived
// inside the kernel from the tile through every layer is an expression as
// deep as the segment, and Halide's lowering of a backward kernel grows
// with that depth (minutes for VGG16).
std::vector<int> window_tensors(const Model &m, const SegmentSpec &s);

// Layers a kernel evaluates (and whose parameters it reads).
std::pair<int, int> kernel_layers(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment);

// The layout of untiled training: no segments, the head is the whole model.
SegmentLayout untiled_layout(const Model &m, bool image_gradient = true);

}  // namespace segtile
