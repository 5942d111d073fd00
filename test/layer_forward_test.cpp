// Forward pass of every layer kind and both losses against naive C++ loops
// written independently of Halide (plain nested loops over std::vector),
// on random shapes: odd sizes, stride 2, dilation 2, padding 0/1/2, groups.
//
// Each configuration is a tiny model (usually input -> layer -> loss) run
// through JitTrainingStep; its `prediction` (the loss layer's input) and
// `loss` are compared with a naive interpreter of the same Model below. The
// interpreter reads only the hyperparameters from the Model; it computes
// output sizes, padding and index maps on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <memory>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "Halide.h"
#include "generators/training_step.h"
#include "spec/builder.h"
#include "spec/model.h"
#include "test/layer_cases.h"
#include "test/test_support.h"

namespace segtile {
namespace {

using Halide::Buffer;

// A dense (x, y, c, n) tensor, x innermost: PyTorch's NCHW in memory.
struct Tensor {
    int W = 0, H = 0, C = 0, N = 0;
    std::vector<double> v;
    Tensor() = default;
    Tensor(int w, int h, int c, int n) : W(w), H(h), C(c), N(n), v((size_t)w * h * c * n, 0.0) {}
    double &at(int x, int y, int c, int n) { return v[(((size_t)n * C + c) * H + y) * W + x]; }
    double at(int x, int y, int c, int n) const { return v[(((size_t)n * C + c) * H + y) * W + x]; }
};

// Element (i0, i1, ...) of a parameter or image buffer, whatever its type.
double element(const Buffer<> &b, const std::vector<int> &pos) {
    if (b.type() == Halide::Float(64)) return Buffer<double>(b)(pos.data());
    return Buffer<float>(b)(pos.data());
}

Tensor tensor_from(const Buffer<> &b) {
    Tensor t(b.dim(0).extent(), b.dim(1).extent(), b.dim(2).extent(), b.dim(3).extent());
    for (int n = 0; n < t.N; n++)
        for (int c = 0; c < t.C; c++)
            for (int y = 0; y < t.H; y++)
                for (int x = 0; x < t.W; x++) t.at(x, y, c, n) = element(b, {x, y, c, n});
    return t;
}

// Flat copy of a parameter in its memory order (Halide dims, innermost first).
std::vector<double> flat(const Buffer<> &b) {
    std::vector<double> out;
    const int d = b.dimensions();
    std::vector<int> pos(d, 0);
    size_t total = 1;
    for (int i = 0; i < d; i++) total *= b.dim(i).extent();
    for (size_t k = 0; k < total; k++) {
        size_t r = k;
        for (int i = 0; i < d; i++) {
            pos[i] = (int)(r % b.dim(i).extent());
            r /= b.dim(i).extent();
        }
        out.push_back(element(b, pos));
    }
    return out;
}

// ---- Naive layers -------------------------------------------------------

// PyTorch Conv2d: weight OIHW [co][ci][ky][kx], zero padding.
Tensor naive_conv(const Tensor &in, const std::vector<double> &w, const std::vector<double> *b, int cout, int k,
                  int s, int p, int d, int groups) {
    const int cin_g = in.C / groups, cout_g = cout / groups;
    const int OW = (in.W + 2 * p - d * (k - 1) - 1) / s + 1, OH = (in.H + 2 * p - d * (k - 1) - 1) / s + 1;
    Tensor out(OW, OH, cout, in.N);
    for (int n = 0; n < in.N; n++)
        for (int co = 0; co < cout; co++) {
            const int g = co / cout_g;
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    double acc = b ? (*b)[co] : 0.0;
                    for (int ci = 0; ci < cin_g; ci++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                const int iy = oy * s - p + ky * d, ix = ox * s - p + kx * d;
                                if (iy < 0 || iy >= in.H || ix < 0 || ix >= in.W) continue;
                                const double wv = w[(((size_t)co * cin_g + ci) * k + ky) * k + kx];
                                acc += wv * in.at(ix, iy, g * cin_g + ci, n);
                            }
                    out.at(ox, oy, co, n) = acc;
                }
        }
    return out;
}

// PyTorch ConvTranspose2d (groups 1): every input pixel scatters its taps,
// w in PyTorch's (in, out, kH, kW) order.
Tensor naive_conv_transpose(const Tensor &in, const std::vector<double> &w, const std::vector<double> *b, int cout,
                            int k, int s, int p, int op, int d) {
    const int OW = (in.W - 1) * s - 2 * p + d * (k - 1) + op + 1, OH = (in.H - 1) * s - 2 * p + d * (k - 1) + op + 1;
    Tensor out(OW, OH, cout, in.N);
    for (int n = 0; n < in.N; n++)
        for (int co = 0; co < cout; co++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) out.at(ox, oy, co, n) = b ? (*b)[co] : 0.0;
    for (int n = 0; n < in.N; n++)
        for (int ci = 0; ci < in.C; ci++)
            for (int iy = 0; iy < in.H; iy++)
                for (int ix = 0; ix < in.W; ix++)
                    for (int co = 0; co < cout; co++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                const int ox = ix * s - p + kx * d, oy = iy * s - p + ky * d;
                                if (ox < 0 || ox >= OW || oy < 0 || oy >= OH) continue;
                                out.at(ox, oy, co, n) +=
                                    w[(((size_t)ci * cout + co) * k + ky) * k + kx] * in.at(ix, iy, ci, n);
                            }
    return out;
}

// PyTorch MaxPool2d / AvgPool2d (ceil_mode=False; avg: count_include_pad=True).
Tensor naive_pool(const Tensor &in, bool is_max, int k, int s, int p) {
    const int OW = (in.W + 2 * p - k) / s + 1, OH = (in.H + 2 * p - k) / s + 1;
    Tensor out(OW, OH, in.C, in.N);
    for (int n = 0; n < in.N; n++)
        for (int c = 0; c < in.C; c++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    double m = -std::numeric_limits<double>::infinity(), sum = 0;
                    // Window clipped to the padded input, as PyTorch's divisor (always k*k here).
                    const int y0 = oy * s - p, x0 = ox * s - p;
                    const int y1 = std::min(y0 + k, in.H + p), x1 = std::min(x0 + k, in.W + p);
                    for (int iy = y0; iy < y1; iy++)
                        for (int ix = x0; ix < x1; ix++) {
                            if (iy < 0 || iy >= in.H || ix < 0 || ix >= in.W) continue;  // -inf / zero pad
                            m = std::max(m, in.at(ix, iy, c, n));
                            sum += in.at(ix, iy, c, n);
                        }
                    out.at(ox, oy, c, n) = is_max ? m : sum / ((y1 - y0) * (x1 - x0));
                }
    return out;
}

Tensor pointwise(const Tensor &in, const std::function<double(double)> &f) {
    Tensor out = in;
    for (double &x : out.v) x = f(x);
    return out;
}

Tensor naive_batch_norm(const Tensor &in, const std::vector<double> &gamma, const std::vector<double> &beta,
                        const std::vector<double> &mean, const std::vector<double> &var, double eps) {
    Tensor out = in;
    for (int n = 0; n < in.N; n++)
        for (int c = 0; c < in.C; c++)
            for (int y = 0; y < in.H; y++)
                for (int x = 0; x < in.W; x++)
                    out.at(x, y, c, n) = (in.at(x, y, c, n) - mean[c]) / std::sqrt(var[c] + eps) * gamma[c] + beta[c];
    return out;
}

Tensor naive_upsample(const Tensor &in, int f) {
    Tensor out(in.W * f, in.H * f, in.C, in.N);
    for (int n = 0; n < in.N; n++)
        for (int c = 0; c < in.C; c++)
            for (int y = 0; y < out.H; y++)
                for (int x = 0; x < out.W; x++) out.at(x, y, c, n) = in.at(x / f, y / f, c, n);
    return out;
}

Tensor naive_concat(const std::vector<const Tensor *> &ins) {
    int C = 0;
    for (auto *t : ins) C += t->C;
    Tensor out(ins[0]->W, ins[0]->H, C, ins[0]->N);
    for (int n = 0; n < out.N; n++) {
        int co = 0;
        for (auto *t : ins)
            for (int c = 0; c < t->C; c++, co++)
                for (int y = 0; y < out.H; y++)
                    for (int x = 0; x < out.W; x++) out.at(x, y, co, n) = t->at(x, y, c, n);
    }
    return out;
}

Tensor naive_add(const std::vector<const Tensor *> &ins) {
    Tensor out = *ins[0];
    for (size_t i = 1; i < ins.size(); i++)
        for (size_t k = 0; k < out.v.size(); k++) out.v[k] += ins[i]->v[k];
    return out;
}

Tensor naive_global_avg_pool(const Tensor &in) {
    Tensor out(1, 1, in.C, in.N);
    for (int n = 0; n < in.N; n++)
        for (int c = 0; c < in.C; c++) {
            double s = 0;
            for (int y = 0; y < in.H; y++)
                for (int x = 0; x < in.W; x++) s += in.at(x, y, c, n);
            out.at(0, 0, c, n) = s / (in.W * in.H);
        }
    return out;
}

// torch.flatten(x, 1): feature f = (c * H + h) * W + w.
Tensor naive_flatten(const Tensor &in) {
    Tensor out(1, 1, in.C * in.H * in.W, in.N);
    for (int n = 0; n < in.N; n++)
        for (int c = 0; c < in.C; c++)
            for (int h = 0; h < in.H; h++)
                for (int w = 0; w < in.W; w++) out.at(0, 0, (c * in.H + h) * in.W + w, n) = in.at(w, h, c, n);
    return out;
}

// torch.nn.Linear: weight (out, in) row-major.
Tensor naive_dense(const Tensor &in, const std::vector<double> &w, const std::vector<double> *b, int out_f) {
    const int in_f = in.C;
    Tensor out(1, 1, out_f, in.N);
    for (int n = 0; n < in.N; n++)
        for (int o = 0; o < out_f; o++) {
            double acc = b ? (*b)[o] : 0.0;
            for (int i = 0; i < in_f; i++) acc += w[(size_t)o * in_f + i] * in.at(0, 0, i, n);
            out.at(0, 0, o, n) = acc;
        }
    return out;
}

double naive_mse(const Tensor &pred, const Tensor &target) {
    double s = 0;
    for (size_t k = 0; k < pred.v.size(); k++) s += (pred.v[k] - target.v[k]) * (pred.v[k] - target.v[k]);
    return s / pred.v.size();
}

// torch.nn.CrossEntropyLoss on logits (1, 1, K, N), mean over the batch.
double naive_cross_entropy(const Tensor &logits, const std::vector<int> &labels) {
    double total = 0;
    for (int n = 0; n < logits.N; n++) {
        double m = -std::numeric_limits<double>::infinity();
        for (int k = 0; k < logits.C; k++) m = std::max(m, logits.at(0, 0, k, n));
        double se = 0;
        for (int k = 0; k < logits.C; k++) se += std::exp(logits.at(0, 0, k, n) - m);
        total += std::log(se) + m - logits.at(0, 0, labels[n], n);
    }
    return total / logits.N;
}

// Runs the model's layers 0..loss input naively.
Tensor naive_forward(const Model &m, const Tensor &image, const std::vector<Buffer<>> &params) {
    const auto specs = m.params();
    std::vector<Tensor> out(m.layers.size());
    for (int i = 0; i <= m.loss.input_id; i++) {
        const Layer &l = m.layers[i];
        std::vector<const Tensor *> ins;
        for (int id : l.input_ids) ins.push_back(id < 0 ? &image : &out[id]);
        std::vector<std::vector<double>> p;
        for (size_t k = 0; k < specs.size(); k++)
            if (specs[k].layer == i) p.push_back(flat(params[k]));
        const Tensor &a = *ins[0];
        switch (l.kind) {
        case LayerKind::Conv2d:
            out[i] = naive_conv(a, p[0], l.bias ? &p[1] : nullptr, l.out_channels, l.kernel, l.stride, l.padding,
                                l.dilation, l.groups);
            break;
        case LayerKind::Relu: out[i] = pointwise(a, [](double x) { return x > 0 ? x : 0.0; }); break;
        case LayerKind::LeakyRelu: {
            const double s = l.negative_slope;
            out[i] = pointwise(a, [s](double x) { return x > 0 ? x : s * x; });
            break;
        }
        case LayerKind::Sigmoid: out[i] = pointwise(a, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }); break;
        case LayerKind::MaxPool: out[i] = naive_pool(a, true, l.kernel, l.stride, l.padding); break;
        case LayerKind::AvgPool: out[i] = naive_pool(a, false, l.kernel, l.stride, l.padding); break;
        case LayerKind::BatchNorm: out[i] = naive_batch_norm(a, p[0], p[1], p[2], p[3], l.eps); break;
        case LayerKind::Upsample: out[i] = naive_upsample(a, l.factor); break;
        case LayerKind::Concat: out[i] = naive_concat(ins); break;
        case LayerKind::Add: out[i] = naive_add(ins); break;
        case LayerKind::GlobalAvgPool: out[i] = naive_global_avg_pool(a); break;
        case LayerKind::Flatten: out[i] = naive_flatten(a); break;
        case LayerKind::Dense: out[i] = naive_dense(a, p[0], l.bias ? &p[1] : nullptr, l.out_features); break;
        case LayerKind::Silu: out[i] = pointwise(a, [](double x) { return x / (1.0 + std::exp(-x)); }); break;
        case LayerKind::ConvTranspose2d:
            out[i] = naive_conv_transpose(a, p[0], l.bias ? &p[1] : nullptr, l.out_channels, l.kernel, l.stride,
                                          l.padding, l.output_padding, l.dilation);
            break;
        }
    }
    return out[m.loss.input_id];
}

// ---- Configurations -----------------------------------------------------

struct Case {
    std::string name;
    std::function<Model()> model;
    bool float32 = false;
    // Image sizes (width, height) to run the one compiled kernel on; batch per size.
    std::vector<std::array<int, 3>> sizes;  // {width, height, batch}
};

std::ostream &operator<<(std::ostream &os, const Case &c) { return os << c.name; }

using LK = LossKind;

using segtile::testing::net;

Case conv_case(const std::string &name, int cin, int cout, int k, int s, int p, int d, int g, bool bias,
               std::vector<std::array<int, 3>> sizes, bool f32 = false) {
    return {name,
            [=] { return segtile::testing::conv_model(cin, cout, k, s, p, d, g, bias); },
            f32, sizes};
}

Case conv_transpose_case(const std::string &name, int cin, int cout, int k, int s, int p, int op, int d, bool bias,
                         std::vector<std::array<int, 3>> sizes) {
    return {name,
            [=] {
                return net(cin).layer(LayerKind::ConvTranspose2d, "up").set("out_channels", cout).set("kernel", k)
                    .stride(s).padding(p).set("output_padding", op).dilation(d).bias(bias)
                    .loss(LK::MeanSquaredError).build();
            },
            false, sizes};
}

Case pool_case(const std::string &name, bool is_max, int cin, int k, int s, int p,
               std::vector<std::array<int, 3>> sizes, bool f32 = false) {
    return {name,
            [=] { return segtile::testing::pool_model(is_max, cin, k, s, p); },
            f32, sizes};
}

// Random conv configurations from a fixed seed, on top of the hand-picked ones.
std::vector<Case> random_conv_cases(int count, unsigned seed) {
    std::vector<Case> out;
    for (const auto &c : segtile::testing::random_conv_configs(count, seed, 5, 3, 7))
        out.push_back(conv_case(c.name, c.cin, c.cout, c.k, c.s, c.p, c.d, c.g, c.bias, c.sizes));
    return out;
}

std::vector<Case> all_cases() {
    std::vector<Case> c = {
        // conv2d: stride 2, dilation 2, padding 0/1/2, groups, with and without bias, odd sizes.
        conv_case("conv_k3_s1_p1", 3, 4, 3, 1, 1, 1, 1, true, {{7, 5, 2}, {4, 9, 1}}),
        conv_case("conv_k3_s2_p0_nobias", 2, 3, 3, 2, 0, 1, 1, false, {{9, 7, 1}, {10, 3, 2}}),
        conv_case("conv_k3_s1_p2_d2", 2, 2, 3, 1, 2, 2, 1, true, {{5, 6, 1}, {11, 7, 2}}),
        conv_case("conv_k5_s2_p2_g2", 4, 6, 5, 2, 2, 1, 2, true, {{9, 9, 1}, {6, 13, 2}}),
        conv_case("conv_k3_s2_p1_d2_depthwise", 3, 3, 3, 2, 1, 2, 3, true, {{7, 8, 2}, {13, 5, 1}}),
        conv_case("conv_k1_g3_nobias", 6, 3, 1, 1, 0, 1, 3, false, {{3, 5, 2}, {1, 1, 1}}),
        conv_case("conv_k2_s2_p1_f32", 3, 5, 2, 2, 1, 1, 1, true, {{7, 9, 2}, {8, 5, 1}}, true),
        conv_case("conv_k3_s2_p1_d2_g2_f32", 4, 4, 3, 2, 1, 2, 2, true, {{11, 9, 1}, {6, 7, 2}}, true),
        // Pointwise activations.
        {"relu", [] { return net(3).relu("act").loss(LK::MeanSquaredError).build(); }, false, {{7, 5, 2}, {3, 4, 1}}},
        {"leaky_relu",
         [] { return net(2).leaky_relu("act", 0.2).loss(LK::MeanSquaredError).build(); },
         false,
         {{5, 7, 2}, {6, 1, 1}}},
        {"sigmoid", [] { return net(3).sigmoid("act").loss(LK::MeanSquaredError).build(); }, false, {{7, 3, 1}, {4, 5, 2}}},
        {"sigmoid_f32", [] { return net(2).sigmoid("act").loss(LK::MeanSquaredError).build(); }, true, {{9, 3, 2}}},
        // Pools.
        pool_case("max_pool_k2", true, 2, 2, 2, 0, {{7, 9, 2}, {8, 4, 1}}),
        pool_case("max_pool_k3_s2_p1", true, 3, 3, 2, 1, {{9, 7, 1}, {6, 11, 2}}),
        // (kernel 5 is left out for time: Halide takes ~40 s to compile its nested-max autodiff.)
        pool_case("max_pool_k4_s3_p2", true, 2, 4, 3, 2, {{11, 8, 2}, {4, 7, 1}}),
        pool_case("avg_pool_k2", false, 2, 2, 2, 0, {{9, 5, 2}, {4, 6, 1}}),
        pool_case("avg_pool_k3_s2_p1", false, 3, 3, 2, 1, {{7, 9, 1}, {10, 5, 2}}),
        pool_case("avg_pool_k5_s3_p2", false, 2, 5, 3, 2, {{11, 8, 1}, {7, 13, 2}}),
        pool_case("avg_pool_k3_s1_p1_f32", false, 2, 3, 1, 1, {{7, 6, 2}}, true),
        // Frozen batch norm, with a large eps so a missing eps shows.
        {"batch_norm",
         [] { return net(3).batch_norm("bn", 0.1).loss(LK::MeanSquaredError).build(); },
         false,
         {{5, 7, 2}, {8, 3, 1}}},
        {"batch_norm_f32",
         [] { return net(4).batch_norm("bn").loss(LK::MeanSquaredError).build(); },
         true,
         {{7, 5, 2}}},
        // Upsample.
        {"upsample_x2", [] { return net(2).upsample("up", 2).loss(LK::MeanSquaredError).build(); }, false, {{5, 3, 2}, {4, 7, 1}}},
        {"upsample_x3", [] { return net(3).upsample("up", 3).loss(LK::MeanSquaredError).build(); }, false, {{3, 5, 1}, {2, 2, 2}}},
        // Joins: inputs of different channel counts, in a given order.
        {"concat_conv_input_conv",
         [] {
             return net(3)
                 .conv2d("a", 2, 3).padding(1).inputs({"input"})
                 .conv2d("b", 1, 1).inputs({"input"})
                 .concat("cat", {"a", "input", "b"})
                 .loss(LK::MeanSquaredError)
                 .build();
         },
         false,
         {{7, 5, 2}, {4, 9, 1}}},
        {"concat_input_twice",
         [] { return net(2).concat("cat", {"input", "input"}).loss(LK::MeanSquaredError).build(); },
         false,
         {{5, 5, 1}}},
        {"add_input_conv_conv",
         [] {
             return net(3)
                 .conv2d("a", 3, 3).padding(1).inputs({"input"})
                 .conv2d("b", 3, 1).bias(false).inputs({"input"})
                 .add("sum", {"input", "a", "b"})
                 .loss(LK::MeanSquaredError)
                 .build();
         },
         false,
         {{7, 6, 2}, {5, 9, 1}}},
        {"silu", [] { return net(3).layer(LayerKind::Silu, "act").loss(LK::MeanSquaredError).build(); }, false,
         {{5, 4, 2}, {3, 7, 1}}},
        // Transposed convolutions: strides 1 to 3, output padding, dilation, no bias.
        conv_transpose_case("conv_transpose_k3_s2_p1_op1", 3, 2, 3, 2, 1, 1, 1, true, {{5, 4, 2}, {3, 6, 1}}),
        conv_transpose_case("conv_transpose_k4_s2_p1", 2, 3, 4, 2, 1, 0, 1, true, {{4, 5, 1}, {6, 3, 2}}),
        conv_transpose_case("conv_transpose_k3_s1_p0_nobias", 2, 2, 3, 1, 0, 0, 1, false, {{5, 4, 1}}),
        conv_transpose_case("conv_transpose_k2_s3_p0_d2_op1", 2, 2, 2, 3, 0, 1, 2, true, {{4, 3, 1}, {2, 5, 2}}),
        conv_transpose_case("conv_transpose_k3_s2_p2_d2", 2, 3, 3, 2, 2, 0, 2, true, {{5, 6, 1}}),
        // Heads.
        {"global_avg_pool", [] { return net(3).global_avg_pool("gap").loss(LK::MeanSquaredError).build(); }, false,
         {{7, 5, 2}, {4, 9, 3}}},
        // Flatten order seen through dense weights; 5x3 and 3x5 give the same feature count, another order.
        {"flatten_dense_mse",
         [] { return net(2).flatten("flat").dense("fc", 4).in_features(2 * 5 * 3).loss(LK::MeanSquaredError).build(); },
         false,
         {{5, 3, 2}, {3, 5, 1}}},
        {"flatten_dense_softmax_ce",
         [] {
             return net(2).flatten("flat").dense("fc", 5).in_features(2 * 3 * 5)
                 .loss(LK::SoftmaxCrossEntropy).build();
         },
         false,
         {{3, 5, 3}}},
        {"gap_dense_nobias_mse",
         [] { return net(4).global_avg_pool("gap").dense("fc", 3).bias(false).loss(LK::MeanSquaredError).build(); },
         false,
         {{5, 7, 2}, {6, 3, 1}}},
        {"gap_softmax_ce_f32",
         [] { return net(5).global_avg_pool("gap").loss(LK::SoftmaxCrossEntropy).build(); },
         true,
         {{7, 3, 4}}},
        // A short chain: conv -> batch norm -> relu -> max pool -> upsample -> concat with the conv.
        {"chain_conv_bn_relu_pool_up_cat",
         [] {
             return net(2)
                 .conv2d("conv", 3, 3).padding(1)
                 .batch_norm("bn")
                 .relu("relu")
                 .max_pool("pool", 2)
                 .upsample("up", 2)
                 .concat("cat", {"up", "conv"})
                 .loss(LK::MeanSquaredError)
                 .build();
         },
         false,
         {{8, 6, 2}}},
    };
    for (auto &r : random_conv_cases(4, 20240611)) c.push_back(r);
    return c;
}

// ---- The test -------------------------------------------------------------

class LayerForward : public ::testing::TestWithParam<Case> {};

Buffer<> as_type(const Buffer<double> &b, Halide::Type t) {
    if (t == Halide::Float(64)) return b;
    std::vector<int> dims;
    for (int i = 0; i < b.dimensions(); i++) dims.push_back(b.dim(i).extent());
    Buffer<float> f(dims);
    f.for_each_element([&](const int *pos) { f(pos) = (float)b(pos); });
    return f;
}

TEST_P(LayerForward, MatchesNaiveLoops) {
    const Case &cs = GetParam();
    const Model m = cs.model();
    const Halide::Type t = cs.float32 ? Halide::Float(32) : Halide::Float(64);
    // float32: relative error 1e-5 (sums of up to ~100 products); float64: 1e-12.
    const double tol = cs.float32 ? 1e-5 : 1e-12;
    uint32_t seed = 2166136261u;  // FNV-1a of the case name: a fixed seed per case
    for (char ch : cs.name) seed = (seed ^ (uint8_t)ch) * 16777619u;
    std::mt19937 rng(seed);

    std::unique_ptr<JitTrainingStep> step;
    try {
        step = std::make_unique<JitTrainingStep>(m, t);
    } catch (const Halide::Error &e) {
        FAIL() << "Halide error building " << cs.name << ": " << e.what();
    }
    ASSERT_FALSE(cs.sizes.empty());
    for (const auto &[W, H, N] : cs.sizes) {
        SCOPED_TRACE(cs.name + " at image " + std::to_string(W) + "x" + std::to_string(H) + " batch " +
                     std::to_string(N));
        const int C = m.input_channels;
        auto image = as_type(testing::random_buffer({W, H, C, N}, rng), t);
        std::vector<Buffer<>> params;
        for (auto &p : testing::random_params(m, rng)) params.push_back(as_type(p, t));
        Buffer<> lt = testing::random_labels_or_target(m, W, H, N, rng);
        if (lt.type() == Halide::Float(64)) lt = as_type(Buffer<double>(lt), t);

        JitTrainingStep::Result r;
        try {
            r = step->run(image, lt, params);
        } catch (const Halide::Error &e) {
            FAIL() << "Halide error: " << e.what();
        }
        const Tensor ref = naive_forward(m, tensor_from(image), params);
        const Buffer<> &pred = r.prediction;
        ASSERT_EQ(pred.dimensions(), 4);
        ASSERT_EQ(pred.dim(0).extent(), ref.W);
        ASSERT_EQ(pred.dim(1).extent(), ref.H);
        ASSERT_EQ(pred.dim(2).extent(), ref.C);
        ASSERT_EQ(pred.dim(3).extent(), ref.N);
        ASSERT_GT(ref.v.size(), 0u);
        int bad = 0;
        double worst = 0;
        for (int n = 0; n < ref.N; n++)
            for (int c = 0; c < ref.C; c++)
                for (int y = 0; y < ref.H; y++)
                    for (int x = 0; x < ref.W; x++) {
                        const double got = element(pred, {x, y, c, n}), want = ref.at(x, y, c, n);
                        const double err = std::abs(got - want) / std::max(1.0, std::abs(want));
                        worst = std::max(worst, err);
                        if (!(err <= tol) && bad++ < 5)
                            ADD_FAILURE() << "prediction(" << x << ", " << y << ", " << c << ", " << n
                                          << ") = " << got << ", naive " << want;
                    }
        EXPECT_EQ(bad, 0) << "mismatching elements; worst relative error " << worst;

        double want_loss;
        if (m.loss.kind == LossKind::MeanSquaredError) {
            want_loss = naive_mse(ref, tensor_from(lt));
        } else {
            std::vector<int> labels;
            Buffer<int> lb(lt);
            for (int n = 0; n < N; n++) labels.push_back(lb(n));
            want_loss = naive_cross_entropy(ref, labels);
        }
        EXPECT_LE(std::abs(r.loss - want_loss) / std::max(1.0, std::abs(want_loss)), tol)
            << "loss " << r.loss << ", naive " << want_loss;
    }
}

// Known bug, kept runnable with --gtest_also_run_disabled_tests: a loss placed
// directly on a flatten layer sizes its reduction by Model::output_channels(),
// which for flatten is the input's channel count (the true feature count,
// C*H*W, depends on the run-time image size). The mse loss then averages only
// the first C features (divided by C*N); a softmax loss would use C classes.
// A loss on flatten would be sized by channels, not by the image-dependent
// length: the model is rejected with a message saying what to add.
TEST(LayerForwardModels, LossDirectlyOnFlattenIsRejected) {
    try {
        net(3).flatten("flat").loss(LK::MeanSquaredError).build();
        FAIL() << "expected ModelError";
    } catch (const ModelError &e) {
        EXPECT_NE(std::string(e.what()).find("flat"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("add a dense layer"), std::string::npos) << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, LayerForward, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

}  // namespace
}  // namespace segtile
