// Fitting the time model's rates (TimeRates) to measured times: where the
// rates cannot be measured by timing small JIT steps (a GPU, measured by
// the GPU check on a machine without Halide), measured kernel times of
// real plans are fitted instead (bench/gpu/fit_device_rates.cpp).
#pragma once

#include <vector>

#include "autoscheduler/planner.h"

namespace segtile {

// One measured time and what the time model prices in it (SegmentPlan's
// flops, elements, moved_bytes, calls; sums of them for a whole step).
struct TimeSample {
    double flops = 0, elements = 0, moved_bytes = 0, calls = 0;
    double seconds = 0;  // measured
    double weight_elements = 0;
};

// A segment's priced quantities (seconds 0).
TimeSample priced(const SegmentPlan &s);

// The rates that minimise the samples' squared relative errors, each
// inverse rate non-negative: a term the samples do not need (inverse 0)
// gets kUnusedRate. Needs at least one sample with seconds > 0.
TimeRates fit_time_rates(const std::vector<TimeSample> &samples);

// What `r` predicts for a sample.
double predicted_seconds(const TimeRates &r, const TimeSample &s);

}  // namespace segtile
