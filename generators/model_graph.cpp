#include "generators/model_graph.h"

#include "generators/layers/activation.h"
#include "generators/layers/convolution.h"
#include "generators/layers/heads.h"
#include "generators/layers/joins.h"
#include "generators/layers/normalisation.h"
#include "generators/layers/pooling.h"
#include "generators/layers/resampling.h"
#include "spec/kernel_signature.h"

namespace segtile {

using Halide::Expr;
using Halide::Func;

std::vector<TensorBounds> whole_image_bounds(const Model &m, Expr width, Expr height) {
    const int L = (int)m.layers.size();
    std::vector<TensorBounds> b(L + 1);
    auto whole = [](Expr w, Expr h) { return TensorBounds{w, h, 0, w - 1, 0, h - 1}; };
    b[L] = whole(width, height);
    for (int i = 0; i < L; i++) {
        const Layer &l = m.layers[i];
        const TensorBounds &in = b[l.input_ids[0] < 0 ? L : l.input_ids[0]];
        b[i] = whole(output_extent<Expr>(l, in.width), output_extent<Expr>(l, in.height));
    }
    return b;
}

namespace {
// Zero outside the region, the source inside it. Written out rather than
// with BoundaryConditions::constant_exterior, whose likely() tags make Halide
// partition every loop of every Func into edge and interior cases: with
// hundreds of Funcs in an autodiff pipeline that multiplies the code LLVM
// has to compile several times over.
Func bounded(const Func &f, const TensorBounds &b, const std::string &name) {
    Halide::Var x("x"), y("y"), c("c"), n("n");
    Expr inside = x >= b.x_min && x <= b.x_max && y >= b.y_min && y <= b.y_max;
    Func g(name);
    g(x, y, c, n) = Halide::select(inside, f(Halide::clamp(x, b.x_min, b.x_max), Halide::clamp(y, b.y_min, b.y_max), c, n),
                                   Halide::Internal::make_zero(f.type()));
    return g;
}
}  // namespace

std::vector<Func> build_forward(const Model &m, const std::map<int, Func> &sources, const std::vector<Func> &params,
                                const std::vector<TensorBounds> &bounds, Halide::Type t, int first, int last) {
    using namespace layers;
    const int L = (int)m.layers.size();
    std::vector<Func> out(L + 1);
    for (const auto &[idx, f] : sources) out[idx] = bounded(f, bounds[idx], "src_" + std::to_string(idx));
    // First parameter index of each layer.
    const auto specs = m.params();
    std::vector<int> first_param(L, -1);
    for (int p = (int)specs.size() - 1; p >= 0; p--) first_param[specs[p].layer] = p;

    for (int i = first; i <= last; i++) {
        const Layer &l = m.layers[i];
        const std::string name = "l_" + c_identifier(l.name);
        std::vector<Func> ins;
        std::vector<int> in_ch;
        for (int src : l.input_ids) {
            int idx = src < 0 ? L : src;
            if (!out[idx].defined())
                throw ModelError(m.source + ": layer '" + l.name + "' reads '" +
                                 (src < 0 ? std::string("input") : m.layers[src].name) +
                                 "', which this kernel neither builds nor receives");
            ins.push_back(out[idx]);
            in_ch.push_back(src < 0 ? m.input_channels : m.layers[src].channels);
        }
        const TensorBounds &ib = bounds[l.input_ids[0] < 0 ? L : l.input_ids[0]];
        auto param = [&](int k) { return params.at(first_param[i] + k); };
        Func f;
        switch (l.kind) {
        case LayerKind::Conv2d:
            f = conv2d(ins[0], param(0), l.bias ? param(1) : Func(), l, t, name);
            break;
        case LayerKind::Relu: f = relu(ins[0], t, name); break;
        case LayerKind::LeakyRelu: f = leaky_relu(ins[0], l.negative_slope, t, name); break;
        case LayerKind::Sigmoid: f = sigmoid(ins[0], t, name); break;
        case LayerKind::MaxPool: f = max_pool(ins[0], l, ib.width, ib.height, t, name); break;
        case LayerKind::AvgPool: f = avg_pool(ins[0], l, t, name); break;
        case LayerKind::BatchNorm:
            f = batch_norm(ins[0], param(0), param(1), param(2), param(3), l.eps, t, name);
            break;
        case LayerKind::Upsample: f = upsample_nearest(ins[0], l.factor, name); break;
        case LayerKind::Concat: f = concat(ins, in_ch, name); break;
        case LayerKind::Add: f = add(ins, name); break;
        case LayerKind::GlobalAvgPool: f = global_avg_pool(ins[0], ib.width, ib.height, t, name); break;
        case LayerKind::Flatten: f = flatten(ins[0], ib.width, ib.height, name); break;
        case LayerKind::Dense:
            f = dense(ins[0], param(0), l.bias ? param(1) : Func(), l.in_features, t, name);
            break;
        }
        // Vector tensors are read only at x = y = 0. Layers that map zero
        // inputs to zero outputs pointwise (or by nearest upsampling) are
        // already zero outside their region: a wrapper would only add Funcs
        // (and their adjoints) to compile. The others are bounded.
        const bool zero_preserving = l.kind == LayerKind::Relu || l.kind == LayerKind::LeakyRelu ||
                                     l.kind == LayerKind::Add || l.kind == LayerKind::Concat ||
                                     l.kind == LayerKind::Upsample;
        out[i] = Model::is_global(l.kind) || zero_preserving ? f : bounded(f, bounds[i], name + "_b");
    }
    return out;
}

}  // namespace segtile
