#include "autoscheduler/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "autoscheduler/segment_search.h"
#include "spec/cost.h"
#include "runtime/memory_ledger.h"

namespace segtile {

namespace {

// Halide's thread pool allocates beyond what the lowered code shows when
// tasks run concurrently (measured up to ~4% of a kernel's peak here with
// 2 threads, none with 1): plans keep this margin on the plan-dependent part.
constexpr double kMargin = 1.06;

struct Choice {
    double seconds = kInfinity;
    std::vector<SegmentSearch::Eval> segments;
    int64_t store = 0;
};

// The DP over cut positions: best[b] is the fastest split of layers 0..b
// into feasible segments. With a checkpoint cap, each position keeps its
// Pareto front of (seconds, store) instead of one best.
Choice search_cuts(SegmentSearch &s, const PlanRequest &req, int64_t budget, bool use_exact) {
    const int E = s.end();
    struct Partial {
        double seconds;
        int64_t store;
        std::vector<SegmentSearch::Eval> segs;
    };
    std::vector<std::vector<Partial>> front(E + 1);
    for (int b = 0; b <= E; b++) {
        std::vector<Partial> cand;
        for (int a = 0; a <= b; a++) {
            SegmentSearch::Eval e = s.best_tile(a, b, budget, use_exact);
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

Plan to_plan(const Model &m, const PlanRequest &req, SegmentSearch &s, const Choice &c) {
    Plan p;
    p.model = m.name;
    p.width = req.width;
    p.height = req.height;
    p.batch = req.batch;
    p.memory_cap = req.memory_cap;
    p.checkpoint_cap = req.checkpoint_cap;
    p.device = req.device;
    p.image_gradient = req.image_gradient;
    p.mapped_checkpoints = s.mapped();
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
    const TimeSample head_sample = head_work(m, s.end(), s.shapes());
    const double head = head_sample.flops, head_elements = head_sample.elements;
    flops += head;
    p.flops = flops * req.batch;
    p.recompute = step > 0 ? flops / step : 1;
    p.seconds = (seconds + head / req.rates.flops_per_second + head_elements / req.rates.elements_per_second) *
                req.batch;
    return p;
}

// Given segments (first, last layer), the fastest tile of each under the
// budget; infinite time if one has none.
Choice fastest_tiles(SegmentSearch &s, const std::vector<std::pair<int, int>> &spans, int64_t budget, bool use_exact) {
    Choice c;
    c.seconds = 0;
    for (const auto &[a, b] : spans) {
        SegmentSearch::Eval e = s.best_tile(a, b, budget, use_exact);
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

SmallestSplit smallest_split(SegmentSearch &s, bool use_exact) {
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
SmallestSplit smallest_fitting_split(SegmentSearch &s, bool exact) {
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

int64_t cap_for(SegmentSearch &s, int64_t bytes) {
    return s.held() + (int64_t)std::ceil(kMargin * (double)std::max(s.head(), bytes)) + 1;
}

}  // namespace

Plan make_plan(const Model &m, const PlanRequest &req, KernelMemory *exact) {
    if (req.width <= 0 || req.height <= 0) throw ModelError("plan: give the image size (width and height > 0)");
    SegmentSearch s(m, req, exact);
    const int64_t budget = req.memory_cap > 0 ? (int64_t)((double)(req.memory_cap - s.held()) / kMargin) : 0;
    // The smallest split, searched once: the fallback below and the error
    // message both use it (each search may lower kernels). On a search of
    // its own, so that it depends on the model and request only, not on
    // what the cap's search calibrated first: a cap set to the cap it names
    // then finds the same split and runs it (with the cap's search state it
    // named 272.6 MiB for VGG16 at 64^2, then found a split needing a few
    // KiB more when asked for 272.6 MiB: long MeasuredPeak).
    std::optional<SmallestSplit> smallest_split_once;
    std::optional<SegmentSearch> smallest_search;
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
                             std::to_string(req.height) + " fits a " +
                             (req.device                 ? "device-memory cap of "
                              : req.mapped_checkpoints ? "cap of working memory and resident checkpoint pages of "
                                                       : "working-memory cap of ") +
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
    SegmentSearch s(m, req, exact);
    SegmentLayout layout = make_segments(m, cuts);
    if (tiles.size() != layout.segments.size())
        throw ModelError("plan: " + std::to_string(layout.segments.size()) + " segments but " +
                         std::to_string(tiles.size()) + " tile sizes");
    Choice c;
    c.seconds = 0;
    for (size_t k = 0; k < tiles.size(); k++) {
        SegmentSearch::Eval e = s.evaluate(layout.segments[k].first, layout.segments[k].last, tiles[k], exact != nullptr);
        if (!e.feasible) throw ModelError("plan: tile " + std::to_string(tiles[k].width) + " is not valid for segment " + std::to_string(k));
        c.seconds += e.seconds;
        c.store += e.store;
        c.segments.push_back(e);
    }
    return to_plan(m, req, s, c);
}

}  // namespace segtile
