// The CPU schedule of segtile's kernel pipelines, chosen per Func by the
// shape of its definition: convolutions (and autodiff's gathers for their
// input gradients) register-blocked, conv weight gradients rfactored into
// vector partial sums per channel block, pointwise Funcs read once inlined,
// everything else at root (autodiff pipelines recompute exponentially when
// inlined wholesale), vectorised and parallel. A pure schedule: results do
// not change. docs/design.md ("Schedules") has the measurements.
#pragma once

#include <vector>

#include "Halide.h"

namespace segtile {

// Plans cached on disk were sized with the schedule's own allocations:
// bump this when they change, so that old plans are not reused.
constexpr int kCpuScheduleVersion = 18;  // 18: weight gradients find their shapes by structure, whatever names Halide gave (by name, most lost them in a process that had built kernels before); 17: pure producers read by one conv only computed per band of its rows, an image's 1 or 3 channels one weight-gradient block; 16: weight gradients of narrow images sum their lanes as one vector; 15: max pools' adjoints in pure form (generators/unclamp_adjoints.h), their argmax at root; 14: parallel tasks of 16 rows x 16 channels; 13: parameter gradients over rows of whole vectors (generators/whole_vector_rows.h), weight-gradient lane sums as independent chains; 12: conv channel groups inside row bands, weight gradients by bands of rows; 11: conv chunks sized by input channels; 10: conv reductions taps innermost, weight gradients by rows of taps; 9: conv blocks in chunks along x by groups of channel blocks; 8: narrow weight gradients by columns, first-layer gradients as parameters; 7: parallel tasks of row blocks, parameter rows as wide as they are; 6: pointwise reads of updates inlined; 5: strided convs by phase

void schedule_cpu(const std::vector<Halide::Func> &outputs, const Halide::Target &target);

}  // namespace segtile
