#include "runtime/marks_task.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace segtile {

namespace {

// SplitMix64: a counter-based generator (any pixel's noise is a function
// of its position), fast enough to fill 16 M pixels in tens of milliseconds.
uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace

int LargeMarks::generate(Tensor &image, uint64_t seed, uint64_t index) const {
    const auto &d = image.dims();
    if (d.size() != 4 || d[0] != width || d[1] != height || d[2] != 1 || d[3] != 1)
        throw std::invalid_argument("LargeMarks: the image must be (" + std::to_string(width) + ", " +
                                    std::to_string(height) + ", 1, 1), got " + shape_string(d));
    if (width < mark_size || height < mark_size)
        throw std::invalid_argument("the built-in task draws " + std::to_string(mark_size) + "x" +
                                    std::to_string(mark_size) + " marks: use images of at least that size");
    const uint64_t stream = mix(mix(seed) ^ (index * 0xd1b54a32d192ed03ull));
    float *p = image.data();
    // Noise: the sum of four 16-bit uniforms (Irwin-Hall), scaled to the
    // standard deviation; close enough to normal for a background.
    const float scale = noise * 1.7320508f / 32768.0f;  // sd of one U(0, 65536) is 65536 / sqrt(12)
    const int64_t n = width * height;
    for (int64_t k = 0; k < n; k++) {
        const uint64_t r = mix(stream + (uint64_t)k);
        const int64_t s = (int64_t)(r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48);
        p[k] = (float)(s - 131070) * scale * 0.5f;  // four uniforms: sd doubles, so halve
    }
    uint64_t state = mix(stream ^ 0x5851f42d4c957f2dull);
    auto next = [&](uint64_t bound) {
        state = mix(state);
        return state % bound;
    };
    const int label = (int)next(2);
    // Marks scale with the area, so that every part of a large image carries
    // some (a learning signal a small budget of images can find).
    const int64_t blocks = std::max<int64_t>(1, (width * height) / (512 * 512));
    const int64_t marks = blocks * (min_marks + (int64_t)next((uint64_t)(max_marks - min_marks + 1)));
    for (int64_t m = 0; m < marks; m++) {
        const int64_t x0 = (int64_t)next((uint64_t)(width - mark_size + 1));
        const int64_t y0 = (int64_t)next((uint64_t)(height - mark_size + 1));
        for (int dy = 0; dy < mark_size; dy++)
            for (int dx = 0; dx < mark_size; dx++) {
                const bool frame = dx < border || dy < border || dx >= mark_size - border || dy >= mark_size - border;
                if (label == 1 || frame) p[(y0 + dy) * width + x0 + dx] += 1.0f;
            }
    }
    return label;
}

}  // namespace segtile
