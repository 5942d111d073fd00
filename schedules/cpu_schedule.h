// The CPU schedule of segtile's kernel pipelines, chosen per Func by the
// shape of its definition: convolutions (and autodiff's gathers for their
// input gradients) register-blocked, conv weight gradients rfactored into
// vector partial sums per channel block, pointwise Funcs read once inlined,
// everything else at root (autodiff pipelines recompute exponentially when
// inlined wholesale), vectorised and parallel. A pure schedule: results do
// not change. docs/design.md ("Schedules") gives the choices; the
// measurements behind them are in docs/journal/.
#pragma once

#include <vector>

#include "Halide.h"

namespace segtile {

// Plans cached on disk were sized with the schedule's own allocations:
// bump this when they change, so that old plans are not reused.
constexpr int kCpuScheduleVersion = 18;

void schedule_cpu(const std::vector<Halide::Func> &outputs, const Halide::Target &target);

}  // namespace segtile
