// The main job's data: large gray images generated on the fly, each a
// function of (seed, index) only, so any image of any epoch can be made
// again (a resumed run sees the same images). Noise with a few small square
// marks; the label says whether the marks are filled (class 1) or hollow
// (class 0). The marks cover a few thousandths of a percent of a 4096^2
// image: a classifier has to find them, not judge overall brightness.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace segtile {

struct LargeMarks {
    int64_t width = 4096, height = 4096;  // channels: 1
    int min_marks = 3, max_marks = 6;  // per 512x512 block (images smaller than a block: per image)
    int mark_size = 16;  // side, pixels
    int border = 2;      // a hollow mark's frame width, pixels
    float noise = 0.2f;  // standard deviation of the background noise (mean 0); marks add 1

    // Fills image (width, height, 1, 1) with image number `index` of the
    // stream of `seed`; returns its label.
    int generate(Tensor &image, uint64_t seed, uint64_t index) const;
};

}  // namespace segtile
