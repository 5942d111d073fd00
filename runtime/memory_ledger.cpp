#include "runtime/memory_ledger.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <sys/mman.h>
#include <unistd.h>

#include "runtime/device_memory.h"
#include "runtime/mapped_block.h"


namespace segtile {

void MemoryLedger::Counter::add(int64_t b) {
    int64_t now = current.fetch_add(b) + b;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
}

void MemoryLedger::allocated(size_t bytes, Kind k) {
    if (k == Kind::Working) make_room(bytes);
    counter(k).add((int64_t)bytes);
}

void MemoryLedger::make_room(size_t bytes) {
    const int64_t over = working_.current.load() + (int64_t)bytes - working_.peak.load();
    if (over > 0 && cache_.cached_bytes() > 0) freed(cache_.evict((size_t)over));
}

void MemoryLedger::freed(size_t bytes, Kind k) { counter(k).add(-(int64_t)bytes); }

MemoryLedger::~MemoryLedger() { detach_device_allocations(this); }

void MemoryLedger::release_cache() { freed(cache_.release_all()); }

void MemoryLedger::reset_peaks() {
    release_cache();
    working_.peak = working_.current.load();
    device_.peak = device_.current.load();
    checkpoint_.peak = checkpoint_.current.load();
    data_.peak = data_.current.load();
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

// What a block's header (the kAlign bytes before the pointer handed out)
// records: the bytes counted as working memory (a cached block: its whole
// capacity, held until evicted), the bytes asked for (Halide's count),
// whether the block goes back to the ledger's cache when freed, and whether
// a Halide kernel holds it.
struct Header {
    size_t counted, asked;
    bool cached, halide;
};

// Blocks of 4 MiB and more (at 1024^2 one channel plane is 4 MiB) are
// 2 MiB aligned and advised for transparent huge pages, which this kernel
// setting (madvise) grants only on request: a conv reads its input
// channels' planes megabytes apart, one 4 KiB page per row and channel
// (TLB misses), and a fresh 256 MiB buffer is first touched in 65536
// faults instead of 128 (runtime/mapped_block.h for the cached blocks).
void *system_alloc(size_t total) {
    if (total < kHugeFrom) return std::aligned_alloc(kAlign, round_up(total, kAlign));
    const size_t bytes = round_up(total, kHugePage);
    void *p = std::aligned_alloc(kHugePage, bytes);
    if (p) madvise(p, bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
    return p;
}

void *finish(void *base, Header h) {
    std::memcpy(base, &h, sizeof h);
    return static_cast<char *>(base) + kAlign;
}
}  // namespace

// Cached blocks are mapped (runtime/mapped_block.h): header and payload.
void MemoryLedger::release_block(void *base, size_t capacity) { unmap_block(base, kAlign + capacity); }

void *MemoryLedger::cached_malloc(size_t bytes, size_t payload, bool halide) {
    size_t capacity = 0;
    if (void *base = cache_.take(payload, capacity)) {
        if (halide) halide_.add((int64_t)bytes);  // working memory held already
        return finish(base, {capacity, bytes, true, halide});
    }
    // A miss. Where the new block would raise the peak, cached blocks are
    // evicted, oldest first; the oldest is resized to fit instead, keeping
    // its pages (a fresh block is faulted in and zeroed page by page).
    // Resizing the nearest in size on every miss instead emptied the cache
    // faster than it saved pages (Darknet19 at 1024^2: 285 misses a step
    // instead of 175).
    size_t old = 0;
    void *reused = nullptr;
    if (working_.current.load() + (int64_t)payload > working_.peak.load()) reused = cache_.take_oldest(old);
    if (reused) freed(old);
    make_room(payload);
    void *base = reused ? resize_block(reused, kAlign + old, kAlign + payload) : nullptr;
    if (reused && !base) unmap_block(reused, kAlign + old);
    if (!base) base = map_block(kAlign + payload);
    if (!base) return nullptr;
    allocated(payload);
    if (halide) halide_.add((int64_t)bytes);
    return finish(base, {payload, bytes, true, halide});
}

void *MemoryLedger::block_malloc(MemoryLedger *ledger, size_t bytes, bool halide) {
    const size_t payload = round_up(bytes, kAlign);
    if (ledger && payload >= BlockCache::kMinBytes) return ledger->cached_malloc(bytes, payload, halide);
    void *base = system_alloc(kAlign + payload);
    if (!base) return nullptr;
    if (ledger && halide) ledger->halide_allocated(bytes);
    else if (ledger) ledger->allocated(bytes);
    return finish(base, {bytes, bytes, false, halide});
}

void MemoryLedger::block_free(MemoryLedger *ledger, void *ptr) {
    if (!ptr) return;
    char *base = static_cast<char *>(ptr) - kAlign;
    Header h;
    std::memcpy(&h, base, sizeof h);
    if (ledger && h.cached) {
        if (h.halide) ledger->halide_.add(-(int64_t)h.asked);  // no longer Halide's, still held
        ledger->cache_.put(base, h.counted);
        return;
    }
    if (h.cached) {  // freed without its ledger: mapped all the same
        release_block(base, h.counted);
        return;
    }
    if (ledger && h.halide) ledger->halide_freed(h.counted);
    else if (ledger) ledger->freed(h.counted);
    std::free(base);
}

namespace {

// The value of "key: N kB" in a /proc file, in bytes (0 if absent).
int64_t proc_kib_field(const char *path, const std::string &key) {
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line))
        if (line.rfind(key, 0) == 0 && line.size() > key.size() && line[key.size()] == ':')
            return std::atoll(line.c_str() + key.size() + 1) * 1024;
    return 0;
}

}  // namespace

int64_t process_high_water_mark() { return proc_kib_field("/proc/self/status", "VmHWM"); }

int64_t process_resident_bytes() { return proc_kib_field("/proc/self/status", "VmRSS"); }

bool reset_process_high_water_mark() {
    // "5" to clear_refs sets VmHWM to the current resident set (Linux 4.0 on).
    std::ofstream f("/proc/self/clear_refs");
    f << "5";
    f.flush();
    return (bool)f;
}

int64_t available_memory_bytes() { return proc_kib_field("/proc/meminfo", "MemAvailable"); }

int64_t physical_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (int64_t)pages * page : 0;
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

namespace segtile {

int64_t parse_bytes(const std::string &text) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    std::string unit = text.substr(used);
    unit.erase(0, unit.find_first_not_of(' '));
    static const std::pair<const char *, double> units[] = {
        {"", 1}, {"B", 1}, {"K", 1024.0}, {"KB", 1e3}, {"KiB", 1024.0}, {"M", 1048576.0}, {"MB", 1e6},
        {"MiB", 1048576.0}, {"G", 1073741824.0}, {"GB", 1e9}, {"GiB", 1073741824.0}, {"T", 1099511627776.0},
        {"TB", 1e12}, {"TiB", 1099511627776.0}};
    if (used > 0 && v > 0)
        for (const auto &[name, scale] : units)
            if (unit == name) {
                const double bytes = v * scale;
                if (!(bytes < 0x1p62))  // inf included; int64 holds 8 EiB, no machine has 4
                    throw std::invalid_argument("'" + text + "' is more memory than any machine has: give at most a few TiB");
                if (bytes < 1) break;
                return (int64_t)bytes;
            }
    throw std::invalid_argument("'" + text + "' is not a memory size: give a positive number with an optional unit, e.g. 256MiB, 1.5GiB, 512MB");
}

}  // namespace segtile
