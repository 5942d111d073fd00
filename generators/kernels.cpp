#include "generators/kernels.h"

#include "generators/layers/losses.h"
#include "generators/model_graph.h"
#include "generators/unclamp_adjoints.h"
#include "generators/whole_vector_rows.h"
#include "spec/region_map.h"

namespace segtile {

using Halide::Expr;
using Halide::Func;
using Halide::Var;

namespace {

std::vector<Var> vars_for(int dims) {
    static const char *names[] = {"x", "y", "c", "n"};
    std::vector<Var> v;
    for (int i = 0; i < dims; i++) v.emplace_back(names[i]);
    return v;
}

// A named pure copy: autodiff reports adjoints per Func, so every source and
// parameter gets a Func of its own to ask for.
Func wrap(const Func &src, int dims, const std::string &name) {
    auto v = vars_for(dims);
    Func f(name);
    f(v) = src(std::vector<Expr>(v.begin(), v.end()));
    return f;
}

// A source's copy (an input window), its channel clamped: the CPU schedule
// computes weight gradients in blocks of input channels rounded up, whose
// extra channels read the source past its last one (an image of 3 channels
// in blocks of 4). Their values are never used; in range the copy is exact.
Func wrap_source(const Func &src, int channels, const std::string &name) {
    Var x("x"), y("y"), c("c"), n("n");
    Func f(name);
    f(x, y, c, n) = src(x, y, Halide::clamp(c, 0, channels - 1), n);
    return f;
}

// A parameter's copy, clamped to its extents: the CPU schedule computes
// convolutions in blocks of channels rounded up (schedules/
// cpu_conv.cpp), whose extra channels read weights and biases past the
// last one. Their values are never used; in range the copy is exact.
Func wrap_param(const Func &src, const std::vector<int64_t> &dims, const std::string &name) {
    auto v = vars_for((int)dims.size());
    std::vector<Expr> at;
    for (size_t i = 0; i < dims.size(); i++) at.push_back(Halide::clamp(v[i], 0, (int)dims[i] - 1));
    Func f(name);
    f(v) = src(at);
    return f;
}

// Extents of the sources and of layers first..last, propagated from the sources.
std::vector<TensorBounds> extents_from(const Model &m, const std::map<int, std::pair<Expr, Expr>> &known, int first,
                                       int last) {
    const int L = (int)m.layers.size();
    std::vector<TensorBounds> b(L + 1);
    for (const auto &[t, wh] : known) b[t] = TensorBounds{wh.first, wh.second, 0, wh.first - 1, 0, wh.second - 1};
    for (int i = first; i <= last; i++) {
        const Layer &l = m.layers[i];
        const TensorBounds &in = b[l.input_ids[0] < 0 ? L : l.input_ids[0]];
        Expr w = output_extent<Expr>(l, in.width), h = output_extent<Expr>(l, in.height);
        b[i] = TensorBounds{w, h, 0, w - 1, 0, h - 1};
    }
    return b;
}

struct Built {
    std::vector<Func> tensors;            // bounded Func per tensor
    std::map<int, Func> sources;          // wrapped sources, the autodiff handles
    std::vector<Func> params;             // wrapped params (undefined outside the kernel)
};

Built build_tensors(const Model &m, const std::vector<KernelArg> &sig, const KernelInputs &in, int first, int last,
                    const std::vector<TensorBounds> &bounds, Halide::Type t) {
    Built b;
    const auto specs = m.params();
    b.params.resize(specs.size());
    for (const auto &a : sig) {
        if (a.output || a.scalar) continue;
        if (a.param >= 0)
            b.params[a.param] = wrap_param(in.buffers.at(a.name), specs[a.param].dims, parameter_func_name(specs[a.param].name));
        else if (a.name.rfind("in_", 0) == 0) {
            const int channels = a.tensor == (int)m.layers.size() ? m.input_channels : m.layers[a.tensor].channels;
            b.sources[a.tensor] = wrap_source(in.buffers.at(a.name), channels, "src_" + a.name);
        }
    }
    b.tensors = build_forward(m, b.sources, b.params, bounds, t, first, last);
    return b;
}

// Adjoints of the sources and trainable parameters, as named outputs.
void add_gradients(const Model &m, const std::vector<KernelArg> &sig, const Built &b, const Halide::Derivative &d,
                   std::map<std::string, Func> &out) {
    const auto specs = m.params();
    for (const auto &a : sig) {
        if (!a.output) continue;
        Func g;
        if (a.param >= 0) g = d(b.params[a.param]);
        else if (a.name.rfind("grad_in_", 0) == 0) g = d(b.sources.at(a.tensor));
        else continue;
        if (!g.defined()) throw ModelError(m.source + ": no gradient reaches '" + a.name + "'");
        Func o = wrap(g, a.dims, a.name);
        // A parameter's gradient bounded to its shape: it states the shape
        // even where the kernel never reads the parameter's copy (a first
        // layer's weights), and the CPU schedule blocks by it. (Clamped
        // like the copy instead, its loops split at the clamps: conv 1x1
        // 128->64 weight gradient 12% slower.)
        if (a.param >= 0)
            for (int i = 0; i < (int)specs[a.param].dims.size(); i++)
                o.bound(o.args()[i], 0, (int)specs[a.param].dims[i]);
        out[a.name] = o;
    }
    std::vector<Func> outs;
    for (const auto &[name, f] : out) outs.push_back(f);
    unclamp_bounded_adjoints(outs);
    pure_pointwise_adjoints(outs);
    likely_innermost_clamps(outs);
    // AVX-512's lanes (64 bytes), a multiple of AVX2's.
    if (!outs.empty()) whole_vector_rows(outs, 64 / outs.front().type().bytes());
}

}  // namespace

std::map<std::string, Func> build_kernel(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                                         const KernelInputs &in, Halide::Type t) {
    const auto sig = kernel_signature(m, layout, kind, segment);
    const auto [first, last] = kernel_layers(m, layout, kind, segment);
    const int L = (int)m.layers.size();
    std::map<std::string, Func> out;
    Var x("x"), y("y"), c("c"), n("n");

    if (kind == KernelKind::Head) {
        std::map<int, std::pair<Expr, Expr>> known;
        Expr batch;
        for (int src : layout.head_inputs) {
            const auto &e = in.extents.at("in_" + tensor_name(m, src));
            known[src] = {e[0], e[1]};
            batch = e[2];
        }
        const auto bounds = extents_from(m, known, first, last);
        Built b = build_tensors(m, sig, in, first, last, bounds, t);
        Func pred = b.tensors[m.loss.input_id];
        const TensorBounds &pb = bounds[m.loss.input_id];
        Func loss = m.loss.kind == LossKind::SoftmaxCrossEntropy
                        ? layers::softmax_cross_entropy(pred, in.buffers.at("labels"), m.output_channels(), batch, t,
                                                        "loss_value")
                        : layers::mean_squared_error(pred, in.buffers.at(loss_target_name(m)), pb.width, pb.height,
                                                     m.output_channels(), batch, t, "loss_value");
        out["loss"] = Func("loss");
        out["loss"]() = loss();
        out["prediction"] = wrap(pred, 4, "prediction");
        add_gradients(m, sig, b, Halide::propagate_adjoints(loss), out);
        return out;
    }

    // Segment kernels: every tensor is clipped to its window, the region
    // this tile needs of it, which the executor computes (spec/tiling.h)
    // and passes as scalars (spec/kernel_signature.h, window_tensors).
    const SegmentSpec &seg = layout.segments.at(segment);
    auto bounds = extents_from(m, {{L, {in.scalars.at("image_width"), in.scalars.at("image_height")}}}, 0, last);
    for (int i : window_tensors(m, seg)) {
        const std::string p = "window_" + tensor_name(m, i) + "_";
        bounds[i].x_min = in.scalars.at(p + "x_min");
        bounds[i].x_max = in.scalars.at(p + "x_max");
        bounds[i].y_min = in.scalars.at(p + "y_min");
        bounds[i].y_max = in.scalars.at(p + "y_max");
    }
    std::vector<std::pair<int, Box<Expr>>> targets;
    for (int o : seg.outputs) {
        const std::string p = "tile_" + tensor_name(m, o) + "_";
        targets.push_back({o, {{in.scalars.at(p + "x_min"), in.scalars.at(p + "x_max")},
                               {in.scalars.at(p + "y_min"), in.scalars.at(p + "y_max")}}});
    }
    Built b = build_tensors(m, sig, in, first, last, bounds, t);
    if (kind == KernelKind::Forward) {
        std::vector<Func> outs;
        for (int o : seg.outputs) {
            out["out_" + tensor_name(m, o)] = wrap(b.tensors[o], 4, "out_" + tensor_name(m, o));
            outs.push_back(out["out_" + tensor_name(m, o)]);
        }
        likely_innermost_clamps(outs);
        return out;
    }
    // Backward: seed each output with its gradient over its tile (zero
    // elsewhere) through the scalar sum of grad * value; backprop is linear
    // in the seed, so the tiles' contributions add up to the untiled gradient.
    Expr batch;
    Func seed("seed");
    seed() = Halide::Internal::make_zero(t);
    for (size_t k = 0; k < seg.outputs.size(); k++) {
        const int o = seg.outputs[k];
        const auto &tile = targets[k].second;
        const std::string g = "grad_out_" + tensor_name(m, o);
        batch = in.extents.at(g)[2];
        Halide::RDom r(tile.x.lo, tile.x.hi - tile.x.lo + 1, tile.y.lo, tile.y.hi - tile.y.lo + 1, 0,
                       m.layers[o].channels, 0, batch, "seed_r" + std::to_string(k));
        seed() += in.buffers.at(g)(r.x, r.y, r.z, r.w) * b.tensors[o](r.x, r.y, r.z, r.w);
    }
    add_gradients(m, sig, b, Halide::propagate_adjoints(seed), out);
    return out;
}

void schedule_reference(const std::vector<Func> &outputs) {
    std::vector<Halide::Internal::Function> fs;
    for (const auto &f : outputs)
        if (f.defined()) fs.push_back(f.function());
    for (auto &[name, fn] : Halide::Internal::build_environment(fs)) {
        Func f(fn);
        f.compute_root();
        // Loop partitioning copies each bounded layer's loop body per
        // boundary region; scalar reference code gains nothing from it
        // (Darknet19's step compiled in 62 s without, 80 s with).
        f.never_partition_all();
        for (int u = 0; u < f.num_update_definitions(); u++) f.update(u).never_partition_all();
    }
}

}  // namespace segtile
