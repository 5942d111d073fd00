// Reading a CUDA kernel's lowered code without a GPU: the Stmt is captured
// by a custom lowering pass, which Halide runs after the last
// simplification and before it offloads the GPU loops into device kernels
// (so For loops still say gpu_block / gpu_thread, and every buffer is still
// an Allocate node). Halide then compiles the device code to PTX, which
// needs no GPU either.
#pragma once

#include <cstdint>
#include <map>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "Halide.h"
#include "autoscheduler/lowered_memory.h"

namespace segtile::testing {


// Lowers the scheduled `outputs` for `target` (PTX included) and returns the
// Stmt before GPU offload.
inline Halide::Internal::Stmt lower_for(const std::vector<Halide::Func> &outputs,
                                        const std::vector<Halide::Argument> &args, const Halide::Target &target) {
    Halide::Pipeline p(outputs);
    CaptureStmt capture;
    p.add_custom_lowering_pass(&capture, [] {});
    try {
        p.compile_to_module(args, "segtile_gpu_probe", target);
    } catch (const Halide::Error &e) {  // not a std::exception: gtest would print no message
        throw std::runtime_error(std::string("lowering for ") + target.to_string() + ": " + e.what());
    }
    p.clear_custom_lowering_passes();
    if (const char *dir = std::getenv("SEGTILE_LOWERED_DEBUG")) {
        std::ofstream o(std::string(dir) + "/" + outputs[0].name() + ".stmt");
        o << capture.captured;
    }
    return capture.captured;
}

// Where a lowered Stmt's work runs.
struct GpuMapping {
    int kernels = 0;                         // outermost gpu_block loops
    std::set<std::string> host_stores;       // buffers written outside any GPU loop
    std::set<std::string> host_loops;        // serial loops outside GPU loops
    std::set<std::string> single_thread_stores;  // written by kernels of one block of one thread
    std::set<std::string> thread_registers;      // allocated in registers inside GPU thread loops
    std::vector<std::string> kernel_asserts;     // checks inside GPU loops: a failed one traps the kernel
};

class GpuMappingVisitor : public Halide::Internal::IRVisitor {
public:
    GpuMapping result;

private:
    using IRVisitor::visit;
    int gpu_depth_ = 0;
    bool kernel_all_ones_ = false;
    std::set<std::string> kernel_stores_;

    void visit(const Halide::Internal::For *op) override {
        using Halide::Internal::ForType;
        const bool gpu = op->for_type == ForType::GPUBlock || op->for_type == ForType::GPUThread ||
                         op->for_type == ForType::GPULane;
        if (!gpu) {
            if (gpu_depth_ == 0) result.host_loops.insert(op->name);
            IRVisitor::visit(op);
            return;
        }
        const bool outermost = gpu_depth_ == 0;
        if (outermost) {
            result.kernels++;
            kernel_all_ones_ = true;
            kernel_stores_.clear();
        }
        const auto e = Halide::Internal::as_const_int(op->extent);
        kernel_all_ones_ = kernel_all_ones_ && e && *e == 1;
        gpu_depth_++;
        IRVisitor::visit(op);
        gpu_depth_--;
        if (outermost && kernel_all_ones_)
            result.single_thread_stores.insert(kernel_stores_.begin(), kernel_stores_.end());
    }
    void visit(const Halide::Internal::AssertStmt *op) override {
        if (gpu_depth_ > 0) {
            std::ostringstream o;
            o << op->condition;
            result.kernel_asserts.push_back(o.str().substr(0, 2000));
        }
        IRVisitor::visit(op);
    }
    void visit(const Halide::Internal::Allocate *op) override {
        // Named "f.0" (a Func's first value) once in registers.
        const std::string n = op->name, f = n.size() > 2 && n.compare(n.size() - 2, 2, ".0") == 0 ? n.substr(0, n.size() - 2) : n;
        if (gpu_depth_ > 0 && op->memory_type == Halide::MemoryType::Register) result.thread_registers.insert(f);
        IRVisitor::visit(op);
    }
    void visit(const Halide::Internal::Store *op) override {
        if (gpu_depth_ == 0) result.host_stores.insert(op->name);
        else kernel_stores_.insert(op->name);
        IRVisitor::visit(op);
    }
};

inline GpuMapping gpu_mapping(const Halide::Internal::Stmt &s) {
    GpuMappingVisitor v;
    s.accept(&v);
    return v.result;
}

// Bytes of every buffer allocated outside the GPU kernels (what a call
// allocates per tile on the device: segtile's GPU schedule puts every Func
// at root on the device), evaluated for concrete argument values: LetStmts
// are evaluated top-down; `values` overrides any of them and gives the
// scalar Params ("tile_conv1_x_min") and buffer fields ("in_image.extent.0").
struct AllocationTotal {
    int64_t bytes = 0;
    int allocations = 0;
    std::vector<std::string> unknown;  // allocations whose size did not evaluate
};

class AllocationVisitor : public Halide::Internal::IRVisitor {
public:
    explicit AllocationVisitor(std::map<std::string, Halide::Expr> values) : scope_(std::move(values)) {}
    AllocationTotal result;

private:
    using IRVisitor::visit;
    std::map<std::string, Halide::Expr> scope_;
    int gpu_depth_ = 0;

    Halide::Expr evaluate(const Halide::Expr &e) const {
        return Halide::Internal::simplify(Halide::Internal::substitute(scope_, e));
    }
    void visit(const Halide::Internal::LetStmt *op) override {
        if (!scope_.count(op->name)) {
            Halide::Expr v = evaluate(op->value);
            if (Halide::Internal::is_const(v)) scope_[op->name] = v;
            else if (std::getenv("SEGTILE_LOWERED_DEBUG")) std::cerr << "unevaluated " << op->name << " = " << v << "\n";
        }
        IRVisitor::visit(op);
    }
    void visit(const Halide::Internal::For *op) override {
        using Halide::Internal::ForType;
        const bool gpu = op->for_type == ForType::GPUBlock || op->for_type == ForType::GPUThread;
        gpu_depth_ += gpu;
        IRVisitor::visit(op);
        gpu_depth_ -= gpu;
    }
    void visit(const Halide::Internal::Allocate *op) override {
        if (gpu_depth_ == 0) {
            Halide::Expr size = Halide::Expr((int64_t)op->type.bytes());
            for (const auto &e : op->extents) size = size * Halide::cast<int64_t>(e);
            const Halide::Expr v = evaluate(size);
            if (const auto b = Halide::Internal::as_const_int(v)) result.bytes += *b;
            else {
                std::ostringstream o;
                o << op->name << " = " << v;
                result.unknown.push_back(o.str());
            }
            result.allocations++;
        }
        IRVisitor::visit(op);
    }
};

inline AllocationTotal allocation_total(const Halide::Internal::Stmt &s, const std::map<std::string, int64_t> &values) {
    std::map<std::string, Halide::Expr> scope;
    for (const auto &[k, v] : values) scope[k] = Halide::Expr((int32_t)v);
    AllocationVisitor a(scope);
    s.accept(&a);
    return a.result;
}

}  // namespace segtile::testing
