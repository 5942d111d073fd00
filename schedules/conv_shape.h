// Which Funcs of a kernel pipeline are convolution-shaped, for the CPU and
// GPU schedules alike (both compute them in register blocks).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "Halide.h"

namespace segtile::schedule {

using Halide::Func;
using Halide::Stage;

// An RVar's extent if constant. Autodiff leaves extents such as
// (63 - 0) + 1 unsimplified.
inline std::optional<int64_t> constant_extent(const Halide::Internal::ReductionVariable &r) {
    return Halide::Internal::as_const_int(Halide::Internal::simplify(r.extent));
}

// An update whose LHS is the Func's own pure Vars in order: each element
// is a reduction of its own (a gather), which one loop iteration or GPU
// thread can run from the pure definition through every update.
inline bool pure_lhs(Func f, int k) {
    const auto lhs = f.update_args(k);
    if ((int)lhs.size() != f.dimensions()) return false;
    for (int i = 0; i < f.dimensions(); i++) {
        const auto *v = lhs[i].as<Halide::Internal::Variable>();
        if (!v || v->name != f.args()[i].name()) return false;
    }
    return true;
}

// A convolution-shaped update: its LHS is the Func's own pure Vars in
// order (x, y, c, ...) and its reduction is over at least three RVars of
// constant extent (kernel taps and input channels): a forward conv, or
// autodiff's gather for a conv's input gradient. Each output point is a
// short dot product, so it is computed in register blocks as in Halide's
// apps/conv_layer (cpu_conv.cpp, gpu_schedule.cpp).
inline bool conv_update_shaped(Func f, int k) {
    if (!pure_lhs(f, k)) return false;
    const auto rvars = f.update(k).get_schedule().rvars();
    if (rvars.size() < 3) return false;
    for (const auto &r : rvars)
        if (!constant_extent(r)) return false;
    return true;
}

// Every update conv-shaped: one for a conv, one per input phase for a
// strided conv (generators/layers/convolution.h), all accumulated in the
// same register block.
inline bool conv_shaped(Func f) {
    if (f.dimensions() < 3 || f.num_update_definitions() < 1) return false;
    for (int k = 0; k < f.num_update_definitions(); k++)
        if (!conv_update_shaped(f, k)) return false;
    return true;
}

// A conv-shaped update's RVars, innermost first, shortest extent first
// (ties keep their order): the taps inside, the channels outside, so the
// rows a block reads stay in L1 across its taps. A forward conv's RDom is
// already (kx, ky, ci); autodiff's gather for an input gradient puts the
// output channels first, (co, kx, ky): run in that order, every tap swept
// all channels' rows, 96 KiB per tap for 128 channels at 6 rows, twice L1
// (conv 3x3 128->128 input gradient at 37% of peak, the forward at 83%).
inline std::vector<std::string> reduction_by_extent(const Stage &s) {
    std::vector<std::pair<int64_t, std::string>> rv;
    for (const auto &r : s.get_schedule().rvars()) {
        const auto e = constant_extent(r);
        rv.emplace_back(e ? *e : INT64_MAX, r.var);
    }
    std::stable_sort(rv.begin(), rv.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    std::vector<std::string> out;
    for (const auto &[e, name] : rv) out.push_back(name);
    return out;
}

}  // namespace segtile::schedule
