// Generated data for the built-in main job: no download needed. Each image
// is noise with a few small marks; the label says which shape the marks
// have (class 1: filled squares, class 0: hollow squares), so a classifier
// has to look at the marks, not at the image's overall brightness.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/tensor.h"

namespace segtile {

struct SyntheticMarks {
    int width = 64, height = 64, channels = 1;
    int min_marks = 3, max_marks = 6;
    int mark_size = 7;
    float noise = 0.2f;

    // Fills image (W, H, C, N) and labels[n] for each image of the batch.
    void fill(Tensor &image, std::vector<int32_t> &labels, std::mt19937_64 &rng) const;
};

}  // namespace segtile
