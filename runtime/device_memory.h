// Device (CUDA) memory in the ledger, and the device-memory cap.
//
// Halide's CUDA runtime allocates with the driver's cuMemAlloc and frees with
// cuMemFree, which carry no user context. It finds both through
// halide_get_library_symbol, which a program may replace
// (halide_set_custom_get_library_symbol; the JIT's JITHandlers too): segtile
// hands it counting versions. Each device allocation is charged to the
// ledger of the DeviceMemoryScope active on the allocating thread, and one
// that would take the scope's ledger past its cap fails as out of memory
// (Halide's runtime then frees its cached blocks and tries once more, then
// reports CUDA_ERROR_OUT_OF_MEMORY). A free is charged to the ledger that
// paid for the allocation, whichever thread or scope frees it.
//
// The driver and its allocations are process-wide, so the table of live
// device allocations is too: the one piece of process state in the runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/memory_ledger.h"

namespace segtile {

// While alive, device allocations made on this thread are charged to
// `ledger` (Kind::Device) and refused past `cap` bytes (0: no cap). Scopes
// nest; the innermost counts.
class DeviceMemoryScope {
public:
    DeviceMemoryScope(MemoryLedger *ledger, int64_t cap);
    ~DeviceMemoryScope();
    DeviceMemoryScope(const DeviceMemoryScope &) = delete;
    DeviceMemoryScope &operator=(const DeviceMemoryScope &) = delete;

    MemoryLedger *ledger() const { return ledger_; }
    int64_t cap() const { return cap_; }
    // The largest allocation refused for the cap (0: none), and what the
    // ledger held then: for the error message.
    int64_t refused_bytes() const { return refused_bytes_; }
    int64_t held_when_refused() const { return held_when_refused_; }
    void note_refused(int64_t bytes, int64_t held);
    // The most the ledger held (Kind::Device) while this scope was the
    // innermost: what one kernel call needs, for the executor's choice of
    // running two calls at once (DeviceOverlap::TwoStreams).
    int64_t peak_held() const { return peak_held_; }
    int64_t held_at_start() const { return held_at_start_; }
    void note_held(int64_t held) { peak_held_ = held > peak_held_ ? held : peak_held_; }

private:
    MemoryLedger *ledger_;
    int64_t cap_;
    int64_t refused_bytes_ = 0, held_when_refused_ = 0;
    int64_t held_at_start_ = 0, peak_held_ = 0;
    DeviceMemoryScope *outer_;
};

// Installs the counting cuMemAlloc/cuMemFree in the Halide runtime linked
// into this process (AOT kernels). Idempotent; KernelContext's hooks call it.
void install_device_memory_hooks();

// halide_get_library_symbol with the counting versions of cuMemAlloc_v2 and
// cuMemFree_v2 (dlsym for every other name, and to find the real ones).
// What install_device_memory_hooks installs; JIT kernels install it in
// their JITHandlers.
void *device_counting_get_library_symbol(void *lib, const char *name);

// Allocations recorded against `ledger` are no longer charged to it
// (MemoryLedger's destructor).
void detach_device_allocations(const MemoryLedger *ledger);

// Device bytes allocated through the counting cuMemAlloc and not yet freed,
// whatever ledger they are charged to.
int64_t device_bytes_live();

// The sizes of the live device allocations charged to `ledger`, largest
// first: what a leak report names.
std::vector<int64_t> device_allocations_of(const MemoryLedger *ledger);

// Hands the blocks in Halide's device allocation cache back to the driver.
// The cache is on by default in Halide 21 (halide_reuse_device_allocations):
// a freed device buffer is kept for the next allocation of about its size,
// which is how tiles reuse device memory, but up to ~33 blocks outlive the
// last kernel call and stay charged to the ledger that paid for them.
// The executor calls this when a step ends. The cache stays on after.
void release_cached_device_allocations();

// A CUDA stream for the kernel calls and copies of every other tile
// (SegmentedExecutor, DeviceOverlap::TwoStreams). A call whose user context
// (KernelContext::stream) names one runs its copies and kernels there,
// asynchronously; Halide's runtime asks segtile for the stream
// (halide_set_cuda_get_stream) inside its own calls, where the CUDA context
// is current, and the stream is created then, on first use.
struct DeviceStream {
    void *handle = nullptr;   // CUstream; null until first used
    void *context = nullptr;  // the CUcontext it was created in
};

// Two streams, made on first use and destroyed with this object (after
// their work is done). Created with the driver's default flags: work on
// Halide's default stream (a context-less call, a buffer's destructor)
// waits for theirs, and theirs for it, so only calls given a stream run
// beside each other.
class DeviceStreams {
public:
    DeviceStreams() = default;
    ~DeviceStreams();
    DeviceStreams(const DeviceStreams &) = delete;
    DeviceStreams &operator=(const DeviceStreams &) = delete;
    DeviceStream &operator[](int i) { return slots_[i]; }
    int created() const { return (slots_[0].handle != nullptr) + (slots_[1].handle != nullptr); }

private:
    DeviceStream slots_[2];
};

// Whether the program links a Halide CUDA runtime that takes segtile's
// stream handler (the CUDA kernel libraries bring it): without one, calls
// run on Halide's default stream.
bool device_streams_available();

// The stream Halide's CUDA runtime is to use for a call with this user
// context: the context's DeviceStream, created on first use in `cu_context`
// (the current one); the default stream (null) for a null context or one
// naming no stream. What install_device_memory_hooks installs; a CUDA
// error code (CUresult) if the driver cannot make the stream.
int device_stream_for(void *user_context, void *cu_context, void **stream);

}  // namespace segtile
