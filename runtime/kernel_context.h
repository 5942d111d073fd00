// KernelContext: what an AOT kernel call carries as its user_context. The
// Halide runtime's malloc, free and error hooks find the ledger and the
// error text through it, so concurrent runs need no global state.
#pragma once

#include <string>

#include "HalideRuntime.h"
#include "runtime/memory_ledger.h"

namespace segtile {

struct DeviceStream;  // runtime/device_memory.h

// The hook setters of one Halide runtime (HalideRuntime.h), for a runtime
// other than the one linked into this process (runtime/kernel_library.h).
struct HalideHookSetters {
    using MallocSetter = decltype(&halide_set_custom_malloc);
    using FreeSetter = decltype(&halide_set_custom_free);
    using ErrorSetter = decltype(&halide_set_error_handler);
    MallocSetter set_malloc;
    FreeSetter set_free;
    ErrorSetter set_error;
};

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
    // The same hooks (not the device ones) in another runtime.
    static void install_halide_hooks(const HalideHookSetters &runtime);
};

}  // namespace segtile
