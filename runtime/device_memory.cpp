#include "runtime/device_memory.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "HalideRuntime.h"
#include "HalideRuntimeCuda.h"
#include "runtime/kernel_context.h"

// In the CUDA runtime only (segtile_halide_runtime_cuda): weak, so that a
// program with CPU kernels alone links without it.
extern "C" __attribute__((weak)) halide_cuda_get_stream_t halide_set_cuda_get_stream(halide_cuda_get_stream_t handler);

namespace segtile {

namespace {

// The driver API's types and codes (cuda.h), without the CUDA toolkit.
using CUdeviceptr = unsigned long long;
using CUresult = int;
constexpr CUresult kCudaSuccess = 0, kCudaOutOfMemory = 2;
using MemAllocFn = CUresult (*)(CUdeviceptr *, size_t);
using MemFreeFn = CUresult (*)(CUdeviceptr);
using StreamCreateFn = CUresult (*)(void **, unsigned);
using StreamFn = CUresult (*)(void *);  // cuStreamSynchronize, cuStreamDestroy_v2, cuCtxPushCurrent_v2
using CtxPopFn = CUresult (*)(void **);

struct Allocation {
    MemoryLedger *ledger;  // null: charged to none (its ledger is gone, or there was no scope)
    size_t bytes;
};

// Process-wide, as the driver is (device_memory.h).
struct DeviceTable {
    std::atomic<MemAllocFn> real_alloc{nullptr};
    std::atomic<MemFreeFn> real_free{nullptr};
    // The library Halide's runtime found the driver in (null: the process's
    // own symbols), for the stream entry points it does not hand out.
    std::atomic<void *> driver{nullptr};
    std::atomic<bool> driver_known{false};
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
    if (scope && ledger) scope->note_held(ledger->current(MemoryLedger::Kind::Device));
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

// A driver entry point from the library Halide's runtime loaded (null if
// it has not loaded one yet).
template <typename Fn>
Fn driver_symbol(const char *name) {
    DeviceTable &t = table();
    if (!t.driver_known.load()) return nullptr;
    return reinterpret_cast<Fn>(dlsym(t.driver.load(), name));
}

}  // namespace

DeviceMemoryScope::DeviceMemoryScope(MemoryLedger *ledger, int64_t cap)
    : ledger_(ledger), cap_(cap), outer_(current_scope) {
    held_at_start_ = peak_held_ = ledger ? ledger->current(MemoryLedger::Kind::Device) : 0;
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
        t.driver.store(lib);
        t.driver_known.store(true);
        t.real_alloc.store(reinterpret_cast<MemAllocFn>(sym));
        return reinterpret_cast<void *>(&counted_mem_alloc);
    }
    if (std::strcmp(name, "cuMemFree_v2") == 0) {
        t.real_free.store(reinterpret_cast<MemFreeFn>(sym));
        return reinterpret_cast<void *>(&counted_mem_free);
    }
    return sym;
}

void install_device_memory_hooks() {
    halide_set_custom_get_library_symbol(&device_counting_get_library_symbol);
    if (device_streams_available()) halide_set_cuda_get_stream(&device_stream_for);
}

bool device_streams_available() { return halide_set_cuda_get_stream != nullptr; }

int device_stream_for(void *user_context, void *cu_context, void **stream) {
    auto *ctx = static_cast<KernelContext *>(user_context);
    *stream = nullptr;
    if (!ctx || !ctx->stream) return 0;
    DeviceStream &s = *ctx->stream;
    if (!s.handle) {
        const auto create = driver_symbol<StreamCreateFn>("cuStreamCreate");
        const CUresult r = create ? create(&s.handle, 0) : -1;  // 0: CU_STREAM_DEFAULT
        if (r != kCudaSuccess || !s.handle) {
            s.handle = nullptr;
            ctx->last_error += "could not create a CUDA stream (cuStreamCreate " +
                               (create ? "returned " + std::to_string(r) : std::string("not found in the driver")) +
                               ")\n";
            return r != kCudaSuccess ? r : -1;
        }
        s.context = cu_context;
    }
    *stream = s.handle;
    return 0;
}

DeviceStreams::~DeviceStreams() {
    const auto push = driver_symbol<StreamFn>("cuCtxPushCurrent_v2");
    const auto pop = driver_symbol<CtxPopFn>("cuCtxPopCurrent_v2");
    const auto sync = driver_symbol<StreamFn>("cuStreamSynchronize");
    const auto destroy = driver_symbol<StreamFn>("cuStreamDestroy_v2");
    for (DeviceStream &s : slots_) {
        if (!s.handle) continue;
        // The context the stream was made in, current while it goes.
        const bool pushed = push && pop && s.context && push(s.context) == kCudaSuccess;
        if (sync) sync(s.handle);
        if (destroy) destroy(s.handle);
        void *popped = nullptr;
        if (pushed) pop(&popped);
        s.handle = nullptr;
    }
}

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
