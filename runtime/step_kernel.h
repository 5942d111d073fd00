// StepKernel: one compiled untiled training step (forward, loss, backward)
// of a model. AotStepKernel calls a library built by
// segtile_add_training_step through its generic _argv entry point and
// metadata, binding arguments by name, so the runtime needs no per-model code.
#pragma once

#include <string>
#include <vector>

#include "HalideRuntime.h"
#include "runtime/kernel_context.h"
#include "runtime/parameters.h"
#include "runtime/tensor.h"
#include "spec/model.h"

namespace segtile {

class StepKernel {
public:
    virtual ~StepKernel() = default;
    // image: (W, H, C, N); labels_or_target: (N) int32 or (W', H', K, N) float.
    // Writes params.grads (overwritten, not accumulated), prediction (the
    // loss layer's output, (W', H', K, N)) and grad_image (like image).
    // Returns the loss (mean over the batch).
    virtual float run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params,
                      Tensor &prediction, Tensor &grad_image) = 0;
};

class AotStepKernel : public StepKernel {
public:
    using ArgvFn = int (*)(void **);
    using MetadataFn = const halide_filter_metadata_t *(*)();
    AotStepKernel(const Model &m, ArgvFn argv, MetadataFn metadata, MemoryLedger *ledger);
    float run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params, Tensor &prediction,
              Tensor &grad_image) override;

private:
    Model model_;
    ArgvFn argv_;
    const halide_filter_metadata_t *md_;
    KernelContext ctx_;
};

}  // namespace segtile
