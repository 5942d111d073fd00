// StepKernel: one compiled untiled training step (forward, loss, backward)
// of a model: the head kernel of the untiled layout, from an AOT library
// (aot_step) or JIT-compiled (a KernelStep over a JitKernel).
#pragma once

#include <memory>

#include "runtime/kernel.h"
#include "runtime/parameters.h"
#include "runtime/tensor.h"
#include "spec/model.h"

namespace segtile {

class StepKernel {
public:
    virtual ~StepKernel() = default;
    // image: (W, H, C, N); labels_or_target: (N) int32 or (W', H', K, N) float.
    // Writes params.grads (overwritten, not accumulated), prediction (the
    // loss layer's output, (W', H', K, N)) and grad_image (like image),
    // which is given exactly when image_gradient() says the step makes it.
    // Returns the loss (mean over the batch).
    virtual float run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params,
                      Tensor &prediction, Tensor *grad_image) = 0;
    // Whether the step computes the image's gradient (kernels built with
    // SegmentLayout::image_gradient); training needs only the parameters'.
    virtual bool image_gradient() const = 0;
};

// Runs any Kernel whose signature is the untiled head's.
class KernelStep : public StepKernel {
public:
    KernelStep(const Model &m, std::unique_ptr<Kernel> kernel) : model_(m), kernel_(std::move(kernel)) {}
    float run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params, Tensor &prediction,
              Tensor *grad_image) override;
    bool image_gradient() const override { return has_arg(kernel_->signature(), "grad_in_image"); }

private:
    Model model_;
    std::unique_ptr<Kernel> kernel_;
};

// The untiled training step from a library built by segtile_add_training_step.
std::unique_ptr<StepKernel> aot_step(const Model &m, AotKernel::ArgvFn argv, AotKernel::MetadataFn metadata,
                                     MemoryLedger *ledger);

}  // namespace segtile
