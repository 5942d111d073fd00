// Rounds the image rows that a parameter's gradient sums over up to whole
// vectors, so that the CPU schedule's vector lanes along a row never run a
// partial vector.
#pragma once

#include <vector>

#include "Halide.h"

namespace segtile {

// A parameter's adjoint from propagate_adjoints sums over the image,
//   d_w(kx, ky, ci, co) += inc(r.x, r.y, r.z, ...)   (r.x: image x, a run-time extent),
// and the CPU schedule splits r.x into vector lanes (schedules/
// cpu_weight_grad.cpp). Halide runs the lanes of a row's last, partial vector
// under a predicate, accumulators included: LLVM then loads and stores the
// accumulators around every FMA (conv 3x3 512->1024 at 8x8, rows half a
// vector: weight gradient at 26 GFLOP/s), or scalarises them. This makes
// r.x's extent a multiple of `lanes` and adds inc only where r.x lies in
// the original extent (a select: a blend in the lanes, no predicate). The
// extra columns read the producers a few columns further, which bounds
// inference computes (every tensor a segment kernel reads is a Func defined
// everywhere: the sources are bounded copies, generators/model_graph.cpp).
// Rewrites each such update of a parameter's adjoint that a gradient
// output among `outputs` reads (schedules/parameter_adjoints.h);
// returns how many.
int whole_vector_rows(const std::vector<Halide::Func> &outputs, int lanes);

}  // namespace segtile
