#include "apps/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace segtile {

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), enabled_(isatty(fileno(stderr)) == 1),
      start_(std::chrono::steady_clock::now()) {}

std::string ProgressBar::format_duration(double seconds) {
    const int64_t s = seconds < 0 ? 0 : (int64_t)(seconds + 0.5);
    char buf[32];
    if (s >= 3600)
        std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                      (long long)(s % 60));
    else
        std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
    return buf;
}

void ProgressBar::update(int64_t done, const std::string &extra) {
    if (!enabled_ || total_ <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    // At most ten redraws a second, but always the last one.
    if (open_ && done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? done / secs : 0;
    const std::string eta = rate > 0 ? format_duration((total_ - done) / rate) : "?";
    constexpr int kWidth = 28;
    const int filled = (int)(kWidth * done / total_);
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %lld/%lld %s  %.2f %s/s  elapsed %s  ETA %s  %s", label_.c_str(),
                 bar.c_str(), (long long)done, (long long)total_, unit_.c_str(), rate, unit_.c_str(),
                 format_duration(secs).c_str(), eta.c_str(), extra.c_str());
    std::fflush(stderr);
    open_ = true;
}

void ProgressBar::finish() {
    if (!open_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    open_ = false;
}

}  // namespace segtile
