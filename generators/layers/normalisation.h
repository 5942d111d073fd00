// batch_norm, frozen: an affine map with stored statistics, so it stays local
// and tiles like any pointwise layer. Training-mode batch norm is a global
// reduction and is not offered.
#pragma once

#include "generators/layers/common.h"

namespace segtile::layers {

// gamma, beta, mean, var: (c)
inline Func batch_norm(const Func &in, const Func &gamma, const Func &beta, const Func &mean, const Func &var,
                       double eps, Type t, const std::string &name) {
    Dims v;
    Func f(name);
    Expr scale = gamma(v.c) / Halide::sqrt(var(v.c) + constant(t, eps));
    f(v.x, v.y, v.c, v.n) = (in(v.x, v.y, v.c, v.n) - mean(v.c)) * scale + beta(v.c);
    return f;
}

inline std::vector<LayerBuilder> normalisation_layers() {
    return {
        {LayerKind::BatchNorm,
         [](const LayerArgs &a) {
             return batch_norm(a.ins[0], a.param(0), a.param(1), a.param(2), a.param(3), a.layer.eps, a.t, a.name);
         }},
    };
}

}  // namespace segtile::layers
