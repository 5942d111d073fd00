// The segtile program end to end (the built binary, run as a user runs it):
// dataset training and its run folder, bit-identical resume, prediction,
// the step trace, and one clear message (non-zero exit, nothing written)
// for each kind of bad input. tiny_cnn runs on its AOT kernels here (no JIT),
// so these stay fast; the main job's own test is main_job_program_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <sstream>

#include "autoscheduler/calibrate.h"
#include "schedules/gpu_schedule.h"
#include "io/folder_lock.h"
#include "io/image_io.h"
#include "io/weight_file.h"
#include "test/io/temp_dir.h"
#include "test/program_runner.h"

using namespace segtile;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

using Result = segtile::testing::ProgramResult;
using segtile::testing::slurp;

// Sets an environment variable (which the segtile processes inherit) for a scope.
class ScopedEnv {
public:
    ScopedEnv(const char *name, const std::string &value) : name_(name) {
        if (const char *old = std::getenv(name)) old_ = old;
        setenv(name, value.c_str(), 1);
    }
    ~ScopedEnv() {
        if (old_) setenv(name_, old_->c_str(), 1);
        else unsetenv(name_);
    }

private:
    const char *name_;
    std::optional<std::string> old_;
};

class ProgramTest : public ::testing::Test {
protected:
    // Runs `segtile <args>` in the temporary folder.
    Result segtile(const std::string &args) { return segtile::testing::run_segtile(dir.path(), args); }
    // Starts `segtile <args>` in the temporary folder and returns its pid
    // (the shell execs it: the pid is segtile's own).
    pid_t start_segtile(const std::string &args) {
        const std::string cmd = "cd '" + dir.path().string() + "' && exec '" SEGTILE_BIN "' " + args +
                                " >'" + dir.file("bg_stdout.txt") + "' 2>'" + dir.file("bg_stderr.txt") + "'";
        const char *argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
        pid_t pid = -1;
        EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char **>(argv), environ), 0);
        return pid;
    }
    // A gray image whose class shows in its brightness; (w, h) may differ per image.
    void gray_png(const std::string &name, int w, int h, int label, int channels = 1) {
        Halide::Runtime::Buffer<uint8_t> img(w, h, channels);  // (W, H, C)
        img.for_each_element([&](int x, int y, int c) { img(x, y, c) = (uint8_t)((x * 7 + y * 3 + c) % 64 + 150 * label); });
        write_png(dir.file(name), img);
    }
    // Eight labelled images of two sizes and their CSV.
    void dataset() {
        std::string csv = "file,label\n";
        for (int i = 0; i < 8; i++) {
            const int label = i % 2;
            gray_png("img" + std::to_string(i) + ".png", i < 5 ? 32 : 40, i < 5 ? 32 : 24, label);
            csv += "img" + std::to_string(i) + ".png," + std::to_string(label) + "\n";
        }
        dir.write("train.csv", csv);
    }
    static constexpr const char *kTiny = "--model tiny_cnn --data train.csv --seed 3 --batch 3 --lr 0.01 ";

    segtile::testing::TempDir dir;
};

TEST_F(ProgramTest, RunFolderHoldsEveryFileAndTheLogSaysWhatRan) {
    dataset();
    Result r = segtile(std::string("train ") + kTiny + "--memory-cap none --epochs 2 --run A");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("epoch 2/2"));
    for (const char *f : {"weights.safetensors", "optimizer.safetensors", "log.json", "plot.png"})
        EXPECT_TRUE(fs::exists(dir.file(std::string("A/") + f))) << f;
    const auto log = nlohmann::json::parse(slurp(dir.file("A/log.json")));
    EXPECT_EQ(log["epochs_done"], 2);
    ASSERT_EQ(log["epochs"].size(), 2u);
    for (const auto &e : log["epochs"]) {
        EXPECT_GT(e["loss"].get<double>(), 0);
        EXPECT_GE(e["accuracy"].get<double>(), 0);
        EXPECT_LE(e["accuracy"].get<double>(), 1);
        EXPECT_GT(e["peak_working_memory_bytes"].get<int64_t>(), 0);
        EXPECT_GT(e["high_water_mark_bytes"].get<int64_t>(), e["peak_working_memory_bytes"].get<int64_t>());
        EXPECT_GT(e["images_per_second"].get<double>(), 0);
    }
    EXPECT_EQ(log["config"]["model"], "tiny_cnn");
    EXPECT_EQ(log["config"]["batch"], 3);
    // The weights load into the model they were trained for.
    MemoryLedger ledger;
    ParamStore params(load_model("tiny_cnn"), &ledger);
    const auto meta = load_parameters(dir.file("A/weights.safetensors"), params);
    EXPECT_EQ(meta.at("epoch"), "2");
    // A second run into the same folder is refused rather than overwriting it.
    Result again = segtile(std::string("train ") + kTiny + "--memory-cap none --epochs 1 --run A");
    EXPECT_NE(again.status, 0);
    EXPECT_THAT(again.err, HasSubstr("--resume"));
}

// Two epochs in one go, or one epoch, a stop, and a resume: the same bytes.
// Images of two sizes (an executor each), a last batch shorter than the
// others, the cosine schedule and Adam's step count all have to carry over.
TEST_F(ProgramTest, ResumeGivesTheSameWeightsUntiled) {
    dataset();
    const std::string opts = std::string(kTiny) + "--memory-cap none --epochs 2 --lr-schedule cosine ";
    ASSERT_EQ(segtile("train " + opts + "--run whole").status, 0);
    Result first = segtile("train " + opts + "--run parts --stop-after 1");
    ASSERT_EQ(first.status, 0) << first.err;
    EXPECT_EQ(nlohmann::json::parse(slurp(dir.file("parts/log.json")))["epochs_done"], 1);
    EXPECT_NE(slurp(dir.file("whole/weights.safetensors")), slurp(dir.file("parts/weights.safetensors")));
    Result second = segtile("train --resume parts");
    ASSERT_EQ(second.status, 0) << second.err;
    EXPECT_THAT(second.out, HasSubstr("resuming after epoch 1"));
    EXPECT_EQ(slurp(dir.file("whole/weights.safetensors")), slurp(dir.file("parts/weights.safetensors")));
    EXPECT_EQ(slurp(dir.file("whole/optimizer.safetensors")), slurp(dir.file("parts/optimizer.safetensors")));
    // A finished run says how to extend it.
    Result done = segtile("train --resume parts");
    EXPECT_EQ(done.status, 0);
    EXPECT_THAT(done.out, HasSubstr("--epochs"));
}

TEST_F(ProgramTest, ResumeGivesTheSameWeightsTiledWithSgd) {
    dataset();
    const std::string opts = std::string(kTiny) +
                             "--cuts pool1,pool2 --tile 5x5 --optimizer sgd --momentum 0.9 --lr-schedule step "
                             "--epochs 3 ";
    ASSERT_EQ(segtile("train " + opts + "--run whole").status, 0);
    ASSERT_EQ(segtile("train " + opts + "--run parts --stop-after 2").status, 0);
    ASSERT_EQ(segtile("train --resume parts").status, 0);
    EXPECT_EQ(slurp(dir.file("whole/weights.safetensors")), slurp(dir.file("parts/weights.safetensors")));
    // The step schedule: lr for the first half of the epochs, lr / 10 after.
    const auto epochs = nlohmann::json::parse(slurp(dir.file("whole/log.json")))["epochs"];
    EXPECT_FLOAT_EQ(epochs[0]["lr_end"].get<float>(), 0.01f);
    EXPECT_FLOAT_EQ(epochs[1]["lr_end"].get<float>(), 0.01f);
    EXPECT_FLOAT_EQ(epochs[2]["lr_end"].get<float>(), 0.001f);
}

TEST_F(ProgramTest, TiledAndUntiledTrainingAgree) {
    // Exact gradients: the tiled run's losses equal the untiled run's (to rounding).
    dataset();
    ASSERT_EQ(segtile(std::string("train ") + kTiny + "--memory-cap none --epochs 1 --run u").status, 0);
    ASSERT_EQ(segtile(std::string("train ") + kTiny + "--cuts pool1,pool2 --tile 7x6 --epochs 1 --run t").status, 0);
    const double lu = nlohmann::json::parse(slurp(dir.file("u/log.json")))["epochs"][0]["loss"];
    const double lt = nlohmann::json::parse(slurp(dir.file("t/log.json")))["epochs"][0]["loss"];
    EXPECT_NEAR(lu, lt, 1e-4 * std::abs(lu));
}

TEST_F(ProgramTest, PredictWritesClassProbabilitiesPerImage) {
    dataset();
    ASSERT_EQ(segtile(std::string("train ") + kTiny + "--memory-cap none --epochs 1 --run A").status, 0);
    Result r = segtile("predict --model tiny_cnn --weights A/weights.safetensors --images train.csv --out pred "
                       "--cuts pool1,pool2 --tile 8x8");
    ASSERT_EQ(r.status, 0) << r.err;
    std::istringstream csv(slurp(dir.file("pred/scores.csv")));
    std::string line;
    std::getline(csv, line);
    EXPECT_EQ(line, "file,class,p0,p1");
    int rows = 0;
    while (std::getline(csv, line)) {
        double p0 = 0, p1 = 0;
        int cls = -1;
        char name[64];
        ASSERT_EQ(std::sscanf(line.c_str(), "\"%63[^\"]\",%d,%lf,%lf", name, &cls, &p0, &p1), 4) << line;
        EXPECT_NEAR(p0 + p1, 1.0, 1e-6);
        EXPECT_EQ(cls, p1 > p0 ? 1 : 0);
        rows++;
    }
    EXPECT_EQ(rows, 8);
}

TEST_F(ProgramTest, TraceOfOneStepHasSegmentsTilesAndKernels) {
    dataset();
    Result r = segtile(std::string("train ") + kTiny + "--cuts pool1,pool2 --tile 8x8 --epochs 1 --run A "
                                                       "--trace step.json");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto trace = nlohmann::json::parse(slurp(dir.file("step.json")));
    std::map<std::string, int> by_category;
    for (const auto &e : trace["traceEvents"])
        if (e["ph"] == "X") {
            by_category[e["cat"]]++;
            EXPECT_GE(e["dur"].get<double>(), 0);
        }
    // One step: batch 3, each image 3 segments forward and backward, a head.
    EXPECT_EQ(by_category["image"], 3);
    EXPECT_EQ(by_category["segment"], 3 * 6);
    EXPECT_EQ(by_category["head"], 3);
    EXPECT_EQ(by_category["optimizer"], 1);
    EXPECT_GT(by_category["tile"], 3 * 6);
    EXPECT_EQ(by_category["kernel"], by_category["tile"]);
}

// A dense (mse) model learns masks from a segmentation CSV (images of two
// sizes), and predict writes a full-size mask per image that matches.
TEST_F(ProgramTest, SegmentationTrainsAndPredictsFullSizeMasks) {
    dir.write("seg.json", R"({"name": "seg", "input_channels": 1, "layers": [
        {"name": "c1", "type": "conv2d", "params": "features.0", "out_channels": 4, "kernel": 3, "padding": 1},
        {"name": "r1", "type": "relu"},
        {"name": "c2", "type": "conv2d", "params": "features.2", "out_channels": 2, "kernel": 3, "padding": 1}],
        "loss": {"type": "mse"}})");
    std::string csv = "image,mask\n";
    for (int i = 0; i < 4; i++) {
        const int w = i < 2 ? 40 : 24, h = i < 2 ? 32 : 24;
        Halide::Runtime::Buffer<uint8_t> img(w, h), mask(w, h);  // (W, H)
        img.for_each_element([&](int x, int y) {
            const bool on = (x / 8 + y / 8 + i) % 2;
            img(x, y) = on ? 200 : 30;
            mask(x, y) = on;
        });
        write_png(dir.file("i" + std::to_string(i) + ".png"), img);
        write_png(dir.file("m" + std::to_string(i) + ".png"), mask);
        csv += "i" + std::to_string(i) + ".png,m" + std::to_string(i) + ".png\n";
    }
    dir.write("seg.csv", csv);
    Result r = segtile("train --model seg.json --data seg.csv --epochs 8 --batch 2 --lr 0.05 --memory-cap none --run S");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const auto log = nlohmann::json::parse(slurp(dir.file("S/log.json")));
    EXPECT_GT(log["epochs"][7]["accuracy"].get<double>(), 0.9) << r.out;  // pixel accuracy
    Result p = segtile("predict --model seg.json --weights S/weights.safetensors --images seg.csv --out pred "
                       "--cuts r1 --tile 8x8");
    ASSERT_EQ(p.status, 0) << p.err;
    MemoryLedger ledger;
    for (int i = 0; i < 4; i++) {
        Tensor got = read_mask(dir.file("pred/i" + std::to_string(i) + "_mask.png"), &ledger);
        Tensor want = read_mask(dir.file("m" + std::to_string(i) + ".png"), &ledger);
        ASSERT_EQ(got.dims(), want.dims());
        int64_t same = 0;
        for (int64_t k = 0; k < got.numel(); k++) same += got.as<int32_t>()[k] == want.as<int32_t>()[k];
        EXPECT_GT((double)same / (double)got.numel(), 0.9) << "image " << i;
    }
}

// ------------------------------------------------------------------ bad input

class BadInputTest : public ProgramTest {
protected:
    // Runs a training that must fail: non-zero exit, one message line that
    // contains each of `expected`, and no run folder.
    void expect_refused(const std::string &args, const std::vector<std::string> &expected, int status = 1) {
        Result r = segtile("train --model tiny_cnn --data train.csv --run out " + args);
        EXPECT_EQ(r.status, status) << r.out << r.err;
        for (const auto &e : expected) EXPECT_THAT(r.err, HasSubstr(e));
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_FALSE(fs::exists(dir.file("out"))) << "a failed run left a run folder";
    }
};

TEST_F(BadInputTest, UnknownFileInTheCsvNamesItsLine) {
    dataset();
    dir.write("train.csv", "file,label\nimg0.png,0\nmissing.png,1\n");
    expect_refused("--memory-cap none", {"train.csv:3", "missing.png"});
}

TEST_F(BadInputTest, BadLabelNamesItsLine) {
    dataset();
    dir.write("train.csv", "img0.png,0\nimg1.png,seven\n");
    expect_refused("--memory-cap none", {"train.csv:2", "seven"});
    dir.write("train.csv", "img0.png,0\nimg1.png,2\n");
    expect_refused("--memory-cap none", {"train.csv:2", "out of range"});
}

TEST_F(BadInputTest, CorruptImageNamesTheFile) {
    dataset();
    const std::string png = slurp(dir.file("img1.png"));
    dir.write("img1.png", png.substr(0, png.size() / 2));  // truncated
    dir.write("img2.png", "not an image at all");
    dir.write("train.csv", "img2.png,0\n");
    expect_refused("--memory-cap none", {"img2.png"});
    dir.write("train.csv", "img1.png,0\n");
    Result r = segtile("train --model tiny_cnn --data train.csv --memory-cap none --run out");
    EXPECT_NE(r.status, 0);
    EXPECT_THAT(r.err, HasSubstr("img1.png"));
    EXPECT_FALSE(fs::exists(dir.file("out/weights.safetensors")));
}

TEST_F(BadInputTest, WrongChannelCountSaysWhatTheModelExpects) {
    dataset();
    gray_png("rgb.png", 32, 32, 0, 3);
    dir.write("train.csv", "img0.png,0\nrgb.png,1\n");
    expect_refused("--memory-cap none", {"rgb.png", "3 channels", "1 channel"});
}

TEST_F(BadInputTest, MissingImageFolderOrCsv) {
    expect_refused("--memory-cap none", {"train.csv"});
}

TEST_F(BadInputTest, MemoryCapBelowTheSmallestFeasibleGivesExitCode3AndTheCap) {
    dataset();
    expect_refused("--memory-cap 10KiB --estimate", {"smallest feasible"}, 3);
    Result plan = segtile("plan --model tiny_cnn --size 256x256 --memory-cap 10KiB --estimate");
    EXPECT_EQ(plan.status, 3);
    EXPECT_THAT(plan.err, HasSubstr("smallest feasible"));
}

TEST_F(BadInputTest, CudaTargetWithoutAGpuSaysSoBeforeAnythingIsWritten) {
    if (fs::exists("/dev/nvidiactl")) GTEST_SKIP() << "a GPU is here: --target cuda trains";
    dataset();
    expect_refused("--memory-cap 1MiB --target cuda", {"--target cuda", "no usable CUDA device", "drop --target cuda"});
}

TEST_F(ProgramTest, PlanForAGpuCapsDeviceMemory) {
    // Planning for CUDA needs no GPU; the table and the plan file say so.
    Result r = segtile("plan --model tiny_cnn --size 256x256 --memory-cap 2MiB --target cuda --estimate --json p.json");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("of device memory (CUDA)"));
    EXPECT_THAT(r.out, HasSubstr("predicted peak device memory"));
    const auto plan = nlohmann::json::parse(slurp(dir.file("p.json")));
    EXPECT_EQ(plan.at("target"), "cuda");
    EXPECT_LE(plan.at("predicted").at("peak_working_bytes").get<int64_t>(), 2 << 20);
    Result tight = segtile("plan --model tiny_cnn --size 256x256 --memory-cap 1KiB --target cuda --estimate");
    EXPECT_EQ(tight.status, 3);
    EXPECT_THAT(tight.err, HasSubstr("smallest feasible"));
}

TEST_F(ProgramTest, PlanForMappedCheckpointsCountsTheirPages) {
    // The plan `train --checkpoint-dir` makes: a column of the pages each
    // row of tiles holds, inside the cap, and the mark in the plan file.
    Result r = segtile("plan --model tiny_cnn --size 512x512 --memory-cap 8MiB --mapped-checkpoints --estimate "
                       "--json p.json");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("mapped rows"));
    EXPECT_THAT(r.out, HasSubstr("with the resident pages of the mapped checkpoints"));
    const auto plan = nlohmann::json::parse(slurp(dir.file("p.json")));
    EXPECT_TRUE(plan.at("mapped_checkpoints").get<bool>());
    EXPECT_LE(plan.at("predicted").at("peak_working_bytes").get<int64_t>(), 8 << 20);
    for (const auto &s : plan.at("segments")) EXPECT_GT(s.at("resident_bytes").get<int64_t>(), 0);
    Result tight = segtile("plan --model tiny_cnn --size 512x512 --memory-cap 2MiB --mapped-checkpoints --estimate");
    EXPECT_EQ(tight.status, 3);
    EXPECT_THAT(tight.err, HasSubstr("cap of working memory and resident checkpoint pages"));
}

TEST_F(ProgramTest, PlanForAGpuPricesItAtGpuRates) {
    // A CPU calibration saved in SEGTILE_HOME prices CPU plans only: a GPU
    // plan keeps the H200-fitted rates until the GPU itself is calibrated,
    // which needs a GPU here.
    const std::string home = dir.file("home");
    TimeRates cpu;
    cpu.flops_per_second = 1e9;
    save_time_rates(cpu, home + "/calibration.json");
    ScopedEnv env("SEGTILE_HOME", home);
    Result host = segtile("plan --model tiny_cnn --size 256x256 --estimate");
    ASSERT_EQ(host.status, 0) << host.out << host.err;
    EXPECT_THAT(host.out, HasSubstr("this machine's rates from " + home + "/calibration.json"));
    Result r = segtile("plan --model tiny_cnn --size 256x256 --target cuda --estimate");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("rates fitted to an H200"));
    if (cuda_device_usable()) GTEST_SKIP() << "a GPU is here: --calibrate --target cuda would time it";
    Result cal = segtile("plan --model tiny_cnn --size 256x256 --target cuda --estimate --calibrate");
    EXPECT_NE(cal.status, 0);
    EXPECT_THAT(cal.err, HasSubstr("no usable CUDA device here"));
    EXPECT_FALSE(fs::exists(home + "/calibration_cuda.json"));
}

TEST_F(BadInputTest, WeightsOfAnotherModelAreRefusedNamingTheTensor) {
    dataset();
    ASSERT_EQ(segtile(std::string("train ") + kTiny + "--memory-cap none --epochs 1 --run A").status, 0);
    Result r = segtile("predict --model marks_cnn --weights A/weights.safetensors --images train.csv --out pred");
    EXPECT_NE(r.status, 0);
    EXPECT_THAT(r.err, HasSubstr("A/weights.safetensors"));
    EXPECT_THAT(r.err, HasSubstr("features.1.weight"));  // marks_cnn's first conv
    EXPECT_FALSE(fs::exists(dir.file("pred")));
}

TEST_F(BadInputTest, CorruptRunFolderIsRefusedOnResume) {
    dataset();
    ASSERT_EQ(segtile(std::string("train ") + kTiny + "--memory-cap none --epochs 2 --stop-after 1 --run A").status,
              0);
    dir.write("A/weights.safetensors", "garbage");
    Result r = segtile("train --resume A");
    EXPECT_NE(r.status, 0);
    EXPECT_THAT(r.err, HasSubstr("weights.safetensors"));
}

TEST_F(BadInputTest, NonFiniteOrOutOfRangeOptionsAreRefusedNamingThem) {
    dataset();
    expect_refused("--memory-cap none --lr nan", {"--lr nan", "try 0.01"});
    expect_refused("--memory-cap none --lr inf", {"--lr inf"});
    expect_refused("--memory-cap none --lr -1", {"--lr -1"});
    expect_refused("--memory-cap none --momentum 1", {"--momentum 1"});
    expect_refused("--memory-cap none --batch 0", {"--batch 0"});
    expect_refused("--memory-cap none --lr abc", {"--lr", "abc"});
    expect_refused("--memory-cap abc", {"--memory-cap"});
}

// A rate that blows the loss up stops the run (exit 4) naming the epoch and
// step, and the run folder keeps its last finite epoch, byte for byte.
TEST_F(ProgramTest, DivergedTrainingStopsAndKeepsTheLastEpoch) {
    dataset();
    const std::string opts = std::string(kTiny) + "--memory-cap none --optimizer sgd --momentum 0 ";
    ASSERT_EQ(segtile("train " + opts + "--epochs 2 --stop-after 1 --run R").status, 0);
    const std::string weights = slurp(dir.file("R/weights.safetensors")), log = slurp(dir.file("R/log.json"));
    // The resumed run keeps its configured rate: a fresh one diverges.
    Result fresh = segtile("train --model tiny_cnn --data train.csv --seed 3 --batch 3 --memory-cap none --lr 1e12 --run F");
    EXPECT_EQ(fresh.status, 4) << fresh.out << fresh.err;
    EXPECT_THAT(fresh.err, HasSubstr("training diverged"));
    EXPECT_THAT(fresh.err, HasSubstr("epoch 1, step "));
    EXPECT_THAT(fresh.err, HasSubstr("lower --lr"));
    EXPECT_FALSE(fs::exists(dir.file("F/weights.safetensors")));
    // The folder of a run that diverges after an epoch still holds that epoch.
    nlohmann::json j = nlohmann::json::parse(log);
    j["config"]["lr"] = 1e12;
    dir.write("R/log.json", j.dump(2) + "\n");
    Result resumed = segtile("train --resume R");
    EXPECT_EQ(resumed.status, 4) << resumed.out << resumed.err;
    EXPECT_THAT(resumed.err, HasSubstr("keeps epoch 1"));
    EXPECT_EQ(slurp(dir.file("R/weights.safetensors")), weights);
}

// A save killed after its commit point is completed on resume, one killed
// before it is undone: either way the resumed run ends bit-identical to an
// uninterrupted one.
TEST_F(ProgramTest, InterruptedSaveIsRecoveredOnResume) {
    dataset();
    const std::string opts = std::string(kTiny) + "--memory-cap none --epochs 2 ";
    ASSERT_EQ(segtile("train " + opts + "--run whole").status, 0);
    ASSERT_EQ(segtile("train " + opts + "--run parts --stop-after 1").status, 0);
    // Killed while staging epoch 2: a half-written staging folder.
    fs::create_directories(dir.file("parts/.staging"));
    dir.write("parts/.staging/weights.safetensors", "half a file");
    Result r = segtile("train --resume parts");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("unfinished save was undone"));
    EXPECT_FALSE(fs::exists(dir.file("parts/.staging")));
    EXPECT_EQ(slurp(dir.file("whole/weights.safetensors")), slurp(dir.file("parts/weights.safetensors")));
}

// The built-in task (no --data) takes gray two-class classifiers and
// images that hold a mark.
TEST_F(BadInputTest, BuiltInTaskRefusesAModelOrSizeThatDoesNotFit) {
    Result r = segtile("train --model unet --run out");
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("does not fit the built-in task"));
    EXPECT_THAT(r.err, HasSubstr("--data"));
    r = segtile("train --model tiny_cnn --size 8x64 --run out");
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("--size 8x64"));
    EXPECT_THAT(r.err, HasSubstr("at least 16x16"));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dir.file("out")));
}

// The image itself lives in host memory whatever the cap: a built-in size
// no machine holds is refused before planning, not left to the OOM killer.
TEST_F(BadInputTest, ImageLargerThanTheMachinesMemoryIsRefused) {
    Result r = segtile("train --size 9000000x9000000 --run out");
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("9000000x9000000"));
    EXPECT_THAT(r.err, HasSubstr("more than this machine's"));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dir.file("out")));
}

// ------------------------------------------------------------------ faults

// A file damaged past its header fails only when its step reads it: by
// default it is skipped with one warning, counted in every epoch's log, and
// the run trains on the rest; --on-bad-image stop ends the run naming it.
TEST_F(ProgramTest, ImageDamagedPastItsHeaderIsSkippedAndCounted) {
    dataset();
    const std::string png = slurp(dir.file("img1.png"));
    dir.write("img1.png", png.substr(0, png.size() / 2));  // truncated: the header reads, the pixels do not
    Result r = segtile(std::string("train ") + kTiny + "--memory-cap none --epochs 2 --run S");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("warning: skipped train.csv:3: "));
    EXPECT_THAT(r.out, HasSubstr("img1.png"));
    size_t warnings = 0;
    for (size_t at = r.out.find("warning: skipped"); at != std::string::npos; at = r.out.find("warning: skipped", at + 1))
        warnings++;
    EXPECT_EQ(warnings, 1u) << "one warning per bad image per run, not per epoch";
    EXPECT_THAT(r.out, HasSubstr("skipped 1 of 8 images"));
    const auto log = nlohmann::json::parse(slurp(dir.file("S/log.json")));
    ASSERT_EQ(log["epochs"].size(), 2u);
    for (const auto &e : log["epochs"]) {
        EXPECT_EQ(e["skipped_images"], 1);
        EXPECT_TRUE(std::isfinite(e["loss"].get<double>()));
    }
    EXPECT_EQ(log["config"]["on_bad_image"], "skip");

    Result stop = segtile(std::string("train ") + kTiny + "--memory-cap none --on-bad-image stop --run T");
    EXPECT_EQ(stop.status, 1) << stop.out << stop.err;
    EXPECT_THAT(stop.err, HasSubstr("img1.png"));
    EXPECT_THAT(stop.err, HasSubstr("--on-bad-image skip"));
    EXPECT_EQ(std::count(stop.err.begin(), stop.err.end(), '\n'), 1) << stop.err;
    EXPECT_FALSE(fs::exists(dir.file("T"))) << "a run that saved nothing left its folder";
}

// Two processes on one run folder would interleave their epochs' files:
// while one holds it, a second train or resume is refused and changes nothing.
TEST_F(ProgramTest, SecondProcessOnARunFolderIsRefused) {
    dataset();
    ASSERT_EQ(segtile(std::string("train ") + kTiny + "--memory-cap none --epochs 2 --stop-after 1 --run R").status, 0);
    const std::string weights = slurp(dir.file("R/weights.safetensors"));
    {
        FolderLock other(dir.file("R"));  // as a running segtile holds it
        Result resumed = segtile("train --resume R");
        EXPECT_EQ(resumed.status, 1) << resumed.out << resumed.err;
        EXPECT_THAT(resumed.err, HasSubstr("in use by another segtile process"));
        EXPECT_THAT(resumed.err, HasSubstr("pid " + std::to_string(getpid())));
        fs::create_directories(dir.file("N"));
        FolderLock fresh(dir.file("N"));
        Result again = segtile(std::string("train ") + kTiny + "--memory-cap none --run N");
        EXPECT_EQ(again.status, 1) << again.out << again.err;
        EXPECT_THAT(again.err, HasSubstr("in use by another segtile process"));
        EXPECT_FALSE(fs::exists(dir.file("N/log.json")));
    }
    EXPECT_EQ(slurp(dir.file("R/weights.safetensors")), weights);
    // Once the holder is gone (also after kill -9: the kernel drops the lock), resume works.
    Result resumed = segtile("train --resume R");
    EXPECT_EQ(resumed.status, 0) << resumed.err;
}

// kill -9 at random moments (during steps and saves), each time resumed (or
// restarted when nothing was saved yet): the finished run's weights and
// optimizer state are bit-identical to an uninterrupted run's.
TEST_F(ProgramTest, KilledAtRandomMomentsAndResumedGivesTheSameBytes) {
    dataset();
    const std::string train = std::string("train ") + kTiny + "--memory-cap none --epochs 6 --lr-schedule cosine ";
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(segtile(train + "--run whole").status, 0);
    const double whole_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::mt19937 rng(40);
    std::uniform_real_distribution<double> moment(0.0, whole_s);
    int kills = 0, during_save = 0;
    for (int i = 0; i < 8; i++) {
        const bool saved = fs::exists(dir.file("killed/log.json"));
        const pid_t pid = start_segtile(saved ? "train --resume killed" : train + "--run killed");
        std::this_thread::sleep_for(std::chrono::duration<double>(moment(rng)));
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status)) {
            kills++;
            during_save += fs::exists(dir.file("killed/.staging")) || fs::exists(dir.file("killed/.committed"));
        } else {
            EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(dir.file("bg_stderr.txt"));
        }
    }
    Result last = fs::exists(dir.file("killed/log.json")) ? segtile("train --resume killed")
                                                           : segtile(train + "--run killed");
    ASSERT_EQ(last.status, 0) << last.out << last.err;
    std::printf("kill -9: %d of 8 runs killed (%d during a save), then resumed; uninterrupted run %.1f s\n", kills,
                during_save, whole_s);
    EXPECT_GT(kills, 0);
    for (const char *f : {"weights.safetensors", "optimizer.safetensors"})
        EXPECT_EQ(slurp(dir.file(std::string("killed/") + f)), slurp(dir.file(std::string("whole/") + f))) << f;
    const auto log = nlohmann::json::parse(slurp(dir.file("killed/log.json")));
    EXPECT_EQ(log["epochs_done"], 6);
}

// A run folder on a full file system (a 1 MiB tmpfs, mounted in a private
// user and mount namespace): saving epoch 2 fails with one line that says
// so, epoch 1's files stay byte for byte, and once there is room again the
// resumed run ends as an uninterrupted one.
TEST_F(ProgramTest, FullDiskFailsClearlyAndKeepsThePreviousEpoch) {
    if (std::system("unshare -rm true >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "needs `unshare -rm` (unprivileged user and mount namespaces) to mount a small tmpfs";
    dataset();
    const std::string opts = std::string(kTiny) + "--memory-cap none --epochs 2 ";
    ASSERT_EQ(segtile("train " + opts + "--run whole").status, 0);
    ASSERT_EQ(segtile("train " + opts + "--stop-after 1 --run R").status, 0);
    fs::create_directories(dir.file("small"));
    // Everything inside the namespace: the tmpfs goes with it.
    const std::string script = std::string("set -u; mount -t tmpfs -o size=1m tmpfs small || exit 99; ") +
        "cp -a R small/R; dd if=/dev/zero of=small/filler bs=4k >/dev/null 2>&1; " +
        "'" SEGTILE_BIN "' train --resume small/R >full_out.txt 2>full_err.txt; echo $? >full_rc.txt; " +
        "for f in weights.safetensors optimizer.safetensors log.json plot.png; do " +
        "cmp -s R/$f small/R/$f || echo $f >>changed.txt; done; ls -A small/R >listing.txt; rm small/filler; " +
        "'" SEGTILE_BIN "' train --resume small/R >/dev/null 2>again_err.txt; echo $? >again_rc.txt; " +
        "cp small/R/weights.safetensors after.safetensors";
    dir.write("full.sh", script);
    ASSERT_EQ(std::system(("cd '" + dir.path().string() + "' && unshare -rm sh full.sh").c_str()), 0);
    const std::string err = slurp(dir.file("full_err.txt"));
    EXPECT_EQ(std::stoi(slurp(dir.file("full_rc.txt"))), 1) << err;
    EXPECT_THAT(err, HasSubstr("cannot save epoch 2"));
    EXPECT_THAT(err, HasSubstr("No space left on device"));
    EXPECT_THAT(err, HasSubstr("keeps epoch 1"));
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_FALSE(fs::exists(dir.file("changed.txt"))) << slurp(dir.file("changed.txt"));
    const std::string listing = slurp(dir.file("listing.txt"));
    EXPECT_THAT(listing, Not(HasSubstr(".staging")));
    EXPECT_THAT(listing, Not(HasSubstr("tmp-")));
    EXPECT_EQ(std::stoi(slurp(dir.file("again_rc.txt"))), 0) << slurp(dir.file("again_err.txt"));
    EXPECT_EQ(slurp(dir.file("after.safetensors")), slurp(dir.file("whole/weights.safetensors")));
}

}  // namespace
