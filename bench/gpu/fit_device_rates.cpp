// segtile_fit_device_rates: fits the planner's time-model rates for a GPU
// (TimeRates) to what the GPU check measured, since the GPU machine has no
// Halide to run `segtile plan --calibrate` there. Built here; reads the
// check's result files (segtile_<model>_<size>.json, scripts/gpu-check.sh).
//
//   segtile_fit_device_rates <result.json>...
//
// For each run, the planner prices the same cuts and tiles for a GPU
// (evaluate_plan); each segment's measured seconds (its forward and
// backward kernels, timed to their outputs back on the host) are one sample.
// Prints the fitted rates and, per run, predicted against measured.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoscheduler/planner.h"
#include "autoscheduler/rate_fit.h"
#include "spec/tiling.h"
#include "spec/model.h"

using namespace segtile;

namespace {

struct Run {
    std::string file, model;
    int64_t size = 0;
    double step_seconds = 0, head_seconds = 0;
    std::vector<TimeSample> segments;  // per segment: priced, measured kernel seconds
};

Run read_run(const std::string &file) {
    std::ifstream f(file);
    if (!f) throw std::runtime_error(file + ": cannot read");
    const nlohmann::json j = nlohmann::json::parse(f);
    if (j.value("status", "") != "ok") throw std::runtime_error(file + ": not a finished run (status is not \"ok\")");
    Run r;
    r.file = file;
    r.model = j.at("model");
    r.size = j.at("size");
    r.step_seconds = j.at("seconds");
    const auto &ks = j.at("kernel_seconds");
    r.head_seconds = ks.value("head and loss", 0.0);
    const Model m = load_model(r.model);
    const std::vector<int> cuts = parse_cuts(m, j.at("cuts").get<std::string>());
    const SegmentLayout layout = make_segments(m, cuts);
    PlanRequest req;
    req.width = req.height = r.size;
    req.device = true;
    req.image_gradient = false;  // the CUDA libraries are built without it (models/CMakeLists.txt)
    const Plan p = evaluate_plan(m, req, cuts, tiles_for(m, layout, r.size, j.at("tile_px")), nullptr);
    for (size_t s = 0; s < p.segments.size(); s++) {
        TimeSample t = priced(p.segments[s]);
        for (const char *kind : {"forward", "backward"})
            t.seconds += ks.value(std::string(kind) + " kernel, segment " + std::to_string(s), 0.0);
        r.segments.push_back(t);
    }
    return r;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s <gpu-check result segtile_<model>_<size>.json>...\n", argv[0]);
        return 2;
    }
    try {
        std::vector<Run> runs;
        std::vector<TimeSample> samples;
        for (int a = 1; a < argc; a++) {
            runs.push_back(read_run(argv[a]));
            for (const auto &s : runs.back().segments) samples.push_back(s);
        }
        const TimeRates r = fit_time_rates(samples);
        std::printf("fitted to %zu segments of %zu runs:\n", samples.size(), runs.size());
        std::printf("  flops_per_second    %.4g\n  elements_per_second %.4g\n  bytes_per_second    %.4g\n"
                    "  seconds_per_tile    %.4g\n  weights_per_second  %.4g\n",
                    r.flops_per_second, r.elements_per_second, r.bytes_per_second, r.seconds_per_tile,
                    r.weights_per_second);
        std::printf("%-34s %9s %9s %9s %9s %s\n", "run", "kernels", "predicted", "head", "step", "segments (measured/predicted)");
        for (const auto &run : runs) {
            double measured = 0, predicted = 0;
            std::string ratios;
            for (const auto &s : run.segments) {
                measured += s.seconds;
                predicted += predicted_seconds(r, s);
                char b[16];
                std::snprintf(b, sizeof b, " %.2f", s.seconds / predicted_seconds(r, s));
                ratios += b;
            }
            std::printf("%-34s %9.2f %9.2f %9.2f %9.2f%s\n", (run.model + " " + std::to_string(run.size) + "^2").c_str(),
                        measured, predicted, run.head_seconds, run.step_seconds, ratios.c_str());
        }
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
