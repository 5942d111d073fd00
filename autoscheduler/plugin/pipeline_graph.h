// The pipeline as the Segtile plugin sees it: its Funcs in Halide's
// realization order, who calls whom, what one point of each costs and
// weighs, the region of each that the output estimates require, and (on
// demand) the region of a producer that one tile of a consumer requires.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "Halide.h"

namespace segtile::plugin {

using Extents = std::vector<int64_t>;

struct FuncNode {
    Halide::Internal::Function func;
    std::vector<int> producers;  // node indices, earlier in realization order
    std::vector<int> consumers;  // node indices, later in realization order
    bool is_output = false;
    // Outputs, Funcs with update or extern definitions and scalar Funcs are
    // computed at root: the plugin tiles and fuses pure definitions only.
    bool must_be_root = false;
    Extents full_min, full;     // region required by the output estimates
    int64_t bytes_per_point = 0;
    double cost_per_point = 1;  // IR nodes in the pure definition
    int vector_width = 1;       // natural vector width of the first value's type
    int pipeline_index = 0;     // Pipeline::get_func's index (topological order)
};

class PipelineGraph {
public:
    PipelineGraph(const std::vector<Halide::Internal::Function> &outputs, const Halide::Target &target);

    const std::vector<FuncNode> &nodes() const { return nodes_; }
    const FuncNode &node(int i) const { return nodes_[i]; }
    int size() const { return static_cast<int>(nodes_.size()); }

    // Extents of `producer` that one tile of `consumer` (tile extents per
    // consumer dimension, tile min anywhere) requires; nullopt when Halide's
    // bounds inference finds that region unbounded or not constant. Assumes
    // every Func between them is computed per tile too.
    std::optional<Extents> tile_extents(int consumer, int producer, const Extents &tile) const;

private:
    // Per consumer: producer name -> extent Exprs in terms of the tile's
    // symbolic mins and extents (see tile_extents).
    using SymbolicRegions = std::map<std::string, std::vector<Halide::Expr>>;
    const SymbolicRegions &symbolic_regions(int consumer) const;

    std::vector<FuncNode> nodes_;
    std::map<std::string, int> index_;
    // Caches: bounds inference is the slow part of the search.
    mutable std::map<int, SymbolicRegions> symbolic_;
    mutable std::map<std::pair<std::pair<int, int>, Extents>, std::optional<Extents>> tile_cache_;
};

}  // namespace segtile::plugin
