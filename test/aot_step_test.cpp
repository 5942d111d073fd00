// The AOT-compiled training step (a library a user links, no libHalide at
// run time) computes what the JIT reference computes.
#include <gtest/gtest.h>

#include "generators/training_step.h"
#include "runtime/step_kernel.h"
#include "test/test_support.h"
#include "tiny_cnn_step.h"

using namespace segtile;

TEST(AotStep, MatchesJitReference) {
    Model m = load_model("tiny_cnn");
    MemoryLedger ledger;
    auto aot = aot_step(m, tiny_cnn_step_argv, tiny_cnn_step_metadata, &ledger);
    ParamStore params(m, &ledger);
    params.init_pytorch_default(7);
    const int W = 37, H = 29, N = 3;  // odd sizes: partial pooling windows
    Tensor image({W, H, 1, N}, &ledger), grad_image({W, H, 1, N}, &ledger), pred({1, 1, 2, N}, &ledger);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < image.numel(); i++) image.data()[i] = nd(rng);
    Halide::Runtime::Buffer<int32_t> labels(N);
    for (int n = 0; n < N; n++) labels(n) = n % 2;
    const float loss = aot->run(image, labels.raw_buffer(), params, pred, &grad_image);

    JitTrainingStep jit(m, Halide::Float(32));
    auto as_buffer = [](const Tensor &t) {
        std::vector<int> d(t.dims().begin(), t.dims().end());
        return Halide::Buffer<float>(const_cast<float *>(t.data()), d);
    };
    std::vector<Halide::Buffer<>> ps;
    for (auto &v : params.values) ps.push_back(as_buffer(v));
    Halide::Buffer<int32_t> jl(N);
    for (int n = 0; n < N; n++) jl(n) = labels(n);
    auto r = jit.run(as_buffer(image), jl, ps);
    EXPECT_NEAR(loss, r.loss, 1e-5 * std::abs(r.loss));
    for (size_t i = 0; i < params.values.size(); i++) {
        Halide::Buffer<float> g(r.grads[i]);
        const float *a = params.grads[i].data();
        double max_ref = 0, max_diff = 0;
        for (int64_t k = 0; k < params.grads[i].numel(); k++) {
            max_ref = std::max(max_ref, (double)std::abs(g.begin()[k]));
            max_diff = std::max(max_diff, (double)std::abs(g.begin()[k] - a[k]));
        }
        EXPECT_GT(max_ref, 0) << params.specs()[i].name;
        EXPECT_LE(max_diff, 1e-5 * max_ref) << params.specs()[i].name;
    }
    EXPECT_GT(ledger.halide_peak(), 0) << "kernel allocations reach the ledger through user_context";
}

TEST(AotStep, RejectsLibraryOfAnotherModel) {
    Model m = load_model("tiny_cnn");
    m.layers[0].param_prefix = "renamed";
    MemoryLedger ledger;
    EXPECT_THROW(aot_step(m, tiny_cnn_step_argv, tiny_cnn_step_metadata, &ledger), std::runtime_error);
}
