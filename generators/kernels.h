// Builds the Halide pipeline of any kernel in spec/kernel_signature.h: a
// segment's forward tile kernel, its backward tile kernel (propagate_adjoints
// of the very same Funcs, forward recomputed inside), or the untiled head.
// The same builder serves JIT (jit_kernel.h) and AOT (kernel_generator.cpp).
#pragma once

#include <map>
#include <string>

#include "Halide.h"
#include "spec/kernel_signature.h"

namespace segtile {

struct KernelInputs {
    std::map<std::string, Halide::Func> buffers;  // by argument name
    std::map<std::string, Halide::Expr> scalars;  // by argument name
    // Extents (x, y, n) of every input buffer, by argument name.
    std::map<std::string, std::array<Halide::Expr, 3>> extents;
};

// Output Funcs by argument name, each defined over the whole of its buffer.
std::map<std::string, Halide::Func> build_kernel(const Model &m, const SegmentLayout &layout, KernelKind kind,
                                                 int segment, const KernelInputs &in, Halide::Type t);

// The reference schedule: every Func reachable from `outputs` computed at
// root. Autodiff pipelines left inlined recompute exponentially.
void schedule_reference(const std::vector<Halide::Func> &outputs);

}  // namespace segtile
