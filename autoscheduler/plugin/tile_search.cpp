#include "autoscheduler/plugin/tile_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "autoscheduler/plugin/group_regions.h"

namespace segtile::plugin {

namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 4;
// Cost of storing a byte at root and loading it back, and of each Func in
// each tile (a heap allocation, bounds, loop set-up), in the units of
// cost_per_point (IR nodes evaluated).
constexpr double kRootCostPerByte = 0.5;
constexpr double kTileOverheadPerFunc = 1000;

bool fusable_output(const FuncNode &n) {
    return !n.func.has_update_definition() && !n.func.has_extern_definition() && n.func.dimensions() > 0;
}

double points(const Extents &e) {
    double p = 1;
    for (int64_t v : e) p *= static_cast<double>(v);
    return p;
}

// Work of all tiles of a group relative to computing each of its Funcs once.
struct GroupEstimate {
    int64_t tile_bytes = 0;  // peak of members' allocations in one tile
    double work = 0;         // all tiles
    double ideal = 0;        // every Func computed once
};

GroupEstimate estimate_group(const PipelineGraph &graph, const Group &g, const Extents &tile,
                             const MemberExtents &extents) {
    const FuncNode &out = graph.node(g.output);
    GroupEstimate e;
    double per_tile = points(tile) * out.cost_per_point;
    e.ideal = points(out.full) * out.cost_per_point;
    for (const auto &[m, ext] : extents) {
        per_tile += points(ext) * graph.node(m).cost_per_point;
        e.ideal += points(graph.node(m).full) * graph.node(m).cost_per_point;
    }
    e.tile_bytes = tile_live_bytes(graph, g, extents);
    e.work = per_tile * static_cast<double>(tile_count(out, tile));
    return e;
}

double group_time(const PipelineGraph &graph, const Group &g, const Extents &tile, const GroupEstimate &e,
                  const SearchOptions &o) {
    const FuncNode &out = graph.node(g.output);
    const double threads = static_cast<double>(concurrent_tiles(out, tile, o.parallelism));
    const double overhead = kTileOverheadPerFunc * static_cast<double>(g.members.size() + 1);
    double time = (e.work + overhead * static_cast<double>(tile_count(out, tile))) / threads;
    if (e.tile_bytes > o.cache_bytes) time *= 2;  // the tile's working set spills out of cache
    // Tiles narrower than a vector run (mostly) scalar.
    if (tile[0] < out.vector_width) time *= static_cast<double>(out.vector_width) / static_cast<double>(tile[0]);
    return time;
}

struct GroupingBounds {
    double max_recompute;      // R: group work over ideal work
    int64_t max_tile_bytes;    // S: member bytes of the tiles running at once
    int64_t cut_below_bytes;   // C: Funcs this small are stored, not fused
    bool recompute_shared;     // Funcs called from several groups are recomputed in each
};

// Estimates of a group at each tile candidate of its output, computed once
// per (output, members): the grid of greedy passes meets the same groups
// again and again.
class GroupEstimates {
public:
    GroupEstimates(const PipelineGraph &graph, GroupRegionCache &regions) : graph_(graph), regions_(regions) {}

    // Per tile candidate; nullopt where some member's region is unbounded.
    const std::vector<std::optional<GroupEstimate>> &of(const Group &g) {
        std::vector<int> members = g.members;
        std::sort(members.begin(), members.end());
        auto key = std::make_pair(g.output, members);
        auto cached = cache_.find(key);
        if (cached != cache_.end()) return cached->second;
        const std::vector<Extents> &tiles = regions_.tiles(g.output);
        std::vector<std::optional<GroupEstimate>> estimates(tiles.size());
        for (size_t t = 0; t < tiles.size(); t++) {
            std::optional<MemberExtents> extents = regions_.extents(g.output, members, t);
            if (extents) estimates[t] = estimate_group(graph_, g, tiles[t], *extents);
        }
        return cache_[key] = estimates;
    }

    const std::vector<Extents> &tiles(int output) { return regions_.tiles(output); }

private:
    const PipelineGraph &graph_;
    GroupRegionCache &regions_;
    std::map<std::pair<int, std::vector<int>>, std::vector<std::optional<GroupEstimate>>> cache_;
};

// Whether some tile of the group meets the bounds.
bool fits(const PipelineGraph &graph, GroupEstimates &estimates, const Group &g, const SearchOptions &o,
          const GroupingBounds &b) {
    const std::vector<Extents> &tiles = estimates.tiles(g.output);
    const std::vector<std::optional<GroupEstimate>> &e = estimates.of(g);
    for (size_t t = 0; t < tiles.size(); t++) {
        if (!e[t]) continue;
        const int64_t live = e[t]->tile_bytes * concurrent_tiles(graph.node(g.output), tiles[t], o.parallelism);
        if (live <= b.max_tile_bytes && e[t]->work <= b.max_recompute * e[t]->ideal) return true;
    }
    return false;
}

Plan greedy_grouping(const PipelineGraph &graph, GroupEstimates &estimates, const SearchOptions &o,
                     const GroupingBounds &b) {
    std::vector<Group> groups;
    std::vector<std::set<int>> groups_of(graph.size());  // groups computing each node
    for (int i = graph.size() - 1; i >= 0; i--) {
        const FuncNode &n = graph.node(i);
        // Small Funcs are cut even where they could fuse: storing them costs
        // little memory and saves their recomputation in every tile (the
        // coarse levels of a pyramid).
        const bool cut = n.must_be_root || n.consumers.empty() || root_bytes(graph, i) <= b.cut_below_bytes;
        std::set<int> targets;
        for (int c : n.consumers) targets.insert(groups_of[c].begin(), groups_of[c].end());
        bool join = !cut && (targets.size() == 1 || b.recompute_shared);
        for (int g : targets) {
            if (!join) break;
            Group candidate = groups[g];
            candidate.members.push_back(i);
            join = fusable_output(graph.node(candidate.output)) && fits(graph, estimates, candidate, o, b);
        }
        if (join) {
            for (int g : targets) groups[g].members.push_back(i);
            groups_of[i] = targets;
        } else {
            groups_of[i] = {static_cast<int>(groups.size())};
            Group g;
            g.output = i;
            g.tile = n.full;
            groups.push_back(g);
        }
    }
    // Execution order is the realization order of the group outputs.
    std::sort(groups.begin(), groups.end(), [](const Group &a, const Group &c) { return a.output < c.output; });
    for (Group &g : groups) std::sort(g.members.begin(), g.members.end());
    return Plan{groups};
}

// Picks each group's fastest tile that fits the cap. Returns the plan's
// cost, or nullopt if some group fits at no tile; `needed` gets the
// smallest cap this grouping could fit.
std::optional<double> choose_tiles(const PipelineGraph &graph, GroupEstimates &estimates, Plan &plan,
                                   const SearchOptions &o, int64_t cap, int64_t &needed) {
    const std::vector<int64_t> live = live_root_bytes(graph, plan);
    bool feasible = true;
    double cost = 0;
    needed = 0;
    for (size_t s = 0; s < plan.groups.size(); s++) {
        Group &g = plan.groups[s];
        const FuncNode &out = graph.node(g.output);
        cost += kRootCostPerByte * static_cast<double>(root_bytes(graph, g.output));
        if (!fusable_output(out)) {
            // Tile-less root Funcs (reductions, externs, scalars).
            cost += points(out.full) * out.cost_per_point;
            needed = std::max(needed, live[s]);
            if (live[s] > cap) feasible = false;
            continue;
        }
        double best = std::numeric_limits<double>::infinity();
        int64_t least = kUnlimited;
        const std::vector<Extents> &tiles = estimates.tiles(g.output);
        const std::vector<std::optional<GroupEstimate>> &e = estimates.of(g);
        for (size_t t = 0; t < tiles.size(); t++) {
            if (!e[t]) continue;
            const int64_t total = live[s] + e[t]->tile_bytes * concurrent_tiles(out, tiles[t], o.parallelism);
            least = std::min(least, total);
            if (total > cap) continue;
            const double time = group_time(graph, g, tiles[t], *e[t], o);
            if (time < best) {
                best = time;
                g.tile = tiles[t];
            }
        }
        needed = std::max(needed, least);
        if (best == std::numeric_limits<double>::infinity()) feasible = false;
        else cost += best;
    }
    if (!feasible) return std::nullopt;
    return cost;
}

}  // namespace

std::vector<Extents> tile_candidates(const FuncNode &output) {
    const Extents &full = output.full;
    if (full.empty() || !fusable_output(output)) return {full};
    auto sizes = [](int64_t extent) {
        std::vector<int64_t> s;
        for (int64_t p = 1; p < extent; p *= 2) s.push_back(p);
        s.push_back(extent);
        return s;
    };
    std::vector<Extents> result;
    const std::vector<int64_t> xs = sizes(full[0]);
    const std::vector<int64_t> ys = full.size() > 1 ? sizes(full[1]) : std::vector<int64_t>{0};
    for (int64_t x : xs) {
        for (int64_t y : ys) {
            Extents tile = full;
            tile[0] = x;
            if (full.size() > 1) {
                // Squarish tiles, or whole rows / columns.
                const double ratio = std::abs(std::log2(static_cast<double>(x)) - std::log2(static_cast<double>(y)));
                if (ratio > 2 && x != full[0] && y != full[1]) continue;
                tile[1] = y;
            }
            result.push_back(tile);
        }
    }
    return result;
}

SearchResult search_plan(const PipelineGraph &graph, const SearchOptions &o) {
    const int64_t cap = o.memory_cap.value_or(kUnlimited);
    const double recompute_bounds[] = {1.0, 1.25, 1.5, 2, 4, 1e30};
    std::vector<int64_t> tile_bounds = {kUnlimited};
    for (int64_t b = int64_t(1) << 34; b >= 1024; b /= 4) tile_bounds.push_back(b);
    std::vector<int64_t> cut_bounds = {0};
    for (int64_t b = 4096; b <= (int64_t(1) << 24); b *= 4) cut_bounds.push_back(b);

    GroupRegionCache regions(graph, &tile_candidates);
    GroupEstimates estimates(graph, regions);
    std::optional<SearchResult> best;
    int64_t smallest_cap = kUnlimited;
    std::set<std::vector<std::vector<int>>> seen;  // groupings already costed
    for (bool shared : {false, true}) {
        for (double r : recompute_bounds) {
            for (int64_t s : tile_bounds) {
                for (int64_t c : cut_bounds) {
                    Plan plan = greedy_grouping(graph, estimates, o, {r, s, c, shared});
                    std::vector<std::vector<int>> key;
                    for (const Group &g : plan.groups) {
                        key.push_back(g.members);
                        key.back().push_back(g.output);
                    }
                    if (!seen.insert(key).second) continue;
                    int64_t needed = 0;
                    std::optional<double> cost = choose_tiles(graph, estimates, plan, o, cap, needed);
                    smallest_cap = std::min(smallest_cap, needed);
                    if (cost && (!best || *cost < best->cost)) best = SearchResult{plan, {}, *cost};
                }
            }
        }
    }
    if (!best) {
        std::ostringstream msg;
        msg << "Segtile: no schedule fits memory_cap=" << cap << " bytes; the smallest feasible memory_cap for this "
            << "pipeline at its estimates and parallelism=" << o.parallelism << " is " << smallest_cap
            << " bytes. Raise autoscheduler.memory_cap to at least that, lower parallelism, or shrink the estimates.";
        throw Halide::CompileError(msg.str());
    }
    best->memory = predict_memory(graph, best->plan, o.parallelism);
    return *best;
}

}  // namespace segtile::plugin
