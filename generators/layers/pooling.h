// max_pool, avg_pool (count_include_pad, as PyTorch's default), global_avg_pool.
#pragma once

#include "generators/layers/common.h"

namespace segtile::layers {

// Nested max of the k*k taps: Halide cannot differentiate maximum() over an
// RDom. Padding taps read -inf as in PyTorch, hence the image extents.
inline Func max_pool(const Func &in, const Layer &l, Expr in_width, Expr in_height, Type t, const std::string &name) {
    Dims v;
    Expr result;
    for (int ky = 0; ky < l.kernel; ky++) {
        for (int kx = 0; kx < l.kernel; kx++) {
            Expr xx = v.x * l.stride - l.padding + kx, yy = v.y * l.stride - l.padding + ky;
            Expr tap = in(xx, yy, v.c, v.n);
            if (l.padding > 0) tap = Halide::select(xx >= 0 && xx < in_width && yy >= 0 && yy < in_height, tap, t.min());
            result = result.defined() ? Halide::max(result, tap) : tap;
        }
    }
    Func f(name);
    f(v.x, v.y, v.c, v.n) = result;
    return f;
}

inline Func avg_pool(const Func &in, const Layer &l, Type t, const std::string &name) {
    Dims v;
    RDom r(0, l.kernel, 0, l.kernel, name + "_r");
    Func f(name);
    f(v.x, v.y, v.c, v.n) = constant(t, 0);
    f(v.x, v.y, v.c, v.n) += in(v.x * l.stride - l.padding + r.x, v.y * l.stride - l.padding + r.y, v.c, v.n);
    Func g(name + "_mean");
    g(v.x, v.y, v.c, v.n) = f(v.x, v.y, v.c, v.n) * constant(t, 1.0 / (l.kernel * l.kernel));
    return g;
}

// out(0, 0, c, n) = mean over the whole image of in(., ., c, n).
inline Func global_avg_pool(const Func &in, Expr width, Expr height, Type t, const std::string &name) {
    Dims v;
    RDom r(0, width, 0, height, name + "_r");
    Func f(name + "_sum");
    f(v.x, v.y, v.c, v.n) = constant(t, 0);
    f(v.x, v.y, v.c, v.n) += in(v.x + r.x, v.y + r.y, v.c, v.n);
    Func g(name);
    g(v.x, v.y, v.c, v.n) = f(v.x, v.y, v.c, v.n) / Halide::cast(t, width * height);
    return g;
}

}  // namespace segtile::layers
