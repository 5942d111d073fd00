// Which Funcs of a kernel pipeline are its parameters' adjoints, found by
// structure: a parameter's gradient output grad_X reads the adjoint of the
// parameter's copy p_X (generators/kernels.cpp). Not by name: Halide makes
// a repeated name unique, so a kernel's names depend on what its process
// built before. Autodiff names the adjoint p_X_0_d_def__, but that comes
// out as p_X$4_0_d_def__ where the copy was p_X$4, and as
// p_X_4_0_d_def__$2 where that name was taken too; matched by name, a
// planned JIT step (whose planner lowers kernels first) loses most of its
// weight gradients' shapes.
#pragma once

#include <map>
#include <string>

#include "Halide.h"
#include "spec/kernel_signature.h"

namespace segtile::schedule {

// Gradient output -> the adjoint it reads, among the Funcs of `env`
// (Halide::Internal::build_environment of the kernel's outputs).
inline std::map<std::string, std::string> parameter_adjoints(
    const std::map<std::string, Halide::Internal::Function> &env) {
    using namespace Halide::Internal;
    std::map<std::string, std::string> out;
    for (const auto &[name, fn] : env) {
        if (name.rfind("grad_", 0) != 0 || fn.has_update_definition() || fn.has_extern_definition() ||
            fn.outputs() != 1)
            continue;
        // An input's gradient (grad_in_X) reads a source's adjoint instead.
        const auto *call = fn.values()[0].as<Call>();
        if (call && call->call_type == Call::Halide && is_parameter_func(call->name)) out[name] = call->name;
    }
    return out;
}

}  // namespace segtile::schedule
