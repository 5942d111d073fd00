// The regions a group's members need for one tile of the group's output,
// following only the calls inside the group (a Func recomputed in several
// groups is sized by its callers in each). A tile may sit anywhere, so each
// region is the largest over a few placements: at the start of the output's
// region, one past it, and at and just before a power-of-two boundary in
// its middle (where the floor divisions of down/upsampling round worst).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "autoscheduler/plugin/memory_model.h"
#include "autoscheduler/plugin/pipeline_graph.h"

namespace segtile::plugin {

using MemberExtents = std::map<int, Extents>;  // member node -> extents per tile

// Nullopt when some member's region is unbounded.
std::optional<MemberExtents> member_extents(const PipelineGraph &graph, const Group &group, const Extents &tile);

// The same for every tile candidate of a group output, for the search: it
// grows groups one producer at a time and meets the same groups again, so
// each (output, members) is computed once, from the group without its
// last-added (lowest-index) member.
class GroupRegionCache {
public:
    GroupRegionCache(const PipelineGraph &graph, std::vector<Extents> (*candidates)(const FuncNode &));

    const std::vector<Extents> &tiles(int output);
    // Extents of every member at tile candidate t, nullopt where unbounded.
    std::optional<MemberExtents> extents(int output, const std::vector<int> &members, size_t t);

private:
    struct MemberRegions {
        std::vector<std::vector<std::optional<Region>>> regions;  // [tile][placement]
        std::vector<std::optional<Extents>> extents;              // [tile]
    };
    using Table = std::map<int, std::shared_ptr<const MemberRegions>>;
    const Table &table(int output, std::vector<int> members);  // members sorted ascending

    const PipelineGraph &graph_;
    std::vector<Extents> (*candidates_)(const FuncNode &);
    std::map<int, std::vector<Extents>> tiles_;
    std::map<int, std::vector<std::vector<Region>>> output_regions_;  // [tile][placement]
    std::map<std::pair<int, std::vector<int>>, Table> tables_;
};

}  // namespace segtile::plugin
