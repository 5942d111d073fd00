// The GPU check's tiles: the same image region for every segment.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "spec/model.h"
#include "spec/segments.h"
#include "spec/tiling.h"

namespace segtile {

// Tile sizes per segment covering `tile_px` image pixels (each segment's
// output tile is that divided by the segment's downsampling).
inline std::vector<TileSize> tiles_for(const Model &m, const SegmentLayout &layout, int64_t size, int64_t tile_px) {
    const auto shapes = m.shapes(size, size);
    std::vector<TileSize> t;
    for (const auto &seg : layout.segments) {
        const int64_t down = size / shapes[seg.outputs.back()].width;
        const int64_t side = std::max<int64_t>(1, tile_px / down);
        t.push_back({side, side});
    }
    return t;
}

}  // namespace segtile
