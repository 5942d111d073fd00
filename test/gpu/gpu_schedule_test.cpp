// The GPU schedule checked without a GPU: each segment kernel of tiny_cnn
// and VGG16 is lowered for CUDA (PTX included) and its lowered code read.
// Every stage must run inside GPU block/thread loops (no Func computed by
// host loops, none by a lone GPU thread unless it is a scalar, no run-time
// check inside a kernel), and the
// buffers a call allocates on the device must be a per-tile quantity: they
// evaluate for concrete tile sizes, do not grow with the image, and fit
// the paper's 11 GiB device at the tile sizes the GPU check uses.
#include <gtest/gtest.h>

#include "schedules/conv_shape.h"
#include "schedules/gpu_schedule.h"
#include "generators/jit_kernel.h"
#include "generators/kernel_pipeline.h"
#include "spec/kernel_call.h"
#include "spec/region_map.h"
#include "test/gpu/lowered_gpu.h"

using namespace segtile;
using segtile::testing::allocation_total;
using segtile::testing::gpu_mapping;
using segtile::testing::lower_for;

namespace {

const Halide::Target kCuda("x86-64-linux-cuda-cuda_capability_86");

// One kernel's pipeline (the Funcs the generator and the JIT build), GPU-scheduled.
KernelPipeline gpu_probe(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment) {
    KernelPipeline p = kernel_pipeline(m, layout, kind, segment, Halide::Float(32));
    schedule_gpu(p.outputs, kCuda);
    return p;
}

// Names of the Funcs with no dimensions (losses, seeds): the only ones a
// single GPU thread may compute.
std::set<std::string> scalar_funcs(const std::vector<Halide::Func> &outputs) {
    std::vector<Halide::Internal::Function> fs;
    for (const auto &f : outputs) fs.push_back(f.function());
    std::set<std::string> names;
    for (const auto &[name, fn] : Halide::Internal::build_environment(fs))
        if (fn.dimensions() == 0) names.insert(name);
    return names;
}

void add_buffer(std::map<std::string, int64_t> &v, const std::string &name,
                const std::vector<std::pair<int64_t, int64_t>> &dims) {
    int64_t stride = 1;
    for (size_t d = 0; d < dims.size(); d++) {
        v[name + ".min." + std::to_string(d)] = dims[d].first;
        v[name + ".extent." + std::to_string(d)] = dims[d].second;
        v[name + ".stride." + std::to_string(d)] = stride;
        stride *= dims[d].second;
    }
}

// The argument values of one call on the tile of `tile` x `tile` pixels at
// tile grid position (tx, ty) of segment `segment`'s output, as the
// executor would pass them: scalars and every buffer's shape.
std::map<std::string, int64_t> call_values(const Model &m, const SegmentLayout &layout, int segment,
                                           const KernelPipeline &probe, int64_t width, int64_t height, int64_t tile,
                                           int64_t tx, int64_t ty) {
    const SegmentSpec &seg = layout.segments.at(segment);
    const int L = (int)m.layers.size();
    const auto shapes = m.shapes(width, height);
    auto extent = [&](int t, bool x) { return t == L ? (x ? width : height) : (x ? shapes[t].width : shapes[t].height); };
    auto channels = [&](int t) { return t == L ? (int64_t)m.input_channels : shapes[t].channels; };
    std::vector<Box<int64_t>> full(L + 1);
    for (int t = 0; t <= L; t++) full[t] = {{0, extent(t, true) - 1}, {0, extent(t, false) - 1}};
    const int primary = seg.outputs.back();
    std::vector<std::pair<int, Box<int64_t>>> targets;
    for (int o : seg.outputs) {
        auto span = [&](int64_t k, bool x) {
            const int64_t e = extent(o, x), p = extent(primary, x);
            return Span<int64_t>{std::min(k * tile, p) * e / p, std::min((k + 1) * tile, p) * e / p - 1};
        };
        targets.push_back({o, {span(tx, true), span(ty, false)}});
    }
    const auto need = required_boxes<int64_t, IntOps>(m, seg.first, seg.last, targets, full);
    std::map<std::string, int64_t> v = tile_scalars(m, TileWindows{targets, need}, width, height);
    const auto specs = m.params();
    size_t output = 0;
    for (const auto &a : probe.signature) {
        if (a.scalar) continue;
        // An output buffer is named after its Func (which Halide may have
        // renamed, e.g. "grad_in_pool1$4", when a process builds several).
        const std::string name = a.output ? probe.outputs[output++].name() : a.name;
        if (a.param >= 0) {
            std::vector<std::pair<int64_t, int64_t>> dims;
            for (int64_t d : specs[a.param].dims) dims.push_back({0, d});
            add_buffer(v, name, dims);
            continue;
        }
        const bool window = a.name.rfind("in_", 0) == 0 || a.name.rfind("grad_in_", 0) == 0;
        Box<int64_t> b = full[a.tensor];
        if (window) b = *need[a.tensor];
        for (const auto &[o, box] : targets)
            if (!window && o == a.tensor) b = box;
        add_buffer(v, name, {{b.x.lo, b.x.hi - b.x.lo + 1}, {b.y.lo, b.y.hi - b.y.lo + 1}, {0, channels(a.tensor)}, {0, 1}});
    }
    return v;
}

void expect_on_gpu(const KernelPipeline &p, const Halide::Internal::Stmt &s, const std::string &what) {
    const auto g = gpu_mapping(s);
    EXPECT_GT(g.kernels, 0) << what;
    EXPECT_TRUE(g.host_loops.empty()) << what << ": host loop " << *g.host_loops.begin();
    EXPECT_TRUE(g.host_stores.empty()) << what << ": computed on the host: " << *g.host_stores.begin();
    const auto scalars = scalar_funcs(p.outputs);
    for (const auto &f : g.single_thread_stores) EXPECT_TRUE(scalars.count(f)) << what << ": one GPU thread computes " << f;
    // A check Halide could not prove at compile time runs in the kernel,
    // and a failed one is a trap: CUDA_ERROR_LAUNCH_FAILED, the context lost.
    EXPECT_TRUE(g.kernel_asserts.empty()) << what << ": a run-time check inside a GPU kernel: " << g.kernel_asserts[0];
}

struct KernelCase {
    KernelKind kind;
    int segment;
    KernelPipeline probe;
    Halide::Internal::Stmt stmt;
};

std::vector<KernelCase> lower_all(const Model &m, const SegmentLayout &layout) {
    std::vector<KernelCase> out;
    for (int s = 0; s < (int)layout.segments.size(); s++)
        for (KernelKind k : {KernelKind::Forward, KernelKind::Backward}) {
            KernelPipeline p = gpu_probe(m, layout, k, s);
            Halide::Internal::Stmt st = lower_for(p.outputs, p.args, kCuda);
            out.push_back({k, s, std::move(p), st});
        }
    KernelPipeline head = gpu_probe(m, layout, KernelKind::Head, -1);
    Halide::Internal::Stmt st = lower_for(head.outputs, head.args, kCuda);
    out.push_back({KernelKind::Head, -1, std::move(head), st});
    return out;
}

std::string label(const KernelCase &c) {
    if (c.kind == KernelKind::Head) return "head";
    return std::string(c.kind == KernelKind::Forward ? "forward " : "backward ") + std::to_string(c.segment);
}

constexpr int64_t kGiB = int64_t(1) << 30;

}  // namespace

TEST(GpuSchedule, TinyCnnSegmentKernelsRunInGpuBlocksAndThreads) {
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, "pool1,pool2"));
    for (const auto &c : lower_all(m, layout)) {
        expect_on_gpu(c.probe, c.stmt, "tiny_cnn " + label(c));
        if (c.kind == KernelKind::Head) continue;  // per image, not per tile
        // Device buffers per call are per tile: the same interior tile of a
        // 4x larger image allocates the same, a tile of 4x the area more.
        const auto small = allocation_total(c.stmt, call_values(m, layout, c.segment, c.probe, 512, 512, 32, 1, 1));
        const auto large_image =
            allocation_total(c.stmt, call_values(m, layout, c.segment, c.probe, 1024, 1024, 32, 1, 1));
        const auto large_tile = allocation_total(c.stmt, call_values(m, layout, c.segment, c.probe, 512, 512, 64, 1, 1));
        ASSERT_TRUE(small.unknown.empty()) << label(c) << ": " << small.unknown[0];
        EXPECT_GT(small.allocations, 0) << label(c);
        EXPECT_EQ(small.bytes, large_image.bytes) << label(c) << ": allocations grow with the image";
        EXPECT_GT(large_tile.bytes, 2 * small.bytes) << label(c) << ": allocations do not follow the tile";
        EXPECT_LT(large_tile.bytes, 6 * small.bytes) << label(c);
    }
}

// Every convolution that is not a kernel's output (forwards, and the
// gathers of input gradients) runs its sums in registers, each thread a
// block of pixels x channels, as does each weight gradient's partial: at
// root a running sum went to global memory and back around every
// multiply-add.
TEST(GpuSchedule, ConvolutionsAccumulateInRegisters) {
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, "pool1"));
    int convs = 0;
    for (const KernelCase &c : lower_all(m, layout)) {
        std::vector<Halide::Internal::Function> fs;
        std::set<std::string> outputs;
        for (const auto &f : c.probe.outputs) {
            fs.push_back(f.function());
            outputs.insert(f.name());
        }
        const auto g = gpu_mapping(c.stmt);
        // Weight gradients' rfactor partials too, one sum per thread.
        if (c.kind == KernelKind::Backward)
            EXPECT_TRUE(std::any_of(g.thread_registers.begin(), g.thread_registers.end(),
                                    [](const std::string &n) { return n.find("weight") != std::string::npos &&
                                                                      n.find("_intm") != std::string::npos; }))
                << label(c) << ": no weight-gradient partial in registers";
        for (const auto &[name, fn] : Halide::Internal::build_environment(fs)) {
            if (outputs.count(name) || fn.has_extern_definition() || !schedule::conv_shaped(Halide::Func(fn))) continue;
            convs++;
            EXPECT_TRUE(g.thread_registers.count(name)) << label(c) << ": " << name << " is not in registers (" << g.thread_registers.size() << " are)";
        }
    }
    EXPECT_GE(convs, 3) << "tiny_cnn's three convs, forward and backward";
}

TEST(GpuSchedule, Vgg16SegmentKernelsFitElevenGiBPerTile) {
    Model m = load_model("vgg16");
    // The cuts of vgg16_cuda (models/CMakeLists.txt). The GPU check runs
    // 4096^2 to 20480^2 images in tiles that cover 1024^2 image pixels:
    // 128^2 of pool3, 64^2 of pool4 and of relu5_3.
    SegmentLayout layout = make_segments(m, parse_cuts(m, "pool3,pool4"));
    const int64_t image = 20480;
    for (const auto &c : lower_all(m, layout)) {
        expect_on_gpu(c.probe, c.stmt, "vgg16 " + label(c));
        if (c.kind == KernelKind::Head) continue;
        const int64_t t = c.segment == 0 ? 128 : 64;
        const auto a = allocation_total(c.stmt, call_values(m, layout, c.segment, c.probe, image, image, t, 3, 3));
        ASSERT_TRUE(a.unknown.empty()) << label(c) << ": " << a.unknown[0];
        EXPECT_LT(a.bytes, 11 * kGiB) << label(c);
        std::printf("vgg16 %s: %d device buffers, %.2f GiB per %lldx%lld tile\n", label(c).c_str(), a.allocations,
                    (double)a.bytes / kGiB, (long long)t, (long long)t);
    }
}

// A segment of one conv whose input is the segment's input: its weight's
// input channels follow the caller's buffers (run-time extents). Split
// from one flat loop, the weight copies' output channels were bounded by
// that loop's extent (2303 instead of 16 here; 174 GB for VGG16's conv4_2)
// and `segtile plan --target cuda` found no plan for VGG16.
TEST(GpuSchedule, ALoneConvCopiesItsWeightsAtTheirSize) {
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, "pool1,conv2"));
    ASSERT_EQ(layout.segments[1].first, layout.segments[1].last);
    KernelPipeline p = gpu_probe(m, layout, KernelKind::Backward, 1);
    const auto st = lower_for(p.outputs, p.args, kCuda);
    const auto a = allocation_total(st, call_values(m, layout, 1, p, 64, 64, 8, 1, 1));
    ASSERT_TRUE(a.unknown.empty()) << a.unknown[0];
    // conv2 (8 -> 16 channels, 3x3) on an 8x8 tile: 10x10x8 input window,
    // its gradient, the 8x8x16 output gradient and the weights' copies
    // and gradient partials, a few KiB each; the oversized copies were
    // 663 KB each.
    EXPECT_LT(a.bytes, 200 * 1024) << a.allocations << " device buffers";
    std::printf("tiny_cnn lone conv2 backward, 8x8 tile: %d device buffers, %lld bytes\n", a.allocations,
                (long long)a.bytes);
}

// Darknet19 (batch norm, leaky ReLU, 1x1 convs), with the cuts of
// darknet19_cuda (models/CMakeLists.txt): the GPU check's other network.
TEST(GpuSchedule, Darknet19SegmentKernelsRunInGpuBlocksAndThreads) {
    Model m = load_model("darknet19");
    SegmentLayout layout = make_segments(m, parse_cuts(m, "pool2,pool3,pool4,lrelu11,pool5,lrelu16"));
    for (const auto &c : lower_all(m, layout)) expect_on_gpu(c.probe, c.stmt, "darknet19 " + label(c));
}

TEST(GpuSchedule, RejectsTargetsWithoutGpu) {
    Halide::Func f("f");
    Halide::Var x("x");
    f(x) = x;
    EXPECT_THROW(schedule_gpu({f}, Halide::Target("x86-64-linux")), std::invalid_argument);
}

TEST(GpuSchedule, JitKernelCompilesForCuda) {
    // The JIT path (Schedule::Gpu) builds for CUDA without a GPU; running it needs one.
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, "pool1"));
    EXPECT_NO_THROW(JitKernel(m, layout, KernelKind::Backward, 1, Halide::Float(32), nullptr, {}, Schedule::Gpu));
}
