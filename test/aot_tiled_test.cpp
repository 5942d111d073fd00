// The AOT libraries built by segtile_add_model (a user links them; no
// libHalide at run time) train like the untiled step. In float32 the
// yardstick is the float64 untiled reference: the untiled float32 step
// carries its own rounding error (a bias gradient summed over every pixel
// in one long float32 sum is ~2e-5 off), which the tiled run, summing per
// tile, does not share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <sys/resource.h>

#include "autoscheduler/planner.h"
#include "generators/training_step.h"
#include "runtime/executor.h"
#include "runtime/step_kernel.h"
#include "tiny_cnn_step.h"
#include "test/test_support.h"
#include "tiny_cnn_tiled.h"

using namespace segtile;

namespace {

Halide::Buffer<double> to_f64(const Tensor &t) {
    Halide::Buffer<double> b(std::vector<int>(t.dims().begin(), t.dims().end()));
    std::copy(t.data(), t.data() + t.numel(), b.begin());
    return b;
}

}  // namespace

TEST(AotTiled, TinyCnnThreeSegmentsMatchesUntiled) {
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, tiny_cnn_tiled_cuts()));
    ASSERT_EQ(layout.segments.size(), 3u);
    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, tiny_cnn_tiled_kernels(m, &ledger), {{9, 7}, {4, 6}, {3, 3}}, &ledger);
    auto untiled = aot_step(m, tiny_cnn_step_argv, tiny_cnn_step_metadata, &ledger);

    const int W = 61, H = 45, N = 2;  // partial tiles at the right and bottom edges
    Tensor images({W, H, 1, N}, &ledger), grad_ref({W, H, 1, N}, &ledger), grad_tiled({W, H, 1, N}, &ledger);
    Tensor pred_ref({1, 1, 2, N}, &ledger), pred_tiled({1, 1, 2, N}, &ledger);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < images.numel(); i++) images.data()[i] = nd(rng);
    Halide::Runtime::Buffer<int32_t> labels(N);
    labels(0) = 1;
    labels(1) = 0;

    ParamStore ref(m, &ledger), tiled(m, &ledger);
    ref.init_pytorch_default(3);
    tiled.init_pytorch_default(3);
    const float loss_ref = untiled->run(images, labels.raw_buffer(), ref, pred_ref, &grad_ref);
    const double loss = exec.step(images, labels, tiled, &pred_tiled, &grad_tiled);
    EXPECT_GT(exec.tiles_run(), 20) << "every segment ran several tiles";

    // Float64 untiled reference on the same inputs.
    JitTrainingStep f64(m, Halide::Float(64));
    std::vector<Halide::Buffer<>> ps;
    for (auto &v : ref.values) ps.push_back(to_f64(v));
    Halide::Buffer<int32_t> lb(N);
    lb(0) = 1;
    lb(1) = 0;
    auto exact = f64.run(to_f64(images), lb, ps);

    EXPECT_NEAR(loss, exact.loss, 1e-6 * exact.loss);
    EXPECT_NEAR(loss, loss_ref, 1e-5 * loss_ref);
    Halide::Buffer<double> ep(exact.prediction), eg(exact.grad_image);
    EXPECT_LE(segtile::testing::rel_diff(pred_tiled.data(), ep.begin(), pred_tiled.numel()), 1e-5);
    EXPECT_LE(segtile::testing::rel_diff(grad_tiled.data(), eg.begin(), grad_tiled.numel()), 1e-5) << "image gradient";
    EXPECT_LE(segtile::testing::rel_diff(grad_tiled.data(), grad_ref.data(), grad_tiled.numel()), 1e-5) << "image gradient vs f32";
    for (size_t p = 0; p < ref.grads.size(); p++) {
        Halide::Buffer<double> g(exact.grads[p]);
        const int64_t n = g.number_of_elements();
        EXPECT_LE(segtile::testing::rel_diff(tiled.grads[p].data(), g.begin(), n), 1e-5) << ref.specs()[p].name;
        EXPECT_LE(segtile::testing::rel_diff(tiled.grads[p].data(), ref.grads[p].data(), n), 5e-5) << ref.specs()[p].name << " vs f32";
    }
    EXPECT_GT(ledger.halide_peak(), 0);
    EXPECT_GT(ledger.peak(MemoryLedger::Kind::Checkpoint), 0);
}

// Checkpoints in memory-mapped files give the same steps, and leave no file behind.
TEST(AotTiled, MemoryMappedCheckpointsMatchInMemory) {
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, tiny_cnn_tiled_cuts()));
    char tmpl[] = "/tmp/segtile-mmap-XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const int W = 40, H = 33;
    Tensor images({W, H, 1, 1}, nullptr);
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < images.numel(); i++) images.data()[i] = nd(rng);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 1;
    std::vector<std::vector<float>> grads[2];
    double losses[2];
    for (int mapped = 0; mapped < 2; mapped++) {
        MemoryLedger ledger;
        SegmentedExecutor exec(m, layout, tiny_cnn_tiled_kernels(m, &ledger), {{5, 5}, {4, 4}, {3, 3}}, &ledger,
                               halide_type_of<float>(), mapped ? dir : "");
        ParamStore params(m, &ledger);
        params.init_pytorch_default(4);
        // Two steps: the second finds the store's gradients dirty and zeroes
        // them (mapped: by punching holes in the files).
        exec.step(images, labels, params);
        losses[mapped] = exec.step(images, labels, params);
        for (auto &g : params.grads) grads[mapped].emplace_back(g.data(), g.data() + g.numel());
        EXPECT_GT(ledger.peak(MemoryLedger::Kind::Checkpoint), 0);
        std::error_code ec;
        EXPECT_TRUE(std::filesystem::is_empty(dir, ec)) << "checkpoint files are unlinked once mapped";
    }
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_EQ(grads[0], grads[1]);
    std::error_code ec;
    EXPECT_TRUE(std::filesystem::is_empty(dir, ec)) << "checkpoint files are removed";
    std::filesystem::remove_all(dir, ec);
}

namespace {

// Resident bytes (/proc/self/smaps) of the mappings whose header line
// (address range, ..., path) `chosen` picks.
template <typename Chosen>
int64_t resident_bytes_of_mappings(Chosen chosen) {
    std::ifstream f("/proc/self/smaps");
    std::string line;
    bool in = false;
    int64_t n = 0;
    while (std::getline(f, line)) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
            in = chosen(lo, line);
            continue;
        }
        if (in && line.rfind("Rss:", 0) == 0) n += std::atoll(line.c_str() + 4) * 1024;
    }
    return n;
}

// The mapping that starts at `base`.
int64_t resident_bytes_of_mapping(const void *base) {
    return resident_bytes_of_mappings([&](unsigned long lo, const std::string &) { return lo == (unsigned long)base; });
}

// Every mapping of a file in `dir` (the checkpoint files, values and
// gradients; unlinked once mapped, so "(deleted)").
int64_t resident_bytes_of_files_in(const std::string &dir) {
    return resident_bytes_of_mappings(
        [&](unsigned long, const std::string &line) { return line.find(dir + "/") != std::string::npos; });
}

// Minor page faults of this process so far.
long minor_faults() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

}  // namespace

// A mapped tensor's window made writable ahead (populate_for_write, what
// the executor does before a kernel writes a checkpoint row or a gradient
// is added into one) maps exactly the window's pages, keeps the file's
// data, and spares the writes a fault per page. Without it, the same
// writes fault once per 4 KiB page: the count this test tells apart.
TEST(AotTiled, MappedWindowsArePopulatedBeforeTheyAreWritten) {
    char tmpl[] = "/tmp/segtile-populate-XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const int64_t W = 1024, H = 64, C = 4;  // a 4 KiB page per row of a plane
    Tensor t = Tensor::mapped({W, H, C, 1}, dir, nullptr);
    float *p = t.data();
    for (int64_t i = 0; i < t.numel(); i++) p[i] = (float)(i % 977);
    const int64_t y0 = 8, y1 = 24, c0 = 1, c1 = 3;
    const long pages = (y1 - y0) * (c1 - c0);  // 32 pages
    auto write_window = [&] {
        const long before = minor_faults();
        for (int64_t c = c0; c < c1; c++)
            for (int64_t y = y0; y < y1; y++)
                for (int64_t x = 0; x < W; x++) p[(c * H + y) * W + x] += 1.0f;
        return minor_faults() - before;
    };
    t.drop_resident();
    const long unpopulated = write_window();
    EXPECT_GE(unpopulated, pages) << "each page written faults when not populated";
    t.drop_resident();
    t.populate_for_write(0, W, y0, y1, c0, c1);
    EXPECT_EQ(resident_bytes_of_mapping(t.data()), pages * 4096) << "the window's pages, no more";
    const long populated = write_window();
    EXPECT_LT(populated, pages / 4);
    for (int64_t i = 0; i < t.numel(); i++) {
        const int64_t c = i / (W * H), y = i / W % H;
        const bool in = c >= c0 && c < c1 && y >= y0 && y < y1;
        ASSERT_EQ(p[i], (float)(i % 977) + (in ? 2.0f : 0.0f)) << "element " << i;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

// Mapped checkpoint pages leave the process after each row of tiles: while
// the first segment writes pool1's checkpoint (a page per row of a plane at
// this width), only the current row of tiles' pages are resident; after
// each segment, none.
TEST(AotTiled, MappedCheckpointPagesLeaveAfterEachRowOfTiles) {
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, tiny_cnn_tiled_cuts()));
    char tmpl[] = "/tmp/segtile-mmap-XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const int W = 2048, H = 64;  // pool1: (1024, 32, 8, 1), a 4 KiB page per row of a plane
    Tensor images({W, H, 1, 1}, nullptr);
    images.fill(0.25);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 1;
    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, tiny_cnn_tiled_kernels(m, &ledger), {{512, 5}, {128, 4}, {64, 3}}, &ledger,
                           halide_type_of<float>(), dir);
    ParamStore params(m, &ledger);
    params.init_pytorch_default(4);
    std::vector<const Tensor *> stored;
    bool first_segment = true;
    std::vector<int64_t> row_starts;  // pool1's resident bytes at each row's first tile, first segment
    int64_t after_segments = 0;
    int segments = 0;
    auto resident = [&] {
        int64_t n = 0;
        for (const Tensor *t : stored) n += std::max<int64_t>(0, resident_bytes_of_mapping(t->data()));
        return n;
    };
    exec.set_trace([&](const ExecutorEvent &e) {
        if (stored.empty())
            for (const StoredTensor &st : stored_tensors(m, layout, W, H, false))
                if (st.value) stored.push_back(&exec.checkpoint(st.tensor));
        if (e.category == "segment") {
            first_segment = false;
            after_segments += resident();
            segments++;
        }
        if (e.category != "tile" || !first_segment) return;
        int64_t tx = -1;
        for (const auto &[k, v] : e.args)
            if (k == "tx") tx = v;
        if (tx == 0) row_starts.push_back(resident());
    });
    exec.step(images, labels, params);
    ASSERT_GE(row_starts.size(), 6u);  // 32 rows in tiles of 5
    EXPECT_GT(row_starts.front(), 0);
    // Kept for the whole segment, the last row would find every earlier
    // row's pages still resident (6x the first).
    EXPECT_LE(row_starts.back(), 2 * row_starts.front());
    EXPECT_GT(segments, 0);
    EXPECT_EQ(after_segments, 0);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

// The planner's count of the mapped checkpoint pages a row of tiles holds
// (PlanRequest::mapped_checkpoints, what the cap then holds them to) is
// what the step has resident: measured from smaps at every tile, before
// the row's pages are dropped, per segment over its forward and backward
// rows, it stays under the prediction and is not far below it.
TEST(AotTiled, PlannedResidentCheckpointRowsBoundTheMeasuredOnes) {
    Model m = load_model("tiny_cnn");
    const std::vector<int> cuts = parse_cuts(m, tiny_cnn_tiled_cuts());
    SegmentLayout layout = make_segments(m, cuts);
    const int W = 2048, H = 64;
    const std::vector<TileSize> tiles = {{512, 5}, {128, 4}, {64, 3}};
    PlanRequest req;
    req.width = W;
    req.height = H;
    req.mapped_checkpoints = true;
    const Plan plan = evaluate_plan(m, req, cuts, tiles, nullptr);
    ASSERT_TRUE(plan.mapped_checkpoints);
    ASSERT_EQ(plan.segments.size(), layout.segments.size());
    char tmpl[] = "/tmp/segtile-mmap-XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    Tensor images({W, H, 1, 1}, nullptr);
    images.fill(0.25);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 1;
    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, tiny_cnn_tiled_kernels(m, &ledger), tiles, &ledger, halide_type_of<float>(), dir);
    ParamStore params(m, &ledger);
    params.init_pytorch_default(4);
    int64_t most = 0;                 // since the last segment event
    std::map<int, int64_t> measured;  // per segment's first layer
    exec.set_trace([&](const ExecutorEvent &e) {
        if (e.category == "tile") most = std::max(most, resident_bytes_of_files_in(dir));
        if (e.category == "segment") {
            for (const auto &[k, v] : e.args)
                if (k == "first_layer") measured[(int)v] = std::max(measured[(int)v], most);
            most = 0;
        }
    });
    exec.step(images, labels, params);
    ASSERT_EQ(measured.size(), plan.segments.size());
    for (const SegmentPlan &s : plan.segments) {
        const int64_t got = measured[s.first];
        EXPECT_GT(s.resident_bytes, 0) << plan_table(plan, m);
        EXPECT_LE(got, s.resident_bytes) << m.layers[s.first].name << "\n" << plan_table(plan, m);
        EXPECT_GE(got, s.resident_bytes / 2) << m.layers[s.first].name << "\n" << plan_table(plan, m);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

TEST(AotTiled, UnwritableCheckpointDirSaysWhatToChange) {
    Model m = load_model("tiny_cnn");
    SegmentLayout layout = make_segments(m, parse_cuts(m, tiny_cnn_tiled_cuts()));
    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, tiny_cnn_tiled_kernels(m, &ledger), {{5, 5}, {4, 4}, {3, 3}}, &ledger,
                           halide_type_of<float>(), "/nonexistent/segtile");
    Tensor images({16, 16, 1, 1}, nullptr);
    ParamStore params(m, &ledger);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 0;
    try {
        exec.step(images, labels, params);
        FAIL();
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("choose a writable directory"), std::string::npos) << e.what();
    }
}
