#include "generators/training_step.h"

namespace segtile {

using Halide::Buffer;

JitTrainingStep::JitTrainingStep(const Model &m, Halide::Type t, Schedule schedule)
    : model_(m), type_(t), schedule_(schedule) {
    full_ = std::make_unique<JitKernel>(m, untiled_layout(m), KernelKind::Head, 0, t, nullptr, std::set<std::string>{},
                                        schedule);
}

void JitTrainingStep::bind_inputs(ArgList &args, const Buffer<> &image, const Buffer<> &lt,
                                  const std::vector<Buffer<>> &params) {
    const auto specs = model_.params();
    if (params.size() != specs.size())
        throw std::invalid_argument("expected " + std::to_string(specs.size()) + " parameter buffers");
    args.buffer("in_image", const_cast<halide_buffer_t *>(image.raw_buffer()));
    args.buffer(loss_target_name(model_),
                const_cast<halide_buffer_t *>(lt.raw_buffer()));
    for (size_t i = 0; i < specs.size(); i++)
        args.buffer(c_identifier(specs[i].name), const_cast<halide_buffer_t *>(params[i].raw_buffer()));
}

JitTrainingStep::Result JitTrainingStep::run(const Buffer<> &image, const Buffer<> &lt,
                                             const std::vector<Buffer<>> &params) {
    const int W = image.dim(0).extent(), H = image.dim(1).extent(), C = image.dim(2).extent(),
              N = image.dim(3).extent();
    const TensorShape ps = model_.shapes(W, H)[model_.loss.input_id];
    Result r;
    Buffer<> loss(type_, std::vector<int>{});
    r.prediction = Buffer<>(type_, {(int)ps.width, (int)ps.height, (int)ps.channels, N});
    r.grad_image = Buffer<>(type_, {W, H, C, N});
    ArgList args;
    bind_inputs(args, image, lt, params);
    args.buffer("loss", loss.raw_buffer());
    args.buffer("prediction", r.prediction.raw_buffer());
    args.buffer("grad_in_image", r.grad_image.raw_buffer());
    const auto specs = model_.params();
    r.grads.resize(specs.size());
    for (size_t i = 0; i < specs.size(); i++) {
        if (!specs[i].trainable) continue;
        r.grads[i] = Buffer<>(type_, std::vector<int>(specs[i].dims.begin(), specs[i].dims.end()));
        args.buffer("grad_" + c_identifier(specs[i].name), r.grads[i].raw_buffer());
    }
    full_->call(args.build(full_->signature()));
    r.loss = type_ == Halide::Float(64) ? Buffer<double>(loss)() : (double)Buffer<float>(loss)();
    return r;
}

double JitTrainingStep::loss(const Buffer<> &image, const Buffer<> &lt, const std::vector<Buffer<>> &params) {
    // Compiled on first use: most callers never ask (a whole model's
    // forward takes a while to compile).
    if (!loss_only_)
        loss_only_ = std::make_unique<JitKernel>(model_, untiled_layout(model_), KernelKind::Head, 0, type_, nullptr,
                                                 std::set<std::string>{"loss"}, schedule_);
    Buffer<> loss(type_, std::vector<int>{});
    ArgList args;
    bind_inputs(args, image, lt, params);
    args.buffer("loss", loss.raw_buffer());
    loss_only_->call(args.build(loss_only_->signature()));
    return type_ == Halide::Float(64) ? Buffer<double>(loss)() : (double)Buffer<float>(loss)();
}

}  // namespace segtile
