// max_pool, avg_pool (count_include_pad, as PyTorch's default), global_avg_pool.
#pragma once

#include "generators/layers/common.h"

namespace segtile::layers {

// Max pooling as a gather from the first tap (row-major) that attains the
// maximum: out = sum over taps of select(k == argmax, tap_k, 0). The
// gradient flows only to that tap, as in PyTorch, through one update
// definition; differentiating nested max() instead yields k^2 updates full
// of comparisons and multiplies compile time. The argmax is a pure integer
// Func whose float comparisons sit only in select conditions, where
// autodiff does not propagate. Padding taps read -inf, as in PyTorch.
inline Func max_pool(const Func &in, const Layer &l, Expr in_width, Expr in_height, Type t, const std::string &name) {
    Dims v;
    const int k = l.kernel;
    auto tap = [&](Expr kx, Expr ky) {
        Expr xx = v.x * l.stride - l.padding + kx, yy = v.y * l.stride - l.padding + ky;
        Expr value = in(xx, yy, v.c, v.n);
        if (l.padding > 0) value = Halide::select(xx >= 0 && xx < in_width && yy >= 0 && yy < in_height, value, t.min());
        return value;
    };
    std::vector<Expr> taps;
    for (int i = 0; i < k * k; i++) taps.push_back(tap(i % k, i / k));
    Expr index = k * k - 1;
    for (int i = k * k - 2; i >= 0; i--) {
        Expr wins = Halide::Internal::const_true();
        for (int j = 0; j < k * k; j++)
            if (j != i) wins = wins && (j < i ? taps[i] > taps[j] : taps[i] >= taps[j]);
        index = Halide::select(wins, i, index);
    }
    Func argmax(name + "_argmax");
    argmax(v.x, v.y, v.c, v.n) = index;
    RDom r(0, k, 0, k, name + "_r");
    Func f(name);
    f(v.x, v.y, v.c, v.n) = constant(t, 0);
    f(v.x, v.y, v.c, v.n) += Halide::select(argmax(v.x, v.y, v.c, v.n) == r.y * k + r.x, tap(r.x, r.y), constant(t, 0));
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
    // in(r.x, r.y), not in(x + r.x, y + r.y): the output is one pixel
    // (x = y = 0) either way, but autodiff turns the latter's adjoint into
    // a gather over the whole image for every input pixel, d_in(x, y) +=
    // d_sum(x - r.x, y - r.y): quadratic in the pixels (VGG16's head took
    // 24 s of a 62 s step at 8192^2 on an H200). Here each input pixel's
    // adjoint reads the one output pixel.
    f(v.x, v.y, v.c, v.n) += in(r.x, r.y, v.c, v.n);
    Func g(name);
    g(v.x, v.y, v.c, v.n) = f(v.x, v.y, v.c, v.n) / Halide::cast(t, width * height);
    return g;
}

inline std::vector<LayerBuilder> pooling_layers() {
    return {
        {LayerKind::MaxPool,
         [](const LayerArgs &a) { return max_pool(a.ins[0], a.layer, a.in_width, a.in_height, a.t, a.name); }},
        {LayerKind::AvgPool, [](const LayerArgs &a) { return avg_pool(a.ins[0], a.layer, a.t, a.name); }},
        {LayerKind::GlobalAvgPool,
         [](const LayerArgs &a) { return global_avg_pool(a.ins[0], a.in_width, a.in_height, a.t, a.name); }},
    };
}

}  // namespace segtile::layers
