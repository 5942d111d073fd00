// The main job (`segtile train` with no options: marks_cnn on generated
// 2048x2048 images under a 256 MiB cap) learns, here at 512x512 through the
// same code path (the program, its planner, JIT kernels and run folder), so
// the test takes about a minute instead of several.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test/io/temp_dir.h"

namespace {

std::string slurp(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(MainJobProgram, DefaultTaskLearnsUnderTheCap) {
    segtile::testing::TempDir dir;
    const std::string cmd = "cd '" + dir.path().string() + "' && SEGTILE_HOME='" + dir.path().string() + "' '" SEGTILE_BIN
                            "' train --size 512x512 --epochs 7 --run run >out.txt 2>err.txt";
    const int rc = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << slurp(dir.file("out.txt")) << slurp(dir.file("err.txt"));
    const auto log = nlohmann::json::parse(slurp(dir.file("run/log.json")));
    EXPECT_EQ(log["config"]["model"], "marks_cnn");
    EXPECT_EQ(log["config"]["memory_cap"], "256MiB");
    const auto &epochs = log["epochs"];
    ASSERT_EQ(epochs.size(), 7u);
    const double first_loss = epochs[0]["loss"], last_loss = epochs[6]["loss"];
    EXPECT_LT(last_loss, 0.6 * first_loss) << slurp(dir.file("out.txt"));
    EXPECT_GT(epochs[6]["accuracy"].get<double>(), 0.8) << slurp(dir.file("out.txt"));
    for (const auto &e : epochs) EXPECT_LE(e["peak_working_memory_bytes"].get<int64_t>(), 256 << 20);
    // The plan the run used is in the run folder.
    const auto plan = nlohmann::json::parse(slurp(dir.file("run/plan.json")));
    EXPECT_EQ(plan["model"], "marks_cnn");
    EXPECT_THAT(slurp(dir.file("out.txt")), ::testing::HasSubstr("epoch 7/7"));
    const std::string first_out = slurp(dir.file("out.txt")) + slurp(dir.file("err.txt"));
    EXPECT_THAT(first_out, ::testing::ContainsRegex("kernels: [1-9][0-9]* compiled, 0 loaded from "));

    // A second run compiles nothing: every kernel comes from the kernel
    // cache in SEGTILE_HOME, and its first epoch is the first run's, bit
    // for bit (the same seed, so the same images and initial weights). It
    // is told that only 256 KiB are free, less than twice its checkpoint
    // store: the checkpoints go to memory-mapped files in a temporary
    // folder, removed at the end, with the same result. It plans again
    // with their resident pages counted against the cap (the cap is far
    // from binding here, so the plan and its kernels are the same).
    const std::string again = "cd '" + dir.path().string() + "' && SEGTILE_HOME='" + dir.path().string() +
                              "' SEGTILE_MEMORY_AVAILABLE=256KiB TMPDIR='" + dir.path().string() + "' '" SEGTILE_BIN
                              "' train --size 512x512 --epochs 1 --run run2 >out2.txt 2>err2.txt";
    const int rc2 = std::system(again.c_str());
    ASSERT_TRUE(WIFEXITED(rc2) && WEXITSTATUS(rc2) == 0) << slurp(dir.file("out2.txt")) << slurp(dir.file("err2.txt"));
    const std::string second_out = slurp(dir.file("out2.txt")) + slurp(dir.file("err2.txt"));
    EXPECT_THAT(second_out, ::testing::ContainsRegex("kernels: 0 compiled, [1-9][0-9]* loaded from "));
    EXPECT_THAT(second_out, ::testing::HasSubstr("planning again with its pages in memory-mapped files"));
    EXPECT_THAT(second_out, ::testing::HasSubstr("mapped rows"));
    EXPECT_THAT(second_out, ::testing::HasSubstr("of memory available: kept in memory-mapped files in " +
                                                 dir.path().string() + "/segtile-checkpoints-"));
    for (const auto &e : std::filesystem::directory_iterator(dir.path()))
        EXPECT_EQ(e.path().filename().string().rfind("segtile-checkpoints-", 0), std::string::npos) << "left behind";
    const auto log2 = nlohmann::json::parse(slurp(dir.file("run2/log.json")));
    EXPECT_EQ(log2["epochs"][0]["loss"].get<double>(), epochs[0]["loss"].get<double>());
    EXPECT_EQ(log2["epochs"][0]["accuracy"].get<double>(), epochs[0]["accuracy"].get<double>());
}

}  // namespace
