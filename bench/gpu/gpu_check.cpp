// segtile_gpu_check: one tiled training step of a shipped model with its
// CUDA kernel library, for the GPU check (scripts/gpu-check.sh). Built here
// and carried to a machine with a GPU but no Halide: it links only the AOT
// libraries and the segtile runtime.
//
//   segtile_gpu_check <model> <image size> <tile px> <out.json> [<device cap bytes> [<overlap> [compare]]]
//
// <model> is vgg16 or darknet19 (their CUDA libraries: models/CMakeLists.txt);
// the image is square, random (seed 1), label 1; <tile px> is the tile side in
// image pixels, the same image region for every segment (each segment's
// output tile is that divided by the segment's downsampling). Writes one JSON
// object: the step's seconds (after a small warm-up step that loads the CUDA
// modules), tiles run, the host memory it used, and the device memory the
// ledger counted (every cuMemAlloc of Halide's runtime, runtime/device_memory.h);
// with a cap, the executor refuses device memory past it and the run fails
// with the figures. <overlap> (DeviceOverlap): streams (default), host or
// sequential; `compare` runs the step again in the other two ways after,
// in the same process. The script also samples nvidia-smi from outside.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "spec/tiling.h"
#include "runtime/executor.h"
#include "darknet19_cuda.h"
#include "vgg16_cuda.h"

using namespace segtile;

namespace {

using KernelsFn = ModelKernels (*)(const Model &, MemoryLedger *);

struct Library {
    KernelsFn kernels;
    const char *(*cuts)();
};

const std::map<std::string, Library> &libraries() {
    static const std::map<std::string, Library> libs {
        {"vgg16", {vgg16_cuda_kernels, vgg16_cuda_cuts}},
        {"darknet19", {darknet19_cuda_kernels, darknet19_cuda_cuts}},
    };
    return libs;
}

// Normal noise, seeded per block so that the image does not depend on the
// thread count: one mt19937 fills a 20480^2 RGB image in about a minute, the
// machine's cores in seconds.
void fill_random(Tensor &t) {
    constexpr int64_t block = int64_t(1) << 22;
    const int64_t n = t.numel(), blocks = (n + block - 1) / block;
    std::atomic<int64_t> next {0};
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); w++)
        pool.emplace_back([&] {
            for (int64_t b; (b = next++) < blocks;) {
                std::mt19937 rng(uint32_t(1 + b));
                std::normal_distribution<float> nd;
                for (int64_t i = b * block; i < std::min(n, (b + 1) * block); i++) t.data()[i] = nd(rng);
            }
        });
    for (auto &th : pool) th.join();
}


// Seconds per kernel ("forward kernel, segment 0"; each call timed from
// its start to its outputs back on the host) and for the head: where a
// step's time goes, without a profiler on the GPU machine.
using KernelSeconds = std::map<std::string, double>;

double run_step(const Model &m, const Library &lib, int64_t size, int64_t tile_px, int64_t cap, MemoryLedger &ledger,
                int64_t &tiles_run, double &loss, DeviceOverlap overlap, KernelSeconds *kernel_seconds = nullptr,
                int64_t *on_two_streams = nullptr) {
    SegmentLayout layout = make_segments(m, parse_cuts(m, lib.cuts()));
    SegmentedExecutor exec(m, layout, lib.kernels(m, &ledger), tiles_for(m, layout, size, tile_px), &ledger);
    exec.set_device(true, cap, overlap);
    if (kernel_seconds)
        exec.set_trace([kernel_seconds](const ExecutorEvent &e) {
            if (e.category == "kernel" || e.category == "head")
                (*kernel_seconds)[e.name] += std::chrono::duration<double>(e.end - e.start).count();
        });
    ParamStore params(m, &ledger);
    params.init_pytorch_default(1);
    Tensor images({size, size, m.input_channels, 1}, &ledger, MemoryLedger::Kind::Checkpoint);
    fill_random(images);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 1;
    const auto t0 = std::chrono::steady_clock::now();
    loss = exec.step(images, labels, params);
    const auto t1 = std::chrono::steady_clock::now();
    tiles_run = exec.tiles_run();
    if (on_two_streams) *on_two_streams = exec.tiles_on_two_streams();
    return std::chrono::duration<double>(t1 - t0).count();
}

const std::map<std::string, DeviceOverlap> &overlaps() {
    static const std::map<std::string, DeviceOverlap> o{{"streams", DeviceOverlap::TwoStreams},
                                                        {"host", DeviceOverlap::HostWork},
                                                        {"sequential", DeviceOverlap::OneTileAtATime}};
    return o;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 5 || argc > 8 || (argc >= 7 && !overlaps().count(argv[6])) ||
        (argc == 8 && std::string(argv[7]) != "compare")) {
        std::fprintf(stderr,
                     "usage: %s vgg16|darknet19 <image size> <tile px> <out.json> [<device cap bytes> "
                     "[streams|host|sequential [compare]]]\n"
                     "  streams: the next tile's call queued on a second CUDA stream (the default)\n"
                     "  host: the host's work for the next tile overlaps the call\n"
                     "  sequential: one tile at a time\n"
                     "  compare: also run the step the other two ways, after\n",
                     argv[0]);
        return 2;
    }
    if (!libraries().count(argv[1])) {
        std::ofstream(argv[4]) << "{\"tool\": \"segtile\", \"model\": \"" << argv[1]
                               << "\", \"status\": \"not built\"}\n";
        std::fprintf(stderr, "%s: no CUDA library of this model in segtile_gpu_check (vgg16, darknet19)\n", argv[1]);
        return 2;
    }
    const std::string model = argv[1];
    const int64_t size = std::stoll(argv[2]), tile_px = std::stoll(argv[3]);
    const int64_t cap = argc >= 6 ? std::stoll(argv[5]) : 0;
    const std::string mode = argc >= 7 ? argv[6] : "streams";
    const bool compare = argc == 8;
    std::ofstream out(argv[4]);
    // Each tile allocates and frees the same device buffers: the CUDA
    // runtime keeps freed blocks for the next tile instead of cuMemFree and
    // cuMemAlloc (which synchronise) every call. Halide 21's default; said
    // here so that a change of default does not slow the check unseen.
    halide_reuse_device_allocations(nullptr, true);
    try {
        const Model m = load_model(model);
        const Library &lib = libraries().at(model);
        MemoryLedger warm_ledger;
        int64_t warm_tiles = 0;
        double warm_loss = 0;
        // In the main step's mode: a mode that fails on this GPU fails here
        // alone, and the script can rerun the check in another (OVERLAP).
        const double warm = run_step(m, lib, 64, 64, 0, warm_ledger, warm_tiles, warm_loss, overlaps().at(mode));
        MemoryLedger ledger;
        int64_t tiles = 0;
        double loss = 0;
        KernelSeconds kernels;
        int64_t on_two_streams = 0;
        const double seconds = run_step(m, lib, size, tile_px, cap, ledger, tiles, loss, overlaps().at(mode),
                                        &kernels, &on_two_streams);
        // The same step the other ways, after it: their ratios are what each
        // overlap gains (same kernels, same warm allocation cache).
        std::string compare_json;
        for (const auto &[other, overlap] : overlaps()) {
            if (!compare || other == mode) continue;
            MemoryLedger other_ledger;
            int64_t other_tiles = 0, other_streamed = 0;
            double other_loss = 0;
            const double sec = run_step(m, lib, size, tile_px, cap, other_ledger, other_tiles, other_loss, overlap,
                                        nullptr, &other_streamed);
            compare_json += ", \"" + other + "_seconds\": " + std::to_string(sec) + ", \"" + other +
                            "_loss\": " + std::to_string(other_loss) + ", \"" + other +
                            "_device_peak_bytes\": " + std::to_string(other_ledger.peak(MemoryLedger::Kind::Device)) +
                            ", \"" + other + "_tiles_on_two_streams\": " + std::to_string(other_streamed);
            std::printf("%s: %.2f s (%s %.2f s), loss %g\n", other.c_str(), sec, mode.c_str(), seconds, other_loss);
        }
        std::string by_kernel;
        for (const auto &[name, sec] : kernels)
            by_kernel += (by_kernel.empty() ? "\"" : ", \"") + name + "\": " + std::to_string(sec);
        out << "{\"tool\": \"segtile\", \"model\": \"" << model << "\", \"size\": " << size << ", \"tile_px\": " << tile_px
            << ", \"cuts\": \"" << lib.cuts() << "\", \"status\": \"ok\", \"overlap\": \"" << mode
            << "\", \"tiles_on_two_streams\": " << on_two_streams << ", \"seconds\": " << seconds
            << ", \"warmup_seconds\": " << warm << ", \"loss\": " << loss << ", \"tiles\": " << tiles
            << ", \"host_checkpoint_peak_bytes\": " << ledger.peak(MemoryLedger::Kind::Checkpoint)
            << ", \"host_working_peak_bytes\": " << ledger.peak(MemoryLedger::Kind::Working)
            << ", \"device_peak_bytes\": " << ledger.peak(MemoryLedger::Kind::Device) << ", \"device_cap_bytes\": " << cap
            << ", \"process_hwm_bytes\": " << process_high_water_mark() << compare_json << ", \"kernel_seconds\": {" << by_kernel
            << "}}\n";
        std::printf("%s %lld^2 tile %lld, %s: %.2f s, %lld tiles (%lld on two streams), loss %g\n", model.c_str(),
                    (long long)size, (long long)tile_px, mode.c_str(), seconds, (long long)tiles,
                    (long long)on_two_streams, loss);
        for (const auto &[name, sec] : kernels) std::printf("  %-28s %8.2f s\n", name.c_str(), sec);
        return 0;
    } catch (const std::exception &e) {
        out << "{\"tool\": \"segtile\", \"model\": \"" << model << "\", \"size\": " << size << ", \"tile_px\": " << tile_px
            << ", \"status\": \"error\", \"error\": \"";
        for (const char *c = e.what(); *c; c++) out << (*c == '"' || *c == '\\' ? ' ' : *c == '\n' ? ' ' : *c);
        out << "\"}\n";
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
