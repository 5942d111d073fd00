// The plugin's search: which Funcs to compute at root (the cuts), which to
// fuse into the tiles of a consumer, and each group's tile size, so that
// the memory model's peak fits the cap at the least predicted time.
//
// Groupings come from a greedy pass over the Funcs, consumers first, that
// fuses a Func into its consumers' group while some tile keeps both the
// group's recomputation below a bound R and its tile working set below a
// bound S, and that cuts every Func whose whole region is at most C bytes
// (small coarse levels are cheaper stored than recomputed in every tile).
// A Func called from several groups is cut, or (option D) recomputed in
// each of them (Func::clone_in). Every (R, S, C, D) of a small grid gives one
// grouping; each grouping
// then gets, per group, the fastest tile that fits the cap next to the root
// allocations alive at that time. The fastest plan that fits wins.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "autoscheduler/plugin/memory_model.h"
#include "autoscheduler/plugin/pipeline_graph.h"

namespace segtile::plugin {

struct SearchOptions {
    std::optional<int64_t> memory_cap;  // bytes of Halide allocations alive at once
    int parallelism = 16;               // threads running tiles at once
    int64_t cache_bytes = 1 << 20;      // per-thread working set that stays in cache
};

struct SearchResult {
    Plan plan;
    MemoryPrediction memory;
    double cost = 0;  // predicted time, in IR-node evaluations per thread
};

// Candidate tiles of a group output: powers of two in its first two
// dimensions (and their full extents), full extents elsewhere.
std::vector<Extents> tile_candidates(const FuncNode &output);

// Throws Halide::CompileError naming the smallest feasible cap when no plan
// fits options.memory_cap.
SearchResult search_plan(const PipelineGraph &graph, const SearchOptions &options);

}  // namespace segtile::plugin
