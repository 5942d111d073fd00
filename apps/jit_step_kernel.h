// The untiled training step of any model, JIT-compiled (for models without an AOT library).
#pragma once

#include "generators/jit_kernel.h"
#include "runtime/step_kernel.h"

namespace segtile {

inline std::unique_ptr<StepKernel> jit_step(const Model &m, MemoryLedger *ledger) {
    return std::make_unique<KernelStep>(
        m, std::make_unique<JitKernel>(m, untiled_layout(m), KernelKind::Head, 0, Halide::Float(32), ledger));
}

}  // namespace segtile
