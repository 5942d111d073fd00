// What the CPU schedule computes inline or per band of a conv: pointwise
// Funcs read once, views, a conv's producers.
#include "schedules/cpu_parts.h"

#include <algorithm>
#include <cstdio>

namespace segtile::cpu {


// Calls in update k of fn at the update's own LHS point, where every RVar
// is in the LHS (no reduction: each read is one write), e.g. the unclamped
// adjoint d_f(r.x, r.y, c, n) += select(inside, d_g(r.x, r.y, c, n), 0).
std::vector<std::string> pointwise_reads(const Halide::Internal::Function &fn, int k) {
    using namespace Halide::Internal;
    const Definition &d = fn.update(k);
    for (const auto &rv : d.schedule().rvars()) {
        bool in_lhs = false;
        for (const auto &a : d.args()) in_lhs = in_lhs || expr_uses_var(a, rv.var);
        if (!in_lhs) return {};
    }
    struct Find : IRVisitor {
        const std::vector<Expr> *lhs;
        std::vector<std::string> found;
        using IRVisitor::visit;
        void visit(const Call *c) override {
            bool same = c->call_type == Call::Halide && c->args.size() == lhs->size();
            for (size_t i = 0; same && i < c->args.size(); i++) same = equal(c->args[i], (*lhs)[i]);
            if (same) found.push_back(c->name);
            IRVisitor::visit(c);
        }
    } find;
    find.lhs = &d.args();
    for (const auto &v : d.values()) v.accept(&find);
    return find.found;
}

std::map<std::string, Callers> call_sites(const std::map<std::string, Halide::Internal::Function> &env) {
    // Call sites per callee, and those at an index divided by a constant,
    // directly or through the lets that hold a definition's common
    // subexpressions (tracked, not substituted: substituting every let can
    // blow an autodiff expression up; Darknet19's step compiled 30% slower).
    struct Count : Halide::Internal::IRVisitor {
        std::map<std::string, int> sites, coarse;
        std::set<std::string> divided;  // lets whose value divides
        bool divides(const Expr &e) {
            struct Find : IRVisitor {
                const std::set<std::string> *divided;
                bool found = false;
                using IRVisitor::visit;
                void visit(const Halide::Internal::Div *) override { found = true; }
                void visit(const Halide::Internal::Variable *v) override { found = found || divided->count(v->name); }
            } find;
            find.divided = &divided;
            e.accept(&find);
            return find.found;
        }
        using IRVisitor::visit;
        void visit(const Halide::Internal::Let *l) override {
            if (divides(l->value)) divided.insert(l->name);
            IRVisitor::visit(l);
        }
        void visit(const Halide::Internal::Call *c) override {
            if (c->call_type == Halide::Internal::Call::Halide) {
                sites[c->name]++;
                coarse[c->name] += std::any_of(c->args.begin(), c->args.end(), [&](const Expr &a) { return divides(a); });
            }
            IRVisitor::visit(c);
        }
    };
    std::map<std::string, Callers> out;
    for (const auto &[name, fn] : env) {
        Count count;
        fn.accept(&count);
        for (const auto &[callee, n] : count.coarse) out[callee].coarse_sites += n;
        const bool pure = !fn.has_update_definition();
        for (const auto &[callee, n] : count.sites) {
            out[callee].sites += n;
            out[callee].pure_callers_only = out[callee].pure_callers_only && pure;
            out[callee].by.insert(name);
        }
        for (int k = 0; k < (int)fn.updates().size(); k++)
            for (const auto &callee : pointwise_reads(fn, k)) out[callee].pointwise_update_sites++;
    }
    return out;
}

// A pure Func read at one call site, by a pure Func or by an update at its
// own LHS point, is computed inline there: a bounded copy, a relu,
// autodiff's pointwise adjoints, the input wrappers, the seeded output
// gradient that an unclamped adjoint adds up. Each value is then computed
// once, as before, without a pass over memory and a buffer of its own.
// Funcs read by reductions stay at root (inlined into a conv's taps they
// would be recomputed per tap).
bool read_once_pointwise(const Callers &c) {
    return c.sites == 1 && (c.pure_callers_only || c.pointwise_update_sites == 1);
}

// Halide calls in a pure Func's definition.
int calls_in(const Halide::Internal::Function &fn) {
    struct Count : Halide::Internal::IRVisitor {
        int n = 0;
        using IRVisitor::visit;
        void visit(const Halide::Internal::Call *c) override {
            n += c->call_type == Halide::Internal::Call::Halide || c->call_type == Halide::Internal::Call::Image;
            IRVisitor::visit(c);
        }
    } count;
    for (const auto &v : fn.values()) v.accept(&count);
    return count.n;
}

bool inline_pointwise(Func f, bool output, const Callers &c) {
    if (output || f.has_update_definition() || !read_once_pointwise(c)) return false;
    // Read at x / s, each value is needed s^2 times: a Func that gathers
    // several points (a max pool's argmax over its 4 taps, read by the
    // pool's adjoint in pure form, unclamp_adjoints.h) is computed once at
    // root instead of s^2 times inlined.
    if (c.coarse_sites > 0 && calls_in(f.function()) > 1) return false;
    f.compute_inline();
    return true;
}

// What f reads if f is a view: f(x, y, ...) = g(s0*x + o0, s1*y + o1, ...),
// each argument of g f's own Var at the same position times a constant
// plus a constant (a copy, or a strided conv's phase of its input,
// generators/layers/convolution.h). Null otherwise.
const Halide::Internal::Call *view_of(const Halide::Internal::Function &f) {
    using namespace Halide::Internal;
    if (f.has_update_definition() || f.outputs() != 1 || f.has_extern_definition()) return nullptr;
    const auto *call = f.values()[0].as<Call>();
    if (!call || (call->call_type != Call::Halide && call->call_type != Call::Image) ||
        call->args.size() != f.args().size())
        return nullptr;
    for (size_t i = 0; i < call->args.size(); i++) {
        const Expr &a = call->args[i];
        const std::string &v = f.args()[i];
        // a = o + s*v with o and s constants, s nonzero.
        const Expr o = simplify(substitute(v, 0, a)), s = simplify(substitute(v, 1, a) - o);
        if (!is_const(o) || !is_const(s) || is_const_zero(s)) return nullptr;
        if (!can_prove(a == o + s * Variable::make(Halide::Int(32), v))) return nullptr;
    }
    return call;
}

// A view of a Func that is computed in memory (a buffer, a Func with
// updates, or one that is neither a view nor inlined): reading that Func
// in the view's place costs an index computation, so the view is inlined
// at any number of call sites. Autodiff writes a copy of the adjoint per
// update of a Func with several (a strided conv's phases), each reading
// the next; at root each was a pass over memory, and so was each phase
// of a strided conv's input.
bool inline_view(Func f, bool output, const std::map<std::string, Halide::Internal::Function> &env,
                 const std::map<std::string, Callers> &callers) {
    using Halide::Internal::Call;
    if (output) return false;
    const Call *call = view_of(f.function());
    for (int hops = 0; call && hops < 64; hops++) {
        if (call->call_type == Call::Image) break;
        const auto g = env.find(call->name);
        if (g == env.end()) return false;
        if (g->second.has_update_definition() || g->second.has_extern_definition()) break;
        const Call *next = view_of(g->second);
        if (!next) {
            const auto c = callers.find(call->name);
            if (c != callers.end() && read_once_pointwise(c->second)) return false;  // inlined
            break;
        }
        call = next;
    }
    if (!call) return false;
    f.compute_inline();
    return true;
}

// Producers computed per band of their conv's rows (compute_at fusion
// inside a tile): a pure tensor Func read by one conv-shaped Func only (a
// bounded copy of a segment's input, a leaky ReLU of a batch norm, an
// output gradient's pointwise adjoint), which at root is written to memory
// whole and read back by the conv. Per band it stays in L2/L3 between the
// two, and its buffer is one band per worker. Backward kernels gain
// little: their recomputed activations are read by a conv and by a weight
// gradient, so they stay at root. A producer read by a weight gradient
// alone stays at root too: per band of the gradient's image rows it runs
// as parallel tasks inside a serial loop, no faster and sometimes slower
// than one streaming pass at root. Returns producer -> conv.
std::map<std::string, std::string> band_producers(const std::map<std::string, Halide::Internal::Function> &env,
                                                  const std::map<std::string, Callers> &callers,
                                                  const std::set<std::string> &outputs) {
    std::map<std::string, std::string> out;
    for (const auto &[name, c] : callers) {
        if (c.by.size() != 1 || is_parameter_func(name)) continue;
        const auto g = env.find(name), conv = env.find(*c.by.begin());
        if (g == env.end() || conv == env.end() || outputs.count(name) || outputs.count(conv->first)) continue;
        const auto &p = g->second;
        // Views are inlined (inline_view), whoever reads them.
        if (p.has_update_definition() || p.has_extern_definition() || p.args().size() < 3 || view_of(p) ||
            conv->second.has_extern_definition() || !conv_shaped(Func(conv->second)))
            continue;
        out[name] = conv->first;
    }
    return out;
}

}  // namespace segtile::cpu
