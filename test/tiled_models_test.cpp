// Segmented fused-tiled training of every shipped model equals untiled
// training (float64): loss, every parameter gradient and the image
// gradient, with 0, 1 and several cuts, tiles from 1 pixel to the whole
// extent, non-square images whose sides the tiles do not divide. The
// forward checkpoints equal the untiled layer outputs tile for tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>

#include "generators/jit_kernel.h"
#include "generators/kernels.h"
#include "generators/model_graph.h"
#include "generators/training_step.h"
#include "runtime/executor.h"
#include "spec/builder.h"
#include "test/layer_cases.h"
#include "test/test_support.h"

using namespace segtile;

namespace {

struct Case {
    std::string model;
    int width, height, batch;
    std::vector<std::string> cuts;
    std::vector<TileSize> tiles;  // per segment; {0, 0}: whole extent
    // Whole shipped models use the reference schedule (it compiles several
    // times faster); the small model runs the production CPU schedule.
    Schedule schedule = Schedule::Reference;
    std::function<Model()> build;  // a model not shipped (named by `model`); empty: load_model(model)
};

std::ostream &operator<<(std::ostream &os, const Case &c) {
    os << c.model << "_" << c.width << "x" << c.height << "_cuts";
    for (const auto &n : c.cuts) os << "_" << n;
    return os;
}

Tensor to_tensor(const Halide::Buffer<double> &b) {
    std::vector<int64_t> d;
    for (int i = 0; i < b.dimensions(); i++) d.push_back(b.dim(i).extent());
    Tensor t(d, nullptr, MemoryLedger::Kind::Working, halide_type_of<double>());
    std::copy(b.begin(), b.end(), t.as<double>());
    return t;
}

// The untiled values of layer outputs `tensors` for image n, realized
// from the layer Funcs over the whole image: one pipeline, one compile.
std::vector<Halide::Buffer<double>> untiled_tensors(const Model &m, const std::vector<int> &tensors,
                                                    const Halide::Buffer<double> &image, int n,
                                                    const std::vector<Halide::Buffer<>> &params) {
    const int L = (int)m.layers.size();
    Halide::Buffer<double> one = image.sliced(3, n).embedded(3, 0);
    Halide::Func src("src");
    Halide::Var x, y, c, nn;
    src(x, y, c, nn) = one(x, y, c, nn);
    std::vector<Halide::Func> pf;
    for (size_t p = 0; p < params.size(); p++) {
        Halide::Buffer<double> b(params[p]);
        pf.emplace_back(Halide::Func(b));
    }
    const int W = image.dim(0).extent(), H = image.dim(1).extent();
    auto bounds = whole_image_bounds(m, W, H);
    const auto shapes = m.shapes(W, H);
    auto t = build_forward(m, {{L, src}}, pf, bounds, Halide::Float(64), 0, *std::max_element(tensors.begin(), tensors.end()));
    std::vector<Halide::Func> outs;
    std::vector<Halide::Buffer<double>> bufs;
    std::vector<Halide::Buffer<>> realization;
    for (int i : tensors) {
        // A copy as the output: layers after i read t[i] beyond the region
        // realized, which an output buffer would have to hold.
        Halide::Func copy("untiled_" + std::to_string(i));
        copy(x, y, c, nn) = t[i](x, y, c, nn);
        outs.push_back(copy);
        const TensorShape &s = shapes[i];
        bufs.emplace_back((int)s.width, (int)s.height, (int)s.channels, 1);
        realization.emplace_back(bufs.back());
    }
    schedule_reference(outs);
    Halide::Pipeline(outs).realize(Halide::Realization(realization));
    return bufs;
}

// A random batch, its labels or targets and parameters (float64), drawn in
// that order from one seed.
struct RandomBatch {
    Halide::Buffer<double> image;
    Halide::Buffer<> lt;
    std::vector<Halide::Buffer<>> params;
    RandomBatch(const Model &m, int width, int height, int batch, unsigned seed) {
        std::mt19937 rng(seed);
        image = segtile::testing::random_buffer({width, height, m.input_channels, batch}, rng);
        lt = segtile::testing::random_labels_or_target(m, width, height, batch, rng);
        params = segtile::testing::random_params(m, rng);
    }
};

class TiledModels : public ::testing::TestWithParam<Case> {};

TEST_P(TiledModels, EqualUntiled) {
    const Case &c = GetParam();
    const auto t0 = std::chrono::steady_clock::now();
    Model m = c.build ? c.build() : load_model(c.model);
    const RandomBatch batch(m, c.width, c.height, c.batch, 17);
    const auto &image = batch.image;
    const auto &lt = batch.lt;
    const auto &params = batch.params;

    JitTrainingStep reference(m, Halide::Float(64), c.schedule);
    auto ref = reference.run(image, lt, params);

    std::vector<int> cuts;
    for (const auto &name : c.cuts) {
        cuts.push_back(m.find_layer(name));
        ASSERT_GE(cuts.back(), 0) << name;
    }
    SegmentLayout layout = make_segments(m, cuts);
    MemoryLedger ledger;
    SegmentedExecutor exec(m, layout, jit_model_kernels(m, layout, Halide::Float(64), &ledger, c.schedule), c.tiles, &ledger,
                           halide_type_of<double>());
    ParamStore store(m, &ledger, halide_type_of<double>());
    for (size_t p = 0; p < params.size(); p++) {
        Halide::Buffer<double> src(params[p]);
        std::copy(src.begin(), src.end(), store.values[p].as<double>());
    }
    const auto t1 = std::chrono::steady_clock::now();
    Tensor images = to_tensor(image);

    // Forward: every checkpoint equals the untiled layer output.
    exec.forward(images, c.batch - 1, store);
    std::vector<int> checkpoints;
    for (int t : layout.checkpoints())
        if (t != (int)m.layers.size()) checkpoints.push_back(t);
    auto untiled = checkpoints.empty() ? std::vector<Halide::Buffer<double>>{}
                                   : untiled_tensors(m, checkpoints, image, c.batch - 1, params);
    for (size_t k = 0; k < checkpoints.size(); k++) {
        const int t = checkpoints[k];
        Halide::Buffer<double> &want = untiled[k];
        const Tensor &got = exec.checkpoint(t);
        ASSERT_EQ(got.numel(), want.number_of_elements()) << m.layers[t].name;
        EXPECT_LE(segtile::testing::rel_diff(const_cast<Tensor &>(got).as<double>(), want.begin(), got.numel()), 1e-13)
            << "checkpoint " << m.layers[t].name;
    }

    Tensor grad_images(images.dims(), nullptr, MemoryLedger::Kind::Working, halide_type_of<double>());
    const double loss = exec.step(images, Halide::Runtime::Buffer<>(*lt.raw_buffer()), store, nullptr, &grad_images);
    EXPECT_NEAR(loss, ref.loss, 1e-12 * std::abs(ref.loss));
    Halide::Buffer<double> gi(ref.grad_image);
    EXPECT_LE(segtile::testing::rel_diff(grad_images.as<double>(), gi.begin(), grad_images.numel()), 1e-10) << "image gradient";
    for (size_t p = 0; p < params.size(); p++) {
        if (!store.specs()[p].trainable) continue;
        Halide::Buffer<double> g(ref.grads[p]);
        EXPECT_LE(segtile::testing::rel_diff(store.grads[p].as<double>(), g.begin(), g.number_of_elements()), 1e-10)
            << store.specs()[p].name;
    }
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("compile %.1f s, run %.1f s, %lld tiles\n", std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(t2 - t1).count(), (long long)exec.tiles_run());
}

// One tiled step in float64 under the CPU schedule, with or without the
// image's gradient; what the tests below compare.
struct StepRun {
    MemoryLedger ledger;
    std::unique_ptr<SegmentedExecutor> exec;
    std::unique_ptr<ParamStore> store;
    Tensor prediction;  // (1, 1, K, N)
    double loss = 0;

    StepRun(const Model &m, const std::string &cuts, const std::vector<TileSize> &tiles, bool image_gradient,
            const Tensor &images, const Halide::Buffer<> &lt, const std::vector<Halide::Buffer<>> &params) {
        const SegmentLayout layout = make_segments(m, parse_cuts(m, cuts), image_gradient);
        exec = std::make_unique<SegmentedExecutor>(
            m, layout, jit_model_kernels(m, layout, Halide::Float(64), &ledger, Schedule::Cpu), tiles, &ledger,
            halide_type_of<double>());
        store = std::make_unique<ParamStore>(m, &ledger, halide_type_of<double>());
        for (size_t p = 0; p < params.size(); p++) {
            Halide::Buffer<double> src(params[p]);
            std::copy(src.begin(), src.end(), store->values[p].as<double>());
        }
        const TensorShape ps = m.shapes(images.dims()[0], images.dims()[1])[m.loss.input_id];
        prediction = Tensor({ps.width, ps.height, ps.channels, images.dims()[3]}, nullptr, MemoryLedger::Kind::Data,
                            halide_type_of<double>());
        loss = exec->step(images, Halide::Runtime::Buffer<>(*lt.raw_buffer()), *store, &prediction);
    }

    // Every trainable parameter's gradient equals `other`'s to 1e-13.
    void expect_same_gradients(const StepRun &other) const {
        for (size_t p = 0; p < store->specs().size(); p++) {
            if (!store->specs()[p].trainable) continue;
            EXPECT_LE(segtile::testing::rel_diff(store->grads[p].as<double>(), other.store->grads[p].as<double>(),
                                                 store->grads[p].numel()),
                      1e-13)
                << store->specs()[p].name;
        }
    }
};

// Training without the image's gradient: the same loss and parameter
// gradients, a store smaller by exactly the image's gradient, no gradient
// windows of the image, and a step that refuses to fill grad_images.
// evaluate() (forward and head only) gives the step's loss and predictions.
TEST(TiledTraining, WithoutImageGradientSameParameterGradients) {
    Model m = load_model("tiny_cnn");
    const int W = 37, H = 29, N = 1;
    const RandomBatch batch(m, W, H, N, 23);
    const auto &lt = batch.lt;
    const auto &params = batch.params;
    Tensor images = to_tensor(batch.image);
    const std::vector<TileSize> tiles = {{7, 5}, {3, 3}, {2, 4}};
    const TensorShape ps = m.shapes(W, H)[m.loss.input_id];
    StepRun with(m, "pool1,relu2", tiles, true, images, lt, params);
    StepRun without(m, "pool1,relu2", tiles, false, images, lt, params);
    EXPECT_TRUE(with.exec->image_gradient());
    EXPECT_FALSE(without.exec->image_gradient());
    EXPECT_EQ(without.loss, with.loss);
    without.expect_same_gradients(with);
    const int64_t image_grad_bytes = (int64_t)W * H * m.input_channels * (int64_t)sizeof(double);
    EXPECT_EQ(with.exec->checkpoint_bytes() - without.exec->checkpoint_bytes(), image_grad_bytes);
    // The store's size is known before anything is allocated (the program
    // decides on it whether checkpoints go to files): the bytes it took.
    for (bool ig : {true, false})
        EXPECT_EQ(checkpoint_store_bytes(m, make_segments(m, parse_cuts(m, "pool1,relu2"), ig), W, H,
                                         halide_type_of<double>()),
                  (ig ? with : without).exec->checkpoint_bytes())
            << "image gradient " << ig;
    EXPECT_EQ(with.ledger.peak(MemoryLedger::Kind::Checkpoint) - without.ledger.peak(MemoryLedger::Kind::Checkpoint),
              image_grad_bytes);
    EXPECT_LE(without.ledger.peak(MemoryLedger::Kind::Working), with.ledger.peak(MemoryLedger::Kind::Working));
    Tensor grad_images(images.dims(), nullptr, MemoryLedger::Kind::Working, halide_type_of<double>());
    EXPECT_THROW(without.exec->step(images, Halide::Runtime::Buffer<>(*lt.raw_buffer()), *without.store, nullptr,
                                    &grad_images),
                 std::invalid_argument);

    Tensor evaluated({ps.width, ps.height, ps.channels, N}, nullptr, MemoryLedger::Kind::Data, halide_type_of<double>());
    const int64_t tiles_before = without.exec->tiles_run();
    const double loss = without.exec->evaluate(images, Halide::Runtime::Buffer<>(*lt.raw_buffer()), *without.store,
                                               &evaluated);
    EXPECT_EQ(loss, without.loss);
    for (int64_t i = 0; i < evaluated.numel(); i++)
        EXPECT_EQ(evaluated.as<double>()[i], without.prediction.as<double>()[i]) << i;
    // A step runs every tile forward and backward; evaluate() forward only.
    EXPECT_EQ(2 * (without.exec->tiles_run() - tiles_before), tiles_before);
}

// A first segment of parameterless layers reading only the image (a
// downsampling pool, as in marks_cnn) gives, backward, only the image's
// gradient. Without it the executor skips that backward: the same
// parameter gradients, no image gradient in the store, and segment 0's
// tiles run forward only.
TEST(TiledTraining, ParameterlessFirstSegmentSkipsItsBackward) {
    Model m = ModelBuilder("pool_first", 1)
                  .max_pool("pool0", 2)
                  .conv2d("conv1", 4, 3).padding(1)
                  .relu("relu1")
                  .global_avg_pool("gap")
                  .flatten("flat")
                  .dense("fc", 2)
                  .loss(LossKind::SoftmaxCrossEntropy)
                  .build();
    const int W = 36, H = 28, N = 2;
    const RandomBatch batch(m, W, H, N, 29);
    const auto &lt = batch.lt;
    const auto &params = batch.params;
    Tensor images = to_tensor(batch.image);
    const std::vector<TileSize> tiles = {{5, 4}, {3, 3}};  // pool0's 18x14: 4x4 tiles in segment 0
    StepRun with(m, "pool0", tiles, true, images, lt, params);
    StepRun without(m, "pool0", tiles, false, images, lt, params);
    EXPECT_TRUE(with.exec->image_gradient());
    EXPECT_FALSE(without.exec->image_gradient());
    EXPECT_EQ(without.loss, with.loss);
    without.expect_same_gradients(with);
    EXPECT_EQ(with.exec->checkpoint_bytes() - without.exec->checkpoint_bytes(),
              (int64_t)W * H * m.input_channels * (int64_t)sizeof(double));
    EXPECT_EQ(with.exec->tiles_run() - without.exec->tiles_run(), N * 4 * 4);
}

// Each case compiles its own kernels (about a minute for VGG16 on two
// cores), so the matrix covers each situation once rather than every product.
INSTANTIATE_TEST_SUITE_P(
    Shipped, TiledModels,
    ::testing::Values(
        // The built-in model under the CPU schedule: no cut with a batch of
        // two, and two cuts with a different tile size per segment.
        Case{"tiny_cnn", 37, 29, 2, {}, {{5, 4}}, Schedule::Cpu},
        Case{"tiny_cnn", 37, 29, 1, {"pool1", "relu2"}, {{7, 5}, {3, 3}, {2, 4}}, Schedule::Cpu},
        // Darknet19's block under the CPU schedule: in the forward kernels
        // the input's bounded copy and the leaky ReLU (of the batch norm)
        // are computed per band of rows of the conv that reads them
        // (schedules/cpu_inlining.cpp, band_producers); 13 and 23 rows
        // are no whole number of 6-row bands, 41 columns no whole vectors.
        Case{"darknet_block", 41, 23, 1, {"lrelu1", "conv3"}, {{41, 13}, {20, 23}, {0, 0}}, Schedule::Cpu,
             [] {
                 return ModelBuilder("darknet_block", 5)
                     .conv2d("conv1", 12, 3).padding(1).bias(false)
                     .batch_norm("bn1")
                     .leaky_relu("lrelu1", 0.1)
                     .conv2d("conv2", 8, 1).bias(false)
                     .batch_norm("bn2")
                     .leaky_relu("lrelu2", 0.1)
                     .conv2d("conv3", 6, 3).padding(1)
                     .leaky_relu("lrelu3", 0.1)
                     .loss(LossKind::MeanSquaredError)
                     .build();
             }},
        // A 1x1 conv with padding 1 after a cut: 1-pixel tiles on its
        // border ring read only padding, so their window of the checkpoint
        // is its nearest edge pixel (the kernel's clamp), not nothing.
        Case{"padding_ring", 9, 6, 1, {"relu1", "relu2"}, {{3, 2}, {1, 1}, {0, 0}}, Schedule::Cpu,
             [] {
                 return ModelBuilder("padding_ring", 2)
                     .conv2d("conv1", 3, 3).padding(1)
                     .relu("relu1")
                     .conv2d("ring", 4, 1).padding(1)
                     .relu("relu2")
                     .conv2d("conv3", 2, 3)
                     .loss(LossKind::MeanSquaredError)
                     .build();
             }},
        // No cut: one segment; 1-pixel tiles on pool5's 2x1 output.
        Case{"vgg16", 75, 53, 1, {}, {{1, 1}}},
        // Several cuts; the last segment untiled (whole extent).
        Case{"vgg16", 75, 53, 1, {"pool1", "pool3", "relu4_2"}, {{16, 9}, {7, 5}, {3, 2}, {0, 0}}},
        // One cut; frozen batch norm and leaky relu inside the tiles; batch of 2.
        Case{"darknet19", 70, 45, 2, {"lrelu8"}, {{5, 3}, {1, 1}}},
        // Cuts inside residual blocks: the skip tensor crosses the cut.
        Case{"resnet18", 67, 41, 1, {"layer1.0.relu1", "layer2.0.bn1", "layer3.1.relu1"}, {{6, 4}, {5, 5}, {2, 3}, {1, 1}}},
        // U-Net: cuts that encoder skips cross (several checkpoint tensors per cut); dense loss.
        Case{"unet", 44, 28, 1, {"pool1", "up2", "dec2.3"}, {{9, 5}, {3, 2}, {7, 4}, {13, 6}}},
        Case{"unet", 36, 20, 2, {}, {{5, 7}}}),
    [](const ::testing::TestParamInfo<Case> &info) {
        std::ostringstream os;
        os << info.param;
        std::string s = os.str();
        for (char &ch : s)
            if (!std::isalnum((unsigned char)ch)) ch = '_';
        return s;
    });

// One case per local layer kind, from its row's example fields
// (test/layer_cases.h): conv -> [kind] -> conv, cut after the first conv,
// so the kind's window of the checkpoint and its backward run per tile
// under the production CPU schedule. 13x11 and the tiles do not divide.
std::vector<Case> table_cases() {
    std::vector<Case> out;
    for (const LayerKindInfo &k : segtile::testing::local_kinds())
        out.push_back(Case{std::string("example_") + k.name, 13, 11, 1, {"pre"}, {{3, 2}, {4, 3}}, Schedule::Cpu,
                           [k] { return segtile::testing::example_model(k, true); }});
    return out;
}

INSTANTIATE_TEST_SUITE_P(LayerKinds, TiledModels, ::testing::ValuesIn(table_cases()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.model; });

}  // namespace
