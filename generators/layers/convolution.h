// conv2d: kernel, stride, padding, dilation, groups, optional bias.
#pragma once

#include "generators/layers/common.h"

namespace segtile::layers {

// out(x, y, co, n) = bias(co) + sum_{kx, ky, ci} w(kx, ky, ci, co)
//                    * in(x*s - p + kx*d, y*s - p + ky*d, group(co) * cin_g + ci, n)
// w: (k, k, c_in / groups, c_out), PyTorch's OIHW in memory. `in` must read as
// zero outside the image (the model assembler bounds every tensor).
inline Func conv2d(const Func &in, const Func &weight, const Func &bias, const Layer &l, Type t,
                   const std::string &name) {
    Dims v;
    const int cin_g = l.in_channels / l.groups, cout_g = l.out_channels / l.groups;
    RDom r(0, l.kernel, 0, l.kernel, 0, cin_g, name + "_r");
    // The clamp never changes a value (ci is always in [0, in_channels)); it
    // keeps Halide's autodiff off a wrong rewrite. Without it, for groups > 1
    // with one output channel per group, the input adjoint is scattered to
    // c * cin_g + r.z, which Halide's "s * r.x + r.y -> x" scatter
    // simplification turns into x while still summing over r.z: each input
    // channel's gradient becomes the sum over its whole group (seen with
    // in 4, out 2, groups 2; test/layer_gradient_test.cpp).
    Expr ci = l.groups == 1 ? Expr(r.z) : Halide::clamp((v.c / cout_g) * cin_g + r.z, 0, l.in_channels - 1);
    Func f(name);
    f(v.x, v.y, v.c, v.n) = bias.defined() ? bias(v.c) : constant(t, 0);
    f(v.x, v.y, v.c, v.n) += weight(r.x, r.y, r.z, v.c) *
                             in(v.x * l.stride - l.padding + r.x * l.dilation,
                                v.y * l.stride - l.padding + r.y * l.dilation, ci, v.n);
    return f;
}

}  // namespace segtile::layers
