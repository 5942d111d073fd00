// concat (channels, in input order, as torch.cat(dim=1)) and add (residual).
#pragma once

#include <vector>

#include "generators/layers/common.h"

namespace segtile::layers {

// Channel indices are clamped into each input's range so bounds inference
// never asks an input for channels it does not have.
inline Func concat(const std::vector<Func> &ins, const std::vector<int> &channels, const std::string &name) {
    Dims v;
    std::vector<int> offset(ins.size(), 0);
    for (size_t i = 1; i < ins.size(); i++) offset[i] = offset[i - 1] + channels[i - 1];
    auto read = [&](size_t i) {
        return ins[i](v.x, v.y, Halide::clamp(v.c - offset[i], 0, channels[i] - 1), v.n);
    };
    Expr e = read(ins.size() - 1);
    for (int i = (int)ins.size() - 2; i >= 0; i--) e = Halide::select(v.c < offset[i] + channels[i], read(i), e);
    Func f(name);
    f(v.x, v.y, v.c, v.n) = e;
    return f;
}

inline Func add(const std::vector<Func> &ins, const std::string &name) {
    Dims v;
    Expr e = ins[0](v.x, v.y, v.c, v.n);
    for (size_t i = 1; i < ins.size(); i++) e = e + ins[i](v.x, v.y, v.c, v.n);
    Func f(name);
    f(v.x, v.y, v.c, v.n) = e;
    return f;
}

inline std::vector<LayerBuilder> join_layers() {
    return {
        {LayerKind::Concat, [](const LayerArgs &a) { return concat(a.ins, a.in_channels, a.name); }},
        {LayerKind::Add, [](const LayerArgs &a) { return add(a.ins, a.name); }},
    };
}

}  // namespace segtile::layers
