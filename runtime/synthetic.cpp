#include "runtime/synthetic.h"

namespace segtile {

void SyntheticMarks::fill(Tensor &image, std::vector<int32_t> &labels, std::mt19937_64 &rng) const {
    const auto &d = image.dims();  // (W, H, C, N)
    const int64_t W = d[0], H = d[1], C = d[2], N = d[3];
    labels.resize(N);
    std::normal_distribution<float> noise_dist(0.0f, noise);
    std::uniform_int_distribution<int> label_dist(0, 1), count_dist(min_marks, max_marks);
    std::uniform_int_distribution<int64_t> xd(0, W - mark_size), yd(0, H - mark_size);
    float *p = image.data();
    for (int64_t n = 0; n < N; n++) {
        float *img = p + n * W * H * C;
        for (int64_t k = 0; k < W * H * C; k++) img[k] = noise_dist(rng);
        const int label = label_dist(rng);
        labels[n] = label;
        const int marks = count_dist(rng);
        for (int m = 0; m < marks; m++) {
            const int64_t x0 = xd(rng), y0 = yd(rng);
            for (int dy = 0; dy < mark_size; dy++)
                for (int dx = 0; dx < mark_size; dx++) {
                    const bool edge = dx == 0 || dy == 0 || dx == mark_size - 1 || dy == mark_size - 1;
                    if (label == 1 || edge)
                        for (int64_t c = 0; c < C; c++) img[(c * H + y0 + dy) * W + x0 + dx] += 1.0f;
                }
        }
    }
}

}  // namespace segtile
