#include "runtime/executor.h"

#include <algorithm>
#include <deque>
#include <stdexcept>

#include "runtime/device_memory.h"
#include "runtime/host_threads.h"
#include "spec/kernel_call.h"
#include "spec/kernel_signature.h"
#include "spec/region_map.h"

namespace segtile {

namespace {

// A kernel of a shared ModelKernels (share_kernels).
class SharedKernel : public Kernel {
public:
    SharedKernel(std::shared_ptr<ModelKernels> owner, Kernel *k) : owner_(std::move(owner)), k_(k) {}
    const std::vector<KernelArg> &signature() const override { return k_->signature(); }
    void call(const std::vector<void *> &args) override { k_->call(args); }
    bool set_device_stream(DeviceStream *stream) override { return k_->set_device_stream(stream); }

private:
    std::shared_ptr<ModelKernels> owner_;
    Kernel *k_;
};

using Buffer = Halide::Runtime::Buffer<>;

// dst(x0 + x, y0 + y, c, 0) += src(x, y, c, 0) for channels c0..c1-1:
// overlapping input-gradient windows add.
template <typename T>
void add_window(Tensor &dst, Tensor &src, int64_t x0, int64_t y0, int64_t c0, int64_t c1) {
    const auto &d = dst.dims();
    const auto &s = src.dims();
    T *out = dst.as<T>();
    const T *in = src.as<T>();
    for (int64_t c = c0; c < c1; c++)
        for (int64_t y = 0; y < s[1]; y++) {
            T *row = out + (c * d[1] + y0 + y) * d[0] + x0;
            const T *srow = in + (c * s[1] + y) * s[0];
            for (int64_t x = 0; x < s[0]; x++) row[x] += srow[x];
        }
}

template <typename T>
void add_scaled(Tensor &dst, Tensor &src, double scale, int64_t k0, int64_t k1) {
    T *out = dst.as<T>();
    const T *in = src.as<T>();
    for (int64_t k = k0; k < k1; k++) out[k] += (T)scale * in[k];
}

template <typename T>
void scale(Tensor &t, double f) {
    T *p = t.as<T>();
    for (int64_t k = 0; k < t.numel(); k++) p[k] *= (T)f;
}

void scale(Tensor &t, double f) {
    if (t.type() == halide_type_of<double>()) scale<double>(t, f);
    else scale<float>(t, f);
}

// The host's copies and adds, one channel plane (or one chunk) per task
// where `threads` is given (the device path), else in this thread.
void add_window(Tensor &dst, Tensor &src, int64_t x0, int64_t y0, HostThreads *threads = nullptr) {
    const bool dbl = dst.type() == halide_type_of<double>();
    auto planes = [&](int64_t c0, int64_t c1) {
        if (dbl) add_window<double>(dst, src, x0, y0, c0, c1);
        else add_window<float>(dst, src, x0, y0, c0, c1);
    };
    if (!threads) return planes(0, src.dims()[2]);
    threads->parallel_for(src.dims()[2], [&](int64_t c) { planes(c, c + 1); });
}

// sum += src with Kahan's compensation in `carry` (as wide as sum): a
// segment's weight gradient adds one partial per tile, and in float32 the
// plain sum drifted by n * eps / 2 (860 one-pixel tiles: a bias gradient
// 1.1e-5 off the untiled one; with carry the error stays at eps).
template <typename T>
void add_compensated(Tensor &sum, Tensor &carry, Tensor &src, int64_t k0, int64_t k1) {
    T *s = sum.as<T>(), *c = carry.as<T>();
    const T *in = src.as<T>();
    for (int64_t k = k0; k < k1; k++) {
        const T y = in[k] - c[k];
        const T t = s[k] + y;
        c[k] = (t - s[k]) - y;
        s[k] = t;
    }
}

void add_compensated(Tensor &sum, Tensor &carry, Tensor &src, HostThreads *threads) {
    const bool dbl = sum.type() == halide_type_of<double>();
    auto range = [&](int64_t k0, int64_t k1) {
        if (dbl) add_compensated<double>(sum, carry, src, k0, k1);
        else add_compensated<float>(sum, carry, src, k0, k1);
    };
    constexpr int64_t chunk = 1 << 18;
    const int64_t n = sum.numel();
    if (!threads || n <= chunk) return range(0, n);
    threads->parallel_for((n + chunk - 1) / chunk, [&](int64_t i) { range(i * chunk, std::min(n, (i + 1) * chunk)); });
}

void add_scaled(Tensor &dst, Tensor &src, double scale, HostThreads *threads = nullptr) {
    const bool dbl = dst.type() == halide_type_of<double>();
    auto range = [&](int64_t k0, int64_t k1) {
        if (dbl) add_scaled<double>(dst, src, scale, k0, k1);
        else add_scaled<float>(dst, src, scale, k0, k1);
    };
    constexpr int64_t chunk = 1 << 18;
    const int64_t n = dst.numel();
    if (!threads || n <= chunk) return range(0, n);
    threads->parallel_for((n + chunk - 1) / chunk, [&](int64_t i) { range(i * chunk, std::min(n, (i + 1) * chunk)); });
}

// dst = src over the same region (x, y, channels, batch of one), one
// channel plane per task where `threads` is given.
void copy_window(Buffer &dst, const Buffer &src, HostThreads *threads) {
    if (!threads || dst.dimensions() < 3) return dst.copy_from(src);
    const int c0 = dst.dim(2).min();
    threads->parallel_for(dst.dim(2).extent(), [&](int64_t c) {
        Buffer d = dst.sliced(2, c0 + (int)c);
        d.copy_from(src.sliced(2, c0 + (int)c));
    });
}

// After a call of a device (CUDA) kernel: Halide copied each input view to
// the device and left each output there; copy the outputs back into the
// host tensors they view and free the call's device buffers, so the device
// holds one tile's buffers at a time. `ctx` names the call's stream (null:
// the default stream), where the copies queue behind its kernels; a freed
// buffer goes to Halide's cache for that stream's next call.
void sync_to_host(std::deque<Buffer> &views, KernelContext *ctx = nullptr) {
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

// Image n of a batch as a (W, H, C, 1) buffer with n at 0, as kernels expect.
Buffer batch_item(const Buffer &b, int n) {
    Buffer v = b.sliced(b.dimensions() - 1, n);
    return v.embedded(b.dimensions() - 1, 0);
}

}  // namespace

ModelKernels share_kernels(const std::shared_ptr<ModelKernels> &k) {
    ModelKernels s;
    for (auto &f : k->forward) s.forward.push_back(std::make_unique<SharedKernel>(k, f.get()));
    for (auto &b : k->backward) s.backward.push_back(std::make_unique<SharedKernel>(k, b.get()));
    s.head = std::make_unique<SharedKernel>(k, k->head.get());
    return s;
}

SegmentedExecutor::SegmentedExecutor(const Model &m, SegmentLayout layout, ModelKernels kernels,
                                     std::vector<TileSize> tiles, MemoryLedger *ledger, halide_type_t type,
                                     std::string checkpoint_dir)
    : model_(m), layout_(std::move(layout)), kernels_(std::move(kernels)), tiles_(std::move(tiles)), ledger_(ledger),
      type_(type), checkpoint_dir_(std::move(checkpoint_dir)) {
    const size_t S = layout_.segments.size();
    if (kernels_.forward.size() != S || kernels_.backward.size() != S || !kernels_.head)
        throw std::invalid_argument("kernels do not match the segment layout");
    if (tiles_.size() != S)
        throw std::invalid_argument("give one tile size per segment (" + std::to_string(S) + " segments)");
    // The kernels say whether the image's gradient is computed (built with
    // SegmentLayout::image_gradient); the store holds it only then.
    // A backward that gives nothing training reads is not run (backward_needed).
    backward_needed_ = backward_needed(m, layout_);
    image_gradient_ = has_arg(kernels_.head->signature(), "grad_in_image");
    for (size_t s = 0; s < S; s++)
        if (backward_needed_[s]) image_gradient_ = image_gradient_ || has_arg(kernels_.backward[s]->signature(), "grad_in_image");
}

// The host's copies and adds on every core: on the CPU path they run
// between kernel calls, while the cores are otherwise idle. Started on
// first use unless shared (set_host_threads).
HostThreads *SegmentedExecutor::host_threads() {
    if (!host_threads_started_) {
        host_threads_ = HostThreads::for_this_machine();
        host_threads_started_ = true;
    }
    return host_threads_.get();
}

void SegmentedExecutor::set_host_threads(std::shared_ptr<HostThreads> threads) {
    host_threads_ = std::move(threads);
    host_threads_started_ = true;
}

SegmentedExecutor::~SegmentedExecutor() = default;

void SegmentedExecutor::set_device(bool on, int64_t device_cap, DeviceOverlap overlap) {
    device_ = on;
    device_cap_ = device_cap;
    overlap_ = overlap;
}

void SegmentedExecutor::allocate_store(int64_t width, int64_t height) {
    if (width == width_ && height == height_) return;
    shapes_ = model_.shapes(width, height);
    width_ = width;
    height_ = height;
    const int L = (int)model_.layers.size();
    values_.clear();
    grads_.clear();
    values_.resize(L + 1);
    grads_.resize(L + 1);
    std::vector<int> cps = layout_.checkpoints();
    for (int t : layout_.head_inputs) cps.push_back(t);
    for (int t : cps) {
        if (grads_[t].defined()) continue;
        const int64_t c = t == L ? model_.input_channels : shapes_[t].channels;
        std::vector<int64_t> dims = {t == L ? width : shapes_[t].width, t == L ? height : shapes_[t].height, c, 1};
        auto make = [&] {
            return checkpoint_dir_.empty() ? Tensor(dims, ledger_, MemoryLedger::Kind::Checkpoint, type_)
                                           : Tensor::mapped(dims, checkpoint_dir_, ledger_, type_);
        };
        if (t != L) values_[t] = make();  // the image's value is the caller's
        if (t != L || image_gradient_) grads_[t] = make();
    }
}

int64_t SegmentedExecutor::checkpoint_bytes() const {
    int64_t b = 0;
    for (const auto &v : values_) b += v.bytes();
    for (const auto &g : grads_) b += g.bytes();
    return b;
}

// Weight-gradient partials of the parameters of layers first..last, reused
// by every tile of one kernel; allocated per kernel so only one segment's
// worth is alive at a time.
std::vector<Tensor> SegmentedExecutor::make_partials(const ParamStore &params, int first, int last) const {
    std::vector<Tensor> partials(params.specs().size());
    for (size_t p = 0; p < partials.size(); p++) {
        const ParamSpec &s = params.specs()[p];
        if (s.trainable && s.layer >= first && s.layer <= last)
            partials[p] = Tensor(s.dims, ledger_, MemoryLedger::Kind::Working, type_);
    }
    return partials;
}

void SegmentedExecutor::report(std::string name, const char *category, std::chrono::steady_clock::time_point start,
                               std::vector<std::pair<std::string, int64_t>> args) const {
    if (trace_) trace_({std::move(name), category, start, std::chrono::steady_clock::now(), std::move(args)});
}

// One tile's kernel call: its windows, their host staging and the argument
// list, kept together so that on the device the next tile's can be made
// while this one runs (run_segment).
struct SegmentedExecutor::TileCall {
    size_t tx = 0, ty = 0;
    std::chrono::steady_clock::time_point start;
    TileWindows win;
    std::deque<Buffer> views;  // stable addresses for the call
    // On the device, each window of a checkpoint goes through a dense host
    // copy: a cropped view keeps its checkpoint's strides, and Halide gives
    // a buffer its whole span (size_in_bytes) on the device, all but the
    // whole checkpoint for a window with channels.
    std::deque<Tensor> staging;
    std::vector<std::pair<Buffer, Buffer>> copy_back;  // (dense, window) of outputs
    std::vector<std::pair<int, Tensor>> grad_windows;  // (input, its gradient's window)
    ArgList args;
    std::vector<void *> built;  // args in the kernel's order
    std::vector<Tensor> *partials = nullptr;  // the set this call writes its weight-gradient partials to
    int stream = -1;  // TwoStreams: the slot of the stream the call runs on (-1: the default)
};

// What every tile of one segment's kernel shares.
struct SegmentedExecutor::SegmentRun {
    int s = 0;
    const SegmentSpec *segment = nullptr;
    bool backward = false;
    Kernel *kernel = nullptr;
    TileRegions regions;
    std::vector<Box<int64_t>> full;
    std::vector<ParamSpec> specs;
    std::vector<int> graded;        // inputs whose gradient the backward kernel gives
    // Weight-gradient partials, reused by every other tile: with overlap,
    // tile k+1's call writes one set while tile k's is added from the other.
    std::vector<Tensor> partials[2];
    std::vector<Tensor> carries;  // the compensation of each weight gradient's sum over tiles
    std::vector<Tensor> spare;  // device path: finished tiles' host windows, for the next tiles
    bool trainable(size_t p) const {
        const SegmentSpec &seg = *segment;
        return backward && specs[p].trainable && specs[p].layer >= seg.first && specs[p].layer <= seg.last;
    }
};

std::unique_ptr<SegmentedExecutor::TileCall> SegmentedExecutor::prepare_tile(SegmentRun &run, size_t tx, size_t ty,
                                                                             ParamStore &params) {
    const SegmentSpec &seg = *run.segment;
    const bool backward = run.backward;
    const int L = (int)model_.layers.size();
    auto call = std::make_unique<TileCall>();
    TileCall &c = *call;
    c.tx = tx;
    c.ty = ty;
    c.partials = &run.partials[(tx + ty * run.regions.x[0].size()) % 2];
    if (c.partials->empty()) c.partials = &run.partials[0];
    c.start = std::chrono::steady_clock::now();
    c.win = tile_windows(model_, seg, run.regions, tx, ty, run.full);
    c.grad_windows.reserve(seg.inputs.size());
    for (const auto &[name, v] : tile_scalars(model_, c.win, width_, height_)) c.args.scalar(name, (int32_t)v);
    auto crop = [&](const Buffer &b, const Box<int64_t> &r, bool output) {
        Buffer w = b.cropped({{(int)r.x.lo, (int)(r.x.hi - r.x.lo + 1)}, {(int)r.y.lo, (int)(r.y.hi - r.y.lo + 1)}});
        if (!device_) return w;
        std::vector<int64_t> dims;
        for (int d = 0; d < w.dimensions(); d++) dims.push_back(w.dim(d).extent());
        c.staging.push_back(take_spare(run, dims));
        Buffer dense = c.staging.back().view();
        dense.translate({(int)r.x.lo, (int)r.y.lo});
        if (output) c.copy_back.emplace_back(dense, w);
        else copy_window(dense, w, host_threads());
        return dense;
    };
    for (const auto &[o, box] : c.win.targets) {
        const std::string name = tensor_name(model_, o);
        c.views.push_back(crop(backward ? grads_[o].view() : values_[o].view(), box, !backward));
        c.args.buffer((backward ? "grad_out_" : "out_") + name, c.views.back().raw_buffer());
    }
    for (int t : seg.inputs) {
        const Box<int64_t> &w = *c.win.need[t];
        c.views.push_back(crop(t == L ? image_ : values_[t].view(), w, false));
        c.args.buffer("in_" + tensor_name(model_, t), c.views.back().raw_buffer());
        if (std::count(run.graded.begin(), run.graded.end(), t)) {
            const int64_t channels = t == L ? model_.input_channels : shapes_[t].channels;
            const std::vector<int64_t> dims{w.x.hi - w.x.lo + 1, w.y.hi - w.y.lo + 1, channels, 1};
            // The kernel writes the window whole: not zeroed first (a pass
            // over it per tile, 64 MiB for Darknet19's bn2..conv3 at 1024^2).
            c.grad_windows.emplace_back(t, device_ ? take_spare(run, dims)
                                                   : Tensor(dims, ledger_, MemoryLedger::Kind::Working, type_, false));
            Buffer g = c.grad_windows.back().second.view();
            g.translate({(int)w.x.lo, (int)w.y.lo});
            c.views.push_back(g);
            c.args.buffer("grad_in_" + tensor_name(model_, t), c.views.back().raw_buffer());
        }
    }
    for (size_t p = 0; p < run.specs.size(); p++) {
        if (run.specs[p].layer < seg.first || run.specs[p].layer > seg.last) continue;
        if (device_) {
            // One view per parameter for the whole segment: Halide copies
            // it to the device at the first tile and reuses it after.
            if (device_params_.size() != run.specs.size()) device_params_.assign(run.specs.size(), Buffer());
            if (!device_params_[p].data()) device_params_[p] = params.values[p].view();
            c.args.buffer(c_identifier(run.specs[p].name), device_params_[p].raw_buffer());
        } else {
            c.views.push_back(params.values[p].view());
            c.args.buffer(c_identifier(run.specs[p].name), c.views.back().raw_buffer());
        }
        if (run.trainable(p)) {
            c.views.push_back((*c.partials)[p].view());
            c.args.buffer("grad_" + c_identifier(run.specs[p].name), c.views.back().raw_buffer());
        }
    }
    c.built = c.args.build(run.kernel->signature());
    return call;
}

void SegmentedExecutor::launch_tile(SegmentRun &run, TileCall &c) {
    const auto kernel_start = std::chrono::steady_clock::now();
    call_kernel(*run.kernel, c.built, run.backward ? "backward" : "forward", run.s,
                c.stream >= 0 ? &(*streams_)[c.stream] : nullptr);
    if (trace_) report(kernel_event(run), "kernel", kernel_start);
}

// The kernel's outputs back on the host (on the device: waits for it).
// Reported as a "kernel" event of the call's name, like its launch: the
// two together are the time the step waited on the kernel.
void SegmentedExecutor::collect_tile(SegmentRun &run, TileCall &c) {
    const auto wait_start = std::chrono::steady_clock::now();
    if (device_) sync_to_host(c.views, c.stream >= 0 ? &stream_context_[c.stream] : nullptr);
    for (auto &[dense, window] : c.copy_back) copy_window(window, dense, host_threads());
    if (trace_ && device_) report(kernel_event(run), "kernel", wait_start);
}

// The tile's gradients into the store and the parameters' gradients.
void SegmentedExecutor::finish_tile(SegmentRun &run, TileCall &c, ParamStore &params) {
    if (run.backward) {
        HostThreads *threads = host_threads();
        for (auto &[t, g] : c.grad_windows)
            add_window(grads_[t], g, c.win.need[t]->x.lo, c.win.need[t]->y.lo, threads);
        for (size_t p = 0; p < run.specs.size(); p++)
            if (run.trainable(p)) add_compensated(params.grads[p], run.carries[p], (*c.partials)[p], threads);
    }
    tiles_run_++;
    // On the device the next tiles take its host windows over: no fresh
    // allocation (zeroed, page-faulted in) per tile. Every window a call
    // gets is written whole (copied in, or a kernel output) before it is read.
    if (device_) {
        for (auto &t : c.staging) run.spare.push_back(std::move(t));
        for (auto &[t, g] : c.grad_windows) run.spare.push_back(std::move(g));
        c.staging.clear();
        c.grad_windows.clear();
        // Edge tiles' odd sizes would pile up: keep the newest.
        constexpr size_t kMaxSpare = 32;
        if (run.spare.size() > kMaxSpare) run.spare.erase(run.spare.begin(), run.spare.end() - kMaxSpare);
    }
    if (trace_)
        report("tile " + std::to_string(c.tx) + "," + std::to_string(c.ty), "tile", c.start,
               {{"tx", (int64_t)c.tx}, {"ty", (int64_t)c.ty}});
}

Tensor SegmentedExecutor::take_spare(SegmentRun &run, const std::vector<int64_t> &dims) {
    for (auto it = run.spare.begin(); it != run.spare.end(); ++it)
        if (it->dims() == dims) {
            Tensor t = std::move(*it);
            run.spare.erase(it);
            return t;
        }
    return Tensor(dims, ledger_, MemoryLedger::Kind::Working, type_);
}

std::string SegmentedExecutor::kernel_event(const SegmentRun &run) const {
    return std::string(run.backward ? "backward" : "forward") + " kernel, segment " + std::to_string(run.s);
}

void SegmentedExecutor::run_segment(int s, bool backward, ParamStore &params) {
    using clock = std::chrono::steady_clock;
    const clock::time_point segment_start = clock::now();
    const SegmentSpec &seg = layout_.segments[s];
    SegmentRun run;
    run.s = s;
    run.backward = backward;
    run.segment = &seg;
    run.kernel = backward ? kernels_.backward[s].get() : kernels_.forward[s].get();
    run.regions = tile_regions(s);
    run.full = whole_boxes(model_, shapes_, width_, height_);
    run.specs = params.specs();
    if (backward) {
        run.partials[0] = make_partials(params, seg.first, seg.last);
        run.carries = make_partials(params, seg.first, seg.last);  // zeroed
    }
    for (int t : seg.inputs)
        if (backward && has_arg(run.kernel->signature(), "grad_in_" + tensor_name(model_, t))) run.graded.push_back(t);
    std::vector<std::pair<size_t, size_t>> order;  // (tx, ty), row by row
    for (size_t ty = 0; ty < run.regions.y[0].size(); ty++)
        for (size_t tx = 0; tx < run.regions.x[0].size(); tx++) order.push_back({tx, ty});
    // On the device a kernel call returns once its work is queued: the host
    // makes the next tile's windows, and adds the previous tile's gradients,
    // while the GPU runs (two tiles' host staging alive at once; the device
    // still holds one call's buffers). With two streams the next tile's call
    // is queued too before this one's outputs come back (docs/gpu.md). On
    // the CPU, one tile at a time: the call itself is the work, and the
    // planner counts one tile's windows.
    const size_t n = order.size();
    const bool overlap = device_ && overlap_ != DeviceOverlap::OneTileAtATime && n > 1;
    // The first tile runs alone on stream 0: it measures what a call holds,
    // and its copy of the parameters is on the device before stream 1 reads it.
    const bool streams = overlap && overlap_ == DeviceOverlap::TwoStreams && streams_ &&
                         run.kernel->set_device_stream(&(*streams_)[0]);
    bool two = streams;
    if (backward && overlap) run.partials[1] = make_partials(params, seg.first, seg.last);
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
        if (!overlap) {
            collect_tile(run, *cur);
            finish_tile(run, *cur, params);
            cur.reset();
            if (k + 1 < n) next = prepare_tile(run, order[k + 1].first, order[k + 1].second, params);
            continue;
        }
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
    device_params_.clear();  // frees their device copies
    // Checkpoints in mapped files leave memory between segments (the page
    // cache writes them back); a later segment reads back what it needs.
    if (!checkpoint_dir_.empty())
        for (auto *store : {&values_, &grads_})
            for (Tensor &t : *store) t.drop_resident();
    if (trace_)
        report("segment " + std::to_string(s) + (backward ? " backward" : " forward"), "segment", segment_start,
               {{"first_layer", seg.first}, {"last_layer", seg.last},
                {"tiles", (int64_t)(run.regions.x[0].size() * run.regions.y[0].size())}});
}

void SegmentedExecutor::run_head(const Buffer &labels_or_target, ParamStore &params, Tensor *predictions, int n,
                                 double &loss) {
    const auto head_start = std::chrono::steady_clock::now();
    Kernel &kernel = *kernels_.head;
    std::vector<Tensor> partials = make_partials(params, layout_.head_first, model_.loss.input_id);
    const int L = (int)model_.layers.size();
    std::deque<Buffer> views;
    ArgList args;
    for (int t : layout_.head_inputs) {
        views.push_back(t == L ? image_ : values_[t].view());
        args.buffer("in_" + tensor_name(model_, t), views.back().raw_buffer());
        if (!grads_[t].defined()) continue;  // the image's, not asked for
        views.push_back(grads_[t].view());  // the head is the first contributor: it writes
        args.buffer("grad_in_" + tensor_name(model_, t), views.back().raw_buffer());
    }
    views.push_back(batch_item(labels_or_target, n));
    args.buffer(loss_target_name(model_), views.back().raw_buffer());
    double loss_storage = 0;  // big enough for float or double
    views.push_back(Buffer(type_, &loss_storage, std::vector<int>{}));
    args.buffer("loss", views.back().raw_buffer());
    const TensorShape &ps = shapes_[model_.loss.input_id];
    Tensor scratch;
    if (predictions) {
        views.push_back(batch_item(predictions->view(), n));
    } else {
        scratch = Tensor({ps.width, ps.height, ps.channels, 1}, ledger_, MemoryLedger::Kind::Working, type_);
        views.push_back(scratch.view());
    }
    args.buffer("prediction", views.back().raw_buffer());
    const auto specs = params.specs();
    for (size_t p = 0; p < specs.size(); p++) {
        if (specs[p].layer < layout_.head_first || specs[p].layer > model_.loss.input_id) continue;
        views.push_back(params.values[p].view());
        args.buffer(c_identifier(specs[p].name), views.back().raw_buffer());
        if (specs[p].trainable) {
            views.push_back(partials[p].view());
            args.buffer("grad_" + c_identifier(specs[p].name), views.back().raw_buffer());
        }
    }
    call_kernel(kernel, args.build(kernel.signature()), "head", -1);
    if (device_) sync_to_host(views);
    loss = type_ == halide_type_of<double>() ? loss_storage : (double)*reinterpret_cast<float *>(&loss_storage);
    if (trace_) report("head and loss", "head", head_start);
    for (size_t p = 0; p < specs.size(); p++)
        if (specs[p].layer >= layout_.head_first && specs[p].layer <= model_.loss.input_id && specs[p].trainable)
            add_scaled(params.grads[p], partials[p], 1.0);
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
struct SegmentedExecutor::DeviceStep {
    SegmentedExecutor &e;
    explicit DeviceStep(SegmentedExecutor &exec) : e(exec) {
        if (!e.device_ || e.overlap_ != DeviceOverlap::TwoStreams) return;
        e.streams_ = std::make_unique<DeviceStreams>();
        for (int i = 0; i < 2; i++) e.stream_context_[i] = KernelContext{e.ledger_, "", &(*e.streams_)[i]};
    }
    ~DeviceStep() {
        if (!e.device_) return;
        if (e.streams_) {
            for (auto *list : {&e.kernels_.forward, &e.kernels_.backward})
                for (auto &k : *list)
                    if (k) k->set_device_stream(nullptr);
            e.streams_.reset();
        }
        release_cached_device_allocations();
    }
};

Buffer SegmentedExecutor::image_view(const Tensor &images, int n) const { return batch_item(images.view(), n); }

void SegmentedExecutor::forward(const Tensor &images, int n, ParamStore &params) {
    allocate_store(images.dims()[0], images.dims()[1]);
    image_ = image_view(images, n);
    for (size_t s = 0; s < layout_.segments.size(); s++) run_segment((int)s, false, params);
}

double SegmentedExecutor::evaluate(const Tensor &images, const Buffer &labels_or_targets, ParamStore &params,
                                   Tensor *predictions) {
    const int N = (int)images.dims()[3];
    const DeviceStep device_step(*this);
    params.zero_grads();  // the head adds its partials
    double total = 0;
    for (int n = 0; n < N; n++) {
        forward(images, n, params);
        double loss = 0;
        run_head(labels_or_targets, params, predictions, n, loss);
        total += loss;
    }
    return total / N;
}

double SegmentedExecutor::step(const Tensor &images, const Buffer &labels_or_targets, ParamStore &params,
                               Tensor *predictions, Tensor *grad_images) {
    const int N = (int)images.dims()[3];
    const int L = (int)model_.layers.size();
    if (grad_images && !image_gradient_)
        throw std::invalid_argument("these kernels were built without the image's gradient: build them from a "
                                    "SegmentLayout with image_gradient = true to ask step() for grad_images");
    const DeviceStep device_step(*this);
    params.zero_grads();
    double total = 0;
    for (int n = 0; n < N; n++) {
        forward(images, n, params);
        for (auto &g : grads_)
            if (g.defined()) g.zero();
        double loss = 0;
        run_head(labels_or_targets, params, predictions, n, loss);
        total += loss;
        for (int s = (int)layout_.segments.size() - 1; s >= 0; s--)
            if (backward_needed_[s]) run_segment(s, true, params);
        if (grad_images) {
            Buffer dst = batch_item(grad_images->view(), n);
            dst.copy_from(grads_[L].view());
        }
    }
    // Each image's gradients are of its own loss; the batch loss is their mean.
    for (auto &g : params.grads)
        if (g.defined()) scale(g, 1.0 / N);
    if (grad_images) scale(*grad_images, 1.0 / N);
    return total / N;
}

}  // namespace segtile
