// The untiled reference training step of any model: forward, loss, and the
// gradients of every trainable parameter and of the image, all from
// Halide's propagate_adjoints. JIT-run in tests, AOT-compiled by
// training_step_generator.cpp.
#pragma once

#include <vector>

#include "Halide.h"
#include "spec/model.h"

namespace segtile {

struct StepInputs {
    Halide::Func image;                // (x, y, c, n)
    Halide::Expr width, height, batch;
    Halide::Func labels;               // (n) int32; softmax loss
    Halide::Func target;               // (x, y, c, n) like the prediction; mse loss
    std::vector<Halide::Func> params;  // one per m.params(), Halide dims order
};

struct StepOutputs {
    Halide::Func loss;                // ()
    Halide::Func prediction;          // (x, y, c, n): the loss layer's output (logits at x = y = 0)
    Halide::Func grad_image;          // (x, y, c, n)
    std::vector<Halide::Func> grads;  // one per m.params(); undefined for buffers (running statistics)
    std::vector<Halide::Func> forward_funcs;  // every Func of the forward, for scheduling
};

StepOutputs build_training_step(const Model &m, const StepInputs &in, Halide::Type t);

// Loss-only forward (no autodiff): cheap to compile, used for finite differences.
Halide::Func build_loss(const Model &m, const StepInputs &in, Halide::Type t);

// The reference schedule: every Func reachable from `outputs` computed at
// root. Autodiff pipelines left inlined recompute exponentially.
void schedule_reference(const std::vector<Halide::Func> &outputs);

// JIT wrapper used by tests and tools that link libHalide.
class JitTrainingStep {
public:
    JitTrainingStep(const Model &m, Halide::Type t);

    struct Result {
        double loss = 0;
        Halide::Buffer<> prediction, grad_image;
        std::vector<Halide::Buffer<>> grads;  // undefined for buffers
    };
    // image (W, H, C, N); labels (N) int32 or target shaped like the prediction;
    // params in m.params() order.
    Result run(const Halide::Buffer<> &image, const Halide::Buffer<> &labels_or_target,
               const std::vector<Halide::Buffer<>> &params);
    double loss(const Halide::Buffer<> &image, const Halide::Buffer<> &labels_or_target,
                const std::vector<Halide::Buffer<>> &params);

private:
    void bind(const Halide::Buffer<> &image, const Halide::Buffer<> &lt, const std::vector<Halide::Buffer<>> &params);
    Model model_;
    Halide::Type type_;
    Halide::ImageParam image_, labels_;
    std::vector<Halide::ImageParam> params_;
    StepOutputs step_;
    Halide::Pipeline full_, loss_only_;
    Halide::Func loss_func_;
};

}  // namespace segtile
