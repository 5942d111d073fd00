// The main job's generated images: a function of (seed, index) only, both
// classes, marks where the label says (filled or hollow), noise of the
// asked-for spread.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/marks_task.h"

using namespace segtile;

namespace {

struct Generated {
    Tensor image;  // (W, H, 1, 1)
    int label;
};

Generated make(const LargeMarks &t, uint64_t seed, uint64_t index, MemoryLedger &ledger) {
    Generated g{Tensor({t.width, t.height, 1, 1}, &ledger), 0};
    g.label = t.generate(g.image, seed, index);
    return g;
}

bool same(const Tensor &a, const Tensor &b) {
    for (int64_t k = 0; k < a.numel(); k++)
        if (a.data()[k] != b.data()[k]) return false;
    return true;
}

TEST(LargeMarks, ImagesDependOnlyOnSeedAndIndex) {
    LargeMarks t;
    t.width = t.height = 256;
    MemoryLedger ledger;
    Generated a = make(t, 7, 3, ledger), b = make(t, 7, 4, ledger), a2 = make(t, 7, 3, ledger),
              c = make(t, 8, 3, ledger);
    EXPECT_TRUE(same(a.image, a2.image));
    EXPECT_EQ(a.label, a2.label);
    EXPECT_FALSE(same(a.image, b.image));
    EXPECT_FALSE(same(a.image, c.image));
}

TEST(LargeMarks, NoiseHasTheAskedForSpread) {
    LargeMarks t;
    t.width = t.height = 512;
    t.min_marks = t.max_marks = 0;
    t.noise = 0.2f;
    MemoryLedger ledger;
    Generated g = make(t, 1, 0, ledger);
    double sum = 0, sum2 = 0;
    for (int64_t k = 0; k < g.image.numel(); k++) {
        sum += g.image.data()[k];
        sum2 += (double)g.image.data()[k] * g.image.data()[k];
    }
    const double n = (double)g.image.numel(), mean = sum / n;
    EXPECT_NEAR(mean, 0.0, 0.002);
    EXPECT_NEAR(std::sqrt(sum2 / n - mean * mean), 0.2, 0.002);
}

TEST(LargeMarks, BothClassesWithFilledOrHollowMarks) {
    LargeMarks t;
    t.width = t.height = 256;
    t.noise = 0;  // marks only: pixels are 0 or at least 1
    MemoryLedger ledger;
    int ones = 0;
    for (uint64_t i = 0; i < 40; i++) {
        Generated g = make(t, 1, i, ledger);
        ones += g.label;
        int64_t marked = 0;
        for (int64_t k = 0; k < g.image.numel(); k++) marked += g.image.data()[k] >= 1.0f;
        const int64_t per_mark = g.label ? 16 * 16 : 16 * 16 - 12 * 12;  // filled, or a 2-pixel frame
        EXPECT_GE(marked, per_mark) << "at least one whole mark (others may overlap it)";
        EXPECT_LE(marked, per_mark * t.max_marks);
        if (g.label == 0) EXPECT_LT(marked, 16 * 16 * 3) << "three filled marks cover more than six frames";
    }
    EXPECT_GT(ones, 10);
    EXPECT_LT(ones, 30);
}

TEST(LargeMarks, WrongShapeOrTooSmallIsRefused) {
    LargeMarks t;
    t.width = t.height = 64;
    MemoryLedger ledger;
    Tensor wrong({64, 64, 3, 1}, &ledger);
    EXPECT_THROW(t.generate(wrong, 0, 0), std::invalid_argument);
    t.width = t.height = 8;
    Tensor small({8, 8, 1, 1}, &ledger);
    EXPECT_THROW(t.generate(small, 0, 0), std::invalid_argument);
}

}  // namespace
