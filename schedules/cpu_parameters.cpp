// Parameter-shaped Funcs (copies, adjoints, gradients): their constant
// extents and their schedule.
#include "schedules/cpu_parts.h"

#include <algorithm>
#include <optional>

namespace segtile::cpu {

// A parameter's shape, where the pipeline states it: segtile's parameter
// copies clamp every index to the parameter's extents (generators/
// kernels.cpp, wrap_param: p(v) = w(clamp(v_i, 0, k_i - 1))). Empty otherwise.
std::vector<int> clamped_extents(const Halide::Internal::Function &f) {
    using namespace Halide::Internal;
    if (f.has_update_definition() || f.outputs() != 1) return {};
    const auto *call = f.values()[0].as<Call>();
    if (!call || call->args.size() != f.args().size()) return {};
    std::vector<int> out;
    for (size_t i = 0; i < call->args.size(); i++) {
        const auto *mx = call->args[i].as<Max>();
        const auto *mn = mx ? mx->a.as<Min>() : nullptr;
        const auto *v = mn ? mn->a.as<Variable>() : nullptr;
        const std::optional<int64_t> hi = mn ? as_const_int(mn->b) : std::nullopt;
        if (!v || v->name != f.args()[i] || !is_const_zero(mx->b) || !hi) return {};
        out.push_back((int)*hi + 1);
    }
    return out;
}

// Extents of a Func bounded to [0, e) in every dimension (Func::bound), or
// empty.
std::vector<int> bounded_extents(const Halide::Internal::Function &f) {
    std::vector<int> out(f.args().size(), 0);
    for (const auto &b : f.schedule().bounds()) {
        const auto at = std::find(f.args().begin(), f.args().end(), b.var);
        const auto e = b.extent.defined() ? Halide::Internal::as_const_int(b.extent) : std::nullopt;
        if (at == f.args().end() || !b.min.defined() || !Halide::Internal::is_const_zero(b.min) || !e) return {};
        out[at - f.args().begin()] = (int)*e;
    }
    for (int e : out)
        if (e <= 0) return {};
    return out;
}

// The parameter-shaped Funcs: each parameter's copy p_X, its adjoint and
// the gradient output grad_X, with their constant extents where the copy
// or the gradient output states them (segtile clamps the copy and bounds
// the gradient). A kernel that computes a gradient but never reads the
// parameter (the first layer's weights: no input gradient) has no copy:
// its adjoint and gradient are listed all the same, with no extents if
// nothing states them, so that they are not scheduled as tensors (a task
// per 3-wide row). Adjoints are found by structure (parameter_adjoints.h).
std::map<std::string, std::vector<int>> parameter_shapes(const std::map<std::string, Halide::Internal::Function> &env) {
    std::map<std::string, std::vector<int>> out;
    for (const auto &[grad, adjoint] : schedule::parameter_adjoints(env))
        out[grad] = out[adjoint] = bounded_extents(env.at(grad));
    for (const auto &[name, fn] : env) {
        if (!is_parameter_func(name) || out.count(name)) continue;
        const std::vector<int> e = clamped_extents(fn);
        if (!e.empty()) out[name] = e;
    }
    return out;
}

// A parameter-shaped Func's pure definition (a copy, a zero init): lanes
// along its first dimension, as wide as its rows where known (a 3x3
// kernel's rows are 3 wide: lanes of the vector width would run them in
// scalar tails, a loop per row), in parallel over its last dimension
// (output channels; a bias stays serial), tasks of whole kernels.
void schedule_parameter(Func f, int width, const std::vector<int> &extents) {
    const int lanes = !extents.empty() && extents[0] < width ? extents[0] : width;
    vectorise(f, f.args()[0].name(), lanes);
    if (f.dimensions() > 1) parallelise(f, {f.args().back().name()});
}

}  // namespace segtile::cpu
