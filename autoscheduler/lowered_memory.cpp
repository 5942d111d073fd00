#include "autoscheduler/lowered_memory.h"
#include "spec/environment.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

namespace segtile {

namespace {

using namespace Halide::Internal;
using Halide::Expr;

// Halide puts constant-size allocations up to this size on the stack
// (CodeGen_Posix; runtime/pseudostack.cpp's heap_threshold): not heap.
constexpr int64_t kStackBytes = 16 * 1024;

// Whether Halide's codegen backs an allocation of `bytes` (nullopt: not
// known here) with halide_malloc. Stack allocations of run-time size go to a
// pseudostack that is heap-backed beyond 16 KiB (runtime/pseudostack.cpp).
bool goes_to_heap(const Allocate *op, std::optional<int64_t> bytes) {
    if (op->new_expr.defined() || op->memory_type == Halide::MemoryType::Register) return false;
    const bool constant = op->constant_allocation_size() > 0;
    if (op->memory_type == Halide::MemoryType::Stack) return !constant && (!bytes || *bytes > kStackBytes);
    return !(constant && bytes && *bytes <= kStackBytes);
}

// Output buffers may be named after a uniquified Func ("grad_b$1.extent.0"):
// the argument's name is the part before "$".
std::string without_suffix(const std::string &name) {
    const size_t dollar = name.find('$');
    if (dollar == std::string::npos) return name;
    const size_t dot = name.find('.', dollar);
    return name.substr(0, dollar) + (dot == std::string::npos ? "" : name.substr(dot));
}

// Replaces buffer-shape intrinsics (_halide_buffer_get_min(b.buffer, d), ...)
// by the call's values.
// and variables with known values by constants of their own type.
class BindBuffers : public IRMutator {
public:
    BindBuffers(const KernelCall &c, const std::map<std::string, int64_t> &values) : call_(c), values_(values) {}

private:
    using IRMutator::visit;
    const KernelCall &call_;
    const std::map<std::string, int64_t> &values_;

    Expr visit(const Variable *op) override {
        auto it = values_.find(op->name);
        if (it == values_.end()) it = values_.find(without_suffix(op->name));
        return it == values_.end() ? Expr(op) : make_const(op->type, it->second);
    }

    Expr visit(const Call *op) override {
        if (op->name.rfind("_halide_buffer_get_", 0) != 0 || op->args.empty()) return IRMutator::visit(op);
        const auto *v = op->args[0].as<Variable>();
        if (!v) return IRMutator::visit(op);
        std::string name = v->name;
        if (name.size() > 7 && name.compare(name.size() - 7, 7, ".buffer") == 0) name.resize(name.size() - 7);
        auto it = call_.buffers.find(without_suffix(name));
        if (it == call_.buffers.end()) return IRMutator::visit(op);
        const auto &dims = it->second;
        const std::string what = op->name.substr(19);
        if (what == "dimensions") return Halide::Internal::make_const(op->type, (int64_t)dims.size());
        if (op->args.size() < 2) return IRMutator::visit(op);
        const auto d = as_const_int(op->args[1]);
        if (!d || *d < 0 || *d >= (int64_t)dims.size()) return IRMutator::visit(op);
        if (what == "min") return make_const(op->type, dims[*d].first);
        if (what == "extent") return make_const(op->type, dims[*d].second);
        if (what == "max") return make_const(op->type, dims[*d].first + dims[*d].second - 1);
        if (what == "stride") {  // dense, x innermost
            int64_t s = 1;
            for (int64_t k = 0; k < *d; k++) s *= dims[k].second;
            return make_const(op->type, s);
        }
        return IRMutator::visit(op);
    }
};

// Walks the lowered body in program order, tracking live heap bytes.
class PeakWalker : public IRVisitor {
public:
    PeakWalker(const KernelCall &c, const std::map<std::string, Halide::Internal::LoweredFunc> &functions, bool device)
        : call_(c), functions_(functions), bind_(c, env_), device_(device) {
        for (const auto &[name, value] : c.scalars) env_[name] = value;
        for (const auto &[name, dims] : c.buffers)
            for (size_t d = 0; d < dims.size(); d++) {
                const std::string p = name + ".";
                env_[p + "min." + std::to_string(d)] = dims[d].first;
                env_[p + "extent." + std::to_string(d)] = dims[d].second;
            }
    }
    int64_t peak = 0, live = 0;
    int unknown = 0;
    bool overflows = false;  // some index arithmetic of this call exceeds 32 bits

private:
    using IRVisitor::visit;
    const KernelCall &call_;
    const std::map<std::string, Halide::Internal::LoweredFunc> &functions_;  // parallel loop bodies, by name
    std::map<std::string, int64_t> env_;  // names with known values (declared before bind_, which reads it)
    BindBuffers bind_;
    std::map<std::string, int64_t> sizes_;  // live heap allocations
    bool device_;        // count device buffers: Allocates outside GPU loops
    int gpu_depth_ = 0;  // inside GPU loops: registers and shared memory, not device heap

    std::optional<int64_t> eval(const Expr &e) {
        Expr v = simplify(bind_.mutate(e));
        if (auto i = as_const_int(v)) return *i;
        if (auto u = as_const_uint(v)) return (int64_t)*u;
        // Halide's int32 index arithmetic overflows for this call (a GPU
        // schedule's flat loop over x, y and channels of a huge tile, say):
        // the simplifier says so rather than giving a value.
        struct FindOverflow : IRVisitor {
            bool found = false;
            using IRVisitor::visit;
            void visit(const Call *c) override {
                if (c->is_intrinsic(Call::signed_integer_overflow)) found = true;
                IRVisitor::visit(c);
            }
        } f;
        v.accept(&f);
        if (f.found) overflows = true;
        return std::nullopt;
    }

    template <typename LetOrStmt>
    void scoped(const std::string &name, const Expr &value, const LetOrStmt &body) {
        auto saved = env_.find(name) == env_.end() ? std::optional<int64_t>() : std::optional<int64_t>(env_[name]);
        if (auto v = eval(value)) env_[name] = *v;
        else if (value.as<Call>() && value.as<Call>()->name == "load_typed_struct_member") {
            // A parallel task re-loads a captured value under its own name: keep it.
        } else {
            env_.erase(name);
        }
        body.accept(this);
        if (saved) env_[name] = *saved;
        else env_.erase(name);
    }

    void visit(const LetStmt *op) override { scoped(op->name, op->value, op->body); }

    void visit(const For *op) override {
        if (is_gpu(op->for_type)) {  // device code: its allocations are not buffers
            gpu_depth_++;
            IRVisitor::visit(op);
            gpu_depth_--;
            return;
        }
        op->min.accept(this);
        op->extent.accept(this);
        const auto extent = eval(op->extent);
        const auto min = eval(op->min);
        if (extent && *extent <= 0) return;  // the body never runs
        // Tasks of a parallel loop run at once, one per worker: their
        // allocations are live together.
        int64_t copies = 1;
        if (op->is_parallel()) copies = std::min<int64_t>(call_.threads, extent ? *extent : call_.threads);
        const int64_t saved_peak = peak, before = live;
        // Allocation sizes may depend on the loop variable (clipped at the
        // image border on the first and last iterations): try the first,
        // a middle and the last iteration where the body allocates.
        std::vector<Expr> points{op->min};
        if (min && extent && *extent > 1 && allocates(op->body))
            points = {make_const(op->min.type(), *min), make_const(op->min.type(), *min + *extent / 2),
                      make_const(op->min.type(), *min + *extent - 1)};
        int64_t inc = 0;
        for (const Expr &p : points) {
            peak = live;
            scoped(op->name, p, op->body);
            inc = std::max(inc, peak - before);
            live = before;
        }
        peak = std::max(saved_peak, before + copies * inc);
    }

    bool allocates(const Stmt &s) {
        auto it = allocates_.find(s.get());
        if (it != allocates_.end()) return it->second;
        struct Finder : IRVisitor {
            bool found = false;
            using IRVisitor::visit;
            void visit(const Allocate *) override { found = true; }
        } f;
        s.accept(&f);
        allocates_[s.get()] = f.found;
        return f.found;
    }
    std::map<const IRNode *, bool> allocates_;

    // A parallel loop is lowered to a call of the thread pool with its body
    // as a separate function: walk that body, once per concurrent task.
    void visit(const Call *op) override {
        IRVisitor::visit(op);
        if (op->name != "halide_do_par_for" && op->name != "halide_do_parallel_tasks") return;
        struct FindFn : IRVisitor {
            const std::map<std::string, LoweredFunc> *fns;
            const LoweredFunc *found = nullptr;
            using IRVisitor::visit;
            void visit(const Variable *v) override {
                std::string n = v->name;
                if (n.rfind("::", 0) == 0) n = n.substr(2);
                auto it = fns->find(n);
                if (it != fns->end()) found = &it->second;
            }
        } find;
        find.fns = &functions_;
        for (const auto &a : op->args) a.accept(&find);
        if (!find.found) return;
        std::optional<int64_t> min, extent;
        if (op->name == "halide_do_par_for" && op->args.size() >= 4) {
            min = eval(op->args[2]);
            extent = eval(op->args[3]);
        }
        const int64_t copies = std::min<int64_t>(call_.threads, extent ? std::max<int64_t>(*extent, 1) : call_.threads);
        const int64_t saved_peak = peak, before = live;
        peak = live;
        const LoweredFunc &fn = *find.found;
        // The task index argument: bind the first iteration.
        std::string index;
        for (const auto &a : fn.args)
            if (a.type.is_int() && !a.is_buffer()) index = a.name;
        if (!index.empty() && min) env_[index] = *min;
        fn.body.accept(this);
        if (!index.empty()) env_.erase(index);
        const int64_t inc = peak - before;
        live = before;
        peak = std::max(saved_peak, before + copies * inc);
    }

    void visit(const IfThenElse *op) override {
        // Either branch may run: the larger peak counts.
        const int64_t saved_peak = peak, before = live;
        peak = live;
        op->then_case.accept(this);
        int64_t p = peak;
        live = before;
        if (op->else_case.defined()) {
            peak = live;
            op->else_case.accept(this);
            p = std::max(p, peak);
        }
        live = before;
        peak = std::max(saved_peak, p);
    }

    void visit(const Allocate *op) override {
        int64_t bytes = op->type.bytes();
        bool known = true;
        for (const auto &e : op->extents) {
            auto v = eval(e);
            if (!v) known = false;
            else bytes *= std::max<int64_t>(*v, 0);
        }
        const bool heap = device_ ? gpu_depth_ == 0 && op->memory_type != Halide::MemoryType::Register
                                  : goes_to_heap(op, known ? std::optional<int64_t>(bytes) : std::nullopt);
        if (heap && !known) {
            unknown++;
            if (environment::lowered_debug())
                for (const auto &e : op->extents)
                    std::cerr << "lowered_memory: unknown extent of " << op->name << ": " << simplify(bind_.mutate(e)) << "\n";
        }
        // Names the large buffers, with their extents as lowered and as evaluated.
        if (heap && known && bytes > (int64_t(64) << 20) && environment::lowered_debug()) {
            std::cerr << "lowered_memory: " << op->name << " " << bytes << " bytes:";
            for (const auto &e : op->extents) std::cerr << " [" << e << " = " << simplify(bind_.mutate(e)) << "]";
            std::cerr << "\n";
        }
        if (heap && known) {
            sizes_[op->name] = bytes;
            live += bytes;
            peak = std::max(peak, live);
        }
        op->body.accept(this);
        auto it = sizes_.find(op->name);
        if (it != sizes_.end()) {
            live -= it->second;
            sizes_.erase(it);
        }
    }

    void visit(const Free *op) override {
        auto it = sizes_.find(op->name);
        if (it == sizes_.end()) return;
        live -= it->second;
        sizes_.erase(it);
    }
};

class CountHeap : public IRVisitor {
public:
    int count = 0;

private:
    using IRVisitor::visit;
    void visit(const Allocate *op) override {
        const int64_t c = op->constant_allocation_size();
        if (goes_to_heap(op, c > 0 ? std::optional<int64_t>(c * op->type.bytes()) : std::nullopt)) count++;
        IRVisitor::visit(op);
    }
};

}  // namespace

LoweredMemory::LoweredMemory(const std::vector<Halide::Func> &outputs, const std::vector<Halide::Argument> &args,
                             const Halide::Target &target)
    : device_(target.has_gpu_feature()) {
    CaptureStmt capture;
    // A Halide::Error propagates: the caller knows which kernel this is.
    Halide::Module mod = [&] {
        Halide::Pipeline p(outputs);
        if (device_) p.add_custom_lowering_pass(&capture, [] {});
        Halide::Module m = p.compile_to_module(args, "lowered_memory", target);
        p.clear_custom_lowering_passes();
        return m;
    }();
    if (device_) {
        body_ = capture.captured;
        if (!body_.defined()) throw std::runtime_error("LoweredMemory: no Stmt captured for the GPU pipeline");
        return;
    }
    for (const auto &f : mod.functions()) {
        if (f.name == "lowered_memory") body_ = f.body;
        else functions_.emplace(f.name, f);
    }
    if (!body_.defined()) throw std::runtime_error("LoweredMemory: no body for the pipeline");
    CountHeap c;
    body_.accept(&c);
    for (const auto &[name, f] : functions_) f.body.accept(&c);
    heap_allocations_ = c.count;
}

int64_t LoweredMemory::peak(const KernelCall &call, int *unknown, bool *overflows) const {
    PeakWalker w(call, functions_, device_);
    body_.accept(&w);
    if (unknown) *unknown = w.unknown;
    if (overflows) *overflows = w.overflows;
    return w.peak;
}

}  // namespace segtile
