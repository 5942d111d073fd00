// The ledger's allocator for Halide kernels: large freed blocks are reused
// (runtime/block_cache.h) without the reported peak rising above what the
// live blocks alone reached.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "runtime/memory_ledger.h"

namespace segtile {
namespace {

constexpr size_t kBig = size_t(1) << 20;  // above BlockCache::kMinBytes

TEST(MemoryLedger, ReusesAFreedBlockOfTheSameSize) {
    MemoryLedger ledger;
    void *a = MemoryLedger::halide_malloc(&ledger, kBig);
    std::memset(a, 1, kBig);
    MemoryLedger::halide_free(&ledger, a);
    EXPECT_EQ(ledger.cached(), (int64_t)kBig);
    EXPECT_EQ(ledger.current(), (int64_t)kBig) << "a cached block is still held";
    void *b = MemoryLedger::halide_malloc(&ledger, kBig - 100);  // within 1/8 of the block: reused
    EXPECT_EQ(a, b);
    EXPECT_EQ(ledger.cached(), 0);
    EXPECT_EQ(ledger.peak(), (int64_t)kBig) << "the whole block is held";
    EXPECT_EQ(ledger.halide_current(), (int64_t)(kBig - 100)) << "Halide's count is what it asked for";
    MemoryLedger::halide_free(&ledger, b);
}

TEST(MemoryLedger, AMuchSmallerRequestDoesNotTakeABigBlockWhole) {
    MemoryLedger ledger;
    void *a = MemoryLedger::halide_malloc(&ledger, 4 * kBig);
    MemoryLedger::halide_free(&ledger, a);
    void *b = MemoryLedger::halide_malloc(&ledger, kBig);
    // The 4 MiB block was resized to 1 MiB (below): the peak did not rise
    // above 4 MiB, and only 1 MiB is held.
    EXPECT_EQ(ledger.peak(), (int64_t)(4 * kBig));
    EXPECT_EQ(ledger.cached(), 0);
    EXPECT_EQ(ledger.current(), (int64_t)kBig);
    MemoryLedger::halide_free(&ledger, b);
}

// A miss that would raise the peak resizes the oldest cached block instead
// of evicting it and mapping a fresh one: its pages (and so its contents,
// up to the smaller size) are kept. Fresh pages would read as zeros.
TEST(MemoryLedger, AMissThatWouldRaiseThePeakResizesTheOldestBlock) {
    for (const auto &[from, to] : {std::pair<size_t, size_t>{4 * kBig, kBig}, {kBig, 3 * kBig}, {6 * kBig, 12 * kBig}}) {
        MemoryLedger ledger;
        auto *a = static_cast<unsigned char *>(MemoryLedger::halide_malloc(&ledger, from));
        std::memset(a, 7, from);
        MemoryLedger::halide_free(&ledger, a);
        auto *b = static_cast<unsigned char *>(MemoryLedger::halide_malloc(&ledger, to));
        const size_t kept = std::min(from, to);
        size_t sevens = 0;
        for (size_t i = 0; i < kept; i++) sevens += b[i] == 7;
        EXPECT_EQ(sevens, kept) << from << " -> " << to << " bytes";
        std::memset(b, 1, to);  // the whole new size is writable
        EXPECT_EQ(ledger.cached(), 0);
        EXPECT_EQ(ledger.current(), (int64_t)to) << "held: the resized block alone";
        EXPECT_EQ(ledger.peak(), (int64_t)std::max(from, to));
        MemoryLedger::halide_free(&ledger, b);
    }
}

TEST(MemoryLedger, TheCacheNeverRaisesThePeak) {
    // Calls with different block sizes, as tiles at an image's edge make:
    // the peak is what one call's live blocks reach.
    MemoryLedger ledger;
    const size_t sizes[][2] = {{kBig, 2 * kBig}, {3 * kBig, kBig / 2}, {kBig, 2 * kBig}, {5 * kBig, kBig}};
    int64_t live_peak = 0;
    for (const auto &call : sizes) {
        void *p = MemoryLedger::halide_malloc(&ledger, call[0]);
        void *q = MemoryLedger::halide_malloc(&ledger, call[1]);
        live_peak = std::max<int64_t>(live_peak, (int64_t)(call[0] + call[1]));
        MemoryLedger::halide_free(&ledger, q);
        MemoryLedger::halide_free(&ledger, p);
        EXPECT_EQ(ledger.peak(), live_peak);
        EXPECT_LE(ledger.current(), live_peak);
    }
    EXPECT_EQ(ledger.halide_peak(), live_peak);
    EXPECT_EQ(ledger.halide_current(), 0) << "cached blocks are not Halide's";
}

TEST(MemoryLedger, HalidesPeakCountsLiveBlocksOnlyWhenTheRuntimeHoldsMore) {
    // The runtime's tensors set a high working peak; the cache may then keep
    // a kernel's 4 MiB block while the next kernel takes 3 MiB anew, but
    // Halide never had more than 4 MiB live.
    MemoryLedger ledger;
    ledger.allocated(64 * kBig);
    ledger.freed(64 * kBig);
    MemoryLedger::halide_free(&ledger, MemoryLedger::halide_malloc(&ledger, 4 * kBig));
    void *b = MemoryLedger::halide_malloc(&ledger, 3 * kBig);
    EXPECT_EQ(ledger.cached(), (int64_t)(4 * kBig));
    EXPECT_EQ(ledger.current(), (int64_t)(7 * kBig));
    EXPECT_EQ(ledger.halide_peak(), (int64_t)(4 * kBig));
    MemoryLedger::halide_free(&ledger, b);
}

TEST(MemoryLedger, TheRuntimesOwnAllocationsEvictTheCacheFirst) {
    // A checkpoint or tile window allocated between two kernel calls.
    MemoryLedger ledger;
    MemoryLedger::halide_free(&ledger, MemoryLedger::halide_malloc(&ledger, 2 * kBig));
    ledger.allocated(kBig);
    EXPECT_EQ(ledger.peak(), (int64_t)(2 * kBig));
    EXPECT_EQ(ledger.cached(), 0);
    ledger.freed(kBig);
}

TEST(MemoryLedger, ResetPeaksReleasesTheCache) {
    MemoryLedger ledger;
    MemoryLedger::halide_free(&ledger, MemoryLedger::halide_malloc(&ledger, kBig));
    ledger.reset_peaks();
    EXPECT_EQ(ledger.cached(), 0);
    EXPECT_EQ(ledger.current(), 0);
    EXPECT_EQ(ledger.peak(), 0);
}

TEST(MemoryLedger, SmallBlocksAndLedgerlessBlocksAreNotCached) {
    MemoryLedger ledger;
    MemoryLedger::halide_free(&ledger, MemoryLedger::halide_malloc(&ledger, 1000));
    EXPECT_EQ(ledger.cached(), 0);
    EXPECT_EQ(ledger.current(), 0);
    EXPECT_EQ(ledger.peak(), 1000);
    void *p = MemoryLedger::halide_malloc(nullptr, kBig);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 128, 0u);
    MemoryLedger::halide_free(nullptr, p);
}

}  // namespace
}  // namespace segtile
