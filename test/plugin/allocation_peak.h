// A JITUserContext whose malloc/free hooks count the bytes of Halide's heap
// allocations alive at once and keep the peak. Pass it to Pipeline::realize.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "Halide.h"

namespace segtile::plugin_test {

class AllocationPeak : public Halide::JITUserContext {
public:
    AllocationPeak() {
        handlers.custom_malloc = &allocate;
        handlers.custom_free = &release;
    }

    int64_t peak() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return peak_;
    }
    int64_t live() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return live_;
    }

private:
    static constexpr size_t kAlignment = 128;  // more than any vector Halide emits

    static void *allocate(Halide::JITUserContext *uc, size_t bytes) {
        auto *self = static_cast<AllocationPeak *>(uc);
        void *p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
        if (!p) return nullptr;
        std::lock_guard<std::mutex> lock(self->mutex_);
        self->sizes_[p] = bytes;
        self->live_ += static_cast<int64_t>(bytes);
        self->peak_ = std::max(self->peak_, self->live_);
        return p;
    }

    static void release(Halide::JITUserContext *uc, void *p) {
        auto *self = static_cast<AllocationPeak *>(uc);
        {
            std::lock_guard<std::mutex> lock(self->mutex_);
            auto it = self->sizes_.find(p);
            if (it != self->sizes_.end()) {
                self->live_ -= static_cast<int64_t>(it->second);
                self->sizes_.erase(it);
            }
        }
        std::free(p);
    }

    mutable std::mutex mutex_;
    std::unordered_map<void *, size_t> sizes_;
    int64_t live_ = 0, peak_ = 0;
};

}  // namespace segtile::plugin_test
