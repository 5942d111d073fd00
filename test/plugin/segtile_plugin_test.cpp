// The Segtile autoscheduler plugin on pipelines segtile did not write for
// itself: same outputs as the everything-at-root reference, and the peak of
// Halide's live heap allocations (measured by malloc hooks) under the cap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>
#include <thread>

#include "Halide.h"
#include "test/plugin/allocation_peak.h"
#include "test/plugin/test_pipelines.h"

namespace segtile::plugin_test {
namespace {

using namespace Halide;

Target host() { return get_jit_target_from_environment(); }

// The JIT runtime runs one thread per core; the plan must assume as many.
int threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

struct ScheduledRun {
    std::vector<Buffer<float>> outputs;
    int64_t peak = 0;      // measured, bytes
    std::string schedule;  // the plugin's schedule source
};

ScheduledRun realize(const TestPipeline &tp, const Pipeline &p) {
    ScheduledRun run;
    std::vector<Buffer<>> buffers;
    for (const std::vector<int> &sizes : tp.output_sizes) {
        run.outputs.emplace_back(sizes);
        buffers.push_back(run.outputs.back());
    }
    Realization r(buffers);
    AllocationPeak ctx;
    Pipeline(p).realize(&ctx, r, host());
    EXPECT_EQ(ctx.live(), 0) << "allocations left alive";
    run.peak = ctx.peak();
    return run;
}

ScheduledRun run_reference(const std::string &name) {
    TestPipeline tp = make_pipeline(name);
    schedule_all_root(tp.outputs);
    return realize(tp, Pipeline(tp.outputs));
}

AutoschedulerParams segtile_params(std::optional<int64_t> cap) {
    std::map<std::string, std::string> extra{{"parallelism", std::to_string(threads())}};
    if (cap) extra["memory_cap"] = std::to_string(*cap);
    return {"Segtile", extra};
}

ScheduledRun run_segtile(const std::string &name, std::optional<int64_t> cap) {
    TestPipeline tp = make_pipeline(name);
    Pipeline p(tp.outputs);
    AutoSchedulerResults results = p.apply_autoscheduler(host(), segtile_params(cap));
    ScheduledRun run = realize(tp, p);
    run.schedule = results.schedule_source;
    return run;
}

int64_t number_after(const std::string &text, const std::string &pattern) {
    std::smatch m;
    if (!std::regex_search(text, m, std::regex(pattern + " ([0-9]+) bytes"))) return -1;
    return std::stoll(m[1]);
}

// The smallest feasible cap, as the plugin's error message for a cap of one
// byte gives it.
int64_t smallest_feasible_cap(const std::string &name) {
    TestPipeline tp = make_pipeline(name);
    try {
        Pipeline(tp.outputs).apply_autoscheduler(host(), segtile_params(1));
    } catch (const CompileError &e) {
        return number_after(e.what(), "smallest feasible memory_cap for this pipeline .* is");
    }
    ADD_FAILURE() << "a cap of one byte was accepted";
    return -1;
}

void expect_same_outputs(const ScheduledRun &run, const ScheduledRun &reference) {
    ASSERT_EQ(run.outputs.size(), reference.outputs.size());
    for (size_t i = 0; i < run.outputs.size(); i++) {
        double worst = 0;
        run.outputs[i].for_each_element([&](const int *pos) {
            const double a = run.outputs[i](pos), b = reference.outputs[i](pos);
            worst = std::max(worst, std::abs(a - b) / (1.0 + std::abs(b)));
        });
        EXPECT_LT(worst, 1e-5) << "output " << i;
    }
}

class SegtilePlugin : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override { load_plugin(SEGTILE_PLUGIN_PATH); }
};

// Runs the pipeline under each cap: same outputs as the reference, peak
// under the cap and under the prediction, fused where the cap is below the
// everything-at-root peak. Returns the schedules.
std::vector<std::string> check_caps(const std::string &name, const ScheduledRun &reference,
                                    const std::vector<std::optional<int64_t>> &caps) {
    std::vector<std::string> schedules;
    for (const std::optional<int64_t> &cap : caps) {
        SCOPED_TRACE("memory_cap " + (cap ? std::to_string(*cap) : std::string("none")));
        const ScheduledRun run = run_segtile(name, cap);
        expect_same_outputs(run, reference);
        const int64_t predicted = number_after(run.schedule, "predicted peak");
        std::cout << name << ": cap " << (cap ? std::to_string(*cap) : "none") << ", predicted peak "
                  << predicted << ", measured peak " << run.peak << " (all-root reference " << reference.peak
                  << ")\n";
        EXPECT_LE(run.peak, predicted) << "the memory model underestimated\n" << run.schedule;
        if (cap) {
            EXPECT_LE(run.peak, *cap) << run.schedule;
            if (*cap < reference.peak) EXPECT_NE(run.schedule.find("compute_at"), std::string::npos) << run.schedule;
        }
        schedules.push_back(run.schedule);
    }
    return schedules;
}

// No cap; caps below the everything-at-root peak, which force tiling; and
// the smallest feasible cap itself.
void check_standard_caps(const std::string &name) {
    const ScheduledRun reference = run_reference(name);
    const int64_t smallest = smallest_feasible_cap(name);
    ASSERT_GT(smallest, 0);
    std::vector<std::optional<int64_t>> caps{std::nullopt};
    for (int64_t c : std::vector<int64_t>{reference.peak / 2, reference.peak / 8, smallest}) {
        if (c >= smallest && std::find(caps.begin(), caps.end(), c) == caps.end()) caps.push_back(c);
    }
    check_caps(name, reference, caps);
}

TEST_P(SegtilePlugin, MatchesReferenceAndFitsEachCap) {
    try {
        check_standard_caps(GetParam());
    } catch (const Halide::Error &e) {  // not a std::exception: say what it was
        FAIL() << "Halide error: " << e.what();
    }
}

TEST_P(SegtilePlugin, CapBelowSmallestFeasibleFailsNamingIt) {
    const int64_t smallest = smallest_feasible_cap(GetParam());
    ASSERT_GT(smallest, 1);
    TestPipeline tp = make_pipeline(GetParam());
    try {
        Pipeline(tp.outputs).apply_autoscheduler(host(), segtile_params(smallest - 1));
        FAIL() << "a cap one byte below the smallest feasible one was accepted";
    } catch (const CompileError &e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(smallest) + " bytes"), std::string::npos) << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(ForeignPipelines, SegtilePlugin,
                         ::testing::Values("blur_chain", "pyramid", "conv_relu_gradient"));

// Between the smallest feasible cap and the root peak, the pyramid's best
// plans recompute Gaussian levels shared by several groups (clone_in) rather
// than store them: those plans must be as exact and as small as the others.
TEST(SegtilePluginPyramid, RecomputedSharedLevelsAreExactAndFit) {
    load_plugin(SEGTILE_PLUGIN_PATH);
    try {
        const ScheduledRun reference = run_reference("pyramid");
        const int64_t smallest = smallest_feasible_cap("pyramid");
        ASSERT_GT(smallest, 0);
        std::vector<std::optional<int64_t>> caps;
        for (int64_t c = smallest * 5 / 4; c < reference.peak; c *= 2) caps.push_back(c);
        const std::vector<std::string> schedules = check_caps("pyramid", reference, caps);
        EXPECT_TRUE(std::any_of(schedules.begin(), schedules.end(),
                                [](const std::string &s) { return s.find("clone_in") != std::string::npos; }))
            << "no plan recomputed a shared Func";
    } catch (const Halide::Error &e) {
        FAIL() << "Halide error: " << e.what();
    }
}

TEST(SegtilePluginParams, UnknownParameterIsAnError) {
    load_plugin(SEGTILE_PLUGIN_PATH);
    TestPipeline tp = make_pipeline("blur_chain");
    try {
        Pipeline(tp.outputs).apply_autoscheduler(host(), {"Segtile", {{"tile_size", "64"}}});
        FAIL() << "unknown parameter accepted";
    } catch (const CompileError &e) {
        EXPECT_NE(std::string(e.what()).find("tile_size"), std::string::npos) << e.what();
    }
}

TEST(SegtilePluginParams, MissingEstimateIsAnError) {
    load_plugin(SEGTILE_PLUGIN_PATH);
    Var x, y;
    Func f("no_estimates");
    f(x, y) = x + y;
    try {
        Pipeline(f).apply_autoscheduler(host(), {"Segtile", {}});
        FAIL() << "a pipeline without estimates was scheduled";
    } catch (const CompileError &e) {
        EXPECT_NE(std::string(e.what()).find("estimate"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace segtile::plugin_test
