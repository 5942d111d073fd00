// Bad input at the command line, as a table: each case runs the real
// segtile binary and asserts its exit status (docs/program.md, Errors), the
// words of its one-line message, and that it wrote no run or output folder.
// Cases that segtile supports (16-bit, mixed sizes, other formats, new sizes
// at prediction) must succeed instead. tiny_cnn runs on its AOT kernels, so
// no case JIT-compiles and the table stays fast.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "test/io/image_writers.h"
#include "test/io/temp_dir.h"
#include "test/program_runner.h"

namespace fs = std::filesystem;
using segtile::testing::ProgramResult;
using segtile::testing::run_segtile;
using segtile::testing::slurp;

namespace {

struct Case {
    std::string args;                // the segtile command line (train cases: --run out; predict: --out pred)
    int status;                      // expected exit status
    std::vector<std::string> words;  // each must appear in the message (status != 0)
};

// Exit statuses of docs/program.md.
constexpr int kOk = 0, kBadInput = 1, kBadModel = 2, kCapTooSmall = 3, kDiverged = 4;

// `segtile train --run out <extra>`, with tiny_cnn, one epoch of batch 2,
// untiled, for each of those options `extra` does not give itself.
std::string train(const std::string &extra) {
    std::string args = "train --run out " + extra;
    for (const char *d : {"--model tiny_cnn", "--epochs 1", "--batch 2", "--memory-cap none"}) {
        const std::string option = std::string(d).substr(0, std::string(d).find(' '));
        if (extra.find(option + " ") == std::string::npos) args += std::string(" ") + d;
    }
    return args;
}
std::string seg(const std::string &extra) { return train("--model seg.json " + extra); }

// A two-class gray image: the class shows in its brightness.
int gray(int x, int y, int c, int label) { return (x * 7 + y * 3 + c) % 64 + 150 * label; }

void write_png(const segtile::testing::TempDir &d, const std::string &name, int w, int h, int ch, int label,
               bool sixteen = false) {
    segtile::testing::write_test_png(d.file(name), w, h, ch, [&](int x, int y, int c) { return gray(x, y, c, label); },
                                     sixteen);
}

std::string head(const std::string &s, size_t n) { return s.substr(0, std::min(n, s.size())); }

// Every input the table names, in one folder.
void write_inputs(const segtile::testing::TempDir &d) {
    for (int i = 0; i < 4; i++) write_png(d, "g" + std::to_string(i) + ".png", 32, 32, 1, i % 2);
    for (int i = 0; i < 2; i++) write_png(d, "h" + std::to_string(i) + ".png", 24, 40, 1, i % 2);
    write_png(d, "rgb.png", 32, 32, 3, 0);
    write_png(d, "rgba.png", 32, 32, 4, 0);
    write_png(d, "g16.png", 32, 32, 1, 1, /*sixteen=*/true);
    write_png(d, "one.png", 1, 1, 1, 0);
    segtile::testing::write_test_jpeg(d.file("gray.jpg"), 32, 32, 1, [](int x, int y, int c) { return gray(x, y, c, 1); });
    segtile::testing::write_tiff(d.file("gray.tif"), 32, 32, 1, [](int x, int y, int c) { return gray(x, y, c, 0); });
    for (const char *ext : {"png", "tif", "jpg"}) d.write(std::string("text.") + ext, "this is not an image\n");
    const std::string png = d.read("g1.png"), tif = d.read("gray.tif"), jpg = d.read("gray.jpg");
    d.write("cut_header.png", head(png, 20));   // ends inside the header
    d.write("cut.png", head(png, png.size() / 2));  // header intact, pixels cut
    d.write("cut.tif", head(tif, tif.size() / 2));
    d.write("cut.jpg", head(jpg, jpg.size() / 2));

    const std::string good = "g0.png,0\ng1.png,1\ng2.png,0\ng3.png,1\n";
    d.write("good.csv", "file,label\n" + good);
    d.write("empty.csv", "");
    d.write("header.csv", "file,label\n");
    d.write("no_label.csv", "file,label\ng0.png,0\ng1.png\n");
    d.write("three_columns.csv", "file,label\ng0.png,0,extra\n");
    d.write("open_quote.csv", "file,label\n\"g0.png,0\n");
    d.write("word_label.csv", "file,label\ng0.png,0\ng1.png,seven\n");
    d.write("label_2.csv", "file,label\ng0.png,0\ng1.png,2\n");
    d.write("label_neg.csv", "file,label\ng0.png,0\ng1.png,-1\n");
    d.write("missing_image.csv", "file,label\ng0.png,0\nnothere.png,1\n");
    for (const char *ext : {"png", "tif", "jpg"}) {
        d.write(std::string("text_") + ext + ".csv", std::string("file,label\ng0.png,0\ntext.") + ext + ",1\n");
        d.write(std::string("cut_") + ext + ".csv", std::string("file,label\ncut.") + ext + ",1\n");
    }
    d.write("cut_header.csv", "file,label\ng0.png,0\ncut_header.png,1\n");
    d.write("cut_mixed.csv", "file,label\ng0.png,0\ncut.png,1\ng2.png,0\n");
    d.write("gray_rgb.csv", "file,label\ng0.png,0\nrgb.png,1\n");
    d.write("rgba.csv", "file,label\nrgba.png,0\n");
    d.write("sixteen.csv", "file,label\ng16.png,1\ng0.png,0\n");
    d.write("formats.csv", "file,label\ngray.jpg,1\ngray.tif,0\ng0.png,0\n");
    d.write("mixed.csv", "file,label\n" + good + "h0.png,0\nh1.png,1\n");
    d.write("one_pixel.csv", "file,label\none.png,0\n");

    // Segmentation: masks of the image's size with labels 0/1, or not.
    d.write("seg.json", R"({"name": "seg", "input_channels": 1, "layers": [
        {"name": "c1", "type": "conv2d", "params": "f.0", "out_channels": 4, "kernel": 3, "padding": 1},
        {"name": "r1", "type": "relu"},
        {"name": "c2", "type": "conv2d", "params": "f.2", "out_channels": 2, "kernel": 3, "padding": 1}],
        "loss": {"type": "mse"}})");
    auto mask = [&](const std::string &name, int w, int h, int value) {
        segtile::testing::write_test_png(d.file(name), w, h, 1, [&](int x, int y, int) { return (x / 8 + y / 8) % 2 * value; });
    };
    mask("m.png", 32, 32, 1);
    mask("m_small.png", 16, 16, 1);
    mask("m_five.png", 32, 32, 5);
    d.write("seg_good.csv", "image,mask\ng0.png,m.png\ng1.png,m.png\n");
    d.write("seg_small.csv", "image,mask\ng0.png,m.png\ng1.png,m_small.png\n");
    d.write("seg_five.csv", "image,mask\ng0.png,m_five.png\n");
    d.write("seg_missing.csv", "image,mask\ng0.png,nomask.png\n");
    d.write("seg_rgb_mask.csv", "image,mask\ng0.png,rgb.png\n");

    // Model files, each wrong in one way.
    auto model = [&](const std::string &name, const std::string &layers) {
        d.write(name, R"({"name": "m", "input_channels": 1, "layers": [)" + layers + "]}");
    };
    const std::string conv = R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1})";
    const std::string tail =
        R"({"name": "gap", "type": "global_avg_pool"}, {"name": "fl", "type": "flatten"},
           {"name": "fc", "type": "dense", "out_features": 2})";
    d.write("not_json.json", "{\"name\": \"m\", \"layers\": [");
    d.write("layers_object.json", R"({"name": "m", "layers": {"c1": 1}})");
    d.write("no_name.json", R"({"layers": [)" + tail + "]}");
    d.write("extra_key.json", R"({"name": "m", "colour": "red", "layers": [)" + tail + "]}");
    model("unknown_op.json", R"({"name": "c1", "type": "conv3d", "out_channels": 4, "kernel": 3}, )" + tail);
    model("unknown_input.json", conv + R"(, {"name": "r1", "type": "relu", "inputs": "nothing"}, )" + tail);
    model("later_input.json", R"({"name": "r0", "type": "relu", "inputs": "r1"}, )" + conv +
                                  R"(, {"name": "r1", "type": "relu"}, )" + tail);
    // A cycle: each of two layers names the other as its input.
    model("cycle.json", conv + R"(, {"name": "r1", "type": "relu", "inputs": "r2"},
        {"name": "r2", "type": "relu", "inputs": "r1"}, )" + tail);
    model("channels.json", conv + R"(, {"name": "c2", "type": "conv2d", "inputs": "input", "out_channels": 8, "kernel": 1},
        {"name": "sum", "type": "add", "inputs": ["c1", "c2"]}, )" + tail);
    model("stride_0.json", R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "stride": 0}, )" + tail);
    model("kernel_0.json", R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 0}, )" + tail);
    model("channels_0.json", R"({"name": "c1", "type": "conv2d", "out_channels": 0, "kernel": 3}, )" + tail);
    model("big_kernel.json", R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 65}, )" + tail);
    model("kernel_string.json", R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": "3"}, )" + tail);
    model("duplicate_name.json", conv + ", " + conv + ", " + tail);
    model("no_layers.json", "");

    // Weights: tiny_cnn's (trained below) and a file that is not safetensors.
    d.write("junk.safetensors", "not safetensors");
}

// The table. Each line: what is wrong (in the command), expected status, words.
std::vector<Case> cases() {
    std::vector<Case> t = {
        // CSV
        {train("--data missing.csv"), kBadInput, {"missing.csv"}},
        {train("--data empty.csv"), kBadInput, {"empty.csv"}},
        {train("--data header.csv"), kBadInput, {"header.csv"}},
        {train("--data no_label.csv"), kBadInput, {"no_label.csv:3"}},
        {train("--data three_columns.csv"), kBadInput, {"three_columns.csv:2"}},
        {train("--data open_quote.csv"), kBadInput, {"open_quote.csv"}},
        {train("--data word_label.csv"), kBadInput, {"word_label.csv:3", "seven"}},
        {train("--data label_2.csv"), kBadInput, {"label_2.csv:3", "out of range"}},
        {train("--data label_neg.csv"), kBadInput, {"label_neg.csv:3", "-1"}},
        {train("--data good.csv --images nowhere"), kBadInput, {"nowhere"}},
        // Image files
        {train("--data missing_image.csv"), kBadInput, {"missing_image.csv:3", "nothere.png"}},
        {train("--data text_png.csv"), kBadInput, {"text.png"}},
        {train("--data text_tif.csv"), kBadInput, {"text.tif"}},
        {train("--data text_jpg.csv"), kBadInput, {"text.jpg"}},
        {train("--data cut_header.csv"), kBadInput, {"cut_header.png"}},
        {train("--data cut_png.csv"), kBadInput, {"cut.png", "none of the 1 images"}},
        {train("--data cut_tif.csv"), kBadInput, {"cut.tif"}},
        {train("--data cut_jpg.csv"), kBadInput, {"cut.jpg", "none of the 1 images"}},
        {train("--data cut_mixed.csv --on-bad-image stop"), kBadInput, {"cut.png", "--on-bad-image"}},
        {train("--data cut_mixed.csv"), kOk, {}},  // skipped, the others train
        {train("--data gray_rgb.csv"), kBadInput, {"rgb.png", "3 channels", "1 channel"}},
        {train("--data rgba.csv"), kBadInput, {"rgba.png", "4 channels"}},
        {train("--data sixteen.csv"), kOk, {}},
        {train("--data formats.csv"), kOk, {}},
        {train("--data mixed.csv"), kOk, {}},
        {train("--data one_pixel.csv"), kBadModel, {"1x1"}},
        // Masks
        {seg("--data seg_good.csv"), kOk, {}},
        {seg("--data seg_small.csv"), kBadInput, {"m_small.png", "16x16", "32x32"}},
        {seg("--data seg_five.csv"), kBadInput, {"m_five.png", "5"}},
        {seg("--data seg_missing.csv"), kBadInput, {"nomask.png"}},
        {seg("--data seg_rgb_mask.csv"), kBadInput, {"rgb.png", "channel"}},
        {train("--data seg_good.csv"), kBadInput, {"seg_good.csv:2"}},  // a mask where a label belongs
        // Memory cap
        {train("--data good.csv --memory-cap 0"), kBadInput, {"--memory-cap", "0"}},
        {train("--data good.csv --memory-cap 1B"), kCapTooSmall, {"smallest feasible"}},
        {train("--data good.csv --memory-cap abc"), kBadInput, {"--memory-cap", "abc"}},
        {train("--data good.csv --memory-cap -5MiB"), kBadInput, {"--memory-cap", "-5MiB"}},
        {train("--data good.csv --memory-cap nanMiB"), kBadInput, {"--memory-cap"}},
        {train("--data good.csv --memory-cap 10TiB"), kOk, {}},
        {train("--data good.csv --memory-cap 99999999999999TiB"), kBadInput, {"--memory-cap", "more memory than"}},
        {train("--data good.csv --memory-cap inf"), kBadInput, {"--memory-cap", "inf"}},
        {train("--data good.csv --memory-cap 0.5B"), kBadInput, {"--memory-cap", "0.5B"}},
        // Hand tiling
        {train("--data good.csv --cuts relu1 --tile 0x0"), kBadInput, {"--tile"}},
        {train("--data good.csv --cuts relu1 --tile 8"), kBadInput, {"--tile", "8"}},
        {train("--data good.csv --cuts nolayer --tile 8x8"), kBadInput, {"nolayer"}},
        {train("--data good.csv --cuts fc --tile 8x8"), kBadInput, {"outside the tiled trunk"}},
        {train("--data good.csv --tile 8x8"), kOk, {}},  // one segment, tiled
        {train("--data good.csv --plan nothere.json"), kBadInput, {"nothere.json"}},
        {train("--data good.csv --plan good.csv"), kBadInput, {"good.csv"}},
        // Built-in task
        {"train --run out --size 0x0", kBadInput, {"--size"}},
        {"train --run out --size -64x64", kBadInput, {"--size"}},
        {"train --run out --size abc", kBadInput, {"--size", "abc"}},
        {"train --run out --size 4000000x4000000", kBadInput, {"memory"}},
        // Model files
        {train("--data good.csv --model nomodel"), kBadModel, {"nomodel"}},
        {train("--data good.csv --model not_json.json"), kBadModel, {"not_json.json"}},
        {train("--data good.csv --model layers_object.json"), kBadModel, {"layers_object.json", "layers"}},
        {train("--data good.csv --model no_name.json"), kBadModel, {"no_name.json", "name"}},
        {train("--data good.csv --model extra_key.json"), kBadModel, {"extra_key.json", "colour"}},
        {train("--data good.csv --model unknown_op.json"), kBadModel, {"unknown_op.json", "conv3d"}},
        {train("--data good.csv --model unknown_input.json"), kBadModel, {"unknown_input.json", "nothing"}},
        {train("--data good.csv --model later_input.json"), kBadModel, {"later_input.json", "r1"}},
        {train("--data good.csv --model cycle.json"), kBadModel, {"cycle.json", "r2"}},
        {train("--data good.csv --model channels.json"), kBadModel, {"channels.json", "sum", "channel"}},
        {train("--data good.csv --model stride_0.json"), kBadModel, {"stride_0.json", "stride"}},
        {train("--data good.csv --model kernel_0.json"), kBadModel, {"kernel_0.json", "kernel"}},
        {train("--data good.csv --model channels_0.json"), kBadModel, {"channels_0.json", "out_channels"}},
        {train("--data good.csv --model big_kernel.json"), kBadModel, {"big_kernel.json", "c1", "32x32"}},
        {train("--data good.csv --model kernel_string.json"), kBadModel, {"kernel_string.json", "kernel"}},
        {train("--data good.csv --model duplicate_name.json"), kBadModel, {"duplicate_name.json", "c1"}},
        {train("--data good.csv --model no_layers.json"), kBadModel, {"no_layers.json"}},
        {"plan --model not_json.json --size 64x64", kBadModel, {"not_json.json"}},
        {"plan --model tiny_cnn --size 1x1", kBadModel, {"1x1"}},
        {"plan --model tiny_cnn --size 64x64 --memory-cap 1B", kCapTooSmall, {"smallest feasible"}},
        {"plan --model tiny_cnn --size 64x64 --memory-cap abc", kBadInput, {"--memory-cap", "abc"}},
        {"plan --model tiny_cnn --size 0x64", kBadInput, {"--size"}},
        {"plan --model tiny_cnn --size 64x64 --target cuda --mapped-checkpoints --estimate", kBadInput,
         {"--mapped-checkpoints", "drop one of the two"}},
        // Prediction
        {"predict --model tiny_cnn --weights nothere.safetensors --images good.csv --out pred", kBadInput,
         {"nothere.safetensors"}},
        {"predict --model tiny_cnn --weights junk.safetensors --images good.csv --out pred", kBadInput,
         {"junk.safetensors"}},
        {"predict --model seg.json --weights A/weights.safetensors --images good.csv --out pred", kBadInput,
         {"A/weights.safetensors", "f.0.weight"}},
        {"predict --model tiny_cnn --weights A/weights.safetensors --images nothere --out pred", kBadInput,
         {"nothere"}},
        {"predict --model tiny_cnn --weights A/weights.safetensors --images gray_rgb.csv --out pred", kBadInput,
         {"rgb.png", "3 channels"}},
        {"predict --model tiny_cnn --weights A/weights.safetensors --images mixed.csv --out pred", kOk, {}},
        {"predict --model tiny_cnn --weights A/weights.safetensors --images good.csv --out pred --memory-cap 1B",
         kCapTooSmall, {"smallest feasible"}},
        // Subcommands and options
        {"", kBadInput, {"subcommand"}},
        {"fly", kBadInput, {"fly"}},
        {train("--data good.csv --colour red"), kBadInput, {"--colour"}},
        {train("--data good.csv --optimizer rmsprop"), kBadInput, {"rmsprop"}},
        {train("--data good.csv --task detection"), kBadInput, {"detection"}},
        {train("--data good.csv --on-bad-image maybe"), kBadInput, {"maybe"}},
        {train("--data good.csv --lr-schedule linear"), kBadInput, {"linear"}},
            };
    // Every numeric option at 0, negative, NaN, absurdly large and not a number.
    struct Numeric {
        std::string option;
        int zero;   // the status at 0 (0 where 0 means something)
        int large;  // the status at 1e30
    };
    const std::vector<Numeric> numeric = {
        {"--epochs", kBadInput, kBadInput},  {"--batch", kBadInput, kBadInput},
        {"--lr", kBadInput, kDiverged},      {"--momentum", kOk, kBadInput},
        {"--weight-decay", kOk, kDiverged},  {"--seed", kOk, kBadInput},
        {"--stop-after", kOk, kBadInput},
    };
    for (const Numeric &n : numeric) {
        const std::string base = "--data good.csv --optimizer sgd " + n.option;
        t.push_back({train(base + " 0"), n.zero, {n.option}});
        t.push_back({train(base + " -1"), kBadInput, {n.option, "-1"}});
        t.push_back({train(base + " nan"), kBadInput, {n.option, "nan"}});
        t.push_back({train(base + " 1e30"), n.large, {n.option}});
        t.push_back({train(base + " abc"), kBadInput, {n.option, "abc"}});
    }
    for (const std::string v : {"0", "-1", "nan", "1e30", "abc"})
        t.push_back({"train --run out --images-per-epoch " + v, kBadInput, {"--images-per-epoch"}});
    return t;
}

std::string one_line(std::string s) {
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
}

TEST(BadInputTable, EachCaseGivesItsStatusAndOneLineNamingWhatToChange) {
    segtile::testing::TempDir d;
    write_inputs(d);
    // Weights for the prediction cases.
    ProgramResult a = run_segtile(d.path(), "train --model tiny_cnn --data good.csv --epochs 1 --memory-cap none --run A");
    ASSERT_EQ(a.status, 0) << a.out << a.err;

    const std::vector<Case> table = cases();
    int failed = 0;
    for (const Case &c : table) {
        const ProgramResult r = run_segtile(d.path(), c.args);
        std::string wrong;  // what this case got wrong, one clause each
        auto check = [&](bool ok, const std::string &what) {
            if (!ok) wrong += "\n  " + what;
        };
        check(r.status == c.status, "exit status " + std::to_string(r.status) + ", want " + std::to_string(c.status));
        if (c.status == kOk) {
            check(fs::exists(d.file("out/weights.safetensors")) || fs::exists(d.file("pred")),
                  "it succeeded but wrote nothing");
        } else {
            // One line, the program's own, and no raw library message.
            check(std::count(r.err.begin(), r.err.end(), '\n') == 1, "not one line on stderr");
            check(r.err.rfind("segtile: ", 0) == 0, "the message does not start with 'segtile: '");
            for (const char *raw : {"Halide", "terminate called", "what()", "Assertion", "signal"})
                check(r.err.find(raw) == std::string::npos, std::string("a raw '") + raw + "' in the message");
            for (const std::string &w : c.words) check(r.err.find(w) != std::string::npos, "'" + w + "' not in it");
            check(!fs::exists(d.file("out")), "a failed run left a run folder");
            check(!fs::exists(d.file("pred")), "a failed prediction left an output folder");
        }
        if (!wrong.empty()) {
            failed++;
            ADD_FAILURE() << "segtile " << c.args << wrong << "\n  stderr: " << one_line(r.err)
                          << "\n  stdout: " << one_line(r.out);
        }
        fs::remove_all(d.file("out"));
        fs::remove_all(d.file("pred"));
    }
    std::printf("bad input: %zu cases, %d failed\n", table.size(), failed);
}

}  // namespace
