// Fitting the time model's rates (TimeRates) to measured times: where the
// rates cannot be measured by timing small JIT steps (a GPU, measured by
// the GPU check on a machine without Halide), measured kernel times of
// real plans are fitted instead (bench/gpu/fit_device_rates.cpp).
#pragma once

#include <vector>

#include "autoscheduler/planner.h"

namespace segtile {

// A segment's priced quantities (TimeSample, time_model.h; seconds 0).
TimeSample priced(const SegmentPlan &s);

// The rates that minimise the samples' squared relative errors, each
// inverse rate non-negative: a term the samples do not need (inverse 0)
// gets kUnusedRate. Needs at least one sample with seconds > 0.
TimeRates fit_time_rates(const std::vector<TimeSample> &samples);

}  // namespace segtile
