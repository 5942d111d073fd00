#include "spec/model.h"

#include <map>
#include <set>

namespace segtile {

const char *to_string(LayerKind k) { return kind_info(k).name; }

const char *to_string(LossKind k) {
    return k == LossKind::SoftmaxCrossEntropy ? "softmax_cross_entropy" : "mse";
}

std::optional<LayerKind> layer_kind_from_string(const std::string &s) {
    for (const LayerKindInfo &k : layer_kinds())
        if (s == k.name) return k.kind;
    return std::nullopt;
}

std::optional<LossKind> loss_kind_from_string(const std::string &s) {
    if (s == "softmax_cross_entropy" || s == "cross_entropy") return LossKind::SoftmaxCrossEntropy;
    if (s == "mse" || s == "mean_squared_error") return LossKind::MeanSquaredError;
    return std::nullopt;
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

        const LayerKindInfo &kind = kind_info(l.kind);
        if (kind.joins && l.inputs.size() < 2) fail(li, "needs at least two \"inputs\"");
        if (!kind.joins && l.inputs.size() != 1) fail(li, "takes exactly one input, got " + std::to_string(l.inputs.size()));

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
        l.channels = l.in_channels;
        if (kind.resolve)
            if (std::string e = kind.resolve(l, in_ch); !e.empty()) fail(li, e);
        // A layer that reads a vector needs a flattened or globally pooled input.
        if (kind.needs_vector_input && (l.input_ids[0] < 0 || !is_global(layers[l.input_ids[0]].kind)))
            fail(li, std::string(kind.name) + " needs a vector input; put a 'flatten' or 'global_avg_pool' layer before it");
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
        const LayerKindInfo &kind = kind_info(l.kind);
        const std::string at = source + ": model '" + name + "', layer '" + l.name + "' (" + kind.name + "): ";
        const std::string image = std::to_string(width) + "x" + std::to_string(height);
        // C++ division truncates: catch windows larger than the padded input first.
        const int64_t span = axis_map(l).min_input;
        if (a.width < span || a.height < span)
            throw ModelError(at + "image " + image + " is too small for the network (this layer gets " +
                             std::to_string(a.width) + "x" + std::to_string(a.height) + " but its window needs " +
                             std::to_string(span) + "x" + std::to_string(span) + "); use a larger image");
        o.width = output_extent<int64_t>(l, a.width);
        o.height = output_extent<int64_t>(l, a.height);
        for (size_t k = 1; k < l.input_ids.size(); k++) {
            TensorShape b = in((int)k);
            if (b.width != a.width || b.height != a.height)
                throw ModelError(at + "inputs differ in size at image " + image + " (" + std::to_string(a.width) +
                                 "x" + std::to_string(a.height) + " vs " + std::to_string(b.width) + "x" +
                                 std::to_string(b.height) + "); choose an image size the network's strides divide");
        }
        if (kind.vector_shape)
            if (std::string e = kind.vector_shape(l, a, o, image); !e.empty()) throw ModelError(at + e);
        if (o.width <= 0 || o.height <= 0)
            throw ModelError(at + "image " + image + " is too small for the network (this layer's output would be " +
                             std::to_string(o.width) + "x" + std::to_string(o.height) + "); use a larger image");
        s[i] = o;
    }
    return s;
}

std::vector<ParamSpec> Model::params() const {
    std::vector<ParamSpec> out;
    for (size_t i = 0; i < layers.size(); i++) {
        const Layer &l = layers[i];
        const LayerKindInfo &kind = kind_info(l.kind);
        if (!kind.params) continue;
        for (ParamSpec p : kind.params(l)) {
            p.name = l.param_prefix + "." + p.name;
            p.layer = (int)i;
            out.push_back(std::move(p));
        }
    }
    return out;
}

}  // namespace segtile
