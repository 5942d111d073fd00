// conv2d: kernel, stride, padding, dilation, groups, optional bias; conv_transpose.
#pragma once

#include <numeric>
#include <vector>

#include "generators/layers/common.h"
#include "spec/region_map.h"

namespace segtile::layers {

// One phase of a strided convolution along one axis. Input position
// x*s - p + k*d, for the taps k with (k*d - p) mod s == phase, equals
// s*(x + q) + phase with q = offset + j*offset_step for the j-th such tap
// k = first_tap + j*tap_step: a unit-stride convolution over the phase's
// subsampled input in_phase(x') = in(s*x' + phase).
struct ConvPhase {
    int phase = 0, first_tap = 0, tap_step = 1, taps = 0, offset = 0, offset_step = 1;
};

inline std::vector<ConvPhase> conv_phases(int kernel, int stride, int padding, int dilation) {
    const int g = std::gcd(stride, dilation);
    std::vector<ConvPhase> out;
    for (int a = 0; a < stride; a++) {
        ConvPhase ph{a, 0, stride / g, 0, 0, dilation / g};
        for (int k = 0; k < kernel; k++) {
            const int at = k * dilation - padding, q = (int)IntOps::floor_div(at, stride);
            if (at - q * stride != a) continue;
            if (ph.taps++ == 0) {
                ph.first_tap = k;
                ph.offset = q;
            }
        }
        if (ph.taps > 0) out.push_back(ph);
    }
    return out;
}

// out(x, y, co, n) = bias(co) + sum_{kx, ky, ci} w(kx, ky, ci, co)
//                    * in(x*s - p + kx*d, y*s - p + ky*d, group(co) * cin_g + ci, n)
// w: (k, k, c_in / groups, c_out), PyTorch's OIHW in memory. `in` must read as
// zero outside the image (the model assembler bounds every tensor).
//
// A strided conv is written as a sum over the input's s x s phases of
// unit-stride convs (one update per phase, ConvPhase): autodiff cannot
// invert x*s in an input index, so it would write the input gradient as a
// scatter over every tap, pixel and channel pair (conv 3x3 64->128 stride 2
// at 128^2: over 120 s). Unit-stride taps invert into a gather that the
// CPU schedule register-blocks like any conv; what is left to scatter is
// each phase copy's adjoint, one strided pass over the input.
inline Func conv2d(const Func &in, const Func &weight, const Func &bias, const Layer &l, Type t,
                   const std::string &name) {
    Dims v;
    const int cin_g = l.in_channels / l.groups, cout_g = l.out_channels / l.groups;
    // The clamp never changes a value (ci is always in [0, in_channels)); it
    // keeps Halide's autodiff off a wrong rewrite. Without it, for groups > 1
    // with one output channel per group, the input adjoint is scattered to
    // c * cin_g + r.z, which Halide's "s * r.x + r.y -> x" scatter
    // simplification turns into x while still summing over r.z: each input
    // channel's gradient becomes the sum over its whole group (seen with
    // in 4, out 2, groups 2; test/layer_gradient_test.cpp).
    auto channel = [&](Expr rz) {
        return l.groups == 1 ? rz : Halide::clamp((v.c / cout_g) * cin_g + rz, 0, l.in_channels - 1);
    };
    Func f(name);
    f(v.x, v.y, v.c, v.n) = bias.defined() ? bias(v.c) : constant(t, 0);
    if (l.stride == 1) {
        RDom r(0, l.kernel, 0, l.kernel, 0, cin_g, name + "_r");
        f(v.x, v.y, v.c, v.n) += weight(r.x, r.y, r.z, v.c) *
                                 in(v.x - l.padding + r.x * l.dilation, v.y - l.padding + r.y * l.dilation,
                                    channel(r.z), v.n);
        return f;
    }
    const auto phases = conv_phases(l.kernel, l.stride, l.padding, l.dilation);
    for (const ConvPhase &px : phases)
        for (const ConvPhase &py : phases) {
            const std::string ab = "_phase" + std::to_string(px.phase) + std::to_string(py.phase);
            // in_ab: (ceil(W / s), ceil(H / s), c_in, n), the phase's subsampled input
            Func in_ab(name + ab);
            in_ab(v.x, v.y, v.c, v.n) = in(v.x * l.stride + px.phase, v.y * l.stride + py.phase, v.c, v.n);
            // w_ab: (taps_x, taps_y, c_in / groups, c_out), the phase's taps. Named
            // after the parameter (p_*: the CPU schedule's weight-gradient shape);
            // the clamps keep autodiff from inverting the tap index into a
            // gather that would read w_ab's adjoint past its taps.
            Func w_ab(weight.name() + ab);
            w_ab(v.x, v.y, v.c, v.n) = weight(px.first_tap + Halide::clamp(v.x, 0, px.taps - 1) * px.tap_step,
                                              py.first_tap + Halide::clamp(v.y, 0, py.taps - 1) * py.tap_step, v.c, v.n);
            RDom r(0, px.taps, 0, py.taps, 0, cin_g, name + ab + "_r");
            f(v.x, v.y, v.c, v.n) += w_ab(r.x, r.y, r.z, v.c) *
                                     in_ab(v.x + px.offset + r.x * px.offset_step,
                                           v.y + py.offset + r.y * py.offset_step, channel(r.z), v.n);
        }
    return f;
}

// One output phase of a strided transposed convolution along one axis.
// Output x = s*q + phase receives the taps k with (phase + p - k*d) mod s
// == 0, from input q + offset - j*offset_step for the j-th such tap
// k = first_tap + j*tap_step: a unit-stride convolution per phase.
inline std::vector<ConvPhase> conv_transpose_phases(int kernel, int stride, int padding, int dilation) {
    const int g = std::gcd(stride, dilation);
    std::vector<ConvPhase> out;
    for (int a = 0; a < stride; a++) {
        ConvPhase ph{a, 0, stride / g, 0, 0, dilation / g};
        for (int k = 0; k < kernel; k++) {
            const int at = a + padding - k * dilation;
            if (IntOps::floor_div(at, stride) * stride != at) continue;
            if (ph.taps++ == 0) {
                ph.first_tap = k;
                ph.offset = (int)IntOps::floor_div(at, stride);
            }
        }
        out.push_back(ph);  // a phase without taps is the bias alone
    }
    return out;
}

// PyTorch's ConvTranspose2d (groups 1): the adjoint of conv2d's window,
//   out(x, y, co, n) = bias(co) + sum over ci and the taps (kx, ky) with
//   x = i*s - p + kx*d, y = j*s - p + ky*d of w(kx, ky, co, ci) * in(i, j, ci, n)
// w: (k, k, c_out, c_in), PyTorch's (in, out, kH, kW) in memory. Written as
// one unit-stride convolution per output phase (x mod s, y mod s), so
// autodiff inverts every input index into a gather, as for strided conv2d.
inline Func conv_transpose2d(const Func &in, const Func &weight, const Func &bias, const Layer &l, Type t,
                             const std::string &name) {
    Dims v;
    const int s = l.stride;
    const auto phases = conv_transpose_phases(l.kernel, s, l.padding, l.dilation);
    Expr e;
    for (int b = s - 1; b >= 0; b--)
        for (int a = s - 1; a >= 0; a--) {
            const ConvPhase &px = phases[a], &py = phases[b];
            const std::string ab = "_phase" + std::to_string(a) + std::to_string(b);
            Func f(name + ab);
            f(v.x, v.y, v.c, v.n) = bias.defined() ? bias(v.c) : constant(t, 0);
            if (px.taps > 0 && py.taps > 0) {
                // w_ab: (taps_x, taps_y, c_out, c_in), named after the parameter (p_*)
                // as conv2d's phases are; the clamps keep autodiff's gather in range.
                Func w_ab(weight.name() + ab);
                w_ab(v.x, v.y, v.c, v.n) =
                    weight(px.first_tap + Halide::clamp(v.x, 0, px.taps - 1) * px.tap_step,
                           py.first_tap + Halide::clamp(v.y, 0, py.taps - 1) * py.tap_step, v.c, v.n);
                RDom r(0, px.taps, 0, py.taps, 0, l.in_channels, name + ab + "_r");
                f(v.x, v.y, v.c, v.n) += w_ab(r.x, r.y, v.c, r.z) *
                                         in(v.x + px.offset - r.x * px.offset_step,
                                            v.y + py.offset - r.y * py.offset_step, r.z, v.n);
            }
            Expr here = f(v.x / s, v.y / s, v.c, v.n);
            e = e.defined() ? Halide::select(v.x % s == a && v.y % s == b, here, e) : here;
        }
    Func out(name);
    out(v.x, v.y, v.c, v.n) = e;
    return out;
}

inline std::vector<LayerBuilder> convolution_layers() {
    return {
        {LayerKind::Conv2d,
         [](const LayerArgs &a) { return conv2d(a.ins[0], a.param(0), a.param(1), a.layer, a.t, a.name); }},
        {LayerKind::ConvTranspose2d,
         [](const LayerArgs &a) { return conv_transpose2d(a.ins[0], a.param(0), a.param(1), a.layer, a.t, a.name); }},
    };
}

}  // namespace segtile::layers
