// Random models, tiled = untiled (issue 40). Each draw is a random model
// (test/random_model.h), an image size and a memory cap. Per draw: plan
// with the program's planner (exact kernel memory lowered from the
// production CPU schedule, as apps/planning.cpp does), then one float32
// training step tiled by the plan and one untiled (the program's
// `--memory-cap none` kernel) from the same weights and batch: the loss,
// every parameter gradient, the predictions (and the image's gradient,
// where the draw asks for it) agree to 1e-5 relative (past that, the
// untiled step in float64 arbitrates: a tiled step no further from it than
// 2x the untiled float32 step's own error is that step's rounding, counted
// apart, not a failure), and the ledger's
// measured peak working memory stays within the cap. A cap below the
// smallest feasible one must be refused with the planner's PlanError that
// names that cap; anything else thrown (a Halide error, a KernelError) or
// a signal is a crash.
//
// Each model runs in a child process, so a crash (a signal, an abort, a
// hang past the timeout) is counted and the remaining draws go on; the
// model's kernels are compiled once and shared by its draws (one untiled
// kernel for every size and cap, one kernel per segment span for every
// plan that has it).
//
//   random_models_test                       the fixed seed list (ctest)
//   random_models_test --draws 1000 --seed 1 the long check: models from seed 1 on until 1000 draws
//   random_models_test --model 17            one model (all its draws), for a repro
//   random_models_test --list 1 --to 40      print the models of seeds 1..40 (--json 1: their JSON; no compiling)
// Options of the long modes: --timeout S (per draw, default 600), --report FILE
// (appends every failing draw, with its model JSON, as markdown).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <typeinfo>

#include "schedules/cpu_schedule.h"
#include "autoscheduler/kernel_memory.h"
#include "autoscheduler/planner.h"
#include "generators/jit_kernel.h"
#include "runtime/executor.h"
#include "runtime/host_threads.h"
#include "runtime/memory_ledger.h"
#include "runtime/optimizer.h"
#include "spec/kernel_signature.h"
#include "test/random_model.h"
#include "test/test_support.h"

using namespace segtile;
using namespace segtile::random_models;

namespace {

constexpr double kTolerance = 1e-5;  // relative, float32
constexpr const char *kOverPrediction = "measured above the predicted peak by";
// A draw past kTolerance of the untiled float32 step whose tiled step is
// no further (within 2x, and within kTolerance or the untiled step's own
// error) from the float64 step: the reference's rounding, not a defect.
constexpr const char *kRounding = "within float32 rounding of the float64 step";

enum class Outcome { Pass, Rejected, Crash, Mismatch, CapViolation, MismatchAndCapViolation };

const char *outcome_name(Outcome o) {
    switch (o) {
    case Outcome::Pass: return "pass";
    case Outcome::Rejected: return "rejected";
    case Outcome::Crash: return "crash";
    case Outcome::Mismatch: return "mismatch";
    case Outcome::CapViolation: return "cap-violation";
    case Outcome::MismatchAndCapViolation: return "mismatch+cap-violation";
    }
    return "?";
}

Outcome outcome_from(const std::string &s) {
    for (Outcome o : {Outcome::Pass, Outcome::Rejected, Outcome::Crash, Outcome::Mismatch, Outcome::CapViolation,
                      Outcome::MismatchAndCapViolation})
        if (s == outcome_name(o)) return o;
    return Outcome::Crash;
}

struct DrawResult {
    int index = 0;  // within the model: sizes in order, caps in order
    Outcome outcome = Outcome::Crash;
    std::string detail;   // one line for a pass; the error or the numbers otherwise
    int64_t cap = 0;      // bytes; 0: none
    int width = 0, height = 0;
    double seconds = 0;
};

// Flat draw index -> (size, cap).
std::pair<int, int> draw_position(const ModelCase &mc, int index) {
    for (int s = 0; s < (int)mc.sizes.size(); s++) {
        if (index < (int)mc.sizes[s].caps.size()) return {s, index};
        index -= (int)mc.sizes[s].caps.size();
    }
    return {-1, -1};
}

// A kernel shared by every executor of a model whose plan has its segment.
class SharedKernel : public Kernel {
public:
    explicit SharedKernel(std::shared_ptr<Kernel> k) : k_(std::move(k)) {}
    const std::vector<KernelArg> &signature() const override { return k_->signature(); }
    void call(const std::vector<void *> &args) override { k_->call(args); }

private:
    std::shared_ptr<Kernel> k_;
};

// max |a - b| / max |b|; 0 where both are all zeros.
double tensor_rel(const float *a, const float *b, int64_t n) {
    double ref = 0, diff = 0;
    for (int64_t k = 0; k < n; k++) {
        ref = std::max(ref, std::abs((double)b[k]));
        diff = std::max(diff, std::abs((double)a[k] - (double)b[k]));
    }
    if (!std::isfinite(diff) || !std::isfinite(ref)) return INFINITY;
    if (ref == 0) return diff == 0 ? 0 : INFINITY;
    return diff / ref;
}

std::string fmt(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", v);
    return b;
}

// Runs the draws of one model in this process (the child).
class ModelRunner {
public:
    explicit ModelRunner(const ModelCase &mc)
        : mc_(mc), m_(mc.model), target_(Halide::get_jit_target_from_environment()),
          exact_(m_, Halide::Float(32), [t = target_](const std::vector<Halide::Func> &o) { schedule_cpu(o, t); },
                 target_),
          tiled_store_(m_, &tiled_ledger_), untiled_store_(m_, &untiled_ledger_) {
        // The planner counts an Adam optimizer's state as the program holds it.
        optimizer_ = std::make_unique<Optimizer>(OptimizerConfig{"adam"}, tiled_store_, &tiled_ledger_);
        std::mt19937 rng((unsigned)(mc.seed * 7919 + 1));
        const auto params = segtile::testing::random_params(m_, rng);
        for (size_t p = 0; p < params.size(); p++) {
            Halide::Buffer<double> src(params[p]);
            float *a = tiled_store_.values[p].as<float>(), *b = untiled_store_.values[p].as<float>();
            for (int64_t k = 0; k < (int64_t)src.number_of_elements(); k++) a[k] = b[k] = (float)src.begin()[k];
        }
        host_threads_ = HostThreads::for_this_machine();
    }

    DrawResult run(int index) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto [si, ci] = draw_position(mc_, index);
        const SizeCase &sc = mc_.sizes.at(si);
        const CapSpec &cs = sc.caps.at(ci);
        DrawResult r;
        r.index = index;
        r.width = sc.width;
        r.height = sc.height;
        auto crash = [&](const std::string &where, const std::string &what) {
            r.outcome = Outcome::Crash;
            r.detail = where + ": " + what;
        };
        try {
            run_draw(si, cs, r);
        } catch (const PlanError &e) {
            crash("unexpected PlanError", e.what());
        } catch (const Halide::Error &e) {
            crash("Halide error", e.what());
        } catch (const std::exception &e) {
            crash(std::string("exception (") + typeid(e).name() + ")", e.what());
        } catch (...) {
            crash("unknown exception", "(not a std::exception)");
        }
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return r;
    }

private:
    struct Reference {
        bool ready = false;
        Tensor images;
        Halide::Runtime::Buffer<> lt;
        double loss = 0;
        std::vector<std::vector<float>> grads;  // per param (empty: buffer)
        std::vector<float> prediction, grad_image;
        std::vector<int64_t> prediction_dims;
        int64_t smallest = 0;  // the smallest feasible cap
        std::string smallest_message;
        int64_t free_peak = -1;  // peak of the uncapped plan; -1: not yet planned
    };

    PlanRequest request(int width, int height, int64_t cap) const {
        PlanRequest req;
        req.width = width;
        req.height = height;
        req.batch = mc_.batch;
        req.memory_cap = cap;
        req.optimizer_copies = 2;
        req.image_gradient = mc_.image_gradient;
        const char *threads = std::getenv("HL_NUM_THREADS");
        req.threads = threads ? std::max(1, std::atoi(threads)) : (int)std::thread::hardware_concurrency();
        return req;
    }

    std::shared_ptr<Kernel> kernel(const SegmentLayout &layout, KernelKind kind, int s, MemoryLedger *ledger) {
        const auto [first, last] = kernel_layers(m_, layout, kind, s);
        std::string key = std::to_string(first) + ":" + std::to_string(last) + ":" + std::to_string((int)kind) + ":" +
                          std::to_string(layout.image_gradient) + ":" + (ledger == &tiled_ledger_ ? "t" : "u");
        for (const auto &a : kernel_signature(m_, layout, kind, s)) key += "," + a.name;
        auto &slot = kernels_[key];
        if (!slot)
            slot = std::make_shared<JitKernel>(m_, layout, kind, s, Halide::Float(32), ledger, std::set<std::string>{},
                                               Schedule::Cpu);
        return slot;
    }

    ModelKernels kernels_for(const SegmentLayout &layout, MemoryLedger *ledger) {
        ModelKernels k;
        for (size_t s = 0; s < layout.segments.size(); s++) {
            k.forward.push_back(std::make_unique<SharedKernel>(kernel(layout, KernelKind::Forward, (int)s, ledger)));
            k.backward.push_back(std::make_unique<SharedKernel>(kernel(layout, KernelKind::Backward, (int)s, ledger)));
        }
        k.head = std::make_unique<SharedKernel>(kernel(layout, KernelKind::Head, 0, ledger));
        return k;
    }

    Tensor make_prediction(const Reference &ref) const {
        return Tensor(ref.prediction_dims, nullptr, MemoryLedger::Kind::Data);
    }

    // The batch, the untiled step and the planner's smallest cap for a size.
    Reference &reference(int si) {
        Reference &ref = refs_[si];
        if (ref.ready) return ref;
        const SizeCase &sc = mc_.sizes[si];
        const int N = mc_.batch;
        std::mt19937 rng((unsigned)(mc_.seed * 104729 + si * 31 + 7));
        ref.images = Tensor({sc.width, sc.height, m_.input_channels, N}, nullptr, MemoryLedger::Kind::Data);
        std::normal_distribution<float> nd;
        for (int64_t i = 0; i < ref.images.numel(); i++) ref.images.data()[i] = nd(rng);
        const TensorShape ps = m_.shapes(sc.width, sc.height)[m_.loss.input_id];
        ref.prediction_dims = {ps.width, ps.height, ps.channels, N};
        if (m_.loss.kind == LossKind::SoftmaxCrossEntropy) {
            Halide::Runtime::Buffer<int32_t> l(N);
            std::uniform_int_distribution<int> u(0, m_.output_channels() - 1);
            l.for_each_value([&](int32_t &v) { v = u(rng); });
            ref.lt = l;
        } else {
            Halide::Runtime::Buffer<float> tg((int)ps.width, (int)ps.height, (int)ps.channels, N);
            tg.for_each_value([&](float &v) { v = nd(rng); });
            ref.lt = tg;
        }

        // The untiled step: `--memory-cap none`.
        {
            const SegmentLayout layout = untiled_layout(m_, mc_.image_gradient);
            SegmentedExecutor exec(m_, layout, kernels_for(layout, &untiled_ledger_), {}, &untiled_ledger_);
            exec.set_host_threads(host_threads_);
            Tensor pred = make_prediction(ref);
            Tensor gi;
            if (mc_.image_gradient) gi = Tensor(ref.images.dims(), nullptr, MemoryLedger::Kind::Data);
            try {
                ref.loss = exec.step(ref.images, ref.lt, untiled_store_, &pred, mc_.image_gradient ? &gi : nullptr);
            } catch (const Halide::Error &e) {
                throw std::runtime_error(std::string("untiled step: Halide error: ") + e.what());
            } catch (const std::exception &e) {
                throw std::runtime_error(std::string("untiled step: ") + e.what());
            }
            ref.prediction.assign(pred.data(), pred.data() + pred.numel());
            if (mc_.image_gradient) ref.grad_image.assign(gi.data(), gi.data() + gi.numel());
            ref.grads.resize(untiled_store_.specs().size());
            for (size_t p = 0; p < untiled_store_.specs().size(); p++)
                if (untiled_store_.specs()[p].trainable)
                    ref.grads[p].assign(untiled_store_.grads[p].data(),
                                        untiled_store_.grads[p].data() + untiled_store_.grads[p].numel());
        }

        // The smallest feasible cap: asking for 1 byte must be refused
        // with the PlanError that names it.
        try {
            make_plan(m_, request(sc.width, sc.height, 1), &exact_);
            throw std::runtime_error("the planner accepted a 1-byte cap");
        } catch (const PlanError &e) {
            ref.smallest = e.smallest_feasible_cap;
            ref.smallest_message = e.what();
            if (ref.smallest_message.find("smallest feasible cap") == std::string::npos)
                throw std::runtime_error(std::string("a 1-byte cap was refused without naming the smallest feasible cap: ") +
                                         e.what());
        } catch (const Halide::Error &e) {
            throw std::runtime_error(std::string("planning under a 1-byte cap: Halide error: ") + e.what());
        }
        ref.ready = true;
        return ref;
    }

    // The untiled step in float64 from the float32 step's inputs (compiled
    // only when a draw mismatches).
    struct Oracle {
        bool ready = false;
        double loss = 0;
        std::vector<std::vector<double>> grads;
        std::vector<double> prediction, grad_image;
    };
    const Oracle &oracle(int si) {
        Oracle &o = oracles_[si];
        if (o.ready) return o;
        const Reference &ref = refs_.at(si);
        const SegmentLayout layout = untiled_layout(m_, mc_.image_gradient);
        if (!oracle_kernel_)
            oracle_kernel_ = std::make_shared<JitKernel>(m_, layout, KernelKind::Head, 0, Halide::Float(64), &oracle_ledger_,
                                                         std::set<std::string>{}, Schedule::Cpu);
        ModelKernels k;
        k.head = std::make_unique<SharedKernel>(oracle_kernel_);
        const halide_type_t f64 = halide_type_of<double>();
        SegmentedExecutor exec(m_, layout, std::move(k), {}, &oracle_ledger_, f64);
        ParamStore store(m_, &oracle_ledger_, f64);
        for (size_t p = 0; p < store.values.size(); p++)
            for (int64_t i = 0; i < store.values[p].numel(); i++)
                store.values[p].as<double>()[i] = (double)tiled_store_.values[p].data()[i];
        Tensor images(ref.images.dims(), nullptr, MemoryLedger::Kind::Data, f64);
        for (int64_t i = 0; i < images.numel(); i++) images.as<double>()[i] = (double)ref.images.data()[i];
        Halide::Runtime::Buffer<> lt = ref.lt;
        Halide::Runtime::Buffer<double> target64;
        if (m_.loss.kind != LossKind::SoftmaxCrossEntropy) {
            Halide::Runtime::Buffer<float> t32(*ref.lt.raw_buffer());
            target64 = Halide::Runtime::Buffer<double>(t32.dim(0).extent(), t32.dim(1).extent(), t32.dim(2).extent(),
                                                       t32.dim(3).extent());
            target64.for_each_element([&](const int *pos) { target64(pos) = (double)t32(pos); });
            lt = target64;
        }
        Tensor pred(ref.prediction_dims, nullptr, MemoryLedger::Kind::Data, f64);
        Tensor gi;
        if (mc_.image_gradient) gi = Tensor(ref.images.dims(), nullptr, MemoryLedger::Kind::Data, f64);
        o.loss = exec.step(images, lt, store, &pred, mc_.image_gradient ? &gi : nullptr);
        o.prediction.assign(pred.as<double>(), pred.as<double>() + pred.numel());
        if (mc_.image_gradient) o.grad_image.assign(gi.as<double>(), gi.as<double>() + gi.numel());
        o.grads.resize(store.specs().size());
        for (size_t p = 0; p < store.specs().size(); p++)
            if (store.specs()[p].trainable)
                o.grads[p].assign(store.grads[p].as<double>(), store.grads[p].as<double>() + store.grads[p].numel());
        o.ready = true;
        return o;
    }

    int64_t free_peak(int si, Reference &ref) {
        if (ref.free_peak < 0) {
            const SizeCase &sc = mc_.sizes[si];
            ref.free_peak = make_plan(m_, request(sc.width, sc.height, 0), &exact_).peak_bytes;
        }
        return ref.free_peak;
    }

    void run_draw(int si, const CapSpec &cs, DrawResult &r) {
        const SizeCase &sc = mc_.sizes[si];
        Reference &ref = reference(si);
        const int64_t S = ref.smallest;
        int64_t cap = 0;
        switch (cs.kind) {
        case CapSpec::Below: cap = std::max<int64_t>(1, (int64_t)((double)S * cs.frac)); break;
        case CapSpec::Smallest: cap = S; break;
        case CapSpec::Between: {
            const double top = 1.25 * (double)std::max(free_peak(si, ref), S);
            cap = (int64_t)((double)S * std::pow(top / (double)S, cs.frac));
            break;
        }
        case CapSpec::None: cap = 0; break;
        }
        r.cap = cap;
        const std::string cap_text = cap ? format_bytes(cap) + " (" + std::to_string(cap) + " B)" : "none";

        Plan plan;
        try {
            plan = make_plan(m_, request(sc.width, sc.height, cap), &exact_);
        } catch (const PlanError &e) {
            const std::string what = e.what();
            if (cap > 0 && cap < S && what.find("smallest feasible cap") != std::string::npos) {
                r.outcome = Outcome::Rejected;
                r.detail = what;
                return;
            }
            r.outcome = Outcome::Crash;
            r.detail = cap > 0 && cap < S ? "a PlanError without the smallest feasible cap: " + what
                                          : "the planner refused cap " + cap_text + ", at or above the smallest feasible cap " +
                                                format_bytes(S) + " (" + std::to_string(S) + " B) it names: " + what;
            return;
        } catch (const Halide::Error &e) {
            r.outcome = Outcome::Crash;
            r.detail = "planning under " + cap_text + ": Halide error: " + e.what();
            return;
        } catch (const std::exception &e) {
            r.outcome = Outcome::Crash;
            r.detail = "planning under " + cap_text + ": " + typeid(e).name() + ": " + e.what();
            return;
        }

        const SegmentLayout layout = make_segments(m_, plan.cuts, mc_.image_gradient);
        SegmentedExecutor exec(m_, layout, kernels_for(layout, &tiled_ledger_), plan.tile_sizes(), &tiled_ledger_);
        exec.set_host_threads(host_threads_);
        Tensor pred = make_prediction(ref);
        Tensor gi;
        if (mc_.image_gradient) gi = Tensor(ref.images.dims(), nullptr, MemoryLedger::Kind::Data);
        tiled_ledger_.reset_peaks();
        const double loss = exec.step(ref.images, ref.lt, tiled_store_, &pred, mc_.image_gradient ? &gi : nullptr);
        const int64_t peak = tiled_ledger_.peak();

        std::ostringstream why;
        double worst = 0;
        // What failed, to set beside the float64 oracle below.
        struct Miss {
            std::string what;
            const float *tiled, *untiled;
            int64_t n;
            int oracle;  // -1 prediction, -2 image gradient, else the parameter
        };
        std::vector<Miss> misses;
        auto check = [&](const std::string &what, const float *a, const float *b, int64_t n, int oracle) {
            const double rel = tensor_rel(a, b, n);
            worst = std::max(worst, std::isfinite(rel) ? rel : 1e300);
            if (!(rel <= kTolerance)) {
                why << "  " << what << ": relative difference " << fmt(rel) << "\n";
                misses.push_back({what, a, b, n, oracle});
            }
        };
        const double loss_rel = std::abs(loss - ref.loss) / std::max({std::abs(ref.loss), std::abs(loss), 1e-6});
        if (!(loss_rel <= kTolerance))
            why << "  loss: tiled " << loss << ", untiled " << ref.loss << " (relative " << fmt(loss_rel) << ")\n";
        worst = std::max(worst, loss_rel);
        check("prediction", pred.data(), ref.prediction.data(), pred.numel(), -1);
        if (mc_.image_gradient) check("image gradient", gi.data(), ref.grad_image.data(), gi.numel(), -2);
        for (size_t p = 0; p < tiled_store_.specs().size(); p++) {
            if (!tiled_store_.specs()[p].trainable) continue;
            check("gradient " + tiled_store_.specs()[p].name, tiled_store_.grads[p].data(), ref.grads[p].data(),
                  tiled_store_.grads[p].numel(), (int)p);
        }
        bool mismatch = !why.str().empty();
        if (mismatch) {
            bool defect = false;  // any miss the float64 step does not explain
            // Rounding or a wrong sum? Both float32 steps against the
            // untiled step in float64 from the same inputs (max |difference|
            // over max |float64 value|): a defect is far off where rounding
            // is a few float32 ulps per summand.
            try {
                const Oracle &o = oracle(si);
                auto beyond = [](double tiled_off, double untiled_off) {
                    return !(tiled_off <= std::max(kTolerance, 2 * untiled_off));
                };
                const double lt = std::abs(loss - o.loss) / std::abs(o.loss), lu = std::abs(ref.loss - o.loss) / std::abs(o.loss);
                defect = defect || beyond(lt, lu);
                why << "  float64 untiled step: loss " << o.loss << " (tiled " << fmt(lt) << " off, untiled " << fmt(lu)
                    << ")\n";
                for (const Miss &x : misses) {
                    const std::vector<double> &t = x.oracle == -1 ? o.prediction : x.oracle == -2 ? o.grad_image : o.grads[x.oracle];
                    auto off = [&](const float *a) {
                        double ref64 = 0, diff = 0;
                        for (int64_t k = 0; k < x.n; k++) {
                            ref64 = std::max(ref64, std::abs(t[k]));
                            diff = std::max(diff, std::abs((double)a[k] - t[k]));
                        }
                        return ref64 > 0 ? diff / ref64 : diff;
                    };
                    const double t_off = off(x.tiled), u_off = off(x.untiled);
                    defect = defect || beyond(t_off, u_off);
                    why << "  float64 untiled step: " << x.what << ": tiled float32 " << fmt(t_off)
                        << " off, untiled float32 " << fmt(u_off) << " off\n";
                }
            } catch (const Halide::Error &e) {
                defect = true;
                why << "  (the float64 step failed: " << e.what() << ")\n";
            } catch (const std::exception &e) {
                defect = true;
                why << "  (the float64 step failed: " << e.what() << ")\n";
            }
            mismatch = defect;
        }
        const bool over = cap > 0 && peak > cap;
        std::ostringstream d;
        d << "cap " << cap_text << ", cuts [" << plan.cuts_string() << "], tiles";
        for (const auto &t : plan.tile_sizes()) d << " " << t.width << "x" << t.height;
        d << ", " << exec.tiles_run() << " tile calls; measured peak " << format_bytes(peak) << " (" << peak
          << " B), predicted " << format_bytes(plan.peak_bytes) << "; worst relative difference " << fmt(worst);
        if (cap > 0 && cap < S) d << "; planned below the smallest feasible cap named (" << format_bytes(S) << ")";
        // Not a failure while the cap holds, but the memory model's miss
        // (the runtime reserve of a tiny model's plan hides it from the cap).
        if (peak > plan.peak_bytes) d << "; " << kOverPrediction << " " << peak - plan.peak_bytes << " B";
        if (!mismatch && !why.str().empty()) d << "; " << kRounding << ":\n" << why.str();
        if (mismatch || over) {
            d << "\n";
            if (over) d << "  measured peak " << peak << " B exceeds the cap " << cap << " B by " << peak - cap << " B\n";
            d << why.str() << plan_table(plan, m_);
        }
        r.outcome = mismatch && over ? Outcome::MismatchAndCapViolation
                    : mismatch       ? Outcome::Mismatch
                    : over           ? Outcome::CapViolation
                                     : Outcome::Pass;
        r.detail = d.str();
    }

    const ModelCase &mc_;
    Model m_;
    Halide::Target target_;
    LoweredKernelMemory exact_;
    MemoryLedger tiled_ledger_, untiled_ledger_;
    ParamStore tiled_store_, untiled_store_;
    std::unique_ptr<Optimizer> optimizer_;
    std::shared_ptr<HostThreads> host_threads_;
    std::map<std::string, std::shared_ptr<Kernel>> kernels_;
    std::map<int, Reference> refs_;
    MemoryLedger oracle_ledger_;
    std::shared_ptr<Kernel> oracle_kernel_;
    std::map<int, Oracle> oracles_;
};

// One line of the child's report: newlines and backslashes escaped.
std::string escape(const std::string &s) {
    std::string o;
    for (char c : s) {
        if (c == '\\') o += "\\\\";
        else if (c == '\n') o += "\\n";
        else o += c;
    }
    return o;
}
std::string unescape(const std::string &s) {
    std::string o;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            o += s[i + 1] == 'n' ? '\n' : s[i + 1];
            i++;
        } else {
            o += s[i];
        }
    }
    return o;
}

// Runs every draw of `mc` in child processes: one child for the model, and
// after a child dies, a fresh one for the draws it did not reach.
std::vector<DrawResult> run_model(const ModelCase &mc, int timeout_s) {
    std::vector<DrawResult> results;
    const int n = mc.draws();
    int next = 0;
    while (next < n) {
        int fds[2];
        if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
        std::fflush(stdout);
        std::cout.flush();
        const pid_t pid = fork();
        if (pid < 0) throw std::runtime_error("fork failed");
        if (pid == 0) {
            close(fds[0]);
            FILE *out = fdopen(fds[1], "w");
            alarm((unsigned)timeout_s);
            std::unique_ptr<ModelRunner> runner;
            try {
                runner = std::make_unique<ModelRunner>(mc);
            } catch (const Halide::Error &e) {
                std::fprintf(out, "F %s\n", escape(std::string("setting up the model: Halide error: ") + e.what()).c_str());
                std::fflush(out);
                _exit(0);
            } catch (const std::exception &e) {
                std::fprintf(out, "F %s\n", escape(std::string("setting up the model: ") + e.what()).c_str());
                std::fflush(out);
                _exit(0);
            }
            for (int i = next; i < n; i++) {
                alarm((unsigned)timeout_s);
                std::fprintf(out, "B %d\n", i);
                std::fflush(out);
                const DrawResult r = runner->run(i);
                std::fprintf(out, "R %d %s %lld %d %d %.3f %s\n", r.index, outcome_name(r.outcome), (long long)r.cap,
                             r.width, r.height, r.seconds, escape(r.detail).c_str());
                std::fflush(out);
                std::fflush(stdout);
            }
            std::fflush(stdout);
            _exit(0);
        }
        close(fds[1]);
        FILE *in = fdopen(fds[0], "r");
        int begun = -1;
        std::string setup_failure;
        char *line = nullptr;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, in)) > 0) {
            std::string s(line, line[len - 1] == '\n' ? len - 1 : len);
            if (s.rfind("B ", 0) == 0) {
                begun = std::atoi(s.c_str() + 2);
            } else if (s.rfind("F ", 0) == 0) {
                setup_failure = unescape(s.substr(2));
            } else if (s.rfind("R ", 0) == 0) {
                std::istringstream is(s.substr(2));
                DrawResult r;
                std::string outcome;
                long long c;
                is >> r.index >> outcome >> c >> r.width >> r.height >> r.seconds;
                r.cap = c;
                r.outcome = outcome_from(outcome);
                std::string rest;
                std::getline(is, rest);
                r.detail = unescape(rest.empty() ? rest : rest.substr(1));
                results.push_back(r);
                next = r.index + 1;
                begun = -1;
            }
        }
        std::free(line);
        fclose(in);
        int status = 0;
        waitpid(pid, &status, 0);
        if (!setup_failure.empty()) {
            for (int i = next; i < n; i++) {
                DrawResult r;
                r.index = i;
                r.outcome = Outcome::Crash;
                r.detail = setup_failure;
                results.push_back(r);
            }
            break;
        }
        if (next < n) {
            // The child died during draw `begun` (or before its first).
            std::string why;
            if (WIFSIGNALED(status))
                why = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                      strsignal(WTERMSIG(status)) + ")" +
                      (WTERMSIG(status) == SIGALRM ? ": no result within " + std::to_string(timeout_s) + " s" : "");
            else
                why = "exited with status " + std::to_string(WEXITSTATUS(status)) + " before finishing";
            DrawResult r;
            r.index = begun >= 0 ? begun : next;
            r.outcome = Outcome::Crash;
            r.detail = "the process " + why + " (its stderr, above, has the message)";
            const auto [si, ci] = draw_position(mc, r.index);
            if (si >= 0) {
                r.width = mc.sizes[si].width;
                r.height = mc.sizes[si].height;
            }
            results.push_back(r);
            next = r.index + 1;
        }
    }
    return results;
}

struct Tally {
    int draws = 0, crashes = 0, mismatches = 0, violations = 0, rejected = 0, passed = 0;
    int over_prediction = 0, rounding = 0;
    void add(Outcome o, const std::string &detail) {
        draws++;
        if (detail.find(kOverPrediction) != std::string::npos) over_prediction++;
        if (detail.find(kRounding) != std::string::npos) rounding++;
        if (o == Outcome::Crash) crashes++;
        if (o == Outcome::Mismatch || o == Outcome::MismatchAndCapViolation) mismatches++;
        if (o == Outcome::CapViolation || o == Outcome::MismatchAndCapViolation) violations++;
        if (o == Outcome::Rejected) rejected++;
        if (o == Outcome::Pass) passed++;
    }
    int failures() const { return crashes + mismatches + violations; }
    std::string summary() const {
        std::ostringstream s;
        s << "random models: " << draws << " draws, " << crashes << " crashes, " << mismatches << " mismatches, "
          << violations << " cap violations, " << rejected << " rejected cleanly";
        return s.str();
    }
};

std::string size_text(const ModelCase &mc, const DrawResult &r) {
    const auto [si, ci] = draw_position(mc, r.index);
    std::ostringstream s;
    s << r.width << "x" << r.height;
    if (si >= 0) s << " (" << mc.sizes[si].why << ", batch " << mc.batch << "), cap " << describe(mc.sizes[si].caps[ci]);
    return s.str();
}

// A failing draw in markdown: what the lead needs to reproduce it.
std::string failure_report(const ModelCase &mc, const DrawResult &r) {
    std::ostringstream s;
    s << "### seed " << mc.seed << " draw " << r.index << ": " << outcome_name(r.outcome) << "\n\n"
      << "- model: " << mc.shape << "; smallest side " << mc.min_side << "; image gradient "
      << (mc.image_gradient ? "yes" : "no") << "\n"
      << "- size " << size_text(mc, r) << " = " << (r.cap ? format_bytes(r.cap) + " (" + std::to_string(r.cap) + " B)" : "none")
      << "\n- repro: `random_models_test --model " << mc.seed << "`\n\n```\n"
      << r.detail << "\n```\n\nmodel JSON:\n\n```json\n" << mc.json << "\n```\n\n";
    return s.str();
}

// Runs models until `draws` draws are done (seeds from `first` on) or the
// seeds of `seeds` (when given); prints a line per draw, every failure in
// full, and the summary.
Tally run_suite(const std::vector<uint64_t> &seeds, const std::string &report_path, int timeout_s, int draws_wanted = 0,
                uint64_t first = 0) {
    Tally t;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::string> failures;
    auto run_one = [&](uint64_t seed) {
        const ModelCase mc = draw_model(seed);
        std::printf("seed %llu: %s; %d layers, %d draws\n", (unsigned long long)seed, mc.shape.c_str(),
                    (int)mc.model.layers.size(), mc.draws());
        std::fflush(stdout);
        for (const DrawResult &r : run_model(mc, timeout_s)) {
            t.add(r.outcome, r.detail);
            const std::string first_line = r.detail.substr(0, r.detail.find('\n'));
            std::printf("  seed %llu draw %d %s: %s [%.1f s] %s\n", (unsigned long long)seed, r.index,
                        size_text(mc, r).c_str(), outcome_name(r.outcome), r.seconds, first_line.c_str());
            if (r.outcome != Outcome::Pass && r.outcome != Outcome::Rejected) {
                const std::string rep = failure_report(mc, r);
                std::printf("%s", rep.c_str());
                failures.push_back(rep);
                if (!report_path.empty()) {
                    std::ofstream f(report_path, std::ios::app);
                    f << rep;
                }
            }
            std::fflush(stdout);
        }
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("  (%d draws in %.0f s so far; %d failures)\n", t.draws, el, t.failures());
    };
    if (!seeds.empty()) {
        for (uint64_t s : seeds) run_one(s);
    } else {
        for (uint64_t s = first; t.draws < draws_wanted; s++) run_one(s);
    }
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s (%.0f s)\n", t.summary().c_str(), el);
    std::printf("(measured peak above the plan's predicted peak, within the cap: %d draws)\n", t.over_prediction);
    std::printf("(past the tolerance of the untiled float32 step, %s: %d draws)\n", kRounding, t.rounding);
    std::fflush(stdout);
    return t;
}

// The fixed seed list of the ctest run: at least 50 draws, about 8 minutes
// on two cores.
const std::vector<uint64_t> kSeeds = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};

}  // namespace

TEST(RandomModels, GeneratorDrawsValidModelsOnly) {
    std::map<std::string, int> kinds;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        const ModelCase mc = draw_model(seed);
        const ModelCase again = draw_model(seed);
        ASSERT_EQ(mc.json, again.json) << "seed " << seed << " draws differently each time";
        ASSERT_GE(mc.draws(), 2);
        for (const auto &s : mc.sizes) EXPECT_NO_THROW(mc.model.shapes(s.width, s.height)) << mc.json;
        for (const auto &l : mc.model.layers) {
            std::string k = to_string(l.kind);
            if (l.kind == LayerKind::Conv2d) {
                kinds["conv k" + std::to_string(l.kernel)]++;
                if (l.stride == 2) kinds["conv stride 2"]++;
                if (l.dilation == 2) kinds["conv dilation 2"]++;
                if (l.groups > 1) kinds["conv groups"]++;
                if (l.groups > 1 && l.groups == l.in_channels && l.groups == l.out_channels) kinds["conv depthwise"]++;
                if (l.padding == 0 && l.kernel > 1) kinds["conv unpadded"]++;
                if (!l.bias) kinds["conv no bias"]++;
            }
            if ((l.kind == LayerKind::MaxPool || l.kind == LayerKind::AvgPool) && l.padding > 0) kinds[k + " padded"]++;
            kinds[k]++;
        }
        kinds[std::string("loss ") + to_string(mc.model.loss.kind)]++;
        for (const char *k : {"skip-from-image", "long-skip", "residual", "residual-down", "add3", "unet", "up-down", "concat"})
            if (mc.shape.find(std::string(" ") + k) != std::string::npos) kinds[std::string("block ") + k]++;
        for (const char *h : {"gap-dense", "gap-dense-dense", "conv-gap", "conv-gap-flatten", "flatten-dense", "seg-map", "regression"})
            if (mc.shape.size() >= std::strlen(h) && mc.shape.compare(mc.shape.size() - std::strlen(h), std::string::npos, h) == 0)
                kinds[std::string("head ") + h]++;
        for (const auto &s : mc.sizes) kinds["size " + s.why]++;
    }
    for (const auto &[k, n] : kinds) std::printf("%s: %d\n", k.c_str(), n);
    for (const char *k : {"conv2d", "relu", "leaky_relu", "sigmoid", "max_pool", "avg_pool", "batch_norm", "upsample",
                          "concat", "add", "global_avg_pool", "flatten", "dense", "conv k1", "conv k3", "conv k5",
                          "conv k7", "conv stride 2", "conv dilation 2", "conv groups", "conv depthwise",
                          "conv unpadded", "max_pool padded", "avg_pool padded", "size min", "size min+1",
                          "size thin", "size random", "size large", "block skip-from-image", "block long-skip",
                          "block residual", "block residual-down", "block add3", "block unet", "block up-down",
                          "block concat", "head gap-dense", "head gap-dense-dense", "head conv-gap",
                          "head conv-gap-flatten", "head flatten-dense", "head seg-map", "head regression"})
        EXPECT_GT(kinds[k], 0) << k << " never drawn";
}

TEST(RandomModels, TiledEqualsUntiled) {
    int draws = 0;
    for (uint64_t s : kSeeds) draws += draw_model(s).draws();
    ASSERT_GE(draws, 50) << "the seed list must hold at least 50 draws";
    const Tally t = run_suite(kSeeds, "", 600);
    EXPECT_EQ(t.draws, draws);
    EXPECT_EQ(t.failures(), 0) << t.summary();
}

int main(int argc, char **argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto value = [&](const std::string &flag) -> std::string {
        for (size_t i = 0; i + 1 < args.size(); i++)
            if (args[i] == flag) return args[i + 1];
        return "";
    };
    const std::string report = value("--report");
    const int timeout_s = value("--timeout").empty() ? 600 : std::stoi(value("--timeout"));
    // LLVM's options as ctest gives them (test/CMakeLists.txt), unless set.
    setenv("HL_LLVM_ARGS", "-enable-misched=false -join-liveintervals=false -disable-lsr -fast-isel", 0);
    if (!value("--list").empty()) {
        const uint64_t a = std::stoull(value("--list"));
        const uint64_t b = value("--to").empty() ? a : std::stoull(value("--to"));
        for (uint64_t s = a; s <= b; s++) {
            const ModelCase mc = draw_model(s);
            std::printf("seed %llu: %s; smallest side %d; batch %d; image gradient %d; %d draws:",
                        (unsigned long long)s, mc.shape.c_str(), mc.min_side, mc.batch, (int)mc.image_gradient,
                        mc.draws());
            for (const auto &sc : mc.sizes) {
                std::printf(" %dx%d (%s) [", sc.width, sc.height, sc.why.c_str());
                for (const auto &c : sc.caps) std::printf(" %s;", describe(c).c_str());
                std::printf(" ]");
            }
            std::printf("\n");
            if (value("--json") == "1") std::printf("%s\n", mc.json.c_str());
        }
        return 0;
    }
    if (!value("--model").empty()) {
        const uint64_t s = std::stoull(value("--model"));
        std::printf("%s\n", draw_model(s).json.c_str());
        return run_suite({s}, report, timeout_s).failures() ? 1 : 0;
    }
    if (!value("--draws").empty()) {
        const int n = std::stoi(value("--draws"));
        const uint64_t first = value("--seed").empty() ? 1000 : std::stoull(value("--seed"));
        return run_suite({}, report, timeout_s, n, first).failures() ? 1 : 0;
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
