// flatten and dense: the classifier head, run untiled on a small checkpoint.
#pragma once

#include "generators/layers/common.h"

namespace segtile::layers {

// out(0, 0, f, n) = in(w, h, c, n) with f = (c * H + h) * W + w: torch.flatten(x, 1).
inline Func flatten(const Func &in, Expr width, Expr height, const std::string &name) {
    Dims v;
    Func f(name);
    f(v.x, v.y, v.c, v.n) = in(v.x + v.c % width, v.y + (v.c / width) % height, v.c / (width * height), v.n);
    return f;
}

// out(0, 0, o, n) = bias(o) + sum_i w(i, o) * in(0, 0, i, n); w: (in, out), PyTorch's (out, in) in memory.
inline Func dense(const Func &in, const Func &weight, const Func &bias, int in_features, Type t,
                  const std::string &name) {
    Dims v;
    RDom r(0, in_features, name + "_r");
    Func f(name);
    f(v.x, v.y, v.c, v.n) = bias.defined() ? bias(v.c) : constant(t, 0);
    f(v.x, v.y, v.c, v.n) += weight(r, v.c) * in(v.x, v.y, r, v.n);
    return f;
}

inline std::vector<LayerBuilder> head_layers() {
    return {
        {LayerKind::Flatten, [](const LayerArgs &a) { return flatten(a.ins[0], a.in_width, a.in_height, a.name); }},
        {LayerKind::Dense,
         [](const LayerArgs &a) {
             return dense(a.ins[0], a.param(0), a.param(1), a.layer.in_features, a.t, a.name);
         }},
    };
}

}  // namespace segtile::layers
