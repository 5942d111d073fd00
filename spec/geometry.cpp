#include "spec/geometry.h"

#include "spec/region_map.h"

#include <algorithm>
#include <climits>
#include <numeric>

namespace segtile {

Interval Interval::hull(const Interval &o) const {
    if (empty()) return o;
    if (o.empty()) return *this;
    return {std::min(lo, o.lo), std::max(hi, o.hi)};
}

Interval Interval::intersect(const Interval &o) const { return {std::max(lo, o.lo), std::min(hi, o.hi)}; }

// The same map the executor and the kernels use (spec/region_map.h).
Interval input_interval(const Layer &l, const Interval &out) {
    if (out.empty()) return out;
    const Span<int64_t> in = input_span<int64_t, IntOps>(l, {out.lo, out.hi});
    return {in.lo, in.hi};
}

Region input_region(const Layer &l, const Region &out) { return {input_interval(l, out.x), input_interval(l, out.y)}; }

std::vector<Region> required_regions(const Model &m, int target, const Region &out, int64_t width, int64_t height) {
    const auto shapes = m.shapes(width, height);
    const size_t n = m.layers.size();
    std::vector<Region> need(n + 1);  // default-constructed regions are empty
    auto full = [&](int i) {
        int64_t w = i < 0 ? width : shapes[i].width, h = i < 0 ? height : shapes[i].height;
        return Region{{0, w - 1}, {0, h - 1}};
    };
    need[target] = out.intersect(full(target));
    for (int i = target; i >= 0; i--) {
        if (need[i].empty()) continue;
        const Layer &l = m.layers[i];
        for (int src : l.input_ids) {
            Region r = Model::is_global(l.kind) ? full(src) : input_region(l, need[i]);
            r = r.intersect(full(src));
            Region &dst = src < 0 ? need[n] : need[src];
            dst = dst.hull(r);
        }
    }
    return need;
}

ChainGeometry chain_geometry(const std::vector<Layer> &chain) {
    ChainGeometry g;
    int64_t num = 1, den = 1;  // unreduced: products of strides and of upsample factors
    for (const Layer &l : chain) {
        switch (l.kind) {
        case LayerKind::Conv2d:
        case LayerKind::MaxPool:
        case LayerKind::AvgPool:
            num *= l.stride;
            break;
        case LayerKind::Upsample:
            den *= l.factor;
            break;
        default:
            break;
        }
    }
    const int64_t gcd = std::gcd(num, den);
    g.stride_num = num / gcd;
    g.stride_den = den / gcd;
    // Output pixel o + den reads what o reads shifted by num, so the pixels
    // 0..den-1 cover every case; with upsampling they differ (floor division),
    // so take the widest reach over them, not pixel 0's alone.
    g.receptive_field = 0;
    g.halo_lo = g.halo_hi = INT64_MIN;
    for (int64_t o = 0; o < den; o++) {
        Interval in{o, o};
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) in = input_interval(*it, in);
        const int64_t at = IntOps::floor_div(o * num, den);
        g.receptive_field = std::max(g.receptive_field, in.extent());
        g.halo_lo = std::max(g.halo_lo, at - in.lo);
        g.halo_hi = std::max(g.halo_hi, in.hi - at);
    }
    return g;
}

}  // namespace segtile
