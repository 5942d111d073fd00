#include "autoscheduler/calibrate.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "generators/jit_kernel.h"
#include "runtime/executor.h"
#include "spec/builder.h"
#include "spec/environment.h"

namespace segtile {

// Before, calibration timed untiled JIT training steps: every buffer
// allocated fresh per call and the image's gradient computed, they ran
// 3-11x slower than the executor's segment kernels (12.9 GFLOP/s against
// 147 fitted to a Darknet19 step), so the defaults predicted better. Timing
// the executor's own segment passes measures what the planner predicts.
std::vector<CalibrationCase> calibration_cases(bool device) {
    Model conv = ModelBuilder("calibration_conv", 64)
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
    Model traffic = ModelBuilder("calibration_traffic", 128)
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
    // Planes past the 32 MiB L3 (64 MiB and 128 MiB), as a real model's
    // early layers: at 128^2 and 256^2 the fitted rates predicted Darknet19's
    // step at 1024^2 in 1.71 s for a measured 2.82. 1 to 64 tiles a pass:
    // the call overhead and halo copies grow while the work does not,
    // which separates them from the FLOP and element rates.
    // The traffic model cut at every layer too: its batch norm and leaky
    // ReLU then run as passes of their own over memory, which the first
    // cut inlines into the conv. Without them the fit needed no copy term
    // (copies free), and the planner, so priced, cut Darknet19 at every
    // layer (60 segments at 1024^2: 4.02 s a step against 2.88).
    // And a deep layer (as Darknet19's convs on 64^2 planes at 1024^2:
    // 256->512), where each weight gets few pixels: the weight gradient's
    // passes over its 4.5 MiB of weights per call weigh.
    Model deep = ModelBuilder("calibration_deep", 256)
                     .conv2d("conv1", 512, 3)
                     .padding(1)
                     .batch_norm("bn1")
                     .leaky_relu("lrelu1", 0.1)
                     .global_avg_pool("gap")
                     .flatten("flatten")
                     .dense("fc", 2)
                     .build();
    std::vector<CalibrationCase> cases = {{conv, "relu1", 512, {0, 256, 128, 64}},
                                          {traffic, "conv1", 512, {0, 256, 128, 64}},
                                          {traffic, "bn1,lrelu1,conv1,bn2,lrelu2", 512, {0, 128}},
                                          {deep, "conv1", 64, {0, 32}}};
    if (device)
        for (auto &c : cases) {
            c.size *= 4;
            for (int &t : c.tiles) t *= 4;
        }
    return cases;
}

namespace {

std::string segment_label(const Model &m, const SegmentPlan &s) {
    return m.layers[s.first].name + ".." + m.layers[s.last].name;
}

// Fastest forward + backward seconds per segment over `steps` steps of one
// executor (after one step to warm up: the first allocates every buffer).
std::vector<double> segment_seconds(SegmentedExecutor &exec, const Model &m, int size, int steps,
                                    MemoryLedger &ledger) {
    const size_t n = exec.layout().segments.size();
    std::vector<double> step(n, 0), best(n, std::numeric_limits<double>::infinity());
    exec.set_trace([&](const ExecutorEvent &e) {
        if (e.category != "segment") return;
        const int s = std::stoi(e.name.substr(std::string("segment ").size()));
        step.at(s) += std::chrono::duration<double>(e.end - e.start).count();
    });
    Tensor image({size, size, m.input_channels, 1}, &ledger, MemoryLedger::Kind::Data);  // (W, H, C, 1)
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < image.numel(); i++) image.data()[i] = nd(rng);
    Halide::Runtime::Buffer<int32_t> labels(1);  // (1)
    labels(0) = 0;
    ParamStore params(m, &ledger);
    params.init_pytorch_default(1);
    for (int k = 0; k <= steps; k++) {
        std::fill(step.begin(), step.end(), 0.0);
        exec.step(image, labels, params);
        if (k == 0) continue;
        for (size_t s = 0; s < n; s++) best[s] = std::min(best[s], step[s]);
    }
    exec.set_trace({});
    return best;
}

}  // namespace

Calibration calibrate_time_model(const std::vector<CalibrationCase> &cases, int steps,
                                 const std::function<void(const std::string &)> &progress, bool device) {
    Calibration cal;
    for (const CalibrationCase &c : cases) {
        const Model &m = c.model;
        const std::vector<int> cuts = parse_cuts(m, c.cuts);
        // Training computes no image gradient (only tiny_cnn's linked kernels do).
        const SegmentLayout layout = make_segments(m, cuts, false);
        MemoryLedger ledger;
        if (progress)
            progress("JIT-compiling " + std::to_string(2 * layout.segments.size() + 1) + " kernels of " + m.name +
                     " (cuts " + c.cuts + ")");
        auto kernels = std::make_shared<ModelKernels>(
            jit_model_kernels(m, layout, Halide::Float(32), &ledger, device ? Schedule::Gpu : Schedule::Cpu));
        for (int tile_px : c.tiles) {
            const std::vector<TileSize> tiles = tiles_for(m, layout, c.size, tile_px);
            PlanRequest req;
            req.width = req.height = c.size;
            req.image_gradient = false;
            req.device = device;
            const Plan plan = evaluate_plan(m, req, cuts, tiles, nullptr);
            SegmentedExecutor exec(m, layout, share_kernels(kernels), tiles, &ledger);
            if (device) exec.set_device(true);
            const std::vector<double> seconds = segment_seconds(exec, m, c.size, steps, ledger);
            const std::string tiling = m.name + (tile_px ? " tile " + std::to_string(tile_px) : " whole");
            std::ostringstream line;
            line << tiling << ":";
            for (size_t s = 0; s < plan.segments.size(); s++) {
                const SegmentPlan &p = plan.segments[s];
                CalibrationSample cs;
                cs.label = tiling + ": segment " + std::to_string(s) + " (" + segment_label(m, p) + ")";
                cs.tiles = exec.tile_regions((int)s).count();
                cs.sample = priced(p);
                cs.sample.seconds = seconds[s];
                cal.samples.push_back(cs);
                char ms[32];
                std::snprintf(ms, sizeof ms, "%.1f", seconds[s] * 1e3);
                line << " segment " << s << " " << cs.tiles << " tiles " << ms << " ms;";
            }
            if (progress) progress(line.str());
        }
    }
    std::vector<TimeSample> samples;
    for (const auto &s : cal.samples) samples.push_back(s.sample);
    cal.rates = fit_time_rates(samples);
    return cal;
}

std::string calibration_report(const Calibration &c) {
    std::ostringstream o;
    const TimeRates &r = c.rates;
    auto rate = [](double v, double unit) {
        char b[32];
        std::snprintf(b, sizeof b, "%.3g", v / unit);
        return v >= kUnusedRate ? std::string("(not needed)") : std::string(b);
    };
    o << "measured " << rate(r.flops_per_second, 1e9) << " GFLOP/s, " << rate(r.elements_per_second, 1e9)
      << " G activation elements/s, " << rate(r.bytes_per_second, 1e9) << " GB/s copied, "
      << r.seconds_per_tile * 1e6 << " us per kernel call, " << rate(r.weights_per_second, 1e9)
      << " G weights/s passed over by backward calls\n";
    double lo = 1e30, hi = 0, err = 0;
    char line[256];
    for (const auto &s : c.samples) {
        const double p = predicted_seconds(r, s.sample), ratio = s.sample.seconds / p;
        lo = std::min(lo, ratio);
        hi = std::max(hi, ratio);
        err += std::abs(ratio - 1);
        std::snprintf(line, sizeof line, "  %-58s %4lld tiles  measured %8.2f ms  predicted %8.2f ms  %5.2fx\n",
                      s.label.c_str(), (long long)s.tiles, s.sample.seconds * 1e3, p * 1e3, ratio);
        o << line;
    }
    if (!c.samples.empty()) {
        std::snprintf(line, sizeof line, "measured/predicted %.2f-%.2f over %zu segment passes, mean error %.0f%%\n", lo,
                      hi, c.samples.size(), 100 * err / (double)c.samples.size());
        o << line;
    }
    return o.str();
}

std::string calibration_path(bool device) {
    std::string dir = environment::home();
    if (dir.empty()) dir = "./.cache/segtile";
    return dir + (device ? "/calibration_cuda.json" : "/calibration.json");
}

void save_time_rates(const TimeRates &r, const std::string &path) {
    nlohmann::json j = {{"flops_per_second", r.flops_per_second},
                        {"elements_per_second", r.elements_per_second},
                        {"bytes_per_second", r.bytes_per_second},
                        {"seconds_per_tile", r.seconds_per_tile},
                        {"weights_per_second", r.weights_per_second}};
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
        // Files without the weight term were written by the calibration
        // before planner version 8, which timed untiled JIT steps 3-11x
        // slower than segment kernels: their rates would mislead the
        // planner, so they count as no calibration (the defaults).
        if (!j.contains("weights_per_second")) return false;
        TimeRates read;
        read.flops_per_second = j.at("flops_per_second");
        read.elements_per_second = j.at("elements_per_second");
        read.bytes_per_second = j.at("bytes_per_second");
        read.seconds_per_tile = j.at("seconds_per_tile");
        read.weights_per_second = j.at("weights_per_second");
        r = read;
    } catch (const std::exception &) {
        return false;  // a damaged calibration is not fatal: defaults
    }
    return true;
}

}  // namespace segtile
