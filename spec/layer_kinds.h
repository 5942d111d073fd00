// The layer kinds. Each kind is one row of the table in spec/layer_kinds.cpp
// (JSON name and fields, how it maps regions, its parameters and cost, the
// facts the planner and the generators need) plus the builder of its Halide
// Func, a row beside the Func in generators/layers/. docs/adding-a-layer.md
// walks through adding one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace segtile {

enum class LayerKind {
    Conv2d,
    Relu,
    LeakyRelu,
    Sigmoid,
    MaxPool,
    AvgPool,
    BatchNorm,  // frozen: affine with stored statistics
    Upsample,   // nearest, integer factor >= 2
    Concat,     // along channels
    Add,        // residual
    GlobalAvgPool,
    Flatten,
    Dense,
    Silu,  // x * sigmoid(x)
    ConvTranspose2d,
};

struct Layer {
    std::string name;                 // unique in the model; what `inputs` refer to
    LayerKind kind = LayerKind::Relu;
    std::vector<std::string> inputs;  // "input" is the image; empty: previous layer
    std::string param_prefix;         // PyTorch module path ("features.0"); default: name

    // Fields a kind's row lists (its JSON fields, the same names).
    int out_channels = 0;
    int kernel = 1;
    int stride = 1;
    int padding = 0;
    int dilation = 1;
    int groups = 1;
    bool bias = true;
    double negative_slope = 0.01;
    double eps = 1e-5;
    int factor = 2;
    int out_features = 0;
    int in_features = 0;  // dense; default: input channels (flatten of 1x1)
    int output_padding = 0;  // conv_transpose: extra rows and columns at the far edge

    // Resolved by Model::resolve().
    std::vector<int> input_ids;  // -1 is the model input
    int in_channels = 0;         // of the first input
    int channels = 0;            // of the output
};

// Spatial sizes are per-layer properties of an image size, so they are not
// stored in Layer: see Model::shapes().
struct TensorShape {
    int64_t width = 0, height = 0, channels = 0;
};

enum class ParamRole { Weight, Bias, RunningMean, RunningVar };
// Uniform: PyTorch's default, U(-b, b) with b = 1 / sqrt(fan_in of the
// layer's weight); batch norm starts as the identity.
enum class ParamInit { Uniform, Ones, Zeros };

// One named parameter tensor. `dims` is the Halide order (innermost first),
// so the memory layout equals PyTorch's for `torch_shape()`.
struct ParamSpec {
    std::string name;  // PyTorch name: "features.0.weight"
    int layer = 0;
    ParamRole role = ParamRole::Weight;
    std::vector<int64_t> dims;
    bool trainable = true;  // batch-norm running statistics are buffers
    ParamInit init = ParamInit::Uniform;

    std::vector<int64_t> torch_shape() const { return {dims.rbegin(), dims.rend()}; }
    int64_t numel() const;
};

// How a layer maps one spatial axis, in integers from its fields:
//   output extent      (in * grow + add) / shrink + plus   (truncating division)
//   input span read    [floor((lo * step + lo_add) / span_div), floor((hi * step + hi_add) / span_div)]
//                      for an output span [lo, hi]
// The default is pointwise: the identity both ways.
struct AxisMap {
    int64_t grow = 1, add = 0, shrink = 1, plus = 0;
    int64_t step = 1, lo_add = 0, hi_add = 0, span_div = 1;
    int64_t min_input = 1;  // the smallest input extent the window fits in
};

struct LayerFlops {
    double forward = 0;      // computing the output region
    double input_grad = 0;   // gradient of the input(s) from the output gradient
    double weight_grad = 0;  // gradient of the parameters
    double backward() const { return input_grad + weight_grad; }
    double total() const { return forward + backward(); }
};

struct LayerKindInfo {
    LayerKind kind;
    const char *name;                       // the JSON "type"
    std::vector<std::string> required = {}; // JSON fields beyond name, type, inputs, params
    std::vector<std::string> optional = {};
    bool joins = false;                     // two or more inputs (else exactly one)
    bool global = false;                    // reads its whole input: the untiled head
    bool needs_vector_input = false;        // its input must be global (pooled or flattened)
    bool zero_preserving = false;           // zero in, zero out: already zero outside its region
    bool backward_reads_input = true;       // false for sums, averages and copies
    bool stride_defaults_to_kernel = false; // pools, as in PyTorch
    AxisMap (*axis)(const Layer &) = nullptr;  // null: pointwise
    // Checks the fields and sets l.channels (preset to the first input's);
    // returns what to fix, or "".
    std::string (*resolve)(Layer &l, const std::vector<int> &in_channels) = nullptr;
    // A global layer's output shape from its input's; returns what to fix, or
    // "" (`at_image` names the image size for the message).
    std::string (*vector_shape)(const Layer &l, const TensorShape &in, TensorShape &out,
                                const std::string &at_image) = nullptr;
    // Parameters, named by suffix ("weight"); Model::params() adds the prefix.
    std::vector<ParamSpec> (*params)(const Layer &l) = nullptr;
    // FLOPs over an output region of `out` elements (all channels, one image).
    LayerFlops (*flops)(const Layer &l, double out) = nullptr;
    // Input elements read per output pixel (memory traffic); null: channels.
    double (*reads_per_pixel)(const Layer &l) = nullptr;
    // JSON fields of a small instance: the table-generated tests build
    // input -> [this layer] -> loss and conv -> [this layer] -> conv from it.
    const char *example = "";
};

// The table, in LayerKind order.
const std::vector<LayerKindInfo> &layer_kinds();
const LayerKindInfo &kind_info(LayerKind k);
inline AxisMap axis_map(const Layer &l) {
    const LayerKindInfo &k = kind_info(l.kind);
    return k.axis ? k.axis(l) : AxisMap{};
}

// A field of Layer by its JSON name, for the parser and ModelBuilder::set.
struct LayerField {
    const char *name;
    int Layer::*int_field = nullptr;
    double Layer::*double_field = nullptr;
    bool Layer::*bool_field = nullptr;
};
const LayerField *find_layer_field(const std::string &name);

// Output extent along one axis for an input extent `in`; T is an integer or a
// Halide Expr, so generators and the planner share one formula.
template <typename T>
T output_extent(const Layer &l, T in) {
    const AxisMap a = axis_map(l);
    T v = in;
    if (a.grow != 1) v = v * (int)a.grow;
    if (a.add != 0) v = v + (int)a.add;
    if (a.shrink != 1) v = v / (int)a.shrink;
    if (a.plus != 0) v = v + (int)a.plus;
    return v;
}

}  // namespace segtile
