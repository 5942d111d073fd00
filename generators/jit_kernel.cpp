#include "generators/jit_kernel.h"

#include <cstdlib>
#include <filesystem>

#include "schedules/cpu_schedule.h"
#include "schedules/gpu_schedule.h"
#include "generators/kernel_pipeline.h"
#include "generators/kernels.h"
#include "runtime/device_memory.h"
#include "spec/environment.h"
#include "spec/kernel_error.h"

namespace segtile {

namespace {

void *jit_malloc(Halide::JITUserContext *uc, size_t bytes) {
    auto *ctx = static_cast<JitKernel::Context *>(uc);
    return MemoryLedger::halide_malloc(ctx ? ctx->ledger : nullptr, bytes);
}

void jit_free(Halide::JITUserContext *uc, void *ptr) {
    auto *ctx = static_cast<JitKernel::Context *>(uc);
    MemoryLedger::halide_free(ctx ? ctx->ledger : nullptr, ptr);
}

void jit_error(Halide::JITUserContext *uc, const char *msg) { static_cast<JitKernel::Context *>(uc)->error += msg; }

// Where SEGTILE_DUMP_STMT / SEGTILE_DUMP_ASM (`value`) put this kernel's
// dump: a folder (one that exists, or a value ending in '/') gets a file
// per kernel, "darknet19_segment1_backward.stmt"; any other value is one
// file, which each kernel compiled overwrites (a step compiles dozens).
std::string dump_path(const std::string &value, const Model &m, KernelKind kind, int segment, const char *ext) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (value.empty() || (value.back() != '/' && !fs::is_directory(value, ec))) return value;
    fs::create_directories(value, ec);
    const std::string kernel = kind == KernelKind::Head      ? "_head"
                               : kind == KernelKind::Forward ? "_segment" + std::to_string(segment) + "_forward"
                                                             : "_segment" + std::to_string(segment) + "_backward";
    return (fs::path(value) / (c_identifier(m.name) + kernel + ext)).string();
}

}  // namespace

JitKernel::JitKernel(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment, Halide::Type t,
                     MemoryLedger *ledger, const std::set<std::string> &only, Schedule schedule,
                     const PeerSchedule &peer) {
    what_ = kernel_description(m, layout, kind, segment);
    if (schedule == Schedule::Gpu) {
        // The JIT's CUDA runtime finds the driver's allocator through these
        // handlers: the counting one charges device memory to the ledger.
        Halide::JITHandlers h = Halide::Internal::JITSharedRuntime::set_default_handlers({});
        h.custom_get_library_symbol = &device_counting_get_library_symbol;
        Halide::Internal::JITSharedRuntime::set_default_handlers(h);
    }
    try {
        KernelPipeline kp = kernel_pipeline(m, layout, kind, segment, t, only);
        sig_ = kp.signature;
        const std::vector<Halide::Func> &out_funcs = kp.outputs;
        const std::vector<Halide::Argument> &args = kp.args;
        const Halide::Target jit = Halide::get_jit_target_from_environment();
        if (schedule == Schedule::Cpu) schedule_cpu(out_funcs, jit);
        else if (schedule == Schedule::Peer) apply_peer_schedule(m, sig_, out_funcs, peer, jit);
        else if (schedule == Schedule::Gpu) schedule_gpu(out_funcs, segtile_cuda_target(jit));
        else schedule_reference(out_funcs);
        // For reading what a schedule became (docs/benchmarks.md): the
        // lowered statement and the assembly, written to the named files.
        const Halide::Target target = schedule == Schedule::Gpu ? segtile_cuda_target(jit) : jit;
        if (const std::string d = environment::dump_stmt_dir(); !d.empty())
            Halide::Pipeline(out_funcs).compile_to_lowered_stmt(dump_path(d, m, kind, segment, ".stmt"), args,
                                                                Halide::StmtOutputFormat::Text, target);
        if (const std::string d = environment::dump_asm_dir(); !d.empty())
            Halide::Pipeline(out_funcs).compile_to_assembly(dump_path(d, m, kind, segment, ".s"), args, "kernel", target);
        callable_ = Halide::Pipeline(out_funcs).compile_to_callable(args, target);
    } catch (const Halide::Error &e) {
        throw KernelError("compiling " + what_ + ": Halide: " + e.what());
    }
    ctx_.ledger = ledger;
    ctx_.handlers.custom_malloc = jit_malloc;
    ctx_.handlers.custom_free = jit_free;
    ctx_.handlers.custom_error = jit_error;
}

void JitKernel::call(const std::vector<void *> &args) {
    std::vector<const void *> argv(args.size() + 1);
    Halide::JITUserContext *uc = &ctx_;
    argv[0] = &uc;
    for (size_t i = 0; i < args.size(); i++) argv[i + 1] = args[i];
    ctx_.error.clear();
    if (int err = callable_.call_argv_fast(argv.size(), argv.data()))
        throw KernelError("running " + what_ + ": Halide runtime error " + std::to_string(err) + ": " + ctx_.error);
}

}  // namespace segtile
