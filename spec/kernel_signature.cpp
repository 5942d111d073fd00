#include "spec/kernel_signature.h"

#include <cctype>

#include "spec/region_map.h"

namespace segtile {

std::string tensor_name(const Model &m, int tensor) {
    return tensor == (int)m.layers.size() ? "image" : c_identifier(m.layers[tensor].name);
}

std::string c_identifier(const std::string &s) {
    std::string o;
    for (char ch : s) o += std::isalnum((unsigned char)ch) ? ch : '_';
    return o;
}

std::string layer_span(const Model &m, int first, int last) {
    const int L = (int)m.layers.size();
    if (first > last || first < 0 || last >= L) return "no layers (the loss alone)";
    if (first == last) return "layer " + m.layers[first].name;
    return "layers " + m.layers[first].name + ".." + m.layers[last].name;
}

std::string kernel_description(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment) {
    const auto [first, last] = kernel_layers(m, layout, kind, segment);
    const std::string which = kind == KernelKind::Head ? "the head kernel"
                              : std::string("the ") + (kind == KernelKind::Forward ? "forward" : "backward") +
                                    " kernel of segment " + std::to_string(segment);
    return "model '" + m.name + "', " + which + " (" + layer_span(m, first, last) + ")";
}

const char *loss_target_name(const Model &m) {
    return m.loss.kind == LossKind::SoftmaxCrossEntropy ? "labels" : "dense_target";
}

std::pair<int, int> kernel_layers(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment) {
    if (kind == KernelKind::Head) return {layout.head_first, m.loss.input_id};
    const SegmentSpec &s = layout.segments.at(segment);
    return {s.first, s.last};
}

SegmentLayout untiled_layout(const Model &m, bool image_gradient) {
    SegmentLayout l;
    l.head_first = 0;
    l.head_inputs = {(int)m.layers.size()};
    l.image_gradient = image_gradient;
    return l;
}

bool has_arg(const std::vector<KernelArg> &sig, const std::string &name) {
    for (const auto &a : sig)
        if (a.name == name) return true;
    return false;
}

std::vector<int> window_tensors(const Model &m, const SegmentSpec &s) {
    const int L = (int)m.layers.size();
    const Box<int64_t> any{{0, 0}, {0, 0}};
    std::vector<std::pair<int, Box<int64_t>>> targets;
    for (int o : s.outputs) targets.push_back({o, any});
    const auto need = required_boxes<int64_t, IntOps>(m, s.first, s.last, targets, std::vector<Box<int64_t>>(L + 1, any));
    std::vector<int> out;
    for (int t = 0; t <= L; t++)
        if (need[t]) out.push_back(t);
    return out;
}

std::vector<KernelArg> kernel_signature(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment) {
    std::vector<KernelArg> args;
    auto buffer = [&](std::string name, bool output, int tensor) {
        KernelArg a;
        a.name = std::move(name);
        a.output = output;
        a.dims = 4;
        a.tensor = tensor;
        args.push_back(a);
    };
    const auto [first, last] = kernel_layers(m, layout, kind, segment);
    const auto specs = m.params();
    const int L = (int)m.layers.size();
    auto input_grads = [&](const std::vector<int> &inputs) {
        for (int t : inputs)
            if (t != L || layout.image_gradient) buffer("grad_in_" + tensor_name(m, t), true, t);
    };
    auto params = [&](bool grads) {
        for (size_t p = 0; p < specs.size(); p++) {
            const ParamSpec &s = specs[p];
            if (s.layer < first || s.layer > last || (grads && !s.trainable)) continue;
            KernelArg a;
            a.name = (grads ? "grad_" : "") + c_identifier(s.name);
            a.output = grads;
            a.dims = (int)s.dims.size();
            a.param = (int)p;
            args.push_back(a);
        }
    };
    if (kind == KernelKind::Head) {
        for (int t : layout.head_inputs) buffer("in_" + tensor_name(m, t), false, t);
        params(false);
        KernelArg lt;
        lt.name = loss_target_name(m);
        lt.integer = m.loss.kind == LossKind::SoftmaxCrossEntropy;
        lt.dims = lt.integer ? 1 : 4;
        args.push_back(lt);
        KernelArg loss;
        loss.name = "loss";
        loss.output = true;
        args.push_back(loss);
        buffer("prediction", true, m.loss.input_id);
        input_grads(layout.head_inputs);
        params(true);
        return args;
    }
    const SegmentSpec &s = layout.segments.at(segment);
    for (const char *n : {"image_width", "image_height"}) {
        KernelArg a;
        a.name = n;
        a.scalar = true;
        args.push_back(a);
    }
    auto box = [&](const std::string &prefix, int t) {
        for (const char *e : {"x_min", "x_max", "y_min", "y_max"}) {
            KernelArg a;
            a.name = prefix + tensor_name(m, t) + "_" + e;
            a.scalar = true;
            a.tensor = t;
            args.push_back(a);
        }
    };
    for (int t : s.outputs) box("tile_", t);
    for (int t : window_tensors(m, s)) box("window_", t);
    for (int t : s.inputs) buffer("in_" + tensor_name(m, t), false, t);
    params(false);
    if (kind == KernelKind::Forward) {
        for (int t : s.outputs) buffer("out_" + tensor_name(m, t), true, t);
        return args;
    }
    for (int t : s.outputs) buffer("grad_out_" + tensor_name(m, t), false, t);
    input_grads(s.inputs);
    params(true);
    // A kernel needs an output: the image's gradient it is, then.
    bool any = false;
    for (const auto &a : args) any = any || a.output;
    if (!any) buffer("grad_in_image", true, L);
    return args;
}

}  // namespace segtile
