// Region maps generic over the coordinate type: int64_t for the executor and
// planner, Halide::Expr inside the segment kernels. One formula serves both,
// so the windows the executor allocates are the windows the kernels read.
// `Ops` supplies min, max and floor division for T (see IntOps below; the
// generators define the Expr version).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "spec/model.h"

namespace segtile {

template <typename T>
struct Span {
    T lo, hi;  // inclusive
};

template <typename T>
struct Box {
    Span<T> x, y;
};

struct IntOps {
    static int64_t min(int64_t a, int64_t b) { return std::min(a, b); }
    static int64_t max(int64_t a, int64_t b) { return std::max(a, b); }
    static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
};

// The span of a layer's (first) input read to produce `out` along one axis
// (the layer's AxisMap, spec/layer_kinds.h).
template <typename T, typename Ops>
Span<T> input_span(const Layer &l, const Span<T> &out) {
    const AxisMap a = axis_map(l);
    auto map = [&](const T &v, int64_t add) {
        T e = v;
        if (a.step != 1) e = e * (int)a.step;
        if (add != 0) e = e + (int)add;
        if (a.span_div != 1) e = Ops::floor_div(e, (int)a.span_div);
        return e;
    };
    return {map(out.lo, a.lo_add), map(out.hi, a.hi_add)};
}

template <typename T, typename Ops>
Box<T> hull(const Box<T> &a, const Box<T> &b) {
    return {{Ops::min(a.x.lo, b.x.lo), Ops::max(a.x.hi, b.x.hi)}, {Ops::min(a.y.lo, b.y.lo), Ops::max(a.y.hi, b.y.hi)}};
}

// `a` clamped into `b` along each axis: the pixels a kernel's
// clamp(x, lo, hi) reads for a window `a` of tensor extent `b`. Where `a`
// overlaps `b` this is their intersection; a window wholly in the padding
// (a tile of a padded layer's border) reads the one edge pixel, not nothing.
template <typename T, typename Ops>
Box<T> clamp_into(const Box<T> &a, const Box<T> &b) {
    auto c = [](const T &v, const Span<T> &s) { return Ops::min(Ops::max(v, s.lo), s.hi); };
    return {{c(a.x.lo, b.x), c(a.x.hi, b.x)}, {c(a.y.lo, b.y), c(a.y.hi, b.y)}};
}

// Regions of every tensor (layers 0..L-1, then the input at index L) that
// layers first..last need to produce `targets` (tensor -> region), clipped
// (clamped) to each tensor's whole extent `full`. Tensors nothing needs stay nullopt.
// Which tensors are needed is structural (the same for every tile), so the
// result has the same shape for int64_t and Expr.
template <typename T, typename Ops>
std::vector<std::optional<Box<T>>> required_boxes(const Model &m, int first, int last,
                                                  const std::vector<std::pair<int, Box<T>>> &targets,
                                                  const std::vector<Box<T>> &full) {
    const int L = (int)m.layers.size();
    std::vector<std::optional<Box<T>>> need(L + 1);
    auto merge = [&](int t, const Box<T> &b) {
        Box<T> c = clamp_into<T, Ops>(b, full[t]);
        need[t] = need[t] ? hull<T, Ops>(*need[t], c) : c;
    };
    for (const auto &[t, b] : targets) merge(t, b);
    for (int i = last; i >= first; i--) {
        if (!need[i]) continue;
        const Layer &l = m.layers[i];
        for (int src : l.input_ids) {
            const int t = src < 0 ? L : src;
            if (Model::is_global(l.kind)) merge(t, full[t]);
            else merge(t, {input_span<T, Ops>(l, need[i]->x), input_span<T, Ops>(l, need[i]->y)});
        }
    }
    return need;
}

}  // namespace segtile
