// The device-memory ledger without a GPU: this executable exports a fake
// driver (cuMemAlloc_v2, cuMemFree_v2) that Halide's runtime finds through
// halide_get_library_symbol, as it finds libcuda's on a GPU machine, and
// segtile's hook puts its counting versions in between.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "HalideRuntime.h"
#include "runtime/device_memory.h"
#include "runtime/kernel_context.h"

namespace {

// The fake driver: hands out addresses, remembers what it was asked.
struct FakeDriver {
    unsigned long long next = 0x1000;
    std::map<unsigned long long, size_t> live;
    int allocs = 0, frees = 0;
    // Streams: what was made, in which context, and what happened to each.
    int streams_made = 0;
    std::vector<std::string> stream_calls;  // "sync 1", "destroy 1" (streams numbered from 1)
    void *current_context = nullptr;
};
FakeDriver &fake() {
    static FakeDriver d;
    return d;
}

}  // namespace

extern "C" int cuMemAlloc_v2(unsigned long long *ptr, size_t bytes) {
    FakeDriver &d = fake();
    *ptr = d.next;
    d.next += bytes + 256;
    d.live[*ptr] = bytes;
    d.allocs++;
    return 0;
}

extern "C" int cuMemFree_v2(unsigned long long ptr) {
    FakeDriver &d = fake();
    d.frees++;
    return d.live.erase(ptr) ? 0 : 1;  // CUDA_ERROR_INVALID_VALUE for a pointer it never gave
}

// A stream is its number, cast to a pointer.
extern "C" int cuStreamCreate(void **stream, unsigned flags) {
    FakeDriver &d = fake();
    if (flags != 0) return 1;  // segtile asks for the default flags
    *stream = reinterpret_cast<void *>((uintptr_t)++d.streams_made);
    return 0;
}
extern "C" int cuStreamSynchronize(void *stream) {
    fake().stream_calls.push_back("sync " + std::to_string((uintptr_t)stream) + " in " +
                                  std::to_string((uintptr_t)fake().current_context));
    return 0;
}
extern "C" int cuStreamDestroy_v2(void *stream) {
    fake().stream_calls.push_back("destroy " + std::to_string((uintptr_t)stream) + " in " +
                                  std::to_string((uintptr_t)fake().current_context));
    return 0;
}
extern "C" int cuCtxPushCurrent_v2(void *ctx) {
    fake().current_context = ctx;
    return 0;
}
extern "C" int cuCtxPopCurrent_v2(void **ctx) {
    *ctx = fake().current_context;
    fake().current_context = nullptr;
    return 0;
}

namespace {

using segtile::DeviceMemoryScope;
using segtile::MemoryLedger;
using AllocFn = int (*)(unsigned long long *, size_t);
using FreeFn = int (*)(unsigned long long);
constexpr auto kDevice = MemoryLedger::Kind::Device;

// What Halide's CUDA runtime gets when it loads the driver's entry points.
AllocFn runtime_alloc() {
    segtile::KernelContext::install_halide_hooks();
    return reinterpret_cast<AllocFn>(halide_get_library_symbol(nullptr, "cuMemAlloc_v2"));
}
FreeFn runtime_free() {
    segtile::KernelContext::install_halide_hooks();
    return reinterpret_cast<FreeFn>(halide_get_library_symbol(nullptr, "cuMemFree_v2"));
}

TEST(DeviceMemory, TheRuntimeGetsCountingVersionsOfTheDriversAllocator) {
    AllocFn alloc = runtime_alloc();
    FreeFn dfree = runtime_free();
    ASSERT_NE(alloc, nullptr);
    ASSERT_NE(dfree, nullptr);
    EXPECT_NE(alloc, &cuMemAlloc_v2);
    EXPECT_NE(dfree, &cuMemFree_v2);
    // Other names pass through as dlsym finds them; unknown ones stay null.
    EXPECT_EQ(halide_get_library_symbol(nullptr, "cuMemFree_v2_not_a_symbol"), nullptr);
}

TEST(DeviceMemory, AllocationsInAScopeAreChargedToItsLedger) {
    AllocFn alloc = runtime_alloc();
    FreeFn dfree = runtime_free();
    MemoryLedger ledger;
    const int before = fake().allocs;
    unsigned long long a = 0, b = 0;
    {
        DeviceMemoryScope scope(&ledger, 0);
        ASSERT_EQ(alloc(&a, 1000), 0);
        ASSERT_EQ(alloc(&b, 3000), 0);
        EXPECT_EQ(ledger.current(kDevice), 4000);
        EXPECT_EQ(segtile::device_allocations_of(&ledger), (std::vector<int64_t>{3000, 1000}));
        ASSERT_EQ(dfree(a), 0);
        EXPECT_EQ(ledger.current(kDevice), 3000);
        EXPECT_EQ(segtile::device_allocations_of(&ledger), (std::vector<int64_t>{3000}));
    }
    EXPECT_EQ(fake().allocs - before, 2);
    EXPECT_EQ(ledger.peak(kDevice), 4000);
    EXPECT_EQ(ledger.current(), 0) << "device bytes are not host working memory";
    // Freed outside any scope (Halide frees cached blocks later): still
    // charged back to the ledger that paid.
    ASSERT_EQ(dfree(b), 0);
    EXPECT_EQ(ledger.current(kDevice), 0);
    EXPECT_TRUE(segtile::device_allocations_of(&ledger).empty());
    EXPECT_EQ(fake().live.count(a) + fake().live.count(b), 0u);
}

TEST(DeviceMemory, AnAllocationPastTheCapIsRefusedAsOutOfMemory) {
    AllocFn alloc = runtime_alloc();
    FreeFn dfree = runtime_free();
    MemoryLedger ledger;
    DeviceMemoryScope scope(&ledger, 10000);
    unsigned long long a = 0, b = 0, c = 0;
    ASSERT_EQ(alloc(&a, 6000), 0);
    const int before = fake().allocs;
    EXPECT_EQ(alloc(&b, 5000), 2) << "CUDA_ERROR_OUT_OF_MEMORY";
    EXPECT_EQ(fake().allocs, before) << "the driver is not asked";
    EXPECT_EQ(ledger.current(kDevice), 6000);
    EXPECT_EQ(scope.refused_bytes(), 5000);
    EXPECT_EQ(scope.held_when_refused(), 6000);
    ASSERT_EQ(alloc(&c, 4000), 0) << "exactly at the cap fits";
    EXPECT_EQ(ledger.current(kDevice), 10000);
    ASSERT_EQ(dfree(a), 0);
    ASSERT_EQ(alloc(&b, 5000), 0) << "room again after a free";
    EXPECT_EQ(ledger.peak(kDevice), 10000);
    dfree(b);
    dfree(c);
    EXPECT_EQ(ledger.current(kDevice), 0);
}

TEST(DeviceMemory, InnerScopesChargeTheirOwnLedger) {
    AllocFn alloc = runtime_alloc();
    FreeFn dfree = runtime_free();
    MemoryLedger outer_ledger, inner_ledger;
    unsigned long long a = 0, b = 0, c = 0;
    DeviceMemoryScope outer(&outer_ledger, 0);
    ASSERT_EQ(alloc(&a, 100), 0);
    {
        DeviceMemoryScope inner(&inner_ledger, 150);
        ASSERT_EQ(alloc(&b, 120), 0);
        EXPECT_EQ(alloc(&c, 120), 2) << "the inner cap applies";
        ASSERT_EQ(dfree(a), 0);  // charged back to the outer ledger
    }
    ASSERT_EQ(alloc(&c, 120), 0) << "the outer scope again: no cap";
    EXPECT_EQ(outer_ledger.current(kDevice), 120);
    EXPECT_EQ(inner_ledger.current(kDevice), 120);
    dfree(b);
    dfree(c);
    EXPECT_EQ(outer_ledger.current(kDevice), 0);
    EXPECT_EQ(inner_ledger.current(kDevice), 0);
}

TEST(DeviceMemory, AllocationsOutlivingTheirLedgerAreFreedSafely) {
    AllocFn alloc = runtime_alloc();
    FreeFn dfree = runtime_free();
    const int64_t live_before = segtile::device_bytes_live();
    unsigned long long a = 0, b = 0;
    {
        MemoryLedger ledger;
        DeviceMemoryScope scope(&ledger, 0);
        ASSERT_EQ(alloc(&a, 700), 0);
    }
    ASSERT_EQ(alloc(&b, 300), 0);  // no scope: counted as live, charged to none
    EXPECT_EQ(segtile::device_bytes_live() - live_before, 1000);
    EXPECT_EQ(dfree(a), 0);
    EXPECT_EQ(dfree(b), 0);
    EXPECT_EQ(segtile::device_bytes_live(), live_before);
    EXPECT_EQ(dfree(0xdead), 1) << "the driver's own answer for a pointer it never gave";
}

TEST(DeviceMemory, AScopeKnowsTheMostItsLedgerHeld) {
    // What the executor reads after a segment's first call to decide
    // whether two calls at once fit the cap.
    AllocFn alloc = runtime_alloc();
    FreeFn dfree = runtime_free();
    MemoryLedger ledger;
    unsigned long long before = 0, a = 0, b = 0, c = 0;
    ASSERT_EQ(alloc(&before, 64), 0);  // no scope: charged to none
    {
        DeviceMemoryScope outside(&ledger, 0);
        ASSERT_EQ(alloc(&before, 500), 0);
    }
    DeviceMemoryScope scope(&ledger, 0);
    EXPECT_EQ(scope.held_at_start(), 500);
    ASSERT_EQ(alloc(&a, 100), 0);
    ASSERT_EQ(alloc(&b, 200), 0);
    ASSERT_EQ(dfree(b), 0);
    ASSERT_EQ(alloc(&c, 50), 0);
    EXPECT_EQ(scope.peak_held(), 800) << "500 before, then 100 + 200 at once";
    EXPECT_EQ(ledger.current(kDevice), 650);
    dfree(a);
    dfree(c);
    dfree(before);
}

TEST(DeviceMemory, StreamsAreMadeOnFirstUseInTheRuntimesContextAndGoAfterTheirWork) {
    runtime_alloc();  // the runtime has found the driver, as before any kernel call
    const int made = fake().streams_made;
    fake().stream_calls.clear();
    void *const cu_context = reinterpret_cast<void *>(uintptr_t(77));
    void *s = reinterpret_cast<void *>(uintptr_t(1234));
    segtile::KernelContext plain;
    EXPECT_EQ(segtile::device_stream_for(nullptr, cu_context, &s), 0);
    EXPECT_EQ(s, nullptr) << "no user context: Halide's default stream";
    EXPECT_EQ(segtile::device_stream_for(&plain, cu_context, &s), 0);
    EXPECT_EQ(s, nullptr) << "a context naming no stream: the default stream";
    EXPECT_EQ(fake().streams_made, made);
    void *first = nullptr, *second = nullptr, *again = nullptr;
    {
        segtile::DeviceStreams streams;
        segtile::KernelContext a, b;
        a.stream = &streams[0];
        b.stream = &streams[1];
        EXPECT_EQ(streams.created(), 0);
        ASSERT_EQ(segtile::device_stream_for(&a, cu_context, &first), 0);
        ASSERT_EQ(segtile::device_stream_for(&a, cu_context, &again), 0);
        ASSERT_EQ(segtile::device_stream_for(&b, cu_context, &second), 0);
        EXPECT_NE(first, nullptr);
        EXPECT_EQ(again, first) << "made once, then reused";
        EXPECT_NE(second, first);
        EXPECT_EQ(streams.created(), 2);
        EXPECT_EQ(fake().streams_made - made, 2);
        EXPECT_TRUE(fake().stream_calls.empty());
    }
    // Each waited for and destroyed, with the runtime's context current.
    const std::string ctx = " in 77";
    EXPECT_EQ(fake().stream_calls,
              (std::vector<std::string>{"sync " + std::to_string((uintptr_t)first) + ctx,
                                        "destroy " + std::to_string((uintptr_t)first) + ctx,
                                        "sync " + std::to_string((uintptr_t)second) + ctx,
                                        "destroy " + std::to_string((uintptr_t)second) + ctx}));
    EXPECT_EQ(fake().current_context, nullptr) << "popped again";
}

}  // namespace
