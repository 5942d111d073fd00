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

std::string region_var(const std::string &kind, int d) { return "segtile_region_" + kind + std::to_string(d); }

using Values = std::map<std::string, int64_t>;

std::optional<int64_t> evaluate(const Expr &e, const Values &vars);

template<typename Op>
std::optional<int64_t> binary(const Expr &a, const Expr &b, const Values &vars, Op op) {
    std::optional<int64_t> x = evaluate(a, vars), y = evaluate(b, vars);
    if (!x || !y) return std::nullopt;
    return op(*x, *y);
}

// Integer value of a bounds expression, given its variables: much faster
// than substitute + simplify, which the search would call millions of times.
std::optional<int64_t> evaluate(const Expr &e, const Values &vars) {
    using I = int64_t;
    if (const IntImm *i = e.as<IntImm>()) return i->value;
    if (const UIntImm *u = e.as<UIntImm>()) return static_cast<I>(u->value);
    if (const Variable *v = e.as<Variable>()) {
        auto it = vars.find(v->name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    }
    if (const Cast *c = e.as<Cast>()) return c->type.is_int_or_uint() ? evaluate(c->value, vars) : std::nullopt;
    if (const Add *o = e.as<Add>()) return binary(o->a, o->b, vars, [](I x, I y) { return x + y; });
    if (const Sub *o = e.as<Sub>()) return binary(o->a, o->b, vars, [](I x, I y) { return x - y; });
    if (const Mul *o = e.as<Mul>()) return binary(o->a, o->b, vars, [](I x, I y) { return x * y; });
    // Halide's integer division rounds down and its modulus is never
    // negative; div_imp / mod_imp are its own definitions (x / 0 is 0).
    if (const Div *o = e.as<Div>()) return binary(o->a, o->b, vars, [](I x, I y) { return div_imp(x, y); });
    if (const Mod *o = e.as<Mod>()) return binary(o->a, o->b, vars, [](I x, I y) { return mod_imp(x, y); });
    if (const Min *o = e.as<Min>()) return binary(o->a, o->b, vars, [](I x, I y) { return std::min(x, y); });
    if (const Max *o = e.as<Max>()) return binary(o->a, o->b, vars, [](I x, I y) { return std::max(x, y); });
    if (const LT *o = e.as<LT>()) return binary(o->a, o->b, vars, [](I x, I y) { return I(x < y); });
    if (const LE *o = e.as<LE>()) return binary(o->a, o->b, vars, [](I x, I y) { return I(x <= y); });
    if (const GT *o = e.as<GT>()) return binary(o->a, o->b, vars, [](I x, I y) { return I(x > y); });
    if (const GE *o = e.as<GE>()) return binary(o->a, o->b, vars, [](I x, I y) { return I(x >= y); });
    if (const EQ *o = e.as<EQ>()) return binary(o->a, o->b, vars, [](I x, I y) { return I(x == y); });
    if (const NE *o = e.as<NE>()) return binary(o->a, o->b, vars, [](I x, I y) { return I(x != y); });
    if (const And *o = e.as<And>()) return binary(o->a, o->b, vars, [](I x, I y) { return I(x && y); });
    if (const Or *o = e.as<Or>()) return binary(o->a, o->b, vars, [](I x, I y) { return I(x || y); });
    if (const Not *o = e.as<Not>()) {
        std::optional<I> x = evaluate(o->a, vars);
        if (!x) return std::nullopt;
        return I(!*x);
    }
    if (const Select *o = e.as<Select>()) {
        std::optional<int64_t> c = evaluate(o->condition, vars);
        if (!c) return std::nullopt;
        return evaluate(*c ? o->true_value : o->false_value, vars);
    }
    if (const Let *l = e.as<Let>()) {
        std::optional<int64_t> v = evaluate(l->value, vars);
        if (!v) return std::nullopt;
        std::map<std::string, int64_t> inner = vars;
        inner[l->name] = *v;
        return evaluate(l->body, inner);
    }
    if (const Call *c = e.as<Call>()) {
        if (c->is_intrinsic(Call::likely) || c->is_intrinsic(Call::likely_if_innermost) ||
            c->is_intrinsic(Call::promise_clamped) || c->is_intrinsic(Call::unsafe_promise_clamped)) {
            return evaluate(c->args[0], vars);
        }
    }
    return std::nullopt;
}

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
            nodes_[it->second].consumers.push_back(static_cast<int>(i));
        }
    }
}

const PipelineGraph::EdgeMaps &PipelineGraph::edge_maps(int consumer) const {
    auto cached = edge_maps_.find(consumer);
    if (cached != edge_maps_.end()) return cached->second;
    const Function &f = nodes_[consumer].func;
    Scope<Interval> scope;
    for (int d = 0; d < f.dimensions(); d++) {
        scope.push(f.args()[d], Interval(Variable::make(Int(32), region_var("min", d)),
                                         Variable::make(Int(32), region_var("max", d))));
    }
    std::map<std::string, Box> boxes;
    for (const Expr &v : f.values()) {
        for (const auto &[name, box] : boxes_required(v, scope)) {
            auto it = boxes.find(name);
            boxes[name] = it == boxes.end() ? box : box_union(it->second, box);
        }
    }
    EdgeMaps maps;
    for (const auto &[name, box] : boxes) {
        auto it = index_.find(name);
        if (it == index_.end() || it->second == consumer) continue;
        std::vector<std::pair<Expr, Expr>> dims;
        for (size_t d = 0; d < box.size(); d++) {
            if (!box[d].is_bounded()) {
                dims.emplace_back();
            } else {
                dims.emplace_back(simplify(substitute_var_estimates(box[d].min)),
                                  simplify(substitute_var_estimates(box[d].max)));
            }
        }
        maps[it->second] = dims;
    }
    return edge_maps_[consumer] = maps;
}

std::optional<Region> PipelineGraph::required_region(int consumer, int producer, const Region &region) const {
    const EdgeMaps &maps = edge_maps(consumer);
    auto it = maps.find(producer);
    if (it == maps.end()) return std::nullopt;
    std::map<std::string, int64_t> values;
    for (size_t d = 0; d < region.size(); d++) {
        values[region_var("min", d)] = region[d].min;
        values[region_var("max", d)] = region[d].max;
    }
    Region result;
    for (const auto &[min, max] : it->second) {
        if (!min.defined() || !max.defined()) return std::nullopt;
        std::optional<int64_t> lo = evaluate(min, values), hi = evaluate(max, values);
        if (!lo || !hi) return std::nullopt;
        result.push_back({*lo, *hi});
    }
    return result;
}

}  // namespace segtile::plugin
