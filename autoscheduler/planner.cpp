#include "autoscheduler/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "spec/cost.h"
#include "spec/environment.h"
#include "runtime/memory_ledger.h"
#include "spec/tiling.h"

namespace segtile {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Halide's thread pool allocates beyond what the lowered code shows when
// tasks run concurrently (measured up to ~4% of a kernel's peak here with
// 2 threads, none with 1): plans keep this margin on the plan-dependent part.
constexpr double kMargin = 1.06;

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

// Whether a layer's backward reads its input's values, not only its
// output gradient: a weight gradient does, and so do nonlinearities and
// max pools; sums, averages and copies do not.
bool backward_reads_input(const Layer &l) {
    switch (l.kind) {
    case LayerKind::AvgPool:
    case LayerKind::Upsample:
    case LayerKind::Concat:
    case LayerKind::Add:
    case LayerKind::GlobalAvgPool:
    case LayerKind::Flatten: return false;
    default: return true;
    }
}

// Per layer of segment first..last, whether its backward kernel computes
// the layer's forward again: Halide computes only what the gradients read,
// so a layer is recomputed when its output is read by a backward that
// reads its input, by a recomputed layer, or by the loss. A segment that
// ends with a conv (cut before the activation) does not recompute that
// conv: its output gradient comes in, and its weight gradient reads its
// input. Counting every layer twice, the planner saw no difference between
// cuts and ran VGG16 at 1024^2 under a 1/8 cap at 1.33x the untiled FLOPs.
std::vector<bool> recomputed_layers(const Model &m, int first, int last) {
    std::vector<bool> r(m.layers.size(), false);
    for (int j = last; j >= first; j--) {  // a layer's consumers come after it
        if (j == m.loss.input_id) r[j] = true;
        for (int i : m.layers[j].input_ids)
            if (i >= first && (r[j] || backward_reads_input(m.layers[j]))) r[i] = true;
    }
    return r;
}

int64_t channels_of(const Model &m, int t) { return t == (int)m.layers.size() ? m.input_channels : m.layers[t].channels; }

// The planner's state for one request: shapes and per-segment evaluations.
class Search {
public:
    Search(const Model &m, const PlanRequest &req, KernelMemory *exact)
        : m_(m), req_(req), exact_(exact), analytic_(m, req.type_bytes), shapes_(m.shapes(req.width, req.height)),
          whole_(whole_boxes(m, shapes_, req.width, req.height)), end_(trunk_end(m)) {
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

    struct Eval {
        bool feasible = false;
        SegmentPlan plan;
        double seconds = kInfinity;
        int64_t store = 0;   // checkpoint bytes this segment's outputs add (values and gradients)
        int64_t bytes = 0;   // max(forward, backward) working bytes of a call
    };

    // Segment a..b at one tile size.
    Eval evaluate(int a, int b, TileSize tile, bool use_exact) {
        Eval e;
        auto [layout, s] = single_segment(m_, a, b, req_.image_gradient);
        const SegmentSpec &seg = layout.segments[s];
        // On the CPU a kernel reads and writes its windows in place in the
        // checkpoints, and Halide refuses a buffer whose span along one
        // dimension reaches 2^31 elements: no window of a checkpoint that
        // large can be passed (Darknet19 cut at conv2 at 16384^2, 64 x
        // 8192^2 elements, failed its first call). On the device windows
        // are dense copies.
        if (!req_.device) {
            const int L = (int)m_.layers.size();
            for (const auto *list : {&seg.inputs, &seg.outputs})
                for (int t : *list) {
                    const int64_t pixels = t == L ? req_.width * req_.height : shapes_[t].width * shapes_[t].height;
                    if (pixels * channels_of(m_, t) >= (int64_t(1) << 31)) return e;
                }
        }
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
        auto peak = [&](KernelKind kind, const TileWindows &c) -> int64_t {
            if (!exact) return (int64_t)(scale * (double)analytic_.peak(seg, kind, c));
            KernelCall call = tile_kernel_call(m_, layout, kind, s, c, shapes_, req_.width, req_.height);
            call.threads = req_.threads;
            return exact->peak(layout, kind, s, call);
        };
        // The largest call: edge tiles are clipped by the image and partial
        // tiles are smaller, so the worst is among the first, second and last
        // tile along each axis (fewer where there are fewer tiles).
        const std::set<size_t> xs{0, std::min<size_t>(1, nx - 1), nx - 1}, ys{0, std::min<size_t>(1, ny - 1), ny - 1};
        int64_t fk = 0, bk = 0, worst_windows = -1;
        TileWindows w;
        for (size_t tx : xs)
            for (size_t ty : ys) {
                TileWindows c = tile_windows(m_, seg, r, tx, ty, whole_);
                const int64_t f_here = peak(KernelKind::Forward, c);
                if (!backward && f_here >= fk) w = c;
                fk = std::max(fk, f_here);
                if (!backward) continue;
                const int64_t b_here = peak(KernelKind::Backward, c);
                int64_t windows = 0;
                for (int t : graded) windows += box_pixels(*c.need[t]) * channels_of(m_, t);
                if (b_here + windows * req_.type_bytes > bk + std::max<int64_t>(worst_windows, 0) * req_.type_bytes) {
                    bk = b_here;
                    worst_windows = windows;
                    w = c;
                }
            }
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
        // compensation tensor as large (Kahan's; runtime/executor.cpp).
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

        // FLOPs over every tile: windows are separable (x from x, y from y),
        // so per layer the sum over tiles is (sum of widths) x (sum of heights).
        const int L = (int)m_.layers.size();
        std::vector<double> sum_w(L + 1, 0), sum_h(L + 1, 0);
        for (size_t tx = 0; tx < nx; tx++) {
            const TileWindows c = tile_windows(m_, seg, r, tx, 0, whole_);
            for (int l = seg.first; l <= seg.last; l++)
                if (c.need[l]) sum_w[l] += (double)(c.need[l]->x.hi - c.need[l]->x.lo + 1);
        }
        for (size_t ty = 0; ty < ny; ty++) {
            const TileWindows c = tile_windows(m_, seg, r, 0, ty, whole_);
            for (int l = seg.first; l <= seg.last; l++)
                if (c.need[l]) sum_h[l] += (double)(c.need[l]->y.hi - c.need[l]->y.lo + 1);
        }
        double executed = 0, untiled = 0, elements = 0;
        const std::vector<bool> again = recomputed_layers(m_, seg.first, seg.last);
        for (int l = seg.first; l <= seg.last; l++) {
            // Per pixel costs from a 1x1 evaluation scale linearly with area.
            LayerFlops one = layer_flops(m_, l, 1, 1);
            LayerTraffic traffic = layer_traffic(m_, l, 1, 1);
            // A layer reading the image computes its input gradient only
            // for kernels built with it: priced anyway, a first segment's
            // backward (conv 3x3 64->64) was predicted 4/3 of the time it
            // took, and the calibration fitted a FLOP rate above the peak.
            if (reads_image(m_, l) && !req_.image_gradient) {
                traffic.backward -= traffic.forward - m_.layers[l].channels;  // the input's gradient, not written
                one.input_grad = 0;
            }
            const double px = sum_w[l] * sum_h[l], forwards = again[l] && backward ? 2 : 1;
            executed += px * (forwards * one.forward + (backward ? one.backward() : 0));
            elements += px * (forwards * traffic.forward + (backward ? traffic.backward : 0));
            // Untiled training skips such a backward too.
            untiled += (double)shapes_[l].width * shapes_[l].height * (backward ? one.total() : one.forward);
        }
        e.plan.recompute = untiled > 0 ? executed / untiled : 1;
        const double tiles = (double)(nx * ny);
        // Forward: windows read, tiles written; backward: windows read again,
        // gradient windows written and added, output gradients read, partials added.
        const double moved = tiles * (window_bytes + out_bytes) +
                             (backward ? tiles * (2.0 * window_bytes + out_bytes + 2.0 * partials) : 0);
        e.plan.flops = executed;
        e.plan.elements = elements;
        e.plan.moved_bytes = moved;
        e.plan.calls = (int64_t)((backward ? 2 : 1) * tiles);
        e.plan.weight_elements = backward ? tiles * (double)partials / req_.type_bytes : 0;
        e.plan.seconds = executed / req_.rates.flops_per_second + elements / req_.rates.elements_per_second +
                         moved / req_.rates.bytes_per_second + (double)e.plan.calls * req_.rates.seconds_per_tile +
                         e.plan.weight_elements / req_.rates.weights_per_second;
        e.seconds = e.plan.seconds;
        for (int t : seg.outputs) e.store += 2 * stored_bytes(m_, shapes_, t, req_.type_bytes);
        e.feasible = true;
        return e;
    }

    // The fastest tile for segment a..b whose calls fit `budget` bytes
    // (0: no budget); infeasible if none does. Also records the smallest
    // memory any tile needs in `min_bytes`.
    Eval best_tile(int a, int b, int64_t budget, bool use_exact, int64_t *min_bytes = nullptr,
                   TileSize *min_tile = nullptr) {
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
        for (int64_t t : sides) {
            Eval e = evaluate(a, b, TileSize{t, t}, use_exact);
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

    bool calibrated(int a, int b) const { return ratios_.count({a, b}) > 0; }

    double ratio(int a, int b) const {
        auto it = ratios_.find({a, b});
        return it == ratios_.end() ? default_ratio_ : it->second;
    }

    // Learns exact/analytic for a segment at its chosen tile.
    void calibrate(int a, int b, TileSize tile) {
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

    // Learns exact/analytic again at the segment's smallest tile, keeping
    // the larger of that and the ratio learned before.
    void calibrate_smallest(int a, int b) {
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

    int64_t fixed() const { return fixed_; }
    int64_t reserve() const { return reserve_; }
    // What every call's working memory sits on: the fixed part and the reserve.
    int64_t held() const { return fixed_ + reserve_; }
    int64_t head() const { return head_; }
    int end() const { return end_; }
    const std::vector<TensorShape> &shapes() const { return shapes_; }

    int64_t image_bytes() const { return req_.width * req_.height * m_.input_channels * req_.type_bytes; }
    // The image's gradient in the store, where the request asks for it.
    int64_t image_grad_bytes() const { return req_.image_gradient ? image_bytes() : 0; }

private:
    // Segments not yet calibrated are scaled by the largest ratio learned so
    // far. With the analytic model as is (ratio 1, when the lowered kernels
    // need up to ~2x more) they looked cheaper than the calibrated ones, so
    // every round picked new ones to lower: ResNet18 at 64^2 lowered kernels
    // for over 15 minutes without finishing.
    void learned(double r) {
        default_ratio_ = any_learned_ ? std::max(default_ratio_, r) : r;
        any_learned_ = true;
    }

    int64_t head_bytes() {
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
        return km.peak(layout, KernelKind::Head, 0, c) + partials + ps.width * ps.height * ps.channels * req_.type_bytes +
               device;
    }

    static int64_t layer_sum(const std::map<int, int64_t> &per_layer, int first, int last) {
        int64_t b = 0;
        for (auto it = per_layer.lower_bound(first); it != per_layer.end() && it->first <= last; ++it) b += it->second;
        return b;
    }

    const Model &m_;
    PlanRequest req_;
    KernelMemory *exact_;
    AnalyticKernelMemory analytic_;
    std::vector<TensorShape> shapes_;
    std::vector<Box<int64_t>> whole_;
    int end_;
    int64_t fixed_ = 0, reserve_ = 0, head_ = 0;
    std::map<int, int64_t> trainable_bytes_;  // per layer
    std::map<int, int64_t> param_bytes_;      // per layer, every parameter (device plans only)
    std::map<std::pair<int, int>, double> ratios_;
    double default_ratio_ = 1.0;
    bool any_learned_ = false;
    std::map<std::tuple<int, int, int64_t, bool>, Eval> best_cache_;
};

struct Choice {
    double seconds = kInfinity;
    std::vector<Search::Eval> segments;
    int64_t store = 0;
};

// The DP over cut positions: best[b] is the fastest split of layers 0..b
// into feasible segments. With a checkpoint cap, each position keeps its
// Pareto front of (seconds, store) instead of one best.
Choice search_cuts(Search &s, const PlanRequest &req, int64_t budget, bool use_exact) {
    const int E = s.end();
    struct Partial {
        double seconds;
        int64_t store;
        std::vector<Search::Eval> segs;
    };
    std::vector<std::vector<Partial>> front(E + 1);
    for (int b = 0; b <= E; b++) {
        std::vector<Partial> cand;
        for (int a = 0; a <= b; a++) {
            Search::Eval e = s.best_tile(a, b, budget, use_exact);
            if (!e.feasible) continue;
            if (a == 0) {
                cand.push_back({e.seconds, e.store, {e}});
                continue;
            }
            for (const auto &p : front[a - 1]) {
                Partial q{p.seconds + e.seconds, p.store + e.store, p.segs};
                q.segs.push_back(e);
                cand.push_back(std::move(q));
            }
        }
        // Keep the Pareto front (or the single best without a store cap).
        std::sort(cand.begin(), cand.end(), [](const Partial &x, const Partial &y) {
            return x.seconds != y.seconds ? x.seconds < y.seconds : x.store < y.store;
        });
        int64_t best_store = std::numeric_limits<int64_t>::max();
        for (auto &c : cand) {
            if (req.checkpoint_cap > 0 && c.store + s.image_grad_bytes() > req.checkpoint_cap) continue;
            if (c.store >= best_store) continue;
            best_store = c.store;
            front[b].push_back(std::move(c));
            if (req.checkpoint_cap <= 0) break;
        }
    }
    Choice best;
    for (auto &p : front[E])
        if (p.seconds < best.seconds) best = {p.seconds, p.segs, p.store};
    return best;
}

Plan to_plan(const Model &m, const PlanRequest &req, Search &s, const Choice &c) {
    Plan p;
    p.model = m.name;
    p.width = req.width;
    p.height = req.height;
    p.batch = req.batch;
    p.memory_cap = req.memory_cap;
    p.checkpoint_cap = req.checkpoint_cap;
    p.device = req.device;
    p.image_gradient = req.image_gradient;
    p.fixed_bytes = s.fixed();
    p.reserve_bytes = s.reserve();
    p.head_bytes = s.head();
    int64_t worst = s.head();
    double seconds = 0, flops = 0;
    for (const auto &e : c.segments) {
        p.segments.push_back(e.plan);
        if (e.plan.last < s.end()) {
            p.cuts.push_back(e.plan.last);
            p.cut_names.push_back(m.layers[e.plan.last].name);
        }
        worst = std::max(worst, e.bytes);
        seconds += e.plan.seconds;
        flops += e.plan.flops;  // executed, halo recomputation included
    }
    p.peak_bytes = s.held() + worst;
    p.checkpoint_bytes = c.store + s.image_grad_bytes();
    const double step = training_step_flops(m, req.width, req.height);
    // The head runs untiled: its FLOPs once.
    double head = 0, head_elements = 0;
    for (int l = s.end() + 1; l < (int)m.layers.size(); l++) {
        const TensorShape &out = s.shapes()[l];
        head += layer_flops(m, l, out.width, out.height).total();
        const LayerTraffic t = layer_traffic(m, l, out.width, out.height);
        head_elements += t.forward + t.backward;
    }
    flops += head;
    p.flops = flops * req.batch;
    p.recompute = step > 0 ? flops / step : 1;
    p.seconds = (seconds + head / req.rates.flops_per_second + head_elements / req.rates.elements_per_second) *
                req.batch;
    return p;
}

// Given segments (first, last layer), the fastest tile of each under the
// budget; infinite time if one has none.
Choice fastest_tiles(Search &s, const std::vector<std::pair<int, int>> &spans, int64_t budget, bool use_exact) {
    Choice c;
    c.seconds = 0;
    for (const auto &[a, b] : spans) {
        Search::Eval e = s.best_tile(a, b, budget, use_exact);
        if (!e.feasible) {
            c.seconds = kInfinity;
            break;
        }
        c.seconds += e.seconds;
        c.store += e.store;
        c.segments.push_back(e);
    }
    return c;
}

// The split whose largest segment needs the least working memory
// (bottleneck DP over cut positions), and that memory.
struct SmallestSplit {
    int64_t bytes = 0;
    std::vector<std::pair<int, int>> spans;
    std::vector<TileSize> tiles;  // each span's smallest tile
};

SmallestSplit smallest_split(Search &s, bool use_exact) {
    const int E = s.end();
    std::vector<int64_t> best(E + 1, std::numeric_limits<int64_t>::max());
    std::vector<int> from(E + 1, 0);
    std::vector<TileSize> tile(E + 1);
    for (int b = 0; b <= E; b++)
        for (int a = 0; a <= b; a++) {
            int64_t mb = std::numeric_limits<int64_t>::max();
            TileSize t;
            s.best_tile(a, b, 0, use_exact, &mb, &t);
            const int64_t prev = a == 0 ? 0 : best[a - 1];
            if (prev == std::numeric_limits<int64_t>::max()) continue;
            if (std::max(prev, mb) < best[b]) {
                best[b] = std::max(prev, mb);
                from[b] = a;
                tile[b] = t;
            }
        }
    SmallestSplit r;
    r.bytes = best[E];
    for (int b = E; b >= 0; b = from[b] - 1) {
        r.spans.insert(r.spans.begin(), {from[b], b});
        r.tiles.insert(r.tiles.begin(), tile[b]);
    }
    return r;
}

// The smallest working-memory cap any plan fits, for the error message
// when a cap is too small. With the exact model, as make_plan: the search
// runs on the analytic model scaled by what the exact model said of each
// segment picked so far, and the picks' own exact minimum is the answer.
// Searching on the exact model itself lowered every one of the (layers^2)/2
// candidate segments: VGG16 at 256^2 under a cap below its parameters took
// more than 15 minutes to say so.
SmallestSplit smallest_fitting_split(Search &s, bool exact) {
    SmallestSplit m = smallest_split(s, false);
    if (exact) {
        for (int round = 0; round < 8; round++) {
            bool all = true;
            for (size_t k = 0; k < m.spans.size(); k++)
                if (!s.calibrated(m.spans[k].first, m.spans[k].second)) {
                    s.calibrate(m.spans[k].first, m.spans[k].second, m.tiles[k]);
                    all = false;
                }
            if (all) break;
            m = smallest_split(s, false);
        }
        m.bytes = 0;
        for (const auto &[a, b] : m.spans) {
            int64_t mb = 0;
            s.best_tile(a, b, 0, true, &mb);
            m.bytes = std::max(m.bytes, mb);
        }
    }
    return m;
}

// The (first, last) layers of each segment a choice picked.
std::vector<std::pair<int, int>> spans_of(const Choice &c) {
    std::vector<std::pair<int, int>> spans;
    for (const auto &e : c.segments) spans.push_back({e.plan.first, e.plan.last});
    return spans;
}

int64_t cap_for(Search &s, int64_t bytes) {
    return s.held() + (int64_t)std::ceil(kMargin * (double)std::max(s.head(), bytes)) + 1;
}

}  // namespace

int64_t AnalyticKernelMemory::peak(const SegmentLayout &layout, KernelKind kind, int segment, const KernelCall &call) {
    // Each layer's output over the window the call computes, once forward
    // and (backward) once more for its adjoint; the head: whole tensors.
    if (kind == KernelKind::Head) {
        // Every buffer of the call, twice (values and adjoints): the head
        // reads small, globally pooled tensors.
        int64_t bytes = 0;
        for (const auto &[name, dims] : call.buffers) {
            int64_t n = 1;
            for (const auto &d : dims) n *= d.second;
            bytes += n * type_bytes_;
        }
        return 2 * bytes;
    }
    const SegmentSpec &seg = layout.segments.at(segment);
    const auto shapes = model_.shapes_unchecked(call.scalars.at("image_width"), call.scalars.at("image_height"));
    TileWindows w;
    for (int o : seg.outputs) {
        const std::string p = "tile_" + tensor_name(model_, o) + "_";
        w.targets.push_back({o, {{call.scalars.at(p + "x_min"), call.scalars.at(p + "x_max")},
                                 {call.scalars.at(p + "y_min"), call.scalars.at(p + "y_max")}}});
    }
    const auto whole = whole_boxes(model_, shapes, call.scalars.at("image_width"), call.scalars.at("image_height"));
    w.need = required_boxes<int64_t, IntOps>(model_, seg.first, seg.last, w.targets, whole);
    return peak(seg, kind, w);
}

int64_t AnalyticKernelMemory::peak(const SegmentSpec &seg, KernelKind kind, const TileWindows &w) const {
    int64_t bytes = 0;
    for (int l = seg.first; l <= seg.last; l++)
        if (w.need.at(l)) bytes += box_pixels(*w.need[l]) * model_.layers[l].channels * type_bytes_;
    return kind == KernelKind::Backward ? 2 * bytes : bytes;
}

Plan make_plan(const Model &m, const PlanRequest &req, KernelMemory *exact) {
    if (req.width <= 0 || req.height <= 0) throw ModelError("plan: give the image size (width and height > 0)");
    Search s(m, req, exact);
    const int64_t budget = req.memory_cap > 0 ? (int64_t)((double)(req.memory_cap - s.held()) / kMargin) : 0;
    // The smallest split, searched once: the fallback below and the error
    // message both use it (each search may lower kernels). On a search of
    // its own, so that it depends on the model and request only, not on
    // what the cap's search calibrated first: a cap set to the cap it names
    // then finds the same split and runs it (with the cap's search state it
    // named 272.6 MiB for VGG16 at 64^2, then found a split needing a few
    // KiB more when asked for 272.6 MiB: long MeasuredPeak).
    std::optional<SmallestSplit> smallest_split_once;
    std::optional<Search> smallest_search;
    auto smallest_fitting = [&]() -> const SmallestSplit & {
        if (!smallest_split_once) {
            smallest_search.emplace(m, req, exact);
            smallest_split_once = smallest_fitting_split(*smallest_search, exact != nullptr);
        }
        return *smallest_split_once;
    };
    auto fail = [&](const std::string &why) -> PlanError {
        const int64_t smallest = cap_for(s, smallest_fitting().bytes);
        return PlanError("no plan for " + m.name + " at " + std::to_string(req.width) + "x" +
                             std::to_string(req.height) + " fits a " + (req.device ? "device" : "working") +
                             "-memory cap of " +
                             format_bytes(req.memory_cap) + " (" + why + "); the smallest feasible cap found is " +
                             format_bytes(smallest) + ": raise --memory-cap to at least that",
                         smallest);
    };
    if (req.memory_cap > 0 && (budget <= 0 || s.head() > budget))
        throw fail(req.device ? "the untiled head takes " + format_bytes(s.head()) + " on the device"
                              : "parameters, gradients and optimizer state take " + format_bytes(s.fixed()) +
                                    ", the runtime's reserve " + format_bytes(s.reserve()) +
                                    ", the untiled head " + format_bytes(s.head()));

    Choice c;
    if (!req.allowed_cuts.empty()) {
        for (const auto &cuts : req.allowed_cuts) {
            std::vector<std::pair<int, int>> spans;
            for (const auto &seg : make_segments(m, cuts).segments) spans.push_back({seg.first, seg.last});
            const Choice k = fastest_tiles(s, spans, budget, exact != nullptr);
            if (req.checkpoint_cap > 0 && k.store + s.image_grad_bytes() > req.checkpoint_cap) continue;
            if (k.seconds < c.seconds) c = k;
        }
    } else {
        // Search on the analytic model scaled by what the exact model said
        // of each segment picked so far, until the picks are all calibrated.
        bool exact_tiles = false;
        for (int round = 0; round < 12; round++) {
            c = search_cuts(s, req, budget, false);
            if (!exact || c.seconds == kInfinity) break;
            bool all = true;
            for (const auto &e : c.segments)
                if (!s.calibrated(e.plan.first, e.plan.last)) {
                    s.calibrate(e.plan.first, e.plan.last, e.plan.tile);
                    all = false;
                }
            if (!all) continue;
            // Final tiles from the exact model itself. A segment it fits at
            // no tile had its ratio learned at a larger tile (the schedule's
            // fixed-size buffers do not shrink with the tile): learn it at
            // the segment's smallest tile too and search again. (VGG16 at
            // 64^2 under half its untiled peak failed here before, though
            // another split fitted.)
            const auto spans = spans_of(c);
            const Choice k = fastest_tiles(s, spans, budget, true);
            if (k.seconds < kInfinity) {
                c = k;
                exact_tiles = true;
                break;
            }
            for (const auto &[a, b] : spans)
                if (!s.best_tile(a, b, budget, true).feasible) s.calibrate_smallest(a, b);
            c = Choice();  // infeasible unless a later round finds a split
        }
        // Out of rounds with a split the exact model has not sized: its tiles.
        if (exact && !exact_tiles && c.seconds < kInfinity) c = fastest_tiles(s, spans_of(c), budget, true);
        // Still none: the split the error message would name fits if the
        // cap is at least what it names; run that one (it fits, though it
        // may not be the fastest that does).
        if (exact && c.seconds == kInfinity) {
            const SmallestSplit &m = smallest_fitting();
            if (cap_for(s, m.bytes) <= req.memory_cap) c = fastest_tiles(s, m.spans, budget, true);
        }
    }
    // The margin named: a cap equal to a plan's predicted peak (the
    // untiled one's, say) leaves no room for it and is refused.
    if (c.seconds == kInfinity)
        throw fail("even the smallest tiles of every split exceed it, with the " +
                   std::to_string((int)std::lround((kMargin - 1) * 100)) +
                   "% margin plans keep on their own memory for Halide's runtime");
    return to_plan(m, req, s, c);
}

Plan evaluate_plan(const Model &m, const PlanRequest &req, const std::vector<int> &cuts,
                   const std::vector<TileSize> &tiles, KernelMemory *exact) {
    Search s(m, req, exact);
    SegmentLayout layout = make_segments(m, cuts);
    if (tiles.size() != layout.segments.size())
        throw ModelError("plan: " + std::to_string(layout.segments.size()) + " segments but " +
                         std::to_string(tiles.size()) + " tile sizes");
    Choice c;
    c.seconds = 0;
    for (size_t k = 0; k < tiles.size(); k++) {
        Search::Eval e = s.evaluate(layout.segments[k].first, layout.segments[k].last, tiles[k], exact != nullptr);
        if (!e.feasible) throw ModelError("plan: tile " + std::to_string(tiles[k].width) + " is not valid for segment " + std::to_string(k));
        c.seconds += e.seconds;
        c.store += e.store;
        c.segments.push_back(e);
    }
    return to_plan(m, req, s, c);
}

}  // namespace segtile
