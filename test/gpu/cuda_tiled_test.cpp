// CUDA AOT libraries (segtile_add_model(... TARGET cuda)) in a program
// without libHalide. Everywhere: they link next to the CPU libraries, and
// the executor's device path
// changes nothing for CPU kernels. With a GPU: a tiled training step
// on the device equals the same step on the CPU, and on the device a tiled
// VGG16 step equals the one-tile step. Without a GPU those are skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "runtime/device_memory.h"
#include "runtime/executor.h"
#include "test/gpu/cuda_device.h"
#include "tiny_cnn_cuda.h"
#include "tiny_cnn_tiled.h"
#include "vgg16_cuda.h"

using namespace segtile;

namespace {

struct StepResult {
    double loss = 0;
    std::vector<std::vector<float>> grads;
    std::vector<float> grad_image;
    int64_t tiles = 0;
    int64_t tiles_on_two_streams = 0;
    int64_t working_peak = 0;  // host working memory (the ledger)
    int64_t device_peak = 0;
};

StepResult run_step(const Model &m, const SegmentLayout &layout, ModelKernels kernels, std::vector<TileSize> tiles,
                    bool device, const Tensor &images, const Halide::Runtime::Buffer<int32_t> &labels, int seed,
                    DeviceOverlap overlap = DeviceOverlap::HostWork, int64_t device_cap = 0) {
    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, std::move(kernels), std::move(tiles), &ledger);
    exec.set_device(device, device_cap, overlap);
    ParamStore params(m, &ledger);
    params.init_pytorch_default(seed);
    // Libraries built for training (NO_IMAGE_GRADIENT) give none.
    Tensor grad_image;
    if (exec.image_gradient()) grad_image = Tensor(images.dims(), &ledger);
    StepResult r;
    r.loss = exec.step(images, labels, params, nullptr, exec.image_gradient() ? &grad_image : nullptr);
    for (auto &g : params.grads) r.grads.emplace_back(g.data(), g.data() + g.numel());
    if (grad_image.defined()) r.grad_image.assign(grad_image.data(), grad_image.data() + grad_image.numel());
    r.tiles = exec.tiles_run();
    r.tiles_on_two_streams = exec.tiles_on_two_streams();
    r.working_peak = ledger.peak(MemoryLedger::Kind::Working);
    r.device_peak = ledger.peak(MemoryLedger::Kind::Device);
    return r;
}

double rel_diff(const std::vector<float> &a, const std::vector<float> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

Tensor random_images(std::vector<int64_t> dims, int seed) {
    Tensor t(dims, nullptr);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < t.numel(); i++) t.data()[i] = nd(rng);
    return t;
}

void expect_same_step(const StepResult &a, const StepResult &b, const ParamStore &names, double tol) {
    EXPECT_NEAR(a.loss, b.loss, tol * std::abs(b.loss));
    EXPECT_LE(rel_diff(a.grad_image, b.grad_image), tol) << "image gradient";
    ASSERT_EQ(a.grads.size(), b.grads.size());
    for (size_t p = 0; p < a.grads.size(); p++)
        EXPECT_LE(rel_diff(a.grads[p], b.grads[p]), tol) << names.specs()[p].name;
}

// Counts the inputs that reach a call clean: Halide copies an input into a
// fresh device allocation only when its host side is marked dirty, so on
// the device path a clean one would be read as uninitialised device memory.
class InputFlagsKernel : public Kernel {
public:
    InputFlagsKernel(std::unique_ptr<Kernel> k, int *clean) : k_(std::move(k)), clean_(clean) {}
    const std::vector<KernelArg> &signature() const override { return k_->signature(); }
    void call(const std::vector<void *> &args) override {
        const auto &sig = signature();
        for (size_t i = 0; i < sig.size(); i++) {
            if (sig[i].scalar || sig[i].output) continue;
            const auto *b = static_cast<const halide_buffer_t *>(args[i]);
            if (b->device == 0 && !b->host_dirty()) (*clean_)++;
        }
        k_->call(args);
    }

private:
    std::unique_ptr<Kernel> k_;
    int *clean_;
};

// Records the stream each call was given (null: the default), in call order
// across all kernels, and which kernel made it.
struct StreamLog {
    std::vector<std::pair<const Kernel *, const DeviceStream *>> calls;
};

class StreamLogKernel : public Kernel {
public:
    StreamLogKernel(std::unique_ptr<Kernel> k, StreamLog *log) : k_(std::move(k)), log_(log) {}
    const std::vector<KernelArg> &signature() const override { return k_->signature(); }
    bool set_device_stream(DeviceStream *stream) override {
        stream_ = stream;
        return k_->set_device_stream(stream);
    }
    void call(const std::vector<void *> &args) override {
        log_->calls.emplace_back(this, stream_);
        k_->call(args);
    }

private:
    std::unique_ptr<Kernel> k_;
    StreamLog *log_;
    DeviceStream *stream_ = nullptr;
};

// Every kernel of `k` inside a Wrapper(kernel, arg).
template <typename Wrapper, typename Arg>
ModelKernels wrap_kernels(ModelKernels k, Arg arg) {
    for (auto *list : {&k.forward, &k.backward})
        for (auto &kernel : *list)
            if (kernel) kernel = std::make_unique<Wrapper>(std::move(kernel), arg);
    k.head = std::make_unique<Wrapper>(std::move(k.head), arg);
    return k;
}

ModelKernels log_streams(ModelKernels k, StreamLog *log) { return wrap_kernels<StreamLogKernel>(std::move(k), log); }

ModelKernels count_clean_inputs(ModelKernels k, int *clean) {
    return wrap_kernels<InputFlagsKernel>(std::move(k), clean);
}

// tiny_cnn cut as its tiled CPU library, one random 40 x 33 image.
struct TinyCnnCase {
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, tiny_cnn_tiled_cuts()));
    Tensor images;
    Halide::Runtime::Buffer<int32_t> labels{1};
    TinyCnnCase(int seed, int label) : images(random_images({40, 33, 1, 1}, seed)) { labels(0) = label; }
};

void expect_same_bits(const StepResult &a, const StepResult &b) {
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.grads, b.grads);
    EXPECT_EQ(a.grad_image, b.grad_image);
}

}  // namespace

TEST(CudaLibraries, DevicePathBindsTheSameBuffers) {
    // The executor's device path (parameters bound once per segment, outputs
    // synchronised after each call) with CPU kernels, where no buffer has a
    // device allocation: the same step to the bit. And no input reaches a
    // kernel clean there (what the H200 found on 2026-12-04: weights never
    // copied to the device); the host path, which needs no copies, leaves
    // them clean, so the count can fail.
    TinyCnnCase c(9, 0);
    const std::vector<TileSize> tiles{{5, 5}, {4, 4}, {3, 3}};
    int clean_host = 0, clean_device = 0;
    StepResult host = run_step(c.m, c.layout, count_clean_inputs(tiny_cnn_tiled_kernels(c.m, nullptr), &clean_host),
                               tiles, false, c.images, c.labels, 2);
    StepResult device = run_step(c.m, c.layout, count_clean_inputs(tiny_cnn_tiled_kernels(c.m, nullptr), &clean_device),
                                 tiles, true, c.images, c.labels, 2);
    EXPECT_GT(clean_host, 0);
    EXPECT_EQ(clean_device, 0) << "inputs a device kernel would read uninitialised";
    expect_same_bits(device, host);
}

TEST(CudaLibraries, OverlappedDevicePathEqualsOneTileAtATime) {
    // On the device the executor makes tile k+1's windows and adds tile
    // k-1's gradients while tile k's call runs. With CPU kernels (the call
    // is the work) the step must be the same to the bit as one tile at a
    // time, and the host must hold two tiles' staging at once: proof that
    // the overlapped order ran.
    TinyCnnCase c(11, 1);
    const std::vector<TileSize> tiles{{7, 6}, {4, 5}, {3, 3}};
    StepResult one = run_step(c.m, c.layout, tiny_cnn_tiled_kernels(c.m, nullptr), tiles, true, c.images, c.labels, 6,
                              DeviceOverlap::OneTileAtATime);
    StepResult overlapped =
        run_step(c.m, c.layout, tiny_cnn_tiled_kernels(c.m, nullptr), tiles, true, c.images, c.labels, 6);
    EXPECT_EQ(overlapped.tiles, one.tiles);
    expect_same_bits(overlapped, one);
    EXPECT_GT(overlapped.working_peak, one.working_peak) << "two tiles' windows alive at once";
}

TEST(CudaLibraries, TwoStreamsQueueTheNextTileBeforeThisOnesOutputsComeBack) {
    // DeviceOverlap::TwoStreams with CPU AOT kernels (their calls are the
    // work, and they ignore the stream): the step is the same to the bit as
    // one tile at a time; the calls of each segment alternate between two
    // streams from the first; and the host holds three tiles' windows at
    // once (one collected, one in flight, the next made), more than HostWork.
    ASSERT_TRUE(device_streams_available()) << "the CUDA runtime linked here takes segtile's stream";
    TinyCnnCase c(13, 0);
    const std::vector<TileSize> tiles{{7, 6}, {4, 5}, {3, 3}};
    StepResult one = run_step(c.m, c.layout, tiny_cnn_tiled_kernels(c.m, nullptr), tiles, true, c.images, c.labels, 8,
                              DeviceOverlap::OneTileAtATime);
    StepResult host = run_step(c.m, c.layout, tiny_cnn_tiled_kernels(c.m, nullptr), tiles, true, c.images, c.labels, 8,
                               DeviceOverlap::HostWork);
    StreamLog log;
    StepResult two = run_step(c.m, c.layout, log_streams(tiny_cnn_tiled_kernels(c.m, nullptr), &log), tiles, true,
                              c.images, c.labels, 8, DeviceOverlap::TwoStreams);
    expect_same_bits(two, one);
    EXPECT_EQ(host.tiles_on_two_streams, 0);
    EXPECT_GT(two.working_peak, host.working_peak) << "three tiles' windows alive at once";
    // Runs of calls of one kernel: one per segment, forward and backward.
    std::vector<std::vector<const DeviceStream *>> runs;
    const Kernel *last = nullptr;
    for (const auto &[kernel, stream] : log.calls) {
        if (kernel != last) runs.emplace_back();
        runs.back().push_back(stream);
        last = kernel;
    }
    int64_t multi_tile_runs = 0, tile_calls = 0;
    const DeviceStream *s0 = nullptr, *s1 = nullptr;
    for (const auto &r : runs) {
        if (r.size() == 1 && r[0] == nullptr) continue;  // the head: the default stream
        tile_calls += (int64_t)r.size();
        ASSERT_GT(r.size(), 1u) << "every segment has several tiles here";
        multi_tile_runs++;
        if (!s0) s0 = r[0], s1 = r[1];
        for (size_t k = 0; k < r.size(); k++) EXPECT_EQ(r[k], k % 2 ? s1 : s0) << "call " << k << " of a segment";
    }
    EXPECT_EQ(tile_calls, two.tiles);
    EXPECT_NE(s0, nullptr);
    EXPECT_NE(s1, nullptr);
    EXPECT_NE(s0, s1);
    EXPECT_EQ(two.tiles_on_two_streams, two.tiles - multi_tile_runs) << "every tile but each segment's first";
}

TEST(CudaLibraries, TinyCnnTiledStepOnTheGpuEqualsTheCpu) {
    if (!segtile::testing::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, tiny_cnn_cuda_cuts()));
    ASSERT_STREQ(tiny_cnn_cuda_cuts(), tiny_cnn_tiled_cuts());
    const Tensor images = random_images({61, 45, 1, 2}, 5);
    Halide::Runtime::Buffer<int32_t> labels(2);
    labels(0) = 1;
    labels(1) = 0;
    const std::vector<TileSize> tiles{{9, 7}, {4, 6}, {3, 3}};  // partial edge tiles
    StepResult cpu = run_step(m, layout, tiny_cnn_tiled_kernels(m, nullptr), tiles, false, images, labels, 3);
    StepResult gpu = run_step(m, layout, tiny_cnn_cuda_kernels(m, nullptr), tiles, true, images, labels, 3);
    EXPECT_EQ(gpu.tiles, cpu.tiles);
    ParamStore names(m, nullptr);
    expect_same_step(gpu, cpu, names, 1e-5);
    StepResult two = run_step(m, layout, tiny_cnn_cuda_kernels(m, nullptr), tiles, true, images, labels, 3,
                              DeviceOverlap::TwoStreams);
    EXPECT_GT(two.tiles_on_two_streams, 0);
    expect_same_step(two, cpu, names, 1e-5);
}

TEST(CudaLibraries, Vgg16TiledOnTheGpuEqualsOneTile) {
    if (!segtile::testing::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
    Model m = load_model("vgg16");
    SegmentLayout layout = make_segments(m, parse_cuts(m, vgg16_cuda_cuts()));
    const Tensor images = random_images({96, 64, 3, 1}, 7);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 1;
    StepResult whole = run_step(m, layout, vgg16_cuda_kernels(m, nullptr), {{0, 0}, {0, 0}, {0, 0}}, true, images,
                                labels, 4);
    StepResult tiled = run_step(m, layout, vgg16_cuda_kernels(m, nullptr), {{5, 3}, {3, 2}, {2, 3}}, true, images,
                                labels, 4);
    EXPECT_GT(tiled.tiles, 3 * whole.tiles);
    ParamStore names(m, nullptr);
    expect_same_step(tiled, whole, names, 1e-4);
    StepResult two = run_step(m, layout, vgg16_cuda_kernels(m, nullptr), {{5, 3}, {3, 2}, {2, 3}}, true, images,
                              labels, 4, DeviceOverlap::TwoStreams);
    EXPECT_GT(two.tiles_on_two_streams, 0);
    expect_same_step(two, whole, names, 1e-4);
    // A cap that the biggest call fits alone but not twice: that segment
    // (at least) runs on one stream, and the step fits.
    StepResult capped = run_step(m, layout, vgg16_cuda_kernels(m, nullptr), {{5, 3}, {3, 2}, {2, 3}}, true, images,
                                 labels, 4, DeviceOverlap::TwoStreams, tiled.device_peak);
    EXPECT_LT(capped.tiles_on_two_streams, two.tiles_on_two_streams);
    EXPECT_LE(capped.device_peak, tiled.device_peak);
    expect_same_step(capped, whole, names, 1e-4);
}

TEST(CudaLibraries, DeviceMemoryIsCountedAndCapped) {
    if (!segtile::testing::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, tiny_cnn_cuda_cuts()));
    const Tensor images = random_images({61, 45, 1, 1}, 5);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 1;
    const std::vector<TileSize> tiles{{9, 7}, {4, 6}, {3, 3}};
    auto step = [&](int64_t cap, MemoryLedger &ledger) {
        SegmentedExecutor exec(m, layout, tiny_cnn_cuda_kernels(m, &ledger), tiles, &ledger);
        exec.set_device(true, cap);
        ParamStore params(m, &ledger);
        params.init_pytorch_default(3);
        return exec.step(images, labels, params);
    };
    MemoryLedger free_ledger;
    step(0, free_ledger);
    const int64_t used = free_ledger.peak(MemoryLedger::Kind::Device);
    EXPECT_GT(used, 0) << "the CUDA runtime's allocations reach the ledger";
    std::string live;
    for (int64_t b : device_allocations_of(&free_ledger)) live += " " + std::to_string(b);
    EXPECT_EQ(free_ledger.current(MemoryLedger::Kind::Device), 0)
        << "every tile's device buffers are freed; still live (bytes):" << live;
    MemoryLedger capped;
    EXPECT_NO_THROW(step(used, capped)) << "exactly the uncapped peak fits";
    EXPECT_LE(capped.peak(MemoryLedger::Kind::Device), used);
    MemoryLedger tight;
    EXPECT_THROW(step(used / 4, tight), DeviceMemoryError);
    EXPECT_LE(tight.peak(MemoryLedger::Kind::Device), used / 4);
}
