#include "autoscheduler/plugin/apply_plan.h"

#include "autoscheduler/plugin/group_regions.h"

#include <cctype>
#include <set>
#include <sstream>

namespace segtile::plugin {

using namespace Halide;

namespace {

// The schedule as C++ for the generator's schedule header: Funcs fetched by
// Pipeline::get_func, Vars by name, Halide's names made into identifiers.
class ScheduleSource {
public:
    std::string func(const FuncNode &n) {
        const std::string id = identifier(n.func.name());
        if (funcs_.insert(id).second) {
            declarations_ << "Func " << id << " = pipeline.get_func(" << n.pipeline_index << ");\n";
        }
        return id;
    }
    // A copy of `n` called only from `callers` (Func::clone_in).
    std::string clone(const FuncNode &n, const std::string &group, const std::vector<std::string> &callers) {
        const std::string id = identifier(n.func.name() + "_in_" + group);
        declarations_ << "Func " << id << " = " << func(n) << ".clone_in({";
        for (size_t i = 0; i < callers.size(); i++) declarations_ << (i ? ", " : "") << callers[i];
        declarations_ << "});\n";
        funcs_.insert(id);
        return id;
    }
    std::string var(const std::string &name) {
        const std::string id = identifier(name);
        if (vars_.insert(id).second) declarations_ << "Var " << id << "(\"" << name << "\");\n";
        return id;
    }
    std::ostringstream body;
    std::string str() const { return declarations_.str() + body.str(); }

private:
    static std::string identifier(const std::string &name) {
        std::string id;
        for (char c : name) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
        if (id.empty() || std::isdigit(static_cast<unsigned char>(id[0]))) id = "_" + id;
        return id;
    }
    std::set<std::string> funcs_, vars_;
    std::ostringstream declarations_;
};

// Root Funcs that are not tiled: reductions (parallel over an outer pure
// dimension of each definition and vectorised over the innermost: always
// race-free in Halide), externs and scalars.
void schedule_untiled_root(const FuncNode &n, ScheduleSource &src) {
    Func f(n.func);
    const std::string fid = src.func(n);
    f.compute_root();
    src.body << fid << ".compute_root()";
    const int dims = f.dimensions();
    if (dims == 0 || n.func.has_extern_definition()) {
        src.body << ";\n";
        return;
    }
    const std::vector<Var> args = f.args();
    if (n.full[0] >= n.vector_width && n.vector_width > 1) {
        f.vectorize(args[0], n.vector_width, TailStrategy::ShiftInwards);
        src.body << ".vectorize(" << src.var(args[0].name()) << ", " << n.vector_width << ", TailStrategy::ShiftInwards)";
    }
    if (dims > 1 && n.full[dims - 1] > 1) {
        f.parallel(args[dims - 1]);
        src.body << ".parallel(" << src.var(args[dims - 1].name()) << ")";
    }
    src.body << ";\n";
    for (int u = 0; u < static_cast<int>(n.func.updates().size()); u++) {
        const std::vector<Expr> &update_args = n.func.update(u).args();
        auto pure = [&](int d) {
            const Internal::Variable *v = update_args[d].as<Internal::Variable>();
            return v && v->name == args[d].name() && n.full[d] > 1;
        };
        int parallel_dim = -1;
        for (int d = static_cast<int>(update_args.size()) - 1; d >= 0 && parallel_dim < 0; d--) {
            if (pure(d)) parallel_dim = d;
        }
        const bool vectorize = parallel_dim != 0 && pure(0) && n.full[0] >= n.vector_width && n.vector_width > 1;
        if (parallel_dim >= 0 || vectorize) {
            src.body << fid << ".update(" << u << ")";
            if (vectorize) {
                // The reduction loops stay inside, run on whole vectors.
                f.update(u).vectorize(args[0], n.vector_width, TailStrategy::GuardWithIf);
                src.body << ".vectorize(" << src.var(args[0].name()) << ", " << n.vector_width
                         << ", TailStrategy::GuardWithIf)";
            }
            if (parallel_dim >= 0) {
                f.update(u).parallel(args[parallel_dim]);
                src.body << ".parallel(" << src.var(args[parallel_dim].name()) << ")";
            }
            src.body << ";\n";
        } else {
            // A serial reduction (no pure dimension to parallelise): say so,
            // or Halide warns that it was forgotten.
            f.update(u).unscheduled();
            src.body << fid << ".update(" << u << ").unscheduled();\n";
        }
    }
}

// A group output tiled in its first two dimensions (the rest inside each
// tile), tiles fused into one parallel loop, members computed per tile.
// The Func (original or clone) that computes a node in a group, and its
// name in the schedule source.
struct Handle {
    Func func;
    std::string id;
};
using Handles = std::map<std::pair<int, int>, Handle>;  // (node, group index)

void schedule_group(const PipelineGraph &graph, const Group &g, int group, const Handles &handles,
                    ScheduleSource &src) {
    const FuncNode &n = graph.node(g.output);
    Func f(n.func);
    const std::string fid = src.func(n);
    f.compute_root();
    src.body << fid << ".compute_root()";
    const std::vector<Var> args = f.args();
    std::vector<VarOrRVar> inner, outer;
    for (size_t d = 0; d < args.size(); d++) {
        if (g.tile[d] < n.full[d]) {
            Var o(args[d].name() + "_tile"), i(args[d].name() + "_in");
            f.split(args[d], o, i, static_cast<int>(g.tile[d]), TailStrategy::ShiftInwards);
            src.body << ".split(" << src.var(args[d].name()) << ", " << src.var(o.name()) << ", " << src.var(i.name())
                     << ", " << g.tile[d] << ", TailStrategy::ShiftInwards)";
            inner.emplace_back(i);
            outer.emplace_back(o);
        } else {
            inner.emplace_back(args[d]);
        }
    }
    std::vector<VarOrRVar> order = inner;
    order.insert(order.end(), outer.begin(), outer.end());
    if (!outer.empty() && order.size() > 1) {
        f.reorder(order);
        src.body << ".reorder(";
        for (size_t i = 0; i < order.size(); i++) src.body << (i ? ", " : "") << src.var(order[i].name());
        src.body << ")";
    }
    LoopLevel tile_level = LoopLevel(f, Var::outermost());
    std::string tile_level_src = "Var::outermost()";
    if (!outer.empty()) {
        Var tiles = outer[0].var;
        for (size_t i = 1; i < outer.size(); i++) {
            Var fused(n.func.name() + "_tiles" + std::to_string(i));
            f.fuse(tiles, outer[i].var, fused);
            src.body << ".fuse(" << src.var(tiles.name()) << ", " << src.var(outer[i].name()) << ", "
                     << src.var(fused.name()) << ")";
            tiles = fused;
        }
        f.parallel(tiles);
        src.body << ".parallel(" << src.var(tiles.name()) << ")";
        tile_level = LoopLevel(f, tiles);
        tile_level_src = src.var(tiles.name());
    } else if (args.size() > 1 && n.full.back() > 1) {
        f.parallel(args.back());
        src.body << ".parallel(" << src.var(args.back().name()) << ")";
    }
    if (g.tile[0] >= n.vector_width && n.vector_width > 1) {
        f.vectorize(inner[0].var, n.vector_width, TailStrategy::ShiftInwards);
        src.body << ".vectorize(" << src.var(inner[0].name()) << ", " << n.vector_width << ", TailStrategy::ShiftInwards)";
    }
    src.body << ";\n";
    const std::optional<MemberExtents> extents = member_extents(graph, g, g.tile);
    for (int m : g.members) {
        const FuncNode &mn = graph.node(m);
        const Handle &h = handles.at({m, group});
        Func mf = h.func;
        // On the heap: Halide would put small constant-size tiles on the
        // stack, out of reach of the memory model's (and a user's) malloc.
        mf.compute_at(tile_level).store_in(MemoryType::Heap);
        src.body << h.id << ".compute_at(" << fid << ", " << tile_level_src << ").store_in(MemoryType::Heap)";
        if (extents && extents->at(m)[0] >= mn.vector_width && mn.vector_width > 1) {
            // GuardWithIf: RoundUp would compute (and read inputs) past the
            // region, and ShiftInwards before it where a tile's region is
            // narrower than a vector.
            mf.vectorize(mf.args()[0], mn.vector_width, TailStrategy::GuardWithIf);
            src.body << ".vectorize(" << src.var(mf.args()[0].name()) << ", " << mn.vector_width
                     << ", TailStrategy::GuardWithIf)";
        }
        src.body << ";\n";
    }
}

// A member computed in several groups is the original Func in the first
// and a clone, called only from that group's Funcs, in each other. Callers
// come first (higher realization index), so their handles exist already.
Handles make_handles(const PipelineGraph &graph, const Plan &plan, ScheduleSource &src) {
    Handles handles;
    std::map<int, std::vector<int>> groups_of;
    for (size_t g = 0; g < plan.groups.size(); g++) {
        const FuncNode &out = graph.node(plan.groups[g].output);
        handles[{plan.groups[g].output, static_cast<int>(g)}] = {Func(out.func), src.func(out)};
        for (int m : plan.groups[g].members) groups_of[m].push_back(static_cast<int>(g));
    }
    for (auto it = groups_of.rbegin(); it != groups_of.rend(); ++it) {
        const int m = it->first;
        const FuncNode &n = graph.node(m);
        for (size_t i = 0; i < it->second.size(); i++) {
            const int g = it->second[i];
            if (i == 0) {
                handles[{m, g}] = {Func(n.func), src.func(n)};
                continue;
            }
            std::vector<Func> callers;
            std::vector<std::string> caller_ids;
            for (int c : n.consumers) {
                auto h = handles.find({c, g});
                if (h == handles.end()) continue;
                callers.push_back(h->second.func);
                caller_ids.push_back(h->second.id);
            }
            Func clone = Func(n.func).clone_in(callers);
            handles[{m, g}] = {clone, src.clone(n, graph.node(plan.groups[g].output).func.name(), caller_ids)};
        }
    }
    return handles;
}

}  // namespace

std::string apply_plan(const PipelineGraph &graph, const Plan &plan) {
    ScheduleSource src;
    const Handles handles = make_handles(graph, plan, src);
    for (size_t g = 0; g < plan.groups.size(); g++) {
        const FuncNode &n = graph.node(plan.groups[g].output);
        if (n.func.has_update_definition() || n.func.has_extern_definition() || n.func.dimensions() == 0) {
            schedule_untiled_root(n, src);
        } else {
            schedule_group(graph, plan.groups[g], static_cast<int>(g), handles, src);
        }
    }
    return src.str();
}

}  // namespace segtile::plugin
