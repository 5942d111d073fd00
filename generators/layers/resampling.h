// upsample: nearest neighbour by an integer factor (PyTorch's mode="nearest").
#pragma once

#include "generators/layers/common.h"

namespace segtile::layers {

inline Func upsample_nearest(const Func &in, int factor, const std::string &name) {
    Dims v;
    Func f(name);
    f(v.x, v.y, v.c, v.n) = in(v.x / factor, v.y / factor, v.c, v.n);
    return f;
}

inline std::vector<LayerBuilder> resampling_layers() {
    return {
        {LayerKind::Upsample, [](const LayerArgs &a) { return upsample_nearest(a.ins[0], a.layer.factor, a.name); }},
    };
}

}  // namespace segtile::layers
