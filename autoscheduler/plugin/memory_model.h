// The plugin's memory model: what Halide allocates for a plan, and the
// peak of the allocations alive at once.
//
// A plan runs its groups in Halide's realization order. A group's output
// is computed at root (an allocation of its whole required region, alive
// from its production to its last consumer: Halide frees early), unless it
// is a pipeline output (the caller's buffer). Its members are computed per
// tile inside a parallel loop over tiles, so up to min(parallelism, tiles)
// tiles' member allocations are alive at once while the group runs; inside
// a tile they too are freed after their last use. Members are stored on the
// heap (never Halide's stack), so the model covers every byte a malloc hook
// sees. A Func may be a member of several groups (recomputed in each).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "autoscheduler/plugin/pipeline_graph.h"

namespace segtile::plugin {

struct Group {
    int output = -1;
    std::vector<int> members;  // computed per tile of output
    Extents tile;              // per output dimension; the full extent where untiled
};

struct Plan {
    std::vector<Group> groups;  // in execution order
};

struct MemoryPrediction {
    int64_t peak = 0;
    std::vector<int64_t> root_live;   // per group: root allocations alive while it runs
    std::vector<int64_t> tiles_live;  // per group: member allocations of its concurrent tiles
};

// Bytes of `node` over a region of these extents.
int64_t region_bytes(const FuncNode &node, const Extents &extents);

// Bytes Halide allocates for `node` computed at root (0 for pipeline outputs).
int64_t root_bytes(const PipelineGraph &graph, int node);

int64_t tile_count(const FuncNode &output, const Extents &tile);
int64_t concurrent_tiles(const FuncNode &output, const Extents &tile, int parallelism);

// Root allocations alive during each group (independent of tile sizes).
std::vector<int64_t> live_root_bytes(const PipelineGraph &graph, const Plan &plan);

// Peak of the member allocations alive at once in one tile of the group,
// given each member's extents (group_regions.h).
int64_t tile_live_bytes(const PipelineGraph &graph, const Group &group, const std::map<int, Extents> &extents);

MemoryPrediction predict_memory(const PipelineGraph &graph, const Plan &plan, int parallelism);

}  // namespace segtile::plugin
