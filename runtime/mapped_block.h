// Memory for the ledger's cached blocks (runtime/block_cache.h), mapped by
// segtile itself so that a block can change size without giving its pages
// back: a cache miss resizes a cached block (mremap) instead of freeing it
// and faulting a fresh one in. Before, a Darknet19 step at 1024^2 under
// 800 MiB missed 175 times and mapped 2 GiB of fresh pages per step
// (each one zeroed by the kernel on first touch).
#pragma once

#include <cstddef>

namespace segtile {

// Blocks from kHugeFrom up are kHugePage aligned and advised for
// transparent huge pages (also the ledger's uncached blocks).
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeFrom = size_t(4) << 20;

// n rounded up to a multiple of `to` (sizes and alignments of blocks).
inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A block of at least `bytes`, page aligned; 2 MiB aligned and advised for
// transparent huge pages from 4 MiB (a conv reads channel planes megabytes
// apart: one TLB entry per 2 MiB, not per 4 KiB row). Null on failure.
void *map_block(size_t bytes);
// Gives back a block from map_block or resize_block of `bytes`.
void unmap_block(void *base, size_t bytes);
// The block `base` of `from` bytes, resized to `to` bytes: its pages (and
// contents, up to the smaller size) are kept; shrinking stays in place,
// growing may move it (then `base` is no longer valid). Null on failure,
// leaving `base` as it was.
void *resize_block(void *base, size_t from, size_t to);

}  // namespace segtile
