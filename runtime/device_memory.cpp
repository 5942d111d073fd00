#include "runtime/device_memory.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "HalideRuntime.h"

namespace segtile {

namespace {

// The driver API's types and codes (cuda.h), without the CUDA toolkit.
using CUdeviceptr = unsigned long long;
using CUresult = int;
constexpr CUresult kCudaSuccess = 0, kCudaOutOfMemory = 2;
using MemAllocFn = CUresult (*)(CUdeviceptr *, size_t);
using MemFreeFn = CUresult (*)(CUdeviceptr);

struct Allocation {
    MemoryLedger *ledger;  // null: charged to none (its ledger is gone, or there was no scope)
    size_t bytes;
};

// Process-wide, as the driver is (device_memory.h).
struct DeviceTable {
    std::atomic<MemAllocFn> real_alloc{nullptr};
    std::atomic<MemFreeFn> real_free{nullptr};
    std::mutex mutex;
    std::unordered_map<CUdeviceptr, Allocation> live;
    int64_t live_bytes = 0;
};

DeviceTable &table() {
    static DeviceTable t;
    return t;
}

thread_local DeviceMemoryScope *current_scope = nullptr;

CUresult counted_mem_alloc(CUdeviceptr *ptr, size_t bytes) {
    DeviceTable &t = table();
    const MemAllocFn real = t.real_alloc.load();
    if (!real) return kCudaOutOfMemory;  // cannot happen: handed out only after the real one was found
    DeviceMemoryScope *scope = current_scope;
    MemoryLedger *ledger = scope ? scope->ledger() : nullptr;
    if (scope && ledger && scope->cap() > 0) {
        const int64_t held = ledger->current(MemoryLedger::Kind::Device);
        if (held + (int64_t)bytes > scope->cap()) {
            scope->note_refused((int64_t)bytes, held);
            return kCudaOutOfMemory;
        }
    }
    const CUresult r = real(ptr, bytes);
    if (r != kCudaSuccess) return r;
    std::lock_guard<std::mutex> lock(t.mutex);
    t.live[*ptr] = {ledger, bytes};
    t.live_bytes += (int64_t)bytes;
    if (ledger) ledger->allocated(bytes, MemoryLedger::Kind::Device);
    return r;
}

CUresult counted_mem_free(CUdeviceptr ptr) {
    DeviceTable &t = table();
    {
        std::lock_guard<std::mutex> lock(t.mutex);
        auto it = t.live.find(ptr);
        if (it != t.live.end()) {
            if (it->second.ledger) it->second.ledger->freed(it->second.bytes, MemoryLedger::Kind::Device);
            t.live_bytes -= (int64_t)it->second.bytes;
            t.live.erase(it);
        }
    }
    const MemFreeFn real = t.real_free.load();
    return real ? real(ptr) : kCudaSuccess;
}

}  // namespace

DeviceMemoryScope::DeviceMemoryScope(MemoryLedger *ledger, int64_t cap)
    : ledger_(ledger), cap_(cap), outer_(current_scope) {
    current_scope = this;
}

DeviceMemoryScope::~DeviceMemoryScope() { current_scope = outer_; }

void DeviceMemoryScope::note_refused(int64_t bytes, int64_t held) {
    if (bytes <= refused_bytes_) return;
    refused_bytes_ = bytes;
    held_when_refused_ = held;
}

void *device_counting_get_library_symbol(void *lib, const char *name) {
    void *sym = dlsym(lib, name);  // lib null: the process's own symbols (RTLD_DEFAULT)
    if (!sym || !name) return sym;
    DeviceTable &t = table();
    if (std::strcmp(name, "cuMemAlloc_v2") == 0) {
        t.real_alloc.store(reinterpret_cast<MemAllocFn>(sym));
        return reinterpret_cast<void *>(&counted_mem_alloc);
    }
    if (std::strcmp(name, "cuMemFree_v2") == 0) {
        t.real_free.store(reinterpret_cast<MemFreeFn>(sym));
        return reinterpret_cast<void *>(&counted_mem_free);
    }
    return sym;
}

void install_device_memory_hooks() { halide_set_custom_get_library_symbol(&device_counting_get_library_symbol); }

void detach_device_allocations(const MemoryLedger *ledger) {
    DeviceTable &t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    for (auto &[ptr, a] : t.live)
        if (a.ledger == ledger) a.ledger = nullptr;
}

int64_t device_bytes_live() {
    DeviceTable &t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    return t.live_bytes;
}

std::vector<int64_t> device_allocations_of(const MemoryLedger *ledger) {
    DeviceTable &t = table();
    std::vector<int64_t> sizes;
    {
        std::lock_guard<std::mutex> lock(t.mutex);
        for (const auto &[ptr, a] : t.live)
            if (a.ledger == ledger) sizes.push_back((int64_t)a.bytes);
    }
    std::sort(sizes.rbegin(), sizes.rend());
    return sizes;
}

void release_cached_device_allocations() {
    if (!halide_can_reuse_device_allocations(nullptr)) return;  // nothing is cached
    // Switching reuse off releases every registered pool's unused blocks.
    halide_reuse_device_allocations(nullptr, false);
    halide_reuse_device_allocations(nullptr, true);
}

}  // namespace segtile
