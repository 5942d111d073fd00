#include "autoscheduler/plugin/group_regions.h"

#include <algorithm>

namespace segtile::plugin {

namespace {

constexpr int kPlacements = 4;

Region output_region(const FuncNode &out, const Extents &tile, int placement) {
    Region r;
    for (size_t d = 0; d < tile.size(); d++) {
        int64_t half = 1;
        while (half * 2 <= out.full[d] / 2) half *= 2;
        const int64_t offsets[kPlacements] = {0, 1, half, half - 1};
        const int64_t min = out.full_min[d] + std::min(offsets[placement], std::max<int64_t>(0, out.full[d] - tile[d]));
        r.push_back({min, min + tile[d] - 1});
    }
    return r;
}

// Region of `member` given the regions of its callers inside the group.
std::optional<Region> member_region(const PipelineGraph &graph, int member,
                                    const std::map<int, const Region *> &caller_regions) {
    std::optional<Region> result;
    for (int c : graph.node(member).consumers) {
        auto it = caller_regions.find(c);
        if (it == caller_regions.end()) continue;  // computed elsewhere
        if (!it->second) return std::nullopt;
        std::optional<Region> r = graph.required_region(c, member, *it->second);
        if (!r) return std::nullopt;
        if (!result) {
            result = r;
        } else {
            for (size_t d = 0; d < r->size(); d++) {
                (*result)[d].min = std::min((*result)[d].min, (*r)[d].min);
                (*result)[d].max = std::max((*result)[d].max, (*r)[d].max);
            }
        }
    }
    return result;
}

Extents widest(const Extents &a, const Region &r) {
    Extents e = a;
    e.resize(r.size(), 0);
    for (size_t d = 0; d < r.size(); d++) e[d] = std::max(e[d], std::max<int64_t>(0, r[d].max - r[d].min + 1));
    return e;
}

}  // namespace

std::optional<MemberExtents> member_extents(const PipelineGraph &graph, const Group &group, const Extents &tile) {
    std::vector<int> members = group.members;
    std::sort(members.rbegin(), members.rend());  // callers before callees
    MemberExtents result;
    for (int p = 0; p < kPlacements; p++) {
        std::map<int, Region> regions;
        regions[group.output] = output_region(graph.node(group.output), tile, p);
        for (int m : members) {
            std::map<int, const Region *> callers;
            for (const auto &[n, r] : regions) callers[n] = &r;
            std::optional<Region> r = member_region(graph, m, callers);
            if (!r) return std::nullopt;
            regions[m] = *r;
            result[m] = widest(result[m], *r);
        }
    }
    return result;
}

GroupRegionCache::GroupRegionCache(const PipelineGraph &graph, std::vector<Extents> (*candidates)(const FuncNode &))
    : graph_(graph), candidates_(candidates) {}

const std::vector<Extents> &GroupRegionCache::tiles(int output) {
    auto it = tiles_.find(output);
    if (it != tiles_.end()) return it->second;
    std::vector<Extents> tiles = candidates_(graph_.node(output));
    std::vector<std::vector<Region>> regions;
    for (const Extents &tile : tiles) {
        std::vector<Region> per_placement;
        for (int p = 0; p < kPlacements; p++) per_placement.push_back(output_region(graph_.node(output), tile, p));
        regions.push_back(per_placement);
    }
    output_regions_[output] = regions;
    return tiles_[output] = tiles;
}

const GroupRegionCache::Table &GroupRegionCache::table(int output, std::vector<int> members) {
    auto key = std::make_pair(output, members);
    auto cached = tables_.find(key);
    if (cached != tables_.end()) return cached->second;
    if (members.empty()) return tables_[key];
    const int added = members.front();
    members.erase(members.begin());
    Table t = table(output, members);
    const size_t ntiles = tiles(output).size();
    auto regions = std::make_shared<MemberRegions>();
    regions->regions.resize(ntiles);
    regions->extents.resize(ntiles);
    for (size_t i = 0; i < ntiles; i++) {
        Extents widest_so_far;
        bool bounded = true;
        for (int p = 0; p < kPlacements; p++) {
            std::map<int, const Region *> callers;
            callers[output] = &output_regions_[output][i][p];
            for (const auto &[m, r] : t) {
                const std::optional<Region> &mr = r->regions[i][p];
                callers[m] = mr ? &*mr : nullptr;
            }
            std::optional<Region> r = member_region(graph_, added, callers);
            regions->regions[i].push_back(r);
            if (!r) bounded = false;
            else widest_so_far = widest(widest_so_far, *r);
        }
        if (bounded) regions->extents[i] = widest_so_far;
    }
    t[added] = regions;
    return tables_[std::make_pair(output, key.second)] = t;
}

std::optional<MemberExtents> GroupRegionCache::extents(int output, const std::vector<int> &members, size_t t) {
    std::vector<int> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    MemberExtents result;
    for (const auto &[m, r] : table(output, sorted)) {
        if (!r->extents[t]) return std::nullopt;
        result[m] = *r->extents[t];
    }
    return result;
}

}  // namespace segtile::plugin
