// Tiles of a segment and the windows each tile reads: the one computation
// the executor runs by and the planner predicts from, so the planner's
// windows are the executor's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "spec/region_map.h"
#include "spec/segments.h"

namespace segtile {

struct TileSize {
    int64_t width = 0, height = 0;  // of a segment's primary output; 0: the whole extent
};

// A segment's tiles: for each tile, the region of each output tensor
// (outputs in SegmentSpec order). Tiles follow the primary output's grid;
// other outputs are partitioned in proportion, so every output pixel
// belongs to exactly one tile.
struct TileRegions {
    std::vector<std::vector<std::pair<int64_t, int64_t>>> x, y;  // [output][tile index along axis] inclusive
    size_t count() const { return x.empty() ? 0 : x[0].size() * y[0].size(); }
};

// shapes: Model::shapes() of the image. Throws ModelError if the tile is
// finer than a secondary output can be split.
TileRegions tile_regions(const Model &m, const SegmentSpec &seg, const std::vector<TensorShape> &shapes,
                         TileSize tile);

// The whole extent of every tensor (layers, then the image at index L).
std::vector<Box<int64_t>> whole_boxes(const Model &m, const std::vector<TensorShape> &shapes, int64_t width,
                                      int64_t height);

// What tile (tx, ty) of a segment writes (per output tensor) and reads (per
// tensor, nullopt where it reads nothing).
struct TileWindows {
    std::vector<std::pair<int, Box<int64_t>>> targets;
    std::vector<std::optional<Box<int64_t>>> need;
};
TileWindows tile_windows(const Model &m, const SegmentSpec &seg, const TileRegions &r, size_t tx, size_t ty,
                         const std::vector<Box<int64_t>> &whole);

inline int64_t box_pixels(const Box<int64_t> &b) { return (b.x.hi - b.x.lo + 1) * (b.y.hi - b.y.lo + 1); }

// Square tiles covering the same `tile_px` image pixels in every segment of
// a size x size image (each segment's output tile is that divided by its
// downsampling); 0: whole extents. The GPU check and the calibration run these.
inline std::vector<TileSize> tiles_for(const Model &m, const SegmentLayout &layout, int64_t size, int64_t tile_px) {
    const auto shapes = m.shapes(size, size);
    std::vector<TileSize> t;
    for (const auto &seg : layout.segments) {
        const int64_t down = size / shapes[seg.outputs.back()].width;
        const int64_t side = tile_px > 0 ? std::max<int64_t>(1, tile_px / down) : 0;
        t.push_back({side, side});
    }
    return t;
}

}  // namespace segtile
