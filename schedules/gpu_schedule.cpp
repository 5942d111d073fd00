#include "schedules/gpu_schedule.h"

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "schedules/conv_shape.h"
#include "schedules/schedule_primitives.h"

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
using schedule::conv_shaped;
using schedule::pure_lhs;
using schedule::reduction_by_extent;

struct Dim {
    std::string name;
    bool rvar = false;
};

// The loops of a stage, innermost first, without the outermost placeholder.
std::vector<Dim> loops(const Stage &s) {
    std::vector<Dim> d;
    for (const auto &x : s.get_schedule().dims()) {
        const std::string n = unqualified(x.var);
        if (n != Var::outermost().name()) d.push_back({n, x.is_rvar()});
    }
    return d;
}

// The pure Vars of an update whose loops may run in parallel threads.
std::vector<std::string> parallel_vars(const std::vector<Expr> &lhs) {
    return schedule::nonempty(schedule::safe_pure_positions(lhs));
}

bool contains(const std::vector<std::string> &v, const std::string &s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

// Maps loops `par` of `s` to the GPU: every other loop moves inside (serial
// in each thread; moving pure loops outwards past RVars is always legal,
// and the serial loops keep their order), `par` are fused into one loop
// (x innermost: neighbouring threads touch neighbouring pixels) and split
// into blocks of `threads` threads. One flat loop suits both image-shaped
// Funcs and weight-shaped ones (3x3 taps would waste a 2-D thread tile),
// and needs no extents, which are run-time values here.
// Returns the thread loop's name ("" for a single thread).
//
// With `outer_blocks`, the outermost of three or more parallel loops is not
// fused but becomes the blocks' second dimension: its values then come
// from a block index instead of a division of the flat index by the
// product of the inner extents. Where those extents are run-time values
// of the required region (a weight copy's input channels, which follow
// the caller's buffers when the segment's first layer is a conv), Halide
// could not bound that division and sized the copy's output channels from
// the flat loop's extent: 73727 instead of 64, 174 GB for one of VGG16's
// lone conv segments, and no plan fitted (`segtile plan --target cuda`).
std::string map_to_gpu(Stage s, const std::vector<std::string> &par, int threads, const std::string &tag,
                       bool outer_blocks = false) {
    std::vector<VarOrRVar> order;
    std::vector<Dim> parallel;
    for (const auto &d : loops(s)) {
        if (contains(par, d.name)) parallel.push_back(d);
        else order.emplace_back(d.name, d.rvar);
    }
    if (parallel.empty()) {
        s.gpu_single_thread();
        return "";
    }
    for (const auto &d : parallel) order.emplace_back(d.name, d.rvar);
    if (order.size() > 1) s.reorder(order);
    std::optional<Dim> outer;
    if (outer_blocks && parallel.size() >= 3) {
        outer = parallel.back();
        parallel.pop_back();
    }
    VarOrRVar fused(parallel[0].name, parallel[0].rvar);
    bool any_rvar = parallel[0].rvar;
    for (size_t i = 1; i < parallel.size(); i++) {
        any_rvar = any_rvar || parallel[i].rvar;
        VarOrRVar next(tag + "_f" + std::to_string(i), any_rvar);
        s.fuse(fused, VarOrRVar(parallel[i].name, parallel[i].rvar), next);
        fused = next;
    }
    VarOrRVar block(tag + "_b", any_rvar), thread(tag + "_t", any_rvar);
    s.split(fused, block, thread, threads, kTail);
    if (outer) s.gpu_blocks(block, VarOrRVar(outer->name, outer->rvar)).gpu_threads(thread);
    else s.gpu_blocks(block).gpu_threads(thread);
    return thread.name();
}

bool gather_shaped(Func f) {
    if (f.dimensions() < 1 || f.num_update_definitions() < 1) return false;  // a scalar has no thread loop
    for (int k = 0; k < f.num_update_definitions(); k++)
        if (!pure_lhs(f, k)) return false;
    return true;
}

// A gather (every update's LHS its pure Vars: a conv, autodiff's gather for
// a conv's input gradient, an rfactor partial) computed at root runs its
// reduction with the running sum in global memory, a load and a store
// around every multiply-add: Halide cannot keep it in a register, as the
// buffer might alias the inputs. Instead, as in Halide's apps/conv_layer,
// a wrapper (f.in(), the buffer consumers read) is at root and mapped to
// threads, and f is computed per thread in registers. A conv computes a
// block of xb pixels x cb channels per thread, unrolled: each input loaded
// feeds cb multiply-adds and each weight xb. The block rounds up (as the
// CPU's does, cpu_conv.cpp schedule_conv): the extra pixels and
// channels read clamped or bounded sources and are never read.
// A conv's block of xb pixels x cb channels, f computed per thread: a
// constant size (which Halide cannot infer through the fused thread loop's
// divisions), unrolled inside the reduction loops (taps innermost).
void unroll_conv_block(Func f, int xb, int cb) {
    const Var x = f.args()[0], c = f.args()[2];
    for (int i = 0; i < f.dimensions(); i++) f.bound_extent(f.args()[i], i == 0 ? xb : i == 2 ? cb : 1);
    f.unroll(x).unroll(c);
    for (int k = 0; k < f.num_update_definitions(); k++) {
        std::vector<VarOrRVar> inner{x, c};
        for (const auto &r : reduction_by_extent(f.update(k))) inner.emplace_back(RVar(r));
        for (int i = 1; i < f.dimensions(); i++)
            if (i != 2) inner.emplace_back(f.args()[i]);
        f.update(k).reorder(inner).unroll(x).unroll(c);
    }
}

void schedule_in_registers(Func f, const GpuScheduleOptions &o) {
    const bool conv = conv_shaped(f);
    const int xb = conv ? o.conv_block_x : 1, cb = conv ? o.conv_block_channels : 1;
    Func block = f.in();
    block.compute_root();
    std::vector<std::string> par;
    for (const auto &a : block.args()) par.push_back(a.name());
    Var xo(f.name() + "_xo"), xi(f.name() + "_xi"), co(f.name() + "_co"), ci(f.name() + "_ci");
    if (conv) {
        block.split(block.args()[0], xo, xi, xb, TailStrategy::RoundUp)
            .split(block.args()[2], co, ci, cb, TailStrategy::RoundUp);
        par[0] = xo.name();
        par[2] = co.name();
    }
    const std::string thread = map_to_gpu(block, par, o.threads_per_block, block.name() + "_p");
    f.compute_at(block, Var(thread)).store_in(Halide::MemoryType::Register);
    if (conv) {
        block.unroll(xi).unroll(ci);
        unroll_conv_block(f, xb, cb);
    }
    if (debug())
        std::fprintf(stderr, "schedule_gpu: %s in registers per thread, blocks of %d x %d\n", f.name().c_str(), xb, cb);
}

// The RVars that no LHS argument uses (true reduction dimensions, not
// scatter indices) and whose extent is a run-time value: an image, a tile,
// a batch. Innermost first.
std::vector<std::string> image_reduction_rvars(const Stage &s, const std::vector<Expr> &lhs) {
    std::vector<std::string> out;
    for (const auto &r : s.get_schedule().rvars()) {
        bool in_lhs = false;
        for (const auto &e : lhs) in_lhs = in_lhs || expr_uses_var(e, r.var);
        if (!in_lhs && !Halide::Internal::is_const(r.extent)) out.push_back(unqualified(r.var));
    }
    return out;
}

bool associative(const Func &f, int k) {
    return Halide::Internal::prove_associativity(f.name(), f.update_args(k), f.update_values(k).as_vector())
        .associative();
}

// A reduction over an image (dw(kx, ky, ci, co) += sum over x, y, n; a
// bias gradient; a global pool): a weight-shaped output has far fewer
// elements than the GPU has threads, and a thread per element would loop
// over the whole tile. Split the image rows (the second image RVar, y)
// into chunks of `rows` and
// rfactor the chunk index into a pure Var: the partials (one per weight
// element and chunk) run in parallel, and the update left sums the chunks.
// rfactor proves the update associative and throws otherwise; then only a
// split has been made and the caller maps the stage as it is.
Func rfactor_rows(Func f, int k, const std::string &r, const GpuScheduleOptions &o) {
    Stage s = f.update(k);
    Var u(f.name() + "_chunk");
    try {
        s.split(RVar(r), RVar(r + "_ro"), RVar(r + "_ri"), o.rows_per_partial, kTail);
        Func intm = s.rfactor(RVar(r + "_ro"), u);
        if (debug()) std::fprintf(stderr, "schedule_gpu: rfactor %s.update(%d) over %s\n", f.name().c_str(), k, r.c_str());
        return intm;
    } catch (const Halide::Error &e) {
        if (debug()) std::fprintf(stderr, "schedule_gpu: no rfactor for %s: %s\n", f.name().c_str(), e.what());
        return Func();
    }
}

void schedule_update(Func f, int k, const GpuScheduleOptions &o) {
    const std::string tag = f.name() + "_u" + std::to_string(k);
    const auto lhs = f.update_args(k);
    const auto image_r = image_reduction_rvars(f.update(k), lhs);
    if (debug()) {
        std::ostringstream o;
        for (const auto &e : lhs) o << " [" << e << "]";
        o << " =";
        const Halide::Tuple values = f.update_values(k);
        for (const auto &e : values.as_vector()) o << " " << e;
        o << " over";
        for (const auto &r : image_r) o << " " << r;
        std::fprintf(stderr, "schedule_gpu: %s.update(%d)%s\n", f.name().c_str(), k, o.str().c_str());
    }
    // Two or more run-time RVars: a sum over an image plane (weight and bias
    // gradients, global pools). One alone is a sum over channels (an input
    // gradient: image-shaped, parallel enough over its pure Vars; splitting
    // it would multiply a whole tensor by the chunk count) or over a batch.
    if (image_r.size() >= 2) {
        Func intm = rfactor_rows(f, k, image_r[1], o);
        if (intm.defined()) {
            // A parameter's gradient (p_...: weights, biases) only: the
            // global pool's partial (l_gap_sum_intm) has a size Halide
            // cannot infer there.
            if (gather_shaped(intm) && is_parameter_func(f.name())) {
                schedule_in_registers(intm, o);
            } else {
                intm.compute_root();
                std::vector<std::string> args;
                for (const auto &a : intm.args()) args.push_back(a.name());
                map_to_gpu(intm, args, o.threads_per_block, intm.name() + "_p");
                for (int j = 0; j < intm.num_update_definitions(); j++)
                    map_to_gpu(intm.update(j), parallel_vars(intm.update_args(j)), o.threads_per_block,
                               intm.name() + "_u" + std::to_string(j));
            }
        }
    }
    const auto par = parallel_vars(lhs);
    const bool scatter = lhs.empty() || par.empty() || !lhs[0].as<Halide::Internal::Variable>() ||
                         lhs[0].as<Halide::Internal::Variable>()->reduction_domain.defined();
    if (scatter && associative(f, k)) {
        // A scatter (max pool's adjoint: d_in(argmax(r), c, n) += ...) or
        // the final sum of a scalar: the RVars carry the parallelism. Halide
        // makes the additions atomic, so colliding writes are still summed.
        std::vector<std::string> all;
        for (const auto &d : loops(f.update(k))) all.push_back(d.name);
        f.update(k).atomic();
        map_to_gpu(f.update(k), all, o.threads_per_block, tag);
        if (debug()) std::fprintf(stderr, "schedule_gpu: atomic %s.update(%d)\n", f.name().c_str(), k);
        return;
    }
    map_to_gpu(f.update(k), par, o.threads_per_block, tag);
}

// Two or more run-time RVars in an update: a sum over an image plane,
// which schedule_update splits with rfactor.
bool reduces_an_image(Func f) {
    for (int k = 0; k < f.num_update_definitions(); k++)
        if (image_reduction_rvars(f.update(k), f.update_args(k)).size() >= 2) return true;
    return false;
}

// A parameter's copies in a kernel: p_<name> and the bounded wrapper of its
// input buffer, <name>_im (Halide's name for an input buffer's Func; the
// tensors' are in_*_im and grad_out_*_im). Their outermost loop
// (output channels) takes a second block index (map_to_gpu). Image-shaped
// Funcs keep one flat loop: split so, their channel index became the
// division Halide could not bound, and a tiny_cnn tile's buffers grew to
// gigabytes.
bool parameter_copy(const Func &f) {
    // Without the "$3" Halide appends when a process builds the same name twice.
    const std::string n = f.name().substr(0, f.name().find('$'));
    auto starts = [&](const char *p) { return n.rfind(p, 0) == 0; };
    const bool im = n.size() > 3 && n.compare(n.size() - 3, 3, "_im") == 0;
    return f.num_update_definitions() == 0 &&
           (is_parameter_func(n) || (im && !starts("in_") && !starts("grad_") && !starts("labels") && !starts("targets")));
}

void schedule_func(Func f, bool output, const GpuScheduleOptions &o) {
    // Convs only (and rfactor partials, above): a max pool in registers
    // per thread made Halide check its one-point bound at run time, in the
    // kernel, where a failed check is a trap: every call then fails with
    // CUDA_ERROR_LAUNCH_FAILED.
    if (!output && conv_shaped(f) && !reduces_an_image(f)) return schedule_in_registers(f, o);
    f.compute_root();
    std::vector<std::string> args;
    for (const auto &a : f.args()) args.push_back(a.name());
    map_to_gpu(f, args, o.threads_per_block, f.name() + "_p", parameter_copy(f));
    for (int k = 0; k < f.num_update_definitions(); k++) schedule_update(f, k, o);
}

}  // namespace

void schedule_gpu(const std::vector<Func> &outputs, const Halide::Target &target, const GpuScheduleOptions &options) {
    if (!target.has_gpu_feature())
        throw std::invalid_argument("schedule_gpu: target " + target.to_string() + " has no GPU feature");
    std::vector<Halide::Internal::Function> fs;
    std::set<std::string> output_names;
    for (const auto &f : outputs)
        if (f.defined()) {
            fs.push_back(f.function());
            output_names.insert(f.name());
        }
    for (auto &[name, fn] : Halide::Internal::build_environment(fs)) {
        if (fn.has_extern_definition()) Func(fn).compute_root();
        else schedule_func(Func(fn), output_names.count(name) > 0, options);
    }
}

Halide::Target segtile_cuda_target(const Halide::Target &host) {
    return host.with_feature(Halide::Target::CUDA).with_feature(Halide::Target::CUDACapability86);
}

bool cuda_device_usable() {
    try {
        return Halide::host_supports_target_device(segtile_cuda_target(Halide::get_jit_target_from_environment()));
    } catch (const Halide::Error &) {
        return false;
    }
}

}  // namespace segtile
