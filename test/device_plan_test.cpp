// Planning for a GPU without one: the device memory of a CUDA kernel read
// off its lowered code (the Stmt before GPU offload), and plans whose cap is
// device memory (`segtile plan --target cuda`).
#include <gtest/gtest.h>

#include <thread>

#include "schedules/gpu_schedule.h"
#include "autoscheduler/kernel_memory.h"
#include "autoscheduler/lowered_memory.h"
#include "autoscheduler/planner.h"
#include "runtime/memory_ledger.h"

using namespace segtile;

namespace {

const Halide::Target kCuda("x86-64-linux-cuda-cuda_capability_86");

LoweredKernelMemory device_memory(const Model &m) {
    return LoweredKernelMemory(m, Halide::Float(32), [](const std::vector<Halide::Func> &o) { schedule_gpu(o, kCuda); },
                               kCuda);
}

PlanRequest device_request(int64_t w, int64_t h, int64_t cap) {
    PlanRequest r;
    r.width = w;
    r.height = h;
    r.memory_cap = cap;
    r.device = true;
    r.threads = (int)std::thread::hardware_concurrency();
    return r;
}

}  // namespace

TEST(DeviceMemoryModel, BuffersOfAGpuPipelineAreItsDeviceAllocations) {
    Halide::Param<int32_t> n("n");
    Halide::ImageParam in(Halide::Float(32), 1, "in");
    Halide::Var x("x"), xo("xo"), xi("xi");
    Halide::Func a("a"), b("b"), out("out");
    a(x) = in(x) * 2;
    b(x) = a(x) + a(x + 1) + n;
    out(x) = b(x) + b(x + 2);
    for (Halide::Func *f : {&a, &b}) f->compute_root().gpu_tile(x, xo, xi, 64, Halide::TailStrategy::GuardWithIf);
    out.gpu_tile(x, xo, xi, 64, Halide::TailStrategy::GuardWithIf);
    LoweredMemory mem({out}, {n, in}, kCuda);
    KernelCall c;
    c.scalars["n"] = 1;
    c.buffers["in"] = {{0, 100003}};
    c.buffers["out"] = {{0, 100000}};
    // On the device as on the CPU: b covers out's 100000 + 2, a b's + 1;
    // both live while b is computed. Nothing inside the kernels counts.
    EXPECT_EQ(mem.peak(c), (100002 + 100003) * 4);
    c.buffers["out"] = {{0, 1000}};
    EXPECT_EQ(mem.peak(c), (1002 + 1003) * 4);
}

TEST(DeviceMemoryModel, AFlatLoopPast32BitsIsACallThatCannotRun) {
    // The GPU schedule fuses x, y and channels into one loop; for a huge
    // tile its int32 extent overflows (VGG16's conv1 at a 6161^2 window:
    // 6161^2 x 64 > 2^31). That tile is unrunnable, not an error of the plan.
    Halide::ImageParam in(Halide::Float(32), 3, "in");
    Halide::Var x("x"), y("y"), c("c"), xy("xy"), f("f"), fo("fo"), fi("fi");
    Halide::Func a("a"), out("out");
    a(x, y, c) = in(x, y, c) * 2;
    out(x, y, c) = a(x, y, c) + a(x + 1, y, c);
    for (Halide::Func *fn : {&a, &out}) {
        fn->fuse(x, y, xy).fuse(xy, c, f).gpu_tile(f, fo, fi, 256, Halide::TailStrategy::GuardWithIf);
        if (fn == &a) fn->compute_root();
    }
    LoweredMemory mem({out}, {in}, kCuda);
    KernelCall c_small, c_huge;
    c_small.buffers["in"] = {{0, 101}, {0, 100}, {0, 4}};
    c_small.buffers["out"] = {{0, 100}, {0, 100}, {0, 4}};
    bool overflows = true;
    int unknown = -1;
    EXPECT_EQ(mem.peak(c_small, &unknown, &overflows), 101 * 100 * 4 * 4);
    EXPECT_FALSE(overflows);
    EXPECT_EQ(unknown, 0);
    c_huge.buffers["in"] = {{0, 30001}, {0, 30000}, {0, 4}};
    c_huge.buffers["out"] = {{0, 30000}, {0, 30000}, {0, 4}};
    mem.peak(c_huge, &unknown, &overflows);
    EXPECT_TRUE(overflows) << "30000^2 x 4 elements in one int32 loop";
}

TEST(DevicePlan, FitsTheCapWithOnlyTheRunningSegmentsParameters) {
    // One lowered-kernel cache for every cap (lowering is most of the time).
    Model m = load_model("tiny_cnn");
    LoweredKernelMemory exact = device_memory(m);
    const Plan free = make_plan(m, device_request(64, 64, 0), &exact);
    EXPECT_TRUE(free.device);
    EXPECT_EQ(free.fixed_bytes, 0) << "parameters and optimizer state stay on the host";
    EXPECT_GT(free.peak_bytes, 0);
    const int64_t half = free.peak_bytes / 2;
    try {
        const Plan p = make_plan(m, device_request(64, 64, half), &exact);
        EXPECT_LE(p.peak_bytes, half) << plan_table(p, m);
        EXPECT_TRUE(p.device);
        for (const auto &s : p.segments) EXPECT_TRUE(s.exact) << "device memory from the lowered CUDA kernels";
    } catch (const PlanError &e) {
        EXPECT_GT(e.smallest_feasible_cap, half) << "half the untiled peak is below the smallest feasible cap";
    }
    // Below the smallest feasible cap: the error names a larger one, which plans.
    try {
        make_plan(m, device_request(64, 64, 1024), &exact);
        FAIL() << "1 KiB of device memory cannot hold a conv layer's weights";
    } catch (const PlanError &e) {
        EXPECT_GT(e.smallest_feasible_cap, 1024);
        EXPECT_NE(std::string(e.what()).find("device-memory cap"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(format_bytes(e.smallest_feasible_cap)), std::string::npos) << e.what();
        const Plan p = make_plan(m, device_request(64, 64, e.smallest_feasible_cap), &exact);
        EXPECT_LE(p.peak_bytes, e.smallest_feasible_cap);
    }
    // The host plan counts every parameter, gradient and optimizer state in
    // working memory: a different model, not this one.
    PlanRequest host = device_request(64, 64, 0);
    host.device = false;
    const Plan h = make_plan(m, host, nullptr);
    EXPECT_FALSE(h.device);
    EXPECT_GT(h.fixed_bytes, 0);
}

TEST(DevicePlan, PerCallDeviceMemoryDoesNotGrowWithTheImage) {
    // The device holds one tile's buffers: the same tiles on a 4x larger
    // image need the same device memory (checkpoints stay on the host).
    Model m = load_model("tiny_cnn");
    LoweredKernelMemory exact = device_memory(m);
    const std::vector<int> cuts = parse_cuts(m, "pool1,pool2");
    const std::vector<TileSize> tiles{{8, 8}, {4, 4}, {2, 2}};
    const Plan small = evaluate_plan(m, device_request(128, 128, 0), cuts, tiles, &exact);
    const Plan large = evaluate_plan(m, device_request(256, 256, 0), cuts, tiles, &exact);
    ASSERT_EQ(small.segments.size(), large.segments.size());
    for (size_t s = 0; s < small.segments.size(); s++) {
        EXPECT_EQ(small.segments[s].forward_bytes, large.segments[s].forward_bytes) << "segment " << s;
        EXPECT_EQ(small.segments[s].backward_bytes, large.segments[s].backward_bytes) << "segment " << s;
    }
    EXPECT_GT(large.checkpoint_bytes, 3 * small.checkpoint_bytes);
    // And it grows with the tile.
    const Plan bigger = evaluate_plan(m, device_request(256, 256, 0), cuts, {{16, 16}, {8, 8}, {4, 4}}, &exact);
    EXPECT_GT(bigger.segments[0].backward_bytes, large.segments[0].backward_bytes);
}

TEST(DevicePlan, RoundTripsThroughJsonAsACudaPlan) {
    Model m = load_model("tiny_cnn");
    const Plan p = make_plan(m, device_request(64, 64, 0), nullptr);
    const std::string text = plan_to_json(p);
    EXPECT_NE(text.find("\"target\": \"cuda\""), std::string::npos) << text;
    const Plan q = plan_from_json(text, m, "test");
    EXPECT_TRUE(q.device);
    EXPECT_EQ(q.peak_bytes, p.peak_bytes);
    EXPECT_NE(plan_table(q, m).find("device memory"), std::string::npos) << plan_table(q, m);
}

TEST(DevicePlan, GpuRatesMakeRecomputingCheaperThanCpuRates) {
    // At CPU rates a GPU plan of VGG16 at 1024^2 under 2 GiB cut before
    // nearly every conv: recomputing a forward looked as dear as on the
    // CPU. At the GPU's (device_time_rates, fitted to an H200) the same
    // cap plans fewer segments, and the plan is predicted faster at the
    // GPU's rates than the CPU-rate plan is.
    Model m = load_model("vgg16");
    PlanRequest gpu = device_request(1024, 1024, int64_t(2) << 30);
    gpu.image_gradient = false;
    gpu.rates = device_time_rates();
    PlanRequest cpu = gpu;
    cpu.rates = TimeRates{};
    const Plan at_gpu = make_plan(m, gpu, nullptr), at_cpu = make_plan(m, cpu, nullptr);
    EXPECT_LT(at_gpu.cuts.size(), at_cpu.cuts.size()) << at_gpu.cuts_string() << " against " << at_cpu.cuts_string();
    EXPECT_LE(at_gpu.peak_bytes, gpu.memory_cap);
    const Plan cpu_plan_at_gpu_rates = evaluate_plan(m, gpu, at_cpu.cuts, at_cpu.tile_sizes(), nullptr);
    EXPECT_LT(at_gpu.seconds, cpu_plan_at_gpu_rates.seconds);
}
