#include "runtime/executor_tiles.h"

#include <algorithm>

#include "runtime/device_memory.h"
#include "runtime/host_copies.h"
#include "runtime/host_threads.h"
#include "spec/kernel_call.h"
#include "spec/kernel_signature.h"

namespace segtile {

using Buffer = Halide::Runtime::Buffer<>;

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
        if (!backward)
            values_[o].populate_for_write(box.x.lo, box.x.hi + 1, box.y.lo, box.y.hi + 1, 0, shapes_[o].channels);
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

// One tile at a time (the CPU, where the call itself is the work, and the
// planner counts one tile's windows; or a device asked for no overlap).
void SegmentedExecutor::run_tiles_one_at_a_time(SegmentRun &run, const std::vector<std::pair<size_t, size_t>> &order,
                                                ParamStore &params) {
    for (size_t i = 0; i < order.size(); i++) {
        const auto [tx, ty] = order[i];
        std::unique_ptr<TileCall> c = prepare_tile(run, tx, ty, params);
        launch_tile(run, *c);
        collect_tile(run, *c);
        finish_tile(run, *c, params);
        // Mapped checkpoint pages leave the process after each row of tiles,
        // not each tile: the tiles of a row share pages (a 4 KiB page is a
        // whole 1024-float row of a plane). After the last row, run_segment
        // drops them.
        if (i + 1 < order.size() && order[i + 1].second != ty) drop_resident_checkpoints();
    }
}

}  // namespace segtile
