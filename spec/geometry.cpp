#include "spec/geometry.h"

#include <algorithm>
#include <numeric>

namespace segtile {

namespace {
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
}  // namespace

Interval Interval::hull(const Interval &o) const {
    if (empty()) return o;
    if (o.empty()) return *this;
    return {std::min(lo, o.lo), std::max(hi, o.hi)};
}

Interval Interval::intersect(const Interval &o) const { return {std::max(lo, o.lo), std::min(hi, o.hi)}; }

Interval input_interval(const Layer &l, const Interval &out) {
    if (out.empty()) return out;
    switch (l.kind) {
    case LayerKind::Conv2d:
        return {out.lo * l.stride - l.padding, out.hi * l.stride - l.padding + (int64_t)l.dilation * (l.kernel - 1)};
    case LayerKind::MaxPool:
    case LayerKind::AvgPool:
        return {out.lo * l.stride - l.padding, out.hi * l.stride - l.padding + l.kernel - 1};
    case LayerKind::Upsample:
        return {floor_div(out.lo, l.factor), floor_div(out.hi, l.factor)};
    default:
        return out;  // elementwise and joins; global layers are handled by callers
    }
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
    // Map output pixel 0 back through the chain, last layer first.
    ChainGeometry g;
    Interval at0{0, 0};
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        at0 = input_interval(*it, at0);
        switch (it->kind) {
        case LayerKind::Conv2d:
        case LayerKind::MaxPool:
        case LayerKind::AvgPool:
            g.stride_num *= it->stride;
            break;
        case LayerKind::Upsample:
            g.stride_den *= it->factor;
            break;
        default:
            break;
        }
    }
    int64_t gcd = std::gcd(g.stride_num, g.stride_den);
    g.stride_num /= gcd;
    g.stride_den /= gcd;
    g.receptive_field = at0.extent();
    g.halo_lo = -at0.lo;
    g.halo_hi = at0.hi;
    return g;
}

}  // namespace segtile
