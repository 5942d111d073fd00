// The main job (README's first command) learns: its loss falls and its
// accuracy rises well above chance, with the AOT-compiled kernel.
#include <gtest/gtest.h>

#include <numeric>
#include <sstream>

#include "runtime/trainer.h"
#include "tiny_cnn_step.h"

using namespace segtile;

namespace {
float mean(const std::vector<float> &v, size_t from, size_t to) {
    return std::accumulate(v.begin() + from, v.begin() + to, 0.0f) / (float)(to - from);
}
}  // namespace

TEST(MainJob, DefaultTrainingLossFalls) {
    Model m = load_model("tiny_cnn");
    MemoryLedger ledger;
    auto kernel = aot_step(m, tiny_cnn_step_argv, tiny_cnn_step_metadata, &ledger);
    TrainConfig cfg;  // the defaults of `segtile train`
    cfg.optimizer.kind = "adam";
    cfg.optimizer.lr = 0.01f;
    std::ostringstream log;
    TrainReport r = train_synthetic(m, *kernel, cfg, ledger, log);
    ASSERT_EQ((int)r.losses.size(), cfg.steps);
    const size_t n = r.losses.size();
    const float first = mean(r.losses, 0, 10), last = mean(r.losses, n - 10, n);
    EXPECT_NEAR(first, std::log(2.0f), 0.15f) << "an untrained binary classifier starts near ln 2";
    EXPECT_LT(last, 0.3f * first) << log.str();
    EXPECT_GT(mean(r.accuracy, n - 10, n), 0.9f);
    // The ledger saw the Halide kernel's own allocations, and they were all freed.
    EXPECT_GT(ledger.halide_peak(), 0);
    EXPECT_EQ(ledger.current() - ledger.current(MemoryLedger::Kind::Working), 0);
}

TEST(MainJob, ModelThatDoesNotFitTheTaskIsRejected) {
    Model m = load_model("tiny_cnn");
    m.input_channels = 3;
    MemoryLedger ledger;
    auto kernel = aot_step(load_model("tiny_cnn"), tiny_cnn_step_argv, tiny_cnn_step_metadata, &ledger);
    std::ostringstream log;
    EXPECT_THROW(train_synthetic(m, *kernel, TrainConfig{}, ledger, log), std::invalid_argument);
}

TEST(MainJob, ImagesSmallerThanTheMarksAreRejected) {
    Model m = load_model("tiny_cnn");
    MemoryLedger ledger;
    auto kernel = aot_step(m, tiny_cnn_step_argv, tiny_cnn_step_metadata, &ledger);
    TrainConfig cfg;
    cfg.data.width = 6;  // valid for the network, smaller than a mark
    std::ostringstream log;
    EXPECT_THROW(train_synthetic(m, *kernel, cfg, ledger, log), std::invalid_argument);
}
