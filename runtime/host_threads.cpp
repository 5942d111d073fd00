#include "runtime/host_threads.h"

#include <algorithm>

namespace segtile {

std::shared_ptr<HostThreads> HostThreads::for_this_machine() {
    const int threads = std::min(16, (int)std::thread::hardware_concurrency());
    return threads > 1 ? std::make_shared<HostThreads>(threads) : nullptr;
}

HostThreads::HostThreads(int threads) {
    for (int t = 1; t < threads; t++) workers_.emplace_back([this] {
        uint64_t seen = 0;
        for (;;) {
            std::unique_lock<std::mutex> lock(mutex_);
            start_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            busy_++;
            lock.unlock();
            drain();
            lock.lock();
            if (--busy_ == 0) finished_.notify_all();
        }
    });
}

HostThreads::~HostThreads() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    start_.notify_all();
    for (auto &w : workers_) w.join();
}

// Takes indices until none are left.
void HostThreads::drain() {
    for (;;) {
        int64_t i;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (next_ >= n_) return;
            i = next_++;
        }
        (*fn_)(i);
    }
}

void HostThreads::parallel_for(int64_t n, const std::function<void(int64_t)> &fn) {
    if (workers_.empty() || n <= 1) {
        for (int64_t i = 0; i < n; i++) fn(i);
        return;
    }
    std::lock_guard<std::mutex> one_call(caller_);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fn_ = &fn;
        n_ = n;
        next_ = 0;
        generation_++;
    }
    start_.notify_all();
    drain();
    // Every index is taken; wait for the workers still running theirs (a
    // worker that woke late finds none left and leaves at once).
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return busy_ == 0; });
    fn_ = nullptr;
}

}  // namespace segtile
