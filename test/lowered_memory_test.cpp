// The planner's memory model of the kernels' own allocations (their lowered
// code, evaluated at a tile's sizes) against the memory ledger's measurement
// of the same kernels running through the executor.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "schedules/cpu_schedule.h"
#include "autoscheduler/lowered_memory.h"
#include "generators/jit_kernel.h"
#include "generators/kernel_pipeline.h"
#include "runtime/executor.h"
#include "spec/kernel_call.h"

using namespace segtile;

namespace {

LoweredMemory lowered(const Model &m, const SegmentLayout &layout, KernelKind kind, int s) {
    KernelPipeline kp = kernel_pipeline(m, layout, kind, s, Halide::Float(32));
    const Halide::Target t = Halide::get_jit_target_from_environment();
    schedule_cpu(kp.outputs, t);
    return LoweredMemory(kp.outputs, kp.args, t);
}

}  // namespace

TEST(LoweredMemory, SimplePipelineMatchesMallocHook) {
    Halide::Param<int32_t> n("n");
    Halide::ImageParam in(Halide::Float(32), 1, "in");
    Halide::Var x("x");
    Halide::Func a("a"), b("b"), out("out");
    a(x) = in(x) * 2;
    b(x) = a(x) + a(x + 1) + n;
    out(x) = b(x) + b(x + 2);
    a.compute_root();
    b.compute_root();
    LoweredMemory mem({out}, {n, in}, Halide::get_jit_target_from_environment());
    EXPECT_EQ(mem.heap_allocations(), 2);
    KernelCall c;
    c.scalars["n"] = 1;
    c.buffers["in"] = {{0, 100003}};
    c.buffers["out"] = {{0, 100000}};
    // b covers out's 100000 + 2, a b's + 1; both live while b is computed.
    EXPECT_EQ(mem.peak(c), (100002 + 100003) * 4);
}

class TiledTinyCnn : public ::testing::TestWithParam<std::tuple<std::string, int, int, std::vector<TileSize>>> {};

TEST_P(TiledTinyCnn, KernelsMatchLedger) {
    Model m = load_model("tiny_cnn");
    const auto &[cuts, W, H, tiles] = GetParam();
    SegmentLayout layout = make_segments(m, parse_cuts(m, cuts));
    const auto shapes = m.shapes(W, H);
    const int threads = (int)std::thread::hardware_concurrency();

    // Predicted: the largest per-call peak of any kernel over all tiles.
    int64_t predicted = 0;
    const auto whole = whole_boxes(m, shapes, W, H);
    for (int s = 0; s < (int)layout.segments.size(); s++) {
        const auto &seg = layout.segments[s];
        const TileRegions r = tile_regions(m, seg, shapes, tiles[s]);
        for (KernelKind kind : {KernelKind::Forward, KernelKind::Backward}) {
            LoweredMemory mem = lowered(m, layout, kind, s);
            for (size_t ty = 0; ty < r.y[0].size(); ty++)
                for (size_t tx = 0; tx < r.x[0].size(); tx++) {
                    KernelCall c = tile_kernel_call(m, layout, kind, s, tile_windows(m, seg, r, tx, ty, whole), shapes, W, H);
                    c.threads = threads;
                    int unknown = -1;
                    predicted = std::max(predicted, mem.peak(c, &unknown));
                    EXPECT_EQ(unknown, 0);
                }
        }
    }
    {
        LoweredMemory head = lowered(m, layout, KernelKind::Head, 0);
        KernelCall c = head_kernel_call(m, layout, shapes, W, H);
        c.threads = threads;
        predicted = std::max(predicted, head.peak(c));
    }

    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, jit_model_kernels(m, layout, Halide::Float(32), &ledger), tiles, &ledger);
    Tensor images({W, H, 1, 1}, &ledger);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < images.numel(); i++) images.data()[i] = nd(rng);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 1;
    ParamStore params(m, &ledger);
    params.init_pytorch_default(1);
    exec.step(images, labels, params);
    const int64_t measured = ledger.halide_peak();
    std::printf("Halide peak: predicted %lld, measured %lld bytes\n", (long long)predicted, (long long)measured);
    EXPECT_GT(measured, 0);
    EXPECT_LE(measured, predicted);
    EXPECT_GE(measured, 0.9 * predicted);
}

INSTANTIATE_TEST_SUITE_P(Tiles, TiledTinyCnn,
                         ::testing::Values(std::make_tuple("pool1,pool2", 96, 80, std::vector<TileSize>{{24, 20}, {16, 10}, {0, 0}}),
                                           std::make_tuple("pool1,pool2", 128, 96, std::vector<TileSize>{{32, 32}, {16, 16}, {0, 0}}),
                                           std::make_tuple("pool2", 128, 96, std::vector<TileSize>{{16, 16}, {0, 0}})));
