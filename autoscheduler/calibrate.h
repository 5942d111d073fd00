// Calibration of the planner's time model on this machine: the rates at which
// segtile's CPU schedule does arithmetic and moves activations (a 3x3 conv
// step and a 1x1 conv + batch norm + pool step, solved for both), and the
// cost of a kernel call, measured and kept in a small JSON file so plans
// need not re-measure.
#pragma once

#include <string>

#include "autoscheduler/planner.h"

namespace segtile {

// Measures TimeRates (seconds: a few; JIT-compiles two small steps).
// Where timing noise makes one rate come out negative, both steps' total
// time is split at the default ratio of the two rates.
TimeRates measure_time_rates();

// $SEGTILE_HOME/calibration.json (default ~/.cache/segtile).
std::string calibration_path();
void save_time_rates(const TimeRates &r, const std::string &path);
// The saved rates, or the defaults when there is no file (returns false).
bool load_time_rates(TimeRates &r, const std::string &path);

}  // namespace segtile
