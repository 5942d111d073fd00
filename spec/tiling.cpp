#include "spec/tiling.h"

namespace segtile {

TileRegions tile_regions(const Model &m, const SegmentSpec &seg, const std::vector<TensorShape> &shapes,
                         TileSize tile_size) {
    const TensorShape &p = shapes.at(seg.outputs.back());
    TileRegions r;
    auto axis = [&](int64_t extent, int64_t tile, std::vector<std::vector<std::pair<int64_t, int64_t>>> &out,
                    bool is_x) {
        tile = tile > 0 ? std::min(tile, extent) : extent;
        const int64_t count = (extent + tile - 1) / tile;
        for (int o : seg.outputs) {
            const int64_t e = is_x ? shapes[o].width : shapes[o].height;
            std::vector<std::pair<int64_t, int64_t>> spans;
            for (int64_t k = 0; k < count; k++) {
                const int64_t lo = std::min(k * tile, extent) * e / extent;
                const int64_t hi = (k + 1 == count ? extent : std::min((k + 1) * tile, extent)) * e / extent - 1;
                if (hi < lo)
                    throw ModelError("tiles of " + std::to_string(tile) + " px on '" + m.layers[seg.last].name +
                                     "' are finer than output '" + m.layers[o].name +
                                     "' of the same segment; use larger tiles");
                spans.push_back({lo, hi});
            }
            out.push_back(spans);
        }
    };
    axis(p.width, tile_size.width, r.x, true);
    axis(p.height, tile_size.height, r.y, false);
    return r;
}

std::vector<Box<int64_t>> whole_boxes(const Model &m, const std::vector<TensorShape> &shapes, int64_t width,
                                      int64_t height) {
    const int L = (int)m.layers.size();
    std::vector<Box<int64_t>> whole(L + 1);
    for (int t = 0; t <= L; t++) {
        const int64_t w = t == L ? width : shapes[t].width, h = t == L ? height : shapes[t].height;
        whole[t] = {{0, w - 1}, {0, h - 1}};
    }
    return whole;
}

TileWindows tile_windows(const Model &m, const SegmentSpec &seg, const TileRegions &r, size_t tx, size_t ty,
                         const std::vector<Box<int64_t>> &whole) {
    TileWindows w;
    for (size_t k = 0; k < seg.outputs.size(); k++)
        w.targets.push_back(
            {seg.outputs[k], {{r.x[k][tx].first, r.x[k][tx].second}, {r.y[k][ty].first, r.y[k][ty].second}}});
    // The windows this tile reads: the same formula the kernel clips with.
    w.need = required_boxes<int64_t, IntOps>(m, seg.first, seg.last, w.targets, whole);
    return w;
}

}  // namespace segtile
