#include "bench/capped_step.h"

#include <chrono>
#include <random>
#include <thread>

#include <sys/resource.h>

#include "autoscheduler/cpu_schedule.h"
#include "autoscheduler/kernel_memory.h"
#include "generators/jit_kernel.h"
#include "runtime/executor.h"
#include "spec/cost.h"

namespace segtile::bench {

namespace {

// Plans a bare step (no optimizer state, as the untiled baseline) with the
// exact kernel memory of segtile's CPU schedule; `untiled`: one segment,
// the whole image, instead of the planner's search.
Plan plan_step(const Model &m, int size, int64_t cap_bytes, bool untiled = false, bool image_gradient = false,
               const TimeRates &rates = {}) {
    const Halide::Target target = Halide::get_jit_target_from_environment();
    LoweredKernelMemory exact(m, Halide::Float(32), [&](const std::vector<Halide::Func> &o) { schedule_cpu(o, target); },
                              target);
    PlanRequest req;
    req.width = req.height = size;
    req.memory_cap = cap_bytes;
    req.optimizer_copies = 0;
    req.image_gradient = image_gradient;  // training: the parameters' gradients only
    req.threads = (int)std::thread::hardware_concurrency();
    req.rates = rates;
    return untiled ? evaluate_plan(m, req, {}, {TileSize{0, 0}}, &exact) : make_plan(m, req, &exact);
}

}  // namespace

int64_t predicted_untiled_peak(const std::string &model, int size) {
    return plan_step(load_model(model), size, 0, true).peak_bytes;
}

void run_capped_fraction(const std::string &model, int size, double fraction, double untiled_peak_bytes,
                         double peak_gflops, IsolatedResult &r) {
    double base = untiled_peak_bytes;
    r.counters["cap_from_prediction"] = base > 0 ? 0 : 1;
    if (base <= 0) base = (double)predicted_untiled_peak(model, size);
    r.counters["untiled_peak_bytes"] = base;
    run_capped_step(model, size, (int64_t)(fraction * base), peak_gflops, r);
}

void run_capped_step(const std::string &name, int size, int64_t cap_bytes, double peak_gflops, IsolatedResult &r,
                     const CappedStepOptions &opt) {
    using clock = std::chrono::steady_clock;
    const Model m = load_model(name);
    const auto t0 = clock::now();
    const Plan plan = plan_step(m, size, cap_bytes, false, opt.image_gradient, opt.rates);
    const double plan_seconds = std::chrono::duration<double>(clock::now() - t0).count();

    MemoryLedger ledger;
    SegmentLayout layout = make_segments(m, plan.cuts, opt.image_gradient);
    const auto t1 = clock::now();
    if (opt.progress) std::fprintf(stderr, "%s\n", plan_table(plan, m).c_str());
    SegmentedExecutor exec(m, layout, jit_model_kernels(m, layout, Halide::Float(32), &ledger), plan.tile_sizes(),
                           &ledger, halide_type_of<float>(), opt.checkpoint_dir);
    const double compile_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    if (opt.progress) {
        std::fprintf(stderr, "compiled %zu segments in %.1f s\n", plan.segments.size(), compile_seconds);
        exec.set_trace([&](const ExecutorEvent &e) {
            if (e.category != "segment") return;
            std::fprintf(stderr, "%s: %.3f s (working peak so far %s)\n", e.name.c_str(),
                         std::chrono::duration<double>(e.end - e.start).count(),
                         format_bytes(ledger.peak(MemoryLedger::Kind::Working)).c_str());
        });
    }
    // The image is data, not working memory: (W, H, C, 1).
    Tensor image({size, size, m.input_channels, 1}, &ledger, MemoryLedger::Kind::Data);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < image.numel(); i++) image.data()[i] = nd(rng);
    Halide::Runtime::Buffer<> labels;
    if (m.loss.kind == LossKind::SoftmaxCrossEntropy) {
        Halide::Runtime::Buffer<int32_t> l(1);  // (1)
        l(0) = 0;
        labels = l;
    } else {
        const TensorShape ps = m.shapes(size, size)[m.loss.input_id];
        Halide::Runtime::Buffer<float> tg((int)ps.width, (int)ps.height, (int)ps.channels, 1);  // (W', H', K, 1)
        tg.fill(0.5f);
        labels = tg;
    }
    ParamStore params(m, &ledger);
    params.init_pytorch_default(1);
    // The peak is measured from the second step on (reset_peaks empties
    // the ledger's block cache: the step allocates from nothing, as an
    // epoch's first step does) and the third is timed: in a training run
    // every later step of the epoch takes its buffers from the cache, while
    // the second faults in every page of its buffers (VGG16 at 1024^2
    // untiled: 2.7 GB). Both times are reported. Without warm_up (the scale
    // run) the one step is timed.
    // Minor page faults per step: pages the step touched for the first
    // time (fresh blocks; with huge pages one fault per 2 MiB). A steady
    // step that still faults is not reusing its buffers (runtime/block_cache.h).
    auto minor_faults = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return (double)u.ru_minflt;
    };
    struct Timed {
        double seconds, faults;
    };
    auto timed_step = [&] {
        const double f0 = minor_faults();
        const auto t = clock::now();
        exec.step(image, labels, params);
        const double dt = std::chrono::duration<double>(clock::now() - t).count();
        return Timed{dt, minor_faults() - f0};
    };
    if (opt.warm_up) {
        exec.step(image, labels, params);
        ledger.reset_peaks();
    }
    const Timed cold = timed_step();
    const Timed steady = opt.warm_up ? timed_step() : cold;
    const double flops = training_step_flops(m, size, size);
    r.counters["cap_bytes"] = (double)cap_bytes;
    r.counters["predicted_peak_bytes"] = (double)plan.peak_bytes;
    r.counters["peak_working_bytes"] = (double)ledger.peak(MemoryLedger::Kind::Working);
    r.counters["checkpoint_bytes"] = (double)ledger.peak(MemoryLedger::Kind::Checkpoint);
    r.counters["high_water_mark_bytes"] = (double)process_high_water_mark();
    r.counters["recompute_factor"] = plan.recompute;
    r.counters["image_gradient"] = opt.image_gradient;
    r.counters["segments"] = (double)plan.segments.size();
    r.counters["plan_seconds"] = plan_seconds;
    r.counters["compile_seconds"] = compile_seconds;
    r.counters["seconds_per_step"] = steady.seconds;
    r.counters["seconds_first_step"] = cold.seconds;
    r.counters["minor_faults_per_step"] = steady.faults;
    r.counters["minor_faults_first_step"] = cold.faults;
    r.counters["steps"] = 1;
    r.counters["step_gflop"] = flops * 1e-9;
    r.counters["gflops"] = flops / steady.seconds * 1e-9;
    r.counters["fraction_of_peak"] = flops / steady.seconds * 1e-9 / peak_gflops;
    r.label = name + " " + std::to_string(size) + " plan " + (plan.cuts.empty() ? std::string("(no cuts)") : plan.cuts_string());
}

}  // namespace segtile::bench
