// MemoryLedger: every byte the runtime and the Halide kernels allocate is
// counted here, so reported peaks are measured, not estimated. Halide's
// allocations reach it through the kernels' user_context (KernelContext),
// so there is no global ledger.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/block_cache.h"

namespace segtile {

class MemoryLedger {
public:
    // Categories reported separately: the checkpoint store is not working memory.
    // Data: the input batch (images, their gradients, predictions), which
    // the caller holds whatever the plan. Device: memory on a GPU, allocated
    // by Halide's CUDA runtime (runtime/device_memory.h).
    enum class Kind { Working, Checkpoint, Data, Device };

    MemoryLedger() = default;
    MemoryLedger(const MemoryLedger &) = delete;
    MemoryLedger &operator=(const MemoryLedger &) = delete;
    // Device allocations still recorded against this ledger stop being
    // attributed to it (they may outlive it in Halide's allocation cache).
    ~MemoryLedger();

    void allocated(size_t bytes, Kind k = Kind::Working);
    void freed(size_t bytes, Kind k = Kind::Working);

    int64_t current(Kind k = Kind::Working) const { return counter(k).current.load(); }
    int64_t peak(Kind k = Kind::Working) const { return counter(k).peak.load(); }
    int64_t halide_peak() const { return halide_.peak.load(); }
    int64_t halide_current() const { return halide_.current.load(); }
    // Also frees the blocks cached for reuse (below): a phase measured after
    // this starts from the memory actually in use.
    void reset_peaks();

    // Allocations made by Halide kernels: working memory, also tracked apart.
    void halide_allocated(size_t bytes);
    void halide_freed(size_t bytes);

    // The allocator behind the AOT (KernelContext) and JIT (JitKernel) hooks:
    // 128-byte aligned for Halide's vector loads, counted in `ledger` when
    // one is given (a header before the block records the size for free).
    // With a ledger, blocks of BlockCache::kMinBytes and more are kept when
    // freed and reused by later calls: they stay counted as held working
    // memory (not as Halide's: halide_peak() is what kernels had live), and
    // working memory grows only after evicting enough of them that the peak
    // does not rise (the peak is the same as without the cache; the process
    // high-water mark too).
    static void *halide_malloc(MemoryLedger *ledger, size_t bytes) { return block_malloc(ledger, bytes, true); }
    static void halide_free(MemoryLedger *ledger, void *ptr) { block_free(ledger, ptr); }
    // The same for the runtime's own working tensors (Tensor): per-tile
    // gradient windows and partial sums reuse blocks too. Not zeroed.
    static void *working_malloc(MemoryLedger *ledger, size_t bytes) { return block_malloc(ledger, bytes, false); }
    static void working_free(MemoryLedger *ledger, void *ptr) { block_free(ledger, ptr); }
    // Bytes of freed Halide blocks held for reuse (counted in current()).
    int64_t cached() const { return (int64_t)cache_.cached_bytes(); }

private:
    struct Counter {
        std::atomic<int64_t> current{0}, peak{0};
        void add(int64_t b);
    };
    Counter &counter(Kind k) {
        return k == Kind::Working ? working_ : k == Kind::Checkpoint ? checkpoint_ : k == Kind::Data ? data_ : device_;
    }
    const Counter &counter(Kind k) const {
        return k == Kind::Working ? working_ : k == Kind::Checkpoint ? checkpoint_ : k == Kind::Data ? data_ : device_;
    }
    static void *block_malloc(MemoryLedger *ledger, size_t bytes, bool halide);
    static void block_free(MemoryLedger *ledger, void *ptr);
    void *cached_malloc(size_t bytes, size_t payload, bool halide);
    void release_cache();
    // Evicts cached blocks so that `bytes` more working memory does not
    // raise the peak where the cache alone would have.
    void make_room(size_t bytes);

    static void release_block(void *base, size_t capacity);  // a cached block, for good

    Counter working_, checkpoint_, data_, device_, halide_;
    BlockCache cache_{&MemoryLedger::release_block};
};

// The process's resident-set high-water mark (VmHWM), in bytes.
int64_t process_high_water_mark();
// The process's resident set now (VmRSS), in bytes.
int64_t process_resident_bytes();
// Lowers VmHWM to the current resident set, so that a later
// process_high_water_mark() is the peak of what ran since (a step's, not
// the compiler's before it). False where the kernel refuses.
bool reset_process_high_water_mark();

// The memory the system can give without swapping (MemAvailable), in bytes
// (0 if unknown).
int64_t available_memory_bytes();

// The machine's physical memory, in bytes (0 if unknown).
int64_t physical_memory_bytes();

// "12.3 MiB"
std::string format_bytes(int64_t bytes);

}  // namespace segtile

namespace segtile {
// "256MiB", "1.5GiB", "512M", "1000000" -> bytes; throws std::invalid_argument
// with what was expected.
int64_t parse_bytes(const std::string &text);
}  // namespace segtile
