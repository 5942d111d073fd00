#include "autoscheduler/calibrate.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
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
double step_seconds(JitTrainingStep &step, const Model &m, int size, int reps) {
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

// The calibration steps use the channel counts of real layers. Still,
// untiled JIT steps (every buffer allocated fresh per call, the image's
// gradient computed) run far slower than the executor's segment kernels:
// here they measured 12.9 GFLOP/s and 0.61 G elements/s against 147 and
// 1.8 G fitted to a measured Darknet19 step (docs/benchmarks.md,
// 2026-12-04), so the defaults predict this machine better. Timing
// segment kernels through the executor would fix that.
// Arithmetic-bound: two 3x3 convs of 64 channels (as VGG16's conv1_2).
Model conv_model() {
    return ModelBuilder("calibration", 64)
        .conv2d("conv1", 64, 3)
        .padding(1)
        .relu("relu1")
        .conv2d("conv2", 64, 3)
        .padding(1)
        .relu("relu2")
        .global_avg_pool("gap")
        .flatten("flatten")
        .dense("fc", 2)
        .build();
}

// Traffic-bound: a batch norm, leaky ReLU, 1x1 conv 128->64 and max pool
// on planes past the L2, as Darknet19's bn3..conv4 segment.
Model traffic_model() {
    return ModelBuilder("calibration_traffic", 128)
        .batch_norm("bn1")
        .leaky_relu("lrelu1", 0.1)
        .conv2d("conv1", 64, 1)
        .batch_norm("bn2")
        .leaky_relu("lrelu2", 0.1)
        .max_pool("pool1", 2)
        .global_avg_pool("gap")
        .flatten("flatten")
        .dense("fc", 2)
        .build();
}

struct Sample {
    double seconds = 0;  // of the big step, the call overhead (small step) taken off
    double flops = 0, elements = 0;
    double small_seconds = 0;
};

Sample sample(const Model &m, int big, int reps) {
    const int small = 8;
    JitTrainingStep step(m, Halide::Float(32));
    Sample s;
    s.small_seconds = step_seconds(step, m, small, 20);
    s.seconds = std::max(1e-9, step_seconds(step, m, big, reps) - s.small_seconds);
    s.flops = training_step_flops(m, big, big);
    s.elements = training_step_elements(m, big, big);
    return s;
}

}  // namespace

TimeRates measure_time_rates() {
    TimeRates r;
    const Sample a = sample(conv_model(), 128, 3), b = sample(traffic_model(), 256, 3);
    // The small steps are mostly call overhead: two kernel calls per tile.
    r.seconds_per_tile = a.small_seconds / 2;
    // seconds = flops / F + elements / E for both steps: solve for 1/F, 1/E.
    const double det = a.flops * b.elements - b.flops * a.elements;
    const double inv_f = (a.seconds * b.elements - b.seconds * a.elements) / det;
    const double inv_e = (a.flops * b.seconds - b.flops * a.seconds) / det;
    const double ratio = TimeRates{}.flops_per_second / TimeRates{}.elements_per_second;
    if (det != 0 && inv_f > 0 && inv_e > 0) {
        r.flops_per_second = 1 / inv_f;
        r.elements_per_second = 1 / inv_e;
    } else {
        // Timing noise made one rate negative: both steps' total at the
        // default ratio of the two.
        r.flops_per_second = (a.flops + b.flops + ratio * (a.elements + b.elements)) / (a.seconds + b.seconds);
        r.elements_per_second = r.flops_per_second / ratio;
    }
    return r;
}

std::string calibration_path() {
    const char *home = std::getenv("SEGTILE_HOME");
    std::string dir = home ? home : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/segtile";
    return dir + "/calibration.json";
}

void save_time_rates(const TimeRates &r, const std::string &path) {
    nlohmann::json j = {{"flops_per_second", r.flops_per_second},
                        {"elements_per_second", r.elements_per_second},
                        {"bytes_per_second", r.bytes_per_second},
                        {"seconds_per_tile", r.seconds_per_tile}};
    // A fresh SEGTILE_HOME has no folder yet.
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
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
        // Files written before the traffic term (planner version 4) keep
        // the defaults' ratio to their FLOP rate.
        r.elements_per_second = j.value("elements_per_second", r.flops_per_second * (TimeRates{}.elements_per_second /
                                                                                   TimeRates{}.flops_per_second));
        r.bytes_per_second = j.value("bytes_per_second", r.bytes_per_second);
        r.seconds_per_tile = j.value("seconds_per_tile", r.seconds_per_tile);
    } catch (const std::exception &) {
        return false;  // a damaged calibration is not fatal: defaults
    }
    return true;
}

}  // namespace segtile
