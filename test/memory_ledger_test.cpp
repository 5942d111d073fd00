// The ledger's allocator for Halide kernels: large freed blocks are reused
// (runtime/block_cache.h) without the reported peak rising above what the
// live blocks alone reached.
#include <gtest/gtest.h>

#include <cstring>

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

TEST(MemoryLedger, AMuchSmallerRequestDoesNotTakeABigBlock) {
    MemoryLedger ledger;
    void *a = MemoryLedger::halide_malloc(&ledger, 4 * kBig);
    MemoryLedger::halide_free(&ledger, a);
    void *b = MemoryLedger::halide_malloc(&ledger, kBig);
    EXPECT_NE(a, b);
    // The 4 MiB block was evicted first: the peak did not rise above 4 MiB.
    EXPECT_EQ(ledger.peak(), (int64_t)(4 * kBig));
    EXPECT_EQ(ledger.cached(), 0);
    EXPECT_EQ(ledger.current(), (int64_t)kBig);
    MemoryLedger::halide_free(&ledger, b);
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
