// A one-line progress bar on stderr: done/total, a bar, rate and ETA,
// redrawn in place. Drawn only when stderr is a terminal (logs and pipes
// get the per-epoch lines instead).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace segtile {

class ProgressBar {
public:
    // `unit`: what is counted ("images").
    ProgressBar(std::string label, int64_t total, std::string unit);
    ~ProgressBar() { finish(); }
    ProgressBar(const ProgressBar &) = delete;
    ProgressBar &operator=(const ProgressBar &) = delete;

    void update(int64_t done, const std::string &extra = "");  // extra: "loss 0.41"
    void finish();  // clears the line

    // "1:05", "12:00:03"
    static std::string format_duration(double seconds);

private:
    std::string label_, unit_;
    int64_t total_;
    bool enabled_, open_ = false;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace segtile
