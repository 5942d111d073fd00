// The device (CUDA) side of the executor: kernel calls charged to the
// ledger under the device cap, outputs brought back, and the tile loop that
// overlaps the host's work (and a second stream's call) with the GPU.
#include <stdexcept>

#include "runtime/device_memory.h"
#include "runtime/executor_tiles.h"
#include "runtime/memory_ledger.h"

namespace segtile {

using Buffer = Halide::Runtime::Buffer<>;

namespace {

// Before a device kernel call: Halide copies an input to a fresh device
// allocation only when its host side is marked dirty (halide_copy_to_device
// skips a clean one), and a view of a host tensor starts clean, so without
// this the kernel reads uninitialised device memory (zero weights, a loss
// of ln 2, NaNs). An input that already
// has its device copy (a segment's parameters after its first tile) is left
// alone and not copied again.
void mark_inputs_host_dirty(const std::vector<KernelArg> &sig, const std::vector<void *> &args) {
    for (size_t i = 0; i < sig.size() && i < args.size(); i++) {
        if (sig[i].scalar || sig[i].output) continue;
        auto *b = static_cast<halide_buffer_t *>(args[i]);
        if (b && b->host && b->device == 0) b->set_host_dirty(true);
    }
}

}  // namespace

// After a call of a device (CUDA) kernel: Halide copied each input view to
// the device and left each output there; copy the outputs back into the
// host tensors they view and free the call's device buffers, so the device
// holds one tile's buffers at a time. `ctx` names the call's stream (null:
// the default stream), where the copies queue behind its kernels; a freed
// buffer goes to Halide's cache for that stream's next call.
void sync_to_host(std::deque<Buffer> &views, KernelContext *ctx) {
    Buffer *any = nullptr;
    for (auto &b : views) {
        if (!b.has_device_allocation()) continue;
        any = &b;
        if (b.device_dirty() && b.copy_to_host(ctx) != 0)
            throw std::runtime_error("copying a kernel's output from the device failed" +
                                     (ctx && !ctx->last_error.empty() ? ": " + ctx->last_error : std::string()));
    }
    if (!any) return;
    if (ctx && ctx->stream && any->device_sync(ctx) != 0)
        throw std::runtime_error("a kernel on the device failed" +
                                 (!ctx->last_error.empty() ? ": " + ctx->last_error : std::string()));
    for (auto &b : views)
        if (b.has_device_allocation()) b.device_free(ctx);
}

// A kernel call. On the device its allocations (the copies of its inputs,
// which for parameters outlive it, its outputs and intermediates) are
// charged to the ledger; a call refused memory past the cap fails with the
// figures to change it (the text built only then: this runs per tile).
void SegmentedExecutor::call_kernel(Kernel &kernel, const std::vector<void *> &args, const char *kind, int segment,
                                    DeviceStream *stream) {
    if (!device_) return kernel.call(args);
    mark_inputs_host_dirty(kernel.signature(), args);
    if (!kernel.set_device_stream(stream)) throw std::logic_error("a kernel refused the stream it had taken");
    DeviceMemoryScope scope(ledger_, device_cap_);
    try {
        kernel.call(args);
        last_call_device_bytes_ = scope.peak_held() - scope.held_at_start();
    } catch (const std::runtime_error &e) {
        if (scope.refused_bytes() == 0) throw;
        device_params_.clear();
        const std::string what = segment < 0 ? std::string(kind)
                                             : std::string(kind) + " kernel of segment " + std::to_string(segment);
        throw DeviceMemoryError("the " + what + " needs more device memory than the cap of " +
                                format_bytes(device_cap_) + " allows (it asked for " +
                                format_bytes(scope.refused_bytes()) + " more with " +
                                format_bytes(scope.held_when_refused()) +
                                " held): give a larger --memory-cap, or smaller tiles (`segtile plan --target cuda` "
                                "names the smallest feasible cap)");
    }
}

// Two calls in flight fit the cap: what the ledger holds after a segment's
// first call (its buffers are in Halide's cache, still charged), and what
// that call added again, with a quarter to spare for interior tiles, whose
// windows are bigger than the first's (a corner).
bool SegmentedExecutor::two_calls_fit() const {
    if (device_cap_ <= 0 || !ledger_) return true;
    const int64_t held = ledger_->current(MemoryLedger::Kind::Device);
    return held + last_call_device_bytes_ + last_call_device_bytes_ / 4 <= device_cap_;
}

// Until a device step ends, however it ends: its streams finish their work
// and go, the kernels forget them, and the blocks Halide's allocation cache
// kept go back to the driver and off the ledger.
SegmentedExecutor::DeviceStep::DeviceStep(SegmentedExecutor &exec) : e(exec) {
    if (!e.device_ || e.overlap_ != DeviceOverlap::TwoStreams) return;
    e.streams_ = std::make_unique<DeviceStreams>();
    for (int i = 0; i < 2; i++) e.stream_context_[i] = KernelContext{e.ledger_, "", &(*e.streams_)[i]};
}

SegmentedExecutor::DeviceStep::~DeviceStep() {
    if (!e.device_) return;
    if (e.streams_) {
        for (auto *list : {&e.kernels_.forward, &e.kernels_.backward})
            for (auto &k : *list)
                if (k) k->set_device_stream(nullptr);
        e.streams_.reset();
    }
    release_cached_device_allocations();
}

// On the device a kernel call returns once its work is queued: the host
// makes the next tile's windows, and adds the previous tile's gradients,
// while the GPU runs (two tiles' host staging alive at once; the device
// still holds one call's buffers). With two streams the next tile's call
// is queued too before this one's outputs come back (docs/gpu.md).
void SegmentedExecutor::run_tiles_overlapped(SegmentRun &run, const std::vector<std::pair<size_t, size_t>> &order,
                                             ParamStore &params) {
    const size_t n = order.size();
    // The first tile runs alone on stream 0: it measures what a call holds,
    // and its copy of the parameters is on the device before stream 1 reads it.
    const bool streams = overlap_ == DeviceOverlap::TwoStreams && streams_ &&
                         run.kernel->set_device_stream(&(*streams_)[0]);
    bool two = streams;
    if (run.backward) run.partials[1] = make_partials(params, run.segment->first, run.segment->last);
    std::unique_ptr<TileCall> next = prepare_tile(run, order[0].first, order[0].second, params);
    std::unique_ptr<TileCall> done;    // collected, its gradients not yet added
    std::unique_ptr<TileCall> flight;  // two streams: called, its outputs not yet back
    for (size_t k = 0; k < n; k++) {
        std::unique_ptr<TileCall> cur = std::move(next);
        cur->stream = !streams ? -1 : two ? (int)(k % 2) : 0;
        // Two streams: tile k-2's gradients out of the partials' set before
        // tile k writes it (a CPU kernel writes it during the call, a GPU's
        // comes back later), while tile k-1 runs.
        if (two && done) {
            finish_tile(run, *done, params);
            done.reset();
        }
        launch_tile(run, *cur);
        // One stream: tile k-1's gradients while tile k runs. Two: tile
        // k-1's outputs back while tile k runs.
        if (done) {
            finish_tile(run, *done, params);
            done.reset();
        }
        if (flight) {
            collect_tile(run, *flight);
            done = std::move(flight);
        }
        if (k + 1 < n) next = prepare_tile(run, order[k + 1].first, order[k + 1].second, params);
        if (two && k > 0) {
            tiles_on_two_streams_++;
            flight = std::move(cur);
        } else {
            collect_tile(run, *cur);
            if (two) two = two_calls_fit();
            done = std::move(cur);
        }
    }
    if (flight) {
        if (done) finish_tile(run, *done, params);
        collect_tile(run, *flight);
        done = std::move(flight);
    }
    if (done) finish_tile(run, *done, params);
    done.reset();
    // Their device copies go to stream 0's cache (both streams are done
    // with them), where its next calls can reuse them; else the default's.
    if (streams)
        for (auto &b : device_params_)
            if (b.has_device_allocation()) b.device_free(&stream_context_[0]);
}

}  // namespace segtile
