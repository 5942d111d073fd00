// Random models for the robustness suite (test/random_models_test.cpp):
// small valid networks drawn from a seed, with the image sizes and memory
// caps to try them at. Chains and DAGs (residual adds of two or three
// branches, channel concats, U-Net-style pool/upsample/concat skips),
// conv kernels 1/3/5/7 with stride 1/2, dilation 1/2, groups (depthwise
// included) and zero padding of every width (none, "same", anything in
// between and a little beyond), max and average pools with and without
// padding, nearest upsampling, frozen batch norm, relu/leaky_relu/sigmoid,
// and five heads: global pooling into one or two dense layers, a 1x1 conv
// into global pooling (Darknet's), flatten of a whole map into a dense
// layer (fixed image size), a per-pixel mse map and a dense mse regression.
// Only kinds and fields of the model format (docs/models.md) are used; the
// model is written as JSON and read back with parse_model_json, so every
// draw also goes through the parser. Plain C++ (spec/ and nlohmann only).
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "spec/model.h"

namespace segtile::random_models {

// How a draw's memory cap is chosen, relative to the smallest feasible cap
// S the planner names for the model and size (found by asking for 1 byte)
// and the peak P of its uncapped plan.
struct CapSpec {
    enum Kind {
        Below,     // S * frac (frac < 1): the planner must refuse it with its PlanError
        Smallest,  // S exactly: it must plan, and run under it
        Between,   // S * (max(P, S) * 1.25 / S)^frac: log-uniform from S to just above P
        None,      // no cap: the fastest plan (whole-extent tiles)
    };
    Kind kind = None;
    double frac = 0;
};

struct SizeCase {
    int width = 0, height = 0;
    std::string why;  // "min", "min+1", "thin", "random", "large"
    std::vector<CapSpec> caps;
};

struct ModelCase {
    uint64_t seed = 0;
    std::string json;  // the model file's text
    Model model;
    std::string shape;  // a one-line summary ("chain", "residual", ...) for the log
    int min_side = 0;   // smallest valid side (width and height are independent)
    int batch = 1;
    bool image_gradient = false;  // the program trains without it; some draws ask for it
    std::vector<SizeCase> sizes;
    int draws() const {
        int n = 0;
        for (const auto &s : sizes) n += (int)s.caps.size();
        return n;
    }
};

inline std::string describe(const CapSpec &c) {
    std::ostringstream s;
    switch (c.kind) {
    case CapSpec::Below: s << "below the smallest (x" << c.frac << ")"; break;
    case CapSpec::Smallest: s << "the smallest feasible"; break;
    case CapSpec::Between: s << "between the smallest and the uncapped peak (" << c.frac << ")"; break;
    case CapSpec::None: s << "none"; break;
    }
    return s.str();
}

namespace detail {

using nlohmann::json;

class Generator {
public:
    explicit Generator(uint64_t seed) : rng_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}

    int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
    double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
    bool chance(double p) { return real(0, 1) < p; }
    template <typename T>
    T pick(const std::vector<T> &v) {
        return v[uniform(0, (int)v.size() - 1)];
    }
    template <typename T>
    T weighted(const std::vector<std::pair<T, double>> &v) {
        double total = 0;
        for (const auto &e : v) total += e.second;
        double r = real(0, total);
        for (const auto &e : v) {
            if (r < e.second) return e.first;
            r -= e.second;
        }
        return v.back().first;
    }

    struct T {
        std::string name;
        int ch = 0;
    };

    // A layer reading `inputs` (empty: the previous layer, written as such
    // only when it is the previous one, so chains look like chains).
    T emit(const std::string &type, json fields, const std::vector<T> &inputs, int out_ch) {
        json l;
        l["name"] = "l" + std::to_string(layers_.size()) + "_" + type;
        l["type"] = type;
        if (inputs.size() == 1 && inputs[0].name == last_) {
            // default input: the previous layer
        } else if (inputs.size() == 1) {
            l["inputs"] = inputs[0].name;
        } else {
            json a = json::array();
            for (const auto &t : inputs) a.push_back(t.name);
            l["inputs"] = a;
        }
        for (auto &[k, v] : fields.items()) l[k] = v;
        layers_.push_back(l);
        last_ = l["name"];
        return {last_, out_ch};
    }

    // Groups that divide both channel counts: 1 mostly, sometimes more
    // (depthwise when in == out and groups == in).
    int draw_groups(int in, int out) {
        std::vector<int> g;
        for (int k = 2; k <= std::min(in, out); k++)
            if (in % k == 0 && out % k == 0) g.push_back(k);
        if (g.empty() || chance(0.6)) return 1;
        return pick(g);
    }

    // Output channels for a conv from `in`, 1..8, sometimes a multiple of
    // a divisor of `in` so groups have something to divide.
    int draw_channels(int in) {
        if (chance(0.3) && in > 1) return std::min(8, in * uniform(1, 2));
        return uniform(1, 8);
    }

    T conv(T x, int out, bool keep_size) {
        json f;
        const int k = keep_size ? weighted<int>({{1, 2}, {3, 5}, {5, 2}, {7, 1}})
                                : weighted<int>({{1, 2}, {3, 5}, {5, 2}, {7, 1}});
        const int d = k > 1 && chance(0.25) ? 2 : 1;
        const int s = keep_size ? 1 : (chance(0.3) ? 2 : 1);
        const int half = d * (k - 1) / 2;
        int p;
        if (keep_size) p = half;
        else p = weighted<int>({{half, 5}, {0, 3}, {uniform(0, half + 1), 2}});
        const int g = draw_groups(x.ch, out);
        f["out_channels"] = out;
        f["kernel"] = k;
        if (s != 1 || chance(0.2)) f["stride"] = s;
        if (p != 0 || chance(0.2)) f["padding"] = p;
        if (d != 1) f["dilation"] = d;
        if (g != 1) f["groups"] = g;
        if (chance(0.25)) f["bias"] = false;
        return emit("conv2d", f, {x}, out);
    }
    // A stride-2 conv that maps n to ceil(n/2) (3x3 pad 1 or 1x1 pad 0), so
    // two of them on one tensor agree at every size.
    T conv_half(T x, int out, int k) {
        json f{{"out_channels", out}, {"kernel", k}, {"stride", 2}, {"padding", k / 2}};
        const int g = draw_groups(x.ch, out);
        if (g != 1) f["groups"] = g;
        return emit("conv2d", f, {x}, out);
    }
    T activation(T x) {
        switch (uniform(0, 2)) {
        case 0: return emit("relu", json::object(), {x}, x.ch);
        case 1: {
            json f = json::object();
            if (chance(0.7)) f["negative_slope"] = pick<double>({0.1, 0.2, 0.01, 0.3});
            return emit("leaky_relu", f, {x}, x.ch);
        }
        default: return emit("sigmoid", json::object(), {x}, x.ch);
        }
    }
    T batch_norm(T x) {
        json f = json::object();
        if (chance(0.3)) f["eps"] = 1e-3;
        return emit("batch_norm", f, {x}, x.ch);
    }
    T pool(T x, bool keep_size) {
        const std::string type = chance(0.5) ? "max_pool" : "avg_pool";
        json f;
        if (keep_size) {
            f = {{"kernel", 3}, {"stride", 1}, {"padding", 1}};
        } else {
            const int k = weighted<int>({{2, 5}, {3, 3}});
            const int s = weighted<int>({{k, 5}, {1, 2}, {2, 2}});
            const int p = uniform(0, k / 2);
            f["kernel"] = k;
            if (s != k || chance(0.2)) f["stride"] = s;
            if (p) f["padding"] = p;
        }
        return emit(type, f, {x}, x.ch);
    }
    T upsample(T x, int factor) {
        json f = json::object();
        if (factor != 2 || chance(0.3)) f["factor"] = factor;
        return emit("upsample", f, {x}, x.ch);
    }

    Model finish(int input_channels, const std::string &loss) {
        json m;
        m["name"] = name_;
        m["input_channels"] = input_channels;
        m["layers"] = layers_;
        m["loss"] = json{{"type", loss}};
        text_ = m.dump(1);
        return parse_model_json(text_, name_ + ".json");
    }

    std::mt19937_64 rng_;
    json layers_ = json::array();
    std::string last_ = "input";
    std::string name_;
    std::string text_;
};

// Whether a square image of side e passes every size check of the model.
inline bool side_valid(const Model &m, int e) {
    try {
        m.shapes_unchecked(e, e);
        return true;
    } catch (const ModelError &) {
        return false;
    }
}

}  // namespace detail

// The model of `seed`: the same every time. Retries the draw (with the
// next sub-seed) until the model's smallest side is at most 24 and its
// feature maps stay small.
inline ModelCase draw_model(uint64_t seed) {
    using detail::json;
    for (uint64_t attempt = 0;; attempt++) {
        detail::Generator g(seed * 1000003ull + attempt);
        g.name_ = "random_" + std::to_string(seed);
        using T = detail::Generator::T;
        const int cin = g.weighted<int>({{1, 3}, {2, 1}, {3, 3}});
        T x{"input", cin};
        const int budget = g.uniform(2, 6);
        int used = 0;
        int upscale = 1;
        std::vector<std::string> kinds;
        bool dag = false;
        // Earlier tensors with the extent of x at every image size (no layer
        // since them changed extents): what a long skip may read. The image
        // is one, so later segments can read the image's checkpoint.
        std::vector<T> same_extent = {x};
        while (used < budget) {
            const size_t layers_before = g.layers_.size();
            const int left = budget - used;
            enum Block { Conv, ConvAct, ConvBnAct, Act, Bn, Pool, Up, Residual, ResidualDown, Residual3, Concat, UNet, UpDown, LongSkip };
            std::vector<std::pair<Block, double>> choices = {{Conv, 3}, {Act, 1}, {Bn, 0.5}, {Pool, 1.5}};
            std::vector<T> skips;
            for (const auto &t : same_extent)
                if (t.name != x.name) skips.push_back(t);
            if (!skips.empty()) choices.push_back({LongSkip, 2});
            if (left >= 2) {
                choices.push_back({ConvAct, 3});
                choices.push_back({Concat, 1.5});
                if (upscale < 4) choices.push_back({Up, 0.7});
            }
            if (left >= 3) {
                choices.push_back({ConvBnAct, 1.5});
                choices.push_back({Residual, 2});
                choices.push_back({ResidualDown, 1});
                choices.push_back({UpDown, 0.7});
            }
            if (left >= 4) {
                choices.push_back({Residual3, 0.7});
                choices.push_back({UNet, 1.5});
            }
            const Block b = g.weighted(choices);
            switch (b) {
            case Conv:
                x = g.conv(x, g.draw_channels(x.ch), false);
                used += 1;
                kinds.push_back("conv");
                break;
            case ConvAct:
                x = g.activation(g.conv(x, g.draw_channels(x.ch), false));
                used += 2;
                kinds.push_back("conv+act");
                break;
            case ConvBnAct:
                x = g.activation(g.batch_norm(g.conv(x, g.draw_channels(x.ch), false)));
                used += 3;
                kinds.push_back("conv+bn+act");
                break;
            case Act:
                x = g.activation(x);
                used += 1;
                kinds.push_back("act");
                break;
            case Bn:
                x = g.batch_norm(x);
                used += 1;
                kinds.push_back("bn");
                break;
            case Pool:
                x = g.pool(x, g.chance(0.2));
                used += 1;
                kinds.push_back("pool");
                break;
            case Up: {
                const int f = g.chance(0.8) ? 2 : 3;
                x = g.upsample(x, f);
                upscale *= f;
                x = g.conv(x, g.draw_channels(x.ch), false);
                used += 2;
                kinds.push_back("up+conv");
                break;
            }
            case Residual: {
                // x -> conv (same size, same channels) [-> act [-> conv]] -> add(x, .)
                T y = g.conv(x, x.ch, true);
                int n = 2;
                if (left >= 4 && g.chance(0.6)) {
                    y = g.conv(g.activation(y), x.ch, true);
                    n += 2;
                }
                const bool swap = g.chance(0.3);
                x = g.emit("add", json::object(), swap ? std::vector<T>{y, x} : std::vector<T>{x, y}, x.ch);
                used += n;
                if (used < budget && g.chance(0.5)) {
                    x = g.activation(x);
                    used++;
                }
                dag = true;
                kinds.push_back("residual");
                break;
            }
            case ResidualDown: {
                // Two stride-2 branches that agree at every size: 3x3 pad 1 and 1x1 pad 0.
                const int c2 = g.draw_channels(x.ch);
                T a = g.conv_half(x, c2, 3);
                T b2 = g.conv_half(x, c2, 1);
                x = g.emit("add", json::object(), {a, b2}, c2);
                used += 3;
                dag = true;
                kinds.push_back("residual-down");
                break;
            }
            case Residual3: {
                T a = g.conv(x, x.ch, true);
                T b2 = g.activation(g.conv(x, x.ch, true));
                x = g.emit("add", json::object(), {a, x, b2}, x.ch);
                used += 4;
                dag = true;
                kinds.push_back("add3");
                break;
            }
            case Concat: {
                // [conv(x), x | pool3s1(x) | conv(x)] along channels.
                T a = g.conv(x, g.uniform(1, 6), true);
                T b2 = x;
                int n = 2;
                const int which = g.uniform(0, 2);
                if (which == 1 && left >= 3) {
                    b2 = g.pool(x, true);
                    n++;
                } else if (which == 2 && left >= 3) {
                    b2 = g.conv(x, g.uniform(1, 6), true);
                    n++;
                }
                const bool swap = g.chance(0.5);
                x = g.emit("concat", json::object(), swap ? std::vector<T>{b2, a} : std::vector<T>{a, b2}, a.ch + b2.ch);
                used += n;
                dag = true;
                kinds.push_back("concat");
                break;
            }
            case UNet: {
                // x -> pool 2 -> conv (same) -> upsample 2 -> concat [up, x]:
                // sides of x must be even.
                T p = g.emit(g.chance(0.5) ? "max_pool" : "avg_pool", json{{"kernel", 2}}, {x}, x.ch);
                T c = g.conv(p, g.draw_channels(x.ch), true);
                T u = g.upsample(c, 2);
                x = g.emit("concat", json::object(), {u, x}, u.ch + x.ch);
                used += 4;
                dag = true;
                kinds.push_back("unet");
                break;
            }
            case LongSkip: {
                // add (equal channels) or concat x with an earlier tensor of
                // its extent, across whatever layers and cuts lie between.
                const T t = g.pick(skips);
                const bool swap = g.chance(0.5);
                const std::vector<T> in = swap ? std::vector<T>{t, x} : std::vector<T>{x, t};
                if (t.ch == x.ch && g.chance(0.6)) x = g.emit("add", json::object(), in, x.ch);
                else x = g.emit("concat", json::object(), in, x.ch + t.ch);
                used += 1;
                dag = true;
                kinds.push_back(t.name == "input" ? "skip-from-image" : "long-skip");
                break;
            }
            case UpDown: {
                // upsample 2 -> 3x3 stride-2 pad-1 conv (back to n) -> add with x.
                T u = g.upsample(x, 2);
                T c = g.conv_half(u, x.ch, 3);
                x = g.emit("add", json::object(), {c, x}, x.ch);
                used += 3;
                dag = true;
                kinds.push_back("up-down");
                break;
            }
            }
            const size_t fixup_at = g.layers_.size();
            if (x.ch > 12) {  // keep concats from widening without bound
                x = g.conv(x, g.uniform(2, 8), false);
                used++;
            }
            // Did the block change extents? The DAG blocks keep them by
            // construction; for the others every conv and pool must.
            auto identity = [&](size_t from, size_t to) {
                for (size_t i = from; i < to; i++) {
                    const json &l = g.layers_[i];
                    const std::string type = l["type"];
                    const int k = l.value("kernel", 1), st = l.value("stride", type == "conv2d" ? 1 : k),
                              pd = l.value("padding", 0), d = l.value("dilation", 1);
                    if ((type == "conv2d" || type == "max_pool" || type == "avg_pool") && !(st == 1 && 2 * pd == d * (k - 1)))
                        return false;
                    if (type == "upsample") return false;
                }
                return true;
            };
            const bool dag_block = b == Residual || b == Residual3 || b == Concat || b == UNet || b == UpDown || b == LongSkip;
            const bool keeps = (dag_block || identity(layers_before, fixup_at)) && identity(fixup_at, g.layers_.size());
            if (!keeps) same_extent.clear();
            same_extent.push_back(x);
        }

        // The head.
        enum Head { GapDense, GapDense2, ConvGap, ConvGapFlatten, FlattenDense, SegMap, Regression };
        const Head h = g.weighted<Head>(
            {{GapDense, 3}, {GapDense2, 1}, {ConvGap, 2}, {ConvGapFlatten, 1}, {FlattenDense, 1}, {SegMap, 3}, {Regression, 1}});
        std::string loss = "softmax_cross_entropy";
        const int classes = g.uniform(2, 4);
        std::string head_name;
        bool flatten_dense = false;
        switch (h) {
        case GapDense:
        case GapDense2: {
            T p = g.emit("global_avg_pool", json::object(), {x}, x.ch);
            T f = g.emit("flatten", json::object(), {p}, x.ch);
            if (h == GapDense2) f = g.emit("dense", json{{"out_features", g.uniform(2, 6)}}, {f}, 0);
            json d{{"out_features", classes}};
            if (g.chance(0.2)) d["bias"] = false;
            g.emit("dense", d, {f}, classes);
            head_name = h == GapDense ? "gap-dense" : "gap-dense-dense";
            break;
        }
        case ConvGap:
        case ConvGapFlatten: {
            T c = g.emit("conv2d", json{{"out_channels", classes}, {"kernel", 1}}, {x}, classes);
            T p = g.emit("global_avg_pool", json::object(), {c}, classes);
            if (h == ConvGapFlatten) g.emit("flatten", json::object(), {p}, classes);
            head_name = h == ConvGap ? "conv-gap" : "conv-gap-flatten";
            break;
        }
        case FlattenDense: {
            // in_features is the map's C*H*W at the model's one image size:
            // filled in below once the size is drawn.
            T f = g.emit("flatten", json::object(), {x}, x.ch);
            g.emit("dense", json{{"out_features", classes}, {"in_features", 0}}, {f}, classes);
            head_name = "flatten-dense";
            flatten_dense = true;
            break;
        }
        case SegMap: {
            loss = "mse";
            const int k = g.uniform(1, 3);
            T c = g.emit("conv2d", json{{"out_channels", k}, {"kernel", g.chance(0.5) ? 1 : 3}, {"padding", 0}}, {x}, k);
            // A 3x3 head conv without padding: fix to same.
            if (g.layers_.back()["kernel"] == 3) g.layers_.back()["padding"] = 1;
            if (g.chance(0.3)) g.emit("sigmoid", json::object(), {c}, k);
            head_name = "seg-map";
            break;
        }
        case Regression: {
            loss = g.chance(0.5) ? "mse" : "mean_squared_error";
            T p = g.emit("global_avg_pool", json::object(), {x}, x.ch);
            T f = g.emit("flatten", json::object(), {p}, x.ch);
            g.emit("dense", json{{"out_features", g.uniform(1, 3)}}, {f}, 0);
            head_name = "regression";
            break;
        }
        }

        // Sizes: valid sides are independent per axis (every check is per
        // axis), so the smallest valid side is found on squares.
        json saved_layers = g.layers_;
        if (flatten_dense) {
            // Probe with a model that stops at the flatten's input.
            g.layers_.erase(g.layers_.end() - 2, g.layers_.end());
            g.last_ = g.layers_.back()["name"];
        }
        Model probe;
        try {
            probe = g.finish(cin, flatten_dense ? "mse" : loss);
        } catch (const ModelError &) {
            continue;  // e.g. an mse probe of a classification model: redraw
        }
        int min_side = 0;
        for (int e = 1; e <= 64; e++)
            if (detail::side_valid(probe, e)) {
                min_side = e;
                break;
            }
        if (min_side == 0 || min_side > 24) continue;
        auto valid_at_least = [&](int e) {
            for (int k = e; k < e + 64; k++)
                if (detail::side_valid(probe, k)) return k;
            return 0;
        };
        auto valid_near = [&](int e) {
            const int a = valid_at_least(std::max(e, min_side));
            return a ? a : min_side;
        };
        ModelCase mc;
        mc.seed = seed;
        mc.min_side = min_side;
        mc.batch = g.chance(0.25) ? 2 : 1;
        mc.image_gradient = g.chance(0.25);
        const int nsizes = flatten_dense ? 1 : (g.chance(0.4) ? 2 : 1);
        // Feature maps are at most (64 * upscale)^2 x 12: keep work small.
        const int max_side = std::max(min_side + 2, 64 / std::max(1, upscale / 2));
        for (int k = 0; k < nsizes; k++) {
            SizeCase s;
            s.why = g.weighted<std::string>(
                {{"min", 1}, {"min+1", 2}, {"thin", 1.5}, {"random", 3}, {"large", upscale <= 2 && !flatten_dense ? 0.6 : 0}});
            if (s.why == "min") {
                s.width = s.height = min_side;
                if (g.chance(0.5)) s.width = valid_near(g.uniform(min_side, max_side));
            } else if (s.why == "min+1") {
                const int one_over = valid_at_least(min_side + 1);
                s.width = one_over ? one_over : min_side;
                s.height = valid_near(g.uniform(min_side, max_side));
                if (g.chance(0.5)) std::swap(s.width, s.height);
            } else if (s.why == "thin") {
                // 16x1024 scaled down: one side near 8, the other near 200.
                s.width = valid_near(std::max(min_side, g.uniform(6, 10)));
                s.height = valid_near(g.uniform(150, 220) / std::max(1, upscale));
                if (g.chance(0.5)) std::swap(s.width, s.height);
            } else if (s.why == "large") {
                // The sizes of the reports (96x128, 97x131), at 1-12 channels.
                s.width = valid_near(g.uniform(65, 131) / upscale);
                s.height = valid_near(g.uniform(65, 131) / upscale);
            } else {
                s.width = valid_near(g.uniform(min_side, max_side));
                s.height = valid_near(g.uniform(min_side, max_side));
            }
            const int ncaps = g.weighted<int>({{2, 2}, {3, 3}, {4, 1}});
            for (int c = 0; c < ncaps; c++) {
                CapSpec cs;
                // The smallest cap and no cap are one cap each: at most once per size.
                bool smallest = false, none = false;
                for (const auto &e : s.caps) {
                    smallest |= e.kind == CapSpec::Smallest;
                    none |= e.kind == CapSpec::None;
                }
                cs.kind = g.weighted<CapSpec::Kind>({{CapSpec::Below, 1},
                                                     {CapSpec::Smallest, smallest ? 0 : 1.2},
                                                     {CapSpec::Between, 2.5},
                                                     {CapSpec::None, none ? 0 : 0.8}});
                cs.frac = cs.kind == CapSpec::Below ? g.real(0.2, 0.97) : cs.kind == CapSpec::Between ? g.real(0, 1) : 0;
                s.caps.push_back(cs);
            }
            mc.sizes.push_back(s);
        }
        g.layers_ = saved_layers;
        g.last_ = g.layers_.back()["name"];
        if (flatten_dense) {
            const TensorShape t = probe.shapes(mc.sizes[0].width, mc.sizes[0].height).back();
            g.layers_.back()["in_features"] = t.width * t.height * t.channels;
            if (t.width * t.height * t.channels > 4096) continue;  // a dense of that many inputs is no small model
        }
        try {
            mc.model = g.finish(cin, loss);
        } catch (const ModelError &e) {
            // The generator draws valid models only: a refusal is its bug.
            throw std::logic_error(std::string("random model ") + std::to_string(seed) + ": " + e.what() + "\n" +
                                   g.text_);
        }
        mc.json = g.text_;
        for (const auto &s : mc.sizes) mc.model.shapes(s.width, s.height);  // throws if a size is invalid
        std::string shape = dag ? "dag" : "chain";
        for (const auto &k : kinds) shape += " " + k;
        mc.shape = shape + " | " + head_name;
        return mc;
    }
}

}  // namespace segtile::random_models
