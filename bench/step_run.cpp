#include "bench/step_run.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "runtime/parameters.h"
#include "spec/cost.h"

namespace segtile::bench {

using clock_type = std::chrono::steady_clock;

CompiledStep compile_training_step(const StepConfig &c) {
    CompiledStep s;
    s.model = load_model(c.model);
    s.ledger = std::make_unique<MemoryLedger>();
    PeerSchedule peer = c.peer;
    peer.width = peer.height = c.size;
    const auto t0 = clock_type::now();
    s.step = std::make_unique<KernelStep>(
        s.model, std::make_unique<JitKernel>(s.model, untiled_layout(s.model, false), KernelKind::Head, 0, Halide::Float(32),
                                             s.ledger.get(), std::set<std::string>{}, c.schedule, peer));
    s.compile_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    return s;
}

void run_compiled_step(CompiledStep &s, const StepConfig &c, double peak_gflops, IsolatedResult &r) {
    const Model &m = s.model;
    MemoryLedger &ledger = *s.ledger;
    r.counters["compile_seconds"] = s.compile_seconds;
    const TensorShape ps = m.shapes(c.size, c.size)[m.loss.input_id];
    Tensor image({c.size, c.size, m.input_channels, 1}, &ledger);  // (W, H, C, 1); training: no image gradient
    Tensor pred({ps.width, ps.height, ps.channels, 1}, &ledger);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < image.numel(); i++) image.data()[i] = nd(rng);
    Halide::Runtime::Buffer<int32_t> labels(1);
    labels(0) = 1;
    Tensor target;
    if (m.loss.kind != LossKind::SoftmaxCrossEntropy) {
        target = Tensor({ps.width, ps.height, ps.channels, 1}, &ledger);
        for (int64_t i = 0; i < target.numel(); i++) target.data()[i] = nd(rng);
    }
    Halide::Runtime::Buffer<> target_view = target.defined() ? target.view() : Halide::Runtime::Buffer<>();
    halide_buffer_t *lt = target.defined() ? target_view.raw_buffer() : labels.raw_buffer();
    ParamStore params(m, &ledger);
    params.init_pytorch_default(0);
    ledger.reset_peaks();
    const int64_t hwm_before_steps = process_high_water_mark();  // the compiler's included
    const bool hwm_reset = reset_process_high_water_mark();

    double best = 1e300, total = 0;
    int steps = 0;
    double first = 0;
    while (steps < 2 || (total < c.min_seconds && steps < c.max_steps)) {
        const auto s0 = clock_type::now();
        s.step->run(image, lt, params, pred, nullptr);
        const double dt = std::chrono::duration<double>(clock_type::now() - s0).count();
        if (steps == 0) first = dt;
        best = std::min(best, dt);
        total += dt;
        steps++;
    }
    const double flops = training_step_flops(m, c.size, c.size);
    r.counters["seconds_per_step"] = best;
    r.counters["seconds_per_step_mean"] = total / steps;
    r.counters["seconds_first_step"] = first;
    r.counters["steps"] = steps;
    r.counters["step_gflop"] = flops * 1e-9;
    r.counters["gflops"] = flops / best * 1e-9;
    r.counters["fraction_of_peak"] = flops / best * 1e-9 / peak_gflops;
    r.counters["peak_working_bytes"] = (double)ledger.peak(MemoryLedger::Kind::Working);
    r.counters["high_water_mark_bytes"] = (double)std::max(hwm_before_steps, process_high_water_mark());
    r.counters["step_high_water_mark_bytes"] = hwm_reset ? (double)process_high_water_mark() : -1;
}

void run_training_step(const StepConfig &c, double peak_gflops, IsolatedResult &r) {
    CompiledStep s = compile_training_step(c);
    run_compiled_step(s, c, peak_gflops, r);
}

}  // namespace segtile::bench
