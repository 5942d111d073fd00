// Pointwise activations: relu, leaky_relu, sigmoid, silu.
#pragma once

#include "generators/layers/common.h"

namespace segtile::layers {

inline Func relu(const Func &in, Type t, const std::string &name) {
    Dims v;
    Func f(name);
    f(v.x, v.y, v.c, v.n) = Halide::max(in(v.x, v.y, v.c, v.n), constant(t, 0));
    return f;
}

inline Func leaky_relu(const Func &in, double slope, Type t, const std::string &name) {
    Dims v;
    Func f(name);
    Expr a = in(v.x, v.y, v.c, v.n);
    f(v.x, v.y, v.c, v.n) = Halide::select(a > constant(t, 0), a, constant(t, slope) * a);
    return f;
}

inline Func sigmoid(const Func &in, Type t, const std::string &name) {
    Dims v;
    Func f(name);
    f(v.x, v.y, v.c, v.n) = constant(t, 1) / (constant(t, 1) + Halide::exp(-in(v.x, v.y, v.c, v.n)));
    return f;
}

// x * sigmoid(x), as x / (1 + exp(-x)): one division, and exactly zero at zero.
inline Func silu(const Func &in, Type t, const std::string &name) {
    Dims v;
    Func f(name);
    Expr a = in(v.x, v.y, v.c, v.n);
    f(v.x, v.y, v.c, v.n) = a / (constant(t, 1) + Halide::exp(-a));
    return f;
}

inline std::vector<LayerBuilder> activation_layers() {
    return {
        {LayerKind::Relu, [](const LayerArgs &a) { return relu(a.ins[0], a.t, a.name); }},
        {LayerKind::LeakyRelu,
         [](const LayerArgs &a) { return leaky_relu(a.ins[0], a.layer.negative_slope, a.t, a.name); }},
        {LayerKind::Sigmoid, [](const LayerArgs &a) { return sigmoid(a.ins[0], a.t, a.name); }},
        {LayerKind::Silu, [](const LayerArgs &a) { return silu(a.ins[0], a.t, a.name); }},
    };
}

}  // namespace segtile::layers
