#include "autoscheduler/rate_fit.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace segtile {

namespace {

constexpr int kTerms = 5;  // 1/flops rate, 1/elements rate, 1/bytes rate, seconds per call, 1/weights rate

std::vector<double> features(const TimeSample &s) {
    return {s.flops, s.elements, s.moved_bytes, s.calls, s.weight_elements};
}

// Least squares of sum_i (x . a_i / t_i - 1)^2 over the terms in `used`
// (the others 0), by the normal equations; false when singular.
bool solve(const std::vector<TimeSample> &samples, unsigned used, std::vector<double> &x) {
    std::vector<int> idx;
    for (int k = 0; k < kTerms; k++)
        if (used & (1u << k)) idx.push_back(k);
    const size_t n = idx.size();
    // Columns scaled to unit size first: FLOPs and calls differ by 1e12.
    std::vector<double> scale(n, 0);
    for (const auto &s : samples) {
        const auto f = features(s);
        for (size_t a = 0; a < n; a++) scale[a] = std::max(scale[a], f[idx[a]] / s.seconds);
    }
    for (double v : scale)
        if (v <= 0) return false;
    std::vector<std::vector<double>> A(n, std::vector<double>(n + 1, 0));
    for (const auto &s : samples) {
        const auto f = features(s);
        for (size_t a = 0; a < n; a++) {
            const double fa = f[idx[a]] / s.seconds / scale[a];
            for (size_t b = 0; b < n; b++) A[a][b] += fa * f[idx[b]] / s.seconds / scale[b];
            A[a][n] += fa;
        }
    }
    for (size_t c = 0; c < n; c++) {  // Gaussian elimination, partial pivoting
        size_t p = c;
        for (size_t r = c + 1; r < n; r++)
            if (std::abs(A[r][c]) > std::abs(A[p][c])) p = r;
        if (std::abs(A[p][c]) < 1e-12) return false;
        std::swap(A[p], A[c]);
        for (size_t r = 0; r < n; r++) {
            if (r == c) continue;
            const double f = A[r][c] / A[c][c];
            for (size_t k = c; k <= n; k++) A[r][k] -= f * A[c][k];
        }
    }
    x.assign(kTerms, 0);
    for (size_t a = 0; a < n; a++) x[idx[a]] = A[a][n] / A[a][a] / scale[a];
    return true;
}

TimeRates to_rates(const std::vector<double> &x) {
    auto rate = [](double inv) { return inv > 0 ? std::min(kUnusedRate, 1 / inv) : kUnusedRate; };
    TimeRates r;
    r.flops_per_second = rate(x[0]);
    r.elements_per_second = rate(x[1]);
    r.bytes_per_second = rate(x[2]);
    r.seconds_per_tile = x[3];
    r.weights_per_second = rate(x[4]);
    return r;
}

}  // namespace

TimeSample priced(const SegmentPlan &s) {
    TimeSample t{s.flops, s.elements, s.moved_bytes, (double)s.calls, 0};
    t.weight_elements = s.weight_elements;
    return t;
}

TimeRates fit_time_rates(const std::vector<TimeSample> &samples) {
    std::vector<TimeSample> usable;
    for (const auto &s : samples)
        if (s.seconds > 0) usable.push_back(s);
    if (usable.empty()) throw std::invalid_argument("fit_time_rates: no measured time to fit");
    // Non-negative least squares by trying every subset of terms (five
    // terms: 32 solves) and keeping the best with no negative inverse.
    double best = std::numeric_limits<double>::infinity();
    std::vector<double> best_x;
    for (unsigned used = 1; used < (1u << kTerms); used++) {
        std::vector<double> x;
        if (!solve(usable, used, x)) continue;
        bool negative = false;
        for (double v : x) negative = negative || v < 0;
        if (negative) continue;
        const TimeRates r = to_rates(x);
        double err = 0;
        for (const auto &s : usable) err += std::pow(predicted_seconds(r, s) / s.seconds - 1, 2);
        if (err < best) {
            best = err;
            best_x = x;
        }
    }
    if (best_x.empty()) throw std::invalid_argument("fit_time_rates: the samples fit no non-negative rates");
    return to_rates(best_x);
}

}  // namespace segtile
