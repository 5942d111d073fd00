#include "generators/unclamp_adjoints.h"

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

}  // namespace

int unclamp_bounded_adjoints(const std::vector<Halide::Func> &outputs) {
    std::vector<Function> fs;
    for (const auto &f : outputs)
        if (f.defined()) fs.push_back(f.function());
    int n = 0;
    for (auto &[name, fn] : build_environment(fs))
        for (int k = 0; k < (int)fn.updates().size(); k++) n += unclamp(fn, k) ? 1 : 0;
    return n;
}

}  // namespace segtile
