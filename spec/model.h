// The model description: a DAG of layers in topological order, plus a loss.
// Plain C++ (no Halide): the generators, the planner and the runtime all use it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/errors.h"
#include "spec/layer_kinds.h"

namespace segtile {

enum class LossKind {
    SoftmaxCrossEntropy,  // class label per image; input is (1, 1, classes, n)
    MeanSquaredError,     // dense target of the same shape as the input
};

const char *to_string(LayerKind k);
const char *to_string(LossKind k);
std::optional<LayerKind> layer_kind_from_string(const std::string &s);
std::optional<LossKind> loss_kind_from_string(const std::string &s);

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
    static bool is_global(LayerKind k) { return kind_info(k).global; }

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
