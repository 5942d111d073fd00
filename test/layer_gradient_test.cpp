// Gradients of every layer kind and both losses (Halide autodiff through
// JitTrainingStep) against central finite differences of the loss, in
// float64, relative error <= 1e-6, on random small shapes.
//
// Each configuration is a tiny model (usually input -> layer -> loss); every
// trainable parameter and the image are checked at a sample of elements that
// always includes the first and last element (image corners, border taps).
//
// The finite difference is the fourth-order central stencil
//   (8 (L(v+h) - L(v-h)) - (L(v+2h) - L(v-2h))) / 12h,  h = 1e-3,
// whose truncation error (h^4) and rounding error (eps |L| / h) both stay
// near 1e-13, so a 1e-6 relative bound holds even for small gradients. (The
// second-order stencil with h = 1e-5 rounds to ~1e-11 absolute, which fails
// 1e-6 relative on elements whose gradient happens to be near 1e-5.)
// Piecewise-linear layers (relu, leaky_relu, max_pool) get images whose
// values keep every perturbation away from a kink: |x| >= 0.1 for the
// activations, values spaced 0.05 apart for max_pool (and for the cases
// generated from the layer-kind table, whichever kind they are).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "Halide.h"
#include "generators/training_step.h"
#include "spec/builder.h"
#include "spec/model.h"
#include "test/layer_cases.h"
#include "test/test_support.h"

namespace segtile {
namespace {

using Halide::Buffer;
using LK = LossKind;

constexpr double kTolerance = 1e-6;
constexpr double kStep = 1e-3;
constexpr size_t kSamplesPerTensor = 24;

enum class ImageKind {
    Normal,        // N(0, 1)
    AwayFromZero,  // |x| >= 0.1: no relu kink within 2h
    Distinct,      // a permutation of values 0.05 apart, none within 0.025 of 0: no tie or kink within 4h
};

struct Case {
    std::string name;
    std::function<Model()> model;
    std::vector<std::array<int, 3>> sizes;  // {width, height, batch}, one compiled kernel
    ImageKind image = ImageKind::Normal;
};

std::ostream &operator<<(std::ostream &os, const Case &c) { return os << c.name; }

using segtile::testing::net;

Case conv_case(const std::string &name, int cin, int cout, int k, int s, int p, int d, int g, bool bias,
               std::vector<std::array<int, 3>> sizes) {
    return {name,
            [=] { return segtile::testing::conv_model(cin, cout, k, s, p, d, g, bias); },
            sizes};
}

Case pool_case(const std::string &name, bool is_max, int cin, int k, int s, int p,
               std::vector<std::array<int, 3>> sizes) {
    return {name,
            [=] { return segtile::testing::pool_model(is_max, cin, k, s, p); },
            sizes, is_max ? ImageKind::Distinct : ImageKind::Normal};
}

// Random conv configurations from a fixed seed, on top of the hand-picked ones.
std::vector<Case> random_conv_cases(int count, unsigned seed) {
    std::vector<Case> out;
    for (const auto &c : segtile::testing::random_conv_configs(count, seed, 4, 2, 4))
        out.push_back(conv_case(c.name, c.cin, c.cout, c.k, c.s, c.p, c.d, c.g, c.bias, c.sizes));
    return out;
}

std::vector<Case> all_cases() {
    std::vector<Case> c = {
        conv_case("conv_k3_s1_p1", 3, 2, 3, 1, 1, 1, 1, true, {{5, 4, 2}, {3, 7, 1}}),
        conv_case("conv_k3_s2_p0_nobias", 2, 3, 3, 2, 0, 1, 1, false, {{7, 5, 1}, {6, 8, 2}}),
        conv_case("conv_k3_s1_p2_d2", 2, 2, 3, 1, 2, 2, 1, true, {{5, 3, 1}, {4, 6, 2}}),
        conv_case("conv_k4_s2_p2_g2", 4, 2, 4, 2, 2, 1, 2, true, {{7, 5, 1}, {4, 9, 2}}),
        // One output channel per group with cin/groups >= groups: Halide's autodiff summed each
        // input channel's gradient over its group before the fix in generators/layers/convolution.h.
        conv_case("conv_k1_g2_in4_out2", 4, 2, 1, 1, 0, 1, 2, true, {{5, 3, 1}, {2, 4, 2}}),
        conv_case("conv_k2_s2_p0_g1", 2, 2, 2, 2, 0, 1, 1, true, {{7, 5, 1}, {4, 6, 2}}),
        conv_case("conv_k3_s2_p1_d2_depthwise", 3, 3, 3, 2, 1, 2, 3, true, {{7, 6, 2}, {5, 9, 1}}),
        conv_case("conv_k2_s3_p1_g3", 6, 3, 2, 3, 1, 1, 3, false, {{8, 7, 1}, {5, 5, 2}}),
        {"relu", [] { return net(3).relu("act").loss(LK::MeanSquaredError).build(); }, {{5, 4, 2}, {3, 7, 1}},
         ImageKind::AwayFromZero},
        {"leaky_relu",
         [] { return net(2).leaky_relu("act", 0.2).loss(LK::MeanSquaredError).build(); },
         {{5, 3, 2}, {4, 1, 1}},
         ImageKind::AwayFromZero},
        {"sigmoid", [] { return net(3).sigmoid("act").loss(LK::MeanSquaredError).build(); }, {{5, 3, 1}, {4, 5, 2}}},
        pool_case("max_pool_k2", true, 2, 2, 2, 0, {{7, 5, 2}, {4, 6, 1}}),
        pool_case("max_pool_k3_s2_p1", true, 2, 3, 2, 1, {{7, 5, 1}, {6, 9, 2}}),
        pool_case("max_pool_k4_s3_p2", true, 2, 4, 3, 2, {{8, 7, 1}, {5, 4, 2}}),
        pool_case("avg_pool_k2", false, 2, 2, 2, 0, {{7, 5, 2}, {4, 6, 1}}),
        pool_case("avg_pool_k3_s2_p1", false, 3, 3, 2, 1, {{7, 9, 1}, {6, 5, 2}}),
        pool_case("avg_pool_k5_s3_p2", false, 2, 5, 3, 2, {{9, 7, 1}, {5, 11, 2}}),
        {"batch_norm",
         [] { return net(3).batch_norm("bn", 0.1).loss(LK::MeanSquaredError).build(); },
         {{5, 3, 2}, {4, 7, 1}}},
        {"upsample_x2", [] { return net(2).upsample("up", 2).loss(LK::MeanSquaredError).build(); },
         {{3, 5, 2}, {4, 2, 1}}},
        {"upsample_x3", [] { return net(2).upsample("up", 3).loss(LK::MeanSquaredError).build(); },
         {{3, 2, 1}, {2, 3, 2}}},
        {"concat_conv_input_conv",
         [] {
             return net(3)
                 .conv2d("a", 2, 3).padding(1).inputs({"input"})
                 .conv2d("b", 1, 1).inputs({"input"})
                 .concat("cat", {"a", "input", "b"})
                 .loss(LK::MeanSquaredError)
                 .build();
         },
         {{5, 4, 2}, {3, 7, 1}}},
        {"add_input_conv_conv",
         [] {
             return net(2)
                 .conv2d("a", 2, 3).padding(1).inputs({"input"})
                 .conv2d("b", 2, 1).bias(false).inputs({"input"})
                 .add("sum", {"input", "a", "b"})
                 .loss(LK::MeanSquaredError)
                 .build();
         },
         {{5, 4, 2}, {3, 7, 1}}},
        {"global_avg_pool", [] { return net(3).global_avg_pool("gap").loss(LK::MeanSquaredError).build(); },
         {{5, 3, 2}, {4, 7, 3}}},
        {"gap_softmax_ce", [] { return net(4).global_avg_pool("gap").loss(LK::SoftmaxCrossEntropy).build(); },
         {{5, 3, 3}, {2, 7, 1}}},
        // flatten -> dense: 5x3 and 3x5 have the same feature count, in another order.
        {"flatten_dense_softmax_ce",
         [] {
             return net(2).flatten("flat").dense("fc", 4).in_features(2 * 5 * 3).loss(LK::SoftmaxCrossEntropy).build();
         },
         {{5, 3, 3}, {3, 5, 1}}},
        {"flatten_dense_mse",
         [] { return net(2).flatten("flat").dense("fc", 3).in_features(2 * 2 * 3).loss(LK::MeanSquaredError).build(); },
         {{2, 3, 2}, {3, 2, 1}}},
        {"gap_dense_nobias_mse",
         [] { return net(3).global_avg_pool("gap").dense("fc", 2).bias(false).loss(LK::MeanSquaredError).build(); },
         {{5, 4, 2}, {3, 7, 1}}},
        // A smooth chain through most kinds at once.
        {"chain_conv_bn_sigmoid_avgpool_up_add_cat_gap_dense_ce",
         [] {
             return net(2)
                 .conv2d("conv", 3, 3).stride(1).padding(1)
                 .batch_norm("bn")
                 .sigmoid("sig")
                 .avg_pool("pool", 2)
                 .upsample("up", 2)
                 .add("res", {"up", "conv"})
                 .concat("cat", {"res", "input"})
                 .global_avg_pool("gap")
                 .dense("fc", 3)
                 .loss(LK::SoftmaxCrossEntropy)
                 .build();
         },
         {{6, 4, 2}, {4, 2, 1}}},
    };
    for (auto &r : random_conv_cases(3, 777)) c.push_back(r);
    // One case per local kind, from its row's example fields (test/layer_cases.h).
    for (const LayerKindInfo &k : segtile::testing::local_kinds())
        c.push_back({std::string("table_") + k.name, [k] { return segtile::testing::example_model(k, false); },
                     {{5, 4, 2}, {4, 6, 1}}, ImageKind::Distinct});
    return c;
}

Buffer<double> make_image(ImageKind kind, int W, int H, int C, int N, std::mt19937 &rng) {
    Buffer<double> b = testing::random_buffer({W, H, C, N}, rng);
    if (kind == ImageKind::AwayFromZero) {
        b.for_each_value([](double &v) { v = v < 0 ? v - 0.1 : v + 0.1; });
    } else if (kind == ImageKind::Distinct) {
        std::vector<int> order((size_t)W * H * C * N);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        const double mid = order.size() / 2.0;
        double *p = b.begin();
        for (int k : order) *p++ = (k - mid + 0.5) * 0.05;
    }
    return b;
}

// Fourth-order central difference of the loss w.r.t. element `index` of `target`.
double central_difference_4(JitTrainingStep &step, const Buffer<> &image, const Buffer<> &lt,
                            const std::vector<Buffer<>> &params, Buffer<double> target, size_t index,
                            double h = kStep) {
    double *v = target.begin() + index;
    const double old = *v;
    auto at = [&](double d) {
        *v = old + d;
        return step.loss(image, lt, params);
    };
    const double d1 = at(h) - at(-h), d2 = at(2 * h) - at(-2 * h);
    *v = old;
    return (8 * d1 - d2) / (12 * h);
}

// Flat indices to check: all of a small tensor, else first, last and a random sample.
std::vector<size_t> sample_indices(size_t numel, std::mt19937 &rng) {
    std::vector<size_t> idx(numel);
    std::iota(idx.begin(), idx.end(), 0);
    if (numel <= kSamplesPerTensor) return idx;
    std::shuffle(idx.begin() + 1, idx.end() - 1, rng);
    idx.resize(kSamplesPerTensor - 1);
    idx.push_back(numel - 1);
    return idx;
}

class LayerGradient : public ::testing::TestWithParam<Case> {};

TEST_P(LayerGradient, MatchesFiniteDifferences) {
    const Case &cs = GetParam();
    const Model m = cs.model();
    const auto specs = m.params();
    uint32_t seed = 2166136261u;  // FNV-1a of the case name: a fixed seed per case
    for (char ch : cs.name) seed = (seed ^ (uint8_t)ch) * 16777619u;
    std::mt19937 rng(seed);

    std::unique_ptr<JitTrainingStep> step;
    try {
        step = std::make_unique<JitTrainingStep>(m, Halide::Float(64));
    } catch (const Halide::Error &e) {
        FAIL() << "Halide error building " << cs.name << ": " << e.what();
    }
    ASSERT_FALSE(cs.sizes.empty());
    for (const auto &[W, H, N] : cs.sizes) {
        const std::string where = cs.name + " at image " + std::to_string(W) + "x" + std::to_string(H) + " batch " +
                                  std::to_string(N);
        SCOPED_TRACE(where);
        Buffer<> image = make_image(cs.image, W, H, m.input_channels, N, rng);
        std::vector<Buffer<>> params = testing::random_params(m, rng);
        Buffer<> lt = testing::random_labels_or_target(m, W, H, N, rng);

        JitTrainingStep::Result r;
        try {
            r = step->run(image, lt, params);
        } catch (const Halide::Error &e) {
            FAIL() << "Halide error: " << e.what();
        }
        // The loss-only pipeline (used for the differences) agrees with the full step.
        ASSERT_NEAR(step->loss(image, lt, params), r.loss, 1e-13 * std::max(1.0, std::abs(r.loss)));
        ASSERT_EQ(r.grads.size(), specs.size());

        // (name, value buffer, analytic gradient) for the image and every trainable parameter.
        struct Checked {
            std::string name;
            Buffer<double> value, grad;
        };
        std::vector<Checked> checked = {{"image", Buffer<double>(image), Buffer<double>(r.grad_image)}};
        for (size_t i = 0; i < specs.size(); i++) {
            EXPECT_EQ(r.grads[i].defined(), specs[i].trainable) << specs[i].name;
            if (specs[i].trainable && r.grads[i].defined())
                checked.push_back({specs[i].name, Buffer<double>(params[i]), Buffer<double>(r.grads[i])});
        }
        for (auto &ck : checked) {
            ASSERT_EQ(ck.value.number_of_elements(), ck.grad.number_of_elements()) << ck.name;
            for (int d = 0; d < ck.value.dimensions(); d++)
                ASSERT_EQ(ck.value.dim(d).extent(), ck.grad.dim(d).extent()) << ck.name << " dim " << d;
            int bad = 0;
            double largest = 0, worst = 0;
            for (size_t k : sample_indices(ck.value.number_of_elements(), rng)) {
                const double fd = central_difference_4(*step, image, lt, params, ck.value, k);
                const double g = ck.grad.begin()[k];
                const double err = testing::rel_error(g, fd);
                largest = std::max(largest, std::abs(fd));
                worst = std::max(worst, err);
                if (!(err <= kTolerance) && bad++ < 5)
                    ADD_FAILURE() << "d loss / d " << ck.name << "[" << k << "]: autodiff " << g
                                  << ", finite difference " << fd << " (relative error " << err << ")";
            }
            EXPECT_EQ(bad, 0) << ck.name << ": worst relative error " << worst;
            // Guard against a vacuous pass: the loss does depend on every tensor checked.
            EXPECT_GT(largest, 1e-6) << ck.name << ": every sampled finite difference is ~0";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, LayerGradient, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

}  // namespace
}  // namespace segtile
