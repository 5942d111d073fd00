// SegmentedExecutor: segmented fused-tiled training (docs/design.md).
// Forward: segment by segment, tile by tile, each tile's fused kernel reads
// windows of its input checkpoints and writes its output tiles into the
// checkpoint store; then the untiled head and loss. Backward: segments in
// reverse; per tile the backward kernel recomputes the forward on the
// windows, is seeded with the output gradient of the tile, and its input
// gradient windows are added into the checkpoint gradients (overlaps add)
// while weight gradients accumulate. A batch runs one image at a time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/step_kernel.h"
#include "runtime/parameters.h"
#include "runtime/tensor.h"
#include "spec/errors.h"
#include "spec/segments.h"
#include "spec/tiling.h"

namespace segtile {

// What the optional trace hook is told after each segment, tile and kernel
// call (e.g. to write a Chrome trace of one step); steady-clock times.
struct ExecutorEvent {
    std::string name, category;  // category: "segment", "tile", "kernel", "head"
    std::chrono::steady_clock::time_point start, end;
    std::vector<std::pair<std::string, int64_t>> args;
};
using ExecutorTraceHook = std::function<void(const ExecutorEvent &)>;

struct ModelKernels {
    std::vector<std::unique_ptr<Kernel>> forward, backward;  // per segment
    std::unique_ptr<Kernel> head;
};

// Kernels for one more executor, calling those of `k` (which they keep
// alive): one compilation serves executors of several sizes or tilings.
ModelKernels share_kernels(const std::shared_ptr<ModelKernels> &k);

// One tensor of the checkpoint store at an image size: its value and/or its
// gradient, each (W, H, C, 1).
struct StoredTensor {
    int tensor;                  // layer index; L is the image
    std::vector<int64_t> dims;   // (W, H, C, 1)
    bool value, gradient;
};
std::vector<StoredTensor> stored_tensors(const Model &m, const SegmentLayout &layout, int64_t width, int64_t height,
                                         bool image_gradient);
// The bytes the store of `layout` takes at width x height (what
// SegmentedExecutor::checkpoint_bytes() reports once it has run), before
// anything is allocated: where they go (memory or files) is decided on it.
int64_t checkpoint_store_bytes(const Model &m, const SegmentLayout &layout, int64_t width, int64_t height,
                               halide_type_t type);

class HostThreads;
class DeviceStreams;

// How the tiles of a segment meet the GPU (SegmentedExecutor::set_device).
enum class DeviceOverlap {
    // Call, wait, copy back, next tile: what the planner counts.
    OneTileAtATime,
    // The host makes tile k+1's windows and adds tile k-1's gradients while
    // tile k's call runs (its kernels are queued when the call returns).
    HostWork,
    // As HostWork, and tile k+1's call (its copies to the device, its
    // kernels) is queued on a second CUDA stream before tile k's outputs
    // are copied back: transfers overlap kernels, and two tiles' kernels
    // can share the GPU. The device then holds two calls' buffers: the
    // executor measures the first call of each segment and goes on with one
    // stream where two would not fit the cap (with a quarter to spare for
    // tiles bigger than the first). Needs AOT kernels and the CUDA runtime
    // that takes segtile's stream (Kernel::set_device_stream); else HostWork.
    TwoStreams,
};

class SegmentedExecutor {
public:
    SegmentedExecutor(const Model &m, SegmentLayout layout, ModelKernels kernels, std::vector<TileSize> tiles,
                      MemoryLedger *ledger, halide_type_t type = halide_type_of<float>(),
                      std::string checkpoint_dir = "");
    ~SegmentedExecutor();

    // One training step on a batch (images (W, H, C, N)); labels (N) int32
    // or targets (W', H', K, N). params.grads receive the gradients of the
    // batch-mean loss (overwritten). predictions (W', H', K, N) and
    // grad_images (like images) are filled when given; only kernels built
    // with the image's gradient (SegmentLayout::image_gradient) give them.
    // Returns the mean loss.
    double step(const Tensor &images, const Halide::Runtime::Buffer<> &labels_or_targets, ParamStore &params,
                Tensor *predictions = nullptr, Tensor *grad_images = nullptr);

    // The loss and predictions of a batch without its backward: the trunk's
    // forward and the head only (about a third of a step's work), for
    // prediction and validation. Returns the mean loss; params.grads are
    // left holding the head's share only, not a step's gradients.
    double evaluate(const Tensor &images, const Halide::Runtime::Buffer<> &labels_or_targets, ParamStore &params,
                    Tensor *predictions = nullptr);

    // Forward of the trunk for image n: fills every checkpoint.
    void forward(const Tensor &images, int n, ParamStore &params);

    // The kernels run on a GPU (CUDA libraries, segtile_add_model(... TARGET
    // cuda), or JIT kernels with the GPU schedule): after each call its
    // outputs are copied back to the host and its device buffers freed;
    // parameters stay on the device per segment. Every device allocation is
    // charged to the ledger (Kind::Device) and, with `device_cap` > 0, one
    // that would take it past the cap fails the step with DeviceMemoryError.
    // `overlap`: what runs beside a call (DeviceOverlap; OneTileAtATime
    // measures what the others gain). The host's copies and adds run on all
    // cores (HostThreads), as on the CPU path.
    void set_device(bool on, int64_t device_cap = 0, DeviceOverlap overlap = DeviceOverlap::HostWork);
    // The pool for the host's copies and adds (null: the caller alone),
    // shared with other executors that do not run at the same time as this
    // one; by default each executor starts its own on first use.
    void set_host_threads(std::shared_ptr<HostThreads> threads);
    // Reports every segment, tile and kernel call to `hook` (empty: none).
    void set_trace(ExecutorTraceHook hook) { trace_ = std::move(hook); }

    const Tensor &checkpoint(int tensor) const { return values_.at(tensor); }
    int64_t checkpoint_bytes() const;  // values and gradients (the store)
    const SegmentLayout &layout() const { return layout_; }
    TileRegions tile_regions(int segment) const { return segtile::tile_regions(model_, layout_.segments.at(segment), shapes_, tiles_.at(segment)); }
    int64_t tiles_run() const { return tiles_run_; }
    // Tiles whose call was queued while the previous tile's still ran
    // (DeviceOverlap::TwoStreams): 0 where one stream ran every tile.
    int64_t tiles_on_two_streams() const { return tiles_on_two_streams_; }
    bool image_gradient() const { return image_gradient_; }  // step() can fill grad_images

private:
    void allocate_store(int64_t width, int64_t height);
    Halide::Runtime::Buffer<> image_view(const Tensor &images, int n) const;
    std::vector<Tensor> make_partials(const ParamStore &params, int first, int last) const;
    struct TileCall;    // executor_tiles.h
    struct SegmentRun;  // executor_tiles.h
    struct DeviceStep;  // executor_tiles.h
    void run_segment(int s, bool backward, ParamStore &params);
    // A segment's tiles in `order` ((tx, ty), row by row), one call at a
    // time (executor_tiles.cpp) or overlapped on a device (device_tiles.cpp).
    void run_tiles_one_at_a_time(SegmentRun &run, const std::vector<std::pair<size_t, size_t>> &order,
                                 ParamStore &params);
    void run_tiles_overlapped(SegmentRun &run, const std::vector<std::pair<size_t, size_t>> &order,
                              ParamStore &params);
    std::unique_ptr<TileCall> prepare_tile(SegmentRun &run, size_t tx, size_t ty, ParamStore &params);
    void launch_tile(SegmentRun &run, TileCall &c);
    void collect_tile(SegmentRun &run, TileCall &c);
    bool two_calls_fit() const;
    void finish_tile(SegmentRun &run, TileCall &c, ParamStore &params);
    std::string kernel_event(const SegmentRun &run) const;
    Tensor take_spare(SegmentRun &run, const std::vector<int64_t> &dims);
    void drop_resident_checkpoints();  // mapped checkpoint pages out of the resident set
    void run_head(const Halide::Runtime::Buffer<> &labels_or_target, ParamStore &params, Tensor *predictions, int n,
                  double &loss);

    Model model_;
    SegmentLayout layout_;
    ModelKernels kernels_;
    std::vector<TileSize> tiles_;
    MemoryLedger *ledger_;
    halide_type_t type_;
    std::string checkpoint_dir_;
    int64_t width_ = 0, height_ = 0;
    std::vector<TensorShape> shapes_;
    std::vector<Tensor> values_, grads_;  // per tensor; defined for checkpoints (the image's value is a view)
    Halide::Runtime::Buffer<> image_;     // the current image, (W, H, C, 1)
    int64_t tiles_run_ = 0;
    bool image_gradient_ = true;
    std::vector<bool> backward_needed_;  // per segment (spec/segments.h backward_needed)
    bool device_ = false;
    int64_t device_cap_ = 0;
    DeviceOverlap overlap_ = DeviceOverlap::HostWork;
    std::unique_ptr<DeviceStreams> streams_;  // TwoStreams, during one step
    KernelContext stream_context_[2];         // the executor's own copies and syncs on each stream
    int64_t last_call_device_bytes_ = 0;      // the most the last device call added to the ledger
    int64_t tiles_on_two_streams_ = 0;
    std::shared_ptr<HostThreads> host_threads_;  // window copies and gradient adds; null on one core
    bool host_threads_started_ = false;
    HostThreads *host_threads();
    std::vector<Halide::Runtime::Buffer<>> device_params_;  // per parameter, during one device segment
    ExecutorTraceHook trace_;
    void report(std::string name, const char *category, std::chrono::steady_clock::time_point start,
                std::vector<std::pair<std::string, int64_t>> args = {}) const;
    // kind: "forward", "backward" (of `segment`) or "head" (segment -1).
    // `stream`: the CUDA stream of the call (null: Halide's default).
    void call_kernel(Kernel &kernel, const std::vector<void *> &args, const char *kind, int segment,
                     DeviceStream *stream = nullptr);
};

// A kernel call on the device was refused memory past the device cap.
class DeviceMemoryError : public InfeasibleError {
public:
    using InfeasibleError::InfeasibleError;
};

}  // namespace segtile

namespace segtile {

// The executor behind the StepKernel interface, so the training loop runs
// tiled or untiled alike.
class TiledStep : public StepKernel {
public:
    explicit TiledStep(std::unique_ptr<SegmentedExecutor> exec) : exec_(std::move(exec)) {}
    float run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params, Tensor &prediction,
              Tensor *grad_image) override {
        return (float)exec_->step(image, Halide::Runtime::Buffer<>(*labels_or_target), params, &prediction,
                                  grad_image);
    }
    bool image_gradient() const override { return exec_->image_gradient(); }
    SegmentedExecutor &executor() { return *exec_; }

private:
    std::unique_ptr<SegmentedExecutor> exec_;
};

}  // namespace segtile
