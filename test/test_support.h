// Helpers shared by the test suites: random buffers and parameters, and
// central finite differences of the reference loss.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "Halide.h"
#include "generators/training_step.h"
#include "spec/model.h"

namespace segtile::testing {

inline Halide::Buffer<double> random_buffer(std::vector<int> dims, std::mt19937 &rng, double scale = 1.0) {
    Halide::Buffer<double> b(dims);
    std::normal_distribution<double> nd(0.0, scale);
    b.for_each_value([&](double &v) { v = nd(rng); });
    return b;
}

// Parameters in m.params() order: weights ~ N(0, 1/fan_in), biases small,
// batch-norm running variance positive.
inline std::vector<Halide::Buffer<>> random_params(const Model &m, std::mt19937 &rng) {
    std::vector<Halide::Buffer<>> ps;
    for (const auto &s : m.params()) {
        std::vector<int> dims(s.dims.begin(), s.dims.end());
        double fan_in = 1;
        for (size_t d = 0; d + 1 < s.dims.size(); d++) fan_in *= (double)s.dims[d];
        Halide::Buffer<double> b = random_buffer(dims, rng, s.role == ParamRole::Weight && s.dims.size() > 1
                                                                ? 1.0 / std::sqrt(fan_in)
                                                                : 0.3);
        if (s.role == ParamRole::RunningVar) b.for_each_value([](double &v) { v = 0.5 + std::abs(v); });
        if (s.role == ParamRole::Weight && s.dims.size() == 1) b.for_each_value([](double &v) { v += 1.0; });
        ps.push_back(b);
    }
    return ps;
}

// Labels (softmax) or a random target shaped like the prediction (mse).
inline Halide::Buffer<> random_labels_or_target(const Model &m, int width, int height, int batch, std::mt19937 &rng) {
    if (m.loss.kind == LossKind::SoftmaxCrossEntropy) {
        Halide::Buffer<int> l(batch);
        std::uniform_int_distribution<int> u(0, m.output_channels() - 1);
        l.for_each_value([&](int &v) { v = u(rng); });
        return l;
    }
    const TensorShape s = m.shapes(width, height)[m.loss.input_id];
    return random_buffer({(int)s.width, (int)s.height, (int)s.channels, batch}, rng);
}

// Central difference of the loss w.r.t. element `index` (flat) of `target`.
inline double central_difference(JitTrainingStep &step, const Halide::Buffer<> &image, const Halide::Buffer<> &lt,
                                 const std::vector<Halide::Buffer<>> &params, Halide::Buffer<double> target,
                                 size_t index, double h = 1e-5) {
    double *v = target.begin() + index;
    const double old = *v;
    *v = old + h;
    const double lp = step.loss(image, lt, params);
    *v = old - h;
    const double lm = step.loss(image, lt, params);
    *v = old;
    return (lp - lm) / (2 * h);
}

// |a - b| / max(|a|, |b|, floor): relative error with an absolute floor for
// values near zero, where float64 central differences lose digits.
inline double rel_error(double a, double b, double floor = 1e-6) {
    return std::abs(a - b) / std::max({std::abs(a), std::abs(b), floor});
}

// max |a - b| / max |b| over n elements: the relative error of a whole tensor.
template <typename A, typename B>
double rel_diff(const A *a, const B *b, int64_t n) {
    double ref = 0, diff = 0;
    for (int64_t k = 0; k < n; k++) {
        ref = std::max(ref, std::abs((double)b[k]));
        diff = std::max(diff, std::abs((double)a[k] - (double)b[k]));
    }
    return ref > 0 ? diff / ref : INFINITY;
}

}  // namespace segtile::testing
