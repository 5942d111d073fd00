#include "runtime/memory_ledger.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>


namespace segtile {

void MemoryLedger::Counter::add(int64_t b) {
    int64_t now = current.fetch_add(b) + b;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
}

void MemoryLedger::allocated(size_t bytes, Kind k) { counter(k).add((int64_t)bytes); }
void MemoryLedger::freed(size_t bytes, Kind k) { counter(k).add(-(int64_t)bytes); }

void MemoryLedger::reset_peaks() {
    working_.peak = working_.current.load();
    checkpoint_.peak = checkpoint_.current.load();
    halide_.peak = halide_.current.load();
}

void MemoryLedger::halide_allocated(size_t bytes) {
    allocated(bytes);
    halide_.add((int64_t)bytes);
}

void MemoryLedger::halide_freed(size_t bytes) {
    freed(bytes);
    halide_.add(-(int64_t)bytes);
}

namespace {
constexpr size_t kAlign = 128;
}  // namespace

void *MemoryLedger::halide_malloc(MemoryLedger *ledger, size_t bytes) {
    void *base = std::aligned_alloc(kAlign, kAlign + ((bytes + kAlign - 1) / kAlign) * kAlign);
    if (!base) return nullptr;
    std::memcpy(base, &bytes, sizeof bytes);
    if (ledger) ledger->halide_allocated(bytes);
    return static_cast<char *>(base) + kAlign;
}

void MemoryLedger::halide_free(MemoryLedger *ledger, void *ptr) {
    if (!ptr) return;
    char *base = static_cast<char *>(ptr) - kAlign;
    size_t bytes;
    std::memcpy(&bytes, base, sizeof bytes);
    if (ledger) ledger->halide_freed(bytes);
    std::free(base);
}

int64_t process_high_water_mark() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
    return 0;
}

std::string format_bytes(int64_t bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (std::abs(v) >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf;
}

}  // namespace segtile
