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
// The builder of a kind's Func, from the families' rows.
Func (*builder_of(LayerKind k))(const layers::LayerArgs &) {
    using namespace layers;
    for (const auto &family : {activation_layers(), convolution_layers(), head_layers(), join_layers(),
                               normalisation_layers(), pooling_layers(), resampling_layers()})
        for (const LayerBuilder &b : family)
            if (b.kind == k) return b.build;
    throw InternalError(std::string("no Halide builder for layer kind ") + to_string(k) +
                        "; add its row beside its Func in generators/layers/");
}

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
        layers::LayerArgs args{l, ins, in_ch, {}, ib.width, ib.height, t, name};
        for (int p = first_param[i]; p >= 0 && p < (int)specs.size() && specs[p].layer == i; p++)
            args.params.push_back(params.at(p));
        const LayerKindInfo &kind = kind_info(l.kind);
        const Func f = builder_of(l.kind)(args);
        // Vector tensors are read only at x = y = 0. Layers that map zero
        // inputs to zero outputs pointwise (or by nearest upsampling) are
        // already zero outside their region: a wrapper would only add Funcs
        // (and their adjoints) to compile. The others are bounded.
        out[i] = kind.global || kind.zero_preserving ? f : bounded(f, bounds[i], name + "_b");
    }
    return out;
}

}  // namespace segtile
