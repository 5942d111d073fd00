// Loop primitives of the CPU schedule: which Vars of an update may run
// in lanes or in parallel, and the splits that put them there.
#include "schedules/cpu_parts.h"

#include <string>
#include <vector>

namespace segtile::cpu {

// Splits pure Var `vec` by the vector width into vector lanes, innermost
// (inside an update's reduction loops: each tap is then one vector
// multiply-add on contiguous elements; moving a pure Var is always legal).
void vectorise(Stage s, const std::string &vec, int width) {
    Var v(vec), vo(vec + "_vo"), vi(vec + "_vi");
    s.split(v, vo, vi, width, kTail).vectorize(vi);
    std::vector<VarOrRVar> order{vi};
    for (const auto &d : s.get_schedule().dims()) {
        const std::string n = unqualified(d.var);
        if (n != vi.name() && n != Var::outermost().name()) order.emplace_back(n, d.is_rvar());
    }
    s.reorder(order);
}

// An RVar standing bare at LHS position 0 whose loop Halide knows to be
// pure (each of its values writes its own element: the adjoints that
// generators/unclamp_adjoints.h rewrites), or "".
std::string pure_rvar_at_0(const Stage &s, const std::vector<Expr> &lhs) {
    const auto *v = lhs.empty() ? nullptr : lhs[0].as<Halide::Internal::Variable>();
    if (!v || !v->reduction_domain.defined()) return "";
    for (const auto &d : s.get_schedule().dims())
        if (d.var == v->name && d.dim_type == Halide::Internal::DimType::PureRVar) return v->name;
    return "";
}

// Fuses pure Vars `par` (innermost first, adjacent in the loop nest as
// they are by default) into one parallel loop: tile and image extents are
// unknown here, so take all the outer parallelism there is (rows, channels,
// batch); Halide's thread pool balances the tasks.
std::string parallelise(Stage s, const std::vector<std::string> &par) {
    if (par.empty()) return "";
    Var fused(par[0]);
    for (size_t i = 1; i < par.size(); i++) {
        Var next(par[i] + "_f");
        s.fuse(fused, Var(par[i]), next);
        fused = next;
    }
    s.parallel(fused);
    return fused.name();
}

// The innermost RVar that no LHS argument uses: a true reduction dimension
// (not a scatter index). Sets `constant` to whether its extent is a
// compile-time constant (a kernel's taps) or a run-time one (an image).
std::string reduction_rvar(const Stage &s, const std::vector<Expr> &lhs, bool &constant) {
    for (const auto &r : s.get_schedule().rvars()) {
        bool in_lhs = false;
        for (const auto &e : lhs) in_lhs = in_lhs || expr_uses_var(e, r.var);
        if (in_lhs) continue;
        constant = Halide::Internal::is_const(r.extent);
        return r.var;
    }
    return "";
}

constexpr int kRowsPerTask = 16, kChannelsPerTask = 16;

// Parallel tasks of blocks of kRowsPerTask rows times kChannelsPerTask
// channels over a tensor's pure Vars `par` (innermost first: y, c, n), the
// outer parts fused into one parallel loop. A task per row, or per block
// of rows of one channel, cost more in the thread pool than its work where
// planes are small and channels many: a task of 8 rows of 8 pixels for
// each of the 512 channels of Darknet19's pool5 at 256^2 (docs/design.md).
std::string parallel_blocks(Stage s, const Func &f, std::vector<std::string> par) {
    if (f.dimensions() < 2 || par.empty() || par[0] != f.args()[1].name()) return parallelise(s, par);
    const std::string y = par[0];
    Var yo(y + "_to"), yi(y + "_ti");
    s.split(Var(y), yo, yi, kRowsPerTask, kTail);
    par[0] = yo.name();
    if (par.size() > 1 && f.dimensions() > 2 && par[1] == f.args()[2].name()) {
        const std::string c = par[1];
        Var co(c + "_go"), ci(c + "_gi");
        s.split(Var(c), co, ci, kChannelsPerTask, kTail).reorder(yi, ci, yo, co);
        par[1] = co.name();
    }
    return parallelise(s, par);
}

}  // namespace segtile::cpu
