// Peak memory of one training step, tiled vs untiled, measured side by side
// in one process: the ledger's peak working memory (runtime tensors plus
// every Halide allocation, everything but the checkpoint store), the
// checkpoint store, and the process high-water mark. Also the largest
// relative difference between the two runs' gradients.
//
//   memory_bench --benchmark_filter=Vgg16 --benchmark_out=vgg16.json --benchmark_out_format=json
//
// Tiled runs first: the high-water mark only grows.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>

#include "generators/jit_kernel.h"
#include "runtime/executor.h"
#include "runtime/step_kernel.h"

namespace {

using namespace segtile;

struct Run {
    double seconds = 0, compile_seconds = 0;
    int64_t peak_working = 0, checkpoint_bytes = 0, high_water = 0;
    std::vector<std::vector<float>> grads;
};

void random_inputs(Tensor &image, Halide::Runtime::Buffer<int32_t> &labels) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < image.numel(); i++) image.data()[i] = nd(rng);
    labels(0) = 1;
}

std::vector<std::vector<float>> copy_grads(const ParamStore &p) {
    std::vector<std::vector<float>> g;
    for (const auto &t : p.grads)
        g.emplace_back(t.defined() ? std::vector<float>(t.data(), t.data() + t.numel()) : std::vector<float>{});
    return g;
}

// cuts empty and tile 0: the untiled reference step.
Run run_step(const Model &m, int size, const std::vector<int> &cuts, int64_t tile) {
    Run r;
    MemoryLedger ledger;
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<StepKernel> untiled;
    std::unique_ptr<SegmentedExecutor> exec;
    if (tile == 0) {
        untiled = std::make_unique<KernelStep>(
            m, std::make_unique<JitKernel>(m, untiled_layout(m, false), KernelKind::Head, 0, Halide::Float(32), &ledger));
    } else {
        SegmentLayout layout = make_segments(m, cuts, false);  // training: the parameters' gradients only
        // Deeper segments have more channels per pixel: halve the tile per
        // segment (not below 16) so every segment's working set is alike.
        std::vector<TileSize> tiles;
        for (size_t s = 0; s < layout.segments.size(); s++) {
            const int64_t t = std::max<int64_t>(tile >> s, std::min<int64_t>(tile, 16));
            tiles.push_back({t, t});
        }
        exec = std::make_unique<SegmentedExecutor>(m, layout, jit_model_kernels(m, layout, Halide::Float(32), &ledger),
                                                   tiles, &ledger);
    }
    r.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto shapes = m.shapes(size, size);
    const TensorShape &ps = shapes[m.loss.input_id];
    std::printf("%s %dx%d %s: image %s\n", m.name.c_str(), size, size, tile ? "tiled" : "untiled",
                format_bytes((int64_t)size * size * m.input_channels * 4).c_str());
    Tensor image({size, size, m.input_channels, 1}, &ledger);  // (W, H, C, 1)
    Tensor pred({ps.width, ps.height, ps.channels, 1}, &ledger);
    Halide::Runtime::Buffer<int32_t> labels(1);
    random_inputs(image, labels);
    ParamStore params(m, &ledger);
    params.init_pytorch_default(0);
    ledger.reset_peaks();
    const auto t1 = std::chrono::steady_clock::now();
    if (exec) {
        exec->step(image, labels, params, &pred);
        r.checkpoint_bytes = exec->checkpoint_bytes();
    } else {
        untiled->run(image, labels.raw_buffer(), params, pred, nullptr);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    r.peak_working = ledger.peak(MemoryLedger::Kind::Working);
    r.high_water = process_high_water_mark();
    r.grads = copy_grads(params);
    return r;
}

double max_rel_diff(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
    double worst = 0;
    for (size_t p = 0; p < a.size(); p++) {
        double ref = 0, diff = 0;
        for (size_t k = 0; k < a[p].size(); k++) {
            ref = std::max(ref, (double)std::abs(b[p][k]));
            diff = std::max(diff, (double)std::abs(a[p][k] - b[p][k]));
        }
        if (ref > 0) worst = std::max(worst, diff / ref);
    }
    return worst;
}

void report(benchmark::State &state, const Run &r) {
    state.SetIterationTime(r.seconds);
    state.counters["seconds_per_step"] = r.seconds;
    state.counters["compile_seconds"] = r.compile_seconds;
    state.counters["peak_working_bytes"] = (double)r.peak_working;
    state.counters["checkpoint_bytes"] = (double)r.checkpoint_bytes;
    state.counters["high_water_mark_bytes"] = (double)r.high_water;
}

// Tiled (cuts after every pool but the last; tiles of `tile` pixels on the
// first segment's output, halved per segment down to 16) then untiled,
// with the ratio of peaks and the gradients' agreement.
void BM_Vgg16TiledVsUntiled(benchmark::State &state) {
    const int size = (int)state.range(0);
    Model m = load_model("vgg16");
    const std::vector<int> cuts = {m.find_layer("pool1"), m.find_layer("pool2"), m.find_layer("pool3"),
                                   m.find_layer("pool4")};
    for (auto _ : state) {
        Run tiled = run_step(m, size, cuts, state.range(1));
        Run untiled = run_step(m, size, {}, 0);
        state.SetIterationTime(tiled.seconds + untiled.seconds);
        state.counters["tiled_seconds"] = tiled.seconds;
        state.counters["untiled_seconds"] = untiled.seconds;
        state.counters["tiled_peak_working_bytes"] = (double)tiled.peak_working;
        state.counters["untiled_peak_working_bytes"] = (double)untiled.peak_working;
        state.counters["peak_ratio_untiled_over_tiled"] = (double)untiled.peak_working / tiled.peak_working;
        state.counters["tiled_checkpoint_bytes"] = (double)tiled.checkpoint_bytes;
        state.counters["high_water_after_tiled_bytes"] = (double)tiled.high_water;
        state.counters["high_water_after_untiled_bytes"] = (double)untiled.high_water;
        state.counters["max_grad_rel_diff"] = max_rel_diff(tiled.grads, untiled.grads);
        std::printf("tiled: %.1f s, peak working %s, checkpoints %s, HWM %s\n", tiled.seconds,
                    format_bytes(tiled.peak_working).c_str(), format_bytes(tiled.checkpoint_bytes).c_str(),
                    format_bytes(tiled.high_water).c_str());
        std::printf("untiled: %.1f s, peak working %s, HWM %s\n", untiled.seconds,
                    format_bytes(untiled.peak_working).c_str(), format_bytes(untiled.high_water).c_str());
    }
}
BENCHMARK(BM_Vgg16TiledVsUntiled)
    ->ArgNames({"size", "tile"})
    ->Args({256, 32})
    ->Args({1024, 64})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
