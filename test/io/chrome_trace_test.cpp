// Chrome traces: the JSON parses, holds every event with Perfetto's fields,
// nested spans nest, appends from many threads are all kept.
#include "io/chrome_trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "test/io/temp_dir.h"

namespace segtile {
namespace {

using testing::TempDir;

nlohmann::json complete_events(const nlohmann::json &trace) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto &e : trace.at("traceEvents"))
        if (e.at("ph") == "X") out.push_back(e);
    return out;
}

TEST(ChromeTrace, SpansNestAndCarryTheirArguments) {
    TempDir dir;
    ChromeTrace trace;
    {
        auto step = trace.span("step", "step");
        {
            auto seg = trace.span("segment \"1\" forward", "segment", {{"tiles", int64_t{4}}});
            seg.arg("tile_size", std::string("256x256"));
            seg.arg("ms", 1.5);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        trace.add("kernel", "kernel", trace.now_us(), 10.0);
    }
    trace.name_thread(1, "main");
    trace.write(dir.file("trace.json"));
    const auto j = nlohmann::json::parse(dir.read("trace.json"));
    EXPECT_EQ(j.at("displayTimeUnit"), "ms");
    const auto x = complete_events(j);
    ASSERT_EQ(x.size(), 3u);
    // Events are appended when they end: segment, kernel, step.
    const auto &seg = x[0], &kernel = x[1], &step = x[2];
    EXPECT_EQ(seg.at("name"), "segment \"1\" forward");
    EXPECT_EQ(seg.at("cat"), "segment");
    EXPECT_EQ(seg.at("args").at("tiles"), 4);
    EXPECT_EQ(seg.at("args").at("tile_size"), "256x256");
    EXPECT_DOUBLE_EQ(seg.at("args").at("ms").get<double>(), 1.5);
    EXPECT_GE(seg.at("dur").get<double>(), 2000.0);  // microseconds
    EXPECT_EQ(kernel.at("dur"), 10.0);
    for (const auto &e : x) {
        EXPECT_EQ(e.at("pid"), (int)getpid());
        EXPECT_EQ(e.at("tid"), 1);
        EXPECT_GE(e.at("ts").get<double>(), 0.0);
    }
    // The step contains the segment.
    EXPECT_LE(step.at("ts").get<double>(), seg.at("ts").get<double>());
    EXPECT_GE(step.at("ts").get<double>() + step.at("dur").get<double>(),
              seg.at("ts").get<double>() + seg.at("dur").get<double>());
    // Thread lane name as a metadata event.
    bool named = false;
    for (const auto &e : j.at("traceEvents"))
        named |= e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("args").at("name") == "main";
    EXPECT_TRUE(named);
}

TEST(ChromeTrace, ConcurrentAppendsAreAllKept) {
    ChromeTrace trace;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++)
        threads.emplace_back([&trace, t] {
            for (int i = 0; i < 250; i++) {
                auto s = trace.span("tile " + std::to_string(i), "tile", {{"thread", int64_t{t}}});
            }
        });
    for (auto &t : threads) t.join();
    EXPECT_EQ(trace.size(), 1000u);
    const auto x = complete_events(nlohmann::json::parse(trace.json()));
    ASSERT_EQ(x.size(), 1000u);
    std::set<int> tids;
    std::map<int64_t, std::set<int>> tids_of_worker;
    for (const auto &e : x) {
        tids.insert(e.at("tid").get<int>());
        tids_of_worker[e.at("args").at("thread").get<int64_t>()].insert(e.at("tid").get<int>());
    }
    EXPECT_EQ(tids, (std::set<int>{1, 2, 3, 4}));
    for (const auto &[worker, ids] : tids_of_worker) EXPECT_EQ(ids.size(), 1u) << "worker " << worker;
}

}  // namespace
}  // namespace segtile
