// A StepKernel JIT-compiled from any model (for models without an AOT library).
#pragma once

#include "generators/training_step.h"
#include "runtime/step_kernel.h"

namespace segtile {

class JitStepKernel : public StepKernel {
public:
    explicit JitStepKernel(const Model &m) : step_(m, Halide::Float(32)), specs_(m.params()) {}
    float run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params, Tensor &prediction,
              Tensor &grad_image) override;

private:
    JitTrainingStep step_;
    std::vector<ParamSpec> specs_;
};

}  // namespace segtile
