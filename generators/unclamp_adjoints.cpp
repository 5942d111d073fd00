#include "generators/unclamp_adjoints.h"

#include <map>
#include <optional>
#include <string>

namespace segtile {

namespace {

using namespace Halide::Internal;
using Halide::Expr;

// max(min(r, hi), lo) with r an RVar: Halide::clamp's form.
struct Clamp {
    const Variable *r = nullptr;
    Expr lo, hi;
};

bool match_clamp(const Expr &e, Clamp &out) {
    const Max *mx = e.as<Max>();
    if (!mx) return false;
    const Min *mn = mx->a.as<Min>();
    if (!mn) return false;
    const Variable *v = mn->a.as<Variable>();
    if (!v || !v->reduction_domain.defined()) return false;
    out = {v, mx->b, mn->b};
    return true;
}

bool has_conjunct(const std::vector<Expr> &conjuncts, const Expr &want) {
    for (const Expr &c : conjuncts)
        if (equal(c, want)) return true;
    return false;
}

// Rewrites update k of fn if it has the shape above; returns whether it did.
bool unclamp(Function &fn, int k) {
    Definition &d = fn.update(k);
    if (d.values().size() != 1) return false;
    std::vector<Expr> &args = d.args();
    std::vector<Clamp> clamps(args.size());
    int found = 0;
    for (size_t i = 0; i < args.size(); i++)
        if (match_clamp(args[i], clamps[i])) found++;
    if (found == 0) return false;
    // value = d_f(args) + select(cond, increment, 0)
    const Add *add = d.values()[0].as<Add>();
    if (!add) return false;
    const Call *self = add->a.as<Call>();
    const Select *sel = add->b.as<Select>();
    if (!self || self->call_type != Call::Halide || self->name != fn.name() || self->args.size() != args.size() ||
        !sel || !is_const_zero(sel->false_value))
        return false;
    for (size_t i = 0; i < args.size(); i++)
        if (!equal(self->args[i], args[i])) return false;
    // Each clamped RVar must appear in no other LHS position (so that its
    // bare value picks its own element) and its range must be implied by
    // the select's condition (so that the dropped writes add zero).
    std::vector<Expr> conjuncts;
    split_into_ands(sel->condition, conjuncts);
    Expr predicate = d.predicate();
    std::vector<Expr> new_args = args;
    for (size_t i = 0; i < args.size(); i++) {
        const Clamp &c = clamps[i];
        if (!c.r) continue;
        const Expr r(c.r);
        for (size_t j = 0; j < args.size(); j++)
            if (j != i && expr_uses_var(args[j], c.r->name)) return false;
        if (!has_conjunct(conjuncts, c.lo <= r) || !has_conjunct(conjuncts, r <= c.hi)) return false;
        predicate = predicate && c.lo <= r && r <= c.hi;
        new_args[i] = r;
    }
    // Under the predicate the select's condition holds when it is nothing
    // but the clamps' ranges; otherwise it stays.
    const bool only_ranges = (int)conjuncts.size() == 2 * found;
    d.values()[0] = Call::make(self->type, fn.name(), new_args, Call::Halide, self->func, self->value_index) +
                    (only_ranges ? sel->true_value : Expr(sel));
    d.predicate() = simplify(predicate);
    args = new_args;
    for (auto &dim : d.schedule().dims())
        for (size_t i = 0; i < args.size(); i++)
            if (clamps[i].r && dim.var == clamps[i].r->name) dim.dim_type = Halide::Internal::DimType::PureRVar;
    return true;
}

using RVars = std::map<std::string, const ReductionVariable *>;

// e if it is one of `rvars`, else null.
const ReductionVariable *as_rvar(const Expr &e, const RVars &rvars) {
    const Variable *v = e.as<Variable>();
    auto it = v ? rvars.find(v->name) : rvars.end();
    return it == rvars.end() ? nullptr : it->second;
}

// An LHS argument s * r + q with r, q RVars, s > 0 a constant and q's
// extent s: autodiff's scatter for a gather over non-overlapping windows
// of stride s (a 2x2 max pool's adjoint: d_in(2 r.x + r.z, ...) += ...).
struct StridedWindow {
    const ReductionVariable *r = nullptr, *q = nullptr;
    int stride = 0;
};

StridedWindow strided_window(const Expr &e, const RVars &rvars) {
    StridedWindow w;
    const Add *add = e.as<Add>();
    if (!add) return w;
    for (const auto &[scaled, offset] : {std::make_pair(add->a, add->b), std::make_pair(add->b, add->a)}) {
        const Mul *mul = scaled.as<Mul>();
        const ReductionVariable *r = mul ? as_rvar(mul->a, rvars) : nullptr, *q = as_rvar(offset, rvars);
        const std::optional<int64_t> s = mul ? as_const_int(mul->b) : std::nullopt;
        const std::optional<int64_t> extent = q ? as_const_int(simplify(q->extent)) : std::nullopt;
        if (r && q && r != q && s && *s > 0 && extent && *extent == *s) return {r, q, (int)*s};
    }
    return w;
}

// The pure form of fn (see the header), or an undefined Func.
Halide::Func pure_form(const Function &fn) {
    if (fn.outputs() != 1 || fn.updates().size() != 1 || !is_const_zero(fn.definition().values()[0])) return {};
    const Definition &d = fn.update(0);
    const std::vector<Expr> &args = d.args();
    if (d.values().size() != 1 || args.size() != fn.args().size()) return {};
    const Add *add = d.values()[0].as<Add>();
    const Call *self = add ? add->a.as<Call>() : nullptr;
    if (!self || self->call_type != Call::Halide || self->name != fn.name()) return {};
    for (size_t i = 0; i < args.size(); i++)
        if (!equal(self->args[i], args[i])) return {};
    // Every LHS argument the pure Var of its position, a bare RVar, or a
    // window s * r + q (q an RVar of extent s: each element once), every
    // RVar in exactly one argument: each point of the domain writes its
    // own element. Decoded, r and q are functions of the pure Var x there.
    RVars rvars;
    for (const auto &rv : d.schedule().rvars()) rvars[rv.var] = &rv;
    std::map<std::string, Expr> bare, clamped;
    Expr inside = Halide::Internal::const_true();
    auto decode = [&](const ReductionVariable &r, const Expr &value) {
        bare[r.var] = value;
        clamped[r.var] = Halide::clamp(value, r.min, r.min + r.extent - 1);
        inside = inside && r.min <= value && value < r.min + r.extent;
    };
    for (const auto &[name, rv] : rvars) {
        int uses = 0;
        for (const auto &a : args) uses += expr_uses_var(a, name);
        if (uses > 1) return {};  // d(r.x, r.x) writes a diagonal, not a point per (x, y)
    }
    for (size_t i = 0; i < args.size(); i++) {
        const Expr x = Variable::make(Halide::Int(32), fn.args()[i]);
        if (const ReductionVariable *r = as_rvar(args[i], rvars)) {
            decode(*r, x);
            continue;
        }
        if (const Variable *v = args[i].as<Variable>()) {
            if (v->name != fn.args()[i]) return {};
            continue;
        }
        const StridedWindow w = strided_window(args[i], rvars);
        if (!w.r) return {};
        // x = s * r + q, q in [q0, q0 + s): r = (x - q0) / s, q = q0 + (x - q0) % s.
        const Expr from = x - w.q->min;
        decode(*w.r, from / w.stride);
        bare[w.q->var] = clamped[w.q->var] = w.q->min + from % w.stride;
    }
    if (bare.size() != rvars.size()) return {};
    struct CallsSelf : IRVisitor {
        std::string name;
        bool found = false;
        using IRVisitor::visit;
        void visit(const Call *c) override {
            found = found || c->name == name;
            IRVisitor::visit(c);
        }
    } calls;
    calls.name = fn.name();
    add->b.accept(&calls);
    if (calls.found) return {};
    const Expr cond = simplify(inside && substitute(bare, d.predicate()));
    const Expr value = substitute(clamped, add->b);
    std::vector<Halide::Var> vars;
    for (const auto &a : fn.args()) vars.emplace_back(a);
    Halide::Func g(fn.name() + "_pw");
    g(vars) = Halide::select(cond, value, make_zero(value.type()));
    return g;
}

std::vector<Function> functions(const std::vector<Halide::Func> &outputs) {
    std::vector<Function> fs;
    for (const auto &f : outputs)
        if (f.defined()) fs.push_back(f.function());
    return fs;
}

}  // namespace

int pure_pointwise_adjoints(const std::vector<Halide::Func> &outputs) {
    const std::vector<Function> fs = functions(outputs);
    auto env = build_environment(fs);
    std::vector<std::pair<Function, Function>> pure;  // (adjoint, its pure form)
    for (auto &[name, fn] : env) {
        bool output = false;
        for (const auto &o : fs) output = output || o.same_as(fn);
        if (output) continue;
        const Halide::Func g = pure_form(fn);
        if (g.defined()) pure.emplace_back(fn, g.function());
    }
    // Every caller, the pure forms included (one may read another adjoint).
    std::vector<Function> callers;
    for (auto &[name, fn] : env) callers.push_back(fn);
    for (auto &[fn, g] : pure) callers.push_back(g);
    for (auto &h : callers)
        for (auto &[fn, g] : pure)
            if (!h.same_as(fn)) h.substitute_calls(fn, g);
    return (int)pure.size();
}

int likely_innermost_clamps(const std::vector<Halide::Func> &outputs) {
    // max(min(x, hi), lo) with x the Func's innermost pure Var, untagged.
    struct Tag : IRMutator {
        std::string x;
        int tagged = 0;
        using IRMutator::visit;
        Expr visit(const Max *mx) override {
            const Min *mn = mx->a.as<Min>();
            const Variable *v = mn ? mn->a.as<Variable>() : nullptr;
            if (!v || v->name != x || v->reduction_domain.defined()) return IRMutator::visit(mx);
            tagged++;
            return Max::make(Min::make(Halide::likely(mn->a), mutate(mn->b)), mutate(mx->b));
        }
    } tag;
    for (auto &[name, fn] : build_environment(functions(outputs))) {
        if (fn.args().empty() || fn.is_wrapper() || fn.has_extern_definition()) continue;
        tag.x = fn.args()[0];
        fn.mutate(&tag);
    }
    return tag.tagged;
}

int unclamp_bounded_adjoints(const std::vector<Halide::Func> &outputs) {
    int n = 0;
    for (auto &[name, fn] : build_environment(functions(outputs)))
        for (int k = 0; k < (int)fn.updates().size(); k++) n += unclamp(fn, k) ? 1 : 0;
    return n;
}

}  // namespace segtile
