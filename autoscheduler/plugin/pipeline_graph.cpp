#include "autoscheduler/plugin/pipeline_graph.h"

#include <algorithm>
#include <sstream>

namespace segtile::plugin {

using namespace Halide;
using namespace Halide::Internal;

namespace {

// Counts the IR nodes of an expression: a rough cost of computing one point.
class NodeCounter : public IRGraphVisitor {
public:
    int64_t count = 0;

protected:
    using IRGraphVisitor::include;
    void include(const Expr &e) override {
        count++;
        IRGraphVisitor::include(e);
    }
};

// Error messages built from Halide values (Exprs print themselves).
template<typename... Parts>
std::string concat(const Parts &...parts) {
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
}

std::optional<int64_t> constant(const Expr &e) {
    return as_const_int(simplify(substitute_var_estimates(e)));
}

Box estimate_box(const Function &f) {
    Box box;
    for (const std::string &arg : f.args()) {
        const Bound *found = nullptr;
        for (const Bound &b : f.schedule().estimates()) {
            if (b.var == arg && b.min.defined() && b.extent.defined()) found = &b;
        }
        if (!found) {
            throw CompileError(concat("Segtile: give an estimate for dimension ", arg, " of output ", f.name(),
                                      " (Func::set_estimate or the output buffer's estimates)."));
        }
        box.push_back(Interval(found->min, simplify(found->min + found->extent - 1)));
    }
    return box;
}

std::string tile_var(const std::string &kind, int d) { return "segtile_tile_" + kind + std::to_string(d); }

}  // namespace

PipelineGraph::PipelineGraph(const std::vector<Function> &outputs, const Target &target) {
    std::map<std::string, Function> env;
    for (const Function &out : outputs) {
        std::map<std::string, Function> calls = find_transitive_calls(out);
        env.insert(calls.begin(), calls.end());
    }
    const std::vector<std::string> order = realization_order(outputs, env).first;

    std::vector<Func> output_funcs;
    std::vector<Box> output_boxes;
    for (const Function &out : outputs) {
        output_funcs.emplace_back(out);
        output_boxes.push_back(estimate_box(out));
    }
    std::map<std::string, Box> boxes = inference_bounds(output_funcs, output_boxes);
    for (size_t i = 0; i < outputs.size(); i++) boxes[outputs[i].name()] = output_boxes[i];

    for (const std::string &name : order) {
        index_[name] = static_cast<int>(nodes_.size());
        FuncNode n;
        n.func = env.at(name);
        nodes_.push_back(n);
    }
    for (FuncNode &n : nodes_) {
        const Function &f = n.func;
        n.is_output = std::any_of(outputs.begin(), outputs.end(), [&](const Function &o) { return o.same_as(f); });
        for (const Type &t : f.output_types()) n.bytes_per_point += t.bytes();
        n.vector_width = std::max(1, target.natural_vector_size(f.output_types()[0]));
        NodeCounter counter;
        for (const Expr &v : f.values()) v.accept(&counter);
        n.cost_per_point = static_cast<double>(std::max<int64_t>(1, counter.count));
        const Box &box = boxes[f.name()];
        if (static_cast<int>(box.size()) != f.dimensions()) {
            throw CompileError(concat("Segtile: no region of ", f.name(), " is required by the outputs."));
        }
        for (int d = 0; d < f.dimensions(); d++) {
            std::optional<int64_t> extent = box[d].is_bounded() ? constant(box[d].max - box[d].min + 1) : std::nullopt;
            if (!extent) {
                throw CompileError(concat("Segtile: the region of ", f.name(), " required in dimension ", d,
                                          " is not bounded by the estimates: ", box[d].min, " .. ", box[d].max,
                                          ". Add estimates to the inputs and parameters it depends on."));
            }
            n.full.push_back(std::max<int64_t>(1, *extent));
            n.full_min.push_back(constant(box[d].min).value_or(0));
        }
        n.must_be_root = n.is_output || f.has_update_definition() || f.has_extern_definition() || f.dimensions() == 0;
    }
    const std::vector<std::string> topological = topological_order(outputs, env);
    for (size_t i = 0; i < topological.size(); i++) nodes_[index_.at(topological[i])].pipeline_index = static_cast<int>(i);
    for (size_t i = 0; i < nodes_.size(); i++) {
        for (const auto &[name, callee] : find_direct_calls(nodes_[i].func)) {
            auto it = index_.find(name);
            if (it == index_.end() || it->second == static_cast<int>(i)) continue;
            nodes_[i].producers.push_back(it->second);
            nodes_[it->second].consumers.push_back(static_cast<int>(i));
        }
    }
}

const PipelineGraph::SymbolicRegions &PipelineGraph::symbolic_regions(int consumer) const {
    auto cached = symbolic_.find(consumer);
    if (cached != symbolic_.end()) return cached->second;
    const Function &f = nodes_[consumer].func;
    Box tile;
    for (int d = 0; d < f.dimensions(); d++) {
        Expr min = Variable::make(Int(32), tile_var("min", d));
        Expr extent = Variable::make(Int(32), tile_var("extent", d));
        tile.push_back(Interval(min, min + extent - 1));
    }
    SymbolicRegions regions;
    for (const auto &[name, box] : inference_bounds(Func(f), tile)) {
        if (name == f.name() || !index_.count(name)) continue;
        std::vector<Expr> extents;
        for (size_t d = 0; d < box.size(); d++) {
            extents.push_back(box[d].is_bounded() ? simplify(substitute_var_estimates(box[d].max - box[d].min + 1))
                                                  : Expr());
        }
        regions[name] = extents;
    }
    return symbolic_[consumer] = regions;
}

std::optional<Extents> PipelineGraph::tile_extents(int consumer, int producer, const Extents &tile) const {
    auto key = std::make_pair(std::make_pair(consumer, producer), tile);
    auto cached = tile_cache_.find(key);
    if (cached != tile_cache_.end()) return cached->second;
    std::optional<Extents> result;
    const SymbolicRegions &regions = symbolic_regions(consumer);
    auto it = regions.find(nodes_[producer].func.name());
    if (it != regions.end()) {
        // The tile may sit anywhere: at the start of the region, one past it,
        // or in the middle at and just before a power-of-two boundary (where
        // floor divisions of down/upsampling round worst). Keep the largest.
        const FuncNode &c = nodes_[consumer];
        Extents worst(it->second.size(), 0);
        bool bounded = true;
        for (int placement = 0; placement < 4 && bounded; placement++) {
            std::map<std::string, Expr> values;
            for (size_t d = 0; d < tile.size(); d++) {
                int64_t half = 1;
                while (half * 2 <= c.full[d] / 2) half *= 2;
                const int64_t mins[4] = {0, 1, half, half - 1};
                values[tile_var("min", d)] = Expr(static_cast<int32_t>(c.full_min[d] + mins[placement]));
                values[tile_var("extent", d)] = Expr(static_cast<int32_t>(tile[d]));
            }
            for (size_t d = 0; d < it->second.size() && bounded; d++) {
                std::optional<int64_t> e;
                if (it->second[d].defined()) e = as_const_int(simplify(substitute(values, it->second[d])));
                if (!e) bounded = false;
                else worst[d] = std::max(worst[d], *e);
            }
        }
        if (bounded) result = worst;
    }
    return tile_cache_[key] = result;
}

}  // namespace segtile::plugin
