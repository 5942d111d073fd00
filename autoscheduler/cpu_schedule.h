// A first CPU schedule for segtile's kernel pipelines: every Func at root
// (autodiff pipelines recompute exponentially when inlined), vectorised
// along its innermost pure dimension and parallel over its outer ones, and
// the weight-gradient reductions split with rfactor so that they vectorise
// too. A pure schedule: results do not change.
#pragma once

#include <vector>

#include "Halide.h"

namespace segtile {

void schedule_cpu(const std::vector<Halide::Func> &outputs, const Halide::Target &target);

}  // namespace segtile
