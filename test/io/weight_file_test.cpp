// Weight and optimizer-state files: round trips, the checks against the
// model (each kind of mismatch and of broken file gives its message), and
// interchange with the reference safetensors implementation in Python.
#include "io/weight_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "test/io/model_fixture.h"
#include "test/io/temp_dir.h"

namespace segtile {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;

// Runs `f` and returns the WeightFileError's message ("" if none is thrown).
template <typename F>
std::string error_of(F &&f) {
    try {
        f();
    } catch (const WeightFileError &e) {
        return e.what();
    }
    return "";
}

template <typename T>
void expect_same_values(const ParamStore &a, const ParamStore &b) {
    ASSERT_EQ(a.values.size(), b.values.size());
    for (size_t i = 0; i < a.values.size(); i++) {
        const T *x = static_cast<const T *>(a.values[i].raw());
        const T *y = static_cast<const T *>(b.values[i].raw());
        for (int64_t k = 0; k < a.values[i].numel(); k++)
            ASSERT_EQ(x[k], y[k]) << a.specs()[i].name << " element " << k;
    }
}

class WeightFileTest : public ::testing::Test {
protected:
    TempDir dir;
    MemoryLedger ledger;
    Model model = testing::small_classifier();
};

TEST_F(WeightFileTest, Float32RoundTripIsExact) {
    ParamStore saved(model, &ledger), loaded(model, &ledger);
    saved.init_pytorch_default(1);
    loaded.init_pytorch_default(2);
    save_parameters(dir.file("w.safetensors"), saved, {{"epoch", "3"}});
    const auto md = load_parameters(dir.file("w.safetensors"), loaded);
    expect_same_values<float>(saved, loaded);
    EXPECT_EQ(md.at("epoch"), "3");
    EXPECT_EQ(md.at("format"), "pt");
}

TEST_F(WeightFileTest, Float64RoundTripIsExactAndConvertsToFloat32) {
    const auto f64 = halide_type_of<double>();
    ParamStore saved(model, &ledger, f64), loaded(model, &ledger, f64), as_f32(model, &ledger);
    saved.init_pytorch_default(3);
    save_parameters(dir.file("w.safetensors"), saved);
    load_parameters(dir.file("w.safetensors"), loaded);
    expect_same_values<double>(saved, loaded);
    load_parameters(dir.file("w.safetensors"), as_f32);
    for (size_t i = 0; i < saved.values.size(); i++)
        for (int64_t k = 0; k < saved.values[i].numel(); k++)
            ASSERT_EQ(as_f32.values[i].data()[k], (float)static_cast<const double *>(saved.values[i].raw())[k]);
}

TEST_F(WeightFileTest, HeaderHasPyTorchNamesShapesAndBatchNormCounter) {
    ParamStore p(model, &ledger);
    save_parameters(dir.file("w.safetensors"), p);
    SafetensorsReader r(dir.file("w.safetensors"));
    const SafetensorsEntry *conv = r.find("features.0.weight");
    ASSERT_TRUE(conv);
    EXPECT_EQ(conv->dtype, "F32");
    EXPECT_EQ(conv->shape, (std::vector<int64_t>{4, 3, 3, 3}));  // OIHW
    ASSERT_TRUE(r.find("classifier.weight"));
    EXPECT_EQ(r.find("classifier.weight")->shape, (std::vector<int64_t>{3, 4}));  // (out, in)
    ASSERT_TRUE(r.find("features.1.running_var"));
    const SafetensorsEntry *nbt = r.find("features.1.num_batches_tracked");
    ASSERT_TRUE(nbt);
    EXPECT_EQ(nbt->dtype, "I64");
    EXPECT_TRUE(nbt->shape.empty());
    EXPECT_EQ(r.entries().size(), p.specs().size() + 1);
}

TEST_F(WeightFileTest, MissingTensorIsNamed) {
    ParamStore p(model, &ledger);
    SafetensorsWriter w;
    for (size_t i = 0; i < p.specs().size(); i++)
        if (p.specs()[i].name != "classifier.bias") w.add(p.specs()[i].name, p.values[i]);
    w.write(dir.file("w.safetensors"));
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("w.safetensors"), p); }),
                AllOf(HasSubstr(dir.file("w.safetensors")), HasSubstr("'classifier.bias'"), HasSubstr("missing")));
}

TEST_F(WeightFileTest, UnexpectedTensorIsNamed) {
    ParamStore p(model, &ledger);
    SafetensorsWriter w;
    for (size_t i = 0; i < p.specs().size(); i++) w.add(p.specs()[i].name, p.values[i]);
    w.add("head.extra.weight", p.values[0]);
    w.write(dir.file("w.safetensors"));
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("w.safetensors"), p); }),
                AllOf(HasSubstr(dir.file("w.safetensors")), HasSubstr("'head.extra.weight'"),
                      HasSubstr("model does not have")));
}

// Files without num_batches_tracked (not every writer adds it) load too.
TEST_F(WeightFileTest, BatchNormCounterIsOptional) {
    ParamStore saved(model, &ledger), loaded(model, &ledger);
    saved.init_pytorch_default(8);
    SafetensorsWriter w;
    for (size_t i = 0; i < saved.specs().size(); i++) w.add(saved.specs()[i].name, saved.values[i]);
    w.write(dir.file("w.safetensors"));
    load_parameters(dir.file("w.safetensors"), loaded);
    expect_same_values<float>(saved, loaded);
}

TEST_F(WeightFileTest, WrongShapeIsNamedAndNothingIsChanged) {
    const Model wider = testing::small_classifier(5);
    ParamStore other(wider, &ledger), p(model, &ledger);
    other.init_pytorch_default(4);
    p.init_pytorch_default(5);
    save_parameters(dir.file("w.safetensors"), other);
    ParamStore before(model, &ledger);
    before.init_pytorch_default(5);
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("w.safetensors"), p); }),
                AllOf(HasSubstr(dir.file("w.safetensors")), HasSubstr("'features.0.weight'"),
                      HasSubstr("[5, 3, 3, 3]"), HasSubstr("[4, 3, 3, 3]")));
    expect_same_values<float>(p, before);
}

TEST_F(WeightFileTest, WrongDtypeIsNamed) {
    ParamStore p(model, &ledger);
    SafetensorsWriter w;
    std::vector<int32_t> ints(3, 7);
    for (size_t i = 0; i < p.specs().size(); i++) {
        if (p.specs()[i].name == "classifier.bias")
            w.add("classifier.bias", "I32", {3}, ints.data());
        else
            w.add(p.specs()[i].name, p.values[i]);
    }
    w.write(dir.file("w.safetensors"));
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("w.safetensors"), p); }),
                AllOf(HasSubstr(dir.file("w.safetensors")), HasSubstr("'classifier.bias'"), HasSubstr("dtype I32")));
}

TEST_F(WeightFileTest, TruncatedFileIsCaught) {
    ParamStore p(model, &ledger);
    save_parameters(dir.file("w.safetensors"), p);
    const auto size = std::filesystem::file_size(dir.file("w.safetensors"));
    std::filesystem::resize_file(dir.file("w.safetensors"), size - 10);
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("w.safetensors"), p); }),
                AllOf(HasSubstr(dir.file("w.safetensors")), HasSubstr("ends at data byte"), HasSubstr("truncated")));
    std::filesystem::resize_file(dir.file("w.safetensors"), 20);  // inside the header
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("w.safetensors"), p); }),
                AllOf(HasSubstr("does not fit in the file"), HasSubstr("truncated")));
    std::filesystem::resize_file(dir.file("w.safetensors"), 5);
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("w.safetensors"), p); }),
                HasSubstr("shorter than the 8-byte header length"));
}

TEST_F(WeightFileTest, CorruptHeadersAreCaught) {
    ParamStore p(model, &ledger);
    auto with_header = [&](const std::string &json, const std::string &data = "") {
        std::string bytes(8, '\0');
        const uint64_t n = json.size();
        std::memcpy(bytes.data(), &n, 8);
        dir.write("bad.safetensors", bytes + json + data);
        return error_of([&] { load_parameters(dir.file("bad.safetensors"), p); });
    };
    EXPECT_THAT(with_header("{not json"), AllOf(HasSubstr(dir.file("bad.safetensors")), HasSubstr("not JSON")));
    EXPECT_THAT(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "xxxx"),
                AllOf(HasSubstr("'a'"), HasSubstr("8 bytes) but 4 bytes")));
    EXPECT_THAT(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", "xxxxxxxx"),
                HasSubstr("gap or overlap"));
    EXPECT_THAT(with_header(R"({"a": {"dtype": "F32", "shape": [1]}})"), HasSubstr("data_offsets"));
    dir.write("garbage.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f garbage", 16));
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("garbage.safetensors"), p); }), HasSubstr("corrupt"));
    EXPECT_THAT(error_of([&] { load_parameters(dir.file("absent.safetensors"), p); }),
                AllOf(HasSubstr("cannot open"), HasSubstr("absent.safetensors")));
}

// Gives every trainable parameter a gradient and takes `n` optimizer steps.
void train_steps(Optimizer &opt, ParamStore &p, int n, int salt) {
    for (int s = 0; s < n; s++) {
        for (size_t i = 0; i < p.grads.size(); i++)
            if (p.grads[i].defined())
                for (int64_t k = 0; k < p.grads[i].numel(); k++)
                    p.grads[i].data()[k] = 0.01f * (float)((k * 7 + i * 3 + s + salt) % 11) - 0.05f;
        opt.step(p);
    }
}

TEST_F(WeightFileTest, AdamStateRoundTripResumesIdentically) {
    OptimizerConfig cfg;
    cfg.kind = "adam";
    cfg.lr = 0.01f;
    ParamStore a(model, &ledger), b(model, &ledger);
    a.init_pytorch_default(6);
    Optimizer oa(cfg, a, &ledger), ob(cfg, b, &ledger);
    train_steps(oa, a, 3, 0);
    save_parameters(dir.file("w.safetensors"), a);
    save_optimizer_state(dir.file("opt.safetensors"), oa, a);
    load_parameters(dir.file("w.safetensors"), b);
    load_optimizer_state(dir.file("opt.safetensors"), ob, b);
    EXPECT_EQ(ob.steps(), 3);
    SafetensorsReader r(dir.file("opt.safetensors"));
    EXPECT_TRUE(r.find("optimizer.adam.exp_avg.features.0.weight"));
    EXPECT_TRUE(r.find("optimizer.adam.exp_avg_sq.classifier.bias"));
    EXPECT_FALSE(r.find("optimizer.adam.exp_avg.features.1.running_mean"));  // buffers have no state
    // The resumed optimizer continues exactly as the original.
    train_steps(oa, a, 2, 5);
    train_steps(ob, b, 2, 5);
    expect_same_values<float>(a, b);
}

TEST_F(WeightFileTest, OptimizerKindMismatchSaysWhatToPass) {
    OptimizerConfig sgd, adam;
    adam.kind = "adam";
    ParamStore p(model, &ledger);
    Optimizer os(sgd, p, &ledger), oa(adam, p, &ledger);
    train_steps(os, p, 1, 0);
    save_optimizer_state(dir.file("opt.safetensors"), os, p);
    EXPECT_THAT(error_of([&] { load_optimizer_state(dir.file("opt.safetensors"), oa, p); }),
                AllOf(HasSubstr(dir.file("opt.safetensors")), HasSubstr("--optimizer sgd")));
    EXPECT_EQ(oa.steps(), 0);
    // A weights file is not an optimizer state.
    save_parameters(dir.file("w.safetensors"), p);
    EXPECT_THAT(error_of([&] { load_optimizer_state(dir.file("w.safetensors"), os, p); }),
                HasSubstr("not a segtile optimizer state"));
}

// Runs the venv's Python on `script`; returns its exit status, output in `out`.
int run_python(const TempDir &dir, const std::string &script, std::string &out) {
    dir.write("check.py", script);
    const std::string cmd = std::string(SEGTILE_PYTHON) + " " + dir.file("check.py") + " 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    if (!p) return -1;
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    return pclose(p);
}

// Conv weight element (kx, ky, ci, co) = kx + 10 ky + 100 ci + 1000 co, and
// the dense weight (in, out) = in + 10 out: Python checks them at PyTorch's
// indices [co, ci, ky, kx] and [out, in].
TEST_F(WeightFileTest, PythonSafetensorsReadsOurFileWithPyTorchLayout) {
    ParamStore p(model, &ledger);
    Tensor &conv = p.values[0];
    ASSERT_EQ(p.specs()[0].name, "features.0.weight");
    const auto &d = conv.dims();
    for (int64_t co = 0; co < d[3]; co++)
        for (int64_t ci = 0; ci < d[2]; ci++)
            for (int64_t ky = 0; ky < d[1]; ky++)
                for (int64_t kx = 0; kx < d[0]; kx++)
                    conv.data()[((co * d[2] + ci) * d[1] + ky) * d[0] + kx] = (float)(kx + 10 * ky + 100 * ci + 1000 * co);
    for (size_t i = 0; i < p.specs().size(); i++)
        if (p.specs()[i].name == "classifier.weight") {
            const auto &e = p.values[i].dims();
            for (int64_t o = 0; o < e[1]; o++)
                for (int64_t in = 0; in < e[0]; in++) p.values[i].data()[o * e[0] + in] = (float)(in + 10 * o);
        }
    save_parameters(dir.file("w.safetensors"), p);
    std::string out;
    const int rc = run_python(dir, R"(
import numpy as np, sys
from safetensors.numpy import load_file
t = load_file(sys.argv[0].replace("check.py", "w.safetensors"))
w = t["features.0.weight"]
assert w.shape == (4, 3, 3, 3) and w.dtype == np.float32, (w.shape, w.dtype)
co, ci, ky, kx = np.indices(w.shape)
assert (w == kx + 10 * ky + 100 * ci + 1000 * co).all()
fc = t["classifier.weight"]
o, i = np.indices(fc.shape)
assert fc.shape == (3, 4) and (fc == i + 10 * o).all()
assert t["features.1.num_batches_tracked"].shape == () and t["features.1.num_batches_tracked"].dtype == np.int64
assert sorted(t) == sorted(["features.0.weight", "features.0.bias", "features.1.weight", "features.1.bias",
    "features.1.running_mean", "features.1.running_var", "features.1.num_batches_tracked",
    "classifier.weight", "classifier.bias"]), sorted(t)
print("ok")
)", out);
    EXPECT_EQ(rc, 0) << out << "\n(the venv Python needs safetensors and numpy: run scripts/setup.sh)";
    EXPECT_THAT(out, HasSubstr("ok"));
}

TEST_F(WeightFileTest, FileWrittenByPythonSafetensorsLoads) {
    std::string out;
    const int rc = run_python(dir, R"(
import numpy as np, sys
from safetensors.numpy import save_file
co, ci, ky, kx = np.indices((4, 3, 3, 3))
o, i = np.indices((3, 4))
t = {"features.0.weight": (kx + 10 * ky + 100 * ci + 1000 * co).astype(np.float64),
     "features.0.bias": np.arange(4, dtype=np.float32),
     "features.1.weight": np.full(4, 2.0, dtype=np.float32), "features.1.bias": np.zeros(4, np.float32),
     "features.1.running_mean": np.full(4, 0.5, np.float32), "features.1.running_var": np.ones(4, np.float32),
     "features.1.num_batches_tracked": np.array(17, dtype=np.int64),
     "classifier.weight": (i + 10 * o).astype(np.float32), "classifier.bias": np.array([1, 2, 3], np.float32)}
save_file(t, sys.argv[0].replace("check.py", "py.safetensors"), metadata={"format": "pt"})
print("ok")
)", out);
    ASSERT_EQ(rc, 0) << out << "\n(the venv Python needs safetensors and numpy: run scripts/setup.sh)";
    ParamStore p(model, &ledger);
    load_parameters(dir.file("py.safetensors"), p);
    const Tensor &conv = p.values[0];
    const auto &d = conv.dims();  // (kx, ky, ci, co)
    for (int64_t co = 0; co < d[3]; co++)
        for (int64_t ci = 0; ci < d[2]; ci++)
            for (int64_t ky = 0; ky < d[1]; ky++)
                for (int64_t kx = 0; kx < d[0]; kx++)
                    ASSERT_EQ(conv.data()[((co * d[2] + ci) * d[1] + ky) * d[0] + kx],
                              (float)(kx + 10 * ky + 100 * ci + 1000 * co));
    std::map<std::string, const float *> by_name;
    for (size_t i = 0; i < p.specs().size(); i++) by_name[p.specs()[i].name] = p.values[i].data();
    EXPECT_EQ(by_name.at("classifier.weight")[1 * 4 + 2], 12.0f);  // (in 2, out 1)
    EXPECT_EQ(by_name.at("classifier.bias")[2], 3.0f);
    EXPECT_EQ(by_name.at("features.1.running_mean")[0], 0.5f);
}

}  // namespace
}  // namespace segtile
