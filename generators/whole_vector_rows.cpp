#include "generators/whole_vector_rows.h"

#include <string>

#include "schedules/parameter_adjoints.h"

namespace segtile {

namespace {

using namespace Halide::Internal;
using Halide::Expr;

bool round_up(Function &fn, int lanes) {
    if (fn.updates().size() != 1) return false;
    Definition &d = fn.update(0);
    if (d.values().size() != 1) return false;
    const Add *add = d.values()[0].as<Add>();
    const Call *self = add ? add->a.as<Call>() : nullptr;
    if (!self || self->call_type != Call::Halide || self->name != fn.name()) return false;
    // The innermost RVar of run-time extent that no LHS argument uses: the
    // image x the sum runs over (as schedules/cpu_loops.cpp's reduction_rvar).
    for (auto &rv : d.schedule().rvars()) {
        bool in_lhs = false;
        for (const Expr &a : d.args()) in_lhs = in_lhs || expr_uses_var(a, rv.var);
        if (in_lhs) continue;
        if (is_const(simplify(rv.extent))) return false;
        const Expr r = Variable::make(Halide::Int(32), rv.var);
        const Expr inside = r < rv.min + rv.extent;
        d.values()[0] = add->a + Halide::select(inside, add->b, make_zero(add->b.type()));
        rv.extent = ((rv.extent + (lanes - 1)) / lanes) * lanes;
        return true;
    }
    return false;
}

}  // namespace

int whole_vector_rows(const std::vector<Halide::Func> &outputs, int lanes) {
    std::vector<Function> fs;
    for (const auto &f : outputs)
        if (f.defined()) fs.push_back(f.function());
    int n = 0;
    auto env = build_environment(fs);
    for (const auto &[grad, adjoint] : schedule::parameter_adjoints(env))
        if (round_up(env.at(adjoint), lanes)) n++;
    return n;
}

}  // namespace segtile
