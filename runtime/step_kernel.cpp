#include "runtime/step_kernel.h"

#include <stdexcept>

namespace segtile {

float KernelStep::run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params, Tensor &prediction,
                      Tensor *grad_image) {
    if ((grad_image != nullptr) != image_gradient())
        throw std::invalid_argument(image_gradient() ? "this training step computes the image's gradient: pass a "
                                                       "grad_image tensor like the image"
                                                     : "this training step was built without the image's gradient "
                                                       "(SegmentLayout::image_gradient): pass no grad_image");
    float loss_value = 0;
    Halide::Runtime::Buffer<float> loss(&loss_value, std::vector<int>{});
    const auto &specs = params.specs();
    // Views must outlive the call, and stay put: reserve before taking pointers.
    std::vector<Halide::Runtime::Buffer<>> views;
    views.reserve(3 + 2 * specs.size());
    for (const Tensor *t : std::initializer_list<const Tensor *>{&image, &prediction})
        views.push_back(t->view());
    ArgList args;
    args.buffer("in_image", views[0].raw_buffer());
    args.buffer("prediction", views[1].raw_buffer());
    if (grad_image) {
        views.push_back(grad_image->view());
        args.buffer("grad_in_image", views.back().raw_buffer());
    }
    args.buffer("loss", loss.raw_buffer());
    args.buffer(loss_target_name(model_), labels_or_target);
    for (size_t i = 0; i < specs.size(); i++) {
        views.push_back(params.values[i].view());
        args.buffer(c_identifier(specs[i].name), views.back().raw_buffer());
        if (params.grads[i].defined()) {
            views.push_back(params.grads[i].view());
            args.buffer("grad_" + c_identifier(specs[i].name), views.back().raw_buffer());
        }
    }
    kernel_->call(args.build(kernel_->signature()));
    return loss_value;
}

std::unique_ptr<StepKernel> aot_step(const Model &m, AotKernel::ArgvFn argv, AotKernel::MetadataFn metadata,
                                     MemoryLedger *ledger) {
    auto sig = kernel_signature(m, untiled_layout(m), KernelKind::Head, 0);
    return std::make_unique<KernelStep>(m, std::make_unique<AotKernel>(sig, argv, metadata, ledger));
}

}  // namespace segtile
