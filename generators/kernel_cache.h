// KernelCache: CPU kernels compiled once and kept on disk, so a second run
// with the same model and plan compiles nothing (docs/formats.md, "Kernel
// cache"). An entry is a shared library (Halide's compile_to_object, linked
// by the C++ compiler segtile was built with) and a manifest beside it:
// the entry's key, the library's file name, size and content hash. The key
// is everything the kernel's code depends on: every field of the model, the
// layout, the kernel, the element type, the target, Halide's version, LLVM's
// options and a fingerprint of segtile's kernel sources (spec/, schedules/,
// generators/). Loading checks the key, the size and the hash; an entry
// that fails a check or does not load is compiled again, never run.
// Libraries are named by their content hash and every file is written
// atomically, so concurrent runs and a kill at any moment leave each entry
// whole or absent. Where linking fails (no compiler), kernels are compiled
// in memory as JitKernels, with one warning.
#pragma once

#include <atomic>
#include <mutex>
#include <ostream>
#include <string>

#include "Halide.h"
#include "runtime/executor.h"

namespace segtile {

struct KernelCacheCounts {
    int compiled = 0;   // compiled (and stored) by this cache object
    int loaded = 0;     // loaded from disk
    int rejected = 0;   // entries found broken (and compiled again): included in `compiled`
    int in_memory = 0;  // compiled as JitKernels because linking failed: included in `compiled`
};

class KernelCache {
public:
    // `dir`: the cache folder (created on first store). `linker`: the C++
    // compiler driver that links an object into a shared library; default:
    // the one segtile was built with. `log` (may be null) gets one line per
    // kernel model_kernels compiles (progress), per broken entry, and the
    // linker's failure.
    explicit KernelCache(std::string dir, std::ostream *log = nullptr, std::string linker = default_linker());

    // Every kernel of `layout` with the CPU schedule, as jit_model_kernels
    // gives them; those not on disk compile in parallel, `threads` at once.
    // Throws KernelError as JitKernel does.
    ModelKernels model_kernels(const Model &m, const SegmentLayout &layout, Halide::Type t, MemoryLedger *ledger,
                               int threads);
    std::unique_ptr<Kernel> kernel(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                                   Halide::Type t, MemoryLedger *ledger);

    KernelCacheCounts counts() const;
    const std::string &dir() const { return dir_; }
    // "3 compiled, 4 loaded from DIR" (and what was rejected or kept in memory).
    std::string summary() const;

    static std::string default_linker();

private:
    // The runtime library's path, stored on first use; "" where the cache
    // cannot be used (link_failed_ says why).
    std::string runtime_library(const Halide::Target &target);
    // kernel(), saying whether it compiled (true) or loaded.
    std::unique_ptr<Kernel> prepare(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                                    Halide::Type t, MemoryLedger *ledger, bool *compiled);
    std::unique_ptr<Kernel> compile_and_store(const Model &m, const SegmentLayout &layout, KernelKind kind,
                                              int segment, Halide::Type t, MemoryLedger *ledger, const std::string &key,
                                              const std::string &stem, const std::string &runtime,
                                              const std::vector<KernelArg> &signature);
    bool link(const std::string &object, const std::string &library, const std::vector<std::string> &extra,
              std::string *why);
    void warn(const std::string &line);

    std::string dir_, linker_;
    std::ostream *log_;
    std::mutex log_mutex_;     // log_
    std::mutex mutex_;         // runtime_, link_failed_, link_warned_
    std::string runtime_;      // the runtime library's path, once stored or found
    std::string link_failed_;  // why linking failed ("" while it works)
    bool link_warned_ = false;
    std::atomic<int> compiled_{0}, loaded_{0}, rejected_{0}, in_memory_{0};
};

// What a CPU kernel's code depends on, as text (the cache's key).
std::string kernel_cache_key(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                             Halide::Type t, const Halide::Target &target);

}  // namespace segtile
