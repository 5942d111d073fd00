// HostThreads: every index once per call, however many threads and calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "runtime/host_threads.h"

using namespace segtile;

TEST(HostThreads, EveryIndexRunsOncePerCall) {
    for (int threads : {1, 2, 5}) {
        HostThreads pool(threads);
        EXPECT_EQ(pool.threads(), std::max(1, threads));
        for (int64_t n : {0, 1, 3, 64, 1000}) {
            for (int call = 0; call < 20; call++) {  // back-to-back calls: no index of one leaks into the next
                std::vector<std::atomic<int>> hits(n);
                for (auto &h : hits) h = 0;
                pool.parallel_for(n, [&](int64_t i) { hits[i]++; });
                for (int64_t i = 0; i < n; i++) ASSERT_EQ(hits[i].load(), 1) << threads << " threads, n " << n << ", i " << i;
            }
        }
    }
}

TEST(HostThreads, WorkSpreadsOverTheThreads) {
    // Each index waits until two are running at once: with one thread that
    // would never happen, so the pool must run them side by side.
    HostThreads pool(2);
    std::atomic<int> running{0}, peak{0};
    pool.parallel_for(2, [&](int64_t) {
        const int now = ++running;
        int p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {}
        for (int spin = 0; spin < 2000 && peak.load() < 2; spin++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        --running;
    });
    EXPECT_EQ(peak.load(), 2);
}

TEST(HostThreads, CallersOnSeveralThreadsEachGetEveryIndexOnce) {
    // Executors sharing one pool (ExecutorCache) may call it from several
    // threads: each call must still run its own indices, once each.
    HostThreads pool(3);
    constexpr int kCallers = 4, kCalls = 50, kN = 257;
    std::vector<std::vector<std::atomic<int>>> hits(kCallers);
    for (auto &h : hits) h = std::vector<std::atomic<int>>(kN);
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; c++)
        callers.emplace_back([&, c] {
            for (int call = 0; call < kCalls; call++) pool.parallel_for(kN, [&](int64_t i) { hits[c][i]++; });
        });
    for (auto &t : callers) t.join();
    for (int c = 0; c < kCallers; c++)
        for (int i = 0; i < kN; i++) ASSERT_EQ(hits[c][i].load(), kCalls) << "caller " << c << ", index " << i;
}

TEST(HostThreads, ForThisMachineUsesEveryCoreUpTo16) {
    const auto pool = HostThreads::for_this_machine();
    const int cores = std::min(16, (int)std::thread::hardware_concurrency());
    if (cores <= 1) {
        EXPECT_EQ(pool, nullptr);
        return;
    }
    ASSERT_NE(pool, nullptr);
    EXPECT_EQ(pool->threads(), cores);
}
