#include "spec/model.h"

#include <map>
#include <set>

namespace segtile {

namespace {
struct KindName {
    LayerKind kind;
    const char *name;
};
constexpr KindName kKindNames[] = {
    {LayerKind::Conv2d, "conv2d"},       {LayerKind::Relu, "relu"},
    {LayerKind::LeakyRelu, "leaky_relu"}, {LayerKind::Sigmoid, "sigmoid"},
    {LayerKind::MaxPool, "max_pool"},    {LayerKind::AvgPool, "avg_pool"},
    {LayerKind::BatchNorm, "batch_norm"}, {LayerKind::Upsample, "upsample"},
    {LayerKind::Concat, "concat"},       {LayerKind::Add, "add"},
    {LayerKind::GlobalAvgPool, "global_avg_pool"},
    {LayerKind::Flatten, "flatten"},     {LayerKind::Dense, "dense"},
};
}  // namespace

const char *to_string(LayerKind k) {
    for (const auto &kn : kKindNames)
        if (kn.kind == k) return kn.name;
    return "?";
}

const char *to_string(LossKind k) {
    return k == LossKind::SoftmaxCrossEntropy ? "softmax_cross_entropy" : "mse";
}

std::optional<LayerKind> layer_kind_from_string(const std::string &s) {
    for (const auto &kn : kKindNames)
        if (s == kn.name) return kn.kind;
    return std::nullopt;
}

std::optional<LossKind> loss_kind_from_string(const std::string &s) {
    if (s == "softmax_cross_entropy" || s == "cross_entropy") return LossKind::SoftmaxCrossEntropy;
    if (s == "mse" || s == "mean_squared_error") return LossKind::MeanSquaredError;
    return std::nullopt;
}

int64_t ParamSpec::numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

void Model::fail(int layer, const std::string &what) const {
    std::string where = source + ": model '" + name + "'";
    if (layer >= 0 && layer < (int)layers.size())
        where += ", layer '" + layers[layer].name + "' (" + to_string(layers[layer].kind) + ")";
    throw ModelError(where + ": " + what);
}

int Model::find_layer(const std::string &n) const {
    for (size_t i = 0; i < layers.size(); i++)
        if (layers[i].name == n) return (int)i;
    return -1;
}

void Model::resolve() {
    if (layers.empty()) fail(-1, "the model has no layers; add at least one to \"layers\"");
    if (input_channels <= 0) fail(-1, "\"input_channels\" must be positive");
    std::set<std::string> seen;
    for (size_t i = 0; i < layers.size(); i++) {
        Layer &l = layers[i];
        const int li = (int)i;
        if (l.name.empty()) fail(li, "layer has no name");
        if (l.name == "input") fail(li, "the name 'input' is reserved for the image");
        if (!seen.insert(l.name).second) fail(li, "duplicate layer name; names must be unique");
        if (l.param_prefix.empty()) l.param_prefix = l.name;
        if (l.inputs.empty()) l.inputs.push_back(i == 0 ? "input" : layers[i - 1].name);

        const bool joins = l.kind == LayerKind::Concat || l.kind == LayerKind::Add;
        if (joins && l.inputs.size() < 2) fail(li, "needs at least two \"inputs\"");
        if (!joins && l.inputs.size() != 1) fail(li, "takes exactly one input, got " + std::to_string(l.inputs.size()));

        l.input_ids.clear();
        std::vector<int> in_ch;
        for (const auto &in : l.inputs) {
            if (in == "input") {
                l.input_ids.push_back(-1);
                in_ch.push_back(input_channels);
                continue;
            }
            int j = find_layer(in);
            if (j < 0) fail(li, "input '" + in + "' names no layer; use 'input' or the name of a layer");
            if (j >= li) fail(li, "input '" + in + "' is defined later; layers must be listed in topological order");
            l.input_ids.push_back(j);
            in_ch.push_back(layers[j].channels);
        }
        l.in_channels = in_ch[0];
        auto positive = [&](int v, const char *field) {
            if (v <= 0) fail(li, std::string("\"") + field + "\" must be positive, got " + std::to_string(v));
        };
        switch (l.kind) {
        case LayerKind::Conv2d:
            positive(l.out_channels, "out_channels");
            positive(l.kernel, "kernel");
            positive(l.stride, "stride");
            positive(l.dilation, "dilation");
            positive(l.groups, "groups");
            if (l.padding < 0) fail(li, "\"padding\" must be >= 0");
            if (l.in_channels % l.groups || l.out_channels % l.groups)
                fail(li, "groups=" + std::to_string(l.groups) + " must divide in_channels=" +
                             std::to_string(l.in_channels) + " and out_channels=" + std::to_string(l.out_channels));
            l.channels = l.out_channels;
            break;
        case LayerKind::MaxPool:
        case LayerKind::AvgPool:
            positive(l.kernel, "kernel");
            positive(l.stride, "stride");
            if (l.padding < 0 || 2 * l.padding > l.kernel)
                fail(li, "\"padding\" must be between 0 and kernel/2 (as in PyTorch)");
            l.channels = l.in_channels;
            break;
        case LayerKind::Upsample:
            if (l.factor < 2) fail(li, "\"factor\" must be 2 or more");
            l.channels = l.in_channels;
            break;
        case LayerKind::Concat:
            l.channels = 0;
            for (int c : in_ch) l.channels += c;
            break;
        case LayerKind::Add:
            for (size_t k = 1; k < in_ch.size(); k++)
                if (in_ch[k] != in_ch[0])
                    fail(li, "channel mismatch: input '" + l.inputs[0] + "' has " + std::to_string(in_ch[0]) +
                                 " channels but '" + l.inputs[k] + "' has " + std::to_string(in_ch[k]));
            l.channels = in_ch[0];
            break;
        case LayerKind::Dense:
            positive(l.out_features, "out_features");
            if (l.in_features == 0) l.in_features = l.in_channels;
            l.channels = l.out_features;
            break;
        case LayerKind::BatchNorm:
            if (!(l.eps > 0)) fail(li, "\"eps\" must be positive");
            l.channels = l.in_channels;
            break;
        default:
            l.channels = l.in_channels;
        }
        if (l.kind == LayerKind::Dense) {
            // Dense reads a vector: its input must be flattened or globally pooled.
            LayerKind pk = l.input_ids[0] < 0 ? LayerKind::Conv2d : layers[l.input_ids[0]].kind;
            if (!is_global(pk))
                fail(li, "dense needs a vector input; put a 'flatten' or 'global_avg_pool' layer before it");
        }
    }
    loss.input_id = loss.input.empty() ? (int)layers.size() - 1 : find_layer(loss.input);
    if (loss.input_id < 0) fail(-1, "loss input '" + loss.input + "' names no layer");
    if (loss.input.empty()) loss.input = layers[loss.input_id].name;
    const LayerKind lk = layers[loss.input_id].kind;
    if (loss.kind == LossKind::SoftmaxCrossEntropy && !is_global(lk))
        fail(loss.input_id, "softmax_cross_entropy needs class scores: end the model with global_avg_pool or dense");
    const int src = layers[loss.input_id].input_ids[0];
    if (lk == LayerKind::Flatten && (src < 0 || !is_global(layers[src].kind)))
        fail(loss.input_id, "the loss cannot read a flatten layer (its length depends on the image size); add a dense layer");
}

namespace {
// Whether a square image of side e passes every size check of the model.
bool side_is_valid(const Model &m, int64_t e) {
    try {
        m.shapes_unchecked(e, e);
        return true;
    } catch (const ModelError &) {
        return false;
    }
}

// "nearest valid sizes: 296 or 304" for one side.
std::string nearest_valid(const Model &m, int64_t e) {
    const int64_t limit = 4096;  // search window; networks' strides are far smaller
    int64_t below = -1, above = -1;
    for (int64_t d = 1; d <= limit && (below < 0 || above < 0); d++) {
        if (below < 0 && e - d >= 1 && side_is_valid(m, e - d)) below = e - d;
        if (above < 0 && side_is_valid(m, e + d)) above = e + d;
    }
    std::string r;
    if (below > 0) r += std::to_string(below);
    if (above > 0) r += (r.empty() ? "" : " or ") + std::to_string(above);
    return r.empty() ? "none found" : r;
}
}  // namespace

std::vector<TensorShape> Model::shapes(int64_t width, int64_t height) const {
    try {
        return shapes_unchecked(width, height);
    } catch (const ModelError &e) {
        std::string hint = " (nearest valid";
        if (!side_is_valid(*this, width)) hint += " widths: " + nearest_valid(*this, width);
        if (!side_is_valid(*this, height))
            hint += std::string(hint.back() == 'd' ? "" : ";") + " heights: " + nearest_valid(*this, height);
        throw ModelError(std::string(e.what()) + hint + ")");
    }
}

std::vector<TensorShape> Model::shapes_unchecked(int64_t width, int64_t height) const {
    std::vector<TensorShape> s(layers.size());
    for (size_t i = 0; i < layers.size(); i++) {
        const Layer &l = layers[i];
        auto in = [&](int k) {
            int j = l.input_ids[k];
            return j < 0 ? TensorShape{width, height, input_channels} : s[j];
        };
        TensorShape a = in(0), o = a;
        o.channels = l.channels;
        // C++ division truncates: catch windows larger than the padded input first.
        const int64_t span = l.kind == LayerKind::Conv2d ? (int64_t)l.dilation * (l.kernel - 1) + 1 - 2 * l.padding
                             : (l.kind == LayerKind::MaxPool || l.kind == LayerKind::AvgPool) ? l.kernel - 2 * l.padding
                                                                                              : 1;
        if (a.width < span || a.height < span)
            throw ModelError(source + ": model '" + name + "', layer '" + l.name + "' (" + to_string(l.kind) +
                             "): image " + std::to_string(width) + "x" + std::to_string(height) +
                             " is too small for the network (this layer gets " + std::to_string(a.width) + "x" +
                             std::to_string(a.height) + " but its window needs " + std::to_string(span) + "x" +
                             std::to_string(span) + "); use a larger image");
        o.width = output_extent<int64_t>(l, a.width);
        o.height = output_extent<int64_t>(l, a.height);
        switch (l.kind) {
        case LayerKind::Concat:
        case LayerKind::Add:
            for (size_t k = 1; k < l.input_ids.size(); k++) {
                TensorShape b = in((int)k);
                if (b.width != a.width || b.height != a.height)
                    throw ModelError(source + ": model '" + name + "', layer '" + l.name + "' (" + to_string(l.kind) +
                                     "): inputs differ in size at image " + std::to_string(width) + "x" +
                                     std::to_string(height) + " (" + std::to_string(a.width) + "x" +
                                     std::to_string(a.height) + " vs " + std::to_string(b.width) + "x" +
                                     std::to_string(b.height) + "); choose an image size the network's strides divide");
            }
            break;
        case LayerKind::Flatten:
            o.channels = a.width * a.height * a.channels;
            break;
        case LayerKind::Dense:
            // Flatten's length depends on the image size; the weights do not.
            if (a.channels != l.in_features)
                throw ModelError(source + ": model '" + name + "', layer '" + l.name + "' (dense): expects " +
                                 std::to_string(l.in_features) + " input features but gets " +
                                 std::to_string(a.channels) + " at image " + std::to_string(width) + "x" +
                                 std::to_string(height) + "; set \"in_features\" or pool globally before flatten");
            break;
        default:
            break;
        }
        if (o.width <= 0 || o.height <= 0)
            throw ModelError(source + ": model '" + name + "', layer '" + l.name + "' (" + to_string(l.kind) +
                             "): image " + std::to_string(width) + "x" + std::to_string(height) +
                             " is too small for the network (this layer's output would be " +
                             std::to_string(o.width) + "x" + std::to_string(o.height) + "); use a larger image");
        s[i] = o;
    }
    return s;
}

std::vector<ParamSpec> Model::params() const {
    std::vector<ParamSpec> out;
    for (size_t i = 0; i < layers.size(); i++) {
        const Layer &l = layers[i];
        auto add = [&](const char *suffix, ParamRole role, std::vector<int64_t> dims, bool trainable) {
            out.push_back({l.param_prefix + "." + suffix, (int)i, role, std::move(dims), trainable});
        };
        switch (l.kind) {
        case LayerKind::Conv2d:
            add("weight", ParamRole::Weight, {l.kernel, l.kernel, l.in_channels / l.groups, l.out_channels}, true);
            if (l.bias) add("bias", ParamRole::Bias, {l.out_channels}, true);
            break;
        case LayerKind::Dense:
            add("weight", ParamRole::Weight, {l.in_features, l.out_features}, true);
            if (l.bias) add("bias", ParamRole::Bias, {l.out_features}, true);
            break;
        case LayerKind::BatchNorm:
            add("weight", ParamRole::Weight, {l.channels}, true);
            add("bias", ParamRole::Bias, {l.channels}, true);
            add("running_mean", ParamRole::RunningMean, {l.channels}, false);
            add("running_var", ParamRole::RunningVar, {l.channels}, false);
            break;
        default:
            break;
        }
    }
    return out;
}

}  // namespace segtile
