// Every environment variable segtile reads, one function each; this is the
// only place that reads one (scripts/check_sources.sh checks it). Each
// is read when called, nothing is cached. docs/program.md, "Environment",
// is the user's list.
#pragma once

#include <string>

namespace segtile::environment {

// SEGTILE_HOME, else $HOME/.cache/segtile; "" when neither is set. Plans,
// calibrations and compiled kernels are cached below it.
std::string home();

// Where compiled kernels are kept (generators/kernel_cache.h):
// SEGTILE_KERNEL_CACHE, a folder, or "off" for none (""); else home()/kernels.
std::string kernel_cache_dir();

// HL_LLVM_ARGS (Halide's own variable): LLVM options of every compile, so
// part of what a compiled kernel depends on.
std::string llvm_args();

// SEGTILE_MEMORY_AVAILABLE: the memory segtile may assume free ("64GiB"),
// instead of the system's MemAvailable; "" when unset.
std::string memory_available();

// SEGTILE_MODELS_DIR: where shipped models are looked up ("" when unset).
std::string models_dir();

// HL_NUM_THREADS (Halide's own variable), else the hardware's thread count:
// the threads a plan is timed for.
int threads();

// SEGTILE_DUMP_STMT / SEGTILE_DUMP_ASM: folders that receive each JIT
// kernel's lowered statement / assembly ("" when unset).
std::string dump_stmt_dir();
std::string dump_asm_dir();

// Debug printing: SEGTILE_SCHEDULE_DEBUG (the schedule each stage gets),
// SEGTILE_LOWERED_DEBUG (allocations the lowered-memory model counts),
// SEGTILE_PLAN_DEBUG (per calibrated segment: analytic and exact bytes).
bool schedule_debug();
bool lowered_debug();
bool plan_debug();

}  // namespace segtile::environment
