// Single-layer models shared by the layer suites (forward against naive
// loops, gradients against finite differences), and the random conv
// configurations both draw from a fixed seed.
#pragma once

#include <array>
#include <random>
#include <string>
#include <vector>

#include "spec/builder.h"
#include "spec/layer_kinds.h"

namespace segtile::testing {

inline ModelBuilder net(int cin) { return ModelBuilder("t", cin); }

inline Model conv_model(int cin, int cout, int k, int s, int p, int d, int g, bool bias) {
    return net(cin).conv2d("conv", cout, k).stride(s).padding(p).dilation(d).groups(g).bias(bias)
        .loss(LossKind::MeanSquaredError).build();
}

inline Model pool_model(bool is_max, int cin, int k, int s, int p) {
    ModelBuilder b = net(cin);
    (is_max ? b.max_pool("pool", k) : b.avg_pool("pool", k)).stride(s).padding(p);
    return b.loss(LossKind::MeanSquaredError).build();
}

// A model from a layer kind's row (spec/layer_kinds.cpp) and its example
// fields: input (3 channels) -> [kind] -> mse, or with `between_convs`
// conv "pre" -> [kind] -> conv "post" -> mse. A join reads the image and
// its predecessor. The table-generated cases of every suite build these.
inline Model example_model(const LayerKindInfo &k, bool between_convs) {
    const std::string prev = between_convs ? "pre" : "input";
    std::string layers;
    if (between_convs) layers += R"({"name": "pre", "type": "conv2d", "out_channels": 3, "kernel": 3, "padding": 1}, )";
    layers += std::string(R"({"name": "k", "type": ")") + k.name + "\"";
    if (*k.example) layers += std::string(", ") + k.example;
    if (k.joins) layers += R"(, "inputs": [")" + prev + R"(", "input"])";
    layers += "}";
    if (between_convs) layers += R"(, {"name": "post", "type": "conv2d", "out_channels": 2, "kernel": 3, "padding": 1})";
    const std::string name = std::string("example_") + k.name + (between_convs ? "_between_convs" : "");
    return parse_model_json(R"({"name": ")" + name + R"(", "input_channels": 3, "layers": [)" + layers +
                                R"(], "loss": {"type": "mse"}})",
                            "spec/layer_kinds.cpp example of " + std::string(k.name));
}

// The kinds the table-generated cases cover: every local kind (the global
// ones form the untiled head; their cases are written out).
inline std::vector<LayerKindInfo> local_kinds() {
    std::vector<LayerKindInfo> out;
    for (const LayerKindInfo &k : layer_kinds())
        if (!k.global) out.push_back(k);
    return out;
}

struct ConvConfig {
    std::string name;
    int cin, cout, k, s, p, d, g;
    bool bias;
    std::vector<std::array<int, 3>> sizes;  // {width, height, batch}
};

// `count` random conv configurations: kernels up to max_k, output channels
// up to max_cout_per_group per group, images up to `slack` pixels larger
// than the smallest legal one.
inline std::vector<ConvConfig> random_conv_configs(int count, unsigned seed, int max_k, int max_cout_per_group,
                                                   int slack) {
    std::mt19937 rng(seed);
    auto pick = [&](std::vector<int> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
    auto upto = [](int n) {
        std::vector<int> v;
        for (int i = 1; i <= n; i++) v.push_back(i);
        return v;
    };
    std::vector<ConvConfig> out;
    for (int i = 0; i < count; i++) {
        const int g = pick({1, 1, 2, 3});
        const int cin = g * pick({1, 2}), cout = g * pick(upto(max_cout_per_group));
        const int k = pick(upto(max_k)), s = pick({1, 2, 3}), p = pick({0, 1, 2}), d = pick({1, 2});
        const bool bias = pick({0, 1});
        const int span = std::max(d * (k - 1) + 1 - 2 * p, 1);
        std::vector<int> extra;
        for (int e = 0; e <= slack; e++) extra.push_back(e);
        auto size = [&] { return span + pick(extra); };
        std::vector<std::array<int, 3>> sizes = {{size(), size(), pick({1, 2})}, {size(), size(), 1}};
        std::string name = "conv_random" + std::to_string(i) + "_ci" + std::to_string(cin) + "_co" +
                           std::to_string(cout) + "_k" + std::to_string(k) + "_s" + std::to_string(s) + "_p" +
                           std::to_string(p) + "_d" + std::to_string(d) + "_g" + std::to_string(g) +
                           (bias ? "_bias" : "_nobias");
        out.push_back({name, cin, cout, k, s, p, d, g, bias, sizes});
    }
    return out;
}

}  // namespace segtile::testing
