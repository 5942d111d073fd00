#include "autoscheduler/calibrate.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "generators/training_step.h"
#include "spec/builder.h"
#include "spec/cost.h"

namespace segtile {

namespace {

// Seconds of the fastest of `reps` training steps of m on a size x size image.
double step_seconds(const Model &m, int size, int reps) {
    JitTrainingStep step(m, Halide::Float(32));
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    Halide::Buffer<float> image(size, size, m.input_channels, 1);  // (W, H, C, 1)
    image.for_each_value([&](float &v) { v = nd(rng); });
    Halide::Buffer<int32_t> labels(1);  // (1)
    labels(0) = 0;
    std::vector<Halide::Buffer<>> params;
    for (const auto &p : m.params()) {
        Halide::Buffer<float> b(std::vector<int>(p.dims.begin(), p.dims.end()));
        b.for_each_value([&](float &v) { v = 0.05f * nd(rng); });
        params.push_back(b);
    }
    double best = 1e30;
    for (int k = 0; k < reps; k++) {
        const auto t0 = std::chrono::steady_clock::now();
        step.run(image, labels, params);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

Model calibration_model() {
    Model m = ModelBuilder("calibration", 16)
                  .conv2d("conv1", 32, 3)
                  .padding(1)
                  .relu("relu1")
                  .conv2d("conv2", 32, 3)
                  .padding(1)
                  .relu("relu2")
                  .global_avg_pool("gap")
                  .flatten("flatten")
                  .dense("fc", 2)
                  .build();
    return m;
}

}  // namespace

TimeRates measure_time_rates() {
    const Model m = calibration_model();
    TimeRates r;
    const int big = 128, small = 8;
    const double t_big = step_seconds(m, big, 3), t_small = step_seconds(m, small, 20);
    // The small step is mostly call overhead; the large one mostly arithmetic.
    r.seconds_per_tile = t_small / 2;  // forward and backward kernel calls per tile
    r.flops_per_second = training_step_flops(m, big, big) / std::max(1e-9, t_big - t_small);
    return r;
}

std::string calibration_path() {
    const char *home = std::getenv("SEGTILE_HOME");
    std::string dir = home ? home : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/segtile";
    return dir + "/calibration.json";
}

void save_time_rates(const TimeRates &r, const std::string &path) {
    nlohmann::json j = {{"flops_per_second", r.flops_per_second},
                        {"bytes_per_second", r.bytes_per_second},
                        {"seconds_per_tile", r.seconds_per_tile}};
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp);
        f << j.dump(2) << "\n";
        if (!f) throw std::runtime_error("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write " + path);
}

bool load_time_rates(TimeRates &r, const std::string &path) {
    std::ifstream f(path);
    if (!f) return false;
    try {
        nlohmann::json j = nlohmann::json::parse(f);
        r.flops_per_second = j.at("flops_per_second");
        r.bytes_per_second = j.value("bytes_per_second", r.bytes_per_second);
        r.seconds_per_tile = j.value("seconds_per_tile", r.seconds_per_tile);
    } catch (const std::exception &) {
        return false;  // a damaged calibration is not fatal: defaults
    }
    return true;
}

}  // namespace segtile
