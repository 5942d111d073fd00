// The kernel cache (generators/kernel_cache.h): kernels stored by one run
// load in the next and compute what JIT kernels compute; broken entries
// are compiled again, never run; without a linker kernels stay in memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <sstream>

#include "generators/jit_kernel.h"
#include "generators/kernel_cache.h"
#include "spec/builder.h"
#include "test/test_support.h"

namespace segtile {
namespace {

namespace fs = std::filesystem;

// Two segments (cut after the pool) and the head: five kernels.
Model small_model(int width = 5) {
    return ModelBuilder("cache_net", 3)
        .conv2d("conv1", 4, 3).padding(1)
        .relu("relu1")
        .max_pool("pool1", 2)
        .conv2d("conv2", width, 3).padding(1)
        .relu("relu2")
        .global_avg_pool("gap").flatten("flat").dense("fc", 2)
        .loss(LossKind::SoftmaxCrossEntropy)
        .build();
}

fs::path fresh_dir(const std::string &name) {
    const fs::path d = fs::path(::testing::TempDir()) / ("segtile_kernel_cache_" + name);
    fs::remove_all(d);
    return d;
}

// One tiled float64 step with the given kernels: the loss and every gradient.
struct Step {
    double loss = 0;
    std::vector<std::vector<double>> grads;
    int64_t halide_peak = 0;  // the kernels' own allocations, through the ledger's hooks
};

using MakeKernels = std::function<ModelKernels(MemoryLedger *)>;

Step run_step(const Model &m, const SegmentLayout &layout, const MakeKernels &make) {
    std::mt19937 rng(5);
    const int W = 12, H = 10, N = 1;
    Halide::Buffer<double> image = segtile::testing::random_buffer({W, H, m.input_channels, N}, rng);
    Halide::Buffer<> lt = segtile::testing::random_labels_or_target(m, W, H, N, rng);
    std::vector<Halide::Buffer<>> params = segtile::testing::random_params(m, rng);
    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, make(&ledger), {TileSize{5, 4}, TileSize{4, 3}}, &ledger,
                           halide_type_of<double>());
    ParamStore store(m, &ledger, halide_type_of<double>());
    for (size_t p = 0; p < params.size(); p++) {
        Halide::Buffer<double> src(params[p]);
        std::copy(src.begin(), src.end(), store.values[p].as<double>());
    }
    Tensor images({W, H, m.input_channels, N}, nullptr, MemoryLedger::Kind::Working, halide_type_of<double>());
    std::copy(image.begin(), image.end(), images.as<double>());
    Step s;
    s.loss = exec.step(images, Halide::Runtime::Buffer<>(*lt.raw_buffer()), store);
    for (auto &g : store.grads) s.grads.emplace_back(g.as<double>(), g.as<double>() + g.numel());
    s.halide_peak = ledger.halide_peak();
    return s;
}

void expect_close(const Step &got, const Step &want, double tol) {
    EXPECT_NEAR(got.loss, want.loss, tol * std::abs(want.loss));
    EXPECT_GT(got.halide_peak, 0);
    EXPECT_EQ(got.halide_peak, want.halide_peak);
    ASSERT_EQ(got.grads.size(), want.grads.size());
    for (size_t p = 0; p < got.grads.size(); p++)
        EXPECT_LE(segtile::testing::rel_diff(got.grads[p].data(), want.grads[p].data(), (int64_t)got.grads[p].size()),
                  tol)
            << "gradient " << p;
}

std::vector<fs::path> files(const fs::path &dir, const std::string &suffix, const std::string &containing = "") {
    std::vector<fs::path> out;
    for (const auto &e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 &&
            n.find(containing) != std::string::npos)
            out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

// Breaks a file as a disk or another program might, but by writing a new
// file and renaming it over the old one: this process still has the old
// library mapped (libraries are never closed), and writing into it in place
// would change the code it runs.
void replace_file(const fs::path &p, const std::function<void(std::string &)> &change) {
    std::ifstream in(p, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    change(bytes);
    const fs::path tmp = p.string() + ".broken";
    std::ofstream(tmp, std::ios::binary) << bytes;
    fs::rename(tmp, p);
}

void flip_byte(const fs::path &p, size_t at_fraction_of_1000) {
    replace_file(p, [&](std::string &b) { b[b.size() * at_fraction_of_1000 / 1000] ^= 0x5a; });
}

const Model &model() {
    static const Model m = small_model();
    return m;
}

SegmentLayout layout() { return make_segments(model(), {model().find_layer("pool1")}); }

// The JIT kernels' step, computed once for the tests below.
const Step &reference() {
    static const Step s = run_step(model(), layout(), [](MemoryLedger *l) { return jit_model_kernels(model(), layout(), Halide::Float(64), l); });
    return s;
}

TEST(KernelCache, SecondRunLoadsEveryKernelAndComputesTheSame) {
    const fs::path dir = fresh_dir("second_run");
    std::ostringstream first_log, log;
    Step first, second;
    {
        KernelCache cache(dir.string(), &first_log);
        first = run_step(model(), layout(), [&](MemoryLedger *l) { return cache.model_kernels(model(), layout(), Halide::Float(64), l, 2); });
        EXPECT_EQ(cache.counts().compiled, 5);
        EXPECT_EQ(cache.counts().loaded, 0);
    }
    expect_close(first, reference(), 1e-13);
    EXPECT_EQ(files(dir, ".json").size(), 6u);  // five kernels and the runtime
    // A progress line per kernel compiled, the last one saying all are ready.
    EXPECT_NE(first_log.str().find("(5 of 5 kernels ready)"), std::string::npos) << first_log.str();
    EXPECT_NE(first_log.str().find("compiled model 'cache_net', the backward kernel of segment 1"), std::string::npos)
        << first_log.str();
    {
        KernelCache cache(dir.string(), &log);
        second = run_step(model(), layout(), [&](MemoryLedger *l) { return cache.model_kernels(model(), layout(), Halide::Float(64), l, 2); });
        EXPECT_EQ(cache.counts().compiled, 0);
        EXPECT_EQ(cache.counts().loaded, 5);
        EXPECT_EQ(cache.summary(), "0 compiled, 5 loaded from " + dir.string());
    }
    EXPECT_EQ(second.loss, first.loss);  // the same libraries: bit for bit
    EXPECT_EQ(second.grads, first.grads);
    EXPECT_EQ(log.str(), "");  // loading prints nothing
    // Nothing temporary is left behind.
    for (const auto &e : fs::directory_iterator(dir))
        EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(KernelCache, BrokenEntriesAreCompiledAgainNeverRun) {
    const fs::path dir = fresh_dir("broken");
    {
        KernelCache cache(dir.string());
        cache.model_kernels(model(), layout(), Halide::Float(64), nullptr, 1);
    }
    auto libs = files(dir, ".so", "cache_net");
    ASSERT_EQ(libs.size(), 5u);
    flip_byte(libs[0], 500);                    // a flipped byte in the code
    replace_file(libs[1], [](std::string &b) { b.resize(b.size() / 2); });  // a truncated library
    fs::remove(libs[2]);                        // a library gone
    auto manifests = files(dir, ".json", "cache_net");
    ASSERT_EQ(manifests.size(), 5u);
    std::ofstream(manifests[4]) << "{ not json";  // a manifest cut short
    flip_byte(files(dir, ".so", "halide-runtime")[0], 300);  // the shared runtime too
    std::ostringstream log;
    Step again;
    {
        KernelCache cache(dir.string(), &log);
        again = run_step(model(), layout(), [&](MemoryLedger *l) { return cache.model_kernels(model(), layout(), Halide::Float(64), l, 2); });
        const KernelCacheCounts c = cache.counts();
        EXPECT_EQ(c.rejected, 4) << log.str();
        EXPECT_EQ(c.compiled, 4);
        EXPECT_EQ(c.loaded, 1);
    }
    expect_close(again, reference(), 1e-13);
    EXPECT_NE(log.str().find("compiling it again"), std::string::npos) << log.str();
    // Repaired: the next run loads all five.
    KernelCache cache(dir.string());
    cache.model_kernels(model(), layout(), Halide::Float(64), nullptr, 1);
    EXPECT_EQ(cache.counts().loaded, 5);
}

TEST(KernelCache, KeyHoldsWhatTheCodeDependsOn) {
    const Halide::Target t = Halide::get_host_target();
    const std::string k = kernel_cache_key(model(), layout(), KernelKind::Backward, 1, Halide::Float(64), t);
    EXPECT_EQ(k, kernel_cache_key(small_model(), layout(), KernelKind::Backward, 1, Halide::Float(64), t));
    const Model wider = small_model(6);
    const SegmentLayout wl = make_segments(wider, {wider.find_layer("pool1")});
    EXPECT_NE(k, kernel_cache_key(wider, wl, KernelKind::Backward, 1, Halide::Float(64), t));
    EXPECT_NE(k, kernel_cache_key(model(), layout(), KernelKind::Forward, 1, Halide::Float(64), t));
    EXPECT_NE(k, kernel_cache_key(model(), layout(), KernelKind::Backward, 0, Halide::Float(64), t));
    EXPECT_NE(k, kernel_cache_key(model(), layout(), KernelKind::Backward, 1, Halide::Float(32), t));
    EXPECT_NE(k, kernel_cache_key(model(), make_segments(model(), {model().find_layer("relu1")}),
                                  KernelKind::Backward, 1, Halide::Float(64), t));
    EXPECT_NE(k, kernel_cache_key(model(), make_segments(model(), {model().find_layer("pool1")}, false),
                                  KernelKind::Backward, 1, Halide::Float(64), t));
    EXPECT_NE(k, kernel_cache_key(model(), layout(), KernelKind::Backward, 1, Halide::Float(64),
                                  t.with_feature(Halide::Target::Profile)));
}

TEST(KernelCache, WithoutALinkerKernelsStayInMemory) {
    const fs::path dir = fresh_dir("no_linker");
    std::ostringstream log;
    KernelCache cache(dir.string(), &log, "/nonexistent/c++");
    const Step s = run_step(model(), layout(), [&](MemoryLedger *l) { return cache.model_kernels(model(), layout(), Halide::Float(64), l, 2); });
    expect_close(s, reference(), 1e-13);
    EXPECT_EQ(cache.counts().compiled, 5);
    EXPECT_EQ(cache.counts().in_memory, 5);
    const std::string text = log.str();
    EXPECT_NE(text.find("cannot run the linker '/nonexistent/c++'"), std::string::npos) << text;
    EXPECT_EQ(text.find("linker", text.find("linker") + 40), std::string::npos) << "warned once: " << text;
    EXPECT_TRUE(files(dir, ".json", "cache_net").empty());
}

// A cache folder that cannot be written (a file where the folder should
// be): kernels are compiled in memory, with one warning naming the folder.
TEST(KernelCache, UnwritableFolderKeepsKernelsInMemory) {
    const fs::path dir = fresh_dir("unwritable");
    fs::create_directories(dir);
    std::ofstream(dir / "file") << "not a folder";
    std::ostringstream log;
    KernelCache cache((dir / "file" / "kernels").string(), &log);
    auto k = cache.kernel(model(), layout(), KernelKind::Forward, 1, Halide::Float(64), nullptr);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(cache.counts().in_memory, 1);
    EXPECT_NE(log.str().find("cannot store kernels in " + (dir / "file" / "kernels").string()), std::string::npos)
        << log.str();
}

}  // namespace
}  // namespace segtile
