// Turns autodiff's adjoints of bounded tensors (model_graph.cpp's bounded())
// from colliding scatters into injective ones, so they vectorise.
#pragma once

#include <vector>

#include "Halide.h"

namespace segtile {

// A bounded tensor g(x, y, c, n) = select(inside, f(clamp(x), clamp(y), c, n), 0)
// gets, from propagate_adjoints, the update
//   d_f(clamp(r.x), clamp(r.y), c, n) += select(inside(r.x, r.y), d_g(r.x, r.y, c, n), 0)
// (a clamp has no inverse, so autodiff scatters over g's region). Halide
// cannot tell that clamped writes collide only where they add zero, so the
// loop over r.x runs serially in scalars: a whole pass over every bounded
// tensor at several nanoseconds an element (relu's input gradient at
// 64x128x128: 13.8 ms, its forward 0.3 ms). Where the increment is
// provably zero outside the clamps' ranges (the select's condition holds
// every `lo <= r <= hi` of them), this drops those writes (a predicate),
// writes at the bare RVars and marks them pure: each r.x now writes its own
// element, so the schedules may vectorise and parallelise the loop.
// Rewrites every such update among the Funcs `outputs` call; returns how many.
int unclamp_bounded_adjoints(const std::vector<Halide::Func> &outputs);

// An adjoint that is zero but for one such injective update,
//   d_f(x, y, c, n) = 0;  d_f(r.x, r.y, c, n) += inc(r.x, r.y, c, n) where pred,
// is the pure Func
//   d_f'(x, y, c, n) = select(x, y in r's ranges && pred, inc(clamp(x), clamp(y), c, n), 0)
// (the clamps keep every read where the update read): one pass over
// memory instead of two (zero fill, then add), and inlined where it is
// read once. An LHS argument may also be a window s * r.x + r.z with r.z
// of extent s, the scatter of a gather over non-overlapping windows (a
// 2x2 max pool's adjoint): r.x = x / s and r.z = x % s then, one pure pass
// instead of a zero fill and s^2 strided ones. Calls to every such Func among those `outputs` call (not an
// output itself) are redirected to its pure form; returns how many.
int pure_pointwise_adjoints(const std::vector<Halide::Func> &outputs);

// Reads through a clamp of the innermost pure Var, f(clamp(x, lo, hi), ...)
// (bounded() tensors, the pure adjoints above), are gathers when x is
// vectorised: Halide cannot prove a clamped ramp dense. After autodiff
// (which must see plain clamps), this tags each such x as likely, in every
// definition of every Func the `outputs` call, so that Halide partitions x's
// loop into edges and an interior where the clamp is the identity and the
// loads are dense vectors. Semantics are unchanged. Returns how many clamps
// it tagged.
int likely_innermost_clamps(const std::vector<Halide::Func> &outputs);

}  // namespace segtile
