// A few host threads for the executor's own copies and adds: on the device
// path, where the CPU is otherwise idle while the GPU runs (at 20480^2 a
// Darknet19 step spent more time in one host thread's window copies and
// gradient adds than the GPU spent in kernels, docs/gpu.md), and on the CPU
// path between kernel calls. Workers sleep on a condition variable between
// calls, so they take nothing from Halide's own thread pool. One pool may
// serve several executors (ExecutorCache shares one across image sizes).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace segtile {

class HostThreads {
public:
    // `threads` <= 1: parallel_for runs in the caller alone.
    explicit HostThreads(int threads);
    ~HostThreads();
    HostThreads(const HostThreads &) = delete;
    HostThreads &operator=(const HostThreads &) = delete;

    // One per core, up to 16 (copies and adds stop scaling past memory
    // bandwidth); null on one core, where the caller runs alone.
    static std::shared_ptr<HostThreads> for_this_machine();

    // fn(i) for every i in [0, n), on the workers and the caller; returns
    // when all are done. fn must not throw. Calls from several threads at
    // once run one after another.
    void parallel_for(int64_t n, const std::function<void(int64_t)> &fn);
    int threads() const { return (int)workers_.size() + 1; }

private:
    void work(uint64_t generation);
    void drain();

    std::vector<std::thread> workers_;
    std::mutex caller_;  // one parallel_for at a time: the state below is one call's
    std::mutex mutex_;
    std::condition_variable start_, finished_;
    const std::function<void(int64_t)> *fn_ = nullptr;
    int64_t n_ = 0, next_ = 0;
    int busy_ = 0;             // workers inside the current call
    uint64_t generation_ = 0;  // bumped per call: wakes the workers
    bool stop_ = false;
};

}  // namespace segtile
