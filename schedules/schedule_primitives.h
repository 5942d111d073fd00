// What the CPU and GPU schedules share: the one tail strategy legal for
// run-time extents, the debug switch, loop-name handling, and which Vars
// of an update may run in parallel or in lanes.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "Halide.h"
#include "spec/environment.h"
#include "spec/kernel_signature.h"

namespace segtile::schedule {

// Extents are run-time values (tile and image sizes), so every split must
// be legal for any extent, including ones below the vector width:
// GuardWithIf always is (RoundUp would constrain input and output sizes,
// ShiftInwards needs extent >= factor and is illegal in updates).
constexpr Halide::TailStrategy kTail = Halide::TailStrategy::GuardWithIf;

// SEGTILE_SCHEDULE_DEBUG=1 prints each scheduling decision to stderr.
inline bool debug() { return environment::schedule_debug(); }

// Loop names of split dims are qualified ("x.x_vi"); scheduling calls take
// the last part and match it as a suffix.
inline std::string unqualified(const std::string &n) { return n.substr(n.rfind('.') + 1); }

// Halide refuses a specialization condition that reads any variable but a
// parameter, and counts let-bound names as variables: an adjoint's RDom
// extent from autodiff is a chain of lets over the image's extent (resnet18
// and add skips untiled: "Specialization condition ... depends on Var or
// RVar t333"). The condition with its lets substituted, or an undefined Expr
// where it still reads a loop variable of `s` (then do not specialize).
inline Halide::Expr specialization_condition(Halide::Stage s, const Halide::Expr &condition) {
    Halide::Expr c = Halide::Internal::substitute_in_all_lets(condition);
    for (const auto &d : s.get_schedule().dims())
        if (Halide::Internal::expr_uses_var(c, d.var)) return Halide::Expr();
    return c;
}

// Per LHS position of an update: the name of the Var there if it is a Var
// (not an RVar) that no other LHS argument uses, else "". Distinct values of
// such a Var write distinct elements, so its loop may run in parallel or in
// vector lanes. RVars and the index expressions of autodiff's scatters
// (2 * r.x + 1, clamps) may collide: those loops stay serial.
inline std::vector<std::string> safe_pure_positions(const std::vector<Halide::Expr> &lhs) {
    std::vector<std::string> names(lhs.size());
    for (size_t i = 0; i < lhs.size(); i++) {
        const auto *v = lhs[i].as<Halide::Internal::Variable>();
        if (!v || v->reduction_domain.defined() || v->param.defined() || v->image.defined()) continue;
        bool elsewhere = false;
        for (size_t j = 0; j < lhs.size(); j++) elsewhere = elsewhere || (j != i && Halide::Internal::expr_uses_var(lhs[j], v->name));
        if (!elsewhere) names[i] = v->name;
    }
    return names;
}

// The non-empty names of v from position `from` on.
inline std::vector<std::string> nonempty(const std::vector<std::string> &v, size_t from = 0) {
    std::vector<std::string> out;
    for (size_t i = from; i < v.size(); i++)
        if (!v[i].empty()) out.push_back(v[i]);
    return out;
}

}  // namespace segtile::schedule
