// The model description: a DAG of layers in topological order, plus a loss.
// Plain C++ (no Halide): the generators, the planner and the runtime all use it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/errors.h"

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
};

enum class LossKind {
    SoftmaxCrossEntropy,  // class label per image; input is (1, 1, classes, n)
    MeanSquaredError,     // dense target of the same shape as the input
};

const char *to_string(LayerKind k);
const char *to_string(LossKind k);
std::optional<LayerKind> layer_kind_from_string(const std::string &s);
std::optional<LossKind> loss_kind_from_string(const std::string &s);

struct Layer {
    std::string name;                 // unique in the model; what `inputs` refer to
    LayerKind kind = LayerKind::Relu;
    std::vector<std::string> inputs;  // "input" is the image; empty: previous layer
    std::string param_prefix;         // PyTorch module path ("features.0"); default: name

    // conv2d / pools
    int out_channels = 0;  // conv2d
    int kernel = 1;
    int stride = 1;
    int padding = 0;
    int dilation = 1;      // conv2d
    int groups = 1;        // conv2d
    bool bias = true;      // conv2d, dense
    // others
    double negative_slope = 0.01;  // leaky_relu
    double eps = 1e-5;             // batch_norm
    int factor = 2;                // upsample
    int out_features = 0;          // dense
    int in_features = 0;           // dense; default: input channels (flatten of 1x1)

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

// Output extent along one axis for an input extent `in`; T is an integer or a
// Halide Expr, so generators and the planner share one formula.
template <typename T>
T output_extent(const Layer &l, T in) {
    switch (l.kind) {
    case LayerKind::Conv2d:
        return (in + 2 * l.padding - l.dilation * (l.kernel - 1) - 1) / l.stride + 1;
    case LayerKind::MaxPool:
    case LayerKind::AvgPool:
        return (in + 2 * l.padding - (l.kernel - 1) - 1) / l.stride + 1;
    case LayerKind::Upsample:
        return in * l.factor;
    case LayerKind::GlobalAvgPool:
    case LayerKind::Flatten:
    case LayerKind::Dense:
        return in * 0 + 1;
    default:
        return in;
    }
}

enum class ParamRole { Weight, Bias, RunningMean, RunningVar };

// One named parameter tensor. `dims` is the Halide order (innermost first),
// so the memory layout equals PyTorch's for `torch_shape()`.
struct ParamSpec {
    std::string name;  // PyTorch name: "features.0.weight"
    int layer = 0;
    ParamRole role = ParamRole::Weight;
    std::vector<int64_t> dims;
    bool trainable = true;  // batch-norm running statistics are buffers

    std::vector<int64_t> torch_shape() const { return {dims.rbegin(), dims.rend()}; }
    int64_t numel() const;
};

struct Loss {
    LossKind kind = LossKind::SoftmaxCrossEntropy;
    std::string input;  // layer name; empty: last layer
    int input_id = -1;  // resolved
};

class Model {
public:
    std::string name;
    std::string source = "<builder>";  // file the model came from, for messages
    int input_channels = 3;
    std::vector<Layer> layers;
    Loss loss;

    // Checks the graph and fills input_ids and channel counts. Throws ModelError.
    void resolve();

    // Output shape of every layer for an input image of width x height.
    // Throws ModelError naming the layer if the image is too small.
    std::vector<TensorShape> shapes(int64_t width, int64_t height) const;
    // The same without the nearest-valid-size search in the message.
    std::vector<TensorShape> shapes_unchecked(int64_t width, int64_t height) const;

    std::vector<ParamSpec> params() const;
    int find_layer(const std::string &name) const;  // -1 if absent
    // Number of classes (softmax loss) or output channels (mse loss).
    int output_channels() const { return layers.at(loss.input_id).channels; }

    // True for layers that need their whole input (no tiling through them).
    static bool is_global(LayerKind k) {
        return k == LayerKind::GlobalAvgPool || k == LayerKind::Flatten || k == LayerKind::Dense;
    }

private:
    [[noreturn]] void fail(int layer, const std::string &what) const;
};

// Reads a model from JSON text / a file. Throws ModelError naming the file.
Model parse_model_json(const std::string &text, const std::string &source);
Model load_model_file(const std::string &path);
// Finds a shipped model by name (models/<name>.json) or treats `name_or_path` as a path.
Model load_model(const std::string &name_or_path);
std::string models_dir();

}  // namespace segtile
