#include "runtime/block_cache.h"

#include <algorithm>

namespace segtile {

void *BlockCache::take(size_t bytes, size_t &capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
        if (it->capacity >= bytes && it->capacity - bytes <= bytes / 8 &&
            (best == blocks_.end() || it->capacity < best->capacity))
            best = it;
    return remove(best, capacity);
}

void *BlockCache::take_oldest(size_t &capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    auto oldest = std::min_element(blocks_.begin(), blocks_.end(),
                                   [](const Block &a, const Block &b) { return a.stamp < b.stamp; });
    return remove(oldest, capacity);
}

void *BlockCache::remove(std::vector<Block>::iterator it, size_t &capacity) {
    if (it == blocks_.end()) return nullptr;
    void *base = it->base;
    capacity = it->capacity;
    bytes_ -= capacity;
    blocks_.erase(it);
    return base;
}

void BlockCache::put(void *base, size_t capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.push_back({base, capacity, next_stamp_++});
    bytes_ += capacity;
}

size_t BlockCache::evict(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    std::sort(blocks_.begin(), blocks_.end(), [](const Block &a, const Block &b) { return a.stamp > b.stamp; });
    size_t freed = 0;
    while (freed < bytes && !blocks_.empty()) {
        release_(blocks_.back().base, blocks_.back().capacity);
        freed += blocks_.back().capacity;
        blocks_.pop_back();
    }
    bytes_ -= freed;
    return freed;
}

size_t BlockCache::cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
}

}  // namespace segtile
