// The run folder's plot: three panels with their curves in their colours,
// a falling loss drawn falling, labels drawn.
#include "io/plot_png.h"

#include <gtest/gtest.h>

#include <cmath>

#include "io/image_io.h"
#include "test/io/temp_dir.h"

namespace segtile {
namespace {

using testing::TempDir;

struct Pixels {
    const Tensor &t;
    int at(int64_t x, int64_t y, int c) const {
        const auto &d = t.dims();
        return (int)std::lround(t.data()[(c * d[1] + y) * d[0] + x] * 255);
    }
    bool is(int64_t x, int64_t y, uint32_t rgb) const {
        for (int c = 0; c < 3; c++)
            if (std::abs(at(x, y, c) - (int)((rgb >> (16 - 8 * c)) & 255)) > 8) return false;
        return true;
    }
};

TEST(PlotPng, TrainingPlotHasEachCurveInItsPanel) {
    TempDir dir;
    std::vector<EpochRecord> epochs;
    for (int e = 1; e <= 6; e++) epochs.push_back({e, 2.0 / e, 0.3 + 0.1 * e, (int64_t)(100 + 5 * e) << 20});
    write_training_plot(dir.file("plot.png"), epochs);
    MemoryLedger ledger;
    const Tensor img = read_image(dir.file("plot.png"), &ledger);
    ASSERT_EQ(img.dims(), (std::vector<int64_t>{900, 780, 3, 1}));
    const Pixels p{img};
    const uint32_t colours[3] = {0x1f77b4, 0x2ca02c, 0xd62728};
    for (int panel = 0; panel < 3; panel++)
        for (int other = 0; other < 3; other++) {
            int64_t n = 0;
            for (int64_t y = panel * 260; y < (panel + 1) * 260; y++)
                for (int64_t x = 0; x < 900; x++) n += p.is(x, y, colours[other]);
            if (panel == other)
                EXPECT_GT(n, 500) << "curve " << other << " missing from its panel";
            else
                EXPECT_EQ(n, 0) << "curve " << other << " drawn in panel " << panel;
        }
    // The loss falls: its first point is higher in the picture than its last.
    auto mean_row = [&](int64_t x0, int64_t x1) {
        double sum = 0, n = 0;
        for (int64_t y = 0; y < 260; y++)
            for (int64_t x = x0; x < x1; x++)
                if (p.is(x, y, colours[0])) sum += (double)y, n++;
        return n ? sum / n : -1;
    };
    const double first = mean_row(75, 90), last = mean_row(870, 885);
    ASSERT_GT(first, 0);
    ASSERT_GT(last, 0);
    EXPECT_LT(first, last);
    // Text (titles, ticks) is drawn in black/dark grey.
    int64_t dark = 0;
    for (int64_t y = 0; y < 780; y++)
        for (int64_t x = 0; x < 80; x++) dark += p.at(x, y, 0) < 100 && p.at(x, y, 1) < 100;
    EXPECT_GT(dark, 200);
}

TEST(PlotPng, NothingToPlotIsAnError) {
    TempDir dir;
    EXPECT_THROW(write_training_plot(dir.file("plot.png"), {}), std::invalid_argument);
    EXPECT_FALSE(std::filesystem::exists(dir.file("plot.png")));
}

TEST(PlotPng, SingleEpochAndMissingAccuracyStillDraw) {
    TempDir dir;
    write_training_plot(dir.file("plot.png"), {{1, 0.7, NAN, 1 << 20}});
    MemoryLedger ledger;
    EXPECT_EQ(probe_image(dir.file("plot.png")).width, 900);
}

}  // namespace
}  // namespace segtile
