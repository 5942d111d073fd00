// The plugin from CMake: add_halide_library(... AUTOSCHEDULER Segtile::Segtile
// PARAMS autoscheduler.memory_cap=...) built segtile_plugin_blur_chain; it
// must compute the blur chain, and its schedule must be Segtile's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "HalideBuffer.h"
#include "segtile_plugin_blur_chain.h"

namespace {

// The same 3x3 box blurs in plain C++. Only the input's edges repeat: like
// the Halide Funcs, every stage is defined beyond the image, so it is
// computed on a margin of `stages` pixels that shrinks by one per stage.
std::vector<float> blur_chain_reference(const std::vector<float> &img, int w, int h, int stages) {
    const int m = stages, pw = w + 2 * m, ph = h + 2 * m;
    std::vector<float> cur(pw * ph);
    for (int y = 0; y < ph; y++) {
        for (int x = 0; x < pw; x++) cur[y * pw + x] = img[std::clamp(y - m, 0, h - 1) * w + std::clamp(x - m, 0, w - 1)];
    }
    for (int s = 1; s <= stages; s++) {
        std::vector<float> next(cur.size());
        for (int y = s; y < ph - s; y++) {
            for (int x = s; x < pw - s; x++) {
                float sum = 0.0f;
                for (int dy = -1; dy <= 1; dy++) {
                    for (int dx = -1; dx <= 1; dx++) sum += cur[(y + dy) * pw + x + dx];
                }
                next[y * pw + x] = sum / 9.0f;
            }
        }
        cur = next;
    }
    std::vector<float> out(w * h);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) out[y * w + x] = cur[(y + m) * pw + x + m];
    }
    return out;
}

TEST(SegtilePluginAot, BlurChainLibraryMatchesReference) {
    const int w = 192, h = 160;  // the generator's estimates
    Halide::Runtime::Buffer<float, 2> in(w, h), out(w, h);
    std::vector<float> img(w * h);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) img[y * w + x] = in(x, y) = static_cast<float>((x * 7 + y * 13) % 29) / 29.0f;
    }
    ASSERT_EQ(segtile_plugin_blur_chain(in, out), 0);
    const std::vector<float> expected = blur_chain_reference(img, w, h, 8);
    double worst = 0;
    int wx = 0, wy = 0;
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const double e = std::abs(double(out(x, y)) - expected[y * w + x]);
            if (e > worst) worst = e, wx = x, wy = y;
        }
    }
    EXPECT_LT(worst, 1e-5) << "at (" << wx << ", " << wy << "): " << out(wx, wy) << " vs " << expected[wy * w + wx];
}

TEST(SegtilePluginAot, ScheduleIsSegtilesAndFusesUnderTheCap) {
    std::ifstream in(SEGTILE_BLUR_CHAIN_SCHEDULE);
    ASSERT_TRUE(in) << SEGTILE_BLUR_CHAIN_SCHEDULE;
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("Segtile"), std::string::npos) << text.str();
    EXPECT_NE(text.str().find("compute_at"), std::string::npos) << text.str();
}

}  // namespace
