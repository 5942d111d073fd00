// Whole-model gradients of the four shipped models (vgg16, darknet19,
// resnet18, unet) at small image sizes against central finite differences of
// the loss, in float64: a random sample of elements of every trainable
// parameter and of the image, plus each tensor's largest-gradient element.
//
// The reference training step is JIT-compiled per model; compile and run
// times are printed (a whole VGG16 training pipeline takes a while to
// compile on a small machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "test/test_support.h"

namespace segtile {
namespace {

using Halide::Buffer;
using testing::central_difference;
using testing::rel_error;

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct GradientCase {
    const char *model;
    int width, height, batch;
    int samples_per_tensor;  // random elements per parameter tensor (plus its largest-gradient one)
    int image_samples;       // random image elements (plus the largest-gradient one)
};

std::ostream &operator<<(std::ostream &os, const GradientCase &c) {
    return os << c.model << " " << c.width << "x" << c.height << " batch " << c.batch;
}

// Indices to check in a gradient tensor: `k` distinct random ones and the
// one of largest magnitude (where finite differences are most informative).
std::vector<size_t> sample_indices(const Buffer<double> &g, int k, std::mt19937 &rng) {
    const size_t n = g.number_of_elements();
    std::set<size_t> picked;
    const double *d = g.data();
    picked.insert((size_t)(std::max_element(d, d + n, [](double a, double b) { return std::abs(a) < std::abs(b); }) - d));
    std::uniform_int_distribution<size_t> u(0, n - 1);
    while ((int)picked.size() < std::min<size_t>(k + 1, n)) picked.insert(u(rng));
    return {picked.begin(), picked.end()};
}

bool all_zero(const Buffer<double> &g) {
    const double *d = g.data();
    return std::all_of(d, d + g.number_of_elements(), [](double v) { return v == 0.0; });
}

bool all_finite(const Buffer<double> &g) {
    const double *d = g.data();
    return std::all_of(d, d + g.number_of_elements(), [](double v) { return std::isfinite(v); });
}

// Central differences at h = 1e-5 in float64 carry absolute noise of a few
// ulps of the loss divided by 2h (seen: 4e-11 on VGG16 at loss 0.43, 2e-10 on
// ResNet-18 at loss 3.4). Below this floor the 1e-6 relative bound becomes an
// absolute one of 3e-10 * max(1, |loss|), so elements with tiny gradients
// (1e-6..1e-4, common in VGG16's middle layers) are checked to what the
// differences can resolve; a wrong gradient is off by far more.
double fd_floor(double loss) { return 3e-4 * std::max(1.0, std::abs(loss)); }

class ModelGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(ModelGradient, MatchesFiniteDifferences) {
    const GradientCase c = GetParam();
    const Model m = load_model(c.model);
    std::mt19937 rng(20220402);

    const auto t_build = std::chrono::steady_clock::now();
    std::unique_ptr<JitTrainingStep> step;
    try {
        // The reference schedule: whole models compile several times faster with it.
        step = std::make_unique<JitTrainingStep>(m, Halide::Float(64), Schedule::Reference);
    } catch (const Halide::Error &e) {
        FAIL() << "building the training step of " << c.model << ": " << e.what();
    }
    const double build_s = seconds_since(t_build);  // builds and JIT-compiles the step

    const auto params = testing::random_params(m, rng);
    const Buffer<double> image = testing::random_buffer({c.width, c.height, m.input_channels, c.batch}, rng);
    const Buffer<> labels = testing::random_labels_or_target(m, c.width, c.height, c.batch, rng);

    const auto t_run = std::chrono::steady_clock::now();
    const JitTrainingStep::Result r = step->run(image, labels, params);
    const double run_s = seconds_since(t_run);

    ASSERT_TRUE(std::isfinite(r.loss)) << c;
    EXPECT_GT(r.loss, 0.0) << c;
    ASSERT_TRUE(r.grad_image.defined());
    EXPECT_TRUE(all_finite(Buffer<double>(r.grad_image))) << c;
    EXPECT_FALSE(all_zero(Buffer<double>(r.grad_image))) << c << ": image gradient is all zero";

    const auto t_loss = std::chrono::steady_clock::now();
    const double loss_again = step->loss(image, labels, params);
    const double loss_s = seconds_since(t_loss);  // includes compiling the loss-only forward
    EXPECT_LE(rel_error(loss_again, r.loss, 1e-12), 1e-12) << c << ": loss-only forward disagrees with the step";

    // Which tensors to check: every trainable parameter, then the image.
    struct Target {
        std::string name;
        Buffer<double> value, grad;
        int samples;
    };
    std::vector<Target> targets;
    const auto specs = m.params();
    ASSERT_EQ(r.grads.size(), specs.size());
    for (size_t i = 0; i < specs.size(); i++) {
        if (!specs[i].trainable) {
            EXPECT_FALSE(r.grads[i].defined()) << specs[i].name << " is a buffer and gets no gradient";
            continue;
        }
        ASSERT_TRUE(r.grads[i].defined()) << specs[i].name;
        const Buffer<double> g(r.grads[i]);
        EXPECT_TRUE(all_finite(g)) << c << ": " << specs[i].name;
        EXPECT_FALSE(all_zero(g)) << c << ": gradient of " << specs[i].name << " is all zero";
        targets.push_back({specs[i].name, Buffer<double>(params[i]), g, c.samples_per_tensor});
    }
    targets.push_back({"image", image, Buffer<double>(r.grad_image), c.image_samples});

    const auto t_fd = std::chrono::steady_clock::now();
    int checked = 0;
    double worst = 0;
    std::string worst_at;
    for (const Target &t : targets) {
        for (size_t idx : sample_indices(t.grad, t.samples, rng)) {
            const double analytic = t.grad.data()[idx];
            const double numeric = central_difference(*step, image, labels, params, t.value, idx);
            const double err = rel_error(analytic, numeric, fd_floor(r.loss));
            EXPECT_LE(err, 1e-6) << c << ": d loss / d " << t.name << "[" << idx << "]: autodiff " << analytic
                                 << ", finite difference " << numeric;
            if (err > worst) {
                worst = err;
                worst_at = t.name + "[" + std::to_string(idx) + "]";
            }
            checked++;
        }
    }
    const double fd_s = seconds_since(t_fd);
    std::cout << "[ timing   ] " << c << ": build+compile " << build_s << " s, first step " << run_s
              << " s, first loss (with its compile) " << loss_s << " s, " << checked << " finite differences in " << fd_s
              << " s (" << fd_s / (2.0 * std::max(checked, 1)) << " s per loss); loss " << r.loss
              << ", worst relative error " << worst << " at " << worst_at << std::endl;
}

// The smallest images each network takes (VGG16 and Darknet19: five 2x2
// pools; U-Net: two pools, so multiples of 4), non-square where that costs
// little. ResNet-18 takes any size; 40x24 leaves 2x1 at layer4.
INSTANTIATE_TEST_SUITE_P(ShippedModels, ModelGradient,
                         ::testing::Values(GradientCase{"vgg16", 32, 32, 1, 1, 3},
                                           GradientCase{"darknet19", 32, 48, 1, 1, 3},
                                           GradientCase{"resnet18", 40, 24, 2, 2, 3},
                                           GradientCase{"unet", 12, 8, 2, 3, 4}),
                         [](const ::testing::TestParamInfo<GradientCase> &info) {
                             return std::string(info.param.model);
                         });

}  // namespace
}  // namespace segtile
