// Reductions the CPU schedule rewrites: image-wide sums rfactored into
// vector partials, and autodiff's scatters run in lanes.
#include "schedules/cpu_parts.h"

#include <cstdio>

namespace segtile::cpu {

// A reduction over an image (a weight gradient: autodiff writes it as
// dw(kx, ky, ci, co) += sum over image x, y, n; a bias gradient; a global
// pool) or one whose innermost storage dimension is a scatter: vectorising
// a pure Var would run 3-wide kernel taps or gather channels across whole
// images. Instead (Li2018 does the same with outer parts) split the
// innermost reduction RVar, image x, by the vector width and rfactor the
// inner part into a pure Var u: the intermediate, stored u-innermost,
// accumulates vectors of independent partial sums over contiguous pixels;
// the update left only adds up `width` partials. rfactor proves the update
// an associative reduction and throws otherwise (then nothing is changed
// but a split, and the caller falls back).
Func rfactor_reduction(Func f, int k, const std::string &r, int width) {
    Stage s = f.update(k);
    Var u(f.name() + "_u");
    Func intm;
    try {
        s.split(RVar(r), RVar(r + "_ro"), RVar(r + "_ri"), width, kTail);
        intm = s.rfactor(RVar(r + "_ri"), u);
    } catch (const Halide::Error &e) {
        if (debug()) std::fprintf(stderr, "schedule_cpu: no rfactor for %s: %s\n", f.name().c_str(), e.what());
        return Func();
    }
    std::vector<Var> storage{u};
    std::vector<std::string> rest;
    for (const auto &a : intm.args())
        if (a.name() != u.name()) {
            storage.push_back(a);
            rest.push_back(a.name());
        }
    intm.compute_root();  // unless placed per output channel below
    if (storage.size() > 1) intm.reorder_storage(storage);
    vectorise(intm, u.name(), width);

    // Loop nest of the intermediate's update, innermost first: u's lanes,
    // image x (outer part), the pure Vars but the last (kernel taps and
    // input channels: the rows just read stay in cache for all of them),
    // the other RVars (image y, batch), then the last pure Var (output
    // channel) in parallel: each task owns its own slice of weights.
    Stage is = intm.update(0);
    const auto pure = nonempty(safe_pure_positions(intm.update_args(0)));
    std::vector<std::string> inner_pure, rvars;
    for (const auto &p : pure)
        if (p != u.name()) inner_pure.push_back(p);
    std::string last;
    if (!inner_pure.empty()) {
        last = inner_pure.back();
        inner_pure.pop_back();
    }
    vectorise(is, u.name(), width);
    for (const auto &d : is.get_schedule().dims())
        if (d.is_rvar()) rvars.push_back(unqualified(d.var));
    std::vector<VarOrRVar> order{Var(u.name() + "_vi")};
    if (!rvars.empty()) order.emplace_back(RVar(rvars[0]));
    for (const auto &p : inner_pure) order.emplace_back(Var(p));
    for (size_t i = 1; i < rvars.size(); i++) order.emplace_back(RVar(rvars[i]));
    if (!last.empty()) order.emplace_back(Var(last));
    // Pure Vars that a scatter LHS leaves out keep their place (after these).
    if (order.size() > 1) is.reorder(order);
    if (!last.empty()) is.parallel(Var(last));  // at root; the caller may move it inside f
    if (debug()) std::fprintf(stderr, "schedule_cpu: rfactor %s.update(%d) over %s\n", f.name().c_str(), k, r.c_str());
    return intm;
}

// An autodiff scatter: the adjoint of a gather such as a convolution's
// input, d_in(r_x - p + r_kx, r_y - p + r_ky, r_c, n) += ..., whose LHS holds
// only RVars. For fixed kernel taps, distinct r_x write distinct elements,
// so the RVar over the consumer's x (run-time extent, in LHS position 0) can
// run in vector lanes, and an RVar standing alone at a channel position can
// run in parallel. Halide proves both (or refuses at lowering, which the
// caller's compile reports); returns false when the pattern is absent.
bool schedule_scatter(Func f, int k, const std::vector<Expr> &lhs, int width) {
    if (lhs.size() < 3) return false;
    Stage s = f.update(k);
    std::string vec, par;
    std::vector<std::string> rvars;
    for (const auto &r : s.get_schedule().rvars()) rvars.push_back(r.var);
    for (const auto &r : s.get_schedule().rvars()) {
        if (!Halide::Internal::is_const(r.extent) && expr_uses_var(lhs[0], r.var) && vec.empty()) vec = r.var;
        for (size_t i = 2; i < lhs.size(); i++) {
            const auto *v = lhs[i].as<Halide::Internal::Variable>();
            if (v && v->name == r.var && par.empty()) par = r.var;
        }
    }
    if (vec.empty()) return false;
    // Loop order: vec innermost, the other RVars in their order, par outermost.
    std::vector<VarOrRVar> order{RVar(vec)};
    for (const auto &r : rvars)
        if (r != vec && r != par) order.emplace_back(RVar(r));
    if (!par.empty()) order.emplace_back(RVar(par));
    s.reorder(order);
    s.split(RVar(vec), RVar(vec + "_vo"), RVar(vec + "_vi"), width, kTail).vectorize(RVar(vec + "_vi"));
    if (!par.empty()) s.parallel(RVar(par));
    if (debug()) std::fprintf(stderr, "schedule_cpu: scatter %s.update(%d): lanes %s, parallel %s\n", f.name().c_str(), k, vec.c_str(), par.c_str());
    return true;
}

}  // namespace segtile::cpu
