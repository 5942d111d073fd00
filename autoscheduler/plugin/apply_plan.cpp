#include "autoscheduler/plugin/apply_plan.h"

#include <sstream>

namespace segtile::plugin {

using namespace Halide;

namespace {

// Root Funcs that are not tiled: reductions (parallel over an outer pure
// dimension of each definition: always race-free in Halide), externs and
// scalars.
void schedule_untiled_root(const FuncNode &n, std::ostream &src) {
    Func f(n.func);
    f.compute_root();
    src << f.name() << ".compute_root()";
    const int dims = f.dimensions();
    if (dims == 0 || n.func.has_extern_definition()) {
        src << ";\n";
        return;
    }
    const std::vector<Var> args = f.args();
    if (n.full[0] >= n.vector_width && n.vector_width > 1) {
        f.vectorize(args[0], n.vector_width, TailStrategy::ShiftInwards);
        src << ".vectorize(" << args[0].name() << ", " << n.vector_width << ", TailStrategy::ShiftInwards)";
    }
    if (dims > 1 && n.full[dims - 1] > 1) {
        f.parallel(args[dims - 1]);
        src << ".parallel(" << args[dims - 1].name() << ")";
    }
    src << ";\n";
    for (int u = 0; u < n.func.updates().size(); u++) {
        const std::vector<Expr> &update_args = n.func.update(u).args();
        bool scheduled = false;
        for (int d = static_cast<int>(update_args.size()) - 1; d >= 0 && !scheduled; d--) {
            const Internal::Variable *v = update_args[d].as<Internal::Variable>();
            if (v && v->name == args[d].name() && n.full[d] > 1) {
                f.update(u).parallel(args[d]);
                src << f.name() << ".update(" << u << ").parallel(" << args[d].name() << ");\n";
                scheduled = true;
            }
        }
        if (!scheduled) {
            // A serial reduction (no pure dimension to parallelise): say so,
            // or Halide warns that it was forgotten.
            f.update(u).unscheduled();
            src << f.name() << ".update(" << u << ").unscheduled();\n";
        }
    }
}

void schedule_group(const PipelineGraph &graph, const Group &g, std::ostream &src) {
    const FuncNode &n = graph.node(g.output);
    Func f(n.func);
    f.compute_root();
    src << f.name() << ".compute_root()";
    const std::vector<Var> args = f.args();
    std::vector<VarOrRVar> inner, outer;
    for (size_t d = 0; d < args.size(); d++) {
        if (g.tile[d] < n.full[d]) {
            Var o(args[d].name() + "_tile"), i(args[d].name() + "_in");
            f.split(args[d], o, i, static_cast<int>(g.tile[d]), TailStrategy::ShiftInwards);
            src << ".split(" << args[d].name() << ", " << o.name() << ", " << i.name() << ", " << g.tile[d]
                << ", TailStrategy::ShiftInwards)";
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
        src << ".reorder(";
        for (size_t i = 0; i < order.size(); i++) src << (i ? ", " : "") << order[i].name();
        src << ")";
    }
    LoopLevel tile_level = LoopLevel(f, Var::outermost());
    std::string tile_level_src = "Var::outermost()";
    if (!outer.empty()) {
        Var tiles = outer[0].var;
        for (size_t i = 1; i < outer.size(); i++) {
            Var fused(f.name() + "_tiles" + std::to_string(i));
            f.fuse(tiles, outer[i].var, fused);
            src << ".fuse(" << tiles.name() << ", " << outer[i].name() << ", " << fused.name() << ")";
            tiles = fused;
        }
        f.parallel(tiles);
        src << ".parallel(" << tiles.name() << ")";
        tile_level = LoopLevel(f, tiles);
        tile_level_src = tiles.name();
    } else if (args.size() > 1 && n.full.back() > 1) {
        f.parallel(args.back());
        src << ".parallel(" << args.back().name() << ")";
    }
    if (g.tile[0] >= n.vector_width && n.vector_width > 1) {
        f.vectorize(inner[0].var, n.vector_width, TailStrategy::ShiftInwards);
        src << ".vectorize(" << inner[0].name() << ", " << n.vector_width << ", TailStrategy::ShiftInwards)";
    }
    src << ";\n";
    for (int m : g.members) {
        const FuncNode &mn = graph.node(m);
        Func mf(mn.func);
        // On the heap: Halide would put small constant-size tiles on the
        // stack, out of reach of the memory model's (and a user's) malloc.
        mf.compute_at(tile_level).store_in(MemoryType::Heap);
        src << mf.name() << ".compute_at(" << f.name() << ", " << tile_level_src << ").store_in(MemoryType::Heap)";
        std::optional<Extents> ext = graph.tile_extents(g.output, m, g.tile);
        if (ext && (*ext)[0] >= mn.vector_width && mn.vector_width > 1) {
            // GuardWithIf: RoundUp would compute (and read inputs) past the
            // region, and ShiftInwards before it where a tile's region is
            // narrower than a vector.
            mf.vectorize(mf.args()[0], mn.vector_width, TailStrategy::GuardWithIf);
            src << ".vectorize(" << mf.args()[0].name() << ", " << mn.vector_width << ", TailStrategy::GuardWithIf)";
        }
        src << ";\n";
    }
}

}  // namespace

std::string apply_plan(const PipelineGraph &graph, const Plan &plan) {
    std::ostringstream src;
    for (const Group &g : plan.groups) {
        const FuncNode &n = graph.node(g.output);
        if (n.func.has_update_definition() || n.func.has_extern_definition() || n.func.dimensions() == 0) {
            schedule_untiled_root(n, src);
        } else {
            schedule_group(graph, g, src);
        }
    }
    return src.str();
}

}  // namespace segtile::plugin
