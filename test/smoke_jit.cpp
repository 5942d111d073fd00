#include <gtest/gtest.h>
#include <random>
#include "generators/training_step.h"
using namespace segtile;
TEST(Smoke, TinyFd) {
    Model m = load_model("tiny_cnn");
    try { JitTrainingStep step0(m, Halide::Float(64)); } catch (const Halide::Error &e) { printf("HALIDE: %s\n", e.what()); throw; }
    JitTrainingStep step(m, Halide::Float(64));
    std::mt19937 rng(1);
    std::normal_distribution<double> nd(0, 0.5);
    Halide::Buffer<double> img(13, 11, 1, 2);
    img.for_each_value([&](double &v) { v = nd(rng); });
    Halide::Buffer<int> labels(2); labels(0) = 0; labels(1) = 1;
    std::vector<Halide::Buffer<>> ps;
    for (auto &s : m.params()) {
        std::vector<int> d(s.dims.begin(), s.dims.end());
        Halide::Buffer<double> b(d); b.for_each_value([&](double &v) { v = nd(rng); }); ps.push_back(b);
    }
    auto r = step.run(img, labels, ps);
    printf("loss %f\n", r.loss);
    for (size_t p = 0; p < ps.size(); p++) {
        Halide::Buffer<double> w(ps[p]); Halide::Buffer<double> g(r.grads[p]);
        double *v = w.begin(); double old = v[1]; double h = 1e-5;
        v[1] = old + h; double lp = step.loss(img, labels, ps);
        v[1] = old - h; double lm = step.loss(img, labels, ps);
        v[1] = old;
        double fd = (lp - lm) / (2 * h);
        printf("%s fd %.10f ad %.10f\n", m.params()[p].name.c_str(), fd, g.begin()[1]);
        EXPECT_NEAR(fd, g.begin()[1], 1e-6 * std::max(1.0, std::abs(fd)));
    }
}
