#include "generators/training_step.h"

#include "generators/layers/losses.h"
#include "generators/model_graph.h"

namespace segtile {

using Halide::Buffer;
using Halide::Expr;
using Halide::Func;
using Halide::Var;

namespace {

std::vector<Var> vars_for(int dims) {
    static const char *names[] = {"x", "y", "c", "n"};
    std::vector<Var> v;
    for (int i = 0; i < dims; i++) v.emplace_back(i < 4 ? names[i] : "d" + std::to_string(i));
    return v;
}

// Wraps a Func in a named pure copy: autodiff reports adjoints per Func, so
// each parameter and the image get a Func of their own.
Func wrap(const Func &src, int dims, const std::string &name) {
    auto v = vars_for(dims);
    Func f(name);
    std::vector<Expr> args(v.begin(), v.end());
    f(v) = src(args);
    return f;
}

struct Forward {
    Func image;                 // wrapped image, the autodiff handle
    std::vector<Func> params;   // wrapped params
    Func prediction, loss;
    std::vector<Func> funcs;
};

Forward forward_and_loss(const Model &m, const StepInputs &in, Halide::Type t) {
    Forward fw;
    const auto specs = m.params();
    fw.image = wrap(in.image, 4, "image_value");
    for (size_t i = 0; i < specs.size(); i++)
        fw.params.push_back(wrap(in.params.at(i), (int)specs[i].dims.size(), "p_" + halide_name(specs[i].name)));
    const auto bounds = whole_image_bounds(m, in.width, in.height);
    const int L = (int)m.layers.size();
    auto tensors = build_forward(m, {{L, fw.image}}, fw.params, bounds, t, 0, m.loss.input_id);
    fw.prediction = tensors[m.loss.input_id];
    const TensorBounds &pb = bounds[m.loss.input_id];
    if (m.loss.kind == LossKind::SoftmaxCrossEntropy) {
        fw.loss = layers::softmax_cross_entropy(fw.prediction, in.labels, m.output_channels(), in.batch, t, "loss");
    } else {
        fw.loss = layers::mean_squared_error(fw.prediction, in.target, pb.width, pb.height, m.output_channels(),
                                             in.batch, t, "loss");
    }
    return fw;
}

// Halide::Error is not a std::exception; callers (and gtest) see a std::runtime_error.
void realize_or_throw(Halide::Pipeline &p, const std::vector<Buffer<>> &outs) {
    try {
        p.realize(Halide::Realization(outs));
    } catch (const Halide::Error &e) {
        throw std::runtime_error(std::string("Halide: ") + e.what());
    }
}

}  // namespace

Func build_loss(const Model &m, const StepInputs &in, Halide::Type t) { return forward_and_loss(m, in, t).loss; }

StepOutputs build_training_step(const Model &m, const StepInputs &in, Halide::Type t) {
    Forward fw = forward_and_loss(m, in, t);
    Halide::Derivative d = Halide::propagate_adjoints(fw.loss);
    StepOutputs out;
    out.loss = fw.loss;
    out.prediction = Func("prediction");
    Var x("x"), y("y"), c("c"), n("n");
    out.prediction(x, y, c, n) = fw.prediction(x, y, c, n);
    out.grad_image = wrap(d(fw.image), 4, "grad_image");
    const auto specs = m.params();
    for (size_t i = 0; i < specs.size(); i++) {
        if (!specs[i].trainable) {
            out.grads.emplace_back();
            continue;
        }
        Func g = d(fw.params[i]);
        if (!g.defined()) throw ModelError(m.source + ": parameter '" + specs[i].name + "' gets no gradient");
        out.grads.push_back(wrap(g, (int)specs[i].dims.size(), "grad_" + halide_name(specs[i].name)));
    }
    return out;
}

void schedule_reference(const std::vector<Func> &outputs) {
    std::vector<Halide::Internal::Function> fs;
    for (const auto &f : outputs)
        if (f.defined()) fs.push_back(f.function());
    for (auto &[name, fn] : Halide::Internal::build_environment(fs)) {
        Func f(fn);
        f.compute_root();
    }
}

JitTrainingStep::JitTrainingStep(const Model &m, Halide::Type t) : model_(m), type_(t) {
    image_ = Halide::ImageParam(t, 4, "image_in");
    const bool ce = m.loss.kind == LossKind::SoftmaxCrossEntropy;
    labels_ = ce ? Halide::ImageParam(Halide::Int(32), 1, "labels") : Halide::ImageParam(t, 4, "target");
    StepInputs in;
    in.image = image_;
    in.width = image_.dim(0).extent();
    in.height = image_.dim(1).extent();
    in.batch = image_.dim(3).extent();
    (ce ? in.labels : in.target) = labels_;
    for (const auto &s : m.params()) {
        params_.emplace_back(t, (int)s.dims.size(), "in_" + halide_name(s.name));
        in.params.push_back(params_.back());
    }
    step_ = build_training_step(m, in, t);
    std::vector<Func> outs = {step_.loss, step_.prediction, step_.grad_image};
    for (auto &g : step_.grads)
        if (g.defined()) outs.push_back(g);
    schedule_reference(outs);
    full_ = Halide::Pipeline(outs);
    loss_func_ = build_loss(m, in, t);
    schedule_reference({loss_func_});
    loss_only_ = Halide::Pipeline(loss_func_);
}

void JitTrainingStep::bind(const Buffer<> &image, const Buffer<> &lt, const std::vector<Buffer<>> &params) {
    image_.set(image);
    labels_.set(lt);
    if (params.size() != params_.size())
        throw std::invalid_argument("expected " + std::to_string(params_.size()) + " parameter buffers");
    for (size_t i = 0; i < params.size(); i++) params_[i].set(params[i]);
}

JitTrainingStep::Result JitTrainingStep::run(const Buffer<> &image, const Buffer<> &lt,
                                             const std::vector<Buffer<>> &params) {
    bind(image, lt, params);
    const auto shapes = model_.shapes(image.dim(0).extent(), image.dim(1).extent());
    const TensorShape &ps = shapes[model_.loss.input_id];
    const int batch = image.dim(3).extent();
    Result r;
    Buffer<> loss(type_, std::vector<int>{});
    r.prediction = Buffer<>(type_, {(int)ps.width, (int)ps.height, (int)ps.channels, batch});
    r.grad_image = Buffer<>(type_, {image.dim(0).extent(), image.dim(1).extent(), image.dim(2).extent(), batch});
    std::vector<Buffer<>> outs = {loss, r.prediction, r.grad_image};
    const auto specs = model_.params();
    for (size_t i = 0; i < specs.size(); i++) {
        if (!specs[i].trainable) {
            r.grads.emplace_back();
            continue;
        }
        std::vector<int> dims(specs[i].dims.begin(), specs[i].dims.end());
        r.grads.emplace_back(type_, dims);
        outs.push_back(r.grads.back());
    }
    realize_or_throw(full_, outs);
    r.loss = type_ == Halide::Float(64) ? (double)Buffer<double>(loss)() : (double)Buffer<float>(loss)();
    return r;
}

double JitTrainingStep::loss(const Buffer<> &image, const Buffer<> &lt, const std::vector<Buffer<>> &params) {
    bind(image, lt, params);
    Buffer<> loss(type_, std::vector<int>{});
    realize_or_throw(loss_only_, {loss});
    return type_ == Halide::Float(64) ? (double)Buffer<double>(loss)() : (double)Buffer<float>(loss)();
}

}  // namespace segtile
