// Calibration of the planner's time model on this machine: segment kernels
// of small models, JIT-compiled with the CPU schedule, run through the
// executor at several tile sizes; each segment's measured time (its
// forward and backward passes, the executor's window copies and gradient
// adds included) is priced by the planner for the same cuts and tiles, and
// the rates are fitted to them (rate_fit.h). The rates are kept in a small
// JSON file so plans need not re-measure.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autoscheduler/planner.h"
#include "autoscheduler/rate_fit.h"

namespace segtile {

// A model run at one size, cut as given, once per tile size.
struct CalibrationCase {
    Model model;
    std::string cuts;        // layer names, as `--cuts`
    int size = 0;            // square image
    std::vector<int> tiles;  // image pixels per tile side (tiles_for); 0: whole extents
};

// Four cases, chosen to separate the rates (on planes past the L3): two
// 3x3 convs of 64 channels (as VGG16's conv1_2) cut between them; a batch
// norm, leaky ReLU, 1x1 conv 128->64 and max pool (as Darknet19's
// bn3..conv4) cut once, and cut at every layer (lone pointwise passes);
// and a deep 3x3 conv 256->512 on 64^2 planes (weight passes). Each runs
// untiled and at tiles down to 64 calls a pass (the deep one: 4).
// `device`: the same at 4x the image side (a GPU's calls cost milliseconds;
// small images would time nothing else).
std::vector<CalibrationCase> calibration_cases(bool device = false);

// One segment of one case at one tile size.
struct CalibrationSample {
    std::string label;  // "calibration_conv tile 32: segment 1 (conv2..relu2)"
    int64_t tiles = 0;  // run by the executor (the planner priced the same)
    TimeSample sample;  // priced by the planner; seconds: fastest forward + backward measured
};

struct Calibration {
    TimeRates rates;
    std::vector<CalibrationSample> samples;
};

// Measures every case (`steps` timed steps after one to warm up; the
// fastest counts) and fits the rates. Seconds to a minute or two: each cut
// set's kernels are JIT-compiled once. `progress` gets a line per case.
// `device`: the kernels JIT-compiled with the GPU schedule and run on this
// machine's CUDA GPU through the executor's device path (needs one), priced
// as the planner prices a device plan.
Calibration calibrate_time_model(const std::vector<CalibrationCase> &cases, int steps = 3,
                                 const std::function<void(const std::string &)> &progress = {}, bool device = false);

// The fitted rates, then per sample measured against predicted at them and
// the spread (what the fit leaves unexplained).
std::string calibration_report(const Calibration &c);

// $SEGTILE_HOME/calibration.json (default ~/.cache/segtile), or
// calibration_cuda.json for a GPU's rates.
std::string calibration_path(bool device = false);
// Written atomically (a temporary file renamed over the old one).
void save_time_rates(const TimeRates &r, const std::string &path);
// The saved rates, or the defaults (returns false) when there is no file,
// it is damaged, or it was written before planner version 8 (untiled JIT
// steps timed: rates 3-11x too slow).
bool load_time_rates(TimeRates &r, const std::string &path);

}  // namespace segtile
