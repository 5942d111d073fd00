#include "runtime/executor.h"

#include <algorithm>
#include <deque>
#include <stdexcept>

#include "runtime/device_memory.h"
#include "runtime/executor_tiles.h"
#include "runtime/host_copies.h"
#include "runtime/host_threads.h"
#include "spec/kernel_call.h"
#include "spec/kernel_signature.h"
#include "spec/region_map.h"

namespace segtile {

using Buffer = Halide::Runtime::Buffer<>;

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
    for (const StoredTensor &st : stored_tensors(model_, layout_, width, height, image_gradient_)) {
        auto make = [&] {
            return checkpoint_dir_.empty() ? Tensor(st.dims, ledger_, MemoryLedger::Kind::Checkpoint, type_)
                                           : Tensor::mapped(st.dims, checkpoint_dir_, ledger_, type_);
        };
        if (st.value) values_[st.tensor] = make();
        if (st.gradient) grads_[st.tensor] = make();
    }
}

std::vector<StoredTensor> stored_tensors(const Model &m, const SegmentLayout &layout, int64_t width, int64_t height,
                                         bool image_gradient) {
    const int L = (int)m.layers.size();
    const std::vector<TensorShape> shapes = m.shapes(width, height);
    std::vector<int> cps = layout.checkpoints();
    for (int t : layout.head_inputs) cps.push_back(t);
    std::vector<StoredTensor> out;
    std::vector<bool> seen(L + 1, false);
    for (int t : cps) {
        if (seen[t]) continue;
        seen[t] = true;
        const int64_t c = t == L ? m.input_channels : shapes[t].channels;
        // The image's value is the caller's; its gradient is stored only
        // where the layout gives it.
        out.push_back({t, {t == L ? width : shapes[t].width, t == L ? height : shapes[t].height, c, 1}, t != L,
                       t != L || image_gradient});
    }
    return out;
}

int64_t checkpoint_store_bytes(const Model &m, const SegmentLayout &layout, int64_t width, int64_t height,
                               halide_type_t type) {
    int64_t b = 0;
    for (const StoredTensor &st : stored_tensors(m, layout, width, height, layout.image_gradient)) {
        int64_t n = type.bytes();
        for (int64_t d : st.dims) n *= d;
        b += n * (st.value + st.gradient);
    }
    return b;
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
    // On the device the next tile's windows are made while a call runs
    // (device_tiles.cpp); on the CPU the call itself is the work, one tile
    // at a time, and the planner counts one tile's windows.
    const size_t n = order.size();
    const bool overlap = device_ && overlap_ != DeviceOverlap::OneTileAtATime && n > 1;
    if (overlap) run_tiles_overlapped(run, order, params);
    else run_tiles_one_at_a_time(run, order, params);
    device_params_.clear();  // frees their device copies
    drop_resident_checkpoints();
    if (trace_)
        report("segment " + std::to_string(s) + (backward ? " backward" : " forward"), "segment", segment_start,
               {{"first_layer", seg.first}, {"last_layer", seg.last},
                {"tiles", (int64_t)(run.regions.x[0].size() * run.regions.y[0].size())}});
}


void SegmentedExecutor::drop_resident_checkpoints() {
    // Checkpoints in mapped files leave the process's memory (the page
    // cache writes them back); the next row of tiles faults back what it
    // reads. Kept for a whole segment, a backward segment's checkpoint, output
    // gradient and input gradient are resident whole (VGG16 at 1024^2 under
    // 1/8: a 936 MiB high-water mark, against 669 MiB).
    if (checkpoint_dir_.empty()) return;
    for (auto *store : {&values_, &grads_})
        for (Tensor &t : *store) t.drop_resident();
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
        grads_[t].populate_for_write();
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
    // The head reads its inputs whole and writes their gradients whole:
    // their pages would stay resident through the first backward row.
    drop_resident_checkpoints();
    for (size_t p = 0; p < specs.size(); p++)
        if (specs[p].layer >= layout_.head_first && specs[p].layer <= model_.loss.input_id && specs[p].trainable)
            add_scaled(params.grads[p], partials[p], 1.0);
}

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
