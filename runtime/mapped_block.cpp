#include "runtime/mapped_block.h"

#include <sys/mman.h>

#include <cstdint>

namespace segtile {

namespace {
constexpr size_t kPage = size_t(4) << 10;

size_t alignment(size_t bytes) { return bytes >= kHugeFrom ? kHugePage : kPage; }
size_t mapped_length(size_t bytes) { return round_up(bytes, alignment(bytes)); }

// An aligned range of `length` bytes, reserved (mapped, untouched).
void *reserve(size_t length, size_t align) {
    const size_t span = length + align - kPage;
    void *p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const uintptr_t start = reinterpret_cast<uintptr_t>(p), aligned = round_up(start, align);
    if (aligned > start) munmap(p, aligned - start);
    const size_t tail = start + span - (aligned + length);
    if (tail) munmap(reinterpret_cast<void *>(aligned + length), tail);
    void *base = reinterpret_cast<void *>(aligned);
    if (align == kHugePage) madvise(base, length, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
    return base;
}
}  // namespace

void *map_block(size_t bytes) { return reserve(mapped_length(bytes), alignment(bytes)); }

void unmap_block(void *base, size_t bytes) {
    if (base) munmap(base, mapped_length(bytes));
}

void *resize_block(void *base, size_t from, size_t to) {
    const size_t old_length = mapped_length(from), new_length = mapped_length(to);
    const size_t align = alignment(to);
    if (new_length == old_length && reinterpret_cast<uintptr_t>(base) % align == 0) return base;
    if (new_length < old_length && reinterpret_cast<uintptr_t>(base) % align == 0) {
        munmap(static_cast<char *>(base) + new_length, old_length - new_length);  // the tail's pages go back
        return base;
    }
    // Moved onto a fresh aligned range (MREMAP_FIXED replaces it): the page
    // tables move, huge pages included where both ends are 2 MiB aligned.
    void *target = reserve(new_length, align);
    if (!target) return nullptr;
    const size_t keep = old_length < new_length ? old_length : new_length;
    void *moved = mremap(base, keep, keep, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (moved == MAP_FAILED) {
        munmap(target, new_length);
        return nullptr;
    }
    if (keep < old_length) munmap(static_cast<char *>(base) + keep, old_length - keep);
    return moved;
}

}  // namespace segtile
