// Per layer kind, the forward and backward kernels of a single-layer model
// (one segment, the whole image as one tile; generators/kernels.h), JIT-
// compiled with segtile's CPU schedule, at the shapes VGG16, Darknet19 and
// U-Net use. Kernels: forward; input_grad and weight_grad (the backward
// kernel restricted to grad_in_image or to the parameter gradients);
// backward (both at once, what the executor runs).
//
//   layer_bench [--long] [--peak_gflops=X] [--time_limit=S] --benchmark_out=bench/results/layers.json --benchmark_out_format=json
//
// Counters: seconds (fastest call), gflops (useful FLOPs from spec/cost.h
// over that time), gbytes_per_s (bytes of every buffer the kernel takes,
// read or written, over that time: a lower bound on its memory traffic),
// fraction_of_peak, compile_seconds.
//
// The issue-4 yardstick: the backward kernel of conv 3x3 64->64 + relu at
// 128x128 (recomputed forward + input gradient + weight gradient), run with
// segtile's schedule and with Halide's Li2018, Adams2019 and Mullapudi2016
// autoschedulers (BM_Layer/yardstick_*; counter yardstick = 1).
#include <benchmark/benchmark.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/isolated_run.h"
#include "generators/jit_kernel.h"
#include "spec/builder.h"
#include "spec/cost.h"

namespace {

using namespace segtile;
using namespace segtile::bench;

struct LayerCase {
    std::string name;
    std::function<Model()> model;
    int size;
    bool long_only = false;  // --long: VGG16's layers at 1024^2 (conv1, conv2, conv4), where a band of rows outgrows L2
};

ModelBuilder net(int cin) { return ModelBuilder("layer", cin); }
ModelBuilder darknet_block(int cin, int mid, int kernel, int cout) {
    return net(cin)
        .conv2d("conv1", mid, kernel).padding(kernel / 2).bias(false)
        .batch_norm("bn1")
        .leaky_relu("lrelu1", 0.1)
        .conv2d("conv2", cout, 3).padding(1).bias(false);
}
Model finish(ModelBuilder b) { return b.loss(LossKind::MeanSquaredError).build(); }

std::vector<LayerCase> layer_cases() {
    return {
        {"conv3x3_3_64_256", [] { return finish(net(3).conv2d("conv", 64, 3).padding(1)); }, 256},
        // Darknet19's first layer at 512^2, and a first layer of one channel (microscopy).
        {"conv3x3_3_32_512", [] { return finish(net(3).conv2d("conv", 32, 3).padding(1).bias(false)); }, 512},
        {"conv3x3_1_16_512", [] { return finish(net(1).conv2d("conv", 16, 3).padding(1)); }, 512},
        {"conv3x3_64_64_128", [] { return finish(net(64).conv2d("conv", 64, 3).padding(1)); }, 128},
        {"conv3x3_128_128_64", [] { return finish(net(128).conv2d("conv", 128, 3).padding(1)); }, 64},
        {"conv3x3_256_256_32", [] { return finish(net(256).conv2d("conv", 256, 3).padding(1)); }, 32},
        {"conv3x3_512_1024_8", [] { return finish(net(512).conv2d("conv", 1024, 3).padding(1)); }, 8},
        // Darknet19's conv14, conv16 and conv18 at 1024^2: a narrow image (2 vectors) under many weights.
        {"conv3x3_512_1024_32", [] { return finish(net(512).conv2d("conv", 1024, 3).padding(1)); }, 32},
        {"conv1x1_1024_512_8", [] { return finish(net(1024).conv2d("conv", 512, 1)); }, 8},
        {"conv3x3_stride2_64_128_128", [] { return finish(net(64).conv2d("conv", 128, 3).stride(2).padding(1)); }, 128},
        // ResNet18's stem and its downsampling shortcut (strided: by phase).
        {"conv7x7_stride2_3_64_256", [] { return finish(net(3).conv2d("conv", 64, 7).stride(2).padding(3)); }, 256},
        {"conv1x1_stride2_64_128_128", [] { return finish(net(64).conv2d("conv", 128, 1).stride(2)); }, 128},
        {"conv1x1_128_64_64", [] { return finish(net(128).conv2d("conv", 64, 1)); }, 64},
        // Darknet19's 1x1 convs at 1024^2 (stages 3 and 5): planes that outgrow L2.
        {"conv1x1_128_64_256", [] { return finish(net(128).conv2d("conv", 64, 1).bias(false)); }, 256},
        {"conv1x1_512_256_64", [] { return finish(net(512).conv2d("conv", 256, 1).bias(false)); }, 64},
        {"maxpool2x2_64_128", [] { return finish(net(64).max_pool("pool", 2)); }, 128},
        // Darknet19's pool5 at 256^2: many channels of small planes.
        {"maxpool2x2_512_16", [] { return finish(net(512).max_pool("pool", 2)); }, 16},
        {"relu_64_128", [] { return finish(net(64).relu("relu")); }, 128},
        {"batchnorm_64_128", [] { return finish(net(64).batch_norm("bn")); }, 128},
        {"upsample2x_64_64", [] { return finish(net(64).upsample("up", 2)); }, 64},
        {"concat_64_64_128", [] { return finish(net(64).concat("cat", {"input", "input"})); }, 128},
        {"add_64_64_128", [] { return finish(net(64).add("sum", {"input", "input"})); }, 128},
        // Darknet19's blocks as one segment (conv, frozen batch norm, leaky
        // ReLU 0.1, conv; no bias): what compute_at fusion inside a tile
        // changes. FLOPs count each part's own (not the recomputed forward).
        {"block_conv3x3_bn_lrelu_conv3x3_64_512", [] { return finish(darknet_block(64, 64, 3, 64)); }, 512},
        {"block_conv1x1_bn_lrelu_conv3x3_128_64_256", [] { return finish(darknet_block(128, 64, 1, 128)); }, 256},
        {"conv3x3_64_64_1024", [] { return finish(net(64).conv2d("conv", 64, 3).padding(1)); }, 1024, true},
        {"conv3x3_128_128_512", [] { return finish(net(128).conv2d("conv", 128, 3).padding(1)); }, 512, true},
        {"conv3x3_512_512_128", [] { return finish(net(512).conv2d("conv", 512, 3).padding(1)); }, 128, true},
    };
}

Model yardstick_model() { return finish(net(64).conv2d("conv", 64, 3).padding(1).relu("relu")); }

enum class Part { Forward, InputGrad, WeightGrad, Backward };

const char *part_name(Part p) {
    switch (p) {
    case Part::Forward: return "forward";
    case Part::InputGrad: return "input_grad";
    case Part::WeightGrad: return "weight_grad";
    case Part::Backward: return "backward";
    }
    return "";
}

// Useful FLOPs of `part` over the segment's layers. `recomputed_forward`:
// count the forward too (the yardstick's backward recomputes the conv's
// output for relu's mask; a lone conv's backward does not need it).
double part_flops(const Model &m, const SegmentSpec &seg, int size, Part part, bool recomputed_forward) {
    const auto shapes = m.shapes(size, size);
    double f = 0;
    for (int i = seg.first; i <= seg.last; i++) {
        const LayerFlops lf = layer_flops(m, i, shapes[i].width, shapes[i].height);
        if (part == Part::Forward || recomputed_forward) f += lf.forward;
        if (part == Part::InputGrad || part == Part::Backward) f += lf.input_grad;
        if (part == Part::WeightGrad || part == Part::Backward) f += lf.weight_grad;
    }
    return f;
}

struct KernelRun {
    Model model;
    int size;
    Part part;
    Schedule schedule;
    PeerSchedule peer;  // for Schedule::Peer
    bool recomputed_forward = false;
};

// Input tensors get this many pixels of margin on every side. Kernels
// take the image size as a scalar and never use values outside it, but
// Adams2019's schedules make them read one row or column beyond the
// window (Halide: "Input buffer in_image is accessed at -1"); the margin
// lets those schedules run. Bytes are counted without it.
constexpr int kMargin = 32;

void run_kernel(const KernelRun &k, double peak_gflops, IsolatedResult &r) {
    using clock = std::chrono::steady_clock;
    const Model &m = k.model;
    const SegmentLayout layout = make_segments(m, {});
    const SegmentSpec &seg = layout.segments.at(0);
    const int L = (int)m.layers.size();
    const auto shapes = m.shapes(k.size, k.size);
    std::set<std::string> only;
    const auto specs = m.params();
    if (k.part == Part::InputGrad) only = {"grad_in_image"};
    if (k.part == Part::WeightGrad) {
        for (const auto &s : specs)
            if (s.trainable) only.insert("grad_" + c_identifier(s.name));
        if (only.empty()) throw std::runtime_error("no parameters");
    }
    // The executor's allocator: Halide's intermediates are counted, and
    // reused from one call to the next (runtime/block_cache.h), as they are
    // from one tile to the next in a training step.
    MemoryLedger ledger;
    const auto t0 = clock::now();
    JitKernel kernel(m, layout, k.part == Part::Forward ? KernelKind::Forward : KernelKind::Backward, 0,
                     Halide::Float(32), &ledger, only, k.schedule, k.peer);
    r.counters["compile_seconds"] = std::chrono::duration<double>(clock::now() - t0).count();

    // Every buffer the signature names, whole tensors (one tile = the image).
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::deque<Halide::Runtime::Buffer<float>> buffers;
    ArgList args;
    double bytes = 0;
    auto tensor_dims = [&](int t) -> std::vector<int> {
        if (t == L) return {k.size, k.size, m.input_channels, 1};
        return {(int)shapes[t].width, (int)shapes[t].height, (int)shapes[t].channels, 1};
    };
    for (const KernelArg &a : kernel.signature()) {
        if (a.scalar) {
            const std::vector<int> d = tensor_dims(a.tensor < 0 ? L : a.tensor);
            const std::string &n = a.name;
            int32_t v = 0;
            if (n == "image_width" || n == "image_height") v = k.size;
            else if (n.size() > 6 && n.compare(n.size() - 6, 6, "_x_max") == 0) v = d[0] - 1;
            else if (n.size() > 6 && n.compare(n.size() - 6, 6, "_y_max") == 0) v = d[1] - 1;
            args.scalar(n, v);
            continue;
        }
        std::vector<int> dims;
        if (a.param >= 0) dims.assign(specs[a.param].dims.begin(), specs[a.param].dims.end());
        else dims = tensor_dims(a.tensor);
        double elements = 1;
        for (int d : dims) elements *= d;
        bytes += elements * sizeof(float);
        const bool margin = !a.output && a.param < 0;
        if (margin) dims[0] += 2 * kMargin, dims[1] += 2 * kMargin;
        buffers.emplace_back(dims);
        Halide::Runtime::Buffer<float> &b = buffers.back();
        if (margin) b.translate({-kMargin, -kMargin});
        b.for_each_value([&](float &v) { v = nd(rng); });
        if (a.param >= 0 && specs[a.param].role == ParamRole::RunningVar)
            b.for_each_value([](float &v) { v = 1.0f + std::abs(v); });
        args.buffer(a.name, b.raw_buffer());
    }
    const std::vector<void *> argv = args.build(kernel.signature());
    double best = 1e300, total = 0;
    int calls = 0;
    while (calls < 3 || (total < 1.0 && calls < 50)) {
        const auto s0 = clock::now();
        kernel.call(argv);
        const double dt = std::chrono::duration<double>(clock::now() - s0).count();
        best = std::min(best, dt);
        total += dt;
        calls++;
    }
    const double flops = part_flops(m, seg, k.size, k.part, k.recomputed_forward);
    r.counters["seconds"] = best;
    r.counters["seconds_mean"] = total / calls;
    r.counters["calls"] = calls;
    r.counters["gflop"] = flops * 1e-9;
    r.counters["gflops"] = flops / best * 1e-9;
    r.counters["gbytes_per_s"] = bytes / best * 1e-9;
    r.counters["bytes"] = bytes;
    r.counters["fraction_of_peak"] = flops / best * 1e-9 / peak_gflops;
    r.counters["halide_peak_bytes"] = (double)ledger.halide_peak();
}

void register_kernel(const std::string &name, const KernelRun &k, const BenchOptions &opt, bool yardstick) {
    const double limit = opt.time_limit_seconds > 0 ? opt.time_limit_seconds : 900;
    benchmark::RegisterBenchmark(name.c_str(),
                                 [=](benchmark::State &state) {
                                     for (auto _ : state) {
                                         IsolatedResult r = run_isolated(
                                             [&](IsolatedResult &out) { run_kernel(k, opt.peak_gflops, out); }, limit);
                                         for (const auto &[key, v] : r.counters) state.counters[key] = v;
                                         state.counters["yardstick"] = yardstick ? 1 : 0;
                                         state.counters["peak_gflops"] = opt.peak_gflops;
                                         state.SetIterationTime(r.ok ? r.counters["seconds"] : 0);
                                         state.SetLabel(r.ok ? (yardstick ? "issue-4 yardstick" : "")
                                                             : "FAILED: " + r.error);
                                     }
                                 })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char **argv) {
    const BenchOptions opt = parse_bench_options(&argc, argv);
    // The yardstick first: the figure issue 4 compares schedules by.
    // Adams2019's default beam search (beam_size 32) needs 3 to 10 minutes
    // for this kernel on 2 shared cores: the default run uses its greedy
    // search (beam_size 1), --long adds the full search.
    struct Yardstick {
        std::string name;
        Schedule schedule;
        std::map<std::string, std::string> extra;
    };
    std::vector<Yardstick> yardsticks = {{"segtile_cpu", Schedule::Cpu, {}},
                                         {"Li2018", Schedule::Peer, {}},
                                         {"Adams2019", Schedule::Peer, {{"beam_size", "1"}}},
                                         {"Mullapudi2016", Schedule::Peer, {}}};
    if (opt.long_run) yardsticks.push_back({"Adams2019", Schedule::Peer, {{"beam_size", "32"}}});
    for (const Yardstick &y : yardsticks) {
        KernelRun k{yardstick_model(), 128, Part::Backward, y.schedule, {y.name, 128, 128}, true};
        k.peer.extra = y.extra;
        std::string name = "BM_Layer/yardstick_conv3x3_relu_64_64_128/backward/" + y.name;
        for (const auto &[key, v] : y.extra) name += "_" + key + "_" + v;
        register_kernel(name, k, opt, true);
    }
    for (const LayerCase &c : layer_cases()) {
        if (c.long_only && !opt.long_run) continue;
        const Model m = c.model();
        bool has_weights = false;
        for (const auto &s : m.params()) has_weights |= s.trainable;
        for (Part p : {Part::Forward, Part::InputGrad, Part::WeightGrad, Part::Backward}) {
            if (!has_weights && (p == Part::WeightGrad || p == Part::Backward)) continue;  // backward == input_grad
            register_kernel("BM_Layer/" + c.name + "/" + part_name(p) + "/segtile_cpu",
                            {m, c.size, p, Schedule::Cpu, {}, false}, opt, false);
        }
    }
    return run_registered_benchmarks(&argc, argv);
}
