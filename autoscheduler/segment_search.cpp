#include "autoscheduler/segment_search.h"

#include <algorithm>
#include <cstdio>

#include "autoscheduler/time_model.h"
#include "spec/environment.h"

namespace segtile {

namespace {

// Tile sides tried on a segment's output: fine enough for deep, strided
// layers, coarse enough that the search stays cheap. 0 is the whole extent.
const std::vector<int64_t> &tile_ladder() {
    static const std::vector<int64_t> ladder = {1,   2,   3,   4,   6,   8,    12,   16,   24,   32,   48,  64,
                                                96,  128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096};
    return ladder;
}

// The layout holding layers a..b as one segment, and that segment's index.
std::pair<SegmentLayout, int> single_segment(const Model &m, int a, int b, bool image_gradient) {
    std::vector<int> cuts;
    if (a > 0) cuts.push_back(a - 1);
    if (b < trunk_end(m)) cuts.push_back(b);
    return {make_segments(m, cuts, image_gradient), a > 0 ? 1 : 0};
}

// A stored tensor's bytes (the image is the caller's: 0).
int64_t stored_bytes(const Model &m, const std::vector<TensorShape> &shapes, int t, int type_bytes) {
    if (t == (int)m.layers.size()) return 0;
    return shapes[t].width * shapes[t].height * shapes[t].channels * type_bytes;
}

// The resident bytes of rows y.lo..y.hi of every channel plane of a
// (width x height x channels) checkpoint in a mapped file. A read fault on
// a file mapping also maps the cached pages around it, the aligned 64 KiB
// block (Linux's fault_around_bytes; measured here: 20 pages read, 128 KiB
// resident), so each plane's span of rows is rounded out to whole blocks,
// one more for a span that starts mid-block; at most the whole tensor.
int64_t resident_rows(const Span<int64_t> &y, int64_t width, int64_t height, int64_t channels, int type_bytes) {
    constexpr int64_t kBlock = 64 << 10;
    const int64_t rows = std::min(y.hi, height - 1) - std::max<int64_t>(y.lo, 0) + 1;
    if (rows <= 0) return 0;
    const int64_t span = rows * width * type_bytes, tensor = width * height * channels * type_bytes;
    const int64_t per_plane = ((span + kBlock - 1) / kBlock + 1) * kBlock;
    return std::min(channels * per_plane, ((tensor + kBlock - 1) / kBlock + 1) * kBlock);
}

int64_t layer_sum(const std::map<int, int64_t> &per_layer, int first, int last) {
    int64_t b = 0;
    for (auto it = per_layer.lower_bound(first); it != per_layer.end() && it->first <= last; ++it) b += it->second;
    return b;
}

}  // namespace

SegmentSearch::SegmentSearch(const Model &m, const PlanRequest &req, KernelMemory *exact)
    : m_(m), req_(req), exact_(exact), analytic_(m, req.type_bytes), shapes_(m.shapes(req.width, req.height)),
      whole_(whole_boxes(m, shapes_, req.width, req.height)), end_(trunk_end(m)) {
    req_.mapped_checkpoints = req.mapped_checkpoints && !req.device;  // device plans: checkpoints stay on the host
    for (const auto &p : m.params()) {
        // On a GPU only the running segment's parameters are on the device.
        if (req.device) param_bytes_[p.layer] += p.numel() * req.type_bytes;
        else fixed_ += p.numel() * req.type_bytes * (p.trainable ? 2 + req.optimizer_copies : 1);
        if (p.trainable) trainable_bytes_[p.layer] += p.numel() * req.type_bytes;
    }
    // Reported apart from the parameters (Plan::reserve_bytes): the
    // runtime takes anywhere from nothing to this much.
    if (!req.device) reserve_ = req.runtime_reserve;
    head_ = head_bytes();
}

bool SegmentSearch::windows_passable(const SegmentSpec &seg) const {
    // On the CPU a kernel reads and writes its windows in place in the
    // checkpoints (Darknet19 cut at conv2 at 16384^2, 64 x 8192^2
    // elements, failed its first call). On the device windows are dense
    // copies.
    if (req_.device) return true;
    const int L = (int)m_.layers.size();
    for (const auto *list : {&seg.inputs, &seg.outputs})
        for (int t : *list) {
            const int64_t pixels = t == L ? req_.width * req_.height : shapes_[t].width * shapes_[t].height;
            if (pixels * channels_of(m_, t) >= (int64_t(1) << 31)) return false;
        }
    return true;
}

SegmentSearch::Eval SegmentSearch::evaluate(int a, int b, TileSize tile, bool use_exact) {
    Eval e;
    auto [layout, s] = single_segment(m_, a, b, req_.image_gradient);
    const SegmentSpec &seg = layout.segments[s];
    if (!windows_passable(seg)) return e;
    // Its backward gives nothing training reads: the executor skips it.
    const bool backward = backward_needed(m_, layout)[s];
    // The inputs whose gradient windows the backward calls hold.
    const auto bsig = kernel_signature(m_, layout, KernelKind::Backward, s);
    std::vector<int> graded;
    for (int t : seg.inputs)
        if (has_arg(bsig, "grad_in_" + tensor_name(m_, t))) graded.push_back(t);
    TileRegions r;
    try {
        r = tile_regions(m_, seg, shapes_, tile);
    } catch (const ModelError &) {
        return e;  // finer than a secondary output: not a candidate
    }
    const size_t nx = r.x[0].size(), ny = r.y[0].size();
    KernelMemory *exact = use_exact ? exact_ : nullptr;
    const double scale = use_exact ? 1.0 : ratio(a, b);
    // A kernel's peak at tile c: the exact model evaluates the call the
    // executor makes; the analytic one needs the windows alone.
    const CallPeak peak = [&](KernelKind kind, const TileWindows &c) -> int64_t {
        if (!exact) return (int64_t)(scale * (double)analytic_.peak(seg, kind, c));
        KernelCall call = tile_kernel_call(m_, layout, kind, s, c, shapes_, req_.width, req_.height);
        call.threads = req_.threads;
        return exact->peak(layout, kind, s, call);
    };
    const WorstCalls worst = worst_calls(m_, seg, r, whole_, backward, graded, req_.type_bytes, peak);
    const int64_t fk = worst.forward, bk = worst.backward;
    const TileWindows &w = worst.windows;
    // A call that cannot run at any cap: the lowered kernel's 32-bit
    // index arithmetic overflows (KernelMemory::kUnrunnableBytes), or, on
    // the device, a layer's window has 2^31 elements or more (the GPU
    // schedule's flat loop over them is int32).
    if (fk >= KernelMemory::kUnrunnableBytes || bk >= KernelMemory::kUnrunnableBytes) return e;
    if (req_.device)
        for (int l = seg.first; l <= seg.last; l++)
            if (w.need[l] && box_pixels(*w.need[l]) * channels_of(m_, l) >= (int64_t(1) << 31)) return e;
    if (!backward) graded.clear();
    int64_t partials = layer_sum(trainable_bytes_, seg.first, seg.last), grad_windows = 0, window_bytes = 0;
    for (int t : seg.inputs) {
        const int64_t bytes = box_pixels(*w.need[t]) * channels_of(m_, t) * req_.type_bytes;
        if (std::count(graded.begin(), graded.end(), t)) grad_windows += bytes;
        window_bytes += bytes;
    }
    int64_t out_bytes = 0;
    for (const auto &[t, box] : w.targets) out_bytes += box_pixels(box) * channels_of(m_, t) * req_.type_bytes;
    e.plan.first = a;
    e.plan.last = b;
    e.plan.tile = tile;
    e.plan.tiles = (int64_t)(nx * ny);
    const int primary_input = seg.inputs.front();
    e.plan.window_width = w.need[primary_input]->x.hi - w.need[primary_input]->x.lo + 1;
    e.plan.window_height = w.need[primary_input]->y.hi - w.need[primary_input]->y.lo + 1;
    e.plan.forward_bytes = fk;
    // On the CPU the executor sums the partials over tiles with a
    // compensation tensor as large (Kahan's; runtime/host_copies.cpp).
    const int64_t carries = req_.device ? 0 : partials;
    e.plan.backward_bytes = backward ? partials + carries + grad_windows + bk : 0;
    if (req_.device) {
        // Halide copies every input of a call to the device and allocates
        // its outputs there: the segment's parameters, the input windows,
        // the output (forward) or output-gradient (backward) tiles.
        const int64_t params = layer_sum(param_bytes_, seg.first, seg.last);
        e.plan.forward_bytes += params + window_bytes + out_bytes;
        if (backward) e.plan.backward_bytes += params + window_bytes + out_bytes;
    }
    e.plan.kernel_bytes = bk;
    e.plan.exact = use_exact && exact_ && exact_->exact();
    e.bytes = std::max(e.plan.forward_bytes, e.plan.backward_bytes);
    if (req_.mapped_checkpoints) {
        // A row of tiles spans the whole width: forward, it reads its input
        // windows' rows and writes its outputs' rows; backward, it reads the
        // inputs' rows and the outputs' gradient rows and adds into the
        // inputs' gradient rows. The image is the caller's buffer (in memory);
        // its gradient is in the store.
        const int L = (int)m_.layers.size();
        auto rows_of = [&](int t, const Box<int64_t> &box) {
            const int64_t w = t == L ? req_.width : shapes_[t].width, h = t == L ? req_.height : shapes_[t].height;
            return resident_rows(box.y, w, h, channels_of(m_, t), req_.type_bytes);
        };
        int64_t fwd = 0, bwd = 0;
        for (int t : seg.inputs) {
            const int64_t rows = rows_of(t, *w.need[t]);
            if (t != L) {
                fwd += rows;
                bwd += rows;
            }
            if (std::count(graded.begin(), graded.end(), t)) bwd += rows;
        }
        for (const auto &[t, box] : w.targets) {
            const int64_t rows = rows_of(t, box);  // values forward, gradients backward
            fwd += rows;
            bwd += rows;
        }
        if (!backward) bwd = 0;
        e.plan.resident_bytes = std::max(fwd, bwd);
        e.bytes = std::max(e.plan.forward_bytes + fwd, backward ? e.plan.backward_bytes + bwd : 0);
    }

    const SegmentWork work = segment_work(m_, seg, r, whole_, shapes_, backward, req_.image_gradient,
                                          CallTraffic{window_bytes, out_bytes, partials}, req_.type_bytes);
    e.plan.recompute = work.recompute;
    e.plan.flops = work.priced.flops;
    e.plan.elements = work.priced.elements;
    e.plan.moved_bytes = work.priced.moved_bytes;
    e.plan.calls = (int64_t)work.priced.calls;
    e.plan.weight_elements = work.priced.weight_elements;
    e.plan.seconds = predicted_seconds(req_.rates, work.priced);
    e.seconds = e.plan.seconds;
    for (int t : seg.outputs) e.store += 2 * stored_bytes(m_, shapes_, t, req_.type_bytes);
    e.feasible = true;
    return e;
}

SegmentSearch::Eval SegmentSearch::best_tile(int a, int b, int64_t budget, bool use_exact, int64_t *min_bytes,
                                             TileSize *min_tile) {
    const auto key = std::make_tuple(a, b, budget, use_exact);
    auto it = best_cache_.find(key);
    if (it != best_cache_.end() && !min_bytes && !min_tile) return it->second;
    Eval best;
    int64_t smallest = std::numeric_limits<int64_t>::max();
    const TensorShape &out = shapes_[b];
    const int64_t extent = std::max(out.width, out.height);
    std::vector<int64_t> sides;
    for (int64_t t : tile_ladder())
        if (t < extent) sides.push_back(t);
    sides.push_back(0);
    std::vector<TileSize> candidates;
    for (int64_t t : sides) candidates.push_back({t, t});
    // With mapped checkpoints a row of tiles holds its rows' pages across
    // the whole width: strips as wide as the image hold as many pages as
    // squares of their height, with halos above and below only.
    if (req_.mapped_checkpoints)
        for (int64_t t : sides)
            if (t > 0) candidates.push_back({0, t});
    for (const TileSize &tile : candidates) {
        Eval e = evaluate(a, b, tile, use_exact);
        if (!e.feasible) continue;
        if (e.bytes < smallest && min_tile) *min_tile = e.plan.tile;
        smallest = std::min(smallest, e.bytes);
        if (budget > 0 && e.bytes > budget) continue;
        if (e.seconds < best.seconds) best = e;
    }
    if (min_bytes) *min_bytes = smallest;
    best_cache_[key] = best;
    return best;
}

double SegmentSearch::ratio(int a, int b) const {
    auto it = ratios_.find({a, b});
    return it == ratios_.end() ? default_ratio_ : it->second;
}

void SegmentSearch::calibrate(int a, int b, TileSize tile) {
    if (!exact_ || ratios_.count({a, b})) return;
    ratios_[{a, b}] = 1.0;  // analytic as is, for the comparison below
    Eval an = evaluate(a, b, tile, false);
    Eval ex = evaluate(a, b, tile, true);
    if (!ex.feasible) {  // the tile cannot run (above): learn at the segment's smallest
        int64_t bytes = 0;
        TileSize smallest;
        best_tile(a, b, 0, false, &bytes, &smallest);
        an = evaluate(a, b, smallest, false);
        ex = evaluate(a, b, smallest, true);
    }
    const int64_t an_k = an.plan.kernel_bytes, ex_k = ex.plan.kernel_bytes;
    ratios_[{a, b}] = an_k > 0 ? (double)ex_k / (double)an_k : 1.0;
    if (environment::plan_debug())
        std::fprintf(stderr, "calibrate %s..%s tile %lld: analytic %lld exact %lld ratio %.2f\n",
                     m_.layers[a].name.c_str(), m_.layers[b].name.c_str(), (long long)ex.plan.tile.width,
                     (long long)an_k, (long long)ex_k, ratios_[{a, b}]);
    learned(ratios_[{a, b}]);
    best_cache_.clear();
}

void SegmentSearch::calibrate_smallest(int a, int b) {
    int64_t bytes = 0;
    TileSize smallest;
    best_tile(a, b, 0, false, &bytes, &smallest);
    const double before = ratio(a, b);
    ratios_.erase({a, b});
    calibrate(a, b, smallest);
    ratios_[{a, b}] = std::max(before, ratios_[{a, b}]);
    learned(ratios_[{a, b}]);
    best_cache_.clear();
}

// Segments not yet calibrated are scaled by the largest ratio learned so
// far. With the analytic model as is (ratio 1, when the lowered kernels
// need up to ~2x more) they looked cheaper than the calibrated ones, so
// every round picked new ones to lower: ResNet18 at 64^2 lowered kernels
// for over 15 minutes without finishing.
void SegmentSearch::learned(double r) {
    default_ratio_ = any_learned_ ? std::max(default_ratio_, r) : r;
    any_learned_ = true;
}

int64_t SegmentSearch::head_bytes() {
    const SegmentLayout layout = make_segments(m_, {}, req_.image_gradient);
    KernelCall c = head_kernel_call(m_, layout, shapes_, req_.width, req_.height);
    c.threads = req_.threads;
    KernelMemory &km = exact_ ? *exact_ : analytic_;
    int64_t partials = 0;
    for (const auto &[layer, bytes] : trainable_bytes_)
        if (layer > end_) partials += bytes;
    const TensorShape &ps = shapes_[m_.loss.input_id];
    int64_t device = 0;  // on a GPU: the head's parameters, its inputs and their gradients
    if (req_.device) {
        device = layer_sum(param_bytes_, end_ + 1, (int)m_.layers.size() - 1);
        for (int t : layout.head_inputs)
            device += t == (int)m_.layers.size() ? image_bytes() + image_grad_bytes()
                                                 : 2 * stored_bytes(m_, shapes_, t, req_.type_bytes);
        if (m_.loss.kind == LossKind::MeanSquaredError)  // the dense target, the prediction's shape
            device += ps.width * ps.height * ps.channels * req_.type_bytes;
    }
    // Mapped checkpoints: the head reads its inputs whole and writes their
    // gradients whole, all resident during its call.
    int64_t resident = 0;
    if (req_.mapped_checkpoints)
        for (int t : layout.head_inputs)
            resident += t == (int)m_.layers.size() ? image_grad_bytes() : 2 * stored_bytes(m_, shapes_, t, req_.type_bytes);
    return km.peak(layout, KernelKind::Head, 0, c) + partials + ps.width * ps.height * ps.channels * req_.type_bytes +
           device + resident;
}

}  // namespace segtile
