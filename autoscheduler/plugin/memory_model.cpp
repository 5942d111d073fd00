#include "autoscheduler/plugin/memory_model.h"

#include <algorithm>

namespace segtile::plugin {

int64_t root_bytes(const PipelineGraph &graph, int node) {
    const FuncNode &n = graph.node(node);
    if (n.is_output) return 0;
    int64_t bytes = n.bytes_per_point;
    for (int64_t e : n.full) bytes *= e;
    return bytes;
}

std::optional<int64_t> member_tile_bytes(const PipelineGraph &graph, int output, int member, const Extents &tile) {
    std::optional<Extents> extents = graph.tile_extents(output, member, tile);
    if (!extents) return std::nullopt;
    int64_t bytes = graph.node(member).bytes_per_point;
    for (int64_t e : *extents) bytes *= e;
    return bytes;
}

int64_t tile_count(const FuncNode &output, const Extents &tile) {
    int64_t count = 1;
    for (size_t d = 0; d < tile.size(); d++) count *= (output.full[d] + tile[d] - 1) / tile[d];
    return count;
}

int64_t concurrent_tiles(const FuncNode &output, const Extents &tile, int parallelism) {
    return std::min<int64_t>(std::max(1, parallelism), tile_count(output, tile));
}

std::vector<int64_t> live_root_bytes(const PipelineGraph &graph, const Plan &plan) {
    std::vector<int> step_of(graph.size(), -1);
    for (size_t s = 0; s < plan.groups.size(); s++) {
        step_of[plan.groups[s].output] = static_cast<int>(s);
        for (int m : plan.groups[s].members) step_of[m] = static_cast<int>(s);
    }
    std::vector<int64_t> live(plan.groups.size(), 0);
    for (size_t s = 0; s < plan.groups.size(); s++) {
        const int out = plan.groups[s].output;
        int last = static_cast<int>(s);
        for (int c : graph.node(out).consumers) last = std::max(last, step_of[c]);
        const int64_t bytes = root_bytes(graph, out);
        for (int t = static_cast<int>(s); t <= last; t++) live[t] += bytes;
    }
    return live;
}

std::optional<int64_t> group_tile_bytes(const PipelineGraph &graph, const Group &group, const Extents &tile) {
    // Inside a tile, members are allocated in realization order and freed
    // after their last consumer in the tile (Halide's early frees): the same
    // liveness as root allocations, one level down.
    std::vector<int> members = group.members;
    std::sort(members.begin(), members.end());
    std::vector<int64_t> bytes;
    for (int m : members) {
        std::optional<int64_t> b = member_tile_bytes(graph, group.output, m, tile);
        if (!b) return std::nullopt;
        bytes.push_back(*b);
    }
    std::vector<int64_t> live(members.size(), 0);
    for (size_t i = 0; i < members.size(); i++) {
        size_t last = i;
        for (int c : graph.node(members[i]).consumers) {
            auto it = std::lower_bound(members.begin(), members.end(), c);
            if (it != members.end() && *it == c) last = std::max(last, static_cast<size_t>(it - members.begin()));
            else last = members.size() - 1;  // the group output, after every member
        }
        for (size_t t = i; t <= last; t++) live[t] += bytes[i];
    }
    return live.empty() ? 0 : *std::max_element(live.begin(), live.end());
}

MemoryPrediction predict_memory(const PipelineGraph &graph, const Plan &plan, int parallelism) {
    MemoryPrediction p;
    p.root_live = live_root_bytes(graph, plan);
    for (size_t s = 0; s < plan.groups.size(); s++) {
        const Group &g = plan.groups[s];
        const int64_t tile = group_tile_bytes(graph, g, g.tile).value_or(0);
        p.tiles_live.push_back(tile * concurrent_tiles(graph.node(g.output), g.tile, parallelism));
        p.peak = std::max(p.peak, p.root_live[s] + p.tiles_live[s]);
    }
    return p;
}

}  // namespace segtile::plugin
