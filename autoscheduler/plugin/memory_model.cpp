#include "autoscheduler/plugin/memory_model.h"

#include <algorithm>

#include "autoscheduler/plugin/group_regions.h"

namespace segtile::plugin {

int64_t region_bytes(const FuncNode &node, const Extents &extents) {
    int64_t bytes = node.bytes_per_point;
    for (int64_t e : extents) bytes *= e;
    return bytes;
}

int64_t root_bytes(const PipelineGraph &graph, int node) {
    const FuncNode &n = graph.node(node);
    return n.is_output ? 0 : region_bytes(n, n.full);
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
    std::vector<int> last_step(graph.size(), -1);  // last group that computes each node
    for (size_t s = 0; s < plan.groups.size(); s++) {
        last_step[plan.groups[s].output] = static_cast<int>(s);
        for (int m : plan.groups[s].members) last_step[m] = static_cast<int>(s);
    }
    std::vector<int64_t> live(plan.groups.size(), 0);
    for (size_t s = 0; s < plan.groups.size(); s++) {
        const int out = plan.groups[s].output;
        int last = static_cast<int>(s);
        for (int c : graph.node(out).consumers) last = std::max(last, last_step[c]);
        const int64_t bytes = root_bytes(graph, out);
        for (int t = static_cast<int>(s); t <= last; t++) live[t] += bytes;
    }
    return live;
}

int64_t tile_live_bytes(const PipelineGraph &graph, const Group &group, const std::map<int, Extents> &extents) {
    // Members are allocated in realization order and freed after their last
    // caller in the tile: the liveness of root allocations, one level down.
    std::vector<int> members = group.members;
    std::sort(members.begin(), members.end());
    std::vector<int64_t> live(members.size(), 0);
    for (size_t i = 0; i < members.size(); i++) {
        size_t last = i;
        for (int c : graph.node(members[i]).consumers) {
            auto it = std::lower_bound(members.begin(), members.end(), c);
            if (it != members.end() && *it == c) last = std::max(last, static_cast<size_t>(it - members.begin()));
            else if (c == group.output) last = members.size() - 1;
        }
        const int64_t bytes = region_bytes(graph.node(members[i]), extents.at(members[i]));
        for (size_t t = i; t <= last; t++) live[t] += bytes;
    }
    return live.empty() ? 0 : *std::max_element(live.begin(), live.end());
}

MemoryPrediction predict_memory(const PipelineGraph &graph, const Plan &plan, int parallelism) {
    MemoryPrediction p;
    p.root_live = live_root_bytes(graph, plan);
    for (size_t s = 0; s < plan.groups.size(); s++) {
        const Group &g = plan.groups[s];
        std::optional<MemberExtents> extents = member_extents(graph, g, g.tile);
        const int64_t tile = extents ? tile_live_bytes(graph, g, *extents) : 0;
        p.tiles_live.push_back(tile * concurrent_tiles(graph.node(g.output), g.tile, parallelism));
        p.peak = std::max(p.peak, p.root_live[s] + p.tiles_live[s]);
    }
    return p;
}

}  // namespace segtile::plugin
