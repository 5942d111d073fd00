// Single-layer models shared by the layer suites (forward against naive
// loops, gradients against finite differences), and the random conv
// configurations both draw from a fixed seed.
#pragma once

#include <array>
#include <random>
#include <string>
#include <vector>

#include "spec/builder.h"

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
