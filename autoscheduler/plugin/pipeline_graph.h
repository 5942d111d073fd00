// The pipeline as the Segtile plugin sees it: its Funcs in Halide's
// realization order, who calls whom, what one point of each costs and
// weighs, the region of each that the output estimates require, and (on
// demand) the region of a producer that a region of a consumer reads.
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
struct Interval64 {
    int64_t min = 0, max = -1;
};
using Region = std::vector<Interval64>;

struct FuncNode {
    Halide::Internal::Function func;
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

    const FuncNode &node(int i) const { return nodes_[i]; }
    int size() const { return static_cast<int>(nodes_.size()); }

    // The region of `producer` that computing `consumer`'s pure definition
    // over `region` reads (Halide's boxes_required, evaluated); nullopt when
    // it is unbounded or depends on more than the region.
    std::optional<Region> required_region(int consumer, int producer, const Region &region) const;

private:
    // Per consumer and producer: the min and max Exprs of the producer's
    // required box, per dimension, in terms of the consumer's region
    // bounds (undefined where unbounded).
    using EdgeMaps = std::map<int, std::vector<std::pair<Halide::Expr, Halide::Expr>>>;
    const EdgeMaps &edge_maps(int consumer) const;

    std::vector<FuncNode> nodes_;
    std::map<std::string, int> index_;
    mutable std::map<int, EdgeMaps> edge_maps_;  // cache: bounds inference is slow
};

}  // namespace segtile::plugin
