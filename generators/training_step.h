// JitTrainingStep: the untiled reference training step of any model
// (forward, loss, gradients of every trainable parameter and of the image,
// all from propagate_adjoints), JIT-compiled: the head kernel of the
// untiled layout. Tests compare everything else against it.
#pragma once

#include <memory>
#include <vector>

#include "Halide.h"
#include "generators/jit_kernel.h"
#include "spec/model.h"

namespace segtile {

class JitTrainingStep {
public:
    JitTrainingStep(const Model &m, Halide::Type t, Schedule schedule = Schedule::Cpu);

    struct Result {
        double loss = 0;
        Halide::Buffer<> prediction, grad_image;
        std::vector<Halide::Buffer<>> grads;  // per m.params(); undefined for buffers (running statistics)
    };
    // image (W, H, C, N); labels (N) int32 or a target shaped like the
    // prediction; params in m.params() order.
    Result run(const Halide::Buffer<> &image, const Halide::Buffer<> &labels_or_target,
               const std::vector<Halide::Buffer<>> &params);
    // The loss alone (a forward-only pipeline), for finite differences.
    double loss(const Halide::Buffer<> &image, const Halide::Buffer<> &labels_or_target,
                const std::vector<Halide::Buffer<>> &params);

private:
    void bind_inputs(ArgList &args, const Halide::Buffer<> &image, const Halide::Buffer<> &lt,
                     const std::vector<Halide::Buffer<>> &params);
    Model model_;
    Halide::Type type_;
    Schedule schedule_;
    std::unique_ptr<JitKernel> full_, loss_only_;  // loss_only_: built by the first loss()
};

}  // namespace segtile
