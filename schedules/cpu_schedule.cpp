#include "schedules/cpu_schedule.h"

#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "schedules/cpu_parts.h"

namespace segtile {

namespace cpu {
namespace {

// `output`: f is a pipeline output, which a wrapper would not replace.
// `param`: f's entry in parameter_shapes, null for a tensor.
void schedule_func(Func f, bool output, const Halide::Target &target, const std::vector<int> *param,
                   bool band_producers, std::map<std::string, ConvBand> &bands) {
    const int width = target.natural_vector_size(f.type());
    if (!output && conv_shaped(f)) {
        bands[f.name()] = schedule_conv(f, target, band_producers);
        return;
    }
    if (weight_grad_shaped(f)) {
        const std::vector<int> extents = param ? *param : std::vector<int>{};
        schedule_weight_grad(f, target, extents);
        schedule_parameter(f, width, extents);  // its zero init
        return;
    }
    f.compute_root();
    if (f.dimensions() > 0 && param) schedule_parameter(f, width, *param);
    else if (f.dimensions() > 0) {
        // Parallel tasks big enough to outweigh the thread pool's cost per
        // task: blocks of rows and channels (all of y, c, n fused would
        // make a task per row, of 2 to 8 vectors).
        vectorise(f, f.args()[0].name(), width);
        std::vector<std::string> outer;
        for (int i = 1; i < f.dimensions(); i++) outer.push_back(f.args()[i].name());
        parallel_blocks(f, f, outer);
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
        const bool param_grad = is_parameter_func(f.name());
        // A constant reduction shorter than a vector (a strided conv's phase
        // taps, scattered into the weight's adjoint) gains nothing from
        // lanes, and its partials would be allocated per parallel task.
        bool short_reduction = false;
        for (const auto &rv : f.update(k).get_schedule().rvars())
            if (rv.var == r) short_reduction = Halide::Internal::can_prove(rv.extent < width);
        const bool try_rfactor =
            !r.empty() && !short_reduction && ((!constant && param_grad) || safe.empty() || safe[0].empty());
        Func intm = try_rfactor ? rfactor_reduction(f, k, r, width) : Func();
        // What is left (or was there): lanes over dimension 0 when the LHS
        // holds it as a pure Var, parallel over the other pure Vars.
        const auto rest = nonempty(safe, 1);
        const std::string r0 = pure_rvar_at_0(f.update(k), lhs);
        if (!safe.empty() && !safe[0].empty()) vectorise(f.update(k), safe[0], width);
        else if (!r0.empty())
            f.update(k).split(RVar(r0), RVar(r0 + "_vo"), RVar(r0 + "_vi"), width, kTail).vectorize(RVar(r0 + "_vi"));
        // Without partials, in blocks of rows and channels as the pure
        // definition; the partials are computed per task of the fused loop.
        const std::string fused = intm.defined() ? parallelise(f.update(k), rest) : parallel_blocks(f.update(k), f, rest);
        // The rfactor partials per iteration of that parallel loop (one row
        // of a weight gradient), not `width` copies of the whole gradient.
        if (intm.defined() && !fused.empty()) intm.compute_at(f, Var(fused));
        if (!try_rfactor && r0.empty() && (safe.empty() || safe[0].empty()) && rest.empty() &&
            !schedule_scatter(f, k, lhs, width))
            f.update(k).unscheduled();
    }
}

}  // namespace
}  // namespace cpu

void schedule_cpu(const std::vector<Halide::Func> &outputs, const Halide::Target &target) {
    using namespace cpu;
    std::vector<Halide::Internal::Function> fs;
    for (const auto &f : outputs)
        if (f.defined()) fs.push_back(f.function());
    const auto env = Halide::Internal::build_environment(fs);
    const auto callers = call_sites(env);
    const auto shapes = parameter_shapes(env);
    std::set<std::string> output_names;  // a wrapper would not replace them
    for (const auto &f : fs) output_names.insert(f.name());
    const auto fused = band_producers(env, callers, output_names);
    std::set<std::string> banded;                  // convs with producers per band
    for (const auto &[producer, conv] : fused) banded.insert(conv);
    std::map<std::string, ConvBand> bands;        // conv -> its block
    std::vector<std::pair<Func, std::string>> at;  // producer, conv
    for (auto &[name, fn] : env) {
        if (fn.has_extern_definition()) {
            Func(fn).compute_root();
            continue;
        }
        const bool output = output_names.count(name) > 0;
        const auto c = callers.find(name);
        if (c != callers.end() && inline_pointwise(Func(fn), output, c->second)) continue;
        if (inline_view(Func(fn), output, env, callers)) continue;
        if (const auto b = fused.find(name); b != fused.end()) {
            Func p(fn);
            vectorise(p, p.args()[0].name(), target.natural_vector_size(p.type()));
            at.emplace_back(p, b->second);
            continue;
        }
        const auto e = shapes.find(name);
        schedule_func(Func(fn), output, target, e == shapes.end() ? nullptr : &e->second, banded.count(name) > 0, bands);
    }
    for (auto &[p, conv] : at) {
        const auto b = bands.find(conv);
        if (b == bands.end() || b->second.loop.empty()) {
            p.compute_root();
            continue;
        }
        p.compute_at(b->second.block, Var(b->second.loop));
        if (debug()) std::fprintf(stderr, "schedule_cpu: %s per band of %s\n", p.name().c_str(), conv.c_str());
    }
}

}  // namespace segtile
