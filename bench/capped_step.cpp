#include "bench/capped_step.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include <sys/resource.h>

#include "schedules/cpu_schedule.h"
#include "autoscheduler/kernel_memory.h"
#include "generators/jit_kernel.h"
#include "generators/kernel_cache.h"
#include "spec/environment.h"
#include "runtime/executor.h"
#include "spec/cost.h"

namespace segtile::bench {

namespace {

// Plans a bare step (no optimizer state, as the untiled baseline) with the
// exact kernel memory of segtile's CPU schedule; `untiled`: one segment,
// the whole image, instead of the planner's search.
Plan plan_step(const Model &m, int size, int64_t cap_bytes, bool untiled = false, bool image_gradient = false,
               const TimeRates &rates = {}, bool mapped = false) {
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
    req.mapped_checkpoints = mapped;
    return untiled ? evaluate_plan(m, req, {}, {TileSize{0, 0}}, &exact) : make_plan(m, req, &exact);
}

}  // namespace

int64_t predicted_untiled_peak(const std::string &model, int size) {
    return plan_step(load_model(model), size, 0, true).peak_bytes;
}

void run_capped_fraction(const std::string &model, int size, double fraction, double untiled_peak_bytes,
                         double peak_gflops, IsolatedResult &r, const CappedStepOptions &opt) {
    double base = untiled_peak_bytes;
    r.counters["cap_from_prediction"] = base > 0 ? 0 : 1;
    if (base <= 0) base = (double)predicted_untiled_peak(model, size);
    r.counters["untiled_peak_bytes"] = base;
    run_capped_step(model, size, (int64_t)(fraction * base), peak_gflops, r, opt);
}

void run_capped_step(const std::string &name, int size, int64_t cap_bytes, double peak_gflops, IsolatedResult &r,
                     const CappedStepOptions &opt) {
    using clock = std::chrono::steady_clock;
    const Model m = load_model(name);
    const auto t0 = clock::now();
    const Plan plan = plan_step(m, size, cap_bytes, false, opt.image_gradient, opt.rates, opt.mapped_plan);
    const double plan_seconds = std::chrono::duration<double>(clock::now() - t0).count();

    MemoryLedger ledger;
    SegmentLayout layout = make_segments(m, plan.cuts, opt.image_gradient);
    const auto t1 = clock::now();
    if (opt.progress) std::fprintf(stderr, "%s\n", plan_table(plan, m).c_str());
    std::unique_ptr<KernelCache> cache;
    if (!opt.kernel_cache_dir.empty()) cache = std::make_unique<KernelCache>(opt.kernel_cache_dir);
    ModelKernels kernels = cache ? cache->model_kernels(m, layout, Halide::Float(32), &ledger, environment::threads())
                                 : jit_model_kernels(m, layout, Halide::Float(32), &ledger);
    const double compile_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    if (opt.progress)
        std::fprintf(stderr, "%s %zu segments in %.1f s\n", cache ? cache->summary().c_str() : "compiled",
                     plan.segments.size(), compile_seconds);
    if (cache) {
        const KernelCacheCounts n = cache->counts();
        r.counters["kernels_compiled"] = n.compiled;
        r.counters["kernels_loaded"] = n.loaded;
    }
    r.counters["compile_seconds"] = compile_seconds;
    if (opt.prepare_only) return;
    SegmentedExecutor exec(m, layout, std::move(kernels), plan.tile_sizes(), &ledger, halide_type_of<float>(),
                           opt.checkpoint_dir);
    // From here on the high-water mark is the steps' (the compiler's
    // memory above was given back, but VmHWM keeps its peak).
    const int64_t hwm_before_steps = process_high_water_mark();
    r.counters["resident_before_steps_bytes"] = (double)process_resident_bytes();
    const bool hwm_reset = reset_process_high_water_mark();
    // Time inside kernel calls (the head's too; on the CPU they read and
    // write the checkpoint store in place, its page faults included); the
    // rest of a step is the executor's: windows copied, gradients added.
    double kernel_seconds = 0;
    exec.set_trace([&](const ExecutorEvent &e) {
        const double dt = std::chrono::duration<double>(e.end - e.start).count();
        if (e.category == "kernel" || e.category == "head") kernel_seconds += dt;
        if (opt.progress && e.category == "segment")
            std::fprintf(stderr, "%s: %.3f s (working peak so far %s, resident %s, high-water mark %s)\n",
                         e.name.c_str(), dt, format_bytes(ledger.peak(MemoryLedger::Kind::Working)).c_str(),
                         format_bytes(process_resident_bytes()).c_str(),
                         format_bytes(process_high_water_mark()).c_str());
    });
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
    // Major faults and the bytes the process made the kernel read from or
    // write to storage (/proc/self/io; -1 where it cannot be read): a
    // checkpoint store in files larger than memory goes through the disk.
    // And the seconds in which every running task of the machine waited on
    // storage or on memory reclaim (pressure stall information, "full";
    // the machine's, not the process's: read on a quiet machine), that is
    // wall time the step lost to them.
    struct Io {
        double minor_faults, major_faults, read_bytes, write_bytes, io_stall, memory_stall;
    };
    auto full_stall_seconds = [](const char *path) {
        std::ifstream f(path);
        std::string line;
        while (std::getline(f, line))
            if (const auto at = line.find("total="); line.rfind("full", 0) == 0 && at != std::string::npos)
                return std::stod(line.substr(at + 6)) * 1e-6;  // microseconds
        return -1.0;
    };
    auto io_now = [&] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        Io io{(double)u.ru_minflt, (double)u.ru_majflt, -1, -1, full_stall_seconds("/proc/pressure/io"),
              full_stall_seconds("/proc/pressure/memory")};
        std::ifstream f("/proc/self/io");
        std::string key;
        double v;
        while (f >> key >> v) {
            if (key == "read_bytes:") io.read_bytes = v;
            if (key == "write_bytes:") io.write_bytes = v;
        }
        return io;
    };
    struct Timed {
        double seconds, kernel_seconds;
        Io io;  // during the step
    };
    auto timed_step = [&] {
        const Io i0 = io_now();
        kernel_seconds = 0;
        const auto t = clock::now();
        exec.step(image, labels, params);
        const double dt = std::chrono::duration<double>(clock::now() - t).count();
        const Io i1 = io_now();
        auto delta = [](double a, double b) { return a < 0 || b < 0 ? -1 : b - a; };
        return Timed{dt, kernel_seconds,
                     Io{i1.minor_faults - i0.minor_faults, i1.major_faults - i0.major_faults,
                        delta(i0.read_bytes, i1.read_bytes), delta(i0.write_bytes, i1.write_bytes),
                        delta(i0.io_stall, i1.io_stall), delta(i0.memory_stall, i1.memory_stall)}};
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
    r.counters["high_water_mark_bytes"] = (double)std::max(hwm_before_steps, process_high_water_mark());
    r.counters["step_high_water_mark_bytes"] = hwm_reset ? (double)process_high_water_mark() : -1;
    r.counters["recompute_factor"] = plan.recompute;
    r.counters["image_gradient"] = opt.image_gradient;
    r.counters["segments"] = (double)plan.segments.size();
    r.counters["plan_seconds"] = plan_seconds;
    r.counters["seconds_per_step"] = steady.seconds;
    r.counters["seconds_first_step"] = cold.seconds;
    r.counters["minor_faults_per_step"] = steady.io.minor_faults;
    r.counters["minor_faults_first_step"] = cold.io.minor_faults;
    r.counters["major_faults_per_step"] = steady.io.major_faults;
    r.counters["storage_read_bytes_per_step"] = steady.io.read_bytes;
    r.counters["storage_write_bytes_per_step"] = steady.io.write_bytes;
    r.counters["kernel_seconds_per_step"] = steady.kernel_seconds;
    r.counters["io_stall_seconds_per_step"] = steady.io.io_stall;
    r.counters["memory_stall_seconds_per_step"] = steady.io.memory_stall;
    r.counters["steps"] = 1;
    r.counters["step_gflop"] = flops * 1e-9;
    r.counters["gflops"] = flops / steady.seconds * 1e-9;
    r.counters["fraction_of_peak"] = flops / steady.seconds * 1e-9 / peak_gflops;
    r.label = name + " " + std::to_string(size) + " plan " + (plan.cuts.empty() ? std::string("(no cuts)") : plan.cuts_string());
}

}  // namespace segtile::bench
