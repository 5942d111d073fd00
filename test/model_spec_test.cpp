// The shipped model files (models/*.json) and the model description itself:
// every shipped model loads and resolves, with the parameter count, names and
// shapes of the real network; malformed files fail with one ModelError that
// names the file, the layer and what is wrong; the C++ builder describes the
// same Model as the JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "spec/builder.h"
#include "spec/model.h"
#include "test/layer_cases.h"

namespace segtile {
namespace {

using ::testing::HasSubstr;

struct Counts {
    int64_t trainable = 0, buffers = 0;
    int trainable_tensors = 0, buffer_tensors = 0;
};

Counts count(const Model &m) {
    Counts c;
    for (const auto &p : m.params()) {
        if (p.trainable) {
            c.trainable += p.numel();
            c.trainable_tensors++;
        } else {
            c.buffers += p.numel();
            c.buffer_tensors++;
        }
    }
    return c;
}

ParamSpec param(const Model &m, const std::string &name) {
    for (const auto &p : m.params())
        if (p.name == name) return p;
    ADD_FAILURE() << m.name << " has no parameter '" << name << "'";
    return {};
}

std::vector<int64_t> torch_shape(const Model &m, const std::string &name) { return param(m, name).torch_shape(); }

TensorShape shape_of(const Model &m, const std::vector<TensorShape> &s, const std::string &layer) {
    const int i = m.find_layer(layer);
    EXPECT_GE(i, 0) << m.name << " has no layer '" << layer << "'";
    return i < 0 ? TensorShape{} : s[i];
}

void expect_shape(const TensorShape &s, int64_t w, int64_t h, int64_t c) {
    EXPECT_EQ(s.width, w);
    EXPECT_EQ(s.height, h);
    EXPECT_EQ(s.channels, c);
}

// The message of the ModelError `f` throws; fails the test if it throws nothing.
template <typename F>
std::string error_of(F &&f) {
    try {
        f();
    } catch (const ModelError &e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a ModelError";
    return "";
}

// ---------------------------------------------------------------- shipped models

TEST(ShippedModels, EveryFileInModelsDirLoads) {
    int n = 0;
    for (const auto &entry : std::filesystem::directory_iterator(models_dir())) {
        if (entry.path().extension() != ".json") continue;
        SCOPED_TRACE(entry.path().string());
        const Model m = load_model_file(entry.path().string());
        EXPECT_EQ(m.name, entry.path().stem().string()) << "a model's name should match its file name";
        EXPECT_EQ(load_model(m.name).params().size(), m.params().size());
        EXPECT_FALSE(m.params().empty());
        n++;
    }
    EXPECT_GE(n, 5) << "expected tiny_cnn, vgg16, darknet19, resnet18 and unet in " << models_dir();
}

TEST(ShippedModels, TinyCnn) {
    const Model m = load_model("tiny_cnn");
    EXPECT_EQ(count(m).trainable, (9 * 1 * 8 + 8) + (9 * 8 * 16 + 16) + (9 * 16 * 16 + 16) + (16 * 2 + 2));
    EXPECT_EQ(count(m).trainable, 3602);
    expect_shape(shape_of(m, m.shapes(4, 4), "relu3"), 1, 1, 16);
    EXPECT_THAT(error_of([&] { m.shapes(3, 4); }), HasSubstr("layer 'pool2'"));
}

TEST(ShippedModels, Vgg16) {
    const Model m = load_model("vgg16");
    const Counts c = count(m);
    // torchvision's vgg16().features: 14,714,688; plus the 512 -> 2 classifier.
    EXPECT_EQ(c.trainable, 14714688 + 512 * 2 + 2);
    EXPECT_EQ(c.trainable_tensors, 28);
    EXPECT_EQ(c.buffers, 0);
    const auto ps = m.params();
    EXPECT_EQ(ps.front().name, "features.0.weight");
    EXPECT_EQ(ps[1].name, "features.0.bias");
    EXPECT_EQ(torch_shape(m, "features.0.weight"), (std::vector<int64_t>{64, 3, 3, 3}));
    EXPECT_EQ(torch_shape(m, "features.10.weight"), (std::vector<int64_t>{256, 128, 3, 3}));
    EXPECT_EQ(torch_shape(m, "features.28.weight"), (std::vector<int64_t>{512, 512, 3, 3}));
    EXPECT_EQ(torch_shape(m, "features.28.bias"), (std::vector<int64_t>{512}));
    EXPECT_EQ(torch_shape(m, "classifier.weight"), (std::vector<int64_t>{2, 512}));
    EXPECT_EQ(ps.back().name, "classifier.bias");
    EXPECT_EQ(m.input_channels, 3);
    EXPECT_EQ(m.loss.kind, LossKind::SoftmaxCrossEntropy);
    EXPECT_EQ(m.output_channels(), 2);

    const auto s = m.shapes(224, 160);
    expect_shape(shape_of(m, s, "conv1_1"), 224, 160, 64);
    expect_shape(shape_of(m, s, "pool1"), 112, 80, 64);
    expect_shape(shape_of(m, s, "conv3_3"), 56, 40, 256);
    expect_shape(shape_of(m, s, "pool5"), 7, 5, 512);
    expect_shape(shape_of(m, s, "gap"), 1, 1, 512);
    expect_shape(shape_of(m, s, "fc"), 1, 1, 2);
    // The smallest image: five 2x2 pools.
    expect_shape(shape_of(m, m.shapes(32, 32), "pool5"), 1, 1, 512);
    expect_shape(shape_of(m, m.shapes(63, 32), "pool5"), 1, 1, 512);
    const std::string e = error_of([&] { m.shapes(32, 31); });
    EXPECT_THAT(e, HasSubstr("vgg16.json"));
    EXPECT_THAT(e, HasSubstr("layer 'pool5'"));
    EXPECT_THAT(e, HasSubstr("too small"));
    EXPECT_THAT(e, HasSubstr("32x31"));
}

TEST(ShippedModels, Darknet19) {
    const Model m = load_model("darknet19");
    const Counts c = count(m);
    // 18 bias-free convs (19,802,976 weights) each with a batch norm over 7,200
    // channels in all, plus the 1x1 classifier conv 1024 -> 2 with bias.
    // With 1000 classes it would be 20,842,376 (Darknet-19's "20.8M").
    EXPECT_EQ(c.trainable, 19802976 + 2 * 7200 + 1024 * 2 + 2);
    EXPECT_EQ(c.trainable - (1024 * 2 + 2) + (1024 * 1000 + 1000), 20842376);
    EXPECT_EQ(c.buffers, 2 * 7200);
    EXPECT_EQ(c.trainable_tensors, 18 + 36 + 2);
    EXPECT_EQ(c.buffer_tensors, 36);
    const auto ps = m.params();
    EXPECT_EQ(ps[0].name, "features.0.weight");
    EXPECT_EQ(ps[1].name, "features.1.weight");
    EXPECT_EQ(ps[2].name, "features.1.bias");
    EXPECT_EQ(ps[3].name, "features.1.running_mean");
    EXPECT_EQ(ps[4].name, "features.1.running_var");
    EXPECT_FALSE(ps[3].trainable);
    EXPECT_EQ(torch_shape(m, "features.0.weight"), (std::vector<int64_t>{32, 3, 3, 3}));
    EXPECT_EQ(torch_shape(m, "features.4.weight"), (std::vector<int64_t>{64, 32, 3, 3}));
    EXPECT_EQ(torch_shape(m, "features.11.weight"), (std::vector<int64_t>{64, 128, 1, 1}));
    EXPECT_EQ(torch_shape(m, "features.56.weight"), (std::vector<int64_t>{1024, 512, 3, 3}));
    EXPECT_EQ(torch_shape(m, "features.57.running_var"), (std::vector<int64_t>{1024}));
    EXPECT_EQ(torch_shape(m, "classifier.weight"), (std::vector<int64_t>{2, 1024, 1, 1}));
    EXPECT_EQ(ps.back().name, "classifier.bias");
    EXPECT_EQ(m.output_channels(), 2);

    const auto s = m.shapes(256, 192);
    expect_shape(shape_of(m, s, "conv1"), 256, 192, 32);
    expect_shape(shape_of(m, s, "conv5"), 64, 48, 128);
    expect_shape(shape_of(m, s, "conv18"), 8, 6, 1024);
    expect_shape(shape_of(m, s, "conv19"), 8, 6, 2);
    expect_shape(shape_of(m, s, "gap"), 1, 1, 2);
    expect_shape(shape_of(m, s, "flatten"), 1, 1, 2);
    expect_shape(shape_of(m, m.shapes(32, 48), "conv18"), 1, 1, 1024);
    const std::string e = error_of([&] { m.shapes(31, 64); });
    EXPECT_THAT(e, HasSubstr("darknet19.json"));
    EXPECT_THAT(e, HasSubstr("layer 'pool5'"));
    EXPECT_THAT(e, HasSubstr("too small"));
}

TEST(ShippedModels, Resnet18) {
    const Model m = load_model("resnet18");
    const Counts c = count(m);
    // torchvision's resnet18() has 11,689,512 parameters with its 1000-class fc.
    EXPECT_EQ(c.trainable - (512 * 2 + 2) + (512 * 1000 + 1000), 11689512);
    EXPECT_EQ(c.trainable, 11177538);
    EXPECT_EQ(c.buffers, 9600);  // running_mean and running_var of 4,800 channels
    EXPECT_EQ(c.trainable_tensors, 62);
    EXPECT_EQ(c.buffer_tensors, 40);
    const auto ps = m.params();
    EXPECT_EQ(ps[0].name, "conv1.weight");
    EXPECT_EQ(ps[1].name, "bn1.weight");
    EXPECT_EQ(ps[5].name, "layer1.0.conv1.weight");
    EXPECT_EQ(ps[6].name, "layer1.0.bn1.weight");
    EXPECT_EQ(torch_shape(m, "conv1.weight"), (std::vector<int64_t>{64, 3, 7, 7}));
    EXPECT_EQ(torch_shape(m, "layer1.0.conv1.weight"), (std::vector<int64_t>{64, 64, 3, 3}));
    EXPECT_EQ(torch_shape(m, "layer2.0.conv1.weight"), (std::vector<int64_t>{128, 64, 3, 3}));
    EXPECT_EQ(torch_shape(m, "layer2.0.downsample.0.weight"), (std::vector<int64_t>{128, 64, 1, 1}));
    EXPECT_EQ(torch_shape(m, "layer2.0.downsample.1.running_var"), (std::vector<int64_t>{128}));
    EXPECT_EQ(torch_shape(m, "layer4.1.bn2.bias"), (std::vector<int64_t>{512}));
    EXPECT_EQ(torch_shape(m, "fc.weight"), (std::vector<int64_t>{2, 512}));
    EXPECT_EQ(ps.back().name, "fc.bias");
    for (const auto &p : ps) {
        EXPECT_THAT(p.name, ::testing::Not(HasSubstr("layer1.0.downsample"))) << "layer1 keeps its shape";
        if (p.role == ParamRole::Bias) EXPECT_THAT(p.name, ::testing::AnyOf(HasSubstr("bn"), HasSubstr("downsample.1"),
                                                                           HasSubstr("fc")))
                << "convs have no bias";
    }

    const auto s = m.shapes(224, 224);
    expect_shape(shape_of(m, s, "conv1"), 112, 112, 64);
    expect_shape(shape_of(m, s, "maxpool"), 56, 56, 64);
    expect_shape(shape_of(m, s, "layer1.1.relu2"), 56, 56, 64);
    expect_shape(shape_of(m, s, "layer2.0.downsample.1"), 28, 28, 128);
    expect_shape(shape_of(m, s, "layer3.1.relu2"), 14, 14, 256);
    expect_shape(shape_of(m, s, "layer4.1.relu2"), 7, 7, 512);
    expect_shape(shape_of(m, s, "fc"), 1, 1, 2);
    // Odd sizes: the stride-2 3x3 conv and the 1x1 downsample agree.
    expect_shape(shape_of(m, m.shapes(41, 23), "layer4.1.relu2"), 2, 1, 512);
    // Padding keeps every window inside: even a 1x1 image passes.
    expect_shape(shape_of(m, m.shapes(1, 1), "layer4.1.relu2"), 1, 1, 512);
}

TEST(ShippedModels, Unet) {
    const Model m = load_model("unet");
    const Counts c = count(m);
    auto conv = [](int64_t ci, int64_t co, int64_t k) { return k * k * ci * co + co; };
    EXPECT_EQ(c.trainable, conv(3, 16, 3) + conv(16, 16, 3) + conv(16, 32, 3) + conv(32, 32, 3) + conv(32, 64, 3) +
                               conv(64, 64, 3) + conv(64 + 32, 32, 3) + conv(32, 32, 3) + conv(32 + 16, 16, 3) +
                               conv(16, 16, 3) + conv(16, 1, 1));
    EXPECT_EQ(c.trainable, 118273);
    EXPECT_EQ(c.trainable_tensors, 22);
    EXPECT_EQ(c.buffers, 0);
    const auto ps = m.params();
    EXPECT_EQ(ps[0].name, "enc1.0.weight");
    EXPECT_EQ(torch_shape(m, "enc1.2.weight"), (std::vector<int64_t>{16, 16, 3, 3}));
    EXPECT_EQ(torch_shape(m, "mid.0.weight"), (std::vector<int64_t>{64, 32, 3, 3}));
    EXPECT_EQ(torch_shape(m, "dec2.0.weight"), (std::vector<int64_t>{32, 96, 3, 3}));
    EXPECT_EQ(torch_shape(m, "dec1.0.weight"), (std::vector<int64_t>{16, 48, 3, 3}));
    EXPECT_EQ(torch_shape(m, "head.weight"), (std::vector<int64_t>{1, 16, 1, 1}));
    EXPECT_EQ(ps.back().name, "head.bias");
    EXPECT_EQ(m.loss.kind, LossKind::MeanSquaredError);
    EXPECT_EQ(m.output_channels(), 1);

    const auto s = m.shapes(64, 48);
    expect_shape(shape_of(m, s, "enc1.3"), 64, 48, 16);
    expect_shape(shape_of(m, s, "pool2"), 16, 12, 32);
    expect_shape(shape_of(m, s, "mid.3"), 16, 12, 64);
    expect_shape(shape_of(m, s, "cat2"), 32, 24, 96);
    expect_shape(shape_of(m, s, "cat1"), 64, 48, 48);
    expect_shape(shape_of(m, s, "head"), 64, 48, 1);
    expect_shape(shape_of(m, m.shapes(4, 4), "head"), 4, 4, 1);

    std::string e = error_of([&] { m.shapes(8, 2); });
    EXPECT_THAT(e, HasSubstr("unet.json"));
    EXPECT_THAT(e, HasSubstr("layer 'pool2'"));
    EXPECT_THAT(e, HasSubstr("too small"));
    // Skip connections need sizes the two pools divide.
    e = error_of([&] { m.shapes(10, 8); });
    EXPECT_THAT(e, HasSubstr("unet.json"));
    EXPECT_THAT(e, HasSubstr("layer 'cat2'"));
    EXPECT_THAT(e, HasSubstr("inputs differ in size"));
}

TEST(ShippedModels, UnknownModelName) {
    const std::string e = error_of([] { load_model("vgg17"); });
    EXPECT_THAT(e, HasSubstr("no shipped model named 'vgg17'"));
}

// ---------------------------------------------------------------- malformed files

// A one-model file around `layers` (a JSON array body).
std::string model_text(const std::string &layers, const std::string &loss = R"({"type": "softmax_cross_entropy"})") {
    return R"({"name": "broken", "input_channels": 3, "layers": [)" + layers + R"(], "loss": )" + loss + "}";
}

std::string parse_error(const std::string &text) {
    return error_of([&] { parse_model_json(text, "bad.json"); });
}

TEST(MalformedModel, UnknownLayerKind) {
    const std::string e = parse_error(model_text(R"({"name": "c1", "type": "conv3d", "out_channels": 4, "kernel": 3})"));
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("'c1'"));
    EXPECT_THAT(e, HasSubstr("unknown layer type \"conv3d\""));
    EXPECT_THAT(e, HasSubstr("conv2d"));  // lists the known kinds
}

TEST(MalformedModel, MissingField) {
    const std::string e = parse_error(model_text(R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3},
                                                    {"name": "c2", "type": "conv2d", "out_channels": 4})"));
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("'c2'"));
    EXPECT_THAT(e, HasSubstr("missing field \"kernel\""));
    EXPECT_THAT(e, ::testing::Not(HasSubstr("'c1'")));

    const std::string no_type = parse_error(model_text(R"({"name": "c1", "out_channels": 4, "kernel": 3})"));
    EXPECT_THAT(no_type, HasSubstr("bad.json"));
    EXPECT_THAT(no_type, HasSubstr("'c1'"));
    EXPECT_THAT(no_type, HasSubstr("missing field \"type\""));

    const std::string no_name = parse_error(model_text(R"({"name": "c1", "type": "relu"}, {"type": "relu"})"));
    EXPECT_THAT(no_name, HasSubstr("bad.json"));
    EXPECT_THAT(no_name, HasSubstr("layer 1"));
    EXPECT_THAT(no_name, HasSubstr("missing field \"name\""));

    const std::string no_layers = parse_error(R"({"name": "broken"})");
    EXPECT_THAT(no_layers, HasSubstr("bad.json"));
    EXPECT_THAT(no_layers, HasSubstr("missing field \"layers\""));
}

TEST(MalformedModel, ChannelMismatch) {
    const std::string e = parse_error(model_text(R"(
        {"name": "a", "type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1, "inputs": "input"},
        {"name": "b", "type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1, "inputs": "input"},
        {"name": "sum", "type": "add", "inputs": ["a", "b"]})"));
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("layer 'sum'"));
    EXPECT_THAT(e, HasSubstr("channel mismatch"));
    EXPECT_THAT(e, HasSubstr("'a' has 8 channels"));
    EXPECT_THAT(e, HasSubstr("'b' has 16"));
}

TEST(MalformedModel, DanglingInput) {
    const std::string e = parse_error(model_text(R"(
        {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3},
        {"name": "r1", "type": "relu", "inputs": "conv1"})"));
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("layer 'r1'"));
    EXPECT_THAT(e, HasSubstr("input 'conv1' names no layer"));

    const std::string later = parse_error(model_text(R"(
        {"name": "r1", "type": "relu", "inputs": "c1"},
        {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3})"));
    EXPECT_THAT(later, HasSubstr("layer 'r1'"));
    EXPECT_THAT(later, HasSubstr("defined later"));

    const std::string loss = parse_error(model_text(R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3})",
                                                    R"({"type": "mse", "input": "head"})"));
    EXPECT_THAT(loss, HasSubstr("bad.json"));
    EXPECT_THAT(loss, HasSubstr("loss input 'head' names no layer"));
}

TEST(MalformedModel, WrongFieldType) {
    std::string e = parse_error(model_text(R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": "3"})"));
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("'c1'"));
    EXPECT_THAT(e, HasSubstr("\"kernel\" must be an integer"));

    e = parse_error(model_text(R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "bias": 0})"));
    EXPECT_THAT(e, HasSubstr("'c1'"));
    EXPECT_THAT(e, HasSubstr("\"bias\" must be true or false"));

    e = parse_error(model_text(R"({"name": "r", "type": "relu", "inputs": 3})"));
    EXPECT_THAT(e, HasSubstr("'r'"));
    EXPECT_THAT(e, HasSubstr("\"inputs\" must be a layer name"));

    e = parse_error(model_text(R"({"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "factor": 2})"));
    EXPECT_THAT(e, HasSubstr("'c1'"));
    EXPECT_THAT(e, HasSubstr("\"factor\" does not apply to conv2d"));

    e = parse_error(model_text(R"({"name": "c1", "type": "conv2d", "out_channels": 0, "kernel": 3})"));
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("layer 'c1'"));
    EXPECT_THAT(e, HasSubstr("\"out_channels\" must be positive"));
}

TEST(MalformedModel, NotJson) {
    std::string e = parse_error(R"({"name": "broken", "layers": [{"name": "c1", "type": "relu"},]})");
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("not valid JSON"));
    e = parse_error("[1, 2, 3]");
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("must be a JSON object"));
    e = error_of([] { load_model_file("/nonexistent/dir/bad.json"); });
    EXPECT_THAT(e, HasSubstr("/nonexistent/dir/bad.json"));
    EXPECT_THAT(e, HasSubstr("cannot open"));
}

TEST(MalformedModel, DuplicateNames) {
    const std::string e = parse_error(model_text(R"(
        {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3},
        {"name": "act", "type": "relu"},
        {"name": "act", "type": "sigmoid"})"));
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("layer 'act'"));
    EXPECT_THAT(e, HasSubstr("duplicate layer name"));

    const std::string reserved = parse_error(model_text(R"({"name": "input", "type": "relu"})"));
    EXPECT_THAT(reserved, HasSubstr("layer 'input'"));
    EXPECT_THAT(reserved, HasSubstr("reserved"));
}

TEST(MalformedModel, DenseWithoutFlatten) {
    const std::string e = parse_error(model_text(R"(
        {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3},
        {"name": "fc", "type": "dense", "out_features": 2})"));
    EXPECT_THAT(e, HasSubstr("bad.json"));
    EXPECT_THAT(e, HasSubstr("layer 'fc'"));
    EXPECT_THAT(e, HasSubstr("flatten"));
}

// ---------------------------------------------------------------- builder == JSON

void expect_same_model(const Model &a, const Model &b) {
    ASSERT_EQ(a.layers.size(), b.layers.size());
    EXPECT_EQ(a.input_channels, b.input_channels);
    for (size_t i = 0; i < a.layers.size(); i++) {
        const Layer &x = a.layers[i], &y = b.layers[i];
        SCOPED_TRACE(x.name);
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.kind, y.kind);
        EXPECT_EQ(x.inputs, y.inputs);
        EXPECT_EQ(x.input_ids, y.input_ids);
        EXPECT_EQ(x.param_prefix, y.param_prefix);
        EXPECT_EQ(x.out_channels, y.out_channels);
        EXPECT_EQ(x.kernel, y.kernel);
        EXPECT_EQ(x.stride, y.stride);
        EXPECT_EQ(x.padding, y.padding);
        EXPECT_EQ(x.dilation, y.dilation);
        EXPECT_EQ(x.groups, y.groups);
        EXPECT_EQ(x.bias, y.bias);
        EXPECT_EQ(x.negative_slope, y.negative_slope);
        EXPECT_EQ(x.eps, y.eps);
        EXPECT_EQ(x.factor, y.factor);
        EXPECT_EQ(x.out_features, y.out_features);
        EXPECT_EQ(x.in_features, y.in_features);
        EXPECT_EQ(x.in_channels, y.in_channels);
        EXPECT_EQ(x.channels, y.channels);
    }
    EXPECT_EQ(a.loss.kind, b.loss.kind);
    EXPECT_EQ(a.loss.input_id, b.loss.input_id);
    const auto pa = a.params(), pb = b.params();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); i++) {
        EXPECT_EQ(pa[i].name, pb[i].name);
        EXPECT_EQ(pa[i].dims, pb[i].dims);
        EXPECT_EQ(pa[i].role, pb[i].role);
        EXPECT_EQ(pa[i].trainable, pb[i].trainable);
        EXPECT_EQ(pa[i].layer, pb[i].layer);
    }
}

void expect_same_shapes(const Model &a, const Model &b, int w, int h) {
    const auto sa = a.shapes(w, h), sb = b.shapes(w, h);
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); i++) {
        EXPECT_EQ(sa[i].width, sb[i].width) << a.layers[i].name;
        EXPECT_EQ(sa[i].height, sb[i].height) << a.layers[i].name;
        EXPECT_EQ(sa[i].channels, sb[i].channels) << a.layers[i].name;
    }
}

TEST(Builder, ResNet18MatchesJson) {
    ModelBuilder b("resnet18", 3);
    b.conv2d("conv1", 64, 7).stride(2).padding(3).bias(false).batch_norm("bn1").relu("relu");
    b.max_pool("maxpool", 3).stride(2).padding(1);
    std::string prev = "maxpool";
    int in_ch = 64;
    const int widths[] = {64, 128, 256, 512};
    for (int stage = 1; stage <= 4; stage++) {
        const int ch = widths[stage - 1];
        for (int k = 0; k < 2; k++) {
            const std::string p = "layer" + std::to_string(stage) + "." + std::to_string(k);
            const int s = stage > 1 && k == 0 ? 2 : 1;
            b.conv2d(p + ".conv1", ch, 3).stride(s).padding(1).bias(false).inputs({prev});
            b.batch_norm(p + ".bn1").relu(p + ".relu1");
            b.conv2d(p + ".conv2", ch, 3).padding(1).bias(false).batch_norm(p + ".bn2");
            std::string shortcut = prev;
            if (s != 1 || in_ch != ch) {
                b.conv2d(p + ".downsample.0", ch, 1).stride(s).bias(false).inputs({prev});
                b.batch_norm(p + ".downsample.1");
                shortcut = p + ".downsample.1";
            }
            b.add(p + ".add", {p + ".bn2", shortcut}).relu(p + ".relu2");
            prev = p + ".relu2";
            in_ch = ch;
        }
    }
    b.global_avg_pool("avgpool").flatten("flatten").dense("fc", 2).loss(LossKind::SoftmaxCrossEntropy);
    const Model built = b.build();
    const Model json = load_model("resnet18");
    expect_same_model(built, json);
    expect_same_shapes(built, json, 57, 33);
}

TEST(Builder, UnetMatchesJson) {
    ModelBuilder b("unet", 3);
    auto block = [&](const std::string &n, int ch) {
        b.conv2d(n + ".0", ch, 3).padding(1).relu(n + ".1").conv2d(n + ".2", ch, 3).padding(1).relu(n + ".3");
    };
    block("enc1", 16);
    b.max_pool("pool1", 2);
    block("enc2", 32);
    b.max_pool("pool2", 2);
    block("mid", 64);
    b.upsample("up2", 2).concat("cat2", {"up2", "enc2.3"});
    block("dec2", 32);
    b.upsample("up1").concat("cat1", {"up1", "enc1.3"});
    block("dec1", 16);
    b.conv2d("head", 1, 1).loss(LossKind::MeanSquaredError);
    const Model built = b.build();
    const Model json = load_model("unet");
    expect_same_model(built, json);
    expect_same_shapes(built, json, 24, 20);
}

TEST(Builder, Darknet19HeadAndParamPrefixesMatchJson) {
    ModelBuilder b("darknet19", 3);
    const int cfg[][2] = {{32, 3},  {0, 0},    {64, 3},   {0, 0},    {128, 3},  {64, 1},   {128, 3},  {0, 0},
                          {256, 3}, {128, 1},  {256, 3},  {0, 0},    {512, 3},  {256, 1},  {512, 3},  {256, 1},
                          {512, 3}, {0, 0},    {1024, 3}, {512, 1},  {1024, 3}, {512, 1},  {1024, 3}};
    int idx = 0, conv = 0, pool = 0;
    for (const auto &c : cfg) {
        if (c[0] == 0) {
            b.max_pool("pool" + std::to_string(++pool), 2).stride(2);
            idx++;
            continue;
        }
        conv++;
        b.conv2d("conv" + std::to_string(conv), c[0], c[1]).padding(c[1] / 2).bias(false)
            .params("features." + std::to_string(idx));
        b.batch_norm("bn" + std::to_string(conv)).params("features." + std::to_string(idx + 1));
        b.leaky_relu("lrelu" + std::to_string(conv), 0.1);
        idx += 3;
    }
    b.conv2d("conv19", 2, 1).params("classifier").global_avg_pool("gap").flatten("flatten");
    b.loss(LossKind::SoftmaxCrossEntropy);
    const Model built = b.build();
    const Model json = load_model("darknet19");
    expect_same_model(built, json);
    expect_same_shapes(built, json, 96, 64);
}

TEST(Builder, ErrorsNameTheLayer) {
    const std::string e = error_of([] {
        ModelBuilder("net", 3).conv2d("a", 8, 3).conv2d("b", 16, 3).inputs({"input"}).add("sum", {"a", "b"}).build();
    });
    EXPECT_THAT(e, HasSubstr("<builder>"));
    EXPECT_THAT(e, HasSubstr("layer 'sum'"));
    EXPECT_THAT(e, HasSubstr("channel mismatch"));
}

// The layer-kind table (spec/layer_kinds.cpp) is consistent: rows in enum
// order with unique names, every field a row lists is a Layer field, and
// every example parses as the first layer and between two convs.
TEST(LayerKindTable, RowsAreConsistent) {
    std::set<std::string> names;
    for (size_t i = 0; i < layer_kinds().size(); i++) {
        const LayerKindInfo &k = layer_kinds()[i];
        SCOPED_TRACE(k.name);
        EXPECT_EQ((size_t)k.kind, i);
        EXPECT_EQ(&kind_info(k.kind), &k);
        EXPECT_TRUE(names.insert(k.name).second) << "duplicate name";
        EXPECT_EQ(layer_kind_from_string(k.name), k.kind);
        for (const auto *fields : {&k.required, &k.optional})
            for (const std::string &f : *fields) EXPECT_NE(find_layer_field(f), nullptr) << "field " << f;
        EXPECT_FALSE(k.global && k.joins);
        if (k.global) continue;
        for (bool between : {false, true}) {
            const Model m = segtile::testing::example_model(k, between);
            const Layer &l = m.layers[m.find_layer("k")];
            EXPECT_EQ(l.kind, k.kind);
            // An example sets every required field (the parser checks) and its output has pixels.
            const auto shapes = m.shapes(13, 11);
            EXPECT_GT(shapes[m.find_layer("k")].width, 0);
        }
    }
    EXPECT_EQ(to_string(LayerKind::Conv2d), std::string("conv2d"));
}

// ModelBuilder::set reaches any field by its JSON name, and refuses others.
TEST(LayerKindTable, BuilderSetsFieldsByName) {
    const Model m = ModelBuilder("t", 2)
                        .layer(LayerKind::AvgPool, "pool").set("kernel", 3).set("padding", 1)
                        .layer(LayerKind::LeakyRelu, "act").set("negative_slope", 0.25)
                        .loss(LossKind::MeanSquaredError)
                        .build();
    EXPECT_EQ(m.layers[0].kernel, 3);
    EXPECT_EQ(m.layers[0].stride, 3);  // a pool's stride defaults to its kernel
    EXPECT_EQ(m.layers[0].padding, 1);
    EXPECT_DOUBLE_EQ(m.layers[1].negative_slope, 0.25);
    EXPECT_THROW(ModelBuilder("t", 2).relu("r").set("kernal", 3), ModelError);
}

}  // namespace
}  // namespace segtile
