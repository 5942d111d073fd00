#include "apps/planning.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "autoscheduler/calibrate.h"
#include "schedules/cpu_schedule.h"
#include "schedules/gpu_schedule.h"
#include "autoscheduler/kernel_memory.h"
#include "runtime/memory_ledger.h"
#include "spec/environment.h"
#include "spec/errors.h"

namespace segtile {

Plan plan_for(const Model &m, const PlanOptions &opt) {
    PlanRequest req;
    req.width = opt.width;
    req.height = opt.height;
    req.batch = opt.batch;
    auto bytes = [](const char *option, const std::string &text) {
        try {
            return parse_bytes(text);
        } catch (const std::invalid_argument &e) {
            throw UsageError(std::string(option) + ": " + e.what());
        }
    };
    if (!opt.memory_cap.empty()) req.memory_cap = bytes("--memory-cap", opt.memory_cap);
    if (!opt.checkpoint_cap.empty()) req.checkpoint_cap = bytes("--checkpoint-cap", opt.checkpoint_cap);
    req.optimizer_copies = opt.optimizer == "adam" ? 2 : 1;
    req.device = opt.target == "cuda";
    req.image_gradient = opt.image_gradient;
    if (opt.mapped_checkpoints && req.device)
        throw UsageError("--mapped-checkpoints plans for checkpoints in memory-mapped files on the host; with "
                         "--target cuda the cap is of device memory, which they do not touch: drop one of the two");
    req.mapped_checkpoints = opt.mapped_checkpoints;
    if (!opt.cuts.empty()) req.allowed_cuts = {opt.cuts == "none" ? std::vector<int>{} : parse_cuts(m, opt.cuts)};
    req.threads = environment::threads();
    // The time model's rates: measured on this machine once, then reused.
    // A GPU's are kept apart: priced at the CPU's, the VGG16 plan at 1024^2
    // cut before nearly every conv.
    const std::string cal = calibration_path(req.device);
    if (opt.calibrate) {
        if (req.device && !cuda_device_usable())
            throw UsageError("--calibrate --target cuda times kernels on this machine's GPU, and Halide finds no "
                             "usable CUDA device here: calibrate on the machine with the GPU, or drop --calibrate "
                             "(rates fitted to an H200's measured kernels, docs/gpu.md)");
        std::cout << "calibrating the time model: timing the segment passes of four small models through the "
                     "executor at 1 to 64 tiles a pass"
                  << (req.device ? " on the GPU" : "") << " (a minute or two)...\n"
                  << std::flush;
        const Calibration c = calibrate_time_model(
            calibration_cases(req.device), 3,
            [](const std::string &line) { std::cout << "  " << line << "\n" << std::flush; }, req.device);
        req.rates = c.rates;
        save_time_rates(req.rates, cal);
        std::cout << calibration_report(c) << "saved to " << cal << "\n";
    } else if (load_time_rates(req.rates, cal)) {
        std::cout << "time model: this machine's rates from " << cal << "\n";
    } else if (req.device) {
        req.rates = device_time_rates();
        std::cout << "time model: rates fitted to an H200's measured kernels (`segtile plan --target cuda "
                     "--calibrate` measures this machine's GPU)\n";
    } else {
        std::cout << "time model: default rates (run `segtile plan --calibrate` once to measure this machine's)\n";
    }
    if (opt.estimate) return make_plan(m, req, nullptr);
    const Halide::Target host = Halide::get_jit_target_from_environment();
    // The kernels as they will run: CPU-scheduled for the host, or
    // GPU-scheduled for CUDA (lowering needs no GPU).
    const Halide::Target t = req.device ? segtile_cuda_target(host) : host;
    LoweredKernelMemory exact(m, Halide::Float(32),
                              [t, device = req.device](const std::vector<Halide::Func> &o) {
                                  if (device) schedule_gpu(o, t);
                                  else schedule_cpu(o, t);
                              },
                              t);
    exact.set_progress([](const std::string &line) { std::cout << "  " << line << "\n" << std::flush; });
    std::cout << "planning " << m.name << " at " << opt.width << "x" << opt.height
              << " (lowering the kernels of candidate segments to size their allocations)...\n"
              << std::flush;
    Plan p = make_plan(m, req, &exact);
    return p;
}

Plan read_plan_file(const std::string &path, const Model &m) {
    std::ifstream f(path);
    if (!f) throw PlanFileError(path + ": cannot read the plan file; write one with `segtile plan ... --json " + path + "`");
    std::stringstream s;
    s << f.rdbuf();
    return plan_from_json(s.str(), m, path);
}

}  // namespace segtile
