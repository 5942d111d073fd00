// JitKernel: a kernel of spec/kernel_signature.h JIT-compiled in this
// process, with the same calling convention as an AOT library, so the
// executor runs either. Its allocations go to the ledger too.
#pragma once

#include <set>

#include "Halide.h"
#include "generators/peer_schedule.h"
#include "runtime/kernel.h"

namespace segtile {

// Which schedule a JIT kernel gets: the CPU schedule (fast to run, slow to
// compile for deep models) or the reference one (every Func at root: fast to
// compile; what the correctness tests of large models use), or one of
// Halide's autoschedulers, named in a PeerSchedule (benchmarks' baselines),
// or the GPU schedule for CUDA (schedules/gpu_schedule.h; running it
// needs a GPU, and the executor's set_device).
enum class Schedule { Cpu, Reference, Peer, Gpu };

class JitKernel : public Kernel {
public:
    // `only` restricts the outputs (e.g. {"loss"} for a forward-only head).
    JitKernel(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment, Halide::Type t,
              MemoryLedger *ledger = nullptr, const std::set<std::string> &only = {},
              Schedule schedule = Schedule::Cpu, const PeerSchedule &peer = {});
    const std::vector<KernelArg> &signature() const override { return sig_; }
    void call(const std::vector<void *> &args) override;

    struct Context : Halide::JITUserContext {
        MemoryLedger *ledger = nullptr;
        std::string error;
    };

private:
    std::vector<KernelArg> sig_;
    std::string what_;  // kernel_description(), for errors
    Halide::Callable callable_;
    Context ctx_;
};

}  // namespace segtile

#include "runtime/executor.h"

namespace segtile {

// Every kernel of a segment layout, JIT-compiled.
inline ModelKernels jit_model_kernels(const Model &m, const SegmentLayout &layout, Halide::Type t,
                                      MemoryLedger *ledger = nullptr, Schedule schedule = Schedule::Cpu) {
    ModelKernels k;
    for (size_t s = 0; s < layout.segments.size(); s++) {
        k.forward.push_back(
            std::make_unique<JitKernel>(m, layout, KernelKind::Forward, (int)s, t, ledger, std::set<std::string>{}, schedule));
        k.backward.push_back(
            std::make_unique<JitKernel>(m, layout, KernelKind::Backward, (int)s, t, ledger, std::set<std::string>{}, schedule));
    }
    k.head = std::make_unique<JitKernel>(m, layout, KernelKind::Head, 0, t, ledger, std::set<std::string>{}, schedule);
    return k;
}

}  // namespace segtile
