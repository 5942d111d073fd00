// What the CPU and GPU schedules share: the one tail strategy legal for
// run-time extents, the debug switch, and loop-name handling.
#pragma once

#include <cstdlib>
#include <string>

#include "Halide.h"
#include "spec/environment.h"

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

}  // namespace segtile::schedule
