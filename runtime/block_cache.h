// BlockCache: large blocks that Halide kernels and the runtime's working
// tensors freed, kept for the next allocation of about the same size. A
// kernel called once per tile
// allocates the same intermediates on every call; returned to the system
// (glibc maps blocks of 128 KiB and more, and unmaps them on free) each one
// was faulted in again, page by page, on the next call, which cost a conv
// 3x3 backward about a third of its time.
//
// The owner (MemoryLedger) counts cached blocks as held memory and evicts
// before any allocation that would raise its peak, so the peak it reports
// is the same as without the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace segtile {

class BlockCache {
public:
    // Blocks below this go back to malloc: glibc reuses them without faults.
    static constexpr size_t kMinBytes = size_t(128) << 10;

    // How a block leaves the cache for good (the owner's allocator).
    using Release = void (*)(void *base, size_t capacity);
    explicit BlockCache(Release release) : release_(release) {}
    BlockCache(const BlockCache &) = delete;
    BlockCache &operator=(const BlockCache &) = delete;
    ~BlockCache() { release_all(); }

    // A cached block of capacity in [bytes, bytes + bytes / 8] (the smallest
    // such), removed from the cache, or null. Sets `capacity`.
    void *take(size_t bytes, size_t &capacity);
    // The least recently cached block (the next evict() would free it),
    // removed from the cache, or null: for the owner to resize rather than free.
    void *take_oldest(size_t &capacity);
    // Keeps `base` (`capacity` bytes, given back with `release`) for a later take.
    void put(void *base, size_t capacity);
    // Frees the least recently cached blocks until at least `bytes` are
    // freed or none is left; returns the bytes freed.
    size_t evict(size_t bytes);
    size_t release_all() { return evict(SIZE_MAX); }
    size_t cached_bytes() const;

private:
    struct Block {
        void *base;
        size_t capacity;
        uint64_t stamp;  // order of put: evict the oldest first
    };
    // Takes `it` (or nothing at end()) out of the cache; the caller holds mu_.
    void *remove(std::vector<Block>::iterator it, size_t &capacity);

    Release release_;
    mutable std::mutex mu_;
    std::vector<Block> blocks_;
    size_t bytes_ = 0;
    uint64_t next_stamp_ = 0;
};

}  // namespace segtile
