// Kernels in shared libraries loaded at run time (dlopen): what the kernel
// cache (generators/kernel_cache.h) keeps on disk. A kernel library holds
// one pipeline compiled with the no_runtime and user_context features and
// names the Halide runtime library it uses (DT_NEEDED, found beside it).
// Loading installs KernelContext's malloc, free and error hooks in that
// runtime, so the kernel's allocations reach the ledger as an AOT kernel's do.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/kernel.h"

namespace segtile {

// The library's entry point `function` (its _argv and _metadata symbols),
// matched to `signature` by argument name. Throws std::runtime_error when
// the library does not load, lacks the entry points or has other arguments.
// The library stays loaded until the process exits (its runtime's worker
// threads outlive any one kernel).
std::unique_ptr<Kernel> load_library_kernel(const std::string &path, const std::string &function,
                                            std::vector<KernelArg> signature, MemoryLedger *ledger);

}  // namespace segtile
