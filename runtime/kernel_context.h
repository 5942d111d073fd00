// KernelContext: what an AOT kernel call carries as its user_context. The
// Halide runtime's malloc, free and error hooks find the ledger and the
// error text through it, so concurrent runs need no global state.
#pragma once

#include <string>

#include "runtime/memory_ledger.h"

namespace segtile {

struct DeviceStream;  // runtime/device_memory.h

struct KernelContext {
    MemoryLedger *ledger = nullptr;
    std::string last_error;
    // The CUDA stream the call's copies and kernels go to (null: Halide's
    // default stream, where every call and copy waits for the one before).
    DeviceStream *stream = nullptr;

    // Installs segtile's malloc/free/error hooks in the Halide runtime linked
    // into this process (idempotent). Kernels must be compiled with the
    // user_context target feature.
    static void install_halide_hooks();
};

}  // namespace segtile
