// The region maps of spec/region_map.h (input_span, required_boxes: what
// the executor allocates and the kernels read) against Halide's own bounds
// inference on the layer Funcs of generators/layers.
//
// Halide's answer comes from Halide::Internal::boxes_required applied to each
// Func's definitions (pure and update, RDoms bounded by their domains), from
// the output back to the input in topological order: the same per-definition
// box computation that Halide's bounds inference does, without compiling.
// A few pipelines are also JIT-compiled and asked for their input bounds
// (Pipeline::infer_input_bounds) to check that walk against the real thing.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "Halide.h"
#include "generators/layers/activation.h"
#include "generators/layers/convolution.h"
#include "generators/layers/joins.h"
#include "generators/layers/pooling.h"
#include "generators/layers/resampling.h"
#include "generators/model_graph.h"
#include "spec/builder.h"
#include "spec/region_map.h"
#include "test/layer_cases.h"

namespace segtile {
namespace {

namespace HI = Halide::Internal;
using Halide::Expr;
using Halide::Func;
using Halide::ImageParam;

// ---------------------------------------------------------------------------
// The production maps (spec/region_map.h) on inclusive integer intervals.

struct Interval {
    int64_t lo = 0, hi = -1;  // empty when hi < lo
    int64_t extent() const { return hi >= lo ? hi - lo + 1 : 0; }
    bool empty() const { return hi < lo; }
    bool operator==(const Interval &o) const { return lo == o.lo && hi == o.hi; }
};

struct Region {
    Interval x, y;
    bool empty() const { return x.empty() || y.empty(); }
    Region intersect(const Region &o) const {
        return {{std::max(x.lo, o.x.lo), std::min(x.hi, o.x.hi)}, {std::max(y.lo, o.y.lo), std::min(y.hi, o.y.hi)}};
    }
    bool operator==(const Region &o) const { return x == o.x && y == o.y; }
};

Interval input_interval(const Layer &l, const Interval &out) {
    if (out.empty()) return out;
    const Span<int64_t> in = input_span<int64_t, IntOps>(l, {out.lo, out.hi});
    return {in.lo, in.hi};
}

Region input_region(const Layer &l, const Region &out) { return {input_interval(l, out.x), input_interval(l, out.y)}; }

// required_boxes for layers 0..target producing `out` of `target`: every
// layer's needed region (index i) and the input's (index L); empty where
// nothing is needed.
std::vector<Region> required_regions(const Model &m, int target, const Region &out, int64_t width, int64_t height) {
    const auto shapes = m.shapes(width, height);
    const int L = (int)m.layers.size();
    using B = Box<int64_t>;
    std::vector<B> full(L + 1);
    for (int i = 0; i < L; i++) full[i] = {{0, shapes[i].width - 1}, {0, shapes[i].height - 1}};
    full[L] = {{0, width - 1}, {0, height - 1}};
    const B want{{out.x.lo, out.x.hi}, {out.y.lo, out.y.hi}};
    const auto need = required_boxes<int64_t, IntOps>(m, 0, target, {{target, want}}, full);
    std::vector<Region> r(L + 1);
    for (int i = 0; i <= L; i++)
        if (need[i]) r[i] = {{need[i]->x.lo, need[i]->x.hi}, {need[i]->y.lo, need[i]->y.hi}};
    return r;
}

// ---------------------------------------------------------------------------
// Halide's side.

// Box of every Func and image that computing `out` over `out_box` reads,
// keyed by name: Halide's boxes_required over each definition, propagated
// from consumers to producers.
std::map<std::string, HI::Box> halide_boxes(const Func &out, const HI::Box &out_box) {
    std::map<std::string, HI::Function> env = HI::find_transitive_calls(out.function());
    const std::vector<std::string> order = HI::topological_order({out.function()}, env);
    std::map<std::string, HI::Box> boxes;
    boxes[out.name()] = out_box;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const HI::Function &f = env.at(*it);
        auto found = boxes.find(f.name());
        if (found == boxes.end()) continue;  // not read
        const HI::Box box = found->second;
        auto visit = [&](const HI::Definition &d) {
            HI::Scope<HI::Interval> scope;
            for (size_t i = 0; i < f.args().size(); i++)
                scope.push(f.args()[i], HI::Interval(box[i].min, box[i].max));
            for (const auto &rv : d.schedule().rvars())
                scope.push(rv.var, HI::Interval(rv.min, HI::simplify(rv.min + rv.extent - 1)));
            std::vector<Expr> exprs = d.values();
            exprs.insert(exprs.end(), d.args().begin(), d.args().end());
            if (d.predicate().defined()) exprs.push_back(d.predicate());
            for (const Expr &e : exprs) {
                for (auto &[name, b] : HI::boxes_required(e, scope)) {
                    if (name == f.name()) continue;  // an update reading its own Func
                    auto dst = boxes.find(name);
                    if (dst == boxes.end())
                        boxes[name] = b;
                    else
                        HI::merge_boxes(dst->second, b);
                }
            }
        };
        visit(f.definition());
        for (const auto &u : f.updates()) visit(u);
    }
    for (auto &[name, b] : boxes)
        for (size_t i = 0; i < b.size(); i++) b[i] = HI::Interval(HI::simplify(b[i].min), HI::simplify(b[i].max));
    return boxes;
}

int64_t const_of(const Expr &e, const std::string &what) {
    auto v = HI::as_const_int(e);
    if (!v) {
        std::ostringstream s;
        s << e;
        ADD_FAILURE() << what << ": Halide's bound is not a constant: " << s.str();
        return 0;
    }
    return *v;
}

// The spatial (x, y) part of a Halide box.
Region spatial(const HI::Box &b, const std::string &what) {
    if (b.size() < 2) {
        ADD_FAILURE() << what << ": box has " << b.size() << " dimensions";
        return {};
    }
    return {{const_of(b[0].min, what + " x.min"), const_of(b[0].max, what + " x.max")},
            {const_of(b[1].min, what + " y.min"), const_of(b[1].max, what + " y.max")}};
}

HI::Box make_box(const Region &r, int channels) {
    HI::Box b;
    b.push_back(HI::Interval(Expr((int)r.x.lo), Expr((int)r.x.hi)));
    b.push_back(HI::Interval(Expr((int)r.y.lo), Expr((int)r.y.hi)));
    b.push_back(HI::Interval(Expr(0), Expr(channels - 1)));
    b.push_back(HI::Interval(Expr(0), Expr(0)));
    return b;
}

std::string str(const Interval &i) { return "[" + std::to_string(i.lo) + ", " + std::to_string(i.hi) + "]"; }
std::string str(const Region &r) { return "x " + str(r.x) + " y " + str(r.y); }

std::string describe(const Layer &l) {
    std::ostringstream s;
    s << to_string(l.kind);
    switch (l.kind) {
    case LayerKind::Conv2d:
        s << "(k" << l.kernel << " s" << l.stride << " p" << l.padding << " d" << l.dilation << ")";
        break;
    case LayerKind::MaxPool:
    case LayerKind::AvgPool: s << "(k" << l.kernel << " s" << l.stride << " p" << l.padding << ")"; break;
    case LayerKind::Upsample: s << "(f" << l.factor << ")"; break;
    default: break;
    }
    return s.str();
}

std::string describe(const std::vector<Layer> &chain) {
    std::string s;
    for (const auto &l : chain) s += (s.empty() ? "" : " -> ") + describe(l);
    return s;
}

// ---------------------------------------------------------------------------
// Random chains of spatial layers.

Layer conv_layer(int k, int s, int p, int d) {
    Layer l;
    l.kind = LayerKind::Conv2d;
    l.kernel = k, l.stride = s, l.padding = p, l.dilation = d;
    l.in_channels = 1, l.out_channels = 1, l.channels = 1, l.groups = 1;
    l.bias = false;
    return l;
}
Layer pool_layer(LayerKind kind, int k, int s, int p) {
    Layer l;
    l.kind = kind;
    l.kernel = k, l.stride = s, l.padding = p;
    l.in_channels = 1, l.channels = 1;
    return l;
}
Layer upsample_layer(int f) {
    Layer l;
    l.kind = LayerKind::Upsample;
    l.factor = f;
    l.in_channels = 1, l.channels = 1;
    return l;
}
Layer relu_layer() {
    Layer l;
    l.kind = LayerKind::Relu;
    l.in_channels = 1, l.channels = 1;
    return l;
}

std::vector<Layer> random_chain(std::mt19937 &rng) {
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::vector<Layer> chain;
    const int n = uni(1, 6);
    for (int i = 0; i < n; i++) {
        const int pick = uni(0, 9);
        if (pick < 4) {
            const int k = uni(1, 5);
            chain.push_back(conv_layer(k, uni(1, 3), uni(0, k / 2), uni(1, 3)));
        } else if (pick < 6) {
            const int k = uni(2, 3);
            chain.push_back(pool_layer(pick == 4 ? LayerKind::MaxPool : LayerKind::AvgPool, k, uni(1, 3),
                                       uni(0, k / 2)));
        } else if (pick < 8) {
            chain.push_back(upsample_layer(uni(2, 3)));
        } else {
            chain.push_back(relu_layer());
        }
    }
    return chain;
}

// The chain as Halide Funcs straight from the layer families, with no
// bounding wrapper: the raw region each layer reads.
struct HalideChain {
    ImageParam input{Halide::Float(32), 4, "input"};
    Func output;
};

HalideChain build_chain(const std::vector<Layer> &chain) {
    using namespace layers;
    HalideChain h;
    const Halide::Type t = Halide::Float(32);
    Dims v;
    Func cur = Func(h.input);
    for (size_t i = 0; i < chain.size(); i++) {
        const Layer &l = chain[i];
        const std::string name = "layer" + std::to_string(i);
        switch (l.kind) {
        case LayerKind::Conv2d: {
            Func w(name + "_w");
            w(v.x, v.y, v.c, v.n) = Halide::cast<float>(v.x + 2 * v.y + v.c + v.n);
            cur = conv2d(cur, w, Func(), l, t, name);
            break;
        }
        case LayerKind::MaxPool:
            // The image extents only mask padding taps (select); they do
            // not change what is read.
            cur = max_pool(cur, l, Expr(1 << 20), Expr(1 << 20), t, name);
            break;
        case LayerKind::AvgPool: cur = avg_pool(cur, l, t, name); break;
        case LayerKind::Upsample: cur = upsample_nearest(cur, l.factor, name); break;
        case LayerKind::Relu: cur = relu(cur, t, name); break;
        default: ADD_FAILURE() << "unexpected layer " << to_string(l.kind);
        }
    }
    h.output = cur;
    return h;
}

Region analytic_chain_region(const std::vector<Layer> &chain, Region r) {
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) r = input_region(*it, r);
    return r;
}

Region random_region(std::mt19937 &rng, int lo, int hi, int max_extent) {
    auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
    Region r;
    r.x.lo = uni(lo, hi);
    r.x.hi = r.x.lo + uni(1, max_extent) - 1;
    r.y.lo = uni(lo, hi);
    r.y.hi = r.y.lo + uni(1, max_extent) - 1;
    return r;
}

TEST(GeometryProperty, RandomChainsMatchHalideBoundsInference) {
    std::mt19937 rng(20240611);
    int chains = 0, regions = 0;
    for (int c = 0; c < 600; c++) {
        const std::vector<Layer> chain = random_chain(rng);
        HalideChain h = build_chain(chain);
        chains++;
        for (int k = 0; k < 4; k++) {
            const Region out = random_region(rng, -40, 40, 12);
            const Region want = analytic_chain_region(chain, out);
            const auto boxes = halide_boxes(h.output, make_box(out, 1));
            ASSERT_TRUE(boxes.count("input")) << describe(chain);
            const Region got = spatial(boxes.at("input"), describe(chain));
            regions++;
            ASSERT_EQ(got, want) << "chain " << describe(chain) << "\noutput " << str(out) << "\nHalide reads "
                                 << str(got) << "\nanalytic     " << str(want);
        }
    }
    EXPECT_EQ(chains, 600);
    EXPECT_EQ(regions, 2400);
}

// The boxes_required walk above against Halide's real bounds inference: JIT
// compile a few chains and ask each for the input it needs.
TEST(GeometryProperty, JitBoundsInferenceAgrees) {
    std::mt19937 rng(777);
    std::vector<std::vector<Layer>> chains = {
        {conv_layer(3, 2, 1, 1), upsample_layer(2), pool_layer(LayerKind::MaxPool, 3, 2, 1)},
        {upsample_layer(3), conv_layer(5, 3, 2, 2), relu_layer(), pool_layer(LayerKind::AvgPool, 2, 1, 1)},
    };
    for (int i = 0; i < 3; i++) chains.push_back(random_chain(rng));
    for (const auto &chain : chains) {
        HalideChain h = build_chain(chain);
        // Compute every Func at root so each update definition has a home.
        for (auto &[name, f] : HI::find_transitive_calls(h.output.function())) Func(f).compute_root();
        Halide::Pipeline p(h.output);
        for (int k = 0; k < 3; k++) {
            const Region out = random_region(rng, -20, 20, 8);
            Halide::Buffer<float> ob((int)out.x.extent(), (int)out.y.extent(), 1, 1);
            ob.set_min((int)out.x.lo, (int)out.y.lo, 0, 0);
            h.input.reset();
            try {
                p.infer_input_bounds(ob);
            } catch (const Halide::Error &e) {
                FAIL() << describe(chain) << ": " << e.what();
            }
            Halide::Buffer<> in = h.input.get();
            ASSERT_TRUE(in.defined());
            const Region got{{in.dim(0).min(), in.dim(0).max()}, {in.dim(1).min(), in.dim(1).max()}};
            const Region want = analytic_chain_region(chain, out);
            EXPECT_EQ(got, want) << "chain " << describe(chain) << "\noutput " << str(out) << "\nJIT reads "
                                 << str(got) << "\nanalytic  " << str(want);
            const Region walked = spatial(halide_boxes(h.output, make_box(out, 1)).at("input"), describe(chain));
            EXPECT_EQ(got, walked) << describe(chain);
        }
    }
}

// ---------------------------------------------------------------------------
// required_regions on DAGs against bounds inference on build_forward's
// bounded pipeline: there every tensor is read through a clamp to its image,
// so Halide's region of each layer's own Func is the analytic region.

struct ForwardPipeline {
    ImageParam input;
    std::vector<ImageParam> params;
    std::vector<Func> tensors;
};

ForwardPipeline build_model(const Model &m, int width, int height, int target) {
    ForwardPipeline fp{ImageParam(Halide::Float(32), 4, "input"), {}, {}};
    std::vector<Func> pf;
    int k = 0;
    for (const auto &s : m.params()) {
        fp.params.emplace_back(Halide::Float(32), (int)s.dims.size(), "param" + std::to_string(k++));
        pf.push_back(Func(fp.params.back()));
    }
    const auto bounds = whole_image_bounds(m, Expr(width), Expr(height));
    fp.tensors = build_forward(m, {{input_tensor(m), Func(fp.input)}}, pf, bounds, Halide::Float(32), 0, target);
    return fp;
}

void check_model(const Model &m, int width, int height, int target, std::mt19937 &rng, int cases) {
    const int L = (int)m.layers.size();
    const auto shapes = m.shapes(width, height);
    ForwardPipeline fp = build_model(m, width, height, target);
    const TensorShape ts = shapes[target];
    auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
    for (int k = 0; k < cases; k++) {
        // Random output regions that meet the image, some reaching past it.
        Region out;
        out.x.lo = uni(-3, ts.width - 1);
        out.x.hi = uni(std::max<int64_t>(out.x.lo, 0), ts.width + 2);
        out.y.lo = uni(-3, ts.height - 1);
        out.y.hi = uni(std::max<int64_t>(out.y.lo, 0), ts.height + 2);
        const std::vector<Region> need = required_regions(m, target, out, width, height);
        const auto boxes = halide_boxes(fp.tensors[target], make_box(out, (int)ts.channels));
        const std::string ctx = m.name + " target " + m.layers[target].name + " output " + str(out);
        for (int i = 0; i <= L; i++) {
            const bool is_input = i == L;
            const std::string fname = is_input ? "input" : "l_" + c_identifier(m.layers[i].name);
            const std::string what = ctx + ", tensor " + (is_input ? std::string("input") : m.layers[i].name);
            // Halide makes reused Func names unique by appending "$<n>".
            auto b = boxes.end();
            for (auto it = boxes.begin(); it != boxes.end(); ++it) {
                if (it->first.substr(0, it->first.find('$')) != fname) continue;
                ASSERT_TRUE(b == boxes.end()) << what << ": two Funcs named " << fname;
                b = it;
            }
            if (!is_input && (i > target || Model::is_global(m.layers[i].kind))) continue;
            if (need[i].empty()) {
                EXPECT_TRUE(b == boxes.end()) << what << ": analytic says unused, Halide reads "
                                              << str(spatial(b->second, what));
                continue;
            }
            ASSERT_TRUE(b != boxes.end()) << what << ": analytic needs " << str(need[i]) << ", Halide reads nothing";
            Region got = spatial(b->second, what);
            // Zero-preserving layers (relu, add, concat, upsample...) are not
            // clamped by build_forward: their consumers also read them in the
            // padding, where they are zero. What they compute inside the image
            // must equal the analytic region.
            if (!is_input && kind_info(m.layers[i].kind).zero_preserving)
                got = got.intersect({{0, shapes[i].width - 1}, {0, shapes[i].height - 1}});
            EXPECT_EQ(got, need[i]) << what;
        }
    }
}

Model unet_like() {
    return ModelBuilder("unet_like", 3)
        .conv2d("enc1", 4, 3).padding(1)
        .relu("enc1_relu")
        .max_pool("pool1", 2)
        .conv2d("enc2", 6, 3).padding(1)
        .relu("enc2_relu")
        .max_pool("pool2", 3).stride(2).padding(1)
        .conv2d("mid", 8, 5).padding(4).dilation(2)
        .relu("mid_relu")
        .upsample("up2", 2)
        .concat("cat2", {"up2", "enc2_relu"})
        .conv2d("dec2", 6, 3).padding(1)
        .relu("dec2_relu")
        .upsample("up1", 2)
        .concat("cat1", {"enc1_relu", "up1"})
        .conv2d("dec1", 4, 3).padding(1)
        .relu("dec1_relu")
        .conv2d("head", 2, 1)
        .loss(LossKind::MeanSquaredError)
        .build();
}

Model residual() {
    return ModelBuilder("residual", 3)
        .conv2d("stem", 4, 3).padding(1)
        .relu("stem_relu")
        // The 1x1 branch comes first in layer order, so the backward walk
        // meets its (smaller) region of stem_relu last.
        .conv2d("down", 8, 1).stride(2)
        .conv2d("a", 8, 3).stride(2).padding(1).inputs({"stem_relu"})
        .relu("a_relu")
        .conv2d("b", 8, 3).padding(1)
        .add("sum", {"b", "down"})
        .relu("sum_relu")
        .avg_pool("pool", 3).stride(1).padding(1)
        .conv2d("c", 8, 3).stride(2).padding(2).dilation(2)
        .conv2d("skip", 8, 1).stride(2).inputs({"pool"})
        .add("sum2", {"skip", "c"})
        .relu("out")
        .loss(LossKind::MeanSquaredError)
        .build();
}

// A classifier: the head needs its whole input, so every spatial tensor is
// needed whole.
Model classifier() {
    return ModelBuilder("classifier", 3)
        .conv2d("conv1", 4, 5).stride(2).padding(2)
        .relu("relu1")
        .max_pool("pool1", 3).stride(2).padding(1)
        .conv2d("conv2", 6, 3)
        .global_avg_pool("gap")
        .flatten("flat")
        .dense("fc", 5)
        .loss(LossKind::SoftmaxCrossEntropy)
        .build();
}

TEST(GeometryDag, UnetLikeRequiredRegionsMatchHalide) {
    const Model m = unet_like();
    std::mt19937 rng(11);
    check_model(m, 36, 28, m.find_layer("head"), rng, 40);
    check_model(m, 36, 28, m.find_layer("dec2_relu"), rng, 20);
    check_model(m, 24, 40, m.find_layer("head"), rng, 20);
}

TEST(GeometryDag, ResidualRequiredRegionsMatchHalide) {
    const Model m = residual();
    std::mt19937 rng(12);
    check_model(m, 33, 26, m.find_layer("out"), rng, 40);
    check_model(m, 33, 26, m.find_layer("sum_relu"), rng, 20);
    check_model(m, 16, 17, m.find_layer("out"), rng, 20);
}

// Every local kind of the layer-kind table, from its row's example
// (test/layer_cases.h): its AxisMap against Halide's bounds inference on
// its Func, both as the first layer and between two convs.
TEST(GeometryDag, EveryLocalKindMatchesHalide) {
    std::mt19937 rng(23);
    for (const LayerKindInfo &k : segtile::testing::local_kinds())
        for (bool between : {false, true}) {
            SCOPED_TRACE(std::string(k.name) + (between ? " between convs" : " on the image"));
            const Model m = segtile::testing::example_model(k, between);
            check_model(m, 13, 11, (int)m.layers.size() - 1, rng, 12);
        }
}

TEST(GeometryDag, ClassifierNeedsWholeImages) {
    const Model m = classifier();
    const int L = (int)m.layers.size();
    const int fc = m.find_layer("fc");
    const auto need = required_regions(m, fc, Region{{0, 0}, {0, 0}}, 41, 30);
    const auto shapes = m.shapes(41, 30);
    EXPECT_EQ(need[L], (Region{{0, 40}, {0, 29}}));
    for (int i = 0; i < fc; i++)
        if (!Model::is_global(m.layers[i].kind))
            EXPECT_EQ(need[i], (Region{{0, shapes[i].width - 1}, {0, shapes[i].height - 1}})) << m.layers[i].name;
    // Halide agrees: the global pooling reads its whole input.
    std::mt19937 rng(13);
    check_model(m, 41, 30, fc, rng, 3);
    // Below the head the regions are local again.
    check_model(m, 41, 30, m.find_layer("conv2"), rng, 20);
}

// Analytic and Halide agree on the model input through the JIT as well.
TEST(GeometryDag, JitInputBoundsMatchRequiredRegions) {
    const Model m = residual();
    const int width = 33, height = 26, target = m.find_layer("out");
    ForwardPipeline fp = build_model(m, width, height, target);
    for (auto &[name, f] : HI::find_transitive_calls(fp.tensors[target].function())) Func(f).compute_root();
    Halide::Pipeline p(fp.tensors[target]);
    const auto shapes = m.shapes(width, height);
    for (const Region out : {Region{{0, 3}, {2, 5}}, Region{{5, 8}, {6, 6}}, Region{{-2, 20}, {3, 40}}}) {
        Halide::Buffer<float> ob((int)out.x.extent(), (int)out.y.extent(), (int)shapes[target].channels, 1);
        ob.set_min((int)out.x.lo, (int)out.y.lo, 0, 0);
        fp.input.reset();
        for (auto &pp : fp.params) pp.reset();
        try {
            p.infer_input_bounds(ob);
        } catch (const Halide::Error &e) {
            FAIL() << e.what();
        }
        Halide::Buffer<> in = fp.input.get();
        ASSERT_TRUE(in.defined());
        const Region got{{in.dim(0).min(), in.dim(0).max()}, {in.dim(1).min(), in.dim(1).max()}};
        EXPECT_EQ(got, required_regions(m, target, out, width, height).back()) << "output " << str(out);
    }
}

// ---------------------------------------------------------------------------
// Unit checks.

TEST(GeometryUnit, InputIntervalPerLayer) {
    // conv: [lo*s - p, hi*s - p + d*(k-1)]
    EXPECT_EQ(input_interval(conv_layer(3, 1, 1, 1), {0, 9}), (Interval{-1, 10}));
    EXPECT_EQ(input_interval(conv_layer(3, 2, 1, 1), {2, 4}), (Interval{3, 9}));
    EXPECT_EQ(input_interval(conv_layer(3, 1, 2, 2), {0, 0}), (Interval{-2, 2}));
    EXPECT_EQ(input_interval(conv_layer(1, 2, 0, 1), {3, 5}), (Interval{6, 10}));
    // pools
    EXPECT_EQ(input_interval(pool_layer(LayerKind::MaxPool, 2, 2, 0), {0, 3}), (Interval{0, 7}));
    EXPECT_EQ(input_interval(pool_layer(LayerKind::AvgPool, 3, 2, 1), {1, 2}), (Interval{1, 5}));
    // upsample: floor division, also below zero
    EXPECT_EQ(input_interval(upsample_layer(2), {0, 3}), (Interval{0, 1}));
    EXPECT_EQ(input_interval(upsample_layer(2), {-1, 0}), (Interval{-1, 0}));
    EXPECT_EQ(input_interval(upsample_layer(2), {-3, -2}), (Interval{-2, -1}));
    EXPECT_EQ(input_interval(upsample_layer(3), {-4, -1}), (Interval{-2, -1}));
    EXPECT_EQ(input_interval(upsample_layer(3), {-3, 2}), (Interval{-1, 0}));
    EXPECT_EQ(input_interval(upsample_layer(3), {-7, -7}), (Interval{-3, -3}));
    // elementwise: identity; empty stays empty
    EXPECT_EQ(input_interval(relu_layer(), {-5, 7}), (Interval{-5, 7}));
    EXPECT_TRUE(input_interval(conv_layer(3, 1, 1, 1), Interval{}).empty());
}

}  // namespace
}  // namespace segtile
