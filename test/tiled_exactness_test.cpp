// Segmented fused-tiled training equals untiled training: loss, every
// parameter gradient and the image gradient, for several cut sets and tile
// sizes, including partial tiles at the right and bottom edges.
#include <gtest/gtest.h>

#include "generators/jit_kernel.h"
#include "generators/training_step.h"
#include "runtime/executor.h"
#include "test/test_support.h"

using namespace segtile;

namespace {

struct Case {
    std::string model;
    int width, height, batch;
    std::vector<std::string> cuts;
    std::vector<TileSize> tiles;  // per segment
};

Tensor to_tensor(const Halide::Buffer<double> &b) {
    std::vector<int64_t> d;
    for (int i = 0; i < b.dimensions(); i++) d.push_back(b.dim(i).extent());
    Tensor t(d, nullptr, MemoryLedger::Kind::Working, halide_type_of<double>());
    std::copy(b.begin(), b.end(), t.as<double>());
    return t;
}

double max_rel_diff(const double *a, const double *b, int64_t n) {
    double ref = 0, diff = 0;
    for (int64_t k = 0; k < n; k++) {
        ref = std::max(ref, std::abs(b[k]));
        diff = std::max(diff, std::abs(a[k] - b[k]));
    }
    return diff / std::max(ref, 1e-300);
}

void check_case(const Case &c) {
    SCOPED_TRACE(c.model + " " + std::to_string(c.width) + "x" + std::to_string(c.height));
    Model m = load_model(c.model);
    std::mt19937 rng(11);
    Halide::Buffer<double> image = segtile::testing::random_buffer({c.width, c.height, m.input_channels, c.batch}, rng);
    Halide::Buffer<> lt = segtile::testing::random_labels_or_target(m, c.width, c.height, c.batch, rng);
    auto params = segtile::testing::random_params(m, rng);

    JitTrainingStep reference(m, Halide::Float(64));
    auto ref = reference.run(image, lt, params);

    std::vector<int> cuts;
    for (const auto &name : c.cuts) cuts.push_back(m.find_layer(name));
    SegmentLayout layout = make_segments(m, cuts);
    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, jit_model_kernels(m, layout, Halide::Float(64), &ledger), c.tiles, &ledger,
                           halide_type_of<double>());
    ParamStore store(m, &ledger, halide_type_of<double>());
    for (size_t p = 0; p < params.size(); p++) {
        Halide::Buffer<double> src(params[p]);
        std::copy(src.begin(), src.end(), store.values[p].as<double>());
    }
    Tensor images = to_tensor(image);
    Tensor grad_images(images.dims(), nullptr, MemoryLedger::Kind::Working, halide_type_of<double>());
    const double loss = exec.step(images, Halide::Runtime::Buffer<>(*lt.raw_buffer()), store, nullptr, &grad_images);
    EXPECT_GT(exec.tiles_run(), (int64_t)layout.segments.size()) << "more than one tile per segment";

    EXPECT_NEAR(loss, ref.loss, 1e-12 * std::abs(ref.loss));
    Halide::Buffer<double> gi(ref.grad_image);
    EXPECT_LE(max_rel_diff(grad_images.as<double>(), gi.begin(), grad_images.numel()), 1e-10) << "image gradient";
    for (size_t p = 0; p < params.size(); p++) {
        if (!store.specs()[p].trainable) continue;
        Halide::Buffer<double> g(ref.grads[p]);
        EXPECT_LE(max_rel_diff(store.grads[p].as<double>(), g.begin(), g.number_of_elements()), 1e-10)
            << store.specs()[p].name;
    }
}

}  // namespace

TEST(TiledExactness, TinyCnnNoCut) { check_case({"tiny_cnn", 37, 29, 2, {}, {{5, 4}}}); }

TEST(TiledExactness, TinyCnnTwoCuts) { check_case({"tiny_cnn", 37, 29, 1, {"pool1", "relu2"}, {{7, 5}, {3, 3}, {2, 4}}}); }
