#include "autoscheduler/cpu_schedule.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "autoscheduler/schedule_primitives.h"

namespace segtile {

using Halide::Expr;
using Halide::Func;
using Halide::RVar;
using Halide::Stage;
using Halide::TailStrategy;
using Halide::Var;
using Halide::VarOrRVar;
using Halide::Internal::expr_uses_var;

namespace {

using schedule::debug;
using schedule::kTail;
using schedule::unqualified;

// Per LHS position of an update: the name of the Var there if it is a Var
// (not an RVar) that no other LHS argument uses, else "". Distinct values of
// such a Var write distinct elements, so its loop may run in parallel or in
// vector lanes. RVars and the index expressions of autodiff's scatters
// (2 * r.x + 1, clamps) may collide: those loops stay serial.
std::vector<std::string> safe_pure_positions(const std::vector<Expr> &lhs) {
    std::vector<std::string> names(lhs.size());
    for (size_t i = 0; i < lhs.size(); i++) {
        const auto *v = lhs[i].as<Halide::Internal::Variable>();
        if (!v || v->reduction_domain.defined() || v->param.defined() || v->image.defined()) continue;
        bool elsewhere = false;
        for (size_t j = 0; j < lhs.size(); j++) elsewhere = elsewhere || (j != i && expr_uses_var(lhs[j], v->name));
        if (!elsewhere) names[i] = v->name;
    }
    return names;
}

std::vector<std::string> nonempty(const std::vector<std::string> &v, size_t from = 0) {
    std::vector<std::string> out;
    for (size_t i = from; i < v.size(); i++)
        if (!v[i].empty()) out.push_back(v[i]);
    return out;
}

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

void schedule_func(Func f, const Halide::Target &target) {
    f.compute_root();
    const int width = target.natural_vector_size(f.type());
    if (f.dimensions() > 0) {
        std::vector<std::string> outer;
        for (int i = 1; i < f.dimensions(); i++) outer.push_back(f.args()[i].name());
        vectorise(f, f.args()[0].name(), width);
        parallelise(f, outer);
    }
    for (int k = 0; k < f.num_update_definitions(); k++) {
        const auto lhs = f.update_args(k);
        const auto safe = safe_pure_positions(lhs);
        bool constant = true;
        const std::string r = reduction_rvar(f.update(k), lhs, constant);
        if (debug()) {
            std::ostringstream o;
            for (const auto &e : lhs) o << " [" << e << "]";
            o << " dims";
            for (const auto &d : f.update(k).get_schedule().dims()) o << " " << d.var;
            std::fprintf(stderr, "schedule_cpu: %s.update(%d) lhs%s\n", f.name().c_str(), k, o.str().c_str());
        }
        // rfactor where lanes along dimension 0 are useless: parameter
        // gradients (dimension 0 is a kernel tap) and LHS without a pure
        // Var there. A tensor's adjoint (autodiff's gather for a conv
        // input, over taps and channels) vectorises along image x instead.
        const bool param_grad = f.name().rfind("p_", 0) == 0;
        const bool try_rfactor = !r.empty() && ((!constant && param_grad) || safe.empty() || safe[0].empty());
        Func intm = try_rfactor ? rfactor_reduction(f, k, r, width) : Func();
        // What is left (or was there): lanes over dimension 0 when the LHS
        // holds it as a pure Var, parallel over the other pure Vars.
        const auto rest = nonempty(safe, 1);
        if (!safe.empty() && !safe[0].empty()) vectorise(f.update(k), safe[0], width);
        const std::string fused = parallelise(f.update(k), rest);
        // The rfactor partials per iteration of that parallel loop (one row
        // of a weight gradient), not `width` copies of the whole gradient.
        if (intm.defined() && !fused.empty()) intm.compute_at(f, Var(fused));
        if (!try_rfactor && (safe.empty() || safe[0].empty()) && rest.empty() && !schedule_scatter(f, k, lhs, width))
            f.update(k).unscheduled();
    }
}

}  // namespace

void schedule_cpu(const std::vector<Func> &outputs, const Halide::Target &target) {
    std::vector<Halide::Internal::Function> fs;
    for (const auto &f : outputs)
        if (f.defined()) fs.push_back(f.function());
    for (auto &[name, fn] : Halide::Internal::build_environment(fs)) {
        if (fn.has_extern_definition()) Func(fn).compute_root();
        else schedule_func(Func(fn), target);
    }
}

}  // namespace segtile
